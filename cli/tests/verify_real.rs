//! The real-process sweep as a maintainer runs it: the real `spex` binary killed before every
//! boundary of a scenario and at seeded random moments with SIGKILL, each real directory
//! recovered and checked by the oracle. The simulated crash model is only as good as its match
//! with what a real kernel keeps after a process dies.

mod common;

use common::spex;

#[test]
fn real_process_kills_at_every_boundary_and_sigkill_soak_leave_no_violation() {
    let output = spex(&[
        "verify",
        "real-sweep",
        "--scenario",
        "drain",
        "--scenario",
        "close",
        "--soak",
        "12",
        "--seed",
        "11",
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("0 violations"), "{stdout}");
    let runs: u64 =
        stdout.split_whitespace().next().and_then(|n| n.parse().ok()).expect("a run count");
    assert!(runs > 100, "every boundary of both scenarios plus the soak: {stdout}");
}

#[test]
fn sweep_and_replay_from_the_command_line() {
    let output =
        spex(&["verify", "sweep", "--scenario", "send", "--depth", "1", "--seed", "4", "--json"]);
    assert_eq!(output.status.code(), Some(0));
    let document: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("one JSON document");
    assert_eq!(document["schema"], 1);
    assert!(document["images"].as_u64().is_some_and(|images| images > 100));
    assert!(document["violations"].as_array().is_some_and(Vec::is_empty));
    let output = spex(&["verify", "replay", "v2:send:4:power:20:1"]);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(String::from_utf8_lossy(&output.stdout).contains("no violation"));
    let output = spex(&["verify", "replay", "not-a-token"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("replay token"));
    let output = spex(&["verify", "sweep", "--shard", "3/2"]);
    assert_eq!(output.status.code(), Some(2), "a bad shard is a usage error");
}
