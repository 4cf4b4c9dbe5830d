//! Written the way a downstream crate would: a user's own concurrent code
//! (a connection that closes on idle timeout unless a packet arrives) with
//! tickwheel timers inside the user's `loom::model`. Only the public API is
//! used: an embedded shard (manual driver) on a manual clock.
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --test loom_downstream`
#![cfg(loom)]

use std::time::Duration;

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use loom::sync::Arc;
use loom::thread;
use tickwheel::{Clock, Driver, ManualClock, Restart, TimerService};

/// The user's connection: closed by its idle timer.
struct Connection {
    closed: AtomicBool,
    closes: AtomicUsize,
}

#[test]
fn idle_timeout_vs_packet_arrival() {
    loom::model(|| {
        let clock = ManualClock::new();
        let timers = TimerService::builder()
            .shards(1)
            .tick(Duration::from_millis(1))
            .driver(Driver::Embedded)
            .clock(Clock::Manual(clock.clone()))
            .build()
            .unwrap();
        let mut worker = timers.claim_shard(0).unwrap();

        let conn = Arc::new(Connection {
            closed: AtomicBool::new(false),
            closes: AtomicUsize::new(0),
        });
        let idle = {
            let conn = conn.clone();
            Arc::new(
                timers
                    .start(Duration::from_millis(10), move |_| {
                        conn.closed.store(true, SeqCst);
                        conn.closes.fetch_add(1, SeqCst);
                    })
                    .unwrap(),
            )
        };
        worker.poll().unwrap();
        clock.advance(Duration::from_millis(10));

        // A packet arrives on another thread just as the idle timeout is due.
        let packet = {
            let (idle, conn) = (idle.clone(), conn.clone());
            thread::spawn(move || {
                let outcome = idle.restart(Duration::from_millis(10)).unwrap();
                (outcome, conn.closed.load(SeqCst))
            })
        };
        worker.poll().unwrap();
        let (outcome, closed_before_restart) = packet.join().unwrap();

        match outcome {
            // The packet won: the connection must not have been closed.
            Restart::Moved => assert!(!closed_before_restart && conn.closes.load(SeqCst) == 0),
            // The timeout won: closed exactly once, then re-armed.
            Restart::Rearmed => assert_eq!(conn.closes.load(SeqCst), 1),
        }
        // Either way exactly one more close is pending, 10 ms later.
        let closes = conn.closes.load(SeqCst);
        clock.advance(Duration::from_millis(10));
        worker.poll().unwrap();
        assert_eq!(conn.closes.load(SeqCst), closes + 1);
    });
}
