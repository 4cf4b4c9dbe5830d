//! The per-core timer service: lock-free START, STOP and RESTART from any
//! thread onto hierarchical wheels that each belong to one owner thread.
//!
//! # Data flow and ownership
//!
//! ```text
//!   any thread                                   shard owner (one thread at a time)
//!   ----------                                   -----------------------------------
//!   start:   alloc slot, write callback and      take the remote queue (one swap),
//!            arming, word = ARMED|HANDLE|QUEUED,    apply it in push order:
//!            push the slot on the remote queue      a START's slot: link it
//!   stop:    CAS ARMED -> CANCELLED|QUEUED,         a STOP's slot: unlink, free
//!            push the slot (once)                   a proxy: link the restart
//!   restart: CAS -> ARMED, seq+1, write a        poll(now): pop due slots,
//!            proxy slot, push the proxy             CAS ARMED -> FIRED|RUNNING, run callback,
//!                                                   clear RUNNING (or re-arm periodic)
//!                                                own START/STOP: applied at once
//!                                                own RESTART of an armed timer: the
//!                                                  word read, no CAS (`shard.rs`)
//! ```
//!
//! * A timer's **slot** lives in the service's arena (`arena.rs`) and is never freed
//!   while the service lives, so any thread may read its state word at any
//!   time; stale handles are told apart by the generation in that word.
//! * The **state word** (`state.rs`) decides every race with one CAS: see the
//!   table there. The owner never waits for other threads, and other threads
//!   never wait for the owner (except [`Timer::stop_sync`], whose whole point
//!   is to wait for a running callback).
//! * The **remote queue** (`remote.rs`) is how other threads hand the owner
//!   their operations: what is queued is a slot, at most once (`QUEUED` in
//!   its word), never a message node. A START queues its own new slot, a
//!   STOP the stopped slot, a RESTART a spare slot carrying the restart (a
//!   proxy). One queue for every kind keeps cross-thread order: the owner
//!   applies entries in the order they were pushed. A thread that cancels
//!   its own START before the owner took it in reuses that slot in place
//!   for its next START (`Inner::revive`), so what waits for an owner that
//!   does not poll stays bounded by the live timers.
//! * While a driver sleeps, its shard is **lent** (`Shard::lend`): a thread
//!   that restarts a timer there, or releases one that is not armed,
//!   applies that to the wheel itself after taking in what is queued.
//!   STARTs and STOPs are always queued.
//! * The **wheel** and the owner-side fields of a slot are touched only by the
//!   thread that has claimed the shard ([`ShardGuard`] or a driver thread).
//!   The wheel is intrusive (`links.rs`): its entries are the slots.
//! * A **handle** ([`Timer`]) is an id plus a pointer to the service, kept
//!   alive by counts of handles that each thread writes on its own shard's
//!   line (`handles.rs`), so per-core use writes no cache line shared with
//!   other cores, and neither does a handle made on one core and dropped on
//!   another.
//!
//! # Time
//!
//! The service counts ticks from its creation. A timer started at time `t`
//! with delay `d` gets deadline tick `ceil((t + d) / tick)`, and a shard fires
//! tick `k` only once its clock reads at least `k * tick`: never early. On
//! Linux x86-64 `t` comes from the CPU's time-stamp counter where that is
//! the kernel's clock source (`tsc.rs`: an estimate never behind the clock
//! and at most a few microseconds ahead of it, for a third of the cost of
//! reading it); firing always reads the clock itself. A zero
//! delay is due now (the tick the clock is in). A timer armed for a tick the
//! owner has already processed is due now too, and fires at the next poll;
//! armed during a poll (a callback re-arming itself with zero delay), at the
//! poll after, so that it cannot keep one poll busy for ever (the wheel's
//! "Due now" rule, `wheel/hierarchy.rs`).

pub(crate) mod arena;
mod builder;
mod callback;
mod clock;
mod config;
mod driver;
mod expiry;
mod handles;
mod links;
mod remote;
mod shard;
pub(crate) mod state;
mod stats;
mod tag;
mod timer;
mod tsc;

use std::fmt;
use std::time::Duration;

pub use builder::Builder;
pub use clock::{Clock, ManualClock};
pub use config::{Driver, PanicReport, PanicSite};
pub use driver::{Due, ShardGuard};
pub use expiry::Expiry;
pub use stats::Stats;
pub use timer::{Restart, Stop, StopSync, Timer, TimerId, TimerSpec};

use arena::{Arena, Slot};
pub(crate) use clock::duration_nanos;
use clock::ServiceClock;
use config::Config;
use remote::{Arm, Message};
use shard::Shard;
use state::{Word, ARMED, CANCELLED, FIRED, FRESH, HALTED, HANDLE, QUEUED, RUNNING};
pub(crate) use timer::ServiceRef;
use timer::When;

#[cfg(any(loom, shuttle))]
use crate::sync::thread_local;
use crate::sync::{Arc, AtomicBool, AtomicUsize, Ordering};
use crate::TimerError;

/// Queued entries after which a START or RESTART wakes the owner even
/// though its deadline is not earlier than the owner's sleep: bounds what a
/// remote queue holds while its owner sleeps. Half the backpressure bound,
/// so a sleeping owner is woken before producers have to wait for it.
#[cfg(not(loom))]
const WAKE_AFTER_PENDING: usize = PENDING_LIMIT / 2;
/// Under loom, two: the models push a few entries each, and reach the
/// backlog wake this way (`sleeping_owner_vs_two_stops` fails with "2 wakes
/// for 1 sleeps" when that wake bypasses the claim).
#[cfg(loom)]
const WAKE_AFTER_PENDING: usize = 2;

/// Queued remote entries at which a START or RESTART from another thread
/// waits for the owner before adding another (backpressure, CONTRACT 20).
/// STARTs and STOPs queue slots, at most once each, so what they leave
/// waiting is bounded by the live timers anyway; what this bound holds back
/// is RESTARTs (one proxy slot each) against an owner that has fallen
/// behind. It also keeps the 24-bit arming `seq` from lapping (see
/// `state.rs`), so it must stay far below 2^23. One batch (`shard.rs`,
/// `BATCH`): an owner takes in a full queue in one round of its poll, well
/// under a millisecond of its CPU.
///
/// The bound is what the owner may be behind by, in its own CPU time, and
/// on a machine with more busy threads than cores the owner gets only its
/// share of a core: the wait of a START queued behind a full queue, and so
/// how late timers fire, grows with the bound divided by that share. With
/// 2^20, timers armed during a churn fired seconds late; with 2^13, 8
/// threads arming 1.6 M timers on 4 shards of a 2-core machine saw p50
/// 15-23 ms, p99 50-500 ms; with 2^10, p50 about 1 ms
/// (`examples/churn_lateness.rs`). Producers hit the bound more often, and
/// arming went no slower.
const PENDING_LIMIT: usize = 1 << 10;

/// The bound for a producer that owns a shard itself (an embedded owner, or
/// a callback): eight times `PENDING_LIMIT`. While such a producer is held it
/// does not poll its own shard, so two owners that keep stopping each
/// other's timers (a request/response server) held each other at every turn
/// at the lower bound: the main demo's timers fired seconds late. Owners
/// take in their own remote queues as they go, so what they leave waiting for each
/// other stays short without the tighter bound.
const OWNER_PENDING_LIMIT: usize = PENDING_LIMIT * 8;

// The same three thread-locals twice: with `const` initialisers in normal
// builds (no lazy-initialisation check on the START/STOP paths, which read
// `OWNED_SHARD` several times), without them under loom and shuttle, whose
// `thread_local!` does not accept them.
#[cfg(not(any(loom, shuttle)))]
std::thread_local! {
    /// `(service address, shard)` of the shard this thread owns, if any.
    static OWNED_SHARD: std::cell::Cell<(usize, usize)> = const { std::cell::Cell::new((0, 0)) };
    /// `(service address, timer id)` of the callback running on this thread.
    static RUNNING_CALLBACK: std::cell::Cell<(usize, u64)> = const { std::cell::Cell::new((0, 0)) };
    /// Spreads starts from threads that own no shard.
    static SPREAD: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
    /// `(service address, shard)`: `SPREAD` reduced to a shard of the
    /// service this thread last used (`Inner::choose_shard`).
    static SPREAD_SHARD: std::cell::Cell<(usize, usize)> = const { std::cell::Cell::new((0, 0)) };
    /// `(service address, slot, word)`: the START this thread cancelled
    /// before its owner took it in, for its next START to reuse
    /// (`Inner::revive`).
    static REVIVABLE: std::cell::Cell<(usize, u32, u64)> = const { std::cell::Cell::new((0, 0, 0)) };
}
#[cfg(any(loom, shuttle))]
thread_local! {
    #[allow(clippy::missing_const_for_thread_local)]
    static OWNED_SHARD: std::cell::Cell<(usize, usize)> = std::cell::Cell::new((0, 0));
    #[allow(clippy::missing_const_for_thread_local)]
    static RUNNING_CALLBACK: std::cell::Cell<(usize, u64)> = std::cell::Cell::new((0, 0));
    #[allow(clippy::missing_const_for_thread_local)]
    static SPREAD: std::cell::Cell<usize> = std::cell::Cell::new(usize::MAX);
    #[allow(clippy::missing_const_for_thread_local)]
    static SPREAD_SHARD: std::cell::Cell<(usize, usize)> = std::cell::Cell::new((0, 0));
    #[allow(clippy::missing_const_for_thread_local)]
    static REVIVABLE: std::cell::Cell<(usize, u32, u64)> = std::cell::Cell::new((0, 0, 0));
}

