//! Who runs a shard: a [`ShardGuard`] held by an application thread
//! (embedded), or one built-in driver thread per shard.

use std::fmt;
use std::marker::PhantomData;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use super::config::{Config, DriverPriority};
use super::shard::Fired;
use super::{Driver, Inner, TimerId, OWNED_SHARD};
use crate::sync::{thread, Arc};
use crate::TimerError;

/// Exclusive ownership of one shard by the current thread.
///
/// While a thread holds the guard it must call [`poll`](Self::poll) from its
/// loop; timers it starts without naming a shard go to this shard. Dropping
/// the guard gives the shard back (timers stay armed). Not `Send`: a shard is
/// owned by one thread at a time, and moving it means dropping the guard and
/// claiming again on the other thread.
pub struct ShardGuard {
    inner: Arc<Inner>,
    shard: usize,
    _not_send: PhantomData<*const ()>,
}

impl ShardGuard {
    pub(crate) fn claim(inner: &Arc<Inner>, shard: usize) -> Result<ShardGuard, TimerError> {
        if shard >= inner.shards.len() {
            return Err(TimerError::ShardOutOfRange);
        }
        if inner.is_shut_down() {
            return Err(TimerError::Shutdown);
        }
        if !inner.shards[shard].try_claim() {
            return Err(TimerError::ShardClaimed);
        }
        Ok(Self::adopt(inner.clone(), shard))
    }

    /// Takes over a shard already claimed on this thread's behalf.
    fn adopt(inner: Arc<Inner>, shard: usize) -> ShardGuard {
        OWNED_SHARD.with(|owned| owned.set((inner.address(), shard)));
        inner.shards[shard].mark_awake();
        ShardGuard {
            inner,
            shard,
            _not_send: PhantomData,
        }
    }

    /// Which shard this is.
    pub fn index(&self) -> usize {
        self.shard
    }

    /// Fires every timer of this shard that is due by the service clock's
    /// current time, running callbacks on this thread. Returns how many ran.
    ///
    /// Timers of *other* shards that this thread cancelled (or whose
    /// handles it dropped) since its last poll are handed to their owners
    /// in batches: when 32 have gathered, at the end of each poll, and when
    /// this guard is dropped. Until then their slots (at most 32) wait to
    /// be reused; the timers themselves are stopped at once.
    ///
    /// # Errors
    /// [`TimerError::Reentrant`] when called from inside one of this shard's
    /// own callbacks; [`TimerError::Shutdown`] once the service is shut down
    /// (the shard is then swept: pending callbacks are dropped unrun).
    pub fn poll(&mut self) -> Result<usize, TimerError> {
        let shard = &self.inner.shards[self.shard];
        if !shard.enter_poll() {
            return Err(TimerError::Reentrant);
        }
        if self.inner.is_shut_down() {
            let _polling = Polling(shard);
            shard.sweep(&self.inner, self.shard);
            return Err(TimerError::Shutdown);
        }
        shard.mark_awake();
        // Left by a guard's drop, so that a panic out of the poll (none is
        // expected: user code runs under `catch_unwind`) cannot leave every
        // later poll refused as re-entrant.
        let _polling = Polling(shard);
        let now = self.inner.current_tick(self.shard);
        // SAFETY: this guard is the shard's claim, and `enter_poll` succeeded.
        let polled = unsafe { shard.poll(&self.inner, self.shard, now) };
        Ok(polled.fired)
    }

