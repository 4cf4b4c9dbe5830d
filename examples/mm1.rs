//! An M/M/c queue on `tickwheel::sim`, checked against queueing theory.
//!
//! Customers arrive as a Poisson process (rate λ), wait in one FIFO line,
//! and are served by `c` servers with exponential service times (rate μ per
//! server). Theory (Erlang C) gives the mean wait in line:
//!
//! ```text
//! a = λ/μ, ρ = a/c,  P(wait) = C(c, a),  Wq = C(c, a) / (cμ − λ)
//! ```
//!
//! which for one server is `Wq = ρ / (μ − λ)`. The simulation measures the
//! mean wait of the customers after a warm-up, with a 95% confidence
//! interval from batch means, plus the servers' utilisation (theory: ρ).
//!
//! Time is in ticks of 1 µs; exponential variates are rounded to the nearest
//! tick, which moves a mean of ~1000 ticks by far less than the statistical
//! error. Random numbers come from a seeded splitmix64, so a run is
//! reproducible.
//!
//! ```text
//! cargo run --release --example mm1 -- [servers] [customers] [seed] [--trace out.json]
//! ```
//!
//! `--trace` also writes the Chrome trace-event JSON of a short run
//! (open it in Perfetto or chrome://tracing).
//!
//! `tests/sim_mm1.rs` includes this file and checks [`simulate`] against
//! [`theory`].

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use tickwheel::sim::{Simulation, Timeline};

/// Ticks per second: 1 tick = 1 µs.
pub const TICKS_PER_SECOND: f64 = 1e6;

/// The queue to simulate.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    /// Arrival rate λ, customers per second.
    pub arrival_rate: f64,
    /// Service rate μ of one server, customers per second.
    pub service_rate: f64,
    /// Number of servers c.
    pub servers: u32,
    /// Customers to simulate, warm-up included.
    pub customers: u64,
    /// Customers discarded at the start (the queue starts empty).
    pub warmup: u64,
    /// Seed of the random number generator.
    pub seed: u64,
}

/// What a run measured.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    /// Mean wait in line of the customers after the warm-up, seconds.
    pub mean_wait: f64,
    /// Half-width of the 95% confidence interval of `mean_wait` (20 batch
    /// means, Student t with 19 degrees of freedom).
    pub ci95: f64,
    /// Mean time in the system (wait + service), seconds.
    pub mean_sojourn: f64,
    /// Fraction of server time busy, over the whole run.
    pub utilisation: f64,
    /// Customers measured.
    pub measured: u64,
    /// Events run.
    pub events: u64,
    /// Peak number of pending events.
    pub peak_queue: usize,
    /// Simulated time, seconds.
    pub simulated: f64,
    /// Wall-clock time of the run.
    pub wall: Duration,
}

/// What queueing theory says.
#[derive(Debug, Clone, Copy)]
pub struct Theory {
    /// Mean wait in line Wq, seconds.
    pub mean_wait: f64,
    /// Mean time in the system W = Wq + 1/μ, seconds.
    pub mean_sojourn: f64,
    /// Server utilisation ρ = λ / (cμ).
    pub utilisation: f64,
}

/// Erlang C: mean wait in line of an M/M/c queue (requires ρ < 1).
pub fn theory(p: &Params) -> Theory {
    let c = f64::from(p.servers);
    let a = p.arrival_rate / p.service_rate;
    let rho = a / c;
    assert!(rho < 1.0, "the queue is unstable (rho = {rho})");
    // Terms a^k / k! for k < c, then the tail term a^c / c! / (1 - ρ).
    let mut term = 1.0;
    let mut sum = 0.0;
    for k in 0..p.servers {
        sum += term;
        term *= a / f64::from(k + 1);
    }
    let tail = term / (1.0 - rho);
    let p_wait = tail / (sum + tail);
    let mean_wait = p_wait / (c * p.service_rate - p.arrival_rate);
    Theory {
        mean_wait,
        mean_sojourn: mean_wait + 1.0 / p.service_rate,
        utilisation: rho,
    }
}

