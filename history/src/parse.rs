//! The parsers: one transcript line (a JSON object) into normalized events, per harness. A line
//! that is not JSON, a record type or field a parser does not know, or a field of an unexpected
//! type is never a failure: it becomes an `Unknown` event (counted) or is left out.

use std::collections::HashSet;

use serde_json::Value;

use crate::event::{Event, Harness, Kind, Lifecycle, summarize_input};

/// What a transcript says about its session, gathered as lines are parsed. A value once known is
/// never erased by a later line that lacks it (enrichment never erases provenance).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// The harness's own session id.
    pub session_id: Option<String>,
    /// The working directory.
    pub cwd: Option<String>,
    /// The harness version that wrote it.
    pub version: Option<String>,
    /// The git branch, when the transcript says.
    pub git_branch: Option<String>,
    /// The model last named.
    pub model: Option<String>,
}

fn keep(slot: &mut Option<String>, value: &Value) {
    if slot.is_none()
        && let Some(text) = value.as_str().filter(|text| !text.is_empty())
    {
        *slot = Some(text.to_owned());
    }
}

/// What one read of a transcript found.
#[derive(Clone, Debug, Default)]
pub struct Reading {
    /// The events of the complete lines read.
    pub events: Vec<Event>,
    /// What the transcript said about its session (in the lines read).
    pub meta: Meta,
    /// Where the next read continues: just past the last complete line.
    pub offset: u64,
    /// The 1-based number of the last complete line read.
    pub lines: u64,
    /// The read stopped at its byte budget with lines still after it.
    pub more: bool,
}

/// A parser's state across the lines of one transcript.
#[derive(Debug)]
pub struct Parser {
    harness: Harness,
    /// What the transcript said about itself so far.
    pub meta: Meta,
    /// Claude Code writes one line per content block of a reply, each with the reply's usage:
    /// usage is counted once per reply id.
    usage_seen: HashSet<String>,
    /// The Codex CLI's running token total as of its last count: a count that repeats it (the
    /// CLI re-emits counts for its display) is no new reply.
    codex_total: Option<String>,
}

impl Parser {
    /// A parser for a transcript of `harness`.
    pub fn new(harness: Harness) -> Parser {
        Parser { harness, meta: Meta::default(), usage_seen: HashSet::new(), codex_total: None }
    }

    /// The harness whose transcripts this parser reads.
    pub fn harness(&self) -> Harness {
        self.harness
    }

    /// Parses line `line` (1-based, without its newline), appending its events to `out`.
    pub fn line(&mut self, line: u64, text: &str, out: &mut Vec<Event>) {
        let value: Value = match serde_json::from_str(text) {
            Ok(value @ Value::Object(_)) => value,
            Ok(_) | Err(_) => {
                if !text.trim().is_empty() {
                    out.push(Event {
                        ts: None,
                        line,
                        kind: Kind::Unknown { kind: "not-json".to_owned() },
                    });
                }
                return;
            }
        };
        match self.harness {
            Harness::ClaudeCode => self.claude(line, &value, out),
            Harness::Codex => self.codex(line, &value, out),
            Harness::OpenCode => self.opencode(line, &value, out),
        }
    }

    fn claude(&mut self, line: u64, value: &Value, out: &mut Vec<Event>) {
        keep(&mut self.meta.session_id, &value["sessionId"]);
        keep(&mut self.meta.cwd, &value["cwd"]);
        keep(&mut self.meta.version, &value["version"]);
        keep(&mut self.meta.git_branch, &value["gitBranch"]);
        let ts = value["timestamp"].as_str().map(str::to_owned);
        let event = |kind| Event { ts: ts.clone(), line, kind };
        let kind = value["type"].as_str().unwrap_or("");
        match kind {
            "user" => claude_user(value, &event, out),
            "assistant" => self.claude_assistant(value, &event, out),
            "summary" => out.push(event(Kind::Lifecycle(Lifecycle::Summary {
                text: value["summary"].as_str().unwrap_or("").to_owned(),
            }))),
            "system" if value["subtype"].as_str() == Some("compact_boundary") => {
                out.push(event(Kind::Lifecycle(Lifecycle::Summary {
                    text: "compacted".to_owned(),
                })));
            }
            "system" => out.push(event(Kind::Unknown {
                kind: format!("system/{}", value["subtype"].as_str().unwrap_or("?")),
            })),
            other => out.push(event(Kind::Unknown {
                kind: if other.is_empty() { "untyped".to_owned() } else { other.to_owned() },
            })),
        }
    }

