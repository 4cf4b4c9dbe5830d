//! Why the simulation refused a call or stopped a run.

use std::fmt;

use super::EventId;

/// An error from the simulation scheduler.
///
/// [`InThePast`](SimError::InThePast) is a refused call: nothing changed.
/// The other variants are invariant violations found by the verifying mode
/// ([`Builder::verify`](super::Builder::verify)); the run stops before the
/// offending event's handler is called, the event is dropped, and the
/// simulation should be treated as broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SimError {
    /// `schedule_at` was given a time before the current time.
    InThePast {
        /// The time asked for.
        time: u64,
        /// The simulation's current time.
        now: u64,
    },
    /// An event was about to run at a time before the previous event's time.
    TimeWentBackwards {
        /// The event that would have run.
        id: EventId,
        /// Its time.
        time: u64,
        /// The time of the event that ran before it.
        previous: u64,
    },
    /// An event was about to run that is not pending: it already ran, was
    /// cancelled, or was never scheduled.
    NotPending {
        /// The event that would have run.
        id: EventId,
    },
    /// An event was about to run at another time than it was scheduled for.
    WrongTime {
        /// The event that would have run.
        id: EventId,
        /// The time it was scheduled for.
        scheduled: u64,
        /// The time it would have run at.
        time: u64,
    },
    /// Two events of the same time ran against the order rule: `id` comes
    /// before `after` by (priority, sequence) and was already pending when
    /// `after` was chosen, yet runs second.
    OutOfOrder {
        /// The event that would have run.
        id: EventId,
        /// The event that ran just before it, at the same time.
        after: EventId,
    },
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SimError::InThePast { time, now } => {
                write!(
                    f,
                    "cannot schedule at time {time}: the simulation is at {now}"
                )
            }
            SimError::TimeWentBackwards { id, time, previous } => write!(
                f,
                "time went backwards: {id} would run at {time} after an event at {previous}"
            ),
            SimError::NotPending { id } => write!(
                f,
                "{id} would run but is not pending (ran already, cancelled or never scheduled)"
            ),
            SimError::WrongTime {
                id,
                scheduled,
                time,
            } => write!(
                f,
                "{id} was scheduled for time {scheduled} but would run at {time}"
            ),
            SimError::OutOfOrder { id, after } => write!(
                f,
                "{id} would run after {after} although it was pending and comes first"
            ),
        }
    }
}

impl std::error::Error for SimError {}
