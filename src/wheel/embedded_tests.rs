//! Behaviour tests of the embedded wheel: the keyed wheel's promises
//! (exact tick, same-tick arming order, range scheduling, capped resumable
//! advance, exact next event, callbacks that change any entry) and the
//! embedded ones (dropping an armed entry disarms it, dropping the wheel
//! detaches its entries, an entry belongs to one wheel at a time). Named
//! `embedded_*` so that the miri run of the unsafe code selects them all
//! (`cargo +nightly miri test --lib -- embedded_`); sizes stay small.

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::{pin, Pin};

use super::*;

/// Fires everything due by `target`: `(deadline, value)` in firing order,
/// checking that `now()` reads each deadline and the entry is disarmed.
fn drain(wheel: &mut EmbeddedWheel<u32>, target: u64) -> Vec<(u64, u32)> {
    let mut fired = Vec::new();
    let done = wheel.advance(target, usize::MAX, |wheel, timer| {
        assert_eq!(wheel.now(), timer.deadline);
        fired.push((timer.deadline, timer.value));
    });
    assert!(done.complete);
    assert_eq!(wheel.now(), target);
    fired
}

fn entries(n: u32) -> Pin<Box<[TimerEntry<u32>]>> {
    Box::into_pin((0..n).map(TimerEntry::new).collect::<Box<[_]>>())
}

/// Entry `i` of a pinned slice, pinned (elements of a pinned slice never
/// move: the slice is never resized).
fn at(entries: &Pin<Box<[TimerEntry<u32>]>>, i: u32) -> Pin<&TimerEntry<u32>> {
    // SAFETY: structural pinning of a boxed slice's elements.
    unsafe { entries.as_ref().map_unchecked(|s| &s[i as usize]) }
}

#[test]
fn embedded_fires_on_the_exact_tick_across_levels() {
    // Deadlines on every level up to 4 (64^4 ticks) and at level edges.
    let deadlines = [
        0u64, 1, 63, 64, 65, 4095, 4096, 4097, 262_143, 262_144, 16_777_300,
    ];
    let timers = entries(deadlines.len() as u32);
    let mut wheel = EmbeddedWheel::starting_at(7);
    for (i, &d) in deadlines.iter().enumerate() {
        wheel.schedule_at(at(&timers, i as u32), 7 + d).unwrap();
    }
    assert_eq!(wheel.len(), deadlines.len());
    let fired = drain(&mut wheel, 20_000_000);
    let expected: Vec<(u64, u32)> = deadlines
        .iter()
        .enumerate()
        .map(|(i, &d)| (7 + d, i as u32))
        .collect();
    assert_eq!(fired, expected);
    assert!(wheel.is_empty());
}

#[test]
fn embedded_same_tick_fires_in_arming_order_and_a_move_counts_as_arming() {
    let timers = entries(4);
    let mut wheel = EmbeddedWheel::new();
    // All due at 5000 (level 2); 1 is armed for 4999 first and then moved
    // there last, 0 is moved within the same bucket after 3: order 2, 3, 0, 1.
    wheel.schedule_at(at(&timers, 0), 5001).unwrap();
    wheel.schedule_at(at(&timers, 1), 4999).unwrap();
    wheel.schedule_at(at(&timers, 2), 5000).unwrap();
    wheel.schedule_at(at(&timers, 3), 5000).unwrap();
    wheel.schedule_at(at(&timers, 0), 5000).unwrap();
    wheel.schedule_at(at(&timers, 1), 5000).unwrap();
    assert_eq!(
        drain(&mut wheel, 6000),
        [(5000, 2), (5000, 3), (5000, 0), (5000, 1)]
    );
}

