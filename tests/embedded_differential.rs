//! The embedded wheel against the keyed one: random operation sequences
//! (arm, move, range arm, cancel, drop an entry, advance by small and huge
//! steps with and without a cap, callbacks that re-arm themselves, cancel
//! or arm other entries) run on an [`EmbeddedWheel`] and on a [`Wheel`]
//! driven the same way (one key per entry; a fired key is forgotten). Both
//! must fire the same timers on the same ticks in the same order, and agree
//! on every query on the way. The keyed wheel itself is checked against a
//! plain model in `tests/wheel_differential.rs`.

use std::pin::Pin;

use proptest::collection::vec;
use proptest::prelude::*;
use tickwheel::{EmbeddedWheel, Expired, Fired, TimerEntry, TimerKey, Wheel};

const ENTRIES: usize = 8;

#[derive(Debug, Clone)]
enum Op {
    Arm {
        entry: usize,
        delay: u64,
    },
    ArmInRange {
        entry: usize,
        earliest: u64,
        width: u64,
    },
    Cancel {
        entry: usize,
    },
    /// Drops the embedded entry (and cancels the keyed timer) and puts a
    /// fresh entry in its place.
    Replace {
        entry: usize,
    },
    Advance {
        by: u64,
        cap: usize,
    },
    /// `advance_to_next_event(horizon, cap)` on the embedded wheel; on the
    /// keyed one the same (`keyed_fused`) or `ticks_to_next_event` and an
    /// advance by that, which it must equal.
    AdvanceToNext {
        horizon: u64,
        cap: usize,
        keyed_fused: bool,
    },
}

fn delay() -> impl Strategy<Value = u64> {
    prop_oneof![0..70u64, 60..5000u64, 4000..300_000u64, Just(u64::MAX / 2)]
}

fn op() -> impl Strategy<Value = Op> {
    let entry = 0..ENTRIES;
    prop_oneof![
        4 => (entry.clone(), delay()).prop_map(|(entry, delay)| Op::Arm { entry, delay }),
        2 => (entry.clone(), delay(), 0..5000u64)
            .prop_map(|(entry, earliest, width)| Op::ArmInRange { entry, earliest, width }),
        1 => entry.clone().prop_map(|entry| Op::Cancel { entry }),
        1 => entry.prop_map(|entry| Op::Replace { entry }),
        3 => (prop_oneof![0..3u64, 1..100u64, 50..10_000u64, 100_000..1_000_000u64], 1..6usize)
            .prop_map(|(by, cap)| Op::Advance { by, cap }),
        2 => (prop_oneof![0..3u64, 1..100u64, 50..10_000u64, 100_000..1_000_000u64], 1..6usize, any::<bool>())
            .prop_map(|(horizon, cap, keyed_fused)| Op::AdvanceToNext { horizon, cap, keyed_fused }),
    ]
}

/// What a callback does for the `n`-th fired timer (the same on both
/// sides): re-arm itself, arm the next entry, or cancel the next entry.
fn reaction(n: usize, entry: usize, deadline: u64) -> Option<(usize, Option<u64>)> {
    let other = (entry + 1) % ENTRIES;
    match (n + entry) % 5 {
        0 => Some((entry, Some(deadline % 97))),
        1 => Some((other, Some(deadline % 13))),
        2 => Some((other, None)),
        _ => None,
    }
}

fn entry(entries: &Pin<Box<[TimerEntry<usize>]>>, i: usize) -> Pin<&TimerEntry<usize>> {
    // SAFETY: a boxed slice's elements are pinned with it (never moved).
    unsafe { entries.as_ref().map_unchecked(|s| &s[i]) }
}

struct Keyed {
    wheel: Wheel<usize>,
    keys: [Option<TimerKey>; ENTRIES],
}

impl Keyed {
    fn arm(&mut self, i: usize, delay: u64) {
        match self.keys[i] {
            Some(key) => self.wheel.reschedule(key, delay).unwrap(),
            None => self.keys[i] = Some(self.wheel.insert(delay, i)),
        }
    }

    fn cancel(&mut self, i: usize) -> bool {
        self.keys[i]
            .take()
            .is_some_and(|key| self.wheel.cancel(key).is_some())
    }
}

