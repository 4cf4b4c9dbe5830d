//! Driver threads at a real-time priority (`Builder::driver_priority`):
//! refused settings, the threads' scheduling where it is permitted, and a
//! refused build that leaves no thread behind.
#![cfg(all(target_os = "linux", not(any(loom, shuttle))))]

use std::sync::mpsc;
use std::time::Duration;

use tickwheel::{Driver, DriverPriority, TimerError, TimerService};

#[path = "common/driver_threads.rs"]
mod driver_threads;
use driver_threads::driver_threads;

/// Set in the child process that `a_refused_priority_leaves_nothing_running`
/// runs as an unprivileged user.
const CHILD: &str = "TICKWHEEL_PRIORITY_CHILD";

/// No driver thread within a second, nor a moment after. A dropped or
/// refused service has joined its threads before it returns, but a joined
/// thread's `/proc/self/task` entry can outlive the join by a moment (the
/// kernel wakes the joiner as the thread exits, before it removes the
/// entry: about one run in thirty saw it), so the first look waits for
/// it; a thread left running never goes. The second look catches a thread
/// spawned but not yet named (a driver names itself once it runs).
fn no_driver_threads_left() -> bool {
    if !within_a_second(|| driver_threads().is_empty()) {
        return false;
    }
    std::thread::sleep(Duration::from_millis(100));
    driver_threads().is_empty()
}

/// Whether `holds` comes true within a second (looked at every millisecond).
fn within_a_second(holds: impl Fn() -> bool) -> bool {
    let waited = std::time::Instant::now();
    while !holds() {
        if waited.elapsed() > Duration::from_secs(1) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// How many threads this process has.
fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("procfs")
        .count()
}

fn realtime(priority: u8) -> Result<TimerService, TimerError> {
    TimerService::builder()
        .shards(2)
        .driver_priority(DriverPriority::RealTime(priority))
        .build()
}

#[test]
fn priorities_out_of_range_and_embedded_services_are_refused() {
    for priority in [0, 100, 255] {
        assert_eq!(
            realtime(priority).err(),
            Some(TimerError::InvalidConfig),
            "priority {priority}"
        );
    }
    let embedded = TimerService::builder()
        .driver(Driver::Embedded)
        .driver_priority(DriverPriority::RealTime(1))
        .build();
    assert_eq!(embedded.err(), Some(TimerError::InvalidConfig));
    let normal = TimerService::builder()
        .driver(Driver::Embedded)
        .driver_priority(DriverPriority::Normal)
        .build();
    assert!(normal.is_ok());
}

/// Where real-time scheduling is permitted (root, `CAP_SYS_NICE`, or an
/// `RLIMIT_RTPRIO`), every driver thread runs `SCHED_FIFO` at the priority
/// asked for and fires timers; where it is not, the build says so and no
/// driver thread is left running.
#[test]
fn real_time_drivers_run_at_their_priority_or_the_build_is_refused() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    match realtime(3) {
        Ok(service) => {
            // A driver names itself once it runs, which may be just after
            // `build` returns (counted 1 in about one run in thirty).
            within_a_second(|| driver_threads().len() == 2);
            let tids = driver_threads();
            assert_eq!(tids.len(), 2, "one driver thread per shard");
            for tid in tids {
                // SAFETY: plain queries of a thread of this process.
                let policy = unsafe { libc::sched_getscheduler(tid) };
                assert_eq!(policy, libc::SCHED_FIFO, "thread {tid}");
                let mut param = libc::sched_param { sched_priority: 0 };
                // SAFETY: as above; `param` is ours to write.
                assert_eq!(unsafe { libc::sched_getparam(tid, &mut param) }, 0);
                assert_eq!(param.sched_priority, 3, "thread {tid}");
            }
            let (fired, on_fire) = mpsc::channel();
            let _timer = service
                .start(Duration::from_millis(2), move |_| {
                    let _ = fired.send(());
                })
                .unwrap();
            on_fire
                .recv_timeout(Duration::from_secs(5))
                .expect("a real-time driver fires its timers");
            drop(service);
        }
        Err(TimerError::DriverPriority) => {}
        Err(other) => panic!("unexpected error {other:?}"),
    }
    assert!(no_driver_threads_left());
}

/// Refusal forced: this test runs itself again as an unprivileged user
/// (uid 65534, no capabilities, `RLIMIT_RTPRIO` 0), where the second
/// shard's driver is refused after the first one is already running: the
/// build must return `DriverPriority`, and stop and join that first thread.
#[test]
fn a_refused_priority_leaves_nothing_running() {
    if std::env::var_os(CHILD).is_some() {
        // The child: not permitted. It runs this test alone
        // (`--test-threads=1`), so no other thread comes or goes meanwhile.
        let before = thread_count();
        assert_eq!(realtime(1).err(), Some(TimerError::DriverPriority));
        // A joined thread's entry can outlive the join by a moment (see
        // `no_driver_threads_left`): one that never goes was left running.
        within_a_second(|| thread_count() == before);
        assert_eq!(thread_count(), before, "a refused build left threads");
        assert!(no_driver_threads_left(), "a refused build left threads");
        return;
    }
    // SAFETY: plain queries.
    if unsafe { libc::geteuid() } != 0 {
        // Unprivileged already: with no real-time allowance the build is
        // refused in this very process. (With one, the other test shows the
        // permitted side; nothing forces a refusal here.)
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `limit` is ours to write.
        assert_eq!(
            unsafe { libc::getrlimit(libc::RLIMIT_RTPRIO, &mut limit) },
            0
        );
        if limit.rlim_cur == 0 {
            assert_eq!(realtime(1).err(), Some(TimerError::DriverPriority));
            assert!(no_driver_threads_left());
        }
        return;
    }
    // Root: run the child as nobody. The test binary is copied where that
    // user can read and run it (a checkout may sit in a private directory).
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let dir = std::env::temp_dir().join(format!("tickwheel-priority-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.join("driver_priority");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let output = std::process::Command::new(&exe)
        .args([
            "--exact",
            "a_refused_priority_leaves_nothing_running",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .uid(65534)
        .gid(65534)
        .output()
        .expect("the child runs");
    let _ = std::fs::remove_dir_all(&dir);
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "the unprivileged child failed:\n{report}"
    );
    assert!(
        report.contains("1 passed"),
        "the child ran its test:\n{report}"
    );
}
