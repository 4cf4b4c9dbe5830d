//! [`Fired`]: what an [`Interval`](super::Interval)'s periodic timer and the
//! interval share: how many periods the timer has fired, and the task's
//! waker.
//!
//! The callback runs on the shard's owner thread: it adds its periods to the
//! count, then wakes the waker (`WakerCell`, whose protocol keeps a waker
//! that changes between polls from missing a wake). The interval reads the
//! count, registers its waker, and reads the count again, so a fire that
//! met the registration is seen by that second read.

use super::waker_cell::WakerCell;
use crate::sync::{Arc, AtomicU32, Ordering};

/// A periodic timer's fire count and its task's waker.
pub(crate) struct Fired {
    /// Periods fired so far (wrapping).
    count: AtomicU32,
    waker: WakerCell,
}

impl Fired {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Fired {
            count: AtomicU32::new(0),
            waker: WakerCell::new(),
        })
    }

    /// The callback side: `periods` more fires, then the wake.
    pub(crate) fn fire(&self, periods: u32) {
        self.count.fetch_add(periods, Ordering::Release);
        self.waker.wake();
    }

    pub(crate) fn count(&self) -> u32 {
        self.count.load(Ordering::Acquire)
    }

    pub(crate) fn register(&self, waker: &std::task::Waker) {
        self.waker.register(waker);
    }
}
