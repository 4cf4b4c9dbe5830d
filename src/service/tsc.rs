//! A never-early estimate of `CLOCK_MONOTONIC` from the CPU's time-stamp
//! counter, for the deadlines of STARTs and RESTARTs.
//!
//! # Why
//!
//! Every START and RESTART reads the clock for its deadline. Through the
//! vDSO, `clock_gettime` costs about 30 ns on the machines we measure (it
//! reads the TSC itself, under a sequence lock, and scales it); `rdtsc` alone
//! costs about 12 (`examples/owner_ops.rs`, and the `clock` rows of
//! `benches/service_vs_tokio.rs`). Firing keeps reading the real clock: only
//! deadlines use the estimate, and an estimate that runs a little ahead only
//! makes a deadline a little later.
//!
//! # Never early, by construction
//!
//! The estimate for counter value `t` is
//! `anchor_nanos + (t - anchor_tsc) * rate + SLACK_NANOS`, where:
//!
//! * the **anchor** `(anchor_tsc, anchor_nanos)` is a counter reading
//!   followed by a clock reading (both fenced), so `anchor_nanos` is at or
//!   after the clock at `anchor_tsc`, and at most `ANCHOR_BRACKET_NANOS`
//!   after it: a clock reading taken before the counter's is at most that
//!   far from the one after (a reading whose pair is wider, the thread having
//!   been descheduled between them, is not anchored on). Each thread keeps
//!   its own, refreshed
//!   when it is older than `MAX_AGE_NANOS` (about a millisecond) of counter
//!   time; a counter reading below the anchor (a thread moved to a core whose
//!   counter lags) also refreshes it.
//! * the **rate** (nanoseconds per counter tick, 32.32 fixed point) is an
//!   upper bound: measured between two clock readings bracketing each
//!   counter reading, at least `CALIBRATION_NANOS` apart, the larger bracket
//!   at the end and the smaller at the start, then padded by 1/1024 (about
//!   1000 ppm: NTP slews the clock by at most 500 ppm).
//! * `SLACK_NANOS` covers what the counter may differ between the cores of
//!   one machine (the kernel keeps the TSC as its clock source only while
//!   they agree to far less).
//!
//! So the estimate is never below the clock at the moment the counter was
//! read, and runs ahead of it by at most the slack, the anchor's bracket and
//! 1/1024 of the anchor's age: about 3 µs. A deadline tick moves one tick later only when
//! the exact deadline falls within that of a tick's boundary.
//!
//! # When it is used
//!
//! Linux on x86-64, when the kernel's clock source is `tsc` (it only is when
//! the counter is invariant and agrees across cores, and the kernel switches
//! away if it ever stops agreeing), not under miri, and not when the
//! environment sets `TICKWHEEL_TSC=0`. Each refresh also checks the old
//! anchor's estimate against a clock reading taken before the new counter
//! reading: an estimate found behind the clock (a counter that stopped
//! agreeing with the clock, say after a virtual machine moved hosts) turns
//! the estimate off for the rest of the process. Elsewhere, and until the
//! rate is calibrated (the first few milliseconds), the real clock is read.
//!
//! Test: `tests::the_estimate_is_never_behind_the_clock_on_any_thread`
//! (several threads, each estimate checked against a clock reading before
//! it and one after it) and
//! `tests::a_thread_descheduled_while_anchoring_does_not_run_ahead`.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// Added to every estimate: counter differences between cores.
const SLACK_NANOS: u64 = 1_000;
/// An anchor older than this (in nanoseconds of counter time) is refreshed.
const MAX_AGE_NANOS: u64 = 1_000_000;
/// The rate is measured over at least this long.
const CALIBRATION_NANOS: u64 = 20_000_000;
/// A pair of clock readings around a counter reading further apart than
/// this (the thread was interrupted) is not used to calibrate.
const BRACKET_NANOS: u64 = 2_000;
/// An anchor's clock reading is at most this much after its counter
/// reading (two vDSO clock reads take well under 100 ns).
const ANCHOR_BRACKET_NANOS: u64 = 1_000;
/// Brackets tried per refresh for one narrow enough to anchor on.
const ANCHOR_TRIES: u32 = 3;

