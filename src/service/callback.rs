//! What a slot keeps of a timer's callback: the user's closure, and for a
//! periodic timer its period, behind one pointer.
//!
//! # Why a thin pointer
//!
//! Every byte of a slot is paid by every armed timer (see the slot layout in
//! `arena.rs`). A `Box<dyn Trait>` is two words (data and vtable); a
//! [`Callback`] is one: it points at a header whose first field is the
//! vtable, followed by the value. The period lives beside the closure, in
//! the same allocation, not in the slot: most timers are one-shot.
//!
//! A one-shot timer whose closure captures nothing (a zero-sized type with
//! no destructor) needs no allocation at all: its `Callback` points at a
//! promoted constant that holds only a vtable, and the closure is
//! conjured from a dangling pointer when it fires (valid for a zero-sized
//! type, and nothing was moved in that would need dropping).
//!
//! # Safety argument
//!
//! A `Callback` is built only by [`boxed`], which pairs each pointer with
//! the vtable of the type behind it: `Thin<T>` from `Box::into_raw` with
//! `VTable::boxed::<T>()`, or the static header with `VTable::zero_sized::<T>()`.
//! Each vtable function casts the pointer back to that same type. The
//! `Callback` owns the allocation (it is neither `Clone` nor `Copy`) and
//! frees it once, in `Drop`. It is `Send` because `Fire: Send`.

use std::ptr::NonNull;

use super::Expiry;

/// A timer's callback as the shard owner sees it.
pub(crate) trait Fire: Send {
    /// Runs the user's closure.
    fn fire(&mut self, expiry: &mut Expiry<'_>);

    /// `(period in ticks, burst)`; a period of 0 means one-shot.
    fn period(&self) -> (u64, bool);
}

/// The callback stored in a slot: one word (`Option<Callback>` too).
pub(crate) struct Callback(NonNull<Header>);

// SAFETY: the value behind the pointer is a `Fire`, which is `Send`, and the
// `Callback` owns it exclusively.
unsafe impl Send for Callback {}

/// What a `Callback` points at: the vtable, first in every allocation.
#[repr(C)]
struct Header {
    vtable: &'static VTable,
}

/// A boxed value after its header.
#[repr(C)]
struct Thin<T> {
    header: Header,
    value: T,
}

struct VTable {
    fire: unsafe fn(NonNull<Header>, &mut Expiry<'_>),
    period: unsafe fn(NonNull<Header>) -> (u64, bool),
    drop: unsafe fn(NonNull<Header>),
}

/// The vtables of one type `T`, as promoted constants.
struct VTables<T>(std::marker::PhantomData<T>);

impl<T: Fire> VTables<T> {
    const BOXED: VTable = VTable {
        fire: fire_boxed::<T>,
        period: period_boxed::<T>,
        drop: drop_boxed::<T>,
    };
    const ZERO_SIZED: VTable = VTable {
        fire: fire_zero_sized::<T>,
        period: period_zero_sized::<T>,
        drop: drop_nothing,
    };
    /// The whole "allocation" of a zero-sized callback.
    const ZERO_SIZED_HEADER: Header = Header {
        vtable: &Self::ZERO_SIZED,
    };
}

/// # Safety
/// `header` came from `Box::into_raw` of a `Thin<T>` and is still owned.
unsafe fn fire_boxed<T: Fire>(header: NonNull<Header>, expiry: &mut Expiry<'_>) {
    // SAFETY: per the contract; the owner has exclusive access.
    unsafe { (*header.cast::<Thin<T>>().as_ptr()).value.fire(expiry) }
}

/// # Safety
/// As `fire_boxed`.
unsafe fn period_boxed<T: Fire>(header: NonNull<Header>) -> (u64, bool) {
    // SAFETY: as in `fire_boxed`.
    unsafe { (*header.cast::<Thin<T>>().as_ptr()).value.period() }
}

/// # Safety
/// As `fire_boxed`; the allocation is not used again.
unsafe fn drop_boxed<T: Fire>(header: NonNull<Header>) {
    // SAFETY: per the contract, this is the `Box` that `boxed` leaked.
    drop(unsafe { Box::from_raw(header.cast::<Thin<T>>().as_ptr()) });
}

/// # Safety
/// `T` is zero-sized (any aligned non-null pointer is a valid `&mut T`) and
/// a value of it was given up (forgotten) to make this callback.
unsafe fn fire_zero_sized<T: Fire>(_: NonNull<Header>, expiry: &mut Expiry<'_>) {
    // SAFETY: per the contract.
    unsafe { (*NonNull::<T>::dangling().as_ptr()).fire(expiry) }
}

/// # Safety
/// As `fire_zero_sized`.
unsafe fn period_zero_sized<T: Fire>(_: NonNull<Header>) -> (u64, bool) {
    // SAFETY: as in `fire_zero_sized`.
    unsafe { (*NonNull::<T>::dangling().as_ptr()).period() }
}

/// A zero-sized value without a destructor: nothing to do.
unsafe fn drop_nothing(_: NonNull<Header>) {}

impl Callback {
    fn new<T: Fire + 'static>(value: T) -> Callback {
        if std::mem::size_of::<T>() == 0 && !std::mem::needs_drop::<T>() {
            // Nothing to keep: the value is zero-sized and dropping it does
            // nothing, so forgetting it here and conjuring it when it fires
            // (`fire_zero_sized`) is the same as keeping it.
            std::mem::forget(value);
            let header: &'static Header = &VTables::<T>::ZERO_SIZED_HEADER;
            return Callback(NonNull::from(header));
        }
        let thin = Box::new(Thin {
            header: Header {
                vtable: &VTables::<T>::BOXED,
            },
            value,
        });
        Callback(NonNull::from(Box::leak(thin)).cast())
    }

