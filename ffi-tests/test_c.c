/* C11 tests of the tickwheel C ABI: every function, the bad inputs, and
 * callbacks that stop, restart and free their own timer.
 *
 * Timing tests use an embedded service on a manual clock, so they are exact
 * and do not depend on the machine's speed; a few tests use driver threads
 * and real time, with generous waits. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "check.h"

#define MS 1000000ull

static void sleep_ms(unsigned ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- callbacks ---------------------------------------------------------- */

/* A context that records what happened to one timer. */
typedef struct record {
    atomic_int fired;
    atomic_int freed;
    tw_expiry last;
    uint64_t overruns_sum;
    /* What the callback should do to its own timer. */
    int action;
    const tw_service *service;
    const tw_shard *shard;
    uint64_t other;
    tw_result seen;
    int seen_outcome;
    int freed_when_called;
} record;

enum {
    ACT_NONE,
    ACT_STOP_SELF,
    ACT_STOP_SYNC_SELF,
    ACT_RESTART_SELF,
    ACT_FREE_SELF,
    ACT_POLL_OWN_SHARD,
    ACT_STOP_OTHER,
    ACT_FREE_OTHER,
    ACT_START_OTHER,
    ACT_SLEEP_50MS,
    ACT_RESTART_SELF_NOW,
};

static void on_fire(void *ctx, const tw_expiry *expiry) {
    record *r = ctx;
    int n = atomic_fetch_add(&r->fired, 1) + 1;
    r->last = *expiry;
    r->overruns_sum += expiry->overruns;
    r->freed_when_called = atomic_load(&r->freed);
    switch (r->action) {
    case ACT_STOP_SELF: {
        tw_stop outcome = TW_STOP_CANCELLED;
        r->seen = tw_timer_stop(r->service, expiry->timer, &outcome);
        r->seen_outcome = (int)outcome;
        break;
    }
    case ACT_STOP_SYNC_SELF: {
        tw_stop_sync outcome = TW_STOP_SYNC_CANCELLED;
        r->seen = tw_timer_stop_sync(r->service, expiry->timer, &outcome);
        r->seen_outcome = (int)outcome;
        break;
    }
    case ACT_RESTART_SELF_NOW:
        if (n < 4) {
            tw_restart outcome = TW_RESTART_MOVED;
            r->seen = tw_timer_restart(r->service, expiry->timer, 0, &outcome);
            r->seen_outcome = (int)outcome;
        }
        break;
    case ACT_RESTART_SELF:
        if (n < 3) {
            tw_restart outcome = TW_RESTART_MOVED;
            r->seen = tw_timer_restart(r->service, expiry->timer, 2 * MS, &outcome);
            r->seen_outcome = (int)outcome;
        }
        break;
    case ACT_FREE_SELF:
        r->seen = tw_timer_free(r->service, expiry->timer);
        break;
    case ACT_POLL_OWN_SHARD: {
        size_t fired = 0;
        int ms = 0;
        r->seen = tw_shard_poll(r->shard, &fired);
        CHECK_RESULT(tw_shard_next_timeout_ms(r->shard, &ms), TW_REENTRANT);
        CHECK_RESULT(tw_shard_release((tw_shard *)r->shard), TW_REENTRANT);
        break;
    }
    case ACT_STOP_OTHER: {
        tw_stop outcome = TW_STOP_INACTIVE;
        r->seen = tw_timer_stop(r->service, r->other, &outcome);
        r->seen_outcome = (int)outcome;
        break;
    }
    case ACT_FREE_OTHER:
        r->seen = tw_timer_free(r->service, r->other);
        break;
    case ACT_START_OTHER:
        r->seen = tw_timer_start(r->service, 1 * MS, on_fire, r + 1, &r->other);
        break;
    case ACT_SLEEP_50MS:
        sleep_ms(50);
        break;
    default:
        break;
    }
}

static void free_record(void *ctx) {
    record *r = ctx;
    atomic_fetch_add(&r->freed, 1);
}

static atomic_int heap_frees;
static void free_heap(void *ctx) {
    free(ctx);
    atomic_fetch_add(&heap_frees, 1);
}

static void reset(record *r, int n) {
    for (int i = 0; i < n; i++) {
        memset(&r[i], 0, sizeof r[i]);
        atomic_init(&r[i].fired, 0);
        atomic_init(&r[i].freed, 0);
    }
}

/* An embedded service on a manual clock with 1 ms ticks, shard 0 claimed. */
typedef struct fixture {
    tw_service *service;
    tw_shard *shard;
} fixture;

static atomic_int wakes;
static atomic_size_t last_woken;
static void on_wake(void *ctx, size_t shard) {
    CHECK(ctx == (void *)&wakes);
    atomic_store(&last_woken, shard);
    atomic_fetch_add(&wakes, 1);
}

static fixture manual(size_t shards) {
    fixture f = {NULL, NULL};
    tw_service_config config = {0};
    config.shards = shards;
    config.tick_ns = 1 * MS;
    config.flags = TW_SERVICE_EMBEDDED | TW_SERVICE_MANUAL_CLOCK;
    config.wake = on_wake;
    config.wake_ctx = &wakes;
    CHECK_OK(tw_service_new(&config, &f.service));
    CHECK_OK(tw_shard_claim(f.service, 0, &f.shard));
    return f;
}

static void done(fixture f) {
    CHECK_OK(tw_shard_release(f.shard));
    tw_service_free(f.service);
}

static size_t advance(fixture f, uint64_t ns) {
    size_t fired = 99;
    CHECK_OK(tw_service_advance_clock(f.service, ns));
    CHECK_OK(tw_shard_poll(f.shard, &fired));
    return fired;
}

/* ---- tests -------------------------------------------------------------- */

static void test_results(void) {
    static const char *names[] = {
        "TW_OK", "TW_NULL_POINTER", "TW_INVALID_ARGUMENT", "TW_STALE_HANDLE",
        "TW_INVALID_RANGE", "TW_INVALID_PERIOD", "TW_SHUTDOWN", "TW_SHARD_OUT_OF_RANGE",
        "TW_SHARD_CLAIMED", "TW_REENTRANT", "TW_INVALID_CONFIG", "TW_WRONG_THREAD",
        "TW_NOT_MANUAL_CLOCK", "TW_PANIC", "TW_FOREIGN_ENTRY", "TW_PRIORITY_DENIED",
    };
    for (uint32_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        CHECK(strcmp(tw_result_str(i), names[i]) == 0);
        CHECK(strlen(tw_result_describe(i)) > 0);
    }
    CHECK(TW_PANIC == 13 && TW_STALE_HANDLE == 3);
    CHECK(TW_FOREIGN_ENTRY == 14 && TW_PRIORITY_DENIED == 15);
    CHECK(strcmp(tw_result_str(16), "TW_UNKNOWN") == 0);
    CHECK(strcmp(tw_result_str(UINT32_MAX), "TW_UNKNOWN") == 0);
    CHECK(tw_result_describe(UINT32_MAX) != NULL);
}

static void test_config(void) {
    tw_service *service = NULL;
    size_t count = 0;
    uint64_t tick = 0;
    CHECK_RESULT(tw_service_new(NULL, NULL), TW_NULL_POINTER);

    /* NULL config and an all-zero config both mean the defaults. */
    CHECK_OK(tw_service_new(NULL, &service));
    CHECK_OK(tw_service_shard_count(service, &count));
    CHECK_OK(tw_service_tick_ns(service, &tick));
    CHECK(count >= 1 && tick == MS / 2); /* driver threads: 500 us */
    CHECK_RESULT(tw_service_advance_clock(service, MS), TW_NOT_MANUAL_CLOCK);
    tw_shard *shard = NULL;
    CHECK_RESULT(tw_shard_claim(service, 0, &shard), TW_SHARD_CLAIMED);
    CHECK(shard == NULL);
    tw_service_free(service);

    tw_service_config config = {0};
    service = NULL;
    CHECK_OK(tw_service_new(&config, &service));
    CHECK_OK(tw_service_tick_ns(service, &tick));
    CHECK(tick == MS / 2);
    tw_service_free(service);

    /* Embedded shards default to 1 ms ticks (their owners wait in whole
     * milliseconds, tw_shard_next_timeout_ms). */
    config.flags = TW_SERVICE_EMBEDDED;
    CHECK_OK(tw_service_new(&config, &service));
    CHECK_OK(tw_service_tick_ns(service, &tick));
    CHECK(tick == MS);
    tw_service_free(service);
    config.flags = 0;

    config.shards = 3;
    config.tick_ns = 100000;
    config.flags = TW_SERVICE_PIN_THREADS;
    CHECK_OK(tw_service_new(&config, &service));
    CHECK_OK(tw_service_shard_count(service, &count));
    CHECK_OK(tw_service_tick_ns(service, &tick));
    CHECK(count == 3 && tick == 100000);
    tw_service_free(service);

    /* Driver threads that keep their shards while they sleep. */
    config.flags = TW_SERVICE_NO_LEND;
    CHECK_OK(tw_service_new(&config, &service));
    tw_service_free(service);

    /* Real-time driver threads: made where permitted (a timer fires),
     * refused with TW_PRIORITY_DENIED (and nothing made) where not. */
    config.flags = TW_SERVICE_REALTIME_DRIVERS;
    service = NULL;
    tw_result made = tw_service_new(&config, &service);
    CHECK(made == TW_OK || made == TW_PRIORITY_DENIED);
    if (made == TW_OK) {
        CHECK(service != NULL);
        record rt[1];
        reset(rt, 1);
        uint64_t timer = 0;
        CHECK_OK(tw_timer_start(service, 2 * MS, on_fire, rt, &timer));
        for (int i = 0; i < 2000 && atomic_load(&rt->fired) == 0; i++) {
            sleep_ms(1);
        }
        CHECK(atomic_load(&rt->fired) == 1);
        CHECK_OK(tw_timer_free(service, timer));
        tw_service_free(service);
    } else {
        CHECK(service == NULL);
    }

    tw_service *untouched = (tw_service *)&config;
    tw_service_config bad = {0};
    bad.flags = 1u << 7;
    CHECK_RESULT(tw_service_new(&bad, &untouched), TW_INVALID_ARGUMENT);
    CHECK(untouched == (tw_service *)&config);
    bad.flags = TW_SERVICE_EMBEDDED | TW_SERVICE_PIN_THREADS;
    CHECK_RESULT(tw_service_new(&bad, &untouched), TW_INVALID_ARGUMENT);
    bad.flags = TW_SERVICE_EMBEDDED | TW_SERVICE_NO_LEND;
    CHECK_RESULT(tw_service_new(&bad, &untouched), TW_INVALID_ARGUMENT);
    bad.flags = TW_SERVICE_EMBEDDED | TW_SERVICE_REALTIME_DRIVERS;
    CHECK_RESULT(tw_service_new(&bad, &untouched), TW_INVALID_ARGUMENT);
    bad.flags = 0;
    bad.wake = on_wake;
    CHECK_RESULT(tw_service_new(&bad, &untouched), TW_INVALID_ARGUMENT);
    bad.wake = NULL;
    bad.shards = 5000;
    CHECK_RESULT(tw_service_new(&bad, &untouched), TW_INVALID_CONFIG);
    bad.shards = 1;
    bad.tick_ns = 1;
    CHECK_RESULT(tw_service_new(&bad, &untouched), TW_INVALID_CONFIG);
    bad.tick_ns = UINT64_MAX;
    CHECK_RESULT(tw_service_new(&bad, &untouched), TW_INVALID_CONFIG);
    CHECK(untouched == (tw_service *)&config);
    tw_service_free(NULL);
}

