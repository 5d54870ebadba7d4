//! Deliberately broken engine variants, for proving that the verification sweeps can fail.
//!
//! Each mutant removes or reorders one step the crash story depends on. They exist only with the
//! `mutants` feature; without it [`active`] is a constant `false` and every hook compiles away.
//! With it, a mutant is selected per thread ([`select`]), so one sweep can run every variant in
//! turn and nothing else in the process is affected. No mutant is ever active by default.

/// Declares the mutants: the enum, and the lists the catalogue and the loom model run, generated
/// from the declaration so a new variant cannot be left out of them.
macro_rules! mutants {
    (
        crash { $( $(#[$crash_doc:meta])* $crash:ident, )* }
        concurrency { $( $(#[$concurrency_doc:meta])* $concurrency:ident, )* }
    ) => {
        /// A broken variant of the engine.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Mutant {
            $( $(#[$crash_doc])* $crash, )*
            $( $(#[$concurrency_doc])* $concurrency, )*
        }

        impl Mutant {
            /// Every mutant the crash sweeps must catch, in the catalogue's order.
            pub const ALL: [Mutant; [$(Mutant::$crash),*].len()] = [$(Mutant::$crash),*];

            /// Mutants only concurrency exposes (the loom model catches them).
            pub const CONCURRENCY: [Mutant; [$(Mutant::$concurrency),*].len()] =
                [$(Mutant::$concurrency),*];
        }
    };
}

mutants! {
    crash {
        /// The log append is never `fdatasync`ed.
        NoLogSync,
        /// A new segment's directory entry is never synced.
        NoSegmentDirSync,
        /// A send is acknowledged before its line is synced (the sync happens at the next write).
        AckBeforeSync,
        /// The queue's rename is never made durable by a directory sync.
        NoQueueDirSync,
        /// The record's staging file is renamed into place without being synced.
        NoRecordTmpSync,
        /// Recovery does not repair a torn tail before the next append.
        NoTornTailRepair,
        /// The drain hands keyed entries to the adapter without checking their receipt.
        SkipReceiptFence,
        /// The drain removes a keyed entry before appending its settlement.
        SettleAfterRemoval,
        /// A send publishes its queue entry before appending its line.
        EnqueueBeforeAppend,
        /// A rollover writes into the segment it seals.
        RolloverTouchesSealed,
        /// Close deletes the session before recording and revoking it.
        CloseDeletesBeforeRevoking,
        /// A lifecycle write replaces the record before logging its move.
        RecordBeforeEvent,
        /// Recovery does not roll a lagging record forward.
        NoRollForward,
        /// Recovery compares the last logged move with the record's own triple instead of what
        /// readers see, so a launch in flight (whose fence freezes the public triple) looks like a
        /// record behind its log and is ended by the next writer.
        RollForwardIgnoresLaunch,
        /// A keyed replay does not restore a lost queue entry.
        ReplayWithoutRestore,
        /// A new session's directory entry is never synced.
        NoSessionDirSync,
        /// A failed append or sync leaves the segment as it is, so the next writer appends after
        /// bytes a failed sync may have dropped.
        AppendAfterFailedSync,
        /// Torn-tail repair writes the sound prefix to a new file and renames it over the segment
        /// without syncing either.
        RepairByUnsyncedCopy,
        /// Torn-tail repair also cuts the last complete line.
        RepairCutsCompleteLine,
        /// A failed write or sync does not poison the session in its handle.
        NoPoisonAfterFailedWrite,
        /// A keyed replay restores the queue entry without syncing the directory after the rename.
        RestoreWithoutDirSync,
        /// Finishing an interrupted close acts on its commit, ledger line and revocation marker
        /// without making them durable first.
        CloseRecoveryFromUnsynced,
        /// A writer that took the lock over from a dead holder acts on what it left without making
        /// it durable first (a keyed replay, a roll-forward, an append, a drain resting on unsynced
        /// bytes).
        NoVouchAfterTakeover,
        /// A drain that takes the record lock over from a dead holder acts on what it left without
        /// making it durable first (the other transitions vouch): reachable only when a drain is the
        /// first command after a crash.
        DrainTakeoverWithoutVouch,
        /// An archive that takes the record lock over from a dead holder acts on what it left
        /// without making it durable first: reachable only when an archive is the first command.
        ArchiveTakeoverWithoutVouch,
        /// A transition that takes the record lock over from a dead holder rolls the record forward
        /// to the holder's last status line before vouching for that line (recovery itself keeps
        /// the order): a crash between the two, then a power loss, keeps a record whose move the
        /// log lost. Only a crash inside a first command's takeover shows it.
        RollForwardBeforeVouch,
        /// A transition whose write or sync failed removes its lock as on success: the next
        /// process takes the lock without a takeover and acts on the failed step's unsynced bytes
        /// without vouching for them.
        ReleaseAfterFailedWrite,
        /// Vouching syncs the oldest numbered segment instead of the newest (after a rollover, the
        /// dead holder's last lines stay unsynced).
        VouchSyncsOldestSegment,
        /// Vouching syncs the newest segment but none of the directories (a renamed record or
        /// queue, a new segment's name stay pending).
        VouchSkipsDirectories,
        /// Torn-tail repair cuts an unterminated end but keeps damaged complete lines (NUL bytes,
        /// stale garbage), so the next append lands after them.
        RepairKeepsDamagedLines,
        /// Close appends its ledger line without syncing it.
        CloseLedgerUnsynced,
        /// Close appends its ledger line after a torn tail instead of cutting it off first, so the
        /// line glues onto the fragment.
        LedgerAppendAfterTornTail,
        /// Close creates the revocation marker without syncing its directory.
        RevokeWithoutDirSync,
        /// A cursor at the start of a segment is pinned to nothing (so a reader trusts it even
        /// after a power loss took that segment back and the writer went on in the one before).
        EmptyPinAtSegmentStart,
        /// The persisted receipt index is trusted without checking its checksum.
        IndexWithoutChecksum,
        /// A drain whose adapter refused a head commits its whole batch anyway (the refused head
        /// and those after it are removed undelivered).
        DrainCommitsRefused,
        /// A batch of sends appends its lines and syncs once after the last (a power loss can keep
        /// a later line and lose an earlier one).
        BatchSharesOneSync,
        /// The lock-free receipt lookup (`Store::receipt`) answers from the persisted receipt index
        /// alone, without folding the log past it (a keyed send after the index was last written
        /// is not found).
        LockFreeReceiptWithoutRefresh,
    }
    concurrency {
        /// A send reads the queue before taking the record lock (a lost update under concurrency;
        /// caught by the loom model, not by the single-threaded crash sweeps).
        QueueReadOutsideLock,
        /// A taker replaces a lock it judged stale without reading it again under the takeover
        /// flock (so it can replace the fresh lock another taker just made: two holders at once;
        /// caught by the loom model, and modelled in `verification::lock_protocol`).
        TakeoverWithoutRecheck,
        /// The leader of a batch of sends answers its members without waking them (a lost wakeup:
        /// a member waiting for its answer sleeps forever).
        GroupWithoutWakeup,
    }
}

impl Mutant {
    /// The mutant's kebab-case name.
    pub fn name(self) -> String {
        let debug = format!("{self:?}");
        let mut name = String::new();
        for (i, c) in debug.chars().enumerate() {
            if c.is_ascii_uppercase() && i > 0 {
                name.push('-');
            }
            name.push(c.to_ascii_lowercase());
        }
        debug_assert!(
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'),
            "a mutant's name is kebab-case"
        );
        name
    }

    /// Parses a kebab-case name.
    pub fn parse(name: &str) -> Option<Mutant> {
        let mutant =
            Mutant::ALL.into_iter().chain(Mutant::CONCURRENCY).find(|mutant| mutant.name() == name);
        debug_assert!(mutant.is_none_or(|mutant| mutant.name() == name), "a name parses to itself");
        mutant
    }
}

#[cfg(feature = "mutants")]
thread_local! {
    static SELECTED: std::cell::Cell<Option<Mutant>> = const { std::cell::Cell::new(None) };
}

/// Selects `mutant` for the calling thread (`None`: the real engine).
#[cfg(feature = "mutants")]
pub fn select(mutant: Option<Mutant>) {
    SELECTED.with(|selected| selected.set(mutant));
    debug_assert_eq!(selected(), mutant, "a thread runs the variant selected on it");
}

/// The mutant selected on the calling thread (so a sweep can select it on its workers too).
#[cfg(feature = "mutants")]
pub fn selected() -> Option<Mutant> {
    SELECTED.with(std::cell::Cell::get)
}

/// Whether `mutant` is selected on the calling thread.
#[cfg(feature = "mutants")]
pub(crate) fn active(mutant: Mutant) -> bool {
    SELECTED.with(|selected| selected.get() == Some(mutant))
}

/// Without the `mutants` feature there is nothing to select: the engine has no broken variant.
#[cfg(not(feature = "mutants"))]
pub fn select(_mutant: Option<Mutant>) {}

/// Nothing is selected without the `mutants` feature.
#[cfg(not(feature = "mutants"))]
pub fn selected() -> Option<Mutant> {
    None
}

/// Whether `mutant` is selected: never, without the `mutants` feature.
#[cfg(not(feature = "mutants"))]
#[inline(always)]
pub(crate) const fn active(_mutant: Mutant) -> bool {
    false
}
