//! The C ABI: everything a C or C++ program links against, and nothing else.
//!
//! The generated header is `include/tickwheel.h` (regenerate with
//! `TICKWHEEL_BLESS=1 cargo test --test header`); `include/tickwheel.hpp` is a
//! header-only C++17 wrapper over it. The module is compiled only with the
//! `capi` feature, so that Rust dependents get no `#[no_mangle]` symbols.
//!
//! The Rust core knows nothing of this module. This module uses the public
//! Rust API, and a few crate-private entry points that exist because C
//! holds timers by raw id rather than by [`Timer`](crate::Timer) handle:
//! `TimerService::inner` and, on the service's shared state, a START that
//! returns a raw id (`start_raw`), `holds_handle` (a stale handle told apart
//! from an inactive timer), and the STOP, STOP_SYNC, RESTART, `is_armed`,
//! RELEASE and DETACH that the `Timer` methods call with their own id; on
//! the wheel, `held` (for `tw_wheel_clear`) and `finish_capped_advance` (for
//! the capped advance loop). Those only the C ABI calls are compiled only
//! with `capi`.
//!
//! # Conventions (the same for every `tw_` function)
//!
//! * **Opaque objects** (`tw_service`, `tw_shard`, `tw_wheel`) are created by a
//!   `_new` (or `_claim`) function that writes a pointer to an output
//!   parameter, and destroyed by the matching `_free` (or `_release`).
//!   Passing `NULL` to a `_free` function does nothing.
//! * **Timer handles** are plain `uint64_t` values: a service's
//!   [`TimerId`](crate::TimerId) as is (`gen << 36 | service tag << 28 |
//!   slot index`). The tag names the service that made the handle (each live
//!   service holds its own, up to 255 at once), so a handle used on another
//!   service is stale there; the generation makes it stale once its slot is
//!   reused. The value 0 is never a valid handle (no service has tag 0). A
//!   handle that outlived its timer is *stale*: using it returns
//!   `TW_STALE_HANDLE` (or the outcome "inactive") and never touches another
//!   timer or freed memory.
//! * **Wheel keys** are a [`TimerKey`](crate::TimerKey) packed as
//!   `gen << 32 | slot index`, plus one, so that 0 is never a valid key;
//!   stale keys behave as stale handles do.
//! * **Results.** Every function that can fail returns a `tw_result`. Its
//!   numbers are fixed for ever; `tw_result_str` names each one. When a
//!   function fails, its output parameters are left untouched and nothing
//!   was changed (except that a `ctx_free` passed to `tw_timer_schedule` has
//!   been called; see there).
//! * **Output parameters come last.** Required outputs are checked for `NULL`
//!   (and alignment) before anything happens, so a bad output pointer never
//!   starts a timer whose handle is then lost. Outputs documented as
//!   "may be NULL" are simply not written when `NULL`.
//! * **Panic boundary.** The body of every exported function runs inside
//!   `catch_unwind`: a Rust panic becomes `TW_PANIC` (or, for functions that
//!   return nothing, is swallowed); it never unwinds into C.
//! * **Callbacks must not unwind.** A C callback (timer callback, `ctx_free`,
//!   wake, wheel expiry) must return normally. A C++ exception or a
//!   `longjmp` out of one is undefined behaviour; C++ callers should make
//!   their callbacks `noexcept` (the C++ wrapper does).
//! * **Thread safety** is stated on each function. In short: service and
//!   timer functions may be called from any thread at any time; a shard
//!   belongs to the thread that claimed it; a wheel is single-threaded.
//! * **Pointer rules: the safety contract of every function.** Every exported
//!   function that takes a pointer is `unsafe` under these rules, stated once
//!   here and at the top of `tickwheel.h`; its own `# Safety` section adds
//!   only what is particular to it. Each pointer argument is `NULL` or valid
//!   for its use: an object from its `_new` or `_claim` function, not yet
//!   freed or released; an input readable; an output writable. Each callback
//!   is a valid function that never unwinds (above), and each context stays
//!   valid, and usable from the threads stated, as long as the function's
//!   documentation says. Each object is used only from the threads its
//!   functions' documentation allows (a `tw_wheel` by one thread at a time).

mod entry;
mod result;
mod service;
mod shard;
mod timer;
mod version;
mod wheel;

