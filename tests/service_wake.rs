//! The owner's sleep/wake handshake, prompt reclamation while it sleeps, the
//! shutdown sweep against callbacks that drop handles, ids used on the wrong
//! service, stops during a running callback, and what waits for an owner
//! that falls behind (CONTRACT items 8, 9, 13, 14, 15, 20 and 21). Each
//! test names the contract item it guards.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use tickwheel::{Clock, Driver, ManualClock, Stop, TimerService};

const MS: Duration = Duration::from_millis(1);
const HOUR: Duration = Duration::from_secs(3600);

/// Counts drops of the captures of the callbacks that hold one.
#[derive(Clone, Default)]
struct Drops(Arc<AtomicUsize>);

struct Capture(Arc<AtomicUsize>);

impl Drop for Capture {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

impl Drops {
    fn callback(&self) -> impl FnMut(&mut tickwheel::Expiry<'_>) + Send + 'static {
        let capture = Capture(self.0.clone());
        move |_| {
            let _ = &capture;
        }
    }

    fn count(&self) -> usize {
        self.0.load(SeqCst)
    }

    /// Waits (a liveness bound, not a speed goal) until `n` captures are gone.
    fn wait_for(&self, n: usize, within: Duration) -> bool {
        let end = Instant::now() + within;
        while self.count() < n {
            if Instant::now() > end {
                return false;
            }
            std::thread::sleep(MS);
        }
        true
    }
}

fn threaded(shards: usize) -> TimerService {
    TimerService::builder()
        .shards(shards)
        .tick(MS)
        .driver(Driver::Threads { pin: false })
        .build()
        .unwrap()
}

/// One embedded shard on a manual clock, claimed by this thread: an owner
/// that polls only when the test says so.
fn manual_owner(clock: &ManualClock) -> (TimerService, tickwheel::ShardGuard) {
    let service = TimerService::builder()
        .shards(1)
        .tick(MS)
        .driver(Driver::Embedded)
        .clock(Clock::Manual(clock.clone()))
        .build()
        .unwrap();
    let guard = service.claim_shard(0).unwrap();
    (service, guard)
}

/// CONTRACT 21 and 13 for STOPs: a remote STOP of an armed timer is one CAS
/// on the timer's slot, and leaves the slot for its owner to reclaim. It
/// wakes a sleeping owner only when reclaim is due, when the stopped timers
/// left in the wheel pass a third of it plus 64; that wake is the sleep's
/// only one, and the owner's next poll sweeps every stopped timer out.
/// (Before lazy reclaim every remote stop woke a sleeping owner.)
#[test]
fn item21_remote_stops_wake_a_sleeping_owner_only_when_reclaim_is_due() {
    const TIMERS: usize = 300;
    // `reclaim_due` in shard.rs: queued > 64 + linked / 3.
    const WAKING_STOP: usize = 64 + TIMERS / 3 + 1;
    let (service, wakes) = counted_wakes();
    let mut guard = service.claim_shard(0).unwrap();
    let drops = Drops::default();
    let timers: Vec<_> = (0..TIMERS)
        .map(|_| service.start(HOUR, drops.callback()).unwrap())
        .collect();
    guard.poll().unwrap();
    assert!(guard.next_deadline().is_some_and(|d| d > MS), "asleep");
    let remote_wakes = wakes.clone();
    let woken_at = std::thread::spawn(move || {
        let mut woken_at = Vec::new();
        for (i, timer) in timers.into_iter().enumerate() {
            assert_eq!(timer.cancel(), Stop::Cancelled);
            if remote_wakes.load(SeqCst) > woken_at.len() {
                woken_at.push(i + 1);
            }
        }
        woken_at
    })
    .join()
    .unwrap();
    assert_eq!(woken_at, vec![WAKING_STOP], "the stops that woke the owner");
    assert_eq!(
        drops.count(),
        0,
        "nothing is reclaimed before the owner polls"
    );
    guard.poll().unwrap();
    assert_eq!(drops.count(), TIMERS, "the poll took in every stop");
    assert_eq!(service.stats().armed, 0);
}

/// CONTRACT 13 on real threads: three driver shards, three operator threads
/// that start, stop and drop hour-long timers; after every round the
/// stopped timers not yet reclaimed stay within the bound (64 per shard plus
/// a third of its wheel: at most 96 per shard with nothing else armed),
/// while the owners sleep.
#[test]
fn item13_stopped_timers_are_reclaimed_within_the_bound_while_owners_sleep() {
    let service = threaded(3);
    let drops = Drops::default();
    let mut expected: usize = 0;
    for round in 0..20 {
        let barrier = Arc::new(Barrier::new(3));
        let workers: Vec<_> = (0..3)
            .map(|t| {
                let service = service.clone();
                let drops = drops.clone();
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    let timers: Vec<_> = (0..50)
                        .map(|i| {
                            let spec = tickwheel::TimerSpec::after(HOUR + (i + t) * MS)
                                .on_shard((i as usize + t as usize) % 3);
                            service.schedule(spec, drops.callback()).unwrap()
                        })
                        .collect();
                    for (i, timer) in timers.iter().enumerate() {
                        if i % 2 == 0 {
                            assert_eq!(timer.stop(), Stop::Cancelled);
                        }
                    }
                    drop(timers);
                })
            })
            .collect();
        for worker in workers {
            worker.join().unwrap();
        }
        expected += 150;
        assert!(
            drops.wait_for(expected.saturating_sub(3 * 96), Duration::from_secs(5)),
            "round {round}: {} of {expected} timers reclaimed",
            drops.count()
        );
    }
}

