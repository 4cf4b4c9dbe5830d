//! A panic in user code that tickwheel runs on its own paths: the `Drop` of a
//! callback's captures (CONTRACT 16). Wherever that drop runs (the owner's
//! poll, a STOP applied by another thread inside a lent shard, shutdown), the
//! panic is caught, counted in `Stats::panics`, reported to the panic hook,
//! and the shard keeps firing: no claim, poll or help is left in progress,
//! and no driver thread dies.
//!
//! Each test bounds its waits with channels and timeouts, so a wedged shard
//! fails the test instead of hanging it.
#![cfg(not(loom))]

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use tickwheel::{Driver, ManualClock, PanicSite, Stop, TimerService, TimerSpec};

#[path = "common/manual_service.rs"]
mod common;
use common::MS;

const HOUR: Duration = Duration::from_secs(3600);
/// Liveness limit: far beyond anything a loaded machine needs.
const PATIENCE: Duration = Duration::from_secs(30);

/// A capture whose `Drop` panics.
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        // Not while already unwinding: that would abort the test process.
        if !std::thread::panicking() {
            panic!("capture drop");
        }
    }
}

fn bomb_callback() -> impl FnMut(&mut tickwheel::Expiry<'_>) + Send + 'static {
    let bomb = Bomb;
    move |_| {
        let _ = &bomb;
    }
}

/// What a recording hook saw: shard, site and message of each report.
type Seen = Arc<Mutex<Vec<(usize, PanicSite, String)>>>;

/// A hook that records the reports it gets.
fn recording() -> (
    Seen,
    impl Fn(&tickwheel::PanicReport) + Send + Sync + 'static,
) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let hook = move |report: &tickwheel::PanicReport| {
        record
            .lock()
            .unwrap()
            .push((report.shard, report.site, report.message.clone()));
    };
    (seen, hook)
}

/// Starts a 5 ms timer on shard 0 and waits (bounded) for it to fire.
fn fires_soon(service: &TimerService) -> bool {
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let timer = service
        .schedule(TimerSpec::after(5 * MS).on_shard(0), move |_| {
            let _ = tx.lock().unwrap().send(());
        })
        .unwrap();
    let fired = rx.recv_timeout(PATIENCE).is_ok();
    timer.forget();
    fired
}

/// A clone that keeps the service alive if the test fails before it ends:
/// the drop of a service with a wedged shard never returns, and would turn a
/// failing assertion into a hang while the test unwinds.
fn keep_alive(service: &TimerService) -> std::mem::ManuallyDrop<TimerService> {
    std::mem::ManuallyDrop::new(service.clone())
}

/// An embedded owner on a manual clock still fires: a new one-tick timer
/// runs at the next tick's poll.
fn assert_a_new_timer_fires(
    service: &TimerService,
    guard: &mut tickwheel::ShardGuard,
    clock: &ManualClock,
) {
    let fired = Arc::new(AtomicUsize::new(0));
    let counter = fired.clone();
    service
        .start(MS, move |_| {
            counter.fetch_add(1, SeqCst);
        })
        .unwrap()
        .forget();
    clock.advance(MS);
    assert_eq!(guard.poll(), Ok(1));
    assert_eq!(fired.load(SeqCst), 1);
}

/// Drops the service on another thread and waits (bounded) for the drop to
/// return: a wedged shard made it spin for ever.
fn drops_in_time(service: TimerService) -> bool {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        drop(service);
        let _ = tx.send(());
    });
    rx.recv_timeout(PATIENCE).is_ok()
}

