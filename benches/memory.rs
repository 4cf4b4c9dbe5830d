//! Bytes per armed timer, counted by a global allocator that tracks live heap
//! bytes, and live memory over a churn of start/stop pairs with one-hour
//! timeouts. Prints tables; run with `cargo bench --bench memory`.
//!
//! "Bytes per armed timer" is the live heap of a structure holding `n` timers
//! divided by `n`, with everything it allocated counted: for `Wheel<usize>`
//! the slab (growth slack included) and the level arrays.
//!
//! The last two sections measure the [`TimerService`]: everything the
//! service allocates (shard, wheel, slot arena) for `n`
//! armed one-shot timers whose callback captures 16 bytes (two `u64`, kept
//! in the slot: see `src/service/callback.rs`), and live memory over a
//! churn of start/stop pairs of one-hour timers with the same callback,
//! from the shard's owner and from another thread. The `Timer` handles the application keeps (16 bytes each)
//! are its own memory and are not counted.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use hierarchical_hash_wheel_timer::wheels::cancellable::QuadWheelWithOverflow;
use hierarchical_hash_wheel_timer::IdOnlyTimerEntry;
use tickwheel::{Driver, Timer, TimerService, Wheel};
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
    // `cargo bench` passes `--bench`; there is nothing to filter. Without it
    // (`cargo test --all-targets`, an unoptimised build) every size is cut
    // down, so the program only checks that it still runs.
    let full = std::env::args().any(|arg| arg == "--bench");
    structures(full);
    service(full);
}

fn structures(full: bool) {
    let sizes: &[usize] = if full {
        &[1_000, 1 << 17, (1 << 17) + 1, 1_000_000, 10_000_000]
    } else {
        &[1_000, 1 << 17, (1 << 17) + 1]
    };
    let pairs_per_round = if full { 1_000_000 } else { 20_000 };
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
    for &n in sizes {
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

    // The worst case of a grown wheel is right after its slab grows: sample
    // every growth on the way to 10M timers.
    println!();
    println!("Wheel<usize> grown: bytes per armed timer right after each slab growth");
    println!("| n (timers after the growth) | slab capacity | bytes per armed timer |");
    println!("|---:|---:|---:|");
    let before = live();
    let mut wheel = Wheel::new();
    let mut capacity = wheel.capacity();
    let mut worst = (0.0f64, 0usize);
    for i in 0..*sizes.last().unwrap() {
        wheel.insert(delay(i), i);
        if wheel.capacity() != capacity {
            capacity = wheel.capacity();
            let n = i + 1;
            let bytes = (live() - before) as f64 / n as f64;
            if n >= 100_000 {
                println!("| {n} | {capacity} | {bytes:.1} |");
                if bytes > worst.0 {
                    worst = (bytes, n);
                }
            }
        }
    }
    drop(wheel);
    println!(
        "worst from 100k to {} timers: {:.1} bytes per timer at n = {}",
        sizes.last().unwrap(),
        worst.0,
        worst.1
    );

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
            for pair in 0..pairs_per_round {
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
            round as usize * pairs_per_round,
            bytes as f64 / wheel.len() as f64
        );
    }
}

/// A one-shard embedded service whose shard the calling thread owns.
fn owned_service() -> (TimerService, tickwheel::ShardGuard) {
    let service = TimerService::builder()
        .shards(1)
        .driver(Driver::Embedded)
        .build()
        .unwrap();
    let guard = service.claim_shard(0).unwrap();
    (service, guard)
}

fn one_hour() -> Duration {
    Duration::from_secs(3600)
}

