//! The single-threaded hierarchical timing wheel (scheme 7 of Varghese & Lauck).
//!
//! # Shape
//!
//! Time is a `u64` count of ticks. The wheel has [`LEVELS`] levels of 64 buckets;
//! level `L` covers one base-64 digit of the deadline. (The width is one
//! constant, `SLOT_BITS` in `level.rs`. 256 buckets in 8 levels, built with
//! `--cfg tickwheel_wide_levels`, are faster at 100k pending timers and
//! more (fewer levels to cascade through) but slower at 1k and on Ratas'
//! workload: compare `benches/sim.rs` and `benches/ratas.rs` built both
//! ways.) With a 1 ms tick:
//!
//! | level | buckets | ticks per bucket | a timer goes here when it is due within | (at 1 ms) |
//! |------:|--------:|-----------------:|----------------------------------------:|----------:|
//! | 0     | 64      | 1                | 2^6 ticks                               | 64 ms     |
//! | 1     | 64      | 2^6              | 2^12                                    | 4.1 s     |
//! | 2     | 64      | 2^12             | 2^18                                    | 4.4 min   |
//! | 3     | 64      | 2^18             | 2^24                                    | 4.7 h     |
//! | 4     | 64      | 2^24             | 2^30                                    | 12.4 days |
//! | 5     | 64      | 2^30             | 2^36                                    | 2.2 years |
//! | 6     | 64      | 2^36             | 2^42                                    | 139 years |
//! | 7-9   | 64      | 2^42 .. 2^54     | 2^48 .. 2^60                            |           |
//! | 10    | 16      | 2^60             | 2^64 (the whole `u64` range)            |           |
//!
//! A timer with deadline `d` sits, while the wheel's time is `now`, in the bucket
//! named by the highest base-64 digit in which `d` and `now` differ: level =
//! that digit's position, bucket = `d`'s digit there. "Within" in the table is
//! therefore approximate: a timer sits on level 0 exactly when `d` and `now`
//! are in the same aligned block of 64 ticks.
//!
//! # Why it is exact and O(1)
//!
//! * **Insert / cancel / reschedule** compute the bucket with one XOR and one
//!   `leading_zeros`, and link or unlink a slab entry: O(1) whatever the number
//!   of armed timers.
//! * **Cascading.** When time reaches the start of a bucket on level `L > 0`,
//!   the bucket is emptied and each timer re-placed relative to the new time,
//!   landing on a lower level. A timer is touched at most once per level, and
//!   fires on its own deadline tick, never on a bucket boundary.
//! * **Idle time is free.** Each level keeps an occupancy bitmap (one `u64`
//!   at 64 buckets), so the next non-empty bucket is found with a
//!   `trailing_zeros` per word. Advancing across
//!   any stretch of empty ticks, and asking for the next deadline, cost
//!   O(levels).
//! * **Order.** Every bucket on level 0 holds the timers of one single tick,
//!   and timers due on the same tick come out in the order they were armed
//!   (a reschedule counts as arming again). Each arming takes a number;
//!   higher buckets keep no order (moves there are lazy), and a level-0
//!   bucket that received an entry out of order is sorted by number before
//!   it fires (`hierarchy.rs`, "Same-tick order without relinking").
//!
//! # Keeping a fired timer (`poll_keep`, `advance_keep`)
//!
//! [`poll`](Wheel::poll) frees a fired timer: its key goes stale and its
//! payload is handed out. A caller that re-arms the same timer after it
//! fires (a pacing or retry timer, like Ratas' `TimerEvent`, which stays in
//! its owner and is scheduled again) can use
//! [`poll_keep`](Wheel::poll_keep) / [`advance_keep`](Wheel::advance_keep)
//! instead: the timer is taken out of its bucket but stays in the wheel's
//! storage, *held*, with its key valid and its payload in place (the
//! caller gets a clone). A `reschedule*` of a held key arms it again in
//! place (no free, no allocation, no new key; it counts as arming again
//! for same-tick order), and [`cancel`](Wheel::cancel) frees it and returns
//! the payload. A held timer is not armed: it never fires, is not counted
//! by [`len`](Wheel::len), and [`contains`](Wheel::contains) /
//! [`deadline`](Wheel::deadline) say so; [`get`](Wheel::get) still reads its
//! payload. It stays held (its storage in use) until re-armed or cancelled.
//!
//! # Time semantics
//!
//! `now()` is the current tick. A timer whose deadline is `<= now` is *due*:
//! the next [`poll`](Wheel::poll) returns it, never the call that armed it.
//! Inside an [`advance`](Wheel::advance), a timer armed for the tick being
//! processed is due to the next advance (see there).
//! Deadlines in the past are clamped to `now`; deadlines past `u64::MAX`
//! saturate there (`now + delay` never overflows or wraps). Polling to a tick
//! before `now` (a clock going backwards) processes what is due and otherwise
//! counts as no time passing.

mod embedded;
mod hierarchy;
mod level;
mod node;
mod slab;

