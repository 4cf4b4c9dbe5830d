//! The owner's free slots: freed slots rest before reuse (`ROTATION`), so
//! a stale id's slot passes through many incarnations before its name comes
//! back; past `LOCAL_FREE_MAX` they are spilled in chunks onto the shard's
//! own stack of chunks, and an owner whose own run out takes a chunk back
//! (its own first, else the arena's or another shard's) or a fresh group
//! of slots.
//!
//! Its own first: in a ring of owners on two cores that stop each other's
//! timers (`owner_ops cross-stop 3000000 8`), an owner's armed count swings
//! by thousands as its neighbour is scheduled in and out, and it spills
//! and takes back chunks all the time (5 to 7 million of the run's 24
//! million STARTs take a chunk's slot or a fresh one). Through one shared
//! stack each took the chunk another had just spilled, slots whose lines
//! were in the other core's cache; taking its own back, an owner refills
//! with slots its own core touched last (whole programs, `farm-bench -n
//! 10`: 0.93x the time at 8 threads, a spread of 0.74-1.27). Tests:
//! `tests/service.rs::item13_an_owner_takes_back_its_own_set_aside_slots_first`;
//! that others still reuse them before the arena grows,
//! `item13_an_owners_surplus_free_slots_serve_other_shards`,
//! `item13_set_aside_slots_serve_threads_that_own_no_shard`.
//!
//! # The spare
//!
//! The rotation exists for ids that may outlive their timer: a `Timer`
//! handle's id can be copied (`Timer::id`, the C ABI) and used after the
//! timer ended. A [`Sleep`](crate::future::Sleep)'s handle never shows its id to
//! anyone, so when a sleep is dropped on its shard's owner
//! (`LocatedTimer`, `Shard::cancel_owned` with `private`), no copy of the
//! id exists: the slot is freed in the *same* generation and kept as the
//! owner's one spare, which its next START takes before the rotation. The
//! generation still advances at the end of every timer whose id was
//! handed out, so an id never comes back sooner than the rotation allows
//! (`tests/futures.rs::sleeps_dropped_on_the_owner_never_make_a_public_id_come_back`);
//! only the sleeps' own incarnations, which nobody can name, reuse one.
//! A sleep made, polled and dropped on its owner (the timeout that does
//! not fire) then skips the rotation's queue on both sides: `owner_ops
//! sleep-poll-drop` 477 -> 422 instructions, 0.91x the time (`farm-bench
//! -n 10`). The captures' drop can hand the id out after all, in a panic
//! report: then the slot takes the next generation and joins the rotation
//! (`tests/user_panics.rs::a_sleep_whose_waker_panics_on_drop_leaves_its_reported_id_stale`).

use super::*;

