//! Checkpoints: the whole scheduler state, saved and restored.
//!
//! A checkpoint is a clone of the event list (the wheel, the run of events at
//! the current time, and the verifier's record) taken through the wheel's
//! `Clone`: a few memcpys of the bucket arrays and one clone per pending
//! event. Restoring clones it back, so one checkpoint can be restored any
//! number of times.
//!
//! What a checkpoint leaves out is listed on [`Checkpoint`].

use std::fmt;

use super::queue::Queue;
use super::Simulation;

/// A saved scheduler state, from [`Simulation::checkpoint`].
///
/// What is *not* rolled back, on purpose:
///
/// * the sequence counter: events scheduled after a rollback get fresh
///   sequence numbers, so an [`EventId`](crate::sim::EventId) handed out in the
///   abandoned future is stale and cannot cancel an event of the replay. The
///   order of the replay is unaffected: every pending event of the checkpoint
///   has a smaller sequence number than anything scheduled after it, in the
///   first run as in the replay;
/// * the counters ([`Stats`](crate::sim::Stats)) and the recorded trace, which
///   describe work done;
/// * the model's own state, which lives outside the scheduler: checkpoint it
///   alongside (clone it, random number generator included).
///
/// ```
/// use tickwheel::sim::Simulation;
///
/// let mut sim = Simulation::new();
/// sim.schedule(1, "a");
/// sim.schedule(2, "b");
/// let saved = sim.checkpoint();
///
/// let mut first = Vec::new();
/// sim.run(|ctx, ev| first.push((ctx.now(), ev))).unwrap();
/// sim.restore(&saved);
/// let mut replay = Vec::new();
/// sim.run(|ctx, ev| replay.push((ctx.now(), ev))).unwrap();
/// assert_eq!(first, replay);
/// ```
#[derive(Clone)]
pub struct Checkpoint<E> {
    queue: Queue<E>,
    next_seq: u64,
}

impl<E> Checkpoint<E> {
    /// The simulation's time when the checkpoint was taken.
    pub fn now(&self) -> u64 {
        self.queue.now()
    }

    /// Number of events pending when the checkpoint was taken.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// `true` when no event was pending.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

impl<E> fmt::Debug for Checkpoint<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checkpoint")
            .field("now", &self.now())
            .field("pending", &self.len())
            .finish()
    }
}

impl<E: Clone> Simulation<E> {
    /// Saves the scheduler state: time, pending events (with their ids and
    /// order), and the verifier's record. See [`Checkpoint`] for what is
    /// not saved.
    pub fn checkpoint(&self) -> Checkpoint<E> {
        Checkpoint {
            queue: self.core.queue.clone(),
            next_seq: self.core.next_seq,
        }
    }

    /// Rolls the scheduler back to `checkpoint`: the pending events are
    /// those of the checkpoint, with their ids, and they run in the same
    /// order at the same times as after the checkpoint was taken. Ids of
    /// events scheduled since then are stale.
    ///
    /// Ids handed out before the checkpoint name the same events again (the
    /// events that ran since are pending once more). The guarantee that a
    /// stale id never reaches another event holds for checkpoints of this
    /// simulation; restoring another simulation's checkpoint works, but ids
    /// of the two simulations are not told apart.
    pub fn restore(&mut self, checkpoint: &Checkpoint<E>) {
        self.core.queue = checkpoint.queue.clone();
        self.core.next_seq = self.core.next_seq.max(checkpoint.next_seq);
        self.core.stop = false;
        self.core.stats.rollbacks += 1;
    }
}
