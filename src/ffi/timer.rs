//! Timers of a service, named by `uint64_t` handles: start, stop, stop and
//! wait, restart, free.
//!
//! A handle is the timer's [`TimerId`] with its handle bit held by the C
//! side. The timer's slot is never freed while the handle is held (so stop
//! and restart on it are meaningful even after it fired), and once
//! `tw_timer_free` gives the handle up its id is stale for ever: every later
//! use returns `TW_STALE_HANDLE`. Slots live as long as the service, so
//! checking a stale id reads live memory of the service, never freed memory.

use std::ffi::c_void;
use std::time::Duration;

use super::{arg, boundary, out, out_opt, put, put_opt, tw_result, tw_service, CPtr};
use crate::{Expiry, Restart, Stop, StopSync, TimerId, TimerSpec};

/// Flag for `tw_timer_spec.flags`: for a periodic timer whose owner was late,
/// fire every missed period back to back instead of once (the others are
/// counted in `tw_expiry.overruns` either way when not bursting).
pub const TW_TIMER_BURST: u32 = 1;
/// Flag for `tw_timer_spec.flags`: put the timer on shard `tw_timer_spec.shard`
/// instead of the calling thread's own shard (or a shard fixed per calling
/// thread when it owns none).
pub const TW_TIMER_ON_SHARD: u32 = 2;

const KNOWN_TIMER_FLAGS: u32 = TW_TIMER_BURST | TW_TIMER_ON_SHARD;

/// What a timer callback is told about the expiry. Valid only during the call.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct tw_expiry {
    /// The handle of the timer that fired (also for a timer whose handle was
    /// given up with `tw_timer_forget`; then it is only good for comparison).
    pub timer: u64,
    /// The shard it fired on: the calling thread owns it.
    pub shard: usize,
    /// The tick the timer was due at.
    pub deadline_tick: u64,
    /// The tick the owner's current poll processes up to (`>= deadline_tick`):
    /// how far the clock had moved when the poll began, or when it last
    /// re-read it (a poll that keeps taking in other threads' work re-reads
    /// the clock after each batch).
    pub poll_tick: u64,
    /// How late the callback started, in nanoseconds on the service's
    /// clock: from the deadline asked for (not the tick it was rounded up
    /// to; to 1/256 of a tick) to the callback's start, including callbacks
    /// that ran before it in the same poll.
    pub lateness_ns: u64,
    /// Periodic timers: periods skipped (not fired) since the previous
    /// expiry because the owner was late.
    pub overruns: u64,
}

/// A timer callback. Runs on the thread that owns the timer's shard (a
/// driver thread, or the thread polling an embedded shard), never inside
/// `tw_timer_start` and never concurrently with itself.
///
/// It may start, stop, restart and free any timer of the service, its own
/// included (`tw_timer_stop_sync` on its own timer returns
/// `TW_STOP_SYNC_FROM_OWN_CALLBACK` instead of waiting). It must not call
/// `tw_service_free` or poll its own shard (`TW_REENTRANT`), and it must
/// not unwind: no C++ exception or `longjmp` may leave it.
#[allow(non_camel_case_types)]
pub type tw_callback = Option<unsafe extern "C" fn(ctx: *mut c_void, expiry: *const tw_expiry)>;

/// Frees a timer's `ctx` once the service has let go of the callback. Runs
/// on whichever thread drops the callback: the shard owner, the thread in
/// `tw_service_free` or `tw_service_shutdown`, or the caller of a failing
/// `tw_timer_schedule`. It may stop or free other timers of the service
/// (not from a `tw_service_free` on a claimed shard's later sweep, when the
/// service is gone), and must not unwind.
#[allow(non_camel_case_types)]
pub type tw_ctx_free_fn = Option<unsafe extern "C" fn(ctx: *mut c_void)>;

/// What `tw_timer_stop` decided, by one atomic transition of the timer's state.
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum tw_stop {
    /// This call disarmed the timer: its callback will not run for this arming.
    TW_STOP_CANCELLED = 0,
    /// The timer had already expired and its callback has returned.
    TW_STOP_FIRED = 1,
    /// The timer expired and its callback is running now on the shard owner
    /// (a periodic timer will not be re-armed after this run).
    TW_STOP_RUNNING = 2,
    /// The timer was not armed (already stopped, or the service shut down).
    TW_STOP_INACTIVE = 3,
}

