//! The session index through the real binary: listing by real activity, search, the watch
//! stream, and refreshes killed with SIGKILL or racing each other, which must always converge
//! to exactly what a rebuild from the logs gives. It matters because every listing and search is
//! served from this derived data instead of the logs.

#![expect(clippy::unwrap_used, reason = "tests fail loudly on unexpected errors")]

use crate::common;

use std::io::{BufRead as _, BufReader};
use std::sync::mpsc;
use std::time::Duration;

use common::Store;

const STREAM_WAIT: Duration = Duration::from_secs(30);

fn ids(document: &serde_json::Value) -> Vec<String> {
    document["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|session| session["id"].as_str().unwrap().to_owned())
        .collect()
}

// Sessions are listed by what was done in them, not by what touched their files.
#[test]
fn ls_orders_by_activity_not_by_touches() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "older"]).ok();
    store.run(&["session", "new", "--id", "newer"]).ok();
    store.run(&["session", "new", "--id", "bot"]).ok();
    store.run(&["session", "send", "newer", "first work"]).ok();
    store.run(&["session", "send", "older", "later work"]).ok();
    let by_activity = store.json(&["session", "ls"]);
    assert_eq!(ids(&by_activity)[..2], ["older", "newer"]);
    assert!(by_activity["sessions"][0]["lastActivity"].is_string());
    // Touches that are not activity: a message from another session, a torn tail repaired by
    // the next writer, a record-only archive.
    store.run(&["session", "send", "newer", "automated", "--from", "bot"]).ok();
    let newest = std::fs::read_dir(store.root().join("sessions/newer/timeline"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .max()
        .unwrap();
    let mut bytes = std::fs::read(&newest).unwrap();
    bytes.extend_from_slice(b"{\"ts\":\"2099-01-01T00:00:00.000Z\",\"ki");
    std::fs::write(&newest, bytes).unwrap();
    store.run(&["internal", "session-idle", "--session", "bot"]).ok(); // bot: activity
    store.run(&["session", "archive", "newer"]).ok();
    let after = store.json(&["session", "ls", "--all"]);
    assert_eq!(ids(&after), ["bot", "older", "newer"], "newer did not jump up");
    assert_eq!(ids(&store.json(&["session", "ls"])), ["bot", "older"], "archived hidden");
    let created = store.json(&["session", "ls", "--all", "--sort", "created"]);
    assert_eq!(ids(&created), ["bot", "newer", "older"]);
    let idle = store.json(&["session", "ls", "--status", "idle"]);
    assert_eq!(ids(&idle), ["bot"]);
}

#[test]
fn search_from_the_command_line() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "a"]).ok();
    store.run(&["session", "send", "a", "the flaky deploy failed on staging"]).ok();
    store.run(&["session", "ask", "--note", "retry the deploy?", "--session", "a"]).ok();
    let found = store.json(&["search", "deploy"]);
    let hits = found["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[0]["kind"], "said");
    assert!(common::marked(&hits[0]).contains("[deploy]"));
    let text = store.run(&["search", "staging"]).ok();
    assert!(text.contains("failed on staging\n") && text.contains(" ^^^^^^^\n"), "{text}");
    assert_eq!(
        store.json(&["search", "deploy", "--since", "1h"])["hits"].as_array().unwrap().len(),
        2
    );
    assert!(
        store.json(&["search", "deploy", "--since", "2100-01-01"])["hits"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // FTS syntax is data; an operator alone finds nothing rather than failing.
    assert!(store.json(&["search", "NEAR(deploy"])["hits"].as_array().unwrap().is_empty());
    store.run(&["search", " "]).fails(2, "empty");
    store.run(&["search", "x", "--since", "soon"]).fails(2, "--since");
}

fn lines_of(child: &mut std::process::Child) -> mpsc::Receiver<serde_json::Value> {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(serde_json::from_str(&line).unwrap()).is_err() {
                return;
            }
        }
    });
    rx
}

