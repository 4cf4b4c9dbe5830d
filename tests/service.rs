//! Contract tests for the timer service (docs/CONTRACT.md items 1-16), each named
//! after the item it checks. Deterministic: one embedded shard on a manual
//! clock, unless the item is about threads.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tickwheel::{
    Clock, Driver, ManualClock, Restart, ShardGuard, Stop, StopSync, TimerError, TimerId,
    TimerService, TimerSpec,
};

const MS: Duration = Duration::from_millis(1);

fn embedded(shards: usize) -> (TimerService, ShardGuard, ManualClock) {
    let clock = ManualClock::new();
    let service = TimerService::builder()
        .shards(shards)
        .tick(MS)
        .driver(Driver::Embedded)
        .clock(Clock::Manual(clock.clone()))
        .build()
        .unwrap();
    let guard = service.claim_shard(0).unwrap();
    (service, guard, clock)
}

/// Records `(label, deadline tick, now tick)` of every expiry.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<(u32, u64, u64)>>>);

impl Log {
    fn callback(&self, label: u32) -> impl FnMut(&mut tickwheel::Expiry<'_>) + Send + 'static {
        let log = self.0.clone();
        move |e| {
            log.lock()
                .unwrap()
                .push((label, e.deadline_tick(), e.now_tick()))
        }
    }

    fn take(&self) -> Vec<(u32, u64, u64)> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

/// Polls once per tick up to `ticks` ticks from now.
fn step_ticks(guard: &mut ShardGuard, clock: &ManualClock, ticks: u64) -> usize {
    let mut fired = 0;
    for _ in 0..ticks {
        clock.advance(MS);
        fired += guard.poll().unwrap();
    }
    fired
}

#[test]
fn item1_never_early_and_delays_round_up() {
    let (service, mut guard, clock) = embedded(1);
    let log = Log::default();
    clock.advance(Duration::from_micros(300)); // mid-tick: now = 0.3 ms
    let _a = service
        .start(Duration::from_micros(1500), log.callback(1))
        .unwrap(); // due 1.8 ms -> tick 2
    let _b = service
        .start(Duration::from_millis(2), log.callback(2))
        .unwrap(); // due 2.3 ms -> tick 3
    clock.set(Duration::from_micros(1999));
    guard.poll().unwrap();
    assert!(log.take().is_empty(), "fired before 1.8 ms had passed");
    clock.set(Duration::from_millis(2));
    guard.poll().unwrap();
    assert_eq!(log.take(), vec![(1, 2, 2)]);
    clock.set(Duration::from_micros(2999));
    guard.poll().unwrap();
    assert!(log.take().is_empty(), "fired before 2.3 ms had passed");
    clock.set(Duration::from_millis(3));
    guard.poll().unwrap();
    assert_eq!(log.take(), vec![(2, 3, 3)]);
}

#[test]
fn item1_zero_delay_fires_at_the_next_poll_never_inside_start() {
    let (service, mut guard, clock) = embedded(1);
    let fired = Arc::new(AtomicUsize::new(0));
    let counter = fired.clone();
    let _t = service
        .start(Duration::ZERO, move |_| {
            counter.fetch_add(1, SeqCst);
        })
        .unwrap();
    assert_eq!(fired.load(SeqCst), 0, "ran synchronously inside start");
    clock.advance(MS);
    assert_eq!(guard.poll().unwrap(), 1);
    assert_eq!(fired.load(SeqCst), 1);
}

#[test]
fn item2_exact_on_the_wheel_across_levels() {
    let (service, mut guard, clock) = embedded(1);
    let log = Log::default();
    // Deadlines on level 0, on level boundaries, and several levels up.
    let all = [1u64, 63, 64, 65, 4095, 4096, 4097, 70_000];
    // Miri: one poll per tick up to 70k ticks takes hours; keep levels 0-1.
    let delays = if cfg!(miri) { &all[..4] } else { &all[..] };
    let _timers: Vec<_> = delays
        .iter()
        .map(|&d| {
            service
                .start(MS * d as u32, log.callback(d as u32))
                .unwrap()
        })
        .collect();
    step_ticks(&mut guard, &clock, delays[delays.len() - 1] + 1);
    let fired = log.take();
    assert_eq!(fired.len(), delays.len());
    for (label, deadline, now) in fired {
        assert_eq!(
            (deadline, now),
            (label as u64, label as u64),
            "fired off its own tick"
        );
    }
}

#[test]
fn item2_lateness_is_reported() {
    let (service, mut guard, clock) = embedded(1);
    let lateness = Arc::new(Mutex::new(None));
    let seen = lateness.clone();
    let _t = service
        .start(MS * 5, move |e| {
            *seen.lock().unwrap() = Some(e.lateness_ticks())
        })
        .unwrap();
    clock.advance(MS * 12); // the owner was not running for 12 ticks
    guard.poll().unwrap();
    assert_eq!(*lateness.lock().unwrap(), Some(7));
    assert_eq!(service.stats().lateness_max, MS * 7);
}

/// `lateness_max` counts a shard whose next timer is overdue as late, but
/// only while that timer is still there: a timer cancelled after the last
/// poll, by its owner or by another thread, must not make an owner that
/// took its remote queue in and went idle look late (CONTRACT 2: reported
/// lateness is honest; an owner judged by a churn timer cancelled since its
/// last poll reported several times the lateness measured outside).
#[test]
fn item2_lateness_max_forgets_a_waiting_timer_cancelled_since_the_last_poll() {
    let (service, mut guard, clock) = embedded(1);
    let owners = service.start(MS * 5, |_| {}).unwrap();
    let others = service.start(MS * 6, |_| {}).unwrap();
    guard.poll().unwrap(); // the shard's next due tick is now 5
    assert_eq!(owners.stop(), tickwheel::Stop::Cancelled);
    let remote = std::thread::spawn(move || others.stop());
    assert_eq!(remote.join().unwrap(), tickwheel::Stop::Cancelled);
    // The owner takes the remote cancel in and finds nothing armed, as it
    // does before it sleeps; it polls no more.
    assert_eq!(guard.next_deadline_tick(), None);
    clock.advance(MS * 20);
    let stats = service.stats();
    assert_eq!(stats.lateness_max, Duration::ZERO, "{stats:?}");
    // Still counted while the timer really waits: the same without the
    // cancels reports the time since its deadline.
    let _kept = service.start(MS * 5, |_| {}).unwrap();
    assert_eq!(guard.next_deadline_tick(), Some(25));
    clock.advance(MS * 8);
    assert_eq!(service.stats().lateness_max, MS * 3);
    assert_eq!(guard.poll().unwrap(), 1);
}

/// A delay that is not a whole number of ticks is rounded up, and that
/// rounding is lateness too: measured from the deadline asked for, not from
/// the tick, to 1/256 of a tick (what `Stats` and `Expiry::lateness` report
/// must match what a caller measures against its own deadline).
#[test]
fn item2_lateness_counts_from_the_deadline_asked_for_not_the_rounded_tick() {
    let (service, mut guard, clock) = embedded(1);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = |label: &'static str| {
        let seen = seen.clone();
        move |e: &mut tickwheel::Expiry<'_>| {
            seen.lock()
                .unwrap()
                .push((label, e.lateness(), e.lateness_ticks()))
        }
    };
    let within = |late: Duration, expected: Duration| {
        // One 256th of a 1 ms tick is 3.9 µs.
        late <= expected && expected - late < Duration::from_micros(4)
    };
    let us = Duration::from_micros(1);