    /// Collect-then-run: hands out the next timer of this shard due by the
    /// service clock's current time without running its callback, for a
    /// loop that runs timers on its own stack, when it chooses (libuv's
    /// timers phase; a loop that releases a lock first). `None` when
    /// nothing more is due.
    ///
    /// The handed-out [`Due`] has fired: its arming is decided exactly as a
    /// [`poll`](Self::poll) decides it, once, so it is never handed out or
    /// run again, and a STOP of it returns [`Stop::Running`](crate::Stop)
    /// until the `Due` is gone, then [`Stop::Fired`](crate::Stop) (a
    /// periodic timer is re-armed when the `Due` goes, on its grid, and
    /// its next arming can be cancelled). [`Due::run`] runs the callback
    /// here, as a poll would; dropping the `Due` unrun ends the expiry
    /// without running it. Either way the callback stays the timer's
    /// (a periodic one runs again next period).
    ///
    /// One `Due` at a time: it borrows the guard. Calls until `None` form
    /// one pass: a timer armed meanwhile for the tick already reached (a
    /// callback restarting itself with zero delay) is handed out by the next
    /// round, after this one returned `None` (CONTRACT 1).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use tickwheel::{Driver, TimerService};
    /// let service = TimerService::builder().shards(1).driver(Driver::Embedded).build()?;
    /// let mut guard = service.claim_shard(0)?;
    /// let timer = service.start(Duration::ZERO, |_| println!("ran"))?;
    /// let mut ids = Vec::new();
    /// while let Some(due) = guard.poll_due()? {
    ///     ids.push(due.id());
    ///     due.run(); // or drop it: the timer fired, its callback not run
    /// }
    /// assert_eq!(ids, [timer.id()]);
    /// # Ok::<(), tickwheel::TimerError>(())
    /// ```
    ///
    /// # Errors
    /// As [`poll`](Self::poll).
    pub fn poll_due(&mut self) -> Result<Option<Due<'_>>, TimerError> {
        let shard = &self.inner.shards[self.shard];
        if !shard.enter_poll() {
            return Err(TimerError::Reentrant);
        }
        let _polling = Polling(shard);
        if self.inner.is_shut_down() {
            shard.sweep(&self.inner, self.shard);
            return Err(TimerError::Shutdown);
        }
        shard.mark_awake();
        let now = self.inner.current_tick(self.shard);
        // SAFETY: this guard is the shard's claim, `enter_poll` succeeded,
        // and no `Due` is alive (it borrows the guard).
        let fired = unsafe { shard.collect(&self.inner, now) };
        Ok(fired.map(|fired| Due {
            inner: &self.inner,
            shard: self.shard,
            fired: Some(fired),
            _not_send: PhantomData,
        }))
    }

    /// The tick by which this shard must be polled again: the deadline of
    /// its earliest armed timer, exactly (a poll at that tick first moves far
    /// timers down the wheel's levels as far as it needs, so the owner does
    /// not wake for that alone), unless that timer shares a coarse bucket
    /// with more than 64 others: then the bucket's first tick, where they
    /// move down a level (CONTRACT 22). Never later than the earliest
    /// deadline; `None` when nothing is armed. O(1) while the earliest
    /// timer stays armed; after it fires, stops or moves, the first
    /// question reads at most 64 entries of one bucket.
    pub fn next_deadline_tick(&mut self) -> Option<u64> {
        // SAFETY: this guard is the shard's claim.
        unsafe { self.inner.shards[self.shard].next_deadline(&self.inner) }
    }

    /// How long the owner may sleep: until [`next_deadline_tick`](Self::next_deadline_tick)
    /// (`Some(ZERO)` if a timer is due now), or `None` if nothing is armed. Call it right before parking: it also tells other threads that
    /// a start due earlier than that must wake this owner (through the
    /// service's waker); if one already arrived it returns `Some(ZERO)`.
    pub fn next_deadline(&mut self) -> Option<Duration> {
        let next = self.next_deadline_tick();
        self.publish_sleep(next, None)
    }

    /// [`next_deadline`](Self::next_deadline) for a `next` that the caller
    /// has just read from [`next_deadline_tick`](Self::next_deadline_tick)
    /// (the driver reads it once per loop, for its lending decision too),
    /// sleeping no later than tick `cap` if given. Nothing can have entered
    /// the wheel since: this thread holds the shard, and what others sent
    /// meanwhile waits in the remote queue, which `Shard::publish_sleep` checks.
    fn publish_sleep(&mut self, next: Option<u64>, cap: Option<u64>) -> Option<Duration> {
        let tick = match cap {
            Some(cap) => Some(next.map_or(cap, |next| next.min(cap))),
            None => next,
        };
        let shard = &self.inner.shards[self.shard];
        if !shard.publish_sleep(tick) {
            return Some(Duration::ZERO);
        }
        let tick = tick?;
        let due = tick.saturating_mul(self.inner.tick_nanos);
        Some(Duration::from_nanos(
            due.saturating_sub(self.inner.clock.raw_nanos()),
        ))
    }

    /// Sleeps with the shard lent out: publishes the sleep as
    /// [`next_deadline`](Self::next_deadline) does and hands its result to
    /// `park`, which should block for at most that long (or until the
    /// service's waker calls, `None`: until then). While `park` runs, other
    /// threads apply their starts and restarts of this shard's timers
    /// themselves, directly in its wheel (taking in the stops queued for it
    /// on the way), instead of queueing them for this owner and waking it:
    /// an idle owner then costs them what a lock per shard would. They
    /// still wake this owner (once per sleep) for a timer due before the end
    /// of the sleep, or once the stops queued for it pass a third of its
    /// wheel. When `park` returns, the shard is this thread's again; poll it
    /// next.
    ///
    /// If work is already waiting, `park` gets `Some(Duration::ZERO)` and the
    /// shard is not lent. Inside `park`, this thread is not the shard's owner:
    /// timers it starts there go through the same path as another thread's.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use tickwheel::{Driver, TimerService};
    /// let service = TimerService::builder().shards(1).driver(Driver::Embedded).build()?;
    /// let mut guard = service.claim_shard(0)?;
    /// let timer = service.start(Duration::from_millis(2), |_| {})?;
    /// while guard.poll()? == 0 {
    ///     guard.idle(|sleep| std::thread::sleep(sleep.unwrap_or(Duration::from_millis(1))));
    /// }
    /// # drop(timer);
    /// # Ok::<(), tickwheel::TimerError>(())
    /// ```
    pub fn idle<R>(&mut self, park: impl FnOnce(Option<Duration>) -> R) -> R {
        let next = self.next_deadline_tick();
        self.idle_until(next, None, park)
    }

    /// [`idle`](Self::idle) for a `next` just read from
    /// [`next_deadline_tick`](Self::next_deadline_tick), sleeping no later
    /// than tick `cap` if given.
    fn idle_until<R>(
        &mut self,
        next: Option<u64>,
        cap: Option<u64>,
        park: impl FnOnce(Option<Duration>) -> R,
    ) -> R {
        let sleep = self.publish_sleep(next, cap);
        if sleep == Some(Duration::ZERO) || self.inner.is_shut_down() {
            return park(sleep);
        }
        let shard = &self.inner.shards[self.shard];
        // SAFETY: this guard holds the shard.
        if unsafe { shard.has_backlog() } {
            return park(Some(Duration::ZERO));
        }
        let _lent = Lent::new(shard);
        park(sleep)
    }

    /// Timers in this shard's wheel.
    pub fn armed(&self) -> usize {
        self.inner.shards[self.shard].counters.armed.get() as usize
    }
}

