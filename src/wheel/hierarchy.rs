//! The hierarchy of levels on its own: where a deadline goes, linking and
//! unlinking, cascading, and finding what is due, over timer entries stored
//! somewhere else.
//!
//! The entries live in a [`Nodes`] store, which chooses how links name them
//! ([`Nodes::Id`], the hierarchy's type parameter). [`Wheel`](super::Wheel)
//! stores them in its slab next to each payload and the timer service
//! inside its timer slots (intrusive links, so a service timer costs no
//! second allocation and no second cache miss); both name them by `u32`
//! index, half a pointer per link. [`EmbeddedWheel`](super::EmbeddedWheel)
//! links the caller's own entries and names them by address, so that a
//! link is followed with one load. All three run exactly this code.
//!
//! # The next-deadline memo
//!
//! [`Hierarchy::next_deadline`] is exact. A timer on level 0 is found with
//! one bitmap search (level 0's buckets from `now` on hold the current
//! block, whose ticks come before every higher bucket's; those behind `now`
//! hold the next block's, see below). When level 0 is empty from `now` on,
//! the earliest timer sits on a level above 0, or in the next block, and
//! one above 0 needs a walk of one bucket, so
//! the earliest deadline *above level 0* is kept until it may change:
//! linking a timer above level 0 lowers it (`min`), unlinking the timer
//! that holds it (it fired, was cancelled or moved) forgets it, and so does
//! a cascade (its timers may go down to level 0). Level 0's own links and
//! pops, the most frequent operations, never touch it
//! (`benches/ratas_embedded.rs` links and pops one level-0 timer per fired
//! timer). Repeated queries, and queries after any change that does not
//! touch the earliest timer, are O(1); the bucket is walked at most once per
//! change of the earliest timer. An entry moved later without relinking (below) can make
//! the walk go on to the next buckets in time order, until the best
//! deadline found lies inside the bucket just walked: that is the only case
//! where a query walks more than one bucket.
//!
//! # Level 0 as a ring for new armings
//!
//! A new arming due fewer than `SLOTS` ticks from `now` goes to level 0,
//! in the bucket of its tick's low digit, even when that tick lies in the
//! next block: level 0's buckets behind `now`'s then hold the next block's
//! ticks (its *ring* entries), as in Ratas' and Linux's first level.
//! Without the ring such a timer went to level 1 and was cascaded down
//! again when `now` reached its block: in Ratas' workload, whose pace timer
//! is re-armed 10 ticks ahead on every packet, a sixth of those re-armings
//! (`benches/ratas_embedded.rs`; cascades were a twelfth of its time under
//! `perf`). Only new armings use the ring: a cascade happens with `now` on
//! a block boundary, where no bucket is behind it, and re-files by digit.
//!
//! The ring changes nothing while level 0 has entries from `now` on (they
//! come first). When it has none, [`Hierarchy::pop_due`] moves `now` to the
//! next block's first tick (ring entries are due there or later, and so is
//! every higher bucket), cascading first a higher bucket that starts there,
//! which may hold earlier timers; the ring entries are then the block's
//! own. Nothing pops a lone timer straight from a higher bucket while ring
//! entries wait (it could pass them), and the next-deadline queries take
//! the earlier of the ring's first entry and what lies above.
//! `wheel::tests::a_timer_armed_across_a_block_boundary_keeps_order_with_the_level_above`
//! checks each of these, and `tests/wheel_differential.rs` (random
//! operations against an ordered-map model) arms timers across block
//! boundaries among the rest.
//!
//! # A lone timer in a high bucket
//!
//! When the earliest bucket sits above level 0 and holds one entry due by
//! the poll's target, [`Hierarchy::pop_due`] moves `now` straight to that
//! entry's deadline and returns it instead of cascading it down level by
//! level: nothing can be due before it, and the digits of `now` above its
//! level stay the same. Sparse wheels (few timers, long delays) skip most
//! cascades that way. A bucket of two entries is handled alike: the earlier
//! one (by deadline, then arming order) is popped the same way, and only
//! the other is re-filed, relative to the new `now`.
//!
//! # Same-tick order without relinking (lazy moves)
//!
//! Timers due on one tick fire in the order they were last armed (CONTRACT
//! item 5; a reschedule counts as arming). Keeping every bucket in arming
//! order would force each reschedule to unlink and relink the entry at its
//! bucket's tail, touching two neighbours, even when the entry stays in the
//! same bucket, which is what idle timers pushed a little later do almost
//! every time. A store that can keep an arming sequence number per entry
//! ([`Nodes::ORDERED`]; the `Wheel`'s slab and the service's slots both do,
//! the slots in 32 bits, see "Arming numbers in 32 bits" below)
//! gets a cheaper rule instead:
//!
//! * Every arming takes the next number of a counter (`seq`, 64 bits, never
//!   wraps in practice: 2^64 armings).
//! * A move on a level above 0 that stays in the same bucket, or that moves
//!   the deadline later, only rewrites the deadline and the number and
//!   leaves the entry where it is: the bucket's list is then no longer in
//!   arming order, which is fine, as only level 0's order is ever used
//!   (below). A later deadline may lie beyond the bucket: the bucket still
//!   starts no later than the new deadline, so it cascades in time and
//!   re-files the entry by its deadline then (one placement, however many
//!   moves came before). Every entry's deadline is therefore at or after
//!   its bucket's first tick, but not always inside the bucket; `next_deadline` walks
//!   buckets in time order until the best deadline found lies inside the
//!   bucket just walked (see "The next-deadline memo"). Level 0 never holds
//!   such an entry, so `due_now` and firing stay exact.
//!   On level 0 a bucket is one tick, so order there is what fires next: a
//!   move within it relinks at the tail as before (free when already last).
//! * Level 0 keeps one *unsorted* bit per bucket, next to its occupancy
//!   bitmap; a level-0 bucket whose bit is clear is in arming order. Every
//!   adjacency in a level-0 list is checked as it forms: an append by an
//!   arming carries the largest number so far, placing a cascaded entry
//!   compares it with the target's tail and sets the bit if the entry is
//!   older, an entry moved on level 0 is relinked at the tail, and taking
//!   an entry out of an ordered list leaves it ordered. So a level-0
//!   bucket can never become silently out of order, whatever order the
//!   higher buckets it cascaded from were in. Higher levels keep no order
//!   at all (their bits stay clear): a lazy move there costs no bitmap
//!   write, and a cascade needs no order check until it reaches level 0.
//! * Only a level-0 bucket is ever sorted: when it is about to fire with
//!   its bit set, its list is merge-sorted by number (O(k log k) for the
//!   `k` timers due on that tick, which all fire then anyway; no
//!   allocation). A higher-level bucket cascades as it is.
//!   Only the pop that moves `now` checks the bit: once the bucket for
//!   `now` is sorted it stays in order until `now` moves again (arming and
//!   moves append the newest, unlinking keeps order, renumbering keeps
//!   order, and cascades happen only as `now` moves), so the further pops
//!   of a tick skip the check.
//!   Sorting it there instead would put the whole bucket's sort into one
//!   advance: idle timeouts restarted later pile up in a few high buckets
//!   (`examples/wheel_restart_latency.rs` builds that case and prints the
//!   longest advance), where per tick the sort is proportional to what
//!   fires.
//!
//! # Due now: one pass, then the next
//!
//! One rule for the `Wheel` and the service (CONTRACT item 1): a timer armed
//! for a tick that the current advance or poll (a *pass*, between
//! [`Hierarchy::begin_pass`] and [`Hierarchy::end_pass`]) has already
//! reached fires in the next pass: not in this one, which would never end
//! if a callback kept re-arming its own timer for now, and not a tick later.
//! The arming numbers say which entries those are. Whenever `now` moves, the
//! next number to be given out is kept as the *fence*; an entry due at
//! `now` whose number is the fence or newer was armed after the pass reached
//! `now`. Such entries are the newest of their level-0 bucket, so they come
//! last in its arming order: the pass stops at the first of them, leaving
//! `now` where it is, and the next pass (whose fence is taken when it
//! begins) pops them first, on their own tick. Outside a pass nothing
//! waits: an entry armed for `now` between passes is due to the next pop.
//! `wheel/tests.rs::a_timer_rearmed_for_now_by_its_callback_fires_once_per_advance`
//! and `tests/service_due.rs` show it.
//!
//! # Arming numbers in 32 bits
//!
//! The service's slots have room for 32 bits of arming number, not 64
//! ([`Nodes::SEQ_WRAPS`]), and so do the embedded wheel's entries (which
//! keep the C `tw_entry` at 48 bytes that way). Two numbers are then
//! compared by their wrapping difference, which is right as long as they
//! are less than 2^31 apart. That holds for every pair of linked entries by
//! construction: every [`RENUMBER_EVERY`] armings, [`Hierarchy::renumber`]
//! gives the linked entries fresh consecutive numbers in their current
//! order (a walk of every bucket and a sort: O(n log n) for `n` linked
//! timers, once per 2^30 armings of one shard or wheel). Between two
//! renumberings the linked entries' numbers span at most `n + 2^30`, under
//! 2^31: `n < 2^28` for a service (the most slots it has); for an embedded
//! wheel, which has no such bound, `renumber` checks `n < 2^30 - 1` and
//! panics (changing nothing) beyond it.
//! `tests::wrapping_arming_numbers_keep_fifo_across_the_wrap` arms and
//! moves timers across the wrap and a renumbering.

use std::mem::MaybeUninit;
use std::ptr::addr_of_mut;
use std::sync::atomic::{AtomicU64, Ordering};

use super::level::{Bitmap, LevelStore, SLOTS, SLOT_BITS};
use super::node::{EntryId, Node, Nodes, UNLINKED};

/// Number of levels: enough digits in base 64 (the buckets per level) to
/// cover every `u64` deadline.
pub const LEVELS: usize = (u64::BITS as usize).div_ceil(SLOT_BITS as usize);

const SLOT_MASK: u64 = (SLOTS as u64) - 1;

/// How many entries ahead a cascade's second pass asks for (see `cascade`):
/// enough misses in flight to cover memory latency, few enough that the
/// entries are still in cache when their turn comes.
const PREFETCH_AHEAD: usize = 8;

