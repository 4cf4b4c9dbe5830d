//! Remote STOPs batched by a thread that holds a shard of its own: the
//! slots it stopped on another shard wait in its own shard's core and go
//! onto that shard's remote queue together, with one CAS.
//!
//! A STOP that releases the handle (`Timer::cancel`, or the handle's drop)
//! of another shard's armed timer is decided by its CAS on the slot's word,
//! which also sets `QUEUED` (`stop.rs`). From then on nobody but this
//! thread may touch the slot: the word is stopped, released and queued,
//! which no other thread changes (`remote.rs`). So the push that hands the
//! slot to its owner can wait: the slot goes into this thread's batch
//! (`ShardCore::stops`), and the batch is pushed as one list
//! (`RemoteQueue::push_stops`) when it is full, when a stop for another
//! shard comes, at the end of each of this shard's polls, and when the
//! claim is let go. Each push was a locked CAS on the target queue's line,
//! a tenth of a thread's time in a ring of owners stopping each other's
//! timers (`owner_ops cross-stop` under `perf`). Batched: `cargo bench
//! --bench service_vs_tokio -- targets cross_stop`, two runs of each, the
//! ring at 2 threads 0.61-0.63x the sharded mutex's time against 0.82x
//! with each stop pushed (`farm-bench -n 10`, whole programs: `owner_ops
//! cross-stop 3000000 2` and `8`, 0.94x and 0.95x the time).
//!
//! What waits in a batch is memory only: the timer is stopped (its CAS
//! returned `Cancelled`), and its owner, meeting the slot in its wheel
//! (due, cascading), leaves a `QUEUED` slot for the take-in that will come.
//! At most `STOP_BATCH` slots wait per shard, the "small constant per
//! shard" of CONTRACT 13; whether the owner must wake to reclaim is judged,
//! as for a single push, by the batch's push (`Shard::push_stop`'s rule).
//! STOPs that keep the handle, and the stops of threads that hold no shard,
//! are pushed at once as before.
//!
//! loom: `batched_remote_stops_vs_fire_vs_take`.

use std::ptr::NonNull;

use super::*;

/// How many remote STOPs a shard's holder batches before it pushes them.
#[cfg(not(any(loom, shuttle)))]
pub(super) const STOP_BATCH: usize = 32;

/// Under loom and shuttle, two: so that models reach a full batch.
#[cfg(any(loom, shuttle))]
pub(super) const STOP_BATCH: usize = 2;

/// The remote STOPs waiting in a shard's core (see the module docs).
pub(super) struct StopBatch {
    /// The shard every slot here belongs to.
    target: usize,
    len: usize,
    slots: [(u32, NonNull<Slot>); STOP_BATCH],
}

// SAFETY: addresses of slots of the service's arena, which lives as long as
// the service; only the thread that holds the shard's claim reads them.
unsafe impl Send for StopBatch {}

impl StopBatch {
    pub(super) const fn new() -> Self {
        StopBatch {
            target: 0,
            len: 0,
            slots: [(NIL, NonNull::dangling()); STOP_BATCH],
        }
    }
}

impl Shard {
    /// A remote STOP this thread, which holds this shard, just decided:
    /// slot `index` (`slot`) of shard `target` is stopped, released and
    /// `QUEUED` by its CAS. Batches it (see the module docs).
    ///
    /// # Safety
    /// The caller holds this shard's claim and no reference into its core;
    /// `target` is another shard.
    #[inline]
    pub(crate) unsafe fn batch_stop(&self, inner: &Inner, target: usize, index: u32, slot: &Slot) {
        // SAFETY: forwarded.
        let (other_target, full) = unsafe {
            self.core(|core| {
                let batch = &mut core.stops;
                let other = batch.len > 0 && batch.target != target;
                (other, batch.len + 1 >= STOP_BATCH)
            })
        };
        if other_target {
            // SAFETY: forwarded.
            unsafe { self.flush_stops(inner) };
        }
        // SAFETY: forwarded.
        unsafe {
            self.core(|core| {
                let batch = &mut core.stops;
                batch.target = target;
                batch.slots[batch.len] = (index, NonNull::from(slot));
                batch.len += 1;
            })
        };
        if full && !other_target {
            // SAFETY: forwarded.
            unsafe { self.flush_stops(inner) };
        }
    }

    /// Pushes the batched remote STOPs onto their shard's queue, and wakes
    /// its owner if the reclaim bound is passed (as a single push would).
    ///
    /// # Safety
    /// The caller holds this shard's claim and no reference into its core.
    pub(crate) unsafe fn flush_stops(&self, inner: &Inner) {
        // SAFETY: forwarded; the push runs no user code.
        let woken = unsafe {
            self.core(|core| {
                let batch = &mut core.stops;
                if batch.len == 0 {
                    return None;
                }
                let n = std::mem::take(&mut batch.len);
                let target = &inner.shards[batch.target];
                // (Inside the `unsafe` above, for this too: the first `n`
                // are addresses of slots of the service's arena, each with
                // its index, `batch_stop`.)
                let queued = target.remote.push_stops(&batch.slots[..n]);
                (target.remote.reclaim_due(queued) && target.queued_for(0)).then_some(batch.target)
            })
        };
        if let Some(target) = woken {
            inner.wake(target);
        }
    }
}