static void test_null_arguments(void) {
    fixture f = manual(1);
    record r[1];
    reset(r, 1);
    uint64_t timer = 0;
    size_t n = 0;
    uint64_t u = 0;
    int ms = 0;
    bool armed = false;
    tw_timer_spec spec = {0};

    CHECK_RESULT(tw_timer_start(NULL, 0, on_fire, r, &timer), TW_NULL_POINTER);
    CHECK_RESULT(tw_timer_start(f.service, 0, NULL, r, &timer), TW_NULL_POINTER);
    CHECK_RESULT(tw_timer_start(f.service, 0, on_fire, r, NULL), TW_NULL_POINTER);
    CHECK_RESULT(tw_timer_start_periodic(NULL, MS, on_fire, r, &timer), TW_NULL_POINTER);
    CHECK_RESULT(tw_timer_start_periodic(f.service, MS, on_fire, r, NULL), TW_NULL_POINTER);
    CHECK_RESULT(tw_timer_start_within(NULL, 0, MS, on_fire, r, &timer), TW_NULL_POINTER);
    CHECK_RESULT(tw_timer_start_within(f.service, 0, MS, NULL, r, &timer), TW_NULL_POINTER);
    /* A failing tw_timer_schedule still frees its ctx, whatever the error. */
    CHECK_RESULT(tw_timer_schedule(NULL, &spec, on_fire, r, free_record, &timer),
                 TW_NULL_POINTER);
    CHECK_RESULT(tw_timer_schedule(f.service, NULL, on_fire, r, free_record, &timer),
                 TW_NULL_POINTER);
    CHECK_RESULT(tw_timer_schedule(f.service, &spec, NULL, r, free_record, &timer),
                 TW_NULL_POINTER);
    CHECK_RESULT(tw_timer_schedule(f.service, &spec, on_fire, r, free_record, NULL),
                 TW_NULL_POINTER);
    CHECK(atomic_load(&r->freed) == 4);
    CHECK(timer == 0);

    CHECK_OK(tw_timer_start(f.service, MS, on_fire, r, &timer));
    CHECK_RESULT(tw_timer_stop(NULL, timer, NULL), TW_NULL_POINTER);
    CHECK_RESULT(tw_timer_stop_sync(NULL, timer, NULL), TW_NULL_POINTER);
    CHECK_RESULT(tw_timer_restart(NULL, timer, MS, NULL), TW_NULL_POINTER);
    CHECK_RESULT(tw_timer_is_armed(NULL, timer, &armed), TW_NULL_POINTER);
    CHECK_RESULT(tw_timer_is_armed(f.service, timer, NULL), TW_NULL_POINTER);
    CHECK_RESULT(tw_timer_free(NULL, timer), TW_NULL_POINTER);
    CHECK_RESULT(tw_timer_forget(NULL, timer), TW_NULL_POINTER);
    CHECK_RESULT(tw_service_shard_count(NULL, &n), TW_NULL_POINTER);
    CHECK_RESULT(tw_service_shard_count(f.service, NULL), TW_NULL_POINTER);
    CHECK_RESULT(tw_service_tick_ns(NULL, &u), TW_NULL_POINTER);
    CHECK_RESULT(tw_service_tick_ns(f.service, NULL), TW_NULL_POINTER);
    CHECK_RESULT(tw_service_advance_clock(NULL, MS), TW_NULL_POINTER);
    CHECK_RESULT(tw_service_shutdown(NULL), TW_NULL_POINTER);
    CHECK_RESULT(tw_shard_claim(NULL, 0, NULL), TW_NULL_POINTER);
    CHECK_RESULT(tw_shard_claim(f.service, 0, NULL), TW_NULL_POINTER);
    CHECK_RESULT(tw_shard_poll(NULL, &n), TW_NULL_POINTER);
    CHECK_RESULT(tw_shard_next_deadline_ns(NULL, &u), TW_NULL_POINTER);
    CHECK_RESULT(tw_shard_next_deadline_ns(f.shard, NULL), TW_NULL_POINTER);
    CHECK_RESULT(tw_shard_next_timeout_ms(NULL, &ms), TW_NULL_POINTER);
    CHECK_RESULT(tw_shard_next_timeout_ms(f.shard, NULL), TW_NULL_POINTER);
    CHECK_RESULT(tw_shard_index(NULL, &n), TW_NULL_POINTER);
    CHECK_RESULT(tw_shard_index(f.shard, NULL), TW_NULL_POINTER);
    CHECK_OK(tw_shard_release(NULL));
    /* Outcome outputs may be NULL. */
    CHECK_OK(tw_timer_restart(f.service, timer, MS, NULL));
    CHECK_OK(tw_timer_stop(f.service, timer, NULL));
    CHECK_OK(tw_timer_stop_sync(f.service, timer, NULL));
    CHECK_OK(tw_shard_poll(f.shard, NULL));
    CHECK_OK(tw_timer_free(f.service, timer));

    CHECK_RESULT(tw_wheel_new(0, NULL), TW_NULL_POINTER);
    CHECK_RESULT(tw_wheel_schedule(NULL, 0, NULL, &u), TW_NULL_POINTER);
    CHECK_RESULT(tw_wheel_schedule_in_range(NULL, 0, 1, NULL, &u), TW_NULL_POINTER);
    CHECK_RESULT(tw_wheel_reschedule(NULL, 1, 1), TW_NULL_POINTER);
    CHECK_RESULT(tw_wheel_cancel(NULL, 1, NULL), TW_NULL_POINTER);
    CHECK_RESULT(tw_wheel_advance(NULL, 1, 1, NULL, NULL, NULL, NULL), TW_NULL_POINTER);
    CHECK_RESULT(tw_wheel_clear(NULL, NULL, NULL), TW_NULL_POINTER);
    CHECK_RESULT(tw_wheel_ticks_to_next_event(NULL, 1, &u), TW_NULL_POINTER);
    CHECK_RESULT(tw_wheel_next_event(NULL, 1, &u, &armed), TW_NULL_POINTER);
    CHECK_RESULT(tw_wheel_now(NULL, &u), TW_NULL_POINTER);
    CHECK_RESULT(tw_wheel_len(NULL, &n), TW_NULL_POINTER);
    tw_wheel_free(NULL);
    done(f);
}

static void test_one_shot_on_time(void) {
    fixture f = manual(1);
    record r[1];
    reset(r, 1);
    uint64_t timer = 0, ns = 0;
    int ms = 0;
    size_t index = 9;
    CHECK_OK(tw_shard_index(f.shard, &index));
    CHECK(index == 0);
    CHECK_OK(tw_shard_next_timeout_ms(f.shard, &ms));
    CHECK(ms == -1);
    CHECK_OK(tw_shard_next_deadline_ns(f.shard, &ns));
    CHECK(ns == UINT64_MAX);

    CHECK_OK(tw_timer_start(f.service, 5 * MS, on_fire, r, &timer));
    CHECK(timer != 0);
    bool armed = false;
    CHECK_OK(tw_timer_is_armed(f.service, timer, &armed));
    CHECK(armed);
    CHECK_OK(tw_shard_next_deadline_ns(f.shard, &ns));
    CHECK(ns == 5 * MS);
    CHECK_OK(tw_service_advance_clock(f.service, MS / 2));
    CHECK_OK(tw_shard_next_timeout_ms(f.shard, &ms));
    CHECK(ms == 5); /* 4.5 ms rounds up: never early */
    CHECK(advance(f, 4 * MS) == 0); /* 4.5 ms: not yet */
    CHECK(advance(f, MS / 2) == 1); /* 5 ms: on time */
    CHECK(atomic_load(&r->fired) == 1);
    CHECK(r->last.timer == timer && r->last.shard == 0);
    CHECK(r->last.deadline_tick == 5 && r->last.poll_tick == 5 && r->last.lateness_ns == 0);
    CHECK_OK(tw_timer_is_armed(f.service, timer, &armed));
    CHECK(!armed);

    tw_stop stop = TW_STOP_CANCELLED;
    CHECK_OK(tw_timer_stop(f.service, timer, &stop));
    CHECK(stop == TW_STOP_FIRED);
    CHECK_OK(tw_timer_free(f.service, timer));
    /* Stale from now on: every use is refused and touches nothing. */
    stop = TW_STOP_CANCELLED;
    CHECK_RESULT(tw_timer_stop(f.service, timer, &stop), TW_STALE_HANDLE);
    CHECK(stop == TW_STOP_CANCELLED);
    CHECK_RESULT(tw_timer_stop_sync(f.service, timer, NULL), TW_STALE_HANDLE);
    CHECK_RESULT(tw_timer_restart(f.service, timer, MS, NULL), TW_STALE_HANDLE);
    CHECK_RESULT(tw_timer_is_armed(f.service, timer, &armed), TW_STALE_HANDLE);
    CHECK_RESULT(tw_timer_free(f.service, timer), TW_STALE_HANDLE);
    CHECK_RESULT(tw_timer_forget(f.service, timer), TW_STALE_HANDLE);
    CHECK_RESULT(tw_timer_stop(f.service, 0, NULL), TW_STALE_HANDLE);
    CHECK_RESULT(tw_timer_stop(f.service, UINT64_MAX, NULL), TW_STALE_HANDLE);

    /* A new timer may reuse the slot; the old handle still does not reach it. */
    uint64_t next = 0;
    CHECK_OK(tw_timer_start(f.service, 5 * MS, on_fire, r, &next));
    CHECK(next != timer);
    CHECK_RESULT(tw_timer_stop(f.service, timer, NULL), TW_STALE_HANDLE);
    CHECK_OK(tw_timer_is_armed(f.service, next, &armed));
    CHECK(armed);
    CHECK_OK(tw_timer_free(f.service, next));
    CHECK(advance(f, 10 * MS) == 0);
    done(f);
}

/* The shard's timeout is its earliest armed timer's deadline, exactly: not
 * the next point where the wheel moves far timers down a level (a poll
 * there would fire nothing). A loop that sleeps for that long and polls
 * wakes once per expiry. */
