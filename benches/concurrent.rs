//! Start/stop throughput of the timer service from 1, 2, ... threads (up to
//! `available_parallelism`), against the locks users would reach for instead.
//!
//! One iteration is one *pair*: START of a one-hour timer and its STOP (the
//! life of a timeout that never fires). Criterion reports pairs per second
//! across all threads (`Throughput::Elements(1)` per iteration). Every
//! thread keeps a steady armed population: 100,000 timers in total, split
//! over the threads and armed before timing, plus the timers each thread has
//! started but not yet stopped (1024 per thread). Delays are 1 to 2 hours, so
//! nothing fires during a run.
//!
//! Two groups:
//!
//! * `concurrent/local`: each thread stops its own timers, oldest first (a
//!   ring of 1024 in flight).
//! * `concurrent/cross`: each thread starts 256 timers, hands them as one
//!   batch to the next thread, and stops a batch handed to it by the previous
//!   thread (four batches in flight per thread). Every STOP comes from a
//!   thread other than the one that started the timer. Measured from 2
//!   threads on. The hand-off (a `Mutex<VecDeque>` per thread, one lock per
//!   batch) is the same for every implementation.
//!
//! Implementations:
//!
//! * `tickwheel-embedded`: a service with one shard per thread and
//!   `Driver::Embedded`; thread `t` claims shard `t`, starts on it (applied
//!   directly: it is the owner) and polls it after every 256 pairs, which
//!   takes in the STOPs other threads queued. The per-core pattern. STOP is
//!   `Timer::cancel` (stop and give up the handle in one transition); START
//!   takes a delay, so it reads the clock.
//! * `tickwheel-embedded-looptime`: the same, but START takes a deadline
//!   from the loop's time (an `Instant` read once per round of 256, as an
//!   event loop reads the clock once per wakeup), like the peers, which take
//!   a delay in ticks and read no clock.
//! * `tickwheel-threads`: one shard per thread with driver threads; the bench
//!   threads own no shard, so every START and STOP goes through a shard's
//!   remote queue (or is applied in the shard while its driver sleeps and
//!   lends it). The driver threads share the same cores.
//! * `mutex-binaryheap`: one `Mutex` around a `BinaryHeap` with lazy cancel.
//! * `mutex-wheel`: one `Mutex` around one tickwheel `Wheel`.
//! * `sharded-mutex-wheel`: one `Wheel` per thread, each behind its own
//!   `Mutex` (cache-line aligned); a thread starts on its own wheel and
//!   stops on whichever wheel holds the timer.
//! * `wheel-per-thread` (`local` only): a plain `Wheel` per thread, no lock:
//!   the ceiling for a thread that never shares, not a peer.
//!
//! Worker threads are spawned once per benchmark (implementation, group,
//! thread count) and meet the timing thread at a barrier before and after
//! each sample, so spawning is not measured. Each thread does whole rounds
//! of 256 pairs; the elapsed time is scaled from the pairs done to the
//! iterations criterion asked for.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use tickwheel::{Driver, ShardGuard, Timer, TimerKey, TimerService, TimerSpec, Wheel};

/// Armed before timing, over all threads.
const POPULATION: usize = 100_000;
/// Pairs per round (and per hand-off batch).
const BATCH: usize = 256;
/// Timers a thread has started and not yet stopped, in `local`.
const WINDOW: usize = 1024;
/// Batches in flight per thread, in `cross`.
const DEPTH: usize = 4;
const HOUR_MS: u64 = 3_600_000;

/// 4096 delays in 1..2 hours (ms), cycled through by the timed loops.
fn delays(seed: u64) -> Vec<u64> {
    let mut state = seed | 1;
    (0..4096)
        .map(|_| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            HOUR_MS + state.wrapping_mul(0x2545_f491_4f6c_dd1d) % HOUR_MS
        })
        .collect()
}

/// A timer structure shared by the bench threads.
trait Shared: Send + Sync + 'static {
    const NAME: &'static str;
    /// Whether a key may be stopped by a thread other than the one that
    /// started it.
    const CROSS: bool = true;
    /// Per-thread state, made on the thread that uses it.
    type Local;
    type Key: Send + 'static;
    fn new(threads: usize) -> Self;
    fn local(&self, thread: usize) -> Self::Local;
    fn start(&self, local: &mut Self::Local, delay_ms: u64) -> Self::Key;
    fn stop(&self, local: &mut Self::Local, key: Self::Key);
    /// Called after every round (an owner's poll).
    fn maintain(&self, _local: &mut Self::Local) {}
}

