//! Scheme 1: an unordered list of timers, each holding the ticks it has left.

use std::fmt;

use super::arena::NIL;
use super::list::Lists;
use super::{debug_scheme, Handle, SchemeError, TimerScheme};

/// Scheme 1: START appends, STOP unlinks, and every tick decrements every
/// armed timer, firing those that reach zero. O(1) START and STOP, O(n) per
/// tick.
pub struct UnorderedList {
    now: u64,
    list: Lists,
}

impl UnorderedList {
    /// An empty list at tick 0.
    pub fn new() -> Self {
        UnorderedList {
            now: 0,
            list: Lists::new(1),
        }
    }
}

impl Default for UnorderedList {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for UnorderedList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_scheme(f, "UnorderedList", self.now, self.len())
    }
}

impl TimerScheme for UnorderedList {
    type Handle = Handle;
    const NAME: &'static str = "1-unordered-list";

    fn now(&self) -> u64 {
        self.now
    }

    fn len(&self) -> usize {
        self.list.len()
    }

    fn start(&mut self, interval: u64, id: u64) -> Result<Handle, SchemeError> {
        Ok(self.list.push_back(0, id, interval.max(1)))
    }

    fn stop(&mut self, handle: Handle) -> bool {
        self.list.stop(handle)
    }

    fn tick<F: FnMut(u64)>(&mut self, mut on_expiry: F) {
        self.now += 1;
        let mut index = self.list.head(0);
        while index != NIL {
            let next = self.list.next(index);
            let node = self.list.node_mut(index);
            node.time -= 1;
            if node.time == 0 {
                on_expiry(self.list.remove(index).id);
            }
            index = next;
        }
    }
}