static void test_next_timeout_is_the_earliest_deadline(void) {
    static const int delays_ms[] = {10, 100, 1000, 5000, 100000};
    for (size_t i = 0; i < sizeof delays_ms / sizeof delays_ms[0]; i++) {
        fixture f = manual(1);
        record r[1];
        reset(r, 1);
        uint64_t timer = 0, ns = 0;
        int ms = 0;
        int delay = delays_ms[i];
        CHECK_OK(tw_timer_start(f.service, (uint64_t)delay * MS, on_fire, r, &timer));
        CHECK_OK(tw_shard_next_timeout_ms(f.shard, &ms));
        CHECK(ms == delay);
        CHECK_OK(tw_shard_next_deadline_ns(f.shard, &ns));
        CHECK(ns == (uint64_t)delay * MS);
        /* Sleep exactly that long: the poll fires it, on its own tick. */
        CHECK(advance(f, ns) == 1);
        CHECK(r->last.deadline_tick == (uint64_t)delay && r->last.lateness_ns == 0);
        CHECK_OK(tw_shard_next_timeout_ms(f.shard, &ms));
        CHECK(ms == -1);
        CHECK_OK(tw_timer_free(f.service, timer));
        done(f);
    }

    /* A heartbeat kept 5 s ahead beside idle timeouts a minute out (fewer
     * than 64 per coarse bucket: past that, the bucket's first tick). */
    fixture f = manual(1);
    record r[2];
    reset(r, 2);
    uint64_t beat = 0, idle[50];
    for (int i = 0; i < 50; i++)
        CHECK_OK(tw_timer_start(f.service, (60000 + (uint64_t)i) * MS, on_fire, &r[1], &idle[i]));
    CHECK_OK(tw_timer_start_periodic(f.service, 5000 * MS, on_fire, &r[0], &beat));
    int wakeups = 0;
    for (;;) {
        int ms = 0;
        CHECK_OK(tw_shard_next_timeout_ms(f.shard, &ms));
        CHECK(ms > 0);
        if (ms >= 60000 - 5000 * wakeups)
            break;
        CHECK(advance(f, (uint64_t)ms * MS) == 1);
        wakeups++;
    }
    CHECK(wakeups == 11 && atomic_load(&r[0].fired) == 11 && atomic_load(&r[1].fired) == 0);
    CHECK_OK(tw_timer_free(f.service, beat));
    for (int i = 0; i < 50; i++)
        CHECK_OK(tw_timer_free(f.service, idle[i]));
    done(f);
}

/* tw_expiry.lateness_ns counts from the deadline asked for, not from the
 * tick it was rounded up to: 2.25 ms on a 1 ms tick fires at tick 3, which
 * is 0.75 ms after the deadline (to 1/256 of a tick, about 3.9 us). */
static void test_lateness_counts_from_the_deadline_asked_for(void) {
    fixture f = manual(1);
    record r[1];
    reset(r, 1);
    uint64_t timer = 0;
    CHECK_OK(tw_timer_start(f.service, 2250 * MS / 1000, on_fire, &r[0], &timer));
    CHECK(advance(f, 2 * MS) == 0);
    CHECK(advance(f, MS) == 1);
    CHECK(r[0].last.deadline_tick == 3 && r[0].last.poll_tick == 3);
    CHECK(r[0].last.lateness_ns <= 750000 && r[0].last.lateness_ns > 746000);
    CHECK_OK(tw_timer_free(f.service, timer));
    done(f);
}

static void test_zero_and_huge_delays(void) {
    fixture f = manual(1);
    record r[2];
    reset(r, 2);
    uint64_t zero = 0, huge = 0, ns = 0;
    CHECK(advance(f, 5 * MS) == 0);
    CHECK_OK(tw_timer_start(f.service, 0, on_fire, &r[0], &zero));
    CHECK(atomic_load(&r[0].fired) == 0); /* never inside start */
    CHECK(advance(f, 0) == 1);            /* due now: the next poll, not a tick later */
    CHECK(atomic_load(&r[0].fired) == 1);
    CHECK(advance(f, MS) == 0);           /* and only once */

    CHECK_OK(tw_timer_start(f.service, UINT64_MAX, on_fire, &r[1], &huge));
    CHECK_OK(tw_shard_next_deadline_ns(f.shard, &ns));
    CHECK(ns > (uint64_t)1 << 62);
    CHECK(advance(f, 3600000 * MS) == 0);
    CHECK(advance(f, UINT64_MAX / 4) == 0);
    tw_stop stop = TW_STOP_INACTIVE;
    CHECK_OK(tw_timer_stop(f.service, huge, &stop));
    CHECK(stop == TW_STOP_CANCELLED);
    CHECK(atomic_load(&r[1].fired) == 0);
    CHECK_OK(tw_timer_free(f.service, zero));
    CHECK_OK(tw_timer_free(f.service, huge));
    done(f);
}

static void test_double_stop_and_restart(void) {
    fixture f = manual(1);
    record r[1];
    reset(r, 1);
    uint64_t timer = 0;
    tw_stop stop = TW_STOP_FIRED;
    tw_restart restart = TW_RESTART_REARMED;
    CHECK_OK(tw_timer_start(f.service, 10 * MS, on_fire, r, &timer));
    CHECK_OK(tw_timer_stop(f.service, timer, &stop));
    CHECK(stop == TW_STOP_CANCELLED);
    CHECK_OK(tw_timer_stop(f.service, timer, &stop));
    CHECK(stop == TW_STOP_INACTIVE);
    tw_stop_sync sync = TW_STOP_SYNC_FIRED;
    CHECK_OK(tw_timer_stop_sync(f.service, timer, &sync));
    CHECK(sync == TW_STOP_SYNC_INACTIVE);
    CHECK(advance(f, 20 * MS) == 0);

    CHECK_OK(tw_timer_restart(f.service, timer, 10 * MS, &restart));
    CHECK(restart == TW_RESTART_REARMED);
    CHECK_OK(tw_timer_restart(f.service, timer, 20 * MS, &restart));
    CHECK(restart == TW_RESTART_MOVED);
    CHECK(advance(f, 15 * MS) == 0); /* moved later: not at the old deadline */
    CHECK(advance(f, 5 * MS) == 1);
    CHECK(r->last.deadline_tick == 40);
    CHECK_OK(tw_timer_restart(f.service, timer, 0, &restart));
    CHECK(restart == TW_RESTART_REARMED);
    CHECK(advance(f, MS) == 1);
    CHECK(atomic_load(&r->fired) == 2);

    /* stop_sync cancelling an armed timer. */
    CHECK_OK(tw_timer_restart(f.service, timer, 5 * MS, NULL));
    CHECK_OK(tw_timer_stop_sync(f.service, timer, &sync));
    CHECK(sync == TW_STOP_SYNC_CANCELLED);
    CHECK_OK(tw_timer_free(f.service, timer));
    done(f);
}

static void test_periodic_and_ranges(void) {
    fixture f = manual(1);
    record r[3];
    reset(r, 3);
    uint64_t periodic = 0, within = 0, bad = 0;
    CHECK_RESULT(tw_timer_start_periodic(f.service, 0, on_fire, r, &bad), TW_INVALID_PERIOD);
    CHECK_RESULT(tw_timer_start_within(f.service, 2 * MS, MS, on_fire, r, &bad),
                 TW_INVALID_RANGE);
    CHECK(bad == 0);

    CHECK_OK(tw_timer_start_periodic(f.service, 3 * MS, on_fire, &r[0], &periodic));
    CHECK(advance(f, 3 * MS) == 1);
    CHECK(advance(f, 3 * MS) == 1);
    CHECK(r[0].last.deadline_tick == 6 && r[0].last.overruns == 0);
    /* Late by three periods (9, 12 and 15 due at once): not fired three
     * times in a burst. Missed periods are counted as overruns, and the
     * timer stays on its grid (no drift): the next expiry is at 18. Each
     * period 9..18 is either fired or counted as an overrun. */
    size_t late = advance(f, 9 * MS);
    CHECK(late >= 1 && late <= 2);
    size_t fires = late + advance(f, 3 * MS);
    CHECK(r[0].last.deadline_tick == 18);
    CHECK(fires + r[0].overruns_sum == 4);
    tw_stop stop = TW_STOP_FIRED;
    CHECK_OK(tw_timer_stop(f.service, periodic, &stop));
    CHECK(stop == TW_STOP_CANCELLED);
    CHECK(advance(f, 30 * MS) == 0);
    CHECK_OK(tw_timer_free(f.service, periodic));

    /* Within a window: fires at some tick inside it, never outside. */
    uint64_t start_tick = 48;
    CHECK_OK(tw_timer_start_within(f.service, 10 * MS, 20 * MS, on_fire, &r[1], &within));
    uint64_t steps = 0;
    while (atomic_load(&r[1].fired) == 0) {
        CHECK(++steps <= 20);
        advance(f, MS);
    }
    CHECK(r[1].last.deadline_tick >= start_tick + 10 && r[1].last.deadline_tick <= start_tick + 20);
    CHECK_OK(tw_timer_free(f.service, within));

    /* Burst: every missed period fires, back to back. */
    tw_timer_spec spec = {0};
    spec.delay_ns = 2 * MS;
    spec.period_ns = 2 * MS;
    spec.flags = TW_TIMER_BURST;
    uint64_t burst = 0;
    CHECK_OK(tw_timer_schedule(f.service, &spec, on_fire, &r[2], free_record, &burst));
    CHECK(advance(f, 10 * MS) == 5);
    CHECK_OK(tw_timer_free(f.service, burst));
    CHECK(advance(f, MS) == 0);
    CHECK(atomic_load(&r[2].freed) == 1);
    done(f);
}

static void test_schedule_spec(void) {
    fixture f = manual(2);
    tw_shard *second = NULL;
    CHECK_RESULT(tw_shard_claim(f.service, 0, &second), TW_SHARD_CLAIMED);
    CHECK_RESULT(tw_shard_claim(f.service, 2, &second), TW_SHARD_OUT_OF_RANGE);
    CHECK_OK(tw_shard_claim(f.service, 1, &second));
    record r[1];
    reset(r, 1);
    uint64_t timer = 0;
    tw_timer_spec spec = {0};
    spec.delay_ns = 3 * MS;
    spec.flags = TW_TIMER_ON_SHARD;
    spec.shard = 7;
    CHECK_RESULT(tw_timer_schedule(f.service, &spec, on_fire, r, free_record, &timer),
                 TW_SHARD_OUT_OF_RANGE);
    spec.flags = 1u << 9;
    CHECK_RESULT(tw_timer_schedule(f.service, &spec, on_fire, r, free_record, &timer),
                 TW_INVALID_ARGUMENT);
    spec.flags = 0;
    spec.latest_ns = MS;
    CHECK_RESULT(tw_timer_schedule(f.service, &spec, on_fire, r, free_record, &timer),
                 TW_INVALID_RANGE);
    CHECK(atomic_load(&r->freed) == 3 && timer == 0);

    /* On shard 1, claimed by this thread too. */
    spec.latest_ns = 0;
    spec.flags = TW_TIMER_ON_SHARD;
    spec.shard = 1;
    CHECK_OK(tw_timer_schedule(f.service, &spec, on_fire, r, free_record, &timer));
    CHECK(advance(f, 3 * MS) == 0); /* shard 0 has nothing */
    size_t fired = 0;
    CHECK_OK(tw_shard_poll(second, &fired));
    CHECK(fired == 1 && r->last.shard == 1);
    /* The ctx is freed once the handle is freed, not when the timer fires. */
    CHECK(atomic_load(&r->freed) == 3);
    CHECK_OK(tw_timer_free(f.service, timer));
    CHECK_OK(tw_shard_poll(second, NULL));
    CHECK(atomic_load(&r->freed) == 4);

    /* A range spec, and a forgotten timer: fires once, then its ctx is freed. */
    spec.delay_ns = 4 * MS;
    spec.latest_ns = 8 * MS;
    CHECK_OK(tw_timer_schedule(f.service, &spec, on_fire, r, free_record, &timer));
    CHECK_OK(tw_timer_forget(f.service, timer));
    CHECK_RESULT(tw_timer_stop(f.service, timer, NULL), TW_STALE_HANDLE);
    CHECK_OK(tw_service_advance_clock(f.service, 8 * MS));
    CHECK_OK(tw_shard_poll(second, &fired));
    CHECK(fired == 1 && atomic_load(&r->fired) == 2 && atomic_load(&r->freed) == 5);
    CHECK_OK(tw_shard_release(second));
    done(f);
}

