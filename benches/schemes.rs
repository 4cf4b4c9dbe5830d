//! The paper's Table II, measured: cost per START, per STOP and per tick of
//! schemes 1-7 against the number `n` of armed timers.
//!
//! Setup, for every scheme and `n` in 1k, 10k, 100k, 1M: `n` timers with
//! intervals uniform in `1..=RANGE` ticks (2^20, about 17 minutes of 1 ms
//! ticks), started in deadline order. (Started in random order, scheme 2 would
//! take O(n^2) to set up: ten minutes at 1M.) The basic wheel (4) has
//! MaxInterval = `RANGE`; the hashed wheels (5, 6) have `SLOTS` = 4096 lists,
//! so `n / SLOTS` ranges from 0.25 to 244 timers per list.
//!
//! * `start`: START a timer with a random interval in `1..=RANGE`; its STOP,
//!   outside the timed section, keeps `n` constant.
//! * `stop`: STOP a random armed timer; a replacement is started outside the
//!   timed section with interval `RANGE` (appended at the tail of every sorted
//!   list, so cheap for every scheme).
//! * `tick`: one tick of PER_TICK_BOOKKEEPING on a fresh population,
//!   including the expiry of the `n / RANGE` timers due on an average tick,
//!   which are re-started with interval `RANGE` outside the timed section (so
//!   the deadlines stay uniform: one re-start per expiry, each a tick later).
//!
//! Each timed section covers a chunk of up to 1024 operations, so the clock is
//! read twice per chunk, not per operation.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use tickwheel::schemes::{
    BasicWheel, HashedWheelSorted, HashedWheelUnsorted, HierarchicalWheel, OrderedList, TimerHeap,
    TimerScheme, UnorderedList,
};

const SIZES: [usize; 4] = [1_000, 10_000, 100_000, 1_000_000];
const RANGE: u64 = 1 << 20;
const SLOTS: usize = 4096;
const CHUNK: u64 = 1024;

/// SplitMix64, so every scheme sees the same numbers.
struct Rng(u64);

impl Rng {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % bound
    }
}

/// `n` armed timers, started in deadline order; returns their handles.
fn populate<S: TimerScheme>(scheme: &mut S, n: usize, rng: &mut Rng) -> Vec<S::Handle> {
    let mut intervals: Vec<u64> = (0..n).map(|_| 1 + rng.below(RANGE)).collect();
    intervals.sort_unstable();
    intervals
        .iter()
        .enumerate()
        .map(|(id, &interval)| scheme.start(interval, id as u64).unwrap())
        .collect()
}

/// Runs `chunk(k)` for chunks of at most `size` until `iters` operations are
/// done, summing the durations it reports.
fn chunked(iters: u64, size: u64, mut chunk: impl FnMut(u64) -> Duration) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let k = left.min(size);
        total += chunk(k);
        left -= k;
    }
    total
}

fn bench_scheme<S: TimerScheme>(c: &mut Criterion, make: impl Fn() -> S) {
    for n in SIZES {
        let mut rng = Rng(n as u64);
        let mut scheme = make();
        let mut handles = populate(&mut scheme, n, &mut rng);
        let mut next_id = n as u64;
        let id = BenchmarkId::new(S::NAME, n);

        let mut group = c.benchmark_group("table2/start");
        group.bench_function(id.clone(), |b| {
            let mut started = Vec::with_capacity(CHUNK as usize);
            b.iter_custom(|iters| {
                chunked(iters, CHUNK, |k| {
                    let intervals: Vec<u64> = (0..k).map(|_| 1 + rng.below(RANGE)).collect();
                    let start = Instant::now();
                    for &interval in &intervals {
                        started.push(scheme.start(black_box(interval), next_id).unwrap());
                        next_id += 1;
                    }
                    let elapsed = start.elapsed();
                    for handle in started.drain(..) {
                        assert!(scheme.stop(handle));
                    }
                    elapsed
                })
            })
        });
        group.finish();

        let mut group = c.benchmark_group("table2/stop");
        group.bench_function(id.clone(), |b| {
            b.iter_custom(|iters| {
                chunked(iters, CHUNK, |k| {
                    let mut victims: Vec<usize> =
                        (0..k).map(|_| rng.below(n as u64) as usize).collect();
                    victims.sort_unstable();
                    victims.dedup();
                    let doomed: Vec<S::Handle> = victims.iter().map(|&i| handles[i]).collect();
                    let start = Instant::now();
                    for &handle in &doomed {
                        black_box(scheme.stop(handle));
                    }
                    let elapsed = start.elapsed();
                    for &i in &victims {
                        handles[i] = scheme.start(RANGE, next_id).unwrap();
                        next_id += 1;
                    }
                    // Deduplication may have dropped a few: scale to `k`.
                    elapsed.mul_f64(k as f64 / victims.len() as f64)
                })
            })
        });
        group.finish();

        // A fresh population for `tick`: the `stop` group's replacements all
        // share the deadline `RANGE`, a burst that would skew per-tick costs.
        drop(scheme);
        let mut scheme = make();
        populate(&mut scheme, n, &mut rng);
        let mut group = c.benchmark_group("table2/tick");
        group.bench_function(id, |b| {
            let mut expired = Vec::with_capacity(1024);
            b.iter_custom(|iters| {
                chunked(iters, 64, |k| {
                    let start = Instant::now();
                    for _ in 0..k {
                        scheme.tick(|id| expired.push(id));
                    }
                    let elapsed = start.elapsed();
                    // Keeps `n` armed; `tick` is the last group, so the new
                    // handles are not needed.
                    for id in expired.drain(..) {
                        scheme.start(RANGE, id).unwrap();
                    }
                    elapsed
                })
            })
        });
        group.finish();
        assert_eq!(scheme.len(), n, "{} lost timers", S::NAME);
    }
}

fn schemes(c: &mut Criterion) {
    bench_scheme(c, UnorderedList::new);
    bench_scheme(c, OrderedList::new);
    bench_scheme(c, TimerHeap::new);
    bench_scheme(c, || BasicWheel::new(RANGE));
    bench_scheme(c, || HashedWheelSorted::new(SLOTS));
    bench_scheme(c, || HashedWheelUnsorted::new(SLOTS));
    bench_scheme(c, HierarchicalWheel::new);
}

fn main() {
    let mut criterion = Criterion::default().sample_size(20).configure_from_args();
    schemes(&mut criterion);
    criterion.final_summary();
}
