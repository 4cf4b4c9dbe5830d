//! Normal-priority driver threads ask the kernel for its shortest time
//! slice (Linux 6.12 and later), keeping the nice value they inherited
//! (`src/service/driver.rs`, `short_slice`). A process of its own: it
//! looks at every driver thread it can see.
#![cfg(all(target_os = "linux", not(any(loom, shuttle, miri))))]

use std::time::{Duration, Instant};

use tickwheel::{Driver, TimerService};

#[path = "common/driver_threads.rs"]
mod driver_threads;
use driver_threads::driver_threads;

/// `struct sched_attr` (`SCHED_ATTR_SIZE_VER1`).
#[repr(C)]
#[derive(Default, Debug)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
    sched_util_min: u32,
    sched_util_max: u32,
}

/// Thread `tid`'s policy, nice value and slice (`sched_runtime`, ns; 0
/// where the kernel keeps no slice of the thread's own).
fn sched_of(tid: i32) -> Option<(u32, i32, u64)> {
    let mut attr = SchedAttr::default();
    // SAFETY: `attr` is writable and as long as the size passed.
    let read = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            tid as libc::pid_t,
            &mut attr as *mut SchedAttr,
            std::mem::size_of::<SchedAttr>() as libc::c_uint,
            0 as libc::c_uint,
        )
    };
    (read == 0).then_some((attr.sched_policy, attr.sched_nice, attr.sched_runtime))
}

/// `true` on Linux 6.12 or later, where a normal thread's slice can be set.
fn kernel_sets_slices() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("procfs");
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|part| part.parse::<u32>().unwrap_or(0));
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    (major, minor) >= (6, 12)
}

#[test]
fn driver_threads_ask_for_a_short_slice_and_keep_their_nice_value() {
    // SAFETY: plain queries and a change of the calling thread's own nice
    // value (lowering its priority needs no privilege); driver threads
    // inherit it.
    let me = unsafe { libc::gettid() };
    let (policy, _, own_slice) = sched_of(me).expect("sched_getattr on this thread");
    assert_eq!(policy, libc::SCHED_OTHER as u32);
    // SAFETY: as above.
    let set = unsafe { libc::setpriority(libc::PRIO_PROCESS, me as libc::id_t, 5) };
    assert_eq!(set, 0, "setpriority: {}", std::io::Error::last_os_error());
    let service = TimerService::builder()
        .shards(2)
        .driver(Driver::Threads { pin: false })
        .build()
        .unwrap();
    let wanted = if kernel_sets_slices() {
        100_000
    } else {
        own_slice
    };
    // A driver sets its slice first thing when it runs; a thread just
    // spawned may not have run yet.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let drivers: Vec<_> = driver_threads()
            .into_iter()
            .filter_map(|tid| Some((tid, sched_of(tid)?)))
            .collect();
        if drivers.len() == 2
            && drivers
                .iter()
                .all(|&(_, attr)| attr == (libc::SCHED_OTHER as u32, 5, wanted))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "driver threads' (policy, nice, slice ns), by thread id: {drivers:?}; \
             wanted (SCHED_OTHER, 5, {wanted})"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // This thread's own slice is the kernel's default, not the drivers'.
    assert_ne!(
        sched_of(me).unwrap().2,
        100_000,
        "the slice is the driver threads' own"
    );
    drop(service);
}