static void test_callbacks_on_their_own_timer(void) {
    fixture f = manual(1);
    record r[2];
    uint64_t timer = 0;
    tw_timer_spec spec = {0};

    /* A periodic timer that stops itself: RUNNING, and it does not come back. */
    reset(r, 2);
    r[0].action = ACT_STOP_SELF;
    r[0].service = f.service;
    CHECK_OK(tw_timer_start_periodic(f.service, 2 * MS, on_fire, &r[0], &timer));
    CHECK(advance(f, 2 * MS) == 1);
    CHECK(r[0].seen == TW_OK && r[0].seen_outcome == TW_STOP_RUNNING);
    CHECK(advance(f, 10 * MS) == 0);
    CHECK_OK(tw_timer_free(f.service, timer));

    /* stop_sync from its own callback returns at once. */
    reset(r, 2);
    r[0].action = ACT_STOP_SYNC_SELF;
    r[0].service = f.service;
    CHECK_OK(tw_timer_start_periodic(f.service, 2 * MS, on_fire, &r[0], &timer));
    CHECK(advance(f, 2 * MS) == 1);
    CHECK(r[0].seen == TW_OK && r[0].seen_outcome == TW_STOP_SYNC_FROM_OWN_CALLBACK);
    CHECK(advance(f, 10 * MS) == 0);
    CHECK_OK(tw_timer_free(f.service, timer));

    /* A one-shot timer that restarts itself twice: three fires in all. */
    reset(r, 2);
    r[0].action = ACT_RESTART_SELF;
    r[0].service = f.service;
    CHECK_OK(tw_timer_start(f.service, 2 * MS, on_fire, &r[0], &timer));
    for (int i = 0; i < 10; i++) {
        advance(f, MS);
    }
    CHECK(atomic_load(&r[0].fired) == 3);
    CHECK(r[0].seen == TW_OK && r[0].seen_outcome == TW_RESTART_REARMED);
    CHECK_OK(tw_timer_free(f.service, timer));

    /* A timer that frees its own handle: its ctx is freed after it returns. */
    reset(r, 2);
    r[0].action = ACT_FREE_SELF;
    r[0].service = f.service;
    spec.delay_ns = MS;
    CHECK_OK(tw_timer_schedule(f.service, &spec, on_fire, &r[0], free_record, &timer));
    CHECK(advance(f, MS) == 1);
    CHECK(r[0].seen == TW_OK && r[0].freed_when_called == 0);
    CHECK(atomic_load(&r[0].freed) == 1);
    CHECK_RESULT(tw_timer_free(f.service, timer), TW_STALE_HANDLE);

    /* Polling its own shard from a callback is refused. */
    reset(r, 2);
    r[0].action = ACT_POLL_OWN_SHARD;
    r[0].shard = f.shard;
    CHECK_OK(tw_timer_start(f.service, MS, on_fire, &r[0], &timer));
    CHECK(advance(f, MS) == 1);
    CHECK(r[0].seen == TW_REENTRANT);
    CHECK_OK(tw_timer_free(f.service, timer));

    /* Callbacks that stop, free and start other timers. */
    uint64_t victim = 0;
    reset(r, 2);
    CHECK_OK(tw_timer_start(f.service, 5 * MS, on_fire, &r[1], &victim));
    r[0].action = ACT_STOP_OTHER;
    r[0].service = f.service;
    r[0].other = victim;
    CHECK_OK(tw_timer_start(f.service, MS, on_fire, &r[0], &timer));
    CHECK(advance(f, MS) == 1);
    CHECK(r[0].seen == TW_OK && r[0].seen_outcome == TW_STOP_CANCELLED);
    CHECK(advance(f, 10 * MS) == 0 && atomic_load(&r[1].fired) == 0);
    CHECK_OK(tw_timer_free(f.service, timer));

    r[0].action = ACT_FREE_OTHER;
    r[0].seen = TW_PANIC;
    CHECK_OK(tw_timer_restart(f.service, victim, 5 * MS, NULL));
    CHECK_OK(tw_timer_start(f.service, MS, on_fire, &r[0], &timer));
    CHECK(advance(f, MS) == 1 && r[0].seen == TW_OK);
    CHECK(advance(f, 10 * MS) == 0 && atomic_load(&r[1].fired) == 0);
    CHECK_RESULT(tw_timer_free(f.service, victim), TW_STALE_HANDLE);
    CHECK_OK(tw_timer_free(f.service, timer));

    reset(r, 2);
    r[0].action = ACT_START_OTHER;
    r[0].service = f.service;
    CHECK_OK(tw_timer_start(f.service, MS, on_fire, &r[0], &timer));
    CHECK(advance(f, MS) == 1 && r[0].seen == TW_OK && r[0].other != 0);
    CHECK(atomic_load(&r[1].fired) == 0); /* not synchronously */
    CHECK(advance(f, MS) == 1 && atomic_load(&r[1].fired) == 1);
    CHECK(r[1].last.shard == 0);
    CHECK_OK(tw_timer_free(f.service, r[0].other));
    CHECK_OK(tw_timer_free(f.service, timer));
    done(f);
}

/* ---- threads ------------------------------------------------------------ */

typedef struct other_thread {
    fixture f;
    tw_result poll, release, claim, start;
    uint64_t timer;
    record *r;
} other_thread;

static void *from_other_thread(void *arg) {
    other_thread *t = arg;
    tw_shard *claim = NULL;
    t->poll = tw_shard_poll(t->f.shard, NULL);
    t->release = tw_shard_release(t->f.shard);
    t->claim = tw_shard_claim(t->f.service, 0, &claim);
    tw_timer_spec spec = {0};
    spec.delay_ns = 2 * MS;
    spec.flags = TW_TIMER_ON_SHARD;
    t->start = tw_timer_schedule(t->f.service, &spec, on_fire, t->r, NULL, &t->timer);
    return NULL;
}

static void test_wrong_thread_and_wake(void) {
    fixture f = manual(1);
    record r[1];
    reset(r, 1);
    int ms = 0;
    CHECK_OK(tw_shard_next_timeout_ms(f.shard, &ms)); /* about to sleep for ever */
    CHECK(ms == -1);
    atomic_store(&wakes, 0);
    other_thread t = {f, TW_OK, TW_OK, TW_OK, TW_OK, 0, r};
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, from_other_thread, &t) == 0);
    CHECK(pthread_join(thread, NULL) == 0);
    CHECK(t.poll == TW_WRONG_THREAD && t.release == TW_WRONG_THREAD);
    CHECK(t.claim == TW_SHARD_CLAIMED && t.start == TW_OK);
    /* The start from the other thread woke the sleeping owner of shard 0. */
    CHECK(atomic_load(&wakes) >= 1 && atomic_load(&last_woken) == 0);
    CHECK(advance(f, 2 * MS) == 1);
    CHECK_OK(tw_timer_free(f.service, t.timer));
    done(f);
}

/* Another thread asks for a timer's deadline: only the owner may. */
typedef struct deadline_query {
    fixture f;
    uint64_t timer;
    tw_result deadline, due_in;
    uint64_t ns;
} deadline_query;

static void *query_from_other_thread(void *arg) {
    deadline_query *q = arg;
    q->deadline = tw_timer_deadline_ns(q->f.service, q->timer, &q->ns);
    q->due_in = tw_timer_due_in_ns(q->f.service, q->timer, &q->ns);
    return NULL;
}

/* The getters a loop needs: the service clock, a timer's deadline and time
 * left, and a saturating millisecond conversion. */
static void test_getters(void) {
    CHECK(tw_ms_to_ns(0) == 0);
    CHECK(tw_ms_to_ns(5000) == 5000 * MS);
    CHECK(tw_ms_to_ns(UINT64_MAX / 1000000) == UINT64_MAX / 1000000 * 1000000);
    CHECK(tw_ms_to_ns(UINT64_MAX / 1000000 + 1) == UINT64_MAX);
    CHECK(tw_ms_to_ns(UINT64_MAX) == UINT64_MAX);

    fixture f = manual(1);
    record r[1];
    reset(r, 1);
    uint64_t now = 1, timer = 0, ns = 0;
    CHECK_RESULT(tw_service_now_ns(NULL, &now), TW_NULL_POINTER);
    CHECK_RESULT(tw_service_now_ns(f.service, NULL), TW_NULL_POINTER);
    CHECK_OK(tw_service_now_ns(f.service, &now));
    CHECK(now == 0);
    CHECK_OK(tw_service_advance_clock(f.service, 1500 * MS / 1000));
    CHECK_OK(tw_service_now_ns(f.service, &now));
    CHECK(now == 1500 * MS / 1000);

    /* 1.5 ms + 5 ms = 6.5 ms, rounded up to tick 7. */
    CHECK_OK(tw_timer_start(f.service, tw_ms_to_ns(5), on_fire, r, &timer));
    CHECK_OK(tw_timer_deadline_ns(f.service, timer, &ns));
    CHECK(ns == 7 * MS);
    CHECK_OK(tw_timer_due_in_ns(f.service, timer, &ns));
    CHECK(ns == 5500 * MS / 1000);
    CHECK_RESULT(tw_timer_deadline_ns(f.service, timer, NULL), TW_NULL_POINTER);
    CHECK_RESULT(tw_timer_due_in_ns(NULL, timer, &ns), TW_NULL_POINTER);

    /* Only the owner of the timer's shard may ask. */
    deadline_query q = {f, timer, TW_OK, TW_OK, 42};
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, query_from_other_thread, &q) == 0);
    CHECK(pthread_join(thread, NULL) == 0);
    CHECK(q.deadline == TW_WRONG_THREAD && q.due_in == TW_WRONG_THREAD && q.ns == 42);

    /* A huge delay in milliseconds saturates to the farthest deadline. */
    CHECK_OK(tw_timer_restart(f.service, timer, tw_ms_to_ns(UINT64_MAX), NULL));
    CHECK_OK(tw_timer_due_in_ns(f.service, timer, &ns));
    CHECK(ns > UINT64_MAX / 2);
    CHECK_OK(tw_timer_restart(f.service, timer, tw_ms_to_ns(2), NULL));
    CHECK(advance(f, 2 * MS) == 0); /* 3.5 ms: due at tick 4 */
    CHECK_OK(tw_timer_due_in_ns(f.service, timer, &ns));
    CHECK(ns == 500 * MS / 1000);
    CHECK(advance(f, MS) == 1);
    /* Fired: not armed any more. */
    CHECK_OK(tw_timer_deadline_ns(f.service, timer, &ns));
    CHECK(ns == UINT64_MAX);
    CHECK_OK(tw_timer_due_in_ns(f.service, timer, &ns));
    CHECK(ns == UINT64_MAX);
    CHECK_OK(tw_timer_free(f.service, timer));
    CHECK_RESULT(tw_timer_deadline_ns(f.service, timer, &ns), TW_STALE_HANDLE);
    CHECK_RESULT(tw_timer_due_in_ns(f.service, timer, &ns), TW_STALE_HANDLE);
    done(f);
}

