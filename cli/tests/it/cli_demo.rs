//! `spex demo` as a user runs it: the real binary, stdout and stderr and the exit code checked
//! separately. The README documents it (and CI runs it), so it must keep working as written.

use crate::common;

use common::spex;

#[test]
fn demo_meets_its_expectations_and_exits_zero() {
    let output = spex(&["demo", "--seed", "7"]);
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stderr.contains("seed 7"), "the seed is printed on stderr: {stderr}");
    assert!(stdout.contains("fsyncgate"));
    assert!(stdout.contains("Crash sweep of the correct log writer"));
    assert!(stdout.contains("replay: spex demo --writer no-sync"));
    assert!(!stdout.contains("(BAD)"));
}

#[test]
fn a_single_broken_writer_exits_with_the_violation_code() {
    let output = spex(&["demo", "--writer", "no-sync", "--seed", "1"]);
    assert_eq!(output.status.code(), Some(5));
    let output = spex(&["demo", "--writer", "correct", "--seed", "1"]);
    assert_eq!(output.status.code(), Some(0));
}

#[test]
fn json_output_is_one_document_with_a_schema_version() {
    let output = spex(&["demo", "--json", "--seed", "2", "--writer", "no-dir-sync"]);
    assert_eq!(output.status.code(), Some(5));
    let document: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(document["schema"], 1);
    assert_eq!(document["seed"], "2", "a seed is a string in JSON (no reader rounds it)");
    let violations = &document["sweeps"][0]["modes"][1]["violations"];
    assert!(violations.as_array().is_some_and(|list| !list.is_empty()));
    assert!(violations[0]["replay"].as_str().unwrap().contains("--crash-at"));
}

#[test]
fn bad_arguments_exit_with_the_usage_code_and_write_nothing_to_stdout() {
    let output = spex(&["demo", "--writer", "sloppy"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    assert!(String::from_utf8_lossy(&output.stderr).contains("unknown writer"));
}
