//! One task's waker, shared between the future that stores it (any thread
//! that polls the task) and the timer's callback that wakes it (the shard's
//! owner thread): an [`Interval`](super::Interval)'s (`fired.rs`). A
//! `Sleep` needs none: its timer's callback holds the waker itself, and a
//! changed waker gets a new timer (`sleep.rs`).
//!
//! # Who owns the waker when
//!
//! The cell's `state` word decides every race:
//!
//! * `IDLE`: nobody is touching the waker slot.
//! * `REGISTERING`: a poll owns the slot and is replacing the waker. Only one
//!   poll runs at a time for a future (`Pin<&mut Self>`), so polls never race
//!   each other.
//! * `WAKING`: the firing side has asked for a wake. If it found the cell
//!   `IDLE`, it owns the slot and takes the waker out (then clears the bit);
//!   if a poll was registering, the bit is left for that poll, which sees it
//!   when it tries to go back to `IDLE` and wakes the new waker itself.
//!
//! So a wake is never lost: either the waker the firing side takes is the
//! latest one, or the registering poll learns of the wake from the failed
//! CAS and wakes the waker it just stored. The future then re-reads its
//! fire count after registering (`Interval::poll_tick`), which closes the
//! other window: a fire that completed before the registration began left
//! the count, not a waker; because a fire counts before it wakes, that
//! re-read also sees any fire whose wake met a registering poll. loom:
//! `interval_poll_vs_fire_vs_waker_change` (`tests/loom_service.rs`),
//! which fails without the re-read.
//!
//! The same protocol as `futures`' `AtomicWaker`, written against
//! `crate::sync` so that loom and shuttle see it.

use std::task::Waker;

use crate::sync::{AtomicUsize, Ordering, UnsafeCell};

const IDLE: usize = 0;
const REGISTERING: usize = 0b01;
const WAKING: usize = 0b10;

pub(crate) struct WakerCell {
    state: AtomicUsize,
    waker: UnsafeCell<Option<Waker>>,
}

// SAFETY: the waker slot is only read or written by the side that moved
// `state` away from IDLE (module docs), and `Waker` is `Send + Sync`.
unsafe impl Send for WakerCell {}
// SAFETY: as above.
unsafe impl Sync for WakerCell {}

impl WakerCell {
    pub(crate) fn new() -> Self {
        WakerCell {
            state: AtomicUsize::new(IDLE),
            waker: UnsafeCell::new(None),
        }
    }

    /// Stores `waker` (the poll side). Keeps the stored one when it would
    /// wake the same task (`Waker::will_wake`), which is what makes a
    /// re-poll on the same executor cheap.
    pub(crate) fn register(&self, waker: &Waker) {
        match self
            .state
            .compare_exchange(IDLE, REGISTERING, Ordering::Acquire, Ordering::Acquire)
        {
            Ok(_) => {
                // SAFETY: REGISTERING makes the slot this thread's.
                unsafe {
                    self.waker.with_mut(|slot| match &mut *slot {
                        Some(old) if old.will_wake(waker) => {}
                        other => *other = Some(waker.clone()),
                    })
                };
                if let Err(actual) = self.state.compare_exchange(
                    REGISTERING,
                    IDLE,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    // A wake came in while we held the slot: it left the
                    // waking to us.
                    debug_assert_eq!(actual, REGISTERING | WAKING);
                    // SAFETY: still REGISTERING (the waker side only set its
                    // bit), so the slot is still this thread's.
                    let taken = unsafe { self.waker.with_mut(|slot| (*slot).take()) };
                    self.state.swap(IDLE, Ordering::AcqRel);
                    if let Some(waker) = taken {
                        waker.wake();
                    }
                }
            }
            Err(WAKING) => {
                // A wake is in progress with the old waker: this task is
                // being woken anyway, but the new waker may belong to
                // another executor, so wake it too.
                waker.wake_by_ref();
                crate::sync::spin_hint();
            }
            Err(_) => {
                // REGISTERING | WAKING or REGISTERING: a second poller,
                // which `Pin<&mut Self>` rules out.
                debug_assert!(false, "two polls registering at once");
            }
        }
    }

    /// Wakes the stored waker, if any (the firing side).
    pub(crate) fn wake(&self) {
        if let Some(waker) = self.take() {
            waker.wake();
        }
    }

    fn take(&self) -> Option<Waker> {
        match self.state.fetch_or(WAKING, Ordering::AcqRel) {
            IDLE => {
                // SAFETY: WAKING from IDLE makes the slot this thread's.
                let waker = unsafe { self.waker.with_mut(|slot| (*slot).take()) };
                self.state.fetch_and(!WAKING, Ordering::Release);
                waker
            }
            // A poll is registering (it will see our bit and wake), or a
            // wake is already in progress.
            _ => None,
        }
    }
}

impl std::fmt::Debug for WakerCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WakerCell").finish_non_exhaustive()
    }
}
