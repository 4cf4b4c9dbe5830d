//! The timer service beside tokio's timer (multi-thread runtime), a
//! `Mutex<Wheel>` per worker or per shard, and a bare `Wheel`, on the
//! multi-threaded workloads a thread-pool user runs. Written against the
//! public API only, so the same file measures the service before and after a
//! redesign of its internals.
//!
//! Every figure is **nanoseconds per operation per worker** (criterion's time
//! per iteration, where one iteration is one operation on *every* worker, all
//! workers running at once), except `cross_stop`, which criterion reports as
//! start/stop pairs per second over all threads. Workers are spawned once per
//! benchmark and run one sample per call (`iter_custom`), so spawning and
//! arming populations are not measured. Work is done in rounds of 256
//! operations; the elapsed time is scaled to the iterations criterion asked
//! for.
//!
//! Groups (`service_vs_tokio/...`), one per workload:
//!
//! * `owner_start_cancel/{impl}/{workers}`: START of a one- to two-hour timer
//!   and its immediate STOP (`Timer::cancel`), from the thread that owns the
//!   shard (`Driver::Embedded`; worker `t` claims shard `t` and polls it after
//!   every round). `+1alive`: each worker also keeps one other timer armed
//!   the whole time, as a real worker does: without it, per-shard handle
//!   bookkeeping may go 0 -> 1 -> 0 on every timer. `-capture16`: each
//!   closure captures 16 bytes (two `u64`) instead of nothing.
//! * `nonowner_start_cancel/{impl}/{workers}`: the same pair from bench
//!   threads that own no shard; the service has `Driver::Threads` with one
//!   shard per worker, its driver threads sharing the cores. `-cpu`: the
//!   same run, but the figure is the whole process's CPU time (drivers
//!   included) divided by the number of workers.
//! * `restart_owner` / `restart_nonowner`: an idle timeout per connection,
//!   100,000 connections per worker, each "packet" restarts a random
//!   connection's timer to 30 s from now. Owner: the worker owns the shard
//!   holding its connections (embedded). Non-owner: `Driver::Threads`, the
//!   worker owns no shard.
//! * `cross_stop/{impl}/{threads}`, at 2 and 8 threads (8 oversubscribes
//!   this 2-core machine): each thread starts 256 timers, hands them as one
//!   batch to the next thread and stops a batch handed to it by the previous
//!   one (four batches in flight per thread), so every STOP comes from a
//!   thread other than the one that started the timer. The hand-off (one
//!   `Mutex<VecDeque>` lock per batch) is the same for every implementation.
//!   Throughput: pairs per second over all threads.
//!
//! Per-operation latency (the table's p99.9 row) is not a criterion group:
//! `cargo bench --bench service_vs_tokio -- latency` runs the `cross_stop`
//! workload at 2 and 8 threads timing every START and every STOP with
//! `Instant::now()` around it, sorts the samples and prints p50, p99, p99.9
//! and max per implementation (the clock read itself, some 20-40 ns, is in
//! every sample of every implementation), with the run's throughput and how
//! often a thread found its mailbox empty (waits per round: high means the
//! threads did not run side by side, and the percentiles mean less).
//!
//! Implementations:
//!
//! * `tickwheel-embedded` / `tickwheel-threads`: `TimerService` with one shard
//!   per worker and the named driver. START takes a delay (reads the clock).
//! * `tokio-sleep`: `tokio::time::sleep(delay)` pinned on the stack and
//!   registered by one poll (tokio registers a timer on its first poll), then
//!   dropped (its STOP). `tokio-sleep-reset`: `Sleep::reset(now + 30 s)` on a
//!   registered `Sleep`. The workers are tasks on a multi-thread runtime with
//!   one worker thread per bench worker, each task inside
//!   `tokio::task::unconstrained` so the coop budget never turns a poll into
//!   a no-op. tokio has no notion of an owner thread, so its rows are the
//!   same workload in the owner and the non-owner groups; they are measured
//!   in each group to give a ratio within one run.
//! * `mutex-wheel-per-worker`: a tickwheel `Wheel` per worker behind its own
//!   cache-line-aligned `Mutex` (a lock per operation, never contended).
//!   `sharded-mutex-wheel`: one such wheel per worker as shards; a thread that
//!   owns no shard starts on the shards round-robin, and a cross-thread STOP
//!   locks whichever shard holds the timer. The mutex peers take delays in
//!   ticks and read no clock (the restart rows read the loop's clock once per
//!   round). `mutex-wheel-per-worker+clock`: the same, but every START or
//!   restart reads the clock for its deadline (`Instant::now()` turned into
//!   a 1 ms tick, rounded up), as the service and tokio do and as a caller
//!   scheduling by wall time must: it shows how much of the service's gap to
//!   the mutex is that clock read. `sharded-mutex-wheel+clock` is the same
//!   for the sharded peer in `cross_stop`.
//! * `targets` (run as `cargo bench --bench service_vs_tokio -- targets`,
//!   not by criterion): the rows the service's speed targets name, each
//!   group's implementations alive at once and taking turns in ~100 ms
//!   slices for 15 rounds; the ratio is the median of the per-round ratios,
//!   so a drift of the machine's speed between rounds cancels out.
//!   `cross_stop` also compares `tickwheel-embedded-cpu` with
//!   `sharded-mutex-wheel-cpu`: the same two runs, the figure being the
//!   process's CPU time per pair per thread instead of wall time. With
//!   more threads than cores the ring is bound by CPU (neighbours share a
//!   core, and a thread whose batch has not come yields), so that row says
//!   how much work each implementation does per pair, apart from how the
//!   scheduler happened to interleave the threads.
//! * `wheel-per-worker`: a bare `Wheel` per worker, no lock: the ceiling.
//! * `two-dependent-misses` (restart rows): no timer at all, only what
//!   reaching a timer through the caller's handle and changing it in one
//!   atomic step costs here: a random 16-byte handle read among 100k, then a
//!   `fetch_add` on the 64-byte line it names among 100k (`TwoMisses`). A
//!   floor, not a peer.

use std::collections::VecDeque;
use std::future::Future;
use std::hint::black_box;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::task::{Context, Wake, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use crossbeam_utils::CachePadded;
use tickwheel::{Driver, ShardGuard, Timer, TimerKey, TimerService, Wheel};
use tokio::runtime::Runtime;
use tokio::time::Sleep;

/// Operations per round: between an owner's polls, and per hand-off batch.
const BATCH: usize = 256;
/// Batches in flight per thread in `cross_stop`.
const DEPTH: usize = 4;
/// Connections (idle timers) per worker in the restart rows.
const CONNS: usize = 100_000;
/// The idle timeout a packet pushes a connection's timer to.
const IDLE: Duration = Duration::from_secs(30);
const HOUR_MS: u64 = 3_600_000;
/// Thread counts of the per-worker rows.
const WORKERS: [usize; 2] = [1, 2];
/// Thread counts of the cross-thread rows (8 oversubscribes 2 cores).
const CROSS_THREADS: [usize; 2] = [2, 8];

// ---------------------------------------------------------------------------
// Small helpers shared by every implementation.

/// xorshift64*: cheap enough (a few ns) not to blur the figures, and the same
/// for every implementation.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
    /// A delay of 1 to 2 hours, in ms: nothing fires during a run.
    fn delay_ms(&mut self) -> u64 {
        HOUR_MS + self.below(HOUR_MS)
    }
}

/// One lock per padded line (crossbeam's `CachePadded`: two lines on
/// x86_64), so neighbouring locks share no line.
type Padded<T> = CachePadded<T>;

/// Sleeps are registered by a poll; nothing ever needs waking in these
/// benches. (`Waker::noop` is newer than the crate's minimum Rust.)
struct NoopWake;

impl Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

fn noop_waker() -> Waker {
    Waker::from(Arc::new(NoopWake))
}

/// Registers a tokio `Sleep` with the runtime's timer: its first poll.
fn register(sleep: Pin<&mut Sleep>, waker: &Waker) {
    let mut cx = Context::from_waker(waker);
    black_box(sleep.poll(&mut cx).is_ready());
}

