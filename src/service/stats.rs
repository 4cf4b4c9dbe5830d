//! Counters each shard owner keeps (single writer, relaxed atomics) and the
//! summary a [`TimerService`](crate::TimerService) reports.

use std::time::Duration;

use crossbeam_utils::CachePadded;

use super::Inner;
// Plain std atomics even under loom: statistics take no part in any protocol,
// and modelling every counter update would only multiply loom's branches.
use std::sync::atomic::{AtomicU64, Ordering};

/// Lateness histogram, in nanoseconds on the service's clock, log-linear:
/// values below `SUB` have a bucket each; above, each power of two is cut
/// into `SUB` equal buckets, so a bucket's upper bound is within 1/`SUB`
/// (6.25 %) of any value in it.
const SUB_BITS: u32 = 4;
const SUB: u64 = 1 << SUB_BITS;
const BUCKETS: usize = ((64 - SUB_BITS + 1) * SUB as u32) as usize;

/// The histogram bucket of `nanos`.
fn bucket_of(nanos: u64) -> usize {
    if nanos < SUB {
        return nanos as usize;
    }
    let exp = u64::BITS - 1 - nanos.leading_zeros(); // >= SUB_BITS
    let sub = (nanos >> (exp - SUB_BITS)) & (SUB - 1);
    ((exp - SUB_BITS + 1) as u64 * SUB + sub) as usize
}

/// The largest value in bucket `bucket`.
fn bucket_max(bucket: usize) -> u64 {
    let bucket = bucket as u64;
    if bucket < SUB {
        return bucket;
    }
    let exp = bucket / SUB - 1 + SUB_BITS as u64;
    let sub = bucket % SUB;
    let low = (1u64 << exp) | (sub << (exp - SUB_BITS as u64));
    low.saturating_add((1u64 << (exp - SUB_BITS as u64)) - 1)
}

/// A counter with one writer (the shard owner): a plain load and store,
/// not a locked read-modify-write, since no two threads ever add at once.
/// Readers see some recent value.
#[derive(Default)]
pub(crate) struct OwnerCounter(AtomicU64);

