//! The crash sweep of the engine: every scenario crashed at every boundary under process kill
//! and power loss (and its recovery crashed again) shows no violation; the matrix has no empty
//! cell; every mutant is caught; a violation replays bit for bit. A sweep that never finds
//! anything is suspect until it catches every broken engine.

use faultfs::CrashMode;
use spex_engine::mutant::Mutant;
use spex_verification::sweep::{self, Options, Token};

#[test]
fn the_real_engine_survives_a_ninth_of_the_crash_points() {
    // A ninth of the crash points: enough that every transition and sequence below has cells.
    // `.ci/run` sweeps every one with the release binary, whose engine keeps its assertions
    // and overflow checks as this build does.
    let seed = 20_261_130;
    let report = sweep::sweep(&Options { shard: (0, 9), ..Options::full(seed) }, &mut |_| {});
    let first = report
        .violations
        .first()
        .map(|v| format!("{}\n  {}", v.replay_command(), v.messages.join("\n  ")));
    assert!(
        report.violations.is_empty(),
        "{} violations; first:\n{}",
        report.violations.len(),
        first.unwrap_or_default()
    );
    assert!(report.images > 10_000, "the sweep checks many images: {}", report.images);
    // Coverage: every boundary crashed at is one an op passed, and a transition's own takeover
    // of a dead holder's lock (reached only as the first command after a kill) is crashed op
    // by op too.
    assert!(report.crashed.is_subset(&report.reached));
    for boundary in ["send.log.sync", "recover.log.vouch", "send.lock.takeover", "drain.log.vouch"]
    {
        assert!(report.crashed.contains(boundary), "never crashed at {boundary}");
    }
    let never = report.never_crashed();
    assert!(never.iter().all(|name| !report.crashed.contains(*name)));
    // No empty cell: every (scenario, transition, boundary, mode) visited has images (judged
    // there, or already judged against the same run elsewhere).
    for (key, cell) in &report.cells {
        assert!(cell.points > 0 && cell.images + cell.repeated > 0, "empty cell {key:?}");
    }
    // Every transition appears under both modes, crashed and with every injected fault, and
    // followed by the sequences after it (kill, work, power loss; a crash inside the work).
    for mode in [CrashMode::ProcessKill, CrashMode::PowerLoss] {
        for transition in [
            "create",
            "send",
            "send-keyed",
            "drain",
            "append",
            "archive",
            "close",
            "send+eio",
            "send+enospc",
            "send+short",
            "drain+eio",
            "append+short",
            "close+eio",
            "send-keyed/kill+work+power",
            "send-keyed/kill+kill",
            "append/kill+work+power",
            // The next process's first command after a kill, with no recovery before it.
            "send-keyed/kill+first-send-keyed+power",
            "send/kill+first-drain+power",
            "send/kill+first-send+power",
            "drain/kill+first-drain+power",
            "append/kill+first-append+power",
            "send/kill+first-archive+power",
            "drain/kill+first-close+power",
            // A crash inside that command's takeover, then the process after it.
            "send-keyed/kill+takeover-send-keyed+kill",
            "send/kill+takeover-drain+power",
            "append/kill+takeover-append+power",
        ] {
            // A sequence's cell is under the mode of its last crash.
            let final_mode = match transition.rsplit_once('/') {
                Some((_, sequence)) if sequence.ends_with("+power") => CrashMode::PowerLoss,
                Some((_, sequence)) if sequence.ends_with("+kill") => CrashMode::ProcessKill,
                _ => mode,
            };
            assert!(
                report.cells.keys().any(|(_, t, _, m)| t == transition && *m == final_mode),
                "no cell for {transition} under {final_mode}"
            );
        }
    }
}

/// Two sweeps on two threads get exactly what each gets alone: the simulated processes and
/// their lock registry belong to one simulated machine, not to the test process.
#[test]
fn sweeps_on_two_threads_do_not_interfere() {
    let options = |name: &str| Options {
        scenarios: vec![sweep::scenario::named(name).expect("a scenario")],
        depth2: false,
        faults: Vec::new(),
        ..Options::full(5)
    };
    let summary = |report: &sweep::Report| {
        (report.crash_points, report.images, report.violations.len(), report.cells.clone())
    };
    let alone: Vec<_> = ["send", "close"]
        .iter()
        .map(|name| summary(&sweep::sweep(&options(name), &mut |_| {})))
        .collect();
    let together: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = ["send", "close"]
            .iter()
            .map(|name| {
                let options = options(name);
                scope.spawn(move || summary(&sweep::sweep(&options, &mut |_| {})))
            })
            .collect();
        handles.into_iter().map(|handle| handle.join().expect("a sweep thread")).collect()
    });
    assert_eq!(alone, together);
}

