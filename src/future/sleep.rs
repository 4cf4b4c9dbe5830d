//! [`Sleep`]: a future that completes once its deadline has passed, on a
//! [`TimerService`](crate::TimerService) shard, from any executor.
//!
//! # Who owns what
//!
//! * The future owns its [`Timer`] handle: dropping the future drops the
//!   handle, which stops the timer (a STOP: one CAS from any thread).
//!   Before its first poll it holds a counted reference to the service
//!   (`ServiceRef`, counted per shard as a `Timer` handle is): like a
//!   handle, it keeps the service's memory, not the service running.
//! * The timer's callback and the future share one small [`Fired`] record
//!   (an `Arc`, so the callback's capture is 8 bytes and lives inline in the
//!   timer's slot): a count of fires and the task's waker. The callback,
//!   on the owner's thread, adds one to the count and then wakes the waker.
//! * The future completes when the count reaches `expect`, the number of
//!   fires it is waiting for. A restart that moves the armed timer
//!   (`Restart::Moved`) leaves `expect` alone (no fire happened for the old
//!   deadline); one that re-arms a timer that had fired (`Restart::Rearmed`)
//!   adds one, for the fire that happened (or whose callback is still
//!   adding its one). One-shot timers run their callback exactly once per
//!   arming, so the count never overshoots.
//!
//! Registration happens on the first poll: a future dropped unpolled arms
//! nothing. The deadline is fixed when the future is made (`sleep(d)` is
//! `now + d` then), kept in nanoseconds on the service's clock, and the
//! timer is armed for it, rounded up to the service's next tick: never
//! early (docs/CONTRACT.md item 1). "Now" is the service's deadline clock
//! (a few ns, never behind the real clock), not `Instant::now()`, which
//! costs 30-60 ns on a virtual machine's clock and was most of a sleep's
//! cost (`cargo bench --bench service_vs_tokio -- targets sleep`).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::waker_cell::WakerCell;
use crate::service::ServiceRef;
use crate::sync::{Arc, AtomicU32, Ordering};
use crate::{Restart, Timer};

/// What a timer's callback and its future share.
pub(crate) struct Fired {
    /// Callback runs so far (wrapping).
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

    /// The callback side: one more fire (`ticks` periods), then the wake.
    pub(crate) fn fire(&self, ticks: u32) {
        self.count.fetch_add(ticks, Ordering::Release);
        self.waker.wake();
    }

    pub(crate) fn count(&self) -> u32 {
        self.count.load(Ordering::Acquire)
    }

    pub(crate) fn register(&self, waker: &std::task::Waker) {
        self.waker.register(waker);
    }
}

/// `count` has reached `expect` (counts wrap; they never get 2^31 apart).
pub(crate) fn reached(count: u32, expect: u32) -> bool {
    (count.wrapping_sub(expect) as i32) >= 0
}

/// A future that completes once its deadline has passed: see
/// [`TimerService::sleep`](crate::TimerService::sleep).
///
/// `Unpin`, and cheap to move before and after its first poll. Dropping it
/// stops its timer.
///
/// # Panics
/// A poll after the service has shut down panics: the sleep could never
/// complete.
#[must_use = "a sleep does nothing unless awaited or polled"]
pub struct Sleep {
    service: ServiceRef,
    /// Nanoseconds since the service clock's origin.
    deadline: u64,
    armed: Option<Armed>,
}

struct Armed {
    timer: Timer,
    fired: Arc<Fired>,
    /// The fire count at which the sleep is complete.
    expect: u32,
}

impl Sleep {
    /// A sleep until `deadline` nanoseconds on `service`'s clock.
    pub(crate) fn new(service: ServiceRef, deadline: u64) -> Self {
        Sleep {
            service,
            deadline,
            armed: None,
        }
    }

    /// The instant this sleep completes after.
    pub fn deadline(&self) -> Instant {
        self.service.instant_at(self.deadline)
    }

    /// `true` once the timer has fired for the current deadline (a sleep
    /// never polled has not registered, and reads `false`).
    pub fn is_elapsed(&self) -> bool {
        self.armed
            .as_ref()
            .is_some_and(|armed| reached(armed.fired.count(), armed.expect))
    }

    /// Moves the deadline to `deadline`, as a RESTART of the armed timer:
    /// one CAS when it is still armed (moving later is the cheap path), a
    /// new arming when it had fired. A sleep that had completed is pending
    /// again until the new deadline.
    ///
    /// # Panics
    /// After the service has shut down.
    pub fn reset(&mut self, deadline: Instant) {
        self.reset_to(self.service.nanos_at(deadline));
    }

    /// [`reset`](Self::reset) to `delay` from now.
    pub fn reset_after(&mut self, delay: Duration) {
        self.reset_to(self.service.deadline_nanos_after(delay));
    }

    fn reset_to(&mut self, deadline: u64) {
        self.deadline = deadline;
        let Some(armed) = self.armed.as_mut() else {
            return;
        };
        match armed.timer.restart_at_nanos(deadline) {
            Ok(Restart::Moved) => {}
            // It had fired: that fire's one is (or is being) counted, and
            // the new arming will add one more.
            Ok(Restart::Rearmed) => armed.expect = armed.expect.wrapping_add(1),
            Err(error) => panic!("tickwheel: Sleep::reset: {error}"),
        }
    }

    fn register(&mut self, cx: &mut Context<'_>) {
        let fired = Fired::new();
        // The waker first: the timer may fire on its owner before `schedule`
        // returns.
        fired.register(cx.waker());
        let for_callback = fired.clone();
        let timer = self
            .service
            .start_at_nanos(self.deadline, move |_| for_callback.fire(1))
            .unwrap_or_else(|error| panic!("tickwheel: Sleep polled: {error}"));
        self.armed = Some(Armed {
            timer,
            fired,
            expect: 1,
        });
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let Some(armed) = &this.armed else {
            this.register(cx);
            return Poll::Pending;
        };
        if reached(armed.fired.count(), armed.expect) {
            return Poll::Ready(());
        }
        armed.fired.register(cx.waker());
        // A fire between the check above and the registration woke the
        // waker stored before: look again (module docs of `waker_cell`).
        if reached(armed.fired.count(), armed.expect) {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline())
            .field("registered", &self.armed.is_some())
            .field("elapsed", &self.is_elapsed())
            .finish()
    }
}
