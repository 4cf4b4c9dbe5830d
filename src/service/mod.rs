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
//!                                                own START: pending, linked when the
//!                                                  wheel is next needed (`shard.rs`)
//!                                                own STOP: applied at once
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
//! # Where each part lives
//!
//! | file | what |
//! |---|---|
//! | `start.rs` | START from the owner and from other threads |
//! | `stop.rs` | STOP, RELEASE, DETACH: the handle side's CAS on the word |
//! | `restart.rs` | RESTART |
//! | `handoff.rs` | other threads' way to an owner: the queue's backpressure, help in a lent shard, wakes |
//! | `state.rs` | the state word and its transitions |
//! | `arena.rs` | the slots and how an index finds one |
//! | `remote.rs` | a shard's remote queue |
//! | `shard.rs`, `shard/` | the owner's side: its claim and sleep, take in, link, fire, settle, free |
//! | `timer.rs`, `handles.rs` | the handle and how handles keep the service alive |
//! | `clock.rs`, `tsc.rs` | the service clock and the deadline clock |
//! | `driver.rs` | who runs a shard: a claimed `ShardGuard` or a driver thread |
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
mod handoff;
mod links;
mod remote;
mod restart;
mod shard;
mod start;
pub(crate) mod state;
mod stats;
mod stop;
mod tag;
mod timer;
mod tsc;

use std::fmt;
use std::time::Duration;

pub use builder::Builder;
pub use clock::{Clock, ManualClock};
pub use config::{Driver, DriverPriority, PanicReport, PanicSite};
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
use timer::When;
pub(crate) use timer::{LocatedTimer, ServiceRef};

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
    /// core, 500 µs ticks, one driver thread per shard (see
    /// [`Builder::tick`]).
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
        let (id, _) = self.inner.arm(arming, callback);
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
    #[inline]
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

    /// How the driver threads are scheduled
    /// ([`Builder::driver_priority`]; [`DriverPriority::Normal`] for an
    /// embedded service).
    pub fn driver_priority(&self) -> DriverPriority {
        self.inner.config.priority
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
    ///
    /// Always inlined: out of line, its call and register saves were 28 of
    /// the 568 instructions of an owner's START + cancel (`owner_ops
    /// start-cancel` under callgrind, `TICKWHEEL_TSC=0`).
    #[inline(always)]
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
        self.held_at(slot, id)
    }

    /// [`held`](Self::held) for a handle that kept its slot
    /// ([`LocatedTimer`]): no lookup at all.
    #[inline]
    fn held_at<'s>(&self, slot: &'s Slot, id: TimerId) -> Option<(&'s Slot, Word)> {
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

    /// `true` when the held timer `id`'s word (in `slot`, which the handle
    /// kept) says its last arming fired.
    #[inline]
    pub(crate) fn has_fired_at(&self, slot: &Slot, id: TimerId) -> bool {
        self.held_at(slot, id)
            .is_some_and(|(_, word)| word.arm() == FIRED)
    }

    pub(crate) fn is_armed(&self, id: TimerId) -> bool {
        !self.is_shut_down() && self.live(id).is_some_and(|(_, word)| word.is_armed())
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
