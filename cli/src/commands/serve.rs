//! `spex serve`: the HTTP read surface (and the human input endpoint) on loopback.
//!
//! | method and path                          | answer                                          |
//! |------------------------------------------|-------------------------------------------------|
//! | `GET /api/sessions`                      | sessions, most recently worked in first (index) |
//! | `GET /api/search?q=..&session=&status=&since=&limit=` | full-text hits (index)             |
//! | `GET /api/watch`                         | server-sent events: reset, then increments      |
//! | `GET /api/sessions/:id/timeline?limit=N&before=P` | the last N public events before P (default the end), oldest first; `older`, `end` |
//! | `GET /api/sessions/:id/events?after=P`   | server-sent events: the session's new events and its state |
//! | `POST /api/sessions/:id/input`           | a send; `Idempotency-Key` makes it keyed        |
//! | `GET /api/sessions/:id`                  | one session: its state and what it is owed      |
//! | `GET /api/history`                       | harness sessions (index), redacted              |
//! | `GET /api/history/:harness/:id?limit=&before=` | one harness session's events, redacted    |
//! | `GET /`, `GET /assets/*`                 | the web page: the board and the conversation    |
//!
//! Every request passes the guard first (see `guard`: the token, the host, JSON from the
//! server's own origin for a change): 401, 403 or 415 otherwise, before anything is read.
//!
//! Errors are JSON `{"error": "..."}` with the status that names the cause: 400 bad input, 404
//! unknown session or path, 405 wrong method, 408 a body that stopped arriving, 409 key
//! conflict, 413 body too large, 503 lock busy (with `Retry-After`), 500 anything else (the
//! store's own error text). A head larger than [`HEAD_BYTES_MAX`] gets 431 from the HTTP layer.
//! Reads take no lock; an input is acknowledged only once it is durable, exactly as
//! `spex session send`.
//!
//! Resources: the server runs on a small async runtime; every engine and index call runs on the
//! blocking pool, so a slow disk or a waiting lock never stalls the other connections. Event
//! streams share one feed (one filesystem watcher and one index refresh for all of them) and
//! cost no thread while they wait. A head must arrive within `--read-timeout`, and so must each
//! piece of a body; an idle kept-alive connection is closed after the same time. At most
//! `--max-connections` connections are served at once; more wait in the listen backlog.
//!
//! Stopping: on SIGINT or SIGTERM the server stops accepting, ends its event streams, lets the
//! requests in flight finish (a send under way completes and is durable), and exits 0.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HOST, RETRY_AFTER, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use faultfs::RealFs;
use serde::Deserialize;
use serde_json::{Value, json};
use spex_engine::layout::TEXT_BYTES_MAX;
use spex_engine::{Error, Event, Key, Position, SessionId, Store};
use tokio::sync::{broadcast, watch};

use super::guard::{Guard, Seen, Verdict};
use crate::args::{Global, ReplyArg};
use crate::exit::Code;
use crate::ops::{
    self,
    timeline::{PAGE_EVENTS_MAX, PageRequest},
};
use crate::render::{outln, print_json};

/// The operation of a keyed HTTP input (the `Idempotency-Key` header's namespace).
pub(crate) const HTTP_OPERATION: &str = "http-input";

/// The largest accepted request body: the largest message, JSON-escaped, plus the envelope.
pub(crate) const BODY_BYTES_MAX: usize = TEXT_BYTES_MAX * 6 + 4096;

/// The largest request head (request line and headers); larger ones get 431.
pub(crate) const HEAD_BYTES_MAX: usize = 64 * 1024;

/// The most headers a request may carry (more get 431).
const HEADERS_MAX: usize = 100;

/// How often an idle event stream sends a comment, so a gone client is noticed.
const WATCH_KEEPALIVE: Duration = Duration::from_secs(15);

