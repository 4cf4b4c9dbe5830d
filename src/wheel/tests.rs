//! Unit tests of the wheel, one per behaviour the module docs state,
//! including the cases the Ratas test-suite covers (level boundaries, the
//! next-event query, range scheduling, capped advance, changes made while
//! expired timers are handled).
//!
//! Expected values are derived in comments from the rules in the module docs;
//! the randomised comparison against a reference model lives in
//! `tests/wheel_differential.rs`.

use super::level::{SLOTS, SLOT_BITS};
use super::*;

/// `x` with its base-64 digits read as base-[`SLOTS`] digits: a tick laid
/// out on the levels as `x` is with 64 buckets per level (same level, same
/// bucket, same offsets in units of the level below), so the tests that
/// name ticks in a 64-bucket geometry exercise the same paths at any width.
/// The identity at 64 buckets.
fn g(x: u64) -> u64 {
    let mut out = 0;
    let mut digit_no = 0;
    let mut rest = x;
    while rest != 0 {
        out += (rest % 64) << (SLOT_BITS * digit_no);
        rest /= 64;
        digit_no += 1;
    }
    out
}

/// Polls everything due up to `target`, checking on the way that `now()`
/// equals each timer's deadline while it is handled.
fn drain<T>(wheel: &mut Wheel<T>, target: u64) -> Vec<(u64, T)> {
    let mut fired = Vec::new();
    while let Some(e) = wheel.poll(target) {
        assert_eq!(wheel.now(), e.deadline, "now() must read the deadline");
        assert!(!wheel.contains(e.key), "a fired key must be stale");
        fired.push((e.deadline, e.value));
    }
    assert_eq!(wheel.now(), target.max(wheel.now()));
    fired
}

/// Deadlines around level boundaries relative to `start`: the first tick of
/// the next bucket on every level, one before and one after it, and the same
/// one and several rotations ahead. Overflowing values are skipped.
fn boundary_deadlines(start: u64) -> Vec<u64> {
    let mut out = Vec::new();
    for level in 0..LEVELS as u32 {
        let shift = SLOT_BITS * level;
        for rotations in [1u64, 2, 3, 64, 65, 200] {
            let Some(base) = (start >> shift).checked_add(rotations) else {
                continue;
            };
            let Some(boundary) = base.checked_shl(shift).filter(|b| b >> shift == base) else {
                continue;
            };
            for d in [
                boundary.checked_sub(1),
                Some(boundary),
                boundary.checked_add(1),
            ]
            .into_iter()
            .flatten()
            {
                if d >= start {
                    out.push(d);
                }
            }
        }
    }
    for delay in [
        0u64,
        1,
        63,
        64,
        65,
        4095,
        4096,
        4097,
        3 * 64 + 5,
        5 * 4096 + 1,
    ] {
        // The same delays laid out on the levels as at 64 buckets (see `g`).
        out.push(start.saturating_add(delay));
        out.push(start.saturating_add(g(delay)));
    }
    out.push(u64::MAX);
    out.sort_unstable();
    out.dedup();
    out
}

const STARTS: [u64; 8] = [
    0,
    63,
    64,
    4095,
    4096,
    (1 << 36) - 1,
    u64::MAX - 100,
    0x1234_5678_9abc_def0,
];

#[test]
fn fires_on_deadline_never_early() {
    let mut w = Wheel::new();
    let k = w.insert(5, 1);
    assert!(w.poll(4).is_none());
    assert_eq!(w.now(), 4);
    assert!(w.contains(k));
    let e = w.poll(5).unwrap();
    assert_eq!((e.key, e.deadline, e.value), (k, 5, 1));
    assert!(w.poll(5).is_none());
    assert!(w.is_empty());
}

#[test]
fn zero_delay_is_due_at_next_poll_not_at_insert() {
    let mut w = Wheel::starting_at(42);
    let k = w.insert(0, "now");
    // Armed, not fired synchronously.
    assert!(w.contains(k));
    assert_eq!(w.len(), 1);
    assert_eq!(w.deadline(k), Some(42));
    assert_eq!(w.next_deadline(), Some(42));
    assert_eq!(w.ticks_to_next_event(100), 0);
    // The next poll returns it without moving time.
    let e = w.poll(42).unwrap();
    assert_eq!((e.deadline, e.value, w.now()), (42, "now", 42));
}

#[test]
fn past_deadline_is_clamped_to_now() {
    let mut w = Wheel::starting_at(100);
    let k = w.insert_at(50, ());
    assert_eq!(w.deadline(k), Some(100));
    let k2 = w.insert(10, ());
    assert!(w.reschedule_at(k2, 7).is_ok());
    assert_eq!(w.deadline(k2), Some(100));
    assert_eq!(drain(&mut w, 100).len(), 2);
}

#[test]
fn boundary_deadlines_fire_exactly_alone() {
    for start in STARTS {
        for d in boundary_deadlines(start) {
            let mut w = Wheel::starting_at(start);
            let k = w.insert_at(d, d);
            assert_eq!(w.deadline(k), Some(d));
            assert_eq!(w.next_deadline(), Some(d), "start {start} deadline {d}");
            if d > start {
                assert!(w.poll(d - 1).is_none(), "early: start {start} d {d}");
                assert_eq!(w.now(), d - 1);
            }
            let e = w
                .poll(d)
                .unwrap_or_else(|| panic!("late: start {start} d {d}"));
            assert_eq!((e.deadline, e.value, w.now()), (d, d, d));
            assert!(w.is_empty());
        }
    }
}

#[test]
fn boundary_deadlines_fire_in_order_together() {
    for start in STARTS {
        let mut w = Wheel::starting_at(start);
        let deadlines = boundary_deadlines(start);
        // Arm in reverse so that arm order and deadline order differ.
        for &d in deadlines.iter().rev() {
            w.insert_at(d, d);
        }
        assert_eq!(w.len(), deadlines.len());
        // Poll in uneven steps so that some targets fall mid-bucket.
        let mut fired = Vec::new();
        let mut target = start;
        while !w.is_empty() {
            target = target.saturating_add(1 + (target - start) / 3);
            for (d, v) in drain(&mut w, target) {
                assert_eq!(d, v);
                assert!(d <= target);
                fired.push(d);
            }
            assert!(w.next_deadline().is_none_or(|n| n > target));
        }
        assert_eq!(fired, deadlines, "start {start}");
    }
}

#[test]
fn same_tick_fires_in_arm_order_across_levels() {
    // Deadline 4096 + 7 is on level 2 from tick 0, on level 2 from tick 4000
    // and on level 0 from tick 4096: arm one timer from each position.
    let d = g(4096 + 7);
    let mut w = Wheel::new();
    w.insert_at(d, 0);
    w.insert_at(d, 1);
    assert!(w.poll(g(4000)).is_none());
    w.insert_at(d, 2);
    assert!(w.poll(g(4096)).is_none());
    w.insert_at(d, 3);
    assert!(w.poll(g(4100)).is_none());
    w.insert_at(d, 4);
    let fired: Vec<_> = drain(&mut w, d).into_iter().map(|(_, v)| v).collect();
    assert_eq!(fired, [0, 1, 2, 3, 4]);
}

