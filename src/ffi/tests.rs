//! Rust-side checks of the C ABI (the C and C++ tests in `ffi-tests/` cover
//! it from the other side). Small enough for Miri.

use std::ffi::{c_void, CStr};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

fn name(result: tw_result) -> &'static str {
    // SAFETY: `tw_result_str` returns a static NUL-terminated string.
    unsafe { CStr::from_ptr(tw_result_str(result as u32)) }
        .to_str()
        .unwrap()
}

#[test]
fn result_names_and_unknown_codes() {
    assert_eq!(name(tw_result::TW_OK), "TW_OK");
    assert_eq!(name(tw_result::TW_PANIC), "TW_PANIC");
    // SAFETY: static strings.
    let unknown = unsafe { CStr::from_ptr(tw_result_str(u32::MAX)) };
    assert_eq!(unknown.to_str().unwrap(), "TW_UNKNOWN");
    // SAFETY: static strings.
    let text = unsafe { CStr::from_ptr(tw_result_describe(3)) };
    assert!(text.to_str().unwrap().contains("no live timer"));
}

#[test]
fn panics_become_a_result_code() {
    let result = boundary(|| panic!("inside the boundary"));
    assert_eq!(result, tw_result::TW_PANIC);
    boundary_void(|| panic!("inside the void boundary"));
}

#[test]
fn null_and_misaligned_pointers_are_refused() {
    // SAFETY: every pointer passed is NULL, a live local, or deliberately
    // misaligned (which the functions refuse before reading or writing).
    unsafe { null_and_misaligned() }
}

/// # Safety
/// Only for the test above.
unsafe fn null_and_misaligned() {
    // SAFETY: the caller's contract (see the test).
    unsafe {
        assert_eq!(
            tw_service_new(ptr::null(), ptr::null_mut()),
            tw_result::TW_NULL_POINTER
        );
        let mut count = 0usize;
        assert_eq!(
            tw_service_shard_count(ptr::null(), &mut count),
            tw_result::TW_NULL_POINTER
        );
        let mut bytes = [0u64; 2];
        let misaligned = (bytes.as_mut_ptr() as *mut u8).wrapping_add(1) as *mut u64;
        assert_eq!(
            tw_wheel_now(ptr::null(), misaligned),
            tw_result::TW_INVALID_ARGUMENT
        );
        tw_service_free(ptr::null_mut());
        tw_wheel_free(ptr::null_mut());
        assert_eq!(tw_shard_release(ptr::null_mut()), tw_result::TW_OK);
    }
}

unsafe extern "C" fn count_expired(ctx: *mut c_void, _key: u64, _at: u64, payload: *mut c_void) {
    // SAFETY: the test passes a live counter.
    let counter = unsafe { &*(ctx as *const AtomicUsize) };
    counter.fetch_add(payload as usize, Ordering::Relaxed);
}

#[test]
fn wheel_round_trip() {
    // SAFETY: the wheel pointer comes from `tw_wheel_new` and is freed last;
    // every other pointer is a live local.
    unsafe { wheel_round_trip_inner() }
}

/// # Safety
/// Only for the test above.
unsafe fn wheel_round_trip_inner() {
    // SAFETY: the caller's contract (see the test).
    unsafe {
        let mut wheel = ptr::null_mut();
        assert_eq!(tw_wheel_new(100, &mut wheel), tw_result::TW_OK);
        let mut key = 0u64;
        assert_eq!(
            tw_wheel_schedule(wheel, 105, std::ptr::without_provenance_mut(1), &mut key),
            tw_result::TW_OK
        );
        let mut stale = 0u64;
        assert_eq!(
            tw_wheel_schedule_in_range(
                wheel,
                110,
                120,
                std::ptr::without_provenance_mut(10),
                &mut stale
            ),
            tw_result::TW_OK
        );
        assert_eq!(
            tw_wheel_cancel(wheel, stale, ptr::null_mut()),
            tw_result::TW_OK
        );
        assert_eq!(
            tw_wheel_cancel(wheel, stale, ptr::null_mut()),
            tw_result::TW_STALE_HANDLE
        );
        let counter = AtomicUsize::new(0);
        let (mut expired, mut complete) = (0usize, false);
        let ctx = &counter as *const AtomicUsize as *mut c_void;
        assert_eq!(
            tw_wheel_advance(
                wheel,
                200,
                8,
                Some(count_expired),
                ctx,
                &mut expired,
                &mut complete
            ),
            tw_result::TW_OK
        );
        assert_eq!(
            (expired, complete, counter.load(Ordering::Relaxed)),
            (1, true, 1)
        );
        let mut now = 0u64;
        assert_eq!(tw_wheel_now(wheel, &mut now), tw_result::TW_OK);
        assert_eq!(now, 200);
        tw_wheel_free(wheel);
    }
}

unsafe extern "C" fn never_called(_ctx: *mut c_void, _expiry: *const tw_expiry) {
    panic!("an hour-long timer fired in a test that lasts milliseconds");
}

/// CONTRACT 14 through the C ABI (issue 12 item 5): the first timer of each
/// of two services used to get the same handle, and `tw_timer_stop(b,
/// handle_from_a)` returned `TW_OK`/cancelled, disarming b's own timer.
#[test]
fn a_handle_used_on_the_wrong_service_is_refused() {
    // SAFETY: both services come from `tw_service_new` and are freed last;
    // every other pointer is a live local.
    unsafe {
        let config = tw_service_config {
            shards: 1,
            tick_ns: 0,
            flags: TW_SERVICE_EMBEDDED | TW_SERVICE_MANUAL_CLOCK,
            wake: None,
            wake_ctx: ptr::null_mut(),
        };
        let (mut a, mut b) = (ptr::null_mut(), ptr::null_mut());
        assert_eq!(tw_service_new(&config, &mut a), tw_result::TW_OK);
        assert_eq!(tw_service_new(&config, &mut b), tw_result::TW_OK);
        let hour = 3_600_000_000_000;
        let (mut timer_a, mut timer_b) = (0u64, 0u64);
        let start = |service, timer| {
            tw_timer_start(service, hour, Some(never_called), ptr::null_mut(), timer)
        };
        assert_eq!(start(a, &mut timer_a), tw_result::TW_OK);
        assert_eq!(start(b, &mut timer_b), tw_result::TW_OK);
        assert_ne!(timer_a, timer_b);
        let mut outcome = tw_stop::TW_STOP_CANCELLED;
        assert_eq!(
            tw_timer_stop(b, timer_a, &mut outcome),
            tw_result::TW_STALE_HANDLE
        );
        let mut armed = false;
        assert_eq!(tw_timer_is_armed(b, timer_b, &mut armed), tw_result::TW_OK);
        assert!(armed, "b's own timer was disarmed by a's handle");
        assert_eq!(tw_timer_stop(b, timer_b, &mut outcome), tw_result::TW_OK);
        assert_eq!(outcome, tw_stop::TW_STOP_CANCELLED);
        assert_eq!(tw_timer_free(a, timer_a), tw_result::TW_OK);
        assert_eq!(tw_timer_free(b, timer_b), tw_result::TW_OK);
        tw_service_free(a);
        tw_service_free(b);
    }
}
