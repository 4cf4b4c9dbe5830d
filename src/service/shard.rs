//! One shard: a hierarchical wheel, its remote queue, and the owner-side
//! half of the protocol (take in, fire, re-arm, settle, free).
//!
//! Everything in `ShardCore` and every slot's `owned` fields belong to the
//! thread that has claimed the shard (`claimed` is the token, taken with an
//! acquire CAS and given back with a release store). All of it runs on that
//! thread; nothing here ever waits for another thread.
//!
//! This file holds the shard, its wheel entries (link, unlink, settle),
//! the owner's own cancel and restart, and the shutdown sweep; the rest of
//! the owner's side is in `shard/`: `claim.rs` (who is inside, lending, the
//! sleep and wake handshake), `take_in.rs` (the remote queue applied),
//! `fire.rs` (the poll), `free.rs` (the owner's free slots).
//!
//! # An owner's restart
//!
//! The owner moves its own armed timer without a CAS on the slot's word
//! ([`Shard::restart_owned`]): it takes in the remote queue, reads the word
//! once, and if that names the handle's incarnation, armed, not running,
//! not queued, with the wheel entry standing for the word's arming (`seq`),
//! it moves the entry. Only the owner writes a timer's deadline and wheel
//! entry, so the read is the restart's linearization point:
//!
//! * a STOP (or a handle's release) from another thread whose CAS comes
//!   after the read is a STOP after the restart: it finds the timer armed,
//!   returns `Cancelled`, and the owner unlinks the moved entry when it
//!   takes the slot in;
//! * a STOP whose CAS came before the read made the word not armed (and
//!   `QUEUED`, and the next `seq`): the general path re-arms;
//! * a RESTART from another thread whose CAS comes after the read sends an
//!   arming with the next `seq`, which the owner links when it takes it in:
//!   it moves the timer again, as the later RESTART; one whose CAS came
//!   before the read left a `seq` the wheel entry does not stand for: the
//!   general path's CAS decides.
//!
//! Without the CAS the restart has no locked instruction, and the slot's
//! line (a cache miss for a random one of many idle timeouts) no longer
//! holds up the caller's next restart (`owner_ops restart`,
//! `service_vs_tokio/restart_owner`). Models: `tests/loom_service.rs`
//! `owner_restart_vs_remote_stop`, `owner_restart_vs_remote_restart`.
//!
//! # An owner's START
//!
//! The owner's START does not link its timer: it leaves it *pending*
//! (`ShardCore::pending`, the slot's `bucket` set to `PENDING`, its
//! deadline and arming in the slot), and links it when anything else needs
//! the wheel: the next START or any other link (so arming order, CONTRACT
//! 5, is kept: the pending START is always the owner's latest arming and is
//! linked before anything armed after it), a poll or a collect before its
//! pass begins, the next-deadline question, and `stats()`. A timer started
//! and cancelled between two of those (a timeout that did not fire: the
//! common case) never touches the wheel: the cancel only clears `pending`
//! (an owner's START + cancel, 540 -> 406 instructions, `owner_ops
//! start-cancel`). A pending slot counts as linked everywhere else (settle,
//! cancel, restart), and [`Shard::unlink`] of it clears `pending`. At most
//! one START is pending per shard, so nothing piles up when the owner does
//! not poll.

mod claim;
mod credits;
mod fire;
mod free;
mod stops;
mod take_in;

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crossbeam_utils::CachePadded;

use super::arena::Callback;
use super::arena::{Arena, ChunkStack, Owned, Slot};
use super::callback;
use super::links::SlotNodes;
use super::remote::{read_proxy, Arm, Message, RemoteQueue, NIL, REVIVE_AFTER_BATCH};
use super::state::{Word, ARMED, CANCELLED, FIRED, FREE, FRESH, HALTED, QUEUED, RUNNING};
use super::stats::ShardCounters;
use super::{Expiry, Inner, PanicReport, PanicSite, TimerId, RUNNING_CALLBACK};
use crate::sync::{Arc, AtomicBool, AtomicU64, AtomicUsize, Ordering, UnsafeCell};

use crate::wheel::{Hierarchy, UNLINKED};

pub(crate) use fire::Fired;
use free::FreeSlot;
use take_in::Deferred;

// SAFETY: `core` is only touched by the thread that holds the shard's claim
// (an acquire CAS on `claimed`, released with a release store), see the
// module docs; every other field is atomic or itself `Sync`.
unsafe impl Sync for Shard {}

/// `sleep_until` value while the owner is awake and will look at its remote
/// queue before it sleeps again: producers need not wake it.
const AWAKE: u64 = 0;

