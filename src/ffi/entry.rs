//! `tw_entry` and `tw_entry_wheel`: timers that C code keeps inside its own
//! structs (as libuv's `uv_timer_t` or Ratas' `TimerEvent`), armed in place
//! on a single-threaded wheel ([`EmbeddedWheel`]). Arming allocates nothing
//! and takes no key and no lookup.
//!
//! # Who may free what, when
//!
//! * The caller owns every `tw_entry`'s memory. It may free, reuse or move
//!   (copy) an entry's memory whenever the entry is *not armed*: before its
//!   first schedule, after `tw_entry_cancel`, from the moment its callback
//!   starts or `tw_entry_wheel_poll` hands it out (a fired entry is no
//!   longer armed, so the callback or the poll's caller may free it, or the
//!   struct that holds it), and after its wheel was freed. An armed
//!   entry must stay where it is: cancel it first.
//! * `tw_entry_wheel_free` detaches every entry still armed (each reads as
//!   not armed afterwards) and never touches an entry again; it is ignored
//!   when called from the wheel's own callback.
//! * `tw_entry_init` makes any memory a fresh, unarmed entry; it must not
//!   be called on an armed entry (its wheel still links it).
//!
//! The wheel sits in an `UnsafeCell` and every function takes a short borrow
//! of it; `tw_entry_wheel_advance` holds none while a callback runs, so a
//! callback may schedule, cancel and free entries (its own included). Only
//! advancing, polling or freeing the wheel from there is refused.
//!
//! # Two ways to fire: advance (push) and poll (pull)
//!
//! `tw_entry_wheel_advance` calls each due entry's callback through its
//! function pointer; `tw_entry_wheel_poll` hands the next due entry back
//! and the caller dispatches it itself, so that with cross-language LTO its
//! handlers inline into its loop (`ffi-tests/ratas_workload_entry.c`).
//! Both fire in one *pass* of the wheel (the hierarchy's "Due now" rule,
//! CONTRACT 1): an advance's pass is one call; a poll pass spans the calls
//! up to the one that finds nothing. [`Pass`] records which is open, so
//! that a poll continues its pass, an advance ends an open poll pass and
//! begins its own, and either from inside an advance's callback is refused.

use std::cell::{Cell, UnsafeCell};
use std::ffi::c_void;
use std::pin::Pin;
use std::ptr;

use super::{arg, boundary, boundary_void, out, out_opt, put, put_opt, tw_result};
use crate::{EmbeddedWheel, TimerEntry};

/// Called by `tw_entry_wheel_advance` for each entry that comes due, with
/// the entry (no longer armed: the callback may arm it again, or free it)
/// and the `ctx` given to the advance. `tw_entry_wheel_now` reads the
/// entry's deadline tick during the call. It must not unwind.
/// (`tw_entry_wheel_poll` calls no callback: it hands the entry back.)
#[allow(non_camel_case_types)]
pub type tw_entry_fn = Option<unsafe extern "C" fn(entry: *mut tw_entry, ctx: *mut c_void)>;

/// The Rust entry a `tw_entry` holds.
type Entry = TimerEntry<tw_entry_fn>;

/// A timer that the caller embeds in its own struct. Its fields are
/// private: set it up with `tw_entry_init` before any other use. See
/// `tw_entry_wheel` for who may free it when.
#[allow(non_camel_case_types)]
#[repr(C)]
pub struct tw_entry {
    _private: [u64; 6],
}

// The C struct is exactly the Rust entry, so that one is the other.
const _: () = assert!(size_of::<tw_entry>() == size_of::<Entry>());
const _: () = assert!(align_of::<tw_entry>() == align_of::<Entry>());

