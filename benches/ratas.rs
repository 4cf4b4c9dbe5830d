//! Ratas' own benchmark workload (jsnell/ratas, `src/test/test_benchmark.cc`),
//! re-expressed on [`Wheel`] and timed side by side with Ratas' binary.
//!
//! The workload: pairs of units exchange simulated packets over 300 s of
//! 20 µs ticks. Each unit has five timers: idle (pushed 60 s ahead on every
//! packet, so almost always a reschedule within its bucket), close (fires
//! twice), pace (10 ticks, always fires), request (about 1 s, always fires)
//! and request deadline (always cancelled). Pairs are created at random
//! times during the first second with glibc's `rand()` (same seed, same
//! call sequence as Ratas), and time moves by `ticks_to_next_event(100 ms)`.
//! The checksum, `total_rx_count`, is the number of packets received; it
//! must equal Ratas' for the same pair count and range setting.
//!
//! This file is our own code written from reading Ratas' benchmark; no
//! Ratas code is in this repository. To compare with Ratas, build Ratas'
//! benchmark from its own repository (`g++ -O3 src/test/test_benchmark.cc`)
//! and point `RATAS_BENCH` at the binary; `RATAS_PAIRS` (comma separated,
//! default `5,100,1000`), `RATAS_ROUNDS` (default 3) and `RATAS_RANGE`
//! (`yes` or `no`: only that setting) shape the run. `RATAS_KEEP=no` frees
//! each fired timer and inserts a new one when it is armed again (`advance`)
//! instead of keeping it under its key and re-arming it in place
//! (`advance_keep`, the default, as Ratas' events stay in their unit).
//! The C port on the C ABI is `ffi-tests/ratas_workload.c`; the script
//! `benches/ratas_compare.sh` runs all three.
//!
//! Timing is user CPU (`getrusage`), the figure Ratas' own benchmark
//! prints, in paired alternating runs: Ratas, tickwheel, Ratas, ...

use std::process::Command;

use tickwheel::{TimerKey, Wheel};

/// 20 µs ticks, as in Ratas' benchmark.
const TIME_MS: u64 = 50;
const TIME_S: u64 = 1000 * TIME_MS;
const RESPONSE_SIZE: i32 = 128;
const PACE_INTERVAL: u64 = 10;

/// The five timers of a unit; the wheel's payload is `unit * 8 + kind`.
#[derive(Clone, Copy)]
enum Kind {
    Idle = 0,
    Close = 1,
    Pace = 2,
    Request = 3,
    RequestDeadline = 4,
}

struct Unit {
    other: usize,
    alive: bool,
    tx_count: i32,
    rx_count: i32,
    pace_quota: i32,
    request_interval: u64,
    closing: bool,
    waiting_for_response: bool,
    /// The key of each kind: armed, or held after firing (with `keep`);
    /// `None` when never armed (or, without `keep`, fired).
    timers: [Option<TimerKey>; 5],
}

struct Workload {
    units: Vec<Unit>,
    in_range: bool,
    /// Fired timers stay held under their keys and are re-armed in place.
    keep: bool,
    total_rx_count: i64,
}

type W = Wheel<usize>;

/// Arms or moves the timer whose key `slot` keeps to `delay` ticks from
/// now (`payload` names it: `unit * 8 + kind`).
#[inline(always)]
fn schedule(wheel: &mut W, slot: &mut Option<TimerKey>, payload: usize, delay: u64) {
    match *slot {
        Some(key) => wheel
            .reschedule(key, delay)
            .expect("a tracked key is armed"),
        None => *slot = Some(wheel.insert(delay, payload)),
    }
}

/// Pushes unit `unit`'s idle timer 60 s (or, with range, 60 to 61 s) ahead.
#[inline(always)]
fn unidle(wheel: &mut W, in_range: bool, unit: usize, u: &mut Unit) {
    let slot = &mut u.timers[Kind::Idle as usize];
    if !in_range {
        return schedule(wheel, slot, unit * 8, 60 * TIME_S);
    }
    match *slot {
        Some(key) => {
            wheel
                .reschedule_in_range(key, 60 * TIME_S..=61 * TIME_S)
                .expect("a tracked key is armed");
        }
        None => {
            *slot = Some(
                wheel
                    .insert_in_range(60 * TIME_S..=61 * TIME_S, unit * 8)
                    .expect("valid range"),
            )
        }
    }
}

