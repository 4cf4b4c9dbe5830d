//! Scheme 5: a hashed wheel whose slots hold lists sorted by expiry time.

use std::fmt;

use super::arena::NIL;
use super::list::Lists;
use super::{deadline, debug_scheme, Handle, SchemeError, TimerScheme};

/// Scheme 5: `slots` lists (a power of two); a timer due at tick `d` goes into
/// list `d % slots`, kept sorted by `d`. START searches that list (from the
/// rear), STOP unlinks, and each tick pops the due timers off the head of one
/// list. O(1) STOP and per tick; START is O(n) in the worst case and O(n /
/// slots) on average.
pub struct HashedWheelSorted {
    now: u64,
    mask: u64,
    slots: Lists,
}

impl HashedWheelSorted {
    /// An empty wheel at tick 0 with `slots` lists.
    ///
    /// # Panics
    /// When `slots` is not a power of two.
    pub fn new(slots: usize) -> Self {
        assert!(slots.is_power_of_two(), "slots must be a power of two");
        HashedWheelSorted {
            now: 0,
            mask: slots as u64 - 1,
            slots: Lists::new(slots),
        }
    }
}

impl fmt::Debug for HashedWheelSorted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_scheme(f, "HashedWheelSorted", self.now, self.len())
    }
}

impl TimerScheme for HashedWheelSorted {
    type Handle = Handle;
    const NAME: &'static str = "5-hashed-sorted";

    fn now(&self) -> u64 {
        self.now
    }

    fn len(&self) -> usize {
        self.slots.len()
    }

    fn start(&mut self, interval: u64, id: u64) -> Result<Handle, SchemeError> {
        let due = deadline(self.now, interval);
        Ok(self
            .slots
            .insert_sorted((due & self.mask) as usize, id, due))
    }

    fn stop(&mut self, handle: Handle) -> bool {
        self.slots.stop(handle)
    }

    fn tick<F: FnMut(u64)>(&mut self, mut on_expiry: F) {
        self.now += 1;
        let slot = (self.now & self.mask) as usize;
        loop {
            let head = self.slots.head(slot);
            if head == NIL || self.slots.node(head).time > self.now {
                return;
            }
            on_expiry(self.slots.remove(head).id);
        }
    }
}
