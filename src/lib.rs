//! tickwheel: hierarchical timing wheels that stay O(1) with millions of timers.
//!
//! * [`Wheel`] is the single-threaded hierarchical timing wheel (scheme 7 of
//!   Varghese & Lauck, "Hashed and Hierarchical Timing Wheels"): O(1) insert,
//!   cancel and reschedule, exact expiry on the deadline tick, FIFO within a
//!   tick, and idle time skipped in O(levels) through occupancy bitmaps.
//! * [`schemes`]: the paper's schemes 1-6 and a [`Wheel`] adapter, as baselines and test oracles.
//! * [`sim`]: discrete-event simulation on the wheel: virtual time, priorities, stepping, verification, tracing and checkpoints.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_debug_implementations, rust_2018_idioms)]

mod error;
pub mod schemes;
pub mod sim;
pub mod wheel;

pub use error::TimerError;
pub use wheel::{Advance, Expired, TimerKey, Wheel};
