//! What users hold: timer ids, the RAII [`Timer`] handle, what to start
//! ([`TimerSpec`]) and what stop and restart report.

use std::fmt;
use std::time::{Duration, Instant};

use super::{Expiry, Inner};
use crate::sync::Arc;
use crate::TimerError;

/// A plain 64-bit name for one timer of one service:
/// `gen << 36 | service tag << 28 | slot index`.
///
/// Ids are what the C ABI hands out. Once the timer's handle is released the
/// id is stale for ever: operations on it return [`Stop::Inactive`] or
/// [`TimerError::StaleKey`]; they never reach another timer. The service tag
/// (see `tag.rs`) makes an id of one service stale on every other, and the
/// zero id is never valid.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerId(pub(crate) u64);

/// Bits of the slot index in an id (and so the most slots a service has).
pub(crate) const INDEX_BITS: u32 = 28;
/// Bits of the generation in an id; a slot's generation wraps from
/// `(1 << GEN_BITS) - 1` back to 1 (`state::next_gen`). Narrowed with
/// `--cfg tickwheel_narrow_gen` so that a test can wrap it in a few thousand
/// operations (`tests/generations.rs`).
#[cfg(not(tickwheel_narrow_gen))]
pub(crate) const GEN_BITS: u32 = 28;
/// See above.
#[cfg(tickwheel_narrow_gen)]
pub(crate) const GEN_BITS: u32 = 4;
const TAG_SHIFT: u32 = INDEX_BITS;
const GEN_SHIFT: u32 = INDEX_BITS + 8;

impl TimerId {
    pub(crate) fn new(index: u32, gen: u32, tag: u8) -> Self {
        debug_assert!(index < 1 << INDEX_BITS && gen < 1 << GEN_BITS);
        TimerId(((gen as u64) << GEN_SHIFT) | ((tag as u64) << TAG_SHIFT) | index as u64)
    }

    pub(crate) fn index(self) -> u32 {
        (self.0 & ((1 << INDEX_BITS) - 1)) as u32
    }

    pub(crate) fn gen(self) -> u32 {
        (self.0 >> GEN_SHIFT) as u32
    }

    /// The tag of the service that made this id.
    pub(crate) fn tag(self) -> u8 {
        (self.0 >> TAG_SHIFT) as u8
    }

    /// The raw value (for C, logs and maps).
    pub const fn to_raw(self) -> u64 {
        self.0
    }

    /// An id from [`to_raw`](Self::to_raw). Any value is accepted; one that
    /// names no live timer is stale.
    pub const fn from_raw(raw: u64) -> Self {
        TimerId(raw)
    }
}

impl fmt::Debug for TimerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TimerId({}v{})", self.index(), self.gen())
    }
}

/// What [`Timer::stop`] decided, by one atomic transition of the timer's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stop {
    /// This call disarmed the timer: its callback will not run for this arming.
    Cancelled,
    /// The timer already expired and its callback has finished.
    Fired,
    /// The timer expired and its callback is running now (on the shard owner).
    /// A periodic timer will not be re-armed after this run.
    Running,
    /// The timer was not armed: never started, already stopped, released, or
    /// the service was shut down.
    Inactive,
}

/// What [`Timer::stop_sync`] decided. When it returns, the timer is not armed
/// and its callback is not running on any other thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StopSync {
    /// This call disarmed the timer before it fired.
    Cancelled,
    /// The timer had fired; its callback (if it was running) has returned.
    Fired,
    /// The timer was not armed.
    Inactive,
    /// Called from inside this timer's own callback: the timer is disarmed
    /// (a periodic timer will not be re-armed) but the callback is, by
    /// definition, still running, so the call returned at once instead of
    /// deadlocking.
    FromOwnCallback,
}

/// What [`Timer::restart`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Restart {
    /// The timer was armed and now has the new deadline instead (it did not
    /// fire for the old one).
    Moved,
    /// The timer had fired or been stopped; it is armed again.
    Rearmed,
}

/// When a timer fires and how it repeats.
///
/// ```
/// use std::time::Duration;
/// use tickwheel::TimerSpec;
///
/// let idle = TimerSpec::after(Duration::from_secs(30));
/// let tick = TimerSpec::after(Duration::from_millis(10)).every(Duration::from_millis(10));
/// let lazy = TimerSpec::within(Duration::from_secs(1), Duration::from_secs(2));
/// assert!(idle != tick && tick != lazy);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerSpec {
    pub(crate) when: When,
    pub(crate) period: Option<Duration>,
    pub(crate) burst: bool,
    pub(crate) shard: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum When {
    After(Duration),
    At(Instant),
    /// Nanoseconds on the service clock (the futures' deadlines).
    AtNanos(u64),
    Within(Duration, Duration),
}