/// A free slot kept by its shard's owner: its index, and its address, so
/// that the START that takes it needs no arena lookup (an owner's START +
/// cancel: 644 -> 631 instructions, `examples/owner_ops.rs` under callgrind).
#[derive(Clone, Copy)]
pub(super) struct FreeSlot {
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

/// How many freed slots an owner keeps, to begin with, before handing
/// them back to the service (bounds what idle shards hold on to).
pub(super) const LOCAL_FREE_MIN: usize = 1024;

/// The most freed slots an owner keeps (at most `LOCAL_FREE_MAX + SPILL`
/// slots of 64 bytes, 278 KB a shard).
///
/// An owner's cap starts at `LOCAL_FREE_MIN` and doubles, up to this,
/// each time its own STARTs run out of kept slots after it spilled some
/// (`Shard::alloc_line`): a shard whose armed timers swing by more than
/// the cap would otherwise cycle slots through the arena, spilling chunks
/// at the top of each swing and taking them back at the bottom, each a
/// walk over cold slots. The cross-stop ring (`examples/owner_ops.rs`: 4
/// batches of 256 in flight per thread, 1,344 slots with the rotation)
/// does that under a fixed cap of 1,024: under callgrind 60 % of its
/// STARTs take a chunk's slot, and without the cycle it runs in 7 % fewer
/// instructions (572 M -> 530 M, `cross-stop 400000 2`) and 0.95-0.96x
/// the time at 8 threads (`farm-bench`, 10 alternating runs of
/// `cross-stop 3000000 8`). An owner whose own STARTs take nothing back
/// keeps its cap: the slots it frees for other threads' STARTs (which
/// take theirs from the arena) go back past 1,024
/// (`tests/alloc_free_start.rs::a_non_owner_start_capturing_16_bytes_allocates_nothing`).
/// Handing back only the slots unused since a review (a low-water mark
/// over the last 1,024 frees) instead of a cap does not stop the cycle: a
/// poll that reclaims a neighbour's burst of stops frees more than that
/// with no START between.
const LOCAL_FREE_MAX: usize = 4096;

/// How many freed slots an owner hands back at once, as one chunk
/// (`Arena::push_chunk`), when it holds more than its cap; and so
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

impl Shard {
    /// A slot this owner freed earlier, for a start on this shard.
    ///
    /// # Safety
    /// The caller must own the shard and hold no reference into its core
    /// (true in user code: callbacks, or an embedded owner between polls).
    pub(crate) unsafe fn take_local_slot(&self) -> Option<(u32, &Slot)> {
        // SAFETY: forwarded.
        let free = unsafe {
            self.core(|core| {
                if let Some(spare) = core.spare.take() {
                    Some(spare)
                } else if core.free_slots.len() > ROTATION {
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
    pub(crate) unsafe fn alloc_line(&self, inner: &Inner) -> u32 {
        let arena = &inner.arena;
        // SAFETY: forwarded.
        unsafe {
            self.core(|core| {
                if core.spilled {
                    // Spilled slots this owner's STARTs needed after all.
                    core.free_cap = (core.free_cap * 2).min(LOCAL_FREE_MAX);
                    core.spilled = false;
                }
                if core.borrowed == NIL {
                    // Its own spills first: their slots were last in this
                    // core's cache, where another shard's are not.
                    core.borrowed = self.spilled.pop(arena);
                    if core.borrowed == NIL {
                        core.borrowed = arena.pop_chunk();
                    }
                    if core.borrowed == NIL {
                        core.borrowed = inner.steal_chunk();
                    }
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

    /// A slot this owner has just set `FREE` (incarnation `gen` ended) and
    /// taken out of the wheel: counts it, puts it on this owner's free
    /// slots and drops its callback.
    ///
    /// # Safety
    /// The caller owns the shard and holds no reference into its core; the
    /// slot is FREE, unlinked, and on no free list.
    #[inline(always)]
    pub(super) unsafe fn recycle(&self, inner: &Inner, slot: &Slot, index: u32, gen: u32) {
        let mut captures = std::mem::MaybeUninit::uninit();
        // SAFETY: the caller's contract.
        let needs_drop = unsafe { self.take_captures(slot, &mut captures) };
        // SAFETY: forwarded.
        unsafe { self.keep_free_slot(inner, slot, index) };
        // User code (the callback's captures) is dropped last, once the slot
        // is consistent: it may start, stop or drop other timers, or panic.
        let shard = usize::from(slot.shard.load(Ordering::Relaxed));
        if needs_drop {
            let id = TimerId::new(index, gen, inner.tag);
            // SAFETY: `take_to_drop_into` moved a callback there, dropped
            // here once.
            unsafe { drop_captures_at(inner, captures.as_mut_ptr(), id, shard) };
        }
    }

    /// The first step of freeing a slot: counts it freed and moves its
    /// callback into `captures` (see `callback::take_to_drop_into`);
    /// `true` when the captures need a drop, which the caller then does
    /// there, once.
    ///
    /// # Safety
    /// As for [`recycle`](Self::recycle).
    #[inline(always)]
    unsafe fn take_captures(
        &self,
        slot: &Slot,
        captures: &mut std::mem::MaybeUninit<Callback>,
    ) -> bool {
        // SAFETY: the caller's contract: no allocator can reach the slot.
        let needs_drop = unsafe {
            owned(slot, |owned| {
                callback::take_to_drop_into(&mut owned.callback, captures.as_mut_ptr())
            })
        };
        self.counters.freed.bump(1);
        needs_drop
    }

    /// [`recycle`](Self::recycle) for a slot whose timer's id never left
    /// its handle, set `FREE` in its own generation `gen` (see "The
    /// spare" in the module docs): it becomes this owner's spare if it has
    /// none; else, or if dropping its captures panicked (the report names
    /// the id), it takes the next generation and joins the free slots.
    ///
    /// The captures (user code) are dropped before the slot is kept, not
    /// after as in `recycle`: until then the slot is `FREE` and on no list,
    /// so a START the drop makes cannot take it, and whether the id was
    /// reported is known before the slot can be reused under it.
    ///
    /// # Safety
    /// As for [`recycle`](Self::recycle).
    #[inline(always)]
    pub(super) unsafe fn recycle_private(&self, inner: &Inner, slot: &Slot, index: u32, gen: u32) {
        let mut captures = std::mem::MaybeUninit::uninit();
        // SAFETY: the caller's contract.
        let needs_drop = unsafe { self.take_captures(slot, &mut captures) };
        let reported = needs_drop && {
            let shard = usize::from(slot.shard.load(Ordering::Relaxed));
            let id = TimerId::new(index, gen, inner.tag);
            // SAFETY: `take_to_drop_into` moved a callback there, dropped
            // here once.
            unsafe { drop_captures_at(inner, captures.as_mut_ptr(), id, shard) }
        };
        let free = FreeSlot {
            index,
            slot: std::ptr::NonNull::from(slot),
        };
        // SAFETY: the caller owns the shard; no core reference is live.
        let spared = !reported
            && unsafe {
                self.core(|core| {
                    let empty = core.spare.is_none();
                    if empty {
                        core.spare = Some(free);
                    }
                    empty
                })
            };
        if !spared {
            // As any freed slot: a new generation. No other thread writes
            // a `FREE` slot that is on no list.
            slot.state.store(
                Word::free(super::super::state::next_gen(gen)).0,
                Ordering::Release,
            );
            // SAFETY: forwarded.
            unsafe { self.keep_free_slot(inner, slot, index) };
        }
    }

    /// Puts a FREE slot on this owner's free slots: it joins the back of
    /// the rotation; past the owner's cap (see `LOCAL_FREE_MAX`), the
    /// `SPILL` that have rested longest are spilled as one chunk onto the
    /// shard's chunks (see `ROTATION`, `Shard::spilled`).
    ///
    /// # Safety
    /// The caller owns the shard and holds no reference into its core; the
    /// slot is FREE, unlinked, holds no callback, and is on no free list.
    #[inline]
    pub(super) unsafe fn keep_free_slot(&self, inner: &Inner, slot: &Slot, index: u32) {
        // SAFETY: the caller owns the shard; no core reference is live.
        let spill = unsafe {
            self.core(|core| {
                core.free_slots.push_back(FreeSlot {
                    index,
                    slot: std::ptr::NonNull::from(slot),
                });
                core.free_slots.len() > core.free_cap + SPILL
            })
        };
        if spill {
            // SAFETY: forwarded.
            unsafe { self.spill(inner) };
        }
    }

    /// Hands the `SPILL` free slots that rested longest back as one chunk
    /// (see [`keep_free_slot`](Self::keep_free_slot)).
    ///
    /// # Safety
    /// The caller owns the shard and holds no reference into its core.
    #[cold]
    unsafe fn spill(&self, inner: &Inner) {
        // SAFETY: forwarded.
        unsafe {
            self.core(|core| {
                core.spilled = true;
                let mut first = NIL;
                for _ in 0..SPILL {
                    if let Some(rested) = core.free_slots.pop_front() {
                        inner.arena.link_in_chunk(rested.index, first);
                        first = rested.index;
                    }
                }
                self.spilled.push(&inner.arena, first);
            })
        };
    }
}
