//! tickwheel's [`Wheel`] against what users would pick instead, on one thread:
//! tokio-util's `DelayQueue`, `hierarchical_hash_wheel_timer`'s cancellable
//! `QuadWheelWithOverflow`, `std::collections::BinaryHeap` with lazy cancel,
//! and a `BTreeMap` keyed by (deadline, sequence number).
//!
//! Time is counted in 1 ms ticks for every implementation. Groups, each at
//! `n` armed timers (1k, 100k, 1M; 10M for tickwheel, the heap and the
//! B-tree, the cheapest to build):
//!
//! * `insert_cancel`: arm a timer with a random delay, then cancel it (START
//!   then STOP, the most common life of a timeout).
//! * `insert_expire`: arm 1024 timers with delays of 1..=64 ms, then advance
//!   64 ms so they all fire; cost per timer (always whole chunks of 1024).
//! * `reschedule_later`: move a random armed timer 1..=1024 ms later (an idle
//!   timeout pushed back by activity).
//! * `next_event`: ask for the earliest deadline.
//! * `advance_idle`: advance one hour (3.6 million 1 ms ticks) in which no
//!   timer is due.
//!
//! The population lies 2^26..2^27 ms (18 to 37 hours) ahead, so it never fires
//! during a run. For `advance_idle` it lies 2^62..2^63 ms ahead instead, as a
//! run advances millions of hours; `DelayQueue` (at most 2^36 ms ahead) and
//! `hierarchical_hash_wheel_timer` (an overflow list beyond 2^32 ms that is
//! re-scanned every 2^32 ms) cannot hold that, so they are measured empty.
//!
//! `DelayQueue` needs a tokio runtime with a timer: it gets a current-thread
//! runtime with a paused clock. Operations that only touch the queue (insert,
//! cancel, reset, peek) run inside `Runtime::enter`, entered outside the timed
//! section. Advancing time is `tokio::time::advance` followed by draining
//! `poll_expired`, inside one `block_on` per advance: that cost is counted,
//! because a `DelayQueue` cannot fire without its runtime's timer driver.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::fmt::Debug;
use std::future::poll_fn;
use std::hint::black_box;
use std::rc::Rc;
use std::task::Poll;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use hierarchical_hash_wheel_timer::wheels::cancellable::QuadWheelWithOverflow;
use hierarchical_hash_wheel_timer::wheels::Skip;
use hierarchical_hash_wheel_timer::IdOnlyTimerEntry;
use tickwheel::{TimerKey, Wheel};
use tokio::runtime::Runtime;
use tokio_util::time::{delay_queue, DelayQueue};

const SIZES: [usize; 3] = [1_000, 100_000, 1_000_000];
const BIG: usize = 10_000_000;
const NEAR: u64 = 1 << 26;
const FAR: u64 = 1 << 62;
const HOUR: u64 = 3_600_000;
const CHUNK: u64 = 1024;

/// SplitMix64, so every implementation sees the same numbers.
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

/// The operations every implementation offers, in 1 ms ticks.
trait Timers {
    type Key: Copy + Debug;
    const NAME: &'static str;
    /// The largest delay it can hold, in ticks.
    const MAX_DELAY: u64;
    fn new() -> Self;
    /// Arms a timer `delay >= 1` ticks from now.
    fn insert(&mut self, delay: u64) -> Self::Key;
    fn cancel(&mut self, key: Self::Key);
    /// Moves an armed timer to `delay` ticks from now; returns its key.
    fn reschedule(&mut self, key: Self::Key, delay: u64) -> Self::Key;
    /// Advances `ticks`, expiring what comes due; returns how many expired.
    fn advance(&mut self, ticks: u64) -> usize;
    /// The earliest deadline, in ticks from the start (`None` if unsupported).
    fn next_deadline(&mut self) -> Option<u64>;
    /// Runs `f` in whatever context the implementation needs.
    fn within<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        f(self)
    }
}

impl Timers for Wheel<usize> {
    type Key = TimerKey;
    const NAME: &'static str = "tickwheel";
    const MAX_DELAY: u64 = u64::MAX;
    fn new() -> Self {
        Wheel::new()
    }
    fn insert(&mut self, delay: u64) -> TimerKey {
        Wheel::insert(self, delay, 0)
    }
    fn cancel(&mut self, key: TimerKey) {
        black_box(Wheel::cancel(self, key));
    }
    fn reschedule(&mut self, key: TimerKey, delay: u64) -> TimerKey {
        Wheel::reschedule(self, key, delay).unwrap();
        key
    }
    fn advance(&mut self, ticks: u64) -> usize {
        let target = self.now() + ticks;
        let mut expired = 0;
        while let Some(timer) = self.poll(target) {
            black_box(timer);
            expired += 1;
        }
        expired
    }
    fn next_deadline(&mut self) -> Option<u64> {
        Wheel::next_deadline(self)
    }
}

