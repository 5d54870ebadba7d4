//! The command line as people and scripts meet it, through the real binary: the conversation
//! view, the session table, id prefixes, output discipline (closed pipes, stdout for results,
//! JSON errors, seeds as strings), `--since` as instants, `spex where`, errors that say what to
//! do, the conventions (completions, man pages, examples, hidden internals) and search by
//! substring in any language.

use crate::common;

use std::io::{BufRead as _, BufReader};
use std::process::Stdio;

use common::{Store, exists};

/// `spex --json args` whatever its exit code: the exit code and the one JSON document on stdout.
fn json_run(store: &Store, args: &[&str]) -> (i32, serde_json::Value) {
    let mut full = vec!["--json"];
    full.extend_from_slice(args);
    let run = store.run(&full);
    let document = serde_json::from_str(run.stdout().trim())
        .unwrap_or_else(|error| panic!("stdout {:?} is one JSON document: {error}", run.stdout()));
    (run.code(), document)
}

#[test]
fn the_timeline_reads_as_a_conversation() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "worker"]).ok();
    store.run(&["session", "new", "--id", "lead"]).ok();
    store.run(&["session", "send", "worker", "please fix the test\nand tell me"]).ok();
    let drained = store.run(&["session", "drain", "worker", "--adapter", "exec:cat >/dev/null"]);
    drained.ok();
    store
        .run(&["session", "send", "worker", "--from", "lead", "--reply-via", "note", "status?"])
        .ok();
    store
        .command(&["session", "done", "--propose", "merge", "--note", "fixed\u{1b}[31m it"])
        .env("SPEX_SESSION_ID", "worker")
        .output()
        .unwrap();
    let text = store.run(&["session", "timeline", "worker", "--utc"]).ok();
    let lines: Vec<&str> = text.lines().collect();
    // A day separator, then each event's heading and its text indented under it.
    assert!(lines[0].starts_with("── ") && lines[0].ends_with(" ──"), "{text}");
    assert!(lines[1].ends_with("you → worker  delivered"), "{text}");
    assert!(lines[1].starts_with(|c: char| c.is_ascii_digit()) && lines[1].contains("Z  "));
    assert_eq!(lines[2].trim_start(), "please fix the test");
    assert_eq!(lines[3].trim_start(), "and tell me");
    assert_eq!(lines[2].find('p'), lines[1].find('y'), "the text sits under the heading");
    assert!(lines[4].ends_with("lead → worker · reply via note  owed"), "{text}");
    assert!(lines[6].ends_with("worker · review (proposes merge)"), "{text}");
    // Control characters of stored text are shown, never sent to the terminal.
    assert_eq!(lines[7].trim_start(), "fixed\u{241b}[31m it");
    assert!(!text.contains('\u{1b}'), "no colour on a pipe: {text:?}");
    // Colour when asked, and not under NO_COLOR with auto.
    let coloured = store.run(&["--color", "always", "session", "timeline", "worker"]).ok();
    assert!(coloured.contains("\u{1b}["), "{coloured:?}");
    let run = store.command(&["session", "timeline", "worker"]).env("NO_COLOR", "1").output();
    assert!(!String::from_utf8(run.unwrap().stdout).unwrap().contains('\u{1b}'));
    // Local time by default: another zone, another clock time, the same events.
    let tokyo = store.command(&["session", "timeline", "worker"]).env("TZ", "Asia/Tokyo").output();
    let tokyo = String::from_utf8(tokyo.unwrap().stdout).unwrap();
    assert_eq!(tokyo.lines().count(), text.lines().count());
    assert!(!tokyo.lines().nth(1).unwrap().contains("Z  "), "{tokyo}");
}

