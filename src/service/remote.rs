//! A shard's remote queue: how threads that do not own a shard hand its
//! owner their STARTs, STOPs and RESTARTs, with no message node and no
//! allocation of its own. What is queued is a slot.
//!
//! # What is queued
//!
//! Every operation is first decided, as always, by one CAS on the timer's
//! state word (`state.rs`). When the owner must then act on it, the thread
//! queues a slot on this queue, whose word holds the first slot's index and
//! how many are queued; a slot's link is its `queue_next`. `QUEUED` in a
//! slot's state word says it is on the queue: only the thread whose CAS or
//! store set `QUEUED` pushes it, and only the owner clears it, after it has
//! taken the slot off. Three kinds of entry:
//!
//! * **A START**: the new timer's own slot. The starting thread allocated
//!   it, so it alone may write its owner-side fields until it publishes
//!   it: it writes the callback, the deadline and the arming (`seq` and
//!   rounding, in `owned.linked`), then stores the word `ARMED | HANDLE |
//!   QUEUED` (release) and pushes the slot. The owner links an unlinked,
//!   armed slot whose recorded arming is the word's current one.
//! * **A STOP** (or cancel, or the drop of a handle): the stopped timer's
//!   slot. The CAS that disarms an `ARMED` word, or gives up the handle of
//!   a fired one, sets `QUEUED` in the same CAS unless it was set already.
//!   The owner unlinks the entry and frees the slot if nothing else holds it.
//!   A thread that holds a shard of its own pushes the slots of the timers
//!   it cancels (STOP and release: nobody else touches such a slot again)
//!   in batches, with one CAS ([`RemoteQueue::push_stops`],
//!   `shard/stops.rs`).
//! * **A RESTART**: a *proxy*, a spare slot from the arena that carries the
//!   restart as a message (the target's index and generation, the arming's
//!   `seq`, deadline and rounding; see [`write_proxy`]). A restart moves a
//!   timer that may be linked, whose owner-side fields only the owner may
//!   touch, so the deadline travels in a slot of its own. A proxy's word
//!   is `FREE | QUEUED`, which no timer's word ever is. The owner applies
//!   the restart if that arming is still the target's current one, and
//!   keeps the proxy as one of its free slots.
//!
//! Later operations on a queued slot push nothing more (a STOP after a
//! START, a release after a STOP): the owner settles each slot on its word
//! as it finds it then, which covers them all. A RESTART always sends its
//! proxy, so that it takes its place among the others (below).
//!
//! # Why the owner sees what it needs
//!
//! * **Fields.** A pusher writes the slot (and for a START its owner-side
//!   fields) and its link before its CAS on the queue word (SeqCst, so
//!   release); the owner takes the whole list with one `swap` (SeqCst, so
//!   acquire) and reads each slot's link before it clears `QUEUED`, after
//!   which another thread may queue the slot again and rewrite the link.
//! * **Memory.** A `QUEUED` slot is never freed
//!   ([`Word::is_reclaimable`](super::state::Word)), so a queued index names
//!   the same slot until the owner takes it, and a slot is queued at most
//!   once: for STARTs and STOPs the queue holds at most the live slots.
//!   (Proxies are one per remote RESTART waiting for the owner; the
//!   producers' backpressure bounds them, `Inner::queue`.)
//! * **Order.** One queue carries every kind, so the owner applies them in
//!   the order of their pushes (it reverses the list it takes): an arming
//!   that happened before another on a different thread is linked first
//!   and fires first among the timers due on one tick (CONTRACT 5). Before
//!   the owner links its own RESTART it applies what is queued
//!   (`Shard::catch_up`); before its own START, only a queue that holds an
//!   arming or more stops than the reclaim bound
//!   (`Shard::catch_up_before_start`). Only armings need that order: a push
//!   of one sets [`ARMINGS`] in the queue's word in the same CAS, and a list
//!   taken without it (stops and releases alone, each settling its own slot)
//!   is applied newest first, with no walk to reverse it. A revived START
//!   pushes nothing, but its slot was queued by its START, so the list that
//!   holds it is in push order; the entry it must follow may be in a later
//!   list without armings, where nothing else it must follow is.
//! * **ABA.** The owner only ever takes the whole list, so a slot is never
//!   popped while a pusher still reads the head.
//! * **Waking.** The push's CAS returns how many entries are queued. A
//!   pusher then claims the wake of a sleeping owner (`Shard::claim_wake`)
//!   when its arming is due before the owner's sleep ends, when the queue
//!   has grown past a bound, or, for a STOP, only when the queued entries
//!   pass the reclaim bound (`Shard::push_stop`): so memory stays within
//!   CONTRACT 13 and a sleep is interrupted at most once (CONTRACT 21). The
//!   same pusher records by when the owner needs its entry beside the
//!   queue's word ([`RemoteQueue::needs_owner_by`]). The owner, before it
//!   sleeps, stores its sleep and then loads this word and that need
//!   (`Shard::publish_sleep`): a store-then-load (Dekker) handshake, all
//!   SeqCst, so either the owner sees the entry's need or the pusher sees
//!   the sleep. Entries due after the sleep ends do not keep the owner
//!   awake, nor does the owner's poll wait for what is pushed while it
//!   runs: it takes the queue in at its start, and the next poll takes the
//!   rest.
//!
//! loom: `remote_cancel_vs_fire_vs_take`, `remote_start_vs_stop_vs_take`,
//! the `sleeping_owner_*` models in `tests/loom_service.rs`.

