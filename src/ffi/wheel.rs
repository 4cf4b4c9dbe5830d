//! `tw_wheel`: the single-threaded hierarchical wheel, for C code that
//! drives its own time. Payloads are `void *` that the wheel never reads.
//!
//! The wheel sits in an `UnsafeCell` and every function takes a fresh,
//! short borrow of it. `tw_wheel_advance` holds none while it calls the C
//! callback, so that callback may schedule, cancel and reschedule on the same
//! wheel; only advancing, clearing or freeing it from there is refused.

use std::cell::{Cell, UnsafeCell};
use std::ffi::c_void;

use super::{arg, boundary, boundary_void, out, out_opt, put, put_opt, tw_result};
use crate::wheel::RawKey;
use crate::{TimerKey, Wheel};

/// A single-threaded hierarchical timing wheel of `void *` payloads, with
/// time counted in ticks (`uint64_t`) that the caller advances. Keys are
/// `uint64_t` values carrying a generation, never 0: a stale key returns
/// `TW_STALE_HANDLE`, never another timer. Not thread-safe: use one wheel
/// from one thread at a time.
#[allow(non_camel_case_types)]
pub struct tw_wheel {
    wheel: UnsafeCell<Wheel<*mut c_void>>,
    /// Set while `tw_wheel_advance` or `tw_wheel_clear` runs.
    advancing: Cell<bool>,
}

/// A wheel key as C sees it: the raw key plus one, so that 0 is never a
/// valid key (raw `u64::MAX` has slot index `u32::MAX`, which the wheel
/// never uses), as for service timer handles.
#[inline(always)]
fn key_to_c(key: TimerKey) -> u64 {
    key.to_raw().wrapping_add(1)
}

#[inline(always)]
fn key_from_c(key: u64) -> RawKey {
    RawKey(key.wrapping_sub(1))
}

impl std::fmt::Debug for tw_wheel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("tw_wheel")
            .field("advancing", &self.advancing.get())
            .finish_non_exhaustive()
    }
}

/// The body of every `tw_wheel_schedule*` function: arm a timer with
/// `insert`, write its key to `*key_out` and, when `tick_out` is not NULL,
/// the deadline tick it got.
///
/// # Safety
/// As for the exported functions: `wheel` is NULL or a live wheel, `key_out`
/// and `tick_out` are NULL or writable.
#[inline]
unsafe fn schedule_with(
    wheel: *const tw_wheel,
    key_out: *mut u64,
    tick_out: *mut u64,
    insert: impl FnOnce(&mut Wheel<*mut c_void>) -> Result<TimerKey, crate::TimerError>,
) -> tw_result {
    boundary(|| {
        let key_out = out(key_out)?;
        let tick_out = out_opt(tick_out)?;
        // SAFETY: the caller passes NULL or a live wheel.
        let wheel = unsafe { arg(wheel) }?;
        let (key, tick) = wheel.with(|w| {
            let key = insert(w)?;
            // Only looked up when asked for: the plain schedule calls are
            // the hot path of C users.
            let tick = tick_out.map(|_| w.deadline(key).unwrap_or_default());
            Ok::<_, tw_result>((key, tick))
        })?;
        // SAFETY: checked by `out` and `out_opt`.
        unsafe {
            put(key_out, key_to_c(key));
            if let Some(tick) = tick {
                put_opt(tick_out, tick);
            }
        }
        Ok(())
    })
}

impl tw_wheel {
    /// Runs `f` on the wheel.
    #[inline(always)]
    fn with<R>(&self, f: impl FnOnce(&mut Wheel<*mut c_void>) -> R) -> R {
        // SAFETY: a `tw_wheel` is used by one thread at a time (documented),
        // and no borrow of the wheel outlives a call of `with`: `advance`
        // drops its borrow before calling into C, so a callback that calls
        // back in gets the only live borrow.
        f(unsafe { &mut *self.wheel.get() })
    }

    /// Marks the wheel as advancing for the life of the returned guard;
    /// `TW_REENTRANT` if it already is.
    fn enter(&self) -> Result<impl Drop + '_, tw_result> {
        if self.advancing.replace(true) {
            return Err(tw_result::TW_REENTRANT);
        }
        struct Leave<'a>(&'a Cell<bool>);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                self.0.set(false);
            }
        }
        Ok(Leave(&self.advancing))
    }
}

