//! Behaviour of the discrete-event simulation module (`tickwheel::sim`).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use tickwheel::sim::{Limits, SimError, Simulation, StopReason, Timeline, TraceRecord};

#[path = "common/rng.rs"]
mod rng;

use rng::Rng;

// ---------------------------------------------------------------- time ----

#[test]
fn time_jumps_to_the_next_event() {
    let mut sim = Simulation::new();
    sim.schedule(1_000_000_000, "far");
    sim.schedule(7, "near");
    let mut seen = Vec::new();
    let started = Instant::now();
    sim.run(|ctx, ev| seen.push((ctx.now(), ev))).unwrap();
    assert_eq!(seen, [(7, "near"), (1_000_000_000, "far")]);
    assert_eq!(sim.now(), 1_000_000_000);
    // A billion idle ticks cost nothing measurable.
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[test]
fn events_scheduled_from_events_run_at_their_times() {
    let mut sim = Simulation::new();
    sim.schedule(10, 0u32);
    let mut seen = Vec::new();
    sim.run(|ctx, n| {
        seen.push((ctx.now(), n));
        if n < 4 {
            ctx.schedule(u64::from(n) + 1, n + 1);
        }
    })
    .unwrap();
    assert_eq!(seen, [(10, 0), (11, 1), (13, 2), (16, 3), (20, 4)]);
}

#[test]
fn schedule_at_is_absolute_and_refuses_the_past() {
    let mut sim = Simulation::builder().start_time(50).build();
    assert_eq!(
        sim.schedule_at(49, 'x'),
        Err(SimError::InThePast { time: 49, now: 50 })
    );
    assert!(sim.is_empty(), "a refused event is not scheduled");
    let id = sim.schedule_at(50, 'y').unwrap();
    assert_eq!(sim.time_of(id), Some(50));
    let mut at = Vec::new();
    sim.run(|ctx, ev| {
        at.push((ctx.now(), ev));
        if ev == 'y' {
            assert_eq!(
                ctx.schedule_at(10, 'z'),
                Err(SimError::InThePast { time: 10, now: 50 })
            );
            ctx.schedule_at_with_priority(60, 3, 'w').unwrap();
        }
    })
    .unwrap();
    assert_eq!(at, [(50, 'y'), (60, 'w')]);
}

#[test]
fn far_delays_saturate_instead_of_wrapping() {
    let mut sim = Simulation::builder().start_time(10).build();
    let id = sim.schedule(u64::MAX, ());
    assert_eq!(sim.time_of(id), Some(u64::MAX));
    assert_eq!(sim.step(|_, ()| {}).unwrap(), Some(id));
    assert_eq!(sim.now(), u64::MAX);
}

// --------------------------------------------------------------- order ----

#[test]
fn order_is_time_then_priority_then_fifo() {
    let mut sim = Simulation::new();
    // (delay, priority, name), deliberately scheduled out of order.
    let plan = [
        (5, 0, "t5 p0 first"),
        (3, 1, "t3 p1"),
        (5, 9, "t5 p9"),
        (5, 0, "t5 p0 second"),
        (3, 1, "t3 p1 again"),
        (5, -4, "t5 p-4"),
        (3, 2, "t3 p2"),
    ];
    for (delay, priority, name) in plan {
        sim.schedule_with_priority(delay, priority, name);
    }
    let mut seen = Vec::new();
    sim.run(|_, ev| seen.push(ev)).unwrap();
    assert_eq!(
        seen,
        [
            "t3 p2",
            "t3 p1",
            "t3 p1 again",
            "t5 p9",
            "t5 p0 first",
            "t5 p0 second",
            "t5 p-4"
        ]
    );
}

#[test]
fn an_event_scheduled_for_now_competes_by_priority_with_what_has_not_run() {
    // At time 10: A (p5), B (p1), C (p1). A schedules, for time 10,
    // H (p3, above B and C), E (p1, equal: after B and C) and L (p0).
    // H then schedules X (p9), which runs next: there is no preemption of
    // what already ran, but X beats everything still pending.
    let mut sim = Simulation::builder().verify(true).build();
    sim.schedule_with_priority(10, 5, "A");
    sim.schedule_with_priority(10, 1, "B");
    sim.schedule_with_priority(10, 1, "C");
    sim.schedule_with_priority(11, 100, "next tick");
    let mut seen = Vec::new();
    sim.run(|ctx, ev| {
        seen.push(ev);
        match ev {
            "A" => {
                ctx.schedule_with_priority(0, 1, "E");
                ctx.schedule_with_priority(0, 3, "H");
                ctx.schedule_with_priority(0, 0, "L");
            }
            "H" => {
                ctx.schedule_with_priority(0, 9, "X");
            }
            _ => {}
        }
    })
    .unwrap();
    assert_eq!(seen, ["A", "H", "X", "B", "C", "E", "L", "next tick"]);
}

/// One event of the reference-model comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Job {
    tag: u32,
    priority: i32,
}

