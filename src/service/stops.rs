//! A shard's stop queue: how a thread that does not own a shard hands its
//! owner the timers it stopped, with no message and no allocation.
//!
//! # Who does what
//!
//! A STOP (or a cancel, or the drop of a handle) from a thread that does
//! not own the timer's shard is decided, as every operation is, by one CAS
//! on the slot's state word (`ARMED -> CANCELLED`, see `state.rs`). When
//! that CAS disarms the timer it also sets `QUEUED`, unless the slot is
//! already queued, and the thread whose CAS set it then pushes the slot
//! itself onto this queue: one CAS on the queue's word. The timer's wheel
//! entry is left where it is; the owner takes it out when it takes the
//! queue (every round of its poll, [`Shard::take_stops`]), or when it meets
//! the entry first (its deadline, where it finds it disarmed).
//!
//! * **A slot is on the queue at most once.** Only the CAS that sets
//!   `QUEUED` pushes, and only the owner clears it, after it has taken the
//!   slot off. A later STOP of the same slot (after a RESTART re-armed it)
//!   finds `QUEUED` set and pushes nothing: the owner settles the slot on
//!   the word as it finds it then, which covers both operations.
//! * **So the queue never holds more than the live slots**, whatever
//!   producers do and however long the owner stalls; and a `QUEUED` slot is
//!   never freed ([`Word::is_reclaimable`](super::state::Word)), so a
//!   queued index always names the same slot.
//! * **The link.** `queue_next` is written by the pusher before its CAS
//!   (release) and read by the owner after its `swap` (acquire), before it
//!   clears `QUEUED`: once clear, another thread may queue the slot again
//!   and rewrite the link.
//! * **Waking.** The push's CAS returns how many slots are queued. A
//!   sleeping owner is woken only when they pass the reclaim bound
//!   (`Shard::push_stop`), through the same claim as every other wake, so
//!   memory stays within the contract's bound (CONTRACT 13) and a sleep is
//!   interrupted at most once (CONTRACT 21). The owner, before it sleeps,
//!   stores its sleep and then reads this word (`Shard::publish_sleep`); the
//!   pusher's CAS and its load of the sleep are SeqCst: the Dekker handshake
//!   of the intake, on this word.
//!
//! The owner takes the whole list with one `swap`, so, as with the intake,
//! a slot is never popped while a pusher still reads the head and there is
//! no ABA problem. The list comes out newest first; order does not matter
//! for stops (each is settled on its slot's own word).
//!
//! loom: `remote_cancel_vs_fire_vs_take` and the `sleeping_owner_*` models
//! in `tests/loom_service.rs`.

use crossbeam_utils::CachePadded;

use super::arena::Slot;
pub(crate) use super::arena::NIL;
use crate::sync::{AtomicU64, Ordering};

/// The queue's word when it is empty: no head, a count of 0.
const EMPTY: u64 = NIL as u64;

/// The slots other threads stopped, for the owner to settle. One word: the
/// first slot's index in the low 32 bits, how many are queued in the high
/// 32, so a push reads the count from its own CAS.
pub(crate) struct StopQueue {
    word: CachePadded<AtomicU64>,
}

const fn head(word: u64) -> u32 {
    word as u32
}

const fn count(word: u64) -> u32 {
    (word >> 32) as u32
}

impl StopQueue {
    pub(crate) fn new() -> Self {
        StopQueue {
            word: CachePadded::new(AtomicU64::new(EMPTY)),
        }
    }

    /// Pushes slot `index` (`slot`), whose `QUEUED` bit this thread has just
    /// set. Returns how many slots are queued now, this one included.
    pub(crate) fn push(&self, index: u32, slot: &Slot) -> u32 {
        let mut old = self.word.load(Ordering::Relaxed);
        loop {
            slot.queue_next.store(head(old), Ordering::Relaxed);
            let queued = count(old) + 1;
            let new = (u64::from(queued) << 32) | u64::from(index);
            // SeqCst: release for the link and the slot's state (the owner
            // takes the list with an acquire swap), and the store half of
            // the handshake with `Shard::publish_sleep`.
            match self
                .word
                .compare_exchange_weak(old, new, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => {
                    crate::sync::handshake_fence();
                    return queued;
                }
                Err(actual) => old = actual,
            }
        }
    }

    /// How many slots are queued (the load half of the owner's handshake).
    pub(crate) fn len(&self) -> u32 {
        count(self.word.load(Ordering::SeqCst))
    }

    /// Takes every queued slot: the index of the first ([`NIL`] when none);
    /// each slot's `queue_next` leads to the next. Owner side. Costs one
    /// load when the queue is empty.
    pub(crate) fn take(&self) -> u32 {
        if self.word.load(Ordering::Relaxed) == EMPTY {
            return NIL;
        }
        // SeqCst: acquire for the links and slots, and every access of the
        // sleep handshake SeqCst (see `Intake::take_all` for why miri needs
        // that too).
        head(self.word.swap(EMPTY, Ordering::SeqCst))
    }
}
