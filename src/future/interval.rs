//! [`Interval`]: ticks on a drift-free grid (`start`, `start + period`, ...)
//! from a periodic timer of a [`TimerService`](crate::TimerService) shard.
//!
//! # Who owns what
//!
//! The periodic timer's callback adds the periods it stands for (one, plus
//! the overruns when its owner was late) to the shared [`Fired`] count and
//! wakes the task; the interval counts how many it has handed out
//! (`taken`). Each tick's instant is computed on the grid, so lateness never
//! shifts later ticks (unless [`MissedTickBehavior::Delay`] asks for that).
//! The grid is kept in nanoseconds on the service's clock (as a `Sleep`'s
//! deadline is), so it is the clock the timer fires by, manual or real.
//! A reset or a delay re-arms a *new* timer with a new count: the old
//! timer's callback may still be adding to the old count, and a count of
//! periods cannot tell its late one from a new one.

use std::fmt;
use std::future::poll_fn;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::fired::Fired;
use crate::service::ServiceRef;
use crate::sync::Arc;
use crate::{Timer, TimerSpec};

/// What [`Interval::tick`] does after ticks were missed (the task was not
/// polled, or the shard's owner was late, for more than a period).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MissedTickBehavior {
    /// Hand out every missed tick at once, one per call, then go on on the
    /// original grid.
    #[default]
    Burst,
    /// Hand out one tick for all the missed ones, then go on on the
    /// original grid.
    Skip,
    /// Hand out one tick for all the missed ones, then start a new grid one
    /// period after that call.
    Delay,
}

/// A stream of ticks every `period`: see
/// [`TimerService::interval`](crate::TimerService::interval).
///
/// Nothing is armed until the first [`tick`](Self::tick) is polled.
/// Dropping it stops its timer.
pub struct Interval {
    service: ServiceRef,
    period: Duration,
    /// Grid point 0 (the first tick), in nanoseconds on the service clock.
    start: u64,
    behavior: MissedTickBehavior,
    armed: Option<(Timer, Arc<Fired>)>,
    /// Periods handed out from the current grid (grid point `taken` is the
    /// next tick).
    taken: u32,
}

impl Interval {
    /// An interval whose first tick is `start` nanoseconds on `service`'s
    /// clock.
    pub(crate) fn new(service: ServiceRef, start: u64, period: Duration) -> Self {
        assert!(
            !period.is_zero(),
            "tickwheel: an interval's period must be > 0"
        );
        Interval {
            service,
            period,
            start,
            behavior: MissedTickBehavior::default(),
            armed: None,
            taken: 0,
        }
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// What happens to missed ticks.
    pub fn missed_tick_behavior(&self) -> MissedTickBehavior {
        self.behavior
    }

    /// Sets what happens to missed ticks.
    pub fn set_missed_tick_behavior(&mut self, behavior: MissedTickBehavior) {
        self.behavior = behavior;
    }

    /// Completes at the next tick, with the instant that tick was due at on
    /// the grid.
    pub async fn tick(&mut self) -> Instant {
        poll_fn(|cx| self.poll_tick(cx)).await
    }

    /// Starts a new grid: the next tick is one period from now.
    pub fn reset(&mut self) {
        self.rearm(self.service.deadline_nanos_after(self.period));
    }

    /// Polls for the next tick (for hand-written futures and streams).
    ///
    /// # Panics
    /// After the service has shut down.
    pub fn poll_tick(&mut self, cx: &mut Context<'_>) -> Poll<Instant> {
        let Some((_, fired)) = &self.armed else {
            // The first tick: due now if `start` has passed on the real
            // clock (`elapsed`, never ahead of it), which needs no timer;
            // the timer then starts at the second.
            if self.start <= self.service.elapsed_nanos() {
                self.arm(1);
                self.taken = 1;
                return Poll::Ready(self.service.instant_at(self.start));
            }
            self.arm(0);
            return self.poll_tick(cx);
        };
        let mut due = fired.count();
        if due == self.taken {
            fired.register(cx.waker());
            due = fired.count();
            if due == self.taken {
                return Poll::Pending;
            }
        }
        let tick = match self.behavior {
            MissedTickBehavior::Burst => {
                let tick = self.grid(self.taken);
                self.taken = self.taken.wrapping_add(1);
                tick
            }
            // One tick for all the missed ones: the latest of them.
            MissedTickBehavior::Skip => {
                self.taken = due;
                self.grid(due.wrapping_sub(1))
            }
            // The first missed one; a new grid if more were missed.
            MissedTickBehavior::Delay => {
                let tick = self.grid(self.taken);
                if due.wrapping_sub(self.taken) > 1 {
                    self.rearm(self.service.deadline_nanos_after(self.period));
                } else {
                    self.taken = due;
                }
                tick
            }
        };
        Poll::Ready(tick)
    }

    /// Grid point `n`, in nanoseconds on the service clock.
    fn grid_nanos(&self, n: u32) -> u64 {
        let period = crate::service::duration_nanos(self.period);
        self.start
            .saturating_add(period.saturating_mul(u64::from(n)))
    }

    /// The instant of grid point `n`.
    fn grid(&self, n: u32) -> Instant {
        self.service.instant_at(self.grid_nanos(n))
    }

    /// Arms a periodic timer whose first fire is grid point `first`; its
    /// fires are counted from `first`.
    fn arm(&mut self, first: u32) {
        let fired = Fired::new();
        let for_callback = fired.clone();
        let spec = TimerSpec::at_nanos(self.grid_nanos(first)).every(self.period);
        let timer = self
            .service
            .schedule(spec, move |expiry| {
                let periods = expiry.overruns().saturating_add(1);
                for_callback.fire(u32::try_from(periods).unwrap_or(u32::MAX / 4));
            })
            .unwrap_or_else(|error| panic!("tickwheel: Interval polled: {error}"));
        // Counting from `first` (the fires so far are the grid points
        // before it): `taken` starts there.
        if first > 0 {
            fired.fire(first);
        }
        self.armed = Some((timer, fired));
    }

    /// A new grid whose point 0 is `start`, with a new timer; the old one
    /// is stopped when its handle drops here.
    fn rearm(&mut self, start: u64) {
        self.start = start;
        self.taken = 0;
        self.armed = None;
        self.arm(0);
    }
}

impl fmt::Debug for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Interval")
            .field("period", &self.period)
            .field("start", &self.start)
            .field("behavior", &self.behavior)
            .field("taken", &self.taken)
            .finish()
    }
}
