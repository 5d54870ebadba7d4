//! The one event model every harness's transcript is parsed into.

/// Which harness wrote a transcript.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Harness {
    /// Claude Code (`~/.claude/projects/<encoded cwd>/<session id>.jsonl`).
    ClaudeCode,
    /// The Codex CLI (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`).
    Codex,
    /// OpenCode (sessions in `~/.local/share/opencode/opencode.db`, read through `opencode`).
    OpenCode,
}

impl Harness {
    /// The harness's name, as a spex record's `harness` field and `--harness` name it.
    pub const fn name(self) -> &'static str {
        match self {
            Harness::ClaudeCode => "claude",
            Harness::Codex => "codex",
            Harness::OpenCode => "opencode",
        }
    }

    /// The transcript format this harness writes: JSON lines, Claude Code's session records or
    /// the Codex CLI's rollout records; OpenCode's rows in its SQLite database.
    pub const fn format(self) -> &'static str {
        match self {
            Harness::ClaudeCode => "claude-code-jsonl",
            Harness::Codex => "codex-rollout-jsonl",
            Harness::OpenCode => "opencode-sqlite",
        }
    }

    /// Parses a harness name (`claude`, `claude-code`, `codex`, `opencode`).
    pub fn parse(name: &str) -> Option<Harness> {
        match name {
            "claude" | "claude-code" | "claude_code" => Some(Harness::ClaudeCode),
            "codex" => Some(Harness::Codex),
            "opencode" => Some(Harness::OpenCode),
            _ => None,
        }
    }
}

/// One normalized event of a transcript.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// When, as the transcript says it (ISO 8601), if it says.
    pub ts: Option<String>,
    /// The 1-based line of the transcript it came from.
    pub line: u64,
    /// What happened.
    pub kind: Kind,
}

/// What an event is.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// A message a person typed.
    User { text: String },
    /// What the agent answered (its visible text, not its hidden reasoning).
    Assistant { text: String },
    /// The agent called a tool.
    ToolCall { name: String, summary: String },
    /// A tool's result came back.
    ToolResult { ok: bool, bytes: u64 },
    /// Tokens a model call used: `input` not read from a cache, `cache_read` read from one,
    /// `cache_write` written to one. `reply` names the reply they were spent on, when the
    /// transcript says (Claude Code's message id; the Codex CLI's running total, which a
    /// re-emitted count repeats), so a reader that meets the same reply again counts it once.
    Usage {
        model: Option<String>,
        input: u64,
        output: u64,
        cache_read: u64,
        cache_write: u64,
        reply: Option<String>,
    },
    /// The session's lifecycle.
    Lifecycle(Lifecycle),
    /// A record this parser does not handle (its raw kind), counted, never a failure.
    Unknown { kind: String },
}

/// Lifecycle moments of a harness session.
#[derive(Clone, Debug, PartialEq)]
pub enum Lifecycle {
    /// The session started (its metadata line).
    Start,
    /// The harness summarized or compacted the conversation so far.
    Summary { text: String },
    /// A turn ended: the agent is waiting for the person.
    TurnEnd,
    /// A turn was aborted (interrupted by the person, or failed).
    Aborted { reason: String },
}

impl Kind {
    /// The kind's name in JSON and in counts.
    pub fn name(&self) -> &'static str {
        match self {
            Kind::User { .. } => "user",
            Kind::Assistant { .. } => "assistant",
            Kind::ToolCall { .. } => "tool-call",
            Kind::ToolResult { .. } => "tool-result",
            Kind::Usage { .. } => "usage",
            Kind::Lifecycle(Lifecycle::Start) => "start",
            Kind::Lifecycle(Lifecycle::Summary { .. }) => "summary",
            Kind::Lifecycle(Lifecycle::TurnEnd) => "turn-end",
            Kind::Lifecycle(Lifecycle::Aborted { .. }) => "aborted",
            Kind::Unknown { .. } => "unknown",
        }
    }

    /// Whether the event is activity: a message a person typed. Tool noise, usage, summaries
    /// and the agent's own output are not (the one activity rule of the session index, extended
    /// to transcripts).
    pub fn is_activity(&self) -> bool {
        matches!(self, Kind::User { .. })
    }
}

/// At most this many characters of a tool's input in its summary.
pub const TOOL_SUMMARY_CHARS: usize = 120;

/// A short one-line summary of a tool's input: the first of the usual fields that is a string
/// (`command`, `file_path`, `path`, `pattern`, `query`, `url`, `description`), else the input
/// as compact JSON; cut to [`TOOL_SUMMARY_CHARS`].
pub fn summarize_input(input: &serde_json::Value) -> String {
    const FIELDS: [&str; 7] =
        ["command", "file_path", "path", "pattern", "query", "url", "description"];
    let text = FIELDS
        .iter()
        .find_map(|field| match &input[*field] {
            serde_json::Value::String(text) => Some(text.clone()),
            serde_json::Value::Array(parts) if parts.iter().all(serde_json::Value::is_string) => {
                Some(
                    parts
                        .iter()
                        .filter_map(serde_json::Value::as_str)
                        .collect::<Vec<_>>()
                        .join(" "),
                )
            }
            _ => None,
        })
        .unwrap_or_else(|| match input {
            serde_json::Value::Null => String::new(),
            serde_json::Value::String(text) => text.clone(),
            other => other.to_string(),
        });
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= TOOL_SUMMARY_CHARS {
        return line;
    }
    let mut cut: String = line.chars().take(TOOL_SUMMARY_CHARS - 1).collect();
    cut.push('…');
    cut
}