/// A single-threaded hierarchical wheel of embedded timers (`tw_entry`),
/// with time counted in ticks that the caller advances. The same order and
/// time rules as `tw_wheel`: a timer fires on its own deadline tick, timers
/// of one tick in arming order (a schedule of an armed entry counts as
/// arming again), and a deadline at or before now fires in the next
/// advance or poll pass. Due entries are fired either by
/// `tw_entry_wheel_advance`, which calls their callbacks, or by
/// `tw_entry_wheel_poll`, which hands them to the caller one at a time.
/// Not thread-safe: one wheel, and its entries, from one thread at a time.
///
/// Who may free what, when: the caller owns each entry's memory and may
/// free, reuse or copy it whenever the entry is not armed (before its first
/// schedule, after `tw_entry_cancel`, from the start of its own callback or
/// once a poll handed it out, after its wheel was freed); an armed entry
/// must first be cancelled. Freeing the wheel detaches (disarms) its armed
/// entries.
#[allow(non_camel_case_types)]
pub struct tw_entry_wheel {
    wheel: UnsafeCell<EmbeddedWheel<tw_entry_fn>>,
    /// Which pass of the wheel is open, if any (module docs).
    pass: Cell<Pass>,
}

/// The pass a `tw_entry_wheel` is in: between the wheel's `begin_pass` and
/// `end_pass`, an entry armed for the tick already reached waits for the
/// next pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    /// No pass is open: the next poll begins one.
    Idle,
    /// `tw_entry_wheel_poll` has handed out entries and not yet found
    /// nothing due: the next poll goes on in the same pass.
    Polling,
    /// `tw_entry_wheel_advance` runs (C code may be inside a callback).
    Advancing,
}

impl std::fmt::Debug for tw_entry_wheel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("tw_entry_wheel")
            .field("pass", &self.pass.get())
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for tw_entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("tw_entry").finish_non_exhaustive()
    }
}

impl tw_entry_wheel {
    /// A poll's pass: goes on in the open one, begins one if none is open,
    /// and is refused while an advance runs (the poll comes from one of its
    /// callbacks). Inlined into the poll:
    /// a pass opens about once per fired entry in Ratas' workload, and as a
    /// call it cost 2.5 % of the C port's instructions at 100 pairs
    /// (callgrind, `ffi-tests/ratas_workload_entry.c`). Never `#[cold]`,
    /// which kept the poll itself from being inlined into C under LTO
    /// (`ffi-tests/run.sh lto` checks that it is).
    #[inline(always)]
    fn open_poll_pass(&self) -> Result<(), tw_result> {
        match self.pass.get() {
            Pass::Advancing => Err(tw_result::TW_REENTRANT),
            Pass::Polling => Ok(()),
            Pass::Idle => {
                // The fence of this pass: what is armed for now from here
                // on waits until the pass has ended.
                self.with(|w| w.begin_pass());
                self.pass.set(Pass::Polling);
                Ok(())
            }
        }
    }

    #[inline(always)]
    fn with<R>(&self, f: impl FnOnce(&mut EmbeddedWheel<tw_entry_fn>) -> R) -> R {
        // SAFETY: one thread at a time (documented), and no borrow of the
        // wheel outlives a call of `with`: the advance drops its borrow
        // before calling into C.
        f(unsafe { &mut *self.wheel.get() })
    }
}

/// The Rust entry behind a C entry pointer, pinned.
///
/// # Safety
/// `entry` is NULL or points to an entry set up by `tw_entry_init` that
/// stays where it is while armed (the rules above).
#[inline(always)]
unsafe fn entry_arg<'a>(entry: *const tw_entry) -> Result<Pin<&'a Entry>, tw_result> {
    // SAFETY: the caller's contract; a `tw_entry` is an `Entry` (same size
    // and alignment, written by `tw_entry_init`).
    let entry = unsafe { arg(entry.cast::<Entry>()) }?;
    // SAFETY: C keeps an armed entry in place until it is cancelled or
    // fired (the rules above), which is what pinning promises.
    Ok(unsafe { Pin::new_unchecked(entry) })
}

/// Makes `*entry` a fresh, unarmed entry whose callback is `callback`.
/// Returns `TW_NULL_POINTER` for a NULL entry or callback. Must not be
/// called on an armed entry.
///
/// Thread safety: any thread, for an entry no other thread uses.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
/// `entry` is writable memory of `sizeof(tw_entry)` bytes that is not an
/// armed entry.
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_entry_init(entry: *mut tw_entry, callback: tw_entry_fn) -> tw_result {
    boundary(|| {
        let entry = out(entry.cast::<Entry>())?;
        callback.ok_or(tw_result::TW_NULL_POINTER)?;
        // SAFETY: checked by `out`; the memory is not an armed entry (the
        // caller's contract), so overwriting it unlinks nothing.
        unsafe { put(entry, TimerEntry::new(callback)) };
        Ok(())
    })
}

