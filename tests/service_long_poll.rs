//! A poll that finds work queued by other threads while it runs must not
//! fire by a stale clock (CONTRACT 2: lateness comes only from the owner not
//! running). Under a flood of remote starts (8 threads arming 1.6 M timers
//! on 4 shards) a poll that went on while work kept arriving, reading the
//! clock only when it began, fired only what was due by that tick: timers
//! falling due meanwhile waited for the flood to pause (p50 lateness 43-53
//! ms). A poll now takes in what was queued when it began (and any backlog
//! beyond one batch, re-reading the clock each round); what arrives later
//! waits for the next poll, which reads the clock anew, and keeps the owner
//! from sleeping only if it is due before the sleep would end.
//!
//! Deterministic: a manual clock and an embedded shard. A callback moves the
//! clock on and has another thread start a timer on the shard during the
//! poll; the next poll must fire what fell due meanwhile, by the new clock.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use tickwheel::{Clock, Driver, ManualClock, TimerService, TimerSpec};

const MS: Duration = Duration::from_millis(1);
const NOT_FIRED: u64 = u64::MAX;

#[test]
fn a_poll_leaves_later_remote_work_to_the_next_which_reads_the_clock_anew() {
    let clock = ManualClock::new();
    let service = TimerService::builder()
        .shards(1)
        .tick(MS)
        .driver(Driver::Embedded)
        .clock(Clock::Manual(clock.clone()))
        .build()
        .unwrap();
    let mut guard = service.claim_shard(0).unwrap();

    // Due at 5 ms; records its lateness on the service's clock.
    let later = Arc::new(AtomicU64::new(NOT_FIRED));
    let recorded = later.clone();
    let _later_timer = service
        .start(5 * MS, move |expiry| {
            recorded.store(expiry.lateness().as_nanos() as u64, SeqCst)
        })
        .unwrap();

    // Due at 1 ms: moves the clock to 10 ms, then has another thread start a
    // timer on this shard (through its remote queue, as any remote start),
    // so the poll that runs this callback finds it queued and goes on.
    let (remote, remote_clock) = (service.clone(), clock.clone());
    let _first_timer = service
        .start(MS, move |_| {
            remote_clock.advance(9 * MS);
            let service = remote.clone();
            std::thread::spawn(move || {
                service
                    .schedule(
                        TimerSpec::after(Duration::from_secs(60)).on_shard(0),
                        |_| {},
                    )
                    .unwrap()
                    .forget();
            })
            .join()
            .unwrap();
        })
        .unwrap();

    clock.advance(MS);
    assert_eq!(guard.poll().unwrap(), 1, "the 1 ms timer fires");
    assert_eq!(
        later.load(SeqCst),
        NOT_FIRED,
        "the poll ran by the clock it read: 1 ms"
    );
    assert_eq!(guard.armed(), 1, "the remote start waits for the next poll");
    assert_eq!(
        guard.next_deadline(),
        Some(Duration::ZERO),
        "the 5 ms timer is due by the clock now"
    );
    assert_eq!(guard.poll().unwrap(), 1);
    assert_eq!(
        later.load(SeqCst),
        5_000_000,
        "the 5 ms timer fires in the next poll, by the clock at 10 ms: 5 ms late"
    );
    assert_eq!(guard.armed(), 1, "the remote 60 s timer is linked");
}
