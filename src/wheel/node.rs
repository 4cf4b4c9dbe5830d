//! One timer entry as the levels see it ([`Node`]), the store that holds
//! the entries ([`Nodes`]), and the link values that name no entry.
//!
//! The hierarchy links entries, the wheel's slab, the service's slots and
//! the callers' records (the embedded wheel) store them, and the levels
//! keep bucket heads and tails: each of them imports these definitions from
//! here, so none of them imports another for them.

use super::hierarchy::LEVELS;
use super::level::{InlineLevels, Level, LevelStore};

/// The "no entry" link value of stores addressed by `u32` index.
pub(crate) const NIL: u32 = u32::MAX;

/// `bucket` of an entry that is in no bucket.
pub(crate) const UNLINKED: u16 = u16::MAX;

/// What names an entry in the links, bucket heads and tails: a store's own
/// kind of address. The slab and the service's slots name entries by `u32`
/// index (half the size of a pointer in every link, and what the service's
/// atomics hold); the embedded wheel names them by address, so that
/// following a link is one load from the entry itself.
pub(crate) trait EntryId: Copy + Eq {
    /// The value that names no entry (end of a list, empty bucket).
    const NIL: Self;
    /// How a hierarchy of these ids holds its levels (see [`LevelStore`]).
    type Levels: LevelStore<Self>;
}

impl EntryId for u32 {
    const NIL: u32 = NIL;
    type Levels = Box<[Level<u32>; LEVELS]>;
}

/// An entry's address; null names none.
impl<T> EntryId for *const T {
    const NIL: *const T = std::ptr::null();
    type Levels = InlineLevels<*const T>;
}

/// The wheel's view of one timer entry, linked by `I`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Node<I = u32> {
    /// The tick the timer is due at (`>= now` while linked).
    pub(crate) deadline: u64,
    /// Previous and next entry in the same bucket, or [`EntryId::NIL`].
    pub(crate) prev: I,
    pub(crate) next: I,
    /// Which bucket (`level * SLOTS + slot`) holds the entry, or [`UNLINKED`].
    pub(crate) bucket: u16,
}

/// Where the entries live. Ids are the ones given to
/// [`Hierarchy::link`](super::Hierarchy::link); the store never sees an id
/// it did not hold, nor [`EntryId::NIL`].
pub(crate) trait Nodes {
    /// How entries are named in links (see [`EntryId`]).
    type Id: EntryId;

    /// `true` when the store keeps an arming sequence number per entry
    /// ([`seq`](Self::seq)/[`set_seq`](Self::set_seq)), which allows moves
    /// within a bucket without relinking (see the `hierarchy` module docs,
    /// "Same-tick order without relinking").
    const ORDERED: bool = false;

    /// `true` when an ordered store keeps only the low 32 bits of each
    /// arming number (the service's slots have 4 bytes for it): numbers are
    /// then compared by their wrapping difference, and the hierarchy
    /// renumbers its entries often enough that no two linked entries are
    /// ever 2^31 numbers apart (see the `hierarchy` module docs, "Arming
    /// numbers in 32 bits").
    const SEQ_WRAPS: bool = false;

    fn node(&self, index: Self::Id) -> Node<Self::Id>;
    fn set_node(&mut self, index: Self::Id, node: Node<Self::Id>);
    fn set_prev(&mut self, index: Self::Id, prev: Self::Id);
    fn set_next(&mut self, index: Self::Id, next: Self::Id);

    /// Rewrites only the entry's deadline and arming number (a move that
    /// keeps it in place).
    fn set_deadline_seq(&mut self, index: Self::Id, deadline: u64, seq: u64) {
        let node = self.node(index);
        self.set_node(index, Node { deadline, ..node });
        self.set_seq(index, seq);
    }

    /// [`set_node`](Self::set_node) and [`set_seq`](Self::set_seq) in one
    /// (one access to the entry for a store that keeps both together).
    fn set_node_seq(&mut self, index: Self::Id, node: Node<Self::Id>, seq: u64) {
        self.set_node(index, node);
        self.set_seq(index, seq);
    }

    /// Writes entry `index`, whose node was `node`, back as in no bucket:
    /// its `bucket` becomes [`UNLINKED`], and by default its links
    /// [`EntryId::NIL`]. A store that tells armed entries from others by a
    /// mark of its own (the embedded wheel's entries know their wheel) may
    /// leave the links and deadline as they were: nothing reads them until
    /// the entry is linked again, which rewrites them.
    #[inline(always)]
    fn mark_unlinked(&mut self, index: Self::Id, node: Node<Self::Id>) {
        self.set_node(
            index,
            Node {
                bucket: UNLINKED,
                prev: Self::Id::NIL,
                next: Self::Id::NIL,
                ..node
            },
        );
    }

    /// The entry's arming sequence number (only used when `ORDERED`).
    fn seq(&self, _index: Self::Id) -> u64 {
        0
    }

    /// Sets the entry's arming sequence number (only used when `ORDERED`).
    fn set_seq(&mut self, _index: Self::Id, _seq: u64) {}

    /// Asks the processor to start loading entry `index` into cache, to be
    /// read or written soon (a hint: it changes nothing; the default does
    /// nothing). See [`prefetch`].
    fn prefetch(&self, _index: Self::Id) {}
}

/// [`prefetch`] for an entry this thread will write: the line comes in
/// exclusive (`prefetchw`), so the write does not wait for a second round
/// trip to take it from the core that wrote it last. Where the CPU does not
/// report `prefetchw`, a plain prefetch.
#[inline(always)]
#[cfg_attr(any(loom, shuttle, miri), allow(dead_code))]
pub(crate) fn prefetch_for_write<T>(entry: *const T) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if has_prefetchw() {
        // SAFETY: as for `prefetch`; the CPU reports the instruction.
        unsafe {
            std::arch::asm!(
                "prefetchw [{0}]",
                in(reg) entry,
                options(nostack, preserves_flags, readonly)
            )
        };
    } else {
        prefetch(entry);
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = entry;
}

/// Whether the CPU reports `prefetchw` (CPUID 8000_0001h, ECX bit 8); asked
/// once.
#[cfg(all(target_arch = "x86_64", not(miri)))]
fn has_prefetchw() -> bool {
    use std::sync::atomic::{AtomicU8, Ordering};
    static KNOWN: AtomicU8 = AtomicU8::new(0);
    match KNOWN.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            use std::arch::x86_64::__cpuid;
            // Leaf 8000_0001h is asked only where the highest extended
            // leaf includes it.
            let yes =
                __cpuid(0x8000_0000).eax >= 0x8000_0001 && __cpuid(0x8000_0001).ecx & (1 << 8) != 0;
            KNOWN.store(if yes { 1 } else { 2 }, Ordering::Relaxed);
            yes
        }
    }
}

/// Starts loading the cache line at `entry` (a hint with no effect on what
/// the program computes): used where the indices of entries soon needed are
/// known ahead, so that their cache misses overlap (see
/// [`Hierarchy::cascade`](super::Hierarchy::cascade)). A no-op off x86_64
/// and under Miri.
#[inline(always)]
pub(crate) fn prefetch<T>(entry: *const T) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: a prefetch neither reads nor writes memory as far as the
    // program can tell and cannot fault, even for a bad address; SSE, which
    // it needs, is part of every x86_64 target. `_MM_HINT_T0`: into every
    // cache level.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(entry.cast())
    };
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = entry;
}
