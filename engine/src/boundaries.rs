//! The boundaries of every transition: one stable name per write step, `<transition>.<artifact>.
//! <step>` (e.g. `send.log.append`, `send.log.sync`, `send.queue.rename`). Crash sweeps crash at
//! each of them and failure reports name them.

use faultfs::Boundary;

use crate::atomic::{ReplaceBoundaries, StateFile};
use crate::lock::LockBoundaries;
use crate::timeline::LogBoundaries;

/// The boundaries of one transition.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Boundaries {
    pub(crate) log: LogBoundaries,
    pub(crate) record: ReplaceBoundaries,
    pub(crate) queue: ReplaceBoundaries,
    /// The drain adapter spec written at creation.
    pub(crate) adapter: ReplaceBoundaries,
    pub(crate) index: ReplaceBoundaries,
    pub(crate) lock: LockBoundaries,
    pub(crate) delivery_lock: LockBoundaries,
    /// Recovery run at the start of the transition.
    pub(crate) recover_record: ReplaceBoundaries,
    pub(crate) recover_remove: Boundary,
    pub(crate) recover_dir_sync: Boundary,
    /// Close and its recovery.
    pub(crate) close: CloseBoundaries,
    /// Directory creation and other one-off steps.
    pub(crate) mkdir: Boundary,
    pub(crate) mkdir_sync: Boundary,
}

macro_rules! replace_boundaries {
    ($prefix:expr, $file:expr) => {
        ReplaceBoundaries {
            file: $file,
            create: Boundary::new(concat!($prefix, ".tmp-create")),
            write: Boundary::new(concat!($prefix, ".tmp-write")),
            sync: Boundary::new(concat!($prefix, ".tmp-sync")),
            rename: Boundary::new(concat!($prefix, ".rename")),
            dir_sync: Boundary::new(concat!($prefix, ".dirsync")),
            remove: Boundary::new(concat!($prefix, ".remove")),
        }
    };
}

macro_rules! lock_boundaries {
    ($prefix:expr) => {
        LockBoundaries {
            create: Boundary::new(concat!($prefix, ".create")),
            write: Boundary::new(concat!($prefix, ".write")),
            link: Boundary::new(concat!($prefix, ".link")),
            unlink_tmp: Boundary::new(concat!($prefix, ".unlink-tmp")),
            takeover: Boundary::new(concat!($prefix, ".takeover")),
            remove: Boundary::new(concat!($prefix, ".release")),
        }
    };
}

/// The boundaries of a close (and of finishing one after a crash): its commit, the ledger, the
/// revocation and the removal each have names of their own.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CloseBoundaries {
    /// The commit point: the session directory moves to `.closing/`.
    pub(crate) commit: Boundary,
    /// The commit's two directory syncs (`.closing`, then `sessions`); recovery repeats them
    /// before it acts on a commit it did not make.
    pub(crate) commit_sync_closing: Boundary,
    pub(crate) commit_sync_sessions: Boundary,
    /// The ledger lock: closers of different sessions append to one ledger.
    pub(crate) ledger_lock: LockBoundaries,
    pub(crate) ledger_create: Boundary,
    /// Cutting off a torn tail before appending.
    pub(crate) ledger_repair: Boundary,
    pub(crate) ledger_repair_sync: Boundary,
    pub(crate) ledger_append: Boundary,
    pub(crate) ledger_sync: Boundary,
    pub(crate) ledger_dir_sync: Boundary,
    pub(crate) revoke_create: Boundary,
    pub(crate) revoke_write: Boundary,
    pub(crate) revoke_sync: Boundary,
    pub(crate) revoke_dir_sync: Boundary,
    pub(crate) remove: Boundary,
    /// The third directory sync: `.closing` after the removal.
    pub(crate) remove_sync: Boundary,
}