/// `(time, Reverse(priority), sequence, tag)`, min-first.
type ReferenceEntry = Reverse<(u64, Reverse<i32>, u64, u32)>;

/// A run order: `(time, tag)` per event run.
type RunOrder = Vec<(u64, u32)>;

/// Reference model: a binary heap keyed by (time, Reverse(priority), seq),
/// run in lockstep with the simulation.
#[derive(Default)]
struct Reference {
    heap: BinaryHeap<ReferenceEntry>,
    cancelled: std::collections::HashSet<u64>,
    seq: u64,
}

impl Reference {
    fn push(&mut self, time: u64, priority: i32, tag: u32) -> u64 {
        let seq = self.seq;
        self.seq += 1;
        self.heap.push(Reverse((time, Reverse(priority), seq, tag)));
        seq
    }

    fn pop(&mut self) -> Option<(u64, u32)> {
        while let Some(Reverse((time, _, seq, tag))) = self.heap.pop() {
            if !self.cancelled.remove(&seq) {
                return Some((time, tag));
            }
        }
        None
    }
}

/// Runs the same random workload (children with delays including 0, mixed
/// priorities, cancellations of pending and stale ids) on the simulation and
/// on the reference heap, and returns both run orders.
fn compare_with_heap(seed: u64, initial: usize, max_delay: u64) -> (RunOrder, RunOrder) {
    let mut rng = Rng(seed);
    let mut sim = Simulation::builder().verify(true).build();
    let mut reference = Reference::default();
    let mut ids = Vec::new(); // (sim id, reference seq)
    let mut next_tag = 0u32;
    for _ in 0..initial {
        let (delay, priority) = (rng.below(max_delay + 1), rng.below(4) as i32);
        let id = sim.schedule_with_priority(
            delay,
            priority,
            Job {
                tag: next_tag,
                priority,
            },
        );
        ids.push((id, reference.push(delay, priority, next_tag)));
        next_tag += 1;
    }
    let mut ran = Vec::new();
    let mut expected = Vec::new();
    let limit = 20 * initial as u32;
    sim.run(|ctx, job| {
        assert_eq!(ctx.priority(), job.priority);
        ran.push((ctx.now(), job.tag));
        expected.extend(reference.pop());
        // Children.
        for _ in 0..rng.below(3) {
            if next_tag >= limit {
                break;
            }
            let delay = if rng.below(3) == 0 {
                0
            } else {
                rng.below(max_delay + 1)
            };
            let priority = rng.below(4) as i32;
            let id = ctx.schedule_with_priority(
                delay,
                priority,
                Job {
                    tag: next_tag,
                    priority,
                },
            );
            ids.push((id, reference.push(ctx.now() + delay, priority, next_tag)));
            next_tag += 1;
        }
        // Cancel a random earlier id: a pending one must go, a stale one
        // must be refused.
        if rng.below(4) == 0 {
            let (id, seq) = ids[rng.below(ids.len() as u64) as usize];
            let pending = ctx.is_pending(id);
            match ctx.cancel(id) {
                Some(job) => {
                    assert!(pending);
                    assert_eq!(id.sequence(), seq);
                    assert_eq!(ids[job.tag as usize].0, id);
                    reference.cancelled.insert(seq);
                }
                None => assert!(!pending),
            }
        }
    })
    .unwrap();
    // Whatever the reference still holds was never run.
    expected.extend(std::iter::from_fn(|| reference.pop()));
    (ran, expected)
}

