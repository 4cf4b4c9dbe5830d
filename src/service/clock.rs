//! Where a service reads the time: the monotonic clock, or a manual clock
//! that tests and simulations move by hand.

use std::fmt;
use std::time::{Duration, Instant};

// Plain std atomics even under loom: a clock reading orders nothing in the
// timer protocol (every cross-thread hand-off goes through the state word or
// a remote queue), so loom need not branch on it. A downstream loom model moves a
// `ManualClock` from any thread just the same.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The time source of a [`TimerService`](crate::TimerService).
#[derive(Clone, Debug, Default)]
pub enum Clock {
    /// `std::time::Instant` (monotonic) measured from the service's creation.
    /// On Linux x86-64, START and RESTART read their deadlines' `now` from
    /// the CPU's time-stamp counter when it is the kernel's clock source:
    /// an estimate built never to be behind the clock (and at most a few
    /// microseconds ahead), about a third of the cost of a clock read. Set
    /// `TICKWHEEL_TSC=0` in the environment to read the clock instead.
    #[default]
    Monotonic,
    /// A clock that only moves when told to (see [`ManualClock`]).
    Manual(ManualClock),
}

/// A clock for tests and simulation: it reads a number of nanoseconds that
/// only [`advance`](Self::advance) and [`set`](Self::set) change. Clones share
/// the same time.
///
/// ```
/// use std::time::Duration;
/// use tickwheel::ManualClock;
///
/// let clock = ManualClock::new();
/// clock.advance(Duration::from_millis(5));
/// assert_eq!(clock.elapsed(), Duration::from_millis(5));
/// clock.set(Duration::from_millis(1)); // backwards: ignored
/// assert_eq!(clock.elapsed(), Duration::from_millis(5));
/// ```
#[derive(Clone, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A manual clock reading zero.
    pub fn new() -> Self {
        ManualClock {
            nanos: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let by = duration_nanos(by);
        let mut current = self.nanos.load(Ordering::Acquire);
        loop {
            let next = current.saturating_add(by);
            match self
                .nanos
                .compare_exchange(current, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(actual) => current = actual,
            }
        }
    }

    /// Sets the clock to `elapsed` since its origin. A value before the
    /// current reading is ignored: time never goes backwards.
    pub fn set(&self, elapsed: Duration) {
        self.nanos
            .fetch_max(duration_nanos(elapsed), Ordering::AcqRel);
    }

    /// Time since the clock's origin.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Acquire))
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("elapsed", &self.elapsed())
            .finish()
    }
}

/// A clock bound to its origin, as a service reads it.
///
/// # Never backwards, per shard
///
/// A reading that is lower than one already used for a shard is held at that
/// earlier reading: a clock that steps back counts as no time passing. Two
/// of the three sources cannot step back at all, and skip the bookkeeping:
///
/// * Linux's `CLOCK_MONOTONIC` (what `Instant` reads there) never goes
///   backwards (POSIX: it "cannot have negative clock jumps"), and is read
///   directly with `clock_gettime`: a START reads the clock once, and going
///   through `Instant` (a `timespec` subtraction and a `Duration` turned back
///   into nanoseconds) cost a third as much again as the read itself.
/// * A [`ManualClock`] only moves forward (`advance`, and `set` ignores a
///   value behind it).
///
/// Elsewhere (`Instant` on other systems, whose docs allow it to step back
/// on faulty hardware) the mark is kept per shard (`Shard::clock_mark`), not
/// per service: the readings that must agree are those that place and fire
/// the timers of one wheel (its STARTs' deadlines and its owner's polls),
/// and a service-wide mark would be one cache line written by every START on
/// every core. (Before this split every START on Linux paid for the mark: a
/// locked `fetch_max` on a line that every thread starting timers on the
/// shard wrote.)
#[derive(Debug)]
pub(crate) struct ServiceClock {
    origin: Instant,
    /// `CLOCK_MONOTONIC` in nanoseconds, read just after `origin`. Read
    /// after, so it is at or after the instant `origin` stands for: a
    /// reading measured from it is never ahead of the same moment measured
    /// from `origin`, and a deadline given as an `Instant` (measured from
    /// `origin` by [`nanos_at`](Self::nanos_at)) is never reached early.
    #[cfg(target_os = "linux")]
    origin_raw: u64,
    /// `Instant::now()` read just after `origin_raw`: at or after the
    /// moment `origin_raw` stands for, so an instant computed from it
    /// ([`instant_at`](Self::instant_at)) is never before the moment a
    /// reading measured from `origin_raw` names (the gap between the reads
    /// was up to a microsecond under ThreadSanitizer:
    /// `tests/futures.rs::sleeps_complete_never_before_their_deadline_on_any_thread`).
    origin_after: Instant,
    kind: Clock,
}

