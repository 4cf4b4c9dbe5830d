//! Where a service reads the time: the monotonic clock, or a manual clock
//! that tests and simulations move by hand.

use std::fmt;
use std::time::{Duration, Instant};

// Plain std atomics even under loom: a clock reading orders nothing in the
// timer protocol (every cross-thread hand-off goes through the state word or
// an intake), so loom need not branch on it. A downstream loom model moves a
// `ManualClock` from any thread just the same.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The time source of a [`TimerService`](crate::TimerService).
#[derive(Clone, Debug, Default)]
pub enum Clock {
    /// `std::time::Instant` (monotonic) measured from the service's creation.
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
/// earlier reading: a clock that steps back counts as no time passing. The
/// mark is kept per shard (`Shard::clock_mark`), not per service: the
/// readings that must agree are those that place and fire the timers of one
/// wheel (its STARTs' deadlines and its owner's polls), and a service-wide
/// mark would be one cache line written by every START on every core.
#[derive(Debug)]
pub(crate) struct ServiceClock {
    origin: Instant,
    kind: Clock,
}

impl ServiceClock {
    pub(crate) fn new(kind: Clock) -> Self {
        ServiceClock {
            origin: Instant::now(),
            kind,
        }
    }

    /// Nanoseconds since the origin, never below what `mark` has seen.
    pub(crate) fn now_nanos(&self, mark: &AtomicU64) -> u64 {
        never_backwards(self.raw_nanos(), mark)
    }

    /// Nanoseconds since the origin as the clock reads them (for how long to
    /// sleep, where a reading that steps back is harmless).
    pub(crate) fn raw_nanos(&self) -> u64 {
        match &self.kind {
            Clock::Monotonic => duration_nanos(self.origin.elapsed()),
            Clock::Manual(manual) => duration_nanos(manual.elapsed()),
        }
    }

    /// Nanoseconds from the origin to `instant` (0 for instants before it).
    pub(crate) fn nanos_at(&self, instant: Instant) -> u64 {
        duration_nanos(instant.saturating_duration_since(self.origin))
    }

    pub(crate) fn is_manual(&self) -> bool {
        matches!(self.kind, Clock::Manual(_))
    }
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
        let clock = ServiceClock::new(Clock::Monotonic);
        let mark = AtomicU64::new(0);
        assert_eq!(never_backwards(100, &mark), 100);
        assert_eq!(never_backwards(40, &mark), 100, "stepped back: held");
        assert_eq!(never_backwards(150, &mark), 150);
        assert!(clock.now_nanos(&mark) >= 150);
        // Another shard's mark is its own.
        assert_eq!(never_backwards(40, &AtomicU64::new(0)), 40);
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
}

#[cfg(all(test, not(loom)))]
mod divisor_tests {
    use super::TickDivisor;

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
            for _ in 0..100_000 {
                // xorshift: values of every magnitude.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                check(x >> (x % 64));
            }
        }
    }
}
