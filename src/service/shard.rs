//! One shard: a hierarchical wheel, its intake, and the owner-side half of
//! the protocol (fire, re-arm, settle, free).
//!
//! Everything in `ShardCore` and every slot's `owned` fields belong to the
//! thread that has claimed the shard (`claimed` is the token, taken with an
//! acquire CAS and given back with a release store). All of it runs on that
//! thread; nothing here ever waits for another thread.

use std::panic::{catch_unwind, AssertUnwindSafe};

use super::arena::{CacheLine, Owned, Slot};
use super::intake::{Intake, Message};
use super::links::SlotNodes;
use super::state::{Word, ARMED, CANCELLED, FIRED, RUNNING};
use super::stats::ShardCounters;
use super::{Expiry, Inner, PanicReport, TimerId, RUNNING_CALLBACK};
use crate::sync::{Arc, AtomicBool, AtomicU64, AtomicUsize, Ordering, UnsafeCell};
use crate::wheel::{Hierarchy, UNLINKED};

// SAFETY: `core` is only touched by the thread that holds the shard's claim
// (an acquire CAS on `claimed`, released with a release store), see the
// module docs; every other field is atomic or itself `Sync`.
unsafe impl Sync for Shard {}

/// `sleep_until` value while the owner is awake and will look at its intake
/// before it sleeps again: producers need not wake it.
const AWAKE: u64 = 0;

pub(crate) struct Shard {
    pub(crate) intake: Intake,
    /// The tick the owner sleeps until (`u64::MAX`: until woken), or `AWAKE`.
    sleep_until: AtomicU64,
    claimed: AtomicBool,
    /// Set while a poll runs, to refuse a poll from inside a callback.
    polling: AtomicBool,
    core: UnsafeCell<ShardCore>,
    pub(crate) counters: ShardCounters,
    /// `Timer` handles alive for this shard's timers; while it is above 0 the
    /// shard holds one strong count of the service for them (see `timer.rs`).
    pub(crate) handles: CacheLine<AtomicUsize>,
    /// The highest clock reading used for this shard (see `clock.rs`).
    pub(crate) clock_mark: CacheLine<std::sync::atomic::AtomicU64>,
}

struct ShardCore {
    /// The wheel; its entries live in the slots (see `links.rs`).
    wheel: Hierarchy,
    /// Slots linked into the wheel.
    linked: usize,
    /// Slots this owner freed, kept for its own next starts: the per-core
    /// pattern (start and stop on the owner's thread) then never touches the
    /// service-wide free list, a cache line every shard would share.
    free_slots: Vec<u32>,
}

/// How many freed slots an owner keeps before handing them back to the
/// service-wide free list (bounds what idle shards hold on to).
const LOCAL_FREE_MAX: usize = 1024;

