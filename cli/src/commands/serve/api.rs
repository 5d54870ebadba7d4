//! The API's request handlers: each parses its path, query and body into an operation's input
//! (see `crate::ops`), runs it on the blocking pool and answers with the operation's JSON.

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::http::header::CONTENT_LENGTH;
use faultfs::RealFs;
use serde::Deserialize;
use serde_json::{Value, json};
use spex_engine::{Key, Position, SessionId, Store};

use super::reply::{Reply, body_error, index_error, op_error};
use super::{App, BODY_BYTES_MAX, HTTP_OPERATION, TIMELINE_LIMIT_MAX};
use crate::args::ReplyArg;
use crate::ops::{self, timeline::PageRequest};

/// Runs `work` on the blocking pool (engine and index calls block on the disk and on locks).
pub(super) async fn blocking(work: impl FnOnce() -> Reply + Send + 'static) -> Reply {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|error| Reply::error(500, format!("the request's work failed: {error}")))
}

pub(super) async fn session(State(app): State<App>, Path(id): Path<String>) -> Reply {
    blocking(move || session_blocking(&app.store, &id)).await
}

pub(super) async fn sessions(State(app): State<App>) -> Reply {
    blocking(move || list(&app.store)).await
}

pub(super) async fn search(State(app): State<App>, RawQuery(query): RawQuery) -> Reply {
    blocking(move || search_blocking(&app, query.as_deref().unwrap_or(""))).await
}

pub(super) async fn usage(State(app): State<App>, RawQuery(query): RawQuery) -> Reply {
    blocking(move || usage_blocking(&app, query.as_deref().unwrap_or(""))).await
}

pub(super) async fn history_export(
    State(app): State<App>,
    Path((harness, id)): Path<(String, String)>,
) -> Reply {
    blocking(move || history_export_blocking(&app, &harness, &id)).await
}

pub(super) async fn history_moved(
    State(app): State<App>,
    Path((harness, id)): Path<(String, String)>,
    body: Body,
) -> Reply {
    let body = match axum::body::to_bytes(body, BODY_BYTES_MAX).await {
        Ok(body) => body,
        Err(error) => return body_error(&error),
    };
    blocking(move || history_moved_blocking(&app, &harness, &id, &body)).await
}

pub(super) async fn fleet_history(State(app): State<App>) -> Reply {
    blocking(move || fleet_history_blocking(&app)).await
}

pub(super) async fn fleet_history_events(
    State(app): State<App>,
    Path((device, harness, id)): Path<(String, String, String)>,
    RawQuery(query): RawQuery,
) -> Reply {
    blocking(move || {
        fleet_history_events_blocking(&app, &device, &harness, &id, query.as_deref().unwrap_or(""))
    })
    .await
}

pub(super) async fn history_list(State(app): State<App>) -> Reply {
    blocking(move || history_blocking(&app)).await
}

