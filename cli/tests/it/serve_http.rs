//! The HTTP surface: a real `spex serve` on loopback driven by a real HTTP client.
//! It matters because the HTTP input is the same durable send as the CLI's, and its errors must
//! be as precise: the right status, a JSON reason, and nothing written.

#![expect(clippy::unwrap_used, reason = "tests fail loudly on unexpected errors")]

use crate::common;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};

use common::Store;
use serde_json::{Value, json};

struct Server {
    child: std::process::Child,
    /// `http://127.0.0.1:PORT`, without the token.
    url: String,
    token: String,
    agent: ureq::Agent,
}

impl Server {
    fn start(store: &Store) -> Server {
        Server::start_with(store, &[])
    }

    fn start_with(store: &Store, extra: &[&str]) -> Server {
        let mut args = vec!["serve", "--addr", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let mut child = store.spawn(&args);
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        let printed = line.trim().to_owned();
        assert!(
            printed.starts_with("http://127.0.0.1:"),
            "the first stdout line is the URL: {printed}"
        );
        let (url, token) = printed.split_once("/?token=").expect("the URL carries the token");
        assert_eq!(token.len(), 64, "{printed}");
        let agent: ureq::Agent =
            ureq::Agent::config_builder().http_status_as_error(false).build().into();
        Server { child, url: url.to_owned(), token: token.to_owned(), agent }
    }

    fn get(&self, path: &str) -> (u16, Value) {
        let mut response = self
            .agent
            .get(format!("{}{path}", self.url))
            .header("Authorization", self.bearer())
            .call()
            .unwrap();
        let status = response.status().as_u16();
        (status, serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap())
    }

    fn post(&self, path: &str, key: Option<&str>, body: &str) -> (u16, Value) {
        let mut request = self
            .agent
            .post(format!("{}{path}", self.url))
            .header("Authorization", self.bearer())
            .header("Content-Type", "application/json");
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        let mut response = request.send(body).unwrap();
        let status = response.status().as_u16();
        (status, serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap())
    }
}

impl Server {
    fn address(&self) -> String {
        self.url.trim_start_matches("http://").to_owned()
    }

    /// A connection that has sent `head` (and nothing more).
    fn open(&self, head: &str) -> std::net::TcpStream {
        let mut stream = std::net::TcpStream::connect(self.address()).unwrap();
        stream.write_all(head.as_bytes()).unwrap();
        stream
    }

    /// An event stream, read up to its reset.
    fn watch(&self) -> BufReader<std::net::TcpStream> {
        let stream = self.open(&format!(
            "GET /api/watch HTTP/1.1\r\nHost: {}\r\nAuthorization: {}\r\n\r\n",
            self.address(),
            self.bearer()
        ));
        let mut reader = BufReader::new(stream);
        assert_eq!(next_data(&mut reader)["type"], "reset");
        reader
    }

    fn bearer(&self) -> String {
        format!("Bearer {}", self.token)
    }

    /// Sends `request` (a raw HTTP/1.1 head and body) and returns the answer's status line and
    /// the rest.
    fn raw(&self, request: &str) -> String {
        let address = self.url.trim_start_matches("http://");
        let mut stream = std::net::TcpStream::connect(address).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut answer = String::new();
        let _ignored = stream.read_to_string(&mut answer);
        answer
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ignored = self.child.kill();
        let _ignored = self.child.wait();
    }
}

#[test]
fn sessions_timeline_and_input_over_http() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "web"]).ok();
    store.run(&["session", "send", "web", "from the cli", "--key", "c1"]).ok();
    let server = Server::start(&store);

    let (status, body) = server.get("/api/sessions");
    assert_eq!(status, 200);
    assert_eq!(body["sessions"][0]["id"], "web");
    assert_eq!(body["sessions"][0]["state"]["display"], "working");

    // Unkeyed input, then a keyed one twice (the second is a replay), then a conflict.
    let (status, sent) = server.post("/api/sessions/web/input", None, r#"{"text":"hi"}"#);
    assert_eq!((status, sent["replayed"].as_bool()), (200, Some(false)));
    let body = r#"{"text":"ship it","replyVia":"note"}"#;
    let (_, first) = server.post("/api/sessions/web/input", Some("k-1"), body);
    let (status, again) = server.post("/api/sessions/web/input", Some("k-1"), body);
    assert_eq!((status, again["replayed"].as_bool()), (200, Some(true)));
    assert_eq!(first["mid"], again["mid"]);
    let (status, conflict) =
        server.post("/api/sessions/web/input", Some("k-1"), r#"{"text":"other"}"#);
    assert_eq!(status, 409);
    assert!(conflict["error"].as_str().unwrap().contains("key conflict"));

    // The timeline: oldest first, limited, display words, no private metadata.
    let (status, timeline) = server.get("/api/sessions/web/timeline?limit=2");
    assert_eq!(status, 200);
    let events = timeline["events"].as_array().unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["text"], "hi");
    assert_eq!(events[1]["text"], "ship it");
    assert_eq!(events[1]["replyVia"], "note");
    let (_, full) = server.get("/api/sessions/web/timeline");
    let full = full["events"].as_array().unwrap().clone();
    assert_eq!(full.len(), 3);
    assert!(full.iter().all(|event| event.get("dispatchReceipt").is_none()), "{full:?}");
    assert_eq!(full, store.events("web"), "HTTP and the CLI read the same events");
}

