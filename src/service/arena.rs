//! The timer slots of one service: a segmented array that grows without a
//! lock and never moves or frees a slot while the service lives.
//!
//! # Why slots are never freed early
//!
//! A handle is `(index, gen)`. Any thread may read the state word of any slot
//! it has an index for, at any time, even long after the timer is gone. Since
//! segments are only freed when the whole service is dropped (no handle or
//! thread can reach it then), such a read is always of live memory; the `gen`
//! in the word tells a stale handle apart. This is what makes stale handles
//! safe in Rust and through the C ABI without epochs or hazard pointers.
//!
//! # Memory
//!
//! Slots come in segments that are never moved. Segments come in groups of
//! eight of one size, and each group's size doubles: `BASE` eight times,
//! then `2 BASE` eight times, `4 BASE`, ... A new segment therefore adds at
//! most an eighth of what the arena already holds (plus `BASE` slots), so a
//! service that never holds more than `n` timers at once owns at most about
//! `9n/8` slots: 72 bytes per timer with 64-byte slots (with groups of four
//! it was a quarter, 80 bytes). Add, per shard, the unused rest of the
//! owner's last group of fresh slots, at most seven (see [`SlotLine`]). The
//! segment number of an index is still a couple of shifts. A shard's owner
//! keeps the slots it frees for its own next STARTs (up to 1024 plus one
//! chunk of 256, and the rest of one chunk it took back: `shard.rs`,
//! `LOCAL_FREE_MAX`, `SPILL`) and spills the surplus in chunks onto its
//! shard's own stack ([`ChunkStack`]), which it takes back first and every
//! other thread takes from before the array grows; other freed slots go
//! to a lock-free free list. All are Treiber stacks whose head carries an
//! ABA tag, and all are reused before the array grows: start/stop churn
//! leaves memory flat.
//!
//! # Finding a slot
//!
//! Every operation reaches its slot from an index, and the owner's wheel
//! reaches several more per link and unlink (its links are indices), about
//! ten per START + remote STOP. Working out segment and offset from the
//! index took about fourteen instructions each; a [`Directory`] with one
//! entry per `BASE` slots takes two loads and a few shifts. Its memory is
//! 8 KiB per service and 8 bytes per 64 slots handed out (in 32 KiB
//! pages).
//!
//! # The slot: one cache line
//!
//! A slot is 64 bytes, aligned to 64 (checked by a test and a compile-time
//! assertion): every slot is exactly one cache line, so reaching a timer
//! costs one line, and the slots of two shards never share one. It holds,
//! in this order (`repr(C)`; offsets in bytes):
//!
//! | offset | size | field | |
//! |---|---|---|---|
//! | 0  | 8  | `state` | the state word (see [`state`](super::state)) |
//! | 8  | 8  | `owned.callback` vtable | see `callback.rs` |
//! | 16 | 16 | `owned.callback` buffer | the closure (and a periodic timer's period) when it fits, else the pointer to its box |
//! | 32 | 8  | `owned.deadline` | the deadline tick of the current arming |
//! | 40 | 4  | `owned.prev` | the wheel's backward link |
//! | 44 | 4  | `owned.linked` | the arming the wheel entry stands for (or, for a START another thread queued, the arming to link), and its rounding |
//! | 48 | 4  | `next` | the wheel's forward link, or the free-list link |
//! | 52 | 4  | `queue_next` | the remote queue's link (see `remote.rs`) |
//! | 56 | 2  | `bucket` | the wheel bucket |
//! | 58 | 2  | `shard` | the slot's shard |
//! | 60 | 4  | `order` | the wheel's arming number, low 32 bits (same-tick order for moves that stay in place) |
//!
//! The wheel is intrusive: a timer needs no entry anywhere else. The
//! `next` link doubles as the free-list link while the slot is free, which
//! is why it is an atomic. The remote queue is intrusive too: a thread that
//! starts or stops another shard's timer queues the slot itself, through
//! `queue_next`, which is free for that while the slot is not queued
//! (`QUEUED` in the state word); a restart from another thread travels in
//! a spare slot (a proxy) whose link fields carry the target.
//!
//! The size is a decision. At 40 bytes (the callback one word, always a
//! pointer to a heap block unless the closure captured nothing) a slot
//! cost less memory, but a START whose closure captured anything allocated
//! and freed that block, and half the slots straddled two cache lines. The 16
//! bytes of buffer hold the common closure (a pointer or two, an `Arc` and
//! an index, a C callback's function and context) without an allocation;
//! larger captures still allocate. The buffer was 24 bytes until the remote
//! queue needed its link: a remote START or STOP is then a push of the slot,
//! with no message node to allocate, fill and read.
//!
//! # Ownership of a slot's fields
//!
//! * `state` (the word, see [`state`](super::state)) and `next`: atomics, any
//!   thread. `next` is the wheel's forward link while the slot is linked
//!   (written and read only by the owner) and the free-list link while the
//!   slot is free; a free-list pop may read it while the slot is being reused,
//!   and then fails its CAS on the tag. It is a std atomic even under loom:
//!   its value never decides a race, and loom need not explore its accesses.
//! * `shard`: written by the thread that allocated the slot before it
//!   publishes the slot with a release store of the state word; read by others
//!   after an acquire load of the word, and trusted only if a later CAS on the
//!   word (same `gen`) succeeds.
//! * `owned` and `bucket`: only the owner of the slot's shard touches them
//!   while the slot is allocated; between free and the next allocation, only
//!   the allocator. This includes the callback's buffer: a closure kept
//!   inline is written there by the allocating thread before it publishes
//!   the slot, and moved out (to run it, or to drop it when the slot is
//!   freed or the timer is dropped unrun) and back (a periodic timer) only
//!   by the owner, exactly as the pointer to a boxed one is. Callbacks
//!   still in slots when the service is dropped are dropped in place with
//!   their segments, by the thread that drops the arena (no other thread
//!   can reach it then).

use crossbeam_utils::CachePadded;

use super::remote::Arm;
use super::state::Word;
use crate::sync::{AtomicPtr, AtomicU16, AtomicU32, AtomicU64, Ordering, UnsafeCell};

