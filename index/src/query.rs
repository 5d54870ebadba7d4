//! Queries: the listing in activity or creation order, and the literal full-text search.

use crate::{Error, Index, Result};
use rusqlite::params;

/// A listed session's status: the one its record authored, or `corrupt` for a session whose
/// files could not be read (its note says why).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RowStatus {
    /// The record's status.
    Authored(spex_engine::Status),
    /// The session could not be read.
    Corrupt,
}

impl RowStatus {
    /// The name the index stores and `--json` shows.
    pub const fn name(self) -> &'static str {
        match self {
            RowStatus::Authored(status) => status.name(),
            RowStatus::Corrupt => "corrupt",
        }
    }

    /// The status named `name`.
    pub fn parse(name: &str) -> Option<RowStatus> {
        match name {
            "corrupt" => Some(RowStatus::Corrupt),
            name => spex_engine::Status::parse(name).map(RowStatus::Authored),
        }
    }
}

impl rusqlite::types::FromSql for RowStatus {
    fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        stored_name(value, RowStatus::parse, "a session status")
    }
}

/// A value the index stores by its name, read back as its type; a name the index never writes
/// (a hand-edited index) is a conversion error naming it as `what`.
fn stored_name<T>(
    value: rusqlite::types::ValueRef<'_>,
    parse: fn(&str) -> Option<T>,
    what: &str,
) -> rusqlite::types::FromSqlResult<T> {
    let name = value.as_str()?;
    parse(name).ok_or_else(|| {
        rusqlite::types::FromSqlError::Other(
            format!("{what} the index never writes: {name:?}").into(),
        )
    })
}

/// One session as the index lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// The session id.
    pub id: String,
    /// Its status.
    pub status: RowStatus,
    /// Its proposal.
    pub proposal: Option<String>,
    /// Its note.
    pub note: Option<String>,
    /// Its display word.
    pub display: String,
    /// `createdAt`.
    pub created_at: Option<String>,
    /// Whether archived.
    pub archived: bool,
    /// The last activity, if any event was activity.
    pub last_activity: Option<String>,
    /// The index version of this row's last change.
    pub version: i64,
    /// The first line of the last message or note (at most 240 bytes).
    pub preview: Option<String>,
    /// How many messages it is owed (`None`: its queue could not be read).
    pub owed: Option<u64>,
    /// Its title: the record's, else the first line of the first message said to it.
    pub title: Option<String>,
}

impl Row {
    /// The row as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.id,
            "state": {
                "status": self.status.name(),
                "proposal": self.proposal,
                "note": self.note,
                "display": self.display,
            },
            "createdAt": self.created_at,
            "archived": self.archived,
            "lastActivity": self.last_activity,
            "preview": self.preview,
            "title": self.title,
            "owed": self.owed,
            "version": self.version,
        })
    }
}

/// How a listing is ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sort {
    /// Last activity first (sessions without activity by their creation time).
    Activity,
    /// Newest created first.
    Created,
}

/// What a listing shows.
#[derive(Clone, Debug)]
pub struct Filter {
    /// The order.
    pub sort: Sort,
    /// Only this status (stored name or display word).
    pub status: Option<String>,
    /// Include archived sessions.
    pub all: bool,
}

/// What a search hit is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HitKind {
    /// A message said to a spex session.
    Said,
    /// A declaration of a spex session (its note).
    Note,
    /// A person's message in a transcript.
    Prompt,
    /// The agent's answer in a transcript.
    Answer,
    /// A tool the agent ran, in a transcript.
    Tool,
    /// A session the listing names (every word is in its id, title or project).
    Session,
}

impl HitKind {
    /// The kind's name, as the index stores it and `--json` shows it.
    pub const fn name(self) -> &'static str {
        match self {
            HitKind::Said => "said",
            HitKind::Note => "note",
            HitKind::Prompt => "prompt",
            HitKind::Answer => "answer",
            HitKind::Tool => "tool",
            HitKind::Session => "session",
        }
    }

    /// The kind named `name`, as the index stores it.
    pub fn parse(name: &str) -> Option<HitKind> {
        [
            HitKind::Said,
            HitKind::Note,
            HitKind::Prompt,
            HitKind::Answer,
            HitKind::Tool,
            HitKind::Session,
        ]
        .into_iter()
        .find(|kind| kind.name() == name)
    }

    /// Whose words they are: `person`, `agent`, or `session` (the listing's).
    pub const fn side(self) -> &'static str {
        match self {
            HitKind::Answer | HitKind::Tool | HitKind::Note => "agent",
            HitKind::Session => "session",
            HitKind::Said | HitKind::Prompt => "person",
        }
    }
}

