//! The per-timer state word: the one atomic that decides every race.
//!
//! # Layout (one `u64`)
//!
//! | bits   | field     | meaning                                                      |
//! |--------|-----------|--------------------------------------------------------------|
//! | 0..2   | `arm`     | `FREE`, `ARMED`, `FIRED` (last arming expired), `CANCELLED`   |
//! | 2      | `RUNNING` | the callback is executing on the shard owner right now        |
//! | 3      | `HANDLE`  | a user handle ([`Timer`](crate::Timer) or a C handle) holds it |
//! | 4      | `HALTED`  | stopped while `RUNNING`: a periodic timer is not re-armed after this run |
//! | 5      | `QUEUED`  | the slot is on its shard's remote queue (`remote.rs`): not freed until the owner takes it off |
//! | 6      | `FRESH`   | with `QUEUED`: a START from another thread that the owner has not taken in yet; the slot is unlinked and its owner-side fields belong to the queue entry |
//! | 8..32  | `seq`     | arming sequence: bumped by every restart and release           |
//! | 32..64 | `gen`     | slot incarnation (below 2^28): bumped when the slot is freed; ids carry it |
//!
//! # Who may change what
//!
//! * Any thread holding a handle (its `gen` matches and `HANDLE` is set), and
//!   a timer's own callback while it runs (`RUNNING`, even without a handle),
//!   may CAS:
//!   - STOP: `ARMED -> CANCELLED` (returns `Cancelled`; the linearisation point
//!     of "this arming will never run"), or, while `FIRED|RUNNING`, set
//!     `HALTED` (returns `Running` and cancels a periodic continuation);
//!   - RESTART: any `arm` (not `FREE`) `-> ARMED` with `seq + 1`, then sends the
//!     new deadline to the owner tagged with that `seq` (from another
//!     thread: in a proxy slot on the shard's remote queue, `remote.rs`);
//!   - RELEASE (handle dropped): clear `HANDLE`, turning `ARMED` into
//!     `CANCELLED` and bumping `seq`.
//!   - A STOP or RELEASE from a thread that does not own the shard that
//!     disarms an `ARMED` word (or releases one the owner must free) also
//!     sets `QUEUED` in the same CAS (if it was clear) and then puts the
//!     slot on the shard's remote queue (`remote.rs`); only the owner clears
//!     `QUEUED` (and `FRESH`), when it takes the slot off that queue: with
//!     a `fetch_and`, or, for a word no other thread can change any more
//!     (reclaimable but for `QUEUED`, not `FRESH`), with the plain store
//!     that frees it (`Shard::apply_one`).
//! * A thread that owns no shard publishes a START as `ARMED | HANDLE |
//!   QUEUED | FRESH` and pushes the slot; and may take back a slot of its
//!   own START that is still `CANCELLED | QUEUED | FRESH` with no handle, by
//!   a CAS to `FREE | QUEUED | FRESH` of the next generation
//!   (`Inner::revive`).
//! * Only the shard owner moves `ARMED -> FIRED | RUNNING` (the linearisation
//!   point of "this arming fires"), clears `RUNNING` and `HALTED`, re-arms a periodic timer
//!   (`FIRED|RUNNING, seq -> ARMED, seq + 1`, a CAS that fails if anyone
//!   stopped, restarted or released it meanwhile), and frees the slot
//!   (`-> FREE` with `gen + 1`) once it is not armed, not running and no handle
//!   holds it.
//!
//! Because STOP and FIRE both CAS from the same `ARMED` word, exactly one of
//! them wins: a `Cancelled` stop is never followed by that arming's callback,
//! and two stops cannot both return `Cancelled`. Because RESTART bumps `seq`,
//! an owner that tries to fire the old arming fails its CAS and waits for the
//! message carrying the new deadline: one arming fires at most once.
//!
//! # How far `seq` can run ahead of the owner
//!
//! The owner compares `seq` in two places: a message's tag against the word
//! (is this the newest arming?) and the arming it linked (`linked_seq`)
//! against the word (is the entry it just popped still current?). Both go
//! wrong only if the word's `seq` moved on by a whole multiple of 2^24 since
//! the owner last looked. What bounds that:
//!
//! 1. Every change of `seq` is a RESTART or the one RELEASE of an
//!    incarnation (no handle is left to make another). A RESTART either
//!    runs on the owner's thread (applied at once: the owner has seen it)
//!    or pushes exactly one proxy on the remote queue. A STOP of a running
//!    callback sets `HALTED` instead, once, so repeated stops during a long
//!    callback move nothing (`stops_during_a_run_do_not_move_seq`); the
//!    owner's own periodic re-arm is applied by the owner.
//! 2. While the owner takes in its queue, the moves it has not seen are at
//!    most the proxies waiting for it, plus one per producer between its
//!    CAS and its push. Backpressure keeps the waiting entries near
//!    `PENDING_LIMIT` (2^10; 2^13 for producers that own a shard): past
//!    it, each producer is held about a millisecond per RESTART
//!    (`Inner::wait_for_backlog`).
//! 3. While an owner takes in nothing at all (stalled, or an embedded owner
//!    that stopped polling), producers are not blocked (CONTRACT 7) but run
//!    at about one RESTART per millisecond each: 2^24 moves of one timer
//!    need the owner stalled for 2^24 ms / threads, over four hours divided
//!    by the number of threads restarting that one timer.
//! 4. Not bounded by the above: a restarter descheduled between its CAS and
//!    its push while other threads restart the same timer 2^24 times (and
//!    the owner keeps up); its late message then names a `seq` the word has
//!    come back to, and the owner takes its deadline. The effect stays
//!    within that timer (the deadline of a restart that did happen, applied
//!    late); no other timer and no memory is touched.