/// A moved entry counts as newly armed (CONTRACT 5): on its new tick it
/// fires after every entry already armed for that tick, whether it came
/// from a later tick (`l` in the same bucket, `f` from a far level), an
/// earlier one (`e`) or that same tick (`z`, armed for it before the
/// others). Every schedule function, with the tick on level 0, 1 and 2
/// (at 64 buckets a level), the moves made between advances or from the
/// callback of `h` during one (`a` armed before time moved, `b` after).
/// The range functions keep `z`, already in its window, with its place.
#[test]
fn embedded_a_moved_entry_fires_after_those_already_armed_for_its_tick() {
    #[derive(Debug, Clone, Copy)]
    enum Move {
        Delay,
        At,
        InRange,
        InRangeAt,
    }
    const NAMES: [char; 6] = ['z', 'e', 'l', 'f', 'a', 'b'];
    const H: u32 = 6;
    // (tick, earlier, later, far, the tick the moves are made at)
    let cases = [
        (40u64, 20, 50, 5000, 10),
        (200, 130, 203, 9000, 0),
        (200, 130, 203, 9000, 100),
        (5000, 4200, 5001, 300_000, 0),
        (5000, 4200, 5001, 300_000, 4100),
    ];
    for how in [Move::Delay, Move::At, Move::InRange, Move::InRangeAt] {
        for from_callback in [false, true] {
            for &(t, early, late, far, pause) in &cases {
                let timers = entries(7);
                let mut wheel = EmbeddedWheel::new();
                let arm = |wheel: &mut EmbeddedWheel<u32>, i: u32, d: u64| {
                    wheel.schedule_at(at(&timers, i), d).unwrap();
                };
                for (i, d) in [(0, t), (1, early), (2, late), (3, far), (H, pause), (4, t)] {
                    arm(&mut wheel, i, d);
                }
                // `b`, then the moves of `l`, `e`, `z` and `f` onto `t`.
                let moves = |wheel: &mut EmbeddedWheel<u32>| {
                    arm(wheel, 5, t);
                    for i in [2, 1, 0, 3] {
                        let entry = at(&timers, i);
                        let delay = t - wheel.now();
                        match how {
                            Move::Delay => wheel.schedule(entry, delay).unwrap(),
                            Move::At => wheel.schedule_at(entry, t).unwrap(),
                            Move::InRange => {
                                assert_eq!(wheel.schedule_in_range(entry, delay..=delay), Ok(t));
                            }
                            Move::InRangeAt => {
                                assert_eq!(wheel.schedule_at_in_range(entry, t..=t), Ok(t));
                            }
                        }
                    }
                };
                let mut fired = Vec::new();
                let done = wheel.advance(pause, usize::MAX, |wheel, timer| {
                    fired.push(timer.value);
                    if from_callback {
                        moves(wheel);
                    }
                });
                assert!(done.complete);
                assert_eq!(fired, [H]);
                if !from_callback {
                    moves(&mut wheel);
                }
                assert_eq!(wheel.ticks_to_next_event(u64::MAX), t - pause);
                let fired = drain(&mut wheel, t);
                assert!(fired.iter().all(|&(d, _)| d == t), "{fired:?}");
                let order: String = fired.iter().map(|&(_, i)| NAMES[i as usize]).collect();
                let expected = match how {
                    Move::Delay | Move::At => "ablezf",
                    Move::InRange | Move::InRangeAt => "zablef",
                };
                assert_eq!(
                    order, expected,
                    "{how:?} onto tick {t} at {pause}, from a callback: {from_callback}"
                );
            }
        }
    }
}

#[test]
fn embedded_a_deadline_in_the_past_is_due_at_the_next_advance() {
    let timer = pin!(TimerEntry::new(9u32));
    let mut wheel = EmbeddedWheel::starting_at(100);
    wheel.schedule_at(timer.as_ref(), 3).unwrap();
    assert_eq!(timer.deadline(), Some(100));
    assert!(wheel.is_due_now());
    assert_eq!(wheel.ticks_to_next_event(50), 0);
    assert_eq!(drain(&mut wheel, 100), [(100, 9)]);
    // Saturating: never wraps.
    wheel.schedule(timer.as_ref(), u64::MAX).unwrap();
    assert_eq!(timer.deadline(), Some(u64::MAX));
}

#[test]
fn embedded_range_scheduling_keeps_a_deadline_inside_the_window() {
    let timer = pin!(TimerEntry::new(1u32));
    let mut wheel = EmbeddedWheel::new();
    // The roundest tick of 100..=200 is 128.
    assert_eq!(wheel.schedule_in_range(timer.as_ref(), 100..=200), Ok(128));
    // Still inside 120..=300: kept.
    assert_eq!(wheel.schedule_in_range(timer.as_ref(), 120..=300), Ok(128));
    // Outside 130..=140: moved to 136.
    assert_eq!(wheel.schedule_in_range(timer.as_ref(), 130..=140), Ok(136));
    #[allow(clippy::reversed_empty_ranges)] // the bad input under test
    let empty = 5..=4;
    assert_eq!(
        wheel.schedule_in_range(timer.as_ref(), empty),
        Err(TimerError::InvalidRange)
    );
    assert_eq!(timer.deadline(), Some(136));
    assert_eq!(drain(&mut wheel, 1000), [(136, 1)]);
}

