//! Close: the one physical deletion boundary.
//!
//! # Order (crash-atomic)
//!
//! Under the record lock, after recovery:
//!
//! 1. Rename `sessions/<id>` to `.closing/<id>` and sync both directories: the commit point. The
//!    session is gone from every reader from here on.
//! 2. Append `{"ts","id"}` to the close ledger and sync it (creating the ledger durably if new).
//! 3. Revoke the session as a sender: create `.revoked-senders/<id>` and sync the directory.
//! 4. Remove `.closing/<id>` recursively and sync `.closing`.
//!
//! A crash before 1 leaves the session fully open; after 1, [`Store::open`] finishes steps 2-4
//! for every `.closing/<id>` it finds (adding the ledger line only if the ledger lacks it). So
//! after recovery a session is either fully open or fully closed, never half-deleted.
//!
//! What recovery finds may be a killed closer's, visible but not durable (a kill is not a sync):
//! before finishing, it syncs both directories of the commit, and a ledger line it finds rather
//! than writes is synced before anything rests on it. Otherwise a power loss after recovery could
//! bring the session back with its ledger line and revocation already written.

use std::path::Path;

use faultfs::{File, FileKind, Fs, OpenOptions};

use crate::boundaries::{self, Boundaries, CLOSE};
use crate::error::Result;
use crate::layout::SessionId;
use crate::mutant::{Mutant, active};
use crate::store::Store;
use crate::timeline::append_or_cut_back;

impl<F: Fs> Store<F> {
    /// Closes session `id` (see the module header).
    pub fn close(&self, id: &SessionId) -> Result<()> {
        self.transition(id, &CLOSE, || {
            self.require_session(id)?;
            if active(Mutant::CloseDeletesBeforeRevoking) {
                self.remove_tree(&self.layout.session_dir(id), &CLOSE)?;
                self.fs.sync_dir(&self.layout.sessions_dir(), CLOSE.close.commit_sync_sessions)?;
                self.receipts.forget(id);
                return self.finish_close(id, &CLOSE, false);
            }
            let closing_dir = self.layout.closing_dir();
            self.ensure_dir_all(&closing_dir, &CLOSE)?;
            self.fs.rename(
                &self.layout.session_dir(id),
                &self.layout.closing(id),
                CLOSE.close.commit,
            )?;
            self.sync_commit(&CLOSE)?;
            self.receipts.forget(id);
            self.finish_close(id, &CLOSE, false)
        })
    }

    /// Finishes every close interrupted after its commit point.
    pub(crate) fn finish_closes(&self) -> Result<()> {
        let closing_dir = self.layout.closing_dir();
        let entries = match self.fs.read_dir(&closing_dir) {
            Ok(entries) => entries,
            Err(error) if error.io_kind() == Some(std::io::ErrorKind::NotFound) => return Ok(()),
            Err(error) => return Err(error.into()),
        };
        for entry in entries {
            if let Ok(id) = SessionId::new(&entry.name) {
                self.finish_close(&id, &boundaries::OPEN, true)?;
            }
        }
        Ok(())
    }

    /// The commit's directory syncs: `.closing` (the new name) and `sessions` (the old one).
    fn sync_commit(&self, steps: &Boundaries) -> Result<()> {
        self.fs.sync_dir(&self.layout.closing_dir(), steps.close.commit_sync_closing)?;
        self.fs.sync_dir(&self.layout.sessions_dir(), steps.close.commit_sync_sessions)?;
        Ok(())
    }

    /// Boundaries 2-4. With `recovering`, the commit and a ledger line found are made durable first
    /// (they may be a killed closer's), and the ledger line is added only if missing.
    fn finish_close(&self, id: &SessionId, steps: &Boundaries, recovering: bool) -> Result<()> {
        let ledger = self.layout.close_ledger();
        let close = &steps.close;
        if recovering && !active(Mutant::CloseRecoveryFromUnsynced) {
            self.sync_commit(steps)?;
        }
        let found = recovering && self.ledger_has(id)?;
        if found && !active(Mutant::CloseRecoveryFromUnsynced) {
            let file = self.fs.open(&ledger, OpenOptions::read_write(), close.ledger_sync)?;
            file.sync_data(close.ledger_sync)?;
            self.fs.sync_dir(self.layout.root(), close.ledger_dir_sync)?;
        }
        if !found {
            let existed = self.fs.exists(&ledger)?;
            let file = self.fs.open(&ledger, OpenOptions::create(), close.ledger_create)?;
            let line = serde_json::json!({
                "ts": crate::env::format_ts(self.clock.now_ms()),
                "id": id.as_str(),
            });
            let mut bytes = line.to_string().into_bytes();
            bytes.push(b'\n');
            // As for the log: a failed append or sync is cut back, so that nobody rests on it.
            let len = file.len()?;
            let boundaries = (close.ledger_append, close.ledger_sync);
            let sync = !active(Mutant::CloseLedgerUnsynced);
            append_or_cut_back(&file, len, &bytes, boundaries, boundaries, sync)?;
            if !existed {
                self.fs.sync_dir(self.layout.root(), close.ledger_dir_sync)?;
            }
        }
        let revoked_dir = self.layout.revoked_dir();
        self.ensure_dir_all(&revoked_dir, steps)?;
        let marker = self.layout.revoked(id);
        if !self.fs.exists(&marker)? {
            let file = self.fs.open(&marker, OpenOptions::create(), close.revoke_create)?;
            file.append(crate::env::format_ts(self.clock.now_ms()).as_bytes(), close.revoke_write)?;
            file.sync_all(close.revoke_sync)?;
            if !active(Mutant::RevokeWithoutDirSync) {
                self.fs.sync_dir(&revoked_dir, close.revoke_dir_sync)?;
            }
        } else if recovering && !active(Mutant::CloseRecoveryFromUnsynced) {
            // A marker found may be a killed closer's too.
            self.fs.sync_dir(&revoked_dir, close.revoke_dir_sync)?;
        }
        let closing = self.layout.closing(id);
        if self.fs.exists(&closing)? {
            self.remove_tree(&closing, steps)?;
            self.fs.sync_dir(&self.layout.closing_dir(), close.remove_sync)?;
        }
        Ok(())
    }

    /// Whether the close ledger has a line for `id`. Reads the whole ledger: only recovery of an
    /// interrupted close asks.
    fn ledger_has(&self, id: &SessionId) -> Result<bool> {
        let bytes = match self.fs.read(&self.layout.close_ledger()) {
            Ok(bytes) => bytes,
            Err(error) if error.io_kind() == Some(std::io::ErrorKind::NotFound) => {
                return Ok(false);
            }
            Err(error) => return Err(error.into()),
        };
        Ok(bytes.split(|&b| b == b'\n').any(|line| {
            serde_json::from_slice::<serde_json::Value>(line)
                .ok()
                .is_some_and(|value| value.get("id").and_then(|v| v.as_str()) == Some(id.as_str()))
        }))
    }

    /// Removes a directory tree (files first, then directories).
    fn remove_tree(&self, path: &Path, steps: &Boundaries) -> Result<()> {
        let entries = match self.fs.read_dir(path) {
            Ok(entries) => entries,
            Err(error) if error.io_kind() == Some(std::io::ErrorKind::NotFound) => return Ok(()),
            Err(error) => return Err(error.into()),
        };
        for entry in entries {
            let child = path.join(&entry.name);
            match entry.kind {
                FileKind::Dir => self.remove_tree(&child, steps)?,
                FileKind::File => self.fs.remove_file(&child, steps.close.remove)?,
            }
        }
        self.fs.remove_dir(path, steps.close.remove)?;
        Ok(())
    }
}
