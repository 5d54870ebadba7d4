//! Several OS processes send to one session (keyed and unkeyed, keyed ones retried) while
//! another process drains it. Afterwards: exactly one `sent` line per send, every accepted
//! message handed to the adapter exactly once, nothing left owed. This is the interleaving the
//! existing implementation loses queue entries under (enqueue and removal under different locks).

#![expect(clippy::unwrap_used, reason = "test setup: a failed step should panic with its error")]
#![expect(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "the children coordinate through real files"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use spex_engine::env::{RandomIds, SystemClock};
use spex_engine::faultfs::RealFs;
use spex_engine::{
    Adapter, Config, Event, Key, Message, SendRequest, SessionId, Status, Store, Triple,
};

const ROLE_ENV: &str = "SPEX_MULTIPROCESS_ROLE";
const ROOT_ENV: &str = "SPEX_MULTIPROCESS_ROOT";
const SENDERS: usize = 4;
const SENDS_PER_SENDER: usize = 24;

fn open(root: &Path) -> Store<RealFs> {
    let config = Config { lock_wait_ms: 60_000, drain_retry_delay_ms: 5, ..Config::default() };
    Store::open(RealFs::new(), root, Arc::new(SystemClock), Arc::new(RandomIds), config).unwrap()
}

fn session() -> SessionId {
    SessionId::new("target").unwrap()
}

/// Appends each delivered mid to a file, one write per line.
struct FileAdapter(std::fs::File);

impl Adapter for FileAdapter {
    fn deliver(&mut self, message: &Message<'_>) -> Result<(), String> {
        self.0.write_all(format!("{}\n", message.mid).as_bytes()).map_err(|error| error.to_string())
    }
}

/// The child side: a sender or the drainer. Does nothing unless started by the parent.
#[test]
fn child_role() {
    let (Ok(role), Some(root)) = (std::env::var(ROLE_ENV), std::env::var_os(ROOT_ENV)) else {
        return;
    };
    let root = PathBuf::from(root);
    let store = open(&root);
    if let Some(sender) = role.strip_prefix("sender-") {
        let mut accepted = String::new();
        for i in 0..SENDS_PER_SENDER {
            let text = format!("{sender}-{i}");
            let key = (i % 2 == 0).then(|| Key { operation: "multi".into(), key: text.clone() });
            let request = SendRequest { text: text.clone(), key, ..SendRequest::default() };
            let first = store.send(&session(), &request).unwrap();
            if request.key.is_some() {
                let again = store.send(&session(), &request).unwrap();
                assert_eq!(again.mid, first.mid);
                assert!(again.replayed);
            }
            accepted.push_str(&format!("{} {text}\n", first.mid));
        }
        std::fs::write(root.join(format!("accepted-{sender}")), accepted).unwrap();
    } else if role == "drainer" {
        let delivered = std::fs::File::options()
            .create(true)
            .append(true)
            .open(root.join("delivered"))
            .unwrap();
        let mut adapter = FileAdapter(delivered);
        loop {
            let done = (0..SENDERS).all(|s| root.join(format!("accepted-{s}")).exists());
            let report = store.drain(&session(), &mut adapter).unwrap();
            assert!(report.stopped.is_none(), "{report:?}");
            if done && report.remaining == 0 && store.queue(&session()).unwrap().is_empty() {
                break;
            }
        }
    }
}

#[test]
fn senders_and_a_drainer_in_separate_processes_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    open(&root)
        .create_session(&session(), &Triple::new(Status::Active, None, None), None, None)
        .unwrap();
    let spawn = |role: String| {
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "multiprocess::child_role", "--nocapture", "--test-threads=1"])
            .env(ROLE_ENV, role)
            .env(ROOT_ENV, &root)
            .spawn()
            .unwrap()
    };
    let mut children: Vec<_> = (0..SENDERS).map(|s| spawn(format!("sender-{s}"))).collect();
    children.push(spawn("drainer".to_owned()));
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }

    let store = open(&root);
    let mut accepted: BTreeMap<String, String> = BTreeMap::new();
    for s in 0..SENDERS {
        for line in std::fs::read_to_string(root.join(format!("accepted-{s}"))).unwrap().lines() {
            let (mid, text) = line.split_once(' ').unwrap();
            assert!(accepted.insert(mid.to_owned(), text.to_owned()).is_none(), "mids are unique");
        }
    }
    assert_eq!(accepted.len(), SENDERS * SENDS_PER_SENDER);

    let sent: Vec<(String, String)> = store
        .events(&session())
        .unwrap()
        .into_iter()
        .filter_map(|event| match event {
            Event::Sent(sent) => Some((sent.mid.unwrap_or_default(), sent.text)),
            Event::Status(_) => None,
        })
        .collect();
    assert_eq!(
        sent.len(),
        accepted.len(),
        "exactly one sent line per send, keyed retries included"
    );
    let logged: BTreeMap<String, String> = sent.into_iter().collect();
    assert_eq!(logged, accepted);

    let delivered: Vec<String> = std::fs::read_to_string(root.join("delivered"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let unique: BTreeSet<&String> = delivered.iter().collect();
    assert_eq!(unique.len(), delivered.len(), "nothing delivered twice");
    assert_eq!(
        unique.into_iter().cloned().collect::<BTreeSet<_>>(),
        accepted.keys().cloned().collect()
    );
    assert!(store.queue(&session()).unwrap().is_empty(), "nothing left owed");
}