/// Creates an empty wheel of embedded timers whose time is `start_tick`
/// and writes it to `*wheel_out`.
///
/// Thread safety: any thread.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_entry_wheel_new(
    start_tick: u64,
    wheel_out: *mut *mut tw_entry_wheel,
) -> tw_result {
    boundary(|| {
        let wheel_out = out(wheel_out)?;
        let wheel = Box::new(tw_entry_wheel {
            wheel: UnsafeCell::new(EmbeddedWheel::starting_at(start_tick)),
            pass: Cell::new(Pass::Idle),
        });
        // SAFETY: checked by `out`.
        unsafe { put(wheel_out, Box::into_raw(wheel)) };
        Ok(())
    })
}

/// Frees the wheel; `NULL` does nothing. Entries still armed are detached:
/// they read as not armed and may be freed or armed on another wheel.
/// Called from inside the wheel's own callback it does nothing. Between the
/// calls of a poll pass (`tw_entry_wheel_poll`) it frees the wheel as
/// anywhere else: entries already handed out are not armed.
///
/// Thread safety: the wheel's thread.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
/// `wheel` is not used after this returns (unless it was called from the
/// wheel's own callback: then it did nothing). Every entry armed on it is
/// still valid memory (armed entries are never freed).
#[no_mangle]
pub unsafe extern "C" fn tw_entry_wheel_free(wheel: *mut tw_entry_wheel) {
    boundary_void(|| {
        if wheel.is_null() {
            return;
        }
        // SAFETY: non-null; came from `tw_entry_wheel_new`.
        if unsafe { &*wheel }.pass.get() == Pass::Advancing {
            return;
        }
        // SAFETY: as above, and no borrow of it is live (not advancing: a
        // poll pass holds none between its calls).
        drop(unsafe { Box::from_raw(wheel) });
    })
}

/// Arms `entry` due `delay_ticks` from now, or, when it is already armed
/// on this wheel, moves it there. O(1), no allocation once the wheel has
/// held as many timers at once. Returns `TW_FOREIGN_ENTRY` when the entry
/// is armed on another wheel.
///
/// Same-tick order: a moved timer counts as newly armed, so it fires after
/// every timer already armed for its new tick, whether it came from a
/// later tick, an earlier one or that same tick (docs/CONTRACT.md item 5).
///
/// Thread safety: the wheel's thread; allowed from its callbacks.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
/// `entry` was set up by `tw_entry_init` and stays in place while armed.
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_entry_schedule(
    wheel: *const tw_entry_wheel,
    entry: *mut tw_entry,
    delay_ticks: u64,
) -> tw_result {
    boundary(|| {
        // SAFETY: the caller's contract.
        let (wheel, entry) = unsafe { (arg(wheel)?, entry_arg(entry)?) };
        wheel.with(|w| w.schedule(entry, delay_ticks))?;
        Ok(())
    })
}

/// `tw_entry_schedule` at the absolute tick `deadline_tick` (a tick at or
/// before now is due at once: the next advance fires it).
///
/// Same-tick order: a moved timer counts as newly armed, so it fires after
/// every timer already armed for its new tick, whether it came from a
/// later tick, an earlier one or that same tick (docs/CONTRACT.md item 5).
///
/// Thread safety: the wheel's thread; allowed from its callbacks.
///
/// # Safety
/// As `tw_entry_schedule`.
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_entry_schedule_at(
    wheel: *const tw_entry_wheel,
    entry: *mut tw_entry,
    deadline_tick: u64,
) -> tw_result {
    boundary(|| {
        // SAFETY: the caller's contract.
        let (wheel, entry) = unsafe { (arg(wheel)?, entry_arg(entry)?) };
        wheel.with(|w| w.schedule_at(entry, deadline_tick))?;
        Ok(())
    })
}