/// `BinaryHeap` with lazy cancel: a cancelled entry stays in the heap until it
/// reaches the top; the heap is compacted when stale entries outnumber live
/// ones, so memory stays proportional to the armed timers.
struct LazyHeap {
    now: u64,
    heap: BinaryHeap<Reverse<(u64, u32, u32)>>,
    generations: Vec<u32>,
    free: Vec<u32>,
    live: usize,
}

impl LazyHeap {
    fn is_live(&self, &Reverse((_, slot, generation)): &Reverse<(u64, u32, u32)>) -> bool {
        self.generations[slot as usize] == generation
    }

    fn release(&mut self, slot: u32) {
        self.generations[slot as usize] += 1;
        self.free.push(slot);
        self.live -= 1;
    }

    fn pop_stale(&mut self) {
        while let Some(top) = self.heap.peek() {
            if self.is_live(top) {
                return;
            }
            self.heap.pop();
        }
    }
}

impl Timers for LazyHeap {
    type Key = (u32, u32);
    const NAME: &'static str = "binaryheap-lazy";
    const MAX_DELAY: u64 = u64::MAX;
    fn new() -> Self {
        LazyHeap {
            now: 0,
            heap: BinaryHeap::new(),
            generations: Vec::new(),
            free: Vec::new(),
            live: 0,
        }
    }
    fn insert(&mut self, delay: u64) -> (u32, u32) {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.generations.push(0);
            (self.generations.len() - 1) as u32
        });
        let generation = self.generations[slot as usize];
        self.heap
            .push(Reverse((self.now + delay, slot, generation)));
        self.live += 1;
        (slot, generation)
    }
    fn cancel(&mut self, (slot, generation): (u32, u32)) {
        if self.generations[slot as usize] == generation {
            self.release(slot);
            if self.heap.len() > 2 * self.live + 64 {
                let generations = &self.generations;
                self.heap
                    .retain(|&Reverse((_, s, g))| generations[s as usize] == g);
            }
        }
    }
    fn reschedule(&mut self, key: (u32, u32), delay: u64) -> (u32, u32) {
        self.cancel(key);
        self.insert(delay)
    }
    fn advance(&mut self, ticks: u64) -> usize {
        self.now += ticks;
        let mut expired = 0;
        while let Some(&Reverse((deadline, slot, generation))) = self.heap.peek() {
            if deadline > self.now {
                break;
            }
            self.heap.pop();
            if self.generations[slot as usize] == generation {
                self.release(slot);
                expired += 1;
            }
        }
        expired
    }
    fn next_deadline(&mut self) -> Option<u64> {
        self.pop_stale();
        self.heap.peek().map(|&Reverse((deadline, _, _))| deadline)
    }
}

/// `BTreeMap` keyed by (deadline, sequence number).
struct Tree {
    now: u64,
    seq: u64,
    map: BTreeMap<(u64, u64), usize>,
}

impl Timers for Tree {
    type Key = (u64, u64);
    const NAME: &'static str = "btreemap";
    const MAX_DELAY: u64 = u64::MAX;
    fn new() -> Self {
        Tree {
            now: 0,
            seq: 0,
            map: BTreeMap::new(),
        }
    }
    fn insert(&mut self, delay: u64) -> (u64, u64) {
        self.seq += 1;
        let key = (self.now + delay, self.seq);
        self.map.insert(key, 0);
        key
    }
    fn cancel(&mut self, key: (u64, u64)) {
        black_box(self.map.remove(&key));
    }
    fn reschedule(&mut self, key: (u64, u64), delay: u64) -> (u64, u64) {
        self.cancel(key);
        self.insert(delay)
    }
    fn advance(&mut self, ticks: u64) -> usize {
        self.now += ticks;
        let mut expired = 0;
        while let Some(entry) = self.map.first_entry() {
            if entry.key().0 > self.now {
                break;
            }
            black_box(entry.remove());
            expired += 1;
        }
        expired
    }
    fn next_deadline(&mut self) -> Option<u64> {
        self.map
            .first_key_value()
            .map(|(&(deadline, _), _)| deadline)
    }
}

