//! Unit tests of held timers: `poll_keep` / `advance_keep` keep a fired
//! timer under its key, a `reschedule*` arms it again in place, `cancel`
//! frees it (module docs, "Keeping a fired timer").

use std::rc::Rc;

use super::*;

#[test]
fn a_held_timer_keeps_its_key_and_payload_until_armed_again_or_cancelled() {
    let mut wheel = Wheel::new();
    let other = wheel.insert(500, "other");
    let key = wheel.insert(5, "pace");
    assert_eq!(wheel.len(), 2);

    let fired = wheel.poll_keep(100).unwrap();
    assert_eq!((fired.key, fired.deadline, fired.value), (key, 5, "pace"));
    assert_eq!(wheel.now(), 5);
    // Held: not armed, but the key still reaches the payload.
    assert!(wheel.is_held(key));
    assert!(!wheel.contains(key));
    assert_eq!(wheel.deadline(key), None);
    assert_eq!(wheel.get(key), Some(&"pace"));
    assert_eq!(wheel.len(), 1);
    assert!(!wheel.is_held(other));
    // A held timer never fires by itself.
    assert_eq!(wheel.poll_keep(100), None);
    assert_eq!(wheel.now(), 100);

    // Armed again far ahead (above level 0, through the general link), same key.
    wheel.reschedule(key, 1000).unwrap();
    assert!(!wheel.is_held(key));
    assert!(wheel.contains(key));
    assert_eq!(wheel.deadline(key), Some(1100));
    assert_eq!(wheel.len(), 2);
    *wheel.get_mut(key).unwrap() = "pace again";

    let fired = wheel.poll_keep(2000).unwrap();
    assert_eq!((fired.key, fired.deadline), (other, 500));
    assert_eq!(wheel.cancel(other), Some("other"), "frees a held timer");
    assert!(wheel.get(other).is_none());
    assert_eq!(wheel.len(), 1);
    let fired = wheel.poll_keep(2000).unwrap();
    assert_eq!(
        (fired.key, fired.deadline, fired.value),
        (key, 1100, "pace again")
    );
    assert_eq!(wheel.len(), 0);
    assert!(wheel.is_empty());

    assert_eq!(wheel.cancel(key), Some("pace again"));
    assert!(!wheel.is_held(key));
    assert_eq!(wheel.get(key), None);
    assert_eq!(wheel.reschedule(key, 1), Err(TimerError::StaleKey));
    assert_eq!(wheel.cancel(key), None);
    assert_eq!(wheel.poll_keep(u64::MAX), None);
    assert_eq!(wheel.len(), 0);
}

#[test]
fn arming_a_held_timer_again_counts_as_arming_for_same_tick_order() {
    for near in [true, false] {
        // `near`: the shared tick is on level 0; else it is reached by cascades.
        let delay = if near { 7 } else { 70_000 };
        let mut wheel = Wheel::new();
        let a = wheel.insert(1, 'a');
        let b = wheel.insert(1, 'b');
        assert_eq!(wheel.poll_keep(1).unwrap().key, a);
        assert_eq!(wheel.poll_keep(1).unwrap().key, b);
        // Armed in the order b, c, a for one tick: they fire in that order.
        wheel.reschedule(b, delay).unwrap();
        let c = wheel.insert(delay, 'c');
        wheel.reschedule_at(a, 1 + delay).unwrap();
        let order: Vec<char> = std::iter::from_fn(|| wheel.poll_keep(u64::MAX))
            .map(|e| {
                assert_eq!(e.deadline, 1 + delay);
                e.value
            })
            .collect();
        assert_eq!(order, ['b', 'c', 'a'], "near: {near}");
        assert!(wheel.is_held(c));
    }
}

#[test]
fn reschedule_in_range_arms_a_held_timer_even_if_its_old_deadline_is_in_the_window() {
    let mut wheel = Wheel::new();
    let key = wheel.insert(3, 1u32);
    assert_eq!(wheel.poll_keep(3).unwrap().key, key);
    // The window 0..=8 from now contains the tick it fired at (3 = now).
    assert_eq!(wheel.reschedule_in_range(key, 0..=8), Ok(8));
    assert!(wheel.contains(key));
    assert_eq!(wheel.len(), 1);
    let fired = wheel.poll_keep(100).unwrap();
    assert_eq!((fired.key, fired.deadline), (key, 8));
    // Absolute form, window far ahead: armed through the out-of-line move.
    assert_eq!(wheel.reschedule_at_in_range(key, 900..=1100), Ok(1024));
    assert_eq!(wheel.deadline(key), Some(1024));
    // An invalid window leaves the held timer held.
    assert_eq!(wheel.poll_keep(2000).unwrap().deadline, 1024);
    #[allow(clippy::reversed_empty_ranges)]
    let inverted = wheel.reschedule_in_range(key, 5..=4);
    assert_eq!(inverted, Err(TimerError::InvalidRange));
    assert!(wheel.is_held(key));
}

