//! Post-crash images: what a [`SimFs`](super::SimFs) may look like after the process dies.
//!
//! A *process kill* loses only user-space state: the image is the volatile view, everything the
//! kernel accepted. A *power loss* keeps the durable state plus some subset of the pending
//! changes. The pending changes are cut into *pieces*:
//!
//! - a data write becomes one piece per 512-byte chunk it touches, carrying the chunk's content
//!   right after that write (so a chunk written twice can survive as old, first or second);
//! - a change of length (an extension or a truncation) is a piece of its own, so an extension
//!   can survive without its data and read back as zeros;
//! - the name changes of one op (create, unlink, or both sides of a rename) are one piece.
//!
//! Pieces survive independently (rule R4). Applying a chosen subset in issue order to the durable
//! state gives an image. The image of every subset is produced by groups: the pieces of one file,
//! and the name changes of directories a rename links, change disjoint parts of an image, so
//! each group's subsets are enumerated on their own (up to 16 pieces), deduplicated, and the
//! images are the product of the groups' outcomes (up to [`EXHAUSTIVE_IMAGES_MAX`]). A file no
//! image can name contributes nothing, nor (on the zero-tail medium) does a chunk of zeros past
//! a file's durable end that no kept piece of the same chunk precedes: applying it or not gives
//! the same bytes (see `indistinguishable`). Every subset enumerated, the torn family below is
//! added too (cuts inside a chunk, beyond the whole-sector pieces). Beyond those bounds the
//! images are structured families plus seeded samples:
//!
//! - prefix: the first `i` pending changes, for every `i`;
//! - single omission: everything except one piece, for every piece;
//! - torn: every change before a write, then that write cut at each 512- and 4096-byte boundary
//!   inside it and at a few byte positions (first, middle, last and seeded ones), its extension
//!   kept (so the torn end reads as zeros or a partial line);
//! - sampled: seeded random subsets.
//!
//! Images are deduplicated by a digest (`crate::digest`) over their paths, kinds and contents.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, OnceLock};

// The builder's sets and maps are keyed by what the simulator made (choices, entries, digests):
// a fast fixed hash serves, as for digests (`crate::DigestState`).
use foldhash::fast::FixedState;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::digest::{Digest, Hasher, digest};

use super::path::child_path;
use super::{
    DataChange, FileNode, Ino, Node, Pending, ROOT_INO, State, apply_change, chunk_bytes, span,
    span_mut, to_usize,
};
use crate::plan::mix;

/// Up to this many pending pieces, a power loss yields every subset (2^12 = 4096 images before
/// deduplication) whatever their grouping.
pub const EXHAUSTIVE_PIECES_MAX: usize = 12;

/// Up to this many combinations of the pieces' groups' outcomes, a power loss yields the image
/// of every subset of its pending pieces, however many pieces there are.
pub const EXHAUSTIVE_IMAGES_MAX: usize = 1 << 18;

/// The most versions of one block a power loss sorts into the classes its reader tells apart
/// (see [`Builder::block_outcomes`]); beyond them, the file's pieces are enumerated as any
/// file's are (every subset, or sampled past the group bound).
const BLOCK_VERSIONS_MAX: usize = 1 << 16;

/// Cap on the cut positions tried per write in one torn family, so one huge write cannot
/// dominate a sweep.
const TORN_CUTS_PER_FAMILY_MAX: usize = 64;

/// Seeded byte-granularity cuts per write, beyond first, middle and last.
const TORN_BYTE_CUTS_SEEDED: usize = 2;

/// How the process died.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CrashMode {
    /// The process was killed: everything the kernel accepted survives.
    ProcessKill,
    /// The machine lost power: only durable state and some pending changes survive.
    PowerLoss,
}

impl CrashMode {
    /// The mode's short name (`kill`, `power`).
    pub const fn name(self) -> &'static str {
        match self {
            CrashMode::ProcessKill => "kill",
            CrashMode::PowerLoss => "power",
        }
    }
}

impl fmt::Display for CrashMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// One node of an image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageNode {
    /// A directory.
    Dir,
    /// A file and its bytes.
    File(Arc<Vec<u8>>),
    /// A symbolic link and the absolute path it names.
    Symlink(String),
    /// A special file (a FIFO): never opened by the store, only refused.
    Special,
}

/// A whole filesystem after a crash: every reachable path and what it holds. Two images are
/// equal when they hold the same paths and bytes (whichever boot they lead to).
#[derive(Clone)]
pub struct Image {
    nodes: BTreeMap<String, ImageNode>,
    /// The digest of each node's content (a file's bytes, a link's target; zeros for the
    /// rest), in the order of `nodes`.
    contents: Vec<Digest>,
    hash: Digest,
    /// A digest of the paths, kinds, file lengths and link targets, in path order: the part of
    /// [`Image::digest_within`] that is the same whatever was read, worked out at its first
    /// call (an image is compared under several sets of files read).
    shape: OnceLock<Digest>,
    /// The boot a machine rebuilt from this image is (one more than the crashed machine's).
    pub(crate) boot: u64,
    /// The medium of the machine that crashed, which the rebuilt one keeps.
    pub(crate) media: Media,
    /// The checked-block format declared on the machine that crashed, which the rebuilt one
    /// keeps.
    pub(crate) checked_blocks: Option<CheckedBlocks>,
}

/// A file format whose reader checks every block whole, declared to a [`super::SimFs`] (see
/// [`super::SimFs::set_checked_blocks`]) so that a power loss keeps one of the versions of a
/// block the reader refuses alike.
#[derive(Clone, Copy, Debug)]
pub struct CheckedBlocks {
    /// The names of the files in the format (the published name and its staging name).
    pub names: &'static [&'static str],
    /// The size of a block (a whole number of chunks); block `i` starts at `i` times it.
    pub block_bytes: u64,
    /// Whether the reader accepts `bytes`, a file's bytes in block `i` (fewer than a block at
    /// the file's end), as block `i`.
    pub accepts: fn(u64, &[u8]) -> bool,
}

impl PartialEq for Image {
    fn eq(&self, other: &Image) -> bool {
        let same_hash = self.hash == other.hash;
        debug_assert!(
            !same_hash || self.nodes == other.nodes,
            "images with equal tree hashes hold the same tree"
        );
        same_hash && self.nodes == other.nodes
    }
}

impl Eq for Image {}

impl Image {
    /// Every path (`/a/b`, relative to the filesystem root), sorted, parents before children.
    pub fn nodes(&self) -> &BTreeMap<String, ImageNode> {
        debug_assert_eq!(self.contents.len(), self.nodes.len(), "one content hash per node");
        &self.nodes
    }

    /// The bytes of the file at `path`, if it is a file in this image.
    pub fn file(&self, path: &str) -> Option<&[u8]> {
        debug_assert!(path.starts_with('/'), "an image's paths are absolute");
        match self.nodes.get(path) {
            Some(ImageNode::File(bytes)) => Some(bytes.as_slice()),
            _ => None,
        }
    }

    /// Whether `path` exists (as a file or directory) in this image.
    pub fn contains(&self, path: &str) -> bool {
        debug_assert!(path.starts_with('/'), "an image's paths are absolute");
        self.nodes.contains_key(path)
    }

    /// The content hash that identifies this image.
    pub fn hash(&self) -> Digest {
        self.hash
    }

    /// The boot a machine rebuilt from this image is (one more than the crashed machine's).
    pub fn boot(&self) -> u64 {
        assert!(self.boot > 0, "an image is read by a machine booted after the crash");
        self.boot
    }

    /// The medium of the machine that crashed, which a machine rebuilt from this image keeps.
    pub fn media(&self) -> Media {
        self.media
    }

    /// The content hash as lowercase hex.
    pub fn hash_hex(&self) -> String {
        let hex = hex::encode(self.hash);
        debug_assert_eq!(hex.len(), 32, "an image hash is 32 hex digits");
        hex
    }

    /// A digest of what a process on a machine rebuilt from this image can observe without
    /// reading the files outside `read`: every path, its kind, a file's length, a link's target,
    /// the boot and the medium, and the bytes of the files in `read` only. Two images with the
    /// same digest under the files one of them had read (see [`SimFs::observed`]) lead the same
    /// deterministic program through the same steps: it sees the same thing at every step.
    ///
    /// [`SimFs::observed`]: super::SimFs::observed
    pub fn digest_within(&self, read: &BTreeSet<String>) -> Digest {
        debug_assert_eq!(self.contents.len(), self.nodes.len(), "one content hash per node");
        let mut hasher = Hasher::with_capacity(64 + 24 * read.len());
        hasher.update(self.boot.to_le_bytes());
        hasher.update([u8::from(self.media == Media::StaleTails)]);
        hasher.update(self.shape.get_or_init(|| self.shape_digest()));
        // Both are in path order: the files read are found walking beside the nodes, each
        // named by its position among them (the shape fixes which path that is).
        let mut read = read.iter().peekable();
        for (at, ((path, node), content)) in self.nodes.iter().zip(&self.contents).enumerate() {
            if read.peek().is_none() {
                break;
            }
            while read.next_if(|read| *read < path).is_some() {}
            if read.next_if_eq(&path).is_some() && matches!(node, ImageNode::File(_)) {
                hasher.update((at as u64).to_le_bytes());
                hasher.update(content);
            }
        }
        hasher.finish()
    }

