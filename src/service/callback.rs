//! What a slot keeps of a timer's callback: the user's closure and, for a
//! periodic timer, its period; inside the slot when they fit.
//!
//! # Layout
//!
//! A [`Callback`] is a vtable pointer and a buffer of [`INLINE`] bytes
//! aligned to 8: 24 bytes, and `Option<Callback>` too (a vtable pointer is
//! never null). A value of at most `INLINE` bytes whose alignment is at most
//! 8 lives in the buffer itself, so arming it allocates nothing. That covers
//! the usual closure, which refers to its connection or request through a
//! pointer or two (an `Arc` and an index: 16 bytes), a C callback without a
//! context destructor (function and context: 16 bytes), and a periodic
//! timer whose closure captures up to 8 bytes (its period takes the other
//! 8; whether it bursts is part of its type, not a field). A larger or
//! over-aligned value is boxed, and the buffer holds the box's pointer. The
//! slot is sized for this buffer (see the slot layout in `arena.rs`): every
//! byte of it is paid by every armed timer, and the slot's last 8 bytes
//! went to the remote queue's link (`remote.rs`) rather than to a larger
//! buffer.
//!
//! # Safety argument
//!
//! 1. A `Callback` is made only by [`Callback::new`], which pairs what it
//!    writes into the buffer with the vtable for it: a `T` that [`fits`]
//!    with `VTables::<T>::INLINE`, or the pointer of a leaked `Box<T>` with
//!    `VTables::<T>::BOXED`. The vtable is never replaced, and the buffer
//!    is written again only by the value itself (a closure updating its
//!    captures when it fires), so each vtable function finds in the buffer
//!    what it was made for, and casts it back to that type.
//! 2. `fits::<T>()` asks for a size of at most `INLINE` and an alignment of
//!    at most the buffer's (8, `repr(align(8))`); a `*mut T` fits too (a
//!    pointer is at most 8 bytes, aligned to at most 8). So every cast of
//!    the buffer is in bounds and aligned.
//! 3. The value is owned by the `Callback` alone: it is neither `Clone` nor
//!    `Copy`, nothing else reads its buffer, and `Drop` drops the value (or
//!    frees the box) exactly once; the vtable functions called before it
//!    borrow the value and leave it in place.
//! 4. Moving a `Callback` copies the buffer's bytes: for an inline value
//!    that is a move of the `T`, which Rust allows for any value that is not
//!    pinned (the value was passed by value, and nothing here pins it). The
//!    buffer is a `MaybeUninit` (a union), so the copy keeps the bytes that
//!    are uninitialised as such and a stored pointer's provenance.
//! 5. The buffer is an `UnsafeCell`, so `period`, which has only
//!    `&Callback`, may make a `&T` of a value with interior mutability (a
//!    captured `Cell`) without breaking the aliasing rules.
//!
//! A `Callback` is `Send` because `Fire: Send` and it owns the value
//! exclusively. It is not `Sync` (nor needs to be): its slot cell is touched
//! by one thread at a time (see "Ownership of a slot's fields" in
//! `arena.rs`), and that thread moves it out before it runs it.

use std::cell::UnsafeCell;
use std::mem::{align_of, size_of, ManuallyDrop, MaybeUninit};

use super::Expiry;

