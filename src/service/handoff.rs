//! How a thread that does not own a shard hands it work: the remote queue
//! with its backpressure, help inside a shard its sleeping driver lent out,
//! and waking the owner.
//!
//! * `queue`: push an entry (a START's slot, a STOP's slot, a RESTART's
//!   proxy; `remote.rs`), waiting for an owner that has fallen
//!   `PENDING_LIMIT` entries behind (CONTRACT 20), and wake it if the entry
//!   is due before its sleep ends (CONTRACT 21).
//! * `help`: while a driver sleeps its shard is lent (`Shard::lend`); a
//!   thread that restarts a timer there, or releases one that is not armed,
//!   enters the shard, takes in what is queued and applies its operation
//!   itself (`Helping` marks it as the owner meanwhile).

use super::*;

/// A helper's stay inside a lent shard (see [`Inner::help`]): while it
/// lives this thread counts as the shard's owner; dropping it, also while
/// unwinding, restores the thread's own marker and leaves the shard.
pub(super) struct Helping<'a> {
    target: &'a Shard,
    previous: (usize, usize),
}

impl<'a> Helping<'a> {
    #[inline]
    pub(super) fn enter(service: usize, shard: usize, target: &'a Shard) -> Self {
        let previous = OWNED_SHARD.with(|owned| owned.replace((service, shard)));
        Helping { target, previous }
    }
}

impl Drop for Helping<'_> {
    #[inline]
    fn drop(&mut self) {
        OWNED_SHARD.with(|owned| owned.set(self.previous));
        self.target.end_help();
    }
}

impl Inner {
    /// Hands a message to a shard that this thread does not hold: applied
    /// directly if the shard is lent (`help`), else queued for its owner
    /// (`queue`).
    pub(super) fn send_remote(&self, shard: usize, message: Message) {
        let target = &self.shards[shard];
        target.note_activity();
        if !self.help(shard, message) {
            self.queue(shard, message, false);
        }
    }

    /// Queues an arming for a shard's owner (waiting first if too much is
    /// queued already, CONTRACT 20), and wakes the owner if it sleeps past
    /// its deadline, or if too much has piled up. `started`: a START, whose
    /// slot `publish` left `QUEUED` and is pushed itself; else a RESTART,
    /// which travels in a proxy slot (`remote.rs`).
    pub(super) fn queue(&self, shard: usize, message: Message, started: bool) {
        let target = &self.shards[shard];
        let owner = OWNED_SHARD.with(|owned| owned.get().0) == self.address();
        let limit = if owner {
            OWNER_PENDING_LIMIT
        } else {
            PENDING_LIMIT
        };
        if target.remote.len() as usize >= limit {
            self.wait_for_backlog(shard, limit);
        }
        let (index, slot) = if started {
            // SAFETY: the slot `publish` just filled for this START.
            (message.index, unsafe { self.slot(message.index) })
        } else {
            let index = self.alloc_slot();
            // SAFETY: just allocated: free and this thread's alone.
            let proxy = unsafe { self.slot(index) };
            // SAFETY: as above.
            unsafe { remote::write_proxy(proxy, message) };
            (index, proxy)
        };
        // An arming either way (a START's slot or a RESTART's proxy).
        let pending = target.remote.push(index, slot, true) as usize;
        // An arming needs the owner by its deadline, and at most one
        // producer per sleep wins the wake (`Shard::claim_wake`). Past
        // `WAKE_AFTER_PENDING` entries the owner is needed now whatever they
        // say, which bounds what a queue holds while its owner sleeps; that
        // wake goes through the same claim, so a sleep already interrupted is
        // not interrupted again (`many_remote_starts_wake_a_sleeping_owner_once`).
        let needed_by = match message.arm {
            Some(arm) if pending < WAKE_AFTER_PENDING => arm.deadline,
            _ => 0,
        };
        if target.queued_for(needed_by) {
            self.wake(shard);
        }
    }

    /// Applies `message` directly if `shard` is lent (its owner sleeps, see
    /// `Shard::lend`), after taking in whatever waits in its remote queue.
    /// Returns whether it was applied; one that was not must be queued: the
    /// shard is held or not lent, the service is shutting down, or more is
    /// waiting than one batch (it then goes behind that).
    fn help(&self, shard: usize, message: Message) -> bool {
        let target = &self.shards[shard];
        if !target.try_help() {
            return false;
        }
        // Inside, this thread acts as the owner: operations that user code
        // makes meanwhile (a callback's captures dropped by `settle`) are
        // applied inline too. Leaving (the marker restored, the shard handed
        // back to its owner) is a guard's drop, so it happens on unwinding
        // too: a helper that left the shard held would wedge its owner.
        let helping = Helping::enter(self.address(), shard, target);
        // SAFETY (both blocks): this thread holds the lent shard (`try_help`),
        // and holds no reference into its core.
        let applied = !self.is_shut_down()
            && unsafe { !target.take_remote(self) && !target.has_backlog() }
            && target.remote.is_empty();
        if applied {
            unsafe {
                target.reconcile(self, message);
                target.refresh_counters(message.arm.map(|arm| arm.deadline));
            }
        }
        drop(helping);
        self.left_help(shard);
        if applied {
            if let Some(arm) = message.arm {
                if target.claim_wake(Some(arm.deadline)) {
                    self.wake(shard);
                }
            }
        }
        applied
    }

