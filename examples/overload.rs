//! Lateness under overload: arming threads start one-shot timers as fast as
//! they can, more threads than cores, and each timer's callback records how
//! late it ran on the real clock.
//!
//! ```sh
//! cargo run --release --example overload -- [--impl tickwheel|tokio|tokio-task|all] \
//!     [--threads 8] [--timers-per-thread 200000] [--shards 4] [--max-delay-ms 50] \
//!     [--timeout 30] [--arm-nice 0]
//! ```
//!
//! The same load as `ffi-tests/overload.c` (the C API): `--threads` OS
//! threads each arm `--timers-per-thread` timers back to back, each due 1 to
//! `--max-delay-ms` ms after it is armed (xorshift per thread, uniform whole
//! milliseconds). A timer's intended deadline is `Instant::now()` read just
//! before arming plus its delay; its lateness is the `Instant` read first thing
//! in its callback minus that deadline. Recording takes no lock: timer `i`
//! writes slot `i` of preallocated arrays and bumps one atomic counter.
//!
//! * `tickwheel`: a `TimerService` with `Driver::Threads`, `--shards` shards;
//!   `start(delay, callback)` + `Timer::forget` (what the C program does
//!   with `tw_timer_start` + `tw_timer_forget`). The callback's
//!   `Expiry::lateness` (the library's own view) is recorded too.
//! * `tokio`: a multi-thread runtime with `--shards` workers. Each arming
//!   thread enters the runtime (`Handle::enter`) and arms a boxed
//!   `tokio::time::sleep(delay)` by polling it once with a waker of its own;
//!   the timer's "callback" is that waker's `wake`, which tokio calls from
//!   whichever worker processes its timer wheel. This is the closest
//!   equivalent of "arm a timer with a callback from a foreign thread": the
//!   arming thread registers the timer itself, and the callback runs on the
//!   runtime's thread when it fires, with no task scheduling in between.
//!   The sleeps are kept until the end (dropping one would cancel it).
//! * `tokio-task`: the way most tokio code arms a timer: per timer,
//!   `Handle::spawn(unconstrained(async { sleep_until(deadline).await; record }))`.
//!   The registration happens on a worker at the task's first poll, and the
//!   "callback" runs when the woken task is polled again, so its lateness
//!   includes the scheduler's queueing as well as the timer's.
//!
//! `--arm-nice N` (Linux) lowers the arming threads' priority by N: a
//! diagnostic, to see how much of the lateness is the arming threads taking
//! the CPU from the timer threads (as `arm_nice` in the C program).
//!
//! After arming, the program waits until every timer fired or `--timeout`
//! seconds passed, then prints the percentiles (all timers, and split by
//! whether the deadline fell while arming was still going on), how long
//! arming took, CPU seconds of the arming threads and of the timer threads
//! (`/proc/thread-self/stat`, `/proc/self/task`; Linux), and a `row:` line.

use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};

use tickwheel::{Driver, TimerService};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Impl {
    Tickwheel,
    Tokio,
    TokioTask,
}

#[derive(Clone, Debug)]
struct Config {
    impls: Vec<Impl>,
    threads: usize,
    per_thread: usize,
    shards: usize,
    max_delay_ms: u64,
    timeout: Duration,
    arm_nice: i32,
}

fn usage(problem: &str) -> ! {
    eprintln!("overload: {problem}");
    eprintln!(
        "usage: overload [--impl tickwheel|tokio|tokio-task|all] [--threads N] \
         [--timers-per-thread N] [--shards N] [--max-delay-ms N] [--timeout S] [--arm-nice N]"
    );
    std::process::exit(2);
}

