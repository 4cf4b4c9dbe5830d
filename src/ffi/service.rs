//! `tw_service`: creating, configuring and freeing a timer service.

use std::ffi::c_void;
use std::time::Duration;

use super::{arg, boundary, boundary_void, out, put, tw_result, CPtr};
use crate::{Builder, Clock, Driver, DriverPriority, ManualClock, TimerService};

/// Flag for `tw_service_config.flags`: no driver threads; the application
/// claims each shard with `tw_shard_claim` and polls it from its own loop.
pub const TW_SERVICE_EMBEDDED: u32 = 1;
/// Flag for `tw_service_config.flags`: pin driver thread `n` to CPU
/// `n % cores` (Linux; ignored elsewhere). Not with `TW_SERVICE_EMBEDDED`.
pub const TW_SERVICE_PIN_THREADS: u32 = 2;
/// Flag for `tw_service_config.flags`: time only moves when
/// `tw_service_advance_clock` says so (for tests and simulations).
pub const TW_SERVICE_MANUAL_CLOCK: u32 = 4;
/// Flag for `tw_service_config.flags`: driver threads keep their shards
/// while they sleep instead of lending them (Rust:
/// `Builder::lend_while_idle(false)`). Lent, other threads apply their
/// restarts (and releases of timers that are not armed) themselves, which
/// is cheaper for them; not lent, the
/// drivers are awake more, which fires timers sooner on a machine with more
/// busy threads than cores. Not with `TW_SERVICE_EMBEDDED`.
pub const TW_SERVICE_NO_LEND: u32 = 8;
/// Flag for `tw_service_config.flags`: the driver threads run at real-time
/// priority (Linux `SCHED_FIFO` 1, the lowest real-time priority, still
/// ahead of every normal thread; Rust: `DriverPriority::RealTime(1)`), so
/// that their timers fire on time while every core is busy. Callbacks run
/// at that priority too: keep them short. Not permitted (no `CAP_SYS_NICE`,
/// `RLIMIT_RTPRIO` 0, or not Linux): `tw_service_new` returns
/// `TW_PRIORITY_DENIED`. Not with `TW_SERVICE_EMBEDDED`.
pub const TW_SERVICE_REALTIME_DRIVERS: u32 = 16;

const KNOWN_FLAGS: u32 = TW_SERVICE_EMBEDDED
    | TW_SERVICE_PIN_THREADS
    | TW_SERVICE_MANUAL_CLOCK
    | TW_SERVICE_NO_LEND
    | TW_SERVICE_REALTIME_DRIVERS;

/// Called with a shard index when that shard's owner must wake up early: a
/// timer was started (or restarted) that is due before the deadline the
/// owner last asked for with `tw_shard_next_deadline_ns` or
/// `tw_shard_next_timeout_ms`. Typically writes to an eventfd or pipe.
///
/// It may be called from any thread (inside `tw_timer_start`,
/// `tw_timer_restart`, `tw_timer_stop`, `tw_timer_free`, `tw_service_free`,
/// ...), must not block, must not call back into tickwheel, and must not
/// unwind.
#[allow(non_camel_case_types)]
pub type tw_wake_fn = Option<unsafe extern "C" fn(ctx: *mut c_void, shard: usize)>;

/// How to build a service. All-zero (`tw_service_config config = {0};`)
/// means the defaults: one shard per available CPU, one driver thread per
/// shard with 500 us ticks (1 ms with `TW_SERVICE_EMBEDDED`), the
/// monotonic clock. Passing NULL for the whole config
/// means the same.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct tw_service_config {
    /// Number of shards, 1..=4096; 0 for one per available CPU.
    pub shards: usize,
    /// Tick length in nanoseconds, 10 000 (10 us) ..= 3 600 000 000 000
    /// (1 h); 0 for the default: 500 us with driver threads, 1 ms with
    /// `TW_SERVICE_EMBEDDED` (whose owner usually waits in whole
    /// milliseconds, `tw_shard_next_timeout_ms`). Delays round up to whole
    /// ticks.
    pub tick_ns: u64,
    /// Bitwise OR of `TW_SERVICE_EMBEDDED`, `TW_SERVICE_PIN_THREADS`,
    /// `TW_SERVICE_MANUAL_CLOCK`, `TW_SERVICE_NO_LEND`,
    /// `TW_SERVICE_REALTIME_DRIVERS`. Unknown bits are refused
    /// (`TW_INVALID_ARGUMENT`).
    pub flags: u32,
    /// Embedded services only (else `TW_INVALID_ARGUMENT`): how to wake a
    /// shard's owner. May be NULL if owners never sleep longer than
    /// `tw_shard_next_timeout_ms` says, and nothing is started from other
    /// threads.
    pub wake: tw_wake_fn,
    /// Passed to `wake` as its `ctx`; must stay valid until
    /// `tw_service_free` returns, and be usable from any thread.
    pub wake_ctx: *mut c_void,
}

