//! A scripted model server for tests: the Anthropic Messages API (`POST /v1/messages`) and the
//! OpenAI Responses API (`POST /v1/responses`), streaming (server-sent events) or not, on
//! loopback.
//!
//! Each test scripts what the model answers, per API, as a queue of [`Reply`]s: answer text, a
//! shell command for the agent to run (the harness's own shell tool: `Bash` for Claude Code,
//! whichever shell function a Codex request offers), any other tool call, an error status, a
//! delay, a connection dropped in the middle of the stream. A request of the agent's main loop
//! (one that offers tools) takes the next reply; a side request (a title, a summary: no tools)
//! and a main request after the script ran out are answered with [`Reply::default_text`]. Every
//! request is recorded, so a test can assert what the harness sent.
//!
//! The server runs on a thread of its own and stops when the [`ModelServer`] is dropped. Nothing
//! here is part of spex itself: it stands in for a model in tests.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};

/// The input tokens every answer reports (so a test can check that usage was recorded).
pub const USAGE_INPUT_TOKENS: u64 = 120;
/// The output tokens every answer reports.
pub const USAGE_OUTPUT_TOKENS: u64 = 30;

/// Which API a request used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// Anthropic Messages (`/v1/messages`): Claude Code.
    Anthropic,
    /// OpenAI Responses (`/v1/responses`): Codex.
    Responses,
}

/// One scripted answer.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// Answer with this text and end the turn.
    Text(String),
    /// Ask the agent to run this shell command with its own shell tool.
    Shell(String),
    /// Call a tool by name with this input.
    Tool {
        /// The tool's name.
        name: String,
        /// Its input (for the Responses API, sent as the function call's arguments).
        input: Value,
    },
    /// Answer with this HTTP status and an API error body.
    Status(u16),
    /// Wait, then answer.
    Delay {
        /// How long, in milliseconds.
        ms: u64,
        /// What comes after the wait.
        then: Box<Reply>,
    },
    /// Start the stream, then drop the connection before the answer ends.
    Drop,
}

impl Reply {
    /// What a side request, or a main request after the script ran out, is answered with.
    pub fn default_text() -> Reply {
        Reply::Text("ok".to_owned())
    }
}

/// A script: the replies of each API, in order (the binary reads it from JSON).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Script {
    /// For `/v1/messages`.
    #[serde(default)]
    pub anthropic: Vec<Reply>,
    /// For `/v1/responses`.
    #[serde(default)]
    pub responses: Vec<Reply>,
}

/// A request the server received.
#[derive(Clone, Debug)]
pub struct Request {
    /// Which API.
    pub api: Api,
    /// The path and query.
    pub path: String,
    /// The JSON body (`Null` when it was not JSON).
    pub body: Value,
    /// Whether it was a main-loop request (it offered tools) and so took a scripted reply.
    pub main: bool,
    /// The reply it got.
    pub reply: Reply,
}

impl Request {
    /// Every text of the request's input (messages, instructions, tool results), in order, for
    /// a test to look for what the harness sent.
    pub fn texts(&self) -> Vec<String> {
        let mut texts = Vec::new();
        collect_texts(&self.body, &mut texts);
        texts
    }
}

fn collect_texts(value: &Value, texts: &mut Vec<String>) {
    match value {
        Value::String(text) => texts.push(text.clone()),
        Value::Array(items) => items.iter().for_each(|item| collect_texts(item, texts)),
        Value::Object(map) => {
            for (key, item) in map {
                // Tool schemas are not what anyone said.
                if key != "tools" {
                    collect_texts(item, texts);
                }
            }
        }
        _ => {}
    }
}

#[derive(Debug, Default)]
struct Shared {
    anthropic: VecDeque<Reply>,
    responses: VecDeque<Reply>,
    requests: Vec<Request>,
    next_id: u64,
}

type Handle = Arc<Mutex<Shared>>;

fn lock(shared: &Handle) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A running server; stops when dropped.
#[derive(Debug)]
pub struct ModelServer {
    addr: SocketAddr,
    shared: Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ModelServer {
    /// Starts a server on `127.0.0.1` (an unused port) with an empty script.
    pub fn start() -> anyhow::Result<ModelServer> {
        ModelServer::start_on("127.0.0.1:0".parse()?)
    }

    /// Starts a server on `addr`.
    pub fn start_on(addr: SocketAddr) -> anyhow::Result<ModelServer> {
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Handle::default();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = axum::Router::new()
            .route("/v1/messages", axum::routing::post(anthropic))
            .route("/v1/responses", axum::routing::post(responses))
            .fallback(not_found)
            .with_state(Arc::clone(&shared));
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let thread = std::thread::Builder::new().name("modelserver".into()).spawn(move || {
            runtime.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
                tokio::select! {
                    _ = axum::serve(listener, app) => {}
                    _ = stopped => {}
                }
            });
        })?;
        Ok(ModelServer { addr, shared, stop: Some(stop), thread: Some(thread) })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Appends replies to an API's script.
    pub fn script(&self, api: Api, replies: impl IntoIterator<Item = Reply>) {
        let mut shared = lock(&self.shared);
        let queue = match api {
            Api::Anthropic => &mut shared.anthropic,
            Api::Responses => &mut shared.responses,
        };
        queue.extend(replies);
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        lock(&self.shared).requests.clone()
    }

