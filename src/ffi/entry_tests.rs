//! Rust-side checks of `tw_entry_wheel_poll` through the C entry points
//! (`ffi-tests/test_entry.c` covers the same from C, under ASan and
//! valgrind): its order and ticks, the pass rule, handlers that cancel or
//! free entries, its interplay with `tw_entry_wheel_advance` and
//! `tw_entry_wheel_free`, bad arguments, and that polling fires what an
//! advance fires. Under `ffi::`, so the miri step of `.ci/run` runs them;
//! sizes are small under Miri.

use std::ffi::c_void;
use std::ptr;

use super::*;

/// `n` entries in one allocation that never moves, and a wheel. Entries
/// are named by their index. Dropping it frees the wheel (which detaches
/// what is still armed), then the entries.
struct Bed {
    wheel: *mut tw_entry_wheel,
    /// From `Box::into_raw`; every entry pointer is derived from it, so no
    /// reference to the slice invalidates the pointers the wheel holds.
    base: *mut tw_entry,
    n: usize,
    /// Every entry's callback, made once: a function's address may differ
    /// between two mentions of it (under miri it does), so polls are
    /// checked against this copy of what the entries were given.
    callback: tw_entry_fn,
}

/// The callback of every entry: records `(entry, now)` in the `Log` that
/// the advance's `ctx` points to, then lets the log's `react` act.
unsafe extern "C" fn on_fire(entry: *mut tw_entry, ctx: *mut c_void) {
    // SAFETY: every advance of these tests passes a live `Log` as `ctx`.
    let log = unsafe { &mut *ctx.cast::<Log>() };
    log.fired(entry);
}

/// A callback no entry has: what a poll must overwrite.
unsafe extern "C" fn not_written(_entry: *mut tw_entry, _ctx: *mut c_void) {
    unreachable!("never an entry's callback");
}

impl Bed {
    fn new(start: u64, n: usize) -> Self {
        let entries = (0..n)
            .map(|_| tw_entry { _private: [0; 6] })
            .collect::<Box<[_]>>();
        let base = Box::into_raw(entries).cast::<tw_entry>();
        let mut wheel = ptr::null_mut();
        let callback: tw_entry_fn = Some(on_fire);
        // SAFETY: `base` holds `n` entries; `wheel` is a live local.
        unsafe {
            assert_eq!(tw_entry_wheel_new(start, &mut wheel), tw_result::TW_OK);
            for i in 0..n {
                assert_eq!(tw_entry_init(base.add(i), callback), tw_result::TW_OK);
            }
        }
        Bed {
            wheel,
            base,
            n,
            callback,
        }
    }

    fn entry(&self, i: usize) -> *mut tw_entry {
        assert!(i < self.n);
        // SAFETY: in bounds of the allocation.
        unsafe { self.base.add(i) }
    }

    /// The index of an entry of this bed (by address: a pointer into
    /// another allocation is compared, never offset from `base`).
    fn id(&self, entry: *mut tw_entry) -> usize {
        let i = (entry.addr() - self.base.addr()) / size_of::<tw_entry>();
        assert!(i < self.n && entry == self.entry(i), "an entry of this bed");
        i
    }

    fn schedule(&self, i: usize, delay: u64) {
        // SAFETY: a live wheel and an entry of this bed, which never moves.
        let result = unsafe { tw_entry_schedule(self.wheel, self.entry(i), delay) };
        assert_eq!(result, tw_result::TW_OK);
    }

    fn schedule_at(&self, i: usize, tick: u64) {
        // SAFETY: as in `schedule`.
        let result = unsafe { tw_entry_schedule_at(self.wheel, self.entry(i), tick) };
        assert_eq!(result, tw_result::TW_OK);
    }

    fn cancel(&self, i: usize) -> bool {
        let mut cancelled = false;
        // SAFETY: an entry of this bed; a live local.
        let result = unsafe { tw_entry_cancel(self.entry(i), &mut cancelled) };
        assert_eq!(result, tw_result::TW_OK);
        cancelled
    }

