//! Who is inside a shard (its owner, or a helper while a sleeping owner
//! has lent it out), and the handshake by which other threads wake a
//! sleeping owner without a wakeup ever being lost.

use super::*;

/// `claimed`: someone is inside the shard (its owner, or a helper while it is lent).
const HELD: usize = 1;

/// `claimed`: the owner sleeps and has lent the shard to helpers (see `lend`).
const LENT: usize = 2;

/// `claimed`: the owner of a lent shard wants it back; no new helper may enter.
const WANTED: usize = 4;

/// Yields an owner taking its shard back makes, once its backoff is done,
/// before it sleeps between tries (see `take_back`).
const TAKE_BACK_YIELDS: u32 = 64;

impl Shard {
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
        let mut yields = 0u32;
        while self
            .claimed
            .compare_exchange_weak(LENT | WANTED, HELD, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            // Spin, then yield: a helper is inside for a few hundred
            // nanoseconds unless it was preempted, and then yielding is what
            // lets it run again soonest (a sleep would add the timer slack
            // and a wakeup to every such wait). But a yield lets only
            // threads of the same priority run: an owner at a real-time
            // priority (`DriverPriority::RealTime`) would keep a normal
            // helper preempted on its own core off it for good. So a wait
            // that outlasts the yields sleeps, which lets any thread run.
            if !backoff.is_completed() {
                backoff.snooze();
            } else if yields < TAKE_BACK_YIELDS {
                yields += 1;
                crate::sync::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(10));
            }
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
        let queued = self.remote.push(index, slot, false);
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
}
