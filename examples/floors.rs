//! What this machine's hardware charges for the steps the service's
//! cross-thread and restart paths cannot avoid, measured beside them so
//! that a target can be compared with the floor under it:
//!
//! * `clock`: one `CLOCK_MONOTONIC` read (`Instant::now`) and one `rdtsc`
//!   (the deadline clock's read, `src/service/tsc.rs`).
//! * `miss`: one dependent load from a random one of `n` 64-byte lines (a
//!   random restart of one of `n` idle timeouts must touch that timer's
//!   state at least once): a pointer chase over a random cycle.
//! * `handoff`: one cache line written by one thread and then by another,
//!   back and forth (a STOP from another thread moves the timer's line to
//!   the stopping core, and the owner's next touch moves it back).
//!
//! ```sh
//! cargo run --release --example floors
//! ```

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// One cache line: the index of the next line of the cycle, then padding.
#[repr(C, align(64))]
struct Line {
    next: usize,
    _pad: [u8; 56],
}

fn clock(reads: u64) -> (f64, f64) {
    let began = Instant::now();
    for _ in 0..reads {
        black_box(Instant::now());
    }
    let monotonic = began.elapsed().as_nanos() as f64 / reads as f64;
    let began = Instant::now();
    for _ in 0..reads {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `rdtsc` is available on every x86-64 CPU.
        black_box(unsafe { core::arch::x86_64::_rdtsc() });
    }
    (monotonic, began.elapsed().as_nanos() as f64 / reads as f64)
}

/// ns per dependent load over a random cycle through `n` lines.
fn miss(n: usize, loads: u64) -> f64 {
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    for i in (1..n).rev() {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        order.swap(i, (rng % (i as u64 + 1)) as usize);
    }
    let mut lines: Vec<Line> = (0..n)
        .map(|_| Line {
            next: 0,
            _pad: [0; 56],
        })
        .collect();
    for w in 0..n {
        lines[order[w]].next = order[(w + 1) % n];
    }
    let mut at = order[0];
    let began = Instant::now();
    for _ in 0..loads {
        at = lines[at].next;
    }
    black_box(at);
    began.elapsed().as_nanos() as f64 / loads as f64
}

/// ns per hand-off of one line between two threads (each writes it when
/// it sees the other's write).
fn handoff(rounds: u64) -> f64 {
    let line = Arc::new(AtomicU64::new(0));
    let other = {
        let line = line.clone();
        std::thread::spawn(move || {
            for i in 0..rounds {
                while line.load(Ordering::Acquire) != 2 * i + 1 {
                    std::hint::spin_loop();
                }
                line.store(2 * i + 2, Ordering::Release);
            }
        })
    };
    let began = Instant::now();
    for i in 0..rounds {
        line.store(2 * i + 1, Ordering::Release);
        while line.load(Ordering::Acquire) != 2 * i + 2 {
            std::hint::spin_loop();
        }
    }
    let elapsed = began.elapsed();
    other.join().unwrap();
    // Two hand-offs per round.
    elapsed.as_nanos() as f64 / (2 * rounds) as f64
}

fn main() {
    for round in 0..3 {
        let (monotonic, tsc) = clock(5_000_000);
        println!("round {round}: clock: Instant::now {monotonic:.1} ns, rdtsc {tsc:.1} ns");
        for n in [1_000usize, 100_000, 1_000_000] {
            println!(
                "round {round}: miss: one dependent load among {n} lines ({} MB): {:.1} ns",
                n * 64 / 1_000_000,
                miss(n, 5_000_000)
            );
        }
        println!(
            "round {round}: handoff: one line between two threads: {:.1} ns",
            handoff(2_000_000)
        );
    }
}