/// How many entries a cascade places one way before it walks the rest of a
/// long bucket from both ends (see `cascade`).
const ONE_WAY_FIRST: usize = 16;

/// How many entries of a two-way cascade's back walk, the last ones of the
/// bucket, are placed by following their links again rather than from a
/// list of their indices (see `cascade_both_ways`).
const BACK_BY_LINKS: usize = 64;

/// How many armings may pass between two renumberings of a store whose
/// arming numbers wrap at 32 bits (see the module docs).
pub(crate) const RENUMBER_EVERY: u64 = 1 << 30;

/// One more than the most entries a store whose arming numbers wrap may
/// hold linked when it is renumbered: `MAX_LINKED + RENUMBER_EVERY` stays
/// under 2^31.
const MAX_LINKED: u64 = (1 << 30) - 1;

/// `a` is a later arming number than `b`, for store `N`.
#[inline(always)]
fn newer<N: Nodes>(a: u64, b: u64) -> bool {
    if N::SEQ_WRAPS {
        (a.wrapping_sub(b) as u32 as i32) > 0
    } else {
        a > b
    }
}

/// The levels and the current tick. How the levels are held (boxed, or
/// inline after these fields) depends on the id type: see
/// [`LevelStore`].
pub(crate) struct Hierarchy<I: EntryId = u32> {
    now: u64,
    /// The exact earliest deadline when known (see the module docs).
    earliest: Memo,
    /// The next arming sequence number (used with `Nodes::ORDERED` only).
    next_seq: u64,
    /// With `Nodes::SEQ_WRAPS`: when `next_seq` reaches this, the linked
    /// entries are renumbered (see the module docs).
    renumber_at: u64,
    /// Scratch for [`cascade`](Self::cascade): the back half of the bucket
    /// being cascaded (empty between cascades; dropped after a big one).
    back_half: Vec<I>,
    /// The arming number `next_seq` had when `now` last moved (or the pass
    /// began): during a pass, an entry due at `now` with this number or a
    /// newer one was armed for a tick the pass had already reached, and
    /// waits for the next pass (see "Due now" in the module docs).
    fence: u64,
    /// A pass (one advance or poll) is running: see [`begin_pass`](Self::begin_pass).
    in_pass: bool,
    /// Last, after the fields every operation reads (when inline).
    levels: I::Levels,
}

impl<I: EntryId> Clone for Hierarchy<I> {
    fn clone(&self) -> Self {
        Hierarchy {
            now: self.now,
            levels: self.levels.clone(),
            earliest: Memo(AtomicU64::new(self.earliest.0.load(Ordering::Relaxed))),
            next_seq: self.next_seq,
            renumber_at: self.renumber_at,
            back_half: Vec::new(),
            fence: self.fence,
            in_pass: self.in_pass,
        }
    }
}

/// An `Option<u64>` that `&self` queries can fill in and that leaves the
/// wheel `Sync` (a `Cell` would not). Only ever touched through `&mut` or by
/// one thread's `&self` query at a time as far as the value matters: a
/// relaxed atomic is a plain load or store.
///
/// It holds the deadline plus one, and 0 for "unknown", so that the two
/// updates on the per-operation paths need no branch on "known?": a link
/// lowers it with a plain `min` (0 stays 0), and a move or unlink of the
/// entry holding it compares once. An earliest deadline of exactly
/// `u64::MAX` wraps to 0: it is simply never remembered.
struct Memo(AtomicU64);

impl Memo {
    const UNKNOWN: u64 = 0;

    #[inline]
    fn get(&self) -> Option<u64> {
        let value = self.0.load(Ordering::Relaxed);
        (value != Self::UNKNOWN).then(|| value - 1)
    }

    #[inline]
    fn set(&self, value: Option<u64>) {
        let stored = value.map_or(Self::UNKNOWN, |v| v.wrapping_add(1));
        self.0.store(stored, Ordering::Relaxed);
    }

    /// A timer was linked at `deadline`: the earliest is now at most that
    /// (if it was known; unknown stays unknown, as `min(0, _) == 0`).
    #[inline]
    fn lower_to(&self, deadline: u64) {
        let value = self.0.load(Ordering::Relaxed);
        self.0
            .store(value.min(deadline.wrapping_add(1)), Ordering::Relaxed);
    }

    /// The entry due at `deadline` left its place (fired, cancelled or
    /// moved): if it may have held the earliest deadline, forget it.
    #[inline]
    fn forget_if(&self, deadline: u64) {
        if self.0.load(Ordering::Relaxed) == deadline.wrapping_add(1) {
            self.0.store(Self::UNKNOWN, Ordering::Relaxed);
        }
    }
}

impl<I: EntryId> Hierarchy<I> {
    pub(crate) fn starting_at(now: u64) -> Self {
        let mut hierarchy = MaybeUninit::<Self>::uninit();
        // SAFETY: valid for writes and aligned; every field is written.
        unsafe {
            Self::write_starting_at(hierarchy.as_mut_ptr(), now);
            hierarchy.assume_init()
        }
    }

    /// Writes an empty hierarchy at tick `now` to `dst`, in place: with
    /// inline levels (a few KiB) nothing that big is built on the stack
    /// (the embedded wheel builds its state on the heap with it).
    ///
    /// # Safety
    /// `dst` is valid for writes and aligned; what it held is overwritten
    /// without being dropped.
    pub(crate) unsafe fn write_starting_at(dst: *mut Self, now: u64) {
        // SAFETY: fields of `*dst`, valid for writes (the caller's contract).
        unsafe {
            addr_of_mut!((*dst).now).write(now);
            I::Levels::write_empty(addr_of_mut!((*dst).levels));
            addr_of_mut!((*dst).earliest).write(Memo(AtomicU64::new(Memo::UNKNOWN)));
            addr_of_mut!((*dst).next_seq).write(0);
            addr_of_mut!((*dst).renumber_at).write(RENUMBER_EVERY);
            addr_of_mut!((*dst).back_half).write(Vec::new());
            addr_of_mut!((*dst).fence).write(0);
            addr_of_mut!((*dst).in_pass).write(false);
        }
    }

    #[inline]
    pub(crate) fn now(&self) -> u64 {
        self.now
    }

    /// Starts a pass: from here until [`end_pass`](Self::end_pass), an
    /// entry armed for a tick [`pop_due`](Self::pop_due) has already
    /// reached is not popped (see "Due now" in the module docs). Everything
    /// armed before this call is popped as usual.
    #[inline]
    pub(crate) fn begin_pass(&mut self) {
        self.in_pass = true;
        self.fence = self.next_seq;
    }

    /// Ends the pass begun by [`begin_pass`](Self::begin_pass): what waited
    /// for it is due to the next [`pop_due`](Self::pop_due).
    #[inline]
    pub(crate) fn end_pass(&mut self) {
        self.in_pass = false;
    }

    /// Whether a pass is running.
    #[inline]
    pub(crate) fn in_pass(&self) -> bool {
        self.in_pass
    }

    /// Moves `now` to `tick` (not earlier): what is armed from here on for
    /// `tick` waits for the next pass.
    #[inline(always)]
    fn move_now(&mut self, tick: u64) {
        self.now = tick;
        self.fence = self.next_seq;
    }