pub(super) async fn history_events(
    State(app): State<App>,
    Path((harness, id)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Reply {
    blocking(move || history_events_blocking(&app, &harness, &id, query.as_deref().unwrap_or("")))
        .await
}

pub(super) async fn timeline(
    State(app): State<App>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Reply {
    blocking(move || timeline_blocking(&app.store, &id, query.as_deref().unwrap_or(""))).await
}

pub(super) async fn input(
    State(app): State<App>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Reply {
    // Lengths that disagree (request smuggling) never get here: the HTTP layer answers 400.
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > BODY_BYTES_MAX as u64) {
        return Reply::error(413, format!("the body is larger than {BODY_BYTES_MAX} bytes"));
    }
    let mut keys = headers.get_all("idempotency-key").iter();
    let key = match (keys.next(), keys.next()) {
        (None, _) => None,
        (Some(_), Some(_)) => return Reply::error(400, "more than one Idempotency-Key"),
        (Some(value), None) => match value.to_str() {
            Ok("") => return Reply::error(400, "Idempotency-Key is empty"),
            Ok(key) => Some(key.to_owned()),
            Err(_) => {
                return Reply::error(400, "Idempotency-Key must be visible ASCII characters");
            }
        },
    };
    let body = match axum::body::to_bytes(body, BODY_BYTES_MAX).await {
        Ok(body) => body,
        Err(error) => return body_error(&error),
    };
    blocking(move || input_blocking(&app.store, &id, key, &body)).await
}

/// The index of `store`, refreshed.
pub(super) fn fresh_index(store: &Store<RealFs>) -> Result<spex_index::Index, Reply> {
    let (index, healed) =
        spex_index::Index::open_refreshed(store, &|_| {}).map_err(|error| index_error(&error))?;
    if let Some(healed) = healed {
        eprintln!("spex serve: warning: {healed}");
    }
    Ok(index)
}

/// The index of the app's store, refreshed, with the transcripts under its roots scanned.
pub(super) fn fresh_index_with_history(app: &App) -> Result<spex_index::Index, Reply> {
    let mut index = fresh_index(&app.store)?;
    let found =
        spex_history::discover(&app.roots).map_err(|error| Reply::error(500, error.to_string()))?;
    index.scan_history(&found).map_err(|error| index_error(&error))?;
    Ok(index)
}

/// `GET /api/history`: every history session (harness transcript), as the watch stream's reset
/// carries them.
pub(super) fn history_blocking(app: &App) -> Reply {
    let index = match fresh_index_with_history(app) {
        Ok(index) => index,
        Err(reply) => return reply,
    };
    let moved = ops::fleet::moved(app.store.layout().root());
    match index.history() {
        Ok(history) => Reply::ok(json!({
            "history": history
                .into_iter()
                .map(|history| {
                    let key = (history.transcript.harness.clone(), history.transcript.id.clone());
                    let mut row = history.shown(&app.identity).to_json();
                    if let Some(record) = moved.get(&key) {
                        row["movedTo"] = record["to"].clone();
                    }
                    row
                })
                .collect::<Vec<_>>(),
        })),
        Err(error) => index_error(&error),
    }
}

/// `GET /api/fleet/history`: the history sessions of every device of this store's fleet (asked
/// at once, each within [`ops::fleet::ANSWER_WITHIN`]), each row naming its device and carrying
/// no path; a conversation that moved is listed by its new owner alone. `devices` says which
/// answered.
pub(super) fn fleet_history_blocking(app: &App) -> Reply {
    let fleet = match ops::fleet::Fleet::read(app.store.layout().root()) {
        Ok(fleet) => fleet,
        Err(error) => return Reply::error(500, format!("{error:#}")),
    };
    let answers = ops::fleet::ask_all(&fleet, "/api/history", ops::fleet::ANSWER_WITHIN);
    let rows: Vec<_> = answers.iter().flat_map(ops::fleet::Answer::history).collect();
    let devices: Vec<_> = answers.iter().map(ops::fleet::Answer::to_json).collect();
    Reply::ok(json!({ "history": rows, "devices": devices }))
}

/// `GET /api/fleet/:device/history/:harness/:id?limit=&before=`: a history session of another
/// device, read through that device's server (redacted there) and answered as
/// `GET /api/history/:harness/:id` answers, with its device named.
pub(super) fn fleet_history_events_blocking(
    app: &App,
    device: &str,
    harness: &str,
    id: &str,
    query: &str,
) -> Reply {
    let mut forwarded = form_urlencoded::Serializer::new(String::new());
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        match (name.as_ref(), value.parse::<u64>()) {
            ("limit" | "before", Ok(number)) => {
                forwarded.append_pair(&name, &number.to_string());
            }
            ("limit" | "before", Err(_)) => {
                return Reply::error(400, format!("{name} {value:?} is not a number"));
            }
            (other, _) => return Reply::error(400, format!("unknown query parameter {other:?}")),
        }
    }
    let fleet = match ops::fleet::Fleet::read(app.store.layout().root()) {
        Ok(fleet) => fleet,
        Err(error) => return Reply::error(500, format!("{error:#}")),
    };
    let Some(member) = fleet.member(device) else {
        return Reply::error(404, format!("no device {device:?} in the fleet"));
    };
    let path = ops::fleet::history_path(harness, id, &format!("?{}", forwarded.finish()));
    match ops::fleet::ask(member, &path, ops::fleet::ANSWER_WITHIN) {
        Ok(mut body) => {
            if let Some(history) = body["history"].as_object_mut() {
                history.remove("path");
                history.insert("device".to_owned(), json!({ "name": member.name, "here": false }));
            }
            Reply::ok(body)
        }
        Err(why) => Reply::error(502, format!("{device} did not answer: {why}")),
    }
}

/// The transcript of `harness`'s session `id`, found under the server's roots.
fn history_transcript(app: &App, harness: &str, id: &str) -> Result<spex_history::Found, Reply> {
    let Some(harness) = spex_history::Harness::parse(harness) else {
        return Err(Reply::error(
            404,
            format!("no harness {harness:?} (claude, codex or opencode)"),
        ));
    };
    let found =
        spex_history::discover(&app.roots).map_err(|error| Reply::error(500, error.to_string()))?;
    found
        .into_iter()
        .find(|found| found.harness == harness && found.id == id)
        .ok_or_else(|| Reply::error(404, "no such history session"))
}

/// `GET /api/history/:harness/:id/export`: the session's export as `spex history export --raw`
/// writes it (a tar compressed with zstd, unredacted: for a move to another device of the same
/// person, who holds this server's token), linked spex session included.
pub(super) fn history_export_blocking(app: &App, harness: &str, id: &str) -> Reply {
    let transcript = match history_transcript(app, harness, id) {
        Ok(transcript) => transcript,
        Err(reply) => return reply,
    };
    if let Some(why) = ops::export::refusal(&transcript) {
        return Reply::error(422, why);
    }
    let links = ops::list::harness_links(&app.store).unwrap_or_default();
    let spex = links.get(&(transcript.harness.name(), transcript.id.clone())).map(|(id, _)| id);
    match ops::export::archive(Some(&app.store), &transcript, spex.map(String::as_str), true) {
        Ok((_, bytes)) => Reply::archive(bytes),
        Err(error) => Reply::error(500, format!("{error:#}")),
    }
}

/// `POST /api/history/:harness/:id/moved` with `{"to": {"device": ID, "host": NAME}}`: records
/// that the session moved to that device (its new owner). The same move again changes nothing;
/// a move to another device than the one recorded is 409.
pub(super) fn history_moved_blocking(app: &App, harness: &str, id: &str, body: &[u8]) -> Reply {
    let Ok(document) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Reply::error(400, "the body is not JSON");
    };
    let to = &document["to"];
    if !to["device"].is_string() {
        return Reply::error(400, "to.device (the new owner's device id) is missing");
    }
    if let Err(reply) = history_transcript(app, harness, id) {
        return reply;
    }
    match ops::fleet::record_moved(app.store.layout().root(), harness, id, to) {
        Ok(changed) => Reply::ok(json!({ "moved": true, "changed": changed, "to": to })),
        Err(error) if error.is::<crate::exit::BadInput>() => {
            Reply::error(409, format!("{error:#}"))
        }
        Err(error) => Reply::error(500, format!("{error:#}")),
    }
}

/// `GET /api/history/:harness/:id[?limit=N&before=LINE]`: a history session's events, redacted,
/// the last `limit` (default 500) of those before transcript line `before` (default: the end),
/// never splitting one line's events; `more` says whether older ones remain.
pub(super) fn history_events_blocking(app: &App, harness: &str, id: &str, query: &str) -> Reply {
    let mut limit = 500;
    let mut before = u64::MAX;
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        let number = value.parse::<u64>();
        match (name.as_ref(), number) {
            ("limit", Ok(value)) if value <= TIMELINE_LIMIT_MAX as u64 => limit = value as usize,
            ("before", Ok(value)) => before = value,
            ("limit" | "before", _) => {
                return Reply::error(400, format!("{name} {value:?} is not a number in range"));
            }
            (other, _) => return Reply::error(400, format!("unknown query parameter {other:?}")),
        }
    }
    let Some(harness) = spex_history::Harness::parse(harness) else {
        return Reply::error(404, format!("no harness {harness:?} (claude, codex or opencode)"));
    };
    let index = match fresh_index_with_history(app) {
        Ok(index) => index,
        Err(reply) => return reply,
    };
    let rows = match index.history() {
        Ok(rows) => rows,
        Err(error) => return index_error(&error),
    };
    let Some(row) = rows
        .into_iter()
        .find(|row| row.transcript.harness == harness.name() && row.transcript.id == id)
    else {
        return Reply::error(404, "no such history session");
    };
    let read =
        match spex_history::read_from(std::path::Path::new(&row.transcript.path), harness, 0, 0) {
            Ok(read) => read,
            Err(error) => return Reply::error(500, error.to_string()),
        };
    let shown = |text: &str| spex_history::redact(text, &app.identity);
    let earlier: Vec<&spex_history::Event> =
        read.events.iter().filter(|event| event.line < before).collect();
    // A page never splits the events of one transcript line (the next page asks for those
    // before a line): it starts at its first line's first event, a few more than `limit` at most.
    let mut from = earlier.len().saturating_sub(limit);
    while from > 0 && earlier[from - 1].line == earlier[from].line {
        from -= 1;
    }
    Reply::ok(json!({
        "history": row.shown(&app.identity).to_json(),
        "more": from > 0,
        "events": earlier[from..]
            .iter()
            .map(|event| crate::render::event_json(event, &shown))
            .collect::<Vec<_>>(),
    }))
}

