//! A shard's next deadline is its earliest armed timer's, exactly: an owner
//! that sleeps until it wakes only when something is due, and a poll that
//! jumps there still fires everything on its own tick (CONTRACT items 2 and
//! 22).
#![cfg(not(loom))]

#[path = "common/manual_service.rs"]
mod common;

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{manual, MS};

#[test]
fn item22_next_deadline_is_the_earliest_timer_to_the_tick() {
    for delay_ms in [1u64, 10, 63, 64, 100, 1000, 4095, 4096, 5000, 100_000] {
        let (service, clock) = manual(1);
        let mut guard = service.claim_shard(0).unwrap();
        let delay = Duration::from_millis(delay_ms);
        let _timer = service.start(delay, |_| {}).unwrap();
        assert_eq!(guard.next_deadline_tick(), Some(delay_ms), "{delay_ms} ms");
        assert_eq!(guard.next_deadline(), Some(delay), "{delay_ms} ms");
        // Polled on the way (less than the delay), the answer stays.
        let midway = Duration::from_millis(delay_ms / 2);
        clock.set(midway);
        assert_eq!(guard.poll().unwrap(), 0);
        assert_eq!(guard.next_deadline_tick(), Some(delay_ms), "{delay_ms} ms");
        assert_eq!(guard.next_deadline(), Some(delay - midway));
        clock.set(delay);
        assert_eq!(guard.poll().unwrap(), 1, "{delay_ms} ms");
        assert_eq!(guard.next_deadline_tick(), None);
    }
}

#[test]
fn item22_next_deadline_follows_stops_and_restarts_of_the_earliest() {
    let (service, _clock) = manual(1);
    let mut guard = service.claim_shard(0).unwrap();
    let far = service.start(Duration::from_secs(100), |_| {}).unwrap();
    let near = service.start(Duration::from_millis(5000), |_| {}).unwrap();
    assert_eq!(guard.next_deadline_tick(), Some(5000));
    near.restart(Duration::from_millis(7001)).unwrap();
    assert_eq!(guard.next_deadline_tick(), Some(7001));
    near.stop();
    assert_eq!(guard.next_deadline_tick(), Some(100_000));
    far.stop();
    assert_eq!(guard.next_deadline_tick(), None);
}

/// A tickless loop (sleep until the next deadline, poll) with a heartbeat
/// kept 5 s ahead and idle timeouts a minute out (fewer than 64 per coarse
/// bucket, see the next test): one wakeup per expiry.
#[test]
fn item22_a_tickless_owner_wakes_once_per_expiry() {
    let (service, clock) = manual(1);
    let mut guard = service.claim_shard(0).unwrap();
    let _idle: Vec<_> = (0..50u64)
        .map(|i| {
            service
                .start(Duration::from_secs(60) + MS * i as u32, |_| {})
                .unwrap()
        })
        .collect();
    let beats = Arc::new(AtomicUsize::new(0));
    let counted = beats.clone();
    let _beat = service
        .start_periodic(Duration::from_secs(5), move |_| {
            counted.fetch_add(1, SeqCst);
        })
        .unwrap();
    let mut wakeups = 0;
    while let Some(tick) = guard.next_deadline_tick() {
        if tick >= 60_000 {
            break;
        }
        clock.set(MS * u32::try_from(tick).unwrap());
        assert_eq!(guard.poll().unwrap(), 1, "woke at {tick} for nothing");
        wakeups += 1;
    }
    assert_eq!(beats.load(SeqCst), 11);
    assert_eq!(wakeups, 11);
}

/// An owner that sleeps until each exact deadline jumps over many cascade
/// points at once: every timer, on every level, still fires on its own tick
/// and in deadline order.
#[test]
fn item2_jumping_to_each_exact_deadline_fires_everything_on_its_tick() {
    let (service, clock) = manual(1);
    let mut guard = service.claim_shard(0).unwrap();
    let fired = Arc::new(Mutex::new(Vec::new()));
    let mut expected = Vec::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut timers = Vec::new();
    for _ in 0..2000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        // 1 ms to about 4.6 hours: every level up to 4.
        let delay = 1 + (seed % (1 << (4 + seed % 11 * 2)));
        expected.push(delay);
        let log = fired.clone();
        timers.push(
            service
                .start(Duration::from_millis(delay), move |expiry| {
                    assert_eq!(expiry.now_tick(), expiry.deadline_tick());
                    log.lock().unwrap().push(expiry.deadline_tick());
                })
                .unwrap(),
        );
    }
    expected.sort_unstable();
    while let Some(tick) = guard.next_deadline_tick() {
        clock.set(MS * u32::try_from(tick).unwrap());
        guard.poll().unwrap();
    }
    let fired = fired.lock().unwrap().clone();
    assert_eq!(fired, expected);
}

/// Past `EXACT_BUDGET` (64) timers in the earliest coarse bucket, the answer
/// is that bucket's first tick: a bounded walk, never a late one.
#[test]
fn item22_a_crowded_coarse_bucket_answers_its_first_tick() {
    let (service, clock) = manual(1);
    let mut guard = service.claim_shard(0).unwrap();
    // 5000-5099 ms: one level-2 bucket (4096-8191), 100 timers.
    let crowd: Vec<_> = (0..100u32)
        .map(|i| service.start(MS * (5099 - i), |_| {}).unwrap())
        .collect();
    assert_eq!(guard.next_deadline_tick(), Some(4096));
    // Moved down a level at 4096: now exact again (level 1 buckets of 64
    // ticks hold at most 64 of them).
    clock.set(4096 * MS);
    assert_eq!(guard.poll().unwrap(), 0);
    assert_eq!(guard.next_deadline_tick(), Some(5000));
    // A few: exact at once.
    drop(crowd);
    let few: Vec<_> = (0..60u32)
        .map(|i| service.start(MS * (9000 + i), |_| {}).unwrap())
        .collect();
    assert_eq!(guard.next_deadline_tick(), Some(4096 + 9000));
    drop(few);
}