/// The driver thread lends its shard while it sleeps with nothing due soon;
/// the release of a fired timer's handle from another thread is then
/// applied by that thread, in the shard, and the capture's panicking `Drop`
/// runs there. (A remote cancel of an armed timer leaves the slot for the
/// owner to reclaim; a fired one has no wheel entry to meet it by.)
#[test]
fn a_panicking_capture_drop_during_a_remote_cancel_leaves_the_shard_working() {
    let (seen, hook) = recording();
    let service = TimerService::builder()
        .shards(1)
        .tick(MS)
        .driver(Driver::Threads { pin: false })
        .panic_hook(hook)
        .build()
        .unwrap();
    let alive = keep_alive(&service);
    let timer = service.start(MS, bomb_callback()).unwrap();
    let give_up = std::time::Instant::now() + PATIENCE;
    while service.stats().fired == 0 {
        assert!(std::time::Instant::now() < give_up, "the timer never fired");
        std::thread::sleep(MS);
    }
    // Let the driver fall asleep (lending its shard).
    std::thread::sleep(50 * MS);
    let canceller = service.clone();
    let caught = std::thread::spawn(move || {
        let outcome = catch_unwind(AssertUnwindSafe(|| timer.cancel()));
        // The same thread's own later START must fire too: it must not
        // believe it still holds the shard.
        let own = fires_soon(&canceller);
        (outcome, own)
    })
    .join()
    .unwrap();
    // The drop's panic is tickwheel's to catch (the cancel itself succeeded).
    assert_eq!(caught.0.ok(), Some(Stop::Fired));
    assert!(caught.1, "the cancelling thread's own timer never fired");
    assert!(fires_soon(&service), "the shard no longer fires");
    assert_eq!(service.stats().panics, 1);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].1, PanicSite::Drop);
    assert!(seen[0].2.contains("capture drop"));
    drop(std::mem::ManuallyDrop::into_inner(alive));
    assert!(drops_in_time(service), "dropping the service hung");
}

/// The same inside an embedded owner's `idle`, deterministically: the
/// release of the fired timer runs while the shard is lent (inside `park`).
#[test]
fn a_panicking_capture_drop_inside_a_lent_embedded_shard() {
    let service = TimerService::builder()
        .shards(1)
        .tick(MS)
        .driver(Driver::Embedded)
        .panic_hook(|_| {})
        .build()
        .unwrap();
    let alive = keep_alive(&service);
    let timer = service.start(MS, bomb_callback()).unwrap();
    let (done_tx, done_rx) = mpsc::channel();
    let owner_service = service.clone();
    let owner = std::thread::spawn(move || {
        let mut guard = owner_service.claim_shard(0).unwrap();
        // Fire it: the release below is then of a fired timer, which the
        // releasing thread applies in the lent shard itself.
        while guard.poll().unwrap() == 0 {
            std::thread::sleep(MS);
        }
        let canceller = owner_service.clone();
        guard.idle(move |_| {
            // Inside park: the shard is lent; another thread cancels.
            std::thread::spawn(move || catch_unwind(AssertUnwindSafe(|| timer.cancel())))
                .join()
                .unwrap()
                .ok();
            drop(canceller);
        });
        // Taking the shard back returned: poll and fire a new timer.
        let fired = Arc::new(AtomicUsize::new(0));
        let counter = fired.clone();
        owner_service
            .schedule(TimerSpec::after(MS).on_shard(0), move |_| {
                counter.fetch_add(1, SeqCst);
            })
            .unwrap()
            .forget();
        let give_up = std::time::Instant::now() + PATIENCE;
        while fired.load(SeqCst) == 0 && std::time::Instant::now() < give_up {
            guard.poll().unwrap();
            std::thread::sleep(MS);
        }
        let _ = done_tx.send((fired.load(SeqCst), owner_service.stats().panics));
    });
    let (fired, panics) = done_rx
        .recv_timeout(PATIENCE * 2)
        .expect("the owner never got its shard back");
    owner.join().unwrap();
    assert_eq!((fired, panics), (1, 1));
    drop(std::mem::ManuallyDrop::into_inner(alive));
    assert!(drops_in_time(service));
}

/// An embedded owner's poll frees a fired one-shot timer whose handle was
/// given up; its capture's `Drop` panics. The poll returns normally, the
/// panic is counted, and later polls fire later timers.
#[test]
fn a_panicking_capture_drop_in_the_owners_poll_is_caught() {
    let clock = ManualClock::new();
    let (seen, hook) = recording();
    let service = common::builder(1, &clock).panic_hook(hook).build().unwrap();
    let mut guard = service.claim_shard(0).unwrap();
    service.start(MS, bomb_callback()).unwrap().forget();
    clock.advance(MS);
    assert_eq!(guard.poll(), Ok(1));
    assert_eq!(service.stats().panics, 1);
    assert_eq!(seen.lock().unwrap()[0].1, PanicSite::Drop);
    assert_a_new_timer_fires(&service, &mut guard, &clock);
    // The freed slot is reusable, and nothing is left armed.
    assert_eq!(guard.armed(), 0);
}