    // 2.25 ms asked for: tick 3, reached exactly, so 0.75 ms late.
    let _a = service.start(us * 2250, record("start")).unwrap();
    // Restarted from 0.4 ms to 6.5 ms: tick 7, which the clock passes by
    // 0.2 ms before the poll, so 0.7 ms late.
    let b = service.start(us * 400, record("restart")).unwrap();
    b.restart(us * 6500).unwrap();
    // A window: any of its ticks is on time.
    let _c = service
        .schedule(TimerSpec::within(MS * 5, MS * 5), record("within"))
        .unwrap();
    clock.advance(MS * 3);
    guard.poll().unwrap();
    clock.advance(MS * 2);
    guard.poll().unwrap();
    clock.advance(MS * 2 + us * 200);
    guard.poll().unwrap();

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3, "{seen:?}");
    let (label, late, ticks) = seen[0];
    assert_eq!((label, ticks), ("start", 0));
    assert!(within(late, us * 750), "{late:?}");
    let (label, late, ticks) = seen[1];
    assert_eq!((label, ticks), ("within", 0));
    assert_eq!(late, Duration::ZERO);
    let (label, late, ticks) = seen[2];
    assert_eq!((label, ticks), ("restart", 0));
    assert!(within(late, us * 700), "{late:?}");
    let stats = service.stats();
    assert!(within(stats.lateness_max, us * 750), "{stats:?}");
}

#[test]
fn item3_range_timers_fire_inside_the_window() {
    let (service, mut guard, clock) = embedded(1);
    let log = Log::default();
    // Miri: one poll per tick; the 5000..=9000 window alone takes an hour.
    let windows: &[(u32, u32)] = if cfg!(miri) {
        &[(10, 20), (100, 200), (7, 7)]
    } else {
        &[(10, 20), (100, 200), (5000, 9000), (7, 7)]
    };
    let _timers: Vec<_> = windows
        .iter()
        .enumerate()
        .map(|(i, &(a, b))| {
            service
                .schedule(TimerSpec::within(MS * a, MS * b), log.callback(i as u32))
                .unwrap()
        })
        .collect();
    step_ticks(&mut guard, &clock, if cfg!(miri) { 201 } else { 9001 });
    let fired = log.take();
    assert_eq!(fired.len(), windows.len());
    for &(i, deadline, _) in &fired {
        let (a, b) = windows[i as usize];
        assert!(
            (a as u64..=b as u64).contains(&deadline),
            "window {a}..={b}, fired at {deadline}"
        );
    }
    // The wheel picks the roundest tick: 16 in 10..=20, 128 in 100..=200,
    // 8192 in 5000..=9000 (a level-2 bucket start: no cascade at all).
    let mut chosen: Vec<(u32, u64)> = fired.iter().map(|&(i, d, _)| (i, d)).collect();
    chosen.sort_unstable();
    let expected: &[(u32, u64)] = if cfg!(miri) {
        &[(0, 16), (1, 128), (2, 7)]
    } else {
        &[(0, 16), (1, 128), (2, 8192), (3, 7)]
    };
    assert_eq!(chosen, expected);
    assert!(matches!(
        service.schedule(TimerSpec::within(MS * 2, MS), |_| {}),
        Err(TimerError::InvalidRange)
    ));
}

