//! What a slot keeps of a timer's callback: the user's closure, and for a
//! periodic timer its period.
//!
//! The period lives beside the closure, inside the callback's own box, not
//! in the slot: most timers are one-shot, and every byte of the slot is paid
//! by every armed timer (see the slot layout in `arena.rs`). A one-shot timer
//! whose closure captures nothing needs no allocation at all.

use super::Expiry;

/// A timer's callback as the shard owner sees it.
pub(crate) trait Fire: Send {
    /// Runs the user's closure.
    fn fire(&mut self, expiry: &mut Expiry<'_>);

    /// `(period in ticks, burst)`; a period of 0 means one-shot.
    fn period(&self) -> (u64, bool);
}

/// The boxed callback stored in a slot.
pub(crate) type Callback = Box<dyn Fire>;

/// Boxes `f` for a timer with `period` ticks (0: one-shot).
pub(crate) fn boxed<F>(f: F, period: u64, burst: bool) -> Callback
where
    F: FnMut(&mut Expiry<'_>) + Send + 'static,
{
    if period == 0 {
        Box::new(OneShot(f))
    } else {
        Box::new(Periodic { f, period, burst })
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