/// A higher bucket holding two timers pops the earlier one without
/// cascading it (`Hierarchy::pop_earliest_of_few`): by deadline whichever
/// comes first in the list, by arming order on a tie even when the list
/// order says otherwise (`a` moved in place after `b` was armed), and not
/// at all when a timer was moved past the bucket's end (`c`): each must
/// come out as a cascade would have it.
#[test]
fn a_bucket_of_two_pops_its_earliest_timer_first() {
    // Both in the level-1 bucket 64..=127 seen from tick 0.
    let mut w = Wheel::new();
    w.insert_at(g(120), 'a');
    w.insert_at(g(100), 'b');
    assert_eq!(drain(&mut w, g(200)), [(g(100), 'b'), (g(120), 'a')]);

    let mut w = Wheel::new();
    let a = w.insert_at(g(100), 'a');
    w.insert_at(g(100), 'b');
    w.reschedule_at(a, g(100)).unwrap();
    assert_eq!(drain(&mut w, g(200)), [(g(100), 'b'), (g(100), 'a')]);

    let mut w = Wheel::new();
    let c = w.insert_at(g(100), 'c');
    w.insert_at(g(110), 'd');
    w.reschedule_at(c, g(300)).unwrap();
    assert_eq!(drain(&mut w, g(400)), [(g(110), 'd'), (g(300), 'c')]);

    // The earlier timer is due after the target: nothing fires, and the
    // next poll still finds both.
    let mut w = Wheel::new();
    w.insert_at(g(120), 'a');
    w.insert_at(g(100), 'b');
    assert_eq!(drain(&mut w, g(90)), []);
    assert_eq!(drain(&mut w, g(200)), [(g(100), 'b'), (g(120), 'a')]);
}

/// A timer armed fewer than `SLOTS` ticks ahead across a block boundary
/// goes to level 0's ring (`hierarchy.rs`, "Level 0 as a ring for new
/// armings"): it must still come after the timers armed earlier in the
/// level-1 bucket for its block, in deadline and then arming order, and
/// the next-deadline queries must see both.
#[test]
fn a_timer_armed_across_a_block_boundary_keeps_order_with_the_level_above() {
    let mut w = Wheel::new();
    // From tick 0, both in the level-1 bucket for the block at 64.
    w.insert_at(g(70), 'c');
    w.insert_at(g(66), 'b');
    assert_eq!(drain(&mut w, g(60)), []);
    // From 60: 70 and 67 are fewer than 64 ticks ahead, in the next block.
    w.insert_at(g(70), 'a');
    w.insert_at(g(67), 'd');
    assert_eq!(w.next_deadline(), Some(g(66)));
    assert_eq!(w.next_wakeup(), Some(g(64)));
    // A target inside the current block fires nothing and keeps them.
    assert_eq!(drain(&mut w, g(63)), []);
    assert_eq!(w.next_deadline(), Some(g(66)));
    assert_eq!(
        drain(&mut w, g(200)),
        [(g(66), 'b'), (g(67), 'd'), (g(70), 'c'), (g(70), 'a')]
    );

    // A lone timer above must not be popped past a ring timer due before
    // it: from 60, the ring holds 65, level 1 a lone 100 (block at 64).
    let mut w = Wheel::new();
    w.insert_at(g(100), 'x');
    assert_eq!(drain(&mut w, g(60)), []);
    w.insert_at(g(65), 'y');
    assert_eq!(w.next_deadline(), Some(g(65)));
    assert_eq!(drain(&mut w, g(200)), [(g(65), 'y'), (g(100), 'x')]);

    // Ring timers only: the next deadline is the ring's first, exactly.
    let mut w = Wheel::new();
    assert_eq!(drain(&mut w, g(50)), []);
    w.insert_at(g(90), 'p');
    w.insert_at(g(80), 'q');
    assert_eq!(w.next_deadline(), Some(g(80)));
    assert_eq!(drain(&mut w, g(85)), [(g(80), 'q')]);
    assert_eq!(w.next_deadline(), Some(g(90)));
    assert_eq!(drain(&mut w, g(100)), [(g(90), 'p')]);
}

#[test]
fn reschedule_counts_as_arming_again() {
    let mut w = Wheel::new();
    let a = w.insert(10, 'a');
    let _b = w.insert(10, 'b');
    let c = w.insert(10, 'c');
    // `a` moves to the back; `c` is already last, so it stays last.
    w.reschedule(a, 10).unwrap();
    w.reschedule(c, 10).unwrap();
    let fired: Vec<_> = drain(&mut w, 10).into_iter().map(|(_, v)| v).collect();
    assert_eq!(fired, ['b', 'a', 'c']);
}

/// A moved timer counts as newly armed (CONTRACT 5): on its new tick it
/// fires after every timer already armed for that tick, whether it came
/// from a later tick (`l` in the same bucket, `f` from a far level), an
/// earlier one (`e`), that same tick (`z`, armed for it before the others),
/// or was held after firing (`h`). Every move function, with the tick on
/// level 0, 1 and 2, and the moves made at the start or after time moved
/// (`a` armed before, `b` after). The range moves keep `z`, already in its
/// window, with its place.
#[test]
fn a_moved_timer_fires_after_those_already_armed_for_its_tick() {
    #[derive(Debug, Clone, Copy)]
    enum Move {
        At,
        After,
        InRangeAt,
        InRangeAfter,
    }
    // (tick, earlier, later, far, the tick the moves are made at)
    let cases = [
        (40, 20, 50, 5000, 10),
        (200, 130, 203, 9000, 0),
        (200, 130, 203, 9000, 100),
        (5000, 4200, 5001, 300_000, 0),
        (5000, 4200, 5001, 300_000, 4100),
    ];
    for how in [Move::At, Move::After, Move::InRangeAt, Move::InRangeAfter] {
        for &(t, early, late, far, pause) in &cases {
            let (t, early, late, far, pause) = (g(t), g(early), g(late), g(far), g(pause));
            let mut w = Wheel::new();
            let z = w.insert_at(t, 'z');
            let e = w.insert_at(early, 'e');
            let l = w.insert_at(late, 'l');
            let f = w.insert_at(far, 'f');
            let h = w.insert_at(pause, 'h');
            let _a = w.insert_at(t, 'a');
            let held = w.poll_keep(pause).unwrap();
            assert_eq!((held.value, w.now()), ('h', pause));
            assert!(w.poll_keep(pause).is_none());
            let _b = w.insert_at(t, 'b');
            for key in [l, e, z, f, h] {
                let delay = t - w.now();
                match how {
                    Move::At => w.reschedule_at(key, t).unwrap(),
                    Move::After => w.reschedule(key, delay).unwrap(),
                    Move::InRangeAt => assert_eq!(w.reschedule_at_in_range(key, t..=t), Ok(t)),
                    Move::InRangeAfter => {
                        assert_eq!(w.reschedule_in_range(key, delay..=delay), Ok(t));
                    }
                }
            }
            assert!(w.poll(t - 1).is_none());
            let fired = drain(&mut w, t);
            assert!(fired.iter().all(|&(d, _)| d == t), "{fired:?}");
            let order: String = fired.iter().map(|&(_, v)| v).collect();
            let expected = match how {
                Move::At | Move::After => "ablezfh",
                Move::InRangeAt | Move::InRangeAfter => "zablefh",
            };
            assert_eq!(order, expected, "{how:?} onto tick {t}, moved at {pause}");
        }
    }
}

#[test]
fn reschedule_within_the_same_bucket_updates_the_deadline() {
    // From tick 0, 5000 and 6000 share bucket 1 of level 2 (4096..8192).
    // `b` is last in it, so the reschedule takes the no-relink path; it must
    // still fire at its new deadline, before `a`, and exactly there.
    let mut w = Wheel::new();
    let a = w.insert_at(g(5000), 'a');
    let b = w.insert_at(g(6000), 'b');
    w.reschedule_at(b, g(4500)).unwrap();
    assert_eq!(w.deadline(b), Some(g(4500)));
    assert_eq!(w.next_deadline(), Some(g(4500)));
    assert!(w.poll(g(4500) - 1).is_none());
    assert_eq!(drain(&mut w, g(5000)), [(g(4500), 'b'), (g(5000), 'a')]);
    assert!(!w.contains(a));
    // Later within the bucket too.
    let c = w.insert_at(g(6000), 'c');
    w.reschedule_at(c, g(8000)).unwrap();
    assert!(w.poll(g(8000) - 1).is_none());
    assert_eq!(drain(&mut w, g(9000)), [(g(8000), 'c')]);
}