#[cfg(not(loom))]
const BASE_SHIFT: u32 = 6;
#[cfg(loom)]
const BASE_SHIFT: u32 = 1;
const BASE: usize = 1 << BASE_SHIFT;
/// Segments of one size (see the module docs).
const GROUP: usize = 8;
/// Enough segments for every `u32` index.
const SEGMENTS: usize = GROUP * ((u32::MAX as usize / (GROUP * BASE) + 1).ilog2() as usize + 1);
pub(crate) const NIL: u32 = u32::MAX;

pub(crate) use super::callback::Callback;

/// The shard owner's view of a slot. Only the owner touches it (see module docs).
/// `repr(C)`: the layout in the module docs.
#[repr(C)]
pub(crate) struct Owned {
    pub(crate) callback: Option<Callback>,
    /// The deadline tick of the current arming (while linked: the wheel's).
    pub(crate) deadline: u64,
    /// The wheel's backward link.
    pub(crate) prev: u32,
    /// The arming the wheel entry stands for: its 24-bit `seq` in the low
    /// bits, and in the top byte its deadline's rounding (see
    /// [`Arm::rounding`](super::remote::Arm)), which has no room elsewhere
    /// in the 64 bytes. While a START from another thread waits on the
    /// remote queue, the arming the owner is to link.
    linked: u32,
}

impl Owned {
    const fn empty() -> Self {
        Owned {
            callback: None,
            deadline: 0,
            prev: NIL,
            linked: 0,
        }
    }

    /// The arming `seq` the wheel entry stands for.
    #[inline]
    pub(crate) fn linked_seq(&self) -> u32 {
        self.linked & SEQ_BITS
    }

    /// How far the linked deadline tick lies after the deadline asked for,
    /// in 256ths of a tick.
    #[inline]
    pub(crate) fn linked_rounding(&self) -> u8 {
        (self.linked >> 24) as u8
    }

    /// Records the arming the wheel entry now stands for.
    #[inline]
    pub(crate) fn set_linked(&mut self, seq: u32, rounding: u8) {
        debug_assert_eq!(seq & !SEQ_BITS, 0, "seq is 24 bits");
        self.linked = seq | (u32::from(rounding) << 24);
    }

    /// Records `arm` (deadline and arming) for the owner to link later: a
    /// START waiting on the remote queue, or the owner's pending START.
    #[inline]
    pub(crate) fn record_arm(&mut self, arm: Arm) {
        self.deadline = arm.deadline;
        self.set_linked(arm.seq, arm.rounding);
    }

    /// The arming [`record_arm`](Self::record_arm) recorded.
    #[inline]
    pub(crate) fn recorded_arm(&self) -> Arm {
        Arm {
            seq: self.linked_seq(),
            rounding: self.linked_rounding(),
            deadline: self.deadline,
        }
    }
}

/// The bits of an arming `seq` (see [`state`](super::state)).
const SEQ_BITS: u32 = (1 << 24) - 1;

/// One timer slot: one cache line (see the layout in the module docs).
#[repr(C, align(64))]
pub(crate) struct Slot {
    pub(crate) state: AtomicU64,
    pub(crate) owned: UnsafeCell<Owned>,
    /// The wheel's forward link, or the free-list link (see module docs).
    pub(crate) next: std::sync::atomic::AtomicU32,
    /// The remote queue's link while the slot is `QUEUED` (see `remote.rs`):
    /// written by the thread that queues the slot before its push, read by
    /// the owner after it takes the queue.
    pub(crate) queue_next: AtomicU32,
    /// The wheel bucket, or `UNLINKED`.
    pub(crate) bucket: UnsafeCell<u16>,
    pub(crate) shard: AtomicU16,
    /// The low 32 bits of the wheel's arming number for the entry (same-tick
    /// order; see `hierarchy.rs`, "Arming numbers in 32 bits"). Owner only.
    pub(crate) order: UnsafeCell<u32>,
}

impl Slot {
    fn new() -> Self {
        Slot {
            // Generation 0 is never used, so the all-zero handle is always stale.
            state: AtomicU64::new(Word::free(1).0),
            owned: UnsafeCell::new(Owned::empty()),
            next: std::sync::atomic::AtomicU32::new(NIL),
            queue_next: AtomicU32::new(NIL),
            bucket: UnsafeCell::new(crate::wheel::UNLINKED),
            shard: AtomicU16::new(0),
            order: UnsafeCell::new(0),
        }
    }

    #[inline]
    pub(crate) fn load(&self, order: Ordering) -> Word {
        Word(self.state.load(order))
    }

    #[inline]
    pub(crate) fn cas(&self, current: Word, new: Word) -> Result<Word, Word> {
        self.state
            .compare_exchange(current.0, new.0, Ordering::AcqRel, Ordering::Acquire)
            .map(Word)
            .map_err(Word)
    }
}

/// Slots per [`SlotLine`]: 8 slots of 64 bytes, four pairs of cache lines.
/// Under loom (segments of 2 slots) groups are single slots.
#[cfg(not(loom))]
const LINE_SLOTS: usize = 8;
#[cfg(loom)]
const LINE_SLOTS: usize = 1;

/// The unit segments are made of: [`LINE_SLOTS`] slots that a shard's owner
/// takes a whole group at a time when it needs fresh ones
/// (`Arena::alloc_line`).
///
/// A slot is a cache line of its own, so two owners' slots never share a
/// line however they are handed out. (With slots handed out one by one
/// when slots were 40 bytes, two owners' first timers shared a line and
/// every START and STOP of each bounced it between the cores: 154-169
/// against 108-112 ns per START + cancel at two workers, measured then
/// with `benches/service_vs_tokio.rs`.)
/// Groups still pay: a group is aligned to 128 bytes, so two owners' slots
/// are not on the two lines of one 128-byte pair either, which CPUs that
/// prefetch lines in pairs would also bounce (the reason `CachePadded` pads
/// to 128 bytes on x86-64); and the owner moves the shared `fresh` counter
/// once per eight fresh slots instead of once per slot. The cost is at most
/// seven slots per shard taken and not yet used. Under loom and shuttle the
/// slot's size differs, so the group is not aligned there (nothing is
/// measured).
#[cfg_attr(not(any(loom, shuttle)), repr(align(128)))]
// Only built and freed as a group: its slots are reached through the
// segment's slot pointer (`get`, `get_allocated`), never through the field.
#[allow(dead_code)]
struct SlotLine([Slot; LINE_SLOTS]);