/// How long a stopping server waits for the requests in flight.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Arguments of `spex serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Where to listen (loopback by default; port 0 picks a free port, printed on stdout).
    #[arg(long, default_value = "127.0.0.1:7477")]
    addr: SocketAddr,
    /// Threads answering requests (engine calls run beside them, on a bounded pool).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    threads: u16,
    /// The most connections served at once; more wait to be accepted.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    max_connections: u32,
    /// How long a request's head, or each piece of its body, may take to arrive; also how long
    /// an idle connection is kept.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    read_timeout: Duration,
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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(usize::from(args.threads))
        .max_blocking_threads(64)
        .thread_name("spex-serve")
        .enable_all()
        .build()
        .context("cannot start the server's runtime")?;
    // Dropping the runtime waits for the engine calls still running on the blocking pool, so
    // a send that was under way when the server stopped completes.
    runtime.block_on(serve(args, global, store))?;
    Ok(Code::Ok)
}

/// What every handler shares.
#[derive(Clone)]
struct App {
    store: Arc<Store<RealFs>>,
    /// Event streams held open: bounded below the connection bound ([`stream_bound`]), so
    /// ordinary requests always find a slot.
    streams: Arc<tokio::sync::Semaphore>,
    feed: Arc<Feed>,
    stop: watch::Receiver<bool>,
    /// Where harness transcripts are found (the watch stream carries their sessions).
    roots: Arc<Vec<spex_history::Root>>,
    /// Whose identity redaction hides.
    identity: Arc<spex_history::Identity>,
}

/// How many event streams may be open at once with `max_connections` connections: half of
/// them (at least one), so as many connections stay for ordinary requests.
fn stream_bound(max_connections: u32) -> usize {
    (max_connections as usize / 2).max(1)
}

/// The answer to an event stream over the bound.
fn too_many_streams() -> Response {
    Reply {
        retry_after: true,
        ..Reply::error(503, "too many event streams are open; try again later")
    }
    .into_response()
}

async fn serve(args: &Args, global: &Global, store: Arc<Store<RealFs>>) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .with_context(|| format!("cannot listen on {}", args.addr))?;
    let addr = listener.local_addr().context("the server listens on an IP address")?;
    let guard = Arc::new(Guard::new(store.layout().root(), args.token_file.as_deref(), addr)?);
    let url = format!("http://{addr}/?token={}", guard.token());
    if global.json {
        print_json(json!({ "url": url, "token": guard.token() }))?;
    } else {
        outln!("{url}")?;
    }
    std::io::Write::flush(&mut std::io::stdout())?;
    eprintln!("spex serve: store {}; Ctrl-C stops", store.layout().root().display());

    let (stopping, stop) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        let _ignored = stopping.send(true);
    });
    let roots = crate::args::history_roots(global, &[])?;
    let router = router(store, guard, args.read_timeout, args.max_connections, stop.clone(), roots);

    let http = connection_builder(args.read_timeout);
    let slots = Arc::new(tokio::sync::Semaphore::new(args.max_connections as usize));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut until_stop = stop.clone();
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&slots).acquire_owned() => permit.context("the connection bound")?,
            _ = until_stop.wait_for(|stop| *stop) => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(error) => {
                    // Out of descriptors, a connection reset before it was accepted: the
                    // listener itself is fine; wait a moment and go on.
                    eprintln!("spex serve: accept: {error}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = until_stop.wait_for(|stop| *stop) => break,
        };
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        let connection =
            graceful.watch(http.serve_connection(hyper_util::rt::TokioIo::new(stream), service));
        tokio::spawn(async move {
            // A client that goes away mid-request is its own business.
            let _ignored = connection.await;
            drop(permit);
        });
    }
    drop(listener);
    eprintln!("spex serve: stopping; letting the requests in flight finish");
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(SHUTDOWN_GRACE) => {
            eprintln!("spex serve: some connections did not finish within {SHUTDOWN_GRACE:?}");
        }
    }
    Ok(())
}

/// How every connection is served: HTTP/1.1, the head bounds, the read timeout, and answers
/// still written to a client that closed its sending side (`nc -N`, a fuzzer).
pub(crate) fn connection_builder(read_timeout: Duration) -> hyper::server::conn::http1::Builder {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(read_timeout)
        .half_close(true)
        .max_buf_size(HEAD_BYTES_MAX * 2)
        .max_header_size(HEAD_BYTES_MAX)
        .max_headers(HEADERS_MAX);
    http
}

