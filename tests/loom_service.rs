//! loom models of every cross-thread protocol of the timer service
//! (docs/CONTRACT.md item 19).
//!
//! Run (see README / .ci/run):
//! `RUSTFLAGS="--cfg loom -C debug_assertions" LOOM_MAX_PREEMPTIONS=2 cargo test --release --test loom_service`
//!
//! Each model builds a one-shard embedded service on a manual clock inside
//! `loom::model`, so that loom controls every thread that touches it: the
//! main thread is the shard owner and polls; spawned threads are the "any
//! thread" of the contract. Never capped with LOOM_MAX_DURATION or
//! LOOM_MAX_PERMUTATIONS: a capped model passes having explored only part of
//! the space.
#![cfg(loom)]

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use tickwheel::{
    Clock, Driver, ManualClock, Restart, ShardGuard, Stop, StopSync, TimerError, TimerService,
};

const TICK: Duration = Duration::from_millis(1);

/// `loom::model`, reporting how many interleavings it explored (so a model
/// that explores suspiciously little shows in the log).
fn model<F: Fn() + Sync + Send + 'static>(name: &str, body: F) {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    RUNS.store(0, SeqCst);
    loom::model(move || {
        RUNS.fetch_add(1, SeqCst);
        body();
    });
    eprintln!("loom model {name}: {} interleavings", RUNS.load(SeqCst));
}

/// An embedded service of `shards` shards on manual clock `clock`, no
/// shard claimed.
fn embedded_service(shards: usize, clock: &ManualClock) -> TimerService {
    TimerService::builder()
        .shards(shards)
        .tick(TICK)
        .driver(Driver::Embedded)
        .clock(Clock::Manual(clock.clone()))
        .build()
        .unwrap()
}

/// A one-shard embedded service on a manual clock, and its owner guard.
fn service() -> (TimerService, ShardGuard, ManualClock) {
    let clock = ManualClock::new();
    let service = embedded_service(1, &clock);
    let guard = service.claim_shard(0).unwrap();
    (service, guard, clock)
}

/// Counts callback runs and drops of the callback's captures.
#[derive(Default)]
struct Probe {
    runs: AtomicUsize,
    drops: AtomicUsize,
}

struct DropCounter(std::sync::Arc<Probe>);

impl Drop for DropCounter {
    fn drop(&mut self) {
        self.0.drops.fetch_add(1, SeqCst);
    }
}