/// A timer service: N shards, each a hierarchical wheel with one owner.
///
/// Cheap to clone (`Send + Sync`); dropping the last clone shuts the service
/// down (see [`shutdown`](Self::shutdown)). Timer handles do not keep it
/// running.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tickwheel::{Stop, TimerService};
///
/// let service = TimerService::builder().shards(2).tick(Duration::from_millis(1)).build()?;
/// let fired = Arc::new(AtomicUsize::new(0));
/// let counter = fired.clone();
/// let timer = service.start(Duration::from_millis(5), move |_| {
///     counter.fetch_add(1, Ordering::SeqCst);
/// })?;
/// let idle = service.start(Duration::from_secs(3600), |_| unreachable!())?;
/// assert_eq!(idle.stop(), Stop::Cancelled);
/// while fired.load(Ordering::SeqCst) == 0 {
///     std::thread::sleep(Duration::from_millis(1));
/// }
/// assert_eq!(timer.stop(), Stop::Fired);
/// # Ok::<(), tickwheel::TimerError>(())
/// ```
#[derive(Clone)]
pub struct TimerService {
    inner: Arc<Inner>,
    _lifetime: Arc<ShutdownOnDrop>,
}

/// Shuts the service down when the last `TimerService` clone goes.
struct ShutdownOnDrop(Arc<Inner>);

impl Drop for ShutdownOnDrop {
    fn drop(&mut self) {
        Inner::shutdown(&self.0);
    }
}

/// Why [`Inner::deadline_tick`] has no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoDeadline {
    /// The id names no live timer of this service.
    Stale,
    /// This thread does not hold the timer's shard.
    NotOwner,
}

/// The shared state of a service.
pub(crate) struct Inner {
    pub(crate) arena: Arena,
    pub(crate) shards: Box<[Shard]>,
    pub(crate) clock: ServiceClock,
    pub(crate) tick_nanos: u64,
    /// Divides by `tick_nanos` (see `clock::TickDivisor`).
    ticks: clock::TickDivisor,
    /// The last tick the clock can reach: `u64::MAX / tick_nanos`.
    last_tick: u64,
    pub(crate) config: Config,
    shut_down: AtomicBool,
    spread: AtomicUsize,
    pub(crate) drivers: driver::DriverThreads,
    /// Counts of live `Timer` handles (`handles.rs`).
    pub(crate) handles: handles::HandleCounts,
    /// This service's tag in every id it hands out (see `tag.rs`).
    pub(crate) tag: u8,
}

impl TimerService {
    /// A service with the default configuration: one shard per available
    /// core, 1 ms ticks, one driver thread per shard.
    ///
    /// # Errors
    /// See [`Builder::build`].
    pub fn new() -> Result<Self, TimerError> {
        Builder::new().build()
    }

    /// A builder to configure shards, tick, driver and clock.
    pub fn builder() -> Builder {
        Builder::new()
    }

    fn from_inner(inner: Arc<Inner>) -> Self {
        TimerService {
            _lifetime: Arc::new(ShutdownOnDrop(inner.clone())),
            inner,
        }
    }

    /// Starts a one-shot timer that calls `callback` once `delay` has passed.
    ///
    /// # Errors
    /// [`TimerError::Shutdown`] after shutdown.
    #[inline]
    pub fn start<F>(&self, delay: Duration, callback: F) -> Result<Timer, TimerError>
    where
        F: FnMut(&mut Expiry<'_>) + Send + 'static,
    {
        // The common START (a one-shot delay on the caller's shard) skips
        // the spec's checks and dispatch: `plan_after`.
        let arming = self.inner.plan_after(delay)?;
        // The shard `plan_after` chose is this thread's counting shard.
        let shard = arming.shard;
        let callback = callback::new(callback, 0, false);
        let id = self.inner.arm(arming, callback);
        Ok(Timer::new(&self.inner, id, shard))
    }

    /// Starts a periodic timer: first after `period`, then every `period`.
    ///
    /// # Errors
    /// [`TimerError::InvalidPeriod`] for a zero period; [`TimerError::Shutdown`].
    pub fn start_periodic<F>(&self, period: Duration, callback: F) -> Result<Timer, TimerError>
    where
        F: FnMut(&mut Expiry<'_>) + Send + 'static,
    {
        Inner::start(
            &self.inner,
            TimerSpec::after(period).every(period),
            callback,
        )
    }

    /// Starts a timer described by `spec` (delay, instant or range; periodic;
    /// shard).
    ///
    /// # Errors
    /// [`TimerError::InvalidRange`], [`TimerError::InvalidPeriod`],
    /// [`TimerError::ShardOutOfRange`], [`TimerError::Shutdown`].
    pub fn schedule<F>(&self, spec: TimerSpec, callback: F) -> Result<Timer, TimerError>
    where
        F: FnMut(&mut Expiry<'_>) + Send + 'static,
    {
        Inner::start(&self.inner, spec, callback)
    }

    /// A counted reference to this service for a future
    /// (`crate::future`), without the two shared `Arc` counts a clone of
    /// `TimerService` moves (see [`ServiceRef`]).
    pub(crate) fn service_ref(&self) -> ServiceRef {
        ServiceRef::new(&self.inner)
    }

    /// Stops a timer by id. See [`Timer::stop`].
    pub fn stop_id(&self, id: TimerId) -> Stop {
        self.inner.stop(id)
    }

    /// Takes ownership of shard `index` for the calling thread: it must then
    /// call [`ShardGuard::poll`] in its loop. Only for services built with
    /// [`Driver::Embedded`].
    ///
    /// # Errors
    /// [`TimerError::ShardOutOfRange`]; [`TimerError::ShardClaimed`] when
    /// another thread (or a driver thread) owns it; [`TimerError::Shutdown`].
    pub fn claim_shard(&self, index: usize) -> Result<ShardGuard, TimerError> {
        ShardGuard::claim(&self.inner, index)
    }

    /// Number of shards.
    pub fn shard_count(&self) -> usize {
        self.inner.shards.len()
    }

    /// The tick length.
    pub fn tick(&self) -> Duration {
        Duration::from_nanos(self.inner.tick_nanos)
    }

    /// The service clock's current reading: the time since its origin (the
    /// service's start, or zero on a [`ManualClock`]). Timer deadlines are
    /// measured on it: a timer started now with delay `d` is due at
    /// `elapsed() + d` rounded up to a tick, and tick `k`
    /// ([`Expiry::deadline_tick`](crate::Expiry::deadline_tick),
    /// [`Timer::deadline_tick`](crate::Timer::deadline_tick)) is `k * tick()`
    /// on it. A loop that caches its own time can convert with it.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.inner.clock.raw_nanos())
    }

    /// Counters and lateness figures, summed over shards.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// Stops the drivers, drops every pending callback without running it and
    /// frees the service's timers. Afterwards starts fail with
    /// [`TimerError::Shutdown`] and stops on old handles return
    /// [`Stop::Inactive`]. Waits for driver threads to finish their current
    /// callback. Idempotent; also done when the last clone is dropped.
    pub fn shutdown(&self) {
        Inner::shutdown(&self.inner);
    }

    /// `true` once [`shutdown`](Self::shutdown) has begun.
    pub fn is_shut_down(&self) -> bool {
        self.inner.is_shut_down()
    }

    /// The shared state, for the C ABI, which works on raw timer ids.
    #[cfg(any(feature = "capi", test))]
    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }
}

impl fmt::Debug for TimerService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerService")
            .field("shards", &self.inner.shards.len())
            .field("tick", &self.tick())
            .field("shut_down", &self.is_shut_down())
            .finish()
    }
}

/// A START that passed its checks.
/// A RESTART's new deadline: a delay from now, or an instant already on the
/// service clock.
#[derive(Clone, Copy)]
enum RestartTo {
    After(Duration),
    AtNanos(u64),
}

struct Arming {
    shard: usize,
    deadline: u64,
    /// See [`remote::Arm::rounding`].
    rounding: u8,
    /// Ticks; 0 for a one-shot timer.
    period: u64,
}

impl Inner {
    #[inline]
    pub(crate) fn is_shut_down(&self) -> bool {
        self.shut_down.load(Ordering::Acquire)
    }

    fn address(&self) -> usize {
        self as *const Inner as usize
    }

    /// Nanoseconds to whole ticks, rounding up (deadlines are never early),
    /// saturating at the last tick the clock can reach.
    ///
    /// The clock counts nanoseconds in a `u64` (584 years), so its last tick
    /// is `u64::MAX / tick`. A deadline past it (a huge delay) is held at
    /// that last tick, where it fires when the clock gets there; rounded up
    /// instead it would name a tick the clock can never read, and never
    /// fire. (A timer armed after the last tick was processed is due at
    /// that tick, which has been reached: the next poll fires it. The
    /// service_ops fuzz target ran into that case, see RELIABILITY.md.)
    #[inline]
    fn ticks_ceil(&self, nanos: u64) -> u64 {
        self.ticks.ceil(nanos).min(self.last_tick)
    }

