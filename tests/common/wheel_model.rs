//! A reference model of [`tickwheel::Wheel`] and a small operation language
//! for differential tests.
//!
//! The model is scheme 2 of Varghese & Lauck: one ordered list of timers,
//! here a `BTreeMap` keyed by `(deadline, arm sequence number)`. Its rules
//! are the wheel's documented semantics, written as plainly as possible:
//!
//! * a deadline is `max(requested, now)`; `now + delay` saturates at `u64::MAX`;
//! * every insert and every reschedule takes a fresh sequence number, so
//!   timers due on one tick fire in the order they were (re)armed;
//! * the next timer to fire is the first map entry with `deadline <= target`;
//!   while it is handled `now` equals its deadline; when none is due, `now`
//!   becomes `max(now, target)` (a target in the past is no time passing);
//! * a range timer's tick is the wheel's choice; the model checks it lies in
//!   the clamped window and has the most trailing zero bits of the window.
//!
//! [`Harness`] runs one [`Op`] on a wheel and on the model and panics at the
//! first difference. Its invariant check after every step compares `now()`,
//! `len()`, `next_deadline()`, `ticks_to_next_event` and the state of every
//! key ever issued. This file depends on nothing but tickwheel and std, so
//! a proptest test, a seeded test and a cargo-fuzz target can all include it
//! (`#[path = ".../wheel_model.rs"] mod wheel_model;`); [`decode`] turns raw
//! fuzzer bytes into a start tick and a sequence of operations.

#![allow(dead_code)]

use std::collections::BTreeMap;

use tickwheel::{Advance, TimerError, TimerKey, Wheel};

/// A tick, described relative to the wheel's time when the operation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// `now + delay`, saturating.
    Delay(u64),
    /// The first tick of the `rotations`-th next bucket on `level` (a tick
    /// whose low `6 * level` bits are zero), plus `offset`; saturating.
    Boundary {
        /// Wheel level, 0..=10.
        level: u8,
        /// How many buckets of that level ahead.
        rotations: u8,
        /// Ticks before (negative) or after the boundary.
        offset: i8,
    },
    /// `now - ticks`, saturating at 0: a tick in the past.
    Back(u64),
    /// An absolute tick.
    At(u64),
}

impl When {
    /// The absolute tick this describes when the wheel's time is `now`
    /// (before clamping to `now`).
    pub fn resolve(self, now: u64) -> u64 {
        match self {
            When::Delay(d) => now.saturating_add(d),
            When::Boundary {
                level,
                rotations,
                offset,
            } => {
                let shift = 6 * u32::from(level.min(10));
                let base = (now >> shift).saturating_add(u64::from(rotations));
                let boundary = if base > (u64::MAX >> shift) {
                    u64::MAX
                } else {
                    base << shift
                };
                boundary.saturating_add_signed(i64::from(offset))
            }
            When::Back(ticks) => now.saturating_sub(ticks),
            When::At(tick) => tick,
        }
    }
}

/// Chooses a timer: among those armed now, or among every key ever issued
/// (which includes fired and cancelled ones, i.e. stale keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// The `n % live`-th armed timer in id order (none when nothing is armed).
    Live(u16),
    /// The `n % issued`-th key ever issued, live or stale.
    Any(u16),
    /// A key made from this raw value with a generation far beyond any a
    /// short run reaches: never armed, always stale.
    Garbage(u32),
}

/// Something done to the wheel, at top level or while an expired timer is
/// being handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Do nothing.
    Nothing,
    /// `insert(delay)`.
    Insert(u64),
    /// `insert_at(when)`.
    InsertAt(When),
    /// `insert_in_range(earliest..=latest)` (delays; may be inverted).
    InsertInRange(u64, u64),
    /// `insert_at_in_range(a..=b)` (absolute ticks; may be inverted).
    InsertAtInRange(When, When),
    /// `cancel`.
    Cancel(Pick),
    /// `reschedule(delay)` for [`When::Delay`], otherwise `reschedule_at`.
    Reschedule(Pick, When),
}

