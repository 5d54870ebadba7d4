//! The tmux adapter end to end: a real tmux server, a real pane, `spex session drain` typing
//! into it. It matters because pane-backed agents read their messages from exactly this path.

#![expect(clippy::unwrap_used, reason = "tests fail loudly on unexpected errors")]

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::Store;

/// A private tmux server (its socket under the test's directory), killed on drop.
struct Tmux {
    socket_dir: std::path::PathBuf,
}

impl Tmux {
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("tmux");
        command.args(args).env("TMUX_TMPDIR", &self.socket_dir).env_remove("TMUX");
        command
    }

    fn run(&self, args: &[&str]) {
        let output = self.command(args).output().expect("tmux is installed (.ci/run installs it)");
        assert!(
            output.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ignored = self.command(&["kill-server"]).output();
    }
}

#[test]
fn drain_types_each_message_into_the_pane() {
    let store = Store::new();
    let socket_dir = store.path("tmux");
    std::fs::create_dir(&socket_dir).unwrap();
    let tmux = Tmux { socket_dir: socket_dir.clone() };
    let received = store.path("pane.txt");
    // The pane's program is a plain line reader: every line typed into the pane lands in a file.
    let program = format!("cat > {}", received.display());
    tmux.run(&["new-session", "-d", "-s", "agent", "-x", "200", "-y", "50", &program]);

    // The default server, found through the environment as tmux finds it.
    let new = store
        .command(&["session", "new", "--id", "pane", "--adapter", "tmux:agent:0.0"])
        .env("TMUX_TMPDIR", &socket_dir)
        .env_remove("TMUX")
        .output()
        .unwrap();
    common::Run(new).ok();
    let mid = store.run(&["session", "send", "pane", "first line\nsecond line"]).ok();
    let mid = mid.split(' ').next().unwrap().to_owned();
    store.run(&["session", "send", "pane", "another message"]).ok();
    let drain = store
        .command(&["--json", "session", "drain", "pane"])
        .env("TMUX_TMPDIR", &socket_dir)
        .env_remove("TMUX")
        .output()
        .unwrap();
    let drain = common::Run(drain);
    let report: serde_json::Value = serde_json::from_str(drain.ok().trim()).unwrap();
    assert_eq!(report["delivered"][0], mid.as_str());
    assert_eq!(report["remaining"], 0);

    // The pane's program writes what it was typed; wait (bounded) for the terminal to pass it on.
    let expected = "first line\nsecond line\nanother message\n";
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = String::new();
    while Instant::now() < deadline {
        seen = std::fs::read_to_string(&received).unwrap_or_default();
        if seen == expected {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // A pane-backed session keeps the terminal reply channel: no note hint is typed.
    assert_eq!(seen, expected);

    // A pane that does not exist: the drain stops, the message stays owed.
    store.run(&["session", "send", "pane", "lost?"]).ok();
    let missing = store
        .command(&["session", "drain", "pane", "--adapter", "tmux:nosuch"])
        .env("TMUX_TMPDIR", &socket_dir)
        .env_remove("TMUX")
        .output()
        .unwrap();
    let missing = common::Run(missing);
    assert_eq!(missing.code(), 1);
    assert!(missing.stderr().contains("left owed"), "{}", missing.stderr());
    assert_eq!(store.json(&["session", "show", "pane"])["owed"], 1);
}

#[test]
fn a_message_cannot_end_the_paste_or_press_keys() {
    let store = Store::new();
    let socket_dir = store.path("tmux");
    std::fs::create_dir(&socket_dir).unwrap();
    let tmux = Tmux { socket_dir: socket_dir.clone() };
    let received = store.path("raw.bin");
    let socket = tmux_socket(&socket_dir);
    // The pane's program asks for bracketed paste (as agent TUIs do) and records every byte the
    // terminal sends it, raw.
    let program = format!(
        "sh -c 'printf \"\\033[?2004h\"; stty raw -echo; exec cat > {}'",
        received.display()
    );
    tmux.run(&["new-session", "-d", "-s", "agent", "-x", "200", "-y", "50", &program]);
    std::thread::sleep(Duration::from_millis(300));

    // The server named by its socket: no environment needed, here or in the drain.
    let spec = format!("tmux:agent:0.0@{}", socket.display());
    store.run(&["session", "new", "--id", "pane", "--adapter", &spec]).ok();
    // An attacker's message: end the paste, then type a command and press Enter and Ctrl-C.
    let attack = "hello\u{1b}[201~touch pwned\r\u{3}";
    store.run(&["session", "send", "pane", attack]).ok();
    store.run(&["session", "drain", "pane"]).ok();

    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        seen = std::fs::read(&received).unwrap_or_default();
        if seen.ends_with(b"\r") {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let text = String::from_utf8_lossy(&seen).into_owned();
    // One paste, opened and closed by tmux alone, holding the message's characters as literal
    // text, then the one Enter the adapter presses.
    assert!(text.starts_with("\u{1b}[200~hello"), "{text:?}");
    assert_eq!(text.matches("\u{1b}[201~").count(), 1, "{text:?}");
    assert_eq!(text.matches('\u{1b}').count(), 2, "only tmux's own brackets: {text:?}");
    assert!(!text.contains('\u{3}'), "no key is pressed: {text:?}");
    assert!(text.ends_with("\u{1b}[201~\r"), "{text:?}");
}

/// The socket of the private server started with `TMUX_TMPDIR=socket_dir`.
fn tmux_socket(socket_dir: &std::path::Path) -> std::path::PathBuf {
    let uid = Command::new("id").arg("-u").output().unwrap();
    let uid = String::from_utf8(uid.stdout).unwrap();
    socket_dir.join(format!("tmux-{}", uid.trim())).join("default")
}

/// A session whose pane tmux cannot find is refused at `session new` (exit 2, nothing created),
/// on the default server and on a named socket alike.
#[test]
fn a_pane_that_is_not_there_is_refused() {
    let store = Store::new();
    let socket_dir = store.path("tmux");
    std::fs::create_dir(&socket_dir).unwrap();
    let tmux = Tmux { socket_dir: socket_dir.clone() };
    tmux.run(&["new-session", "-d", "-s", "agent", "-x", "80", "-y", "20", "sleep 600"]);
    let socket = tmux_socket(&socket_dir);
    for spec in [
        "tmux:nope.0".to_owned(),
        format!("tmux:nope.0@{}", socket.display()),
        format!("tmux:agent:0.0@{}", store.path("no-server").display()),
    ] {
        let run = store
            .command(&["session", "new", "--id", "pane", "--adapter", &spec])
            .env("TMUX_TMPDIR", &socket_dir)
            .env_remove("TMUX")
            .output()
            .unwrap();
        common::Run(run).fails(2, "tmux cannot find pane");
        assert!(!store.root().join("sessions/pane").exists(), "{spec}");
    }
    let spec = format!("tmux:agent:0.0@{}", socket.display());
    store.run(&["session", "new", "--id", "pane", "--adapter", &spec]).ok();
}