#[test]
fn embedded_capped_advance_resumes_where_it_stopped() {
    let timers = entries(5);
    let mut wheel = EmbeddedWheel::new();
    for i in 0..5 {
        wheel
            .schedule_at(at(&timers, i), 10 + u64::from(i / 2))
            .unwrap();
    }
    let mut fired = Vec::new();
    let first = wheel.advance(100, 3, |_, t| fired.push(t.value));
    assert_eq!((first.expired, first.complete, wheel.now()), (3, false, 11));
    let rest = wheel.advance(100, 3, |_, t| fired.push(t.value));
    assert_eq!((rest.expired, rest.complete, wheel.now()), (2, true, 100));
    assert_eq!(fired, [0, 1, 2, 3, 4]);
    // A cap that is reached exactly on the last due timer still completes.
    wheel.schedule(at(&timers, 0), 1).unwrap();
    let exact = wheel.advance(200, 1, |_, _| {});
    assert_eq!((exact.expired, exact.complete, wheel.now()), (1, true, 200));
}

#[test]
fn embedded_ticks_to_next_event_is_exact_above_level_0() {
    let timers = entries(2);
    let mut wheel = EmbeddedWheel::new();
    assert_eq!(wheel.ticks_to_next_event(1000), 1000);
    wheel.schedule_at(at(&timers, 0), 5000).unwrap();
    wheel.schedule_at(at(&timers, 1), 4500).unwrap();
    assert_eq!(wheel.ticks_to_next_event(10_000), 4500);
    assert_eq!(wheel.next_deadline(), Some(4500));
    assert_eq!(wheel.ticks_to_next_event(100), 100);
    at(&timers, 1).cancel();
    assert_eq!(wheel.ticks_to_next_event(10_000), 5000);
}

#[test]
fn embedded_callbacks_rearm_themselves_and_cancel_or_arm_others() {
    let timers = entries(3);
    let mut wheel = EmbeddedWheel::new();
    wheel.schedule_at(at(&timers, 0), 10).unwrap();
    wheel.schedule_at(at(&timers, 1), 20).unwrap();
    let mut fired = Vec::new();
    let mut advances = Vec::new();
    loop {
        let done = wheel.advance(100, usize::MAX, |wheel, t| {
            fired.push((t.deadline, t.value));
            if t.value == 0 && t.deadline < 30 {
                // Itself, again (periodic), and another armed for this very
                // tick: due now, so it fires in the next advance, first
                // (CONTRACT 1).
                wheel.schedule(at(&timers, 0), 10).unwrap();
                wheel.schedule(at(&timers, 2), 0).unwrap();
                // Cancel an armed one (at 10; at 20 it is no longer armed).
                let cancelled = wheel.cancel(&at(&timers, 1));
                assert_eq!(cancelled, Ok(t.deadline == 10));
            }
        });
        advances.push((done.expired, done.complete, wheel.now()));
        if done.complete {
            break;
        }
    }
    assert_eq!(fired, [(10, 0), (10, 2), (20, 0), (20, 2), (30, 0)]);
    // Each advance stops at the tick where a callback armed an entry for now.
    assert_eq!(advances, [(1, false, 10), (2, false, 20), (2, true, 100)]);
    assert!(wheel.is_empty());
}

#[test]
fn embedded_dropping_an_armed_entry_disarms_it() {
    let mut wheel = EmbeddedWheel::new();
    let keep = pin!(TimerEntry::new(1u32));
    wheel.schedule(keep.as_ref(), 5).unwrap();
    {
        let gone = Box::pin(TimerEntry::new(2u32));
        wheel.schedule(gone.as_ref(), 5).unwrap();
        assert_eq!(wheel.len(), 2);
    }
    assert_eq!(wheel.len(), 1);
    // A dropped entry dropped from inside a callback too.
    let later = RefCell::new(Some(Box::pin(TimerEntry::new(3u32))));
    wheel
        .schedule(later.borrow().as_ref().unwrap().as_ref(), 7)
        .unwrap();
    let fired: Vec<_> = {
        let mut fired = Vec::new();
        let _ = wheel.advance(10, usize::MAX, |wheel, t| {
            fired.push(t.value);
            later.borrow_mut().take();
            assert_eq!(wheel.len(), 0);
        });
        fired
    };
    assert_eq!(fired, [1]);
}