impl ServiceClock {
    pub(crate) fn new(kind: Clock) -> Self {
        let origin = Instant::now();
        #[cfg(target_os = "linux")]
        let origin_raw = monotonic_nanos();
        ServiceClock {
            origin,
            #[cfg(target_os = "linux")]
            origin_raw,
            origin_after: Instant::now(),
            kind,
        }
    }

    /// Nanoseconds since the origin, never below what `mark` has seen.
    pub(crate) fn now_nanos(&self, mark: &AtomicU64) -> u64 {
        match &self.kind {
            Clock::Monotonic if cfg!(target_os = "linux") => self.raw_nanos(),
            Clock::Monotonic => never_backwards(self.raw_nanos(), mark),
            Clock::Manual(manual) => manual.nanos.load(Ordering::Acquire),
        }
    }

    /// Nanoseconds since the origin for a START's or RESTART's deadline:
    /// never below [`now_nanos`](Self::now_nanos) at the moment of the call,
    /// but on Linux read from the CPU's counter where that is the kernel's
    /// clock source (`tsc.rs`: about 12 ns instead of 30, and at most a few
    /// microseconds ahead).
    ///
    /// `mark` names the caller's shard's reading, which only the other
    /// clocks need: a thread that would look its shard up for it (the
    /// futures) skips that on the counter's path.
    #[inline]
    pub(crate) fn deadline_nanos<'m>(&self, mark: impl FnOnce() -> &'m AtomicU64) -> u64 {
        match &self.kind {
            #[cfg(target_os = "linux")]
            Clock::Monotonic => {
                super::tsc::deadline_nanos(monotonic_nanos).saturating_sub(self.origin_raw)
            }
            _ => self.now_nanos(mark()),
        }
    }

    /// Nanoseconds since the origin as the clock reads them (for how long to
    /// sleep, where a reading that steps back is harmless).
    #[inline]
    pub(crate) fn raw_nanos(&self) -> u64 {
        match &self.kind {
            #[cfg(target_os = "linux")]
            Clock::Monotonic => monotonic_nanos().saturating_sub(self.origin_raw),
            #[cfg(not(target_os = "linux"))]
            Clock::Monotonic => duration_nanos(self.origin.elapsed()),
            Clock::Manual(manual) => manual.nanos.load(Ordering::Acquire),
        }
    }

    /// The instant `nanos` after the origin (the inverse of
    /// [`nanos_at`](Self::nanos_at)), never before it: measured from
    /// `origin_after`, so it may be later by the width of the origin's
    /// reads (under a microsecond).
    pub(crate) fn instant_at(&self, nanos: u64) -> Instant {
        self.origin_after
            .checked_add(std::time::Duration::from_nanos(nanos))
            .unwrap_or(self.origin_after)
    }

    /// Nanoseconds from the origin to `instant` (0 for instants before it).
    pub(crate) fn nanos_at(&self, instant: Instant) -> u64 {
        duration_nanos(instant.saturating_duration_since(self.origin))
    }

    pub(crate) fn is_manual(&self) -> bool {
        matches!(self.kind, Clock::Manual(_))
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds since an arbitrary start (boot).
#[cfg(target_os = "linux")]
#[inline]
pub(super) fn monotonic_nanos() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable `timespec`. CLOCK_MONOTONIC exists
    // on every Linux this crate builds for, so the call cannot fail (std's
    // `Instant::now` makes the same call and the same assumption).
    let result = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    debug_assert_eq!(result, 0);
    // Both fields are non-negative for this clock; 2^64 ns is 584 years.
    (now.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(now.tv_nsec as u64)
}

/// A raw reading, held at the highest reading `mark` has seen.
fn never_backwards(raw: u64, mark: &AtomicU64) -> u64 {
    // Only write when time moved: on the per-core path the line stays with
    // the one core that reads the clock for this shard.
    let previous = mark.load(Ordering::Relaxed);
    if raw <= previous {
        return previous;
    }
    let previous = mark.fetch_max(raw, Ordering::Relaxed);
    raw.max(previous)
}

/// A duration in nanoseconds, saturating at `u64::MAX` (584 years).
pub(crate) fn duration_nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_reading_that_goes_backwards_counts_as_no_time_passing() {
        let mark = AtomicU64::new(0);
        assert_eq!(never_backwards(100, &mark), 100);
        assert_eq!(never_backwards(40, &mark), 100, "stepped back: held");
        assert_eq!(never_backwards(150, &mark), 150);
        // Another shard's mark is its own.
        assert_eq!(never_backwards(40, &AtomicU64::new(0)), 40);
        // Where the clock itself may step back, readings go through the mark.
        if !cfg!(target_os = "linux") {
            let clock = ServiceClock::new(Clock::Monotonic);
            assert!(clock.now_nanos(&mark) >= 150);
        }
    }

    /// The direct `CLOCK_MONOTONIC` reading must never run ahead of the same
    /// moment measured as an `Instant` from the origin: `TimerSpec::at`
    /// deadlines are measured that way, and a reading ahead of them would
    /// fire such a timer early.
    #[test]
    fn the_direct_reading_never_runs_ahead_of_instant() {
        let clock = ServiceClock::new(Clock::Monotonic);
        let mark = AtomicU64::new(0);
        let mut previous = 0;
        // Few rounds under miri, which runs `clock_gettime` slowly.
        for _ in 0..if cfg!(miri) { 20 } else { 10_000 } {
            let before = Instant::now();
            let reading = clock.now_nanos(&mark);
            let after = Instant::now();
            assert!(
                reading >= previous,
                "went backwards: {previous} then {reading}"
            );
            assert!(
                reading <= clock.nanos_at(after),
                "reading {reading} ahead of the instant read after it ({})",
                clock.nanos_at(after)
            );
            // ... and not stuck far behind it either (1 ms of slack for a
            // preemption between the reads).
            assert!(reading + 1_000_000 >= clock.nanos_at(before));
            previous = reading;
        }
    }

    #[test]
    fn a_manual_clock_reads_what_it_was_set_to() {
        let manual = ManualClock::new();
        let clock = ServiceClock::new(Clock::Manual(manual.clone()));
        let mark = AtomicU64::new(u64::MAX);
        assert_eq!(clock.now_nanos(&mark), 0, "the mark is not consulted");
        manual.advance(Duration::from_nanos(1234));
        assert_eq!(clock.now_nanos(&mark), 1234);
        assert_eq!(clock.raw_nanos(), 1234);
    }
}