fn embedded(shards: usize) -> TimerService {
    TimerService::builder()
        .shards(shards)
        .driver(Driver::Embedded)
        .build()
        .unwrap()
}

fn threaded(shards: usize) -> TimerService {
    TimerService::builder()
        .shards(shards)
        .driver(Driver::Threads { pin: false })
        .build()
        .unwrap()
}

fn mutex_wheels(n: usize) -> Vec<Padded<Mutex<Wheel<usize>>>> {
    (0..n)
        .map(|_| CachePadded::new(Mutex::new(Wheel::new())))
        .collect()
}

/// Process CPU time (all threads), for the `-cpu` variants.
#[cfg(target_os = "linux")]
fn process_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(not(target_os = "linux"))]
fn process_cpu() -> Duration {
    // Elsewhere the `-cpu` variants report wall time.
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed()
}

/// What a sample's figure is made of.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Measure {
    /// Wall time while all workers run.
    Wall,
    /// The process's CPU time over the same span, divided by the workers.
    Cpu,
}

// ---------------------------------------------------------------------------
// Runners: persistent OS threads, or tasks on a tokio multi-thread runtime.

/// A workload run by plain threads (tickwheel and the mutex peers).
trait ThreadJob: Send + Sync + 'static {
    /// Per-worker state, made on the worker's own thread before timing.
    type State;
    fn new(workers: usize) -> Self;
    fn state(&self, t: usize) -> Self::State;
    /// `rounds` rounds of [`BATCH`] operations.
    fn run(&self, state: &mut Self::State, t: usize, rounds: u64);
}

/// A workload run as tokio tasks (tokio's timer needs its runtime).
trait TaskJob: Send + Sync + 'static {
    type State: Send + 'static;
    fn new(workers: usize) -> Self;
    /// Made inside a task on the runtime (sleeps need its timer).
    fn state(&self, t: usize) -> Self::State;
    fn run(
        &self,
        state: &mut Self::State,
        t: usize,
        rounds: u64,
    ) -> impl Future<Output = ()> + Send;
}

/// Sent to the worker threads: rounds for the next sample, or `EXIT`.
const EXIT: u64 = u64::MAX;

struct Control {
    start: Barrier,
    end: Barrier,
    rounds: AtomicU64,
}

/// Worker threads that live for one benchmark and run one sample per call.
struct ThreadPool {
    control: Arc<Control>,
    threads: Vec<JoinHandle<()>>,
    measure: Measure,
}

impl ThreadPool {
    fn new<J: ThreadJob>(workers: usize, measure: Measure) -> Self {
        let job = Arc::new(J::new(workers));
        let control = Arc::new(Control {
            start: Barrier::new(workers + 1),
            end: Barrier::new(workers + 1),
            rounds: AtomicU64::new(0),
        });
        let threads = (0..workers)
            .map(|t| {
                let job = job.clone();
                let control = control.clone();
                std::thread::spawn(move || {
                    let mut state = job.state(t);
                    loop {
                        control.start.wait();
                        let rounds = control.rounds.load(Ordering::SeqCst);
                        if rounds == EXIT {
                            break;
                        }
                        job.run(&mut state, t, rounds);
                        control.end.wait();
                    }
                    // The state (timer handles, then a shard guard) goes
                    // before this thread's reference to the service.
                    drop(state);
                })
            })
            .collect();
        ThreadPool {
            control,
            threads,
            measure,
        }
    }

    /// Every worker does at least `iters` operations; returns the time scaled
    /// to exactly `iters` per worker.
    fn run(&self, iters: u64) -> Duration {
        let rounds = iters.div_ceil(BATCH as u64).max(1);
        self.control.rounds.store(rounds, Ordering::SeqCst);
        self.control.start.wait();
        let (wall, cpu) = (Instant::now(), process_cpu());
        self.control.end.wait();
        let elapsed = match self.measure {
            Measure::Wall => wall.elapsed(),
            Measure::Cpu => (process_cpu() - cpu) / self.threads.len() as u32,
        };
        elapsed.mul_f64(iters as f64 / (rounds * BATCH as u64) as f64)
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.control.rounds.store(EXIT, Ordering::SeqCst);
        self.control.start.wait();
        for thread in self.threads.drain(..) {
            thread.join().unwrap();
        }
    }
}

/// A multi-thread runtime with one worker thread per bench worker. Each sample
/// spawns one task per worker (inside `unconstrained`); the workers' states
/// (registered sleeps) persist between samples.
struct TaskPool<J: TaskJob> {
    runtime: Runtime,
    job: Arc<J>,
    states: Arc<Vec<Mutex<Option<J::State>>>>,
    measure: Measure,
}

impl<J: TaskJob> TaskPool<J> {
    fn new(workers: usize, measure: Measure) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_time()
            .build()
            .unwrap();
        let job = Arc::new(J::new(workers));
        let states = runtime.block_on(async {
            let handles: Vec<_> = (0..workers)
                .map(|t| {
                    let job = job.clone();
                    tokio::spawn(async move { job.state(t) })
                })
                .collect();
            let mut states = Vec::with_capacity(workers);
            for handle in handles {
                states.push(Mutex::new(Some(handle.await.unwrap())));
            }
            states
        });
        TaskPool {
            runtime,
            job,
            states: Arc::new(states),
            measure,
        }
    }

    fn run(&self, iters: u64) -> Duration {
        let rounds = iters.div_ceil(BATCH as u64).max(1);
        let workers = self.states.len();
        let (wall, cpu) = (Instant::now(), process_cpu());
        self.runtime.block_on(async {
            let handles: Vec<_> = (0..workers)
                .map(|t| {
                    let job = self.job.clone();
                    let states = self.states.clone();
                    tokio::spawn(tokio::task::unconstrained(async move {
                        let mut state = states[t].lock().unwrap().take().unwrap();
                        job.run(&mut state, t, rounds).await;
                        *states[t].lock().unwrap() = Some(state);
                    }))
                })
                .collect();
            for handle in handles {
                handle.await.unwrap();
            }
        });
        let elapsed = match self.measure {
            Measure::Wall => wall.elapsed(),
            Measure::Cpu => (process_cpu() - cpu) / workers as u32,
        };
        elapsed.mul_f64(iters as f64 / (rounds * BATCH as u64) as f64)
    }
}

impl<J: TaskJob> Drop for TaskPool<J> {
    fn drop(&mut self) {
        // Deregister the sleeps while the runtime still runs.
        let _entered = self.runtime.enter();
        for state in self.states.iter() {
            drop(state.lock().unwrap().take());
        }
    }
}

/// Runs a [`ThreadJob`] as one criterion benchmark.
fn bench_threads<J: ThreadJob>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    workers: usize,
    measure: Measure,
) {
    let mut pool: Option<ThreadPool> = None;
    group.bench_function(BenchmarkId::new(name, workers), |b| {
        let pool = pool.get_or_insert_with(|| ThreadPool::new::<J>(workers, measure));
        b.iter_custom(|iters| pool.run(iters));
    });
}

/// Runs a [`TaskJob`] as one criterion benchmark.
fn bench_tasks<J: TaskJob>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    workers: usize,
    measure: Measure,
) {
    let mut pool: Option<TaskPool<J>> = None;
    group.bench_function(BenchmarkId::new(name, workers), |b| {
        let pool = pool.get_or_insert_with(|| TaskPool::<J>::new(workers, measure));
        b.iter_custom(|iters| pool.run(iters));
    });
}

// ---------------------------------------------------------------------------
// Start + cancel at once.

/// Owner START + cancel on an embedded shard; `KEEP` keeps one more timer
/// armed per worker; `CAPTURE` makes each closure capture 16 bytes (two
/// `u64`), as a callback that refers to its connection usually does.
struct OwnerStartCancel<const KEEP: bool, const CAPTURE: bool = false>(TimerService);

/// Field order is drop order: the timer before the guard.
struct OwnerState {
    kept: Option<Timer>,
    rng: Rng,
    guard: ShardGuard,
}

