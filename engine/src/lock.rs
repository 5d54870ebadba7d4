//! Lock files: the record lock and the delivery lock of a session.
//!
//! # Format
//!
//! `<root>/.session-locks/<id>.lock` and `<root>/.delivery-locks/<id>.lock`, holding the owner's
//! pid in decimal (no newline): the protocol of the existing TypeScript spex, so the two exclude
//! each other. A lock appears with its pid already in it: the pid is written to a private file
//! (`<lock>.<pid>.tmp`) that is then hard-linked to the lock's name, which fails if the lock
//! exists. (Created with `O_CREAT | O_EXCL` and written after, a lock would be empty for a
//! moment, and a waiter could judge a live but descheduled creator's empty lock abandoned.)
//!
//! # Recovery
//!
//! A lock whose holder was killed (SIGKILL, power loss) stays on disk. It is stale when its pid
//! is not running, or when the process running under that pid started after the lock file was
//! last modified (the pid was reused: its process cannot have written the lock). A lock file
//! that stays empty for [`EMPTY_GRACE_MS`] is stale too: only the existing implementation
//! creates a lock empty, and writes its pid at once, so its creator died between create and
//! write. A holder that exits while it is checked is dead.
//!
//! Takeover is race-free: a taker first takes an `flock` on `<lock>.takeover`, then re-reads the
//! lock file and, only if it is still the exact stale file it judged (same contents, same
//! modification time), renames its own pid file over it: the lock passes from the dead holder to
//! the taker in one step. Two takers can never both win: the second one, holding the flock after
//! the first, finds the first taker's fresh lock and waits. And no process can take the lock
//! between the dead holder and the taker (as it could if the stale lock were removed and then
//! created again): that process would act on what the dead holder left visible without knowing
//! it must be made durable first (the model of `verification::lock_protocol` found this).
//!
//! A lock file naming this very process that no thread of this process holds was leaked by a
//! failed release (the removal itself failed): it is stale too. A process-wide registry of the
//! locks this process holds tells the two apart; creating, inspecting and releasing a lock are
//! serialized on it within the process so that the check cannot race a thread taking the lock.
//!
//! A transition whose write or sync failed abandons its lock ([`LockGuard::abandon`]) instead
//! of releasing it: the file stays, naming a process none of whose threads holds it, so the
//! next taker (this process's next handle at once, another process once this one exits) takes
//! it over and vouches for the failed step's unsynced bytes.
//!
//! Lock files need no durability: after a crash their holder is dead, which is exactly the
//! stale case above. Waits are bounded; the error names the holder.
//!
//! A taker that replaced a stale lock says so ([`LockGuard::took_over`]): its holder died inside
//! a transition, so what it wrote may be visible without being durable, and the new holder must
//! make it durable before it acts on it (see `Store::transition`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use faultfs::{Boundary, File, Fs, OpenOptions};

use crate::env::Clock;
use crate::error::{Error, Result};
use crate::mutant::selected;

/// How long a lock file may stay empty before it is considered abandoned.
pub const EMPTY_GRACE_MS: u64 = 1_000;
/// Slack when comparing a process's start time with a lock file's modification time (the boot
/// time the start is derived from has one-second resolution).
pub const PID_REUSE_SLACK_MS: u64 = 1_000;
/// Longest pause between two attempts.
const RETRY_DELAY_MS_MAX: u64 = 50;

/// The locks this process holds, as (machine, pid, path): the machine and the pid are part of
/// the key because simulated filesystems play several machines, each with several processes,
/// inside one real process (two sweeps on two threads must not see each other's locks). Under loom it is a loom mutex, so
/// the models explore it with everything else.
#[cfg(not(loom))]
static HOLDING: std::sync::Mutex<BTreeSet<(u64, u32, PathBuf)>> =
    std::sync::Mutex::new(BTreeSet::new());

#[cfg(loom)]
loom::lazy_static! {
    static ref HOLDING: crate::sync::Mutex<BTreeSet<(u64, u32, PathBuf)>> = crate::sync::Mutex::new(BTreeSet::new());
}

fn holding() -> crate::sync::MutexGuard<'static, BTreeSet<(u64, u32, PathBuf)>> {
    crate::sync::lock(&HOLDING)
}

/// The boundaries of one transition's lock operations.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LockBoundaries {
    /// Creating and writing the private file that holds the pid.
    pub(crate) create: Boundary,
    pub(crate) write: Boundary,
    /// Linking it to the lock's name (the acquisition), and removing the private name after.
    pub(crate) link: Boundary,
    pub(crate) unlink_tmp: Boundary,
    pub(crate) takeover: Boundary,
    pub(crate) remove: Boundary,
}

