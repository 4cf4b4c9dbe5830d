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
#[derive(Debug)]
pub(crate) struct ServiceClock {
    origin: Instant,
    kind: Clock,
    /// The latest reading handed out: a monotonic clock that misbehaves and
    /// goes backwards counts as no time passing.
    high_water: AtomicU64,
}

impl ServiceClock {
    pub(crate) fn new(kind: Clock) -> Self {
        ServiceClock {
            origin: Instant::now(),
            kind,
            high_water: AtomicU64::new(0),
        }
    }

    /// Nanoseconds since the origin; never decreases.
    pub(crate) fn now_nanos(&self) -> u64 {
        let raw = match &self.kind {
            Clock::Monotonic => duration_nanos(self.origin.elapsed()),
            Clock::Manual(manual) => duration_nanos(manual.elapsed()),
        };
        self.never_backwards(raw)
    }

    /// A raw reading, held at the highest reading handed out so far.
    fn never_backwards(&self, raw: u64) -> u64 {
        let previous = self.high_water.fetch_max(raw, Ordering::AcqRel);
        raw.max(previous)
    }

    /// Nanoseconds from the origin to `instant` (0 for instants before it).
    pub(crate) fn nanos_at(&self, instant: Instant) -> u64 {
        duration_nanos(instant.saturating_duration_since(self.origin))
    }

    pub(crate) fn is_manual(&self) -> bool {
        matches!(self.kind, Clock::Manual(_))
    }
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
        assert_eq!(clock.never_backwards(100), 100);
        assert_eq!(clock.never_backwards(40), 100, "stepped back: held");
        assert_eq!(clock.never_backwards(150), 150);
        assert!(clock.now_nanos() >= 150);
    }
}