/// splitmix64: a small, fast, seeded generator.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator with the given seed.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), 53 bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// An exponential variate with the given rate (per second), in whole
    /// ticks (rounded to nearest).
    pub fn exp_ticks(&mut self, rate: f64) -> u64 {
        let seconds = -(1.0 - self.next_f64()).ln() / rate;
        (seconds * TICKS_PER_SECOND).round() as u64
    }
}

/// The two kinds of event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A customer arrives.
    Arrival,
    /// A server finishes its customer.
    Departure,
}

/// Departures run before arrivals of the same tick: the server is free for
/// the arriving customer (ties are rare at 1 µs; this fixes their order).
const DEPARTURE_PRIORITY: i32 = 1;

/// The model's state, outside the scheduler.
struct Model {
    params: Params,
    rng: SplitMix64,
    arrived: u64,
    busy: u32,
    /// Arrival time and number of each customer waiting in line.
    line: VecDeque<(u64, u64)>,
    /// Service start minus arrival, per measured customer, in ticks.
    waits: Vec<u64>,
    /// Sum over measured customers of their service times, in ticks.
    service_sum: u64,
    /// Integral of busy servers over time, in server-ticks.
    busy_area: u128,
    last_change: u64,
}

impl Model {
    fn account(&mut self, now: u64) {
        self.busy_area += u128::from(self.busy) * u128::from(now - self.last_change);
        self.last_change = now;
    }

    /// A customer (number `n`, arrived at `arrival`) starts service now.
    fn start_service(
        &mut self,
        ctx: &mut tickwheel::sim::Context<'_, Event>,
        n: u64,
        arrival: u64,
    ) {
        self.busy += 1;
        let service = self.rng.exp_ticks(self.params.service_rate);
        if n >= self.params.warmup {
            self.waits.push(ctx.now() - arrival);
            self.service_sum += service;
        }
        ctx.schedule_with_priority(service, DEPARTURE_PRIORITY, Event::Departure);
    }

    fn handle(&mut self, ctx: &mut tickwheel::sim::Context<'_, Event>, event: Event) {
        let now = ctx.now();
        self.account(now);
        match event {
            Event::Arrival => {
                let n = self.arrived;
                self.arrived += 1;
                if self.arrived < self.params.customers {
                    let gap = self.rng.exp_ticks(self.params.arrival_rate);
                    ctx.schedule(gap, Event::Arrival);
                }
                if self.busy < self.params.servers {
                    self.start_service(ctx, n, now);
                } else {
                    self.line.push_back((now, n));
                }
            }
            Event::Departure => {
                self.busy -= 1;
                if let Some((arrival, n)) = self.line.pop_front() {
                    self.start_service(ctx, n, arrival);
                }
            }
        }
    }
}

/// Runs the queue and measures it.
pub fn simulate(params: &Params) -> Measured {
    simulate_on(params, &mut Simulation::new())
}