/// tokio-util's `DelayQueue` on a current-thread runtime with a paused clock.
struct Tokio {
    runtime: Rc<Runtime>,
    queue: DelayQueue<usize>,
    start: tokio::time::Instant,
}

impl Timers for Tokio {
    type Key = delay_queue::Key;
    const NAME: &'static str = "tokio-delayqueue";
    const MAX_DELAY: u64 = (1 << 36) - 1;
    fn new() -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let start = runtime.block_on(async { tokio::time::Instant::now() });
        let queue = {
            let _context = runtime.enter();
            DelayQueue::new()
        };
        Tokio {
            runtime: Rc::new(runtime),
            queue,
            start,
        }
    }
    fn insert(&mut self, delay: u64) -> delay_queue::Key {
        self.queue.insert(0, Duration::from_millis(delay))
    }
    fn cancel(&mut self, key: delay_queue::Key) {
        black_box(self.queue.remove(&key));
    }
    fn reschedule(&mut self, key: delay_queue::Key, delay: u64) -> delay_queue::Key {
        self.queue.reset(&key, Duration::from_millis(delay));
        key
    }
    fn advance(&mut self, ticks: u64) -> usize {
        let queue = &mut self.queue;
        self.runtime.block_on(async {
            tokio::time::advance(Duration::from_millis(ticks)).await;
            let mut expired = 0;
            let mut yielded = false;
            loop {
                match poll_fn(|cx| Poll::Ready(queue.poll_expired(cx))).await {
                    Poll::Ready(Some(timer)) => {
                        black_box(timer);
                        expired += 1;
                        yielded = false;
                    }
                    Poll::Ready(None) => break,
                    // The queue's next sleep may be due but not yet fired by
                    // the driver: one yield lets the runtime run its driver.
                    // Pending again right after means nothing is due. (Not
                    // awaiting for real: that would auto-advance the paused
                    // clock to the far population; not `peek`ing either: it
                    // scans a whole slot, which is O(n) here.)
                    Poll::Pending if !yielded => {
                        tokio::task::yield_now().await;
                        yielded = true;
                    }
                    Poll::Pending => break,
                }
            }
            expired
        })
    }
    fn next_deadline(&mut self) -> Option<u64> {
        let key = self.queue.peek()?;
        Some((self.queue.deadline(&key) - self.start).as_millis() as u64)
    }
    fn within<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        let runtime = Rc::clone(&self.runtime);
        let _context = runtime.enter();
        f(self)
    }
}

/// `hierarchical_hash_wheel_timer`'s cancellable four-level wheel.
struct Quad {
    next_id: u64,
    wheel: QuadWheelWithOverflow<IdOnlyTimerEntry<u64>>,
}

impl Timers for Quad {
    type Key = u64;
    const NAME: &'static str = "hierarchical_hash_wheel_timer";
    const MAX_DELAY: u64 = u32::MAX as u64;
    fn new() -> Self {
        Quad {
            next_id: 0,
            wheel: QuadWheelWithOverflow::new(),
        }
    }
    fn insert(&mut self, delay: u64) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.wheel
            .insert(IdOnlyTimerEntry::new(id, Duration::from_millis(delay)))
            .unwrap();
        id
    }
    fn cancel(&mut self, id: u64) {
        black_box(self.wheel.cancel(&id)).unwrap();
    }
    fn reschedule(&mut self, id: u64, delay: u64) -> u64 {
        self.wheel.cancel(&id).unwrap();
        self.wheel
            .insert(IdOnlyTimerEntry::new(id, Duration::from_millis(delay)))
            .unwrap();
        id
    }
    fn advance(&mut self, ticks: u64) -> usize {
        let mut left = ticks;
        let mut expired = 0;
        while left > 0 {
            match self.wheel.can_skip() {
                Skip::Empty => {
                    self.wheel.skip(left as u32);
                    left = 0;
                }
                Skip::Millis(ms) => {
                    let step = left.min(u64::from(ms));
                    self.wheel.skip(step as u32);
                    left -= step;
                }
                Skip::None => {
                    expired += black_box(self.wheel.tick()).len();
                    left -= 1;
                }
            }
        }
        expired
    }
    fn next_deadline(&mut self) -> Option<u64> {
        None
    }
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

/// `n` armed timers `base..2 * base` ticks ahead (capped at the
/// implementation's range); returns them with their delays.
fn populate<T: Timers>(timers: &mut T, n: usize, base: u64, rng: &mut Rng) -> Vec<(T::Key, u64)> {
    timers.within(|timers| {
        (0..n)
            .map(|_| {
                let delay = (base + rng.below(base)).min(T::MAX_DELAY - 2048);
                (timers.insert(delay), delay)
            })
            .collect()
    })
}