#[test]
fn order_matches_a_binary_heap_on_a_dense_random_workload() {
    for seed in 0..20 {
        let (ran, expected) = compare_with_heap(seed, 200, 3);
        assert!(ran.len() > 200);
        assert_eq!(ran, expected, "seed {seed}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn order_matches_a_binary_heap(seed in any::<u64>(), initial in 1usize..100, max_delay in 0u64..5_000) {
        let (ran, expected) = compare_with_heap(seed, initial, max_delay);
        prop_assert_eq!(ran, expected);
    }
}

// -------------------------------------------------------- cancellation ----

#[test]
fn cancel_removes_an_event_and_stale_ids_are_refused() {
    let mut sim = Simulation::new();
    let a = sim.schedule(5, 'a');
    let b = sim.schedule(5, 'b');
    assert!(sim.is_pending(a));
    assert_eq!(sim.cancel(a), Some('a'));
    assert!(!sim.is_pending(a));
    assert_eq!(sim.cancel(a), None, "a second cancel is refused");
    // The freed storage is reused by `c`; the stale id must not reach it.
    let c = sim.schedule(5, 'c');
    assert_eq!(sim.cancel(a), None);
    assert_eq!(sim.time_of(a), None);
    assert!(sim.is_pending(c));
    let mut seen = Vec::new();
    sim.run(|_, ev| seen.push(ev)).unwrap();
    assert_eq!(seen, ['b', 'c']);
    assert_eq!(sim.cancel(b), None, "an event that ran is stale");
    assert_eq!(sim.stats().events_cancelled, 1);
}

#[test]
fn a_handler_can_cancel_events_of_its_own_time() {
    // Three events at time 4 are in the scheduler's run for that time when
    // the first runs; it cancels the third, and an event of a later time.
    let mut sim = Simulation::builder().verify(true).build();
    sim.schedule(4, 0);
    sim.schedule(4, 1);
    let third = sim.schedule(4, 2);
    let later = sim.schedule(9, 3);
    let mut seen = Vec::new();
    sim.run(|ctx, ev| {
        seen.push(ev);
        if ev == 0 {
            assert!(ctx.is_pending(third));
            assert_eq!(ctx.cancel(third), Some(2));
            assert_eq!(ctx.cancel(third), None);
            assert_eq!(ctx.cancel(later), Some(3));
        }
        // The running event itself is not pending.
        assert!(!ctx.is_pending(ctx.id()));
    })
    .unwrap();
    assert_eq!(seen, [0, 1]);
}

// ------------------------------------------------------------- running ----

#[test]
fn step_runs_one_event_at_a_time() {
    let mut sim = Simulation::new();
    let a = sim.schedule(2, 'a');
    let b = sim.schedule(9, 'b');
    let mut seen = Vec::new();
    assert_eq!(sim.step(|_, ev| seen.push(ev)).unwrap(), Some(a));
    assert_eq!((sim.now(), sim.len()), (2, 1));
    assert_eq!(sim.step(|_, ev| seen.push(ev)).unwrap(), Some(b));
    assert_eq!(sim.step(|_, ev| seen.push(ev)).unwrap(), None);
    assert_eq!(seen, ['a', 'b']);
    assert_eq!(sim.now(), 9, "an empty step does not move time");
}

#[test]
fn run_until_is_inclusive_and_moves_the_clock() {
    let mut sim = Simulation::new();
    for t in [5, 10, 10, 11, 30] {
        sim.schedule(t, t);
    }
    let mut seen = Vec::new();
    let report = sim.run_until(10, |_, t| seen.push(t)).unwrap();
    assert_eq!(seen, [5, 10, 10]);
    assert_eq!(
        (report.events, report.stop, report.now),
        (3, StopReason::ReachedTime, 10)
    );
    assert_eq!(sim.next_time(), Some(11));

    let report = sim.run_until(20, |_, t| seen.push(t)).unwrap();
    assert_eq!(
        (report.events, report.stop, sim.now()),
        (1, StopReason::ReachedTime, 20)
    );
    // Scheduling is relative to the moved clock.
    sim.schedule(5, 25);
    let report = sim.run_until(100, |_, t| seen.push(t)).unwrap();
    assert_eq!(seen, [5, 10, 10, 11, 25, 30]);
    assert_eq!((report.stop, sim.now()), (StopReason::Exhausted, 100));
    // A time in the past runs nothing and keeps the clock.
    let report = sim.run_until(50, |_, t| seen.push(t)).unwrap();
    assert_eq!((report.events, sim.now()), (0, 100));
}

#[test]
fn an_unbounded_run_leaves_the_clock_at_the_last_event() {
    let mut sim = Simulation::new();
    sim.schedule(42, ());
    let report = sim.run(|_, ()| {}).unwrap();
    assert_eq!((report.stop, report.now), (StopReason::Exhausted, 42));
}

#[test]
fn run_events_caps_and_resumes_mid_time() {
    // Five events at one time with mixed priorities; a cap of 2 stops in the
    // middle of that time, and the next run carries on in the right order.
    let mut sim = Simulation::new();
    for (priority, name) in [(1, 'c'), (3, 'a'), (1, 'd'), (2, 'b'), (0, 'e')] {
        sim.schedule_with_priority(8, priority, name);
    }
    let mut seen = Vec::new();
    let report = sim.run_events(2, |_, ev| seen.push(ev)).unwrap();
    assert_eq!((report.events, report.stop), (2, StopReason::EventCap));
    assert_eq!(seen, ['a', 'b']);
    // A new event for the current time with a high priority goes first.
    sim.schedule_with_priority(0, 9, 'z');
    let report = sim.run_events(10, |_, ev| seen.push(ev)).unwrap();
    assert_eq!((report.events, report.stop), (4, StopReason::Exhausted));
    assert_eq!(seen, ['a', 'b', 'z', 'c', 'd', 'e']);
    assert_eq!(
        sim.run_events(0, |_, ev| seen.push(ev)).unwrap().stop,
        StopReason::EventCap
    );
}

#[test]
fn run_for_stops_on_the_wall_clock() {
    // A model that never runs out of events: each takes 2 ms of wall time.
    let mut sim = Simulation::new();
    sim.schedule(1, ());
    let started = Instant::now();
    let report = sim
        .run_for(Duration::from_millis(40), |ctx, ()| {
            std::thread::sleep(Duration::from_millis(2));
            ctx.schedule(1, ());
        })
        .unwrap();
    let elapsed = started.elapsed();
    assert_eq!(report.stop, StopReason::WallTime);
    assert!(elapsed >= Duration::from_millis(40), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
    assert!(
        (5..=21).contains(&report.events),
        "{} events",
        report.events
    );
    assert_eq!(sim.len(), 1);
}

#[test]
fn limits_combine_and_the_first_one_met_wins() {
    let mut sim = Simulation::new();
    sim.schedule(1, ());
    let mut handler = |ctx: &mut tickwheel::sim::Context<'_, ()>, ()| {
        ctx.schedule(10, ());
    };
    let limits = Limits::new()
        .until(1_000)
        .max_events(50)
        .wall_time(Duration::from_secs(60));
    let report = sim.run_with(limits, &mut handler).unwrap();
    assert_eq!(
        (report.events, report.stop, report.now),
        (50, StopReason::EventCap, 491)
    );
    let report = sim.run_with(limits, &mut handler).unwrap();
    assert_eq!(
        (report.events, report.stop, report.now),
        (50, StopReason::EventCap, 991)
    );
    let report = sim.run_with(limits, &mut handler).unwrap();
    assert_eq!(
        (report.events, report.stop, report.now),
        (0, StopReason::ReachedTime, 1_000)
    );
    let report = sim
        .run_with(Limits::new().wall_time(Duration::ZERO), &mut handler)
        .unwrap();
    assert_eq!((report.events, report.stop), (0, StopReason::WallTime));
}

#[test]
fn a_handler_can_stop_the_run() {
    let mut sim = Simulation::new();
    for t in 1..=10 {
        sim.schedule(t, t);
    }
    let report = sim
        .run(|ctx, t| {
            if t == 4 {
                ctx.stop();
            }
        })
        .unwrap();
    assert_eq!(
        (report.events, report.stop, sim.now()),
        (4, StopReason::Stopped, 4)
    );
    // The request does not outlive its run.
    assert_eq!(sim.run(|_, _| {}).unwrap().stop, StopReason::Exhausted);
}

#[test]
fn a_panicking_handler_leaves_the_scheduler_usable() {
    let mut sim = Simulation::builder().verify(true).build();
    for t in 1..=5 {
        sim.schedule(t, t);
    }
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        sim.run(|ctx, t| {
            if t == 2 {
                ctx.stop();
                panic!("model bug");
            }
        })
    }));
    assert!(outcome.is_err());
    // Event 2 is lost with its handler; the rest run, in order, and the
    // stop request of the panicked run does not leak into this one.
    let mut seen = Vec::new();
    let report = sim.run(|_, t| seen.push(t)).unwrap();
    assert_eq!(report.stop, StopReason::Exhausted);
    assert_eq!(seen, [3, 4, 5]);
}