pub(crate) struct Shard {
    /// The slots other threads hand the owner: their STARTs, STOPs and
    /// RESTARTs (see `remote.rs`). Written by every such thread: a line of
    /// its own.
    pub(crate) remote: RemoteQueue,
    /// The tick the owner sleeps until (`u64::MAX`: until woken), or `AWAKE`.
    sleep_until: AtomicU64,
    /// Who may touch the core: `0` (nobody owns the shard), `HELD` (its owner
    /// is inside), `LENT` (its owner sleeps; helpers may enter one at a time,
    /// `LENT | HELD`), `| WANTED` (the owner is taking it back). See `lend`.
    claimed: AtomicUsize,
    /// Set by producers when they hand the shard work; the driver thread
    /// reads and clears it to decide how long it may sleep (`take_activity`).
    /// A std atomic even under loom: a hint that decides no race.
    activity: std::sync::atomic::AtomicBool,
    /// Set while a poll runs, to refuse a poll from inside a callback.
    polling: AtomicBool,
    core: UnsafeCell<ShardCore>,
    /// Chunks of free slots the owner spilled (see `free.rs`), which it
    /// takes back first; others take them before the arena grows.
    pub(crate) spilled: ChunkStack,
    pub(crate) counters: ShardCounters,
    /// The highest clock reading used for this shard (see `clock.rs`).
    pub(crate) clock_mark: CachePadded<std::sync::atomic::AtomicU64>,
}

struct ShardCore {
    /// The wheel; its entries live in the slots (see `links.rs`).
    wheel: Hierarchy,
    /// Slots linked into the wheel, the pending START included.
    linked: usize,
    /// The owner's latest START, not linked yet (see "An owner's START"
    /// in the module docs), or `NIL`.
    pending: u32,
    /// Slots this owner freed, kept for its own next starts: the per-core
    /// pattern (start and stop on the owner's thread) then never touches the
    /// service-wide free list, a cache line every shard would share. First
    /// in, first out, and never drained below `ROTATION` (see there).
    free_slots: VecDeque<FreeSlot>,
    /// A slot whose last timer's id never left its handle, freed without
    /// a new generation, for this owner's next START before `free_slots`
    /// (see "The spare" in `shard/free.rs`).
    spare: Option<FreeSlot>,
    /// How many free slots this owner keeps before it spills (see
    /// `LOCAL_FREE_MAX`), and whether it spilled since its own STARTs last
    /// ran out.
    free_cap: usize,
    spilled: bool,
    /// Slots taken off the remote queue but not yet applied, in push order,
    /// linked through `queue_next` (see `poll`): the first, or `NIL`.
    backlog: u32,
    /// The last slot of the list `backlog` came from, if it is in push
    /// order (`remote::Taken::last`).
    backlog_tail: u32,
    /// For a backlog taken newest first (`remote::Taken::newest_first`):
    /// how many slots its list held and how far the walk has come, for the
    /// walk's prefetches; `(0, 0)` for a list in push order.
    walk: (u32, u32),
    /// Revived STARTs taken in before the entry they must follow
    /// (`Inner::revive`): linked when that entry is applied.
    deferred: Vec<Deferred>,
    /// The rest of a chunk of free slots taken from the arena
    /// (`Arena::pop_chunk`), used before the arena is asked again: first
    /// slot, or `NIL`. At most `SPILL - 1` slots.
    borrowed: u32,
    /// Handles counted made in advance and not yet handed out, and handles
    /// dropped but not yet counted: see `shard/credits.rs`.
    credits: u32,
    drops_owed: u32,
    /// Remote STOPs of another shard's timers waiting to be pushed onto
    /// its queue together (`shard/stops.rs`).
    stops: stops::StopBatch,
    /// Set by the shutdown sweep once it has counted the two above: from
    /// then on the claim holder counts on the service's counters.
    settled: bool,
}

/// How many remote entries, and how many expiries, a poll handles before it
/// turns to the other kind of work.
const BATCH: usize = 1024;

/// The most entries of a coarse bucket an owner reads to find its next
/// deadline exactly ([`Shard::next_deadline`]); past it the answer is the
/// bucket's first tick, where its timers move down a level, as a wheel
/// without the exact answer would wake. The walk over a bucket's scattered
/// entries is a cache miss per entry: restarting the earliest of 100,000
/// idle timeouts (60-120 s out, so thousands share its bucket) and asking
/// again took about 870 us a time with no bound (`examples/idle_wakeups.rs`,
/// `churn`), far more than the wakeup it saves. Sparse wheels, where
/// the saved wakeups matter (a heartbeat beside idle timeouts), have small
/// buckets and get the exact answer.
const EXACT_BUDGET: usize = 64;