/// A timer service: shards of hierarchical timing wheels, each owned by one
/// thread, with start, stop and restart from any thread without locks.
/// Create with `tw_service_new`, free with `tw_service_free`.
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct tw_service {
    pub(crate) service: TimerService,
    pub(crate) clock: Option<ManualClock>,
}

/// Creates a timer service and writes it to `*service_out`.
///
/// `config` may be NULL for the defaults; see `tw_service_config`. With
/// driver threads (the default) the threads are running when this returns.
///
/// Returns `TW_NULL_POINTER` if `service_out` is NULL, `TW_INVALID_ARGUMENT`
/// for unknown flags or a `wake` callback without `TW_SERVICE_EMBEDDED`,
/// `TW_INVALID_CONFIG` for out-of-range shards or tick (or if threads cannot
/// be spawned), `TW_PRIORITY_DENIED` when `TW_SERVICE_REALTIME_DRIVERS` is
/// not permitted.
///
/// Thread safety: may be called from any thread.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
/// `config->wake_ctx` stays valid as `tw_service_config` says.
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_service_new(
    config: *const tw_service_config,
    service_out: *mut *mut tw_service,
) -> tw_result {
    boundary(|| {
        let service_out = out(service_out)?;
        let config = if config.is_null() {
            None
        } else {
            // SAFETY: non-null; the caller passes a valid config.
            Some(*unsafe { arg(config) }?)
        };
        let (shards, tick_ns, flags, wake, wake_ctx) = match config {
            Some(c) => (c.shards, c.tick_ns, c.flags, c.wake, c.wake_ctx),
            None => (0, 0, 0, None, std::ptr::null_mut()),
        };
        if flags & !KNOWN_FLAGS != 0 {
            return Err(tw_result::TW_INVALID_ARGUMENT);
        }
        let embedded = flags & TW_SERVICE_EMBEDDED != 0;
        let pin = flags & TW_SERVICE_PIN_THREADS != 0;
        let no_lend = flags & TW_SERVICE_NO_LEND != 0;
        let realtime = flags & TW_SERVICE_REALTIME_DRIVERS != 0;
        if (embedded && (pin || no_lend || realtime)) || (!embedded && wake.is_some()) {
            return Err(tw_result::TW_INVALID_ARGUMENT);
        }
        let mut builder = Builder::new()
            .driver(if embedded {
                Driver::Embedded
            } else {
                Driver::Threads { pin }
            })
            .lend_while_idle(!no_lend)
            .driver_priority(if realtime {
                DriverPriority::RealTime(1)
            } else {
                DriverPriority::Normal
            });
        if tick_ns != 0 {
            builder = builder.tick(Duration::from_nanos(tick_ns));
        }
        if shards != 0 {
            builder = builder.shards(shards);
        }
        let clock = (flags & TW_SERVICE_MANUAL_CLOCK != 0).then(ManualClock::new);
        if let Some(clock) = &clock {
            builder = builder.clock(Clock::Manual(clock.clone()));
        }
        if let Some(wake) = wake {
            let ctx = CPtr(wake_ctx);
            builder = builder.waker(move |shard| {
                let ctx = ctx;
                // SAFETY: the caller gave a valid function and a context that
                // stays valid until `tw_service_free` returns; the header says
                // it may be called from any thread and must not unwind.
                unsafe { wake(ctx.0, shard) }
            });
        }
        let service = builder.build()?;
        let boxed = Box::new(tw_service { service, clock });
        // SAFETY: checked by `out`.
        unsafe { put(service_out, Box::into_raw(boxed)) };
        Ok(())
    })
}

/// Shuts the service down and frees it. `NULL` does nothing.
///
/// Every armed timer is dropped without running: its `ctx_free` (if it was
/// started with one) is called before this returns, except for timers of a
/// shard that is still claimed (`tw_shard_claim`): those are dropped by that
/// shard's owner at its next `tw_shard_poll` or at `tw_shard_release`, which
/// the owner must still call. Waits for driver threads to finish the callback
/// they are running. All timer handles of the service are invalid afterwards
/// (the service pointer is gone).
///
/// Thread safety: call it once, when no other thread is using the service
/// (starting, stopping, ...) or can still do so, and not from inside one of
/// the service's own callbacks.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
/// `service` is not used after this returns.
#[no_mangle]
pub unsafe extern "C" fn tw_service_free(service: *mut tw_service) {
    boundary_void(|| {
        if service.is_null() {
            return;
        }
        // SAFETY: non-null, and came from `tw_service_new` (caller's contract).
        // Shutdown runs through a shared reference first, so `ctx_free`
        // functions it calls may still use `service` (stop or free other
        // timers) while it is intact.
        unsafe { &*service }.service.shutdown();
        // SAFETY: as above; nothing else uses it now (caller's contract).
        drop(unsafe { Box::from_raw(service) });
    })
}

