//! Configuring a [`TimerService`]: shards, tick, driver, clock and hooks.

use std::fmt;
use std::time::Duration;

use super::config::{Config, Driver, DriverPriority, PanicHook, PanicReport, Waker};
use super::driver::DriverThreads;
use super::shard::Shard;
use super::{Clock, Inner, ServiceClock, TimerService};
use crate::sync::{Arc, AtomicBool, AtomicUsize};
use crate::TimerError;
use std::sync::Arc as HookArc;

/// Builds a [`TimerService`].
///
/// ```
/// use std::time::Duration;
/// use tickwheel::{Driver, TimerService};
///
/// let service = TimerService::builder()
///     .shards(4)
///     .tick(Duration::from_micros(100))
///     .driver(Driver::Embedded)
///     .build()?;
/// assert_eq!(service.shard_count(), 4);
/// # Ok::<(), tickwheel::TimerError>(())
/// ```
#[must_use]
pub struct Builder {
    shards: Option<usize>,
    /// `None`: the driver's default (see [`Builder::tick`]).
    tick: Option<Duration>,
    driver: Driver,
    clock: Clock,
    panic_hook: Option<PanicHook>,
    waker: Option<Waker>,
    lend: bool,
    priority: DriverPriority,
}

impl Default for Builder {
    fn default() -> Self {
        Self::new()
    }
}

/// The shortest tick a service accepts.
pub const MIN_TICK: Duration = Duration::from_micros(10);

impl Builder {
    /// Defaults: one shard per available core, driver threads with a
    /// 500 µs tick (1 ms for [`Driver::Embedded`], see [`tick`](Self::tick)),
    /// monotonic clock, panics reported on stderr.
    pub fn new() -> Self {
        Builder {
            shards: None,
            tick: None,
            driver: if cfg!(loom) {
                Driver::Embedded
            } else {
                Driver::Threads { pin: false }
            },
            clock: Clock::Monotonic,
            panic_hook: None,
            waker: None,
            lend: true,
            priority: DriverPriority::Normal,
        }
    }

