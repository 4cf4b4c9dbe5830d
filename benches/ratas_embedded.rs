//! Ratas' benchmark workload on [`EmbeddedWheel`]: each unit keeps its five
//! timers inside itself as [`TimerEntry`] fields, as Ratas' units keep their
//! `TimerEvent`s, and arms them by reference (no keys, no lookups).
//!
//! The workload, the rand() sequence and the checksum are those of
//! `benches/ratas.rs` (the keyed port; read it for the workload). Prints,
//! as Ratas' benchmark does, one line per run:
//! `<name>,<pairs>,<yes|no>,<user CPU seconds>,<total_rx_count>`; the
//! environment is Ratas' too: `BENCH_PAIR_COUNT` (default 5 as a bench
//! smoke run, 1000 with `--bench`) and `BENCH_ALLOW_SCHEDULE_IN_RANGE`
//! (`yes`/`no`; both when unset). `benches/ratas_compare.sh` runs it in
//! alternating rounds with Ratas' binary and the other ports.

use std::cell::Cell;
use std::pin::Pin;

use tickwheel::{EmbeddedWheel, TimerEntry};

const TIME_MS: u64 = 50;
const TIME_S: u64 = 1000 * TIME_MS;
const RESPONSE_SIZE: i32 = 128;
const PACE_INTERVAL: u64 = 10;

const IDLE: usize = 0;
const CLOSE: usize = 1;
const PACE: usize = 2;
const REQUEST: usize = 3;
const REQUEST_DEADLINE: usize = 4;

type W = EmbeddedWheel<usize>;

/// One unit, pinned in a `Box` as Ratas' units live on the heap. Its state
/// is in `Cell`s, so that it is reached through a shared pinned reference
/// while its timers are armed.
struct Unit {
    other: Cell<usize>,
    alive: Cell<bool>,
    tx_count: Cell<i32>,
    rx_count: Cell<i32>,
    pace_quota: Cell<i32>,
    request_interval: u64,
    closing: Cell<bool>,
    waiting_for_response: Cell<bool>,
    /// The payload of each is `unit * 8 + kind`.
    timers: [TimerEntry<usize>; 5],
}

impl Unit {
    #[inline(always)]
    fn timer(self: Pin<&Self>, kind: usize) -> Pin<&TimerEntry<usize>> {
        // SAFETY: the timers are pinned with their unit: `Unit` never moves
        // them out (it has no `Drop`, and no method hands out `&mut` to
        // them).
        unsafe { self.map_unchecked(|unit| &unit.timers[kind]) }
    }
}

struct Workload {
    units: Vec<Pin<Box<Unit>>>,
    in_range: bool,
    total_rx_count: i64,
}

#[inline(always)]
fn schedule(wheel: &mut W, unit: Pin<&Unit>, kind: usize, delay: u64) {
    wheel
        .schedule(unit.timer(kind), delay)
        .expect("an entry of this wheel");
}

#[inline(always)]
fn unidle(wheel: &mut W, in_range: bool, unit: Pin<&Unit>) {
    if in_range {
        wheel
            .schedule_in_range(unit.timer(IDLE), 60 * TIME_S..=61 * TIME_S)
            .expect("valid range");
    } else {
        schedule(wheel, unit, IDLE, 60 * TIME_S);
    }
}

impl Workload {
    #[inline(always)]
    fn unit(&self, unit: usize) -> Pin<&Unit> {
        self.units[unit].as_ref()
    }

    fn start(&mut self, wheel: &mut W, unit: usize, server: bool) {
        let u = self.unit(unit);
        unidle(wheel, self.in_range, u);
        schedule(wheel, u, CLOSE, 180 * TIME_S);
        if !server {
            self.on_request(wheel, unit);
        }
    }

    fn transmit(&mut self, wheel: &mut W, unit: usize, count: i32) {
        let u = self.unit(unit);
        u.tx_count.set(u.tx_count.get() + count);
        self.deliver(wheel, unit);
    }

    // The packet path (deliver, receive, on_pace, and the dispatch in
    // `expired`) is inlined, as Ratas' member functions are into its
    // events' `execute`: out of line, its calls' register saves and
    // restores were a tenth of this port's instructions (user CPU
    // 0.437 -> 0.400 s at 1000 pairs with range scheduling).
    #[inline(always)]
    fn deliver(&mut self, wheel: &mut W, unit: usize) {
        let u = self.unit(unit);
        unidle(wheel, self.in_range, u);
        let amount = u.pace_quota.get().min(u.tx_count.get());
        u.pace_quota.set(u.pace_quota.get() - amount);
        u.tx_count.set(u.tx_count.get() - amount);
        let (other, quota) = (u.other.get(), u.pace_quota.get());
        self.receive(wheel, other);
        if quota == 0 {
            schedule(wheel, self.unit(unit), PACE, PACE_INTERVAL);
        }
    }