#[test]
fn the_session_table_has_a_header_prefixes_owed_counts_and_previews() {
    let store = Store::new();
    for id in ["alpha-one", "alpha-two", "beta"] {
        store.run(&["session", "new", "--id", id]).ok();
    }
    let uuid = store.run(&["session", "new"]).ok().trim().to_owned();
    store.run(&["session", "send", "beta", "first line of it\nsecond"]).ok();
    store.run(&["session", "send", "alpha-two", "デプロイしてください"]).ok();
    let text = store.run(&["session", "ls"]).ok();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["ID", "STATUS", "ACTIVE", "OWED", "TITLE", "LAST"]
    );
    let row = |id: &str| *lines.iter().find(|line| line.starts_with(id)).unwrap();
    // A chosen name is shown whole, a UUID by its shortest unique prefix (at least four
    // characters); the title is the first message, the last column the last one.
    assert!(row("beta ").contains("working"), "{text}");
    assert!(row("alpha-one ").contains("working"), "{text}");
    assert!(row(&format!("{} ", &uuid[..4])).contains("working"), "{text}");
    assert!(
        row("alpha-two ").contains("1     デプロイしてください  デプロイしてください"),
        "{text}"
    );
    assert!(row("beta ").ends_with("1     first line of it …    first line of it …"), "{text}");
    assert!(row("alpha-one ").contains(" 0     -"), "{text}");
    // Columns line up, wide characters counted as two columns.
    let column = |line: &str, word: &str| {
        let at = line.find(word).unwrap();
        unicode_columns(&line[..at])
    };
    assert_eq!(column(lines[0], "OWED"), column(row("alpha-two "), "1 "));
    let last = row("beta ").rfind("first line").unwrap();
    assert_eq!(column(lines[0], "LAST"), unicode_columns(&row("beta ")[..last]));
    // JSON has the whole id, the raw lifecycle, the display word, owed and preview.
    let document = store.json(&["session", "ls"]);
    let beta = document["sessions"].as_array().unwrap().iter().find(|s| s["id"] == "beta").unwrap();
    assert_eq!(beta["state"]["status"], "active");
    assert_eq!(beta["state"]["display"], "working");
    assert_eq!(beta["owed"], 1);
    assert_eq!(beta["preview"], "first line of it …");
    assert_eq!(beta["title"], "first line of it …");
    // An empty listing says so on stderr; stdout stays empty.
    let run = store.run(&["session", "ls", "--status", "review"]);
    assert_eq!(run.ok(), "");
    assert!(run.stderr().contains("no sessions in status review"), "{}", run.stderr());
}

/// Terminal columns of `text` (the test's own count: CJK ideographs and kana are two wide).
fn unicode_columns(text: &str) -> usize {
    text.chars().map(|c| if ('\u{3000}'..='\u{9fff}').contains(&c) { 2 } else { 1 }).sum()
}

#[test]
fn a_unique_prefix_names_a_session_and_an_ambiguous_one_lists_the_candidates() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "alpha-one"]).ok();
    store.run(&["session", "new", "--id", "alpha-two"]).ok();
    let sent = store.run(&["session", "send", "alpha-t", "hi"]).ok();
    assert!(sent.ends_with(" sent\n"));
    assert_eq!(store.json(&["session", "show", "alpha-t"])["session"], "alpha-two");
    let run = store.run(&["session", "send", "alpha", "hi"]);
    run.fails(2, "is the start of 2 session ids: alpha-one, alpha-two");
    assert_eq!(store.json(&["session", "show", "alpha-one"])["owed"], 0, "nothing was sent");
    // A prefix is held to the rules of an id: never a path, never empty.
    store.run(&["session", "send", "", "hi"]).fails(2, "invalid session id");
    store.run(&["session", "timeline", "../alpha-one"]).fails(2, "invalid session id");
    // No match: no such session, with what to do.
    store.run(&["session", "show", "gamma"]).fails(1, "`spex session ls --all` lists the sessions");
}

