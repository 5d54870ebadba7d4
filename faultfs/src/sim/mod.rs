//! `SimFs`: a deterministic in-memory filesystem with a crash model (DESIGN.md section 5).
//!
//! # State
//!
//! Durable and volatile state are kept apart:
//!
//! - per file inode, the *durable* bytes (what survives any crash) and the *volatile* bytes
//!   (what reads return);
//! - per directory inode, the *durable* entries and the *volatile* entries;
//! - one ordered list of *pending* changes since the last barrier that covered them: data
//!   changes (a write, a length change) of one inode, and name changes (create, unlink, rename)
//!   grouped per op so a rename stays atomic.
//!
//! # Rules
//!
//! - R1 A write changes the volatile bytes at once and is pending until `sync_data`/`sync_all`
//!   of that inode applies the inode's pending data changes to its durable bytes.
//! - R2 A name change updates the volatile entries at once and is pending until `sync_dir` of a
//!   directory it touches applies the whole change to the durable entries.
//! - R3 A rename is one pending change: after a crash both names are as before, or both as after.
//! - R4 At a power loss, any subset of the pending changes survives, at 512-byte chunk
//!   granularity for data; an extension may survive without its data (as zeros). See `image`.
//! - R5 Dropping a file handle makes nothing durable.
//! - A failed sync (an injected `Eio`/`Enospc` on a sync op) drops the inode's pending data
//!   changes without applying them: reads still show the data, the durable bytes never get it,
//!   and the next sync succeeds (fsyncgate).
//!
//! # Determinism
//!
//! Inode numbers, the logical clock (one millisecond per mutating op), short-write lengths and
//! sampled crash images all derive from the fault plan's seed and the op sequence, and every map
//! is ordered, so the same seed and the same calls give the same trace and the same images.

mod file;
mod image;
mod path;
mod process;

use crate::digest::{Digest, Hasher};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Component, Path};
// The simulated state is shared between threads (several "processes" in one test); under loom
// its mutex is loom's, so loom models explore the interleavings of filesystem ops too.
#[cfg(loom)]
use loom::sync::{Arc as SyncArc, Mutex, MutexGuard};
#[cfg(not(loom))]
use std::sync::{Arc as SyncArc, Mutex, MutexGuard};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, SystemTime};

pub use file::SimFile;
pub use image::{
    CheckedBlocks, CrashImages, CrashMode, EXHAUSTIVE_IMAGES_MAX, EXHAUSTIVE_PIECES_MAX, Image,
    ImageNode, Media, Sifted,
};
use path::{child_path, normalize, split_image_path};
use process::next_machine;

use crate::plan::mix;
use crate::trace::TraceEntry;
use crate::{
    Boundary, DirEntry, Error, Fault, FaultPlan, FileKind, Fs, Metadata, OpKind, OpenOptions,
    Result, Trace,
};

/// The granularity at which a power loss may keep or lose pending data (a disk sector).
pub const fn chunk_bytes() -> u64 {
    const CHUNK: u64 = 512;
    assert!(CHUNK.is_power_of_two(), "a sector is a power of two bytes");
    CHUNK
}

/// How many sampled images a power-loss crash adds when the pending set is too large to
/// enumerate every subset.
const SAMPLED_IMAGES_DEFAULT: usize = 64;

/// Above this many pieces in one group (one file's chunks and length changes; the name changes
/// of directories linked by renames), a power loss does not enumerate the group's subsets.
const GROUP_PIECES_MAX_DEFAULT: usize = 16;

/// The logical time at which a filesystem rebuilt from a crash image starts.
pub const REBOOT_CLOCK_MS: u64 = 10_000;

/// The pid a new `SimFs` reports for its own process.
const PROCESS_ID_DEFAULT: u32 = 1000;

/// The rules of the crash model, each of which can be switched off.
///
/// The default is the crash model; every field is `true`. Switching a rule off gives a *weaker*
/// model that is not a faithful filesystem: it exists so a test can prove that a litmus test
/// depends on the rule (the litmus must fail without it). Nothing else should use it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    /// R1: a write is durable only after a sync of its file. Off: every write is durable at once.
    pub data_needs_sync: bool,
    /// R2: a name change is durable only after a sync of its directory. Off: durable at once.
    pub names_need_dir_sync: bool,
    /// R3: a rename survives a crash whole or not at all. Off: its two sides are independent.
    pub rename_atomic: bool,
    /// R4: pending changes have no order and survive per 512-byte chunk. Off: a power loss keeps
    /// a prefix of the pending changes, each whole, in issue order.
    pub pending_unordered: bool,
    /// A failed sync drops the file's dirty data (fsyncgate). Off: the data stays pending and a
    /// later sync makes it durable.
    pub failed_sync_drops: bool,
    /// A process kill keeps everything the kernel accepted. Off: it keeps only durable state.
    pub kill_keeps_volatile: bool,
    /// A successful sync makes its file's data (or its directory's names) durable. Off: syncs
    /// succeed and do nothing, so correct code loses data too.
    pub sync_makes_durable: bool,
}

impl Rules {
    /// The crash model: every rule on.
    pub const CRASH_MODEL: Rules = Rules {
        data_needs_sync: true,
        names_need_dir_sync: true,
        rename_atomic: true,
        pending_unordered: true,
        failed_sync_drops: true,
        kill_keeps_volatile: true,
        sync_makes_durable: true,
    };
}

impl Default for Rules {
    fn default() -> Self {
        Rules::CRASH_MODEL
    }
}

pub(crate) type Ino = u64;

const ROOT_INO: Ino = 0;

/// `ELOOP`: what an `O_NOFOLLOW` open of a symbolic link, or too many links, answers.
const ELOOP: i32 = 40;

/// Links followed in one resolution before it fails (Linux's bound).
const SYMLINKS_FOLLOWED_MAX: usize = 40;

#[derive(Clone, Debug)]
pub(crate) struct FileNode {
    durable: Arc<Vec<u8>>,
    /// Shared with the machines this one was copied from or to, until one of them changes it.
    volatile: Arc<Vec<u8>>,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct DirNode {
    durable: BTreeMap<String, Ino>,
    volatile: BTreeMap<String, Ino>,
}

#[derive(Clone, Debug)]
pub(crate) enum Node {
    File(FileNode),
    Dir(DirNode),
    /// A symbolic link to an absolute path (normalized components joined by `/`).
    Symlink(String),
    /// A special file (a FIFO, a device): an open refuses it at once, as `RealFs`'s
    /// non-blocking open does, and the store never reads or writes it.
    Special,
}

#[derive(Clone, Debug)]
pub(crate) struct Inode {
    node: Node,
    modified_ms: u64,
}

/// Every inode of a machine, by number. Numbers are handed out in order from the root's and
/// never reused (an unlinked inode stays, unreachable: an open handle may still use it), so
/// the table is a vector indexed by number. Each inode is shared with the copies of the machine
/// (a crash kept at each op, a restart) until one of them changes it: a copy costs a pointer
/// per inode, and a change copies the one inode it changes.
#[derive(Clone, Debug, Default)]
pub(crate) struct Inodes(Vec<Arc<Inode>>);

impl Inodes {
    /// Adds inode `ino`, the next number: `None`, as a map's insert of a new key.
    fn insert(&mut self, ino: Ino, inode: Inode) -> Option<Inode> {
        assert_eq!(ino, self.0.len() as Ino, "inode numbers are handed out in order");
        self.0.push(Arc::new(inode));
        None
    }

    pub(crate) fn get(&self, ino: &Ino) -> Option<&Inode> {
        debug_assert!(!self.0.is_empty(), "a machine always has its root");
        self.0.get(usize::try_from(*ino).ok()?).map(|inode| &**inode)
    }

    fn get_mut(&mut self, ino: &Ino) -> Option<&mut Inode> {
        debug_assert!(!self.0.is_empty(), "a machine always has its root");
        self.0.get_mut(usize::try_from(*ino).ok()?).map(Arc::make_mut)
    }

    fn contains_key(&self, ino: &Ino) -> bool {
        let contains = self.get(ino).is_some();
        debug_assert_eq!(contains, *ino < self.0.len() as Ino, "numbers are dense from the root's");
        contains
    }

    fn keys(&self) -> impl Iterator<Item = Ino> + '_ {
        debug_assert!(!self.0.is_empty(), "a machine always has its root");
        (0..self.0.len()).map(|ino| ino as Ino)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &Inode> {
        debug_assert!(!self.0.is_empty(), "a machine always has its root");
        self.0.iter().map(|inode| &**inode)
    }