/// Not yet looked at.
const UNKNOWN: u8 = 0;
/// The counter may be used; no calibration reading yet.
const USABLE: u8 = 1;
/// The first calibration reading is recorded.
const CALIBRATING: u8 = 2;
/// The rate is known.
const READY: u8 = 3;
/// The real clock, for good.
const OFF: u8 = 4;
/// One thread is recording the first calibration reading, or the rate.
const RECORDING: u8 = 5;

static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);
/// The first bracketed reading: counter value, and the clock just before it.
static START_TSC: AtomicU64 = AtomicU64::new(0);
static START_NANOS: AtomicU64 = AtomicU64::new(0);
/// Nanoseconds per counter tick, 32.32 fixed point, an upper bound.
static RATE: AtomicU64 = AtomicU64::new(0);
/// `MAX_AGE_NANOS` in counter ticks (0 until `READY`: every read refreshes).
/// Stored after `RATE` (release), loaded before it (acquire): a thread that
/// sees an age limit sees the rate it belongs to.
static MAX_AGE_TICKS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread's anchor: a counter value and the clock read after it.
    static ANCHOR: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// `CLOCK_MONOTONIC` in nanoseconds, never below the clock at the moment of
/// the call (see the module docs); the real clock where the estimate is not
/// available.
#[inline]
pub(crate) fn deadline_nanos(real: fn() -> u64) -> u64 {
    #[cfg(all(target_os = "linux", target_arch = "x86_64", not(miri)))]
    {
        let max_age = MAX_AGE_TICKS.load(Ordering::Acquire);
        if max_age != 0 {
            let tsc = rdtsc();
            let (anchor_tsc, anchor_nanos) = ANCHOR.with(Cell::get);
            let age = tsc.wrapping_sub(anchor_tsc);
            if age < max_age {
                return estimate(anchor_nanos, age, RATE.load(Ordering::Relaxed));
            }
        }
        refresh(real)
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64", not(miri))))]
    real()
}

/// The slow path: a real reading (returned), which also re-anchors this
/// thread, checks the old anchor, and calibrates the rate.
#[cfg(all(target_os = "linux", target_arch = "x86_64", not(miri)))]
#[cold]
fn refresh(real: fn() -> u64) -> u64 {
    let state = STATE.load(Ordering::Acquire);
    if state == OFF {
        return real();
    }
    if state == UNKNOWN {
        let decided = if usable() { USABLE } else { OFF };
        let _ = STATE.compare_exchange(UNKNOWN, decided, Ordering::AcqRel, Ordering::Acquire);
        return refresh(real);
    }
    let (mut before, mut tsc, mut after) = bracket(real);
    for _ in 1..ANCHOR_TRIES {
        if after - before <= ANCHOR_BRACKET_NANOS {
            break;
        }
        (before, tsc, after) = bracket(real);
    }
    if state == READY {
        // The old anchor's estimate of this counter value must not be behind
        // the clock read before it.
        let (anchor_tsc, anchor_nanos) = ANCHOR.with(Cell::get);
        if anchor_tsc != 0 && tsc >= anchor_tsc {
            let rate = RATE.load(Ordering::Relaxed);
            if estimate(anchor_nanos, tsc - anchor_tsc, rate) < before {
                MAX_AGE_TICKS.store(0, Ordering::Release);
                STATE.store(OFF, Ordering::Release);
                return after;
            }
        }
    }
    // `after` may be later than the clock at `tsc` by as much as the bracket
    // is wide; an anchor that far ahead would put every estimate for the
    // next millisecond that far ahead (a thread descheduled between the two
    // reads: hundreds of microseconds). Such a reading is returned but not
    // anchored on; the next call tries again.
    if after - before <= ANCHOR_BRACKET_NANOS {
        ANCHOR.with(|anchor| anchor.set((tsc, after)));
    }
    if state != READY && after - before <= BRACKET_NANOS {
        calibrate(state, tsc, before, after);
    }
    after
}

/// A clock reading, a fenced counter reading, and a second clock reading.
#[cfg(all(target_os = "linux", target_arch = "x86_64", not(miri)))]
#[inline]
fn bracket(real: fn() -> u64) -> (u64, u64, u64) {
    let before = real();
    let tsc = rdtsc_fenced();
    (before, tsc, real())
}

/// The estimate for a counter `age` ticks after an anchor read at
/// `anchor_nanos`, `rate` nanoseconds per tick (32.32).
#[cfg(all(target_os = "linux", target_arch = "x86_64", not(miri)))]
#[inline]
fn estimate(anchor_nanos: u64, age: u64, rate: u64) -> u64 {
    // A 64 x 64 -> 128-bit product (one `mul`): any age fits, the refresh
    // checks anchors a thread set long ago too; nanoseconds since boot stay
    // far below 2^64.
    anchor_nanos + ((u128::from(age) * u128::from(rate)) >> 32) as u64 + SLACK_NANOS
}

/// Whether the counter may stand in for the clock here: the kernel's clock
/// source is `tsc`, and `TICKWHEEL_TSC=0` is not set.
#[cfg(all(target_os = "linux", target_arch = "x86_64", not(miri)))]
fn usable() -> bool {
    std::env::var_os("TICKWHEEL_TSC").is_none_or(|v| v != "0")
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|source| source.trim() == "tsc")
}