// ----------------------------------------------------------- verifying ----

#[test]
fn verifying_mode_checks_every_event_of_a_correct_run() {
    let mut sim = Simulation::builder().verify(true).build();
    assert!(sim.is_verifying());
    let mut rng = Rng(7);
    for _ in 0..100 {
        sim.schedule_with_priority(rng.below(50), rng.below(3) as i32, ());
    }
    let mut budget = 5_000;
    let report = sim
        .run(|ctx, ()| {
            if budget > 0 {
                budget -= 1;
                ctx.schedule_with_priority(rng.below(50), rng.below(3) as i32, ());
            }
        })
        .unwrap();
    assert_eq!(report.events, 5_100);
    assert_eq!(sim.stats().events_verified, 5_100);

    let mut plain = Simulation::new();
    plain.schedule(1, ());
    plain.run(|_, ()| {}).unwrap();
    assert!(!plain.is_verifying());
    assert_eq!(plain.stats().events_verified, 0);
}

#[test]
fn verifying_mode_survives_rollbacks() {
    // Events re-run after a rollback are not "run twice" and time going
    // back to the checkpoint is not "time going backwards".
    let mut sim = Simulation::builder().verify(true).build();
    for t in 0..20 {
        sim.schedule(t, t);
    }
    sim.run_until(5, |_, _| {}).unwrap();
    let saved = sim.checkpoint();
    let first = sim.run(|_, _| {}).unwrap();
    sim.restore(&saved);
    let again = sim.run(|_, _| {}).unwrap();
    assert_eq!(first.events, again.events);
    assert_eq!(sim.stats().events_verified, 6 + 14 + 14);
}