    /// See [`Image::shape`]: each path (length first), its kind, a file's length and a link's
    /// target's hash.
    fn shape_digest(&self) -> Digest {
        let mut hasher = Hasher::with_capacity(4096);
        for ((path, node), content) in self.nodes.iter().zip(&self.contents) {
            hasher.update((path.len() as u64).to_le_bytes());
            hasher.update(path.as_bytes());
            match node {
                ImageNode::Dir => hasher.update([0]),
                ImageNode::File(bytes) => {
                    hasher.update([1]);
                    hasher.update((bytes.len() as u64).to_le_bytes());
                }
                ImageNode::Symlink(_) => {
                    hasher.update([2]);
                    hasher.update(content);
                }
                ImageNode::Special => hasher.update([3]),
            }
        }
        hasher.finish()
    }
}

impl fmt::Debug for Image {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_assert!(
            self.nodes.keys().all(|path| path.starts_with('/')),
            "an image's paths are absolute"
        );
        let mut list = f.debug_map();
        for (path, node) in &self.nodes {
            match node {
                ImageNode::Dir => list.entry(path, &"<dir>"),
                ImageNode::File(bytes) => list.entry(path, &String::from_utf8_lossy(bytes)),
                ImageNode::Symlink(target) => list.entry(path, &format!("-> {target}")),
                ImageNode::Special => list.entry(path, &"<special>"),
            };
        }
        list.finish()
    }
}

/// The images of one crash point.
#[derive(Clone, Debug)]
pub struct CrashImages {
    /// How the process died.
    pub mode: CrashMode,
    /// Distinct images, in generation order.
    pub images: Vec<Image>,
    /// Images generated before deduplication.
    pub generated: usize,
    /// Whether every subset of the pending pieces was produced (for a file in a
    /// [`CheckedBlocks`] format: an image of every class of them its reader tells apart).
    pub exhaustive: bool,
    /// Pending pieces at the crash point (those left out as indistinguishable not counted).
    pub pending_pieces: usize,
    /// Pending chunk pieces left out because applying them or not gives the same image (all
    /// zeros past the file's durable end, on a zero-tail medium): each halves the subsets an
    /// exhaustive enumeration needs, and loses none of the images.
    pub reduced_pieces: usize,
    /// Groups of pieces (each a file's, in a [`CheckedBlocks`] format) enumerated block by
    /// block, one outcome kept per class of a block the reader tells apart.
    pub checked_groups: usize,
}

/// What survives of one piece in one image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Choice {
    Skip,
    Apply,
    /// Only the bytes this piece's write put before this file offset survive.
    Upto(u64),
}

#[derive(Clone, Debug)]
enum PieceKind {
    Chunk { ino: Ino, start: u64, snapshot: Vec<u8>, written: (u64, u64) },
    Size { ino: Ino, len: u64 },
    Names { pending: usize, changes: Vec<Ino> },
}

#[derive(Clone, Debug)]
struct Piece {
    /// Index of the pending change this piece comes from.
    op: usize,
    kind: PieceKind,
}

/// The pending changes of a state, cut into pieces.
#[derive(Debug)]
pub(crate) struct Pieces {
    list: Vec<Piece>,
    ops: usize,
    /// Chunk pieces left out because no image can tell them apart (see `indistinguishable`).
    reduced: usize,
    /// The inodes an image can hold (see [`held`]).
    held: BTreeSet<Ino>,
    /// The pending writes a power loss may tear (their numbers among the pending changes): those
    /// to an inode an image can hold, outside the ephemeral directories.
    torn: Vec<usize>,
}

impl Pieces {
    pub(crate) fn collect(state: &State) -> Pieces {
        let mut list = Vec::new();
        let mut reduced = 0;
        // The chunks (file, start) some kept piece writes: a later all-zero piece there is not
        // a no-op, since without it the earlier piece's bytes could show.
        let mut kept: BTreeSet<(Ino, u64)> = BTreeSet::new();
        let mut replay: BTreeMap<Ino, Vec<u8>> = BTreeMap::new();
        let (ephemeral_dirs, ephemeral_files) = ephemeral(state);
        let held = held(state, &ephemeral_dirs);
        let mut torn = Vec::new();
        for (op, pending) in state.pending.iter().enumerate() {
            match pending {
                Pending::Names { changes }
                    if changes.iter().all(|change| ephemeral_dirs.contains(&change.dir)) => {}
                Pending::Data { ino, .. }
                    if ephemeral_files.contains(ino) || !held.contains(ino) => {}
                Pending::Names { changes } => {
                    let dirs = changes.iter().map(|change| change.dir).collect();
                    list.push(Piece { op, kind: PieceKind::Names { pending: op, changes: dirs } })
                }
                Pending::Data { ino, change } => {
                    if let DataChange::Write { .. } = change {
                        torn.push(op);
                    }
                    let buf = replay.entry(*ino).or_insert_with(|| match &state.inode(*ino).node {
                        Node::File(file) => file.durable.as_ref().clone(),
                        Node::Dir(_) | Node::Symlink(_) | Node::Special => {
                            unreachable!("data changes are only recorded for files")
                        }
                    });
                    let len_before = buf.len() as u64;
                    apply_change(buf, change);
                    let len_after = buf.len() as u64;
                    let (touched, written) = match change {
                        DataChange::Write { offset, bytes } => {
                            let end = offset + bytes.len() as u64;
                            ((*offset).min(len_before)..end, (*offset, end))
                        }
                        DataChange::SetLen { len } => {
                            (len_before.min(*len)..len_before.max(*len), (len_before, len_before))
                        }
                    };
                    reduced += chunk_pieces(
                        state,
                        (op, *ino),
                        buf,
                        touched,
                        written,
                        &mut kept,
                        &mut list,
                    );
                    if len_after != len_before {
                        list.push(Piece {
                            op,
                            kind: PieceKind::Size { ino: *ino, len: len_after },
                        });
                    }
                }
            }
        }
        assert!(
            list.is_sorted_by_key(|piece: &Piece| piece.op),
            "pieces are in the issue order of their changes"
        );
        assert!(list.iter().all(|piece| piece.op < state.pending.len()), "a piece is of a change");
        Pieces { list, ops: state.pending.len(), reduced, held, torn }
    }

    pub(crate) fn len(&self) -> usize {
        debug_assert!(self.list.is_empty() || self.ops > 0, "pieces come of pending changes");
        self.list.len()
    }
}

/// The chunk pieces of the data change `op` to file `ino` that touched the byte range `touched`
/// (writing `written`), each holding its chunk of `buf` (the file right after the change),
/// pushed onto `list`; returns how many were left out as changing no image (see
/// [`indistinguishable`]). `kept` holds the chunks some kept piece writes.
fn chunk_pieces(
    state: &State,
    (op, ino): (usize, Ino),
    buf: &[u8],
    touched: std::ops::Range<u64>,
    written: (u64, u64),
    kept: &mut BTreeSet<(Ino, u64)>,
    list: &mut Vec<Piece>,
) -> usize {
    let chunk = chunk_bytes();
    let len_after = buf.len() as u64;
    let mut reduced = 0;
    if touched.is_empty() {
        return 0;
    }
    let first = touched.start / chunk;
    let last = touched.end.div_ceil(chunk);
    let listed = list.len();
    for index in first..last {
        let start = index * chunk;
        let snapshot_end = (start + chunk).min(len_after);
        let snapshot = if start < snapshot_end {
            span(buf, to_usize(start), to_usize(snapshot_end)).to_vec()
        } else {
            Vec::new()
        };
        let written = (written.0.max(start), written.1.min(start + chunk));
        debug_assert!(snapshot.len() as u64 <= chunk, "a chunk's snapshot holds one chunk at most");
        if indistinguishable(state, ino, start, &snapshot, kept) {
            reduced += 1;
            continue;
        }
        kept.insert((ino, start));
        list.push(Piece { op, kind: PieceKind::Chunk { ino, start, snapshot, written } });
    }
    assert_eq!(
        (list.len() - listed) as u64 + reduced as u64,
        last - first,
        "each chunk a change touched is a piece or left out as changing no image"
    );
    reduced
}

/// Whether a chunk piece of file `ino` at `start` with content `snapshot` (the chunk right
/// after its write) changes no image, so that leaving it out of the enumeration halves the
/// subsets without losing one image. It changes none when all of these hold: the medium shows
/// zeros where a file grew without its data (on a stale medium the piece's zeros cover stale
/// bytes); the chunk lies at or past the file's durable end (there, with no piece of its own,
/// every image reads zeros or ends before it); no kept piece wrote the same chunk earlier
/// (skipping this one could show that piece's bytes); and the piece holds only zeros. A file's length is its size pieces',
/// never a chunk's, so applying the piece or not gives the same bytes. The reduction can be
/// switched off ([`super::SimFs::set_zero_chunk_reduction`]) to compare both enumerations.
fn indistinguishable(
    state: &State,
    ino: Ino,
    start: u64,
    snapshot: &[u8],
    kept: &BTreeSet<(Ino, u64)>,
) -> bool {
    debug_assert_eq!(start % chunk_bytes(), 0, "a chunk starts on a chunk boundary");
    let Node::File(file) = &state.inode(ino).node else { return false };
    state.reduce_zero_chunks
        && state.media == Media::ZeroTails
        && start >= file.durable.len() as u64
        && !kept.contains(&(ino, start))
        && snapshot.iter().all(|&byte| byte == 0)
}

/// The inodes an image of `state` can hold: those named durably from the root, and those a
/// pending name change (outside the ephemeral directories `ephemeral_dirs`) binds, with what
/// they name durably. A change to any other inode (one unlinked, as a released lock file) shows
/// in no image, so it is no piece either.
fn held(state: &State, ephemeral_dirs: &BTreeSet<Ino>) -> BTreeSet<Ino> {
    let mut held = BTreeSet::new();
    let mut open: Vec<Ino> = vec![ROOT_INO];
    for pending in &state.pending {
        let Pending::Names { changes } = pending else { continue };
        if changes.iter().all(|change| ephemeral_dirs.contains(&change.dir)) {
            continue;
        }
        open.extend(changes.iter().filter_map(|change| change.target));
    }
    while let Some(ino) = open.pop() {
        if !held.insert(ino) {
            continue;
        }
        if let Node::Dir(dir) = &state.inode(ino).node {
            open.extend(dir.durable.values());
        }
    }
    debug_assert!(held.contains(&ROOT_INO), "an image holds the root");
    held
}

