//! Storage shared by the reference schemes: a vector of nodes addressed by
//! generation-checked [`Handle`]s, so that STOP finds its timer in O(1) (the
//! paper's "pointer to the timer record") and a stale handle is refused.

use super::Handle;

/// "No node" marker for indices and links.
pub(crate) const NIL: u32 = u32::MAX;

struct Slot<N> {
    generation: u32,
    node: Option<N>,
}

/// Nodes of type `N` at stable indices, with a free list of vacant indices.
pub(crate) struct Arena<N> {
    slots: Vec<Slot<N>>,
    free: Vec<u32>,
    len: usize,
}

impl<N> Arena<N> {
    pub(crate) fn new() -> Self {
        Arena {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Stores `node` and returns its handle.
    pub(crate) fn insert(&mut self, node: N) -> Handle {
        self.len += 1;
        if let Some(index) = self.free.pop() {
            let slot = &mut self.slots[index as usize];
            slot.node = Some(node);
            return Handle {
                index,
                generation: slot.generation,
            };
        }
        let index = u32::try_from(self.slots.len())
            .ok()
            .filter(|&i| i != NIL)
            .expect("more than 2^32-1 timers in one reference scheme");
        self.slots.push(Slot {
            generation: 0,
            node: Some(node),
        });
        Handle {
            index,
            generation: 0,
        }
    }

    /// The index `handle` names, or `None` when it is stale.
    pub(crate) fn resolve(&self, handle: Handle) -> Option<u32> {
        let slot = self.slots.get(handle.index as usize)?;
        (slot.generation == handle.generation && slot.node.is_some()).then_some(handle.index)
    }

    pub(crate) fn get(&self, index: u32) -> &N {
        self.slots[index as usize]
            .node
            .as_ref()
            .expect("arena: vacant index")
    }

    pub(crate) fn get_mut(&mut self, index: u32) -> &mut N {
        self.slots[index as usize]
            .node
            .as_mut()
            .expect("arena: vacant index")
    }

    /// Frees an occupied index. Every handle to it becomes stale; an index
    /// whose generation would wrap is retired rather than reused.
    pub(crate) fn remove(&mut self, index: u32) -> N {
        let slot = &mut self.slots[index as usize];
        let node = slot.node.take().expect("arena: vacant index");
        self.len -= 1;
        if let Some(next) = slot.generation.checked_add(1) {
            slot.generation = next;
            self.free.push(index);
        }
        node
    }
}
