//! The one switch between std, loom and shuttle.
//!
//! Every atomic, cell, `Arc`, thread and thread-local that takes part in a
//! cross-thread protocol is imported from here, never from `std` directly, so
//! that a `--cfg loom` build swaps all of them for loom's model-checked
//! versions at once, and a `--cfg shuttle` build for shuttle's randomly
//! scheduled ones (tests/shuttle_service.rs). Code that bypasses this module
//! is invisible to both.
//!
//! `UnsafeCell` has loom's shape (`with` / `with_mut` taking a closure over a
//! raw pointer) in every build, so the same code compiles against each.

#[cfg(not(any(loom, shuttle)))]
mod imp {
    pub(crate) use std::sync::atomic::{
        AtomicBool, AtomicPtr, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering,
    };
    pub(crate) use std::sync::Arc;
    pub(crate) use std::thread;
    #[allow(unused_imports)]
    // `service/mod.rs` declares its thread-locals with std's macro directly here.
    pub(crate) use std::thread_local;

    /// Spin-loop hint (a real pause instruction outside loom).
    pub(crate) fn spin_hint() {
        std::hint::spin_loop();
    }

    /// Exponential spinning, then yielding (crossbeam's).
    pub(crate) use crossbeam_utils::Backoff;
}

#[cfg(loom)]
mod imp {
    pub(crate) use loom::cell::UnsafeCell;
    pub(crate) use loom::sync::atomic::{
        AtomicBool, AtomicPtr, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering,
    };
    pub(crate) use loom::sync::Arc;
    pub(crate) use loom::thread_local;

    /// loom's threads, plus the `park_timeout` loom lacks.
    pub(crate) mod thread {
        pub(crate) use loom::thread::*;

        /// loom has no time: the timeout never elapses, and only an
        /// `unpark` ends the wait (loom reports a deadlock if none comes).
        /// (Driver threads are refused under loom; see `Builder::build`.)
        pub(crate) fn park_timeout(_timeout: std::time::Duration) {
            loom::thread::park();
        }
    }

    /// Under loom a spin must yield so that the model lets the other thread run.
    pub(crate) fn spin_hint() {
        loom::thread::yield_now();
    }

    /// crossbeam's `Backoff` spins on std's hint and yields through std,
    /// which loom never sees (its own loom support needs `crossbeam_loom`).
    pub(crate) type Backoff = super::ModelBackoff;
}

/// shuttle runs every thread of a test as a coroutine on one OS thread and
/// switches between them at each atomic access, lock, spawn, join, park and
/// yield, choosing the next thread with a random or PCT scheduler. Its
/// atomics are sequentially consistent (it explores interleavings, not weak
/// memory: that is loom's and miri's part), so the whole service, with many
/// threads and thousands of operations, fits in one schedule.
#[cfg(all(shuttle, not(loom)))]
mod imp {
    pub(crate) use shuttle::sync::atomic::{
        AtomicBool, AtomicPtr, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering,
    };
    pub(crate) use shuttle::sync::Arc;
    pub(crate) use shuttle::thread_local;

    /// shuttle's threads, with a parker that never wakes spuriously and a
    /// model of `park_timeout` (below).
    pub(crate) mod thread {
        use shuttle::sync::{Condvar, Mutex};
        pub(crate) use shuttle::thread::{yield_now, Builder, JoinHandle, ThreadId};
        use std::sync::Arc;
        use std::time::Duration;

        /// Timeouts up to this long elapse within a schedule; longer ones
        /// never do.
        pub(crate) const LONG_TIMEOUT: Duration = Duration::from_secs(1);

        /// A thread's park token.
        #[derive(Default)]
        struct Token {
            available: Mutex<bool>,
            signal: Condvar,
        }

        shuttle::thread_local! {
            static TOKEN: Arc<Token> = Arc::new(Token::default());
        }

        /// A handle to a thread, to unpark it.
        #[derive(Clone)]
        pub(crate) struct Thread {
            id: ThreadId,
            token: Arc<Token>,
        }

        impl Thread {
            pub(crate) fn id(&self) -> ThreadId {
                self.id
            }

            pub(crate) fn unpark(&self) {
                *self.token.available.lock().unwrap() = true;
                self.token.signal.notify_one();
            }
        }

        pub(crate) fn current() -> Thread {
            Thread {
                id: shuttle::thread::current().id(),
                token: TOKEN.with(Arc::clone),
            }
        }