impl std::fmt::Display for HitKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

impl rusqlite::types::FromSql for HitKind {
    fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        stored_name(value, HitKind::parse, "a hit kind")
    }
}

/// Where a hit's text comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HitSource {
    /// A spex session's own timeline.
    Spex,
    /// A harness's transcript.
    Transcript(spex_history::Harness),
}

impl HitSource {
    /// The source's name, as the index stores it and `--json` and `--source` name it: `spex`,
    /// or the harness's name.
    pub const fn name(self) -> &'static str {
        match self {
            HitSource::Spex => "spex",
            HitSource::Transcript(harness) => harness.name(),
        }
    }

    /// The source named `name`.
    pub fn parse(name: &str) -> Option<HitSource> {
        match name {
            "spex" => Some(HitSource::Spex),
            name => spex_history::Harness::parse(name).map(HitSource::Transcript),
        }
    }
}

impl rusqlite::types::FromSql for HitSource {
    fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        stored_name(value, HitSource::parse, "a hit source")
    }
}

/// How a hit matched its query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Matched {
    /// Every word of the query matched whole words.
    Word,
    /// Every word is inside a session's id, or a history session's title or project: the hit
    /// names the session (kind `session`).
    Listing,
    /// Every word of at least three characters is inside the text (CJK, parts of identifiers).
    Substring,
}

impl Matched {
    /// The name `--json` shows (`match`).
    pub const fn name(self) -> &'static str {
        match self {
            Matched::Word => "word",
            Matched::Listing => "listing",
            Matched::Substring => "substring",
        }
    }
}

/// One search hit.
#[derive(Clone, Debug, PartialEq)]
pub struct Hit {
    /// The session.
    pub session: String,
    /// What it is.
    pub kind: HitKind,
    /// When.
    pub ts: Option<String>,
    /// The message id, for a message.
    pub mid: Option<String>,
    /// A session's own timeline, or the transcript of a harness.
    pub source: HitSource,
    /// The transcript line, for a transcript's hit.
    pub line: Option<u64>,
    /// A snippet of the matching text (`…` where it was cut), as plain text.
    pub snippet: String,
    /// The matches inside [`Hit::snippet`], as byte ranges, in order, not overlapping.
    pub marks: Vec<std::ops::Range<usize>>,
    /// bm25 rank (lower is better) of a word match; 0 for a substring match (those are listed
    /// newest first).
    pub rank: f64,
    /// How it matched; hits are listed word matches first, then the listing's, then substrings.
    pub matched: Matched,
}

impl Hit {
    /// The hit as every surface shows it: a transcript's snippet redacted (credentials and local
    /// identity, `spex_history::redact`); a session's own texts as stored, as its timeline shows
    /// them.
    pub fn shown(mut self, identity: &spex_history::Identity) -> Hit {
        if self.source != HitSource::Spex {
            let redacted = spex_history::redact(&self.snippet, identity);
            if redacted != self.snippet {
                // The marks are found again in the redacted text: what was marked and is still
                // shown (a redacted match is no longer there to mark).
                let marked: Vec<String> =
                    self.marks.iter().map(|range| self.snippet[range.clone()].to_owned()).collect();
                self.marks = mark_all(&redacted, &marked);
                self.snippet = redacted;
            }
        }
        self
    }

    /// The snippet with each match between `open` and `close` (`[`/`]` reads well, but cannot be
    /// told from brackets in the text: for tests and logs).
    pub fn marked(&self, open: &str, close: &str) -> String {
        let mut out = String::new();
        let mut at = 0;
        for range in &self.marks {
            out.push_str(&self.snippet[at..range.start]);
            out.push_str(open);
            out.push_str(&self.snippet[range.clone()]);
            out.push_str(close);
            at = range.end;
        }
        out.push_str(&self.snippet[at..]);
        out
    }

    /// A hit whose snippet still holds the index's marks: they become [`Hit::marks`].
    fn unmarked(mut self) -> Hit {
        let mut plain = String::with_capacity(self.snippet.len());
        let mut marks = Vec::new();
        let mut open = None;
        for c in self.snippet.chars() {
            match c {
                MARK_OPEN => open = Some(plain.len()),
                MARK_CLOSE => {
                    if let Some(start) = open.take()
                        && start < plain.len()
                    {
                        marks.push(start..plain.len());
                    }
                }
                c => plain.push(c),
            }
        }
        self.snippet = plain;
        self.marks = marks;
        self
    }

