//! Storage for the wheel's timers: a slab of entries addressed by generation-
//! checked keys.
//!
//! Every entry lives at a fixed index for as long as it is armed. Each entry is
//! also a node of one doubly linked list (the bucket it sits in), linked by
//! index, so that unlinking a cancelled timer is O(1) without `unsafe`.
//!
//! The entries are one `Vec`, so reaching an entry is one bounds-checked
//! index. It grows by doubling up to [`DOUBLING_LIMIT`] entries and by half its
//! size after that, so right after a growth at most a third of it is unused
//! (at most 1.5 entries of memory per armed timer, against 2 for a `Vec` that
//! doubles). Pages of fixed size would bound the slack tighter and never copy
//! on growth, but they add a second indirection to every access, which made
//! `reschedule` and `insert`/`cancel` measurably slower (see BENCHMARKS.md).
//!
//! A vacant entry keeps its generation. Freeing an entry bumps the generation,
//! so every key handed out for the previous occupant becomes stale. An entry
//! whose generation would wrap is retired instead of reused: a stale key can
//! therefore never match a later timer, not even after four billion reuses.

use std::fmt;

use super::hierarchy::{Node, Nodes, UNLINKED};

/// The "no entry" link value.
pub(crate) const NIL: u32 = u32::MAX;

/// Up to this many entries the slab doubles; beyond, it grows by half.
const DOUBLING_LIMIT: usize = 4096;

/// Identifies one armed timer of a [`Wheel`](crate::wheel::Wheel).
///
/// A key is `Copy` and cheap. Once its timer has expired or been cancelled the
/// key is *stale*: every method that takes it returns `None` or
/// [`TimerError::StaleKey`](crate::TimerError::StaleKey), and it never reaches
/// another timer.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerKey {
    index: u32,
    generation: u32,
}

impl TimerKey {
    /// Packs the key into one `u64` (for C callers and hash maps).
    pub const fn to_raw(self) -> u64 {
        ((self.generation as u64) << 32) | self.index as u64
    }

    /// Rebuilds a key from [`to_raw`](Self::to_raw). Any `u64` is accepted: a
    /// value that never named a timer is simply stale.
    pub const fn from_raw(raw: u64) -> Self {
        TimerKey {
            index: raw as u32,
            generation: (raw >> 32) as u32,
        }
    }

    pub(crate) const fn index(self) -> u32 {
        self.index
    }
}

impl fmt::Debug for TimerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TimerKey({}v{})", self.index, self.generation)
    }
}

/// One slab cell. `value` is `Some` exactly while the cell holds an armed timer.
#[derive(Clone)]
pub(crate) struct Entry<T> {
    pub(crate) value: Option<T>,
    /// The tick the timer is due at (already clamped to be `>= now`).
    pub(crate) deadline: u64,
    /// Previous and next entry in the same bucket, or [`NIL`].
    /// For a vacant entry `next` links the free list.
    pub(crate) prev: u32,
    pub(crate) next: u32,
    generation: u32,
    /// Which bucket (`level * SLOTS + slot`) holds this entry, or `UNLINKED`.
    pub(crate) bucket: u16,
}

/// The slab: entries plus a LIFO free list threaded through vacant entries.
#[derive(Clone)]
pub(crate) struct Slab<T> {
    entries: Vec<Entry<T>>,
    free_head: u32,
    len: usize,
}

impl<T> Slab<T> {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Slab {
            entries: Vec::with_capacity(capacity),
            free_head: NIL,
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn capacity(&self) -> usize {
        self.entries.capacity()
    }

    /// Stores `value` and returns its key. The caller links it into a bucket.
    pub(crate) fn insert(&mut self, value: T) -> TimerKey {
        self.len += 1;
        if self.free_head != NIL {
            let index = self.free_head;
            let entry = &mut self.entries[index as usize];
            self.free_head = entry.next;
            entry.value = Some(value);
            return TimerKey {
                index,
                generation: entry.generation,
            };
        }
        self.push_fresh(value)
    }

