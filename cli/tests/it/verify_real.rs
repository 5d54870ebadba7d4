//! The real-process sweep as a maintainer runs it: the real `spex` binary killed before every
//! boundary of a scenario and at seeded random moments with SIGKILL, each real directory
//! recovered and checked by the oracle. The simulated crash model is only as good as its match
//! with what a real kernel keeps after a process dies.

use crate::common;

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

/// Four shards run as four processes and merged give exactly one run's report; a merge
/// missing a shard, repeating one, or mixing sweeps fails and says why.
#[test]
fn four_shard_processes_merge_to_one_run() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let args = ["verify", "sweep", "--scenario", "drain", "--depth", "1", "--seed", "6", "--json"];
    let one = spex(&args);
    assert_eq!(one.status.code(), Some(0), "{}", String::from_utf8_lossy(&one.stderr));
    let children: Vec<std::process::Child> = (0..4)
        .map(|i| {
            let shard = format!("{i}/4");
            let file = std::fs::File::create(dir.path().join(format!("shard-{i}.json")))
                .expect("a report file");
            std::process::Command::new(common::SPEX)
                .args(args)
                .args(["--shard", &shard, "--jobs", "1"])
                .env_remove("SPEX_SEED")
                .stdout(file)
                .spawn()
                .expect("a shard process")
        })
        .collect();
    for mut child in children {
        assert!(child.wait().expect("the shard ends").success());
    }
    let report = |i: u32| dir.path().join(format!("shard-{i}.json")).display().to_string();
    let reports: Vec<String> = (0..4).map(report).collect();
    let mut merge = vec!["verify", "merge", "--json"];
    merge.extend(reports.iter().map(String::as_str));
    let merged = spex(&merge);
    assert_eq!(merged.status.code(), Some(0), "{}", String::from_utf8_lossy(&merged.stderr));
    let comparable = |bytes: &[u8]| {
        let mut document: serde_json::Value = serde_json::from_slice(bytes).expect("JSON");
        let object = document.as_object_mut().expect("an object");
        // How the work is shared out changes its speed, which of the images that recover
        // alike runs the work after recovery (`sharedContinuations`, `sharedWork`), and which
        // judgement of an image against a run others reuse (`reusedJudgements`), which
        // image's recovery others recall (`recalledRecoveries`) and which power loss's images
        // others are served (`keptPowerLosses`): not a verdict.
        for varying in [
            "elapsedMs",
            "jobs",
            "imagesPerSecond",
            "imagesPerSecondPerCore",
            "mergedShards",
            "sharedContinuations",
            "sharedWork",
            "reusedJudgements",
            "recalledRecoveries",
            "keptPowerLosses",
        ] {
            object.remove(varying);
        }
        document
    };
    assert_eq!(comparable(&merged.stdout), comparable(&one.stdout));

    let missing = spex(&["verify", "merge", &reports[0], &reports[1], &reports[3]]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("shard 2/4 missing"));
    let twice =
        spex(&["verify", "merge", &reports[0], &reports[1], &reports[2], &reports[3], &reports[1]]);
    assert_eq!(twice.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&twice.stderr).contains("given more than once"));
    let other = dir.path().join("other.json");
    std::fs::write(&other, &one.stdout).expect("a report");
    let text = std::fs::read_to_string(&other).expect("the report");
    std::fs::write(&other, text.replace("\"drain\"", "\"send\"")).expect("a report");
    let mixed = spex(&["verify", "merge", &reports[0], &other.display().to_string()]);
    assert_eq!(mixed.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&mixed.stderr).contains("swept something else"));
}

#[test]
fn the_lock_protocol_is_model_checked_and_a_broken_takeover_is_shown_failing() {
    let output = spex(&["verify", "locks", "--starts", "3", "--json"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    let document: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(document["kind"], "locks");
    assert!(document["states"].as_u64().unwrap_or(0) > 10_000, "{stdout}");
    let safety = document["safety"].as_array().expect("the safety properties");
    assert_eq!(safety.len(), 3);
    assert!(safety.iter().all(|property| property["holds"] == true), "{stdout}");

    let output =
        spex(&["verify", "locks", "--starts", "3", "--variant", "takeover-without-recheck"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(5), "{stdout}");
    assert!(stdout.contains("FAILS     mutual exclusion: a run that breaks it"), "{stdout}");
    assert!(stdout.contains("does not re-read the lock"), "{stdout}");

    let output = spex(&["verify", "locks", "--variant", "no-such"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("takeover-without-recheck"));
}
