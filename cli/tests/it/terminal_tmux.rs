//! What a person at a terminal sees, captured from a real tmux pane: the coloured conversation,
//! and the live session table of `spex watch`, redrawn in place when a session changes.

#![expect(clippy::unwrap_used, reason = "tests fail loudly on unexpected errors")]

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{SPEX, Store};

/// A private tmux server (its socket under the test's directory), killed on drop.
struct Tmux {
    socket_dir: std::path::PathBuf,
}

impl Tmux {
    fn start(store: &Store) -> Tmux {
        let socket_dir = store.path("tmux");
        std::fs::create_dir(&socket_dir).unwrap();
        Tmux { socket_dir }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("tmux");
        command.args(args).env("TMUX_TMPDIR", &self.socket_dir).env_remove("TMUX");
        command
    }

    fn run(&self, args: &[&str]) -> String {
        let output = self.command(args).output().expect("tmux is installed (.ci/run installs it)");
        assert!(
            output.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    /// Runs `spex args` in a new 120x30 pane with colour on (TERM as a terminal has it).
    fn spex_in_pane(&self, store: &Store, name: &str, args: &str) {
        let program = format!(
            "env -u NO_COLOR TERM=xterm-256color TZ=UTC SPEX_ROOT='{}' '{SPEX}' {args}; sleep 600",
            store.root().display()
        );
        self.run(&["new-session", "-d", "-s", name, "-x", "120", "-y", "30", &program]);
    }

    /// The pane's screen, with its colour escapes (`-e`) or as plain text.
    fn capture(&self, name: &str, escapes: bool) -> String {
        let target = format!("{name}:0.0");
        let mut args = vec!["capture-pane", "-p", "-t", &target];
        if escapes {
            args.push("-e");
        }
        self.run(&args)
    }

    /// Waits until the pane's plain screen satisfies `ready`.
    fn wait_for(&self, name: &str, what: &str, ready: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let screen = self.capture(name, false);
            if ready(&screen) {
                return screen;
            }
            assert!(Instant::now() < deadline, "waiting for {what}; the pane shows:\n{screen}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ignored = self.command(&["kill-server"]).output();
    }
}

#[test]
fn the_conversation_is_coloured_on_a_terminal() {
    let store = Store::new();
    let tmux = Tmux::start(&store);
    store.run(&["session", "new", "--id", "worker"]).ok();
    store.run(&["session", "send", "worker", "please rebase"]).ok();
    store
        .command(&["session", "ask", "--note", "onto which branch?"])
        .env("SPEX_SESSION_ID", "worker")
        .output()
        .unwrap();
    tmux.spex_in_pane(&store, "talk", "session timeline worker");
    let screen = tmux.wait_for("talk", "the conversation", |s| s.contains("onto which branch?"));
    let lines: Vec<&str> = screen.lines().filter(|line| !line.trim().is_empty()).collect();
    assert!(lines[0].starts_with("── ") && lines[0].ends_with(" ──"), "{screen}");
    assert!(lines[1].ends_with("you → worker  owed"), "{screen}");
    assert_eq!(lines[2].trim(), "please rebase");
    assert!(lines[3].ends_with("worker · asking"), "{screen}");
    assert_eq!(lines[4].trim(), "onto which branch?");
    // In colour: the asking status in yellow, the owed mark in yellow.
    let coloured = tmux.capture("talk", true);
    assert!(coloured.contains('\u{1b}'), "colour on a terminal: {coloured:?}");
    let yellow_asking =
        ["\u{1b}[1m\u{1b}[33masking", "\u{1b}[33m\u{1b}[1masking", "\u{1b}[1;33masking"];
    assert!(
        yellow_asking.iter().any(|form| coloured.contains(form)) || coloured.contains("33masking"),
        "asking in bold yellow: {coloured:?}"
    );
    println!("the conversation as the pane shows it:\n{screen}");
}

#[test]
fn watch_redraws_the_table_in_place() {
    let store = Store::new();
    let tmux = Tmux::start(&store);
    store.run(&["session", "new", "--id", "first-session"]).ok();
    store.run(&["session", "new", "--id", "second-session"]).ok();
    tmux.spex_in_pane(&store, "board", "watch --interval-ms 200");
    let screen = tmux.wait_for("board", "the table", |s| s.contains("ID") && s.contains("seco"));
    assert!(!screen.contains("reset"), "a terminal gets the table, not the stream: {screen}");
    assert!(screen.contains("2 sessions"), "{screen}");
    // A message and a declaration change the table in place: the session moves to the top, its
    // owed count and preview appear, its status word changes.
    store.run(&["session", "send", "first-session", "ship the fix"]).ok();
    store
        .command(&["session", "done", "--propose", "merge", "--note", "shipped it"])
        .env("SPEX_SESSION_ID", "first-session")
        .output()
        .unwrap();
    // The declaration reaches the timeline before the record, so a poll between the two shows
    // the new preview beside the old status: wait for both.
    let screen = tmux.wait_for("board", "the update", |s| {
        s.contains("shipped it")
            && s.lines().any(|line| line.starts_with("firs") && line.contains("review"))
    });
    let rows: Vec<&str> = screen
        .lines()
        .filter(|line| line.starts_with("firs") || line.starts_with("seco"))
        .collect();
    assert_eq!(rows.len(), 2, "one row per session, redrawn in place:\n{screen}");
    assert!(rows[0].starts_with("firs") && rows[0].contains("review"), "{screen}");
    assert!(rows[0].contains(" 1 "), "one message owed: {screen}");
    assert_eq!(screen.matches("ID ").count(), 1, "one table on the screen:\n{screen}");
    // A closed session leaves the table.
    store.run(&["session", "close", "second-session"]).ok();
    let screen = tmux.wait_for("board", "the removal", |s| s.contains("· 1 session ·"));
    assert!(!screen.lines().any(|line| line.starts_with("seco")), "{screen}");
    println!("the live table as the pane shows it:\n{screen}");
}

/// `session close` on a terminal says what it deletes, points to `archive`, and asks: anything
/// but yes keeps the session; `y` closes it. (Piped, or with `--yes`, it does not ask.)
#[test]
fn close_asks_on_a_terminal() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "fix"]).ok();
    store.run(&["session", "send", "fix", "the first words"]).ok();
    let tmux = Tmux::start(&store);
    let keys = |name: &str, keys: &[&str]| {
        let target = format!("{name}:0.0");
        let mut args = vec!["send-keys", "-t", &target];
        args.extend_from_slice(keys);
        tmux.run(&args);
    };
    tmux.spex_in_pane(&store, "no", "session close fix; echo exit=$?");
    let screen = tmux.wait_for("no", "the question", |screen| screen.contains("[y/N]"));
    assert!(screen.contains("session fix \"the first words\""), "{screen}");
    assert!(screen.contains("(1 events)") && screen.contains("(1 owed)"), "{screen}");
    assert!(screen.contains("spex session archive fix"), "{screen}");
    keys("no", &["n", "Enter"]);
    let screen = tmux.wait_for("no", "the refusal", |screen| screen.contains("exit="));
    assert!(screen.contains("kept fix") && screen.contains("exit=1"), "{screen}");
    assert!(store.root().join("sessions/fix/session.json").exists());

