//! One shard: a hierarchical wheel, its remote queue, and the owner-side
//! half of the protocol (take in, fire, re-arm, settle, free).
//!
//! Everything in `ShardCore` and every slot's `owned` fields belong to the
//! thread that has claimed the shard (`claimed` is the token, taken with an
//! acquire CAS and given back with a release store). All of it runs on that
//! thread; nothing here ever waits for another thread.
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

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crossbeam_utils::CachePadded;

use super::arena::Callback;
use super::arena::{Arena, Owned, Slot};
use super::callback;
use super::links::SlotNodes;
use super::remote::{read_proxy, Arm, Message, RemoteQueue, NIL, REVIVE_AFTER_BATCH};
use super::state::{Word, ARMED, CANCELLED, FIRED, FREE, FRESH, HALTED, QUEUED, RUNNING};
use super::stats::ShardCounters;
use super::{Expiry, Inner, PanicReport, PanicSite, TimerId, RUNNING_CALLBACK};
use crate::sync::{Arc, AtomicBool, AtomicU64, AtomicUsize, Ordering, UnsafeCell};

/// `claimed`: someone is inside the shard (its owner, or a helper while it is lent).
const HELD: usize = 1;
/// `claimed`: the owner sleeps and has lent the shard to helpers (see `lend`).
const LENT: usize = 2;
/// `claimed`: the owner of a lent shard wants it back; no new helper may enter.
const WANTED: usize = 4;
use crate::wheel::{Hierarchy, UNLINKED};

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
    pub(crate) counters: ShardCounters,
    /// The highest clock reading used for this shard (see `clock.rs`).
    pub(crate) clock_mark: CachePadded<std::sync::atomic::AtomicU64>,
}

/// A free slot kept by its shard's owner: its index, and its address, so
/// that the START that takes it needs no arena lookup (an owner's START +
/// cancel: 644 -> 631 instructions, `examples/owner_ops.rs` under callgrind).
#[derive(Clone, Copy)]
struct FreeSlot {
    index: u32,
    slot: std::ptr::NonNull<Slot>,
}

// SAFETY: the address of a slot of the service's arena, which lives as long
// as the service; only the owner that holds the shard's claim reads it.
unsafe impl Send for FreeSlot {}

/// The fresh slots [`Arena::alloc_line`] hands an owner beyond the one it
/// returns, resolved to addresses as they join the owner's free slots.
struct Spares<'a> {
    arena: &'a Arena,
    free: &'a mut VecDeque<FreeSlot>,
}

impl Extend<u32> for Spares<'_> {
    fn extend<I: IntoIterator<Item = u32>>(&mut self, indices: I) {
        for index in indices {
            // SAFETY: `alloc_line` installed the segments of the slots it
            // hands out before handing them out.
            let slot = unsafe { self.arena.get_allocated(index) };
            self.free.push_back(FreeSlot {
                index,
                slot: std::ptr::NonNull::from(slot),
            });
        }
    }
}

struct ShardCore {
    /// The wheel; its entries live in the slots (see `links.rs`).
    wheel: Hierarchy,
    /// Slots linked into the wheel.
    linked: usize,
    /// Slots this owner freed, kept for its own next starts: the per-core
    /// pattern (start and stop on the owner's thread) then never touches the
    /// service-wide free list, a cache line every shard would share. First
    /// in, first out, and never drained below `ROTATION` (see there).
    free_slots: VecDeque<FreeSlot>,
    /// Slots taken off the remote queue but not yet applied, in push order,
    /// linked through `queue_next` (see `poll`): the first, or `NIL`.
    backlog: u32,
    /// The last slot of the list `backlog` came from.
    backlog_tail: u32,
    /// Revived STARTs taken in before the entry they must follow
    /// (`Inner::revive`): linked when that entry is applied.
    deferred: Vec<Deferred>,
    /// The rest of a chunk of free slots taken from the arena
    /// (`Arena::pop_chunk`), used before the arena is asked again: first
    /// slot, or `NIL`. At most `SPILL - 1` slots.
    borrowed: u32,
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

/// How many freed slots an owner keeps before handing them back to the
/// service (bounds what idle shards hold on to).
const LOCAL_FREE_MAX: usize = 1024;

/// How many freed slots an owner hands back at once, as one chunk
/// (`Arena::push_chunk`), when it holds more than `LOCAL_FREE_MAX`; and so
/// the most it takes back at once when its own run out.
#[cfg(not(any(loom, shuttle)))]
const SPILL: usize = 256;
/// Under loom and shuttle, chunks of two, so that models reach them.
#[cfg(any(loom, shuttle))]
const SPILL: usize = 2;

/// Freed slots an owner keeps resting before it reuses one.
///
/// A slot's generation counts its incarnations and wraps after
/// `1 << GEN_BITS` of them (`state::next_gen`): a slot is never retired, so
/// churn, however concentrated, leaves memory flat (CONTRACT 13). What keeps
/// a stale id stale is that its slot must pass through that many
/// incarnations before its name comes back. Reusing the most recently freed
/// slot would put all of a START + STOP loop on one slot (at 11 M pairs a
/// second, a lap of 2^28 in 24 s); taking the slot that has rested longest,
/// and never one of the last `ROTATION` freed, spreads such a loop over at
/// least `ROTATION` slots, so a lap takes `ROTATION` times as long (about
/// 25 minutes at that rate). The cost is up to `ROTATION` free slots per
/// shard (`tests/generations.rs`).
#[cfg(not(any(loom, shuttle)))]
const ROTATION: usize = 64;
/// Under loom and shuttle a freed slot is reused at once, so that models of
/// a stale id racing the reuse of its slot (`reclamation_vs_stale_reader`)
/// reach the reuse.
#[cfg(any(loom, shuttle))]
const ROTATION: usize = 0;

/// A revived START waiting for entry `after` of the remote queue (see
/// `Inner::revive`).
struct Deferred {
    after: u32,
    index: u32,
    gen: u32,
    arm: Arm,
}

/// What [`Shard::poll`] did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Polled {
    pub(crate) fired: usize,
}

