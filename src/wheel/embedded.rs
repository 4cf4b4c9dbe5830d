//! Timers that live inside the caller's own records: [`TimerEntry`] and the
//! wheel that links them in place, [`EmbeddedWheel`].
//!
//! A C or C++ server keeps a timer inside each connection (libuv's
//! `uv_timer_t`, Linux's `timer_list`, Ratas' `TimerEvent`): arming it
//! allocates nothing and looks nothing up. [`Wheel`](super::Wheel) instead
//! hands out keys into a slab of its own, each checked by generation. Here
//! the entry (deadline, links, arming number) is a field of the caller's
//! record, and the caller names it by reference: no key, no generation
//! check.
//!
//! # How entries reach the shared hierarchy
//!
//! The levels ([`Hierarchy`]) are the keyed wheel's, with one difference:
//! the hierarchy is generic over how it names an entry ([`Nodes::Id`]). The
//! keyed wheel and the service name entries by `u32` index into their own
//! stores; here an entry is named by its address, so every link (`prev`,
//! `next`) and every bucket head and tail is a pointer straight to the
//! caller's entry, and following one is a single load from the entry. The
//! wheel keeps nothing per armed timer: no table, no free list, no index in
//! the entry. The address is made from a reference to the whole
//! [`TimerEntry`], so that the payload is read through it when the entry
//! fires.
//!
//! The entry keeps the low 32 bits of its arming number, as the service's
//! slots do (the `hierarchy` module docs, "Arming numbers in 32 bits"):
//! with 8-byte links the link is 40 bytes, and an entry with an 8-byte
//! payload stays 48 (the C `tw_entry`). The price is a renumbering of the
//! armed entries once every 2^30 armings, and a bound of 2^30 - 1 entries
//! armed on one wheel when that renumbering comes (more panics there).
//!
//! # Who touches what
//!
//! * An entry's link fields are `Cell`s, written only by its wheel's code,
//!   on the wheel's thread (neither type is `Send` nor `Sync`). The payload
//!   is written once, by [`TimerEntry::new`], and then only read.
//! * The wheel's state (levels and count) sits behind a raw pointer, not in
//!   a `Box` the handle owns: an entry's `Drop` and [`TimerEntry::cancel`]
//!   reach it through the pointer the entry keeps while armed, and may run
//!   while the caller holds `&mut EmbeddedWheel` (in a callback of
//!   [`advance`](EmbeddedWheel::advance)). No borrow of that state is ever
//!   held across user code: the payload is `Copy`, so reading it runs none,
//!   and a callback runs only after the fired entry left the wheel.
//! * An armed entry is pinned ([`Pin`]): its memory stays where it is until
//!   its `Drop` has run, and `Drop` unlinks it. Dropping the wheel first
//!   detaches every armed entry (they read as not armed from then on).
//!
//! Same-tick order (arming order), exact ticks, range scheduling and the
//! capped advance are the keyed wheel's: the same hierarchy code runs them,
//! and `tests/embedded_differential.rs` checks both against each other on
//! random operation sequences.

use std::cell::Cell;
use std::fmt;
use std::marker::{PhantomData, PhantomPinned};
use std::ops::RangeInclusive;
use std::pin::Pin;
use std::ptr::{self, NonNull};

use super::hierarchy::Hierarchy;
use super::node::{prefetch, Node, Nodes, UNLINKED};
use super::{roundest_tick_in, Advance};
use crate::TimerError;

/// The wheel's part of an entry. `repr(C)` and first in [`TimerEntry`], so
/// that a pointer to the entry is a pointer to its link: the hierarchy names
/// entries by that address (see the module docs).
#[repr(C)]
struct Link {
    /// The tick the timer is due at (meaningful while armed).
    deadline: Cell<u64>,
    /// Previous and next entry in the same bucket, or null.
    prev: Cell<Id>,
    next: Cell<Id>,
    /// The wheel the entry is armed on, or null when not armed.
    wheel: Cell<*const Shared>,
    /// Low 32 bits of the arming number, for same-tick order (see
    /// `hierarchy`, "Arming numbers in 32 bits"): 4 bytes, so that the
    /// entry stays 48 bytes with an 8-byte payload (the C `tw_entry`).
    seq: Cell<u32>,
    /// The bucket holding the entry (meaningful while armed; `UNLINKED`
    /// until first armed).
    bucket: Cell<u16>,
}

