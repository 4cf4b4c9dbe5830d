//! Fault cases (CONTRACT 2, 4, 7, 15 and 16): a panicking callback, a blocking callback, an owner
//! that stops polling, shutdown racing starts, a clock that goes backwards,
//! and huge and zero delays. No assertion depends on how fast anything runs;
//! waits for liveness are bounded by generous limits.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use tickwheel::{
    Clock, Driver, ManualClock, Restart, ShardGuard, Stop, Timer, TimerError, TimerService,
    TimerSpec,
};

const MS: Duration = Duration::from_millis(1);
/// Liveness limit: far beyond anything a loaded machine needs.
const PATIENCE: Duration = Duration::from_secs(60);

fn manual(shards: usize) -> (TimerService, ManualClock) {
    let clock = ManualClock::new();
    let service = TimerService::builder()
        .shards(shards)
        .tick(MS)
        .driver(Driver::Embedded)
        .clock(Clock::Manual(clock.clone()))
        .build()
        .unwrap();
    (service, clock)
}

fn step(guard: &mut ShardGuard, clock: &ManualClock, ticks: u32) -> usize {
    let mut fired = 0;
    for _ in 0..ticks {
        clock.advance(MS);
        fired += guard.poll().unwrap();
    }
    fired
}

/// Waits (bounded) until `done` holds.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let give_up = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < give_up, "gave up waiting: {what}");
        std::thread::sleep(MS);
    }
}

/// Counts its drops: shows a captured value was released exactly once.
struct Token(Arc<AtomicUsize>);