// Each step below reaches its unit once (`let u = &mut self.units[unit]`)
// and works through that reference, as Ratas' member functions and the C
// port's `struct unit *` do, rather than indexing the vector again for
// every field.
impl Workload {
    /// Arms or moves `unit`'s timer `kind` to `delay` ticks from now.
    #[inline(always)]
    fn schedule(&mut self, wheel: &mut W, unit: usize, kind: Kind, delay: u64) {
        let slot = &mut self.units[unit].timers[kind as usize];
        schedule(wheel, slot, unit * 8 + kind as usize, delay);
    }

    fn start(&mut self, wheel: &mut W, unit: usize, server: bool) {
        unidle(wheel, self.in_range, unit, &mut self.units[unit]);
        self.schedule(wheel, unit, Kind::Close, 180 * TIME_S);
        if !server {
            self.on_request(wheel, unit);
        }
    }

    fn transmit(&mut self, wheel: &mut W, unit: usize, count: i32) {
        self.units[unit].tx_count += count;
        self.deliver(wheel, unit);
    }

    fn deliver(&mut self, wheel: &mut W, unit: usize) {
        let u = &mut self.units[unit];
        unidle(wheel, self.in_range, unit, u);
        let amount = u.pace_quota.min(u.tx_count);
        u.pace_quota -= amount;
        u.tx_count -= amount;
        let (other, quota) = (u.other, u.pace_quota);
        self.receive(wheel, other, amount);
        if quota == 0 {
            self.schedule(wheel, unit, Kind::Pace, PACE_INTERVAL);
        }
    }

    fn receive(&mut self, wheel: &mut W, unit: usize, _count: i32) {
        // Ratas counts one packet per call whatever `count` is; so do we.
        let u = &mut self.units[unit];
        assert!(u.alive, "a packet for a deleted unit");
        unidle(wheel, self.in_range, unit, u);
        let deadline = &mut u.timers[Kind::RequestDeadline as usize];
        if u.waiting_for_response {
            let delay = PACE_INTERVAL * RESPONSE_SIZE as u64 * 2;
            schedule(
                wheel,
                deadline,
                unit * 8 + Kind::RequestDeadline as usize,
                delay,
            );
            u.waiting_for_response = false;
        }
        u.rx_count += 1;
        if u.rx_count % RESPONSE_SIZE == 0 {
            if let Some(key) = deadline.take() {
                wheel.cancel(key);
            }
            let request = &mut u.timers[Kind::Request as usize];
            let payload = unit * 8 + Kind::Request as usize;
            schedule(wheel, request, payload, u.request_interval);
        }
    }

    fn on_close(&mut self, wheel: &mut W, unit: usize) {
        if self.units[unit].closing {
            self.delete(wheel, unit);
        } else {
            self.units[unit].closing = true;
            self.schedule(wheel, unit, Kind::Close, 10 * TIME_S);
        }
    }

    fn on_pace(&mut self, wheel: &mut W, unit: usize) {
        if self.units[unit].tx_count != 0 {
            self.units[unit].pace_quota = 1;
            self.deliver(wheel, unit);
        }
    }

    fn on_request(&mut self, wheel: &mut W, unit: usize) {
        if !self.units[unit].closing {
            let delay = PACE_INTERVAL * RESPONSE_SIZE as u64 * 4;
            self.schedule(wheel, unit, Kind::RequestDeadline, delay);
            self.units[unit].waiting_for_response = true;
            let other = self.units[unit].other;
            self.transmit(wheel, other, RESPONSE_SIZE);
        }
    }

