//! Rust-side checks of the C ABI (the C and C++ tests in `ffi-tests/` cover
//! it from the other side). Small enough for Miri.

use std::ffi::{c_void, CStr};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::wheel::{tw_wheel_advance_keep, tw_wheel_advance_to_next};
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

/// CONTRACT 14 through the C ABI: a handle of one service, used on another,
/// is refused and leaves that service's timers alone. The first timers of
/// two services are where ids would collide without the service's tag in
/// the handle: `tw_timer_stop(b, handle_from_a)` would cancel b's own timer.
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

/// What the callback of `c_advance_matches_wheel_advance` records and does.
struct Driven {
    wheel: *const tw_wheel,
    keep: bool,
    fired: Vec<(usize, u64)>,
}

/// Every third timer is armed again from its callback, 0..=4 ticks later
/// (0: due at the tick being processed, so the same advance must fire it;
/// only after an odd number of firings in all, so that it stops).
fn rearms(value: usize, deadline: u64, fired: usize) -> bool {
    value % 3 == 0 && deadline < 4000 && (value % 5 != 0 || fired % 2 == 1)
}

/// A Rust `Wheel` and a C wheel holding the same `timers` timers (payload
/// `x` for the `x`-th), on level 0 and higher levels, several sharing ticks.
///
/// # Safety
/// The caller frees the C wheel with `tw_wheel_free`.
unsafe fn twin_wheels(timers: usize) -> (crate::Wheel<usize>, *mut tw_wheel) {
    let mut rust = crate::Wheel::<usize>::new();
    let mut c = ptr::null_mut();
    // SAFETY: every pointer is a live local; `c` is live once created.
    unsafe {
        assert_eq!(tw_wheel_new(0, &mut c), tw_result::TW_OK);
        for x in 1..=timers {
            let deadline = if x % 10 == 0 {
                10_000 + x as u64 * 97
            } else {
                (x as u64 * 7919) % 3000
            };
            rust.insert_at(deadline, x);
            let mut key = 0;
            let payload = std::ptr::without_provenance_mut(x);
            assert_eq!(
                tw_wheel_schedule(c, deadline, payload, &mut key),
                tw_result::TW_OK
            );
        }
    }
    (rust, c)
}

/// What `drive` does on the C side, on the Rust `Wheel`: log the timer and
/// maybe arm it again.
fn rust_fired(
    expected: &mut Vec<(usize, u64)>,
    keep: bool,
    wheel: &mut crate::Wheel<usize>,
    timer: crate::Expired<usize>,
) {
    expected.push((timer.value, timer.deadline));
    if rearms(timer.value, timer.deadline, expected.len()) {
        let delay = (timer.value % 5) as u64;
        if keep {
            wheel.reschedule(timer.key, delay).unwrap();
        } else {
            wheel.insert(delay, timer.value);
        }
    }
}

unsafe extern "C" fn drive(ctx: *mut c_void, key: u64, deadline: u64, payload: *mut c_void) {
    // SAFETY: `ctx` is the test's live `Driven`.
    let driven = unsafe { &mut *ctx.cast::<Driven>() };
    let value = payload.addr();
    driven.fired.push((value, deadline));
    if rearms(value, deadline, driven.fired.len()) {
        let delay = (value % 5) as u64;
        // SAFETY: the wheel is live for the whole test.
        let result = unsafe {
            if driven.keep {
                tw_wheel_reschedule_after(driven.wheel, key, delay)
            } else {
                let mut key = 0;
                tw_wheel_schedule_after(driven.wheel, delay, payload, &mut key)
            }
        };
        assert_eq!(result, tw_result::TW_OK);
    }
}

