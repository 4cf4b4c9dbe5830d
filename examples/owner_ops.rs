//! The owner's hot paths, timed in a plain loop: START + `Timer::cancel`, or
//! RESTART of one of 100,000 idle timeouts, on the thread that owns the
//! shard (an embedded worker polling every 64 operations).
//! `start-cancel-capture16` is START + cancel with a closure that captures
//! 16 bytes (two `u64`) instead of nothing.
//!
//! The criterion rows `service_vs_tokio/owner_start_cancel` and
//! `service_vs_tokio/restart_owner` (`benches/service_vs_tokio.rs`) measure
//! the same work beside tokio and a mutex; this program exists because on a
//! shared, noisy machine a long single-threaded loop, run several times
//! alternately against another build, separates a 10 % change from the
//! noise better than they do.
//!
//! `remote-start-cancel` is the same START + cancel from threads that own no
//! shard (`Driver::Threads`, one shard per thread; each thread's timers go
//! to a shard of its own, whose driver sleeps and lends it): the row
//! `service_vs_tokio/nonowner_start_cancel`. The last argument is the thread
//! count.
//!
//! `restart` keeps `OWNER_OPS_TIMERS` idle timeouts (100,000 unless set);
//! with 1,000 they stay in cache and the run shows the restart's own
//! work without the two cache misses of reaching a timer.
//!
//! `sleep-poll-drop` is START + cancel as a `Sleep` future: made, polled
//! once (it registers) and dropped (the row
//! `service_vs_tokio/sleep_poll_drop`).
//!
//! `sleep-reset` is `restart` on `Sleep` futures (each polled once, so
//! registered): `Sleep::reset_after`, the row
//! `service_vs_tokio/sleep_reset`.
//!
//! `remote-restart` is `restart` from threads that own no shard (driver
//! threads, one shard per thread; the row
//! `service_vs_tokio/restart_nonowner`). The last argument is the thread
//! count.
//!
//! `cross-stop` is START on the owner and STOP on another owner's thread,
//! each thread handing its batches to the next in a ring
//! (`service_vs_tokio/cross_stop/tickwheel-embedded/{threads}`; 2 threads
//! unless a count follows). Its time is per operation per thread.
//! `cross-stop-mutex` runs the same ring on a `Mutex<Wheel>` per thread.
//!
//! ```sh
//! cargo run --release --example owner_ops -- start-cancel 1000000
//! cargo run --release --example owner_ops -- start-cancel-capture16 1000000
//! cargo run --release --example owner_ops -- restart 500000
//! cargo run --release --example owner_ops -- sleep-poll-drop 1000000
//! cargo run --release --example owner_ops -- sleep-reset 500000
//! cargo run --release --example owner_ops -- remote-start-cancel 1000000 2
//! cargo run --release --example owner_ops -- remote-restart 3000000 1
//! cargo run --release --example owner_ops -- cross-stop 2000000 8
//! cargo run --release --example owner_ops -- cross-stop-mutex 2000000 8
//! ```

use std::future::Future;
use std::hint::black_box;
use std::time::{Duration, Instant};