/// Every id a filtered listing prints names the session of its row when typed back: prefixes are
/// told apart from every session of the store, and an id that starts another is printed whole.
#[test]
fn every_printed_prefix_names_its_own_row_under_every_filter() {
    let store = Store::new();
    for id in ["demo", "demo2", "demo21", "dx", "delta"] {
        store.run(&["session", "new", "--id", id]).ok();
    }
    // demo and demo21 ask (a question each), the others stay as created.
    for id in ["demo", "demo21"] {
        store.run(&["session", "ask", "--note", "which branch?", "--session", id]).ok();
    }
    store.run(&["session", "archive", "dx"]).ok();
    let filters: [&[&str]; 5] = [
        &[],
        &["--all"],
        &["--status", "asking"],
        &["--status", "idle"],
        &["--status", "idle", "--all"],
    ];
    let mut checked = 0;
    for filter in filters {
        let mut args = vec!["session", "ls"];
        args.extend_from_slice(filter);
        let text = store.run(&args).ok();
        let whole: Vec<String> = store.json(&args)["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row["id"].as_str().unwrap().to_owned())
            .collect();
        for (line, id) in text.lines().skip(1).zip(&whole) {
            let printed = line.split_whitespace().next().unwrap();
            assert!(id.starts_with(printed), "{filter:?}: {printed} is not the start of {id}");
            let shown = store.json(&["session", "show", printed]);
            assert_eq!(shown["session"], id.as_str(), "{filter:?}: {printed} names {id}");
            checked += 1;
        }
    }
    assert!(checked >= 10, "rows were listed and checked: {checked}");
    // Sends through the printed ids of the asking rows reach those sessions.
    let text = store.run(&["session", "ls", "--status", "asking"]).ok();
    for line in text.lines().skip(1) {
        let printed = line.split_whitespace().next().unwrap();
        store.run(&["session", "send", printed, "main"]).ok();
    }
    for (id, owed) in [("demo", 1), ("demo21", 1), ("demo2", 0), ("delta", 0)] {
        assert_eq!(store.json(&["session", "show", id])["owed"], owed, "{id}");
    }
}

#[test]
fn a_closed_pipe_ends_quietly_with_success() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "long"]).ok();
    let text = "x".repeat(4000);
    for _ in 0..40 {
        store.run(&["session", "send", "long", &text]).ok();
    }
    // More than a pipe holds, so the writer meets the closed pipe.
    for args in [&["session", "timeline", "long"][..], &["search", "xxx", "--limit", "40"]] {
        let mut child =
            store.command(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(!first.is_empty());
    }
}

#[test]
fn under_json_an_error_is_a_json_document_with_the_same_exit_code() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "s"]).ok();
    let (code, document) = json_run(&store, &["session", "show", "nosuch"]);
    assert_eq!(code, 1);
    assert_eq!(document["schema"], 1);
    assert_eq!(document["error"]["code"], "failed");
    assert_eq!(document["error"]["exit"], 1);
    assert!(document["error"]["message"].as_str().unwrap().contains("no such session nosuch"));
    // A usage error found by the argument parser.
    let (code, document) = json_run(&store, &["session", "ls", "--status", "bogus"]);
    assert_eq!((code, document["error"]["code"].as_str()), (2, Some("usage")));
    // A key conflict names the message the key was first used for.
    let first = store.json(&["session", "send", "s", "one", "--key", "k"]);
    let (code, document) = json_run(&store, &["session", "send", "s", "two", "--key", "k"]);
    assert_eq!(code, 2);
    let message = document["error"]["message"].as_str().unwrap();
    assert!(message.contains(first["mid"].as_str().unwrap()), "{message}");
}

#[test]
fn a_seed_in_json_is_a_string_that_replays_exactly() {
    let seed = "18446744073709551557";
    let run = common::spex(&[
        "--json",
        "verify",
        "sweep",
        "--scenario",
        "send",
        "--depth",
        "1",
        "--mode",
        "kill",
        "--no-faults",
        "--budget",
        "2s",
        "--seed",
        seed,
    ]);
    let document: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(document["seed"], seed, "above 2^53: a number would be rounded by most readers");
    assert!(
        document["plannedPoints"].as_u64().unwrap() >= document["crashPoints"].as_u64().unwrap()
    );
}