    /// The main-loop requests received so far, in order.
    pub fn main_requests(&self) -> Vec<Request> {
        self.requests().into_iter().filter(|request| request.main).collect()
    }

    /// How many scripted replies of `api` are still unused.
    pub fn unused(&self, api: Api) -> usize {
        let shared = lock(&self.shared);
        match api {
            Api::Anthropic => shared.anthropic.len(),
            Api::Responses => shared.responses.len(),
        }
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ignored = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ignored = thread.join();
        }
    }
}

async fn not_found(uri: Uri) -> Response {
    error_response(404, &format!("no route for {uri}"))
}

async fn anthropic(State(shared): State<Handle>, uri: Uri, body: Bytes) -> Response {
    answer(Api::Anthropic, &shared, &uri, &body).await
}

async fn responses(State(shared): State<Handle>, uri: Uri, body: Bytes) -> Response {
    answer(Api::Responses, &shared, &uri, &body).await
}

/// Records the request, takes its reply and answers it.
async fn answer(api: Api, shared: &Handle, uri: &Uri, body: &Bytes) -> Response {
    let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let main = body.get("tools").and_then(Value::as_array).is_some_and(|tools| !tools.is_empty());
    let (reply, id) = {
        let mut shared = lock(shared);
        let scripted = if main {
            match api {
                Api::Anthropic => shared.anthropic.pop_front(),
                Api::Responses => shared.responses.pop_front(),
            }
        } else {
            None
        };
        let reply = scripted.unwrap_or_else(Reply::default_text);
        shared.next_id += 1;
        let id = shared.next_id;
        let path = uri.path_and_query().map_or_else(|| uri.path().to_owned(), |p| p.to_string());
        shared.requests.push(Request { api, path, body: body.clone(), main, reply: reply.clone() });
        (reply, id)
    };
    let mut reply = reply;
    while let Reply::Delay { ms, then } = reply {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        reply = *then;
    }
    if let Reply::Status(status) = reply {
        return error_response(status, "scripted failure");
    }
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let events = match api {
        Api::Anthropic => anthropic_events(&reply, &body, id),
        Api::Responses => responses_events(&reply, &body, id),
    };
    if !stream {
        // The last event carries the whole answer.
        let whole = match api {
            Api::Anthropic => anthropic_whole(&reply, id),
            Api::Responses => events
                .last()
                .and_then(|(_, data)| data.get("response").cloned())
                .unwrap_or(Value::Null),
        };
        return json_response(200, &whole);
    }
    let dropped = matches!(reply, Reply::Drop);
    let mut chunks: Vec<Result<Bytes, std::io::Error>> = Vec::new();
    for (name, data) in events.iter().take(if dropped { 2 } else { events.len() }) {
        chunks.push(Ok(Bytes::from(format!("event: {name}\ndata: {data}\n\n"))));
    }
    let sent = futures_util::stream::iter(chunks);
    let body = if dropped {
        use futures_util::StreamExt as _;
        // The connection is cut after what was sent reached the client.
        let cut = futures_util::stream::once(async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Err(std::io::Error::other("scripted drop"))
        });
        Body::from_stream(sent.chain(cut))
    } else {
        Body::from_stream(sent)
    };
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .header("request-id", format!("req_{id}"))
        .body(body)
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