/// [`simulate`] on the caller's simulation (to keep its trace, say).
fn simulate_on(params: &Params, sim: &mut Simulation<Event>) -> Measured {
    assert!(params.customers > params.warmup, "nothing to measure");
    let mut model = Model {
        params: *params,
        rng: SplitMix64::new(params.seed),
        arrived: 0,
        busy: 0,
        line: VecDeque::new(),
        waits: Vec::with_capacity((params.customers - params.warmup) as usize),
        service_sum: 0,
        busy_area: 0,
        last_change: sim.now(),
    };
    let first = model.rng.exp_ticks(params.arrival_rate);
    sim.schedule(first, Event::Arrival);
    let started = Instant::now();
    let report = sim
        .run(|ctx, event| model.handle(ctx, event))
        .expect("not verifying: no invariant errors");
    let wall = started.elapsed();

    let to_s = |ticks: f64| ticks / TICKS_PER_SECOND;
    let n = model.waits.len() as f64;
    let total_wait: u64 = model.waits.iter().sum();
    let mean_wait = to_s(total_wait as f64 / n);
    // Batch means: 20 consecutive batches of equal size.
    const BATCHES: usize = 20;
    const T_19_975: f64 = 2.093;
    let size = model.waits.len() / BATCHES;
    let means: Vec<f64> = model
        .waits
        .chunks_exact(size)
        .take(BATCHES)
        .map(|batch| to_s(batch.iter().sum::<u64>() as f64 / size as f64))
        .collect();
    let grand = means.iter().sum::<f64>() / BATCHES as f64;
    let variance = means.iter().map(|m| (m - grand).powi(2)).sum::<f64>() / (BATCHES as f64 - 1.0);
    let ci95 = T_19_975 * (variance / BATCHES as f64).sqrt();
    let elapsed = report.now as f64;
    Measured {
        mean_wait,
        ci95,
        mean_sojourn: mean_wait + to_s(model.service_sum as f64 / n),
        utilisation: model.busy_area as f64 / (f64::from(params.servers) * elapsed),
        measured: model.waits.len() as u64,
        events: report.events,
        peak_queue: sim.stats().peak_queue_len,
        simulated: to_s(elapsed),
        wall,
    }
}

/// Writes the Chrome trace of a short run of the same queue to `path`.
fn write_trace(params: &Params, path: &str) -> std::io::Result<()> {
    let short = Params {
        customers: 200,
        warmup: 0,
        ..*params
    };
    let mut sim = Simulation::builder()
        .record_trace(true)
        .namer(|event: &Event| match event {
            Event::Arrival => "arrival",
            Event::Departure => "departure",
        })
        .build();
    let measured = simulate_on(&short, &mut sim);
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    sim.trace().write_chrome_json(
        file,
        Timeline::Virtual {
            micros_per_tick: 1.0,
        },
    )?;
    println!(
        "trace of {} events ({} customers) written to {path}",
        measured.events, short.customers
    );
    Ok(())
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let trace = args.iter().position(|a| a == "--trace").map(|i| {
        let path = args.get(i + 1).cloned().expect("--trace needs a path");
        args.drain(i..=i + 1);
        path
    });
    let number = |i: usize, default: u64| {
        args.get(i)
            .map(|s| s.parse().expect("a number"))
            .unwrap_or(default)
    };
    let servers = number(0, 1) as u32;
    let customers = number(1, 2_000_000);
    let params = Params {
        arrival_rate: 800.0 * f64::from(servers),
        service_rate: 1000.0,
        servers,
        customers,
        warmup: customers / 20,
        seed: number(2, 42),
    };
    let theory = theory(&params);
    let measured = simulate(&params);

    println!(
        "M/M/{servers}: lambda = {} /s, mu = {} /s per server, rho = {:.3}, seed {}",
        params.arrival_rate, params.service_rate, theory.utilisation, params.seed
    );
    println!(
        "customers: {} ({} measured after a warm-up of {}), simulated {:.1} s",
        params.customers, measured.measured, params.warmup, measured.simulated
    );
    let ms = 1e3;
    println!(
        "mean wait Wq: measured {:.4} ms ± {:.4} (95% CI), theory {:.4} ms, error {:+.2}%",
        measured.mean_wait * ms,
        measured.ci95 * ms,
        theory.mean_wait * ms,
        100.0 * (measured.mean_wait / theory.mean_wait - 1.0)
    );
    println!(
        "mean sojourn W: measured {:.4} ms, theory {:.4} ms; utilisation: measured {:.4}, theory {:.4}",
        measured.mean_sojourn * ms,
        theory.mean_sojourn * ms,
        measured.utilisation,
        theory.utilisation
    );
    println!(
        "{} events in {:.3} s wall ({:.1} M events/s), peak {} pending",
        measured.events,
        measured.wall.as_secs_f64(),
        measured.events as f64 / measured.wall.as_secs_f64() / 1e6,
        measured.peak_queue
    );
    if let Some(path) = trace {
        write_trace(&params, &path).expect("writing the trace");
    }
}