use std::ptr::NonNull;

use crossbeam_utils::CachePadded;

pub(crate) use super::arena::NIL;
use super::arena::{Arena, Slot};
use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// What the owner is asked to do about slot `(index, gen)`: the restart a
/// proxy carries, or (built by the thread that made it) an operation a
/// helper applies in a lent shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Message {
    pub(crate) index: u32,
    pub(crate) gen: u32,
    /// `Some`: an arming of the slot to link. `None`: the slot was stopped
    /// or released; unlink or free it.
    pub(crate) arm: Option<Arm>,
}

impl Message {
    /// The START (or restart) of slot `index` whose published word is
    /// `armed`, due at `deadline`.
    pub(crate) fn armed(
        index: u32,
        armed: super::state::Word,
        rounding: u8,
        deadline: u64,
    ) -> Self {
        Message {
            index,
            gen: armed.gen(),
            arm: Some(Arm {
                seq: armed.seq(),
                rounding,
                deadline,
            }),
        }
    }
}

/// An arming of a slot, as its owner links it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Arm {
    /// The arming's `seq` (the owner links only the slot's newest).
    pub(crate) seq: u32,
    /// How far `deadline` lies after the deadline asked for, in 256ths of a
    /// tick (delays are rounded up to ticks): lateness counts from the
    /// deadline asked for, not from the tick (`stats.rs`).
    pub(crate) rounding: u8,
    /// The deadline tick.
    pub(crate) deadline: u64,
}

impl Arm {
    /// Where a link files this arming when the wheel has processed up to
    /// tick `now`: its deadline and rounding, or, for a deadline that has
    /// passed, `now` with no rounding (lateness then counts from the tick
    /// the timer is filed at).
    #[inline(always)]
    pub(crate) fn filed_at(self, now: u64) -> (u64, u8) {
        if self.deadline < now {
            (now, 0)
        } else {
            (self.deadline, self.rounding)
        }
    }
}

/// Remotely stopped timers a remote queue may hold, beyond a third of what
/// its owner's wheel holds, before a sleeping owner is woken to reclaim
/// them: see [`RemoteQueue::reclaim_due`]. Under loom and shuttle every
/// remote stop makes reclaim due, so that the models reach the wake.
#[cfg(not(any(loom, shuttle)))]
const RECLAIM_MIN: u32 = 64;
#[cfg(any(loom, shuttle))]
const RECLAIM_MIN: u32 = 0;