impl TimerSpec {
    fn new(when: When) -> Self {
        TimerSpec {
            when,
            period: None,
            burst: false,
            shard: None,
        }
    }

    /// Fires once `delay` has passed (rounded up to whole ticks; never early).
    pub fn after(delay: Duration) -> Self {
        Self::new(When::After(delay))
    }

    /// Fires at `instant` (or at the next tick if it has passed).
    pub fn at(instant: Instant) -> Self {
        Self::new(When::At(instant))
    }

    /// Fires at `nanos` on the service clock (`crate::future`'s grids).
    pub(crate) fn at_nanos(nanos: u64) -> Self {
        Self::new(When::AtNanos(nanos))
    }

    /// Fires at some tick between `earliest` and `latest` from now, chosen by
    /// the wheel to save work (fewest cascades, shared wakeups).
    pub fn within(earliest: Duration, latest: Duration) -> Self {
        Self::new(When::Within(earliest, latest))
    }

    /// Repeats every `period` after the first expiry, drift-free (each
    /// deadline is the previous deadline plus `period`). Periods are rounded
    /// up to whole ticks and must be at least one tick.
    pub fn every(mut self, period: Duration) -> Self {
        self.period = Some(period);
        self
    }

    /// For a periodic timer: when the owner was late, fire every missed
    /// period in a burst instead of once, counting the rest as overruns.
    pub fn burst(mut self, burst: bool) -> Self {
        self.burst = burst;
        self
    }

    /// Puts the timer on this shard instead of the caller's own or a spread one.
    pub fn on_shard(mut self, shard: usize) -> Self {
        self.shard = Some(shard);
        self
    }
}

/// The handle of a started timer. Dropping it stops the timer (if armed) and
/// frees it; [`forget`](Self::forget) lets a timer run without a handle.
///
/// `Send + Sync`: any thread may stop or restart it, without a lock and
/// without waiting for the shard owner.
///
/// `#[must_use]`: `service.start(delay, callback)?;` on its own would drop
/// the handle at once, and with it the timer, so the compiler warns:
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// let service = tickwheel::TimerService::new().unwrap();
/// service.start(std::time::Duration::from_secs(1), |_| {}).unwrap();
/// ```
#[must_use = "dropping a Timer stops its timer; keep it, or call `forget()` to let the timer run without a handle"]
pub struct Timer {
    /// The service. Kept alive by the count of live handles (`handles.rs`),
    /// not by a reference count of its own.
    inner: *const Inner,
    /// Never the zero id: a handle always names its timer until it goes.
    id: TimerId,
}

// SAFETY: a `Timer` is an id plus a counted reference to `Inner`, which is
// `Send + Sync`; every method goes through `&Inner`.
unsafe impl Send for Timer {}
// SAFETY: as above.
unsafe impl Sync for Timer {}

impl Timer {
    /// A handle for timer `id`, counted made on shard `count_on`'s counter
    /// (why a handle holds no `Arc`, and how it is counted: `handles.rs`).
    /// Any shard counts right; the calling thread's counting shard
    /// (`Inner::choose_shard`) keeps the counter's line on this core.
    #[inline]
    pub(crate) fn new(inner: &Arc<Inner>, id: TimerId, count_on: usize) -> Timer {
        Timer {
            // `Arc::as_ptr`, not `&**inner`: the pointer must carry the
            // provenance of the whole allocation, since the last handle may
            // give a strong count back through it (miri checks this).
            inner: count(Arc::as_ptr(inner), count_on),
            id,
        }
    }

    /// Counts this handle gone, after the timer has been released: the last
    /// thing a handle does (`Drop`, or `cancel` and `forget`, which do not
    /// run `Drop`).
    #[inline]
    fn uncount(&self) {
        // SAFETY: this handle was counted (`new`) and is not used after.
        unsafe { uncount(self.inner) };
    }

    #[inline]
    fn inner(&self) -> &Inner {
        // SAFETY: this handle is counted on its shard; before shutdown a
        // `TimerService` holds the service, and after it the shard holds a
        // strong count while any handle is counted (`new`).
        unsafe { &*self.inner }
    }