    /// Occupancy bitmaps, one per level (for `Debug`).
    pub(crate) fn occupancy(&self) -> impl Iterator<Item = Bitmap> + '_ {
        self.levels.iter().map(|level| level.occupied)
    }

    /// Heads of every bucket (for iteration).
    pub(crate) fn heads(&self) -> impl Iterator<Item = I> + '_ {
        self.levels
            .iter()
            .flat_map(|level| level.head.iter().copied())
    }

    /// Arms entry `index`: appends it to the bucket `deadline` (`>= now`)
    /// maps to, as the most recently armed entry.
    #[inline]
    pub(crate) fn link<N: Nodes<Id = I>>(&mut self, nodes: &mut N, index: I, deadline: u64) {
        // The newest arming goes last: no order check needed.
        let seq = if N::ORDERED {
            Some(self.take_seq(nodes))
        } else {
            None
        };
        self.link_new(nodes, index, deadline, seq);
    }

    /// Files a new arming (`seq`: its number, the newest, for an ordered
    /// store): level 0 if due within `SLOTS` ticks (short timers: Ratas'
    /// workload arms one per fired timer, `benches/ratas*.rs`; see "Level 0
    /// as a ring for new armings" in the module docs), else wherever
    /// `place` finds. A cascade goes to `place` directly: most of its
    /// entries go to a higher level, and this check in the cascade loop cost
    /// more than it saved (`benches/sim.rs` hold model under callgrind).
    #[inline(always)]
    fn link_new<N: Nodes<Id = I>>(
        &mut self,
        nodes: &mut N,
        index: I,
        deadline: u64,
        seq: Option<u64>,
    ) {
        // Within `SLOTS` ticks: level 0, even past its block (the module
        // docs, "Level 0 as a ring for new armings").
        if deadline - self.now <= SLOT_MASK {
            self.append_level0(nodes, index, deadline, seq);
        } else {
            self.place(nodes, index, deadline, seq);
        }
    }

    /// [`place`](Self::place) for a new arming (`seq`, the newest number,
    /// with an ordered store) due within `SLOTS` ticks: the level is
    /// a constant here, where `place`, shared with every level, computed
    /// the bucket's address from it (`benches/ratas_embedded.rs` arms one
    /// such timer per fired timer). The newest arming goes last, so no
    /// order check.
    #[inline(always)]
    fn append_level0<N: Nodes<Id = I>>(
        &mut self,
        nodes: &mut N,
        index: I,
        deadline: u64,
        seq: Option<u64>,
    ) {
        debug_assert!(deadline >= self.now && deadline - self.now <= SLOT_MASK);
        let slot = (deadline & SLOT_MASK) as usize;
        let level = &mut self.levels[0];
        let tail = level.tail[slot];
        let node = Node {
            deadline,
            prev: tail,
            next: I::NIL,
            bucket: slot as u16,
        };
        match seq {
            Some(seq) => nodes.set_node_seq(index, node, seq),
            None => nodes.set_node(index, node),
        }
        if tail == I::NIL {
            level.head[slot] = index;
            level.occupied.set(slot);
        } else {
            nodes.set_next(tail, index);
        }
        level.tail[slot] = index;
        // The memo covers the levels above 0 only (module docs).
    }

    /// [`link`](Self::link) with an arming number chosen by the caller (the
    /// simulation's own sequence numbers, so that its events need not carry
    /// a second copy): the order rules above need it to be at least every
    /// number given out before, as `take_seq`'s would be; later numbers
    /// continue after it.
    #[inline]
    pub(crate) fn link_numbered<N: Nodes<Id = I>>(
        &mut self,
        nodes: &mut N,
        index: I,
        deadline: u64,
        seq: u64,
    ) {
        debug_assert!(N::ORDERED, "only an ordered store keeps arming numbers");
        assert!(
            seq >= self.next_seq,
            "arming number {seq} is below one already given out ({})",
            self.next_seq
        );
        // As in `take_seq`: 2^64 armings never happen.
        self.next_seq = seq + 1;
        self.link_new(nodes, index, deadline, Some(seq));
    }

    /// The next arming sequence number. For a store whose numbers wrap,
    /// renumbers the linked entries first when it is time (see the module
    /// docs); the entry being armed, if linked, is renumbered too and then
    /// gets the number returned, the newest.
    #[inline]
    fn take_seq<N: Nodes<Id = I>>(&mut self, nodes: &mut N) -> u64 {
        if N::SEQ_WRAPS && self.next_seq >= self.renumber_at {
            self.renumber(nodes);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// Gives every linked entry a fresh arming number, in the order of the
    /// numbers they hold (oldest first), continuing from `next_seq`: order
    /// between them is kept, and afterwards they span only their own count.
    /// For stores whose numbers wrap (see the module docs). Allocates a
    /// scratch list of the linked entries, and drops it.
    #[cold]
    #[inline(never)]
    fn renumber<N: Nodes<Id = I>>(&mut self, nodes: &mut N) {
        let next = self.next_seq as u32;
        // Oldest first: the largest age `next - seq` (every linked number
        // is below `next` and less than 2^31 from it) sorts first as the
        // smallest `!age`.
        let mut entries: Vec<(u32, I)> = Vec::new();
        for level in self.levels.iter() {
            for &head in level.head.iter() {
                let mut index = head;
                while index != I::NIL {
                    let age = next.wrapping_sub(nodes.seq(index) as u32);
                    entries.push((!age, index));
                    index = nodes.node(index).next;
                }
            }
        }
        // The numbers of the linked entries span their count plus
        // `RENUMBER_EVERY` until the next renumbering, which must stay under
        // 2^31 (module docs): checked here, once per 2^30 armings, rather
        // than on every arming. Nothing has changed yet when it panics.
        assert!(
            (entries.len() as u64) < MAX_LINKED,
            "tickwheel: 2^30 - 1 timers armed in one wheel, the most it holds"
        );
        // Linked entries hold distinct numbers, so no two keys tie.
        entries.sort_unstable_by_key(|&(key, _)| key);
        // The fence moves with the numbers: to the first entry at or past
        // it (oldest first), else to the next number given out.
        let fence_age = next.wrapping_sub(self.fence as u32);
        let mut fence = None;
        for (key, index) in entries {
            let seq = self.next_seq;
            self.next_seq += 1;
            if fence.is_none() && !key <= fence_age {
                fence = Some(seq);
            }
            nodes.set_seq(index, seq);
        }
        self.fence = fence.unwrap_or(self.next_seq);
        self.renumber_at = self.next_seq + RENUMBER_EVERY;
    }

    /// Moves the point at which arming numbers are given out, for tests of
    /// the 32-bit wrap: the next arming takes `seq`, and the linked entries
    /// are renumbered when `renumber_at` is reached.
    #[cfg(test)]
    pub(crate) fn set_seq_for_test(&mut self, seq: u64, renumber_at: u64) {
        self.next_seq = seq;
        self.renumber_at = renumber_at;
    }

    /// The number the next arming takes (tests of the 32-bit wrap).
    #[cfg(test)]
    pub(crate) fn next_seq_for_test(&self) -> u64 {
        self.next_seq
    }

    /// Appends entry `index` to the bucket `deadline` (`>= now`) maps to.
    /// With `new_seq` (a new arming, the newest number) it stores that
    /// number; without (a cascade) the entry keeps its number, and a level-0
    /// bucket is marked unsorted if the entry is older than the current tail
    /// (only level 0's order is ever used: a higher bucket's list order may
    /// be anything, and every adjacency on level 0 is checked as it forms).
    #[inline]
    fn place<N: Nodes<Id = I>>(
        &mut self,
        nodes: &mut N,
        index: I,
        deadline: u64,
        new_seq: Option<u64>,
    ) {
        debug_assert!(deadline >= self.now);
        // The level and slot straight from the deadline, not split again
        // from the bucket number. A new arming due within `SLOTS` ticks
        // went to `append_level0` instead (`link_new`).
        let (level, slot) = level_and_slot(self.now, deadline);
        let bucket = (level * SLOTS + slot) as u16;
        let tail = self.levels[level].tail[slot];
        let node = Node {
            deadline,
            prev: tail,
            next: I::NIL,
            bucket,
        };
        let check_order = match new_seq {
            Some(seq) => {
                nodes.set_node_seq(index, node, seq);
                false
            }
            None => {
                nodes.set_node(index, node);
                true
            }
        };
        if tail == I::NIL {
            self.levels[level].head[slot] = index;
            self.levels[level].occupied.set(slot);
        } else {
            nodes.set_next(tail, index);
            if N::ORDERED
                && check_order
                && level == 0
                && newer::<N>(nodes.seq(tail), nodes.seq(index))
            {
                self.levels[level].unsorted.set(slot);
            }
        }
        self.levels[level].tail[slot] = index;
        // A cascade only re-files entries that were linked already (and
        // forgot the memo when it began). A new arming comes here only when
        // it is due `SLOTS` ticks or more from now (`link_new`), so past
        // level 0's block: above level 0, which the memo covers.
        if new_seq.is_some() {
            debug_assert!(level > 0);
            self.earliest.lower_to(deadline);
        }
    }

    /// Removes entry `index` from its bucket. Returns its deadline.
    #[inline]
    pub(crate) fn unlink<N: Nodes<Id = I>>(&mut self, nodes: &mut N, index: I) -> u64 {
        let node = nodes.node(index);
        debug_assert_ne!(node.bucket, UNLINKED, "unlinking an unlinked entry");
        self.detach(nodes, node);
        mark_unlinked(nodes, index, node);
        node.deadline
    }

    /// Takes the entry whose node is `node` out of its bucket's list and the
    /// memo, leaving the entry's own node as it was: for `unlink`, which
    /// marks it unlinked next, and for a move, which links it again at once
    /// (one write of the node instead of two).
    #[inline]
    fn detach<N: Nodes<Id = I>>(&mut self, nodes: &mut N, node: Node<I>) {
        let (level, slot) = split_bucket(node.bucket);
        if node.prev == I::NIL {
            self.levels[level].head[slot] = node.next;
        } else {
            nodes.set_next(node.prev, node.next);
        }
        if node.next == I::NIL {
            self.levels[level].tail[slot] = node.prev;
        } else {
            nodes.set_prev(node.next, node.prev);
        }
        if self.levels[level].head[slot] == I::NIL {
            self.levels[level].occupied.clear(slot);
            self.levels[level].unsorted.clear(slot);
        }
        self.earliest.forget_if(node.deadline);
    }

    /// Moves linked entry `index` to `deadline` (`>= now`) and counts it as
    /// armed again. Relinks it at the tail of its new bucket, except when it
    /// stays in its bucket and either is already last there or (with an
    /// ordered store) the bucket is above level 0: then it stays in place
    /// (see the module docs).
    #[inline]
    pub(crate) fn relink<N: Nodes<Id = I>>(&mut self, nodes: &mut N, index: I, deadline: u64) {
        let node = nodes.node(index);
        debug_assert_ne!(node.bucket, UNLINKED, "relinking an unlinked entry");
        if !self.move_in_place(nodes, index, node, deadline) {
            self.relink_general(nodes, index, node, deadline);
        }
    }

    /// [`relink`](Self::relink), or [`link`](Self::link) when entry `index`
    /// is unlinked (a fired timer the `Wheel` keeps for its caller: it is
    /// armed again in place, as a new arming). Returns `true` in that case.
    #[inline]
    pub(crate) fn rearm<N: Nodes<Id = I>>(
        &mut self,
        nodes: &mut N,
        index: I,
        deadline: u64,
    ) -> bool {
        let node = nodes.node(index);
        if self.move_in_place(nodes, index, node, deadline) {
            return false;
        }
        // Both rest paths out of line, and neither gets `node`: a callee
        // taking it by value gets it through memory (all four fields
        // stored, then loaded), while the lazy move above reads only its
        // deadline and bucket. Two callees rather than one that branches:
        // the held timer's link (as common as an expiry) is then a leaf
        // with no frame and no flag to carry back.
        if node.bucket == UNLINKED {
            self.link_held(nodes, index, deadline);
            return true;
        }
        self.relink_linked(nodes, index, deadline);
        false
    }

    /// The common move (an idle timer pushed later) on a high level, with an
    /// ordered store: the entry stays in place whatever bucket the new
    /// deadline maps to, so the bucket is not even computed. Returns `false`,
    /// changing nothing, for every other move (and always for a store that
    /// is not ordered).
    #[inline(always)]
    fn move_in_place<N: Nodes<Id = I>>(
        &mut self,
        nodes: &mut N,
        index: I,
        node: Node<I>,
        deadline: u64,
    ) -> bool {
        // `bucket - SLOTS < UNLINKED - SLOTS`: above level 0 and linked, in
        // one compare (an unlinked entry wraps to the top of the range).
        let high = node.bucket.wrapping_sub(SLOTS as u16) < UNLINKED - SLOTS as u16;
        if !(N::ORDERED && high && deadline >= node.deadline) {
            return false;
        }
        // The memo cannot drop (the deadline grows); it is only forgotten
        // if this entry held it.
        let seq = self.take_seq(nodes);
        // No order bit to set: a higher level's list order is never
        // trusted (see `place` and the module docs).
        nodes.set_deadline_seq(index, deadline, seq);
        self.earliest.forget_if(node.deadline);
        true
    }

    /// [`link`](Self::link) for [`rearm`](Self::rearm) of an unlinked
    /// (held) entry: a held timer armed again, as cheap as an insert's link.
    /// Out of line so that the common lazy move in `rearm` stays small.
    #[inline(never)]
    fn link_held<N: Nodes<Id = I>>(&mut self, nodes: &mut N, index: I, deadline: u64) {
        self.link(nodes, index, deadline);
    }

    /// The rest of [`rearm`](Self::rearm) for a linked entry that did not
    /// move in place: reads its node and goes on to
    /// [`relink_general`](Self::relink_general).
    #[inline(never)]
    fn relink_linked<N: Nodes<Id = I>>(&mut self, nodes: &mut N, index: I, deadline: u64) {
        let node = nodes.node(index);
        self.relink_general(nodes, index, node, deadline);
    }

    /// A move of a linked entry that [`relink`](Self::relink) or
    /// [`rearm`](Self::rearm) did not settle in place. Out of line: its
    /// register saves stay off the inline paths.
    #[inline(never)]
    fn relink_general<N: Nodes<Id = I>>(
        &mut self,
        nodes: &mut N,
        index: I,
        node: Node<I>,
        deadline: u64,
    ) {
        let bucket = bucket_index(self.now, deadline);
        // Above level 0 an ordered store may leave the entry where it is
        // when it stays in its bucket, or when it moves later: its bucket
        // still comes due (cascades) no later than the new deadline, and
        // re-files it then (see the module docs).
        let lazy = N::ORDERED
            && usize::from(node.bucket) >= SLOTS
            && (node.bucket == bucket || deadline >= node.deadline);
        if lazy || (node.bucket == bucket && node.next == I::NIL) {
            nodes.set_node(index, Node { deadline, ..node });
            if N::ORDERED {
                let seq = self.take_seq(nodes);
                // Either lazy (above level 0: no order bit, see `place`)
                // or already last on level 0 (the newest stays last).
                nodes.set_seq(index, seq);
            }
            self.earliest.forget_if(node.deadline);
            // Still in its bucket: on level 0 the memo does not cover it.
            if usize::from(node.bucket) >= SLOTS {
                self.earliest.lower_to(deadline);
            }
            return;
        }
        // `link` rewrites the whole node, so the entry is only detached
        // from its neighbours here, not marked unlinked first.
        self.detach(nodes, node);
        self.link(nodes, index, deadline);
    }

    /// The earliest deadline of any linked entry (`now` if one is due). See
    /// the module docs for its cost.
    pub(crate) fn next_deadline<N: Nodes<Id = I>>(&self, nodes: &N) -> Option<u64> {
        self.next_deadline_until(nodes, u64::MAX)
    }

    /// [`next_deadline`](Self::next_deadline) if it is at most `limit`,
    /// else `None`; stops looking at the first bucket that starts after
    /// `limit` (so a capped query never walks a far bucket).
    #[inline]
    pub(crate) fn next_deadline_until<N: Nodes<Id = I>>(
        &self,
        nodes: &N,
        limit: u64,
    ) -> Option<u64> {
        // Level 0 at or after `now` first: its buckets are single ticks of
        // the current block and come before every higher level's (see
        // `pop_due`), so the first one is the answer with no walk.
        let current = (self.now & SLOT_MASK) as usize;
        if let Some(slot) = self.levels[0].occupied.first_from(current) {
            let earliest = (self.now & !SLOT_MASK) | slot as u64;
            return (earliest <= limit).then_some(earliest);
        }
        if self.levels[0].occupied.any() {
            return self.next_deadline_ring(nodes, limit);
        }
        // Then the levels above: their memo, else a walk.
        self.next_deadline_above(nodes, limit)
    }

    /// The earliest deadline above level 0 if at most `limit`: the memo,
    /// else a walk.
    #[inline(always)]
    fn next_deadline_above<N: Nodes<Id = I>>(&self, nodes: &N, limit: u64) -> Option<u64> {
        if let Some(earliest) = self.earliest.get() {
            return (earliest <= limit).then_some(earliest);
        }
        self.next_deadline_walk(nodes, limit)
    }

    /// [`next_deadline_until`](Self::next_deadline_until) when level 0
    /// holds entries of the next block only (the ring): the earlier of
    /// the ring's first and what lies above (every entry above is due at
    /// the next block or later, so a ring entry on its first tick is the
    /// answer with no look above). Out of line, as the walk is.
    #[inline(never)]
    fn next_deadline_ring<N: Nodes<Id = I>>(&self, nodes: &N, limit: u64) -> Option<u64> {
        let ring = self.ring_first()?;
        let earliest = if ring == (self.now | SLOT_MASK) + 1 {
            ring
        } else {
            self.next_deadline_above(nodes, limit.min(ring - 1))
                .unwrap_or(ring)
        };
        (earliest <= limit).then_some(earliest)
    }

    /// [`next_deadline`](Self::next_deadline) when finding it reads at most
    /// `budget` entries of the earliest bucket; when that bucket holds more
    /// (and the memo is unknown), its first tick instead
    /// ([`next_wakeup`](Self::next_wakeup), a lower bound) with the memo
    /// left unknown. So the answer costs O(levels + budget) whatever the
    /// bucket sizes, and is exact whenever the earliest timer is on level 0
    /// or shares its bucket with fewer than `budget` others. For a store
    /// without lazy moves (not [`Nodes::ORDERED`]) every entry lies inside
    /// its bucket, so the walk it falls through to reads that bucket only.
    pub(crate) fn next_deadline_bounded<N: Nodes<Id = I>>(
        &self,
        nodes: &N,
        budget: usize,
    ) -> Option<u64> {
        let bucket = self.next_bucket();
        if let Some(ring) = self.ring_first_after(bucket) {
            // Exact unless a bucket above starts before the ring's first
            // entry (at the next block): then as below, for that bucket.
            match bucket {
                Some((level, slot)) if self.bucket_start(level, slot) < ring => {
                    if self.earliest.get().is_some() {
                        return self.next_deadline(nodes);
                    }
                    return self.bounded_by_bucket(nodes, level, slot, budget);
                }
                _ => return Some(ring),
            }
        }
        let (level, slot) = bucket?;
        if level > 0 {
            // Level 0 is empty from `now` on: the memo, if known, is exact.
            if let Some(earliest) = self.earliest.get() {
                return Some(earliest);
            }
            return self.bounded_by_bucket(nodes, level, slot, budget);
        }
        self.next_deadline(nodes)
    }

    /// The rest of [`next_deadline_bounded`](Self::next_deadline_bounded)
    /// when bucket `slot` on `level > 0` is the earliest above level 0 and
    /// the memo is unknown: the exact answer if the bucket holds at most
    /// `budget` entries, else its first tick.
    fn bounded_by_bucket<N: Nodes<Id = I>>(
        &self,
        nodes: &N,
        level: usize,
        slot: usize,
        budget: usize,
    ) -> Option<u64> {
        let bucket = &self.levels[level];
        let (mut index, tail) = (bucket.head[slot], bucket.tail[slot]);
        for _ in 0..budget {
            if index == tail {
                return self.next_deadline(nodes);
            }
            index = nodes.node(index).next;
        }
        Some(self.bucket_start(level, slot))
    }

    /// [`ring_first`](Self::ring_first) given what
    /// [`next_bucket`](Self::next_bucket) found: none when that is on level
    /// 0 (level 0 holds something from `now` on, which comes first), else
    /// the ring's first, if any (`next_bucket` passes over the ring, so
    /// its answer is then the earliest bucket above level 0).
    #[inline(always)]
    fn ring_first_after(&self, bucket: Option<(usize, usize)>) -> Option<u64> {
        match bucket {
            Some((0, _)) => None,
            _ => self.ring_first(),
        }
    }

    /// With level 0 empty from `now` on, the deadline of its earliest
    /// entry due in the next block, if it holds any (see "Level 0 as a
    /// ring for new armings" in the module docs).
    #[inline(always)]
    fn ring_first(&self) -> Option<u64> {
        let slot = self.levels[0].occupied.first_from(0)?;
        debug_assert!(slot < (self.now & SLOT_MASK) as usize);
        // A ring entry is due in the next block, so there is one.
        Some(((self.now | SLOT_MASK) + 1) | slot as u64)
    }

    /// [`next_deadline_until`](Self::next_deadline_until) when level 0 has
    /// nothing at or after `now` and the memo is unknown: out of line, so
    /// the quick answers above cost no register saves. What it finds is
    /// the earliest deadline above level 0, which it keeps in the memo.
    #[inline(never)]
    fn next_deadline_walk<N: Nodes<Id = I>>(&self, nodes: &N, limit: u64) -> Option<u64> {
        // Buckets in time order. Every entry's deadline is at or after its
        // bucket's first tick, so a bucket's first tick bounds everything
        // from there on; an entry moved later without relinking may lie
        // beyond its bucket, so the walk goes on while the best deadline
        // found is past the end of the bucket just walked.
        let mut earliest = u64::MAX;
        let mut found = false;
        'levels: for (level_no, level) in self.levels.iter().enumerate() {
            let current = digit(self.now, level_no);
            let mut next = if level_no == 0 {
                level.occupied.first_from(current)
            } else {
                level.occupied.first_after(current)
            };
            while let Some(slot) = next {
                next = level.occupied.first_after(slot);
                let start = self.bucket_start(level_no, slot);
                if found && start >= earliest {
                    break 'levels;
                }
                if start > limit {
                    // Everything from here on is later than `limit`, and
                    // so is what was found (it is past `start`).
                    return None;
                }
                found = true;
                if level_no == 0 {
                    // One tick per bucket, never a lazily moved entry.
                    earliest = start;
                    break 'levels;
                }
                earliest = earliest.min(min_deadline(nodes, level.head[slot], level.tail[slot]));
                if earliest <= bucket_last(start, level_no) {
                    break 'levels;
                }
            }
        }
        if !found {
            return None;
        }
        // Only a deadline above level 0 is kept (the memo's scope); the
        // callers look at level 0 first, so the walk finds none there.
        if earliest >= (self.now | SLOT_MASK).saturating_add(1) {
            self.earliest.set(Some(earliest));
        }
        (earliest <= limit).then_some(earliest)
    }

    /// `true` when an entry is due at `now` (O(1)). Every entry due at
    /// `now` sits in level 0's bucket for `now`: reaching `now` cascaded
    /// every higher bucket that covers it, and a link for `now` goes there.
    #[inline]
    pub(crate) fn due_now(&self) -> bool {
        self.levels[0].is_occupied((self.now & SLOT_MASK) as usize)
    }

    /// The first tick of the earliest non-empty bucket: a lower bound of
    /// [`next_deadline`](Self::next_deadline) in O(levels).
    #[inline]
    pub(crate) fn next_wakeup(&self) -> Option<u64> {
        let start = |(level, slot)| self.bucket_start(level, slot);
        let bucket = self.next_bucket();
        match self.ring_first_after(bucket) {
            Some(ring) => Some(bucket.map_or(ring, |b| start(b).min(ring))),
            None => bucket.map(start),
        }
    }

    /// Unlinks and returns the next entry due at or before `target`, with
    /// `now` advanced to its deadline; or, when none is, advances `now` to
    /// `target` (or keeps it, if `target` is earlier) and returns `None`.
    #[inline(always)]
    pub(crate) fn pop_due<N: Nodes<Id = I>>(&mut self, nodes: &mut N, target: u64) -> Option<I> {
        let target = target.max(self.now);
        self.pop_due_by(nodes, target)
    }

    /// [`pop_due`](Self::pop_due) for an advance's `target`, clamped to
    /// `now` once when the advance began: its pops skip the clamp
    /// (`benches/ratas_embedded.rs` pops once per fired timer and once more
    /// per advance). `now` passes the target only when a callback polled
    /// further; what is due then is what `pop_due` would pop (only what is
    /// due at `now`), which costs a check only where nothing is due by the
    /// target (once per advance).
    #[inline(always)]
    pub(crate) fn pop_due_by<N: Nodes<Id = I>>(&mut self, nodes: &mut N, target: u64) -> Option<I> {
        // The common cases inline: a timer due now, or the next one on
        // level 0 (a later level-0 bucket starts before any higher level's
        // next bucket, which lies beyond the current `SLOTS`-tick block). Both
        // are "the first occupied level-0 bucket at or after `now`", found
        // with one mask: no separate test for "due now".
        let due_slot = (self.now & SLOT_MASK) as usize;
        let Some(slot) = self.levels[0].occupied.first_from(due_slot) else {
            return self.pop_due_slow(nodes, target);
        };
        let start = (self.now & !SLOT_MASK) | slot as u64;
        // `start == now` here only with `target < now` (see above): then
        // the entries due now are due, as with the target clamped.
        if start > target {
            if start == self.now {
                return self.pop_due_past_target(nodes, slot);
            }
            if target > self.now {
                self.move_now(target);
            }
            return None;
        }
        // A pop after the first of a tick (`slot` is `now`'s) reads the
        // bucket by `due_slot`, which comes from `now` alone, not by `slot`,
        // which waits for the bitmap's load, shifts and bit scan: the pop's
        // loads then start as soon as `now` is read, with the branch, which
        // the processor predicts, in place of that wait
        // (`benches/ratas_embedded.rs`, 1000 pairs with range scheduling:
        // 0.97x the user CPU, for 3 % more instructions).
        if start == self.now {
            if N::ORDERED {
                // The bucket for `now` is in arming order already: entries
                // reach it out of order only by a cascade, which happens
                // only as `now` moves, and the pop that moved `now` here
                // sorted it (see "Same-tick order" in the module docs). So
                // the pops after the first on a tick skip the check.
                debug_assert!(!self.levels[0].unsorted.test(slot));
                // In arming order, the entries armed for `now` after the
                // pass reached it come last: the pass ends at the first.
                if self.in_pass && !newer::<N>(self.fence, nodes.seq(self.levels[0].head[due_slot]))
                {
                    return None;
                }
            }
            return Some(self.pop_head_due(nodes, due_slot));
        }
        self.move_now(start);
        if N::ORDERED && self.levels[0].unsorted.test(slot) {
            // Entries cascaded out of arming order (see `cascade`).
            self.sort_bucket(nodes, 0, slot);
        }
        Some(self.pop_head_due(nodes, slot))
    }

    /// The next entry due at `now`, unlinked, or `None` (changing nothing)
    /// when none is or the first is one a pass must leave for the next
    /// ("Due now" in the module docs): what [`pop_due_by`](Self::pop_due_by)
    /// pops for a target of `now`, without its search of level 0 for the
    /// first bucket at or after `now` (every entry due at `now` is in
    /// `now`'s level-0 bucket, see [`due_now`](Self::due_now)). For a pass
    /// that has fired the first timer of the one tick it fires
    /// (`advance_to_next_event`): its other pops, and the one that ends it.
    #[inline(always)]
    pub(crate) fn pop_due_now<N: Nodes<Id = I>>(&mut self, nodes: &mut N) -> Option<I> {
        let slot = (self.now & SLOT_MASK) as usize;
        let head = self.levels[0].head[slot];
        if head == I::NIL {
            return None;
        }
        if N::ORDERED {
            // Sorted by the pop that moved `now` here (as in `pop_due_by`).
            debug_assert!(!self.levels[0].unsorted.test(slot));
            if self.in_pass && !newer::<N>(self.fence, nodes.seq(head)) {
                return None;
            }
        }
        Some(self.pop_head_due(nodes, slot))
    }

    /// [`pop_due_by`](Self::pop_due_by) when a callback moved `now` past
    /// the advance's target and level 0's bucket `slot` for `now` is
    /// occupied: pops from it as for a target of `now`. Out of line: no
    /// advance of the crate's own does this.
    #[cold]
    #[inline(never)]
    fn pop_due_past_target<N: Nodes<Id = I>>(&mut self, nodes: &mut N, slot: usize) -> Option<I> {
        debug_assert!(self.levels[0].is_occupied(slot));
        self.pop_due(nodes, self.now)
    }

    /// When level 0 shows that nothing is due by `target` (its next bucket
    /// at or after `now` starts later), moves `now` to `target` as a
    /// fruitless [`pop_due`](Self::pop_due) would and returns `true`.
    /// Returns `false`, changing nothing, when that takes a closer look.
    #[inline]
    pub(crate) fn skip_if_idle_until(&mut self, target: u64) -> bool {
        let due_slot = (self.now & SLOT_MASK) as usize;
        let Some(slot) = self.levels[0].occupied.first_from(due_slot) else {
            return false;
        };
        let start = (self.now & !SLOT_MASK) | slot as u64;
        if start <= target {
            return false;
        }
        if target > self.now {
            self.move_now(target);
        }
        true
    }

    /// [`pop_due`](Self::pop_due) when level 0 has nothing at or after
    /// `now`: the earliest bucket is above level 0, if any. Left to the
    /// compiler to inline, and small: it settles an idle advance (nothing
    /// due by the target; out of line, a second call frame was a large share
    /// of its small cost: `benches/wheel.rs`, `advance_idle`) and a lone
    /// timer popped straight from its bucket (see `pop_alone`), the most
    /// common pop of a sparse wheel (`examples/fill_expire.rs` at 1,000
    /// timers pops over a third of its timers that way). A bucket of more
    /// goes out of line, to [`pop_not_alone`](Self::pop_not_alone), so
    /// that the lone pop needs no call frame where this is out of line:
    /// with the whole walk here, the embedded wheel's advance called it out
    /// of line for every pop from a higher bucket, and its frame (six
    /// registers saved and restored) was about a quarter of its
    /// instructions, while inlining all of it into that advance cost
    /// Ratas' workload (`benches/ratas_embedded.rs`) 2.5 % more
    /// instructions.
    #[inline]
    fn pop_due_slow<N: Nodes<Id = I>>(&mut self, nodes: &mut N, target: u64) -> Option<I> {
        if self.levels[0].occupied.any() {
            // Only entries of the next block (the ring) are left on level 0.
            return self.pop_due_ring(nodes, target);
        }
        if let Some((level, slot)) = self.next_bucket_above_0() {
            let start = self.bucket_start(level, slot);
            if start <= target {
                let index = self.levels[level].head[slot];
                if index == self.levels[level].tail[slot] {
                    let node = nodes.node(index);
                    if pops_from_bucket(node.deadline, start, level, target) {
                        self.pop_lone(nodes, level, slot, index, node);
                        return Some(index);
                    }
                }
                return self.pop_not_alone(nodes, level, slot, start, target);
            }
        }
        if target > self.now {
            self.move_now(target);
        }
        None
    }

    /// [`pop_due_slow`](Self::pop_due_slow) when level 0 holds entries of
    /// the next block only (the ring): `now` moves to that block's first
    /// tick, cascading first a bucket above that starts there (its entries
    /// may be due before the ring's); no straight pop from a bucket above,
    /// which could pass a ring entry. Out of line: once per block crossed
    /// with ring entries.
    #[inline(never)]
    fn pop_due_ring<N: Nodes<Id = I>>(&mut self, nodes: &mut N, target: u64) -> Option<I> {
        let next_block = (self.now | SLOT_MASK) + 1;
        if next_block > target {
            if target > self.now {
                self.move_now(target);
            }
            return None;
        }
        if let Some((level, slot)) = self.next_bucket_above_0() {
            if self.bucket_start(level, slot) == next_block {
                return self.pop_due_cascading(nodes, level, slot, next_block, target);
            }
        }
        self.move_now(next_block);
        // Level 0 now holds the block from `now` on: the inline pop finds it.
        self.pop_due_by(nodes, target)
    }

    /// [`pop_due_slow`](Self::pop_due_slow) when the earliest bucket, `slot`
    /// on `level > 0` (first tick `start`, due by `target`), holds more
    /// than one entry or one that lies past it: pops the earlier of two
    /// (`pop_earlier_of_two`), else cascades the bucket and walks on
    /// ([`pop_due_cascading`](Self::pop_due_cascading)).
    #[inline(never)]
    fn pop_not_alone<N: Nodes<Id = I>>(
        &mut self,
        nodes: &mut N,
        level: usize,
        slot: usize,
        start: u64,
        target: u64,
    ) -> Option<I> {
        if let Some(index) = self.pop_if_pair(nodes, level, slot, start, target) {
            return Some(index);
        }
        self.pop_due_cascading(nodes, level, slot, start, target)
    }

    /// When bucket `slot` on `level > 0`, the earliest bucket (first tick
    /// `start`, due by `target`), holds exactly two entries: pops the
    /// earlier if it may be (see [`pop_earlier_of_two`](Self::pop_earlier_of_two)).
    /// The head's `next` is the tail for two (one load, which a cascade of
    /// a longer bucket makes anyway).
    #[inline(always)]
    fn pop_if_pair<N: Nodes<Id = I>>(
        &mut self,
        nodes: &mut N,
        level: usize,
        slot: usize,
        start: u64,
        target: u64,
    ) -> Option<I> {
        let index = self.levels[level].head[slot];
        let tail = self.levels[level].tail[slot];
        if index == tail {
            return None;
        }
        let node = nodes.node(index);
        if node.next != tail {
            return None;
        }
        self.pop_earlier_of_two(nodes, level, slot, start, target, node)
    }

    /// The rest of [`pop_due_slow`](Self::pop_due_slow) when the earliest
    /// bucket, `slot` on `level > 0` (first tick `start`, due by `target`),
    /// must cascade: cascades it, then walks on as `pop_due` would (the due
    /// bucket first, then the next bucket, cascading as needed). Inlined
    /// into its two callers, which are out of line (`pop_not_alone`,
    /// `pop_due_ring`): one call frame for a cascading pop.
    #[inline(always)]
    fn pop_due_cascading<N: Nodes<Id = I>>(
        &mut self,
        nodes: &mut N,
        level: usize,
        slot: usize,
        start: u64,
        target: u64,
    ) -> Option<I> {
        self.move_now(start);
        self.cascade(nodes, level, slot);
        loop {
            let due_slot = (self.now & SLOT_MASK) as usize;
            if self.levels[0].is_occupied(due_slot) {
                if N::ORDERED && self.levels[0].unsorted.test(due_slot) {
                    // Entries cascaded out of arming order (see `cascade`).
                    self.sort_bucket(nodes, 0, due_slot);
                }
                return Some(self.pop_head_due(nodes, due_slot));
            }
            match self.next_bucket() {
                Some((level, slot)) if self.bucket_start(level, slot) <= target => {
                    let start = self.bucket_start(level, slot);
                    if level > 0 {
                        if let Some(index) = self.pop_alone(nodes, level, slot, start, target) {
                            return Some(index);
                        }
                        self.move_now(start);
                        self.cascade(nodes, level, slot);
                    } else {
                        self.move_now(start);
                    }
                }
                _ => {
                    if target > self.now {
                        self.move_now(target);
                    }
                    return None;
                }
            }
        }
    }

    /// Unlinks the first entry of level 0's bucket for `now` (`slot`), which
    /// is due now. Cheaper than [`unlink`](Self::unlink): the entry is the
    /// head, and the memo (which covers the levels above 0) stays.
    #[inline]
    fn pop_head_due<N: Nodes<Id = I>>(&mut self, nodes: &mut N, slot: usize) -> I {
        let level = &mut self.levels[0];
        let index = level.head[slot];
        let node = nodes.node(index);
        debug_assert_eq!(node.deadline, self.now);
        // In arming order: the pop that moved `now` here sorted it (see
        // "Same-tick order"), so its unsorted bit needs no clearing when it
        // empties (one word less to write per emptied bucket).
        debug_assert!(!level.unsorted.test(slot));
        level.head[slot] = node.next;
        if node.next == I::NIL {
            level.tail[slot] = I::NIL;
            level.occupied.clear(slot);
        } else {
            nodes.set_prev(node.next, I::NIL);
        }
        mark_unlinked(nodes, index, node);
        index
    }

    /// When the earliest bucket, on `level > 0`, holds a single entry that
    /// is due by `target` and lies inside the bucket, unlinks it and moves
    /// `now` straight to its deadline instead of cascading it level by
    /// level. Valid because nothing is due before it: the levels below are
    /// empty, the other buckets of `level` come later, and the digits of
    /// `now` above `level` do not change inside the bucket.
    #[inline]
    fn pop_alone<N: Nodes<Id = I>>(
        &mut self,
        nodes: &mut N,
        level: usize,
        slot: usize,
        start: u64,
        target: u64,
    ) -> Option<I> {
        let index = self.levels[level].head[slot];
        if index != self.levels[level].tail[slot] {
            return self.pop_if_pair(nodes, level, slot, start, target);
        }
        let node = nodes.node(index);
        if !pops_from_bucket(node.deadline, start, level, target) {
            return None;
        }
        self.pop_lone(nodes, level, slot, index, node);
        Some(index)
    }

    /// Pops `index` (whose node is `node`), the only entry of bucket `slot`
    /// on `level > 0`, the earliest bucket, due inside it: moves `now` to
    /// its deadline (see [`pop_alone`](Self::pop_alone)).
    #[inline(always)]
    fn pop_lone<N: Nodes<Id = I>>(
        &mut self,
        nodes: &mut N,
        level: usize,
        slot: usize,
        index: I,
        node: Node<I>,
    ) {
        self.move_now(node.deadline);
        // `unlink` for the only entry of a bucket: it empties the bucket.
        self.empty_bucket(level, slot);
        mark_unlinked(nodes, index, node);
        self.earliest.forget_if(node.deadline);
    }

    /// Marks bucket `slot` of `level` (above 0) empty (its entries were
    /// taken out). Higher levels never set their unsorted bits (see
    /// `place`), so there is none to clear.
    #[inline]
    fn empty_bucket(&mut self, level: usize, slot: usize) {
        debug_assert!(level > 0 && !self.levels[level].unsorted.any());
        let bucket = &mut self.levels[level];
        bucket.head[slot] = I::NIL;
        bucket.tail[slot] = I::NIL;
        bucket.occupied.clear(slot);
    }

    /// [`pop_alone`](Self::pop_alone) for a bucket of two entries (`first`
    /// is the head's node): pops the earlier (by deadline, then by arming
    /// order) when it lies inside the bucket and is due by `target`, moves
    /// `now` to its deadline and re-files the other relative to that `now`.
    /// The same outcome as cascading the bucket and popping the first timer
    /// due, without placing and unlinking that timer on level 0: a sparse
    /// wheel's level-1 buckets hold one or two timers
    /// (`examples/fill_expire.rs` at 1,000 timers), and a cascade of two
    /// costs about as much as the two pops. Returns `None`, changing
    /// nothing, otherwise. Nothing is due before the earlier entry (as for
    /// `pop_alone`), and the other one's deadline is at or after it, so it
    /// can be placed relative to the new `now` wherever it lies (even past
    /// the bucket's end, moved there lazily). If it lands on level 0, the
    /// bucket it lands in was empty (the levels below were), so level 0
    /// stays in arming order.
    /// `tests::a_bucket_of_two_pops_its_earliest_timer_first` checks it.
    /// Inlined into its callers, which are out of line themselves.
    #[inline(always)]
    fn pop_earlier_of_two<N: Nodes<Id = I>>(
        &mut self,
        nodes: &mut N,
        level: usize,
        slot: usize,
        start: u64,
        target: u64,
        first: Node<I>,
    ) -> Option<I> {
        let head = self.levels[level].head[slot];
        let tail = first.next;
        let second = nodes.node(tail);
        // Ties go to the older arming (an ordered store), else to the head,
        // where a cascade would put it.
        let second_first = second.deadline < first.deadline
            || (N::ORDERED
                && second.deadline == first.deadline
                && newer::<N>(nodes.seq(head), nodes.seq(tail)));
        let (best, best_node, other, other_node) = if second_first {
            (tail, second, head, first)
        } else {
            (head, first, tail, second)
        };
        if !pops_from_bucket(best_node.deadline, start, level, target) {
            return None;
        }
        self.move_now(best_node.deadline);
        self.empty_bucket(level, slot);
        if level == 1 && other_node.deadline ^ self.now <= SLOT_MASK {
            // From level 1 the other lands on level 0, in the slot of its
            // deadline, a bucket that is empty (level 0 was): filed there
            // directly, without `place`'s level search and tail check.
            let due_slot = (other_node.deadline & SLOT_MASK) as usize;
            debug_assert!(!self.levels[0].is_occupied(due_slot));
            nodes.set_node(
                other,
                Node {
                    deadline: other_node.deadline,
                    prev: I::NIL,
                    next: I::NIL,
                    bucket: due_slot as u16,
                },
            );
            let bucket = &mut self.levels[0];
            bucket.head[due_slot] = other;
            bucket.tail[due_slot] = other;
            bucket.occupied.set(due_slot);
        } else {
            self.place(nodes, other, other_node.deadline, None);
        }
        debug_assert!(!self.levels[0].unsorted.any());
        mark_unlinked(nodes, best, best_node);
        self.earliest.forget_if(best_node.deadline);
        Some(best)
    }

    /// The first non-empty bucket in time order: the due bucket if occupied,
    /// else the lowest level's next occupied bucket. A lower level's next
    /// bucket always starts before any higher level's: it lies inside the
    /// current block of the level above. Level 0's ring (the next block's
    /// entries, behind the cursor) is passed over: callers that can meet
    /// it look at it as well (`ring_first_after`).
    // Always inlined: left to the compiler, it was sometimes called out of
    // line from `pop_due_slow`, and an idle advance (nothing due for an
    // hour) then took about 95 instructions instead of 69 (`benches/wheel.rs`,
    // `advance_idle`, under callgrind).
    #[inline(always)]
    fn next_bucket(&self) -> Option<(usize, usize)> {
        for (level_no, level) in self.levels.iter().enumerate() {
            if !level.occupied.any() {
                continue;
            }
            if level_no > 0 {
                // Nothing at or behind the cursor above level 0: the
                // first occupied bucket is the next (see
                // `next_bucket_above_0`).
                return self.first_above_0(level_no);
            }
            let current = digit(self.now, 0);
            if level.is_occupied(current) {
                return Some((0, current));
            }
            if let Some(slot) = level.next_occupied_after(current) {
                return Some((0, slot));
            }
            // Behind the cursor on level 0: the next block's (the ring),
            // which callers look at first when it matters.
        }
        None
    }

    /// [`next_bucket`](Self::next_bucket) when level 0 is known to be empty
    /// from `now` on: the search starts at level 1.
    ///
    /// Above level 0 no bucket at or behind `now`'s digit is ever occupied:
    /// an entry is filed on the level of the highest digit where its
    /// deadline differs from `now`, so its digit there is greater than
    /// `now`'s; `now` enters a bucket above level 0 only by a pop that
    /// cascades it or takes its only entries (`pop_lone`,
    /// `pop_earlier_of_two`, which re-files the other relative to the new
    /// `now`), and moves past one only after that, since every move stops
    /// at the next occupied bucket's first tick. So a level's next bucket is
    /// its first occupied one, found from the bitmap alone, with no shift
    /// by `now`'s digit (1 % fewer instructions on `examples/fill_expire.rs`
    /// at 1,000 timers, the same time); the debug check below holds every
    /// test to that invariant.
    #[inline(always)]
    fn next_bucket_above_0(&self) -> Option<(usize, usize)> {
        for level_no in 1..LEVELS {
            if self.levels[level_no].occupied.any() {
                return self.first_above_0(level_no);
            }
        }
        None
    }

    /// The first occupied bucket of `level_no` (above 0, occupied), which
    /// is the next in time order (see `next_bucket_above_0`).
    #[inline(always)]
    fn first_above_0(&self, level_no: usize) -> Option<(usize, usize)> {
        let slot = self.levels[level_no].occupied.first_from(0);
        debug_assert!(
            slot.is_some_and(|slot| slot > digit(self.now, level_no)),
            "occupied bucket at or behind the cursor on level {level_no}"
        );
        slot.map(|slot| (level_no, slot))
    }

    /// The first tick covered by `slot` on `level`, in the current block of the
    /// level above.
    #[inline]
    fn bucket_start(&self, level: usize, slot: usize) -> u64 {
        let shift = SLOT_BITS as usize * level;
        let block_bits = shift + SLOT_BITS as usize;
        let block = if block_bits >= 64 {
            0
        } else {
            self.now & (u64::MAX << block_bits)
        };
        block | ((slot as u64) << shift)
    }

    /// Re-places every entry of a higher-level bucket relative to `now`
    /// (which is the bucket's first tick), preserving list order.
    ///
    /// Past its first [`ONE_WAY_FIRST`] entries, the walk goes from both
    /// ends of the list at once. A big bucket's entries are scattered over
    /// memory, and each is a cache miss whose address the entry before it
    /// holds: one walk waits for one miss at a time, two walks (forward by
    /// `next`, backward by `prev`) give the processor two independent misses
    /// to wait for. (At a million pending timers a one-way cascade, waiting
    /// for its misses one at a time, takes most of the wheel's time:
    /// `benches/sim.rs`, the hold model at 1M.) The
    /// front half is placed as the walk goes; the back half after it, first
    /// to last (a big bucket's from the indices kept in `back_half`, with
    /// their loads started ahead, its last entries by their links: see
    /// `cascade_both_ways`): so every target bucket receives the entries in
    /// list order, as a one-way walk would place them (the service's lists,
    /// which keep no arming numbers, rely on that order for same-tick FIFO).
    fn cascade<N: Nodes<Id = I>>(&mut self, nodes: &mut N, level: usize, slot: usize) {
        // No sort here, even of an unsorted bucket: `place` marks each
        // target bucket unsorted when an entry lands behind a newer one, and
        // only a level-0 bucket is sorted, right before it fires. Sorting
        // here puts O(b log b) work over scattered entries into one advance:
        // idle timeouts restarted later pile up in a few level-2 buckets,
        // and a single `advance` would sort a whole one
        // (`examples/wheel_restart_latency.rs` prints the longest advance).
        let mut front = self.levels[level].head[slot];
        let back = self.levels[level].tail[slot];
        // Its entries may go down to level 0, out of the memo's scope.
        self.earliest.set(None);
        self.levels[level].head[slot] = I::NIL;
        self.levels[level].tail[slot] = I::NIL;
        self.levels[level].occupied.clear(slot);
        // The first entries one way: most buckets are short, and a short
        // one is over before a second walk would pay for its bookkeeping
        // (`benches/sim.rs`, the hold model at 1k pending, where a cascade
        // moves a few entries: a two-way walk from the first entry costs
        // more per event than the one-way walk).
        for _ in 0..ONE_WAY_FIRST {
            if front == I::NIL {
                return;
            }
            let node = nodes.node(front);
            self.place(nodes, front, node.deadline, None);
            if front == back {
                return;
            }
            front = node.next;
        }
        self.cascade_both_ways(nodes, front, back);
    }

    /// The rest of a long bucket's [`cascade`](Self::cascade), the list
    /// `front..=back` (not empty), walked from both ends at once: the front
    /// half is placed as the walk goes, the back half after it, first to
    /// last. Out of line: the common short cascade stays small where it is
    /// inlined.
    ///
    /// The back half's last [`BACK_BY_LINKS`] entries are placed by
    /// following their `next` links from the first of them: placing an
    /// entry rewrites only its own links and its target bucket's tail
    /// (an entry placed before, or one of another bucket), so the entries
    /// not placed yet are still linked as they were, up to the bucket's
    /// old tail, whose `next` ends the list. The back walk has just read
    /// them, so following the links waits for no miss, and a bucket of up
    /// to `ONE_WAY_FIRST + 2 * BACK_BY_LINKS` entries keeps no list at all:
    /// pushing every back index and reading it again cost about a third
    /// more per entry than a one-way walk (`examples/fill_expire.rs` at
    /// 1,000 timers, whose level-2 buckets hold about 60, under
    /// callgrind). Only the back entries before those, in a big bucket
    /// whose half no longer fits in cache by the time its turn comes, have
    /// their indices kept in `back_half`, so that their loads can be
    /// started ahead.
    #[inline(never)]
    fn cascade_both_ways<N: Nodes<Id = I>>(&mut self, nodes: &mut N, front: I, back: I) {
        let mut back_half = std::mem::take(&mut self.back_half);
        let mut walk = BothEnds { front, back };
        // The first entry (in list order) of the ones placed by their links.
        let mut by_links = I::NIL;
        let mut back_steps = 0;
        // `BothEnds` reads both nodes before the front entry is placed
        // (placing rewrites its links); back entries stay untouched until
        // the end.
        while let Some(((index, node), back)) = walk.next(nodes) {
            self.place(nodes, index, node.deadline, None);
            if let Some((index, _)) = back {
                if back_steps < BACK_BY_LINKS {
                    back_steps += 1;
                    by_links = index;
                } else {
                    back_half.push(index);
                }
            }
        }
        // The back half was read during the walk, but a big bucket's half
        // no longer fits in cache by now: its indices are known, so the
        // loads are started a few entries ahead, all in flight at once.
        for (place, &index) in back_half.iter().enumerate().rev() {
            if let Some(ahead) = place.checked_sub(PREFETCH_AHEAD) {
                nodes.prefetch(back_half[ahead]);
            }
            let deadline = nodes.node(index).deadline;
            self.place(nodes, index, deadline, None);
        }
        // Then the last ones, by their links (see above).
        let mut index = by_links;
        while index != I::NIL {
            let node = nodes.node(index);
            self.place(nodes, index, node.deadline, None);
            index = node.next;
        }
        back_half.clear();
        // Memory stays proportional to what is armed: a big cascade's
        // scratch is not kept (allocating it again costs little next to
        // the walk that fills it).
        if back_half.capacity() <= 256 {
            self.back_half = back_half;
        }
    }

    /// Puts a bucket's list in arming order (ascending sequence number) and
    /// clears its unsorted bit: a bottom-up merge sort of the linked list
    /// itself, O(b log b) for `b` entries, stable, no allocation.
    fn sort_bucket<N: Nodes<Id = I>>(&mut self, nodes: &mut N, level: usize, slot: usize) {
        let next = |nodes: &N, index: I| nodes.node(index).next;
        let mut list = self.levels[level].head[slot];
        let mut width = 1usize;
        loop {
            // One pass: merge neighbouring runs of `width` entries.
            let mut left = list;
            let mut tail = I::NIL;
            let mut merges = 0;
            list = I::NIL;
            while left != I::NIL {
                merges += 1;
                let mut right = left;
                let mut left_len = 0;
                while left_len < width && right != I::NIL {
                    left_len += 1;
                    right = next(nodes, right);
                }
                let mut right_len = width;
                while left_len > 0 || (right_len > 0 && right != I::NIL) {
                    let take_left = right_len == 0
                        || right == I::NIL
                        || (left_len > 0 && !newer::<N>(nodes.seq(left), nodes.seq(right)));
                    let chosen = if take_left {
                        let chosen = left;
                        left = next(nodes, left);
                        left_len -= 1;
                        chosen
                    } else {
                        let chosen = right;
                        right = next(nodes, right);
                        right_len -= 1;
                        chosen
                    };
                    if tail == I::NIL {
                        list = chosen;
                    } else {
                        nodes.set_next(tail, chosen);
                    }
                    tail = chosen;
                }
                left = right;
            }
            if tail != I::NIL {
                nodes.set_next(tail, I::NIL);
            }
            if merges <= 1 {
                break;
            }
            width *= 2;
        }
        // Rebuild the back links and the tail.
        let mut prev = I::NIL;
        let mut index = list;
        while index != I::NIL {
            nodes.set_prev(index, prev);
            prev = index;
            index = next(nodes, index);
        }
        self.levels[level].head[slot] = list;
        self.levels[level].tail[slot] = prev;
        self.levels[level].unsorted.clear(slot);
    }
}