/// The directories set ephemeral (see `SimFs::set_ephemeral`) and every file named in them,
/// now or durably: their changes are never pieces, so they never survive a power loss unless
/// they were already durable.
fn ephemeral(state: &State) -> (BTreeSet<Ino>, BTreeSet<Ino>) {
    let mut dirs = BTreeSet::new();
    let mut files = BTreeSet::new();
    for path in &state.ephemeral {
        let components: Vec<&str> = path.iter().map(String::as_str).collect();
        let Some(ino) = state.lookup_components(&components) else { continue };
        let Node::Dir(dir) = &state.inode(ino).node else { continue };
        dirs.insert(ino);
        files.extend(dir.volatile.values().chain(dir.durable.values()).copied());
    }
    assert!(dirs.len() <= state.ephemeral.len(), "each ephemeral path names one directory at most");
    (dirs, files)
}

/// Builds images of one state, caching the hashes of files that no piece touches and each
/// file's bytes per choice of its own pieces (most candidates of a crash differ in one file).
struct Builder<'a, 'k> {
    state: &'a State,
    pieces: &'a Pieces,
    /// The hash of each file's durable bytes, by inode number, once worked out.
    durable_hashes: Vec<Option<Digest>>,
    /// The data pieces (chunks and lengths) of each file, in issue order.
    by_file: BTreeMap<Ino, Vec<usize>>,
    /// A file's bytes and their hash, by the file and the choices of its pieces.
    outcomes: HashMap<(Ino, Vec<Choice>), FileBytes, FixedState>,
    seen: crate::DigestSet,
    /// What [`tree_hash`] gathers, kept for the next image (its room grows once).
    tree_hasher: Hasher,
    /// Whether the caller knows the distinct image with this hash already (then it is not
    /// built); `None`: every image is built.
    known: Option<&'k mut dyn FnMut(&Digest) -> bool>,
    /// The images built, in generation order.
    images: Vec<Image>,
    /// The position of each image built among the distinct ones (`seen`), in generation order.
    positions: Vec<usize>,
    generated: usize,
    /// Combinations of groups' outcomes counted as generated but left unhashed: they repeat an
    /// image generated before ([`Unseen`]).
    unhashed: usize,
    /// Whether those are left unhashed (off only to compare both enumerations).
    leave_unseen: bool,
    /// Groups enumerated block by block (see [`Builder::block_outcomes`]).
    checked_groups: usize,
    /// The files in the declared [`CheckedBlocks`] format: those a name in it links, now, durably
    /// or by a pending change.
    checked_files: BTreeSet<Ino>,
}

/// The images of a crash in `mode` of `state`, those `known` (if given) knows already left
/// unbuilt: see [`Sifted`].
pub(crate) fn sift_images(
    state: &State,
    mode: CrashMode,
    known: Option<&mut dyn FnMut(&Digest) -> bool>,
) -> Sifted {
    let one = |images: Vec<Image>| {
        assert_eq!(images.len(), 1, "a process kill leaves one machine");
        let crash = CrashImages {
            mode,
            images,
            generated: 1,
            exhaustive: true,
            pending_pieces: 0,
            reduced_pieces: 0,
            checked_groups: 0,
        };
        Sifted { crash, distinct: 1, positions: vec![0] }
    };
    match mode {
        CrashMode::ProcessKill if !state.rules.kill_keeps_volatile => {
            let pieces = Pieces::collect(state);
            let mut builder = Builder::new(state, &pieces);
            builder.add(&vec![Choice::Skip; pieces.len()]);
            one(builder.images)
        }
        CrashMode::ProcessKill => one(vec![volatile_image(state)]),
        CrashMode::PowerLoss => {
            let pieces = Pieces::collect(state);
            let mut builder = Builder::new(state, &pieces);
            builder.known = known;
            let count = pieces.len();
            let exhaustive = if !state.rules.pending_unordered {
                builder.prefixes();
                true
            } else if builder.every_subset() {
                builder.torn();
                true
            } else {
                builder.families();
                false
            };
            assert!(
                !builder.seen.is_empty() && builder.seen.len() <= builder.generated,
                "a power loss leaves at least one machine, each a distinct generated one"
            );
            assert_eq!(builder.positions.len(), builder.images.len(), "a position per image built");
            debug_assert!(
                builder.positions.is_sorted_by(|a, b| a < b)
                    && builder.positions.last().is_none_or(|&last| last < builder.seen.len()),
                "images built are distinct ones, in generation order"
            );
            let crash = CrashImages {
                mode,
                images: builder.images,
                generated: builder.generated,
                exhaustive,
                pending_pieces: count,
                reduced_pieces: pieces.reduced,
                checked_groups: builder.checked_groups,
            };
            Sifted { crash, distinct: builder.seen.len(), positions: builder.positions }
        }
    }
}

/// The images of a crash, sifted by what the caller knew of them (`SimFs::crash_sifted`): every
/// distinct image is generated and hashed as [`CrashImages`] lists them, but those the caller
/// knows by their hash are not built.
#[derive(Clone, Debug)]
pub struct Sifted {
    /// The crash, whose `images` are only those the caller did not know, in generation order.
    pub crash: CrashImages,
    /// How many distinct images the crash leaves, known or not: as many as
    /// [`CrashImages::images`] holds when every one is built.
    pub distinct: usize,
    /// The position of each image built among the `distinct` ones: its index in
    /// [`CrashImages::images`] when every one is built.
    pub positions: Vec<usize>,
}

impl From<CrashImages> for Sifted {
    /// A crash whose every image is built, sifted by a caller that knew none of them.
    fn from(crash: CrashImages) -> Sifted {
        let distinct = crash.images.len();
        Sifted { crash, distinct, positions: (0..distinct).collect() }
    }
}