/// The queue's word when it is empty: no head, a count of 0, no arming.
const EMPTY: u64 = NIL as u64;

/// Set in the queue's word by the push of an arming (a START's slot or a
/// RESTART's proxy) and kept by every push after it until the owner takes
/// the list: only such a list needs applying in push order (see "Order" in
/// the module docs). A list of stops and releases alone is applied as it
/// comes, newest first, with no walk to reverse it.
const ARMINGS: u64 = 1 << 63;

/// The most a word counts: the count stops short of [`ARMINGS`].
const COUNT_MAX: u32 = (1 << 31) - 1;

/// The slots other threads handed a shard's owner. One word: the first
/// slot's index in the low 32 bits, how many were pushed since the owner
/// last took the list in the high 32, so a push reads the count from its
/// own CAS.
pub(crate) struct RemoteQueue {
    line: CachePadded<Words>,
    hints: Hints,
}

/// How many of the latest pushes' slot indices a queue keeps for its owner
/// to prefetch.
#[cfg(not(any(loom, shuttle, miri)))]
const HINTS: usize = 4096;

/// How many slots ahead of its walk the owner keeps loading: enough misses
/// in flight to cover one's latency, few enough that the slots stay in the
/// first-level cache until the walk gets there.
const AHEAD: u32 = 32;

/// The slot indices of the latest `HINTS` pushes, by push count: a pusher
/// stores its index at its count (mod `HINTS`) after its push. Only a
/// hint: as the owner walks the list it took ([`RemoteQueue::take`]), which
/// must read each slot's link before it knows the next slot, it prefetches
/// the slots `AHEAD` pushes further on, so that it finds them on their way
/// in rather than waiting for one cache miss after another (the walk was
/// most of a poll's time in `service_vs_tokio/cross_stop`; `owner_ops
/// cross-stop` prints the poll time per stop). A hint that is stale or not
/// yet written prefetches some other slot of the arena, or none: nothing
/// reads through a hint. Left out of the loom and shuttle models, which it
/// cannot affect, and of miri builds, where a prefetch is a no-op.
#[cfg(not(any(loom, shuttle, miri)))]
struct Hints(CachePadded<[std::sync::atomic::AtomicU32; HINTS]>);
#[cfg(any(loom, shuttle, miri))]
struct Hints;

#[cfg(not(any(loom, shuttle, miri)))]
impl Hints {
    fn new() -> Self {
        Hints(CachePadded::new(std::array::from_fn(|_| {
            std::sync::atomic::AtomicU32::new(NIL)
        })))
    }

    /// The `queued`th push since the last take was slot `index`.
    #[inline]
    fn record(&self, queued: u32, index: u32) {
        self.0[queued as usize % HINTS].store(index, std::sync::atomic::Ordering::Relaxed);
    }

    /// Starts loading (for writing) the slot of the push `back` before the
    /// newest of the `queued` taken: the owner's walk meets them newest
    /// first. Nothing for a push the ring no longer (or never) held.
    #[inline]
    fn prefetch(&self, arena: &Arena, queued: u32, back: u32) {
        if back >= queued || back as usize >= HINTS {
            return;
        }
        let index =
            self.0[(queued - back) as usize % HINTS].load(std::sync::atomic::Ordering::Relaxed);
        if let Some(slot) = arena.get(index) {
            crate::wheel::prefetch_for_write(slot);
        }
    }
}

#[cfg(any(loom, shuttle, miri))]
impl Hints {
    fn new() -> Self {
        Hints
    }
    fn record(&self, _queued: u32, _index: u32) {}
    fn prefetch(&self, _arena: &Arena, _queued: u32, _back: u32) {}
}

