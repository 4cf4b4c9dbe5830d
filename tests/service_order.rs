//! CONTRACT 5 across threads: when one arming happens before another (here:
//! ordered by a channel), the first fires first among timers due on the same
//! tick, whichever thread armed each. The owner's own START and RESTART are
//! applied in its wheel at once; they must not overtake a START that another
//! thread made earlier and that still waits for the owner.
#![cfg(not(loom))]

use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use tickwheel::{Clock, Driver, ManualClock, TimerService, TimerSpec};

const MS: Duration = Duration::from_millis(1);

fn manual() -> (TimerService, ManualClock) {
    let clock = ManualClock::new();
    let service = TimerService::builder()
        .shards(1)
        .tick(MS)
        .driver(Driver::Embedded)
        .clock(Clock::Manual(clock.clone()))
        .build()
        .unwrap();
    (service, clock)
}

type Log = Arc<Mutex<Vec<&'static str>>>;

fn logger(log: &Log, name: &'static str) -> impl FnMut(&mut tickwheel::Expiry<'_>) + Send {
    let log = log.clone();
    move |_| log.lock().unwrap().push(name)
}

/// Another thread starts `remote` for tick 5, then tells the owner, which
/// then does `owner_side` (arming something for tick 5 too).
fn remote_then_owner(owner_side: impl FnOnce(&TimerService, &Log)) -> Vec<&'static str> {
    let (service, clock) = manual();
    let log: Log = Arc::default();
    let mut guard = service.claim_shard(0).unwrap();
    let (tx, rx) = mpsc::channel();
    let (remote_service, remote_log) = (service.clone(), log.clone());
    std::thread::spawn(move || {
        let timer = remote_service
            .schedule(
                TimerSpec::after(5 * MS).on_shard(0),
                logger(&remote_log, "remote"),
            )
            .unwrap();
        tx.send(timer).unwrap();
    });
    let remote = rx.recv().unwrap();
    owner_side(&service, &log);
    clock.advance(5 * MS);
    assert_eq!(guard.poll(), Ok(2));
    drop(remote);
    let order = log.lock().unwrap().clone();
    order
}

#[test]
fn an_owners_start_does_not_overtake_an_earlier_remote_start() {
    let order = remote_then_owner(|service, log| {
        service
            .start(5 * MS, logger(log, "owner"))
            .unwrap()
            .forget();
    });
    assert_eq!(order, ["remote", "owner"]);
}

#[test]
fn an_owners_restart_does_not_overtake_an_earlier_remote_start() {
    let (service, clock) = manual();
    let log: Log = Arc::default();
    let mut guard = service.claim_shard(0).unwrap();
    let owned = service
        .start(Duration::from_secs(3600), logger(&log, "owner"))
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let (remote_service, remote_log) = (service.clone(), log.clone());
    std::thread::spawn(move || {
        let timer = remote_service
            .schedule(
                TimerSpec::after(5 * MS).on_shard(0),
                logger(&remote_log, "remote"),
            )
            .unwrap();
        tx.send(timer).unwrap();
    });
    let remote = rx.recv().unwrap();
    owned.restart(5 * MS).unwrap();
    clock.advance(5 * MS);
    assert_eq!(guard.poll(), Ok(2));
    assert_eq!(*log.lock().unwrap(), ["remote", "owner"]);
    drop((remote, owned));
}

/// From inside a callback (the owner's thread, during a poll): a START that
/// another thread made while the callback ran, before the callback's own,
/// still fires first.
#[test]
fn a_start_from_a_callback_does_not_overtake_an_earlier_remote_start() {
    let (service, clock) = manual();
    let log: Log = Arc::default();
    let mut guard = service.claim_shard(0).unwrap();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let done_rx = Mutex::new(done_rx);
    let go_tx = Mutex::new(go_tx);
    let inner_log = log.clone();
    // Fires at tick 1; the remote thread arms its timer for tick 5 while
    // the callback waits, then the callback arms its own for tick 5.
    service
        .start(MS, move |expiry| {
            go_tx.lock().unwrap().send(()).unwrap();
            done_rx.lock().unwrap().recv().unwrap();
            expiry
                .schedule(TimerSpec::after(4 * MS), logger(&inner_log, "callback"))
                .unwrap()
                .forget();
        })
        .unwrap()
        .forget();
    let (remote_service, remote_log) = (service.clone(), log.clone());
    let remote = std::thread::spawn(move || {
        go_rx.recv().unwrap();
        let timer = remote_service
            .schedule(
                TimerSpec::after(4 * MS).on_shard(0),
                logger(&remote_log, "remote"),
            )
            .unwrap();
        done_tx.send(()).unwrap();
        timer
    });
    clock.advance(MS);
    assert_eq!(guard.poll(), Ok(1));
    let remote = remote.join().unwrap();
    clock.advance(4 * MS);
    assert_eq!(guard.poll(), Ok(2));
    assert_eq!(*log.lock().unwrap(), ["remote", "callback"]);
    drop(remote);
}
