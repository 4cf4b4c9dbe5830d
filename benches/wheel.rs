//! Cost of the single-threaded [`Wheel`] per operation, at 1k, 100k and 1M
//! armed timers.
//!
//! Every benchmark builds its wheel outside the timed part and then runs in
//! a steady state that keeps exactly `n` timers armed, so one iteration is
//! one operation on a wheel of size `n`. Delays come from a fixed-seed
//! generator; with a 1 ms tick the armed deadlines span one minute (60 000
//! ticks), which spreads them over levels 0 to 2.
//!
//! * `insert_cancel`: arm a timer with a random delay, cancel the oldest one.
//! * `insert_expire`: move one tick; exactly one timer is due there and
//!   expires; arm its replacement `n` ticks ahead (timers sit one per tick,
//!   so every expiry includes its share of cascading).
//! * `reschedule_later`: the idle-timeout pattern: push one timer (round
//!   robin) to `now + 30 s`; time moves one tick every 64 reschedules, and
//!   a timer that does come due is re-armed.
//! * `advance_idle`: jump an hour of 1 ms ticks (3.6 M ticks) with all `n`
//!   timers far in the future: idle time, O(levels) per jump.
//! * `next_deadline`: ask for the earliest deadline.
//! * `next_deadline_walk`: the same right after the earliest timer changed,
//!   when it sits in a higher bucket: all `n` timers in one level-3 bucket,
//!   linked in random memory order (as after churn), so the query walks the
//!   whole bucket (the worst case of the next-deadline memo). One iteration
//!   is one arm + cancel of an earlier timer (which forgets the memo) and
//!   one query.
//!
//! Run: `cargo bench --bench wheel` (or add `-- --quick` for a short run).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tickwheel::{TimerKey, Wheel};

const SIZES: [usize; 3] = [1_000, 100_000, 1_000_000];
/// Deadlines of armed timers lie within this many ticks (1 minute at 1 ms).
const SPAN: u64 = 60_000;
/// The idle timeout of `reschedule_later` (30 s at 1 ms).
const IDLE_TIMEOUT: u64 = 30_000;
/// One hour of 1 ms ticks.
const HOUR: u64 = 3_600_000;

/// xorshift64*: a fixed-seed generator, so every run measures the same work.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// 4096 delays in `1..=SPAN`, cycled through by the timed loops so that the
/// generator stays out of the measurement.
fn delays() -> Vec<u64> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    (0..4096).map(|_| 1 + rng.next() % SPAN).collect()
}

/// A wheel with `n` timers at random delays in `1..=SPAN`, timer `i`
/// carrying payload `i`, and the keys in payload order.
fn armed(n: usize) -> (Wheel<usize>, Vec<TimerKey>) {
    let delays = delays();
    let mut wheel = Wheel::with_capacity(n + 1);
    let keys = (0..n)
        .map(|i| wheel.insert(delays[i % delays.len()], i))
        .collect();
    (wheel, keys)
}

fn insert_cancel(c: &mut Criterion) {
    let mut group = c.benchmark_group("wheel/insert_cancel");
    group.throughput(Throughput::Elements(1));
    for n in SIZES {
        let (mut wheel, mut keys) = armed(n);
        let delays = delays();
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            let mut i = 0usize;
            b.iter(|| {
                let slot = i % n;
                let key = wheel.insert(delays[i % delays.len()], slot);
                let oldest = std::mem::replace(&mut keys[slot], key);
                black_box(wheel.cancel(oldest));
                i += 1;
            });
        });
        assert_eq!(wheel.len(), n);
    }
    group.finish();
}

fn insert_expire(c: &mut Criterion) {
    let mut group = c.benchmark_group("wheel/insert_expire");
    group.throughput(Throughput::Elements(1));
    for n in SIZES {
        // One timer per tick, due at 1..=n.
        let mut wheel = Wheel::with_capacity(n + 1);
        for i in 1..=n as u64 {
            wheel.insert(i, ());
        }
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| {
                let target = wheel.now() + 1;
                let fired = wheel.poll(target).expect("one timer due per tick");
                black_box(fired);
                wheel.insert(n as u64, ());
            });
        });
        assert_eq!(wheel.len(), n);
    }
    group.finish();
}

fn reschedule_later(c: &mut Criterion) {
    let mut group = c.benchmark_group("wheel/reschedule_later");
    group.throughput(Throughput::Elements(1));
    for n in SIZES {
        let (mut wheel, mut keys) = armed(n);
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            let mut i = 0usize;
            b.iter(|| {
                let slot = i % n;
                wheel
                    .reschedule(keys[slot], IDLE_TIMEOUT)
                    .expect("armed timers stay armed");
                i += 1;
                if i % 64 == 0 {
                    let target = wheel.now() + 1;
                    while let Some(e) = wheel.poll(target) {
                        // Timed out before its next activity: re-arm it.
                        keys[e.value] = wheel.insert(IDLE_TIMEOUT, e.value);
                    }
                }
            });
        });
        assert_eq!(wheel.len(), n);
    }
    group.finish();
}

fn advance_idle(c: &mut Criterion) {
    let mut group = c.benchmark_group("wheel/advance_idle_hour");
    group.throughput(Throughput::Elements(1));
    for n in SIZES {
        // Far timers: beyond 2^62 ticks, so no run of this benchmark (an hour
        // per iteration) gets anywhere near them.
        let mut rng = Rng(7);
        let mut wheel = Wheel::with_capacity(n);
        for i in 0..n {
            wheel.insert((1 << 62) + rng.next() % (1 << 61), i);
        }
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| {
                let target = wheel.now() + HOUR;
                assert!(wheel.poll(black_box(target)).is_none());
            });
        });
        assert_eq!(wheel.len(), n);
    }
    group.finish();
}

fn next_deadline(c: &mut Criterion) {
    let mut group = c.benchmark_group("wheel/next_deadline");
    group.throughput(Throughput::Elements(1));
    for n in SIZES {
        let (wheel, _keys) = armed(n);
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| black_box(black_box(&wheel).next_deadline()));
        });
    }
    group.finish();
}

fn next_deadline_walk(c: &mut Criterion) {
    let mut group = c.benchmark_group("wheel/next_deadline_walk");
    group.sample_size(10);
    for n in SIZES {
        // Armed far ahead in index order, then moved into one level-3
        // bucket (ticks 2^18 .. 2^19) in a shuffled order: a move earlier
        // relinks at the new bucket's tail, so list order is the shuffle.
        let mut wheel = Wheel::with_capacity(n + 1);
        let mut keys: Vec<TimerKey> = (0..n).map(|i| wheel.insert(HOUR + i as u64, i)).collect();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for i in (1..keys.len()).rev() {
            keys.swap(i, (rng.next() % (i as u64 + 1)) as usize);
        }
        for &key in &keys {
            wheel
                .reschedule_at(key, 280_000 + rng.next() % 240_000)
                .expect("armed");
        }
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| {
                let early = wheel.insert_at(270_000, usize::MAX);
                wheel.cancel(early);
                black_box(wheel.next_deadline())
            });
        });
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

// `criterion_group!` defines a public function it cannot document.
#[allow(missing_docs)]
mod group {
    use super::*;

    criterion_group! {
        name = benches;
        config = config();
        targets = insert_cancel, insert_expire, reschedule_later, advance_idle, next_deadline,
            next_deadline_walk
    }
}
criterion_main!(group::benches);