// `spex watch --json`: a reset, then increments with strictly increasing versions.
#[test]
fn watch_streams_a_reset_then_increments() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "a"]).ok();
    let mut child = store.spawn(&["--json", "watch", "--interval-ms", "100"]);
    let lines = lines_of(&mut child);
    let reset = lines.recv_timeout(STREAM_WAIT).unwrap();
    assert_eq!(reset["type"], "reset");
    assert_eq!(ids(&reset), ["a"]);
    let mut version = reset["version"].as_i64().unwrap();
    store.run(&["session", "send", "a", "hello"]).ok();
    let update = lines.recv_timeout(STREAM_WAIT).unwrap();
    assert_eq!(
        (update["type"].as_str(), update["session"]["id"].as_str()),
        (Some("update"), Some("a"))
    );
    assert!(update["version"].as_i64().unwrap() > version);
    version = update["version"].as_i64().unwrap();
    store.run(&["session", "new", "--id", "b"]).ok();
    store.run(&["session", "close", "a"]).ok();
    let mut seen = Vec::new();
    while !seen.iter().any(|change: &serde_json::Value| change["type"] == "remove") {
        let change = lines.recv_timeout(STREAM_WAIT).unwrap();
        assert!(change["version"].as_i64().unwrap() > version, "strictly increasing");
        version = change["version"].as_i64().unwrap();
        seen.push(change);
    }
    assert!(seen.iter().any(|change| change["session"]["id"] == "b"));
    assert!(seen.iter().any(|change| change["type"] == "remove" && change["id"] == "a"));
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A store with `sessions` sessions of `events` events each, written through the engine.
fn populate(store: &Store, sessions: usize, events: usize, round: usize) {
    let engine = spex_engine::Store::open(
        spex_engine::faultfs::RealFs::new(),
        store.root(),
        std::sync::Arc::new(spex_engine::env::SystemClock),
        std::sync::Arc::new(spex_engine::env::RandomIds),
        spex_engine::Config::default(),
    )
    .unwrap();
    for s in 0..sessions {
        let id = spex_engine::SessionId::new(&format!("s{s:03}")).unwrap();
        if round == 0 {
            let active = spex_engine::Triple::new(spex_engine::Status::Active, None, None);
            engine.create_session(&id, &active, None, None).unwrap();
        }
        for e in 0..events {
            let text =
                format!("round {round} event {e} of session {s}: storage engines and crashes");
            let request = spex_engine::SendRequest { text, ..Default::default() };
            engine.send(&id, &request).unwrap();
        }
    }
}

/// The run's seed (`SPEX_SEED`, else the clock), printed with the command that replays it, and a
/// generator of numbers from it.
fn seeded(test: &str) -> (u64, impl FnMut() -> u64) {
    let seed: u64 =
        std::env::var("SPEX_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
                as u64
        });
    eprintln!("{test}: seed {seed} (replay with SPEX_SEED={seed})");
    let mut state = seed | 1;
    let next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (seed, next)
}

fn dump(store: &Store) -> String {
    store.run(&["index", "dump"]).ok()
}

// Refreshes killed with SIGKILL at seeded moments, then one that completes: the index equals a
// rebuild. The seed is printed; SPEX_SEED replays it.
#[test]
fn killed_refreshes_converge_to_a_rebuild() {
    let (seed, mut next) = seeded("killed_refreshes_converge_to_a_rebuild");
    let store = Store::new();
    for round in 0..6 {
        populate(&store, 30, 8, round);
        for _ in 0..3 {
            let mut child = store.spawn(&["index", "refresh"]);
            std::thread::sleep(Duration::from_micros(next() % 60_000));
            let _ = child.kill();
            child.wait().unwrap();
        }
    }
    let recovered = dump(&store);
    store.run(&["index", "rebuild"]).ok();
    assert_eq!(recovered, dump(&store), "seed {seed}");
    let entries = recovered.lines().filter(|line| line.starts_with('('));
    assert_eq!(entries.filter(|line| line.contains("round 5 event 7")).count(), 30);
}

