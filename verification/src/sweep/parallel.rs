//! Sharing a sweep's crash points out over threads.
//!
//! Each worker judges a run of neighbouring points in order, on machines of its own (every
//! simulated process, lock registry and image belongs to one `SimFs`), and hands each point's
//! part of the report back. Parts come back in any order; the caller merges them in point order,
//! so the report is the same for any number of workers. A worker selects the mutant the calling
//! thread selected (a selection is per thread).
//!
//! The points start out split into one run per worker. A worker that finished its own takes
//! the back half of the longest run left (see [`Runs`]). Neighbouring points of a scenario share
//! most of their images and recovered machines, and what one worker judged the others reuse
//! (`point`'s memos): two workers on neighbouring points at once would judge the same things
//! side by side, each before the other remembers them.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError, mpsc};
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
    // The lowest point that found a violation: with `stop_at_first`, no later point starts.
    let first_violation = AtomicU64::new(u64::MAX);
    let mutant = spex_engine::mutant::selected();
    let workers = options.jobs.clamp(1, points.len().max(1));
    let runs = Runs::new(points.len(), workers);
    let (sender, receiver) = mpsc::channel::<(usize, Report)>();
    std::thread::scope(|scope| {
        for worker in 0..workers {
            let sender = sender.clone();
            let (runs, first_violation, judge) = (&runs, &first_violation, &judge);
            scope.spawn(move || {
                spex_engine::mutant::select(mutant);
                while let Some(index) = runs.next(worker) {
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

/// The points not yet taken, as one run of neighbouring points per worker, each taken from its
/// front by its worker.
struct Runs {
    runs: Mutex<Vec<Range<usize>>>,
}

impl Runs {
    /// `points` points split into `workers` runs as even as can be, in order.
    fn new(points: usize, workers: usize) -> Runs {
        assert!(workers > 0, "a sweep has a worker");
        let runs: Vec<Range<usize>> =
            (0..workers).map(|w| points * w / workers..points * (w + 1) / workers).collect();
        debug_assert_eq!(runs.iter().map(ExactSizeIterator::len).sum::<usize>(), points);
        Runs { runs: Mutex::new(runs) }
    }

    /// The next point for `worker`: the front of its run; when that is done, the front of the
    /// back half (rounded up) of the longest run left, which becomes its run. `None` when none
    /// is left.
    fn next(&self, worker: usize) -> Option<usize> {
        let mut runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        if runs.get(worker).is_some_and(|own| own.is_empty()) {
            let (longest, left) = (runs.iter().enumerate())
                .map(|(owner, run)| (owner, run.len()))
                .max_by_key(|&(owner, len)| (len, std::cmp::Reverse(owner)))?;
            let run = runs.get_mut(longest)?;
            let stolen = run.end - left.div_ceil(2)..run.end;
            run.end = stolen.start;
            *runs.get_mut(worker)? = stolen;
        }
        runs.get_mut(worker)?.next()
    }
}

#[cfg(test)]
mod tests {
    use super::Runs;

    /// Every point is handed out once, to one worker, each worker's in increasing order
    /// within what it took at once; a worker done early takes the back half of the longest run.
    #[test]
    fn every_point_is_taken_once_and_a_worker_done_early_takes_half_a_run() {
        for (points, workers) in [(0, 1), (1, 3), (10, 1), (10, 2), (11, 3), (100, 7)] {
            let runs = Runs::new(points, workers);
            let mut taken = Vec::new();
            // Worker 0 takes twice as often as the others.
            'all: loop {
                let mut any = false;
                for worker in (0..workers).chain([0]) {
                    if let Some(point) = runs.next(worker) {
                        taken.push(point);
                        any = true;
                    }
                }
                if !any {
                    break 'all;
                }
            }
            taken.sort_unstable();
            assert_eq!(
                taken,
                (0..points).collect::<Vec<_>>(),
                "{points} points, {workers} workers"
            );
        }
        let runs = Runs::new(10, 2);
        assert_eq!((0..5).map(|_| runs.next(0)).collect::<Vec<_>>(), [0, 1, 2, 3, 4].map(Some));
        // Worker 0 is done with its run; worker 1's (5..10) is split: 0 takes 7, 8 and 9.
        assert_eq!(runs.next(0), Some(7));
        assert_eq!(runs.next(1), Some(5));
        assert_eq!(runs.next(0), Some(8));
        assert_eq!(runs.next(0), Some(9));
        // Then 0 takes the one left of 1's run (6).
        assert_eq!(runs.next(0), Some(6));
        assert_eq!((runs.next(0), runs.next(1)), (None, None));
    }
}