/// CONTRACT 15: during the shutdown sweep, dropping a callback that holds
/// the handle of another, not yet swept timer of the same shard releases
/// that timer inline. The sweep must not then unlink it from the emptied
/// wheel ("attempt to subtract with overflow"), which aborts the sweep:
/// every capture is dropped once.
#[test]
fn item15_the_shutdown_sweep_survives_callbacks_that_drop_handles() {
    let (service, mut guard) = manual_owner(&ManualClock::new());
    let drops = Drops::default();
    // Slot order is allocation order: each holder is swept before the timer
    // whose handle it holds.
    let mut holders = Vec::new();
    for _ in 0..8 {
        let holder_capture = Capture(drops.0.clone());
        let held_slot = Arc::new(std::sync::Mutex::new(None));
        let slot = held_slot.clone();
        let holder = service
            .start(HOUR, move |_| {
                let _ = (&holder_capture, &slot);
            })
            .unwrap();
        let held = service.start(2 * HOUR, drops.callback()).unwrap();
        *held_slot.lock().unwrap() = Some(held);
        holders.push(holder);
    }
    guard.poll().unwrap();
    // The holders' handles go too, so that only the callbacks hold the
    // others: the sweep must free all 16 and drop all 16 captures.
    for holder in holders {
        holder.forget();
    }
    service.shutdown();
    assert_eq!(guard.poll(), Err(tickwheel::TimerError::Shutdown));
    assert_eq!(drops.count(), 16, "every capture dropped by the sweep");
    drop(guard);
    assert_eq!(service.stats().armed, 0);
}

/// CONTRACT 14: an id of one service, used on another, is refused. The
/// first timers of two services are where ids would collide without the
/// service's tag in the id.
#[test]
fn item14_an_id_used_on_the_wrong_service_is_refused() {
    let a = threaded(1);
    let b = threaded(1);
    let timer_a = a.start(HOUR, |_| {}).unwrap();
    let timer_b = b.start(HOUR, |_| {}).unwrap();
    assert_ne!(timer_a.id(), timer_b.id());
    assert_eq!(b.stop_id(timer_a.id()), Stop::Inactive);
    assert_eq!(a.stop_id(timer_b.id()), Stop::Inactive);
    assert!(timer_a.is_armed() && timer_b.is_armed());
    assert_eq!(b.stop_id(timer_b.id()), Stop::Cancelled);
    assert_eq!(timer_a.cancel(), Stop::Cancelled);
}

/// CONTRACT 8 and 12: stops during a running callback all report `Running`
/// and do not move the arming sequence (which must not lap); a periodic
/// timer stopped that way is not re-armed.
#[test]
fn item8_repeated_stops_during_a_callback_all_report_running() {
    let service = threaded(1);
    let entered = Arc::new(Barrier::new(2));
    let leave = Arc::new(Barrier::new(2));
    let (e, l) = (entered.clone(), leave.clone());
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let timer = service
        .start_periodic(MS, move |_| {
            if counter.fetch_add(1, SeqCst) == 0 {
                e.wait();
                l.wait();
            }
        })
        .unwrap();
    entered.wait();
    for _ in 0..10_000 {
        assert_eq!(timer.stop(), Stop::Running);
    }
    leave.wait();
    let end = Instant::now() + Duration::from_secs(5);
    while timer.stop() == Stop::Running && Instant::now() < end {
        std::thread::sleep(MS);
    }
    std::thread::sleep(20 * MS);
    assert_eq!(timer.stop(), Stop::Fired);
    assert_eq!(
        runs.load(SeqCst),
        1,
        "a halted periodic timer is not re-armed"
    );
}

