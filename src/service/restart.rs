//! RESTART: move an armed (or fired, or cancelled) timer to a new deadline.
//!
//! The word's CAS to `ARMED` with the next `seq` decides the race with a
//! fire or a STOP (`state.rs`). The thread that holds the timer's shard (its
//! owner, or a thread inside a lent shard) then moves the wheel entry
//! itself, with no CAS when the timer is armed and its entry current
//! (`Shard::restart_owned`); any other thread sends the new deadline in a
//! proxy slot on the shard's remote queue (`handoff.rs`, `remote.rs`).

use super::handoff::Helping;
use super::stop::Decision;
use super::*;

/// A RESTART's new deadline: a delay from now, or an instant already on the
/// service clock.
#[derive(Clone, Copy)]
enum RestartTo {
    After(Duration),
    AtNanos(u64),
}

impl Inner {
    /// RESTART: arm again with a new deadline, whatever the state.
    pub(crate) fn restart(&self, id: TimerId, delay: Duration) -> Result<Restart, TimerError> {
        self.restart_looked_up::<false>(id, RestartTo::After(delay))
    }

    /// [`restart`](Self::restart) from a [`Timer`] handle, whose slot
    /// needs no checked lookup (see `held`).
    #[inline]
    pub(crate) fn restart_held(&self, id: TimerId, delay: Duration) -> Result<Restart, TimerError> {
        self.restart_looked_up::<true>(id, RestartTo::After(delay))
    }

    /// RESTART to `nanos` on the service clock (a deadline fixed earlier:
    /// `future::Sleep::reset`), by the handle's holder.
    #[inline]
    pub(crate) fn restart_held_at_nanos(
        &self,
        id: TimerId,
        nanos: u64,
    ) -> Result<Restart, TimerError> {
        self.restart_looked_up::<true>(id, RestartTo::AtNanos(nanos))
    }

    #[inline(always)]
    fn restart_looked_up<const HELD: bool>(
        &self,
        id: TimerId,
        to: RestartTo,
    ) -> Result<Restart, TimerError> {
        let find = |id| if HELD { self.held(id) } else { self.live(id) };
        if self.is_shut_down() {
            return Err(TimerError::Shutdown);
        }
        // The deadline is computed before the slot is read: the slot's line
        // is often a cache miss (a random one of many idle timeouts), and
        // this arithmetic need not wait for it; what follows the miss is
        // then short enough for the processor to reach the caller's next
        // restart meanwhile (`owner_ops restart`,
        // `service_vs_tokio/restart_owner`). It is read on the caller's own
        // shard's view of the clock, which may not be the timer's: every
        // shard's reading is at least the clock at the moment of the call,
        // so the deadline is never early whichever shard the timer is on.
        let owned = self.owned_shard();
        let shard = owned.unwrap_or_else(|| self.spread_choice());
        let (deadline, rounding) = match to {
            RestartTo::After(delay) => self.deadline_after(shard, delay),
            RestartTo::AtNanos(nanos) => self.ticks_ceil_with_rounding(nanos),
        };
        if owned.is_none() {
            if let Some(outcome) = self.restart_lent(shard, id, deadline, rounding, find) {
                return outcome;
            }
        }
        let Some((slot, word)) = find(id) else {
            return Err(TimerError::StaleKey);
        };
        if let Some(shard) = owned {
            // SAFETY: this thread holds the shard's claim (`owned_shard`),
            // with no reference into its core while user code runs; `slot`
            // is `id`'s and of this shard (its word named `id` after the
            // shard field was published; the call re-checks the word after
            // taking in the remote queue).
            if usize::from(slot.shard.load(Ordering::Relaxed)) == shard
                && unsafe {
                    self.shards[shard].restart_owned(self, slot, id, word, deadline, rounding)
                }
            {
                return Ok(Restart::Moved);
            }
        }
        self.restart_from(id, slot, word, deadline, rounding)
    }

    /// A RESTART from a thread that owns no shard while `shard` (the
    /// thread's own, where its STARTs go) is lent, its driver asleep:
    /// inside the shard this thread is its owner, and restarts a timer of
    /// that shard as one (`Shard::restart_owned`: no CAS on the word, and
    /// the slot's line, often a cache miss, followed by a short path). As
    /// `help`, only when nothing else waits for the owner (else the general
    /// path's `help` takes that in first). `None`, having changed nothing,
    /// when the shard is not lent, the timer is on another shard, or the
    /// general path must decide.
    #[inline]
    fn restart_lent<'s>(
        &'s self,
        shard: usize,
        id: TimerId,
        deadline: u64,
        rounding: u8,
        find: impl FnOnce(TimerId) -> Option<(&'s Slot, Word)>,
    ) -> Option<Result<Restart, TimerError>> {
        let target = &self.shards[shard];
        if !target.try_help() {
            return None;
        }
        // Left on unwinding too (`Helping`): taking the queue in may drop a
        // callback's captures, which may panic.
        let helping = Helping::enter(self.address(), shard, target);
        // SAFETY (all blocks): this thread holds the lent shard (`try_help`)
        // and no reference into its core.
        let ready =
            !self.is_shut_down() && target.remote.is_empty() && unsafe { !target.has_backlog() };
        let outcome = if !ready {
            None
        } else {
            match find(id) {
                None => Some(Err(TimerError::StaleKey)),
                Some((slot, word))
                    if usize::from(slot.shard.load(Ordering::Relaxed)) == shard
                        && unsafe {
                            target.restart_owned(self, slot, id, word, deadline, rounding)
                        } =>
                {
                    unsafe { target.refresh_counters(Some(deadline)) };
                    Some(Ok(Restart::Moved))
                }
                Some(_) => None,
            }
        };
        drop(helping);
        self.left_help(shard);
        if matches!(outcome, Some(Ok(_))) && target.claim_wake(Some(deadline)) {
            self.wake(shard);
        }
        outcome
    }

    /// RESTART's general path: one CAS arms `id`'s word again (a new
    /// arming `seq`), and the owner links it, now or when it takes the
    /// message in.
    fn restart_from(
        &self,
        id: TimerId,
        slot: &Slot,
        word: Word,
        deadline: u64,
        rounding: u8,
    ) -> Result<Restart, TimerError> {
        self.transition_from(id, slot, word, Err(TimerError::StaleKey), |word| {
            let new = word.with_arm(ARMED).next_seq();
            let outcome = if word.is_armed() {
                Restart::Moved
            } else {
                Restart::Rearmed
            };
            Decision::Swap {
                new,
                notify: Some(Some(Arm {
                    seq: new.seq(),
                    rounding,
                    deadline,
                })),
                result: Ok(outcome),
            }
        })
    }
}
