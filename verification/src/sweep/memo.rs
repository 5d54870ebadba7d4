//! What the sweep's workers remember of the judgements they ran, shared between them.
//!
//! A judgement kept here is a deterministic program of its key (a digest of everything it
//! depends on: see `point::judge_image_to_end` and `point::judge_to_end`), so which worker ran
//! it first, and on which crash point, does not matter: any worker may reuse it. Neighbouring
//! crash points share most of their images and recovered machines, and the workers take
//! neighbouring points at once, so a memo per worker would miss most of what the other one
//! just judged. Nothing here is written to disk; the sweep's report does not depend on it
//! beyond its `reused` and `shared` counts.

use std::sync::{Arc, Mutex, PoisonError};

use faultfs::{Digest, DigestMap};

/// How many shards a memo's entries are spread over, by the first byte of their key: enough
/// that workers rarely wait for one another.
const SHARDS: usize = 16;

/// Entries by a digest, at most `max` of them; past it, a shard forgets all of its
/// own and starts over (what was forgotten is judged again, at the cost of the time only).
pub(crate) struct Memo<V> {
    shards: [Mutex<DigestMap<Arc<V>>>; SHARDS],
    max: usize,
}

impl<V> Memo<V> {
    /// An empty memo keeping at most about `max` entries.
    pub(crate) fn new(max: usize) -> Memo<V> {
        assert!(max >= SHARDS, "each shard keeps at least one entry");
        Memo { shards: std::array::from_fn(|_| Mutex::default()), max }
    }

    /// What is kept under `key`, if anything.
    pub(crate) fn get(&self, key: &Digest) -> Option<Arc<V>> {
        let shard = self.shard(key).lock().unwrap_or_else(PoisonError::into_inner);
        shard.get(key).cloned()
    }

    /// Keeps `value` under `key` (the first one kept under a key stays: a later one is the
    /// same judgement run again, which the caller has compared).
    pub(crate) fn insert(&self, key: Digest, value: Arc<V>) {
        let mut shard = self.shard(&key).lock().unwrap_or_else(PoisonError::into_inner);
        if shard.len() >= self.max / SHARDS {
            shard.clear();
        }
        shard.entry(key).or_insert(value);
        debug_assert!(shard.len() <= self.max / SHARDS, "a shard keeps at most its share");
    }

    fn shard(&self, key: &Digest) -> &Mutex<DigestMap<Arc<V>>> {
        &self.shards[usize::from(key[0]) % SHARDS]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memo_keeps_the_first_value_and_forgets_a_full_shard() {
        let memo = Memo::new(SHARDS * 2);
        let key = |n: u8| {
            let mut key = [0; 16];
            key[1] = n;
            key
        };
        memo.insert(key(1), Arc::new("first"));
        memo.insert(key(1), Arc::new("again"));
        assert_eq!(memo.get(&key(1)).as_deref(), Some(&"first"));
        memo.insert(key(2), Arc::new("second"));
        // The shard of keys starting with 0 holds two; a third clears it first.
        memo.insert(key(3), Arc::new("third"));
        assert_eq!(memo.get(&key(1)), None);
        assert_eq!(memo.get(&key(3)).as_deref(), Some(&"third"));
    }
}