fn counting_callback(
    probe: &std::sync::Arc<Probe>,
) -> impl FnMut(&mut tickwheel::Expiry<'_>) + Send + 'static {
    let guard = DropCounter(probe.clone());
    move |_| {
        guard.0.runs.fetch_add(1, SeqCst);
    }
}

/// Remote START racing the owner's poll: the timer is neither lost nor fired
/// early, and fires exactly once.
#[test]
fn remote_start_vs_owner_poll() {
    model("remote_start_vs_owner_poll", || {
        let (service, mut owner, clock) = service();
        let probe = std::sync::Arc::new(Probe::default());
        let remote = {
            let service = service.clone();
            let probe = probe.clone();
            thread::spawn(move || {
                service
                    .start(TICK, counting_callback(&probe))
                    .unwrap()
                    .forget()
            })
        };
        owner.poll().unwrap();
        // Deadline is one tick away: nothing may have fired yet.
        assert_eq!(probe.runs.load(SeqCst), 0);
        remote.join().unwrap();
        clock.advance(TICK);
        owner.poll().unwrap();
        assert_eq!(probe.runs.load(SeqCst), 1);
        // Fired and forgotten: the slot and the callback are freed.
        assert_eq!(probe.drops.load(SeqCst), 1);
        assert_eq!(service.stats().freed, 1);
    });
}

/// A remote START, its cancel, and the same thread's next START reusing
/// that slot in place (`Inner::revive`: the slot is still on the remote
/// queue), all racing the owner taking the queue in. Whichever way the
/// owner's take falls (before the first START's push, between, during the
/// reuse, after), the cancelled timer never runs and is dropped once, the
/// second fires exactly once at its deadline, and both slots' timers are
/// accounted for as freed. Fails ("runs 0") with the reuse's second CAS
/// (`FREE|QUEUED|FRESH -> ARMED|...`) made a plain store: an owner that took
/// the slot off in between left it alone, and nobody queued it again.
#[test]
fn revived_start_vs_owner_take() {
    model("revived_start_vs_owner_take", || {
        let (service, mut owner, clock) = service();
        let cancelled = std::sync::Arc::new(Probe::default());
        let second = std::sync::Arc::new(Probe::default());
        let remote = {
            let service = service.clone();
            let (cancelled, second) = (cancelled.clone(), second.clone());
            thread::spawn(move || {
                let first = service
                    .start(TICK * 5, counting_callback(&cancelled))
                    .unwrap();
                assert_eq!(first.cancel(), Stop::Cancelled);
                service
                    .start(TICK, counting_callback(&second))
                    .unwrap()
                    .forget();
            })
        };
        owner.poll().unwrap();
        remote.join().unwrap();
        clock.advance(TICK);
        owner.poll().unwrap();
        assert_eq!(cancelled.runs.load(SeqCst), 0);
        assert_eq!(cancelled.drops.load(SeqCst), 1);
        let runs = second.runs.load(SeqCst);
        assert_eq!(runs, 1, "runs {runs}");
        assert_eq!(second.drops.load(SeqCst), 1);
        assert_eq!(service.stats().freed, 2);
        assert_eq!(service.stats().armed, 0);
    });
}

/// The owner's START taking a fresh group of slots (a CAS on the arena's
/// `fresh` count) racing a remote START taking one fresh slot (a
/// `fetch_add` on it): the two timers get different slots, and each STOP
/// finds its own timer. (Under loom a group is one slot; the race on the
/// count is the same.)
#[test]
fn owner_fresh_group_vs_remote_fresh_slot() {
    model("owner_fresh_group_vs_remote_fresh_slot", || {
        let (service, mut owner, _clock) = service();
        let probe = std::sync::Arc::new(Probe::default());
        let remote = {
            let service = service.clone();
            let probe = probe.clone();
            thread::spawn(move || service.start(TICK, counting_callback(&probe)).unwrap())
        };
        let mine = service.start(TICK, counting_callback(&probe)).unwrap();
        let theirs = remote.join().unwrap();
        assert_ne!(mine.id(), theirs.id());
        owner.poll().unwrap();
        assert_eq!(mine.stop(), Stop::Cancelled);
        assert_eq!(theirs.stop(), Stop::Cancelled);
        owner.poll().unwrap();
        assert_eq!(probe.runs.load(SeqCst), 0);
    });
}

/// STOP racing FIRE: exactly one wins, and the outcome says which.
#[test]
fn stop_vs_fire() {
    model("stop_vs_fire", || {
        let (service, mut owner, clock) = service();
        let probe = std::sync::Arc::new(Probe::default());
        let timer = Arc::new(service.start(TICK, counting_callback(&probe)).unwrap());
        owner.poll().unwrap(); // links it
        clock.advance(TICK);
        let stopper = {
            let timer = timer.clone();
            thread::spawn(move || timer.stop())
        };
        owner.poll().unwrap();
        let stopped = stopper.join().unwrap();
        owner.poll().unwrap();
        let runs = probe.runs.load(SeqCst);
        match stopped {
            Stop::Cancelled => assert_eq!(runs, 0, "a Cancelled stop was followed by the callback"),
            // Stopped while the callback ran, or after it returned.
            Stop::Running | Stop::Fired => assert_eq!(runs, 1),
            other => panic!("unexpected {other:?} (runs {runs})"),
        }
    });
}

/// Two STOPs racing: at most one returns Cancelled; with the owner idle,
/// exactly one does.
#[test]
fn stop_vs_stop() {
    model("stop_vs_stop", || {
        let (service, mut owner, _clock) = service();
        let probe = std::sync::Arc::new(Probe::default());
        let timer = Arc::new(service.start(TICK, counting_callback(&probe)).unwrap());
        let other = {
            let timer = timer.clone();
            thread::spawn(move || timer.stop())
        };
        let mine = timer.stop();
        let theirs = other.join().unwrap();
        let cancelled = [mine, theirs]
            .iter()
            .filter(|s| **s == Stop::Cancelled)
            .count();
        assert_eq!(cancelled, 1, "{mine:?} / {theirs:?}");
        assert!([mine, theirs].contains(&Stop::Inactive));
        owner.poll().unwrap();
        assert_eq!(probe.runs.load(SeqCst), 0);
    });
}

/// RESTART racing FIRE: "fired at the old deadline, then armed for the new
/// one" or "moved before it fired"; never two fires for one arming, never a
/// lost arming.
#[test]
fn restart_vs_fire() {
    model("restart_vs_fire", || {
        let (service, mut owner, clock) = service();
        let probe = std::sync::Arc::new(Probe::default());
        let timer = Arc::new(service.start(TICK, counting_callback(&probe)).unwrap());
        owner.poll().unwrap();
        clock.advance(TICK);
        let restarter = {
            let timer = timer.clone();
            thread::spawn(move || timer.restart(TICK * 3).unwrap())
        };
        owner.poll().unwrap();
        let outcome = restarter.join().unwrap();
        let runs_before = probe.runs.load(SeqCst);
        match outcome {
            Restart::Moved => assert_eq!(runs_before, 0, "moved, yet the old deadline fired"),
            Restart::Rearmed => assert_eq!(runs_before, 1, "re-armed, so the old arming had fired"),
        }
        // The new arming is due 3 ticks after the restart: at most tick 4.
        clock.advance(TICK * 3);
        owner.poll().unwrap();
        assert_eq!(
            probe.runs.load(SeqCst),
            runs_before + 1,
            "the new arming fired exactly once"
        );
        assert!(!timer.is_armed());
    });
}

/// STOP_SYNC racing a running callback: when it returns, the callback is not
/// running and will not run again.
#[test]
fn stop_sync_vs_running_callback() {
    model("stop_sync_vs_running_callback", || {
        let (service, mut owner, clock) = service();
        let running = std::sync::Arc::new(AtomicUsize::new(0));
        let runs = std::sync::Arc::new(AtomicUsize::new(0));
        let timer = {
            let (running, runs) = (running.clone(), runs.clone());
            Arc::new(
                service
                    .start_periodic(TICK, move |_| {
                        running.store(1, SeqCst);
                        runs.fetch_add(1, SeqCst);
                        running.store(0, SeqCst);
                    })
                    .unwrap(),
            )
        };
        owner.poll().unwrap();
        clock.advance(TICK);
        let stopper = {
            let (timer, running) = (timer.clone(), running.clone());
            thread::spawn(move || {
                let outcome = timer.stop_sync();
                assert_eq!(
                    running.load(SeqCst),
                    0,
                    "stop_sync returned while the callback ran"
                );
                outcome
            })
        };
        owner.poll().unwrap();
        let outcome = stopper.join().unwrap();
        let after_stop = runs.load(SeqCst);
        clock.advance(TICK * 5);
        owner.poll().unwrap();
        assert_eq!(
            runs.load(SeqCst),
            after_stop,
            "ran again after stop_sync returned"
        );
        assert!(
            matches!(outcome, StopSync::Cancelled | StopSync::Fired),
            "{outcome:?}"
        );
    });
}

/// stop_sync from inside the timer's own callback returns at once.
#[test]
fn stop_sync_from_own_callback() {
    model("stop_sync_from_own_callback", || {
        let (service, mut owner, clock) = service();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
        let slot: std::sync::Arc<std::sync::Mutex<Option<tickwheel::Timer>>> = Default::default();
        let timer = {
            let (seen, slot) = (seen.clone(), slot.clone());
            service
                .start_periodic(TICK, move |_| {
                    let outcome = slot.lock().unwrap().as_ref().map(|t| t.stop_sync());
                    *seen.lock().unwrap() = outcome;
                })
                .unwrap()
        };
        *slot.lock().unwrap() = Some(timer);
        clock.advance(TICK);
        owner.poll().unwrap();
        assert_eq!(*seen.lock().unwrap(), Some(StopSync::FromOwnCallback));
        clock.advance(TICK * 3);
        assert_eq!(
            owner.poll().unwrap(),
            0,
            "stopped from its own callback, yet re-armed"
        );
        drop(slot.lock().unwrap().take());
    });
}

/// Handle DROP racing FIRE: the callback runs at most once, and everything
/// (slot and callback) is freed exactly once.
#[test]
fn handle_drop_vs_fire() {
    model("handle_drop_vs_fire", || {
        let (service, mut owner, clock) = service();
        let probe = std::sync::Arc::new(Probe::default());
        let timer = service.start(TICK, counting_callback(&probe)).unwrap();
        owner.poll().unwrap();
        clock.advance(TICK);
        let dropper = thread::spawn(move || drop(timer));
        owner.poll().unwrap();
        dropper.join().unwrap();
        owner.poll().unwrap();
        assert!(probe.runs.load(SeqCst) <= 1);
        assert_eq!(
            probe.drops.load(SeqCst),
            1,
            "callback freed exactly once, promptly"
        );
        assert_eq!(service.stats().freed, 1);
    });
}

/// Memory reclamation racing a reader with a stale id: the slot is freed and
/// reused by a new timer while another thread stops and restarts through the
/// old id. The stale operations report so and never touch the new timer.
#[test]
fn reclamation_vs_stale_reader() {
    model("reclamation_vs_stale_reader", || {
        let (service, mut owner, _clock) = service();
        let old = service.start(TICK, |_| {}).unwrap();
        let stale = old.id();
        drop(old);
        let reader = {
            let service = service.clone();
            thread::spawn(move || service.stop_id(stale))
        };
        owner.poll().unwrap(); // frees the old slot
        let new = service.start(TICK * 5, |_| {}).unwrap(); // may reuse it
        let seen = reader.join().unwrap();
        assert_eq!(seen, Stop::Inactive);
        assert_ne!(new.id(), stale);
        assert_eq!(service.stop_id(stale), Stop::Inactive);
        assert!(new.is_armed(), "a stale id touched the new timer");
        assert_eq!(new.stop(), Stop::Cancelled);
    });
}

/// SHUTDOWN racing START: the start either fails or yields a timer whose
/// callback never runs; every callback is dropped; old handles are Inactive.
#[test]
fn shutdown_vs_start() {
    model("shutdown_vs_start", || {
        let (service, owner, clock) = service();
        drop(owner);
        let probe = std::sync::Arc::new(Probe::default());
        let starter = {
            let service = service.clone();
            let probe = probe.clone();
            thread::spawn(move || service.start(TICK, counting_callback(&probe)))
        };
        service.shutdown();
        let started = starter.join().unwrap();
        match &started {
            Ok(timer) => assert!(matches!(timer.stop(), Stop::Inactive)),
            Err(error) => assert_eq!(*error, TimerError::Shutdown),
        }
        clock.advance(TICK * 2);
        assert!(matches!(service.claim_shard(0), Err(TimerError::Shutdown)));
        drop(started);
        drop(service);
        assert_eq!(probe.runs.load(SeqCst), 0);
        assert_eq!(
            probe.drops.load(SeqCst),
            1,
            "callback dropped once everything is gone"
        );
    });
}

/// Two RESTARTs racing each other and the owner: the timer ends armed with
/// one of the two deadlines and fires exactly once for it; a restart that
/// reports `Moved` means no earlier arming fired in between.
#[test]
fn restart_vs_restart_vs_fire() {
    model("restart_vs_restart_vs_fire", || {
        let (service, mut owner, clock) = service();
        let probe = std::sync::Arc::new(Probe::default());
        let timer = Arc::new(service.start(TICK, counting_callback(&probe)).unwrap());
        owner.poll().unwrap();
        clock.advance(TICK);
        let spawn_restart = |ticks: u32| {
            let timer = timer.clone();
            thread::spawn(move || timer.restart(TICK * ticks).unwrap())
        };
        let (a, b) = (spawn_restart(2), spawn_restart(4));
        owner.poll().unwrap();
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        let fired_early = probe.runs.load(SeqCst);
        // At most the first arming fired so far, and only if some restart
        // found it fired (re-armed it).
        assert!(fired_early <= 1);
        if fired_early == 1 {
            assert!(
                a == Restart::Rearmed || b == Restart::Rearmed,
                "{a:?} {b:?}"
            );
        } else {
            assert_eq!((a, b), (Restart::Moved, Restart::Moved));
        }
        clock.advance(TICK * 4);
        owner.poll().unwrap();
        assert_eq!(
            probe.runs.load(SeqCst),
            fired_early + 1,
            "the surviving arming fires exactly once"
        );
        assert!(!timer.is_armed());
    });
}

/// Two STOPs racing FIRE: at most one Cancelled; a Cancelled stop means the
/// callback never runs.
#[test]
fn stop_vs_stop_vs_fire() {
    model("stop_vs_stop_vs_fire", || {
        let (service, mut owner, clock) = service();
        let probe = std::sync::Arc::new(Probe::default());
        let timer = Arc::new(service.start(TICK, counting_callback(&probe)).unwrap());
        owner.poll().unwrap();
        clock.advance(TICK);
        let spawn_stop = || {
            let timer = timer.clone();
            thread::spawn(move || timer.stop())
        };
        let (a, b) = (spawn_stop(), spawn_stop());
        owner.poll().unwrap();
        let outcomes = [a.join().unwrap(), b.join().unwrap()];
        owner.poll().unwrap();
        let cancelled = outcomes.iter().filter(|s| **s == Stop::Cancelled).count();
        assert!(cancelled <= 1, "{outcomes:?}");
        assert_eq!(probe.runs.load(SeqCst), 1 - cancelled, "{outcomes:?}");
    });
}

/// The service's lifetime against its handles (`Timer::new` / `Drop`): the
/// last handle of a shard going away on one thread, a new handle on the same
/// shard made and dropped on another, and the last `TimerService` dropped on
/// a third. Each shard holds one strong count of the service while it has
/// handles; the model checks that the service is freed exactly once, after
/// the last handle (loom reports a leaked `Arc`, and the callback's drop is
/// counted), whatever the order.
#[test]
fn last_handle_vs_new_handle_vs_service_drop() {
    model("last_handle_vs_new_handle_vs_service_drop", || {
        let (service, owner, _clock) = service();
        drop(owner);
        let probe = std::sync::Arc::new(Probe::default());
        let first = service.start(TICK * 5, counting_callback(&probe)).unwrap();
        // Cancelled, or Inactive when the shutdown sweep got there first.
        let dropper = thread::spawn(move || {
            assert!(matches!(first.cancel(), Stop::Cancelled | Stop::Inactive))
        });
        let starter = {
            let service = service.clone();
            let probe = probe.clone();
            thread::spawn(move || {
                let second = service.start(TICK * 5, counting_callback(&probe)).unwrap();
                assert!(second.is_armed());
                second
            })
        };
        drop(service);
        dropper.join().unwrap();
        let second = starter.join().unwrap();
        // The service is shut down (its last clone went) but still alive for
        // the handle that outlives it.
        assert_eq!(second.stop(), Stop::Inactive);
        drop(second);
        assert_eq!(probe.runs.load(SeqCst), 0);
        assert_eq!(probe.drops.load(SeqCst), 2, "both callbacks dropped");
    });
}

/// Handles are counted on the counting shard of the thread that makes or
/// drops them, not on their timer's (`handles.rs`): here a handle counted
/// made on shard 0 (its owner started it) is dropped by the owner of shard
/// 1, counted there, while the last `TimerService` goes on a third thread
/// and shutdown folds both shards' counts into one total. The service must
/// be freed exactly once, after that drop: loom reports a leaked `Arc` if a
/// count is lost (with the fold reading a counter by a load before setting
/// its `SHUT`, the drop can fall between the two and be missed: the model
/// fails with the service leaked), and the probe sees the callback dropped
/// once.
#[test]
fn handles_counted_on_two_shards_vs_shutdown() {
    model("handles_counted_on_two_shards_vs_shutdown", || {
        let service = embedded_service(2, &ManualClock::new());
        let probe = std::sync::Arc::new(Probe::default());
        let timer = {
            let _owner = service.claim_shard(0).unwrap();
            service.start(TICK * 5, counting_callback(&probe)).unwrap()
        };
        let stopper = {
            let service = service.clone();
            thread::spawn(move || {
                let _owner = service.claim_shard(1).unwrap();
                drop(service);
                // Cancelled, or Inactive when the shutdown sweep got there
                // first; counted gone on shard 1.
                assert!(matches!(timer.cancel(), Stop::Cancelled | Stop::Inactive));
            })
        };
        drop(service);
        stopper.join().unwrap();
        assert_eq!(probe.runs.load(SeqCst), 0);
        assert_eq!(probe.drops.load(SeqCst), 1, "the callback dropped once");
    });
}

/// Handles counted in the core of the shard their maker or dropper holds
/// (`src/service/shard/credits.rs`; loom's credits come two at a time): the
/// owner of shard 0 makes two handles (one refill) and drops one (owed, not
/// yet counted), then lets go of its shard while the last `TimerService`
/// goes on either thread; the other handle goes after. The service must be
/// freed exactly once, after that handle: loom reports a leaked `Arc` if the
/// core's credits are never counted. Fails with the settling in
/// `ShardGuard`'s drop left out: the owner saw the service live and skipped
/// its sweep, and the shutdown thread found the shard still held and left
/// it to the owner.
#[test]
fn owner_credits_vs_shutdown_vs_last_handle() {
    model("owner_credits_vs_shutdown_vs_last_handle", || {
        let service = embedded_service(2, &ManualClock::new());
        let probe = std::sync::Arc::new(Probe::default());
        let owner = {
            let service = service.clone();
            let probe = probe.clone();
            thread::spawn(move || {
                let guard = service.claim_shard(0).unwrap();
                let kept = service.start(TICK * 5, counting_callback(&probe)).unwrap();
                let dropped = service.start(TICK * 5, counting_callback(&probe)).unwrap();
                drop(dropped);
                drop(service);
                drop(guard);
                kept
            })
        };
        drop(service);
        let kept = owner.join().unwrap();
        assert_eq!(kept.stop(), Stop::Inactive, "the service is shut down");
        drop(kept);
        assert_eq!(probe.runs.load(SeqCst), 0);
        assert_eq!(probe.drops.load(SeqCst), 2, "both callbacks dropped");
    });
}

/// A handle made while shutdown folds the counts (its START got past the
/// shutdown check first) and dropped after the fold. While the fold runs the
/// total must not pass through 0 -> 1, or that make takes a strong count of
/// the service besides the one shutdown holds for the handles, and the
/// handle's drop gives back only one of them: with the fold's `FOLDING`
/// bias set to 0 the model fails with the service leaked.
#[test]
fn handle_made_during_the_fold() {
    model("handle_made_during_the_fold", || {
        let service = embedded_service(1, &ManualClock::new());
        let starter = {
            let service = service.clone();
            thread::spawn(move || service.start(TICK * 5, |_| {}).ok())
        };
        // Shut down explicitly: the starter's clone keeps the service until
        // its START is done, so dropping ours would never shut down during it.
        service.shutdown();
        drop(service);
        if let Some(timer) = starter.join().unwrap() {
            assert_eq!(timer.stop(), Stop::Inactive, "swept at shutdown");
        }
    });
}

// ---------------------------------------------------------------------------
// The owner's sleep/wake handshake (CONTRACT 13, 19 and 21): a sleeping
// owner must learn of work queued for it, and be woken at most once a sleep.
//
// The driver thread's loop is `poll` -> `next_deadline` (which publishes the
// sleep and re-checks the remote queue) -> park; producers push to the
// remote queue and then claim the wake. loom cannot run std's `park_timeout`, so these models
// run that same sequence on the model's main thread with loom's park/unpark,
// the service's waker unparking it: the protocol code under test
// (`publish_sleep`, `claim_wake`, the remote queue) is the one the driver threads
// run. A lost wakeup shows as the owner parked for ever: loom reports the
// deadlock and the model fails.
// ---------------------------------------------------------------------------

/// A one-shard embedded service whose waker unparks the model's main thread
/// (the owner) and counts the wakes.
fn sleeping_owner() -> (TimerService, ShardGuard, std::sync::Arc<AtomicUsize>) {
    let owner = loom::thread::current();
    let wakes = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = wakes.clone();
    let service = TimerService::builder()
        .shards(1)
        .tick(TICK)
        .driver(Driver::Embedded)
        .clock(Clock::Manual(ManualClock::new()))
        .waker(move |_| {
            counted.fetch_add(1, SeqCst);
            owner.unpark();
        })
        .build()
        .unwrap();
    let guard = service.claim_shard(0).unwrap();
    (service, guard, wakes)
}

/// The owner's loop: poll, publish the sleep, park, until `done` says so.
/// Returns how many sleeps it published; checks that no sleep was
/// interrupted by more than one wake (CONTRACT 21).
fn owner_loop(
    guard: &mut ShardGuard,
    wakes: &AtomicUsize,
    mut done: impl FnMut(&mut ShardGuard) -> bool,
) -> usize {
    let mut published = 0;
    loop {
        guard.poll().unwrap();
        if done(guard) {
            break;
        }
        // `next_deadline` takes in waiting messages before it publishes the
        // sleep, so the work may be done now.
        let sleep = guard.next_deadline();
        published += 1;
        if done(guard) {
            break;
        }
        if sleep != Some(Duration::ZERO) {
            // Nothing moves the manual clock: only a wake ends this sleep.
            thread::park();
        }
    }
    assert_one_wake_per_sleep(wakes, published);
    published
}

/// CONTRACT 21: no published sleep was interrupted by more than one wake.
fn assert_one_wake_per_sleep(wakes: &AtomicUsize, sleeps: usize) {
    let wakes = wakes.load(SeqCst);
    assert!(wakes <= sleeps, "{wakes} wakes for {sleeps} sleeps");
}

/// A producer thread of the sleeping-owner models, joined only once its
/// body has returned.
///
/// A producer may unpark the owner after the owner has stopped parking (it
/// claimed the wake of a sleep that the owner published and then skipped,
/// its work being done): legitimate, and harmless with std's threads, where
/// an unpark only leaves a token for the next `park`. But loom's `unpark`
/// makes a blocked thread runnable whatever it is blocked on, including
/// `JoinHandle::join` (loom issue #249), which then fails loom's own
/// assertion `state.notified`: seen at `LOOM_MAX_PREEMPTIONS=3`. So the
/// owner yields until the body has returned (every unpark it
/// makes has happened by then) and joins after that.
struct Producer<T> {
    handle: thread::JoinHandle<T>,
    returned: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

fn spawn_producer<T: 'static>(body: impl FnOnce() -> T + Send + 'static) -> Producer<T> {
    let returned = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = returned.clone();
    let handle = thread::spawn(move || {
        let out = body();
        flag.store(true, SeqCst);
        out
    });
    Producer { handle, returned }
}

impl<T> Producer<T> {
    fn join(self) -> T {
        while !self.returned.load(SeqCst) {
            thread::yield_now();
        }
        self.handle.join().unwrap()
    }
}

/// A START due after the owner's sleep (no wake needed), then a STOP of it.
/// Under loom every remote stop makes reclaim due (`RECLAIM_MIN` is 0), so
/// the stop must wake the sleeping owner and the slot be reclaimed now, not
/// at the deadline it sleeps towards (CONTRACT 13 and 21). Guards the
/// store-then-load handshake of `src/service/remote.rs`: the owner's check
/// of the queue after publishing its sleep, and the SeqCst fence after the
/// stopper's push; with either removed the owner sleeps through the stop
/// (deadlock; tried on the former stop queue, RELIABILITY.md). Also guards
/// the wake rule: the STOP is not the first entry since the owner last
/// looked (the START was), so a rule that woke only on the first entry
/// would never wake for it.
#[test]
fn sleeping_owner_vs_later_start_then_stop() {
    model("sleeping_owner_vs_later_start_then_stop", || {
        let (service, mut guard, wakes) = sleeping_owner();
        let probe = std::sync::Arc::new(Probe::default());
        // The owner sleeps towards this one (started on the owner's thread).
        let near = service.start(TICK * 100, |_| {}).unwrap();
        let producer = {
            let service = service.clone();
            let probe = probe.clone();
            spawn_producer(move || {
                let later = service
                    .schedule(
                        tickwheel::TimerSpec::after(TICK * 200).on_shard(0),
                        counting_callback(&probe),
                    )
                    .unwrap();
                assert_eq!(later.cancel(), Stop::Cancelled);
            })
        };
        let sleeps = owner_loop(&mut guard, &wakes, |_| probe.drops.load(SeqCst) == 1);
        producer.join();
        assert_one_wake_per_sleep(&wakes, sleeps);
        assert_eq!(probe.runs.load(SeqCst), 0);
        drop(near);
    });
}

/// Two stops from one thread against the owner taking its queue in and
/// going to sleep (CONTRACT 13 and 21): whichever side of the take each
/// stop's push lands, judged by the count it reads from its own push (the
/// count and the list are one word, emptied by the take's one swap), a
/// stop the sleeping owner has not seen wakes it, once, and both slots are
/// reclaimed. A lost wake shows as a deadlock.
#[test]
fn sleeping_owner_vs_two_stops() {
    model("sleeping_owner_vs_two_stops", || {
        let (service, mut guard, wakes) = sleeping_owner();
        let probe = std::sync::Arc::new(Probe::default());
        let first = service
            .start(TICK * 100, counting_callback(&probe))
            .unwrap();
        let second = service
            .start(TICK * 100, counting_callback(&probe))
            .unwrap();
        guard.poll().unwrap();
        let producer = spawn_producer(move || {
            assert_eq!(first.cancel(), Stop::Cancelled);
            assert_eq!(second.cancel(), Stop::Cancelled);
        });
        let sleeps = owner_loop(&mut guard, &wakes, |_| probe.drops.load(SeqCst) == 2);
        producer.join();
        assert_one_wake_per_sleep(&wakes, sleeps);
        drop(service);
    });
}

/// The reclaim bound falling between two polls against a stop that judges
/// by it (CONTRACT 13 and 21). At its first poll the owner holds four
/// timers, so the bound it publishes for the stoppers is 4 / 3 = 1 queued
/// stop (`RECLAIM_MIN` is 0 under loom); it then cancels three itself, and
/// its next poll lowers the bound to 0 while another thread stops the
/// fourth. That stop, judged by the old bound, neither wakes the owner nor
/// asks it to stay up; the owner, which stores the new bound and then reads
/// how many stops are queued, must see the stop there: a store followed by
/// a load on another location, against the stopper's push followed by its
/// load of the bound, is a Dekker handshake, and without a SeqCst store and
/// fence between the owner's two steps (a Relaxed store is free to pass the
/// load on x86 too) both sides can miss each other, the owner sleeps, and
/// the stopped slot is not reclaimed (a deadlock here).
#[test]
fn sleeping_owner_vs_stop_judged_by_an_older_bound() {
    model("sleeping_owner_vs_stop_judged_by_an_older_bound", || {
        let (service, mut guard, wakes) = sleeping_owner();
        let probe = std::sync::Arc::new(Probe::default());
        let own: Vec<_> = (0..3)
            .map(|_| service.start(TICK * 100, |_| {}).unwrap())
            .collect();
        let stopped = service
            .start(TICK * 100, counting_callback(&probe))
            .unwrap();
        guard.poll().unwrap();
        for timer in own {
            assert_eq!(timer.cancel(), Stop::Cancelled);
        }
        let producer = spawn_producer(move || assert_eq!(stopped.cancel(), Stop::Cancelled));
        let sleeps = owner_loop(&mut guard, &wakes, |_| probe.drops.load(SeqCst) == 1);
        producer.join();
        assert_one_wake_per_sleep(&wakes, sleeps);
        assert_eq!(probe.runs.load(SeqCst), 0);
        drop(service);
    });
}

/// Two stops from two threads at once against one sleep: both need the
/// owner (a stop must be reclaimed promptly), and both may see the same
/// published sleep; only the one whose CAS of the sleep deadline to AWAKE
/// succeeds may wake it (CONTRACT 21: a sleep is interrupted at most once
/// however many producers race). The only model that catches a weak claim:
/// with the claim's CAS replaced by a load-then-store, every other model
/// passes (their producers are one thread, whose second stop always sees
/// the first one's AWAKE); this one fails "2 wakes for 1 sleeps".
#[test]
fn sleeping_owner_vs_two_concurrent_stops() {
    model("sleeping_owner_vs_two_concurrent_stops", || {
        let (service, mut guard, wakes) = sleeping_owner();
        let probe = std::sync::Arc::new(Probe::default());
        let timers = [
            service
                .start(TICK * 100, counting_callback(&probe))
                .unwrap(),
            service
                .start(TICK * 100, counting_callback(&probe))
                .unwrap(),
        ];
        guard.poll().unwrap();
        let producers =
            timers.map(|timer| spawn_producer(move || assert_eq!(timer.cancel(), Stop::Cancelled)));
        let sleeps = owner_loop(&mut guard, &wakes, |_| probe.drops.load(SeqCst) == 2);
        for producer in producers {
            producer.join();
        }
        // A second wake may come after the owner has left its loop.
        assert_one_wake_per_sleep(&wakes, sleeps);
        assert_eq!(probe.runs.load(SeqCst), 0);
        drop(service);
    });
}

/// A RESTART to a deadline earlier than the owner's sleep wakes it (and a
/// START later than the sleep does not need to): the owner must come to
/// know the earlier deadline without anything else happening.
#[test]
fn sleeping_owner_vs_earlier_restart() {
    model("sleeping_owner_vs_earlier_restart", || {
        let (service, mut guard, wakes) = sleeping_owner();
        let timer = service.start(TICK * 100, |_| {}).unwrap();
        guard.poll().unwrap();
        let producer = spawn_producer(move || {
            assert_eq!(timer.restart(TICK * 3), Ok(Restart::Moved));
            timer
        });
        let sleeps = owner_loop(&mut guard, &wakes, |guard| {
            guard.next_deadline_tick().is_some_and(|tick| tick <= 3)
        });
        let timer = producer.join();
        assert_one_wake_per_sleep(&wakes, sleeps);
        assert_eq!(timer.cancel(), Stop::Cancelled);
        drop(service);
    });
}

/// CONTRACT 21 with entries the owner may sleep past: the owner sleeps
/// towards tick 100 while a producer queues a START due at tick 200 (which
/// must not keep it awake) and then one due at tick 3 (which must wake it,
/// once). The second START's need is recorded beside the queue's word
/// (`RemoteQueue::needs_owner_by`): an owner that sees a queued entry but
/// not that record has published its sleep before the producer looks, and
/// the producer claims the wake. A lost wake shows as a deadlock (it does
/// with the record left out).
#[test]
fn sleeping_owner_sleeps_past_a_later_start_not_an_earlier_one() {
    model(
        "sleeping_owner_sleeps_past_a_later_start_not_an_earlier_one",
        || {
            let (service, mut guard, wakes) = sleeping_owner();
            let near = service.start(TICK * 100, |_| {}).unwrap();
            guard.poll().unwrap();
            let producer = {
                let service = service.clone();
                spawn_producer(move || {
                    let on_shard = |delay| tickwheel::TimerSpec::after(delay).on_shard(0);
                    let later = service.schedule(on_shard(TICK * 200), |_| {}).unwrap();
                    let soon = service.schedule(on_shard(TICK * 3), |_| {}).unwrap();
                    (later, soon)
                })
            };
            // Done once both are linked; `armed` reads the count the last poll
            // or sleep published and takes nothing in itself, so only a wake
            // ends a sleep published with the early START queued.
            let sleeps = owner_loop(&mut guard, &wakes, |guard| guard.armed() == 3);
            let (later, soon) = producer.join();
            assert_one_wake_per_sleep(&wakes, sleeps);
            assert_eq!(soon.cancel(), Stop::Cancelled);
            assert_eq!(later.cancel(), Stop::Cancelled);
            drop(near);
            drop(service);
        },
    );
}

// ---------------------------------------------------------------------------
// Lending (CONTRACT 7): while its owner sleeps in `ShardGuard::idle`, the
// shard is lent, and a producer's RESTART (or release of a timer that is not
// armed) is applied in the wheel by the producer, after what is queued,
// instead of being queued. The driver threads sleep that way. These models
// check the three promises of `Shard::lend`: a helper that moves a timer due
// before the owner's sleep wakes it (no lost wakeup); helpers and the owner
// never touch the core at the same time (loom checks every access to it,
// an `UnsafeCell`); and one thread's operations keep their order whichever
// way each one goes (CONTRACT 5).
// ---------------------------------------------------------------------------

/// The owner sleeps lent with a timer due at tick 100; a producer moves it to
/// tick 3, directly if the shard is lent at that moment, through the remote
/// queue otherwise. Either way the owner must be woken (once) and learn tick 3.
#[test]
fn lent_shard_vs_earlier_restart() {
    model("lent_shard_vs_earlier_restart", || {
        let (service, mut guard, wakes) = sleeping_owner();
        let timer = service.start(TICK * 100, |_| {}).unwrap();
        guard.poll().unwrap();
        let producer = spawn_producer(move || {
            assert_eq!(timer.restart(TICK * 3), Ok(Restart::Moved));
            timer
        });
        let mut sleeps = 0;
        loop {
            guard.poll().unwrap();
            if guard.next_deadline_tick().is_some_and(|tick| tick <= 3) {
                break;
            }
            sleeps += 1;
            // `idle` takes in waiting messages before it publishes the
            // sleep, so it may already sleep towards tick 3 (the manual clock
            // reads 0): parking would then wait for a wake nobody owes.
            guard.idle(|sleep| {
                if sleep.is_none_or(|sleep| sleep > TICK * 3) {
                    thread::park();
                }
            });
        }
        let timer = producer.join();
        assert_one_wake_per_sleep(&wakes, sleeps);
        assert_eq!(timer.cancel(), Stop::Cancelled);
        drop(service);
    });
}

/// A producer starts, stops and releases a timer while the owner alternates
/// between lending its shard and polling it. The start and the stop are
/// queued; the release (of a timer no longer armed) takes the queue in
/// itself if it finds the shard lent, else leaves it to the owner: loom
/// reports any moment at which the owner and a helper touch the wheel at
/// once, and the capture must be dropped exactly once, the callback never
/// run, and every slot freed.
#[test]
fn lent_shard_vs_start_and_cancel() {
    model("lent_shard_vs_start_and_cancel", || {
        let (service, mut guard, _clock) = service();
        let probe = std::sync::Arc::new(Probe::default());
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let producer = {
            let service = service.clone();
            let probe = probe.clone();
            let done = done.clone();
            thread::spawn(move || {
                let timer = service
                    .schedule(
                        tickwheel::TimerSpec::after(TICK * 5).on_shard(0),
                        counting_callback(&probe),
                    )
                    .unwrap();
                assert_eq!(timer.stop(), Stop::Cancelled);
                drop(timer);
                done.store(true, SeqCst);
            })
        };
        while !done.load(SeqCst) {
            guard.idle(|_| thread::yield_now());
            guard.poll().unwrap();
        }
        producer.join().unwrap();
        guard.poll().unwrap();
        assert_eq!(probe.runs.load(SeqCst), 0);
        assert_eq!(probe.drops.load(SeqCst), 1);
        let stats = service.stats();
        assert_eq!((stats.armed, stats.freed), (0, 1), "{stats:?}");
    });
}

/// One producer starts A, then restarts B, both to tick 2; the owner lends
/// and polls meanwhile. A is queued, and B's restart may be applied
/// directly (shard lent): the helper must take A in before it moves B, or
/// B would fire first.
#[test]
fn lent_shard_keeps_one_threads_order() {
    model("lent_shard_keeps_one_threads_order", || {
        let (service, mut guard, clock) = service();
        let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let logger = |name: &'static str| {
            let order = order.clone();
            move |_: &mut tickwheel::Expiry<'_>| order.lock().unwrap().push(name)
        };
        let b = service.start(TICK * 50, logger("B")).unwrap();
        let producer = {
            let service = service.clone();
            let a_callback = logger("A");
            let done = done.clone();
            thread::spawn(move || {
                let a = service
                    .schedule(
                        tickwheel::TimerSpec::after(TICK * 2).on_shard(0),
                        a_callback,
                    )
                    .unwrap();
                assert_eq!(b.restart(TICK * 2), Ok(Restart::Moved));
                done.store(true, SeqCst);
                [a, b]
            })
        };
        guard.poll().unwrap();
        guard.idle(|_| thread::yield_now());
        while !done.load(SeqCst) {
            thread::yield_now();
        }
        let timers = producer.join().unwrap();
        clock.advance(TICK * 2);
        guard.poll().unwrap();
        assert_eq!(*order.lock().unwrap(), vec!["A", "B"]);
        drop(timers);
    });
}

