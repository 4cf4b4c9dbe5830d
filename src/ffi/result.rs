//! `tw_result`: the result codes of the C ABI, with fixed numbers.

use std::ffi::{c_char, CStr};

use crate::TimerError;

/// What a `tw_` function did. The numbers are fixed: a code never changes
/// meaning and new codes only get new numbers. `tw_result_str` names each.
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum tw_result {
    /// Success.
    TW_OK = 0,
    /// A required pointer argument was NULL.
    TW_NULL_POINTER = 1,
    /// An argument was out of range: unknown flag bits, a misaligned pointer,
    /// a delay too large, a NULL callback where one is required.
    TW_INVALID_ARGUMENT = 2,
    /// The timer handle (or wheel key) names no live timer: it was freed,
    /// already expired or cancelled (wheel), or never existed. Nothing was
    /// touched.
    TW_STALE_HANDLE = 3,
    /// A range whose earliest end is after its latest end.
    TW_INVALID_RANGE = 4,
    /// A periodic timer with a zero period.
    TW_INVALID_PERIOD = 5,
    /// The service has been shut down.
    TW_SHUTDOWN = 6,
    /// A shard index not below the service's shard count.
    TW_SHARD_OUT_OF_RANGE = 7,
    /// The shard is owned by another thread (or by a driver thread: the
    /// service was not created with `TW_SERVICE_EMBEDDED`).
    TW_SHARD_CLAIMED = 8,
    /// Called from inside a callback of the very object being driven (a
    /// shard polled, or a wheel advanced or polled, from one of its own
    /// callbacks).
    TW_REENTRANT = 9,
    /// A service configuration out of range (shards 1..=4096 or 0 for the
    /// default, tick 10 us..=1 h or 0 for the default).
    TW_INVALID_CONFIG = 10,
    /// A shard used from a thread other than the one that claimed it.
    TW_WRONG_THREAD = 11,
    /// `tw_service_advance_clock` on a service without
    /// `TW_SERVICE_MANUAL_CLOCK`.
    TW_NOT_MANUAL_CLOCK = 12,
    /// tickwheel panicked (a bug in tickwheel): the panic was caught at the
    /// C boundary.
    TW_PANIC = 13,
    /// A `tw_entry` armed on another wheel: cancel it there first.
    TW_FOREIGN_ENTRY = 14,
    /// `TW_SERVICE_REALTIME_DRIVERS` was asked for and not permitted
    /// (real-time scheduling needs Linux, and `CAP_SYS_NICE` or an
    /// `RLIMIT_RTPRIO` of at least 1). No service was made and no thread is
    /// left running.
    TW_PRIORITY_DENIED = 15,
}

impl From<TimerError> for tw_result {
    fn from(error: TimerError) -> Self {
        match error {
            TimerError::StaleKey => tw_result::TW_STALE_HANDLE,
            TimerError::InvalidRange => tw_result::TW_INVALID_RANGE,
            TimerError::InvalidPeriod => tw_result::TW_INVALID_PERIOD,
            TimerError::Shutdown => tw_result::TW_SHUTDOWN,
            TimerError::ShardOutOfRange => tw_result::TW_SHARD_OUT_OF_RANGE,
            TimerError::ShardClaimed => tw_result::TW_SHARD_CLAIMED,
            TimerError::Reentrant => tw_result::TW_REENTRANT,
            TimerError::InvalidConfig => tw_result::TW_INVALID_CONFIG,
            TimerError::ForeignEntry => tw_result::TW_FOREIGN_ENTRY,
            TimerError::DriverPriority => tw_result::TW_PRIORITY_DENIED,
        }
    }
}

