//! Placeholder: replaced by the sim benchmark.
fn main() {}