/// A timer's callback as the shard owner sees it.
pub(crate) trait Fire: Send {
    /// Runs the user's closure.
    fn fire(&mut self, expiry: &mut Expiry<'_>);

    /// `(period in ticks, burst)`; a period of 0 means one-shot.
    fn period(&self) -> (u64, bool);
}

/// Bytes of a value kept in the callback itself (see the module docs).
pub(crate) const INLINE: usize = 16;

/// Where the value, or the pointer to its box, is kept.
#[repr(C, align(8))]
struct Buffer(UnsafeCell<MaybeUninit<[u8; INLINE]>>);

impl Buffer {
    fn get(&self) -> *mut u8 {
        self.0.get().cast()
    }
}

/// The callback stored in a slot: a vtable and the value (or its box).
/// `repr(C)`: the vtable first, as the slot layout in `arena.rs` shows.
#[repr(C)]
pub(crate) struct Callback {
    vtable: &'static VTable,
    buffer: Buffer,
}

// SAFETY: the value in the buffer (or behind the pointer in it) is a
// `Fire`, which is `Send`, and the `Callback` owns it exclusively.
unsafe impl Send for Callback {}

/// Whether a `T` is kept in the buffer (else it is boxed).
const fn fits<T>() -> bool {
    size_of::<T>() <= INLINE && align_of::<T>() <= align_of::<Buffer>()
}

// A box's pointer always fits (point 2 of the safety argument).
const _: () = assert!(size_of::<*mut u8>() <= INLINE && align_of::<*mut u8>() <= 8);

struct VTable {
    /// # Safety (all three)
    /// The argument is the buffer of a live `Callback` made with this vtable.
    fire: unsafe fn(*mut u8, &mut Expiry<'_>),
    period: unsafe fn(*mut u8) -> (u64, bool),
    /// The value is not used again. `None` for an inline value that needs
    /// no drop (a closure that captures nothing, or only plain data): its
    /// end then costs no call (`drop_callback` skips it; an owner's START +
    /// cancel, `examples/owner_ops.rs` under callgrind).
    drop: Option<unsafe fn(*mut u8)>,
    /// Kept in the buffer (for the tests).
    #[cfg(all(test, not(loom), not(shuttle)))]
    inline: bool,
}

/// The vtables of one type `T`, as promoted constants.
struct VTables<T>(std::marker::PhantomData<T>);

impl<T: Fire> VTables<T> {
    const INLINE: VTable = VTable {
        fire: fire_inline::<T>,
        period: period_inline::<T>,
        drop: if std::mem::needs_drop::<T>() {
            Some(drop_inline::<T>)
        } else {
            None
        },
        #[cfg(all(test, not(loom), not(shuttle)))]
        inline: true,
    };
    const BOXED: VTable = VTable {
        fire: fire_boxed::<T>,
        period: period_boxed::<T>,
        drop: Some(drop_boxed::<T>),
        #[cfg(all(test, not(loom), not(shuttle)))]
        inline: false,
    };
}

/// # Safety
/// `buffer` holds a live `T` (an inline callback's); the caller has the
/// callback exclusively.
unsafe fn fire_inline<T: Fire>(buffer: *mut u8, expiry: &mut Expiry<'_>) {
    // SAFETY: per the contract; in bounds and aligned (safety argument 2).
    unsafe { (*buffer.cast::<T>()).fire(expiry) }
}

/// # Safety
/// `buffer` holds a live `T`, which nothing mutates meanwhile.
unsafe fn period_inline<T: Fire>(buffer: *mut u8) -> (u64, bool) {
    // SAFETY: as in `fire_inline`; a shared borrow.
    unsafe { (*buffer.cast::<T>()).period() }
}

/// # Safety
/// As `fire_inline`; the value is not used again.
unsafe fn drop_inline<T: Fire>(buffer: *mut u8) {
    // SAFETY: per the contract.
    unsafe { buffer.cast::<T>().drop_in_place() }
}

/// The box a boxed callback's buffer points to.
///
/// # Safety
/// `buffer` holds the pointer `Box::into_raw` gave for a `Box<T>` that is
/// still live.
unsafe fn boxed_value<T>(buffer: *mut u8) -> *mut T {
    // SAFETY: per the contract; aligned (safety argument 2).
    unsafe { buffer.cast::<*mut T>().read() }
}

/// # Safety
/// As `boxed_value`; the caller has the callback exclusively.
unsafe fn fire_boxed<T: Fire>(buffer: *mut u8, expiry: &mut Expiry<'_>) {
    // SAFETY: per the contract, the box is live and this is its only user.
    unsafe { (*boxed_value::<T>(buffer)).fire(expiry) }
}

/// # Safety
/// As `boxed_value`, and nothing mutates the value meanwhile.
unsafe fn period_boxed<T: Fire>(buffer: *mut u8) -> (u64, bool) {
    // SAFETY: as in `fire_boxed`; a shared borrow.
    unsafe { (*boxed_value::<T>(buffer)).period() }
}

/// # Safety
/// As `fire_boxed`; the box is not used again.
unsafe fn drop_boxed<T: Fire>(buffer: *mut u8) {
    // SAFETY: per the contract, this is the `Box` that `Callback::new` leaked.
    drop(unsafe { Box::from_raw(boxed_value::<T>(buffer)) });
}

impl Callback {
    fn new<T: Fire + 'static>(value: T) -> Callback {
        let buffer = Buffer(UnsafeCell::new(MaybeUninit::uninit()));
        if fits::<T>() {
            // SAFETY: `fits`: in bounds and aligned; the buffer is new and
            // ours. The value is moved in, and dropped by `drop_inline`.
            unsafe { buffer.get().cast::<T>().write(value) };
            Callback {
                vtable: &VTables::<T>::INLINE,
                buffer,
            }
        } else {
            let raw = Box::into_raw(Box::new(value));
            // SAFETY: a pointer fits (the assertion above); the box is freed
            // by `drop_boxed`.
            unsafe { buffer.get().cast::<*mut T>().write(raw) };
            Callback {
                vtable: &VTables::<T>::BOXED,
                buffer,
            }
        }
    }

