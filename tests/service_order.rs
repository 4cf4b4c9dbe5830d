//! CONTRACT 5 across threads: when one arming happens before another (here:
//! ordered by a channel), the first fires first among timers due on the same
//! tick, whichever thread armed each. The owner's own START and RESTART are
//! applied in its wheel at once; they must not overtake a START that another
//! thread made earlier and that still waits for the owner. A RESTART counts
//! as a new arming: the timer fires after those already armed for its new
//! tick, whoever restarts it.
#![cfg(not(loom))]

use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use tickwheel::{Restart, Timer, TimerService, TimerSpec};

#[path = "common/manual_service.rs"]
mod common;
use common::MS;

type Log = Arc<Mutex<Vec<&'static str>>>;

fn logger(log: &Log, name: &'static str) -> impl FnMut(&mut tickwheel::Expiry<'_>) + Send {
    let log = log.clone();
    move |_| log.lock().unwrap().push(name)
}

/// The owner first does `before` (it may arm a timer of its own and keep
/// the handle), then another thread starts a timer for tick 5 and tells the
/// owner through a channel, then the owner does `after` (arming something
/// for tick 5 too). Returns the firing order at tick 5.
fn remote_then_owner(
    before: impl FnOnce(&TimerService, &Log) -> Option<Timer>,
    after: impl FnOnce(&TimerService, &Log, Option<&Timer>),
) -> Vec<&'static str> {
    let (service, clock) = common::manual(1);
    let log: Log = Arc::default();
    let mut guard = service.claim_shard(0).unwrap();
    let owned = before(&service, &log);
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
    after(&service, &log, owned.as_ref());
    clock.advance(5 * MS);
    assert_eq!(guard.poll(), Ok(2));
    drop((remote, owned));
    let order = log.lock().unwrap().clone();
    order
}

#[test]
fn an_owners_start_does_not_overtake_an_earlier_remote_start() {
    let order = remote_then_owner(
        |_, _| None,
        |service, log, _| {
            service
                .start(5 * MS, logger(log, "owner"))
                .unwrap()
                .forget();
        },
    );
    assert_eq!(order, ["remote", "owner"]);
}

/// The owner's START is linked only when something else needs the wheel
/// (`shard.rs`, "An owner's START"): a remote START made after it, taken in
/// first at the poll, must still fire after it.
#[test]
fn a_later_remote_start_does_not_overtake_an_owners_start_not_yet_linked() {
    let order = remote_then_owner(
        |service, log| Some(service.start(5 * MS, logger(log, "owner")).unwrap()),
        |_, _, _| {},
    );
    assert_eq!(order, ["owner", "remote"]);
}

#[test]
fn an_owners_restart_does_not_overtake_an_earlier_remote_start() {
    let order = remote_then_owner(
        |service, log| {
            Some(
                service
                    .start(Duration::from_secs(3600), logger(log, "owner"))
                    .unwrap(),
            )
        },
        |_, _, owned| {
            owned.unwrap().restart(5 * MS).unwrap();
        },
    );
    assert_eq!(order, ["remote", "owner"]);
}

/// From inside a callback (the owner's thread, during a poll): a START that
/// another thread made while the callback ran, before the callback's own,
/// still fires first.
#[test]
fn a_start_from_a_callback_does_not_overtake_an_earlier_remote_start() {
    let (service, clock) = common::manual(1);
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

/// A START that reuses, in place on the owner's remote queue, the slot of
/// the same thread's START it cancelled before the owner took it in
/// (`Inner::revive`) still fires after a START that happened before it.
/// Thread T starts a timer and cancels it; thread U then starts "earlier"
/// for tick 5 (queued behind T's old slot) and tells T; T starts "later"
/// for tick 5 in its old slot, ahead of U's on the queue. The owner takes
/// the queue in only now: "earlier" must fire first. Fails with the owner
/// linking a revived START at its place on the queue
/// (`Shard::apply_one` ignoring `owned.prev`).
#[test]
fn a_start_in_a_reused_queued_slot_does_not_overtake_an_earlier_start() {
    let (service, clock) = common::manual(1);
    let log: Log = Arc::default();
    let mut guard = service.claim_shard(0).unwrap();
    let (to_t, from_u) = mpsc::channel::<()>();
    let (to_u, from_t) = mpsc::channel::<()>();
    let t = {
        let (service, log) = (service.clone(), log.clone());
        std::thread::spawn(move || {
            let first = service
                .schedule(TimerSpec::after(5 * MS).on_shard(0), |_| unreachable!())
                .unwrap();
            assert_eq!(first.cancel(), tickwheel::Stop::Cancelled);
            to_u.send(()).unwrap();
            from_u.recv().unwrap();
            let later = service
                .schedule(TimerSpec::after(5 * MS).on_shard(0), logger(&log, "later"))
                .unwrap();
            // Reused: no new slot.
            (later, service.stats().freed)
        })
    };
    let u = {
        let (service, log) = (service.clone(), log.clone());
        std::thread::spawn(move || {
            from_t.recv().unwrap();
            let earlier = service
                .schedule(
                    TimerSpec::after(5 * MS).on_shard(0),
                    logger(&log, "earlier"),
                )
                .unwrap();
            to_t.send(()).unwrap();
            earlier
        })
    };
    let earlier = u.join().unwrap();
    let (later, freed) = t.join().unwrap();
    assert_eq!(freed, 1, "the cancelled START's slot was reused in place");
    clock.advance(5 * MS);
    assert_eq!(guard.poll(), Ok(2));
    assert_eq!(*log.lock().unwrap(), ["earlier", "later"]);
    drop((earlier, later));
}

/// Who restarts the timers in
/// `a_restarted_timer_fires_after_those_already_armed_for_its_tick`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mover {
    /// The owner, between polls (`Timer::restart`).
    Owner,
    /// Another thread, before the owner's next poll (`Timer::restart`).
    AnotherThread,
    /// A callback during a poll (`Expiry::restart_id`, `Expiry::restart`).
    Callback,
}