fn parse_args() -> Config {
    let mut config = Config {
        impls: vec![Impl::Tickwheel, Impl::Tokio, Impl::TokioTask],
        threads: 8,
        per_thread: 200_000,
        shards: 4,
        max_delay_ms: 50,
        timeout: Duration::from_secs(30),
        arm_nice: 0,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
        };
        fn number<T: std::str::FromStr>(flag: &str, text: &str) -> T {
            text.parse()
                .unwrap_or_else(|_| usage(&format!("{flag}: not a number: {text:?}")))
        }
        match flag.as_str() {
            "--impl" => {
                config.impls = match value().as_str() {
                    "tickwheel" => vec![Impl::Tickwheel],
                    "tokio" => vec![Impl::Tokio],
                    "tokio-task" => vec![Impl::TokioTask],
                    "all" => vec![Impl::Tickwheel, Impl::Tokio, Impl::TokioTask],
                    other => usage(&format!("--impl: unknown implementation {other:?}")),
                }
            }
            "--threads" => config.threads = number(&flag, &value()),
            "--timers-per-thread" => config.per_thread = number(&flag, &value()),
            "--shards" => config.shards = number(&flag, &value()),
            "--max-delay-ms" => config.max_delay_ms = number(&flag, &value()),
            "--timeout" => config.timeout = Duration::from_secs(number(&flag, &value())),
            "--arm-nice" => config.arm_nice = number(&flag, &value()),
            "-h" | "--help" => usage("help"),
            other => usage(&format!("unknown argument {other:?}")),
        }
    }
    if !(1..=1024).contains(&config.threads) || !(1..=4096).contains(&config.shards) {
        usage("--threads must be 1..=1024 and --shards 1..=4096");
    }
    if config.per_thread == 0 || config.threads * config.per_thread > 100_000_000 {
        usage("--timers-per-thread must be at least 1, and all timers at most 10^8");
    }
    if !(0..=19).contains(&config.arm_nice) {
        usage("--arm-nice must be 0..=19");
    }
    if !(1..=3_600_000).contains(&config.max_delay_ms) {
        usage("--max-delay-ms must be 1..=3600000");
    }
    config
}

/// xorshift64*.
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
}

/// Not fired.
const UNFIRED: i64 = i64::MIN;

/// What the timers did, written by their callbacks.
struct Record {
    t0: Instant,
    /// Intended deadline, ns after `t0` (written before the timer is armed).
    deadline: Vec<AtomicU64>,
    /// Callback start minus intended deadline, ns.
    lateness: Vec<AtomicI64>,
    /// The library's own lateness (tickwheel's `Expiry::lateness`), ns.
    own: Vec<AtomicU64>,
    fired: AtomicUsize,
}

impl Record {
    fn new(total: usize) -> Self {
        Record {
            t0: Instant::now(),
            deadline: (0..total).map(|_| AtomicU64::new(0)).collect(),
            lateness: (0..total).map(|_| AtomicI64::new(UNFIRED)).collect(),
            own: (0..total).map(|_| AtomicU64::new(0)).collect(),
            fired: AtomicUsize::new(0),
        }
    }

    /// Picks timer `i`'s delay and records its intended deadline.
    fn arming(&self, i: usize, rng: &mut Rng, max_delay_ms: u64) -> (Duration, Instant) {
        let delay = Duration::from_millis(1 + rng.next() % max_delay_ms);
        let deadline = Instant::now() + delay;
        let offset = deadline.duration_since(self.t0).as_nanos() as u64;
        self.deadline[i].store(offset, Ordering::Relaxed);
        (delay, deadline)
    }

    /// First thing in timer `i`'s callback.
    fn fire(&self, i: usize, own: Option<Duration>) {
        let now = self.t0.elapsed().as_nanos() as i64;
        let late = now - self.deadline[i].load(Ordering::Relaxed) as i64;
        self.lateness[i].store(late, Ordering::Relaxed);
        if let Some(own) = own {
            self.own[i].store(own.as_nanos() as u64, Ordering::Relaxed);
        }
        self.fired.fetch_add(1, Ordering::Release);
    }
}

/// CPU seconds (user + system) of one thread, from its `/proc/.../stat`.
fn thread_cpu(stat_path: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(stat_path).ok()?;
    // Fields after the parenthesised name: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // USER_HZ is 100 on every Linux ABI that Rust targets.
    Some((utime + stime) / 100.0)
}