impl<const KEEP: bool, const CAPTURE: bool> ThreadJob for OwnerStartCancel<KEEP, CAPTURE> {
    type State = OwnerState;
    fn new(workers: usize) -> Self {
        OwnerStartCancel(embedded(workers))
    }
    fn state(&self, t: usize) -> OwnerState {
        let guard = self.0.claim_shard(t).unwrap();
        let kept = KEEP.then(|| self.0.start(Duration::from_secs(7200), |_| {}).unwrap());
        OwnerState {
            kept,
            rng: Rng::new(t as u64 + 1),
            guard,
        }
    }
    fn run(&self, s: &mut OwnerState, _: usize, rounds: u64) {
        for _ in 0..rounds {
            for _ in 0..BATCH {
                let delay_ms = s.rng.delay_ms();
                let delay = Duration::from_millis(delay_ms);
                let timer = if CAPTURE {
                    let captured = (delay_ms, rounds);
                    self.0.start(delay, move |_| {
                        black_box(captured);
                    })
                } else {
                    self.0.start(delay, |_| {})
                }
                .unwrap();
                black_box(timer.cancel());
            }
            black_box(s.guard.poll().unwrap());
        }
        black_box(&s.kept);
    }
}

/// START + cancel from threads that own no shard (driver threads).
struct NonOwnerStartCancel(TimerService);

impl ThreadJob for NonOwnerStartCancel {
    type State = Rng;
    fn new(workers: usize) -> Self {
        NonOwnerStartCancel(threaded(workers))
    }
    fn state(&self, t: usize) -> Rng {
        Rng::new(t as u64 + 1)
    }
    fn run(&self, rng: &mut Rng, _: usize, rounds: u64) {
        for _ in 0..rounds * BATCH as u64 {
            let delay = Duration::from_millis(rng.delay_ms());
            let timer = self.0.start(delay, |_| {}).unwrap();
            black_box(timer.cancel());
        }
    }
}

/// tokio: `sleep(delay)` registered by a first poll, then dropped.
struct TokioStartCancel<const KEEP: bool>;

struct TokioState {
    kept: Option<Pin<Box<Sleep>>>,
    rng: Rng,
    waker: Waker,
}

impl<const KEEP: bool> TaskJob for TokioStartCancel<KEEP> {
    type State = TokioState;
    fn new(_: usize) -> Self {
        TokioStartCancel
    }
    fn state(&self, t: usize) -> TokioState {
        let waker = noop_waker();
        let kept = KEEP.then(|| {
            let mut sleep = Box::pin(tokio::time::sleep(Duration::from_secs(7200)));
            register(sleep.as_mut(), &waker);
            sleep
        });
        TokioState {
            kept,
            rng: Rng::new(t as u64 + 1),
            waker,
        }
    }
    async fn run(&self, s: &mut TokioState, _: usize, rounds: u64) {
        for _ in 0..rounds * BATCH as u64 {
            let delay = Duration::from_millis(s.rng.delay_ms());
            let sleep = pin!(tokio::time::sleep(delay));
            register(sleep, &s.waker);
        }
        black_box(&s.kept);
    }
}

/// A `Mutex<Wheel>` per worker; worker `t` uses wheel `t` only. With
/// `CLOCK`, each START first reads the clock and turns `now + delay` into a
/// tick (nanoseconds, rounded up to 1 ms ticks) as a caller that schedules
/// by wall time must, and as the service does: the peer without the
/// clock read takes relative ticks, which no real caller has.
struct MutexPerWorker<const CLOCK: bool>(Vec<Padded<Mutex<Wheel<usize>>>>, Instant);

impl<const CLOCK: bool> ThreadJob for MutexPerWorker<CLOCK> {
    type State = Rng;
    fn new(workers: usize) -> Self {
        MutexPerWorker(mutex_wheels(workers), Instant::now())
    }
    fn state(&self, t: usize) -> Rng {
        Rng::new(t as u64 + 1)
    }
    fn run(&self, rng: &mut Rng, t: usize, rounds: u64) {
        let wheel: &Mutex<Wheel<usize>> = &self.0[t];
        for _ in 0..rounds * BATCH as u64 {
            let delay_ms = rng.delay_ms();
            let ticks = if CLOCK {
                clock_ticks(self.1, delay_ms)
            } else {
                delay_ms
            };
            let key = wheel.lock().unwrap().insert(ticks, 0);
            black_box(wheel.lock().unwrap().cancel(key));
        }
    }
}

/// `epoch.elapsed() + delay` in whole 1 ms ticks, rounded up (never early),
/// as the `+clock` mutex peers compute a deadline; relative to a wheel that
/// stays at tick 0.
fn clock_ticks(epoch: Instant, delay_ms: u64) -> u64 {
    const TICK_NANOS: u64 = 1_000_000;
    let nanos = epoch.elapsed().as_nanos() as u64 + delay_ms * TICK_NANOS;
    nanos.div_ceil(TICK_NANOS)
}

/// A mutex per shard, used by threads that own none: starts go round-robin
/// over the shards (as the service spreads them).
struct ShardedMutexSpread(Vec<Padded<Mutex<Wheel<usize>>>>);

impl ThreadJob for ShardedMutexSpread {
    type State = (Rng, usize);
    fn new(workers: usize) -> Self {
        ShardedMutexSpread(mutex_wheels(workers))
    }
    fn state(&self, t: usize) -> (Rng, usize) {
        (Rng::new(t as u64 + 1), t)
    }
    fn run(&self, (rng, next): &mut (Rng, usize), _: usize, rounds: u64) {
        for _ in 0..rounds * BATCH as u64 {
            *next = (*next + 1) % self.0.len();
            let wheel: &Mutex<Wheel<usize>> = &self.0[*next];
            let key = wheel.lock().unwrap().insert(rng.delay_ms(), 0);
            black_box(wheel.lock().unwrap().cancel(key));
        }
    }
}

/// A bare `Wheel` per worker: the ceiling.
struct BareWheel;

impl ThreadJob for BareWheel {
    type State = (Rng, Wheel<usize>);
    fn new(_: usize) -> Self {
        BareWheel
    }
    fn state(&self, t: usize) -> (Rng, Wheel<usize>) {
        (Rng::new(t as u64 + 1), Wheel::new())
    }
    fn run(&self, (rng, wheel): &mut (Rng, Wheel<usize>), _: usize, rounds: u64) {
        for _ in 0..rounds * BATCH as u64 {
            let key = wheel.insert(rng.delay_ms(), 0);
            black_box(wheel.cancel(key));
        }
    }
}

// ---------------------------------------------------------------------------
// Idle timeout restarted per packet.

/// Field order is drop order: timers before the guard.
struct RestartState {
    conns: Vec<Timer>,
    rng: Rng,
    guard: Option<ShardGuard>,
}

/// Restart from the owner (embedded) or from a thread that owns no shard
/// (driver threads).
struct Restarts<const OWNER: bool>(TimerService);

impl<const OWNER: bool> ThreadJob for Restarts<OWNER> {
    type State = RestartState;
    fn new(workers: usize) -> Self {
        Restarts(if OWNER {
            embedded(workers)
        } else {
            threaded(workers)
        })
    }
    fn state(&self, t: usize) -> RestartState {
        let guard = OWNER.then(|| self.0.claim_shard(t).unwrap());
        let mut rng = Rng::new(t as u64 + 1);
        let conns = (0..CONNS)
            .map(|_| {
                let idle = IDLE + Duration::from_millis(rng.below(1000));
                self.0.start(idle, |_| {}).unwrap()
            })
            .collect();
        RestartState { conns, rng, guard }
    }
    fn run(&self, s: &mut RestartState, _: usize, rounds: u64) {
        for _ in 0..rounds {
            for _ in 0..BATCH {
                let conn = &s.conns[s.rng.below(CONNS as u64) as usize];
                black_box(conn.restart(IDLE).unwrap());
            }
            if let Some(guard) = &mut s.guard {
                black_box(guard.poll().unwrap());
            }
        }
    }
}

/// The floor under any restart that reaches a timer through the caller's
/// handle and changes it in one atomic step (what a timer other threads may
/// stop at the same moment needs): per restart, one read of a random one of
/// `CONNS` 16-byte handles (as the service's `Timer`s sit in `conns`), then
/// one `fetch_add` on the 64-byte line that handle names, among `CONNS`
/// such lines (as the service's slots are), in a random order. Two cache
/// misses and one locked instruction, nothing else: no clock, no wheel.
/// The loop is a dozen instructions, so the processor runs several
/// restarts' misses at once (about 20 ns each here, with the locked
/// instruction or a plain write alike); a restart of a few hundred
/// instructions leaves no room in the reorder window for the next one's
/// misses, and pays its own two one after the other.
struct TwoMisses;

