//! What a callback receives: which timer fired, when, and a way to act on
//! the service from inside the callback.

use std::fmt;
use std::time::Duration;

use super::{Inner, Restart, Stop, Timer, TimerId, TimerSpec};
use crate::sync::Arc;
use crate::TimerError;

/// The context of one expiry, handed to the timer's callback on the shard
/// owner's thread.
///
/// Callbacks may start, stop and restart any timer through it (their own
/// included) without capturing the [`TimerService`](crate::TimerService),
/// which would keep the service alive through its own callbacks.
pub struct Expiry<'a> {
    pub(crate) inner: &'a Arc<Inner>,
    pub(crate) id: TimerId,
    pub(crate) shard: usize,
    pub(crate) deadline: u64,
    pub(crate) now: u64,
    pub(crate) overruns: u64,
    /// Nanoseconds from the deadline to this callback's start, on the
    /// service's clock.
    pub(crate) lateness_nanos: u64,
}

impl Expiry<'_> {
    /// The timer that fired.
    pub fn id(&self) -> TimerId {
        self.id
    }

    /// The shard it fired on (the current thread owns it).
    pub fn shard(&self) -> usize {
        self.shard
    }

    /// The tick the timer was due at.
    pub fn deadline_tick(&self) -> u64 {
        self.deadline
    }

    /// The service's "now" while this callback runs: the tick being
    /// processed, which is this timer's deadline tick even when one poll
    /// covers many ticks (docs/CONTRACT.md item 6).
    pub fn now_tick(&self) -> u64 {
        self.deadline
    }

    /// The tick the owner's current poll processes up to (`>= now_tick`):
    /// how far the clock had moved when the poll began, or when it last
    /// re-read it (a poll that keeps taking in messages re-reads the clock
    /// after each batch).
    pub fn poll_tick(&self) -> u64 {
        self.now
    }

    /// How late the poll was for this timer, in ticks (0 when the owner
    /// kept up): `poll_tick() - deadline_tick()`. Callbacks that ran earlier
    /// in the same poll are not counted; [`lateness`](Self::lateness) counts
    /// them.
    pub fn lateness_ticks(&self) -> u64 {
        self.now - self.deadline
    }

    /// How late this callback started: from the deadline asked for to now,
    /// on the service's clock (CONTRACT 2), including the time taken by
    /// callbacks that ran before it in the same poll and the rounding of the
    /// deadline up to a tick (measured to 1/256 of a tick). A window's
    /// deadline is the tick chosen in it; a periodic timer's later deadlines
    /// are on its tick grid.
    pub fn lateness(&self) -> Duration {
        Duration::from_nanos(self.lateness_nanos)
    }

    /// For a periodic timer: periods skipped (not fired) since the previous
    /// expiry because the owner was late.
    pub fn overruns(&self) -> u64 {
        self.overruns
    }

    /// Re-arms this timer `delay` from now (even if its handle was given up
    /// with [`Timer::forget`]). A periodic timer keeps its period.
    ///
    /// Same-tick order: a moved timer counts as newly armed, so it fires after
    /// every timer already armed for its new tick, whether it came from a
    /// later tick, an earlier one or that same tick (docs/CONTRACT.md item 5).
    ///
    /// # Errors
    /// [`TimerError::Shutdown`] after shutdown.
    pub fn restart(&mut self, delay: Duration) -> Result<Restart, TimerError> {
        self.inner.restart(self.id, delay)
    }

    /// Stops this timer: returns [`Stop::Running`] (it is running: this
    /// call) and a periodic timer is not re-armed. Works even if its handle
    /// was given up with [`Timer::forget`].
    pub fn stop(&mut self) -> Stop {
        self.inner.stop(self.id)
    }

    /// Starts another timer (on this shard unless `spec` says otherwise).
    ///
    /// # Errors
    /// As [`TimerService::schedule`](crate::TimerService::schedule).
    pub fn schedule<F>(&mut self, spec: TimerSpec, callback: F) -> Result<Timer, TimerError>
    where
        F: FnMut(&mut Expiry<'_>) + Send + 'static,
    {
        Inner::start(self.inner, spec, callback)
    }

    /// Stops any timer by id.
    pub fn stop_id(&mut self, id: TimerId) -> Stop {
        self.inner.stop(id)
    }

    /// Restarts any timer by id, as [`Timer::restart`] does.
    ///
    /// Same-tick order: a moved timer counts as newly armed, so it fires after
    /// every timer already armed for its new tick, whether it came from a
    /// later tick, an earlier one or that same tick (docs/CONTRACT.md item 5).
    ///
    /// # Errors
    /// [`TimerError::StaleKey`] for a released timer, [`TimerError::Shutdown`].
    pub fn restart_id(&mut self, id: TimerId, delay: Duration) -> Result<Restart, TimerError> {
        self.inner.restart(id, delay)
    }
}

impl fmt::Debug for Expiry<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Expiry")
            .field("id", &self.id)
            .field("shard", &self.shard)
            .field("deadline_tick", &self.deadline)
            .field("poll_tick", &self.now)
            .field("overruns", &self.overruns)
            .finish()
    }
}
