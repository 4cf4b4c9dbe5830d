//! The event list: pending events on a [`Wheel`], plus the run of events at
//! the current time sorted by priority.
//!
//! # The order rule
//!
//! Every event gets a *sequence number* when it is scheduled: one counter per
//! simulation, increasing, never reused (not even across a rollback). The key
//! of a pending event is
//!
//! ```text
//! (time, Reverse(priority), sequence)
//! ```
//!
//! and the scheduler always runs the pending event with the least key. That
//! is exactly the order a binary heap with this key would give. Two
//! consequences are worth spelling out:
//!
//! * Within one time, higher priority runs first, and equal priorities run in
//!   the order they were scheduled (FIFO).
//! * An event scheduled *for the current time* by a running event joins the
//!   events of that time that have not run yet, and is ordered among them by
//!   the same key: with a higher priority than all of them it runs next, with
//!   an equal one it runs after them (its sequence number is larger). Events
//!   that already ran stay run: there is no preemption.
//!
//! # How the wheel gives it cheaply
//!
//! The wheel is O(1) per event and FIFO within a tick, so it already yields
//! the events of one time in sequence order. Priorities only need sorting
//! among the events of *one* time, and only when there is more than one:
//!
//! * When the current run is empty, [`Queue::pop`] polls the wheel for the
//!   next event (the wheel jumps over idle ticks through its bitmaps) and
//!   asks the wheel whether anything else is due at that same tick (one bit
//!   of its level-0 bitmap). If nothing else is due then, which is
//!   the usual case with fine ticks, the event runs straight away: no sorting
//!   and no extra storage.
//! * Otherwise the events of that tick move from the wheel into `ready`, a
//!   deque sorted by `(Reverse(priority), sequence)`. Before each pop, events
//!   newly scheduled for the current time (they went into the wheel like any
//!   other) are moved over too. An insert is a binary search, and a push at
//!   the back when priorities are equal (wheel order is sequence order), so a
//!   tick of equal-priority events costs O(1) per event; mixed priorities
//!   cost at most a shift of the events of that one tick.
//!
//! Cancelling finds an event by its wheel key while it is in the wheel (O(1)),
//! or by sequence number in `ready` (O(events at the current time)).

use std::cmp::Reverse;
use std::collections::VecDeque;
use std::fmt;

use super::verify::Verifier;
use super::SimError;
use crate::wheel::{TimerKey, Wheel};

/// Names one scheduled event, for [`cancel`](super::Simulation::cancel) and
/// in traces.
///
/// An id is `Copy` and cheap. Once its event has run or been cancelled the id
/// is *stale*: cancelling it returns `None`, and it never reaches another
/// event, not even one scheduled after a rollback to a checkpoint.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventId {
    key: TimerKey,
    seq: u64,
}

impl EventId {
    /// The event's sequence number: its place in the order of all scheduling
    /// calls of its simulation. Unique within a simulation, also across
    /// rollbacks; among events of equal time and priority, the smaller runs
    /// first.
    pub fn sequence(self) -> u64 {
        self.seq
    }
}

impl fmt::Debug for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EventId(#{})", self.seq)
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "event #{}", self.seq)
    }
}

/// An event waiting in the wheel. Its sequence number is the wheel entry's
/// own arming number (`Wheel::insert_at_numbered`), which the wheel keeps
/// for same-tick order anyway: a copy here would make every pending event 8
/// bytes larger, and at a million pending events the hold model is bound by
/// cache misses, which grow with the entry (`benches/sim.rs` at 1M pending,
/// under cachegrind with `SIM_HOLD_COUNT`).
#[derive(Clone)]
struct Pending<E> {
    priority: i32,
    event: E,
}

/// An event of the current time, waiting in the sorted run.
#[derive(Clone)]
struct Ready<E> {
    id: EventId,
    priority: i32,
    event: E,
}

impl<E> Ready<E> {
    fn order(&self) -> (Reverse<i32>, u64) {
        (Reverse(self.priority), self.id.seq)
    }
}

/// An event taken off the list, about to run.
pub(super) struct Popped<E> {
    pub(super) id: EventId,
    pub(super) time: u64,
    pub(super) priority: i32,
    pub(super) event: E,
}

/// The event list. See the module docs.
#[derive(Clone)]
pub(super) struct Queue<E> {
    wheel: Wheel<Pending<E>>,
    /// Events due at `wheel.now()`, sorted by `(Reverse(priority), seq)`.
    /// Non-empty only while that tick is being worked through.
    ready: VecDeque<Ready<E>>,
    verifier: Option<Verifier>,
}

impl<E> Queue<E> {
    pub(super) fn new(capacity: usize, start: u64, verify: bool) -> Self {
        let mut wheel = Wheel::with_capacity(capacity);
        // An empty wheel polled to `start` just moves its clock there.
        let none = wheel.poll(start);
        debug_assert!(none.is_none());
        Queue {
            wheel,
            ready: VecDeque::new(),
            verifier: verify.then(Verifier::default),
        }
    }

    pub(super) fn now(&self) -> u64 {
        self.wheel.now()
    }

    pub(super) fn len(&self) -> usize {
        self.wheel.len() + self.ready.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.wheel.is_empty() && self.ready.is_empty()
    }

    pub(super) fn is_verifying(&self) -> bool {
        self.verifier.is_some()
    }

    /// The time of the next event, if any.
    pub(super) fn next_time(&self) -> Option<u64> {
        if self.ready.is_empty() {
            self.wheel.next_deadline()
        } else {
            Some(self.now())
        }
    }