/// How the hierarchy names an entry: the address of the whole entry, typed
/// as its link (the link comes first). Made from a reference to the whole
/// [`TimerEntry`], never to the link alone, so that the payload can be read
/// through it when the entry fires.
type Id = *const Link;

impl Link {
    const fn new() -> Self {
        Link {
            deadline: Cell::new(0),
            prev: Cell::new(ptr::null()),
            next: Cell::new(ptr::null()),
            wheel: Cell::new(ptr::null()),
            seq: Cell::new(0),
            bucket: Cell::new(UNLINKED),
        }
    }

    /// Marks the entry as in no wheel.
    #[inline(always)]
    fn detach(&self) {
        self.wheel.set(ptr::null());
    }
}

/// Disarms the entry at `id` if armed; `true` when it was.
///
/// # Safety
/// `id` is the address of a live [`TimerEntry`] (of any payload type),
/// made from a reference to the whole entry.
#[inline]
unsafe fn cancel(id: Id) -> bool {
    // SAFETY: the caller's contract.
    let link = unsafe { &*id };
    let shared = link.wheel.get();
    if shared.is_null() {
        return false;
    }
    // SAFETY: an armed entry's wheel is alive (dropping a wheel detaches
    // its entries first), used by this thread only (neither type is
    // `Send`), and no other borrow of its state is live: the wheel's
    // methods run no user code while they hold one (module docs).
    let shared = unsafe { &mut *shared.cast_mut() };
    shared.hierarchy.unlink(&mut Entries, id);
    shared.len -= 1;
    link.detach();
    true
}

/// A timer kept inside the caller's record, armed on an [`EmbeddedWheel`].
///
/// The entry carries a `Copy` payload (an index, an id, a function pointer)
/// that the wheel hands back when it fires. Arming it takes a pinned
/// reference: an armed entry must not move. Dropping an armed entry disarms
/// it.
///
/// ```
/// use std::pin::pin;
/// use tickwheel::{EmbeddedWheel, TimerEntry};
///
/// let mut wheel = EmbeddedWheel::new();
/// let idle = pin!(TimerEntry::new("idle"));
/// let pace = pin!(TimerEntry::new("pace"));
/// wheel.schedule(idle.as_ref(), 100).unwrap();
/// wheel.schedule(pace.as_ref(), 10).unwrap();
/// wheel.schedule(idle.as_ref(), 200).unwrap(); // moved, still one timer
/// assert_eq!(idle.deadline(), Some(200));
///
/// let mut fired = Vec::new();
/// wheel.advance(1000, usize::MAX, |wheel, timer| {
///     fired.push((timer.deadline, timer.value));
///     if timer.value == "pace" && wheel.now() < 30 {
///         wheel.schedule(pace.as_ref(), 10).unwrap(); // re-armed in place
///     }
/// });
/// assert_eq!(fired, [(10, "pace"), (20, "pace"), (30, "pace"), (200, "idle")]);
/// assert!(!idle.is_armed());
/// ```
#[repr(C)]
pub struct TimerEntry<T> {
    link: Link,
    value: T,
    _pinned: PhantomPinned,
}

impl<T> TimerEntry<T> {
    /// A timer that is not armed, carrying `value`.
    pub const fn new(value: T) -> Self {
        TimerEntry {
            link: Link::new(),
            value,
            _pinned: PhantomPinned,
        }
    }

    /// The payload.
    pub fn value(&self) -> &T {
        &self.value
    }

    /// `true` while the timer is armed on a wheel (not fired, cancelled,
    /// dropped with its wheel).
    pub fn is_armed(&self) -> bool {
        !self.link.wheel.get().is_null()
    }

    /// The tick the timer is due at, or `None` when it is not armed.
    pub fn deadline(&self) -> Option<u64> {
        self.is_armed().then(|| self.link.deadline.get())
    }

    /// Disarms the timer. Returns `true` when it was armed, `false` when it
    /// was not (never armed, fired, cancelled, or its wheel was dropped).
    /// Needs no wheel: an armed entry knows its own.
    pub fn cancel(&self) -> bool {
        // SAFETY: the address of this live entry, made from a reference to
        // all of it.
        unsafe { cancel(self.id()) }
    }

    /// The name the hierarchy knows this entry by (see [`Id`]).
    #[inline(always)]
    fn id(&self) -> Id {
        ptr::from_ref(self).cast::<Link>()
    }
}

impl<T> Drop for TimerEntry<T> {
    fn drop(&mut self) {
        self.cancel();
    }
}