#[test]
fn item4_far_deadlines_saturate_and_the_clock_never_goes_back() {
    let (service, mut guard, clock) = embedded(1);
    let fired = Arc::new(AtomicUsize::new(0));
    let counter = fired.clone();
    let far = service
        .start(Duration::MAX, move |_| {
            counter.fetch_add(1, SeqCst);
        })
        .unwrap();
    clock.advance(Duration::from_secs(365 * 24 * 3600 * 100)); // a century
    guard.poll().unwrap();
    assert_eq!(fired.load(SeqCst), 0);
    assert!(far.is_armed());
    assert_eq!(far.stop(), Stop::Cancelled);

    let log = Log::default();
    let _t = service.start(MS * 5, log.callback(1)).unwrap();
    let before = clock.elapsed();
    clock.set(Duration::ZERO); // backwards: ignored
    assert_eq!(clock.elapsed(), before);
    guard.poll().unwrap();
    assert!(log.take().is_empty());

    // The end of the clock (u64::MAX nanoseconds, 584 years): deadlines
    // saturate at its last tick and fire when it is reached. A timer armed
    // after that tick was processed is due at it: the next poll fires it.
    let end_tick = u64::MAX / 1_000_000;
    let _huge = service.start(Duration::MAX, log.callback(2)).unwrap();
    clock.set(Duration::from_nanos(u64::MAX - 1_000_000_000)); // a second before
    guard.poll().unwrap();
    assert!(
        log.take().iter().all(|e| e.0 == 1),
        "nothing but timer 1 fires before the end"
    );
    clock.set(Duration::from_nanos(u64::MAX));
    guard.poll().unwrap();
    assert_eq!(log.take(), vec![(2, end_tick, end_tick)]);
    let late = service.start(Duration::ZERO, log.callback(3)).unwrap();
    let never = service.start(Duration::MAX, log.callback(4)).unwrap();
    guard.poll().unwrap();
    assert_eq!(
        log.take(),
        vec![(3, end_tick, end_tick), (4, end_tick, end_tick)]
    );
    assert_eq!(late.stop(), Stop::Fired);
    assert_eq!(never.stop(), Stop::Fired);
}

#[test]
fn item5_deadline_order_then_fifo_within_a_tick() {
    let (service, mut guard, clock) = embedded(1);
    let log = Log::default();
    let plan = [(30u32, 1u32), (10, 2), (30, 3), (10, 4), (20, 5), (10, 6)];
    let _timers: Vec<_> = plan
        .iter()
        .map(|&(d, label)| service.start(MS * d, log.callback(label)).unwrap())
        .collect();
    clock.advance(MS * 40); // one poll covers every deadline
    guard.poll().unwrap();
    let order: Vec<u32> = log.take().iter().map(|e| e.0).collect();
    assert_eq!(order, vec![2, 4, 6, 5, 1, 3]);
}

/// Timers armed far ahead sit in big buckets on levels 2 and 3, which
/// cascade from both ends of their lists at once (`Hierarchy::cascade`):
/// each level-0 bucket they land in must come out in arming order (the
/// cascade's order checks and the level-0 sort), or same-tick FIFO breaks.
/// Odd and even counts per bucket, so the two walks meet on one entry and
/// between two.
#[test]
fn item5_fifo_within_a_tick_after_cascades_from_high_levels() {
    let (service, mut guard, clock) = embedded(1);
    let log = Log::default();
    // More than 16 each: past those a cascade walks both ways.
    let per_bucket: &[u32] = if cfg!(miri) { &[21, 22] } else { &[301, 400] };
    let mut expected = Vec::new();
    let mut timers = Vec::new();
    let mut label = 0u32;
    // Level 2 (4096-tick buckets) and level 3 (262144-tick buckets).
    for (bucket_start, &count) in [3u32 << 12, 2 << 18].iter().zip(per_bucket) {
        for i in 0..count {
            // 13 ticks shared by many timers, in the bucket's first block
            // and further in (landing on level 0 and on level 1).
            let delay = bucket_start + (i * 7 % 13) * 100;
            expected.push((delay, label));
            timers.push(service.start(MS * delay, log.callback(label)).unwrap());
            label += 1;
        }
    }
    // By deadline, then by arming (`sort_by_key` is stable).
    expected.sort_by_key(|&(delay, _)| delay);
    clock.advance(MS * ((2 << 18) + 2000));
    guard.poll().unwrap();
    let fired: Vec<(u32, u32)> = log
        .take()
        .iter()
        .map(|&(label, deadline, _)| (deadline as u32, label))
        .collect();
    assert_eq!(fired, expected);
}

/// Restarts move timers among buckets (a move that stays in its bucket must
/// still count as the newest arming): every timer must fire exactly on its
/// last deadline, once, and timers due on one tick in the order of the calls
/// that last armed them. (Fails if a move within a bucket leaves the entry
/// where it is, as Ratas does.)
/// Deadlines are multiples of 64 ticks, so many timers share a tick, and
/// restarts move them later, earlier, or re-arm fired ones.
#[test]
fn item5_restarted_timers_keep_last_arming_order_within_a_tick() {
    let (service, mut guard, clock) = embedded(1);
    let log = Log::default();
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut random = move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    // Per timer: (deadline tick, arming number, fired).
    let mut model: Vec<(u64, u64, bool)> = Vec::new();
    let mut armings = 0u64;
    let mut now = 0u64;
    let mut timers = Vec::new();
    for label in 0..400u32 {
        let delay = 64 * (1 + random(40));
        armings += 1;
        model.push((now + delay, armings, false));
        timers.push(
            service
                .start(MS * delay as u32, log.callback(label))
                .unwrap(),
        );
    }
    let mut fired_total = 0;
    for _round in 0..300 {
        for _ in 0..8 {
            let i = random(timers.len() as u64) as usize;
            let delay = 64 * (1 + random(40));
            timers[i].restart(MS * delay as u32).unwrap();
            armings += 1;
            model[i] = (now + delay, armings, false);
        }
        let step = 16 * random(12);
        now += step;
        clock.advance(MS * step as u32);
        guard.poll().unwrap();
        let mut expected: Vec<(u64, u64, u32)> = model
            .iter()
            .enumerate()
            .filter(|(_, &(deadline, _, fired))| !fired && deadline <= now)
            .map(|(i, &(deadline, arming, _))| (deadline, arming, i as u32))
            .collect();
        expected.sort_unstable();
        let seen = log.take();
        let labels: Vec<u32> = seen.iter().map(|&(label, _, _)| label).collect();
        let want: Vec<u32> = expected.iter().map(|&(_, _, label)| label).collect();
        assert_eq!(labels, want, "fired set or order at tick {now}");
        for (&(label, deadline, at), &(want_deadline, _, _)) in seen.iter().zip(&expected) {
            assert_eq!(
                (deadline, at),
                (want_deadline, want_deadline),
                "timer {label}"
            );
            model[label as usize].2 = true;
        }
        fired_total += seen.len();
    }
    assert!(
        fired_total > 1000,
        "the workload fired too little: {fired_total}"
    );
}