#[test]
fn moves_within_a_high_bucket_keep_last_arming_order() {
    // From tick 0, ticks 4096..8192 share bucket 1 of level 2. `a` is moved
    // while not last in that bucket, which leaves it in place (lazy move);
    // on its tick it must still fire after `b`, which was armed for that
    // tick after `a`'s first arming but before its move.
    let mut w = Wheel::new();
    let a = w.insert_at(g(5000), 'a');
    let _b = w.insert_at(g(6000), 'b');
    let _c = w.insert_at(g(7000), 'c');
    w.reschedule_at(a, g(6000)).unwrap();
    let _d = w.insert_at(g(6000), 'd');
    assert_eq!(
        drain(&mut w, g(8000)),
        [
            (g(6000), 'b'),
            (g(6000), 'a'),
            (g(6000), 'd'),
            (g(7000), 'c')
        ]
    );
}

#[test]
fn many_lazy_moves_fire_in_last_arming_order() {
    // 200 timers on four ticks of one level-3 bucket, each moved several
    // times in a scrambled order: per tick they must come out in the order
    // of their last arming, through cascades across levels 2, 1 and 0.
    let mut w = Wheel::new();
    let base = 3 << 18;
    let ticks = [base + 7, base + 4099, base + 70_000, base + 100_000].map(g);
    let keys: Vec<TimerKey> = (0..200u32)
        .map(|i| w.insert_at(ticks[i as usize % 4] + 1, i))
        .collect();
    let mut last_armed = Vec::new();
    let mut x = 12345u32;
    // Under miri (here for the slab's unsafe code) 200 moves: each still
    // scrambles the same four buckets.
    let rounds = if cfg!(miri) { 200 } else { 1000 };
    for round in 0..rounds {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        let i = (x >> 8) as usize % keys.len();
        let tick = ticks[(i + round) % 4];
        w.reschedule_at(keys[i], tick).unwrap();
        last_armed.retain(|&(j, _)| j != i);
        last_armed.push((i, tick));
    }
    // Timers never moved keep their first arming (tick + 1), before all moves.
    let mut expected: Vec<(u64, u32)> = (0..200usize)
        .filter(|i| last_armed.iter().all(|&(j, _)| j != *i))
        .map(|i| (ticks[i % 4] + 1, i as u32))
        .collect();
    expected.extend(last_armed.iter().map(|&(i, tick)| (tick, i as u32)));
    // A stable sort by tick keeps arming order within a tick.
    expected.sort_by_key(|&(tick, _)| tick);
    assert_eq!(drain(&mut w, g(base + 200_000)), expected);
}

#[test]
fn timers_moved_later_out_of_their_bucket_stay_exact() {
    // `a` sits in a level-2 bucket (ticks 4096..8191) and is moved far past
    // it, into what is now another level-2 bucket and then another level.
    // It may stay in its old bucket; the earliest deadline, the wakeup
    // bound and the firing ticks must not show it.
    let mut w = Wheel::new();
    let a = w.insert_at(g(5000), 'a');
    let b = w.insert_at(g(9000), 'b'); // the next level-2 bucket
    let c = w.insert_at(g(300_000), 'c'); // level 3
    assert_eq!(w.next_deadline(), Some(g(5000)));
    w.reschedule_at(a, g(9500)).unwrap();
    assert_eq!(w.next_deadline(), Some(g(9000)), "b is first now");
    assert!(w.next_wakeup().unwrap() <= g(9000));
    w.reschedule_at(b, g(400_000)).unwrap();
    assert_eq!(w.next_deadline(), Some(g(9500)), "a, then c, then b");
    w.reschedule_at(a, g(500_000)).unwrap();
    assert_eq!(w.next_deadline(), Some(g(300_000)));
    assert_eq!(w.ticks_to_next_event(1 << 40), g(300_000));
    assert_eq!(w.ticks_to_next_event(1000), 1000);
    assert_eq!(w.deadline(a), Some(g(500_000)));
    // Advancing through the old buckets fires nothing early.
    assert!(w.poll(g(300_000) - 1).is_none());
    assert_eq!(w.next_deadline(), Some(g(300_000)));
    assert_eq!(
        drain(&mut w, g(1 << 20)),
        vec![(g(300_000), 'c'), (g(400_000), 'b'), (g(500_000), 'a')]
    );
    assert!(!w.contains(c));
}

#[test]
fn timers_moved_later_keep_last_arming_order_across_buckets() {
    // Timers from several level-2 buckets all moved (later) onto one tick in
    // a scrambled order, some of them twice: they fire in the order of their
    // last arming, mixed with timers armed directly for that tick.
    let mut w = Wheel::new();
    let target = g(200_000);
    let keys: Vec<TimerKey> = (0..40u32)
        .map(|i| w.insert_at(g(4096 + 300 * u64::from(i)), i))
        .collect();
    let mut order = Vec::new();
    for step in 0..60usize {
        let i = (step * 17 + 5) % keys.len();
        w.reschedule_at(keys[i], target).unwrap();
        order.retain(|&j| j != i as u32);
        order.push(i as u32);
        if step % 7 == 0 {
            let direct = 100 + step as u32;
            w.insert_at(target, direct);
            order.push(direct);
        }
    }
    let fired: Vec<u32> = drain(&mut w, target)
        .into_iter()
        .filter(|&(tick, _)| tick == target)
        .map(|(_, v)| v)
        .collect();
    assert_eq!(fired, order);
}

#[test]
fn a_lone_timer_far_ahead_fires_on_its_tick_with_nothing_else_moved() {
    // A single timer in a high bucket is popped without cascading; `now()`
    // reads its deadline, and timers armed afterwards are placed from there.
    let mut w = Wheel::new();
    w.insert_at(1_000_003, 'x');
    let e = w.poll(u64::MAX).unwrap();
    assert_eq!((e.deadline, w.now(), e.value), (1_000_003, 1_000_003, 'x'));
    w.insert(1, 'y');
    w.insert(70, 'z');
    assert_eq!(w.next_deadline(), Some(1_000_004));
    assert_eq!(
        drain(&mut w, 2_000_000),
        vec![(1_000_004, 'y'), (1_000_073, 'z')]
    );
    // Not before its tick when the target stops short of it.
    w.insert_at(3_000_000, 'q');
    assert!(w.poll(2_999_999).is_none());
    assert_eq!(w.now(), 2_999_999);
    assert_eq!(w.poll(3_000_000).unwrap().value, 'q');
}

#[test]
fn is_due_now_tells_whether_a_poll_at_now_returns_a_timer() {
    let mut w = Wheel::new();
    assert!(!w.is_due_now());
    w.insert_at(5000, 'a');
    w.insert_at(5000, 'b');
    w.insert_at(5001, 'c');
    assert!(!w.is_due_now());
    // `a` and `b` cascade from level 2 to tick 5000 together.
    assert_eq!(w.poll(10_000).unwrap().value, 'a');
    assert!(w.is_due_now());
    assert_eq!(w.poll(w.now()).unwrap().value, 'b');
    assert!(!w.is_due_now(), "c is due at 5001, not now");
    w.insert(0, 'd');
    assert!(w.is_due_now());
    assert_eq!(w.poll(w.now()).unwrap().value, 'd');
    assert!(!w.is_due_now());
}

