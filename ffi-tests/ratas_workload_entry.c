/* Ratas' benchmark workload (jsnell/ratas, src/test/test_benchmark.cc) on
 * tickwheel's embedded timers (tw_entry): each unit keeps its five timers
 * inside itself, as Ratas' units keep their TimerEvents, and each timer's
 * callback finds its unit from the entry's address (container_of). The
 * same units, glibc rand() sequence and checksum as benches/ratas.rs (which
 * describes the workload), benches/ratas_embedded.rs (the same on the Rust
 * API) and ratas_workload.c (the keyed tw_wheel). Our own code, written
 * from reading Ratas' benchmark; no Ratas code is in this repository.
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

static tw_entry_wheel *wheel;
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

/* The unit whose timer `kind` is `entry`. */
#define UNIT_OF(entry, kind) \
    ((struct unit *)((char *)(entry) - offsetof(struct unit, timers) - (kind) * sizeof(tw_entry)))

/* schedule(), unidle() and the packet path (deliver, receive) are always
 * inlined, as in the Rust port on EmbeddedWheel. The timers' callbacks stay
 * calls through each entry's function pointer, as Ratas' events' are. */
#define ALWAYS_INLINE inline __attribute__((always_inline))

static ALWAYS_INLINE void schedule(struct unit *u, enum kind kind, uint64_t delay) {
    check(tw_entry_schedule(wheel, &u->timers[kind], delay), "schedule");
}

static ALWAYS_INLINE void unidle(struct unit *u) {
    if (!in_range) {
        schedule(u, IDLE, 60 * TIME_S);
        return;
    }
    check(tw_entry_schedule_in_range(wheel, &u->timers[IDLE], 60 * TIME_S, 61 * TIME_S, NULL),
          "schedule_in_range");
}

static void deliver(struct unit *u);

static ALWAYS_INLINE void receive(struct unit *u) {
    if (!u->alive) {
        fprintf(stderr, "a packet for a deleted unit\n");
        exit(1);
    }
    unidle(u);
    if (u->waiting_for_response) {
        schedule(u, REQUEST_DEADLINE, PACE_INTERVAL * RESPONSE_SIZE * 2);
        u->waiting_for_response = false;
    }
    u->rx_count++;
    if (u->rx_count % RESPONSE_SIZE == 0) {
        check(tw_entry_cancel(&u->timers[REQUEST_DEADLINE], NULL), "cancel");
        schedule(u, REQUEST, u->request_interval);
    }
}

static ALWAYS_INLINE void deliver(struct unit *u) {
    unidle(u);
    int amount = u->pace_quota < u->tx_count ? u->pace_quota : u->tx_count;
    u->pace_quota -= amount;
    u->tx_count -= amount;
    receive(u->other);
    if (!u->pace_quota) {
        schedule(u, PACE, PACE_INTERVAL);
    }
}

static void transmit(struct unit *u, int count) {
    u->tx_count += count;
    deliver(u);
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

static void on_request(struct unit *u) {
    if (!u->closing) {
        schedule(u, REQUEST_DEADLINE, PACE_INTERVAL * RESPONSE_SIZE * 4);
        u->waiting_for_response = true;
        transmit(u->other, RESPONSE_SIZE);
    }
}

/* One callback per kind of timer, as Ratas' MemberTimerEvents. */
static void on_idle(tw_entry *e, void *ctx) {
    (void)ctx;
    delete_unit(UNIT_OF(e, IDLE));
}

static void on_close(tw_entry *e, void *ctx) {
    (void)ctx;
    struct unit *u = UNIT_OF(e, CLOSE);
    if (u->closing) {
        delete_unit(u);
    } else {
        u->closing = true;
        schedule(u, CLOSE, 10 * TIME_S);
    }
}

static void on_pace(tw_entry *e, void *ctx) {
    (void)ctx;
    struct unit *u = UNIT_OF(e, PACE);
    if (u->tx_count) {
        u->pace_quota = 1;
        deliver(u);
    }
}

static void on_request_timer(tw_entry *e, void *ctx) {
    (void)ctx;
    on_request(UNIT_OF(e, REQUEST));
}

static void on_request_deadline(tw_entry *e, void *ctx) {
    (void)ctx;
    struct unit *u = UNIT_OF(e, REQUEST_DEADLINE);
    fprintf(stderr, "Request did not finish by deadline\n");
    delete_unit(u);
    delete_unit(u->other);
}

static struct unit *new_unit(uint64_t request_interval) {
    static const tw_entry_fn callbacks[KINDS] = {on_idle, on_close, on_pace, on_request_timer,
                                                 on_request_deadline};
    struct unit *u = &units[unit_count++];
    memset(u, 0, sizeof *u);
    u->alive = true;
    u->pace_quota = 1;
    u->request_interval = request_interval;
    for (int k = 0; k < KINDS; k++) {
        check(tw_entry_init(&u->timers[k], callbacks[k]), "init");
    }
    return u;
}

static void start(struct unit *u, bool server) {
    unidle(u);
    schedule(u, CLOSE, 180 * TIME_S);
    if (!server) {
        on_request(u);
    }
}

/* The wheel's time as this program drives it (an uncapped advance always
 * completes at its target). */
static uint64_t now;

static void advance(uint64_t delta) {
    bool complete = false;
    check(tw_entry_wheel_advance(wheel, now + delta, SIZE_MAX, NULL, NULL, &complete), "advance");
    if (!complete) {
        fprintf(stderr, "an uncapped advance did not complete\n");
        exit(1);
    }
    now += delta;
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
            start(server, true);
            start(client, false);
        }
        advance(1);
    }
    while (now < 300 * TIME_S) {
        uint64_t ticks = 0;
        check(tw_entry_wheel_ticks_to_next_event(wheel, 100 * TIME_MS, &ticks), "next event");
        advance(ticks);
    }
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
