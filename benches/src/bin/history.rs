//! The history benchmark: transcripts in the session index at the size the history issue names.
//!
//! Builds N synthetic Codex and Claude Code transcripts of about S MiB each (realistic records:
//! prompts, answers, tool calls and results, usage; the words vary so search has work), then
//! measures a cold scan into a fresh index, an unchanged rescan, a rescan after appending one
//! line to one transcript, and search p50 / p95 over a fixed set of queries.
//!
//!     cargo run --release -p spex-benches --bin history                      # 1,000 x 1 MiB
//!     cargo run --release -p spex-benches --bin history -- --transcripts 100 --mib 1

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use spex_benches::stats::{Samples, show};
use spex_history::{Harness, Root, discover};
use spex_index::{Index, SearchFilter};

#[derive(Debug, Parser)]
struct Args {
    /// How many transcripts (half Codex, half Claude Code).
    #[arg(long, default_value_t = 1000)]
    transcripts: usize,
    /// About how many MiB each.
    #[arg(long, default_value_t = 1)]
    mib: usize,
    /// Where to build them (default: a temporary directory, removed afterwards).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Search samples.
    #[arg(long, default_value_t = 200)]
    searches: usize,
}

/// The vocabulary: pseudo-words drawn with a Zipf-like law (rank r about as often as 1/r), as
/// words of real text are, so common words are in every transcript and rare ones in few.
const VOCABULARY: u64 = 50_000;

/// The word of rank `rank`: a pronounceable pseudo-word, distinct per rank.
fn word(rank: u64) -> String {
    const SYLLABLES: [&str; 16] = [
        "ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "de", "gu", "fa", "zo", "vi", "be", "cha",
        "ny",
    ];
    let mut out = String::new();
    let mut n = rank + 16;
    while n > 0 {
        out.push_str(SYLLABLES[(n % 16) as usize]);
        n /= 16;
    }
    out
}

fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

fn words(seed: &mut u64, count: usize) -> String {
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        // Rank = VOCABULARY^u for uniform u: a 1/r law.
        let u = (next(seed) >> 11) as f64 / (1u64 << 53) as f64;
        let rank = (VOCABULARY as f64).powf(u) as u64;
        out.push(word(rank));
    }
    out.join(" ")
}

fn codex_line(seed: &mut u64, n: usize) -> String {
    let ts = format!("2026-11-30T10:{:02}:{:02}.000Z", (n / 60) % 60, n % 60);
    match n % 4 {
        0 => serde_json::json!({"timestamp": ts, "type": "response_item", "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": words(seed, 30)}]}}),
        1 => serde_json::json!({"timestamp": ts, "type": "response_item", "payload": {"type": "function_call", "name": "shell", "arguments": format!("{{\"command\":[\"rg\",\"{}\"]}}", words(seed, 2)), "call_id": format!("call_{n}")}}),
        2 => serde_json::json!({"timestamp": ts, "type": "response_item", "payload": {"type": "function_call_output", "call_id": format!("call_{n}"), "output": words(seed, 120)}}),
        _ => serde_json::json!({"timestamp": ts, "type": "response_item", "payload": {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": words(seed, 80)}]}}),
    }
    .to_string()
}

fn claude_line(seed: &mut u64, n: usize, id: &str) -> String {
    let ts = format!("2026-11-30T09:{:02}:{:02}.000Z", (n / 60) % 60, n % 60);
    let common = |kind: &str, message: serde_json::Value| serde_json::json!({"type": kind, "sessionId": id, "cwd": "/home/dev/project", "version": "2.0.14", "uuid": format!("u{n}"), "timestamp": ts, "message": message});
    match n % 4 {
        0 => common("user", serde_json::json!({"role": "user", "content": words(seed, 30)})),
        1 => common("assistant", serde_json::json!({"id": format!("msg_{n}"), "role": "assistant", "model": "claude-sonnet-4-5", "content": [{"type": "tool_use", "id": format!("t{n}"), "name": "Bash", "input": {"command": words(seed, 3)}}], "usage": {"input_tokens": 100, "output_tokens": 20}})),
        2 => common("user", serde_json::json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("t{}", n - 1), "content": words(seed, 120)}]})),
        _ => common("assistant", serde_json::json!({"id": format!("msg_{n}"), "role": "assistant", "model": "claude-sonnet-4-5", "content": [{"type": "text", "text": words(seed, 80)}], "stop_reason": "end_turn", "usage": {"input_tokens": 100, "output_tokens": 80}})),
    }
    .to_string()
}

