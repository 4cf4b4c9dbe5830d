//! START, from the thread that owns the timer's shard and from any other.
//!
//! ```text
//!   TimerService::start / schedule / start_at_nanos
//!     plan_after / plan / plan_at_nanos   shard, deadline tick and rounding (the clock: `clock.rs`, `tsc.rs`)
//!     callback::new                       the closure, inline in the slot if it fits (`callback.rs`)
//!     arm
//!       owner:  catch_up_before_start (queued armings go first, CONTRACT 5),
//!               a slot from its own free slots (`Shard::take_local_slot`),
//!               publish (callback, deadline, then the word ARMED | HANDLE),
//!               Shard::link (into the wheel, `shard.rs`)
//!       other:  arm_remote: revive its own last cancelled START in place,
//!               or a slot from the arena, publish it ARMED | HANDLE |
//!               QUEUED | FRESH and push it on the shard's remote queue
//!               (`handoff.rs`, `remote.rs`); the owner links it when it
//!               takes the queue in (`Shard::apply_one`)
//! ```
//!
//! Which shard: the caller's own if it owns one, else one fixed per thread
//! (`choose_shard`).

use std::mem::ManuallyDrop;

use super::arena::NIL;
use super::*;

/// A START that passed its checks.
pub(super) struct Arming {
    pub(super) shard: usize,
    pub(super) deadline: u64,
    /// See [`remote::Arm::rounding`].
    pub(super) rounding: u8,
    /// Ticks; 0 for a one-shot timer.
    pub(super) period: u64,
}

impl Inner {
    /// Which shard a new timer goes to: the caller's own shard if it owns one,
    /// else a shard fixed per calling thread (spread round-robin), so one
    /// thread's timers stay together. Also the shard whose handle counters
    /// this thread writes (`handles.rs`).
    #[inline]
    pub(super) fn choose_shard(&self) -> usize {
        self.owned_shard().unwrap_or_else(|| self.spread_choice())
    }

    /// [`choose_shard`](Self::choose_shard) for a thread that owns no shard
    /// of this service.
    #[inline]
    pub(super) fn spread_choice(&self) -> usize {
        let (service, shard) = SPREAD_SHARD.with(|spread| spread.get());
        // The bound check also covers another service since made at the
        // address of the one the shard was chosen for: any shard in range
        // will do.
        if service == self.address() && shard < self.shards.len() {
            return shard;
        }
        self.spread_shard()
    }

    /// [`choose_shard`](Self::choose_shard) for a thread that owns no shard
    /// and has not used this service last: its spread number reduced to a
    /// shard, and remembered (a division, which every START and handle drop
    /// from such a thread paid: `owner_ops remote-start-cancel`).
    #[cold]
    fn spread_shard(&self) -> usize {
        let shard = SPREAD.with(|spread| {
            if spread.get() == usize::MAX {
                spread.set(self.spread.fetch_add(1, Ordering::Relaxed));
            }
            spread.get() % self.shards.len()
        });
        SPREAD_SHARD.with(|spread| spread.set((self.address(), shard)));
        shard
    }