/// What `tw_timer_stop_sync` decided. When it returns, the timer is not armed
/// and its callback is not running on any other thread.
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum tw_stop_sync {
    /// This call disarmed the timer before it fired.
    TW_STOP_SYNC_CANCELLED = 0,
    /// The timer had fired; its callback (if it was running) has returned.
    TW_STOP_SYNC_FIRED = 1,
    /// The timer was not armed.
    TW_STOP_SYNC_INACTIVE = 2,
    /// Called from the timer's own callback: the timer is disarmed, and the
    /// call returned at once instead of waiting for itself.
    TW_STOP_SYNC_FROM_OWN_CALLBACK = 3,
}

/// What `tw_timer_restart` did.
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum tw_restart {
    /// The timer was armed and now has the new deadline instead.
    TW_RESTART_MOVED = 0,
    /// The timer had fired or been stopped; it is armed again.
    TW_RESTART_REARMED = 1,
}

/// Everything about when a timer fires, for `tw_timer_schedule`.
/// All-zero means "once, at the next tick, on the caller's shard".
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct tw_timer_spec {
    /// Nanoseconds from now to the first expiry (rounded up to whole ticks;
    /// never early). Any value is accepted: far deadlines saturate.
    pub delay_ns: u64,
    /// 0 for an exact deadline. Otherwise the timer may fire at any tick from
    /// `delay_ns` to `latest_ns` from now, as the wheel chooses (to save
    /// work); `latest_ns < delay_ns` is `TW_INVALID_RANGE`.
    pub latest_ns: u64,
    /// 0 for a one-shot timer; otherwise the timer repeats every `period_ns`
    /// (rounded up to whole ticks) after its first expiry, drift-free.
    pub period_ns: u64,
    /// Bitwise OR of `TW_TIMER_BURST` and `TW_TIMER_ON_SHARD`; unknown bits
    /// are `TW_INVALID_ARGUMENT`.
    pub flags: u32,
    /// With `TW_TIMER_ON_SHARD`: the shard (`TW_SHARD_OUT_OF_RANGE` if not
    /// below the shard count). Ignored otherwise.
    pub shard: usize,
}

/// The C callback, its context and the context's destructor, owned by the
/// service as the timer's callback. Dropping it frees the context.
struct CCallback {
    call: tw_callback,
    ctx: CPtr,
    free: tw_ctx_free_fn,
}

impl CCallback {
    /// A method, so that a closure calling it captures the whole value (and
    /// with it the destructor), not just the fields it reads.
    fn fire(&mut self, expiry: &mut Expiry<'_>) {
        fire(self.call, self.ctx, expiry)
    }
}

/// Calls a C callback for `expiry`.
fn fire(call: tw_callback, ctx: CPtr, expiry: &mut Expiry<'_>) {
    let info = tw_expiry {
        timer: expiry.id().to_raw(),
        shard: expiry.shard(),
        deadline_tick: expiry.deadline_tick(),
        poll_tick: expiry.deadline_tick() + expiry.lateness_ticks(),
        lateness_ns: u64::try_from(expiry.lateness().as_nanos()).unwrap_or(u64::MAX),
        overruns: expiry.overruns(),
    };
    if let Some(call) = call {
        // SAFETY: the C caller gave a valid function and a context that
        // stays valid until its `ctx_free` runs (after this); `info`
        // lives across the call. The header forbids unwinding.
        unsafe { call(ctx.0, &info) }
    }
}

impl Drop for CCallback {
    fn drop(&mut self) {
        if let Some(free) = self.free.take() {
            // SAFETY: the C caller's destructor for its own context, called
            // exactly once (this value is dropped once and never cloned).
            unsafe { free(self.ctx.0) }
        }
    }
}