impl Drop for Token {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

#[test]
fn a_panicking_callback_is_caught_counted_reported_and_others_keep_firing() {
    let clock = ManualClock::new();
    let hook_calls = Arc::new(Mutex::new(Vec::new()));
    let sink = hook_calls.clone();
    let service = TimerService::builder()
        .shards(1)
        .driver(Driver::Embedded)
        .clock(Clock::Manual(clock.clone()))
        .panic_hook(move |report| sink.lock().unwrap().push(report.message.clone()))
        .build()
        .unwrap();
    let mut guard = service.claim_shard(0).unwrap();
    let good = Arc::new(AtomicUsize::new(0));

    // A periodic timer that panics every time, and one-shots around it.
    let _bad = service
        .start_periodic(MS * 2, |e| {
            panic!("bad timer at tick {}", e.deadline_tick())
        })
        .unwrap();
    let _good: Vec<Timer> = (1..=10)
        .map(|i| {
            let good = good.clone();
            service
                .start(MS * i, move |_| {
                    good.fetch_add(1, SeqCst);
                })
                .unwrap()
        })
        .collect();
    // A panic with a non-string payload, and a hook that is fine with it.
    let _odd = service
        .start(MS * 3, |_| std::panic::panic_any(42u32))
        .unwrap();
    step(&mut guard, &clock, 10);

    assert_eq!(good.load(SeqCst), 10, "other timers stopped firing");
    let calls = hook_calls.lock().unwrap().clone();
    // The periodic one panicked at ticks 2, 4, 6, 8, 10 (still re-armed each time).
    assert_eq!(calls.len(), 6, "{calls:?}");
    assert!(calls.contains(&"bad timer at tick 10".to_owned()));
    assert!(calls.contains(&"<non-string panic payload>".to_owned()));
    assert_eq!(service.stats().panics, 6);
    // The shard is intact: new timers still fire.
    let after = Arc::new(AtomicUsize::new(0));
    let counter = after.clone();
    let _t = service
        .start(MS, move |_| {
            counter.fetch_add(1, SeqCst);
        })
        .unwrap();
    step(&mut guard, &clock, 1);
    assert_eq!(after.load(SeqCst), 1);
}

#[test]
fn a_panicking_panic_hook_does_not_take_the_shard_down() {
    let clock = ManualClock::new();
    let service = TimerService::builder()
        .shards(1)
        .driver(Driver::Embedded)
        .clock(Clock::Manual(clock.clone()))
        .panic_hook(|_| panic!("the hook itself panics"))
        .build()
        .unwrap();
    let mut guard = service.claim_shard(0).unwrap();
    let fired = Arc::new(AtomicUsize::new(0));
    let counter = fired.clone();
    let _bad = service.start(MS, |_| panic!("boom")).unwrap();
    let _good = service
        .start(MS * 2, move |_| {
            counter.fetch_add(1, SeqCst);
        })
        .unwrap();
    step(&mut guard, &clock, 2);
    assert_eq!(fired.load(SeqCst), 1);
    assert_eq!(service.stats().panics, 1);
}

#[test]
fn a_blocking_callback_makes_its_shard_late_but_not_the_other() {
    const BLOCK: Duration = Duration::from_millis(200);
    let service = TimerService::builder()
        .shards(2)
        .tick(MS)
        .driver(Driver::Threads { pin: false })
        .build()
        .unwrap();
    // The blocker holds shard 0 until shard 1 has fired 20 timers (and for
    // at least BLOCK): shard 1 making progress meanwhile shows it is unaffected.
    let other_fired = Arc::new(AtomicUsize::new(0));
    let released = Arc::new(AtomicBool::new(false));
    let (seen, done) = (other_fired.clone(), released.clone());
    let _blocker = service
        .schedule(TimerSpec::after(MS).on_shard(0), move |_| {
            let began = Instant::now();
            while seen.load(SeqCst) < 20 || began.elapsed() < BLOCK {
                assert!(began.elapsed() < PATIENCE, "shard 1 made no progress");
                std::thread::sleep(MS);
            }
            done.store(true, SeqCst);
        })
        .unwrap();
    let victim_lateness = Arc::new(Mutex::new(None));
    let record = victim_lateness.clone();
    let _victim = service
        .schedule(TimerSpec::after(MS * 5).on_shard(0), move |e| {
            *record.lock().unwrap() = Some(e.lateness());
        })
        .unwrap();
    let others: Vec<Timer> = (1..=20u32)
        .map(|i| {
            let fired = other_fired.clone();
            service
                .schedule(TimerSpec::after(MS * i).on_shard(1), move |_| {
                    fired.fetch_add(1, SeqCst);
                })
                .unwrap()
        })
        .collect();
    eventually("the victim fired", || {
        victim_lateness.lock().unwrap().is_some()
    });
    assert!(
        released.load(SeqCst),
        "the victim ran before the blocker returned"
    );
    assert_eq!(other_fired.load(SeqCst), 20);
    // Due 5 ms after the start, it could only run after the blocker's >= 200 ms:
    // at least ~195 ms late, and the lateness is reported (a lower bound only).
    let lateness = victim_lateness.lock().unwrap().unwrap();
    assert!(lateness >= Duration::from_millis(150), "{lateness:?}");
    assert!(service.stats().lateness_max >= Duration::from_millis(150));
    drop(others);
}

#[test]
fn an_owner_that_stops_polling_blocks_nobody_and_loses_nothing() {
    const THREADS: usize = 4;
    let per_thread: usize = if cfg!(miri) { 20 } else { 5000 };
    let wakes = Arc::new(AtomicUsize::new(0));
    let clock = ManualClock::new();
    let counter = wakes.clone();
    let service = TimerService::builder()
        .shards(1)
        .tick(MS)
        .driver(Driver::Embedded)
        .clock(Clock::Manual(clock.clone()))
        .waker(move |_| {
            counter.fetch_add(1, SeqCst);
        })
        .build()
        .unwrap();
    let mut guard = service.claim_shard(0).unwrap();
    guard.poll().unwrap();
    // The owner publishes its sleep (nothing armed: until woken), as an
    // owner does before it parks, and then stalls: no poll until every
    // other thread has finished.
    assert_eq!(guard.next_deadline(), None);
    let fired = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = mpsc::channel();
    for t in 0..THREADS {
        let (service, fired, tx) = (service.clone(), fired.clone(), tx.clone());
        std::thread::spawn(move || {
            let mut kept = Vec::new();
            let mut stopped = 0;
            for i in 0..per_thread {
                let fired = fired.clone();
                let timer = service
                    .start(MS * (1 + (i % 50) as u32), move |_| {
                        fired.fetch_add(1, SeqCst);
                    })
                    .unwrap();
                match (i + t) % 3 {
                    // Stopped from this thread while the owner sleeps.
                    0 => {
                        assert_eq!(timer.stop(), Stop::Cancelled);
                        stopped += 1;
                    }
                    // Restarted (moved) while the owner sleeps.
                    1 => {
                        assert_eq!(timer.restart(MS * 7).unwrap(), Restart::Moved);
                        kept.push(timer);
                    }
                    _ => kept.push(timer),
                }
            }
            tx.send((kept, stopped)).unwrap();
        });
    }
    drop(tx);
    let mut kept = Vec::new();
    let mut stopped = 0;
    for _ in 0..THREADS {
        // A START or STOP that waited for the stalled owner would never get here.
        let (mut timers, n) = rx
            .recv_timeout(PATIENCE)
            .expect("a start or stop blocked on a stalled owner");
        kept.append(&mut timers);
        stopped += n;
    }
    assert_eq!(fired.load(SeqCst), 0, "fired without a poll");
    // Asked to wake, once for its one sleep (CONTRACT 21).
    assert_eq!(wakes.load(SeqCst), 1, "the stalled owner's wakes");
    // The owner resumes: every kept timer fires exactly once, no stopped one.
    step(&mut guard, &clock, 60);
    assert_eq!(fired.load(SeqCst), kept.len());
    assert_eq!(kept.len() + stopped, THREADS * per_thread);
    for timer in &kept {
        assert_eq!(timer.stop(), Stop::Fired);
    }
    drop(kept);
    guard.poll().unwrap();
    let stats = service.stats();
    assert_eq!(stats.armed, 0);
    assert_eq!(stats.freed as usize, THREADS * per_thread, "{stats:?}");
}

#[test]
fn shutdown_while_other_threads_start_timers() {
    const THREADS: usize = 3;
    let service = TimerService::builder()
        .shards(2)
        .tick(MS)
        .driver(Driver::Threads { pin: false })
        .build()
        .unwrap();
    let (made, dropped, ran_after) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let shut = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let service = service.clone();
            let (made, dropped, ran_after, shut, started) = (
                made.clone(),
                dropped.clone(),
                ran_after.clone(),
                shut.clone(),
                started.clone(),
            );
            std::thread::spawn(move || {
                let mut handles = Vec::new();
                let mut refused = false;
                for i in 0u32.. {
                    made.fetch_add(1, SeqCst);
                    let token = Token(dropped.clone());
                    let (ran_after, shut) = (ran_after.clone(), shut.clone());
                    let delay = match i % 3 {
                        0 => Duration::ZERO,
                        1 => MS * (i % 20),
                        _ => Duration::from_secs(3600),
                    };
                    let outcome = service.start(delay, move |_| {
                        let _keep = &token;
                        if shut.load(SeqCst) {
                            ran_after.fetch_add(1, SeqCst);
                        }
                    });
                    match outcome {
                        Ok(timer) if i % 2 == 0 => handles.push(timer),
                        Ok(timer) => timer.forget(),
                        // The closure (and its token) was dropped by the failed start.
                        Err(TimerError::Shutdown) => refused = true,
                        Err(other) => panic!("thread {t}: {other:?}"),
                    }
                    started.fetch_add(1, SeqCst);
                    if refused {
                        break;
                    }
                }
                // Old handles after shutdown: inactive, restart refused.
                for timer in &handles {
                    assert_eq!(timer.stop(), Stop::Inactive);
                    assert_eq!(timer.restart(MS), Err(TimerError::Shutdown));
                }
                drop(handles);
            })
        })
        .collect();
    eventually("the starters got going", || started.load(SeqCst) > 3000);
    service.shutdown();
    shut.store(true, SeqCst);
    for thread in threads {
        thread.join().expect("a starter crashed");
    }
    assert_eq!(
        ran_after.load(SeqCst),
        0,
        "a callback ran after shutdown returned"
    );
    drop(service);
    // Every callback ever created (run, dropped at shutdown, or refused) has
    // been dropped exactly once: no leak, no double drop.
    assert_eq!(dropped.load(SeqCst), made.load(SeqCst));
}