impl<T: fmt::Debug> fmt::Debug for TimerEntry<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerEntry")
            .field("value", &self.value)
            .field("deadline", &self.deadline())
            .finish()
    }
}

/// A timer that came due, as handed out by [`EmbeddedWheel::poll`] and
/// [`EmbeddedWheel::advance`]. The entry is no longer armed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fired<T> {
    /// The tick it was due at; the wheel's `now()` while it is handled.
    pub deadline: u64,
    /// A copy of the entry's payload.
    pub value: T,
}

/// The [`Nodes`] store of the embedded wheel: the entries themselves, named
/// by address, so it holds nothing. Every [`Id`] the hierarchy passes is
/// one it was given by `arm` or read from the links it wrote: the address
/// of an armed entry, which is pinned and alive (its `Drop` unlinks it
/// before its memory goes), never null.
///
/// Ordered, with 32-bit arming numbers: moves above level 0 stay in place
/// (the `hierarchy` module docs), as in the keyed wheel.
struct Entries;

impl Entries {
    /// The entry at `id`, which the hierarchy holds, so it is armed.
    #[inline(always)]
    fn link<'a>(id: Id) -> &'a Link {
        debug_assert!(!id.is_null());
        // SAFETY: see the type's docs; only `Cell`s are written through
        // the reference, on the wheel's thread.
        unsafe { &*id }
    }
}

impl Nodes for Entries {
    type Id = Id;
    const ORDERED: bool = true;
    const SEQ_WRAPS: bool = true;

    #[inline(always)]
    fn node(&self, id: Id) -> Node<Id> {
        let link = Self::link(id);
        Node {
            deadline: link.deadline.get(),
            prev: link.prev.get(),
            next: link.next.get(),
            bucket: link.bucket.get(),
        }
    }

    #[inline(always)]
    fn set_node(&mut self, id: Id, node: Node<Id>) {
        let link = Self::link(id);
        link.deadline.set(node.deadline);
        link.prev.set(node.prev);
        link.next.set(node.next);
        link.bucket.set(node.bucket);
    }

    #[inline(always)]
    fn set_prev(&mut self, id: Id, prev: Id) {
        Self::link(id).prev.set(prev);
    }

    #[inline(always)]
    fn set_next(&mut self, id: Id, next: Id) {
        Self::link(id).next.set(next);
    }

    /// Nothing: an entry's `wheel` says whether it is armed, the hierarchy
    /// is handed only armed entries (every caller checks `wheel` first),
    /// and arming rewrites the whole node, so a fired or cancelled entry's
    /// stale links and bucket are never read (`benches/ratas_embedded.rs`
    /// pops one entry per fired timer).
    #[inline(always)]
    fn mark_unlinked(&mut self, _id: Id, _node: Node<Id>) {}

    #[inline(always)]
    fn set_deadline_seq(&mut self, id: Id, deadline: u64, seq: u64) {
        let link = Self::link(id);
        link.deadline.set(deadline);
        link.seq.set(seq as u32);
    }

    #[inline(always)]
    fn set_node_seq(&mut self, id: Id, node: Node<Id>, seq: u64) {
        self.set_node(id, node);
        Self::link(id).seq.set(seq as u32);
    }

    #[inline(always)]
    fn seq(&self, id: Id) -> u64 {
        u64::from(Self::link(id).seq.get())
    }

    #[inline(always)]
    fn set_seq(&mut self, id: Id, seq: u64) {
        Self::link(id).seq.set(seq as u32);
    }

    #[inline(always)]
    fn prefetch(&self, id: Id) {
        prefetch(id);
    }
}

/// The wheel's state, on the heap at a fixed address that armed entries
/// point to.
struct Shared {
    hierarchy: Hierarchy<Id>,
    /// Number of armed entries.
    len: usize,
}

/// A single-threaded hierarchical timing wheel whose timers are
/// [`TimerEntry`] fields of the caller's own records (see the module docs).
///
/// The same levels, order and time rules as [`Wheel`](super::Wheel): a
/// timer fires on its own deadline tick, timers of one tick in arming order
/// (a move counts as arming), deadlines before `now()` are due at once (the
/// next poll or advance fires them, never the call that armed them), and
/// deadlines saturate at `u64::MAX`.
///
/// An entry is armed on at most one wheel at a time; arming it on another
/// while armed is refused with [`TimerError::ForeignEntry`].
pub struct EmbeddedWheel<T: Copy> {
    shared: NonNull<Shared>,
    /// Not `Send` or `Sync`: entries on other threads would reach the
    /// wheel's state through their pointers.
    _entries: PhantomData<*const TimerEntry<T>>,
}

