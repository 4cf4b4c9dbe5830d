//! The hierarchical wheel against the ordered-map reference model, driven by
//! the same operation language as the property test
//! (`tests/wheel_differential.rs`): raw bytes are decoded by
//! `wheel_model::decode` into a start tick and a list of `Op`s, each run on
//! both, which must agree on every fire tick, payload and order and on
//! `now()`, `len()` and `next_deadline()` after every step.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/common/wheel_model.rs"]
mod wheel_model;

use wheel_model::{decode, Harness, Op, When};

fuzz_target!(|data: &[u8]| {
    let (start, ops) = decode(data);
    let mut harness = Harness::new(start);
    harness.run(&ops);
    // Drain: every timer still armed fires, in model order.
    harness.step(&Op::Poll {
        to: When::At(u64::MAX),
        max_polls: u16::MAX,
        actions: vec![],
    });
    harness.check();
    assert!(harness.wheel.is_empty());
});