    fn len(&self) -> usize {
        debug_assert!(!self.0.is_empty(), "a machine always has its root");
        self.0.len()
    }
}

/// A change to one inode's bytes, pending until that inode is synced. A write's bytes are shared
/// with the copies of the machine.
#[derive(Clone, Debug)]
pub(crate) enum DataChange {
    Write { offset: u64, bytes: Arc<[u8]> },
    SetLen { len: u64 },
}

/// One name binding: `dir/name` now names `target` (or nothing).
#[derive(Clone, Debug)]
pub(crate) struct NameChange {
    dir: Ino,
    name: String,
    target: Option<Ino>,
}

/// Both ends of an op on two paths, resolved (see `State::begin_two_paths`).
struct TwoPaths<'p> {
    from_dir: Ino,
    from_name: &'p str,
    ino: Ino,
    to_dir: Ino,
    to_name: &'p str,
}

/// A pending change, in issue order.
#[derive(Clone, Debug)]
pub(crate) enum Pending {
    Data {
        ino: Ino,
        change: DataChange,
    },
    /// The name changes of one op (two for a rename); they survive a crash together.
    Names {
        changes: Vec<NameChange>,
    },
}

#[derive(Clone, Debug)]
pub(crate) struct State {
    inodes: Inodes,
    next_ino: Ino,
    pending: Vec<Pending>,
    trace: Trace,
    plan: FaultPlan,
    op_count: u64,
    halted: Option<(Boundary, u64)>,
    /// Advisory locks: inode -> id of the open file holding it.
    locks: BTreeMap<Ino, u64>,
    next_handle: u64,
    /// Logical clock, milliseconds since the epoch; advances one per mutating op.
    clock_ms: u64,
    /// Simulated running processes: pid -> start time (ms since epoch).
    processes: BTreeMap<u32, u64>,
    sampled_images: usize,
    rules: Rules,
    /// This machine's id (see [`Fs::machine_id`]); a restart is a new boot of a copy, so it
    /// gets a new one.
    machine: u64,
    /// How many crashes (kills or power losses) lie behind this machine: 0 for a new one.
    boot: u64,
    /// Directories whose changes never survive a power loss (see [`SimFs::set_ephemeral`]).
    ephemeral: Vec<Vec<String>>,
    /// What the medium shows where a file grew without its data (see [`Media`]).
    media: Media,
    /// The most pieces of one group whose every subset a power loss enumerates.
    group_pieces_max: usize,
    /// The files this machine was rebuilt with from an image, by inode: their paths in it.
    /// Shared with the copies of the machine (it never changes after the rebuild).
    image_files: Arc<BTreeMap<Ino, String>>,
    /// Those of them some read has seen the bytes of.
    image_files_read: BTreeSet<Ino>,
    /// Every file some read reached since [`SimFs::mark_reads`], while marking.
    read_since_mark: Option<BTreeSet<Ino>>,
    /// Whether the whole state was handed out (a crash's images, a restarted copy), so that
    /// any byte may have been seen.
    exposed: bool,
    /// Whether a power loss leaves out the chunk pieces no image can tell apart (see
    /// [`SimFs::set_zero_chunk_reduction`]).
    reduce_zero_chunks: bool,
    /// A file format whose blocks its reader checks whole (see [`SimFs::set_checked_blocks`]).
    checked_blocks: Option<CheckedBlocks>,
    /// While keeping them (see [`SimFs::keep_crashes`]), the machine as a crash planned at each
    /// op since would have left it, in op order.
    kept: Option<Vec<State>>,
}

/// The files reachable on a machine at one moment, by inode, with a name of each (see
/// [`SimFs::mark_reads`]).
#[derive(Clone, Debug)]
pub struct ReadMark {
    paths: BTreeMap<Ino, String>,
}

/// What the processes on a machine rebuilt from an image have read of it so far, and which of
/// its files each path names now (see [`SimFs::reads`]): enough to say what
/// [`SimFs::observed`] would say after more reads, with the machine gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reads {
    /// What [`SimFs::observed`] says now.
    observed: Observed,
    /// The image file each reachable path names now, by that path (every name of a file).
    names: BTreeMap<String, String>,
}

impl Reads {
    /// What [`SimFs::observed`] would say after [`SimFs::note_read`] of `paths` (as
    /// [`SimFs::read_since`] gives them: one reachable name per file).
    pub fn observed_with(&self, paths: &BTreeSet<String>) -> Observed {
        match &self.observed {
            Observed::Everything => Observed::Everything,
            Observed::Files(files) => {
                let named = paths.iter().filter_map(|path| self.names.get(path)).cloned();
                Observed::Files(files.iter().cloned().chain(named).collect())
            }
        }
    }
}

/// What the processes on a machine rebuilt from an image saw of the image's file bytes (see
/// [`SimFs::observed`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observed {
    /// The bytes of these files (their paths in the image) and no other file's.
    Files(BTreeSet<String>),
    /// Possibly everything: the machine's whole state was handed out.
    Everything,
}

/// A deterministic in-memory filesystem implementing the crash model. Cloning gives another
/// handle to the same filesystem (as seen by the same process; see [`SimFs::as_process`]).
#[derive(Clone, Debug)]
pub struct SimFs {
    state: SyncArc<Mutex<State>>,
    process_id: u32,
}

/// What a mutating op should do after the fault plan has been consulted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Proceed,
    Fail(Fault),
}

impl SimFs {
    /// An empty filesystem (just `/`) running `plan`.
    pub fn new(plan: FaultPlan) -> Self {
        let mut inodes = Inodes::default();
        inodes.insert(ROOT_INO, Inode { node: Node::Dir(DirNode::default()), modified_ms: 0 });
        let state = State {
            inodes,
            next_ino: ROOT_INO + 1,
            pending: Vec::new(),
            trace: Trace::default(),
            plan,
            op_count: 0,
            halted: None,
            locks: BTreeMap::new(),
            next_handle: 0,
            clock_ms: 0,
            processes: BTreeMap::from([(PROCESS_ID_DEFAULT, 0)]),
            sampled_images: SAMPLED_IMAGES_DEFAULT,
            rules: Rules::CRASH_MODEL,
            machine: next_machine(),
            boot: 0,
            ephemeral: Vec::new(),
            media: Media::ZeroTails,
            group_pieces_max: GROUP_PIECES_MAX_DEFAULT,
            image_files: Arc::default(),
            image_files_read: BTreeSet::new(),
            read_since_mark: None,
            exposed: false,
            reduce_zero_chunks: true,
            checked_blocks: None,
            kept: None,
        };
        assert!(
            state.pending.is_empty() && state.trace.entries().is_empty() && state.inodes.len() == 1,
            "a new machine holds its root alone, with nothing pending and no history"
        );
        debug_assert!(
            state.processes.contains_key(&PROCESS_ID_DEFAULT),
            "the process that drives a new machine runs on it"
        );
        SimFs { state: SyncArc::new(Mutex::new(state)), process_id: PROCESS_ID_DEFAULT }
    }

    /// An empty filesystem running `plan` under a weakened crash model (see [`Rules`]); only for
    /// proving that a test depends on a rule.
    pub fn with_rules(plan: FaultPlan, rules: Rules) -> Self {
        let fs = SimFs::new(plan);
        fs.lock().rules = rules;
        debug_assert_eq!(fs.lock().rules, rules, "a machine runs the rules it was given");
        fs
    }

    /// A filesystem holding exactly `image`, all of it durable, running `plan`. This is how a
    /// harness "reboots" after a crash: every file's modification time is the epoch, the clock
    /// restarts at [`REBOOT_CLOCK_MS`], and this process started then. A lock file left in the
    /// image therefore reads as written before its pid's current process started, as a lock
    /// left by a killed process does after the pid is reused.
    pub fn from_image(image: &Image, plan: FaultPlan) -> Self {
        let fs = SimFs::new(plan);
        {
            let mut state = fs.lock();
            state.clock_ms = REBOOT_CLOCK_MS;
            state.boot = image.boot;
            state.media = image.media;
            state.checked_blocks = image.checked_blocks;
            state.processes = BTreeMap::from([(PROCESS_ID_DEFAULT, REBOOT_CLOCK_MS)]);
            for (path, node) in image.nodes() {
                let components = split_image_path(path);
                let Some((name, parents)) = components.split_last() else {
                    continue;
                };
                let parent = state
                    .lookup_components(parents)
                    .expect("image paths are sorted, so a parent precedes its children");
                let ino = state.next_ino;
                state.next_ino += 1;
                let inode = match node {
                    ImageNode::Dir => Node::Dir(DirNode::default()),
                    ImageNode::File(bytes) => {
                        Arc::make_mut(&mut state.image_files).insert(ino, path.clone());
                        Node::File(FileNode {
                            durable: Arc::clone(bytes),
                            volatile: Arc::clone(bytes),
                        })
                    }
                    ImageNode::Symlink(target) => Node::Symlink(target.clone()),
                    ImageNode::Special => Node::Special,
                };
                state.inodes.insert(ino, Inode { node: inode, modified_ms: 0 });
                let dir = state.dir_mut(parent);
                dir.durable.insert((*name).to_owned(), ino);
                dir.volatile.insert((*name).to_owned(), ino);
            }
            // A rebooted machine holds the image and nothing more, all of it durable.
            assert!(
                state.pending.is_empty(),
                "a machine rebuilt from an image has nothing pending"
            );
            debug_assert_eq!(
                state.inodes.len(),
                image.nodes().len() + 1,
                "an inode per image node, and the root"
            );
        }
        fs
    }