use std::fmt;
use std::ops::RangeInclusive;

pub use embedded::{EmbeddedWheel, Fired, TimerEntry};
pub(crate) use hierarchy::Hierarchy;
pub use hierarchy::LEVELS;
// The remote queue's prefetch hints are left out of the loom, shuttle and miri builds.
#[cfg_attr(any(loom, shuttle, miri), allow(unused_imports))]
pub(crate) use node::{prefetch, prefetch_for_write, Node, Nodes, NIL, UNLINKED};
use slab::Slab;
pub use slab::TimerKey;

/// How a keyed call of the [`Wheel`] names its timer: a [`TimerKey`], or a
/// key the C ABI received packed into a `u64` (`RawKey`), checked without
/// unpacking it first (`Slab::resolve_raw`). The public methods take a
/// `TimerKey`; their `_by` twins take either.
pub(crate) trait Names: Copy {
    /// The index of the occupied entry this names, or `None` if it is stale.
    fn index_in<T>(self, slab: &Slab<T>) -> Option<u32>;
}

impl Names for TimerKey {
    #[inline(always)]
    fn index_in<T>(self, slab: &Slab<T>) -> Option<u32> {
        slab.resolve(self)
    }
}

/// A key packed by [`TimerKey::to_raw`] (any `u64`: one that never named a
/// timer is stale).
#[cfg(feature = "capi")]
#[derive(Clone, Copy)]
pub(crate) struct RawKey(pub(crate) u64);

#[cfg(feature = "capi")]
impl Names for RawKey {
    #[inline(always)]
    fn index_in<T>(self, slab: &Slab<T>) -> Option<u32> {
        slab.resolve_raw(self.0)
    }
}

use crate::error::TimerError;

/// A timer that came due, as returned by [`Wheel::poll`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired<T> {
    /// The key the timer had. It is stale now, except after
    /// [`Wheel::poll_keep`] / [`Wheel::advance_keep`], which keep the timer
    /// (held) under this key.
    pub key: TimerKey,
    /// The tick it was due at. `Wheel::now()` equals this while the caller
    /// handles the timer.
    pub deadline: u64,
    /// The payload given when the timer was armed.
    pub value: T,
}

/// What a capped [`Wheel::advance`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct Advance {
    /// Timers handed to the callback in this call.
    pub expired: usize,
    /// `true` when the wheel reached the target tick with nothing left due;
    /// `false` when the cap stopped it early, or when a callback armed a
    /// timer for the tick being processed (it is due to the next advance,
    /// which fires it first, on that tick): call again to finish.
    pub complete: bool,
}

/// A single-threaded hierarchical timing wheel holding a payload `T` per timer.
///
/// ```
/// use tickwheel::Wheel;
///
/// let mut wheel = Wheel::new();
/// let a = wheel.insert(5, "a");
/// let _b = wheel.insert(5, "b");
/// let c = wheel.insert(3, "c");
/// wheel.cancel(c);
///
/// assert!(wheel.poll(4).is_none());        // nothing due up to tick 4
/// let first = wheel.poll(10).unwrap();     // "a" is due at tick 5
/// assert_eq!((first.value, first.deadline, wheel.now()), ("a", 5, 5));
/// assert_eq!(wheel.poll(10).unwrap().value, "b"); // same tick: arm order
/// assert!(wheel.poll(10).is_none());
/// assert_eq!(wheel.now(), 10);
/// assert!(wheel.cancel(a).is_none());      // `a` fired: its key is stale
/// ```
#[derive(Clone)]
pub struct Wheel<T> {
    hierarchy: Hierarchy,
    slab: Slab<T>,
    /// Fired timers kept under their keys (see "Keeping a fired timer"):
    /// occupied slab entries that are in no bucket.
    held: usize,
}

impl<T> Default for Wheel<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Wheel<T> {
    /// An empty wheel at tick 0.
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// An empty wheel at tick 0 with room for `capacity` timers before it
    /// allocates.
    pub fn with_capacity(capacity: usize) -> Self {
        Wheel {
            hierarchy: Hierarchy::starting_at(0),
            slab: Slab::with_capacity(capacity),
            held: 0,
        }
    }

    /// An empty wheel whose time starts at `now`.
    pub fn starting_at(now: u64) -> Self {
        Wheel {
            hierarchy: Hierarchy::starting_at(now),
            slab: Slab::with_capacity(0),
            held: 0,
        }
    }

    /// The current tick. While a timer returned by [`poll`](Self::poll) is
    /// handled, this is that timer's deadline.
    pub fn now(&self) -> u64 {
        self.hierarchy.now()
    }

    /// Number of armed timers (including those due but not yet polled;
    /// not held ones, see [`poll_keep`](Self::poll_keep)).
    pub fn len(&self) -> usize {
        self.slab.len() - self.held
    }

    /// `true` when no timer is armed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Timers the wheel can hold before its storage grows.
    pub fn capacity(&self) -> usize {
        self.slab.capacity()
    }