impl<T: Copy> Default for EmbeddedWheel<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy> EmbeddedWheel<T> {
    /// An empty wheel at tick 0.
    pub fn new() -> Self {
        Self::starting_at(0)
    }

    /// An empty wheel whose time starts at `now`.
    pub fn starting_at(now: u64) -> Self {
        Self::with_capacity_at(now)
    }

    /// An empty wheel at tick 0. The wheel keeps nothing per armed timer
    /// (the entries hold their own links), so `capacity` reserves nothing:
    /// it is accepted for symmetry with [`Wheel::with_capacity`](super::Wheel::with_capacity).
    pub fn with_capacity(capacity: usize) -> Self {
        let _ = capacity;
        Self::with_capacity_at(0)
    }

    fn with_capacity_at(now: u64) -> Self {
        // Built in place on the heap: the hierarchy holds its levels inline
        // (about 11 KiB), too much for a small stack (a loom model's).
        let mut shared = Box::<Shared>::new_uninit();
        let at = shared.as_mut_ptr();
        // SAFETY: the fields of a fresh allocation, each written once.
        let shared = unsafe {
            Hierarchy::write_starting_at(ptr::addr_of_mut!((*at).hierarchy), now);
            ptr::addr_of_mut!((*at).len).write(0);
            shared.assume_init()
        };
        EmbeddedWheel {
            shared: NonNull::from(Box::leak(shared)),
            _entries: PhantomData,
        }
    }

    #[inline(always)]
    fn state(&self) -> &Shared {
        // SAFETY: allocated in `with_capacity_at`, freed only by `Drop`;
        // no `&mut` of it is live while `&self` methods run (module docs).
        unsafe { self.shared.as_ref() }
    }

    #[inline(always)]
    fn state_mut(&mut self) -> &mut Shared {
        // SAFETY: as in `state`; entries' `Drop` and `cancel` take their
        // own borrow only while none of the wheel's is live (module docs).
        unsafe { &mut *self.shared.as_ptr() }
    }

    /// The current tick. While a fired timer is handled, its deadline.
    pub fn now(&self) -> u64 {
        self.state().hierarchy.now()
    }

    /// Number of armed timers.
    pub fn len(&self) -> usize {
        self.state().len
    }

    /// `true` when no timer is armed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Arms `entry` due `delay` ticks from now, or moves it there if it is
    /// already armed on this wheel. `delay == 0` makes it due at once.
    ///
    /// Same-tick order: a moved timer counts as newly armed, so it fires after
    /// every timer already armed for its new tick, whether it came from a
    /// later tick, an earlier one or that same tick (docs/CONTRACT.md item 5).
    /// `src/wheel/embedded_tests.rs::embedded_a_moved_entry_fires_after_those_already_armed_for_its_tick`
    /// checks it for every schedule function of this wheel.
    ///
    /// # Errors
    /// [`TimerError::ForeignEntry`] when the entry is armed on another wheel
    /// (nothing changes).
    #[inline]
    pub fn schedule(&mut self, entry: Pin<&TimerEntry<T>>, delay: u64) -> Result<(), TimerError> {
        // At or after `now`: no clamping.
        let deadline = self.now().saturating_add(delay);
        self.schedule_from_now(entry, deadline)
    }

    /// [`schedule`](Self::schedule) at the absolute tick `deadline`
    /// (clamped to `now()` if earlier).
    ///
    /// Same-tick order: a moved timer counts as newly armed, so it fires after
    /// every timer already armed for its new tick, whether it came from a
    /// later tick, an earlier one or that same tick (docs/CONTRACT.md item 5).
    ///
    /// # Errors
    /// As [`schedule`](Self::schedule).
    // Always inlined, and so are the two common cases under it: the move of
    // an entry armed here (the hierarchy's `rearm`: a move in place inline,
    // the rest out of line) and the arming of a fired entry (`arm`). Ratas'
    // workload does both about once per fired timer, and out of line the
    // call's register saves cost as much as the work
    // (`benches/ratas_embedded.rs` under callgrind: making `arm` inline cut
    // 6% of the instructions).
    #[inline(always)]
    pub fn schedule_at(
        &mut self,
        entry: Pin<&TimerEntry<T>>,
        deadline: u64,
    ) -> Result<(), TimerError> {
        let deadline = deadline.max(self.now());
        self.schedule_from_now(entry, deadline)
    }

