//! [`Sleep`]: a future that completes once its deadline has passed, on a
//! [`TimerService`](crate::TimerService) shard, from any executor.
//!
//! # Who owns what
//!
//! * The future owns its [`Timer`] handle: dropping the future drops the
//!   handle, which stops the timer (a STOP: one CAS from any thread).
//!   Before its first poll it holds a counted reference to the service
//!   (`ServiceRef`, counted per shard as a `Timer` handle is): like a
//!   handle, it keeps the service's memory, not the service running. The
//!   first poll hands that count to the timer's handle.
//! * The timer's callback and the future share one small [`Fired`] record
//!   (an `Arc`, so the callback's capture is 8 bytes and lives inline in the
//!   timer's slot): a count of fires and the task's waker. The callback,
//!   on the owner's thread, adds one to the count and then wakes the waker.
//! * A record is the sleep's alone until its registration hands a clone to
//!   the callback, so the first waker is stored without an atomic; when the
//!   sleep goes and the callback has gone too (stopped or fired on this
//!   thread's shard: the owner drops a callback at once), nothing else can
//!   reach the record, and the thread keeps it, as new, for its next sleep
//!   (`Fired::give_back`; `tests/futures.rs::a_record_used_again_carries_nothing_over`).
//! * The future completes when the count reaches `expect`, the number of
//!   fires it is waiting for, and the timer was armed for a deadline at or
//!   after the sleep's (`Armed::armed_at`). A restart that moves the armed
//!   timer (`Restart::Moved`) leaves `expect` alone (no fire happened for
//!   the old deadline); one that re-arms a timer that had fired
//!   (`Restart::Rearmed`) adds one, for the fire that happened (or whose
//!   callback is still adding its one). One-shot timers run their callback
//!   exactly once per arming, so the count never overshoots.
//! * A reset to a later deadline touches only the sleep: it records the
//!   deadline and leaves the timer where it is (an idle timeout reset per
//!   packet would otherwise reach its timer's slot, a second cache line,
//!   every time: `cargo bench --bench service_vs_tokio -- targets
//!   sleep_reset`). When that timer fires, for the old deadline, the task
//!   is woken and its poll arms the timer again for the rest, as tokio
//!   files a later deadline again when its old one comes: one early wake
//!   per idle period instead of a restart per reset. A reset to an earlier
//!   deadline moves the timer at once.
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
use std::mem::ManuallyDrop;
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

    /// A record for a new registration: one this thread's sleeps gave back
    /// (`give_back`), else a new one.
    fn take() -> Arc<Self> {
        spare::take().unwrap_or_else(Fired::new)
    }

    /// Keeps `fired` for this thread's next registration if nothing else
    /// holds it (the timer's callback was dropped: stopped or fired on this
    /// thread's shard), as new; else lets it go. Saves a sleep's allocation
    /// and free: 941 -> 843 instructions for a sleep made, polled once and
    /// dropped on its shard's owner (`owner_ops sleep-poll-drop` under
    /// callgrind).
    fn give_back(mut fired: Arc<Self>) {
        let Some(only) = Arc::get_mut(&mut fired) else {
            return;
        };
        // The old waker is dropped here, before the spares are borrowed: it
        // may own a task whose drop gives back a sleep of its own.
        *only = Fired {
            count: AtomicU32::new(0),
            waker: WakerCell::new(),
        };
        spare::keep(fired);
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
    /// The service. Counted (as a `Timer` handle is) while the sleep is not
    /// registered; the first poll hands that count to the timer's handle,
    /// which keeps the service's memory from then on, so a sleep costs one
    /// count and one uncount, not two of each (`owner_ops
    /// sleep-poll-drop`). `armed.is_some()` says which holds it.
    service: ManuallyDrop<ServiceRef>,
    /// Nanoseconds since the service clock's origin.
    deadline: u64,
    armed: Option<Armed>,
}

struct Armed {
    timer: Timer,
    fired: Arc<Fired>,
    /// The fire count at which the timer has fired for `armed_at`.
    expect: u32,
    /// The deadline the timer is armed for (ns on the service clock): the
    /// sleep's own, or an earlier one its reset left behind (see the module
    /// docs).
    armed_at: u64,
}

impl Armed {
    /// Fired for a deadline at or after `deadline`.
    fn elapsed_for(&self, deadline: u64) -> bool {
        deadline <= self.armed_at && reached(self.fired.count(), self.expect)
    }