/// `GET /api/sessions`: every session, archived ones too, most recently active first.
pub(super) fn list(store: &Store<RealFs>) -> Reply {
    let index = match fresh_index(store) {
        Ok(index) => index,
        Err(reply) => return reply,
    };
    match ops::list::sessions(store, &index, &ops::list::Narrowing::everything()) {
        Ok(listed) => Reply::ok(ops::list::to_json(&listed)),
        Err(error) => op_error(&error),
    }
}

/// `GET /api/search?q=WORDS[&session=ID&status=S&since=WHEN&harness=H&project=DIR&limit=N]`:
/// the hits, as `spex search --json` gives them.
pub(super) fn search_blocking(app: &App, query: &str) -> Reply {
    let mut q = None;
    let mut filter = spex_index::SearchFilter { limit: 20, ..spex_index::SearchFilter::default() };
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        match name.as_ref() {
            "q" => q = Some(value.into_owned()),
            "session" => filter.session = Some(value.into_owned()),
            "status" => filter.status = Some(value.into_owned()),
            "since" => {
                // A time without an offset is read in UTC: the server's zone is not the client's.
                let zone = jiff::tz::TimeZone::UTC;
                match crate::when::since(&value, jiff::Timestamp::now(), &zone) {
                    Ok(since) => filter.since = Some(since),
                    Err(error) => return Reply::error(400, error.0),
                }
            }
            "harness" => match value.as_ref() {
                "spex" | "claude" | "codex" | "opencode" => {
                    filter.source = Some(value.into_owned())
                }
                _ => {
                    return Reply::error(
                        400,
                        format!("harness {value:?} is not spex, claude, codex or opencode"),
                    );
                }
            },
            "project" => filter.project = Some(value.trim_end_matches('/').to_owned()),
            "limit" => match value.parse::<usize>() {
                Ok(limit) if limit <= 1000 => filter.limit = limit,
                _ => return Reply::error(400, format!("limit {value:?} is not 0 to 1000")),
            },
            other => return Reply::error(400, format!("unknown query parameter {other:?}")),
        }
    }
    let Some(text) = q else { return Reply::error(400, "missing q") };
    // The transcripts too, so what an agent answered is found.
    let index = match fresh_index_with_history(app) {
        Ok(index) => index,
        Err(reply) => return reply,
    };
    match ops::search::search(&index, ops::search::Query { text, filter }, &app.identity) {
        Ok(found) => Reply::ok(found.to_json()),
        Err(error) => op_error(&error),
    }
}