/// Runs `f` on a slot's owner-side fields.
///
/// # Safety
/// The caller must own the slot's shard (see the module docs) and must not
/// hold another reference to the same fields.
unsafe fn owned<R>(slot: &Slot, f: impl FnOnce(&mut Owned) -> R) -> R {
    // SAFETY: exclusive access is the caller's contract.
    slot.owned.with_mut(|owned| f(unsafe { &mut *owned }))
}

/// The `bucket` of the owner's pending START: it stands for an arming, as
/// a linked entry does, but is in no bucket yet (see "An owner's START").
const PENDING: u16 = UNLINKED - 1;

/// Is the slot linked into its shard's wheel (or the owner's pending
/// START, which counts as linked)?
///
/// # Safety
/// As for [`owned`].
unsafe fn is_linked(slot: &Slot) -> bool {
    // SAFETY: exclusive access is the caller's contract.
    slot.bucket.with(|bucket| unsafe { *bucket } != UNLINKED)
}

/// Is the slot the owner's pending START (see "An owner's START")?
///
/// # Safety
/// As for [`is_linked`].
#[inline]
unsafe fn is_pending(slot: &Slot) -> bool {
    // SAFETY: exclusive access is the caller's contract.
    slot.bucket.with(|bucket| unsafe { *bucket } == PENDING)
}

impl Shard {
    pub(crate) fn new() -> Self {
        Shard {
            remote: RemoteQueue::new(),
            sleep_until: AtomicU64::new(u64::MAX),
            claimed: AtomicUsize::new(0),
            activity: std::sync::atomic::AtomicBool::new(false),
            polling: AtomicBool::new(false),
            core: UnsafeCell::new(ShardCore {
                wheel: Hierarchy::starting_at(0),
                linked: 0,
                pending: NIL,
                free_slots: VecDeque::new(),
                spare: None,
                free_cap: free::LOCAL_FREE_MIN,
                spilled: false,
                backlog: NIL,
                backlog_tail: NIL,
                walk: (0, 0),
                deferred: Vec::new(),
                borrowed: NIL,
                credits: 0,
                drops_owed: 0,
                settled: false,
                stops: stops::StopBatch::new(),
            }),
            spilled: ChunkStack::new(),
            counters: ShardCounters::default(),
            clock_mark: CachePadded::new(std::sync::atomic::AtomicU64::new(0)),
        }
    }

    /// After a helper's operation: bring what `stats()` reads of this shard
    /// up to date (the owner does it at the end of each poll).
    ///
    /// # Safety
    /// The caller holds the shard.
    pub(crate) unsafe fn refresh_counters(&self, linked_at: Option<u64>) {
        // SAFETY: forwarded.
        let linked = unsafe { self.core(|core| core.linked) };
        self.set_linked_count(linked);
        if let Some(deadline) = linked_at {
            if deadline < self.counters.next_due_tick.get() {
                self.counters.next_due_tick.set(deadline);
            }
        }
    }

    /// Owner side: its wheel holds `linked` entries, for `stats()` and for
    /// the reclaim bound other threads' STOPs read (`RemoteQueue::set_linked`).
    fn set_linked_count(&self, linked: usize) {
        self.counters.armed.set(linked as u64);
        self.remote.set_linked(linked);
    }

    /// Whether the owner may lend the shard now: nothing taken in and not
    /// yet applied.
    ///
    /// # Safety
    /// The caller holds the shard.
    #[inline]
    pub(crate) unsafe fn has_backlog(&self) -> bool {
        // SAFETY: forwarded.
        unsafe { self.core(|core| core.backlog != NIL) }
    }

    /// Runs `f` on the owner-side core.
    ///
    /// # Safety
    /// The caller must have claimed the shard, and no other reference to the
    /// core may be live (callbacks never get one).
    unsafe fn core<R>(&self, f: impl FnOnce(&mut ShardCore) -> R) -> R {
        // SAFETY: exclusive access is the caller's contract.
        self.core.with_mut(|core| f(unsafe { &mut *core }))
    }

    /// Moves the wheel's arming numbers (tests of their 32-bit wrap in the
    /// slots, see `Hierarchy::set_seq_for_test`).
    ///
    /// # Safety
    /// The caller owns the shard.
    #[cfg(test)]
    pub(crate) unsafe fn set_seq_for_test(&self, seq: u64, renumber_at: u64) {
        // SAFETY: forwarded.
        unsafe { self.core(|core| core.wheel.set_seq_for_test(seq, renumber_at)) }
    }