pub use entry::{
    tw_entry, tw_entry_cancel, tw_entry_deadline, tw_entry_fn, tw_entry_init, tw_entry_schedule,
    tw_entry_schedule_at, tw_entry_schedule_in_range, tw_entry_wheel, tw_entry_wheel_advance,
    tw_entry_wheel_advance_to_next, tw_entry_wheel_free, tw_entry_wheel_len, tw_entry_wheel_new,
    tw_entry_wheel_now, tw_entry_wheel_poll, tw_entry_wheel_poll_to_next,
    tw_entry_wheel_ticks_to_next_event,
};
pub use result::{tw_result, tw_result_describe, tw_result_str};
pub use service::{
    tw_ms_to_ns, tw_service, tw_service_advance_clock, tw_service_config, tw_service_free,
    tw_service_new, tw_service_now_ns, tw_service_shard_count, tw_service_shutdown,
    tw_service_tick_ns, tw_wake_fn, TW_SERVICE_EMBEDDED, TW_SERVICE_MANUAL_CLOCK,
    TW_SERVICE_NO_LEND, TW_SERVICE_PIN_THREADS,
};
pub use shard::{
    tw_shard, tw_shard_claim, tw_shard_index, tw_shard_next_deadline_ns, tw_shard_next_timeout_ms,
    tw_shard_poll, tw_shard_poll_due, tw_shard_release,
};
pub use timer::{
    tw_callback, tw_ctx_free_fn, tw_expiry, tw_restart, tw_stop, tw_stop_sync,
    tw_timer_deadline_ns, tw_timer_due_in_ns, tw_timer_forget, tw_timer_free, tw_timer_is_armed,
    tw_timer_restart, tw_timer_schedule, tw_timer_spec, tw_timer_start, tw_timer_start_periodic,
    tw_timer_start_within, tw_timer_stop, tw_timer_stop_sync, TW_TIMER_BURST, TW_TIMER_ON_SHARD,
};
pub use version::{
    tw_version, TICKWHEEL_VERSION_MAJOR, TICKWHEEL_VERSION_MINOR, TICKWHEEL_VERSION_PATCH,
};
pub use wheel::{
    tw_wheel, tw_wheel_advance, tw_wheel_advance_keep, tw_wheel_cancel, tw_wheel_clear,
    tw_wheel_collect, tw_wheel_deadline, tw_wheel_due, tw_wheel_expired_fn, tw_wheel_free,
    tw_wheel_len, tw_wheel_new, tw_wheel_next_event, tw_wheel_now, tw_wheel_reschedule,
    tw_wheel_reschedule_after, tw_wheel_reschedule_in_range, tw_wheel_reschedule_in_range_after,
    tw_wheel_schedule, tw_wheel_schedule_after, tw_wheel_schedule_in_range,
    tw_wheel_schedule_in_range_after, tw_wheel_schedule_in_range_at, tw_wheel_ticks_to_next_event,
};

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;

/// Runs the body of an exported function behind the panic boundary: `Ok`
/// becomes `TW_OK`, `Err(code)` that code, and a panic `TW_PANIC`.
#[inline(always)]
pub(crate) fn boundary(body: impl FnOnce() -> Result<(), tw_result>) -> tw_result {
    // AssertUnwindSafe: after a panic the caller only sees `TW_PANIC`; every
    // object reachable from it is either untouched or was left consistent by
    // the Rust core, which catches its own callbacks' panics.
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => tw_result::TW_OK,
        Ok(Err(code)) => code,
        Err(_) => tw_result::TW_PANIC,
    }
}

/// The panic boundary for functions that return nothing (`_free`).
pub(crate) fn boundary_void(body: impl FnOnce()) {
    // A panic here has nowhere to be reported but stderr (the default hook
    // already printed it); swallowing it keeps it out of C.
    let _ = catch_unwind(AssertUnwindSafe(body));
}

/// Checks an input pointer and borrows what it points to.
///
/// # Safety
/// `ptr` must be `NULL` or point to a live `T` that nothing mutates for `'a`
/// (other than through `T`'s own interior mutability).
#[inline(always)]
pub(crate) unsafe fn arg<'a, T>(ptr: *const T) -> Result<&'a T, tw_result> {
    if ptr.is_null() {
        return Err(tw_result::TW_NULL_POINTER);
    }
    if !ptr.is_aligned() {
        return Err(tw_result::TW_INVALID_ARGUMENT);
    }
    // SAFETY: non-null and aligned; validity is the caller's contract.
    Ok(unsafe { &*ptr })
}

/// Checks a required output pointer before anything else happens; write it
/// later with [`put`].
#[inline(always)]
pub(crate) fn out<T>(ptr: *mut T) -> Result<NonNull<T>, tw_result> {
    let ptr = NonNull::new(ptr).ok_or(tw_result::TW_NULL_POINTER)?;
    if !ptr.as_ptr().is_aligned() {
        return Err(tw_result::TW_INVALID_ARGUMENT);
    }
    Ok(ptr)
}

/// Checks an optional output pointer (`NULL` allowed).
#[inline(always)]
pub(crate) fn out_opt<T>(ptr: *mut T) -> Result<Option<NonNull<T>>, tw_result> {
    if ptr.is_null() {
        return Ok(None);
    }
    out(ptr).map(Some)
}

/// Writes an output checked by [`out`].
///
/// # Safety
/// `ptr` must be valid for a write of `T` (it may be uninitialised).
#[inline(always)]
pub(crate) unsafe fn put<T>(ptr: NonNull<T>, value: T) {
    // SAFETY: the caller's contract; `write` does not read or drop the old value.
    unsafe { ptr.as_ptr().write(value) }
}

/// Writes an output checked by [`out_opt`], if there is one.
///
/// # Safety
/// As [`put`].
#[inline(always)]
pub(crate) unsafe fn put_opt<T>(ptr: Option<NonNull<T>>, value: T) {
    if let Some(ptr) = ptr {
        // SAFETY: forwarded.
        unsafe { put(ptr, value) }
    }
}

/// A C pointer that C promises may cross threads (its `ctx` arguments).
#[derive(Clone, Copy)]
pub(crate) struct CPtr(pub(crate) *mut std::ffi::c_void);

// SAFETY: tickwheel never dereferences a `ctx`; it only hands it back to the
// C function it came with, on whichever thread the docs say. The header
// states that such contexts must be usable from those threads.
unsafe impl Send for CPtr {}
// SAFETY: as above.
unsafe impl Sync for CPtr {}

#[cfg(test)]
mod tests;
