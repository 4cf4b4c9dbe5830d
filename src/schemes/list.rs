//! Doubly linked timer lists threaded through one [`Arena`], as the paper
//! assumes for O(1) STOP: each record knows its list and both neighbours.
//! Schemes 1 and 2 use one list; the wheels (4, 5, 6) use one per slot.

use super::arena::{Arena, NIL};
use super::Handle;

/// One timer record.
pub(crate) struct Node {
    /// The caller's request id, handed back on expiry.
    pub(crate) id: u64,
    /// Scheme-specific time field: ticks remaining (1), absolute deadline
    /// (2, 4, 5) or remaining rounds of the wheel (6).
    pub(crate) time: u64,
    list: u32,
    prev: u32,
    next: u32,
}

#[derive(Clone, Copy)]
struct Ends {
    head: u32,
    tail: u32,
}

/// A fixed number of lists over one arena of records.
pub(crate) struct Lists {
    nodes: Arena<Node>,
    ends: Vec<Ends>,
}

impl Lists {
    pub(crate) fn new(lists: usize) -> Self {
        Lists {
            nodes: Arena::new(),
            ends: vec![
                Ends {
                    head: NIL,
                    tail: NIL
                };
                lists
            ],
        }
    }

    /// Records currently linked, over all lists.
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// First record of `list`, or [`NIL`].
    pub(crate) fn head(&self, list: usize) -> u32 {
        self.ends[list].head
    }

    /// The record after `index` in its list, or [`NIL`].
    pub(crate) fn next(&self, index: u32) -> u32 {
        self.nodes.get(index).next
    }

    pub(crate) fn node(&self, index: u32) -> &Node {
        self.nodes.get(index)
    }

    pub(crate) fn node_mut(&mut self, index: u32) -> &mut Node {
        self.nodes.get_mut(index)
    }

    /// Appends a record to `list`: O(1).
    pub(crate) fn push_back(&mut self, list: usize, id: u64, time: u64) -> Handle {
        let prev = self.ends[list].tail;
        self.link_after(list, prev, id, time)
    }

    /// Inserts a record into `list`, kept sorted by `time`, after every record
    /// with a time `<=` this one (so equal times stay in arrival order).
    ///
    /// The search runs from the tail: O(length of the list) in the worst
    /// case, O(1) when times arrive in increasing order.
    pub(crate) fn insert_sorted(&mut self, list: usize, id: u64, time: u64) -> Handle {
        let mut prev = self.ends[list].tail;
        while prev != NIL && self.nodes.get(prev).time > time {
            prev = self.nodes.get(prev).prev;
        }
        self.link_after(list, prev, id, time)
    }

    /// Links a new record into `list` right after `prev` (or first, if `NIL`).
    fn link_after(&mut self, list: usize, prev: u32, id: u64, time: u64) -> Handle {
        let next = if prev == NIL {
            self.ends[list].head
        } else {
            self.nodes.get(prev).next
        };
        let handle = self.nodes.insert(Node {
            id,
            time,
            list: list as u32,
            prev,
            next,
        });
        let index = handle.index;
        if prev == NIL {
            self.ends[list].head = index;
        } else {
            self.nodes.get_mut(prev).next = index;
        }
        if next == NIL {
            self.ends[list].tail = index;
        } else {
            self.nodes.get_mut(next).prev = index;
        }
        handle
    }

    /// Unlinks and frees the record at `index`: O(1).
    pub(crate) fn remove(&mut self, index: u32) -> Node {
        let node = self.nodes.remove(index);
        let list = node.list as usize;
        if node.prev == NIL {
            self.ends[list].head = node.next;
        } else {
            self.nodes.get_mut(node.prev).next = node.next;
        }
        if node.next == NIL {
            self.ends[list].tail = node.prev;
        } else {
            self.nodes.get_mut(node.next).prev = node.prev;
        }
        node
    }

    /// STOP: removes the record `handle` names. `false` when it is stale.
    pub(crate) fn stop(&mut self, handle: Handle) -> bool {
        match self.nodes.resolve(handle) {
            Some(index) => {
                self.remove(index);
                true
            }
            None => false,
        }
    }
}