    /// Arms a timer due `delay` ticks from now. `delay == 0` makes it due at
    /// the current tick: the next [`poll`](Self::poll) returns it.
    pub fn insert(&mut self, delay: u64, value: T) -> TimerKey {
        self.insert_at(self.now().saturating_add(delay), value)
    }

    /// Arms a timer due at tick `deadline` (clamped to `now()` if earlier).
    #[inline]
    pub fn insert_at(&mut self, deadline: u64, value: T) -> TimerKey {
        let deadline = deadline.max(self.now());
        let key = self.slab.insert(value);
        self.hierarchy.link(&mut self.slab, key.index(), deadline);
        key
    }

    /// [`insert_at`](Self::insert_at) with the arming number `seq` (the
    /// number same-tick order goes by) chosen by the caller: the
    /// simulation's event list numbers its events itself and reads the
    /// numbers back ([`number_of`](Self::number_of),
    /// [`poll_numbered`](Self::poll_numbered)) instead of storing a second
    /// copy in every payload (8 bytes of each pending event).
    ///
    /// # Panics
    /// If `seq` is below a number this wheel has already given out: numbers
    /// must grow, or same-tick order would break.
    #[inline]
    pub(crate) fn insert_at_numbered(&mut self, deadline: u64, seq: u64, value: T) -> TimerKey {
        let deadline = deadline.max(self.now());
        let key = self.slab.insert(value);
        self.hierarchy
            .link_numbered(&mut self.slab, key.index(), deadline, seq);
        key
    }

    /// The arming number of an armed timer (see
    /// [`insert_at_numbered`](Self::insert_at_numbered)); `None` for a stale
    /// key.
    pub(crate) fn number_of(&self, key: TimerKey) -> Option<u64> {
        let index = self.slab.resolve(key)?;
        let entry = self.slab.get(index);
        (entry.bucket != UNLINKED).then_some(entry.seq)
    }

    /// Arms a timer due at some tick from `earliest` to `latest` ticks from
    /// now (both inclusive), chosen by the wheel to save work.
    ///
    /// # Errors
    /// [`TimerError::InvalidRange`] when `earliest > latest`; nothing is armed.
    pub fn insert_in_range(
        &mut self,
        delays: RangeInclusive<u64>,
        value: T,
    ) -> Result<TimerKey, TimerError> {
        let (earliest, latest) = delays.into_inner();
        // Check the delays themselves: near `u64::MAX` both saturated ends can
        // be equal, which would hide an inverted range from the check below.
        if earliest > latest {
            return Err(TimerError::InvalidRange);
        }
        self.insert_at_in_range(
            self.now().saturating_add(earliest)..=self.now().saturating_add(latest),
            value,
        )
    }

    /// Arms a timer due at some tick in `deadlines` (absolute ticks).
    ///
    /// The wheel picks the tick in the window with the most trailing zero
    /// bits. Such a tick is the first tick of a bucket on as high a level as
    /// the window allows, so the timer fires straight from the bucket it was
    /// put in, with the fewest cascades, and timers with overlapping windows
    /// share one tick (one wakeup).
    ///
    /// # Errors
    /// [`TimerError::InvalidRange`] when the range is empty; nothing is armed.
    pub fn insert_at_in_range(
        &mut self,
        deadlines: RangeInclusive<u64>,
        value: T,
    ) -> Result<TimerKey, TimerError> {
        let (earliest, latest) = deadlines.into_inner();
        if earliest > latest {
            return Err(TimerError::InvalidRange);
        }
        let earliest = earliest.max(self.now());
        let latest = latest.max(self.now());
        Ok(self.insert_at(roundest_tick_in(earliest, latest), value))
    }

    /// Disarms the timer and returns its payload, or `None` if the key is
    /// stale. Also frees a held timer (see [`poll_keep`](Self::poll_keep)).
    pub fn cancel(&mut self, key: TimerKey) -> Option<T> {
        self.cancel_by(key)
    }

    /// [`cancel`](Self::cancel) for a timer named either way ([`Names`]).
    #[inline]
    pub(crate) fn cancel_by(&mut self, key: impl Names) -> Option<T> {
        let index = key.index_in(&self.slab)?;
        if self.is_held_at(index) {
            self.held -= 1;
        } else {
            self.hierarchy.unlink(&mut self.slab, index);
        }
        Some(self.slab.remove(index))
    }

    /// Moves an armed timer to a new deadline (clamped to `now()` if earlier).
    /// The key stays valid. A held timer (see [`poll_keep`](Self::poll_keep))
    /// is armed again in place, under the same key.
    ///
    /// Same-tick order: a moved timer counts as newly armed, so it fires after
    /// every timer already armed for its new tick, whether it came from a
    /// later tick, an earlier one or that same tick (docs/CONTRACT.md item 5).
    /// `src/wheel/tests.rs::a_moved_timer_fires_after_those_already_armed_for_its_tick`
    /// checks it for every move function of this wheel.
    ///
    /// # Errors
    /// [`TimerError::StaleKey`] when the timer already expired or was cancelled.
    #[inline]
    pub fn reschedule_at(&mut self, key: TimerKey, deadline: u64) -> Result<(), TimerError> {
        self.reschedule_at_by(key, deadline)
    }

