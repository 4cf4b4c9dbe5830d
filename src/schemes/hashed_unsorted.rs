//! Scheme 6: a hashed wheel whose slots hold unsorted lists with round counts.

use std::fmt;

use super::arena::NIL;
use super::list::Lists;
use super::{debug_scheme, Handle, SchemeError, TimerScheme};

/// Scheme 6: `slots` lists (a power of two); a timer due in `j` ticks goes to
/// the end of list `(now + j) % slots` with a count of the full turns of the
/// wheel it must wait, `(j - 1) / slots`. Each tick walks one list, firing the
/// timers whose count is zero and decrementing the others. O(1) START and
/// STOP; per tick O(n) in the worst case and O(n / slots) on average.
pub struct HashedWheelUnsorted {
    now: u64,
    shift: u32,
    mask: u64,
    slots: Lists,
}

impl HashedWheelUnsorted {
    /// An empty wheel at tick 0 with `slots` lists.
    ///
    /// # Panics
    /// When `slots` is not a power of two.
    pub fn new(slots: usize) -> Self {
        assert!(slots.is_power_of_two(), "slots must be a power of two");
        HashedWheelUnsorted {
            now: 0,
            shift: slots.trailing_zeros(),
            mask: slots as u64 - 1,
            slots: Lists::new(slots),
        }
    }
}

impl fmt::Debug for HashedWheelUnsorted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_scheme(f, "HashedWheelUnsorted", self.now, self.len())
    }
}

impl TimerScheme for HashedWheelUnsorted {
    type Handle = Handle;
    const NAME: &'static str = "6-hashed-unsorted";

    fn now(&self) -> u64 {
        self.now
    }

    fn len(&self) -> usize {
        self.slots.len()
    }

    fn start(&mut self, interval: u64, id: u64) -> Result<Handle, SchemeError> {
        let j = interval.max(1);
        // The slot of tick `now + j` is visited at `now + j - k * slots` for
        // every k >= 0 that is still in the future: `(j - 1) / slots` visits
        // come before the one at which the timer is due.
        let slot = (self.now.wrapping_add(j) & self.mask) as usize;
        let rounds = (j - 1) >> self.shift;
        Ok(self.slots.push_back(slot, id, rounds))
    }

    fn stop(&mut self, handle: Handle) -> bool {
        self.slots.stop(handle)
    }

    fn tick<F: FnMut(u64)>(&mut self, mut on_expiry: F) {
        self.now += 1;
        let mut index = self.slots.head((self.now & self.mask) as usize);
        while index != NIL {
            let next = self.slots.next(index);
            let node = self.slots.node_mut(index);
            if node.time == 0 {
                on_expiry(self.slots.remove(index).id);
            } else {
                node.time -= 1;
            }
            index = next;
        }
    }
}