#[test]
fn advance_keep_lets_the_callback_rearm_or_free_what_fired() {
    let mut wheel = Wheel::new();
    let periodic = wheel.insert(4, "periodic");
    let once = wheel.insert(6, "once");
    let forgotten = wheel.insert(9, "forgotten");
    let mut fired = Vec::new();
    let done = wheel.advance_keep(20, usize::MAX, |wheel, timer| {
        assert!(wheel.is_held(timer.key));
        fired.push((timer.deadline, timer.value));
        match timer.value {
            "periodic" => wheel.reschedule(timer.key, 4).unwrap(),
            "once" => assert_eq!(wheel.cancel(timer.key), Some("once")),
            _ => {}
        }
    });
    assert_eq!(
        done,
        Advance {
            expired: 7,
            complete: true
        }
    );
    assert_eq!(
        fired,
        [
            (4, "periodic"),
            (6, "once"),
            (8, "periodic"),
            (9, "forgotten"),
            (12, "periodic"),
            (16, "periodic"),
            (20, "periodic"),
        ]
    );
    assert_eq!(wheel.deadline(periodic), Some(24));
    assert_eq!(wheel.get(once), None);
    assert!(wheel.is_held(forgotten));
    assert_eq!(wheel.len(), 1);
    // A cap stops it as `advance` does; the held timer is untouched.
    let done = wheel.advance_keep(100, 2, |wheel, timer| {
        wheel.reschedule(timer.key, 4).unwrap();
    });
    assert_eq!(
        done,
        Advance {
            expired: 2,
            complete: false
        }
    );
    assert_eq!(wheel.now(), 28);
    assert!(wheel.is_held(forgotten));
}

/// Periodic and one-shot timers driven the freeing way (`advance`, a new
/// insert when a fired timer is armed again) and the keeping way
/// (`advance_keep`, a reschedule of the held key): the same timers fire at
/// the same ticks in the same order, and `len` agrees throughout.
#[test]
fn keeping_and_freeing_fire_the_same_sequence() {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut random = move |bound: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % bound
    };
    // Per timer id: re-arm delay (0 = one-shot, left held or freed).
    let delays: Vec<u64> = (0..300)
        .map(|_| match random(4) {
            0 => 0,
            1 => 1 + random(8),
            2 => 1 + random(200),
            _ => 1 + random(20_000),
        })
        .collect();
    let mut freeing = Wheel::new();
    let mut keeping = Wheel::new();
    let mut keys = Vec::new();
    for (id, _) in delays.iter().enumerate() {
        let first = random(5_000);
        freeing.insert(first, id);
        keys.push(keeping.insert(first, id));
    }
    let mut target = 0;
    while target < 200_000 {
        target += 1 + random(3_000);
        let mut freed_order = Vec::new();
        let a = freeing.advance(target, usize::MAX, |wheel, timer| {
            freed_order.push((timer.deadline, timer.value));
            if delays[timer.value] != 0 {
                wheel.insert(delays[timer.value], timer.value);
            }
        });
        let mut kept_order = Vec::new();
        let b = keeping.advance_keep(target, usize::MAX, |wheel, timer| {
            kept_order.push((timer.deadline, timer.value));
            assert_eq!(timer.key, keys[timer.value], "the key is kept");
            match delays[timer.value] {
                0 if timer.value % 2 == 0 => {
                    wheel.cancel(timer.key).unwrap();
                }
                0 => {}
                delay => wheel.reschedule(timer.key, delay).unwrap(),
            }
        });
        assert_eq!(freed_order, kept_order, "up to {target}");
        assert_eq!(a, b);
        assert_eq!(freeing.len(), keeping.len());
        assert_eq!(freeing.next_deadline(), keeping.next_deadline());
    }
    assert!(freeing.len() > 100, "the periodic timers are still armed");
}

#[test]
fn held_payloads_are_dropped_once() {
    let payload = Rc::new(());
    let mut wheel = Wheel::new();
    let kept = wheel.insert(1, Rc::clone(&payload));
    let freed = wheel.insert(1, Rc::clone(&payload));
    assert_eq!(Rc::strong_count(&payload), 3);
    drop(wheel.poll_keep(1).unwrap()); // the clone handed out
    drop(wheel.poll_keep(1).unwrap());
    assert_eq!(Rc::strong_count(&payload), 3, "both held in the wheel");
    drop(wheel.cancel(freed).unwrap());
    assert_eq!(Rc::strong_count(&payload), 2);
    let copy = wheel.clone();
    assert!(copy.is_held(kept));
    assert_eq!(Rc::strong_count(&payload), 3);
    drop(copy);
    drop(wheel);
    assert_eq!(Rc::strong_count(&payload), 1);
}

#[test]
fn held_lists_exactly_the_held_timers() {
    let mut wheel = Wheel::new();
    let a = wheel.insert(2, 'a');
    let b = wheel.insert(3, 'b');
    let c = wheel.insert(4, 'c');
    let _armed = wheel.insert(100, 'd');
    assert!(wheel.held().is_empty());
    while wheel.poll_keep(4).is_some() {}
    wheel.reschedule(b, 10).unwrap();
    wheel.cancel(c).unwrap();
    assert_eq!(wheel.held(), [(a, 2)]);
}
