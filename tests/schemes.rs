//! The paper's schemes 1-6 and tickwheel's wheel (scheme 7) as oracles for one
//! another: the same seeded random START / STOP / tick sequences drive all
//! seven, and each must fire the same ids at the same ticks, return the same
//! STOP results, and agree with a direct model of the specification.

use std::collections::{BTreeMap, HashMap};

use tickwheel::schemes::{
    BasicWheel, HashedWheelSorted, HashedWheelUnsorted, HierarchicalWheel, OrderedList,
    SchemeError, TimerHeap, TimerScheme, UnorderedList,
};

#[path = "common/rng.rs"]
mod rng;

use rng::Rng;

#[derive(Debug, Clone, Copy)]
enum Op {
    Start { interval: u64, id: u64 },
    Stop { id: u64 },
    Tick { count: u64 },
}

/// A random operation sequence. Intervals are at most `max_interval`; about
/// one in sixteen is 0, and a third are short enough for many timers to share
/// a tick. STOP picks any id started so far, so stale handles are exercised.
fn operations(seed: u64, count: usize, max_interval: u64) -> Vec<Op> {
    let mut rng = Rng(seed);
    let mut ops = Vec::with_capacity(count);
    let mut started = 0;
    for _ in 0..count {
        let op = match rng.below(10) {
            0..=4 => {
                let interval = match rng.below(16) {
                    0 => 0,
                    1..=5 => 1 + rng.below(8),
                    6 => max_interval,
                    _ => 1 + rng.below(max_interval),
                };
                started += 1;
                Op::Start {
                    interval,
                    id: started - 1,
                }
            }
            5..=6 if started > 0 => Op::Stop {
                id: rng.below(started),
            },
            _ => Op::Tick {
                count: if rng.below(8) == 0 {
                    1 + rng.below(max_interval / 4 + 1)
                } else {
                    1 + rng.below(4)
                },
            },
        };
        ops.push(op);
    }
    ops
}

/// What a scheme did: the ids fired at each tick, sorted (the order of timers
/// due on the same tick legitimately differs between schemes, so only the set
/// per tick is compared), and the result of every STOP in sequence.
#[derive(Debug, PartialEq, Eq, Default)]
struct Trace {
    fired: BTreeMap<u64, Vec<u64>>,
    stops: Vec<bool>,
    final_now: u64,
}

/// Runs `ops` on `scheme`, then ticks `drain` more times so that every timer
/// still armed fires.
fn run<S: TimerScheme>(mut scheme: S, ops: &[Op], drain: u64) -> Trace {
    let mut handles = HashMap::new();
    let mut trace = Trace::default();
    let tick = |scheme: &mut S, trace: &mut Trace| {
        let mut ids = Vec::new();
        scheme.tick(|id| ids.push(id));
        if !ids.is_empty() {
            ids.sort_unstable();
            trace.fired.insert(scheme.now(), ids);
        }
    };
    for op in ops {
        match *op {
            Op::Start { interval, id } => {
                let handle = scheme.start(interval, id).expect("interval within range");
                handles.insert(id, handle);
            }
            Op::Stop { id } => trace.stops.push(scheme.stop(handles[&id])),
            Op::Tick { count } => {
                for _ in 0..count {
                    tick(&mut scheme, &mut trace);
                }
            }
        }
    }
    for _ in 0..drain {
        tick(&mut scheme, &mut trace);
    }
    assert!(scheme.is_empty(), "{} kept timers after draining", S::NAME);
    trace.final_now = scheme.now();
    trace
}

/// The specification, written as directly as possible: a timer started at
/// `now` with interval `i` fires at `now + max(i, 1)` unless stopped first.
fn model(ops: &[Op], drain: u64) -> Trace {
    let mut now = 0;
    let mut armed: HashMap<u64, u64> = HashMap::new();
    let mut trace = Trace::default();
    let tick = |now: &mut u64, armed: &mut HashMap<u64, u64>, trace: &mut Trace| {
        *now += 1;
        let mut ids: Vec<u64> = armed
            .iter()
            .filter(|&(_, &deadline)| deadline == *now)
            .map(|(&id, _)| id)
            .collect();
        for id in &ids {
            armed.remove(id);
        }
        if !ids.is_empty() {
            ids.sort_unstable();
            trace.fired.insert(*now, ids);
        }
    };
    for op in ops {
        match *op {
            Op::Start { interval, id } => {
                armed.insert(id, now + interval.max(1));
            }
            Op::Stop { id } => trace.stops.push(armed.remove(&id).is_some()),
            Op::Tick { count } => {
                for _ in 0..count {
                    tick(&mut now, &mut armed, &mut trace);
                }
            }
        }
    }
    for _ in 0..drain {
        tick(&mut now, &mut armed, &mut trace);
    }
    trace.final_now = now;
    trace
}

/// Drives every scheme with one sequence and checks each against the model.
/// `basic` is false when the intervals exceed what scheme 4 is built for.
fn check_all(ops: &[Op], max_interval: u64, slots: usize, basic: bool) {
    let drain = max_interval + 1;
    let expected = model(ops, drain);
    assert!(!expected.fired.is_empty(), "the sequence fires nothing");
    let traces = [
        (UnorderedList::NAME, run(UnorderedList::new(), ops, drain)),
        (OrderedList::NAME, run(OrderedList::new(), ops, drain)),
        (TimerHeap::NAME, run(TimerHeap::new(), ops, drain)),
        (
            HashedWheelSorted::NAME,
            run(HashedWheelSorted::new(slots), ops, drain),
        ),
        (
            HashedWheelUnsorted::NAME,
            run(HashedWheelUnsorted::new(slots), ops, drain),
        ),
        (
            HierarchicalWheel::NAME,
            run(HierarchicalWheel::new(), ops, drain),
        ),
    ];
    for (name, trace) in &traces {
        assert_eq!(trace, &expected, "{name} disagrees with the model");
    }
    if basic {
        let trace = run(BasicWheel::new(max_interval), ops, drain);
        assert_eq!(trace, expected, "{} disagrees", BasicWheel::NAME);
    }
}