/// A list of stops alone is applied newest first (`remote.rs`, "Order"),
/// which is only sound because every arming's push marks its list: one
/// thread's two remote STARTs, due on the same tick, with another thread's
/// remote stop of an owner's timer beside them, while the owner polls
/// (its take may split them over lists of any mix). The STARTs fire in
/// the order they were made and the stopped timer never runs. Fails
/// (["second", "first"]) when a START's push leaves `ARMINGS` unset
/// (`handoff.rs`, `remote.push(.., false)`): the owner then applies a list
/// holding both STARTs newest first.
#[test]
fn remote_starts_keep_their_order_beside_remote_stops() {
    model("remote_starts_keep_their_order_beside_remote_stops", || {
        let (service, mut guard, clock) = service();
        let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let logger = |name: &'static str| {
            let order = order.clone();
            move |_: &mut tickwheel::Expiry<'_>| order.lock().unwrap().push(name)
        };
        let stopped = service.start(TICK * 2, logger("stopped")).unwrap();
        guard.poll().unwrap();
        let starter = {
            let service = service.clone();
            let (first, second) = (logger("first"), logger("second"));
            thread::spawn(move || {
                let spec = || tickwheel::TimerSpec::after(TICK * 2).on_shard(0);
                let first = service.schedule(spec(), first).unwrap();
                let second = service.schedule(spec(), second).unwrap();
                [first, second]
            })
        };
        let stopper = thread::spawn(move || stopped.cancel());
        guard.poll().unwrap();
        let timers = starter.join().unwrap();
        assert_eq!(stopper.join().unwrap(), Stop::Cancelled);
        clock.advance(TICK * 2);
        guard.poll().unwrap();
        assert_eq!(*order.lock().unwrap(), vec!["first", "second"]);
        drop(timers);
    });
}

