//! The simulation scheduler against a binary-heap event list: the hold model.
//!
//! The hold model is the classic event-list benchmark: the list holds `n`
//! events; each operation takes the earliest event and schedules one new
//! event at `now + delay`, so the list stays at `n`. Delays are uniform in
//! `[0, 2_000_000]` ticks (mean 1 s at 1 tick = 1 µs), so at 1k pending
//! events time advances ~1000 ticks per event (idle time for the wheel to
//! skip) and at 1M about one tick per event (dense).
//!
//! Contenders, each as a full event list (time, priority, FIFO order):
//!
//! * `sim`: [`tickwheel::sim::Simulation`], one event per handler call;
//! * `heap`: `std::collections::BinaryHeap` keyed by
//!   `(time, Reverse(priority), sequence)`, the textbook event list;
//! * `wheel`: the bare [`tickwheel::Wheel`] (no priorities), to show the
//!   cost of the simulation layer.
//!
//! Run with `cargo bench --bench sim` (add `-- --quick` for a short run).
//! After criterion's report it prints a table of ns per hold operation and
//! the heap/sim ratio, measured on 2 M operations per size. For instruction
//! counts of one list, see [`hold_count`].

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use tickwheel::sim::Simulation;
use tickwheel::Wheel;

/// Hold operations per criterion iteration.
const BATCH: u64 = 1_000;
/// Largest delay, ticks.
const MAX_DELAY: u64 = 2_000_000;

/// xorshift64*: cheap enough not to dominate a hold operation.
struct Rng(u64);

impl Rng {
    fn delay(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        // Multiply-shift maps 64 random bits onto [0, MAX_DELAY].
        ((u128::from(x) * u128::from(MAX_DELAY + 1)) >> 64) as u64
    }
}

/// A hold-model workload over one event list.
trait Hold {
    fn name() -> &'static str;
    fn filled(n: usize, rng: &mut Rng) -> Self;
    /// `count` hold operations.
    fn hold(&mut self, count: u64, rng: &mut Rng);
}

struct SimList(Simulation<u64>);

impl Hold for SimList {
    fn name() -> &'static str {
        "sim"
    }

    fn filled(n: usize, rng: &mut Rng) -> Self {
        let mut sim = Simulation::builder().capacity(n + 1).build();
        for i in 0..n as u64 {
            sim.schedule(rng.delay(), i);
        }
        SimList(sim)
    }

    fn hold(&mut self, count: u64, rng: &mut Rng) {
        let report = self
            .0
            .run_events(count, |ctx, payload| {
                ctx.schedule(rng.delay(), black_box(payload) + 1);
            })
            .expect("not verifying");
        debug_assert_eq!(report.events, count);
    }
}

/// `(time, Reverse(priority), sequence, payload)`, min-first.
type HeapEntry = Reverse<(u64, Reverse<i32>, u64, u64)>;

struct HeapList {
    heap: BinaryHeap<HeapEntry>,
    now: u64,
    seq: u64,
}

impl Hold for HeapList {
    fn name() -> &'static str {
        "heap"
    }

    fn filled(n: usize, rng: &mut Rng) -> Self {
        let mut list = HeapList {
            heap: BinaryHeap::with_capacity(n + 1),
            now: 0,
            seq: 0,
        };
        for i in 0..n as u64 {
            list.heap
                .push(Reverse((rng.delay(), Reverse(0), list.seq, i)));
            list.seq += 1;
        }
        list
    }

    fn hold(&mut self, count: u64, rng: &mut Rng) {
        for _ in 0..count {
            let Reverse((time, _, _, payload)) = self.heap.pop().expect("held list is never empty");
            self.now = time;
            self.heap.push(Reverse((
                time + rng.delay(),
                Reverse(0),
                self.seq,
                black_box(payload) + 1,
            )));
            self.seq += 1;
        }
    }
}

struct WheelList(Wheel<u64>);

impl Hold for WheelList {
    fn name() -> &'static str {
        "wheel"
    }

    fn filled(n: usize, rng: &mut Rng) -> Self {
        let mut wheel = Wheel::with_capacity(n + 1);
        for i in 0..n as u64 {
            wheel.insert(rng.delay(), i);
        }
        WheelList(wheel)
    }

    fn hold(&mut self, count: u64, rng: &mut Rng) {
        for _ in 0..count {
            let expired = self.0.poll(u64::MAX).expect("held list is never empty");
            self.0.insert(rng.delay(), black_box(expired.value) + 1);
        }
    }
}