    /// [`reschedule_at`](Self::reschedule_at) for a timer named either way
    /// ([`Names`]).
    #[inline]
    pub(crate) fn reschedule_at_by(
        &mut self,
        key: impl Names,
        deadline: u64,
    ) -> Result<(), TimerError> {
        let index = key.index_in(&self.slab).ok_or(TimerError::StaleKey)?;
        let deadline = deadline.max(self.now());
        if self.hierarchy.rearm(&mut self.slab, index, deadline) {
            self.held -= 1;
        }
        Ok(())
    }

    /// Moves an armed timer to `delay` ticks from now. See
    /// [`reschedule_at`](Self::reschedule_at).
    ///
    /// Same-tick order: a moved timer counts as newly armed, so it fires after
    /// every timer already armed for its new tick, whether it came from a
    /// later tick, an earlier one or that same tick (docs/CONTRACT.md item 5).
    ///
    /// # Errors
    /// [`TimerError::StaleKey`] when the timer already expired or was cancelled.
    #[inline]
    pub fn reschedule(&mut self, key: TimerKey, delay: u64) -> Result<(), TimerError> {
        self.reschedule_by(key, delay)
    }

    /// [`reschedule`](Self::reschedule) for a timer named either way
    /// ([`Names`]).
    #[inline]
    pub(crate) fn reschedule_by(&mut self, key: impl Names, delay: u64) -> Result<(), TimerError> {
        self.reschedule_at_by(key, self.now().saturating_add(delay))
    }

    /// Keeps an armed timer if its deadline is already `delays.start()` to
    /// `delays.end()` ticks from now (both inclusive), else moves it to the
    /// roundest tick of that window (as [`insert_in_range`](Self::insert_in_range)
    /// picks). Returns the timer's deadline. A held timer (see
    /// [`poll_keep`](Self::poll_keep)) is never kept: it is armed again in
    /// place at the window's roundest tick.
    ///
    /// Same-tick order: a moved timer counts as newly armed, so it fires after
    /// every timer already armed for its new tick, whether it came from a
    /// later tick, an earlier one or that same tick (docs/CONTRACT.md item 5).
    /// A kept timer keeps its place.
    ///
    /// # Errors
    /// [`TimerError::InvalidRange`] when the range is empty (the timer is not
    /// touched); [`TimerError::StaleKey`] when the timer already expired or
    /// was cancelled.
    #[inline]
    pub fn reschedule_in_range(
        &mut self,
        key: TimerKey,
        delays: RangeInclusive<u64>,
    ) -> Result<u64, TimerError> {
        self.reschedule_in_range_by(key, delays)
    }

    /// [`reschedule_in_range`](Self::reschedule_in_range) for a timer named
    /// either way ([`Names`]).
    #[inline]
    pub(crate) fn reschedule_in_range_by(
        &mut self,
        key: impl Names,
        delays: RangeInclusive<u64>,
    ) -> Result<u64, TimerError> {
        let (earliest, latest) = delays.into_inner();
        if earliest > latest {
            return Err(TimerError::InvalidRange);
        }
        self.reschedule_at_in_range_by(
            key,
            self.now().saturating_add(earliest)..=self.now().saturating_add(latest),
        )
    }

    /// [`reschedule_in_range`](Self::reschedule_in_range) with absolute
    /// ticks (clamped to `now()`).
    ///
    /// Same-tick order: a moved timer counts as newly armed, so it fires after
    /// every timer already armed for its new tick, whether it came from a
    /// later tick, an earlier one or that same tick (docs/CONTRACT.md item 5).
    /// A kept timer keeps its place.
    ///
    /// # Errors
    /// As [`reschedule_in_range`](Self::reschedule_in_range).
    #[inline]
    pub fn reschedule_at_in_range(
        &mut self,
        key: TimerKey,
        deadlines: RangeInclusive<u64>,
    ) -> Result<u64, TimerError> {
        self.reschedule_at_in_range_by(key, deadlines)
    }

    /// [`reschedule_at_in_range`](Self::reschedule_at_in_range) for a timer
    /// named either way ([`Names`]).
    #[inline]
    pub(crate) fn reschedule_at_in_range_by(
        &mut self,
        key: impl Names,
        deadlines: RangeInclusive<u64>,
    ) -> Result<u64, TimerError> {
        let (earliest, latest) = deadlines.into_inner();
        if earliest > latest {
            return Err(TimerError::InvalidRange);
        }
        let index = key.index_in(&self.slab).ok_or(TimerError::StaleKey)?;
        let earliest = earliest.max(self.now());
        let latest = latest.max(self.now());
        let entry = self.slab.get(index);
        let current = entry.deadline;
        // A held timer keeps the deadline it fired at, which may lie in the
        // window (`earliest == now`): it must be armed, not kept.
        if (earliest..=latest).contains(&current) && !self.is_held_at(index) {
            return Ok(current);
        }
        Ok(self.move_into(index, earliest, latest))
    }

