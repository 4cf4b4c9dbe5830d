//! The futures of `tickwheel::future` (`Sleep`, `Timeout`, `Interval`) as an
//! executor drives them: never complete early, wake their task from the
//! shard owner, replace a changed waker without losing a wake, arm nothing
//! until polled, and stop their timer when dropped.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use tickwheel::future::MissedTickBehavior;
use tickwheel::{Clock, Driver, ManualClock, ShardGuard, TimerService};

/// Wakes by unparking the thread that made it, and counts its wakes.
struct Unpark {
    thread: std::thread::Thread,
    wakes: AtomicUsize,
}

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.thread.unpark();
    }
}

fn unpark_waker() -> (Waker, Arc<Unpark>) {
    let unpark = Arc::new(Unpark {
        thread: std::thread::current(),
        wakes: AtomicUsize::new(0),
    });
    (unpark.clone().into(), unpark)
}

/// Polls until ready, parking between polls: only a wake gets it going
/// again (a lost wake shows as a hang, which the 10 s bound turns into a
/// failure).
fn block_on<F: Future>(future: F) -> F::Output {
    let (waker, _) = unpark_waker();
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    let began = Instant::now();
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::park_timeout(Duration::from_secs(10));
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "no wake within 10 s"
        );
    }
}

fn threaded() -> TimerService {
    TimerService::builder()
        .shards(2)
        .tick(Duration::from_millis(1))
        .driver(Driver::Threads { pin: false })
        .build()
        .unwrap()
}

/// An embedded one-shard service on a manual clock, its owner guard and the
/// clock: the test moves time and polls.
fn manual() -> (TimerService, ShardGuard, ManualClock) {
    let clock = ManualClock::new();
    let service = TimerService::builder()
        .shards(1)
        .tick(Duration::from_millis(1))
        .driver(Driver::Embedded)
        .clock(Clock::Manual(clock.clone()))
        .build()
        .unwrap();
    let guard = service.claim_shard(0).unwrap();
    (service, guard, clock)
}

fn poll_once<F: Future + Unpin>(future: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(waker))
}

