//! Service tags: the 8 bits of every [`TimerId`](super::TimerId) that say
//! which service it belongs to, so that an id used on the wrong service is
//! refused (CONTRACT 14) instead of stopping that service's timer with the
//! same slot and generation.
//!
//! Each live service holds one of the tags `1..=255` from a process-wide
//! set, and gives it back when it is dropped. Tag 0 is never handed out, so
//! the all-zero id is never valid. A process with more than 255 services
//! alive at once gets repeated tags for the extra ones (the ids of two
//! services that share a tag are told apart only by their generations); the
//! first 255 are always distinct.

use std::sync::Mutex;

/// The process-wide set of tags.
struct Tags {
    /// Which tags are held: bit `t` of word `t / 64` (tag 0 always).
    held: [u64; 4],
    /// Where the search for a free tag starts, so that a tag just given back
    /// is the last to be reused (a stale id of a dropped service then meets
    /// a new service with its tag as late as possible).
    next: u8,
}

static TAGS: Mutex<Tags> = Mutex::new(Tags {
    held: [1, 0, 0, 0],
    next: 1,
});

fn tags() -> std::sync::MutexGuard<'static, Tags> {
    TAGS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A tag for a new service.
pub(crate) fn acquire() -> u8 {
    let mut tags = tags();
    let start = tags.next;
    let mut tag = start;
    loop {
        let (word, bit) = (usize::from(tag) / 64, tag % 64);
        if tags.held[word] & (1 << bit) == 0 {
            tags.held[word] |= 1 << bit;
            break;
        }
        tag = if tag == 255 { 1 } else { tag + 1 };
        if tag == start {
            break; // All 255 held: share this one.
        }
    }
    tags.next = if tag == 255 { 1 } else { tag + 1 };
    tag
}

/// Gives a tag back (when its service is dropped). Shared tags (past 255
/// live services) are not counted: the first of their holders to go gives
/// the tag back, which only means it may be handed out again sooner.
pub(crate) fn release(tag: u8) {
    let (word, bit) = (usize::from(tag) / 64, tag % 64);
    tags().held[word] &= !(1 << bit);
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn live_services_get_distinct_nonzero_tags() {
        let tags: Vec<u8> = (0..10).map(|_| acquire()).collect();
        assert!(tags.iter().all(|&t| t != 0));
        let mut sorted = tags.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), tags.len(), "{tags:?}");
        for tag in tags {
            release(tag);
        }
    }
}
