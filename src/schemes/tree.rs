//! Scheme 3: a tree-based priority queue, here an indexed binary min-heap.

use std::fmt;

use super::arena::Arena;
use super::{deadline, debug_scheme, Handle, SchemeError, TimerScheme};

struct Record {
    id: u64,
    /// Heap order: earliest deadline first, then the order of START.
    order: (u64, u64),
    /// Where the record sits in `heap`.
    position: u32,
}

/// Scheme 3: timers in a binary min-heap keyed by (deadline, start order).
/// Each record remembers its heap position, so STOP removes it directly
/// instead of marking it cancelled (which would let memory grow with
/// cancelled timers, as the paper warns). O(log n) START and STOP, O(1) per
/// tick plus O(log n) per expiry.
pub struct TimerHeap {
    now: u64,
    started: u64,
    records: Arena<Record>,
    /// Arena indices in heap order.
    heap: Vec<u32>,
}

impl TimerHeap {
    /// An empty heap at tick 0.
    pub fn new() -> Self {
        TimerHeap {
            now: 0,
            started: 0,
            records: Arena::new(),
            heap: Vec::new(),
        }
    }

    fn order(&self, position: usize) -> (u64, u64) {
        self.records.get(self.heap[position]).order
    }

    fn place(&mut self, position: usize, index: u32) {
        self.heap[position] = index;
        self.records.get_mut(index).position = position as u32;
    }

    fn sift_up(&mut self, mut position: usize) {
        let index = self.heap[position];
        let order = self.records.get(index).order;
        while position > 0 {
            let parent = (position - 1) / 2;
            if self.order(parent) <= order {
                break;
            }
            self.place(position, self.heap[parent]);
            position = parent;
        }
        self.place(position, index);
    }

    fn sift_down(&mut self, mut position: usize) {
        let index = self.heap[position];
        let order = self.records.get(index).order;
        loop {
            let left = 2 * position + 1;
            if left >= self.heap.len() {
                break;
            }
            let right = left + 1;
            let child = if right < self.heap.len() && self.order(right) < self.order(left) {
                right
            } else {
                left
            };
            if order <= self.order(child) {
                break;
            }
            self.place(position, self.heap[child]);
            position = child;
        }
        self.place(position, index);
    }

    /// Removes the record at heap `position` and returns its id.
    fn remove_at(&mut self, position: usize) -> u64 {
        let index = self.heap[position];
        let last = self.heap.pop().expect("heap is not empty");
        if position < self.heap.len() {
            self.place(position, last);
            self.sift_down(position);
            self.sift_up(self.records.get(last).position as usize);
        }
        self.records.remove(index).id
    }
}

impl Default for TimerHeap {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for TimerHeap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_scheme(f, "TimerHeap", self.now, self.len())
    }
}

impl TimerScheme for TimerHeap {
    type Handle = Handle;
    const NAME: &'static str = "3-heap";

    fn now(&self) -> u64 {
        self.now
    }

    fn len(&self) -> usize {
        self.heap.len()
    }

    fn start(&mut self, interval: u64, id: u64) -> Result<Handle, SchemeError> {
        let order = (deadline(self.now, interval), self.started);
        self.started += 1;
        let position = self.heap.len();
        let handle = self.records.insert(Record {
            id,
            order,
            position: position as u32,
        });
        self.heap.push(handle.index);
        self.sift_up(position);
        Ok(handle)
    }

    fn stop(&mut self, handle: Handle) -> bool {
        match self.records.resolve(handle) {
            Some(index) => {
                let position = self.records.get(index).position as usize;
                self.remove_at(position);
                true
            }
            None => false,
        }
    }

    fn tick<F: FnMut(u64)>(&mut self, mut on_expiry: F) {
        self.now += 1;
        while !self.heap.is_empty() && self.order(0).0 <= self.now {
            on_expiry(self.remove_at(0));
        }
    }
}
