//! The verifying mode: an independent check of the scheduler's invariants.
//!
//! The verifier does not trust the event list. It keeps its own record of
//! what is pending (sequence number -> scheduled time) and of the last event
//! that ran, and checks every event before its handler is called:
//!
//! * **time never goes backwards**: the event's time is `>=` the previous one's;
//! * **on time**: the event runs at exactly the time it was scheduled for;
//! * **each event runs once**: the event is in the pending record, and leaves
//!   it as it runs (so a second run, or a run after a cancel, is caught);
//! * **order within a time**: if the previous event ran at the same time, the
//!   new one does not come before it by (priority desc, sequence asc) unless
//!   it was scheduled after the previous one was chosen.
//!
//! Memory is proportional to the pending events, like the event list itself,
//! so the verifier is part of a [`Checkpoint`](super::Checkpoint) and rolls
//! back with it.

use std::collections::HashMap;

use super::{EventId, SimError};

/// The last event that ran, as the verifier saw it.
#[derive(Debug, Clone, Copy)]
struct Last {
    id: EventId,
    time: u64,
    priority: i32,
    /// The first sequence number not yet handed out when it was chosen.
    next_seq: u64,
}

/// The verifier's state. See the module docs.
#[derive(Debug, Clone, Default)]
pub(super) struct Verifier {
    /// Pending events: sequence number -> scheduled time.
    pending: HashMap<u64, u64>,
    last: Option<Last>,
}

impl Verifier {
    /// Records a newly scheduled event.
    pub(super) fn scheduled(&mut self, seq: u64, time: u64) {
        self.pending.insert(seq, time);
    }

    /// Records a cancelled event.
    pub(super) fn cancelled(&mut self, seq: u64) {
        self.pending.remove(&seq);
    }

    /// Checks the event about to run (chosen while `next_seq` was the next
    /// sequence number to hand out) and records that it ran.
    pub(super) fn check_run(
        &mut self,
        id: EventId,
        time: u64,
        priority: i32,
        next_seq: u64,
    ) -> Result<(), SimError> {
        if let Some(last) = self.last {
            if time < last.time {
                return Err(SimError::TimeWentBackwards {
                    id,
                    time,
                    previous: last.time,
                });
            }
            let comes_first = (std::cmp::Reverse(priority), id.sequence())
                < (std::cmp::Reverse(last.priority), last.id.sequence());
            if time == last.time && comes_first && id.sequence() < last.next_seq {
                return Err(SimError::OutOfOrder { id, after: last.id });
            }
        }
        let scheduled = self
            .pending
            .remove(&id.sequence())
            .ok_or(SimError::NotPending { id })?;
        if scheduled != time {
            return Err(SimError::WrongTime {
                id,
                scheduled,
                time,
            });
        }
        self.last = Some(Last {
            id,
            time,
            priority,
            next_seq,
        });
        Ok(())
    }
}