#[test]
fn all_schemes_agree_on_short_intervals() {
    // Many timers per tick and per slot; 16 slots for the hashed wheels so
    // that lists hold several rounds.
    for seed in 0..40 {
        check_all(&operations(seed, 2_000, 64), 64, 16, true);
    }
}

#[test]
fn all_schemes_agree_on_intervals_longer_than_the_hashed_wheels() {
    for seed in 100..115 {
        check_all(&operations(seed, 3_000, 5_000), 5_000, 256, true);
    }
}

#[test]
fn schemes_without_a_max_interval_agree_on_long_intervals() {
    // Longer than any basic wheel built here, and crossing several levels of
    // the hierarchical wheel (64, 4096 and 262144 ticks).
    for seed in 200..204 {
        check_all(&operations(seed, 400, 300_000), 300_000, 1024, false);
    }
}

#[test]
fn zero_interval_fires_at_the_next_tick_never_inside_start() {
    fn check<S: TimerScheme>(mut scheme: S) {
        let mut fired = Vec::new();
        scheme.tick(|id| fired.push(id));
        scheme.start(0, 7).unwrap();
        assert_eq!(scheme.len(), 1, "{}", S::NAME);
        scheme.tick(|id| fired.push(id));
        assert_eq!((fired, scheme.now()), (vec![7], 2), "{}", S::NAME);
    }
    check(UnorderedList::new());
    check(OrderedList::new());
    check(TimerHeap::new());
    check(BasicWheel::new(4));
    check(HashedWheelSorted::new(4));
    check(HashedWheelUnsorted::new(4));
    check(HierarchicalWheel::new());
}

#[test]
fn stop_is_true_once_then_stale() {
    fn check<S: TimerScheme>(mut scheme: S) {
        let a = scheme.start(5, 1).unwrap();
        let b = scheme.start(5, 2).unwrap();
        assert!(scheme.stop(a), "{}", S::NAME);
        assert!(!scheme.stop(a), "{}", S::NAME);
        let mut fired = Vec::new();
        for _ in 0..5 {
            scheme.tick(|id| fired.push(id));
        }
        assert_eq!(fired, [2], "{}", S::NAME);
        assert!(!scheme.stop(b), "{} stopped a fired timer", S::NAME);
        // A new timer reuses the freed storage; the old handles stay stale.
        let c = scheme.start(1, 3).unwrap();
        assert!(!scheme.stop(a) && !scheme.stop(b), "{}", S::NAME);
        assert!(scheme.stop(c), "{}", S::NAME);
        assert!(scheme.is_empty(), "{}", S::NAME);
    }
    check(UnorderedList::new());
    check(OrderedList::new());
    check(TimerHeap::new());
    check(BasicWheel::new(8));
    check(HashedWheelSorted::new(4));
    check(HashedWheelUnsorted::new(4));
    check(HierarchicalWheel::new());
}

#[test]
fn basic_wheel_refuses_intervals_beyond_max_interval() {
    let mut wheel = BasicWheel::new(100);
    assert_eq!(wheel.max_interval(), 100);
    assert_eq!(
        wheel.start(101, 1),
        Err(SchemeError::IntervalTooLong {
            interval: 101,
            max: 100
        })
    );
    assert!(wheel.is_empty());
    // Exactly MaxInterval is accepted and fires on time, after a full turn.
    wheel.tick(|_| panic!("nothing is armed"));
    wheel.start(100, 2).unwrap();
    let mut fired_at = Vec::new();
    for _ in 0..100 {
        let mut fired = Vec::new();
        wheel.tick(|id| fired.push(id));
        if !fired.is_empty() {
            fired_at.push((fired, wheel.now()));
        }
    }
    assert_eq!(fired_at, [(vec![2], 101)]);
    let message = SchemeError::IntervalTooLong {
        interval: 101,
        max: 100,
    }
    .to_string();
    assert!(
        message.contains("101") && message.contains("100"),
        "{message}"
    );
}

#[test]
fn hashed_sorted_keeps_start_order_within_a_tick() {
    // Equal deadlines stay in arrival order; so do the lists and the wheel.
    let mut scheme = HashedWheelSorted::new(4);
    for id in 0..6 {
        scheme.start(9, id).unwrap();
    }
    let mut fired = Vec::new();
    for _ in 0..9 {
        scheme.tick(|id| fired.push(id));
    }
    assert_eq!(fired, [0, 1, 2, 3, 4, 5]);
}

#[test]
fn debug_shows_the_scheme_time_and_size() {
    let mut scheme = TimerHeap::new();
    scheme.start(3, 1).unwrap();
    scheme.tick(|_| {});
    let text = format!("{scheme:?}");
    assert!(text.contains("TimerHeap") && text.contains("now: 1") && text.contains("len: 1"));
    let text = format!("{:?}", HierarchicalWheel::new());
    assert!(text.contains("HierarchicalWheel"), "{text}");
}