struct Embedded(TimerService);

impl Shared for Embedded {
    const NAME: &'static str = "tickwheel-embedded";
    type Local = ShardGuard;
    type Key = Timer;
    fn new(threads: usize) -> Self {
        Embedded(embedded_service(threads))
    }
    fn local(&self, thread: usize) -> ShardGuard {
        self.0.claim_shard(thread).unwrap()
    }
    fn start(&self, _: &mut ShardGuard, delay_ms: u64) -> Timer {
        self.0
            .start(Duration::from_millis(delay_ms), |_| {})
            .unwrap()
    }
    fn stop(&self, _: &mut ShardGuard, timer: Timer) {
        black_box(timer.cancel());
    }
    fn maintain(&self, guard: &mut ShardGuard) {
        black_box(guard.poll().unwrap());
    }
}

/// As [`Embedded`], but deadlines are taken from the owner's loop time (an
/// `Instant` read once per round, as an event loop reads the clock once per
/// wakeup) instead of a clock read inside every START: the peers take a
/// delay in ticks and read no clock either.
struct EmbeddedLoopTime(TimerService);

impl Shared for EmbeddedLoopTime {
    const NAME: &'static str = "tickwheel-embedded-looptime";
    type Local = (ShardGuard, Instant);
    type Key = Timer;
    fn new(threads: usize) -> Self {
        EmbeddedLoopTime(embedded_service(threads))
    }
    fn local(&self, thread: usize) -> (ShardGuard, Instant) {
        (self.0.claim_shard(thread).unwrap(), Instant::now())
    }
    fn start(&self, (_, now): &mut (ShardGuard, Instant), delay_ms: u64) -> Timer {
        let spec = TimerSpec::at(*now + Duration::from_millis(delay_ms));
        self.0.schedule(spec, |_| {}).unwrap()
    }
    fn stop(&self, _: &mut (ShardGuard, Instant), timer: Timer) {
        black_box(timer.cancel());
    }
    fn maintain(&self, (guard, now): &mut (ShardGuard, Instant)) {
        black_box(guard.poll().unwrap());
        *now = Instant::now();
    }
}

fn embedded_service(shards: usize) -> TimerService {
    TimerService::builder()
        .shards(shards)
        .driver(Driver::Embedded)
        .build()
        .unwrap()
}

struct Threads(TimerService);

impl Shared for Threads {
    const NAME: &'static str = "tickwheel-threads";
    type Local = ();
    type Key = Timer;
    fn new(threads: usize) -> Self {
        let service = TimerService::builder()
            .shards(threads)
            .driver(Driver::Threads { pin: false })
            .build()
            .unwrap();
        Threads(service)
    }
    fn local(&self, _: usize) {}
    fn start(&self, _: &mut (), delay_ms: u64) -> Timer {
        self.0
            .start(Duration::from_millis(delay_ms), |_| {})
            .unwrap()
    }
    fn stop(&self, _: &mut (), timer: Timer) {
        black_box(timer.cancel());
    }
}

/// `BinaryHeap` with lazy cancel (as in `benches/peers.rs`): a cancelled entry
/// stays until it reaches the top or the heap is compacted, which happens
/// when stale entries outnumber live ones.
struct LazyHeap {
    heap: BinaryHeap<Reverse<(u64, u32, u32)>>,
    generations: Vec<u32>,
    free: Vec<u32>,
    live: usize,
}

impl LazyHeap {
    fn insert(&mut self, deadline: u64) -> (u32, u32) {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.generations.push(0);
            (self.generations.len() - 1) as u32
        });
        let generation = self.generations[slot as usize];
        self.heap.push(Reverse((deadline, slot, generation)));
        self.live += 1;
        (slot, generation)
    }

    fn cancel(&mut self, (slot, generation): (u32, u32)) -> bool {
        if self.generations[slot as usize] != generation {
            return false;
        }
        self.generations[slot as usize] += 1;
        self.free.push(slot);
        self.live -= 1;
        if self.heap.len() > 2 * self.live + 64 {
            let generations = &self.generations;
            self.heap
                .retain(|&Reverse((_, s, g))| generations[s as usize] == g);
        }
        true
    }
}

struct MutexHeap(Mutex<LazyHeap>);