/// Arms or moves `entry` to some tick from `earliest_delay` to
/// `latest_delay` ticks from now (inclusive): an entry armed here whose
/// deadline is already in the window keeps it; otherwise it moves to the
/// window's tick with the most trailing zero bits (fewest cascades, shared
/// wakeups). Writes the deadline to `*tick_out` (may be NULL). Returns
/// `TW_INVALID_RANGE` when `earliest_delay > latest_delay`,
/// `TW_FOREIGN_ENTRY` when the entry is armed on another wheel.
///
/// Same-tick order: a moved timer counts as newly armed, so it fires after
/// every timer already armed for its new tick, whether it came from a
/// later tick, an earlier one or that same tick (docs/CONTRACT.md item 5).
/// A kept timer keeps its place.
///
/// Thread safety: the wheel's thread; allowed from its callbacks.
///
/// # Safety
/// As `tw_entry_schedule`.
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_entry_schedule_in_range(
    wheel: *const tw_entry_wheel,
    entry: *mut tw_entry,
    earliest_delay: u64,
    latest_delay: u64,
    tick_out: *mut u64,
) -> tw_result {
    boundary(|| {
        let tick_out = out_opt(tick_out)?;
        // SAFETY: the caller's contract.
        let (wheel, entry) = unsafe { (arg(wheel)?, entry_arg(entry)?) };
        let tick = wheel.with(|w| w.schedule_in_range(entry, earliest_delay..=latest_delay))?;
        // SAFETY: checked by `out_opt`.
        unsafe { put_opt(tick_out, tick) };
        Ok(())
    })
}

/// Disarms `entry` if it is armed (on whichever wheel). Writes whether it
/// was to `*cancelled_out` (may be NULL). Cancelling an entry that is not
/// armed is fine. Afterwards the entry's memory may be freed.
///
/// Thread safety: the thread of the entry's wheel; allowed from its
/// callbacks.
///
/// # Safety
/// As `tw_entry_schedule`.
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_entry_cancel(
    entry: *mut tw_entry,
    cancelled_out: *mut bool,
) -> tw_result {
    boundary(|| {
        let cancelled_out = out_opt(cancelled_out)?;
        // SAFETY: the caller's contract.
        let entry = unsafe { entry_arg(entry) }?;
        let cancelled = entry.cancel();
        // SAFETY: checked by `out_opt`.
        unsafe { put_opt(cancelled_out, cancelled) };
        Ok(())
    })
}

/// Writes whether `entry` is armed to `*armed_out` and, when it is and
/// `tick_out` is not NULL, its deadline tick to `*tick_out`.
///
/// Thread safety: the thread of the entry's wheel.
///
/// # Safety
/// As `tw_entry_schedule`.
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_entry_deadline(
    entry: *const tw_entry,
    armed_out: *mut bool,
    tick_out: *mut u64,
) -> tw_result {
    boundary(|| {
        let armed_out = out(armed_out)?;
        let tick_out = out_opt(tick_out)?;
        // SAFETY: the caller's contract.
        let entry = unsafe { entry_arg(entry) }?;
        let deadline = entry.deadline();
        // SAFETY: checked by `out` and `out_opt`.
        unsafe {
            put(armed_out, deadline.is_some());
            if let Some(tick) = deadline {
                put_opt(tick_out, tick);
            }
        }
        Ok(())
    })
}

/// Advances the wheel's time to `target_tick`, calling each due entry's
/// callback as `callback(entry, ctx)`, in deadline order (arming order
/// within a tick), at most `max` of them. Writes how many fired to
/// `*expired_out` and whether the target was reached with nothing left due
/// to `*complete_out` (both may be NULL). When the cap stopped it, call
/// again to go on exactly where it stopped. A target before now counts as
/// now. Returns `TW_REENTRANT` from inside the wheel's own callback.
///
/// An advance is a pass of its own (CONTRACT 1): an entry a callback arms
/// for the tick already reached fires in the next advance or poll pass.
/// Called while a poll pass (`tw_entry_wheel_poll`) is open, it ends that
/// pass and begins its own: entries armed during the poll pass for its
/// tick are due in this advance.
///
/// Thread safety: the wheel's thread.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
/// `ctx` is used only during this call.
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_entry_wheel_advance(
    wheel: *const tw_entry_wheel,
    target_tick: u64,
    max: usize,
    ctx: *mut c_void,
    expired_out: *mut usize,
    complete_out: *mut bool,
) -> tw_result {
    let out = Outputs {
        tick: ptr::null_mut(),
        expired: expired_out,
        complete: complete_out,
    };
    // SAFETY: the caller's contract.
    boundary(|| unsafe { advance_with(wheel, Target::Tick(target_tick), max, ctx, out) })
}