#[test]
fn a_violation_replays_bit_for_bit() {
    spex_engine::mutant::select(Some(Mutant::NoLogSync));
    let report = sweep::sweep(
        &Options { depth2: false, stop_at_first: true, ..Options::full(3) },
        &mut |_| {},
    );
    let violation = report.violations.first().expect("the mutant is caught").clone();
    let token: Token = violation.token.to_string().parse().expect("tokens parse back");
    assert_eq!(token, violation.token);
    let first = sweep::replay(&token).expect("the token replays");
    let second = sweep::replay(&token).expect("the token replays");
    spex_engine::mutant::select(None);
    assert_eq!(first.trace_hash, second.trace_hash, "same token, same traces");
    assert!(!first.messages.is_empty(), "the replay reproduces the violation");
    assert_eq!(first.messages, second.messages);
}

/// A violation found by a crash inside the next process's first command (in its takeover of
/// the dead holder's lock) replays too: only such a crash shows this mutant.
#[test]
fn a_crash_inside_a_first_commands_takeover_replays() {
    spex_engine::mutant::select(Some(Mutant::RollForwardBeforeVouch));
    let options = Options {
        scenarios: vec![sweep::scenario::named("lifecycle").expect("a scenario")],
        faults: Vec::new(),
        stop_at_first: true,
        ..Options::full(7)
    };
    let report = sweep::sweep(&options, &mut |_| {});
    let violation = report.violations.first().expect("the mutant is caught").clone();
    let token: Token = violation.token.to_string().parse().expect("tokens parse back");
    let replayed = sweep::replay(&token).expect("the token replays");
    spex_engine::mutant::select(None);
    assert_eq!(token, violation.token);
    assert!(token.first_crash.is_some(), "caught by a crash inside a first command: {token}");
    assert_eq!(replayed.messages, violation.messages);
}

#[test]
fn tokens_reject_malformed_text() {
    for bad in [
        "",
        "v1:send:1:kill:0:0",
        "v2:send:x:kill:0:0",
        "v2:send:1:flood:0:0",
        "v2:send:1:kill:0",
        "v2:send:1:kill:0:0:in:kill:1",
        "v2:send:1:kill:0:0:then",
        "v2:send:1:kill:0:0:bogus",
        "v2:send:1:kill:0:0:first-in:0:kill:3",
    ] {
        assert!(bad.parse::<Token>().is_err(), "{bad}");
    }
    for good in [
        "v2:send:1:kill:3:0:in:power:4:5:then:6",
        "v2:send:1:kill:3:reopen:then:2:eio",
        "v2:send:1:kill:3:0:first-in:1:power:4:5",
    ] {
        let token: Token = good.parse().expect("well formed");
        assert_eq!(token.to_string(), good);
    }
    assert!(sweep::replay(&"v2:nope:1:kill:0:0".parse().expect("well formed")).is_err());
}

#[test]
fn a_violation_shrinks_to_a_minimal_workload_that_still_reproduces() {
    spex_engine::mutant::select(Some(Mutant::SkipReceiptFence));
    let options = Options {
        scenarios: vec![sweep::scenario::named("drain").expect("a scenario")],
        ..Options::full(1)
    };
    let report = sweep::sweep(
        &Options { depth2: false, faults: Vec::new(), stop_at_first: true, ..options },
        &mut |_| {},
    );
    let violation = report.violations.first().expect("the mutant is caught").clone();
    let shrunk = sweep::shrink::shrink(&violation.token).expect("it shrinks");
    let replayed = sweep::replay(&shrunk.token).expect("the shrunk token replays");
    spex_engine::mutant::select(None);
    assert!(shrunk.steps.len() < 7, "fewer steps than the scenario: {:?}", shrunk.steps);
    assert!(!replayed.messages.is_empty(), "the minimal reproducer still fails");
    assert_eq!(replayed.messages, shrunk.messages);
}

