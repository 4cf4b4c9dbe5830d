//! Driver threads ask the kernel for no timer slack (Linux), so that their
//! sleeps end at the deadlines they asked for rather than up to 50 µs
//! later (`src/service/driver.rs`, `no_timer_slack`). A process of its own:
//! it counts every driver thread it can see.
#![cfg(all(target_os = "linux", not(any(loom, shuttle, miri))))]

use std::time::{Duration, Instant};

use tickwheel::{Driver, TimerService};

#[path = "common/driver_threads.rs"]
mod driver_threads;
use driver_threads::driver_threads;

/// The thread id and timer slack (ns) of each driver thread.
fn driver_slacks() -> Vec<(i32, u64)> {
    driver_threads()
        .into_iter()
        .filter_map(|tid| {
            // Per thread at /proc/<tid> (there is no task/<tid>/timerslack_ns).
            let slack = std::fs::read_to_string(format!("/proc/{tid}/timerslack_ns")).ok()?;
            Some((tid, slack.trim().parse().expect("a number of ns")))
        })
        .collect()
}

#[test]
fn driver_threads_ask_for_no_timer_slack() {
    // This thread keeps the default, which tells the two apart.
    // SAFETY: a plain query of the calling thread's id.
    let me = unsafe { libc::gettid() };
    let own: u64 = std::fs::read_to_string(format!("/proc/{me}/timerslack_ns"))
        .expect("procfs")
        .trim()
        .parse()
        .unwrap();
    assert!(own > 1, "this kernel's default slack is {own} ns");
    let service = TimerService::builder()
        .shards(2)
        .driver(Driver::Threads { pin: false })
        .build()
        .unwrap();
    // A driver sets its slack first thing when it runs; a thread just
    // spawned may not have run yet.
    let deadline = Instant::now() + Duration::from_secs(10);
    let slacks = loop {
        let slacks = driver_slacks();
        if slacks.len() == 2 && slacks.iter().all(|&(_, slack)| slack == 1) {
            break slacks;
        }
        assert!(
            Instant::now() < deadline,
            "driver threads' timer slack (ns), by thread id: {slacks:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(slacks.len(), 2, "one driver thread per shard");
    drop(service);
}