    /// The hit as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "session": self.session,
            "kind": self.kind.name(),
            "ts": self.ts,
            "mid": self.mid,
            "source": self.source.name(),
            "side": self.kind.side(),
            "line": self.line,
            "snippet": self.snippet,
            // Each match as [start, end) in characters (Unicode scalar values) of the snippet.
            "marks": self.marks.iter().map(|range| {
                let start = self.snippet[..range.start].chars().count();
                [start, start + self.snippet[range.clone()].chars().count()]
            }).collect::<Vec<_>>(),
            "rank": self.rank,
            "match": self.matched.name(),
        })
    }
}

/// Search filters.
#[derive(Clone, Debug, Default)]
pub struct SearchFilter {
    /// Only this session.
    pub session: Option<String>,
    /// Only sessions in this status (stored name or display word).
    pub status: Option<String>,
    /// Only events at or after this timestamp (ISO-8601, compared as text).
    pub since: Option<String>,
    /// Only this source: `spex`, or a harness (`claude`, `codex`).
    pub source: Option<String>,
    /// Only transcripts whose working directory is this directory or under it.
    pub project: Option<String>,
    /// At most this many hits.
    pub limit: usize,
}

impl Index {
    /// The listed sessions.
    pub fn sessions(&self, filter: &Filter) -> Result<Vec<Row>> {
        let order = match filter.sort {
            Sort::Activity => "COALESCE(last_activity, created_at) DESC, id",
            Sort::Created => "created_at DESC, id",
        };
        let sql = format!(
            "SELECT {ROW_COLUMNS}
             FROM sessions
             WHERE removed = 0 AND (?1 OR archived = 0)
               AND (?2 IS NULL OR status = ?2 OR display = ?2)
             ORDER BY {order}"
        );
        let mut statement = self.connection.prepare_cached(&sql).map_err(|e| self.sqlite(e))?;
        let rows = statement
            .query_map(params![filter.all, filter.status], |row| row_of(row, 0))
            .map_err(|e| self.sqlite(e))?;
        rows.collect::<rusqlite::Result<_>>().map_err(|e| self.sqlite(e))
    }

    /// Full-text search: first the texts where every word of the query is a whole word, ranked
    /// by bm25 with what was said to a session weighted above the notes it declared (and those
    /// above an agent's answers); then, to fill the limit, the texts where every word of at
    /// least three characters is a substring (ignoring case), newest first: always for a query
    /// with characters beyond ASCII (text without word breaks, such as Chinese or Japanese), and
    /// for an ASCII query when no whole word matched (part of an identifier). The query is taken
    /// literally: every whitespace-separated word is quoted, so FTS syntax in it is data.
    pub fn search(&self, query: &str, filter: &SearchFilter) -> Result<Vec<Hit>> {
        let literal = literal_query(query).ok_or(Error::EmptyQuery)?;
        let mut hits = self.search_in(&Phase::Words(literal), filter, filter.limit)?;
        let whole_words = hits.len();
        // The listing: sessions whose id, title or project holds every word, unless a text of
        // theirs is already a hit.
        let room = filter.limit.saturating_sub(hits.len());
        if room > 0 {
            let hit: std::collections::HashSet<(HitSource, String)> =
                hits.iter().map(|(_, hit)| (hit.source, hit.session.clone())).collect();
            let listed = self.listing_hits(query, filter)?;
            hits.extend(
                listed
                    .into_iter()
                    .filter(|listed| !hit.contains(&(listed.source, listed.session.clone())))
                    .take(room)
                    .map(|listed| (0, listed)),
            );
        }
        let beyond_ascii = !query.is_ascii();
        let room = filter.limit.saturating_sub(hits.len());
        if let Some((grams, words)) = substring_query(query)
            && room > 0
            && (beyond_ascii || whole_words == 0)
        {
            let found: std::collections::HashSet<i64> =
                hits.iter().map(|(id, _)| *id).filter(|id| *id != 0).collect();
            let phase = Phase::Substrings { query: grams, words };
            // Asked for enough to fill the room after dropping what the word search found.
            let more = self.search_in(&phase, filter, room + found.len())?;
            hits.extend(more.into_iter().filter(|(id, _)| !found.contains(id)).take(room));
        }
        Ok(hits.into_iter().map(|(_, hit)| hit).collect())
    }

