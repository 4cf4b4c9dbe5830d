//! Slot generations under churn (CONTRACT 13 and 14): a slot's generation
//! wraps instead of retiring the slot, so START + STOP churn leaves memory
//! flat however it concentrates, while an owner rotates its freed slots so
//! that a stale id stays stale for many reuses.
//!
//! CI also runs this file with `--cfg tickwheel_narrow_gen`, where a
//! generation has 4 bits and wraps after 15 incarnations: then these loops
//! stand for hours of churn at full speed. (With slots retired at the last
//! generation, that build grew by a slot per 15 pairs here.)
#![cfg(not(loom))]

use std::time::Duration;

use tickwheel::{Stop, TimerSpec};

#[path = "common/manual_service.rs"]
mod common;
use common::MS;

const HOUR: Duration = Duration::from_secs(3600);
const PAIRS: usize = 100_000;

fn manual() -> (tickwheel::TimerService, tickwheel::ManualClock) {
    common::manual(1)
}

#[test]
fn owner_churn_on_one_timer_leaves_memory_flat() {
    let (service, _clock) = manual();
    let _guard = service.claim_shard(0).unwrap();
    let churn = |pairs: usize| {
        for _ in 0..pairs {
            let timer = service.start(HOUR, |_| {}).unwrap();
            assert_eq!(timer.cancel(), Stop::Cancelled);
        }
    };
    churn(1_000);
    let warm = service.stats().slots;
    churn(PAIRS);
    let stats = service.stats();
    assert_eq!(stats.slots, warm, "{stats:?}");
    assert!(stats.slots <= 128, "{stats:?}");
}

#[test]
fn remote_churn_leaves_memory_flat() {
    let (service, clock) = manual();
    let mut guard = service.claim_shard(0).unwrap();
    let remote = service.clone();
    let churn = move |pairs: usize, guard: &mut tickwheel::ShardGuard| {
        for round in 0..pairs / 100 {
            let remote = remote.clone();
            std::thread::spawn(move || {
                for _ in 0..100 {
                    let timer = remote
                        .schedule(TimerSpec::after(HOUR).on_shard(0), |_| {})
                        .unwrap();
                    assert_eq!(timer.cancel(), Stop::Cancelled);
                }
            })
            .join()
            .unwrap();
            if round % 2 == 0 {
                clock.advance(MS);
            }
            guard.poll().unwrap();
        }
    };
    churn(2_000, &mut guard);
    let warm = service.stats().slots;
    churn(PAIRS / 4, &mut guard);
    let stats = service.stats();
    assert!(stats.slots <= warm + 256, "warm {warm}: {stats:?}");
}

/// A stopped timer's id stays stale while its slot is reused: it never
/// reaches the timers that come after it, for as many reuses as it takes
/// the generation to come round in the narrow build (15 incarnations of
/// each of the rotated slots).
#[test]
fn a_stale_id_never_reaches_the_timers_after_it() {
    let (service, _clock) = manual();
    let _guard = service.claim_shard(0).unwrap();
    let first = service.start(HOUR, |_| {}).unwrap();
    let stale = first.id();
    assert_eq!(first.cancel(), Stop::Cancelled);
    for _ in 0..900 {
        let timer = service.start(HOUR, |_| {}).unwrap();
        assert_ne!(timer.id(), stale);
        assert_eq!(service.stop_id(stale), Stop::Inactive);
        assert!(timer.is_armed());
        assert_eq!(timer.cancel(), Stop::Cancelled);
    }
}