    /// The machine after the process that ran on this filesystem was killed, as the next
    /// process sees it: a separate copy (the caller may restart the same kill point many times),
    /// running `plan`.
    ///
    /// A kill is not a sync: everything the killed process wrote stays *visible* (the kernel
    /// accepted it) but stays *pending*, so a power loss after the restart may still drop any
    /// of it, together with whatever the new process leaves unsynced. The killed process is no
    /// longer running; the new one gets the next pid and starts now, and no lock survives (a
    /// dead process's advisory locks are released; its lock *files* stay).
    pub fn restart(&self, plan: FaultPlan) -> SimFs {
        // Everything on the machine carries over; what belonged to the killed process does not.
        let mut state = {
            let mut state = self.lock();
            state.exposed = true;
            // The copy starts with an empty trace and keeps no crashes: neither is copied.
            let trace = std::mem::take(&mut state.trace);
            let kept = state.kept.take();
            let copy = state.clone();
            state.trace = trace;
            state.kept = kept;
            copy
        };
        let pid = self.process_id + 1;
        state.clock_ms += 1;
        state.processes.remove(&self.process_id);
        state.processes.insert(pid, state.clock_ms);
        let crashed_machine = state.machine;
        state.plan = plan;
        state.op_count = 0;
        state.halted = None;
        state.locks = BTreeMap::new();
        state.next_handle = 0;
        state.machine = next_machine();
        debug_assert_ne!(state.machine, crashed_machine, "a restarted machine has a new id");
        state.boot += 1;
        assert!(
            !state.processes.contains_key(&self.process_id) && state.processes.contains_key(&pid),
            "the killed process is gone and the next one runs"
        );
        state.check();
        SimFs { state: SyncArc::new(Mutex::new(state)), process_id: pid }
    }

    /// Advances the logical clock by `ms` milliseconds.
    pub fn advance_clock(&self, ms: u64) {
        let mut state = self.lock();
        assert!(state.clock_ms.checked_add(ms).is_some(), "the clock never wraps around");
        state.clock_ms += ms;
    }

    /// Declares the directories at `paths` ephemeral: no change to them or to a file named in
    /// them survives a power loss unless it was already durable. For state that needs no
    /// durability and whose loss every reader handles (lock files: after a power loss their
    /// holder is dead), this keeps the images to what can matter, so that the rest is enumerated
    /// rather than sampled. A process kill still shows everything.
    pub fn set_ephemeral(&self, paths: &[&Path]) {
        assert!(
            paths.iter().all(|path| path.is_absolute()),
            "an ephemeral directory is named by its absolute path"
        );
        let mut state = self.lock();
        state.ephemeral = paths
            .iter()
            .map(|path| {
                path.components()
                    .filter_map(|component| match component {
                        Component::Normal(name) => Some(name.to_string_lossy().into_owned()),
                        _ => None,
                    })
                    .collect()
            })
            .collect();
        assert_eq!(state.ephemeral.len(), paths.len(), "one entry per ephemeral directory");
    }

    /// Sets what the medium shows where a file grew without its data (see [`Media`]).
    pub fn set_media(&self, media: Media) {
        let mut state = self.lock();
        state.media = media;
        debug_assert_eq!(state.media, media, "a machine shows the medium it was given");
    }

    /// Whether a power loss leaves out pending chunk pieces that hold only zeros past a file's
    /// durable end on a zero-tail medium (on by default): applying such a piece or not gives
    /// the same bytes, so the images are the same set either way, from half as many subsets
    /// per piece. Off, every piece is enumerated (to check the reduction against).
    pub fn set_zero_chunk_reduction(&self, on: bool) {
        let mut state = self.lock();
        state.reduce_zero_chunks = on;
        debug_assert_eq!(state.reduce_zero_chunks, on, "the reduction is as set");
    }

    /// Declares the files named `checked.names` to be in a format whose reader checks each block
    /// whole (`None`: no such format). A power loss enumerates the pending pieces of such a file
    /// block by block, and keeps, per block, one outcome per class the reader tells apart: each
    /// distinct block it accepts, and one for all it refuses. That is sound when the reader refuses a block through `checked.accepts` alone and reads nothing
    /// else of a refused block's bytes (the images of one class then lead to the same reads and
    /// writes). Machines rebuilt from this one's images keep the declaration.
    pub fn set_checked_blocks(&self, checked: Option<CheckedBlocks>) {
        if let Some(checked) = checked {
            assert!(
                checked.block_bytes > 0 && checked.block_bytes % chunk_bytes() == 0,
                "a checked block is a whole number of chunks"
            );
        }
        self.lock().checked_blocks = checked;
    }

    /// Sets how many seeded samples a power-loss crash adds beyond its structured families.
    pub fn set_sampled_images(&self, count: usize) {
        let mut state = self.lock();
        state.sampled_images = count;
        debug_assert_eq!(state.sampled_images, count, "the samples are as set");
    }

    /// The plan this filesystem runs.
    pub fn plan(&self) -> FaultPlan {
        self.lock().plan
    }

    /// From now on, before each mutating op, keeps the machine as a crash planned at that op
    /// would leave it ([`SimFs::kept_crashes`]): one run of a program gives every machine its
    /// run crashed at each op would, without running it again up to each. The copies are the
    /// machine at the op, halted there, its advisory locks released (what the crashed
    /// process's handles held closes with them); each op costs a copy of the machine.
    pub fn keep_crashes(&self) {
        let mut state = self.lock();
        assert!(state.plan.trigger.is_none(), "crashes are kept on a machine nothing plans");
        state.kept = Some(Vec::new());
    }

    /// The machines [`SimFs::keep_crashes`] kept, in op order (the first crashed at the op it
    /// was called before), and stops keeping them.
    pub fn kept_crashes(&self) -> Vec<SimFs> {
        let kept = self.lock().kept.take().unwrap_or_default();
        let process_id = self.process_id;
        let machines: Vec<SimFs> = kept
            .into_iter()
            .map(|state| SimFs { state: SyncArc::new(Mutex::new(state)), process_id })
            .collect();
        debug_assert!(machines.iter().all(|fs| fs.halted().is_some()), "each is halted");
        machines
    }

    /// How many mutating ops have been issued (including a faulted one).
    pub fn op_count(&self) -> u64 {
        let state = self.lock();
        debug_assert_eq!(state.trace.len() as u64, state.op_count, "one trace entry per op");
        state.op_count
    }

    /// The trace of every mutating op so far.
    pub fn trace(&self) -> Trace {
        let state = self.lock();
        debug_assert_eq!(state.trace.len() as u64, state.op_count, "one trace entry per op");
        state.trace.clone()
    }

    /// Where the simulated process crashed, if it has.
    pub fn halted(&self) -> Option<(Boundary, u64)> {
        let state = self.lock();
        debug_assert!(
            state.halted.is_none_or(|(_, op)| op < state.op_count),
            "a crash is at an op issued"
        );
        state.halted
    }

    /// How many data chunks, length changes and name changes are pending (not yet durable).
    pub fn pending_pieces(&self) -> usize {
        let state = self.lock();
        let pieces = image::Pieces::collect(&state).len();
        debug_assert!(pieces == 0 || !state.pending.is_empty(), "pieces come of pending changes");
        pieces
    }

    /// The post-crash images at the current point. `ProcessKill` gives one image (everything the
    /// kernel accepted); `PowerLoss` gives durable state plus the subsets of pending changes the
    /// model allows (see `image`). Images are deduplicated by content hash.
    pub fn crash(&self, mode: CrashMode) -> CrashImages {
        let sifted = self.sift(mode, None);
        assert_eq!(sifted.crash.images.len(), sifted.distinct, "every image is built");
        sifted.crash
    }

    /// [`SimFs::crash`], but an image whose hash `known` knows (it is asked once per distinct
    /// image, in generation order) is left unbuilt: the same images, numbered as `crash` numbers
    /// them, the known ones only counted. Each is rebooted as `boot` (one more than this
    /// machine's), which the images' hashes leave out.
    pub fn crash_sifted(&self, mode: CrashMode, known: &mut dyn FnMut(&Digest) -> bool) -> Sifted {
        self.sift(mode, Some(known))
    }