fn run(start: u64, ops: &[Op]) {
    let mut entries: Pin<Box<[TimerEntry<usize>]>> =
        Box::into_pin((0..ENTRIES).map(TimerEntry::new).collect::<Box<[_]>>());
    let mut embedded = EmbeddedWheel::starting_at(start);
    let mut keyed = Keyed {
        wheel: Wheel::starting_at(start),
        keys: [None; ENTRIES],
    };
    let mut fired_embedded = Vec::new();
    let mut fired_keyed = Vec::new();
    for op in ops {
        match *op {
            Op::Arm { entry: i, delay } => {
                embedded.schedule(entry(&entries, i), delay).unwrap();
                keyed.arm(i, delay);
            }
            Op::ArmInRange {
                entry: i,
                earliest,
                width,
            } => {
                let range = earliest..=earliest.saturating_add(width);
                let a = embedded
                    .schedule_in_range(entry(&entries, i), range.clone())
                    .unwrap();
                let b = match keyed.keys[i] {
                    Some(key) => keyed.wheel.reschedule_in_range(key, range).unwrap(),
                    None => {
                        let key = keyed.wheel.insert_in_range(range, i).unwrap();
                        keyed.keys[i] = Some(key);
                        keyed.wheel.deadline(key).unwrap()
                    }
                };
                assert_eq!(a, b, "range deadline");
            }
            Op::Cancel { entry: i } => {
                assert_eq!(entry(&entries, i).cancel(), keyed.cancel(i));
            }
            Op::Replace { entry: i } => {
                // Drop every entry and arm the survivors again on fresh
                // ones, except `i`: a drop of armed entries must disarm
                // exactly them. (A boxed slice is replaced whole.)
                let deadlines: Vec<Option<u64>> = entries.iter().map(|e| e.deadline()).collect();
                entries = Box::into_pin((0..ENTRIES).map(TimerEntry::new).collect::<Box<[_]>>());
                assert_eq!(embedded.len(), 0, "dropped entries left armed");
                keyed.cancel(i);
                let mut survivors: Vec<(u64, usize)> = Vec::new();
                for (j, deadline) in deadlines.iter().enumerate() {
                    if let (Some(d), true) = (deadline, j != i) {
                        survivors.push((*d, j));
                    }
                }
                // Re-armed in the keyed wheel's order of arming is not
                // recoverable, so both sides re-arm the survivors in one
                // order, as new armings.
                for &(d, j) in &survivors {
                    embedded.schedule_at(entry(&entries, j), d).unwrap();
                    keyed.cancel(j);
                    keyed.keys[j] = Some(keyed.wheel.insert_at(d, j));
                }
            }
            Op::Advance { .. } | Op::AdvanceToNext { .. } => {
                assert_eq!(embedded.now(), keyed.wheel.now());
                let mut n = fired_embedded.len();
                let on_embedded = |wheel: &mut EmbeddedWheel<usize>, timer: Fired<usize>| {
                    fired_embedded.push((timer.deadline, timer.value));
                    if let Some((j, action)) = reaction(n, timer.value, timer.deadline) {
                        match action {
                            Some(delay) => wheel.schedule(entry(&entries, j), delay).unwrap(),
                            None => {
                                wheel.cancel(&entry(&entries, j)).unwrap();
                            }
                        }
                    }
                    n += 1;
                };
                let a = match *op {
                    Op::Advance { by, cap } => {
                        embedded.advance(embedded.now().saturating_add(by), cap, on_embedded)
                    }
                    Op::AdvanceToNext { horizon, cap, .. } => {
                        embedded.advance_to_next_event(horizon, cap, on_embedded)
                    }
                    _ => unreachable!(),
                };
                let mut n = fired_keyed.len();
                let keys = &mut keyed.keys;
                let on_keyed = |wheel: &mut Wheel<usize>, timer: Expired<usize>| {
                    fired_keyed.push((timer.deadline, timer.value));
                    keys[timer.value] = None;
                    if let Some((j, action)) = reaction(n, timer.value, timer.deadline) {
                        match (action, keys[j]) {
                            (Some(delay), Some(key)) => wheel.reschedule(key, delay).unwrap(),
                            (Some(delay), None) => keys[j] = Some(wheel.insert(delay, j)),
                            (None, key) => {
                                if let Some(key) = key {
                                    wheel.cancel(key);
                                }
                                keys[j] = None;
                            }
                        }
                    }
                    n += 1;
                };
                let wheel = &mut keyed.wheel;
                let b = match *op {
                    Op::Advance { by, cap } => {
                        wheel.advance(wheel.now().saturating_add(by), cap, on_keyed)
                    }
                    Op::AdvanceToNext {
                        horizon,
                        cap,
                        keyed_fused: true,
                    } => wheel.advance_to_next_event(horizon, cap, on_keyed),
                    Op::AdvanceToNext { horizon, cap, .. } => {
                        let target = wheel
                            .now()
                            .saturating_add(wheel.ticks_to_next_event(horizon));
                        wheel.advance(target, cap, on_keyed)
                    }
                    _ => unreachable!(),
                };
                assert_eq!(a, b, "advance outcome");
            }
        }
        assert_eq!(fired_embedded, fired_keyed);
        assert_eq!(embedded.now(), keyed.wheel.now());
        assert_eq!(embedded.len(), keyed.wheel.len());
        assert_eq!(embedded.next_deadline(), keyed.wheel.next_deadline());
        assert_eq!(embedded.is_due_now(), keyed.wheel.is_due_now());
        for cap in [1, 64, 5000] {
            assert_eq!(
                embedded.ticks_to_next_event(cap),
                keyed.wheel.ticks_to_next_event(cap)
            );
        }
        for i in 0..ENTRIES {
            let keyed_deadline = keyed.keys[i].and_then(|k| keyed.wheel.deadline(k));
            assert_eq!(entry(&entries, i).deadline(), keyed_deadline, "entry {i}");
        }
    }
    // Everything left fires the same way too.
    let mut rest_embedded = Vec::new();
    let _ = embedded.advance(u64::MAX, usize::MAX, |_, t| {
        rest_embedded.push((t.deadline, t.value))
    });
    let mut rest_keyed = Vec::new();
    let _ = keyed.wheel.advance(u64::MAX, usize::MAX, |_, t| {
        rest_keyed.push((t.deadline, t.value))
    });
    assert_eq!(rest_embedded, rest_keyed);
    // The wheel goes first here: the entries must outlive nothing.
    drop(embedded);
    assert!(entries.iter().all(|e| !e.is_armed()));
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 4 } else { 512 },
        ..ProptestConfig::default()
    })]

    #[test]
    fn embedded_wheel_matches_keyed_wheel(
        start in prop_oneof![Just(0u64), 0..1_000_000u64, Just(u64::MAX - 100_000)],
        ops in vec(op(), 1..80),
    ) {
        run(start, &ops);
    }
}