    /// The sessions whose listing (a spex session's id; a history session's id, title and
    /// project) holds every word of `query` of any length, ignoring case, most recently active
    /// first, under the filters that apply to a listing.
    fn listing_hits(&self, query: &str, filter: &SearchFilter) -> Result<Vec<Hit>> {
        let words: Vec<String> = query
            .split(|c: char| c.is_whitespace() || c.is_control())
            .filter(|word| !word.is_empty())
            .map(str::to_owned)
            .collect();
        let mut candidates: Vec<Candidate> = Vec::new();
        let spex_wanted = filter.source.as_deref().is_none_or(|source| source == "spex")
            && filter.project.is_none();
        if spex_wanted {
            candidates.extend(self.session_candidates(&words, filter)?);
        }
        if filter.status.is_none() {
            candidates.extend(self.transcript_candidates(filter)?);
        }
        let mut hits: Vec<Hit> = candidates
            .into_iter()
            .filter(|candidate| {
                filter.session.as_deref().is_none_or(|session| session == candidate.session)
                    && filter.since.as_deref().is_none_or(|since| {
                        candidate.when.as_deref().is_some_and(|when| when >= since)
                    })
            })
            .filter_map(|Candidate { source, session, when: ts, text }| {
                let snippet = substring_snippet(&text, &words)?;
                Some(
                    Hit {
                        session,
                        kind: HitKind::Session,
                        ts,
                        mid: None,
                        source,
                        line: None,
                        snippet,
                        marks: Vec::new(),
                        rank: 0.0,
                        matched: Matched::Listing,
                    }
                    .unmarked(),
                )
            })
            .collect();
        hits.sort_by(|a, b| b.ts.cmp(&a.ts).then_with(|| a.session.cmp(&b.session)));
        Ok(hits)
    }

    /// The sessions whose ids hold every word (and have the status asked for), as listing
    /// candidates. Narrowed in SQL (ids hold ASCII only, so `lower` folds them whole): a search
    /// does not build a row for every session.
    fn session_candidates(
        &self,
        words: &[String],
        filter: &SearchFilter,
    ) -> Result<Vec<Candidate>> {
        let mut sql = String::from(
            "SELECT id, COALESCE(last_activity, created_at) FROM sessions WHERE removed = 0",
        );
        let lowered: Vec<String> = words.iter().map(|word| word.to_lowercase()).collect();
        for n in 0..lowered.len() {
            sql.push_str(&format!(" AND instr(lower(id), ?{}) > 0", n + 1));
        }
        if filter.status.is_some() {
            sql.push_str(&format!(" AND (status = ?{0} OR display = ?{0})", lowered.len() + 1));
        }
        let mut bound: Vec<&dyn rusqlite::ToSql> =
            lowered.iter().map(|word| word as &dyn rusqlite::ToSql).collect();
        if let Some(status) = &filter.status {
            bound.push(status);
        }
        let mut statement = self.connection.prepare(&sql).map_err(|e| self.sqlite(e))?;
        let rows = statement
            .query_map(bound.as_slice(), |row| Ok((row.get::<_, String>(0)?, row.get(1)?)))
            .map_err(|e| self.sqlite(e))?;
        let mut candidates = Vec::new();
        for row in rows {
            let (id, when) = row.map_err(|e| self.sqlite(e))?;
            candidates.push(Candidate {
                source: HitSource::Spex,
                session: id.clone(),
                when,
                text: id,
            });
        }
        Ok(candidates)
    }

    /// Every transcript of the harness and project asked for, as a listing candidate whose text
    /// is its id, title and directory.
    fn transcript_candidates(&self, filter: &SearchFilter) -> Result<Vec<Candidate>> {
        let mut candidates = Vec::new();
        for t in self.transcripts()? {
            if filter.source.as_deref().is_some_and(|source| source != t.harness) {
                continue;
            }
            if let Some(project) = &filter.project {
                let under = t.cwd.as_deref().is_some_and(|cwd| {
                    cwd == project
                        || cwd
                            .strip_prefix(project.as_str())
                            .is_some_and(|rest| rest.starts_with('/'))
                });
                if !under {
                    continue;
                }
            }
            let text = [Some(t.id.as_str()), t.title.as_deref(), t.cwd.as_deref()]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(" · ");
            let when = t.last_activity.clone().or(t.last_ts.clone());
            // The index records only the harnesses it reads.
            let Some(source) = HitSource::parse(&t.harness) else { continue };
            candidates.push(Candidate { source, session: t.id, when, text });
        }
        Ok(candidates)
    }