fn sizes() -> &'static [usize] {
    if bench_mode() {
        &[1_000, 100_000, 1_000_000]
    } else {
        // `cargo test --benches` runs each benchmark once in a debug build.
        &[1_000]
    }
}

/// `cargo bench` passes `--bench`; `cargo test` does not.
fn bench_mode() -> bool {
    std::env::args().any(|arg| arg == "--bench")
}

fn bench_one<L: Hold>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    n: usize,
) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut list = L::filled(n, &mut rng);
    group.bench_with_input(BenchmarkId::new(L::name(), n), &n, |b, _| {
        b.iter(|| list.hold(BATCH, &mut rng));
    });
}

fn hold_model(c: &mut Criterion) {
    let mut group = c.benchmark_group("hold");
    group.throughput(Throughput::Elements(BATCH));
    for &n in sizes() {
        if n >= 100_000 {
            group.sample_size(20);
        }
        bench_one::<SimList>(&mut group, n);
        bench_one::<HeapList>(&mut group, n);
        bench_one::<WheelList>(&mut group, n);
    }
    group.finish();
}

/// Nanoseconds per hold operation: the best of three rounds of `ops`.
fn ns_per_op<L: Hold>(n: usize, ops: u64) -> f64 {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut list = L::filled(n, &mut rng);
    // Warm up: one pass over the list.
    list.hold(n as u64, &mut rng);
    let mut best = Duration::MAX;
    for _ in 0..3 {
        let started = Instant::now();
        list.hold(ops, &mut rng);
        best = best.min(started.elapsed());
    }
    best.as_nanos() as f64 / ops as f64
}

fn ratio_table() {
    const OPS: u64 = 2_000_000;
    println!("\nhold model, {OPS} operations per size (best of 3), ns per operation:");
    println!(
        "{:>10} {:>10} {:>10} {:>10} {:>12}",
        "pending", "sim", "heap", "wheel", "heap/sim"
    );
    for &n in sizes() {
        let sim = ns_per_op::<SimList>(n, OPS);
        let heap = ns_per_op::<HeapList>(n, OPS);
        let wheel = ns_per_op::<WheelList>(n, OPS);
        println!(
            "{n:>10} {sim:>10.1} {heap:>10.1} {wheel:>10.1} {:>11.2}x",
            heap / sim
        );
    }
}

/// `SIM_HOLD_COUNT=<list>,<pending>,<ops>`: fills one list (`sim`, `heap` or
/// `wheel`), warms it up with one pass, runs `ops` hold operations and
/// exits, without criterion. For instruction counts, which are repeatable
/// where wall times on a shared machine are not: run it under
/// `valgrind --tool=callgrind` with `ops` = 1 and with `ops` = 400000, and
/// divide the difference by 399999.
fn hold_count(spec: &str) {
    let parts: Vec<&str> = spec.split(',').collect();
    let parsed = match parts.as_slice() {
        [list, n, ops] => n
            .parse::<usize>()
            .ok()
            .zip(ops.parse::<u64>().ok())
            .map(|(n, ops)| (*list, n, ops)),
        _ => None,
    };
    let Some((list, n, ops)) = parsed else {
        panic!("SIM_HOLD_COUNT={spec:?}: expected <sim|heap|wheel>,<pending>,<ops>");
    };
    fn run<L: Hold>(n: usize, ops: u64) {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let mut list = L::filled(n, &mut rng);
        list.hold(n as u64, &mut rng);
        let started = Instant::now();
        list.hold(ops, &mut rng);
        let ns = started.elapsed().as_nanos() as f64 / ops.max(1) as f64;
        println!(
            "{} {n} pending, {ops} operations: {ns:.1} ns per operation",
            L::name()
        );
    }
    match list {
        "sim" => run::<SimList>(n, ops),
        "heap" => run::<HeapList>(n, ops),
        "wheel" => run::<WheelList>(n, ops),
        other => panic!("SIM_HOLD_COUNT: unknown list {other:?} (sim, heap or wheel)"),
    }
}

fn main() {
    if let Ok(spec) = std::env::var("SIM_HOLD_COUNT") {
        hold_count(&spec);
        return;
    }
    let mut criterion = Criterion::default().configure_from_args();
    hold_model(&mut criterion);
    criterion.final_summary();
    // Not when profiling one benchmark (`--profile-time`).
    if bench_mode() && !std::env::args().any(|arg| arg == "--profile-time") {
        ratio_table();
    }
}