    /// [`schedule_at`](Self::schedule_at) of a `deadline` at or after
    /// `now()`.
    #[inline(always)]
    fn schedule_from_now(
        &mut self,
        entry: Pin<&TimerEntry<T>>,
        deadline: u64,
    ) -> Result<(), TimerError> {
        let link = &entry.link;
        if link.wheel.get() == self.shared.as_ptr().cast_const() {
            let state = self.state_mut();
            // Linked, so `rearm` moves it (never the held-timer case).
            let held = state
                .hierarchy
                .rearm(&mut Entries, entry.get_ref().id(), deadline);
            debug_assert!(!held);
            return Ok(());
        }
        self.arm(entry, deadline)
    }

    /// [`schedule_from_now`](Self::schedule_from_now) of an entry not
    /// armed here.
    #[inline(always)]
    fn arm(&mut self, entry: Pin<&TimerEntry<T>>, deadline: u64) -> Result<(), TimerError> {
        let entry = entry.get_ref();
        let link = &entry.link;
        if !link.wheel.get().is_null() {
            return Err(TimerError::ForeignEntry);
        }
        let this = self.shared.as_ptr().cast_const();
        let state = self.state_mut();
        debug_assert!(deadline >= state.hierarchy.now());
        // Linked first: the bound on armed entries (2^30 - 1) is checked
        // when the arming numbers are renumbered, inside `link`, and a panic
        // there leaves the entry not armed.
        state.hierarchy.link(&mut Entries, entry.id(), deadline);
        state.len += 1;
        link.wheel.set(this);
        Ok(())
    }

    /// Arms or moves `entry` to some tick from `delays.start()` to
    /// `delays.end()` ticks from now (both inclusive): kept where it is if
    /// it is armed here with a deadline in the window, else moved to the
    /// window's tick with the most trailing zero bits, as
    /// [`Wheel::insert_in_range`](super::Wheel::insert_in_range) picks.
    /// Returns the timer's deadline.
    ///
    /// Same-tick order: a moved timer counts as newly armed, so it fires after
    /// every timer already armed for its new tick, whether it came from a
    /// later tick, an earlier one or that same tick (docs/CONTRACT.md item 5).
    /// A kept timer keeps its place.
    ///
    /// # Errors
    /// [`TimerError::InvalidRange`] when the range is empty,
    /// [`TimerError::ForeignEntry`] when the entry is armed on another wheel;
    /// nothing changes.
    // Always inlined, with only the keep inline: in Ratas' workload nearly
    // every call finds the idle timer already in its window (a pushed-back
    // idle timeout), and out of line the call costs more than the check
    // (`benches/ratas_embedded.rs` under callgrind).
    #[inline(always)]
    pub fn schedule_in_range(
        &mut self,
        entry: Pin<&TimerEntry<T>>,
        delays: RangeInclusive<u64>,
    ) -> Result<u64, TimerError> {
        let (earliest, latest) = delays.into_inner();
        // Checked before saturating: both ends may saturate to one tick.
        if earliest > latest {
            return Err(TimerError::InvalidRange);
        }
        let now = self.now();
        let link = &entry.link;
        if link.wheel.get() == self.shared.as_ptr().cast_const() {
            // An armed entry is due at or after `now`: compared as a delay,
            // its deadline needs no saturating window ends. A deadline that
            // is not within the delays here may still be within the
            // saturated window (at `u64::MAX`): `keep_or_move_into` decides.
            let delay = link.deadline.get() - now;
            if earliest <= delay && delay <= latest {
                return Ok(link.deadline.get());
            }
        }
        // Both ends are at or after `now`: no clamping.
        self.keep_or_move_into(
            entry,
            now.saturating_add(earliest),
            now.saturating_add(latest),
        )
    }

    /// [`schedule_in_range`](Self::schedule_in_range) with absolute ticks
    /// (clamped to `now()`).
    ///
    /// Same-tick order: a moved timer counts as newly armed, so it fires after
    /// every timer already armed for its new tick, whether it came from a
    /// later tick, an earlier one or that same tick (docs/CONTRACT.md item 5).
    /// A kept timer keeps its place.
    ///
    /// # Errors
    /// As [`schedule_in_range`](Self::schedule_in_range).
    #[inline(always)]
    pub fn schedule_at_in_range(
        &mut self,
        entry: Pin<&TimerEntry<T>>,
        deadlines: RangeInclusive<u64>,
    ) -> Result<u64, TimerError> {
        let (earliest, latest) = deadlines.into_inner();
        if earliest > latest {
            return Err(TimerError::InvalidRange);
        }
        let now = self.now();
        self.keep_or_move_into(entry, earliest.max(now), latest.max(now))
    }