/// The earliest deadline in the list `head..=tail` (not empty), read from
/// both ends at once: two independent cache misses in flight, as in
/// [`Hierarchy::cascade`] (a minimum does not care about order).
fn min_deadline<N: Nodes>(nodes: &N, front: N::Id, back: N::Id) -> u64 {
    let mut earliest = u64::MAX;
    let mut walk = BothEnds { front, back };
    while let Some(((_, node), back)) = walk.next(nodes) {
        earliest = earliest.min(node.deadline);
        if let Some((_, node)) = back {
            earliest = earliest.min(node.deadline);
        }
    }
    earliest
}

/// An entry a [`BothEnds`] walk reached, with its node as read then.
type Visit<I> = (I, Node<I>);

/// A walk of the list `front..=back` (not empty) from both ends at once,
/// for [`Hierarchy::cascade`] and [`min_deadline`]: each step reads the next
/// entry from the front and, unless that was the last one, the next from
/// the back, two loads that do not wait for each other.
struct BothEnds<I> {
    front: I,
    back: I,
}

impl<I: EntryId> BothEnds<I> {
    /// The next front entry and (unless the two ends have met on it) the
    /// next back entry, each with its node. Both nodes, and the links the
    /// walk goes on by, are read before the caller may rewrite the entries.
    #[inline(always)]
    fn next<N: Nodes<Id = I>>(&mut self, nodes: &N) -> Option<(Visit<I>, Option<Visit<I>>)> {
        let front = self.front;
        if front == I::NIL {
            return None;
        }
        let front_node = nodes.node(front);
        if front == self.back {
            self.front = I::NIL;
            return Some(((front, front_node), None));
        }
        let back = self.back;
        let back_node = nodes.node(back);
        if front_node.next == back {
            self.front = I::NIL;
        } else {
            self.front = front_node.next;
            self.back = back_node.prev;
        }
        Some(((front, front_node), Some((back, back_node))))
    }
}

