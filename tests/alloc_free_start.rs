//! A START whose closure captures a little (up to the 16 bytes a slot keeps
//! inline: see `src/service/callback.rs`) allocates nothing once the
//! service is warm, and a larger capture allocates once per START, which
//! shows the count can fail.
//!
//! Allocations are counted per thread (the test harness runs tests side by
//! side): each test counts only what its own thread allocates.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use tickwheel::{ManualClock, ShardGuard, Timer, TimerService};

#[path = "common/manual_service.rs"]
mod common;

struct Counting;

thread_local! {
    // Const-initialised and without a destructor: reading it never
    // allocates, so the allocator may use it.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Allocations this thread made while `f` ran, and `f`'s result.
fn allocations<R>(f: impl FnOnce() -> R) -> (u64, R) {
    let before = ALLOCATIONS.with(Cell::get);
    let result = f();
    (ALLOCATIONS.with(Cell::get) - before, result)
}

const N: usize = 200;
const DELAY: Duration = Duration::from_secs(60);

/// An embedded service of one shard on a manual clock, its shard claimed
/// by this thread.
fn service() -> (TimerService, ShardGuard, ManualClock) {
    let (service, clock) = common::manual(1);
    let guard = service.claim_shard(0).unwrap();
    (service, guard, clock)
}

/// Arms `4 * N` timers (so the arena has the slots) and cancels them, with
/// `start` on this thread, polling `guard` (the owner) as it goes, so that
/// every list and cache the START path uses has grown to its size.
fn warm_up(start: &dyn Fn() -> Timer, guard: &mut ShardGuard, handles: &mut Vec<Timer>) {
    for _ in 0..3 {
        handles.extend((0..4 * N).map(|_| start()));
        guard.poll().unwrap();
        for timer in handles.drain(..) {
            timer.cancel();
        }
        guard.poll().unwrap();
    }
}

/// Counts the allocations of `N` STARTs (handles kept in a vector with
/// room for them), then of `N` START + cancel pairs, on this thread.
fn count(
    start: &dyn Fn() -> Timer,
    guard: &mut ShardGuard,
    handles: &mut Vec<Timer>,
) -> (u64, u64) {
    let (starts, ()) = allocations(|| handles.extend((0..N).map(|_| start())));
    guard.poll().unwrap();
    for timer in handles.drain(..) {
        timer.cancel();
    }
    guard.poll().unwrap();
    let (pairs, ()) = allocations(|| {
        for _ in 0..N {
            black_box(start().cancel());
        }
    });
    guard.poll().unwrap();
    (starts, pairs)
}

#[test]
fn an_owner_start_capturing_16_bytes_allocates_nothing() {
    let (service, mut guard, _clock) = service();
    let mut handles = Vec::with_capacity(4 * N);
    let (a, b) = (black_box(1u64), black_box(2u64));
    let start = || {
        service
            .start(DELAY, move |_| {
                black_box((a, b));
            })
            .unwrap()
    };
    warm_up(&start, &mut guard, &mut handles);
    assert_eq!(count(&start, &mut guard, &mut handles), (0, 0));

    // An `Arc` and an index: the usual shape of a callback's captures.
    let shared = Arc::new(AtomicU64Cell::default());
    let start = || {
        let shared = shared.clone();
        service
            .start(DELAY, move |_| {
                black_box((&shared, a));
            })
            .unwrap()
    };
    warm_up(&start, &mut guard, &mut handles);
    assert_eq!(count(&start, &mut guard, &mut handles), (0, 0));

    // A periodic timer keeps its period inline beside an 8-byte capture.
    let start = || {
        service
            .start_periodic(DELAY, move |_| {
                black_box(a);
            })
            .unwrap()
    };
    warm_up(&start, &mut guard, &mut handles);
    assert_eq!(count(&start, &mut guard, &mut handles), (0, 0));
}

#[derive(Default)]
struct AtomicU64Cell(#[allow(dead_code)] std::sync::atomic::AtomicU64);

/// The count can fail: a 32-byte capture does not fit in the slot, and
/// each START boxes it.
#[test]
fn an_owner_start_capturing_32_bytes_allocates_once() {
    let (service, mut guard, _clock) = service();
    let mut handles = Vec::with_capacity(4 * N);
    let captured = black_box([1u64, 2, 3, 4]);
    let start = || {
        service
            .start(DELAY, move |_| {
                black_box(captured);
            })
            .unwrap()
    };
    warm_up(&start, &mut guard, &mut handles);
    assert_eq!(
        count(&start, &mut guard, &mut handles),
        (N as u64, N as u64)
    );
}

/// A START from a thread that owns no shard goes through the shard's
/// remote queue, which queues the new timer's own slot from the arena and
/// allocates nothing of its own, so after warm-up it allocates nothing
/// either, and a 16-byte capture adds nothing to that.
#[test]
fn a_non_owner_start_capturing_16_bytes_allocates_nothing() {
    let (service, mut guard, _clock) = service();
    let (a, b) = (black_box(1u64), black_box(2u64));
    std::thread::scope(|scope| {
        let (to_owner, from_producer) = std::sync::mpsc::sync_channel::<Vec<Timer>>(0);
        let (to_producer, from_owner) = std::sync::mpsc::sync_channel::<Vec<Timer>>(0);
        let producer = scope.spawn(move || {
            let start = || {
                service
                    .start(DELAY, move |_| {
                        black_box((a, b));
                    })
                    .unwrap()
            };
            let mut handles = Vec::with_capacity(4 * N);
            let mut figures = Vec::new();
            for round in 0..4 {
                let size = if round < 3 { 4 * N } else { N };
                let (allocated, ()) = allocations(|| handles.extend((0..size).map(|_| start())));
                figures.push(allocated);
                // The owner takes the STARTs in and cancels the timers, and
                // the nodes go back to the spare stack.
                to_owner.send(std::mem::take(&mut handles)).unwrap();
                handles = from_owner.recv().unwrap();
            }
            drop(to_owner);
            figures
        });
        while let Ok(mut timers) = from_producer.recv() {
            guard.poll().unwrap();
            for timer in timers.drain(..) {
                timer.cancel();
            }
            guard.poll().unwrap();
            to_producer.send(timers).unwrap();
        }
        let figures = producer.join().unwrap();
        assert_eq!(
            *figures.last().unwrap(),
            0,
            "non-owner STARTs after warm-up allocated (per round: {figures:?})"
        );
    });
}