/// Every oracle rule catches a broken engine of its own: a rule no mutant trips could be a
/// rule that cannot fail.
#[test]
fn every_oracle_rule_is_tripped_by_a_mutant() {
    let cases = [
        ("rule 1 (acceptance)", Mutant::NoQueueDirSync, "send"),
        ("rule 2 (same-key replay)", Mutant::ReplayWithoutRestore, "send"),
        ("rule 3 (fail-closed drain)", Mutant::SkipReceiptFence, "drain"),
        ("rule 4 (append-only)", Mutant::NoLogSync, "send"),
        ("rule 5 (lifecycle completeness)", Mutant::NoRollForward, "lifecycle"),
        ("rule 6 (close atomicity)", Mutant::CloseDeletesBeforeRevoking, "close"),
        ("rule 7 (model refinement)", Mutant::EnqueueBeforeAppend, "send"),
    ];
    for (rule, mutant, scenario) in cases {
        let options = Options {
            scenarios: vec![sweep::scenario::named(scenario).expect("a scenario")],
            depth2: false,
            faults: Vec::new(),
            ..Options::full(1)
        };
        spex_engine::mutant::select(Some(mutant));
        let report = sweep::sweep(&options, &mut |_| {});
        spex_engine::mutant::select(None);
        let tripped =
            report.violations.iter().flat_map(|v| &v.messages).any(|m| m.starts_with(rule));
        assert!(tripped, "{rule} is not tripped by {}", mutant.name());
    }
    // Rule 8 judges the session index's fold; its broken variant trusts a watermark without
    // checking the pin, and folds on from bytes a power loss replaced.
    let options = Options {
        scenarios: vec![sweep::scenario::named("send").expect("a scenario")],
        depth2: false,
        faults: Vec::new(),
        ..Options::full(1)
    };
    spex_index::TRUST_WATERMARK_MUTANT.store(true, std::sync::atomic::Ordering::Relaxed);
    let report = sweep::sweep(&options, &mut |_| {});
    spex_index::TRUST_WATERMARK_MUTANT.store(false, std::sync::atomic::Ordering::Relaxed);
    let tripped = report
        .violations
        .iter()
        .flat_map(|v| &v.messages)
        .any(|m| m.starts_with("rule 8 (activity index)"));
    assert!(tripped, "rule 8 is not tripped by an index that trusts its watermark blindly");
}

/// The named harsher medium (stale bytes where a file grew without its data) breaks nothing:
/// stale garbage at the end of a log is a torn tail. A repair that keeps damaged lines is
/// caught there.
#[test]
fn stale_tails_break_nothing_and_catch_a_repair_that_keeps_damage() {
    let options = Options {
        scenarios: vec![sweep::scenario::named("send").expect("a scenario")],
        depth2: false,
        faults: Vec::new(),
        media: faultfs::Media::StaleTails,
        ..Options::full(9)
    };
    let report = sweep::sweep(&options, &mut |_| {});
    assert!(report.violations.is_empty(), "{:?}", report.violations.first());
    let caught = sweep::catch(Mutant::RepairKeepsDamagedLines, &options);
    let violation = caught.first.expect("the mutant is caught under stale tails");
    assert!(violation.token.to_string().contains(":stale-tails"), "{}", violation.token);
    spex_engine::mutant::select(Some(Mutant::RepairKeepsDamagedLines));
    let replayed = sweep::replay(&violation.token).expect("the token replays");
    spex_engine::mutant::select(None);
    assert_eq!(replayed.messages, violation.messages);
}

/// The report does not depend on how the points are shared out: one job, two jobs, and four
/// shards merged all give the same totals, cells and violations (with a broken engine, so
/// there are violations to compare).
#[test]
fn shards_and_jobs_merge_to_one_run() {
    let options = Options {
        scenarios: vec![sweep::scenario::named("send").expect("a scenario")],
        depth2: false,
        faults: vec![faultfs::Fault::Eio],
        jobs: 1,
        ..Options::full(9)
    };
    spex_engine::mutant::select(Some(Mutant::NoLogSync));
    let one = sweep::sweep(&options, &mut |_| {});
    let two = sweep::sweep(&Options { jobs: 2, ..options.clone() }, &mut |_| {});
    let shards: Vec<sweep::Report> = (0..4)
        .map(|i| sweep::sweep(&Options { shard: (i, 4), ..options.clone() }, &mut |_| {}))
        .collect();
    spex_engine::mutant::select(None);
    let merged = sweep::merge(shards, &["send".to_owned()]);
    assert!(!one.violations.is_empty(), "the broken engine is caught");
    for other in [&two, &merged] {
        assert_eq!(other.cells, one.cells);
        assert_eq!(other.violations, one.violations);
        assert_eq!(
            (other.crash_points, other.planned_points, other.images, other.repeated),
            (one.crash_points, one.planned_points, one.images, one.repeated)
        );
        assert_eq!(other.enumeration, one.enumeration);
        assert_eq!(other.reach, one.reach);
    }
}