/// The shutdown sweep against callbacks and threads that drop handles
/// (CONTRACT 15 and 19). Timer A's callback owns the handle of timer B on
/// the same shard, so the sweep, dropping A's callback, drops B's handle on
/// the owner's thread (a release applied at once) while another thread
/// cancels timer C and the service shuts down. A sweep that then unlinks B
/// from a wheel it has already emptied fails ("attempt to subtract with
/// overflow"). Every capture must be dropped exactly once and nothing may
/// run.
#[test]
fn shutdown_sweep_vs_handle_drops() {
    model("shutdown_sweep_vs_handle_drops", || {
        let (service, mut guard, _clock) = service();
        let probe = std::sync::Arc::new(Probe::default());
        let held = service.start(TICK * 50, counting_callback(&probe)).unwrap();
        let holder_capture = DropCounter(probe.clone());
        let holder = service
            .start(TICK * 40, move |_| {
                let _ = (&holder_capture, &held);
                unreachable!("nothing fires: the clock does not move");
            })
            .unwrap();
        holder.forget();
        let other = service.start(TICK * 60, counting_callback(&probe)).unwrap();
        guard.poll().unwrap();
        let canceller = thread::spawn(move || {
            assert!(matches!(other.cancel(), Stop::Cancelled | Stop::Inactive));
        });
        service.shutdown();
        assert_eq!(guard.poll(), Err(TimerError::Shutdown));
        canceller.join().unwrap();
        drop(guard);
        drop(service);
        assert_eq!(probe.runs.load(SeqCst), 0);
        assert_eq!(probe.drops.load(SeqCst), 3, "every capture dropped once");
    });
}