#[test]
fn bad_requests_get_precise_statuses_and_write_nothing() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "web"]).ok();
    let server = Server::start(&store);

    assert_eq!(
        server.get("/api/sessions/nosuch/timeline"),
        (404, json!({"error": "no such session"}))
    );
    assert_eq!(server.post("/api/sessions/nosuch/input", None, r#"{"text":"x"}"#).0, 404);
    let (status, error) = server.get("/api/sessions/..%2F..%2Fetc/timeline");
    assert_eq!(status, 400);
    assert!(error["error"].as_str().unwrap().contains("invalid session id"), "{error}");
    for (body, needle) in [
        ("{not json", "malformed JSON body"),
        (r#"{"txt":"x"}"#, "unknown field `txt`"),
        (r#"{"text":""}"#, "the message is empty"),
        (r#"{"text":"x","replyVia":"pigeon"}"#, "replyVia"),
        (r#"{"text":"x","from":"../x"}"#, "invalid session id"),
    ] {
        let (status, error) = server.post("/api/sessions/web/input", None, body);
        assert_eq!(status, 400, "{body}");
        assert!(error["error"].as_str().unwrap().contains(needle), "{body}: {error}");
    }
    // A message over the engine's limit.
    let text = "x".repeat(spex_engine::layout::TEXT_BYTES_MAX + 1);
    let (status, error) =
        server.post("/api/sessions/web/input", None, &json!({ "text": text }).to_string());
    assert_eq!(status, 413);
    assert!(error["error"].as_str().unwrap().contains("the limit is"), "{error}");
    assert_eq!(server.get("/api/sessions/web/timeline?limit=x").0, 400);
    assert_eq!(server.get("/api/sessions/web/timeline?limit=10001").0, 400);
    assert_eq!(server.get("/api/nothing").0, 404);
    assert_eq!(server.post("/api/sessions", None, "{}").0, 405);

    // A body announced as too large is refused before it is read.
    let address = server.url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "POST /api/sessions/web/input HTTP/1.1\r\nHost: {address}\r\nAuthorization: {}\r\n\
         Content-Type: application/json\r\nContent-Length: 999999999\r\n\r\n",
        server.bearer()
    )
    .unwrap();
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 413");

    // Two lengths that disagree (the body's end is ambiguous: request smuggling), a NUL in a
    // search: precise refusals, not a 500. (Equal lengths are one length, RFC 9110 8.6.)
    let answer = server.raw(&format!(
        "POST /api/sessions/web/input HTTP/1.1\r\nHost: {address}\r\nAuthorization: {}\r\n\
         Content-Type: application/json\r\nContent-Length: 13\r\nContent-Length: 12\r\n\
         Connection: close\r\n\r\n{{\"text\":\"ok\"}}",
        server.bearer()
    ));
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert_eq!(server.get("/api/search?q=%00").0, 400);

    assert!(store.events("web").is_empty(), "no bad request wrote anything");
}

#[test]
fn search_and_watch_over_http() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "a"]).ok();
    store.run(&["session", "send", "a", "the deploy of the parser failed"]).ok();
    let server = Server::start(&store);
    let (status, found) = server.get("/api/search?q=parser+deploy&limit=5");
    assert_eq!(status, 200);
    assert_eq!(found["hits"][0]["session"], "a");
    assert!(common::marked(&found["hits"][0]).contains("[parser]"));
    assert_eq!(server.get("/api/search?q=%20").0, 400);
    assert_eq!(server.get("/api/search").0, 400);
    assert_eq!(server.get("/api/search?q=x&bogus=1").0, 400);

    // The event stream: a reset, then an update after a send.
    let response = server
        .agent
        .get(format!("{}/api/watch", server.url))
        .header("Authorization", server.bearer())
        .call()
        .unwrap();
    assert_eq!(response.headers().get("content-type").unwrap(), "text/event-stream");
    let mut reader = BufReader::new(response.into_body().into_reader());
    let reset = next_data(&mut reader);
    assert_eq!(reset["type"], "reset");
    assert_eq!(reset["sessions"][0]["id"], "a");
    store.run(&["session", "send", "a", "another"]).ok();
    let update = next_data(&mut reader);
    assert_eq!(update["type"], "update");
    assert!(update["version"].as_i64().unwrap() > reset["version"].as_i64().unwrap());
}

#[test]
fn one_damaged_session_does_not_hide_the_others_over_http() {
    let store = Store::new();
    for id in ["good", "bad"] {
        store.run(&["session", "new", "--id", id]).ok();
        store.run(&["session", "send", id, &format!("hello {id}")]).ok();
    }
    std::fs::write(store.root().join("sessions/bad/session.json"), b"{ not json").unwrap();
    let server = Server::start(&store);
    let (status, body) = server.get("/api/sessions");
    assert_eq!(status, 200, "{body}");
    let sessions = body["sessions"].as_array().unwrap();
    let bad = sessions.iter().find(|row| row["id"] == "bad").unwrap();
    assert_eq!(bad["state"]["status"], "corrupt");
    assert!(bad["state"]["note"].as_str().unwrap().contains("session.json"), "{bad}");
    assert!(sessions.iter().any(|row| row["id"] == "good"));
    let (status, hits) = server.get("/api/search?q=hello");
    assert_eq!(status, 200, "{hits}");
    assert_eq!(hits["hits"][0]["session"], "good", "{hits}");
}

#[test]
fn nobody_without_the_token_or_from_another_origin_gets_in() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "web"]).ok();
    let server = Server::start(&store);
    let address = server.url.trim_start_matches("http://").to_owned();
    let token = server.token.clone();

    // No token, a wrong one: 401.
    let (status, _) = {
        let mut response = server.agent.get(format!("{}/api/sessions", server.url)).call().unwrap();
        (response.status().as_u16(), response.body_mut().read_to_string().unwrap())
    };
    assert_eq!(status, 401);
    let answer = server.raw(&format!(
        "GET /api/sessions HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
        "0".repeat(64)
    ));
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");

    // A page that rebinds its own name to 127.0.0.1 sends its own Host: 403, even with the token.
    let answer = server.raw(&format!(
        "GET /api/sessions HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    ));
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");

    // A foreign page's form or text/plain POST (it cannot set a JSON type without asking, and
    // its browser sends the cookie and its Origin): refused, nothing recorded.
    // The cookie is the one the printed URL sets: its name is the store's own.
    let answer = server.raw(&format!(
        "GET /api/sessions?token={token} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    ));
    let set = answer
        .lines()
        .find_map(|line| line.strip_prefix("set-cookie: "))
        .unwrap_or_else(|| panic!("a cookie is set: {answer}"));
    let cookie = set.split(';').next().unwrap().to_owned();
    assert!(cookie.starts_with("spex_token_") && cookie.ends_with(&token), "{cookie}");
    let answer = server.raw(&format!(
        "POST /api/sessions/web/input HTTP/1.1\r\nHost: {address}\r\nCookie: {cookie}\r\n\
         Origin: http://evil.example\r\nContent-Type: text/plain\r\nContent-Length: 14\r\n\
         Connection: close\r\n\r\n{{\"text\":\"pwn\"}}"
    ));
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    let answer = server.raw(&format!(
        "POST /api/sessions/web/input HTTP/1.1\r\nHost: {address}\r\nCookie: {cookie}\r\n\
         Content-Type: text/plain\r\nContent-Length: 14\r\nConnection: close\r\n\r\n{{\"text\":\"pwn\"}}"
    ));
    assert!(answer.starts_with("HTTP/1.1 415"), "{answer}");
    assert!(store.events("web").is_empty(), "nothing was recorded");

    // The printed URL: its token opens the door once and leaves an HttpOnly, SameSite=Strict
    // cookie; the cookie alone works after.
    let answer = server.raw(&format!(
        "GET /api/sessions?token={token} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    ));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("HttpOnly") && answer.contains("SameSite=Strict"), "{answer}");
    assert!(!answer.to_ascii_lowercase().contains("access-control-allow"), "no CORS: {answer}");
    let answer = server.raw(&format!(
        "POST /api/sessions/web/input HTTP/1.1\r\nHost: {address}\r\nCookie: {cookie}\r\n\
         Origin: http://{address}\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\
         Connection: close\r\n\r\n{{\"text\":\"ok\"}}"
    ));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(store.events("web").len(), 1);
    // The token file is the owner's alone.
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(store.root().join("serve.token")).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
}

/// The next `data:` of an event stream.
fn next_data(reader: &mut impl std::io::BufRead) -> Value {
    loop {
        let mut line = String::new();
        assert!(reader.read_line(&mut line).unwrap() > 0, "the stream stayed open");
        if let Some(data) = line.strip_prefix("data: ") {
            return serde_json::from_str(data).unwrap();
        }
    }
}

/// Reads what the server says on `stream` until it closes the connection (or `limit` passes).
fn read_until_closed(stream: &mut std::net::TcpStream, limit: std::time::Duration) -> String {
    stream.set_read_timeout(Some(limit)).unwrap();
    let mut answer = Vec::new();
    let _ignored = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

#[test]
fn streams_stalled_clients_and_huge_heads_stall_nobody() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "web"]).ok();
    // Two answering threads: before, each open stream or stalled body held one of them.
    let server = Server::start_with(&store, &["--threads", "2", "--read-timeout", "1s"]);
    let address = server.address();
    let streams: Vec<_> = (0..8).map(|_| server.watch()).collect();
    let mut stalled_bodies: Vec<_> = (0..4)
        .map(|_| {
            server.open(&format!(
                "POST /api/sessions/web/input HTTP/1.1\r\nHost: {address}\r\nAuthorization: {}\r\n\
                 Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"te",
                server.bearer()
            ))
        })
        .collect();
    let mut silent: Vec<_> = (0..4).map(|_| server.open("")).collect();

    // With all of that open, a request is answered, and a send reaches every stream.
    assert_eq!(server.get("/api/sessions").0, 200);
    assert_eq!(server.post("/api/sessions/web/input", None, r#"{"text":"hello"}"#).0, 200);
    for mut stream in streams {
        let update = next_data(&mut stream);
        assert_eq!(update["type"], "update", "{update}");
        assert_eq!(update["session"]["id"], "web", "{update}");
    }

    // A body that stops arriving is answered 408 once the read timeout passes; a connection
    // that never says anything is closed.
    for stream in &mut stalled_bodies {
        let answer = read_until_closed(stream, std::time::Duration::from_secs(10));
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    }
    for stream in &mut silent {
        stream.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).expect("closed by the server, not timed out here");
        assert!(!answer.starts_with(b"HTTP/1.1 2"), "{}", String::from_utf8_lossy(&answer));
    }

    // A head of 1 MiB is refused (431) without being kept.
    let mut huge = std::net::TcpStream::connect(&address).unwrap();
    let head = format!(
        "GET /api/sessions HTTP/1.1\r\nHost: {address}\r\nAuthorization: {}\r\nX-Big: {}\r\n\r\n",
        server.bearer(),
        "a".repeat(1024 * 1024)
    );
    // The server may answer and close before it has read it all.
    let _ignored = huge.write_all(head.as_bytes());
    let answer = read_until_closed(&mut huge, std::time::Duration::from_secs(10));
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");

    assert_eq!(store.events("web").len(), 1, "only the complete send was recorded");
}

#[test]
fn a_key_that_is_not_ascii_gets_an_answer() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "web"]).ok();
    let server = Server::start(&store);
    let address = server.address();
    let mut request = format!(
        "POST /api/sessions/web/input HTTP/1.1\r\nHost: {address}\r\nAuthorization: {}\r\n\
         Content-Type: application/json\r\nContent-Length: 13\r\nConnection: close\r\n\
         Idempotency-Key: ",
        server.bearer()
    )
    .into_bytes();
    request.extend_from_slice("ключ".as_bytes());
    request.extend_from_slice(b"\r\n\r\n{\"text\":\"ok\"}");
    let mut stream = std::net::TcpStream::connect(&address).unwrap();
    stream.write_all(&request).unwrap();
    let answer = read_until_closed(&mut stream, std::time::Duration::from_secs(10));
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("Idempotency-Key must be visible ASCII"), "{answer}");
    assert!(store.events("web").is_empty());
}