    fn armed(&self, i: usize) -> bool {
        let mut armed = true;
        // SAFETY: an entry of this bed; a live local.
        let result = unsafe { tw_entry_deadline(self.entry(i), &mut armed, ptr::null_mut()) };
        assert_eq!(result, tw_result::TW_OK);
        armed
    }

    fn now(&self) -> u64 {
        let mut now = u64::MAX;
        // SAFETY: a live wheel and local.
        assert_eq!(
            unsafe { tw_entry_wheel_now(self.wheel, &mut now) },
            tw_result::TW_OK
        );
        now
    }

    /// One poll: the entry handed out, or `None` when the pass ended.
    fn poll_raw(&self, target: u64) -> Option<*mut tw_entry> {
        let mut entry = ptr::without_provenance_mut(1);
        let mut callback: tw_entry_fn = Some(not_written);
        // SAFETY: a live wheel and locals.
        let result = unsafe { tw_entry_wheel_poll(self.wheel, target, &mut entry, &mut callback) };
        assert_eq!(result, tw_result::TW_OK);
        // The entry's own callback, or none with no entry.
        let expected = if entry.is_null() { None } else { self.callback };
        assert_eq!(callback.map(|f| f as usize), expected.map(|f| f as usize));
        (!entry.is_null()).then_some(entry)
    }

    /// One poll: the entry of this bed handed out (checked not armed) with
    /// the tick `now` reads for it, or `None` when the pass ended.
    fn poll(&self, target: u64) -> Option<(usize, u64)> {
        let id = self.id(self.poll_raw(target)?);
        assert!(!self.armed(id), "a polled entry is no longer armed");
        Some((id, self.now()))
    }

    /// Polls until the pass ends: what it handed out, in order.
    fn pass(&self, target: u64) -> Vec<(usize, u64)> {
        std::iter::from_fn(|| self.poll(target)).collect()
    }

    /// An uncapped advance to `target` with `log` as its callbacks' `ctx`:
    /// whether it completed.
    fn advance(&self, target: u64, log: &mut Log) -> bool {
        let mut complete = false;
        let ctx = ptr::from_mut(log).cast::<c_void>();
        // SAFETY: a live wheel; `log` outlives the call.
        let result = unsafe {
            tw_entry_wheel_advance(
                self.wheel,
                target,
                usize::MAX,
                ctx,
                ptr::null_mut(),
                &mut complete,
            )
        };
        assert_eq!(result, tw_result::TW_OK);
        complete
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        // SAFETY: the wheel came from `tw_entry_wheel_new` and `base` from
        // `Box::into_raw` of `n` entries; the wheel goes first, detaching
        // the entries still armed.
        unsafe {
            tw_entry_wheel_free(self.wheel);
            drop(Box::from_raw(ptr::slice_from_raw_parts_mut(
                self.base, self.n,
            )));
        }
    }
}

/// What `on_fire` saw during an advance, and what it does then.
struct Log {
    bed: *const Bed,
    fired: Vec<(usize, u64)>,
    /// Run for each firing, as a poll loop's handler would.
    react: fn(&Bed, usize, u64, usize),
}

impl Log {
    fn new(bed: &Bed, react: fn(&Bed, usize, u64, usize)) -> Self {
        Log {
            bed,
            fired: Vec::new(),
            react,
        }
    }

    fn fired(&mut self, entry: *mut tw_entry) {
        // SAFETY: the bed outlives every advance that passes this log.
        let bed = unsafe { &*self.bed };
        let (id, now) = (bed.id(entry), bed.now());
        assert!(!bed.armed(id), "a fired entry is no longer armed");
        self.fired.push((id, now));
        (self.react)(bed, id, now, self.fired.len());
    }
}

