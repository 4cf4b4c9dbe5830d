//! When a timer armed for "now" fires (docs/CONTRACT.md item 1, the rule
//! for "due now"), and the owner's collect-then-run loop
//! (`ShardGuard::poll_due`). One embedded shard on a manual clock.
#![cfg(not(loom))]

#[path = "common/manual_service.rs"]
mod common;

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{manual, MS};

fn counter(fired: &Arc<AtomicUsize>) -> impl FnMut(&mut tickwheel::Expiry<'_>) + Send + 'static {
    let fired = fired.clone();
    move |_| {
        fired.fetch_add(1, SeqCst);
    }
}

#[test]
fn item1_a_zero_delay_fires_at_the_next_poll_without_waiting_for_a_tick() {
    let (service, clock) = manual(1);
    let mut guard = service.claim_shard(0).unwrap();
    let fired = Arc::new(AtomicUsize::new(0));
    // On a tick: the poll at the same reading fires it.
    clock.advance(3 * MS);
    assert_eq!(guard.poll().unwrap(), 0);
    let on_tick = service.start(Duration::ZERO, counter(&fired)).unwrap();
    assert_eq!(fired.load(SeqCst), 0, "never inside START");
    assert_eq!(guard.next_deadline(), Some(Duration::ZERO));
    assert_eq!(guard.poll().unwrap(), 1, "due now: the next poll fires it");
    assert_eq!(on_tick.stop(), tickwheel::Stop::Fired);
    // Between ticks: it is not rounded up to the next tick either.
    clock.advance(MS / 2);
    let mid_tick = service.start(Duration::ZERO, counter(&fired)).unwrap();
    assert_eq!(mid_tick.deadline_tick(), Some(3));
    assert_eq!(guard.poll().unwrap(), 1);
    assert_eq!(fired.load(SeqCst), 2);
    // Another thread's zero delay, queued before the poll, fires in it.
    let service2 = service.clone();
    let remote = std::thread::spawn(move || {
        service2
            .start(Duration::ZERO, |_| {})
            .map(|timer| timer.forget())
    });
    remote.join().unwrap().unwrap();
    assert_eq!(guard.poll().unwrap(), 1);
    // A delay of a nanosecond still rounds up (never early).
    let _later = service
        .start(Duration::from_nanos(1), counter(&fired))
        .unwrap();
    assert_eq!(guard.poll().unwrap(), 0);
    clock.advance(MS / 2);
    assert_eq!(guard.poll().unwrap(), 1);
}

#[test]
fn item1_a_callback_rearming_itself_for_now_fires_once_per_poll_on_its_tick() {
    let (service, clock) = manual(1);
    let mut guard = service.claim_shard(0).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let timer = service
        .start(2 * MS, move |e| {
            let mut log = log.lock().unwrap();
            log.push(e.deadline_tick());
            if log.len() < 4 {
                e.restart(Duration::ZERO).unwrap();
            }
        })
        .unwrap();
    let later = Arc::new(AtomicUsize::new(0));
    let _later = service.start(3 * MS, counter(&later)).unwrap();
    clock.advance(2 * MS);
    // Each poll fires it once: re-armed for the tick the poll has reached,
    // it waits for the next poll, which needs no tick of the clock.
    assert_eq!(guard.poll().unwrap(), 1);
    assert_eq!(guard.next_deadline_tick(), Some(2));
    assert_eq!(guard.next_deadline(), Some(Duration::ZERO));
    assert_eq!(guard.poll().unwrap(), 1);
    assert_eq!(guard.poll().unwrap(), 1);
    assert_eq!(guard.poll().unwrap(), 1);
    assert_eq!(guard.poll().unwrap(), 0, "the fourth run did not re-arm");
    // Not a tick later: every run was on the tick it was armed for.
    assert_eq!(*seen.lock().unwrap(), [2, 2, 2, 2]);
    assert_eq!(timer.stop(), tickwheel::Stop::Fired);
    assert_eq!(later.load(SeqCst), 0);
    clock.advance(MS);
    assert_eq!(guard.poll().unwrap(), 1);
}

#[test]
fn poll_due_hands_out_due_timers_in_order_once_each_without_running_them() {
    let (service, clock) = manual(1);
    let mut guard = service.claim_shard(0).unwrap();
    let fired = Arc::new(AtomicUsize::new(0));
    let b = service.start(2 * MS, counter(&fired)).unwrap();
    let a = service.start(MS, counter(&fired)).unwrap();
    let c = service.start(2 * MS, counter(&fired)).unwrap();
    let periodic = service.start_periodic(2 * MS, counter(&fired)).unwrap();
    let _far = service.start(9 * MS, counter(&fired)).unwrap();
    clock.advance(2 * MS);
    let mut order = Vec::new();
    while let Some(due) = guard.poll_due().unwrap() {
        order.push((due.id(), due.deadline_tick(), due.poll_tick()));
        if due.id() == b.id() {
            // Handed out: it has fired and is "running" until the Due goes.
            assert_eq!(b.stop(), tickwheel::Stop::Running);
            due.run();
        }
        // The others are dropped unrun.
    }
    assert_eq!(
        order,
        [
            (a.id(), 1, 2),
            (b.id(), 2, 2),
            (c.id(), 2, 2),
            (periodic.id(), 2, 2)
        ]
    );
    assert_eq!(fired.load(SeqCst), 1, "only the one run");
    assert_eq!(guard.poll().unwrap(), 0, "never handed out or fired twice");
    assert_eq!(a.stop(), tickwheel::Stop::Fired);
    assert_eq!(c.stop(), tickwheel::Stop::Fired);
    // The periodic timer was re-armed on its grid when its Due went.
    assert_eq!(periodic.deadline_tick(), Some(4));
    clock.advance(2 * MS);
    assert_eq!(guard.poll().unwrap(), 1);
    assert_eq!(fired.load(SeqCst), 2);
    assert_eq!(periodic.stop(), tickwheel::Stop::Cancelled);
    assert_eq!(
        service.stats().fired,
        5,
        "a collected timer counts as fired"
    );
}

#[test]
fn poll_due_defers_what_its_callbacks_arm_for_now_to_the_next_round() {
    let (service, clock) = manual(1);
    let mut guard = service.claim_shard(0).unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let count = runs.clone();
    let timer = service
        .start(MS, move |e| {
            if count.fetch_add(1, SeqCst) < 2 {
                e.restart(Duration::ZERO).unwrap();
            }
        })
        .unwrap();
    clock.advance(MS);
    for round in 1..=3 {
        let mut handed = 0;
        while let Some(due) = guard.poll_due().unwrap() {
            assert_eq!((due.id(), due.deadline_tick()), (timer.id(), 1));
            due.run();
            handed += 1;
        }
        assert_eq!(handed, 1, "round {round}");
    }
    assert!(guard.poll_due().unwrap().is_none());
    assert_eq!(runs.load(SeqCst), 3);
}

#[test]
fn a_panic_in_a_collected_callback_is_caught_and_the_shard_goes_on() {
    let clock = tickwheel::ManualClock::new();
    let panics = Arc::new(AtomicUsize::new(0));
    let seen = panics.clone();
    let service = common::builder(1, &clock)
        .panic_hook(move |_| {
            seen.fetch_add(1, SeqCst);
        })
        .build()
        .unwrap();
    let mut guard = service.claim_shard(0).unwrap();
    let fired = Arc::new(AtomicUsize::new(0));
    let _bad = service.start(MS, |_| panic!("collected")).unwrap();
    let _good = service.start(MS, counter(&fired)).unwrap();
    clock.advance(MS);
    while let Some(due) = guard.poll_due().unwrap() {
        due.run();
    }
    assert_eq!((panics.load(SeqCst), fired.load(SeqCst)), (1, 1));
    let _next = service.start(MS, counter(&fired)).unwrap();
    clock.advance(MS);
    assert_eq!(guard.poll().unwrap(), 1);
}

/// A chain of remote work that keeps coming while the owner takes its queue
/// in: each link is a START + cancel from a fresh thread whose capture, when
/// the owner frees it, queues the next link. `poll_due` takes in what was
/// queued before it was called, not what keeps arriving, so it returns
/// after a link or two and the owner is never held by a flood (CONTRACT 20);
/// every link is still applied by later polls. (Taking the queue in "until
/// empty" ran the whole chain inside one call.)
#[test]
fn poll_due_takes_in_one_snapshot_of_the_queue_not_a_flood() {
    const LINKS: usize = 300;
    struct Link {
        service: tickwheel::TimerService,
        applied: Arc<AtomicUsize>,
    }
    impl Drop for Link {
        fn drop(&mut self) {
            if self.applied.fetch_add(1, SeqCst) + 1 < LINKS {
                queue_link(&self.service, &self.applied);
            }
        }
    }
    fn queue_link(service: &tickwheel::TimerService, applied: &Arc<AtomicUsize>) {
        let (service, applied) = (service.clone(), applied.clone());
        std::thread::spawn(move || {
            let link = Link {
                service: service.clone(),
                applied,
            };
            let timer = service
                .schedule(
                    tickwheel::TimerSpec::after(Duration::from_secs(60)).on_shard(0),
                    move |_| {
                        let _ = &link;
                    },
                )
                .unwrap();
            assert_eq!(timer.cancel(), tickwheel::Stop::Cancelled);
        })
        .join()
        .unwrap();
    }

    let (service, _clock) = manual(1);
    let mut guard = service.claim_shard(0).unwrap();
    let applied = Arc::new(AtomicUsize::new(0));
    queue_link(&service, &applied);
    assert!(guard.poll_due().unwrap().is_none());
    let first = applied.load(SeqCst);
    assert!(
        (1..=2).contains(&first),
        "one call of poll_due applied {first} links of the chain"
    );
    while applied.load(SeqCst) < LINKS {
        guard.poll().unwrap();
    }
    assert_eq!(service.stats().armed, 0);
}