/// A digest of everything a power loss's images depend on, as [`sift_images`] builds them:
/// the durable state (kind, bytes, entries or target) of every inode an image can hold (named
/// durably from the root, or bound by a pending name change), the pieces the
/// pending changes are cut into ([`Pieces::collect`]: what they write, which names they bind,
/// in issue order) and the settings (rules, medium, boot, checked-block format, the
/// enumeration's bounds, the plan's seed). What no image holds is left out: what is visible
/// but not durable only shows through the pieces; a change that never survives (in an
/// ephemeral directory) is no piece; modification times are in no image. Where the pending
/// changes stand in the machine's history (the op count, each change's number) is left out
/// too, unless the images depend on it: the cuts of a torn write to an inode an image can
/// hold are seeded with both, and a power loss that keeps a prefix of the changes cuts at their
/// numbers.
///
/// So two machines with equal digests whose power losses are enumerated exhaustively leave
/// the same images in the same order (a sampled enumeration also depends on the op count).
pub(crate) fn power_loss_digest(state: &State) -> Digest {
    let mut hasher = Hasher::new();
    let word = |hasher: &mut Hasher, word: u64| hasher.update(word.to_le_bytes());
    let name = |hasher: &mut Hasher, name: &str| {
        hasher.update((name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
    };
    let pieces = Pieces::collect(state);
    for &ino in &pieces.held {
        word(&mut hasher, ino);
        match &state.inode(ino).node {
            Node::File(file) => {
                hasher.update(b"f");
                hasher.update(digest(file.durable.as_slice()));
            }
            Node::Dir(dir) => {
                hasher.update(b"d");
                word(&mut hasher, dir.durable.len() as u64);
                for (entry, child) in &dir.durable {
                    name(&mut hasher, entry);
                    word(&mut hasher, *child);
                }
            }
            Node::Symlink(target) => {
                hasher.update(b"l");
                name(&mut hasher, target);
            }
            Node::Special => hasher.update(b"s"),
        }
    }
    let torn: Vec<(usize, Ino, u64, usize)> = (pieces.torn.iter())
        .map(|&op| match state.pending.get(op) {
            Some(Pending::Data { ino, change: DataChange::Write { offset, bytes } }) => {
                (op, *ino, *offset, bytes.len())
            }
            _ => unreachable!("the writes a power loss may tear are writes"),
        })
        .collect();
    // Where the changes stand in the history matters to torn cuts and to prefixes alone.
    let numbered = !torn.is_empty() || !state.rules.pending_unordered;
    if numbered {
        hasher.update(format!("{:?} {} {torn:?}", state.op_count, pieces.ops));
    }
    word(&mut hasher, pieces.list.len() as u64);
    let (mut rank, mut previous) = (0u64, None);
    for piece in &pieces.list {
        // Pieces of one change share its rank among the changes cut into pieces.
        if previous.is_some_and(|op| op != piece.op) {
            rank += 1;
        }
        previous = Some(piece.op);
        word(&mut hasher, if numbered { piece.op as u64 } else { rank });
        match &piece.kind {
            PieceKind::Chunk { ino, start, snapshot, written } => {
                hasher.update(b"c");
                for value in [*ino, *start, written.0, written.1] {
                    word(&mut hasher, value);
                }
                hasher.update(digest(snapshot));
            }
            PieceKind::Size { ino, len } => {
                hasher.update(b"t");
                word(&mut hasher, *ino);
                word(&mut hasher, *len);
            }
            PieceKind::Names { pending, .. } => {
                let Some(Pending::Names { changes }) = state.pending.get(*pending) else {
                    unreachable!("a names piece is of a names change")
                };
                hasher.update(b"n");
                word(&mut hasher, changes.len() as u64);
                for change in changes {
                    word(&mut hasher, change.dir);
                    name(&mut hasher, &change.name);
                    word(&mut hasher, change.target.map_or(u64::MAX, |target| target));
                }
            }
        }
    }
    let checked = state
        .checked_blocks
        .map(|checked| (checked.names, checked.block_bytes, checked.accepts as usize));
    let settings = (
        state.rules,
        state.media,
        state.boot,
        checked,
        state.group_pieces_max,
        state.sampled_images,
        state.reduce_zero_chunks,
        state.plan.seed,
        pieces.reduced,
    );
    hasher.update(format!("{settings:?}"));
    hasher.finish()
}

impl<'a> Builder<'a, '_> {
    fn new(state: &'a State, pieces: &'a Pieces) -> Self {
        let mut by_file: BTreeMap<Ino, Vec<usize>> = BTreeMap::new();
        for (index, piece) in pieces.list.iter().enumerate() {
            if let PieceKind::Chunk { ino, .. } | PieceKind::Size { ino, .. } = piece.kind {
                by_file.entry(ino).or_default().push(index);
            }
        }
        debug_assert!(
            by_file.values().all(|indices| indices.is_sorted()),
            "a file's pieces are listed in issue order"
        );
        Builder {
            state,
            pieces,
            durable_hashes: vec![None; usize::try_from(state.next_ino).expect("inodes fit memory")],
            by_file,
            outcomes: HashMap::default(),
            seen: crate::DigestSet::default(),
            tree_hasher: Hasher::new(),
            known: None,
            images: Vec::new(),
            positions: Vec::new(),
            generated: 0,
            unhashed: 0,
            leave_unseen: true,
            checked_groups: 0,
            checked_files: checked_files(state),
        }
    }

    /// The first `cut` pending changes, whole, for every `cut`.
    fn prefixes(&mut self) {
        let generated = self.generated;
        for cut in 0..=self.pieces.ops {
            let choices: Vec<Choice> = self
                .pieces
                .list
                .iter()
                .map(|piece| if piece.op < cut { Choice::Apply } else { Choice::Skip })
                .collect();
            self.add(&choices);
        }
        assert_eq!(self.generated - generated, self.pieces.ops + 1, "a prefix per cut, both ends");
    }

    fn families(&mut self) {
        let count = self.pieces.len();
        let generated = self.generated;
        self.prefixes();
        // Single omission.
        for omitted in 0..count {
            let choices: Vec<Choice> = (0..count)
                .map(|i| if i == omitted { Choice::Skip } else { Choice::Apply })
                .collect();
            self.add(&choices);
        }
        self.torn();
        let seed = mix(self.state.plan.seed, self.state.op_count);
        // Seeded samples.
        let mut rng = ChaCha8Rng::seed_from_u64(mix(seed, 0x5A3F));
        for _ in 0..self.state.sampled_images {
            let choices: Vec<Choice> = (0..count)
                .map(|_| if rng.random::<bool>() { Choice::Apply } else { Choice::Skip })
                .collect();
            self.add(&choices);
        }
        assert!(
            self.generated - generated >= self.pieces.ops + 1 + count + self.state.sampled_images,
            "the families hold every prefix, every single omission and every sample"
        );
    }

    /// Torn writes: every change before a write, then that write cut inside it.
    fn torn(&mut self) {
        let list = &self.pieces.list;
        let seed = mix(self.state.plan.seed, self.state.op_count);
        let generated = self.generated;
        let mut cuts_tried = 0;
        for &op in &self.pieces.torn {
            let Some(Pending::Data { change: DataChange::Write { offset, bytes }, .. }) =
                self.state.pending.get(op)
            else {
                unreachable!("the writes a power loss may tear are writes")
            };
            let (lo, hi) = (*offset, *offset + bytes.len() as u64);
            for cut in torn_cuts(lo, hi, mix(seed, op as u64)) {
                cuts_tried += 1;
                let choices: Vec<Choice> = list
                    .iter()
                    .map(|piece| match (&piece.kind, piece.op.cmp(&op)) {
                        (_, std::cmp::Ordering::Less) => Choice::Apply,
                        (_, std::cmp::Ordering::Greater) => Choice::Skip,
                        (PieceKind::Chunk { start, .. }, _) if start + chunk_bytes() <= cut => {
                            Choice::Apply
                        }
                        (PieceKind::Chunk { start, .. }, _) if *start >= cut => Choice::Skip,
                        (PieceKind::Chunk { .. }, _) => Choice::Upto(cut),
                        (PieceKind::Size { .. } | PieceKind::Names { .. }, _) => Choice::Apply,
                    })
                    .collect();
                self.add(&choices);
            }
        }
        assert_eq!(self.generated - generated, cuts_tried, "one candidate per torn cut");
    }

    fn add(&mut self, choices: &[Choice]) {
        assert_eq!(choices.len(), self.pieces.len(), "a choice per piece");
        self.generated += 1;
        self.materialize(choices);
    }

    /// Applies the chosen pieces, in issue order, to the durable state: the image, unless an
    /// equal one was made before (see [`Builder::assemble`]). Each file's bytes depend only on
    /// the choices of its own pieces, so they are built (and hashed) once per distinct choice
    /// of them.
    fn materialize(&mut self, choices: &[Choice]) {
        let state = self.state;
        let entries = Changed::names(state, self.pieces, choices);
        let mut files = BTreeMap::new();
        for (&ino, indices) in &self.by_file {
            let own: Vec<Choice> = indices
                .iter()
                .map(|&index| *choices.get(index).expect("a choice per piece"))
                .collect();
            if own.iter().all(|choice| *choice == Choice::Skip) {
                continue;
            }
            let outcome = self.outcomes.entry((ino, own)).or_insert_with_key(|(_, own)| {
                let (mut buf, mut len) = durable_content(state, ino);
                let mut covered = Vec::new();
                for (&index, &choice) in indices.iter().zip(own) {
                    if choice == Choice::Skip {
                        continue;
                    }
                    apply_data(
                        &self.pieces.list.get(index).expect("a file's pieces are pieces").kind,
                        choice,
                        &mut buf,
                        &mut len,
                        &mut covered,
                    );
                }
                let bytes = final_bytes(state, ino, buf, len, Some(&covered));
                let hash: Digest = digest(&bytes);
                (Arc::new(bytes), hash)
            });
            files.insert(ino, outcome.clone());
        }
        debug_assert!(files.len() <= self.by_file.len(), "only files with pieces change");
        let mut changes = Changes::new(state);
        changes.set(&entries, &files);
        self.assemble(&changes);
    }

    /// Every image of every subset of the pieces, when there are few enough of them
    /// ([`EXHAUSTIVE_IMAGES_MAX`]); `false` (nothing added) otherwise.
    ///
    /// The pieces fall into independent groups: those of one file (its chunks and length
    /// changes), and the name changes of directories linked by a rename. What an image holds
    /// of a group's files and directories depends only on which of that group's pieces
    /// survive, so the images of all `2^n` subsets are exactly the combinations of each
    /// group's distinct outcomes: enumerating the outcomes per group, then their product,
    /// yields the same set of images without materializing `2^n` of them.
    fn every_subset(&mut self) -> bool {
        let groups = groups(self.state, &self.pieces.list);
        let mut outcomes: Vec<Vec<Outcome>> = Vec::with_capacity(groups.len());
        for group in &groups {
            let distinct = if let Some(distinct) = self.block_outcomes(group) {
                self.checked_groups += 1;
                distinct
            } else if group.len() <= self.state.group_pieces_max {
                let mut distinct = Distinct::default();
                for mask in 0u32..(1u32 << group.len()) {
                    let mut choices = vec![Choice::Skip; self.pieces.len()];
                    set_bits(&mut choices, group, mask);
                    distinct.add(self.state, self.pieces, &choices);
                }
                distinct.outcomes
            } else {
                return false;
            };
            assert!(
                distinct
                    .first()
                    .is_some_and(|first| first.entries.is_empty() && first.files.is_empty()),
                "a group's first outcome is its empty subset: the durable state"
            );
            outcomes.push(distinct);
        }
        let product = outcomes.iter().try_fold(1usize, |product, distinct| {
            product.checked_mul(distinct.len()).filter(|&n| n <= EXHAUSTIVE_IMAGES_MAX)
        });
        let Some(product) = product else { return false };
        debug_assert!(
            {
                let mut changed = BTreeSet::new();
                outcomes.iter().all(|distinct| {
                    let of_group: BTreeSet<(bool, Ino)> = distinct
                        .iter()
                        .flat_map(|outcome| {
                            let dirs = outcome.entries.keys().map(|&dir| (true, dir));
                            dirs.chain(outcome.files.keys().map(|&file| (false, file)))
                        })
                        .collect();
                    of_group.into_iter().all(|key| changed.insert(key))
                })
            },
            "the groups change disjoint directories and files: an image's changes are the union \
             of its groups' outcomes"
        );
        // Mixed radix over the groups, the first group fastest: combination 0 is the durable
        // state (every group's first outcome is its empty subset, which changes nothing). From
        // one combination to the next, only the groups whose digit moved change their slots.
        let mut unseen = Unseen::new(&outcomes);
        let mut digits = vec![0; outcomes.len()];
        let mut changes = Changes::new(self.state);
        for combination in 0..product {
            let mut rest = combination;
            for (digit, distinct) in digits.iter_mut().zip(&outcomes) {
                let next = rest % distinct.len();
                rest /= distinct.len();
                if next != *digit {
                    let outcome = |at: usize| distinct.get(at).expect("an index modulo the length");
                    let (was, now) = (outcome(*digit), outcome(next));
                    changes.unset(&was.entries, &was.files);
                    changes.set(&now.entries, &now.files);
                    *digit = next;
                }
            }
            self.generated += 1;
            if self.leave_unseen && unseen.repeats(self.state, &digits, &changes) {
                self.unhashed += 1;
                continue;
            }
            self.assemble(&changes);
        }
        debug_assert!(self.seen.len() <= self.generated, "each image is a generated one");
        true
    }

    /// The outcomes of `group`, the data pieces of one file in the declared [`CheckedBlocks`]
    /// format, one per class of the images of its subsets (`None` when the group is no such
    /// file's, or its pieces leave too many versions of a block).
    ///
    /// A file's length is the last surviving length piece's (or the durable one), and its
    /// bytes in one chunk depend only on that length and on the last surviving piece of that
    /// chunk (each piece writes its whole chunk as it stood after its write, and covers it, so
    /// no stale byte shows there), or on none surviving. So for each length, each chunk's
    /// distinct contents are found, one surviving piece each, and a block's versions are the
    /// combinations of its chunks'. These are sorted into the classes the reader tells apart
    /// (each version it accepts; one class for all it refuses), the first version reached
    /// standing for its class (the block as if none of its pieces survived comes first); the
    /// outcomes are the combinations of the blocks' classes. Every image of every subset of
    /// the pieces is thus one of the outcomes' images but for the bytes of blocks the reader
    /// refuses in both.
    fn block_outcomes(&self, group: &[usize]) -> Option<Vec<Outcome>> {
        let (state, pieces) = (self.state, self.pieces);
        let checked = state.checked_blocks?;
        let kind = |index: usize| &pieces.list.get(index).expect("a group holds pieces").kind;
        let (PieceKind::Chunk { ino, .. } | PieceKind::Size { ino, .. }) = *kind(*group.first()?)
        else {
            return None;
        };
        if !self.checked_files.contains(&ino) {
            return None;
        }
        let bytes_with = |choices: &[Choice]| -> Vec<u8> {
            let changed = Changed::gather(state, pieces, choices);
            let mut files = changed.files(state);
            files
                .find(|(changed, _)| *changed == ino)
                .map_or_else(|| durable_content(state, ino).0, |(_, bytes)| bytes)
        };
        let mut distinct = Distinct::default();
        for (len, length_piece) in self.lengths(group, ino) {
            let mut base = vec![Choice::Skip; pieces.len()];
            if let Some(index) = length_piece {
                *base.get_mut(index).expect("a choice per piece") = Choice::Apply;
            }
            let file = bytes_with(&base);
            assert_eq!(file.len() as u64, len, "the length pieces chosen leave this length");
            // The chunk pieces inside the file's length, by block and chunk (those past it
            // change no byte of the file).
            let mut blocks: BTreeMap<u64, BTreeMap<u64, Vec<usize>>> = BTreeMap::new();
            for &index in group {
                if let PieceKind::Chunk { start, .. } = kind(index)
                    && *start < len
                {
                    let block = blocks.entry(start / checked.block_bytes).or_default();
                    block.entry(*start).or_default().push(index);
                }
            }
            let mut classes: Vec<Vec<Vec<usize>>> = Vec::with_capacity(blocks.len());
            for (&block, chunks) in &blocks {
                let standing =
                    self.block_classes(checked, block, chunks, (&base, &file), &bytes_with)?;
                classes.push(standing);
            }
            self.combine_classes(&mut distinct, &base, &classes)?;
        }
        Some(distinct.outcomes)
    }

    /// Each length file `ino` (whose pieces are `group`) can end with, the durable one first,
    /// and a length piece that leaves it.
    fn lengths(&self, group: &[usize], ino: Ino) -> Vec<(u64, Option<usize>)> {
        let mut lengths: Vec<(u64, Option<usize>)> =
            vec![(durable_content(self.state, ino).1, None)];
        for &index in group {
            if let Some(PieceKind::Size { len, .. }) =
                self.pieces.list.get(index).map(|piece| &piece.kind)
                && lengths.iter().all(|(known, _)| known != len)
            {
                lengths.push((*len, Some(index)));
            }
        }
        debug_assert!(
            lengths.iter().skip(1).all(|(_, piece)| piece.is_some()),
            "every length but the durable one is left by a length piece"
        );
        lengths
    }

    /// Adds to `distinct` the outcome of every combination of the blocks' `classes` (each class
    /// as the chunk pieces that leave it) over the length choices `base`; `None` when they are
    /// too many.
    fn combine_classes(
        &self,
        distinct: &mut Distinct,
        base: &[Choice],
        classes: &[Vec<Vec<usize>>],
    ) -> Option<()> {
        let product = classes.iter().try_fold(1usize, |product, standing| {
            product.checked_mul(standing.len()).filter(|&n| n <= EXHAUSTIVE_IMAGES_MAX)
        })?;
        for combination in 0..product {
            let mut rest = combination;
            let mut choices = base.to_vec();
            for standing in classes {
                let kept = standing.get(rest % standing.len()).expect("modulo the length");
                rest /= standing.len();
                for &index in kept {
                    *choices.get_mut(index).expect("a choice per piece") = Choice::Apply;
                }
            }
            distinct.add(self.state, self.pieces, &choices);
        }
        debug_assert!(!distinct.outcomes.is_empty(), "the combinations hold the durable outcome");
        Some(())
    }

    /// The classes of versions of block `block` the reader tells apart, each as the chunk
    /// pieces that leave the version standing for it (the first reached, none first), given
    /// the choices `base` of the length pieces and the file's bytes `file` with them alone;
    /// `chunks` are the block's chunk pieces, by chunk. `None` when its versions are too many.
    fn block_classes(
        &self,
        checked: CheckedBlocks,
        block: u64,
        chunks: &BTreeMap<u64, Vec<usize>>,
        (base, file): (&[Choice], &[u8]),
        bytes_with: &dyn Fn(&[Choice]) -> Vec<u8>,
    ) -> Option<Vec<Vec<usize>>> {
        let lo = to_usize(block * checked.block_bytes);
        let hi = to_usize((block + 1) * checked.block_bytes).min(file.len());
        // Each chunk's distinct contents, each with the one piece that leaves it (none first).
        let mut options: Vec<(usize, Vec<ChunkContent>)> = Vec::new();
        for (&start, chunk_pieces) in chunks {
            let at = to_usize(start);
            let end = (at + to_usize(chunk_bytes())).min(file.len());
            let mut contents: Vec<ChunkContent> = vec![(span(file, at, end).to_vec(), None)];
            for &index in chunk_pieces {
                let mut choices = base.to_vec();
                *choices.get_mut(index).expect("a choice per piece") = Choice::Apply;
                let bytes = bytes_with(&choices);
                let content = span(&bytes, at, end).to_vec();
                if contents.iter().all(|(known, _)| *known != content) {
                    contents.push((content, Some(index)));
                }
            }
            options.push((at - lo, contents));
        }
        let versions = options.iter().try_fold(1usize, |product, (_, contents)| {
            product.checked_mul(contents.len()).filter(|&n| n <= BLOCK_VERSIONS_MAX)
        })?;
        let mut told_apart: HashSet<Option<Digest>, FixedState> = HashSet::default();
        let mut standing = Vec::new();
        let mut bytes = span(file, lo, hi).to_vec();
        for version in 0..versions {
            let mut rest = version;
            let mut kept = Vec::new();
            for (at, contents) in &options {
                let (content, piece) = contents.get(rest % contents.len()).expect("modulo");
                rest /= contents.len();
                span_mut(&mut bytes, *at, at + content.len()).copy_from_slice(content);
                kept.extend(piece);
            }
            let class = (checked.accepts)(block, &bytes).then(|| digest(&bytes));
            if told_apart.insert(class) {
                standing.push(kept);
            }
        }
        assert!(standing.first().is_some_and(Vec::is_empty), "a block's first version keeps none");
        debug_assert!(standing.len() <= versions, "a class stands for at least one version");
        Some(standing)
    }

    /// Adds the image whose directories and files hold what `changes` gives them (entries, and
    /// bytes with their hash; the durable ones elsewhere), unless an equal one was made before
    /// (most are: distinct choices of pieces often leave equal machines).
    /// It is built unless the caller knows it already ([`Builder::known`]).
    fn assemble(&mut self, changes: &Changes<'_>) {
        let state = self.state;
        let durable_hashes = &mut self.durable_hashes;
        let entries_of = |dir| changes.entries(dir).unwrap_or(&state.dir(dir).durable);
        let mut content = |ino, file: &FileNode| match changes.file(ino) {
            Some((bytes, hash)) => (Arc::clone(bytes), *hash),
            None => {
                let known = usize::try_from(ino).ok().and_then(|at| durable_hashes.get_mut(at));
                let hash = *known
                    .expect("every inode is numbered below the next")
                    .get_or_insert_with(|| digest(file.durable.as_slice()));
                (Arc::clone(&file.durable), hash)
            }
        };
        let hasher = &mut self.tree_hasher;
        let hash = tree_hash(hasher, state, entries_of, |ino, file| content(ino, file).1);
        if !self.seen.insert(hash) {
            return;
        }
        if self.known.as_mut().is_some_and(|known| known(&hash)) {
            return;
        }
        self.positions.push(self.seen.len() - 1);
        self.images.push(walk(state, entries_of, content, hash));
        debug_assert!(self.images.len() <= self.seen.len(), "an image built is a distinct one");
    }
}

/// The digest that identifies the image reached from the root through `entries_of` each
/// directory, each file's content hashing to what `content_hash` gives, computed without
/// building the image. Each directory's entries are hashed in name order, each a marker, its
/// name (length first), its kind and its content's hash (a directory's: its entries, then an
/// end marker), so that distinct trees hash apart. `hasher` is cleared first.
fn tree_hash<'a>(
    hasher: &mut Hasher,
    state: &'a State,
    entries_of: impl Fn(Ino) -> &'a BTreeMap<String, Ino>,
    mut content_hash: impl FnMut(Ino, &'a FileNode) -> Digest,
) -> Digest {
    assert!(matches!(state.inode(ROOT_INO).node, Node::Dir(_)), "the root is a directory");
    hasher.clear();
    let mut open = vec![entries_of(ROOT_INO).iter()];
    while let Some(entries) = open.last_mut() {
        let Some((name, &ino)) = entries.next() else {
            open.pop();
            hasher.update(b"}");
            continue;
        };
        hasher.update(b"e");
        hasher.update((name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
        match &state.inode(ino).node {
            Node::Dir(_) => {
                hasher.update([0]);
                open.push(entries_of(ino).iter());
            }
            Node::File(file) => {
                hasher.update([1]);
                hasher.update(content_hash(ino, file));
            }
            Node::Symlink(target) => {
                hasher.update([2]);
                hasher.update(digest(target.as_bytes()));
            }
            Node::Special => hasher.update([3]),
        }
    }
    hasher.finish()
}

/// The image reached from the root through `entries_of` each directory, each file holding what
/// `content` gives (its bytes and their hash), whose [`tree_hash`] is `hash`.
fn walk<'a>(
    state: &'a State,
    entries_of: impl Fn(Ino) -> &'a BTreeMap<String, Ino>,
    mut content: impl FnMut(Ino, &'a FileNode) -> (Arc<Vec<u8>>, Digest),
    hash: Digest,
) -> Image {
    let mut nodes = Vec::new();
    let mut stack = vec![(ROOT_INO, String::new())];
    // Depth-first over the entries; the paths are sorted afterwards.
    while let Some((dir, prefix)) = stack.pop() {
        for (name, &ino) in entries_of(dir) {
            let path = child_path(&prefix, name);
            let node = match &state.inode(ino).node {
                Node::Dir(_) => {
                    stack.push((ino, path.clone()));
                    (ImageNode::Dir, [0; 16])
                }
                Node::File(file) => {
                    let (bytes, hash) = content(ino, file);
                    (ImageNode::File(bytes), hash)
                }
                Node::Symlink(target) => {
                    let hash: Digest = digest(target.as_bytes());
                    (ImageNode::Symlink(target.clone()), hash)
                }
                Node::Special => (ImageNode::Special, [0; 16]),
            };
            nodes.push((path, node));
        }
    }
    nodes.sort_unstable_by(|(a, _), (b, _)| a.cmp(b));
    debug_assert!(
        nodes.windows(2).all(|pair| matches!(pair, [(a, _), (b, _)] if a < b)),
        "a path is reached once: the tree has no cycle"
    );
    let contents: Vec<Digest> = nodes.iter().map(|(_, (_, content))| *content).collect();
    Image {
        nodes: nodes.into_iter().map(|(path, (node, _))| (path, node)).collect(),
        contents,
        hash,
        shape: OnceLock::new(),
        boot: 0,
        media: Media::ZeroTails,
        checked_blocks: None,
    }
}

/// A file's bytes in an image, shared, and their digest.
type FileBytes = (Arc<Vec<u8>>, Digest);

/// What an image changes of the durable state: the entries of the directories it changes and
/// the bytes of the files it changes, by inode number (every inode is numbered below the
/// state's next). It is set from the outcomes of independent groups of pieces, which change
/// disjoint directories and files, so one group's outcome is swapped for another's by
/// unsetting the first and setting the second.
struct Changes<'c> {
    dirs: Vec<Option<&'c BTreeMap<String, Ino>>>,
    files: Vec<Option<&'c FileBytes>>,
}

impl<'c> Changes<'c> {
    /// Nothing changed: the durable state.
    fn new(state: &State) -> Changes<'c> {
        let inodes = usize::try_from(state.next_ino).expect("an inode number fits in memory");
        Changes { dirs: vec![None; inodes], files: vec![None; inodes] }
    }

    /// The directories in `entries` hold those entries, the files in `files` those bytes.
    fn set(&mut self, entries: &'c DirEntries, files: &'c BTreeMap<Ino, FileBytes>) {
        for (&dir, entries) in entries {
            *Changes::slot(&mut self.dirs, dir) = Some(entries);
        }
        for (&ino, bytes) in files {
            *Changes::slot(&mut self.files, ino) = Some(bytes);
        }
    }

    /// The directories in `entries` and the files in `files` go back to their durable state.
    fn unset(&mut self, entries: &DirEntries, files: &BTreeMap<Ino, FileBytes>) {
        for &dir in entries.keys() {
            *Changes::slot(&mut self.dirs, dir) = None;
        }
        for &ino in files.keys() {
            *Changes::slot(&mut self.files, ino) = None;
        }
    }

    /// The entries of directory `dir`, if changed.
    fn entries(&self, dir: Ino) -> Option<&'c BTreeMap<String, Ino>> {
        *usize::try_from(dir).ok().and_then(|at| self.dirs.get(at))?
    }

    /// The bytes of file `ino` and their hash, if changed.
    fn file(&self, ino: Ino) -> Option<&'c FileBytes> {
        *usize::try_from(ino).ok().and_then(|at| self.files.get(at))?
    }

    fn slot<T>(slots: &mut [Option<T>], ino: Ino) -> &mut Option<T> {
        (usize::try_from(ino).ok().and_then(|at| slots.get_mut(at)))
            .expect("every inode is numbered below the next")
    }
}

