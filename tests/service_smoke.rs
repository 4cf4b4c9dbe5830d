use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tickwheel::*;

#[test]
fn smoke_manual() {
    let clock = ManualClock::new();
    let svc = TimerService::builder()
        .shards(1)
        .driver(Driver::Embedded)
        .clock(Clock::Manual(clock.clone()))
        .build()
        .unwrap();
    let mut g = svc.claim_shard(0).unwrap();
    let n = Arc::new(AtomicUsize::new(0));
    let n2 = n.clone();
    let t = svc
        .start(Duration::from_millis(5), move |_| {
            n2.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    assert_eq!(g.poll().unwrap(), 0);
    clock.advance(Duration::from_millis(4));
    assert_eq!(g.poll().unwrap(), 0);
    clock.advance(Duration::from_millis(1));
    assert_eq!(g.poll().unwrap(), 1);
    assert_eq!(t.stop(), Stop::Fired);
    assert_eq!(
        t.restart(Duration::from_millis(1)).unwrap(),
        Restart::Rearmed
    );
    assert_eq!(t.stop(), Stop::Cancelled);
    assert_eq!(t.stop(), Stop::Inactive);
    clock.advance(Duration::from_millis(10));
    assert_eq!(g.poll().unwrap(), 0);
    assert_eq!(n.load(Ordering::SeqCst), 1);
}

#[test]
fn smoke_threads() {
    let svc = TimerService::builder().shards(2).build().unwrap();
    let n = Arc::new(AtomicUsize::new(0));
    let mut timers = Vec::new();
    for i in 0..100 {
        let n2 = n.clone();
        timers.push(
            svc.start(Duration::from_millis(1 + i % 7), move |_| {
                n2.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap(),
        );
    }
    let start = std::time::Instant::now();
    while n.load(Ordering::SeqCst) < 100 && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(n.load(Ordering::SeqCst), 100);
    drop(timers);
    svc.shutdown();
}
