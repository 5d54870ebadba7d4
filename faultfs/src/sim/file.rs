//! Open files of a [`SimFs`]: positioned and appending writes, syncs (with fsyncgate on a failed
//! one), reads of the volatile bytes, and advisory locks held per open file.

use std::io;
use std::path::{Path, PathBuf};

use super::{Ino, Node, SimFs, Verdict, fault_error, io_error, shown, span, span_mut, to_usize};
use crate::{Boundary, Error, Fault, File, OpKind, Result};

/// An open file of a [`SimFs`].
#[derive(Debug)]
pub struct SimFile {
    pub(super) fs: SimFs,
    pub(super) ino: Ino,
    pub(super) handle: u64,
    pub(super) path: PathBuf,
    pub(super) writable: bool,
}

impl SimFile {
    fn write_op(
        &self,
        op: OpKind,
        offset: Option<u64>,
        data: &[u8],
        boundary: Boundary,
    ) -> Result<()> {
        let mut state = self.fs.lock();
        state.check_alive(boundary)?;
        let offset = offset.unwrap_or_else(|| match &state.inode(self.ino).node {
            Node::File(file) => file.volatile.len() as u64,
            Node::Dir(_) | Node::Symlink(_) | Node::Special => 0,
        });
        let detail = format!("@{offset}+{}", data.len());
        let op_index = state.op_count;
        let verdict = state.begin(boundary, op, shown(&self.path), detail)?;
        if !self.writable {
            return Err(io_error(op, &self.path, boundary, io::ErrorKind::PermissionDenied));
        }
        match verdict {
            Verdict::Proceed => {
                let before = state.pending.len();
                state.write(self.ino, offset, data);
                assert!(
                    state.pending.len() == before + 1 || !state.rules.data_needs_sync,
                    "a write is pending until its file is synced"
                );
                Ok(())
            }
            Verdict::Fail(Fault::ShortWrite) => {
                let written = state.short_write_len(op_index, data.len());
                assert!(written <= data.len(), "a short write writes part of its bytes");
                if written > 0 {
                    state.write(self.ino, offset, span(data, 0, written));
                }
                Err(Error::io(
                    op,
                    &self.path,
                    Some(boundary),
                    io::Error::new(
                        io::ErrorKind::WriteZero,
                        format!("short write: {written} of {} bytes", data.len()),
                    ),
                ))
            }
            Verdict::Fail(fault) => Err(fault_error(fault, op, &self.path, boundary)),
        }
    }

    fn sync_op(&self, op: OpKind, boundary: Boundary) -> Result<()> {
        let mut state = self.fs.lock();
        let verdict = state.begin(boundary, op, shown(&self.path), String::new())?;
        match verdict {
            Verdict::Proceed => {
                if state.rules.sync_makes_durable {
                    state.sync_file(self.ino, false);
                }
                debug_assert!(
                    !state.rules.sync_makes_durable
                        || !state.pending.iter().any(|pending| matches!(pending,
                            super::Pending::Data { ino, .. } if *ino == self.ino)),
                    "a sync that returns leaves none of its file's data pending"
                );
                Ok(())
            }
            Verdict::Fail(fault) => {
                // fsyncgate: the kernel may mark the dirty pages clean after a failed writeback.
                // Reads keep returning the data; the durable image never gets it.
                if state.rules.failed_sync_drops {
                    state.sync_file(self.ino, true);
                }
                Err(fault_error(fault, op, &self.path, boundary))
            }
        }
    }
}

impl File for SimFile {
    fn path(&self) -> &Path {
        debug_assert!(!self.path.as_os_str().is_empty(), "an open file has a path");
        &self.path
    }

    fn append(&self, data: &[u8], boundary: Boundary) -> Result<()> {
        let before = self.len().ok();
        let appended = self.write_op(OpKind::Append, None, data, boundary);
        debug_assert!(
            appended.is_err()
                || before.is_none_or(|len| self.len().ok() == Some(len + data.len() as u64)),
            "an append grows its file by exactly its bytes"
        );
        appended
    }