/// One step of a loop whose time is virtual (a simulation, a replay,
/// Ratas' benchmark): moves the wheel's time to the next tick an entry is
/// due at, if that is at most `cap` ticks from now (else `cap`
/// ticks on), and calls the callbacks of that tick's entries as
/// `tw_entry_wheel_advance` does, at most `max` of them. The same as
/// `tw_entry_wheel_ticks_to_next_event(wheel, cap, &t)` followed by
/// `tw_entry_wheel_advance(wheel, now + t, ...)`, with one search for the
/// next entry where that takes two, and one call. Entries a callback arms
/// for a later tick wait for the next call, even within `cap`. Writes the
/// wheel's time after the call to `*tick_out`; `*expired_out` and
/// `*complete_out` as for `tw_entry_wheel_advance`, whose target is here
/// the tick reached (all three may be NULL). `tw_wheel_advance_to_next` is
/// the same for the keyed wheel.
///
/// Thread safety: the wheel's thread.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
/// `ctx` is used only during this call.
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_entry_wheel_advance_to_next(
    wheel: *const tw_entry_wheel,
    cap: u64,
    max: usize,
    ctx: *mut c_void,
    tick_out: *mut u64,
    expired_out: *mut usize,
    complete_out: *mut bool,
) -> tw_result {
    let out = Outputs {
        tick: tick_out,
        expired: expired_out,
        complete: complete_out,
    };
    // SAFETY: the caller's contract.
    boundary(|| unsafe { advance_with(wheel, Target::NextEvent(cap), max, ctx, out) })
}

/// Where an advance or a poll goes: to a tick, or to the next event
/// within a cap.
#[derive(Clone, Copy)]
enum Target {
    Tick(u64),
    NextEvent(u64),
}

/// An advance's out-parameters, as the C caller passed them (each may be
/// NULL).
struct Outputs {
    tick: *mut u64,
    expired: *mut usize,
    complete: *mut bool,
}

/// The body of `tw_entry_wheel_advance` and
/// `tw_entry_wheel_advance_to_next`, inside their panic boundaries (one
/// closure each, as for `poll_with`).
///
/// # Safety
/// As theirs.
#[inline(always)]
unsafe fn advance_with(
    wheel: *const tw_entry_wheel,
    target: Target,
    max: usize,
    ctx: *mut c_void,
    out: Outputs,
) -> Result<(), tw_result> {
    {
        let tick_out = out_opt(out.tick)?;
        let expired_out = out_opt(out.expired)?;
        let complete_out = out_opt(out.complete)?;
        // SAFETY: the caller passes NULL or a live wheel.
        let wheel = unsafe { arg(wheel) }?;
        // An open poll pass ends here: `begin_pass` below takes a new fence.
        if wheel.pass.replace(Pass::Advancing) == Pass::Advancing {
            return Err(tw_result::TW_REENTRANT);
        }
        struct Leave<'a>(&'a Cell<Pass>);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                self.0.set(Pass::Idle);
            }
        }
        let _leave = Leave(&wheel.pass);
        // The loop of `EmbeddedWheel::advance_with`, written out so that
        // no borrow of the wheel is live while C runs.
        let now = wheel.with(|w| w.now());
        let (mut target, one_tick) = match target {
            Target::Tick(tick) => (tick.max(now), false),
            Target::NextEvent(cap) => (now.saturating_add(cap), true),
        };
        let mut expired = 0;
        let mut stopped_at_cap = true;
        // One pass (CONTRACT 1): an entry a callback arms for the tick the
        // advance has reached fires in the next advance. A callback cannot
        // unwind out of here (the header forbids it), so the pass always
        // ends below.
        wheel.with(|w| w.begin_pass());
        while expired < max {
            // With `one_tick`, once the pass fired its first entry it has
            // reached its tick: what is left is at `now`, found without a
            // search.
            let popped = wheel.with(|w| {
                if one_tick && expired > 0 {
                    w.poll_entry_now()
                } else {
                    w.poll_entry(target)
                }
            });
            let Some(entry) = popped else {
                stopped_at_cap = false;
                break;
            };
            expired += 1;
            if one_tick {
                // The pass ends with the first entry's tick.
                target = wheel.with(|w| w.now());
            }
            // SAFETY: the entry was armed until now, so it is alive; its
            // callback is read before the call, which may free the entry.
            let callback = unsafe { *entry.as_ref().value() };
            if let Some(callback) = callback {
                // SAFETY: the caller's function; the header forbids
                // unwinding.
                unsafe { callback(entry.as_ptr().cast::<tw_entry>(), ctx) };
            }
        }
        wheel.with(|w| w.end_pass());
        let complete = if stopped_at_cap {
            wheel.with(|w| w.finish_capped_advance(target))
        } else {
            !wheel.with(|w| w.is_due_now())
        };
        // SAFETY: checked by `out_opt`.
        unsafe {
            put_opt(tick_out, wheel.with(|w| w.now()));
            put_opt(expired_out, expired);
            put_opt(complete_out, complete);
        }
        Ok(())
    }
}

