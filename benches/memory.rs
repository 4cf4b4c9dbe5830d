//! Bytes per armed timer, counted by a global allocator that tracks live heap
//! bytes, and live memory over a churn of start/stop pairs with one-hour
//! timeouts. Prints tables; run with `cargo bench --bench memory`.
//!
//! "Bytes per armed timer" is the live heap of a structure holding `n` timers
//! divided by `n`, with everything it allocated counted: for `Wheel<usize>`
//! the slab (growth slack included) and the level arrays.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use hierarchical_hash_wheel_timer::wheels::cancellable::QuadWheelWithOverflow;
use hierarchical_hash_wheel_timer::IdOnlyTimerEntry;
use tickwheel::Wheel;
use tokio_util::time::DelayQueue;

/// The system allocator, counting the bytes currently allocated.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s guarantees carry over; the counter has no effect
// on the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Relaxed);
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Relaxed);
        // SAFETY: the caller upholds `GlobalAlloc::dealloc`'s contract.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_sub(layout.size(), Relaxed);
        LIVE.fetch_add(new_size, Relaxed);
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> usize {
    LIVE.load(Relaxed)
}

/// Live bytes per timer of the structure `build(n)` returns.
fn per_timer<T>(n: usize, build: impl FnOnce(usize) -> T) -> f64 {
    let before = live();
    let built = build(n);
    let bytes = live() - before;
    drop(built);
    bytes as f64 / n as f64
}

/// Delay of timer `i`: spread over 1..=2^26 ms.
fn delay(i: usize) -> u64 {
    1 + (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) % (1 << 26)
}

fn main() {
    // `cargo bench` passes `--bench`; there is nothing to filter.
    let sizes = [1_000, 1 << 17, (1 << 17) + 1, 1_000_000, 10_000_000];
    println!("bytes per armed timer (live heap / n)");
    println!(
        "| n | Wheel<usize> grown | Wheel<usize> with_capacity(n) | BinaryHeap | BTreeMap | DelayQueue | hierarchical_hash_wheel_timer |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let _context = runtime.enter();
    for n in sizes {
        let grown = per_timer(n, |n| {
            let mut wheel = Wheel::new();
            for i in 0..n {
                wheel.insert(delay(i), i);
            }
            wheel
        });
        let exact = per_timer(n, |n| {
            let mut wheel = Wheel::with_capacity(n);
            for i in 0..n {
                wheel.insert(delay(i), i);
            }
            wheel
        });
        let heap = per_timer(n, |n| {
            let mut heap = BinaryHeap::new();
            for i in 0..n {
                heap.push(Reverse((delay(i), i as u32, 0u32)));
            }
            heap
        });
        let tree = per_timer(n, |n| {
            let mut tree = BTreeMap::new();
            for i in 0..n {
                tree.insert((delay(i), i as u64), i);
            }
            tree
        });
        let (queue, quad) = if n <= 1_000_000 {
            let queue = per_timer(n, |n| {
                let mut queue = DelayQueue::new();
                for i in 0..n {
                    queue.insert(i, Duration::from_millis(delay(i)));
                }
                queue
            });
            let quad = per_timer(n, |n| {
                let mut wheel = QuadWheelWithOverflow::new();
                for i in 0..n {
                    wheel
                        .insert(IdOnlyTimerEntry::new(
                            i as u64,
                            Duration::from_millis(delay(i)),
                        ))
                        .unwrap();
                }
                wheel
            });
            (format!("{queue:.1}"), format!("{quad:.1}"))
        } else {
            ("-".into(), "-".into())
        };
        println!("| {n} | {grown:.1} | {exact:.1} | {heap:.1} | {tree:.1} | {queue} | {quad} |");
    }

    // Churn: 100k armed one-hour timers, then 5 million start/stop pairs of
    // one-hour timers (time advancing 1 ms per 1000 pairs); live memory must
    // stay flat.
    println!();
    println!(
        "churn: Wheel<usize>, 100k armed one-hour timers, start/stop pairs of one-hour timers"
    );
    println!("| pairs done | live heap bytes | bytes per armed timer |");
    println!("|---:|---:|---:|");
    let before = live();
    let mut wheel = Wheel::new();
    let mut keys: Vec<_> = (0..100_000).map(|i| wheel.insert(3_600_000, i)).collect();
    for round in 0..=5u64 {
        if round > 0 {
            for pair in 0..1_000_000usize {
                let slot = pair % keys.len();
                wheel.cancel(keys[slot]);
                keys[slot] = wheel.insert(3_600_000, pair);
                if pair % 1000 == 0 {
                    let target = wheel.now() + 1;
                    while wheel.poll(target).is_some() {}
                }
            }
        }
        let bytes = live() - before - keys.capacity() * std::mem::size_of_val(&keys[0]);
        println!(
            "| {} | {bytes} | {:.1} |",
            round * 1_000_000,
            bytes as f64 / wheel.len() as f64
        );
    }
}