/// CPU seconds of this process's live threads whose name starts with `prefix`.
fn named_threads_cpu(prefix: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return f64::NAN;
    };
    let mut total = 0.0;
    for task in tasks.flatten() {
        let dir = task.path();
        let name = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if name.starts_with(prefix) {
            total += thread_cpu(&dir.join("stat").to_string_lossy()).unwrap_or(0.0);
        }
    }
    total
}

/// Lowers the calling thread's priority by `nice` (Linux: `setpriority` on
/// `PRIO_PROCESS` 0 acts on the calling thread).
fn lower_priority(nice: i32) {
    if nice == 0 {
        return;
    }
    #[cfg(target_os = "linux")]
    // SAFETY: a plain system call on the calling thread.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) } != 0 {
        eprintln!("overload: setpriority: {}", std::io::Error::last_os_error());
    }
    #[cfg(not(target_os = "linux"))]
    eprintln!("overload: --arm-nice is only supported on Linux");
}

/// What one run measured, besides the `Record`.
struct Run {
    title: String,
    arming: Duration,
    /// When the last arming thread finished, after `Record::t0`.
    arm_end: Duration,
    /// From the first arming to the last callback (or the timeout).
    span: Duration,
    arm_cpu: f64,
    timer_cpu: f64,
    extra: String,
}

/// Runs `threads` arming threads, each calling `arm(i, rng)` for its share of
/// the timers, all starting together; returns the arming time, when arming
/// ended (after `t0`) and the arming threads' CPU seconds.
fn arm_all(
    config: &Config,
    record: &'static Record,
    arm: impl Fn(usize, &mut Rng) + Send + Sync + Clone + 'static,
) -> (Duration, Duration, f64) {
    let barrier = Arc::new(Barrier::new(config.threads + 1));
    let threads: Vec<_> = (0..config.threads)
        .map(|k| {
            let (arm, barrier, per_thread) = (arm.clone(), barrier.clone(), config.per_thread);
            let nice = config.arm_nice;
            std::thread::Builder::new()
                .name(format!("arm-{k}"))
                .spawn(move || {
                    let mut rng = Rng::new(k as u64 + 1);
                    lower_priority(nice);
                    barrier.wait();
                    for i in k * per_thread..(k + 1) * per_thread {
                        arm(i, &mut rng);
                    }
                    let end = record.t0.elapsed();
                    (
                        end,
                        thread_cpu("/proc/thread-self/stat").unwrap_or(f64::NAN),
                    )
                })
                .expect("spawn an arming thread")
        })
        .collect();
    barrier.wait();
    let begin = record.t0.elapsed();
    let (mut end, mut cpu) = (begin, 0.0);
    for thread in threads {
        let (their_end, their_cpu) = thread.join().expect("an arming thread panicked");
        end = end.max(their_end);
        cpu += their_cpu;
    }
    (end - begin, end, cpu)
}