/// The pull form of `tw_entry_wheel_advance`: writes the next entry due at
/// or before `target_tick` to `*entry_out` without calling its callback,
/// for a loop that dispatches its timers itself (its own `switch`, on its
/// own stack). The entry is no longer armed: the caller may arm it again,
/// free it or leave it; `tw_entry_wheel_now` reads its deadline tick. When
/// nothing more is due by `target_tick`, writes NULL and the wheel's time
/// is `target_tick` (never backwards: a target before now counts as now).
/// Entries come in deadline order, arming order within a tick, as
/// `tw_entry_wheel_advance` fires them.
///
/// Calls up to and including the one that writes NULL form one pass
/// (CONTRACT 1): an entry armed meanwhile for the tick already reached (a
/// zero delay, a handler re-arming its own entry for now) is handed out by
/// the next pass, after this one wrote NULL: not in this one (which would
/// never end) and not a tick later. The pass writes NULL at the first such
/// entry, leaving the wheel's time on its tick (as an advance stops there
/// and reports itself not complete), and the next pass hands it out first.
/// Between two calls the caller may schedule, cancel and free any entry,
/// free the wheel (the pass ends with it) or advance it (the advance ends
/// the poll pass and begins its own).
///
/// With `callback_out` not NULL, also writes the entry's callback there
/// (NULL with a NULL entry): a loop may call it, or compare it with the
/// handlers it knows and run the hottest inline, without working out from
/// the entry's address which timer it is (`ffi-tests/ratas_workload_entry.c`
/// runs its pace timers that way).
///
/// Returns `TW_REENTRANT` from inside the wheel's own callback (an
/// advance's). docs/C.md shows an event loop's timers phase with it.
///
/// Thread safety: the wheel's thread.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_entry_wheel_poll(
    wheel: *const tw_entry_wheel,
    target_tick: u64,
    entry_out: *mut *mut tw_entry,
    callback_out: *mut tw_entry_fn,
) -> tw_result {
    // A boundary closure of its own, which the compiler inlines here (see
    // `poll_with`).
    // SAFETY: the caller's contract.
    boundary(|| unsafe { poll_with(wheel, Target::Tick(target_tick), entry_out, callback_out) })
}

/// The pull form of `tw_entry_wheel_advance_to_next`: the first call
/// of a pass writes the first entry due within `cap` ticks to
/// `*entry_out` (and moves the wheel's time to its tick); the calls after
/// it in the same pass write the other entries due at that tick, then
/// NULL, which ends the pass. When nothing is due within `cap` ticks, the
/// first call writes NULL and the wheel's time moves `cap` ticks on. The
/// same as `tw_entry_wheel_ticks_to_next_event` followed by
/// `tw_entry_wheel_poll` calls with `now + ticks` as their target, with one
/// search for the next entry where that takes two. `callback_out`, the
/// pass and what the caller may do between calls are as for
/// `tw_entry_wheel_poll`; called while that function's pass is open, it
/// goes on in it with the tick that pass has reached as its target.
///
/// Thread safety: the wheel's thread.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_entry_wheel_poll_to_next(
    wheel: *const tw_entry_wheel,
    cap: u64,
    entry_out: *mut *mut tw_entry,
    callback_out: *mut tw_entry_fn,
) -> tw_result {
    // SAFETY: the caller's contract.
    boundary(|| unsafe { poll_with(wheel, Target::NextEvent(cap), entry_out, callback_out) })
}