/// CONTRACT 20 with CONTRACT 7: what waits for an owner that does not poll
/// is bounded by the live timers, whatever producers do. Two threads that
/// own no shard start and cancel timers of a shard whose embedded owner
/// never polls while they run: each START queues its slot for the owner,
/// each cancel leaves it there, and the thread's next START reuses that
/// slot in place (`Inner::revive`), so the arena holds a few slots however
/// many pairs run (without the reuse, every START would hold a slot of its
/// own until the owner polls: 100,000 here). Nothing is lost: when the owner polls, every
/// timer is accounted for as freed.
#[test]
fn item20_a_stalled_owner_holds_one_slot_per_canceller() {
    const PAIRS: usize = 50_000;
    let (service, mut guard) = manual_owner(&ManualClock::new());
    let slots_before = service.stats().slots;
    let cancellers: Vec<_> = (0..2)
        .map(|_| {
            let remote = service.clone();
            std::thread::spawn(move || {
                let mut most = 0;
                for _ in 0..PAIRS {
                    let timer = remote.start(HOUR, |_| {}).unwrap();
                    assert_eq!(timer.cancel(), Stop::Cancelled);
                    most = most.max(remote.stats().slots);
                }
                most
            })
        })
        .collect();
    let most = cancellers
        .into_iter()
        .map(|t| t.join().unwrap())
        .max()
        .unwrap();
    // One slot per canceller, plus what the arena hands out at a time.
    assert!(
        most <= slots_before + 64,
        "{PAIRS} pairs from each of 2 threads grew the arena from {slots_before} to {most} slots"
    );
    assert_eq!(service.stats().held_back, 0, "nobody waited");
    guard.poll().unwrap();
    let stats = service.stats();
    assert_eq!(stats.armed, 0);
    assert_eq!(stats.freed as usize, 2 * PAIRS, "every timer accounted for");
}

/// A START that reuses the slot of this thread's own cancelled START (still
/// queued for an owner that has not polled) ends the old timer's captures
/// there, once each; the last one goes when the owner takes the slot in.
/// Nothing fires, and every capture is dropped exactly once.
#[test]
fn a_reused_slot_drops_each_old_capture_once() {
    const PAIRS: usize = 1_000;
    let (service, mut guard) = manual_owner(&ManualClock::new());
    let drops = Drops::default();
    let remote = service.clone();
    let callbacks = drops.clone();
    std::thread::spawn(move || {
        for _ in 0..PAIRS {
            let timer = remote.start(HOUR, callbacks.callback()).unwrap();
            assert_eq!(timer.cancel(), Stop::Cancelled);
        }
    })
    .join()
    .unwrap();
    // The owner has not polled: what is not dropped yet is what its queue
    // still holds, one slot per canceller (and what the arena hands out at
    // a time), so the reuses dropped the rest.
    let before = drops.count();
    assert!(
        before >= PAIRS - 64,
        "only {before} of {PAIRS} captures dropped before the owner polled: slots not reused"
    );
    guard.poll().unwrap();
    assert_eq!(drops.count(), PAIRS, "every capture dropped exactly once");
    assert_eq!(service.stats().fired, 0, "a cancelled timer never fires");
}

/// CONTRACT 20 with CONTRACT 7: a RESTART from another thread travels to
/// the owner in a slot of its own (a proxy), so restarts against an owner
/// that does not poll are what the remote queue's bound holds back: past
/// 1024 queued entries each one waits for a moment (counted in
/// `Stats::held_back`) but is never blocked, so the thread finishes
/// although the owner never polls. When the owner polls, the newest
/// restart is the one armed.
#[test]
fn item20_remote_restarts_are_slowed_not_blocked_when_an_owner_falls_behind() {
    const LIMIT: usize = 1 << 10;
    const RESTARTS: usize = LIMIT + 1000;
    let clock = ManualClock::new();
    let (service, mut guard) = manual_owner(&clock);
    let fired = std::sync::Arc::new(AtomicUsize::new(0));
    let count = fired.clone();
    let timer = service
        .start(HOUR, move |_| {
            count.fetch_add(1, SeqCst);
        })
        .unwrap();
    let timer = std::thread::spawn(move || {
        for i in 0..RESTARTS {
            let delay = if i + 1 == RESTARTS { 5 * MS } else { HOUR };
            timer.restart(delay).unwrap();
        }
        timer
    })
    .join()
    .unwrap();
    let held = service.stats().held_back as usize;
    assert!(
        held >= RESTARTS - LIMIT - 64,
        "{held} restarts held back for {} over the bound",
        RESTARTS - LIMIT
    );
    guard.poll().unwrap();
    assert_eq!(service.stats().armed, 1);
    clock.advance(5 * MS);
    assert_eq!(guard.poll(), Ok(1), "the newest restart is the one armed");
    assert_eq!(fired.load(SeqCst), 1);
    assert_eq!(timer.stop(), Stop::Fired);
}