/// One step of a differential run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// A change made outside expiry processing.
    Do(Action),
    /// Pop-style: `poll(to)` until it returns `None` or `max_polls` timers
    /// came out; after the `i`-th timer, `actions[i % len]` runs (for the
    /// first [`ACTION_BUDGET`] timers).
    Poll {
        /// The target tick.
        to: When,
        /// Stop after this many timers (then resume with a later op).
        max_polls: u16,
        /// Run between polls.
        actions: Vec<Action>,
    },
    /// `advance(to, max, ..)`; the callback for the `i`-th timer runs
    /// `actions[i % len]` (for the first [`ACTION_BUDGET`] timers).
    Advance {
        /// The target tick.
        to: When,
        /// The cap on expiries.
        max: u16,
        /// Run inside the callback.
        actions: Vec<Action>,
    },
}

/// The reference model: an ordered list of armed timers.
#[derive(Debug, Clone, Default)]
pub struct Model {
    /// The current tick.
    pub now: u64,
    /// Armed timers: `(deadline, seq) -> id`.
    pub queue: BTreeMap<(u64, u64), u64>,
    /// Armed timers: `id -> (deadline, seq)`.
    pub live: BTreeMap<u64, (u64, u64)>,
    next_seq: u64,
}

impl Model {
    /// A model whose time starts at `now`.
    pub fn starting_at(now: u64) -> Self {
        Model {
            now,
            ..Model::default()
        }
    }

    /// Arms (or re-arms) timer `id` at `max(deadline, now)`; returns the
    /// deadline.
    pub fn arm(&mut self, id: u64, deadline: u64) -> u64 {
        let deadline = deadline.max(self.now);
        self.disarm(id);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queue.insert((deadline, seq), id);
        self.live.insert(id, (deadline, seq));
        deadline
    }

    /// Disarms timer `id`; `true` if it was armed.
    pub fn disarm(&mut self, id: u64) -> bool {
        match self.live.remove(&id) {
            Some(slot) => {
                self.queue.remove(&slot);
                true
            }
            None => false,
        }
    }

    /// The earliest deadline of an armed timer.
    pub fn next_deadline(&self) -> Option<u64> {
        self.queue.keys().next().map(|&(deadline, _)| deadline)
    }

    /// Removes and returns the next timer due at or before `target` as
    /// `(deadline, id)`, moving `now` to its deadline.
    pub fn pop_due(&mut self, target: u64) -> Option<(u64, u64)> {
        let (&(deadline, seq), &id) = self.queue.iter().next()?;
        // `target < now` counts as `now`: what is already due still comes out.
        if deadline > target.max(self.now) {
            return None;
        }
        assert!(deadline >= self.now, "model: a deadline fell behind now");
        self.queue.remove(&(deadline, seq));
        self.live.remove(&id);
        self.now = deadline;
        Some((deadline, id))
    }

    /// Nothing more is due by `target`: time moves there (never backwards).
    pub fn finish(&mut self, target: u64) {
        assert!(self
            .next_deadline()
            .is_none_or(|d| d > target.max(self.now)));
        self.now = self.now.max(target);
    }
}

/// Expirations per operation that run callback actions; later ones in the
/// same operation run none. Without a bound, an action that re-inserts a
/// short timer each time one fires makes an advance towards a far target run
/// (almost) forever.
pub const ACTION_BUDGET: usize = 32;

/// A wheel and a model driven in lockstep. Timer `id` carries payload `id`
/// and its key is `keys[id]`.
#[derive(Debug, Clone)]
pub struct Harness {
    /// The wheel under test.
    pub wheel: Wheel<u64>,
    /// The reference model.
    pub model: Model,
    /// Every key ever issued, indexed by id.
    pub keys: Vec<TimerKey>,
    /// Timers fired so far as `(deadline, id)`, in order.
    pub fired: Vec<(u64, u64)>,
}

impl Harness {
    /// Both sides start empty at tick `start`.
    pub fn new(start: u64) -> Self {
        Harness {
            wheel: Wheel::starting_at(start),
            model: Model::starting_at(start),
            keys: Vec::new(),
            fired: Vec::new(),
        }
    }