    /// The move half of [`reschedule_at_in_range`](Self::reschedule_at_in_range),
    /// out of line: a timer kept in its window (the common case for idle
    /// timers) then costs a key check and two compares in the caller.
    #[inline(never)]
    fn move_into(&mut self, index: u32, earliest: u64, latest: u64) -> u64 {
        let deadline = roundest_tick_in(earliest, latest);
        if self.hierarchy.rearm(&mut self.slab, index, deadline) {
            self.held -= 1;
        }
        deadline
    }

    /// The tick the timer is due at, or `None` if the key is stale or the
    /// timer is held (not armed; see [`poll_keep`](Self::poll_keep)).
    pub fn deadline(&self, key: TimerKey) -> Option<u64> {
        self.deadline_by(key)
    }

    /// [`deadline`](Self::deadline) for a timer named either way ([`Names`]).
    #[inline]
    pub(crate) fn deadline_by(&self, key: impl Names) -> Option<u64> {
        let index = key.index_in(&self.slab)?;
        let entry = self.slab.get(index);
        (entry.bucket != UNLINKED).then_some(entry.deadline)
    }

    /// `true` while the timer is armed (`false` for a stale key and for a
    /// held timer, see [`poll_keep`](Self::poll_keep)).
    pub fn contains(&self, key: TimerKey) -> bool {
        self.slab
            .resolve(key)
            .is_some_and(|index| !self.is_held_at(index))
    }

    /// Whether occupied entry `index` is held: a fired timer kept under its
    /// key is the only occupied entry in no bucket.
    #[inline]
    fn is_held_at(&self, index: u32) -> bool {
        self.slab.get(index).bucket == UNLINKED
    }

    /// `true` while the timer is held: it fired through
    /// [`poll_keep`](Self::poll_keep) or [`advance_keep`](Self::advance_keep)
    /// and has been neither armed again nor cancelled.
    pub fn is_held(&self, key: TimerKey) -> bool {
        self.slab
            .resolve(key)
            .is_some_and(|index| self.is_held_at(index))
    }

    /// The held timers as `(key, deadline it fired at)`, in no particular
    /// order (for `tw_wheel_clear`). O(1) when none is held, else
    /// O(capacity).
    #[cfg(any(feature = "capi", test))]
    pub(crate) fn held(&self) -> Vec<(TimerKey, u64)> {
        if self.held == 0 {
            return Vec::new();
        }
        self.slab.unlinked()
    }

    /// When level 0 shows that nothing is due by `target`, moves `now()` to
    /// `target` as a fruitless [`poll`](Self::poll) would and returns
    /// `true`; else changes nothing. Only a capped advance uses it (see
    /// [`finish_capped_advance`](Self::finish_capped_advance)): between
    /// fired timers the next poll answers "anything else due?" with the
    /// same one mask, so checking first is pure overhead when more is due
    /// (`benches/ratas.rs`, whose capped advances fire many timers each).
    #[inline]
    fn skip_if_idle_until(&mut self, target: u64) -> bool {
        self.hierarchy.skip_if_idle_until(target)
    }

    /// The payload of an armed or held timer.
    pub fn get(&self, key: TimerKey) -> Option<&T> {
        let index = self.slab.resolve(key)?;
        self.slab.get(index).value()
    }