/// A held lock; released by [`LockGuard::release`] or, failing that, when dropped.
#[derive(Debug)]
pub(crate) struct LockGuard<'a, F: Fs> {
    fs: &'a F,
    path: PathBuf,
    remove: Boundary,
    held: bool,
    took_over: bool,
}

impl<'a, F: Fs> LockGuard<'a, F> {
    /// The guard of a lock this process holds (and registered): created, or (`took_over`)
    /// got by replacing a stale one.
    fn held(fs: &'a F, path: &Path, steps: &LockBoundaries, took_over: bool) -> LockGuard<'a, F> {
        debug_assert!(
            holding().contains(&(fs.machine_id(), fs.process_id(), path.to_path_buf()))
                || selected().is_some(),
            "a guard is of a lock this process registered as held"
        );
        LockGuard { fs, path: path.to_path_buf(), remove: steps.remove, held: true, took_over }
    }

    /// Whether taking this lock replaced a stale one: its holder died holding it, so whatever it
    /// wrote may be visible without being durable (a kill is not a sync).
    pub(crate) fn took_over(&self) -> bool {
        debug_assert!(self.held, "only a held lock was taken over (or not)");
        self.took_over
    }

    /// Lets the lock go without removing its file, after a failed write or sync: what the
    /// transition left may be visible without being durable, so the next taker must find the
    /// lock stale and vouch before it acts (another process once this one exits; a handle of
    /// this process at once, the file naming this process while none of its threads holds it).
    pub(crate) fn abandon(mut self) {
        self.held = false;
        let mut holding = holding();
        let held = holding.remove(&(self.fs.machine_id(), self.fs.process_id(), self.path.clone()));
        debug_assert!(held || selected().is_some(), "an abandoned lock is one this process took");
    }

    /// Releases the lock. If the removal fails, the file is left behind but no longer held:
    /// the next taker in this process (or any process once this one exits) recovers it.
    pub(crate) fn release(mut self) -> Result<()> {
        self.held = false;
        let mut holding = holding();
        let removed = self.fs.remove_file(&self.path, self.remove);
        let held = holding.remove(&(self.fs.machine_id(), self.fs.process_id(), self.path.clone()));
        debug_assert!(held || selected().is_some(), "a released lock is one this process took");
        removed?;
        Ok(())
    }
}

impl<F: Fs> Drop for LockGuard<'_, F> {
    fn drop(&mut self) {
        if self.held {
            // An error path is already being reported; a lock left behind is recovered as stale.
            let mut holding = holding();
            let _ = self.fs.remove_file(&self.path, self.remove);
            let key = (self.fs.machine_id(), self.fs.process_id(), self.path.clone());
            holding.remove(&key);
            debug_assert!(!holding.contains(&key), "a dropped guard's lock is held no more");
        }
    }
}

/// What a lock file looked like when judged.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Observed {
    contents: Vec<u8>,
    modified_ms: u64,
}

enum Holder {
    /// The file vanished: try again at once.
    Gone,
    /// A live process holds it.
    Alive(u32),
    /// Its holder is dead (or the pid was reused).
    Stale(Observed),
    /// It holds no pid yet.
    Empty(Observed),
}

