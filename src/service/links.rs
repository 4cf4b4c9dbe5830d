//! A shard's wheel threaded through its timer slots.
//!
//! The shard runs the same level hierarchy as [`Wheel`](crate::Wheel)
//! (`crate::wheel::Hierarchy`), but keeps each timer's wheel entry (deadline,
//! links, bucket) inside the timer's slot instead of in a slab of its own:
//! one allocation and one cache line per timer instead of two.

use super::arena::{Arena, Slot, NIL};
use crate::sync::Ordering;
use crate::wheel::{Node, Nodes};

/// The slots of one shard, seen as wheel entries.
///
/// Only the shard's owner may build one (see [`SlotNodes::new`]).
pub(crate) struct SlotNodes<'a> {
    arena: &'a Arena,
    /// A slot the caller has already looked up (`NIL`: none), so that the
    /// wheel's accesses to the entry it links or unlinks skip the arena's
    /// index arithmetic: an owner's START + cancel, 720 -> 666 instructions
    /// (`examples/owner_ops.rs start-cancel` under callgrind).
    known: u32,
    known_slot: *const Slot,
}

impl<'a> SlotNodes<'a> {
    /// # Safety
    /// The caller must own the shard whose wheel this is, every index the
    /// wheel is given must be a slot of that shard (allocated, not free), and
    /// no other reference to those slots' `owned` or `bucket` fields may be
    /// live while the value is used.
    pub(crate) unsafe fn new(arena: &'a Arena) -> Self {
        SlotNodes {
            arena,
            known: NIL,
            known_slot: std::ptr::null(),
        }
    }

    /// [`new`](Self::new), knowing that slot `index` is `slot`.
    ///
    /// # Safety
    /// As for `new`, and `slot` is slot `index` of `arena`.
    pub(crate) unsafe fn knowing(arena: &'a Arena, index: u32, slot: &'a Slot) -> Self {
        SlotNodes {
            arena,
            known: index,
            known_slot: slot,
        }
    }

    #[inline]
    fn slot(&self, index: u32) -> &'a Slot {
        if index == self.known {
            // SAFETY: `knowing`'s contract: the slot of `index`, borrowed
            // for `'a`.
            return unsafe { &*self.known_slot };
        }
        // SAFETY: every index the wheel holds is an allocated slot of the
        // owner's shard (`new`'s contract), so `alloc` handed it out and the
        // owner learnt it through the slot's publication.
        unsafe { self.arena.get_allocated(index) }
    }
}

/// Ordered, with 32-bit arming numbers (`Slot::order`): a move of a timer
/// to a later deadline above level 0 rewrites its deadline and number and
/// leaves it in its bucket, which re-files it when it cascades (the
/// `hierarchy` module docs), so an owner's restart touches the timer's own
/// slot only, not its two neighbours (`examples/owner_ops.rs restart`).
impl Nodes for SlotNodes<'_> {
    type Id = u32;
    const ORDERED: bool = true;
    const SEQ_WRAPS: bool = true;

    #[inline]
    fn seq(&self, index: u32) -> u64 {
        // SAFETY: the owner's exclusive fields, see `new`.
        u64::from(self.slot(index).order.with(|order| unsafe { *order }))
    }

    #[inline]
    fn set_seq(&mut self, index: u32, seq: u64) {
        // SAFETY: as in `seq`.
        self.slot(index)
            .order
            .with_mut(|order| unsafe { *order = seq as u32 });
    }

    #[inline]
    fn set_deadline_seq(&mut self, index: u32, deadline: u64, seq: u64) {
        let slot = self.slot(index);
        // SAFETY: as in `seq`.
        unsafe {
            slot.owned.with_mut(|owned| (*owned).deadline = deadline);
            slot.order.with_mut(|order| *order = seq as u32);
        }
    }

    #[inline]
    fn set_node_seq(&mut self, index: u32, node: Node, seq: u64) {
        self.set_node(index, node);
        self.set_seq(index, seq);
    }
    #[inline]
    fn node(&self, index: u32) -> Node {
        let slot = self.slot(index);
        // SAFETY (all accesses here): the owner's exclusive fields, see `new`.
        let (deadline, prev) = slot
            .owned
            .with(|owned| unsafe { ((*owned).deadline, (*owned).prev) });
        Node {
            deadline,
            prev,
            next: slot.next.load(Ordering::Relaxed),
            bucket: slot.bucket.with(|bucket| unsafe { *bucket }),
        }
    }

    fn set_node(&mut self, index: u32, node: Node) {
        let slot = self.slot(index);
        // SAFETY: as in `node`.
        slot.owned.with_mut(|owned| unsafe {
            (*owned).deadline = node.deadline;
            (*owned).prev = node.prev;
        });
        slot.next.store(node.next, Ordering::Relaxed);
        // SAFETY: as in `node`.
        slot.bucket
            .with_mut(|bucket| unsafe { *bucket = node.bucket });
    }

    fn set_prev(&mut self, index: u32, prev: u32) {
        // SAFETY: as in `node`.
        self.slot(index)
            .owned
            .with_mut(|owned| unsafe { (*owned).prev = prev });
    }

    fn set_next(&mut self, index: u32, next: u32) {
        self.slot(index).next.store(next, Ordering::Relaxed);
    }

    fn prefetch(&self, index: u32) {
        crate::wheel::prefetch(self.slot(index));
    }
}
