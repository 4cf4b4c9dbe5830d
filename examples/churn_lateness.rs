//! Lateness under churn: do timers fire on time while other threads
//! start and stop timers as fast as they can?
//!
//! ```sh
//! cargo run --release --example churn_lateness -- \
//!     [--impl tickwheel|tickwheel-pool|tokio|tokio-threads|tickwheel-sleep|tickwheel-sleep-pool|sleeps|both|threads|all] \
//!     [--timers 200000] [--seconds 12] [--arm-threads 4] [--churn-threads 4] \
//!     [--drain 3] [--tokio-workers N] [--churn-batch 256] [--tick-us 500]
//! ```
//!
//! The scenario, the same for both implementations:
//!
//! * `--arm-threads` threads arm `--timers` measured timers between them,
//!   paced evenly over the first `seconds - 3` seconds (at least 1 s), each
//!   due 1 to 2000 ms after it is armed, so every deadline falls before the
//!   churn ends. Each timer's intended deadline is an `Instant`.
//! * Meanwhile `--churn-threads` threads start timers (1 to 2000 ms) and stop
//!   them at once, flat out, for `--seconds` seconds.
//! * A measured timer's lateness is the `Instant` read first thing in its
//!   callback minus its intended deadline: the real clock, not the timer's
//!   own idea of time. Timers not fired by the end are reported as unfired,
//!   with the lower bound of their lateness, apart from those not even due
//!   by then (under heavy load the arming threads fall behind their pacing,
//!   so some deadlines can lie after a short drain).
//! * After the churn stops, up to `--drain` seconds more for the rest to fire;
//!   then the program reports and exits, whether or not they did. Total run
//!   time is at most `seconds + drain` plus shutdown.
//!
//! tickwheel (`--impl tickwheel`, and `both`): a `TimerService` with
//! `Driver::Threads` (one shard per core); arming threads and churn threads
//! own no shard, so every operation goes through a shard's remote queue
//! (or is applied in the shard while its driver sleeps and lends it).
//! Measured timers use `TimerSpec::at(deadline)` and `Timer::forget`; churn
//! is `start` + `Timer::cancel`. Also printed (both tickwheel variants):
//! `stats()` lateness beside the external figures (they should agree
//! within 10 %, or `stats()` misreports lateness), and the arena
//! (`stats().slots`) against the peak of live timers.
//!
//! `--tick-us` sets the tick of the `Driver::Threads` services (default:
//! the service's, 500 µs; tokio's is 1 ms). A finer tick cuts the rounding
//! up to a tick but makes the drivers wake more often, and on 2 cores
//! beside 8 busy threads each wake may wait for a CPU: before the drivers
//! asked for a short time slice (`DriverPriority::Normal`), 100 µs took
//! the p50 from 0.58 to 0.09 ms and the p99 from 1.7 to 5.2 ms (`--impl
//! tickwheel --seconds 8 --drain 2`).
//!
//! tickwheel with real-time drivers (`--impl tickwheel-rt`, and `all`): the
//! same, built with `DriverPriority::RealTime(1)`, so that a driver runs as
//! soon as its deadline comes instead of waiting for a slice behind the
//! busy arming and churn threads. Needs `CAP_SYS_NICE` or an
//! `RLIMIT_RTPRIO`; where not permitted it says so and measures nothing.
//!
//! tickwheel in a pool (`--impl tickwheel-pool`, and `all`): the thread-pool
//! shape of tokio's side below. `--tokio-workers` workers each own a shard
//! of a `Driver::Embedded` service; the churn loops are tasks on those
//! workers (a batch of `--churn-batch` pairs each in turn, the shard polled
//! after each batch), so there are never more busy threads than workers.
//! The arming threads are the same as above.
//!
//! tokio: a multi-thread runtime (`--tokio-workers`, default one per core).
//! Each measured timer is a task doing `sleep_until(deadline).await` and then
//! recording, spawned by the arming threads through a `Handle`. Churn is
//! `--churn-threads` tasks, each inside `tokio::task::unconstrained`, doing
//! `sleep(delay)` + first poll + drop in a loop and yielding to the runtime
//! after every `--churn-batch` pairs (a task that never yields would hold a
//! worker thread for ever, and there are more churn tasks than workers).
//!
//! tokio with the churn on plain threads (`--impl tokio-threads`; `threads`
//! runs it beside `tickwheel`, and `all` runs it): the same runtime and
//! measured tasks, but the `--churn-threads` loops are threads inside the
//! runtime's context (`Handle::enter`), flat out, as tickwheel's churn
//! threads are. This is the shape to hold `Driver::Threads` against: there
//! the threads that fire the timers (tickwheel's drivers, tokio's workers
//! parked in their driver) wait for a CPU behind busy threads, where in
//! `tokio` above the workers are the only busy threads.
//!
//! tickwheel's futures on tokio's runtime (`--impl tickwheel-sleep`; `sleeps`
//! runs it and tokio's side, `all` runs every variant): tokio's side above,
//! task for task, with `TimerService::sleep_until` / `sleep` (a
//! `Driver::Threads` service, one shard per core) in place of tokio's: the
//! same executor, only the timer differs. tokio's workers own no shard, so
//! each sleep is armed from a non-owner and fired by a driver thread, which
//! wakes the task.
//!
//! The same with real-time drivers (`--impl tickwheel-sleep-rt`; in `sleeps`
//! and `all`; see `tickwheel-rt` above).
//!
//! tickwheel's futures in a pool (`--impl tickwheel-sleep-pool`; in `sleeps`
//! and `all`): the same tasks on a small executor whose workers each own a
//! shard of a `Driver::Embedded` service and poll it between tasks (see
//! `run_sleep_pool`), the shape the futures are built for.
//!
//! RSS is read from `/proc/self/status` (`VmHWM`, `VmRSS`; Linux only).
//! The peak is reset (`/proc/self/clear_refs`) before each implementation,
//! but only down to the current RSS, which after the first implementation
//! still holds what the allocator kept: for RSS, run one `--impl` per
//! process (tokio alone: 17 MB; after tickwheel in the same process: 59-117).