    /// RESTARTs the timer for `deadline`.
    fn restart(&mut self, deadline: u64) {
        match self.timer.restart_at_nanos(deadline) {
            Ok(Restart::Moved) => {}
            // It had fired: that fire's one is (or is being) counted, and
            // the new arming will add one more.
            Ok(Restart::Rearmed) => self.expect = self.expect.wrapping_add(1),
            Err(error) => panic!("tickwheel: Sleep::reset: {error}"),
        }
        self.armed_at = deadline;
    }
}

impl Sleep {
    /// A sleep until `deadline` nanoseconds on `service`'s clock.
    pub(crate) fn new(service: ServiceRef, deadline: u64) -> Self {
        Sleep {
            service: ManuallyDrop::new(service),
            deadline,
            armed: None,
        }
    }

    /// The instant this sleep completes after.
    pub fn deadline(&self) -> Instant {
        self.service.instant_at(self.deadline)
    }

    /// `true` once the timer has fired for the current deadline (a sleep
    /// never polled has not registered, and reads `false`; nor does one
    /// reset later whose timer has fired only for its old deadline).
    pub fn is_elapsed(&self) -> bool {
        self.armed
            .as_ref()
            .is_some_and(|armed| armed.elapsed_for(self.deadline))
    }

    /// Moves the deadline to `deadline`. Later than the deadline its timer
    /// is armed for, it is only recorded: the timer fires for the old one,
    /// wakes the task, and the poll arms it again for the rest (see the
    /// module docs). Earlier, the armed timer is moved at once (a RESTART).
    /// Either way a sleep that had completed is pending again until the new
    /// deadline.
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
        if deadline < armed.armed_at {
            armed.restart(deadline);
        }
    }

    fn register(&mut self, cx: &mut Context<'_>) {
        let mut fired = Fired::take();
        // The waker first, while the record is this sleep's alone (no
        // atomic): the timer may fire on its owner before `schedule`
        // returns.
        Arc::get_mut(&mut fired)
            .expect("a record just taken is the sleep's alone")
            .waker
            .set(cx.waker());
        let for_callback = fired.clone();
        // SAFETY: the sleep is not registered, so `service` holds its count,
        // which the timer's handle takes over here (`armed` is set next, and
        // nothing between can unwind: `Drop` then leaves the count to the
        // handle).
        let started = unsafe {
            self.service
                .start_at_nanos_taking_count(self.deadline, move |_| for_callback.fire(1))
        };
        let timer = started.unwrap_or_else(|error| panic!("tickwheel: Sleep polled: {error}"));
        self.armed = Some(Armed {
            timer,
            fired,
            expect: 1,
            armed_at: self.deadline,
        });
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let Some(armed) = &mut this.armed else {
            this.register(cx);
            return Poll::Pending;
        };
        if reached(armed.fired.count(), armed.expect) {
            if this.deadline <= armed.armed_at {
                return Poll::Ready(());
            }
            // Fired for the deadline a later reset left behind: armed again
            // for the sleep's own.
            armed.restart(this.deadline);
        }
        armed.fired.register(cx.waker());
        // A fire between the check above and the registration woke the
        // waker stored before: look again (module docs of `waker_cell`).
        if armed.elapsed_for(this.deadline) {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        match self.armed.take() {
            // SAFETY: not registered, so `service` still holds its count;
            // it is not used after.
            None => unsafe { ManuallyDrop::drop(&mut self.service) },
            // A registered sleep's count goes with its timer's handle.
            Some(Armed { timer, fired, .. }) => {
                drop(timer); // a STOP
                Fired::give_back(fired);
            }
        }
    }
}

/// Each thread's spare [`Fired`] records. Not under loom or shuttle: a
/// record kept by one model execution must not reach the next.
#[cfg(not(any(loom, shuttle)))]
mod spare {
    use std::cell::RefCell;

    use super::Fired;
    use crate::sync::Arc;

    /// Enough for a worker's burst of sleeps made and dropped; 48 bytes each.
    const MAX: usize = 64;

    std::thread_local! {
        static SPARE: RefCell<Vec<Arc<Fired>>> = const { RefCell::new(Vec::new()) };
    }

    pub(super) fn take() -> Option<Arc<Fired>> {
        SPARE
            .try_with(|spare| spare.borrow_mut().pop())
            .ok()
            .flatten()
    }

    pub(super) fn keep(fired: Arc<Fired>) {
        let _ = SPARE.try_with(|spare| {
            let mut spare = spare.borrow_mut();
            if spare.len() < MAX {
                spare.push(fired);
            }
        });
    }
}

#[cfg(any(loom, shuttle))]
mod spare {
    use super::Fired;
    use crate::sync::Arc;

    pub(super) fn take() -> Option<Arc<Fired>> {
        None
    }

    pub(super) fn keep(_: Arc<Fired>) {}
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
