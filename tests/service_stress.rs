//! Stress test of the timer service: several threads start, stop, restart and
//! drop timers at random across shards while the shards are driven, and every
//! invariant of docs/VERIFYING.md is checked ("Invariants checked by every
//! stress, soak and fuzz run").
//!
//! Each timer is operated on by exactly one thread, which keeps the history
//! of its armings (when armed, with what delay, and how each arming ended as
//! far as STOP and RESTART told it). Its callback, on the shard owner, only
//! appends the `Instant` it ran at. After a quiescent point the two are
//! matched: the i-th callback belongs to the i-th arming that fired, which
//! gives exactly-once, never-early and "a `Cancelled` stop is never followed
//! by that arming's callback".
//!
//! Runs are seeded: set `TICKWHEEL_STRESS_SEED=<n>` to replay the operation
//! sequences of a failing run (thread interleavings still vary).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use tickwheel::{Driver, Restart, Stop, StopSync, Timer, TimerService, TimerSpec};

/// How long each driver mode churns, and how many timers a thread juggles.
#[cfg(not(miri))]
const RUN: Duration = Duration::from_millis(1500);
#[cfg(miri)]
const RUN: Duration = Duration::from_millis(20);
#[cfg(not(miri))]
const TIMERS_PER_THREAD: usize = 256;
#[cfg(miri)]
const TIMERS_PER_THREAD: usize = 4;
#[cfg(not(miri))]
const MAX_OPS_PER_THREAD: u64 = 2_000_000;
#[cfg(miri)]
const MAX_OPS_PER_THREAD: u64 = 60;

#[path = "common/rng.rs"]
mod rng;

use rng::Rng;

impl Rng {
    /// A delay: mostly short enough to fire during the run, some long
    /// enough that they can only end by STOP or RESTART.
    fn delay(&mut self) -> Duration {
        match self.below(10) {
            0..=3 => Duration::from_micros(self.below(2_000)),
            4..=8 => Duration::from_micros(2_000 + self.below(18_000)),
            _ => Duration::from_secs(1 + self.below(10)),
        }
    }
}

fn seed() -> u64 {
    let seed = std::env::var("TICKWHEEL_STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            Rng(t).next()
        });
    println!("service_stress seed: TICKWHEEL_STRESS_SEED={seed}");
    seed
}

/// How an arming ended, as far as the operating thread knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Still armed as far as this thread knows (it may have fired).
    Open,
    /// STOP or RESTART proved that it fired.
    Fired,
    /// STOP returned `Cancelled`, or RESTART returned `Moved`.
    NotFired,
    /// The handle was dropped while the arming was open: either is fine.
    Dropped,
}

#[derive(Debug)]
struct Arming {
    at: Instant,
    delay: Duration,
    fate: Fate,
}

/// One timer and everything its operating thread learned about it.
struct Tracked {
    timer: Option<Timer>,
    armings: Vec<Arming>,
    fires: Arc<Mutex<Vec<Instant>>>,
}

/// Figures summed over threads.
#[derive(Default)]
struct Totals {
    started: AtomicU64,
    armings: AtomicU64,
    cancelled: AtomicU64,
    moved: AtomicU64,
    callbacks: Arc<AtomicU64>,
    /// Lateness of every fire measured against `at + delay`, in µs.
    lateness_us: Mutex<Vec<u64>>,
}

/// What one thread does: random operations on its own timers.
struct Operator {
    service: TimerService,
    rng: Rng,
    live: Vec<Option<Tracked>>,
    retired: Vec<Tracked>,
    totals: Arc<Totals>,
}

impl Operator {
    fn new(service: TimerService, seed: u64, totals: Arc<Totals>) -> Self {
        Operator {
            service,
            rng: Rng(seed),
            live: (0..TIMERS_PER_THREAD).map(|_| None).collect(),
            retired: Vec::new(),
            totals,
        }
    }