pub(crate) const ARM_MASK: u64 = 0b11;
pub(crate) const FREE: u64 = 0;
pub(crate) const ARMED: u64 = 1;
pub(crate) const FIRED: u64 = 2;
pub(crate) const CANCELLED: u64 = 3;
pub(crate) const RUNNING: u64 = 1 << 2;
pub(crate) const HANDLE: u64 = 1 << 3;
pub(crate) const HALTED: u64 = 1 << 4;
pub(crate) const QUEUED: u64 = 1 << 5;
pub(crate) const FRESH: u64 = 1 << 6;
const SEQ_SHIFT: u32 = 8;
const SEQ_MASK: u64 = ((1 << 24) - 1) << SEQ_SHIFT;
const GEN_SHIFT: u32 = 32;

/// The generation a slot takes when it is freed after incarnation `gen`:
/// the next one, wrapping from the last an id can carry
/// (`(1 << GEN_BITS) - 1`) back to 1 (0 is never used, so the all-zero id is
/// always stale). Slots are never retired: see `shard.rs`, `ROTATION`, for
/// what keeps a wrapped name from coming back soon.
pub(crate) const fn next_gen(gen: u32) -> u32 {
    if gen >= (1 << super::timer::GEN_BITS) - 1 {
        1
    } else {
        gen + 1
    }
}

/// A decoded view of a state word. `Copy`, compared as the raw word.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Word(pub(crate) u64);

impl Word {
    /// A free slot of incarnation `gen`.
    #[inline]
    pub(crate) const fn free(gen: u32) -> Word {
        Word((gen as u64) << GEN_SHIFT)
    }

    #[inline]
    pub(crate) const fn gen(self) -> u32 {
        (self.0 >> GEN_SHIFT) as u32
    }

    #[inline]
    pub(crate) const fn seq(self) -> u32 {
        ((self.0 & SEQ_MASK) >> SEQ_SHIFT) as u32
    }

    #[inline]
    pub(crate) const fn arm(self) -> u64 {
        self.0 & ARM_MASK
    }

    #[inline]
    pub(crate) const fn is(self, flag: u64) -> bool {
        self.0 & flag != 0
    }

    #[inline]
    pub(crate) const fn is_armed(self) -> bool {
        self.arm() == ARMED
    }

    /// Same word with `arm` replaced.
    #[inline]
    pub(crate) const fn with_arm(self, arm: u64) -> Word {
        Word((self.0 & !ARM_MASK) | arm)
    }

    #[inline]
    pub(crate) const fn with(self, flag: u64) -> Word {
        Word(self.0 | flag)
    }

    #[inline]
    pub(crate) const fn without(self, flag: u64) -> Word {
        Word(self.0 & !flag)
    }

    /// Same word with `seq + 1` (wrapping within 24 bits).
    #[inline]
    pub(crate) const fn next_seq(self) -> Word {
        let seq = (self.seq().wrapping_add(1) as u64) << SEQ_SHIFT & SEQ_MASK;
        Word((self.0 & !SEQ_MASK) | seq)
    }

    /// `true` when the owner may free the slot: not armed, not running, no
    /// handle holds it, and it is not on its shard's remote queue.
    #[inline]
    pub(crate) const fn is_reclaimable(self) -> bool {
        let arm = self.arm();
        (arm == FIRED || arm == CANCELLED)
            && !self.is(RUNNING)
            && !self.is(HANDLE)
            && !self.is(QUEUED)
    }
}

impl Word {
    /// `true` for a word that would be reclaimable but for `QUEUED`.
    #[inline]
    pub(crate) const fn is_reclaimable_but_queued(self) -> bool {
        self.is(QUEUED) && self.without(QUEUED).without(FRESH).is_reclaimable()
    }

    /// `true` for the word of a queued STOP or release that only the owner
    /// can change now: reclaimable but for `QUEUED`, and not a START that
    /// its thread may be reviving (`FRESH`). See `Shard::apply_one`.
    #[inline]
    pub(crate) const fn is_left_to_owner(self) -> bool {
        !self.is(FRESH) && self.is_reclaimable_but_queued()
    }
}

impl std::fmt::Debug for Word {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let arm = ["FREE", "ARMED", "FIRED", "CANCELLED"][self.arm() as usize];
        write!(
            f,
            "{arm}{}{}{}{}{} seq={} gen={}",
            if self.is(RUNNING) { "|RUNNING" } else { "" },
            if self.is(HALTED) { "|HALTED" } else { "" },
            if self.is(HANDLE) { "|HANDLE" } else { "" },
            if self.is(QUEUED) { "|QUEUED" } else { "" },
            if self.is(FRESH) { "|FRESH" } else { "" },
            self.seq(),
            self.gen()
        )
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn fields_are_independent() {
        let w = Word::free(7)
            .with_arm(ARMED)
            .with(HANDLE)
            .next_seq()
            .next_seq();
        assert_eq!((w.gen(), w.seq(), w.arm()), (7, 2, ARMED));
        assert!(w.is(HANDLE) && !w.is(RUNNING));
        let w = w.with_arm(FIRED).with(RUNNING);
        assert_eq!((w.gen(), w.seq(), w.arm()), (7, 2, FIRED));
        assert!(!w.is_reclaimable());
        assert!(w.without(RUNNING).without(HANDLE).is_reclaimable());
    }

    #[test]
    fn seq_wraps_without_touching_gen() {
        let mut w = Word::free(u32::MAX).with_arm(ARMED);
        for _ in 0..(1 << 24) - 1 {
            w = w.next_seq();
        }
        assert_eq!(w.seq(), (1 << 24) - 1);
        let w = w.next_seq();
        assert_eq!((w.seq(), w.gen(), w.arm()), (0, u32::MAX, ARMED));
    }
}
