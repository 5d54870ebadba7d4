//! Mutual exclusion of the delivery lock under load, with real processes: many short-lived
//! drainers (more processes than cores, each exiting right after its drain, so holders exit at
//! every moment) and senders that keep the queue non-empty. Each drainer checks, at every
//! delivery (while it holds the lock), that the lock file names its own pid; a second holder
//! would have replaced it or taken it over. Afterwards: no check failed, and every accepted
//! message was delivered exactly once.

#![expect(clippy::unwrap_used, reason = "test setup: a failed step should panic with its error")]
#![expect(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "the children coordinate through real files"
)]

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use spex_engine::env::{RandomIds, SystemClock};
use spex_engine::faultfs::RealFs;
use spex_engine::{Adapter, Config, Message, SendRequest, SessionId, Status, Store, Triple};

const ROLE_ENV: &str = "SPEX_EXCLUSION_ROLE";
const ROOT_ENV: &str = "SPEX_EXCLUSION_ROOT";
const SENDERS: usize = 3;
const SENDS_PER_SENDER: usize = 40;
const DRAINERS: usize = 6;
const DRAINS_PER_DRAINER: usize = 12;

fn open(root: &Path) -> Store<RealFs> {
    let config = Config { lock_wait_ms: 120_000, drain_retry_delay_ms: 5, ..Config::default() };
    Store::open(RealFs::new(), root, Arc::new(SystemClock), Arc::new(RandomIds), config).unwrap()
}

fn session() -> SessionId {
    SessionId::new("target").unwrap()
}

/// Delivers to a shared file, after checking that the delivery lock names this process.
struct CheckingAdapter {
    lock: PathBuf,
    delivered: std::fs::File,
    violations: std::fs::File,
}

impl Adapter for CheckingAdapter {
    fn deliver(&mut self, message: &Message<'_>) -> Result<(), String> {
        let me = std::process::id().to_string();
        let named = std::fs::read_to_string(&self.lock).unwrap_or_default();
        if named.trim() != me {
            let line = format!("{me} delivered {} while the lock named {named:?}\n", message.mid);
            self.violations.write_all(line.as_bytes()).map_err(|error| error.to_string())?;
        }
        self.delivered.write_all(format!("{}\n", message.mid).as_bytes()).map_err(|e| e.to_string())
    }
}

fn append(path: &Path) -> std::fs::File {
    std::fs::File::options().create(true).append(true).open(path).unwrap()
}

/// The child side: a sender or a drainer. Does nothing unless started by the parent.
#[test]
fn child_role() {
    let (Ok(role), Some(root)) = (std::env::var(ROLE_ENV), std::env::var_os(ROOT_ENV)) else {
        return;
    };
    let root = PathBuf::from(root);
    if let Some(sender) = role.strip_prefix("sender-") {
        let store = open(&root);
        let mut accepted = String::new();
        for i in 0..SENDS_PER_SENDER {
            let request = SendRequest { text: format!("{sender}-{i}"), ..SendRequest::default() };
            accepted.push_str(&format!("{}\n", store.send(&session(), &request).unwrap().mid));
        }
        std::fs::write(root.join(format!("accepted-{sender}")), accepted).unwrap();
    } else if role == "drainer" {
        for _ in 0..DRAINS_PER_DRAINER {
            // A new handle each time, as a new process would have.
            let store = open(&root);
            let mut adapter = CheckingAdapter {
                lock: store.layout().delivery_lock(&session()),
                delivered: append(&root.join("delivered")),
                violations: append(&root.join("violations")),
            };
            let report = store.drain(&session(), &mut adapter).unwrap();
            assert!(report.stopped.is_none(), "{report:?}");
        }
    }
}

#[test]
fn no_two_processes_ever_hold_the_delivery_lock() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    open(&root)
        .create_session(&session(), &Triple::new(Status::Active, None, None), None, None)
        .unwrap();
    let spawn = |role: String| {
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "lock_exclusion::child_role", "--nocapture", "--test-threads=1"])
            .env(ROLE_ENV, role)
            .env(ROOT_ENV, &root)
            .spawn()
            .unwrap()
    };
    let mut children: Vec<_> = (0..SENDERS).map(|s| spawn(format!("sender-{s}"))).collect();
    children.extend((0..DRAINERS).map(|_| spawn("drainer".to_owned())));
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    let violations = std::fs::read_to_string(root.join("violations")).unwrap_or_default();
    assert!(violations.is_empty(), "two holders of one lock:\n{violations}");

    // Whatever the short-lived drainers left owed is drained now.
    let store = open(&root);
    let mut adapter = CheckingAdapter {
        lock: store.layout().delivery_lock(&session()),
        delivered: append(&root.join("delivered")),
        violations: append(&root.join("violations")),
    };
    store.drain(&session(), &mut adapter).unwrap();
    let delivered: Vec<String> = std::fs::read_to_string(root.join("delivered"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let unique: BTreeSet<&String> = delivered.iter().collect();
    assert_eq!(unique.len(), delivered.len(), "no message was delivered twice");
    let mut accepted = BTreeSet::new();
    for s in 0..SENDERS {
        for mid in std::fs::read_to_string(root.join(format!("accepted-{s}"))).unwrap().lines() {
            accepted.insert(mid.to_owned());
        }
    }
    assert_eq!(accepted, unique.into_iter().cloned().collect(), "every accepted message, once");
}
