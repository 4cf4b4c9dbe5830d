//! The driver threads of this process, found by name (`tickwheel-<n>`) in
//! `/proc/self/task` (Linux).
//!
//! Each test file that wants it includes this file
//! (`#[path = "common/driver_threads.rs"] mod driver_threads;`).

#![allow(dead_code)]

/// The thread ids of this process's driver threads.
pub fn driver_threads() -> Vec<i32> {
    let mut tids = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").expect("procfs") {
        let task = task.expect("a task entry");
        let Ok(name) = std::fs::read_to_string(task.path().join("comm")) else {
            continue; // the thread ended meanwhile
        };
        if name.starts_with("tickwheel-") {
            tids.push(task.file_name().to_string_lossy().parse().expect("a tid"));
        }
    }
    tids
}
