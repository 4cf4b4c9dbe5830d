//! The owner's poll: remote entries and expiries in turns, each due slot
//! fired by its CAS to `FIRED | RUNNING` (which decides the race with a
//! STOP), its callback run on this thread, then the timer re-armed (a
//! periodic one) or settled.

use super::*;

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

impl Shard {
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
        // Armed before this poll: linked before its pass begins (a timer
        // armed for a reached tick during a pass waits for the next one).
        // SAFETY: the caller owns the shard.
        unsafe { self.flush_pending(inner) };
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
                // The remote STOPs this owner batched, its callbacks' among
                // them, go to their shards now (`shard/stops.rs`).
                unsafe { self.flush_stops(inner) };
                unsafe { self.publish_counters(inner, false) };
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
            unsafe { self.flush_pending(inner) };
            unsafe { self.core(|core| core.wheel.begin_pass()) };
        }
        loop {
            let due = unsafe { self.pop_due(inner, now) };
            let Some((index, deadline)) = due else {
                unsafe { self.core(|core| core.wheel.end_pass()) };
                unsafe { self.publish_counters(inner, false) };
                return None;
            };
            if let Some(fired) = unsafe { self.fire(inner, index, deadline, now) } {
                unsafe { self.publish_counters(inner, false) };
                return Some(fired);
            }
        }
    }
}
