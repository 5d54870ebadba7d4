//! Server-sent event streams: the live board (`GET /api/watch`) and one session's conversation
//! (`GET /api/sessions/:id/events`). Every stream shares one feed of changes (one filesystem
//! watcher and one index refresh for all); a stream costs no thread while it waits, and at most
//! half the connections may be streams.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use axum::extract::{Path, RawQuery, State};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use faultfs::RealFs;
use serde_json::{Value, json};
use spex_engine::{Event, Position, SessionId, Store};
use tokio::sync::broadcast;

use super::api::{parse_id, session_state};
use super::reply::{Reply, engine_error};
use super::{App, WATCH_KEEPALIVE};

/// How many event streams may be open at once with `max_connections` connections: half of
/// them (at least one), so as many connections stay for ordinary requests.
pub(super) fn stream_bound(max_connections: u32) -> usize {
    (max_connections as usize / 2).max(1)
}

/// The answer to an event stream over the bound.
pub(super) fn too_many_streams() -> Response {
    Reply {
        retry_after: true,
        ..Reply::error(503, "too many event streams are open; try again later")
    }
    .into_response()
}

/// The one feed of changes all event streams share: a thread that runs a [`Watch`] and
/// broadcasts its increments, started by the first stream and ended when the last one goes.
///
/// [`Watch`]: crate::commands::watch::Watch
#[derive(Debug, Default)]
pub(super) struct Feed {
    running: Arc<Mutex<Option<broadcast::Sender<Arc<Value>>>>>,
}

/// How many values a slow stream may fall behind before it is sent a fresh reset.
pub(super) const FEED_BACKLOG: usize = 1024;

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
        let (mut watch, _reset) = crate::commands::watch::Watch::start(
            Arc::clone(store),
            Duration::from_secs(1),
            roots.to_vec(),
        )?;
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
pub(super) fn start_stream(app: &App) -> anyhow::Result<(broadcast::Receiver<Arc<Value>>, Value)> {
    // Subscribe first: every change after the snapshot's refresh is then broadcast to us.
    let receiver = app.feed.subscribe(&app.store, &app.roots)?;
    let mut index = crate::args::open_index(&app.store)?;
    let reset =
        crate::commands::watch::snapshot(&app.store, &mut index, &app.roots, &app.identity)?;
    Ok((receiver, reset))
}

/// One stream's progress.
pub(super) struct Stream {
    app: App,
    first: Option<Value>,
    receiver: broadcast::Receiver<Arc<Value>>,
    version: i64,
    done: bool,
    /// The stream's place under the bound, given back when the stream ends.
    _permit: tokio::sync::OwnedSemaphorePermit,
}

/// `GET /api/watch`: the watch as server-sent events (see `watch`), ended by the server's stop.
pub(super) async fn watch_stream(State(app): State<App>) -> Response {
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
pub(super) fn sse(value: &Value) -> SseEvent {
    let event = SseEvent::default().data(value.to_string());
    match value["version"].as_i64() {
        Some(version) => event.id(version.to_string()),
        None => event,
    }
}

pub(super) fn sse_error(message: &str) -> SseEvent {
    SseEvent::default().event("error").data(json!({ "error": message }).to_string())
}

/// The stream's next event: its reset, then every feed value newer than what it sent, a fresh
/// reset when it fell behind; nothing once the server stops.
pub(super) async fn next_event(
    mut stream: Stream,
) -> Option<(Result<SseEvent, Infallible>, Stream)> {
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
                    crate::commands::watch::snapshot(
                        &app.store,
                        &mut index,
                        &app.roots,
                        &app.identity,
                    )
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
pub(super) const SESSION_POLL: Duration = Duration::from_secs(5);

/// One session's event stream.
pub(super) struct SessionStream {
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
pub(super) fn names_session(value: &Value, id: &str) -> bool {
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
pub(super) async fn session_events(
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
pub(super) async fn next_session_event(
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
