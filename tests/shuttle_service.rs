//! Randomized schedules of the whole timer service under shuttle
//! (docs/VERIFYING.md layer 3b; CONTRACT 19).
//!
//! loom proves small protocols exhaustively (2-3 threads, a handful of
//! operations). These scenarios are far bigger: 5-7 threads (operators,
//! driver threads or polling owners, a thread that moves the clock, the
//! test's main thread), a few hundred service operations per schedule, both
//! drivers with real park/unpark, and shutdown. shuttle runs each scenario
//! many times, switching threads at every atomic access, spawn, join, park
//! and yield, with its random scheduler and with its PCT scheduler (which
//! favours the few-preemption schedules where most concurrency bugs live).
//! At the end of every schedule the invariants of tests/service_stress.rs
//! are checked: exactly once per arming, never early, STOP outcomes
//! consistent (a `Cancelled` stop is never followed by that arming's
//! callback; two stops never both `Cancelled`), every arming fired,
//! cancelled, moved or still armed, and every slot reclaimed, also while the
//! owner sleeps (docs/CONTRACT.md 13).
//!
//! The service uses shuttle's primitives through `src/sync.rs`, so this file
//! only builds with `--cfg shuttle`:
//!
//! ```sh
//! RUSTFLAGS="--cfg shuttle -C debug-assertions" CARGO_TARGET_DIR=target/shuttle \
//!   cargo test --release --test shuttle_service
//! ```
//!
//! * `TICKWHEEL_SHUTTLE_ITERS=<n>`: schedules per scenario and scheduler
//!   (default 1000; each test runs `n` random and `n` PCT schedules).
//! * `TICKWHEEL_SHUTTLE_SEED=<n>`: seed of both schedulers (default: from
//!   the wall clock; printed). shuttle's own `SHUTTLE_RANDOM_SEED` overrides it.
//!
//! # Replaying a failure
//!
//! A failing schedule is written to a file under the target's tmp dir
//! (`target/shuttle/tmp/schedule*.txt`; the path is printed). Replay it,
//! deterministically, with the same test:
//!
//! ```sh
//! TICKWHEEL_SHUTTLE_REPLAY=target/shuttle/tmp/schedule000.txt \
//!   RUSTFLAGS="--cfg shuttle -C debug-assertions" CARGO_TARGET_DIR=target/shuttle \
//!   cargo test --release --test shuttle_service -- --exact <test name>
//! ```
//!
//! The random scheduler also prints the failing schedule's seed; with
//! `SHUTTLE_RANDOM_SEED=<seed> TICKWHEEL_SHUTTLE_ITERS=1` the same test
//! reruns that schedule first. Everything a scenario decides at random comes
//! from shuttle's data source (`shuttle::rand`), so a schedule fixes the
//! operations too.
//!
//! # Time
//!
//! shuttle has no time. The scenarios use a `ManualClock` moved by a thread
//! of their own, except the sleeping-owner scenario, which uses the
//! monotonic clock with one-hour ticks and delays of whole hours, so that no
//! deadline is reached while a schedule runs. A driver's `park_timeout`
//! elapses at once when short (the manual clock's 1 ms re-read) and never
//! when long (a sleep towards a deadline hours away): see `src/sync.rs`.
#![cfg(shuttle)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use shuttle::rand::{thread_rng, RngCore};
use shuttle::scheduler::{PctScheduler, RandomScheduler, ReplayScheduler};
use shuttle::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use shuttle::sync::{Condvar, Mutex};
use shuttle::thread;
use shuttle::{Config, FailurePersistence, MaxSteps, Runner};
use tickwheel::{
    Clock, Driver, ManualClock, Restart, Stop, StopSync, Timer, TimerError, TimerService, TimerSpec,
};

const TICK: Duration = Duration::from_millis(1);
/// The sleeping-owner scenario's tick: no deadline comes within a schedule.
const HOUR: Duration = Duration::from_secs(3600);
/// Operations per operator thread per schedule.
const OPS: usize = 150;
/// Timers each operator juggles.
const TIMERS_PER_OPERATOR: usize = 8;
/// PCT depth: bugs that need up to this many forced preemptions.
const PCT_DEPTH: usize = 3;
/// How long the main thread keeps yielding for the owners to reclaim every
/// slot before it calls it a failure. Each yield lets any other thread run;
/// an owner that was woken needs a few hundred steps, one that was not never
/// finishes.
const RECLAIM_YIELDS: usize = 20_000;