/// An arming that [`Shard::fire`] decided fires: its slot is `FIRED |
/// RUNNING` and its callback taken out until [`Shard::finish`].
pub(crate) struct Fired {
    index: u32,
    pub(crate) id: TimerId,
    pub(crate) deadline: u64,
    pub(crate) now: u64,
    pub(crate) overruns: u64,
    /// Nanoseconds from the deadline asked for to the fire, on the
    /// service's clock.
    pub(crate) lateness: u64,
    period: u64,
    next: u64,
    running: Word,
    callback: Option<Callback>,
}

impl Fired {
    /// Runs the callback on this thread (the shard's owner), catching and
    /// reporting a panic (CONTRACT 16).
    pub(crate) fn run(&mut self, inner: &Arc<Inner>, shard: usize) {
        let Some(callback) = self.callback.as_mut() else {
            return;
        };
        let mut expiry = Expiry {
            inner,
            id: self.id,
            shard,
            deadline: self.deadline,
            now: self.now,
            overruns: self.overruns,
            lateness_nanos: self.lateness,
        };
        let previous =
            RUNNING_CALLBACK.with(|running| running.replace((inner.address(), self.id.to_raw())));
        let result = catch_unwind(AssertUnwindSafe(|| callback.fire(&mut expiry)));
        RUNNING_CALLBACK.with(|running| running.set(previous));
        if let Err(payload) = result {
            report_panic(inner, self.id, shard, PanicSite::Callback, payload);
        }
    }
}

/// Runs `f` on a slot's owner-side fields.
///
/// # Safety
/// The caller must own the slot's shard (see the module docs) and must not
/// hold another reference to the same fields.
unsafe fn owned<R>(slot: &Slot, f: impl FnOnce(&mut Owned) -> R) -> R {
    // SAFETY: exclusive access is the caller's contract.
    slot.owned.with_mut(|owned| f(unsafe { &mut *owned }))
}

