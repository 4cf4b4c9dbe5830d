//! tickwheel: hierarchical timing wheels that stay O(1) with millions of timers.
//!
//! * [`Wheel`] is the single-threaded hierarchical timing wheel (scheme 7 of
//!   Varghese & Lauck, "Hashed and Hierarchical Timing Wheels"): O(1) insert,
//!   cancel and reschedule, exact expiry on the deadline tick, FIFO within a
//!   tick, and idle time skipped in O(levels) through occupancy bitmaps.
//! * [`TimerService`] is the per-core service: shards that each own a wheel,
//!   with START, STOP and RESTART from any thread decided by one atomic
//!   transition, without locks. See the [`service`] module for the protocol.
//! * [`TimerService`] is the per-core service: shards that each own a wheel,
//!   with START, STOP and RESTART from any thread decided by one atomic
//!   transition, without locks. See the [`service`] module for the protocol.
//! * [`schemes`]: the paper's schemes 1-6 and a [`Wheel`] adapter, as baselines and test oracles.
//! * [`sim`]: discrete-event simulation on the wheel: virtual time, priorities, stepping, verification, tracing and checkpoints.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_debug_implementations, rust_2018_idioms)]

mod error;
pub mod ffi;
pub mod schemes;
pub mod service;
pub mod sim;
mod sync;
pub mod wheel;

pub use error::TimerError;
pub use service::{
    Builder, Clock, Driver, Expiry, ManualClock, PanicReport, Restart, ShardGuard, Stats, Stop,
    StopSync, Timer, TimerId, TimerService, TimerSpec,
};
pub use wheel::{Advance, Expired, TimerKey, Wheel};

/// The README's examples, compiled and run as doctests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
