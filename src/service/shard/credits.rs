//! The owner's handle counts: handles counted made in advance (credits),
//! and handles dropped but not yet counted (owed drops), both plain fields
//! of the shard's core.
//!
//! Every handle is counted made and gone on a shard's atomic counters
//! (`handles.rs`); only the sum over all of them means anything, and only
//! once shutdown begins. A locked read-modify-write per handle made and per
//! handle dropped was two of a remote STOP pair's locked instructions, and
//! on the START side it waited for the stores to the START's slot (a slot
//! rested cold in the free rotation) before the next instruction could
//! retire (`owner_ops cross-stop 3000000 8` under `perf`: 30 % of the START
//! loop's samples on the instruction after it). So the thread that holds a
//! shard's claim counts on that shard's core with plain arithmetic:
//!
//! * **Made**: it takes `CREDITS` handles' worth of the atomic `made`
//!   counter at once and hands them out one per handle. Unused credits are
//!   handles counted made that nobody holds, so the total can only be too
//!   high, never too low: the service's memory can only be kept too long,
//!   never freed under a live handle.
//! * **Dropped**: it counts drops in `drops_owed` and adds `CREDITS` of
//!   them at once. Owed drops, too, only keep the total high.
//!
//! Too high is put right whenever a claim is given up (`ShardGuard`'s
//! drop, which drivers' threads also run) and by the shutdown sweep of the
//! shard (run under the claim by whoever holds or takes it once the service
//! is shut down: the shutdown thread sweeps the shards nobody holds, a
//! holder sweeps its own at its next poll or when it lets go). Each counts
//! the unused credits and the owed drops gone in one RMW, and if that
//! brings the total to 0 gives back the strong count the handles held, as
//! the last handle would have. Settling at every release matters: a holder
//! that lets go just as the service shuts down may miss both its own sweep
//! (it saw the service live) and the shutdown thread's (which found the
//! shard still held), and what its core held would keep the service's
//! memory for good. The sweep also marks the core settled: from then on
//! the claim holder counts on the atomics, one handle at a time, so nothing
//! counted after the sweep (a handle dropped by user code the sweep runs,
//! or later) stays in the core.
//!
//! Whoever holds the claim counts here, the owner or a helper in a lent
//! shard: the core's fields pass between them with the claim (lending a
//! shard is not letting go of it).
//!
//! Measured with whole programs before and after, alternating runs
//! (`farm-bench -n 10`, `examples/owner_ops.rs`): the cross-thread ring
//! `cross-stop 3000000 2` 0.82x the time, at 8 threads 0.94x, an owner's
//! START + cancel 0.89x and a `Sleep` made, polled and dropped 0.91x, with
//! more instructions (START + cancel 400 -> 413 under callgrind,
//! `TICKWHEEL_TSC=0`): what the locked instructions cost was their wait,
//! not their count. Tests: `tests/service.rs`
//! `item15_handles_counted_by_owners_keep_the_service_until_the_last_goes`; loom
//! `owner_credits_vs_shutdown_vs_last_handle`.

use super::*;

/// How many handles an owner counts made at once, and how many drops it
/// owes before it counts them.
#[cfg(not(any(loom, shuttle)))]
const CREDITS: u32 = 64;

/// Under loom and shuttle, two: so that models reach a refill and a payment.
#[cfg(any(loom, shuttle))]
const CREDITS: u32 = 2;

impl Shard {
    /// Counts a new handle made by the thread that holds this shard's
    /// claim. `true`: the caller must take a strong count of the service
    /// for the handles (`HandleCounts::made`).
    ///
    /// # Safety
    /// The caller holds the shard's claim and no reference into its core.
    #[inline]
    pub(crate) unsafe fn count_made(&self, inner: &Inner, shard: usize) -> bool {
        // SAFETY: forwarded.
        let spent = unsafe {
            self.core(|core| {
                if core.credits > 0 {
                    core.credits -= 1;
                    true
                } else {
                    false
                }
            })
        };
        // SAFETY: forwarded.
        !spent && unsafe { self.refill_credits(inner, shard) }
    }

    /// [`count_made`](Self::count_made) with no credit left: takes
    /// `CREDITS` at once and spends one, or, once the shutdown sweep has
    /// settled this core, counts the one handle on the atomics (see the
    /// module docs).
    ///
    /// # Safety
    /// As for `count_made`.
    #[cold]
    unsafe fn refill_credits(&self, inner: &Inner, shard: usize) -> bool {
        // SAFETY: forwarded.
        let settled = unsafe {
            self.core(|core| {
                if !core.settled {
                    core.credits = CREDITS - 1;
                }
                core.settled
            })
        };
        if settled {
            inner.handles.made(shard)
        } else {
            inner.handles.made_many(shard, u64::from(CREDITS))
        }
    }

    /// Counts a handle dropped by the thread that holds this shard's claim.
    /// `true`: it was the last handle after shutdown, and the caller gives
    /// back the strong count the handles held (`HandleCounts::dropped`).
    ///
    /// # Safety
    /// The caller holds the shard's claim and no reference into its core.
    #[inline]
    pub(crate) unsafe fn count_dropped(&self, inner: &Inner, shard: usize) -> bool {
        // SAFETY: forwarded.
        let owed = unsafe {
            self.core(|core| {
                if core.settled {
                    return None;
                }
                core.drops_owed += 1;
                Some(core.drops_owed)
            })
        };
        match owed {
            Some(owed) if owed < CREDITS => false,
            // SAFETY: forwarded.
            Some(_) => unsafe { self.pay_drops(inner, shard) },
            None => inner.handles.dropped(shard),
        }
    }

    /// Counts the owed drops on the atomics (`CREDITS` of them, or, once
    /// the service is shut down, whatever is owed).
    ///
    /// # Safety
    /// As for `count_dropped`.
    #[cold]
    unsafe fn pay_drops(&self, inner: &Inner, shard: usize) -> bool {
        // SAFETY: forwarded.
        let owed = unsafe { self.core(|core| std::mem::take(&mut core.drops_owed)) };
        inner.handles.dropped_many(shard, u64::from(owed))
    }

    /// Counts this core's unused credits and owed drops gone, on the
    /// service's counters: when the claim is given up (`ShardGuard`'s drop),
    /// and last in the shutdown sweep (`sweep`: then the core is marked
    /// settled, and its holder counts on the atomics from then on). If that
    /// was the last of the handles after shutdown, gives back the strong
    /// count they held.
    ///
    /// # Safety
    /// The caller holds the shard's claim and no reference into its core.
    pub(crate) unsafe fn settle_credits(&self, inner: &Arc<Inner>, shard: usize, sweep: bool) {
        // SAFETY: forwarded.
        let gone = unsafe {
            self.core(|core| {
                core.settled |= sweep;
                u64::from(std::mem::take(&mut core.credits))
                    + u64::from(std::mem::take(&mut core.drops_owed))
            })
        };
        if inner.handles.dropped_many(shard, gone) {
            // SAFETY: the handles' strong count, taken at shutdown or by the
            // first handle after it (`handles.rs`); the caller's own `Arc`
            // keeps the service alive past this.
            unsafe { Arc::decrement_strong_count(Arc::as_ptr(inner)) };
        }
    }
}