    /// An assistant line of a Claude Code transcript: its model, its texts and tool calls (not
    /// its hidden reasoning), its usage (once per reply) and the end of its turn.
    fn claude_assistant(
        &mut self,
        value: &Value,
        event: &impl Fn(Kind) -> Event,
        out: &mut Vec<Event>,
    ) {
        let message = &value["message"];
        if let Some(model) = message["model"].as_str().filter(|m| !m.starts_with('<')) {
            self.meta.model = Some(model.to_owned());
        }
        for block in message["content"].as_array().into_iter().flatten() {
            match block["type"].as_str() {
                Some("text") => {
                    if let Some(text) = block["text"].as_str().filter(|t| !t.trim().is_empty()) {
                        out.push(event(Kind::Assistant { text: text.to_owned() }));
                    }
                }
                Some("tool_use") => out.push(event(Kind::ToolCall {
                    name: block["name"].as_str().unwrap_or("?").to_owned(),
                    summary: summarize_input(&block["input"]),
                })),
                // Hidden reasoning is not the agent's answer.
                _ => {}
            }
        }
        let usage = &message["usage"];
        let id = message["id"].as_str().unwrap_or("").to_owned();
        if usage.is_object() && (id.is_empty() || self.usage_seen.insert(id.clone())) {
            out.push(event(Kind::Usage {
                model: self.meta.model.clone(),
                input: usage["input_tokens"].as_u64().unwrap_or(0),
                output: usage["output_tokens"].as_u64().unwrap_or(0),
                cache_read: usage["cache_read_input_tokens"].as_u64().unwrap_or(0),
                cache_write: usage["cache_creation_input_tokens"].as_u64().unwrap_or(0),
                reply: (!id.is_empty()).then_some(id),
            }));
        }
        if message["stop_reason"].as_str() == Some("end_turn") {
            out.push(event(Kind::Lifecycle(Lifecycle::TurnEnd)));
        }
    }

    fn codex(&mut self, line: u64, value: &Value, out: &mut Vec<Event>) {
        let ts = value["timestamp"].as_str().map(str::to_owned);
        // The enveloped form (`{"timestamp","type","payload"}`), or an older line that is the
        // payload itself (its first line the session's metadata, with an id and no type).
        let (kind, payload) = match (&value["type"], &value["payload"]) {
            (Value::String(kind), payload @ Value::Object(_)) => (kind.as_str(), payload),
            (Value::Null, _) if value["id"].is_string() => ("session_meta", value),
            (Value::String(_), _) => ("response_item", value),
            _ => ("", value),
        };
        let event = |kind| Event { ts: ts.clone(), line, kind };
        match kind {
            "session_meta" => {
                keep(&mut self.meta.session_id, &payload["id"]);
                keep(&mut self.meta.cwd, &payload["cwd"]);
                keep(&mut self.meta.version, &payload["cli_version"]);
                keep(&mut self.meta.git_branch, &payload["git"]["branch"]);
                let ts = ts.clone().or_else(|| payload["timestamp"].as_str().map(str::to_owned));
                out.push(Event { ts, line, kind: Kind::Lifecycle(Lifecycle::Start) });
            }
            "turn_context" => {
                keep(&mut self.meta.cwd, &payload["cwd"]);
                if let Some(model) = payload["model"].as_str() {
                    self.meta.model = Some(model.to_owned());
                }
            }
            "response_item" => self.codex_item(payload, &event, out),
            "event_msg" => match payload["type"].as_str() {
                Some("token_count") => {
                    let usage = &payload["info"]["last_token_usage"];
                    let total = codex_total(&payload["info"]["total_token_usage"]);
                    let repeated = total.is_some() && total == self.codex_total;
                    if total.is_some() {
                        self.codex_total.clone_from(&total);
                    }
                    if usage.is_object() && !repeated {
                        let input = usage["input_tokens"].as_u64().unwrap_or(0);
                        let cached = usage["cached_input_tokens"].as_u64().unwrap_or(0);
                        out.push(event(Kind::Usage {
                            model: self.meta.model.clone(),
                            input: input.saturating_sub(cached),
                            output: usage["output_tokens"].as_u64().unwrap_or(0),
                            cache_read: cached,
                            cache_write: 0,
                            reply: total,
                        }));
                    }
                }
                Some("task_complete") => out.push(event(Kind::Lifecycle(Lifecycle::TurnEnd))),
                Some("turn_aborted") => out.push(event(Kind::Lifecycle(Lifecycle::Aborted {
                    reason: payload["reason"].as_str().unwrap_or("aborted").to_owned(),
                }))),
                // The other UI events mirror the response items (user_message, agent_message,
                // agent_reasoning, ...): reading both would count every message twice.
                _ => {}
            },
            "compacted" => out.push(event(Kind::Lifecycle(Lifecycle::Summary {
                text: payload["message"].as_str().unwrap_or("compacted").to_owned(),
            }))),
            other => out.push(event(Kind::Unknown {
                kind: if other.is_empty() { "untyped".to_owned() } else { other.to_owned() },
            })),
        }
    }