/// Takes the lock at `path`, waiting at most `wait_ms`.
pub(crate) fn acquire<'a, F: Fs>(
    fs: &'a F,
    clock: &dyn Clock,
    path: &Path,
    wait_ms: u64,
    steps: &LockBoundaries,
) -> Result<LockGuard<'a, F>> {
    let started_ms = clock.now_ms();
    let mut delay_ms = 1;
    let mut empty_since: Option<(Observed, u64)> = None;
    let mut last_holder = None;
    let mut vanished = 0u32;
    loop {
        if create_registered(fs, path, steps)? {
            return Ok(LockGuard::held(fs, path, steps, false));
        }
        // A lock that vanishes between a failed create and the inspection was released: try
        // again at once, but only once in a row, so that a lock name nothing can be read through
        // (a dangling symlink, say) is waited on within the bound instead of spun on.
        let inspected = inspect(fs, path)?;
        if matches!(inspected, Holder::Gone) {
            vanished += 1;
            if vanished == 1 {
                continue;
            }
        } else {
            vanished = 0;
        }
        match inspected {
            Holder::Gone => {}
            Holder::Stale(seen) => {
                if take_over(fs, clock, path, &seen, started_ms, wait_ms, steps)? {
                    return Ok(LockGuard::held(fs, path, steps, true));
                }
                continue;
            }
            Holder::Alive(pid) => {
                last_holder = Some(pid);
                empty_since = None;
            }
            Holder::Empty(seen) => {
                let now = clock.now_ms();
                match &empty_since {
                    Some((first, since))
                        if *first == seen && now.saturating_sub(*since) >= EMPTY_GRACE_MS =>
                    {
                        if take_over(fs, clock, path, &seen, started_ms, wait_ms, steps)? {
                            return Ok(LockGuard::held(fs, path, steps, true));
                        }
                        empty_since = None;
                        continue;
                    }
                    Some((first, _)) if *first == seen => {}
                    _ => empty_since = Some((seen, now)),
                }
            }
        }
        let waited_ms = clock.now_ms().saturating_sub(started_ms);
        if waited_ms >= wait_ms {
            return Err(Error::Locked { path: path.to_path_buf(), holder: last_holder, waited_ms });
        }
        clock.sleep_ms(delay_ms);
        delay_ms = (delay_ms * 2).min(RETRY_DELAY_MS_MAX);
        debug_assert!(
            (1..=RETRY_DELAY_MS_MAX).contains(&delay_ms),
            "a waiter backs off, within the bound"
        );
    }
}

/// [`create_holding_pid`] with this process's pid, registering the lock as held when created
/// (the registry is held throughout, so no thread of this process judges it leaked between).
fn create_registered<F: Fs>(fs: &F, path: &Path, steps: &LockBoundaries) -> Result<bool> {
    let key = (fs.machine_id(), fs.process_id(), path.to_path_buf());
    let mut holding = holding();
    let created = create_holding_pid(fs, path, key.1, steps)?;
    if created {
        let fresh = holding.insert(key);
        debug_assert!(fresh || selected().is_some(), "a process never takes a lock it holds");
    }
    Ok(created)
}

/// Creates the lock at `path` holding `pid`, in one step (see the module header): `Ok(false)`
/// when the lock exists. Called with the process-wide registry held, so the private file's
/// name is this process's alone.
fn create_holding_pid<F: Fs>(
    fs: &F,
    path: &Path,
    pid: u32,
    steps: &LockBoundaries,
) -> Result<bool> {
    let tmp = private_path(path, pid);
    debug_assert_eq!(pid, fs.process_id(), "a process creates locks holding its own pid");
    let written = write_private(fs, &tmp, pid, steps);
    let linked = written.and_then(|()| match fs.hard_link(&tmp, path, steps.link) {
        Ok(()) => Ok(true),
        Err(error) if error.io_kind() == Some(std::io::ErrorKind::AlreadyExists) => Ok(false),
        Err(error) => Err(error.into()),
    });
    // The private name is not needed either way (one a crash left behind is harmless, and
    // reused by this pid's next lock). A failure to remove it fails the acquisition, as every
    // failed op does: the lock just linked is let go again (if that fails too, it names this
    // process while no thread holds it, which the next taker recognizes as leaked).
    if let Err(error) = fs.remove_file(&tmp, steps.unlink_tmp) {
        if matches!(linked, Ok(true)) {
            let _ = fs.remove_file(path, steps.remove);
        }
        return Err(error.into());
    }
    linked
}

/// The private file this process's pid is written to before it becomes the lock.
fn private_path(path: &Path, pid: u32) -> PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{pid}.tmp"));
    let tmp = PathBuf::from(tmp);
    debug_assert_eq!(
        tmp.parent(),
        path.parent(),
        "the private file lies beside the lock, so a link or rename moves it in place"
    );
    tmp
}

/// Writes `pid` to the private file `tmp`.
fn write_private<F: Fs>(fs: &F, tmp: &Path, pid: u32, steps: &LockBoundaries) -> Result<()> {
    let file = fs.open(tmp, OpenOptions::create_truncate(), steps.create)?;
    let text = pid.to_string();
    file.append(text.as_bytes(), steps.write)?;
    debug_assert!(
        file.len().is_ok_and(|len| len == text.len() as u64),
        "the private file holds the pid alone"
    );
    Ok(())
}