/// CONTRACT 5 across threads: a remote START for tick 5 that happened before
/// the owner's START for the same tick (the owner saw the remote thread's
/// flag) fires first. The owner links its own START at once; before it does,
/// it must apply what the remote queue holds. Without that (`Shard::catch_up`
/// removed), the owner's timer fires first whenever it saw the flag. Three
/// far-off timers, linked at a poll, lift the queue's reclaim bound to one
/// entry, so that the owner takes the queue in for the arming it holds
/// (`ARMINGS`), not for its length: with the flag's test dropped from
/// `RemoteQueue::owner_start_must_take_in`, this fails.
#[test]
fn remote_start_before_owner_start_fires_first() {
    model("remote_start_before_owner_start_fires_first", || {
        let (service, mut owner, clock) = service();
        for _ in 0..3 {
            service.start(TICK * 1000, |_| {}).unwrap().forget();
        }
        assert_eq!(owner.poll(), Ok(0));
        let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let flag = std::sync::Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let log = |name: &'static str| {
            let order = order.clone();
            move |_: &mut tickwheel::Expiry<'_>| order.lock().unwrap().push(name)
        };
        let remote = {
            let service = service.clone();
            let flag = flag.clone();
            let callback = log("remote");
            thread::spawn(move || {
                let timer = service
                    .schedule(tickwheel::TimerSpec::after(TICK * 5).on_shard(0), callback)
                    .unwrap();
                flag.store(true, std::sync::atomic::Ordering::Release);
                timer.forget();
            })
        };
        let after = flag.load(std::sync::atomic::Ordering::Acquire);
        if after {
            service.start(TICK * 5, log("owner")).unwrap().forget();
        }
        remote.join().unwrap();
        if !after {
            service.start(TICK * 5, log("owner")).unwrap().forget();
        }
        clock.advance(TICK * 5);
        assert_eq!(owner.poll(), Ok(2));
        // Either way the remote START happened first.
        assert_eq!(*order.lock().unwrap(), ["remote", "owner"]);
    });
}