    fn sift(&self, mode: CrashMode, known: Option<&mut dyn FnMut(&Digest) -> bool>) -> Sifted {
        let mut state = self.lock();
        state.check();
        state.exposed = true;
        let mut sifted = image::sift_images(&state, mode, known);
        for image in &mut sifted.crash.images {
            image.boot = state.boot + 1;
            image.media = state.media;
            image.checked_blocks = state.checked_blocks;
        }
        let crash = &sifted.crash;
        assert!(
            mode == CrashMode::PowerLoss || sifted.distinct == 1,
            "a process kill leaves one machine: everything the kernel accepted"
        );
        assert!(sifted.distinct > 0, "a crash leaves a machine");
        assert!(sifted.distinct <= crash.generated, "images are the distinct ones generated");
        assert!(crash.images.len() <= sifted.distinct, "images built are distinct ones");
        sifted
    }

    /// A digest of everything the images of a power loss here depend on: two machines with
    /// equal digests whose power losses are enumerated exhaustively ([`CrashImages::exhaustive`])
    /// leave the same images in the same order. The op count is part of it only while a write
    /// is pending (its torn cuts are seeded with it), so a machine that only synced or read
    /// since an earlier point of the same history often digests as it did there. A harness
    /// that judged that point's images needs not build them again.
    pub fn power_loss_digest(&self) -> Digest {
        image::power_loss_digest(&self.lock())
    }

    /// What the processes on this machine have seen of the bytes of the files it was rebuilt
    /// with from an image ([`SimFs::from_image`]): the files some read reached (whatever part of
    /// them), or everything once the whole state was handed out ([`SimFs::crash`],
    /// [`SimFs::restart`]). Paths, kinds, lengths and link targets are not counted: a harness
    /// comparing images by what was read of them ([`Image::digest_within`]) compares those in
    /// full.
    pub fn observed(&self) -> Observed {
        let state = self.lock();
        if state.exposed {
            return Observed::Everything;
        }
        debug_assert!(
            state.image_files_read.len() <= state.image_files.len(),
            "only an image's files are counted as read"
        );
        let files: BTreeSet<String> = (state.image_files_read.iter())
            .map(|ino| state.image_files.get(ino).expect("a file read is an image file").clone())
            .collect();
        Observed::Files(files)
    }

    /// A digest of everything the next op of this process can see or depend on: every path
    /// reachable now with its kind, bytes (or link target) and modification time, the clock,
    /// the running processes and this one's pid, the boot count and how many advisory locks are
    /// held. Two machines with the same digest answer every op alike (what is pending rather
    /// than durable is left out: it shows only in a later crash's images). A harness keys what
    /// it concluded from a machine's future on it.
    pub fn visible_digest(&self) -> Digest {
        self.digest_seen(true)
    }

    /// [`SimFs::visible_digest`] without the times: the modification times, the clock and the
    /// running processes' start times (this process's id stays). Two machines with the same
    /// digest answer every op alike but for the times a metadata op reports, and for whether a
    /// lock file's holder counts as a reused pid (its start time against the file's time). A
    /// harness whose program reads no time but to compare two times it read of one file, and
    /// meets no lock of a live process other than its own, may key its conclusions on it.
    pub fn content_digest(&self) -> Digest {
        self.digest_seen(false)
    }

    fn digest_seen(&self, times: bool) -> Digest {
        let state = self.lock();
        let mut hasher = Hasher::with_capacity(64 * 1024);
        // A file reached again by another name (a hard link) is hashed as the first name's
        // number in the walk: which names share a file shows in what a write through one does.
        let mut files_seen: BTreeMap<Ino, u64> = BTreeMap::new();
        state.each_visible(|path, ino, inode| {
            hasher.update((path.len() as u64).to_le_bytes());
            hasher.update(path.as_bytes());
            if times {
                hasher.update(inode.modified_ms.to_le_bytes());
            }
            if matches!(inode.node, Node::File(_)) {
                if let Some(first) = files_seen.get(&ino) {
                    hasher.update(b"h");
                    hasher.update(first.to_le_bytes());
                    return;
                }
                files_seen.insert(ino, files_seen.len() as u64);
            }
            match &inode.node {
                Node::Dir(_) => hasher.update(b"d"),
                Node::File(file) => {
                    hasher.update(b"f");
                    hasher.update((file.volatile.len() as u64).to_le_bytes());
                    hasher.update(file.volatile.as_slice());
                }
                Node::Symlink(target) => {
                    hasher.update(b"l");
                    hasher.update((target.len() as u64).to_le_bytes());
                    hasher.update(target.as_bytes());
                }
                Node::Special => hasher.update(b"s"),
            }
        });
        for word in [state.boot, u64::from(self.process_id), state.locks.len() as u64] {
            hasher.update(word.to_le_bytes());
        }
        if times {
            hasher.update(state.clock_ms.to_le_bytes());
            for (pid, start_ms) in &state.processes {
                hasher.update(u64::from(*pid).to_le_bytes());
                hasher.update(start_ms.to_le_bytes());
            }
        }
        debug_assert!(
            state.processes.contains_key(&self.process_id),
            "the process that looks is running"
        );
        hasher.finish()
    }

    /// Starts noting which of the files reachable now some read reaches from here on (see
    /// [`SimFs::read_since`]).
    pub fn mark_reads(&self) -> ReadMark {
        let mut state = self.lock();
        state.read_since_mark = Some(BTreeSet::new());
        let mut paths = BTreeMap::new();
        state.each_visible(|path, ino, inode| {
            if matches!(inode.node, Node::File(_)) {
                paths.entry(ino).or_insert_with(|| path.to_owned());
            }
        });
        debug_assert!(paths.len() < state.next_ino as usize, "one path per file reachable");
        ReadMark { paths }
    }

    /// The files reachable at `mark` that some read reached since, by their paths then (one
    /// name per file). A harness that knows another machine alike at the mark (the same
    /// [`SimFs::visible_digest`]) would run the same ops hands these to [`SimFs::note_read`]
    /// there, so that [`SimFs::observed`] says what those ops would have read.
    pub fn read_since(&self, mark: &ReadMark) -> BTreeSet<String> {
        let mut state = self.lock();
        let read = state.read_since_mark.take().unwrap_or_default();
        let paths: BTreeSet<String> =
            read.iter().filter_map(|ino| mark.paths.get(ino).cloned()).collect();
        debug_assert!(paths.len() <= mark.paths.len(), "only files reachable at the mark");
        paths
    }

    /// What [`SimFs::observed`] says now, and the image file each path reachable now names: a
    /// harness that remembers what a machine rebuilt from an image came to after some ops can
    /// say what was observed of another machine rebuilt from the same image after the same ops
    /// and more (those some machine alike ran, whose reads it knows by their paths) without
    /// running any of them ([`Reads::observed_with`]).
    pub fn reads(&self) -> Reads {
        let observed = self.observed();
        let state = self.lock();
        let mut names = BTreeMap::new();
        state.each_visible(|path, ino, _| {
            if let Some(file) = state.image_files.get(&ino) {
                names.insert(path.to_owned(), file.clone());
            }
        });
        Reads { observed, names }
    }

    /// Counts the files at `paths` (absolute, resolved without following a last symlink) as
    /// read, for [`SimFs::observed`]: what ops that did not run here read of a machine alike.
    pub fn note_read(&self, paths: &BTreeSet<String>) {
        let mut state = self.lock();
        let read = state.image_files_at(paths);
        state.image_files_read.extend(read);
        debug_assert!(
            state.image_files_read.len() <= state.image_files.len(),
            "only an image's files are counted as read"
        );
    }

    /// How many crashes lie behind this machine (0 for a new one; a restart or a machine
    /// rebuilt from a crash image counts one more than the machine that crashed). A harness
    /// seeds each boot's id source with it, so a new process never reuses the ids of an old one.
    pub fn boot(&self) -> u64 {
        self.lock().boot
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock is a bug in SimFs itself; the state is still the
        // best evidence of what happened, so keep using it rather than panic again.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn open_impl(&self, path: &Path, options: OpenOptions, boundary: Boundary) -> Result<SimFile> {
        assert!(
            options.read || options.write || options.mutates(),
            "an open reads, writes or creates"
        );
        let mut state = self.lock();
        let components = normalize(path, OpKind::Open)?;
        if options.mutates() {
            let verdict = state.begin(boundary, OpKind::Open, shown(path), open_detail(options))?;
            // An injected fault takes precedence over the op's own outcome, and changes nothing.
            if let Verdict::Fail(fault) = verdict {
                return Err(fault_error(fault, OpKind::Open, path, boundary));
            }
        } else {
            state.check_alive(boundary)?;
        }
        let (name, parents) = components
            .split_last()
            .ok_or_else(|| io_error(OpKind::Open, path, boundary, io::ErrorKind::IsADirectory))?;
        let parent = state.lookup_dir(parents, OpKind::Open, path, boundary)?;
        let existing = state.dir(parent).volatile.get(*name).copied();
        let ino = match existing {
            Some(ino) => {
                state.open_existing(ino, options, path, boundary)?;
                ino
            }
            None if options.create || options.create_new => state.create_file(parent, name),
            None => return Err(io_error(OpKind::Open, path, boundary, io::ErrorKind::NotFound)),
        };
        debug_assert!(
            matches!(&state.inode(ino).node, Node::File(file)
                if !(options.truncate && options.write) || file.volatile.is_empty()),
            "an open names a file, empty when truncated"
        );
        let handle = state.next_handle;
        state.next_handle += 1;
        Ok(SimFile {
            fs: self.clone(),
            ino,
            handle,
            path: path.to_path_buf(),
            writable: options.write || options.create || options.create_new,
        })
    }
}

