//! A shard's intake: the lock-free queue through which other threads hand
//! work to the shard owner.
//!
//! Producers (any thread) push a boxed message with one CAS on the head of a
//! singly linked stack; a stalled producer delays nobody. The single consumer
//! (the shard owner) takes the whole stack with one `swap` and reverses it, so
//! messages from one producer come out in the order they were pushed. Since
//! the consumer only ever takes everything at once, a node is never popped
//! while a producer still reads it and the classic Treiber ABA cannot arise.
//!
//! Messages carry no ownership: each names a slot `(index, gen)` and asks the
//! owner to reconcile its wheel with the slot's state word (see
//! [`shard`](super::shard)), so a late or duplicated message is harmless.

use crate::sync::{AtomicPtr, AtomicUsize, Ordering};

/// What a producer asks the owner to do about slot `(index, gen)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Message {
    pub(crate) index: u32,
    pub(crate) gen: u32,
    /// `Some((seq, deadline))`: arming `seq` of the slot is due at tick
    /// `deadline`. `None`: the slot was stopped or released; unlink or free it.
    pub(crate) arm: Option<(u32, u64)>,
}

struct Node {
    message: Message,
    next: *mut Node,
}

pub(crate) struct Intake {
    head: AtomicPtr<Node>,
    /// Messages pushed since the owner last drained (an estimate; used to
    /// wake a sleeping owner before its intake grows without bound).
    pending: AtomicUsize,
}

// SAFETY: nodes are heap allocations handed from producer to consumer through
// the `head` CAS (release) and `swap` (acquire); no node is reachable from two
// threads at once except through those atomics.
unsafe impl Send for Intake {}
// SAFETY: as above.
unsafe impl Sync for Intake {}

impl Intake {
    pub(crate) fn new() -> Self {
        Intake {
            head: AtomicPtr::new(std::ptr::null_mut()),
            pending: AtomicUsize::new(0),
        }
    }

    /// Pushes a message; returns how many are pending now (including it).
    pub(crate) fn push(&self, message: Message) -> usize {
        let node = Box::into_raw(Box::new(Node {
            message,
            next: std::ptr::null_mut(),
        }));
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: `node` is ours alone until the CAS below publishes it.
            unsafe { (*node).next = head };
            // SeqCst: pairs with the owner's SeqCst store of its sleep
            // deadline followed by `is_empty` (see `Shard::publish_sleep`), so
            // that either the owner sees this message or we see its deadline.
            match self
                .head
                .compare_exchange_weak(head, node, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(actual) => head = actual,
            }
        }
        crate::sync::handshake_fence();
        // Wrapping: the count may be "negative" for a moment (see `take_all`).
        self.pending.fetch_add(1, Ordering::Relaxed).wrapping_add(1)
    }

    /// `true` when nothing is waiting.
    pub(crate) fn is_empty(&self) -> bool {
        self.head.load(Ordering::SeqCst).is_null()
    }

    /// How many messages are waiting (exact once producers in flight have
    /// counted theirs; see `drain`).
    pub(crate) fn pending(&self) -> usize {
        let pending = self.pending.load(Ordering::Relaxed);
        // Briefly "negative" (wrapped) between a drain and a late producer's
        // add: read that as nothing pending.
        if pending > usize::MAX / 2 {
            0
        } else {
            pending
        }
    }

    /// Takes every pending message, oldest first per producer, and hands
    /// them to `f`.
    pub(crate) fn drain(&self, mut f: impl FnMut(Message)) {
        let mut taken = self.take_all();
        while let Some(message) = taken.pop() {
            f(message);
        }
    }

    /// Takes every pending message at once, oldest first per producer, for
    /// the owner to work through at its own pace ([`Taken::pop`]).
    pub(crate) fn take_all(&self) -> Taken {
        // SeqCst, not just AcqRel: the owner's SeqCst `is_empty` load in
        // `Shard::publish_sleep` reads the head this swap writes. miri
        // implements the older C++11 SeqCst rule, under which a SeqCst load
        // may read from a non-SeqCst RMW in ways Rust's (C++20) model
        // forbids, and then reports a lost wakeup that cannot happen (the
        // miri stall noted after issue 5). With every access of the handshake
        // SeqCst, both models agree. It costs nothing: x86 and AArch64 emit
        // the same instruction for both orderings of an RMW.
        let mut node = self.head.swap(std::ptr::null_mut(), Ordering::SeqCst);
        // Reverse into push order.
        let mut reversed: *mut Node = std::ptr::null_mut();
        let mut taken = 0;
        while !node.is_null() {
            // SAFETY: the swap made this list ours alone; each node was fully
            // written before the release CAS that published it.
            let next = unsafe { (*node).next };
            // SAFETY: as above.
            unsafe { (*node).next = reversed };
            reversed = node;
            node = next;
            taken += 1;
        }
        if taken > 0 {
            // Subtract what was taken rather than storing 0: a producer whose
            // node was taken here may not have counted it yet (its `fetch_add`
            // comes after its CAS), and a store of 0 would then leave the
            // count one too high for ever. The count may dip below zero
            // (wrap) until that producer's add lands; `pending` reads that as 0.
            self.pending.fetch_sub(taken, Ordering::Relaxed);
        }
        Taken { head: reversed }
    }
}

/// Messages taken from an intake and not yet handed out, oldest first.
/// Owned by the shard owner; dropping it frees what is left.
pub(crate) struct Taken {
    head: *mut Node,
}

// SAFETY: the nodes belong to this value alone (see `Intake::take_all`).
unsafe impl Send for Taken {}

impl Taken {
    pub(crate) const fn empty() -> Self {
        Taken {
            head: std::ptr::null_mut(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.head.is_null()
    }

    /// The oldest message left.
    pub(crate) fn pop(&mut self) -> Option<Message> {
        if self.head.is_null() {
            return None;
        }
        // SAFETY: every node came from `Box::into_raw` in `push`, was taken
        // by `take_all` into this list alone, and is freed exactly once, here.
        let node = unsafe { Box::from_raw(self.head) };
        self.head = node.next;
        Some(node.message)
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        while self.pop().is_some() {}
    }
}

impl Drop for Intake {
    fn drop(&mut self) {
        self.drain(|_| {});
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn message(index: u32) -> Message {
        Message {
            index,
            gen: 1,
            arm: None,
        }
    }

    #[test]
    fn drains_in_push_order_and_empties() {
        let intake = Intake::new();
        assert!(intake.is_empty());
        for i in 0..5 {
            assert_eq!(intake.push(message(i)), i as usize + 1);
        }
        let mut seen = Vec::new();
        intake.drain(|m| seen.push(m.index));
        assert_eq!(seen, vec![0, 1, 2, 3, 4]);
        assert!(intake.is_empty());
        intake.drain(|_| panic!("nothing left"));
    }

    #[test]
    fn concurrent_producers_lose_nothing() {
        let intake = std::sync::Arc::new(Intake::new());
        let threads: Vec<_> = (0..4u32)
            .map(|t| {
                let intake = intake.clone();
                std::thread::spawn(move || {
                    for i in 0..1000 {
                        intake.push(message(t * 1000 + i));
                    }
                })
            })
            .collect();
        let mut seen = Vec::new();
        for t in threads {
            t.join().unwrap();
        }
        intake.drain(|m| seen.push(m.index));
        seen.sort_unstable();
        assert_eq!(seen, (0..4000).collect::<Vec<_>>());
    }
}