/// After another thread cancelled a due timer (`first`) and a far one
/// (`second`) while their owner polled, and the owner polled once more:
/// exactly one of cancel and fire won for the due one, the far one never
/// ran, and both slots were reclaimed with their callbacks dropped.
fn cancels_of_a_due_and_a_far_timer_settled(
    service: &TimerService,
    (first, second): (Stop, Stop),
    due: &Probe,
    far: &Probe,
) {
    let ran = due.runs.load(SeqCst);
    match first {
        Stop::Cancelled => assert_eq!(ran, 0, "a cancelled timer ran"),
        Stop::Fired | Stop::Running => assert_eq!(ran, 1),
        Stop::Inactive => panic!("the due timer's cancel found nothing"),
    }
    assert_eq!(second, Stop::Cancelled);
    assert_eq!(far.runs.load(SeqCst), 0);
    assert_eq!(
        (due.drops.load(SeqCst), far.drops.load(SeqCst)),
        (1, 1),
        "a stopped timer was not reclaimed"
    );
    assert_eq!(service.stats().freed, 2);
}

/// Remote stops on the remote queue (`src/service/remote.rs`, CONTRACT 8
/// and 13): another thread cancels a due timer and a far one (each one CAS
/// on its slot, which sets `QUEUED`, and one push of the slot onto the
/// shard's remote queue) while the owner polls, which fires the due one
/// unless the cancel won, and takes the queue in. Exactly one of cancel and
/// fire wins for the due timer; the far one never runs; and one more poll
/// after the cancels reclaims both slots and drops both callbacks. With the
/// push's CAS and the owner's swap relaxed (tried on the former stop queue,
/// whose push and take the remote queue keeps), loom finds the owner
/// reading a pushed slot's link before the pusher's write of it: the first
/// slot pushed is lost with `QUEUED` set, and never freed.
#[test]
fn remote_cancel_vs_fire_vs_take() {
    model("remote_cancel_vs_fire_vs_take", || {
        let (service, mut guard, clock) = service();
        let due = std::sync::Arc::new(Probe::default());
        let far = std::sync::Arc::new(Probe::default());
        let a = service.start(TICK, counting_callback(&due)).unwrap();
        let b = service.start(TICK * 100, counting_callback(&far)).unwrap();
        guard.poll().unwrap();
        clock.advance(TICK);
        let remote = thread::spawn(move || (a.cancel(), b.cancel()));
        guard.poll().unwrap();
        let (first, second) = remote.join().unwrap();
        guard.poll().unwrap();
        cancels_of_a_due_and_a_far_timer_settled(&service, (first, second), &due, &far);
        drop(guard);
    });
}

