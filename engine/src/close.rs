//! Close: the one physical deletion boundary.
//!
//! # Order (crash-atomic)
//!
//! Under the record lock, with no recovery (nothing in the session is read: a damaged record,
//! queue or segment does not block its deletion, and the ledger line says what it can):
//!
//! 1. Rename `sessions/<id>` to `.closing/<id>` and sync both directories: the commit point. The
//!    session is gone from every reader from here on.
//! 2. Under the ledger lock (`.session-locks/.close-ledger.lock`: closers of different sessions
//!    share the ledger), cut off a torn tail (an unsynced line a power loss cut), then append the
//!    existing implementation's close line to the close ledger and sync it (creating the ledger
//!    durably if new): `{"version":1,"action":"close-authorized","at":"<ts>",
//!    "source":{"kind":"user"},"target":{"id","harness","thread","worktree","branch"}}`.
//! 3. Revoke the session as a sender: create `.revoked-senders/<id>` holding `<id>\n`, and sync
//!    the directory.
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

use crate::boundaries::{self, Boundaries, CLOSE, CloseBoundaries};
use crate::error::{CorruptReason, Error, Result};
use crate::layout::SessionId;
use crate::lock;
use crate::mutant::{Mutant, active};
use crate::record::Record;
use crate::recover::Checks;
use crate::store::Store;
use crate::timeline::append_or_cut_back;

/// The close ledger as read.
#[derive(Debug, Default)]
struct Ledger {
    closures: Vec<Closure>,
    /// The length of its sound part: past it, a torn tail.
    sound_len: u64,
}

/// The `action` of a close line.
const CLOSE_AUTHORIZED: &str = "close-authorized";

/// A close found in the ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Closure {
    /// The closed session.
    pub id: String,
    /// When it was closed (the ledger's timestamp).
    pub closed_at: String,
}

