//! Placeholder: replaced by the schemes benchmark.
fn main() {}
