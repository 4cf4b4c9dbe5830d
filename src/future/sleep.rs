//! [`Sleep`]: a future that completes once its deadline has passed, on a
//! [`TimerService`](crate::TimerService) shard, from any executor.
//!
//! # Who owns what
//!
//! * The future owns its [`Timer`](crate::Timer) handle: dropping the future drops the
//!   handle, which stops the timer (a STOP: one CAS from any thread).
//!   Before its first poll it holds a counted reference to the service
//!   (`ServiceRef`, counted per shard as a `Timer` handle is): like a
//!   handle, it keeps the service's memory, not the service running. The
//!   first poll hands that count to the timer's handle.
//! * The timer's callback owns a clone of the task's waker, inline in the
//!   timer's slot (16 bytes), and wakes it when the timer fires: there is
//!   no record shared between the callback and the future, so a sleep
//!   costs no allocation and no reference count of its own (`owner_ops
//!   sleep-poll-drop`, `service_vs_tokio/sleep_poll_drop`).
//! * Whether the timer has fired is its state word (`FIRED`, set by the
//!   owner's CAS before the callback runs, and kept while the handle
//!   holds the slot). A poll reads it: fired, the sleep completes if the
//!   timer was armed for a deadline at or after the sleep's
//!   (`Armed::armed_at`); not fired, the callback will wake the waker it
//!   holds, so the poll only checks that this is the waker it was given
//!   now (the same data and vtable, as `Waker::will_wake`; the callback's
//!   clone keeps that data alive while the handle holds the slot, so the
//!   address cannot be another waker's).
//! * A different waker (the task moved, or a combinator polls with its
//!   own) replaces the timer: a STOP of the old one decides the race with
//!   its fire. `Cancelled`: its callback will never run, and a new timer
//!   carries the new waker. Otherwise it fired (or its callback runs now),
//!   and the poll goes on as for a fired timer. loom:
//!   `sleep_poll_vs_fire_vs_waker_change` (`tests/loom_service.rs`).
//! * A reset to a later deadline touches only the sleep: it records the
//!   deadline and leaves the timer where it is (an idle timeout reset per
//!   packet would otherwise reach its timer's slot, a second cache line,
//!   every time: `cargo bench --bench service_vs_tokio -- targets
//!   sleep_reset`). When that timer fires, for the old deadline, the task
//!   is woken and its poll re-arms the timer (a RESTART) for the rest, as
//!   tokio files a later deadline again when its old one comes: one early
//!   wake per idle period instead of a restart per reset. A reset to an
//!   earlier deadline moves the timer at once.
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
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::service::{LocatedTimer, ServiceRef};
use crate::{Expiry, Stop, TimerError};

/// A future that completes once its deadline has passed: see
/// [`TimerService::sleep`](crate::TimerService::sleep).
///
/// `Unpin`, and cheap to move before and after its first poll. Dropping it
/// stops its timer.
///
/// # Panics
/// A poll after the service has shut down panics when the sleep would
/// need a new timer (its first poll, or a poll with a different waker or
/// after a later reset): the sleep could never complete.
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
    /// The handle, which keeps the timer's slot: a sleep dropped before it
    /// fires (the common timeout) skips the id's lookup in the arena.
    timer: LocatedTimer,
    /// The waker the timer's callback wakes, by identity: its data and
    /// vtable addresses (see the module docs for why comparing them is
    /// sound).
    waker: (usize, usize),
    /// The deadline the timer is armed for (ns on the service clock): the
    /// sleep's own, or an earlier one its reset left behind (see the module
    /// docs).
    armed_at: u64,
}

/// A timer's callback that wakes a clone of `waker`.
fn waking(waker: &Waker) -> impl FnMut(&mut Expiry<'_>) + Send + 'static {
    let waker = waker.clone();
    move |_| waker.wake_by_ref()
}

/// A waker's identity: what `Waker::will_wake` compares.
fn identity(waker: &Waker) -> (usize, usize) {
    (waker.data() as usize, waker.vtable() as *const _ as usize)
}

impl Armed {
    /// `timer`, armed for `deadline`, whose callback wakes `waker` (made
    /// by [`waking`]).
    fn new(timer: Result<LocatedTimer, TimerError>, waker: &Waker, deadline: u64) -> Self {
        Armed {
            timer: timer.unwrap_or_else(|error| panic!("tickwheel: Sleep polled: {error}")),
            waker: identity(waker),
            armed_at: deadline,
        }
    }

    /// Fired for a deadline at or after `deadline`.
    fn elapsed_for(&self, deadline: u64) -> bool {
        deadline <= self.armed_at && self.timer.has_fired()
    }

    /// RESTARTs the timer for `deadline`.
    fn restart(&mut self, deadline: u64) {
        if let Err(error) = self.timer.timer().restart_at_nanos(deadline) {
            panic!("tickwheel: Sleep::reset: {error}");
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

    /// The first poll: a timer for the deadline whose callback wakes a
    /// clone of `waker`.
    fn register(&mut self, waker: &Waker) {
        // SAFETY: the sleep is not registered, so `service` holds its count,
        // which the timer's handle takes over here (`armed` is set next, and
        // nothing between can unwind: `Drop` then leaves the count to the
        // handle; on an error the count stays the sleep's and the panic
        // leaves `armed` unset).
        let started = unsafe {
            self.service
                .start_at_nanos_taking_count(self.deadline, waking(waker))
        };
        self.armed = Some(Armed::new(started, waker, self.deadline));
    }

    /// A registered sleep's timer is to wake `waker` for the deadline from
    /// now on: a new timer replaces the old one, whose handle is dropped
    /// (the caller has stopped it, or it has fired).
    fn replace(&mut self, waker: &Waker) {
        debug_assert!(self.armed.is_some(), "a registered sleep");
        let started = self.service.start_at_nanos(self.deadline, waking(waker));
        self.armed = Some(Armed::new(started, waker, self.deadline));
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let Some(armed) = &mut this.armed else {
            this.register(cx.waker());
            return Poll::Pending;
        };
        let same_waker = armed.waker == identity(cx.waker());
        if !armed.timer.has_fired() {
            if same_waker {
                // Its fire will wake this waker.
                return Poll::Pending;
            }
            // The STOP decides the race with the fire (module docs).
            match armed.timer.timer().stop() {
                Stop::Cancelled | Stop::Inactive => {
                    this.replace(cx.waker());
                    return Poll::Pending;
                }
                Stop::Fired | Stop::Running => {}
            }
        }
        // Fired, for the deadline it was armed for.
        if this.deadline <= armed.armed_at {
            return Poll::Ready(());
        }
        // Fired for the deadline a later reset left behind: armed again for
        // the sleep's own, waking this waker.
        if same_waker {
            armed.restart(this.deadline);
        } else {
            this.replace(cx.waker());
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
            // A registered sleep's count goes with its timer's handle; the
            // drop is a STOP.
            Some(armed) => drop(armed),
        }
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
