//! `spex serve`: the HTTP read surface (and the human input endpoint) on loopback.
//!
//! | method and path                          | answer                                          |
//! |------------------------------------------|-------------------------------------------------|
//! | `GET /api/sessions`                      | sessions, most recently worked in first (index) |
//! | `GET /api/search?q=..&session=&status=&since=&limit=` | full-text hits (index)             |
//! | `GET /api/watch`                         | server-sent events: reset, then increments      |
//! | `GET /api/sessions/:id/timeline?limit=N` | the last N public events, oldest first (N 500)  |
//! | `POST /api/sessions/:id/input`           | a send; `Idempotency-Key` makes it keyed        |
//!
//! Every request passes the guard first (see `guard`: the token, the host, JSON from the
//! server's own origin for a change): 401, 403 or 415 otherwise, before anything is read.
//!
//! Errors are JSON `{"error": "..."}` with the status that names the cause: 400 bad input, 404
//! unknown session or path, 405 wrong method, 409 key conflict, 413 body too large, 503 lock
//! busy (with `Retry-After`), 500 anything else (the store's own error text). Reads take no lock;
//! an input is acknowledged only once it is durable, exactly as `spex session send`.

use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use faultfs::RealFs;
use serde::Deserialize;
use serde_json::{Value, json};
use spex_engine::layout::TEXT_BYTES_MAX;
use spex_engine::{Error, Event, Key, SendRequest, SessionId, Store};
use tiny_http::{Header, Method, Request, Response, Server};

use super::guard::{Guard, Seen, Verdict};
use super::session::ReplyArg;
use super::{Global, print_json};
use crate::exit::Code;

/// The operation of a keyed HTTP input (the `Idempotency-Key` header's namespace).
pub(crate) const HTTP_OPERATION: &str = "http-input";

/// The largest accepted request body: the largest message, JSON-escaped, plus the envelope.
pub(crate) const BODY_BYTES_MAX: usize = TEXT_BYTES_MAX * 6 + 4096;

/// The largest `limit` a timeline request may ask for.
pub(crate) const TIMELINE_LIMIT_MAX: usize = 10_000;

/// Arguments of `spex serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Where to listen (loopback by default; port 0 picks a free port, printed on stdout).
    #[arg(long, default_value = "127.0.0.1:7477")]
    addr: SocketAddr,
    /// Worker threads answering requests.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    threads: u16,
    /// The token every request must carry (default: the store's own, `<root>/serve.token`,
    /// created with mode 0600 on first use). The file must not be readable by others.
    #[arg(long, value_name = "FILE")]
    token_file: Option<std::path::PathBuf>,
}