/// One Codex transcript line: a person's prompt (even `n`) or the agent's answer (odd), naming
/// `tag` and `n`.
fn codex_line(tag: &str, n: usize) -> String {
    let (role, kind) =
        if n.is_multiple_of(2) { ("user", "input_text") } else { ("assistant", "output_text") };
    format!(
        r#"{{"timestamp":"2026-11-30T10:{:02}:{:02}.000Z","type":"response_item","payload":{{"type":"message","role":"{role}","content":[{{"type":"{kind}","text":"{tag} line {n} about crash recovery in storage engines, padded so the transcripts grow {}"}}]}}}}"#,
        (n / 60) % 60,
        n % 60,
        "x".repeat(200)
    )
}

/// Appends `count` lines to the Codex transcript `path` (numbered from `from`).
fn grow(path: &std::path::Path, tag: &str, from: usize, count: usize) {
    use std::io::Write as _;
    let mut file = std::io::BufWriter::new(
        std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap(),
    );
    for n in from..from + count {
        writeln!(file, "{}", codex_line(tag, n)).unwrap();
    }
    file.flush().unwrap();
}

// Transcript scans killed with SIGKILL at seeded moments while transcripts grow (one of them
// forty chunks long, so a scan stops part way through it), then one that completes:
// the index equals a rebuild. The seed is printed; SPEX_SEED replays it.
#[test]
fn killed_transcript_scans_converge_to_a_rebuild() {
    let (seed, mut next) = seeded("killed_transcript_scans_converge_to_a_rebuild");
    let store = Store::new();
    let codex = store.dir.path().join("codex");
    let day = codex.join("sessions/2026/11/30");
    std::fs::create_dir_all(&day).unwrap();
    let path = |t: usize| {
        day.join(format!("rollout-2026-11-30T10-00-00-019a2d7a-41c4-78b1-b7cc-{t:012x}.jsonl"))
    };
    let scan = |store: &Store, args: &[&str]| {
        let mut command = store.command(args);
        command
            .env("CODEX_HOME", &codex)
            .env("CLAUDE_CONFIG_DIR", store.dir.path().join("no-claude"))
            .env("HOME", store.dir.path())
            .env("SPEX_HISTORY_CHUNK_BYTES", "16384")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        command
    };
    let mut lines = [0usize; 8];
    for round in 0..5 {
        for (t, count) in lines.iter_mut().enumerate().skip(1) {
            let more = 50 + (next() % 200) as usize;
            grow(&path(t), &format!("t{t}"), *count, more);
            *count += more;
        }
        // The long one (about 2.5 MiB: 160 chunks of 16 KiB, `SPEX_HISTORY_CHUNK_BYTES`, forty
        // transactions) appears in the fourth round and never changes after: a scan killed
        // between two of its transactions leaves a row part way through it, which the next
        // scan must continue although the file did not change.
        if round == 3 {
            grow(&path(0), "long", 0, 6_000);
            lines[0] = 6_000;
        }
        for _ in 0..if round >= 3 { 6 } else { 3 } {
            let mut child = scan(&store, &["index", "refresh"]).spawn().unwrap();
            // A whole scan takes about 0.2 s here, 0.4 s with the long transcript new: kills
            // land before, inside and after it.
            let window = if round >= 3 { 300_000 } else { 400_000 };
            std::thread::sleep(Duration::from_micros(next() % window));
            let _ = child.kill();
            child.wait().unwrap();
        }
    }
    assert!(scan(&store, &["index", "refresh"]).status().unwrap().success());
    let dump = |store: &Store| {
        let output = scan(store, &["index", "dump"]).stdout(std::process::Stdio::piped()).output();
        String::from_utf8(output.unwrap().stdout).unwrap()
    };
    let recovered = dump(&store);
    assert!(scan(&store, &["index", "rebuild"]).status().unwrap().success());
    assert_eq!(recovered, dump(&store), "seed {seed}");
    let entries = recovered.lines().filter(|line| line.starts_with('('));
    let last = format!("t7 line {} ", lines[7] - 1);
    assert_eq!(entries.filter(|line| line.contains(&last)).count(), 1, "seed {seed}");
}