#[test]
fn item6_now_reads_the_deadline_tick_inside_a_long_poll() {
    let (service, mut guard, clock) = embedded(1);
    let log = Log::default();
    let _timers: Vec<_> = [3u32, 9, 27]
        .iter()
        .map(|&d| service.start(MS * d, log.callback(d)).unwrap())
        .collect();
    clock.advance(MS * 100);
    guard.poll().unwrap();
    for (label, deadline, now) in log.take() {
        assert_eq!((deadline, now), (label as u64, label as u64));
    }
}

#[test]
fn item8_stop_outcomes() {
    let (service, mut guard, clock) = embedded(1);
    let t = service.start(MS * 2, |_| {}).unwrap();
    assert_eq!(t.stop(), Stop::Cancelled);
    assert_eq!(t.stop(), Stop::Inactive, "second stop");
    let t = service.start(MS * 2, |_| {}).unwrap();
    step_ticks(&mut guard, &clock, 2);
    assert_eq!(t.stop(), Stop::Fired);
    assert_eq!(t.stop(), Stop::Fired, "stays Fired until re-armed");
    // Running: the callback stops itself by id.
    let outcome = Arc::new(Mutex::new(None));
    let seen = outcome.clone();
    let t = service
        .start(MS, move |e| {
            let id = e.id();
            *seen.lock().unwrap() = Some(e.stop_id(id));
        })
        .unwrap();
    step_ticks(&mut guard, &clock, 1);
    assert_eq!(*outcome.lock().unwrap(), Some(Stop::Running));
    drop(t);
}

#[test]
fn item9_stop_sync_waits_for_a_callback_on_another_thread() {
    let service = TimerService::builder().shards(1).build().unwrap();
    let inside = Arc::new(AtomicUsize::new(0));
    let entered = Arc::new(AtomicUsize::new(0));
    let (flag, enter) = (inside.clone(), entered.clone());
    let t = service
        .start(MS, move |_| {
            flag.store(1, SeqCst);
            enter.store(1, SeqCst);
            std::thread::sleep(Duration::from_millis(50));
            flag.store(0, SeqCst);
        })
        .unwrap();
    let waited = Instant::now();
    while entered.load(SeqCst) == 0 {
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "callback never ran"
        );
        std::thread::yield_now();
    }
    assert_eq!(t.stop_sync(), StopSync::Fired);
    assert_eq!(
        inside.load(SeqCst),
        0,
        "stop_sync returned while the callback was running"
    );
}

#[test]
fn item9_stop_sync_from_own_callback_returns_at_once() {
    let (service, mut guard, clock) = embedded(1);
    let handle: Arc<Mutex<Option<tickwheel::Timer>>> = Arc::default();
    let outcome = Arc::new(Mutex::new(None));
    let (h, seen) = (handle.clone(), outcome.clone());
    let t = service
        .start_periodic(MS, move |_| {
            *seen.lock().unwrap() = h.lock().unwrap().as_ref().map(|t| t.stop_sync());
        })
        .unwrap();
    *handle.lock().unwrap() = Some(t);
    step_ticks(&mut guard, &clock, 1);
    assert_eq!(*outcome.lock().unwrap(), Some(StopSync::FromOwnCallback));
    assert_eq!(
        step_ticks(&mut guard, &clock, 5),
        0,
        "periodic re-armed after stop_sync"
    );
    handle.lock().unwrap().take();
}

#[test]
fn item10_restart_moves_or_rearms_and_fires_once_per_arming() {
    let (service, mut guard, clock) = embedded(1);
    let log = Log::default();
    let t = service.start(MS * 10, log.callback(1)).unwrap();
    step_ticks(&mut guard, &clock, 5);
    assert_eq!(t.restart(MS * 10).unwrap(), Restart::Moved); // now due at 15
    step_ticks(&mut guard, &clock, 9);
    assert!(
        log.take().is_empty(),
        "fired at the old deadline after a move"
    );
    step_ticks(&mut guard, &clock, 1);
    assert_eq!(log.take(), vec![(1, 15, 15)]);
    assert_eq!(t.restart(MS * 3).unwrap(), Restart::Rearmed);
    step_ticks(&mut guard, &clock, 3);
    assert_eq!(log.take(), vec![(1, 18, 18)]);
    // Earlier moves work too.
    assert_eq!(t.restart(MS * 50).unwrap(), Restart::Rearmed);
    assert_eq!(t.restart(MS * 2).unwrap(), Restart::Moved);
    step_ticks(&mut guard, &clock, 60);
    assert_eq!(log.take(), vec![(1, 20, 20)]);
}