/// Leaving out the images a judged one stands for (it agrees with them on every path, kind and
/// length and on the bytes of every file its judgement read) changes no verdict. With a broken
/// engine: judged anyway, every image stood for gets the verdict of the one standing in for it;
/// the sweep with the reduction and the sweep judging every image find violations in the same
/// cells, and in each cell the images judged plus those stood for are the images judged
/// without the reduction.
#[test]
fn images_a_judged_one_stands_for_change_no_verdict() {
    let options = |reduce_equivalent: bool, verify_equivalent: bool| Options {
        scenarios: vec![sweep::scenario::named("send").expect("a scenario")],
        faults: vec![faultfs::Fault::Eio],
        depth2: false,
        reduce_equivalent,
        verify_equivalent,
        ..Options::full(4)
    };
    spex_engine::mutant::select(Some(Mutant::NoQueueDirSync));
    let checked = sweep::sweep(&options(true, true), &mut |_| {});
    let reduced = sweep::sweep(&options(true, false), &mut |_| {});
    let every = sweep::sweep(&options(false, false), &mut |_| {});
    spex_engine::mutant::select(None);
    assert!(checked.equivalent > 100, "images stood for: {}", checked.equivalent);
    // Verifying, each continuation after recovery runs even where one from the same machine
    // and run ran before, and must have read the same files and reached the same verdict.
    assert!(checked.shared > 100, "continuations compared: {}", checked.shared);
    // And the continued work on a machine recovery left before runs again for another run
    // that retries and folds alike, and must have read, answered and left the same.
    assert!(checked.worked > 100, "continued work compared: {}", checked.worked);
    // And each judgement of an image against a run runs again where the same image was judged
    // against the same run in another cell, and must have observed the same and agreed.
    assert!(checked.reused > 100, "judgements compared: {}", checked.reused);
    // And each recovery of an image runs again where the same image was recovered for a run
    // that created the same sessions, and what follows must be judged as remembered.
    assert!(checked.recalled > 100, "recoveries compared: {}", checked.recalled);
    // And each power loss with the digest of one enumerated before is enumerated again, and
    // must have left the same images in the same order; without the check, some are served.
    assert!(
        checked.kept_power_losses > 100,
        "power losses compared: {}",
        checked.kept_power_losses
    );
    assert!(reduced.kept_power_losses > 0, "power losses served: {}", reduced.kept_power_losses);
    assert!(
        checked.unequal_stand_ins.is_empty(),
        "{} images stood for are judged otherwise; the first: {:?}",
        checked.unequal_stand_ins.len(),
        checked.unequal_stand_ins.first()
    );
    assert_eq!(reduced.equivalent, checked.equivalent);
    assert_eq!(every.equivalent, 0);
    assert!(!every.violations.is_empty(), "the mutant is caught");
    assert_eq!(reduced.images + reduced.equivalent, every.images);
    assert_eq!(reduced.cells.keys().collect::<Vec<_>>(), every.cells.keys().collect::<Vec<_>>());
    let mut stood_for_in_violating_cells = 0;
    for (key, cell) in &every.cells {
        let with = reduced.cells[key];
        assert_eq!(with.images + with.equivalent, cell.images, "{key:?}");
        assert_eq!(with.violations > 0, cell.violations > 0, "{key:?}: {with:?} vs {cell:?}");
        assert!(with.violations <= cell.violations, "{key:?}");
        if cell.violations > 0 {
            stood_for_in_violating_cells += with.equivalent;
        }
    }
    assert!(stood_for_in_violating_cells > 0, "some image stood for sits in a violating cell");
}

/// At depth 2, a machine restarted after a kill of the phase is judged once per what every
/// process sees of it and run (`point::judge_restarted`). Verifying, each repeat is judged
/// anyway and must agree; and the sweep judging every machine (no reduction) finds the
/// mutant's violations in the same cells as the reduced one. The mutant (a send that enqueues
/// before it appends) leaves violations at some restarted machines and not at others, so a key
/// that joined machines a process tells apart gives some of them another's verdict (a key
/// without the visible digest does: 32 unequal).
#[test]
fn restarted_machines_judged_once_change_no_verdict() {
    let options = |reduce_equivalent: bool, verify_equivalent: bool| Options {
        scenarios: vec![sweep::scenario::named("send").expect("a scenario")],
        modes: vec![CrashMode::ProcessKill],
        faults: Vec::new(),
        depth2: true,
        shard: (0, 4),
        reduce_equivalent,
        verify_equivalent,
        ..Options::full(4)
    };
    spex_engine::mutant::select(Some(Mutant::EnqueueBeforeAppend));
    let checked = sweep::sweep(&options(true, true), &mut |_| {});
    let reduced = sweep::sweep(&options(true, false), &mut |_| {});
    let every = sweep::sweep(&options(false, false), &mut |_| {});
    spex_engine::mutant::select(None);
    assert!(checked.reused > 100, "judgements compared: {}", checked.reused);
    assert!(
        checked.unequal_stand_ins.is_empty(),
        "{} judgements repeated are judged otherwise; the first: {:?}",
        checked.unequal_stand_ins.len(),
        checked.unequal_stand_ins.first()
    );
    assert!(!every.violations.is_empty(), "the mutant is caught");
    assert_eq!(reduced.cells.keys().collect::<Vec<_>>(), every.cells.keys().collect::<Vec<_>>());
    for (key, cell) in &every.cells {
        let with = reduced.cells[key];
        assert_eq!(with.violations > 0, cell.violations > 0, "{key:?}: {with:?} vs {cell:?}");
    }
}