fn start(
    service: *const tw_service,
    spec: Result<TimerSpec, tw_result>,
    callback: CCallback,
    timer_out: *mut u64,
) -> tw_result {
    boundary(move || {
        // Checked before anything happens; any early return drops
        // `callback`, which calls `ctx_free` as documented.
        let timer_out = out(timer_out)?;
        // SAFETY: the caller passes NULL or a live service.
        let service = unsafe { arg(service) }?;
        if callback.call.is_none() {
            return Err(tw_result::TW_NULL_POINTER);
        }
        let spec = spec?;
        let inner = service.service.inner();
        let id = if callback.free.is_none() {
            // Function and context only: 16 bytes, kept inside the timer's
            // slot (no allocation per START; `callback.rs`).
            let (call, ctx) = (callback.call, callback.ctx);
            inner.start_raw(spec, move |expiry: &mut crate::Expiry<'_>| {
                fire(call, ctx, expiry)
            })?
        } else {
            // With the context's destructor: 24 bytes, boxed.
            let mut callback = callback;
            inner.start_raw(spec, move |expiry: &mut crate::Expiry<'_>| {
                callback.fire(expiry)
            })?
        };
        // SAFETY: checked by `out`.
        unsafe { put(timer_out, id.to_raw()) };
        Ok(())
    })
}

fn callback(call: tw_callback, ctx: *mut c_void, free: tw_ctx_free_fn) -> CCallback {
    CCallback {
        call,
        ctx: CPtr(ctx),
        free,
    }
}

/// Starts a one-shot timer: `callback(ctx, expiry)` runs once, `delay_ns`
/// nanoseconds from now (rounded up to whole ticks, never early; 0 means the
/// next tick, never inside this call; huge delays saturate), and writes its
/// handle to `*timer_out`.
///
/// The handle must eventually be given to `tw_timer_free` (also after the
/// timer fired), or `tw_timer_forget`, or the service freed. `ctx` is not
/// freed by tickwheel; use `tw_timer_schedule` with a `ctx_free` for that.
/// `ctx` must be usable from the shard owner's thread.
///
/// Returns `TW_NULL_POINTER` for a NULL service, callback or `timer_out`;
/// `TW_SHUTDOWN` after shutdown.
///
/// Thread safety: may be called from any thread, including from callbacks.
/// The timer goes to the calling thread's own shard if it owns one, else to
/// a shard fixed per calling thread.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
/// `ctx` stays valid as long as the callback may run.
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_timer_start(
    service: *const tw_service,
    delay_ns: u64,
    callback: tw_callback,
    ctx: *mut c_void,
    timer_out: *mut u64,
) -> tw_result {
    let spec = TimerSpec::after(Duration::from_nanos(delay_ns));
    start(
        service,
        Ok(spec),
        self::callback(callback, ctx, None),
        timer_out,
    )
}

/// Starts a periodic timer: first `period_ns` from now, then every
/// `period_ns` (rounded up to whole ticks), drift-free; missed periods are
/// counted in `tw_expiry.overruns` rather than fired in a burst. Otherwise as
/// `tw_timer_start`. Returns `TW_INVALID_PERIOD` for a zero period.
///
/// Thread safety: as `tw_timer_start`.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
/// `ctx` stays valid as long as the callback may run.
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_timer_start_periodic(
    service: *const tw_service,
    period_ns: u64,
    callback: tw_callback,
    ctx: *mut c_void,
    timer_out: *mut u64,
) -> tw_result {
    let period = Duration::from_nanos(period_ns);
    let spec = TimerSpec::after(period).every(period);
    start(
        service,
        Ok(spec),
        self::callback(callback, ctx, None),
        timer_out,
    )
}

/// Starts a one-shot timer that fires at some tick from `earliest_ns` to
/// `latest_ns` from now, chosen by the wheel to save work (fewest cascades,
/// shared wakeups). Otherwise as `tw_timer_start`. Returns
/// `TW_INVALID_RANGE` when `earliest_ns > latest_ns`.
///
/// Thread safety: as `tw_timer_start`.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
/// `ctx` stays valid as long as the callback may run.
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_timer_start_within(
    service: *const tw_service,
    earliest_ns: u64,
    latest_ns: u64,
    callback: tw_callback,
    ctx: *mut c_void,
    timer_out: *mut u64,
) -> tw_result {
    let spec = if earliest_ns > latest_ns {
        Err(tw_result::TW_INVALID_RANGE)
    } else {
        Ok(TimerSpec::within(
            Duration::from_nanos(earliest_ns),
            Duration::from_nanos(latest_ns),
        ))
    };
    start(
        service,
        spec,
        self::callback(callback, ctx, None),
        timer_out,
    )
}

