//! Scheme 7: tickwheel's hierarchical [`Wheel`] behind the [`TimerScheme`]
//! interface.

use std::fmt;

use super::{debug_scheme, SchemeError, TimerScheme};
use crate::wheel::{TimerKey, Wheel};

/// Scheme 7: an adapter running [`Wheel`] (with the request id as payload)
/// under the paper's START / STOP / per-tick model.
pub struct HierarchicalWheel {
    wheel: Wheel<u64>,
}

impl HierarchicalWheel {
    /// An empty wheel at tick 0.
    pub fn new() -> Self {
        HierarchicalWheel {
            wheel: Wheel::new(),
        }
    }

    /// The wheel inside.
    pub fn wheel(&self) -> &Wheel<u64> {
        &self.wheel
    }
}

impl Default for HierarchicalWheel {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for HierarchicalWheel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_scheme(f, "HierarchicalWheel", self.now(), self.len())
    }
}

impl TimerScheme for HierarchicalWheel {
    type Handle = TimerKey;
    const NAME: &'static str = "7-hierarchical";

    fn now(&self) -> u64 {
        self.wheel.now()
    }

    fn len(&self) -> usize {
        self.wheel.len()
    }

    fn start(&mut self, interval: u64, id: u64) -> Result<TimerKey, SchemeError> {
        Ok(self.wheel.insert(interval.max(1), id))
    }

    fn stop(&mut self, handle: TimerKey) -> bool {
        self.wheel.cancel(handle).is_some()
    }

    fn tick<F: FnMut(u64)>(&mut self, mut on_expiry: F) {
        let target = self.wheel.now() + 1;
        while let Some(expired) = self.wheel.poll(target) {
            on_expiry(expired.value);
        }
    }
}