#[test]
fn reschedule_moves_between_levels() {
    let mut w = Wheel::new();
    let k = w.insert(1_000_000, 1);
    w.reschedule(k, 3).unwrap();
    assert_eq!(drain(&mut w, 3), [(3, 1)]);
    // now is 3: the new deadline is 3 + 2^40.
    let k = w.insert(2, 2);
    w.reschedule(k, 1 << 40).unwrap();
    assert!(w.poll((1 << 40) + 2).is_none());
    assert!(w
        .poll((1 << 40) + 3)
        .is_some_and(|e| e.deadline == (1 << 40) + 3));
}

#[test]
fn next_deadline_across_levels() {
    let mut w = Wheel::new();
    assert_eq!(w.next_deadline(), None);
    assert_eq!(w.ticks_to_next_event(77), 77, "nothing armed: the cap");
    assert_eq!(w.ticks_to_next_event(u64::MAX), u64::MAX);
    // 270_000 and 300_000 share bucket 1 of level 3 (2^18 ticks wide); the
    // later one is armed first, so the bucket must be scanned, not its head.
    w.insert_at(300_000, ());
    w.insert_at(270_000, ());
    assert_eq!(w.next_deadline(), Some(270_000));
    w.insert_at(1 << 50, ());
    assert_eq!(w.next_deadline(), Some(270_000));
    w.insert_at(100, ()); // level 1
    assert_eq!(w.next_deadline(), Some(100));
    assert_eq!(w.ticks_to_next_event(50), 50);
    assert_eq!(w.ticks_to_next_event(1000), 100);
    assert_eq!(drain(&mut w, 100).len(), 1);
    assert_eq!(w.next_deadline(), Some(270_000));
    assert_eq!(w.ticks_to_next_event(u64::MAX), 269_900);
    w.insert(0, ());
    assert_eq!(w.ticks_to_next_event(u64::MAX), 0);
    drain(&mut w, 100);
    // The poll stops at 270_000 (now reads that deadline); then a mid-bucket
    // jump: the query still answers the exact tick.
    assert!(w.poll(280_000).is_some_and(|e| e.deadline == 270_000));
    assert_eq!(w.ticks_to_next_event(u64::MAX), 30_000);
    assert!(w.poll(280_000).is_none());
    assert_eq!(w.next_deadline(), Some(300_000));
    assert_eq!(w.ticks_to_next_event(u64::MAX), 20_000);
    drain(&mut w, 300_000);
    assert_eq!(w.next_deadline(), Some(1 << 50));
}

#[test]
fn range_lands_inside_on_the_roundest_tick() {
    let mut w = Wheel::new();
    // 16 is the only tick in 10..=20 divisible by 16.
    let k = w.insert_in_range(10..=20, ()).unwrap();
    assert_eq!(w.deadline(k), Some(16));
    w.cancel(k);
    assert!(w.poll(5).is_none());
    // From tick 5: 15..=25, again 16.
    let k = w.insert_in_range(10..=20, ()).unwrap();
    assert_eq!(w.deadline(k), Some(16));
    // A one-tick range is that tick.
    let k = w.insert_in_range(7..=7, ()).unwrap();
    assert_eq!(w.deadline(k), Some(12));
    // 1000..=5000 contains 4096 = 2^12, the only multiple of 4096 in it.
    let k = w.insert_at_in_range(1000..=5000, ()).unwrap();
    assert_eq!(w.deadline(k), Some(4096));
}

#[test]
fn range_choice_matches_brute_force() {
    // The chosen tick lies in the window and no tick of the window has more
    // trailing zero bits. (Integer arithmetic only: under miri, which is
    // here for the wheel's unsafe code, a corner of the square suffices.)
    let span = if cfg!(miri) { 20 } else { 130 };
    for earliest in 1u64..span {
        for latest in earliest..earliest + span {
            let chosen = roundest_tick_in(earliest, latest);
            assert!((earliest..=latest).contains(&chosen));
            let best = (earliest..=latest).map(u64::trailing_zeros).max().unwrap();
            assert_eq!(chosen.trailing_zeros(), best, "{earliest}..={latest}");
        }
    }
    for (e, l) in [
        (1, u64::MAX),
        (u64::MAX, u64::MAX),
        (u64::MAX - 3, u64::MAX),
    ] {
        let chosen = roundest_tick_in(e, l);
        assert!((e..=l).contains(&chosen));
    }
    assert_eq!(roundest_tick_in(1, u64::MAX), 1 << 63);
    assert_eq!(roundest_tick_in(u64::MAX - 3, u64::MAX), u64::MAX - 3);
}

#[test]
fn overlapping_ranges_share_one_tick() {
    let mut w = Wheel::new();
    // 100..=200 and 120..=250 both contain 128, the roundest tick of each
    // (256 would be rounder but lies outside both).
    let a = w.insert_in_range(100..=200, 'a').unwrap();
    let b = w.insert_in_range(120..=250, 'b').unwrap();
    assert_eq!(w.deadline(a), Some(128));
    assert_eq!(w.deadline(b), Some(128));
    assert_eq!(drain(&mut w, 1000), [(128, 'a'), (128, 'b')]);
}

#[test]
fn range_edge_cases() {
    let mut w: Wheel<u8> = Wheel::starting_at(1000);
    #[allow(clippy::reversed_empty_ranges)]
    let inverted = w.insert_in_range(5..=3, 0);
    assert_eq!(inverted, Err(TimerError::InvalidRange));
    #[allow(clippy::reversed_empty_ranges)]
    let inverted = w.insert_at_in_range(2000..=1500, 0);
    assert_eq!(inverted, Err(TimerError::InvalidRange));
    assert!(w.is_empty());
    // A window wholly in the past is clamped to now.
    let k = w.insert_at_in_range(10..=20, 1).unwrap();
    assert_eq!(w.deadline(k), Some(1000));
    // A window reaching into the past starts at now.
    let k = w.insert_at_in_range(10..=1003, 2).unwrap();
    assert!((1000..=1003).contains(&w.deadline(k).unwrap()));
    // Near the end of time both ends saturate; an inverted range is still
    // refused (the delays are compared before saturating).
    let mut w: Wheel<u8> = Wheel::starting_at(u64::MAX - 5);
    #[allow(clippy::reversed_empty_ranges)]
    let inverted = w.insert_in_range(10..=8, 0);
    assert_eq!(inverted, Err(TimerError::InvalidRange));
    let k = w.insert_in_range(10..=20, 0).unwrap();
    assert_eq!(w.deadline(k), Some(u64::MAX));
    // From tick 0, a window starting at 0 picks 0: due now.
    let mut w: Wheel<u8> = Wheel::new();
    let k = w.insert_at_in_range(0..=10, 0).unwrap();
    assert_eq!(w.deadline(k), Some(0));
}