    /// One search phase, as content rowids and hits.
    fn search_in(
        &self,
        phase: &Phase,
        filter: &SearchFilter,
        limit: usize,
    ) -> Result<Vec<(i64, Hit)>> {
        let (query, sql, matched) = search_statement(phase, filter);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut statement = self.connection.prepare_cached(&sql).map_err(|e| self.sqlite(e))?;
        let mut bound: Vec<(&str, &dyn rusqlite::ToSql)> = vec![(":query", query)];
        if let Phase::Words(_) = phase {
            bound.push((":limit", &limit));
        }
        for (name, value) in [
            (":session", &filter.session),
            (":status", &filter.status),
            (":since", &filter.since),
            (":source", &filter.source),
            (":project", &filter.project),
        ] {
            if value.is_some() {
                bound.push((name, value));
            }
        }
        let rows = statement
            .query_map(bound.as_slice(), |row| {
                Ok((
                    row.get(0)?,
                    Hit {
                        session: row.get(1)?,
                        kind: row.get(2)?,
                        ts: row.get(3)?,
                        mid: row.get(4)?,
                        snippet: row.get(5)?,
                        marks: Vec::new(),
                        rank: row.get(6)?,
                        matched,
                        source: row.get(7)?,
                        line: row.get::<_, Option<i64>>(8)?.map(|line| line as u64),
                    },
                ))
            })
            .map_err(|e| self.sqlite(e))?;
        let mut hits = Vec::new();
        for row in rows {
            let (rowid, mut hit) = row.map_err(|e| self.sqlite(e))?;
            if let Phase::Substrings { words, .. } = phase {
                match substring_snippet(&hit.snippet, words) {
                    Some(snippet) => hit.snippet = snippet,
                    None => continue,
                }
            }
            hits.push((rowid, hit.unmarked()));
            if hits.len() as i64 >= limit {
                break;
            }
        }
        Ok(hits)
    }

    /// Every row and every content entry, in a canonical order (to compare two indexes).
    pub fn dump(&self) -> Result<String> {
        let mut out = String::new();
        for row in self.sessions(&Filter { sort: Sort::Created, status: None, all: true })? {
            let mut row = row;
            row.version = 0;
            out.push_str(&format!("{row:?}\n"));
        }
        let mut statement = self
            .connection
            .prepare(
                "SELECT session, kind, ts, mid, said, notes, answers, source, line FROM content
                 ORDER BY source, session, ts, kind, mid, said, notes, answers, line",
            )
            .map_err(|e| self.sqlite(e))?;
        let rows = statement
            .query_map([], |row| {
                Ok(format!(
                    "{:?}\n",
                    (
                        row.get::<_, String>(0)?,
                        row.get::<_, String>(1)?,
                        row.get::<_, Option<String>>(2)?,
                        row.get::<_, Option<String>>(3)?,
                        row.get::<_, Option<String>>(4)?,
                        row.get::<_, Option<String>>(5)?,
                        row.get::<_, Option<String>>(6)?,
                        row.get::<_, String>(7)?,
                        row.get::<_, Option<i64>>(8)?,
                    )
                ))
            })
            .map_err(|e| self.sqlite(e))?;
        for row in rows {
            out.push_str(&row.map_err(|e| self.sqlite(e))?);
        }
        // The trigram table mirrors the word table row for row (it keeps no text, so the rows
        // are compared by rowid): an entry of one without the other is a difference.
        let (grams, unmatched): (i64, i64) = self
            .connection
            .query_row(
                "SELECT (SELECT count(*) FROM grams),
                        (SELECT count(*) FROM grams g LEFT JOIN content c ON c.rowid = g.rowid
                          WHERE c.rowid IS NULL)
                        + (SELECT count(*) FROM content c LEFT JOIN grams g ON g.rowid = c.rowid
                            WHERE g.rowid IS NULL)",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .map_err(|e| self.sqlite(e))?;
        out.push_str(&format!("grams {grams}, unmatched {unmatched}\n"));
        for transcript in self.transcripts()? {
            out.push_str(&format!("{transcript:?}\n"));
        }
        Ok(out)
    }
}

/// The columns [`row_of`] reads, in its order, from a given column on.
pub(crate) const ROW_COLUMNS: &str = "id, status, proposal, note, display, created_at, archived, \
                                      last_activity, version, preview, owed, \
                                      COALESCE(record_title, first_said)";

pub(crate) fn row_of(row: &rusqlite::Row<'_>, from: usize) -> rusqlite::Result<Row> {
    Ok(Row {
        id: row.get(from)?,
        status: row.get(from + 1)?,
        proposal: row.get(from + 2)?,
        note: row.get(from + 3)?,
        display: row.get(from + 4)?,
        created_at: row.get(from + 5)?,
        archived: row.get(from + 6)?,
        last_activity: row.get(from + 7)?,
        version: row.get(from + 8)?,
        preview: row.get(from + 9)?,
        owed: row.get::<_, Option<i64>>(from + 10)?.map(|owed| owed.max(0) as u64),
        title: row.get(from + 11)?,
    })
}

/// `query` as an FTS5 query matching its words literally (each one a quoted string, all
/// required), or `None` when it has no words.
pub fn literal_query(query: &str) -> Option<String> {
    // Control characters (NUL above all, which FTS5 cannot take inside a string) separate words
    // like blanks: nothing stored is searched for by them.
    let words: Vec<String> = query
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|word| !word.is_empty())
        .map(|word| format!("\"{}\"", word.replace('"', "\"\"")))
        .collect();
    if words.is_empty() { None } else { Some(words.join(" ")) }
}