    fn vtable(&self) -> &'static VTable {
        // SAFETY: the pointer is live (see the module docs) and starts with
        // a `Header` (`repr(C)` puts it first).
        unsafe { self.0.as_ref().vtable }
    }

    /// Runs the user's closure.
    pub(crate) fn fire(&mut self, expiry: &mut Expiry<'_>) {
        // SAFETY: the vtable belongs to the value behind the pointer.
        unsafe { (self.vtable().fire)(self.0, expiry) }
    }

    /// `(period in ticks, burst)`; a period of 0 means one-shot.
    pub(crate) fn period(&self) -> (u64, bool) {
        // SAFETY: as in `fire`.
        unsafe { (self.vtable().period)(self.0) }
    }
}

impl Drop for Callback {
    fn drop(&mut self) {
        // SAFETY: as in `fire`; the pointer is not used again.
        unsafe { (self.vtable().drop)(self.0) }
    }
}

/// Boxes `f` for a timer with `period` ticks (0: one-shot).
pub(crate) fn boxed<F>(f: F, period: u64, burst: bool) -> Callback
where
    F: FnMut(&mut Expiry<'_>) + Send + 'static,
{
    if period == 0 {
        Callback::new(OneShot(f))
    } else {
        Callback::new(Periodic { f, period, burst })
    }
}

struct OneShot<F>(F);

impl<F: FnMut(&mut Expiry<'_>) + Send> Fire for OneShot<F> {
    fn fire(&mut self, expiry: &mut Expiry<'_>) {
        (self.0)(expiry)
    }

    fn period(&self) -> (u64, bool) {
        (0, false)
    }
}

struct Periodic<F> {
    f: F,
    period: u64,
    burst: bool,
}

impl<F: FnMut(&mut Expiry<'_>) + Send> Fire for Periodic<F> {
    fn fire(&mut self, expiry: &mut Expiry<'_>) {
        (self.f)(expiry)
    }

    fn period(&self) -> (u64, bool) {
        (self.period, self.burst)
    }
}

#[cfg(all(test, not(loom), not(shuttle)))]
mod tests {
    use super::*;
    use crate::{Clock, Driver, ManualClock, TimerService};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    fn service() -> (TimerService, crate::ShardGuard, ManualClock) {
        let clock = ManualClock::new();
        let service = TimerService::builder()
            .shards(1)
            .driver(Driver::Embedded)
            .clock(Clock::Manual(clock.clone()))
            .build()
            .unwrap();
        let guard = service.claim_shard(0).unwrap();
        (service, guard, clock)
    }

    #[test]
    fn a_callback_is_one_word() {
        assert_eq!(std::mem::size_of::<Option<Callback>>(), 8);
    }

    #[test]
    fn a_closure_that_captures_nothing_shares_one_static_header() {
        let a = boxed(|_| {}, 0, false);
        let b = boxed(|_| {}, 0, false);
        let c = boxed(|_| {}, 0, false);
        // Nothing was allocated: miri reports an invalid free if `drop`
        // frees the static header.
        assert_eq!(a.period(), (0, false));
        let again = || boxed(|_| {}, 0, false);
        assert_eq!(again().0, again().0, "same type, same static header");
        drop((a, b, c));
    }

    #[test]
    fn a_periodic_callback_keeps_its_period_beside_the_closure() {
        let periodic = boxed(|_| {}, 7, true);
        assert_eq!(periodic.period(), (7, true));
        let captured = Arc::new(());
        let capturing = boxed(
            move |_| {
                let _ = &captured;
            },
            3,
            false,
        );
        assert_eq!(capturing.period(), (3, false));
    }

    /// Captures are dropped exactly once, when the callback is, and not
    /// when it fires; a zero-sized capture with a destructor is kept too.
    #[test]
    fn captures_are_dropped_once_with_the_callback() {
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        struct Counted;
        impl Drop for Counted {
            fn drop(&mut self) {
                DROPS.fetch_add(1, Ordering::SeqCst);
            }
        }
        let zero_sized_with_drop = Counted;
        let callback = boxed(
            move |_| {
                let _ = &zero_sized_with_drop;
            },
            0,
            false,
        );
        assert_eq!(DROPS.load(Ordering::SeqCst), 0);
        drop(callback);
        assert_eq!(DROPS.load(Ordering::SeqCst), 1);

        let shared = Arc::new(());
        let held = shared.clone();
        let callback = boxed(
            move |_| {
                let _ = &held;
            },
            0,
            false,
        );
        assert_eq!(Arc::strong_count(&shared), 2);
        drop(callback);
        assert_eq!(Arc::strong_count(&shared), 1);
    }

    /// Both kinds fire through the service: a closure that captures
    /// nothing (the static header) and one that captures a counter.
    #[test]
    fn both_kinds_fire() {
        static STATIC_FIRES: AtomicUsize = AtomicUsize::new(0);
        let (service, mut guard, clock) = service();
        let fires = Arc::new(AtomicUsize::new(0));
        let counted = fires.clone();
        let _a = service
            .start(Duration::from_millis(1), |_| {
                STATIC_FIRES.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
        let _b = service
            .start(Duration::from_millis(1), move |_| {
                counted.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
        let _c = service
            .start_periodic(Duration::from_millis(1), |_| {
                STATIC_FIRES.fetch_add(10, Ordering::SeqCst);
            })
            .unwrap();
        clock.advance(Duration::from_millis(5));
        guard.poll().unwrap();
        assert_eq!(fires.load(Ordering::SeqCst), 1);
        let statics = STATIC_FIRES.load(Ordering::SeqCst);
        assert_eq!(statics % 10, 1, "the one-shot fired once");
        assert!(statics / 10 >= 1, "the periodic one fired");
    }
}
