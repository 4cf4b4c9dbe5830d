//! Placeholder replaced by the wheel benchmark.
fn main() {}