/// `query` as a trigram query: every trigram of every word of at least three characters
/// (each quoted, all required), with those words; `None` when no word is that long (a trigram
/// index cannot find shorter ones). The trigrams only select candidates: that each word is
/// inside the text is checked on the text itself ([`substring_snippet`]).
fn substring_query(query: &str) -> Option<(String, Vec<String>)> {
    let words: Vec<String> = query
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|word| word.chars().count() >= 3)
        .map(str::to_owned)
        .collect();
    let mut grams: Vec<String> = Vec::new();
    for word in &words {
        let chars: Vec<char> = word.chars().collect();
        for window in chars.windows(3) {
            let gram = format!("\"{}\"", window.iter().collect::<String>().replace('"', "\"\""));
            if !grams.contains(&gram) {
                grams.push(gram);
            }
        }
    }
    if words.is_empty() { None } else { Some((grams.join(" "), words)) }
}

/// How many characters a substring snippet shows on each side of its first match.
const SNIPPET_CONTEXT: usize = 40;

/// Where `needle` (already lower case) first occurs in `text` ignoring case, as a byte range
/// of `text`.
fn find_folded(text: &str, needle: &[char]) -> Option<(usize, usize)> {
    let starts = text.char_indices().map(|(at, _)| at);
    for start in starts {
        let mut folded = text[start..]
            .char_indices()
            .flat_map(|(at, c)| c.to_lowercase().map(move |lower| (at + c.len_utf8(), lower)));
        let mut end = start;
        let mut all = true;
        for want in needle {
            match folded.next() {
                Some((after, got)) if got == *want => end = start + after,
                _ => {
                    all = false;
                    break;
                }
            }
        }
        if all {
            return Some((start, end));
        }
    }
    None
}

/// Where a match opens and closes inside a snippet as the index cuts it: private-use characters
/// no stored text holds ([`unmarkable`] replaces them before anything is stored or cut).
const MARK_OPEN: char = '\u{E000}';
const MARK_CLOSE: char = '\u{E001}';