    /// The range schedules' work, for `now <= earliest <= latest`: keeps an
    /// entry armed here with a deadline in the window where it is (inline),
    /// else moves or arms it there (out of line).
    #[inline(always)]
    fn keep_or_move_into(
        &mut self,
        entry: Pin<&TimerEntry<T>>,
        earliest: u64,
        latest: u64,
    ) -> Result<u64, TimerError> {
        let link = &entry.link;
        if link.wheel.get() == self.shared.as_ptr().cast_const() {
            let current = link.deadline.get();
            if earliest <= current && current <= latest {
                return Ok(current);
            }
        }
        self.move_into(entry, earliest, latest)
    }

    /// [`keep_or_move_into`](Self::keep_or_move_into) of an entry it does
    /// not keep.
    #[inline(never)]
    fn move_into(
        &mut self,
        entry: Pin<&TimerEntry<T>>,
        earliest: u64,
        latest: u64,
    ) -> Result<u64, TimerError> {
        let deadline = roundest_tick_in(earliest, latest);
        self.schedule_from_now(entry, deadline)?;
        Ok(deadline)
    }

    /// Disarms `entry` if it is armed on this wheel; `true` when it was.
    ///
    /// # Errors
    /// [`TimerError::ForeignEntry`] when it is armed on another wheel
    /// ([`TimerEntry::cancel`] needs no wheel).
    pub fn cancel(&mut self, entry: &TimerEntry<T>) -> Result<bool, TimerError> {
        let owner = entry.link.wheel.get();
        if !owner.is_null() && owner != self.shared.as_ptr().cast_const() {
            return Err(TimerError::ForeignEntry);
        }
        Ok(entry.cancel())
    }

    /// The next entry due at or before `target`, with `now()` advanced to
    /// its deadline and the entry no longer armed; or, when none is,
    /// `now()` advanced to `target` (never backwards) and `None`. The
    /// entry's address is for the C ABI, which hands it to C.
    #[inline(always)]
    pub(crate) fn poll_entry(&mut self, target: u64) -> Option<NonNull<TimerEntry<T>>> {
        let target = target.max(self.now());
        self.poll_entry_by(target)
    }

    /// [`poll_entry`](Self::poll_entry) for a `target` clamped to `now()`
    /// once per advance (the hierarchy's `pop_due_by`).
    #[inline(always)]
    fn poll_entry_by(&mut self, target: u64) -> Option<NonNull<TimerEntry<T>>> {
        let state = self.state_mut();
        let entry = state.hierarchy.pop_due_by(&mut Entries, target)?;
        Some(Self::disarm_popped(state, entry))
    }

    /// The rest of a pop, after the hierarchy unlinked `entry`: counts it
    /// out and marks it not armed. The raw address is returned, not a
    /// `&Link` made from it: the payload read through it in `pop_fired`
    /// lies outside the link.
    #[inline(always)]
    fn disarm_popped(state: &mut Shared, entry: Id) -> NonNull<TimerEntry<T>> {
        state.len -= 1;
        Entries::link(entry).detach();
        // SAFETY: the hierarchy holds no null id (see `Entries`).
        unsafe { NonNull::new_unchecked(entry.cast_mut()) }.cast()
    }

    /// Returns the next timer due at or before `target`, advancing `now()`
    /// to its deadline; or, when none is, advances `now()` to `target` and
    /// returns `None`. The fired entry is no longer armed; the caller may
    /// arm it again. A `target` before `now()` counts as `now()`.
    #[inline(always)]
    pub fn poll(&mut self, target: u64) -> Option<Fired<T>> {
        // A poll of its own is a pass of its own (the keyed wheel's rule):
        // nothing armed before it waits, and an advance that a panicking
        // callback left is over.
        self.end_pass();
        let target = target.max(self.now());
        self.pop_fired(target)
    }

    /// [`poll`](Self::poll) inside a pass, for a `target` clamped to
    /// `now()` once per advance: an entry armed during the pass for the tick
    /// it has reached waits for the next one.
    #[inline(always)]
    fn pop_fired(&mut self, target: u64) -> Option<Fired<T>> {
        let entry = self.poll_entry_by(target)?;
        Some(self.fired(entry))
    }