/// Every code with its name and description, indexed by number.
const TABLE: [(tw_result, &CStr, &CStr); 16] = [
    (tw_result::TW_OK, c"TW_OK", c"success"),
    (
        tw_result::TW_NULL_POINTER,
        c"TW_NULL_POINTER",
        c"a required pointer argument was NULL",
    ),
    (
        tw_result::TW_INVALID_ARGUMENT,
        c"TW_INVALID_ARGUMENT",
        c"an argument was out of range",
    ),
    (
        tw_result::TW_STALE_HANDLE,
        c"TW_STALE_HANDLE",
        c"the handle names no live timer",
    ),
    (
        tw_result::TW_INVALID_RANGE,
        c"TW_INVALID_RANGE",
        c"invalid range: earliest is after latest",
    ),
    (
        tw_result::TW_INVALID_PERIOD,
        c"TW_INVALID_PERIOD",
        c"invalid period: a periodic timer needs a period of at least one tick",
    ),
    (
        tw_result::TW_SHUTDOWN,
        c"TW_SHUTDOWN",
        c"the timer service has been shut down",
    ),
    (
        tw_result::TW_SHARD_OUT_OF_RANGE,
        c"TW_SHARD_OUT_OF_RANGE",
        c"shard index out of range",
    ),
    (
        tw_result::TW_SHARD_CLAIMED,
        c"TW_SHARD_CLAIMED",
        c"the shard is owned by another thread",
    ),
    (
        tw_result::TW_REENTRANT,
        c"TW_REENTRANT",
        c"called from inside a callback of the object being driven",
    ),
    (
        tw_result::TW_INVALID_CONFIG,
        c"TW_INVALID_CONFIG",
        c"invalid service configuration (shards 0..=4096, tick 0 or 10us..=1h)",
    ),
    (
        tw_result::TW_WRONG_THREAD,
        c"TW_WRONG_THREAD",
        c"the shard was claimed by another thread",
    ),
    (
        tw_result::TW_NOT_MANUAL_CLOCK,
        c"TW_NOT_MANUAL_CLOCK",
        c"the service does not use a manual clock",
    ),
    (
        tw_result::TW_PANIC,
        c"TW_PANIC",
        c"tickwheel panicked (a bug); the panic was caught at the C boundary",
    ),
    (
        tw_result::TW_FOREIGN_ENTRY,
        c"TW_FOREIGN_ENTRY",
        c"the timer entry is armed on another wheel",
    ),
    (
        tw_result::TW_PRIORITY_DENIED,
        c"TW_PRIORITY_DENIED",
        c"the driver threads could not be given real-time priority (needs CAP_SYS_NICE or RLIMIT_RTPRIO)",
    ),
];

fn entry(result: u32) -> Option<&'static (tw_result, &'static CStr, &'static CStr)> {
    TABLE.get(usize::try_from(result).ok()?)
}

/// The name of a result code, such as `"TW_STALE_HANDLE"`, as a static
/// NUL-terminated string; `"TW_UNKNOWN"` for a number that is not a code.
/// Never returns NULL.
///
/// Takes a plain `uint32_t` so that any number is a valid argument.
///
/// Thread safety: may be called from any thread.
#[must_use]
#[no_mangle]
pub extern "C" fn tw_result_str(result: u32) -> *const c_char {
    let name = std::panic::catch_unwind(|| entry(result).map_or(c"TW_UNKNOWN", |e| e.1));
    name.unwrap_or(c"TW_UNKNOWN").as_ptr()
}

/// A one-line English description of a result code, as a static
/// NUL-terminated string. Never returns NULL.
///
/// Thread safety: may be called from any thread.
#[must_use]
#[no_mangle]
pub extern "C" fn tw_result_describe(result: u32) -> *const c_char {
    let text = std::panic::catch_unwind(|| {
        entry(result).map_or(c"unknown tickwheel result code", |e| e.2)
    });
    text.unwrap_or(c"unknown tickwheel result code").as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_indexed_by_number() {
        for (number, (code, name, _)) in TABLE.iter().enumerate() {
            assert_eq!(*code as u32 as usize, number);
            let name = name.to_str().unwrap();
            assert_eq!(format!("{code:?}"), name);
        }
        assert_eq!(TABLE.len(), tw_result::TW_PRIORITY_DENIED as usize + 1);
    }
}
