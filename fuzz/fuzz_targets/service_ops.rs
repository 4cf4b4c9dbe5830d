//! The timer service under random operation sequences from two threads.
//!
//! A service with two embedded shards and a manual clock. The main thread
//! owns shard 0 and a helper thread owns shard 1; each runs its own part of
//! the decoded operations at the same time (start on either shard, stop,
//! restart, stop a timer of the other thread by id, drop a handle, advance
//! the clock, poll). Callbacks record their expiry and may stop other timers,
//! start a child timer, or restart themselves. After the helper is joined the
//! main thread takes both shards and checks, at that quiescent point and
//! after a final stop-and-drain:
//!
//! * every expiry is on or after its deadline, and the deadline is not before
//!   `start time + delay` (never early);
//! * per one-shot timer: armings (start, `Rearmed`) = fires + `Cancelled`
//!   stops, so no arming fired twice, none was lost, and no `Cancelled`
//!   arming ran;
//! * once every handle is stopped and dropped, nothing fires any more, no
//!   timer is armed and every slot ever used has been freed (memory back to
//!   the baseline).
#![no_main]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use tickwheel::{
    Clock, Driver, Expiry, ManualClock, Restart, ShardGuard, Stop, Timer, TimerId, TimerService,
    TimerSpec,
};

const TICK: Duration = Duration::from_millis(1);
const TICK_NANOS: u64 = 1_000_000;
const CENTURY: Duration = Duration::from_secs(3600 * 24 * 365 * 100);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// Fires once per arming; its creator may restart it.
    OneShot,
    /// Restarts itself from its callback, a few times.
    SelfRestart,
    /// Periodic; not counted per arming (each fire re-arms).
    Periodic,
    /// Started by a callback and forgotten: no handle, fires once.
    Child,
}

/// What one timer went through.
#[derive(Debug)]
struct Label {
    kind: Kind,
    /// Lowest deadline tick any pending arming may have (never-early check).
    lower_bound: AtomicU64,
    armings: AtomicU64,
    fires: AtomicU64,
    cancels: AtomicU64,
}

impl Label {
    fn new(kind: Kind, lower_bound: u64) -> Arc<Self> {
        Arc::new(Label {
            kind,
            lower_bound: AtomicU64::new(lower_bound),
            armings: AtomicU64::new(1),
            fires: AtomicU64::new(0),
            cancels: AtomicU64::new(0),
        })
    }

    fn record_stop(&self, outcome: Stop) {
        if outcome == Stop::Cancelled {
            self.cancels.fetch_add(1, SeqCst);
        }
    }
}

/// Shared by both threads and every callback.
struct World {
    clock: ManualClock,
    /// Every timer ever started: its label and (while known) its id.
    labels: Mutex<Vec<(Arc<Label>, TimerId)>>,
    /// Successful starts (each takes one slot).
    started: AtomicU64,
    /// Set before the final drain: from then on nothing may fire.
    closed: AtomicU64,
    early: Mutex<Vec<String>>,
}

impl World {
    fn lower_bound(&self, delay: Duration) -> u64 {
        let nanos = self.clock.elapsed().as_nanos() + delay.as_nanos();
        u64::try_from(nanos.div_ceil(u128::from(TICK_NANOS))).unwrap_or(u64::MAX)
    }

    fn label(&self, n: u8) -> Option<(Arc<Label>, TimerId)> {
        let labels = self.labels.lock().unwrap();
        if labels.is_empty() {
            return None;
        }
        let (label, id) = &labels[usize::from(n) % labels.len()];
        Some((label.clone(), *id))
    }
}

/// Callback behaviour, decoded from one byte.
#[derive(Clone, Copy, Debug)]
enum Reaction {
    Nothing,
    StopOther(u8),
    StartChild(u8),
}