    /// What a popped `entry` hands to its caller: its payload, and `now()`
    /// as its deadline.
    #[inline(always)]
    fn fired(&self, entry: NonNull<TimerEntry<T>>) -> Fired<T> {
        // SAFETY: the entry was armed until the pop detached it just now,
        // so it is alive (its `Drop` would have unlinked it); its id is the
        // whole entry's address, so the payload is in reach. `T` is
        // `Copy`: reading it runs no user code.
        let value = unsafe { ptr::addr_of!((*entry.as_ptr()).value).read() };
        Fired {
            deadline: self.now(),
            value,
        }
    }

    /// [`poll_entry`](Self::poll_entry) for a target of `now()`, without
    /// a search (the hierarchy's `pop_due_now`): for a pass that has
    /// reached the one tick it fires (`advance_to_next_event` and the C
    /// ABI's next-event forms).
    #[inline(always)]
    pub(crate) fn poll_entry_now(&mut self) -> Option<NonNull<TimerEntry<T>>> {
        let state = self.state_mut();
        let entry = state.hierarchy.pop_due_now(&mut Entries)?;
        Some(Self::disarm_popped(state, entry))
    }

    /// [`pop_fired`](Self::pop_fired) with
    /// [`poll_entry_now`](Self::poll_entry_now).
    #[inline(always)]
    fn pop_fired_now(&mut self) -> Option<Fired<T>> {
        let entry = self.poll_entry_now()?;
        Some(self.fired(entry))
    }

    /// Advances to `target`, handing at most `max` expired timers to
    /// `on_expired` together with the wheel, which the callback may change
    /// (arm, move or cancel any entry, the fired one included; `now()` reads
    /// the timer's deadline). When the cap stops it, `complete` is `false`
    /// and `now()` is the tick being processed; calling again finishes it.
    ///
    /// A callback that panics leaves the wheel consistent (the fired entry
    /// left it before the callback ran); the panic propagates to the caller
    /// and the next advance goes on from there.
    pub fn advance<F>(&mut self, target: u64, max: usize, on_expired: F) -> Advance
    where
        F: FnMut(&mut Self, Fired<T>),
    {
        let target = target.max(self.now());
        self.advance_with(target, false, max, on_expired)
    }

    /// One step of a loop whose time is virtual (a simulation, a replay,
    /// Ratas' benchmark): moves time to the next tick a timer is due at,
    /// if that is at most `cap` ticks from now (else `cap` ticks on), and
    /// fires that tick's timers as [`advance`](Self::advance) does, at most
    /// `max` of them. The same as
    /// `advance(now().saturating_add(ticks_to_next_event(cap)), max, on_expired)`, with
    /// one search for the next timer where that takes two, and one call
    /// (Ratas' workload, `benches/ratas_embedded.rs`, runs this way in 0.9x
    /// the user CPU of the two calls).
    ///
    /// Timers a callback arms for a later tick wait for the next call,
    /// even when they fall within `cap`: each call fires one tick's timers.
    ///
    /// ```
    /// use std::pin::pin;
    /// use tickwheel::{EmbeddedWheel, TimerEntry};
    ///
    /// let mut wheel = EmbeddedWheel::new();
    /// let pace = pin!(TimerEntry::new("pace"));
    /// let idle = pin!(TimerEntry::new("idle"));
    /// wheel.schedule(pace.as_ref(), 10).unwrap();
    /// wheel.schedule(idle.as_ref(), 25).unwrap();
    /// let mut fired = Vec::new();
    /// while wheel.now() < 40 {
    ///     let done = wheel.advance_to_next_event(100, usize::MAX, |wheel, timer| {
    ///         fired.push((timer.deadline, timer.value));
    ///         if timer.value == "pace" {
    ///             wheel.schedule(pace.as_ref(), 10).unwrap();
    ///         }
    ///     });
    ///     assert!(done.complete);
    /// }
    /// assert_eq!(
    ///     fired,
    ///     [(10, "pace"), (20, "pace"), (25, "idle"), (30, "pace"), (40, "pace")]
    /// );
    /// ```
    pub fn advance_to_next_event<F>(&mut self, cap: u64, max: usize, on_expired: F) -> Advance
    where
        F: FnMut(&mut Self, Fired<T>),
    {
        let limit = self.now().saturating_add(cap);
        self.advance_with(limit, true, max, on_expired)
    }