    /// Runs `ops` in order, checking after each.
    pub fn run(&mut self, ops: &[Op]) {
        self.check();
        for op in ops {
            self.step(op);
            self.check();
        }
    }

    /// Runs one operation on both sides, panicking at the first difference.
    pub fn step(&mut self, op: &Op) {
        let Harness {
            wheel,
            model,
            keys,
            fired,
        } = self;
        match op {
            Op::Do(action) => apply(wheel, model, keys, *action),
            Op::Poll {
                to,
                max_polls,
                actions,
            } => {
                let target = to.resolve(wheel.now());
                let mut polls = 0;
                loop {
                    if polls == usize::from(*max_polls) {
                        break;
                    }
                    let Some(e) = wheel.poll(target) else {
                        model.finish(target);
                        break;
                    };
                    expired(wheel, model, keys, fired, target, &e);
                    if !actions.is_empty() && polls < ACTION_BUDGET {
                        apply(wheel, model, keys, actions[polls % actions.len()]);
                    }
                    polls += 1;
                }
            }
            Op::Advance { to, max, actions } => {
                let target = to.resolve(wheel.now());
                let max = usize::from(*max);
                let mut count = 0;
                let result = wheel.advance(target, max, |wheel, e| {
                    expired(wheel, model, keys, fired, target, &e);
                    if !actions.is_empty() && count < ACTION_BUDGET {
                        apply(wheel, model, keys, actions[count % actions.len()]);
                    }
                    count += 1;
                });
                assert_eq!(result.expired, count);
                // A target before now counts as now: what is due now is work.
                let complete = model
                    .next_deadline()
                    .is_none_or(|d| d > target.max(model.now));
                if count < max && !complete {
                    // Below its cap, an advance stops only at a timer a
                    // callback armed for the tick it had reached: due to the
                    // next advance (CONTRACT 1), at the current tick.
                    assert_eq!(
                        model.next_deadline(),
                        Some(model.now),
                        "advance stopped below its cap with work due later"
                    );
                    assert!(count > 0, "stopped at a timer armed before it began");
                }
                assert_eq!(
                    result,
                    Advance {
                        expired: count,
                        complete
                    }
                );
                if complete {
                    model.finish(target);
                }
            }
        }
    }

    /// Compares everything observable.
    pub fn check(&self) {
        let (w, m) = (&self.wheel, &self.model);
        assert_eq!(w.now(), m.now, "now()");
        assert_eq!(w.len(), m.live.len(), "len()");
        assert_eq!(w.is_empty(), m.live.is_empty(), "is_empty()");
        assert_eq!(w.next_deadline(), m.next_deadline(), "next_deadline()");
        // The O(levels) lower bound: present exactly when a deadline is, and
        // never after it.
        assert_eq!(
            w.next_wakeup().is_some(),
            m.next_deadline().is_some(),
            "next_wakeup()"
        );
        if let (Some(wakeup), Some(deadline)) = (w.next_wakeup(), m.next_deadline()) {
            assert!(
                (m.now..=deadline).contains(&wakeup),
                "next_wakeup() {wakeup} outside now..=deadline {deadline}"
            );
        }
        let expected_ticks = m.next_deadline().map_or(1000, |d| (d - m.now).min(1000));
        assert_eq!(w.ticks_to_next_event(1000), expected_ticks);
        for (id, &key) in self.keys.iter().enumerate() {
            let id = id as u64;
            let model_deadline = m.live.get(&id).map(|&(deadline, _)| deadline);
            assert_eq!(w.deadline(key), model_deadline, "deadline of timer {id}");
            assert_eq!(w.get(key), model_deadline.map(|_| &id), "payload of {id}");
        }
    }
}