use std::fmt::Write as _;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};

use tickwheel::{Driver, DriverPriority, Stats, TimerError, TimerService, TimerSpec};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Impl {
    Tickwheel,
    /// `Tickwheel` with real-time driver threads (`DriverPriority`).
    TickwheelRealtime,
    /// tickwheel as a thread pool embeds it: see `run_tickwheel_pool`.
    TickwheelPool,
    Tokio,
    /// tokio's runtime with the churn on plain threads, as `Tickwheel`'s
    /// churn runs: see `run_tokio`.
    TokioThreads,
    /// tickwheel's `Sleep` futures on tokio's runtime: see `run_tokio`.
    TickwheelSleep,
    /// `TickwheelSleep` with real-time driver threads.
    TickwheelSleepRealtime,
    /// tickwheel's `Sleep` futures on workers that own the shards: see
    /// `run_sleep_pool`.
    TickwheelSleepPool,
}

#[derive(Clone, Debug)]
struct Config {
    impls: Vec<Impl>,
    timers: usize,
    seconds: f64,
    arm_threads: usize,
    churn_threads: usize,
    drain: f64,
    tokio_workers: usize,
    churn_batch: usize,
    /// `Builder::lend_while_idle` for tickwheel's driver threads.
    lend: bool,
    /// `Builder::tick` for the `Driver::Threads` services (`None`: the
    /// service's default).
    tick: Option<Duration>,
}

fn usage(problem: &str) -> ! {
    eprintln!("churn_lateness: {problem}");
    eprintln!(
        "usage: churn_lateness [--impl tickwheel|tickwheel-rt|tickwheel-pool|tokio|tokio-threads|tickwheel-sleep|tickwheel-sleep-rt|tickwheel-sleep-pool|sleeps|both|threads|all] \
         [--timers N] \
         [--seconds S] \
         [--arm-threads N] [--churn-threads N] [--drain S] [--tokio-workers N] [--churn-batch N] \
         [--no-lend] [--tick-us N]"
    );
    std::process::exit(2);
}

fn parse_args() -> Config {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut config = Config {
        impls: vec![Impl::Tickwheel, Impl::Tokio],
        timers: 200_000,
        seconds: 12.0,
        arm_threads: 4,
        churn_threads: 4,
        drain: 3.0,
        tokio_workers: cores,
        churn_batch: 256,
        lend: true,
        tick: None,
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
                    "tickwheel-rt" => vec![Impl::TickwheelRealtime],
                    "tickwheel-pool" => vec![Impl::TickwheelPool],
                    "tokio" => vec![Impl::Tokio],
                    "tokio-threads" => vec![Impl::TokioThreads],
                    "tickwheel-sleep" => vec![Impl::TickwheelSleep],
                    "tickwheel-sleep-rt" => vec![Impl::TickwheelSleepRealtime],
                    "tickwheel-sleep-pool" => vec![Impl::TickwheelSleepPool],
                    "sleeps" => vec![
                        Impl::TickwheelSleep,
                        Impl::TickwheelSleepRealtime,
                        Impl::TickwheelSleepPool,
                        Impl::Tokio,
                    ],
                    "both" => vec![Impl::Tickwheel, Impl::Tokio],
                    "threads" => vec![Impl::Tickwheel, Impl::TokioThreads],
                    "all" => vec![
                        Impl::Tickwheel,
                        Impl::TickwheelRealtime,
                        Impl::TickwheelPool,
                        Impl::Tokio,
                        Impl::TokioThreads,
                        Impl::TickwheelSleep,
                        Impl::TickwheelSleepRealtime,
                        Impl::TickwheelSleepPool,
                    ],
                    other => usage(&format!("--impl: unknown implementation {other:?}")),
                }
            }
            "--timers" => config.timers = number(&flag, &value()),
            "--seconds" => config.seconds = number(&flag, &value()),
            "--arm-threads" => config.arm_threads = number(&flag, &value()),
            "--churn-threads" => config.churn_threads = number(&flag, &value()),
            "--drain" => config.drain = number(&flag, &value()),
            "--tokio-workers" => config.tokio_workers = number(&flag, &value()),
            "--churn-batch" => config.churn_batch = number(&flag, &value()),
            "--no-lend" => config.lend = false,
            "--tick-us" => config.tick = Some(Duration::from_micros(number(&flag, &value()))),
            "-h" | "--help" => usage("help"),
            other => usage(&format!("unknown argument {other:?}")),
        }
    }
    if config.timers == 0 || config.timers > u32::MAX as usize {
        usage("--timers must be between 1 and 2^32 - 1");
    }
    if !(config.seconds >= 1.0 && config.seconds <= 3600.0) {
        usage("--seconds must be between 1 and 3600");
    }
    if !(config.drain >= 0.0 && config.drain <= 3600.0) {
        usage("--drain must be between 0 and 3600");
    }
    if config.arm_threads == 0 || config.tokio_workers == 0 || config.churn_batch == 0 {
        usage("--arm-threads, --tokio-workers and --churn-batch must be at least 1");
    }
    config
}

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        ((u128::from(self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)) * u128::from(n)) >> 64) as u64
    }
    /// 1 to 2000 ms.
    fn delay(&mut self) -> Duration {
        Duration::from_millis(1 + self.below(2000))
    }
}

/// Not fired (yet).
const UNFIRED: i64 = i64::MIN;
/// Not armed.
const UNARMED: u64 = u64::MAX;

/// What the measured timers did, written by their callbacks.
struct Record {
    t0: Instant,
    /// Intended deadline, ns after `t0`.
    deadline: Vec<AtomicU64>,
    /// Callback start minus intended deadline, ns (negative: early).
    lateness: Vec<AtomicI64>,
    armed: AtomicU64,
    fired: AtomicU64,
    /// Churn timers whose callback ran (each is stopped right after its start,
    /// so this should stay near 0).
    churn_fired: AtomicU64,
    churn_pairs: AtomicU64,
    stop_arming: AtomicBool,
    stop_churn: AtomicBool,
    /// The probe's wake lateness, ns (see `end_churn`).
    probe: std::sync::Mutex<Vec<i64>>,
}

