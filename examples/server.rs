//! A busy server, played against the timer service.
//!
//! ```text
//! cargo run --release --example server [-- --connections N --seconds S --threads T --rate PPS]
//! ```
//!
//! Per-core workers each own a share of the connections **and one shard**
//! (`Driver::Embedded`). That is the shape of a thread-per-core server: the
//! commonest timer operation, restarting a connection's idle timeout on
//! every packet, stays on the worker's own shard, is taken in by the same
//! thread at its next `poll()`, and its callback runs next to the
//! connection's state; no driver threads compete with the workers for the
//! cores. Work that crosses threads still happens, and is the point of the
//! service: every request arms a deadline on its worker's shard and hands
//! it to the next worker, which (almost always) stops it from there.
//!
//! Timers:
//! * idle timeout per connection (3 s), restarted on every packet; one
//!   connection in 50 is quiet, so its timeout fires;
//! * request deadline (200 ms), stopped by another worker when it answers;
//!   one request in 2000 is never answered and its deadline fires;
//! * retransmission (5-20 ms, doubling, up to 3 sends), which fires unless
//!   the segment is acknowledged first.
//!
//! Every callback checks that it did not fire early. At the end the workers
//! stop at a quiescent point and the run is checked: armings = fired +
//! cancelled + moved + still armed, the service's fired count equals the
//! callbacks that ran, nothing fired early, and after every handle is
//! dropped nothing is armed and every slot was freed. The process exits
//! with status 1 if any of that breaks (2 for bad arguments).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Barrier, OnceLock};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use tickwheel::{Driver, Restart, ShardGuard, Stop, Timer, TimerService};

const IDLE: Duration = Duration::from_secs(3);
const DEADLINE: Duration = Duration::from_millis(200);
const QUIET_EVERY: usize = 50;
const LOST_EVERY: u64 = 2000;
const RTX_RING: usize = 512;
const BATCH: usize = 256;

/// Counts live heap bytes, to measure what an armed timer costs.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size() as isize, Relaxed) + layout.size() as isize;
        PEAK.fetch_max(live, Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

static LEAKED: AtomicIsize = AtomicIsize::new(0);

/// Leaks demo bookkeeping that callbacks and workers share for the whole
/// run, and remembers its size so the final heap check can allow for it.
fn leak<T>(values: Box<[T]>) -> &'static [T] {
    LEAKED.fetch_add(std::mem::size_of_val(&*values) as isize, Relaxed);
    Box::leak(values)
}

static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Nanoseconds since the program started: what callbacks compare deadlines with.
fn now_ns() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// One worker's figures. Each is written by one thread (the worker, or
/// callbacks on its shard, which run on it); the progress loop reads them.
#[derive(Default)]
#[repr(align(128))]
struct Tally {
    ops: AtomicU64,
    started: AtomicU64,
    armings: AtomicU64,
    fired: AtomicU64,
    cancelled: AtomicU64,
    moved: AtomicU64,
    early: AtomicU64,
    idle_fired: AtomicU64,
    deadline_fired: AtomicU64,
    deadline_stopped: AtomicU64,
    rtx_fired: AtomicU64,
    rtx_acked: AtomicU64,
}

impl Tally {
    fn add(&self, field: impl Fn(&Tally) -> &AtomicU64, n: u64) {
        field(self).fetch_add(n, Relaxed);
    }
}

fn sum(tallies: &[Tally], field: impl Fn(&Tally) -> &AtomicU64) -> u64 {
    tallies.iter().map(|t| field(t).load(Relaxed)).sum()
}

struct Options {
    connections: usize,
    seconds: u64,
    threads: usize,
    rate: u64,
}

fn usage(error: &str) -> ! {
    eprintln!("error: {error}");
    eprintln!(
        "usage: server [--connections N (default 200000)] [--seconds S (default 15)] \
         [--threads T (default: cores)] [--rate PACKETS_PER_SEC (default 0 = as fast as possible)]"
    );
    std::process::exit(2);
}

