//! How often an owner that sleeps until its shard's next deadline wakes up,
//! when what it holds is idle timeouts far ahead and a heartbeat.
//!
//! `embedded`: one embedded shard on a manual clock, 1 ms ticks. The loop a
//! tickless server runs (ask the next deadline, sleep until it, poll), with
//! the sleep replaced by setting the clock to that deadline; it counts the
//! polls (wakeups), those that fired nothing, and the fires, over a minute of
//! the clock. Three loads: `N` idle timeouts due 60 s to 61 s from the start
//! (the window ends at their first deadline), one periodic 5 s heartbeat,
//! and both.
//!
//! `threads SECONDS`: the same `N` timeouts and the heartbeat on a
//! `Driver::Threads` service (real clock), counting the driver thread's
//! voluntary context switches (Linux: `/proc/self/task/*/status`) over
//! `SECONDS` of wall time.
//!
//! `churn OPS`: the price of the exact answer. `N` idle timeouts due 60 s
//! to 120 s out, restarted 60 s ahead in the order they were started, so
//! that every restart moves the earliest timer and the next question walks
//! a bucket (the worst case for the next-deadline memo); each restart is
//! followed by `next_deadline_tick`, as a loop that sleeps after every event
//! would. Prints the time per restart + question.
//!
//! With 100,000 timeouts: waking at the wheel's cascade points took 3
//! wakeups for the timeouts alone, 35 for the heartbeat (23 of them firing
//! nothing) and 35 for both, and a driver thread woke 12 times in 20 s for 4
//! beats; the exact answer (bounded to buckets of at most 65 timers, so the
//! crowded bucket of timeouts still wakes its owner at its cascades) takes
//! 3, 12 (none empty), 14 and 4. Unbounded it took 1, 12 and 12, but `churn`
//! cost about 870 us a question, against about 0.5 us bounded.
//!
//! `dense N SECONDS TICK_US...`: the opposite load, what a driver pays
//! for its tick when timers are due at every one: `N` periodic timers
//! with periods spread over 10-1000 ms (a timer due about every 20 µs with
//! 10,000) on a one-shard `Driver::Threads` service, once per tick length
//! given, in alternating rounds; counts the driver thread's wakeups and
//! its CPU time (Linux: `/proc/self/task/*/schedstat`) over `SECONDS`.
//!
//! ```sh
//! cargo run --release --example idle_wakeups -- dense 10000 5 1000 500
//! cargo run --release --example idle_wakeups -- embedded 100000
//! cargo run --release --example idle_wakeups -- threads 100000 20
//! cargo run --release --example idle_wakeups -- churn 100000 200000
//! ```

use std::time::Duration;

use tickwheel::{Clock, Driver, ManualClock, Timer, TimerService};

const MS: Duration = Duration::from_millis(1);
const MINUTE: Duration = Duration::from_secs(60);
const HEARTBEAT: Duration = Duration::from_secs(5);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map_or("embedded", String::as_str);
    let timers = args.get(1).map_or(100_000, |n| n.parse().expect("N"));
    match mode {
        "embedded" => {
            for (name, idle, heartbeat) in [
                ("idle timeouts", timers, false),
                ("heartbeat", 0, true),
                ("both", timers, true),
            ] {
                let (wakeups, empty, fired) = embedded(idle, heartbeat);
                println!(
                    "{name:>14} ({idle} idle, heartbeat {heartbeat}): \
                     {wakeups} wakeups, {empty} fired nothing, {fired} fires in 60 s"
                );
            }
        }
        "threads" => {
            let secs = args.get(2).map_or(20, |s| s.parse().expect("SECONDS"));
            threads(timers, secs);
        }
        "churn" => {
            let ops = args.get(2).map_or(200_000, |s| s.parse().expect("OPS"));
            churn(timers, ops);
        }
        "dense" => {
            let secs = args.get(2).map_or(5, |s| s.parse().expect("SECONDS"));
            let ticks: Vec<u64> = args[3.min(args.len())..]
                .iter()
                .map(|t| t.parse().expect("TICK_US"))
                .collect();
            let ticks = if ticks.is_empty() {
                vec![1000, 500]
            } else {
                ticks
            };
            for round in 0..3 {
                for &tick in &ticks {
                    dense(timers, secs, Duration::from_micros(tick), round);
                }
            }
        }
        other => panic!("unknown mode {other}"),
    }
}

/// `idle` timeouts due 60 s to 61 s from now, spread evenly.
fn idle_timeouts(service: &TimerService, idle: usize) -> Vec<Timer> {
    (0..idle as u64)
        .map(|i| {
            let spread = Duration::from_micros(i * 1_000_000 / idle as u64);
            service.start(MINUTE + spread, |_| {}).unwrap()
        })
        .collect()
}

