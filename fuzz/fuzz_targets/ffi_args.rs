//! The C ABI with arbitrary arguments.
//!
//! Every `tw_*` entry point is called, in a sequence decoded from the input,
//! with arbitrary integers (delays, periods, ranges, flags, shard indices,
//! clock steps, caps, result codes) and arbitrary handles and keys: live
//! ones, freed ones, and random 64-bit values. Pointers are only what the
//! header allows: NULL, or valid for their use (passing garbage non-NULL
//! pointers is outside any C contract). Checked:
//!
//! * nothing crashes, and no call returns `TW_PANIC` (a tickwheel panic
//!   caught at the boundary is still a bug);
//! * every call returns a known result code, and `tw_result_str` /
//!   `tw_result_describe` name any `u32` with a NUL-terminated string;
//! * NULL where a pointer is required gives `TW_NULL_POINTER`;
//! * an advance of embedded entries (`tw_entry`) runs each fired entry's
//!   callback once, a poll hands out only disarmed entries, and freeing
//!   their wheel disarms every entry;
//! * every `ctx_free` runs exactly once by the time the service is freed
//!   (no leaked or doubly freed context).
#![no_main]

use std::ffi::{c_void, CStr};
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicI64, Ordering::SeqCst};

use libfuzzer_sys::fuzz_target;
use tickwheel::ffi::*;

/// Contexts handed to `tw_timer_schedule` and not yet freed.
static LIVE_CONTEXTS: AtomicI64 = AtomicI64::new(0);

unsafe extern "C" fn on_expiry(ctx: *mut c_void, expiry: *const tw_expiry) {
    assert!(!expiry.is_null());
    if !ctx.is_null() {
        // SAFETY: every non-null ctx here is a live `Box<u64>` from `schedule`.
        unsafe { *(ctx as *mut u64) += 1 };
    }
}

unsafe extern "C" fn free_ctx(ctx: *mut c_void) {
    // SAFETY: `ctx` came from `Box::into_raw` in `schedule`, freed once here.
    drop(unsafe { Box::from_raw(ctx as *mut u64) });
    LIVE_CONTEXTS.fetch_sub(1, SeqCst);
}

unsafe extern "C" fn on_wheel_expiry(
    _ctx: *mut c_void,
    _key: u64,
    _deadline: u64,
    _payload: *mut c_void,
) {
}

/// Counts the embedded entries an advance fired (its `ctx`, when not NULL).
unsafe extern "C" fn on_entry(_entry: *mut tw_entry, ctx: *mut c_void) {
    if !ctx.is_null() {
        // SAFETY: every non-null ctx here is a live local `u64`.
        unsafe { *(ctx as *mut u64) += 1 };
    }
}

/// How many embedded entries (`tw_entry`) the target arms, in place.
const ENTRIES: usize = 16;