#[test]
fn poll_hands_out_entries_in_deadline_order_then_arming_order() {
    let bed = Bed::new(0, 5);
    // Levels 0, 1 and 2; two on one tick, and a move that counts as
    // arming again (0 comes after 2 on tick 5000).
    bed.schedule(0, 5000);
    bed.schedule(1, 70);
    bed.schedule(2, 5000);
    bed.schedule_at(3, 3);
    bed.schedule(0, 5000);
    bed.schedule(4, 20_000);
    assert_eq!(bed.pass(10_000), [(3, 3), (1, 70), (2, 5000), (0, 5000)]);
    assert_eq!(bed.now(), 10_000, "the pass ended at its target");
    assert!(bed.armed(4));
    assert_eq!(bed.pass(10_000), [], "nothing more is due by the target");
    assert_eq!(bed.pass(20_000), [(4, 20_000)]);
}

/// CONTRACT 1: an entry armed during a poll pass for the tick the pass
/// has reached comes in the next pass, on that tick, before anything
/// later; one re-arming itself with delay 0 comes once per pass (no
/// livelock).
#[test]
fn an_entry_rearmed_for_now_during_a_poll_pass_comes_in_the_next_pass() {
    let bed = Bed::new(0, 3);
    bed.schedule(0, 5);
    bed.schedule(1, 5);
    bed.schedule(2, 9);
    assert_eq!(bed.poll(100), Some((0, 5)));
    bed.schedule(0, 0);
    // Entry 1 was armed before the pass reached tick 5; 0 was not. The
    // pass ends at 0, on its tick, so that nothing later overtakes it.
    assert_eq!(bed.poll(100), Some((1, 5)));
    assert_eq!(bed.poll(100), None);
    assert!(bed.armed(0), "0 waits for the next pass");
    assert_eq!(bed.now(), 5, "the pass stopped where 0 waits");
    // Zero delays on every firing: one per pass, on its own tick.
    for _ in 0..3 {
        assert_eq!(bed.poll(100), Some((0, 5)));
        bed.schedule(0, 0);
        assert_eq!(bed.poll(100), None);
        assert_eq!(bed.now(), 5);
    }
    assert_eq!(bed.pass(100), [(0, 5), (2, 9)]);
    assert_eq!(bed.now(), 100);
}

#[test]
fn a_handler_may_cancel_an_entry_not_yet_polled_and_free_a_polled_one() {
    let bed = Bed::new(0, 3);
    bed.schedule(0, 10);
    bed.schedule(1, 10);
    bed.schedule(2, 11);
    let own = Box::into_raw(Box::new(tw_entry { _private: [0; 6] }));
    // SAFETY: `own` is a live allocation that stays in place while armed.
    unsafe {
        assert_eq!(tw_entry_init(own, bed.callback), tw_result::TW_OK);
        assert_eq!(tw_entry_schedule(bed.wheel, own, 10), tw_result::TW_OK);
    }
    assert_eq!(bed.poll(50), Some((0, 10)));
    assert!(bed.cancel(1), "1 was still armed");
    assert_eq!(bed.poll_raw(50), Some(own));
    assert_eq!(bed.now(), 10);
    // The polled entry is not armed: its memory may go (Miri would report
    // a later touch of it by the wheel).
    // SAFETY: from `Box::into_raw` above, and no longer armed.
    drop(unsafe { Box::from_raw(own) });
    assert_eq!(bed.pass(50), [(2, 11)]);
    assert!(!bed.armed(1));
}

#[test]
fn a_target_before_now_counts_as_now() {
    let bed = Bed::new(100, 2);
    bed.schedule_at(0, 40);
    bed.schedule(1, 0);
    assert_eq!(bed.pass(7), [(0, 100), (1, 100)], "due at or before now");
    assert_eq!(bed.now(), 100, "never backwards");
    assert_eq!(bed.pass(0), []);
    assert_eq!(bed.now(), 100);
}