/// A timer handed out by [`ShardGuard::poll_due`]: it has fired, and its
/// callback runs when the caller calls [`run`](Self::run), on this thread;
/// dropped unrun, the expiry ends without it. Not `Send`: the owner's.
pub struct Due<'a> {
    inner: &'a Arc<Inner>,
    shard: usize,
    /// `Some` until the expiry is finished (by `Drop`).
    fired: Option<Fired>,
    _not_send: PhantomData<*const ()>,
}

impl Due<'_> {
    fn fired(&self) -> &Fired {
        self.fired
            .as_ref()
            .expect("a Due holds its expiry until dropped")
    }

    /// The timer that is due.
    pub fn id(&self) -> TimerId {
        self.fired().id
    }

    /// The tick it was due at.
    pub fn deadline_tick(&self) -> u64 {
        self.fired().deadline
    }

    /// The tick the service clock read when it was handed out.
    pub fn poll_tick(&self) -> u64 {
        self.fired().now
    }

    /// How late it was handed out: from the deadline asked for, on the
    /// service's clock (as [`Expiry::lateness`](crate::Expiry::lateness)).
    pub fn lateness(&self) -> Duration {
        Duration::from_nanos(self.fired().lateness)
    }

    /// For a periodic timer: periods skipped because the owner was late.
    pub fn overruns(&self) -> u64 {
        self.fired().overruns
    }

    /// Runs the timer's callback on this thread, as a poll would (a panic is
    /// caught, counted and reported: CONTRACT 16), and ends the expiry.
    pub fn run(mut self) {
        let (inner, shard) = (self.inner, self.shard);
        if let Some(fired) = self.fired.as_mut() {
            fired.run(inner, shard);
        }
    }
}

