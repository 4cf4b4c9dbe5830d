//! What a built service keeps of its configuration (the driver, the hooks)
//! and what its hooks are given; the [`Builder`](super::Builder) makes it,
//! the service and its driver threads read it.

use std::any::Any;
use std::fmt;

use super::TimerId;
// Hooks are set once before the service exists and only read afterwards:
// std `Arc` (loom's cannot hold unsized closures).
use std::sync::Arc as HookArc;

/// Who runs the shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// One named thread per shard (`tickwheel-<n>`), tickless: it sleeps
    /// until its next deadline, is woken when a start lands earlier, and does
    /// not wake at all while nothing is armed. On Linux each asks for no
    /// timer slack, so its sleeps end at its deadlines rather than up to the
    /// kernel's default 50 µs later, and (at [`DriverPriority::Normal`]) for
    /// the kernel's shortest time slice, so that it gets a core as soon as
    /// it wakes.
    Threads {
        /// Pin shard `n`'s thread to CPU `n % cores` (Linux; ignored elsewhere).
        pin: bool,
    },
    /// The application's own threads claim shards with
    /// [`TimerService::claim_shard`](crate::TimerService::claim_shard) and poll them from their loops.
    Embedded,
}

/// How the operating system schedules the driver threads of
/// [`Driver::Threads`] ([`Builder::driver_priority`](crate::Builder::driver_priority)).
///
/// A shard's timers fire on its driver thread. With more busy threads than
/// cores, a driver whose deadline has come may wait for a scheduler slice
/// behind them, and its timers fire that much late. At normal priority a
/// driver asks for the shortest slice Linux (6.12 and later) grants, so
/// that waking it may take the core from a busy thread at once instead of
/// waiting for that thread's slice to end (its share of the CPU is
/// unchanged): `examples/churn_lateness.rs`, tickwheel's `Sleep` futures
/// on tokio's 2 busy workers with 2 drivers on 2 cores, measured a p99
/// lateness of 1.2-1.6 ms with the short slice against 1.9-2.4 ms without,
/// both with 1 ms ticks (whose rounding is up to 1 ms of it; with the
/// default 500 µs tick, 0.7-0.9 ms). With 4 busy churn threads and 4
/// arming threads beside the drivers, the p99 is about 1.5-2 ms, and about
/// 1 ms with real-time drivers (`BENCHMARKS.md`). A driver at a
/// real-time priority runs as soon as it wakes, ahead of every normal
/// thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum DriverPriority {
    /// Scheduled like any other thread of the process (the default), with
    /// the shortest time slice the kernel grants (Linux 6.12 and later, no
    /// privilege needed; the thread's nice value is kept).
    #[default]
    Normal,
    /// Linux: `SCHED_FIFO` at this priority, 1 (the lowest real-time
    /// priority, still ahead of every normal thread) ..= 99. Needs the
    /// `CAP_SYS_NICE` capability or an `RLIMIT_RTPRIO` of at least the
    /// priority; without it the build fails with
    /// [`TimerError::DriverPriority`](crate::TimerError::DriverPriority).
    ///
    /// The callbacks run at that priority too, so keep them short: a
    /// callback that runs on keeps normal threads off its core (the kernel
    /// leaves them only the 5 % of each second it reserves, by default,
    /// for threads that are not real-time). A driver thread never spins
    /// waiting for another thread for long: it sleeps, so a normal thread
    /// it waits for can run on its core.
    RealTime(u8),
}

/// Everything the service needs to tell a panic in user code to a hook.
#[derive(Debug)]
pub struct PanicReport {
    /// The timer whose callback panicked, or whose captures' `Drop` did.
    pub timer: TimerId,
    /// The timer's shard.
    pub shard: usize,
    /// Where the panic came from.
    pub site: PanicSite,
    /// The panic message, when it was a string.
    pub message: String,
}

/// Which user code panicked (see [`PanicReport`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PanicSite {
    /// The callback itself, on its shard's owner.
    Callback,
    /// The `Drop` of the callback's captures: wherever the callback was
    /// dropped (the owner's poll, a STOP or handle drop on the thread that
    /// made it, shutdown).
    Drop,
}

impl PanicReport {
    pub(crate) fn new(
        timer: TimerId,
        shard: usize,
        site: PanicSite,
        payload: Box<dyn Any + Send>,
    ) -> Self {
        let message = if let Some(text) = payload.downcast_ref::<&'static str>() {
            (*text).to_owned()
        } else if let Some(text) = payload.downcast_ref::<String>() {
            text.clone()
        } else {
            "<non-string panic payload>".to_owned()
        };
        PanicReport {
            timer,
            shard,
            site,
            message,
        }
    }
}

impl fmt::Display for PanicReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.site {
            PanicSite::Callback => "callback",
            PanicSite::Drop => "drop of the captures",
        };
        write!(
            f,
            "{what} of {:?} on shard {} panicked: {}",
            self.timer, self.shard, self.message
        )
    }
}

pub(crate) type PanicHook = HookArc<dyn Fn(&PanicReport) + Send + Sync>;
pub(crate) type Waker = HookArc<dyn Fn(usize) + Send + Sync>;

/// The settled configuration a service keeps.
pub(crate) struct Config {
    pub(crate) driver: Driver,
    pub(crate) panic_hook: Option<PanicHook>,
    pub(crate) waker: Option<Waker>,
    /// Driver threads lend their shards while they sleep (`lend_while_idle`).
    pub(crate) lend: bool,
    /// How the driver threads are scheduled (`driver_priority`).
    pub(crate) priority: DriverPriority,
}