#[test]
fn sigterm_lets_a_send_in_flight_finish() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "web"]).ok();
    let mut server = Server::start(&store);
    // This test process holds the session's lock, as another spex would: the send waits.
    let lock = store.root().join(".session-locks").join("web.lock");
    std::fs::create_dir_all(lock.parent().unwrap()).unwrap();
    std::fs::write(&lock, std::process::id().to_string()).unwrap();
    let sending = std::thread::scope(|scope| {
        let sending = scope
            .spawn(|| server.post("/api/sessions/web/input", Some("k1"), r#"{"text":"kept"}"#));
        std::thread::sleep(std::time::Duration::from_millis(500));
        let pid = server.child.id().to_string();
        assert!(
            std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success()
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
        // Stopping: no new connection is accepted, but the send is still waiting.
        assert!(std::net::TcpStream::connect(server.address()).is_err(), "the listener is closed");
        let alive = std::process::Command::new("kill").args(["-0", &pid]).status().unwrap();
        assert!(alive.success(), "the server waits for the send");
        std::fs::remove_file(&lock).unwrap();
        sending.join().unwrap()
    });
    assert_eq!(sending.0, 200, "{}", sending.1);
    let status = server.child.wait().unwrap();
    assert!(status.success(), "the server stopped cleanly: {status}");
    let events = store.events("web");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["text"], "kept", "{events:?}");
}

// Idle event streams sleep: four of them, nothing changing, under 5% of a core.
#[test]
fn idle_event_streams_do_not_spin() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "a"]).ok();
    let server = Server::start(&store);
    let _streams: Vec<_> = (0..4).map(|_| server.watch()).collect();
    let pid = server.child.id();
    let before = common::cpu_ticks(pid);
    let window = std::time::Duration::from_secs(3);
    std::thread::sleep(window);
    let used = common::cpu_ticks(pid) - before;
    assert!(used <= 15, "four idle streams used {used} ticks in {window:?}");
}