impl State {
    /// The inode `ino`. Every ino the state hands out (a directory's entry, an open file's, a
    /// pending change's) names one that exists: a miss is a bug of the simulation, not a state
    /// a machine can be in.
    pub(crate) fn inode(&self, ino: Ino) -> &Inode {
        debug_assert!(ino < self.next_ino, "inode {ino} was handed out");
        self.inodes.get(&ino).unwrap_or_else(|| panic!("inode {ino} is linked but missing"))
    }

    /// The files this machine was rebuilt with from an image that `paths` (absolute, the last
    /// link not followed) name now.
    fn image_files_at(&self, paths: &BTreeSet<String>) -> Vec<Ino> {
        let named = paths.iter().filter_map(|path| {
            let components = split_image_path(path);
            self.lookup_components(&components)
        });
        named.filter(|ino| self.image_files.contains_key(ino)).collect()
    }

    /// Fails if the simulated process has crashed.
    fn check_alive(&self, boundary: Boundary) -> Result<()> {
        match self.halted {
            Some((crashed_at, op_index)) => {
                debug_assert!(op_index < self.op_count, "{boundary} follows the crash it sees");
                Err(Error::Crashed { boundary: crashed_at, op_index })
            }
            None => Ok(()),
        }
    }

    /// Starts a mutating op: counts it, advances the clock, consults the plan and records the
    /// trace entry. A planned crash halts the filesystem and fails this and every later op.
    fn begin(
        &mut self,
        boundary: Boundary,
        op: OpKind,
        target: String,
        detail: String,
    ) -> Result<Verdict> {
        self.check_alive(boundary)?;
        if self.kept.is_some() {
            self.keep_crash(boundary, op, &target, &detail);
        }
        let index = self.op_count;
        self.op_count += 1;
        self.clock_ms += 1;
        let fault = match self.plan.trigger {
            Some((op_index, fault)) if op_index == index => Some(fault),
            _ => None,
        };
        let outcome = fault.map_or("ok", Fault::name);
        self.trace.push(TraceEntry { index, boundary, op, target, detail, outcome });
        debug_assert_eq!(
            self.trace.entries().len() as u64,
            self.op_count,
            "one trace entry per op this process issued"
        );
        match fault {
            Some(Fault::Crash) => {
                self.halted = Some((boundary, index));
                Err(Error::Crashed { boundary, op_index: index })
            }
            Some(fault) => Ok(Verdict::Fail(fault)),
            None => Ok(Verdict::Proceed),
        }
    }

    /// Keeps a copy of this machine as a crash planned at the op beginning now (`boundary`,
    /// `op` on `target`) would leave it, once the crashed process's handles have closed.
    fn keep_crash(&mut self, boundary: Boundary, op: OpKind, target: &str, detail: &str) {
        debug_assert!(self.plan.trigger.is_none(), "crashes are kept on a machine nothing plans");
        let kept = self.kept.take();
        let mut copy = self.clone();
        self.kept = kept;
        copy.plan = FaultPlan::crash_at(self.plan.seed, self.op_count);
        let halted = copy.begin(boundary, op, target.to_owned(), detail.to_owned());
        debug_assert!(
            matches!(halted, Err(Error::Crashed { .. })),
            "the copy crashes at the op it was planned at"
        );
        // Closing the crashed process's files releases their advisory locks.
        copy.locks.clear();
        if let Some(kept) = self.kept.as_mut() {
            kept.push(copy);
        }
    }