    /// The tick by which this shard needs polling (after taking in pending
    /// messages): the earliest armed deadline, exactly, so an owner that
    /// sleeps until it wakes only when something is due.
    ///
    /// Not the wheel's next cascade point ([`Wheel::next_wakeup`](crate::Wheel::next_wakeup)): a poll
    /// that jumps over several cascade points cascades every bucket it
    /// passes before firing (`Hierarchy::pop_due`), so waking for a cascade
    /// on its own buys nothing, and an owner whose timers are far off (idle
    /// timeouts, a heartbeat seconds away) would wake at every one of them.
    /// The answer is the wheel's next-deadline memo: O(1) while the earliest
    /// timer stays, and one walk of its bucket after it changes (see
    /// `hierarchy.rs`), except when that bucket holds more than
    /// `EXACT_BUDGET` timers (see there).
    ///
    /// # Safety
    /// The caller must have claimed the shard.
    pub(crate) unsafe fn next_deadline(&self, inner: &Arc<Inner>) -> Option<u64> {
        // SAFETY: forwarded.
        unsafe {
            if self.take_remote(inner) {
                // Entries taken in are still waiting: poll again at once.
                return Some(self.core(|core| core.wheel.now()));
            }
            // Refreshed here as at the end of a poll: cancels applied since
            // then (the owner's own, or taken in just now) may have removed
            // the timer the last poll's next due tick belonged to, and an
            // owner that now sleeps past that tick is not late.
            let next = self.publish_counters(inner, true);
            // A STOP pushed after the take-in above but before the reclaim
            // bound was refreshed judged it by the last poll's (larger)
            // count and neither woke this owner nor asked it to stay up;
            // under the refreshed bound it may be due: poll again rather
            // than sleep on it (shuttle `churn_with_polling_owners_that_park`,
            // seed 1795721308765180658, left a stopped slot unreclaimed).
            if self.remote.reclaim_due(self.remote.len()) {
                return Some(self.core(|core| core.wheel.now()));
            }
            next
        }
    }

    /// The deadline tick of the arming `word` names, if that arming is the
    /// one linked in this shard's wheel; `None` when it is not armed, or not
    /// linked yet (still on the remote queue).
    ///
    /// # Safety
    /// The caller holds the shard and no reference into its core; `slot` is
    /// a slot of this shard, and `word` was read from it after the claim was
    /// taken. The slot's wheel fields are then this thread's, and a linked
    /// slot's owner-side fields too: other threads write those only in a
    /// slot that is not linked (a START's own fresh slot, `remote.rs`; a
    /// revived START, never taken in).
    pub(crate) unsafe fn linked_deadline(&self, slot: &Slot, word: Word) -> Option<u64> {
        // SAFETY: the caller's contract.
        if !word.is_armed() || unsafe { !is_linked(slot) } {
            return None;
        }
        // SAFETY: the slot is linked (or pending), so its owner-side fields
        // are ours.
        let (seq, deadline) = unsafe { owned(slot, |owned| (owned.linked_seq(), owned.deadline)) };
        // A pending START's deadline may lie before the processed tick,
        // where linking it will put it (`link`).
        // SAFETY: the caller owns the shard.
        let deadline = deadline.max(unsafe { self.core(|core| core.wheel.now()) });
        (seq == word.seq()).then_some(deadline)
    }

    /// Brings what `stats()` reads of this shard (armed count, next due
    /// tick) up to date, and returns the next due tick: exact when `exact`
    /// gives the service (before a sleep, which may last until then), else
    /// the wheel's O(levels) lower bound, the first tick of its earliest
    /// bucket (the end of a poll: an owner that polls in a busy loop and
    /// never sleeps should not pay for a bucket walk after every change of
    /// its earliest timer). A lower bound only makes `stats()` count a
    /// little lateness early, between a poll and the next question.
    ///
    /// # Safety
    /// The caller must have claimed the shard.
    unsafe fn publish_counters(&self, inner: &Inner, exact: bool) -> Option<u64> {
        // SAFETY: forwarded. The next deadline may be the pending START's.
        unsafe { self.flush_pending(inner) };
        let exact = exact.then_some(inner);
        // SAFETY: forwarded; the wheel's entries are this shard's slots.
        let (armed, next) = unsafe {
            self.core(|core| {
                let next = match exact {
                    Some(inner) => core
                        .wheel
                        .next_deadline_bounded(&SlotNodes::new(&inner.arena), EXACT_BUDGET),
                    None => core.wheel.next_wakeup(),
                };
                (core.linked, next)
            })
        };
        self.set_linked_count(armed);
        self.counters.next_due_tick.set(next.unwrap_or(u64::MAX));
        next
    }