impl Record {
    fn new(timers: usize) -> Self {
        Record {
            t0: Instant::now(),
            deadline: (0..timers).map(|_| AtomicU64::new(UNARMED)).collect(),
            lateness: (0..timers).map(|_| AtomicI64::new(UNFIRED)).collect(),
            armed: AtomicU64::new(0),
            fired: AtomicU64::new(0),
            churn_fired: AtomicU64::new(0),
            churn_pairs: AtomicU64::new(0),
            stop_arming: AtomicBool::new(false),
            stop_churn: AtomicBool::new(false),
            probe: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Called first thing in a measured timer's callback.
    fn fire(&self, index: usize, deadline: Instant) {
        let now = Instant::now();
        let lateness = match now.checked_duration_since(deadline) {
            Some(late) => late.as_nanos().min(i64::MAX as u128) as i64,
            None => {
                -(deadline
                    .duration_since(now)
                    .as_nanos()
                    .min(i64::MAX as u128) as i64)
            }
        };
        self.lateness[index].store(lateness, Ordering::Relaxed);
        self.fired.fetch_add(1, Ordering::Relaxed);
    }

    /// Records timer `index`'s deadline before it is armed.
    fn arming(&self, index: usize, deadline: Instant) {
        let offset = deadline.duration_since(self.t0).as_nanos() as u64;
        self.deadline[index].store(offset, Ordering::Relaxed);
        self.armed.fetch_add(1, Ordering::Relaxed);
    }

    fn live(&self) -> u64 {
        self.armed
            .load(Ordering::Relaxed)
            .saturating_sub(self.fired.load(Ordering::Relaxed))
    }
}

/// Arms this thread's share of the measured timers (indices `k`, `k + n`,
/// ...), paced evenly over `window`, with `arm(index, deadline)`.
fn arm_share(
    record: &Record,
    k: usize,
    n: usize,
    window: Duration,
    mut arm: impl FnMut(usize, Instant),
) {
    let mine: Vec<usize> = (k..record.deadline.len()).step_by(n).collect();
    let mut rng = Rng::new(k as u64 + 101);
    let mut done = 0;
    while done < mine.len() && !record.stop_arming.load(Ordering::Relaxed) {
        let elapsed = record.t0.elapsed().as_secs_f64() / window.as_secs_f64();
        let due = ((elapsed * mine.len() as f64).ceil() as usize).clamp(1, mine.len());
        while done < due {
            let index = mine[done];
            let deadline = Instant::now() + rng.delay();
            record.arming(index, deadline);
            arm(index, deadline);
            done += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Peaks seen by the monitor thread every 20 ms.
#[derive(Default, Debug, Clone, Copy)]
struct Peaks {
    live: u64,
    stats_armed: u64,
    rss_kib: u64,
}

fn proc_status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Resets `VmHWM` to the current RSS (Linux >= 4.0); best effort.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn monitor(
    record: Arc<Record>,
    stats: impl Fn() -> Option<Stats> + Send + 'static,
    extra_live: u64,
    done: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Peaks> {
    std::thread::spawn(move || {
        let mut peaks = Peaks::default();
        while !done.load(Ordering::Relaxed) {
            peaks.live = peaks.live.max(record.live() + extra_live);
            if let Some(stats) = stats() {
                peaks.stats_armed = peaks.stats_armed.max(stats.armed);
            }
            if let Some(rss) = proc_status_kib("VmRSS:") {
                peaks.rss_kib = peaks.rss_kib.max(rss);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        peaks
    })
}

/// Waits until every armed measured timer fired, or `limit` passed.
fn drain(record: &Record, limit: Duration) -> Duration {
    let begin = Instant::now();
    while begin.elapsed() < limit
        && record.fired.load(Ordering::Relaxed) < record.armed.load(Ordering::Relaxed)
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    begin.elapsed()
}

fn arm_window(config: &Config) -> Duration {
    Duration::from_secs_f64((config.seconds - 3.0).max(1.0))
}

/// The arming threads of both tickwheel variants: each arms its share of the
/// measured timers from a thread that owns no shard.
fn spawn_tickwheel_arming(
    config: &Config,
    service: &TimerService,
    record: &Arc<Record>,
) -> Vec<std::thread::JoinHandle<()>> {
    let window = arm_window(config);
    (0..config.arm_threads)
        .map(|k| {
            let (service, record, n) = (service.clone(), record.clone(), config.arm_threads);
            std::thread::spawn(move || {
                arm_share(&record.clone(), k, n, window, |index, deadline| {
                    let record = record.clone();
                    service
                        .schedule(TimerSpec::at(deadline), move |_| {
                            record.fire(index, deadline)
                        })
                        .expect("schedule a measured timer")
                        .forget();
                })
            })
        })
        .collect()
}

/// The monitor of both tickwheel variants, which also samples `stats()`.
fn tickwheel_monitor(
    config: &Config,
    service: &TimerService,
    record: &Arc<Record>,
    done: &Arc<AtomicBool>,
) -> std::thread::JoinHandle<Peaks> {
    let service = service.clone();
    monitor(
        record.clone(),
        move || Some(service.stats()),
        config.churn_threads as u64,
        done.clone(),
    )
}

/// One batch of churn for the tickwheel variants: `batch` START + cancel
/// pairs, counted.
fn churn_batch(service: &TimerService, record: &Arc<Record>, rng: &mut Rng, batch: usize) {
    for _ in 0..batch {
        let counter = record.clone();
        let timer = service
            .start(rng.delay(), move |_| {
                counter.churn_fired.fetch_add(1, Ordering::Relaxed);
            })
            .expect("start a churn timer");
        timer.cancel();
    }
    record
        .churn_pairs
        .fetch_add(batch as u64, Ordering::Relaxed);
}

/// What a tickwheel run measured by the time its threads are done.
struct Finished {
    churn_end: Duration,
    drained: Duration,
    stats: Stats,
    peaks: Peaks,
}

impl Finished {
    fn new(churn_end: Duration, drained: Duration, stats: Stats, peaks: Peaks) -> Self {
        Finished {
            churn_end,
            drained,
            stats,
            peaks,
        }
    }
}

/// Shuts a tickwheel variant's service down and reports its run.
fn tickwheel_report(
    config: &Config,
    service: &TimerService,
    record: &Record,
    title: &str,
    run: Finished,
) -> String {
    let end = record.t0.elapsed();
    let hwm = proc_status_kib("VmHWM:");
    service.shutdown();
    report(
        config,
        title,
        record,
        run.churn_end,
        run.drained,
        end,
        run.peaks,
        hwm,
        Some(&run.stats),
    )
}

/// Waits for the churn's end, tells the arming and churn loops to stop,
/// and returns when that was (since `record.t0`).
///
/// Meanwhile this thread is the run's probe: a plain thread at the
/// process's priority that sleeps to a deadline 0.5 to 2 ms ahead, again
/// and again, and records how late it wakes (`Record::probe`). That is the
/// floor of any timer driven by a thread of its own (a driver thread at
/// normal priority) under the same load: it cannot fire before the
/// scheduler lets it run.
fn end_churn(config: &Config, record: &Record) -> Duration {
    let churn_end = record.t0 + Duration::from_secs_f64(config.seconds);
    let mut rng = Rng::new(0x5EED);
    let mut probe = Vec::with_capacity(16_384);
    loop {
        let now = Instant::now();
        if now >= churn_end {
            break;
        }
        let deadline = (now + Duration::from_micros(500 + rng.below(1_500))).min(churn_end);
        std::thread::sleep(deadline.saturating_duration_since(now));
        probe.push(Instant::now().duration_since(deadline).as_nanos() as i64);
    }
    record.stop_arming.store(true, Ordering::Relaxed);
    record.stop_churn.store(true, Ordering::Relaxed);
    *record.probe.lock().unwrap() = probe;
    record.t0.elapsed()
}

// ---------------------------------------------------------------------------

/// A `Driver::Threads` service (one shard per core) with drivers at
/// `priority`; `Err` is what the shape prints where real-time drivers are
/// refused.
fn threads_service(config: &Config, priority: DriverPriority) -> Result<TimerService, String> {
    let mut builder = TimerService::builder()
        .driver(Driver::Threads { pin: false })
        .lend_while_idle(config.lend)
        .driver_priority(priority);
    if let Some(tick) = config.tick {
        builder = builder.tick(tick);
    }
    let built = builder.build();
    match built {
        Ok(service) => Ok(service),
        Err(TimerError::DriverPriority) => Err(
            "tickwheel with real-time driver threads: not permitted here \
             (needs CAP_SYS_NICE or an RLIMIT_RTPRIO of at least 1)\n"
                .to_owned(),
        ),
        Err(other) => panic!("build the service: {other}"),
    }
}

/// What a title says of the service's driver priority.
fn priority_label(service: &TimerService) -> String {
    match service.driver_priority() {
        DriverPriority::RealTime(level) => format!(", drivers at SCHED_FIFO {level}"),
        _ => String::new(),
    }
}

fn run_tickwheel(config: &Config, priority: DriverPriority) -> String {
    reset_peak_rss();
    let service = match threads_service(config, priority) {
        Ok(service) => service,
        Err(refused) => return refused,
    };
    let record = Arc::new(Record::new(config.timers));
    let done = Arc::new(AtomicBool::new(false));
    let monitor = tickwheel_monitor(config, &service, &record, &done);
    let arming = spawn_tickwheel_arming(config, &service, &record);
    let churn: Vec<_> = (0..config.churn_threads)
        .map(|k| {
            let (service, record) = (service.clone(), record.clone());
            let batch = config.churn_batch;
            std::thread::spawn(move || {
                let mut rng = Rng::new(k as u64 + 1);
                while !record.stop_churn.load(Ordering::Relaxed) {
                    churn_batch(&service, &record, &mut rng, batch);
                }
            })
        })
        .collect();
    let churn_end = end_churn(config, &record);
    for thread in churn.into_iter().chain(arming) {
        thread.join().expect("a churn or arming thread panicked");
    }
    let drained = drain(&record, Duration::from_secs_f64(config.drain));
    let stats = service.stats();
    done.store(true, Ordering::Relaxed);
    let peaks = monitor.join().expect("monitor");
    let title = format!(
        "tickwheel: Driver::Threads, {} shards, {:?} ticks{}{}",
        service.shard_count(),
        service.tick(),
        if config.lend { "" } else { ", not lent" },
        priority_label(&service)
    );
    let run = Finished::new(churn_end, drained, stats, peaks);
    tickwheel_report(config, &service, &record, &title, run)
}

/// tickwheel inside a thread pool, shaped as tokio's side is: `--tokio-workers`
/// worker threads (one per core by default), each owning one shard of a
/// `Driver::Embedded` service. The `--churn-threads` churn loops are tasks
/// spread over the workers (task `k` on worker `k % workers`), as tokio's
/// churn tasks are spread over its workers; a worker runs a batch of
/// `--churn-batch` START + cancel pairs of each of its tasks in turn and
/// polls its shard after each batch, as a tokio worker runs a task until it
/// yields and then turns its timer wheel. The arming threads own no shard:
/// their timers go through a shard's remote queue (or straight in, while its
/// worker sleeps and lends it). A worker with no churn left sleeps with its
/// shard lent (`ShardGuard::idle`) until its next deadline or a waker call.
/// The pool's worker threads, set once they are spawned.
type Workers = Arc<std::sync::OnceLock<Vec<std::thread::Thread>>>;

/// A `Driver::Embedded` service of one shard per worker, whose waker
/// unparks the worker that owns the shard.
fn pool_service(workers: usize, threads: &Workers) -> TimerService {
    let threads = threads.clone();
    TimerService::builder()
        .shards(workers)
        .driver(Driver::Embedded)
        .waker(move |shard| {
            if let Some(thread) = threads.get().and_then(|t| t.get(shard)) {
                thread.unpark();
            }
        })
        .build()
        .expect("build the service")
}

fn run_tickwheel_pool(config: &Config) -> String {
    reset_peak_rss();
    let workers = config.tokio_workers;
    let threads: Workers = Arc::default();
    let service = pool_service(workers, &threads);
    let record = Arc::new(Record::new(config.timers));
    let done = Arc::new(AtomicBool::new(false));
    let monitor = tickwheel_monitor(config, &service, &record, &done);
    let pool: Vec<_> = (0..workers)
        .map(|w| {
            let (service, record, done) = (service.clone(), record.clone(), done.clone());
            let tasks: Vec<u64> = (0..config.churn_threads)
                .filter(|k| k % workers == w)
                .map(|k| k as u64 + 1)
                .collect();
            let batch = config.churn_batch;
            std::thread::spawn(move || {
                let mut guard = service.claim_shard(w).expect("claim a worker's shard");
                let mut rngs: Vec<Rng> = tasks.into_iter().map(Rng::new).collect();
                while !done.load(Ordering::Relaxed) {
                    if record.stop_churn.load(Ordering::Relaxed) || rngs.is_empty() {
                        guard.poll().expect("poll the worker's shard");
                        guard.idle(|sleep| {
                            let limit = Duration::from_millis(10);
                            std::thread::park_timeout(sleep.map_or(limit, |s| s.min(limit)))
                        });
                        continue;
                    }
                    for rng in &mut rngs {
                        churn_batch(&service, &record, rng, batch);
                        guard.poll().expect("poll the worker's shard");
                    }
                }
            })
        })
        .collect();
    threads
        .set(pool.iter().map(|t| t.thread().clone()).collect())
        .expect("set once");
    for thread in pool.iter() {
        // A waker call before `set` found no thread: wake each worker once.
        thread.thread().unpark();
    }
    let arming = spawn_tickwheel_arming(config, &service, &record);
    let churn_end = end_churn(config, &record);
    for thread in arming {
        thread.join().expect("an arming thread panicked");
    }
    let drained = drain(&record, Duration::from_secs_f64(config.drain));
    let stats = service.stats();
    done.store(true, Ordering::Relaxed);
    for thread in pool {
        thread.thread().unpark();
        thread.join().expect("a worker panicked");
    }
    let peaks = monitor.join().expect("monitor");
    let title = format!(
        "tickwheel in a pool: Driver::Embedded, {workers} workers owning a shard each, churn as tasks"
    );
    let run = Finished::new(churn_end, drained, stats, peaks);
    tickwheel_report(config, &service, &record, &title, run)
}

/// One batch of the futures' churn: `batch` sleeps made, polled once (which
/// registers them) and dropped (which stops them), tickwheel's on
/// `sleeps`, else tokio's; counted. A plain function, so that the task's
/// `Context` (not `Send`) is never held across its await.
fn sleep_churn_batch(
    sleeps: Option<&TimerService>,
    record: &Record,
    rng: &mut Rng,
    batch: usize,
    waker: &Waker,
) {
    let mut cx = Context::from_waker(waker);
    for _ in 0..batch {
        let ready = match sleeps {
            Some(service) => pin!(service.sleep(rng.delay())).poll(&mut cx).is_ready(),
            None => pin!(tokio::time::sleep(rng.delay()))
                .poll(&mut cx)
                .is_ready(),
        };
        if ready {
            record.churn_fired.fetch_add(1, Ordering::Relaxed);
        }
    }
    record
        .churn_pairs
        .fetch_add(batch as u64, Ordering::Relaxed);
}

/// Sleeps are registered by a poll; the churn never needs waking.
struct NoopWake;

impl Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

/// Where `run_tokio` runs its churn loops.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ChurnOn {
    /// Tasks on the runtime's workers, yielding after each batch.
    Tasks,
    /// Plain threads inside the runtime's context (`Handle::enter`), flat
    /// out, as `run_tickwheel`'s churn threads: the workers that fire the
    /// timers then wait for a CPU behind them, as tickwheel's driver
    /// threads do.
    Threads,
}

/// tokio's runtime with its own timers (`sleeps` is `None`), or with
/// tickwheel's `Sleep` futures on `sleeps` (driver threads fire them; the
/// workers own no shard, so every sleep is armed from a non-owner): the same
/// executor, only the timer differs; the churn runs where `churn_on` says.
fn run_tokio(config: &Config, sleeps: Option<TimerService>, churn_on: ChurnOn) -> String {
    reset_peak_rss();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.tokio_workers)
        .enable_time()
        .build()
        .expect("build the runtime");
    let record = Arc::new(Record::new(config.timers));
    let done = Arc::new(AtomicBool::new(false));
    let monitor = monitor(
        record.clone(),
        || None,
        config.churn_threads as u64,
        done.clone(),
    );
    let window = arm_window(config);
    let arming: Vec<_> = (0..config.arm_threads)
        .map(|k| {
            let (handle, record, n) =
                (runtime.handle().clone(), record.clone(), config.arm_threads);
            let sleeps = sleeps.clone();
            std::thread::spawn(move || {
                arm_share(&record.clone(), k, n, window, |index, deadline| {
                    let record = record.clone();
                    let sleeps = sleeps.clone();
                    handle.spawn(async move {
                        match sleeps {
                            Some(service) => service.sleep_until(deadline).await,
                            None => tokio::time::sleep_until(deadline.into()).await,
                        }
                        record.fire(index, deadline);
                    });
                })
            })
        })
        .collect();
    // The churn loops run either as plain threads or as tasks, never both.
    let (on_threads, as_tasks) = match churn_on {
        ChurnOn::Threads => (config.churn_threads, 0),
        ChurnOn::Tasks => (0, config.churn_threads),
    };
    let churn_threads: Vec<_> = (0..on_threads)
        .map(|k| {
            let (handle, record, batch) =
                (runtime.handle().clone(), record.clone(), config.churn_batch);
            let sleeps = sleeps.clone();
            std::thread::spawn(move || {
                let _inside = handle.enter();
                let mut rng = Rng::new(k as u64 + 1);
                let waker = Waker::from(Arc::new(NoopWake));
                while !record.stop_churn.load(Ordering::Relaxed) {
                    sleep_churn_batch(sleeps.as_ref(), &record, &mut rng, batch, &waker);
                }
            })
        })
        .collect();
    let churn: Vec<_> = (0..as_tasks)
        .map(|k| {
            let record = record.clone();
            let batch = config.churn_batch;
            let sleeps = sleeps.clone();
            runtime.spawn(tokio::task::unconstrained(async move {
                let mut rng = Rng::new(k as u64 + 1);
                let waker = Waker::from(Arc::new(NoopWake));
                while !record.stop_churn.load(Ordering::Relaxed) {
                    sleep_churn_batch(sleeps.as_ref(), &record, &mut rng, batch, &waker);
                    tokio::task::yield_now().await;
                }
            }))
        })
        .collect();
    let churn_end = end_churn(config, &record);
    for thread in arming.into_iter().chain(churn_threads) {
        thread.join().expect("an arming or churn thread panicked");
    }
    // Churn tasks see the flag at their next batch; bounded wait.
    let waited = runtime.block_on(async move {
        tokio::time::timeout(Duration::from_secs(5), async move {
            for task in churn {
                let _ = task.await;
            }
        })
        .await
    });
    if waited.is_err() {
        eprintln!("churn_lateness: tokio churn tasks did not stop within 5 s");
    }
    let drained = drain(&record, Duration::from_secs_f64(config.drain));
    done.store(true, Ordering::Relaxed);
    let peaks = monitor.join().expect("monitor");
    let end = record.t0.elapsed();
    let hwm = proc_status_kib("VmHWM:");
    runtime.shutdown_timeout(Duration::from_secs(2));
    let stats = sleeps.as_ref().map(TimerService::stats);
    let title = match &sleeps {
        None => format!(
            "tokio: multi-thread runtime, {} workers{}",
            config.tokio_workers,
            match churn_on {
                ChurnOn::Tasks => "",
                ChurnOn::Threads => ", churn on plain threads",
            }
        ),
        Some(service) => format!(
            "tickwheel Sleep futures on tokio's multi-thread runtime, {} workers \
             (service: Driver::Threads, {} shards, {:?} ticks{})",
            config.tokio_workers,
            service.shard_count(),
            service.tick(),
            priority_label(service)
        ),
    };
    report(
        config,
        &title,
        &record,
        churn_end,
        drained,
        end,
        peaks,
        hwm,
        stats.as_ref(),
    )
}

// ---------------------------------------------------------------------------
// tickwheel's futures on an executor whose workers own the shards.

type BoxFuture = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// A task of `SleepPool`: its future, and the worker whose queue it joins
/// when woken.
struct PoolTask {
    future: std::sync::Mutex<Option<BoxFuture>>,
    home: usize,
    queued: AtomicBool,
    pool: Arc<PoolQueues>,
}

/// The workers' run queues, and their threads (to unpark).
struct PoolQueues {
    queues: Vec<std::sync::Mutex<std::collections::VecDeque<Arc<PoolTask>>>>,
    threads: Workers,
}

impl PoolQueues {
    fn push(&self, task: Arc<PoolTask>) {
        let home = task.home;
        self.queues[home]
            .lock()
            .expect("a run queue")
            .push_back(task);
        if let Some(thread) = self.threads.get().and_then(|t| t.get(home)) {
            thread.unpark();
        }
    }

    fn spawn(self: &Arc<Self>, home: usize, future: BoxFuture) {
        let task = Arc::new(PoolTask {
            future: std::sync::Mutex::new(Some(future)),
            home,
            queued: AtomicBool::new(true),
            pool: self.clone(),
        });
        self.push(task);
    }
}

impl Wake for PoolTask {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if !self.queued.swap(true, Ordering::AcqRel) {
            self.pool.push(self.clone());
        }
    }
}

/// Hands the worker back to its queue once: what `yield_now` is to tokio.
struct YieldNow(bool);

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> std::task::Poll<()> {
        if self.0 {
            return std::task::Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

/// tickwheel's `Sleep` futures on a small executor shaped as tokio's
/// multi-thread runtime, but whose `--tokio-workers` workers each own a
/// shard of a `Driver::Embedded` service and poll it between tasks, as a
/// tokio worker turns its timer wheel: the executor integration the futures
/// are built for. Tasks as tokio's side has them: a measured sleep is a task
/// (spawned by the arming threads on worker `index % workers`) that awaits
/// `sleep_until(deadline)`, so it registers on its worker's own shard;
/// `--churn-threads` churn tasks make, poll once and drop `--churn-batch`
/// sleeps, then yield. A worker with nothing to run sleeps with its shard
/// lent (`ShardGuard::idle`) until its next deadline, a task's wake or the
/// service's waker call.
fn run_sleep_pool(config: &Config) -> String {
    reset_peak_rss();
    let workers = config.tokio_workers;
    let pool = Arc::new(PoolQueues {
        queues: (0..workers).map(|_| Default::default()).collect(),
        threads: Workers::default(),
    });
    let service = pool_service(workers, &pool.threads);
    let record = Arc::new(Record::new(config.timers));
    let done = Arc::new(AtomicBool::new(false));
    let monitor = tickwheel_monitor(config, &service, &record, &done);
    let threads: Vec<_> = (0..workers)
        .map(|w| {
            let (service, pool, done) = (service.clone(), pool.clone(), done.clone());
            std::thread::spawn(move || {
                let mut guard = service.claim_shard(w).expect("claim a worker's shard");
                while !done.load(Ordering::Relaxed) {
                    let task = pool.queues[w].lock().expect("a run queue").pop_front();
                    let Some(task) = task else {
                        guard.poll().expect("poll the worker's shard");
                        if pool.queues[w].lock().expect("a run queue").is_empty() {
                            guard.idle(|sleep| {
                                let limit = Duration::from_millis(10);
                                std::thread::park_timeout(sleep.map_or(limit, |s| s.min(limit)))
                            });
                        }
                        continue;
                    };
                    task.queued.store(false, Ordering::Release);
                    let waker = Waker::from(task.clone());
                    let mut cx = Context::from_waker(&waker);
                    let mut slot = task.future.lock().expect("a task");
                    if let Some(future) = slot.as_mut() {
                        if future.as_mut().poll(&mut cx).is_ready() {
                            *slot = None;
                        }
                    }
                    drop(slot);
                    guard.poll().expect("poll the worker's shard");
                }
            })
        })
        .collect();
    pool.threads
        .set(threads.iter().map(|t| t.thread().clone()).collect())
        .expect("set once");
    for thread in &threads {
        // A push before `set` unparked nobody: wake each worker once.
        thread.thread().unpark();
    }
    for k in 0..config.churn_threads {
        let (service, record) = (service.clone(), record.clone());
        let batch = config.churn_batch;
        pool.spawn(
            k % workers,
            Box::pin(async move {
                let mut rng = Rng::new(k as u64 + 1);
                let waker = Waker::from(Arc::new(NoopWake));
                while !record.stop_churn.load(Ordering::Relaxed) {
                    sleep_churn_batch(Some(&service), &record, &mut rng, batch, &waker);
                    YieldNow(false).await;
                }
            }),
        );
    }
    let window = arm_window(config);
    let arming: Vec<_> = (0..config.arm_threads)
        .map(|k| {
            let (service, record, pool, n) = (
                service.clone(),
                record.clone(),
                pool.clone(),
                config.arm_threads,
            );
            std::thread::spawn(move || {
                arm_share(&record.clone(), k, n, window, |index, deadline| {
                    let (service, record) = (service.clone(), record.clone());
                    pool.spawn(
                        index % workers,
                        Box::pin(async move {
                            service.sleep_until(deadline).await;
                            record.fire(index, deadline);
                        }),
                    );
                })
            })
        })
        .collect();
    let churn_end = end_churn(config, &record);
    for thread in arming {
        thread.join().expect("an arming thread panicked");
    }
    let drained = drain(&record, Duration::from_secs_f64(config.drain));
    let stats = service.stats();
    done.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.thread().unpark();
        thread.join().expect("a worker panicked");
    }
    // Tasks still queued hold sleeps of the service: gone with the pool.
    for queue in &pool.queues {
        queue.lock().expect("a run queue").clear();
    }
    let peaks = monitor.join().expect("monitor");
    let title = format!(
        "tickwheel Sleep futures on a pool of {workers} workers owning a shard each (Driver::Embedded)"
    );
    let run = Finished::new(churn_end, drained, stats, peaks);
    tickwheel_report(config, &service, &record, &title, run)
}

// ---------------------------------------------------------------------------

fn ms(ns: i64) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

fn ms_d(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

/// Nearest-rank percentile of sorted samples.
fn pct(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((sorted.len() as f64) * p / 100.0).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[allow(clippy::too_many_arguments)]
fn report(
    config: &Config,
    title: &str,
    record: &Record,
    churn_end: Duration,
    drained: Duration,
    end: Duration,
    peaks: Peaks,
    hwm_kib: Option<u64>,
    stats: Option<&Stats>,
) -> String {
    let churn_end_ns = churn_end.as_nanos() as i64;
    let end_ns = end.as_nanos() as i64;
    let mut late = Vec::new();
    let (mut armed, mut by_churn_end, mut unfired, mut early) = (0u64, 0u64, 0u64, 0u64);
    // Fired after the churn ended although due before its end, and how long
    // before its end the earliest of them was due: a churn that held timers
    // back shows here, while a timer due in its last moments may fire just
    // after it without having been held. (Under load the arming threads
    // fall behind their pacing, so some deadlines lie after the churn:
    // those firing in the drain are on time.)
    let mut due_in_churn_fired_after = 0u64;
    let mut due_in_churn_longest_before_ns = 0i64;
    // Unfired timers whose deadline had not come when the run ended.
    let mut not_due = 0u64;
    let mut unfired_min_late = i64::MAX;
    let mut unfired_max_late = 0i64;
    let thresholds_ms = [1i64, 10, 100, 1000];
    let mut within = [0u64; 4];
    // The five latest fired timers: (lateness, deadline), ns.
    let mut worst: Vec<(i64, u64)> = Vec::new();
    for (deadline, lateness) in record.deadline.iter().zip(&record.lateness) {
        let deadline = deadline.load(Ordering::Relaxed);
        if deadline == UNARMED {
            continue;
        }
        armed += 1;
        let lateness = lateness.load(Ordering::Relaxed);
        if lateness == UNFIRED {
            unfired += 1;
            let lower_bound = end_ns - deadline as i64;
            if lower_bound < 0 {
                not_due += 1;
            }
            unfired_min_late = unfired_min_late.min(lower_bound);
            unfired_max_late = unfired_max_late.max(lower_bound);
            continue;
        }
        if lateness < 0 {
            early += 1;
        }
        if deadline as i64 + lateness <= churn_end_ns {
            by_churn_end += 1;
        } else if deadline as i64 <= churn_end_ns {
            due_in_churn_fired_after += 1;
            due_in_churn_longest_before_ns =
                due_in_churn_longest_before_ns.max(churn_end_ns - deadline as i64);
        }
        for (count, limit) in within.iter_mut().zip(thresholds_ms) {
            if lateness <= limit * 1_000_000 {
                *count += 1;
            }
        }
        late.push(lateness);
        worst.push((lateness, deadline));
        if worst.len() > 64 {
            worst.sort_unstable_by(|a, b| b.cmp(a));
            worst.truncate(5);
        }
    }
    late.sort_unstable();
    worst.sort_unstable_by(|a, b| b.cmp(a));
    worst.truncate(5);
    let fired = late.len() as u64;
    let pairs = record.churn_pairs.load(Ordering::Relaxed);
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "\n== {title} ==");
    let _ = writeln!(
        w,
        "measured timers armed: {armed} of {} by {} arming threads (paced over {:.1} s, due 1-2000 ms after arming)",
        config.timers,
        config.arm_threads,
        arm_window(config).as_secs_f64()
    );
    let _ = writeln!(
        w,
        "churn: {} threads/tasks, {:.1} M start+stop pairs in {:.2} s ({:.2} M pairs/s); churn timers that fired: {}",
        config.churn_threads,
        pairs as f64 / 1e6,
        churn_end.as_secs_f64(),
        pairs as f64 / churn_end.as_secs_f64() / 1e6,
        record.churn_fired.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        w,
        "fired while the churn ran (by {:.2} s): {by_churn_end} of {armed}; fired in the {:.2} s drain after it: {} ({due_in_churn_fired_after} of them due before the churn ended, at most {} ms before); never fired: {unfired}",
        churn_end.as_secs_f64(),
        drained.as_secs_f64(),
        fired - by_churn_end,
        ms(due_in_churn_longest_before_ns)
    );
    let _ = writeln!(
        w,
        "fired within deadline + 1 / 10 / 100 / 1000 ms: {} / {} / {} / {}; early (before the deadline): {early}",
        within[0], within[1], within[2], within[3]
    );
    let _ = writeln!(
        w,
        "lateness on the real clock (callback start - intended deadline), ms: p50 {} p99 {} p99.9 {} max {} (over {fired} fired)",
        ms(pct(&late, 50.0)),
        ms(pct(&late, 99.0)),
        ms(pct(&late, 99.9)),
        ms(late.last().copied().unwrap_or(0)),
    );
    let _ = writeln!(
        w,
        "the latest fired timers (lateness ms @ deadline s into the run): {}",
        worst
            .iter()
            .map(|&(lateness, deadline)| format!("{} @ {:.3}", ms(lateness), deadline as f64 / 1e9))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if unfired > 0 {
        let _ = writeln!(
            w,
            "unfired timers were late by at least {} to {} ms when the run ended \
             ({not_due} of the {unfired} were not due yet then)",
            ms(unfired_min_late),
            ms(unfired_max_late)
        );
    }
    let mut probe = record.probe.lock().unwrap().clone();
    probe.sort_unstable();
    let _ = writeln!(
        w,
        "probe, a plain thread sleeping to deadlines during the churn (the floor of a timer \
         thread at normal priority), wake lateness ms: p50 {} p99 {} p99.9 {} max {} (over {} wakes)",
        ms(pct(&probe, 50.0)),
        ms(pct(&probe, 99.0)),
        ms(pct(&probe, 99.9)),
        ms(probe.last().copied().unwrap_or(0)),
        probe.len()
    );
    let _ = writeln!(
        w,
        "peak live timers (measured armed - fired, + churn in flight): {}",
        peaks.live
    );
    if let Some(stats) = stats {
        let arena = stats.slots * stats.slot_bytes;
        let _ = writeln!(
            w,
            "arena: {} slots x {} B = {:.1} MB = {:.2}x the peak of live timers; stats().armed peak {}",
            stats.slots,
            stats.slot_bytes,
            arena as f64 / 1e6,
            stats.slots as f64 / peaks.live.max(1) as f64,
            peaks.stats_armed
        );
        let ratio = |ours: Duration, external: i64| {
            if external <= 0 {
                "-".to_owned()
            } else {
                format!("{:.2}x", ours.as_nanos() as f64 / external as f64)
            }
        };
        let _ = writeln!(
            w,
            "stats(): fired {} (of which measured {fired}), lateness p50 {} p99 {} max {} ms; \
             against the external figures: {} / {} / {}",
            stats.fired,
            ms_d(stats.lateness_p50),
            ms_d(stats.lateness_p99),
            ms_d(stats.lateness_max),
            ratio(stats.lateness_p50, pct(&late, 50.0)),
            ratio(stats.lateness_p99, pct(&late, 99.0)),
            ratio(stats.lateness_max, late.last().copied().unwrap_or(0)),
        );
    }
    let _ = writeln!(
        w,
        "RSS: peak {} MB (VmHWM), highest sampled VmRSS {:.1} MB",
        hwm_kib.map_or("?".to_owned(), |k| format!("{:.1}", k as f64 / 1024.0)),
        peaks.rss_kib as f64 / 1024.0
    );
    let _ = writeln!(
        w,
        "row: | {title} | {by_churn_end} / {armed} | {unfired} | {} | {} | {} | {} | {} / {} | {} | {:.1} |",
        ms(pct(&late, 50.0)),
        ms(pct(&late, 99.0)),
        ms(pct(&late, 99.9)),
        ms(late.last().copied().unwrap_or(0)),
        ms(pct(&probe, 99.0)),
        ms(probe.last().copied().unwrap_or(0)),
        stats.map_or("-".to_owned(), |s| s.slots.to_string()),
        hwm_kib.unwrap_or(0) as f64 / 1024.0,
    );
    out
}

fn main() {
    let config = parse_args();
    println!(
        "churn_lateness: {} timers, {} s of churn, {} arming + {} churn threads, up to {} s drain; load {}",
        config.timers,
        config.seconds,
        config.arm_threads,
        config.churn_threads,
        config.drain,
        std::fs::read_to_string("/proc/loadavg")
            .map(|l| l.trim().to_owned())
            .unwrap_or_else(|_| "?".to_owned())
    );
    for imp in config.impls.clone() {
        let text = match imp {
            Impl::Tickwheel => run_tickwheel(&config, DriverPriority::Normal),
            Impl::TickwheelRealtime => run_tickwheel(&config, DriverPriority::RealTime(1)),
            Impl::TickwheelPool => run_tickwheel_pool(&config),
            Impl::Tokio => run_tokio(&config, None, ChurnOn::Tasks),
            Impl::TokioThreads => run_tokio(&config, None, ChurnOn::Threads),
            Impl::TickwheelSleepPool => run_sleep_pool(&config),
            Impl::TickwheelSleep => threads_service(&config, DriverPriority::Normal).map_or_else(
                |refused| refused,
                |service| run_tokio(&config, Some(service), ChurnOn::Tasks),
            ),
            Impl::TickwheelSleepRealtime => threads_service(&config, DriverPriority::RealTime(1))
                .map_or_else(
                    |refused| refused,
                    |service| run_tokio(&config, Some(service), ChurnOn::Tasks),
                ),
        };
        print!("{text}");
    }
}
