/* Ratas' benchmark workload (jsnell/ratas, src/test/test_benchmark.cc) on
 * tickwheel's embedded timers (tw_entry): each unit keeps its five timers
 * inside itself, as Ratas' units keep their TimerEvents, with one callback
 * per kind of timer (as Ratas' MemberTimerEvents), which finds its unit
 * from the entry's address. The loop takes each due entry and its callback
 * with tw_entry_wheel_poll_to_next (Ratas' ticks_to_next_event and
 * advance in one pass) and
 * runs the pace timer's handler, nine in ten of the timers that fire,
 * inline (with cross-language LTO the packet path then inlines into the
 * loop, as in the Rust port's advance closure); the other kinds are called
 * through their callbacks, as Ratas' events' execute() is. Built with
 * -DRATAS_ADVANCE it drives the wheel with tw_entry_wheel_advance_to_next
 * instead, which calls every entry's callback
 * through its function pointer. The same units, glibc rand() sequence and
 * checksum as benches/ratas.rs (which describes the workload),
 * benches/ratas_embedded.rs (the same on the Rust API) and
 * ratas_workload.c (the keyed tw_wheel). Our own code, written from
 * reading Ratas' benchmark; no Ratas code is in this repository.
 *
 * Environment, as Ratas' benchmark: BENCH_PAIR_COUNT (default 5),
 * BENCH_ALLOW_SCHEDULE_IN_RANGE (yes|no, default yes). Prints, as Ratas:
 *   <argv0>,<pairs>,<yes|no>,<user CPU seconds>,<total_rx_count> */
#define _DEFAULT_SOURCE
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>

#include "tickwheel.h"

#define TIME_MS 50u
#define TIME_S (1000u * TIME_MS)
#define RESPONSE_SIZE 128
#define PACE_INTERVAL 10u

enum kind { IDLE, CLOSE, PACE, REQUEST, REQUEST_DEADLINE, KINDS };

struct unit {
    struct unit *other;
    bool alive;
    int tx_count;
    int rx_count;
    int pace_quota;
    uint64_t request_interval;
    bool closing;
    bool waiting_for_response;
    tw_entry timers[KINDS];
};

static struct unit *units;
static size_t unit_count;
static bool in_range = true;
static long total_rx_count;

static void check(tw_result r, const char *what) {
    if (r != TW_OK) {
        fprintf(stderr, "%s failed: %d\n", what, (int)r);
        exit(1);
    }
}

/* schedule(), unidle() and the packet path (deliver, receive, on_pace)
 * are always inlined, as in the Rust port on EmbeddedWheel. The wheel is
 * passed down as the Rust port passes its wheel by reference, not read
 * from a global: with LTO the compiler then sees one pointer in all the
 * calls it inlines and checks it once (at 1000 pairs without range, about
 * 0.45 G fewer instructions). */
#define ALWAYS_INLINE inline __attribute__((always_inline))

static ALWAYS_INLINE void schedule(tw_entry_wheel *w, struct unit *u, enum kind kind, uint64_t delay) {
    check(tw_entry_schedule(w, &u->timers[kind], delay), "schedule");
}

static ALWAYS_INLINE void unidle(tw_entry_wheel *w, struct unit *u) {
    if (!in_range) {
        schedule(w, u, IDLE, 60 * TIME_S);
        return;
    }
    check(tw_entry_schedule_in_range(w, &u->timers[IDLE], 60 * TIME_S, 61 * TIME_S, NULL),
          "schedule_in_range");
}

static void deliver(tw_entry_wheel *w, struct unit *u);

static ALWAYS_INLINE void receive(tw_entry_wheel *w, struct unit *u) {
    if (!u->alive) {
        fprintf(stderr, "a packet for a deleted unit\n");
        exit(1);
    }
    unidle(w, u);
    if (u->waiting_for_response) {
        schedule(w, u, REQUEST_DEADLINE, PACE_INTERVAL * RESPONSE_SIZE * 2);
        u->waiting_for_response = false;
    }
    u->rx_count++;
    if (u->rx_count % RESPONSE_SIZE == 0) {
        check(tw_entry_cancel(&u->timers[REQUEST_DEADLINE], NULL), "cancel");
        schedule(w, u, REQUEST, u->request_interval);
    }
}

