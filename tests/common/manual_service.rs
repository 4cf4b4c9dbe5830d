//! The service most contract tests start from: embedded shards (the test's
//! own threads own them) on a manual clock with 1 ms ticks, so that time
//! moves only when a test says so.
//!
//! Each test file takes what it needs of this file.
#![allow(dead_code)]

use std::time::Duration;

use tickwheel::{Builder, Clock, Driver, ManualClock, TimerService};

/// One tick.
pub const MS: Duration = Duration::from_millis(1);

/// A builder for `shards` embedded shards on `clock`, 1 ms ticks; a test
/// adds what it needs (a panic hook, a waker) and builds.
pub fn builder(shards: usize, clock: &ManualClock) -> Builder {
    TimerService::builder()
        .shards(shards)
        .tick(MS)
        .driver(Driver::Embedded)
        .clock(Clock::Manual(clock.clone()))
}

/// `builder(shards, ..)` built, and its clock.
pub fn manual(shards: usize) -> (TimerService, ManualClock) {
    let clock = ManualClock::new();
    let service = builder(shards, &clock).build().unwrap();
    (service, clock)
}
