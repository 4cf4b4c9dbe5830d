//! Running a simulation: one step, or a run bounded by simulated time, a
//! number of events, wall-clock time, or a handler's request.

use std::time::{Duration, Instant};

use super::scheduler::Context;
use super::{EventId, SimError, Simulation, TraceRecord};

/// Bounds for [`Simulation::run_with`]. A run stops at the first bound it
/// meets; with none, it runs until no event is pending.
///
/// ```
/// use std::time::Duration;
/// use tickwheel::sim::Limits;
///
/// let limits = Limits::new().until(1_000_000).max_events(10_000).wall_time(Duration::from_secs(1));
/// # let _ = limits;
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    until: Option<u64>,
    max_events: Option<u64>,
    wall: Option<Duration>,
}

impl Limits {
    /// No bounds.
    pub fn new() -> Self {
        Self::default()
    }

    /// Run the events with time `<= time`, then move the clock to `time`.
    pub fn until(mut self, time: u64) -> Self {
        self.until = Some(time);
        self
    }

    /// Run at most `count` events.
    pub fn max_events(mut self, count: u64) -> Self {
        self.max_events = Some(count);
        self
    }

    /// Start no event once `limit` of wall-clock time has passed since the
    /// run began. Checked before each event; a running handler is never
    /// interrupted, so a run overshoots by at most one handler's duration.
    pub fn wall_time(mut self, limit: Duration) -> Self {
        self.wall = Some(limit);
        self
    }
}

/// Why a run returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StopReason {
    /// No event is pending.
    Exhausted,
    /// The next event is after the [`until`](Limits::until) time.
    ReachedTime,
    /// The [`max_events`](Limits::max_events) cap was reached.
    EventCap,
    /// The [`wall_time`](Limits::wall_time) limit passed.
    WallTime,
    /// A handler called [`Context::stop`].
    Stopped,
}

/// What a run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunReport {
    /// Events run.
    pub events: u64,
    /// Why the run returned.
    pub stop: StopReason,
    /// The simulation's time when it returned.
    pub now: u64,
}

