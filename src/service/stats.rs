//! Counters each shard owner keeps (single writer, relaxed atomics) and the
//! summary a [`TimerService`](crate::TimerService) reports.

use std::time::Duration;

use super::Inner;
// Plain std atomics even under loom: statistics take no part in any protocol,
// and modelling every counter update would only multiply loom's branches.
use std::sync::atomic::{AtomicU64, Ordering};

/// Lateness histogram buckets: bucket `b` counts lateness in `[2^(b-1), 2^b)` ticks
/// (bucket 0: on time).
const BUCKETS: usize = 65;

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
        }
    }
}

impl ShardCounters {
    pub(crate) fn record_fire(&self, lateness_ticks: u64) {
        self.fired.bump(1);
        let bucket = (u64::BITS - lateness_ticks.leading_zeros()) as usize;
        self.lateness[bucket].bump(1);
        if lateness_ticks > self.max_lateness.get() {
            self.max_lateness.set(lateness_ticks);
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
    /// Timers in the shards' wheels as of each owner's last poll.
    pub armed: u64,
    /// Timer slots ever allocated (the memory high-water mark, in slots).
    pub slots: u64,
    /// Bytes one slot takes: the service's own bookkeeping per timer, its
    /// wheel entry included (the boxed callback is apart).
    pub slot_bytes: u64,
    /// Median lateness, rounded up to a power of two ticks.
    pub lateness_p50: Duration,
    /// 99th percentile lateness, rounded up to a power of two ticks.
    pub lateness_p99: Duration,
    /// Largest lateness seen.
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
            stats.freed += c.freed.get();
            stats.armed += c.armed.get();
            max = max.max(c.max_lateness.get());
            for (total, bucket) in histogram.iter_mut().zip(c.lateness.iter()) {
                *total += bucket.get();
            }
        }
        let ticks = |t: u64| Duration::from_nanos(t.saturating_mul(inner.tick_nanos));
        stats.lateness_max = ticks(max);
        stats.lateness_p50 = ticks(percentile(&histogram, 50).min(max));
        stats.lateness_p99 = ticks(percentile(&histogram, 99).min(max));
        stats
    }
}

/// Upper bound (in ticks) of the histogram bucket holding the `p`th percentile.
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
            return if bucket == 0 {
                0
            } else {
                (1u64 << (bucket - 1)).saturating_mul(2) - 1
            };
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
        counters.record_fire(5); // bucket 3: [4, 8)
        counters.record_fire(1000); // bucket 10: [512, 1024)
        let mut histogram = [0u64; BUCKETS];
        for (total, bucket) in histogram.iter_mut().zip(counters.lateness.iter()) {
            *total = bucket.get();
        }
        assert_eq!(percentile(&histogram, 50), 0);
        assert_eq!(percentile(&histogram, 99), 7);
        assert_eq!(percentile(&histogram, 100), 1023);
        assert_eq!(counters.max_lateness.get(), 1000);
    }
}
