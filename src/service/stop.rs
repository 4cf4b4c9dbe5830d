//! STOP, RELEASE and DETACH: the handle-side transitions of a timer's word.
//!
//! Each is one CAS on the slot's state word (`state.rs`), which decides
//! its race with a fire, a RESTART or another STOP. The owner cancelling
//! its own armed timer frees the slot with that CAS (`Shard::cancel_owned`);
//! a STOP from another thread leaves the slot `QUEUED` for the owner and
//! pushes it on the shard's remote queue at most once (`handoff.rs`,
//! `remote.rs`), where the owner frees it (`Shard::apply_one`). A thread
//! that holds a shard of its own batches the pushes of the timers it
//! cancels (`shard/stops.rs`).

use super::*;

/// What a handle-side operation does with the word it read (see
/// [`Inner::transition`]).
pub(super) enum Decision<R> {
    /// Change nothing and return this.
    Keep(R),
    /// CAS the word to `new`; on success, if `notify` is `Some(arm)`, send the
    /// owner a message with that `arm` payload; return `result`.
    Swap {
        new: Word,
        notify: Option<Option<Arm>>,
        result: R,
    },
}

impl Inner {
    /// The one shape of every handle-side operation (STOP, RESTART, RELEASE,
    /// DETACH): read the slot's word, let `decide` pick the new word, CAS it
    /// in, and on success tell the owner. A CAS that loses to another thread
    /// re-decides on the word it found, as long as `id` still addresses the
    /// slot; a stale id yields `stale` and changes nothing.
    fn transition<R>(&self, id: TimerId, stale: R, decide: impl FnMut(Word) -> Decision<R>) -> R {
        let Some((slot, word)) = self.live(id) else {
            return stale;
        };
        self.transition_from(id, slot, word, stale, decide)
    }

    /// [`transition`](Self::transition) from a slot and word that `live`
    /// has just given for `id`.
    #[inline]
    pub(super) fn transition_from<R>(
        &self,
        id: TimerId,
        slot: &Slot,
        mut word: Word,
        stale: R,
        mut decide: impl FnMut(Word) -> Decision<R>,
    ) -> R {
        loop {
            let (new, notify, result) = match decide(word) {
                Decision::Keep(result) => return result,
                Decision::Swap {
                    new,
                    notify,
                    result,
                } => (new, notify, result),
            };
            // Read before the CAS: once it succeeds the slot may be freed and
            // reused at any moment (a release), but a successful CAS proves
            // this was still the incarnation whose shard we read.
            let shard = slot.shard.load(Ordering::Relaxed) as usize;
            // A STOP that disarms a timer of a shard this thread does not
            // own, or a release the owner must free: the same CAS queues the
            // slot for its owner (`remote.rs`), unless it is queued already.
            // (A release while the callback runs needs nothing: the owner
            // settles the slot when the run ends.)
            let owner = self.owns(shard);
            let stopped = !owner
                && notify == Some(None)
                && !new.is_armed()
                && (word.is_armed() || !word.is(RUNNING));
            let push = stopped && !word.is(QUEUED);
            let new = if push { new.with(QUEUED) } else { new };
            match slot.cas(word, new) {
                Ok(_) => {
                    if stopped {
                        // The CAS was the STOP; the push hands the slot to
                        // the owner, which reclaims it at its next poll.
                        let target = &self.shards[shard];
                        let wake = if push {
                            target.push_stop(id.index(), slot)
                        } else {
                            self.stopped_while_queued(shard, id.index(), new)
                        };
                        if wake {
                            self.wake(shard);
                        } else if !word.is_armed() {
                            // The release of a timer that is not armed (it
                            // fired, or was stopped before): nothing of it
                            // is left but memory, which a lent shard frees
                            // now rather than at whatever deadline its
                            // owner sleeps towards (CONTRACT 13).
                            self.help_reclaim(shard);
                        }
                        return result;
                    }
                    if let Some(arm) = notify {
                        let message = Message {
                            index: id.index(),
                            gen: id.gen(),
                            arm,
                        };
                        if owner {
                            // SAFETY: this thread holds the shard's claim
                            // (`owns`), and `slot` is the message's: no
                            // second lookup of it. An arming first lets in
                            // what others queued before it (`catch_up`).
                            unsafe {
                                let target = &self.shards[shard];
                                if message.arm.is_some() {
                                    target.catch_up(self);
                                }
                                target.reconcile_slot(self, slot, message);
                            }
                        } else if arm.is_none() {
                            // A DETACH of an armed timer (it stays linked
                            // and the owner frees it after it fires), or a
                            // release while the callback runs.
                        } else {
                            self.send_remote(shard, message);
                        }
                    }
                    return result;
                }
                Err(actual) if self.addressable(id, actual) => word = actual,
                Err(_) => return stale,
            }
        }
    }

