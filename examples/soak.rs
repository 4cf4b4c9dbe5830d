//! Soak: several threads churn timers for a given time and every invariant of
//! docs/VERIFYING.md is checked at quiescent points; live memory is printed once a
//! second. Exits non-zero on any violation, including memory that does not
//! return to its baseline at the end.
//!
//! ```text
//! cargo run --release --example soak -- --seconds 60 --workers 2 --remotes 2
//! ```
//!
//! Shape: `--workers` threads each own one embedded shard, poll it, and
//! start, stop and restart timers on every shard; `--remotes` threads own no
//! shard and do the same from outside. Timers are one-shot (short and long),
//! periodic, and some callbacks stop other threads' timers. Once a second
//! every thread meets at a barrier: no shard is polled then, so nothing fires
//! and the books must balance exactly:
//!
//! * per one-shot timer: armings (start, `Rearmed`) = fires + `Cancelled` stops
//!   + (1 if still armed): no lost, doubled or cancelled-then-run arming;
//! * every fire is at or after `start time + delay` (never early) and on its
//!   own deadline tick; a stopped periodic timer does not fire again;
//! * at the end, with every handle dropped: no timer armed, every slot freed,
//!   and after the service is gone the live heap is back at its baseline.
//!
//! Lateness is reported, not asserted: on a loaded machine owners do fall behind.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use tickwheel::{Driver, Restart, Stop, Timer, TimerId, TimerService, TimerSpec};

/// The system allocator, counting live bytes.
struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);
static PEAK: AtomicI64 = AtomicI64::new(0);

// SAFETY: forwards every call to `System` unchanged; only adds counters.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size() as i64, SeqCst) + layout.size() as i64;
            PEAK.fetch_max(live, SeqCst);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as i64, SeqCst);
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size() as i64, SeqCst) + layout.size() as i64;
            PEAK.fetch_max(live, SeqCst);
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded; `ptr` and `layout` come from this allocator.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            let delta = new_size as i64 - layout.size() as i64;
            let live = LIVE.fetch_add(delta, SeqCst) + delta;
            PEAK.fetch_max(live, SeqCst);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const TICK: Duration = Duration::from_millis(1);

struct Args {
    seconds: u64,
    workers: usize,
    remotes: usize,
    timers: usize,
    seed: u64,
}

fn parse_args() -> Args {
    let mut args = Args {
        seconds: 60,
        workers: 2,
        remotes: 2,
        timers: 20_000,
        seed: 0x5eed,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || -> u64 {
            it.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| usage(&flag))
        };
        match flag.as_str() {
            "--seconds" => args.seconds = value(),
            "--workers" => args.workers = value().max(1) as usize,
            "--remotes" => args.remotes = value() as usize,
            "--timers" => args.timers = value().max(16) as usize,
            "--seed" => args.seed = value(),
            _ => usage(&flag),
        }
    }
    args
}

fn usage(flag: &str) -> ! {
    eprintln!(
        "soak: bad argument {flag:?}\nusage: soak [--seconds N] [--workers N] [--remotes N] \
         [--timers N (per thread)] [--seed N]"
    );
    std::process::exit(2)
}

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What one timer went through. Only its creator starts, restarts and drops
/// it; anyone may stop a one-shot timer.
struct Label {
    periodic: bool,
    id: AtomicU64,
    /// Nanoseconds since `World::origin` before which no pending arming may
    /// fire: the lowest bound of any arming that may still fire or be running.
    not_before: AtomicU64,
    /// The bound of the latest arming; becomes `not_before` at the next
    /// quiescent point (a callback of an older arming may still be running
    /// until then, so raising it at once would be a false alarm).
    latest: AtomicU64,
    armings: AtomicU64,
    fires: AtomicU64,
    cancels: AtomicU64,
    /// Periodic: stopped by its creator (and not restarted since).
    stopped: AtomicBool,
    /// Periodic: fires seen at the first quiescent point after the stop.
    frozen: AtomicU64,
}

const UNFROZEN: u64 = u64::MAX;

impl Label {
    fn record_stop(&self, outcome: Stop) {
        if outcome == Stop::Cancelled {
            self.cancels.fetch_add(1, SeqCst);
        }
    }
}