#[test]
fn sleeps_complete_never_before_their_deadline_on_any_thread() {
    let service = threaded();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let service = service.clone();
            std::thread::spawn(move || {
                for i in 0..40u64 {
                    let delay = Duration::from_micros(300 * ((i * 7 + t) % 13));
                    let asked = Instant::now() + delay;
                    let sleep = service.sleep(delay);
                    let deadline = sleep.deadline();
                    assert!(deadline >= asked, "deadline {:?} early", asked - deadline);
                    block_on(sleep);
                    let now = Instant::now();
                    assert!(now >= asked, "a sleep completed {:?} early", asked - now);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
}

/// Resets later (only recorded: the poll after the old deadline's fire arms
/// the rest) and earlier (moved at once), on driver threads, from several
/// threads: no sleep completes before the last deadline it was given.
#[test]
fn reset_sleeps_complete_never_before_their_new_deadline_on_any_thread() {
    let service = threaded();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let service = service.clone();
            std::thread::spawn(move || {
                for i in 0..30u64 {
                    let mut sleep = service.sleep(Duration::from_micros(500));
                    // Registered, so that the reset finds an armed timer.
                    let (waker, _) = unpark_waker();
                    let _ = poll_once(&mut sleep, &waker);
                    let delay = if (i + t) % 3 == 0 {
                        Duration::from_micros(100) // earlier: a move
                    } else {
                        Duration::from_micros(300 * ((i * 7 + t) % 11) + 600) // later
                    };
                    let asked = Instant::now() + delay;
                    sleep.reset_after(delay);
                    assert!(sleep.deadline() >= asked);
                    block_on(&mut sleep);
                    let now = Instant::now();
                    assert!(
                        now >= asked,
                        "a reset sleep completed {:?} early",
                        asked - now
                    );
                    assert!(sleep.is_elapsed());
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
}

#[test]
fn a_sleep_dropped_unpolled_arms_nothing_and_a_dropped_one_stops() {
    let (service, mut guard, _clock) = manual();
    let sleep = service.sleep(Duration::from_secs(5));
    drop(sleep);
    guard.poll().unwrap();
    assert_eq!(service.stats().armed, 0, "an unpolled sleep armed a timer");

    let (waker, _) = unpark_waker();
    let mut sleep = service.sleep(Duration::from_secs(5));
    assert_eq!(poll_once(&mut sleep, &waker), Poll::Pending);
    guard.poll().unwrap();
    assert_eq!(service.stats().armed, 1);
    drop(sleep);
    guard.poll().unwrap();
    assert_eq!(
        service.stats().armed,
        0,
        "a dropped sleep left its timer armed"
    );
}

/// A sleep dropped on its shard's owner frees its slot without a new
/// generation, as the owner's spare for its next START (its id never left
/// the sleep); every timer whose id was handed out still ends with a new
/// one. So, with sleeps dropped between them, the STARTs of public timers
/// (which the spare serves) never hand out an id twice: a public timer
/// freed like a sleep's would give its next START the same id, which a
/// stale copy would then stop.
#[test]
fn sleeps_dropped_on_the_owner_never_make_a_public_id_come_back() {
    let (service, mut guard, _clock) = manual();
    let (waker, _) = unpark_waker();
    let mut seen = std::collections::HashSet::new();
    // Fewer under miri (CI runs this file there), enough for many laps of
    // the spare and the rotation.
    let rounds = if cfg!(miri) { 300 } else { 5_000 };
    for round in 0..rounds {
        let mut sleep = service.sleep(Duration::from_secs(5));
        assert_eq!(poll_once(&mut sleep, &waker), Poll::Pending);
        drop(sleep);
        // Takes the spare the sleep left.
        let timer = service.start(Duration::from_secs(5), |_| {}).unwrap();
        let id = timer.id();
        assert!(seen.insert(id), "round {round}: id {id:?} handed out twice");
        if round % 2 == 0 {
            assert_eq!(timer.cancel(), tickwheel::Stop::Cancelled);
        } else {
            drop(timer);
        }
        // A stale id stops nothing.
        assert_eq!(service.stop_id(id), tickwheel::Stop::Inactive);
        if round % 64 == 0 {
            guard.poll().unwrap();
        }
    }
    guard.poll().unwrap();
    assert_eq!(service.stats().armed, 0);
}

#[test]
fn the_owner_fires_wakes_the_task_and_the_sleep_completes() {
    let (service, mut guard, clock) = manual();
    let (waker, unpark) = unpark_waker();
    let mut sleep = service.sleep(Duration::from_millis(10));
    assert_eq!(poll_once(&mut sleep, &waker), Poll::Pending);
    clock.advance(Duration::from_millis(5));
    guard.poll().unwrap();
    assert_eq!(
        unpark.wakes.load(Ordering::SeqCst),
        0,
        "woken before its deadline"
    );
    assert!(!sleep.is_elapsed());
    clock.advance(Duration::from_millis(7));
    guard.poll().unwrap();
    assert_eq!(unpark.wakes.load(Ordering::SeqCst), 1);
    assert!(sleep.is_elapsed());
    assert_eq!(poll_once(&mut sleep, &waker), Poll::Ready(()));
    // Ready again if polled again (a completed sleep stays complete).
    assert_eq!(poll_once(&mut sleep, &waker), Poll::Ready(()));
}

#[test]
fn a_changed_waker_is_the_one_woken() {
    let (service, mut guard, clock) = manual();
    let (first, first_count) = unpark_waker();
    let (second, second_count) = unpark_waker();
    let mut sleep = service.sleep(Duration::from_millis(10));
    assert_eq!(poll_once(&mut sleep, &first), Poll::Pending);
    assert_eq!(poll_once(&mut sleep, &second), Poll::Pending);
    clock.advance(Duration::from_millis(12));
    guard.poll().unwrap();
    assert_eq!(first_count.wakes.load(Ordering::SeqCst), 0);
    assert_eq!(second_count.wakes.load(Ordering::SeqCst), 1);
    assert_eq!(poll_once(&mut sleep, &second), Poll::Ready(()));
}

/// A dropped sleep's timer slot is freed and used again by the next sleep
/// (the owner's free slots): the next sleep must start from nothing (not
/// fired, no old waker).
#[test]
fn a_record_used_again_carries_nothing_over() {
    let (service, mut guard, clock) = manual();
    let (old, old_count) = unpark_waker();
    let (new, new_count) = unpark_waker();
    // One that fired and completed, then one stopped: both give back.
    let mut fired = service.sleep(Duration::from_millis(2));
    assert_eq!(poll_once(&mut fired, &old), Poll::Pending);
    clock.advance(Duration::from_millis(3));
    guard.poll().unwrap();
    assert_eq!(poll_once(&mut fired, &old), Poll::Ready(()));
    drop(fired);
    let mut stopped = service.sleep(Duration::from_millis(50));
    assert_eq!(poll_once(&mut stopped, &old), Poll::Pending);
    drop(stopped);
    let woken_before = old_count.wakes.load(Ordering::SeqCst);
    for _ in 0..3 {
        let mut sleep = service.sleep(Duration::from_millis(10));
        assert_eq!(poll_once(&mut sleep, &new), Poll::Pending);
        assert_eq!(
            poll_once(&mut sleep, &new),
            Poll::Pending,
            "complete before its deadline: a fire carried over"
        );
        assert!(!sleep.is_elapsed());
        clock.advance(Duration::from_millis(11));
        guard.poll().unwrap();
        assert_eq!(poll_once(&mut sleep, &new), Poll::Ready(()));
    }
    assert_eq!(new_count.wakes.load(Ordering::SeqCst), 3);
    assert_eq!(
        old_count.wakes.load(Ordering::SeqCst),
        woken_before,
        "an old sleep's waker woken by a new sleep's fire"
    );
}

/// The timer's callback holds a clone of the waker: a waker replaced while
/// the timer is armed, and the last one when the sleep is dropped, are
/// given back (no clone kept alive by a stopped timer), and a waker that
/// changes after a later reset's early fire is the one the rest wakes.
#[test]
fn replaced_wakers_are_released_and_the_newest_is_woken() {
    let (service, mut guard, clock) = manual();
    let (first, first_count) = unpark_waker();
    let (second, second_count) = unpark_waker();
    // Beyond the test's own `Arc` and its `Waker`.
    let clones = |count: &Arc<Unpark>| Arc::strong_count(count) - 2;
    let mut sleep = service.sleep(Duration::from_millis(10));
    assert_eq!(poll_once(&mut sleep, &first), Poll::Pending);
    assert_eq!(clones(&first_count), 1, "the armed timer holds a clone");
    assert_eq!(poll_once(&mut sleep, &second), Poll::Pending);
    assert_eq!(clones(&first_count), 0, "the replaced timer kept its waker");
    assert_eq!(clones(&second_count), 1);
    // Later: fires for the old deadline (waking `second`), then a poll with
    // `first` re-arms for the rest on a new timer that wakes `first`.
    sleep.reset_after(Duration::from_millis(30));
    clock.advance(Duration::from_millis(12));
    guard.poll().unwrap();
    assert_eq!(second_count.wakes.load(Ordering::SeqCst), 1);
    assert_eq!(poll_once(&mut sleep, &first), Poll::Pending);
    assert_eq!(clones(&second_count), 0);
    clock.advance(Duration::from_millis(20));
    guard.poll().unwrap();
    assert_eq!(first_count.wakes.load(Ordering::SeqCst), 1);
    assert_eq!(second_count.wakes.load(Ordering::SeqCst), 1);
    assert_eq!(poll_once(&mut sleep, &first), Poll::Ready(()));
    drop(sleep);
    assert_eq!(clones(&first_count), 0, "a dropped sleep kept its waker");
}

#[test]
fn reset_moves_the_deadline_later_and_earlier() {
    let (service, mut guard, clock) = manual();
    let (waker, unpark) = unpark_waker();
    let mut sleep = service.sleep(Duration::from_millis(10));
    assert_eq!(poll_once(&mut sleep, &waker), Poll::Pending);
    // Later: only recorded. The timer fires for the old deadline and wakes
    // the task, whose poll arms it again for the rest.
    sleep.reset_after(Duration::from_millis(30));
    clock.advance(Duration::from_millis(12));
    guard.poll().unwrap();
    assert_eq!(
        unpark.wakes.load(Ordering::SeqCst),
        1,
        "the timer stayed at the old deadline"
    );
    assert!(!sleep.is_elapsed(), "fired for the old deadline only");
    assert_eq!(poll_once(&mut sleep, &waker), Poll::Pending);
    clock.advance(Duration::from_millis(17));
    guard.poll().unwrap();
    assert_eq!(
        poll_once(&mut sleep, &waker),
        Poll::Pending,
        "29 ms: before the new deadline"
    );
    clock.advance(Duration::from_millis(3));
    guard.poll().unwrap();
    assert_eq!(unpark.wakes.load(Ordering::SeqCst), 2);
    assert!(sleep.is_elapsed());
    assert_eq!(poll_once(&mut sleep, &waker), Poll::Ready(()));

    // Earlier: the armed timer moves at once.
    let mut sleep = service.sleep(Duration::from_millis(50));
    assert_eq!(poll_once(&mut sleep, &waker), Poll::Pending);
    sleep.reset_after(Duration::from_millis(5));
    clock.advance(Duration::from_millis(6));
    guard.poll().unwrap();
    assert_eq!(unpark.wakes.load(Ordering::SeqCst), 3, "fired at 5 ms");
    assert_eq!(poll_once(&mut sleep, &waker), Poll::Ready(()));

    // Reset after it completed: pending again until the new deadline.
    sleep.reset_after(Duration::from_millis(10));
    assert_eq!(poll_once(&mut sleep, &waker), Poll::Pending);
    assert!(!sleep.is_elapsed());
    clock.advance(Duration::from_millis(12));
    guard.poll().unwrap();
    assert_eq!(poll_once(&mut sleep, &waker), Poll::Ready(()));
}

#[test]
fn a_reset_of_a_sleep_that_fired_unseen_waits_for_the_new_deadline() {
    let (service, mut guard, clock) = manual();
    let (waker, _) = unpark_waker();
    let mut sleep = service.sleep(Duration::from_millis(10));
    assert_eq!(poll_once(&mut sleep, &waker), Poll::Pending);
    clock.advance(Duration::from_millis(12));
    guard.poll().unwrap();
    // Fired, but the task has not looked yet: the reset re-arms, and the
    // earlier fire must not count for the new deadline.
    sleep.reset_after(Duration::from_millis(10));
    assert_eq!(poll_once(&mut sleep, &waker), Poll::Pending);
    clock.advance(Duration::from_millis(12));
    guard.poll().unwrap();
    assert_eq!(poll_once(&mut sleep, &waker), Poll::Ready(()));
}

#[test]
fn timeout_elapses_for_a_pending_future_and_not_for_a_ready_one() {
    let service = threaded();
    let began = Instant::now();
    let result = block_on(service.timeout(Duration::from_millis(5), std::future::pending::<()>()));
    assert!(result.is_err());
    assert!(began.elapsed() >= Duration::from_millis(5));
    assert_eq!(result.unwrap_err().to_string(), "deadline has elapsed");
    let ready = block_on(service.timeout(Duration::from_millis(5), async { 7 }));
    assert_eq!(ready, Ok(7));
}

#[test]
fn a_timeout_around_a_ready_future_arms_nothing() {
    let (service, mut guard, _clock) = manual();
    let (waker, _) = unpark_waker();
    let mut timeout = service.timeout(Duration::from_secs(1), std::future::ready(3));
    assert_eq!(poll_once(&mut timeout, &waker), Poll::Ready(Ok(3)));
    guard.poll().unwrap();
    assert_eq!(service.stats().armed, 0);
}

/// Polls `interval`'s next tick once.
fn tick(interval: &mut tickwheel::future::Interval, waker: &Waker) -> Poll<Instant> {
    interval.poll_tick(&mut Context::from_waker(waker))
}

#[test]
fn an_interval_ticks_at_once_then_on_its_grid() {
    let (service, mut guard, clock) = manual();
    let (waker, _) = unpark_waker();
    let mut interval = service.interval(Duration::from_millis(10));
    let Poll::Ready(first) = tick(&mut interval, &waker) else {
        panic!("the first tick is immediate");
    };
    assert_eq!(tick(&mut interval, &waker), Poll::Pending);
    for n in 1..=5u32 {
        clock.advance(Duration::from_millis(10));
        guard.poll().unwrap();
        // The manual clock started a little before `first` (real time
        // passed while the test set up): at most one tick behind.
        let mut got = tick(&mut interval, &waker);
        if got.is_pending() {
            clock.advance(Duration::from_millis(1));
            guard.poll().unwrap();
            got = tick(&mut interval, &waker);
        }
        assert_eq!(got, Poll::Ready(first + Duration::from_millis(10) * n));
        assert_eq!(tick(&mut interval, &waker), Poll::Pending);
    }
}

/// An interval that missed three ticks, under each behaviour: how many
/// ticks the next calls hand out at once, and the grid they continue on.
/// Returns how many ticks came at once, the last of them and the next one,
/// each as an offset from the first tick.
fn missed(behavior: MissedTickBehavior) -> (usize, Duration, Duration) {
    let (service, mut guard, clock) = manual();
    let (waker, _) = unpark_waker();
    let mut interval = service.interval(Duration::from_millis(10));
    interval.set_missed_tick_behavior(behavior);
    let Poll::Ready(first) = tick(&mut interval, &waker) else {
        panic!("the first tick is immediate");
    };
    assert_eq!(tick(&mut interval, &waker), Poll::Pending);
    // Ticks 1 to 4 (10, 20, 30, 40 ms) pass unseen.
    clock.advance(Duration::from_millis(45));
    guard.poll().unwrap();
    let mut ready = Vec::new();
    while let Poll::Ready(at) = tick(&mut interval, &waker) {
        ready.push(at);
    }
    let last = *ready.last().unwrap();
    // To 57 ms: the old grid's 50 ms, or the delayed grid's 55 ms.
    clock.advance(Duration::from_millis(12));
    guard.poll().unwrap();
    let Poll::Ready(next) = tick(&mut interval, &waker) else {
        panic!("no tick after the missed ones");
    };
    (ready.len(), last - first, next - first)
}

#[test]
fn missed_ticks_burst_skip_or_delay() {
    let ms = Duration::from_millis;
    assert_eq!(
        missed(MissedTickBehavior::Burst),
        (4, ms(40), ms(50)),
        "burst hands out every missed tick (10 to 40 ms), then goes on on the grid"
    );
    assert_eq!(
        missed(MissedTickBehavior::Skip),
        (1, ms(40), ms(50)),
        "skip hands out the latest missed tick once, then goes on on the grid"
    );
    assert_eq!(
        missed(MissedTickBehavior::Delay),
        (1, ms(10), ms(55)),
        "delay hands out the first missed tick, then a period after that call (45 ms)"
    );
}

#[test]
#[should_panic(expected = "shut down")]
fn a_sleep_polled_after_shutdown_panics_with_the_reason() {
    let service = threaded();
    let mut sleep = service.sleep(Duration::from_millis(1));
    service.shutdown();
    let (waker, _) = unpark_waker();
    let _ = poll_once(&mut sleep, &waker);
}

#[test]
fn a_sleep_outliving_its_service_does_not_keep_it_running() {
    let (waker, _) = unpark_waker();
    let service = threaded();
    let mut registered = service.sleep(Duration::from_secs(60));
    assert_eq!(poll_once(&mut registered, &waker), Poll::Pending);
    let unpolled = service.sleep(Duration::from_secs(60));
    drop(service);
    // The service shut down with its last handle: the registered sleep's
    // timer was dropped unrun, and arming the other one now is refused.
    assert_eq!(poll_once(&mut registered, &waker), Poll::Pending);
    let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let mut unpolled = unpolled;
        let _ = poll_once(&mut unpolled, &waker);
    }));
    assert!(refused.is_err(), "a sleep armed on a shut-down service");
    drop(registered);
}