/// Called by `tw_wheel_advance` with each expired timer (its key, now stale;
/// its deadline tick, which `tw_wheel_now` reads during the call; its
/// payload), and by `tw_wheel_clear` with each removed one. It may schedule,
/// cancel and reschedule on the same wheel, but not advance, clear or free
/// it (`TW_REENTRANT` / ignored). It must not unwind.
#[allow(non_camel_case_types)]
pub type tw_wheel_expired_fn = Option<
    unsafe extern "C" fn(ctx: *mut c_void, key: u64, deadline_tick: u64, payload: *mut c_void),
>;

/// Creates an empty wheel whose time is `start_tick` and writes it to
/// `*wheel_out`.
///
/// Thread safety: may be called from any thread.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_wheel_new(start_tick: u64, wheel_out: *mut *mut tw_wheel) -> tw_result {
    boundary(|| {
        let wheel_out = out(wheel_out)?;
        let wheel = Box::new(tw_wheel {
            wheel: UnsafeCell::new(Wheel::starting_at(start_tick)),
            advancing: Cell::new(false),
        });
        // SAFETY: checked by `out`.
        unsafe { put(wheel_out, Box::into_raw(wheel)) };
        Ok(())
    })
}

/// Frees the wheel. `NULL` does nothing. Payloads still armed are not
/// touched (use `tw_wheel_clear` first to get them back). Called from inside
/// the wheel's own advance or clear callback it does nothing.
///
/// Thread safety: the wheel's thread.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
/// `wheel` is not used after this returns (unless it was called from the
/// wheel's own callback: then it did nothing).
#[no_mangle]
pub unsafe extern "C" fn tw_wheel_free(wheel: *mut tw_wheel) {
    boundary_void(|| {
        if wheel.is_null() {
            return;
        }
        // SAFETY: non-null; came from `tw_wheel_new` (caller's contract).
        if unsafe { &*wheel }.advancing.get() {
            return;
        }
        // SAFETY: as above, and no borrow of it is live (not advancing).
        drop(unsafe { Box::from_raw(wheel) });
    })
}

/// Arms a timer due at tick `deadline_tick` (a deadline at or before
/// `tw_wheel_now` is due at once: the next advance returns it) carrying
/// `payload`, and writes its key to `*key_out`. O(1).
///
/// Thread safety: the wheel's thread; allowed from its advance callback.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_wheel_schedule(
    wheel: *const tw_wheel,
    deadline_tick: u64,
    payload: *mut c_void,
    key_out: *mut u64,
) -> tw_result {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        schedule_with(wheel, key_out, std::ptr::null_mut(), |w| {
            Ok(w.insert_at(deadline_tick, payload))
        })
    }
}

/// Arms a timer due at some tick from `earliest_tick` to `latest_tick`
/// (inclusive; clamped to now), chosen by the wheel to save work: the tick
/// with the most trailing zero bits, so it needs the fewest cascades and
/// timers with overlapping windows share a tick. Writes its key to
/// `*key_out`. Returns `TW_INVALID_RANGE` when `earliest_tick > latest_tick`.
///
/// Thread safety: the wheel's thread; allowed from its advance callback.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_wheel_schedule_in_range(
    wheel: *const tw_wheel,
    earliest_tick: u64,
    latest_tick: u64,
    payload: *mut c_void,
    key_out: *mut u64,
) -> tw_result {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        schedule_with(wheel, key_out, std::ptr::null_mut(), |w| {
            w.insert_at_in_range(earliest_tick..=latest_tick, payload)
        })
    }
}

/// Arms a timer due `delay` ticks after `tw_wheel_now` (saturating at the
/// last tick; 0 makes it due at once: the next advance returns it) carrying
/// `payload`, and writes its key to `*key_out`. O(1). The relative form of
/// `tw_wheel_schedule`: one call per operation.
///
/// Thread safety: the wheel's thread; allowed from its advance callback.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn tw_wheel_schedule_after(
    wheel: *const tw_wheel,
    delay: u64,
    payload: *mut c_void,
    key_out: *mut u64,
) -> tw_result {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        schedule_with(wheel, key_out, std::ptr::null_mut(), |w| {
            Ok(w.insert(delay, payload))
        })
    }
}