#[test]
fn the_sweep_ends_with_a_summary_that_says_when_it_stopped_early() {
    // The rollover scenario, the longest, takes several seconds even where the sweep is fast:
    // a second's budget cuts it short.
    let rollover = |more: &[&str]| {
        let base = ["verify", "sweep", "--scenario", "rollover", "--budget", "1s", "--seed", "4"];
        common::spex(&[&base[..], more].concat())
    };
    let run = rollover(&[]);
    let text = String::from_utf8(run.stdout).unwrap();
    assert!(
        text.starts_with("swept 1 scenario (rollover) under kill and power, depth 2, seed 4\n"),
        "{text}"
    );
    let points = text.lines().find(|line| line.starts_with("crash points: ")).unwrap();
    assert!(points.contains("CUT SHORT: the budget of 1s ran out"), "{text}");
    assert!(text.contains("violations: none"), "{text}");
    // A sweep cut short does not pass, and says what it never reached; --partial accepts it.
    assert_eq!(run.status.code(), Some(1), "{text}");
    let said = String::from_utf8(run.stderr).unwrap();
    assert!(said.contains("the sweep was cut short by its budget"), "{said}");
    let all = common::spex(&["verify", "sweep", "--budget", "1s", "--seed", "4"]);
    let said = String::from_utf8(all.stderr).unwrap();
    // Which scenarios a second of work reaches depends on the machine; what must hold is that
    // each one named as not finished says how far it got, short of its end.
    let unfinished = said
        .split_once("not finished: ")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(first, _)| first)
        .unwrap_or_else(|| panic!("no unfinished scenario named: {said}"));
    let (_, counts) = unfinished.split_once(" (").expect("a scenario and its counts");
    let (judged, planned) =
        counts.trim_end_matches(" points").split_once(" of ").expect("judged of planned");
    let judged: u64 = judged.parse().expect("judged points");
    let planned: u64 = planned.parse().expect("planned points");
    assert!(judged < planned, "{said}");
    let partial = rollover(&["--partial"]);
    assert_eq!(partial.status.code(), Some(0));
    assert!(text.lines().count() < 12, "one screen, no matrix without --matrix: {text}");
    let run = rollover(&["--matrix"]);
    let text = String::from_utf8(run.stdout).unwrap();
    assert!(text.starts_with("scenario   transition"), "{text}");
}

#[test]
fn since_compares_instants_whatever_the_offset() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "s"]).ok();
    store.run(&["session", "send", "s", "needle in the log"]).ok();
    let now = jiff::Timestamp::now();
    let minute = jiff::SignedDuration::from_secs(60);
    let ahead = jiff::tz::offset(5).to_time_zone();
    let behind = jiff::tz::offset(-5).to_time_zone();
    let format = |instant: jiff::Timestamp, zone: &jiff::tz::TimeZone| {
        instant.to_zoned_datetime(zone.clone()).strftime("%Y-%m-%dT%H:%M:%S%:z").to_string()
    };
    // An hour ago in a zone ahead of UTC reads later as text than the event's UTC stamp: a text
    // comparison would miss the event. As instants it is before.
    let before = format(now - 60 * minute, &ahead);
    let hits = store.json(&["search", "needle", "--since", &before]);
    assert_eq!(hits["hits"].as_array().unwrap().len(), 1, "since {before}");
    // A minute from now, written in a zone behind UTC, reads earlier as text: still after.
    let after = format(now + minute, &behind);
    let hits = store.json(&["search", "needle", "--since", &after]);
    assert_eq!(hits["hits"].as_array().unwrap().len(), 0, "since {after}");
    assert_eq!(
        store.json(&["search", "needle", "--since", "1h"])["hits"].as_array().unwrap().len(),
        1
    );
    store.run(&["search", "needle", "--since", "soonish"]).fails(2, "is not a time");
}