/// Directories' entries, by directory.
type DirEntries = BTreeMap<Ino, BTreeMap<String, Ino>>;

/// Files' content hashes, by file.
type FileHashes = Vec<(Ino, Digest)>;

/// What one group of pieces leaves in an image: its directories' entries and its files' bytes
/// (with their hash).
struct Outcome {
    entries: DirEntries,
    files: BTreeMap<Ino, (Arc<Vec<u8>>, Digest)>,
}

/// A group's distinct outcomes, in the order first reached, told apart by their entries and
/// their files' hashes.
#[derive(Default)]
struct Distinct {
    seen: HashSet<(DirEntries, FileHashes), FixedState>,
    outcomes: Vec<Outcome>,
}

impl Distinct {
    /// Adds the outcome of applying the pieces `choices` keeps, unless an equal one is in. A
    /// directory or file it leaves as it durably is counts as unchanged (pieces that undo each
    /// other, as a lock file linked and unlinked, or bytes rewritten alike), so that outcomes
    /// leaving the same image are one.
    fn add(&mut self, state: &State, pieces: &Pieces, choices: &[Choice]) {
        let changed = Changed::gather(state, pieces, choices);
        let mut files = changed.hashed_files(state);
        files.retain(|&ino, (bytes, _)| match &state.inode(ino).node {
            Node::File(file) => **bytes != *file.durable,
            Node::Dir(_) | Node::Symlink(_) | Node::Special => true,
        });
        let mut entries = changed.entries;
        entries.retain(|&dir, entries| *entries != state.dir(dir).durable);
        let hashes = files.iter().map(|(ino, (_, hash))| (*ino, *hash)).collect();
        if self.seen.insert((entries.clone(), hashes)) {
            self.outcomes.push(Outcome { entries, files });
        }
        debug_assert_eq!(self.seen.len(), self.outcomes.len(), "one outcome per distinct one");
    }
}