// ----------------------------------------------------------- observing ----

#[test]
fn stats_count_the_work() {
    let mut sim = Simulation::new();
    let ids: Vec<_> = (0..10).map(|t| sim.schedule(t, t)).collect();
    sim.cancel(ids[9]);
    let report = sim
        .run(|ctx, t| {
            if t < 3 {
                ctx.schedule(100, 100 + t);
            }
        })
        .unwrap();
    let stats = sim.stats();
    assert_eq!(report.events, 12);
    assert_eq!(stats.events_run, 12);
    assert_eq!(stats.events_scheduled, 13);
    assert_eq!(stats.events_cancelled, 1);
    assert_eq!(stats.peak_queue_len, 10);
    assert!(stats.busy > Duration::ZERO);
    assert!(stats.events_per_second() > 0.0);
    assert_eq!(stats.rollbacks, 0);
}

#[test]
fn trace_hook_sees_id_time_name_and_wall_duration() {
    let seen: Arc<Mutex<Vec<TraceRecord>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let mut sim = Simulation::builder()
        .namer(|ev: &(u32, bool)| if ev.1 { "slow" } else { "fast" })
        .trace_hook(move |record| sink.lock().unwrap().push(*record))
        .build();
    let fast = sim.schedule(3, (0, false));
    let slow = sim.schedule_with_priority(8, 2, (1, true));
    sim.run(|_, (_, slow)| {
        if slow {
            std::thread::sleep(Duration::from_millis(5));
        }
    })
    .unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        (seen[0].id, seen[0].time, seen[0].name, seen[0].priority),
        (fast, 3, "fast", 0)
    );
    assert_eq!(
        (seen[1].id, seen[1].time, seen[1].name, seen[1].priority),
        (slow, 8, "slow", 2)
    );
    assert!(
        seen[1].wall >= Duration::from_millis(5),
        "{:?}",
        seen[1].wall
    );
    assert!(seen[1].wall_start >= seen[0].wall_start + seen[0].wall);
    assert!(sim.trace().is_empty(), "recording was not asked for");

    sim.clear_trace_hook();
    sim.schedule(1, (2, false));
    sim.run(|_, _| {}).unwrap();
    assert_eq!(seen.len(), 2, "the hook is gone");
}

