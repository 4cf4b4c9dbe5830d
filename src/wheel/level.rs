//! One level of the hierarchy: 64 buckets, each a FIFO list of slab entries,
//! and a 64-bit occupancy bitmap with one bit per non-empty bucket.
//!
//! The bitmap is what makes idle time free: finding the next non-empty bucket
//! is one shift and one `trailing_zeros`, whatever the number of empty ticks.

use super::slab::NIL;

/// log2 of the number of buckets per level.
pub(crate) const SLOT_BITS: u32 = 6;
/// Buckets per level.
pub(crate) const SLOTS: usize = 1 << SLOT_BITS;

#[derive(Clone)]
pub(crate) struct Level {
    /// Bit `s` is set iff bucket `s` is non-empty.
    pub(crate) occupied: u64,
    /// Level 0 only: bit `s` is set when bucket `s` may be out of arming
    /// order (entries cascaded behind newer ones; see `hierarchy`). Clear
    /// bits promise arming order. Always clear on higher levels, whose list
    /// order is never used.
    pub(crate) unsorted: u64,
    pub(crate) head: [u32; SLOTS],
    pub(crate) tail: [u32; SLOTS],
}

impl Level {
    pub(crate) const fn new() -> Self {
        Level {
            occupied: 0,
            unsorted: 0,
            head: [NIL; SLOTS],
            tail: [NIL; SLOTS],
        }
    }

    /// The first non-empty bucket strictly after `slot`, if any.
    #[inline]
    pub(crate) fn next_occupied_after(&self, slot: usize) -> Option<usize> {
        // `slot + 1` may be 64: shifting a u64 by 64 is not allowed, so mask.
        let above = if slot + 1 >= SLOTS {
            0
        } else {
            self.occupied & (u64::MAX << (slot + 1))
        };
        (above != 0).then(|| above.trailing_zeros() as usize)
    }

    #[inline]
    pub(crate) fn is_occupied(&self, slot: usize) -> bool {
        self.occupied & (1 << slot) != 0
    }
}