    tmux.spex_in_pane(&store, "yes", "session close fix; echo exit=$?");
    tmux.wait_for("yes", "the question", |screen| screen.contains("[y/N]"));
    keys("yes", &["y", "Enter"]);
    let screen = tmux.wait_for("yes", "the close", |screen| screen.contains("exit="));
    assert!(screen.contains("closed fix") && screen.contains("exit=0"), "{screen}");
    assert!(!store.root().join("sessions/fix").exists());
}

/// Long output on a terminal goes through a pager as git's does: `less -FRX` by default (it
/// waits on a text longer than the screen, quits on `q`), SPEX_PAGER or PAGER when set,
/// none with `--no-pager` or when stdout is not a terminal.
#[test]
fn long_output_goes_through_a_pager_on_a_terminal() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "long"]).ok();
    for n in 1..=40 {
        store.run(&["session", "send", "long", &format!("message number {n}")]).ok();
    }
    let tmux = Tmux::start(&store);
    let pane = |name: &str, env: &str, args: &str| {
        let program = format!(
            "env -u PAGER -u SPEX_PAGER -u LESS TERM=xterm-256color TZ=UTC SPEX_ROOT='{}' {env} '{SPEX}' {args}; echo exit=$?; sleep 600",
            store.root().display()
        );
        tmux.run(&["new-session", "-d", "-s", name, "-x", "100", "-y", "20", &program]);
    };
    // The default: less waits with the first screen shown; `q` ends it and the command.
    pane("less", "", "session timeline long");
    let screen = tmux.wait_for("less", "the pager", |s| s.contains("message number 1\n"));
    assert!(!screen.contains("message number 40") && !screen.contains("exit="), "{screen}");
    let target = "less:0.0";
    tmux.run(&["send-keys", "-t", target, "q"]);
    tmux.wait_for("less", "the exit", |s| s.contains("exit=0"));
    // A pager of one's own.
    let paged = store.path("paged.txt");
    let env = format!("SPEX_PAGER='cat > {}'", paged.display());
    pane("own", &env, "session timeline long");
    tmux.wait_for("own", "the exit", |s| s.contains("exit=0"));
    let text = std::fs::read_to_string(&paged).unwrap();
    assert!(text.contains("message number 1\n") && text.contains("message number 40\n"), "{text}");
    // --no-pager: straight to the terminal, the end on screen.
    pane("none", "", "--no-pager session timeline long");
    let screen = tmux.wait_for("none", "the exit", |s| s.contains("exit=0"));
    assert!(screen.contains("message number 40"), "{screen}");
    // Piped: no pager either.
    let piped = store.command(&["session", "timeline", "long"]).env("SPEX_PAGER", "false").output();
    assert!(String::from_utf8(piped.unwrap().stdout).unwrap().contains("message number 40"));
}