/// `tw_wheel_advance(_keep)` writes its own loop (no borrow of the wheel
/// may be live while C runs) with `Wheel::advance`'s shortcut after each
/// callback; it must fire the same timers at the same ticks, in the same
/// order, and report the same counts, completion and time as
/// `Wheel::advance(_keep)`, with caps and re-arming callbacks.
#[test]
fn c_advance_matches_wheel_advance() {
    // Smaller under Miri (its ffi:: step in .ci/run runs this too).
    let (timers, steps) = if cfg!(miri) { (12, 16) } else { (120, 150) };
    for keep in [false, true] {
        // SAFETY: `c` comes from `twin_wheels` and is freed last; every
        // other pointer is a live local.
        unsafe {
            let (mut rust, c) = twin_wheels(timers);
            let mut driven = Driven {
                wheel: c,
                keep,
                fired: Vec::new(),
            };
            let mut expected = Vec::new();
            let mut target = 0u64;
            for step in 0..steps {
                target += (step * 37) % 300 + 1;
                let max = [usize::MAX, 1, 3, 7][step as usize % 4];
                let on_expired = |wheel: &mut crate::Wheel<usize>, timer: crate::Expired<usize>| {
                    rust_fired(&mut expected, keep, wheel, timer);
                };
                let want = if keep {
                    rust.advance_keep(target, max, on_expired)
                } else {
                    rust.advance(target, max, on_expired)
                };
                let (mut expired, mut complete) = (0usize, false);
                let ctx = (&raw mut driven).cast::<c_void>();
                let advance = if keep {
                    tw_wheel_advance_keep
                } else {
                    tw_wheel_advance
                };
                assert_eq!(
                    advance(
                        c,
                        target,
                        max,
                        Some(drive),
                        ctx,
                        &mut expired,
                        &mut complete
                    ),
                    tw_result::TW_OK
                );
                let mut now = 0;
                assert_eq!(tw_wheel_now(c, &mut now), tw_result::TW_OK);
                assert_eq!(
                    (expired, complete, now),
                    (want.expired, want.complete, rust.now()),
                    "keep {keep}, step {step}, target {target}, max {max}"
                );
            }
            assert_eq!(driven.fired, expected, "keep {keep}");
            assert!(expected.len() > timers, "too few timers fired to compare");
            tw_wheel_free(c);
        }
    }
}

/// `tw_wheel_advance_to_next` is `ticks_to_next_event(cap)` followed by an
/// advance to now plus that: the same timers at the same ticks in the same
/// order, the same counts, completion and time as the Rust `Wheel` doing
/// those two steps, with caps, short horizons and re-arming callbacks.
#[test]
fn c_advance_to_next_matches_next_event_then_advance() {
    let (timers, steps) = if cfg!(miri) { (12, 80) } else { (120, 400) };
    for keep in [false, true] {
        // SAFETY: `c` comes from `twin_wheels` and is freed last; every
        // other pointer is a live local.
        unsafe {
            let (mut rust, c) = twin_wheels(timers);
            let mut driven = Driven {
                wheel: c,
                keep,
                fired: Vec::new(),
            };
            let mut expected = Vec::new();
            for step in 0..steps {
                // Horizons shorter and longer than the gaps between timers,
                // and 0 (only what is due now).
                let cap = [0u64, 5, 50, 500, 5000][step % 5];
                let max = [usize::MAX, 1, 3, 7][step % 4];
                let on_expired = |wheel: &mut crate::Wheel<usize>, timer: crate::Expired<usize>| {
                    rust_fired(&mut expected, keep, wheel, timer);
                };
                let target = rust.now() + rust.ticks_to_next_event(cap);
                let want = if keep {
                    rust.advance_keep(target, max, on_expired)
                } else {
                    rust.advance(target, max, on_expired)
                };
                let (mut expired, mut complete, mut now) = (0usize, false, 0u64);
                let ctx = (&raw mut driven).cast::<c_void>();
                assert_eq!(
                    tw_wheel_advance_to_next(
                        c,
                        cap,
                        keep,
                        max,
                        Some(drive),
                        ctx,
                        &mut now,
                        &mut expired,
                        &mut complete
                    ),
                    tw_result::TW_OK
                );
                assert_eq!(
                    (expired, complete, now),
                    (want.expired, want.complete, rust.now()),
                    "keep {keep}, step {step}, cap {cap}, max {max}"
                );
            }
            assert_eq!(driven.fired, expected, "keep {keep}");
            assert!(expected.len() > timers, "too few timers fired to compare");
            // Errors move no time.
            let mut before = 0;
            assert_eq!(tw_wheel_now(c, &mut before), tw_result::TW_OK);
            assert_eq!(
                tw_wheel_advance_to_next(
                    c,
                    100,
                    keep,
                    1,
                    None,
                    ptr::null_mut(),
                    ptr::null_mut(),
                    ptr::null_mut(),
                    ptr::null_mut()
                ),
                tw_result::TW_NULL_POINTER
            );
            let mut after = 0;
            assert_eq!(tw_wheel_now(c, &mut after), tw_result::TW_OK);
            assert_eq!(before, after);
            tw_wheel_free(c);
        }
    }
}