    /// [`ticks_ceil`](Self::ticks_ceil), and how far the tick lies after
    /// `nanos` ([`remote::Arm::rounding`]).
    #[inline]
    fn ticks_ceil_with_rounding(&self, nanos: u64) -> (u64, u8) {
        let (tick, rounding) = self.ticks.ceil_with_rounding(nanos);
        if tick > self.last_tick {
            (self.last_tick, 0)
        } else {
            (tick, rounding)
        }
    }

    /// The deadline tick `delay` from now on `shard`'s clock, and its
    /// rounding ([`remote::Arm::rounding`]). A zero delay is due now: the
    /// tick the clock is in, which the owner's next poll has reached
    /// (rounded up, it would wait for the clock's next tick); its lateness
    /// then counts from that tick's start.
    #[inline]
    fn deadline_after(&self, shard: usize, delay: Duration) -> (u64, u8) {
        if delay.is_zero() {
            // The real clock: an estimate a little ahead could name the
            // next tick, which is not due yet.
            let now = self.now_nanos(shard);
            return (self.ticks.floor(now).min(self.last_tick), 0);
        }
        // The deadline clock (`tsc.rs`): never behind the real one.
        let now = self.clock.deadline_nanos(|| &self.shards[shard].clock_mark);
        self.ticks_ceil_with_rounding(now.saturating_add(duration_nanos(delay)))
    }

    /// The tick the clock is in now (rounding down: tick `k` is processed
    /// once `k * tick` has passed).
    pub(crate) fn current_tick(&self, shard: usize) -> u64 {
        self.ticks.floor(self.now_nanos(shard))
    }

    /// The clock as shard `shard` sees it (never backwards for that shard).
    fn now_nanos(&self, shard: usize) -> u64 {
        self.clock.now_nanos(&self.shards[shard].clock_mark)
    }

    /// Which shard a new timer goes to: the caller's own shard if it owns one,
    /// else a shard fixed per calling thread (spread round-robin), so one
    /// thread's timers stay together. Also the shard whose handle counters
    /// this thread writes (`handles.rs`).
    #[inline]
    fn choose_shard(&self) -> usize {
        self.owned_shard().unwrap_or_else(|| self.spread_choice())
    }

    /// [`choose_shard`](Self::choose_shard) for a thread that owns no shard
    /// of this service.
    #[inline]
    fn spread_choice(&self) -> usize {
        let (service, shard) = SPREAD_SHARD.with(|spread| spread.get());
        // The bound check also covers another service since made at the
        // address of the one the shard was chosen for: any shard in range
        // will do.
        if service == self.address() && shard < self.shards.len() {
            return shard;
        }
        self.spread_shard()
    }

    /// [`choose_shard`](Self::choose_shard) for a thread that owns no shard
    /// and has not used this service last: its spread number reduced to a
    /// shard, and remembered (a division, which every START and handle drop
    /// from such a thread paid: `owner_ops remote-start-cancel`).
    #[cold]
    fn spread_shard(&self) -> usize {
        let shard = SPREAD.with(|spread| {
            if spread.get() == usize::MAX {
                spread.set(self.spread.fetch_add(1, Ordering::Relaxed));
            }
            spread.get() % self.shards.len()
        });
        SPREAD_SHARD.with(|spread| spread.set((self.address(), shard)));
        shard
    }