/// Which combinations of the groups' outcomes repeat an image generated before. A group none
/// of whose directories and files the combination's directories reach from the root shows
/// nothing in its image, and what is reached does not depend on it (it changes only the
/// entries of directories not reached), so every outcome of it but its first (the durable
/// state) gives the image the same combination with its first gives. That one comes first in
/// the mixed-radix order (its digit 0, every other digit the same; each group unseen in one is
/// unseen in the other), and is generated; the others are counted as generated and left
/// unhashed, and the images and their order are those of hashing every combination.
struct Unseen {
    /// Per group, the directories and files it changes.
    changed: Vec<Vec<Ino>>,
    /// The groups that change some directory's entries: what is reached depends on them alone.
    naming: Vec<usize>,
    /// Per choice of the naming groups' outcomes (their digits), which groups are unseen.
    unseen: HashMap<Vec<usize>, Vec<bool>, FixedState>,
    key: Vec<usize>,
}

impl Unseen {
    fn new(outcomes: &[Vec<Outcome>]) -> Unseen {
        let changed = (outcomes.iter())
            .map(|distinct| {
                let inodes: BTreeSet<Ino> = (distinct.iter())
                    .flat_map(|outcome| outcome.entries.keys().chain(outcome.files.keys()))
                    .copied()
                    .collect();
                inodes.into_iter().collect()
            })
            .collect();
        let naming = (outcomes.iter().enumerate())
            .filter(|(_, distinct)| distinct.iter().any(|outcome| !outcome.entries.is_empty()))
            .map(|(group, _)| group)
            .collect();
        Unseen { changed, naming, unseen: HashMap::default(), key: Vec::new() }
    }

    /// Whether the combination of the groups' outcomes numbered `digits` (what they change:
    /// `changes`) repeats an image generated before: some group unseen in it is past its first
    /// outcome.
    fn repeats(&mut self, state: &State, digits: &[usize], changes: &Changes<'_>) -> bool {
        self.key.clear();
        self.key.extend(self.naming.iter().map(|&group| digits.get(group).copied().unwrap_or(0)));
        if !self.unseen.contains_key(&self.key) {
            let reached = reached(state, changes);
            let unseen = (self.changed.iter())
                .map(|inodes| inodes.iter().all(|ino| !reached.contains(ino)))
                .collect();
            self.unseen.insert(self.key.clone(), unseen);
        }
        let unseen = self.unseen.get(&self.key).expect("worked out above");
        digits.iter().zip(unseen).any(|(&digit, &unseen)| unseen && digit > 0)
    }
}