/// `GET /api/usage?by=day|session|project|model|harness&since=&tz=`: what the agents spent (see
/// `spex usage`), days counted in `tz` (an IANA zone name; default UTC: the server's zone is not
/// the client's).
pub(super) fn usage_blocking(app: &App, query: &str) -> Reply {
    let mut by = ops::usage::By::Day;
    let mut since_text = None;
    let mut zone = jiff::tz::TimeZone::UTC;
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        match name.as_ref() {
            "by" => match ops::usage::By::parse(&value) {
                Ok(parsed) => by = parsed,
                Err(error) => return Reply::error(400, error),
            },
            "since" => since_text = Some(value.into_owned()),
            "tz" => match jiff::tz::TimeZone::get(&value) {
                Ok(named) => zone = named,
                Err(_) => return Reply::error(400, format!("tz {value:?} is not a time zone")),
            },
            other => return Reply::error(400, format!("unknown query parameter {other:?}")),
        }
    }
    let since = match crate::when::since_now(since_text.as_deref(), &zone) {
        Ok(since) => since,
        Err(error) => return Reply::error(400, error.0),
    };
    let mut index = match fresh_index(&app.store) {
        Ok(index) => index,
        Err(reply) => return reply,
    };
    let found = match spex_history::discover(&app.roots) {
        Ok(found) => found,
        Err(error) => return Reply::error(500, error.to_string()),
    };
    let asked = ops::usage::Asked { by, since, zone };
    let prices = ops::usage::Prices::committed();
    match ops::usage::measure(&mut index, &found, &asked, prices, &app.identity) {
        Ok((report, _)) => Reply::ok(report.to_json()),
        Err(error) => op_error(&error),
    }
}