    /// The loop of [`advance`](Self::advance) and
    /// [`advance_to_next_event`](Self::advance_to_next_event), for a
    /// `target` at or after `now()`. With `one_tick`, the first timer fired
    /// sets the target to its own tick, so that the pass ends with that
    /// tick.
    #[inline(always)]
    fn advance_with<F>(
        &mut self,
        mut target: u64,
        one_tick: bool,
        max: usize,
        mut on_expired: F,
    ) -> Advance
    where
        F: FnMut(&mut Self, Fired<T>),
    {
        debug_assert!(target >= self.now());
        let mut expired = 0;
        self.begin_pass();
        while expired < max {
            // With `one_tick`, once the pass fired its first timer it has
            // reached its tick: what is left is at `now`, found without a
            // search (`benches/ratas_embedded.rs`).
            let popped = if one_tick && expired > 0 {
                self.pop_fired_now()
            } else {
                self.pop_fired(target)
            };
            match popped {
                Some(timer) => {
                    expired += 1;
                    if one_tick {
                        target = timer.deadline;
                    }
                    on_expired(self, timer);
                }
                None => {
                    self.end_pass();
                    // Not complete when the pass stopped at an entry armed
                    // during it for the tick it had reached (CONTRACT 1).
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

    /// Starts a pass (an advance): until [`end_pass`](Self::end_pass), an
    /// entry armed for a tick the pass has reached waits for the next one
    /// (see "Due now" in the `hierarchy` module docs).
    pub(crate) fn begin_pass(&mut self) {
        self.state_mut().hierarchy.begin_pass();
    }

    /// Ends the pass begun by [`begin_pass`](Self::begin_pass).
    pub(crate) fn end_pass(&mut self) {
        self.state_mut().hierarchy.end_pass();
    }

    /// An advance to `target` reached its cap: if nothing else is due by
    /// `target`, finishes the move there and returns `true`.
    pub(crate) fn finish_capped_advance(&mut self, target: u64) -> bool {
        let state = self.state_mut();
        if state.hierarchy.skip_if_idle_until(target) {
            return true;
        }
        let complete = state
            .hierarchy
            .next_deadline(&Entries)
            .is_none_or(|d| d > target);
        if complete {
            let none = self.poll_entry(target);
            debug_assert!(none.is_none());
        }
        complete
    }

    /// The earliest deadline of any armed timer (`now()` if one is due).
    /// Exact; its cost is the keyed wheel's
    /// ([`Wheel::next_deadline`](super::Wheel::next_deadline)).
    pub fn next_deadline(&self) -> Option<u64> {
        let state = self.state();
        state.hierarchy.next_deadline(&Entries)
    }

    /// Ticks from now until the next timer is due, at most `cap`: `cap`
    /// when nothing is armed, 0 when a timer is due now. Exact, as
    /// [`Wheel::ticks_to_next_event`](super::Wheel::ticks_to_next_event).
    pub fn ticks_to_next_event(&self, cap: u64) -> u64 {
        if cap == 0 {
            return 0;
        }
        let state = self.state();
        let now = state.hierarchy.now();
        state
            .hierarchy
            .next_deadline_until(&Entries, now.saturating_add(cap - 1))
            .map_or(cap, |deadline| deadline - now)
    }

    /// `true` when a timer is due at `now()` (O(1)).
    pub fn is_due_now(&self) -> bool {
        self.state().hierarchy.due_now()
    }
}

impl<T: Copy> Drop for EmbeddedWheel<T> {
    fn drop(&mut self) {
        // Detach every armed entry, so that its later `Drop` or `cancel`
        // does not reach freed memory.
        let state = self.state_mut();
        for head in state.hierarchy.heads() {
            let mut id = head;
            while !id.is_null() {
                let link = Entries::link(id);
                id = link.next.get();
                // The entry's `wheel` is its armed flag (see
                // `Entries::mark_unlinked`): its stale links and bucket are
                // never read again.
                link.detach();
            }
        }
        // SAFETY: allocated by `Box` in `with_capacity_at`; no entry points
        // to it any more, and this handle was its only owner.
        drop(unsafe { Box::from_raw(self.shared.as_ptr()) });
    }
}

impl<T: Copy> fmt::Debug for EmbeddedWheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedWheel")
            .field("now", &self.now())
            .field("len", &self.len())
            .finish()
    }
}

#[cfg(test)]
#[path = "embedded_tests.rs"]
mod tests;