/// What [`Shard::poll`] did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Polled {
    pub(crate) fired: usize,
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
            intake: Intake::new(),
            sleep_until: AtomicU64::new(u64::MAX),
            claimed: AtomicBool::new(false),
            polling: AtomicBool::new(false),
            core: UnsafeCell::new(ShardCore {
                wheel: Hierarchy::starting_at(0),
                linked: 0,
                free_slots: Vec::new(),
            }),
            counters: ShardCounters::default(),
            handles: CacheLine(AtomicUsize::new(0)),
            clock_mark: CacheLine(std::sync::atomic::AtomicU64::new(0)),
        }
    }

    pub(crate) fn try_claim(&self) -> bool {
        self.claimed
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    pub(crate) fn unclaim(&self) {
        self.claimed.store(false, Ordering::Release);
    }

    /// Producer side: does a message due at `deadline` need the owner woken?
    pub(crate) fn should_wake(&self, deadline: u64) -> bool {
        // SeqCst: see `publish_sleep`.
        deadline < self.sleep_until.load(Ordering::SeqCst)
    }

    /// Producer side: is the owner asleep (or not yet running)?
    pub(crate) fn is_asleep(&self) -> bool {
        self.sleep_until.load(Ordering::SeqCst) != AWAKE
    }

    /// Owner side, before sleeping until `until` (`None`: until woken).
    /// Returns `false` if messages arrived meanwhile (poll again instead).
    ///
    /// The store and the intake check are SeqCst, as are the producer's push
    /// and `should_wake` load: in every interleaving either the owner sees the
    /// message here or the producer sees the new deadline and wakes it.
    pub(crate) fn publish_sleep(&self, until: Option<u64>) -> bool {
        self.sleep_until
            .store(until.unwrap_or(u64::MAX).max(1), Ordering::SeqCst);
        if !self.intake.is_empty() {
            self.sleep_until.store(AWAKE, Ordering::SeqCst);
            return false;
        }
        true
    }

    pub(crate) fn mark_awake(&self) {
        self.sleep_until.store(AWAKE, Ordering::SeqCst);
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

    /// The tick by which this shard needs polling (after taking in pending
    /// messages): the earliest deadline, or earlier where far timers must
    /// cascade. O(levels) ([`Wheel::next_wakeup`]), so an owner may ask before
    /// every sleep whatever the number of timers.
    ///
    /// # Safety
    /// The caller must have claimed the shard.
    pub(crate) unsafe fn next_deadline(&self, inner: &Arc<Inner>) -> Option<u64> {
        // SAFETY: forwarded.
        unsafe {
            self.take_intake(inner);
            self.core(|core| core.wheel.next_wakeup())
        }
    }

    /// A slot this owner freed earlier, for a start on this shard.
    ///
    /// # Safety
    /// The caller must own the shard and hold no reference into its core
    /// (true in user code: callbacks, or an embedded owner between polls).
    pub(crate) unsafe fn take_local_slot(&self) -> Option<u32> {
        // SAFETY: forwarded.
        unsafe { self.core(|core| core.free_slots.pop()) }
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
    pub(crate) unsafe fn poll(&self, inner: &Arc<Inner>, shard: usize, now: u64) -> Polled {
        let mut polled = Polled::default();
        loop {
            // SAFETY (all blocks below): the caller owns the shard.
            unsafe { self.take_intake(inner) };
            let due = unsafe {
                self.core(|core| {
                    let mut nodes = SlotNodes::new(&inner.arena);
                    let index = core.wheel.pop_due(&mut nodes, now)?;
                    core.linked -= 1;
                    Some((index, core.wheel.now()))
                })
            };
            match due {
                Some((index, deadline)) => {
                    let ran = unsafe { self.expire(inner, shard, index, deadline, now) };
                    polled.fired += usize::from(ran);
                }
                None if self.intake.is_empty() => {
                    // SAFETY: the caller owns the shard.
                    let armed = unsafe { self.core(|core| core.linked) };
                    self.counters.armed.set(armed as u64);
                    return polled;
                }
                None => {}
            }
        }
    }

    /// # Safety
    /// The caller owns the shard.
    unsafe fn take_intake(&self, inner: &Inner) {
        if self.intake.is_empty() {
            return;
        }
        // SAFETY: forwarded.
        self.intake
            .drain(|message| unsafe { self.reconcile(inner, message) });
    }

    /// Applies one message: link the named arming, or settle a stopped slot.
    ///
    /// # Safety
    /// The caller owns the shard.
    pub(crate) unsafe fn reconcile(&self, inner: &Inner, message: Message) {
        let Some(slot) = inner.arena.get(message.index) else {
            return;
        };
        let word = slot.load(Ordering::Acquire);
        if word.gen() != message.gen || word.arm() == super::state::FREE {
            return; // Stale: the slot was freed (and maybe reused) since.
        }
        if let Some((seq, deadline)) = message.arm {
            if word.is_armed() && word.seq() == seq {
                // SAFETY: forwarded.
                unsafe { self.link(inner, slot, message.index, deadline, seq) };
                return;
            }
        }
        // SAFETY: forwarded.
        unsafe { self.settle(inner, slot, message.index, word) };
    }

    /// Puts arming `seq` of a slot into the wheel at `deadline`, moving it
    /// if an older arming is linked (it goes last among its tick's timers,
    /// as a new arming does). A deadline at or before the last processed
    /// tick goes to the next tick.
    ///
    /// # Safety
    /// The caller owns the shard.
    unsafe fn link(&self, inner: &Inner, slot: &Slot, index: u32, deadline: u64, seq: u32) {
        // SAFETY: the caller owns the shard, hence the wheel and the slot's
        // owner-side fields; no `owned` closure is live while `nodes` is used.
        unsafe {
            let linked = is_linked(slot);
            self.core(|core| {
                let mut nodes = SlotNodes::new(&inner.arena);
                let now = core.wheel.now();
                let deadline = if deadline <= now {
                    now.saturating_add(1)
                } else {
                    deadline
                };
                if linked {
                    core.wheel.relink(&mut nodes, index, deadline);
                } else {
                    core.wheel.link(&mut nodes, index, deadline);
                    core.linked += 1;
                }
            });
            owned(slot, |owned| owned.linked_seq = seq);
        }
    }

    /// Takes a linked slot out of the wheel.
    ///
    /// # Safety
    /// The caller owns the shard and the slot is linked.
    unsafe fn unlink(&self, inner: &Inner, index: u32) {
        // SAFETY: forwarded.
        unsafe {
            self.core(|core| {
                let mut nodes = SlotNodes::new(&inner.arena);
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
    unsafe fn settle(&self, inner: &Inner, slot: &Slot, index: u32, mut word: Word) {
        // SAFETY: the caller owns the shard.
        let stale = unsafe {
            is_linked(slot)
                && owned(slot, |owned| {
                    !word.is_armed() || owned.linked_seq != word.seq()
                })
        };
        if stale {
            // SAFETY: as above; the slot is linked.
            unsafe { self.unlink(inner, index) };
        }
        loop {
            if !word.is_reclaimable() {
                return;
            }
            // Nobody else can change a reclaimable word (no handle, not
            // armed, not running), so this CAS only fails spuriously never;
            // loop anyway for robustness.
            let next_gen = word.gen().wrapping_add(1);
            let freed = super::state::Word::free(next_gen);
            match slot.cas(word, freed) {
                Ok(_) => break,
                Err(actual) => word = actual,
            }
        }
        // SAFETY: the caller owns the shard, and the slot is FREE now but
        // not yet on the free list, so no allocator can reach it. It is not
        // linked: a reclaimable word is not armed, so it was unlinked above
        // (or popped by `poll`).
        let callback = unsafe {
            debug_assert!(!is_linked(slot));
            owned(slot, |owned| owned.callback.take())
        };
        self.counters.freed.bump(1);
        if word.gen().wrapping_add(1) != 0 {
            // SAFETY: the caller owns the shard; no core reference is live.
            let keep = unsafe {
                self.core(|core| {
                    let keep = core.free_slots.len() < LOCAL_FREE_MAX;
                    if keep {
                        core.free_slots.push(index);
                    }
                    keep
                })
            };
            if !keep {
                inner.arena.free(index);
            }
        }
        // Generation 0 is never valid: a slot whose generation wrapped is
        // retired rather than reused, so no stale id can ever match it.
        // User code (the callback's captures) is dropped last, once the slot
        // is consistent: it may start, stop or drop other timers.
        drop(callback);
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
        let slot = inner.arena.get(index).expect("linked slot exists");
        // SAFETY (all `owned` calls here): the caller owns the shard. `poll`
        // has just unlinked the slot.
        let linked_seq = unsafe { owned(slot, |owned| owned.linked_seq) };
        let mut word = slot.load(Ordering::Acquire);
        let running = loop {
            if !word.is_armed() || word.seq() != linked_seq {
                // Stopped, released or restarted since it was linked: a
                // message is on its way or has been handled; tidy up.
                unsafe { self.settle(inner, slot, index, word) };
                return false;
            }
            let running = word.with_arm(FIRED).with(RUNNING);
            // The linearisation point of "this arming fires".
            match slot.cas(word, running) {
                Ok(_) => break running,
                Err(actual) => word = actual,
            }
        };

        let id = TimerId::new(index, word.gen());
        let mut callback = unsafe { owned(slot, |owned| owned.callback.take()) };
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
        let lateness = now.saturating_sub(deadline);
        self.counters.record_fire(lateness);
        if let Some(callback) = callback.as_mut() {
            let mut expiry = Expiry {
                inner,
                id,
                shard,
                deadline,
                now,
                overruns,
            };
            let previous =
                RUNNING_CALLBACK.with(|running| running.replace((inner.address(), id.to_raw())));
            let result = catch_unwind(AssertUnwindSafe(|| callback.fire(&mut expiry)));
            RUNNING_CALLBACK.with(|running| running.set(previous));
            if let Err(payload) = result {
                self.counters.panics.bump(1);
                let report = PanicReport::new(id, shard, payload);
                if let Some(hook) = &inner.config.panic_hook {
                    // A panicking hook must not take the shard down either.
                    let _ = catch_unwind(AssertUnwindSafe(|| hook(&report)));
                } else {
                    eprintln!("tickwheel: {report}");
                }
            }
        }
        unsafe { owned(slot, |owned| owned.callback = callback) };

        // Periodic: re-arm unless anyone stopped, restarted or released it
        // while the callback ran (each of those changes the word).
        if period > 0 {
            self.counters.overruns.bump(overruns);
            let rearmed = running.with_arm(ARMED).without(RUNNING).next_seq();
            if slot.cas(running, rearmed).is_ok() {
                unsafe { self.link(inner, slot, index, next, rearmed.seq()) };
                return true;
            }
        }
        let after = Word(slot.state.fetch_and(!RUNNING, Ordering::AcqRel)).without(RUNNING);
        unsafe { self.settle(inner, slot, index, after) };
        true
    }

    /// Shutdown: drop every callback of this shard without running it and
    /// free whatever no handle holds.
    ///
    /// The caller must have claimed the shard (it is not polling).
    pub(crate) fn sweep(&self, inner: &Inner, shard: usize) {
        // Messages are moot now: the sweep looks at every slot itself.
        self.intake.drain(|_| {});
        // SAFETY: the caller has claimed the shard. The slots are marked
        // unlinked one by one below.
        unsafe {
            self.core(|core| {
                core.wheel = Hierarchy::starting_at(core.wheel.now());
                core.linked = 0;
            })
        };
        inner.arena.for_each(|index, slot| {
            let mut word = slot.load(Ordering::Acquire);
            if word.arm() == super::state::FREE
                || slot.shard.load(Ordering::Relaxed) as usize != shard
            {
                return;
            }
            // Disarm (and stop any periodic continuation).
            loop {
                let new = if word.is_armed() {
                    word.with_arm(CANCELLED).next_seq()
                } else {
                    word
                };
                match slot.cas(word, new) {
                    Ok(_) => {
                        word = new;
                        break;
                    }
                    Err(actual) => word = actual,
                }
            }
            // SAFETY: we own the shard, and this slot belongs to it (its
            // shard field was written before the word we acquired).
            let callback = unsafe {
                slot.bucket.with_mut(|bucket| *bucket = UNLINKED);
                owned(slot, |owned| owned.callback.take())
            };
            drop(callback);
            // SAFETY: as above.
            unsafe { self.settle(inner, slot, index, word) };
        });
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
