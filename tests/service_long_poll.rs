//! A poll that keeps finding work queued by other threads must keep reading
//! the clock (CONTRACT 2: lateness comes only from the owner not running). A
//! shard's poll goes on while other threads keep queueing work for it; under
//! a flood of remote starts (8 threads arming 1.6 M timers on 4 shards) a
//! poll that read the clock only when it began lasted for much of the flood
//! and fired only what was due by that tick: timers falling due meanwhile
//! waited for the flood to pause (p50 lateness 43-53 ms, against 15-16 ms
//! once the poll re-read the clock every round, measured with the former
//! message intake).
//!
//! Deterministic: a manual clock and an embedded shard. A callback moves the
//! clock on and has another thread start a timer on the shard, so the same
//! poll goes round again; what fell due meanwhile must fire in it.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use tickwheel::{Clock, Driver, ManualClock, TimerService, TimerSpec};

const MS: Duration = Duration::from_millis(1);
const NOT_FIRED: u64 = u64::MAX;

#[test]
fn a_poll_that_keeps_taking_in_messages_fires_what_falls_due_meanwhile() {
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
    let fired = guard.poll().unwrap();
    assert_eq!(
        later.load(SeqCst),
        5_000_000,
        "the 5 ms timer must fire in the poll that took in the remote start at 10 ms, 5 ms late"
    );
    assert_eq!(fired, 2, "both timers fired in that one poll");
    assert_eq!(guard.armed(), 1, "the remote 60 s timer is linked");
}
