//! The tests' random generator: splitmix64, tiny and seedable, so that a
//! failing seed replays exactly. Good enough to pick operations and delays;
//! not for anything that needs statistical quality beyond that.
//!
//! Each test file that wants it includes this file
//! (`#[path = "common/rng.rs"] mod rng;`) and may add methods of its own in
//! an `impl Rng` block (the type is local to that test crate).

#![allow(dead_code)]

/// splitmix64 (Steele, Lea and Flood): the state is the seed, advanced by a
/// fixed odd constant per call.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..bound` (up to a modulo bias that small bounds make
    /// negligible).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}
