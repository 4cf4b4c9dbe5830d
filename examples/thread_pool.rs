//! A thread pool whose workers each own one timer shard (`Driver::Embedded`).
//!
//! Every worker loops: run queued jobs, `poll()` its shard (which runs due
//! timer callbacks on this thread), then park until `next_deadline()`. The
//! service's waker unparks worker `i` when another thread starts a timer on
//! shard `i` that is due before the worker planned to wake.
//!
//! The workload: each worker sends requests. A request arms a *timeout* on
//! the next worker's shard and a *response* timer on its own; when the
//! response arrives first, the worker stops the timeout across shards
//! (`Stop::Cancelled`), otherwise the timeout fires. Exactly one of the two
//! must happen, and a timeout must never fire early.
//!
//! Run: `cargo run --release --example thread_pool`

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, OnceLock};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use tickwheel::{Driver, Expiry, Stop, TimerService, TimerSpec};

const REQUESTS_PER_WORKER: u64 = 20_000;
const TIMEOUT: Duration = Duration::from_millis(20);

type Job = Box<dyn FnOnce() + Send>;

/// `answered`: stop() returned Cancelled, so the timeout will not fire;
/// `late_answers`: stop() returned Fired or Running; `broken`: violations.
#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    answered: AtomicU64,
    timed_out: AtomicU64,
    late_answers: AtomicU64,
    broken: AtomicU64,
}

/// Wakes worker `i` (the service's waker, and job submission, call this).
fn unpark(parked: &[OnceLock<Thread>], i: usize) {
    if let Some(worker) = parked[i].get() {
        worker.unpark();
    }
}

fn main() {
    let workers = thread::available_parallelism()
        .map_or(2, |n| n.get())
        .max(2);
    let parked: Arc<Vec<OnceLock<Thread>>> =
        Arc::new((0..workers).map(|_| OnceLock::new()).collect());
    let wake = parked.clone();
    let service = TimerService::builder()
        .shards(workers)
        .tick(Duration::from_micros(500))
        .driver(Driver::Embedded)
        .waker(move |shard| unpark(&wake, shard))
        .build()
        .expect("valid configuration");

    let counters = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let (senders, receivers): (Vec<Sender<Job>>, Vec<Receiver<Job>>) =
        (0..workers).map(|_| channel()).unzip();

    let threads: Vec<_> = receivers
        .into_iter()
        .enumerate()
        .map(|(me, jobs)| {
            let (service, parked, stop) = (service.clone(), parked.clone(), stop.clone());
            thread::Builder::new()
                .name(format!("worker-{me}"))
                .spawn(move || {
                    parked[me].set(thread::current()).unwrap();
                    let mut shard = service.claim_shard(me).expect("one worker per shard");
                    while !stop.load(SeqCst) {
                        while let Ok(job) = jobs.try_recv() {
                            job();
                        }
                        shard.poll().expect("not inside a callback");
                        // Sleep until the next timer is due (or until woken).
                        match shard.next_deadline() {
                            Some(wait) => thread::park_timeout(wait),
                            None => thread::park(),
                        }
                    }
                })
                .unwrap()
        })
        .collect();

    // Each worker sends a batch of requests every millisecond from a timer on
    // its own shard that re-arms itself until its share is sent. Callbacks
    // act on the service through `Expiry`, so they do not capture it.
    for (me, jobs) in senders.iter().enumerate() {
        let (service, counters) = (service.clone(), counters.clone());
        let job: Job = Box::new(move || {
            let (mut seed, mut sent) = (me as u64 * 7919 + 1, 0);
            let batches = move |expiry: &mut Expiry<'_>| {
                for _ in 0..40.min(REQUESTS_PER_WORKER - sent) {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    // Responses take 0-25 ms, so about one in five is late.
                    let response = Duration::from_micros(seed % 25_000);
                    send_request(expiry, &counters, workers, response);
                    sent += 1;
                }
                if sent < REQUESTS_PER_WORKER {
                    expiry.restart(Duration::from_millis(1)).expect("running");
                }
            };
            let spec = TimerSpec::after(Duration::ZERO).on_shard(me);
            service.schedule(spec, batches).expect("running").forget();
        });
        jobs.send(job).unwrap();
        unpark(&parked, me);
    }

    let total = REQUESTS_PER_WORKER * workers as u64;
    let started = Instant::now();
    let resolved = || counters.answered.load(SeqCst) + counters.late_answers.load(SeqCst);
    while resolved() < total && started.elapsed() < Duration::from_secs(60) {
        thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, SeqCst);
    (0..workers).for_each(|worker| unpark(&parked, worker));
    threads.into_iter().for_each(|t| t.join().unwrap());

    let c = &*counters;
    let stats = service.stats();
    println!(
        "{workers} workers, {} requests in {:.2?}",
        c.sent.load(SeqCst),
        started.elapsed()
    );
    println!(
        "  answered in time (timeout cancelled across shards): {}",
        c.answered.load(SeqCst)
    );
    println!(
        "  timed out: {} (late answers saw Fired/Running: {})",
        c.timed_out.load(SeqCst),
        c.late_answers.load(SeqCst)
    );
    println!(
        "  timers fired {}, lateness p50 {:?} p99 {:?} max {:?}",
        stats.fired, stats.lateness_p50, stats.lateness_p99, stats.lateness_max
    );
    service.shutdown();

    let ok = c.sent.load(SeqCst) == total
        && resolved() == total
        && c.timed_out.load(SeqCst) == c.late_answers.load(SeqCst)
        && c.broken.load(SeqCst) == 0;
    if !ok {
        eprintln!(
            "INVARIANT BROKEN: {} violations, counts above do not balance",
            c.broken.load(SeqCst)
        );
        std::process::exit(1);
    }
    println!("invariants held: every request answered or timed out, exactly once, never early");
}

/// Arms a timeout on the next worker's shard and a response on our own; the
/// response (a callback on this worker) stops the timeout across shards.
fn send_request(
    expiry: &mut Expiry<'_>,
    counters: &Arc<Counters>,
    workers: usize,
    after: Duration,
) {
    let (me, sent_at) = (expiry.shard(), Instant::now());
    let fired = Arc::new(AtomicBool::new(false));
    let (flag, c) = (fired.clone(), counters.clone());
    let on_peer = TimerSpec::after(TIMEOUT).on_shard((me + 1) % workers);
    let timeout = expiry
        .schedule(on_peer, move |_| {
            if sent_at.elapsed() < TIMEOUT || flag.swap(true, SeqCst) {
                c.broken.fetch_add(1, SeqCst); // early, or fired twice
            }
            c.timed_out.fetch_add(1, SeqCst);
        })
        .expect("running");
    let (c, mut timeout) = (counters.clone(), Some(timeout));
    let respond = move |_: &mut Expiry<'_>| {
        let Some(timeout) = timeout.take() else {
            return;
        };
        match timeout.stop() {
            Stop::Cancelled if fired.load(SeqCst) => c.broken.fetch_add(1, SeqCst),
            Stop::Cancelled => c.answered.fetch_add(1, SeqCst),
            Stop::Fired | Stop::Running => c.late_answers.fetch_add(1, SeqCst),
            Stop::Inactive => c.broken.fetch_add(1, SeqCst),
        };
    };
    let response = expiry
        .schedule(TimerSpec::after(after), respond)
        .expect("running");
    response.forget();
    counters.sent.fetch_add(1, SeqCst);
}