static atomic_int thread_fired;
static void count_fire(void *ctx, const tw_expiry *expiry) {
    (void)ctx;
    (void)expiry;
    atomic_fetch_add(&thread_fired, 1);
}

static void test_driver_threads(void) {
    tw_service_config config = {0};
    config.shards = 2;
    tw_service *service = NULL;
    CHECK_OK(tw_service_new(&config, &service));
    record r[1];
    reset(r, 1);
    uint64_t timer = 0;
    atomic_store(&thread_fired, 0);
    CHECK_OK(tw_timer_start(service, 5 * MS, count_fire, NULL, &timer));
    for (int i = 0; i < 2000 && atomic_load(&thread_fired) == 0; i++) {
        sleep_ms(1);
    }
    CHECK(atomic_load(&thread_fired) == 1);
    tw_stop stop = TW_STOP_CANCELLED;
    CHECK_OK(tw_timer_stop(service, timer, &stop));
    CHECK(stop == TW_STOP_FIRED);
    CHECK_OK(tw_timer_free(service, timer));

    /* stop_sync waits for a running callback. */
    r->action = ACT_SLEEP_50MS;
    CHECK_OK(tw_timer_start(service, MS, on_fire, r, &timer));
    while (atomic_load(&r->fired) == 0) {
        sleep_ms(1);
    }
    tw_stop_sync sync = TW_STOP_SYNC_CANCELLED;
    CHECK_OK(tw_timer_stop_sync(service, timer, &sync));
    CHECK(sync == TW_STOP_SYNC_FIRED);
    CHECK_OK(tw_timer_free(service, timer));

    /* Freeing a service with timers armed: none runs, every ctx is freed. */
    atomic_store(&heap_frees, 0);
    for (int i = 0; i < 100; i++) {
        tw_timer_spec spec = {0};
        spec.delay_ns = 3600000 * MS;
        spec.period_ns = (i % 2) ? MS * 1000 : 0;
        int *heap = malloc(sizeof *heap);
        CHECK(heap != NULL);
        CHECK_OK(tw_timer_schedule(service, &spec, count_fire, heap, free_heap, &timer));
    }
    int before = atomic_load(&thread_fired);
    tw_service_free(service);
    CHECK(atomic_load(&heap_frees) == 100);
    CHECK(atomic_load(&thread_fired) == before);
}

static void test_shutdown(void) {
    fixture f = manual(1);
    record r[1];
    reset(r, 1);
    uint64_t timer = 0, other = 0;
    tw_timer_spec spec = {0};
    spec.delay_ns = 5 * MS;
    CHECK_OK(tw_timer_schedule(f.service, &spec, on_fire, r, free_record, &timer));
    CHECK_OK(tw_timer_start(f.service, 5 * MS, on_fire, r, &other));
    CHECK_OK(tw_service_shutdown(f.service));
    CHECK_OK(tw_service_shutdown(f.service)); /* idempotent */
    /* The claimed shard is swept at its next poll. */
    CHECK_RESULT(tw_shard_poll(f.shard, NULL), TW_SHUTDOWN);
    CHECK(atomic_load(&r->freed) == 1 && atomic_load(&r->fired) == 0);
    tw_stop stop = TW_STOP_CANCELLED;
    CHECK_OK(tw_timer_stop(f.service, timer, &stop));
    CHECK(stop == TW_STOP_INACTIVE);
    tw_stop_sync sync = TW_STOP_SYNC_CANCELLED;
    CHECK_OK(tw_timer_stop_sync(f.service, timer, &sync));
    CHECK(sync == TW_STOP_SYNC_INACTIVE);
    bool armed = true;
    CHECK_OK(tw_timer_is_armed(f.service, timer, &armed));
    CHECK(!armed);
    CHECK_RESULT(tw_timer_restart(f.service, timer, MS, NULL), TW_SHUTDOWN);
    CHECK_RESULT(tw_timer_start(f.service, MS, on_fire, r, &other), TW_SHUTDOWN);
    CHECK_RESULT(tw_timer_schedule(f.service, &spec, on_fire, r, free_record, &other),
                 TW_SHUTDOWN);
    CHECK(atomic_load(&r->freed) == 2);
    tw_shard *again = NULL;
    CHECK_RESULT(tw_shard_claim(f.service, 0, &again), TW_SHUTDOWN);
    CHECK_OK(tw_timer_free(f.service, timer));
    done(f);

    /* Freeing the service while a shard is still claimed: the owner's next
     * poll drops the rest, and the release frees the claim. */
    f = manual(1);
    reset(r, 1);
    CHECK_OK(tw_timer_schedule(f.service, &spec, on_fire, r, free_record, &timer));
    tw_service_free(f.service);
    CHECK(atomic_load(&r->freed) == 0);
    CHECK_RESULT(tw_shard_poll(f.shard, NULL), TW_SHUTDOWN);
    CHECK(atomic_load(&r->freed) == 1 && atomic_load(&r->fired) == 0);
    CHECK_OK(tw_shard_release(f.shard));

    /* ... or its release does. */
    f = manual(1);
    reset(r, 1);
    CHECK_OK(tw_timer_schedule(f.service, &spec, on_fire, r, free_record, &timer));
    tw_service_free(f.service);
    CHECK_OK(tw_shard_release(f.shard));
    CHECK(atomic_load(&r->freed) == 1 && atomic_load(&r->fired) == 0);
}

/* ---- the single-threaded wheel ----------------------------------------- */

typedef struct wheel_log {
    const tw_wheel *wheel;
    uintptr_t order[64];
    uint64_t at[64];
    size_t n;
    int action;
    uint64_t victim;
    tw_result seen[4];
} wheel_log;

static void on_wheel(void *ctx, uint64_t key, uint64_t deadline, void *payload) {
    wheel_log *log = ctx;
    uint64_t now = 0;
    CHECK(key != 0);
    CHECK_OK(tw_wheel_now(log->wheel, &now));
    CHECK(now == deadline);
    log->order[log->n] = (uintptr_t)payload;
    log->at[log->n] = deadline;
    log->n++;
    if (log->action == 1) {
        uint64_t k = 0;
        log->action = 0;
        /* Schedule (for the tick being processed: due to the next
         * advance), cancel, reschedule: all allowed. Advancing and
         * clearing are not. */
        log->seen[0] = tw_wheel_schedule(log->wheel, now, (void *)(uintptr_t)99, &k);
        log->seen[1] = tw_wheel_cancel(log->wheel, log->victim, NULL);
        log->seen[2] = tw_wheel_advance(log->wheel, now + 1, 1, on_wheel, log, NULL, NULL);
        log->seen[3] = tw_wheel_clear(log->wheel, on_wheel, log);
        tw_wheel_free((tw_wheel *)log->wheel); /* refused: does nothing */
    }
}

static void free_payload(void *ctx, uint64_t key, uint64_t deadline, void *payload) {
    (void)key;
    (void)deadline;
    free(payload);
    (*(int *)ctx)++;
}

