//! Discrete-event simulation on the hierarchical wheel.
//!
//! The wheel that times out connections is also a fast *event list*, the
//! time-flow mechanism of a discrete-event simulator. A binary heap costs
//! O(log n) per event; the wheel costs O(1) per event and, through its
//! occupancy bitmaps, jumps over idle time in O(levels).
//!
//! # Model
//!
//! * **Time** is a `u64` count of ticks (pick the tick: 1 µs, 1 ns, one
//!   clock cycle). It does not flow: it jumps to the next event's time.
//! * **Events** are values of any type `E`. A *handler* closure, given to a
//!   run method, receives each event with a [`Context`], from which it reads
//!   the time and schedules or cancels events. The model's state is whatever
//!   the handler captures.
//! * **Order**: by time; within one time by priority, higher first; then in
//!   the order events were scheduled. An event scheduled for the *current*
//!   time from a handler is ordered by the same rule among the events of
//!   that time that have not run yet (see the rule below).
//! * **Cancellation** by [`EventId`]; a stale id (the event ran, or was
//!   cancelled) is refused and never reaches another event.
//!
//! # The order rule, precisely
//!
//! Each event gets a sequence number when scheduled (a per-simulation
//! counter, never reused). The scheduler always runs the pending event with
//! the least `(time, Reverse(priority), sequence)`: the order of a binary
//! heap with that key. There is no preemption: an event scheduled now with a
//! priority higher than the event that just ran runs next, before the
//! remaining lower-priority events of this time, but after those that ran.
//! How the wheel provides this without a heap is in `queue.rs`.
//!
//! # Running and observing
//!
//! * [`Simulation::step`] runs one event; [`run`](Simulation::run),
//!   [`run_until`](Simulation::run_until), [`run_events`](Simulation::run_events),
//!   [`run_for`](Simulation::run_for) (wall clock) and
//!   [`run_with`](Simulation::run_with) ([`Limits`]) run many and return a
//!   [`RunReport`]. A handler may end a run with [`Context::stop`].
//! * [`Builder::verify`] turns on the verifying mode: an independent record
//!   checks that time never goes backwards, that each event runs once and on
//!   its time, and the order rule; a violation is a [`SimError`].
//! * [`Stats`]: events run, scheduled, cancelled, peak queue length, events
//!   per second.
//! * Tracing: a hook per event ([`Builder::trace_hook`]) and a recorded
//!   [`Trace`] ([`Builder::record_trace`]) of [`TraceRecord`]s (id, time,
//!   priority, name, wall start and duration), exported as Chrome
//!   trace-event JSON for Perfetto or `chrome://tracing`.
//! * [`Checkpoint`]s save the scheduler state and roll back to it (events
//!   must be `Clone`); a rollback replays identically.
//!
//! # Example
//!
//! ```
//! use tickwheel::sim::Simulation;
//!
//! // Three jobs arrive at time 0; "urgent" ones run first within a time.
//! let mut sim = Simulation::builder().verify(true).build();
//! sim.schedule(0, "routine");
//! sim.schedule_with_priority(0, 10, "urgent");
//! sim.schedule(7, "later");
//!
//! let mut log = Vec::new();
//! let report = sim
//!     .run(|ctx, job| {
//!         log.push((ctx.now(), job));
//!         if job == "urgent" {
//!             ctx.schedule(100, "follow-up");
//!         }
//!     })
//!     .unwrap();
//! assert_eq!(log, [(0, "urgent"), (0, "routine"), (7, "later"), (100, "follow-up")]);
//! assert_eq!(report.events, 4);
//! assert_eq!(sim.stats().events_verified, 4);
//! ```

mod checkpoint;
mod error;
mod queue;
mod run;
mod scheduler;
mod stats;
mod trace;
mod verify;

pub use checkpoint::Checkpoint;
pub use error::SimError;
pub use queue::EventId;
pub use run::{Limits, RunReport, StopReason};
pub use scheduler::{Builder, Context, Simulation};
pub use stats::Stats;
pub use trace::{Timeline, Trace, TraceRecord};

#[cfg(test)]
mod tests;
