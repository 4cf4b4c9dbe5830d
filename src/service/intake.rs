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
        self.pending.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// `true` when nothing is waiting.
    pub(crate) fn is_empty(&self) -> bool {
        self.head.load(Ordering::SeqCst).is_null()
    }

    /// Takes every pending message, oldest first per producer.
    pub(crate) fn drain(&self, mut f: impl FnMut(Message)) {
        let mut node = self.head.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if node.is_null() {
            return;
        }
        self.pending.store(0, Ordering::Relaxed);
        // Reverse into push order.
        let mut reversed: *mut Node = std::ptr::null_mut();
        while !node.is_null() {
            // SAFETY: the swap made this list ours alone; each node was fully
            // written before the release CAS that published it.
            let next = unsafe { (*node).next };
            // SAFETY: as above.
            unsafe { (*node).next = reversed };
            reversed = node;
            node = next;
        }
        while !reversed.is_null() {
            // SAFETY: every node came from `Box::into_raw` in `push` and is
            // freed exactly once, here.
            let boxed = unsafe { Box::from_raw(reversed) };
            reversed = boxed.next;
            f(boxed.message);
        }
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
