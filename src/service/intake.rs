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
//!
//! # Recycling nodes
//!
//! A node is allocated by a producer and finished with by the owner, on
//! another thread: with the system allocator that cross-thread malloc/free
//! pair was a quarter of a remote START+STOP (issue 11). So the owner does
//! not free the nodes it has read: it hands the whole spent list back to
//! the intake's `spare` stack with one CAS per batch ([`Intake::recycle`]),
//! and a producer whose thread-local cache is empty takes that whole stack
//! with one `swap` ([`NodeCache`]). Both ends take or give whole lists, so
//! the spare stack, like the intake itself, has no ABA problem. A node is
//! allocated only when neither the thread's cache nor the spare stack has
//! one: after warm-up, the nodes in circulation are those of the largest
//! backlog the shard has had (bounded by backpressure, `PENDING_LIMIT`), 40
//! bytes each. A thread's cache is freed when the thread exits, the spare
//! stack when the service is dropped.
//!
//! Under loom and shuttle nodes are plain `Box`es allocated and freed per
//! message: recycling adds no ordering to the protocol (a node changes
//! hands only through the intake's and the spare stack's atomics), and the
//! models stay the size they were.

use crate::sync::{AtomicPtr, AtomicUsize, Ordering};

/// What a producer asks the owner to do about slot `(index, gen)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Message {
    pub(crate) index: u32,
    pub(crate) gen: u32,
    /// `Some`: an arming of the slot to link. `None`: the slot was stopped
    /// or released; unlink or free it.
    pub(crate) arm: Option<Arm>,
}

/// An arming of a slot, as its owner links it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Arm {
    /// The arming's `seq` (the owner links only the slot's newest).
    pub(crate) seq: u32,
    /// How far `deadline` lies after the deadline asked for, in 256ths of a
    /// tick (delays are rounded up to ticks): lateness counts from the
    /// deadline asked for, not from the tick (`stats.rs`).
    pub(crate) rounding: u8,
    /// The deadline tick.
    pub(crate) deadline: u64,
}

struct Node {
    message: Message,
    next: *mut Node,
}

pub(crate) struct Intake {
    head: AtomicPtr<Node>,
    /// Nodes the owner has read, for producers to reuse (module docs).
    spare: AtomicPtr<Node>,
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
            spare: AtomicPtr::new(std::ptr::null_mut()),
            pending: AtomicUsize::new(0),
        }
    }

    /// Pushes a message; returns how many are pending now (including it).
    pub(crate) fn push(&self, message: Message) -> usize {
        let node = self.new_node(message);
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

    /// A node holding `message`: from this thread's cache, else from the
    /// spare stack, else freshly allocated.
    fn new_node(&self, message: Message) -> *mut Node {
        #[cfg(not(any(loom, shuttle)))]
        if let Some(node) = NodeCache::take(self) {
            // SAFETY: a cached node is ours alone (see `NodeCache`).
            unsafe {
                (*node).message = message;
                (*node).next = std::ptr::null_mut();
            }
            return node;
        }
        Box::into_raw(Box::new(Node {
            message,
            next: std::ptr::null_mut(),
        }))
    }

    /// Gives the nodes `taken` has handed out back for reuse (module docs).
    /// Owner side; cheap to call when there are none.
    pub(crate) fn recycle(&self, taken: &mut Taken) {
        let (first, last) = (taken.spent_first, taken.spent_last);
        if first.is_null() {
            return;
        }
        taken.spent_first = std::ptr::null_mut();
        taken.spent_last = std::ptr::null_mut();
        if cfg!(any(loom, shuttle)) {
            free_list(first);
            return;
        }
        let mut head = self.spare.load(Ordering::Relaxed);
        loop {
            // SAFETY: the spent list is ours alone until the CAS publishes it.
            unsafe { (*last).next = head };
            // Release: a producer's acquire `swap` of `spare` sees the nodes
            // as we left them.
            match self.spare.compare_exchange_weak(
                head,
                first,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(actual) => head = actual,
            }
        }
    }

    /// Takes every pending message, oldest first per producer, and hands
    /// them to `f`.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn drain(&self, mut f: impl FnMut(Message)) {
        let mut taken = self.take_all();
        while let Some(message) = taken.pop() {
            f(message);
        }
        self.recycle(&mut taken);
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
        Taken {
            head: reversed,
            ..Taken::empty()
        }
    }
}

/// Messages taken from an intake and not yet handed out, oldest first, plus
/// the nodes already handed out (for [`Intake::recycle`]). Owned by the shard
/// owner; dropping it frees every node it holds.
pub(crate) struct Taken {
    head: *mut Node,
    /// Nodes already read, first to last (in reading order).
    spent_first: *mut Node,
    spent_last: *mut Node,
}

// SAFETY: the nodes belong to this value alone (see `Intake::take_all`).
unsafe impl Send for Taken {}