/// Checks one timer that the wheel handed out against the model.
fn expired(
    wheel: &Wheel<u64>,
    model: &mut Model,
    keys: &[TimerKey],
    fired: &mut Vec<(u64, u64)>,
    target: u64,
    e: &tickwheel::Expired<u64>,
) {
    let expected = model.pop_due(target);
    assert_eq!(Some((e.deadline, e.value)), expected, "fired timer");
    assert_eq!(keys[e.value as usize], e.key, "fired key");
    assert_eq!(wheel.now(), e.deadline, "now() while handling a timer");
    assert!(!wheel.contains(e.key), "a fired key is stale");
    fired.push((e.deadline, e.value));
}

/// Resolves a pick to `(id if issued, key)`.
fn pick(model: &Model, keys: &[TimerKey], p: Pick) -> Option<(Option<u64>, TimerKey)> {
    match p {
        Pick::Live(n) => {
            let len = model.live.len();
            if len == 0 {
                return None;
            }
            let id = *model.live.keys().nth(usize::from(n) % len)?;
            Some((Some(id), keys[id as usize]))
        }
        Pick::Any(n) => {
            if keys.is_empty() {
                return None;
            }
            let id = usize::from(n) % keys.len();
            Some((Some(id as u64), keys[id]))
        }
        Pick::Garbage(raw) => {
            let raw = (0xfff0_0000_u64 << 32) | u64::from(raw);
            Some((None, TimerKey::from_raw(raw)))
        }
    }
}

/// Applies one action to both sides and compares the results.
fn apply(wheel: &mut Wheel<u64>, model: &mut Model, keys: &mut Vec<TimerKey>, action: Action) {
    let now = wheel.now();
    let id = keys.len() as u64;
    match action {
        Action::Nothing => {}
        Action::Insert(delay) => {
            let key = wheel.insert(delay, id);
            keys.push(key);
            let deadline = model.arm(id, now.saturating_add(delay));
            assert_eq!(wheel.deadline(key), Some(deadline), "insert({delay})");
        }
        Action::InsertAt(when) => {
            let tick = when.resolve(now);
            let key = wheel.insert_at(tick, id);
            keys.push(key);
            let deadline = model.arm(id, tick);
            assert_eq!(wheel.deadline(key), Some(deadline), "insert_at({tick})");
        }
        Action::InsertInRange(earliest, latest) => {
            let result = wheel.insert_in_range(earliest..=latest, id);
            let window = (now.saturating_add(earliest), now.saturating_add(latest));
            range_inserted(wheel, model, keys, result, earliest > latest, window);
        }
        Action::InsertAtInRange(a, b) => {
            let (a, b) = (a.resolve(now), b.resolve(now));
            let result = wheel.insert_at_in_range(a..=b, id);
            let window = (a.max(now), b.max(now));
            range_inserted(wheel, model, keys, result, a > b, window);
        }
        Action::Cancel(p) => {
            let Some((id, key)) = pick(model, keys, p) else {
                return;
            };
            let armed = id.is_some_and(|id| model.disarm(id));
            assert_eq!(wheel.cancel(key), armed.then(|| id.unwrap()), "cancel");
        }
        Action::Reschedule(p, when) => {
            let Some((id, key)) = pick(model, keys, p) else {
                return;
            };
            let armed = id.is_some_and(|id| model.live.contains_key(&id));
            let result = match when {
                When::Delay(delay) => wheel.reschedule(key, delay),
                other => wheel.reschedule_at(key, other.resolve(now)),
            };
            if armed {
                assert_eq!(result, Ok(()), "reschedule of an armed timer");
                let deadline = model.arm(id.unwrap(), when.resolve(now));
                assert_eq!(wheel.deadline(key), Some(deadline), "rescheduled deadline");
            } else {
                assert_eq!(
                    result,
                    Err(TimerError::StaleKey),
                    "reschedule of a stale key"
                );
            }
        }
    }
}