fn callback(
    world: Arc<World>,
    label: Arc<Label>,
    reaction: Reaction,
    mut self_restarts: u8,
    depth: u8,
) -> impl FnMut(&mut Expiry<'_>) + Send + 'static {
    move |e| {
        if world.closed.load(SeqCst) != 0 {
            world
                .early
                .lock()
                .unwrap()
                .push(format!("{:?} fired after its final stop", e.id()));
        }
        if e.poll_tick() < e.deadline_tick() || e.now_tick() != e.deadline_tick() {
            world.early.lock().unwrap().push(format!(
                "{:?}: deadline {} now {} poll {}",
                e.id(),
                e.deadline_tick(),
                e.now_tick(),
                e.poll_tick()
            ));
        }
        let bound = label.lower_bound.load(SeqCst);
        if e.deadline_tick() < bound {
            world.early.lock().unwrap().push(format!(
                "{:?} fired at deadline {} before its bound {bound}",
                e.id(),
                e.deadline_tick()
            ));
        }
        label.fires.fetch_add(1, SeqCst);
        match reaction {
            Reaction::Nothing => {}
            Reaction::StopOther(n) => {
                if let Some((other, id)) = world.label(n) {
                    other.record_stop(e.stop_id(id));
                }
            }
            Reaction::StartChild(n) if depth == 0 => {
                let delay = TICK * u32::from(n % 70);
                let child = Label::new(Kind::Child, world.lower_bound(delay));
                let spec = TimerSpec::after(delay).on_shard(usize::from(n % 2));
                let cb = callback(world.clone(), child.clone(), Reaction::Nothing, 0, 1);
                if let Ok(timer) = e.schedule(spec, cb) {
                    world.started.fetch_add(1, SeqCst);
                    world.labels.lock().unwrap().push((child, timer.id()));
                    // Runs without a handle: fires once and is freed.
                    timer.forget();
                }
            }
            Reaction::StartChild(_) => {}
        }
        if label.kind == Kind::SelfRestart && self_restarts > 0 {
            self_restarts -= 1;
            let delay = TICK * u32::from(self_restarts);
            let bound = world.lower_bound(delay);
            label.lower_bound.fetch_min(bound, SeqCst);
            if let Ok(Restart::Rearmed) = e.restart(delay) {
                label.armings.fetch_add(1, SeqCst);
            }
            label.lower_bound.store(bound, SeqCst);
        }
    }
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

    fn delay(&mut self) -> Duration {
        match self.byte() % 8 {
            0 => Duration::ZERO,
            1 => Duration::from_micros(1),
            2 => Duration::MAX,
            3 => TICK * (1 << (self.byte() % 24)),
            _ => Duration::from_micros(u64::from(self.byte()) * 250),
        }
    }
}

/// One thread's share of the operations and its handles.
struct Actor<'a> {
    service: &'a TimerService,
    world: &'a Arc<World>,
    guard: ShardGuard,
    /// Handles this thread created (only the creator restarts a timer).
    handles: Vec<(Arc<Label>, Timer)>,
}

impl Actor<'_> {
    fn run(&mut self, ops: &[u8]) {
        let mut r = Reader(ops);
        while !r.0.is_empty() {
            match r.byte() % 10 {
                0..=2 => {
                    let delay = r.delay();
                    let kind = match r.byte() % 6 {
                        0 => Kind::SelfRestart,
                        1 => Kind::Periodic,
                        _ => Kind::OneShot,
                    };
                    let reaction = match r.byte() % 4 {
                        0 => Reaction::StopOther(r.byte()),
                        1 => Reaction::StartChild(r.byte()),
                        _ => Reaction::Nothing,
                    };
                    let shard = usize::from(r.byte() % 2);
                    self.start(delay, kind, reaction, shard, r.byte() % 4);
                }
                3 => {
                    if let Some((label, timer)) = self.pick(r.byte()) {
                        label.record_stop(timer.stop());
                    }
                }
                4 => {
                    let delay = r.delay();
                    if let Some((label, timer)) = self.pick(r.byte()) {
                        if label.kind != Kind::SelfRestart {
                            let bound = self.world.lower_bound(delay);
                            label.lower_bound.fetch_min(bound, SeqCst);
                            // Lower only: the callback of the previous
                            // arming may be running on the other thread now.
                            if let Ok(Restart::Rearmed) = timer.restart(delay) {
                                label.armings.fetch_add(1, SeqCst);
                            }
                        }
                    }
                }
                5 => {
                    // Stop a timer of anyone, by id.
                    if let Some((label, id)) = self.world.label(r.byte()) {
                        label.record_stop(self.service.stop_id(id));
                    }
                }
                6 => {
                    // Stop, then drop the handle (dropping an armed timer
                    // cancels it without reporting; stopping first keeps the
                    // books exact). Self-restarting timers keep theirs.
                    let n = r.byte();
                    if !self.handles.is_empty() {
                        let i = usize::from(n) % self.handles.len();
                        if self.handles[i].0.kind != Kind::SelfRestart {
                            let (label, timer) = self.handles.swap_remove(i);
                            label.record_stop(timer.stop());
                            drop(timer);
                        }
                    }
                }
                7 => self.world.clock.advance(TICK * u32::from(r.byte() % 8)),
                8 => {
                    // Big jumps, but the clock stays under a century, so the
                    // final drain (four centuries) never reaches the end of
                    // the clock's range (584 years): a timer armed once the
                    // clock has reached its last tick can never fire (there is
                    // no later tick), which would read as a lost arming here.
                    let ticks = 1u64 << (r.byte() % 40);
                    if self.world.clock.elapsed() < CENTURY {
                        self.world
                            .clock
                            .advance(Duration::from_nanos(ticks.saturating_mul(TICK_NANOS)));
                    }
                }
                _ => {
                    let _ = self.guard.poll();
                }
            }
        }
        let _ = self.guard.poll();
    }

    fn pick(&self, n: u8) -> Option<&(Arc<Label>, Timer)> {
        (!self.handles.is_empty()).then(|| &self.handles[usize::from(n) % self.handles.len()])
    }

    fn start(&mut self, delay: Duration, kind: Kind, reaction: Reaction, shard: usize, n: u8) {
        let label = Label::new(kind, self.world.lower_bound(delay));
        let spec = TimerSpec::after(delay).on_shard(shard);
        let spec = if kind == Kind::Periodic {
            spec.every(TICK * (1 + u32::from(n)))
        } else {
            spec
        };
        // Self-restarts: `n` more armings at most.
        let cb = callback(self.world.clone(), label.clone(), reaction, n, 0);
        // Publish the label before the timer can fire (a callback may look it up).
        let timer = self.service.schedule(spec, cb).expect("service is running");
        self.world.started.fetch_add(1, SeqCst);
        self.world
            .labels
            .lock()
            .unwrap()
            .push((label.clone(), timer.id()));
        self.handles.push((label, timer));
    }
}

