//! Counters of the work a simulation did.

use std::time::Duration;

/// A snapshot of a simulation's counters, from [`Simulation::stats`].
///
/// The counters describe work done, so a rollback to a
/// [`Checkpoint`](super::Checkpoint) does not undo them: events run before a
/// rollback and run again after it are counted twice.
///
/// [`Simulation::stats`]: super::Simulation::stats
///
/// ```
/// use tickwheel::sim::Simulation;
///
/// let mut sim = Simulation::new();
/// sim.schedule(10, ());
/// sim.schedule(20, ());
/// sim.run(|_, ()| {}).unwrap();
/// let stats = sim.stats();
/// assert_eq!((stats.events_run, stats.events_scheduled, stats.peak_queue_len), (2, 2, 2));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct Stats {
    /// Events whose handler was called.
    pub events_run: u64,
    /// Events scheduled (from outside or from handlers).
    pub events_scheduled: u64,
    /// Events cancelled before they ran.
    pub events_cancelled: u64,
    /// Events checked by the verifying mode before they ran.
    pub events_verified: u64,
    /// The largest number of pending events seen at once.
    pub peak_queue_len: usize,
    /// Rollbacks to a checkpoint.
    pub rollbacks: u64,
    /// Wall-clock time spent inside the run methods (`step`, `run*`).
    pub busy: Duration,
}

impl Stats {
    /// Events run per second of [`busy`](Self::busy) time; 0 before any run.
    pub fn events_per_second(&self) -> f64 {
        let seconds = self.busy.as_secs_f64();
        if seconds > 0.0 {
            self.events_run as f64 / seconds
        } else {
            0.0
        }
    }
}