    fn codex_item(&mut self, item: &Value, event: &dyn Fn(Kind) -> Event, out: &mut Vec<Event>) {
        match item["type"].as_str().unwrap_or("") {
            "message" => {
                let text: Vec<&str> = item["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|block| block["text"].as_str())
                    .collect();
                let text = text.join("\n");
                match item["role"].as_str() {
                    Some("user") if !is_codex_context(&text) && !text.trim().is_empty() => {
                        out.push(event(Kind::User { text }));
                    }
                    Some("assistant") if !text.trim().is_empty() => {
                        out.push(event(Kind::Assistant { text }));
                    }
                    // Context the harness injects, and developer or system instructions.
                    _ => {}
                }
            }
            "function_call" => {
                let arguments = item["arguments"]
                    .as_str()
                    .and_then(|text| serde_json::from_str::<Value>(text).ok())
                    .unwrap_or_else(|| item["arguments"].clone());
                out.push(event(Kind::ToolCall {
                    name: item["name"].as_str().unwrap_or("?").to_owned(),
                    summary: summarize_input(&arguments),
                }));
            }
            "custom_tool_call" => out.push(event(Kind::ToolCall {
                name: item["name"].as_str().unwrap_or("?").to_owned(),
                summary: summarize_input(&item["input"]),
            })),
            "local_shell_call" => out.push(event(Kind::ToolCall {
                name: "shell".to_owned(),
                summary: summarize_input(&item["action"]),
            })),
            "function_call_output" | "custom_tool_call_output" => {
                let (ok, bytes) = codex_output(&item["output"]);
                out.push(event(Kind::ToolResult { ok, bytes }));
            }
            // Hidden reasoning (often encrypted) is not the agent's answer.
            "reasoning" => {}
            other => out.push(event(Kind::Unknown { kind: format!("response_item/{other}") })),
        }
    }
}

impl Parser {
    /// A line of an OpenCode session's rendition (`opencode`): the session, or a message with
    /// its parts inside it.
    fn opencode(&mut self, line: u64, value: &Value, out: &mut Vec<Event>) {
        let ts = opencode_time(&value["time_created"]);
        match value["type"].as_str().unwrap_or("") {
            "session" => {
                keep(&mut self.meta.session_id, &value["id"]);
                keep(&mut self.meta.cwd, &value["directory"]);
                keep(&mut self.meta.version, &value["version"]);
                out.push(Event { ts, line, kind: Kind::Lifecycle(Lifecycle::Start) });
            }
            "message" => self.opencode_message(line, value, ts, out),
            other => out.push(Event {
                ts,
                line,
                kind: Kind::Unknown {
                    kind: if other.is_empty() { "untyped".to_owned() } else { other.to_owned() },
                },
            }),
        }
    }

