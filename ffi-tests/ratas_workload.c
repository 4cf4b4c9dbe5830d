/* Ratas' benchmark workload (jsnell/ratas, src/test/test_benchmark.cc) on
 * tickwheel's C ABI: the same units, timers, glibc rand() sequence and
 * checksum as benches/ratas.rs, which describes the workload. Our own code,
 * written from reading Ratas' benchmark; no Ratas code is in this repository.
 *
 * Environment, as Ratas' benchmark: BENCH_PAIR_COUNT (default 5),
 * BENCH_ALLOW_SCHEDULE_IN_RANGE (yes|no, default yes). Prints, as Ratas:
 *   <argv0>,<pairs>,<yes|no>,<user CPU seconds>,<total_rx_count>
 * Every C call is one call per operation (relative scheduling). A fired
 * timer stays held under its key (tw_wheel_advance_keep) and is armed again
 * in place by the next schedule of its kind, as Ratas' events stay in their
 * unit; delete_unit's cancels free held timers too. */
#define _DEFAULT_SOURCE
#include <stdbool.h>
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
    size_t other;
    bool alive;
    int tx_count;
    int rx_count;
    int pace_quota;
    uint64_t request_interval;
    bool closing;
    bool waiting_for_response;
    uint64_t timers[KINDS]; /* armed key of each kind, 0 when not armed */
};

static tw_wheel *wheel;
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

static void *payload(size_t unit, enum kind kind) {
    return (void *)(uintptr_t)(unit * 8 + (size_t)kind + 1);
}

/* schedule(), unidle() and the packet path (deliver, receive, and the
 * dispatch in expired) are always inlined, as the Rust port's
 * #[inline(always)] functions are: the two ports then differ in the calls
 * into tickwheel, not in how their own code is laid out. With cross-language
 * LTO the advance's call of expired() is then inlined too (7.89 G -> 7.28 G
 * instructions at 1000 pairs, the Rust port 7.16 G). */
#define ALWAYS_INLINE inline __attribute__((always_inline))

static ALWAYS_INLINE void schedule(size_t unit, enum kind kind, uint64_t delay) {
    uint64_t *key = &units[unit].timers[kind];
    if (*key) {
        check(tw_wheel_reschedule_after(wheel, *key, delay), "reschedule");
    } else {
        check(tw_wheel_schedule_after(wheel, delay, payload(unit, kind), key), "schedule");
    }
}

static void cancel(size_t unit, enum kind kind) {
    uint64_t *key = &units[unit].timers[kind];
    if (*key) {
        check(tw_wheel_cancel(wheel, *key, NULL), "cancel");
        *key = 0;
    }
}

static ALWAYS_INLINE void unidle(size_t unit) {
    if (!in_range) {
        schedule(unit, IDLE, 60 * TIME_S);
        return;
    }
    uint64_t *key = &units[unit].timers[IDLE];
    if (*key) {
        check(tw_wheel_reschedule_in_range_after(wheel, *key, 60 * TIME_S, 61 * TIME_S, NULL),
              "reschedule_in_range");
    } else {
        check(tw_wheel_schedule_in_range_after(wheel, 60 * TIME_S, 61 * TIME_S,
                                               payload(unit, IDLE), key, NULL),
              "schedule_in_range");
    }
}

static void deliver(size_t unit);
static void on_request(size_t unit);

static ALWAYS_INLINE void receive(size_t unit) {
    struct unit *u = &units[unit];
    if (!u->alive) {
        fprintf(stderr, "a packet for a deleted unit\n");
        exit(1);
    }
    unidle(unit);
    if (u->waiting_for_response) {
        schedule(unit, REQUEST_DEADLINE, PACE_INTERVAL * RESPONSE_SIZE * 2);
        u->waiting_for_response = false;
    }
    u->rx_count++;
    if (u->rx_count % RESPONSE_SIZE == 0) {
        cancel(unit, REQUEST_DEADLINE);
        schedule(unit, REQUEST, u->request_interval);
    }
}

static ALWAYS_INLINE void deliver(size_t unit) {
    unidle(unit);
    struct unit *u = &units[unit];
    int amount = u->pace_quota < u->tx_count ? u->pace_quota : u->tx_count;
    u->pace_quota -= amount;
    u->tx_count -= amount;
    receive(u->other);
    if (!u->pace_quota) {
        schedule(unit, PACE, PACE_INTERVAL);
    }
}