// The slots of a segment must stay contiguous: no padding in a group.
const _: () = assert!(std::mem::size_of::<SlotLine>() == LINE_SLOTS * std::mem::size_of::<Slot>());
// (Under loom a group is one slot, hence the allow.)
#[allow(clippy::modulo_one)]
const _: () = assert!(BASE % LINE_SLOTS == 0, "segments hold whole groups");
#[cfg(not(any(loom, shuttle)))]
const _: () = assert!(
    std::mem::align_of::<SlotLine>() == 128,
    "a group starts a pair of cache lines"
);
#[cfg(not(any(loom, shuttle)))]
const _: () = assert!(
    std::mem::size_of::<Slot>() == 64 && std::mem::align_of::<Slot>() == 64,
    "a slot is one cache line (the layout in the module docs)"
);

/// The growable slot array plus its free list.
pub(crate) struct Arena {
    segments: [AtomicPtr<Slot>; SEGMENTS],
    /// Where each run of `BASE` slots is (see [`Directory`]).
    directory: Directory,
    /// Number of slot indices ever handed out fresh. Read by every `get`
    /// (every STOP), so it sits on its own cache line, away from `free_head`,
    /// which every remote START and spilled free writes.
    fresh: CachePadded<AtomicU32>,
    /// Free list head: `tag << 32 | index`.
    free_head: CachePadded<AtomicU64>,
    /// Chunks of freed slots that nobody claims first: the rest of a chunk
    /// a thread that owns no shard took one slot of (see
    /// [`push_chunk`](Self::push_chunk)).
    free_chunks: ChunkStack,
}

/// A stack of chunks of free slots: `tag << 32 | index` of the first slot
/// of the top chunk. Each shard has one for the chunks its owner spills
/// (`Shard::spilled`), which that owner takes back first, and the arena
/// one more ([`Arena::push_chunk`]).
///
/// Lock-free (a Treiber stack): any thread may push or pop. A chunk's
/// `queue_next` link (free while a slot is free: only queued slots use it)
/// leads to the next chunk; the tag, changed by every pop, fails the CAS
/// of a pop that read a link a reuser wrote meanwhile (ABA).
pub(crate) struct ChunkStack(CachePadded<AtomicU64>);

impl ChunkStack {
    pub(crate) fn new() -> Self {
        ChunkStack(CachePadded::new(AtomicU64::new(NIL as u64)))
    }

    /// Whether the stack looked empty (a hint: it may change at once).
    #[inline]
    pub(crate) fn looks_empty(&self) -> bool {
        self.0.load(Ordering::Relaxed) as u32 == NIL
    }

    /// Pushes the chunk that starts at `first` (linked by the caller,
    /// whose slots they are, through [`Arena::link_in_chunk`]).
    pub(crate) fn push(&self, arena: &Arena, first: u32) {
        let slot = arena.get(first).expect("spilling a slot never allocated");
        let mut head = self.0.load(Ordering::Acquire);
        loop {
            slot.queue_next.store(head as u32, Ordering::Relaxed);
            let new = (head & !0xFFFF_FFFF) | u64::from(first);
            match self
                .0
                .compare_exchange_weak(head, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(actual) => head = actual,
            }
        }
    }

    /// Takes the top chunk: its first slot, or `NIL`. The chunk is the
    /// caller's alone; [`Arena::next_in_chunk`] walks it.
    pub(crate) fn pop(&self, arena: &Arena) -> u32 {
        let mut head = self.0.load(Ordering::Acquire);
        loop {
            let first = head as u32;
            if first == NIL {
                return NIL;
            }
            let slot = arena.get(first).expect("a chunk holds allocated slots");
            // May read a link a reuser wrote meanwhile; the tag then fails
            // the CAS (as in `pop_free`).
            let next = slot.queue_next.load(Ordering::Relaxed);
            let new = (((head >> 32).wrapping_add(1)) << 32) | u64::from(next);
            match self
                .0
                .compare_exchange_weak(head, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    slot.queue_next.store(NIL, Ordering::Relaxed);
                    return first;
                }
                Err(actual) => head = actual,
            }
        }
    }
}

// SAFETY: the raw segment pointers are owned by the arena (allocated in
// `segment_for`, freed in `drop`); every field they point to is an atomic or
// an `UnsafeCell` whose access protocol is described in the module docs.
unsafe impl Send for Arena {}
// SAFETY: as above; shared access goes through atomics, and `owned` is only
// touched by the one thread the protocol designates.
unsafe impl Sync for Arena {}

/// Segment number and offset of slot `index`.
///
/// Counted from `GROUP * BASE` instead of 0 (`j` below), the slots of group
/// `g` are exactly those whose top bit is bit `BASE_SHIFT + 3 + g`, and its
/// eight segments are told apart by the three bits under the top one (a
/// float's exponent and three mantissa bits): one `bsr` and a few shifts.
/// Used where segments are installed; a slot access goes through the
/// [`Directory`] instead.
#[inline]
fn locate(index: u32) -> (usize, usize) {
    const GROUP_BITS: u32 = GROUP.ilog2();
    let j = index as u64 + (GROUP * BASE) as u64;
    let top = j.ilog2();
    // Segments of group `top - BASE_SHIFT - GROUP_BITS` hold `1 << size_shift` slots.
    let size_shift = top - GROUP_BITS;
    let group = (top - BASE_SHIFT - GROUP_BITS) as usize;
    let within_group = (j >> size_shift) as usize & (GROUP - 1);
    (
        group * GROUP + within_group,
        (j & ((1 << size_shift) - 1)) as usize,
    )
}

/// Panics unless slots `0..end` can all be named by a handle (`end` at most
/// `MAX_SLOTS`, 2^28): the fresh slots an allocation is about to hand out.
fn assert_nameable(end: u64) {
    assert!(
        end <= MAX_SLOTS as u64,
        "tickwheel: {MAX_SLOTS} timer slots (the most one service can name) exhausted"
    );
}