    /// The timer's id (for logs, maps, or [`TimerService::stop_id`](crate::TimerService::stop_id)).
    pub fn id(&self) -> TimerId {
        self.id
    }

    /// Disarms the timer. See [`Stop`] for what each outcome promises.
    #[inline]
    pub fn stop(&self) -> Stop {
        self.inner().stop(self.id)
    }

    /// Disarms the timer and gives up the handle, in one atomic transition:
    /// [`stop`](Self::stop) followed by dropping the handle, for half the
    /// work. Returns what `stop` would have.
    #[inline]
    pub fn cancel(self) -> Stop {
        let outcome = self.inner().cancel_held(self.id);
        // Released: only the count is left, without `Drop`'s release.
        std::mem::ManuallyDrop::new(self).uncount();
        outcome
    }

    /// Disarms the timer and waits until its callback is not running on any
    /// thread. Called from the timer's own callback it returns
    /// [`StopSync::FromOwnCallback`] at once.
    pub fn stop_sync(&self) -> StopSync {
        self.inner().stop_sync(self.id)
    }

    /// Moves the timer to fire `delay` from now (or re-arms it if it fired or
    /// was stopped). A periodic timer keeps its period.
    ///
    /// Same-tick order: a moved timer counts as newly armed, so it fires after
    /// every timer already armed for its new tick, whether it came from a
    /// later tick, an earlier one or that same tick (docs/CONTRACT.md item 5).
    /// "Already armed" includes the starts and restarts that other threads
    /// made before this call (ordered by a lock or a channel);
    /// `tests/service_order.rs::a_restarted_timer_fires_after_those_already_armed_for_its_tick`
    /// checks it from the owner, another thread and a callback.
    ///
    /// # Errors
    /// [`TimerError::Shutdown`] after shutdown; nothing changes then.
    #[inline]
    pub fn restart(&self, delay: Duration) -> Result<Restart, TimerError> {
        self.inner().restart_held(self.id, delay)
    }

    /// [`restart`](Self::restart) to `nanos` on the service clock (see
    /// `TimerService::deadline_nanos_after`).
    #[inline]
    pub(crate) fn restart_at_nanos(&self, nanos: u64) -> Result<Restart, TimerError> {
        self.inner().restart_held_at_nanos(self.id, nanos)
    }

    /// The tick this timer is due at (on the service clock, `tick * tick()`
    /// from [`TimerService::elapsed`]'s origin), asked on the thread that
    /// owns its shard: an embedded owner between polls, or any callback of
    /// that shard. `None` when it is not armed (it fired, was stopped, or is
    /// a periodic timer inside its own callback), and from any other
    /// thread: a timer's deadline is kept where only its owner may read it,
    /// so another thread has no safe view of it (keep your own copy there).
    /// Starts and restarts that other threads made before the call are
    /// taken in first, so their deadline is the one returned.
    ///
    /// [`TimerService::elapsed`]: crate::TimerService::elapsed
    pub fn deadline_tick(&self) -> Option<u64> {
        self.inner().deadline_tick(self.id).ok().flatten()
    }

    /// How long until this timer is due (zero if it is due or late), under
    /// the same conditions as [`deadline_tick`](Self::deadline_tick).
    pub fn due_in(&self) -> Option<Duration> {
        let inner = self.inner();
        let deadline = self.deadline_tick()?;
        let due = deadline.saturating_mul(inner.tick_nanos);
        Some(Duration::from_nanos(
            due.saturating_sub(inner.clock.raw_nanos()),
        ))
    }

    /// `true` while the timer is armed.
    pub fn is_armed(&self) -> bool {
        self.inner().is_armed(self.id)
    }

    /// Gives up the handle without stopping the timer: a one-shot timer still
    /// fires once and is then freed; a periodic one runs until the service
    /// shuts down. The id is stale from now on.
    pub fn forget(self) {
        self.inner().detach(self.id);
        // Detached: only the count is left, without `Drop`'s release.
        std::mem::ManuallyDrop::new(self).uncount();
    }
}

impl Drop for Timer {
    #[inline]
    fn drop(&mut self) {
        self.inner().release_held(self.id);
        self.uncount();
    }
}