#[test]
fn where_names_the_store_and_reads_never_create_one() {
    let store = Store::new();
    let run = store.run(&["where"]);
    assert_eq!(run.ok(), format!("{}\n", store.root().display()));
    assert!(run.stderr().contains("chosen by SPEX_ROOT"), "{}", run.stderr());
    assert!(run.stderr().contains("no store there yet"), "{}", run.stderr());
    let flag = store.dir.path().join("elsewhere");
    let document = store.json(&["where", "--root", flag.to_str().unwrap()]);
    assert_eq!(
        (document["chosenBy"].as_str(), document["exists"].as_bool()),
        (Some("flag"), Some(false))
    );
    // Reads on a root with no store: an empty answer or no such session, and nothing created.
    let listed = store.run(&["session", "ls"]);
    assert_eq!(listed.ok(), "");
    assert!(listed.stderr().contains("there is no store at"), "{}", listed.stderr());
    assert_eq!(store.json(&["search", "anything"])["hits"], serde_json::json!([]));
    store.run(&["session", "timeline", "s"]).fails(1, "no such session s");
    store.run(&["session", "show", "s"]).fails(1, "no such session s");
    store.run(&["doctor"]).ok();
    assert!(!exists(&store.root()), "a read created the store");
    store.run(&["session", "new", "--id", "s"]).ok();
    assert_eq!(store.json(&["where"])["exists"], true);
}

#[test]
fn errors_say_what_to_do() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "s"]).ok();
    store.run(&["session", "ask", "--note", "which branch?"]).fails(2, "set SPEX_SESSION_ID");
    let run = store.run(&["session", "ls", "--status", "bogus"]);
    assert_eq!(run.code(), 2);
    assert!(run.stderr().contains("possible values: active, idle"), "{}", run.stderr());
    assert!(run.stderr().contains("review"), "the display words too: {}", run.stderr());
    store.run(&["session", "send", "nosuch", "hi"]).fails(1, "spex session ls");
}

#[test]
fn drain_keeps_stdout_for_results() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "s"]).ok();
    store.run(&["session", "send", "s", "one"]).ok();
    store.run(&["session", "send", "s", "two"]).ok();
    // The stdout adapter: every stdout line is a message (`| jq` works); the report on stderr.
    let run = store.run(&["--json", "session", "drain", "s", "--adapter", "stdout"]);
    let out = run.ok();
    let texts: Vec<String> = out
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap()["text"].to_string())
        .collect();
    assert_eq!(texts.len(), 2, "{out}");
    let report: serde_json::Value = serde_json::from_str(run.stderr().trim()).unwrap();
    assert_eq!(report["remaining"], 0);
    // The exec adapter: the command's output framed and labelled on stderr; stdout the report.
    store.run(&["session", "send", "s", "three"]).ok();
    let run = store.run(&["session", "drain", "s", "--adapter", "exec:echo got; printf partial"]);
    let out = run.ok();
    assert!(out.starts_with("delivered ") && out.ends_with("0 owed to s\n"), "{out}");
    let stderr = run.stderr();
    assert!(stderr.contains("spex: output of \"echo got; printf partial\" for "), "{stderr}");
    assert!(stderr.contains("\n  | got\n  | partial\n"), "{stderr}");
}

