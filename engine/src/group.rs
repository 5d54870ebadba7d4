//! Group commit: concurrent sends to one session through one handle share a lock hold and a
//! queue replace.
//!
//! A send joins its session's group and waits. When no member is leading, one becomes the
//! leader: it takes every request waiting at that moment as one batch, commits the batch as one
//! transition (`Store::send_batch`: one lock hold and recovery, the queue staged once, each
//! `sent` line appended and synced on its own, the queue published once), hands each member its
//! answer and steps down; a member still waiting then leads the next batch. Nobody leads
//! forever, and a request that arrives while a batch commits is in the next one.
//!
//! # Crash story
//!
//! Nothing here touches the disk: a batch is one transition with the crash windows of a send
//! (see `send`), widened to the batch. No member is answered before the batch's queue is
//! published, so every acknowledged message is logged and owed; a crash inside the batch leaves
//! a prefix of its lines logged and none of them acknowledged (for a keyed send, its retry
//! restores the debt; an unkeyed one is the documented window of a send). A batch that fails
//! before any line is written changes nothing, and its members retry alone; one that fails
//! after a line was written poisons the session in this handle (see `send`), so no retry can
//! log a message twice.

use std::collections::HashMap;

use crate::error::Result;
use crate::layout::SessionId;
use crate::mutant::{Mutant, active};
use crate::request::{Accepted, SendRequest};
use crate::sync::{Condvar, Mutex, lock};

/// A member's answer from a batch.
pub(crate) enum Answer {
    /// The send's own result.
    Done(Result<Accepted>),
    /// The batch failed as a whole before writing anything: send alone.
    Alone,
}

/// The groups of one handle, one per session with sends in flight.
#[derive(Debug, Default)]
pub(crate) struct Groups {
    sessions: Mutex<HashMap<SessionId, Group>>,
    changed: Condvar,
}

/// One session's group.
#[derive(Debug, Default)]
struct Group {
    /// Requests waiting for a batch, with their tickets.
    waiting: Vec<(u64, SendRequest)>,
    /// Answers not yet collected, by ticket.
    answered: HashMap<u64, Answer>,
    /// Whether a member is committing a batch.
    leading: bool,
    /// The next ticket.
    next: u64,
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Answer::Done(result) => f.debug_tuple("Done").field(&result.is_ok()).finish(),
            Answer::Alone => f.write_str("Alone"),
        }
    }
}

/// A batch being committed: if its commit panics, its members are told to send alone and the
/// group gets a new leader, instead of waiting forever.
struct Leading<'a> {
    groups: &'a Groups,
    to: &'a SessionId,
    /// The members still unanswered (emptied once the commit returned).
    tickets: Vec<u64>,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        if self.tickets.is_empty() {
            return;
        }
        let mut sessions = lock(&self.groups.sessions);
        if let Some(group) = sessions.get_mut(self.to) {
            group.leading = false;
            for ticket in self.tickets.drain(..) {
                group.answered.insert(ticket, Answer::Alone);
            }
            debug_assert!(!group.leading, "a failed leader leaves the group to a new one");
        }
        self.groups.changed.notify_all();
    }
}

impl Groups {
    /// Joins `to`'s group with `request` and returns its answer: committed by whichever member
    /// leads the batch it lands in (possibly this one), through `commit`, which gets a batch
    /// and returns one answer per request in order (or an error for the whole batch).
    pub(crate) fn send(
        &self,
        to: &SessionId,
        request: SendRequest,
        commit: impl Fn(&[SendRequest]) -> Result<Vec<Result<Accepted>>>,
    ) -> Answer {
        let mut sessions = lock(&self.sessions);
        let group = sessions.entry(to.clone()).or_default();
        let ticket = group.next;
        group.next += 1;
        assert!(
            group.waiting.iter().all(|(waiting, _)| *waiting < ticket),
            "tickets are handed out in order, each once"
        );
        group.waiting.push((ticket, request));
        loop {
            let group = sessions.get_mut(to).expect("a group with a waiting member stays");
            if let Some(answer) = group.answered.remove(&ticket) {
                if group.waiting.is_empty() && group.answered.is_empty() && !group.leading {
                    sessions.remove(to);
                }
                return answer;
            }
            if group.leading {
                sessions = self.changed.wait(sessions).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            // Lead one batch: everything waiting now.
            group.leading = true;
            let batch: Vec<(u64, SendRequest)> = std::mem::take(&mut group.waiting);
            assert!(batch.iter().any(|(t, _)| *t == ticket), "a leader leads its own request");
            drop(sessions);
            let requests: Vec<SendRequest> =
                batch.iter().map(|(_, request)| request.clone()).collect();
            let mut unwinding =
                Leading { groups: self, to, tickets: batch.iter().map(|(t, _)| *t).collect() };
            let committed = commit(&requests);
            unwinding.tickets.clear();
            let answers: Vec<Answer> = match committed {
                Ok(results) => {
                    assert_eq!(results.len(), batch.len(), "one answer per request");
                    results.into_iter().map(Answer::Done).collect()
                }
                Err(error) => {
                    // The leader keeps the batch's error; the others send alone (the batch
                    // wrote nothing, or it poisoned the session and they are refused).
                    let mut answers: Vec<Answer> = batch.iter().map(|_| Answer::Alone).collect();
                    let own = batch.iter().position(|(t, _)| *t == ticket).unwrap_or(0);
                    if let Some(answer) = answers.get_mut(own) {
                        *answer = Answer::Done(Err(error));
                    }
                    debug_assert_eq!(answers.len(), batch.len(), "one answer per member");
                    answers
                }
            };
            sessions = lock(&self.sessions);
            let group = sessions.get_mut(to).expect("a leading group stays");
            group.leading = false;
            for ((member, _), answer) in batch.into_iter().zip(answers) {
                group.answered.insert(member, answer);
            }
            assert!(group.answered.contains_key(&ticket), "the leader's own answer is ready");
            if !active(Mutant::GroupWithoutWakeup) {
                self.changed.notify_all();
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn accepted(requests: &[SendRequest]) -> Result<Vec<Result<Accepted>>> {
        Ok(requests
            .iter()
            .map(|request| {
                Ok(Accepted { mid: request.text.clone(), replayed: false, restored: false })
            })
            .collect())
    }

    #[test]
    fn a_commit_that_panics_leaves_the_group_to_a_new_leader() {
        let groups = std::sync::Arc::new(Groups::default());
        let to = SessionId::new("s").expect("an id");
        let request = SendRequest { text: "first".into(), ..SendRequest::default() };
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            groups.send(&to, request.clone(), |_| panic!("a bug in a commit"))
        }));
        assert!(panicked.is_err());
        let (done, answer) = std::sync::mpsc::channel();
        let (groups, to) = (std::sync::Arc::clone(&groups), to.clone());
        std::thread::spawn(move || {
            let second = SendRequest { text: "second".into(), ..SendRequest::default() };
            let _ = done.send(groups.send(&to, second, accepted));
        });
        match answer.recv_timeout(std::time::Duration::from_secs(10)) {
            Ok(Answer::Done(Ok(accepted))) => assert_eq!(accepted.mid, "second"),
            other => panic!("the next send must be led and answered, got {other:?}"),
        }
    }
}