impl Shared for MutexHeap {
    const NAME: &'static str = "mutex-binaryheap";
    type Local = ();
    type Key = (u32, u32);
    fn new(_: usize) -> Self {
        MutexHeap(Mutex::new(LazyHeap {
            heap: BinaryHeap::new(),
            generations: Vec::new(),
            free: Vec::new(),
            live: 0,
        }))
    }
    fn local(&self, _: usize) {}
    fn start(&self, _: &mut (), delay_ms: u64) -> (u32, u32) {
        self.0.lock().unwrap().insert(delay_ms)
    }
    fn stop(&self, _: &mut (), key: (u32, u32)) {
        black_box(self.0.lock().unwrap().cancel(key));
    }
}

struct MutexWheel(Mutex<Wheel<usize>>);

impl Shared for MutexWheel {
    const NAME: &'static str = "mutex-wheel";
    type Local = ();
    type Key = TimerKey;
    fn new(_: usize) -> Self {
        MutexWheel(Mutex::new(Wheel::new()))
    }
    fn local(&self, _: usize) {}
    fn start(&self, _: &mut (), delay_ms: u64) -> TimerKey {
        self.0.lock().unwrap().insert(delay_ms, 0)
    }
    fn stop(&self, _: &mut (), key: TimerKey) {
        black_box(self.0.lock().unwrap().cancel(key));
    }
}

/// One lock per cache line pair, so neighbouring shards do not share a line.
#[repr(align(128))]
struct Padded<T>(T);

struct ShardedWheel(Vec<Padded<Mutex<Wheel<usize>>>>);

impl Shared for ShardedWheel {
    const NAME: &'static str = "sharded-mutex-wheel";
    /// The thread's own shard.
    type Local = usize;
    type Key = (usize, TimerKey);
    fn new(threads: usize) -> Self {
        ShardedWheel(
            (0..threads)
                .map(|_| Padded(Mutex::new(Wheel::new())))
                .collect(),
        )
    }
    fn local(&self, thread: usize) -> usize {
        thread
    }
    fn start(&self, shard: &mut usize, delay_ms: u64) -> (usize, TimerKey) {
        let key = self.0[*shard].0.lock().unwrap().insert(delay_ms, 0);
        (*shard, key)
    }
    fn stop(&self, _: &mut usize, (shard, key): (usize, TimerKey)) {
        black_box(self.0[shard].0.lock().unwrap().cancel(key));
    }
}

/// A wheel per thread with no lock at all (`local` only): the ceiling.
struct PerThread;

impl Shared for PerThread {
    const NAME: &'static str = "wheel-per-thread";
    const CROSS: bool = false;
    type Local = Wheel<usize>;
    type Key = TimerKey;
    fn new(_: usize) -> Self {
        PerThread
    }
    fn local(&self, _: usize) -> Wheel<usize> {
        Wheel::new()
    }
    fn start(&self, wheel: &mut Wheel<usize>, delay_ms: u64) -> TimerKey {
        wheel.insert(delay_ms, 0)
    }
    fn stop(&self, wheel: &mut Wheel<usize>, key: TimerKey) {
        black_box(wheel.cancel(key));
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Local,
    Cross,
}

/// Signals to the workers: rounds per thread for the next sample, or `EXIT`.
const EXIT: u64 = u64::MAX;

struct Control<K> {
    start: Barrier,
    end: Barrier,
    rounds: AtomicU64,
    /// `mailboxes[t]`: batches handed to thread `t` (cross mode).
    mailboxes: Vec<Padded<Mutex<VecDeque<Vec<K>>>>>,
}

/// Worker threads that live for one benchmark and run one sample per call.
struct Pool<K> {
    control: Arc<Control<K>>,
    threads: Vec<JoinHandle<()>>,
}

impl<K: Send + 'static> Pool<K> {
    fn new<S: Shared<Key = K>>(threads: usize, mode: Mode) -> Self {
        let shared = Arc::new(S::new(threads));
        let control = Arc::new(Control {
            start: Barrier::new(threads + 1),
            end: Barrier::new(threads + 1),
            rounds: AtomicU64::new(0),
            mailboxes: (0..threads)
                .map(|_| Padded(Mutex::new(VecDeque::new())))
                .collect(),
        });
        let handles = (0..threads)
            .map(|t| {
                let shared = shared.clone();
                let control = control.clone();
                std::thread::spawn(move || worker(&*shared, &control, t, threads, mode))
            })
            .collect();
        Pool {
            control,
            threads: handles,
        }
    }