/// A [`Timer`] handle that also keeps its timer's slot, for a
/// [`Sleep`](crate::future::Sleep): dropping it (a STOP and RELEASE) and asking
/// whether it fired skip the id's lookup in the arena, two dependent
/// loads (`owner_ops sleep-poll-drop`: a sleep is made, polled and
/// dropped in about 400 instructions, and those loads were a fifth of the
/// cancel's samples under `perf`). Only the futures keep one: a `Timer`
/// stays two words, as the memory per armed timer counts its handle
/// (`benches/memory.rs`).
pub(crate) struct LocatedTimer {
    timer: std::mem::ManuallyDrop<Timer>,
    /// The slot of `timer`'s id: slots live as long as the service's
    /// memory, which the handle keeps.
    slot: std::ptr::NonNull<super::arena::Slot>,
}

// SAFETY: a `Timer` plus the address of its slot, which only `&Inner`'s
// methods read (they are `Sync`).
unsafe impl Send for LocatedTimer {}
// SAFETY: as above.
unsafe impl Sync for LocatedTimer {}

impl LocatedTimer {
    #[inline]
    fn new(timer: Timer, slot: &super::arena::Slot) -> Self {
        LocatedTimer {
            timer: std::mem::ManuallyDrop::new(timer),
            slot: std::ptr::NonNull::from(slot),
        }
    }

    #[inline]
    fn slot(&self) -> &super::arena::Slot {
        // SAFETY: the handle keeps the service's memory, and with it the
        // slot (see the field).
        unsafe { self.slot.as_ref() }
    }

    /// The handle, for what needs no shortcut.
    #[inline]
    pub(crate) fn timer(&self) -> &Timer {
        &self.timer
    }

    /// `true` once the timer's last arming has fired (its callback may
    /// still be running): until a RESTART re-arms it (a sleep's poll,
    /// `future/sleep.rs`).
    #[inline]
    pub(crate) fn has_fired(&self) -> bool {
        self.timer.inner().has_fired_at(self.slot(), self.timer.id)
    }
}

impl Drop for LocatedTimer {
    /// What dropping the `Timer` does, with the slot known.
    #[inline]
    fn drop(&mut self) {
        self.timer
            .inner()
            .cancel_held_at(self.slot(), self.timer.id);
        // Released: only the count is left, without `Timer`'s own `Drop`.
        self.timer.uncount();
    }
}

/// Counts one more handle of `inner` (a pointer from `Arc::as_ptr` of a
/// live `Arc`) on shard `count_on`'s counter, and returns the pointer the
/// handle keeps. Why a handle holds no `Arc`, and how it is counted:
/// `handles.rs`. Any shard counts right; the calling thread's counting
/// shard (`Inner::choose_shard`) keeps the counter's line on this core.
#[inline]
fn count(inner: *const Inner, count_on: usize) -> *const Inner {
    // SAFETY: the caller's `Arc` is live, so `inner` is valid.
    let service = unsafe { &*inner };
    let first = if service.owns(count_on) {
        // SAFETY: this thread holds the shard's claim (`owns`), with no
        // reference into its core while user code runs.
        unsafe { service.shards[count_on].count_made(service, count_on) }
    } else {
        service.handles.made(count_on)
    };
    if first {
        // SAFETY: as above; its strong count is at least 1.
        unsafe { Arc::increment_strong_count(inner) };
    }
    inner
}

/// Counts a handle of `inner` gone, on this thread's counting shard,
/// whichever counted it made (`handles.rs`), in the shard's core if this
/// thread holds it (`shard/credits.rs`).
///
/// # Safety
/// `inner` was returned by [`count`], and the handle does not use it after.
#[inline]
unsafe fn uncount(inner: *const Inner) {
    // SAFETY: a counted handle keeps `Inner` alive (`Timer::inner`).
    let service = unsafe { &*inner };
    let last = match service.owned_shard() {
        // SAFETY: this thread holds the shard's claim (`owned_shard`), with
        // no reference into its core while user code runs.
        Some(shard) => unsafe { service.shards[shard].count_dropped(service, shard) },
        None => service.handles.dropped(service.spread_choice()),
    };
    if last {
        // SAFETY: this was the last handle after shutdown, so it gives
        // back the strong count the handles held (`handles.rs`).
        // `inner` is not used after this.
        unsafe { Arc::decrement_strong_count(inner) };
    }
}

