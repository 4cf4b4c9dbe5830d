//! The owner takes in its remote queue (`remote.rs`): each queued slot is
//! applied in push order, so cross-thread order holds (CONTRACT 5): a
//! START's slot is linked, a stopped slot settled and freed, a proxy's
//! RESTART applied; a START revived in place waits for the entry it must
//! follow (`Deferred`).

use super::*;

/// A revived START waiting for entry `after` of the remote queue (see
/// `Inner::revive`).
pub(super) struct Deferred {
    after: u32,
    index: u32,
    gen: u32,
    arm: Arm,
}

impl Shard {
    /// Shutdown: empties the remote queue without applying it (the sweep
    /// looks at every slot itself), so that no slot stays `QUEUED`.
    pub(super) fn drop_remote(&self, inner: &Inner) {
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
                    let taken = self.remote.take(&inner.arena);
                    (core.backlog, core.backlog_tail) = (taken.first, taken.last);
                    core.walk = (taken.newest_first.unwrap_or(0), 0);
                }
                let index = core.backlog;
                if index == NIL {
                    return None;
                }
                if core.walk.0 != 0 {
                    // A list of stops newest first: this walk is its first.
                    self.remote
                        .prefetch_ahead(&inner.arena, core.walk.0, core.walk.1);
                    core.walk.1 += 1;
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

    /// An entry just taken off the remote queue: the common one, a STOP
    /// that left the slot to this owner alone with no revived START
    /// waiting for it, is reclaimed without `apply_entry`'s general path
    /// (`examples/owner_ops.rs cross-stop`: 766 -> 734 instructions per
    /// pair); any other is applied by `apply_entry`.
    ///
    /// # Safety
    /// As for [`apply_entry`](Self::apply_entry), but for `seen`.
    #[inline(always)]
    unsafe fn apply_taken(&self, inner: &Inner, slot: &Slot, index: u32) {
        let seen = slot.load(Ordering::Acquire);
        // SAFETY (both): forwarded.
        if seen.is_left_to_owner() && unsafe { self.core(|core| core.deferred.is_empty()) } {
            // The freeing store clears `QUEUED` too (see `apply_one`).
            unsafe { self.settle(inner, slot, index, seen.without(QUEUED)) };
            return;
        }
        unsafe { self.apply_entry(inner, slot, index, seen) };
    }

    /// Applies one entry of the remote queue (see `remote.rs`): clears the
    /// slot's `QUEUED` and `FRESH` bits and acts on its word as that
    /// clearing found it; then links the revived STARTs that were waiting
    /// for this entry.
    ///
    /// # Safety
    /// The caller owns the shard and holds no reference into its core; the
    /// slot was just taken off the queue (`next_entry`), and `seen` is its
    /// word, loaded (acquire) since.
    unsafe fn apply_entry(&self, inner: &Inner, slot: &Slot, index: u32, seen: Word) {
        // SAFETY (both): forwarded.
        unsafe {
            self.apply_one(inner, slot, index, seen);
            if self.core(|core| !core.deferred.is_empty()) {
                self.link_deferred(inner, index);
            }
        }
    }

    /// [`apply_entry`](Self::apply_entry) without the deferred STARTs.
    ///
    /// # Safety
    /// As for [`apply_entry`](Self::apply_entry).
    unsafe fn apply_one(&self, inner: &Inner, slot: &Slot, index: u32, seen: Word) {
        if seen.is_left_to_owner() {
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
                (
                    owned.recorded_arm(),
                    std::mem::replace(&mut owned.prev, NIL),
                )
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
                    // Its own list, which its START put in push order.
                    debug_assert!(core.walk.0 == 0 && core.backlog_tail != NIL);
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
            unsafe { self.apply_taken(inner, slot, index) };
        }
        // Entries pushed since the take wait for the next one: those the
        // owner needs before it would wake keep it from sleeping
        // (`publish_sleep`); the rest must not keep it busy (a thread that
        // starts and cancels far-off timers in a loop would).
        // SAFETY: forwarded.
        unsafe { self.has_backlog() }
    }

    /// Before the owner links its own RESTART, reads a deadline or opens a
    /// poll's pass (its START has `catch_up_before_start`): applies
    /// everything other threads queued before it, so that an arming that
    /// happened before the owner's is linked first and fires first among
    /// timers due on the same tick (CONTRACT 5; `tests/service_order.rs`).
    /// Costs one load of the queue's word when nothing waits.
    ///
    /// Applies the backlog left by an earlier batch and one snapshot of the
    /// queue (whatever was pushed before this call), not what keeps
    /// arriving meanwhile, so a flood of remote work cannot hold it up.
    /// Returns `false` when nothing waited (and nothing was applied).
    ///
    /// # Safety
    /// As for [`take_remote`](Self::take_remote).
    #[inline]
    pub(crate) unsafe fn catch_up(&self, inner: &Inner) -> bool {
        // SAFETY: forwarded.
        if self.remote.is_empty() && unsafe { !self.has_backlog() } {
            return false;
        }
        // SAFETY: forwarded.
        unsafe { self.catch_up_slow(inner) };
        true
    }

    /// [`catch_up`](Self::catch_up) before the owner links its own START:
    /// the same, except that a queue of a few stops alone is left to the
    /// next poll (see [`RemoteQueue::owner_start_must_take_in`]). Stops
    /// need no order against the START (each settles its own slot, whose
    /// word the stopper's CAS has already decided), nor does the START
    /// need their slots: it takes its own from the owner's free slots.
    ///
    /// # Safety
    /// As for [`take_remote`](Self::take_remote).
    #[inline]
    pub(crate) unsafe fn catch_up_before_start(&self, inner: &Inner) {
        // SAFETY: forwarded.
        if self.remote.owner_start_must_take_in() || unsafe { self.has_backlog() } {
            // SAFETY: forwarded.
            unsafe { self.catch_up_slow(inner) };
        }
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
            unsafe { self.apply_taken(inner, slot, index) };
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
        if word.gen() != message.gen || word.arm() == crate::service::state::FREE {
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
}
