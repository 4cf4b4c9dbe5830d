//! The timer schemes of Varghese & Lauck, implemented plainly, as reference
//! points and test oracles for [`Wheel`](crate::Wheel).
//!
//! The paper models a timer facility with two client operations, START_TIMER
//! and STOP_TIMER, and the PER_TICK_BOOKKEEPING done on every clock tick. Each
//! scheme here implements [`TimerScheme`], which has exactly those operations
//! ([`start`](TimerScheme::start), [`stop`](TimerScheme::stop),
//! [`tick`](TimerScheme::tick)), so the same operation sequence can drive all
//! seven and their expiries can be compared tick by tick.
//!
//! | scheme | type | START | STOP | PER_TICK |
//! |---|---|---|---|---|
//! | 1 unordered list | [`UnorderedList`] | O(1) | O(1) | O(n) |
//! | 2 ordered list | [`OrderedList`] | O(n) | O(1) | O(1) |
//! | 3 tree (here a binary heap) | [`TimerHeap`] | O(log n) | O(1) in the paper; O(log n) for a heap | O(1) |
//! | 4 basic wheel | [`BasicWheel`] | O(1) | O(1) | O(1) |
//! | 5 hashed wheel, sorted lists | [`HashedWheelSorted`] | O(n) worst, O(1) average | O(1) | O(1) |
//! | 6 hashed wheel, unsorted lists | [`HashedWheelUnsorted`] | O(1) | O(1) | O(n) worst, O(1) average |
//! | 7 hierarchical wheels | [`HierarchicalWheel`] (tickwheel's [`Wheel`](crate::Wheel)) | O(m) | O(1) | O(1) |
//!
//! `n` is the number of armed timers and `m` the number of levels. Costs are
//! per operation and leave out the expiry processing of timers that fire (which
//! every scheme must do once per timer). The average cases of schemes 5 and 6
//! assume `n` is not much larger than the number of slots; with `n` timers
//! over `S` slots, their average START (5) or PER_TICK (6) work is `n / S`.
//! For scheme 3 the paper cites trees for which STOP is O(1) given a pointer to
//! the record; a binary heap must restore heap order, which is O(log n).
//!
//! # Shared semantics
//!
//! * Time is a `u64` tick count starting at 0; [`tick`](TimerScheme::tick)
//!   moves it forward by one and then expires every timer due at the new tick.
//! * `start(interval, id)` arms a timer due at `now() + interval`. An interval
//!   of 0 is taken as 1: the timer fires at the next tick, never inside START.
//! * The callback receives the `id` given to START. Timers due on the same tick
//!   fire in an order that depends on the scheme: only the *set* of ids per
//!   tick is common to all seven.
//! * `stop` returns `true` exactly when it disarmed an armed timer; a handle of
//!   a timer that fired or was stopped is stale and returns `false`.
//!
//! ```
//! use tickwheel::schemes::{HashedWheelUnsorted, TimerScheme};
//!
//! let mut scheme = HashedWheelUnsorted::new(8);
//! let a = scheme.start(3, 1).unwrap();
//! scheme.start(20, 2).unwrap();
//! let mut fired = Vec::new();
//! for _ in 0..20 {
//!     scheme.tick(|id| fired.push(id));
//! }
//! assert_eq!(fired, [1, 2]);
//! assert!(!scheme.stop(a)); // already fired: stale
//! ```

mod arena;
mod basic_wheel;
mod hashed_sorted;
mod hashed_unsorted;
mod hierarchical;
mod list;
mod ordered_list;
mod tree;
mod unordered_list;

use std::fmt;

pub use basic_wheel::BasicWheel;
pub use hashed_sorted::HashedWheelSorted;
pub use hashed_unsorted::HashedWheelUnsorted;
pub use hierarchical::HierarchicalWheel;
pub use ordered_list::OrderedList;
pub use tree::TimerHeap;
pub use unordered_list::UnorderedList;

/// A timer facility in the paper's model: START, STOP and per-tick bookkeeping.
pub trait TimerScheme {
    /// What START returns and STOP takes: names one arming of one timer.
    type Handle: Copy + fmt::Debug;

    /// Short name of the scheme, for tables and benchmark ids.
    const NAME: &'static str;

    /// The current tick.
    fn now(&self) -> u64;

    /// Number of armed timers.
    fn len(&self) -> usize;

    /// `true` when no timer is armed.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// START_TIMER: arms a timer with request id `id`, due `interval` ticks
    /// from now (0 counts as 1).
    ///
    /// # Errors
    /// [`SchemeError::IntervalTooLong`] when the scheme cannot hold the
    /// interval (only [`BasicWheel`] has such a limit); nothing is armed.
    fn start(&mut self, interval: u64, id: u64) -> Result<Self::Handle, SchemeError>;

    /// STOP_TIMER: disarms the timer. `true` when it was armed, `false` when
    /// the handle is stale (the timer fired or was already stopped).
    fn stop(&mut self, handle: Self::Handle) -> bool;

    /// PER_TICK_BOOKKEEPING: advances time by one tick and calls `on_expiry`
    /// with the id of every timer due at the new tick.
    fn tick<F: FnMut(u64)>(&mut self, on_expiry: F);
}

/// Names one arming of a timer in schemes 1 to 6. Stale once the timer fired
/// or was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Handle {
    index: u32,
    generation: u32,
}

/// Why a scheme refused to START a timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SchemeError {
    /// The interval exceeds the longest the scheme can hold.
    IntervalTooLong {
        /// The interval asked for.
        interval: u64,
        /// The longest interval the scheme accepts.
        max: u64,
    },
}

impl fmt::Display for SchemeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchemeError::IntervalTooLong { interval, max } => write!(
                f,
                "interval of {interval} ticks exceeds the scheme's maximum of {max}"
            ),
        }
    }
}

impl std::error::Error for SchemeError {}

/// The deadline of a timer started at `now` with `interval` (0 counts as 1).
fn deadline(now: u64, interval: u64) -> u64 {
    now.saturating_add(interval.max(1))
}

/// Shared `Debug` body: the scheme's name, time and size, not its contents.
fn debug_scheme(f: &mut fmt::Formatter<'_>, name: &str, now: u64, len: usize) -> fmt::Result {
    f.debug_struct(name)
        .field("now", &now)
        .field("len", &len)
        .finish_non_exhaustive()
}