/// The queue's words share one cache line: a pusher writes the first two
/// and a stopper reads the third, all on the line its push brought to its
/// core.
struct Words {
    word: AtomicU64,
    /// The earliest tick by which some entry queued since the owner last
    /// took the list needs the owner (`u64::MAX`: none does; 0: now). An
    /// entry that needs the owner only some time after its sleep ends (a
    /// START due in an hour, a STOP before the reclaim bound) does not stop
    /// it from sleeping: see [`needed_before`](RemoteQueue::needed_before).
    need: AtomicU64,
    /// How many queued entries make reclaim due (see
    /// [`reclaim_due`](RemoteQueue::reclaim_due)), as of the owner's last
    /// poll. Here rather than beside the owner's counters, which it writes
    /// on every START and free: a stopper reading it there moved that line
    /// to its core and back on every remote STOP.
    reclaim_above: AtomicU32,
}

const fn head(word: u64) -> u32 {
    word as u32
}

const fn count(word: u64) -> u32 {
    ((word & !ARMINGS) >> 32) as u32
}

impl RemoteQueue {
    pub(crate) fn new() -> Self {
        RemoteQueue {
            line: CachePadded::new(Words {
                word: AtomicU64::new(EMPTY),
                need: AtomicU64::new(u64::MAX),
                reclaim_above: AtomicU32::new(RECLAIM_MIN),
            }),
            hints: Hints::new(),
        }
    }

    /// Pushes slot `index` (`slot`), whose `QUEUED` bit this thread has just
    /// set; `arming`: a START's slot or a RESTART's proxy (see [`ARMINGS`]).
    /// Returns how many slots are queued now, this one included.
    pub(crate) fn push(&self, index: u32, slot: &Slot, arming: bool) -> u32 {
        let flag = if arming { ARMINGS } else { 0 };
        let queued = self
            .push_list(index, slot, 1, flag)
            .saturating_add(1)
            .min(COUNT_MAX);
        self.hints.record(queued, index);
        queued
    }

    /// Pushes the stopped slots `batch` (index and slot, in the order they
    /// were stopped), whose `QUEUED` bits this thread's CASes set, with one
    /// CAS (a thread that holds a shard of its own batches its remote
    /// STOPs, `shard/stops.rs`). The last of `batch` becomes the head, as
    /// if each had been pushed in turn. Returns how many slots are queued
    /// now, these included.
    ///
    /// # Safety
    /// Every pointer in `batch` is the address of its index's slot in the
    /// service's arena.
    pub(crate) unsafe fn push_stops(&self, batch: &[(u32, NonNull<Slot>)]) -> u32 {
        let (Some(&(newest, _)), Some(&(_, oldest))) = (batch.last(), batch.first()) else {
            return self.len();
        };
        // SAFETY: the caller's contract (here and below).
        let slot = |p: NonNull<Slot>| unsafe { p.as_ref() };
        // The links inside the batch are this thread's to write (it set
        // every `QUEUED`); only the oldest's link depends on the head.
        for pair in batch.windows(2) {
            slot(pair[1].1)
                .queue_next
                .store(pair[0].0, Ordering::Relaxed);
        }
        let n = batch.len() as u32;
        let first = self.push_list(newest, slot(oldest), n, 0);
        for (i, &(index, _)) in batch.iter().enumerate() {
            self.hints.record(first.saturating_add(i as u32 + 1), index);
        }
        first.saturating_add(n).min(COUNT_MAX)
    }