    /// Applies what waits in `shard`'s remote queue if the shard is lent
    /// (its owner sleeps), as its owner would; otherwise does nothing.
    ///
    /// A thread whose `try_help` finds another helper inside leaves what it
    /// queued to that helper: every helper, once it has left, looks at the
    /// queue again (`left_help`) and takes in what was pushed while it was
    /// inside. Without that look a release pushed then stayed queued for as
    /// long as the owner slept (shuttle,
    /// `sleeping_driver_threads_reclaim_stopped_timers`: one slot of 105 never
    /// freed). The push and the failed `try_help` on one side, leaving and
    /// the look on the other, are all SeqCst: one side sees the other.
    ///
    /// At most `HELP_PASSES` passes: other threads' STARTs keep a lent
    /// shard's queue from ever being empty for long, and a thread that
    /// released one timer must not be kept doing its owner's work for as
    /// long as they come. What a last pass leaves is what any stop leaves
    /// that is not due to wake the owner: within the reclaim bound
    /// (`RemoteQueue::reclaim_due`, CONTRACT 13).
    pub(super) fn help_reclaim(&self, shard: usize) {
        /// Passes one call makes at most (each takes the whole queue in).
        const HELP_PASSES: usize = 4;
        let target = &self.shards[shard];
        for _ in 0..HELP_PASSES {
            if !target.try_help() {
                return;
            }
            let helping = Helping::enter(self.address(), shard, target);
            if !self.is_shut_down() {
                // SAFETY: this thread holds the lent shard (`try_help`), and
                // holds no reference into its core.
                unsafe {
                    target.take_remote(self);
                    target.refresh_counters(None);
                }
            }
            drop(helping);
            if self.is_shut_down() || target.remote.is_empty() {
                return;
            }
        }
    }

    /// After a helper left `shard` (`help`, `restart_lent`): takes in what
    /// other threads queued while it was inside, which they left to it
    /// (see [`help_reclaim`](Self::help_reclaim)).
    #[inline]
    pub(super) fn left_help(&self, shard: usize) {
        if !self.shards[shard].remote.is_empty() {
            self.help_reclaim(shard);
        }
    }

    /// Backpressure (CONTRACT 20): `limit` messages (`PENDING_LIMIT`, or
    /// `OWNER_PENDING_LIMIT` for a producer that owns a shard) already wait for
    /// `shard`'s owner, so this producer gives the owner time to take them
    /// in before adding another: it spins, yields, then sleeps in 50 µs
    /// steps, for about a millisecond at most, and then goes ahead anyway.
    ///
    /// Slowed, never blocked: an owner that has stopped polling altogether
    /// must not block other threads (CONTRACT 7), so the wait is bounded;
    /// producers that outrun an owner run at about one operation per
    /// millisecond each until it catches up, which is what keeps the owner's
    /// backlog short enough for its timers to fire. Waits are counted
    /// (`Stats::held_back`).
    ///
    /// An owner (in a callback, or an embedded owner between polls) takes in
    /// its own remote queue while it waits, so two owners that each wait for the
    /// other both make progress.
    #[cold]
    fn wait_for_backlog(&self, shard: usize, limit: usize) {
        /// Backoff rounds: 64 spins, 64 yields, then 20 sleeps of 50 µs...
        const MAX_ROUNDS: u32 = 148;
        /// ... but no longer than this in all: on a loaded machine each short
        /// sleep can last a scheduler quantum, and the hold must stay about a
        /// millisecond whatever the load.
        const MAX_HOLD: Duration = Duration::from_millis(1);
        let began = std::time::Instant::now();
        let target = &self.shards[shard];
        target.counters.held_back.fetch_add(1, Ordering::Relaxed);
        let (service, own) = OWNED_SHARD.with(|owned| owned.get());
        // Make sure the owner is not asleep; after that, waking it again on
        // every turn would only take CPU from it.
        if target.queued_for(0) {
            self.wake(shard);
        }
        let mut spins = 0;
        while target.remote.len() as usize >= limit
            && spins < MAX_ROUNDS
            && began.elapsed() < MAX_HOLD
            && !self.is_shut_down()
        {
            if service == self.address() {
                // SAFETY: this thread holds the claim of shard `own`, and no
                // reference into its core is live while user code runs.
                unsafe { self.shards[own].take_remote(self) };
            }
            backoff(&mut spins);
        }
    }

    pub(crate) fn wake(&self, shard: usize) {
        self.drivers.wake(shard, &self.config);
    }
}
