//! [`Timeout`]: a future with a deadline (see [`TimerService::timeout`]).
//!
//! The inner future is polled first, so one that is ready at the deadline
//! still wins; the sleep registers only if the inner future is pending on
//! its first poll (a timeout around a ready future arms nothing).
//!
//! [`TimerService::timeout`]: crate::TimerService::timeout

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::Sleep;

/// The error of a [`Timeout`] whose deadline passed first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Elapsed(());

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

impl std::error::Error for Elapsed {}

/// A future that resolves to its inner future's output, or to [`Elapsed`]
/// once the deadline has passed first. Dropping it drops the inner future
/// and stops the timer.
#[must_use = "a timeout does nothing unless awaited or polled"]
pub struct Timeout<F> {
    future: F,
    sleep: Sleep,
}

impl<F> Timeout<F> {
    pub(crate) fn new(future: F, sleep: Sleep) -> Self {
        Timeout { future, sleep }
    }

    /// The inner future.
    pub fn get_ref(&self) -> &F {
        &self.future
    }

    /// The inner future, unwrapped (the timer stops).
    pub fn into_inner(self) -> F {
        self.future
    }

    /// The instant after which the timeout elapses.
    pub fn deadline(&self) -> std::time::Instant {
        self.sleep.deadline()
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `future` is structurally pinned: it is never moved out
        // while pinned (`into_inner` takes `self` by value, which needs
        // `Timeout: Unpin`, i.e. `F: Unpin`), and `Timeout` has no `Drop`.
        // `sleep` is not pinned (`Sleep: Unpin`).
        let this = unsafe { self.get_unchecked_mut() };
        // SAFETY: see above.
        let future = unsafe { Pin::new_unchecked(&mut this.future) };
        if let Poll::Ready(output) = future.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        match Pin::new(&mut this.sleep).poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed(()))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<F> fmt::Debug for Timeout<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timeout")
            .field("sleep", &self.sleep)
            .finish_non_exhaustive()
    }
}