    /// Puts arming `seq` of a slot into the wheel at `deadline`, moving it
    /// if an older arming is linked (it goes last among its tick's timers,
    /// as a new arming does). A deadline before the last processed tick
    /// goes to that tick, due now, and lateness then counts from that tick
    /// (it may read low; the deadline asked for had passed when the timer
    /// was armed). A timer due now fires at the next poll, or, armed during
    /// a poll, at the one after (`hierarchy.rs`, "Due now").
    ///
    /// # Safety
    /// The caller owns the shard.
    pub(crate) unsafe fn link(&self, inner: &Inner, slot: &Slot, index: u32, arm: Arm) {
        // SAFETY: the caller owns the shard, hence the wheel and the slot's
        // owner-side fields; no `owned` closure is live while `nodes` is used.
        unsafe {
            if is_linked(slot) {
                self.relink(inner, slot, index, arm);
                return;
            }
            // Armed before this one: linked first (CONTRACT 5).
            self.flush_pending(inner);
            let rounding = self.core(|core| {
                let mut nodes = SlotNodes::knowing(&inner.arena, index, slot);
                let (deadline, rounding) = arm.filed_at(core.wheel.now());
                core.wheel.link(&mut nodes, index, deadline);
                core.linked += 1;
                rounding
            });
            owned(slot, |owned| owned.set_linked(arm.seq, rounding));
        }
    }

    /// [`link`](Self::link) of a slot that is linked already, or is the
    /// pending START: moves its entry to arming `arm`. Inline in the
    /// owner's restart (`restart_owned`), which knows the slot is linked.
    ///
    /// # Safety
    /// As for `link`; the slot is linked or pending.
    #[inline(always)]
    unsafe fn relink(&self, inner: &Inner, slot: &Slot, index: u32, arm: Arm) {
        // SAFETY: the caller's contract.
        unsafe {
            let pending = self.core(|core| core.pending);
            if pending == index {
                // A new arming of the pending START (an owner's restart of
                // it): nothing was armed after it, so it stays pending.
                owned(slot, |owned| owned.record_arm(arm));
                return;
            }
            if pending != NIL {
                // Armed before this one: linked first (CONTRACT 5).
                self.link_pending(inner);
            }
            let rounding = self.core(|core| {
                let mut nodes = SlotNodes::knowing(&inner.arena, index, slot);
                let (deadline, rounding) = arm.filed_at(core.wheel.now());
                core.wheel.relink(&mut nodes, index, deadline);
                rounding
            });
            owned(slot, |owned| owned.set_linked(arm.seq, rounding));
        }
    }

    /// The owner's START of slot `index` (`slot`), just published with
    /// arming `arm`: left pending rather than linked (see "An owner's
    /// START" in the module docs); the START pending before it is linked
    /// now.
    ///
    /// # Safety
    /// The caller owns the shard and holds no reference into its core; the
    /// slot is this shard's, armed by `arm`, and in no bucket.
    #[inline]
    pub(crate) unsafe fn start_owned(&self, inner: &Inner, slot: &Slot, index: u32, arm: Arm) {
        // SAFETY: the caller's contract.
        unsafe {
            self.flush_pending(inner);
            owned(slot, |owned| owned.record_arm(arm));
            slot.bucket.with_mut(|bucket| *bucket = PENDING);
            self.core(|core| {
                core.pending = index;
                core.linked += 1;
            });
        }
    }

    /// Links the pending START, if any, into the wheel, where it stands for
    /// the arming recorded in its slot (see "An owner's START").
    ///
    /// # Safety
    /// The caller owns the shard and holds no reference into its core.
    pub(crate) unsafe fn flush_pending(&self, inner: &Inner) {
        // SAFETY: forwarded.
        if unsafe { self.core(|core| core.pending) } != NIL {
            // SAFETY: forwarded.
            unsafe { self.link_pending(inner) };
        }
    }

    /// [`flush_pending`](Self::flush_pending) when a START is pending.
    ///
    /// Files the recorded arming straight into the wheel, as `link` does
    /// for an unlinked slot (a deadline before the processed tick goes to
    /// that tick, with no rounding), without `link`'s pending and relink
    /// branches: through them every START of `owner_ops cross-stop` (which
    /// links the START pending before it) cost about 30 instructions more.
    ///
    /// # Safety
    /// As for `flush_pending`.
    #[inline(never)]
    unsafe fn link_pending(&self, inner: &Inner) {
        // SAFETY: the caller owns the shard; the pending slot is an
        // allocated slot of it, whose owner-side fields are ours.
        unsafe {
            let index = self.core(|core| std::mem::replace(&mut core.pending, NIL));
            let slot = inner.arena.get_allocated(index);
            debug_assert!(is_pending(slot));
            slot.bucket.with_mut(|bucket| *bucket = UNLINKED);
            let arm = owned(slot, |owned| owned.recorded_arm());
            let rounding = self.core(|core| {
                let mut nodes = SlotNodes::knowing(&inner.arena, index, slot);
                let (deadline, rounding) = arm.filed_at(core.wheel.now());
                core.wheel.link(&mut nodes, index, deadline);
                rounding
            });
            if rounding != arm.rounding {
                // Filed at `now`: the recorded arming's rounding no longer
                // holds.
                owned(slot, |owned| owned.set_linked(arm.seq, rounding));
            }
        }
    }