impl Drop for Due<'_> {
    fn drop(&mut self) {
        if let Some(fired) = self.fired.take() {
            // SAFETY: the `Due` borrows the guard, the shard's claim, and no
            // core reference is live in user code.
            unsafe { self.inner.shards[self.shard].finish(self.inner, fired) };
        }
    }
}

impl fmt::Debug for Due<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Due")
            .field("id", &self.id())
            .field("deadline_tick", &self.deadline_tick())
            .field("overruns", &self.overruns())
            .finish()
    }
}

impl Drop for ShardGuard {
    fn drop(&mut self) {
        let shard = &self.inner.shards[self.shard];
        if self.inner.is_shut_down() {
            shard.sweep(&self.inner, self.shard);
        }
        // SAFETY: this guard holds the claim; no core reference is live.
        unsafe {
            shard.flush_stops(&self.inner);
            shard.settle_credits(&self.inner, self.shard, false);
        }
        OWNED_SHARD.with(|owned| owned.set((0, 0)));
        shard.unclaim();
    }
}

/// A poll in progress on a shard; dropping it (also while unwinding) ends it.
struct Polling<'a>(&'a super::shard::Shard);

impl Drop for Polling<'_> {
    fn drop(&mut self) {
        self.0.leave_poll();
    }
}

/// A shard lent out by its owner for the duration of `park` in
/// [`ShardGuard::idle`]; taken back on drop, also if `park` panics (a guard
/// dropped with its shard still lent would give it up under a helper).
struct Lent<'a> {
    shard: &'a super::shard::Shard,
    /// This thread's `OWNED_SHARD` before: while the shard is lent, this
    /// thread is not its owner.
    owned: (usize, usize),
}

impl<'a> Lent<'a> {
    fn new(shard: &'a super::shard::Shard) -> Self {
        let owned = OWNED_SHARD.with(|owned| owned.replace((0, 0)));
        shard.lend();
        Lent { shard, owned }
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        self.shard.take_back();
        self.shard.mark_awake();
        OWNED_SHARD.with(|owned| owned.set(self.owned));
    }
}

impl fmt::Debug for ShardGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardGuard")
            .field("shard", &self.shard)
            .finish()
    }
}

/// The built-in driver threads of a service.
pub(crate) struct DriverThreads {
    threads: Mutex<Vec<thread::JoinHandle<()>>>,
    handles: Box<[OnceLock<thread::Thread>]>,
}