/// Nanoseconds to ticks without a division instruction: every START turns
/// its deadline into ticks, and a 64-bit division is the slowest arithmetic
/// on that path (tens of cycles), so the service divides by its fixed tick
/// length with a precomputed reciprocal instead.
///
/// `magic = ceil(2^64 / tick)`. For any `n`, `n * magic / 2^64` is
/// `n / tick + n * e / (tick * 2^64)` with `e = magic * tick - 2^64` in
/// `0..tick`, so the error term is below `n / 2^64 < 1`: the estimate is
/// the true quotient or one more, and one multiply-and-compare settles which.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TickDivisor {
    tick: u64,
    magic: u64,
}

impl TickDivisor {
    /// `tick` must be at least 2 (the service's is at least 10 µs).
    pub(crate) fn new(tick: u64) -> Self {
        assert!(tick >= 2, "tick of at least 2 ns");
        let magic = (1u128 << 64).div_ceil(u128::from(tick));
        TickDivisor {
            tick,
            magic: magic as u64,
        }
    }

    /// `n / tick`, rounded down.
    #[inline]
    pub(crate) fn floor(self, n: u64) -> u64 {
        let estimate = ((u128::from(n) * u128::from(self.magic)) >> 64) as u64;
        if u128::from(estimate) * u128::from(self.tick) > u128::from(n) {
            estimate - 1
        } else {
            estimate
        }
    }