    /// The owner moves its own armed timer `id` (slot `slot`) to
    /// `deadline` without a CAS on its word (see "An owner's restart" in
    /// the module docs). Returns `false`, having changed nothing but taken
    /// in the remote queue, when the general path must decide (the timer
    /// is not armed, its callback runs, it is queued, or another thread's
    /// RESTART is on its way to the wheel).
    ///
    /// # Safety
    /// The caller owns the shard and holds no reference into its core;
    /// `slot` is slot `id.index()` of the arena, and `word` its word as the
    /// caller read it.
    #[inline(always)]
    pub(crate) unsafe fn restart_owned(
        &self,
        inner: &Inner,
        slot: &Slot,
        id: TimerId,
        word: Word,
        deadline: u64,
        rounding: u8,
    ) -> bool {
        // What other threads queued before this RESTART goes first (same-
        // tick order, CONTRACT 5), and may have stopped or freed the timer:
        // then the word is read again. With nothing taken in, the caller's
        // read of it is still the one that decides.
        // SAFETY: forwarded.
        let word = if unsafe { self.catch_up(inner) } {
            slot.load(Ordering::Acquire)
        } else {
            word
        };
        if word.gen() != id.gen() || !word.is_armed() || word.is(RUNNING) || word.is(QUEUED) {
            return false;
        }
        // SAFETY: the caller owns the shard; the word names `id`'s
        // incarnation (whose shard field the caller read), so the slot is
        // this shard's and allocated.
        unsafe {
            if !is_linked(slot) || owned(slot, |owned| owned.linked_seq()) != word.seq() {
                return false;
            }
            self.relink(
                inner,
                slot,
                id.index(),
                Arm {
                    seq: word.seq(),
                    rounding,
                    deadline,
                },
            );
        }
        true
    }

    /// Takes linked slot `index` (`slot`) out of the wheel.
    ///
    /// # Safety
    /// The caller owns the shard, the slot is linked, and `slot` is slot
    /// `index`.
    unsafe fn unlink(&self, inner: &Inner, slot: &Slot, index: u32) {
        // SAFETY: forwarded.
        unsafe {
            if is_pending(slot) {
                self.unpend(slot, index);
                return;
            }
            self.core(|core| {
                let mut nodes = SlotNodes::knowing(&inner.arena, index, slot);
                core.wheel.unlink(&mut nodes, index);
                core.linked -= 1;
            });
        }
    }

    /// Takes the pending START, slot `index` (`slot`), out of its cell: it
    /// never reached the wheel.
    ///
    /// # Safety
    /// The caller owns the shard; the slot is the pending START.
    #[inline(always)]
    unsafe fn unpend(&self, slot: &Slot, index: u32) {
        // SAFETY: forwarded.
        unsafe {
            slot.bucket.with_mut(|bucket| *bucket = UNLINKED);
            self.core(|core| {
                debug_assert_eq!(core.pending, index);
                core.pending = NIL;
                core.linked -= 1;
            });
        }
    }

    /// Brings the wheel in line with a word that is not a pending arming:
    /// unlinks a stale entry, and frees the slot if nothing needs it.
    ///
    /// # Safety
    /// The caller owns the shard.
    unsafe fn settle(&self, inner: &Inner, slot: &Slot, index: u32, word: Word) {
        // SAFETY: the caller owns the shard.
        let stale = unsafe {
            is_linked(slot)
                && owned(slot, |owned| {
                    !word.is_armed() || owned.linked_seq() != word.seq()
                })
        };
        if stale {
            // SAFETY: as above; the slot is linked.
            unsafe { self.unlink(inner, slot, index) };
        }
        if !word.is_reclaimable() {
            return;
        }
        // Nobody else can change a reclaimable word: no handle holds it (a
        // transition needs `HANDLE`, or `RUNNING` for the timer's own
        // callback), it is not armed (only the owner, this thread, fires),
        // and it is not running. So a plain store frees it; a CAS here was
        // one more locked instruction on every STOP's reclaim.
        let freed = super::state::Word::free(super::state::next_gen(word.gen()));
        slot.state.store(freed.0, Ordering::Release);
        debug_assert!(unsafe { !is_linked(slot) });
        // SAFETY: the caller owns the shard; the slot is FREE now and not
        // linked: a reclaimable word is not armed, so it was unlinked above
        // (or popped by `poll`).
        unsafe { self.recycle(inner, slot, index, word.gen()) };
    }

