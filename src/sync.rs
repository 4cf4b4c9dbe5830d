//! The one switch between std and loom.
//!
//! Every atomic, cell, `Arc`, thread and thread-local that takes part in a
//! cross-thread protocol is imported from here, never from `std` directly, so
//! that a `--cfg loom` build swaps all of them for loom's model-checked
//! versions at once. Code that bypasses this module is invisible to loom.
//!
//! `UnsafeCell` has loom's shape (`with` / `with_mut` taking a closure over a
//! raw pointer) in both builds, so the same code compiles against either.

#[cfg(not(loom))]
mod imp {
    pub(crate) use std::sync::atomic::{
        AtomicBool, AtomicPtr, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering,
    };
    pub(crate) use std::sync::Arc;
    pub(crate) use std::thread;
    pub(crate) use std::thread_local;

    /// `std::cell::UnsafeCell` with loom's closure-based accessors.
    #[derive(Debug, Default)]
    pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

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

    /// Spin-loop hint (a real pause instruction outside loom).
    pub(crate) fn spin_hint() {
        std::hint::spin_loop();
    }
}

#[cfg(loom)]
mod imp {
    pub(crate) use loom::cell::UnsafeCell;
    pub(crate) use loom::sync::atomic::{
        AtomicBool, AtomicPtr, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering,
    };
    pub(crate) use loom::sync::Arc;
    pub(crate) use loom::thread;
    pub(crate) use loom::thread_local;

    /// Under loom a spin must yield so that the model lets the other thread run.
    pub(crate) fn spin_hint() {
        loom::thread::yield_now();
    }
}

#[allow(unused_imports)]
pub(crate) use imp::*;

/// The fence at each store-to-load point of a Dekker-style handshake (an
/// owner publishing its sleep and then checking its intake; a producer
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