/// Records the first bracketed reading, or, once one is old enough,
/// computes the rate from it and this one.
#[cfg(all(target_os = "linux", target_arch = "x86_64", not(miri)))]
fn calibrate(state: u8, tsc: u64, before: u64, after: u64) {
    if state == USABLE {
        // One thread records the start: the one whose CAS takes the state
        // from `USABLE` to a private marker first.
        if STATE
            .compare_exchange(USABLE, RECORDING, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            START_TSC.store(tsc, Ordering::Relaxed);
            START_NANOS.store(before, Ordering::Relaxed);
            // Release: the start is readable once `CALIBRATING` is.
            STATE.store(CALIBRATING, Ordering::Release);
        }
        return;
    }
    if state != CALIBRATING {
        return;
    }
    let (start_tsc, start_nanos) = (
        START_TSC.load(Ordering::Relaxed),
        START_NANOS.load(Ordering::Relaxed),
    );
    if after < start_nanos + CALIBRATION_NANOS || tsc <= start_tsc {
        return;
    }
    // The clock moved at most `after - start_nanos` while the counter moved
    // `tsc - start_tsc`; padded by 1/1024.
    let nanos = u128::from(after - start_nanos);
    let ticks = u128::from(tsc - start_tsc);
    let rate = ((nanos << 32) / ticks) * 1025 / 1024 + 1;
    let Ok(rate) = u64::try_from(rate) else {
        STATE.store(OFF, Ordering::Release);
        return;
    };
    if rate >= 1 << 32 {
        // A counter slower than 1 GHz: not worth it.
        STATE.store(OFF, Ordering::Release);
        return;
    }
    let max_age = ((u128::from(MAX_AGE_NANOS) << 32) / u128::from(rate)) as u64;
    // One thread publishes the rate; `READY` (release) only after it.
    if STATE
        .compare_exchange(CALIBRATING, RECORDING, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
    {
        RATE.store(rate, Ordering::Relaxed);
        MAX_AGE_TICKS.store(max_age.max(1), Ordering::Release);
        STATE.store(READY, Ordering::Release);
    }
}

#[cfg(all(target_os = "linux", target_arch = "x86_64", not(miri)))]
#[inline]
fn rdtsc() -> u64 {
    // SAFETY: `rdtsc` is available on every x86-64 CPU.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// A counter reading that neither an earlier nor a later instruction passes.
#[cfg(all(target_os = "linux", target_arch = "x86_64", not(miri)))]
fn rdtsc_fenced() -> u64 {
    // SAFETY: `lfence` and `rdtsc` are available on every x86-64 CPU.
    unsafe {
        core::arch::x86_64::_mm_lfence();
        let tsc = core::arch::x86_64::_rdtsc();
        core::arch::x86_64::_mm_lfence();
        tsc
    }
}

#[cfg(all(test, target_os = "linux", target_arch = "x86_64", not(miri)))]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    use crate::service::clock::monotonic_nanos as real;

    /// CONTRACT 1 for the estimate: on several threads at once, through
    /// calibration and many anchor refreshes, no estimate is below a clock
    /// reading taken before it, nor more than a few microseconds ahead of
    /// one taken after it. Where the counter is the kernel's clock source,
    /// the estimate must also be in use by the end.
    #[test]
    fn the_estimate_is_never_behind_the_clock_on_any_thread() {
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    let began = Instant::now();
                    let mut checked = 0u64;
                    while began.elapsed() < Duration::from_millis(60) || checked < 100_000 {
                        let before = real();
                        let estimate = deadline_nanos(real);
                        let after = real();
                        assert!(
                            estimate >= before,
                            "estimate {estimate} behind the clock {before}"
                        );
                        assert!(
                            estimate <= after + 5_000,
                            "estimate {estimate} more than 5 us ahead of {after}"
                        );
                        checked += 1;
                        if checked % 4096 == 0 {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        if usable() {
            assert!(wait_until_ready(), "the estimate is in use");
            assert_ne!(MAX_AGE_TICKS.load(Ordering::Acquire), 0);
        }
    }

    /// Calibrates (the first few milliseconds); whether the estimate is in
    /// use within two seconds.
    fn wait_until_ready() -> bool {
        let began = Instant::now();
        while STATE.load(Ordering::Acquire) != READY && began.elapsed() < Duration::from_secs(2) {
            deadline_nanos(real);
            std::thread::sleep(Duration::from_millis(1));
        }
        STATE.load(Ordering::Acquire) == READY
    }

    thread_local! {
        static READS: Cell<u32> = const { Cell::new(0) };
    }

    /// The real clock, except that this thread's second reading comes
    /// 300 us late: as if the thread were descheduled between the counter
    /// reading and the clock reading after it.
    fn real_late_on_the_second_read() -> u64 {
        let read = READS.with(|reads| reads.replace(reads.get() + 1));
        if read == 1 {
            let from = real();
            while real() < from + 300_000 {
                std::hint::spin_loop();
            }
        }
        real()
    }

    /// A refresh whose clock reading after the counter's came late (the
    /// thread descheduled in between) must not become the anchor: every
    /// estimate from it for the next millisecond would be that late.
    #[test]
    fn a_thread_descheduled_while_anchoring_does_not_run_ahead() {
        if !usable() {
            return;
        }
        assert!(wait_until_ready(), "the estimate is in use");
        // Force this thread's next call through a refresh, with a stall.
        ANCHOR.with(|anchor| anchor.set((0, 0)));
        READS.with(|reads| reads.set(0));
        let stalled = deadline_nanos(real_late_on_the_second_read);
        assert!(READS.with(Cell::get) >= 2, "the refresh read the clock");
        assert!(stalled <= real());
        for _ in 0..10_000 {
            let before = real();
            let estimate = deadline_nanos(real);
            let after = real();
            assert!(estimate >= before, "estimate {estimate} behind {before}");
            assert!(
                estimate <= after + 5_000,
                "estimate {estimate} {} ns ahead of the clock after it",
                estimate - after
            );
        }
    }
}