    fn on_request_deadline(&mut self, wheel: &mut W, unit: usize) {
        eprintln!("Request did not finish by deadline");
        let other = self.units[unit].other;
        self.delete(wheel, unit);
        self.delete(wheel, other);
    }

    /// Ratas' destructor: counts the unit's packets and cancels its timers.
    fn delete(&mut self, wheel: &mut W, unit: usize) {
        if !self.units[unit].alive {
            return;
        }
        self.units[unit].alive = false;
        self.total_rx_count += i64::from(self.units[unit].rx_count);
        for kind in 0..5 {
            if let Some(key) = self.units[unit].timers[kind].take() {
                wheel.cancel(key);
            }
        }
    }

    fn expired(&mut self, wheel: &mut W, payload: usize) {
        let (unit, kind) = (payload / 8, payload % 8);
        if !self.keep {
            self.units[unit].timers[kind] = None;
        }
        match kind {
            0 => self.delete(wheel, unit),
            1 => self.on_close(wheel, unit),
            2 => self.on_pace(wheel, unit),
            3 => self.on_request(wheel, unit),
            _ => self.on_request_deadline(wheel, unit),
        }
    }

    fn new_unit(&mut self, request_interval: u64) -> usize {
        self.units.push(Unit {
            other: usize::MAX,
            alive: true,
            tx_count: 0,
            rx_count: 0,
            pace_quota: 1,
            request_interval,
            closing: false,
            waiting_for_response: false,
            timers: [None; 5],
        });
        self.units.len() - 1
    }

    fn make_pair(&mut self, wheel: &mut W, request_interval: u64) {
        let server = self.new_unit(TIME_S);
        let client = self.new_unit(request_interval);
        self.units[server].other = client;
        self.units[client].other = server;
        self.start(wheel, server, true);
        self.start(wheel, client, false);
    }
}

/// Advances by `delta` ticks, handling what expires.
fn advance(wheel: &mut W, workload: &mut Workload, delta: u64) {
    let target = wheel.now() + delta;
    let keep = workload.keep;
    let on_expired =
        |wheel: &mut W, timer: tickwheel::Expired<usize>| workload.expired(wheel, timer.value);
    let done = if keep {
        wheel.advance_keep(target, usize::MAX, on_expired)
    } else {
        wheel.advance(target, usize::MAX, on_expired)
    };
    debug_assert!(done.complete);
}

/// Runs the workload; returns `total_rx_count`.
fn run(pairs: u32, in_range: bool, keep: bool) -> i64 {
    // SAFETY: `srand`/`rand` touch only libc's own generator state, and
    // this program calls them from one thread.
    unsafe { libc::srand(1) };
    let rand = || i64::from(unsafe { libc::rand() });
    let mut wheel = W::new();
    let mut workload = Workload {
        units: Vec::new(),
        in_range,
        keep,
        total_rx_count: 0,
    };
    let create_period = TIME_S;
    let per_iter = f64::from(pairs) / create_period as f64 * 2.0;
    let mut progress = 0.0f64;
    while wheel.now() < create_period {
        progress += (rand() as f64 * per_iter) / f64::from(libc::RAND_MAX);
        while progress > 1.0 {
            progress -= 1.0;
            let interval = TIME_S + (rand() % 100) as u64;
            workload.make_pair(&mut wheel, interval);
        }
        advance(&mut wheel, &mut workload, 1);
    }
    while wheel.now() < 300 * TIME_S {
        let ticks = wheel.ticks_to_next_event(100 * TIME_MS);
        advance(&mut wheel, &mut workload, ticks);
    }
    workload.total_rx_count
}

/// User CPU seconds of this process so far.
fn user_cpu() -> f64 {
    // SAFETY: `getrusage` fills the zeroed struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    usage.ru_utime.tv_sec as f64 + usage.ru_utime.tv_usec as f64 / 1e6
}