#[test]
fn an_advance_ends_an_open_poll_pass_and_polls_are_refused_in_its_callbacks() {
    fn rearm_and_poll(bed: &Bed, id: usize, _tick: u64, fired: usize) {
        let marker = ptr::without_provenance_mut::<tw_entry>(8);
        let mut entry = marker;
        // SAFETY: a live wheel and local.
        let result = unsafe { tw_entry_wheel_poll(bed.wheel, 1000, &mut entry, ptr::null_mut()) };
        assert_eq!(result, tw_result::TW_REENTRANT);
        assert_eq!(entry, marker, "a refused call writes nothing");
        if fired == 1 {
            bed.schedule(id, 0);
        }
    }
    let bed = Bed::new(0, 2);
    bed.schedule(0, 5);
    bed.schedule(1, 5);
    assert_eq!(bed.poll(100), Some((0, 5)));
    bed.schedule(0, 0);
    // The poll pass is open (1 not yet handed out, 0 waiting): the advance
    // ends it and begins its own, which fires both.
    let mut log = Log::new(&bed, rearm_and_poll);
    assert!(!bed.advance(100, &mut log), "1's zero-delay re-arm waits");
    assert_eq!(log.fired, [(1, 5), (0, 5)]);
    assert_eq!(bed.pass(100), [(1, 5)]);
    assert_eq!(bed.now(), 100);
}

#[test]
fn the_wheel_may_be_freed_in_the_middle_of_a_poll_pass() {
    let bed = Bed::new(0, 3);
    for i in 0..3 {
        bed.schedule(i, 4);
    }
    assert_eq!(bed.poll(10), Some((0, 4)));
    // SAFETY: the wheel is not used after this (the bed's own free is
    // replaced by a fresh wheel's).
    unsafe { tw_entry_wheel_free(bed.wheel) };
    assert!(!bed.armed(1) && !bed.armed(2), "freeing detached them");
    let mut bed = bed;
    let mut wheel = ptr::null_mut();
    // SAFETY: a live local.
    assert_eq!(
        unsafe { tw_entry_wheel_new(0, &mut wheel) },
        tw_result::TW_OK
    );
    bed.wheel = wheel;
    bed.schedule(2, 1);
    assert_eq!(bed.pass(10), [(2, 1)]);
}

#[test]
fn poll_refuses_null_arguments_and_writes_nothing_then() {
    let bed = Bed::new(0, 1);
    bed.schedule(0, 1);
    let marker = ptr::without_provenance_mut::<tw_entry>(8);
    let mut entry = marker;
    // SAFETY: NULL is refused before anything is read or written.
    unsafe {
        let result = tw_entry_wheel_poll(ptr::null(), 10, &mut entry, ptr::null_mut());
        assert_eq!(result, tw_result::TW_NULL_POINTER);
        let result = tw_entry_wheel_poll(bed.wheel, 10, ptr::null_mut(), ptr::null_mut());
        assert_eq!(result, tw_result::TW_NULL_POINTER);
    }
    assert_eq!(entry, marker);
    assert_eq!(bed.now(), 0, "a refused poll moves no time");
    assert_eq!(bed.pass(10), [(0, 1)]);
}