#[test]
fn set_trace_hook_installs_a_hook_later() {
    let count = Arc::new(Mutex::new(0));
    let sink = Arc::clone(&count);
    let mut sim = Simulation::new();
    sim.schedule(1, ());
    sim.step(|_, ()| {}).unwrap();
    sim.set_trace_hook(move |_| *sink.lock().unwrap() += 1);
    sim.schedule(1, ());
    sim.schedule(2, ());
    sim.run(|_, ()| {}).unwrap();
    assert_eq!(*count.lock().unwrap(), 2);
}

/// A minimal JSON value and parser, enough to check the exporter's output
/// is valid JSON and to read it back.
#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    fn get(&self, key: &str) -> &Json {
        match self {
            Json::Obj(fields) => {
                &fields
                    .iter()
                    .find(|(k, _)| k == key)
                    .unwrap_or_else(|| panic!("no {key}"))
                    .1
            }
            other => panic!("not an object: {other:?}"),
        }
    }
}

fn parse_json(text: &str) -> Json {
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
    };
    let value = p.value();
    p.ws();
    assert_eq!(p.i, p.s.len(), "trailing characters");
    value
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && b" \t\r\n".contains(&self.s[self.i]) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) {
        self.ws();
        assert_eq!(self.s[self.i] as char, c as char, "at byte {}", self.i);
        self.i += 1;
    }

    fn value(&mut self) -> Json {
        self.ws();
        match self.s[self.i] {
            b'{' => {
                self.i += 1;
                let mut fields = Vec::new();
                self.ws();
                if self.s[self.i] == b'}' {
                    self.i += 1;
                    return Json::Obj(fields);
                }
                loop {
                    self.ws();
                    let Json::Str(key) = self.value() else {
                        panic!("key")
                    };
                    self.eat(b':');
                    fields.push((key, self.value()));
                    self.ws();
                    self.i += 1;
                    match self.s[self.i - 1] {
                        b',' => {}
                        b'}' => return Json::Obj(fields),
                        c => panic!("unexpected {}", c as char),
                    }
                }
            }
            b'[' => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.s[self.i] == b']' {
                    self.i += 1;
                    return Json::Arr(items);
                }
                loop {
                    items.push(self.value());
                    self.ws();
                    self.i += 1;
                    match self.s[self.i - 1] {
                        b',' => {}
                        b']' => return Json::Arr(items),
                        c => panic!("unexpected {}", c as char),
                    }
                }
            }
            b'"' => {
                self.i += 1;
                let mut out = String::new();
                loop {
                    let c = self.s[self.i];
                    self.i += 1;
                    match c {
                        b'"' => return Json::Str(out),
                        b'\\' => {
                            let e = self.s[self.i];
                            self.i += 1;
                            out.push(match e {
                                b'"' => '"',
                                b'\\' => '\\',
                                b'/' => '/',
                                b'n' => '\n',
                                b'r' => '\r',
                                b't' => '\t',
                                b'b' => '\u{8}',
                                b'f' => '\u{c}',
                                b'u' => {
                                    let hex =
                                        std::str::from_utf8(&self.s[self.i..self.i + 4]).unwrap();
                                    self.i += 4;
                                    char::from_u32(u32::from_str_radix(hex, 16).unwrap()).unwrap()
                                }
                                e => panic!("bad escape {}", e as char),
                            });
                        }
                        c if c < 0x20 => panic!("raw control character {c:#x} in a string"),
                        _ => {
                            // Copy one UTF-8 sequence.
                            let start = self.i - 1;
                            let mut end = self.i;
                            while end < self.s.len() && (self.s[end] & 0xc0) == 0x80 {
                                end += 1;
                            }
                            out.push_str(std::str::from_utf8(&self.s[start..end]).unwrap());
                            self.i = end;
                        }
                    }
                }
            }
            b't' => {
                self.i += 4;
                Json::Bool(true)
            }
            b'f' => {
                self.i += 5;
                Json::Bool(false)
            }
            b'n' => {
                self.i += 4;
                Json::Null
            }
            _ => {
                let start = self.i;
                while self.i < self.s.len() && b"+-0123456789.eE".contains(&self.s[self.i]) {
                    self.i += 1;
                }
                Json::Num(
                    std::str::from_utf8(&self.s[start..self.i])
                        .unwrap()
                        .parse()
                        .unwrap(),
                )
            }
        }
    }
}

const TRICKY: &str =
    "quote\" back\\slash new\nline tab\t bell\u{7} nul\u{0} unit\u{1f} é 雪 🚀 </script>";