/// A restarted timer counts as newly armed: on its new tick it fires after
/// every timer already armed for that tick, whether it came from a later
/// tick (`l` in the same wheel bucket, `f` from a far level), an earlier
/// one (`e`), that same tick (`z`, armed for it before the others), or had
/// fired (`h`, re-armed). The tick on level 0, 1 and 2 of the shard's
/// wheel; the restarts made at the start or after time moved (`a` armed
/// before, `b` after), by the owner, by another thread or from a callback.
#[test]
fn a_restarted_timer_fires_after_those_already_armed_for_its_tick() {
    // (tick, earlier, later, far, the tick the restarts are made at)
    let cases = [
        (40, 20, 50, 5000, 10),
        (200, 130, 203, 9000, 0),
        (200, 130, 203, 9000, 100),
        (5000, 4200, 5001, 300_000, 0),
        (5000, 4200, 5001, 300_000, 4100),
    ];
    for mover in [Mover::Owner, Mover::AnotherThread, Mover::Callback] {
        for &case in &cases {
            assert_eq!(
                restarted_onto_a_crowded_tick(mover, case),
                ["a", "b", "l", "e", "z", "f", "h"],
                "{mover:?}, (tick, earlier, later, far, restarted at) = {case:?}"
            );
        }
    }
}

/// The firing order at tick `t` (all seven fire there, none before).
fn restarted_onto_a_crowded_tick(
    mover: Mover,
    (t, early, late, far, pause): (u32, u32, u32, u32, u32),
) -> Vec<&'static str> {
    let (service, clock) = common::manual(1);
    let log: Log = Arc::default();
    let mut guard = service.claim_shard(0).unwrap();
    let start = |delay: u32, name| service.start(delay * MS, logger(&log, name)).unwrap();
    let z = start(t, "z");
    let e = start(early, "e");
    let l = start(late, "l");
    let f = start(far, "f");
    let a = start(t, "a");
    let moved = [l.id(), e.id(), z.id(), f.id()];
    // From `pause` to `t`.
    let delay = (t - pause) * MS;
    // `h` fires at `pause`. Then (from its callback, or after the poll)
    // `b` is started, and `l`, `e`, `z`, `f` and `h` restarted for `t`.
    let h = {
        let log = log.clone();
        let mut first = true;
        service
            .start(pause * MS, move |expiry| {
                log.lock().unwrap().push("h");
                if std::mem::take(&mut first) && mover == Mover::Callback {
                    expiry
                        .schedule(TimerSpec::after(delay), logger(&log, "b"))
                        .unwrap()
                        .forget();
                    for id in moved {
                        assert_eq!(expiry.restart_id(id, delay), Ok(Restart::Moved));
                    }
                    assert_eq!(expiry.restart(delay), Ok(Restart::Rearmed));
                }
            })
            .unwrap()
    };
    clock.advance(pause * MS);
    assert_eq!(guard.poll(), Ok(1));
    assert_eq!(std::mem::take(&mut *log.lock().unwrap()), ["h"]);
    let restarts = || {
        for timer in [&l, &e, &z, &f] {
            assert_eq!(timer.restart(delay), Ok(Restart::Moved));
        }
        assert_eq!(h.restart(delay), Ok(Restart::Rearmed));
    };
    let b = match mover {
        Mover::Owner => {
            let b = start(t - pause, "b");
            restarts();
            Some(b)
        }
        Mover::AnotherThread => {
            let b = start(t - pause, "b");
            std::thread::scope(|scope| {
                scope.spawn(restarts);
            });
            Some(b)
        }
        Mover::Callback => None,
    };
    clock.advance(delay - MS);
    assert_eq!(guard.poll(), Ok(0), "nothing before tick {t}");
    clock.advance(MS);
    assert_eq!(guard.poll(), Ok(7));
    let order = log.lock().unwrap().clone();
    drop((z, e, l, f, a, h, b));
    order
}
