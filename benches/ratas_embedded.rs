//! Ratas' benchmark workload on [`EmbeddedWheel`]: each unit keeps its five
//! timers inside itself as [`TimerEntry`] fields, as Ratas' units keep their
//! `TimerEvent`s, and arms them by reference (no keys, no lookups).
//!
//! The workload, the rand() sequence and the checksum are those of
//! `benches/ratas.rs` (the keyed port; read it for the workload). Time
//! moves with [`EmbeddedWheel::advance_to_next_event`], which is Ratas'
//! `ticks_to_next_event` and `advance` in one call. Prints,
//! as Ratas' benchmark does, one line per run:
//! `<name>,<pairs>,<yes|no>,<user CPU seconds>,<total_rx_count>`; the
//! environment is Ratas' too: `BENCH_PAIR_COUNT` (default 5 as a bench
//! smoke run, 1000 with `--bench`) and `BENCH_ALLOW_SCHEDULE_IN_RANGE`
//! (`yes`/`no`; both when unset). `benches/ratas_compare.sh` runs it in
//! alternating rounds with Ratas' binary and the other ports.

use std::cell::Cell;
use std::mem::MaybeUninit;
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
/// The low bits of a payload that say which of its unit's timers it is.
const KIND_MASK: usize = 7;

type W = EmbeddedWheel<usize>;

/// One unit. Units are leaked (`&'static`): like Ratas' heap-allocated
/// units they never move, and every unit and every timer payload reaches
/// its unit by address (Ratas' events hold their unit's pointer), not by
/// an index checked against a vector. Its state is in `Cell`s, so that it
/// is reached through a shared reference while its timers are armed.
// Aligned to at least 8: a payload is the unit's address with the timer's
// kind in its three low bits.
#[repr(align(8))]
struct Unit {
    other: Cell<Option<&'static Unit>>,
    alive: Cell<bool>,
    tx_count: Cell<i32>,
    rx_count: Cell<i32>,
    pace_quota: Cell<i32>,
    request_interval: u64,
    closing: Cell<bool>,
    waiting_for_response: Cell<bool>,
    /// The payload of each is the unit's address plus its kind.
    timers: [TimerEntry<usize>; 5],
}

impl Unit {
    #[inline(always)]
    fn timer(&'static self, kind: usize) -> Pin<&'static TimerEntry<usize>> {
        // A leaked unit never moves, so neither do its timers.
        Pin::static_ref(&self.timers[kind])
    }

    #[inline(always)]
    fn other(&self) -> &'static Unit {
        self.other.get().expect("a unit of a pair")
    }

    /// The unit and the kind a fired timer's payload names.
    #[inline(always)]
    fn of_payload(payload: usize) -> (&'static Unit, usize) {
        let unit = (payload & !KIND_MASK) as *const Unit;
        // SAFETY: payloads are made by `Workload::new_unit` from the
        // address of a leaked, initialised unit, which lives to the end of
        // the process.
        (unsafe { &*unit }, payload & KIND_MASK)
    }
}

struct Workload {
    in_range: bool,
    total_rx_count: i64,
}

#[inline(always)]
fn schedule(wheel: &mut W, unit: &'static Unit, kind: usize, delay: u64) {
    wheel
        .schedule(unit.timer(kind), delay)
        .expect("an entry of this wheel");
}

#[inline(always)]
fn unidle(wheel: &mut W, in_range: bool, unit: &'static Unit) {
    if in_range {
        wheel
            .schedule_in_range(unit.timer(IDLE), 60 * TIME_S..=61 * TIME_S)
            .expect("valid range");
    } else {
        schedule(wheel, unit, IDLE, 60 * TIME_S);
    }
}

impl Workload {
    fn start(&mut self, wheel: &mut W, u: &'static Unit, server: bool) {
        unidle(wheel, self.in_range, u);
        schedule(wheel, u, CLOSE, 180 * TIME_S);
        if !server {
            self.on_request(wheel, u);
        }
    }

    fn transmit(&mut self, wheel: &mut W, u: &'static Unit, count: i32) {
        u.tx_count.set(u.tx_count.get() + count);
        self.deliver(wheel, u);
    }

    // The packet path (deliver, receive, on_pace, and the dispatch in
    // `expired`) is inlined, as Ratas' member functions are into its
    // events' `execute`: out of line, its calls' register saves and
    // restores were a tenth of this port's instructions (user CPU
    // 0.437 -> 0.400 s at 1000 pairs with range scheduling).
    #[inline(always)]
    fn deliver(&mut self, wheel: &mut W, u: &'static Unit) {
        unidle(wheel, self.in_range, u);
        let amount = u.pace_quota.get().min(u.tx_count.get());
        u.pace_quota.set(u.pace_quota.get() - amount);
        u.tx_count.set(u.tx_count.get() - amount);
        let (other, quota) = (u.other(), u.pace_quota.get());
        self.receive(wheel, other);
        if quota == 0 {
            schedule(wheel, u, PACE, PACE_INTERVAL);
        }
    }

