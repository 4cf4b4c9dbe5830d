//! Storage for the wheel's timers: a slab of entries addressed by generation-
//! checked keys.
//!
//! Every entry lives at a fixed index for as long as it is armed. Each entry is
//! also a node of one doubly linked list (the bucket it sits in), linked by
//! index, so that unlinking a cancelled timer is O(1) without pointers.
//!
//! The entries are one `Vec`, so reaching an entry is one index: bounds
//! checked for a caller's key, unchecked for the indices the wheel itself
//! holds and follows (links, heads, tails, a popped entry; `Slab::linked`
//! says why they are always in bounds). It grows by doubling up to
//! [`DOUBLING_LIMIT`] entries and by half its size after that, so right
//! after a growth at most a third of it is unused
//! (at most 1.5 entries of memory per armed timer, against 2 for a `Vec` that
//! doubles). Pages of fixed size would bound the slack tighter and never copy
//! on growth, but they add a second indirection to every access, which made
//! `reschedule` and `insert`/`cancel` measurably slower (see BENCHMARKS.md).
//!
//! A vacant entry keeps its generation. Freeing an entry bumps the generation,
//! so every key handed out for the previous occupant becomes stale. An entry
//! whose generation would wrap is retired instead of reused: a stale key can
//! therefore never match a later timer, not even after four billion reuses.
//! Generations start at 1 and never reach 0 (`NonZeroU32`), so that
//! `Option<TimerKey>`, the natural field for "this connection's timer, if
//! armed", is 8 bytes like the key itself instead of 12.
//!
//! The payload is a `MaybeUninit<T>` with a separate `occupied` flag rather
//! than an `Option<T>`: for a word-sized `T` the option's tag costs a whole
//! word of padding, and that word holds the arming sequence number instead
//! (see `hierarchy`), so a `Wheel<usize>` entry stays at 40 bytes. The flag
//! and the payload change together in `insert`/`remove` only, and `Drop` and
//! `Clone` look at the flag; that is all the `unsafe` on payloads relies
//! on. The only other `unsafe` is the unchecked index of `Slab::linked`.

use std::fmt;
use std::mem::MaybeUninit;
use std::num::NonZeroU32;

use super::node::{prefetch, Node, Nodes, NIL, UNLINKED};

/// Up to this many entries the slab doubles; beyond, it grows by half.
const DOUBLING_LIMIT: usize = 4096;

/// Identifies one armed timer of a [`Wheel`](crate::wheel::Wheel).
///
/// A key is `Copy` and cheap. Once its timer has expired or been cancelled the
/// key is *stale*: every method that takes it returns `None` or
/// [`TimerError::StaleKey`](crate::TimerError::StaleKey), and it never reaches
/// another timer.
///
/// `Option<TimerKey>` is as small as a key (8 bytes): no key is all zeros.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerKey {
    index: u32,
    generation: NonZeroU32,
}

impl TimerKey {
    /// Packs the key into one `u64` (for C callers and hash maps).
    pub const fn to_raw(self) -> u64 {
        ((self.generation.get() as u64) << 32) | self.index as u64
    }