static void test_wheel(void) {
    tw_wheel *wheel = NULL;
    wheel_log log;
    memset(&log, 0, sizeof log);
    uint64_t key = 0, now = 0, ticks = 0, keys[10];
    size_t len = 0, expired = 0;
    bool complete = true;
    void *payload = NULL;

    CHECK_OK(tw_wheel_new(1000, &wheel));
    log.wheel = wheel;
    CHECK_OK(tw_wheel_now(wheel, &now));
    CHECK(now == 1000);
    CHECK_OK(tw_wheel_ticks_to_next_event(wheel, 77, &ticks));
    CHECK(ticks == 77);
    /* Nothing armed and "cap away" look alike there; tw_wheel_next_event
     * tells them apart. */
    bool armed = true;
    CHECK_OK(tw_wheel_next_event(wheel, 77, &ticks, &armed));
    CHECK(ticks == 77 && !armed);
    CHECK_RESULT(tw_wheel_next_event(wheel, 77, NULL, &armed), TW_NULL_POINTER);
    CHECK_RESULT(tw_wheel_next_event(wheel, 77, &ticks, NULL), TW_NULL_POINTER);
    CHECK_OK(tw_wheel_schedule(wheel, 1077, NULL, &key));
    CHECK_OK(tw_wheel_next_event(wheel, 77, &ticks, &armed));
    CHECK(ticks == 77 && armed);
    /* Exact, not the next level boundary (5000 ticks sit on level 2). */
    CHECK_OK(tw_wheel_reschedule(wheel, key, 6000));
    CHECK_OK(tw_wheel_next_event(wheel, UINT64_MAX, &ticks, &armed));
    CHECK(ticks == 5000 && armed);
    CHECK_OK(tw_wheel_cancel(wheel, key, NULL));
    CHECK_OK(tw_wheel_next_event(wheel, UINT64_MAX, &ticks, &armed));
    CHECK(ticks == UINT64_MAX && !armed);
    for (uintptr_t i = 0; i < 10; i++) {
        CHECK_OK(tw_wheel_schedule(wheel, 1005, (void *)(i + 1), &keys[i]));
    }
    CHECK_OK(tw_wheel_len(wheel, &len));
    CHECK(len == 10);
    CHECK_OK(tw_wheel_ticks_to_next_event(wheel, 77, &ticks));
    CHECK(ticks == 5);
    CHECK_OK(tw_wheel_next_event(wheel, 77, &ticks, &armed));
    CHECK(ticks == 5 && armed);
    /* The time base is the wheel's own tick: 5 from tw_wheel_now. */
    CHECK_OK(tw_wheel_now(wheel, &now));
    CHECK(now + ticks == 1005);

    /* Capped advance: three now, the rest later, in arm order. */
    CHECK_OK(tw_wheel_advance(wheel, 2000, 3, on_wheel, &log, &expired, &complete));
    CHECK(expired == 3 && !complete);
    CHECK_OK(tw_wheel_now(wheel, &now));
    CHECK(now == 1005);
    CHECK_OK(tw_wheel_advance(wheel, 2000, 100, on_wheel, &log, &expired, &complete));
    CHECK(expired == 7 && complete);
    for (size_t i = 0; i < 10; i++) {
        CHECK(log.order[i] == i + 1 && log.at[i] == 1005);
    }
    CHECK_OK(tw_wheel_now(wheel, &now));
    CHECK(now == 2000);
    CHECK_RESULT(tw_wheel_cancel(wheel, keys[0], &payload), TW_STALE_HANDLE);
    CHECK_RESULT(tw_wheel_reschedule(wheel, keys[0], 3000), TW_STALE_HANDLE);
    CHECK_RESULT(tw_wheel_cancel(wheel, 0, NULL), TW_STALE_HANDLE);
    CHECK_RESULT(tw_wheel_advance(wheel, 3000, 1, NULL, NULL, NULL, NULL), TW_NULL_POINTER);
    CHECK_RESULT(tw_wheel_clear(wheel, NULL, NULL), TW_NULL_POINTER);

    /* Ranges, reschedule, cancel with payload. */
    CHECK_RESULT(tw_wheel_schedule_in_range(wheel, 2100, 2050, NULL, &key), TW_INVALID_RANGE);
    CHECK_OK(tw_wheel_schedule_in_range(wheel, 2001, 2100, (void *)(uintptr_t)7, &key));
    CHECK_OK(tw_wheel_ticks_to_next_event(wheel, UINT64_MAX, &ticks));
    CHECK(ticks >= 1 && ticks <= 100);
    CHECK(((2000 + ticks) % 64) == 0); /* the roundest tick in the window */
    CHECK_OK(tw_wheel_reschedule(wheel, key, 2500));
    CHECK_OK(tw_wheel_ticks_to_next_event(wheel, UINT64_MAX, &ticks));
    CHECK(ticks == 500);
    CHECK_OK(tw_wheel_cancel(wheel, key, &payload));
    CHECK(payload == (void *)(uintptr_t)7);
    CHECK_RESULT(tw_wheel_cancel(wheel, key, &payload), TW_STALE_HANDLE);

    /* A callback that changes the wheel it is called from. */
    log.n = 0;
    log.action = 1;
    CHECK_OK(tw_wheel_schedule(wheel, 2010, (void *)(uintptr_t)1, &key));
    CHECK_OK(tw_wheel_schedule(wheel, 2020, (void *)(uintptr_t)2, &log.victim));
    CHECK_OK(tw_wheel_advance(wheel, 3000, 100, on_wheel, &log, &expired, &complete));
    CHECK(log.seen[0] == TW_OK && log.seen[1] == TW_OK);
    CHECK(log.seen[2] == TW_REENTRANT && log.seen[3] == TW_REENTRANT);
    /* 99, armed for tick 2010 while this advance processed it, waits for
     * the next advance, which fires it first, on its tick (CONTRACT 1). */
    CHECK(expired == 1 && !complete && log.order[0] == 1);
    CHECK_OK(tw_wheel_now(wheel, &now));
    CHECK(now == 2010);
    CHECK_OK(tw_wheel_advance(wheel, 3000, 100, on_wheel, &log, &expired, &complete));
    CHECK(expired == 1 && complete && log.order[1] == 99);
    CHECK(log.at[1] == 2010);

    /* The end of time: saturates, never wraps. */
    CHECK_OK(tw_wheel_schedule(wheel, UINT64_MAX, (void *)(uintptr_t)5, &key));
    CHECK_OK(tw_wheel_advance(wheel, UINT64_MAX - 1, 10, on_wheel, &log, &expired, NULL));
    CHECK(expired == 0);
    CHECK_OK(tw_wheel_advance(wheel, UINT64_MAX, 10, on_wheel, &log, &expired, NULL));
    CHECK(expired == 1);

    /* Clear hands back the payloads so they can be freed. */
    int freed = 0;
    CHECK_OK(tw_wheel_free != NULL ? TW_OK : TW_PANIC);
    tw_wheel_free(wheel);
    CHECK_OK(tw_wheel_new(0, &wheel));
    for (int i = 0; i < 20; i++) {
        CHECK_OK(tw_wheel_schedule(wheel, (uint64_t)i * 1000, malloc(8), &key));
    }
    CHECK_OK(tw_wheel_clear(wheel, free_payload, &freed));
    CHECK(freed == 20);
    CHECK_OK(tw_wheel_len(wheel, &len));
    CHECK(len == 0);
    tw_wheel_free(wheel);
}

/* Relative scheduling, chosen ticks, deadlines and range reschedules: one
 * call per operation for C callers. */
static void test_wheel_relative_and_ranges(void) {
    tw_wheel *wheel = NULL;
    wheel_log log;
    memset(&log, 0, sizeof log);
    uint64_t a = 0, b = 0, c = 0, tick = 0, tick2 = 0;
    size_t expired = 0;

    CHECK_OK(tw_wheel_new(5000, &wheel));
    log.wheel = wheel;
    CHECK_OK(tw_wheel_schedule_after(wheel, 100, (void *)(uintptr_t)1, &a));
    CHECK_OK(tw_wheel_deadline(wheel, a, &tick));
    CHECK(tick == 5100);
    CHECK_OK(tw_wheel_reschedule_after(wheel, a, 300));
    CHECK_OK(tw_wheel_deadline(wheel, a, &tick));
    CHECK(tick == 5300);
    CHECK_RESULT(tw_wheel_deadline(wheel, a, NULL), TW_NULL_POINTER);
    CHECK_RESULT(tw_wheel_deadline(wheel, 0, &tick), TW_STALE_HANDLE);
    /* A huge delay saturates at the last tick instead of wrapping. */
    CHECK_OK(tw_wheel_schedule_after(wheel, UINT64_MAX, (void *)(uintptr_t)9, &c));
    CHECK_OK(tw_wheel_deadline(wheel, c, &tick));
    CHECK(tick == UINT64_MAX);
    CHECK_OK(tw_wheel_cancel(wheel, c, NULL));

    /* The chosen tick is reported, and is the roundest in the window. */
    CHECK_RESULT(tw_wheel_schedule_in_range_at(wheel, 6000, 5999, NULL, &b, &tick),
                 TW_INVALID_RANGE);
    CHECK_OK(tw_wheel_schedule_in_range_at(wheel, 5001, 6000, (void *)(uintptr_t)2, &b, &tick));
    CHECK(tick == 5120); /* 5120 = 5 * 1024: most trailing zeros in 5001..6000 */
    CHECK_OK(tw_wheel_deadline(wheel, b, &tick2));
    CHECK(tick2 == tick);
    CHECK_OK(tw_wheel_cancel(wheel, b, NULL));
    CHECK_OK(tw_wheel_schedule_in_range_after(wheel, 1, 1000, (void *)(uintptr_t)2, &b, &tick));
    CHECK(tick == 5120);
    CHECK_RESULT(tw_wheel_schedule_in_range_after(wheel, 9, 8, NULL, &c, NULL), TW_INVALID_RANGE);

    /* Range reschedule: kept when already inside the window, else moved to
     * the window's roundest tick. */
    CHECK_OK(tw_wheel_reschedule_in_range(wheel, a, 5200, 5400, &tick));
    CHECK(tick == 5300);
    CHECK_OK(tw_wheel_reschedule_in_range_after(wheel, a, 200, 400, NULL));
    CHECK_OK(tw_wheel_deadline(wheel, a, &tick));
    CHECK(tick == 5300);
    CHECK_OK(tw_wheel_reschedule_in_range(wheel, a, 5400, 5500, &tick));
    CHECK(tick == 5440); /* 5440 = 85 * 64 */
    CHECK_OK(tw_wheel_reschedule_in_range_after(wheel, a, 600, 700, &tick));
    CHECK(tick == 5632); /* 5632 = 11 * 512 */
    CHECK_RESULT(tw_wheel_reschedule_in_range(wheel, a, 7000, 6000, &tick), TW_INVALID_RANGE);
    CHECK_RESULT(tw_wheel_reschedule_in_range_after(wheel, a, 7, 6, NULL), TW_INVALID_RANGE);
    CHECK_OK(tw_wheel_deadline(wheel, a, &tick));
    CHECK(tick == 5632);

    /* Both fire at the reported ticks, then their keys are stale. */
    CHECK_OK(tw_wheel_advance(wheel, 6000, 100, on_wheel, &log, &expired, NULL));
    CHECK(expired == 2 && log.order[0] == 2 && log.at[0] == 5120);
    CHECK(log.order[1] == 1 && log.at[1] == 5632);
    CHECK_RESULT(tw_wheel_reschedule_after(wheel, a, 1), TW_STALE_HANDLE);
    CHECK_RESULT(tw_wheel_reschedule_in_range_after(wheel, a, 1, 2, NULL), TW_STALE_HANDLE);
    CHECK_RESULT(tw_wheel_reschedule_in_range(wheel, b, 6001, 6002, NULL), TW_STALE_HANDLE);
    CHECK_RESULT(tw_wheel_deadline(wheel, b, &tick), TW_STALE_HANDLE);
    CHECK_RESULT(tw_wheel_schedule_after(NULL, 1, NULL, &a), TW_NULL_POINTER);
    CHECK_RESULT(tw_wheel_schedule_after(wheel, 1, NULL, NULL), TW_NULL_POINTER);
    tw_wheel_free(wheel);
}

/* tw_wheel_advance_keep: a fired timer stays under its key and is armed
 * again in place; cancel frees it; clear hands back held payloads too. */
typedef struct {
    const tw_wheel *wheel;
    uint64_t key;
    int fired;
    int rearms;
    tw_result seen;
} keep_log;

static void on_keep(void *ctx, uint64_t key, uint64_t deadline, void *payload) {
    keep_log *log = ctx;
    uint64_t tick = 0;
    CHECK(key == log->key && payload == (void *)(uintptr_t)42);
    /* Held: the key is valid but the timer is not armed. */
    CHECK_RESULT(tw_wheel_deadline(log->wheel, key, &tick), TW_STALE_HANDLE);
    log->fired++;
    if (log->rearms > 0) {
        log->rearms--;
        log->seen = tw_wheel_reschedule_after(log->wheel, key, 5);
        CHECK_OK(tw_wheel_deadline(log->wheel, key, &tick));
        CHECK(tick == deadline + 5);
    }
}

static void leave_held(void *ctx, uint64_t key, uint64_t deadline, void *payload) {
    (void)ctx;
    (void)key;
    (void)deadline;
    (void)payload;
}