fn drain(guards: &mut [ShardGuard], world: &World) {
    for _ in 0..4 {
        world.clock.advance(CENTURY);
        for guard in guards.iter_mut() {
            guard.poll().unwrap();
        }
    }
}

fn run(data: &[u8]) {
    if data.is_empty() {
        return;
    }
    let split = usize::from(data[0]) % data.len();
    let (mine, theirs) = data[1..].split_at(split.min(data.len() - 1));
    let clock = ManualClock::new();
    let service = TimerService::builder()
        .shards(2)
        .tick(TICK)
        .driver(Driver::Embedded)
        .clock(Clock::Manual(clock.clone()))
        .build()
        .unwrap();
    let world = Arc::new(World {
        clock,
        labels: Mutex::new(Vec::new()),
        started: AtomicU64::new(0),
        closed: AtomicU64::new(0),
        early: Mutex::new(Vec::new()),
    });

    let theirs = theirs.to_vec();
    let helper = {
        let (service, world) = (service.clone(), world.clone());
        std::thread::spawn(move || {
            let guard = service.claim_shard(1).unwrap();
            let mut actor = Actor {
                service: &service,
                world: &world,
                guard,
                handles: Vec::new(),
            };
            actor.run(&theirs);
            actor.handles
        })
    };
    let mut main = Actor {
        service: &service,
        world: &world,
        guard: service.claim_shard(0).unwrap(),
        handles: Vec::new(),
    };
    main.run(mine);
    let mut handles = helper.join().expect("helper thread panicked");
    handles.append(&mut main.handles);
    let mut guards = [main.guard, service.claim_shard(1).unwrap()];

    // Quiescent point: nothing runs. Each one-shot timer still armed counts once.
    let mut armed_now: HashMap<*const Label, u64> = HashMap::new();
    for (label, timer) in &handles {
        if timer.is_armed() {
            *armed_now.entry(Arc::as_ptr(label)).or_default() += 1;
        }
    }
    for (label, _) in world.labels.lock().unwrap().iter() {
        // Periodic timers re-arm on every fire; children have no handle to
        // ask whether they are armed (they are checked after the drain).
        if matches!(label.kind, Kind::Periodic | Kind::Child) {
            continue;
        }
        let (armings, fires, cancels) = (
            label.armings.load(SeqCst),
            label.fires.load(SeqCst),
            label.cancels.load(SeqCst),
        );
        let armed = armed_now.get(&Arc::as_ptr(label)).copied().unwrap_or(0);
        assert_eq!(
            armings,
            fires + cancels + armed,
            "{label:?}: armings != fires + cancels + still armed"
        );
    }

    // Stop everything, then nothing may fire any more.
    for (label, timer) in &handles {
        label.record_stop(timer.stop());
    }
    drop(handles);
    // Forgotten children still fire once; let them, then close.
    drain(&mut guards, &world);
    world.closed.store(1, SeqCst);
    drain(&mut guards, &world);

    for (label, _) in world.labels.lock().unwrap().iter() {
        if label.kind == Kind::Periodic {
            continue;
        }
        let (armings, fires, cancels) = (
            label.armings.load(SeqCst),
            label.fires.load(SeqCst),
            label.cancels.load(SeqCst),
        );
        assert_eq!(
            armings,
            fires + cancels,
            "{label:?}: armings != fires + cancels"
        );
    }
    let early = world.early.lock().unwrap();
    assert!(early.is_empty(), "{early:?}");
    let stats = service.stats();
    assert_eq!(stats.armed, 0, "{stats:?}");
    assert_eq!(
        stats.freed,
        world.started.load(SeqCst),
        "every slot is freed once its timer is gone: {stats:?}"
    );
    drop(guards);
}

fuzz_target!(|data: &[u8]| run(data));