    #[inline(always)]
    fn receive(&mut self, wheel: &mut W, unit: usize) {
        // Ratas counts one packet per call whatever the count is; so do we.
        let u = self.unit(unit);
        assert!(u.alive.get(), "a packet for a deleted unit");
        unidle(wheel, self.in_range, u);
        if u.waiting_for_response.get() {
            let delay = PACE_INTERVAL * RESPONSE_SIZE as u64 * 2;
            schedule(wheel, u, REQUEST_DEADLINE, delay);
            u.waiting_for_response.set(false);
        }
        u.rx_count.set(u.rx_count.get() + 1);
        if u.rx_count.get() % RESPONSE_SIZE == 0 {
            u.timer(REQUEST_DEADLINE).cancel();
            schedule(wheel, u, REQUEST, u.request_interval);
        }
    }

    fn on_close(&mut self, wheel: &mut W, unit: usize) {
        let u = self.unit(unit);
        if u.closing.get() {
            self.delete(unit);
        } else {
            u.closing.set(true);
            schedule(wheel, u, CLOSE, 10 * TIME_S);
        }
    }

    #[inline(always)]
    fn on_pace(&mut self, wheel: &mut W, unit: usize) {
        let u = self.unit(unit);
        if u.tx_count.get() != 0 {
            u.pace_quota.set(1);
            self.deliver(wheel, unit);
        }
    }

    fn on_request(&mut self, wheel: &mut W, unit: usize) {
        let u = self.unit(unit);
        if !u.closing.get() {
            let delay = PACE_INTERVAL * RESPONSE_SIZE as u64 * 4;
            schedule(wheel, u, REQUEST_DEADLINE, delay);
            u.waiting_for_response.set(true);
            let other = u.other.get();
            self.transmit(wheel, other, RESPONSE_SIZE);
        }
    }

    fn on_request_deadline(&mut self, unit: usize) {
        eprintln!("Request did not finish by deadline");
        let other = self.unit(unit).other.get();
        self.delete(unit);
        self.delete(other);
    }

    /// Ratas' destructor: counts the unit's packets and cancels its timers
    /// (each entry cancels itself; no wheel needed).
    fn delete(&mut self, unit: usize) {
        let u = self.units[unit].as_ref();
        if !u.alive.get() {
            return;
        }
        u.alive.set(false);
        self.total_rx_count += i64::from(u.rx_count.get());
        for timer in &u.timers {
            timer.cancel();
        }
    }

    #[inline(always)]
    fn expired(&mut self, wheel: &mut W, payload: usize) {
        let (unit, kind) = (payload / 8, payload % 8);
        match kind {
            IDLE => self.delete(unit),
            CLOSE => self.on_close(wheel, unit),
            PACE => self.on_pace(wheel, unit),
            REQUEST => self.on_request(wheel, unit),
            _ => self.on_request_deadline(unit),
        }
    }

    fn new_unit(&mut self, request_interval: u64) -> usize {
        let index = self.units.len();
        let timer = |kind: usize| TimerEntry::new(index * 8 + kind);
        self.units.push(Box::pin(Unit {
            other: Cell::new(usize::MAX),
            alive: Cell::new(true),
            tx_count: Cell::new(0),
            rx_count: Cell::new(0),
            pace_quota: Cell::new(1),
            request_interval,
            closing: Cell::new(false),
            waiting_for_response: Cell::new(false),
            timers: [timer(0), timer(1), timer(2), timer(3), timer(4)],
        }));
        index
    }

    fn make_pair(&mut self, wheel: &mut W, request_interval: u64) {
        let server = self.new_unit(TIME_S);
        let client = self.new_unit(request_interval);
        self.unit(server).other.set(client);
        self.unit(client).other.set(server);
        self.start(wheel, server, true);
        self.start(wheel, client, false);
    }
}

fn advance(wheel: &mut W, workload: &mut Workload, delta: u64) {
    let target = wheel.now() + delta;
    let done = wheel.advance(target, usize::MAX, |wheel, timer| {
        workload.expired(wheel, timer.value)
    });
    debug_assert!(done.complete);
}

/// Runs the workload; returns `total_rx_count`.
fn run(pairs: u32, in_range: bool) -> i64 {
    // SAFETY: `srand`/`rand` touch only libc's own generator state, and
    // this program calls them from one thread.
    unsafe { libc::srand(1) };
    let rand = || i64::from(unsafe { libc::rand() });
    // Declared before the units: dropped after them (a unit's armed
    // entries cancel themselves on the wheel as they drop).
    let mut wheel = W::new();
    let mut workload = Workload {
        units: Vec::new(),
        in_range,
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

fn main() {
    let full = std::env::args().any(|arg| arg == "--bench");
    let pairs: u32 = std::env::var("BENCH_PAIR_COUNT")
        .ok()
        .map(|s| s.parse().expect("BENCH_PAIR_COUNT: a pair count"))
        .unwrap_or(if full { 1000 } else { 5 });
    let ranges: &[bool] = match std::env::var("BENCH_ALLOW_SCHEDULE_IN_RANGE").as_deref() {
        Ok("yes") => &[true],
        Ok("no") => &[false],
        Ok(other) => panic!("BENCH_ALLOW_SCHEDULE_IN_RANGE: yes or no, not {other:?}"),
        Err(_) => &[true, false],
    };
    for &in_range in ranges {
        let before = user_cpu();
        let checksum = run(pairs, in_range);
        let seconds = user_cpu() - before;
        let range = if in_range { "yes" } else { "no" };
        println!("ratas_embedded,{pairs},{range},{seconds:.6},{checksum}");
    }
}
