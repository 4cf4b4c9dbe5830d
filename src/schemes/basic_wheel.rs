//! Scheme 4: the basic timing wheel, one slot per tick up to MaxInterval.

use std::fmt;

use super::arena::NIL;
use super::list::Lists;
use super::{deadline, debug_scheme, Handle, SchemeError, TimerScheme};

/// Scheme 4: a circular array of `max_interval` slots, one per tick. START
/// links the timer into slot `(now + interval) % max_interval`, STOP unlinks
/// it, and each tick empties the next slot, every timer of which is due.
/// O(1) START, STOP and per tick.
///
/// # MaxInterval
/// The wheel only holds intervals up to `max_interval` ticks, and its memory is
/// proportional to `max_interval` whatever the number of timers (one list head
/// and tail, 8 bytes, per slot). [`start`](TimerScheme::start) refuses a longer
/// interval with [`SchemeError::IntervalTooLong`]; the paper suggests sending
/// such timers to another scheme, which is what scheme 7 does systematically.
pub struct BasicWheel {
    now: u64,
    max_interval: u64,
    slots: Lists,
}

impl BasicWheel {
    /// An empty wheel at tick 0 holding intervals of `1..=max_interval` ticks.
    ///
    /// # Panics
    /// When `max_interval` is 0 or larger than `u32::MAX`.
    pub fn new(max_interval: u64) -> Self {
        assert!(
            (1..=u64::from(u32::MAX)).contains(&max_interval),
            "BasicWheel: max_interval must be in 1..=u32::MAX"
        );
        BasicWheel {
            now: 0,
            max_interval,
            slots: Lists::new(max_interval as usize),
        }
    }

    /// The longest interval the wheel accepts.
    pub fn max_interval(&self) -> u64 {
        self.max_interval
    }

    fn slot(&self, tick: u64) -> usize {
        (tick % self.max_interval) as usize
    }
}

impl fmt::Debug for BasicWheel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_scheme(f, "BasicWheel", self.now, self.len())
    }
}

impl TimerScheme for BasicWheel {
    type Handle = Handle;
    const NAME: &'static str = "4-basic-wheel";

    fn now(&self) -> u64 {
        self.now
    }

    fn len(&self) -> usize {
        self.slots.len()
    }

    fn start(&mut self, interval: u64, id: u64) -> Result<Handle, SchemeError> {
        if interval > self.max_interval {
            return Err(SchemeError::IntervalTooLong {
                interval,
                max: self.max_interval,
            });
        }
        // An interval of exactly `max_interval` maps to the slot just emptied
        // for the current tick, which is next visited `max_interval` ticks on.
        let due = deadline(self.now, interval);
        Ok(self.slots.push_back(self.slot(due), id, due))
    }

    fn stop(&mut self, handle: Handle) -> bool {
        self.slots.stop(handle)
    }

    fn tick<F: FnMut(u64)>(&mut self, mut on_expiry: F) {
        self.now += 1;
        let slot = self.slot(self.now);
        loop {
            let head = self.slots.head(slot);
            if head == NIL {
                return;
            }
            let node = self.slots.remove(head);
            debug_assert_eq!(node.time, self.now);
            on_expiry(node.id);
        }
    }
}