    /// The start of an op on two paths (a rename, a hard link): both normalized, the op begun
    /// (its planned fault or crash decided before anything is looked up, as for every op), both
    /// parent directories resolved and the source's inode found.
    fn begin_two_paths<'p>(
        &mut self,
        op: OpKind,
        from: &'p Path,
        to: &'p Path,
        boundary: Boundary,
    ) -> Result<TwoPaths<'p>> {
        let from_components = normalize(from, op)?;
        let to_components = normalize(to, op)?;
        let target = [shown(from), shown(to)].join(" -> ");
        if let Verdict::Fail(fault) = self.begin(boundary, op, target, String::new())? {
            return Err(fault_error(fault, op, to, boundary));
        }
        let (from_name, from_parents) = from_components
            .split_last()
            .ok_or_else(|| io_error(op, from, boundary, io::ErrorKind::InvalidInput))?;
        let (to_name, to_parents) = to_components
            .split_last()
            .ok_or_else(|| io_error(op, to, boundary, io::ErrorKind::InvalidInput))?;
        let from_dir = self.lookup_dir(from_parents, op, from, boundary)?;
        let to_dir = self.lookup_dir(to_parents, op, to, boundary)?;
        let ino = *self
            .dir(from_dir)
            .volatile
            .get(*from_name)
            .ok_or_else(|| io_error(op, from, boundary, io::ErrorKind::NotFound))?;
        debug_assert!(
            matches!(op, OpKind::Rename | OpKind::HardLink),
            "only a rename or a hard link names two paths"
        );
        Ok(TwoPaths { from_dir, from_name, ino, to_dir, to_name })
    }

    /// Visits every path reachable now through the volatile entries (depth first, each
    /// directory's entries in name order), with its inode.
    fn each_visible(&self, mut visit: impl FnMut(&str, Ino, &Inode)) {
        let mut stack = vec![(ROOT_INO, String::new())];
        let mut dirs = 1usize;
        while let Some((dir, prefix)) = stack.pop() {
            for (name, &ino) in &self.dir(dir).volatile {
                let path = child_path(&prefix, name);
                let inode = self.inode(ino);
                visit(&path, ino, inode);
                if matches!(inode.node, Node::Dir(_)) {
                    dirs += 1;
                    stack.push((ino, path));
                }
            }
        }
        debug_assert!(dirs <= self.inodes.len(), "each directory has one name: the walk ends");
    }

    /// The open of the existing inode `ino` at `path`: refused unless a regular file (and
    /// unless `create_new`), truncated when asked.
    fn open_existing(
        &mut self,
        ino: Ino,
        options: OpenOptions,
        path: &Path,
        boundary: Boundary,
    ) -> Result<()> {
        if options.create_new {
            return Err(io_error(OpKind::Open, path, boundary, io::ErrorKind::AlreadyExists));
        }
        match self.inode(ino).node {
            Node::Dir(_) => {
                return Err(io_error(OpKind::Open, path, boundary, io::ErrorKind::IsADirectory));
            }
            // Every open is `O_NOFOLLOW`: a link in the last component is ELOOP.
            Node::Symlink(_) => {
                return Err(Error::io(
                    OpKind::Open,
                    path,
                    Some(boundary),
                    io::Error::from_raw_os_error(ELOOP),
                ));
            }
            // As `RealFs`: anything but a regular file is refused at once.
            Node::Special => {
                return Err(Error::io(
                    OpKind::Open,
                    path,
                    Some(boundary),
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "a special file (a FIFO, a socket or a device) where a regular file belongs",
                    ),
                ));
            }
            Node::File(_) => {}
        }
        debug_assert!(!options.create_new, "an exclusive create never opens what exists");
        if options.truncate && options.write {
            self.set_len(ino, 0);
        }
        debug_assert!(
            !(options.truncate && options.write)
                || matches!(&self.inode(ino).node, Node::File(file) if file.volatile.is_empty()),
            "a truncating open leaves its file empty"
        );
        Ok(())
    }

    /// A new empty file named `name` in directory `parent` (which has no such entry).
    fn create_file(&mut self, parent: Ino, name: &str) -> Ino {
        debug_assert!(
            !self.dir(parent).volatile.contains_key(name),
            "a new file takes a free name"
        );
        let ino = self.new_inode(Node::File(FileNode {
            durable: Arc::new(Vec::new()),
            volatile: Arc::new(Vec::new()),
        }));
        self.bind(vec![NameChange { dir: parent, name: name.to_owned(), target: Some(ino) }]);
        ino
    }

    /// The state's own invariants, checked whenever a crash hands the machine out (its images,
    /// a restarted copy): every name and
    /// every pending change binds inodes that exist, of the right kind; inode numbers and file
    /// handles are handed out in order; no time lies ahead of the clock; one trace entry per op.
    fn check(&self) {
        assert!(matches!(self.inode(ROOT_INO).node, Node::Dir(_)), "the root is a directory");
        assert!(
            self.inodes.keys().all(|ino| ino < self.next_ino),
            "inode numbers are handed out in order"
        );
        for inode in self.inodes.values() {
            if let Node::Dir(dir) = &inode.node {
                assert!(
                    dir.volatile
                        .values()
                        .chain(dir.durable.values())
                        .all(|ino| { self.inodes.contains_key(ino) }),
                    "every entry, visible or durable, names an inode"
                );
            }
            assert!(inode.modified_ms <= self.clock_ms, "nothing was modified after now");
        }
        for pending in &self.pending {
            match pending {
                Pending::Data { ino, .. } => assert!(
                    matches!(self.inode(*ino).node, Node::File(_)),
                    "pending data is a file's"
                ),
                Pending::Names { changes } => assert!(
                    !changes.is_empty()
                        && changes.iter().all(|change| {
                            matches!(self.inode(change.dir).node, Node::Dir(_))
                                && change.target.is_none_or(|to| self.inodes.contains_key(&to))
                        }),
                    "a pending name change binds an inode in a directory"
                ),
            }
        }
        assert!(
            self.locks.iter().all(|(ino, &handle)| {
                self.inodes.contains_key(ino) && handle < self.next_handle
            }),
            "a lock is on an inode, held by a handle handed out"
        );
        assert!(
            self.image_files_read.iter().all(|ino| self.image_files.contains_key(ino)),
            "a file read of an image is one of its files"
        );
        assert!(self.halted.is_none_or(|(_, op)| op < self.op_count), "a crash is at an op issued");
        assert_eq!(self.trace.entries().len() as u64, self.op_count, "one trace entry per op");
    }

    fn new_inode(&mut self, node: Node) -> Ino {
        let ino = self.next_ino;
        self.next_ino += 1;
        debug_assert!(ino > ROOT_INO, "only the root is made without an inode number drawn");
        let previous = self.inodes.insert(ino, Inode { node, modified_ms: self.clock_ms });
        assert!(previous.is_none(), "inode {ino} is new: inode numbers are never reused");
        ino
    }

    fn dir(&self, ino: Ino) -> &DirNode {
        debug_assert!(ino < self.next_ino, "inode {ino} was handed out");
        match &self.inode(ino).node {
            Node::Dir(dir) => dir,
            Node::File(_) | Node::Symlink(_) | Node::Special => {
                unreachable!("inode {ino} was resolved as a directory")
            }
        }
    }

    fn dir_mut(&mut self, ino: Ino) -> &mut DirNode {
        debug_assert!(ino < self.next_ino, "inode {ino} was handed out");
        match &mut self.inodes.get_mut(&ino).expect("resolved inodes exist").node {
            Node::Dir(dir) => dir,
            Node::File(_) | Node::Symlink(_) | Node::Special => {
                unreachable!("inode {ino} was resolved as a directory")
            }
        }
    }

    fn file_mut(&mut self, ino: Ino) -> &mut FileNode {
        debug_assert!(ino != ROOT_INO, "the root is no file");
        match &mut self.inodes.get_mut(&ino).expect("open files keep their inode").node {
            Node::File(file) => file,
            Node::Dir(_) | Node::Symlink(_) | Node::Special => {
                unreachable!("inode {ino} was opened as a file")
            }
        }
    }

    /// Applies name changes to the volatile entries and records them as one pending change.
    fn bind(&mut self, changes: Vec<NameChange>) {
        for change in &changes {
            let now = self.clock_ms;
            let dir = self.dir_mut(change.dir);
            match change.target {
                Some(target) => dir.volatile.insert(change.name.clone(), target),
                None => dir.volatile.remove(&change.name),
            };
            if let Some(inode) = self.inodes.get_mut(&change.dir) {
                inode.modified_ms = now;
            }
        }
        debug_assert!(
            changes.iter().all(|change| {
                self.dir(change.dir).volatile.get(&change.name).copied() == change.target
            }),
            "reads see a name change at once"
        );
        if !self.rules.names_need_dir_sync {
            self.apply_names(changes);
        } else if self.rules.rename_atomic {
            let count = changes.len();
            self.pending.push(Pending::Names { changes });
            debug_assert!(
                matches!(self.pending.last(), Some(Pending::Names { changes }) if changes.len() == count),
                "an op's name changes are one pending change: they survive a crash together (R3)"
            );
        } else {
            for change in changes {
                self.pending.push(Pending::Names { changes: vec![change] });
            }
        }
    }

    /// Applies name changes to the durable entries.
    fn apply_names(&mut self, changes: Vec<NameChange>) {
        for change in changes {
            let entries = &mut self.dir_mut(change.dir).durable;
            match change.target {
                Some(target) => entries.insert(change.name.clone(), target),
                None => entries.remove(&change.name),
            };
            debug_assert_eq!(
                self.dir(change.dir).durable.get(&change.name).copied(),
                change.target,
                "a durable name change is durable"
            );
        }
    }

    fn write(&mut self, ino: Ino, offset: u64, bytes: &[u8]) {
        let now = self.clock_ms;
        let file = self.file_mut(ino);
        apply_write(Arc::make_mut(&mut file.volatile), offset, bytes);
        debug_assert!(
            file.volatile.get(to_usize(offset)..).is_some_and(|tail| tail.starts_with(bytes)),
            "reads see a write at once"
        );
        self.inodes.get_mut(&ino).expect("open files keep their inode").modified_ms = now;
        self.pending.push(Pending::Data {
            ino,
            change: DataChange::Write { offset, bytes: Arc::from(bytes) },
        });
        if !self.rules.data_needs_sync {
            self.sync_file(ino, false);
        }
    }

    fn set_len(&mut self, ino: Ino, len: u64) {
        let now = self.clock_ms;
        let file = self.file_mut(ino);
        Arc::make_mut(&mut file.volatile).resize(to_usize(len), 0);
        debug_assert_eq!(file.volatile.len() as u64, len, "reads see a length change at once");
        self.inodes.get_mut(&ino).expect("open files keep their inode").modified_ms = now;
        self.pending.push(Pending::Data { ino, change: DataChange::SetLen { len } });
        if !self.rules.data_needs_sync {
            self.sync_file(ino, false);
        }
    }

    /// Makes `ino`'s pending data changes durable, or (when `dropped`) discards them without
    /// applying, as a failed fsync may.
    fn sync_file(&mut self, ino: Ino, dropped: bool) {
        let mut changes = Vec::new();
        self.pending.retain(|pending| match pending {
            Pending::Data { ino: changed, change } if *changed == ino => {
                changes.push(change.clone());
                false
            }
            _ => true,
        });
        debug_assert!(
            !self
                .pending
                .iter()
                .any(|p| matches!(p, Pending::Data { ino: left, .. } if *left == ino)),
            "a sync leaves none of its file's data changes pending"
        );
        if dropped {
            return;
        }
        let file = self.file_mut(ino);
        let durable = Arc::make_mut(&mut file.durable);
        for change in &changes {
            apply_change(durable, change);
        }
    }

    /// Makes every pending name change touching directory `dir` durable, and with them every
    /// earlier one of an entry they change: a name's later change never lands before its
    /// earlier one (a directory created in `sessions/` and renamed away into `.closing/`, the
    /// rename synced through `.closing/`: the creation cannot become durable after it and
    /// bring the name back).
    fn sync_dir(&mut self, dir: Ino) {
        let mut entries: BTreeSet<(Ino, &str)> = BTreeSet::new();
        let mut taken = vec![false; self.pending.len()];
        for (pending, take) in self.pending.iter().zip(taken.iter_mut()).rev() {
            let Pending::Names { changes } = pending else { continue };
            if changes.iter().any(|change| {
                change.dir == dir || entries.contains(&(change.dir, change.name.as_str()))
            }) {
                *take = true;
                entries.extend(changes.iter().map(|change| (change.dir, change.name.as_str())));
            }
        }
        let mut synced = Vec::new();
        let mut taken = taken.into_iter();
        self.pending.retain(|pending| {
            let take = taken.next().unwrap_or(false);
            if take && let Pending::Names { changes } = pending {
                synced.push(changes.clone());
            }
            !take
        });
        self.apply_names(synced.into_iter().flatten().collect());
        debug_assert_eq!(
            self.dir(dir).durable,
            self.dir(dir).volatile,
            "a synced directory's durable entries are the entries it lists"
        );
        debug_assert!(
            !self.pending.iter().any(|pending| matches!(
                pending,
                Pending::Names { changes } if changes.iter().any(|change| change.dir == dir)
            )),
            "a directory sync leaves none of its name changes pending"
        );
    }

    /// A seeded length in `0..len` for a short write at op `op_index`.
    fn short_write_len(&self, op_index: u64, len: usize) -> usize {
        if len == 0 {
            return 0;
        }
        let written = (mix(self.plan.seed, op_index) % len as u64) as usize;
        debug_assert!(written < len, "a short write is short");
        written
    }
}