    /// Adds an event at `time >= now()` with sequence number `seq`.
    pub(super) fn push(&mut self, time: u64, seq: u64, priority: i32, event: E) -> EventId {
        debug_assert!(time >= self.now());
        let key = self
            .wheel
            .insert_at_numbered(time, seq, Pending { priority, event });
        if let Some(verifier) = &mut self.verifier {
            verifier.scheduled(seq, time);
        }
        EventId { key, seq }
    }

    /// Where a pending event is: in the wheel, or at an index of `ready`.
    fn locate(&self, id: EventId) -> Option<Place> {
        if let Some(seq) = self.wheel.number_of(id.key) {
            // After a rollback the same key can name another event: the
            // number tells them apart.
            return (seq == id.seq).then_some(Place::Wheel);
        }
        self.ready
            .iter()
            .position(|ready| ready.id.seq == id.seq)
            .map(Place::Ready)
    }

    /// Removes a pending event and returns it; `None` for a stale id.
    pub(super) fn cancel(&mut self, id: EventId) -> Option<E> {
        let event = match self.locate(id)? {
            Place::Wheel => self.wheel.cancel(id.key)?.event,
            Place::Ready(index) => self.ready.remove(index)?.event,
        };
        if let Some(verifier) = &mut self.verifier {
            verifier.cancelled(id.seq);
        }
        Some(event)
    }

    /// The time a pending event is scheduled for; `None` for a stale id.
    pub(super) fn time_of(&self, id: EventId) -> Option<u64> {
        match self.locate(id)? {
            Place::Wheel => self.wheel.deadline(id.key),
            Place::Ready(_) => Some(self.now()),
        }
    }

    /// Takes the next event in the order of the module docs, if its time is
    /// `<= limit`.
    ///
    /// The common case (nothing else due at the event's tick) stays small
    /// enough to inline into the run loop; a tick with several events goes
    /// through [`pop_from_run`](Self::pop_from_run), out of line. Checking
    /// the popped event is the caller's ([`check_run`](Self::check_run)), so
    /// that an unverified run carries no `Result` through here.
    ///
    /// Always inlined: its one caller is `run_one`, and left to the compiler
    /// it could stay out of line (the `Wheel::poll` inlined into it makes it
    /// large), costing a call with its register saves on every event
    /// (`benches/sim.rs` under callgrind with `SIM_HOLD_COUNT`, 100k
    /// pending, shows it).
    #[inline(always)]
    pub(super) fn pop(&mut self, limit: u64) -> Option<Popped<E>> {
        if self.now() > limit {
            // Everything pending is at `now()` or later.
            return None;
        }
        if self.ready.is_empty() {
            if self.wheel.is_empty() {
                // Do not let the wheel's clock run to `limit`: a later
                // `schedule` must still be relative to the last event.
                return None;
            }
            let (first, seq) = self.wheel.poll_numbered(limit)?;
            if !self.wheel.is_due_now() {
                // Alone at its tick: the common, sort-free case. Asking the
                // wheel's due bucket is O(1); a second poll that finds
                // nothing would look for the next bucket on every level.
                return Some(Popped {
                    id: EventId {
                        key: first.key,
                        seq,
                    },
                    time: first.deadline,
                    priority: first.value.priority,
                    event: first.value.event,
                });
            }
            self.ready
                .push_back(ready_from(first.key, seq, first.value));
        }
        Some(self.pop_from_run())
    }

    /// The next event of the current tick, which has at least one event in
    /// `ready`: first takes in the events scheduled for this tick since the
    /// last pop (they went into the wheel like any other).
    #[inline(never)]
    fn pop_from_run(&mut self) -> Popped<E> {
        let now = self.now();
        while let Some((expired, seq)) = self.wheel.poll_numbered(now) {
            self.insert_ready(ready_from(expired.key, seq, expired.value));
        }
        let ready = self
            .ready
            .pop_front()
            .expect("the current run is not empty");
        Popped {
            id: ready.id,
            time: now,
            priority: ready.priority,
            event: ready.event,
        }
    }

    /// Passes a popped event through the verifier, if there is one.
    /// `next_seq` is the next sequence number to be handed out (for the
    /// verifier's order check).
    ///
    /// # Errors
    /// An invariant violation, in verifying mode only.
    #[inline]
    pub(super) fn check_run(&mut self, popped: &Popped<E>, next_seq: u64) -> Result<(), SimError> {
        match &mut self.verifier {
            Some(verifier) => verifier.check_run(popped.id, popped.time, popped.priority, next_seq),
            None => Ok(()),
        }
    }

    /// Inserts into the sorted run; equal keys cannot occur (sequence
    /// numbers are unique).
    fn insert_ready(&mut self, ready: Ready<E>) {
        let key = ready.order();
        match self.ready.back() {
            Some(back) if back.order() > key => {
                let at = self.ready.partition_point(|r| r.order() < key);
                self.ready.insert(at, ready);
            }
            _ => self.ready.push_back(ready),
        }
    }

    /// Moves the clock to `time` when no pending event is due by then.
    pub(super) fn advance_to(&mut self, time: u64) {
        if self.ready.is_empty() && self.next_time().is_none_or(|next| next > time) {
            let none = self.wheel.poll(time);
            debug_assert!(none.is_none());
        }
    }

    /// Test-only access for fault injection.
    #[cfg(test)]
    pub(super) fn verifier_mut(&mut self) -> Option<&mut Verifier> {
        self.verifier.as_mut()
    }
}

enum Place {
    Wheel,
    Ready(usize),
}

fn ready_from<E>(key: TimerKey, seq: u64, pending: Pending<E>) -> Ready<E> {
    Ready {
        id: EventId { key, seq },
        priority: pending.priority,
        event: pending.event,
    }
}