/// Waits until every timer fired or the timeout passed.
fn wait_fired(config: &Config, record: &Record) {
    let total = record.deadline.len();
    let begin = Instant::now();
    while record.fired.load(Ordering::Acquire) < total && begin.elapsed() < config.timeout {
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn run_tickwheel(config: &Config, record: &'static Record) -> Run {
    let service = TimerService::builder()
        .shards(config.shards)
        .driver(Driver::Threads { pin: false })
        .build()
        .expect("build the service");
    let max = config.max_delay_ms;
    let arming_service = service.clone();
    let (arming, arm_end, arm_cpu) = arm_all(config, record, move |i, rng| {
        let (delay, _) = record.arming(i, rng, max);
        arming_service
            .start(delay, move |expiry| record.fire(i, Some(expiry.lateness())))
            .expect("start a timer")
            .forget();
    });
    wait_fired(config, record);
    let span = record.t0.elapsed();
    let timer_cpu = named_threads_cpu("tickwheel-");
    let stats = service.stats();
    service.shutdown();
    let mut extra = String::new();
    let _ = writeln!(
        extra,
        "stats(): fired {}, held_back {} (producers slowed by a full remote queue), lateness p50 {:.3} p99 {:.3} max {:.3} ms",
        stats.fired,
        stats.held_back,
        stats.lateness_p50.as_secs_f64() * 1e3,
        stats.lateness_p99.as_secs_f64() * 1e3,
        stats.lateness_max.as_secs_f64() * 1e3,
    );
    Run {
        title: format!("tickwheel Rust ({} shards)", config.shards),
        arming,
        arm_end,
        span,
        arm_cpu,
        timer_cpu,
        extra,
    }
}

/// The "callback" of a tokio sleep armed by a foreign thread.
struct Fire {
    record: &'static Record,
    index: usize,
    done: AtomicBool,
}

impl Wake for Fire {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if !self.done.swap(true, Ordering::Relaxed) {
            self.record.fire(self.index, None);
        }
    }
}

fn runtime(config: &Config) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.shards)
        .thread_name("tokio-worker")
        .enable_time()
        .build()
        .expect("build the runtime")
}

/// One arming thread's armed sleeps.
type Sleeps = Vec<Pin<Box<tokio::time::Sleep>>>;

fn run_tokio(config: &Config, record: &'static Record) -> Run {
    let runtime = runtime(config);
    let handle = runtime.handle().clone();
    let max = config.max_delay_ms;
    // Each arming thread keeps its sleeps until the end: a dropped sleep is
    // a cancelled timer.
    let kept: Arc<std::sync::Mutex<Vec<Sleeps>>> = Arc::default();
    let per_thread = config.per_thread;
    let (arming, arm_end, arm_cpu) = {
        let kept = kept.clone();
        arm_all(config, record, move |i, rng| {
            thread_local! {
                static SLEEPS: std::cell::RefCell<Sleeps> =
                    const { std::cell::RefCell::new(Vec::new()) };
            }
            let (delay, _) = record.arming(i, rng, max);
            let _entered = handle.enter();
            let mut sleep = Box::pin(tokio::time::sleep(delay));
            let waker = Waker::from(Arc::new(Fire {
                record,
                index: i,
                done: AtomicBool::new(false),
            }));
            // The first poll registers the sleep with the timer wheel.
            if sleep
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_ready()
            {
                waker.wake_by_ref();
            }
            SLEEPS.with(|sleeps| {
                let mut sleeps = sleeps.borrow_mut();
                sleeps.push(sleep);
                if sleeps.len() == per_thread {
                    kept.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(std::mem::take(&mut *sleeps));
                }
            });
        })
    };
    wait_fired(config, record);
    let span = record.t0.elapsed();
    let timer_cpu = named_threads_cpu("tokio-worker");
    drop(kept);
    runtime.shutdown_timeout(Duration::from_secs(5));
    Run {
        title: format!("tokio, sleep + waker ({} workers)", config.shards),
        arming,
        arm_end,
        span,
        arm_cpu,
        timer_cpu,
        extra: String::new(),
    }
}

fn run_tokio_task(config: &Config, record: &'static Record) -> Run {
    let runtime = runtime(config);
    let handle = runtime.handle().clone();
    let max = config.max_delay_ms;
    let (arming, arm_end, arm_cpu) = arm_all(config, record, move |i, rng| {
        let (_, deadline) = record.arming(i, rng, max);
        handle.spawn(tokio::task::unconstrained(async move {
            tokio::time::sleep_until(deadline.into()).await;
            record.fire(i, None);
        }));
    });
    wait_fired(config, record);
    let span = record.t0.elapsed();
    let timer_cpu = named_threads_cpu("tokio-worker");
    runtime.shutdown_timeout(Duration::from_secs(5));
    Run {
        title: format!("tokio, task per timer ({} workers)", config.shards),
        arming,
        arm_end,
        span,
        arm_cpu,
        timer_cpu,
        extra: String::new(),
    }
}