impl Fs for SimFs {
    type File = SimFile;

    fn open(&self, path: &Path, options: OpenOptions, boundary: Boundary) -> Result<SimFile> {
        let file = self.open_impl(path, options, boundary)?;
        debug_assert_eq!(
            file.writable,
            options.write || options.create || options.create_new,
            "a file opened to write or create takes writes; one opened to read refuses them"
        );
        Ok(file)
    }

    fn rename(&self, from: &Path, to: &Path, boundary: Boundary) -> Result<()> {
        let op = OpKind::Rename;
        let mut state = self.lock();
        let TwoPaths { from_dir, from_name, ino, to_dir, to_name } =
            state.begin_two_paths(op, from, to, boundary)?;
        if let Some(&replaced) = state.dir(to_dir).volatile.get(to_name) {
            let moving_dir = matches!(state.inode(ino).node, Node::Dir(_));
            match &state.inode(replaced).node {
                Node::Dir(dir) if !moving_dir || !dir.volatile.is_empty() => {
                    return Err(io_error(op, to, boundary, io::ErrorKind::IsADirectory));
                }
                Node::File(_) | Node::Symlink(_) | Node::Special if moving_dir => {
                    return Err(io_error(op, to, boundary, io::ErrorKind::NotADirectory));
                }
                _ => {}
            }
        }
        if from_dir == to_dir && from_name == to_name {
            return Ok(());
        }
        let (from_count, to_count) =
            (state.dir(from_dir).volatile.len(), state.dir(to_dir).volatile.len());
        let replaces = state.dir(to_dir).volatile.contains_key(to_name);
        state.bind(vec![
            NameChange { dir: from_dir, name: from_name.to_owned(), target: None },
            NameChange { dir: to_dir, name: to_name.to_owned(), target: Some(ino) },
        ]);
        assert!(
            !state.dir(from_dir).volatile.contains_key(from_name)
                && state.dir(to_dir).volatile.get(to_name) == Some(&ino),
            "a rename moves the name: gone from its source, at its destination"
        );
        debug_assert!(
            if from_dir == to_dir {
                state.dir(to_dir).volatile.len() == to_count - usize::from(replaces)
            } else {
                state.dir(from_dir).volatile.len() == from_count - 1
                    && state.dir(to_dir).volatile.len() == to_count + usize::from(!replaces)
            },
            "a rename adds no name but its destination, and removes what it replaces"
        );
        Ok(())
    }

    fn hard_link(&self, from: &Path, to: &Path, boundary: Boundary) -> Result<()> {
        let op = OpKind::HardLink;
        let mut state = self.lock();
        let TwoPaths { ino, to_dir, to_name, .. } =
            state.begin_two_paths(op, from, to, boundary)?;
        if matches!(state.inode(ino).node, Node::Dir(_)) {
            return Err(io_error(op, from, boundary, io::ErrorKind::PermissionDenied));
        }
        if state.dir(to_dir).volatile.contains_key(to_name) {
            return Err(io_error(op, to, boundary, io::ErrorKind::AlreadyExists));
        }
        state.bind(vec![NameChange { dir: to_dir, name: to_name.to_owned(), target: Some(ino) }]);
        assert_eq!(
            state.dir(to_dir).volatile.get(to_name),
            Some(&ino),
            "a hard link names the source's inode"
        );
        Ok(())
    }

    fn remove_file(&self, path: &Path, boundary: Boundary) -> Result<()> {
        self.unlink(path, boundary, OpKind::RemoveFile)?;
        debug_assert!(self.lock().halted.is_none(), "an op that answers ran on a live machine");
        Ok(())
    }

    fn create_dir(&self, path: &Path, boundary: Boundary) -> Result<()> {
        let op = OpKind::CreateDir;
        let mut state = self.lock();
        let components = normalize(path, op)?;
        if let Verdict::Fail(fault) = state.begin(boundary, op, shown(path), String::new())? {
            return Err(fault_error(fault, op, path, boundary));
        }
        let (name, parents) = components
            .split_last()
            .ok_or_else(|| io_error(op, path, boundary, io::ErrorKind::AlreadyExists))?;
        let parent = state.lookup_dir(parents, op, path, boundary)?;
        if state.dir(parent).volatile.contains_key(*name) {
            return Err(io_error(op, path, boundary, io::ErrorKind::AlreadyExists));
        }
        let ino = state.new_inode(Node::Dir(DirNode::default()));
        state.bind(vec![NameChange { dir: parent, name: (*name).to_owned(), target: Some(ino) }]);
        assert!(
            matches!(state.inode(ino).node, Node::Dir(ref dir) if dir.volatile.is_empty()),
            "a new directory is empty"
        );
        Ok(())
    }

    fn remove_dir(&self, path: &Path, boundary: Boundary) -> Result<()> {
        self.unlink(path, boundary, OpKind::RemoveDir)?;
        debug_assert!(self.lock().halted.is_none(), "an op that answers ran on a live machine");
        Ok(())
    }

    fn sync_dir(&self, path: &Path, boundary: Boundary) -> Result<()> {
        let op = OpKind::SyncDir;
        let mut state = self.lock();
        let components = normalize(path, op)?;
        if let Verdict::Fail(fault) = state.begin(boundary, op, shown(path), String::new())? {
            // A failed directory fsync leaves its changes pending: they may or may not survive.
            return Err(fault_error(fault, op, path, boundary));
        }
        let dir = state.lookup_dir(&components, op, path, boundary)?;
        if state.rules.sync_makes_durable {
            state.sync_dir(dir);
        }
        debug_assert!(state.halted.is_none(), "an op that answers ran on a live machine");
        Ok(())
    }

    fn read_dir(&self, path: &Path) -> Result<Vec<DirEntry>> {
        let op = OpKind::ReadDir;
        let state = self.lock();
        let boundary = Boundary::new("read_dir");
        state.check_alive(boundary)?;
        let components = normalize(path, op)?;
        let dir = state.lookup_dir(&components, op, path, boundary)?;
        let entries: Vec<DirEntry> = state
            .dir(dir)
            .volatile
            .iter()
            .map(|(name, ino)| DirEntry {
                name: name.clone(),
                kind: match state.inode(*ino).node {
                    Node::File(_) => FileKind::File,
                    Node::Dir(_) => FileKind::Dir,
                    Node::Symlink(_) => FileKind::Symlink,
                    Node::Special => FileKind::Other,
                },
            })
            .collect();
        debug_assert!(entries.is_sorted(), "a listing is in name order");
        Ok(entries)
    }

    fn metadata(&self, path: &Path) -> Result<Metadata> {
        let op = OpKind::Metadata;
        let state = self.lock();
        let boundary = Boundary::new("metadata");
        state.check_alive(boundary)?;
        let components = normalize(path, op)?;
        let ino = state
            .lookup_components(&components)
            .ok_or_else(|| io_error(op, path, boundary, io::ErrorKind::NotFound))?;
        let inode = &state.inode(ino);
        let (len, kind) = match &inode.node {
            Node::File(file) => (file.volatile.len() as u64, FileKind::File),
            Node::Dir(_) => (0, FileKind::Dir),
            // The link itself (lstat), as the real filesystem reports it.
            Node::Symlink(target) => (target.len() as u64, FileKind::Symlink),
            Node::Special => (0, FileKind::Other),
        };
        debug_assert!(inode.modified_ms <= state.clock_ms, "nothing was modified after now");
        Ok(Metadata {
            len,
            kind,
            modified: SystemTime::UNIX_EPOCH + Duration::from_millis(inode.modified_ms),
        })
    }

    fn process_id(&self) -> u32 {
        debug_assert_ne!(self.process_id, 0, "a running process has an id");
        self.process_id
    }

    fn machine_id(&self) -> u64 {
        let machine = self.lock().machine;
        debug_assert_ne!(machine, 0, "a simulated machine is never the real one (0)");
        machine
    }

    fn process_start_ms(&self, pid: u32) -> Result<Option<u64>> {
        let state = self.lock();
        let start = state.processes.get(&pid).copied();
        debug_assert!(
            start.is_none_or(|start| start <= state.clock_ms),
            "a process started by now"
        );
        Ok(start)
    }
}

impl SimFs {
    /// Plants a symbolic link at `link` naming `target` (an absolute path), as another program
    /// with write access to the store would: durable at once, outside the crash model (the
    /// engine itself never creates links). Resolution follows it in a directory position; every
    /// open refuses it in the last position (`O_NOFOLLOW`: ELOOP); metadata and directory
    /// listings show the link itself; removal removes the link.
    pub fn symlink(&self, target: &Path, link: &Path) -> Result<()> {
        assert!(target.is_absolute(), "a planted link names an absolute path");
        let target = normalize(target, OpKind::Open)?.join("/");
        self.plant(link, Node::Symlink(format!("/{target}")), Boundary::new("symlink"))
    }