    #[inline]
    pub(crate) fn start<F>(
        inner: &Arc<Self>,
        spec: TimerSpec,
        callback: F,
    ) -> Result<Timer, TimerError>
    where
        F: FnMut(&mut Expiry<'_>) + Send + 'static,
    {
        let id = inner.start_on(spec, callback)?;
        Ok(Timer::new(inner, id, inner.choose_shard()))
    }

    /// START: check the spec, make the callback (with the period, if any;
    /// boxed only if too large to keep in the slot) and arm it.
    #[cfg(feature = "capi")]
    pub(crate) fn start_raw<F>(&self, spec: TimerSpec, callback: F) -> Result<TimerId, TimerError>
    where
        F: FnMut(&mut Expiry<'_>) + Send + 'static,
    {
        self.start_on(spec, callback)
    }

    /// START of `spec`: plan it, make its callback, arm it.
    #[inline]
    pub(crate) fn start_on<F>(&self, spec: TimerSpec, callback: F) -> Result<TimerId, TimerError>
    where
        F: FnMut(&mut Expiry<'_>) + Send + 'static,
    {
        let arming = self.plan(&spec)?;
        let callback = callback::new(callback, arming.period, spec.burst);
        Ok(self.arm(arming, callback).0)
    }

    /// [`plan`](Self::plan) for `TimerSpec::after(delay)`: the same checks
    /// and arithmetic, without building and matching a spec (the owner's
    /// START + cancel, `examples/owner_ops.rs` under cachegrind: 729 -> 674
    /// instructions). Always inlined: returned through memory, the
    /// `Arming` was stored a field at a time and read back 16 bytes at a
    /// time, which waited for the stores to leave the store buffer (a
    /// fifth of the START side of `examples/owner_ops.rs cross-stop` under
    /// `perf`).
    #[inline(always)]
    pub(super) fn plan_after(&self, delay: Duration) -> Result<Arming, TimerError> {
        if self.is_shut_down() {
            return Err(TimerError::Shutdown);
        }
        let shard = self.choose_shard();
        let (deadline, rounding) = self.deadline_after(shard, delay);
        Ok(Arming {
            shard,
            deadline,
            rounding,
            period: 0,
        })
    }

    /// START of a one-shot timer due at `nanos` on the service clock
    /// (rounded up to its tick), on the caller's shard: `start` without a
    /// clock read (`ServiceRef::start_at_nanos`). Returns the timer, the
    /// shard its handle is to be counted on, and its slot (which a sleep
    /// keeps, to skip the id's lookup when it is dropped: see
    /// `future/sleep.rs`).
    #[inline]
    pub(crate) fn start_at_nanos<F>(
        &self,
        nanos: u64,
        callback: F,
    ) -> Result<(TimerId, usize, &Slot), TimerError>
    where
        F: FnMut(&mut Expiry<'_>) + Send + 'static,
    {
        let arming = self.plan_at_nanos(nanos)?;
        let shard = arming.shard;
        let callback = callback::new(callback, 0, false);
        let (id, slot) = self.arm(arming, callback);
        Ok((id, shard, slot))
    }

    /// `delay` from now on the service's clock, in nanoseconds since its
    /// origin: from the calling thread's deadline clock (`tsc.rs`: a few
    /// ns, never behind the real clock), so a deadline fixed now is never
    /// early.
    #[inline]
    pub(crate) fn deadline_nanos_after(&self, delay: Duration) -> u64 {
        self.clock
            .deadline_nanos(|| &self.shards[self.choose_shard()].clock_mark)
            .saturating_add(duration_nanos(delay))
    }

    /// [`plan_after`](Self::plan_after) for a deadline already on the
    /// service clock (`start_at_nanos`).
    #[inline]
    fn plan_at_nanos(&self, nanos: u64) -> Result<Arming, TimerError> {
        if self.is_shut_down() {
            return Err(TimerError::Shutdown);
        }
        let shard = self.choose_shard();
        let (deadline, rounding) = self.ticks_ceil_with_rounding(nanos);
        Ok(Arming {
            shard,
            deadline,
            rounding,
            period: 0,
        })
    }

    /// What a START will do: which shard, which deadline, which period; or
    /// why it cannot.
    fn plan(&self, spec: &TimerSpec) -> Result<Arming, TimerError> {
        if self.is_shut_down() {
            return Err(TimerError::Shutdown);
        }
        let shard = match spec.shard {
            Some(shard) if shard >= self.shards.len() => return Err(TimerError::ShardOutOfRange),
            Some(shard) => shard,
            None => self.choose_shard(),
        };
        let period = match spec.period {
            Some(period) if period.is_zero() => return Err(TimerError::InvalidPeriod),
            Some(period) => self.ticks_ceil(duration_nanos(period)),
            None => 0,
        };
        let (deadline, rounding) = match spec.when {
            When::After(delay) => self.deadline_after(shard, delay),
            When::At(instant) => self.ticks_ceil_with_rounding(self.clock.nanos_at(instant)),
            When::AtNanos(nanos) => self.ticks_ceil_with_rounding(nanos),
            When::Within(earliest, latest) => {
                if earliest > latest {
                    return Err(TimerError::InvalidRange);
                }
                let now = self.now_nanos(shard);
                let first = self.ticks_ceil(now.saturating_add(duration_nanos(earliest)));
                // The window's last tick must not be after `now + latest`.
                let last =
                    (self.ticks.floor(now.saturating_add(duration_nanos(latest)))).max(first);
                // Any tick of the window is on time: lateness counts from
                // the tick chosen.
                (crate::wheel::roundest_tick_in(first, last), 0)
            }
        };

        Ok(Arming {
            shard,
            deadline,
            rounding,
            period,
        })
    }

    /// Allocates a slot, publishes it armed, and hands it to its shard: the
    /// owner links it at once; any other thread queues the new slot for the
    /// owner, or reuses a slot of its own cancelled START in place
    /// (`revive`).
    ///
    /// The other threads' path is out of line (`arm_remote`), so that the
    /// owner's is inlined into the START that made the callback (with
    /// `#[inline]` alone it was not, and an owner's START + cancel took
    /// about 7 % longer: `farm-bench` on `examples/owner_ops.rs
    /// start-cancel`).
    #[inline(always)]
    pub(super) fn arm(&self, arming: Arming, callback: arena::Callback) -> (TimerId, &Slot) {
        // Handed on by reference and moved once, into its slot (see
        // `Callback::move_into`).
        let mut callback = ManuallyDrop::new(callback);
        let shard = arming.shard;
        if !self.owns(shard) {
            // SAFETY: `arm_remote` consumes it; it is not used here again.
            return unsafe {
                self.arm_remote(shard, arming.deadline, arming.rounding, &mut callback)
            };
        }
        // One bounds check for the whole START (with `self.shards[shard]`
        // at each use the compiler checked it three times).
        let target = &self.shards[shard];
        // SAFETY: this thread holds the shard's claim (`owns`), and no
        // reference into its core is live while user code runs.
        unsafe { target.catch_up_before_start(self) };
        // SAFETY: this thread holds the shard's claim (`owns`).
        let (index, slot) = unsafe { self.alloc_owned_slot(target) };
        // SAFETY: `publish` consumes the callback; it is not used again.
        let message = unsafe {
            self.publish(
                index,
                slot,
                (shard, arming.deadline, arming.rounding),
                &mut callback,
                false,
            )
        };
        // SAFETY: this thread holds the shard's claim (`owns`). The slot
        // was just published by this thread and no other thread has its
        // id yet, so its word is the one `publish` stored: it is filed
        // without `reconcile`'s second lookup and re-reading of it (an
        // owner's START + cancel: 850 -> 791 instructions), as the shard's
        // pending START (`Shard::start_owned`).
        unsafe {
            let arm = message.arm.expect("a START arms");
            target.start_owned(self, slot, message.index, arm);
        }
        (TimerId::new(message.index, message.gen, self.tag), slot)
    }

    /// [`arm`](Self::arm) from a thread that does not own the shard: out of
    /// line, so that the owner's inlined path stays small.
    ///
    /// A START from another thread is queued even when the shard is lent:
    /// entering the shard to link it there, and to unlink and free it again
    /// on cancel, cost about 1,100 instructions per START + cancel pair,
    /// against about 600 for a queued START that the next START revives
    /// (`examples/owner_ops.rs remote-start-cancel` under callgrind).
    ///
    /// The callback comes by reference and is moved once, into the slot:
    /// taken by value, it was copied into `revive`'s frame 16 bytes at a
    /// time right after the START stored it 8 bytes at a time, and waited
    /// for those stores (no store forwarding; a tenth of `owner_ops
    /// remote-start-cancel` under `perf`).
    ///
    /// # Safety
    /// Consumes `*callback`: the caller neither uses nor drops it after.
    #[inline(never)]
    unsafe fn arm_remote(
        &self,
        shard: usize,
        deadline: u64,
        rounding: u8,
        callback: &mut ManuallyDrop<arena::Callback>,
    ) -> (TimerId, &Slot) {
        self.shards[shard].note_activity();
        // SAFETY: forwarded: `revive` consumes the callback when it returns
        // an id, and leaves it alone otherwise.
        if let Some(revived) = unsafe { self.revive(shard, deadline, rounding, callback) } {
            return revived;
        }
        let index = self.alloc_slot();
        // SAFETY: `alloc_slot` handed it out just now.
        let slot = unsafe { self.slot(index) };
        // SAFETY: forwarded; not used after.
        let message =
            unsafe { self.publish(index, slot, (shard, deadline, rounding), callback, true) };
        self.queue(shard, message, true);
        (TimerId::new(message.index, message.gen, self.tag), slot)
    }

    /// A START from a thread that owns no shard, in the slot of its own
    /// last START if the shard's owner has not taken that one in yet and it
    /// has been cancelled and released since (`REVIVABLE`): the slot is
    /// still on the remote queue, so the new timer needs no slot and no
    /// push, and a START + cancel loop against an owner that does not poll
    /// holds one slot instead of one per START (CONTRACT 20;
    /// `tests/service_wake.rs::item20_a_stalled_owner_holds_one_slot_per_canceller`).
    /// Returns `None`, having left the callback alone, when it cannot.
    ///
    /// # Safety
    /// When it returns an id it has consumed `*callback`: the caller
    /// neither uses nor drops it after.
    ///
    /// Who owns what: the slot's word `CANCELLED | QUEUED | FRESH` (no
    /// handle) says nobody but the owner may touch it, and the owner only
    /// to take it off the queue. This thread's CAS from exactly that word to
    /// `FREE | QUEUED | FRESH` of the next generation ends the old timer and
    /// makes the slot this thread's: an owner that takes it off meanwhile
    /// leaves it alone (`Shard::apply_one`). This thread fills it, then CASes
    /// it to `ARMED | HANDLE | QUEUED | FRESH`: if `QUEUED` is still set the
    /// owner has not seen it yet and links it when it comes to it; if not,
    /// it is pushed again as any START.
    ///
    /// Order (CONTRACT 5): the slot keeps its place on the queue, which may
    /// be before entries other threads pushed since. So it records the
    /// newest entry on the queue after this thread's CAS (everything that
    /// happened before this START was pushed by then), and the owner links
    /// it right after that entry, not at its own place
    /// (`Shard::link_deferred`).
    unsafe fn revive(
        &self,
        shard: usize,
        deadline: u64,
        rounding: u8,
        callback: &mut ManuallyDrop<arena::Callback>,
    ) -> Option<(TimerId, &Slot)> {
        let (service, index, word) = REVIVABLE.with(|r| r.get());
        if service != self.address() {
            return None;
        }
        REVIVABLE.with(|r| r.set((0, 0, 0)));
        let slot = self.arena.get(index)?;
        if usize::from(slot.shard.load(Ordering::Relaxed)) != shard {
            return None;
        }
        let old = Word(word);
        let reserved = Word::free(state::next_gen(old.gen()))
            .with(QUEUED)
            .with(FRESH);
        if slot.cas(old, reserved).is_err() {
            return None;
        }
        let armed = reserved.with_arm(ARMED).with(HANDLE);
        // What happened before this START was pushed by now (SeqCst: the
        // load sees every push that happened before it).
        let after = match self.shards[shard].remote.newest() {
            remote::NIL => remote::REVIVE_AFTER_BATCH,
            newest => newest,
        };
        // SAFETY: the CAS above made the slot this thread's (see above);
        // the callback is consumed here, as the caller's contract allows.
        let previous = slot.owned.with_mut(|owned| unsafe {
            (*owned).deadline = deadline;
            (*owned).set_linked(armed.seq(), rounding);
            (*owned).prev = after;
            // The old callback moves out only if it needs a drop.
            arena::Callback::replace_into(callback, &mut (*owned).callback)
        });
        if slot.cas(reserved, armed).is_err() {
            // The owner took the slot off meanwhile (and left it alone):
            // queue it again, as a new START, with nothing to follow.
            // SAFETY: as above; the word is `FREE` of the new generation,
            // which no id names yet and no other thread changes.
            slot.owned
                .with_mut(|owned| unsafe { (*owned).prev = remote::NIL });
            slot.state.store(armed.0, Ordering::Release);
            let message = Message::armed(index, armed, rounding, deadline);
            self.queue(shard, message, true);
        } else if self.shards[shard].queued_for(deadline) {
            self.wake(shard);
        }
        self.shards[shard]
            .counters
            .revived
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // The old timer's captures go last, once the slot is consistent:
        // user code, which may panic (reported like a callback's).
        shard::drop_callback(
            self,
            previous,
            TimerId::new(index, old.gen(), self.tag),
            shard,
        );
        Some((TimerId::new(index, armed.gen(), self.tag), slot))
    }

    /// Fills free slot `index` (`slot`; just taken from a free list or
    /// fresh, so this thread's alone) for a START on `shard` due at tick
    /// `deadline` (`rounding`: see [`remote::Arm::rounding`]) and publishes it armed,
    /// and `QUEUED` if `queued` (the caller then pushes it on the shard's
    /// remote queue); returns the message that links it (an owner links it
    /// at once).
    ///
    /// # Safety
    /// Consumes `*callback`: the caller neither uses nor drops it after.
    #[inline]
    unsafe fn publish(
        &self,
        index: u32,
        slot: &Slot,
        (shard, deadline, rounding): (usize, u64, u8),
        callback: &mut ManuallyDrop<arena::Callback>,
        queued: bool,
    ) -> Message {
        let free = slot.load(Ordering::Acquire);
        debug_assert_eq!(free.arm(), state::FREE);
        let armed = free.with_arm(ARMED).with(HANDLE);
        // SAFETY: the slot is FREE and was just popped from a free list (or
        // is fresh): this thread owns it exclusively until the release store
        // below publishes it. Its wheel links are those of an unlinked slot
        // (the owner unlinks before it frees), and stay as they are. The
        // arming recorded in `linked` is what the owner links when it takes
        // the slot off its remote queue (`remote.rs`).
        slot.owned.with_mut(|owned| unsafe {
            // A free slot holds no callback (`Shard::recycle` took it).
            arena::Callback::move_into(callback, &mut (*owned).callback);
            (*owned).deadline = deadline;
            (*owned).set_linked(armed.seq(), rounding);
            if queued {
                // No entry to follow (see `revive`).
                (*owned).prev = remote::NIL;
            }
        });
        // Shards are at most 4096 (`Builder::shards`).
        slot.shard.store(shard as u16, Ordering::Relaxed);
        let armed = if queued {
            armed.with(QUEUED).with(FRESH)
        } else {
            armed
        };
        slot.state.store(armed.0, Ordering::Release);
        Message::armed(index, armed, rounding, deadline)
    }

    /// A free slot for a START from a thread that does not own the
    /// timer's shard: a freed one (the free list, the arena's chunks, a
    /// chunk an owner spilled), else a fresh one.
    pub(crate) fn alloc_slot(&self) -> u32 {
        if let Some(index) = self.arena.alloc_reused() {
            return index;
        }
        match self.steal_chunk() {
            NIL => self.arena.alloc_fresh(),
            first => self.arena.first_of_chunk(first),
        }
    }

    /// A chunk of free slots some owner spilled (its first slot), or `NIL`:
    /// what is left to reuse before the arena grows. Owners take their own
    /// spills back first (`Shard::alloc_line`); this is for a thread whose
    /// own (and the arena's) ran out.
    pub(crate) fn steal_chunk(&self) -> u32 {
        for shard in self.shards.iter() {
            if shard.spilled.looks_empty() {
                continue;
            }
            let first = shard.spilled.pop(&self.arena);
            if first != NIL {
                return first;
            }
        }
        NIL
    }

    /// A free slot for a timer on `shard`, for its owner: one the owner
    /// freed itself (no shared cache line touched), else one from a fresh
    /// group of slots on cache lines of their own.
    ///
    /// # Safety
    /// This thread holds the shard's claim (`owns`); no reference into its
    /// core is live while user code (the only caller) runs.
    unsafe fn alloc_owned_slot<'s>(&'s self, shard: &'s Shard) -> (u32, &'s Slot) {
        // SAFETY: forwarded.
        unsafe {
            match shard.take_local_slot() {
                Some(free) => free,
                None => {
                    let index = shard.alloc_line(self);
                    (index, self.slot(index))
                }
            }
        }
    }
}