/// Frees segment number `segment`, installed at `raw`.
///
/// # Safety
/// `raw` came from `install_segment`'s `Box::into_raw` for this segment
/// number, and nothing can reach it any more.
unsafe fn free_segment(raw: *mut Slot, segment: usize) {
    let lines = std::ptr::slice_from_raw_parts_mut(
        raw.cast::<SlotLine>(),
        segment_len(segment) / LINE_SLOTS,
    );
    // SAFETY: the caller's contract; the length is the one it was built with.
    drop(unsafe { Box::from_raw(lines) });
}

fn segment_len(segment: usize) -> usize {
    BASE << (segment / GROUP)
}

/// The index of segment `segment`'s first slot (the inverse of [`locate`]):
/// a multiple of `BASE`, as is every segment's length.
fn first_index(segment: usize) -> usize {
    let group = segment / GROUP;
    let len = segment_len(segment);
    ((GROUP * BASE) << group) - GROUP * BASE + (segment % GROUP) * len
}

/// The most slots one arena hands out: every index a handle can name
/// (`timer.rs`, `INDEX_BITS`). Under loom far fewer: its models build
/// every atomic of the directory's top for each execution they explore.
#[cfg(not(loom))]
const MAX_SLOTS: usize = 1 << super::timer::INDEX_BITS;
#[cfg(loom)]
const MAX_SLOTS: usize = 1 << 8;

/// Directory entries per page: a page covers `PAGE_LEN * BASE` slots
/// (262,144), so it costs 32 KiB per that many slots handed out.
#[cfg(not(loom))]
const PAGE_BITS: u32 = 12;
#[cfg(loom)]
const PAGE_BITS: u32 = 2;
const PAGE_LEN: usize = 1 << PAGE_BITS;
/// The index bits above a page's.
const PAGE_SHIFT: u32 = BASE_SHIFT + PAGE_BITS;

/// Where each run of `BASE` slots is: entry `(i >> BASE_SHIFT) % PAGE_LEN`
/// of page `i >> PAGE_SHIFT` points at slot `i & !(BASE - 1)`, so finding a
/// slot is two loads, two shifts, a mask and an add (see "Finding a slot"
/// in the module docs).
///
/// Two levels, so that memory follows the slots handed out: the top is 8
/// KiB per service (boxed: inline in the service it cost no fewer
/// instructions, and it overflowed shuttle's task stacks), and a page is allocated with the first segment that
/// needs it. (One flat table of every entry was one load cheaper, but 32
/// MiB of zeroed address space per service, which a counting allocator,
/// `benches/memory.rs`, rightly charged to the service: 386 bytes per
/// armed timer at 100,000.) Entries and page pointers are written once,
/// null to a value, and read with acquire.
struct Directory(Box<[AtomicPtr<AtomicPtr<Slot>>]>);

impl Directory {
    /// Pages for every index below `MAX_SLOTS`.
    const TOP: usize = ((MAX_SLOTS - 1) >> PAGE_SHIFT) + 1;

    fn new() -> Self {
        Directory(
            (0..Self::TOP)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
        )
    }

    /// The page of slot `index`, which is below `MAX_SLOTS` (the arena
    /// hands out no more: `assert_nameable`); null until entered.
    #[inline]
    fn page(&self, index: u32) -> *mut AtomicPtr<Slot> {
        let top = (index >> PAGE_SHIFT) as usize;
        debug_assert!(top < Self::TOP);
        // SAFETY: `index < MAX_SLOTS`, the caller's contract, so `top < TOP`.
        unsafe { self.0.get_unchecked(top) }.load(Ordering::Acquire)
    }

    /// Slot `index` (below `MAX_SLOTS`), or null if its run is not entered.
    #[inline]
    fn find(&self, index: u32) -> *const Slot {
        let page = self.page(index);
        if page.is_null() {
            return std::ptr::null();
        }
        // SAFETY: `page` is a live page (non-null).
        let run = unsafe { run_of(page, index) }.load(Ordering::Acquire);
        if run.is_null() {
            return std::ptr::null();
        }
        // SAFETY: `run` is the first of `BASE` slots of a live segment.
        unsafe { run.add(index as usize & (BASE - 1)) }
    }

    /// [`find`](Self::find) for an index whose run is entered.
    ///
    /// # Safety
    /// Slot `index`'s run was entered, and that happened before this call.
    #[inline]
    unsafe fn find_entered(&self, index: u32) -> *const Slot {
        let page = self.page(index);
        debug_assert!(!page.is_null(), "slot {index} was never allocated");
        // SAFETY: the caller's contract: the page is there.
        let run = unsafe { run_of(page, index) }.load(Ordering::Acquire);
        debug_assert!(!run.is_null(), "slot {index} was never allocated");
        // SAFETY: `run` is the first of `BASE` slots of a live segment.
        unsafe { run.add(index as usize & (BASE - 1)) }
    }

    /// Enters the run of `BASE` slots that starts at index `first`
    /// (a multiple of `BASE`, below `MAX_SLOTS`), at `at`; makes its page
    /// if there is none yet (racing makers: one CAS wins, the others free
    /// theirs).
    fn enter(&self, first: u32, at: *mut Slot) {
        let top = &self.0[(first >> PAGE_SHIFT) as usize];
        let mut page = top.load(Ordering::Acquire);
        if page.is_null() {
            let fresh: Box<[AtomicPtr<Slot>]> = (0..PAGE_LEN)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect();
            let raw = Box::into_raw(fresh).cast::<AtomicPtr<Slot>>();
            // SAFETY (the loser's free): made just above with `PAGE_LEN`
            // entries and never shared.
            page = publish_once(top, raw, |raw| drop(unsafe { free_page(raw) }));
        }
        // SAFETY: `page` is a live page.
        unsafe { run_of(page, first) }.store(at, Ordering::Release);
    }
}

/// The directory entry of slot `index` in `page`, its page.
///
/// # Safety
/// `page` is a page of the directory (`PAGE_LEN` entries), live until the
/// directory is dropped.
#[inline]
unsafe fn run_of<'a>(page: *mut AtomicPtr<Slot>, index: u32) -> &'a AtomicPtr<Slot> {
    // SAFETY: the caller's contract; the offset is below `PAGE_LEN`.
    unsafe { &*page.add((index as usize >> BASE_SHIFT) & (PAGE_LEN - 1)) }
}