#[test]
fn capped_advance_resumes_the_same_tick() {
    let mut w = Wheel::new();
    for v in 0..5 {
        w.insert(10, v);
    }
    w.insert(20, 5);
    w.insert(20, 6);
    let mut seen = Vec::new();
    let r = w.advance(100, 3, |w, e| seen.push((w.now(), e.value)));
    assert_eq!(
        r,
        Advance {
            expired: 3,
            complete: false
        }
    );
    assert_eq!(w.now(), 10, "stopped inside tick 10");
    assert_eq!(w.len(), 4);
    let r = w.advance(100, 3, |w, e| seen.push((w.now(), e.value)));
    assert_eq!(
        r,
        Advance {
            expired: 3,
            complete: false
        }
    );
    assert_eq!(w.now(), 20);
    let r = w.advance(100, 3, |w, e| seen.push((w.now(), e.value)));
    assert_eq!(
        r,
        Advance {
            expired: 1,
            complete: true
        }
    );
    assert_eq!(w.now(), 100);
    assert_eq!(
        seen,
        [
            (10, 0),
            (10, 1),
            (10, 2),
            (10, 3),
            (10, 4),
            (20, 5),
            (20, 6)
        ]
    );
}

#[test]
fn capped_advance_edge_cases() {
    // A cap of 0 with work due: nothing expires, time stays.
    let mut w = Wheel::new();
    w.insert(10, ());
    let r = w.advance(50, 0, |_, _| panic!("cap is 0"));
    assert_eq!(
        r,
        Advance {
            expired: 0,
            complete: false
        }
    );
    assert_eq!(w.now(), 0, "a zero cap does no work, not even moving time");
    assert_eq!(w.len(), 1);
    // A cap of 0 with nothing due: time still reaches the target.
    let mut w: Wheel<()> = Wheel::new();
    w.insert(100, ());
    let r = w.advance(50, 0, |_, _| panic!("nothing due"));
    assert_eq!(
        r,
        Advance {
            expired: 0,
            complete: true
        }
    );
    assert_eq!(w.now(), 50);
    // A cap equal to the work due completes and reaches the target.
    let mut w = Wheel::new();
    w.insert(10, ());
    w.insert(20, ());
    w.insert(60, ());
    let r = w.advance(50, 2, |_, _| {});
    assert_eq!(
        r,
        Advance {
            expired: 2,
            complete: true
        }
    );
    assert_eq!(w.now(), 50);
    assert_eq!(w.next_deadline(), Some(60));
}

#[test]
fn capped_advance_to_a_past_target_loses_nothing() {
    // Found by the differential test: with timers due now and a target in
    // the past, a capped advance reported "complete" and its final poll
    // popped (and dropped) a due timer.
    let mut w = Wheel::starting_at(100);
    w.insert(0, 'a');
    w.insert(0, 'b');
    w.insert(0, 'c');
    let mut seen = Vec::new();
    let r = w.advance(40, 1, |_, e| seen.push(e.value));
    assert_eq!(
        r,
        Advance {
            expired: 1,
            complete: false
        }
    );
    assert_eq!(w.len(), 2);
    let r = w.advance(40, 0, |_, e| seen.push(e.value));
    assert_eq!(
        r,
        Advance {
            expired: 0,
            complete: false
        }
    );
    assert_eq!(w.len(), 2);
    let r = w.advance(40, 5, |_, e| seen.push(e.value));
    assert_eq!(
        r,
        Advance {
            expired: 2,
            complete: true
        }
    );
    assert_eq!(seen, ['a', 'b', 'c']);
    assert_eq!(w.now(), 100);
}

#[test]
fn now_reads_each_deadline_during_one_long_advance() {
    let mut w = Wheel::new();
    let deadlines = [5u64, 70, 5000, 300_000, 300_000];
    for &d in deadlines.iter().rev() {
        w.insert_at(d, d);
    }
    let mut seen = Vec::new();
    let r = w.advance(1_000_000, usize::MAX, |w, e| {
        assert_eq!(w.now(), e.deadline);
        seen.push(e.value);
    });
    assert_eq!(
        r,
        Advance {
            expired: 5,
            complete: true
        }
    );
    assert_eq!(seen, deadlines);
    assert_eq!(w.now(), 1_000_000);
}

#[test]
fn reschedule_from_inside_expiry() {
    let mut w = Wheel::new();
    let a = w.insert(10, 'a');
    let b = w.insert(10, 'b');
    let c = w.insert(50, 'c');
    let mut seen = Vec::new();
    let r = w.advance(100, usize::MAX, |w, e| {
        if e.value == 'a' {
            // Its own key fired: rescheduling it is refused.
            assert_eq!(w.reschedule(a, 1), Err(TimerError::StaleKey));
            w.reschedule(b, 5).unwrap(); // 10 -> 15
            w.reschedule(c, 0).unwrap(); // 50 -> 10, the tick being processed
        }
        seen.push((w.now(), e.value));
    });
    // `c`, moved to the tick this advance had reached, is due to the next
    // advance (CONTRACT 1): this one stops at tick 10, short of its target.
    assert_eq!((r.expired, r.complete, w.now()), (1, false, 10));
    let r = w.advance(100, usize::MAX, |w, e| seen.push((w.now(), e.value)));
    assert_eq!((r.expired, r.complete), (2, true));
    assert_eq!(seen, [(10, 'a'), (10, 'c'), (15, 'b')]);
}

#[test]
fn a_timer_rearmed_for_now_by_its_callback_fires_once_per_advance() {
    // Re-arming itself for the current tick used to fire again inside the
    // same advance, so an uncapped advance never returned.
    let mut w = Wheel::new();
    let key = w.insert(3, 0u32);
    let mut fired = 0;
    for round in 1..=5 {
        let r = w.advance_keep(100, usize::MAX, |w, e| {
            fired += 1;
            assert_eq!(e.deadline, 3);
            if fired < 5 {
                w.reschedule(e.key, 0).unwrap();
            }
        });
        assert_eq!(r.expired, 1, "round {round}");
        assert_eq!(r.complete, round == 5, "round {round}");
    }
    assert_eq!((fired, w.now()), (5, 100));
    assert!(w.is_held(key));
    // Inserted anew for now from a callback: the same.
    let mut w = Wheel::new();
    w.insert(3, 0u32);
    let r = w.advance(100, usize::MAX, |w, e| {
        w.insert(0, e.value + 1);
    });
    assert_eq!((r.expired, r.complete, w.now()), (1, false, 3));
    assert_eq!(w.next_deadline(), Some(3));
}

#[test]
fn cancel_same_tick_timer_from_inside_expiry() {
    let mut w = Wheel::new();
    let _a = w.insert(10, 'a');
    let b = w.insert(10, 'b');
    let _c = w.insert(10, 'c');
    let mut seen = Vec::new();
    let mut cancelled = None;
    let r = w.advance(100, usize::MAX, |w, e| {
        if e.value == 'a' {
            cancelled = w.cancel(b);
        }
        seen.push(e.value);
    });
    assert_eq!(cancelled, Some('b'));
    assert_eq!(
        r,
        Advance {
            expired: 2,
            complete: true
        }
    );
    assert_eq!(seen, ['a', 'c']);
    assert!(w.is_empty());
}

#[test]
fn zero_delay_insert_from_inside_expiry() {
    let mut w = Wheel::new();
    w.insert(10, 0);
    w.insert(10, 1);
    w.insert(11, 2);
    let mut seen = Vec::new();
    let mut handle = |w: &mut Wheel<i32>, e: Expired<i32>| {
        if e.value == 0 {
            w.insert(0, 10); // due at tick 10, after the already armed `1`
            w.insert(1, 11); // due at tick 11, after `2`
        }
        seen.push((w.now(), e.value));
    };
    // `10` is armed for the tick being processed: due to the next advance,
    // which fires it first, on its own tick.
    let r = w.advance(100, usize::MAX, &mut handle);
    assert_eq!((r.expired, r.complete), (2, false));
    let r = w.advance(100, usize::MAX, &mut handle);
    assert_eq!((r.expired, r.complete), (3, true));
    assert_eq!(seen, [(10, 0), (10, 1), (10, 10), (11, 2), (11, 11)]);
    // The same with the pop-style loop.
    let mut w = Wheel::new();
    w.insert(10, 0);
    let mut seen = Vec::new();
    while let Some(e) = w.poll(10) {
        if e.value < 3 {
            w.insert(0, e.value + 1);
        }
        seen.push((w.now(), e.value));
    }
    assert_eq!(seen, [(10, 0), (10, 1), (10, 2), (10, 3)]);
}