static void transmit(size_t unit, int count) {
    units[unit].tx_count += count;
    deliver(unit);
}

static void delete_unit(size_t unit) {
    struct unit *u = &units[unit];
    if (!u->alive) {
        return;
    }
    u->alive = false;
    total_rx_count += u->rx_count;
    for (int k = 0; k < KINDS; k++) {
        cancel(unit, (enum kind)k);
    }
}

static void on_request(size_t unit) {
    if (!units[unit].closing) {
        schedule(unit, REQUEST_DEADLINE, PACE_INTERVAL * RESPONSE_SIZE * 4);
        units[unit].waiting_for_response = true;
        transmit(units[unit].other, RESPONSE_SIZE);
    }
}

static ALWAYS_INLINE void expired(void *ctx, uint64_t key, uint64_t deadline, void *p) {
    (void)ctx;
    (void)key;
    (void)deadline;
    size_t value = (size_t)(uintptr_t)p - 1;
    size_t unit = value / 8;
    enum kind kind = (enum kind)(value % 8);
    struct unit *u = &units[unit];
    /* The key stays: the timer is held, and schedule() re-arms it. */
    switch (kind) {
    case IDLE:
        delete_unit(unit);
        break;
    case CLOSE:
        if (u->closing) {
            delete_unit(unit);
        } else {
            u->closing = true;
            schedule(unit, CLOSE, 10 * TIME_S);
        }
        break;
    case PACE:
        if (u->tx_count) {
            u->pace_quota = 1;
            deliver(unit);
        }
        break;
    case REQUEST:
        on_request(unit);
        break;
    default:
        fprintf(stderr, "Request did not finish by deadline\n");
        delete_unit(unit);
        delete_unit(u->other);
        break;
    }
}

static size_t new_unit(uint64_t request_interval) {
    struct unit *u = &units[unit_count];
    memset(u, 0, sizeof *u);
    u->alive = true;
    u->pace_quota = 1;
    u->request_interval = request_interval;
    return unit_count++;
}

static void start(size_t unit, bool server) {
    unidle(unit);
    schedule(unit, CLOSE, 180 * TIME_S);
    if (!server) {
        on_request(unit);
    }
}

/* The wheel's time as this program drives it: an uncapped advance always
 * completes, leaving the wheel's time at its target, so the driver knows
 * the time without asking (a C caller that drives its own time does; the
 * Rust port's `wheel.now()` is an inlined field read, a C call here). */
static uint64_t now;

static void advance(uint64_t delta) {
    bool complete = false;
    check(tw_wheel_advance_keep(wheel, now + delta, SIZE_MAX, expired, NULL, NULL, &complete),
          "advance");
    if (!complete) {
        fprintf(stderr, "an uncapped advance did not complete\n");
        exit(1);
    }
    now += delta;
}

static uint64_t now_tick(void) {
    return now;
}

static void bench(int pair_count) {
    /* Pairs are made at most once per 1/(2 * pairs) of the first second on
     * average; four times the expected count leaves ample room. */
    size_t capacity = (size_t)pair_count * 8 + 64;
    units = calloc(capacity, sizeof *units);
    if (!units) {
        exit(1);
    }
    check(tw_wheel_new(0, &wheel), "new");
    double per_iter = (double)pair_count / TIME_S * 2;
    double progress = 0;
    while (now_tick() < TIME_S) {
        progress += (rand() * per_iter) / RAND_MAX;
        while (progress > 1) {
            --progress;
            if (unit_count + 2 > capacity) {
                fprintf(stderr, "too many units\n");
                exit(1);
            }
            uint64_t interval = TIME_S + (uint64_t)(rand() % 100);
            size_t server = new_unit(TIME_S);
            size_t client = new_unit(interval);
            units[server].other = client;
            units[client].other = server;
            start(server, true);
            start(client, false);
        }
        advance(1);
    }
    while (now_tick() < 300 * TIME_S) {
        /* Ratas' advance(ticks_to_next_event(100 ms)), in one call. */
        bool complete = false;
        check(tw_wheel_advance_to_next(wheel, 100 * TIME_MS, true, SIZE_MAX, expired, NULL, &now,
                                       NULL, &complete),
              "advance_to_next");
        if (!complete) {
            fprintf(stderr, "an uncapped advance did not complete\n");
            exit(1);
        }
    }
    tw_wheel_free(wheel);
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
