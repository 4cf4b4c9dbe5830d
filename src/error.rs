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
}

impl fmt::Display for TimerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimerError::StaleKey => "stale timer key: the timer already expired or was cancelled",
            TimerError::InvalidRange => "invalid range: earliest is after latest",
        })
    }
}

impl std::error::Error for TimerError {}