    /// Rebuilds a key from [`to_raw`](Self::to_raw). Any `u64` is accepted: a
    /// value that never named a timer is simply stale.
    pub const fn from_raw(raw: u64) -> Self {
        match NonZeroU32::new((raw >> 32) as u32) {
            Some(generation) => TimerKey {
                index: raw as u32,
                generation,
            },
            // Generation 0 names nothing; neither does index `NIL`, which
            // no entry ever has (see `push_fresh`).
            None => TimerKey {
                index: NIL,
                generation: NonZeroU32::MAX,
            },
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

/// One slab cell. `value` is initialised exactly while `occupied` is set,
/// i.e. while the cell holds an armed timer.
pub(crate) struct Entry<T> {
    value: MaybeUninit<T>,
    /// The tick the timer is due at (already clamped to be `>= now`).
    pub(crate) deadline: u64,
    /// When the timer was last armed, for same-tick order (see `hierarchy`).
    pub(crate) seq: u64,
    /// Previous and next entry in the same bucket, or [`NIL`].
    /// For a vacant entry `next` links the free list.
    pub(crate) prev: u32,
    pub(crate) next: u32,
    generation: NonZeroU32,
    /// Which bucket (`level * SLOTS + slot`) holds this entry, or `UNLINKED`.
    pub(crate) bucket: u16,
    occupied: bool,
}

impl<T> Entry<T> {
    /// The payload of an occupied entry.
    pub(crate) fn value(&self) -> Option<&T> {
        // SAFETY: `value` is initialised while `occupied` is set.
        self.occupied
            .then(|| unsafe { self.value.assume_init_ref() })
    }

    /// The payload of an occupied entry, mutably.
    pub(crate) fn value_mut(&mut self) -> Option<&mut T> {
        // SAFETY: `value` is initialised while `occupied` is set.
        self.occupied
            .then(|| unsafe { self.value.assume_init_mut() })
    }
}

/// The slab: entries plus a LIFO free list threaded through vacant entries.
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
    #[inline]
    pub(crate) fn insert(&mut self, value: T) -> TimerKey {
        self.len += 1;
        if self.free_head != NIL {
            let index = self.free_head;
            let entry = &mut self.entries[index as usize];
            self.free_head = entry.next;
            entry.value = MaybeUninit::new(value);
            entry.occupied = true;
            return TimerKey {
                index,
                generation: entry.generation,
            };
        }
        let index = self.entries.len();
        if index == self.entries.capacity() {
            return self.push_grown(value);
        }
        self.push_fresh(value)
    }

    /// [`push_fresh`](Self::push_fresh) when the entries are full: grows
    /// them first. Out of line, so that an insert into a slab with room
    /// (one made `with_capacity`, or grown before) writes its new entry
    /// inline: a fresh push out of line cost a call and a frame per timer
    /// when a wheel is filled (`examples/fill_expire.rs`, callgrind).
    #[cold]
    #[inline(never)]
    fn push_grown(&mut self, value: T) -> TimerKey {
        self.grow();
        self.push_fresh(value)
    }

    /// Stores `value` in a new entry at the end (no vacant one to reuse),
    /// where there is room for it.
    #[inline(always)]
    fn push_fresh(&mut self, value: T) -> TimerKey {
        let index = self.entries.len();
        debug_assert!(index < self.entries.capacity());
        // Index NIL is reserved as the "no entry" marker.
        assert!(
            index < NIL as usize,
            "tickwheel: more than 2^32-1 timers armed in one wheel"
        );
        self.entries.push(Entry {
            value: MaybeUninit::new(value),
            deadline: 0,
            seq: 0,
            prev: NIL,
            next: NIL,
            generation: NonZeroU32::MIN,
            bucket: UNLINKED,
            occupied: true,
        });
        TimerKey {
            index: index as u32,
            generation: NonZeroU32::MIN,
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

    /// [`remove`](Self::remove), also returning the key the entry had.
    #[inline]
    pub(crate) fn remove_keyed(&mut self, index: u32) -> (TimerKey, T) {
        let key = self.key_of(index);
        (key, self.remove(index))
    }

    /// Frees an occupied entry (already unlinked) and returns its value.
    #[inline]
    pub(crate) fn remove(&mut self, index: u32) -> T {
        let entry = &mut self.entries[index as usize];
        assert!(entry.occupied, "slab: removing a vacant entry");
        entry.occupied = false;
        // SAFETY: it was occupied, so `value` is initialised; clearing the
        // flag first means it is read out exactly once.
        let value = unsafe { entry.value.assume_init_read() };
        self.len -= 1;
        let Some(next) = entry.generation.checked_add(1) else {
            // Retire: never hand this index out again, so no stale key can
            // ever match a later occupant.
            return value;
        };
        entry.generation = next;
        entry.next = self.free_head;
        self.free_head = index;
        value
    }

    /// The key of occupied entry `index` and a clone of its payload (a
    /// fired timer the wheel keeps: the entry stays occupied).
    #[inline]
    pub(crate) fn key_and_clone(&self, index: u32) -> (TimerKey, T)
    where
        T: Clone,
    {
        // `index` was just popped by the hierarchy: see `linked`.
        let entry = self.linked(index);
        let value = entry
            .value()
            .expect("slab: a kept entry is occupied")
            .clone();
        (
            TimerKey {
                index,
                generation: entry.generation,
            },
            value,
        )
    }

    /// Keys and deadlines of the occupied entries in no bucket (held
    /// timers; see the `Wheel`'s "Keeping a fired timer").
    #[cfg(any(feature = "capi", test))]
    pub(crate) fn unlinked(&self) -> Vec<(TimerKey, u64)> {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, entry)| entry.occupied && entry.bucket == UNLINKED)
            .map(|(index, entry)| {
                let key = TimerKey {
                    index: index as u32,
                    generation: entry.generation,
                };
                (key, entry.deadline)
            })
            .collect()
    }

    /// The index of the occupied entry `key` names, or `None` when it is stale.
    #[inline]
    pub(crate) fn resolve(&self, key: TimerKey) -> Option<u32> {
        let entry = self.entries.get(key.index as usize)?;
        (entry.generation == key.generation && entry.occupied).then_some(key.index)
    }

    /// [`resolve`](Self::resolve) for a key packed by [`TimerKey::to_raw`],
    /// without unpacking it first: the generation is compared as a plain
    /// `u32`, and generation 0 (which [`TimerKey::from_raw`] must turn into
    /// index `NIL`, a branchless select of two words) matches no entry by
    /// itself, as no entry's generation is 0. Same answer as
    /// `resolve(TimerKey::from_raw(raw))` for every `raw`
    /// (`tests::raw_keys_resolve_as_unpacked_ones`). The C ABI's keys come
    /// this way: unpacking was about 11 instructions of each keyed call in
    /// Ratas' workload through the C ABI (`ffi-tests/ratas_workload.c`,
    /// callgrind).
    #[cfg(any(feature = "capi", test))]
    #[inline]
    pub(crate) fn resolve_raw(&self, raw: u64) -> Option<u32> {
        let index = raw as u32;
        let entry = self.entries.get(index as usize)?;
        (entry.generation.get() == (raw >> 32) as u32 && entry.occupied).then_some(index)
    }

    #[inline]
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

    /// Entry `index` without a bounds check, for an index the wheel itself
    /// holds: one its hierarchy passes to the [`Nodes`] accessors or pops.
    ///
    /// Such an index always names an entry of this slab: the `Wheel` gives
    /// its hierarchy only indices from [`insert`](Self::insert) or from a
    /// key that [`resolve`](Self::resolve) checked (bounds included), and the
    /// hierarchy passes back only those or indices it read from the links,
    /// heads and tails it wrote with them (never `NIL`: it tests for `NIL`
    /// before following a link). The slab never shrinks (`entries` only
    /// grows, by `push`; nothing truncates, pops or replaces it, and a
    /// retired entry stays in place), so an index once valid stays in
    /// bounds. A caller's key never comes here unchecked.
    #[inline(always)]
    fn linked(&self, index: u32) -> &Entry<T> {
        debug_assert!(
            (index as usize) < self.entries.len(),
            "slab: the wheel passed index {index} beyond the slab"
        );
        // SAFETY: `index < entries.len()` by the invariant above (checked
        // in debug builds and under Miri by the assertion).
        unsafe { self.entries.get_unchecked(index as usize) }
    }

    /// [`linked`](Self::linked), mutably.
    #[inline(always)]
    fn linked_mut(&mut self, index: u32) -> &mut Entry<T> {
        debug_assert!(
            (index as usize) < self.entries.len(),
            "slab: the wheel passed index {index} beyond the slab"
        );
        // SAFETY: as in `linked`.
        unsafe { self.entries.get_unchecked_mut(index as usize) }
    }
}

impl<T> Drop for Slab<T> {
    fn drop(&mut self) {
        if !std::mem::needs_drop::<T>() {
            return;
        }
        for entry in &mut self.entries {
            if entry.occupied {
                entry.occupied = false;
                // SAFETY: occupied, so initialised; dropped once (flag cleared).
                unsafe { entry.value.assume_init_drop() };
            }
        }
    }
}

impl<T: Clone> Clone for Slab<T> {
    fn clone(&self) -> Self {
        let mut entries = Vec::with_capacity(self.entries.capacity());
        entries.extend(self.entries.iter().map(|entry| Entry {
            value: match entry.value() {
                Some(value) => MaybeUninit::new(value.clone()),
                None => MaybeUninit::uninit(),
            },
            deadline: entry.deadline,
            seq: entry.seq,
            prev: entry.prev,
            next: entry.next,
            generation: entry.generation,
            bucket: entry.bucket,
            occupied: entry.occupied,
        }));
        Slab {
            entries,
            free_head: self.free_head,
            len: self.len,
        }
    }
}

/// The slab is where a [`Wheel`](super::Wheel)'s hierarchy keeps its links.
///
/// These accessors skip the bounds check (see [`Slab::linked`]): they run on
/// every per-operation path (a move, a link, a pop follows two or three of
/// them), and the indices they get are the wheel's own, never a caller's.
impl<T> Nodes for Slab<T> {
    type Id = u32;
    const ORDERED: bool = true;

    #[inline]
    fn seq(&self, index: u32) -> u64 {
        self.linked(index).seq
    }

    #[inline]
    fn set_seq(&mut self, index: u32, seq: u64) {
        self.linked_mut(index).seq = seq;
    }

    #[inline]
    fn node(&self, index: u32) -> Node {
        let entry = self.linked(index);
        Node {
            deadline: entry.deadline,
            prev: entry.prev,
            next: entry.next,
            bucket: entry.bucket,
        }
    }

    #[inline]
    fn set_node(&mut self, index: u32, node: Node) {
        let entry = self.linked_mut(index);
        entry.deadline = node.deadline;
        entry.prev = node.prev;
        entry.next = node.next;
        entry.bucket = node.bucket;
    }

    #[inline]
    fn prefetch(&self, index: u32) {
        prefetch(self.linked(index));
    }

    /// Only the bucket: an entry out of every bucket is read for its
    /// bucket alone (held or freed; a freed one's `next` is the free list,
    /// written by `remove`), and linking it again rewrites its links and
    /// deadline (a fired timer's pop writes one field instead of three:
    /// `examples/fill_expire.rs`).
    #[inline]
    fn mark_unlinked(&mut self, index: u32, _node: Node) {
        self.linked_mut(index).bucket = UNLINKED;
    }

    #[inline]
    fn set_deadline_seq(&mut self, index: u32, deadline: u64, seq: u64) {
        let entry = self.linked_mut(index);
        entry.deadline = deadline;
        entry.seq = seq;
    }

    #[inline]
    fn set_node_seq(&mut self, index: u32, node: Node, seq: u64) {
        let entry = self.linked_mut(index);
        entry.deadline = node.deadline;
        entry.prev = node.prev;
        entry.next = node.next;
        entry.bucket = node.bucket;
        entry.seq = seq;
    }

    #[inline]
    fn set_prev(&mut self, index: u32, prev: u32) {
        self.linked_mut(index).prev = prev;
    }

    #[inline]
    fn set_next(&mut self, index: u32, next: u32) {
        self.linked_mut(index).next = next;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn growth_leaves_at_most_a_third_unused_once_large() {
        let mut slab = Slab::with_capacity(0);
        let mut capacity = 0;
        // Under miri a tenth: still four growths by half past the limit.
        let entries = if cfg!(miri) { 20_000 } else { 200_000usize };
        for i in 0..entries {
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

    /// A key has a niche: `Option<TimerKey>` costs nothing extra, and the
    /// raw values that would need the niche (generation 0) name no timer.
    #[test]
    fn keys_have_a_niche_and_generation_zero_is_stale() {
        assert_eq!(std::mem::size_of::<Option<TimerKey>>(), 8);
        let mut slab = Slab::with_capacity(0);
        let first = slab.insert('a');
        assert_ne!(first.to_raw() >> 32, 0, "generations start at 1");
        assert_eq!(slab.resolve(first), Some(0));
        for raw in [0, first.to_raw() & u64::from(u32::MAX), 5] {
            let key = TimerKey::from_raw(raw);
            assert_eq!(slab.resolve(key), None, "raw {raw:#x}");
        }
    }

    /// `resolve_raw` gives `resolve`'s answer for the unpacked key, for raw
    /// values that name live entries, freed ones, reused ones, indices past
    /// the end and the generation-0 values `from_raw` must substitute.
    #[test]
    fn raw_keys_resolve_as_unpacked_ones() {
        let mut slab = Slab::with_capacity(0);
        let keys: Vec<TimerKey> = (0..8u32).map(|i| slab.insert(i)).collect();
        slab.remove(keys[3].index());
        slab.remove(keys[5].index());
        let reused = slab.insert(30);
        assert_eq!(
            reused.index(),
            keys[5].index(),
            "reuses the last freed entry"
        );
        let mut raws: Vec<u64> = keys.iter().map(|key| key.to_raw()).collect();
        raws.push(reused.to_raw());
        for index in [0u64, 3, 5, 7, 8, 1 << 20, u64::from(u32::MAX)] {
            for generation in [0u64, 1, 2, 3, u64::from(u32::MAX)] {
                raws.push(generation << 32 | index);
            }
        }
        raws.extend([0, u64::MAX, 1 << 32]);
        let mut live = 0;
        for raw in raws {
            let unpacked = slab.resolve(TimerKey::from_raw(raw));
            assert_eq!(slab.resolve_raw(raw), unpacked, "raw {raw:#x}");
            live += usize::from(unpacked.is_some());
        }
        // Both kinds of answer were checked: the 7 live keys (the reused
        // entry's new key among them; its old one, and key 3's, are stale),
        // and the built raw values that name live entries: generation 1 of
        // entries 0 and 7, generation 2 of the reused entry 5, and `1 << 32`
        // (entry 0 again).
        assert_eq!(live, 11);
    }

    /// An entry whose generation would wrap is retired: its index is never
    /// handed out again, so its last key stays stale for ever.
    #[test]
    fn an_entry_at_the_last_generation_is_retired() {
        let mut slab = Slab::with_capacity(0);
        let key = slab.insert(1u8);
        slab.entries[0].generation = NonZeroU32::new(u32::MAX - 1).unwrap();
        let key = TimerKey {
            generation: slab.entries[0].generation,
            ..key
        };
        assert_eq!(slab.remove(slab.resolve(key).unwrap()), 1);
        let last = slab.insert(2);
        assert_eq!(
            (last.index(), last.to_raw() >> 32),
            (0, u64::from(u32::MAX))
        );
        assert_eq!(slab.remove(slab.resolve(last).unwrap()), 2);
        // Retired: the next insert takes a fresh index, and the last key
        // (and the one before it) stay stale.
        let next = slab.insert(3);
        assert_eq!(next.index(), 1);
        assert_eq!(slab.resolve(last), None);
        assert_eq!(slab.resolve(key), None);
        assert_eq!(slab.len(), 1);
    }
}