fn parse_args() -> Options {
    let mut options = Options {
        connections: 200_000,
        seconds: 15,
        threads: thread::available_parallelism().map_or(2, |n| n.get()),
        rate: 0,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--help" || flag == "-h" {
            usage("help requested");
        }
        let Some(value) = args.next() else {
            usage(&format!("{flag} needs a value"))
        };
        let Ok(number) = value.parse::<u64>() else {
            usage(&format!("{flag}: '{value}' is not a whole number"))
        };
        match flag.as_str() {
            "--connections" if (1..=50_000_000).contains(&number) => {
                options.connections = number as usize
            }
            "--seconds" if (1..=3600).contains(&number) => options.seconds = number,
            "--threads" if (1..=256).contains(&number) => options.threads = number as usize,
            "--rate" => options.rate = number,
            "--connections" | "--seconds" | "--threads" => {
                usage(&format!("{flag} {number} is out of range"))
            }
            _ => usage(&format!("unknown flag {flag}")),
        }
    }
    if options.connections < options.threads * QUIET_EVERY {
        usage("need at least 50 connections per thread");
    }
    options
}

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n
    }
}

/// What each worker thread owns.
struct Worker {
    service: TimerService,
    shard: ShardGuard,
    rng: Rng,
    tally: &'static Tally,
    /// Idle timers of this worker's connections, and when each was last armed.
    idle: Vec<Timer>,
    idle_armed_at: &'static [AtomicU64],
    /// Retransmission timers in flight; the oldest is acknowledged (stopped)
    /// when its place is needed.
    rtx: Vec<Option<Timer>>,
    rtx_next: usize,
    /// Requests to hand to the next worker, and requests it will never answer.
    outgoing: Vec<Timer>,
    to_next: Sender<Vec<Timer>>,
    from_prev: Receiver<Vec<Timer>>,
    lost: Vec<Timer>,
}

impl Worker {
    /// Arms the idle timers of this worker's connections.
    fn open_connections(&mut self) {
        for c in 0..self.idle_armed_at.len() {
            let armed_at = &self.idle_armed_at[c];
            let tally = self.tally;
            armed_at.store(now_ns(), Relaxed);
            let timer = self
                .service
                .start(IDLE, move |_| {
                    if now_ns() < armed_at.load(Relaxed) + IDLE.as_nanos() as u64 {
                        tally.add(|t| &t.early, 1);
                    }
                    tally.add(|t| &t.fired, 1);
                    tally.add(|t| &t.idle_fired, 1);
                })
                .expect("service running");
            self.idle.push(timer);
        }
        let n = self.idle.len() as u64;
        self.tally.add(|t| &t.started, n);
        self.tally.add(|t| &t.armings, n);
        self.tally.add(|t| &t.ops, n);
    }

    /// One packet on a random busy connection.
    fn packet(&mut self) {
        let mut c = self.rng.below(self.idle.len() as u64) as usize;
        if c % QUIET_EVERY == 0 {
            c = if c + 1 < self.idle.len() {
                c + 1
            } else {
                c - 1
            };
        }
        let now = now_ns();
        self.idle_armed_at[c].store(now, Relaxed);
        let outcome = self.idle[c].restart(IDLE).expect("service running");
        let tally = self.tally;
        tally.add(|t| &t.armings, 1);
        tally.add(|t| &t.ops, 1);
        if outcome == Restart::Moved {
            tally.add(|t| &t.moved, 1);
        }
        match self.rng.below(100) {
            0..=24 => {
                let deadline = self
                    .service
                    .start(DEADLINE, move |_| {
                        if now_ns() < now + DEADLINE.as_nanos() as u64 {
                            tally.add(|t| &t.early, 1);
                        }
                        tally.add(|t| &t.fired, 1);
                        tally.add(|t| &t.deadline_fired, 1);
                    })
                    .expect("service running");
                self.outgoing.push(deadline);
                tally.add(|t| &t.started, 1);
                tally.add(|t| &t.armings, 1);
                tally.add(|t| &t.ops, 1);
            }
            25..=29 => self.send_segment(),
            _ => {}
        }
    }