static ALWAYS_INLINE void deliver(tw_entry_wheel *w, struct unit *u) {
    unidle(w, u);
    int amount = u->pace_quota < u->tx_count ? u->pace_quota : u->tx_count;
    u->pace_quota -= amount;
    u->tx_count -= amount;
    receive(w, u->other);
    if (!u->pace_quota) {
        schedule(w, u, PACE, PACE_INTERVAL);
    }
}

static void transmit(tw_entry_wheel *w, struct unit *u, int count) {
    u->tx_count += count;
    deliver(w, u);
}

static void delete_unit(struct unit *u) {
    if (!u->alive) {
        return;
    }
    u->alive = false;
    total_rx_count += u->rx_count;
    for (int k = 0; k < KINDS; k++) {
        check(tw_entry_cancel(&u->timers[k], NULL), "cancel");
    }
}

static void on_request(tw_entry_wheel *w, struct unit *u) {
    if (!u->closing) {
        schedule(w, u, REQUEST_DEADLINE, PACE_INTERVAL * RESPONSE_SIZE * 4);
        u->waiting_for_response = true;
        transmit(w, u->other, RESPONSE_SIZE);
    }
}

static void on_close(tw_entry_wheel *w, struct unit *u) {
    if (u->closing) {
        delete_unit(u);
    } else {
        u->closing = true;
        schedule(w, u, CLOSE, 10 * TIME_S);
    }
}

static ALWAYS_INLINE void on_pace(tw_entry_wheel *w, struct unit *u) {
    if (u->tx_count) {
        u->pace_quota = 1;
        deliver(w, u);
    }
}

static void on_request_deadline(struct unit *u) {
    fprintf(stderr, "Request did not finish by deadline\n");
    delete_unit(u);
    delete_unit(u->other);
}

/* The unit whose timer `kind` is `entry`. */
#define UNIT_OF(entry, kind) \
    ((struct unit *)((char *)(entry) - offsetof(struct unit, timers) - (kind) * sizeof(tw_entry)))

/* One callback per kind of timer, with the wheel as ctx: what an advance
 * calls, and what the poll loop calls for every kind but the pace timer's. */
static void on_idle_timer(tw_entry *e, void *ctx) {
    (void)ctx;
    delete_unit(UNIT_OF(e, IDLE));
}

static void on_close_timer(tw_entry *e, void *ctx) {
    on_close(ctx, UNIT_OF(e, CLOSE));
}

static void on_pace_timer(tw_entry *e, void *ctx) {
    on_pace(ctx, UNIT_OF(e, PACE));
}

static void on_request_timer(tw_entry *e, void *ctx) {
    on_request(ctx, UNIT_OF(e, REQUEST));
}

static void on_request_deadline_timer(tw_entry *e, void *ctx) {
    (void)ctx;
    on_request_deadline(UNIT_OF(e, REQUEST_DEADLINE));
}

static struct unit *new_unit(uint64_t request_interval) {
    struct unit *u = &units[unit_count++];
    memset(u, 0, sizeof *u);
    u->alive = true;
    u->pace_quota = 1;
    u->request_interval = request_interval;
    static const tw_entry_fn callbacks[KINDS] = {on_idle_timer, on_close_timer, on_pace_timer,
                                                 on_request_timer, on_request_deadline_timer};
    for (int k = 0; k < KINDS; k++) {
        check(tw_entry_init(&u->timers[k], callbacks[k]), "init");
    }
    return u;
}

static void start(tw_entry_wheel *w, struct unit *u, bool server) {
    unidle(w, u);
    schedule(w, u, CLOSE, 180 * TIME_S);
    if (!server) {
        on_request(w, u);
    }
}

/* The wheel's time as this program drives it: no handler arms an entry
 * with delay 0, so one pass (of polls, or one uncapped advance) always
 * reaches its target. */
static uint64_t now;

#ifndef RATAS_ADVANCE
/* Runs a due entry's handler: dispatched by kind with direct calls, as
 * the Rust port's `match` on the payload's kind does, so that the
 * handlers inline. */
static inline void dispatch(tw_entry_wheel *w, tw_entry *e, tw_entry_fn callback) {
    if (callback == on_pace_timer) {
        on_pace(w, UNIT_OF(e, PACE));
    } else if (callback == on_request_timer) {
        on_request(w, UNIT_OF(e, REQUEST));
    } else if (callback == on_close_timer) {
        on_close(w, UNIT_OF(e, CLOSE));
    } else if (callback == on_idle_timer) {
        delete_unit(UNIT_OF(e, IDLE));
    } else {
        callback(e, w);
    }
}
#endif