/// Remote stops batched by a thread that owns a shard of its own
/// (`src/service/shard/stops.rs`; loom's batches hold two): the owner of
/// shard 1 cancels shard 0's due timer and far timer (each one CAS on its
/// slot, which sets `QUEUED`; the second fills the batch, which goes onto
/// shard 0's queue with one CAS), while shard 0's owner polls, which fires
/// the due one unless the cancel won, and takes the queue in. Exactly one
/// of cancel and fire wins; the far one never runs; once the stopper has
/// let go of its shard, one more poll reclaims both slots and drops both
/// callbacks. With the batch's push relaxed (its CAS `Relaxed` for
/// success), loom finds the owner reading the batch's links before the
/// stopper wrote them: a slot is lost with `QUEUED` set, never freed.
#[test]
fn batched_remote_stops_vs_fire_vs_take() {
    model("batched_remote_stops_vs_fire_vs_take", || {
        let clock = ManualClock::new();
        let service = embedded_service(2, &clock);
        let mut guard = service.claim_shard(0).unwrap();
        let due = std::sync::Arc::new(Probe::default());
        let far = std::sync::Arc::new(Probe::default());
        let a = service.start(TICK, counting_callback(&due)).unwrap();
        let b = service.start(TICK * 100, counting_callback(&far)).unwrap();
        guard.poll().unwrap();
        clock.advance(TICK);
        let remote = {
            let service = service.clone();
            thread::spawn(move || {
                let _own = service.claim_shard(1).unwrap();
                (a.cancel(), b.cancel())
            })
        };
        guard.poll().unwrap();
        let (first, second) = remote.join().unwrap();
        guard.poll().unwrap();
        cancels_of_a_due_and_a_far_timer_settled(&service, (first, second), &due, &far);
        drop(guard);
    });
}

/// The owner's cancel of its own armed timer (one CAS straight to the freed
/// state, `Shard::cancel_owned`) racing another thread's STOP by id (a CAS
/// that queues the slot on the remote queue). Exactly one of them cancels;
/// the callback never runs; the slot is freed once and its callback
/// dropped once, after the owner's next poll. With the owner's CAS turned
/// into a plain store, loom finds both returning `Cancelled`: the owner
/// freed a slot that was still queued.
#[test]
fn owner_cancel_vs_remote_stop() {
    model("owner_cancel_vs_remote_stop", || {
        let (service, mut guard, _clock) = service();
        let probe = std::sync::Arc::new(Probe::default());
        let timer = service
            .start(TICK * 100, counting_callback(&probe))
            .unwrap();
        let id = timer.id();
        let remote = {
            let service = service.clone();
            thread::spawn(move || service.stop_id(id))
        };
        let mine = timer.cancel();
        let theirs = remote.join().unwrap();
        guard.poll().unwrap();
        let cancelled = [mine, theirs]
            .iter()
            .filter(|&&outcome| outcome == Stop::Cancelled)
            .count();
        assert_eq!(cancelled, 1, "owner {mine:?}, remote {theirs:?}");
        assert_eq!(probe.runs.load(SeqCst), 0);
        assert_eq!(probe.drops.load(SeqCst), 1);
        assert_eq!(service.stats().freed, 1);
        drop(guard);
    });
}

/// The owner's RESTART of its own armed timer takes no CAS (`Shard::
/// restart_owned`): it reads the word after taking in the remote queue and
/// moves the timer in the wheel. Racing a STOP from another thread, either
/// order is allowed, but a STOP that returned before the restart began
/// must make it a re-arm that fires; a restart that moved the timer and a
/// STOP after it leave nothing to fire.
#[test]
fn owner_restart_vs_remote_stop() {
    model("owner_restart_vs_remote_stop", || {
        let (service, mut owner, clock) = service();
        let probe = std::sync::Arc::new(Probe::default());
        let timer = Arc::new(service.start(TICK * 2, counting_callback(&probe)).unwrap());
        owner.poll().unwrap();
        let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let id = timer.id();
        let stopper = {
            let (service, stopped) = (service.clone(), stopped.clone());
            thread::spawn(move || {
                let outcome = service.stop_id(id);
                stopped.store(true, SeqCst);
                outcome
            })
        };
        // Without a yield here loom runs the stopper only at the join.
        thread::yield_now();
        let stop_first = stopped.load(SeqCst);
        let mine = timer.restart(TICK * 3).unwrap();
        let theirs = stopper.join().unwrap();
        assert_eq!(theirs, Stop::Cancelled, "armed whichever went first");
        if stop_first {
            assert_eq!(mine, Restart::Rearmed, "the STOP had returned");
        }
        clock.advance(TICK * 4);
        owner.poll().unwrap();
        let expected = match mine {
            Restart::Moved => 0,
            Restart::Rearmed => 1,
        };
        assert_eq!(probe.runs.load(SeqCst), expected, "restart {mine:?}");
    });
}

/// The owner's CAS-free RESTART racing a RESTART from another thread: the
/// timer fires exactly once, at one of the two deadlines, and at the
/// owner's if the other thread's RESTART had returned before the owner's
/// began (it is then in the remote queue, which the owner takes in first).
#[test]
fn owner_restart_vs_remote_restart() {
    model("owner_restart_vs_remote_restart", || {
        let (service, mut owner, clock) = service();
        let probe = std::sync::Arc::new(Probe::default());
        let timer = Arc::new(service.start(TICK * 10, counting_callback(&probe)).unwrap());
        owner.poll().unwrap();
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let remote = {
            let (timer, done) = (timer.clone(), done.clone());
            thread::spawn(move || {
                let outcome = timer.restart(TICK * 2).unwrap();
                done.store(true, SeqCst);
                outcome
            })
        };
        thread::yield_now();
        let remote_first = done.load(SeqCst);
        assert_eq!(timer.restart(TICK * 4).unwrap(), Restart::Moved);
        assert_eq!(remote.join().unwrap(), Restart::Moved);
        let mut fired_at = None;
        for tick in 1..=5 {
            clock.advance(TICK);
            owner.poll().unwrap();
            let runs = probe.runs.load(SeqCst);
            assert!(runs <= 1, "fired twice");
            if runs == 1 && fired_at.is_none() {
                fired_at = Some(tick);
            }
        }
        let fired_at = fired_at.expect("fired at one of the two deadlines");
        assert!(fired_at == 2 || fired_at == 4, "fired at tick {fired_at}");
        if remote_first {
            assert_eq!(fired_at, 4, "the owner's RESTART came last");
        }
    });
}