impl<F: Fs> Store<F> {
    /// Closes session `id` (see the module header).
    pub fn close(&self, id: &SessionId) -> Result<()> {
        let checks = Checks { deleting: true, ..Checks::default() };
        self.transition_checked(id, &CLOSE, checks, |_| {
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
            self.finish_close(id, &CLOSE, false)?;
            debug_assert!(
                self.fs.exists(&self.layout.session_dir(id)).is_ok_and(|there| !there),
                "a closed session's directory is gone"
            );
            Ok(())
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
            let Ok(id) = SessionId::new(&entry.name) else { continue };
            // The closer may be finishing this close right now (it holds the session's lock
            // through its close): wait for it, and finish only what is still unfinished. A
            // holder alive past the wait finishes it itself.
            let steps = &boundaries::OPEN;
            let guard = match self.lock_file(&id, &self.layout.session_lock(&id), &steps.lock) {
                Ok(guard) => guard,
                Err(Error::Locked { .. }) => continue,
                Err(error) => return Err(error),
            };
            let finished = if self.fs.exists(&self.layout.closing(&id))? {
                self.finish_close(&id, steps, true)
            } else {
                Ok(())
            };
            guard.release()?;
            finished?;
            debug_assert!(
                self.fs.exists(&self.layout.revoked(&id)).is_ok_and(|there| there),
                "a close finished on open leaves its sender revoked"
            );
        }
        Ok(())
    }

    /// The commit's directory syncs: `.closing` (the new name) and `sessions` (the old one).
    fn sync_commit(&self, steps: &Boundaries) -> Result<()> {
        // The rename left `sessions` for `.closing`: both names must be durable.
        debug_assert_ne!(
            self.layout.closing_dir(),
            self.layout.sessions_dir(),
            "a commit moves a session between two directories"
        );
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
            self.append_ledger_line(id, close)?;
        }
        let revoked_dir = self.layout.revoked_dir();
        self.ensure_dir_all(&revoked_dir, steps)?;
        let marker = self.layout.revoked(id);
        if !self.fs.exists(&marker)? {
            let file = self.fs.open(&marker, OpenOptions::create(), close.revoke_create)?;
            file.append(format!("{id}\n").as_bytes(), close.revoke_write)?;
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
        debug_assert!(
            self.fs.exists(&marker).is_ok_and(|there| there)
                && self.fs.exists(&closing).is_ok_and(|there| !there),
            "a finished close leaves its sender revoked and nothing of the session to delete"
        );
        Ok(())
    }

    /// The ledger line closing `id`, from its record (in `sessions/` before the commit, in
    /// `.closing/` after it; a record that cannot be read gives what the line can still say).
    fn ledger_line(&self, id: &SessionId) -> Result<String> {
        let record = [self.layout.record(id), self.layout.closing(id).join("session.json")]
            .into_iter()
            .find_map(|path| {
                let bytes = crate::atomic::read(&self.fs, &path).ok()??;
                Record::parse(&bytes, &path).ok()
            });
        let line = serde_json::json!({
            "version": 1,
            "action": CLOSE_AUTHORIZED,
            "at": crate::env::format_ts(self.clock.now_ms()),
            "source": {"kind": "user"},
            "target": {
                "id": id.as_str(),
                "harness": record.as_ref().map_or("claude", Record::harness),
                "thread": record.as_ref().and_then(Record::harness_session_id),
                "worktree": record.as_ref().and_then(Record::worktree).unwrap_or(""),
                "branch": record.as_ref().and_then(Record::branch),
            },
        });
        let line = line.to_string();
        debug_assert!(!line.contains('\n'), "a ledger line is one line");
        Ok(line)
    }

    /// Appends the close line of `id` to the ledger, durably, under the ledger lock (closers of
    /// different sessions share the ledger). A torn tail (an unsynced line a power loss cut) is
    /// cut off first, so the new line never glues onto it; a failed append or sync is cut back,
    /// so that nobody rests on it (as for the log).
    fn append_ledger_line(&self, id: &SessionId, close: &CloseBoundaries) -> Result<()> {
        let guard = lock::acquire(
            &self.fs,
            self.clock.as_ref(),
            &self.layout.close_ledger_lock(),
            self.config.lock_wait_ms,
            &close.ledger_lock,
        )?;
        let ledger = self.layout.close_ledger();
        let existed = self.fs.exists(&ledger)?;
        let file = self.fs.open(&ledger, OpenOptions::create(), close.ledger_create)?;
        let sound = if active(Mutant::LedgerAppendAfterTornTail) {
            file.len()?
        } else {
            self.read_ledger()?.sound_len
        };
        if file.len()? > sound {
            file.set_len(sound, close.ledger_repair)?;
            file.sync_data(close.ledger_repair_sync)?;
        }
        let mut bytes = self.ledger_line(id)?.into_bytes();
        bytes.push(b'\n');
        debug_assert!(Self::parses_as_close(&bytes, id), "the line appended reads as this close");
        let boundaries = (close.ledger_append, close.ledger_sync);
        let sync = !active(Mutant::CloseLedgerUnsynced);
        append_or_cut_back(&file, sound, &bytes, boundaries, boundaries, sync)?;
        if !existed {
            self.fs.sync_dir(self.layout.root(), close.ledger_dir_sync)?;
        }
        debug_assert!(
            file.len().is_ok_and(|len| len == sound + bytes.len() as u64),
            "the ledger grew by exactly the close's line"
        );
        guard.release()
    }

    /// Whether the close ledger has a line for `id`. Reads the whole ledger: only recovery of an
    /// interrupted close asks.
    fn ledger_has(&self, id: &SessionId) -> Result<bool> {
        Ok(self.closures()?.iter().any(|closure| closure.id == id.as_str()))
    }

    /// Every close in the ledger, in order (the existing implementation's lines, and this
    /// engine's earlier `{"ts","id"}` lines). Blank lines are skipped and lines of other actions
    /// ignored; a close without a string id and time, or a line that is not JSON with a sound
    /// line after it, is corrupt (naming the ledger and the line's offset), as the existing
    /// reader refuses it. Damaged final lines (not JSON, or holding NUL bytes) with only damaged
    /// lines after them are a torn tail: an unsynced close line a power loss cut, never
    /// acknowledged; they are left out, and the next closer cuts them off.
    pub fn closures(&self) -> Result<Vec<Closure>> {
        let ledger = self.read_ledger()?;
        debug_assert!(
            ledger.closures.is_empty() || ledger.sound_len > 0,
            "a close is read from the sound part of the ledger"
        );
        Ok(ledger.closures)
    }

    fn read_ledger(&self) -> Result<Ledger> {
        let path = self.layout.close_ledger();
        let bytes = match self.fs.read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.io_kind() == Some(std::io::ErrorKind::NotFound) => {
                return Ok(Ledger::default());
            }
            Err(error) => return Err(error.into()),
        };
        let corrupt = |offset: u64, why: &str| Error::Corrupt {
            path: path.clone(),
            offset,
            reason: CorruptReason::BadLine(why.to_owned()),
        };
        let mut ledger = Ledger::default();
        let mut damaged: Option<u64> = None;
        let mut offset = 0u64;
        for line in bytes.split_inclusive(|&b| b == b'\n') {
            let at = offset;
            offset += line.len() as u64;
            let Some(body) = line.strip_suffix(b"\n") else { break };
            let value = if body.contains(&0) {
                None
            } else {
                serde_json::from_slice::<serde_json::Value>(body).ok()
            };
            let blank = body.iter().all(u8::is_ascii_whitespace);
            let Some(value) = value.filter(|_| !blank) else {
                if !blank {
                    damaged.get_or_insert(at);
                }
                continue;
            };
            if let Some(first) = damaged {
                return Err(corrupt(first, "session close history is unreadable"));
            }
            ledger.sound_len = offset;
            let text = |value: Option<&serde_json::Value>| {
                value.and_then(serde_json::Value::as_str).map(str::to_owned)
            };
            let closure = match value.get("action").and_then(serde_json::Value::as_str) {
                Some(CLOSE_AUTHORIZED) => Closure {
                    id: text(value.pointer("/target/id"))
                        .ok_or_else(|| corrupt(at, "a close without a target id"))?,
                    closed_at: text(value.get("at"))
                        .ok_or_else(|| corrupt(at, "a close without a time"))?,
                },
                Some(_) => continue,
                None => match (text(value.get("id")), text(value.get("ts"))) {
                    (Some(id), Some(closed_at)) => Closure { id, closed_at },
                    _ => continue,
                },
            };
            ledger.closures.push(closure);
        }
        if damaged.is_none() {
            // Blank lines after the last close are sound too.
            let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |at| at as u64 + 1);
            ledger.sound_len = ledger.sound_len.max(complete);
        }
        assert!(ledger.sound_len <= bytes.len() as u64, "the sound part is a prefix");
        Ok(ledger)
    }

    /// Whether `line` is a `close-authorized` line naming `id` (a check of what is appended).
    fn parses_as_close(line: &[u8], id: &SessionId) -> bool {
        debug_assert!(
            line.iter().filter(|&&byte| byte == b'\n').count() <= 1,
            "a close is checked one line at a time"
        );
        serde_json::from_slice::<serde_json::Value>(line).is_ok_and(|value| {
            value.get("action").and_then(serde_json::Value::as_str) == Some(CLOSE_AUTHORIZED)
                && value.pointer("/target/id").and_then(serde_json::Value::as_str)
                    == Some(id.as_str())
        })
    }

    /// The close of the session `selector` names (its id, or a prefix of exactly one closed
    /// id), as the existing implementation finds it: `None` when no close matches, an error when
    /// two different ids do.
    pub fn closure(&self, selector: &str) -> Result<Option<Closure>> {
        let mut found: Option<Closure> = None;
        for closure in self.closures()? {
            if closure.id == selector {
                return Ok(Some(closure));
            }
            if !selector.is_empty() && closure.id.starts_with(selector) {
                match &found {
                    Some(other) if other.id != closure.id => {
                        return Err(Error::InvalidInput {
                            what: "session",
                            reason: format!(
                                "{selector:?} matches more than one closed session ({} and {})",
                                other.id, closure.id
                            ),
                        });
                    }
                    Some(_) => {}
                    None => found = Some(closure),
                }
            }
        }
        debug_assert!(
            found.as_ref().is_none_or(|closure| closure.id.starts_with(selector)),
            "a close found by prefix is one the selector begins"
        );
        Ok(found)
    }

    /// Removes a directory tree (files first, then directories).
    fn remove_tree(&self, path: &Path, steps: &Boundaries) -> Result<()> {
        assert!(
            path.starts_with(self.layout.sessions_dir())
                || path.starts_with(self.layout.closing_dir()),
            "a close removes a session's own tree, nothing else"
        );
        let entries = match self.fs.read_dir(path) {
            Ok(entries) => entries,
            Err(error) if error.io_kind() == Some(std::io::ErrorKind::NotFound) => return Ok(()),
            Err(error) => return Err(error.into()),
        };
        for entry in entries {
            let child = path.join(&entry.name);
            match entry.kind {
                FileKind::Dir => self.remove_tree(&child, steps)?,
                // A link is removed itself, never what it points to: nothing outside the
                // session's directory is touched.
                FileKind::File | FileKind::Symlink | FileKind::Other => {
                    self.fs.remove_file(&child, steps.close.remove)?;
                }
            }
        }
        self.fs.remove_dir(path, steps.close.remove)?;
        Ok(())
    }
}