#[test]
fn item11_callbacks_start_stop_restart_and_cannot_claim_their_shard() {
    let (service, mut guard, clock) = embedded(1);
    let log = Log::default();
    let victim = service.start(MS * 5, log.callback(99)).unwrap();
    let victim_id = victim.id();
    let claim = Arc::new(Mutex::new(None));
    let service2 = service.clone();
    let (inner_log, seen_claim) = (log.clone(), claim.clone());
    let mut rounds = 0;
    let _t = service
        .start(MS * 2, move |e| {
            rounds += 1;
            if rounds == 1 {
                assert_eq!(e.stop_id(victim_id), Stop::Cancelled);
                e.schedule(TimerSpec::after(MS), inner_log.callback(7))
                    .unwrap()
                    .forget();
                e.restart(MS * 3).unwrap(); // itself, again in 3 ticks
                *seen_claim.lock().unwrap() = Some(service2.claim_shard(0).map(|_| ()));
            }
        })
        .unwrap();
    step_ticks(&mut guard, &clock, 10);
    assert_eq!(log.take(), vec![(7, 3, 3)]);
    assert_eq!(*claim.lock().unwrap(), Some(Err(TimerError::ShardClaimed)));
    drop(victim);
}

#[test]
fn item12_periodic_is_drift_free_and_counts_overruns() {
    let (service, mut guard, clock) = embedded(1);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let t = service
        .start_periodic(MS * 10, move |e| {
            log.lock().unwrap().push((e.deadline_tick(), e.overruns()))
        })
        .unwrap();
    step_ticks(&mut guard, &clock, 30);
    clock.advance(MS * 45); // the owner stalls: 40, 50, 60, 70 are missed
    guard.poll().unwrap();
    step_ticks(&mut guard, &clock, 10);
    assert_eq!(
        *seen.lock().unwrap(),
        vec![(10, 0), (20, 0), (30, 0), (40, 3), (80, 0)],
        "one late fire for 40, then 50, 60, 70 skipped and counted, back on the grid at 80"
    );
    assert_eq!(service.stats().overruns, 3);
    drop(t);

    // Burst mode fires every missed period.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let base = clock.elapsed().as_millis() as u64;
    let _b = service
        .schedule(
            TimerSpec::after(MS * 10).every(MS * 10).burst(true),
            move |e| log.lock().unwrap().push(e.deadline_tick() - base),
        )
        .unwrap();
    clock.advance(MS * 35);
    guard.poll().unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![10, 20, 30]);
    assert!(matches!(
        service.schedule(TimerSpec::after(MS).every(Duration::ZERO), |_| {}),
        Err(TimerError::InvalidPeriod)
    ));
}

#[test]
fn item13_stopped_timers_are_reclaimed_at_the_next_poll_and_churn_stays_flat() {
    let (service, mut guard, clock) = embedded(1);
    let hour = Duration::from_secs(3600);
    let t = service.start(hour, |_| {}).unwrap();
    guard.poll().unwrap();
    assert_eq!(service.stats().armed, 1);
    drop(t); // stop + release
    guard.poll().unwrap();
    let stats = service.stats();
    assert_eq!(
        (stats.armed, stats.freed),
        (0, 1),
        "reclaimed at the next poll, not in an hour"
    );

    // Miri: 4 x 50 instead of 200 x 500 (the same path, far fewer times).
    let (rounds, per_round) = if cfg!(miri) { (4, 50) } else { (200, 500) };
    for round in 0..rounds {
        let batch: Vec<_> = (0..per_round)
            .map(|_| service.start(hour, |_| {}).unwrap())
            .collect();
        drop(batch);
        clock.advance(MS);
        guard.poll().unwrap();
        assert_eq!(service.stats().armed, 0, "round {round}");
    }
    let stats = service.stats();
    assert_eq!(stats.freed, 1 + rounds * per_round);
    assert!(
        stats.slots <= 1024,
        "100k start/stop pairs grew the arena to {} slots",
        stats.slots
    );
}

/// Shard 0's owner starts `n` one-hour timers and drops them (freed at
/// once, on its own thread), then lets go of the shard; another thread
/// (owning shard `claim`, or no shard) starts `others`. Returns the arena's
/// slots while those are armed.
fn arena_after_reuse(n: u64, others: u64, claim: Option<usize>) -> u64 {
    let (service, guard, _clock) = embedded(2);
    let hour = Duration::from_secs(3600);
    let batch: Vec<_> = (0..n)
        .map(|_| service.start(hour, |_| {}).unwrap())
        .collect();
    drop(batch);
    let freed = service.stats();
    assert_eq!((freed.armed, freed.freed), (0, n), "{freed:?}");
    drop(guard);
    let other = service.clone();
    std::thread::spawn(move || {
        let _guard = claim.map(|shard| other.claim_shard(shard).unwrap());
        let batch: Vec<_> = (0..others)
            .map(|_| other.start(hour, |_| {}).unwrap())
            .collect();
        let slots = other.stats().slots;
        drop(batch);
        slots
    })
    .join()
    .unwrap()
}

