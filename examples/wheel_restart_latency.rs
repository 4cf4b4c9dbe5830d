//! The longest single `Wheel::advance` while idle timeouts are pushed later:
//! 200,000 timers 30 s ahead at 1 ms ticks, 20 of them restarted to 30 s
//! again every tick, the wheel advanced one tick at a time for two minutes
//! (a restart that finds its timer fired arms a new one). Prints the worst
//! advance, the tick it happened at, and the total.
//!
//! A restart that moves a timer later on a high level leaves it in its old
//! bucket (a lazy move), so these timers crowd a few level-2 buckets. A
//! wheel that sorted such a bucket by arming number as it cascaded would
//! put the sort of one bucket (O(b log b) over entries scattered in memory)
//! into a single `advance`, which this program shows as a worst advance far
//! above the rest. The wheel sorts only level-0 buckets, where the sort is
//! proportional to what fires on that tick.
//!
//! ```sh
//! cargo run --release --example wheel_restart_latency
//! ```

use std::time::{Duration, Instant};

use tickwheel::Wheel;

const TIMERS: usize = 200_000;
const IDLE_TICKS: u64 = 30_000;
const RESTARTS_PER_TICK: usize = 20;
const TICKS: u64 = 120_000;

fn main() {
    let mut wheel: Wheel<usize> = Wheel::with_capacity(TIMERS);
    let mut keys: Vec<_> = (0..TIMERS).map(|i| wheel.insert(IDLE_TICKS, i)).collect();
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let (mut worst, mut worst_at, mut total) = (Duration::ZERO, 0, Duration::ZERO);
    let mut fired = 0usize;
    for now in 1..=TICKS {
        for _ in 0..RESTARTS_PER_TICK {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let i = (rng % TIMERS as u64) as usize;
            // A timer not restarted for 30 s fired and its key is stale: a
            // new connection takes its place, so 200k stay armed.
            if wheel.reschedule(keys[i], IDLE_TICKS).is_err() {
                keys[i] = wheel.insert(IDLE_TICKS, i);
                fired += 1;
            }
        }
        let begin = Instant::now();
        let _ = wheel.advance(now, usize::MAX, |_, _| {});
        let took = begin.elapsed();
        total += took;
        if took > worst {
            (worst, worst_at) = (took, now);
        }
    }
    println!(
        "{TIMERS} timers, {RESTARTS_PER_TICK} restarts per tick, {TICKS} ticks: \
         worst advance {:.2} ms (at tick {worst_at}), all advances {:.1} ms, \
         {} restarts found their timer fired and armed a new one",
        worst.as_secs_f64() * 1e3,
        total.as_secs_f64() * 1e3,
        fired,
    );
}