#[test]
fn stale_after_fire_and_after_cancel() {
    let mut w = Wheel::new();
    let fired = w.insert(1, 1);
    let cancelled = w.insert(5, 2);
    assert_eq!(w.cancel(cancelled), Some(2));
    assert!(w.poll(1).is_some());
    for k in [fired, cancelled] {
        assert!(!w.contains(k));
        assert_eq!(w.cancel(k), None);
        assert_eq!(w.reschedule(k, 3), Err(TimerError::StaleKey));
        assert_eq!(w.reschedule_at(k, 3), Err(TimerError::StaleKey));
        assert_eq!(w.get(k), None);
        assert_eq!(w.get_mut(k), None);
        assert_eq!(w.deadline(k), None);
    }
    // New timers (due at 1 + 7) reuse the freed slots; old keys must not
    // reach them.
    let new1 = w.insert(7, 3);
    let new2 = w.insert(7, 4);
    assert_ne!(new1, fired);
    assert_ne!(new2, cancelled);
    for k in [fired, cancelled] {
        assert_eq!(w.cancel(k), None);
        assert_eq!(w.reschedule(k, 100), Err(TimerError::StaleKey));
    }
    assert_eq!(w.len(), 2);
    assert_eq!(drain(&mut w, 8), [(8, 3), (8, 4)]);
}

#[test]
fn saturation_at_the_end_of_time() {
    let mut w = Wheel::new();
    let k = w.insert(u64::MAX, 'x');
    assert_eq!(w.deadline(k), Some(u64::MAX));
    assert!(w.poll(u64::MAX - 1).is_none());
    assert_eq!(w.now(), u64::MAX - 1);
    assert_eq!(drain(&mut w, u64::MAX), [(u64::MAX, 'x')]);

    let mut w = Wheel::starting_at(u64::MAX - 5);
    let a = w.insert(10, 'a'); // saturates to MAX
    let b = w.insert(3, 'b'); // MAX - 2
    let c = w.insert(u64::MAX, 'c'); // MAX, after `a`
    assert_eq!(w.deadline(a), Some(u64::MAX));
    assert_eq!(w.deadline(b), Some(u64::MAX - 2));
    assert_eq!(w.deadline(c), Some(u64::MAX));
    w.reschedule(b, u64::MAX).unwrap(); // saturates: MAX, after `c`
    assert_eq!(w.ticks_to_next_event(u64::MAX), 5);
    assert!(w.poll(u64::MAX - 1).is_none());
    assert_eq!(
        drain(&mut w, u64::MAX),
        [(u64::MAX, 'a'), (u64::MAX, 'c'), (u64::MAX, 'b')]
    );
    // At the last tick every delay is due now.
    let d = w.insert(1, 'd');
    assert_eq!(w.deadline(d), Some(u64::MAX));
    assert_eq!(drain(&mut w, u64::MAX), [(u64::MAX, 'd')]);
}

#[test]
fn clock_going_backwards_is_no_time() {
    let mut w = Wheel::new();
    assert!(w.poll(100).is_none());
    let k = w.insert(10, 1);
    assert!(w.poll(50).is_none());
    assert_eq!(w.now(), 100, "now never moves back");
    assert_eq!(w.deadline(k), Some(110));
    // Due timers still come out of a backwards poll, at now.
    w.insert(0, 2);
    let e = w.poll(3).unwrap();
    assert_eq!((e.value, e.deadline, w.now()), (2, 100, 100));
    assert_eq!(drain(&mut w, 110), [(110, 1)]);
}

#[test]
fn huge_idle_jump_with_one_far_timer() {
    let mut w = Wheel::new();
    let far = 10_000_000_000u64;
    let k = w.insert_at(far, ());
    let hour = 3_600_000;
    assert!(w.poll(w.now() + hour).is_none());
    assert_eq!(w.now(), hour);
    assert_eq!(w.deadline(k), Some(far));
    assert_eq!(w.next_deadline(), Some(far));
    // Thousands of hour-long jumps stay cheap (each is O(levels)) and exact.
    for _ in 0..2000 {
        assert!(w.poll(w.now() + hour).is_none());
    }
    assert_eq!(w.now(), 2001 * hour);
    assert!(w.poll(far - 1).is_none());
    assert_eq!(drain(&mut w, u64::MAX), [(far, ())]);
}

#[test]
fn clone_is_a_checkpoint() {
    let mut w = Wheel::new();
    let mut keys = Vec::new();
    for i in 0..200u64 {
        keys.push(w.insert(i * i * 37 % 100_000, i));
    }
    for k in keys.iter().step_by(7) {
        w.cancel(*k);
    }
    assert!(w.poll(500).is_some());
    let mut checkpoint = w.clone();
    assert_eq!(checkpoint.len(), w.len());
    assert_eq!(checkpoint.now(), w.now());
    let original_fired = drain(&mut w, 200_000);
    assert!(w.is_empty());
    // Advancing the original left the checkpoint untouched.
    assert_eq!(checkpoint.len(), original_fired.len());
    let replay = drain(&mut checkpoint, 200_000);
    assert_eq!(replay, original_fired);
    // Keys are valid in both copies independently.
    let mut a = Wheel::new();
    let k = a.insert(5, 'a');
    let mut b = a.clone();
    assert_eq!(a.cancel(k), Some('a'));
    assert_eq!(b.get(k), Some(&'a'));
    assert_eq!(drain(&mut b, 5), [(5, 'a')]);
}

#[test]
fn debug_output() {
    let mut w = Wheel::starting_at(7);
    w.insert(0, ()); // level 0, slot 7
    w.insert(SLOTS as u64, ()); // level 1, slot 1
    let s = format!("{w:?}");
    assert!(s.starts_with("Wheel {"), "{s}");
    assert!(s.contains("now: 7"), "{s}");
    assert!(s.contains("len: 2"), "{s}");
    // Highest word first, one per 64 buckets.
    let pad = "0000000000000000_".repeat(SLOTS / 64 - 1);
    assert!(
        s.contains(&format!("\"0x{pad}0000000000000080\"")),
        "level 0 bit 7: {s}"
    );
    assert!(
        s.contains(&format!("\"0x{pad}0000000000000002\"")),
        "level 1 bit 1: {s}"
    );
    let k = TimerKey::from_raw((3 << 32) | 9);
    assert_eq!(format!("{k:?}"), "TimerKey(9v3)");
    let e = w.poll(7).unwrap();
    let s = format!("{e:?}");
    assert!(s.contains("deadline: 7") && s.contains("value: ()"), "{s}");
    let r = Advance {
        expired: 1,
        complete: true,
    };
    assert_eq!(format!("{r:?}"), "Advance { expired: 1, complete: true }");
}

#[test]
fn iter_lists_every_armed_timer() {
    let mut w = Wheel::starting_at(1000);
    let mut expected = Vec::new();
    for (i, d) in [1000u64, 1001, 1100, 5000, 1 << 30, u64::MAX]
        .into_iter()
        .enumerate()
    {
        let k = w.insert_at(d, i);
        expected.push((k, d, i));
    }
    let gone = w.insert(3, 99);
    w.cancel(gone);
    let mut listed: Vec<_> = w.iter().map(|(k, d, &v)| (k, d, v)).collect();
    listed.sort_by_key(|&(_, d, v)| (d, v));
    assert_eq!(listed, expected);
    drain(&mut w, 1100);
    assert_eq!(w.iter().count(), 3);
    assert_eq!(Wheel::<()>::new().iter().count(), 0);
}