/// A thread that owns a shard batches its STOPs of another shard's timers
/// (`src/service/shard/stops.rs`): the stopped slots reach their owner, to
/// be freed, when the batch is full (32), at the end of the stopper's poll,
/// and when it lets go of its shard, never later; at most 32 wait. Fails
/// with any of the three pushes left out (the owner frees fewer).
#[test]
fn item13_batched_remote_stops_reach_their_owner() {
    use std::sync::mpsc::channel;
    let (service, mut guard, _clock) = embedded(2);
    let mut timers: Vec<_> = (0..50)
        .map(|_| service.start(MS * 100, |_| {}).unwrap())
        .collect();
    guard.poll().unwrap();
    let freed = |guard: &mut ShardGuard| {
        guard.poll().unwrap();
        service.stats().freed
    };
    let (to_stopper, steps) = channel::<(Vec<tickwheel::Timer>, bool)>();
    let (done, stepped) = channel();
    let stopper = {
        let service = service.clone();
        std::thread::spawn(move || {
            let mut own = service.claim_shard(1).unwrap();
            for (batch, poll) in steps {
                for timer in batch {
                    assert_eq!(timer.cancel(), Stop::Cancelled);
                }
                if poll {
                    own.poll().unwrap();
                }
                done.send(()).unwrap();
            }
        })
    };
    let mut step = |n: usize, poll: bool| {
        to_stopper
            .send((timers.drain(..n).collect(), poll))
            .unwrap();
        stepped.recv().unwrap();
    };
    step(5, false);
    assert_eq!(
        freed(&mut guard),
        0,
        "five stops wait in the stopper's batch"
    );
    step(0, true);
    assert_eq!(freed(&mut guard), 5, "the stopper's poll pushes its batch");
    step(35, false);
    assert_eq!(freed(&mut guard), 37, "a full batch goes at once; 3 wait");
    step(2, false);
    drop(to_stopper);
    stopper.join().unwrap();
    assert_eq!(
        freed(&mut guard),
        42,
        "letting go of the shard pushes the rest"
    );
    assert_eq!(service.stats().armed, 8);
}

/// An owner keeps a bounded number of the slots it freed for its own
/// STARTs and sets the rest aside, so another shard's STARTs reuse them
/// instead of growing the arena (the bound: `LOCAL_FREE_MIN` and
/// `LOCAL_FREE_MAX` in `src/service/shard/free.rs`, at most 4,096 + 256
/// slots).
#[test]
fn item13_an_owners_surplus_free_slots_serve_other_shards() {
    // Miri: the same path with fewer slots (2,000 freed still pass the
    // first cap of 1,280).
    let (n, others): (u64, u64) = if cfg!(miri) {
        (2_000, 1_000)
    } else {
        (24_000, 19_000)
    };
    let slots = arena_after_reuse(n, others, Some(1));
    assert!(
        slots <= n + 512,
        "shard 1 grew the arena to {slots} slots while shard 0 held {n} free"
    );
}

/// The slot index an id names (its low 28 bits: see `TimerId`).
fn slot_index(timer: &tickwheel::Timer) -> u64 {
    timer.id().to_raw() & ((1 << 28) - 1)
}

/// An owner whose kept free slots run out takes back the slots it set
/// aside itself, not those another shard set aside since (their lines are
/// in that owner's cache: `src/service/shard/free.rs`). Fails when owners
/// spill onto one shared stack: shard 0 then takes shard 1's newer chunks.
#[test]
fn item13_an_owner_takes_back_its_own_set_aside_slots_first() {
    let (service, guard, _clock) = embedded(2);
    let hour = Duration::from_secs(3600);
    // Well past what an owner keeps (1,280), so that both spill chunks.
    // Under miri, just past the first spill (at 1,537 freed).
    let n = if cfg!(miri) { 1_600 } else { 6_000 };
    let mine: Vec<_> = (0..n)
        .map(|_| service.start(hour, |_| {}).unwrap())
        .collect();
    let my_slots: std::collections::HashSet<u64> = mine.iter().map(slot_index).collect();
    let (armed, release) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let _guard = service.claim_shard(1).unwrap();
            let theirs: Vec<_> = (0..n)
                .map(|_| service.start(hour, |_| {}).unwrap())
                .collect();
            armed.wait();
            // Shard 0 has set its surplus aside; shard 1's goes on top.
            release.wait();
            drop(theirs);
        });
        armed.wait();
        drop(mine);
        release.wait();
    });
    // All but the last freed, which rest before reuse (`ROTATION`).
    let again: Vec<_> = (0..n - 100)
        .map(|_| service.start(hour, |_| {}).unwrap())
        .collect();
    let foreign = again
        .iter()
        .filter(|timer| !my_slots.contains(&slot_index(timer)))
        .count();
    assert_eq!(foreign, 0, "{foreign} STARTs took another shard's slots");
    drop(again);
    drop(guard);
}

/// A thread that owns no shard reuses the slots owners set aside before
/// the arena grows (all but the few an owner keeps for itself).
#[test]
fn item13_set_aside_slots_serve_threads_that_own_no_shard() {
    let (n, others): (u64, u64) = if cfg!(miri) {
        (2_000, 600)
    } else {
        (6_000, 4_000)
    };
    let slots = arena_after_reuse(n, others, None);
    assert!(
        slots <= n + 512,
        "a thread that owns no shard grew the arena to {slots} slots while {n} were free"
    );
}

/// An owner's START leaves a few stops queued by other threads to its next
/// poll, but not without bound: an owner that keeps starting timers and
/// never polls takes the stops in once they pass the reclaim bound, so the
/// arena stays near the live timers.
#[test]
fn item13_an_owner_that_starts_without_polling_still_reclaims_remote_stops() {
    let (service, _guard, _clock) = embedded(1);
    let hour = Duration::from_secs(3600);
    let (rounds, batch) = if cfg!(miri) { (12, 100) } else { (100, 100) };
    for _ in 0..rounds {
        let timers: Vec<_> = (0..batch)
            .map(|_| service.start(hour, |_| {}).unwrap())
            .collect();
        std::thread::spawn(move || {
            for timer in timers {
                assert_eq!(timer.cancel(), tickwheel::Stop::Cancelled);
            }
        })
        .join()
        .unwrap();
    }
    let stats = service.stats();
    assert_eq!(stats.armed, 0, "{stats:?}");
    // Live at most one batch; queued stops at most the bound (64 while the
    // wheel is empty) plus the batch that crossed it.
    assert!(
        stats.slots <= 3 * batch + 256,
        "{} slots after {} remote stops with the owner starting but never polling: {stats:?}",
        stats.slots,
        rounds * batch
    );
}

