//! Fault plans: which mutating op of a run fails, and how. A plan and everything random in a
//! simulated run (short-write lengths, sampled crash images) derive from one `u64` seed, which
//! every report prints.

use std::fmt;
use std::str::FromStr;

/// What happens to the op a plan targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// The process dies before the op runs. Every later op fails with `Error::Crashed`; the
    /// harness then takes the crash images.
    Crash,
    /// The op fails with `EIO` and changes nothing, except on a sync: there the dirty data of
    /// that file is dropped while reads still return it, and a later sync reports success
    /// (fsyncgate semantics).
    Eio,
    /// The op fails with `ENOSPC` and changes nothing (on a sync, as `Eio` but with `ENOSPC`).
    Enospc,
    /// A data write stores a seeded prefix of its bytes (possibly none) and then fails. On any
    /// other op it behaves as `Eio`.
    ShortWrite,
}

impl Fault {
    /// Every fault kind, in a stable order.
    pub const ALL: [Fault; 4] = [Fault::Crash, Fault::Eio, Fault::Enospc, Fault::ShortWrite];

    /// The fault's name, as used in plans and replay tokens.
    pub const fn name(self) -> &'static str {
        match self {
            Fault::Crash => "crash",
            Fault::Eio => "eio",
            Fault::Enospc => "enospc",
            Fault::ShortWrite => "short",
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_assert_eq!(self.name().parse::<Fault>(), Ok(*self), "a fault prints as it parses");
        f.pad(self.name())
    }
}

impl FromStr for Fault {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let fault = Fault::ALL
            .into_iter()
            .find(|fault| fault.name() == s)
            .ok_or_else(|| format!("unknown fault {s:?} (expected crash, eio, enospc or short)"))?;
        debug_assert_eq!(fault.name(), s, "a fault parses from its name");
        Ok(fault)
    }
}

/// A run's fault plan: at most one faulted op, plus the seed for everything random.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FaultPlan {
    /// The seed of the run.
    pub seed: u64,
    /// The faulted op (index among mutating ops) and its fault, if any.
    pub trigger: Option<(u64, Fault)>,
}

impl FaultPlan {
    /// No fault: count boundaries, record the trace.
    pub const fn none(seed: u64) -> Self {
        FaultPlan { seed, trigger: None }
    }

    /// Crash before mutating op `op_index` runs.
    pub const fn crash_at(seed: u64, op_index: u64) -> Self {
        FaultPlan { seed, trigger: Some((op_index, Fault::Crash)) }
    }

    /// Inject `fault` at mutating op `op_index`.
    pub const fn fault_at(seed: u64, op_index: u64, fault: Fault) -> Self {
        FaultPlan { seed, trigger: Some((op_index, fault)) }
    }

    /// A plan chosen from `seed` alone for a run of `op_count` mutating ops: which op, and
    /// which fault.
    pub fn random(seed: u64, op_count: u64) -> Self {
        if op_count == 0 {
            return FaultPlan::none(seed);
        }
        let mixed = mix(seed, 0x5EED);
        let op_index = mixed % op_count;
        let fault = *Fault::ALL
            .get(((mixed >> 32) % Fault::ALL.len() as u64) as usize)
            .expect("an index modulo the length");
        assert!(op_index < op_count, "a random fault hits an op of the run");
        FaultPlan::fault_at(seed, op_index, fault)
    }
}

impl fmt::Display for FaultPlan {
    /// `seed=<n>` or `seed=<n>,<fault>@<op>`; parsed back by `FromStr`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_assert!(
            self.trigger.is_none_or(|(_, fault)| Fault::ALL.contains(&fault)),
            "a plan prints a fault its parser knows"
        );
        write!(f, "seed={}", self.seed)?;

        if let Some((op_index, fault)) = self.trigger {
            write!(f, ",{fault}@{op_index}")?;
        }
        Ok(())
    }
}

impl FromStr for FaultPlan {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (seed_part, trigger_part) = match s.split_once(',') {
            Some((seed, trigger)) => (seed, Some(trigger)),
            None => (s, None),
        };
        let seed = seed_part
            .strip_prefix("seed=")
            .ok_or_else(|| format!("fault plan {s:?} must start with seed=<u64>"))?
            .parse::<u64>()
            .map_err(|error| format!("fault plan {s:?}: bad seed: {error}"))?;
        let trigger = match trigger_part {
            None => None,
            Some(trigger) => {
                let (fault, op) = trigger
                    .split_once('@')
                    .ok_or_else(|| format!("fault plan {s:?}: expected <fault>@<op>"))?;
                let op = op
                    .parse::<u64>()
                    .map_err(|error| format!("fault plan {s:?}: bad op: {error}"))?;
                Some((fault.parse::<Fault>()?, op))
            }
        };
        let plan = FaultPlan { seed, trigger: trigger.map(|(fault, op)| (op, fault)) };
        debug_assert_eq!(plan.trigger.is_some(), trigger_part.is_some(), "a trigger is read whole");
        Ok(plan)
    }
}

/// SplitMix64 finalizer over `seed` and a stream id: cheap, stateless derivation of the
/// independent values a run needs (one per op, per crash point, ...) from the one seed.
pub(crate) fn mix(seed: u64, stream: u64) -> u64 {
    let mut z = seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_round_trips_through_its_printed_form() {
        for plan in [
            FaultPlan::none(7),
            FaultPlan::crash_at(u64::MAX, 3),
            FaultPlan::fault_at(1, 0, Fault::ShortWrite),
            FaultPlan::random(42, 17),
        ] {
            assert_eq!(plan.to_string().parse::<FaultPlan>(), Ok(plan));
        }
        assert!("seed=x".parse::<FaultPlan>().is_err());
        assert!("seed=1,boom@2".parse::<FaultPlan>().is_err());
    }

    #[test]
    fn random_plan_depends_only_on_the_seed() {
        assert_eq!(FaultPlan::random(9, 100), FaultPlan::random(9, 100));
        let distinct: std::collections::BTreeSet<_> =
            (0..64).map(|seed| FaultPlan::random(seed, 1000).trigger).collect();
        assert!(distinct.len() > 32, "seeds should spread over ops and faults");
    }
}