    /// Arms a retransmission timer; it doubles its timeout up to 3 sends.
    fn send_segment(&mut self) {
        let tally = self.tally;
        let mut rto = Duration::from_micros(5_000 + self.rng.below(15_000));
        let mut due = now_ns() + rto.as_nanos() as u64;
        let mut sends = 1;
        let timer = self
            .service
            .start(rto, move |expiry| {
                if now_ns() < due {
                    tally.add(|t| &t.early, 1);
                }
                tally.add(|t| &t.fired, 1);
                tally.add(|t| &t.rtx_fired, 1);
                if sends < 3 {
                    sends += 1;
                    rto *= 2;
                    due = now_ns() + rto.as_nanos() as u64;
                    expiry.restart(rto).expect("service running");
                    tally.add(|t| &t.armings, 1);
                    tally.add(|t| &t.ops, 1);
                }
            })
            .expect("service running");
        tally.add(|t| &t.started, 1);
        tally.add(|t| &t.armings, 1);
        tally.add(|t| &t.ops, 1);
        let slot = self.rtx_next % RTX_RING;
        self.rtx_next += 1;
        if let Some(old) = self.rtx[slot].replace(timer) {
            self.ack(old);
        }
    }

    fn ack(&self, segment: Timer) {
        self.tally.add(|t| &t.ops, 1);
        if segment.stop() == Stop::Cancelled {
            self.tally.add(|t| &t.cancelled, 1);
            self.tally.add(|t| &t.rtx_acked, 1);
        }
    }

    /// Answers the previous worker's requests: stops their deadlines from
    /// this thread (they live on that worker's shard).
    fn answer(&mut self) {
        while let Ok(batch) = self.from_prev.try_recv() {
            for deadline in batch {
                if self.rng.below(LOST_EVERY) == 0 {
                    self.lost.push(deadline);
                    continue;
                }
                self.tally.add(|t| &t.ops, 1);
                if deadline.stop() == Stop::Cancelled {
                    self.tally.add(|t| &t.cancelled, 1);
                    self.tally.add(|t| &t.deadline_stopped, 1);
                }
            }
        }
    }

    fn flush_requests(&mut self) {
        if !self.outgoing.is_empty() {
            let batch = std::mem::take(&mut self.outgoing);
            self.to_next.send(batch).expect("next worker alive");
        }
    }

    fn run(&mut self, stop: &AtomicBool, rate_per_worker: u64) {
        let started = Instant::now();
        let mut packets = 0u64;
        while !stop.load(Relaxed) {
            self.answer();
            for _ in 0..BATCH {
                self.packet();
            }
            packets += BATCH as u64;
            self.flush_requests();
            self.shard.poll().expect("not inside a callback");
            if rate_per_worker > 0 {
                // Ahead of the offered load: park until the next batch is
                // due or a timer is (the waker cuts the park short).
                let due = Duration::from_secs_f64(packets as f64 / rate_per_worker as f64);
                let ahead = due.saturating_sub(started.elapsed());
                if !ahead.is_zero() {
                    let timers = self.shard.next_deadline().unwrap_or(Duration::MAX);
                    thread::park_timeout(ahead.min(timers));
                }
            }
        }
        self.flush_requests();
    }

    /// End of the run: stop everything this worker holds (a `Cancelled` stop
    /// here means the timer was still armed at the quiescent point).
    fn close_all(&mut self) {
        let tally = self.tally;
        let mut stop = |timer: Timer| {
            if timer.stop() == Stop::Cancelled {
                tally.add(|t| &t.cancelled, 1);
            }
        };
        self.idle.drain(..).for_each(&mut stop);
        self.rtx
            .iter_mut()
            .filter_map(Option::take)
            .for_each(&mut stop);
        self.lost.drain(..).for_each(&mut stop);
    }
}