pub(crate) fn run(args: &Args, global: &Global) -> anyhow::Result<Code> {
    let store = Arc::new(global.open_store()?);
    if !args.addr.ip().is_loopback() {
        eprintln!(
            "spex serve: warning: listening on {}, not loopback: anyone who can reach it and has the token can read and send",
            args.addr
        );
    }
    let server = Server::http(args.addr)
        .map_err(|error| anyhow::anyhow!("cannot listen on {}: {error}", args.addr))?;
    let server = Arc::new(server);
    let addr = server.server_addr().to_ip().context("the server listens on an IP address")?;
    let guard = Arc::new(Guard::new(store.layout().root(), args.token_file.as_deref(), addr)?);
    let url = format!("http://{addr}/?token={}", guard.token());
    if global.json {
        print_json(json!({ "url": url, "token": guard.token() }))?;
    } else {
        println!("{url}");
    }
    std::io::Write::flush(&mut std::io::stdout())?;
    eprintln!("spex serve: store {}; Ctrl-C stops", store.layout().root().display());
    let workers: Vec<_> = (0..args.threads)
        .map(|_| {
            let server = Arc::clone(&server);
            let store = Arc::clone(&store);
            let guard = Arc::clone(&guard);
            std::thread::spawn(move || {
                while let Ok(request) = server.recv() {
                    let set_cookie = match admit(&guard, &request) {
                        Verdict::Allow { set_cookie } => set_cookie,
                        Verdict::Deny(status, reason) => {
                            respond(request, &Reply::error(status, reason), None);
                            continue;
                        }
                    };
                    let cookie = set_cookie.then(|| guard.cookie());
                    if request.method() == &Method::Get
                        && request.url().split('?').next() == Some("/api/watch")
                    {
                        watch(&store, request);
                    } else {
                        answer(&store, request, cookie.as_deref());
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        if worker.join().is_err() {
            anyhow::bail!("a server thread panicked");
        }
    }
    Ok(Code::Ok)
}

/// An HTTP answer: status and JSON body.
struct Reply {
    status: u16,
    body: Value,
    retry_after: bool,
}

impl Reply {
    fn ok(body: Value) -> Reply {
        Reply { status: 200, body, retry_after: false }
    }

    fn error(status: u16, message: impl Into<String>) -> Reply {
        Reply { status, body: json!({ "error": message.into() }), retry_after: false }
    }
}

/// The guard's verdict on `request` (see `guard`).
fn admit(guard: &Guard, request: &Request) -> Verdict {
    let url = request.url();
    let query = url.split_once('?').map_or("", |(_, query)| query);
    let header = |name: &str| {
        request
            .headers()
            .iter()
            .find(|header| header.field.as_str().as_str().eq_ignore_ascii_case(name))
            .map(|header| header.value.as_str().to_owned())
    };
    guard.check(&Seen { method: request.method().as_str(), query, header: &header })
}

fn answer(store: &Store<RealFs>, mut request: Request, cookie: Option<&str>) {
    let reply = route(store, &mut request);
    respond(request, &reply, cookie);
}

fn respond(request: Request, reply: &Reply, cookie: Option<&str>) {
    let mut response = Response::from_string(reply.body.to_string())
        .with_status_code(reply.status)
        .with_header(header("Content-Type", "application/json; charset=utf-8"));
    if reply.retry_after {
        response = response.with_header(header("Retry-After", "1"));
    }
    if let Some(cookie) = cookie {
        response = response.with_header(header("Set-Cookie", cookie));
    }
    // The client may have gone away; there is no one left to tell.
    let _ignored = request.respond(response);
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes())
        .expect("header names and values here are ASCII constants")
}

fn route(store: &Store<RealFs>, request: &mut Request) -> Reply {
    let url = request.url().to_owned();
    let (path, query) = url.split_once('?').unwrap_or((&url, ""));
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    let method = request.method().clone();
    match (segments.as_slice(), method) {
        (["api", "sessions"], Method::Get) => sessions(store),
        (["api", "search"], Method::Get) => search(store, query),
        (["api", "sessions", id, "timeline"], Method::Get) => timeline(store, id, query),
        (["api", "sessions", id, "input"], Method::Post) => input(store, id, request),
        (
            ["api", "sessions" | "search" | "watch"] | ["api", "sessions", _, "timeline" | "input"],
            _,
        ) => Reply::error(405, format!("method not allowed on {path}")),
        _ => Reply::error(404, format!("no route {path}")),
    }
}

/// The reply for an engine error.
fn engine_error(error: &Error) -> Reply {
    match error {
        Error::NoSuchSession { .. } => Reply::error(404, "no such session"),
        Error::InvalidId { .. } | Error::InvalidInput { .. } | Error::Revoked { .. } => {
            Reply::error(400, error.to_string())
        }
        Error::TooLarge { .. } => Reply::error(413, error.to_string()),
        Error::KeyConflict { .. } => Reply::error(409, error.to_string()),
        Error::Locked { .. } => Reply { retry_after: true, ..Reply::error(503, error.to_string()) },
        _ => Reply::error(500, error.to_string()),
    }
}

fn index_error(error: &spex_index::Error) -> Reply {
    match error {
        spex_index::Error::Store(error) => engine_error(error),
        spex_index::Error::EmptyQuery => Reply::error(400, error.to_string()),
        _ => Reply::error(500, error.to_string()),
    }
}

/// The index of `store`, refreshed.
fn fresh_index(store: &Store<RealFs>) -> Result<spex_index::Index, Reply> {
    let mut index =
        spex_index::Index::open(store.layout().root()).map_err(|error| index_error(&error))?;
    index.refresh(store).map_err(|error| index_error(&error))?;
    Ok(index)
}

fn sessions(store: &Store<RealFs>) -> Reply {
    let index = match fresh_index(store) {
        Ok(index) => index,
        Err(reply) => return reply,
    };
    let filter = spex_index::Filter { sort: spex_index::Sort::Activity, status: None, all: true };
    match index.sessions(&filter) {
        Ok(rows) => Reply::ok(json!({
            "sessions": rows.iter().map(spex_index::Row::to_json).collect::<Vec<_>>()
        })),
        Err(error) => index_error(&error),
    }
}

fn search(store: &Store<RealFs>, query: &str) -> Reply {
    let mut q = None;
    let mut filter = spex_index::SearchFilter { limit: 20, ..spex_index::SearchFilter::default() };
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        match name.as_ref() {
            "q" => q = Some(value.into_owned()),
            "session" => filter.session = Some(value.into_owned()),
            "status" => filter.status = Some(value.into_owned()),
            "since" => {
                let now_ms = spex_engine::env::Clock::now_ms(&spex_engine::env::SystemClock);
                match super::search::since(&value, now_ms) {
                    Ok(since) => filter.since = Some(since),
                    Err(error) => return Reply::error(400, error.0),
                }
            }
            "limit" => match value.parse::<usize>() {
                Ok(limit) if limit <= 1000 => filter.limit = limit,
                _ => return Reply::error(400, format!("limit {value:?} is not 0 to 1000")),
            },
            other => return Reply::error(400, format!("unknown query parameter {other:?}")),
        }
    }
    let Some(q) = q else { return Reply::error(400, "missing q") };
    let index = match fresh_index(store) {
        Ok(index) => index,
        Err(reply) => return reply,
    };
    match index.search(&q, &filter) {
        Ok(hits) => Reply::ok(json!({
            "query": q,
            "hits": hits.iter().map(spex_index::Hit::to_json).collect::<Vec<_>>(),
        })),
        Err(error) => index_error(&error),
    }
}

/// How often an idle event stream sends a comment, so a gone client is noticed.
const WATCH_KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(15);

/// One server-sent event: `id: <version>` and `data: <json>`.
fn event(value: &Value) -> String {
    let id = value["version"].as_i64().unwrap_or(0);
    format!("id: {id}\ndata: {value}\n\n")
}

/// Streams the watch as server-sent events on the raw connection (each event flushed as it
/// happens; a buffered response body would hold small events back). Ends when the client goes
/// away: a keepalive comment every 15 s notices that.
fn watch(store: &Arc<Store<RealFs>>, request: Request) {
    let started = super::watch::Watch::start(Arc::clone(store), std::time::Duration::from_secs(1));
    let (mut watch, reset) = match started {
        Ok(started) => started,
        Err(error) => {
            let reply = Reply::error(500, format!("{error:#}"));
            let _ignored = request.respond(
                Response::from_string(reply.body.to_string()).with_status_code(reply.status),
            );
            return;
        }
    };
    let mut writer = request.into_writer();
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
                Connection: close\r\n\r\n";
    let mut send = |text: &str| -> std::io::Result<()> {
        writer.write_all(text.as_bytes())?;
        writer.flush()
    };
    if send(head).and_then(|()| send(&event(&reset))).is_err() {
        return;
    }
    loop {
        let values = match watch.next(WATCH_KEEPALIVE) {
            Ok(values) => values,
            Err(error) => {
                let _ignored = send(&format!(
                    "event: error\ndata: {}\n\n",
                    json!({ "error": format!("{error:#}") })
                ));
                return;
            }
        };
        let text = if values.is_empty() {
            ": keepalive\n\n".to_owned()
        } else {
            values.iter().map(event).collect()
        };
        if send(&text).is_err() {
            return;
        }
    }
}

fn parse_id(id: &str) -> Result<SessionId, Reply> {
    SessionId::new(id).map_err(|error| engine_error(&error))
}

fn timeline(store: &Store<RealFs>, id: &str, query: &str) -> Reply {
    let id = match parse_id(id) {
        Ok(id) => id,
        Err(reply) => return reply,
    };
    let mut limit = 500;
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if name != "limit" {
            return Reply::error(400, format!("unknown query parameter {name:?}"));
        }
        match value.parse::<usize>() {
            Ok(value) if value <= TIMELINE_LIMIT_MAX => limit = value,
            _ => {
                return Reply::error(
                    400,
                    format!("limit {value:?} is not a number from 0 to {TIMELINE_LIMIT_MAX}"),
                );
            }
        }
    }
    match store.tail(&id, limit) {
        Ok(events) => Reply::ok(json!({
            "session": id.as_str(),
            "events": events.iter().map(Event::to_public_json).collect::<Vec<_>>(),
        })),
        Err(error) => engine_error(&error),
    }
}

/// The body of `POST /api/sessions/:id/input`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Input {
    text: String,
    #[serde(default)]
    from: Option<String>,
    #[serde(default)]
    reply_via: Option<String>,
}

fn input(store: &Store<RealFs>, id: &str, request: &mut Request) -> Reply {
    let id = match parse_id(id) {
        Ok(id) => id,
        Err(reply) => return reply,
    };
    // Two lengths would make the body's end ambiguous (request smuggling): refuse.
    let lengths =
        request.headers().iter().filter(|header| header.field.equiv("Content-Length")).count();
    if lengths > 1 {
        return Reply::error(400, "more than one Content-Length");
    }
    if request.body_length().is_some_and(|length| length > BODY_BYTES_MAX) {
        return Reply::error(413, format!("the body is larger than {BODY_BYTES_MAX} bytes"));
    }
    let key = request
        .headers()
        .iter()
        .find(|header| header.field.equiv("Idempotency-Key"))
        .map(|header| header.value.as_str().to_owned());
    let mut body = Vec::new();
    let limit = u64::try_from(BODY_BYTES_MAX + 1).unwrap_or(u64::MAX);
    if let Err(error) = request.as_reader().take(limit).read_to_end(&mut body) {
        return Reply::error(400, format!("cannot read the body: {error}"));
    }
    if body.len() > BODY_BYTES_MAX {
        return Reply::error(413, format!("the body is larger than {BODY_BYTES_MAX} bytes"));
    }
    let input: Input = match serde_json::from_slice(&body) {
        Ok(input) => input,
        Err(error) => return Reply::error(400, format!("malformed JSON body: {error}")),
    };
    if input.text.is_empty() {
        return Reply::error(400, "text is empty");
    }
    if key.as_deref().is_some_and(str::is_empty) {
        return Reply::error(400, "Idempotency-Key is empty");
    }
    let from = match input.from.as_deref().map(SessionId::new).transpose() {
        Ok(from) => from,
        Err(error) => return engine_error(&error),
    };
    let reply_via = match input.reply_via.as_deref() {
        None => None,
        Some("note") => Some(ReplyArg::Note.channel()),
        Some("terminal") => Some(ReplyArg::Terminal.channel()),
        Some(other) => {
            return Reply::error(400, format!("replyVia {other:?} is not note or terminal"));
        }
    };
    let request = SendRequest {
        text: input.text,
        from,
        reply_via,
        key: key.map(|key| Key { operation: HTTP_OPERATION.to_owned(), key }),
        attributes: None,
    };
    match store.send(&id, &request) {
        Ok(accepted) => Reply::ok(json!({
            "session": id.as_str(),
            "mid": accepted.mid,
            "replayed": accepted.replayed,
            "restored": accepted.restored,
        })),
        Err(error) => engine_error(&error),
    }
}