/// The history crate's transcript fixtures.
fn history_fixtures() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../history/tests/fixtures")
}

/// Names the transcript roots of `store`'s server in its `history-sources` file.
fn history_sources(store: &Store, roots: &[(&str, &std::path::Path)]) {
    let lines: String =
        roots.iter().map(|(harness, dir)| format!("{harness}={}\n", dir.display())).collect();
    std::fs::write(store.root().join("history-sources"), lines).expect("history-sources");
}

// Harness transcripts over HTTP: the history sessions, one session's events (paged from its
// end), and search over what an agent answered, all redacted. The transcript roots come from the
// store's `history-sources` file.
#[test]
fn history_sessions_are_served_redacted() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "w"]).ok();
    let fixtures = history_fixtures();
    history_sources(
        &store,
        &[("codex", &fixtures.join("codex")), ("claude", &fixtures.join("claude"))],
    );
    let server = Server::start(&store);
    let (status, listed) = server.get("/api/history");
    assert_eq!(status, 200, "{listed}");
    let ids: Vec<&str> =
        listed["history"].as_array().unwrap().iter().filter_map(|h| h["id"].as_str()).collect();
    let codex = "019a2d7a-41c4-78b1-b7cc-a45d62a89cd5";
    assert!(ids.contains(&codex) && ids.contains(&"7c1e0a52-3b7f-4d0e-9a41-5f2d8c6b1e90"));
    assert!(!listed.to_string().contains("sk-ant-api03"), "titles are redacted: {listed}");
    // The last three events: the person's message with a password in a URL, the abort, and an
    // unknown record.
    let (status, page) = server.get(&format!("/api/history/codex/{codex}?limit=3"));
    assert_eq!(status, 200, "{page}");
    let events = page["events"].as_array().unwrap();
    assert_eq!(events.len(), 3);
    assert_eq!(page["more"], true);
    assert!(page.to_string().contains("[redacted:password]"), "{page}");
    assert!(!page.to_string().contains("hunter2"), "{page}");
    // The page before it ends where this one starts.
    let first = events[0]["line"].as_u64().unwrap();
    let (_, older) = server.get(&format!("/api/history/codex/{codex}?limit=2&before={first}"));
    let older = older["events"].as_array().unwrap();
    assert!(older.iter().all(|event| event["line"].as_u64().unwrap() < first));
    assert_eq!(older.len(), 2);
    let (status, hits) = server.get("/api/search?q=connections");
    assert_eq!(status, 200, "{hits}");
    assert_eq!(hits["hits"][0]["source"], "codex", "{hits}");
    assert_eq!(hits["hits"][0]["side"], "agent", "{hits}");
    assert_eq!(server.get("/api/history/codex/nobody").0, 404);
    assert_eq!(server.get(&format!("/api/history/gemini/{codex}")).0, 404);
    assert_eq!(server.get(&format!("/api/history/codex/{codex}?limit=x")).0, 400);
    // What the agents spent: the same report `spex usage` makes.
    let (status, usage) = server.get("/api/usage?by=harness");
    assert_eq!(status, 200, "{usage}");
    assert_eq!(
        (usage["total"]["replies"].as_u64(), usage["total"]["turns"].as_u64()),
        (Some(4), Some(4))
    );
    let (status, daily) = server.get("/api/usage?tz=Asia/Tokyo");
    assert_eq!(status, 200, "{daily}");
    assert_eq!(daily["rows"][0]["key"], "2026-11-30", "18:00 and 19:00 in Tokyo: {daily}");
    assert_eq!(server.get("/api/usage?by=week").0, 400);
    assert_eq!(server.get("/api/usage?tz=Mars/Olympus").0, 400);
}