/// The base-[`SLOTS`] digit of `tick` at `level`.
#[inline]
fn digit(tick: u64, level: usize) -> usize {
    ((tick >> (SLOT_BITS as usize * level)) & SLOT_MASK) as usize
}

/// The bucket (`level * SLOTS + slot`) for a timer due at `deadline >= now`:
/// the level is the highest base-[`SLOTS`] digit where the two differ.
#[inline]
fn bucket_index(now: u64, deadline: u64) -> u16 {
    let (level, slot) = level_and_slot(now, deadline);
    (level * SLOTS + slot) as u16
}

/// [`bucket_index`] as its level and slot.
#[inline(always)]
fn level_and_slot(now: u64, deadline: u64) -> (usize, usize) {
    let differing = (now ^ deadline) | SLOT_MASK;
    let highest_bit = 63 - differing.leading_zeros() as usize;
    let level = highest_bit / SLOT_BITS as usize;
    (level, digit(deadline, level))
}

/// The last tick of the bucket of `level` that starts at tick `start`.
#[inline]
fn bucket_last(start: u64, level: usize) -> u64 {
    start | ((1u64 << (SLOT_BITS as usize * level)) - 1)
}

/// Whether an entry due at `deadline` in the earliest bucket (on `level`
/// above 0, first tick `start`) may be popped straight from it by a poll
/// to `target` (see `Hierarchy::pop_alone`): it is due by then, and it
/// lies inside the bucket (an entry moved later without relinking may lie
/// past it, and must cascade first).
#[inline(always)]
fn pops_from_bucket(deadline: u64, start: u64, level: usize, target: u64) -> bool {
    deadline <= target && deadline <= bucket_last(start, level)
}