// ---------------------------------------------------------------------------

fn ms(ns: i64) -> f64 {
    ns as f64 / 1e6
}

/// Nearest-rank percentile of sorted samples.
fn pct(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((sorted.len() as f64) * p / 100.0).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn dist(what: &str, mut v: Vec<i64>) -> (String, Vec<i64>) {
    v.sort_unstable();
    let line = format!(
        "{what:<44} n={:<8} p50 {:8.3}  p90 {:8.3}  p99 {:8.3}  p99.9 {:8.3}  max {:8.3} ms\n",
        v.len(),
        ms(pct(&v, 50.0)),
        ms(pct(&v, 90.0)),
        ms(pct(&v, 99.0)),
        ms(pct(&v, 99.9)),
        ms(v.last().copied().unwrap_or(0)),
    );
    (line, v)
}

fn report(config: &Config, record: &Record, run: &Run, with_own: bool) -> String {
    let total = record.deadline.len();
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "\n== {} ==", run.title);
    let arm_s = run.arming.as_secs_f64();
    let _ = writeln!(
        w,
        "arming: {:.3} s ({:.2} M starts/s); run: {:.3} s to the last callback; CPU s: arming threads {:.2}, timer threads {:.2}",
        arm_s,
        total as f64 / arm_s / 1e6,
        run.span.as_secs_f64(),
        run.arm_cpu,
        run.timer_cpu
    );
    let (mut all, mut own, mut during, mut after) = (vec![], vec![], vec![], vec![]);
    let mut early = 0;
    let arm_end_ns = run.arm_end.as_nanos() as u64;
    for i in 0..total {
        let late = record.lateness[i].load(Ordering::Relaxed);
        if late == UNFIRED {
            continue;
        }
        early += usize::from(late < 0);
        all.push(late);
        own.push(record.own[i].load(Ordering::Relaxed) as i64);
        if record.deadline[i].load(Ordering::Relaxed) <= arm_end_ns {
            during.push(late);
        } else {
            after.push(late);
        }
    }
    let fired = all.len();
    let _ = writeln!(
        w,
        "fired {fired} of {total}; never fired (within {} s after arming): {}; early: {early}",
        config.timeout.as_secs(),
        total - fired
    );
    let (line, all) = dist("lateness, real clock:", all);
    w.push_str(&line);
    w.push_str(&dist("  deadline while arming went on:", during).0);
    w.push_str(&dist("  deadline after arming ended:", after).0);
    if with_own {
        w.push_str(&dist("Expiry::lateness (library's view):", own).0);
    }
    w.push_str(&run.extra);
    let _ = writeln!(
        w,
        "row: | {} | {fired} / {total} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {arm_s:.2} |",
        run.title,
        ms(pct(&all, 50.0)),
        ms(pct(&all, 90.0)),
        ms(pct(&all, 99.0)),
        ms(pct(&all, 99.9)),
        ms(all.last().copied().unwrap_or(0)),
    );
    out
}

fn main() {
    let config = parse_args();
    let total = config.threads * config.per_thread;
    println!(
        "overload: {} threads x {} timers = {total}, {} shards / workers, delays 1-{} ms, arm nice {}; load {}",
        config.threads,
        config.per_thread,
        config.shards,
        config.max_delay_ms,
        config.arm_nice,
        std::fs::read_to_string("/proc/loadavg")
            .map(|l| l.trim().to_owned())
            .unwrap_or_else(|_| "?".to_owned())
    );
    for imp in config.impls.clone() {
        // Leaked: callbacks may still run on a runtime's threads during its
        // shutdown, and each run's record is small next to the process.
        let record: &'static Record = Box::leak(Box::new(Record::new(total)));
        let run = match imp {
            Impl::Tickwheel => run_tickwheel(&config, record),
            Impl::Tokio => run_tokio(&config, record),
            Impl::TokioTask => run_tokio_task(&config, record),
        };
        print!("{}", report(&config, record, &run, imp == Impl::Tickwheel));
    }
}