/// As `tw_wheel_schedule_in_range`, and also writes the tick the wheel chose
/// to `*tick_out` (may be NULL).
///
/// Thread safety: the wheel's thread; allowed from its advance callback.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn tw_wheel_schedule_in_range_at(
    wheel: *const tw_wheel,
    earliest_tick: u64,
    latest_tick: u64,
    payload: *mut c_void,
    key_out: *mut u64,
    tick_out: *mut u64,
) -> tw_result {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        schedule_with(wheel, key_out, tick_out, |w| {
            w.insert_at_in_range(earliest_tick..=latest_tick, payload)
        })
    }
}

/// Arms a timer due at some tick from `earliest_delay` to `latest_delay`
/// ticks after now (inclusive), chosen as by `tw_wheel_schedule_in_range`.
/// Writes its key to `*key_out` and the chosen tick to `*tick_out` (may be
/// NULL). Returns `TW_INVALID_RANGE` when `earliest_delay > latest_delay`.
///
/// Thread safety: the wheel's thread; allowed from its advance callback.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn tw_wheel_schedule_in_range_after(
    wheel: *const tw_wheel,
    earliest_delay: u64,
    latest_delay: u64,
    payload: *mut c_void,
    key_out: *mut u64,
    tick_out: *mut u64,
) -> tw_result {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        schedule_with(wheel, key_out, tick_out, |w| {
            w.insert_in_range(earliest_delay..=latest_delay, payload)
        })
    }
}

/// Moves an armed timer to `delay` ticks after now (saturating); its key
/// stays valid. Returns `TW_STALE_HANDLE` if it already expired or was
/// cancelled. O(1).
///
/// Same-tick order: a moved timer counts as newly armed, so it fires after
/// every timer already armed for its new tick, whether it came from a
/// later tick, an earlier one or that same tick (docs/CONTRACT.md item 5).
///
/// Thread safety: the wheel's thread; allowed from its advance callback.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn tw_wheel_reschedule_after(
    wheel: *const tw_wheel,
    key: u64,
    delay: u64,
) -> tw_result {
    boundary(|| {
        // SAFETY: the caller passes NULL or a live wheel.
        let wheel = unsafe { arg(wheel) }?;
        wheel.with(|w| w.reschedule_by(key_from_c(key), delay))?;
        Ok(())
    })
}

/// Keeps an armed timer if its deadline is already from `earliest_tick` to
/// `latest_tick` (inclusive; clamped to now), else moves it to the tick of
/// that window `tw_wheel_schedule_in_range` would choose. Writes the
/// timer's deadline to `*tick_out` (may be NULL). Returns
/// `TW_INVALID_RANGE` when `earliest_tick > latest_tick` and
/// `TW_STALE_HANDLE` if the timer already expired or was cancelled; either
/// way nothing changes. O(1).
///
/// Same-tick order: a moved timer counts as newly armed, so it fires after
/// every timer already armed for its new tick, whether it came from a
/// later tick, an earlier one or that same tick (docs/CONTRACT.md item 5).
/// A kept timer keeps its place.
///
/// Thread safety: the wheel's thread; allowed from its advance callback.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn tw_wheel_reschedule_in_range(
    wheel: *const tw_wheel,
    key: u64,
    earliest_tick: u64,
    latest_tick: u64,
    tick_out: *mut u64,
) -> tw_result {
    boundary(|| {
        let tick_out = out_opt(tick_out)?;
        // SAFETY: the caller passes NULL or a live wheel.
        let wheel = unsafe { arg(wheel) }?;
        let tick = wheel
            .with(|w| w.reschedule_at_in_range_by(key_from_c(key), earliest_tick..=latest_tick))?;
        // SAFETY: checked by `out_opt`.
        unsafe { put_opt(tick_out, tick) };
        Ok(())
    })
}

