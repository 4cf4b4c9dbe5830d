//! tickwheel: hierarchical timing wheels that stay O(1) with millions of timers.
//!
//! * [`Wheel`] is the single-threaded hierarchical timing wheel (scheme 7 of
//!   Varghese & Lauck, "Hashed and Hierarchical Timing Wheels"): O(1) insert,
//!   cancel and reschedule, exact expiry on the deadline tick, FIFO within a
//!   tick, and idle time skipped in O(levels) through occupancy bitmaps.
//! * [`TimerService`] is the per-core service: shards that each own a wheel,
//!   with START, STOP and RESTART from any thread decided by one atomic
//!   transition, without locks. See the [`service`] module for the protocol.
//! * A C ABI (module `ffi`, compiled only with the `capi` feature):
//!   `include/tickwheel.h` and the C++17 wrapper `include/tickwheel.hpp`,
//!   installed with cargo-c (see the README).
//! * [`schemes`]: the paper's schemes 1-6 and a [`Wheel`] adapter, as
//!   baselines and test oracles.
//! * [`sim`]: discrete-event simulation on the wheel: virtual time,
//!   priorities, stepping, verification, tracing and checkpoints.
//!
//! # Example
//!
//! An idle timeout pushed back on activity, and a request deadline stopped
//! before it fires, on a service whose clock only moves when told to:
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//! use tickwheel::{Clock, Driver, ManualClock, Stop, TimerService};
//!
//! let clock = ManualClock::new();
//! let service = TimerService::builder()
//!     .shards(1)
//!     .driver(Driver::Embedded) // this thread drives the shard
//!     .clock(Clock::Manual(clock.clone()))
//!     .build()?;
//! let mut shard = service.claim_shard(0)?;
//!
//! let closed = Arc::new(AtomicUsize::new(0));
//! let on_idle = closed.clone();
//! let idle = service.start(Duration::from_millis(30), move |_| {
//!     on_idle.fetch_add(1, Ordering::Relaxed);
//! })?;
//! let request = service.start(Duration::from_millis(200), |_| unreachable!())?;
//!
//! clock.advance(Duration::from_millis(20));
//! shard.poll()?;
//! idle.restart(Duration::from_millis(30))?; // activity at 20 ms: now due at 50 ms
//! assert_eq!(request.stop(), Stop::Cancelled); // answered: it will never fire
//!
//! clock.advance(Duration::from_millis(29));
//! assert_eq!(shard.poll()?, 0); // 49 ms: not yet
//! clock.advance(Duration::from_millis(1));
//! assert_eq!(shard.poll()?, 1); // 50 ms: the idle timeout fires
//! assert_eq!(closed.load(Ordering::Relaxed), 1);
//! # Ok::<(), tickwheel::TimerError>(())
//! ```
//!
//! # Map of the modules
//!
//! | Module | What it holds |
//! |---|---|
//! | [`wheel`] | [`Wheel`]: the hierarchy of levels (11 levels of 64 slots), the slab of entries, keys with generations |
//! | [`service`] | [`TimerService`], its [`Builder`], shards and drivers, the per-timer state word, the slot arena, the remote queue other threads hand their operations to, [`Timer`] handles, [`Stats`] |
//! | `ffi` | the C ABI only (`tw_*` functions and types), with the `capi` feature; the Rust core does not depend on it |
//! | [`sim`] | [`sim::Simulation`]: a discrete-event scheduler on the wheel |
//! | [`schemes`] | schemes 1-6 of the paper behind one [`schemes::TimerScheme`] trait |
//! | `sync` (private) | the switch between std and loom atomics, cells and threads |
//!
//! The behaviour tickwheel promises, item by item with the tests that check
//! it, is in `docs/CONTRACT.md`; how it is verified (loom, miri, sanitizers,
//! fuzzing, soak) in `docs/VERIFYING.md`.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_debug_implementations, rust_2018_idioms)]

mod error;
// The C ABI's `#[no_mangle]` functions would otherwise be compiled into every
// Rust dependent's build; only the C libraries (cargo-c, which turns `capi`
// on) and the C ABI's own tests need them.
#[cfg(feature = "capi")]
pub mod ffi;
pub mod future;
pub mod schemes;
pub mod service;
pub mod sim;
mod sync;
pub mod wheel;

pub use error::TimerError;
pub use service::{
    Builder, Clock, Driver, DriverPriority, Due, Expiry, ManualClock, PanicReport, PanicSite,
    Restart, ShardGuard, Stats, Stop, StopSync, Timer, TimerId, TimerService, TimerSpec,
};
pub use wheel::{Advance, EmbeddedWheel, Expired, Fired, TimerEntry, TimerKey, Wheel};

/// The README's examples, compiled and run as doctests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