// An OpenCode session (rows of the database the real CLI wrote) is served as the others are:
// listed, read a page at a time, redacted, searched; its export is refused by name.
#[test]
fn opencode_sessions_are_served_redacted() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "w"]).ok();
    history_sources(&store, &[("opencode", &history_fixtures().join("opencode"))]);
    let server = Server::start(&store);
    let (status, listed) = server.get("/api/history");
    assert_eq!(status, 200, "{listed}");
    let id = "ses_dc13346b4ffeIP3PBkq5I2zlQM";
    let row = listed["history"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["id"] == id)
        .unwrap_or_else(|| panic!("{id} in {listed}"));
    assert_eq!(row["harness"], "opencode", "{row}");
    assert_eq!(row["state"], "waiting for input", "{row}");
    // The last message's three events (an answer, its tokens, the turn's end): a page of two
    // takes the whole message, never a part of one line.
    let (status, page) = server.get(&format!("/api/history/opencode/{id}?limit=2"));
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["events"].as_array().unwrap().len(), 3, "{page}");
    assert_eq!(page["more"], true, "{page}");
    let (status, page) = server.get(&format!("/api/history/opencode/{id}?limit=4"));
    assert_eq!(status, 200, "{page}");
    let text = page.to_string();
    assert!(text.contains("[redacted:github-pat]") && !text.contains("ghp_R7x9"), "{page}");
    let first = page["events"][0]["line"].as_u64().unwrap();
    let (_, older) = server.get(&format!("/api/history/opencode/{id}?before={first}"));
    let older = older["events"].as_array().unwrap();
    assert!(older.iter().any(|event| event["text"] == "Deploy to eu-west-1 first."), "{older:?}");
    assert!(older.iter().all(|event| event["line"].as_u64().unwrap() < first));
    let (status, hits) = server.get("/api/search?q=central&harness=opencode");
    assert_eq!(status, 200, "{hits}");
    assert_eq!(hits["hits"][0]["source"], "opencode", "{hits}");
    let (status, refused) = server.get(&format!("/api/history/opencode/{id}/export"));
    assert!((400..500).contains(&status), "{status}: {refused}");
    assert!(refused.to_string().contains("OpenCode"), "{refused}");
}