#[test]
fn the_conventions_hold() {
    let help = String::from_utf8(common::spex(&["--help"]).stdout).unwrap();
    assert!(!help.contains("internal"), "internal is hidden: {help}");
    assert!(help.contains("Examples:"), "{help}");
    for command in [
        &["session", "send"][..],
        &["session", "ls"],
        &["session", "timeline"],
        &["search"],
        &["watch"],
        &["verify", "sweep"],
        &["where"],
        &["demo"],
    ] {
        let mut args = command.to_vec();
        args.push("--help");
        let text = String::from_utf8(common::spex(&args).stdout).unwrap();
        assert!(text.contains("Examples:"), "{command:?} has an example: {text}");
    }
    let bash = common::spex(&["completions", "bash"]);
    let bash = String::from_utf8(bash.stdout).unwrap();
    assert!(bash.contains("complete -F") && bash.contains("timeline"), "{bash}");
    let man = String::from_utf8(common::spex(&["man"]).stdout).unwrap();
    assert!(man.starts_with(".ie") || man.contains(".TH spex"), "{man}");
    let dir = tempfile::tempdir().unwrap();
    let run = common::spex(&["man", "--out", dir.path().to_str().unwrap()]);
    assert!(run.status.success());
    for page in ["spex.1", "spex-session.1", "spex-session-send.1", "spex-verify-sweep.1"] {
        assert!(exists(&dir.path().join(page)), "{page}");
    }
    assert!(!exists(&dir.path().join("spex-internal.1")), "internal has no page");
    // Every page ends with the exit codes and the environment.
    let send = std::fs::read_to_string(dir.path().join("spex-session-send.1")).unwrap();
    for page in [&man, &send] {
        let status = page.find(".SH \"EXIT STATUS\"").expect("an EXIT STATUS section");
        let environment = page.find(".SH ENVIRONMENT").expect("an ENVIRONMENT section");
        assert!(status < environment);
        for code in 0..=5 {
            assert!(page[status..].contains(&format!("\\fB{code}\\fR")), "exit {code}: {page}");
        }
        for name in ["SPEX_ROOT", "SPEX_SESSION_ID", "SPEX_LOCK_WAIT_MS", "CODEX_HOME", "NO_COLOR"]
        {
            assert!(page[environment..].contains(&format!("\\fB{name}\\fR")), "{name}: {page}");
        }
    }
    let run = common::spex(&["demo", "--root", dir.path().to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains("takes no --root"));
    // -q drops the reports, -v adds the store chosen.
    let store = Store::new();
    let quiet = store.run(&["-q", "session", "ls"]);
    assert_eq!((quiet.ok(), quiet.stderr()), (String::new(), String::new()));
    store.run(&["session", "new", "--id", "s"]).ok();
    let verbose = store.run(&["-v", "session", "ls"]);
    verbose.ok();
    assert!(verbose.stderr().contains(&store.root().display().to_string()), "{}", verbose.stderr());
    // -vv adds debug detail: the store's settings and how long the index took.
    assert!(!verbose.stderr().contains("DEBUG"), "{}", verbose.stderr());
    let debug = store.run(&["-vv", "search", "anything"]);
    assert!(
        debug.stderr().contains("DEBUG store settings segment_bytes_max="),
        "{}",
        debug.stderr()
    );
    assert!(debug.stderr().contains("session index opened and refreshed"), "{}", debug.stderr());
}

#[test]
fn search_finds_substrings_in_any_language_after_whole_words() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "ja"]).ok();
    store.run(&["session", "send", "ja", "本番環境へのデプロイが失敗しました"]).ok();
    store.run(&["session", "send", "ja", "the redeployment broke"]).ok();
    store.run(&["session", "send", "ja", "we deploy on fridays"]).ok();
    let hits = store.json(&["search", "デプロイ"]);
    let hits = hits["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0]["match"], "substring");
    assert!(common::marked(&hits[0]).contains("[デプロイ]"), "{hits:?}");
    // Latin text: whole words; a part of a word only when no whole word matched.
    let hits = store.json(&["search", "deploy"]);
    let hits = hits["hits"].as_array().unwrap();
    let kinds: Vec<&str> = hits.iter().map(|hit| hit["match"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["word"], "{hits:?}");
    let hits = store.json(&["search", "eployme"]);
    let hits = hits["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0]["match"], "substring");
    assert!(common::marked(&hits[0]).contains("red[eployme]nt"), "{hits:?}");
    // Beyond ASCII, substrings fill the room after the whole words.
    store.run(&["session", "send", "ja", "デプロイ"]).ok();
    let hits = store.json(&["search", "デプロイ"]);
    let kinds: Vec<&str> =
        hits["hits"].as_array().unwrap().iter().map(|hit| hit["match"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["word", "substring"], "{hits}");
    // The substring hits honour the filters.
    let none = store.json(&["search", "デプロイ", "--status", "review"]);
    assert_eq!(none["hits"], serde_json::json!([]));
}

/// Matches are marked as ranges, never as characters in the text: in JSON, `marks`; on a
/// terminal, colour; in plain text, a line of `^` under each match (brackets in the text stay
/// text, and cannot be taken for a match).
#[test]
fn search_marks_matches_apart_from_the_text() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "code"]).ok();
    store.run(&["session", "send", "code", "arr[0] holds the deploy target; deploy it"]).ok();
    store.run(&["session", "send", "code", "本番環境へのデプロイ"]).ok();
    let hits = store.json(&["search", "deploy"]);
    let hit = &hits["hits"][0];
    assert_eq!(hit["snippet"], "arr[0] holds the deploy target; deploy it");
    assert_eq!(hit["marks"], serde_json::json!([[17, 23], [32, 38]]));
    let text = store.run(&["search", "deploy"]).ok();
    let lines: Vec<&str> = text.lines().collect();
    let at = lines[0].find("arr[0]").unwrap();
    assert_eq!(&lines[1][at..], "                 ^^^^^^         ^^^^^^", "{text}");
    assert!(lines[1][..at].trim().is_empty(), "{text}");
    // Wide characters: carets under the columns the match takes.
    let text = store.run(&["search", "デプロイ"]).ok();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[1].ends_with(&format!("{}{}", " ".repeat(12), "^".repeat(8))), "{text}");
    let coloured = store.run(&["--color", "always", "search", "deploy"]).ok();
    assert!(coloured.contains("\u{1b}[33mdeploy\u{1b}[0m"), "{coloured:?}");
    assert!(!coloured.contains('^'), "no caret line with colour: {coloured:?}");
}