/// SIGINT or SIGTERM, whichever comes first (SIGINT alone where SIGTERM cannot be watched).
async fn wait_for_signal() {
    let interrupt = tokio::signal::ctrl_c();
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut terminate) => {
            tokio::select! {
                _ = interrupt => {}
                _ = terminate.recv() => {}
            }
        }
        Err(error) => {
            eprintln!("spex serve: cannot watch SIGTERM ({error}); Ctrl-C stops");
            let _ignored = interrupt.await;
        }
    }
}

/// Every route behind the guard. Event streams end once `stop` turns true.
pub(crate) fn router(
    store: Arc<Store<RealFs>>,
    guard: Arc<Guard>,
    read_timeout: Duration,
    max_connections: u32,
    stop: watch::Receiver<bool>,
    roots: Vec<spex_history::Root>,
) -> Router {
    let _already = STORE_ROOT.set(store.layout().root().display().to_string());
    let app = App {
        streams: Arc::new(tokio::sync::Semaphore::new(stream_bound(max_connections))),
        store,
        feed: Arc::new(Feed::default()),
        stop,
        roots: Arc::new(roots),
        identity: Arc::new(spex_history::Identity::of_this_machine()),
    };
    Router::new()
        .route("/", get(|| async { asset(PAGE, "text/html; charset=utf-8") }))
        .route("/assets/app.js", get(|| async { asset(SCRIPT, "text/javascript; charset=utf-8") }))
        .route("/assets/app.css", get(|| async { asset(STYLE, "text/css; charset=utf-8") }))
        .route("/api/sessions/{id}", get(session))
        .route("/api/sessions", get(sessions))
        .route("/api/search", get(search))
        .route("/api/watch", get(watch_stream))
        .route("/api/sessions/{id}/timeline", get(timeline))
        .route("/api/sessions/{id}/events", get(session_events))
        .route("/api/sessions/{id}/input", post(input))
        .route("/api/history", get(history_list))
        .route("/api/history/{harness}/{id}", get(history_events))
        .method_not_allowed_fallback(|uri: Uri| async move {
            Reply::error(405, format!("method not allowed on {}", uri.path()))
        })
        .fallback(|uri: Uri| async move { Reply::error(404, format!("no route {}", uri.path())) })
        .with_state(app)
        .layer(axum::middleware::from_fn_with_state(guard, admit))
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(read_timeout))
}

/// The web page and its two assets, built into the binary (no build step, nothing fetched from
/// elsewhere: the policy below forbids it).
const PAGE: &str = include_str!("../../assets/index.html");
const SCRIPT: &str = include_str!("../../assets/app.js");
const STYLE: &str = include_str!("../../assets/app.css");

/// What the page may load and connect to: this server alone.
const PAGE_POLICY: &str = "default-src 'self'; img-src 'self' data:; object-src 'none'; \
                           base-uri 'none'; frame-ancestors 'none'; form-action 'self'";

/// One embedded asset, with its type and the page's content policy.
fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert("content-security-policy", HeaderValue::from_static(PAGE_POLICY));
    headers.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    headers.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    response
}

/// The served store's root as text, cut from error answers (set once, when the router is built).
static STORE_ROOT: std::sync::OnceLock<String> = std::sync::OnceLock::new();

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

    /// An error answer. No answer names a path outside the store: the store's root is cut from
    /// every message (its files are named relative to it).
    fn error(status: u16, message: impl Into<String>) -> Reply {
        let mut message = message.into();
        if let Some(root) = STORE_ROOT.get() {
            message = message.replace(root.as_str(), "<store>");
        }
        Reply { status, body: json!({ "error": message }), retry_after: false }
    }
}

impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, self.body.to_string()).into_response();
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json; charset=utf-8"));
        if self.retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