/// Shuts the service down without freeing it: drivers stop, every armed
/// timer is dropped without running (its `ctx_free` called), later starts
/// return `TW_SHUTDOWN` and stops on old handles report `TW_STOP_INACTIVE`.
/// Idempotent. `tw_service_free` must still be called.
///
/// Thread safety: may be called from any thread, at any time (also from a
/// callback; then that callback's own shard is swept once it returns).
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_service_shutdown(service: *const tw_service) -> tw_result {
    boundary(|| {
        // SAFETY: the caller passes NULL or a live service.
        unsafe { arg(service) }?.service.shutdown();
        Ok(())
    })
}

/// Writes the number of shards to `*count_out`.
///
/// Thread safety: may be called from any thread.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_service_shard_count(
    service: *const tw_service,
    count_out: *mut usize,
) -> tw_result {
    boundary(|| {
        let count_out = out(count_out)?;
        // SAFETY: the caller passes NULL or a live service.
        let service = unsafe { arg(service) }?;
        // SAFETY: checked by `out`.
        unsafe { put(count_out, service.service.shard_count()) };
        Ok(())
    })
}

/// Writes the tick length in nanoseconds to `*tick_ns_out`.
///
/// Thread safety: may be called from any thread.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_service_tick_ns(
    service: *const tw_service,
    tick_ns_out: *mut u64,
) -> tw_result {
    boundary(|| {
        let tick_ns_out = out(tick_ns_out)?;
        // SAFETY: the caller passes NULL or a live service.
        let service = unsafe { arg(service) }?;
        let tick = u64::try_from(service.service.tick().as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: checked by `out`.
        unsafe { put(tick_ns_out, tick) };
        Ok(())
    })
}

/// Writes the service clock's current reading to `*ns_out`: nanoseconds
/// since its origin (the service's creation; zero for a manual clock, which
/// reads the total of its `tw_service_advance_clock` calls). Deadlines are
/// measured on it: a timer started now with delay `d` is due at this reading
/// plus `d`, rounded up to a tick, and `tw_expiry.deadline_tick` times
/// `tw_service_tick_ns` is on the same scale. A loop that caches its own
/// time converts between its clock and the service's with it.
///
/// Thread safety: may be called from any thread.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_service_now_ns(
    service: *const tw_service,
    ns_out: *mut u64,
) -> tw_result {
    boundary(|| {
        let ns_out = out(ns_out)?;
        // SAFETY: the caller passes NULL or a live service.
        let service = unsafe { arg(service) }?;
        let now = u64::try_from(service.service.elapsed().as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: checked by `out`.
        unsafe { put(ns_out, now) };
        Ok(())
    })
}

/// `ms` milliseconds in nanoseconds, saturating at `UINT64_MAX` (a delay
/// that large is stored as the farthest deadline, CONTRACT item 4), for the
/// `_ns` arguments of the timer functions: `ms * 1000000` wraps for `ms`
/// above about 1.8e13, which a loop passing on a caller's "infinite"
/// millisecond timeout can reach.
///
/// Thread safety: may be called from any thread.
#[no_mangle]
pub extern "C" fn tw_ms_to_ns(ms: u64) -> u64 {
    ms.saturating_mul(1_000_000)
}

/// Moves a manual clock (`TW_SERVICE_MANUAL_CLOCK`) forward by `ns`
/// nanoseconds (saturating). Timers then due fire at the owners' next poll;
/// driver threads notice within about 1 ms.
///
/// Returns `TW_NOT_MANUAL_CLOCK` for a service on the monotonic clock.
///
/// Thread safety: may be called from any thread.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_service_advance_clock(
    service: *const tw_service,
    ns: u64,
) -> tw_result {
    boundary(|| {
        // SAFETY: the caller passes NULL or a live service.
        let service = unsafe { arg(service) }?;
        let clock = service
            .clock
            .as_ref()
            .ok_or(tw_result::TW_NOT_MANUAL_CLOCK)?;
        clock.advance(Duration::from_nanos(ns));
        Ok(())
    })
}