macro_rules! close_boundaries {
    ($prefix:expr) => {
        CloseBoundaries {
            commit: Boundary::new(concat!($prefix, ".commit.rename")),
            commit_sync_closing: Boundary::new(concat!($prefix, ".commit.dirsync-closing")),
            commit_sync_sessions: Boundary::new(concat!($prefix, ".commit.dirsync-sessions")),
            ledger_lock: lock_boundaries!(concat!($prefix, ".ledger-lock")),
            ledger_create: Boundary::new(concat!($prefix, ".ledger.create")),
            ledger_repair: Boundary::new(concat!($prefix, ".ledger.repair")),
            ledger_repair_sync: Boundary::new(concat!($prefix, ".ledger.repair-sync")),
            ledger_append: Boundary::new(concat!($prefix, ".ledger.append")),
            ledger_sync: Boundary::new(concat!($prefix, ".ledger.sync")),
            ledger_dir_sync: Boundary::new(concat!($prefix, ".ledger.dirsync")),
            revoke_create: Boundary::new(concat!($prefix, ".revoke.create")),
            revoke_write: Boundary::new(concat!($prefix, ".revoke.write")),
            revoke_sync: Boundary::new(concat!($prefix, ".revoke.sync")),
            revoke_dir_sync: Boundary::new(concat!($prefix, ".revoke.dirsync")),
            remove: Boundary::new(concat!($prefix, ".remove")),
            remove_sync: Boundary::new(concat!($prefix, ".remove.dirsync")),
        }
    };
}

macro_rules! boundaries {
    ($t:literal) => {
        Boundaries {
            log: LogBoundaries {
                mkdir: Boundary::new(concat!($t, ".log.mkdir")),
                mkdir_sync: Boundary::new(concat!($t, ".log.mkdir-sync")),
                create: Boundary::new(concat!($t, ".log.create")),
                dir_sync: Boundary::new(concat!($t, ".log.dirsync")),
                append: Boundary::new(concat!($t, ".log.append")),
                sync: Boundary::new(concat!($t, ".log.sync")),
                repair: Boundary::new(concat!($t, ".log.repair")),
                repair_sync: Boundary::new(concat!($t, ".log.repair-sync")),
                vouch: Boundary::new(concat!($t, ".log.vouch")),
                vouch_dir_sync: Boundary::new(concat!($t, ".log.vouch-dirsync")),
                vouch_session_dir_sync: Boundary::new(concat!($t, ".log.vouch-session-dirsync")),
                vouch_sessions_dir_sync: Boundary::new(concat!($t, ".log.vouch-sessions-dirsync")),
            },
            record: replace_boundaries!(concat!($t, ".record"), StateFile::Record),
            queue: replace_boundaries!(concat!($t, ".queue"), StateFile::Queue),
            adapter: replace_boundaries!(concat!($t, ".adapter"), StateFile::Record),
            index: replace_boundaries!(concat!($t, ".index"), StateFile::Index),
            lock: lock_boundaries!(concat!($t, ".lock")),
            delivery_lock: lock_boundaries!(concat!($t, ".delivery-lock")),
            recover_record: replace_boundaries!(concat!($t, ".recover.record"), StateFile::Record),
            recover_remove: Boundary::new(concat!($t, ".recover.remove")),
            recover_dir_sync: Boundary::new(concat!($t, ".recover.dirsync")),
            close: close_boundaries!(concat!($t, ".close")),
            mkdir: Boundary::new(concat!($t, ".mkdir")),
            mkdir_sync: Boundary::new(concat!($t, ".mkdir-sync")),
        }
    };
}

pub(crate) const OPEN: Boundaries = boundaries!("open");
pub(crate) const CREATE: Boundaries = boundaries!("create");
pub(crate) const APPEND: Boundaries = boundaries!("append");
pub(crate) const SEND: Boundaries = boundaries!("send");
pub(crate) const DRAIN: Boundaries = boundaries!("drain");
pub(crate) const ARCHIVE: Boundaries = boundaries!("archive");
pub(crate) const CLOSE: Boundaries = boundaries!("close");
pub(crate) const RECOVER: Boundaries = boundaries!("recover");