/* Ratas' loop, steps until the wheel's time reaches `until`: each step
 * is ticks_to_next_event(cap) and an advance by that much, in one pass
 * (the next-event forms fire the same entries in the same order with one
 * search for the next entry instead of two). The first second advances
 * one tick at a time: nothing is ever due at `now` when a step begins (no
 * handler arms an entry with delay 0), so a step with a cap of 1 is an
 * advance by one tick. The steps loop here rather than in the caller: at
 * 100 pairs a step fires about one timer, and a call per step was a tenth
 * of the instructions (with LTO the poll inlines here only under the
 * recipe's -locally-hot-callsite-threshold, see docs/C.md). */
static void run_steps(tw_entry_wheel *w, uint64_t cap, uint64_t until) {
    while (now < until) {
#ifndef NDEBUG
        uint64_t before = now;
#endif
#ifdef RATAS_ADVANCE
        bool complete = false;
        check(tw_entry_wheel_advance_to_next(w, cap, SIZE_MAX, w, &now, NULL, &complete), "advance");
        if (!complete) {
            fprintf(stderr, "a pass left an entry due\n");
            exit(1);
        }
#else
        for (;;) {
            tw_entry *e;
            tw_entry_fn callback;
            check(tw_entry_wheel_poll_to_next(w, cap, &e, &callback), "poll");
            if (!e) {
                break;
            }
            dispatch(w, e, callback);
        }
        check(tw_entry_wheel_now(w, &now), "now");
#endif
#ifndef NDEBUG
        /* Checked as the Rust port checks its passes, in builds with
         * assertions (benchmark builds define NDEBUG, as that port's
         * debug_assert is off in Cargo's bench profile). */
        if (cap == 1 && now != before + 1) {
            fprintf(stderr, "a one-tick step did not reach the next tick\n");
            exit(1);
        }
#endif
    }
}

static void bench(int pair_count) {
    /* Units never move while their timers are armed: one array, made
     * once. Pairs are made at most once per 1/(2 * pairs) of the first
     * second on average; four times the expected count leaves ample room. */
    size_t capacity = (size_t)pair_count * 8 + 64;
    units = calloc(capacity, sizeof *units);
    if (!units) {
        exit(1);
    }
    tw_entry_wheel *wheel = NULL;
    check(tw_entry_wheel_new(0, &wheel), "new");
    double per_iter = (double)pair_count / TIME_S * 2;
    double progress = 0;
    while (now < TIME_S) {
        progress += (rand() * per_iter) / RAND_MAX;
        while (progress > 1) {
            --progress;
            if (unit_count + 2 > capacity) {
                fprintf(stderr, "too many units\n");
                exit(1);
            }
            uint64_t interval = TIME_S + (uint64_t)(rand() % 100);
            struct unit *server = new_unit(TIME_S);
            struct unit *client = new_unit(interval);
            server->other = client;
            client->other = server;
            start(wheel, server, true);
            start(wheel, client, false);
        }
        run_steps(wheel, 1, now + 1);
    }
    run_steps(wheel, 100 * TIME_MS, 300 * TIME_S);
    /* Freeing the wheel detaches the entries still armed; then the units'
     * memory may go. */
    tw_entry_wheel_free(wheel);
    free(units);
}

int main(int argc, char **argv) {
    (void)argc;
    int pair_count = 5;
    const char *s = getenv("BENCH_ALLOW_SCHEDULE_IN_RANGE");
    if (s) {
        if (strcmp(s, "yes") == 0) {
            in_range = true;
        } else if (strcmp(s, "no") == 0) {
            in_range = false;
        } else {
            fprintf(stderr, "BENCH_ALLOW_SCHEDULE_IN_RANGE should be yes or no\n");
            return 1;
        }
    }
    s = getenv("BENCH_PAIR_COUNT");
    if (s) {
        char dummy;
        if (sscanf(s, "%d%c", &pair_count, &dummy) != 1 || pair_count < 0) {
            fprintf(stderr, "BENCH_PAIR_COUNT should be a non-negative integer\n");
            return 1;
        }
    }
    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    bench(pair_count);
    getrusage(RUSAGE_SELF, &after);
    printf("%s,%d,%s,%f,%ld\n", argv[0], pair_count, in_range ? "yes" : "no",
           (double)(after.ru_utime.tv_sec - before.ru_utime.tv_sec) +
               (double)(after.ru_utime.tv_usec - before.ru_utime.tv_usec) / 1e6,
           total_rx_count);
    return 0;
}