use tickwheel::{Driver, TimerService};

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "start-cancel".into());
    let ops: u64 = match args.next().map(|n| n.parse()) {
        None => 1_000_000,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => usage("the operation count must be a positive integer"),
    };
    if mode == "remote-restart" || mode == "remote-start-cancel" || mode.starts_with("cross-stop") {
        let threads: usize = match args.next().map(|n| n.parse()) {
            None if mode.starts_with("cross-stop") => 2,
            None => 1,
            Some(Ok(n)) if n > 0 => n,
            Some(_) => usage("the thread count must be a positive integer"),
        };
        if mode.starts_with("cross-stop") {
            if threads < 2 {
                usage("cross-stop needs at least 2 threads");
            }
            match mode.as_str() {
                "cross-stop" => cross_stop(ops, threads),
                "cross-stop-mutex" => cross_stop_mutex(ops, threads),
                _ => usage("mode: cross-stop | cross-stop-mutex"),
            }
        } else if mode == "remote-restart" {
            remote_restart(ops, threads);
        } else {
            remote_start_cancel(ops, threads);
        }
        return;
    }
    let service = TimerService::builder()
        .shards(1)
        .driver(Driver::Embedded)
        .build()
        .expect("an embedded service");
    let mut guard = service.claim_shard(0).expect("shard 0 is free");
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let begin = Instant::now();
    match mode.as_str() {
        "start-cancel" => {
            for i in 0..ops {
                let delay = Duration::from_millis(1 + next() % 1000);
                let timer = service.start(delay, |_| {}).expect("running service");
                black_box(timer.cancel());
                if i % 64 == 0 {
                    black_box(guard.poll().expect("owner"));
                }
            }
        }
        "start-cancel-capture16" => {
            for i in 0..ops {
                let delay = Duration::from_millis(1 + next() % 1000);
                let captured = (i, delay.as_millis() as u64);
                let timer = service
                    .start(delay, move |_| {
                        black_box(captured);
                    })
                    .expect("running service");
                black_box(timer.cancel());
                if i % 64 == 0 {
                    black_box(guard.poll().expect("owner"));
                }
            }
        }
        "restart" => {
            let idle = Duration::from_secs(30);
            let count: usize = std::env::var("OWNER_OPS_TIMERS")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(100_000);
            let timers: Vec<_> = (0..count)
                .map(|_| service.start(idle, |_| {}).expect("running service"))
                .collect();
            let begin = Instant::now();
            for i in 0..ops {
                let timer = &timers[(next() % timers.len() as u64) as usize];
                black_box(timer.restart(idle).expect("running service"));
                if i % 64 == 0 {
                    black_box(guard.poll().expect("owner"));
                }
            }
            report(&mode, ops, begin);
            return;
        }
        "sleep-poll-drop" => {
            let waker = std::task::Waker::from(std::sync::Arc::new(NoWake));
            let mut cx = std::task::Context::from_waker(&waker);
            for i in 0..ops {
                let delay = Duration::from_millis(1 + next() % 1000);
                let mut sleep = service.sleep(delay);
                // The first poll registers it; the drop stops it.
                black_box(std::pin::Pin::new(&mut sleep).poll(&mut cx).is_pending());
                drop(sleep);
                if i % 64 == 0 {
                    black_box(guard.poll().expect("owner"));
                }
            }
        }
        "sleep-reset" => {
            let idle = Duration::from_secs(30);
            let count: usize = std::env::var("OWNER_OPS_TIMERS")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(100_000);
            let waker = std::task::Waker::from(std::sync::Arc::new(NoWake));
            let mut cx = std::task::Context::from_waker(&waker);
            let mut sleeps: Vec<_> = (0..count)
                .map(|_| {
                    let mut sleep = service.sleep(idle);
                    // The first poll registers it.
                    assert!(std::pin::Pin::new(&mut sleep).poll(&mut cx).is_pending());
                    sleep
                })
                .collect();
            let begin = Instant::now();
            for i in 0..ops {
                let len = sleeps.len() as u64;
                let sleep = &mut sleeps[(next() % len) as usize];
                sleep.reset_after(idle);
                if i % 64 == 0 {
                    black_box(guard.poll().expect("owner"));
                }
            }
            report(&mode, ops, begin);
            return;
        }
        _ => usage(
            "mode: start-cancel | start-cancel-capture16 | restart | sleep-poll-drop | sleep-reset | remote-start-cancel | remote-restart | cross-stop",
        ),
    }
    report(&mode, ops, begin);
}