#[test]
fn item14_stale_and_garbage_handles_are_inactive() {
    let (service, mut guard, clock) = embedded(1);
    let t = service.start(MS, |_| {}).unwrap();
    let id = t.id();
    drop(t);
    guard.poll().unwrap();
    // The owner reuses the freed slot that has rested longest (see
    // `tests/generations.rs`): start timers until one lands on the old slot.
    let mut others = Vec::new();
    let reuse = loop {
        let timer = service.start(MS * 5, |_| {}).unwrap();
        if timer.id().to_raw() & 0x0FFF_FFFF == id.to_raw() & 0x0FFF_FFFF {
            break timer;
        }
        assert!(others.len() < 1000, "the freed slot was never reused");
        others.push(timer);
    };
    assert_eq!(service.stop_id(id), Stop::Inactive);
    assert!(
        reuse.is_armed(),
        "the stale id reached the slot's new timer"
    );
    // Ids are `gen << 36 | service tag << 28 | slot index`.
    assert_eq!(
        reuse.id().to_raw(),
        id.to_raw() + (1 << 36),
        "same slot, next generation"
    );
    for raw in [
        0u64,
        1,
        u64::MAX,
        0xdead_beef_0000_0000,
        id.to_raw() + (2 << 36),
        id.to_raw() ^ (1 << 28), // another service's tag
    ] {
        assert_eq!(
            service.stop_id(TimerId::from_raw(raw)),
            Stop::Inactive,
            "raw {raw:#x}"
        );
    }
    step_ticks(&mut guard, &clock, 5);
    assert_eq!(reuse.stop(), Stop::Fired);
    drop(others);
}

/// The handles an owner makes and drops are counted in its shard's core, in
/// credits taken 64 at a time and drops paid 64 at a time
/// (`src/service/shard/credits.rs`): the service's memory must still last
/// exactly as long as its last handle, whatever is left in the cores when
/// it shuts down. The service is observed through its panic hook, which it
/// drops only when its memory goes. Fails with the settling of the cores
/// left out of the guard's drop or of the shutdown sweep (the service is
/// never freed), or with the credits not counted on the service's counters
/// (freed under live handles).
#[test]
fn item15_handles_counted_by_owners_keep_the_service_until_the_last_goes() {
    for owner_lets_go_first in [false, true] {
        let hook = Arc::new(());
        let held = hook.clone();
        let clock = ManualClock::new();
        let service = TimerService::builder()
            .shards(2)
            .tick(MS)
            .driver(Driver::Embedded)
            .clock(Clock::Manual(clock.clone()))
            .panic_hook(move |_| {
                let _keep = &held;
            })
            .build()
            .unwrap();
        let alive = || Arc::strong_count(&hook) == 2;
        let guard = service.claim_shard(0).unwrap();
        // 70 handles made by shard 0's owner: a refill of credits and then
        // some; it drops 3 of them itself (owed, not yet counted).
        let mut timers: Vec<_> = (0..70)
            .map(|_| service.start(MS * 50, |_| {}).unwrap())
            .collect();
        for t in timers.drain(..3) {
            assert_eq!(t.cancel(), Stop::Cancelled);
        }
        // The owner of shard 1, on another thread, drops 5 more (owed on
        // shard 1's core, settled when it lets go) and keeps a handle of
        // its own.
        let mine: Vec<_> = timers.drain(..5).collect();
        let other = {
            let service = service.clone();
            std::thread::spawn(move || {
                let _owner = service.claim_shard(1).unwrap();
                drop(mine);
                service.start(MS * 50, |_| {}).unwrap()
            })
            .join()
            .unwrap()
        };
        if owner_lets_go_first {
            drop(guard);
            drop(service);
        } else {
            // Shut down while shard 0's owner still holds its credits; it
            // sweeps and settles them when it lets go.
            drop(service);
            assert!(alive(), "freed while the owner holds its shard");
            drop(guard);
        }
        assert!(alive(), "freed under {} live handles", timers.len() + 1);
        assert_eq!(other.stop(), Stop::Inactive);
        drop(other);
        let last = timers.pop().unwrap();
        drop(timers);
        assert!(alive(), "freed under the last live handle");
        assert_eq!(last.stop(), Stop::Inactive);
        drop(last);
        assert_eq!(
            Arc::strong_count(&hook),
            1,
            "the service outlived its last handle ({owner_lets_go_first})"
        );
    }
}

#[test]
fn item15_shutdown_drops_pending_callbacks_unrun() {
    struct Dropped(Arc<AtomicUsize>);
    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
        }
    }
    let (service, guard, clock) = embedded(2);
    let (runs, drops) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let timers: Vec<_> = (0..10)
        .map(|i| {
            let (runs, token) = (runs.clone(), Dropped(drops.clone()));
            service
                .schedule(TimerSpec::after(MS).on_shard(i % 2), move |_| {
                    let _keep = &token;
                    runs.fetch_add(1, SeqCst);
                })
                .unwrap()
        })
        .collect();
    drop(guard);
    clock.advance(MS * 10);
    service.shutdown();
    assert_eq!(runs.load(SeqCst), 0);
    assert_eq!(
        drops.load(SeqCst),
        10,
        "pending callbacks dropped at shutdown"
    );
    for t in &timers {
        assert_eq!(t.stop(), Stop::Inactive);
        assert_eq!(t.restart(MS), Err(TimerError::Shutdown));
    }
    assert!(matches!(
        service.start(MS, |_| {}),
        Err(TimerError::Shutdown)
    ));
    assert!(matches!(service.claim_shard(0), Err(TimerError::Shutdown)));
}