struct World {
    origin: Instant,
    violations: AtomicU64,
    started: AtomicU64,
    ops: AtomicU64,
    /// One-shot timers that callbacks may stop (a ring, overwritten as it goes).
    victims: Vec<Mutex<Option<Arc<Label>>>>,
    victim_cursor: AtomicUsize,
    stop: AtomicBool,
}

impl World {
    fn now_nanos(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    fn violation(&self, what: String) {
        if self.violations.fetch_add(1, SeqCst) < 20 {
            eprintln!("VIOLATION: {what}");
        }
    }
}

fn callback(
    world: Arc<World>,
    label: Arc<Label>,
    stops_other: bool,
) -> impl FnMut(&mut tickwheel::Expiry<'_>) + Send + 'static {
    move |e| {
        let now = world.now_nanos();
        let not_before = label.not_before.load(SeqCst);
        if now < not_before {
            world.violation(format!("{:?} fired {} ns early", e.id(), not_before - now));
        }
        if e.now_tick() != e.deadline_tick() || e.poll_tick() < e.deadline_tick() {
            world.violation(format!(
                "{:?}: deadline {} now {} poll {}",
                e.id(),
                e.deadline_tick(),
                e.now_tick(),
                e.poll_tick()
            ));
        }
        label.fires.fetch_add(1, SeqCst);
        if stops_other {
            let n = world.victims.len();
            let pick = (e.id().to_raw() as usize).wrapping_mul(31) % n;
            let victim = world.victims[pick].lock().unwrap().clone();
            if let Some(victim) = victim {
                let id = TimerId::from_raw(victim.id.load(SeqCst));
                victim.record_stop(e.stop_id(id));
            }
        }
    }
}

/// One churning thread: its handles and the shard it owns, if any.
struct Churner {
    service: TimerService,
    world: Arc<World>,
    rng: Rng,
    capacity: usize,
    handles: Vec<(Arc<Label>, Timer)>,
}

impl Churner {
    fn delay(&mut self) -> Duration {
        match self.rng.below(10) {
            0 => Duration::ZERO,
            1..=5 => Duration::from_micros(self.rng.below(20_000)),
            6..=7 => Duration::from_millis(20 + self.rng.below(500)),
            _ => Duration::from_secs(60 + self.rng.below(3600)),
        }
    }

    fn op(&mut self) {
        self.world.ops.fetch_add(1, SeqCst);
        if self.handles.len() < self.capacity && self.rng.below(3) == 0 {
            return self.start();
        }
        if self.handles.is_empty() {
            return self.start();
        }
        let i = self.rng.below(self.handles.len() as u64) as usize;
        match self.rng.below(10) {
            0..=3 => {
                let delay = self.delay();
                let (label, timer) = &self.handles[i];
                let not_before = self.world.now_nanos() + delay.as_nanos() as u64;
                label.not_before.fetch_min(not_before, SeqCst);
                match timer.restart(delay) {
                    Ok(Restart::Rearmed) => {
                        label.armings.fetch_add(1, SeqCst);
                    }
                    Ok(Restart::Moved) => {}
                    Err(e) => self.world.violation(format!("restart failed: {e:?}")),
                }
                label.latest.store(not_before, SeqCst);
                if label.periodic {
                    label.stopped.store(false, SeqCst);
                    label.frozen.store(UNFROZEN, SeqCst);
                }
            }
            4..=6 => {
                let (label, timer) = &self.handles[i];
                label.record_stop(timer.stop());
                if label.periodic {
                    label.stopped.store(true, SeqCst);
                }
            }
            _ => {
                // Stop first (an armed handle dropped is cancelled silently),
                // then drop the handle: its slot must be reclaimed.
                let (label, timer) = self.handles.swap_remove(i);
                label.record_stop(timer.stop());
                drop(timer);
            }
        }
    }

    fn start(&mut self) {
        let periodic = self.rng.below(20) == 0;
        let delay = self.delay();
        let delay = if periodic {
            delay.clamp(TICK, Duration::from_millis(50))
        } else {
            delay
        };
        let stops_other = self.rng.below(8) == 0;
        let label = Arc::new(Label {
            periodic,
            id: AtomicU64::new(0),
            not_before: AtomicU64::new(self.world.now_nanos() + delay.as_nanos() as u64),
            latest: AtomicU64::new(0),
            armings: AtomicU64::new(1),
            fires: AtomicU64::new(0),
            cancels: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
            frozen: AtomicU64::new(UNFROZEN),
        });
        let shard = self.rng.below(self.service.shard_count() as u64) as usize;
        let spec = TimerSpec::after(delay).on_shard(shard);
        let spec = if periodic { spec.every(delay) } else { spec };
        let cb = callback(self.world.clone(), label.clone(), stops_other);
        let timer = match self.service.schedule(spec, cb) {
            Ok(timer) => timer,
            Err(e) => return self.world.violation(format!("start failed: {e:?}")),
        };
        self.world.started.fetch_add(1, SeqCst);
        label.id.store(timer.id().to_raw(), SeqCst);
        if !periodic {
            let n = self.world.victims.len();
            let at = self.world.victim_cursor.fetch_add(1, SeqCst) % n;
            *self.world.victims[at].lock().unwrap() = Some(label.clone());
        }
        self.handles.push((label, timer));
    }

    /// At a quiescent point: check this thread's timers. Returns armed count.
    fn audit(&self) -> u64 {
        let mut armed = 0;
        for (label, timer) in &self.handles {
            // Nothing runs now: only the latest arming can fire from here on.
            label
                .not_before
                .fetch_max(label.latest.load(SeqCst), SeqCst);
            let is_armed = timer.is_armed();
            armed += u64::from(is_armed);
            let fires = label.fires.load(SeqCst);
            if label.periodic {
                if label.stopped.load(SeqCst) {
                    let frozen = label.frozen.load(SeqCst);
                    if frozen == UNFROZEN {
                        label.frozen.store(fires, SeqCst);
                    } else if frozen != fires {
                        self.world.violation(format!(
                            "{:?}: stopped periodic fired again ({frozen} -> {fires})",
                            timer.id()
                        ));
                    }
                }
                continue;
            }
            let (armings, cancels) = (label.armings.load(SeqCst), label.cancels.load(SeqCst));
            if armings != fires + cancels + u64::from(is_armed) {
                self.world.violation(format!(
                    "{:?}: armings {armings} != fires {fires} + cancels {cancels} + armed {}",
                    timer.id(),
                    u64::from(is_armed)
                ));
            }
        }
        armed
    }

    /// The end: stop and drop every handle, checking the books one last time.
    fn finish(&mut self) {
        for (label, timer) in self.handles.drain(..) {
            label.record_stop(timer.stop());
            if !label.periodic {
                let (a, f, c) = (
                    label.armings.load(SeqCst),
                    label.fires.load(SeqCst),
                    label.cancels.load(SeqCst),
                );
                if a != f + c {
                    self.world.violation(format!(
                        "{:?} at the end: armings {a} != fires {f} + cancels {c}",
                        timer.id()
                    ));
                }
            }
        }
    }
}

fn main() {
    let args = parse_args();
    // Warm up what the runtime allocates once (stdout buffer, thread names).
    println!(
        "soak: {} s, {} workers (one embedded shard each), {} remote threads, \
         up to {} timers per thread, seed {}",
        args.seconds, args.workers, args.remotes, args.timers, args.seed
    );
    let baseline = LIVE.load(SeqCst);
    let threads = args.workers + args.remotes;
    let (total_started, final_stats) = {
        let service = TimerService::builder()
            .shards(args.workers)
            .tick(TICK)
            .driver(Driver::Embedded)
            .build()
            .expect("service");
        let world = Arc::new(World {
            origin: Instant::now(),
            violations: AtomicU64::new(0),
            started: AtomicU64::new(0),
            ops: AtomicU64::new(0),
            victims: (0..1024).map(|_| Mutex::new(None)).collect(),
            victim_cursor: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        // Two barriers per checkpoint: "everyone paused" and "audit done".
        let barrier = Arc::new(Barrier::new(threads + 1));
        let armed_total = Arc::new(AtomicU64::new(0));
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (service, world, barrier, armed_total) = (
                    service.clone(),
                    world.clone(),
                    barrier.clone(),
                    armed_total.clone(),
                );
                let (seed, capacity) = (args.seed.wrapping_add(t as u64 * 7919) | 1, args.timers);
                let owns = (t < args.workers).then_some(t);
                std::thread::Builder::new()
                    .name(format!("soak-{t}"))
                    .spawn(move || {
                        let mut guard = owns.map(|s| service.claim_shard(s).expect("claim"));
                        let mut churner = Churner {
                            service,
                            world,
                            rng: Rng(seed),
                            capacity,
                            handles: Vec::new(),
                        };
                        let mut next_check = Instant::now() + Duration::from_secs(1);
                        loop {
                            for _ in 0..64 {
                                churner.op();
                            }
                            if let Some(guard) = guard.as_mut() {
                                guard.poll().expect("poll");
                            }
                            if Instant::now() >= next_check {
                                next_check += Duration::from_secs(1);
                                barrier.wait(); // everyone paused: nothing fires now
                                armed_total.fetch_add(churner.audit(), SeqCst);
                                barrier.wait(); // audits done
                                barrier.wait(); // report printed; go on or stop
                                if churner.world.stop.load(SeqCst) {
                                    break;
                                }
                            }
                        }
                        churner.finish();
                        // Reclaim what this thread's stops freed on its shard.
                        if let Some(guard) = guard.as_mut() {
                            guard.poll().expect("poll");
                        }
                        drop(guard);
                    })
                    .expect("spawn")
            })
            .collect();

        let began = Instant::now();
        let mut last_ops = 0;
        for second in 1..=args.seconds.max(1) {
            barrier.wait();
            barrier.wait();
            let armed = armed_total.swap(0, SeqCst);
            let ops = world.ops.load(SeqCst);
            let stats = service.stats();
            println!(
                "t={:>4}s live={:>8} KiB peak={:>8} KiB armed={:>7} started={:>10} fired={:>10} \
                 ops/s={:>8} slots={} late p99={:?} max={:?} violations={}",
                second,
                (LIVE.load(SeqCst) - baseline) / 1024,
                (PEAK.load(SeqCst) - baseline) / 1024,
                armed,
                world.started.load(SeqCst),
                stats.fired,
                ops - last_ops,
                stats.slots,
                stats.lateness_p99,
                stats.lateness_max,
                world.violations.load(SeqCst),
            );
            last_ops = ops;
            if second >= args.seconds || began.elapsed() >= Duration::from_secs(args.seconds) {
                world.stop.store(true, SeqCst);
            }
            barrier.wait();
            if world.stop.load(SeqCst) {
                break;
            }
        }
        for h in handles {
            if h.join().is_err() {
                world.violation("a soak thread panicked".to_owned());
            }
        }
        // Every handle is gone; whatever a worker's last poll did not see
        // (stops sent to another shard after its owner left) is settled here.
        for shard in 0..service.shard_count() {
            let mut guard = service.claim_shard(shard).expect("claim after join");
            guard.poll().expect("poll");
        }
        let stats = service.stats();
        let started = world.started.load(SeqCst);
        if stats.armed != 0 || stats.freed != started {
            world.violation(format!(
                "after every handle was dropped: armed {} (want 0), freed {} (want {started})",
                stats.armed, stats.freed
            ));
        }
        let violations = world.violations.load(SeqCst);
        drop(service);
        (started, (stats, violations))
    };
    let (stats, mut violations) = final_stats;
    // The service and every thread are gone: the heap must be back where it was.
    let leaked = LIVE.load(SeqCst) - baseline;
    println!(
        "soak: done. started {total_started} timers, fired {}, panics {}, slots {} \
         ({} B each), lateness p50 {:?} p99 {:?} max {:?}; live heap vs baseline: {leaked} B",
        stats.fired,
        stats.panics,
        stats.slots,
        stats.slot_bytes,
        stats.lateness_p50,
        stats.lateness_p99,
        stats.lateness_max,
    );
    if leaked != 0 {
        eprintln!("VIOLATION: {leaked} bytes still live after the service was dropped");
        violations += 1;
    }
    if violations > 0 {
        eprintln!("soak: FAILED with {violations} violation(s)");
        std::process::exit(1);
    }
    println!("soak: OK, no violations");
}