    #[inline(always)]
    fn receive(&mut self, wheel: &mut W, u: &'static Unit) {
        // Ratas counts one packet per call whatever the count is; so do we.
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

    fn on_close(&mut self, wheel: &mut W, u: &'static Unit) {
        if u.closing.get() {
            self.delete(u);
        } else {
            u.closing.set(true);
            schedule(wheel, u, CLOSE, 10 * TIME_S);
        }
    }

    #[inline(always)]
    fn on_pace(&mut self, wheel: &mut W, u: &'static Unit) {
        if u.tx_count.get() != 0 {
            u.pace_quota.set(1);
            self.deliver(wheel, u);
        }
    }

    fn on_request(&mut self, wheel: &mut W, u: &'static Unit) {
        if !u.closing.get() {
            let delay = PACE_INTERVAL * RESPONSE_SIZE as u64 * 4;
            schedule(wheel, u, REQUEST_DEADLINE, delay);
            u.waiting_for_response.set(true);
            self.transmit(wheel, u.other(), RESPONSE_SIZE);
        }
    }

    fn on_request_deadline(&mut self, u: &'static Unit) {
        eprintln!("Request did not finish by deadline");
        self.delete(u);
        self.delete(u.other());
    }

    /// Ratas' destructor: counts the unit's packets and cancels its timers
    /// (each entry cancels itself; no wheel needed).
    fn delete(&mut self, u: &'static Unit) {
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
        let (unit, kind) = Unit::of_payload(payload);
        match kind {
            IDLE => self.delete(unit),
            CLOSE => self.on_close(wheel, unit),
            PACE => self.on_pace(wheel, unit),
            REQUEST => self.on_request(wheel, unit),
            _ => self.on_request_deadline(unit),
        }
    }

    /// A new unit, leaked: its timers' payloads are its own address.
    fn new_unit(request_interval: u64) -> &'static Unit {
        let place: &'static mut MaybeUninit<Unit> = Box::leak(Box::new(MaybeUninit::uninit()));
        let address = place.as_ptr() as usize;
        debug_assert_eq!(address & KIND_MASK, 0);
        let timer = |kind: usize| TimerEntry::new(address | kind);
        place.write(Unit {
            other: Cell::new(None),
            alive: Cell::new(true),
            tx_count: Cell::new(0),
            rx_count: Cell::new(0),
            pace_quota: Cell::new(1),
            request_interval,
            closing: Cell::new(false),
            waiting_for_response: Cell::new(false),
            timers: [timer(0), timer(1), timer(2), timer(3), timer(4)],
        })
    }

    fn make_pair(&mut self, wheel: &mut W, request_interval: u64) {
        let server = Self::new_unit(TIME_S);
        let client = Self::new_unit(request_interval);
        server.other.set(Some(client));
        client.other.set(Some(server));
        self.start(wheel, server, true);
        self.start(wheel, client, false);
    }
}

/// Runs the workload; returns `total_rx_count`.
fn run(pairs: u32, in_range: bool) -> i64 {
    // SAFETY: `srand`/`rand` touch only libc's own generator state, and
    // this program calls them from one thread.
    unsafe { libc::srand(1) };
    let rand = || i64::from(unsafe { libc::rand() });
    // The units are leaked, so they outlive the wheel: dropping it at the
    // end disarms the entries still armed.
    let mut wheel = W::new();
    let mut workload = Workload {
        in_range,
        total_rx_count: 0,
    };
    let create_period = TIME_S;
    let per_iter = f64::from(pairs) / create_period as f64 * 2.0;
    let mut progress = 0.0f64;
    // Ratas' loop: in the first second pairs are made and time advances
    // one tick at a time; then each step asks `ticks_to_next_event(100 ms)`
    // and advances by that much. `advance_to_next_event` is those two calls
    // in one, firing the same timers in the same order (same checksum) with
    // one search for the next timer instead of two. It serves the first
    // second too: nothing is ever due at `now` when a step begins (no
    // callback arms a timer with delay 0), so a step with a cap of 1 is an
    // advance by one tick. One call site for both, so that the workload's
    // callbacks are inlined once.
    loop {
        let now = wheel.now();
        let cap = if now < create_period {
            progress += (rand() as f64 * per_iter) / f64::from(libc::RAND_MAX);
            while progress > 1.0 {
                progress -= 1.0;
                let interval = TIME_S + (rand() % 100) as u64;
                workload.make_pair(&mut wheel, interval);
            }
            1
        } else if now < 300 * TIME_S {
            100 * TIME_MS
        } else {
            break;
        };
        let done = wheel.advance_to_next_event(cap, usize::MAX, |wheel, timer| {
            workload.expired(wheel, timer.value)
        });
        debug_assert!(done.complete);
        debug_assert!(cap != 1 || wheel.now() == now + 1);
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