impl DriverThreads {
    pub(crate) fn new(shards: usize) -> Self {
        DriverThreads {
            threads: Mutex::new(Vec::new()),
            handles: (0..shards).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Spawns a driver thread per shard, at `priority`. On an error the
    /// threads already running are left for the caller's shutdown to stop
    /// and join (they are recorded), and no shard is left claimed without
    /// a thread.
    pub(crate) fn spawn_all(
        inner: &Arc<Inner>,
        pin: bool,
        priority: DriverPriority,
    ) -> Result<(), TimerError> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        for shard in 0..inner.shards.len() {
            // Claimed here so that no application thread can take it first.
            let claimed = inner.shards[shard].try_claim();
            debug_assert!(claimed);
            let driver = inner.clone();
            let spawned = thread::Builder::new()
                .name(format!("tickwheel-{shard}"))
                .spawn(move || {
                    if pin {
                        pin_to_cpu(shard % cores);
                    }
                    no_timer_slack();
                    if priority == DriverPriority::Normal {
                        short_slice();
                    }
                    // The models' park tokens are the thread's own (see
                    // `sync.rs`): only the thread can hand out its handle.
                    #[cfg(any(loom, shuttle))]
                    let _ = driver.drivers.handles[shard].set(thread::current());
                    drive(ShardGuard::adopt(driver, shard));
                });
            let handle = match spawned {
                Ok(handle) => handle,
                Err(_) => {
                    inner.shards[shard].unclaim();
                    return Err(TimerError::InvalidConfig);
                }
            };
            // Recorded here, before `build` returns, not by the thread once
            // it runs: a service dropped right after `build` shuts down
            // before its drivers may have started, and a shutdown that
            // found no handle woke nobody, while a driver that then read
            // the shutdown flag stale parked for good, with `drop` joining
            // it (miri, `tests/service.rs::the_default_tick_is_500_us_with_driver_threads_and_1_ms_embedded`:
            // "the evaluated program deadlocked"). An unpark given before
            // the thread parks is kept for its park.
            #[cfg(not(any(loom, shuttle)))]
            let _ = inner.drivers.handles[shard].set(handle.thread().clone());
            let prioritized = set_priority(&handle, priority);
            inner
                .drivers
                .threads
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(handle);
            prioritized?;
        }
        Ok(())
    }

    /// Wakes whoever owns `shard`.
    pub(crate) fn wake(&self, shard: usize, config: &Config) {
        match config.driver {
            Driver::Threads { .. } => {
                if let Some(thread) = self.handles[shard].get() {
                    thread.unpark();
                }
            }
            Driver::Embedded => {
                if let Some(waker) = &config.waker {
                    waker(shard);
                }
            }
        }
    }

    /// Shutdown: wake every driver thread and wait for it to finish (each
    /// sweeps its own shard). A driver thread that calls this (from a
    /// callback) does not wait for itself.
    pub(crate) fn stop_all(&self, config: &Config, shards: usize) {
        for shard in 0..shards {
            self.wake(shard, config);
        }
        self.join_remaining();
    }

    pub(crate) fn join_remaining(&self) {
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        let me = thread::current().id();
        for handle in threads {
            if handle.thread().id() != me {
                let _ = handle.join();
            }
        }
    }
}

/// The driver thread's loop: poll, then sleep until the next deadline.
fn drive(mut guard: ShardGuard) {
    let inner = guard.inner.clone();
    // With a manual clock, time moves without anyone telling this thread:
    // re-read it every millisecond.
    let manual_cap = inner.clock.is_manual().then_some(Duration::from_millis(1));
    let shard = &inner.shards[guard.shard];
    // While producers keep handing the shard work, sleep at most about a
    // millisecond at a time, so that a start due later than that need not
    // wake this thread (a wake costs the producer a system call).
    let active_ticks = inner.ticks_ceil(1_000_000).max(1);
    // Lend only when nothing is due for a while (see `LEND_QUIET_NANOS`).
    let quiet_ticks = inner.ticks_ceil(LEND_QUIET_NANOS).max(1);
    // A real-time driver does not linger: spinning at its
    // priority, it would keep the producers it waits for off its core.
    let mut linger = Linger::new(inner.config.priority == DriverPriority::Normal);
    while !inner.is_shut_down() {
        let _ = guard.poll();
        let now = inner.current_tick(guard.shard);
        let next = guard.next_deadline_tick();
        let lend =
            inner.config.lend && next.is_none_or(|next| next >= now.saturating_add(quiet_ticks));
        let cap = (shard.take_activity() && lend).then(|| now.saturating_add(active_ticks));
        let mut sleep = |sleep: Option<Duration>| {
            if inner.is_shut_down() || sleep.is_some_and(|d| d.is_zero()) {
                return;
            }
            if linger.waits_for_work(shard) {
                return;
            }
            match (sleep, manual_cap) {
                (Some(d), Some(cap)) => thread::park_timeout(d.min(cap)),
                (None, Some(cap)) => thread::park_timeout(cap),
                (Some(d), None) => thread::park_timeout(d),
                (None, None) => thread::park(),
            }
            linger.after_park(shard);
        };
        if lend {
            guard.idle_until(next, cap, sleep);
        } else {
            sleep(guard.publish_sleep(next, cap));
        }
    }
    // `guard` drops here: it sweeps the shard (shut down) and unclaims it.
}

/// A driver thread lends its shard only when nothing in it is due sooner than
/// this (or nothing is armed). Lent, producers apply their operations
/// themselves and are never held by backpressure; on a machine with more
/// busy threads than cores that also means nothing slows them down, and a
/// driver with timers due soon then gets too little of a core to fire them
/// on time (8 C threads arming 160k timers due in 1-50 ms on 2 cores: p50
/// lateness 13-24 ms lent against 1.1-1.5 ms not lent: `ffi-tests/overload.c`). A shard
/// whose timers are far off (idle timeouts, or nothing armed) is where
/// lending pays, and where it costs no lateness.
const LEND_QUIET_NANOS: u64 = 5_000_000;

/// A driver thread's short wait for more work before it parks.
///
/// Parking costs the thread itself little, but waking it costs the producer
/// a system call and the driver a context switch: several microseconds, more
/// than a START and a STOP together. So after a poll the driver, its shard
/// already lent and its sleep published, spins for a moment: a producer
/// that needs it in that moment claims the wake as usual, but finds it not
/// yet parked, and the unpark is then a store instead of a system call.
///
/// It spins only, and briefly; it never yields. On a machine with more
/// busy threads than cores, the scheduler's fair share (EEVDF) answers each
/// yield by handing the core to a busy thread for a whole slice, a few
/// milliseconds, and a driver yielding in a loop fires nothing that comes
/// due meanwhile: with 48 yields after the spins, `churn_lateness --impl
/// tickwheel` (4 churn threads on 2 cores) measured p99 lateness of 31-110
/// ms in some runs, against 2.2-3.0 ms spinning only, with non-owner START
/// + cancel and RESTART unchanged (`service_vs_tokio -- targets nonowner`).
///
/// Adaptive, so an idle or rarely used shard does not burn CPU: a wait that
/// found work keeps the full budget; one that found nothing halves it, down
/// to a few spins; a park that ends with work waiting (a producer woke the
/// driver) doubles it again.
///
/// Under loom and shuttle the driver never lingers: the wait changes no
/// state, and exploring it would only multiply schedules.
struct Linger {
    budget: u32,
    /// `false` for a real-time driver, which never lingers.
    enabled: bool,
}

impl Linger {
    /// The full budget, in spins.
    const FULL: u32 = 64;
    const MIN: u32 = 4;