/// Writes entry `index` (whose node was `node`) back as in no bucket (see
/// [`Nodes::mark_unlinked`]).
#[inline(always)]
fn mark_unlinked<N: Nodes>(nodes: &mut N, index: N::Id, node: Node<N::Id>) {
    nodes.mark_unlinked(index, node);
}

#[inline]
fn split_bucket(bucket: u16) -> (usize, usize) {
    (bucket as usize / SLOTS, bucket as usize % SLOTS)
}

#[cfg(test)]
mod seq_wrap_tests {
    use super::super::node::NIL;
    use super::*;

    /// A store that keeps 32 bits of arming number, as the service's slots do.
    struct Narrow(Vec<(Node, u32)>);

    impl Nodes for Narrow {
        type Id = u32;
        const ORDERED: bool = true;
        const SEQ_WRAPS: bool = true;

        fn node(&self, index: u32) -> Node {
            self.0[index as usize].0
        }
        fn set_node(&mut self, index: u32, node: Node) {
            self.0[index as usize].0 = node;
        }
        fn set_prev(&mut self, index: u32, prev: u32) {
            self.0[index as usize].0.prev = prev;
        }
        fn set_next(&mut self, index: u32, next: u32) {
            self.0[index as usize].0.next = next;
        }
        fn seq(&self, index: u32) -> u64 {
            u64::from(self.0[index as usize].1)
        }
        fn set_seq(&mut self, index: u32, seq: u64) {
            self.0[index as usize].1 = seq as u32;
        }
    }