impl<E> Simulation<E> {
    /// Runs the next event, if any, and returns its id.
    ///
    /// `handler` receives the event and a [`Context`]; `now()` reads the
    /// event's time while it runs.
    ///
    /// # Errors
    /// An invariant violation, in verifying mode only (see [`SimError`]).
    ///
    /// ```
    /// use tickwheel::sim::Simulation;
    ///
    /// let mut sim = Simulation::new();
    /// let first = sim.schedule(3, 'a');
    /// sim.schedule(3, 'b');
    /// let mut seen = Vec::new();
    /// assert_eq!(sim.step(|_, ev| seen.push(ev)).unwrap(), Some(first));
    /// assert_eq!((seen.as_slice(), sim.now()), (&['a'][..], 3));
    /// ```
    pub fn step<H>(&mut self, mut handler: H) -> Result<Option<EventId>, SimError>
    where
        H: FnMut(&mut Context<'_, E>, E),
    {
        let started = Instant::now();
        self.core.stop = false;
        let result = self.run_one(u64::MAX, &mut handler);
        self.core.stop = false;
        self.core.stats.busy += started.elapsed();
        result
    }

    /// Runs until no event is pending (or a handler calls
    /// [`Context::stop`]).
    ///
    /// # Errors
    /// An invariant violation, in verifying mode only (see [`SimError`]).
    pub fn run<H>(&mut self, handler: H) -> Result<RunReport, SimError>
    where
        H: FnMut(&mut Context<'_, E>, E),
    {
        self.run_with(Limits::new(), handler)
    }

    /// Runs every event with time `<= time`, then moves the clock to `time`
    /// (if it is later than now).
    ///
    /// # Errors
    /// An invariant violation, in verifying mode only (see [`SimError`]).
    pub fn run_until<H>(&mut self, time: u64, handler: H) -> Result<RunReport, SimError>
    where
        H: FnMut(&mut Context<'_, E>, E),
    {
        self.run_with(Limits::new().until(time), handler)
    }

    /// Runs at most `count` events.
    ///
    /// # Errors
    /// An invariant violation, in verifying mode only (see [`SimError`]).
    pub fn run_events<H>(&mut self, count: u64, handler: H) -> Result<RunReport, SimError>
    where
        H: FnMut(&mut Context<'_, E>, E),
    {
        self.run_with(Limits::new().max_events(count), handler)
    }

    /// Runs until `limit` of wall-clock time has passed (see
    /// [`Limits::wall_time`]) or no event is pending.
    ///
    /// # Errors
    /// An invariant violation, in verifying mode only (see [`SimError`]).
    pub fn run_for<H>(&mut self, limit: Duration, handler: H) -> Result<RunReport, SimError>
    where
        H: FnMut(&mut Context<'_, E>, E),
    {
        self.run_with(Limits::new().wall_time(limit), handler)
    }

    /// Runs until the first of `limits` is met, no event is pending, or a
    /// handler calls [`Context::stop`].
    ///
    /// # Errors
    /// An invariant violation, in verifying mode only (see [`SimError`]).
    /// The run stops before the offending event's handler.
    pub fn run_with<H>(&mut self, limits: Limits, mut handler: H) -> Result<RunReport, SimError>
    where
        H: FnMut(&mut Context<'_, E>, E),
    {
        let started = Instant::now();
        // A stop request left by a handler that panicked in an earlier run
        // must not end this one.
        self.core.stop = false;
        let wall_deadline = limits.wall.and_then(|limit| started.checked_add(limit));
        let until = limits.until.unwrap_or(u64::MAX);
        let max_events = limits.max_events.unwrap_or(u64::MAX);
        let mut events = 0;
        let outcome = loop {
            if events >= max_events {
                break Ok(StopReason::EventCap);
            }
            if wall_deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                break Ok(StopReason::WallTime);
            }
            match self.run_one(until, &mut handler) {
                Ok(Some(_)) => events += 1,
                Ok(None) if self.core.queue.is_empty() => break Ok(StopReason::Exhausted),
                Ok(None) => break Ok(StopReason::ReachedTime),
                Err(error) => break Err(error),
            }
            if self.core.stop {
                break Ok(StopReason::Stopped);
            }
        };
        self.core.stop = false;
        if let (Ok(StopReason::Exhausted | StopReason::ReachedTime), Some(time)) =
            (&outcome, limits.until)
        {
            self.core.queue.advance_to(time);
        }
        self.core.stats.busy += started.elapsed();
        outcome.map(|stop| RunReport {
            events,
            stop,
            now: self.now(),
        })
    }

    /// Takes the next event with time `<= until` and runs its handler.
    fn run_one<H>(&mut self, until: u64, handler: &mut H) -> Result<Option<EventId>, SimError>
    where
        H: FnMut(&mut Context<'_, E>, E),
    {
        let next_seq = self.core.next_seq;
        let Some(popped) = self.core.queue.pop(until) else {
            return Ok(None);
        };
        self.core.queue.check_run(&popped, next_seq)?;
        let stats = &mut self.core.stats;
        stats.events_run += 1;
        if self.core.queue.is_verifying() {
            stats.events_verified += 1;
        }
        let id = popped.id;
        let mut context = Context {
            core: &mut self.core,
            id,
            priority: popped.priority,
        };
        if !self.tracer.is_active() {
            handler(&mut context, popped.event);
            return Ok(Some(id));
        }
        let name = (self.tracer.namer)(&popped.event);
        let start = Instant::now();
        handler(&mut context, popped.event);
        let end = Instant::now();
        let record = TraceRecord {
            id,
            time: popped.time,
            priority: popped.priority,
            name,
            wall_start: start.saturating_duration_since(self.tracer.epoch),
            wall: end.saturating_duration_since(start),
        };
        if let Some(hook) = &mut self.tracer.hook {
            hook(&record);
        }
        if self.tracer.record {
            self.tracer.trace.push(record);
        }
        Ok(Some(id))
    }
}