/// `tw_wheel_reschedule_in_range` with the window given as delays from now:
/// `earliest_delay` to `latest_delay` ticks after `tw_wheel_now`.
///
/// Same-tick order: a moved timer counts as newly armed, so it fires after
/// every timer already armed for its new tick, whether it came from a
/// later tick, an earlier one or that same tick (docs/CONTRACT.md item 5).
/// A kept timer keeps its place.
///
/// Thread safety: the wheel's thread; allowed from its advance callback.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn tw_wheel_reschedule_in_range_after(
    wheel: *const tw_wheel,
    key: u64,
    earliest_delay: u64,
    latest_delay: u64,
    tick_out: *mut u64,
) -> tw_result {
    boundary(|| {
        let tick_out = out_opt(tick_out)?;
        // SAFETY: the caller passes NULL or a live wheel.
        let wheel = unsafe { arg(wheel) }?;
        let tick = wheel
            .with(|w| w.reschedule_in_range_by(key_from_c(key), earliest_delay..=latest_delay))?;
        // SAFETY: checked by `out_opt`.
        unsafe { put_opt(tick_out, tick) };
        Ok(())
    })
}

/// Writes the tick an armed timer is due at to `*tick_out`. Returns
/// `TW_STALE_HANDLE` (and writes nothing) if it already expired or was
/// cancelled. O(1).
///
/// Thread safety: the wheel's thread; allowed from its advance callback.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn tw_wheel_deadline(
    wheel: *const tw_wheel,
    key: u64,
    tick_out: *mut u64,
) -> tw_result {
    boundary(|| {
        let tick_out = out(tick_out)?;
        // SAFETY: the caller passes NULL or a live wheel.
        let wheel = unsafe { arg(wheel) }?;
        let tick = wheel
            .with(|w| w.deadline_by(key_from_c(key)))
            .ok_or(tw_result::TW_STALE_HANDLE)?;
        // SAFETY: checked by `out`.
        unsafe { put(tick_out, tick) };
        Ok(())
    })
}

/// Moves an armed timer to `deadline_tick` (clamped to now); its key stays
/// valid. Returns `TW_STALE_HANDLE` if it already expired or was cancelled.
///
/// Same-tick order: a moved timer counts as newly armed, so it fires after
/// every timer already armed for its new tick, whether it came from a
/// later tick, an earlier one or that same tick (docs/CONTRACT.md item 5).
///
/// Thread safety: the wheel's thread; allowed from its advance callback.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_wheel_reschedule(
    wheel: *const tw_wheel,
    key: u64,
    deadline_tick: u64,
) -> tw_result {
    boundary(|| {
        // SAFETY: the caller passes NULL or a live wheel.
        let wheel = unsafe { arg(wheel) }?;
        wheel.with(|w| w.reschedule_at_by(key_from_c(key), deadline_tick))?;
        Ok(())
    })
}

/// Disarms a timer and writes its payload to `*payload_out` (may be NULL).
/// Returns `TW_STALE_HANDLE` (and writes nothing) if it already expired or
/// was cancelled. O(1).
///
/// Thread safety: the wheel's thread; allowed from its advance callback.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_wheel_cancel(
    wheel: *const tw_wheel,
    key: u64,
    payload_out: *mut *mut c_void,
) -> tw_result {
    boundary(|| {
        let payload_out = out_opt(payload_out)?;
        // SAFETY: the caller passes NULL or a live wheel.
        let wheel = unsafe { arg(wheel) }?;
        let payload = wheel
            .with(|w| w.cancel_by(key_from_c(key)))
            .ok_or(tw_result::TW_STALE_HANDLE)?;
        // SAFETY: checked by `out_opt`.
        unsafe { put_opt(payload_out, payload) };
        Ok(())
    })
}

/// Advances the wheel's time to `target_tick`, calling `callback(ctx, key,
/// deadline, payload)` for each timer that comes due, in deadline order (arm
/// order within a tick), at most `max` of them. Writes how many expired to
/// `*expired_out` and whether the target was reached with nothing left due
/// to `*complete_out` (both may be NULL). When the cap stopped it, call
/// again to go on exactly where it stopped. A target before now counts as
/// now.
///
/// Due now: a timer the callback arms (or moves) for the tick being
/// processed fires in the next advance, not in this one and not a tick
/// later. This call stops at that tick once the timers armed before are
/// done (`*complete_out` false, `tw_wheel_now` that tick), and the next call
/// fires it first, on its tick; a callback that keeps re-arming its own
/// timer for now therefore fires once per advance. Armed between advances,
/// such a timer fires in the next one.
///
/// Returns `TW_NULL_POINTER` for a NULL callback, `TW_REENTRANT` from inside
/// the wheel's own callback.
///
/// Thread safety: the wheel's thread.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
/// `callback` and `ctx` are used only during this call.
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_wheel_advance(
    wheel: *const tw_wheel,
    target_tick: u64,
    max: usize,
    callback: tw_wheel_expired_fn,
    ctx: *mut c_void,
    expired_out: *mut usize,
    complete_out: *mut bool,
) -> tw_result {
    // SAFETY: forwarded from the caller.
    unsafe {
        advance_with::<false>(
            wheel,
            target_tick,
            max,
            callback,
            ctx,
            expired_out,
            complete_out,
        )
    }
}