/// A timer's callback that captures 16 bytes, as one that refers to its
/// connection (a pointer or an `Arc`, and an index) does.
fn callback(i: u64) -> impl FnMut(&mut tickwheel::Expiry<'_>) + Send + 'static {
    let captured = (i, i ^ 0x5555);
    move |_| {
        std::hint::black_box(captured);
    }
}

fn service(full: bool) {
    let pairs_per_round = if full { 1_000_000 } else { 20_000 };
    let sizes: &[usize] = if full {
        &[1_000, 100_000, 1_000_000]
    } else {
        &[1_000, 100_000]
    };
    println!();
    println!("TimerService, one embedded shard owned by the starting thread; one-shot timers,");
    println!("callback capturing 16 bytes, delays 1 to 19 hours (handles not counted)");
    println!("| n | live heap bytes | bytes per armed timer | slots allocated | slot_bytes |");
    println!("|---:|---:|---:|---:|---:|");
    for &n in sizes {
        let mut handles: Vec<Timer> = Vec::with_capacity(n);
        let before = live();
        let (service, mut guard) = owned_service();
        for i in 0..n {
            // One hour plus up to 18 hours, so none fires while counting.
            let delay = Duration::from_millis(3_600_000 + delay(i));
            handles.push(service.start(delay, callback(i as u64)).unwrap());
        }
        guard.poll().unwrap();
        let bytes = live() - before;
        let stats = service.stats();
        assert_eq!(stats.armed, n as u64);
        println!(
            "| {n} | {bytes} | {:.1} | {} | {} |",
            bytes as f64 / n as f64,
            stats.slots,
            stats.slot_bytes
        );
        drop(handles);
        drop(guard);
    }

    // The worst case is right after the arena adds a segment: sample every
    // growth of the live heap on the way to the largest size.
    let largest = *sizes.last().unwrap();
    println!();
    println!("TimerService: bytes per armed timer right after each growth of the heap");
    println!("| n (timers after the growth) | live heap bytes | bytes per armed timer |");
    println!("|---:|---:|---:|");
    let mut handles: Vec<Timer> = Vec::with_capacity(largest);
    let before = live();
    let (service, mut guard) = owned_service();
    let mut heap = 0;
    let mut worst = (0.0f64, 0usize);
    for i in 0..largest {
        let delay = Duration::from_millis(3_600_000 + delay(i));
        handles.push(service.start(delay, callback(i as u64)).unwrap());
        let now = live() - before;
        if now > heap {
            heap = now;
            let n = i + 1;
            let bytes = now as f64 / n as f64;
            if n >= 100_000 {
                println!("| {n} | {now} | {bytes:.1} |");
                if bytes > worst.0 {
                    worst = (bytes, n);
                }
            }
        }
    }
    guard.poll().unwrap();
    assert_eq!(service.stats().armed, largest as u64);
    println!(
        "worst from 100k to {largest} timers: {:.1} bytes per timer at n = {}",
        worst.0, worst.1
    );
    drop(handles);
    drop(guard);
    drop(service);

    // Churn from the owner: 100k armed one-hour timers, then 5 million
    // start/stop pairs (stop, then drop the handle), polling every 1000.
    println!();
    println!(
        "churn: TimerService, owner thread, 100k armed one-hour timers, then start/stop pairs"
    );
    println!("| pairs done | live heap bytes | bytes per armed timer | slots allocated |");
    println!("|---:|---:|---:|---:|");
    let mut handles: Vec<Timer> = Vec::with_capacity(100_000);
    let before = live();
    let (service, mut guard) = owned_service();
    handles.extend((0..100_000).map(|_| service.start(one_hour(), callback(0)).unwrap()));
    for round in 0..=5u64 {
        if round > 0 {
            for pair in 0..pairs_per_round {
                let slot = pair % handles.len();
                let new = service.start(one_hour(), callback(0)).unwrap();
                let old = std::mem::replace(&mut handles[slot], new);
                old.stop();
                drop(old);
                if pair % 1000 == 0 {
                    guard.poll().unwrap();
                }
            }
        }
        guard.poll().unwrap();
        let bytes = live() - before;
        println!(
            "| {} | {bytes} | {:.1} | {} |",
            round as usize * pairs_per_round,
            bytes as f64 / handles.len() as f64,
            service.stats().slots
        );
    }
    drop(handles);
    drop(guard);
    drop(service);

    // Churn from another thread: the owner polls in a loop while a thread
    // that owns no shard makes the start/stop pairs (every one goes through
    // the shard's remote queue, which queues the timers' own slots and
    // allocates nothing of its own). The owner records the peak live heap
    // it sees during each million pairs, and the live heap once the churn
    // thread pauses and the queue is taken in.
    println!();
    println!(
        "churn: TimerService, pairs from a thread that owns no shard, owner polling in a loop"
    );
    println!("| pairs done | peak live heap during the last round | live heap, queue taken in | slots allocated |");
    println!("|---:|---:|---:|---:|");
    const NOT_READY: usize = usize::MAX;
    let handle_bytes = 100_000 * std::mem::size_of::<Timer>();
    let before = live();
    let (service, mut guard) = owned_service();
    let progress = std::sync::Arc::new(AtomicUsize::new(NOT_READY));
    let ack = std::sync::Arc::new(AtomicUsize::new(0));
    let churn = {
        let service = service.clone();
        let (progress, ack) = (progress.clone(), ack.clone());
        std::thread::spawn(move || {
            let mut handles: Vec<Timer> = Vec::with_capacity(100_000);
            handles.extend((0..100_000).map(|_| service.start(one_hour(), callback(0)).unwrap()));
            for million in 0..=5usize {
                if million > 0 {
                    for pair in 0..pairs_per_round {
                        let slot = pair % handles.len();
                        let new = service.start(one_hour(), callback(0)).unwrap();
                        let old = std::mem::replace(&mut handles[slot], new);
                        old.stop();
                        drop(old);
                    }
                }
                progress.store(million, Relaxed);
                while ack.load(Relaxed) <= million {
                    std::thread::yield_now();
                }
            }
            handles
        })
    };
    let mut peak = 0;
    for million in 0..=5usize {
        loop {
            guard.poll().unwrap();
            peak = peak.max(live());
            if progress.load(Relaxed) == million {
                break;
            }
        }
        guard.poll().unwrap();
        let drained = live() - before - handle_bytes;
        println!(
            "| {} | {} | {drained} | {} |",
            million * pairs_per_round,
            peak.saturating_sub(before + handle_bytes),
            service.stats().slots
        );
        peak = 0;
        ack.store(million + 1, Relaxed);
    }
    let handles = churn.join().unwrap();
    drop(handles);
    drop(guard);
}