#[test]
fn item16_a_panicking_callback_is_caught_counted_and_reported() {
    let clock = ManualClock::new();
    let reports = Arc::new(Mutex::new(Vec::new()));
    let sink = reports.clone();
    let service = TimerService::builder()
        .shards(1)
        .driver(Driver::Embedded)
        .clock(Clock::Manual(clock.clone()))
        .panic_hook(move |report| sink.lock().unwrap().push(report.message.clone()))
        .build()
        .unwrap();
    let mut guard = service.claim_shard(0).unwrap();
    let log = Log::default();
    let _bad = service.start(MS, |_| panic!("boom")).unwrap();
    let _good = service.start(MS, log.callback(1)).unwrap();
    let _later = service.start(MS * 2, log.callback(2)).unwrap();
    step_ticks(&mut guard, &clock, 2);
    assert_eq!(*reports.lock().unwrap(), vec!["boom".to_owned()]);
    assert_eq!(service.stats().panics, 1);
    assert_eq!(
        log.take().iter().map(|e| e.0).collect::<Vec<_>>(),
        vec![1, 2]
    );
}

#[test]
fn driver_threads_wake_for_an_earlier_start() {
    let service = TimerService::builder().shards(1).build().unwrap();
    let _far = service.start(Duration::from_secs(3600), |_| {}).unwrap();
    std::thread::sleep(Duration::from_millis(20)); // let the driver go to sleep for an hour
    let fired = Arc::new(AtomicUsize::new(0));
    let counter = fired.clone();
    let _soon = service
        .start(MS * 2, move |_| {
            counter.fetch_add(1, SeqCst);
        })
        .unwrap();
    let waited = Instant::now();
    while fired.load(SeqCst) == 0 {
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "the sleeping driver was never woken"
        );
        std::thread::sleep(MS);
    }
}

#[test]
fn a_service_dropped_right_after_build_stops_its_driver_threads() {
    // The drop shuts the service down and joins its drivers, which may not
    // have started yet: the shutdown must still wake each of them (under
    // miri this deadlocked when a driver recorded its own handle).
    for shards in [1, 2] {
        let service = TimerService::builder().shards(shards).build().unwrap();
        assert_eq!(service.shard_count(), shards);
        drop(service);
    }
}

#[test]
fn the_default_tick_is_500_us_with_driver_threads_and_1_ms_embedded() {
    let threads = TimerService::builder().shards(1).build().unwrap();
    assert_eq!(threads.tick(), Duration::from_micros(500));
    let embedded = TimerService::builder()
        .shards(1)
        .driver(Driver::Embedded)
        .build()
        .unwrap();
    assert_eq!(embedded.tick(), MS);
    let chosen = TimerService::builder()
        .shards(1)
        .tick(Duration::from_micros(250))
        .build()
        .unwrap();
    assert_eq!(chosen.tick(), Duration::from_micros(250));
}

#[test]
fn bad_configuration_is_refused() {
    for builder in [
        TimerService::builder().shards(0),
        TimerService::builder().shards(5000),
        TimerService::builder().tick(Duration::from_micros(1)),
    ] {
        assert_eq!(builder.build().unwrap_err(), TimerError::InvalidConfig);
    }
    let (service, _guard, _clock) = embedded(2);
    assert!(matches!(
        service.claim_shard(0),
        Err(TimerError::ShardClaimed)
    ));
    assert!(matches!(
        service.claim_shard(2),
        Err(TimerError::ShardOutOfRange)
    ));
    assert!(matches!(
        service.schedule(TimerSpec::after(MS).on_shard(9), |_| {}),
        Err(TimerError::ShardOutOfRange)
    ));
}

#[test]
fn public_types_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<TimerService>();
    assert_send_sync::<tickwheel::Timer>();
    assert_send_sync::<TimerId>();
    assert_send_sync::<TimerError>();
}

/// Item 8 for `Timer::cancel`: STOP and RELEASE in one transition give the
/// same outcomes as `stop()` then drop, and item 13: the slot is reclaimed by
/// the owner's next poll.
#[test]
fn item8_cancel_is_stop_and_release_in_one() {
    let (service, mut guard, clock) = embedded(1);
    let log = Log::default();

    // Armed: Cancelled, never fires, memory back at the next poll.
    let armed = service.start(5 * MS, log.callback(1)).unwrap();
    let id = armed.id();
    assert_eq!(armed.cancel(), Stop::Cancelled);
    assert_eq!(service.stop_id(id), Stop::Inactive, "the id is stale");
    guard.poll().unwrap();
    assert_eq!(service.stats().armed, 0);
    step_ticks(&mut guard, &clock, 10);
    assert!(log.take().is_empty(), "a cancelled timer fired");

    // Fired: Fired.
    let fired = service.start(MS, log.callback(2)).unwrap();
    step_ticks(&mut guard, &clock, 2);
    assert_eq!(log.take().len(), 1);
    assert_eq!(fired.cancel(), Stop::Fired);

    // Stopped before: Inactive.
    let stopped = service.start(MS, log.callback(3)).unwrap();
    assert_eq!(stopped.stop(), Stop::Cancelled);
    assert_eq!(stopped.cancel(), Stop::Inactive);

    // Periodic: cancelled for good.
    let periodic = service.start_periodic(2 * MS, log.callback(4)).unwrap();
    step_ticks(&mut guard, &clock, 3);
    assert_eq!(log.take().len(), 1);
    assert_eq!(periodic.cancel(), Stop::Cancelled);
    step_ticks(&mut guard, &clock, 10);
    assert!(
        log.take().is_empty(),
        "a cancelled periodic timer fired again"
    );

    // Every slot freed: the four timers' slots are all back for reuse.
    guard.poll().unwrap();
    let stats = service.stats();
    assert_eq!(stats.armed, 0);
    assert_eq!(stats.freed, 4, "{stats:?}");
}