/// The directories and files reached from the root through the entries `changes` gives each
/// directory it changes (the durable ones elsewhere), the root among them.
fn reached(state: &State, changes: &Changes<'_>) -> BTreeSet<Ino> {
    let entries_of = |dir| changes.entries(dir).unwrap_or(&state.dir(dir).durable);
    let mut reached = BTreeSet::from([ROOT_INO]);
    let mut open = vec![ROOT_INO];
    while let Some(dir) = open.pop() {
        for &ino in entries_of(dir).values() {
            if reached.insert(ino) && matches!(state.inode(ino).node, Node::Dir(_)) {
                open.push(ino);
            }
        }
    }
    reached
}

/// One content a chunk of a checked file may hold, and the one piece that leaves it (none: the
/// chunk as the length pieces alone leave it).
type ChunkContent = (Vec<u8>, Option<usize>);

/// Keeps (applies) the pieces `group` names whose bit is set in `mask`, the first piece lowest.
fn set_bits(choices: &mut [Choice], group: &[usize], mask: u32) {
    debug_assert!(group.len() < 32, "a mask holds a bit per piece");
    for (bit, &piece) in group.iter().enumerate() {
        if mask & (1 << bit) != 0 {
            *choices.get_mut(piece).expect("a choice per piece") = Choice::Apply;
        }
    }
}

/// The files a name of the declared [`CheckedBlocks`] format links in any directory, durably or
/// not, or that a pending change gives such a name (none when no format is declared).
fn checked_files(state: &State) -> BTreeSet<Ino> {
    let Some(checked) = state.checked_blocks else { return BTreeSet::new() };
    let named = |name: &String| checked.names.contains(&name.as_str());
    let entries = state.inodes.values().filter_map(|inode| match &inode.node {
        Node::Dir(dir) => Some(dir.volatile.iter().chain(dir.durable.iter())),
        Node::File(_) | Node::Symlink(_) | Node::Special => None,
    });
    let pending = state.pending.iter().filter_map(|pending| match pending {
        Pending::Names { changes } => Some(changes.iter()),
        Pending::Data { .. } => None,
    });
    let files: BTreeSet<Ino> = entries
        .flatten()
        .filter(|(name, _)| named(name))
        .map(|(_, ino)| *ino)
        .chain(pending.flatten().filter(|change| named(&change.name)).filter_map(|c| c.target))
        .collect();
    debug_assert!(
        files.iter().all(|ino| matches!(state.inode(*ino).node, Node::File(_))),
        "a name of a checked format links a file"
    );
    files
}

/// The independent groups of `pieces` (indices into it, in order; groups ordered by their
/// first piece): the pieces of one file, and the name changes of directories a rename links.
///
/// The pieces of a file no image can name (neither a durable entry nor a pending name change
/// links it: a lock or staging file created and removed since the last barrier) are in no
/// group: whether they survive changes no image.
fn groups(state: &State, pieces: &[Piece]) -> Vec<Vec<usize>> {
    let nameable = nameable(state, pieces);
    #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    enum Object {
        File(Ino),
        Dir(Ino),
    }
    // Union-find over pieces: each object remembers the first piece that touched it.
    let mut parent: Vec<usize> = (0..pieces.len()).collect();
    let mut owner: BTreeMap<Object, usize> = BTreeMap::new();
    for (index, piece) in pieces.iter().enumerate() {
        let objects: Vec<Object> = match &piece.kind {
            PieceKind::Chunk { ino, .. } | PieceKind::Size { ino, .. } => vec![Object::File(*ino)],
            PieceKind::Names { changes, .. } => {
                changes.iter().map(|dir| Object::Dir(*dir)).collect()
            }
        };
        for object in objects {
            let first = *owner.entry(object).or_insert(index);
            let (a, b) = (root(&mut parent, first), root(&mut parent, index));
            if a != b {
                *parent.get_mut(a.max(b)).expect("a root is a piece") = a.min(b);
            }
            debug_assert_eq!(
                root(&mut parent, first),
                root(&mut parent, index),
                "pieces touching one object share a group"
            );
        }
    }
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (index, piece) in pieces.iter().enumerate() {
        if let PieceKind::Chunk { ino, .. } | PieceKind::Size { ino, .. } = &piece.kind
            && !nameable.contains(ino)
        {
            continue;
        }
        let group = root(&mut parent, index);
        groups.entry(group).or_default().push(index);
    }
    let groups: Vec<Vec<usize>> = groups.into_values().collect();
    debug_assert!(
        groups.iter().flatten().collect::<BTreeSet<_>>().len() == groups.iter().flatten().count(),
        "a piece is in one group at most"
    );
    debug_assert!(
        groups.iter().all(|group| group.is_sorted() && !group.is_empty()),
        "a group lists its pieces in issue order"
    );
    groups
}

/// The files a name can reach after a crash: those a durable entry names, and those a pending
/// name change would (a file no name can reach is in no image, and its pieces in no group).
fn nameable(state: &State, pieces: &[Piece]) -> BTreeSet<Ino> {
    let mut nameable: BTreeSet<Ino> = state
        .inodes
        .values()
        .filter_map(|inode| match &inode.node {
            Node::Dir(dir) => Some(dir.durable.values().copied()),
            _ => None,
        })
        .flatten()
        .collect();
    for piece in pieces {
        if let PieceKind::Names { pending, .. } = &piece.kind
            && let Some(Pending::Names { changes }) = state.pending.get(*pending)
        {
            nameable.extend(changes.iter().filter_map(|change| change.target));
        }
    }
    debug_assert!(!nameable.contains(&ROOT_INO), "no entry names the root");
    nameable
}

/// The root of piece `i`'s group in the union-find `parent`, halving the path on the way.
fn root(parent: &mut [usize], mut i: usize) -> usize {
    let up = |parent: &[usize], i: usize| *parent.get(i).expect("a piece's parent is a piece");
    while up(parent, i) != i {
        let grand = up(parent, up(parent, i));
        *parent.get_mut(i).expect("a piece") = grand;
        i = grand;
    }
    debug_assert_eq!(parent.get(i), Some(&i), "a root is its own parent");
    i
}

/// What a set of surviving pieces changed: directories' entries and files' bytes, the rest is
/// as durable.
struct Changed {
    entries: BTreeMap<Ino, BTreeMap<String, Ino>>,
    contents: BTreeMap<Ino, (Vec<u8>, u64)>,
    /// Byte ranges past the durable end that a surviving write covered (for stale tails).
    covered: BTreeMap<Ino, Vec<(usize, usize)>>,
}

impl Changed {
    /// Applies the chosen pieces, in issue order, to the durable state.
    fn gather(state: &State, pieces: &Pieces, choices: &[Choice]) -> Changed {
        let entries = Changed::names(state, pieces, choices);
        let mut contents: BTreeMap<Ino, (Vec<u8>, u64)> = BTreeMap::new();
        let mut covered: BTreeMap<Ino, Vec<(usize, usize)>> = BTreeMap::new();
        for (piece, choice) in pieces.list.iter().zip(choices) {
            if *choice == Choice::Skip {
                continue;
            }
            if let PieceKind::Chunk { ino, .. } | PieceKind::Size { ino, .. } = piece.kind {
                let (buf, len) = contents.entry(ino).or_insert_with(|| durable_content(state, ino));
                apply_data(&piece.kind, *choice, buf, len, covered.entry(ino).or_default());
            }
        }
        debug_assert!(
            covered.keys().all(|ino| contents.contains_key(ino)),
            "only a changed file has ranges a write covered"
        );
        Changed { entries, contents, covered }
    }

    /// The directories whose entries the chosen name pieces change, as they end up.
    fn names(state: &State, pieces: &Pieces, choices: &[Choice]) -> DirEntries {
        let mut entries: DirEntries = BTreeMap::new();
        for (piece, choice) in pieces.list.iter().zip(choices) {
            let PieceKind::Names { pending, .. } = &piece.kind else { continue };
            if *choice == Choice::Skip {
                continue;
            }
            let Some(Pending::Names { changes }) = state.pending.get(*pending) else {
                unreachable!("name pieces point at name changes");
            };
            for change in changes {
                let dir = entries
                    .entry(change.dir)
                    .or_insert_with(|| state.dir(change.dir).durable.clone());
                match change.target {
                    Some(target) => dir.insert(change.name.clone(), target),
                    None => dir.remove(&change.name),
                };
            }
        }
        debug_assert!(
            entries.keys().all(|dir| matches!(state.inode(*dir).node, Node::Dir(_))),
            "only directories hold names"
        );
        entries
    }

    /// [`Changed::files`], each shared and with its digest (what images are told apart by).
    fn hashed_files(&self, state: &State) -> BTreeMap<Ino, (Arc<Vec<u8>>, Digest)> {
        let files: BTreeMap<Ino, FileBytes> = self
            .files(state)
            .map(|(ino, bytes)| {
                let hash: Digest = digest(&bytes);
                (ino, (Arc::new(bytes), hash))
            })
            .collect();
        debug_assert_eq!(files.len(), self.contents.len(), "a hash per changed file");
        files
    }

    /// The final bytes of every changed file: cut or extended to its length, and (on the
    /// stale medium) stale bytes where it grew without a surviving write.
    fn files<'a>(&'a self, state: &'a State) -> impl Iterator<Item = (Ino, Vec<u8>)> + 'a {
        self.contents.iter().map(move |(&ino, (buf, len))| {
            (ino, final_bytes(state, ino, buf.clone(), *len, self.covered.get(&ino)))
        })
    }
}