/// A deterministic handler for the comparison below: from the entry, its
/// tick and the number of firings so far, it re-arms the entry (delays 0
/// to a few thousand, so on level 0 and higher), cancels another, or arms
/// another at an absolute tick (sometimes already past).
fn churn(bed: &Bed, id: usize, tick: u64, fired: usize) {
    let mut x = (id as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ tick ^ ((fired as u64) << 32);
    x ^= x >> 29;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 32;
    let other = (x >> 8) as usize % bed.n;
    match x % 8 {
        0 | 1 => bed.schedule(id, 0),
        2 | 3 => bed.schedule(id, (x >> 16) % 70),
        4 => bed.schedule(id, (x >> 16) % 5000),
        5 => {
            bed.cancel(other);
        }
        6 => bed.schedule_at(other, tick.saturating_sub(3) + (x >> 16) % 9),
        _ => {}
    }
}

/// Polling until NULL fires what an uncapped advance fires: the same
/// entries at the same ticks in the same order, the same time after each
/// step, for a workload of handlers that re-arm (with zero delays among
/// them), cancel and arm entries, and targets that stand still, go back
/// or jump.
#[test]
fn polling_until_null_fires_what_an_advance_fires() {
    let (n, steps) = if cfg!(miri) { (16, 200) } else { (200, 600) };
    let (pushed, pulled) = (Bed::new(0, n), Bed::new(0, n));
    for i in 0..n {
        let tick = (i as u64 * 7919) % 3000 + if i % 10 == 0 { 9000 } else { 0 };
        pushed.schedule_at(i, tick);
        pulled.schedule_at(i, tick);
    }
    let mut log = Log::new(&pushed, churn);
    let mut fired = Vec::new();
    let mut target = 0u64;
    for step in 0..steps {
        target = match step % 7 {
            0 => target,
            1 => target.saturating_sub(20),
            _ => target + (step * 37) % 120,
        };
        let complete = pushed.advance(target, &mut log);
        while let Some((id, tick)) = pulled.poll(target) {
            fired.push((id, tick));
            churn(&pulled, id, tick, fired.len());
        }
        assert_eq!(pulled.now(), pushed.now(), "step {step}, target {target}");
        // An advance is incomplete exactly when its pass left an entry due.
        let mut ticks = 1;
        // SAFETY: a live wheel and local.
        let r = unsafe { tw_entry_wheel_ticks_to_next_event(pulled.wheel, 1, &mut ticks) };
        assert_eq!(r, tw_result::TW_OK);
        assert_eq!(complete, ticks != 0, "step {step}");
    }
    assert_eq!(fired, log.fired);
    assert!(fired.len() > 2 * n, "too few firings to compare");
    // Zero delays were exercised: some entry fired twice on one tick.
    let distinct = fired.iter().collect::<std::collections::HashSet<_>>();
    assert!(
        distinct.len() < fired.len(),
        "no entry came again on its own tick"
    );
}

/// The next-event forms, `tw_entry_wheel_advance_to_next` and polls with
/// `tw_entry_wheel_poll_to_next` until NULL, fire what
/// `tw_entry_wheel_ticks_to_next_event(cap)` followed by an advance to
/// now plus that fires: the same entries at the same ticks in the same
/// order, the same time after each step and the same counts, for caps of
/// 0 (only what is due now) to past every gap, advances capped at a few
/// entries, and handlers that re-arm (zero delays among them), cancel and
/// arm entries.
#[test]
fn the_next_event_forms_fire_what_ticks_to_next_event_then_an_advance_fires() {
    let (n, steps) = if cfg!(miri) { (16, 150) } else { (200, 600) };
    let (two_calls, advanced, pulled) = (Bed::new(0, n), Bed::new(0, n), Bed::new(0, n));
    for i in 0..n {
        let tick = (i as u64 * 7919) % 3000 + if i % 10 == 0 { 9000 } else { 0 };
        for bed in [&two_calls, &advanced, &pulled] {
            bed.schedule_at(i, tick);
        }
    }
    let mut want = Log::new(&two_calls, churn);
    let mut got = Log::new(&advanced, churn);
    let mut fired = Vec::new();
    let mut capped = 0;
    for step in 0..steps {
        let cap = [0u64, 1, 5, 50, 500, 5000][step % 6];
        let max = if step % 5 == 4 { 2 } else { usize::MAX };
        let ctx = |log: &mut Log| ptr::from_mut(log).cast::<c_void>();
        let (mut ticks, mut want_expired, mut want_complete) = (u64::MAX, 0, false);
        let (mut tick, mut expired, mut complete) = (0, usize::MAX, true);
        // SAFETY: live wheels and locals; the logs outlive the calls.
        unsafe {
            let r = tw_entry_wheel_ticks_to_next_event(two_calls.wheel, cap, &mut ticks);
            assert_eq!(r, tw_result::TW_OK);
            let r = tw_entry_wheel_advance(
                two_calls.wheel,
                two_calls.now() + ticks,
                max,
                ctx(&mut want),
                &mut want_expired,
                &mut want_complete,
            );
            assert_eq!(r, tw_result::TW_OK);
            let r = tw_entry_wheel_advance_to_next(
                advanced.wheel,
                cap,
                max,
                ctx(&mut got),
                &mut tick,
                &mut expired,
                &mut complete,
            );
            assert_eq!(r, tw_result::TW_OK);
        }
        let step_ = format!("step {step}, cap {cap}, max {max}");
        assert_eq!(
            (expired, complete),
            (want_expired, want_complete),
            "{step_}"
        );
        assert_eq!(
            (tick, advanced.now()),
            (two_calls.now(), two_calls.now()),
            "{step_}"
        );
        if max == usize::MAX {
            // The pull form, one pass until NULL.
            loop {
                let mut entry = ptr::null_mut();
                // SAFETY: a live wheel and locals.
                let r = unsafe {
                    tw_entry_wheel_poll_to_next(pulled.wheel, cap, &mut entry, ptr::null_mut())
                };
                assert_eq!(r, tw_result::TW_OK);
                if entry.is_null() {
                    break;
                }
                let id = pulled.id(entry);
                fired.push((id, pulled.now()));
                churn(&pulled, id, pulled.now(), fired.len());
            }
        } else {
            // The same capped advance, through the pull form's twin: the
            // pulled bed follows with a poll pass to the tick reached.
            capped += usize::from(!complete);
            let target = two_calls.now();
            for _ in 0..expired {
                let (id, tick) = pulled.poll(target).expect("an entry the advance fired");
                fired.push((id, tick));
                churn(&pulled, id, tick, fired.len());
            }
            // Ends the poll pass where the advance's cap stopped it: a
            // pass may be left open, but the next step must begin its own.
            // SAFETY: a live wheel; no log is needed for zero entries.
            let r = unsafe {
                tw_entry_wheel_advance(
                    pulled.wheel,
                    target,
                    0,
                    ptr::null_mut(),
                    ptr::null_mut(),
                    ptr::null_mut(),
                )
            };
            assert_eq!(r, tw_result::TW_OK);
        }
        assert_eq!(pulled.now(), two_calls.now(), "{step_}");
        assert_eq!(got.fired, want.fired, "{step_}");
        assert_eq!(fired, want.fired, "{step_}");
    }
    assert!(want.fired.len() > 2 * n, "too few firings to compare");
    assert!(capped > 0, "no advance was stopped by its cap");
    // Zero delays were exercised: some entry fired twice on one tick.
    let distinct = want.fired.iter().collect::<std::collections::HashSet<_>>();
    assert!(
        distinct.len() < want.fired.len(),
        "no entry came again on its own tick"
    );
    // A NULL wheel is refused, and writes nothing.
    let mut tick = 7;
    // SAFETY: NULL is a documented argument.
    let r = unsafe {
        tw_entry_wheel_advance_to_next(
            ptr::null(),
            5,
            1,
            ptr::null_mut(),
            &mut tick,
            ptr::null_mut(),
            ptr::null_mut(),
        )
    };
    assert_eq!((r, tick), (tw_result::TW_NULL_POINTER, 7));
    let mut entry = ptr::without_provenance_mut(1);
    // SAFETY: as above.
    let r = unsafe { tw_entry_wheel_poll_to_next(ptr::null(), 5, &mut entry, ptr::null_mut()) };
    assert_eq!(r, tw_result::TW_NULL_POINTER);
    assert_eq!(entry.addr(), 1);
}