/// Lending: while an embedded owner sleeps in `ShardGuard::idle`, a START
/// from another thread is queued for it (not applied: a START + cancel then
/// reuses its slot in place, `Inner::revive`), and so is a STOP; the release
/// of the stopped timer enters the lent shard and takes the queue in, as the
/// owner would: the START is in the wheel and the stopped timer freed before
/// the owner looks.
#[test]
fn a_lent_shard_takes_queued_work_in_when_a_release_enters_it() {
    let service = TimerService::builder()
        .shards(1)
        .driver(Driver::Embedded)
        .clock(Clock::Manual(ManualClock::new()))
        .build()
        .unwrap();
    let mut guard = service.claim_shard(0).unwrap();
    let long = service.start(Duration::from_secs(3600), |_| {}).unwrap();
    guard.poll().unwrap();
    assert_eq!(service.stats().freed, 0);
    let (queued, freed_inside, armed_inside, started) = guard.idle(|sleep| {
        // Lent only for a real sleep (at most until the hour-long timer,
        // earlier where it must move down the wheel's levels).
        assert!(
            sleep.is_some_and(|sleep| sleep > Duration::ZERO && sleep <= Duration::from_secs(3600))
        );
        let service = service.clone();
        std::thread::spawn(move || {
            let started = service
                .schedule(
                    tickwheel::TimerSpec::after(Duration::from_secs(5)).on_shard(0),
                    |_| {},
                )
                .unwrap();
            assert_eq!(long.stop(), Stop::Cancelled);
            // Both queued: only the hour-long timer is in the wheel.
            let queued = service.stats().armed;
            drop(long);
            let stats = service.stats();
            (queued, stats.freed, stats.armed, started)
        })
        .join()
        .unwrap()
    });
    assert_eq!(queued, 1, "a remote START is queued, not applied");
    assert_eq!(
        (freed_inside, armed_inside),
        (1, 1),
        "the release did not take the queue in while the shard was lent"
    );
    assert_eq!(guard.armed(), 1);
    assert_eq!(service.stats().freed, 1);
    drop(started);
}