#[test]
fn embedded_dropping_the_wheel_detaches_its_entries() {
    let a = pin!(TimerEntry::new(1u32));
    let b = Box::pin(TimerEntry::new(2u32));
    {
        let mut wheel = EmbeddedWheel::new();
        wheel.schedule(a.as_ref(), 5).unwrap();
        wheel.schedule(b.as_ref(), 500_000).unwrap();
        assert!(a.is_armed() && b.is_armed());
    }
    assert!(!a.is_armed() && !b.is_armed());
    assert!(!b.cancel());
    // Armed again on a new wheel, they work as fresh entries.
    let mut wheel = EmbeddedWheel::new();
    wheel.schedule(b.as_ref(), 3).unwrap();
    drop(b);
    assert!(wheel.is_empty());
}

#[test]
fn embedded_an_entry_belongs_to_one_wheel_at_a_time() {
    let timer = pin!(TimerEntry::new(1u32));
    let mut first = EmbeddedWheel::new();
    let mut second = EmbeddedWheel::new();
    first.schedule(timer.as_ref(), 5).unwrap();
    assert_eq!(
        second.schedule(timer.as_ref(), 5),
        Err(TimerError::ForeignEntry)
    );
    assert_eq!(
        second.schedule_in_range(timer.as_ref(), 1..=9),
        Err(TimerError::ForeignEntry)
    );
    assert_eq!(second.cancel(&timer), Err(TimerError::ForeignEntry));
    assert_eq!(timer.deadline(), Some(5));
    assert!(timer.cancel());
    second.schedule(timer.as_ref(), 6).unwrap();
    assert!(first.is_empty() && second.len() == 1);
}

#[test]
fn embedded_a_panicking_callback_leaves_the_wheel_consistent() {
    let timers = entries(4);
    let mut wheel = EmbeddedWheel::new();
    for i in 0..4 {
        wheel.schedule_at(at(&timers, i), 10).unwrap();
    }
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let _ = wheel.advance(50, usize::MAX, |wheel, t| {
            if t.value == 1 {
                wheel.schedule(at(&timers, 1), 5).unwrap();
                panic!("callback failed");
            }
        });
    }));
    assert!(outcome.is_err());
    // 0 and 1 fired (1 re-armed itself for 15 before panicking); 2 and 3
    // are still due at 10, where time stopped.
    assert_eq!(wheel.now(), 10);
    assert_eq!(wheel.len(), 3);
    assert_eq!(drain(&mut wheel, 50), [(10, 2), (10, 3), (15, 1)]);
}

#[test]
fn embedded_many_timers_fire_in_deadline_then_arming_order() {
    // Enough timers to take the two-way cascade (a bucket of more than 16).
    let n = if cfg!(miri) { 60 } else { 2000 };
    let timers = entries(n);
    let mut wheel = EmbeddedWheel::new();
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut expected = Vec::new();
    for i in 0..n {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let deadline = 4096 + rng % 8;
        wheel.schedule_at(at(&timers, i), deadline).unwrap();
        expected.push((deadline, i));
    }
    expected.sort();
    let fired = drain(&mut wheel, 10_000);
    assert_eq!(fired, expected);
}

/// One rule for "due now" (CONTRACT 1), as on the keyed wheel: an entry
/// that its callback arms again for the tick the advance has reached fires
/// in the next advance, once per advance, instead of again in this one
/// (where an uncapped advance would never return).
#[test]
fn embedded_an_entry_rearmed_for_now_by_its_callback_fires_once_per_advance() {
    let timers = entries(1);
    let mut wheel = EmbeddedWheel::new();
    wheel.schedule_at(at(&timers, 0), 3).unwrap();
    let mut fired = 0;
    for round in 1..=5 {
        let done = wheel.advance(100, usize::MAX, |wheel, timer| {
            fired += 1;
            assert_eq!(timer.deadline, 3);
            if fired < 5 {
                wheel.schedule(at(&timers, 0), 0).unwrap();
            }
        });
        assert_eq!(done.expired, 1, "round {round}");
        assert_eq!(done.complete, round == 5, "round {round}");
    }
    assert_eq!((fired, wheel.now()), (5, 100));
    assert!(wheel.is_empty());
    // A poll of its own is its own pass: it returns the entry armed for now.
    wheel.schedule(at(&timers, 0), 0).unwrap();
    assert_eq!(
        wheel.poll(100).map(|t| (t.deadline, t.value)),
        Some((100, 0))
    );
}