// The web page: served at `/` behind the token (the printed URL sets the cookie the page's own
// requests carry), its assets from the binary, under a policy that lets it load and connect to
// this server alone; nothing in it names another origin. `GET /api/sessions/:id` gives what the
// page marks owed.
#[test]
fn the_web_page_is_served_from_the_binary() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "w"]).ok();
    store.run(&["session", "send", "w", "first"]).ok();
    let server = Server::start(&store);
    let mut response =
        server.agent.get(format!("{}/?token={}", server.url, server.token)).call().unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let policy = response.headers().get("content-security-policy").unwrap().to_str().unwrap();
    assert!(policy.starts_with("default-src 'self'"), "{policy}");
    let cookie = response.headers().get("set-cookie").unwrap().to_str().unwrap().to_owned();
    let page = response.body_mut().read_to_string().unwrap();
    assert!(page.contains("<script src=\"/assets/app.js\">"), "{page}");
    // Without the token, nothing (the page too).
    let anonymous = server.agent.get(format!("{}/", server.url)).call().unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    let cookie = cookie.split(';').next().unwrap().to_owned();
    for (path, kind) in [("/assets/app.js", "text/javascript"), ("/assets/app.css", "text/css")] {
        let mut response = server
            .agent
            .get(format!("{}{path}", server.url))
            .header("Cookie", &cookie)
            .call()
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "{path}");
        let content_type = response.headers().get("content-type").unwrap().to_str().unwrap();
        assert!(content_type.starts_with(kind), "{path}: {content_type}");
        let text = response.body_mut().read_to_string().unwrap();
        assert!(!text.contains("http://") && !text.contains("https://"), "{path} names no origin");
        assert!(!text.contains("innerHTML"), "{path} sets no HTML from data");
    }
    let (status, session) = server.get("/api/sessions/w");
    assert_eq!(status, 200, "{session}");
    assert_eq!(session["state"]["display"], "working");
    assert_eq!(session["owed"].as_array().unwrap().len(), 1);
    assert!(session["owed"][0]["mid"].as_str().is_some());
    assert_eq!(server.get("/api/sessions/nobody").0, 404);
}