/// The guard in front of every route (see `guard`).
async fn admit(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let verdict = {
        let headers = request.headers();
        // Two Host headers (the guard would see only the first): refused as malformed.
        if headers.get_all(HOST).iter().count() > 1 {
            let mut response = Reply::error(400, "more than one Host header").into_response();
            response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
            return response;
        }
        let header = |name: &str| {
            headers.get(name).map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
        };
        let query = request.uri().query().unwrap_or("");
        guard.check(&Seen { method: request.method().as_str(), query, header: &header })
    };
    // The path only: the query may carry the token.
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    match verdict {
        // A client that fails the guard holds no connection slot: the answer closes it.
        Verdict::Deny(status, reason) => {
            tracing::debug!(%method, path, status, reason, "refused");
            let mut response = Reply::error(status, reason).into_response();
            response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
            response
        }
        Verdict::Allow { set_cookie } => {
            let started = std::time::Instant::now();
            let mut response = next.run(request).await;
            tracing::debug!(
                %method,
                path,
                status = response.status().as_u16(),
                ms = started.elapsed().as_millis() as u64,
                "answered"
            );
            if set_cookie && let Ok(cookie) = HeaderValue::from_str(&guard.cookie()) {
                response.headers_mut().append(SET_COOKIE, cookie);
            }
            response
        }
    }
}

/// Runs `work` on the blocking pool (engine and index calls block on the disk and on locks).
async fn blocking(work: impl FnOnce() -> Reply + Send + 'static) -> Reply {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|error| Reply::error(500, format!("the request's work failed: {error}")))
}

async fn session(State(app): State<App>, Path(id): Path<String>) -> Reply {
    blocking(move || session_blocking(&app.store, &id)).await
}

async fn sessions(State(app): State<App>) -> Reply {
    blocking(move || list(&app.store)).await
}

async fn search(State(app): State<App>, RawQuery(query): RawQuery) -> Reply {
    blocking(move || search_blocking(&app, query.as_deref().unwrap_or(""))).await
}

async fn history_list(State(app): State<App>) -> Reply {
    blocking(move || history_blocking(&app)).await
}