/// The body of `tw_entry_wheel_poll` and `tw_entry_wheel_poll_to_next`,
/// inside their panic boundaries. Each of them has a boundary closure of
/// its own, which the compiler inlines into it; one closure shared by both
/// was left out of line, and so were both functions in the C port of Ratas'
/// workload built with cross-language LTO (`ffi-tests/run.sh`, lto).
///
/// # Safety
/// As theirs.
#[inline(always)]
unsafe fn poll_with(
    wheel: *const tw_entry_wheel,
    target: Target,
    entry_out: *mut *mut tw_entry,
    callback_out: *mut tw_entry_fn,
) -> Result<(), tw_result> {
    {
        let entry_out = out(entry_out)?;
        let callback_out = out_opt(callback_out)?;
        // SAFETY: the caller passes NULL or a live wheel.
        let wheel = unsafe { arg(wheel) }?;
        let first = wheel.pass.get() == Pass::Idle;
        wheel.open_poll_pass()?;
        let popped = wheel.with(|w| match target {
            Target::Tick(tick) => w.poll_entry(tick),
            Target::NextEvent(cap) if first => w.poll_entry(w.now().saturating_add(cap)),
            // A pass that has begun stays on the tick it reached: what is
            // left is at now, found without a search.
            Target::NextEvent(_) => w.poll_entry_now(),
        });
        let (entry, callback) = match popped {
            // SAFETY: the entry was armed until now, so it is alive; its
            // callback is read before the caller may free it.
            Some(entry) => (entry.as_ptr().cast::<tw_entry>(), unsafe {
                *entry.as_ref().value()
            }),
            None => {
                wheel.with(|w| w.end_pass());
                wheel.pass.set(Pass::Idle);
                (ptr::null_mut(), None)
            }
        };
        // SAFETY: checked by `out` and `out_opt`.
        unsafe {
            put(entry_out, entry);
            put_opt(callback_out, callback);
        }
        Ok(())
    }
}

/// Ticks from now until the next entry is due, at most `cap`, written to
/// `*ticks_out`: `cap` when nothing is armed, 0 when an entry is due now.
/// Exact (not a bucket boundary).
///
/// Thread safety: the wheel's thread; allowed from its callbacks.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_entry_wheel_ticks_to_next_event(
    wheel: *const tw_entry_wheel,
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

/// Writes the wheel's current tick to `*tick_out` (inside a callback: the
/// firing entry's deadline; after a poll that handed out an entry: that
/// entry's deadline).
///
/// Thread safety: the wheel's thread; allowed from its callbacks.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_entry_wheel_now(
    wheel: *const tw_entry_wheel,
    tick_out: *mut u64,
) -> tw_result {
    boundary(|| {
        let tick_out = out(tick_out)?;
        // SAFETY: the caller passes NULL or a live wheel.
        let wheel = unsafe { arg(wheel) }?;
        // SAFETY: checked by `out`.
        unsafe { put(tick_out, wheel.with(|w| w.now())) };
        Ok(())
    })
}

/// Writes the number of armed entries to `*len_out`.
///
/// Thread safety: the wheel's thread; allowed from its callbacks.
///
/// # Safety
/// The pointer rules (top of tickwheel.h; the ffi module's conventions).
#[must_use]
#[no_mangle]
pub unsafe extern "C" fn tw_entry_wheel_len(
    wheel: *const tw_entry_wheel,
    len_out: *mut usize,
) -> tw_result {
    boundary(|| {
        let len_out = out(len_out)?;
        // SAFETY: the caller passes NULL or a live wheel.
        let wheel = unsafe { arg(wheel) }?;
        // SAFETY: checked by `out`.
        unsafe { put(len_out, wheel.with(|w| w.len())) };
        Ok(())
    })
}

#[cfg(test)]
#[path = "entry_tests.rs"]
mod tests;