    /// The owner cancels its own armed timer through a live handle: one CAS
    /// from the word it read straight to the freed state (the next
    /// generation), then the slot leaves the wheel and joins this owner's
    /// free slots. No intermediate `CANCELLED` word, no message, no second
    /// look at the word: the owner's START + cancel path
    /// (`examples/owner_ops.rs`, `service_vs_tokio/owner_start_cancel`). Returns
    /// `false`, having changed nothing, if the word is not `word` any more
    /// (another thread stopped, restarted or released it meanwhile), and the
    /// caller takes the general path.
    ///
    /// `word` must be armed, not running and not queued (nothing else may
    /// hold the slot then: a pending START or RESTART message names the old
    /// generation and is ignored once the slot is freed).
    ///
    /// `private`: the timer's id never left its handle (a sleep's: see "The
    /// spare" in `shard/free.rs`), so the slot is freed in the same
    /// generation and may become this owner's spare.
    ///
    /// # Safety
    /// The caller owns the shard and holds no reference into its core;
    /// `slot` is slot `index` of this shard.
    #[inline(always)]
    pub(crate) unsafe fn cancel_owned(
        &self,
        inner: &Inner,
        slot: &Slot,
        index: u32,
        word: Word,
        private: bool,
    ) -> bool {
        debug_assert!(word.is_armed() && !word.is(RUNNING) && !word.is(QUEUED));
        let freed = if private {
            Word::free(word.gen())
        } else {
            Word::free(super::state::next_gen(word.gen()))
        };
        if slot.cas(word, freed).is_err() {
            return false;
        }
        // SAFETY: the caller owns the shard; the slot is FREE and on no
        // free list yet, so it is this thread's alone.
        unsafe {
            if is_pending(slot) {
                // A timeout cancelled before anything needed the wheel: its
                // START is still the pending one. Inline here, not through
                // `unlink`'s call (`owner_ops start-cancel` 410 -> 397
                // instructions, `sleep-poll-drop` 542 -> 529).
                self.unpend(slot, index);
            } else if is_linked(slot) {
                self.unlink(inner, slot, index);
            }
            if private {
                self.recycle_private(inner, slot, index, word.gen());
            } else {
                self.recycle(inner, slot, index, word.gen());
            }
        }
        true
    }

    /// Shutdown: drop every callback of this shard without running it and
    /// free whatever no handle holds.
    ///
    /// Two passes, because dropping a callback runs user code: its captures
    /// may include the handle of another timer of this shard, and dropping
    /// that handle releases it inline (this thread owns the shard), which
    /// settles that slot at once. So the first pass disarms every slot of the
    /// shard and marks it unlinked, without running any user code; only when
    /// the wheel and every slot agree (nothing linked) does the second pass
    /// drop callbacks and free slots. A release that re-enters during the
    /// second pass finds a disarmed, unlinked slot and frees it; the pass then
    /// finds it free and skips it.
    ///
    /// Last, the handles this shard's claim holders counted in its core are
    /// counted on the service's (`shard/credits.rs`); if that was the last
    /// of them, the strong count they held is given back here.
    ///
    /// The caller must have claimed the shard (it is not polling).
    pub(crate) fn sweep(&self, inner: &Arc<Inner>, shard: usize) {
        // Queued entries are moot now: the sweep looks at every slot itself.
        self.drop_remote(inner);
        // Stops this shard's holders batched for other shards go to them.
        // SAFETY: the caller has claimed the shard; no core reference is live.
        unsafe { self.flush_stops(inner) };
        // SAFETY: the caller has claimed the shard. The slots are marked
        // unlinked in the first pass below, before anything reads them.
        unsafe {
            self.core(|core| {
                core.wheel = Hierarchy::starting_at(core.wheel.now());
                core.linked = 0;
                core.pending = NIL;
                core.backlog = NIL;
                core.walk = (0, 0);
                core.deferred.clear();
            })
        };
        self.set_linked_count(0);
        self.counters.next_due_tick.set(u64::MAX);
        let ours = |slot: &Slot| {
            let word = slot.load(Ordering::Acquire);
            (word.arm() != super::state::FREE
                && slot.shard.load(Ordering::Relaxed) as usize == shard)
                .then_some(word)
        };
        // Pass 1: disarm (and stop any periodic continuation) and unlink.
        inner.arena.for_each(|_, slot| {
            let Some(mut word) = ours(slot) else {
                return;
            };
            while word.is_armed() {
                match slot.cas(word, word.with_arm(CANCELLED).next_seq()) {
                    Ok(_) => break,
                    Err(actual) => word = actual,
                }
            }
            // SAFETY: we own the shard, and this slot belongs to it (its
            // shard field was written before the word we acquired).
            unsafe { slot.bucket.with_mut(|bucket| *bucket = UNLINKED) };
        });
        // Pass 2: drop callbacks (user code) and free what no handle holds.
        inner.arena.for_each(|index, slot| {
            if ours(slot).is_none() {
                return;
            }
            // SAFETY: as above; no reference into the slot is live while
            // the callback's captures are dropped.
            let callback = unsafe { owned(slot, |owned| owned.callback.take()) };
            if callback.is_some() {
                let gen = slot.load(Ordering::Acquire).gen();
                drop_callback(inner, callback, TimerId::new(index, gen, inner.tag), shard);
            }
            // The drop may have changed the word (a handle captured by the
            // callback itself was released, and the slot freed inline):
            // settle on the current one.
            if let Some(word) = ours(slot) {
                // SAFETY: as above.
                unsafe { self.settle(inner, slot, index, word) };
            }
        });
        // SAFETY: the caller holds the claim; no core reference is live.
        unsafe { self.settle_credits(inner, shard, true) };
    }
}