fn json_response(status: u16, body: &Value) -> Response {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

fn error_response(status: u16, message: &str) -> Response {
    let body = json!({
        "type": "error",
        "error": {"type": "api_error", "message": message, "code": "server_error"},
    });
    json_response(status, &body)
}

/// The Anthropic content block a reply becomes (text, or a tool use).
fn anthropic_block(reply: &Reply, id: u64) -> Value {
    match reply {
        Reply::Shell(command) => json!({
            "type": "tool_use", "id": format!("toolu_{id:04}"), "name": "Bash",
            "input": {"command": command, "description": "Run the scripted command"},
        }),
        Reply::Tool { name, input } => {
            json!({"type": "tool_use", "id": format!("toolu_{id:04}"), "name": name, "input": input})
        }
        Reply::Text(text) => json!({"type": "text", "text": text}),
        // A dropped stream still starts with a text block.
        _ => json!({"type": "text", "text": "(dropped)"}),
    }
}

fn anthropic_whole(reply: &Reply, id: u64) -> Value {
    let block = anthropic_block(reply, id);
    let stop = if block["type"] == "tool_use" { "tool_use" } else { "end_turn" };
    json!({
        "id": format!("msg_{id:04}"), "type": "message", "role": "assistant",
        "model": "scripted", "content": [block], "stop_reason": stop, "stop_sequence": null,
        "usage": {"input_tokens": USAGE_INPUT_TOKENS, "output_tokens": USAGE_OUTPUT_TOKENS},
    })
}

fn anthropic_events(reply: &Reply, request: &Value, id: u64) -> Vec<(&'static str, Value)> {
    let model = request.get("model").cloned().unwrap_or(json!("scripted"));
    let block = anthropic_block(reply, id);
    let tool = block["type"] == "tool_use";
    let (start, delta) = if tool {
        let mut start = block.clone();
        start["input"] = json!({});
        let partial = block["input"].to_string();
        (start, json!({"type": "input_json_delta", "partial_json": partial}))
    } else {
        (json!({"type": "text", "text": ""}), json!({"type": "text_delta", "text": block["text"]}))
    };
    vec![
        (
            "message_start",
            json!({"type": "message_start", "message": {
                "id": format!("msg_{id:04}"), "type": "message", "role": "assistant",
                "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": USAGE_INPUT_TOKENS, "output_tokens": 1},
            }}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": start}),
        ),
        ("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": delta})),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
        (
            "message_delta",
            json!({"type": "message_delta",
                "delta": {"stop_reason": if tool { "tool_use" } else { "end_turn" }, "stop_sequence": null},
                "usage": {"output_tokens": USAGE_OUTPUT_TOKENS}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ]
}

/// The Responses function call a shell command becomes, for whichever shell tool the request
/// offers (`shell`: an argv; `shell_command`: a string; `exec_command`: `cmd`).
fn responses_shell(command: &str, request: &Value) -> (String, Value) {
    let offered: Vec<&str> = request
        .get("tools")
        .and_then(Value::as_array)
        .map(|tools| tools.iter().filter_map(|tool| tool.get("name")?.as_str()).collect())
        .unwrap_or_default();
    if offered.contains(&"shell_command") {
        ("shell_command".into(), json!({"command": command}))
    } else if offered.contains(&"exec_command") {
        ("exec_command".into(), json!({"cmd": command}))
    } else {
        ("shell".into(), json!({"command": ["bash", "-lc", command]}))
    }
}

fn responses_events(reply: &Reply, request: &Value, id: u64) -> Vec<(&'static str, Value)> {
    let model = request.get("model").cloned().unwrap_or(json!("scripted"));
    let call = match reply {
        Reply::Shell(command) => Some(responses_shell(command, request)),
        Reply::Tool { name, input } => Some((name.clone(), input.clone())),
        _ => None,
    };
    let text = match reply {
        Reply::Text(text) => text.clone(),
        _ => "(dropped)".to_owned(),
    };
    let item_id = format!("item_{id:04}");
    let done_item = match &call {
        Some((name, input)) => json!({
            "type": "function_call", "id": item_id, "call_id": format!("call_{id:04}"),
            "name": name, "arguments": input.to_string(), "status": "completed",
        }),
        None => json!({
            "type": "message", "id": item_id, "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }),
    };
    let mut added = done_item.clone();
    added["status"] = json!("in_progress");
    if call.is_none() {
        added["content"] = json!([]);
    }
    let response = |status: &str, output: Value| {
        json!({
            "id": format!("resp_{id:04}"), "object": "response", "created_at": 0,
            "status": status, "model": model, "output": output,
            "usage": {
                "input_tokens": USAGE_INPUT_TOKENS,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": USAGE_OUTPUT_TOKENS,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": USAGE_INPUT_TOKENS + USAGE_OUTPUT_TOKENS,
            },
        })
    };
    let mut events = vec![
        (
            "response.created",
            json!({"type": "response.created", "response": response("in_progress", json!([]))}),
        ),
        (
            "response.output_item.added",
            json!({"type": "response.output_item.added", "output_index": 0, "item": added}),
        ),
    ];
    if call.is_none() {
        events.push((
            "response.output_text.delta",
            json!({"type": "response.output_text.delta", "item_id": item_id, "output_index": 0, "content_index": 0, "delta": text}),
        ));
    }
    events.push((
        "response.output_item.done",
        json!({"type": "response.output_item.done", "output_index": 0, "item": done_item}),
    ));
    events.push((
        "response.completed",
        json!({"type": "response.completed", "response": response("completed", json!([done_item]))}),
    ));
    events
}
