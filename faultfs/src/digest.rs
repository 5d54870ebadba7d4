//! The digests that identify a simulated machine's state and its crash images in memory.
//!
//! Nothing here is written to disk or compared across runs: a digest only tells two machines
//! or images of one process apart, so that the same one is built or judged once (a harness
//! keys what it concluded on it). It is XXH3-128, not a cryptographic hash: the bytes hashed
//! are what the program under test wrote, which knows nothing of the hash and does not try to
//! collide it, and for `n` distinct inputs of such a hash the chance that any two collide is
//! about `n² / 2^129` (below 10^-22 for the 10^8 inputs a long sweep hashes). A collision would
//! let one image's judgement stand for another's; `--check-stand-ins` judges every image anyway
//! and compares. The store's own checksums (the request digest, the receipt index) are SHA-256
//! and are not these.

use std::io;

/// A 128-bit digest (XXH3-128, little-endian).
pub type Digest = [u8; 16];

/// How sets and maps keyed by digests hash them: a digest is already uniform, so a fast fixed
/// hash of it serves (a keyed, collision-resistant one protects against chosen keys, which a
/// digest of what the program under test wrote is not).
pub type DigestState = foldhash::fast::FixedState;

/// A set of digests.
pub type DigestSet = std::collections::HashSet<Digest, DigestState>;

/// A map keyed by digests.
pub type DigestMap<V> = std::collections::HashMap<Digest, V, DigestState>;

/// The digest of `bytes`.
pub fn digest(bytes: &[u8]) -> Digest {
    xxhash_rust::xxh3::xxh3_128(bytes).to_le_bytes()
}

/// A digest built from many pieces: they are gathered and hashed once at the end (most are a
/// few bytes, where hashing each as it comes costs more than copying it).
#[derive(Clone, Debug, Default)]
pub struct Hasher {
    bytes: Vec<u8>,
}

impl Hasher {
    /// A hasher that has seen nothing.
    pub fn new() -> Hasher {
        Hasher::default()
    }

    /// A hasher that has seen nothing, with room for `bytes` before it grows (a digest of a
    /// whole tree gathers kilobytes; growing there from nothing copies them several times).
    pub fn with_capacity(bytes: usize) -> Hasher {
        Hasher { bytes: Vec::with_capacity(bytes) }
    }

    /// Adds `bytes`.
    pub fn update(&mut self, bytes: impl AsRef<[u8]>) {
        self.bytes.extend_from_slice(bytes.as_ref());
    }

    /// Forgets everything added, keeping the room it took.
    pub fn clear(&mut self) {
        self.bytes.clear();
    }

    /// The digest of everything added, in order.
    pub fn finish(&self) -> Digest {
        digest(&self.bytes)
    }
}

impl io::Write for Hasher {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_of_pieces_is_the_digest_of_their_concatenation() {
        let mut hasher = Hasher::new();
        hasher.update(b"crash ");
        hasher.update("image");
        assert_eq!(hasher.finish(), digest(b"crash image"));
        assert_ne!(digest(b"crash image"), digest(b"crash imagf"));
        assert_ne!(digest(b""), digest(b"\0"));
    }
}
