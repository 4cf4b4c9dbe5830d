//! What a loop asks of the service besides firing: a timer's deadline and
//! time left (owner only), and the service clock's reading.
#![cfg(not(loom))]

#[path = "common/manual_service.rs"]
mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{manual, MS};

#[test]
fn the_service_clock_reads_the_manual_clock() {
    let (service, clock) = manual(1);
    assert_eq!(service.elapsed(), Duration::ZERO);
    clock.advance(Duration::from_micros(2500));
    assert_eq!(service.elapsed(), Duration::from_micros(2500));
}

#[test]
fn the_owner_reads_a_timers_deadline_and_time_left() {
    let (service, clock) = manual(1);
    let mut guard = service.claim_shard(0).unwrap();
    clock.set(Duration::from_micros(1500));
    // 1.5 ms + 5 ms = 6.5 ms, rounded up to tick 7.
    let timer = service.start(5 * MS, |_| {}).unwrap();
    assert_eq!(timer.deadline_tick(), Some(7));
    assert_eq!(timer.due_in(), Some(Duration::from_micros(5500)));
    timer.restart(100 * MS).unwrap();
    assert_eq!(timer.deadline_tick(), Some(102));
    clock.set(200 * MS);
    assert_eq!(timer.due_in(), Some(Duration::ZERO), "late: nothing left");
    assert_eq!(guard.poll().unwrap(), 1);
    assert_eq!(timer.deadline_tick(), None, "fired");
    timer.restart(MS).unwrap();
    assert_eq!(timer.deadline_tick(), Some(201));
    timer.stop();
    assert_eq!(timer.deadline_tick(), None, "stopped");
}

#[test]
fn another_threads_start_is_taken_in_before_the_owner_reads_it() {
    let (service, _clock) = manual(1);
    let _guard = service.claim_shard(0).unwrap();
    let timer = std::thread::scope(|scope| {
        scope
            .spawn(|| service.schedule(tickwheel::TimerSpec::after(30 * MS).on_shard(0), |_| {}))
            .join()
            .unwrap()
            .unwrap()
    });
    assert_eq!(timer.deadline_tick(), Some(30));
    // Another thread (not the owner) has no answer.
    std::thread::scope(|scope| {
        scope.spawn(|| {
            assert_eq!(timer.deadline_tick(), None);
            assert_eq!(timer.due_in(), None);
        });
    });
}

#[test]
fn a_callback_reads_the_deadline_of_its_shards_timers() {
    let (service, clock) = manual(1);
    let mut guard = service.claim_shard(0).unwrap();
    let other = Arc::new(service.start(50 * MS, |_| {}).unwrap());
    let seen = Arc::new(Mutex::new(None));
    let (peer, log) = (other.clone(), seen.clone());
    let _first = service
        .start(10 * MS, move |_| {
            *log.lock().unwrap() = Some((peer.deadline_tick(), peer.due_in()));
        })
        .unwrap();
    clock.set(10 * MS);
    assert_eq!(guard.poll().unwrap(), 1);
    assert_eq!(*seen.lock().unwrap(), Some((Some(50), Some(40 * MS))));
}