    /// `n / tick`, rounded up.
    #[inline]
    pub(crate) fn ceil(self, n: u64) -> u64 {
        let quotient = self.floor(n);
        quotient + u64::from(quotient.wrapping_mul(self.tick) != n)
    }

    /// `n / tick` rounded up, and how far that tick's start lies after `n`
    /// in 256ths of a tick, rounded down (0 when `n` is on a tick). The
    /// fraction is what a timer's lateness is measured from (`stats.rs`):
    /// a deadline rounded up to a tick is that much later than asked for.
    #[inline]
    pub(crate) fn ceil_with_rounding(self, n: u64) -> (u64, u8) {
        let quotient = self.floor(n);
        let rest = n - quotient * self.tick;
        if rest == 0 {
            return (quotient, 0);
        }
        // `gap` is in 1..tick. `gap * magic / 2^64` is `gap / tick` or a
        // hair more (see above); shifting by 56 instead of 64 scales it by
        // 256. One multiply, no division; the result may be one 256th high,
        // hence the cap.
        let gap = self.tick - rest;
        let fraction = ((u128::from(gap) * u128::from(self.magic)) >> 56) as u64;
        (quotient + 1, fraction.min(255) as u8)
    }

    /// `fraction` 256ths of a tick, in nanoseconds (rounded down).
    #[inline]
    pub(crate) fn fraction_nanos(self, fraction: u8) -> u64 {
        (u64::from(fraction) * self.tick) >> 8
    }
}

#[cfg(all(test, not(loom)))]
mod divisor_tests {
    use super::TickDivisor;

    #[test]
    fn a_fraction_of_a_tick_in_nanoseconds() {
        let divisor = TickDivisor::new(1_000_000);
        assert_eq!(divisor.fraction_nanos(0), 0);
        assert_eq!(divisor.fraction_nanos(128), 500_000);
        assert_eq!(divisor.fraction_nanos(255), 996_093);
        // A deadline 0.3 ticks before tick 5: 76.8 256ths, reported as 76 or 77.
        let (tick, fraction) = divisor.ceil_with_rounding(4_700_000);
        assert_eq!(tick, 5);
        assert!(fraction == 76 || fraction == 77, "{fraction}");
    }

    #[test]
    fn the_reciprocal_divides_exactly() {
        let ticks = [
            2,
            3,
            7,
            10_000,
            1_000_000,
            999_983,
            1 << 20,
            3_600_000_000_000,
        ];
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for &tick in &ticks {
            let divisor = TickDivisor::new(tick);
            let check = |n: u64| {
                assert_eq!(divisor.floor(n), n / tick, "{n} / {tick}");
                assert_eq!(divisor.ceil(n), n.div_ceil(tick), "ceil {n} / {tick}");
                let (ceil, fraction) = divisor.ceil_with_rounding(n);
                assert_eq!(ceil, n.div_ceil(tick), "ceil {n} / {tick}");
                // The exact gap in 256ths, and what was reported: equal, or
                // one more (the reciprocal's estimate may be high), capped.
                let gap = u128::from(ceil) * u128::from(tick) - u128::from(n);
                let exact = (gap * 256 / u128::from(tick)) as u64;
                let fraction = u64::from(fraction);
                assert!(
                    fraction == exact || fraction == (exact + 1).min(255),
                    "rounding of {n} on {tick}: {fraction} against {exact}"
                );
            };
            for n in [
                0,
                1,
                tick - 1,
                tick,
                tick + 1,
                u64::MAX,
                u64::MAX - 1,
                u64::MAX - tick,
            ] {
                check(n);
            }
            for k in [1u64, 2, 1000, u64::MAX / tick] {
                check(k * tick);
                check(k * tick - 1);
            }
            // Plain arithmetic: miri has nothing to find here that a few
            // thousand values would not show, and 800k checks take it many
            // minutes.
            let randoms = if cfg!(miri) { 2_000 } else { 100_000 };
            for _ in 0..randoms {
                // xorshift: values of every magnitude.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                check(x >> (x % 64));
            }
        }
    }
}