/// `text` with the index's two mark characters replaced (U+FFFD), so that a mark in a snippet
/// is always the index's own.
pub(crate) fn unmarkable(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains([MARK_OPEN, MARK_CLOSE]) {
        std::borrow::Cow::Owned(text.replace([MARK_OPEN, MARK_CLOSE], "\u{FFFD}"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// Every occurrence of each of `words` in `text` (exactly as written), as byte ranges in order;
/// an occurrence overlapping an earlier one is skipped.
fn mark_all(text: &str, words: &[String]) -> Vec<std::ops::Range<usize>> {
    let mut found: Vec<std::ops::Range<usize>> = words
        .iter()
        .filter(|word| !word.is_empty())
        .flat_map(|word| text.match_indices(word.as_str()).map(|(at, w)| at..at + w.len()))
        .collect();
    found.sort_by_key(|range| (range.start, std::cmp::Reverse(range.end)));
    let mut marks: Vec<std::ops::Range<usize>> = Vec::new();
    for range in found {
        if marks.last().is_none_or(|last| range.start >= last.end) {
            marks.push(range);
        }
    }
    marks
}

/// A snippet of `text` around the first of `words` found in it (ignoring case), every
/// occurrence in the window between the index's marks, cut ends marked `…`; `None` unless every
/// word is inside `text`.
fn substring_snippet(text: &str, words: &[String]) -> Option<String> {
    let text = unmarkable(text);
    let text = text.as_ref();
    let needles: Vec<Vec<char>> =
        words.iter().map(|word| word.chars().flat_map(char::to_lowercase).collect()).collect();
    let mut first: Option<(usize, usize)> = None;
    for needle in &needles {
        let found = find_folded(text, needle)?;
        if first.is_none_or(|first| found.0 < first.0) {
            first = Some(found);
        }
    }
    let (start, end) = first?;
    let from = text[..start].char_indices().rev().nth(SNIPPET_CONTEXT - 1).map_or(0, |(at, _)| at);
    let to = text[end..].char_indices().nth(SNIPPET_CONTEXT).map_or(text.len(), |(at, _)| end + at);
    let window = &text[from..to];
    let mut out = String::new();
    if from > 0 {
        out.push('…');
    }
    let mut at = 0;
    while at < window.len() {
        // The earliest occurrence of any word from here.
        let next = needles
            .iter()
            .filter_map(|needle| find_folded(&window[at..], needle))
            .min_by_key(|(start, end)| (*start, std::cmp::Reverse(*end)));
        let Some((start, end)) = next else { break };
        out.push_str(&window[at..at + start]);
        out.push(MARK_OPEN);
        out.push_str(&window[at + start..at + end]);
        out.push(MARK_CLOSE);
        at += end;
    }
    out.push_str(&window[at..]);
    if to < text.len() {
        out.push('…');
    }
    Some(out)
}

/// The two phases of a search.
enum Phase {
    /// Whole words, through the word table (an FTS5 query).
    Words(String),
    /// Substrings, through the trigram table: the trigram query, and the words each text must
    /// hold.
    Substrings { query: String, words: Vec<String> },
}

/// A listing candidate: where it comes from, its session, when it was last active, and the
/// text its words are looked for in.
struct Candidate {
    source: HitSource,
    session: String,
    when: Option<String>,
    text: String,
}

/// The statement of one search phase under `filter`, the query it matches and how its hits
/// matched. Only the filters that are set are in the statement: a per-row `?n IS NULL OR ...`
/// or a join with `sessions` for every match costs more than the ranking itself. No join is
/// needed for removed sessions: their content is deleted with them (`remove`).
fn search_statement<'a>(phase: &'a Phase, filter: &SearchFilter) -> (&'a String, String, Matched) {
    let (query, mut sql) = match phase {
        Phase::Words(query) => (
            query,
            "SELECT c.rowid, c.session, c.kind, c.ts, c.mid,
                    snippet(content, -1, char(57344), char(57345), '…', 16),
                    bm25(content, 2.0, 1.0, 0.5) AS rank, c.source, c.line
             FROM content c"
                .to_owned(),
        ),
        // The trigram table keeps no text (and no positions): the text comes from the word
        // table, where the substrings are checked and the snippet cut.
        Phase::Substrings { query, .. } => (
            query,
            "SELECT c.rowid, c.session, c.kind, c.ts, c.mid,
                    COALESCE(c.said, c.notes, c.answers, ''), 0.0, c.source, c.line
             FROM grams m JOIN content c ON c.rowid = m.rowid"
                .to_owned(),
        ),
    };
    let (table, matched) = match phase {
        Phase::Words(_) => ("content", Matched::Word),
        Phase::Substrings { .. } => ("grams", Matched::Substring),
    };
    if filter.status.is_some() {
        sql.push_str(" JOIN sessions s ON s.id = c.session AND s.removed = 0");
    }
    if filter.project.is_some() {
        sql.push_str(" JOIN transcripts t ON t.id = c.session AND t.harness = c.source");
    }
    sql.push_str(&format!(" WHERE {table} MATCH :query"));
    if filter.project.is_some() {
        // The directory itself, or one under it (compared as text: no LIKE wildcards).
        sql.push_str(
            " AND (t.cwd = :project OR (substr(t.cwd, 1, length(:project)) = :project
                   AND substr(t.cwd, length(:project) + 1, 1) = '/'))",
        );
    }
    if filter.session.is_some() {
        sql.push_str(" AND c.session = :session");
    }
    if filter.status.is_some() {
        sql.push_str(" AND (s.status = :status OR s.display = :status)");
    }
    if filter.since.is_some() {
        sql.push_str(" AND c.ts >= :since");
    }
    if filter.source.is_some() {
        sql.push_str(" AND c.source = :source");
    }
    match phase {
        Phase::Words(_) => sql.push_str(" ORDER BY rank LIMIT :limit"),
        // Candidates (every trigram present) newest first, read only until enough of them
        // hold every word.
        Phase::Substrings { .. } => sql.push_str(" ORDER BY m.rowid DESC"),
    }
    (query, sql, matched)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `substring_snippet`, with its marks as `[`/`]`.
    fn substring_snippet(text: &str, words: &[String]) -> Option<String> {
        super::substring_snippet(text, words).map(|marked| {
            let hit = Hit {
                session: String::new(),
                kind: HitKind::Said,
                ts: None,
                mid: None,
                source: HitSource::Spex,
                line: None,
                snippet: marked,
                marks: Vec::new(),
                rank: 0.0,
                matched: Matched::Substring,
            };
            hit.unmarked().marked("[", "]")
        })
    }

    #[test]
    fn substrings_are_found_ignoring_case_and_marked() {
        let words = |list: &[&str]| list.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            substring_snippet("the Redeployment failed", &words(&["eployme"])).unwrap(),
            "the Red[eployme]nt failed"
        );
        assert_eq!(substring_snippet("deploy ment", &words(&["eployme"])), None);
        assert_eq!(
            substring_snippet("本番環境へのデプロイが失敗しました", &words(&["デプロイ"])).unwrap(),
            "本番環境への[デプロイ]が失敗しました"
        );
        let long = format!("{}needle{}", "a".repeat(100), "b".repeat(100));
        let snippet = substring_snippet(&long, &words(&["NEEDLE"])).unwrap();
        assert_eq!(snippet, format!("…{}[needle]{}…", "a".repeat(40), "b".repeat(40)));
        assert_eq!(
            substring_query("ab abcd").unwrap(),
            (r#""abc" "bcd""#.to_owned(), words(&["abcd"]))
        );
        assert_eq!(substring_query("ab x"), None);
        // Brackets in the text are text; the marks are the index's own.
        assert_eq!(
            substring_snippet("arr[0] = needle]", &words(&["needle"])).unwrap(),
            "arr[0] = [needle]]"
        );
        // A text holding the mark characters cannot forge a mark.
        let forged = super::substring_snippet("a\u{E000}b\u{E001} needle", &words(&["needle"]));
        assert_eq!(forged.unwrap().matches(MARK_OPEN).count(), 1);
    }

    #[test]
    fn marks_survive_redaction_where_the_match_is_still_shown() {
        let hit = Hit {
            session: "s".to_owned(),
            kind: HitKind::Answer,
            ts: None,
            mid: None,
            source: HitSource::Transcript(spex_history::Harness::Codex),
            line: Some(1),
            snippet: "deploy with \u{E000}token\u{E001} sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA and \u{E000}token\u{E001}"
                .to_owned(),
            marks: Vec::new(),
            rank: 0.0,
            matched: Matched::Word,
        }
        .unmarked();
        assert_eq!(hit.marks.len(), 2);
        let shown = hit.shown(&spex_history::Identity::default());
        assert!(!shown.snippet.contains("AAAAAAAA"), "{}", shown.snippet);
        assert_eq!(shown.marked("[", "]").matches("[token]").count(), 2, "{}", shown.snippet);
        let json = shown.to_json();
        let first = &json["marks"][0];
        let chars: Vec<char> = shown.snippet.chars().collect();
        let start = first[0].as_u64().unwrap() as usize;
        let end = first[1].as_u64().unwrap() as usize;
        assert_eq!(chars[start..end].iter().collect::<String>(), "token");
    }

    #[test]
    fn queries_are_literal() {
        assert_eq!(literal_query("  "), None);
        assert_eq!(literal_query("\0"), None);
        assert_eq!(literal_query("a\0b").unwrap(), r#""a" "b""#);
        assert_eq!(literal_query("a OR b").unwrap(), r#""a" "OR" "b""#);
        assert_eq!(literal_query(r#"say "hi" NEAR(x*"#).unwrap(), r#""say" """hi""" "NEAR(x*""#);
    }
}