    fn write_at(&self, offset: u64, data: &[u8], boundary: Boundary) -> Result<()> {
        assert!(offset.checked_add(data.len() as u64).is_some(), "a write ends inside u64");
        self.write_op(OpKind::WriteAt, Some(offset), data, boundary)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let mut state = self.fs.lock();
        state.check_alive(Boundary::new("read"))?;
        let Node::File(file) = &state.inode(self.ino).node else {
            return Err(io_error(
                OpKind::Read,
                &self.path,
                Boundary::new("read"),
                io::ErrorKind::IsADirectory,
            ));
        };
        let start = to_usize(offset).min(file.volatile.len());
        let end = start.saturating_add(buf.len()).min(file.volatile.len());
        assert!(start <= end && end - start <= buf.len(), "a read fills at most its buffer");
        span_mut(buf, 0, end - start).copy_from_slice(span(&file.volatile, start, end));
        if state.image_files.contains_key(&self.ino) {
            state.image_files_read.insert(self.ino);
        }
        if let Some(read) = &mut state.read_since_mark {
            read.insert(self.ino);
        }
        debug_assert!(
            state.image_files_read.contains(&self.ino)
                || !state.image_files.contains_key(&self.ino),
            "a read of an image's file counts as observed"
        );
        Ok(end - start)
    }

    fn len(&self) -> Result<u64> {
        let state = self.fs.lock();
        state.check_alive(Boundary::new("len"))?;
        let Node::File(file) = &state.inode(self.ino).node else {
            unreachable!("an open file is a regular file (opens refuse anything else)")
        };
        let len = file.volatile.len() as u64;
        Ok(len)
    }

    fn set_len(&self, len: u64, boundary: Boundary) -> Result<()> {
        let op = OpKind::SetLen;
        let mut state = self.fs.lock();
        let verdict = state.begin(boundary, op, shown(&self.path), format!("len={len}"))?;
        if !self.writable {
            return Err(io_error(op, &self.path, boundary, io::ErrorKind::PermissionDenied));
        }
        if let Verdict::Fail(fault) = verdict {
            return Err(fault_error(fault, op, &self.path, boundary));
        }
        state.set_len(self.ino, len);
        debug_assert!(
            matches!(&state.inode(self.ino).node, super::Node::File(file) if file.volatile.len() as u64 == len),
            "a length change reads back at once"
        );
        Ok(())
    }

    fn sync_data(&self, boundary: Boundary) -> Result<()> {
        self.sync_op(OpKind::SyncData, boundary)?;
        debug_assert!(self.fs.lock().halted.is_none(), "a sync that answers ran on a live machine");
        Ok(())
    }

    fn sync_all(&self, boundary: Boundary) -> Result<()> {
        self.sync_op(OpKind::SyncAll, boundary)?;
        debug_assert!(self.fs.lock().halted.is_none(), "a sync that answers ran on a live machine");
        Ok(())
    }

    fn try_lock(&self) -> Result<bool> {
        let mut state = self.fs.lock();
        state.check_alive(Boundary::new("lock"))?;
        match state.locks.get(&self.ino) {
            Some(&holder) if holder != self.handle => Ok(false),
            _ => {
                state.locks.insert(self.ino, self.handle);
                debug_assert_eq!(
                    state.locks.get(&self.ino),
                    Some(&self.handle),
                    "the lock is held"
                );
                Ok(true)
            }
        }
    }

    fn unlock(&self) -> Result<()> {
        let mut state = self.fs.lock();
        if state.locks.get(&self.ino) == Some(&self.handle) {
            state.locks.remove(&self.ino);
        }
        debug_assert_ne!(state.locks.get(&self.ino), Some(&self.handle), "the lock is released");
        Ok(())
    }
}

impl Drop for SimFile {
    fn drop(&mut self) {
        let mut state = self.fs.lock();
        if state.locks.get(&self.ino) == Some(&self.handle) {
            state.locks.remove(&self.ino);
        }
        debug_assert_ne!(
            state.locks.get(&self.ino),
            Some(&self.handle),
            "closing a file releases its lock"
        );
    }
}