#[repr(align(64))]
struct Line([AtomicU64; 8]);

impl ThreadJob for TwoMisses {
    type State = (Vec<[u64; 2]>, Vec<Line>, Rng);
    fn new(_: usize) -> Self {
        TwoMisses
    }
    fn state(&self, t: usize) -> Self::State {
        let mut rng = Rng::new(t as u64 + 1);
        // A random permutation: handle i names line order[i].
        let mut order: Vec<u64> = (0..CONNS as u64).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let handles = order.into_iter().map(|line| [line, 0]).collect();
        let lines = (0..CONNS)
            .map(|_| Line(std::array::from_fn(|_| AtomicU64::new(0))))
            .collect();
        (handles, lines, rng)
    }
    fn run(&self, (handles, lines, rng): &mut Self::State, _: usize, rounds: u64) {
        for _ in 0..rounds * BATCH as u64 {
            let line = handles[rng.below(CONNS as u64) as usize][0] as usize;
            black_box(lines[line].0[0].fetch_add(1, Ordering::AcqRel));
        }
    }
}

/// tokio: `Sleep::reset(now + IDLE)` on registered sleeps.
struct TokioReset;

impl TaskJob for TokioReset {
    type State = (Vec<Pin<Box<Sleep>>>, Rng);
    fn new(_: usize) -> Self {
        TokioReset
    }
    fn state(&self, t: usize) -> Self::State {
        let waker = noop_waker();
        let mut rng = Rng::new(t as u64 + 1);
        let conns = (0..CONNS)
            .map(|_| {
                let idle = IDLE + Duration::from_millis(rng.below(1000));
                let mut sleep = Box::pin(tokio::time::sleep(idle));
                register(sleep.as_mut(), &waker);
                sleep
            })
            .collect();
        (conns, rng)
    }
    async fn run(&self, (conns, rng): &mut Self::State, _: usize, rounds: u64) {
        for _ in 0..rounds * BATCH as u64 {
            let conn = &mut conns[rng.below(CONNS as u64) as usize];
            conn.as_mut().reset(tokio::time::Instant::now() + IDLE);
        }
    }
}

// ---------------------------------------------------------------------------
// Futures: `tickwheel::future::Sleep` and `Timeout` beside tokio's, async-io's
// `Timer` and futures-timer's `Delay`.

/// `service.sleep(delay)` polled once (it registers) and dropped (a STOP),
/// on a worker that owns its shard (polled every round, as an executor's
/// worker would between tasks).
struct OwnerSleep(TimerService);

impl ThreadJob for OwnerSleep {
    type State = (Rng, ShardGuard, Waker);
    fn new(workers: usize) -> Self {
        OwnerSleep(embedded(workers))
    }
    fn state(&self, t: usize) -> Self::State {
        (
            Rng::new(t as u64 + 1),
            self.0.claim_shard(t).unwrap(),
            noop_waker(),
        )
    }
    fn run(&self, (rng, guard, waker): &mut Self::State, _: usize, rounds: u64) {
        let mut cx = Context::from_waker(waker);
        for _ in 0..rounds {
            for _ in 0..BATCH {
                let delay = Duration::from_millis(rng.delay_ms());
                let mut sleep = self.0.sleep(delay);
                let _ = black_box(Pin::new(&mut sleep).poll(&mut cx));
            }
            black_box(guard.poll().unwrap());
        }
    }
}

/// async-io's `Timer::after(delay)` polled once and dropped (its reactor
/// thread owns the timers; registration and removal go through its queue).
struct AsyncIoSleep;

impl ThreadJob for AsyncIoSleep {
    type State = (Rng, Waker);
    fn new(_: usize) -> Self {
        AsyncIoSleep
    }
    fn state(&self, t: usize) -> Self::State {
        (Rng::new(t as u64 + 1), noop_waker())
    }
    fn run(&self, (rng, waker): &mut Self::State, _: usize, rounds: u64) {
        let mut cx = Context::from_waker(waker);
        for _ in 0..rounds * BATCH as u64 {
            let mut timer = async_io::Timer::after(Duration::from_millis(rng.delay_ms()));
            let _ = black_box(Pin::new(&mut timer).poll(&mut cx));
        }
    }
}

/// futures-timer's `Delay::new(delay)` polled once and dropped (its helper
/// thread owns the timers).
struct FuturesTimerSleep;

impl ThreadJob for FuturesTimerSleep {
    type State = (Rng, Waker);
    fn new(_: usize) -> Self {
        FuturesTimerSleep
    }
    fn state(&self, t: usize) -> Self::State {
        (Rng::new(t as u64 + 1), noop_waker())
    }
    fn run(&self, (rng, waker): &mut Self::State, _: usize, rounds: u64) {
        let mut cx = Context::from_waker(waker);
        for _ in 0..rounds * BATCH as u64 {
            let mut delay = futures_timer::Delay::new(Duration::from_millis(rng.delay_ms()));
            let _ = black_box(Pin::new(&mut delay).poll(&mut cx));
        }
    }
}

/// `Sleep::reset_after(IDLE)` of one of `CONNS` registered sleeps per
/// worker, on the owner's worker: the idle timeout pushed to `IDLE` from
/// now, which `TokioReset` writes as tokio must,
/// `reset(Instant::now() + IDLE)` (a clock read, 30-60 ns on this virtual
/// machine, that `reset_after` does not need).
struct OwnerSleepReset(TimerService);

impl ThreadJob for OwnerSleepReset {
    type State = (Vec<tickwheel::future::Sleep>, Rng, ShardGuard);
    fn new(workers: usize) -> Self {
        OwnerSleepReset(embedded(workers))
    }
    fn state(&self, t: usize) -> Self::State {
        let guard = self.0.claim_shard(t).unwrap();
        let waker = noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut rng = Rng::new(t as u64 + 1);
        let conns = (0..CONNS)
            .map(|_| {
                let mut sleep = self.0.sleep(IDLE + Duration::from_millis(rng.below(1000)));
                assert!(Pin::new(&mut sleep).poll(&mut cx).is_pending());
                sleep
            })
            .collect();
        (conns, rng, guard)
    }
    fn run(&self, (conns, rng, guard): &mut Self::State, _: usize, rounds: u64) {
        for _ in 0..rounds {
            for _ in 0..BATCH {
                let conn = &mut conns[rng.below(CONNS as u64) as usize];
                conn.reset_after(IDLE);
            }
            black_box(guard.poll().unwrap());
        }
    }
}

/// `service.timeout(delay, ready)`: the inner future is ready at once, so
/// nothing should be armed (the common case of a timeout that never fires).
struct OwnerTimeoutReady(TimerService);

impl ThreadJob for OwnerTimeoutReady {
    type State = (Rng, ShardGuard, Waker);
    fn new(workers: usize) -> Self {
        OwnerTimeoutReady(embedded(workers))
    }
    fn state(&self, t: usize) -> Self::State {
        (
            Rng::new(t as u64 + 1),
            self.0.claim_shard(t).unwrap(),
            noop_waker(),
        )
    }
    fn run(&self, (rng, guard, waker): &mut Self::State, _: usize, rounds: u64) {
        let mut cx = Context::from_waker(waker);
        for _ in 0..rounds {
            for i in 0..BATCH {
                let delay = Duration::from_millis(rng.delay_ms());
                let mut timeout = self.0.timeout(delay, std::future::ready(i));
                let _ = black_box(Pin::new(&mut timeout).poll(&mut cx));
            }
            black_box(guard.poll().unwrap());
        }
    }
}

/// `tokio::time::timeout(delay, ready)` polled once.
struct TokioTimeoutReady;

