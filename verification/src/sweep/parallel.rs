//! Sharing a sweep's crash points out over threads.
//!
//! Each worker takes the next point not yet taken, judges it on machines of its own (every
//! simulated process, lock registry and image belongs to one `SimFs`), and hands its part of
//! the report back. Parts come back in any order; the caller merges them in point order, so
//! the report is the same for any number of workers. A worker selects the mutant the calling
//! thread selected (a selection is per thread).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use super::options::Options;
use super::report::{Progress, Report};

/// Judges every point with `judge` on `options.jobs` threads; the part of point `i` is at `i`,
/// `None` where the budget ran out (or, with `stop_at_first`, past the first point that found
/// a violation) before the point was started. `progress` hears, as each part arrives, how many
/// parts, images and violations have come back so far.
pub(super) fn run<P: Sync>(
    points: &[P],
    options: &Options,
    started: Instant,
    judge: impl Fn(&P) -> Report + Sync,
    progress: &mut dyn FnMut(Progress),
) -> Vec<Option<Report>> {
    let mut parts: Vec<Option<Report>> = (0..points.len()).map(|_| None).collect();
    let next = AtomicUsize::new(0);
    // The lowest point that found a violation: with `stop_at_first`, no later point starts.
    let first_violation = AtomicU64::new(u64::MAX);
    let mutant = spex_engine::mutant::selected();
    let workers = options.jobs.clamp(1, points.len().max(1));
    let (sender, receiver) = mpsc::channel::<(usize, Report)>();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            let sender = sender.clone();
            let (next, first_violation, judge) = (&next, &first_violation, &judge);
            scope.spawn(move || {
                spex_engine::mutant::select(mutant);
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(point) = points.get(index) else { break };
                    if options.budget.is_some_and(|budget| started.elapsed() >= budget)
                        || (options.stop_at_first
                            && index as u64 > first_violation.load(Ordering::Relaxed))
                    {
                        break;
                    }
                    let part = judge(point);
                    if !part.violations.is_empty() {
                        first_violation.fetch_min(index as u64, Ordering::Relaxed);
                    }
                    if sender.send((index, part)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(sender);
        let mut so_far = Progress { done: 0, total: points.len() as u64, images: 0, violations: 0 };
        for (index, part) in receiver {
            so_far.done += 1;
            so_far.images += part.images;
            so_far.violations += part.violations.len() as u64;
            progress(so_far);
            parts[index] = Some(part);
        }
    });
    parts
}