    /// The CAS of a push: `n` slots linked from `newest` to `oldest`, whose
    /// link this sets to the old head, go on the queue, with `flag`
    /// ([`ARMINGS`] or 0). Returns how many were queued before them.
    #[inline(always)]
    fn push_list(&self, newest: u32, oldest: &Slot, n: u32, flag: u64) -> u32 {
        let mut old = self.line.word.load(Ordering::Relaxed);
        loop {
            oldest.queue_next.store(head(old), Ordering::Relaxed);
            let queued = count(old).saturating_add(n).min(COUNT_MAX);
            let new = (u64::from(queued) << 32) | u64::from(newest) | (old & ARMINGS) | flag;
            // SeqCst: release for the links and the slots (the owner takes
            // the list with a SeqCst swap), and the store half of the
            // handshake with `Shard::publish_sleep`.
            match self.line.word.compare_exchange_weak(
                old,
                new,
                Ordering::SeqCst,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    crate::sync::handshake_fence();
                    return count(old);
                }
                Err(actual) => old = actual,
            }
        }
    }

    /// Owner side (at the end of a poll, or of a helper's operation): its
    /// wheel holds `linked` entries.
    ///
    /// A lower bound is a Dekker handshake with the stoppers: the owner
    /// stores it and then reads how many are queued (`len`, in
    /// `Shard::next_deadline`); a stopper pushes and then reads the bound
    /// (`reclaim_due`). A stop judged by the older, higher bound neither
    /// wakes the owner nor asks it to stay up, so one side must see the
    /// other's store: SeqCst on all four accesses (and under loom, which
    /// models SeqCst accesses as AcqRel, the SeqCst fences of
    /// `handshake_fence`). With a Relaxed store here the owner's load may
    /// pass it (on x86 too) and both miss: loom
    /// `sleeping_owner_vs_stop_judged_by_an_older_bound` deadlocks. A
    /// bound that stays or rises needs none of that (only the owner writes
    /// it, and a stopper that reads the older, lower one wakes it early at
    /// worst), which keeps the xchg off most polls.
    pub(crate) fn set_linked(&self, linked: usize) {
        let above = (u64::from(RECLAIM_MIN) + linked as u64 / 3).min(u64::from(u32::MAX)) as u32;
        let bound = &self.line.reclaim_above;
        if above < bound.load(Ordering::Relaxed) {
            bound.store(above, Ordering::SeqCst);
            crate::sync::handshake_fence();
        } else {
            bound.store(above, Ordering::Relaxed);
        }
    }

    /// Whether `queued` stopped timers waiting on this queue call for their
    /// owner now: past a third of the entries its wheel held at its last
    /// poll, plus `RECLAIM_MIN`. That keeps the stopped ones at most half
    /// the live ones (plus `1.5 * RECLAIM_MIN`) while the owner sleeps, so
    /// slots stay within 1.5 times the armed timers plus a constant per
    /// shard (CONTRACT 13).
    ///
    /// A stopper calls this after its push: SeqCst, and the fence, for the
    /// handshake with a falling bound (see [`set_linked`](Self::set_linked)).
    /// loom does not catch a Relaxed load here (its SeqCst push acts as a
    /// fence in the model), but the language's memory model and AArch64
    /// (a plain load may pass a store-release) do not promise that.
    #[inline]
    pub(crate) fn reclaim_due(&self, queued: u32) -> bool {
        crate::sync::handshake_fence();
        queued > self.line.reclaim_above.load(Ordering::SeqCst)
    }

    /// Whether the owner must take the queue in before it links its own
    /// START: when it holds an arming (which the owner's must follow,
    /// CONTRACT 5), or more stopped timers than the reclaim bound (so that
    /// an owner that starts timers without polling still reclaims them,
    /// CONTRACT 13). A few stops alone wait for the owner's next poll,
    /// which takes them in with one walk: a START that took them in went
    /// to the stopper's core for each of their slots, and that was the
    /// tail of a START beside remote stops (`service_vs_tokio -- latency`,
    /// `cross_stop` at 2 threads: p99 0.21 µs, p50 0.05).
    #[inline]
    pub(crate) fn owner_start_must_take_in(&self) -> bool {
        let word = self.line.word.load(Ordering::SeqCst);
        word != EMPTY
            && (word & ARMINGS != 0
                || count(word) > self.line.reclaim_above.load(Ordering::Relaxed))
    }

    /// How many slots are queued.
    #[inline]
    pub(crate) fn len(&self) -> u32 {
        count(self.line.word.load(Ordering::SeqCst))
    }

    /// `true` when nothing is queued (the load half of the owner's
    /// handshake, `Shard::publish_sleep`).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.line.word.load(Ordering::SeqCst) == EMPTY
    }

    /// A pusher, after its entry is on the queue (or a revived START, after
    /// its CAS): the owner must take the entry in by tick `tick`, before it
    /// next goes to sleep past it. Then the pusher claims the wake of an
    /// owner that sleeps already (`Shard::claim_wake`).
    ///
    /// # Why no entry is slept past
    ///
    /// The owner stores its sleep, then loads the queue's word and, if an
    /// entry is queued, this need (`Shard::publish_sleep`); the pusher has
    /// pushed, then records its need here, then loads the sleep. All
    /// SeqCst. If the owner's load of the need does not see this record, it
    /// came before it in the single order of SeqCst accesses, and so did
    /// the owner's store of its sleep: the pusher's load of the sleep then
    /// sees that sleep and claims its wake if it ends too late. If the
    /// owner sees the record, it does not sleep past `tick`. The owner
    /// resets the need before it takes the list (`take`), so a record made
    /// after the reset belongs to an entry pushed after the take (or is
    /// spare: one more poll). loom:
    /// `sleeping_owner_sleeps_past_a_later_start_not_an_earlier_one`.
    ///
    /// A need already at or before `tick` is not recorded again (the
    /// locked RMW it saves was a third of a remote STOP's push past the
    /// reclaim bound, `examples/owner_ops.rs cross-stop` under `perf`). That
    /// load reads the last record before it in the SeqCst order: if that is
    /// older than the owner's next reset, this push came before the take
    /// that follows the reset, which takes the entry in; if it is newer, the
    /// owner sees it (or a later reset, whose take again follows this push)
    /// before it sleeps. Skipping a record because some need is recorded,
    /// however late, loses the wakeup: the loom model above fails then.
    pub(crate) fn needs_owner_by(&self, tick: u64) {
        if self.line.need.load(Ordering::SeqCst) <= tick {
            return;
        }
        self.line.need.fetch_min(tick, Ordering::SeqCst);
        crate::sync::handshake_fence();
    }

    /// The owner, after storing the tick it will sleep until (`until`):
    /// must it stay awake for a queued entry? Only if one is queued and
    /// some queued entry needs it before `until` (see `needs_owner_by`).
    #[inline]
    pub(crate) fn needed_before(&self, until: u64) -> bool {
        !self.is_empty() && self.line.need.load(Ordering::SeqCst) < until
    }

    /// The slot pushed last, or [`NIL`] (see [`REVIVE_AFTER_BATCH`]).
    #[inline]
    pub(crate) fn newest(&self) -> u32 {
        head(self.line.word.load(Ordering::SeqCst))
    }

    /// Takes every queued slot (see [`Taken`]); each slot's `queue_next`
    /// leads to the next. Owner side. Costs one load when the queue is
    /// empty.
    pub(crate) fn take(&self, arena: &Arena) -> Taken {
        if self.line.word.load(Ordering::Relaxed) == EMPTY {
            return Taken::NONE;
        }
        // SeqCst: acquire for the links and slots, and every access of the
        // sleep handshake SeqCst: miri implements the older C++11 SeqCst
        // rule, under which a SeqCst load may read from a non-SeqCst RMW in
        // ways Rust's (C++20) model forbids, and then reports a lost wakeup
        // that cannot happen. x86 and AArch64 emit the same instruction for
        // both orderings of an RMW.
        // The need of what is queued now is this take's; what is pushed
        // from here on records its own (`needs_owner_by`).
        self.line.need.store(u64::MAX, Ordering::SeqCst);
        let taken = self.line.word.swap(EMPTY, Ordering::SeqCst);
        let queued = count(taken);
        for back in 0..AHEAD {
            self.hints.prefetch(arena, queued, back);
        }
        let mut index = head(taken);
        if taken & ARMINGS == 0 {
            // Stops and releases alone: each settles its own slot, and
            // their order decides nothing. The owner's walk prefetches as
            // it goes (`prefetch_ahead`).
            return Taken {
                first: index,
                last: NIL,
                newest_first: Some(queued),
            };
        }
        let last = index;
        // Reverse into push order. The links are ours: every slot on the
        // list is `QUEUED`, and only its taker clears that.
        let mut reversed = NIL;
        let mut back = AHEAD;
        while index != NIL {
            self.hints.prefetch(arena, queued, back);
            back = back.saturating_add(1);
            // SAFETY: a queued index names an allocated slot (module docs).
            let slot = unsafe { arena.get_allocated(index) };
            let next = slot.queue_next.load(Ordering::Relaxed);
            slot.queue_next.store(reversed, Ordering::Relaxed);
            reversed = index;
            index = next;
        }
        Taken {
            first: reversed,
            last,
            newest_first: None,
        }
    }

    /// The owner's walk of a list taken newest first, at its `back`th
    /// entry: starts loading the slot `AHEAD` pushes further on (see
    /// [`Taken::newest_first`]).
    #[inline]
    pub(crate) fn prefetch_ahead(&self, arena: &Arena, queued: u32, back: u32) {
        self.hints
            .prefetch(arena, queued, back.saturating_add(AHEAD));
    }
}

