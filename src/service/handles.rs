//! How [`Timer`](super::Timer) handles keep the service alive, counted so
//! that no cache line moves between cores when one thread starts a timer
//! and another drops its handle.
//!
//! # What the count is for
//!
//! A handle holds a plain pointer to the service (`Inner`), not an `Arc`:
//! cloning an `Arc` per START would make every thread write one shared
//! reference count. Until shutdown begins some `TimerService` (or the C
//! service object) holds the service, so handles need nothing. Shutdown
//! (run while the last `TimerService` still holds its `Arc`) takes one
//! strong count for the handles, given back when the last handle goes; after
//! that, a handle made from a live service takes it again (0 -> 1) and the
//! last one to go gives it back (1 -> 0).
//!
//! # Who counts where
//!
//! Each shard has two monotonic counters on a line of their own, `made` and
//! `dropped`. A thread counts every handle it makes or drops on *its own*
//! counting shard (`Inner::choose_shard`: the shard it owns, else the shard
//! its STARTs go to), whatever shard the timer is on. A handle made on one
//! core and dropped on another therefore writes one line on each core, each
//! line staying where it is: the cross-thread stop benchmark
//! (`service_vs_tokio/cross_stop/tickwheel-embedded/2`) went from 4.2-5.2 to
//! 6.7-7.7 M pairs/s in alternating runs when the per-shard count that both
//! cores wrote stopped moving. A shard's counters alone mean nothing; only
//! the sum over all shards is the number of live handles.
//!
//! A thread that holds its shard's claim counts there in batches instead:
//! handles made in advance (credits) and drops owed, in the shard's core,
//! which only ever keeps the total too high until the core is settled
//! (`shard/credits.rs`). Only threads that own no shard pay a locked
//! read-modify-write per handle.
//!
//! # Shutdown: folding the counters into one total
//!
//! Every count is one RMW on one counter, and `fold` sets `SHUT` in each
//! counter with one RMW too, so each count is ordered before or after that
//! counter's `SHUT`:
//! * before: `fold` sees it in the value its `fetch_or` returns;
//! * after: the counting thread sees `SHUT` in the value its own RMW
//!   returns, and counts on the service-wide `total` instead.
//!
//! So every count reaches `total` exactly once. `fold` adds `FOLDING`
//! before it sets any `SHUT` and takes it away with the folded sum in one
//! RMW at the end, so `total` cannot pass through 0 or 1 while counts on
//! counters folded later are still missing from it (a handle made on shard
//! 0 before the fold, dropped on shard 1 after shard 1's `SHUT`: -1 arrives
//! before the +1 is folded in). From the final RMW on, `total` is exact
//! but for counts in flight: a drop counted on its counter but not yet on
//! `total` only keeps the service alive a moment longer; a make not yet on
//! `total` belongs to a handle nobody holds yet, made by a thread that holds
//! a `TimerService` (which keeps the service alive) and that takes the
//! strong count itself if it finds `total` at 0.
//!
//! loom (`tests/loom_service.rs`): `owner_credits_vs_shutdown_vs_last_handle`
//! (an owner's credits and owed drops as its shard is let go during
//! shutdown), `handles_counted_on_two_shards_vs_shutdown`
//! (a handle made on one shard's counter and dropped on the other's while
//! the last `TimerService` goes; fails when `fold` reads a counter before
//! setting its `SHUT`), `handle_made_during_the_fold` (fails without
//! `FOLDING`) and `last_handle_vs_new_handle_vs_service_drop`.

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU64, Ordering};

/// Set in a counter once shutdown has folded it into the total.
const SHUT: u64 = 1 << 63;

/// Held in the total while `fold` adds the shards' counts in (far above
/// any count of live handles, far below `SHUT`).
const FOLDING: u64 = 1 << 62;

/// One shard's counters (see the module comment). Monotonic: 2^63 handles
/// before `made` could reach `SHUT`.
#[derive(Default)]
pub(crate) struct HandleCount {
    made: AtomicU64,
    dropped: AtomicU64,
}

/// The service's handle counts: one [`HandleCount`] per shard, each on a
/// line of its own, and the total that shutdown folds them into.
pub(crate) struct HandleCounts {
    shards: Box<[CachePadded<HandleCount>]>,
    total: CachePadded<AtomicU64>,
}

impl HandleCounts {
    pub(crate) fn new(shards: usize) -> Self {
        HandleCounts {
            shards: (0..shards).map(|_| CachePadded::default()).collect(),
            total: CachePadded::new(AtomicU64::new(0)),
        }
    }

    /// Counts a new handle on `shard`'s counter (the calling thread's
    /// counting shard). `true`: the caller must take a strong count of the
    /// service for the handles (the first handle after shutdown's fold
    /// found none).
    #[inline]
    pub(crate) fn made(&self, shard: usize) -> bool {
        self.made_many(shard, 1)
    }

    /// Counts `n` new handles at once (an owner's credits,
    /// `shard/credits.rs`), as [`made`](Self::made) counts one.
    #[inline]
    pub(crate) fn made_many(&self, shard: usize, n: u64) -> bool {
        if self.shards[shard].made.fetch_add(n, Ordering::AcqRel) & SHUT == 0 {
            return false;
        }
        self.total.fetch_add(n, Ordering::AcqRel) == 0
    }

    /// Counts a handle gone, on `shard`'s counter (the calling thread's
    /// counting shard, which need not be the one that counted it made).
    /// `true`: it was the last handle after shutdown, and the caller gives
    /// back the strong count the handles held.
    #[inline]
    pub(crate) fn dropped(&self, shard: usize) -> bool {
        self.dropped_many(shard, 1)
    }

    /// Counts `n` handles gone at once (an owner's owed drops and unused
    /// credits, `shard/credits.rs`), as [`dropped`](Self::dropped) counts
    /// one. `n` may be 0 (nothing changes, `false`).
    #[inline]
    pub(crate) fn dropped_many(&self, shard: usize, n: u64) -> bool {
        if n == 0 {
            return false;
        }
        if self.shards[shard].dropped.fetch_add(n, Ordering::AcqRel) & SHUT == 0 {
            return false;
        }
        self.total.fetch_sub(n, Ordering::AcqRel) == n
    }

    /// Shutdown's fold (once, by the thread that shut the service down,
    /// which has taken a strong count for the handles). `true`: no handle
    /// is live, and the caller gives that strong count back.
    pub(crate) fn fold(&self) -> bool {
        self.total.fetch_add(FOLDING, Ordering::AcqRel);
        let mut live = 0u64;
        for count in self.shards.iter() {
            // Each count lands here or on the total, whichever side of
            // its counter's SHUT it falls: the sum is exact in any order.
            let made = count.made.fetch_or(SHUT, Ordering::AcqRel) & !SHUT;
            let dropped = count.dropped.fetch_or(SHUT, Ordering::AcqRel) & !SHUT;
            live = live.wrapping_add(made).wrapping_sub(dropped);
        }
        let delta = live.wrapping_sub(FOLDING);
        self.total
            .fetch_add(delta, Ordering::AcqRel)
            .wrapping_add(delta)
            == 0
    }
}