/// The same with a driver thread: it survives the panic and keeps firing.
#[test]
fn a_driver_thread_survives_a_panicking_capture_drop() {
    let service = TimerService::builder()
        .shards(1)
        .tick(MS)
        .driver(Driver::Threads { pin: false })
        .panic_hook(|_| {})
        .build()
        .unwrap();
    let alive = keep_alive(&service);
    service.start(2 * MS, bomb_callback()).unwrap().forget();
    let give_up = std::time::Instant::now() + PATIENCE;
    while service.stats().panics == 0 {
        assert!(std::time::Instant::now() < give_up, "no panic counted");
        std::thread::sleep(MS);
    }
    assert!(fires_soon(&service), "the driver thread died");
    assert_eq!(service.stats().panics, 1);
    drop(std::mem::ManuallyDrop::into_inner(alive));
    assert!(drops_in_time(service));
}

/// A panicking capture `Drop` when the owner cancels its own timer (the
/// drop runs inline, in the owner's thread, outside any poll), and at
/// shutdown (the sweep drops pending callbacks): caught and counted both
/// times; the shard stays usable after the first.
#[test]
fn panicking_capture_drops_on_an_owner_cancel_and_at_shutdown() {
    let clock = ManualClock::new();
    let service = common::builder(1, &clock)
        .panic_hook(|_| {})
        .build()
        .unwrap();
    let mut guard = service.claim_shard(0).unwrap();
    let timer = service.start(HOUR, bomb_callback()).unwrap();
    assert_eq!(timer.cancel(), Stop::Cancelled);
    assert_eq!(service.stats().panics, 1);
    assert_a_new_timer_fires(&service, &mut guard, &clock);
    // Pending at shutdown: the sweep drops it.
    service.start(HOUR, bomb_callback()).unwrap().forget();
    drop(guard);
    let (tx, rx) = mpsc::channel();
    let stopping = service.clone();
    std::thread::spawn(move || {
        stopping.shutdown();
        let _ = tx.send(());
    });
    rx.recv_timeout(PATIENCE).expect("shutdown hung");
    assert_eq!(service.stats().panics, 2);
}

/// A waker whose clones panic when dropped while `PANIC_ON_DROP` is set.
static PANIC_ON_DROP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn bomb_waker() -> std::task::Waker {
    use std::task::{RawWaker, RawWakerVTable};
    fn clone(data: *const ()) -> RawWaker {
        RawWaker::new(data, &VTABLE)
    }
    fn noop(_: *const ()) {}
    fn drop(_: *const ()) {
        if PANIC_ON_DROP.load(SeqCst) {
            panic!("waker drop");
        }
    }
    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, noop, noop, drop);
    // SAFETY: the vtable's functions touch no data.
    unsafe { std::task::Waker::from_raw(RawWaker::new(std::ptr::null(), &VTABLE)) }
}

/// A sleep dropped on its shard's owner frees its slot in the same
/// generation (its id never left the sleep) for the owner's next START.
/// When the drop of the waker it holds panics, the report hands the id
/// out: the slot must then take a new generation, so that the next timer
/// gets another id and the reported one stops nothing.
#[test]
fn a_sleep_whose_waker_panics_on_drop_leaves_its_reported_id_stale() {
    use std::future::Future;
    let clock = ManualClock::new();
    let reported = Arc::new(Mutex::new(Vec::new()));
    let record = reported.clone();
    let service = common::builder(1, &clock)
        .panic_hook(move |report| record.lock().unwrap().push(report.timer))
        .build()
        .unwrap();
    let mut guard = service.claim_shard(0).unwrap();
    let waker = bomb_waker();
    let mut sleep = service.sleep(HOUR);
    let mut cx = std::task::Context::from_waker(&waker);
    assert!(std::pin::Pin::new(&mut sleep).poll(&mut cx).is_pending());
    PANIC_ON_DROP.store(true, SeqCst);
    drop(sleep);
    PANIC_ON_DROP.store(false, SeqCst);
    assert_eq!(service.stats().panics, 1);
    let id = reported.lock().unwrap()[0];
    let timer = service.start(HOUR, |_| {}).unwrap();
    assert_ne!(timer.id(), id, "the reported id names the next timer");
    assert_eq!(service.stop_id(id), Stop::Inactive);
    assert!(timer.is_armed());
    drop(timer);
    guard.poll().unwrap();
    assert_eq!(guard.armed(), 0);
}
