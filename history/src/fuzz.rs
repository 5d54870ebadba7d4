//! The entry points of the `claude_transcript` and `codex_transcript` fuzz targets
//! (`fuzz/fuzz_targets/`): a transcript of one harness, parsed line by line, through the file
//! reader whole and in chunks, then redacted.
//!
//! Properties, not only "no panic": the reader and the line parser agree on every event; a read
//! in chunks gives what one read gives; every event names a line that exists; a planted key, set
//! apart by spaces anywhere in the text, never survives redaction.

use crate::event::{Harness, Kind};
use crate::parse::Parser;
use crate::redact::{Identity, redact};

/// A key no text may show after redaction.
const PLANTED: &str = "sk-ant-api03-PLANTEDplantedPLANTED0123456789";

/// One input as a Claude Code transcript.
pub fn claude_transcript(data: &[u8]) {
    transcript(Harness::ClaudeCode, data);
}

/// One input as a Codex transcript.
pub fn codex_transcript(data: &[u8]) {
    transcript(Harness::Codex, data);
}

fn transcript(harness: Harness, data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    // The line parser over every complete line.
    let mut parser = Parser::new(harness);
    let mut events = Vec::new();
    let complete = text.rfind('\n').map_or("", |end| &text[..=end]);
    let lines: Vec<&str> = complete.split_inclusive('\n').collect();
    for (index, line) in lines.iter().enumerate() {
        parser.line(index as u64 + 1, line.trim_end_matches(['\n', '\r']), &mut events);
    }
    for event in &events {
        assert!(event.line >= 1 && event.line <= lines.len() as u64, "line {}", event.line);
    }
    // The file reader over the same bytes: the same events, stopping before an unfinished line.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("t.jsonl");
    std::fs::write(&path, text.as_bytes()).expect("the input is written");
    let read = crate::read::read_from(&path, harness, 0, 0).expect("the input reads");
    assert_eq!(read.events, events, "the reader and the parser disagree");
    assert_eq!(read.offset, complete.len() as u64);
    // In chunks of a few lines' bytes (the budget from the input's length), with one parser.
    let budget = 1 + (data.len() as u64 % 257);
    let mut parser = Parser::new(harness);
    let (mut offset, mut lines, mut chunked) = (0, 0, Vec::new());
    loop {
        let chunk = crate::read::read_chunk(&path, &mut parser, offset, lines, budget)
            .expect("the input reads");
        chunked.extend(chunk.events);
        (offset, lines) = (chunk.offset, chunk.lines);
        if !chunk.more {
            break;
        }
    }
    assert_eq!(chunked, events, "a read in chunks and one read disagree");
    assert_eq!(offset, read.offset);
    // Every text, with the planted key set apart in its middle, loses the key.
    let identity = Identity::new(Some("/home/fuzz"), Some("fuzz"), Some("fuzzhost"));
    for event in &events {
        if let Kind::User { text } | Kind::Assistant { text } = &event.kind {
            let mut at = text.len() / 2;
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            let planted = format!("{} {PLANTED} {}", &text[..at], &text[at..]);
            let shown = redact(&planted, &identity);
            assert!(!shown.contains(PLANTED), "the planted key survived: {shown:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_committed_corpora_hold() {
        type Target = fn(&[u8]);
        let targets: [(&str, Target); 2] = [
            ("claude_transcript", super::claude_transcript),
            ("codex_transcript", super::codex_transcript),
        ];
        for (target, run) in targets {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../fuzz/corpus")
                .join(target);
            let mut inputs = 0;
            let entries =
                std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            for entry in entries {
                let path = entry.expect("a corpus entry").path();
                let data = std::fs::read(&path).expect("a corpus file reads");
                let outcome = std::panic::catch_unwind(|| run(&data));
                assert!(outcome.is_ok(), "{} breaks its property", path.display());
                inputs += 1;
            }
            assert!(inputs >= 1, "a seed corpus for {target}");
        }
    }
}