    fn opencode_message(
        &mut self,
        line: u64,
        value: &Value,
        ts: Option<String>,
        out: &mut Vec<Event>,
    ) {
        let data = &value["data"];
        let parts = value["parts"].as_array().map_or(&[][..], Vec::as_slice);
        match data["role"].as_str() {
            Some("user") => {
                // The person's text parts (not those OpenCode adds itself, such as a file's
                // contents read for an attachment) are one message.
                let texts: Vec<&str> = parts
                    .iter()
                    .map(|part| &part["data"])
                    .filter(|part| {
                        part["type"] == "text"
                            && part["synthetic"] != true
                            && part["ignored"] != true
                    })
                    .filter_map(|part| part["text"].as_str())
                    .filter(|text| !text.trim().is_empty())
                    .collect();
                if !texts.is_empty() {
                    out.push(Event { ts, line, kind: Kind::User { text: texts.join("\n") } });
                }
            }
            Some("assistant") => {
                if let Some(model) = data["modelID"].as_str().filter(|model| !model.is_empty()) {
                    self.meta.model = Some(model.to_owned());
                }
                for part in parts {
                    let ts = opencode_time(&part["time_created"]).or_else(|| ts.clone());
                    self.opencode_part(line, data, part, ts, out);
                }
                if data["error"].is_object() {
                    let error = &data["error"];
                    let reason = match error["name"].as_str() {
                        Some("MessageAbortedError") => "interrupted".to_owned(),
                        name => {
                            error["data"]["message"].as_str().or(name).unwrap_or("error").to_owned()
                        }
                    };
                    out.push(Event {
                        ts,
                        line,
                        kind: Kind::Lifecycle(Lifecycle::Aborted { reason }),
                    });
                }
            }
            _ => out.push(Event {
                ts,
                line,
                kind: Kind::Unknown {
                    kind: format!("message/{}", data["role"].as_str().unwrap_or("?")),
                },
            }),
        }
    }