static void test_wheel_keep(void) {
    tw_wheel *wheel = NULL;
    keep_log log;
    memset(&log, 0, sizeof log);
    uint64_t tick = 0;
    size_t len = 9, expired = 0;
    bool complete = false;
    void *payload = NULL;
    int freed = 0;

    CHECK_OK(tw_wheel_new(100, &wheel));
    log.wheel = wheel;
    log.rearms = 2;
    CHECK_OK(tw_wheel_schedule_after(wheel, 5, (void *)(uintptr_t)42, &log.key));
    CHECK_RESULT(tw_wheel_advance_keep(wheel, 200, 1, NULL, NULL, NULL, NULL), TW_NULL_POINTER);
    /* Fires at 105, re-armed to 110 and 115 in place; then left held. */
    CHECK_OK(tw_wheel_advance_keep(wheel, 200, 100, on_keep, &log, &expired, &complete));
    CHECK(expired == 3 && complete && log.fired == 3 && log.seen == TW_OK);
    CHECK_OK(tw_wheel_len(wheel, &len));
    CHECK(len == 0);
    /* Armed again from outside a callback, same key. */
    CHECK_OK(tw_wheel_reschedule(wheel, log.key, 250));
    CHECK_OK(tw_wheel_deadline(wheel, log.key, &tick));
    CHECK(tick == 250);
    CHECK_OK(tw_wheel_len(wheel, &len));
    CHECK(len == 1);
    CHECK_OK(tw_wheel_advance_keep(wheel, 300, 100, on_keep, &log, &expired, NULL));
    CHECK(expired == 1 && log.fired == 4);
    /* Cancel frees the held timer and returns its payload. */
    CHECK_OK(tw_wheel_cancel(wheel, log.key, &payload));
    CHECK(payload == (void *)(uintptr_t)42);
    CHECK_RESULT(tw_wheel_cancel(wheel, log.key, NULL), TW_STALE_HANDLE);
    CHECK_RESULT(tw_wheel_reschedule_after(wheel, log.key, 1), TW_STALE_HANDLE);

    /* Clear frees held and armed timers alike. */
    uint64_t k = 0;
    CHECK_OK(tw_wheel_schedule_after(wheel, 1, malloc(8), &k));
    CHECK_OK(tw_wheel_schedule_after(wheel, 1000, malloc(8), &k));
    CHECK_OK(tw_wheel_advance_keep(wheel, 301, 100, leave_held, NULL, &expired, NULL));
    CHECK(expired == 1);
    CHECK_OK(tw_wheel_clear(wheel, free_payload, &freed));
    CHECK(freed == 2);
    tw_wheel_free(wheel);
}

/* tw_wheel_advance_to_next: time jumps to the next event (at most cap ticks
 * ahead) and what is due there fires, in one call. */
/* CONTRACT 1, "due now": a timer armed for a tick the current advance or
 * poll has reached fires in the next one, not in this one and not a tick
 * later. */
typedef struct {
    const tw_wheel *wheel;
    int fired;
    uint64_t at[8];
} rearm_log;

static void rearm_for_now(void *ctx, uint64_t key, uint64_t deadline, void *payload) {
    rearm_log *log = ctx;
    (void)payload;
    log->at[log->fired++] = deadline;
    if (log->fired < 4) {
        CHECK_OK(tw_wheel_reschedule_after(log->wheel, key, 0)); /* held: armed again */
    }
}

static void test_due_now_is_the_next_advance(void) {
    /* The wheel: a callback re-arming its own (held) timer for now fires
     * once per advance; an uncapped advance returns. */
    tw_wheel *wheel = NULL;
    rearm_log log = {0};
    uint64_t key = 0, now = 0;
    size_t expired = 0;
    bool complete = true;
    CHECK_OK(tw_wheel_new(0, &wheel));
    log.wheel = wheel;
    CHECK_OK(tw_wheel_schedule(wheel, 7, NULL, &key));
    for (int round = 1; round <= 4; round++) {
        CHECK_OK(tw_wheel_advance_keep(wheel, 100, SIZE_MAX, rearm_for_now, &log, &expired,
                                       &complete));
        CHECK(expired == 1 && log.fired == round);
        CHECK(complete == (round == 4));
        CHECK_OK(tw_wheel_now(wheel, &now));
        CHECK(now == (round == 4 ? 100 : 7));
    }
    for (int i = 0; i < 4; i++) {
        CHECK(log.at[i] == 7); /* on its tick, never a tick later */
    }
    CHECK_OK(tw_wheel_cancel(wheel, key, NULL));
    /* Armed for now between advances: the next advance fires it. */
    CHECK_OK(tw_wheel_schedule_after(wheel, 0, NULL, &key));
    CHECK_OK(tw_wheel_advance(wheel, 100, SIZE_MAX, leave_held, NULL, &expired, &complete));
    CHECK(expired == 1 && complete);
    tw_wheel_free(wheel);

    /* The service: a zero delay started between polls fires at the next
     * poll with no tick of the clock; re-armed for now from its callback,
     * it fires once per poll. */
    fixture f = manual(1);
    record r[1];
    reset(r, 1);
    uint64_t timer = 0;
    CHECK(advance(f, 3 * MS) == 0);
    CHECK_OK(tw_timer_start(f.service, 0, on_fire, &r[0], &timer));
    CHECK(advance(f, 0) == 1 && r[0].last.deadline_tick == 3);
    CHECK_OK(tw_timer_free(f.service, timer));
    reset(r, 1);
    r[0].action = ACT_RESTART_SELF_NOW;
    r[0].service = f.service;
    CHECK_OK(tw_timer_start(f.service, 0, on_fire, &r[0], &timer));
    for (int round = 1; round <= 4; round++) {
        CHECK(advance(f, 0) == 1 && r[0].seen == TW_OK);
    }
    CHECK(advance(f, 0) == 0); /* the fourth run did not re-arm */
    CHECK(atomic_load(&r[0].fired) == 4 && r[0].last.deadline_tick == 3);
    CHECK_OK(tw_timer_free(f.service, timer));
    done(f);
}

/* Collect-then-run on the wheel and on a claimed shard: the loop takes the
 * due timers out without anything being called, then runs its own handlers,
 * which stop, restart and free other collected timers. */
static void test_collect_then_run(void) {
    tw_wheel *wheel = NULL;
    tw_wheel_due due[8];
    size_t count = 0;
    bool complete = false;
    uint64_t k[4] = {0}, tick = 0, now = 0;
    CHECK_OK(tw_wheel_new(0, &wheel));
    CHECK_OK(tw_wheel_schedule(wheel, 5, (void *)(uintptr_t)1, &k[0]));
    CHECK_OK(tw_wheel_schedule(wheel, 3, (void *)(uintptr_t)2, &k[1]));
    CHECK_OK(tw_wheel_schedule(wheel, 5, (void *)(uintptr_t)3, &k[2]));
    CHECK_OK(tw_wheel_schedule(wheel, 50, (void *)(uintptr_t)4, &k[3]));
    CHECK_RESULT(tw_wheel_collect(wheel, 10, false, NULL, 1, &count, NULL), TW_NULL_POINTER);
    /* A cap of 2: deadline order, arm order within a tick; resumable. */
    CHECK_OK(tw_wheel_collect(wheel, 10, false, due, 2, &count, &complete));
    CHECK(count == 2 && !complete);
    CHECK(due[0].key == k[1] && due[0].deadline_tick == 3 && due[0].late_ticks == 7);
    CHECK(due[1].key == k[0] && due[1].payload == (void *)(uintptr_t)1);
    CHECK_OK(tw_wheel_collect(wheel, 10, false, due + 2, 6, &count, &complete));
    CHECK(count == 1 && complete && due[2].key == k[2] && due[2].deadline_tick == 5);
    CHECK_OK(tw_wheel_now(wheel, &now));
    CHECK(now == 10);
    /* The handlers: collected keys are stale (freed), never another timer;
     * a zero delay armed now is collected by the next call, once. */
    CHECK_RESULT(tw_wheel_cancel(wheel, due[2].key, NULL), TW_STALE_HANDLE);
    CHECK_RESULT(tw_wheel_reschedule_after(wheel, due[0].key, 1), TW_STALE_HANDLE);
    CHECK_OK(tw_wheel_schedule_after(wheel, 0, (void *)(uintptr_t)5, &k[0]));
    CHECK_OK(tw_wheel_collect(wheel, 10, true, due, 8, &count, &complete));
    CHECK(count == 1 && complete && due[0].key == k[0] && due[0].late_ticks == 0);
    /* Kept: the key stays valid (held) until re-armed or cancelled. */
    CHECK_RESULT(tw_wheel_deadline(wheel, k[0], &tick), TW_STALE_HANDLE);
    CHECK_OK(tw_wheel_reschedule_after(wheel, k[0], 0));
    CHECK_OK(tw_wheel_collect(wheel, 10, true, due, 8, &count, &complete));
    CHECK(count == 1 && due[0].key == k[0]);
    CHECK_OK(tw_wheel_cancel(wheel, k[0], NULL));
    CHECK_OK(tw_wheel_collect(wheel, 10, true, due, 8, &count, &complete));
    CHECK(count == 0 && complete);
    CHECK_OK(tw_wheel_cancel(wheel, k[3], NULL));
    tw_wheel_free(wheel);

    /* The shard: collected without their callbacks, then handled. */
    fixture f = manual(1);
    record r[4];
    reset(r, 4);
    uint64_t t[4] = {0};
    tw_expiry got[8];
    size_t n = 0;
    bool found = false;
    CHECK_OK(tw_timer_start(f.service, 2 * MS, on_fire, &r[0], &t[0]));
    CHECK_OK(tw_timer_start(f.service, 1 * MS, on_fire, &r[1], &t[1]));
    CHECK_OK(tw_timer_start(f.service, 2 * MS, on_fire, &r[2], &t[2]));
    CHECK_OK(tw_timer_start_periodic(f.service, 2 * MS, on_fire, &r[3], &t[3]));
    CHECK_OK(tw_service_advance_clock(f.service, 2 * MS));
    for (;;) {
        CHECK_OK(tw_shard_poll_due(f.shard, false, &got[n], &found));
        if (!found) {
            break;
        }
        n++;
    }
    CHECK(n == 4);
    CHECK(got[0].timer == t[1] && got[0].deadline_tick == 1 && got[0].poll_tick == 2);
    CHECK(got[1].timer == t[0] && got[2].timer == t[2] && got[3].timer == t[3]);
    for (int i = 0; i < 4; i++) {
        CHECK(atomic_load(&r[i].fired) == 0); /* nothing was called */
    }
    /* Handling t[1]: stop t[0] (collected: fired), restart t[2] for now,
     * free t[0]; the periodic one is armed for its next period. */
    tw_stop stop = TW_STOP_CANCELLED;
    tw_restart restart = TW_RESTART_MOVED;
    CHECK_OK(tw_timer_stop(f.service, t[0], &stop));
    CHECK(stop == TW_STOP_FIRED);
    CHECK_OK(tw_timer_restart(f.service, t[2], 0, &restart));
    CHECK(restart == TW_RESTART_REARMED);
    CHECK_OK(tw_timer_free(f.service, t[0]));
    CHECK_RESULT(tw_timer_stop(f.service, t[0], &stop), TW_STALE_HANDLE);
    CHECK_OK(tw_timer_deadline_ns(f.service, t[3], &tick));
    CHECK(tick == 4 * MS);
    /* The next pass hands out the restarted one, and runs it when asked. */
    CHECK_OK(tw_shard_poll_due(f.shard, true, &got[0], &found));
    CHECK(found && got[0].timer == t[2] && got[0].deadline_tick == 2);
    CHECK(atomic_load(&r[2].fired) == 1);
    CHECK_OK(tw_shard_poll_due(f.shard, true, &got[0], &found));
    CHECK(!found);
    CHECK(advance(f, 0) == 0); /* nothing handed out fires again */
    CHECK(advance(f, 2 * MS) == 1 && atomic_load(&r[3].fired) == 1);
    for (int i = 1; i < 4; i++) {
        CHECK_OK(tw_timer_free(f.service, t[i]));
    }
    done(f);
}