    /// Arms, moves (later, so above level 0 they stay in place) and fires
    /// timers, starting at arming number `first_seq`; half-way, with `jump`,
    /// the numbers leap ahead by 2^31 + 5 (as 2^31 armings of other timers
    /// would move them) and, with `renumber`, the jump lands on a
    /// renumbering. The timers of each tick must fire in the order of their
    /// last arming.
    fn run(first_seq: u64, jump: bool, renumber: bool) {
        let timers = 400u32;
        let mut nodes = Narrow(
            (0..timers)
                .map(|_| {
                    (
                        Node {
                            deadline: 0,
                            prev: NIL,
                            next: NIL,
                            bucket: UNLINKED,
                        },
                        0,
                    )
                })
                .collect(),
        );
        let mut wheel = Hierarchy::starting_at(0);
        wheel.set_seq_for_test(first_seq, u64::MAX);
        let mut rng = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        // Per timer: (deadline, the arming event's place in real order).
        let mut armed: Vec<Option<(u64, u64)>> = vec![None; timers as usize];
        // Fewer under miri (the same paths, at a fraction of the time).
        let steps = if cfg!(miri) { 600 } else { 3000u64 };
        for (event, step) in (0..steps).enumerate() {
            if jump && step == steps / 2 {
                let leap = wheel.next_seq_for_test() + (1 << 31) + 5;
                wheel.set_seq_for_test(leap, if renumber { leap } else { u64::MAX });
            }
            let index = (next() % u64::from(timers)) as u32;
            // Few distinct deadlines, most above level 0, so that ticks
            // collect timers armed far apart and cascaded out of order.
            let deadline = 100 + (next() % 4) * 1000 + next() % 2;
            match armed[index as usize] {
                None => wheel.link(&mut nodes, index, deadline),
                Some((old, _)) if deadline >= old || next() % 2 == 0 => {
                    wheel.relink(&mut nodes, index, deadline)
                }
                Some(_) => {
                    wheel.unlink(&mut nodes, index);
                    wheel.link(&mut nodes, index, deadline);
                }
            }
            armed[index as usize] = Some((deadline, event as u64));
        }
        let mut expected: Vec<(u64, u64, u32)> = armed
            .iter()
            .enumerate()
            .filter_map(|(i, a)| a.map(|(d, e)| (d, e, i as u32)))
            .collect();
        expected.sort_unstable();
        let mut fired = Vec::new();
        while let Some(index) = wheel.pop_due(&mut nodes, u64::MAX - 1) {
            fired.push((wheel.now(), index));
        }
        let expected: Vec<(u64, u32)> = expected.iter().map(|&(d, _, i)| (d, i)).collect();
        assert_eq!(fired, expected);
    }

