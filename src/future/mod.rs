//! Futures on a [`TimerService`], for any executor: [`Sleep`],
//! [`Timeout`] and [`Interval`].
//!
//! Each is a timer of the service: registered on its first poll (a future
//! dropped unpolled arms nothing), on the polling thread's own shard when
//! that thread owns one (an executor whose worker threads each claim a
//! shard and poll it between tasks), else on a shard picked as
//! [`TimerService::start`] picks one. The task's waker is stored with the
//! timer and woken from the shard owner's expiry; a waker that changes
//! between polls (the task moved to another worker) is replaced without
//! losing a wake. Resetting a sleep is a RESTART of its timer, dropping it a
//! STOP: each one atomic step from any thread. Nothing here depends on a
//! runtime.
//!
//! ```
//! use std::time::Duration;
//! use tickwheel::TimerService;
//!
//! # use std::future::Future;
//! # use std::sync::Arc;
//! # use std::task::{Context, Poll, Wake};
//! # struct Unpark(std::thread::Thread);
//! # impl Wake for Unpark {
//! #     fn wake(self: Arc<Self>) { self.0.unpark(); }
//! # }
//! # // A minimal executor: poll, park until woken.
//! # fn block_on<F: Future>(f: F) -> F::Output {
//! #     let waker = Arc::new(Unpark(std::thread::current())).into();
//! #     let mut cx = Context::from_waker(&waker);
//! #     let mut f = std::pin::pin!(f);
//! #     loop {
//! #         if let Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; }
//! #         std::thread::park();
//! #     }
//! # }
//! let service = TimerService::new()?; // driver threads fire the timers
//! block_on(async {
//!     service.sleep(Duration::from_millis(5)).await;
//!     let slow = std::future::pending::<()>();
//!     assert!(service.timeout(Duration::from_millis(5), slow).await.is_err());
//!     let mut every = service.interval(Duration::from_millis(2));
//!     every.tick().await; // at once
//!     every.tick().await; // 2 ms later
//! });
//! # Ok::<(), tickwheel::TimerError>(())
//! ```

mod fired;
#[cfg(feature = "hyper")]
mod hyper;
mod interval;
mod sleep;
mod timeout;
mod waker_cell;

use std::future::Future;
use std::time::{Duration, Instant};

pub use interval::{Interval, MissedTickBehavior};
pub use sleep::Sleep;
pub use timeout::{Elapsed, Timeout};

use crate::TimerService;

impl TimerService {
    /// A future that completes once `duration` has passed from now (never
    /// earlier; at the first tick boundary at or after it when the shard's
    /// owner keeps up). See [`Sleep`].
    #[inline]
    pub fn sleep(&self, duration: Duration) -> Sleep {
        let service = self.service_ref();
        let deadline = service.deadline_nanos_after(duration);
        Sleep::new(service, deadline)
    }

    /// A future that completes once `deadline` has passed.
    pub fn sleep_until(&self, deadline: Instant) -> Sleep {
        let service = self.service_ref();
        let deadline = service.nanos_at(deadline);
        Sleep::new(service, deadline)
    }

    /// Runs `future` with a deadline `duration` from now: its output, or
    /// [`Elapsed`] if the deadline passes first. See [`Timeout`].
    pub fn timeout<F: Future>(&self, duration: Duration, future: F) -> Timeout<F> {
        Timeout::new(future, self.sleep(duration))
    }

    /// [`timeout`](Self::timeout) with a deadline instant.
    pub fn timeout_at<F: Future>(&self, deadline: Instant, future: F) -> Timeout<F> {
        Timeout::new(future, self.sleep_until(deadline))
    }

    /// Ticks every `period`, the first at once. See [`Interval`].
    ///
    /// # Panics
    /// If `period` is zero.
    pub fn interval(&self, period: Duration) -> Interval {
        let service = self.service_ref();
        let now = service.elapsed_nanos();
        Interval::new(service, now, period)
    }

    /// Ticks every `period`, the first at `start`.
    ///
    /// # Panics
    /// If `period` is zero.
    pub fn interval_at(&self, start: Instant, period: Duration) -> Interval {
        let service = self.service_ref();
        let start = service.nanos_at(start);
        Interval::new(service, start, period)
    }
}