/* A moved timer counts as newly armed (CONTRACT 5): on its new tick it
 * fires after every timer already armed for that tick, whether it came from
 * a later tick (l in the same wheel bucket, f from a far level), an earlier
 * one (e), that same tick (z, armed for it before the others), or had fired
 * (h: held on the wheel, re-armed on the service). Each move function, with
 * the tick on level 0, 1 and 2, the moves made at the start or after time
 * moved (a armed before, b after). The range moves keep z, already in its
 * window, with its place. */
static const uint64_t move_cases[][5] = {
    /* tick, earlier, later, far, the tick the moves are made at */
    {40, 20, 50, 5000, 10},
    {200, 130, 203, 9000, 0},
    {200, 130, 203, 9000, 100},
    {5000, 4200, 5001, 300000, 0},
    {5000, 4200, 5001, 300000, 4100},
};
#define MOVE_CASES (sizeof move_cases / sizeof move_cases[0])

static char moved_log[16];
static size_t moved_n;
static void log_name(void *ctx, const tw_expiry *expiry) {
    (void)expiry;
    CHECK(moved_n < sizeof moved_log - 1);
    moved_log[moved_n++] = *(const char *)ctx;
    moved_log[moved_n] = '\0';
}

static void test_moved_timers_fire_after_those_already_armed(void) {
    /* The wheel: tw_wheel_reschedule, _after, _in_range, _in_range_after. */
    for (int how = 0; how < 4; how++) {
        for (size_t c = 0; c < MOVE_CASES; c++) {
            uint64_t t = move_cases[c][0], pause = move_cases[c][4];
            tw_wheel *wheel = NULL;
            wheel_log log;
            memset(&log, 0, sizeof log);
            CHECK_OK(tw_wheel_new(0, &wheel));
            log.wheel = wheel;
            /* z, e, l, f, h, a; then b */
            const char names[] = "zelfhab";
            const uint64_t at[] = {t, move_cases[c][1], move_cases[c][2], move_cases[c][3], pause, t, t};
            uint64_t k[7] = {0};
            for (int i = 0; i < 6; i++) {
                CHECK_OK(tw_wheel_schedule(wheel, at[i], (void *)(uintptr_t)names[i], &k[i]));
            }
            size_t expired = 0;
            bool complete = false;
            CHECK_OK(tw_wheel_advance_keep(wheel, pause, SIZE_MAX, on_wheel, &log, &expired,
                                           &complete));
            CHECK(expired == 1 && complete && log.order[0] == 'h');
            CHECK_OK(tw_wheel_schedule(wheel, t, (void *)(uintptr_t)'b', &k[6]));
            const int moved[] = {2, 1, 0, 3, 4}; /* l, e, z, f, h */
            for (int m = 0; m < 5; m++) {
                uint64_t key = k[moved[m]], tick = 0;
                switch (how) {
                case 0: CHECK_OK(tw_wheel_reschedule(wheel, key, t)); break;
                case 1: CHECK_OK(tw_wheel_reschedule_after(wheel, key, t - pause)); break;
                case 2:
                    CHECK_OK(tw_wheel_reschedule_in_range(wheel, key, t, t, &tick));
                    CHECK(tick == t);
                    break;
                default:
                    CHECK_OK(tw_wheel_reschedule_in_range_after(wheel, key, t - pause, t - pause,
                                                                &tick));
                    CHECK(tick == t);
                    break;
                }
            }
            log.n = 0;
            CHECK_OK(tw_wheel_advance(wheel, t - 1, SIZE_MAX, on_wheel, &log, &expired, NULL));
            CHECK(expired == 0);
            CHECK_OK(tw_wheel_advance(wheel, t, SIZE_MAX, on_wheel, &log, &expired, &complete));
            CHECK(expired == 7 && complete);
            char order[8] = {0};
            for (size_t i = 0; i < 7; i++) {
                CHECK(log.at[i] == t);
                order[i] = (char)log.order[i];
            }
            const char *want = how < 2 ? "ablezfh" : "zablefh";
            if (strcmp(order, want) != 0) {
                fprintf(stderr, "move %d onto tick %llu at %llu: fired %s, expected %s\n", how,
                        (unsigned long long)t, (unsigned long long)pause, order, want);
                abort();
            }
            tw_wheel_free(wheel);
        }
    }

    /* The service: tw_timer_restart by the owner between polls. */
    for (size_t c = 0; c < MOVE_CASES; c++) {
        uint64_t t = move_cases[c][0], pause = move_cases[c][4];
        fixture f = manual(1);
        static char names[] = "zelfhab";
        const uint64_t at[] = {t, move_cases[c][1], move_cases[c][2], move_cases[c][3], pause, t};
        uint64_t timers[7] = {0};
        for (int i = 0; i < 6; i++) {
            CHECK_OK(tw_timer_start(f.service, at[i] * MS, log_name, &names[i], &timers[i]));
        }
        moved_n = 0;
        CHECK(advance(f, pause * MS) == 1 && strcmp(moved_log, "h") == 0);
        moved_n = 0;
        CHECK_OK(tw_timer_start(f.service, (t - pause) * MS, log_name, &names[6], &timers[6]));
        const int moved[] = {2, 1, 0, 3, 4}; /* l, e, z, f, h */
        for (int m = 0; m < 5; m++) {
            tw_restart outcome = TW_RESTART_REARMED;
            CHECK_OK(tw_timer_restart(f.service, timers[moved[m]], (t - pause) * MS, &outcome));
            CHECK(outcome == (moved[m] == 4 ? TW_RESTART_REARMED : TW_RESTART_MOVED));
        }
        CHECK(advance(f, (t - pause - 1) * MS) == 0);
        CHECK(advance(f, 1 * MS) == 7);
        if (strcmp(moved_log, "ablezfh") != 0) {
            fprintf(stderr, "restart onto tick %llu at %llu: fired %s, expected ablezfh\n",
                    (unsigned long long)t, (unsigned long long)pause, moved_log);
            abort();
        }
        for (int i = 0; i < 7; i++) {
            CHECK_OK(tw_timer_free(f.service, timers[i]));
        }
        done(f);
    }
}

static void test_wheel_advance_to_next(void) {
    tw_wheel *wheel = NULL;
    wheel_log log;
    memset(&log, 0, sizeof log);
    uint64_t tick = 0, k[3] = {0, 0, 0};
    size_t expired = 9;
    bool complete = false;

    CHECK_OK(tw_wheel_new(0, &wheel));
    log.wheel = wheel;
    CHECK_OK(tw_wheel_schedule(wheel, 10, (void *)(uintptr_t)1, &k[0]));
    CHECK_OK(tw_wheel_schedule(wheel, 10, (void *)(uintptr_t)2, &k[1]));
    CHECK_OK(tw_wheel_schedule(wheel, 25, (void *)(uintptr_t)3, &k[2]));

    /* Errors move no time. */
    CHECK_RESULT(tw_wheel_advance_to_next(NULL, 100, false, 10, on_wheel, &log, &tick, NULL, NULL),
                 TW_NULL_POINTER);
    CHECK_RESULT(tw_wheel_advance_to_next(wheel, 100, false, 10, NULL, NULL, &tick, NULL, NULL),
                 TW_NULL_POINTER);
    CHECK_OK(tw_wheel_now(wheel, &tick));
    CHECK(tick == 0);

    /* A cap short of the next event: time moves by the cap, nothing fires. */
    CHECK_OK(tw_wheel_advance_to_next(wheel, 4, false, 10, on_wheel, &log, &tick, &expired,
                                      &complete));
    CHECK(tick == 4 && expired == 0 && complete && log.n == 0);

    /* The max cap stops it inside the tick; the next call finishes it. */
    CHECK_OK(tw_wheel_advance_to_next(wheel, 100, false, 1, on_wheel, &log, &tick, &expired,
                                      &complete));
    CHECK(tick == 10 && expired == 1 && !complete && log.n == 1 && log.order[0] == 1);
    CHECK_OK(tw_wheel_advance_to_next(wheel, 100, false, 10, on_wheel, &log, &tick, &expired,
                                      &complete));
    CHECK(tick == 10 && expired == 1 && complete && log.n == 2 && log.order[1] == 2);
    CHECK_RESULT(tw_wheel_cancel(wheel, k[0], NULL), TW_STALE_HANDLE);

    /* keep: the fired timer stays under its key and can be armed again. */
    CHECK_OK(tw_wheel_advance_to_next(wheel, 100, true, 10, on_wheel, &log, &tick, &expired,
                                      &complete));
    CHECK(tick == 25 && expired == 1 && complete && log.n == 3 && log.at[2] == 25);
    CHECK_OK(tw_wheel_reschedule_after(wheel, k[2], 5));
    CHECK_OK(tw_wheel_advance_to_next(wheel, 100, true, 10, on_wheel, &log, NULL, NULL, NULL));
    CHECK(log.n == 4 && log.at[3] == 30);

    /* Nothing armed: time moves by the cap; a cap of 0 stays put. */
    CHECK_OK(tw_wheel_cancel(wheel, k[2], NULL));
    CHECK_OK(tw_wheel_advance_to_next(wheel, 70, false, 10, on_wheel, &log, &tick, &expired,
                                      &complete));
    CHECK(tick == 100 && expired == 0 && complete);
    CHECK_OK(tw_wheel_advance_to_next(wheel, 0, false, 10, on_wheel, &log, &tick, NULL, NULL));
    CHECK(tick == 100 && log.n == 4);
    tw_wheel_free(wheel);
}

int main(void) {
    test_results();
    test_config();
    test_null_arguments();
    test_one_shot_on_time();
    test_zero_and_huge_delays();
    test_lateness_counts_from_the_deadline_asked_for();
    test_next_timeout_is_the_earliest_deadline();
    test_double_stop_and_restart();
    test_periodic_and_ranges();
    test_schedule_spec();
    test_callbacks_on_their_own_timer();
    test_wrong_thread_and_wake();
    test_getters();
    test_driver_threads();
    test_shutdown();
    test_wheel();
    test_wheel_relative_and_ranges();
    test_wheel_keep();
    test_wheel_advance_to_next();
    test_due_now_is_the_next_advance();
    test_collect_then_run();
    test_moved_timers_fire_after_those_already_armed();
    printf("test_c: all tests passed\n");
    return 0;
}
