//! The simulated process table and machine identity: which pids run and since when (lock
//! recovery asks), killing and spawning processes, and the id that keeps each simulated machine's
//! per-process state apart from every other machine's in the same real process.

use super::{SimFs, SyncArc};

/// Ids of simulated machines, unique within the real process.
static NEXT_MACHINE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

pub(super) fn next_machine() -> u64 {
    let machine = NEXT_MACHINE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    assert_ne!(machine, 0, "machine ids never wrap around to the unset one");
    machine
}

impl SimFs {
    /// The same filesystem as seen by another simulated process `pid` (for lock tests).
    /// The process is registered as running, started at the current logical time.
    pub fn as_process(&self, pid: u32) -> SimFs {
        {
            let mut state = self.lock();
            let now = state.clock_ms;
            let started = *state.processes.entry(pid).or_insert(now);
            debug_assert!(started <= now, "a process running as {pid} started by now");
        }
        SimFs { state: SyncArc::clone(&self.state), process_id: pid }
    }

    /// Marks the simulated process `pid` as dead and releases nothing else: its open files stay
    /// open in the caller's hands, as a SIGKILLed process's lock *files* stay on disk.
    pub fn kill_process(&self, pid: u32) {
        let mut state = self.lock();
        state.processes.remove(&pid);
        debug_assert!(!state.processes.contains_key(&pid), "a killed process runs no more");
    }

    /// Registers a running process `pid` started at `start_ms` (e.g. a reused pid).
    pub fn spawn_process(&self, pid: u32, start_ms: u64) {
        let mut state = self.lock();
        assert_ne!(pid, 0, "a process has an id");
        state.processes.insert(pid, start_ms);
    }
}
