//! `spex serve`: the HTTP read surface (and the human input endpoint) on loopback.
//!
//! | method and path                          | answer                                          |
//! |------------------------------------------|-------------------------------------------------|
//! | `GET /api/sessions`                      | sessions, most recently worked in first (index) |
//! | `GET /api/search?q=..&session=&status=&since=&harness=&project=&limit=` | full-text hits (index) |
//! | `GET /api/usage?by=&since=&tz=` | tokens, turns and cost of the harness sessions (index) |
//! | `GET /api/watch`                         | server-sent events: reset, then increments      |
//! | `GET /api/sessions/:id/timeline?limit=N&before=P` | the last N public events before P (default the end), oldest first; `older`, `end` |
//! | `GET /api/sessions/:id/events?after=P`   | server-sent events: the session's new events and its state |
//! | `POST /api/sessions/:id/input`           | a send; `Idempotency-Key` makes it keyed        |
//! | `GET /api/sessions/:id`                  | one session: its state and what it is owed      |
//! | `GET /api/history`                       | harness sessions (index), redacted              |
//! | `GET /api/history/:harness/:id?limit=&before=` | one harness session's events, redacted    |
//! | `GET /api/history/:harness/:id/export`   | its export, unredacted (a move to another device) |
//! | `POST /api/history/:harness/:id/moved`   | records that it moved to `{"to":{"device"}}`    |
//! | `GET /api/fleet/history`                 | every fleet device's harness sessions, by device |
//! | `GET /api/fleet/:device/history/:harness/:id?limit=&before=` | one of them, read through its device |
//! | `GET /`, `GET /assets/*`                 | the web page: the board and the conversation    |
//!
//! The handlers (`api`) parse into the operations every surface shares (`crate::ops`) and answer
//! with their JSON; `reply` maps every error to its status; `streams` holds the event streams.
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

mod api;
mod reply;
mod streams;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::header::{CONNECTION, CONTENT_TYPE, HOST, SET_COOKIE};
use axum::http::{HeaderValue, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use faultfs::RealFs;
use serde_json::json;
use spex_engine::Store;
use spex_engine::layout::TEXT_BYTES_MAX;
use tokio::sync::watch;

use self::api::{
    fleet_history, fleet_history_events, history_events, history_export, history_list,
    history_moved, input, search, session, sessions, timeline, usage,
};
use self::reply::{Reply, STORE_ROOT};
use self::streams::{Feed, session_events, stream_bound, watch_stream};
use super::guard::{Guard, Incoming, Verdict};
use crate::args::Global;
use crate::exit::Code;
use crate::render::{outln, print_json};

/// The operation of a keyed HTTP input (the `Idempotency-Key` header's namespace).
pub(crate) const HTTP_OPERATION: &str = "http-input";

/// The largest accepted request body: the largest message, JSON-escaped, plus the envelope.
pub(crate) const BODY_BYTES_MAX: usize = TEXT_BYTES_MAX * 6 + 4096;

/// The largest request head (request line and headers); larger ones get 431.
pub(crate) const HEAD_BYTES_MAX: usize = 64 * 1024;

/// The largest `limit` a timeline or history request may ask for.
pub(crate) const TIMELINE_LIMIT_MAX: usize = 10_000;

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
    #[arg(long, default_value = "10s", value_parser = crate::when::parse_duration)]
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
pub(super) struct App {
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
        .route("/api/usage", get(usage))
        .route("/api/watch", get(watch_stream))
        .route("/api/sessions/{id}/timeline", get(timeline))
        .route("/api/sessions/{id}/events", get(session_events))
        .route("/api/sessions/{id}/input", post(input))
        .route("/api/history", get(history_list))
        .route("/api/history/{harness}/{id}", get(history_events))
        .route("/api/history/{harness}/{id}/export", get(history_export))
        .route("/api/history/{harness}/{id}/moved", post(history_moved))
        .route("/api/fleet/history", get(fleet_history))
        .route("/api/fleet/{device}/history/{harness}/{id}", get(fleet_history_events))
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
const PAGE: &str = include_str!("../../../assets/index.html");
const SCRIPT: &str = include_str!("../../../assets/app.js");
const STYLE: &str = include_str!("../../../assets/app.css");

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
        guard.check(&Incoming { method: request.method().as_str(), query, header: &header })
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
