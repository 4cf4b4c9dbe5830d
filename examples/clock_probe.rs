//! The rate at which this processor runs one chain of dependent adds, in
//! billions per second: on x86-64 and AArch64 one add takes one cycle, so
//! this is the clock the core ran at during the probe. `scripts/bench-report`
//! runs it before each step and prints it beside the step: on a shared
//! virtual machine the host changes the clock under the guest (the same
//! binaries have run at 3.3 and at 1.9 GHz an hour apart), and it moves
//! ratios as well as times, since a cache miss or a branch misprediction
//! costs a different number of cycles at each clock.
//!
//! ```sh
//! cargo run --release --example clock_probe
//! ```
//!
//! Prints one line, `clock_probe: 3.21 GHz`, or `clock_probe: n/a` where
//! there is no probe for the architecture.

use std::time::Instant;

/// Adds executed: about 0.1 s at 2 GHz.
const ADDS: u64 = 200_000_000;

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn adds_per_second() -> Option<f64> {
    let mut value = 0u64;
    let began = Instant::now();
    for _ in 0..ADDS {
        // One add on a value the next add depends on: the compiler cannot
        // merge or remove them, and the processor cannot overlap them.
        // SAFETY: adds one to a register; touches nothing else.
        unsafe {
            #[cfg(target_arch = "x86_64")]
            std::arch::asm!("add {0}, 1", inout(reg) value, options(nomem, nostack));
            #[cfg(target_arch = "aarch64")]
            std::arch::asm!("add {0}, {0}, 1", inout(reg) value, options(nomem, nostack));
        }
    }
    let seconds = began.elapsed().as_secs_f64();
    assert_eq!(value, ADDS, "every add ran");
    Some(ADDS as f64 / seconds)
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn adds_per_second() -> Option<f64> {
    None
}

fn main() {
    // The better of three: a run the scheduler interrupted reads low.
    let best = (0..3).filter_map(|_| adds_per_second()).reduce(f64::max);
    match best {
        Some(rate) => println!("clock_probe: {:.2} GHz", rate / 1e9),
        None => println!("clock_probe: n/a"),
    }
}