/// `tw_wheel_advance`, but each timer that comes due is kept, *held*,
/// under its key instead of freed: the key passed to the callback stays
/// valid, so the callback (or later code) can arm the same timer again in
/// place with any `tw_wheel_reschedule*` function (no free and new
/// schedule, same key), or free it with `tw_wheel_cancel`, which returns
/// its payload. A held timer is not armed: it never fires, `tw_wheel_len`
/// does not count it and `tw_wheel_deadline` returns `TW_STALE_HANDLE` for
/// it; it keeps its memory until re-armed or cancelled. `tw_wheel_clear`
/// removes held timers too.
///
/// Thread safety: the wheel's thread.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
/// `callback` and `ctx` are used only during this call.
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_wheel_advance_keep(
    wheel: *const tw_wheel,
    target_tick: u64,
    max: usize,
    callback: tw_wheel_expired_fn,
    ctx: *mut c_void,
    expired_out: *mut usize,
    complete_out: *mut bool,
) -> tw_result {
    // SAFETY: forwarded from the caller.
    unsafe {
        advance_with::<true>(
            wheel,
            target_tick,
            max,
            callback,
            ctx,
            expired_out,
            complete_out,
        )
    }
}

/// Jumps the wheel's time to its next event, at most `cap` ticks ahead, and
/// fires what is due there: `tw_wheel_ticks_to_next_event(wheel, cap)`
/// followed by `tw_wheel_advance` (`keep` false) or `tw_wheel_advance_keep`
/// (`keep` true) to now plus that many ticks, in one call (the step of a
/// loop that drives virtual time, as a simulation does). `max`, `callback`,
/// `ctx`, `expired_out` and `complete_out` are as for `tw_wheel_advance`.
/// Writes the wheel's time after the call to `*tick_out` (may be NULL): the
/// event's tick, or now plus `cap` when nothing was due sooner, or where the
/// `max` cap stopped it. A `cap` of 0 fires only what is due now.
///
/// Returns `TW_NULL_POINTER` for a NULL callback, `TW_REENTRANT` from inside
/// the wheel's own callback; either way time does not move.
///
/// Thread safety: the wheel's thread.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
/// `callback` and `ctx` are used only during this call.
#[must_use]
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn tw_wheel_advance_to_next(
    wheel: *const tw_wheel,
    cap: u64,
    keep: bool,
    max: usize,
    callback: tw_wheel_expired_fn,
    ctx: *mut c_void,
    tick_out: *mut u64,
    expired_out: *mut usize,
    complete_out: *mut bool,
) -> tw_result {
    boundary(|| {
        let tick_out = out_opt(tick_out)?;
        // SAFETY: the caller passes NULL or a live wheel.
        let wheel_ref = unsafe { arg(wheel) }?;
        // The pass ends with the tick of the first timer it fires (one
        // search for it, as `Wheel::advance_to_next_event`); with none due
        // by `limit`, time moves there.
        let limit = wheel_ref.with(|w| w.now().saturating_add(cap));
        let args = AdvanceArgs {
            max,
            callback,
            ctx,
            expired_out,
            complete_out,
        };
        // One loop per kind of poll, as for the two advance functions
        // (written out: through a function pointer the loop is not inlined).
        // SAFETY: forwarded from the caller.
        unsafe {
            if keep {
                advance_loop::<true>(wheel_ref, limit, true, args)
            } else {
                advance_loop::<false>(wheel_ref, limit, true, args)
            }
        }?;
        // SAFETY: checked by `out_opt`.
        unsafe { put_opt(tick_out, wheel_ref.with(|w| w.now())) };
        Ok(())
    })
}