/// A panic inside `ShardGuard::idle`'s park closure gives the shard back to
/// its owner (it is not left lent, and not given up while a helper may be
/// inside): another thread cannot claim it, and the owner can poll it.
#[test]
fn a_panic_while_lent_gives_the_shard_back_to_its_owner() {
    let service = TimerService::builder()
        .shards(1)
        .driver(Driver::Embedded)
        .build()
        .unwrap();
    let mut guard = service.claim_shard(0).unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        guard.idle(|_| panic!("inside park"));
    }));
    assert!(result.is_err());
    let other = service.clone();
    let claimed = std::thread::spawn(move || other.claim_shard(0).map(|_| ()))
        .join()
        .unwrap();
    assert_eq!(claimed, Err(tickwheel::TimerError::ShardClaimed));
    let timer = service.start(Duration::from_millis(1), |_| {}).unwrap();
    let give_up = Instant::now() + Duration::from_secs(10);
    while guard.poll().unwrap() == 0 {
        assert!(
            Instant::now() < give_up,
            "the owner cannot fire its own timer"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(timer);
}

/// `Builder::lend_while_idle(false)`: driver threads keep their shards while
/// they sleep, so other threads' operations go through the remote queue; a
/// start due before the driver's sleep still fires, and the timer stopped
/// before it is reclaimed when that poll meets it (its deadline is the
/// driver's to wait for, and the stop woke nobody).
#[test]
fn drivers_that_do_not_lend_still_reclaim_and_fire() {
    let service = TimerService::builder()
        .shards(1)
        .lend_while_idle(false)
        .build()
        .unwrap();
    let long = service.start(Duration::from_secs(3600), |_| {}).unwrap();
    let give_up = Instant::now() + Duration::from_secs(30);
    while service.stats().armed != 1 {
        assert!(
            Instant::now() < give_up,
            "the driver never took the timer in"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(long.cancel(), Stop::Cancelled);
    assert_eq!(service.stats().armed, 1, "left for the owner to reclaim");
    let fired = Arc::new(AtomicUsize::new(0));
    let counter = fired.clone();
    let soon = service
        .start(Duration::from_millis(2), move |_| {
            counter.fetch_add(1, SeqCst);
        })
        .unwrap();
    let give_up = Instant::now() + Duration::from_secs(30);
    while fired.load(SeqCst) != 1 {
        assert!(
            Instant::now() < give_up,
            "not reclaimed or not fired: {:?}, fired {}",
            service.stats(),
            fired.load(SeqCst)
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(soon);
}

/// A service whose embedded owner is woken through a counting waker.
fn counted_wakes() -> (TimerService, Arc<AtomicUsize>) {
    let wakes = Arc::new(AtomicUsize::new(0));
    let counter = wakes.clone();
    let service = TimerService::builder()
        .shards(1)
        .tick(MS)
        .driver(Driver::Embedded)
        .clock(Clock::Manual(ManualClock::new()))
        .waker(move |_| {
            counter.fetch_add(1, SeqCst);
        })
        .build()
        .unwrap();
    (service, wakes)
}

/// CONTRACT 21: one published sleep, then hundreds of STARTs from another
/// thread (more than half the backlog at which the owner must be woken
/// anyway): the waker is called once, not again when that backlog is
/// reached.
#[test]
fn many_remote_starts_wake_a_sleeping_owner_once() {
    let (service, wakes) = counted_wakes();
    let mut guard = service.claim_shard(0).unwrap();
    assert_eq!(guard.next_deadline(), None); // asleep until woken
    let remote = service.clone();
    let timers = std::thread::spawn(move || {
        (0..700)
            .map(|_| remote.start(HOUR, |_| {}).unwrap())
            .collect::<Vec<_>>()
    })
    .join()
    .unwrap();
    assert_eq!(wakes.load(SeqCst), 1);
    guard.poll().unwrap();
    assert_eq!(guard.armed(), 700);
    drop(timers);
}

/// The same for STOPs of timers the owner armed before its sleep.
#[test]
fn many_remote_stops_wake_a_sleeping_owner_once() {
    let (service, wakes) = counted_wakes();
    let mut guard = service.claim_shard(0).unwrap();
    let timers: Vec<_> = (0..700)
        .map(|_| service.start(HOUR, |_| {}).unwrap())
        .collect();
    assert!(guard.next_deadline().is_some_and(|d| d > MS));
    std::thread::spawn(move || {
        for timer in &timers {
            assert_eq!(timer.stop(), Stop::Cancelled);
        }
    })
    .join()
    .unwrap();
    assert_eq!(wakes.load(SeqCst), 1);
    guard.poll().unwrap();
    assert_eq!(guard.armed(), 0);
}

/// CONTRACT 21: queued work that the owner needs only after its sleep would
/// end does not keep it from sleeping. Another thread starts and cancels
/// hour-long timers (reviving one queued slot) while the owner's earliest
/// timer is 100 ms away: the owner may still sleep those 100 ms, and nobody
/// wakes it. A START due before that wakes it once; a STOP of a timer it
/// armed itself, before reclaim is due, wakes nobody.
#[test]
fn item21_queued_work_due_after_the_sleep_lets_the_owner_sleep() {
    let (service, wakes) = counted_wakes();
    let mut guard = service.claim_shard(0).unwrap();
    let near = service.start(100 * MS, |_| {}).unwrap();
    let own = service.start(HOUR, |_| {}).unwrap();
    guard.poll().unwrap();
    let remote = service.clone();
    std::thread::spawn(move || {
        for _ in 0..100 {
            let timer = remote.start(HOUR, |_| {}).unwrap();
            assert_eq!(timer.cancel(), Stop::Cancelled);
        }
        // Queued, for later.
        remote.start(2 * HOUR, |_| {}).unwrap().forget();
        assert_eq!(own.stop(), Stop::Cancelled);
    })
    .join()
    .unwrap();
    assert_eq!(
        guard.next_deadline(),
        Some(100 * MS),
        "nothing queued is due before 100 ms: the owner may sleep until then"
    );
    let remote = service.clone();
    let soon = std::thread::spawn(move || remote.start(5 * MS, |_| {}).unwrap())
        .join()
        .unwrap();
    assert_eq!(
        wakes.load(SeqCst),
        1,
        "the 5 ms START wakes the owner, once"
    );
    guard.poll().unwrap();
    assert_eq!(guard.next_deadline(), Some(5 * MS));
    assert_eq!(guard.armed(), 3, "near, the 2 h timer and the 5 ms one");
    assert_eq!(wakes.load(SeqCst), 1, "the hour-long work woke nobody");
    drop((near, soon));
}