/// What [`RemoteQueue::take`] took: the list's `first` slot and its `last`
/// ([`NIL`] for both when nothing was queued).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Taken {
    pub(crate) first: u32,
    /// The last slot, for a list in push order; [`NIL`] for a list taken
    /// newest first (no revived START waits on such a list: a revivable
    /// slot was queued by its START, whose list is in push order).
    pub(crate) last: u32,
    /// `None`: the list is in push order (it holds an arming; walked once
    /// already to reverse it, so its slots are on their way in). `Some(n)`:
    /// stops and releases alone, `n` of them, newest first and not walked
    /// yet.
    pub(crate) newest_first: Option<u32>,
}

impl Taken {
    const NONE: Taken = Taken {
        first: NIL,
        last: NIL,
        newest_first: None,
    };
}

/// A revived START's `owned.prev` when the queue was empty as it was
/// revived: its owner had taken the list holding it; it goes after the
/// last slot of that list. See [`Inner::revive`](super::Inner).
pub(crate) const REVIVE_AFTER_BATCH: u32 = NIL - 1;

/// Writes `message` (a RESTART: `arm` is `Some`) into `proxy`, a free slot
/// this thread has just taken from the arena, and marks it a queued proxy
/// (`FREE | QUEUED`, its generation kept). The caller pushes it next.
///
/// Where it goes: the deadline and arming where a START keeps its own
/// (`owned.deadline`, `owned.linked`), the target's index in the backward
/// link and its generation in the forward link, both unused while a slot
/// is in no list.
///
/// # Safety
/// `proxy` is free and this thread's alone (just allocated).
pub(crate) unsafe fn write_proxy(proxy: &Slot, message: Message) {
    let arm = message.arm.expect("a proxy carries a RESTART");
    // SAFETY: the caller's contract.
    proxy.owned.with_mut(|owned| unsafe {
        (*owned).callback = None;
        (*owned).deadline = arm.deadline;
        (*owned).prev = message.index;
        (*owned).set_linked(arm.seq, arm.rounding);
    });
    proxy.next.store(message.gen, Ordering::Relaxed);
    let word = proxy.load(Ordering::Relaxed);
    debug_assert_eq!(word.arm(), super::state::FREE);
    proxy
        .state
        .store(word.with(super::state::QUEUED).0, Ordering::Relaxed);
}

/// The message a proxy carries (see [`write_proxy`]).
///
/// # Safety
/// The caller owns the proxy's shard and has taken the proxy off the queue.
pub(crate) unsafe fn read_proxy(proxy: &Slot) -> Message {
    // SAFETY: the caller's contract.
    let (index, deadline, seq, rounding) = proxy.owned.with(|owned| unsafe {
        (
            (*owned).prev,
            (*owned).deadline,
            (*owned).linked_seq(),
            (*owned).linked_rounding(),
        )
    });
    Message {
        index,
        gen: proxy.next.load(Ordering::Relaxed),
        arm: Some(Arm {
            seq,
            rounding,
            deadline,
        }),
    }
}
