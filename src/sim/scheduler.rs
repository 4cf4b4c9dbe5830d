//! The simulation scheduler: [`Simulation`], its [`Builder`], and the
//! [`Context`] a handler schedules from.
//!
//! A simulation is split in two parts:
//!
//! * the *state* ([`Core`]): the event list, the sequence counter, the
//!   counters and the stop flag. Handlers reach it through a [`Context`],
//!   which can schedule and cancel but cannot run events, so a handler cannot
//!   re-enter the scheduler;
//! * the *observers* ([`Tracer`]): the namer, the tracing hook and the
//!   recorded trace. They watch runs and are not part of a checkpoint.

use std::fmt;
use std::time::Instant;

use super::queue::Queue;
use super::{EventId, SimError, Stats, Trace, TraceRecord};

/// A tracing hook: called after each event's handler returns.
pub(super) type TraceHook = Box<dyn FnMut(&TraceRecord) + Send>;

/// The default namer: every event is called "event".
fn default_name<E>(_: &E) -> &'static str {
    "event"
}

/// The scheduler state that handlers can reach.
pub(super) struct Core<E> {
    pub(super) queue: Queue<E>,
    /// The next sequence number. Never rolled back, so an id from an
    /// abandoned future never matches an event scheduled after a rollback.
    pub(super) next_seq: u64,
    pub(super) stats: Stats,
    /// Set by [`Context::stop`]; cleared when the run returns.
    pub(super) stop: bool,
}

impl<E> Core<E> {
    /// A hint, not a force: forcing it (and `schedule`) into the handler's
    /// closure makes the hold model's events cost more instructions
    /// (`benches/sim.rs` under callgrind with `SIM_HOLD_COUNT`), from the
    /// register pressure of the inlined wheel insert.
    #[inline]
    fn push(&mut self, time: u64, priority: i32, event: E) -> EventId {
        let seq = self.next_seq;
        self.next_seq += 1;
        let id = self.queue.push(time, seq, priority, event);
        self.stats.events_scheduled += 1;
        self.stats.peak_queue_len = self.stats.peak_queue_len.max(self.queue.len());
        id
    }

    fn schedule(&mut self, delay: u64, priority: i32, event: E) -> EventId {
        let time = self.queue.now().saturating_add(delay);
        self.push(time, priority, event)
    }

    fn schedule_at(&mut self, time: u64, priority: i32, event: E) -> Result<EventId, SimError> {
        let now = self.queue.now();
        if time < now {
            return Err(SimError::InThePast { time, now });
        }
        Ok(self.push(time, priority, event))
    }

    fn cancel(&mut self, id: EventId) -> Option<E> {
        let event = self.queue.cancel(id)?;
        self.stats.events_cancelled += 1;
        Some(event)
    }
}

/// What watches the runs: not part of a checkpoint.
pub(super) struct Tracer<E> {
    pub(super) namer: fn(&E) -> &'static str,
    pub(super) hook: Option<TraceHook>,
    pub(super) record: bool,
    pub(super) trace: Trace,
    /// Wall-clock origin of [`TraceRecord::wall_start`].
    pub(super) epoch: Instant,
}

impl<E> Tracer<E> {
    /// `true` when each event must be timed and reported.
    pub(super) fn is_active(&self) -> bool {
        self.record || self.hook.is_some()
    }
}

