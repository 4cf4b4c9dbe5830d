//! hyper's timer on the service (the `hyper` feature): `TimerService`
//! implements [`hyper::rt::Timer`], so a hyper 1.x server or client runs
//! its header-read, keep-alive and pool timeouts as tickwheel timers.
//!
//! ```
//! use std::convert::Infallible;
//! use std::time::Duration;
//! use hyper::{body::Incoming, server::conn::http1, service::service_fn, Request, Response};
//!
//! /// Serves one HTTP/1 connection; a client that takes longer than five
//! /// seconds to send a request's headers is disconnected.
//! async fn serve<I>(timers: &tickwheel::TimerService, io: I) -> hyper::Result<()>
//! where
//!     I: hyper::rt::Read + hyper::rt::Write + Unpin + 'static,
//! {
//!     let hello = service_fn(|_: Request<Incoming>| async {
//!         Ok::<_, Infallible>(Response::new(String::from("hello\n")))
//!     });
//!     http1::Builder::new()
//!         .timer(timers.clone())
//!         .header_read_timeout(Duration::from_secs(5))
//!         .serve_connection(io, hello)
//!         .await
//! }
//! ```
//!
//! Each hyper sleep is a [`Sleep`]: registered on its first
//! poll, never complete before its deadline, stopped when hyper drops it.
//! hyper re-arms a connection's timeout by `reset`, which keeps the armed
//! timer instead of making a new one (a later deadline, the keep-alive
//! case, is only recorded in the sleep; see [`Sleep::reset`]). The timer is a clone of the service, so the
//! service keeps running while hyper holds it; after an explicit
//! [`shutdown`](crate::TimerService::shutdown), polling a hyper sleep
//! panics, as any `Sleep` does. `examples/hyper_server/` is an HTTP/1
//! server with a header-read timeout on tickwheel; `tests/hyper_timer.rs`
//! drives it with a client that stalls half-way through its request.

use std::pin::Pin;
use std::time::{Duration, Instant};

use super::Sleep;
use crate::TimerService;

impl hyper::rt::Sleep for Sleep {}

impl hyper::rt::Timer for TimerService {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(TimerService::sleep(self, duration))
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(TimerService::sleep_until(self, deadline))
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>, new_deadline: Instant) {
        match sleep.as_mut().downcast_mut_pin::<Sleep>() {
            // Ours (of this service or another): move its timer.
            Some(ours) => ours.get_mut().reset(new_deadline),
            // Some other timer's sleep: replace it with one of ours.
            None => *sleep = hyper::rt::Timer::sleep_until(self, new_deadline),
        }
    }
}