// ---------------------------------------------------------------------------
// Futures (`tickwheel::future`): the task's waker vs the owner's fire.

/// A waker that counts its wakes (outside the model: it only records).
struct CountingWake(AtomicUsize);

impl std::task::Wake for CountingWake {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

fn counting_waker() -> (std::task::Waker, std::sync::Arc<CountingWake>) {
    let count = std::sync::Arc::new(CountingWake(AtomicUsize::new(0)));
    (count.clone().into(), count)
}

/// One poll of `sleep` by a task whose waker is `waker`.
fn poll(sleep: &mut tickwheel::future::Sleep, waker: &std::task::Waker) -> std::task::Poll<()> {
    std::future::Future::poll(
        std::pin::Pin::new(sleep),
        &mut std::task::Context::from_waker(waker),
    )
}

/// A sleep polled on a new worker (a new waker) while its shard's owner
/// fires it (`src/future/sleep.rs`): the poll's STOP of the old timer
/// decides. Either that poll sees the fire (Ready), or it armed a new
/// timer whose callback holds the new waker, which the owner's next poll
/// fires and wakes. A lost wake (the owner woke only the old waker) leaves
/// the task asleep for ever. Fails ("never woken") when a poll with a
/// changed waker keeps the old timer instead of stopping and replacing
/// it. Passes when a poll that lost the STOP to the fire (the fire's CAS
/// came first) arms a new timer anyway instead of completing: a spare
/// timer for a passed deadline, fired at the owner's next poll, is
/// wasteful but not wrong.
#[test]
fn sleep_poll_vs_fire_vs_waker_change() {
    model("sleep_poll_vs_fire_vs_waker_change", || {
        let (service, mut guard, clock) = service();
        let (first, _) = counting_waker();
        let (second, second_count) = counting_waker();
        let mut sleep = service.sleep(TICK);
        assert!(poll(&mut sleep, &first).is_pending());
        let task = thread::spawn(move || {
            let polled = poll(&mut sleep, &second);
            (polled, sleep)
        });
        // Without it loom runs the task only at the join.
        thread::yield_now();
        clock.advance(TICK * 10);
        guard.poll().unwrap();
        let (polled, sleep) = task.join().unwrap();
        // The owner polls on (a timer the task armed after the poll above
        // took in its queue fires now).
        guard.poll().unwrap();
        if polled.is_pending() {
            assert!(
                second_count.0.load(SeqCst) >= 1,
                "the task's current waker was never woken"
            );
        }
        assert!(sleep.is_elapsed(), "elapsed");
        drop(sleep);
    });
}

/// An interval ticking on a new worker (a new waker) while its shard's
/// owner fires the periodic timer (`src/future/waker_cell.rs`): either
/// that poll sees the fire counted (a tick), or the waker it registered is
/// woken. A lost wake (the owner woke the old waker, or found the cell
/// busy and nobody woke the new one) leaves the task asleep for ever.
/// Fails ("never woken") with the re-read of the fire count after
/// registering removed (`Interval::poll_tick`).
#[test]
fn interval_poll_vs_fire_vs_waker_change() {
    model("interval_poll_vs_fire_vs_waker_change", || {
        let (service, mut guard, clock) = service();
        let (first, _) = counting_waker();
        let (second, second_count) = counting_waker();
        let start = std::time::Instant::now() + TICK * 4;
        let mut every = service.interval_at(start, TICK * 4);
        let tick = |interval: &mut tickwheel::future::Interval, waker| {
            interval.poll_tick(&mut std::task::Context::from_waker(waker))
        };
        assert!(tick(&mut every, &first).is_pending());
        let task = thread::spawn(move || {
            let polled = every.poll_tick(&mut std::task::Context::from_waker(&second));
            (polled, every)
        });
        thread::yield_now();
        clock.advance(TICK * 10);
        guard.poll().unwrap();
        let (polled, mut every) = task.join().unwrap();
        if polled.is_pending() {
            assert!(
                second_count.0.load(SeqCst) >= 1,
                "the task's current waker was never woken"
            );
            assert!(tick(&mut every, &first).is_ready(), "woken for no tick");
        }
        drop(every);
    });
}

/// A sleep reset later is only recorded (`Sleep::reset`): its timer stays
/// at the old deadline, and the poll after that fire arms it again for the
/// rest. Here the task resets and polls on its own thread while the owner
/// fires the old deadline: whichever comes first, the sleep must not
/// complete before its new deadline, and must complete once that has
/// passed. Fails ("completed at the old deadline") when a poll that finds
/// the fire counted completes without comparing the deadline the timer was
/// armed for with the sleep's.
#[test]
fn sleep_reset_later_vs_fire() {
    model("sleep_reset_later_vs_fire", || {
        let (service, mut guard, clock) = service();
        let (waker, _) = counting_waker();
        let mut sleep = service.sleep(TICK);
        assert!(poll(&mut sleep, &waker).is_pending());
        let task = {
            let waker = waker.clone();
            thread::spawn(move || {
                sleep.reset_after(TICK * 20);
                let polled = poll(&mut sleep, &waker);
                (polled, sleep)
            })
        };
        thread::yield_now();
        // Past the old deadline, before the new one.
        clock.advance(TICK * 10);
        guard.poll().unwrap();
        let (polled, mut sleep) = task.join().unwrap();
        assert!(polled.is_pending(), "completed at the old deadline");
        // The poll after the old deadline's fire arms the rest.
        assert!(
            poll(&mut sleep, &waker).is_pending(),
            "completed at the old deadline"
        );
        assert!(!sleep.is_elapsed());
        clock.advance(TICK * 12);
        guard.poll().unwrap();
        guard.poll().unwrap();
        assert!(poll(&mut sleep, &waker).is_ready(), "never completed");
    });
}

/// Two threads release stopped timers of a lent shard at once, another
/// thread and the owner itself inside `idle` (where it is not the owner):
/// each pushes its slot, and the one whose `try_help` finds the other
/// inside leaves its slot to it. The helper must look at the queue again
/// once it has left, or that slot stays queued for as long as the owner
/// sleeps (CONTRACT 13). Six other timers stay linked so that neither
/// release is due to wake the owner (the reclaim bound is a third of the
/// wheel). Fails ("released while the owner slept") when
/// `Inner::help_reclaim` takes the queue in once and leaves without that
/// look.
#[test]
fn lent_shard_release_vs_leaving_helper() {
    model("lent_shard_release_vs_leaving_helper", || {
        let (service, mut guard, _clock) = service();
        let linked: Vec<_> = (0..6)
            .map(|_| service.start(TICK * 50, |_| {}).unwrap())
            .collect();
        let mut stopped: Vec<_> = (0..2)
            .map(|_| {
                let timer = service.start(TICK * 50, |_| {}).unwrap();
                assert_eq!(timer.stop(), tickwheel::Stop::Cancelled);
                timer
            })
            .collect();
        guard.poll().unwrap();
        let lent = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let producer = {
            let (lent, timer) = (lent.clone(), stopped.pop().unwrap());
            thread::spawn(move || {
                while !lent.load(SeqCst) {
                    thread::yield_now();
                }
                drop(timer);
            })
        };
        let own = stopped.pop().unwrap();
        guard.idle(|sleep| {
            assert_ne!(sleep, Some(Duration::ZERO));
            lent.store(true, SeqCst);
            drop(own);
            producer.join().unwrap();
            let stats = service.stats();
            assert_eq!(stats.freed, 2, "released while the owner slept: {stats:?}");
        });
        drop(linked);
    });
}