    /// Stores `value` in a new entry at the end (no vacant one to reuse).
    /// Out of line: in a steady state every insert reuses a freed entry.
    #[inline(never)]
    fn push_fresh(&mut self, value: T) -> TimerKey {
        let index = self.entries.len();
        // Index NIL is reserved as the "no entry" marker.
        assert!(
            index < NIL as usize,
            "tickwheel: more than 2^32-1 timers armed in one wheel"
        );
        if index == self.entries.capacity() {
            self.grow();
        }
        self.entries.push(Entry {
            value: Some(value),
            deadline: 0,
            prev: NIL,
            next: NIL,
            generation: 0,
            bucket: UNLINKED,
        });
        TimerKey {
            index: index as u32,
            generation: 0,
        }
    }

    /// Makes room for at least one more entry: doubling while small, then by
    /// half (see the module docs).
    #[cold]
    fn grow(&mut self) {
        let capacity = self.entries.capacity();
        let more = if capacity < DOUBLING_LIMIT {
            capacity.max(4)
        } else {
            capacity / 2
        };
        self.entries.reserve_exact(more);
    }

    /// Frees an occupied entry (already unlinked) and returns its value.
    pub(crate) fn remove(&mut self, index: u32) -> T {
        let entry = &mut self.entries[index as usize];
        let value = entry.value.take().expect("slab: removing a vacant entry");
        self.len -= 1;
        if entry.generation == u32::MAX {
            // Retire: never hand this index out again, so no stale key can
            // ever match a later occupant.
            return value;
        }
        entry.generation += 1;
        entry.next = self.free_head;
        self.free_head = index;
        value
    }

    /// The index of the armed timer `key` names, or `None` when it is stale.
    pub(crate) fn resolve(&self, key: TimerKey) -> Option<u32> {
        let entry = self.entries.get(key.index as usize)?;
        (entry.generation == key.generation && entry.value.is_some()).then_some(key.index)
    }

    pub(crate) fn key_of(&self, index: u32) -> TimerKey {
        TimerKey {
            index,
            generation: self.entries[index as usize].generation,
        }
    }

    pub(crate) fn get(&self, index: u32) -> &Entry<T> {
        &self.entries[index as usize]
    }

    pub(crate) fn get_mut(&mut self, index: u32) -> &mut Entry<T> {
        &mut self.entries[index as usize]
    }
}

/// The slab is where a [`Wheel`](super::Wheel)'s hierarchy keeps its links.
impl<T> Nodes for Slab<T> {
    fn node(&self, index: u32) -> Node {
        let entry = &self.entries[index as usize];
        Node {
            deadline: entry.deadline,
            prev: entry.prev,
            next: entry.next,
            bucket: entry.bucket,
        }
    }

    fn set_node(&mut self, index: u32, node: Node) {
        let entry = &mut self.entries[index as usize];
        entry.deadline = node.deadline;
        entry.prev = node.prev;
        entry.next = node.next;
        entry.bucket = node.bucket;
    }

    fn set_prev(&mut self, index: u32, prev: u32) {
        self.entries[index as usize].prev = prev;
    }

    fn set_next(&mut self, index: u32, next: u32) {
        self.entries[index as usize].next = next;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn growth_leaves_at_most_a_third_unused_once_large() {
        let mut slab = Slab::with_capacity(0);
        let mut capacity = 0;
        for i in 0..200_000usize {
            slab.insert(i);
            if slab.capacity() != capacity {
                capacity = slab.capacity();
                let grown_from = i;
                if grown_from >= DOUBLING_LIMIT {
                    // Just grown: `i + 1` used of `capacity`.
                    assert!(
                        capacity * 2 <= 3 * (grown_from + 1) + 2,
                        "{capacity} at {i}"
                    );
                }
            }
        }
        // Reuse before growth.
        let key = slab.key_of(7);
        assert_eq!(slab.remove(key.index()), 7);
        assert_eq!(slab.resolve(key), None);
        assert_eq!(slab.insert(1).index(), 7);
        assert_eq!(slab.capacity(), capacity);
    }
}