#[test]
fn the_clock_going_backwards_counts_as_no_time_passing() {
    let (service, clock) = manual(1);
    let mut guard = service.claim_shard(0).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    clock.set(MS * 100);
    guard.poll().unwrap();
    let l = log.clone();
    let _t = service
        .start(MS * 10, move |e| l.lock().unwrap().push(e.deadline_tick()))
        .unwrap(); // due at tick 110
    for back in [MS * 50, Duration::ZERO, MS * 99] {
        clock.set(back);
        assert_eq!(clock.elapsed(), MS * 100, "the manual clock went back");
        guard.poll().unwrap();
    }
    // Starts after a backwards set are measured from the high-water reading.
    let l = log.clone();
    let _u = service
        .start(MS * 5, move |e| l.lock().unwrap().push(e.deadline_tick()))
        .unwrap(); // due at tick 105, not 5
    clock.set(MS * 104);
    guard.poll().unwrap();
    assert!(log.lock().unwrap().is_empty(), "fired early");
    clock.set(MS * 105);
    guard.poll().unwrap();
    clock.set(MS * 110);
    guard.poll().unwrap();
    assert_eq!(*log.lock().unwrap(), vec![105, 110]);
}

#[test]
fn huge_and_zero_delays() {
    let (service, clock) = manual(1);
    let mut guard = service.claim_shard(0).unwrap();
    let fired = Arc::new(AtomicU64::new(0));
    let count = |fired: &Arc<AtomicU64>| {
        let fired = fired.clone();
        move |_: &mut tickwheel::Expiry<'_>| {
            fired.fetch_add(1, SeqCst);
        }
    };
    // Huge: every way to say "practically never"; none panics, wraps or fires.
    let huge: Vec<Timer> = vec![
        service.start(Duration::MAX, count(&fired)).unwrap(),
        service
            .start(Duration::from_secs(u64::MAX), count(&fired))
            .unwrap(),
        service
            .start(Duration::from_nanos(u64::MAX), count(&fired))
            .unwrap(),
        service
            .start_periodic(Duration::MAX, count(&fired))
            .unwrap(),
        service
            .schedule(
                TimerSpec::within(Duration::MAX, Duration::MAX),
                count(&fired),
            )
            .unwrap(),
        service
            .schedule(
                TimerSpec::within(Duration::ZERO, Duration::MAX),
                count(&fired),
            )
            .unwrap(),
    ];
    let moved = service.start(MS, count(&fired)).unwrap();
    assert_eq!(moved.restart(Duration::MAX).unwrap(), Restart::Moved);
    clock.advance(Duration::from_secs(3600 * 24 * 365 * 100)); // a century
    guard.poll().unwrap();
    // Only the `within(0, MAX)` timer may fire (the wheel picks its tick).
    assert!(fired.load(SeqCst) <= 1);
    let fired_before = fired.load(SeqCst);
    for timer in &huge[..5] {
        assert!(timer.is_armed());
        assert_eq!(timer.stop(), Stop::Cancelled);
    }
    assert_eq!(moved.stop(), Stop::Cancelled);
    drop(huge);

    // Zero: fires at the next poll, never inside start, never twice.
    let zero = service.start(Duration::ZERO, count(&fired)).unwrap();
    let periodic_min = service
        .start_periodic(Duration::from_nanos(1), count(&fired))
        .unwrap(); // a period shorter than a tick rounds up to one tick
    assert_eq!(fired.load(SeqCst), fired_before, "ran inside start");
    // A poll without the clock moving fires the zero delay (due now,
    // CONTRACT 1), not the periodic timer, due a tick later.
    guard.poll().unwrap();
    assert_eq!(fired.load(SeqCst), fired_before + 1);
    step(&mut guard, &clock, 1);
    assert_eq!(fired.load(SeqCst), fired_before + 2);
    step(&mut guard, &clock, 3);
    assert_eq!(
        fired.load(SeqCst),
        fired_before + 5,
        "periodic: once per tick"
    );
    assert_eq!(zero.stop(), Stop::Fired);
    drop(periodic_min);

    // A callback that re-arms itself with zero delay cannot keep a poll busy
    // for ever: each re-arming goes to the next tick.
    let spins = Arc::new(AtomicU64::new(0));
    let s = spins.clone();
    let _spinner = service
        .start(Duration::ZERO, move |e| {
            s.fetch_add(1, SeqCst);
            e.restart(Duration::ZERO).unwrap();
        })
        .unwrap();
    clock.advance(MS * 10);
    guard.poll().unwrap();
    let after_one_poll = spins.load(SeqCst);
    assert!((1..=11).contains(&after_one_poll), "{after_one_poll}");

    // Restarting with zero delay also goes to the next tick, not now.
    let restarted = service.start(MS * 50, count(&fired)).unwrap();
    let before = fired.load(SeqCst);
    assert_eq!(restarted.restart(Duration::ZERO).unwrap(), Restart::Moved);
    assert_eq!(fired.load(SeqCst), before);
    step(&mut guard, &clock, 1);
    assert_eq!(fired.load(SeqCst), before + 1);
}