/// Publishes `raw` in `cell` if `cell` is still null and returns it; else
/// hands `raw` to `free` and returns what another thread published there
/// first. Segments and directory pages are made this way: racing makers
/// each build one, one CAS wins.
fn publish_once<T>(cell: &AtomicPtr<T>, raw: *mut T, free: impl FnOnce(*mut T)) -> *mut T {
    match cell.compare_exchange(
        std::ptr::null_mut(),
        raw,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        Ok(_) => raw,
        Err(theirs) => {
            free(raw);
            theirs
        }
    }
}

/// The page at `raw`, as the box it was made as.
///
/// # Safety
/// `raw` came from `Directory::enter`'s `Box::into_raw`, and nothing else
/// can reach it any more.
unsafe fn free_page(raw: *mut AtomicPtr<Slot>) -> Box<[AtomicPtr<Slot>]> {
    // SAFETY: the caller's contract; the length is the one it was made with.
    unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(raw, PAGE_LEN)) }
}

impl Drop for Directory {
    fn drop(&mut self) {
        for top in self.0.iter_mut() {
            let page = top.load(Ordering::Acquire);
            if !page.is_null() {
                // SAFETY: made by `enter`; `&mut self`: no one else reaches it.
                drop(unsafe { free_page(page) });
            }
        }
    }
}

impl Arena {
    pub(crate) fn new() -> Self {
        Arena {
            segments: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
            directory: Directory::new(),
            fresh: CachePadded::new(AtomicU32::new(0)),
            free_head: CachePadded::new(AtomicU64::new(NIL as u64)),
            free_chunks: ChunkStack::new(),
        }
    }

    /// The slot at `index`, or `None` if no slot with that index was ever
    /// handed out (a garbage handle).
    #[inline]
    pub(crate) fn get(&self, index: u32) -> Option<&Slot> {
        if index >= self.fresh.load(Ordering::Acquire) {
            return None;
        }
        let slot = self.directory.find(index);
        if slot.is_null() {
            // Handed out but the segment is still being installed by the
            // allocating thread: that slot cannot be armed yet.
            return None;
        }
        // SAFETY: a slot of a live segment: segments are installed once and
        // freed only in `drop`, which needs `&mut self`.
        Some(unsafe { &*slot })
    }

    /// The slot at `index`, which `alloc` has handed out: [`get`](Self::get)
    /// without its two checks (`index` below `fresh`, segment installed) and
    /// without a bounds check on the segment table. The owner's wheel reaches
    /// several slots per link, unlink and move (with the checks, they were
    /// a third of a RESTART's instructions: `examples/owner_ops.rs` under
    /// cachegrind).
    ///
    /// # Safety
    /// `index` was handed out by this arena ([`alloc_reused`](Self::alloc_reused),
    /// [`alloc_fresh`](Self::alloc_fresh), [`alloc_line`](Self::alloc_line)),
    /// and the caller's thread has seen that happen (it allocated the slot,
    /// or learnt the index through a release/acquire chain from a thread
    /// that did): its segment is installed, and the arena installs a
    /// segment before it hands out an index in it.
    #[inline]
    pub(crate) unsafe fn get_allocated(&self, index: u32) -> &Slot {
        debug_assert!(index < self.fresh.load(Ordering::Relaxed));
        // SAFETY: the segment is installed and entered (the caller's
        // contract), and live until `drop`.
        unsafe { &*self.directory.find_entered(index) }
    }

    /// Takes a free slot (reusing freed ones first), for the tests: the
    /// service allocates through `Inner::alloc_slot`, which also takes the
    /// chunks owners spilled.
    #[cfg(test)]
    pub(crate) fn alloc(&self) -> u32 {
        self.alloc_reused().unwrap_or_else(|| self.alloc_fresh())
    }

    /// A freed slot, from the free list or the arena's own chunks. Its
    /// state word reads `FREE` and the caller owns it exclusively until it
    /// publishes it.
    pub(crate) fn alloc_reused(&self) -> Option<u32> {
        if let Some(index) = self.pop_free() {
            return Some(index);
        }
        let first = self.pop_chunk();
        (first != NIL).then(|| self.first_of_chunk(first))
    }

    /// The first slot of the chunk `first` (which the caller took) for one
    /// START; the rest of the chunk goes back to the arena's chunks.
    pub(crate) fn first_of_chunk(&self, first: u32) -> u32 {
        let rest = self.next_in_chunk(first);
        if rest != NIL {
            self.push_chunk(rest);
        }
        first
    }

    /// A slot never handed out before (owned by the caller as
    /// [`alloc_reused`](Self::alloc_reused)'s are).
    pub(crate) fn alloc_fresh(&self) -> u32 {
        let index = self.fresh.fetch_add(1, Ordering::AcqRel);
        assert_nameable(u64::from(index) + 1);
        let (segment, _) = locate(index);
        self.install_segment(segment);
        index
    }

    /// For a shard's owner whose own free slots ran out: a freed slot if the
    /// free list has one (memory stays flat under churn), else a fresh group
    /// of [`LINE_SLOTS`] slots on cache lines of their own (see [`SlotLine`]).
    /// Returns the slot to use now; the group's other slots go to `spare`,
    /// for the owner's next STARTs. A group starts at a multiple of
    /// `LINE_SLOTS`: the slots before it that others took one by one are
    /// left to them, and any the step over skips go to the free list.
    pub(crate) fn alloc_line(&self, spare: &mut impl Extend<u32>) -> u32 {
        if let Some(index) = self.pop_free() {
            return index;
        }
        let step = LINE_SLOTS as u32;
        let mut fresh = self.fresh.load(Ordering::Acquire);
        let start = loop {
            let start = fresh.next_multiple_of(step);
            assert_nameable(u64::from(start) + u64::from(step));
            match self.fresh.compare_exchange(
                fresh,
                start + step,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break start,
                Err(actual) => fresh = actual,
            }
        };
        // One segment holds whole groups (`BASE % LINE_SLOTS == 0`), so the
        // skipped slots and the group lie in at most two segments.
        self.install_segment(locate(fresh).0);
        self.install_segment(locate(start).0);
        for skipped in fresh..start {
            self.free(skipped);
        }
        spare.extend((start + 1..start + step).rev());
        start
    }

