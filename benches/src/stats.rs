//! Medians and percentiles of timed samples.

use std::time::{Duration, Instant};

/// Timed samples of one measurement.
#[derive(Clone, Debug, Default)]
pub struct Samples(pub Vec<Duration>);

impl Samples {
    /// Times `f` once and records it.
    pub fn time<T>(&mut self, f: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let value = f();
        self.0.push(started.elapsed());
        value
    }

    /// The `q` quantile (0.5 is the median).
    pub fn quantile(&self, q: f64) -> Duration {
        let mut sorted = self.0.clone();
        sorted.sort();
        if sorted.is_empty() {
            return Duration::ZERO;
        }
        let index = ((sorted.len() - 1) as f64 * q).round() as usize;
        sorted[index]
    }

    /// The median.
    pub fn median(&self) -> Duration {
        self.quantile(0.5)
    }

    /// Operations per second at the mean latency.
    pub fn per_second(&self) -> f64 {
        let total: Duration = self.0.iter().sum();
        if total.is_zero() { 0.0 } else { self.0.len() as f64 / total.as_secs_f64() }
    }
}

/// A duration for a table: µs below 10 ms, else ms.
pub fn show(duration: Duration) -> String {
    let micros = duration.as_secs_f64() * 1e6;
    if micros < 10_000.0 {
        format!("{micros:.0} µs")
    } else {
        format!("{:.1} ms", micros / 1000.0)
    }
}

/// `a / b` as a ratio for a table.
pub fn ratio(a: Duration, b: Duration) -> String {
    if b.is_zero() { "-".to_owned() } else { format!("{:.2}x", a.as_secs_f64() / b.as_secs_f64()) }
}