fn main() {
    let options = parse_args();
    now_ns();
    let heap_before = LIVE.load(Relaxed);
    let threads = options.threads;
    let parked: &'static [OnceLock<Thread>] = leak((0..threads).map(|_| OnceLock::new()).collect());
    let service = TimerService::builder()
        .shards(threads)
        .tick(Duration::from_millis(1))
        .driver(Driver::Embedded)
        .waker(move |shard| {
            if let Some(worker) = parked[shard].get() {
                worker.unpark();
            }
        })
        .build()
        .expect("valid configuration");
    let tallies: &'static [Tally] = leak((0..threads).map(|_| Tally::default()).collect());
    let stop = &leak(Box::new([AtomicBool::new(false)]))[0];
    // Main and the workers meet at: ready, armed, and the quiescent points.
    let barrier = &leak(Box::new([Barrier::new(threads + 1)]))[0];
    let (senders, mut receivers): (Vec<_>, Vec<_>) = (0..threads).map(|_| channel()).unzip();
    receivers.rotate_right(1); // worker i answers worker i-1

    println!(
        "server: {} connections on {threads} workers (embedded shards), {} s, {}",
        options.connections,
        options.seconds,
        match options.rate {
            0 => "packets as fast as the workers go".to_string(),
            r => format!("{r} packets/s offered"),
        }
    );
    let rate_per_worker = options.rate.div_ceil(threads as u64);
    let workers: Vec<_> = senders
        .into_iter()
        .zip(receivers)
        .enumerate()
        .map(|(me, (to_next, from_prev))| {
            let service = service.clone();
            let share = options.connections / threads;
            thread::Builder::new()
                .name(format!("worker-{me}"))
                .spawn(move || {
                    parked[me].set(thread::current()).unwrap();
                    let shard = service.claim_shard(me).expect("one worker per shard");
                    let mut worker = Worker {
                        shard,
                        rng: Rng(0x5EED ^ me as u64),
                        tally: &tallies[me],
                        idle: Vec::with_capacity(share),
                        idle_armed_at: leak((0..share).map(|_| AtomicU64::new(0)).collect()),
                        rtx: (0..RTX_RING).map(|_| None).collect(),
                        rtx_next: 0,
                        outgoing: Vec::new(),
                        to_next,
                        from_prev,
                        lost: Vec::new(),
                        service,
                    };
                    barrier.wait(); // ready: main measures the heap
                    worker.open_connections();
                    worker.shard.poll().unwrap();
                    barrier.wait(); // armed: main measures again
                    barrier.wait(); // go
                    worker.run(stop, rate_per_worker);
                    barrier.wait(); // everyone stopped sending
                    worker.answer(); // the last requests
                    barrier.wait();
                    worker.shard.poll().unwrap(); // take in every stop
                    barrier.wait(); // quiescent: main checks
                    barrier.wait();
                    worker.close_all();
                    barrier.wait();
                    worker.shard.poll().unwrap(); // free what was dropped
                    barrier.wait(); // drained: main checks
                })
                .expect("spawn worker")
        })
        .collect();

    barrier.wait();
    let heap_ready = LIVE.load(Relaxed);
    barrier.wait();
    let heap_armed = LIVE.load(Relaxed);
    let armed_at_start = service.stats().armed;
    let bytes_per_timer = (heap_armed - heap_ready) as f64 / armed_at_start.max(1) as f64;
    println!(
        "armed {armed_at_start} idle timers: heap +{:.1} MiB, {bytes_per_timer:.0} bytes per armed timer",
        (heap_armed - heap_ready) as f64 / (1 << 20) as f64
    );
    barrier.wait();

    // Progress once a second.
    let began = Instant::now();
    let mut peak_armed = armed_at_start;
    let (mut last_ops, mut last_at) = (0, began);
    for second in 1..=options.seconds {
        while began.elapsed() < Duration::from_secs(second) {
            thread::sleep(Duration::from_millis(50));
            peak_armed = peak_armed.max(service.stats().armed);
        }
        let stats = service.stats();
        let ops = sum(tallies, |t| &t.ops);
        let rate = (ops - last_ops) as f64 / last_at.elapsed().as_secs_f64();
        (last_ops, last_at) = (ops, Instant::now());
        println!(
            "[{second:>3}s] {:>6.2} M ops/s  armed {:>8}  fired {:>9}  stopped {:>9}  lateness p99 {:?}",
            rate / 1e6,
            stats.armed,
            stats.fired,
            sum(tallies, |t| &t.cancelled),
            stats.lateness_p99,
        );
    }
    stop.store(true, Relaxed);
    for worker in parked {
        worker.get().expect("worker started").unpark();
    }
    let elapsed = began.elapsed();
    barrier.wait();
    barrier.wait();
    barrier.wait();

    // Quiescent: no worker polls, so nothing fires or moves.
    let mut broken = Vec::new();
    let stats = service.stats();
    let (armings, fired) = (sum(tallies, |t| &t.armings), sum(tallies, |t| &t.fired));
    let (cancelled, moved) = (sum(tallies, |t| &t.cancelled), sum(tallies, |t| &t.moved));
    if armings != fired + cancelled + moved + stats.armed {
        broken.push(format!(
            "armings {armings} != fired {fired} + cancelled {cancelled} + moved {moved} + armed {}",
            stats.armed
        ));
    }
    barrier.wait();
    barrier.wait();
    barrier.wait();
    let drained = service.stats();
    let cancelled = sum(tallies, |t| &t.cancelled);
    let started = sum(tallies, |t| &t.started);
    if armings != fired + cancelled + moved {
        broken.push(format!(
            "after closing: armings {armings} != fired {fired} + cancelled {cancelled} + moved {moved}"
        ));
    }
    if drained.fired != fired {
        broken.push(format!(
            "service fired {} but {fired} callbacks ran",
            drained.fired
        ));
    }
    if drained.armed != 0 || drained.freed != started {
        broken.push(format!(
            "not drained: {} armed, {} of {started} slots freed",
            drained.armed, drained.freed
        ));
    }
    let early = sum(tallies, |t| &t.early);
    if early != 0 {
        broken.push(format!("{early} timers fired early"));
    }
    for worker in workers {
        worker.join().expect("worker panicked");
    }
    let heap_peak = PEAK.load(Relaxed);
    service.shutdown();
    drop(service);
    let heap_after = LIVE.load(Relaxed);

    let ops = sum(tallies, |t| &t.ops);
    println!("\nreport ({elapsed:.1?}, {threads} workers)");
    println!(
        "  operations:   {ops} ({:.2} M/s): starts, restarts and stops",
        ops as f64 / elapsed.as_secs_f64() / 1e6
    );
    println!(
        "  fired:        {fired} (idle {}, request deadlines {}, retransmissions {})",
        sum(tallies, |t| &t.idle_fired),
        sum(tallies, |t| &t.deadline_fired),
        sum(tallies, |t| &t.rtx_fired)
    );
    println!(
        "  stopped:      {cancelled} (request deadlines from another worker {}, acked retransmissions {}, at shutdown {}); moved {moved}",
        sum(tallies, |t| &t.deadline_stopped),
        sum(tallies, |t| &t.rtx_acked),
        cancelled - sum(tallies, |t| &t.deadline_stopped) - sum(tallies, |t| &t.rtx_acked),
    );
    println!(
        "  lateness:     p50 {:?}  p99 {:?}  max {:?} (tick 1 ms; power-of-two buckets)",
        drained.lateness_p50, drained.lateness_p99, drained.lateness_max
    );
    println!("  peak armed:   {peak_armed} timers");
    println!(
        "  memory:       {bytes_per_timer:.0} bytes per armed timer (live heap / armed, idle timers); \
         slot {} bytes; {} slots ever allocated; heap peak {:.1} MiB",
        drained.slot_bytes,
        drained.slots,
        (heap_peak - heap_before) as f64 / (1 << 20) as f64
    );
    println!(
        "  heap after shutdown: {:+} bytes against before the service (not counting {} bytes of demo bookkeeping)",
        heap_after - heap_before - LEAKED.load(Relaxed),
        LEAKED.load(Relaxed)
    );
    if broken.is_empty() {
        println!("  invariants:   held (never early, exactly once, counts balance, drained)");
    } else {
        for problem in &broken {
            eprintln!("INVARIANT BROKEN: {problem}");
        }
        std::process::exit(1);
    }
}