#[test]
fn len_and_is_empty() {
    let mut w = Wheel::default();
    assert!(w.is_empty());
    assert_eq!(w.len(), 0);
    let a = w.insert(1, ());
    let b = w.insert(1 << 20, ());
    w.insert(0, ());
    assert_eq!(w.len(), 3);
    assert!(!w.is_empty());
    w.cancel(a);
    assert_eq!(w.len(), 2);
    w.cancel(a); // stale: no change
    assert_eq!(w.len(), 2);
    w.reschedule(b, 5).unwrap(); // no change
    assert_eq!(w.len(), 2);
    assert!(w.poll(0).is_some());
    assert_eq!(w.len(), 1);
    drain(&mut w, 10);
    assert!(w.is_empty());
}

#[test]
fn with_capacity_preallocates() {
    let mut w = Wheel::with_capacity(100);
    let cap = w.capacity();
    assert!(cap >= 100);
    assert_eq!(w.now(), 0);
    assert!(w.is_empty());
    for i in 0..100 {
        w.insert(i, i);
    }
    assert_eq!(w.capacity(), cap, "no growth within the capacity");
    assert_eq!(Wheel::<u8>::new().capacity(), 0);
}

#[test]
fn get_mut_changes_the_payload_that_fires() {
    let mut w = Wheel::new();
    let k = w.insert(3, 1);
    *w.get_mut(k).unwrap() += 41;
    assert_eq!(w.get(k), Some(&42));
    assert_eq!(drain(&mut w, 3), [(3, 42)]);
}

#[test]
fn raw_keys_round_trip_and_garbage_is_stale() {
    let mut w = Wheel::new();
    let k = w.insert(10, 'k');
    let other = w.insert(10, 'o');
    let raw = k.to_raw();
    assert_eq!(TimerKey::from_raw(raw), k);
    assert_eq!(w.get(TimerKey::from_raw(raw)), Some(&'k'));
    // Garbage: out-of-range index, wrong generation, all ones, zero with a
    // bumped generation.
    let garbage = [
        u64::MAX,
        1 << 20,
        raw ^ (1 << 32),
        raw ^ (7 << 40),
        (u64::from(u32::MAX) << 32) | 1,
    ];
    for g in garbage {
        let g = TimerKey::from_raw(g);
        assert!(!w.contains(g));
        assert_eq!(w.cancel(g), None);
        assert_eq!(w.reschedule(g, 1), Err(TimerError::StaleKey));
        assert_eq!(w.deadline(g), None);
        assert_eq!(w.get_mut(g), None);
    }
    assert_eq!(w.len(), 2);
    assert_eq!(w.cancel(TimerKey::from_raw(raw)), Some('k'));
    // After cancellation the raw key is stale too.
    assert_eq!(w.cancel(TimerKey::from_raw(raw)), None);
    assert_eq!(w.get(other), Some(&'o'));
}

#[test]
fn next_wakeup_is_a_cheap_lower_bound_that_reaches_the_deadline() {
    let mut w = Wheel::new();
    assert_eq!(w.next_wakeup(), None);
    // 300_000 sits on level 3 (2^18 <= 300_000 < 2^24): its bucket starts at
    // 262_144 = 1 << 18, the first tick at which the wheel must look at it.
    w.insert_at(g(300_000), ());
    assert_eq!(w.next_wakeup(), Some(g(1 << 18)));
    assert_eq!(w.next_deadline(), Some(g(300_000)));
    // Sleeping until each wakeup and polling walks down the levels, never
    // past the deadline, and arrives exactly on it.
    let mut wakeups = Vec::new();
    while let Some(wakeup) = w.next_wakeup() {
        assert!(wakeup <= g(300_000));
        wakeups.push(wakeup);
        if let Some(expired) = w.poll(wakeup) {
            assert_eq!(expired.deadline, g(300_000));
            break;
        }
    }
    // 300_000 = 0b100_1001_0011_1110_0000: level 3 bucket at 2^18, level 2
    // bucket at 2^18 + 9 * 2^12, level 1 bucket at ... + 15 * 64, then the tick.
    assert_eq!(wakeups, [262_144, 299_008, 299_968, 300_000].map(g));
    // A level-0 timer's wakeup is its deadline.
    let mut w = Wheel::new();
    w.insert_at(10, ());
    assert_eq!(w.next_wakeup(), Some(10));
    // ticks_to_next_event answers from the bound when it is past the cap.
    let mut w = Wheel::new();
    w.insert_at(g(300_000), ());
    assert_eq!(w.ticks_to_next_event(1000), 1000);
    assert_eq!(w.ticks_to_next_event(u64::MAX), g(300_000));
}

#[test]
fn next_deadline_is_remembered_and_forgotten_when_the_earliest_goes() {
    // All three sit in one level-2 bucket (ticks 4096..8191 from now = 0),
    // so the first query walks the bucket and later ones use the memo.
    let mut wheel = Wheel::new();
    let a = wheel.insert_at(g(5000), 'a');
    let b = wheel.insert_at(g(4500), 'b');
    let _c = wheel.insert_at(g(6000), 'c');
    assert_eq!(wheel.next_deadline(), Some(g(4500)));
    assert_eq!(wheel.next_deadline(), Some(g(4500)));
    // Unrelated changes keep it; an earlier insert lowers it.
    wheel.cancel(a);
    assert_eq!(wheel.next_deadline(), Some(g(4500)));
    let d = wheel.insert_at(g(4400), 'd');
    assert_eq!(wheel.next_deadline(), Some(g(4400)));
    // The earliest moving later or going away forgets it.
    wheel.reschedule_at(d, g(7000)).unwrap();
    assert_eq!(wheel.next_deadline(), Some(g(4500)));
    wheel.cancel(b);
    assert_eq!(wheel.next_deadline(), Some(g(6000)));
    // Firing forgets it too.
    assert_eq!(wheel.poll(g(6000)).map(|e| e.value), Some('c'));
    assert_eq!(wheel.next_deadline(), Some(g(7000)));
    // A clone carries the memo and stays exact on its own.
    let mut copy = wheel.clone();
    assert_eq!(copy.poll(g(7000)).map(|e| e.value), Some('d'));
    assert_eq!(copy.next_deadline(), None);
    assert_eq!(wheel.next_deadline(), Some(g(7000)));
}

#[test]
fn next_deadline_stays_exact_while_one_tick_is_fired_timer_by_timer() {
    // Two timers due at tick 5 and one at 9, all on level 0. Popping the
    // first timer of tick 5 leaves the other due (the memo, 5, still
    // holds); popping the second empties the bucket and must forget it.
    let mut wheel = Wheel::new();
    wheel.insert_at(5, 'a');
    wheel.insert_at(5, 'b');
    wheel.insert_at(9, 'c');
    assert_eq!(wheel.next_deadline(), Some(5));
    assert_eq!(wheel.poll(20).map(|e| e.value), Some('a'));
    assert_eq!(wheel.next_deadline(), Some(5));
    assert_eq!(wheel.ticks_to_next_event(100), 0);
    assert_eq!(wheel.poll(20).map(|e| e.value), Some('b'));
    assert_eq!(wheel.next_deadline(), Some(9));
    assert_eq!(wheel.ticks_to_next_event(100), 4);
    assert_eq!(wheel.poll(20).map(|e| e.value), Some('c'));
    assert_eq!(wheel.next_deadline(), None);
}

