//! `tw_shard`: one shard of an embedded service, driven from a C event loop.
//!
//! A shard belongs to the thread that claimed it. The Rust guard is not
//! `Send`; here every call checks the calling thread instead (so a misuse is
//! a `TW_WRONG_THREAD` result, not a data race), and a `busy` flag refuses
//! calls made from inside the shard's own callbacks (`TW_REENTRANT`), so no
//! two Rust borrows of the guard ever overlap.

use std::cell::{Cell, UnsafeCell};
use std::ffi::c_int;
use std::thread::ThreadId;

use super::{arg, boundary, out, out_opt, put, put_opt, tw_expiry, tw_result, tw_service};
use crate::ShardGuard;

/// Ownership of one shard of an embedded service by the thread that claimed
/// it (`tw_shard_claim`). Give it back with `tw_shard_release`.
#[allow(non_camel_case_types)]
pub struct tw_shard {
    guard: UnsafeCell<ShardGuard>,
    thread: ThreadId,
    busy: Cell<bool>,
}

impl std::fmt::Debug for tw_shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("tw_shard")
            .field("thread", &self.thread)
            .field("busy", &self.busy.get())
            .finish_non_exhaustive()
    }
}

impl tw_shard {
    /// Runs `f` on the guard, after checking the thread and reentrancy.
    fn with<R>(&self, f: impl FnOnce(&mut ShardGuard) -> R) -> Result<R, tw_result> {
        if std::thread::current().id() != self.thread {
            return Err(tw_result::TW_WRONG_THREAD);
        }
        if self.busy.replace(true) {
            return Err(tw_result::TW_REENTRANT);
        }
        // Cleared even if `f` panics, on the way out to the boundary.
        struct Clear<'a>(&'a Cell<bool>);
        impl Drop for Clear<'_> {
            fn drop(&mut self) {
                self.0.set(false);
            }
        }
        let _clear = Clear(&self.busy);
        // SAFETY: only the claiming thread gets here (checked above, and
        // `busy` is a non-atomic cell read only by that thread), and `busy`
        // guarantees no other borrow of the guard is live: a callback that
        // re-enters is turned away above.
        Ok(f(unsafe { &mut *self.guard.get() }))
    }
}

/// Claims shard `index` of an embedded service (`TW_SERVICE_EMBEDDED`) for
/// the calling thread and writes the claim to `*shard_out`. The thread must
/// then call `tw_shard_poll` from its loop, sleeping at most as long as
/// `tw_shard_next_timeout_ms` says. Timers it starts without naming a shard
/// go to this shard.
///
/// Returns `TW_SHARD_OUT_OF_RANGE`, `TW_SHARD_CLAIMED` (another thread holds
/// it, or the service has driver threads), `TW_SHUTDOWN`.
///
/// Thread safety: may be called from any thread; the claim belongs to that
/// thread. One thread may hold several shards, but timers it starts without
/// naming a shard go to the last one it claimed.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_shard_claim(
    service: *const tw_service,
    index: usize,
    shard_out: *mut *mut tw_shard,
) -> tw_result {
    boundary(|| {
        let shard_out = out(shard_out)?;
        // SAFETY: the caller passes NULL or a live service.
        let service = unsafe { arg(service) }?;
        let guard = service.service.claim_shard(index)?;
        let shard = Box::new(tw_shard {
            guard: UnsafeCell::new(guard),
            thread: std::thread::current().id(),
            busy: Cell::new(false),
        });
        // SAFETY: checked by `out`.
        unsafe { put(shard_out, Box::into_raw(shard)) };
        Ok(())
    })
}

/// Gives the shard back (its timers stay armed; another thread may claim
/// it) and frees the claim. `NULL` does nothing and returns `TW_OK`. After
/// the service was freed, this also drops the shard's remaining callbacks
/// (their `ctx_free` runs here).
///
/// Returns `TW_WRONG_THREAD` from any thread but the claiming one and
/// `TW_REENTRANT` from inside one of the shard's callbacks; the claim is
/// kept then.
///
/// Thread safety: only the claiming thread.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
/// `shard` is not used after this returns `TW_OK`.
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_shard_release(shard: *mut tw_shard) -> tw_result {
    boundary(|| {
        if shard.is_null() {
            return Ok(());
        }
        // SAFETY: non-null; came from `tw_shard_claim` (caller's contract).
        let claim = unsafe { arg(shard.cast_const()) }?;
        // Right thread, and not inside one of the shard's callbacks.
        claim.with(|_| ())?;
        // SAFETY: the claiming thread, outside any callback of this shard
        // (checked above): no borrow of it is live, and the caller does not
        // use the pointer again.
        drop(unsafe { Box::from_raw(shard) });
        Ok(())
    })
}

/// Fires every timer of this shard that is due by now, running their
/// callbacks on this thread, and writes how many ran to `*fired_out` (may be
/// NULL).
///
/// Returns `TW_REENTRANT` from inside one of this shard's callbacks,
/// `TW_SHUTDOWN` once the service was shut down (the shard's pending
/// callbacks are then dropped unrun), `TW_WRONG_THREAD`.
///
/// Thread safety: only the claiming thread.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_shard_poll(shard: *const tw_shard, fired_out: *mut usize) -> tw_result {
    boundary(|| {
        let fired_out = out_opt(fired_out)?;
        // SAFETY: the caller passes NULL or a live claim.
        let shard = unsafe { arg(shard) }?;
        let fired = shard.with(|guard| guard.poll())??;
        // SAFETY: checked by `out_opt`.
        unsafe { put_opt(fired_out, fired) };
        Ok(())
    })
}

