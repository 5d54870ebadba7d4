//! The entry point of the HTTP fuzz target (feature `fuzzing`; see `fuzz/`): arbitrary bytes as
//! a raw HTTP/1.1 exchange with the whole server (hyper's parser, the guard, every route, the
//! JSON bodies), in-process against a real store. `{TOKEN}` and `{HOST}` in the input are
//! replaced by the server's token and a name it answers for, so the fuzzer reaches past the
//! guard.
//!
//! Properties: the server answers within its timeouts, never with a 500, and never with a 2xx
//! to a connection that did not present the token. The committed corpus (`fuzz/corpus/http/`)
//! is replayed by this module's test on every test run.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use faultfs::RealFs;
use spex_engine::env::{RandomIds, SystemClock};
use spex_engine::{Config, SessionId, Status, Store, Triple};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::commands::guard::Guard;

struct World {
    _dir: tempfile::TempDir,
    runtime: tokio::runtime::Runtime,
    router: axum::Router,
    token: String,
    _stop: tokio::sync::watch::Sender<bool>,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = Config { lock_wait_ms: 1_000, ..Config::default() };
        let store = Store::open(
            RealFs::new(),
            dir.path(),
            Arc::new(SystemClock),
            Arc::new(RandomIds),
            config,
        )
        .expect("a store opens");
        let id = SessionId::new("web").expect("a valid id");
        store
            .create_session(&id, &Triple::new(Status::Active, None, None), None, None)
            .expect("a session is created");
        let addr: SocketAddr = "127.0.0.1:7477".parse().expect("an address");
        let guard = Guard::new(dir.path(), None, addr).expect("a token");
        let token = guard.token().to_owned();
        // Stopped from the start: an event stream sends its reset and ends.
        let (stop, stopped) = tokio::sync::watch::channel(true);
        let router = crate::commands::serve::router(
            Arc::new(store),
            Arc::new(guard),
            Duration::from_secs(1),
            16,
            stopped,
            Vec::new(),
        );
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        World { _dir: dir, runtime, router, token, _stop: stop }
    })
}

fn replace(data: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len());
    let mut rest = data;
    while let Some(at) = rest.windows(from.len()).position(|window| window == from) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(to);
        rest = &rest[at + from.len()..];
    }
    out.extend_from_slice(rest);
    out
}

/// The status codes of every answer in `bytes` (answers start a line with `HTTP/1.1 `; a JSON
/// body escapes its line breaks, so none can fake one).
fn statuses(bytes: &[u8]) -> Vec<u16> {
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(offset) = bytes[at..].windows(9).position(|window| window == b"HTTP/1.1 ") {
        let start = at + offset;
        if (start == 0 || bytes[..start].ends_with(b"\n"))
            && let Some(code) = bytes.get(start + 9..start + 12)
            && let Some(code) = std::str::from_utf8(code).ok().and_then(|code| code.parse().ok())
        {
            found.push(code);
        }
        at = start + 9;
    }
    found
}

/// One exchange (see the module header).
pub fn http(data: &[u8]) {
    let world = world();
    let request = replace(data, b"{TOKEN}", world.token.as_bytes());
    let request = replace(&request, b"{HOST}", b"127.0.0.1:7477");
    let presented =
        request.windows(world.token.len()).any(|window| window == world.token.as_bytes());
    let answer = world.runtime.block_on(async {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let http = crate::commands::serve::connection_builder(Duration::from_secs(1));
        let service = hyper_util::service::TowerToHyperService::new(world.router.clone());
        let connection = http.serve_connection(hyper_util::rt::TokioIo::new(server), service);
        let serving = tokio::spawn(connection);
        let exchange = async {
            // The server may answer and close before it read everything.
            let _ignored = client.write_all(&request).await;
            let _ignored = client.shutdown().await;
            let mut answer = Vec::new();
            let _ignored = client.read_to_end(&mut answer).await;
            answer
        };
        let answer = tokio::time::timeout(Duration::from_secs(20), exchange)
            .await
            .expect("the server answers and closes within its timeouts");
        let _ignored = serving.await;
        answer
    });
    for status in statuses(&answer) {
        assert_ne!(status, 500, "{}", String::from_utf8_lossy(&answer));
        assert!(
            presented || !(200..300).contains(&status),
            "a {status} without the token: {}",
            String::from_utf8_lossy(&answer)
        );
    }
}

#[cfg(test)]
mod tests {
    /// Replays the committed corpus: its seeds and every crash found.
    #[test]
    fn the_committed_corpus_holds() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/http");
        let mut inputs = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("a corpus entry").path();
            let data = std::fs::read(&path).expect("a corpus file reads");
            let outcome = std::panic::catch_unwind(|| super::http(&data));
            assert!(outcome.is_ok(), "http: {} breaks its property", path.display());
            inputs += 1;
        }
        assert!(inputs > 0, "the http target has a seed corpus");
    }
}