#[test]
fn advance_fires_what_a_callback_arms_for_now_or_before_the_target() {
    // After each callback `advance` checks level 0 for "nothing due by the
    // target" without a poll; a timer the callback arms for the current
    // tick, or for a tick before the target, must still fire in this call.
    // `z` sits on level 0 past the target, so the check has an answer.
    let mut wheel = Wheel::new();
    wheel.insert_at(5, 'a');
    wheel.insert_at(60, 'z');
    let mut fired = Vec::new();
    let done = wheel.advance(50, usize::MAX, |w, e| {
        fired.push((e.deadline, e.value));
        match e.value {
            'a' => drop(w.insert(0, 'b')),
            'b' => drop(w.insert(3, 'c')),
            _ => {}
        }
    });
    // `b`, armed for the tick being processed, is due to the next advance.
    assert_eq!((done.expired, done.complete, wheel.now()), (1, false, 5));
    let done = wheel.advance(50, usize::MAX, |w, e| {
        fired.push((e.deadline, e.value));
        if e.value == 'b' {
            w.insert(3, 'c');
        }
    });
    assert_eq!(fired, vec![(5, 'a'), (5, 'b'), (8, 'c')]);
    assert_eq!(
        done,
        Advance {
            expired: 2,
            complete: true
        }
    );
    assert_eq!(wheel.now(), 50);
    assert_eq!(wheel.next_deadline(), Some(60));
    // Nothing due by the target: time still reaches it.
    let done = wheel.advance(55, usize::MAX, |_, _| unreachable!());
    assert_eq!(
        done,
        Advance {
            expired: 0,
            complete: true
        }
    );
    assert_eq!(wheel.now(), 55);
}

/// Arming numbers chosen by the caller (the simulation's sequence numbers)
/// are the ones same-tick order goes by, on level 0 and after cascades, and
/// the ones `number_of` and `poll_numbered` give back; the wheel's own
/// numbering continues after them.
#[test]
fn caller_numbered_armings_keep_their_numbers_and_order() {
    let mut wheel = Wheel::new();
    // One tick on level 0 and one that cascades from a higher level; on
    // each, numbered and plain armings interleave.
    let (a, b) = (g(5), g(2) + 3);
    for (deadline, base) in [(a, 100), (b, 2_000)] {
        let first = wheel.insert_at_numbered(deadline, base, "first");
        let second = wheel.insert_at(deadline, "second");
        let third = wheel.insert_at_numbered(deadline, base + 900, "third");
        assert_eq!(wheel.number_of(first), Some(base));
        assert_eq!(wheel.number_of(second), Some(base + 1));
        assert_eq!(wheel.number_of(third), Some(base + 900));
    }
    let mut fired = Vec::new();
    while let Some((timer, seq)) = wheel.poll_numbered(u64::MAX) {
        assert_eq!(wheel.number_of(timer.key), None, "fired: stale");
        fired.push((timer.deadline, timer.value, seq));
    }
    assert_eq!(
        fired,
        [
            (a, "first", 100),
            (a, "second", 101),
            (a, "third", 1_000),
            (b, "first", 2_000),
            (b, "second", 2_001),
            (b, "third", 2_900),
        ]
    );
}

#[test]
#[should_panic(expected = "below one already given out")]
fn a_caller_arming_number_below_one_given_out_panics() {
    let mut wheel = Wheel::new();
    let _ = wheel.insert_at_numbered(10, 5, ());
    let _ = wheel.insert_at_numbered(10, 4, ());
}

/// A big bucket on level 2 or 3 cascades from both ends of its list at
/// once (see `Hierarchy::cascade`): every timer still fires exactly once,
/// on its own tick, and timers sharing a tick in the order of their last
/// arming (odd and even counts, so that the two walks meet on one entry and
/// between two; moved timers, so that list order and arming order differ).
/// The service's test `item5_fifo_within_a_tick_after_cascades_from_high_levels`
/// checks the list order itself, which its store depends on.
#[test]
fn a_big_high_bucket_cascades_exactly_and_in_arming_order() {
    // Past 16 entries the walk goes both ways (`ONE_WAY_FIRST`); miri
    // gets smaller buckets that still do.
    let cases: &[(usize, u64)] = if cfg!(miri) {
        &[(1, 1), (3, 2), (40, 7), (41, 7)]
    } else {
        &[(1, 1), (2, 1), (3, 2), (1000, 37), (1001, 37), (4000, 4096)]
    };
    for &(count, spread) in cases {
        // Bucket 3 of level 2 and bucket 2 of level 3 (spreads fit inside).
        for base in [g(3 << 12), g(2 << 18)] {
            let mut wheel = Wheel::new();
            let mut keys = Vec::new();
            // (deadline, arming number) of each timer's last arming.
            let mut expected = Vec::new();
            for i in 0..count {
                let deadline = base + (i as u64 * 7919) % spread;
                keys.push(wheel.insert_at(deadline, i));
                expected.push((deadline, i, i));
            }
            // Every third timer is armed again at its own deadline: it now
            // goes after the others of its tick, though its place in the
            // bucket's list is unchanged (a lazy move above level 0).
            for (arming, i) in (count..).zip((0..count).step_by(3)) {
                wheel.reschedule_at(keys[i], expected[i].0).unwrap();
                expected[i].2 = arming;
            }
            expected.sort_by_key(|&(deadline, _, arming)| (deadline, arming));
            let expected: Vec<(u64, usize)> = expected.iter().map(|&(d, i, _)| (d, i)).collect();
            assert_eq!(
                drain(&mut wheel, base + spread),
                expected,
                "{count} timers at {base}"
            );
            assert!(wheel.is_empty());
        }
    }
}

/// `next_deadline` reads a higher bucket from both ends at once
/// (`min_deadline`): the earliest entry is found wherever it sits in the
/// list (first, last, either side of the middle), for odd and even lengths.
#[test]
fn next_deadline_finds_the_earliest_anywhere_in_a_high_bucket() {
    let base = g(3 << 12); // a level-2 bucket, 4096 ticks wide
    for count in 1..=9u64 {
        for earliest_at in 0..count {
            let mut wheel = Wheel::new();
            for i in 0..count {
                let deadline = if i == earliest_at {
                    base + 5
                } else {
                    base + 100 + i
                };
                wheel.insert_at(deadline, i);
            }
            assert_eq!(
                wheel.next_deadline(),
                Some(base + 5),
                "{count} entries, earliest at {earliest_at}"
            );
        }
    }
}

/// A callback that polls past its advance's target moves `now` there; the
/// advance then fires what is due at that `now` (as with its target
/// clamped to `now`) and stops. Fails if the advance's pops compare with
/// the target it began with and stop at once (C would wait for the next
/// advance).
#[test]
fn a_callback_polling_past_the_advance_target_leaves_what_is_due_now_to_the_advance() {
    let mut wheel = Wheel::new();
    wheel.insert(5, 'a');
    wheel.insert(20, 'b');
    wheel.insert(20, 'c');
    let mut fired = Vec::new();
    let done = wheel.advance(10, usize::MAX, |wheel, timer| {
        fired.push((wheel.now(), timer.value));
        if timer.value == 'a' {
            let polled = wheel.poll(20).expect("b is due at 20");
            fired.push((wheel.now(), polled.value));
        }
    });
    assert_eq!(fired, [(5, 'a'), (20, 'b'), (20, 'c')]);
    assert!(done.complete);
    assert_eq!(wheel.now(), 20);
    assert!(wheel.is_empty());
}