fn spec_from(spec: &tw_timer_spec) -> Result<TimerSpec, tw_result> {
    if spec.flags & !KNOWN_TIMER_FLAGS != 0 {
        return Err(tw_result::TW_INVALID_ARGUMENT);
    }
    let delay = Duration::from_nanos(spec.delay_ns);
    let mut timer = match spec.latest_ns {
        0 => TimerSpec::after(delay),
        latest if latest < spec.delay_ns => return Err(tw_result::TW_INVALID_RANGE),
        latest => TimerSpec::within(delay, Duration::from_nanos(latest)),
    };
    if spec.period_ns != 0 {
        timer = timer
            .every(Duration::from_nanos(spec.period_ns))
            .burst(spec.flags & TW_TIMER_BURST != 0);
    }
    if spec.flags & TW_TIMER_ON_SHARD != 0 {
        timer = timer.on_shard(spec.shard);
    }
    Ok(timer)
}

/// Starts a timer described by `*spec` (delay or range, period, burst,
/// shard) and writes its handle to `*timer_out`.
///
/// `ctx_free` (may be NULL) takes ownership of `ctx`: it is called exactly
/// once, when the service lets go of the callback: once the handle was
/// freed (`tw_timer_free`) and the callback is not running, after a
/// forgotten one-shot timer fired, at shutdown, or, **if this call fails,
/// before it returns** (whatever the error, as SQLite's destructor
/// arguments do). So the caller never frees `ctx` itself.
///
/// Returns `TW_NULL_POINTER`, `TW_INVALID_ARGUMENT` (unknown flags),
/// `TW_INVALID_RANGE`, `TW_SHARD_OUT_OF_RANGE`, `TW_SHUTDOWN`.
///
/// Thread safety: as `tw_timer_start`.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
/// With a `ctx_free`, `ctx` belongs to it from this call on, also when the
/// call fails.
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_timer_schedule(
    service: *const tw_service,
    spec: *const tw_timer_spec,
    callback: tw_callback,
    ctx: *mut c_void,
    ctx_free: tw_ctx_free_fn,
    timer_out: *mut u64,
) -> tw_result {
    // Built first, so that every return (even a caught panic) frees `ctx`.
    let owned = self::callback(callback, ctx, ctx_free);
    // SAFETY: the caller passes NULL or a valid spec.
    let spec = unsafe { arg(spec) }.and_then(spec_from);
    start(service, spec, owned, timer_out)
}

/// Looks up a live handle: `TW_STALE_HANDLE` for a freed or unknown one.
fn live(service: &tw_service, timer: u64) -> Result<TimerId, tw_result> {
    let id = TimerId::from_raw(timer);
    if service.service.inner().holds_handle(id) {
        Ok(id)
    } else {
        Err(tw_result::TW_STALE_HANDLE)
    }
}

/// Disarms a timer and writes what happened to `*outcome_out` (may be NULL):
/// `TW_STOP_CANCELLED` (its callback will not run for this arming),
/// `TW_STOP_FIRED`, `TW_STOP_RUNNING`, or `TW_STOP_INACTIVE` (already
/// stopped: a second stop reports this). Never waits.
///
/// Returns `TW_STALE_HANDLE` for a handle already freed (or never valid),
/// without touching any timer. After `tw_service_shutdown`, returns `TW_OK`
/// with `TW_STOP_INACTIVE`.
///
/// Thread safety: may be called from any thread, including callbacks, at any
/// time, without locks and without waiting for the shard owner. Two racing
/// stops never both report `TW_STOP_CANCELLED`.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_timer_stop(
    service: *const tw_service,
    timer: u64,
    outcome_out: *mut tw_stop,
) -> tw_result {
    boundary(|| {
        let outcome_out = out_opt(outcome_out)?;
        // SAFETY: the caller passes NULL or a live service.
        let service = unsafe { arg(service) }?;
        let outcome = if service.service.is_shut_down() {
            tw_stop::TW_STOP_INACTIVE
        } else {
            match service.service.inner().stop(live(service, timer)?) {
                Stop::Cancelled => tw_stop::TW_STOP_CANCELLED,
                Stop::Fired => tw_stop::TW_STOP_FIRED,
                Stop::Running => tw_stop::TW_STOP_RUNNING,
                Stop::Inactive => tw_stop::TW_STOP_INACTIVE,
            }
        };
        // SAFETY: checked by `out_opt`.
        unsafe { put_opt(outcome_out, outcome) };
        Ok(())
    })
}