    #[inline]
    pub(crate) fn start<F>(
        inner: &Arc<Self>,
        spec: TimerSpec,
        callback: F,
    ) -> Result<Timer, TimerError>
    where
        F: FnMut(&mut Expiry<'_>) + Send + 'static,
    {
        let id = inner.start_on(spec, callback)?;
        Ok(Timer::new(inner, id, inner.choose_shard()))
    }

    /// START: check the spec, make the callback (with the period, if any;
    /// boxed only if too large to keep in the slot) and arm it.
    #[cfg(feature = "capi")]
    pub(crate) fn start_raw<F>(&self, spec: TimerSpec, callback: F) -> Result<TimerId, TimerError>
    where
        F: FnMut(&mut Expiry<'_>) + Send + 'static,
    {
        self.start_on(spec, callback)
    }

    /// START of `spec`: plan it, make its callback, arm it.
    #[inline]
    pub(crate) fn start_on<F>(&self, spec: TimerSpec, callback: F) -> Result<TimerId, TimerError>
    where
        F: FnMut(&mut Expiry<'_>) + Send + 'static,
    {
        let arming = self.plan(&spec)?;
        let callback = callback::new(callback, arming.period, spec.burst);
        Ok(self.arm(arming, callback))
    }

    /// [`plan`](Self::plan) for `TimerSpec::after(delay)`: the same checks
    /// and arithmetic, without building and matching a spec (the owner's
    /// START + cancel, `examples/owner_ops.rs` under cachegrind: 729 -> 674
    /// instructions). Always inlined: returned through memory, the
    /// `Arming` was stored a field at a time and read back 16 bytes at a
    /// time, which waited for the stores to leave the store buffer (a
    /// fifth of the START side of `examples/owner_ops.rs cross-stop` under
    /// `perf`).
    #[inline(always)]
    fn plan_after(&self, delay: Duration) -> Result<Arming, TimerError> {
        if self.is_shut_down() {
            return Err(TimerError::Shutdown);
        }
        let shard = self.choose_shard();
        let (deadline, rounding) = self.deadline_after(shard, delay);
        Ok(Arming {
            shard,
            deadline,
            rounding,
            period: 0,
        })
    }

    /// START of a one-shot timer due at `nanos` on the service clock
    /// (rounded up to its tick), on the caller's shard: `start` without a
    /// clock read (`ServiceRef::start_at_nanos`). Returns the timer and the
    /// shard its handle is to be counted on.
    #[inline]
    pub(crate) fn start_at_nanos<F>(
        &self,
        nanos: u64,
        callback: F,
    ) -> Result<(TimerId, usize), TimerError>
    where
        F: FnMut(&mut Expiry<'_>) + Send + 'static,
    {
        let arming = self.plan_at_nanos(nanos)?;
        let shard = arming.shard;
        let callback = callback::new(callback, 0, false);
        Ok((self.arm(arming, callback), shard))
    }

    /// `delay` from now on the service's clock, in nanoseconds since its
    /// origin: from the calling thread's deadline clock (`tsc.rs`: a few
    /// ns, never behind the real clock), so a deadline fixed now is never
    /// early.
    #[inline]
    pub(crate) fn deadline_nanos_after(&self, delay: Duration) -> u64 {
        self.clock
            .deadline_nanos(|| &self.shards[self.choose_shard()].clock_mark)
            .saturating_add(duration_nanos(delay))
    }

    /// [`plan_after`](Self::plan_after) for a deadline already on the
    /// service clock (`start_at_nanos`).
    #[inline]
    fn plan_at_nanos(&self, nanos: u64) -> Result<Arming, TimerError> {
        if self.is_shut_down() {
            return Err(TimerError::Shutdown);
        }
        let shard = self.choose_shard();
        let (deadline, rounding) = self.ticks_ceil_with_rounding(nanos);
        Ok(Arming {
            shard,
            deadline,
            rounding,
            period: 0,
        })
    }

    /// What a START will do: which shard, which deadline, which period; or
    /// why it cannot.
    fn plan(&self, spec: &TimerSpec) -> Result<Arming, TimerError> {
        if self.is_shut_down() {
            return Err(TimerError::Shutdown);
        }
        let shard = match spec.shard {
            Some(shard) if shard >= self.shards.len() => return Err(TimerError::ShardOutOfRange),
            Some(shard) => shard,
            None => self.choose_shard(),
        };
        let period = match spec.period {
            Some(period) if period.is_zero() => return Err(TimerError::InvalidPeriod),
            Some(period) => self.ticks_ceil(duration_nanos(period)),
            None => 0,
        };
        let (deadline, rounding) = match spec.when {
            When::After(delay) => self.deadline_after(shard, delay),
            When::At(instant) => self.ticks_ceil_with_rounding(self.clock.nanos_at(instant)),
            When::AtNanos(nanos) => self.ticks_ceil_with_rounding(nanos),
            When::Within(earliest, latest) => {
                if earliest > latest {
                    return Err(TimerError::InvalidRange);
                }
                let now = self.now_nanos(shard);
                let first = self.ticks_ceil(now.saturating_add(duration_nanos(earliest)));
                // The window's last tick must not be after `now + latest`.
                let last =
                    (self.ticks.floor(now.saturating_add(duration_nanos(latest)))).max(first);
                // Any tick of the window is on time: lateness counts from
                // the tick chosen.
                (crate::wheel::roundest_tick_in(first, last), 0)
            }
        };

        Ok(Arming {
            shard,
            deadline,
            rounding,
            period,
        })
    }

    /// Allocates a slot, publishes it armed, and hands it to its shard: the
    /// owner links it at once; any other thread queues the new slot for the
    /// owner, or reuses a slot of its own cancelled START in place
    /// (`revive`).
    ///
    /// The other threads' path is out of line (`arm_remote`), so that the
    /// owner's is inlined into the START that made the callback (with
    /// `#[inline]` alone it was not, and an owner's START + cancel took
    /// about 7 % longer: `farm-bench` on `examples/owner_ops.rs
    /// start-cancel`).
    #[inline(always)]
    fn arm(&self, arming: Arming, callback: arena::Callback) -> TimerId {
        let shard = arming.shard;
        if !self.owns(shard) {
            return self.arm_remote(arming, callback);
        }
        // One bounds check for the whole START (with `self.shards[shard]`
        // at each use the compiler checked it three times).
        let target = &self.shards[shard];
        // SAFETY: this thread holds the shard's claim (`owns`), and no
        // reference into its core is live while user code runs.
        unsafe { target.catch_up(self) };
        // SAFETY: this thread holds the shard's claim (`owns`).
        let (index, slot) = unsafe { self.alloc_owned_slot(target) };
        let message = self.publish(index, slot, arming, callback, false);
        // SAFETY: this thread holds the shard's claim (`owns`). The slot
        // was just published by this thread and no other thread has its
        // id yet, so its word is the one `publish` stored: it is linked
        // without `reconcile`'s second lookup and re-reading of it (an
        // owner's START + cancel: 850 -> 791 instructions).
        unsafe {
            let arm = message.arm.expect("a START arms");
            target.link(self, slot, message.index, arm);
        }
        TimerId::new(message.index, message.gen, self.tag)
    }

    /// [`arm`](Self::arm) from a thread that does not own the shard: out of
    /// line, so that the owner's inlined path stays small.
    ///
    /// A START from another thread is queued even when the shard is lent:
    /// entering the shard to link it there, and to unlink and free it again
    /// on cancel, cost about 1,100 instructions per START + cancel pair,
    /// against about 600 for a queued START that the next START revives
    /// (`examples/owner_ops.rs remote-start-cancel` under callgrind).
    #[inline(never)]
    fn arm_remote(&self, arming: Arming, callback: arena::Callback) -> TimerId {
        let shard = arming.shard;
        self.shards[shard].note_activity();
        let callback = match self.revive(&arming, callback) {
            Ok(id) => return id,
            Err(callback) => callback,
        };
        let index = self.arena.alloc();
        // SAFETY: `alloc` handed it out just now.
        let slot = unsafe { self.slot(index) };
        let message = self.publish(index, slot, arming, callback, true);
        self.queue(shard, message, true);
        TimerId::new(message.index, message.gen, self.tag)
    }

    /// A START from a thread that owns no shard, in the slot of its own
    /// last START if the shard's owner has not taken that one in yet and it
    /// has been cancelled and released since (`REVIVABLE`): the slot is
    /// still on the remote queue, so the new timer needs no slot and no
    /// push, and a START + cancel loop against an owner that does not poll
    /// holds one slot instead of one per START (CONTRACT 20;
    /// `tests/service_wake.rs::item20_a_stalled_owner_holds_one_slot_per_canceller`).
    /// Returns the callback when it cannot.
    ///
    /// Who owns what: the slot's word `CANCELLED | QUEUED | FRESH` (no
    /// handle) says nobody but the owner may touch it, and the owner only
    /// to take it off the queue. This thread's CAS from exactly that word to
    /// `FREE | QUEUED | FRESH` of the next generation ends the old timer and
    /// makes the slot this thread's: an owner that takes it off meanwhile
    /// leaves it alone (`Shard::apply_one`). This thread fills it, then CASes
    /// it to `ARMED | HANDLE | QUEUED | FRESH`: if `QUEUED` is still set the
    /// owner has not seen it yet and links it when it comes to it; if not,
    /// it is pushed again as any START.
    ///
    /// Order (CONTRACT 5): the slot keeps its place on the queue, which may
    /// be before entries other threads pushed since. So it records the
    /// newest entry on the queue after this thread's CAS (everything that
    /// happened before this START was pushed by then), and the owner links
    /// it right after that entry, not at its own place
    /// (`Shard::link_deferred`).
    fn revive(
        &self,
        arming: &Arming,
        callback: arena::Callback,
    ) -> Result<TimerId, arena::Callback> {
        let (service, index, word) = REVIVABLE.with(|r| r.get());
        if service != self.address() {
            return Err(callback);
        }
        REVIVABLE.with(|r| r.set((0, 0, 0)));
        let shard = arming.shard;
        let Some(slot) = self.arena.get(index) else {
            return Err(callback);
        };
        if usize::from(slot.shard.load(Ordering::Relaxed)) != shard {
            return Err(callback);
        }
        let old = Word(word);
        let reserved = Word::free(state::next_gen(old.gen()))
            .with(QUEUED)
            .with(FRESH);
        if slot.cas(old, reserved).is_err() {
            return Err(callback);
        }
        let armed = reserved.with_arm(ARMED).with(HANDLE);
        // What happened before this START was pushed by now (SeqCst: the
        // load sees every push that happened before it).
        let after = match self.shards[shard].remote.newest() {
            remote::NIL => remote::REVIVE_AFTER_BATCH,
            newest => newest,
        };
        // SAFETY: the CAS above made the slot this thread's (see above).
        let previous = slot.owned.with_mut(|owned| unsafe {
            (*owned).deadline = arming.deadline;
            (*owned).set_linked(armed.seq(), arming.rounding);
            (*owned).prev = after;
            (*owned).callback.replace(callback)
        });
        if slot.cas(reserved, armed).is_err() {
            // The owner took the slot off meanwhile (and left it alone):
            // queue it again, as a new START, with nothing to follow.
            // SAFETY: as above; the word is `FREE` of the new generation,
            // which no id names yet and no other thread changes.
            slot.owned
                .with_mut(|owned| unsafe { (*owned).prev = remote::NIL });
            slot.state.store(armed.0, Ordering::Release);
            let message = Message::armed(index, armed, arming.rounding, arming.deadline);
            self.queue(shard, message, true);
        } else if self.shards[shard].queued_for(arming.deadline) {
            self.wake(shard);
        }
        self.shards[shard]
            .counters
            .revived
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // The old timer's captures go last, once the slot is consistent:
        // user code, which may panic (reported like a callback's).
        shard::drop_callback(
            self,
            previous,
            TimerId::new(index, old.gen(), self.tag),
            shard,
        );
        Ok(TimerId::new(index, armed.gen(), self.tag))
    }

    /// Fills free slot `index` (`slot`; just taken from a free list or
    /// fresh, so this thread's alone) for `arming` and publishes it armed,
    /// and `QUEUED` if `queued` (the caller then pushes it on the shard's
    /// remote queue); returns the message that links it (an owner links it
    /// at once).
    #[inline]
    fn publish(
        &self,
        index: u32,
        slot: &Slot,
        arming: Arming,
        callback: arena::Callback,
        queued: bool,
    ) -> Message {
        let Arming {
            shard,
            deadline,
            rounding,
            ..
        } = arming;
        let free = slot.load(Ordering::Acquire);
        debug_assert_eq!(free.arm(), state::FREE);
        let armed = free.with_arm(ARMED).with(HANDLE);
        // SAFETY: the slot is FREE and was just popped from a free list (or
        // is fresh): this thread owns it exclusively until the release store
        // below publishes it. Its wheel links are those of an unlinked slot
        // (the owner unlinks before it frees), and stay as they are. The
        // arming recorded in `linked` is what the owner links when it takes
        // the slot off its remote queue (`remote.rs`).
        slot.owned.with_mut(|owned| unsafe {
            // A free slot holds no callback (`Shard::recycle` took it):
            // written without dropping the old value.
            callback.move_into(&mut (*owned).callback);
            (*owned).deadline = deadline;
            (*owned).set_linked(armed.seq(), rounding);
            if queued {
                // No entry to follow (see `revive`).
                (*owned).prev = remote::NIL;
            }
        });
        // Shards are at most 4096 (`Builder::shards`).
        slot.shard.store(shard as u16, Ordering::Relaxed);
        let armed = if queued {
            armed.with(QUEUED).with(FRESH)
        } else {
            armed
        };
        slot.state.store(armed.0, Ordering::Release);
        Message::armed(index, armed, rounding, deadline)
    }

    /// A free slot for a timer on `shard`, for its owner: one the owner
    /// freed itself (no shared cache line touched), else one from a fresh
    /// group of slots on cache lines of their own.
    ///
    /// # Safety
    /// This thread holds the shard's claim (`owns`); no reference into its
    /// core is live while user code (the only caller) runs.
    unsafe fn alloc_owned_slot<'s>(&'s self, shard: &'s Shard) -> (u32, &'s Slot) {
        // SAFETY: forwarded.
        unsafe {
            match shard.take_local_slot() {
                Some(free) => free,
                None => {
                    let index = shard.alloc_line(&self.arena);
                    (index, self.slot(index))
                }
            }
        }
    }

    /// # Safety
    /// `index` is an allocated slot (see [`Arena::get_allocated`]).
    unsafe fn slot(&self, index: u32) -> &Slot {
        // SAFETY: forwarded.
        unsafe { self.arena.get_allocated(index) }
    }

    /// The slot of a live handle and its current word, or `None` when the id
    /// is stale (wrong generation, freed, or no handle holds it).
    fn live(&self, id: TimerId) -> Option<(&Slot, Word)> {
        if id.tag() != self.tag {
            return None; // Another service's id (CONTRACT 14).
        }
        let slot = self.arena.get(id.index())?;
        let word = slot.load(Ordering::Acquire);
        self.addressable(id, word).then_some((slot, word))
    }

    /// [`live`](Self::live) for the id of a [`Timer`] handle, which names a
    /// slot this service allocated (the handle was made for it and holds
    /// it): no tag check and no bounds or segment checks on the index (an
    /// owner's START + cancel: 654 -> 644 instructions, `examples/owner_ops.rs`
    /// under callgrind).
    #[inline]
    fn held(&self, id: TimerId) -> Option<(&Slot, Word)> {
        debug_assert_eq!(id.tag(), self.tag, "a handle of another service");
        // SAFETY: a handle's id was handed out by `arm`/`revive` of this
        // service for a slot `alloc` gave out, and segments live as long as
        // the service (which the handle keeps alive).
        let slot = unsafe { self.arena.get_allocated(id.index()) };
        let word = slot.load(Ordering::Acquire);
        self.addressable(id, word).then_some((slot, word))
    }

    /// May `id` act on a slot whose word is `word`? Yes if it is the slot's
    /// current incarnation and a handle holds it, or if this thread is
    /// running that very timer's callback (a timer whose handle was given up
    /// can still stop or restart itself; the running callback keeps the slot
    /// alive).
    #[inline]
    fn addressable(&self, id: TimerId, word: Word) -> bool {
        word.gen() == id.gen()
            && (word.is(HANDLE)
                || (word.is(RUNNING)
                    && RUNNING_CALLBACK.with(|running| running.get())
                        == (self.address(), id.to_raw())))
    }

    /// `true` while `id` names a live handle (for the C ABI, which tells a
    /// stale handle apart from an inactive timer).
    #[cfg(feature = "capi")]
    pub(crate) fn holds_handle(&self, id: TimerId) -> bool {
        self.live(id).is_some()
    }

    /// Whether this thread holds `shard`'s claim: it is the shard's owner (a
    /// callback, or an embedded owner between polls), or a helper inside the
    /// lent shard. `OWNED_SHARD` is set only while a `ShardGuard` for the
    /// shard lives on this thread (or `help` holds it), and the owner never
    /// holds a reference into its core or a slot's owned fields while user
    /// code (the only way to reach a START or a handle operation during a
    /// poll) runs. Such a thread applies its own START (`arm`) and handle
    /// operations (`transition_from`) to the wheel at once: no queue, no
    /// second lookup of the slot, and the common per-core case (a
    /// connection restarting its own idle timeout on the worker that owns
    /// its shard) moves it without a CAS (`Shard::restart_owned`).
    #[inline]
    fn owns(&self, shard: usize) -> bool {
        self.owned_shard() == Some(shard)
    }

    /// The shard of this service whose claim this thread holds, if any
    /// (see [`owns`](Self::owns)).
    #[inline]
    fn owned_shard(&self) -> Option<usize> {
        let (service, shard) = OWNED_SHARD.with(|owned| owned.get());
        (service == self.address()).then_some(shard)
    }

    /// Hands a message to a shard that this thread does not hold: applied
    /// directly if the shard is lent (`help`), else queued for its owner
    /// (`queue`).
    fn send_remote(&self, shard: usize, message: Message) {
        let target = &self.shards[shard];
        target.note_activity();
        if !self.help(shard, message) {
            self.queue(shard, message, false);
        }
    }

    /// Queues an arming for a shard's owner (waiting first if too much is
    /// queued already, CONTRACT 20), and wakes the owner if it sleeps past
    /// its deadline, or if too much has piled up. `started`: a START, whose
    /// slot `publish` left `QUEUED` and is pushed itself; else a RESTART,
    /// which travels in a proxy slot (`remote.rs`).
    fn queue(&self, shard: usize, message: Message, started: bool) {
        let target = &self.shards[shard];
        let owner = OWNED_SHARD.with(|owned| owned.get().0) == self.address();
        let limit = if owner {
            OWNER_PENDING_LIMIT
        } else {
            PENDING_LIMIT
        };
        if target.remote.len() as usize >= limit {
            self.wait_for_backlog(shard, limit);
        }
        let (index, slot) = if started {
            // SAFETY: the slot `publish` just filled for this START.
            (message.index, unsafe { self.slot(message.index) })
        } else {
            let index = self.arena.alloc();
            // SAFETY: just allocated: free and this thread's alone.
            let proxy = unsafe { self.slot(index) };
            // SAFETY: as above.
            unsafe { remote::write_proxy(proxy, message) };
            (index, proxy)
        };
        let pending = target.remote.push(index, slot) as usize;
        // An arming needs the owner by its deadline, and at most one
        // producer per sleep wins the wake (`Shard::claim_wake`). Past
        // `WAKE_AFTER_PENDING` entries the owner is needed now whatever they
        // say, which bounds what a queue holds while its owner sleeps; that
        // wake goes through the same claim, so a sleep already interrupted is
        // not interrupted again (`many_remote_starts_wake_a_sleeping_owner_once`).
        let needed_by = match message.arm {
            Some(arm) if pending < WAKE_AFTER_PENDING => arm.deadline,
            _ => 0,
        };
        if target.queued_for(needed_by) {
            self.wake(shard);
        }
    }

    /// Applies `message` directly if `shard` is lent (its owner sleeps, see
    /// `Shard::lend`), after taking in whatever waits in its remote queue.
    /// Returns whether it was applied; one that was not must be queued: the
    /// shard is held or not lent, the service is shutting down, or more is
    /// waiting than one batch (it then goes behind that).
    fn help(&self, shard: usize, message: Message) -> bool {
        let target = &self.shards[shard];
        if !target.try_help() {
            return false;
        }
        // Inside, this thread acts as the owner: operations that user code
        // makes meanwhile (a callback's captures dropped by `settle`) are
        // applied inline too. Leaving (the marker restored, the shard handed
        // back to its owner) is a guard's drop, so it happens on unwinding
        // too: a helper that left the shard held would wedge its owner.
        let helping = Helping::enter(self.address(), shard, target);
        // SAFETY (both blocks): this thread holds the lent shard (`try_help`),
        // and holds no reference into its core.
        let applied = !self.is_shut_down()
            && unsafe { !target.take_remote(self) && !target.has_backlog() }
            && target.remote.is_empty();
        if applied {
            unsafe {
                target.reconcile(self, message);
                target.refresh_counters(message.arm.map(|arm| arm.deadline));
            }
        }
        drop(helping);
        self.left_help(shard);
        if applied {
            if let Some(arm) = message.arm {
                if target.claim_wake(Some(arm.deadline)) {
                    self.wake(shard);
                }
            }
        }
        applied
    }

    /// Applies what waits in `shard`'s remote queue if the shard is lent
    /// (its owner sleeps), as its owner would; otherwise does nothing.
    ///
    /// A thread whose `try_help` finds another helper inside leaves what it
    /// queued to that helper: every helper, once it has left, looks at the
    /// queue again (`left_help`) and takes in what was pushed while it was
    /// inside. Without that look a release pushed then stayed queued for as
    /// long as the owner slept (shuttle,
    /// `sleeping_driver_threads_reclaim_stopped_timers`: one slot of 105 never
    /// freed). The push and the failed `try_help` on one side, leaving and
    /// the look on the other, are all SeqCst: one side sees the other.
    ///
    /// At most `HELP_PASSES` passes: other threads' STARTs keep a lent
    /// shard's queue from ever being empty for long, and a thread that
    /// released one timer must not be kept doing its owner's work for as
    /// long as they come. What a last pass leaves is what any stop leaves
    /// that is not due to wake the owner: within the reclaim bound
    /// (`RemoteQueue::reclaim_due`, CONTRACT 13).
    fn help_reclaim(&self, shard: usize) {
        /// Passes one call makes at most (each takes the whole queue in).
        const HELP_PASSES: usize = 4;
        let target = &self.shards[shard];
        for _ in 0..HELP_PASSES {
            if !target.try_help() {
                return;
            }
            let helping = Helping::enter(self.address(), shard, target);
            if !self.is_shut_down() {
                // SAFETY: this thread holds the lent shard (`try_help`), and
                // holds no reference into its core.
                unsafe {
                    target.take_remote(self);
                    target.refresh_counters(None);
                }
            }
            drop(helping);
            if self.is_shut_down() || target.remote.is_empty() {
                return;
            }
        }
    }

    /// After a helper left `shard` (`help`, `restart_lent`): takes in what
    /// other threads queued while it was inside, which they left to it
    /// (see [`help_reclaim`](Self::help_reclaim)).
    #[inline]
    fn left_help(&self, shard: usize) {
        if !self.shards[shard].remote.is_empty() {
            self.help_reclaim(shard);
        }
    }

    /// Backpressure (CONTRACT 20): `limit` messages (`PENDING_LIMIT`, or
    /// `OWNER_PENDING_LIMIT` for a producer that owns a shard) already wait for
    /// `shard`'s owner, so this producer gives the owner time to take them
    /// in before adding another: it spins, yields, then sleeps in 50 µs
    /// steps, for about a millisecond at most, and then goes ahead anyway.
    ///
    /// Slowed, never blocked: an owner that has stopped polling altogether
    /// must not block other threads (CONTRACT 7), so the wait is bounded;
    /// producers that outrun an owner run at about one operation per
    /// millisecond each until it catches up, which is what keeps the owner's
    /// backlog short enough for its timers to fire. Waits are counted
    /// (`Stats::held_back`).
    ///
    /// An owner (in a callback, or an embedded owner between polls) takes in
    /// its own remote queue while it waits, so two owners that each wait for the
    /// other both make progress.
    #[cold]
    fn wait_for_backlog(&self, shard: usize, limit: usize) {
        /// Backoff rounds: 64 spins, 64 yields, then 20 sleeps of 50 µs...
        const MAX_ROUNDS: u32 = 148;
        /// ... but no longer than this in all: on a loaded machine each short
        /// sleep can last a scheduler quantum, and the hold must stay about a
        /// millisecond whatever the load.
        const MAX_HOLD: Duration = Duration::from_millis(1);
        let began = std::time::Instant::now();
        let target = &self.shards[shard];
        target.counters.held_back.fetch_add(1, Ordering::Relaxed);
        let (service, own) = OWNED_SHARD.with(|owned| owned.get());
        // Make sure the owner is not asleep; after that, waking it again on
        // every turn would only take CPU from it.
        if target.queued_for(0) {
            self.wake(shard);
        }
        let mut spins = 0;
        while target.remote.len() as usize >= limit
            && spins < MAX_ROUNDS
            && began.elapsed() < MAX_HOLD
            && !self.is_shut_down()
        {
            if service == self.address() {
                // SAFETY: this thread holds the claim of shard `own`, and no
                // reference into its core is live while user code runs.
                unsafe { self.shards[own].take_remote(self) };
            }
            backoff(&mut spins);
        }
    }

    pub(crate) fn wake(&self, shard: usize) {
        self.drivers.wake(shard, &self.config);
    }

    /// The one shape of every handle-side operation (STOP, RESTART, RELEASE,
    /// DETACH): read the slot's word, let `decide` pick the new word, CAS it
    /// in, and on success tell the owner. A CAS that loses to another thread
    /// re-decides on the word it found, as long as `id` still addresses the
    /// slot; a stale id yields `stale` and changes nothing.
    fn transition<R>(&self, id: TimerId, stale: R, decide: impl FnMut(Word) -> Decision<R>) -> R {
        let Some((slot, word)) = self.live(id) else {
            return stale;
        };
        self.transition_from(id, slot, word, stale, decide)
    }

    /// [`transition`](Self::transition) from a slot and word that `live`
    /// has just given for `id`.
    #[inline]
    fn transition_from<R>(
        &self,
        id: TimerId,
        slot: &Slot,
        mut word: Word,
        stale: R,
        mut decide: impl FnMut(Word) -> Decision<R>,
    ) -> R {
        loop {
            let (new, notify, result) = match decide(word) {
                Decision::Keep(result) => return result,
                Decision::Swap {
                    new,
                    notify,
                    result,
                } => (new, notify, result),
            };
            // Read before the CAS: once it succeeds the slot may be freed and
            // reused at any moment (a release), but a successful CAS proves
            // this was still the incarnation whose shard we read.
            let shard = slot.shard.load(Ordering::Relaxed) as usize;
            // A STOP that disarms a timer of a shard this thread does not
            // own, or a release the owner must free: the same CAS queues the
            // slot for its owner (`remote.rs`), unless it is queued already.
            // (A release while the callback runs needs nothing: the owner
            // settles the slot when the run ends.)
            let owner = self.owns(shard);
            let stopped = !owner
                && notify == Some(None)
                && !new.is_armed()
                && (word.is_armed() || !word.is(RUNNING));
            let push = stopped && !word.is(QUEUED);
            let new = if push { new.with(QUEUED) } else { new };
            match slot.cas(word, new) {
                Ok(_) => {
                    if stopped {
                        // The CAS was the STOP; the push hands the slot to
                        // the owner, which reclaims it at its next poll.
                        let target = &self.shards[shard];
                        let wake = if push {
                            target.push_stop(id.index(), slot)
                        } else {
                            self.stopped_while_queued(shard, id.index(), new)
                        };
                        if wake {
                            self.wake(shard);
                        } else if !word.is_armed() {
                            // The release of a timer that is not armed (it
                            // fired, or was stopped before): nothing of it
                            // is left but memory, which a lent shard frees
                            // now rather than at whatever deadline its
                            // owner sleeps towards (CONTRACT 13).
                            self.help_reclaim(shard);
                        }
                        return result;
                    }
                    if let Some(arm) = notify {
                        let message = Message {
                            index: id.index(),
                            gen: id.gen(),
                            arm,
                        };
                        if owner {
                            // SAFETY: this thread holds the shard's claim
                            // (`owns`), and `slot` is the message's: no
                            // second lookup of it. An arming first lets in
                            // what others queued before it (`catch_up`).
                            unsafe {
                                let target = &self.shards[shard];
                                if message.arm.is_some() {
                                    target.catch_up(self);
                                }
                                target.reconcile_slot(self, slot, message);
                            }
                        } else if arm.is_none() {
                            // A DETACH of an armed timer (it stays linked
                            // and the owner frees it after it fires), or a
                            // release while the callback runs.
                        } else {
                            self.send_remote(shard, message);
                        }
                    }
                    return result;
                }
                Err(actual) if self.addressable(id, actual) => word = actual,
                Err(_) => return stale,
            }
        }
    }

    /// STOP: see [`Stop`] and the state table in `state.rs`.
    pub(crate) fn stop(&self, id: TimerId) -> Stop {
        if self.is_shut_down() {
            return Stop::Inactive;
        }
        self.transition(id, Stop::Inactive, |word| match word.arm() {
            // Tell the owner, so it unlinks the timer now rather than at its deadline.
            ARMED => Decision::Swap {
                new: word.with_arm(CANCELLED),
                notify: Some(None),
                result: Stop::Cancelled,
            },
            // Mark it halted so a periodic timer is not re-armed after this
            // run; once is enough (and keeps `seq` still: see `state.rs`).
            FIRED if word.is(RUNNING) && !word.is(HALTED) => Decision::Swap {
                new: word.with(HALTED),
                notify: None,
                result: Stop::Running,
            },
            FIRED if word.is(RUNNING) => Decision::Keep(Stop::Running),
            FIRED => Decision::Keep(Stop::Fired),
            _ => Decision::Keep(Stop::Inactive),
        })
    }

    /// STOP_SYNC: stop, then wait for a running callback to return.
    pub(crate) fn stop_sync(&self, id: TimerId) -> StopSync {
        let outcome = self.stop(id);
        let own = RUNNING_CALLBACK.with(|running| running.get()) == (self.address(), id.to_raw());
        if own {
            return StopSync::FromOwnCallback;
        }
        let mut spins = 0u32;
        while let Some(slot) = self.arena.get(id.index()) {
            let word = slot.load(Ordering::Acquire);
            if word.gen() != id.gen() || !word.is(RUNNING) {
                break;
            }
            backoff(&mut spins);
        }
        match outcome {
            Stop::Cancelled => StopSync::Cancelled,
            Stop::Fired | Stop::Running => StopSync::Fired,
            Stop::Inactive => StopSync::Inactive,
        }
    }

    /// RESTART: arm again with a new deadline, whatever the state.
    pub(crate) fn restart(&self, id: TimerId, delay: Duration) -> Result<Restart, TimerError> {
        self.restart_looked_up::<false>(id, RestartTo::After(delay))
    }

    /// [`restart`](Self::restart) from a [`Timer`] handle, whose slot
    /// needs no checked lookup (see `held`).
    #[inline]
    pub(crate) fn restart_held(&self, id: TimerId, delay: Duration) -> Result<Restart, TimerError> {
        self.restart_looked_up::<true>(id, RestartTo::After(delay))
    }

    /// RESTART to `nanos` on the service clock (a deadline fixed earlier:
    /// `future::Sleep::reset`), by the handle's holder.
    #[inline]
    pub(crate) fn restart_held_at_nanos(
        &self,
        id: TimerId,
        nanos: u64,
    ) -> Result<Restart, TimerError> {
        self.restart_looked_up::<true>(id, RestartTo::AtNanos(nanos))
    }

    #[inline(always)]
    fn restart_looked_up<const HELD: bool>(
        &self,
        id: TimerId,
        to: RestartTo,
    ) -> Result<Restart, TimerError> {
        let find = |id| if HELD { self.held(id) } else { self.live(id) };
        if self.is_shut_down() {
            return Err(TimerError::Shutdown);
        }
        // The deadline is computed before the slot is read: the slot's line
        // is often a cache miss (a random one of many idle timeouts), and
        // this arithmetic need not wait for it; what follows the miss is
        // then short enough for the processor to reach the caller's next
        // restart meanwhile (`owner_ops restart`,
        // `service_vs_tokio/restart_owner`). It is read on the caller's own
        // shard's view of the clock, which may not be the timer's: every
        // shard's reading is at least the clock at the moment of the call,
        // so the deadline is never early whichever shard the timer is on.
        let owned = self.owned_shard();
        let shard = owned.unwrap_or_else(|| self.spread_choice());
        let (deadline, rounding) = match to {
            RestartTo::After(delay) => self.deadline_after(shard, delay),
            RestartTo::AtNanos(nanos) => self.ticks_ceil_with_rounding(nanos),
        };
        if owned.is_none() {
            if let Some(outcome) = self.restart_lent(shard, id, deadline, rounding, find) {
                return outcome;
            }
        }
        let Some((slot, word)) = find(id) else {
            return Err(TimerError::StaleKey);
        };
        if let Some(shard) = owned {
            // SAFETY: this thread holds the shard's claim (`owned_shard`),
            // with no reference into its core while user code runs; `slot`
            // is `id`'s and of this shard (its word named `id` after the
            // shard field was published; the call re-checks the word after
            // taking in the remote queue).
            if usize::from(slot.shard.load(Ordering::Relaxed)) == shard
                && unsafe { self.shards[shard].restart_owned(self, slot, id, deadline, rounding) }
            {
                return Ok(Restart::Moved);
            }
        }
        self.restart_from(id, slot, word, deadline, rounding)
    }

    /// A RESTART from a thread that owns no shard while `shard` (the
    /// thread's own, where its STARTs go) is lent, its driver asleep:
    /// inside the shard this thread is its owner, and restarts a timer of
    /// that shard as one (`Shard::restart_owned`: no CAS on the word, and
    /// the slot's line, often a cache miss, followed by a short path). As
    /// `help`, only when nothing else waits for the owner (else the general
    /// path's `help` takes that in first). `None`, having changed nothing,
    /// when the shard is not lent, the timer is on another shard, or the
    /// general path must decide.
    #[inline]
    fn restart_lent<'s>(
        &'s self,
        shard: usize,
        id: TimerId,
        deadline: u64,
        rounding: u8,
        find: impl FnOnce(TimerId) -> Option<(&'s Slot, Word)>,
    ) -> Option<Result<Restart, TimerError>> {
        let target = &self.shards[shard];
        if !target.try_help() {
            return None;
        }
        // Left on unwinding too (`Helping`): taking the queue in may drop a
        // callback's captures, which may panic.
        let helping = Helping::enter(self.address(), shard, target);
        // SAFETY (all blocks): this thread holds the lent shard (`try_help`)
        // and no reference into its core.
        let ready =
            !self.is_shut_down() && target.remote.is_empty() && unsafe { !target.has_backlog() };
        let outcome = if !ready {
            None
        } else {
            match find(id) {
                None => Some(Err(TimerError::StaleKey)),
                Some((slot, _))
                    if usize::from(slot.shard.load(Ordering::Relaxed)) == shard
                        && unsafe { target.restart_owned(self, slot, id, deadline, rounding) } =>
                {
                    unsafe { target.refresh_counters(Some(deadline)) };
                    Some(Ok(Restart::Moved))
                }
                Some(_) => None,
            }
        };
        drop(helping);
        self.left_help(shard);
        if matches!(outcome, Some(Ok(_))) && target.claim_wake(Some(deadline)) {
            self.wake(shard);
        }
        outcome
    }

    /// RESTART's general path: one CAS arms `id`'s word again (a new
    /// arming `seq`), and the owner links it, now or when it takes the
    /// message in.
    fn restart_from(
        &self,
        id: TimerId,
        slot: &Slot,
        word: Word,
        deadline: u64,
        rounding: u8,
    ) -> Result<Restart, TimerError> {
        self.transition_from(id, slot, word, Err(TimerError::StaleKey), |word| {
            let new = word.with_arm(ARMED).next_seq();
            let outcome = if word.is_armed() {
                Restart::Moved
            } else {
                Restart::Rearmed
            };
            Decision::Swap {
                new,
                notify: Some(Some(Arm {
                    seq: new.seq(),
                    rounding,
                    deadline,
                })),
                result: Ok(outcome),
            }
        })
    }

    /// The deadline tick of `id`'s current arming, for the thread that
    /// owns its shard (see [`Timer::deadline_tick`](crate::Timer::deadline_tick)): `Ok(None)` when it is
    /// not armed, or armed by an operation still on its way to the wheel.
    /// A timer's deadline lives in its slot's owner-side fields, which only
    /// the thread holding the shard may read.
    pub(crate) fn deadline_tick(&self, id: TimerId) -> Result<Option<u64>, NoDeadline> {
        let (slot, _) = self.live(id).ok_or(NoDeadline::Stale)?;
        let shard = usize::from(slot.shard.load(Ordering::Relaxed));
        if !self.owns(shard) {
            return Err(NoDeadline::NotOwner);
        }
        if self.is_shut_down() {
            return Ok(None);
        }
        let target = &self.shards[shard];
        // SAFETY: this thread holds the shard's claim (`owns`), with no
        // reference into its core while user code runs. Taking in what
        // other threads queued first makes their STARTs and RESTARTs, made
        // before this call, visible in the wheel.
        unsafe { target.catch_up(self) };
        let (slot, word) = self.live(id).ok_or(NoDeadline::Stale)?;
        // SAFETY: as above; `slot` is `id`'s and of this shard (its word,
        // read after the claim, names `id`'s incarnation).
        Ok(unsafe { target.linked_deadline(slot, word) })
    }

    pub(crate) fn is_armed(&self, id: TimerId) -> bool {
        !self.is_shut_down() && self.live(id).is_some_and(|(_, word)| word.is_armed())
    }

    /// RELEASE (handle dropped): disarm, drop the handle bit, and let the
    /// owner free the slot once the callback is not running. For an id from
    /// the C ABI, checked as any id is (`live`).
    #[cfg(feature = "capi")]
    pub(crate) fn release(&self, id: TimerId) {
        self.cancel_from(id, self.live(id));
    }

    /// [`release`](Self::release) from a [`Timer`] handle (see `held`).
    #[inline]
    pub(crate) fn release_held(&self, id: TimerId) {
        self.cancel_held(id);
    }

    /// STOP and RELEASE in one transition ([`Timer::cancel`]): what `stop`
    /// would have returned, with the handle given up by the same CAS.
    pub(crate) fn cancel_held(&self, id: TimerId) -> Stop {
        self.cancel_from(id, self.held(id))
    }

    /// STOP and RELEASE of `id`, whose slot and word `live` or `held` found
    /// (`None`: stale).
    #[inline(always)]
    fn cancel_from(&self, id: TimerId, found: Option<(&Slot, Word)>) -> Stop {
        // The owner cancelling its own armed timer: freed by one CAS
        // (`Shard::cancel_owned`).
        if let Some((slot, word)) = found {
            let shard = usize::from(slot.shard.load(Ordering::Relaxed));
            if word.is_armed() && !word.is(RUNNING) {
                if self.owns(shard) {
                    // SAFETY: this thread holds the shard's claim (`owns`),
                    // with no reference into its core while user code runs;
                    // `slot` is `id`'s, of that shard (its word, read after
                    // the shard field was published, names `id`'s
                    // incarnation, and the CAS inside fails if that
                    // changed).
                    if !word.is(QUEUED)
                        && unsafe { self.shards[shard].cancel_owned(self, slot, id.index(), word) }
                    {
                        return Stop::Cancelled;
                    }
                } else {
                    // Cancelled from outside its shard: what `drop_handle`
                    // does for an armed word, without its generic decision
                    // and second lookup of the slot. The CAS that stops it
                    // queues the slot for its owner unless it is queued
                    // already (typically this thread's own START, not yet
                    // taken in: `owner_ops remote-start-cancel`; else a
                    // timer of another owner: `owner_ops cross-stop`).
                    let new = word
                        .without(HANDLE)
                        .with_arm(CANCELLED)
                        .next_seq()
                        .with(QUEUED);
                    if slot.cas(word, new).is_ok() {
                        let wake = if word.is(QUEUED) {
                            self.stopped_while_queued(shard, id.index(), new)
                        } else {
                            self.shards[shard].push_stop(id.index(), slot)
                        };
                        if wake {
                            self.wake(shard);
                        }
                        return Stop::Cancelled;
                    }
                }
            }
        }
        self.drop_handle(id, true)
    }

    /// After this thread's CAS stopped slot `index` of `shard`, which was
    /// queued already (by its START, or an earlier STOP, whose pusher judged
    /// the reclaim bound without this stop), leaving word `new`: notes the
    /// slot for reuse if it is this thread's own START that its owner has
    /// not taken in, now cancelled and released (`revive`), and tells
    /// whether the owner must be woken to reclaim (`Shard::stop_wake_due`).
    fn stopped_while_queued(&self, shard: usize, index: u32, new: Word) -> bool {
        if new.is(FRESH) && new.is_reclaimable_but_queued() {
            REVIVABLE.with(|r| r.set((self.address(), index, new.0)));
        }
        self.shards[shard].stop_wake_due()
    }

    /// DETACH: drop the handle bit but leave the timer armed.
    pub(crate) fn detach(&self, id: TimerId) {
        self.drop_handle(id, false);
    }

    /// Gives up the handle (and with `disarm`, the arming). Returns what a
    /// STOP at the same moment would have returned.
    fn drop_handle(&self, id: TimerId, disarm: bool) -> Stop {
        self.transition(id, Stop::Inactive, |word| {
            let result = match word.arm() {
                ARMED => Stop::Cancelled,
                FIRED if word.is(RUNNING) => Stop::Running,
                FIRED => Stop::Fired,
                _ => Stop::Inactive,
            };
            let mut new = word.without(HANDLE);
            if disarm {
                if new.is_armed() {
                    new = new.with_arm(CANCELLED);
                }
                new = new.next_seq();
            }
            Decision::Swap {
                new,
                notify: Some(None),
                result,
            }
        })
    }

    pub(crate) fn shutdown(inner: &Arc<Self>) {
        if inner.shut_down.swap(true, Ordering::AcqRel) {
            return;
        }
        // From now on the handles keep the service alive themselves: one
        // strong count while any is live (`handles.rs`).
        // SAFETY: `inner` is a live `Arc`.
        unsafe { Arc::increment_strong_count(Arc::as_ptr(inner)) };
        if inner.handles.fold() {
            // No handles: give the count straight back (`inner` still holds
            // one of its own).
            // SAFETY: taken just above.
            unsafe { Arc::decrement_strong_count(Arc::as_ptr(inner)) };
        }
        inner.drivers.stop_all(&inner.config, inner.shards.len());
        for (index, shard) in inner.shards.iter().enumerate() {
            // A shard still claimed by an embedded owner is swept by that
            // owner at its next poll or when it lets go of the shard.
            if shard.try_claim() {
                shard.sweep(inner, index);
                shard.unclaim();
            }
        }
    }

    pub(crate) fn stats(&self) -> Stats {
        Stats::collect(self)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Callbacks still stored in slots (armed when the service shut down,
        // or started while it was shutting down) are dropped with the arena;
        // none of them runs.
        self.drivers.join_remaining();
        tag::release(self.tag);
    }
}

/// A helper's stay inside a lent shard (see [`Inner::help`]): while it
/// lives this thread counts as the shard's owner; dropping it, also while
/// unwinding, restores the thread's own marker and leaves the shard.
struct Helping<'a> {
    target: &'a Shard,
    previous: (usize, usize),
}

impl<'a> Helping<'a> {
    #[inline]
    fn enter(service: usize, shard: usize, target: &'a Shard) -> Self {
        let previous = OWNED_SHARD.with(|owned| owned.replace((service, shard)));
        Helping { target, previous }
    }
}

impl Drop for Helping<'_> {
    #[inline]
    fn drop(&mut self) {
        OWNED_SHARD.with(|owned| owned.set(self.previous));
        self.target.end_help();
    }
}

/// What a handle-side operation does with the word it read (see
/// [`Inner::transition`]).
enum Decision<R> {
    /// Change nothing and return this.
    Keep(R),
    /// CAS the word to `new`; on success, if `notify` is `Some(arm)`, send the
    /// owner a message with that `arm` payload; return `result`.
    Swap {
        new: Word,
        notify: Option<Option<Arm>>,
        result: R,
    },
}

/// Spin, then yield, then sleep briefly: waiting for another thread's callback.
///
/// Not `crossbeam_utils::Backoff`: it never sleeps, and its phases are
/// fixed (seven rounds of spinning, then four yields before it reports
/// itself done), while a callback that runs long is best waited for
/// asleep, and `wait_for_backlog` bounds its hold by counting these rounds
/// (64 spins, 64 yields, then 50 µs sleeps).
fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        crate::sync::spin_hint();
    } else if *spins < 128 || cfg!(any(loom, shuttle)) {
        crate::sync::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(50));
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// One shard, 1 ms ticks, a manual clock, claimed by this thread.
    fn manual_shard() -> (TimerService, ShardGuard, ManualClock) {
        let clock = ManualClock::new();
        let service = TimerService::builder()
            .shards(1)
            .tick(Duration::from_millis(1))
            .driver(Driver::Embedded)
            .clock(Clock::Manual(clock.clone()))
            .build()
            .unwrap();
        let guard = service.claim_shard(0).unwrap();
        (service, guard, clock)
    }