#[test]
fn chrome_trace_is_valid_json_with_escaped_names() {
    let mut sim = Simulation::builder()
        .record_trace(true)
        .namer(|ev: &u8| if *ev == 0 { TRICKY } else { "plain" })
        .build();
    let a = sim.schedule(10, 0u8);
    let b = sim.schedule_with_priority(25, 4, 1u8);
    sim.run(|_, _| {}).unwrap();
    assert_eq!(sim.trace().len(), 2);

    for timeline in [
        Timeline::Wall,
        Timeline::Virtual {
            micros_per_tick: 0.5,
        },
    ] {
        let json = parse_json(&sim.trace().to_chrome_json(timeline));
        let Json::Arr(events) = json.get("traceEvents") else {
            panic!("traceEvents")
        };
        // A metadata entry naming the track, then one entry per event.
        assert_eq!(events.len(), 3);
        assert_eq!(events[0].get("ph"), &Json::Str("M".into()));
        assert_eq!(events[1].get("name"), &Json::Str(TRICKY.into()));
        assert_eq!(events[2].get("name"), &Json::Str("plain".into()));
        let args = events[2].get("args");
        assert_eq!(args.get("id"), &Json::Num(b.sequence() as f64));
        assert_eq!(args.get("time"), &Json::Num(25.0));
        assert_eq!(args.get("priority"), &Json::Num(4.0));
        assert_eq!(
            events[1].get("args").get("id"),
            &Json::Num(a.sequence() as f64)
        );
        match timeline {
            Timeline::Wall => {
                assert_eq!(events[1].get("ph"), &Json::Str("X".into()));
                let (Json::Num(ts0), Json::Num(ts1)) = (events[1].get("ts"), events[2].get("ts"))
                else {
                    panic!("ts")
                };
                assert!(ts1 >= ts0);
                assert!(matches!(events[1].get("dur"), Json::Num(d) if *d >= 0.0));
            }
            Timeline::Virtual { .. } => {
                assert_eq!(events[1].get("ph"), &Json::Str("i".into()));
                assert_eq!(events[1].get("ts"), &Json::Num(5.0));
                assert_eq!(events[2].get("ts"), &Json::Num(12.5));
            }
        }
    }
}

#[test]
fn chrome_trace_refuses_a_bad_scale() {
    let trace = tickwheel::sim::Trace::new();
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let error = trace
            .write_chrome_json(
                Vec::new(),
                Timeline::Virtual {
                    micros_per_tick: bad,
                },
            )
            .unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
    }
    let empty = parse_json(&trace.to_chrome_json(Timeline::Wall));
    assert!(matches!(empty.get("traceEvents"), Json::Arr(v) if v.len() == 1));
}

#[test]
fn take_trace_empties_the_recording_and_keeps_recording() {
    let mut sim = Simulation::builder().record_trace(true).build();
    sim.schedule(1, ());
    sim.run(|_, ()| {}).unwrap();
    let taken = sim.take_trace();
    assert_eq!((taken.len(), taken.records()[0].time), (1, 1));
    assert!(sim.trace().is_empty());
    sim.schedule(1, ());
    sim.run(|_, ()| {}).unwrap();
    assert_eq!(sim.trace().records()[0].time, 2);
}

// --------------------------------------------------------- checkpoints ----