/// Entries keep 32 bits of arming number: timers armed and moved across
/// the wrap of those bits, and across a renumbering, still fire in arming
/// order within each tick. Fails if the entries compared their numbers
/// as plain integers (the wrapped ones would fire first) or if the
/// renumbering lost their order.
#[test]
fn embedded_same_tick_order_survives_the_arming_number_wrap() {
    let n = 24u32;
    let timers = entries(n);
    let mut wheel = EmbeddedWheel::new();
    // The first round's armings before the wrap, the second's after it; a
    // renumbering on the way.
    let first = (1u64 << 32) - u64::from(n);
    wheel
        .state_mut()
        .hierarchy
        .set_seq_for_test(first, first + u64::from(n) + 5);
    // Three deadlines, two above level 0, armed in a scrambled order and
    // some moved later (in place above level 0), so that cascades meet
    // entries out of order.
    let mut expected: Vec<(u64, u64, u32)> = Vec::new();
    let mut order = 0u64;
    // The second round moves half the timers: each tick ends up with
    // timers last armed before the wrap and timers armed after it.
    for round in 0..2u32 {
        for i in 0..n / (round + 1) {
            let timer = (i * 7 + round * 5) % n;
            let deadline = [70u64, 5000, 5001][((i + round) % 3) as usize];
            wheel.schedule_at(at(&timers, timer), deadline).unwrap();
            expected.retain(|&(_, _, t)| t != timer);
            expected.push((deadline, order, timer));
            order += 1;
        }
    }
    expected.sort_unstable();
    let expected: Vec<(u64, u32)> = expected.iter().map(|&(d, _, t)| (d, t)).collect();
    assert_eq!(drain(&mut wheel, 6000), expected);
}

/// A window whose ends saturate at `u64::MAX` still keeps a timer due at
/// `u64::MAX` in place (it is in the window), so a timer armed for that
/// tick after it still fires after it. Fails if the range schedule
/// compared delays without saturating and moved (re-armed) the first.
#[test]
fn embedded_range_scheduling_keeps_a_deadline_in_a_saturated_window() {
    let timers = entries(2);
    let mut wheel = EmbeddedWheel::starting_at(1000);
    wheel.schedule_at(at(&timers, 0), u64::MAX).unwrap();
    wheel.schedule_at(at(&timers, 1), u64::MAX).unwrap();
    assert_eq!(
        wheel.schedule_in_range(at(&timers, 0), u64::MAX - 10..=u64::MAX),
        Ok(u64::MAX)
    );
    let mut fired = Vec::new();
    let _ = wheel.advance(u64::MAX, usize::MAX, |_, t| fired.push(t.value));
    assert_eq!(fired, [0, 1]);
}

/// As the keyed wheel's
/// `tests::a_callback_polling_past_the_advance_target_leaves_what_is_due_now_to_the_advance`:
/// what is due at the `now` a callback's poll reached fires in the advance.
#[test]
fn embedded_a_callback_polling_past_the_advance_target_leaves_what_is_due_now_to_the_advance() {
    let entries = entries(3);
    let mut wheel = EmbeddedWheel::new();
    wheel.schedule(at(&entries, 0), 5).unwrap();
    wheel.schedule(at(&entries, 1), 20).unwrap();
    wheel.schedule(at(&entries, 2), 20).unwrap();
    let mut fired = Vec::new();
    let done = wheel.advance(10, usize::MAX, |wheel, timer| {
        fired.push((wheel.now(), timer.value));
        if timer.value == 0 {
            let polled = wheel.poll(20).expect("entry 1 is due at 20");
            fired.push((wheel.now(), polled.value));
        }
    });
    assert_eq!(fired, [(5, 0), (20, 1), (20, 2)]);
    assert!(done.complete);
    assert_eq!(wheel.now(), 20);
    assert!(wheel.is_empty());
}

/// The wheel's state holds its levels inline (about 11 KiB) and is built
/// in place on the heap: a wheel can be made, used and dropped on a thread
/// with a small stack (a loom model's threads have tens of KiB), in an
/// unoptimised build too.
#[test]
fn embedded_a_wheel_is_built_on_a_small_stack() {
    let fired = std::thread::Builder::new()
        .stack_size(24 * 1024)
        .spawn(|| {
            let mut wheel = EmbeddedWheel::<u32>::new();
            let entry = pin!(TimerEntry::new(7));
            wheel.schedule(entry.as_ref(), 3).unwrap();
            drain(&mut wheel, 10)
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(fired, [(3, 7)]);
}