/// Reads the lock file and judges its holder.
fn inspect<F: Fs>(fs: &F, path: &Path) -> Result<Holder> {
    let holding = holding();
    let Some(seen) = read_seen(fs, path)? else { return Ok(Holder::Gone) };
    let text = String::from_utf8_lossy(&seen.contents);
    let text = text.trim();
    if text.is_empty() {
        return Ok(Holder::Empty(seen));
    }
    let Ok(pid) = text.parse::<u32>() else {
        // Not a pid: nothing this protocol wrote. Treat it like an abandoned empty lock.
        return Ok(Holder::Empty(seen));
    };

    if pid == fs.process_id() && !holding.contains(&(fs.machine_id(), pid, path.to_path_buf())) {
        // This process's own lock, held by none of its threads: leaked by a failed release.
        return Ok(Holder::Stale(seen));
    }

    match fs.process_start_ms(pid)? {
        None => Ok(Holder::Stale(seen)),
        Some(start_ms) if start_ms > seen.modified_ms + PID_REUSE_SLACK_MS => {
            Ok(Holder::Stale(seen))
        }
        Some(_) => {
            debug_assert!(
                pid != fs.process_id()
                    || holding.contains(&(fs.machine_id(), pid, path.to_path_buf())),
                "this process's own lock is alive only while one of its threads holds it"
            );
            Ok(Holder::Alive(pid))
        }
    }
}

fn read_seen<F: Fs>(fs: &F, path: &Path) -> Result<Option<Observed>> {
    debug_assert!(
        path.extension().is_some_and(|extension| extension == "lock"),
        "only a lock file is read for its holder"
    );

    let not_found = |error: &faultfs::Error| error.io_kind() == Some(std::io::ErrorKind::NotFound);
    let file = match fs.open(path, OpenOptions::read(), Boundary::new("read")) {
        Ok(file) => file,
        Err(error) if not_found(&error) => return Ok(None),
        // The open refuses a symbolic link: name what is in the lock's place.
        Err(error) => {
            return Err(crate::layout::expect_kind(fs, path, faultfs::FileKind::File)
                .err()
                .unwrap_or(error.into()));
        }
    };
    let contents = file.read_to_end()?;
    let modified = match fs.metadata(path) {
        Ok(metadata) => metadata.modified,
        Err(error) if not_found(&error) => return Ok(None),
        Err(error) => return Err(error.into()),
    };
    let modified_ms = modified.duration_since(UNIX_EPOCH).map_or(0, |at| at.as_millis() as u64);

    Ok(Some(Observed { contents, modified_ms }))
}

/// Replaces the stale lock `seen` with this process's, under the takeover flock, if it is still
/// exactly that file: one rename, so the lock is never absent between the dead holder and the
/// taker. Returns whether this process now holds the lock (registered as held).
fn take_over<F: Fs>(
    fs: &F,
    clock: &dyn Clock,
    path: &Path,
    seen: &Observed,
    started_ms: u64,
    wait_ms: u64,
    steps: &LockBoundaries,
) -> Result<bool> {
    let mut guard_path = path.as_os_str().to_owned();
    guard_path.push(".takeover");
    let guard_path = PathBuf::from(guard_path);
    debug_assert_eq!(guard_path.parent(), path.parent(), "the takeover flock lies beside the lock");
    let guard = fs.open(&guard_path, OpenOptions::create(), steps.takeover)?;
    while !guard.try_lock()? {
        let waited_ms = clock.now_ms().saturating_sub(started_ms);
        if waited_ms >= wait_ms {
            return Err(Error::Locked { path: guard_path, holder: None, waited_ms });
        }
        clock.sleep_ms(1);
    }
    let replaced = replace_stale(fs, path, seen, steps);
    guard.unlock()?;
    replaced
}

/// The takeover itself, under the flock: re-read, then rename the private file over the lock.
/// The process-wide registry is held throughout, as in [`create_holding_pid`].
fn replace_stale<F: Fs>(
    fs: &F,
    path: &Path,
    seen: &Observed,
    steps: &LockBoundaries,
) -> Result<bool> {
    let mut holding = holding();
    let still_stale = crate::mutant::active(crate::mutant::Mutant::TakeoverWithoutRecheck)
        || read_seen(fs, path)?.as_ref() == Some(seen);
    if !still_stale {
        return Ok(false);
    }
    let pid = fs.process_id();
    let tmp = private_path(path, pid);
    let renamed = write_private(fs, &tmp, pid, steps)
        .and_then(|()| fs.rename(&tmp, path, steps.takeover).map_err(Error::from));
    if let Err(error) = renamed {
        // The private file may be left behind: harmless, and reused by this pid's next lock.
        let _ = fs.remove_file(&tmp, steps.unlink_tmp);
        return Err(error);
    }
    let fresh = holding.insert((fs.machine_id(), pid, path.to_path_buf()));
    debug_assert!(fresh || selected().is_some(), "a stale lock taken over was not held here");
    Ok(true)
}