    /// One part of an assistant message: its text, a tool call with its result once it has one,
    /// a step's end with the step's tokens (one model call: one reply, named by the part's id).
    fn opencode_part(
        &mut self,
        line: u64,
        message: &Value,
        part: &Value,
        ts: Option<String>,
        out: &mut Vec<Event>,
    ) {
        let data = &part["data"];
        let event = |kind| Event { ts: ts.clone(), line, kind };
        match data["type"].as_str().unwrap_or("") {
            "text" => {
                if let Some(text) = data["text"].as_str().filter(|text| !text.trim().is_empty()) {
                    // The summary a compaction writes is the conversation so far, not an answer.
                    out.push(event(if message["summary"] == true {
                        Kind::Lifecycle(Lifecycle::Summary { text: text.to_owned() })
                    } else {
                        Kind::Assistant { text: text.to_owned() }
                    }));
                }
            }
            "tool" => opencode_tool(data, &event, out),
            "step-finish" => {
                let tokens = &data["tokens"];
                let count = |value: &Value| value.as_u64().unwrap_or(0);
                let id = part["id"].as_str().unwrap_or("").to_owned();
                if tokens.is_object() && (id.is_empty() || self.usage_seen.insert(id.clone())) {
                    out.push(event(Kind::Usage {
                        model: self.meta.model.clone(),
                        input: count(&tokens["input"]),
                        // Reasoning is output the model was paid for, counted apart by OpenCode.
                        output: count(&tokens["output"])
                            .saturating_add(count(&tokens["reasoning"])),
                        cache_read: count(&tokens["cache"]["read"]),
                        cache_write: count(&tokens["cache"]["write"]),
                        reply: (!id.is_empty()).then_some(id),
                    }));
                }
                // A step that ends other than by calling tools ends the turn.
                if data["reason"].as_str().is_some_and(|reason| reason != "tool-calls") {
                    out.push(event(Kind::Lifecycle(Lifecycle::TurnEnd)));
                }
            }
            "compaction" => out
                .push(event(Kind::Lifecycle(Lifecycle::Summary { text: "compacted".to_owned() }))),
            // Hidden reasoning is not the agent's answer; a step's start, a file snapshot and a
            // patch's file list carry nothing the event model holds.
            "reasoning" | "step-start" | "snapshot" | "patch" | "file" => {}
            other => out.push(event(Kind::Unknown {
                kind: format!("part/{}", if other.is_empty() { "untyped" } else { other }),
            })),
        }
    }
}

/// An OpenCode tool part: the call, and its result once it is in (not while pending or
/// running).
fn opencode_tool(data: &Value, event: &impl Fn(Kind) -> Event, out: &mut Vec<Event>) {
    let state = &data["state"];
    out.push(event(Kind::ToolCall {
        name: data["tool"].as_str().unwrap_or("?").to_owned(),
        summary: summarize_input(&state["input"]),
    }));
    let (ok, bytes) = match state["status"].as_str() {
        Some("completed") => (true, &state["output"]),
        Some("error") => (false, &state["error"]),
        _ => return,
    };
    out.push(event(Kind::ToolResult { ok, bytes: bytes.as_str().map_or(0, str::len) as u64 }));
}

/// An OpenCode time (milliseconds since the epoch) as ISO 8601.
fn opencode_time(value: &Value) -> Option<String> {
    let millis = value.as_i64()?;
    jiff::Timestamp::from_millisecond(millis).ok().map(|time| time.to_string())
}

/// A user line of a Claude Code transcript: what the person typed (its text blocks joined) and
/// the tool results it carries. Lines the harness injects (command wrappers, caveats) are not a
/// person typing.
fn claude_user(value: &Value, event: &impl Fn(Kind) -> Event, out: &mut Vec<Event>) {
    if value["isMeta"].as_bool() == Some(true) {
        return;
    }
    match &value["message"]["content"] {
        Value::String(text) => out.push(event(claude_user_text(text))),
        Value::Array(blocks) => {
            let mut texts = Vec::new();
            for block in blocks {
                match block["type"].as_str() {
                    Some("text") => {
                        if let Some(text) = block["text"].as_str() {
                            texts.push(text);
                        }
                    }
                    Some("tool_result") => out.push(event(Kind::ToolResult {
                        ok: block["is_error"].as_bool() != Some(true),
                        bytes: content_bytes(&block["content"]),
                    })),
                    _ => {}
                }
            }
            if !texts.is_empty() {
                out.push(event(claude_user_text(&texts.join("\n"))));
            }
        }
        _ => {}
    }
}

/// A Claude Code user text: a person's message, or the summary that opens a compacted session.
fn claude_user_text(text: &str) -> Kind {
    const CONTINUED: &str = "This session is being continued from a previous conversation";
    if text.starts_with(CONTINUED) {
        Kind::Lifecycle(Lifecycle::Summary { text: text.to_owned() })
    } else {
        Kind::User { text: text.to_owned() }
    }
}

/// Whether a Codex user message is context the harness injected (environment, instructions).
fn is_codex_context(text: &str) -> bool {
    let text = text.trim_start();
    ["<environment_context>", "<user_instructions>", "# AGENTS.md instructions"]
        .iter()
        .any(|prefix| text.starts_with(prefix))
}

/// The size of a tool result's content (a string, or blocks with text).
fn content_bytes(content: &Value) -> u64 {
    match content {
        Value::String(text) => text.len() as u64,
        Value::Array(blocks) => blocks
            .iter()
            .map(|block| block["text"].as_str().map_or(0, |text| text.len() as u64))
            .sum(),
        _ => 0,
    }
}

/// A Codex tool output: whether it succeeded (its exit code, when it says) and its size. The
/// output is a string (itself JSON with `output` and `metadata.exit_code`, or plain text) or
/// such an object.
fn codex_output(output: &Value) -> (bool, u64) {
    let parsed;
    let object = match output {
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(value @ Value::Object(_)) => {
                parsed = value;
                &parsed
            }
            _ => return (true, text.len() as u64),
        },
        other => other,
    };
    let ok = object["metadata"]["exit_code"].as_i64().is_none_or(|code| code == 0)
        && object["success"].as_bool() != Some(false);
    let bytes = object["output"].as_str().map_or_else(|| object.to_string().len(), str::len);
    (ok, bytes as u64)
}

/// The Codex CLI's running token total as one text (`total:` then input, cached input, output and
/// reasoning tokens), the identity of the reply that brought it there; `None` when the count has
/// no total.
fn codex_total(total: &Value) -> Option<String> {
    let field = |name: &str| total[name].as_u64();
    let fields =
        ["input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens"];
    if fields.iter().all(|name| field(name).is_none()) {
        return None;
    }
    let numbers: Vec<String> =
        fields.iter().map(|name| field(name).unwrap_or(0).to_string()).collect();
    Some(format!("total:{}", numbers.join("/")))
}