// A long conversation is read a page at a time from its end (each `older` names the next page,
// never the whole log), and one session's event stream carries what is appended after a page's
// end and every change of its state: a send from the CLI, then its delivery.
#[test]
fn conversations_page_back_and_stream_one_session() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "p", "--adapter", "exec:cat >/dev/null"]).ok();
    for i in 0..25 {
        store.run(&["session", "send", "p", &format!("message {i}")]).ok();
    }
    let server = Server::start(&store);
    let mut texts = Vec::new();
    let mut before: Option<String> = None;
    let mut pages = 0;
    let end = loop {
        let path = match &before {
            Some(older) => format!("/api/sessions/p/timeline?limit=10&before={older}"),
            None => "/api/sessions/p/timeline?limit=10".to_owned(),
        };
        let (status, page) = server.get(&path);
        assert_eq!(status, 200, "{page}");
        pages += 1;
        let mut these: Vec<String> = page["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|event| event["text"].as_str().unwrap().to_owned())
            .collect();
        these.append(&mut texts);
        texts = these;
        match page["older"].as_str() {
            Some(older) => before = Some(older.to_owned()),
            None => break server.get("/api/sessions/p/timeline?limit=0").1["end"].clone(),
        }
    };
    assert_eq!(pages, 3);
    let want: Vec<String> = (0..25).map(|i| format!("message {i}")).collect();
    assert_eq!(texts, want);
    for bad in ["1", "0.x", "1.3", "99.0"] {
        let (status, answer) = server.get(&format!("/api/sessions/p/timeline?before={bad}"));
        assert_eq!(status, 400, "{bad}: {answer}");
    }

    let end = end.as_str().unwrap();
    let response = server
        .agent
        .get(format!("{}/api/sessions/p/events?after={end}", server.url))
        .header("Authorization", server.bearer())
        .call()
        .unwrap();
    assert_eq!(response.headers().get("content-type").unwrap(), "text/event-stream");
    let mut reader = BufReader::new(response.into_body().into_reader());
    let first = next_data(&mut reader);
    assert_eq!(first["type"], "session");
    assert_eq!(first["owed"].as_array().unwrap().len(), 25);
    store.run(&["session", "send", "p", "from the command line"]).ok();
    // The line and the queue are two files: either may be seen first.
    let (mut appended, mut owed) = (None, None);
    while appended.is_none() || owed.is_none() {
        let value = next_data(&mut reader);
        match value["type"].as_str() {
            Some("events") => appended = Some(value),
            Some("session") if value["owed"].as_array().unwrap().len() == 26 => owed = Some(value),
            _ => panic!("neither the send nor its owed entry: {value}"),
        }
    }
    let appended = appended.unwrap();
    assert_eq!(appended["events"].as_array().unwrap().len(), 1, "only what came after the page");
    assert_eq!(appended["events"][0]["text"], "from the command line");
    store.run(&["session", "drain", "p"]).ok();
    let drained = next_data(&mut reader);
    assert_eq!(drained["type"], "session");
    assert_eq!(drained["owed"].as_array().unwrap().len(), 0, "{drained}");
    assert_eq!(server.get("/api/sessions/p/events?after=nope").0, 400);
}

