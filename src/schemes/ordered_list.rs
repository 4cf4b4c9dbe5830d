//! Scheme 2: one list ordered by absolute expiry time.

use std::fmt;

use super::arena::NIL;
use super::list::Lists;
use super::{deadline, debug_scheme, Handle, SchemeError, TimerScheme};

/// Scheme 2: START searches the ordered list for its place (from the rear,
/// which the paper notes is cheapest when intervals are similar), STOP unlinks
/// the doubly linked record, and a tick only looks at the head. O(n) START,
/// O(1) STOP and per tick.
pub struct OrderedList {
    now: u64,
    list: Lists,
}

impl OrderedList {
    /// An empty list at tick 0.
    pub fn new() -> Self {
        OrderedList {
            now: 0,
            list: Lists::new(1),
        }
    }
}

impl Default for OrderedList {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for OrderedList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_scheme(f, "OrderedList", self.now, self.len())
    }
}

impl TimerScheme for OrderedList {
    type Handle = Handle;
    const NAME: &'static str = "2-ordered-list";

    fn now(&self) -> u64 {
        self.now
    }

    fn len(&self) -> usize {
        self.list.len()
    }

    fn start(&mut self, interval: u64, id: u64) -> Result<Handle, SchemeError> {
        Ok(self.list.insert_sorted(0, id, deadline(self.now, interval)))
    }

    fn stop(&mut self, handle: Handle) -> bool {
        self.list.stop(handle)
    }

    fn tick<F: FnMut(u64)>(&mut self, mut on_expiry: F) {
        self.now += 1;
        loop {
            let head = self.list.head(0);
            if head == NIL || self.list.node(head).time > self.now {
                return;
            }
            on_expiry(self.list.remove(head).id);
        }
    }
}