/// Writes the transcripts; returns the roots and one Codex transcript's path.
fn build(dir: &Path, count: usize, bytes: usize) -> (Vec<Root>, PathBuf) {
    let mut appendable = PathBuf::new();
    for index in 0..count {
        let mut seed = 0x9E37_79B9_7F4A_7C15 ^ index as u64;
        let uuid = format!("019a2d7a-41c4-78b1-b7cc-{index:012x}");
        let (path, codex) = if index % 2 == 0 {
            let day = dir.join(format!("codex/sessions/2026/11/{:02}", 1 + index % 28));
            std::fs::create_dir_all(&day).expect("a day directory");
            (day.join(format!("rollout-2026-11-30T10-00-00-{uuid}.jsonl")), true)
        } else {
            let project = dir.join(format!("claude/projects/-home-dev-p{}", index % 50));
            std::fs::create_dir_all(&project).expect("a project directory");
            (project.join(format!("{uuid}.jsonl")), false)
        };
        let mut file = std::io::BufWriter::new(std::fs::File::create(&path).expect("a transcript"));
        let mut written = 0;
        let mut n = 0;
        if codex {
            let meta = serde_json::json!({"timestamp": "2026-11-30T10:00:00.000Z", "type": "session_meta", "payload": {"id": uuid, "cwd": "/home/dev/api", "cli_version": "0.58.0"}});
            written += writeln!(file, "{meta}").map(|()| meta.to_string().len() + 1).unwrap_or(0);
            appendable.clone_from(&path);
        }
        while written < bytes {
            let line =
                if codex { codex_line(&mut seed, n) } else { claude_line(&mut seed, n, &uuid) };
            writeln!(file, "{line}").expect("a line is written");
            written += line.len() + 1;
            n += 1;
        }
        file.flush().expect("a transcript is written");
    }
    let roots = vec![
        Root { harness: Harness::Codex, dir: dir.join("codex") },
        Root { harness: Harness::ClaudeCode, dir: dir.join("claude") },
    ];
    (roots, appendable)
}

fn main() {
    let args = Args::parse();
    let temporary;
    let dir = match &args.dir {
        Some(dir) => dir.clone(),
        None => {
            temporary = tempfile::tempdir().expect("a temporary directory");
            temporary.path().to_path_buf()
        }
    };
    let started = Instant::now();
    let (roots, appendable) = build(&dir, args.transcripts, args.mib << 20);
    eprintln!(
        "built {} transcripts of about {} MiB in {:.1?}",
        args.transcripts,
        args.mib,
        started.elapsed()
    );
    let index_dir = dir.join("store");
    std::fs::create_dir_all(&index_dir).expect("the index directory");
    let mut index = Index::open(&index_dir).expect("the index opens");

    let cold = Instant::now();
    let found = discover(&roots).expect("discovery");
    let scanned = index.scan_history(&found).expect("the cold scan");
    let cold = cold.elapsed();

    let mut rescans = Samples::default();
    for _ in 0..10 {
        rescans.time(|| {
            let found = discover(&roots).expect("discovery");
            index.scan_history(&found).expect("a rescan")
        });
    }

    let mut file = std::fs::OpenOptions::new().append(true).open(&appendable).expect("append");
    let mut seed = 7;
    writeln!(file, "{}", codex_line(&mut seed, 3)).expect("one more line");
    drop(file);
    let mut appended = Samples::default();
    let after = appended.time(|| {
        let found = discover(&roots).expect("discovery");
        index.scan_history(&found).expect("a rescan")
    });

    let mut searches = Samples::default();
    let filter = SearchFilter { limit: 20, ..SearchFilter::default() };
    let mut seed = 11;
    for _ in 0..args.searches {
        // Two words of the middle ranks (100 to 5,000): found in some transcripts, not in all.
        let mut pick = || word(100 + next(&mut seed) % 4_900);
        let query = format!("{} {}", pick(), pick());
        searches.time(|| index.search(&query, &filter).expect("a search"));
    }

    println!("| measurement | figure | target |");
    println!("|---|---|---|");
    println!(
        "| cold scan of {} transcripts x {} MiB ({} lines) | {:.1} s | at most 60 s |",
        scanned.transcripts,
        args.mib,
        scanned.lines,
        cold.as_secs_f64()
    );
    println!(
        "| unchanged rescan (discovery + stats), median of 10 | {} | at most 100 ms |",
        show(rescans.median())
    );
    println!(
        "| rescan after appending one line ({} line folded) | {} | |",
        after.lines,
        show(appended.median())
    );
    println!(
        "| search p50 / p95 ({} two-word queries, words of ranks 100 to 5,000) | {} / {} | p50 at most 10 ms |",
        args.searches,
        show(searches.median()),
        show(searches.quantile(0.95))
    );
}