/// The methods [`Simulation`] and [`Context`] share, written once: both
/// reach the scheduler state through their field `core` (the simulation owns
/// it, a context borrows it), so each method's body is the same for both.
/// `now` and `len` take their doc from the caller, since a handler's view of
/// them differs (an event is running, and it is not pending).
macro_rules! shared_methods {
    (
        $(#[$now_doc:meta])* now;
        $(#[$len_doc:meta])* len;
    ) => {
        $(#[$now_doc])*
        pub fn now(&self) -> u64 {
            self.core.queue.now()
        }

        $(#[$len_doc])*
        pub fn len(&self) -> usize {
            self.core.queue.len()
        }

        /// `true` when no event is pending.
        pub fn is_empty(&self) -> bool {
            self.core.queue.is_empty()
        }

        /// Schedules `event` `delay` ticks from now with priority 0. A zero
        /// delay makes it due now; it runs in this run, after the events of
        /// this time that come before it (see the [module docs](super)).
        /// `now + delay` saturates at `u64::MAX`.
        pub fn schedule(&mut self, delay: u64, event: E) -> EventId {
            self.core.schedule(delay, 0, event)
        }

        /// Schedules `event` `delay` ticks from now with `priority` (higher runs
        /// first among events of the same time).
        pub fn schedule_with_priority(&mut self, delay: u64, priority: i32, event: E) -> EventId {
            self.core.schedule(delay, priority, event)
        }

        /// Schedules `event` at time `time` with priority 0.
        ///
        /// # Errors
        /// [`SimError::InThePast`] when `time < now()`; nothing is scheduled.
        pub fn schedule_at(&mut self, time: u64, event: E) -> Result<EventId, SimError> {
            self.core.schedule_at(time, 0, event)
        }

        /// Schedules `event` at time `time` with `priority`.
        ///
        /// # Errors
        /// [`SimError::InThePast`] when `time < now()`; nothing is scheduled.
        pub fn schedule_at_with_priority(
            &mut self,
            time: u64,
            priority: i32,
            event: E,
        ) -> Result<EventId, SimError> {
            self.core.schedule_at(time, priority, event)
        }

        /// Cancels a pending event and returns it; `None` when the id is stale
        /// (the event ran or was cancelled already). A stale id never touches
        /// another event.
        pub fn cancel(&mut self, id: EventId) -> Option<E> {
            self.core.cancel(id)
        }

        /// `true` while the event is pending.
        pub fn is_pending(&self, id: EventId) -> bool {
            self.core.queue.time_of(id).is_some()
        }
    };
}

/// A discrete-event simulation: virtual time in ticks, events of type `E`
/// ordered by time, then priority (higher first), then scheduling order.
///
/// Time jumps straight to the next event; idle stretches cost nothing. A
/// handler given to a run method receives each event with a [`Context`]
/// through which it reads the time and schedules or cancels events. The
/// model's own state lives wherever the handler can reach it (a captured
/// `&mut`, typically).
///
/// A handler that panics unwinds out of the run method. The event it was
/// handling is lost (it was taken off the list before its handler ran); the
/// scheduler stays consistent and can keep running.
///
/// ```
/// use tickwheel::sim::Simulation;
///
/// #[derive(Debug, Clone, Copy, PartialEq)]
/// enum Ev { Ping(u32), Pong(u32) }
///
/// let mut sim = Simulation::new();
/// sim.schedule(10, Ev::Ping(0));
/// let mut log = Vec::new();
/// sim.run(|ctx, ev| {
///     log.push((ctx.now(), ev));
///     match ev {
///         Ev::Ping(n) if n < 2 => { ctx.schedule(5, Ev::Pong(n)); }
///         Ev::Pong(n) => { ctx.schedule(5, Ev::Ping(n + 1)); }
///         _ => {}
///     }
/// })
/// .unwrap();
/// assert_eq!(log, [
///     (10, Ev::Ping(0)), (15, Ev::Pong(0)), (20, Ev::Ping(1)),
///     (25, Ev::Pong(1)), (30, Ev::Ping(2)),
/// ]);
/// assert_eq!(sim.now(), 30);
/// ```
pub struct Simulation<E> {
    pub(super) core: Core<E>,
    pub(super) tracer: Tracer<E>,
}

impl<E> Default for Simulation<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> Simulation<E> {
    /// An empty simulation at time 0, not verifying and not tracing.
    pub fn new() -> Self {
        Builder::new().build()
    }

    /// A builder for a configured simulation.
    pub fn builder() -> Builder<E> {
        Builder::new()
    }

    shared_methods! {
        /// The current time: the time of the event running or that ran last, or
        /// the time a bounded run ([`run_until`](Self::run_until)) moved to.
        now;
        /// Number of pending events.
        len;
    }

    /// The time of the next pending event.
    pub fn next_time(&self) -> Option<u64> {
        self.core.queue.next_time()
    }

    /// `true` when the simulation checks its invariants as it runs.
    pub fn is_verifying(&self) -> bool {
        self.core.queue.is_verifying()
    }

    /// The time a pending event is scheduled for; `None` when the id is stale.
    pub fn time_of(&self, id: EventId) -> Option<u64> {
        self.core.queue.time_of(id)
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        self.core.stats
    }

    /// The recorded trace (empty unless [`Builder::record_trace`] was set).
    /// Records from before a rollback stay: the trace shows what ran.
    pub fn trace(&self) -> &Trace {
        &self.tracer.trace
    }

    /// Takes the recorded trace, leaving an empty one (recording goes on).
    pub fn take_trace(&mut self) -> Trace {
        std::mem::take(&mut self.tracer.trace)
    }

    /// Installs the tracing hook (replacing any), called after each event's
    /// handler returns with the event's [`TraceRecord`].
    pub fn set_trace_hook(&mut self, hook: impl FnMut(&TraceRecord) + Send + 'static) {
        self.tracer.hook = Some(Box::new(hook));
    }

    /// Removes the tracing hook.
    pub fn clear_trace_hook(&mut self) {
        self.tracer.hook = None;
    }
}

impl<E> fmt::Debug for Simulation<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Simulation")
            .field("now", &self.now())
            .field("pending", &self.len())
            .field("verifying", &self.is_verifying())
            .field("tracing", &self.tracer.is_active())
            .field("stats", &self.core.stats)
            .finish()
    }
}

/// Configures a [`Simulation`].
///
/// ```
/// use tickwheel::sim::Simulation;
///
/// let sim: Simulation<u32> = Simulation::builder()
///     .start_time(1_000)
///     .capacity(1 << 16)
///     .verify(true)
///     .build();
/// assert_eq!(sim.now(), 1_000);
/// assert!(sim.is_verifying());
/// ```
pub struct Builder<E> {
    capacity: usize,
    start: u64,
    verify: bool,
    record: bool,
    namer: fn(&E) -> &'static str,
    hook: Option<TraceHook>,
}

impl<E> Default for Builder<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> Builder<E> {
    /// The defaults: time 0, no preallocation, not verifying, not tracing,
    /// every event named "event".
    pub fn new() -> Self {
        Builder {
            capacity: 0,
            start: 0,
            verify: false,
            record: false,
            namer: default_name::<E>,
            hook: None,
        }
    }

    /// Room for `capacity` pending events before the event list grows.
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }

    /// The time the simulation starts at.
    pub fn start_time(mut self, time: u64) -> Self {
        self.start = time;
        self
    }

    /// Verifying mode: check before each event that time does not go
    /// backwards, that the event is pending (so it runs once) and on its
    /// time, and that the order rule holds; a violation stops the run with
    /// an error. Costs a hash-map update per event scheduled and run.
    pub fn verify(mut self, on: bool) -> Self {
        self.verify = on;
        self
    }

    /// Keep a [`Trace`] record of every event run (see [`Simulation::trace`]).
    pub fn record_trace(mut self, on: bool) -> Self {
        self.record = on;
        self
    }

    /// How events are named in traces. Called only when tracing, before the
    /// handler runs.
    pub fn namer(mut self, namer: fn(&E) -> &'static str) -> Self {
        self.namer = namer;
        self
    }

    /// A hook called after each event's handler with its [`TraceRecord`].
    pub fn trace_hook(mut self, hook: impl FnMut(&TraceRecord) + Send + 'static) -> Self {
        self.hook = Some(Box::new(hook));
        self
    }

    /// Builds the simulation.
    pub fn build(self) -> Simulation<E> {
        Simulation {
            core: Core {
                queue: Queue::new(self.capacity, self.start, self.verify),
                next_seq: 0,
                stats: Stats::default(),
                stop: false,
            },
            tracer: Tracer {
                namer: self.namer,
                hook: self.hook,
                record: self.record,
                trace: Trace::new(),
                epoch: Instant::now(),
            },
        }
    }
}

impl<E> fmt::Debug for Builder<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("capacity", &self.capacity)
            .field("start", &self.start)
            .field("verify", &self.verify)
            .field("record_trace", &self.record)
            .field("trace_hook", &self.hook.is_some())
            .finish()
    }
}

/// What a handler sees of the simulation while its event runs.
///
/// It can read the time, schedule and cancel events, and ask the run to stop
/// after this event. It cannot run events: a handler cannot re-enter the
/// scheduler.
pub struct Context<'a, E> {
    pub(super) core: &'a mut Core<E>,
    pub(super) id: EventId,
    pub(super) priority: i32,
}

impl<E> Context<'_, E> {
    shared_methods! {
        /// The current time: the running event's time.
        now;
        /// Number of pending events (the running one is not pending).
        len;
    }

    /// The running event's id.
    pub fn id(&self) -> EventId {
        self.id
    }

    /// The running event's priority.
    pub fn priority(&self) -> i32 {
        self.priority
    }

    /// Asks the run to return after this event, with
    /// [`StopReason::Stopped`](super::StopReason::Stopped).
    pub fn stop(&mut self) {
        self.core.stop = true;
    }
}

impl<E> fmt::Debug for Context<'_, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("now", &self.now())
            .field("id", &self.id)
            .field("priority", &self.priority)
            .field("pending", &self.len())
            .finish()
    }
}
