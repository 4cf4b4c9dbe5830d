//! Insert + expire: arm `n` timers at random delays, then advance until all
//! have fired; nanoseconds per timer, for the keyed [`Wheel`], the
//! [`EmbeddedWheel`], a `BTreeMap<(deadline, seq), _>` and a
//! `BinaryHeap<Reverse<(deadline, seq, _)>>`, in alternating rounds (the
//! machine is shared and noisy: compare the figures of one round), each
//! repetition starting with the next implementation in turn (see `main`).
//!
//! Delays are uniform in `1..=span` ticks (default 65,536: about a minute of
//! 1 ms ticks), so the wheel's timers start on its upper levels and cascade
//! down as time passes, as a server's timeouts do. The advance is one call
//! to the last deadline (what a simulation that runs to the end does).
//!
//! ```sh
//! cargo run --release --example fill_expire -- 1000 100000 1000000
//! cargo run --release --example fill_expire -- --span 1048576 --rounds 5 100000
//! ```
//!
//! `--only wheel|embedded|btree|heap` runs one implementation alone (for a
//! profiler: `valgrind --tool=callgrind` then counts only its work) and
//! prints its checksum and ns per timer.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::hint::black_box;
use std::pin::pin;
use std::time::Instant;

use tickwheel::{EmbeddedWheel, TimerEntry, Wheel};

/// One implementation's run over the delays: ns per timer and checksum.
type Run = fn(&[u64]) -> (f64, u64);

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn delays(n: usize, span: u64, seed: u64) -> Vec<u64> {
    let mut rng = Rng(seed | 1);
    (0..n).map(|_| 1 + rng.below(span)).collect()
}

/// Counts the firings of one run and folds them into the checksum every
/// implementation must agree on: each fired timer's `payload * deadline`,
/// in firing order, folded by a rotate.
#[derive(Default)]
struct Tally {
    sum: u64,
    fired: usize,
}

impl Tally {
    fn add(&mut self, payload: u64, tick: u64) {
        self.sum = self.sum.rotate_left(5) ^ payload.wrapping_mul(tick | 1);
        self.fired += 1;
    }

    /// ns per timer since `began`, and the checksum; every timer fired.
    fn finish(self, began: Instant, n: usize) -> (f64, u64) {
        let ns = began.elapsed().as_nanos() as f64 / n as f64;
        assert_eq!(self.fired, n, "every timer fires");
        (ns, self.sum)
    }
}

fn wheel(delays: &[u64]) -> (f64, u64) {
    let began = Instant::now();
    let mut wheel = Wheel::with_capacity(delays.len());
    let mut last = 0;
    for (i, &delay) in delays.iter().enumerate() {
        wheel.insert(delay, i as u64);
        last = last.max(delay);
    }
    let mut tally = Tally::default();
    let _ = wheel.advance(last, usize::MAX, |_, expired| {
        tally.add(expired.value, expired.deadline)
    });
    tally.finish(began, delays.len())
}

fn embedded(delays: &[u64]) -> (f64, u64) {
    let began = Instant::now();
    let mut wheel = EmbeddedWheel::with_capacity(delays.len());
    let entries: Vec<TimerEntry<u64>> = (0..delays.len() as u64).map(TimerEntry::new).collect();
    let entries = pin!(entries);
    let mut last = 0;
    for (entry, &delay) in entries.iter().zip(delays) {
        // SAFETY (pinning): the vector is pinned on the stack and never
        // moved or resized while the entries are armed.
        let entry = unsafe { std::pin::Pin::new_unchecked(entry) };
        wheel.schedule(entry, delay).unwrap();
        last = last.max(delay);
    }
    let mut tally = Tally::default();
    let _ = wheel.advance(last, usize::MAX, |_, expired| {
        tally.add(expired.value, expired.deadline)
    });
    tally.finish(began, delays.len())
}

fn btree(delays: &[u64]) -> (f64, u64) {
    let began = Instant::now();
    let mut map = BTreeMap::new();
    for (i, &delay) in delays.iter().enumerate() {
        map.insert((delay, i as u64), i as u64);
    }
    let mut tally = Tally::default();
    while let Some(((deadline, _), payload)) = map.pop_first() {
        tally.add(payload, deadline);
    }
    tally.finish(began, delays.len())
}

fn heap(delays: &[u64]) -> (f64, u64) {
    let began = Instant::now();
    let mut heap = BinaryHeap::with_capacity(delays.len());
    for (i, &delay) in delays.iter().enumerate() {
        heap.push(Reverse((delay, i as u64, i as u64)));
    }
    let mut tally = Tally::default();
    while let Some(Reverse((deadline, _, payload))) = heap.pop() {
        tally.add(payload, deadline);
    }
    tally.finish(began, delays.len())
}