        /// Blocks until the token is available, and takes it.
        ///
        /// Not shuttle's own `park`: that one may wake spuriously at any
        /// scheduling point (as std's may), and its random scheduler picks a
        /// parked thread as often as a runnable one, so a thread whose wakeup
        /// was lost is woken anyway and the loss never shows. Here only an
        /// `unpark` ends the wait. Spurious wakeups are still exercised: a
        /// short `park_timeout` returns without one (below).
        pub(crate) fn park() {
            let token = TOKEN.with(Arc::clone);
            let mut available = token.available.lock().unwrap();
            while !*available {
                available = token.signal.wait(available).unwrap();
            }
            *available = false;
        }

        /// shuttle has no time, so a timeout must be given a meaning. Its own
        /// `park_timeout` is `park`: the timeout never elapses. That is wrong
        /// for the driver threads of a service on a `ManualClock`, which
        /// re-read the clock every millisecond: a test moves the clock, and
        /// nobody unparks the driver for that (in a real run the timeout
        /// does), so due timers would never fire. Here:
        ///
        /// * a short timeout (up to [`LONG_TIMEOUT`]) elapses at the next
        ///   scheduling point: yield, then return. To the caller this is a
        ///   spurious wakeup, which every park loop (the driver's included)
        ///   must tolerate anyway; the scheduler still decides who runs
        ///   meanwhile.
        /// * a long one (a driver on the monotonic clock sleeping towards a
        ///   timer hours away) never elapses within a schedule: only an
        ///   `unpark` ends the sleep. A lost wakeup then shows as a thread
        ///   that never wakes (a test's reclaim check, or shuttle's deadlock
        ///   report) instead of being hidden by a timeout.
        ///
        /// A schedule must therefore not depend on real time passing: tests
        /// use a `ManualClock`, or the monotonic clock with only long delays.
        pub(crate) fn park_timeout(timeout: Duration) {
            if timeout <= LONG_TIMEOUT {
                yield_now();
            } else {
                park();
            }
        }
    }

    /// Under shuttle, as under loom, a spin must yield: the thread it waits
    /// for runs on the same OS thread and only when this one gives way.
    pub(crate) fn spin_hint() {
        shuttle::thread::yield_now();
    }

    /// As under loom: every step of a backoff yields to the scheduler.
    pub(crate) type Backoff = super::ModelBackoff;
}

/// `std::cell::UnsafeCell` with loom's closure-based accessors, for every
/// build but loom's (which uses loom's own cell, the one that tracks
/// accesses). shuttle does not track cell accesses either (it checks
/// interleavings through its synchronisation points, not data races), so the
/// plain cell serves std and shuttle alike.
#[cfg(not(loom))]
#[derive(Debug, Default)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    /// Runs `f` with a shared raw pointer to the contents.
    #[allow(dead_code)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Runs `f` with a mutable raw pointer to the contents.
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// `crossbeam_utils::Backoff`'s shape for the loom and shuttle builds: each
/// `snooze` is one yield of the model's thread, which is what lets the
/// thread waited for run (spinning would never hand it the turn).
#[cfg(any(loom, shuttle))]
pub(crate) struct ModelBackoff;

#[cfg(any(loom, shuttle))]
impl ModelBackoff {
    pub(crate) fn new() -> Self {
        ModelBackoff
    }

    pub(crate) fn snooze(&self) {
        imp::thread::yield_now();
    }

    /// Never: a model's wait only ever yields.
    pub(crate) fn is_completed(&self) -> bool {
        false
    }
}

#[allow(unused_imports)]
pub(crate) use imp::*;

/// The fence at each store-to-load point of a Dekker-style handshake (an
/// owner publishing its sleep and then checking its remote queue; a producer
/// pushing and then reading the owner's sleep).
///
/// Outside loom this is nothing: those accesses are all SeqCst, which on its
/// own forbids the outcome where both sides miss each other's store. loom
/// models SeqCst accesses as AcqRel (and would report that forbidden outcome
/// as a lost wakeup), but models SeqCst fences exactly, so under loom a
/// SeqCst fence between the store and the load restores the real guarantee.
#[inline]
pub(crate) fn handshake_fence() {
    #[cfg(loom)]
    loom::sync::atomic::fence(Ordering::SeqCst);
}