// Several processes refreshing at once while sends land: no update lost, nothing doubled.
#[test]
fn concurrent_refreshers_lose_nothing() {
    let store = Store::new();
    populate(&store, 20, 5, 0);
    let refreshers: Vec<_> = (0..4).map(|_| store.spawn(&["index", "refresh"])).collect();
    populate(&store, 20, 5, 1);
    let finished = |child: std::process::Child| {
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    };
    refreshers.into_iter().for_each(finished);
    let racing: Vec<_> = (0..3).map(|_| store.spawn(&["index", "refresh"])).collect();
    let converged = dump(&store);
    racing.into_iter().for_each(finished);
    // Content entries are the dump's tuple lines (rows also carry the text as their preview).
    let entries = converged.lines().filter(|line| line.starts_with('('));
    assert_eq!(entries.filter(|line| line.contains("round 1 event 4")).count(), 20);
    store.run(&["index", "rebuild"]).ok();
    assert_eq!(converged, dump(&store));
}

/// CPU time (user + system, in clock ticks) a process has used, from `/proc/<pid>/stat`.
// An idle `spex watch` (notifications on, nothing changing) sleeps: under 5% of a core.
#[test]
fn an_idle_watch_does_not_spin() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "a"]).ok();
    store.run(&["session", "send", "a", "hello"]).ok();
    let mut child = store.spawn(&["--json", "watch"]);
    let lines = lines_of(&mut child);
    lines.recv_timeout(STREAM_WAIT).unwrap();
    let pid = child.id();
    let before = common::cpu_ticks(pid);
    let window = std::time::Duration::from_secs(3);
    std::thread::sleep(window);
    let used = common::cpu_ticks(pid) - before;
    child.kill().unwrap();
    child.wait().unwrap();
    // 100 ticks a second on Linux: 5% of a core over 3 s is 15 ticks.
    assert!(used <= 15, "an idle watch used {used} ticks in {window:?}");
}

/// A damaged index heals itself on the next command that reads it: garbage, a truncated file, a
/// zero-length one, a directory or a FIFO in its place. `doctor` reports it first (a warning:
/// nothing is lost), `ls` and `search` answer with a warning naming where the damaged file went,
/// and `index rebuild` always works.
#[test]
fn a_damaged_index_heals_itself_on_the_next_command() {
    let store = Store::new();
    for id in ["alpha", "beta"] {
        store.run(&["session", "new", "--id", id]).ok();
        store.run(&["session", "send", id, &format!("deploy the {id} branch")]).ok();
    }
    store.run(&["session", "ls"]).ok();
    let index = store.root().join("index.sqlite");
    let sound = std::fs::read(&index).unwrap();
    assert!(sound.len() > 4096, "a real index to damage");
    let clear = || {
        for suffix in ["", "-wal", "-shm"] {
            let path = store.root().join(format!("index.sqlite{suffix}"));
            let _ = std::fs::remove_file(&path);
            let _ = std::fs::remove_dir_all(&path);
        }
        for entry in std::fs::read_dir(store.root()).unwrap() {
            let path = entry.unwrap().path();
            if path.to_string_lossy().contains(".damaged-") {
                let _ = std::fs::remove_file(&path);
                let _ = std::fs::remove_dir_all(&path);
            }
        }
    };
    type Damage<'a> = (&'a str, Box<dyn Fn(&std::path::Path)>, bool);
    let half = sound[..sound.len() / 2].to_vec();
    let cases: Vec<Damage<'_>> = vec![
        (
            "garbage",
            Box::new(|path| {
                std::fs::write(
                    path,
                    b"this is not a database at all, not one page of it".repeat(200),
                )
                .unwrap()
            }),
            true,
        ),
        ("truncated", Box::new(move |path| std::fs::write(path, &half).unwrap()), true),
        ("zero-length", Box::new(|path| std::fs::write(path, b"").unwrap()), false),
        ("directory", Box::new(|path| std::fs::create_dir(path).unwrap()), true),
        (
            "fifo",
            Box::new(|path| {
                assert!(std::process::Command::new("mkfifo").arg(path).status().unwrap().success())
            }),
            true,
        ),
    ];
    for (name, damage, reported) in &cases {
        for command in [&["--json", "session", "ls"][..], &["--json", "search", "deploy"][..]] {
            clear();
            damage(&index);
            if *reported {
                let doctor = store.run(&["doctor"]);
                assert_eq!(doctor.code(), 0, "{name}: index damage is a warning");
                assert!(
                    doctor.stdout().contains("the session index is damaged"),
                    "{name}: {}",
                    doctor.stdout()
                );
            }
            let run = store.run(command);
            let document: serde_json::Value = serde_json::from_str(&run.ok()).unwrap();
            if command[1] == "session" {
                assert_eq!(ids(&document).len(), 2, "{name}: {document}");
            } else {
                assert_eq!(document["hits"].as_array().unwrap().len(), 2, "{name}: {document}");
            }
            if *reported {
                assert!(run.stderr().contains("moved aside to"), "{name}: {}", run.stderr());
            }
            // Healed: the next command is quiet, and the index is a sound file again.
            let again = store.run(command);
            assert_eq!(again.stderr(), "", "{name}");
            assert!(std::fs::symlink_metadata(&index).unwrap().is_file(), "{name}");
            assert!(store.run(&["doctor"]).stdout().contains("no damage found"), "{name}");
        }
        clear();
        damage(&index);
        let rebuilt = store.run(&["index", "rebuild"]);
        rebuilt.ok();
        assert_eq!(ids(&store.json(&["session", "ls"])).len(), 2, "{name}: rebuilt");
    }
}

