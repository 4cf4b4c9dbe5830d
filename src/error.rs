//! The crate's error type.

use std::fmt;

/// Why a timer operation was refused. Nothing was changed when one is returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TimerError {
    /// The key or handle names a timer that has expired, been cancelled or
    /// been freed (or never existed).
    StaleKey,
    /// A range whose start is after its end.
    InvalidRange,
    /// A periodic timer with a zero period.
    InvalidPeriod,
    /// The service has been shut down.
    Shutdown,
    /// A shard index not below the service's shard count.
    ShardOutOfRange,
    /// The shard is owned by another thread (or a driver thread).
    ShardClaimed,
    /// A shard poll from inside one of that shard's own callbacks.
    Reentrant,
    /// A builder setting out of range (shards, tick) or not supported here.
    InvalidConfig,
    /// An [`EmbeddedWheel`](crate::EmbeddedWheel) entry armed on another
    /// wheel: it must be cancelled there first.
    ForeignEntry,
    /// The driver threads could not be given the priority asked for
    /// ([`DriverPriority`](crate::DriverPriority)): real-time scheduling
    /// needs `CAP_SYS_NICE` or an `RLIMIT_RTPRIO` at least that high, and
    /// Linux. Nothing was left running.
    DriverPriority,
}

impl fmt::Display for TimerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimerError::StaleKey => "stale timer key: the timer already expired or was cancelled",
            TimerError::InvalidRange => "invalid range: earliest is after latest",
            TimerError::InvalidPeriod => "invalid period: a periodic timer needs a period of at least one tick",
            TimerError::Shutdown => "the timer service has been shut down",
            TimerError::ShardOutOfRange => "shard index out of range",
            TimerError::ShardClaimed => "the shard is owned by another thread",
            TimerError::Reentrant => "a shard cannot be polled from inside one of its own callbacks",
            TimerError::InvalidConfig => "invalid service configuration (shards 1..=4096, tick 10us..=1h, driver threads not under loom)",
            TimerError::ForeignEntry => "the timer entry is armed on another wheel",
            TimerError::DriverPriority => "the driver threads could not be given real-time priority (needs Linux, and CAP_SYS_NICE or an RLIMIT_RTPRIO at least that high)",
        })
    }
}

impl std::error::Error for TimerError {}