impl OwnerCounter {
    pub(crate) fn bump(&self, by: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(by),
            Ordering::Relaxed,
        );
    }

    /// For a counter other threads bump too (rare events: panics).
    pub(crate) fn bump_shared(&self, by: u64) {
        self.0.fetch_add(by, Ordering::Relaxed);
    }

    pub(crate) fn set(&self, value: u64) {
        self.0.store(value, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

pub(crate) struct ShardCounters {
    pub(crate) fired: OwnerCounter,
    pub(crate) panics: OwnerCounter,
    pub(crate) overruns: OwnerCounter,
    pub(crate) freed: OwnerCounter,
    pub(crate) armed: OwnerCounter,
    max_lateness: OwnerCounter,
    lateness: [OwnerCounter; BUCKETS],
    /// Operations of other threads that found this shard's remote queue
    /// full and waited for the owner (many writers, hence a real RMW; a
    /// cold path).
    pub(crate) held_back: AtomicU64,
    /// Slots other threads reused in place for a START (`Inner::revive`):
    /// freed and taken again without the owner. On a line of its own: other
    /// threads write it on every revived START, the owner the rest of these
    /// on every START and free.
    pub(crate) revived: CachePadded<AtomicU64>,
    /// The tick by which the owner must next poll, as of its last poll
    /// (`u64::MAX`: nothing armed), for the waiting part of `lateness_max`.
    pub(crate) next_due_tick: OwnerCounter,
}

impl Default for ShardCounters {
    fn default() -> Self {
        ShardCounters {
            fired: OwnerCounter::default(),
            panics: OwnerCounter::default(),
            overruns: OwnerCounter::default(),
            freed: OwnerCounter::default(),
            armed: OwnerCounter::default(),
            max_lateness: OwnerCounter::default(),
            lateness: std::array::from_fn(|_| OwnerCounter::default()),
            held_back: AtomicU64::new(0),
            revived: CachePadded::new(AtomicU64::new(0)),
            next_due_tick: OwnerCounter(AtomicU64::new(u64::MAX)),
        }
    }
}

impl ShardCounters {
    /// One callback is starting, `lateness_nanos` after its deadline on the
    /// service's clock.
    pub(crate) fn record_fire(&self, lateness_nanos: u64) {
        self.fired.bump(1);
        self.lateness[bucket_of(lateness_nanos)].bump(1);
        if lateness_nanos > self.max_lateness.get() {
            self.max_lateness.set(lateness_nanos);
        }
    }
}

/// A snapshot of a service's counters, summed over its shards.
///
/// Figures are read without stopping the owners, so a snapshot taken while
/// timers fire is approximate; at a quiescent point it is exact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stats {
    /// Callbacks run.
    pub fired: u64,
    /// Callbacks that panicked (caught; the shard kept running).
    pub panics: u64,
    /// Periods skipped by periodic timers because an owner was late.
    pub overruns: u64,
    /// Timer slots freed and returned for reuse.
    pub freed: u64,
    /// Timers in the shards' wheels as of each owner's last poll. A timer
    /// that another thread stopped leaves the count when its owner takes
    /// the stop in (its next poll; a sleeping owner is woken for that only
    /// once such stops pass a third of its wheel plus 64).
    pub armed: u64,
    /// STARTs and RESTARTs by other threads that found a shard's remote
    /// queue full (1024 entries waiting) and were slowed down to let its
    /// owner catch up (backpressure, CONTRACT 20).
    pub held_back: u64,
    /// Timer slots ever allocated (the memory high-water mark, in slots).
    pub slots: u64,
    /// Bytes one slot takes: the service's own bookkeeping per timer, its
    /// wheel entry and a callback of up to 24 bytes included (a larger
    /// callback is boxed apart).
    pub slot_bytes: u64,
    /// Median lateness of the callbacks run so far: from the deadline asked
    /// for to the callback's start, on the service's clock (as
    /// [`Expiry::lateness`](crate::Expiry::lateness)), rounded up by at most
    /// 6.25 %.
    pub lateness_p50: Duration,
    /// 99th percentile lateness, measured and rounded like `lateness_p50`.
    pub lateness_p99: Duration,
    /// Largest lateness: of the callbacks run so far, and of the work that is
    /// due now and still waiting for its owner (a shard whose next due tick
    /// has passed counts as late by that much, although nothing has fired
    /// yet).
    pub lateness_max: Duration,
}

impl Stats {
    pub(crate) fn collect(inner: &Inner) -> Stats {
        let mut histogram = [0u64; BUCKETS];
        let mut stats = Stats {
            fired: 0,
            panics: 0,
            overruns: 0,
            freed: 0,
            armed: 0,
            held_back: 0,
            slots: inner.arena.slots() as u64,
            slot_bytes: std::mem::size_of::<super::arena::Slot>() as u64,
            lateness_p50: Duration::ZERO,
            lateness_p99: Duration::ZERO,
            lateness_max: Duration::ZERO,
        };
        let mut max = 0;
        for shard in inner.shards.iter() {
            let c = &shard.counters;
            stats.fired += c.fired.get();
            stats.panics += c.panics.get();
            stats.overruns += c.overruns.get();
            stats.freed += c.freed.get() + c.revived.load(Ordering::Relaxed);
            stats.armed += c.armed.get();
            stats.held_back += c.held_back.load(Ordering::Relaxed);
            max = max.max(c.max_lateness.get());
            for (total, bucket) in histogram.iter_mut().zip(c.lateness.iter()) {
                *total += bucket.get();
            }
        }
        stats.lateness_p50 = Duration::from_nanos(percentile(&histogram, 50).min(max));
        stats.lateness_p99 = Duration::from_nanos(percentile(&histogram, 99).min(max));
        // Work due and not yet done counts too: an owner that has fallen
        // behind has fired nothing late yet, but its next timer is late.
        let now = inner.clock.raw_nanos();
        for shard in inner.shards.iter() {
            let due = shard.counters.next_due_tick.get();
            if due != u64::MAX {
                let waiting = now.saturating_sub(due.saturating_mul(inner.tick_nanos));
                max = max.max(waiting);
            }
        }
        stats.lateness_max = Duration::from_nanos(max);
        stats
    }
}

/// Upper bound (in nanoseconds) of the histogram bucket holding the `p`th
/// percentile.
fn percentile(histogram: &[u64; BUCKETS], p: u64) -> u64 {
    let total: u64 = histogram.iter().sum();
    if total == 0 {
        return 0;
    }
    let rank = (total * p).div_ceil(100);
    let mut seen = 0;
    for (bucket, count) in histogram.iter().enumerate() {
        seen += count;
        if seen >= rank {
            return bucket_max(bucket);
        }
    }
    u64::MAX
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_the_histogram() {
        let counters = ShardCounters::default();
        for _ in 0..98 {
            counters.record_fire(0);
        }
        counters.record_fire(5); // below SUB: exact
        counters.record_fire(1000); // [992, 1023]: 1000 = 0b11_1110_1000
        let mut histogram = [0u64; BUCKETS];
        for (total, bucket) in histogram.iter_mut().zip(counters.lateness.iter()) {
            *total = bucket.get();
        }
        assert_eq!(percentile(&histogram, 50), 0);
        assert_eq!(percentile(&histogram, 99), 5);
        assert_eq!(percentile(&histogram, 100), 1023);
        assert_eq!(counters.max_lateness.get(), 1000);
    }

    #[test]
    fn buckets_are_within_one_sixteenth_of_their_values() {
        let mut previous_max = None;
        for bucket in 0..BUCKETS {
            let max = bucket_max(bucket);
            assert_eq!(bucket_of(max), bucket, "bucket {bucket}");
            if let Some(previous) = previous_max {
                assert_eq!(bucket_of(previous + 1), bucket, "buckets are contiguous");
                let low = previous + 1;
                assert!(max - low <= low / 16, "bucket {bucket}: {low}..={max}");
            }
            previous_max = (max != u64::MAX).then_some(max);
            if max == u64::MAX {
                assert_eq!(bucket, BUCKETS - 1);
            }
        }
    }
}