    /// Moves the callback in `from` into `cell`, which holds none, eight
    /// bytes at a time.
    ///
    /// The START that made the callback stored its value and vtable a word
    /// (or less) at a time a moment ago, and those stores may still wait in
    /// the store buffer. The compiler's own move reads 16 bytes at once,
    /// which a load of bytes from two pending stores cannot take from the
    /// buffer (no store forwarding): it waits for them to reach the cache,
    /// about a tenth of an owner's START + cancel (`examples/owner_ops.rs
    /// start-cancel` and `sleep-poll-drop` under `perf`). One volatile
    /// load per word (the compiler may not merge them) matches each store;
    /// the callback travels from its START to here by reference, so this is
    /// its only move.
    ///
    /// # Safety
    /// `from` holds a live callback, which the caller neither uses nor
    /// drops after this: it lives in `cell` alone from here on.
    #[inline(always)]
    pub(crate) unsafe fn move_into(from: &mut ManuallyDrop<Callback>, cell: &mut Option<Callback>) {
        debug_assert!(cell.is_none());
        // SAFETY: forwarded.
        unsafe { Self::copy_words(from, cell) }
    }

    /// [`move_into`](Self::move_into) for a `cell` that may hold a
    /// callback: hands that one back if it needs a drop; one that needs
    /// none ends here (no code runs) and is overwritten, not moved out.
    ///
    /// # Safety
    /// As for [`move_into`](Self::move_into).
    #[inline(always)]
    pub(crate) unsafe fn replace_into(
        from: &mut ManuallyDrop<Callback>,
        cell: &mut Option<Callback>,
    ) -> Option<Callback> {
        // SAFETY: the cell is overwritten next, before anything reads it.
        let previous = unsafe { read_out_to_drop(cell) };
        // SAFETY: forwarded; what the cell held is in `previous` or needs
        // no drop.
        unsafe { Self::copy_words(from, cell) };
        previous
    }

    /// # Safety
    /// As for [`move_into`](Self::move_into), but `cell`'s old content is
    /// overwritten without a drop.
    #[inline(always)]
    unsafe fn copy_words(from: &mut ManuallyDrop<Callback>, cell: &mut Option<Callback>) {
        // SAFETY: a callback's place and an `Option<Callback>`'s are both
        // callback-sized; the value now lives in `cell` alone (the caller's
        // contract).
        unsafe {
            copy_by_words::<false>(
                (&**from as *const Callback).cast(),
                (cell as *mut Option<Callback>).cast(),
            )
        }
    }

    /// Runs the user's closure.
    pub(crate) fn fire(&mut self, expiry: &mut Expiry<'_>) {
        // SAFETY: the vtable belongs to the buffer's content (safety
        // argument 1), and `&mut self` is exclusive.
        unsafe { (self.vtable.fire)(self.buffer.get(), expiry) }
    }

    /// `(period in ticks, burst)`; a period of 0 means one-shot.
    pub(crate) fn period(&self) -> (u64, bool) {
        // SAFETY: as in `fire`; `&self` rules out a mutation meanwhile.
        unsafe { (self.vtable.period)(self.buffer.get()) }
    }