impl Taken {
    pub(crate) const fn empty() -> Self {
        Taken {
            head: std::ptr::null_mut(),
            spent_first: std::ptr::null_mut(),
            spent_last: std::ptr::null_mut(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.head.is_null()
    }

    /// The oldest message left.
    pub(crate) fn pop(&mut self) -> Option<Message> {
        let node = self.head;
        if node.is_null() {
            return None;
        }
        // SAFETY: every node was fully written before it was published, and
        // was taken by `take_all` into this list alone.
        let message = unsafe {
            self.head = (*node).next;
            (*node).next = std::ptr::null_mut();
            (*node).message
        };
        if self.spent_last.is_null() {
            self.spent_first = node;
        } else {
            // SAFETY: as above; `spent_last` is one of ours.
            unsafe { (*self.spent_last).next = node };
        }
        self.spent_last = node;
        Some(message)
    }
}

/// Frees a null-terminated list of nodes.
fn free_list(mut node: *mut Node) {
    while !node.is_null() {
        // SAFETY: every node came from `Box::into_raw` and the list is owned
        // by the caller; each is freed exactly once, here.
        let boxed = unsafe { Box::from_raw(node) };
        node = boxed.next;
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        free_list(self.head);
        free_list(self.spent_first);
    }
}

impl Drop for Intake {
    fn drop(&mut self) {
        free_list(self.head.swap(std::ptr::null_mut(), Ordering::Acquire));
        free_list(self.spare.swap(std::ptr::null_mut(), Ordering::Acquire));
    }
}

/// Each producer thread's cache of spare nodes (see "Recycling nodes").
#[cfg(not(any(loom, shuttle)))]
struct NodeCache {
    head: std::cell::Cell<*mut Node>,
}

#[cfg(not(any(loom, shuttle)))]
std::thread_local! {
    static NODE_CACHE: NodeCache = const {
        NodeCache {
            head: std::cell::Cell::new(std::ptr::null_mut()),
        }
    };
}

#[cfg(not(any(loom, shuttle)))]
impl NodeCache {
    /// A node for a push to `intake`: this thread's next cached one, or, if
    /// the cache is empty, the first of the intake's whole spare stack (the
    /// rest is cached). `None` when both are empty, or while the thread is
    /// exiting (its cache is gone).
    fn take(intake: &Intake) -> Option<*mut Node> {
        NODE_CACHE
            .try_with(|cache| {
                let mut node = cache.head.get();
                if node.is_null() {
                    if intake.spare.load(Ordering::Relaxed).is_null() {
                        return None;
                    }
                    // Acquire: pairs with the owner's release in `recycle`.
                    node = intake.spare.swap(std::ptr::null_mut(), Ordering::Acquire);
                    if node.is_null() {
                        return None;
                    }
                }
                // SAFETY: the cached list is this thread's alone.
                cache.head.set(unsafe { (*node).next });
                Some(node)
            })
            .ok()
            .flatten()
    }
}

#[cfg(not(any(loom, shuttle)))]
impl Drop for NodeCache {
    fn drop(&mut self) {
        free_list(self.head.get());
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

    fn spare_len(intake: &Intake) -> usize {
        let mut node = intake.spare.load(Ordering::Acquire);
        let mut len = 0;
        while !node.is_null() {
            len += 1;
            // SAFETY: test-only walk of the spare stack, no producer running.
            node = unsafe { (*node).next };
        }
        len
    }

    #[test]
    fn read_nodes_are_recycled_for_the_next_pushes() {
        let intake = Intake::new();
        for i in 0..3 {
            intake.push(message(i));
        }
        let mut taken = intake.take_all();
        let mut seen = Vec::new();
        while let Some(m) = taken.pop() {
            seen.push(m.index);
        }
        assert_eq!(seen, vec![0, 1, 2]);
        assert_eq!(spare_len(&intake), 0, "nothing given back before recycle");
        intake.recycle(&mut taken);
        assert_eq!(spare_len(&intake), 3);
        let first_spare = intake.spare.load(Ordering::Acquire);
        // The next push takes the whole spare stack into this thread's
        // cache and uses its first node.
        intake.push(message(7));
        assert_eq!(spare_len(&intake), 0);
        assert_eq!(intake.head.load(Ordering::Acquire), first_spare);
        let mut taken = intake.take_all();
        assert_eq!(taken.pop().map(|m| m.index), Some(7));
        assert_eq!(taken.pop(), None);
    }

    #[test]
    fn recycling_while_producers_push_loses_and_duplicates_nothing() {
        const PER_THREAD: u32 = if cfg!(miri) { 300 } else { 20_000 };
        let intake = std::sync::Arc::new(Intake::new());
        let threads: Vec<_> = (0..3u32)
            .map(|t| {
                let intake = intake.clone();
                std::thread::spawn(move || {
                    for i in 0..PER_THREAD {
                        intake.push(message(t * PER_THREAD + i));
                    }
                })
            })
            .collect();
        let mut seen = vec![false; 3 * PER_THREAD as usize];
        let mut count = 0;
        while count < seen.len() {
            let mut taken = intake.take_all();
            while let Some(m) = taken.pop() {
                assert!(!seen[m.index as usize], "message {} twice", m.index);
                seen[m.index as usize] = true;
                count += 1;
            }
            intake.recycle(&mut taken);
            std::thread::yield_now();
        }
        for t in threads {
            t.join().unwrap();
        }
        assert!(intake.is_empty());
    }
}
