//! Differential tests: random operation sequences run on [`tickwheel::Wheel`]
//! and on a plain ordered-map model (`tests/common/wheel_model.rs`), which
//! must agree on every fire tick, payload and order, and on `now()`, `len()`
//! and `next_deadline()` after every step.
//!
//! `PROPTEST_CASES` overrides the number of cases (default 2000 for the main
//! property).

#[path = "common/wheel_model.rs"]
mod wheel_model;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::RngAlgorithm;
use wheel_model::{decode, Action, Harness, Op, Pick, When};

/// A delay spread over every level of the wheel: a random number of random
/// low bits, plus the edge values.
fn delay() -> impl Strategy<Value = u64> {
    prop_oneof![
        1 => Just(0u64),
        1 => Just(1u64),
        1 => Just(u64::MAX),
        1 => prop::sample::select(vec![63u64, 64, 65, 4095, 4096, 4097, 262_144]),
        8 => (1u32..=64, any::<u64>()).prop_map(|(bits, raw)| raw >> (64 - bits)),
    ]
}

fn boundary() -> impl Strategy<Value = When> {
    (0u8..=10, 0u8..=3, -2i8..=2).prop_map(|(level, rotations, offset)| When::Boundary {
        level,
        rotations,
        offset,
    })
}

/// A tick for `insert_at`, `reschedule_at` and range ends.
fn when() -> impl Strategy<Value = When> {
    prop_oneof![
        3 => delay().prop_map(When::Delay),
        3 => boundary(),
        1 => delay().prop_map(When::Back),
        1 => any::<u64>().prop_map(When::At),
    ]
}

/// A target for poll/advance: by 0, 1, random, to a level boundary, huge,
/// the end of time, or backwards.
fn target() -> impl Strategy<Value = When> {
    prop_oneof![
        1 => Just(When::Delay(0)),
        1 => Just(When::Delay(1)),
        3 => (0u64..300).prop_map(When::Delay),
        3 => boundary(),
        2 => delay().prop_map(When::Delay),
        1 => Just(When::At(u64::MAX)),
        1 => (0u64..200).prop_map(|d| When::At(u64::MAX - d)),
        1 => delay().prop_map(When::Back),
    ]
}

fn pick() -> impl Strategy<Value = Pick> {
    prop_oneof![
        4 => any::<u16>().prop_map(Pick::Live),
        2 => any::<u16>().prop_map(Pick::Any),
        1 => any::<u32>().prop_map(Pick::Garbage),
    ]
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        1 => Just(Action::Nothing),
        4 => delay().prop_map(Action::Insert),
        2 => when().prop_map(Action::InsertAt),
        1 => (delay(), delay()).prop_map(|(a, b)| Action::InsertInRange(a, b)),
        // Mostly well-formed: earliest, then a width.
        1 => (delay(), 0u64..5000)
            .prop_map(|(a, w)| Action::InsertInRange(a, a.saturating_add(w))),
        1 => (when(), when()).prop_map(|(a, b)| Action::InsertAtInRange(a, b)),
        2 => pick().prop_map(Action::Cancel),
        3 => (pick(), when()).prop_map(|(p, w)| Action::Reschedule(p, w)),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => action().prop_map(Op::Do),
        2 => (target(), vec(action(), 0..4)).prop_map(|(to, actions)| Op::Poll {
            to,
            max_polls: u16::MAX,
            actions,
        }),
        1 => (target(), 0u16..6, vec(action(), 0..4)).prop_map(|(to, max_polls, actions)| {
            Op::Poll {
                to,
                max_polls,
                actions,
            }
        }),
        2 => (target(), 0u16..12, vec(action(), 0..4))
            .prop_map(|(to, max, actions)| Op::Advance { to, max, actions }),
    ]
}

fn start() -> impl Strategy<Value = u64> {
    prop_oneof![
        prop::sample::select(vec![
            0u64,
            63,
            64,
            4095,
            4096,
            (1 << 36) - 1,
            u64::MAX - 100
        ]),
        (0u64..5000).prop_map(|d| u64::MAX - d),
        any::<u64>(),
    ]
}

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(2000),
        max_shrink_iters: 20_000,
        // The default ChaCha generator dominates the run time of a debug
        // build (it is not optimised there); XorShift is ample for tests.
        rng_algorithm: RngAlgorithm::XorShift,
        ..ProptestConfig::default()
    })]

    /// The main property: any sequence of operations, from any start tick.
    #[test]
    fn wheel_matches_model(start in start(), ops in vec(op(), 1..60)) {
        let mut h = Harness::new(start);
        h.run(&ops);
        // Drain everything: every armed timer fires, in model order.
        h.step(&Op::Poll { to: When::At(u64::MAX), max_polls: u16::MAX, actions: vec![] });
        h.check();
        prop_assert!(h.wheel.is_empty());
    }

    /// Many timers on few ticks: stresses FIFO order across cascades and
    /// reschedules.
    #[test]
    fn crowded_ticks_keep_arm_order(
        deadlines in vec(0u64..3, 1..200),
        level in 0u8..=6,
        moves in vec((any::<u16>(), 0u64..3), 0..50),
        steps in vec(0u8..=6, 1..8),
    ) {
        let mut h = Harness::new(0);
        let spacing = |i: u64| When::Boundary { level, rotations: 1 + i as u8, offset: 0 };
        for &d in &deadlines {
            h.step(&Op::Do(Action::InsertAt(spacing(d))));
        }
        for &(p, d) in &moves {
            h.step(&Op::Do(Action::Reschedule(Pick::Live(p), spacing(d))));
        }
        h.check();
        for &l in &steps {
            h.step(&Op::Poll {
                to: When::Boundary { level: l, rotations: 1, offset: 0 },
                max_polls: u16::MAX,
                actions: vec![],
            });
            h.check();
        }
        h.step(&Op::Poll { to: When::At(u64::MAX), max_polls: u16::MAX, actions: vec![] });
        prop_assert_eq!(h.fired.len(), deadlines.len());
    }
}

/// The byte decoder a fuzz target uses, fed by a fixed-seed generator: checks
/// that decoded streams run clean and gives a reproducible extra sweep.
#[test]
fn seeded_byte_streams() {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        // xorshift64*
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let streams = cases(2000) / 4;
    let mut total_ops = 0;
    for _ in 0..streams {
        let len = (next() % 400) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let (start, ops) = decode(&bytes);
        total_ops += ops.len();
        let mut h = Harness::new(start);
        h.run(&ops);
    }
    // Streams average 200 bytes, and an operation takes 2 to 30 of them.
    assert!(
        total_ops > 5 * streams as usize,
        "the decoder produced too few operations"
    );
}