/// `spex pick` in a real pane: every spex, Claude Code and Codex session listed, typing filters,
/// the preview shows the highlighted conversation, Enter opens it, Ctrl-R resumes a harness
/// session with its harness's command, Esc leaves (exit 1), `--print` prints the id; without a
/// terminal it refuses (exit 2).
#[test]
fn pick_filters_previews_opens_and_resumes() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "fix-login"]).ok();
    store.run(&["session", "send", "fix-login", "the login page rejects valid passwords"]).ok();
    let fixtures =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../history/tests/fixtures");
    let tmux = Tmux::start(&store);
    let pane = |name: &str, args: &str| {
        let program = format!(
            "env TERM=xterm-256color TZ=UTC SPEX_PAGER=cat SPEX_ROOT='{}' CLAUDE_CONFIG_DIR='{}' CODEX_HOME='{}' HOME='{}' SPEX_CLAUDE_CMD='echo resumed' SPEX_CODEX_CMD='echo resumed' '{SPEX}' {args}; echo exit=$?; sleep 600",
            store.root().display(),
            fixtures.join("claude").display(),
            fixtures.join("codex").display(),
            store.dir.path().display(),
        );
        tmux.run(&["new-session", "-d", "-s", name, "-x", "120", "-y", "30", &program]);
    };
    let keys = |name: &str, keys: &[&str]| {
        let target = format!("{name}:0.0");
        let mut args = vec!["send-keys", "-t", &target];
        args.extend_from_slice(keys);
        tmux.run(&args);
    };
    // Every session, the newest first, the first highlighted and previewed.
    pane("open", "pick");
    let screen = tmux.wait_for("open", "the list", |s| s.contains("pick>") && s.contains("3/3"));
    assert!(screen.contains("> spex   fix-login"), "{screen}");
    assert!(screen.contains("codex  019a2d7a") && screen.contains("claude 7c1e0a52"), "{screen}");
    assert!(screen.contains("the login page rejects valid passwords"), "{screen}");
    assert!(screen.contains("owed"), "the preview marks what is owed: {screen}");
    assert!(!screen.contains("sk-ant-"), "redacted: {screen}");
    // Typing filters; the preview follows the highlight; Enter opens the conversation.
    keys("open", &["check"]);
    let screen = tmux.wait_for("open", "the filter", |s| s.contains("pick> check  1/3"));
    assert!(screen.contains("> claude 7c1e0a52") && !screen.contains("fix-login"), "{screen}");
    tmux.wait_for("open", "the preview", |s| s.contains("Mail the diff"));
    keys("open", &["Enter"]);
    let screen = tmux.wait_for("open", "the conversation", |s| s.contains("exit="));
    // Its last line is the command Ctrl-R runs (the configured one, `SPEX_CLAUDE_CMD` here).
    assert!(screen.contains("resume: echo resumed --resume 7c1e0a52"), "{screen}");
    assert!(screen.contains("exit=0"), "{screen}");
    // Ctrl-R resumes it with the harness's command.
    pane("resume", "pick 019a");
    tmux.wait_for("resume", "the list", |s| s.contains("1/3"));
    keys("resume", &["C-r"]);
    let screen = tmux.wait_for("resume", "the resume", |s| s.contains("exit="));
    assert!(screen.contains("resumed resume 019a2d7a-41c4-78b1-b7cc-a45d62a89cd5"), "{screen}");
    // A spex session opens its timeline; Ctrl-R on it says what Ctrl-R is for.
    pane("spex", "pick login");
    tmux.wait_for("spex", "the list", |s| s.contains("1/3"));
    keys("spex", &["C-r"]);
    tmux.wait_for("spex", "the hint", |s| s.contains("Ctrl-R resumes a Claude Code or Codex"));
    keys("spex", &["Enter"]);
    let screen = tmux.wait_for("spex", "the timeline", |s| s.contains("exit="));
    assert!(screen.contains("you → fix-login") && screen.contains("exit=0"), "{screen}");
    // Esc leaves with nothing chosen; --print prints the chosen id.
    pane("leave", "pick");
    tmux.wait_for("leave", "the list", |s| s.contains("3/3"));
    keys("leave", &["Escape"]);
    tmux.wait_for("leave", "the exit", |s| s.contains("exit=1"));
    pane("print", "pick --print codex");
    tmux.wait_for("print", "the list", |s| s.contains("1/3"));
    keys("print", &["Enter"]);
    let screen = tmux.wait_for("print", "the id", |s| s.contains("exit="));
    assert!(screen.contains("019a2d7a-41c4-78b1-b7cc-a45d62a89cd5\nexit=0"), "{screen}");
    // No terminal: refused, with where to look instead.
    let piped = store.run(&["pick"]);
    piped.fails(2, "pick needs a terminal");
}
