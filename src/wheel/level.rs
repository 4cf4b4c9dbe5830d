//! One level of the hierarchy: [`SLOTS`] buckets, each a FIFO list of timer
//! entries, and an occupancy bitmap with one bit per non-empty bucket.
//!
//! The bitmap is what makes idle time free: finding the next non-empty bucket
//! is a shift and a `trailing_zeros` per 64-bucket word, whatever the number
//! of empty ticks. The level width is one knob, [`SLOT_BITS`]: with 64
//! buckets the bitmap is a single word and every search is one mask and
//! one `trailing_zeros`; wider levels (fewer of them, so fewer cascades)
//! scan `SLOTS / 64` words.

use std::ops::{Deref, DerefMut};

use super::hierarchy::LEVELS;
use super::node::EntryId;

/// log2 of the number of buckets per level (6 or more).
///
/// 6 in every build users get. `--cfg tickwheel_wide_levels` makes it 8
/// (256 buckets, multi-word bitmaps): `.ci/run` runs the wheel's tests that
/// way too, so the code for wider levels stays correct while it is not the
/// default (why it is not: the module docs of `wheel`, "Shape").
#[cfg(not(tickwheel_wide_levels))]
pub(crate) const SLOT_BITS: u32 = 6;
/// log2 of the number of buckets per level: 8 in this test build.
#[cfg(tickwheel_wide_levels)]
pub(crate) const SLOT_BITS: u32 = 8;
/// Buckets per level.
pub(crate) const SLOTS: usize = 1 << SLOT_BITS;
/// Words of a level's bitmap.
const WORDS: usize = SLOTS / 64;

const _: () = assert!(SLOT_BITS >= 6, "a bitmap word holds 64 buckets");

/// One bit per bucket of a level.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bitmap([u64; WORDS]);

impl Bitmap {
    pub(crate) const EMPTY: Bitmap = Bitmap([0; WORDS]);

    #[inline(always)]
    pub(crate) fn set(&mut self, slot: usize) {
        self.0[slot / 64] |= 1 << (slot % 64);
    }

    #[inline(always)]
    pub(crate) fn clear(&mut self, slot: usize) {
        self.0[slot / 64] &= !(1 << (slot % 64));
    }

    #[inline(always)]
    pub(crate) fn test(&self, slot: usize) -> bool {
        self.0[slot / 64] & (1 << (slot % 64)) != 0
    }

    #[inline(always)]
    pub(crate) fn any(&self) -> bool {
        self.0.iter().any(|&word| word != 0)
    }

    /// The first set bit at or after `slot` (`< SLOTS`).
    #[inline(always)]
    pub(crate) fn first_from(&self, slot: usize) -> Option<usize> {
        let word = slot / 64;
        let bits = self.0[word] & (u64::MAX << (slot % 64));
        if bits != 0 {
            return Some(word * 64 + bits.trailing_zeros() as usize);
        }
        // Empty when there is one word: the one-word case is one mask.
        (word + 1..WORDS)
            .find(|&w| self.0[w] != 0)
            .map(|w| w * 64 + self.0[w].trailing_zeros() as usize)
    }

    /// The first set bit strictly after `slot` (`< SLOTS`).
    #[inline(always)]
    pub(crate) fn first_after(&self, slot: usize) -> Option<usize> {
        if slot + 1 >= SLOTS {
            None
        } else {
            self.first_from(slot + 1)
        }
    }

    /// The words, lowest buckets first (for `Debug`).
    pub(crate) fn words(&self) -> [u64; WORDS] {
        self.0
    }
}

#[derive(Clone)]
pub(crate) struct Level<I> {
    /// Bit `s` is set iff bucket `s` is non-empty.
    pub(crate) occupied: Bitmap,
    /// Level 0 only: bit `s` is set when bucket `s` may be out of arming
    /// order (entries cascaded behind newer ones; see `hierarchy`). Clear
    /// bits promise arming order. Always clear on higher levels, whose list
    /// order is never used.
    pub(crate) unsorted: Bitmap,
    pub(crate) head: [I; SLOTS],
    pub(crate) tail: [I; SLOTS],
}

impl<I: EntryId> Level<I> {
    pub(crate) const fn new() -> Self {
        Level {
            occupied: Bitmap::EMPTY,
            unsorted: Bitmap::EMPTY,
            head: [I::NIL; SLOTS],
            tail: [I::NIL; SLOTS],
        }
    }

    /// The first non-empty bucket strictly after `slot`, if any.
    #[inline]
    pub(crate) fn next_occupied_after(&self, slot: usize) -> Option<usize> {
        self.occupied.first_after(slot)
    }

    #[inline]
    pub(crate) fn is_occupied(&self, slot: usize) -> bool {
        self.occupied.test(slot)
    }
}

/// How a hierarchy holds its [`LEVELS`] levels, chosen by its entry id
/// type ([`EntryId::Levels`]).
///
/// * Boxed (`u32` ids: the keyed `Wheel` and the service): the hierarchy
///   stays small, so the structs holding it (a `Wheel`, a shard core) can
///   be built and moved by value on small stacks (a loom model's threads
///   have tens of KiB), at the price of one more pointer between the
///   hierarchy and its buckets.
/// * Inline (address ids: the embedded wheel): the buckets sit right after
///   the hierarchy's own fields, one load closer: a pop or an arming
///   waits for one dependent load fewer (Ratas' workload at 1000 pairs,
///   `benches/ratas_embedded.rs`: about 4 % less user CPU). The embedded
///   wheel's state is built in place on the heap
///   ([`Hierarchy::write_starting_at`](super::hierarchy::Hierarchy::write_starting_at)),
///   never on the stack.
pub(crate) trait LevelStore<I>:
    Deref<Target = [Level<I>; LEVELS]> + DerefMut + Clone
{
    /// Writes a store of empty levels to `dst`, building at most one level
    /// on the stack.
    ///
    /// # Safety
    /// `dst` is valid for writes and aligned; what it held is overwritten
    /// without being dropped.
    unsafe fn write_empty(dst: *mut Self);
}

impl<I: EntryId> LevelStore<I> for Box<[Level<I>; LEVELS]> {
    unsafe fn write_empty(dst: *mut Self) {
        // Copies of one empty level (block copies) rather than a level
        // built in place per element, which wrote every bucket's head and
        // tail one by one: a wheel's construction was ~4% of arming and
        // firing 1,000 timers (`examples/fill_expire.rs`, callgrind).
        let levels: Box<[Level<I>]> = vec![Level::new(); LEVELS].into_boxed_slice();
        let levels: Box<[Level<I>; LEVELS]> = levels
            .try_into()
            .unwrap_or_else(|_| unreachable!("exactly LEVELS levels"));
        // SAFETY: the caller's contract.
        unsafe { dst.write(levels) };
    }
}

/// The levels held inline (see [`LevelStore`]).
#[derive(Clone)]
#[repr(transparent)]
pub(crate) struct InlineLevels<I>([Level<I>; LEVELS]);

impl<I> Deref for InlineLevels<I> {
    type Target = [Level<I>; LEVELS];

    #[inline(always)]
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl<I> DerefMut for InlineLevels<I> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl<I: EntryId> LevelStore<I> for InlineLevels<I> {
    unsafe fn write_empty(dst: *mut Self) {
        // `repr(transparent)` over the array: its levels one after another.
        let first = dst.cast::<Level<I>>();
        for level in 0..LEVELS {
            // SAFETY: inside `*dst` (the caller's contract), aligned as
            // the array is.
            unsafe { first.add(level).write(Level::new()) };
        }
    }
}
