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