/// The body of `tw_wheel_advance` (`KEEP == false`) and
/// `tw_wheel_advance_keep` (`KEEP == true`): a constant, so each gets a
/// loop of its own with one kind of poll and no test per timer.
///
/// # Safety
/// As for those functions.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn advance_with<const KEEP: bool>(
    wheel: *const tw_wheel,
    target_tick: u64,
    max: usize,
    callback: tw_wheel_expired_fn,
    ctx: *mut c_void,
    expired_out: *mut usize,
    complete_out: *mut bool,
) -> tw_result {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let wheel = unsafe { arg(wheel) }?;
        let args = AdvanceArgs {
            max,
            callback,
            ctx,
            expired_out,
            complete_out,
        };
        // SAFETY: forwarded from the caller.
        unsafe { advance_loop::<KEEP>(wheel, target_tick, false, args) }
    })
}

/// The arguments of an advance that only its loop reads, as the C caller
/// passed them.
#[derive(Clone, Copy)]
struct AdvanceArgs {
    max: usize,
    callback: tw_wheel_expired_fn,
    ctx: *mut c_void,
    expired_out: *mut usize,
    complete_out: *mut bool,
}

/// The checks and loop of [`advance_with`], inside the caller's panic
/// boundary. With `one_tick`, the first timer fired sets the target to its
/// own tick (`tw_wheel_advance_to_next`). Always inlined: each exported
/// function then has a boundary closure of its own that the compiler
/// inlines into it (a closure shared by two exported functions was left
/// out of line, which cost the C port of Ratas' workload 9 % more
/// instructions).
///
/// # Safety
/// As for [`advance_with`].
#[inline(always)]
unsafe fn advance_loop<const KEEP: bool>(
    wheel: &tw_wheel,
    target_tick: u64,
    one_tick: bool,
    args: AdvanceArgs,
) -> Result<(), tw_result> {
    let AdvanceArgs {
        max,
        callback,
        ctx,
        expired_out,
        complete_out,
    } = args;
    let expired_out = out_opt(expired_out)?;
    let complete_out = out_opt(complete_out)?;
    let callback = callback.ok_or(tw_result::TW_NULL_POINTER)?;
    let _advancing = wheel.enter()?;
    // The loop of `Wheel::advance`, written out so that no borrow of the
    // wheel is live while C runs.
    let mut target = target_tick.max(wheel.with(|w| w.now()));
    let mut expired = 0;
    // Cleared when the loop finds nothing more due by `target`.
    let mut stopped_at_cap = true;
    // One pass: a timer a callback arms for the tick being processed is
    // due to the next advance (`Wheel::advance`).
    wheel.with(|w| w.begin_pass());
    while expired < max {
        let fired = wheel.with(|w| {
            if KEEP {
                w.pop_keep(target)
            } else {
                w.pop(target)
            }
        });
        match fired {
            Some(timer) => {
                expired += 1;
                if one_tick {
                    target = timer.deadline;
                }
                // SAFETY: the caller's function and context; the header
                // forbids unwinding.
                unsafe { callback(ctx, key_to_c(timer.key), timer.deadline, timer.value) };
                // No "anything else due?" check here: the next poll
                // answers it with the same one mask (as `Wheel::advance`).
            }
            None => {
                stopped_at_cap = false;
                break;
            }
        }
    }
    let complete = wheel.with(|w| {
        w.end_pass();
        if stopped_at_cap {
            w.finish_capped_advance(target)
        } else {
            // Stopped at a timer armed during this call for the tick it
            // had reached, or reached the target with nothing left due.
            !w.is_due_now()
        }
    });
    // SAFETY: checked by `out_opt`.
    unsafe {
        put_opt(expired_out, expired);
        put_opt(complete_out, complete);
    }
    Ok(())
}

/// A timer handed out by `tw_wheel_collect`, whose callback the caller
/// runs itself.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct tw_wheel_due {
    /// Its key: stale once collected, unless collected with `keep` (then
    /// held under it, as by `tw_wheel_advance_keep`).
    pub key: u64,
    /// The tick it was due at.
    pub deadline_tick: u64,
    /// How many ticks the collect's target lies past that deadline.
    pub late_ticks: u64,
    /// The payload it was armed with.
    pub payload: *mut c_void,
}