/// Runs Ratas' benchmark binary once: (user CPU seconds, checksum).
fn run_ratas(binary: &str, pairs: u32, in_range: bool) -> Result<(f64, i64), String> {
    let output = Command::new(binary)
        .env("BENCH_PAIR_COUNT", pairs.to_string())
        .env("BENCH_PRINT_TRACE", "no")
        .env(
            "BENCH_ALLOW_SCHEDULE_IN_RANGE",
            if in_range { "yes" } else { "no" },
        )
        .output()
        .map_err(|e| format!("cannot run {binary}: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    // Its last line is `name,pairs,yes|no,user_seconds,total_rx_count`.
    let line = stdout.lines().last().unwrap_or("");
    let fields: Vec<&str> = line.split(',').collect();
    match fields.as_slice() {
        [.., seconds, checksum] => Ok((
            seconds.parse().map_err(|_| format!("bad output: {line}"))?,
            checksum
                .parse()
                .map_err(|_| format!("bad output: {line}"))?,
        )),
        _ => Err(format!("unexpected output from {binary}: {line:?}")),
    }
}

fn main() {
    let full = std::env::args().any(|arg| arg == "--bench");
    let ratas = std::env::var("RATAS_BENCH").ok().filter(|s| !s.is_empty());
    let pairs: Vec<u32> = std::env::var("RATAS_PAIRS")
        .ok()
        .map(|s| s.split(',').filter_map(|p| p.trim().parse().ok()).collect())
        .unwrap_or_else(|| if full { vec![5, 100, 1000] } else { vec![5] });
    let rounds: usize = std::env::var("RATAS_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if full { 3 } else { 1 });
    let keep = std::env::var("RATAS_KEEP").as_deref() != Ok("no");
    match &ratas {
        Some(path) => println!("Ratas benchmark binary: {path}"),
        None => println!(
            "Ratas was not found (RATAS_BENCH is not set): only tickwheel's side runs.\n\
             To compare, build Ratas' own benchmark from its repository \
             (github.com/jsnell/ratas: g++ -O3 src/test/test_benchmark.cc -o ratas_bench)\n\
             and run again with RATAS_BENCH=/path/to/ratas_bench."
        ),
    }
    println!(
        "Ratas workload, user CPU seconds, median of {rounds} paired alternating runs \
         (fired timers {})",
        if keep {
            "kept and re-armed in place"
        } else {
            "freed and inserted again"
        }
    );
    println!(
        "| pairs | range | Ratas | tickwheel Wheel | Wheel / Ratas | checksum (Ratas / Wheel) |"
    );
    println!("|---:|:---:|---:|---:|---:|---|");
    for &p in &pairs {
        let ranges: &[bool] = match std::env::var("RATAS_RANGE").as_deref() {
            Ok("yes") => &[true],
            Ok("no") => &[false],
            _ => &[true, false],
        };
        for &in_range in ranges {
            let mut ours = Vec::new();
            let mut theirs = Vec::new();
            let mut sums = (None, 0);
            for _ in 0..rounds {
                if let Some(path) = &ratas {
                    match run_ratas(path, p, in_range) {
                        Ok((seconds, sum)) => {
                            theirs.push(seconds);
                            sums.0 = Some(sum);
                        }
                        Err(e) => println!("Ratas run failed: {e}"),
                    }
                }
                let before = user_cpu();
                sums.1 = run(p, in_range, keep);
                ours.push(user_cpu() - before);
            }
            let ours = median(&mut ours);
            let theirs = (!theirs.is_empty()).then(|| median(&mut theirs));
            let range = if in_range { "yes" } else { "no" };
            let (ratas_s, ratio, ratas_sum) = match (theirs, sums.0) {
                (Some(t), Some(sum)) => (
                    format!("{t:.3}"),
                    format!("{:.2}x", ours / t),
                    if sum == sums.1 {
                        format!("{sum} = {}", sums.1)
                    } else {
                        format!("{sum} != {} MISMATCH", sums.1)
                    },
                ),
                _ => ("not found".into(), "-".into(), format!("- / {}", sums.1)),
            };
            println!("| {p} | {range} | {ratas_s} | {ours:.3} | {ratio} | {ratas_sum} |");
        }
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