/// RESTART of a random one of `OWNER_OPS_TIMERS` (100,000) idle timeouts,
/// `ops` times on each of `threads` threads that own no shard (the row
/// `service_vs_tokio/restart_nonowner`); reports wall time per restart per
/// thread, measured after the timeouts are started.
fn remote_restart(ops: u64, threads: usize) {
    let service = TimerService::builder()
        .shards(threads)
        .driver(Driver::Threads { pin: false })
        .build()
        .expect("a service with driver threads");
    let count: usize = std::env::var("OWNER_OPS_TIMERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000);
    let ready = std::sync::Barrier::new(threads + 1);
    let go = std::sync::Barrier::new(threads + 1);
    let idle = Duration::from_secs(30);
    let begin = std::thread::scope(|scope| {
        for t in 0..threads {
            let (service, ready, go) = (&service, &ready, &go);
            scope.spawn(move || {
                let timers: Vec<_> = (0..count)
                    .map(|_| service.start(idle, |_| {}).expect("running service"))
                    .collect();
                let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ t as u64;
                ready.wait();
                go.wait();
                for _ in 0..ops {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let timer = &timers[(rng % timers.len() as u64) as usize];
                    black_box(timer.restart(idle).expect("running service"));
                }
            });
        }
        ready.wait();
        let begin = Instant::now();
        go.wait();
        begin
    });
    report(&format!("remote-restart, {threads} threads"), ops, begin);
}

/// START + cancel of a timer due in 1 to 1000 ms, `ops` times on each of
/// `threads` threads that own no shard; reports wall time per operation
/// per thread.
fn remote_start_cancel(ops: u64, threads: usize) {
    let service = TimerService::builder()
        .shards(threads)
        .driver(Driver::Threads { pin: false })
        // `TICKWHEEL_LEND=0`: the driver threads never lend their shards
        // (`Builder::lend_while_idle`), to compare the two.
        .lend_while_idle(std::env::var("TICKWHEEL_LEND").map_or(true, |v| v != "0"))
        .build()
        .expect("a service with driver threads");
    let start = std::sync::Barrier::new(threads + 1);
    let begin = std::thread::scope(|scope| {
        for t in 0..threads {
            let (service, start) = (&service, &start);
            scope.spawn(move || {
                let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ t as u64;
                start.wait();
                for _ in 0..ops {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let delay = Duration::from_millis(1 + rng % 1000);
                    let timer = service.start(delay, |_| {}).expect("running service");
                    black_box(timer.cancel());
                }
            });
        }
        start.wait();
        Instant::now()
    });
    report(
        &format!("remote-start-cancel, {threads} threads"),
        ops,
        begin,
    );
}

/// Two threads, each owning one shard of an embedded service: each starts
/// batches of 256 timers on its own shard, hands each batch to the other
/// thread and stops the batches handed to it (four in flight per thread),
/// polling once a batch: every STOP comes from the thread that does not own
/// the timer. The shape of `service_vs_tokio/cross_stop/tickwheel-embedded/{threads}`,
/// in one long run to alternate against another build; reports wall time per
/// START + STOP pair per thread, and how often a thread found no batch
/// waiting for it (many: the threads did not keep pace with each other; on
/// this 2-core guest the same binary runs in two modes, with every phase,
/// the purely local START included, twice as slow in one of them, and the
/// waits tens of times per round).
fn cross_stop(ops: u64, threads: usize) {
    let service = TimerService::builder()
        .shards(threads)
        .driver(Driver::Embedded)
        .build()
        .expect("an embedded service");
    ring(
        "cross-stop",
        ops,
        threads,
        |t| service.claim_shard(t).expect("shard is free"),
        |_, delay| service.start(delay, |_| {}).expect("running service"),
        |_, timer: tickwheel::Timer| {
            black_box(timer.cancel());
        },
        |guard| {
            black_box(guard.poll().expect("owner"));
        },
    );
}

/// `cross-stop-mutex`: the same ring on the peer it is measured against, a
/// `Mutex<Wheel>` per thread (`service_vs_tokio/cross_stop/sharded-mutex-wheel`),
/// so that the two run as whole programs (`farm-bench`) or under callgrind
/// side by side.
fn cross_stop_mutex(ops: u64, threads: usize) {
    use std::sync::Mutex;
    use tickwheel::wheel::{TimerKey, Wheel};
    let wheels: Vec<crossbeam_utils::CachePadded<Mutex<Wheel<usize>>>> = (0..threads)
        .map(|_| crossbeam_utils::CachePadded::new(Mutex::new(Wheel::new())))
        .collect();
    ring(
        "cross-stop-mutex",
        ops,
        threads,
        |t| t,
        |&mut t, delay| {
            (
                t,
                wheels[t]
                    .lock()
                    .unwrap()
                    .insert(delay.as_millis() as u64, 0),
            )
        },
        |_, (shard, key): (usize, TimerKey)| {
            black_box(wheels[shard].lock().unwrap().cancel(key));
        },
        |_| {},
    );
}

/// The cross-stop ring: `threads` threads, each with its `local` state,
/// starting batches, handing them to the next thread and stopping the
/// batches handed to it, then calling `poll`.
fn ring<L, K: Send>(
    mode: &str,
    ops: u64,
    threads: usize,
    local: impl Fn(usize) -> L + Sync,
    start: impl Fn(&mut L, Duration) -> K + Sync,
    stop: impl Fn(&mut L, K) + Sync,
    poll: impl Fn(&mut L) + Sync,
) {
    use std::collections::VecDeque;
    use std::sync::Mutex;
    const BATCH: usize = 256;
    const DEPTH: usize = 4;
    let mail: Vec<Mutex<VecDeque<Vec<K>>>> = (0..threads).map(|_| Mutex::default()).collect();
    let rounds = ops.div_ceil(BATCH as u64);
    let barrier = std::sync::Barrier::new(threads + 1);
    let waits = std::sync::atomic::AtomicU64::new(0);
    // Time inside the owners' polls, which take in the other thread's stops.
    let polling = std::sync::atomic::AtomicU64::new(0);
    let begin = std::thread::scope(|scope| {
        for t in 0..threads {
            let (barrier, mail, waits, polling) = (&barrier, &mail, &waits, &polling);
            let (local, start, stop, poll) = (&local, &start, &stop, &poll);
            scope.spawn(move || {
                let mut mine_local = local(t);
                let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ t as u64;
                let mut batch = |l: &mut L| -> Vec<K> {
                    (0..BATCH)
                        .map(|_| {
                            rng ^= rng << 13;
                            rng ^= rng >> 7;
                            rng ^= rng << 17;
                            start(l, Duration::from_millis(1 + rng % 1000))
                        })
                        .collect()
                };
                for _ in 0..DEPTH {
                    let first = batch(&mut mine_local);
                    mail[(t + 1) % threads].lock().unwrap().push_back(first);
                }
                barrier.wait();
                for _ in 0..rounds {
                    let next = batch(&mut mine_local);
                    mail[(t + 1) % threads].lock().unwrap().push_back(next);
                    let mine = loop {
                        if let Some(mine) = mail[t].lock().unwrap().pop_front() {
                            break mine;
                        }
                        waits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        std::thread::yield_now();
                    };
                    for key in mine {
                        stop(&mut mine_local, key);
                    }
                    let began = Instant::now();
                    poll(&mut mine_local);
                    polling.fetch_add(
                        began.elapsed().as_nanos() as u64,
                        std::sync::atomic::Ordering::Relaxed,
                    );
                }
                barrier.wait();
                mail[t].lock().unwrap().clear();
            });
        }
        barrier.wait();
        let begin = Instant::now();
        barrier.wait();
        begin
    });
    report(
        &format!("{mode}, {threads} threads"),
        rounds * BATCH as u64,
        begin,
    );
    println!(
        "  a thread found its mailbox empty {} times in {rounds} rounds",
        waits.into_inner()
    );
    println!(
        "  polls (taking in the other thread's stops): {:.1} ns per stop",
        polling.into_inner() as f64 / (threads as u64 * rounds * BATCH as u64) as f64
    );
}

fn report(mode: &str, ops: u64, begin: Instant) {
    let nanos = begin.elapsed().as_nanos() as f64 / ops as f64;
    println!("{mode}: {ops} operations, {nanos:.1} ns each");
}

fn usage(why: &str) -> ! {
    eprintln!("owner_ops: {why}\nusage: owner_ops [start-cancel | start-cancel-capture16 | restart | sleep-poll-drop | sleep-reset | remote-start-cancel | remote-restart | cross-stop | cross-stop-mutex] [operations] [threads]");
    std::process::exit(2);
}

/// A waker for sleeps that are polled once to register and never awaited.
struct NoWake;

impl std::task::Wake for NoWake {
    fn wake(self: std::sync::Arc<Self>) {}
}