fn main() {
    let mut span = 65_536u64;
    let mut rounds = 9usize;
    let mut only = None;
    let mut sizes = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = |what: &str| -> u64 {
            args.next()
                .and_then(|v| v.parse().ok())
                .filter(|&v| v > 0)
                .unwrap_or_else(|| {
                    eprintln!("{what} takes a positive integer");
                    std::process::exit(2)
                })
        };
        match arg.as_str() {
            "--span" => span = number("--span"),
            "--rounds" => rounds = number("--rounds") as usize,
            "--only" => {
                let run: Run = match args.next().as_deref() {
                    Some("wheel") => wheel,
                    Some("embedded") => embedded,
                    Some("btree") => btree,
                    Some("heap") => heap,
                    _ => {
                        eprintln!("--only takes wheel, embedded, btree or heap");
                        std::process::exit(2)
                    }
                };
                only = Some(run);
            }
            n => match n.parse::<usize>() {
                Ok(n) if n > 0 => sizes.push(n),
                _ => {
                    eprintln!("usage: fill_expire [--span TICKS] [--rounds R] [--only IMPL] N...");
                    std::process::exit(2)
                }
            },
        }
    }
    if sizes.is_empty() {
        sizes = vec![1_000, 100_000, 1_000_000];
    }
    if let Some(run) = only {
        for &n in &sizes {
            let repeat = (1_000_000 / n).max(1);
            let (mut total, mut sum) = (0.0, 0u64);
            for r in 0..rounds * repeat {
                let (ns, checksum) = run(&delays(n, span, r as u64 + 7));
                total += ns;
                sum ^= checksum;
            }
            println!(
                "n {n}: {:.1} ns per timer over {} runs (checksum {sum:x})",
                total / (rounds * repeat) as f64,
                rounds * repeat
            );
        }
        return;
    }
    println!("fill_expire: every round, ns per timer (span {span} ticks)");
    println!();
    println!("| n | round | Wheel | EmbeddedWheel | BTreeMap | BinaryHeap | Wheel/BTreeMap | Embedded/BTreeMap | Wheel/heap |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut medians = Vec::new();
    for &n in &sizes {
        let mut per_round = Vec::new();
        // At least a million timers per measurement: small n repeats.
        let repeat = (1_000_000 / n).max(1);
        for round in 0..rounds {
            let mut totals = [0.0f64; 4];
            for r in 0..repeat {
                let delays = delays(n, span, (round * repeat + r) as u64 + 7);
                // Same sequence of firings for all four, within each tick in
                // arming order (the BTreeMap's and heap's `seq`). Each
                // repetition starts with the next implementation in turn:
                // the one that runs right after another finds the memory
                // that run freed still in the last-level cache, and at
                // 100,000 timers an implementation always placed first ran
                // up to 1.4x slower than the same one placed second.
                let impls: [Run; 4] = [wheel, embedded, btree, heap];
                let mut runs = [(0.0, 0); 4];
                let first = round * repeat + r;
                for k in 0..4 {
                    let which = (first + k) % 4;
                    runs[which] = impls[which](&delays);
                }
                let sum = runs[2].1;
                for (total, (ns, checksum)) in totals.iter_mut().zip(runs) {
                    assert_eq!(
                        checksum, sum,
                        "every implementation fires the same sequence"
                    );
                    *total += ns;
                }
            }
            let [w, e, b, h] = totals.map(|t| t / repeat as f64);
            println!(
                "| {n} | {round} | {w:.1} ns | {e:.1} ns | {b:.1} ns | {h:.1} ns | {:.2} | {:.2} | {:.2} |",
                w / b,
                e / b,
                w / h
            );
            per_round.push([w, e, b, h]);
            black_box(());
        }
        // Each implementation's median round, and each ratio's median
        // over the rounds' own ratios: a round in which the host ran slow
        // for every implementation (its clock drifts by a third from
        // minute to minute on a shared machine) moves no ratio.
        let median = |of: &dyn Fn(&[f64; 4]) -> f64| {
            let mut v: Vec<f64> = per_round.iter().map(of).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let times = [0, 1, 2, 3].map(|k| median(&|r| r[k]));
        let ratios = [
            median(&|r| r[0] / r[2]),
            median(&|r| r[1] / r[2]),
            median(&|r| r[0] / r[3]),
            median(&|r| r[1] / r[3]),
        ];
        medians.push((n, times, ratios));
    }
    println!();
    println!(
        "medians of {rounds} alternating rounds, ns per timer, and of the rounds' own ratios (n timers at delays uniform in 1..={span} ticks, then one advance to the last deadline):"
    );
    println!();
    println!("| n | Wheel | EmbeddedWheel | BTreeMap | BinaryHeap | Wheel ÷ BTreeMap | Embedded ÷ BTreeMap | Wheel ÷ BinaryHeap | Embedded ÷ BinaryHeap |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (n, [w, e, b, h], [wb, eb, wh, eh]) in medians {
        println!(
            "| {n} | {w:.1} ns | {e:.1} ns | {b:.1} ns | {h:.1} ns | {wb:.2} | {eb:.2} | {wh:.2} | {eh:.2} |"
        );
    }
}
