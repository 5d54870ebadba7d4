//! The one seed helper: every randomized run takes its seed from `SPEX_SEED` (or `--seed`), or
//! draws a fresh one, and prints it first so the run can be replayed exactly.

use std::hash::{BuildHasher, Hasher};

/// The environment variable that fixes the seed of a randomized run.
pub const SEED_ENV: &str = "SPEX_SEED";

/// The seed to use: `explicit` if given, else `SPEX_SEED` if set, else a fresh random one.
/// Fails if `SPEX_SEED` is set but is not a `u64`.
pub fn resolve(explicit: Option<u64>) -> Result<u64, String> {
    if let Some(seed) = explicit {
        return Ok(seed);
    }
    match std::env::var(SEED_ENV) {
        Ok(value) => {
            value.trim().parse::<u64>().map_err(|error| format!("{SEED_ENV}={value:?}: {error}"))
        }
        Err(std::env::VarError::NotPresent) => Ok(fresh()),
        Err(error) => Err(format!("{SEED_ENV}: {error}")),
    }
}

/// A fresh seed from the process's randomly keyed hasher.
fn fresh() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(u64::from(std::process::id()));
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_seed_wins() {
        assert_eq!(resolve(Some(42)), Ok(42));
    }
}