    /// The payload of an armed or held timer, mutably.
    pub fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        let index = self.slab.resolve(key)?;
        self.slab.get_mut(index).value_mut()
    }

    /// The earliest deadline of any armed timer (`now()` if one is due).
    ///
    /// O(levels) when the earliest timer sits on level 0. Above level 0 its
    /// bucket spans many ticks and is walked once to find the exact minimum;
    /// the answer is then remembered until the earliest timer fires, is
    /// cancelled or moves, so repeated queries and queries after unrelated
    /// changes cost O(1).
    pub fn next_deadline(&self) -> Option<u64> {
        self.hierarchy.next_deadline(&self.slab)
    }

    /// The earliest tick at which the wheel has work: the deadline of the
    /// earliest timer if it sits on level 0 (or is due), else the first tick
    /// of the earliest higher-level bucket, where its timers cascade down.
    ///
    /// Never later than [`next_deadline`](Self::next_deadline), `None` exactly
    /// when it is `None`, and always O(levels) however many timers share a
    /// bucket. A driver that sleeps until this tick and polls is never late,
    /// and wakes early at most once per level on the way to a far deadline.
    pub fn next_wakeup(&self) -> Option<u64> {
        self.hierarchy.next_wakeup()
    }

    /// `true` when a timer is due at `now()`, i.e. the next
    /// [`poll`](Self::poll) returns one without moving time. O(1): cheaper
    /// than a poll that finds nothing.
    pub fn is_due_now(&self) -> bool {
        self.hierarchy.due_now()
    }

    /// Ticks from now until the next timer is due, at most `cap`. Returns `cap`
    /// when nothing is armed and 0 when a timer is due now ([`is_empty`](Self::is_empty)
    /// tells "nothing armed" from "`cap` or more ticks away"). Costs O(levels)
    /// when the next bucket starts `cap` or more ticks away; otherwise as
    /// [`next_deadline`](Self::next_deadline).
    pub fn ticks_to_next_event(&self, cap: u64) -> u64 {
        if cap == 0 {
            return 0;
        }
        // One pass over the levels, stopping at the first bucket that
        // starts `cap` or more ticks away.
        let limit = self.now().saturating_add(cap - 1);
        self.hierarchy
            .next_deadline_until(&self.slab, limit)
            .map_or(cap, |deadline| deadline - self.now())
    }

    /// Returns the next timer due at or before `target`, advancing `now()` to
    /// its deadline; or, when none is, advances `now()` to `target` and
    /// returns `None`.
    ///
    /// Timers come out in deadline order, and in arm order within one tick.
    /// Between calls the caller may insert, cancel and reschedule freely; a
    /// timer armed for the current tick is returned by a later call of the
    /// same loop. Stopping after any call and polling again later resumes
    /// exactly where it stopped, which is how a cap on work per call is
    /// expressed (see also [`advance`](Self::advance)).
    ///
    /// A `target` before `now()` is treated as `now()`.
    // Always inlined: the simulation's event list calls it from inside its
    // run loop, where the compiler may leave it out of line, and the call
    // then costs every event (`benches/sim.rs`, `SIM_HOLD_COUNT` at 1k
    // pending). Ratas' workload, which polls through `advance_keep`, does
    // not depend on it.
    #[inline(always)]
    pub fn poll(&mut self, target: u64) -> Option<Expired<T>> {
        self.poll_numbered(target).map(|(timer, _)| timer)
    }

    /// [`poll`](Self::poll), also returning the fired timer's arming number
    /// (see [`insert_at_numbered`](Self::insert_at_numbered)).
    #[inline(always)]
    pub(crate) fn poll_numbered(&mut self, target: u64) -> Option<(Expired<T>, u64)> {
        // A poll of its own is a pass of its own: nothing armed before it
        // waits (an advance that a panicking callback left is over).
        self.hierarchy.end_pass();
        let target = target.max(self.now());
        self.pop_numbered(target)
    }

    /// [`poll_numbered`](Self::poll_numbered) inside a pass (an advance):
    /// a timer armed during the pass for a tick it has reached waits.
    /// `target` was clamped to `now()` by the caller, once per advance (the
    /// hierarchy's `pop_due_by` says what happens when a callback's poll
    /// moved `now` past it since).
    #[inline(always)]
    fn pop_numbered(&mut self, target: u64) -> Option<(Expired<T>, u64)> {
        let index = self.hierarchy.pop_due_by(&mut self.slab, target)?;
        // Unchecked: `pop_due` returns an index the wheel holds.
        let seq = Nodes::seq(&self.slab, index);
        // `pop_due` leaves `now` at the popped timer's deadline.
        let deadline = self.now();
        let (key, value) = self.slab.remove_keyed(index);
        Some((
            Expired {
                key,
                deadline,
                value,
            },
            seq,
        ))
    }

    /// [`poll`](Self::poll), but the fired timer is kept, *held*, under its
    /// key instead of freed: the returned key stays valid, the payload stays
    /// in the wheel (the caller gets a clone), and a later `reschedule*`
    /// of the key arms the same timer again in place (no free and new
    /// insert), while [`cancel`](Self::cancel) frees it and returns the
    /// payload. Until then the timer is not armed (not in
    /// [`len`](Self::len); [`contains`](Self::contains) is `false`) but
    /// uses its storage. See the module docs, "Keeping a fired timer".
    ///
    /// ```
    /// use tickwheel::Wheel;
    ///
    /// let mut wheel = Wheel::new();
    /// let pace = wheel.insert(10, "pace");
    /// let fired = wheel.poll_keep(10).unwrap();
    /// assert_eq!((fired.key, fired.value, fired.deadline), (pace, "pace", 10));
    /// assert!(wheel.is_held(pace) && !wheel.contains(pace) && wheel.is_empty());
    /// wheel.reschedule(pace, 10).unwrap(); // armed again, same key
    /// assert_eq!(wheel.deadline(pace), Some(20));
    /// assert_eq!(wheel.poll_keep(20).unwrap().key, pace);
    /// assert_eq!(wheel.cancel(pace), Some("pace")); // frees it
    /// assert!(wheel.get(pace).is_none());
    /// ```
    // Always inlined, as `poll`: the C ABI's advance loops call it from two
    // exported functions, and out of line the call costs every fired timer
    // of the C port of Ratas' workload (`ffi-tests/ratas_workload.c`, run
    // by `benches/ratas_compare.sh`).
    #[inline(always)]
    pub fn poll_keep(&mut self, target: u64) -> Option<Expired<T>>
    where
        T: Clone,
    {
        self.hierarchy.end_pass();
        let target = target.max(self.now());
        self.pop_keep(target)
    }

    /// [`poll_keep`](Self::poll_keep) inside a pass (an advance), for a
    /// `target` clamped once (see [`pop_numbered`](Self::pop_numbered)).
    #[inline(always)]
    pub(crate) fn pop_keep(&mut self, target: u64) -> Option<Expired<T>>
    where
        T: Clone,
    {
        let index = self.hierarchy.pop_due_by(&mut self.slab, target)?;
        self.held += 1;
        let deadline = self.now();
        let (key, value) = self.slab.key_and_clone(index);
        Some(Expired {
            key,
            deadline,
            value,
        })
    }

    /// Advances to `target`, handing at most `max` expired timers to `on_expired`
    /// together with the wheel, which the callback may change (insert,
    /// cancel, reschedule; `now()` reads the timer's deadline).
    ///
    /// When the cap stops it, `complete` is `false` and `now()` is the tick
    /// being processed; calling again (with the same or a later target)
    /// finishes that tick first.
    ///
    /// A timer the callback arms for the tick being processed (a zero
    /// delay, or a timer re-arming itself for now) is due to the *next*
    /// advance, not this one, and not a tick later: this call stops at that
    /// tick once the timers armed before are done (`complete` is `false`),
    /// and the next call fires it first, on its tick. So a callback that
    /// keeps re-arming itself for now cannot keep one advance busy for ever
    /// (CONTRACT item 1).
    pub fn advance<F>(&mut self, target: u64, max: usize, on_expired: F) -> Advance
    where
        F: FnMut(&mut Self, Expired<T>),
    {
        let target = target.max(self.now());
        self.advance_with(target, false, max, Self::pop, on_expired)
    }

    /// One step of a loop whose time is virtual (a simulation, a replay,
    /// Ratas' benchmark): moves time to the next tick a timer is due at,
    /// if that is at most `cap` ticks from now (else `cap` ticks on), and
    /// fires that tick's timers as [`advance`](Self::advance) does, at most
    /// `max` of them. The same as
    /// `advance(now().saturating_add(ticks_to_next_event(cap)), max, on_expired)`, with
    /// one search for the next timer where that takes two, and one call.
    ///
    /// Timers a callback arms for a later tick wait for the next call,
    /// even when they fall within `cap`: each call fires one tick's timers.
    ///
    /// ```
    /// use tickwheel::Wheel;
    ///
    /// let mut wheel = Wheel::new();
    /// wheel.insert(5, "a");
    /// wheel.insert(5, "b");
    /// wheel.insert(9, "c");
    /// let mut fired = Vec::new();
    /// while !wheel.is_empty() {
    ///     let done = wheel.advance_to_next_event(100, usize::MAX, |wheel, timer| {
    ///         fired.push((wheel.now(), timer.value));
    ///     });
    ///     assert!(done.complete);
    /// }
    /// assert_eq!(fired, [(5, "a"), (5, "b"), (9, "c")]);
    /// // Nothing armed: time moves `cap` ticks.
    /// let _ = wheel.advance_to_next_event(100, usize::MAX, |_, _| {});
    /// assert_eq!(wheel.now(), 109);
    /// ```
    pub fn advance_to_next_event<F>(&mut self, cap: u64, max: usize, on_expired: F) -> Advance
    where
        F: FnMut(&mut Self, Expired<T>),
    {
        let limit = self.now().saturating_add(cap);
        self.advance_with(limit, true, max, Self::pop, on_expired)
    }

    /// [`poll`](Self::poll) inside a pass (an advance), for a `target`
    /// clamped once (see [`pop_numbered`](Self::pop_numbered)).
    #[inline(always)]
    pub(crate) fn pop(&mut self, target: u64) -> Option<Expired<T>> {
        self.pop_numbered(target).map(|(timer, _)| timer)
    }

    /// Starts a pass (an advance): until [`end_pass`](Self::end_pass), a
    /// timer armed for a tick the pass has reached waits for the next one
    /// (`hierarchy.rs`, "Due now"). Shared with the C ABI's loops.
    #[inline]
    pub(crate) fn begin_pass(&mut self) {
        self.hierarchy.begin_pass();
    }

    /// Ends the pass begun by [`begin_pass`](Self::begin_pass).
    #[inline]
    pub(crate) fn end_pass(&mut self) {
        self.hierarchy.end_pass();
    }

    /// [`advance`](Self::advance) with [`poll_keep`](Self::poll_keep): each
    /// fired timer is held under its key (still valid in the callback and
    /// after), so the callback can arm it again in place with a
    /// `reschedule*` of `timer.key`, or free it with [`cancel`](Self::cancel).
    /// A timer it does neither to stays held.
    ///
    /// ```
    /// use tickwheel::Wheel;
    ///
    /// let mut wheel = Wheel::new();
    /// let tick = wheel.insert(3, ());
    /// let mut fired = Vec::new();
    /// let done = wheel.advance_keep(10, usize::MAX, |wheel, timer| {
    ///     fired.push(wheel.now());
    ///     wheel.reschedule(timer.key, 3).unwrap(); // periodic, same key
    /// });
    /// assert!(done.complete);
    /// assert_eq!(fired, [3, 6, 9]);
    /// assert_eq!(wheel.deadline(tick), Some(12));
    /// ```
    pub fn advance_keep<F>(&mut self, target: u64, max: usize, on_expired: F) -> Advance
    where
        T: Clone,
        F: FnMut(&mut Self, Expired<T>),
    {
        let target = target.max(self.now());
        self.advance_with(target, false, max, Self::pop_keep, on_expired)
    }

    /// The loop of [`advance`](Self::advance),
    /// [`advance_keep`](Self::advance_keep) and
    /// [`advance_to_next_event`](Self::advance_to_next_event), with the poll
    /// that fires a timer. `target` is at or after `now()`: a raw target
    /// before it would make the cap check below compare due timers with it,
    /// find "nothing due by target", and the final `poll` then pop and drop
    /// a due timer. With `one_tick`, the first timer fired sets the target
    /// to its own tick, so that the pass ends with that tick.
    #[inline(always)]
    fn advance_with<P, F>(
        &mut self,
        mut target: u64,
        one_tick: bool,
        max: usize,
        poll: P,
        mut on_expired: F,
    ) -> Advance
    where
        P: Fn(&mut Self, u64) -> Option<Expired<T>>,
        F: FnMut(&mut Self, Expired<T>),
    {
        debug_assert!(target >= self.now());
        let mut expired = 0;
        self.begin_pass();
        while expired < max {
            match poll(self, target) {
                Some(timer) => {
                    expired += 1;
                    if one_tick {
                        target = timer.deadline;
                    }
                    on_expired(self, timer);
                }
                None => {
                    self.end_pass();
                    // Not complete when the pass stopped at a timer armed
                    // during it for the tick it had reached: that one is
                    // due to the next advance (see `Advance::complete`).
                    return Advance {
                        expired,
                        complete: !self.is_due_now(),
                    };
                }
            }
        }
        self.end_pass();
        Advance {
            expired,
            complete: self.finish_capped_advance(target),
        }
    }

    /// An advance to `target` reached its cap: if nothing else is due by
    /// `target`, finishes the move to `target` (this cascades but cannot
    /// expire anything) and returns `true` (the advance is complete).
    /// Shared with the C ABI's advance loop (`src/ffi/wheel.rs`).
    pub(crate) fn finish_capped_advance(&mut self, target: u64) -> bool {
        // Level 0 usually settles it (the next timer sits there, past the
        // target) without `next_deadline`, which may walk a higher bucket.
        if self.skip_if_idle_until(target) {
            return true;
        }
        let complete = self.next_deadline().is_none_or(|d| d > target);
        if complete {
            let none = self.poll(target);
            debug_assert!(none.is_none());
        }
        complete
    }

    /// Iterates over armed timers as `(key, deadline, &payload)`, in no
    /// particular order.
    pub fn iter(&self) -> impl Iterator<Item = (TimerKey, u64, &T)> + '_ {
        self.hierarchy.heads().flat_map(move |head| {
            let mut index = head;
            std::iter::from_fn(move || {
                if index == NIL {
                    return None;
                }
                let entry = self.slab.get(index);
                let item = (
                    self.slab.key_of(index),
                    entry.deadline,
                    entry.value().expect("linked entry is occupied"),
                );
                index = entry.next;
                Some(item)
            })
        })
    }
}

impl<T> fmt::Debug for Wheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let occupancy: Vec<String> = self
            .hierarchy
            .occupancy()
            .map(|bits| {
                // Highest word first: one word reads as a plain hex number.
                let words: Vec<String> = bits
                    .words()
                    .iter()
                    .rev()
                    .map(|w| format!("{w:016x}"))
                    .collect();
                format!("0x{}", words.join("_"))
            })
            .collect();
        f.debug_struct("Wheel")
            .field("now", &self.now())
            .field("len", &self.len())
            .field("occupancy", &occupancy)
            .finish()
    }
}

/// The tick in `earliest..=latest` with the most trailing zero bits (the
/// earliest such tick when several tie).
pub(crate) fn roundest_tick_in(earliest: u64, latest: u64) -> u64 {
    if earliest == 0 || earliest == latest {
        return earliest;
    }
    // Clear every bit of `latest` below the highest bit in which it differs
    // from `earliest - 1`: the result is the multiple of the largest power of
    // two that lies in the window.
    let highest = 63 - ((earliest - 1) ^ latest).leading_zeros();
    latest & (u64::MAX << highest)
}

#[cfg(test)]
mod keep_tests;
#[cfg(test)]
mod tests;