/// With no space left, or a store mounted read-only, reads still answer: from the logs, through
/// an index in memory, saying so. Run in a private mount namespace (a small tmpfs).
#[test]
fn reads_answer_from_the_logs_when_the_index_cannot_be_written() {
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path().join("mnt");
    std::fs::create_dir(&mount).unwrap();
    let script = format!(
        r#"set -e
mount -t tmpfs -o size=2m tmpfs "{m}"
export SPEX_ROOT="{m}/store"
"{spex}" session new --id alpha >/dev/null
"{spex}" session send alpha "deploy the alpha branch" >/dev/null
# The disk fills up before the index is ever written.
dd if=/dev/zero of="{m}/fill" bs=64k 2>/dev/null || true
echo "== full"
"{spex}" --json session ls 2>"{m}/../full.err"
"{spex}" --json search deploy 2>>"{m}/../full.err"
rm "{m}/fill"
"{spex}" session ls >/dev/null
mount -o remount,ro "{m}"
echo "== ro"
rm -f "{m}/store/index.sqlite" 2>/dev/null || true
"{spex}" --json session ls 2>"{m}/../ro.err"
"{spex}" --json search deploy 2>>"{m}/../ro.err"
"#,
        m = mount.display(),
        spex = common::SPEX
    );
    let output = std::process::Command::new("unshare")
        .args(["--map-root-user", "--mount", "sh", "-c", &script])
        .env_remove("SPEX_SEED")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    let (full, ro) = stdout.split_once("== ro").unwrap();
    for (name, part, err) in [("full", full, "full.err"), ("read-only", ro, "ro.err")] {
        let documents: Vec<serde_json::Value> = part
            .lines()
            .filter(|line| line.starts_with('{'))
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(documents.len(), 2, "{name}: {part}");
        assert_eq!(ids(&documents[0]), ["alpha"], "{name}");
        assert_eq!(documents[1]["hits"].as_array().unwrap().len(), 1, "{name}: {}", documents[1]);
        let warned = std::fs::read_to_string(dir.path().join(err)).unwrap();
        assert!(warned.contains("answering from the logs"), "{name}: {warned}");
    }
}