    /// Whether dropping the callback runs any code (a boxed value, or an
    /// inline one with a `Drop` somewhere inside).
    #[inline]
    pub(crate) fn needs_drop(&self) -> bool {
        self.vtable.drop.is_some()
    }

    /// Whether the value is kept in the callback itself (not boxed).
    #[cfg(all(test, not(loom), not(shuttle)))]
    pub(crate) fn is_inline(&self) -> bool {
        self.vtable.inline
    }
}

/// Words in a callback ([`Callback::move_into`]).
const WORDS: usize = size_of::<Callback>() / 8;
const _: () = assert!(size_of::<Callback>() == WORDS * 8 && align_of::<Callback>() == 8);
// `None` is the vtable's null: an `Option<Callback>` is a `Callback`'s
// bytes, so `move_into` may write one as the other.
const _: () = assert!(size_of::<Option<Callback>>() == size_of::<Callback>());

/// Copies a callback's bytes from `from` to `to`, one word at a time, each
/// read with a volatile load so that the compiler keeps the loads
/// word-sized (see [`Callback::move_into`] for why); the stores are
/// volatile too with `VOLATILE_STORES`. Bytes are copied as they are,
/// uninitialised ones and a pointer's provenance included (`MaybeUninit`).
///
/// # Safety
/// `from` and `to` are each valid for `WORDS` words (a `Callback` or an
/// `Option<Callback>`, which have the same bytes: the vtable is the niche
/// that tells `None`) and aligned to 8 (the assertions by `WORDS`); the
/// caller decides which of the two places the value lives in afterwards.
#[inline(always)]
unsafe fn copy_by_words<const VOLATILE_STORES: bool>(
    from: *const MaybeUninit<u64>,
    to: *mut MaybeUninit<u64>,
) {
    for word in 0..WORDS {
        // SAFETY: the caller's contract.
        unsafe {
            let value = from.add(word).read_volatile();
            if VOLATILE_STORES {
                to.add(word).write_volatile(value);
            } else {
                to.add(word).write(value);
            }
        }
    }
}

/// The callback in `cell`, read out, if ending it runs code (a drop); `None`
/// if it needs no drop (or there is none), whose end is then the
/// overwriting of its bytes.
///
/// # Safety
/// The caller overwrites `cell` before anything reads or drops it again
/// (after a read-out its bytes belong to the returned callback).
#[inline(always)]
unsafe fn read_out_to_drop(cell: &Option<Callback>) -> Option<Callback> {
    match cell {
        // SAFETY: the caller's contract: these bytes are not used again.
        Some(callback) if callback.needs_drop() => Some(unsafe { std::ptr::read(callback) }),
        _ => None,
    }
}

/// Ends the callback kept in `cell`, leaving `None`: one whose captures
/// need no drop ends right here (no user code runs, `false`); one that
/// needs a drop is moved to `to` (`true`), a place of the caller's where it
/// is dropped with panics caught (`shard::drop_captures_at`) and never
/// moved out of.
///
/// Moved one word at a time, as [`Callback::copy_words`] stored it, often
/// just before (a START and its cancel): a load wider than those stores
/// waits for them to reach the cache instead of taking their values from
/// the store buffer, and the compiler's own moves of a callback (from the
/// cell to a local, from the local to an argument) load 16 bytes across
/// 8-byte stores. `owner_ops sleep-poll-drop` under `perf`: before this,
/// two such loads took two fifths of the cancel's samples.
///
/// # Safety
/// `to` is valid for writing a `Callback`; when this returns `true` the
/// caller drops it there exactly once.
#[inline(always)]
pub(crate) unsafe fn take_to_drop_into(cell: &mut Option<Callback>, to: *mut Callback) -> bool {
    if !cell.as_ref().is_some_and(Callback::needs_drop) {
        // Nothing to run: overwriting the bytes ends it.
        // SAFETY: a callback that needs no drop may be forgotten.
        unsafe { std::ptr::write(cell, None) };
        return false;
    }
    // SAFETY: both places are callback-sized (the caller's contract for
    // `to`); the value lives in `to` from here on.
    unsafe { copy_by_words::<true>((cell as *const Option<Callback>).cast(), to.cast()) };
    // SAFETY: the callback's bytes belong to `to` now.
    unsafe { std::ptr::write(cell, None) };
    true
}

impl Drop for Callback {
    fn drop(&mut self) {
        if let Some(drop) = self.vtable.drop {
            // SAFETY: as in `fire`; the value is not used again (this is the
            // callback's end).
            unsafe { drop(self.buffer.get()) }
        }
    }
}

/// The callback for `f` on a timer with `period` ticks (0: one-shot):
/// inline if it fits, else boxed.
pub(crate) fn new<F>(f: F, period: u64, burst: bool) -> Callback
where
    F: FnMut(&mut Expiry<'_>) + Send + 'static,
{
    match (period, burst) {
        (0, _) => Callback::new(OneShot(f)),
        (_, false) => Callback::new(Periodic::<F, false> { f, period }),
        (_, true) => Callback::new(Periodic::<F, true> { f, period }),
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

/// A periodic timer's closure and period; `BURST` in the type, not a
/// field, so that a 16-byte closure and its period fit inline.
struct Periodic<F, const BURST: bool> {
    f: F,
    period: u64,
}

impl<F: FnMut(&mut Expiry<'_>) + Send, const BURST: bool> Fire for Periodic<F, BURST> {
    fn fire(&mut self, expiry: &mut Expiry<'_>) {
        (self.f)(expiry)
    }

    fn period(&self) -> (u64, bool) {
        (self.period, BURST)
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

    /// Uses a closure's captures.
    fn keep<T>(value: T) {
        std::hint::black_box(value);
    }

    #[test]
    fn a_callback_is_four_words() {
        assert_eq!(std::mem::size_of::<Option<Callback>>(), 8 + INLINE);
    }

    #[test]
    fn a_closure_that_captures_nothing_is_inline() {
        let a = new(|_| {}, 0, false);
        let b = new(|_| {}, 0, false);
        assert!(a.is_inline() && b.is_inline());
        assert_eq!(a.period(), (0, false));
        drop((a, b));
    }

    /// Only a callback whose end runs code asks for a drop call: plain
    /// captures kept inline need none, a capture with a `Drop` inside does,
    /// and so does every boxed callback (its box is freed).
    #[test]
    fn only_captures_that_need_dropping_ask_for_a_drop_call() {
        let (x, y, z) = (1u64, 2u64, 3u64);
        let arc = Arc::new(5u64);
        let nothing = new(|_| {}, 0, false);
        let plain = new(move |_| keep((x, y)), 0, false);
        let counted = new(move |_| keep((&arc, x)), 0, false);
        let boxed_plain = new(move |_| keep((x, y, z)), 0, false);
        assert!(!nothing.needs_drop() && !plain.needs_drop());
        assert!(counted.is_inline() && counted.needs_drop());
        assert!(!boxed_plain.is_inline() && boxed_plain.needs_drop());
    }

    /// What is kept inline and what is boxed, by size and alignment.
    #[test]
    fn small_captures_are_inline_and_larger_ones_boxed() {
        let (x, y, z, w) = (1u64, 2u64, 3u64, 4u64);
        let arc = Arc::new(5u64);
        let sixteen = new(move |_| keep((x, y)), 0, false);
        let arc_and_index = new(move |_| keep((&arc, x)), 0, false);
        let twenty_four = new(move |_| keep((x, y, z)), 0, false);
        let thirty_two = new(move |_| keep((x, y, z, w)), 0, false);
        #[repr(align(16))]
        #[derive(Clone, Copy, Debug)]
        struct Aligned(#[allow(dead_code)] u8);
        let aligned = Aligned(1);
        let over_aligned = new(move |_| keep(aligned), 0, false);
        let periodic_eight = new(move |_| keep(x), 5, true);
        let periodic_sixteen = new(move |_| keep((x, y)), 5, false);
        assert!(sixteen.is_inline());
        assert!(arc_and_index.is_inline());
        assert!(!twenty_four.is_inline());
        assert!(!thirty_two.is_inline());
        assert!(!over_aligned.is_inline());
        assert!(periodic_eight.is_inline());
        assert_eq!(periodic_eight.period(), (5, true));
        assert!(!periodic_sixteen.is_inline());
        assert_eq!(periodic_sixteen.period(), (5, false));
    }

    #[test]
    fn a_periodic_callback_keeps_its_period_beside_the_closure() {
        let periodic = new(|_| {}, 7, true);
        assert_eq!(periodic.period(), (7, true));
        let captured = Arc::new(());
        let capturing = new(
            move |_| {
                let _ = &captured;
            },
            3,
            false,
        );
        assert_eq!(capturing.period(), (3, false));
        let big = [1u64; 8];
        let boxed = new(move |_| keep(big), 9, true);
        assert!(!boxed.is_inline());
        assert_eq!(boxed.period(), (9, true));
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
        let callback = new(
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
        let callback = new(
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

    /// A boxed value's captures are dropped once too, and its box freed
    /// (miri reports a leak or a double free otherwise).
    #[test]
    fn boxed_captures_are_dropped_once_with_the_callback() {
        let shared = Arc::new(());
        let held = shared.clone();
        let padding = [7u64; 4];
        let callback = new(
            move |_| {
                let _ = (&held, padding);
            },
            0,
            false,
        );
        assert!(!callback.is_inline());
        assert_eq!(Arc::strong_count(&shared), 2);
        drop(callback);
        assert_eq!(Arc::strong_count(&shared), 1);
    }

    /// An inline value moves with its callback (as it does when the owner
    /// takes it out of the slot to run it and puts a periodic one back),
    /// and a captured `Cell` may be read through `period`'s `&self` while
    /// the closure mutates it when it fires.
    #[test]
    fn inline_values_move_with_the_callback() {
        use std::cell::Cell;
        // A static, so that the capture (the `Cell`) and the period fit.
        static FIRES: AtomicUsize = AtomicUsize::new(0);
        let (service, mut guard, clock) = service();
        let count = Cell::new(0u64);
        let callback = new(
            move |_| {
                count.set(count.get() + 1);
                FIRES.fetch_add(count.get() as usize, Ordering::SeqCst);
            },
            4,
            false,
        );
        assert!(callback.is_inline());
        let mut moved = vec![Some(callback)];
        let mut callback = moved.pop().flatten().unwrap();
        assert_eq!(callback.period(), (4, false));
        let _timer = service
            .start(Duration::from_millis(1), move |expiry| {
                // Fire the moved callback twice from a real expiry.
                callback.fire(expiry);
                assert_eq!(callback.period(), (4, false));
                callback.fire(expiry);
            })
            .unwrap();
        clock.advance(Duration::from_millis(5));
        guard.poll().unwrap();
        // 1 for the first fire, 2 for the second: the count survived moves.
        assert_eq!(FIRES.load(Ordering::SeqCst), 3);
    }

    /// Both kinds fire through the service: closures kept inline (one that
    /// captures nothing, one that captures a counter, a periodic one) and
    /// boxed ones (a one-shot and a periodic one with 40-byte captures).
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
        let big = [1usize; 4];
        let counted = fires.clone();
        let _d = service
            .start(Duration::from_millis(1), move |_| {
                counted.fetch_add(big.iter().sum::<usize>() * 100, Ordering::SeqCst);
            })
            .unwrap();
        let counted = fires.clone();
        let periodic_fires = Arc::new(AtomicUsize::new(0));
        let periodic_counted = periodic_fires.clone();
        let _e = service
            .start_periodic(Duration::from_millis(1), move |_| {
                let _ = (&counted, big);
                periodic_counted.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
        clock.advance(Duration::from_millis(5));
        guard.poll().unwrap();
        assert_eq!(fires.load(Ordering::SeqCst), 401);
        assert!(periodic_fires.load(Ordering::SeqCst) >= 1);
        let statics = STATIC_FIRES.load(Ordering::SeqCst);
        assert_eq!(statics % 10, 1, "the one-shot fired once");
        assert!(statics / 10 >= 1, "the periodic one fired");
    }
}