    /// Number of shards (at least 1; at most 4096).
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = Some(shards);
        self
    }

    /// Tick length, from 10 µs up to an hour. The default is 500 µs with
    /// [`Driver::Threads`] and 1 ms with [`Driver::Embedded`].
    ///
    /// A timer fires at the first tick boundary at or after its deadline,
    /// so the tick is the most a timer is rounded up by (half of it on
    /// average). A shorter tick fires timers closer to their deadlines and
    /// costs more driver wakes while timers are dense: at most one per tick
    /// that has something due; a shard with nothing due sleeps however
    /// short the tick.
    ///
    /// Why the defaults differ: a driver thread sleeps on a timeout of
    /// nanosecond resolution, and 500 µs halves its rounding for a bounded
    /// price. Measured (`examples/churn_lateness.rs`, tickwheel's futures on
    /// tokio's busy 2-worker runtime, 2 cores): p99 lateness about 1.0-1.1
    /// ms against 1.2-1.6 ms at 1 ms (tokio's own sleeps: 1.2-1.6 ms), p50
    /// 0.3 against 0.8 ms. The price, when something is due at every tick
    /// (`examples/idle_wakeups.rs dense 10000 5 1000 500`, 46,000 fires a
    /// second on one shard): 1,970 driver wakes a second against 980, and
    /// 4-5 % of a core against 2 %. An embedded owner usually waits in an
    /// event loop whose timeout counts whole milliseconds (`epoll_wait`,
    /// [`ShardGuard::next_deadline`](crate::ShardGuard::next_deadline)),
    /// which a finer tick would not make wake any sooner.
    pub fn tick(mut self, tick: Duration) -> Self {
        self.tick = Some(tick);
        self
    }

    /// Who runs the shards.
    pub fn driver(mut self, driver: Driver) -> Self {
        self.driver = driver;
        self
    }

    /// The clock (monotonic by default, or a [`ManualClock`](crate::ManualClock)).
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Called (on the shard's thread) with every caught callback panic.
    pub fn panic_hook(mut self, hook: impl Fn(&PanicReport) + Send + Sync + 'static) -> Self {
        self.panic_hook = Some(HookArc::new(hook));
        self
    }

    /// For [`Driver::Embedded`]: called with a shard index when that shard's
    /// owner must wake up early (a timer was started that is due before the
    /// deadline the owner last asked for with
    /// [`ShardGuard::next_deadline`](crate::ShardGuard::next_deadline)).
    /// Typically unparks a worker or writes to an eventfd. It may be called
    /// from any thread, and must not block.
    pub fn waker(mut self, waker: impl Fn(usize) + Send + Sync + 'static) -> Self {
        self.waker = Some(HookArc::new(waker));
        self
    }

    /// Whether driver threads lend their shards while they sleep (default
    /// `true`; see [`ShardGuard::idle`](crate::ShardGuard::idle)): other
    /// threads then apply their restarts, and the releases of timers that
    /// are not armed, themselves (and take in what is queued) instead of
    /// queueing them and waking the driver, which makes those two to three
    /// times cheaper for them (`service_vs_tokio/restart_nonowner` and
    /// `cross_stop/tickwheel-threads`). Starts and stops are queued either
    /// way. A driver lends only while nothing in its
    /// shard is due within the next 5 ms: lent, producers are never slowed
    /// by backpressure, and on a machine with more busy threads than cores a
    /// driver with timers due soon would then get too little CPU to fire
    /// them on time. `false` never lends.
    pub fn lend_while_idle(mut self, lend: bool) -> Self {
        self.lend = lend;
        self
    }

    /// How the operating system schedules the driver threads (default
    /// [`DriverPriority::Normal`]). [`DriverPriority::RealTime`] makes a
    /// driver run as soon as its next deadline comes, ahead of every normal
    /// thread, so that its timers fire on time on a machine with more busy
    /// threads than cores (see [`DriverPriority`]). Only with
    /// [`Driver::Threads`].
    ///
    /// ```no_run
    /// use tickwheel::{DriverPriority, TimerError, TimerService};
    ///
    /// let service = match TimerService::builder()
    ///     .driver_priority(DriverPriority::RealTime(1))
    ///     .build()
    /// {
    ///     Ok(service) => service,
    ///     // Not permitted here: normal priority, and timers may fire late
    ///     // while every core is busy.
    ///     Err(TimerError::DriverPriority) => TimerService::builder().build()?,
    ///     Err(other) => return Err(other),
    /// };
    /// # drop(service);
    /// # Ok::<(), TimerError>(())
    /// ```
    pub fn driver_priority(mut self, priority: DriverPriority) -> Self {
        self.priority = priority;
        self
    }

    /// Builds the service (and, for [`Driver::Threads`], spawns its threads).
    ///
    /// # Errors
    /// [`TimerError::InvalidConfig`] for zero or more than 4096 shards, a
    /// tick under 10 µs or over an hour, driver threads under loom, or a
    /// [`DriverPriority::RealTime`] outside 1..=99 or with
    /// [`Driver::Embedded`]. [`TimerError::DriverPriority`] when the driver
    /// threads could not be given their priority (no thread is left
    /// running then).
    pub fn build(self) -> Result<TimerService, TimerError> {
        let shards = match self.shards {
            Some(n) => n,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        let tick = self.tick.unwrap_or(match self.driver {
            Driver::Threads { .. } => Duration::from_micros(500),
            Driver::Embedded => Duration::from_millis(1),
        });
        if shards == 0 || shards > 4096 || tick < MIN_TICK || tick > Duration::from_secs(3600) {
            return Err(TimerError::InvalidConfig);
        }
        if cfg!(loom) && matches!(self.driver, Driver::Threads { .. }) {
            return Err(TimerError::InvalidConfig);
        }
        if let DriverPriority::RealTime(priority) = self.priority {
            if !(1..=99).contains(&priority) || self.driver == Driver::Embedded {
                return Err(TimerError::InvalidConfig);
            }
        }
        let inner = Arc::new(Inner {
            arena: super::Arena::new(),
            shards: (0..shards).map(|_| Shard::new()).collect(),
            clock: ServiceClock::new(self.clock),
            tick_nanos: tick.as_nanos() as u64,
            ticks: super::clock::TickDivisor::new(tick.as_nanos() as u64),
            last_tick: u64::MAX / tick.as_nanos() as u64,
            config: Config {
                driver: self.driver,
                panic_hook: self.panic_hook,
                waker: self.waker,
                lend: self.lend,
                priority: self.priority,
            },
            shut_down: AtomicBool::new(false),
            spread: AtomicUsize::new(0),
            drivers: DriverThreads::new(shards),
            handles: super::handles::HandleCounts::new(shards),
            tag: super::tag::acquire(),
        });
        let service = TimerService::from_inner(inner);
        if let Driver::Threads { pin } = self.driver {
            // On an error the service drops here: it shuts down, and the
            // driver threads already running finish and are joined.
            DriverThreads::spawn_all(&service.inner, pin, self.priority)?;
        }
        Ok(service)
    }
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("shards", &self.shards)
            .field("tick", &self.tick)
            .field("driver", &self.driver)
            .field("clock", &self.clock)
            .field("panic_hook", &self.panic_hook.is_some())
            .field("waker", &self.waker.is_some())
            .field("lend", &self.lend)
            .field("priority", &self.priority)
            .finish()
    }
}