/// Collect-then-run, one timer at a time: takes the next timer of this
/// shard due by now, writes what a callback would get to `*due_out` and
/// `true` to `*found_out` (`false`, and nothing to `*due_out`, when nothing
/// more is due). With `run` true it calls the timer's callback here, as
/// `tw_shard_poll` would; with `run` false it calls nothing, and the caller
/// handles the timer itself, by `due_out->timer` (a loop that runs its
/// handlers in its own order, on its own stack, after releasing a lock).
///
/// Either way the timer has fired once this returns, exactly once: it is
/// never handed out again for this arming, `tw_timer_stop` returns
/// `TW_STOP_FIRED` for it (a periodic timer is already armed for its next
/// period, which a stop cancels), and `tw_timer_restart` arms it again. Its
/// `ctx` is not freed by collecting it (only by `tw_timer_free` or, for a
/// timer made with a `ctx_free`, when the service lets go of its callback:
/// after collecting a one-shot timer unless restarted). Calls until one
/// finds nothing form one pass: a timer armed meanwhile for the tick already
/// reached (a zero delay) is handed out in the next pass (CONTRACT 1).
///
/// Returns `TW_REENTRANT` from inside one of this shard's callbacks,
/// `TW_SHUTDOWN` once the service was shut down, `TW_WRONG_THREAD`.
///
/// Thread safety: only the claiming thread.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_shard_poll_due(
    shard: *const tw_shard,
    run: bool,
    due_out: *mut tw_expiry,
    found_out: *mut bool,
) -> tw_result {
    boundary(|| {
        let due_out = out(due_out)?;
        let found_out = out(found_out)?;
        // SAFETY: the caller passes NULL or a live claim.
        let shard = unsafe { arg(shard) }?;
        let due = shard.with(|guard| {
            let index = guard.index();
            guard.poll_due().map(|due| {
                due.map(|due| {
                    let info = tw_expiry {
                        timer: due.id().to_raw(),
                        shard: index,
                        deadline_tick: due.deadline_tick(),
                        poll_tick: due.poll_tick(),
                        lateness_ns: u64::try_from(due.lateness().as_nanos()).unwrap_or(u64::MAX),
                        overruns: due.overruns(),
                    };
                    if run {
                        due.run();
                    }
                    info
                })
            })
        })??;
        // SAFETY: checked by `out`.
        unsafe {
            put(found_out, due.is_some());
            if let Some(info) = due {
                put(due_out, info);
            }
        }
        Ok(())
    })
}

/// Writes the nanoseconds until this shard's earliest armed timer is due to
/// `*ns_out`: 0 if one is due now (poll again before sleeping),
/// `UINT64_MAX` if nothing is armed (sleep until woken). Exact (a poll then
/// fires it on its own tick, moving far timers down the wheel on the way),
/// except when that timer shares a coarse wheel bucket with more than 64
/// others: then the time until that bucket's first tick, where they move
/// down a level (an early wakeup that fires nothing; finding the minimum of
/// a crowded bucket would read every entry). Never later than the earliest
/// deadline.
///
/// Call it right before sleeping: it also tells other threads that a timer
/// they start due before that time must wake this thread (through the
/// service's `wake` callback). If such a start already happened, it
/// writes 0.
///
/// Thread safety: only the claiming thread; not from the shard's callbacks.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_shard_next_deadline_ns(
    shard: *const tw_shard,
    ns_out: *mut u64,
) -> tw_result {
    boundary(|| {
        let ns_out = out(ns_out)?;
        // SAFETY: the caller passes NULL or a live claim.
        let shard = unsafe { arg(shard) }?;
        let next = shard.with(|guard| guard.next_deadline())?;
        let ns = next.map_or(u64::MAX, |d| {
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX - 1)
        });
        // SAFETY: checked by `out`.
        unsafe { put(ns_out, ns) };
        Ok(())
    })
}

/// As `tw_shard_next_deadline_ns`, in the form `epoll_wait` and `poll` take:
/// milliseconds rounded up (so a wakeup is never early), at most `INT_MAX`,
/// and -1 when nothing is armed (wait until woken).
///
/// Thread safety: only the claiming thread; not from the shard's callbacks.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_shard_next_timeout_ms(
    shard: *const tw_shard,
    ms_out: *mut c_int,
) -> tw_result {
    boundary(|| {
        let ms_out = out(ms_out)?;
        // SAFETY: the caller passes NULL or a live claim.
        let shard = unsafe { arg(shard) }?;
        let next = shard.with(|guard| guard.next_deadline())?;
        let ms = match next {
            None => -1,
            Some(d) => {
                let ms = d.as_nanos().div_ceil(1_000_000);
                c_int::try_from(ms).unwrap_or(c_int::MAX)
            }
        };
        // SAFETY: checked by `out`.
        unsafe { put(ms_out, ms) };
        Ok(())
    })
}

/// Writes the shard's index to `*index_out`.
///
/// Thread safety: only the claiming thread.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_shard_index(
    shard: *const tw_shard,
    index_out: *mut usize,
) -> tw_result {
    boundary(|| {
        let index_out = out(index_out)?;
        // SAFETY: the caller passes NULL or a live claim.
        let shard = unsafe { arg(shard) }?;
        let index = shard.with(|guard| guard.index())?;
        // SAFETY: checked by `out`.
        unsafe { put(index_out, index) };
        Ok(())
    })
}