    /// Returns a slot whose word the owner just set to `FREE`.
    pub(crate) fn free(&self, index: u32) {
        let slot = self
            .get(index)
            .expect("freeing a slot that was never allocated");
        let mut head = self.free_head.load(Ordering::Acquire);
        loop {
            slot.next.store(head as u32, Ordering::Relaxed);
            let new = (head & !0xFFFF_FFFF) | index as u64;
            match self
                .free_head
                .compare_exchange(head, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(actual) => head = actual,
            }
        }
    }

    /// Pushes a chunk of free slots onto the arena's own chunks, in one
    /// CAS: `first`, then the slots its `next` links lead to, up to a `NIL`
    /// (linked by the caller, whose slots they are). Owners spill onto
    /// their shard's chunks (`Shard::spilled`); this takes what is left of
    /// a chunk someone took one slot of.
    ///
    /// Why chunks: an owner whose own free slots run out refills with one
    /// CAS per chunk ([`ChunkStack::pop`]) and takes the chunk's slots one by
    /// one as it starts timers, each link read from a slot it is about to
    /// fill. With owners spilling and refilling one slot at a time through
    /// the free list, eight owners on two cores spent a fifth of
    /// `service_vs_tokio/cross_stop/tickwheel-embedded/8`
    /// (`benches/service_vs_tokio.rs`) in its contended CAS loop.
    pub(crate) fn push_chunk(&self, first: u32) {
        self.free_chunks.push(self, first);
    }

    /// Takes the top chunk of spilled slots: its first slot, or `NIL`. The
    /// chunk is the caller's alone; [`next_in_chunk`](Self::next_in_chunk)
    /// walks it.
    pub(crate) fn pop_chunk(&self) -> u32 {
        self.free_chunks.pop(self)
    }

    /// The slot after `index` in a chunk (`NIL` at its end).
    pub(crate) fn next_in_chunk(&self, index: u32) -> u32 {
        self.get(index)
            .expect("a chunk holds allocated slots")
            .next
            .load(Ordering::Relaxed)
    }

    /// Links `index`'s `next` to `next`, to build a chunk.
    pub(crate) fn link_in_chunk(&self, index: u32, next: u32) {
        self.get(index)
            .expect("a chunk holds allocated slots")
            .next
            .store(next, Ordering::Relaxed);
    }

    fn pop_free(&self) -> Option<u32> {
        let mut head = self.free_head.load(Ordering::Acquire);
        loop {
            let index = head as u32;
            if index == NIL {
                return None;
            }
            let slot = self.get(index).expect("free list holds an allocated index");
            let next = slot.next.load(Ordering::Relaxed);
            // The tag in the high half changes on every pop, so a head that
            // was popped and pushed back meanwhile (ABA) fails this CAS.
            let tag = (head >> 32).wrapping_add(1);
            let new = (tag << 32) | next as u64;
            match self
                .free_head
                .compare_exchange(head, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(index),
                Err(actual) => head = actual,
            }
        }
    }

    /// Makes sure segment `segment` exists. Racing allocators each build one;
    /// one CAS wins and the others drop theirs.
    fn install_segment(&self, segment: usize) {
        let installed = self.segments[segment].load(Ordering::Acquire);
        if !installed.is_null() {
            let last = (first_index(segment) + segment_len(segment)).min(MAX_SLOTS) - 1;
            if self.directory.find(last as u32).is_null() {
                self.enter_segment(segment, installed);
            }
            return;
        }
        let lines: Box<[SlotLine]> = (0..segment_len(segment) / LINE_SLOTS)
            .map(|_| SlotLine(std::array::from_fn(|_| Slot::new())))
            .collect();
        // A group is its slots with no padding (checked above), so the
        // segment is one array of slots.
        let raw = Box::into_raw(lines).cast::<Slot>();
        // SAFETY (the loser's free): `raw` came from `Box::into_raw` just
        // above and was never shared.
        let installed = publish_once(&self.segments[segment], raw, |raw| unsafe {
            free_segment(raw, segment)
        });
        self.enter_segment(segment, installed);
    }

    /// Enters segment `segment`, installed at `base`, in the directory.
    /// Every thread that installs the segment or finds it installed stores
    /// the same pointers, in index order, before it hands out one of its
    /// slots, so no handle reaches a slot before its entry is there; a
    /// thread that finds the segment's last entry stored knows the others
    /// are (release stores, acquire load).
    fn enter_segment(&self, segment: usize, base: *mut Slot) {
        let first = first_index(segment);
        for offset in (0..segment_len(segment)).step_by(BASE) {
            if first + offset >= MAX_SLOTS {
                break;
            }
            // SAFETY: `offset` is within the segment's slots.
            let at = unsafe { base.add(offset) };
            self.directory.enter((first + offset) as u32, at);
        }
    }

    /// Calls `f` on every slot ever handed out.
    pub(crate) fn for_each(&self, mut f: impl FnMut(u32, &Slot)) {
        let fresh = self.fresh.load(Ordering::Acquire);
        for index in 0..fresh {
            if let Some(slot) = self.get(index) {
                f(index, slot);
            }
        }
    }