/// The loop over a minute of the manual clock: (wakeups, of which fired
/// nothing, fires).
fn embedded(idle: usize, heartbeat: bool) -> (usize, usize, usize) {
    let clock = ManualClock::new();
    let service = TimerService::builder()
        .shards(1)
        .tick(MS)
        .driver(Driver::Embedded)
        .clock(Clock::Manual(clock.clone()))
        .build()
        .unwrap();
    let mut guard = service.claim_shard(0).unwrap();
    let _idle = idle_timeouts(&service, idle);
    let _beat = heartbeat.then(|| service.start_periodic(HEARTBEAT, |_| {}).unwrap());
    let (mut wakeups, mut empty, mut fired) = (0, 0, 0);
    while let Some(tick) = guard.next_deadline_tick() {
        let at = MS * u32::try_from(tick).unwrap();
        if at > MINUTE {
            break;
        }
        clock.set(at.max(clock.elapsed()));
        let ran = guard.poll().unwrap();
        wakeups += 1;
        empty += usize::from(ran == 0);
        fired += ran;
    }
    (wakeups, empty, fired)
}

/// Restarts of the earliest timer, each followed by a question.
fn churn(idle: usize, ops: usize) {
    let clock = ManualClock::new();
    let service = TimerService::builder()
        .shards(1)
        .tick(MS)
        .driver(Driver::Embedded)
        .clock(Clock::Manual(clock.clone()))
        .build()
        .unwrap();
    let mut guard = service.claim_shard(0).unwrap();
    let timers: Vec<Timer> = (0..idle as u64)
        .map(|i| {
            let spread = Duration::from_micros(i * 60_000_000 / idle as u64);
            service.start(MINUTE + spread, |_| {}).unwrap()
        })
        .collect();
    let mut sum = 0u64;
    let begin = std::time::Instant::now();
    for i in 0..ops {
        if i % idle == 0 {
            // A new round: move the clock a little so restarts go later.
            clock.advance(MS);
            guard.poll().unwrap();
        }
        timers[i % idle].restart(MINUTE * 2).unwrap();
        sum = sum.wrapping_add(guard.next_deadline_tick().unwrap_or(0));
    }
    let per = begin.elapsed() / u32::try_from(ops).unwrap();
    println!(
        "churn ({idle} timeouts): {per:?} per restart of the earliest + next_deadline_tick ({sum})"
    );
}

/// The driver thread's voluntary context switches over `secs` seconds.
fn threads(idle: usize, secs: u64) {
    let service = TimerService::builder()
        .shards(1)
        .tick(MS)
        .driver(Driver::Threads { pin: false })
        .build()
        .unwrap();
    let _idle = idle_timeouts(&service, idle);
    let _beat = service.start_periodic(HEARTBEAT, |_| {}).unwrap();
    // Let the starts settle before counting.
    std::thread::sleep(Duration::from_millis(200));
    let before = driver_switches();
    std::thread::sleep(Duration::from_secs(secs));
    let after = driver_switches();
    println!(
        "threads ({idle} idle, heartbeat 5 s): {} driver wakeups in {secs} s, {} fires",
        after.saturating_sub(before),
        service.stats().fired
    );
}

/// `n` periodic timers, periods spread over 10-1000 ms, on one driver
/// thread with ticks of `tick`: its wakeups and CPU time over `secs`.
fn dense(n: usize, secs: u64, tick: Duration, round: usize) {
    let service = TimerService::builder()
        .shards(1)
        .tick(tick)
        .driver(Driver::Threads { pin: false })
        .build()
        .unwrap();
    let _timers: Vec<Timer> = (0..n as u64)
        .map(|i| {
            let period = Duration::from_micros(10_000 + i * 990_000 / n as u64);
            service.start_periodic(period, |_| {}).unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let (switches, cpu) = (driver_switches(), driver_cpu());
    let fired = service.stats().fired;
    std::thread::sleep(Duration::from_secs(secs));
    let (switches, cpu) = (driver_switches() - switches, driver_cpu() - cpu);
    let fired = service.stats().fired - fired;
    println!(
        "dense round {round}, tick {tick:?}: {:.0} driver wakeups/s, driver CPU {:.2} % of a core, {:.0} fires/s",
        switches as f64 / secs as f64,
        cpu.as_secs_f64() * 100.0 / secs as f64,
        fired as f64 / secs as f64,
    );
    service.shutdown();
}

/// Time on a CPU of the thread named `tickwheel-0` (its `schedstat`).
fn driver_cpu() -> Duration {
    let stat = driver_file("schedstat");
    let nanos = stat.split_whitespace().next().and_then(|n| n.parse().ok());
    Duration::from_nanos(nanos.unwrap_or(0))
}

/// Voluntary context switches of the thread named `tickwheel-0`.
fn driver_switches() -> u64 {
    driver_file("status")
        .lines()
        .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// The file `name` of `/proc/self/task/*/` for the thread named
/// `tickwheel-0` (empty if there is none: not Linux, or no driver).
fn driver_file(name: &str) -> String {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return String::new();
    };
    tasks
        .flatten()
        .find(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|comm| comm.trim() == "tickwheel-0")
        })
        .and_then(|task| std::fs::read_to_string(task.path().join(name)).ok())
        .unwrap_or_default()
}