async fn history_events(
    State(app): State<App>,
    Path((harness, id)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Reply {
    blocking(move || history_events_blocking(&app, &harness, &id, query.as_deref().unwrap_or("")))
        .await
}

async fn timeline(
    State(app): State<App>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Reply {
    blocking(move || timeline_blocking(&app.store, &id, query.as_deref().unwrap_or(""))).await
}

async fn input(
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

/// The reply for a body that could not be read: too large (413), too slow (408), or broken.
fn body_error(error: &axum::Error) -> Reply {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = source {
        if cause.is::<http_body_util::LengthLimitError>() {
            return Reply::error(413, format!("the body is larger than {BODY_BYTES_MAX} bytes"));
        }
        if cause.is::<tower_http::timeout::TimeoutError>() {
            return Reply::error(408, "the body stopped arriving");
        }
        source = cause.source();
    }
    Reply::error(400, format!("cannot read the body: {error}"))
}

/// The reply for an engine error.
fn engine_error(error: &Error) -> Reply {
    match error {
        Error::NoSuchSession { .. } => Reply::error(404, "no such session"),
        Error::InvalidId { .. }
        | Error::InvalidInput { .. }
        | Error::InvalidCursor { .. }
        | Error::Revoked { .. } => Reply::error(400, error.to_string()),
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

/// The reply for an operation's error: bad input (400), else the engine's or the index's.
fn op_error(error: &anyhow::Error) -> Reply {
    if let Some(error) = error.downcast_ref::<Error>() {
        engine_error(error)
    } else if let Some(error) = error.downcast_ref::<spex_index::Error>() {
        index_error(error)
    } else if let Some(error) = error.downcast_ref::<crate::exit::BadInput>() {
        Reply::error(400, error.0.clone())
    } else {
        Reply::error(500, format!("{error:#}"))
    }
}

/// The index of `store`, refreshed.
fn fresh_index(store: &Store<RealFs>) -> Result<spex_index::Index, Reply> {
    let (index, healed) =
        spex_index::Index::open_refreshed(store, &|_| {}).map_err(|error| index_error(&error))?;
    if let Some(healed) = healed {
        eprintln!("spex serve: warning: {healed}");
    }
    Ok(index)
}

/// The index of the app's store, refreshed, with the transcripts under its roots scanned.
fn fresh_index_with_history(app: &App) -> Result<spex_index::Index, Reply> {
    let mut index = fresh_index(&app.store)?;
    let found =
        spex_history::discover(&app.roots).map_err(|error| Reply::error(500, error.to_string()))?;
    index.scan_history(&found).map_err(|error| index_error(&error))?;
    Ok(index)
}

/// `GET /api/history`: every history session (harness transcript), as the watch stream's reset
/// carries them.
fn history_blocking(app: &App) -> Reply {
    let index = match fresh_index_with_history(app) {
        Ok(index) => index,
        Err(reply) => return reply,
    };
    match index.history() {
        Ok(history) => Reply::ok(json!({
            "history": history
                .into_iter()
                .map(|history| history.shown(&app.identity).to_json())
                .collect::<Vec<_>>(),
        })),
        Err(error) => index_error(&error),
    }
}

/// `GET /api/history/:harness/:id[?limit=N&before=LINE]`: a history session's events, redacted,
/// the last `limit` (default 500) of those before transcript line `before` (default: the end);
/// `more` says whether older ones remain.
fn history_events_blocking(app: &App, harness: &str, id: &str, query: &str) -> Reply {
    let mut limit = 500;
    let mut before = u64::MAX;
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        let number = value.parse::<u64>();
        match (name.as_ref(), number) {
            ("limit", Ok(value)) if value <= PAGE_EVENTS_MAX as u64 => limit = value as usize,
            ("before", Ok(value)) => before = value,
            ("limit" | "before", _) => {
                return Reply::error(400, format!("{name} {value:?} is not a number in range"));
            }
            (other, _) => return Reply::error(400, format!("unknown query parameter {other:?}")),
        }
    }
    let Some(harness) = spex_history::Harness::parse(harness) else {
        return Reply::error(404, format!("no harness {harness:?} (claude or codex)"));
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
    let from = earlier.len().saturating_sub(limit);
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
fn list(store: &Store<RealFs>) -> Reply {
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
fn search_blocking(app: &App, query: &str) -> Reply {
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
                match crate::args::since(&value, jiff::Timestamp::now(), &zone) {
                    Ok(since) => filter.since = Some(since),
                    Err(error) => return Reply::error(400, error.0),
                }
            }
            "harness" => match value.as_ref() {
                "spex" | "claude" | "codex" => filter.source = Some(value.into_owned()),
                _ => {
                    return Reply::error(
                        400,
                        format!("harness {value:?} is not spex, claude or codex"),
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

/// `GET /api/sessions/:id`: the session's state as its record says, and the messages it is owed
/// (their mids and senders: the page marks each message delivered or owed).
fn session_blocking(store: &Store<RealFs>, id: &str) -> Reply {
    match parse_id(id).and_then(|id| session_state(store, &id)) {
        Ok(state) => Reply::ok(state),
        Err(reply) => reply,
    }
}

/// A session's state and what it is owed, as `GET /api/sessions/:id` answers.
fn session_state(store: &Store<RealFs>, id: &SessionId) -> Result<Value, Reply> {
    ops::show::show(store, id).map(|view| view.to_page_json()).map_err(|error| op_error(&error))
}

fn parse_id(id: &str) -> Result<SessionId, Reply> {
    SessionId::new(id).map_err(|error| engine_error(&error))
}

/// `GET /api/sessions/:id/timeline[?limit=N&before=POSITION]`: the last `limit` public events
/// before `before` (a page's `older`; default: the end), oldest first, read backward (never the
/// whole log); `older` names the next page (null at the start), `end` where the page ends (the
/// session's event stream continues from there).
fn timeline_blocking(store: &Store<RealFs>, id: &str, query: &str) -> Reply {
    let session = match parse_id(id) {
        Ok(id) => id,
        Err(reply) => return reply,
    };
    let mut request = PageRequest { session, limit: 500, before: None };
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        match name.as_ref() {
            "limit" => match value.parse::<usize>() {
                Ok(value) => request.limit = value,
                Err(_) => return Reply::error(400, format!("limit {value:?} is not a number")),
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
struct Input {
    text: String,
    #[serde(default)]
    from: Option<String>,
    #[serde(default)]
    reply_via: Option<String>,
}

fn input_blocking(store: &Store<RealFs>, id: &str, key: Option<String>, body: &[u8]) -> Reply {
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

// ---------------------------------------------------------------------------------------------
// Event streams
// ---------------------------------------------------------------------------------------------

/// The one feed of changes all event streams share: a thread that runs a [`Watch`] and
/// broadcasts its increments, started by the first stream and ended when the last one goes.
///
/// [`Watch`]: super::watch::Watch
#[derive(Debug, Default)]
struct Feed {
    running: Arc<Mutex<Option<broadcast::Sender<Arc<Value>>>>>,
}

/// How many values a slow stream may fall behind before it is sent a fresh reset.
const FEED_BACKLOG: usize = 1024;

impl Feed {
    /// A receiver of the feed's values, starting the feed if it is not running. Blocking (the
    /// first start refreshes the index).
    fn subscribe(
        &self,
        store: &Arc<Store<RealFs>>,
        roots: &[spex_history::Root],
    ) -> anyhow::Result<broadcast::Receiver<Arc<Value>>> {
        let mut running = self.running.lock().map_err(|_| anyhow::anyhow!("the feed panicked"))?;
        if let Some(sender) = running.as_ref() {
            return Ok(sender.subscribe());
        }
        let (mut watch, _reset) =
            super::watch::Watch::start(Arc::clone(store), Duration::from_secs(1), roots.to_vec())?;
        let (sender, receiver) = broadcast::channel(FEED_BACKLOG);
        *running = Some(sender.clone());
        let slot = Arc::clone(&self.running);
        std::thread::Builder::new()
            .name("spex-serve-feed".to_owned())
            .spawn(move || {
                loop {
                    // The decision to stop is taken under the lock a subscriber takes, so no
                    // stream ever subscribes to a feed that has decided to end.
                    let values = watch.next(Duration::from_secs(5));
                    let Ok(mut running) = slot.lock() else { return };
                    match values {
                        Ok(values) => {
                            for value in values {
                                let _nobody = sender.send(Arc::new(value));
                            }
                            if sender.receiver_count() == 0 {
                                *running = None;
                                return;
                            }
                        }
                        Err(error) => {
                            let _nobody = sender.send(Arc::new(
                                json!({ "type": "error", "error": format!("{error:#}") }),
                            ));
                            *running = None;
                            return;
                        }
                    }
                }
            })
            .context("cannot start the watch feed")?;
        Ok(receiver)
    }
}

/// A subscription and the reset snapshot it starts from (blocking).
fn start_stream(app: &App) -> anyhow::Result<(broadcast::Receiver<Arc<Value>>, Value)> {
    // Subscribe first: every change after the snapshot's refresh is then broadcast to us.
    let receiver = app.feed.subscribe(&app.store, &app.roots)?;
    let mut index = crate::args::open_index(&app.store)?;
    let reset = super::watch::snapshot(&app.store, &mut index, &app.roots, &app.identity)?;
    Ok((receiver, reset))
}

/// One stream's progress.
struct Stream {
    app: App,
    first: Option<Value>,
    receiver: broadcast::Receiver<Arc<Value>>,
    version: i64,
    done: bool,
    /// The stream's place under the bound, given back when the stream ends.
    _permit: tokio::sync::OwnedSemaphorePermit,
}

/// `GET /api/watch`: the watch as server-sent events (see `watch`), ended by the server's stop.
async fn watch_stream(State(app): State<App>) -> Response {
    let Ok(permit) = Arc::clone(&app.streams).try_acquire_owned() else {
        return too_many_streams();
    };
    let started = {
        let app = app.clone();
        tokio::task::spawn_blocking(move || start_stream(&app)).await
    };
    let (receiver, reset) = match started {
        Ok(Ok(started)) => started,
        Ok(Err(error)) => return Reply::error(500, format!("{error:#}")).into_response(),
        Err(error) => {
            return Reply::error(500, format!("the watch failed: {error}")).into_response();
        }
    };
    let version = reset["version"].as_i64().unwrap_or(0);
    let stream =
        Stream { app, first: Some(reset), receiver, version, done: false, _permit: permit };
    let events = futures_util::stream::unfold(stream, next_event);
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(WATCH_KEEPALIVE).text("keepalive"))
        .into_response()
}

/// One server-sent event: `id: <version>` and `data: <json>`.
fn sse(value: &Value) -> SseEvent {
    let event = SseEvent::default().data(value.to_string());
    match value["version"].as_i64() {
        Some(version) => event.id(version.to_string()),
        None => event,
    }
}

fn sse_error(message: &str) -> SseEvent {
    SseEvent::default().event("error").data(json!({ "error": message }).to_string())
}

/// The stream's next event: its reset, then every feed value newer than what it sent, a fresh
/// reset when it fell behind; nothing once the server stops.
async fn next_event(mut stream: Stream) -> Option<(Result<SseEvent, Infallible>, Stream)> {
    if stream.done {
        return None;
    }
    if let Some(reset) = stream.first.take() {
        return Some((Ok(sse(&reset)), stream));
    }
    let mut stop = stream.app.stop.clone();
    loop {
        let received = tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return None,
            received = stream.receiver.recv() => received,
        };
        match received {
            Ok(value) => match value["type"].as_str() {
                Some("error") => {
                    stream.done = true;
                    let message = value["error"].as_str().unwrap_or("the watch failed").to_owned();
                    return Some((Ok(sse_error(&message)), stream));
                }
                Some("reset") => {
                    stream.version = value["version"].as_i64().unwrap_or(0);
                    return Some((Ok(sse(&value)), stream));
                }
                _ => {
                    let version = value["version"].as_i64().unwrap_or(0);
                    if version > stream.version {
                        stream.version = version;
                        return Some((Ok(sse(&value)), stream));
                    }
                }
            },
            Err(broadcast::error::RecvError::Lagged(_)) => {
                let app = stream.app.clone();
                let reset = tokio::task::spawn_blocking(move || {
                    let mut index = crate::args::open_index(&app.store)?;
                    super::watch::snapshot(&app.store, &mut index, &app.roots, &app.identity)
                })
                .await;
                match reset {
                    Ok(Ok(reset)) => {
                        stream.version = reset["version"].as_i64().unwrap_or(0);
                        return Some((Ok(sse(&reset)), stream));
                    }
                    Ok(Err(error)) => {
                        stream.done = true;
                        return Some((Ok(sse_error(&format!("{error:#}"))), stream));
                    }
                    Err(error) => {
                        stream.done = true;
                        return Some((Ok(sse_error(&error.to_string())), stream));
                    }
                }
            }
            Err(broadcast::error::RecvError::Closed) => {
                stream.done = true;
                return Some((Ok(sse_error("the watch feed ended")), stream));
            }
        }
    }
}

/// How often a session's event stream looks for new events and a changed state when the shared
/// feed names nothing (a stat of the newest segment and a read of the small queue and record):
/// the feed names the session at every change the index sees, so this is only a backstop.
const SESSION_POLL: Duration = Duration::from_secs(5);

/// One session's event stream.
struct SessionStream {
    app: App,
    id: SessionId,
    /// Where the next events are read from.
    after: Position,
    /// The state last sent.
    state: Option<Value>,
    /// Values read but not yet sent.
    pending: std::collections::VecDeque<Value>,
    /// The shared feed: a value naming this session (or a reset) means a look is due.
    feed: broadcast::Receiver<Arc<Value>>,
    feed_ended: bool,
    done: bool,
    /// The stream's place under the bound, given back when the stream ends.
    _permit: tokio::sync::OwnedSemaphorePermit,
}

/// Whether a watch stream value may concern session `id` (a reset or an error may).
fn names_session(value: &Value, id: &str) -> bool {
    match value["type"].as_str() {
        Some("update") => value["session"]["id"] == id,
        Some("remove") => value["id"] == id,
        _ => true,
    }
}

/// `GET /api/sessions/:id/events[?after=POSITION]`: one session as server-sent events:
/// `{"type":"events","events":[...],"end":P}` for what was appended after `after` (a timeline
/// page's `end`; default: the end now), and `{"type":"session",...}` (as `GET
/// /api/sessions/:id`) first and whenever its state or what it is owed changes. Ends with an
/// `error` event if the session can no longer be read, and when the server stops.
async fn session_events(
    State(app): State<App>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let mut after = None;
    for (name, value) in form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes()) {
        match (name.as_ref(), value.parse::<Position>()) {
            ("after", Ok(position)) => after = Some(position),
            ("after", Err(error)) => return Reply::error(400, error.to_string()).into_response(),
            (other, _) => {
                return Reply::error(400, format!("unknown query parameter {other:?}"))
                    .into_response();
            }
        }
    }
    let id = match parse_id(&id) {
        Ok(id) => id,
        Err(reply) => return reply.into_response(),
    };
    let Ok(permit) = Arc::clone(&app.streams).try_acquire_owned() else {
        return too_many_streams();
    };
    let started = {
        let (app, id) = (app.clone(), id.clone());
        tokio::task::spawn_blocking(move || {
            // Subscribed before the position is taken: a change after it is named by the feed.
            let feed = app
                .feed
                .subscribe(&app.store, &app.roots)
                .map_err(|error| Reply::error(500, format!("{error:#}")))?;
            let end = app.store.page(&id, None, 0).map_err(|e| engine_error(&e))?.end;
            let after = match after {
                // The end, or where a line starts (or a segment ends), else 400 naming the
                // cursor: a page that ends there proves it.
                Some(after) if after != end => {
                    app.store.page(&id, Some(after), 1).map_err(|e| engine_error(&e))?;
                    after
                }
                Some(after) => after,
                None => end,
            };
            Ok::<_, Reply>((feed, after))
        })
        .await
    };
    let (feed, after) = match started {
        Ok(Ok(started)) => started,
        Ok(Err(reply)) => return reply.into_response(),
        Err(error) => {
            return Reply::error(500, format!("the stream failed: {error}")).into_response();
        }
    };
    let stream = SessionStream {
        app,
        id,
        after,
        state: None,
        pending: std::collections::VecDeque::new(),
        feed,
        feed_ended: false,
        done: false,
        _permit: permit,
    };
    Sse::new(futures_util::stream::unfold(stream, next_session_event))
        .keep_alive(KeepAlive::new().interval(WATCH_KEEPALIVE).text("keepalive"))
        .into_response()
}

/// The session stream's next event: what it holds, else what a poll finds, else a wait.
async fn next_session_event(
    mut stream: SessionStream,
) -> Option<(Result<SseEvent, Infallible>, SessionStream)> {
    if stream.done {
        return None;
    }
    let mut stop = stream.app.stop.clone();
    loop {
        if let Some(value) = stream.pending.pop_front() {
            return Some((Ok(SseEvent::default().data(value.to_string())), stream));
        }
        let (store, id, after) = (Arc::clone(&stream.app.store), stream.id.clone(), stream.after);
        let polled = tokio::task::spawn_blocking(move || {
            let (events, next) = store.follow_from(&id, after).map_err(|e| engine_error(&e))?;
            let state = session_state(&store, &id)?;
            Ok::<_, Reply>((events, next, state))
        })
        .await;
        match polled {
            Ok(Ok((events, next, state))) => {
                if !events.is_empty() {
                    stream.pending.push_back(json!({
                        "type": "events",
                        "events": events.iter().map(Event::to_public_json).collect::<Vec<_>>(),
                        "end": next.to_string(),
                    }));
                }
                stream.after = next;
                if stream.state.as_ref() != Some(&state) {
                    let mut value = state.clone();
                    if let Some(map) = value.as_object_mut() {
                        map.insert("type".to_owned(), "session".into());
                    }
                    stream.pending.push_back(value);
                    stream.state = Some(state);
                }
            }
            Ok(Err(reply)) => {
                stream.done = true;
                let message = reply.body["error"].as_str().unwrap_or("cannot read").to_owned();
                return Some((Ok(sse_error(&message)), stream));
            }
            Err(error) => {
                stream.done = true;
                return Some((Ok(sse_error(&error.to_string())), stream));
            }
        }
        // Wait for the feed to name this session (or fall behind), or for the backstop.
        let backstop = tokio::time::sleep(SESSION_POLL);
        tokio::pin!(backstop);
        while stream.pending.is_empty() {
            tokio::select! {
                _ = stop.wait_for(|stop| *stop) => return None,
                () = &mut backstop => break,
                received = stream.feed.recv(), if !stream.feed_ended => match received {
                    Ok(value) if !names_session(&value, stream.id.as_str()) => {}
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => break,
                    // The feed ended (its watch failed): the backstop alone from here.
                    Err(broadcast::error::RecvError::Closed) => stream.feed_ended = true,
                },
            }
        }
    }
}