/// Every shape of the secret corpus, planted in both harnesses' transcripts, never appears in an
/// HTTP answer: the history listing, each conversation, search hits for queries that pull a
/// secret into the snippet window, and the event stream's reset.
#[test]
fn planted_secrets_never_appear_in_any_http_answer() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "w"]).ok();
    let homes = tempfile::tempdir().unwrap();
    let planted = common::plant_secrets(homes.path());
    history_sources(
        &store,
        &[("codex", &homes.path().join("codex")), ("claude", &homes.path().join("claude"))],
    );
    let server = Server::start(&store);
    let mut answers = Vec::new();
    let (status, listed) = server.get("/api/history");
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["history"].as_array().unwrap().len(), 2, "{listed}");
    answers.push(listed);
    for path in [
        "/api/history/claude/5ec0e7a1-0000-4000-8000-00000000c1a0?limit=500",
        "/api/history/codex/019b5ec0-0000-7000-8000-00000000c0de?limit=500",
    ] {
        let (status, page) = server.get(path);
        assert_eq!(status, 200, "{page}");
        assert!(page["events"].as_array().unwrap().len() >= 100, "{page}");
        answers.push(page);
    }
    let mut found = 0;
    for query in common::secret_queries(&planted) {
        let encoded: String = form_urlencoded::byte_serialize(query.as_bytes()).collect();
        let (status, mut hits) = server.get(&format!("/api/search?q={encoded}&limit=100"));
        assert_eq!(status, 200, "{query}: {hits}");
        found += hits["hits"].as_array().unwrap().len();
        // The query echoed back is the caller's own text.
        hits.as_object_mut().unwrap().remove("query");
        answers.push(hits);
    }
    assert!(found > 0, "the provider prefixes find the redacted texts");
    let response = server
        .agent
        .get(format!("{}/api/watch", server.url))
        .header("Authorization", server.bearer())
        .call()
        .unwrap();
    let mut reader = BufReader::new(response.into_body().into_reader());
    let reset = next_data(&mut reader);
    assert_eq!(reset["type"], "reset");
    answers.push(reset);
    for answer in &answers {
        let text = answer.to_string();
        for planted in &planted {
            if let Some(window) = common::leak(&text, &planted.secret) {
                panic!("{}: {window:?} is in an answer: {text}", planted.label);
            }
        }
    }
}

/// A name in `sessions/` that is not UTF-8 fails no answer of the server.
#[test]
fn a_name_that_is_not_utf8_fails_no_answer() {
    use std::os::unix::ffi::OsStrExt as _;
    let store = Store::new();
    store.run(&["session", "new", "--id", "good"]).ok();
    store.run(&["session", "send", "good", "hello there"]).ok();
    let odd = std::ffi::OsStr::from_bytes(b"caf\xe9");
    std::fs::create_dir(store.root().join("sessions").join(odd)).unwrap();
    let server = Server::start(&store);
    let (status, listed) = server.get("/api/sessions");
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["sessions"].as_array().unwrap().len(), 1, "{listed}");
    let (status, hits) = server.get("/api/search?q=hello");
    assert_eq!(status, 200, "{hits}");
    assert_eq!(hits["hits"].as_array().unwrap().len(), 1, "{hits}");
}

/// Nobody starves the server: a client that fails the guard is answered and its connection
/// closed (on a kept-alive connection too), event streams may hold at most half the connection
/// slots so an ordinary GET always gets through, two Host headers are malformed, the URL's token
/// wins over a stale cookie, and a cursor inside a line is bad input naming the cursor, never
/// store damage with a path.
#[test]
fn the_server_cannot_be_starved_and_answers_precisely() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "web"]).ok();
    store.run(&["session", "send", "web", "hello there"]).ok();
    let server = Server::start_with(&store, &["--max-connections", "4", "--read-timeout", "30s"]);
    let address = server.address();
    // Kept alive, but failing the guard: answered 401, then closed (well before the read
    // timeout, which would close an idle connection after 30 s).
    let mut stream = server.open(&format!("GET /api/sessions HTTP/1.1\r\nHost: {address}\r\n\r\n"));
    let started = std::time::Instant::now();
    let answer = read_until_closed(&mut stream, std::time::Duration::from_secs(20));
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "closed after the answer");
    // A cursor inside a line: 400 naming it, no path in the answer.
    let (status, body) = server.get("/api/sessions/web/events?after=1.7");
    assert_eq!(status, 400, "{body}");
    let message = body["error"].as_str().unwrap();
    assert!(message.contains("1.7"), "{message}");
    assert!(!message.contains(&store.root().display().to_string()), "{message}");
    // Four slots: two event streams at most; the third stream is refused, a GET still answers.
    let _first = server.watch();
    let _second = server.watch();
    let mut third = server.open(&format!(
        "GET /api/watch HTTP/1.1\r\nHost: {address}\r\nAuthorization: {}\r\nConnection: close\r\n\r\n",
        server.bearer()
    ));
    let answer = read_until_closed(&mut third, std::time::Duration::from_secs(20));
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert_eq!(server.get("/api/sessions").0, 200);
    // Two Host headers, the server's own first: 400.
    let answer = server.raw(&format!(
        "GET /api/sessions HTTP/1.1\r\nHost: {address}\r\nHost: evil.example\r\nAuthorization: {}\r\nConnection: close\r\n\r\n",
        server.bearer()
    ));
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    // A stale cookie (a rotated token) loses to the URL's token.
    let answer = server.raw(&format!(
        "GET /api/sessions?token={} HTTP/1.1\r\nHost: {address}\r\nCookie: spex_token_0000000000000000={}\r\nConnection: close\r\n\r\n",
        server.token,
        "0".repeat(64)
    ));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}