    /// A thread that owns no shard remembers the shard it picked for the
    /// service it last used, keyed by the service's address. Another
    /// service made later at that address may have fewer shards: a
    /// remembered shard out of its range is picked again, never used
    /// (without the bound check `start` indexes past the shards and
    /// panics).
    #[test]
    fn a_remembered_spread_shard_out_of_range_is_picked_again() {
        let service = TimerService::builder()
            .shards(2)
            .driver(Driver::Embedded)
            .build()
            .unwrap();
        let inner = service.inner();
        // As if a service with eight shards had lived at this address and
        // this thread had picked its shard 7.
        SPREAD_SHARD.with(|spread| spread.set((inner.address(), 7)));
        let shard = inner.choose_shard();
        assert!(shard < 2, "picked shard {shard} of 2");
        assert_eq!(
            SPREAD_SHARD.with(|spread| spread.get()),
            (inner.address(), shard)
        );
        let timer = service.start(Duration::from_secs(60), |_| {}).unwrap();
        assert_eq!(timer.cancel(), Stop::Cancelled);
    }

    /// The slots keep 32 bits of the wheel's arming numbers, and an owner's
    /// restart to a later deadline leaves a timer in its bucket: same-tick
    /// order then rests on those numbers. Here they wrap past 2^32 and are
    /// renumbered in the middle of a run of starts and restarts (later,
    /// earlier, of fired timers): every timer fires once, on its last
    /// deadline, and the timers of a tick in the order of their last arming.
    /// Fails if the slots' numbers are compared without wrapping
    /// (`SlotNodes::SEQ_WRAPS` false).
    #[test]
    fn same_tick_order_survives_the_32_bit_wrap_of_arming_numbers() {
        let (service, mut guard, clock) = manual_shard();
        // The numbers wrap after 1,400 of the run's 1,700 armings (so the
        // last arming of about a fifth of the timers is from before the
        // wrap), and the linked timers are renumbered 100 armings later.
        // SAFETY: this thread holds shard 0's claim.
        unsafe { service.inner().shards[0].set_seq_for_test((1 << 32) - 1400, (1 << 32) + 100) };
        let log = std::sync::Arc::new(Mutex::new(Vec::new()));
        let mut rng = 0x2545_F491_4F6C_DD1Du64;
        let mut random = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        // Per timer: (deadline tick, arming number in call order).
        let mut model: Vec<(u64, u64)> = Vec::new();
        let mut timers = Vec::new();
        for label in 0..200u64 {
            // Deadlines on a 64-tick grid, above level 0, so that many
            // timers share a tick and restarts later stay in place.
            let delay = 64 * (2 + random(20));
            model.push((delay, label));
            let log = log.clone();
            timers.push(
                service
                    .start(Duration::from_millis(delay), move |_| {
                        log.lock().unwrap().push(label)
                    })
                    .unwrap(),
            );
        }
        for arming in 200..1700u64 {
            let which = random(200) as usize;
            let delay = 64 * (2 + random(20));
            timers[which].restart(Duration::from_millis(delay)).unwrap();
            model[which] = (delay, arming);
        }
        clock.advance(Duration::from_millis(64 * 30));
        guard.poll().unwrap();
        let mut expected: Vec<(u64, u64, u64)> = model
            .iter()
            .enumerate()
            .map(|(label, &(deadline, arming))| (deadline, arming, label as u64))
            .collect();
        expected.sort_unstable();
        let expected: Vec<u64> = expected.iter().map(|&(_, _, label)| label).collect();
        assert_eq!(*log.lock().unwrap(), expected);
    }

