//! The web page in a real browser: headless Chromium, driven over WebDriver (Debian's
//! `chromium` and `chromium-driver`; `.ci/run` installs them), against the real `spex serve` on
//! loopback. It opens the tokened URL, reads the board in activity order, opens a session, sends
//! a message and sees it once (and once again after a reload), sees a message sent from the CLI
//! and a delivery arrive live, pages back to older events, reads the agent's answer from its
//! transcript, searches and follows a hit. It saves screenshots of the board and of a
//! conversation (`SPEX_SCREENSHOT_DIR`, default the test's scratch directory; the README's are
//! from `docs/`).

#![expect(clippy::unwrap_used, reason = "test setup: a failed step should panic with its error")]

use crate::common;

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Store;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

/// The harnesses' homes of the history fixtures (one Codex transcript answers a spex session).
fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../history/tests/fixtures")
}

/// `spex args` against `store`, with the fixture transcripts as the harnesses' homes.
fn spex(store: &Store, args: &[&str]) -> common::Run {
    let output = with_homes(store, store.command(args)).output().unwrap();
    let run = common::Run(output);
    run.ok();
    run
}

/// The harnesses' homes: a copy of the fixtures in the test's directory (a transcript there may
/// grow while the page shows it).
fn homes(store: &Store) -> PathBuf {
    let homes = store.path("homes");
    if !homes.exists() {
        common::corpus::copy_tree(&fixtures(), &homes);
    }
    homes
}

fn with_homes(store: &Store, mut command: Command) -> Command {
    let homes = homes(store);
    command
        .env("CLAUDE_CONFIG_DIR", homes.join("claude"))
        .env("CODEX_HOME", homes.join("codex"))
        .env("HOME", store.dir.path());
    command
}

/// A process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _gone = self.0.kill();
        let _reaped = self.0.wait();
    }
}

/// chromedriver on a free loopback port.
fn chromedriver() -> (Killed, u16) {
    let program = std::env::var("SPEX_CHROMEDRIVER").unwrap_or("/usr/bin/chromedriver".to_owned());
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new(&program)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|error| {
            panic!("{program}: {error} (Debian's chromium-driver; .ci/run installs it)")
        });
    let driver = Killed(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "chromedriver did not listen on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
    (driver, port)
}

/// A headless Chromium session through chromedriver at `port`, with a new empty profile.
async fn browser(port: u16, profile: &Path) -> Client {
    let binary = std::env::var("SPEX_CHROMIUM").unwrap_or("/usr/bin/chromium".to_owned());
    let capabilities = json!({
        "goog:chromeOptions": {
            "binary": binary,
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                // This machine's network is closed: nothing may try to reach out.
                "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--lang=en-US",
                "--window-size=1100,780", format!("--user-data-dir={}", profile.display()),
            ],
        },
    });
    let serde_json::Value::Object(capabilities) = capabilities else { unreachable!() };
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .unwrap_or_else(|error| panic!("cannot start Chromium through chromedriver: {error}"))
}

/// Evaluates `script` in the page until it returns what `done` accepts (30 s at most). A script
/// that throws (the element it reads is not there yet, or is being redrawn) is tried again.
async fn until(client: &Client, what: &str, script: &str, done: impl Fn(&Value) -> bool) -> Value {
    // Generous: the suite runs beside the crash sweep on two cores.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let value = match client.execute(script, vec![]).await {
            Ok(value) => value,
            Err(fantoccini::error::CmdError::Standard(error))
                if error.error == fantoccini::error::ErrorStatus::JavascriptError =>
            {
                json!({ "script threw": error.message })
            }
            Err(error) => panic!("{what}: {error}"),
        };
        if done(&value) {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}: the page shows {value}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The texts of the conversation's messages, in order.
const MESSAGES: &str =
    "return [...document.querySelectorAll('#conversation .message')].map(m => m.textContent)";