/// Collect-then-run: moves the wheel's time towards `target_tick` as
/// `tw_wheel_advance` does, but instead of calling anything it writes the
/// timers that come due to `due_out[0..max]`, in the order an advance would
/// fire them (deadline order, arm order within a tick), and how many to
/// `*count_out`. The caller then runs them in its own order, on its own
/// stack (after releasing a lock, say): the timers phase of an event loop.
///
/// Writes to `*complete_out` (may be NULL) whether the target was reached
/// with nothing left due; when `max` stopped it, call again to go on where
/// it stopped. Each timer is handed out once (exactly once, as by an
/// advance). With `keep` false a collected timer is freed: its key is stale
/// at once (`TW_STALE_HANDLE` from `tw_wheel_cancel` and the reschedule
/// functions), so a handler that cancels another collected timer gets that
/// error, never another timer. With `keep` true it is held under its key as
/// by `tw_wheel_advance_keep`: a reschedule arms it again, `tw_wheel_cancel`
/// frees it. Timers the caller arms while running what it collected, for the
/// tick the wheel has reached (a zero delay), are collected by the next call
/// (CONTRACT 1). `tw_wheel_now` reads the tick of the last timer collected,
/// or the target once complete.
///
/// `due_out` may be NULL only when `max` is 0. Returns `TW_REENTRANT` from
/// inside the wheel's own advance or clear callback.
///
/// Thread safety: the wheel's thread.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions);
/// `due_out` points to `max` writable `tw_wheel_due`.
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_wheel_collect(
    wheel: *const tw_wheel,
    target_tick: u64,
    keep: bool,
    due_out: *mut tw_wheel_due,
    max: usize,
    count_out: *mut usize,
    complete_out: *mut bool,
) -> tw_result {
    boundary(|| {
        let count_out = out(count_out)?;
        let complete_out = out_opt(complete_out)?;
        let due_out = if max == 0 { None } else { Some(out(due_out)?) };
        // SAFETY: the caller passes NULL or a live wheel.
        let wheel = unsafe { arg(wheel) }?;
        let _collecting = wheel.enter()?;
        let (count, complete) = wheel.with(|w| {
            w.end_pass();
            let target = target_tick.max(w.now());
            let mut count = 0;
            while let Some(array) = due_out.filter(|_| count < max) {
                let popped = if keep {
                    w.pop_keep(target)
                } else {
                    w.pop(target)
                };
                let Some(timer) = popped else {
                    break;
                };
                let due = tw_wheel_due {
                    key: key_to_c(timer.key),
                    deadline_tick: timer.deadline,
                    late_ticks: target - timer.deadline,
                    payload: timer.value,
                };
                // SAFETY: `count < max`, and the caller gave `max` writable
                // entries at an aligned, non-null `due_out` (checked).
                unsafe { array.as_ptr().add(count).write(due) };
                count += 1;
            }
            // Nothing runs between these pops, so no pass is needed: what
            // the caller arms afterwards is collected by the next call.
            let complete = if count < max {
                true
            } else {
                w.finish_capped_advance(target)
            };
            (count, complete)
        });
        // SAFETY: checked by `out` and `out_opt`.
        unsafe {
            put(count_out, count);
            put_opt(complete_out, complete);
        }
        Ok(())
    })
}

/// Removes every armed timer, and every timer held by
/// `tw_wheel_advance_keep` (`deadline` is then the tick it fired at),
/// calling `callback(ctx, key, deadline, payload)` for each (in no
/// particular order), so their payloads can be freed. Time does not move.
/// Timers the callback schedules stay armed.
///
/// Thread safety: the wheel's thread; `TW_REENTRANT` from its callbacks.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
/// `callback` and `ctx` are used only during this call.
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_wheel_clear(
    wheel: *const tw_wheel,
    callback: tw_wheel_expired_fn,
    ctx: *mut c_void,
) -> tw_result {
    boundary(|| {
        // SAFETY: the caller passes NULL or a live wheel.
        let wheel = unsafe { arg(wheel) }?;
        let callback = callback.ok_or(tw_result::TW_NULL_POINTER)?;
        let _clearing = wheel.enter()?;
        let removed: Vec<(TimerKey, u64, *mut c_void)> = wheel.with(|w| {
            let mut armed: Vec<(TimerKey, u64)> = w.iter().map(|(key, at, _)| (key, at)).collect();
            // Timers held by `tw_wheel_advance_keep` are not armed, but
            // their payloads must come back too.
            armed.extend(w.held());
            armed
                .into_iter()
                .filter_map(|(key, at)| Some((key, at, w.cancel(key)?)))
                .collect()
        });
        for (key, at, payload) in removed {
            // SAFETY: the caller's function and context; must not unwind.
            unsafe { callback(ctx, key_to_c(key), at, payload) };
        }
        Ok(())
    })
}