/// Disarms a timer and waits until its callback is not running on any
/// thread; writes the outcome to `*outcome_out` (may be NULL). From the
/// timer's own callback it returns at once with
/// `TW_STOP_SYNC_FROM_OWN_CALLBACK`. After it returns (other outcomes), the
/// callback will not run again until the timer is restarted, so its `ctx`
/// may be torn down.
///
/// Returns `TW_STALE_HANDLE` as `tw_timer_stop`.
///
/// Thread safety: may be called from any thread. It waits (spinning, then
/// sleeping) only for a callback that is running right now. Do not call it
/// from a callback for a timer whose callback may itself be waiting on the
/// caller's timer (two callbacks waiting on each other deadlock).
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_timer_stop_sync(
    service: *const tw_service,
    timer: u64,
    outcome_out: *mut tw_stop_sync,
) -> tw_result {
    boundary(|| {
        let outcome_out = out_opt(outcome_out)?;
        // SAFETY: the caller passes NULL or a live service.
        let service = unsafe { arg(service) }?;
        let outcome = if service.service.is_shut_down() {
            tw_stop_sync::TW_STOP_SYNC_INACTIVE
        } else {
            match service.service.inner().stop_sync(live(service, timer)?) {
                StopSync::Cancelled => tw_stop_sync::TW_STOP_SYNC_CANCELLED,
                StopSync::Fired => tw_stop_sync::TW_STOP_SYNC_FIRED,
                StopSync::Inactive => tw_stop_sync::TW_STOP_SYNC_INACTIVE,
                StopSync::FromOwnCallback => tw_stop_sync::TW_STOP_SYNC_FROM_OWN_CALLBACK,
            }
        };
        // SAFETY: checked by `out_opt`.
        unsafe { put_opt(outcome_out, outcome) };
        Ok(())
    })
}

/// Moves the timer to fire `delay_ns` from now (`TW_RESTART_MOVED`), or
/// re-arms it if it fired or was stopped (`TW_RESTART_REARMED`); writes the
/// outcome to `*outcome_out` (may be NULL). A periodic timer keeps its
/// period. Moving a deadline later (an idle timeout) is the cheapest case.
/// One arming fires at most once, even when a restart races the expiry.
///
/// Same-tick order: a moved timer counts as newly armed, so it fires after
/// every timer already armed for its new tick, whether it came from a
/// later tick, an earlier one or that same tick (docs/CONTRACT.md item 5).
/// "Already armed" includes the starts and restarts that other threads
/// made before this call (ordered by a lock or a channel).
///
/// Returns `TW_STALE_HANDLE` for a freed handle, `TW_SHUTDOWN` after
/// shutdown; nothing changes then.
///
/// Thread safety: may be called from any thread, including callbacks (its
/// own included), without locks.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_timer_restart(
    service: *const tw_service,
    timer: u64,
    delay_ns: u64,
    outcome_out: *mut tw_restart,
) -> tw_result {
    boundary(|| {
        let outcome_out = out_opt(outcome_out)?;
        // SAFETY: the caller passes NULL or a live service.
        let service = unsafe { arg(service) }?;
        if service.service.is_shut_down() {
            return Err(tw_result::TW_SHUTDOWN);
        }
        let id = live(service, timer)?;
        let outcome = match service
            .service
            .inner()
            .restart(id, Duration::from_nanos(delay_ns))?
        {
            Restart::Moved => tw_restart::TW_RESTART_MOVED,
            Restart::Rearmed => tw_restart::TW_RESTART_REARMED,
        };
        // SAFETY: checked by `out_opt`.
        unsafe { put_opt(outcome_out, outcome) };
        Ok(())
    })
}

/// Writes whether the timer is armed now to `*armed_out` (`false` after
/// shutdown). Returns `TW_STALE_HANDLE` for a freed handle.
///
/// Thread safety: may be called from any thread (the answer may be out of
/// date by the time it is read).
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_timer_is_armed(
    service: *const tw_service,
    timer: u64,
    armed_out: *mut bool,
) -> tw_result {
    boundary(|| {
        let armed_out = out(armed_out)?;
        // SAFETY: the caller passes NULL or a live service.
        let service = unsafe { arg(service) }?;
        let armed = if service.service.is_shut_down() {
            false
        } else {
            service.service.inner().is_armed(live(service, timer)?)
        };
        // SAFETY: checked by `out`.
        unsafe { put(armed_out, armed) };
        Ok(())
    })
}