    /// A renumbering in the middle of a pass moves the pass's fence with
    /// the numbers: what was armed before the pass reached `now` still fires
    /// in it, what was armed for `now` during it waits for the next pass.
    /// Fails if `renumber` leaves the fence where it was (B, armed before
    /// the pass, would then wait too).
    #[test]
    fn a_renumbering_during_a_pass_keeps_its_fence() {
        let mut nodes = Narrow(
            (0..4)
                .map(|_| {
                    let node = Node {
                        deadline: 0,
                        prev: NIL,
                        next: NIL,
                        bucket: UNLINKED,
                    };
                    (node, 0)
                })
                .collect(),
        );
        let (a, b, c, d) = (0, 1, 2, 3);
        let mut wheel = Hierarchy::starting_at(0);
        let first = (1u64 << 32) - 2;
        // A and B take `first` and `first + 1`; the renumbering comes due
        // at D's arming, inside the pass.
        wheel.set_seq_for_test(first, first + 3);
        wheel.link(&mut nodes, a, 5);
        wheel.link(&mut nodes, b, 5);
        wheel.begin_pass();
        assert_eq!(wheel.pop_due(&mut nodes, 10), Some(a));
        // As A's callback would: two timers armed for the tick reached.
        wheel.link(&mut nodes, c, 5);
        wheel.link(&mut nodes, d, 5);
        assert_eq!(
            wheel.pop_due(&mut nodes, 10),
            Some(b),
            "B was armed before the pass"
        );
        assert_eq!(
            wheel.pop_due(&mut nodes, 10),
            None,
            "C and D wait for the next pass"
        );
        assert_eq!(wheel.now(), 5);
        wheel.end_pass();
        wheel.begin_pass();
        assert_eq!(wheel.pop_due(&mut nodes, 10), Some(c));
        assert_eq!(wheel.pop_due(&mut nodes, 10), Some(d));
        assert_eq!(wheel.pop_due(&mut nodes, 10), None);
        wheel.end_pass();
    }

    /// The numbers wrap from 2^32 - 1 to 0 half-way through the run. Fails
    /// when numbers are compared with a plain `<` (the wrapped ones then
    /// sort first).
    #[test]
    fn wrapping_arming_numbers_keep_fifo_across_the_wrap() {
        let steps = if cfg!(miri) { 600 } else { 3000 };
        run((1 << 32) - steps / 2, false, false);
    }

    /// Entries armed before and after the leap would be 2^31 apart and
    /// compare the wrong way round; the renumbering due at the leap closes
    /// the gap first.
    #[test]
    fn renumbering_keeps_fifo_when_numbers_would_be_2_31_apart() {
        run(1000, true, true);
    }

    /// The same leap without the renumbering does break the order: the case
    /// the renumbering exists for (and a check that `run` can fail).
    #[test]
    fn without_renumbering_a_2_31_gap_breaks_fifo() {
        let outcome = std::panic::catch_unwind(|| run(1000, true, false));
        assert!(outcome.is_err(), "a 2^31 gap went unnoticed");
    }
}