    /// STOP: see [`Stop`] and the state table in `state.rs`.
    pub(crate) fn stop(&self, id: TimerId) -> Stop {
        if self.is_shut_down() {
            return Stop::Inactive;
        }
        self.transition(id, Stop::Inactive, |word| match word.arm() {
            // Tell the owner, so it unlinks the timer now rather than at its deadline.
            ARMED => Decision::Swap {
                new: word.with_arm(CANCELLED),
                notify: Some(None),
                result: Stop::Cancelled,
            },
            // Mark it halted so a periodic timer is not re-armed after this
            // run; once is enough (and keeps `seq` still: see `state.rs`).
            FIRED if word.is(RUNNING) && !word.is(HALTED) => Decision::Swap {
                new: word.with(HALTED),
                notify: None,
                result: Stop::Running,
            },
            FIRED if word.is(RUNNING) => Decision::Keep(Stop::Running),
            FIRED => Decision::Keep(Stop::Fired),
            _ => Decision::Keep(Stop::Inactive),
        })
    }

    /// STOP_SYNC: stop, then wait for a running callback to return.
    pub(crate) fn stop_sync(&self, id: TimerId) -> StopSync {
        let outcome = self.stop(id);
        let own = RUNNING_CALLBACK.with(|running| running.get()) == (self.address(), id.to_raw());
        if own {
            return StopSync::FromOwnCallback;
        }
        let mut spins = 0u32;
        while let Some(slot) = self.arena.get(id.index()) {
            let word = slot.load(Ordering::Acquire);
            if word.gen() != id.gen() || !word.is(RUNNING) {
                break;
            }
            backoff(&mut spins);
        }
        match outcome {
            Stop::Cancelled => StopSync::Cancelled,
            Stop::Fired | Stop::Running => StopSync::Fired,
            Stop::Inactive => StopSync::Inactive,
        }
    }

    /// RELEASE (handle dropped): disarm, drop the handle bit, and let the
    /// owner free the slot once the callback is not running. For an id from
    /// the C ABI, checked as any id is (`live`).
    #[cfg(feature = "capi")]
    pub(crate) fn release(&self, id: TimerId) {
        self.cancel_from(id, self.live(id), false);
    }

    /// `release` from a [`Timer`] handle (see `held`).
    #[inline]
    pub(crate) fn release_held(&self, id: TimerId) {
        self.cancel_held(id);
    }

    /// STOP and RELEASE in one transition ([`Timer::cancel`]): what `stop`
    /// would have returned, with the handle given up by the same CAS.
    pub(crate) fn cancel_held(&self, id: TimerId) -> Stop {
        self.cancel_from(id, self.held(id), false)
    }

    /// [`cancel_held`](Self::cancel_held) for a handle that kept its slot
    /// (`slot` is `id`'s: [`LocatedTimer`]).
    pub(crate) fn cancel_held_at(&self, slot: &Slot, id: TimerId) -> Stop {
        self.cancel_from(id, self.held_at(slot, id), true)
    }