/// Writes the timer's deadline to `*ns_out`, on the service clock
/// (`tw_service_now_ns`): its deadline tick times `tw_service_tick_ns`.
/// `UINT64_MAX` when it is not armed (it fired, was stopped, or is a
/// periodic timer inside its own callback). Starts and restarts other
/// threads made before the call are taken in first.
///
/// Only the thread that owns the timer's shard may ask: a timer's deadline
/// is kept where only its owner may read it, so any other thread gets
/// `TW_WRONG_THREAD` (and should keep its own copy of the deadline). With
/// driver threads that means the timer's callbacks only. Returns
/// `TW_STALE_HANDLE` for a freed handle.
///
/// Thread safety: the thread that claimed the timer's shard (or one of
/// that shard's callbacks).
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_timer_deadline_ns(
    service: *const tw_service,
    timer: u64,
    ns_out: *mut u64,
) -> tw_result {
    boundary(|| {
        let ns_out = out(ns_out)?;
        // SAFETY: the caller passes NULL or a live service.
        let service = unsafe { arg(service) }?;
        let ns = deadline_ns(service, timer)?.unwrap_or(u64::MAX);
        // SAFETY: checked by `out`.
        unsafe { put(ns_out, ns) };
        Ok(())
    })
}

/// As `tw_timer_deadline_ns`, as nanoseconds from now: 0 when the timer is
/// due (or late), `UINT64_MAX` when it is not armed.
///
/// Thread safety: as `tw_timer_deadline_ns`.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_timer_due_in_ns(
    service: *const tw_service,
    timer: u64,
    ns_out: *mut u64,
) -> tw_result {
    boundary(|| {
        let ns_out = out(ns_out)?;
        // SAFETY: the caller passes NULL or a live service.
        let service = unsafe { arg(service) }?;
        let ns = match deadline_ns(service, timer)? {
            None => u64::MAX,
            Some(deadline) => {
                let now = u64::try_from(service.service.elapsed().as_nanos()).unwrap_or(u64::MAX);
                deadline.saturating_sub(now)
            }
        };
        // SAFETY: checked by `out`.
        unsafe { put(ns_out, ns) };
        Ok(())
    })
}

/// The deadline of `timer` in service-clock nanoseconds, for its owner.
fn deadline_ns(service: &tw_service, timer: u64) -> Result<Option<u64>, tw_result> {
    let id = live(service, timer)?;
    let inner = service.service.inner();
    match inner.deadline_tick(id) {
        Ok(tick) => Ok(tick.map(|tick| tick.saturating_mul(inner.tick_nanos))),
        Err(crate::service::NoDeadline::Stale) => Err(tw_result::TW_STALE_HANDLE),
        Err(crate::service::NoDeadline::NotOwner) => Err(tw_result::TW_WRONG_THREAD),
    }
}

/// Gives the handle up: disarms the timer if it is armed, and lets the
/// service free it (and call its `ctx_free`) once its callback is not
/// running. The handle is stale from now on; freeing it again returns
/// `TW_STALE_HANDLE` and touches nothing.
///
/// Thread safety: may be called from any thread, including the timer's own
/// callback (the callback finishes normally; its `ctx` is freed after it
/// returns).
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_timer_free(service: *const tw_service, timer: u64) -> tw_result {
    boundary(|| {
        // SAFETY: the caller passes NULL or a live service.
        let service = unsafe { arg(service) }?;
        let id = live(service, timer)?;
        service.service.inner().release(id);
        Ok(())
    })
}

/// Gives the handle up without stopping the timer: a one-shot timer still
/// fires once and is then freed (with its `ctx_free`); a periodic one runs
/// until the service shuts down. The handle is stale from now on.
///
/// Thread safety: as `tw_timer_free`.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_timer_forget(service: *const tw_service, timer: u64) -> tw_result {
    boundary(|| {
        // SAFETY: the caller passes NULL or a live service.
        let service = unsafe { arg(service) }?;
        let id = live(service, timer)?;
        service.service.inner().detach(id);
        Ok(())
    })
}
