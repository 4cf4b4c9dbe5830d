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