fn bench_peer<T: Timers>(c: &mut Criterion, sizes: &[usize]) {
    for &n in sizes {
        let mut rng = Rng(n as u64);
        let mut timers = T::new();
        let mut armed = populate(&mut timers, n, NEAR, &mut rng);
        let id = BenchmarkId::new(T::NAME, n);

        c.benchmark_group("peers/insert_cancel")
            .bench_function(id.clone(), |b| {
                b.iter_custom(|iters| {
                    timers.within(|timers| {
                        chunked(iters, CHUNK, |k| {
                            let delays: Vec<u64> =
                                (0..k).map(|_| 1 + rng.below(2 * NEAR)).collect();
                            let start = Instant::now();
                            for &delay in &delays {
                                let key = timers.insert(black_box(delay));
                                timers.cancel(key);
                            }
                            start.elapsed()
                        })
                    })
                })
            });

        c.benchmark_group("peers/reschedule_later")
            .bench_function(id.clone(), |b| {
                b.iter_custom(|iters| {
                    timers.within(|timers| {
                        chunked(iters, CHUNK, |k| {
                            let moves: Vec<(usize, u64)> = (0..k)
                                .map(|_| (rng.below(n as u64) as usize, 1 + rng.below(1024)))
                                .collect();
                            let start = Instant::now();
                            for &(i, later) in &moves {
                                let (key, delay) = armed[i];
                                let delay = (delay + later).min(T::MAX_DELAY);
                                armed[i] = (timers.reschedule(key, delay), delay);
                            }
                            start.elapsed()
                        })
                    })
                })
            });

        if timers.next_deadline().is_some() {
            c.benchmark_group("peers/next_event")
                .bench_function(id.clone(), |b| b.iter(|| black_box(timers.next_deadline())));
        }

        c.benchmark_group("peers/insert_expire")
            .bench_function(id, |b| {
                // Always whole chunks of `CHUNK` timers (the cost of one
                // advance is shared by a chunk), scaled to `iters` timers.
                b.iter_custom(|iters| {
                    let chunks = iters.div_ceil(CHUNK);
                    let elapsed = chunked(chunks * CHUNK, CHUNK, |k| {
                        let delays: Vec<u64> = (0..k).map(|_| 1 + rng.below(64)).collect();
                        let start = Instant::now();
                        timers.within(|timers| {
                            for &delay in &delays {
                                timers.insert(black_box(delay));
                            }
                        });
                        let expired = timers.advance(64);
                        let elapsed = start.elapsed();
                        assert_eq!(expired, k as usize, "{} lost timers", T::NAME);
                        elapsed
                    });
                    elapsed.mul_f64(iters as f64 / (chunks * CHUNK) as f64)
                })
            });
        drop(armed);
    }
}

/// Advancing an hour with `n` timers armed far beyond it (`n = 0` for
/// implementations whose range cannot hold such timers).
fn bench_advance_idle<T: Timers>(c: &mut Criterion, sizes: &[usize]) {
    for &n in sizes {
        let mut rng = Rng(n as u64);
        let mut timers = T::new();
        let _armed = populate(&mut timers, n, FAR, &mut rng);
        c.benchmark_group("peers/advance_idle")
            .bench_function(BenchmarkId::new(T::NAME, n), |b| {
                b.iter(|| assert_eq!(timers.advance(black_box(HOUR)), 0))
            });
    }
}

fn main() {
    let mut c = Criterion::default().sample_size(20).configure_from_args();
    let big: Vec<usize> = SIZES.iter().copied().chain([BIG]).collect();
    bench_peer::<Wheel<usize>>(&mut c, &big);
    bench_peer::<Tokio>(&mut c, &SIZES);
    bench_peer::<Quad>(&mut c, &SIZES);
    bench_peer::<LazyHeap>(&mut c, &big);
    bench_peer::<Tree>(&mut c, &big);
    let far: Vec<usize> = [0].iter().copied().chain(SIZES).collect();
    bench_advance_idle::<Wheel<usize>>(&mut c, &far);
    bench_advance_idle::<LazyHeap>(&mut c, &far);
    bench_advance_idle::<Tree>(&mut c, &far);
    bench_advance_idle::<Tokio>(&mut c, &[0]);
    bench_advance_idle::<Quad>(&mut c, &[0]);
    c.final_summary();
}