/// A model with state outside the scheduler: a PRNG and a counter.
#[derive(Debug, Clone)]
struct Model {
    rng: Rng,
    total: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ev {
    kind: u8,
    value: u64,
}

fn model_step(
    model: &mut Model,
    ctx: &mut tickwheel::sim::Context<'_, Ev>,
    ev: Ev,
    log: &mut Vec<(u64, i32, Ev, u64)>,
) {
    model.total = model.total.wrapping_mul(31).wrapping_add(ev.value);
    log.push((ctx.now(), ctx.priority(), ev, model.total));
    let children = model.rng.below(3);
    for _ in 0..children {
        let delay = model.rng.below(100);
        let priority = model.rng.below(3) as i32;
        let child = Ev {
            kind: model.rng.below(4) as u8,
            value: model.rng.next() % 1000,
        };
        ctx.schedule_with_priority(delay, priority, child);
    }
}

#[test]
fn rollback_replays_identically() {
    let mut sim = Simulation::builder().verify(true).build();
    let mut model = Model {
        rng: Rng(99),
        total: 0,
    };
    for i in 0..50 {
        let delay = model.rng.below(100);
        sim.schedule(delay, Ev { kind: 0, value: i });
    }
    let mut log = Vec::new();
    sim.run_events(2_000, |ctx, ev| model_step(&mut model, ctx, ev, &mut log))
        .unwrap();

    let saved = sim.checkpoint();
    let saved_model = model.clone();
    // Sequence numbers count scheduling calls: those below this were handed
    // out before the checkpoint.
    let boundary = sim.stats().events_scheduled;
    assert_eq!((saved.now(), saved.len()), (sim.now(), sim.len()));

    let mut first = Vec::new();
    let mut first_ids = Vec::new();
    sim.run_events(5_000, |ctx, ev| {
        first_ids.push(ctx.id());
        model_step(&mut model, ctx, ev, &mut first)
    })
    .unwrap();
    let (first_now, first_len) = (sim.now(), sim.len());
    assert!(first.len() == 5_000 && first_now > saved.now());

    for _ in 0..2 {
        sim.restore(&saved);
        let mut model = saved_model.clone();
        assert_eq!((sim.now(), sim.len()), (saved.now(), saved.len()));
        let mut replay = Vec::new();
        let mut replay_ids = Vec::new();
        sim.run_events(5_000, |ctx, ev| {
            replay_ids.push(ctx.id());
            model_step(&mut model, ctx, ev, &mut replay)
        })
        .unwrap();
        assert_eq!(replay, first);
        assert_eq!((sim.now(), sim.len()), (first_now, first_len));
        // Events pending at the checkpoint keep their ids; events scheduled
        // after it get fresh ones (sequence numbers are never reused).
        let mut kept = 0;
        for (first_id, replay_id) in first_ids.iter().zip(&replay_ids) {
            if first_id.sequence() < boundary {
                assert_eq!(first_id, replay_id);
                kept += 1;
            } else {
                assert!(replay_id.sequence() > first_id.sequence());
            }
        }
        assert!(kept > 0 && kept < first_ids.len(), "{kept}");
    }
    assert_eq!(sim.stats().rollbacks, 2);
}

#[test]
fn ids_from_an_abandoned_future_are_stale_after_a_rollback() {
    let mut sim = Simulation::new();
    let kept = sim.schedule(10, "kept");
    let saved = sim.checkpoint();
    let abandoned = sim.schedule(5, "abandoned");
    sim.restore(&saved);
    assert!(
        sim.is_pending(kept),
        "ids from before the checkpoint still work"
    );
    assert!(!sim.is_pending(abandoned));
    // The replay schedules a different event, which takes the storage the
    // abandoned one had. The abandoned id must not reach it.
    let fresh = sim.schedule(5, "fresh");
    assert_ne!(fresh, abandoned);
    assert_eq!(sim.cancel(abandoned), None);
    assert!(sim.is_pending(fresh));
    let mut seen = Vec::new();
    sim.run(|_, ev| seen.push(ev)).unwrap();
    assert_eq!(seen, ["fresh", "kept"]);
}

#[test]
fn a_checkpoint_taken_mid_time_restores_the_run_of_that_time() {
    let mut sim = Simulation::new();
    for (priority, name) in [(0, 'c'), (2, 'a'), (1, 'b'), (0, 'd')] {
        sim.schedule_with_priority(3, priority, name);
    }
    let mut seen = Vec::new();
    sim.run_events(1, |_, ev| seen.push(ev)).unwrap();
    let saved = sim.checkpoint();
    sim.run(|_, ev| seen.push(ev)).unwrap();
    assert_eq!(seen, ['a', 'b', 'c', 'd']);
    sim.restore(&saved);
    let mut replay = Vec::new();
    sim.run(|_, ev| replay.push(ev)).unwrap();
    assert_eq!(replay, ['b', 'c', 'd']);
}

// ---------------------------------------------------------------- misc ----

#[test]
fn simulation_is_send_when_events_are() {
    fn assert_send<T: Send>() {}
    assert_send::<Simulation<u64>>();
    assert_send::<tickwheel::sim::Checkpoint<String>>();
    assert_send::<SimError>();
    fn assert_error<T: std::error::Error + Send + Sync + 'static>() {}
    assert_error::<SimError>();
    let message = SimError::InThePast { time: 1, now: 2 }.to_string();
    assert!(
        message.contains("time 1") && message.contains("at 2"),
        "{message}"
    );
}
