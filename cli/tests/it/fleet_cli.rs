//! The fleet: two "devices" (two stores, each with its own transcripts, device id and
//! `spex serve`) on one machine. One lists, searches and reads the other's harness sessions
//! through its server; a device that is down or never answers is named unreachable within the
//! bound while the rest still answer.

#![expect(clippy::unwrap_used, reason = "tests fail loudly on unexpected errors")]

use crate::common;

use std::io::BufRead as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::Store;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../history/tests/fixtures")
}

/// A device: a store whose harness homes hold one fixture transcript tree (`claude` or
/// `codex`), with a device id of its own.
struct Device {
    store: Store,
    id: &'static str,
}

impl Device {
    fn new(id: &'static str, harness: &str) -> Device {
        let store = Store::new();
        let homes = store.dir.path().join("homes");
        std::fs::create_dir_all(homes.join("claude")).unwrap();
        std::fs::create_dir_all(homes.join("codex")).unwrap();
        common::corpus::copy_tree(&fixtures().join(harness), &homes.join(harness));
        Device { store, id }
    }

    fn command(&self, args: &[&str]) -> Command {
        let homes = self.store.dir.path().join("homes");
        let mut command = self.store.command(args);
        command
            .env("HOME", self.store.dir.path())
            .env("CLAUDE_CONFIG_DIR", homes.join("claude"))
            .env("CODEX_HOME", homes.join("codex"))
            .env("SPEX_DEVICE_ID", self.id)
            .env("TZ", "UTC");
        command
    }

    fn run(&self, args: &[&str]) -> common::Run {
        common::Run(self.command(args).output().unwrap())
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        serde_json::from_str(&self.run(&full).ok()).unwrap()
    }

    /// Its `spex serve` on a free loopback port: the server and its base URL.
    fn serve(&self) -> (Killed, String) {
        self.run(&["session", "new", "--id", "here"]).ok();
        let mut child = self
            .command(&["serve", "--addr", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let (url, _token) = line.trim().split_once("/?token=").unwrap();
        (Killed(child), url.to_owned())
    }

    fn token_file(&self) -> PathBuf {
        self.store.root().join("serve.token")
    }
}

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _gone = self.0.kill();
        let _reaped = self.0.wait();
    }
}

/// A token file under `dir` holding `token`, readable by its owner only.
fn private_token(dir: &Path, token: &str) -> PathBuf {
    let path = dir.join("silent.token");
    std::fs::write(&path, token).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

#[test]
fn one_device_lists_searches_and_reads_anothers_sessions() {
    let here = Device::new("aaaa000000000001", "claude");
    let there = Device::new("bbbb000000000002", "codex");
    let (_server, url) = there.serve();
    let token = there.token_file();
    here.run(&["fleet", "add", "laptop", &url, "--token-file", token.to_str().unwrap()]).ok();

    // Listed together, each row naming its device; the remote row carries no path.
    let listed = here.json(&["history", "ls", "--fleet"]);
    let sessions = listed["sessions"].as_array().unwrap();
    let devices: Vec<(&str, &str)> = sessions
        .iter()
        .map(|row| {
            (row["device"]["name"].as_str().unwrap_or("here"), row["harness"].as_str().unwrap())
        })
        .collect();
    assert_eq!(devices, [("laptop", "codex"), ("here", "claude")], "{listed}");
    assert_eq!(sessions[1]["device"]["id"], "aaaa000000000001");
    assert!(sessions[0].get("path").is_none(), "a remote file is not shown as a local one");
    assert!(!listed.to_string().contains("sk-ant-api03"), "redacted on each device: {listed}");
    assert_eq!(listed["devices"][0]["reachable"], true);
    // Narrowed as a local listing is.
    let codex_only = here.json(&["history", "ls", "--fleet", "--harness", "codex"]);
    assert_eq!(codex_only["sessions"].as_array().unwrap().len(), 1);
    let table = here.run(&["history", "ls", "--fleet"]).ok();
    assert!(table.lines().nth(1).unwrap().starts_with("laptop"), "{table}");

    // Search: the agent's answer on the other device is found and named by it.
    let found = here.json(&["search", "--fleet", "connections"]);
    let hits = found["hits"].as_array().unwrap();
    assert!(
        hits.iter().any(|hit| hit["device"]["name"] == "laptop" && hit["source"] == "codex"),
        "{found}"
    );
    let text = here.run(&["search", "--fleet", "connections"]).ok();
    assert!(text.contains("laptop:codex:019a2d7a"), "{text}");

    // The conversation, read through the other device's server.
    let shown = here.run(&["history", "show", "laptop:019a"]).ok();
    assert!(shown.contains("Requests time out after 30 s under load"), "{shown}");
    assert!(shown.contains("on laptop"), "{shown}");
    assert!(!shown.contains("hunter2"), "redacted by its device: {shown}");
    let detail = here.json(&["history", "show", "laptop:019a", "--last", "2"]);
    assert_eq!(detail["device"]["name"], "laptop");
    assert_eq!(detail["events"].as_array().unwrap().len(), 2);
    here.run(&["history", "show", "laptop:ffff"]).fails(2, "laptop has no harness session");

    // A device that is down, and one that accepts and never answers: both unreachable within
    // the bound, and the others still answer.
    let down = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let token = private_token(here.store.dir.path(), &"0".repeat(64));
    let token = token.to_str().unwrap();
    let down_url = format!("http://127.0.0.1:{down}");
    here.run(&["fleet", "add", "down", &down_url, "--token-file", token]).ok();
    let silent_url = format!("http://127.0.0.1:{silent_port}");
    here.run(&["fleet", "add", "silent", &silent_url, "--token-file", token]).ok();
    let started = std::time::Instant::now();
    let listed = here.json(&["history", "ls", "--fleet", "--timeout", "2s"]);
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "bounded");
    let reachable: Vec<(&str, bool)> = listed["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|device| (device["name"].as_str().unwrap(), device["reachable"] == true))
        .collect();
    assert_eq!(reachable, [("laptop", true), ("down", false), ("silent", false)], "{listed}");
    assert_eq!(listed["sessions"].as_array().unwrap().len(), 2, "the rest still answer");
    let run = here.run(&["history", "ls", "--fleet", "--timeout", "1s"]);
    run.ok();
    assert!(run.stderr().contains("silent is unreachable: no answer within"), "{}", run.stderr());
    let fleet = here.json(&["fleet", "ls", "--timeout", "1s"]);
    assert_eq!(fleet["devices"].as_array().unwrap().len(), 3);
    drop(silent);

    // The fleet's file: refused inputs, and rm.
    let open = here.store.dir.path().join("open.token");
    std::fs::write(&open, "0".repeat(64)).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    here.run(&["fleet", "add", "x", &url, "--token-file", open.to_str().unwrap()])
        .fails(2, "can be read by others");
    here.run(&["fleet", "add", "laptop", &url, "--token-file", token]).fails(2, "already");
    here.run(&["fleet", "add", "a:b", &url, "--token-file", token]).fails(2, "device name");
    here.run(&["fleet", "add", "y", "https://h:1", "--token-file", token]).fails(2, "http://");
    here.run(&["fleet", "rm", "down"]).ok();
    here.run(&["fleet", "rm", "down"]).fails(2, "not in the fleet");
    assert_eq!(
        here.json(&["fleet", "ls", "--timeout", "1s"])["devices"].as_array().unwrap().len(),
        2
    );
}

/// The devices a fleet listing from `device` names as owners of `id`.
fn owners(device: &Device, id: &str) -> Vec<String> {
    let listed = device.json(&["history", "ls", "--fleet"]);
    let mut owners: Vec<String> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|row| row["id"] == id)
        .map(|row| row["device"]["name"].as_str().unwrap_or("here").to_owned())
        .collect();
    owners.sort();
    owners
}