    /// `false`: never linger (a real-time driver).
    fn new(lingers: bool) -> Self {
        Linger {
            budget: Self::FULL,
            enabled: lingers,
        }
    }

    /// `true` as soon as a producer claims the wake (it needs the owner
    /// before the published sleep ends), `false` when the budget is spent
    /// without one. Entries queued for later do not end the wait.
    fn waits_for_work(&mut self, shard: &super::shard::Shard) -> bool {
        if cfg!(any(loom, shuttle)) || !self.enabled {
            return false;
        }
        for _ in 0..self.budget {
            if shard.wake_claimed() {
                self.budget = Self::FULL;
                return true;
            }
            std::hint::spin_loop();
        }
        self.budget = (self.budget / 2).max(Self::MIN);
        false
    }

    /// After a park: if work is waiting, a producer woke this driver, and
    /// lingering next time would likely have saved that wake.
    fn after_park(&mut self, shard: &super::shard::Shard) {
        if shard.wake_claimed() {
            self.budget = (self.budget * 2).min(Self::FULL);
        }
    }
}

/// Asks the kernel to end this thread's sleeps on time (Linux): by
/// default a normal thread's timed sleep may end up to 50 µs late, which
/// lets the kernel batch wakeups, and a driver thread exists to wake at
/// its deadlines. Timers armed from a thread with nothing else running
/// (`churn_lateness --churn-threads 0 --arm-threads 1 --timers 20000`,
/// 1 ms ticks) fired with a p50 lateness of 0.53 ms instead of 0.58-0.60
/// and a p99 of 1.01 instead of 1.08 (half a tick is the floor of the p50,
/// a tick that of the maximum). A real-time thread has no slack anyway.
/// (Not under miri, which cannot make the call.)
#[cfg(all(target_os = "linux", not(any(loom, shuttle, miri))))]
fn no_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes a value and changes only the calling
    // thread's slack; no memory is passed.
    unsafe {
        let zero: libc::c_ulong = 0;
        libc::prctl(
            libc::PR_SET_TIMERSLACK,
            1 as libc::c_ulong,
            zero,
            zero,
            zero,
        );
    }
}

#[cfg(not(all(target_os = "linux", not(any(loom, shuttle, miri)))))]
fn no_timer_slack() {}

/// The time slice a normal-priority driver thread asks for: the shortest
/// the kernel grants (Linux clamps a requested slice to 0.1-100 ms).
#[cfg(all(target_os = "linux", not(any(loom, shuttle, miri))))]
const DRIVER_SLICE_NANOS: u64 = 100_000;