/// Drops a timer's callback, which runs user code (the `Drop` of its
/// captures): a panic there is caught, counted and reported like a
/// callback's (CONTRACT 16), wherever the drop happens (an owner's poll, a
/// thread applying its STOP inside a lent shard, the shutdown sweep), so it
/// never leaves a shard claimed, lent or mid-poll (`tests/user_panics.rs`).
/// A callback whose captures need no drop costs nothing here.
#[inline]
pub(crate) fn drop_callback(inner: &Inner, callback: Option<Callback>, id: TimerId, shard: usize) {
    let Some(callback) = callback else {
        return;
    };
    if !callback.needs_drop() {
        return;
    }
    let mut callback = std::mem::ManuallyDrop::new(callback);
    // SAFETY: `callback` is not dropped or used after.
    unsafe { drop_captures_at(inner, &mut *callback, id, shard) };
}

/// [`drop_callback`] for captures that need dropping, dropped where they
/// lie (see `callback::take_to_drop_into`): out of line, so that the
/// common callback that needs none costs its caller a test.
///
/// Returns `true` if the drop panicked (the panic was reported with `id`).
///
/// # Safety
/// `callback` is a live callback that nothing drops or uses after.
#[inline(never)]
pub(crate) unsafe fn drop_captures_at(
    inner: &Inner,
    callback: *mut Callback,
    id: TimerId,
    shard: usize,
) -> bool {
    // SAFETY: the caller's contract.
    let dropped = catch_unwind(AssertUnwindSafe(|| unsafe {
        std::ptr::drop_in_place(callback)
    }));
    match dropped {
        Ok(()) => false,
        Err(payload) => {
            report_panic(inner, id, shard, PanicSite::Drop, payload);
            true
        }
    }
}

/// Counts a caught panic in user code on `shard`'s counters and hands it to
/// the panic hook (or stderr).
#[cold]
fn report_panic(
    inner: &Inner,
    id: TimerId,
    shard: usize,
    site: PanicSite,
    payload: Box<dyn std::any::Any + Send>,
) {
    if let Some(target) = inner.shards.get(shard) {
        target.counters.panics.bump_shared(1);
    }
    let report = PanicReport::new(id, shard, site, payload);
    if let Some(hook) = &inner.config.panic_hook {
        // A panicking hook must not take the shard down either.
        let _ = catch_unwind(AssertUnwindSafe(|| hook(&report)));
    } else {
        eprintln!("tickwheel: {report}");
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::fire::next_periodic_deadline;

    #[test]
    fn periodic_deadlines_stay_on_the_grid() {
        // On time: next grid point, no overrun.
        assert_eq!(next_periodic_deadline(100, 10, 100, false), (110, 0));
        assert_eq!(next_periodic_deadline(100, 10, 109, false), (110, 0));
        // Fired 35 ticks late: 110, 120 and 130 have passed too; skip them.
        assert_eq!(next_periodic_deadline(100, 10, 135, false), (140, 3));
        // Burst: every missed period fires, one after another.
        assert_eq!(next_periodic_deadline(100, 10, 135, true), (110, 0));
        // Saturation at the end of time.
        assert_eq!(
            next_periodic_deadline(u64::MAX - 5, 10, u64::MAX - 5, false),
            (u64::MAX, 0)
        );
    }
}