/// Writes the number of ticks from now until the next timer is due, at
/// most `cap`, to `*ticks_out`: 0 when one is due now, `cap` when nothing is
/// armed (and also when the next timer is `cap` or more ticks away: use
/// `tw_wheel_next_event` to tell the two apart). O(levels) when the next
/// timer is `cap` or more ticks away, else as `tw_wheel_next_event`.
///
/// "Now" is the wheel's own current tick (`tw_wheel_now`: the target of the
/// last advance), not the caller's clock: see `tw_wheel_next_event`.
///
/// Thread safety: the wheel's thread.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_wheel_ticks_to_next_event(
    wheel: *const tw_wheel,
    cap: u64,
    ticks_out: *mut u64,
) -> tw_result {
    boundary(|| {
        let ticks_out = out(ticks_out)?;
        // SAFETY: the caller passes NULL or a live wheel.
        let wheel = unsafe { arg(wheel) }?;
        let ticks = wheel.with(|w| w.ticks_to_next_event(cap));
        // SAFETY: checked by `out`.
        unsafe { put(ticks_out, ticks) };
        Ok(())
    })
}

/// Writes the number of ticks from the wheel's current tick until its
/// earliest armed timer is due, at most `cap`, to `*ticks_out`, and whether
/// any timer is armed to `*armed_out`: `true` with 0 when one is due now,
/// `true` with `cap` when the earliest is `cap` or more ticks away, `false`
/// with `cap` when nothing is armed (sleep until something is started).
/// Exact: the earliest timer's own deadline, not the point where the wheel
/// moves timers between levels. Costs O(levels) when the earliest timer is
/// `cap` or more ticks away or on the wheel's finest level (due within the
/// current block of 64 ticks); otherwise the first question after the
/// earliest timer changes walks one bucket, and the answer is remembered
/// until it changes again.
///
/// The time base is the wheel's own current tick (`tw_wheel_now`), which
/// moves only when the wheel is advanced, to the target of the last
/// advance. A loop that keeps its own clock and advances the wheel lazily
/// (only when something is due) should sleep for `tw_wheel_now + ticks`
/// minus its own current tick (0 if that is in the past), not for `ticks`:
/// the wheel's tick lags the loop's by the time since the last advance.
///
/// Thread safety: the wheel's thread.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_wheel_next_event(
    wheel: *const tw_wheel,
    cap: u64,
    ticks_out: *mut u64,
    armed_out: *mut bool,
) -> tw_result {
    boundary(|| {
        let ticks_out = out(ticks_out)?;
        let armed_out = out(armed_out)?;
        // SAFETY: the caller passes NULL or a live wheel.
        let wheel = unsafe { arg(wheel) }?;
        let (ticks, armed) = wheel.with(|w| (w.ticks_to_next_event(cap), !w.is_empty()));
        // SAFETY: checked by `out`.
        unsafe {
            put(ticks_out, ticks);
            put(armed_out, armed);
        }
        Ok(())
    })
}

/// Writes the wheel's current tick to `*tick_out` (during an advance
/// callback: the expiring timer's deadline).
///
/// Thread safety: the wheel's thread.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_wheel_now(wheel: *const tw_wheel, tick_out: *mut u64) -> tw_result {
    boundary(|| {
        let tick_out = out(tick_out)?;
        // SAFETY: the caller passes NULL or a live wheel.
        let wheel = unsafe { arg(wheel) }?;
        let now = wheel.with(|w| w.now());
        // SAFETY: checked by `out`.
        unsafe { put(tick_out, now) };
        Ok(())
    })
}

/// Writes the number of armed timers to `*len_out`.
///
/// Thread safety: the wheel's thread.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_wheel_len(wheel: *const tw_wheel, len_out: *mut usize) -> tw_result {
    boundary(|| {
        let len_out = out(len_out)?;
        // SAFETY: the caller passes NULL or a live wheel.
        let wheel = unsafe { arg(wheel) }?;
        let len = wheel.with(|w| w.len());
        // SAFETY: checked by `out`.
        unsafe { put(len_out, len) };
        Ok(())
    })
}