/// Asks the kernel for a short time slice for this (normal-priority)
/// thread: Linux 6.12 and later take `sched_runtime` in `sched_setattr` for
/// `SCHED_OTHER` as the slice the thread wants, with no privilege, and a
/// thread that wakes with a slice shorter than the running thread's may
/// take the core at once, where by default it waits until the running
/// thread's slice ends (up to a few milliseconds). A driver mostly runs
/// for microseconds per wake; a longer burst (many callbacks due at once)
/// gives way sooner while other threads wait, and over time its share of
/// the CPU is unchanged (that follows its weight, not its slice). Under
/// `perf sched` its wake-up delay went from p99 0.54 ms to 0.05 ms. On 2 cores with tokio's 2 workers busy and tickwheel's
/// `Sleep` futures on 2 drivers (`churn_lateness --impl tickwheel-sleep`)
/// the p99 lateness went from 1.9-2.4 ms to 1.5-1.6 ms, timers fired a
/// tick or more late from 1.4 % to 0.2 %. Older kernels ignore the field
/// or refuse the call; either way nothing else changes, so the result is
/// not checked. `tests/driver_slice.rs` reads the slice back.
#[cfg(all(target_os = "linux", not(any(loom, shuttle, miri))))]
fn short_slice() {
    /// `struct sched_attr` as of Linux 4.13 (`SCHED_ATTR_SIZE_VER1`).
    #[repr(C)]
    #[derive(Default)]
    struct SchedAttr {
        size: u32,
        sched_policy: u32,
        sched_flags: u64,
        sched_nice: i32,
        sched_priority: u32,
        sched_runtime: u64,
        sched_deadline: u64,
        sched_period: u64,
        sched_util_min: u32,
        sched_util_max: u32,
    }
    let size = std::mem::size_of::<SchedAttr>() as u32;
    let mut attr = SchedAttr::default();
    // The thread's own settings first: its nice value (inherited from the
    // thread that built the service) stays as it is.
    // SAFETY: `attr` is writable and `size` bytes long; the call fills it
    // with the calling thread's (pid 0) attributes.
    let read = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0 as libc::pid_t,
            &mut attr as *mut SchedAttr,
            size as libc::c_uint,
            0 as libc::c_uint,
        )
    };
    if read != 0 || attr.sched_policy != libc::SCHED_OTHER as u32 {
        return;
    }
    attr.size = size;
    attr.sched_flags = 0;
    attr.sched_runtime = DRIVER_SLICE_NANOS;
    // SAFETY: `attr` is a valid `sched_attr` of the size it states, alive
    // across the call, which only reads it and changes the calling thread.
    unsafe {
        libc::syscall(
            libc::SYS_sched_setattr,
            0 as libc::pid_t,
            &attr as *const SchedAttr,
            0 as libc::c_uint,
        );
    }
}

#[cfg(not(all(target_os = "linux", not(any(loom, shuttle, miri)))))]
fn short_slice() {}

#[cfg(target_os = "linux")]
fn pin_to_cpu(cpu: usize) {
    // SAFETY: `set` is a plain bitmask owned by this frame; the call only
    // reads it and affects the calling thread (pid 0).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

#[cfg(not(target_os = "linux"))]
fn pin_to_cpu(_cpu: usize) {}

/// Gives a driver thread its scheduling priority (from the thread that
/// spawns it, so that a refusal is the builder's error). Only the thread
/// changes: `pthread_setschedparam` acts on one thread, not the process.
#[cfg(all(target_os = "linux", not(any(loom, shuttle))))]
fn set_priority(
    handle: &thread::JoinHandle<()>,
    priority: DriverPriority,
) -> Result<(), TimerError> {
    use std::os::unix::thread::JoinHandleExt;
    let DriverPriority::RealTime(level) = priority else {
        return Ok(());
    };
    let param = libc::sched_param {
        sched_priority: i32::from(level),
    };
    // SAFETY: the handle's thread has not been joined or detached, so its
    // pthread id is valid; `param` lives across the call.
    let refused =
        unsafe { libc::pthread_setschedparam(handle.as_pthread_t(), libc::SCHED_FIFO, &param) };
    if refused == 0 {
        Ok(())
    } else {
        Err(TimerError::DriverPriority)
    }
}

/// Real-time priority is offered on Linux only.
#[cfg(not(all(target_os = "linux", not(any(loom, shuttle)))))]
fn set_priority(
    _handle: &thread::JoinHandle<()>,
    priority: DriverPriority,
) -> Result<(), TimerError> {
    match priority {
        DriverPriority::Normal => Ok(()),
        DriverPriority::RealTime(_) => Err(TimerError::DriverPriority),
    }
}