    /// Slots ever handed out (the arena's high-water mark).
    pub(crate) fn slots(&self) -> usize {
        self.fresh.load(Ordering::Relaxed) as usize
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        for (segment, pointer) in self.segments.iter_mut().enumerate() {
            let raw = pointer.load(Ordering::Acquire);
            if !raw.is_null() {
                // SAFETY: installed by `install_segment`; `&mut self` means no
                // one else can reach it.
                unsafe { free_segment(raw, segment) };
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// `locate` as first written: group by division, then segment and offset
    /// within the group.
    fn locate_by_division(index: u32) -> (usize, usize) {
        let scaled = index as usize / (GROUP * BASE) + 1;
        let size_shift = scaled.ilog2() as usize;
        let group_start = GROUP * BASE * ((1 << size_shift) - 1);
        let within = index as usize - group_start;
        let segment_shift = BASE_SHIFT as usize + size_shift;
        (
            GROUP * size_shift + (within >> segment_shift),
            within & ((1 << segment_shift) - 1),
        )
    }

    #[test]
    fn first_index_inverts_locate() {
        for segment in 0..SEGMENTS {
            let first = first_index(segment);
            if first >= MAX_SLOTS {
                break;
            }
            assert_eq!(locate(first as u32), (segment, 0), "segment {segment}");
            assert_eq!(first % BASE, 0);
            let last = first + segment_len(segment) - 1;
            if last < MAX_SLOTS {
                assert_eq!(
                    locate(last as u32),
                    (segment, segment_len(segment) - 1),
                    "segment {segment}"
                );
            }
        }
    }

    /// The directory names the slot `locate` names, for every slot of the
    /// first segments and across the segments' edges.
    #[test]
    fn the_directory_agrees_with_locate() {
        let arena = Arena::new();
        let mut spare = Vec::new();
        let count = if cfg!(miri) { 3_000 } else { 40_000 };
        while arena.slots() < count {
            arena.alloc_line(&mut spare);
        }
        for index in 0..arena.slots() as u32 {
            let (segment, offset) = locate(index);
            let base = arena.segments[segment].load(Ordering::Acquire);
            let by_segment = base.wrapping_add(offset);
            let by_directory: *const Slot = arena.get(index).expect("handed out");
            assert_eq!(by_directory, by_segment.cast_const(), "slot {index}");
            // SAFETY: handed out above.
            let allocated: *const Slot = unsafe { arena.get_allocated(index) };
            assert_eq!(allocated, by_directory);
        }
        assert!(arena.get(arena.slots() as u32).is_none());
    }

    #[test]
    fn locate_agrees_with_the_division_form() {
        let mut x = 0x9E37_79B9u32;
        let edges = (0..32).flat_map(|bit| {
            let power = 1u64 << bit;
            [power - 1, power, power + 1].map(|i| i.min(u32::MAX as u64) as u32)
        });
        let random = (0..20_000).map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        });
        for index in edges.chain(random).chain([u32::MAX]) {
            assert_eq!(locate(index), locate_by_division(index), "index {index}");
        }
    }

    #[test]
    fn locate_covers_indices_contiguously() {
        let mut expected = (0, 0);
        for index in 0..10_000u32 {
            assert_eq!(locate(index), expected, "index {index}");
            expected.1 += 1;
            if expected.1 == segment_len(expected.0) {
                expected = (expected.0 + 1, 0);
            }
        }
        assert!(locate(u32::MAX - 1).0 < SEGMENTS);
        // `get_allocated` indexes the segment table unchecked.
        assert!(locate(u32::MAX).0 < SEGMENTS);
    }

    #[test]
    fn freed_slots_are_reused_before_growing() {
        let arena = Arena::new();
        let a = arena.alloc();
        let b = arena.alloc();
        assert_ne!(a, b);
        arena.free(a);
        assert_eq!(arena.alloc(), a);
        assert_eq!(arena.slots(), 2);
        assert!(arena.get(2).is_none(), "never handed out");
        assert!(arena.get(u32::MAX).is_none());
    }

    /// Builds a chunk of `indices` (first to last) and spills it.
    fn spill(arena: &Arena, indices: &[u32]) {
        let mut first = NIL;
        for &index in indices.iter().rev() {
            arena.link_in_chunk(index, first);
            first = index;
        }
        arena.push_chunk(first);
    }

    fn chunk(arena: &Arena, mut first: u32) -> Vec<u32> {
        let mut out = Vec::new();
        while first != NIL {
            out.push(first);
            first = arena.next_in_chunk(first);
        }
        out
    }

    /// Chunks come back whole, newest first; a START from a thread that
    /// owns no shard takes one slot of a chunk and spills the rest back, so
    /// spilled slots are reused before the arena grows.
    #[test]
    fn spilled_chunks_are_taken_whole_and_reused_before_growing() {
        let arena = Arena::new();
        let slots: Vec<u32> = (0..6).map(|_| arena.alloc()).collect();
        spill(&arena, &slots[..3]);
        spill(&arena, &slots[3..]);
        let top = arena.pop_chunk();
        assert_eq!(chunk(&arena, top), slots[3..]);
        assert_eq!(arena.alloc(), slots[0]);
        let rest = arena.pop_chunk();
        assert_eq!(chunk(&arena, rest), slots[1..3]);
        assert_eq!(arena.pop_chunk(), NIL);
        assert_eq!(arena.slots(), 6, "nothing allocated fresh");
    }

    /// Threads spilling and taking chunks at once lose and duplicate no slot.
    #[test]
    fn concurrent_chunk_spills_and_takes_lose_nothing() {
        const THREADS: u32 = 3;
        const ROUNDS: usize = if cfg!(miri) { 20 } else { 2_000 };
        let arena = std::sync::Arc::new(Arena::new());
        let owned: Vec<Vec<u32>> = (0..THREADS)
            .map(|_| (0..8).map(|_| arena.alloc()).collect())
            .collect();
        let threads: Vec<_> = owned
            .into_iter()
            .map(|mut mine| {
                let arena = arena.clone();
                std::thread::spawn(move || {
                    for _ in 0..ROUNDS {
                        let half = mine.split_off(mine.len() / 2);
                        if !half.is_empty() {
                            spill(&arena, &half);
                        }
                        let taken = arena.pop_chunk();
                        mine.extend(chunk(&arena, taken));
                    }
                    mine
                })
            })
            .collect();
        let mut all: Vec<u32> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        loop {
            let taken = arena.pop_chunk();
            if taken == NIL {
                break;
            }
            all.extend(chunk(&arena, taken));
        }
        all.sort_unstable();
        assert_eq!(all, (0..THREADS * 8).collect::<Vec<_>>());
    }

    /// Threads growing the arena at once, one slot or a group at a time,
    /// race to install and enter the same segments: whichever thread
    /// hands out a slot finds it through the directory at once, at the
    /// address `locate` names, and so does every other thread afterwards.
    #[test]
    fn racing_growth_enters_every_slot_before_handing_it_out() {
        const THREADS: usize = 3;
        let per_thread = if cfg!(miri) { 200 } else { 20_000 };
        for _ in 0..if cfg!(miri) { 1 } else { 20 } {
            let arena = std::sync::Arc::new(Arena::new());
            let start = std::sync::Arc::new(std::sync::Barrier::new(THREADS));
            let threads: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (arena, start) = (arena.clone(), start.clone());
                    std::thread::spawn(move || {
                        start.wait();
                        let mut spare = Vec::new();
                        let mut mine = Vec::with_capacity(per_thread);
                        while mine.len() < per_thread {
                            let index = if t == 0 {
                                arena.alloc_line(&mut spare)
                            } else {
                                arena.alloc()
                            };
                            let found = arena.get(index).map(|slot| slot as *const Slot);
                            assert!(found.is_some(), "slot {index} handed out unentered");
                            mine.push(index);
                        }
                        mine
                    })
                })
                .collect();
            for thread in threads {
                for index in thread.join().unwrap() {
                    let (segment, offset) = locate(index);
                    let base = arena.segments[segment].load(Ordering::Acquire);
                    let slot: *const Slot = arena.get(index).expect("entered");
                    assert_eq!(slot, base.wrapping_add(offset).cast_const());
                }
            }
        }
    }

    /// The cache line of a slot's first and last byte.
    fn lines_of(arena: &Arena, index: u32) -> (usize, usize) {
        let address = arena.get(index).unwrap() as *const Slot as usize;
        (address / 64, (address + size_of::<Slot>() - 1) / 64)
    }

    /// Every slot is exactly one cache line: none straddles two.
    #[cfg(not(shuttle))]
    #[test]
    fn each_slot_is_one_cache_line() {
        let arena = Arena::new();
        let mut spare = Vec::new();
        let mut indices = vec![arena.alloc(), arena.alloc_line(&mut spare)];
        indices.extend((0..3 * BASE).map(|_| arena.alloc()));
        for index in indices {
            let (first, last) = lines_of(&arena, index);
            assert_eq!(first, last, "slot {index} straddles two lines");
        }
    }

    #[test]
    fn owners_take_fresh_slots_a_group_of_cache_lines_at_a_time() {
        let arena = Arena::new();
        // Another thread took one slot alone: the next group starts at the
        // next multiple of LINE_SLOTS, and the slots it steps over are freed.
        let single = arena.alloc();
        let mut first = Vec::new();
        let a = arena.alloc_line(&mut first);
        assert_eq!((single, a, arena.slots()), (0, 8, 16));
        // The seven stepped-over slots are on the free list, and reused
        // before any growth, by owners too.
        let mut reused: Vec<u32> = (0..6).map(|_| arena.alloc()).collect();
        reused.push(arena.alloc_line(&mut Vec::new()));
        reused.sort_unstable();
        assert_eq!(reused, (1..8).collect::<Vec<_>>());
        assert_eq!(arena.slots(), 16, "nothing fresh while freed slots remain");
        let mut second = Vec::new();
        let b = arena.alloc_line(&mut second);
        assert_eq!((b, arena.slots()), (16, 24));
        let group_a: Vec<u32> = std::iter::once(a)
            .chain(first.iter().rev().copied())
            .collect();
        let group_b: Vec<u32> = std::iter::once(b)
            .chain(second.iter().rev().copied())
            .collect();
        assert_eq!(
            group_a,
            (8..16).collect::<Vec<_>>(),
            "used first, then popped in order"
        );
        assert_eq!(group_b, (16..24).collect::<Vec<_>>());
        for group in [a, b] {
            let address = arena.get(group).unwrap() as *const Slot as usize;
            assert_eq!(address % 128, 0, "group {group} starts a pair of lines");
        }
        // No pair of cache lines (128 bytes) holds slots of both groups, or
        // of a group and the slots before it.
        let lines = |group: &[u32]| -> Vec<usize> {
            group
                .iter()
                .flat_map(|&i| {
                    let (x, y) = lines_of(&arena, i);
                    [x / 2, y / 2]
                })
                .collect()
        };
        let (lines_a, lines_b) = (lines(&group_a), lines(&group_b));
        let outside = lines(&(0..8).collect::<Vec<_>>());
        for line in &lines_a {
            assert!(
                !lines_b.contains(line) && !outside.contains(line),
                "line {line} shared"
            );
        }
        assert_eq!(arena.alloc(), 24);
    }

    #[test]
    fn segments_add_at_most_an_eighth() {
        let mut total = 0usize;
        for segment in 0..SEGMENTS {
            // An eighth of what is there, plus `BASE` slots.
            assert!(
                8 * segment_len(segment) <= total + 8 * BASE,
                "segment {segment}"
            );
            total += segment_len(segment);
        }
        assert!(total > u32::MAX as usize, "every u32 index has a segment");
    }

    #[cfg(not(shuttle))]
    #[test]
    fn a_slot_is_64_bytes() {
        // Every armed timer pays for one slot (plus at most an eighth for
        // growth): the memory target is 72 bytes per timer.
        assert_eq!(std::mem::size_of::<Slot>(), 64);
        assert_eq!(std::mem::align_of::<Slot>(), 64);
        // The layout in the module docs.
        let slot = Slot::new();
        let base = &slot as *const Slot as usize;
        let offset = |field: usize| field - base;
        slot.owned.with_mut(|owned| {
            // SAFETY: `slot` is this test's alone.
            let owned = unsafe { &mut *owned };
            assert_eq!(offset(&owned.callback as *const _ as usize), 8);
            assert_eq!(offset(&owned.deadline as *const _ as usize), 32);
            assert_eq!(offset(&owned.prev as *const _ as usize), 40);
            assert_eq!(offset(&owned.linked as *const _ as usize), 44);
        });
        assert_eq!(offset(&slot.next as *const _ as usize), 48);
        assert_eq!(offset(&slot.queue_next as *const _ as usize), 52);
        assert_eq!(offset(slot.bucket.with_mut(|b| b as usize)), 56);
        assert_eq!(offset(&slot.shard as *const _ as usize), 58);
    }
}