/// `GET /api/sessions/:id`: the session's state as its record says, and the messages it is owed
/// (their mids and senders: the page marks each message delivered or owed).
pub(super) fn session_blocking(store: &Store<RealFs>, id: &str) -> Reply {
    match parse_id(id).and_then(|id| session_state(store, &id)) {
        Ok(state) => Reply::ok(state),
        Err(reply) => reply,
    }
}

/// A session's state and what it is owed, as `GET /api/sessions/:id` answers.
pub(super) fn session_state(store: &Store<RealFs>, id: &SessionId) -> Result<Value, Reply> {
    ops::show::for_page(store, id).map(|view| view.to_page_json()).map_err(|error| op_error(&error))
}

pub(super) fn parse_id(id: &str) -> Result<SessionId, Reply> {
    SessionId::new(id).map_err(|error| Reply::error(400, error.to_string()))
}

/// `GET /api/sessions/:id/timeline[?limit=N&before=POSITION]`: the last `limit` public events
/// before `before` (a page's `older`; default: the end), oldest first, read backward (never the
/// whole log); `older` names the next page (null at the start), `end` where the page ends (the
/// session's event stream continues from there).
pub(super) fn timeline_blocking(store: &Store<RealFs>, id: &str, query: &str) -> Reply {
    let session = match parse_id(id) {
        Ok(id) => id,
        Err(reply) => return reply,
    };
    let mut request = PageRequest { session, limit: 500, before: None };
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        match name.as_ref() {
            "limit" => match value.parse::<usize>() {
                Ok(value) if value <= TIMELINE_LIMIT_MAX => request.limit = value,
                _ => {
                    return Reply::error(
                        400,
                        format!("limit {value:?} is not a number from 0 to {TIMELINE_LIMIT_MAX}"),
                    );
                }
            },
            "before" => match value.parse::<Position>() {
                Ok(position) => request.before = Some(position),
                Err(error) => return Reply::error(400, error.to_string()),
            },
            other => return Reply::error(400, format!("unknown query parameter {other:?}")),
        }
    }
    match ops::timeline::page(store, &request) {
        Ok(marked) => Reply::ok(marked.to_json()),
        Err(error) => op_error(&error),
    }
}

/// The body of `POST /api/sessions/:id/input`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct Input {
    text: String,
    #[serde(default)]
    from: Option<String>,
    #[serde(default)]
    reply_via: Option<String>,
}

pub(super) fn input_blocking(
    store: &Store<RealFs>,
    id: &str,
    key: Option<String>,
    body: &[u8],
) -> Reply {
    let to = match parse_id(id) {
        Ok(id) => id,
        Err(reply) => return reply,
    };
    let input: Input = match serde_json::from_slice(body) {
        Ok(input) => input,
        Err(error) => return Reply::error(400, format!("malformed JSON body: {error}")),
    };
    let from = match input.from.as_deref().map(SessionId::new).transpose() {
        Ok(from) => from,
        Err(error) => return Reply::error(400, error.to_string()),
    };
    let reply_via = match input.reply_via.as_deref() {
        None => None,
        Some("note") => Some(ReplyArg::Note.channel()),
        Some("terminal") => Some(ReplyArg::Terminal.channel()),
        Some(other) => {
            return Reply::error(400, format!("replyVia {other:?} is not note or terminal"));
        }
    };
    let message = ops::send::Message {
        to,
        text: input.text,
        from,
        reply_via,
        key: key.map(|key| Key { operation: HTTP_OPERATION.to_owned(), key }),
    };
    match ops::send::send(store, message) {
        Ok(sent) => Reply::ok(sent.to_json()),
        Err(error) => op_error(&error),
    }
}