    /// Runs at least `pairs` pairs over all threads; returns the time scaled
    /// to exactly `pairs`.
    fn run(&self, pairs: u64) -> Duration {
        let threads = self.threads.len() as u64;
        let per_round = threads * BATCH as u64;
        let rounds = pairs.div_ceil(per_round).max(1);
        self.control.rounds.store(rounds, Ordering::SeqCst);
        self.control.start.wait();
        let begin = Instant::now();
        self.control.end.wait();
        let elapsed = begin.elapsed();
        elapsed.mul_f64(pairs as f64 / (rounds * per_round) as f64)
    }
}

impl<K> Drop for Pool<K> {
    fn drop(&mut self) {
        self.control.rounds.store(EXIT, Ordering::SeqCst);
        self.control.start.wait();
        for thread in self.threads.drain(..) {
            thread.join().unwrap();
        }
    }
}

fn worker<S: Shared>(shared: &S, control: &Control<S::Key>, t: usize, threads: usize, mode: Mode) {
    let mut local = shared.local(t);
    let delays = delays(0x9e37_79b9 + t as u64);
    let mut next = 0usize;
    let mut delay = || {
        next = (next + 1) % delays.len();
        delays[next]
    };
    let base: Vec<S::Key> = (0..POPULATION / threads)
        .map(|_| shared.start(&mut local, delay()))
        .collect();
    let mut ring: VecDeque<S::Key> = VecDeque::with_capacity(WINDOW + 1);
    match mode {
        Mode::Local => ring.extend((0..WINDOW).map(|_| shared.start(&mut local, delay()))),
        Mode::Cross => {
            let to = &control.mailboxes[(t + 1) % threads].0;
            for _ in 0..DEPTH {
                let batch = (0..BATCH)
                    .map(|_| shared.start(&mut local, delay()))
                    .collect();
                to.lock().unwrap().push_back(batch);
            }
        }
    }
    shared.maintain(&mut local);
    loop {
        control.start.wait();
        let rounds = control.rounds.load(Ordering::SeqCst);
        if rounds == EXIT {
            break;
        }
        for _ in 0..rounds {
            match mode {
                Mode::Local => {
                    for _ in 0..BATCH {
                        ring.push_back(shared.start(&mut local, delay()));
                        let oldest = ring.pop_front().unwrap();
                        shared.stop(&mut local, oldest);
                    }
                }
                Mode::Cross => {
                    let batch = (0..BATCH)
                        .map(|_| shared.start(&mut local, delay()))
                        .collect();
                    control.mailboxes[(t + 1) % threads]
                        .0
                        .lock()
                        .unwrap()
                        .push_back(batch);
                    let mine = loop {
                        if let Some(batch) = control.mailboxes[t].0.lock().unwrap().pop_front() {
                            break batch;
                        }
                        std::thread::yield_now();
                    };
                    for key in mine {
                        shared.stop(&mut local, key);
                    }
                }
            }
            shared.maintain(&mut local);
        }
        control.end.wait();
    }
    // Keys are dropped here, before `local` (a shard guard gives its shard
    // back last); batches left in mailboxes are dropped with the pool.
    drop(ring);
    drop(base);
}

fn thread_counts() -> Vec<usize> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut counts: Vec<usize> = (0..)
        .map(|p| 1usize << p)
        .take_while(|&n| n < cores)
        .collect();
    counts.push(cores);
    counts
}

fn bench<S: Shared>(c: &mut Criterion, mode: Mode) {
    if mode == Mode::Cross && !S::CROSS {
        return;
    }
    let group_name = match mode {
        Mode::Local => "concurrent/local",
        Mode::Cross => "concurrent/cross",
    };
    let mut group = c.benchmark_group(group_name);
    group.throughput(Throughput::Elements(1));
    for threads in thread_counts() {
        if mode == Mode::Cross && threads < 2 {
            continue;
        }
        let id = BenchmarkId::new(S::NAME, threads);
        // Spawn (and arm the population) only for benchmarks that run.
        let mut pool: Option<Pool<S::Key>> = None;
        group.bench_function(id, |b| {
            let pool = pool.get_or_insert_with(|| Pool::new::<S>(threads, mode));
            b.iter_custom(|pairs| pool.run(pairs));
        });
    }
    group.finish();
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    for mode in [Mode::Local, Mode::Cross] {
        bench::<Embedded>(&mut c, mode);
        bench::<EmbeddedLoopTime>(&mut c, mode);
        bench::<Threads>(&mut c, mode);
        bench::<MutexHeap>(&mut c, mode);
        bench::<MutexWheel>(&mut c, mode);
        bench::<ShardedWheel>(&mut c, mode);
        bench::<PerThread>(&mut c, mode);
    }
    c.final_summary();
}