impl TaskJob for TokioTimeoutReady {
    type State = (Rng, Waker);
    fn new(_: usize) -> Self {
        TokioTimeoutReady
    }
    fn state(&self, t: usize) -> Self::State {
        (Rng::new(t as u64 + 1), noop_waker())
    }
    async fn run(&self, (rng, waker): &mut Self::State, _: usize, rounds: u64) {
        let mut cx = Context::from_waker(waker);
        for i in 0..rounds * BATCH as u64 {
            let delay = Duration::from_millis(rng.delay_ms());
            let timeout = pin!(tokio::time::timeout(delay, std::future::ready(i)));
            let _ = black_box(timeout.poll(&mut cx));
        }
    }
}

/// `Wheel::reschedule` under a per-worker mutex; the wheel's time follows the
/// loop's clock (read once per round), as an event loop would drive it.
/// With `CLOCK`, each restart also reads the clock for its deadline, as the
/// service and `Sleep::reset(Instant::now() + idle)` do.
struct MutexRestart<const CLOCK: bool>(Vec<Padded<Mutex<Wheel<usize>>>>);

impl<const CLOCK: bool> ThreadJob for MutexRestart<CLOCK> {
    type State = (Vec<TimerKey>, Rng, Instant);
    fn new(workers: usize) -> Self {
        MutexRestart(mutex_wheels(workers))
    }
    fn state(&self, t: usize) -> Self::State {
        let mut rng = Rng::new(t as u64 + 1);
        let mut wheel = self.0[t].lock().unwrap();
        let idle = IDLE.as_millis() as u64;
        let conns = (0..CONNS)
            .map(|_| wheel.insert(idle + rng.below(1000), 0))
            .collect();
        (conns, rng, Instant::now())
    }
    fn run(&self, (conns, rng, epoch): &mut Self::State, t: usize, rounds: u64) {
        let wheel: &Mutex<Wheel<usize>> = &self.0[t];
        let idle = IDLE.as_millis() as u64;
        for _ in 0..rounds {
            let now = epoch.elapsed().as_millis() as u64;
            let _ = wheel.lock().unwrap().advance(now, usize::MAX, |_, _| {});
            for _ in 0..BATCH {
                let key = conns[rng.below(CONNS as u64) as usize];
                let delay = if CLOCK {
                    // The deadline from this restart's own clock reading,
                    // relative to the wheel's time (at most a tick later
                    // than `idle`).
                    clock_ticks(*epoch, idle).saturating_sub(now)
                } else {
                    idle
                };
                wheel.lock().unwrap().reschedule(key, delay).unwrap();
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Cross-thread stop.

/// A timer structure whose timers may be stopped by another thread.
trait Cross: Send + Sync + 'static {
    type Local;
    type Key: Send + 'static;
    fn new(threads: usize) -> Self;
    fn local(&self, t: usize) -> Self::Local;
    fn start(&self, local: &mut Self::Local, delay_ms: u64) -> Self::Key;
    fn stop(&self, local: &mut Self::Local, key: Self::Key);
    /// After every round (an owner's poll).
    fn maintain(&self, _local: &mut Self::Local) {}
}

struct CrossEmbedded(TimerService);

impl Cross for CrossEmbedded {
    type Local = ShardGuard;
    type Key = Timer;
    fn new(threads: usize) -> Self {
        CrossEmbedded(embedded(threads))
    }
    fn local(&self, t: usize) -> ShardGuard {
        self.0.claim_shard(t).unwrap()
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

struct CrossThreads(TimerService);

impl Cross for CrossThreads {
    type Local = ();
    type Key = Timer;
    fn new(threads: usize) -> Self {
        CrossThreads(threaded(threads))
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

struct CrossShardedMutex(Vec<Padded<Mutex<Wheel<usize>>>>);

impl Cross for CrossShardedMutex {
    type Local = usize;
    type Key = (usize, TimerKey);
    fn new(threads: usize) -> Self {
        CrossShardedMutex(mutex_wheels(threads))
    }
    fn local(&self, t: usize) -> usize {
        t
    }
    fn start(&self, shard: &mut usize, delay_ms: u64) -> (usize, TimerKey) {
        (*shard, self.0[*shard].lock().unwrap().insert(delay_ms, 0))
    }
    fn stop(&self, _: &mut usize, (shard, key): (usize, TimerKey)) {
        black_box(self.0[shard].lock().unwrap().cancel(key));
    }
}

/// [`CrossShardedMutex`] computing each deadline from the clock, as a timer
/// that is never early must (the service and tokio do): the same peer with
/// the cost of a clock read per START.
struct CrossShardedMutexClock(Vec<Padded<Mutex<Wheel<usize>>>>, Instant);

impl Cross for CrossShardedMutexClock {
    type Local = usize;
    type Key = (usize, TimerKey);
    fn new(threads: usize) -> Self {
        CrossShardedMutexClock(mutex_wheels(threads), Instant::now())
    }
    fn local(&self, t: usize) -> usize {
        t
    }
    fn start(&self, shard: &mut usize, delay_ms: u64) -> (usize, TimerKey) {
        let ticks = clock_ticks(self.1, delay_ms);
        (*shard, self.0[*shard].lock().unwrap().insert(ticks, 0))
    }
    fn stop(&self, _: &mut usize, (shard, key): (usize, TimerKey)) {
        black_box(self.0[shard].lock().unwrap().cancel(key));
    }
}

/// Batches handed to thread `t`, in `mailboxes[t]`.
type Mailboxes<K> = Vec<Padded<Mutex<VecDeque<Vec<K>>>>>;

fn mailboxes<K>(threads: usize) -> Mailboxes<K> {
    (0..threads)
        .map(|_| CachePadded::new(Mutex::new(VecDeque::new())))
        .collect()
}

/// What the latency runs record: one duration per START and per STOP.
#[derive(Default)]
struct Samples {
    start: Vec<u32>,
    stop: Vec<u32>,
    /// Times a thread found its mailbox empty and yielded.
    waits: u64,
    /// How long the thread's timed run took.
    run: Duration,
}

impl Samples {
    /// Folds one thread's samples into the total.
    fn merge(&mut self, other: Samples) {
        self.start.extend(other.start);
        self.stop.extend(other.stop);
        self.waits += other.waits;
        self.run = self.run.max(other.run);
    }
}

fn nanos(since: Instant) -> u32 {
    since.elapsed().as_nanos().min(u128::from(u32::MAX)) as u32
}

/// The cross-thread workload for a [`Cross`] implementation, on threads.
struct CrossJob<C: Cross> {
    shared: C,
    mail: Mailboxes<C::Key>,
    /// Record per-operation latencies (the `latency` runs) instead of
    /// running flat out.
    timed: bool,
}

struct CrossState<C: Cross> {
    rng: Rng,
    samples: Samples,
    local: C::Local,
}

impl<C: Cross> CrossJob<C> {
    fn start_one(&self, s: &mut CrossState<C>) -> C::Key {
        let delay = s.rng.delay_ms();
        if !self.timed {
            return self.shared.start(&mut s.local, delay);
        }
        let begin = Instant::now();
        let key = self.shared.start(&mut s.local, delay);
        s.samples.start.push(nanos(begin));
        key
    }

    fn stop_one(&self, s: &mut CrossState<C>, key: C::Key) {
        if !self.timed {
            return self.shared.stop(&mut s.local, key);
        }
        let begin = Instant::now();
        self.shared.stop(&mut s.local, key);
        s.samples.stop.push(nanos(begin));
    }
}

impl<C: Cross> ThreadJob for CrossJob<C> {
    type State = CrossState<C>;
    fn new(threads: usize) -> Self {
        CrossJob {
            shared: C::new(threads),
            mail: mailboxes(threads),
            timed: false,
        }
    }
    fn state(&self, t: usize) -> CrossState<C> {
        let mut s = CrossState {
            rng: Rng::new(t as u64 + 1),
            samples: Samples::default(),
            local: self.shared.local(t),
        };
        let next: &Mutex<_> = &self.mail[(t + 1) % self.mail.len()];
        for _ in 0..DEPTH {
            let batch = (0..BATCH)
                .map(|_| self.shared.start(&mut s.local, s.rng.delay_ms()))
                .collect();
            next.lock().unwrap().push_back(batch);
        }
        s
    }
    fn run(&self, s: &mut CrossState<C>, t: usize, rounds: u64) {
        let threads = self.mail.len();
        for _ in 0..rounds {
            let batch = (0..BATCH).map(|_| self.start_one(s)).collect();
            self.mail[(t + 1) % threads]
                .lock()
                .unwrap()
                .push_back(batch);
            let mine = loop {
                if let Some(batch) = self.mail[t].lock().unwrap().pop_front() {
                    break batch;
                }
                s.samples.waits += 1;
                std::thread::yield_now();
            };
            for key in mine {
                self.stop_one(s, key);
            }
            self.shared.maintain(&mut s.local);
        }
    }
}

/// The cross-thread workload for tokio: tasks hand registered sleeps to each
/// other and drop them. A task waiting for its mailbox yields its OS thread
/// (as the thread runners do) and then its worker (another task may share
/// it). With the runtime yield alone, a worker spun through its scheduler
/// while the thread it waited for sat descheduled on the loaded machine:
/// 367 waits per round and 0.2 M pairs/s at 2 threads.
struct TokioCross {
    mail: Mailboxes<Pin<Box<Sleep>>>,
    timed: bool,
}

struct TokioCrossState {
    rng: Rng,
    waker: Waker,
    samples: Samples,
}

impl TokioCross {
    fn start_one(&self, s: &mut TokioCrossState) -> Pin<Box<Sleep>> {
        let delay = Duration::from_millis(s.rng.delay_ms());
        let begin = self.timed.then(Instant::now);
        let mut sleep = Box::pin(tokio::time::sleep(delay));
        register(sleep.as_mut(), &s.waker);
        if let Some(begin) = begin {
            s.samples.start.push(nanos(begin));
        }
        sleep
    }
}

impl TaskJob for TokioCross {
    type State = TokioCrossState;
    fn new(threads: usize) -> Self {
        TokioCross {
            mail: mailboxes(threads),
            timed: false,
        }
    }
    fn state(&self, t: usize) -> TokioCrossState {
        let mut s = TokioCrossState {
            rng: Rng::new(t as u64 + 1),
            waker: noop_waker(),
            samples: Samples::default(),
        };
        let next: &Mutex<_> = &self.mail[(t + 1) % self.mail.len()];
        for _ in 0..DEPTH {
            let batch = (0..BATCH).map(|_| self.start_one(&mut s)).collect();
            next.lock().unwrap().push_back(batch);
        }
        s.samples = Samples::default();
        s
    }
    async fn run(&self, s: &mut TokioCrossState, t: usize, rounds: u64) {
        let threads = self.mail.len();
        for _ in 0..rounds {
            let batch = (0..BATCH).map(|_| self.start_one(s)).collect();
            self.mail[(t + 1) % threads]
                .lock()
                .unwrap()
                .push_back(batch);
            let mine = loop {
                let popped = self.mail[t].lock().unwrap().pop_front();
                match popped {
                    Some(batch) => break batch,
                    None => {
                        s.samples.waits += 1;
                        // Give the core away as the thread runners do (the
                        // feeding task's worker thread may be waiting for
                        // it on an oversubscribed machine), then let any
                        // task queued on this worker run.
                        std::thread::yield_now();
                        tokio::task::yield_now().await;
                    }
                }
            };
            for sleep in mine {
                if self.timed {
                    let begin = Instant::now();
                    drop(sleep);
                    s.samples.stop.push(nanos(begin));
                } else {
                    drop(sleep);
                }
            }
        }
    }
}

fn bench_cross_threads<C: Cross>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    threads: usize,
) {
    group.throughput(Throughput::Elements(threads as u64));
    bench_threads::<CrossJob<C>>(group, name, threads, Measure::Wall);
}

// ---------------------------------------------------------------------------
// Latency (harness part: sorted samples, not criterion).

/// Alternating rounds for the targets: 15 rounds of ~100 ms slices.
const TARGET_PACE: Pace = Pace {
    rounds: 15,
    slice: Duration::from_millis(100),
};
/// The same under `cargo test --benches`: that it runs, not what it reads.
const TEST_PACE: Pace = Pace {
    rounds: 2,
    slice: Duration::from_millis(1),
};

/// Rounds per thread in a latency run (`BATCH` starts and stops each).
const LATENCY_ROUNDS: u64 = 2_000;

fn percentiles(name: &str, threads: usize, op: &str, mut samples: Vec<u32>, whole: &str) {
    if samples.is_empty() {
        return;
    }
    samples.sort_unstable();
    let at = |p: f64| {
        let rank = ((samples.len() as f64) * p).ceil() as usize;
        f64::from(samples[rank.clamp(1, samples.len()) - 1]) / 1000.0
    };
    println!(
        "| {name} | {threads} | {op} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {whole} |",
        samples.len(),
        at(0.50),
        at(0.99),
        at(0.999),
        at(1.0),
    );
}

/// Runs the cross workload with every operation timed, on OS threads.
fn latency_threads<C: Cross>(name: &str, threads: usize, rounds: u64) {
    let job = Arc::new(CrossJob::<C> {
        timed: true,
        ..CrossJob::new(threads)
    });
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (job, barrier) = (job.clone(), barrier.clone());
            std::thread::spawn(move || {
                let mut state = job.state(t);
                barrier.wait();
                let begin = Instant::now();
                job.run(&mut state, t, rounds);
                state.samples.run = begin.elapsed();
                // Stay until every thread is done, so each thread's batches
                // in flight are still taken from its mailbox.
                barrier.wait();
                std::mem::take(&mut state.samples)
            })
        })
        .collect();
    let mut all = Samples::default();
    for handle in handles {
        all.merge(handle.join().unwrap());
    }
    report_latency(name, threads, rounds, all);
}

/// Runs the tokio cross workload with every operation timed.
fn latency_tokio(threads: usize, rounds: u64) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_time()
        .build()
        .unwrap();
    let job = Arc::new(TokioCross {
        timed: true,
        ..TokioCross::new(threads)
    });
    let all = runtime.block_on(async {
        let barrier = Arc::new(tokio::sync::Barrier::new(threads));
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (job, barrier) = (job.clone(), barrier.clone());
                tokio::spawn(tokio::task::unconstrained(async move {
                    let mut state = job.state(t);
                    barrier.wait().await;
                    let begin = Instant::now();
                    job.run(&mut state, t, rounds).await;
                    state.samples.run = begin.elapsed();
                    std::mem::take(&mut state.samples)
                }))
            })
            .collect();
        let mut all = Samples::default();
        for handle in handles {
            all.merge(handle.await.unwrap());
        }
        // Sleeps left in the mailboxes go while the runtime runs.
        for mailbox in &job.mail {
            mailbox.lock().unwrap().clear();
        }
        all
    });
    report_latency("tokio-sleep", threads, rounds, all);
}

/// Prints the start and stop rows of one implementation, each with the
/// run's throughput and how often a thread waited for its mailbox (a wait
/// means the thread that feeds it was behind: descheduled or slower).
fn report_latency(name: &str, threads: usize, rounds: u64, all: Samples) {
    let pairs = threads as f64 * (rounds * BATCH as u64) as f64;
    let whole = format!(
        "{:.2} | {:.2}",
        pairs / all.run.as_secs_f64().max(1e-9) / 1e6,
        all.waits as f64 / (threads as u64 * rounds) as f64
    );
    percentiles(name, threads, "start", all.start, &whole);
    percentiles(name, threads, "stop", all.stop, &whole);
}

fn latency(rounds: u64) {
    println!("\nservice_vs_tokio/latency: per-operation time in the cross_stop workload, µs");
    println!(
        "({rounds} rounds of {BATCH} starts and {BATCH} stops per thread; every operation timed)\n"
    );
    println!(
        "| implementation | threads | op | samples | p50 | p99 | p99.9 | max | run M pairs/s | waits/round |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for threads in CROSS_THREADS {
        latency_threads::<CrossEmbedded>("tickwheel-embedded", threads, rounds);
        latency_threads::<CrossThreads>("tickwheel-threads", threads, rounds);
        latency_tokio(threads, rounds);
        latency_threads::<CrossShardedMutex>("sharded-mutex-wheel", threads, rounds);
        latency_threads::<CrossShardedMutexClock>("sharded-mutex-wheel+clock", threads, rounds);
    }
}

// ---------------------------------------------------------------------------
// Targets in alternating rounds (harness part, not criterion).
//
// This guest's speed drifts for minutes at a time, longer than one
// implementation's criterion run, so two criterion medians taken a few
// minutes apart can differ 2x for the same code. Here every implementation
// of a row keeps its workers (and their armed timers) alive, and the rows'
// implementations take turns in short slices, round after round, in a
// rotating order; each round's ratio compares slices run seconds apart,
// and the median of the per-round ratios is the figure a target is read
// against.

/// One sample of a workload: `iters` operations per worker, the time scaled
/// to exactly `iters`.
trait Sampler {
    fn sample(&self, iters: u64) -> Duration;
}

impl Sampler for ThreadPool {
    fn sample(&self, iters: u64) -> Duration {
        self.run(iters)
    }
}

impl<J: TaskJob> Sampler for TaskPool<J> {
    fn sample(&self, iters: u64) -> Duration {
        self.run(iters)
    }
}

/// One implementation in an alternating comparison.
struct Contender {
    name: &'static str,
    pool: Box<dyn Sampler>,
    /// Operations per worker per slice (calibrated).
    iters: u64,
    /// ns per operation per worker, one per round.
    ns: Vec<f64>,
}

fn on_threads<J: ThreadJob>(name: &'static str, workers: usize) -> Contender {
    on_threads_measured::<J>(name, workers, Measure::Wall)
}

/// [`on_threads`], its figure taken as `measure` says.
fn on_threads_measured<J: ThreadJob>(
    name: &'static str,
    workers: usize,
    measure: Measure,
) -> Contender {
    Contender {
        name,
        pool: Box::new(ThreadPool::new::<J>(workers, measure)),
        iters: BATCH as u64,
        ns: Vec::new(),
    }
}

fn on_tasks<J: TaskJob>(name: &'static str, workers: usize) -> Contender {
    Contender {
        name,
        pool: Box::new(TaskPool::<J>::new(workers, Measure::Wall)),
        iters: BATCH as u64,
        ns: Vec::new(),
    }
}

/// A target: `tickwheel`'s time divided by `peer`'s, at most `at_most`.
struct Target {
    tickwheel: &'static str,
    peer: &'static str,
    at_most: Option<f64>,
}

const fn target(tickwheel: &'static str, peer: &'static str, at_most: f64) -> Target {
    Target {
        tickwheel,
        peer,
        at_most: Some(at_most),
    }
}

const fn beside(tickwheel: &'static str, peer: &'static str) -> Target {
    Target {
        tickwheel,
        peer,
        at_most: None,
    }
}

/// How an alternating run is paced.
struct Pace {
    rounds: usize,
    /// Wall time one slice aims at.
    slice: Duration,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Runs `contenders` in alternating rounds and prints one table row per
/// target.
fn alternate(
    group: &str,
    workers: usize,
    mut contenders: Vec<Contender>,
    targets: &[Target],
    pace: &Pace,
) {
    // Calibrate each slice to about `pace.slice` (after one warm-up sample).
    for c in &mut contenders {
        c.pool.sample(c.iters);
        loop {
            let took = c.pool.sample(c.iters);
            if took >= pace.slice / 4 || c.iters >= 1 << 30 {
                let scale = pace.slice.as_secs_f64() / took.as_secs_f64().max(1e-9);
                c.iters = ((c.iters as f64 * scale) as u64).max(BATCH as u64);
                break;
            }
            c.iters *= 4;
        }
    }
    let n = contenders.len();
    for round in 0..pace.rounds {
        for k in 0..n {
            let c = &mut contenders[(round + k) % n];
            let took = c.pool.sample(c.iters);
            c.ns.push(took.as_nanos() as f64 / c.iters as f64);
        }
    }
    let find = |name: &str| {
        contenders
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no contender {name} in {group}"))
    };
    for t in targets {
        let (tw, peer) = (find(t.tickwheel), find(t.peer));
        let ratios: Vec<f64> = tw.ns.iter().zip(&peer.ns).map(|(a, b)| a / b).collect();
        let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = ratios.iter().copied().fold(0.0, f64::max);
        let wins = match t.at_most {
            Some(limit) => ratios.iter().filter(|&&r| r <= limit).count(),
            None => 0,
        };
        let ratio = median(ratios);
        let verdict = match t.at_most {
            Some(limit) if ratio <= limit => {
                format!("≤ {limit:.2}: met ({wins}/{} rounds)", pace.rounds)
            }
            Some(limit) => format!("≤ {limit:.2}: **not met** ({wins}/{} rounds)", pace.rounds),
            None => "-".to_string(),
        };
        println!(
            "| {group} | {workers} | {} | {:.1} | {} | {:.1} | {ratio:.2} | {lo:.2}-{hi:.2} | {verdict} |",
            t.tickwheel,
            median(tw.ns.clone()),
            t.peer,
            median(peer.ns.clone()),
        );
    }
}

/// The targets for the service, each read from alternating rounds.
/// `only`: run just the groups whose name contains it.
fn targets(pace: &Pace, only: Option<&str>) {
    let wanted = |group: &str| only.is_none_or(|only| group.contains(only));
    println!(
        "\nservice_vs_tokio/targets: ns per operation per worker (cross_stop: per start/stop pair per thread), \
         medians of {} alternating rounds of about {} ms per implementation; ratio = median of the per-round ratios\n",
        pace.rounds,
        pace.slice.as_millis()
    );
    println!(
        "| workload | workers | tickwheel | ns | peer | ns | tickwheel ÷ peer | range | target |"
    );
    println!("|---|---:|---|---:|---|---:|---:|---|---|");
    for workers in WORKERS.into_iter().filter(|_| wanted("owner_start_cancel")) {
        alternate(
            "owner_start_cancel",
            workers,
            vec![
                on_threads::<OwnerStartCancel<false>>("tickwheel-embedded", workers),
                on_threads::<OwnerStartCancel<false, true>>(
                    "tickwheel-embedded-capture16",
                    workers,
                ),
                on_threads::<MutexPerWorker<true>>("mutex-wheel-per-worker+clock", workers),
                on_tasks::<TokioStartCancel<false>>("tokio-sleep", workers),
            ],
            &[
                target("tickwheel-embedded", "mutex-wheel-per-worker+clock", 1.0),
                beside(
                    "tickwheel-embedded-capture16",
                    "mutex-wheel-per-worker+clock",
                ),
                beside("tickwheel-embedded", "tokio-sleep"),
            ],
            pace,
        );
    }
    for workers in WORKERS
        .into_iter()
        .filter(|_| wanted("nonowner_start_cancel"))
    {
        alternate(
            "nonowner_start_cancel",
            workers,
            vec![
                on_threads::<NonOwnerStartCancel>("tickwheel-threads", workers),
                on_tasks::<TokioStartCancel<false>>("tokio-sleep", workers),
                on_threads::<ShardedMutexSpread>("sharded-mutex-wheel", workers),
            ],
            &[
                target("tickwheel-threads", "tokio-sleep", 0.5),
                beside("tickwheel-threads", "sharded-mutex-wheel"),
            ],
            pace,
        );
    }
    for workers in WORKERS.into_iter().filter(|_| wanted("restart_owner")) {
        alternate(
            "restart_owner",
            workers,
            vec![
                on_threads::<Restarts<true>>("tickwheel-embedded", workers),
                on_tasks::<TokioReset>("tokio-sleep-reset", workers),
                on_threads::<TwoMisses>("two-dependent-misses", workers),
            ],
            &[
                target("tickwheel-embedded", "tokio-sleep-reset", 0.5),
                beside("tickwheel-embedded", "two-dependent-misses"),
            ],
            pace,
        );
    }
    for workers in WORKERS.into_iter().filter(|_| wanted("restart_nonowner")) {
        alternate(
            "restart_nonowner",
            workers,
            vec![
                on_threads::<Restarts<false>>("tickwheel-threads", workers),
                on_tasks::<TokioReset>("tokio-sleep-reset", workers),
            ],
            &[target("tickwheel-threads", "tokio-sleep-reset", 1.0 / 1.5)],
            pace,
        );
    }
    for workers in WORKERS.into_iter().filter(|_| wanted("sleep_poll_drop")) {
        alternate(
            "sleep_poll_drop",
            workers,
            vec![
                on_threads::<OwnerSleep>("tickwheel-sleep", workers),
                on_tasks::<TokioStartCancel<false>>("tokio-sleep", workers),
                on_threads::<AsyncIoSleep>("async-io-timer", workers),
                on_threads::<FuturesTimerSleep>("futures-timer-delay", workers),
            ],
            &[
                target("tickwheel-sleep", "tokio-sleep", 0.5),
                target("tickwheel-sleep", "async-io-timer", 0.2),
                target("tickwheel-sleep", "futures-timer-delay", 0.2),
            ],
            pace,
        );
    }
    for workers in WORKERS.into_iter().filter(|_| wanted("sleep_reset")) {
        alternate(
            "sleep_reset",
            workers,
            vec![
                on_threads::<OwnerSleepReset>("tickwheel-sleep-reset", workers),
                on_tasks::<TokioReset>("tokio-sleep-reset", workers),
            ],
            &[target("tickwheel-sleep-reset", "tokio-sleep-reset", 0.5)],
            pace,
        );
    }
    for workers in WORKERS
        .into_iter()
        .filter(|_| wanted("sleep_timeout_ready"))
    {
        alternate(
            "sleep_timeout_ready",
            workers,
            vec![
                on_threads::<OwnerTimeoutReady>("tickwheel-timeout", workers),
                on_tasks::<TokioTimeoutReady>("tokio-timeout", workers),
            ],
            &[beside("tickwheel-timeout", "tokio-timeout")],
            pace,
        );
    }
    for threads in CROSS_THREADS.into_iter().filter(|_| wanted("cross_stop")) {
        alternate(
            "cross_stop",
            threads,
            vec![
                on_threads::<CrossJob<CrossEmbedded>>("tickwheel-embedded", threads),
                on_threads::<CrossJob<CrossShardedMutex>>("sharded-mutex-wheel", threads),
                on_threads::<CrossJob<CrossShardedMutexClock>>(
                    "sharded-mutex-wheel+clock",
                    threads,
                ),
                on_tasks::<TokioCross>("tokio-sleep", threads),
                on_threads_measured::<CrossJob<CrossEmbedded>>(
                    "tickwheel-embedded-cpu",
                    threads,
                    Measure::Cpu,
                ),
                on_threads_measured::<CrossJob<CrossShardedMutex>>(
                    "sharded-mutex-wheel-cpu",
                    threads,
                    Measure::Cpu,
                ),
            ],
            &[
                target("tickwheel-embedded", "sharded-mutex-wheel", 1.0),
                beside("tickwheel-embedded", "sharded-mutex-wheel+clock"),
                beside("tickwheel-embedded", "tokio-sleep"),
                beside("tickwheel-embedded-cpu", "sharded-mutex-wheel-cpu"),
            ],
            pace,
        );
    }
}

// ---------------------------------------------------------------------------

fn criterion_groups(c: &mut Criterion) {
    let mut group = c.benchmark_group("service_vs_tokio/owner_start_cancel");
    for workers in WORKERS {
        bench_threads::<OwnerStartCancel<false>>(
            &mut group,
            "tickwheel-embedded",
            workers,
            Measure::Wall,
        );
        bench_threads::<OwnerStartCancel<true>>(
            &mut group,
            "tickwheel-embedded+1alive",
            workers,
            Measure::Wall,
        );
        bench_threads::<OwnerStartCancel<false, true>>(
            &mut group,
            "tickwheel-embedded-capture16",
            workers,
            Measure::Wall,
        );
        bench_tasks::<TokioStartCancel<false>>(&mut group, "tokio-sleep", workers, Measure::Wall);
        bench_tasks::<TokioStartCancel<true>>(
            &mut group,
            "tokio-sleep+1alive",
            workers,
            Measure::Wall,
        );
        bench_threads::<MutexPerWorker<false>>(
            &mut group,
            "mutex-wheel-per-worker",
            workers,
            Measure::Wall,
        );
        bench_threads::<MutexPerWorker<true>>(
            &mut group,
            "mutex-wheel-per-worker+clock",
            workers,
            Measure::Wall,
        );
        bench_threads::<BareWheel>(&mut group, "wheel-per-worker", workers, Measure::Wall);
    }
    group.finish();

    let mut group = c.benchmark_group("service_vs_tokio/nonowner_start_cancel");
    for workers in WORKERS {
        bench_threads::<NonOwnerStartCancel>(
            &mut group,
            "tickwheel-threads",
            workers,
            Measure::Wall,
        );
        bench_threads::<NonOwnerStartCancel>(
            &mut group,
            "tickwheel-threads-cpu",
            workers,
            Measure::Cpu,
        );
        bench_tasks::<TokioStartCancel<false>>(&mut group, "tokio-sleep", workers, Measure::Wall);
        bench_tasks::<TokioStartCancel<false>>(
            &mut group,
            "tokio-sleep-cpu",
            workers,
            Measure::Cpu,
        );
        bench_threads::<ShardedMutexSpread>(
            &mut group,
            "sharded-mutex-wheel",
            workers,
            Measure::Wall,
        );
    }
    group.finish();

    let mut group = c.benchmark_group("service_vs_tokio/restart_owner");
    for workers in WORKERS {
        bench_threads::<Restarts<true>>(&mut group, "tickwheel-embedded", workers, Measure::Wall);
        bench_tasks::<TokioReset>(&mut group, "tokio-sleep-reset", workers, Measure::Wall);
        bench_threads::<MutexRestart<false>>(
            &mut group,
            "mutex-wheel-per-worker",
            workers,
            Measure::Wall,
        );
        bench_threads::<MutexRestart<true>>(
            &mut group,
            "mutex-wheel-per-worker+clock",
            workers,
            Measure::Wall,
        );
        bench_threads::<TwoMisses>(&mut group, "two-dependent-misses", workers, Measure::Wall);
    }
    group.finish();

    let mut group = c.benchmark_group("service_vs_tokio/restart_nonowner");
    for workers in WORKERS {
        bench_threads::<Restarts<false>>(&mut group, "tickwheel-threads", workers, Measure::Wall);
        bench_tasks::<TokioReset>(&mut group, "tokio-sleep-reset", workers, Measure::Wall);
    }
    group.finish();

    let mut group = c.benchmark_group("service_vs_tokio/cross_stop");
    for threads in CROSS_THREADS {
        bench_cross_threads::<CrossEmbedded>(&mut group, "tickwheel-embedded", threads);
        bench_cross_threads::<CrossThreads>(&mut group, "tickwheel-threads", threads);
        group.throughput(Throughput::Elements(threads as u64));
        bench_tasks::<TokioCross>(&mut group, "tokio-sleep", threads, Measure::Wall);
        bench_cross_threads::<CrossShardedMutex>(&mut group, "sharded-mutex-wheel", threads);
        bench_cross_threads::<CrossShardedMutexClock>(
            &mut group,
            "sharded-mutex-wheel+clock",
            threads,
        );
    }
    group.finish();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes `--bench`; `cargo test --benches` does not, and
    // criterion then runs each benchmark once as a test.
    let bench_mode = args.iter().any(|a| a == "--bench");
    let latency_only = args
        .iter()
        .any(|a| !a.starts_with('-') && a.contains("latency"));
    if latency_only {
        latency(if bench_mode { LATENCY_ROUNDS } else { 8 });
        return;
    }
    // `targets [GROUP]`: the alternating-rounds harness, all groups or one.
    let words: Vec<&str> = args
        .iter()
        .filter(|a| !a.starts_with('-'))
        .map(String::as_str)
        .collect();
    if let Some(at) = words.iter().position(|w| *w == "targets") {
        let pace = if bench_mode { TARGET_PACE } else { TEST_PACE };
        targets(&pace, words.get(at + 1).copied());
        return;
    }
    let mut c = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    criterion_groups(&mut c);
    c.final_summary();
    if !bench_mode {
        // Test mode: make sure the latency and target parts run too, briefly.
        latency(8);
        targets(&TEST_PACE, None);
    }
}