/// Is the slot linked into its shard's wheel?
///
/// # Safety
/// As for [`owned`].
unsafe fn is_linked(slot: &Slot) -> bool {
    // SAFETY: exclusive access is the caller's contract.
    slot.bucket.with(|bucket| unsafe { *bucket } != UNLINKED)
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
                free_slots: VecDeque::new(),
                backlog: NIL,
                backlog_tail: NIL,
                deferred: Vec::new(),
                borrowed: NIL,
            }),
            counters: ShardCounters::default(),
            clock_mark: CachePadded::new(std::sync::atomic::AtomicU64::new(0)),
        }
    }

    /// Takes a shard nobody owns (an embedded owner's claim, the sweep at
    /// shutdown). Fails on a lent shard: it has an owner.
    pub(crate) fn try_claim(&self) -> bool {
        self.claimed
            .compare_exchange(0, HELD, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// The owner gives the shard up for good.
    pub(crate) fn unclaim(&self) {
        self.claimed.store(0, Ordering::Release);
    }

    /// The owner, about to sleep, lends its shard: until it takes it back
    /// ([`take_back`](Self::take_back)), one producer at a time may enter
    /// ([`try_help`](Self::try_help)) and apply its own operation directly
    /// instead of queueing it.
    ///
    /// # Lending
    ///
    /// A driver thread sleeps most of the time, and a RESTART from another
    /// thread that goes through the remote queue costs a proxy slot, a
    /// wake, a context switch, and the owner applying it later. While the
    /// shard is lent, it is applied at once by the thread that makes it, as
    /// a mutex-per-shard timer would: a move in the wheel. (A START is
    /// queued even then: the same thread's next START reuses a cancelled
    /// one's slot in place, which is cheaper than entering the shard twice,
    /// see `Inner::arm`.)
    /// Nothing blocks a producer: a producer that finds the shard held (or
    /// not lent) queues its operation as usual (CONTRACT 7). The owner may
    /// wait: taking the shard back waits for the one helper inside to leave
    /// (`WANTED` turns later ones away), a few hundred nanoseconds unless
    /// that helper is preempted, which then delays the owner's next poll as
    /// a preempted lock holder would.
    ///
    /// Why nothing is lost or reordered:
    /// * The shard is lent only with nothing waiting (no backlog; the remote
    ///   queue was found empty after the sleep was published), and a helper
    ///   applies its own operation only after taking in whatever is waiting
    ///   on the queue; if too much is waiting it queues its own behind it.
    ///   So one thread's operations reach the wheel in the order it made
    ///   them (CONTRACT 5), whichever way each one went.
    /// * The owner publishes the tick it will sleep until before it lends
    ///   (release on `claimed`), and a helper enters with an acquire CAS on
    ///   `claimed`; a helper that linked an arming due before that tick claims
    ///   the wake after it leaves, exactly as a queued one would
    ///   ([`claim_wake`](Self::claim_wake)). (A STOP goes to the remote
    ///   queue whether the shard is lent or not, see `remote.rs`; a helper
    ///   takes that queue in first, and the release of a timer that is not
    ///   armed enters a lent shard just to do that, `Inner::help_reclaim`.)
    /// * The core and the slots' owner-side fields are touched only by the
    ///   one thread that holds `HELD`; each hand-over is a release store or
    ///   RMW followed by an acquire CAS, so each holder sees everything the
    ///   previous one did.
    pub(crate) fn lend(&self) {
        self.claimed.store(LENT, Ordering::Release);
    }

    /// The owner takes its lent shard back, waiting for a helper inside to
    /// leave.
    pub(crate) fn take_back(&self) {
        self.claimed.fetch_or(WANTED, Ordering::Relaxed);
        let backoff = crate::sync::Backoff::new();
        while self
            .claimed
            .compare_exchange_weak(LENT | WANTED, HELD, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            // Spin, then yield, but never sleep: a helper is inside for a
            // few hundred nanoseconds unless it was preempted, and then
            // yielding is what lets it run again soonest (a sleep would add
            // the timer slack and a wakeup to every such wait).
            backoff.snooze();
        }
    }

    /// A producer enters a lent shard; `false` if it is not lent, held, or
    /// wanted back.
    ///
    /// SeqCst (both outcomes), as is `end_help`: a thread that pushed and
    /// then finds the shard held leaves its entry to the helper inside,
    /// which looks at the queue after it leaves (`Inner::help_reclaim`).
    /// x86 emits the same instructions as for the weaker orderings.
    #[inline]
    pub(crate) fn try_help(&self) -> bool {
        let entered = self
            .claimed
            .compare_exchange(LENT, LENT | HELD, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        crate::sync::handshake_fence();
        entered
    }

    /// A helper leaves (keeping `WANTED` if the owner set it meanwhile).
    #[inline]
    pub(crate) fn end_help(&self) {
        self.claimed.fetch_and(!HELD, Ordering::SeqCst);
        crate::sync::handshake_fence();
    }

    /// Tells the owner work arrived (see `take_activity`). Loads first, so
    /// a busy shard's line is written once per owner sleep, not per message.
    #[inline]
    pub(crate) fn note_activity(&self) {
        if !self.activity.load(Ordering::Relaxed) {
            self.activity.store(true, Ordering::Relaxed);
        }
    }

    /// Whether producers handed this shard work since the last call.
    pub(crate) fn take_activity(&self) -> bool {
        self.activity.swap(false, Ordering::Relaxed)
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

    /// Producer side, after pushing a message: should this thread wake the
    /// owner? `deadline` is the tick the message needs processing by (`None`:
    /// a stop or release, which needs the owner only to reclaim memory, so
    /// any sleep is too long).
    ///
    /// # The wake claim
    ///
    /// A sleeping owner publishes the tick it sleeps until in `sleep_until`
    /// (see [`publish_sleep`](Self::publish_sleep)). A producer that needs it
    /// earlier *claims the wake* by a CAS of that published value to `AWAKE`,
    /// and only the thread whose CAS succeeds unparks the owner. So a sleep is
    /// interrupted at most once however many producers race (CONTRACT 21),
    /// and every producer that needs the owner either wins the claim or finds
    /// `AWAKE`, which means the owner will look at its remote queue before it
    /// sleeps again. A CAS that fails on a newly published sleep decides
    /// again against that one.
    ///
    /// SeqCst (with the push's SeqCst CAS before it): the store-then-load
    /// handshake with `publish_sleep`, see there.
    pub(crate) fn claim_wake(&self, deadline: Option<u64>) -> bool {
        let mut until = self.sleep_until.load(Ordering::SeqCst);
        loop {
            let needed = until != AWAKE && deadline.is_none_or(|deadline| deadline < until);
            if !needed {
                return false;
            }
            match self.sleep_until.compare_exchange(
                until,
                AWAKE,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                Err(actual) => until = actual,
            }
        }
    }

    /// Owner side, before sleeping until `until` (`None`: until woken).
    /// Returns `false` if entries were queued meanwhile (poll again instead).
    ///
    /// # Why no wakeup is lost
    ///
    /// This is a store-then-load handshake (Dekker): the owner stores its
    /// sleep deadline, then loads the remote queue's word; a producer CASes the
    /// queue's word, then loads the sleep deadline (`claim_wake`). With every
    /// one of those accesses SeqCst, in every interleaving at least one side
    /// sees the other's write: either the owner finds the entry here and
    /// does not sleep, or the producer finds the published deadline and
    /// claims the wake. Under loom, which models SeqCst accesses as AcqRel, a
    /// SeqCst fence after each store stands in for that (`sync::handshake_fence`).
    ///
    /// Entries that need the owner only after `until` (see
    /// `RemoteQueue::needs_owner_by`) do not keep it awake: a thread that
    /// starts and cancels hour-long timers from outside the shard (reviving
    /// its queued slot, `Inner::revive`) then does so without the owner,
    /// instead of keeping a driver thread polling beside it
    /// (`service_vs_tokio/nonowner_start_cancel`).
    pub(crate) fn publish_sleep(&self, until: Option<u64>) -> bool {
        let until = until.unwrap_or(u64::MAX).max(1);
        self.sleep_until.store(until, Ordering::SeqCst);
        crate::sync::handshake_fence();
        if self.remote.needed_before(until) {
            self.sleep_until.store(AWAKE, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Whether a producer has claimed the wake of the sleep published last
    /// (or the owner is awake): a lingering driver stops lingering.
    pub(crate) fn wake_claimed(&self) -> bool {
        self.sleep_until.load(Ordering::SeqCst) == AWAKE
    }

    pub(crate) fn mark_awake(&self) {
        self.sleep_until.store(AWAKE, Ordering::SeqCst);
    }

    /// A thread other than the owner has just stopped (or cancelled, or
    /// released) a timer of this shard, and its CAS set the slot's `QUEUED`
    /// bit: queues the slot for the owner (see `remote.rs`). Returns `true`
    /// if the caller must wake the owner: only when the queued entries pass
    /// the reclaim bound (`RemoteQueue::reclaim_due`, as of the owner's last
    /// poll), and only if its wake claim wins.
    pub(crate) fn push_stop(&self, index: u32, slot: &Slot) -> bool {
        let queued = self.remote.push(index, slot);
        self.remote.reclaim_due(queued) && self.queued_for(0)
    }

    /// Producer side, once its entry is queued (pushed, or a queued slot
    /// revived): the owner needs it by tick `tick` (0: now). Records that
    /// for an owner about to sleep (`RemoteQueue::needs_owner_by`), then
    /// claims the wake of one that sleeps past it (`claim_wake`). Returns
    /// `true` if the caller must wake the owner.
    #[inline]
    pub(crate) fn queued_for(&self, tick: u64) -> bool {
        self.remote.needs_owner_by(tick);
        self.claim_wake(Some(tick))
    }

    /// [`push_stop`](Self::push_stop) for a STOP whose slot was queued
    /// already: should this thread wake the owner?
    #[inline]
    pub(crate) fn stop_wake_due(&self) -> bool {
        self.remote.reclaim_due(self.remote.len()) && self.queued_for(0)
    }

    /// Shutdown: empties the remote queue without applying it (the sweep
    /// looks at every slot itself), so that no slot stays `QUEUED`.
    fn drop_remote(&self, inner: &Inner) {
        // SAFETY: the caller (the sweep) has claimed the shard.
        unsafe {
            while let Some((slot, _)) = self.next_entry(inner, true) {
                let _ = slot.state.fetch_and(!(QUEUED | FRESH), Ordering::AcqRel);
            }
        }
    }

    /// The next slot taken off the remote queue and not yet applied, with
    /// its index and its link read (the caller clears `QUEUED` next); when
    /// none is left and `refill`, whatever the queue holds now is taken
    /// first.
    ///
    /// # Safety
    /// The caller owns the shard and holds no reference into its core.
    unsafe fn next_entry<'a>(&self, inner: &'a Inner, refill: bool) -> Option<(&'a Slot, u32)> {
        // SAFETY: forwarded.
        unsafe {
            self.core(|core| {
                if core.backlog == NIL && refill {
                    (core.backlog, core.backlog_tail) = self.remote.take(&inner.arena);
                }
                let index = core.backlog;
                if index == NIL {
                    return None;
                }
                // SAFETY: a queued slot is allocated and cannot be freed
                // while `QUEUED` is set (`remote.rs`); its link is read
                // before `QUEUED` is cleared, after which the slot may be
                // queued anew.
                let slot = inner.arena.get_allocated(index);
                core.backlog = slot.queue_next.load(Ordering::Relaxed);
                Some((slot, index))
            })
        }
    }

    /// Applies one entry of the remote queue (see `remote.rs`): clears the
    /// slot's `QUEUED` and `FRESH` bits and acts on its word as that
    /// clearing found it; then links the revived STARTs that were waiting
    /// for this entry.
    ///
    /// # Safety
    /// The caller owns the shard and holds no reference into its core; the
    /// slot was just taken off the queue (`next_entry`).
    unsafe fn apply_entry(&self, inner: &Inner, slot: &Slot, index: u32) {
        // SAFETY (both): forwarded.
        unsafe {
            self.apply_one(inner, slot, index);
            if self.core(|core| !core.deferred.is_empty()) {
                self.link_deferred(inner, index);
            }
        }
    }

    /// [`apply_entry`](Self::apply_entry) without the deferred STARTs.
    ///
    /// # Safety
    /// As for [`apply_entry`](Self::apply_entry).
    unsafe fn apply_one(&self, inner: &Inner, slot: &Slot, index: u32) {
        let seen = slot.load(Ordering::Acquire);
        if !seen.is(FRESH) && seen.is_reclaimable_but_queued() {
            // A STOP or release that left the word to this owner alone: no
            // handle holds it (a transition needs `HANDLE`, or `RUNNING` for
            // the timer's own callback), it is neither armed nor running,
            // and the only other writer of a queued word without a handle
            // is a thread reviving its own START, whose word is `FRESH`. So
            // `settle` frees it with one plain store, which clears `QUEUED`
            // too: a remote STOP costs its owner no locked instruction
            // (`examples/owner_ops.rs cross-stop`).
            // SAFETY: forwarded.
            unsafe { self.settle(inner, slot, index, seen.without(QUEUED)) };
            return;
        }
        let old = Word(slot.state.fetch_and(!(QUEUED | FRESH), Ordering::AcqRel));
        let word = old.without(QUEUED).without(FRESH);
        if word.arm() == FREE {
            if old.is(FRESH) {
                // A slot another thread is reviving (`Inner::revive`): it
                // is that thread's until it finds `QUEUED` gone and pushes
                // the slot again.
                return;
            }
            // A proxy: a RESTART of another slot. The proxy is spent first
            // (it joins this owner's free slots), so the restart's user code
            // (a callback's captures dropped by `settle`) finds it tidy.
            // SAFETY: the caller owns the shard and took the proxy off.
            let message = unsafe { read_proxy(slot) };
            // SAFETY: the proxy is FREE, unlinked, and on no free list.
            unsafe { self.keep_free_slot(inner, slot, index) };
            // SAFETY: forwarded.
            unsafe { self.reconcile(inner, message) };
            return;
        }
        if !old.is(FRESH) {
            // A STOP or release (or a slot queued for one and restarted
            // since: its restart's proxy follows).
            // SAFETY: forwarded.
            unsafe { self.settle(inner, slot, index, word) };
            return;
        }
        // A START from another thread: the slot is unlinked, and its
        // owner-side fields hold the arming it recorded before publishing
        // it (and, if revived, which entry it must follow: `owned.prev`).
        // SAFETY: the caller owns the shard, hence the slot's fields.
        let (arm, after) = unsafe {
            owned(slot, |owned| {
                let arm = Arm {
                    seq: owned.linked_seq(),
                    rounding: owned.linked_rounding(),
                    deadline: owned.deadline,
                };
                let after = std::mem::replace(&mut owned.prev, NIL);
                (arm, after)
            })
        };
        if !word.is_armed() || arm.seq != word.seq() {
            // Stopped (or restarted: a proxy follows) before it was taken in.
            // SAFETY: forwarded.
            unsafe { self.settle(inner, slot, index, word) };
            return;
        }
        // SAFETY: the caller owns the shard.
        let deferred = unsafe {
            self.core(|core| {
                let after = if after == REVIVE_AFTER_BATCH {
                    core.backlog_tail
                } else {
                    after
                };
                let wait = after != NIL && after != index;
                if wait {
                    core.deferred.push(Deferred {
                        after,
                        index,
                        gen: word.gen(),
                        arm,
                    });
                }
                wait
            })
        };
        if !deferred {
            // SAFETY: forwarded.
            unsafe { self.link(inner, slot, index, arm) };
        }
    }

    /// Links the revived STARTs that were waiting for entry `after` (see
    /// `Inner::revive`), in the order they were taken in, if each is still
    /// the arming its slot holds.
    ///
    /// # Safety
    /// As for [`apply_entry`](Self::apply_entry).
    #[cold]
    unsafe fn link_deferred(&self, inner: &Inner, after: u32) {
        loop {
            // SAFETY: forwarded.
            let next = unsafe {
                self.core(|core| {
                    let at = core.deferred.iter().position(|d| d.after == after)?;
                    Some(core.deferred.remove(at))
                })
            };
            let Some(Deferred {
                index, gen, arm, ..
            }) = next
            else {
                return;
            };
            // SAFETY: a deferred slot is allocated.
            let slot = unsafe { inner.arena.get_allocated(index) };
            let word = slot.load(Ordering::Acquire);
            if word.gen() != gen {
                continue; // Freed since (the owner cancelled it), maybe reused.
            }
            if word.is_armed() && word.seq() == arm.seq {
                // SAFETY: forwarded; the slot is this shard's and unlinked.
                unsafe { self.link(inner, slot, index, arm) };
            } else {
                // SAFETY: forwarded.
                unsafe { self.settle(inner, slot, index, word) };
            }
        }
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
    /// Not the wheel's next cascade point ([`Wheel::next_wakeup`]): a poll
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
            let next = self.publish_counters(Some(inner));
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
        // SAFETY: the slot is linked, so its owner-side fields are ours.
        let (seq, deadline) = unsafe { owned(slot, |owned| (owned.linked_seq(), owned.deadline)) };
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
    unsafe fn publish_counters(&self, exact: Option<&Inner>) -> Option<u64> {
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

    /// A slot this owner freed earlier, for a start on this shard.
    ///
    /// # Safety
    /// The caller must own the shard and hold no reference into its core
    /// (true in user code: callbacks, or an embedded owner between polls).
    pub(crate) unsafe fn take_local_slot(&self) -> Option<(u32, &Slot)> {
        // SAFETY: forwarded.
        let free = unsafe {
            self.core(|core| {
                if core.free_slots.len() > ROTATION {
                    core.free_slots.pop_front()
                } else {
                    None
                }
            })
        }?;
        // SAFETY: a slot of the service's arena (`FreeSlot`), which
        // outlives `self`.
        Some((free.index, unsafe { free.slot.as_ref() }))
    }

    /// A slot for the owner's START when its own free slots ran out: see
    /// [`Arena::alloc_line`] (the rest of a fresh group joins the owner's
    /// free slots).
    ///
    /// # Safety
    /// As for [`take_local_slot`](Self::take_local_slot).
    pub(crate) unsafe fn alloc_line(&self, arena: &Arena) -> u32 {
        // SAFETY: forwarded.
        unsafe {
            self.core(|core| {
                if core.borrowed == NIL {
                    core.borrowed = arena.pop_chunk();
                }
                if core.borrowed != NIL {
                    let index = core.borrowed;
                    core.borrowed = arena.next_in_chunk(index);
                    // A chunk's slots rested in other caches; each link is
                    // known only once the slot before it is read. Start
                    // loading the next one now, for the next START.
                    if let Some(next) = arena.get(core.borrowed) {
                        crate::wheel::prefetch(next);
                    }
                    return index;
                }
                arena.alloc_line(&mut Spares {
                    arena,
                    free: &mut core.free_slots,
                })
            })
        }
    }

    /// Refuses a poll that is already running on this shard (a callback
    /// trying to advance its own wheel).
    pub(crate) fn enter_poll(&self) -> bool {
        !self.polling.swap(true, Ordering::Acquire)
    }

    pub(crate) fn leave_poll(&self) {
        self.polling.store(false, Ordering::Release);
    }

    /// Fires everything due up to tick `now`, taking in messages as they come.
    ///
    /// # Safety
    /// The caller must have claimed the shard and called `enter_poll`.
    pub(crate) unsafe fn poll(&self, inner: &Arc<Inner>, shard: usize, mut now: u64) -> Polled {
        let mut polled = Polled::default();
        let mut pass_begun = false;
        loop {
            // Remote entries and expiries take turns, at most `BATCH` of each, so
            // that remote churn can delay firing by one batch at most, never
            // by the whole backlog (CONTRACT 20).
            // SAFETY (all blocks below): the caller owns the shard.
            let more_messages = unsafe { self.take_remote(inner) };
            if !pass_begun {
                // After the first batch of remote entries, which were armed
                // before this poll: a timer armed from here on for a tick
                // this poll has reached fires in the next poll (`hierarchy.rs`,
                // "Due now").
                unsafe { self.core(|core| core.wheel.begin_pass()) };
                pass_begun = true;
            }
            let mut fired_here = 0;
            while fired_here < BATCH {
                let due = unsafe { self.pop_due(inner, now) };
                let Some((index, deadline)) = due else {
                    break;
                };
                let ran = unsafe { self.expire(inner, shard, index, deadline, now) };
                polled.fired += usize::from(ran);
                fired_here += 1;
            }
            if fired_here < BATCH && !more_messages {
                unsafe { self.core(|core| core.wheel.end_pass()) };
                unsafe { self.publish_counters(None) };
                return polled;
            }
            // The poll goes on while more is due or entries it took in are
            // still waiting (a backlog beyond one batch, which a flood of
            // remote starts makes long): re-read the clock every round, so
            // that timers falling due meanwhile fire in this poll too. What
            // is pushed after the poll took the queue in waits for the next
            // poll (`tests/service_long_poll.rs`).
            now = now.max(inner.current_tick(shard));
        }
    }

    /// Unlinks the next slot due by tick `now` from the wheel: its index
    /// and deadline (the wheel's `now` moved there), or `None`.
    ///
    /// # Safety
    /// The caller owns the shard and holds no reference into its core.
    #[inline]
    unsafe fn pop_due(&self, inner: &Inner, now: u64) -> Option<(u32, u64)> {
        // SAFETY: forwarded.
        unsafe {
            self.core(|core| {
                let mut nodes = SlotNodes::new(&inner.arena);
                let index = core.wheel.pop_due(&mut nodes, now)?;
                core.linked -= 1;
                Some((index, core.wheel.now()))
            })
        }
    }

    /// Applies up to `BATCH` entries of the remote queue (those taken
    /// earlier first). Returns `true` if some it took in are still waiting.
    ///
    /// # Safety
    /// The caller owns the shard and holds no reference into its core. May
    /// be called again from user code that an entry runs (a callback's
    /// captures being dropped); no core reference is held across an entry.
    pub(crate) unsafe fn take_remote(&self, inner: &Inner) -> bool {
        for _ in 0..BATCH {
            // SAFETY (both): forwarded.
            let Some((slot, index)) = (unsafe { self.next_entry(inner, true) }) else {
                return false;
            };
            unsafe { self.apply_entry(inner, slot, index) };
        }
        // Entries pushed since the take wait for the next one: those the
        // owner needs before it would wake keep it from sleeping
        // (`publish_sleep`); the rest must not keep it busy (a thread that
        // starts and cancels far-off timers in a loop would).
        // SAFETY: forwarded.
        unsafe { self.has_backlog() }
    }

    /// Before the owner links its own START or RESTART: applies everything
    /// other threads queued before it, so that an arming that happened
    /// before the owner's is linked first and fires first among timers due
    /// on the same tick (CONTRACT 5; `tests/service_order.rs`). Costs one
    /// load of the queue's word when nothing waits.
    ///
    /// Applies the backlog left by an earlier batch and one snapshot of the
    /// queue (whatever was pushed before this call), not what keeps
    /// arriving meanwhile, so a flood of remote work cannot hold it up.
    ///
    /// # Safety
    /// As for [`take_remote`](Self::take_remote).
    #[inline]
    pub(crate) unsafe fn catch_up(&self, inner: &Inner) {
        // SAFETY: forwarded.
        if self.remote.is_empty() && unsafe { !self.has_backlog() } {
            return;
        }
        // SAFETY: forwarded.
        unsafe { self.catch_up_slow(inner) }
    }

    #[cold]
    unsafe fn catch_up_slow(&self, inner: &Inner) {
        // One snapshot of the queue, taken once the earlier backlog is
        // applied; nothing pushed after that.
        let mut refill = true;
        loop {
            // SAFETY (all): forwarded.
            let take_snapshot = refill && unsafe { !self.has_backlog() };
            refill &= !take_snapshot;
            let Some((slot, index)) = (unsafe { self.next_entry(inner, take_snapshot) }) else {
                return;
            };
            unsafe { self.apply_entry(inner, slot, index) };
        }
    }

    /// Applies one message: link the named arming, or settle a stopped slot.
    ///
    /// # Safety
    /// The caller owns the shard.
    pub(crate) unsafe fn reconcile(&self, inner: &Inner, message: Message) {
        // SAFETY: a message names a slot that a handle or its owner held
        // when it was made (`Inner::transition`, `Inner::publish`): allocated,
        // and its index reached this thread through the message's release
        // (the remote queue's push) or this thread made it.
        let slot = unsafe { inner.arena.get_allocated(message.index) };
        // SAFETY: forwarded; `slot` is the message's.
        unsafe { self.reconcile_slot(inner, slot, message) }
    }

    /// [`reconcile`](Self::reconcile) for a caller that already holds the
    /// message's slot (the owner's own STOP, RESTART or release, which just
    /// CASed its word).
    ///
    /// # Safety
    /// The caller owns the shard, and `slot` is the slot `message.index`
    /// names.
    #[inline]
    pub(crate) unsafe fn reconcile_slot(&self, inner: &Inner, slot: &Slot, message: Message) {
        let word = slot.load(Ordering::Acquire);
        if word.gen() != message.gen || word.arm() == super::state::FREE {
            return; // Stale: the slot was freed (and maybe reused) since.
        }
        if let Some(arm) = message.arm {
            if word.is_armed() && word.seq() == arm.seq {
                // SAFETY: forwarded.
                unsafe { self.link(inner, slot, message.index, arm) };
                return;
            }
        }
        // SAFETY: forwarded.
        unsafe { self.settle(inner, slot, message.index, word) };
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
        let mut rounding = arm.rounding;
        // SAFETY: the caller owns the shard, hence the wheel and the slot's
        // owner-side fields; no `owned` closure is live while `nodes` is used.
        unsafe {
            let linked = is_linked(slot);
            self.core(|core| {
                let mut nodes = SlotNodes::knowing(&inner.arena, index, slot);
                let now = core.wheel.now();
                let deadline = if arm.deadline < now {
                    rounding = 0;
                    now
                } else {
                    arm.deadline
                };
                if linked {
                    core.wheel.relink(&mut nodes, index, deadline);
                } else {
                    core.wheel.link(&mut nodes, index, deadline);
                    core.linked += 1;
                }
            });
            owned(slot, |owned| owned.set_linked(arm.seq, rounding));
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
    /// `slot` is slot `id.index()` of the arena.
    #[inline]
    pub(crate) unsafe fn restart_owned(
        &self,
        inner: &Inner,
        slot: &Slot,
        id: TimerId,
        deadline: u64,
        rounding: u8,
    ) -> bool {
        // What other threads queued before this RESTART goes first (same-
        // tick order, CONTRACT 5), and may have stopped or freed the timer.
        // SAFETY: forwarded.
        unsafe { self.catch_up(inner) };
        let word = slot.load(Ordering::Acquire);
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
            self.link(
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
            self.core(|core| {
                let mut nodes = SlotNodes::knowing(&inner.arena, index, slot);
                core.wheel.unlink(&mut nodes, index);
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
    /// # Safety
    /// The caller owns the shard and holds no reference into its core;
    /// `slot` is slot `index` of this shard.
    #[inline]
    pub(crate) unsafe fn cancel_owned(
        &self,
        inner: &Inner,
        slot: &Slot,
        index: u32,
        word: Word,
    ) -> bool {
        debug_assert!(word.is_armed() && !word.is(RUNNING) && !word.is(QUEUED));
        let freed = Word::free(super::state::next_gen(word.gen()));
        if slot.cas(word, freed).is_err() {
            return false;
        }
        // SAFETY: the caller owns the shard; the slot is FREE and on no
        // free list yet, so it is this thread's alone.
        unsafe {
            if is_linked(slot) {
                self.unlink(inner, slot, index);
            }
            self.recycle(inner, slot, index, word.gen());
        }
        true
    }

    /// A slot this owner has just set `FREE` (incarnation `gen` ended) and
    /// taken out of the wheel: counts it, puts it on this owner's free
    /// slots and drops its callback.
    ///
    /// # Safety
    /// The caller owns the shard and holds no reference into its core; the
    /// slot is FREE, unlinked, and on no free list.
    unsafe fn recycle(&self, inner: &Inner, slot: &Slot, index: u32, gen: u32) {
        // SAFETY: the caller's contract: no allocator can reach the slot.
        let callback = unsafe { owned(slot, |owned| callback::take_to_drop(&mut owned.callback)) };
        self.counters.freed.bump(1);
        // SAFETY: forwarded.
        unsafe { self.keep_free_slot(inner, slot, index) };
        // User code (the callback's captures) is dropped last, once the slot
        // is consistent: it may start, stop or drop other timers, or panic.
        let shard = usize::from(slot.shard.load(Ordering::Relaxed));
        drop_callback(inner, callback, TimerId::new(index, gen, inner.tag), shard);
    }

    /// Puts a FREE slot on this owner's free slots: it joins the back of
    /// the rotation; past `LOCAL_FREE_MAX`, the `SPILL` that have rested
    /// longest go back to the service as one chunk (see `ROTATION`,
    /// `Arena::push_chunk`).
    ///
    /// # Safety
    /// The caller owns the shard and holds no reference into its core; the
    /// slot is FREE, unlinked, holds no callback, and is on no free list.
    unsafe fn keep_free_slot(&self, inner: &Inner, slot: &Slot, index: u32) {
        // SAFETY: the caller owns the shard; no core reference is live.
        unsafe {
            self.core(|core| {
                core.free_slots.push_back(FreeSlot {
                    index,
                    slot: std::ptr::NonNull::from(slot),
                });
                if core.free_slots.len() > LOCAL_FREE_MAX + SPILL {
                    let mut first = NIL;
                    for _ in 0..SPILL {
                        if let Some(rested) = core.free_slots.pop_front() {
                            inner.arena.link_in_chunk(rested.index, first);
                            first = rested.index;
                        }
                    }
                    inner.arena.push_chunk(first);
                }
            })
        };
    }

    /// Fires the slot's current arming if it is still the one in the wheel.
    /// Returns `true` if a callback ran.
    ///
    /// # Safety
    /// The caller owns the shard.
    unsafe fn expire(
        &self,
        inner: &Arc<Inner>,
        shard: usize,
        index: u32,
        deadline: u64,
        now: u64,
    ) -> bool {
        // SAFETY (both): forwarded.
        let Some(mut fired) = (unsafe { self.fire(inner, index, deadline, now) }) else {
            return false;
        };
        fired.run(inner, shard);
        unsafe { self.finish(inner, fired) };
        true
    }

    /// The first half of an expiry: decides that the slot's current arming
    /// fires (if it is still the one in the wheel: else tidies up and
    /// returns `None`), takes its callback out and counts the fire. The
    /// callback then runs ([`Fired::run`]), or not (a collected timer
    /// dropped unrun, `Due`), and [`finish`](Self::finish) ends the expiry.
    ///
    /// # Safety
    /// The caller owns the shard; `poll` has just unlinked the slot.
    pub(crate) unsafe fn fire(
        &self,
        inner: &Arc<Inner>,
        index: u32,
        deadline: u64,
        now: u64,
    ) -> Option<Fired> {
        // SAFETY: a linked slot is allocated.
        let slot = unsafe { inner.arena.get_allocated(index) };
        // SAFETY (all `owned` calls here): the caller owns the shard. `poll`
        // has just unlinked the slot.
        let (linked_seq, rounding) =
            unsafe { owned(slot, |owned| (owned.linked_seq(), owned.linked_rounding())) };
        let mut word = slot.load(Ordering::Acquire);
        let running = loop {
            if !word.is_armed() || word.seq() != linked_seq {
                // Stopped, released or restarted since it was linked: a
                // message is on its way or has been handled; tidy up.
                unsafe { self.settle(inner, slot, index, word) };
                return None;
            }
            let running = word.with_arm(FIRED).with(RUNNING);
            // The linearisation point of "this arming fires".
            match slot.cas(word, running) {
                Ok(_) => break running,
                Err(actual) => word = actual,
            }
        };

        let id = TimerId::new(index, word.gen(), inner.tag);
        let callback = unsafe { owned(slot, |owned| owned.callback.take()) };
        let (period, burst) = callback
            .as_ref()
            .map_or((0, false), |callback| callback.period());
        // A periodic timer decides its next deadline (and what it skipped)
        // from the tick it fires at, before the callback runs.
        let (next, overruns) = if period > 0 {
            next_periodic_deadline(deadline, period, now, burst)
        } else {
            (0, 0)
        };
        // Lateness on the real clock, from the deadline asked for to this
        // callback's start (CONTRACT 2): not from the tick the poll began
        // at, which would hide the time spent on the callbacks before this
        // one, nor from the tick the deadline was rounded up to, which
        // would hide up to a tick of it.
        let asked_for = deadline
            .saturating_mul(inner.tick_nanos)
            .saturating_sub(inner.ticks.fraction_nanos(rounding));
        let lateness = inner.clock.raw_nanos().saturating_sub(asked_for);
        self.counters.record_fire(lateness);
        Some(Fired {
            index,
            id,
            deadline,
            now,
            overruns,
            lateness,
            period,
            next,
            running,
            callback,
        })
    }

    /// The second half of an expiry: puts the callback back, re-arms a
    /// periodic timer unless anyone stopped, restarted or released it
    /// meanwhile, and settles the slot.
    ///
    /// # Safety
    /// The caller owns the shard and holds no reference into its core;
    /// `fired` came from [`fire`](Self::fire) on this shard.
    pub(crate) unsafe fn finish(&self, inner: &Inner, fired: Fired) {
        let Fired {
            index,
            period,
            next,
            overruns,
            running,
            callback,
            ..
        } = fired;
        // SAFETY: the slot was allocated when fired, and stays so while
        // RUNNING (nobody frees a running slot).
        let slot = unsafe { inner.arena.get_allocated(index) };
        unsafe { owned(slot, |owned| owned.callback = callback) };

        // Periodic: re-arm unless anyone stopped, restarted or released it
        // while the callback ran (each of those changes the word).
        if period > 0 {
            self.counters.overruns.bump(overruns);
            let rearmed = running.with_arm(ARMED).without(RUNNING).next_seq();
            if slot.cas(running, rearmed).is_ok() {
                // On the period's grid: no rounding of its own.
                let arm = Arm {
                    seq: rearmed.seq(),
                    rounding: 0,
                    deadline: next,
                };
                unsafe { self.link(inner, slot, index, arm) };
                return;
            }
        }
        let after = Word(slot.state.fetch_and(!(RUNNING | HALTED), Ordering::AcqRel))
            .without(RUNNING)
            .without(HALTED);
        unsafe { self.settle(inner, slot, index, after) };
    }

    /// Collect-then-run (`ShardGuard::poll_due`): the next timer due by
    /// tick `now`, fired by [`fire`](Self::fire) but not run. The first call
    /// after a pass ended takes in what the remote queue held when it was
    /// called (`catch_up`) and begins a pass; the
    /// call that finds nothing more due ends it, so a timer armed for the
    /// reached tick while the caller runs what it collected waits for the
    /// next pass (`hierarchy.rs`, "Due now").
    ///
    /// # Safety
    /// The caller owns the shard, called `enter_poll`, and holds no
    /// reference into its core.
    pub(crate) unsafe fn collect(&self, inner: &Arc<Inner>, now: u64) -> Option<Fired> {
        // SAFETY (all blocks): forwarded.
        if !unsafe { self.core(|core| core.wheel.in_pass()) } {
            // What other threads queued before this call, not what keeps
            // arriving while it is applied: a flood of remote work must not
            // hold the owner here (CONTRACT 20;
            // `tests/service_due.rs::poll_due_takes_in_one_snapshot_of_the_queue_not_a_flood`).
            unsafe { self.catch_up(inner) };
            unsafe { self.core(|core| core.wheel.begin_pass()) };
        }
        loop {
            let due = unsafe { self.pop_due(inner, now) };
            let Some((index, deadline)) = due else {
                unsafe { self.core(|core| core.wheel.end_pass()) };
                unsafe { self.publish_counters(None) };
                return None;
            };
            if let Some(fired) = unsafe { self.fire(inner, index, deadline, now) } {
                unsafe { self.publish_counters(None) };
                return Some(fired);
            }
        }
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
    /// The caller must have claimed the shard (it is not polling).
    pub(crate) fn sweep(&self, inner: &Inner, shard: usize) {
        // Queued entries are moot now: the sweep looks at every slot itself.
        self.drop_remote(inner);
        // SAFETY: the caller has claimed the shard. The slots are marked
        // unlinked in the first pass below, before anything reads them.
        unsafe {
            self.core(|core| {
                core.wheel = Hierarchy::starting_at(core.wheel.now());
                core.linked = 0;
                core.backlog = NIL;
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
    drop_captures(inner, callback, id, shard);
}

/// [`drop_callback`] for captures that need dropping: out of line, so
/// that the common callback that needs none costs its caller a test.
#[inline(never)]
fn drop_captures(inner: &Inner, callback: Callback, id: TimerId, shard: usize) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(callback))) {
        report_panic(inner, id, shard, PanicSite::Drop, payload);
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

/// The next deadline of a periodic timer whose current deadline `last` is
/// being fired at tick `now`, and how many periods that skips (overruns).
///
/// Drift-free: deadlines stay on the grid `last + k * period`. Without
/// `burst`, a late owner fires the timer once and skips every grid point
/// already passed (counted as overruns); with `burst`, every period fires in
/// turn.
pub(crate) fn next_periodic_deadline(last: u64, period: u64, now: u64, burst: bool) -> (u64, u64) {
    if burst {
        return (last.saturating_add(period), 0);
    }
    let missed = now.saturating_sub(last) / period;
    let next = last.saturating_add(missed.saturating_add(1).saturating_mul(period));
    (next, missed)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::next_periodic_deadline;

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