    /// STOPs of a running callback must not move the arming `seq` (the
    /// 24-bit counter must never lap the arming the owner linked; see
    /// `state.rs`): one sets `HALTED`, the others change nothing.
    #[test]
    fn stops_during_a_run_do_not_move_seq() {
        let (service, mut guard, clock) = manual_shard();
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        let (record, remote) = (seen.clone(), service.clone());
        let timer = service
            .start_periodic(Duration::from_millis(1), move |e| {
                // SAFETY: the running timer's slot is allocated.
                let slot = unsafe { remote.inner().slot(e.id().index()) };
                let before = slot.load(Ordering::Acquire);
                let outcomes: Vec<Stop> = (0..3).map(|_| remote.stop_id(e.id())).collect();
                let after = slot.load(Ordering::Acquire);
                record.lock().unwrap().push((
                    before.seq(),
                    after.seq(),
                    after.is(HALTED),
                    outcomes,
                ));
            })
            .unwrap();
        clock.advance(Duration::from_millis(1));
        assert_eq!(guard.poll(), Ok(1));
        let (before, after, halted, outcomes) = seen.lock().unwrap().pop().unwrap();
        assert_eq!(before, after, "stops of a running callback moved seq");
        assert!(halted);
        assert_eq!(outcomes, vec![Stop::Running; 3]);
        // Halted: not re-armed, and the flag is gone with the run.
        clock.advance(Duration::from_millis(5));
        assert_eq!(guard.poll(), Ok(0));
        // SAFETY: the handle keeps the slot allocated.
        let word = unsafe { service.inner().slot(timer.id().index()) }.load(Ordering::Acquire);
        assert!(!word.is(HALTED) && !word.is(RUNNING) && word.arm() == FIRED);
        assert_eq!(timer.stop(), Stop::Fired);
    }
}