// ---------------------------------------------------------------------------
// Running a scenario under both schedulers, or replaying one schedule.

fn iterations() -> usize {
    std::env::var("TICKWHEEL_SHUTTLE_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000)
}

fn seed() -> u64 {
    std::env::var("TICKWHEEL_SHUTTLE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        })
}

fn config() -> Config {
    let mut config = Config::new();
    // Schedules run to a few hundred thousand steps; printed, one would fill
    // the terminal.
    config.failure_persistence =
        FailurePersistence::File(Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR"))));
    config.max_steps = MaxSteps::FailAfter(5_000_000);
    // Shuttle runs each model thread on a coroutine stack of 32 KiB by
    // default; `Builder::build` makes each shard (its wheel's bucket heads
    // and padded counter lines, several KiB) on the calling thread's stack
    // before it moves into the service, which can overflow that (SIGSEGV in
    // `Shard::new`). Real threads have megabytes.
    config.stack_size = 256 * 1024;
    config
}

fn explore(name: &str, scenario: fn()) {
    if let Ok(path) = std::env::var("TICKWHEEL_SHUTTLE_REPLAY") {
        eprintln!("{name}: replaying {path}");
        let mut scheduler = ReplayScheduler::new_from_file(&path).expect("schedule file");
        // The recorded schedule stops where the failure was found; the
        // threads still unwinding after it need steps of their own.
        scheduler.set_allow_incomplete();
        Runner::new(scheduler, config()).run(scenario);
        return;
    }
    let iterations = iterations();
    let seed = seed();
    eprintln!(
        "{name}: {iterations} random + {iterations} PCT schedules, TICKWHEEL_SHUTTLE_SEED={seed}"
    );
    let started = std::time::Instant::now();
    Runner::new(RandomScheduler::new_from_seed(seed, iterations), config()).run(scenario);
    let random = started.elapsed();
    Runner::new(
        PctScheduler::new_from_seed(seed, PCT_DEPTH, iterations),
        config(),
    )
    .run(scenario);
    eprintln!(
        "{name}: passed (random {:.1?}, PCT {:.1?})",
        random,
        started.elapsed() - random
    );
}

// ---------------------------------------------------------------------------
// Parking an embedded owner.

/// What an embedded owner parks on, and what its waker signals. Not
/// shuttle's `park`, which may wake spuriously at any scheduling point and so
/// would hide a lost wakeup (see `src/sync.rs`): only `unpark` ends this wait.
#[derive(Default)]
struct Parker {
    token: Mutex<bool>,
    signal: Condvar,
}

impl Parker {
    fn park(&self) {
        let mut token = self.token.lock().unwrap();
        while !*token {
            token = self.signal.wait(token).unwrap();
        }
        *token = false;
    }

    fn unpark(&self) {
        *self.token.lock().unwrap() = true;
        self.signal.notify_one();
    }
}

fn parkers() -> Arc<Vec<Parker>> {
    Arc::new((0..SHARDS).map(|_| Parker::default()).collect())
}

// ---------------------------------------------------------------------------
// Randomness (from shuttle's data source: replays with the schedule).

#[path = "common/rng.rs"]
mod rng;

use rng::Rng;

impl Rng {
    /// The tests' splitmix64 (`tests/common/rng.rs`) seeded from shuttle,
    /// one per thread.
    fn from_shuttle() -> Self {
        Rng(thread_rng().next_u64())
    }
}

// ---------------------------------------------------------------------------
// One operator thread and what it learns about its own timers (the same
// bookkeeping as tests/service_stress.rs, with clock readings instead of
// `Instant`s).

/// Where an operator reads the time, and which delays it picks.
#[derive(Clone)]
enum Time {
    /// Manual clock, 1 ms ticks: delays of 0-3 ms fire during the schedule,
    /// one in ten is an hour and ends only by STOP or RESTART.
    Manual(ManualClock),
    /// Monotonic clock, one-hour ticks, delays of 1-40 whole hours: nothing
    /// fires, and every deadline comparison is the same in every run.
    Hours,
}

impl Time {
    fn now(&self) -> u64 {
        match self {
            Time::Manual(clock) => clock.elapsed().as_nanos() as u64,
            Time::Hours => 0,
        }
    }

    fn delay(&self, rng: &mut Rng) -> Duration {
        match self {
            Time::Manual(_) => match rng.below(10) {
                0 => HOUR,
                _ => Duration::from_micros(rng.below(3_000)),
            },
            Time::Hours => HOUR * (1 + rng.below(40) as u32),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Open,
    Fired,
    NotFired,
    Dropped,
}

#[derive(Debug)]
struct Arming {
    at: u64,
    delay: u64,
    fate: Fate,
}

struct Tracked {
    timer: Option<Timer>,
    armings: Vec<Arming>,
    /// Clock readings at which the callback ran.
    fires: Arc<Mutex<Vec<u64>>>,
}

#[derive(Default)]
struct Totals {
    started: AtomicU64,
    armings: AtomicU64,
    cancelled: AtomicU64,
    moved: AtomicU64,
    callbacks: Arc<AtomicU64>,
}

struct Operator {
    service: TimerService,
    time: Time,
    rng: Rng,
    live: Vec<Option<Tracked>>,
    retired: Vec<Tracked>,
    totals: Arc<Totals>,
}

impl Operator {
    fn new(service: TimerService, time: Time, rng: Rng, totals: Arc<Totals>) -> Self {
        Operator {
            service,
            time,
            rng,
            live: (0..TIMERS_PER_OPERATOR).map(|_| None).collect(),
            retired: Vec::new(),
            totals,
        }
    }

    fn step(&mut self) {
        let i = self.rng.below(self.live.len() as u64) as usize;
        let choice = self.rng.below(100);
        let delay = self.time.delay(&mut self.rng);
        let Some(tracked) = self.live[i].as_mut() else {
            self.live[i] = Some(self.start(delay));
            return;
        };
        let last = tracked.armings.last_mut().expect("at least one arming");
        let timer = tracked.timer.as_ref().expect("live timers have handles");
        match choice {
            0..=29 => stop_and_record(timer, last, &self.totals),
            30..=64 => {
                let at = self.time.now();
                let outcome = timer.restart(delay).expect("restart while running");
                match (outcome, last.fate) {
                    (Restart::Moved, Fate::Open) => {
                        last.fate = Fate::NotFired;
                        self.totals.moved.fetch_add(1, SeqCst);
                    }
                    (Restart::Rearmed, Fate::Open | Fate::Fired) => last.fate = Fate::Fired,
                    (Restart::Rearmed, Fate::NotFired) => {}
                    (outcome, fate) => panic!(
                        "restart returned {outcome:?} for an arming known as {fate:?} ({:?})",
                        timer.id()
                    ),
                }
                tracked.armings.push(Arming {
                    at,
                    delay: delay.as_nanos() as u64,
                    fate: Fate::Open,
                });
                self.totals.armings.fetch_add(1, SeqCst);
            }
            65..=72 => {
                if last.fate != Fate::Open {
                    assert!(!timer.is_armed(), "{:?} armed after it ended", timer.id());
                }
            }
            73..=86 => {
                stop_and_record(timer, last, &self.totals);
                self.retire(i);
            }
            _ => {
                // Plain drop, racing the expiry: fired or not, once at most.
                if last.fate == Fate::Open {
                    last.fate = Fate::Dropped;
                }
                self.retire(i);
            }
        }
    }

    fn start(&mut self, delay: Duration) -> Tracked {
        let fires = Arc::new(Mutex::new(Vec::new()));
        let log = fires.clone();
        let callbacks = self.totals.callbacks.clone();
        let mut spec = TimerSpec::after(delay);
        if self.rng.below(2) == 0 {
            spec = spec.on_shard(self.rng.below(self.service.shard_count() as u64) as usize);
        }
        let time = self.time.clone();
        let at = self.time.now();
        let timer = self
            .service
            .schedule(spec, move |_| {
                log.lock().unwrap().push(time.now());
                callbacks.fetch_add(1, SeqCst);
            })
            .expect("start while running");
        self.totals.started.fetch_add(1, SeqCst);
        self.totals.armings.fetch_add(1, SeqCst);
        Tracked {
            timer: Some(timer),
            armings: vec![Arming {
                at,
                delay: delay.as_nanos() as u64,
                fate: Fate::Open,
            }],
            fires,
        }
    }

    fn retire(&mut self, i: usize) {
        let mut tracked = self.live[i].take().expect("retiring a live timer");
        drop(tracked.timer.take());
        self.retired.push(tracked);
    }

    /// End of the operations: STOP_SYNC every open arming, drop every
    /// handle. Returns how many were still armed.
    fn finish(&mut self) -> u64 {
        let mut still_armed = 0;
        for i in 0..self.live.len() {
            let Some(tracked) = self.live[i].as_mut() else {
                continue;
            };
            let last = tracked.armings.last_mut().unwrap();
            let outcome = tracked.timer.as_ref().unwrap().stop_sync();
            match (outcome, last.fate) {
                (StopSync::Cancelled, Fate::Open) => {
                    last.fate = Fate::NotFired;
                    still_armed += 1;
                }
                (StopSync::Fired, Fate::Open | Fate::Fired) => last.fate = Fate::Fired,
                (StopSync::Inactive, Fate::NotFired) => {}
                (outcome, fate) => panic!("stop_sync returned {outcome:?} for {fate:?}"),
            }
            self.retire(i);
        }
        still_armed
    }

    /// Matches callbacks to armings once no callback can run any more:
    /// exactly once per arming that fired, none for one that did not, never
    /// early. Returns how many armings fired.
    fn verify(&self) -> u64 {
        let mut fired = 0;
        for tracked in &self.retired {
            let fires = tracked.fires.try_lock().expect("no callback runs now");
            let mut next = fires.iter();
            for (k, arming) in tracked.armings.iter().enumerate() {
                let expect_fire = match arming.fate {
                    Fate::Fired => true,
                    Fate::NotFired => false,
                    Fate::Dropped => next.len() > 0,
                    Fate::Open => unreachable!("finish() closed every arming"),
                };
                if !expect_fire {
                    continue;
                }
                let Some(&fire) = next.next() else {
                    panic!(
                        "arming {k} of {:?} is known to have fired but its callback never ran",
                        tracked.armings
                    );
                };
                assert!(
                    fire >= arming.at + arming.delay,
                    "arming {k} ({arming:?}) fired early, at {fire} ns"
                );
                fired += 1;
            }
            assert_eq!(
                next.len(),
                0,
                "callbacks ran more often than armings fired (a Cancelled or Moved arming ran, or one ran twice): {:?} vs fires {:?}",
                tracked.armings,
                *fires
            );
        }
        fired
    }

    fn dropped_open(&self) -> u64 {
        self.retired
            .iter()
            .filter(|t| t.armings.last().unwrap().fate == Fate::Dropped)
            .count() as u64
    }
}

fn stop_and_record(timer: &Timer, last: &mut Arming, totals: &Totals) {
    let outcome = timer.stop();
    match (outcome, last.fate) {
        (Stop::Cancelled, Fate::Open) => {
            last.fate = Fate::NotFired;
            totals.cancelled.fetch_add(1, SeqCst);
        }
        (Stop::Fired | Stop::Running, Fate::Open | Fate::Fired) => last.fate = Fate::Fired,
        (Stop::Inactive, Fate::NotFired) => {}
        (outcome, fate) => panic!(
            "stop returned {outcome:?} for an arming known as {fate:?} ({:?})",
            timer.id()
        ),
    }
}

/// A timer stopped once by each of two operators at the same time.
struct Shared {
    timer: Option<Arc<Timer>>,
    outcomes: Arc<Mutex<Vec<Stop>>>,
    runs: Arc<AtomicU64>,
}

impl Shared {
    fn start(service: &TimerService, time: &Time, rng: &mut Rng) -> Shared {
        let runs = Arc::new(AtomicU64::new(0));
        let counter = runs.clone();
        let timer = service
            .start(time.delay(rng), move |_| {
                counter.fetch_add(1, SeqCst);
            })
            .unwrap();
        Shared {
            timer: Some(Arc::new(timer)),
            outcomes: Arc::new(Mutex::new(Vec::new())),
            runs,
        }
    }

    /// Once both stops returned and no callback can run: exactly one of
    /// "one stop Cancelled (and the other Inactive), no run" and "no stop
    /// Cancelled, one run". Returns whether it fired.
    fn check(&self) -> bool {
        let outcomes = self.outcomes.try_lock().unwrap();
        let runs = self.runs.load(SeqCst);
        let cancelled = outcomes.iter().filter(|s| **s == Stop::Cancelled).count();
        match cancelled {
            0 => {
                assert!(
                    outcomes
                        .iter()
                        .all(|s| matches!(s, Stop::Fired | Stop::Running)),
                    "{outcomes:?}"
                );
                assert_eq!(
                    runs, 1,
                    "fired per the stops ({outcomes:?}) but ran {runs} times"
                );
                true
            }
            1 => {
                assert!(outcomes.contains(&Stop::Inactive), "{outcomes:?}");
                assert_eq!(runs, 0, "a Cancelled stop was followed by the callback");
                false
            }
            _ => panic!("two stops of one arming both returned Cancelled: {outcomes:?}"),
        }
    }
}

// ---------------------------------------------------------------------------
// The churn scenarios: operators, shared timers, a clock, owners.

/// Who owns the shards in a churn scenario.
#[derive(Clone, Copy)]
enum Owners {
    /// `Driver::Threads` on a manual clock.
    DriverThreads,
    /// `Driver::Threads` on the monotonic clock, one-hour ticks: the drivers
    /// really sleep (park until unparked).
    SleepingDriverThreads,
    /// `Driver::Embedded`, one polling thread per shard that parks until the
    /// service's waker (or the clock thread) unparks it.
    Polling,
}

const SHARDS: usize = 2;
const OPERATORS: usize = 3;
const SHARED: usize = 3;

fn churn(owners: Owners) {
    let mut rng = Rng::from_shuttle();
    let manual = ManualClock::new();
    let time = match owners {
        Owners::SleepingDriverThreads => Time::Hours,
        _ => Time::Manual(manual.clone()),
    };
    let pollers = parkers();
    let mut builder = TimerService::builder().shards(SHARDS);
    builder = match owners {
        Owners::DriverThreads => builder
            .tick(TICK)
            .clock(Clock::Manual(manual.clone()))
            .driver(Driver::Threads { pin: false }),
        Owners::SleepingDriverThreads => builder.tick(HOUR).driver(Driver::Threads { pin: false }),
        Owners::Polling => {
            let pollers = pollers.clone();
            builder
                .tick(TICK)
                .clock(Clock::Manual(manual.clone()))
                .driver(Driver::Embedded)
                .waker(move |shard| pollers[shard].unpark())
        }
    };
    let service = builder.build().unwrap();

    // Polling owners: claim, poll, park until woken; a last poll once told
    // to stop.
    let stop_polling = Arc::new(AtomicBool::new(false));
    let polling: Vec<_> = match owners {
        Owners::Polling => (0..SHARDS)
            .map(|shard| {
                let service = service.clone();
                let pollers = pollers.clone();
                let stop = stop_polling.clone();
                thread::spawn(move || {
                    let mut guard = service.claim_shard(shard).unwrap();
                    loop {
                        guard.poll().unwrap();
                        if stop.load(SeqCst) {
                            break;
                        }
                        match guard.next_deadline() {
                            Some(d) if d.is_zero() => {}
                            _ => pollers[shard].park(),
                        }
                    }
                })
            })
            .collect(),
        _ => Vec::new(),
    };

    let mut shared: Vec<Shared> = (0..SHARED)
        .map(|_| Shared::start(&service, &time, &mut rng))
        .collect();
    let totals = Arc::new(Totals::default());
    let operators: Vec<_> = (0..OPERATORS)
        .map(|t| {
            let service = service.clone();
            let time = time.clone();
            let totals = totals.clone();
            let rng = Rng(rng.next());
            // Operators t and t+1 (mod 3) each stop shared timer t once, at
            // a random point of their run.
            let mine: Vec<_> = shared
                .iter()
                .enumerate()
                .filter(|(s, _)| *s == t || (*s + 1) % OPERATORS == t)
                .map(|(_, s)| (s.timer.clone().unwrap(), s.outcomes.clone()))
                .collect();
            thread::spawn(move || {
                let mut op = Operator::new(service, time, rng, totals);
                let when: Vec<usize> = mine
                    .iter()
                    .map(|_| op.rng.below(OPS as u64) as usize)
                    .collect();
                for step in 0..OPS {
                    for (k, (timer, outcomes)) in mine.iter().enumerate() {
                        if when[k] == step {
                            let outcome = timer.stop();
                            outcomes.lock().unwrap().push(outcome);
                        }
                    }
                    op.step();
                }
                let still_armed = op.finish();
                (op, still_armed)
            })
        })
        .collect();
    let clock = match &time {
        Time::Manual(clock) => {
            let clock = clock.clone();
            let pollers = pollers.clone();
            let mut rng = Rng(rng.next());
            Some(thread::spawn(move || {
                for _ in 0..40 {
                    clock.advance(Duration::from_micros(rng.below(600)));
                    // Whoever moves a manual clock wakes the polling owners
                    // (the driver threads re-read it on their own).
                    for poller in pollers.iter() {
                        poller.unpark();
                    }
                    thread::yield_now();
                }
            }))
        }
        Time::Hours => None,
    };

    let operators: Vec<(Operator, u64)> =
        operators.into_iter().map(|h| h.join().unwrap()).collect();
    if let Some(clock) = clock {
        clock.join().unwrap();
    }
    // Both stops of every shared timer have returned; the operators' clones
    // are gone with their threads: drop the last handles.
    for s in &mut shared {
        drop(s.timer.take());
    }

    // Every handle is gone. The owners must free every slot without anyone
    // starting another timer: a sleeping owner is woken once reclaiming the
    // stopped timers queued for it is due, which under shuttle is at every
    // remote stop, or the releasing thread reclaims them in the lent shard
    // (docs/CONTRACT.md 13 and 21).
    let started = totals.started.load(SeqCst) + SHARED as u64;
    let mut yields = 0;
    while service.stats().freed != started {
        assert!(
            yields < RECLAIM_YIELDS,
            "slots not reclaimed while the owners sleep: {:?}, {started} timers started and all handles dropped",
            service.stats()
        );
        thread::yield_now();
        yields += 1;
    }
    // `Stats::armed` is as of each owner's last poll: once more polls.
    match owners {
        Owners::Polling => {
            stop_polling.store(true, SeqCst);
            for poller in pollers.iter() {
                poller.unpark();
            }
            for poller in polling {
                poller.join().unwrap();
            }
            assert_eq!(service.stats().armed, 0, "armed after the last poll");
        }
        Owners::DriverThreads => {
            // These drivers re-read the manual clock, so they poll on.
            let mut yields = 0;
            while service.stats().armed != 0 {
                assert!(yields < RECLAIM_YIELDS, "{:?}", service.stats());
                thread::yield_now();
                yields += 1;
            }
        }
        // These sleep until woken, and nothing wakes them now: `armed` may
        // be as of a poll before the last stops (taken in before the sleep,
        // or by a releasing thread in the lent shard, not by a poll). The slots are freed, which is what counts.
        Owners::SleepingDriverThreads => {}
    }

    // Quiescent: no callback can run any more.
    let fired: u64 = operators.iter().map(|(op, _)| op.verify()).sum();
    let shared_fired = shared.iter().filter(|s| s.check()).count() as u64;
    let stats = service.stats();
    assert_eq!(
        stats.fired,
        fired + shared_fired,
        "service and callbacks disagree"
    );
    assert_eq!(totals.callbacks.load(SeqCst), fired);
    assert_eq!(stats.panics, 0);
    let still_armed: u64 = operators.iter().map(|(_, s)| s).sum();
    let dropped_open: u64 = operators.iter().map(|(op, _)| op.dropped_open()).sum();
    // armings = fired + cancelled + moved + still armed (+ dropped while
    // open, which fired or not).
    let armings = totals.armings.load(SeqCst);
    let closed = fired + totals.cancelled.load(SeqCst) + totals.moved.load(SeqCst) + still_armed;
    assert!(
        closed <= armings && armings - closed <= dropped_open,
        "armings {armings} != fired {fired} + cancelled + moved + still armed {still_armed} (+ at most {dropped_open} dropped)"
    );
    service.shutdown();
}

#[test]
fn churn_with_driver_threads_on_a_manual_clock() {
    explore("churn_with_driver_threads_on_a_manual_clock", || {
        churn(Owners::DriverThreads)
    });
}

#[test]
fn churn_with_polling_owners_that_park() {
    explore("churn_with_polling_owners_that_park", || {
        churn(Owners::Polling)
    });
}

/// CONTRACT 13 and 21: the driver threads sleep for hours, so a stopped
/// timer's slot is freed while they sleep only because a STOP or a handle
/// drop wakes the owner, or frees it in the lent shard itself.
#[test]
fn sleeping_driver_threads_reclaim_stopped_timers() {
    explore("sleeping_driver_threads_reclaim_stopped_timers", || {
        churn(Owners::SleepingDriverThreads)
    });
}

// ---------------------------------------------------------------------------
// Shutdown: the sweep, with callbacks that hold other timers' handles.

/// Counts drops of a callback's captures.
struct Capture {
    drops: Arc<AtomicU64>,
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.drops.fetch_add(1, SeqCst);
    }
}

/// Shutdown while operators start and stop timers and the clock moves, with
/// timers whose callbacks own the handles of other timers of the same shard
/// (in both slot orders), so that the sweep drops handles of timers it has
/// not swept yet (CONTRACT 15). Checks: no panic (in a driver or owner
/// thread too), every capture dropped exactly once, no callback runs after
/// `shutdown` returns, and afterwards starts fail and stops are `Inactive`.
fn shutdown_sweep(owners: Owners) {
    let mut rng = Rng::from_shuttle();
    let clock = ManualClock::new();
    let pollers = parkers();
    let builder = TimerService::builder()
        .shards(SHARDS)
        .tick(TICK)
        .clock(Clock::Manual(clock.clone()));
    let service = match owners {
        Owners::Polling => {
            let pollers = pollers.clone();
            builder
                .driver(Driver::Embedded)
                .waker(move |shard| pollers[shard].unpark())
                .build()
        }
        _ => builder.driver(Driver::Threads { pin: false }).build(),
    }
    .unwrap();
    let created = Arc::new(AtomicU64::new(0));
    let drops = Arc::new(AtomicU64::new(0));
    let shut = Arc::new(AtomicBool::new(false));
    let late_runs = Arc::new(AtomicU64::new(0));
    let capture = || {
        created.fetch_add(1, SeqCst);
        Capture {
            drops: drops.clone(),
        }
    };

    let polling: Vec<_> = match owners {
        Owners::Polling => (0..SHARDS)
            .map(|shard| {
                let service = service.clone();
                let pollers = pollers.clone();
                thread::spawn(move || {
                    // Not dropped if this thread panics: the guard's drop
                    // would sweep again, panic again and abort the run.
                    let mut guard = match service.claim_shard(shard) {
                        Ok(guard) => std::mem::ManuallyDrop::new(guard),
                        // Shut down before this owner got going.
                        Err(TimerError::Shutdown) => return,
                        Err(e) => panic!("{e:?}"),
                    };
                    // Polls until the service is shut down: that poll sweeps.
                    while guard.poll().is_ok() {
                        match guard.next_deadline() {
                            Some(d) if d.is_zero() => {}
                            _ => pollers[shard].park(),
                        }
                    }
                    assert_eq!(guard.poll(), Err(TimerError::Shutdown));
                    drop(std::mem::ManuallyDrop::into_inner(guard));
                })
            })
            .collect(),
        _ => Vec::new(),
    };

    // Rings of long timers per shard: timer k's callback owns the handle of
    // timer k+1 (the last one's, of the first), so whichever slot the sweep
    // reaches first, it drops the handle of one it has not reached. Some
    // rings are due during the run instead: their callbacks then drop the
    // captured handles while the shard polls.
    for shard in 0..SHARDS {
        for _ in 0..2 {
            let len = 2 + rng.below(3) as usize;
            let delay = if rng.below(3) == 0 {
                Duration::from_micros(rng.below(2_000))
            } else {
                HOUR
            };
            let cells: Vec<Arc<std::sync::Mutex<Option<Timer>>>> = (0..len)
                .map(|_| Arc::new(std::sync::Mutex::new(None)))
                .collect();
            let timers: Vec<Timer> = (0..len)
                .map(|k| {
                    let cell = cells[(k + len - 1) % len].clone();
                    let held = capture();
                    let shut = shut.clone();
                    let late_runs = late_runs.clone();
                    service
                        .schedule(TimerSpec::after(delay).on_shard(shard), move |_| {
                            let _ = &held;
                            if shut.load(SeqCst) {
                                late_runs.fetch_add(1, SeqCst);
                            }
                            // Drop the other timer's handle now.
                            drop(cell.lock().unwrap().take());
                        })
                        .unwrap()
                })
                .collect();
            // Timer k's handle goes into the cell that timer k-1's callback
            // owns.
            for (k, timer) in timers.into_iter().enumerate() {
                *cells[k].lock().unwrap() = Some(timer);
            }
        }
    }

    // Operators churn until they meet the shutdown.
    let operators: Vec<_> = (0..2)
        .map(|_| {
            let service = service.clone();
            let mut rng = Rng(rng.next());
            let held = capture();
            let created = created.clone();
            let drops = drops.clone();
            thread::spawn(move || {
                let mut mine: Vec<Timer> = Vec::new();
                for _ in 0..40 {
                    let delay = Duration::from_micros(rng.below(3_000));
                    match rng.below(3) {
                        0 | 1 => {
                            created.fetch_add(1, SeqCst);
                            let capture = Capture {
                                drops: drops.clone(),
                            };
                            match service.start(delay, move |_| {
                                let _ = &capture;
                            }) {
                                Ok(timer) => mine.push(timer),
                                Err(TimerError::Shutdown) => break,
                                Err(e) => panic!("{e:?}"),
                            }
                        }
                        _ => {
                            if let Some(timer) = mine.pop() {
                                let _ = timer.stop();
                            }
                        }
                    }
                }
                drop(held);
                mine
            })
        })
        .collect();
    let mover = {
        let clock = clock.clone();
        let pollers = pollers.clone();
        let mut rng = Rng(rng.next());
        thread::spawn(move || {
            for _ in 0..20 {
                clock.advance(Duration::from_micros(rng.below(800)));
                for poller in pollers.iter() {
                    poller.unpark();
                }
                thread::yield_now();
            }
        })
    };

    // Shut down at a random point of the churn.
    for _ in 0..rng.below(200) {
        thread::yield_now();
    }
    service.shutdown();
    shut.store(true, SeqCst);
    assert!(service.is_shut_down());
    assert!(matches!(
        service.start(Duration::ZERO, |_| {}),
        Err(TimerError::Shutdown)
    ));
    let leftovers: Vec<Vec<Timer>> = operators.into_iter().map(|h| h.join().unwrap()).collect();
    for timer in leftovers.iter().flatten() {
        assert_eq!(timer.stop(), Stop::Inactive, "a stop after shutdown");
    }
    drop(leftovers);
    mover.join().unwrap();
    for poller in polling {
        poller.join().unwrap();
    }
    drop(service);
    if let Owners::DriverThreads = owners {
        // `shutdown` waits for driver threads to finish their callback (an
        // embedded owner's poll that began before it may still run one).
        assert_eq!(
            late_runs.load(SeqCst),
            0,
            "a callback ran after shutdown returned"
        );
    }
    assert_eq!(
        drops.load(SeqCst),
        created.load(SeqCst),
        "every capture dropped exactly once"
    );
}

#[test]
fn shutdown_sweep_with_driver_threads() {
    explore("shutdown_sweep_with_driver_threads", || {
        shutdown_sweep(Owners::DriverThreads)
    });
}

#[test]
fn shutdown_sweep_with_polling_owners() {
    explore("shutdown_sweep_with_polling_owners", || {
        shutdown_sweep(Owners::Polling)
    });
}

/// CONTRACT 13 and 21, the deterministic case of
/// `sleeping_driver_threads_reclaim_stopped_timers`: the driver sleeps towards a timer an hour away; a START due later does not
/// wake it (rightly), then a STOP and a handle drop of that later timer must
/// (once), so that its slot is freed while the driver sleeps on.
#[test]
fn sleeping_driver_thread_wakes_for_a_stop_after_a_later_start() {
    explore(
        "sleeping_driver_thread_wakes_for_a_stop_after_a_later_start",
        || {
            let service = TimerService::builder()
                .shards(1)
                .tick(HOUR)
                .driver(Driver::Threads { pin: false })
                .build()
                .unwrap();
            let near = service.start(HOUR, |_| {}).unwrap();
            let later = {
                let service = service.clone();
                thread::spawn(move || {
                    let later = service.start(HOUR * 5, |_| {}).unwrap();
                    assert_eq!(later.stop(), Stop::Cancelled);
                })
            };
            later.join().unwrap();
            let mut yields = 0;
            while service.stats().freed != 1 {
                assert!(
                    yields < RECLAIM_YIELDS,
                    "the stopped timer's slot is not freed while the driver sleeps: {:?}",
                    service.stats()
                );
                thread::yield_now();
                yields += 1;
            }
            drop(near);
        },
    );
}