/// How many messages hold `needle`.
fn count(messages: &Value, needle: &str) -> usize {
    messages.as_array().unwrap().iter().filter(|m| m.as_str().unwrap().contains(needle)).count()
}

async fn screenshot(client: &Client, name: &str) {
    let dir = std::env::var_os("SPEX_SCREENSHOT_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("screenshots"),
        PathBuf::from,
    );
    std::fs::create_dir_all(&dir).unwrap();
    let png = client.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    std::fs::write(dir.join(name), png).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_page_works_in_a_real_browser() {
    let store = Store::new();
    // Three sessions, worked in last to first: gamma, then alpha, then beta.
    spex(&store, &["session", "new", "--id", "delta"]);
    spex(&store, &["session", "send", "delta", "an old thread, archived"]);
    spex(&store, &["session", "archive", "delta"]);
    spex(&store, &["session", "new", "--id", "gamma"]);
    spex(&store, &["session", "new", "--id", "alpha"]);
    spex(&store, &["session", "new", "--id", "beta", "--adapter", "exec:cat >/dev/null"]);
    spex(&store, &["session", "send", "gamma", "look for the flaky needle in the parser"]);
    // Alpha is the Codex session of the fixture transcript: its answer is in the conversation.
    let record = store.root().join("sessions/alpha/session.json");
    let text = std::fs::read_to_string(&record).unwrap();
    let text = text.replace("\"harness\": \"\"", "\"harness\": \"codex\"").replace(
        "\"harness_session_id\": \"\"",
        "\"harness_session_id\": \"019a2d7a-41c4-78b1-b7cc-a45d62a89cd5\"",
    );
    std::fs::write(&record, text).unwrap();
    spex(&store, &["session", "send", "alpha", "check the pool too"]);
    // Beta has a long conversation (older pages) and a declaration.
    for i in 0..130 {
        spex(&store, &["session", "send", "beta", &format!("step {i} of the migration")]);
    }
    spex(&store, &["session", "drain", "beta"]);
    let declared = store
        .command(&["session", "done", "--propose", "merge", "--note", "migration is green"])
        .env("SPEX_SESSION_ID", "beta")
        .output()
        .unwrap();
    assert!(declared.status.success());

    let mut serve = with_homes(&store, store.command(&["serve", "--addr", "127.0.0.1:0"]));
    let mut server = Killed(serve.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap());
    let mut url = String::new();
    std::io::BufReader::new(server.0.stdout.take().unwrap()).read_line(&mut url).unwrap();
    let url = url.trim().to_owned();
    assert!(url.contains("/?token="), "{url}");

    let (_driver, port) = chromedriver();
    let profile = tempfile::tempdir().unwrap();
    let client = browser(port, profile.path()).await;

    // The board, most recently worked in first, with colour-coded states and owed counts.
    client.goto(&url).await.unwrap();
    let ids =
        "return [...document.querySelectorAll('#board li[data-kind=spex]')].map(e => e.dataset.id)";
    until(&client, "the board in activity order", ids, |v| *v == json!(["beta", "alpha", "gamma"]))
        .await;
    let beta = "return document.querySelector('#board li[data-id=beta]').textContent";
    let row =
        until(&client, "beta's row", beta, |v| v.as_str().is_some_and(|t| t.contains("review")))
            .await;
    assert!(row.as_str().unwrap().contains("migration is green"), "{row}");
    let alpha = "return document.querySelector('#board li[data-id=alpha] .owed').textContent";
    until(&client, "alpha's owed count", alpha, |v| *v == json!("1 owed")).await;
    // The Claude Code and Codex sessions found are on the board too, by title (redacted), and
    // the kind filter narrows to one harness.
    let harness_rows = "return [...document.querySelectorAll('#board li:not([data-kind=spex])')].map(e => e.dataset.kind + ' ' + e.textContent)";
    let rows = until(&client, "the harness sessions", harness_rows, |v| {
        v.as_array().is_some_and(|rows| rows.len() == 2)
    })
    .await;
    assert!(rows.to_string().contains("claude The checkout total is off by a cent"), "{rows}");
    assert!(rows.to_string().contains("spex alpha"), "the linked spex session: {rows}");
    assert!(!rows.to_string().contains("sk-ant-api03"), "redacted: {rows}");
    screenshot(&client, "board.png").await;
    // What the agents spent, per day: a bar for the fixtures' day, in the table with its tokens.
    client.execute("location.hash = '#/usage'", vec![]).await.unwrap();
    let bars = "return [...document.querySelectorAll('#usage-chart g.day')].map(g => g.dataset.day + ' ' + g.dataset.tokens + ' ' + g.querySelectorAll('rect').length)";
    until(&client, "the usage chart", bars, |v| *v == json!(["2026-11-30 40580 3"])).await;
    let table = "return document.querySelector('#usage-table tbody').textContent";
    let cells = until(&client, "the usage table", table, |v| {
        v.as_str().is_some_and(|text| text.contains("40,580"))
    })
    .await;
    assert!(cells.to_string().contains("$0.03"), "{cells}");
    screenshot(&client, "usage.png").await;
    client.execute("location.hash = '#/'", vec![]).await.unwrap();
    client
        .find(Locator::Css("#kind-filter option[value=codex]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let every = "return [...document.querySelectorAll('#board li')].map(e => e.dataset.kind)";
    until(&client, "only Codex", every, |v| *v == json!(["codex"])).await;
    client
        .find(Locator::Css("#kind-filter option[value='']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    // Filtered by status, then archived sessions on demand.
    client
        .find(Locator::Css("#status-filter option[value=review]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(&client, "only the review", ids, |v| *v == json!(["beta"])).await;
    client
        .find(Locator::Css("#status-filter option[value='']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    client.find(Locator::Id("archived")).await.unwrap().click().await.unwrap();
    until(&client, "the archived one too", ids, |v| {
        *v == json!(["beta", "alpha", "gamma", "delta"])
    })
    .await;
    client.find(Locator::Id("archived")).await.unwrap().click().await.unwrap();
    until(&client, "archived hidden again", ids, |v| *v == json!(["beta", "alpha", "gamma"])).await;

    // A conversation: the last page first, older pages on demand, the declaration as a reply.
    client.find(Locator::Css("#board li[data-id=beta] a")).await.unwrap().click().await.unwrap();
    let messages =
        until(&client, "beta's last page", MESSAGES, |v| count(v, "step 129 ") == 1).await;
    assert_eq!(count(&messages, "step 0 "), 0, "the first page is the tail, not the whole log");
    assert_eq!(count(&messages, "migration is green"), 1, "{messages}");
    // Scrolled to the top, the reader gets the older page.
    client.execute("window.scrollTo(0, 0)", vec![]).await.unwrap();
    let messages = until(&client, "the older page", MESSAGES, |v| count(v, "step 0 ") == 1).await;
    for i in [0, 64, 129] {
        assert_eq!(count(&messages, &format!("step {i} ")), 1, "step {i} once: {messages}");
    }

    // A message from the page: shown once, owed, and still once after a reload.
    let textarea = client.find(Locator::Id("message")).await.unwrap();
    textarea.send_keys("please rebase onto main").await.unwrap();
    client.find(Locator::Css("#composer button")).await.unwrap().click().await.unwrap();
    let messages =
        until(&client, "the sent message", MESSAGES, |v| count(v, "please rebase onto main") == 1)
            .await;
    let sent = messages.as_array().unwrap().iter().find(|m| m.as_str().unwrap().contains("rebase"));
    assert!(sent.unwrap().as_str().unwrap().contains("owed"), "{messages}");
    let timeline = spex(&store, &["--json", "session", "timeline", "beta"]).stdout();
    assert_eq!(timeline.matches("please rebase onto main").count(), 1, "one message on disk");

    // The network fails after the server took a message (its answer is lost): the page sends it
    // again with the same key, the server answers with the message it kept, and it shows once.
    let lose_one_answer = "const real = window.fetch; let lost = false;
        window.fetch = async (url, options) => {
          const answer = await real(url, options);
          if (!lost && options && options.method === 'POST') { lost = true; throw new TypeError('lost'); }
          return answer;
        };";
    client.execute(lose_one_answer, vec![]).await.unwrap();
    let textarea = client.find(Locator::Id("message")).await.unwrap();
    textarea.send_keys("sent through a flaky network").await.unwrap();
    client.find(Locator::Css("#composer button")).await.unwrap().click().await.unwrap();
    let state = "return document.getElementById('send-state').textContent";
    until(&client, "the resend's answer", state, |v| *v == json!("sent (already there)")).await;
    until(&client, "the flaky message", MESSAGES, |v| count(v, "through a flaky network") == 1)
        .await;
    let timeline = spex(&store, &["--json", "session", "timeline", "beta"]).stdout();
    assert_eq!(timeline.matches("through a flaky network").count(), 1, "one message on disk");
    client.refresh().await.unwrap();
    until(&client, "the message after a reload", MESSAGES, |v| {
        count(v, "please rebase onto main") == 1
    })
    .await;

    // From the CLI: a message appears live, then its delivery turns both marks.
    spex(&store, &["session", "send", "beta", "sent from the command line"]);
    until(&client, "the CLI's message, live", MESSAGES, |v| {
        count(v, "sent from the command line") == 1
    })
    .await;
    // The board (kept live behind the conversation) counts what beta is owed.
    let owed_now = "return board.rows.get('beta').owed";
    until(&client, "the board's count of beta", owed_now, |v| *v == json!(3)).await;
    // Text in any language reaches the page (and the screenshot: .ci/run installs CJK fonts).
    spex(&store, &["session", "send", "beta", "本番へのデプロイは明日の朝にします"]);
    until(&client, "the Japanese message", MESSAGES, |v| count(v, "本番へのデプロイ") == 1).await;
    spex(&store, &["session", "drain", "beta"]);
    let owed = "return document.querySelectorAll('#conversation .mark.owed').length";
    until(&client, "both delivered", owed, |v| *v == json!(0)).await;
    client.execute("window.scrollTo(0, document.body.scrollHeight)", vec![]).await.unwrap();
    screenshot(&client, "conversation.png").await;

    // The agent's own answer, read from its transcript (redacted).
    client.goto(&format!("{}#/s/alpha", url)).await.unwrap();
    let messages =
        until(&client, "alpha's answer", MESSAGES, |v| count(v, "answered (codex)") >= 1).await;
    assert!(count(&messages, "The database pool holds 4") >= 1, "{messages}");
    // Both sides of the linked harness session: what was asked in Codex itself, interleaved.
    assert!(count(&messages, "asked in codex") >= 1, "{messages}");
    assert_eq!(count(&messages, "hunter2"), 0, "redacted: {messages}");
    // By keyboard: Ctrl+Enter in the composer sends.
    let textarea = client.find(Locator::Id("message")).await.unwrap();
    textarea.send_keys("sent by keyboard\u{E009}\u{E007}\u{E000}").await.unwrap();
    until(&client, "the keyboard's message", MESSAGES, |v| count(v, "sent by keyboard") == 1).await;

    // On a phone's width nothing runs off the side, on the conversation and on the board.
    client.set_window_size(390, 844).await.unwrap();
    let fits = "return document.documentElement.scrollWidth <= window.innerWidth";
    until(&client, "the conversation fits a phone", fits, |v| *v == json!(true)).await;

    // The board's owed counts followed the delivery (a drain writes only the queue).
    client.goto(&format!("{}#/", url)).await.unwrap();
    let beta_owed = "return document.querySelector('#board li[data-id=beta] .owed').textContent";
    until(&client, "beta owed nothing", beta_owed, |v| *v == json!("")).await;
    until(&client, "the board fits a phone", fits, |v| *v == json!(true)).await;
    let shown = "return document.querySelector('#board li[data-id=alpha] .owed').offsetWidth > 0";
    until(&client, "the owed count on a phone", shown, |v| *v == json!(true)).await;
    client.set_window_size(1100, 780).await.unwrap();
    until(&client, "alpha owed two", alpha, |v| *v == json!("2 owed")).await;

    // Search, and follow a hit to its conversation.
    let search = client.find(Locator::Id("q")).await.unwrap();
    search.send_keys("needle\n").await.unwrap();
    let hits = "return [...document.querySelectorAll('#hits li a')].map(a => a.textContent)";
    until(&client, "a hit", hits, |v| v.as_array().is_some_and(|a| !a.is_empty())).await;
    let marked = client.find(Locator::Css("#hits li a mark")).await.unwrap();
    assert_eq!(marked.text().await.unwrap(), "needle");
    // The results stay on screen in a panel of their own, labelled by title.
    client.execute("window.scrollTo(0, document.body.scrollHeight)", vec![]).await.unwrap();
    let on_screen = "const r = document.getElementById('results').getBoundingClientRect();
        return getComputedStyle(document.getElementById('results')).position === 'fixed'
          && r.top >= 0 && r.bottom <= window.innerHeight && r.height > 0";
    until(&client, "the results on screen", on_screen, |v| *v == json!(true)).await;
    let label = "return document.querySelector('#hits li .where').textContent";
    until(&client, "the hit's title", label, |v| {
        v.as_str().is_some_and(|t| t.starts_with("spex · look for the flaky needle"))
    })
    .await;
    client.find(Locator::Css("#hits li a")).await.unwrap().click().await.unwrap();
    until(&client, "the hit's conversation", MESSAGES, |v| count(v, "flaky needle") == 1).await;
    let title = client.find(Locator::Id("session-title")).await.unwrap().text().await.unwrap();
    assert_eq!(title, "gamma");

    // A transcript hit opens that harness session's conversation, read-only.
    client.goto(&format!("{}#/", url.split('?').next().unwrap())).await.unwrap();
    let search = client.find(Locator::Id("q")).await.unwrap();
    search.clear().await.unwrap();
    search.send_keys("banker's rounding\n").await.unwrap();
    let first = "return document.querySelector('#hits li a')?.getAttribute('href') ?? ''";
    until(&client, "a transcript hit", first, |v| {
        v.as_str().is_some_and(|h| h.starts_with("#/h/claude/"))
    })
    .await;
    client.find(Locator::Css("#hits li a")).await.unwrap().click().await.unwrap();
    until(&client, "the transcript's conversation", MESSAGES, |v| {
        count(v, "banker's rounding") == 1 && count(v, "asked in claude") >= 1
    })
    .await;
    let composer = "return document.getElementById('composer').offsetParent === null";
    until(&client, "no composer for a harness session", composer, |v| *v == json!(true)).await;
    let planted = client.execute(MESSAGES, vec![]).await.unwrap();
    assert_eq!(count(&planted, "sk-ant-api03"), 0, "redacted: {planted}");
    let where_ = "return [...document.querySelectorAll('#hits li .where')].map(e => e.textContent).join('|')";
    let labels = client.execute(where_, vec![]).await.unwrap();
    assert!(!labels.to_string().contains("7c1e0a52-"), "titles, not UUIDs: {labels}");
    // The tools it ran are folded, and open on demand.
    let tools = "return [...document.querySelectorAll('#conversation details.tool')].map(d => d.open + ' ' + d.textContent)";
    let folded = until(&client, "the folded tool calls", tools, |v| {
        v.as_array().is_some_and(|calls| !calls.is_empty())
    })
    .await;
    assert!(
        folded.to_string().contains("false") && folded.to_string().contains("ran Bash"),
        "{folded}"
    );
    client
        .find(Locator::Css("#conversation details.tool summary"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let opened = "return document.querySelector('#conversation details.tool').open";
    until(&client, "a tool call opened", opened, |v| *v == json!(true)).await;
    // Live while the transcript grows: a person types in Claude Code, the page shows it.
    let transcript = homes(&store)
        .join("claude/projects/-home-dev-shop/7c1e0a52-3b7f-4d0e-9a41-5f2d8c6b1e90.jsonl");
    let line = r#"{"parentUuid":"b1","isSidechain":false,"userType":"external","cwd":"/home/dev/shop","sessionId":"7c1e0a52-3b7f-4d0e-9a41-5f2d8c6b1e90","version":"2.0.14","gitBranch":"main","type":"user","message":{"role":"user","content":"and a changelog entry, please"},"uuid":"b2","timestamp":"2026-11-30T09:40:00.000Z"}"#;
    let mut file = std::fs::OpenOptions::new().append(true).open(&transcript).unwrap();
    std::io::Write::write_all(&mut file, format!("{line}\n").as_bytes()).unwrap();
    until(&client, "the new prompt, live", MESSAGES, |v| {
        count(v, "and a changelog entry, please") == 1
    })
    .await;
    // Drawn again with the new line, the tool call the reader opened is still open.
    until(&client, "the opened tool call, still open", opened, |v| *v == json!(true)).await;
    client.goto(&format!("{}#/s/gamma", url.split('?').next().unwrap())).await.unwrap();
    until(&client, "back to gamma", MESSAGES, |v| count(v, "flaky needle") == 1).await;

    // A session closed while its conversation is open: the page says so once and stops asking.
    spex(&store, &["session", "close", "gamma"]);
    let said = "return document.getElementById('send-state').textContent";
    until(&client, "the closed session's end", said, |v| {
        v.as_str().is_some_and(|text| text.starts_with("no longer live"))
    })
    .await;

    client.close().await.unwrap();
}

/// The page's composer sends to a session with Claude Code behind it (a drain watching it), the
/// agent answers through spex, and its note appears on the open conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_answers_the_pages_composer() {
    let Some(claude) = common::agent_bin("claude") else { return };
    let store = Store::new();
    let model = spex_modelserver::ModelServer::start().unwrap();
    model.script(
        spex_modelserver::Api::Anthropic,
        [
            spex_modelserver::Reply::Shell(
                "spex session ask --note 'Answer from the agent: use the blue button.'".into(),
            ),
            spex_modelserver::Reply::Text("answered".into()),
        ],
    );
    let work = store.path("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(store.path("claude-config")).unwrap();
    let agent_env = |mut command: Command| {
        command
            .current_dir(&work)
            .env("HOME", store.dir.path())
            .env("SPEX_CLAUDE_CMD", &claude)
            .env("ANTHROPIC_BASE_URL", model.url())
            .env("ANTHROPIC_API_KEY", "scripted")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("CLAUDE_CODE_MAX_RETRIES", "0")
            .env("CLAUDE_CONFIG_DIR", store.path("claude-config"));
        command
    };
    let created =
        agent_env(store.command(&["session", "new", "--id", "agent", "--harness", "claude"]))
            .output()
            .unwrap();
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let _drainer = Killed(
        agent_env(store.command(&["session", "drain", "agent", "--watch"]))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut serve = agent_env(store.command(&["serve", "--addr", "127.0.0.1:0"]));
    let mut server = Killed(serve.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap());
    let mut url = String::new();
    std::io::BufReader::new(server.0.stdout.take().unwrap()).read_line(&mut url).unwrap();
    let url = url.trim().to_owned();

    let (_driver, port) = chromedriver();
    let profile = tempfile::tempdir().unwrap();
    let client = browser(port, profile.path()).await;
    client.goto(&url).await.unwrap();
    let ids =
        "return [...document.querySelectorAll('#board li[data-kind=spex]')].map(e => e.dataset.id)";
    until(&client, "the agent's session", ids, |v| *v == json!(["agent"])).await;
    client.find(Locator::Css("#board li[data-id=agent] a")).await.unwrap().click().await.unwrap();
    let textarea = client.find(Locator::Id("message")).await.unwrap();
    textarea.send_keys("Which button deploys?").await.unwrap();
    client.find(Locator::Css("#composer button")).await.unwrap().click().await.unwrap();
    let messages =
        until(&client, "the agent's answer", MESSAGES, |v| count(v, "use the blue button") == 1)
            .await;
    assert_eq!(count(&messages, "Which button deploys?"), 1, "{messages}");
    // The header names the agent's progress once its run ended (it asked: waiting for input).
    let header = "return document.getElementById('session-status').textContent";
    until(&client, "the agent's progress", header, |v| *v == json!("asking · waiting for input"))
        .await;
    let asked = model.main_requests();
    assert!(asked.iter().any(|r| r.texts().iter().any(|t| t.contains("Which button deploys?"))));
    client.close().await.unwrap();
}

/// Another device's sessions on the page: listed on the board with their device, and opened
/// through this server (which reads them through that device's, redacted there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_lists_and_opens_another_devices_sessions() {
    let there = Store::new();
    spex(&there, &["session", "new", "--id", "there"]);
    let mut serve = with_homes(&there, there.command(&["serve", "--addr", "127.0.0.1:0"]));
    let mut other = Killed(serve.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap());
    let mut line = String::new();
    std::io::BufReader::new(other.0.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let (there_url, _) = line.trim().split_once("/?token=").unwrap();
    let token = there.root().join("serve.token");

    // Here: no transcripts of its own, the other device in its fleet.
    let here = Store::new();
    let empty = here.path("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let here_command = |args: &[&str]| {
        let mut command = here.command(args);
        command
            .env("CLAUDE_CONFIG_DIR", &empty)
            .env("CODEX_HOME", &empty)
            .env("HOME", here.dir.path());
        command
    };
    let added = here_command(&["fleet", "add", "laptop", there_url, "--token-file"])
        .arg(&token)
        .output()
        .unwrap();
    common::Run(added).ok();
    let mut serve = here_command(&["serve", "--addr", "127.0.0.1:0"]);
    let mut server = Killed(serve.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap());
    let mut url = String::new();
    std::io::BufReader::new(server.0.stdout.take().unwrap()).read_line(&mut url).unwrap();
    let url = url.trim().to_owned();

    let (_driver, port) = chromedriver();
    let profile = tempfile::tempdir().unwrap();
    let client = browser(port, profile.path()).await;
    client.goto(&url).await.unwrap();
    let remote = "return [...document.querySelectorAll('#board li[data-device]')].map(e => e.dataset.device + ' ' + e.dataset.kind + ' ' + e.textContent)";
    let rows = until(&client, "the other device's sessions", remote, |v| {
        v.as_array().is_some_and(|rows| rows.len() == 2)
    })
    .await;
    assert!(
        rows.to_string().contains("laptop claude claude The checkout total is off by a cent"),
        "{rows}"
    );
    assert!(rows.to_string().contains("on laptop"), "{rows}");
    assert!(!rows.to_string().contains("sk-ant-api03"), "redacted there: {rows}");
    client
        .find(Locator::Css("#board li[data-device=laptop][data-kind=codex] a"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(&client, "the other device's conversation", MESSAGES, |v| {
        count(v, "Requests time out after 30 s under load") == 1
    })
    .await;
    let title = "return document.getElementById('session-title').textContent";
    let shown = client.execute(title, vec![]).await.unwrap();
    assert!(shown.to_string().contains("on laptop"), "{shown}");
    let planted = client.execute(MESSAGES, vec![]).await.unwrap();
    assert_eq!(count(&planted, "hunter2"), 0, "redacted there: {planted}");
    client.close().await.unwrap();
}