/// `session ls` narrowed by activity time and to the first N, in the listing's order.
#[test]
fn session_listings_narrow_by_time_and_count() {
    let store = Store::new();
    for id in ["old", "mid", "new"] {
        store.run(&["session", "new", "--id", id]).ok();
        store.run(&["session", "send", id, "hello"]).ok();
    }
    let ids = |args: &[&str]| -> Vec<String> {
        let mut full = vec!["session", "ls"];
        full.extend_from_slice(args);
        store.json(&full)["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(ids(&[]), ["new", "mid", "old"]);
    assert_eq!(ids(&["--limit", "2"]), ["new", "mid"]);
    assert_eq!(ids(&["--since", "1h"]).len(), 3);
    assert!(ids(&["--since", "2099-01-01"]).is_empty());
    store.run(&["session", "ls", "--since", "soon"]).fails(2, "is not a time");
}

/// What the text view shows is in `--json` too, and nothing happens without a word: timeline
/// events carry `owed`; a send to an archived session says where it went; a damaged queue lists
/// as unknown owed (`?`, `null`), never as 0.
#[test]
fn owed_marks_archived_sends_and_damaged_queues_are_said() {
    let store = Store::new();
    store.run(&["session", "new", "--id", "w"]).ok();
    store.run(&["session", "send", "w", "first"]).ok();
    store.run(&["session", "drain", "w", "--adapter", "exec:cat >/dev/null"]).ok();
    store.run(&["session", "send", "w", "second"]).ok();
    let events = store.json(&["session", "timeline", "w"])["events"].clone();
    let owed: Vec<bool> =
        events.as_array().unwrap().iter().map(|e| e["owed"].as_bool().unwrap()).collect();
    assert_eq!(owed, [false, true], "{events}");
    store.run(&["session", "archive", "w"]).ok();
    let sent = store.run(&["session", "send", "w", "third"]);
    sent.ok();
    assert!(sent.stderr().contains("w is archived"), "{}", sent.stderr());
    std::fs::write(store.root().join("sessions/w/pending.json"), "{bad").unwrap();
    let listed = store.json(&["session", "ls", "--all"]);
    assert_eq!(listed["sessions"][0]["owed"], serde_json::Value::Null, "{listed}");
    let text = store.run(&["session", "ls", "--all"]).ok();
    let row = text.lines().nth(1).unwrap();
    assert!(row.split_whitespace().any(|cell| cell == "?"), "{text}");
}