/// A counted reference to a service that is not a timer, for the futures
/// (`crate::future`), which must be able to arm a timer on their first
/// poll. Counted as a [`Timer`] handle is, on the calling thread's shard:
/// a clone of `TimerService` moves two `Arc` counts that every thread
/// shares, and made and dropped per sleep on two workers that cost a
/// `Timeout` around a ready future 94 ns against 12 on one
/// (`cargo bench --bench service_vs_tokio -- targets sleep_timeout_ready`).
/// Like a `Timer`, it keeps the service's memory, not the service running:
/// once every `TimerService` clone is gone the service shuts down, and a
/// future arming after that gets [`TimerError::Shutdown`].
pub(crate) struct ServiceRef {
    inner: *const Inner,
}

// SAFETY: a counted reference to `Inner`, which is `Send + Sync`; every
// method goes through `&Inner`.
unsafe impl Send for ServiceRef {}
// SAFETY: as above.
unsafe impl Sync for ServiceRef {}

impl ServiceRef {
    #[inline]
    pub(crate) fn new(inner: &Arc<Inner>) -> Self {
        ServiceRef {
            inner: count(Arc::as_ptr(inner), inner.choose_shard()),
        }
    }

    #[inline]
    fn inner(&self) -> &Inner {
        // SAFETY: counted (`new`), as a `Timer` handle is.
        unsafe { &*self.inner }
    }

    /// See `Inner::deadline_nanos_after`.
    #[inline]
    pub(crate) fn deadline_nanos_after(&self, delay: Duration) -> u64 {
        self.inner().deadline_nanos_after(delay)
    }

    /// `instant` in nanoseconds since the service clock's origin.
    pub(crate) fn nanos_at(&self, instant: std::time::Instant) -> u64 {
        self.inner().clock.nanos_at(instant)
    }

    /// The instant `nanos` after the service clock's origin.
    pub(crate) fn instant_at(&self, nanos: u64) -> std::time::Instant {
        self.inner().clock.instant_at(nanos)
    }

    /// The service clock's reading (never ahead of the real clock).
    pub(crate) fn elapsed_nanos(&self) -> u64 {
        self.inner().clock.raw_nanos()
    }

    /// START of a one-shot timer due at `nanos` on the service clock, whose
    /// handle takes over this reference's count instead of counting one of
    /// its own.
    ///
    /// # Safety
    /// On `Ok`, this reference's count is the handle's: the caller must not
    /// drop this `ServiceRef` (`ManuallyDrop`), and may use it only while
    /// the handle lives. On `Err` the count is still this reference's.
    #[inline]
    pub(crate) unsafe fn start_at_nanos_taking_count<F>(
        &self,
        nanos: u64,
        callback: F,
    ) -> Result<LocatedTimer, TimerError>
    where
        F: FnMut(&mut Expiry<'_>) + Send + 'static,
    {
        let (id, _, slot) = self.inner().start_at_nanos(nanos, callback)?;
        let timer = Timer {
            inner: self.inner,
            id,
        };
        Ok(LocatedTimer::new(timer, slot))
    }

    /// START of a one-shot timer due at `nanos` on the service clock, with
    /// a handle counted as any other (a sleep replacing its timer).
    pub(crate) fn start_at_nanos<F>(
        &self,
        nanos: u64,
        callback: F,
    ) -> Result<LocatedTimer, TimerError>
    where
        F: FnMut(&mut Expiry<'_>) + Send + 'static,
    {
        let (id, shard, slot) = self.inner().start_at_nanos(nanos, callback)?;
        let timer = Timer {
            inner: count(self.inner, shard),
            id,
        };
        Ok(LocatedTimer::new(timer, slot))
    }

    /// A timer from `spec`, as `TimerService::schedule`.
    pub(crate) fn schedule<F>(&self, spec: TimerSpec, callback: F) -> Result<Timer, TimerError>
    where
        F: FnMut(&mut Expiry<'_>) + Send + 'static,
    {
        let id = self.inner().start_on(spec, callback)?;
        Ok(Timer {
            inner: count(self.inner, self.inner().choose_shard()),
            id,
        })
    }
}

impl Drop for ServiceRef {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: counted in `new`; not used after.
        unsafe { uncount(self.inner) };
    }
}

impl fmt::Debug for ServiceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceRef").finish_non_exhaustive()
    }
}

impl fmt::Debug for Timer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timer")
            .field("id", &self.id)
            .field("armed", &self.is_armed())
            .finish()
    }
}