/// A migration killed after each of its steps leaves one owner or a state the next `migrate`
/// finishes; finished, the conversation is here, byte for byte, and the old device says where
/// it went.
#[test]
fn a_migration_killed_at_each_step_ends_with_one_owner() {
    use std::os::unix::process::ExitStatusExt as _;
    let here = Device::new("aaaa000000000001", "claude");
    let there = Device::new("bbbb000000000002", "codex");
    let (_server, url) = there.serve();
    let token = there.token_file();
    here.run(&["fleet", "add", "laptop", &url, "--token-file", token.to_str().unwrap()]).ok();
    let id = "019a2d7a-41c4-78b1-b7cc-a45d62a89cd5";
    let original = std::fs::read(
        there
            .store
            .dir
            .path()
            .join("homes/codex/sessions/2026/11/30")
            .join(format!("rollout-2026-11-30T10-00-00-{id}.jsonl")),
    )
    .unwrap();
    let placed =
        here.store.dir.path().join(format!(
            "homes/codex/sessions/2026/11/30/rollout-2026-11-30T10-00-00-{id}.jsonl"
        ));
    let killed_after = |step: &str| {
        let output = here
            .command(&["history", "migrate", "laptop:019a"])
            .env("SPEX_MIGRATE_STOP_AFTER", step)
            .output()
            .unwrap();
        assert_eq!(output.status.signal(), Some(9), "killed after {step}: {output:?}");
    };
    assert_eq!(owners(&here, id), ["laptop"]);
    killed_after("fetched");
    assert!(!placed.exists(), "fetched only: nothing placed");
    assert_eq!(owners(&here, id), ["laptop"], "one owner");
    killed_after("imported");
    assert_eq!(std::fs::read(&placed).unwrap(), original, "placed byte for byte (unredacted)");
    assert_eq!(owners(&here, id), ["here", "laptop"], "both hold it; the next migrate finishes");
    killed_after("recorded");
    assert_eq!(owners(&here, id), ["here"], "recorded: one owner");
    let done = here.run(&["history", "migrate", "laptop:019a"]).ok();
    assert!(done.contains("moved from laptop to this device (aaaa000000000001)"), "{done}");
    assert!(!here.store.root().join("migrations").join(format!("codex-{id}.tar.zst")).exists());
    assert_eq!(owners(&here, id), ["here"]);
    // Again: nothing left to do, nothing changes.
    here.run(&["history", "migrate", "laptop:019a"]).ok();
    assert_eq!(std::fs::read(&placed).unwrap(), original);
    // The old device says where it went.
    let old = there.json(&["history", "ls"]);
    let row = old["sessions"].as_array().unwrap().iter().find(|row| row["id"] == id).unwrap();
    assert_eq!(row["movedTo"]["device"], "aaaa000000000001", "{old}");
    let table = there.run(&["history", "ls"]).ok();
    assert!(table.contains("moved to"), "{table}");
    // Where it came from is recorded with the import.
    let provenance: serde_json::Value = serde_json::from_slice(
        &std::fs::read(here.store.root().join("imports").join(format!("codex-{id}.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(provenance["from"]["device"], "bbbb000000000002");
    // A third device cannot take it from the old one any more.
    let third = Device::new("cccc000000000003", "claude");
    third.run(&["fleet", "add", "laptop", &url, "--token-file", token.to_str().unwrap()]).ok();
    third.run(&["history", "migrate", "laptop:019a"]).fails(2, "moved from laptop to device");
}
