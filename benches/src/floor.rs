//! The fsync floor: the engine's bytes with the fewest syncs the format needs.
//!
//! A send is one `sent` line appended to the open segment and `fdatasync`ed, then the whole
//! queue written to `pending.json.tmp`, `fsync`ed, renamed over `pending.json`, and the
//! directory `fsync`ed (rename durability). A drained keyed entry is one settlement line appended
//! and synced, then the queue rewritten the same way (or removed, with a directory sync, when
//! empty). No lock, no recovery, no parsing: nothing but the format's own I/O.
//!
//! [`Floor::send_log_as_wal`] is the prototype of `docs/log-as-wal.md`: the log line is the only
//! sync (the queue is written and renamed without one, to be rebuilt from the log after a power
//! loss). It measures what that design could reach; the engine does not write this way.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use spex_engine::queue::Entry;

/// One session's files, written the floor's way.
#[derive(Debug)]
pub struct Floor {
    dir: PathBuf,
    log: File,
    queue: Vec<Entry>,
}

impl Floor {
    /// Creates the session directory under `root`.
    pub fn create(root: &Path, name: &str) -> std::io::Result<Floor> {
        let dir = root.join(name);
        std::fs::create_dir_all(dir.join("timeline"))?;
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("timeline").join("000000000001.ndjson"))?;
        File::open(&dir)?.sync_all()?;
        Ok(Floor { dir, log, queue: Vec::new() })
    }

    /// Appends `line` and makes it durable.
    pub fn append(&mut self, line: &[u8]) -> std::io::Result<()> {
        self.log.write_all(line)?;
        self.log.sync_data()
    }

    /// Publishes the queue durably (tmp, fsync, rename, directory fsync), or removes it when
    /// empty.
    fn publish_queue(&mut self) -> std::io::Result<()> {
        let path = self.dir.join("pending.json");
        if self.queue.is_empty() {
            std::fs::remove_file(&path)?;
        } else {
            let tmp = self.dir.join("pending.json.tmp");
            let mut file = File::create(&tmp)?;
            let mut bytes =
                serde_json::to_vec_pretty(&self.queue).map_err(std::io::Error::other)?;
            bytes.push(b'\n');
            file.write_all(&bytes)?;
            file.sync_all()?;
            std::fs::rename(&tmp, &path)?;
        }
        File::open(&self.dir)?.sync_all()
    }

    /// A send with one sync: the log line, then the queue replaced without syncing it or its
    /// directory (the prototype of `docs/log-as-wal.md`).
    pub fn send_log_as_wal(&mut self, line: &[u8], entry: Entry) -> std::io::Result<()> {
        self.append(line)?;
        self.queue.push(entry);
        let tmp = self.dir.join("pending.json.tmp");
        let mut bytes = serde_json::to_vec_pretty(&self.queue).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        File::create(&tmp)?.write_all(&bytes)?;
        std::fs::rename(&tmp, self.dir.join("pending.json"))
    }

    /// A send: the line, then the queue (see the module header).
    pub fn send(&mut self, line: &[u8], entry: Entry) -> std::io::Result<()> {
        self.append(line)?;
        self.queue.push(entry);
        self.publish_queue()
    }

    /// Drains the head: its settlement line, then its removal. Returns false when empty.
    pub fn drain_one(&mut self, settlement: &[u8]) -> std::io::Result<bool> {
        if self.queue.is_empty() {
            return Ok(false);
        }
        self.append(settlement)?;
        self.queue.remove(0);
        self.publish_queue()?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The floor must write the engine's format, or its times are not a floor for it.
    #[test]
    fn the_floor_writes_what_the_engine_reads() {
        let dir = tempfile::tempdir().unwrap();
        let mut floor = Floor::create(dir.path(), "f").unwrap();
        for i in 0..3 {
            let mid = format!("00000000-0000-4000-8000-{i:012}");
            let line = crate::sent_line("2026-11-30T00:00:00.000Z", &mid, &crate::message(i));
            let entry = Entry {
                mid,
                text: crate::message(i),
                from: None,
                attributes: None,
                dispatch: None,
            };
            floor.send(&line, entry).unwrap();
        }
        let log = std::fs::read(dir.path().join("f/timeline/000000000001.ndjson")).unwrap();
        let lines: Vec<_> = log
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| spex_engine::timeline::Line::decode(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        let queue: Vec<Entry> =
            serde_json::from_slice(&std::fs::read(dir.path().join("f/pending.json")).unwrap())
                .unwrap();
        assert_eq!(queue.len(), 3);
        while floor.drain_one(b"{}\n").unwrap() {}
        assert!(!dir.path().join("f/pending.json").exists(), "an empty queue is removed");
    }
}