    /// STOP and RELEASE of `id`, whose slot and word `live` or `held` found
    /// (`None`: stale). `private`: the id never left its handle (see
    /// `Shard::cancel_owned`).
    #[inline(always)]
    fn cancel_from(&self, id: TimerId, found: Option<(&Slot, Word)>, private: bool) -> Stop {
        // The owner cancelling its own armed timer: freed by one CAS
        // (`Shard::cancel_owned`).
        if let Some((slot, word)) = found {
            let shard = usize::from(slot.shard.load(Ordering::Relaxed));
            if word.is_armed() && !word.is(RUNNING) {
                if self.owns(shard) {
                    // SAFETY: this thread holds the shard's claim (`owns`),
                    // with no reference into its core while user code runs;
                    // `slot` is `id`'s, of that shard (its word, read after
                    // the shard field was published, names `id`'s
                    // incarnation, and the CAS inside fails if that
                    // changed).
                    if !word.is(QUEUED)
                        && unsafe {
                            self.shards[shard].cancel_owned(self, slot, id.index(), word, private)
                        }
                    {
                        return Stop::Cancelled;
                    }
                } else {
                    // Cancelled from outside its shard: what `drop_handle`
                    // does for an armed word, without its generic decision
                    // and second lookup of the slot. The CAS that stops it
                    // queues the slot for its owner unless it is queued
                    // already (typically this thread's own START, not yet
                    // taken in: `owner_ops remote-start-cancel`; else a
                    // timer of another owner: `owner_ops cross-stop`).
                    let new = word
                        .without(HANDLE)
                        .with_arm(CANCELLED)
                        .next_seq()
                        .with(QUEUED);
                    if slot.cas(word, new).is_ok() {
                        let wake = if word.is(QUEUED) {
                            self.stopped_while_queued(shard, id.index(), new)
                        } else if let Some(own) = self.owned_shard() {
                            // This thread holds a shard of its own: the
                            // push waits in its batch (`shard/stops.rs`).
                            // SAFETY: it holds `own`'s claim (`owned_shard`),
                            // with no reference into its core while user
                            // code runs; `shard` is not `own` (`owns`).
                            unsafe { self.shards[own].batch_stop(self, shard, id.index(), slot) };
                            false
                        } else {
                            self.shards[shard].push_stop(id.index(), slot)
                        };
                        if wake {
                            self.wake(shard);
                        }
                        return Stop::Cancelled;
                    }
                }
            }
        }
        self.drop_handle(id, true)
    }

    /// After this thread's CAS stopped slot `index` of `shard`, which was
    /// queued already (by its START, or an earlier STOP, whose pusher judged
    /// the reclaim bound without this stop), leaving word `new`: notes the
    /// slot for reuse if it is this thread's own START that its owner has
    /// not taken in, now cancelled and released (`revive`), and tells
    /// whether the owner must be woken to reclaim (`Shard::stop_wake_due`).
    fn stopped_while_queued(&self, shard: usize, index: u32, new: Word) -> bool {
        if new.is(FRESH) && new.is_reclaimable_but_queued() {
            REVIVABLE.with(|r| r.set((self.address(), index, new.0)));
        }
        self.shards[shard].stop_wake_due()
    }

    /// DETACH: drop the handle bit but leave the timer armed.
    pub(crate) fn detach(&self, id: TimerId) {
        self.drop_handle(id, false);
    }

    /// Gives up the handle (and with `disarm`, the arming). Returns what a
    /// STOP at the same moment would have returned.
    fn drop_handle(&self, id: TimerId, disarm: bool) -> Stop {
        self.transition(id, Stop::Inactive, |word| {
            let result = match word.arm() {
                ARMED => Stop::Cancelled,
                FIRED if word.is(RUNNING) => Stop::Running,
                FIRED => Stop::Fired,
                _ => Stop::Inactive,
            };
            let mut new = word.without(HANDLE);
            if disarm {
                if new.is_armed() {
                    new = new.with_arm(CANCELLED);
                }
                new = new.next_seq();
            }
            Decision::Swap {
                new,
                notify: Some(None),
                result,
            }
        })
    }
}