/// Reads the fuzz input as a stream of integers; zeros when it runs out.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        let (first, rest) = self.0.split_first().map_or((0, &[][..]), |(f, r)| (*f, r));
        self.0 = rest;
        first
    }
    fn u64(&mut self) -> u64 {
        // Mostly small values (the interesting range), sometimes any value.
        match self.u8() % 4 {
            0 => self.u8() as u64,
            1 => (self.u8() as u64) * 1_000_000,
            2 => u64::from_le_bytes(std::array::from_fn(|_| self.u8())),
            _ => u64::MAX - self.u8() as u64,
        }
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn known(result: tw_result) -> tw_result {
    assert_ne!(
        result,
        tw_result::TW_PANIC,
        "tickwheel panicked behind the C boundary"
    );
    assert!((result as u32) <= tw_result::TW_PANIC as u32);
    result
}

fuzz_target!(|data: &[u8]| {
    let mut input = Bytes(data);
    // Bad configurations first: arbitrary fields, at most 4 shards so that
    // a threaded service stays cheap.
    let config = tw_service_config {
        shards: (input.u8() % 5) as usize,
        tick_ns: if input.u8() % 2 == 0 { 0 } else { input.u64() },
        flags: match input.u8() % 4 {
            0 => TW_SERVICE_EMBEDDED | TW_SERVICE_MANUAL_CLOCK,
            1 => TW_SERVICE_MANUAL_CLOCK,
            2 => TW_SERVICE_EMBEDDED,
            _ => input.u8() as u32,
        },
        wake: None,
        wake_ctx: null_mut(),
    };
    let mut service: *mut tw_service = null_mut();
    // SAFETY (every call below): arguments are NULL or valid, as the header asks.
    unsafe {
        assert_eq!(
            tw_service_new(&config, null_mut()),
            tw_result::TW_NULL_POINTER
        );
        if known(tw_service_new(&config, &mut service)) != tw_result::TW_OK {
            assert!(service.is_null(), "output written on failure");
            let fallback = tw_service_config {
                shards: 1,
                tick_ns: 0,
                flags: TW_SERVICE_EMBEDDED | TW_SERVICE_MANUAL_CLOCK,
                wake: None,
                wake_ctx: null_mut(),
            };
            assert_eq!(tw_service_new(&fallback, &mut service), tw_result::TW_OK);
        }
    }
    let mut handles: Vec<u64> = Vec::new();
    let mut shards: Vec<*mut tw_shard> = Vec::new();
    let mut wheel: *mut tw_wheel = null_mut();
    let mut keys: Vec<u64> = Vec::new();
    // Embedded timers: entries that never move (a boxed slice, freed after
    // their wheel, which disarms them), each set up once before any use.
    let entries: *mut tw_entry = Box::into_raw(Box::<[tw_entry]>::new_uninit_slice(ENTRIES)).cast();
    let mut entry_wheel: *mut tw_entry_wheel = null_mut();
    // SAFETY: `entries` holds room for ENTRIES entries, none armed.
    unsafe {
        assert_eq!(tw_entry_init(entries, None), tw_result::TW_NULL_POINTER);
        assert_eq!(
            tw_entry_init(null_mut(), Some(on_entry)),
            tw_result::TW_NULL_POINTER
        );
        for i in 0..ENTRIES {
            assert_eq!(
                tw_entry_init(entries.add(i), Some(on_entry)),
                tw_result::TW_OK
            );
        }
    }

    let mut steps = 0;
    while !input.is_empty() && steps < 200 {
        steps += 1;
        let pick = input.u8() as usize;
        let handle = if handles.is_empty() || pick % 3 == 0 {
            input.u64()
        } else {
            handles[pick % handles.len()]
        };
        let svc = if input.u8() % 16 == 0 {
            null()
        } else {
            service as *const tw_service
        };
        // SAFETY (every call below): as above.
        unsafe {
            let op = input.u8() % 28;
            let result = match op {
                0 => {
                    let mut id = 0;
                    let r = tw_timer_start(svc, input.u64(), Some(on_expiry), null_mut(), &mut id);
                    if r == tw_result::TW_OK {
                        handles.push(id)
                    }
                    r
                }
                1 => {
                    let mut id = 0;
                    let r = tw_timer_start_periodic(
                        svc,
                        input.u64(),
                        Some(on_expiry),
                        null_mut(),
                        &mut id,
                    );
                    if r == tw_result::TW_OK {
                        handles.push(id)
                    }
                    r
                }
                2 => {
                    let mut id = 0;
                    let r = tw_timer_start_within(
                        svc,
                        input.u64(),
                        input.u64(),
                        Some(on_expiry),
                        null_mut(),
                        &mut id,
                    );
                    if r == tw_result::TW_OK {
                        handles.push(id)
                    }
                    r
                }
                3 => {
                    let spec = tw_timer_spec {
                        delay_ns: input.u64(),
                        latest_ns: input.u64(),
                        period_ns: if input.u8() % 2 == 0 { 0 } else { input.u64() },
                        flags: input.u8() as u32 % 8,
                        shard: input.u8() as usize % 6,
                    };
                    let ctx = Box::into_raw(Box::new(0u64)) as *mut c_void;
                    LIVE_CONTEXTS.fetch_add(1, SeqCst);
                    let mut id = 0;
                    let callback = if input.u8() % 8 == 0 {
                        None
                    } else {
                        Some(on_expiry as unsafe extern "C" fn(_, _))
                    };
                    // ctx_free runs exactly once, also when this call fails.
                    let r = tw_timer_schedule(svc, &spec, callback, ctx, Some(free_ctx), &mut id);
                    if r == tw_result::TW_OK {
                        handles.push(id)
                    }
                    r
                }
                4 => {
                    let mut outcome = tw_stop::TW_STOP_INACTIVE;
                    tw_timer_stop(
                        svc,
                        handle,
                        if pick % 2 == 0 {
                            null_mut()
                        } else {
                            &mut outcome
                        },
                    )
                }
                5 => tw_timer_stop_sync(svc, handle, null_mut()),
                6 => tw_timer_restart(svc, handle, input.u64(), null_mut()),
                7 => {
                    let mut armed = false;
                    tw_timer_is_armed(svc, handle, &mut armed)
                }
                8 => tw_timer_free(svc, handle),
                9 => tw_timer_forget(svc, handle),
                10 => tw_service_advance_clock(svc, input.u64() % 10_000_000_000),
                11 => {
                    let mut shard = null_mut();
                    let r = tw_shard_claim(svc, input.u8() as usize % 6, &mut shard);
                    if r == tw_result::TW_OK {
                        shards.push(shard)
                    }
                    r
                }
                12 | 13 | 14 | 15 if !shards.is_empty() => {
                    let shard = shards[pick % shards.len()];
                    match input.u8() % 5 {
                        0 => tw_shard_poll(shard, null_mut()),
                        1 => {
                            let mut ns = 0;
                            tw_shard_next_deadline_ns(shard, &mut ns)
                        }
                        2 => {
                            let mut ms = 0;
                            tw_shard_next_timeout_ms(shard, &mut ms)
                        }
                        3 => {
                            let mut i = 0;
                            tw_shard_index(shard, &mut i)
                        }
                        _ => {
                            shards.retain(|&s| s != shard);
                            tw_shard_release(shard)
                        }
                    }
                }
                16 => {
                    for code in [input.u8() as u32, input.u64() as u32] {
                        let name = tw_result_str(code);
                        let text = tw_result_describe(code);
                        assert!(!name.is_null() && !text.is_null());
                        assert!(!CStr::from_ptr(name).to_bytes().is_empty());
                    }
                    tw_result::TW_OK
                }
                17 => {
                    let mut n = 0;
                    tw_service_shard_count(svc, if pick % 4 == 0 { null_mut() } else { &mut n })
                }
                18 if pick % 8 == 0 => tw_service_shutdown(svc),
                19 | 20 | 21 | 22 => {
                    if wheel.is_null() {
                        known(tw_wheel_new(input.u64(), &mut wheel));
                    }
                    let key = if keys.is_empty() || pick % 3 == 0 {
                        input.u64()
                    } else {
                        keys[pick % keys.len()]
                    };
                    let w = if input.u8() % 16 == 0 {
                        null()
                    } else {
                        wheel as *const tw_wheel
                    };
                    match input.u8() % 9 {
                        0 => {
                            let mut k = 0;
                            let r = tw_wheel_schedule(w, input.u64(), null_mut(), &mut k);
                            if r == tw_result::TW_OK {
                                keys.push(k)
                            }
                            r
                        }
                        1 => {
                            let mut k = 0;
                            let r = tw_wheel_schedule_in_range(
                                w,
                                input.u64(),
                                input.u64(),
                                null_mut(),
                                &mut k,
                            );
                            if r == tw_result::TW_OK {
                                keys.push(k)
                            }
                            r
                        }
                        2 => tw_wheel_reschedule(w, key, input.u64()),
                        3 => {
                            let mut p = null_mut();
                            tw_wheel_cancel(w, key, &mut p)
                        }
                        4 => {
                            let (mut n, mut done) = (0, false);
                            tw_wheel_advance(
                                w,
                                input.u64(),
                                input.u8() as usize,
                                Some(on_wheel_expiry),
                                null_mut(),
                                &mut n,
                                &mut done,
                            )
                        }
                        5 => {
                            let mut t = 0;
                            tw_wheel_ticks_to_next_event(w, input.u64(), &mut t)
                        }
                        6 => {
                            let mut t = 0;
                            tw_wheel_now(w, &mut t)
                        }
                        7 => {
                            let mut n = 0;
                            tw_wheel_len(w, &mut n)
                        }
                        _ => tw_wheel_clear(w, Some(on_wheel_expiry), null_mut()),
                    }
                }
                23..=26 => {
                    if entry_wheel.is_null() {
                        known(tw_entry_wheel_new(input.u64(), &mut entry_wheel));
                    }
                    let w = if input.u8() % 16 == 0 {
                        null()
                    } else {
                        entry_wheel as *const tw_entry_wheel
                    };
                    let e = if pick % 16 == 0 {
                        null_mut()
                    } else {
                        entries.add(pick % ENTRIES)
                    };
                    match input.u8() % 10 {
                        0 => tw_entry_schedule(w, e, input.u64()),
                        1 => tw_entry_schedule_at(w, e, input.u64()),
                        2 => {
                            let mut tick = 0;
                            let out = if pick % 4 == 0 { null_mut() } else { &mut tick };
                            tw_entry_schedule_in_range(w, e, input.u64(), input.u64(), out)
                        }
                        3 => {
                            let mut cancelled = false;
                            tw_entry_cancel(e, &mut cancelled)
                        }
                        4 => {
                            let (mut armed, mut tick) = (false, 0);
                            tw_entry_deadline(e, &mut armed, &mut tick)
                        }
                        5 => {
                            let (mut fired, mut n, mut done) = (0u64, 0, false);
                            let ctx = if pick % 2 == 0 {
                                null_mut()
                            } else {
                                &raw mut fired
                            };
                            // An advance to a tick, or to the next event
                            // within a cap.
                            let r = if input.u8() % 2 == 0 {
                                tw_entry_wheel_advance(
                                    w,
                                    input.u64(),
                                    input.u8() as usize,
                                    ctx.cast(),
                                    &mut n,
                                    &mut done,
                                )
                            } else {
                                let mut tick = 0;
                                tw_entry_wheel_advance_to_next(
                                    w,
                                    input.u64(),
                                    input.u8() as usize,
                                    ctx.cast(),
                                    &mut tick,
                                    &mut n,
                                    &mut done,
                                )
                            };
                            if r == tw_result::TW_OK && !ctx.is_null() {
                                assert_eq!(fired, n as u64, "each fired entry's callback ran once");
                            }
                            r
                        }
                        6 => {
                            // Some polls of a pass, or the whole of it: to
                            // a tick, or to the next event within a cap.
                            let target = input.u64();
                            let to_next = input.u8() % 2 == 0;
                            let mut r = tw_result::TW_OK;
                            for _ in 0..=input.u8() % 8 {
                                let (mut got, mut callback) = (null_mut(), None);
                                r = if to_next {
                                    tw_entry_wheel_poll_to_next(w, target, &mut got, &mut callback)
                                } else {
                                    tw_entry_wheel_poll(w, target, &mut got, &mut callback)
                                };
                                if r != tw_result::TW_OK || got.is_null() {
                                    assert!(callback.is_none() || r != tw_result::TW_OK);
                                    break;
                                }
                                assert!(callback.is_some(), "a polled entry has its callback");
                                let mut armed = true;
                                assert_eq!(
                                    tw_entry_deadline(got, &mut armed, null_mut()),
                                    tw_result::TW_OK
                                );
                                assert!(!armed, "a polled entry is no longer armed");
                            }
                            r
                        }
                        7 => {
                            let mut t = 0;
                            tw_entry_wheel_ticks_to_next_event(w, input.u64(), &mut t)
                        }
                        8 => {
                            let mut t = 0;
                            tw_entry_wheel_now(w, &mut t)
                        }
                        _ => {
                            let mut n = 0;
                            tw_entry_wheel_len(w, &mut n)
                        }
                    }
                }
                _ => tw_result::TW_OK,
            };
            let result = known(result);
            let uses_service = op <= 11 || op == 17 || op == 18;
            if uses_service && svc.is_null() && result != tw_result::TW_OK {
                assert_eq!(result, tw_result::TW_NULL_POINTER);
            }
        }
    }
    // SAFETY: claims, wheel and service came from their constructors.
    unsafe {
        for shard in shards {
            known(tw_shard_release(shard));
        }
        tw_wheel_free(wheel);
        // The wheel first: it disarms the entries, whose memory goes next.
        tw_entry_wheel_free(entry_wheel);
        tw_entry_wheel_free(null_mut());
        for i in 0..ENTRIES {
            let mut armed = true;
            assert_eq!(
                tw_entry_deadline(entries.add(i), &mut armed, null_mut()),
                tw_result::TW_OK
            );
            assert!(!armed, "freeing the wheel disarms its entries");
        }
        drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
            entries.cast::<std::mem::MaybeUninit<tw_entry>>(),
            ENTRIES,
        )));
        tw_service_free(service);
        tw_service_free(null_mut());
        tw_wheel_free(null_mut());
    }
    assert_eq!(
        LIVE_CONTEXTS.load(SeqCst),
        0,
        "a ctx_free was skipped or ran twice"
    );
});