/// Applies one surviving data piece to a file's bytes `buf` and length `len`, noting the byte
/// ranges its write covered. A skipped piece must not reach here (a length piece would apply).
fn apply_data(
    kind: &PieceKind,
    choice: Choice,
    buf: &mut Vec<u8>,
    len: &mut u64,
    covered: &mut Vec<(usize, usize)>,
) {
    debug_assert_ne!(choice, Choice::Skip, "a skipped piece changes nothing");
    match kind {
        PieceKind::Names { .. } => unreachable!("name pieces change directories"),
        PieceKind::Size { len: new, .. } => *len = *new,
        PieceKind::Chunk { start, snapshot, written, .. } => {
            let start_at = to_usize(*start);
            match choice {
                Choice::Apply => {
                    let snapshot_end = start_at + snapshot.len();
                    if buf.len() < snapshot_end {
                        buf.resize(snapshot_end, 0);
                    }
                    span_mut(buf, start_at, snapshot_end).copy_from_slice(snapshot);
                    covered.push((start_at, start_at + to_usize(chunk_bytes())));
                    // The chunk past the snapshot was beyond the end of file: zeros.
                    let chunk_end = (start_at + to_usize(chunk_bytes())).min(buf.len());
                    if snapshot_end < chunk_end {
                        span_mut(buf, snapshot_end, chunk_end).fill(0);
                    }
                }
                Choice::Upto(cut) => {
                    let (lo, hi) = (written.0, written.1.min(cut));
                    debug_assert!(*start <= lo, "a torn piece writes inside its chunk");
                    if lo < hi {
                        let (lo, hi) = (to_usize(lo), to_usize(hi));
                        if buf.len() < hi {
                            buf.resize(hi, 0);
                        }
                        span_mut(buf, lo, hi).copy_from_slice(span(
                            snapshot,
                            lo - start_at,
                            hi - start_at,
                        ));
                        covered.push((lo, hi));
                    }
                }
                Choice::Skip => {}
            }
        }
    }
}

/// A changed file's final bytes: `buf` cut or extended to `len`, and (on the stale medium) stale
/// bytes where it grew without a surviving write.
fn final_bytes(
    state: &State,
    ino: Ino,
    mut buf: Vec<u8>,
    len: u64,
    covered: Option<&Vec<(usize, usize)>>,
) -> Vec<u8> {
    buf.resize(to_usize(len), 0);
    if state.media == Media::StaleTails
        && let Node::File(file) = &state.inode(ino).node
    {
        stale_fill(&mut buf, file.durable.len(), covered);
    }
    assert_eq!(buf.len() as u64, len, "a file's bytes are as long as its length");
    buf
}

/// What a medium may show where a file grew without its data reaching the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Media {
    /// Zeros (ext4 `data=ordered` and most filesystems): the default model.
    #[default]
    ZeroTails,
    /// Stale bytes from whatever the blocks held before (ext4 `data=writeback`, xfs after a
    /// crash, per ALICE): a named, harsher mode. The stale bytes are a fixed non-zero pattern
    /// with line ends and braces in it, so they can look like several lines.
    StaleTails,
}

impl Media {
    /// The medium's name, as options and reports spell it.
    pub const fn name(self) -> &'static str {
        match self {
            Media::ZeroTails => "zero-tails",
            Media::StaleTails => "stale-tails",
        }
    }
}

/// The stale pattern of [`Media::StaleTails`].
const STALE: &[u8] = b"\xA5stale{\"kind\":\n";

/// Fills the bytes of `buf` past `durable` that no surviving write covered with stale bytes.
fn stale_fill(buf: &mut [u8], durable: usize, covered: Option<&Vec<(usize, usize)>>) {
    debug_assert!(
        covered.is_none_or(|ranges| ranges.iter().all(|(lo, hi)| lo <= hi)),
        "a covered range is a range"
    );
    let mut written = vec![false; buf.len().saturating_sub(durable)];
    for &(lo, hi) in covered.into_iter().flatten() {
        let (lo, hi) = (lo.max(durable) - durable, hi.min(buf.len()).saturating_sub(durable));
        written.get_mut(lo..hi).into_iter().flatten().for_each(|written| *written = true);
    }
    for ((position, byte), written) in buf.iter_mut().enumerate().skip(durable).zip(&written) {
        if !written {
            *byte = *STALE.get(position % STALE.len()).expect("an index modulo the length");
        }
    }
}

fn durable_content(state: &State, ino: Ino) -> (Vec<u8>, u64) {
    match &state.inode(ino).node {
        Node::File(file) => {
            let bytes = file.durable.as_ref().clone();
            let len = bytes.len() as u64;
            (bytes, len)
        }
        Node::Dir(_) | Node::Symlink(_) | Node::Special => {
            unreachable!("data pieces are only recorded for files")
        }
    }
}

/// The cut positions (file offsets in `lo..hi`) of the torn families of one write. The cut at
/// `lo` keeps none of the write's data but (with its extension) leaves zeros where it would be.
fn torn_cuts(lo: u64, hi: u64, seed: u64) -> Vec<u64> {
    let mut cuts = vec![lo];
    if hi <= lo + 1 {
        return cuts;
    }
    for align in [chunk_bytes(), 4096] {
        let first = (lo / align + 1) * align;
        let aligned: Vec<u64> = (first..hi).step_by(to_usize(align)).collect();
        let stride = aligned.len().div_ceil(TORN_CUTS_PER_FAMILY_MAX).max(1);
        cuts.extend(aligned.into_iter().step_by(stride));
    }
    let len = hi - lo;
    cuts.extend([lo + 1, lo + len / 2, hi - 1]);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for _ in 0..TORN_BYTE_CUTS_SEEDED {
        cuts.push(rng.random_range(lo + 1..hi));
    }
    cuts.sort_unstable();
    cuts.dedup();
    assert!(
        cuts.first() == Some(&lo) && cuts.iter().all(|cut| (lo..hi.max(lo + 1)).contains(cut)),
        "every cut lies inside its write, the first at its start"
    );
    cuts
}

/// The image of everything the kernel accepted: the volatile view.
fn volatile_image(state: &State) -> Image {
    let entries_of = |dir| &state.dir(dir).volatile;
    let hash = tree_hash(&mut Hasher::new(), state, entries_of, |_, file| digest(&file.volatile));
    let image = walk(
        state,
        entries_of,
        |_, file| (Arc::clone(&file.volatile), digest(&file.volatile)),
        hash,
    );
    debug_assert!(
        image.nodes.len() >= state.dir(ROOT_INO).volatile.len(),
        "a kill keeps every name the root holds"
    );
    image
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::{Boundary, FaultPlan, File as _, Fs as _, OpenOptions, SimFs};

    const B: Boundary = Boundary::new("test");

    /// The product of the groups' outcomes leaves unhashed only combinations that repeat an
    /// image: with and without leaving them out, the same images in the same order, and they
    /// are the images of every subset of the pieces applied one by one. The pending changes
    /// give both kinds of repeat: a file written in a directory not yet linked (its bytes and
    /// the directory's entries show only where the directory's name survives), and a lock file
    /// linked and unlinked (its directory's outcome with both left as it durably is).
    #[test]
    fn combinations_left_unhashed_change_no_image_nor_its_place() {
        let fs = SimFs::new(FaultPlan::none(1));
        fs.create_dir(Path::new("/d"), B).unwrap();
        let file = fs.open(Path::new("/d/a"), OpenOptions::create(), B).unwrap();
        file.append(b"durable", B).unwrap();
        file.sync_data(B).unwrap();
        fs.sync_dir(Path::new("/"), B).unwrap();
        fs.sync_dir(Path::new("/d"), B).unwrap();
        fs.create_dir(Path::new("/d/new"), B).unwrap();
        let inner = fs.open(Path::new("/d/new/f"), OpenOptions::create(), B).unwrap();
        inner.append(b"inner", B).unwrap();
        drop(fs.open(Path::new("/d/lock"), OpenOptions::create(), B).unwrap());
        fs.remove_file(Path::new("/d/lock"), B).unwrap();
        file.append(b" more", B).unwrap();

        let state = fs.lock();
        let pieces = Pieces::collect(&state);
        assert!(pieces.len() <= 12, "few enough pieces for every subset: {}", pieces.len());
        let enumerate = |leave_unseen| {
            let mut builder = Builder::new(&state, &pieces);
            builder.leave_unseen = leave_unseen;
            assert!(builder.every_subset(), "every subset enumerated");
            let hashes: Vec<Digest> = builder.images.iter().map(Image::hash).collect();
            (hashes, builder.generated, builder.unhashed)
        };
        let (left, generated, unhashed) = enumerate(true);
        let (every, every_generated, none) = enumerate(false);
        assert!(unhashed > 0, "some combinations repeat an image ({generated} generated)");
        assert_eq!(none, 0);
        assert_eq!(left, every, "the same images in the same order");
        assert_eq!(generated, every_generated, "the same combinations counted");

        let mut one_by_one = Builder::new(&state, &pieces);
        for mask in 0u32..(1 << pieces.len()) {
            let choices: Vec<Choice> = (0..pieces.len())
                .map(|i| if mask & (1 << i) == 0 { Choice::Skip } else { Choice::Apply })
                .collect();
            one_by_one.add(&choices);
        }
        let subsets: BTreeSet<Digest> = one_by_one.images.iter().map(Image::hash).collect();
        assert_eq!(left.iter().copied().collect::<BTreeSet<_>>(), subsets);
        assert_eq!(left.len(), subsets.len(), "each image once");
    }
}