    /// Makes a special file (a FIFO) at `path`, durable at once (a test's setup, as
    /// [`SimFs::symlink`]): every open of it is refused, metadata and listings show
    /// [`FileKind::Other`], removal removes it.
    pub fn mkfifo(&self, path: &Path) -> Result<()> {
        self.plant(path, Node::Special, Boundary::new("mkfifo"))?;
        debug_assert!(
            self.metadata(path).is_ok_and(|metadata| metadata.kind == FileKind::Other),
            "a planted FIFO lists as a special file"
        );
        Ok(())
    }

    /// Puts `node` at `path`, durable at once (the setup of [`SimFs::symlink`] and
    /// [`SimFs::mkfifo`]): created and its directory synced, as another program would; an
    /// existing entry there is `AlreadyExists`.
    fn plant(&self, path: &Path, node: Node, boundary: Boundary) -> Result<()> {
        let op = OpKind::Open;
        let mut state = self.lock();
        state.check_alive(boundary)?;
        let components = normalize(path, op)?;
        let (name, parents) = components
            .split_last()
            .ok_or_else(|| io_error(op, path, boundary, io::ErrorKind::AlreadyExists))?;
        let parent = state.lookup_dir(parents, op, path, boundary)?;
        if state.dir(parent).volatile.contains_key(*name) {
            return Err(io_error(op, path, boundary, io::ErrorKind::AlreadyExists));
        }
        let ino = state.new_inode(node);
        // As the other program makes it durable: created, then its directory synced, which
        // makes what was pending there durable with it (a rename away of the name it takes).
        state.bind(vec![NameChange { dir: parent, name: (*name).to_owned(), target: Some(ino) }]);
        state.sync_dir(parent);
        debug_assert_eq!(
            state.dir(parent).durable.get(*name),
            Some(&ino),
            "a planted node's name is durable"
        );
        debug_assert!(
            !state.pending.iter().any(|pending| matches!(pending,
                Pending::Names { changes } if changes.iter().any(|change| change.target == Some(ino)))),
            "a planted node is durable at once, never pending"
        );
        Ok(())
    }

    fn unlink(&self, path: &Path, boundary: Boundary, op: OpKind) -> Result<()> {
        let mut state = self.lock();
        let components = normalize(path, op)?;
        if let Verdict::Fail(fault) = state.begin(boundary, op, shown(path), String::new())? {
            return Err(fault_error(fault, op, path, boundary));
        }
        let (name, parents) = components
            .split_last()
            .ok_or_else(|| io_error(op, path, boundary, io::ErrorKind::InvalidInput))?;
        let parent = state.lookup_dir(parents, op, path, boundary)?;
        let ino = *state
            .dir(parent)
            .volatile
            .get(*name)
            .ok_or_else(|| io_error(op, path, boundary, io::ErrorKind::NotFound))?;
        match (&state.inode(ino).node, op) {
            // Removing a link removes the link, never what it points to.
            (Node::File(_) | Node::Symlink(_) | Node::Special, OpKind::RemoveFile) => {}
            (Node::Dir(dir), OpKind::RemoveDir) if dir.volatile.is_empty() => {}
            (Node::Dir(_), OpKind::RemoveDir) => {
                return Err(io_error(op, path, boundary, io::ErrorKind::DirectoryNotEmpty));
            }
            (Node::Dir(_), _) => {
                return Err(io_error(op, path, boundary, io::ErrorKind::IsADirectory));
            }
            (Node::File(_) | Node::Symlink(_) | Node::Special, _) => {
                return Err(io_error(op, path, boundary, io::ErrorKind::NotADirectory));
            }
        }
        state.bind(vec![NameChange { dir: parent, name: (*name).to_owned(), target: None }]);
        assert!(!state.dir(parent).volatile.contains_key(*name), "a removed name is gone");
        debug_assert!(
            state.inodes.contains_key(&ino),
            "an unlinked inode stays for its open files"
        );
        Ok(())
    }
}

fn open_detail(options: OpenOptions) -> String {
    let mut flags = Vec::new();
    if options.create_new {
        flags.push("create_new");
    } else if options.create {
        flags.push("create");
    }
    if options.truncate {
        flags.push("truncate");
    }
    assert!(!flags.is_empty() || !options.mutates(), "a mutating open says how");
    flags.join(",")
}

/// A path as a trace entry names it: the text `Path::display` shows (both replace what is not
/// UTF-8 alike), without the formatting machinery (every mutating op names its path).
pub(crate) fn shown(path: &Path) -> String {
    let shown = path.to_string_lossy().into_owned();
    debug_assert!(shown.len() >= path.as_os_str().len(), "a shown path drops no byte");
    shown
}

fn io_error(op: OpKind, path: &Path, boundary: Boundary, kind: io::ErrorKind) -> Error {
    debug_assert_ne!(kind, io::ErrorKind::Other, "a simulated failure has the kind a kernel gives");
    Error::io(op, path, Some(boundary), io::Error::from(kind))
}

/// The error an injected fault produces, with the errno a real kernel would return.
fn fault_error(fault: Fault, op: OpKind, path: &Path, boundary: Boundary) -> Error {
    const EIO: i32 = 5;
    const ENOSPC: i32 = 28;
    debug_assert_ne!(fault, Fault::Crash, "a crash halts the machine: no op returns its error");
    let source = match fault {
        Fault::Enospc => io::Error::from_raw_os_error(ENOSPC),
        Fault::Crash | Fault::Eio | Fault::ShortWrite => io::Error::from_raw_os_error(EIO),
    };
    Error::io(op, path, Some(boundary), source)
}

/// The bytes `lo..hi` of `buf`, which its caller made hold them (a buffer grown to a write's
/// end, a chunk inside its snapshot): a miss is a bug of the simulation.
pub(crate) fn span(buf: &[u8], lo: usize, hi: usize) -> &[u8] {
    debug_assert!(lo <= hi, "a span runs forward");
    (buf.get(lo..hi).unwrap_or_else(|| panic!("bytes {lo}..{hi} of a buffer of {}", buf.len())))
        as _
}

/// The bytes `lo..hi` of `buf`, to be written (see [`span`]).
pub(crate) fn span_mut(buf: &mut [u8], lo: usize, hi: usize) -> &mut [u8] {
    debug_assert!(lo <= hi, "a span runs forward");
    let len = buf.len();
    (buf.get_mut(lo..hi).unwrap_or_else(|| panic!("bytes {lo}..{hi} of a buffer of {len}"))) as _
}

pub(crate) fn apply_write(buf: &mut Vec<u8>, offset: u64, bytes: &[u8]) {
    let start = to_usize(offset);
    let end = start + bytes.len();
    if buf.len() < end {
        buf.resize(end, 0);
    }
    span_mut(buf, start, end).copy_from_slice(bytes);
    debug_assert!(buf.len() >= end, "a write extends its file to at least its end");
}

pub(crate) fn apply_change(buf: &mut Vec<u8>, change: &DataChange) {
    match change {
        DataChange::Write { offset, bytes } => apply_write(buf, *offset, bytes),
        DataChange::SetLen { len } => {
            buf.resize(to_usize(*len), 0);
            debug_assert_eq!(buf.len() as u64, *len, "a length change sets the length");
        }
    }
}

pub(crate) fn to_usize(value: u64) -> usize {
    usize::try_from(value).expect("simulated files fit in memory")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trace names a path as it displays, a name that is not UTF-8 included.
    #[test]
    fn a_path_is_shown_as_it_displays() {
        let odd = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"/a/\xff\xfeb");
        for path in [Path::new("/store/sessions/s/timeline"), Path::new(odd), Path::new("")] {
            assert_eq!(shown(path), path.display().to_string());
        }
    }

    /// A machine whose directory names an inode that does not exist (a bug of the simulation)
    /// is refused the moment a crash would hand it out.
    #[test]
    #[should_panic(expected = "every entry, visible or durable, names an inode")]
    fn a_name_bound_to_a_missing_inode_trips_the_state_check() {
        let fs = SimFs::new(FaultPlan::none(1));
        fs.create_dir(Path::new("/d"), Boundary::new("test.mkdir")).expect("a directory");
        fs.lock().dir_mut(ROOT_INO).volatile.insert("ghost".to_owned(), 999);
        let _images = fs.crash(CrashMode::PowerLoss);
    }

    /// A pending change of data recorded against a directory is refused alike.
    #[test]
    #[should_panic(expected = "pending data is a file's")]
    fn data_pending_on_a_directory_trips_the_state_check() {
        let fs = SimFs::new(FaultPlan::none(1));
        fs.create_dir(Path::new("/d"), Boundary::new("test.mkdir")).expect("a directory");
        fs.lock()
            .pending
            .push(Pending::Data { ino: ROOT_INO, change: DataChange::SetLen { len: 1 } });
        let _restarted = fs.restart(FaultPlan::none(1));
    }
}