    fn step(&mut self) {
        let i = self.rng.below(self.live.len() as u64) as usize;
        let choice = self.rng.below(100);
        let delay = self.rng.delay();
        let Some(tracked) = self.live[i].as_mut() else {
            self.live[i] = Some(self.start(delay));
            return;
        };
        let last = tracked.armings.last_mut().expect("at least one arming");
        let timer = tracked.timer.as_ref().expect("live timers have handles");
        match choice {
            0..=29 => {
                let outcome = timer.stop();
                match (outcome, last.fate) {
                    (Stop::Cancelled, Fate::Open) => {
                        last.fate = Fate::NotFired;
                        self.totals.cancelled.fetch_add(1, Ordering::SeqCst);
                    }
                    (Stop::Fired | Stop::Running, Fate::Open | Fate::Fired) => {
                        last.fate = Fate::Fired
                    }
                    (Stop::Inactive, Fate::NotFired) => {}
                    (outcome, fate) => panic!(
                        "stop returned {outcome:?} for an arming known as {fate:?} ({:?})",
                        timer.id()
                    ),
                }
            }
            30..=64 => {
                let at = Instant::now();
                let outcome = timer.restart(delay).expect("restart while running");
                match (outcome, last.fate) {
                    (Restart::Moved, Fate::Open) => {
                        last.fate = Fate::NotFired;
                        self.totals.moved.fetch_add(1, Ordering::SeqCst);
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
                    delay,
                    fate: Fate::Open,
                });
                self.totals.armings.fetch_add(1, Ordering::SeqCst);
            }
            65..=74 => {
                if last.fate != Fate::Open {
                    assert!(!timer.is_armed(), "{:?} armed after it ended", timer.id());
                }
            }
            75..=86 => {
                // STOP, then drop: the outcome is known.
                let outcome = timer.stop();
                match (outcome, last.fate) {
                    (Stop::Cancelled, Fate::Open) => {
                        last.fate = Fate::NotFired;
                        self.totals.cancelled.fetch_add(1, Ordering::SeqCst);
                    }
                    (Stop::Fired | Stop::Running, Fate::Open | Fate::Fired) => {
                        last.fate = Fate::Fired
                    }
                    (Stop::Inactive, Fate::NotFired) => {}
                    (outcome, fate) => panic!("stop returned {outcome:?} for {fate:?}"),
                }
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
        let at = Instant::now();
        let timer = self
            .service
            .schedule(spec, move |_| {
                log.lock().unwrap().push(Instant::now());
                callbacks.fetch_add(1, Ordering::SeqCst);
            })
            .expect("start while running");
        self.totals.started.fetch_add(1, Ordering::SeqCst);
        self.totals.armings.fetch_add(1, Ordering::SeqCst);
        Tracked {
            timer: Some(timer),
            armings: vec![Arming {
                at,
                delay,
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

    /// Handles that are armed now (only meaningful at a quiescent point).
    fn armed_handles(&self) -> u64 {
        self.live
            .iter()
            .flatten()
            .filter(|t| t.timer.as_ref().is_some_and(Timer::is_armed))
            .count() as u64
    }

    /// End of the run: STOP_SYNC every open arming (a `Cancelled` one was
    /// still armed at quiescence), then drop every handle. Returns how many
    /// were still armed.
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

    /// Matches callbacks to armings, once no callback can run any more.
    /// Returns how many armings fired.
    fn verify(&self) -> u64 {
        let mut fired = 0;
        let mut lateness = Vec::new();
        for tracked in &self.retired {
            let fires = tracked.fires.lock().unwrap();
            let mut next = fires.iter();
            for (k, arming) in tracked.armings.iter().enumerate() {
                let expect_fire = match arming.fate {
                    Fate::Fired => true,
                    Fate::NotFired => false,
                    // Only the last arming can be dropped open; whether it
                    // fired is whatever callback remains.
                    Fate::Dropped => next.len() > 0,
                    Fate::Open => unreachable!("finish() closed every arming"),
                };
                if !expect_fire {
                    continue;
                }
                let Some(&fire) = next.next() else {
                    panic!(
                        "arming {k} of {} ({:?}) is known to have fired but its callback never ran",
                        tracked.armings.len(),
                        arming
                    );
                };
                let due = arming.at + arming.delay;
                assert!(
                    fire >= due,
                    "arming {k} ({arming:?}) fired {:?} early",
                    due - fire
                );
                lateness.push((fire - due).as_micros() as u64);
                fired += 1;
            }
            assert_eq!(
                next.len(),
                0,
                "callbacks ran more often than armings fired: {:?} vs {} fires",
                tracked.armings,
                fires.len()
            );
        }
        self.totals.lateness_us.lock().unwrap().extend(lateness);
        fired
    }
}

/// Waits until nothing is armed and every slot of the `started` timers
/// (whose handles are all gone) has been freed.
fn check_drained(service: &TimerService, started: u64) {
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        let stats = service.stats();
        if stats.armed == 0 && stats.freed == started {
            println!(
                "  drained: {} slots freed; {} slots ever allocated ({} bytes each)",
                stats.freed, stats.slots, stats.slot_bytes
            );
            return;
        }
        assert!(
            Instant::now() < give_up,
            "service did not drain: {stats:?}, started {started}"
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// A barrier that fails instead of hanging when a thread has panicked.
struct Rendezvous {
    state: Mutex<(usize, u64, bool)>,
    turn: std::sync::Condvar,
    parties: usize,
}

impl Rendezvous {
    fn new(parties: usize) -> Self {
        Rendezvous {
            state: Mutex::new((0, 0, false)),
            turn: std::sync::Condvar::new(),
            parties,
        }
    }

    /// Returns `true` for exactly one thread per round.
    fn wait(&self) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        assert!(!state.2, "another thread failed");
        let round = state.1;
        state.0 += 1;
        if state.0 == self.parties {
            state.0 = 0;
            state.1 += 1;
            self.turn.notify_all();
            return true;
        }
        while state.1 == round && !state.2 {
            state = self.turn.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        assert!(!state.2, "another thread failed");
        false
    }

    fn break_all(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).2 = true;
        self.turn.notify_all();
    }
}

/// Breaks the rendezvous if the thread holding it unwinds.
struct BreakOnPanic(Arc<Rendezvous>);

impl Drop for BreakOnPanic {
    fn drop(&mut self) {
        if thread::panicking() {
            self.0.break_all();
        }
    }
}

/// Prints a finished run. `fired` counts the tracked timers' callbacks only:
/// the service's own `stats().fired` also counts helper timers (the driver
/// mode's flush timers), which are not armings of `totals`.
fn report(
    mode: &str,
    totals: &Totals,
    service: &TimerService,
    fired: u64,
    still_armed: u64,
    ops: u64,
) {
    let stats = service.stats();
    let mut lateness = totals.lateness_us.lock().unwrap();
    lateness.sort_unstable();
    let pick = |p: usize| lateness.get(lateness.len() * p / 100).copied().unwrap_or(0);
    println!(
        "  {mode}: {ops} ops, {} timers started, {} armings = {} fired + {} cancelled + {} moved + {} dropped unfired + {} still armed",
        totals.started.load(Ordering::SeqCst),
        totals.armings.load(Ordering::SeqCst),
        fired,
        totals.cancelled.load(Ordering::SeqCst),
        totals.moved.load(Ordering::SeqCst),
        totals.armings.load(Ordering::SeqCst)
            - fired
            - totals.cancelled.load(Ordering::SeqCst)
            - totals.moved.load(Ordering::SeqCst)
            - still_armed,
        still_armed,
    );
    println!(
        "  lateness vs Instant: p50 {}us p99 {}us max {}us; service: p50 {:?} p99 {:?} max {:?} (reported, not asserted)",
        pick(50),
        pick(99),
        lateness.last().copied().unwrap_or(0),
        stats.lateness_p50,
        stats.lateness_p99,
        stats.lateness_max
    );
}

/// The balance of a finished run: every arming either fired, was cancelled
/// or moved by a call that said so, was still armed at the end, or was
/// dropped while open (and then fired or not: `dropped` bounds that).
fn check_balance(totals: &Totals, fired: u64, still_armed: u64, dropped_open: u64) {
    let armings = totals.armings.load(Ordering::SeqCst);
    let closed = fired
        + totals.cancelled.load(Ordering::SeqCst)
        + totals.moved.load(Ordering::SeqCst)
        + still_armed;
    assert!(
        closed <= armings && armings - closed <= dropped_open,
        "armings {armings} != fired {fired} + cancelled + moved + still armed {still_armed} (+ at most {dropped_open} dropped)"
    );
}

#[test]
fn stress_driver_threads() {
    let seed = seed();
    let service = TimerService::builder()
        .shards(3)
        .tick(Duration::from_micros(250))
        .driver(Driver::Threads { pin: false })
        .build()
        .unwrap();
    let totals = Arc::new(Totals::default());
    let flushes = Arc::new(AtomicU64::new(0));
    let flush_timers: Vec<Timer> = (0..service.shard_count())
        .map(|shard| {
            let flushes = flushes.clone();
            let spec = TimerSpec::after(Duration::from_secs(3600)).on_shard(shard);
            service
                .schedule(spec, move |_| {
                    flushes.fetch_add(1, Ordering::SeqCst);
                })
                .unwrap()
        })
        .collect();
    let operators: Vec<_> = (0..3u64)
        .map(|t| {
            let service = service.clone();
            let totals = totals.clone();
            thread::spawn(move || {
                let mut op =
                    Operator::new(service, seed ^ t.wrapping_mul(0x1234_5678_9ABC), totals);
                let end = Instant::now() + RUN;
                let mut ops = 0;
                while ops < MAX_OPS_PER_THREAD && (ops % 256 != 0 || Instant::now() < end) {
                    op.step();
                    ops += 1;
                }
                (op, ops)
            })
        })
        .collect();
    let mut operators: Vec<_> = operators.into_iter().map(|h| h.join().unwrap()).collect();
    let ops: u64 = operators.iter().map(|(_, n)| n).sum();
    let still_armed: u64 = operators.iter_mut().map(|(op, _)| op.finish()).sum();

    // A driver thread sleeps until its next deadline and is not woken by
    // stops or handle drops: restarting the flush timer of each shard to
    // zero wakes it, and the poll that fires it takes in everything queued
    // before (the last stops and drops).
    for flush in &flush_timers {
        flush.restart(Duration::ZERO).unwrap();
    }
    let give_up = Instant::now() + Duration::from_secs(30);
    while flushes.load(Ordering::SeqCst) < flush_timers.len() as u64 {
        assert!(Instant::now() < give_up, "a driver thread never ran");
        thread::sleep(Duration::from_millis(1));
    }
    let flushed = flush_timers.len() as u64;

    let fired: u64 = operators.iter().map(|(op, _)| op.verify()).sum();
    let dropped_open = operators
        .iter()
        .flat_map(|(op, _)| &op.retired)
        .filter(|t| t.armings.last().unwrap().fate == Fate::Dropped)
        .count() as u64;
    let stats = service.stats();
    assert_eq!(
        stats.fired,
        fired + flushed,
        "service and callbacks disagree"
    );
    assert_eq!(totals.callbacks.load(Ordering::SeqCst), fired);
    assert_eq!(stats.panics, 0);
    check_balance(&totals, fired, still_armed, dropped_open);
    report("threads", &totals, &service, fired, still_armed, ops);

    // Every tracked handle is gone: nothing armed, every tracked slot freed
    // (the flush timers still hold theirs).
    let started = totals.started.load(Ordering::SeqCst);
    check_drained(&service, started);
    drop(flush_timers);
    service.shutdown();
}

#[test]
fn stress_embedded_workers() {
    let seed = seed();
    const WORKERS: usize = 2;
    let parked: Arc<Vec<OnceLock<Thread>>> =
        Arc::new((0..WORKERS).map(|_| OnceLock::new()).collect());
    let wakes = Arc::new(AtomicUsize::new(0));
    let service = {
        let parked = parked.clone();
        let wakes = wakes.clone();
        TimerService::builder()
            .shards(WORKERS)
            .tick(Duration::from_millis(1))
            .driver(Driver::Embedded)
            .waker(move |shard| {
                wakes.fetch_add(1, Ordering::SeqCst);
                if let Some(thread) = parked[shard].get() {
                    thread.unpark();
                }
            })
            .build()
            .unwrap()
    };
    let totals = Arc::new(Totals::default());
    // Workers own shards and operate on timers of every shard; one more
    // thread owns no shard. They meet at quiescent checkpoints.
    let threads = WORKERS + 1;
    let barrier = Arc::new(Rendezvous::new(threads));
    let armed_handles = Arc::new(AtomicU64::new(0));
    #[cfg(not(miri))]
    const CHECKPOINTS: usize = 6;
    #[cfg(miri)]
    const CHECKPOINTS: usize = 2;

    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let service = service.clone();
            let totals = totals.clone();
            let parked = parked.clone();
            let barrier = barrier.clone();
            let armed_handles = armed_handles.clone();
            thread::spawn(move || {
                let _fail = BreakOnPanic(barrier.clone());
                let mut guard = (t < WORKERS).then(|| {
                    parked[t].set(thread::current()).unwrap();
                    service.claim_shard(t).unwrap()
                });
                let mut op = Operator::new(
                    service.clone(),
                    seed ^ (t as u64 + 1).wrapping_mul(0x9E37),
                    totals.clone(),
                );
                let mut ops = 0u64;
                for checkpoint in 0..CHECKPOINTS {
                    let end = Instant::now() + RUN / CHECKPOINTS as u32;
                    let mut round = 0u64;
                    while ops < MAX_OPS_PER_THREAD / CHECKPOINTS as u64 * (checkpoint as u64 + 1)
                        && Instant::now() < end
                    {
                        for _ in 0..32 {
                            op.step();
                            ops += 1;
                        }
                        round += 1;
                        if let Some(guard) = guard.as_mut() {
                            guard.poll().unwrap();
                            if round % 8 == 0 {
                                // Park as a pool worker would, capped so the
                                // operations go on.
                                let sleep = guard.next_deadline().unwrap_or(Duration::MAX);
                                thread::park_timeout(sleep.min(Duration::from_millis(2)));
                            }
                        }
                    }
                    // Quiescent point: nobody operates; owners take in
                    // everything queued and fire what is due, then nobody
                    // polls.
                    barrier.wait();
                    if let Some(guard) = guard.as_mut() {
                        guard.poll().unwrap();
                    }
                    barrier.wait();
                    armed_handles.fetch_add(op.armed_handles(), Ordering::SeqCst);
                    if barrier.wait() {
                        let stats = service.stats();
                        let handles = armed_handles.swap(0, Ordering::SeqCst);
                        // Exact: each owner's poll took in every stop
                        // other threads queued for it.
                        assert_eq!(
                            stats.armed, handles,
                            "checkpoint {checkpoint}: wheels and handles disagree"
                        );
                        assert_eq!(
                            stats.fired,
                            totals.callbacks.load(Ordering::SeqCst),
                            "checkpoint {checkpoint}: service and callbacks disagree"
                        );
                    }
                    barrier.wait();
                }
                let still_armed = op.finish();
                barrier.wait();
                // Every handle is gone: owners free the slots at their next poll.
                if let Some(guard) = guard.as_mut() {
                    guard.poll().unwrap();
                }
                barrier.wait();
                drop(guard);
                (op, ops, still_armed)
            })
        })
        .collect();
    let operators: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let ops: u64 = operators.iter().map(|(_, n, _)| n).sum();
    let still_armed: u64 = operators.iter().map(|(_, _, s)| s).sum();
    let fired: u64 = operators.iter().map(|(op, _, _)| op.verify()).sum();
    let dropped_open = operators
        .iter()
        .flat_map(|(op, _, _)| &op.retired)
        .filter(|t| t.armings.last().unwrap().fate == Fate::Dropped)
        .count() as u64;
    let stats = service.stats();
    assert_eq!(stats.fired, fired, "service and callbacks disagree");
    assert_eq!(stats.panics, 0);
    check_balance(&totals, fired, still_armed, dropped_open);
    report("embedded", &totals, &service, fired, still_armed, ops);
    println!("  waker called {} times", wakes.load(Ordering::SeqCst));
    let started = totals.started.load(Ordering::SeqCst);
    check_drained(&service, started);
    service.shutdown();
}

/// CONTRACT 13: a stopped timer's memory is reclaimed "never only at the
/// deadline the timer would have had", also on a built-in driver thread
/// that sleeps until that deadline (here, an hour). A STOP alone does not
/// wake it (CONTRACT 21), so without more the stopped timer would stay in
/// the wheel, counted as armed, its slot allocated, for the hour; the drop
/// of its handle, the release of a timer no longer armed, is what must get
/// it reclaimed while the driver sleeps.
#[test]
#[cfg(not(miri))]
fn stopped_timer_is_reclaimed_before_its_old_deadline_on_a_sleeping_driver_thread() {
    let service = TimerService::builder()
        .shards(1)
        .driver(Driver::Threads { pin: false })
        .build()
        .unwrap();
    let timer = service
        .start(Duration::from_secs(3600), |_| unreachable!())
        .unwrap();
    // The driver takes the timer in and goes to sleep until its deadline.
    let give_up = Instant::now() + Duration::from_secs(30);
    while service.stats().armed != 1 {
        assert!(
            Instant::now() < give_up,
            "the driver never took the timer in"
        );
        thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(timer.stop(), Stop::Cancelled);
    drop(timer);
    // Nothing else happens on this shard. Ten seconds is far longer than the
    // owner needs to react, and far shorter than the old deadline.
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = service.stats();
        if stats.armed == 0 && stats.freed == 1 {
            break;
        }
        assert!(
            Instant::now() < give_up,
            "stopped timer not reclaimed while the driver sleeps towards its old deadline: {stats:?}"
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// CONTRACT 11: a callback may STOP its own timer, also a periodic timer
/// whose handle was given up with `forget()`: `Expiry::stop_id(own id)`
/// must cancel it (a STOP that required the handle would return `Inactive`
/// and leave it firing until shutdown), as `Expiry::restart` on the same
/// timer works.
#[test]
fn forgotten_periodic_timer_can_stop_itself_from_its_callback() {
    let clock = tickwheel::ManualClock::new();
    let service = TimerService::builder()
        .shards(1)
        .driver(Driver::Embedded)
        .clock(tickwheel::Clock::Manual(clock.clone()))
        .build()
        .unwrap();
    let mut shard = service.claim_shard(0).unwrap();
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let log = outcomes.clone();
    service
        .start_periodic(Duration::from_millis(1), move |expiry| {
            let id = expiry.id();
            log.lock().unwrap().push(expiry.stop_id(id));
        })
        .unwrap()
        .forget();
    for _ in 0..3 {
        clock.advance(Duration::from_millis(1));
        shard.poll().unwrap();
    }
    let outcomes = outcomes.lock().unwrap().clone();
    assert_eq!(
        outcomes,
        vec![Stop::Running],
        "the callback stopped its own timer, yet it kept firing"
    );
}