/// Checks a range insert: refused exactly when inverted; otherwise the tick
/// lies in the (clamped) window and is its roundest tick: no multiple of a
/// larger power of two lies in the window. The model then follows the
/// wheel's choice.
fn range_inserted(
    wheel: &Wheel<u64>,
    model: &mut Model,
    keys: &mut Vec<TimerKey>,
    result: Result<TimerKey, TimerError>,
    inverted: bool,
    (lo, hi): (u64, u64),
) {
    if inverted {
        assert_eq!(result, Err(TimerError::InvalidRange));
        return;
    }
    let key = result.expect("a valid range is accepted");
    let id = keys.len() as u64;
    keys.push(key);
    let tick = wheel.deadline(key).expect("armed");
    assert!(
        (lo..=hi).contains(&tick),
        "range tick {tick} outside {lo}..={hi}"
    );
    let zeros = tick.trailing_zeros();
    if zeros < 63 {
        let step = 1u64 << (zeros + 1);
        let next_rounder = lo.div_ceil(step).checked_mul(step);
        assert!(
            next_rounder.is_none_or(|r| r > hi),
            "{tick} is not the roundest tick of {lo}..={hi}"
        );
    }
    assert_eq!(model.arm(id, tick), tick);
}

/// Turns arbitrary bytes (a fuzzer's input) into a start tick and operations.
/// Every byte string decodes to something; running out of bytes ends the list.
pub fn decode(data: &[u8]) -> (u64, Vec<Op>) {
    let mut r = Reader(data);
    let start = match r.byte() % 8 {
        0 => 0,
        1 => 63,
        2 => 4095,
        3 => (1 << 36) - 1,
        4 => u64::MAX - 100,
        5 => u64::MAX - r.u64() % 5000,
        _ => r.u64() >> (r.byte() % 64),
    };
    let mut ops = Vec::new();
    while !r.0.is_empty() && ops.len() < 256 {
        let op = match r.byte() % 8 {
            0..=3 => Op::Do(r.action()),
            4 | 5 => Op::Poll {
                to: r.target(),
                max_polls: if r.byte() % 4 == 0 {
                    u16::from(r.byte() % 8)
                } else {
                    u16::MAX
                },
                actions: r.actions(),
            },
            _ => Op::Advance {
                to: r.target(),
                max: u16::from(r.byte() % 16),
                actions: r.actions(),
            },
        };
        ops.push(op);
    }
    (start, ops)
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn u64(&mut self) -> u64 {
        (0..8).fold(0, |acc, _| acc << 8 | u64::from(self.byte()))
    }

    /// A delay spread over every level: a random number of random bits.
    fn delay(&mut self) -> u64 {
        match self.byte() % 16 {
            0 => 0,
            1 => 1,
            2 => u64::MAX,
            bits => self.u64() >> (64 - u32::from(bits) * 4),
        }
    }

    fn when(&mut self) -> When {
        match self.byte() % 4 {
            0 => When::Delay(self.delay()),
            1 => When::Boundary {
                level: self.byte() % 11,
                rotations: self.byte() % 4,
                offset: (self.byte() % 5) as i8 - 2,
            },
            2 => When::Back(self.delay()),
            _ => When::At(self.u64()),
        }
    }

    fn target(&mut self) -> When {
        // Mostly forward in time, as a driver would go.
        match self.byte() % 8 {
            0 => When::Back(self.delay()),
            1 => When::At(self.u64()),
            2..=4 => When::Boundary {
                level: self.byte() % 11,
                rotations: self.byte() % 4,
                offset: (self.byte() % 5) as i8 - 2,
            },
            _ => When::Delay(self.delay()),
        }
    }

    fn pick(&mut self) -> Pick {
        let n = u16::from(self.byte());
        match self.byte() % 4 {
            0 => Pick::Any(n),
            1 => Pick::Garbage(u32::from(n)),
            _ => Pick::Live(n),
        }
    }

    fn action(&mut self) -> Action {
        match self.byte() % 10 {
            0 => Action::Nothing,
            1..=3 => Action::Insert(self.delay()),
            4 => Action::InsertAt(self.when()),
            5 => Action::InsertInRange(self.delay(), self.delay()),
            6 => Action::InsertAtInRange(self.when(), self.when()),
            7 => Action::Cancel(self.pick()),
            _ => Action::Reschedule(self.pick(), self.when()),
        }
    }

    fn actions(&mut self) -> Vec<Action> {
        (0..self.byte() % 4).map(|_| self.action()).collect()
    }
}
