/* C11 + pthreads: many threads start, stop, restart and free timers on each
 * other's shards at once, against a service with driver threads. Checks:
 *  - started + rearmed == fired + cancelled once everything has settled;
 *  - a stop that returned TW_STOP_CANCELLED is never followed by that
 *    arming's callback, and no arming fires twice;
 *  - no timer fires before its deadline (measured on CLOCK_MONOTONIC);
 *  - every ctx is freed exactly once (ctx_free), so nothing leaks. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "check.h"

#define THREADS 8
#define ROUNDS 3000
#define SLOTS 64
#define SHARDS 4

static tw_service *service;
/* Published timers: their ctx, which carries the handle. Whoever takes one
 * out of a slot owns the handle (and may read the ctx until it frees it). */
static _Atomic(struct timer_ctx *) slots[SLOTS];
static atomic_long started, rearmed, fired, cancelled, freed, early, double_fire;

typedef struct timer_ctx {
    uint64_t handle;
    uint64_t not_before_ns; /* valid while `restarted` is 0 */
    atomic_int restarted;
    atomic_int armings_fired; /* fires of the current arming */
    atomic_int cancelled_arming;
} timer_ctx;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void on_fire(void *ctx, const tw_expiry *expiry) {
    timer_ctx *t = ctx;
    (void)expiry;
    if (!atomic_load(&t->restarted) && now_ns() < t->not_before_ns) {
        atomic_fetch_add(&early, 1);
    }
    if (!atomic_load(&t->restarted) && atomic_fetch_add(&t->armings_fired, 1) != 0) {
        atomic_fetch_add(&double_fire, 1);
    }
    if (!atomic_load(&t->restarted) && atomic_load(&t->cancelled_arming)) {
        atomic_fetch_add(&double_fire, 1); /* fired after a Cancelled stop */
    }
    atomic_fetch_add(&fired, 1);
}

static void on_free(void *ctx) {
    free(ctx);
    atomic_fetch_add(&freed, 1);
}

/* Stops (sometimes after a restart) and frees a handle this thread took. */
static void retire(timer_ctx *t, unsigned *seed) {
    if (t == NULL) {
        return;
    }
    uint64_t handle = t->handle;
    if (rand_r(seed) % 4 == 0) {
        atomic_store(&t->restarted, 1);
        tw_restart restart;
        tw_result result = tw_timer_restart(service, handle, (uint64_t)(rand_r(seed) % 3) * 1000000,
                                            &restart);
        CHECK(result == TW_OK);
        if (restart == TW_RESTART_REARMED) {
            atomic_fetch_add(&rearmed, 1);
        }
    }
    tw_stop stop;
    if (rand_r(seed) % 2) {
        CHECK_OK(tw_timer_stop(service, handle, &stop));
        if (stop == TW_STOP_CANCELLED) {
            atomic_fetch_add(&cancelled, 1);
        }
    } else {
        tw_stop_sync sync;
        CHECK_OK(tw_timer_stop_sync(service, handle, &sync));
        CHECK(sync != TW_STOP_SYNC_FROM_OWN_CALLBACK);
        if (sync == TW_STOP_SYNC_CANCELLED) {
            atomic_fetch_add(&cancelled, 1);
        }
    }
    CHECK_OK(tw_timer_free(service, handle));
    /* A second stop or free of the same handle is refused, harmlessly. */
    CHECK_RESULT(tw_timer_stop(service, handle, &stop), TW_STALE_HANDLE);
    CHECK_RESULT(tw_timer_free(service, handle), TW_STALE_HANDLE);
}

static void *worker(void *arg) {
    unsigned seed = (unsigned)(uintptr_t)arg * 7919u + 1;
    for (int round = 0; round < ROUNDS; round++) {
        timer_ctx *t = calloc(1, sizeof *t);
        CHECK(t != NULL);
        tw_timer_spec spec = {0};
        spec.delay_ns = (uint64_t)(rand_r(&seed) % 500) * 1000; /* 0..0.5 ms */
        spec.flags = TW_TIMER_ON_SHARD;
        spec.shard = (size_t)rand_r(&seed) % SHARDS;
        t->not_before_ns = now_ns() + spec.delay_ns;
        CHECK_OK(tw_timer_schedule(service, &spec, on_fire, t, on_free, &t->handle));
        uint64_t handle = t->handle;
        atomic_fetch_add(&started, 1);
        if (rand_r(&seed) % 8 == 0) {
            /* Stop our own right away (the common cancel-before-fire case). */
            tw_stop stop;
            CHECK_OK(tw_timer_stop(service, handle, &stop));
            if (stop == TW_STOP_CANCELLED) {
                atomic_store(&t->cancelled_arming, 1);
                atomic_fetch_add(&cancelled, 1);
            }
        }
        /* Publish it and take over whatever another thread left there. */
        size_t slot = (size_t)rand_r(&seed) % SLOTS;
        retire(atomic_exchange(&slots[slot], t), &seed);
        if (round % 16 == 0) {
            struct timespec pause = {0, 200000}; /* let some of them fire */
            nanosleep(&pause, NULL);
        }
    }
    return NULL;
}

int main(void) {
    tw_service_config config = {0};
    config.shards = SHARDS;
    config.tick_ns = 100000; /* 100 us */
    CHECK_OK(tw_service_new(&config, &service));
    pthread_t threads[THREADS];
    for (uintptr_t i = 0; i < THREADS; i++) {
        CHECK(pthread_create(&threads[i], NULL, worker, (void *)i) == 0);
    }
    for (int i = 0; i < THREADS; i++) {
        CHECK(pthread_join(threads[i], NULL) == 0);
    }
    unsigned seed = 42;
    for (int i = 0; i < SLOTS; i++) {
        retire(atomic_exchange(&slots[i], NULL), &seed);
    }
    /* Every handle is freed; the drivers settle the last slots on their own.
     * Freeing the service waits for running callbacks and frees the rest. */
    tw_service_free(service);
    long s = atomic_load(&started), r = atomic_load(&rearmed);
    long f = atomic_load(&fired), c = atomic_load(&cancelled);
    printf("test_threads: started %ld rearmed %ld fired %ld cancelled %ld freed %ld\n", s, r, f,
           c, atomic_load(&freed));
    CHECK(s == (long)THREADS * ROUNDS);
    CHECK(s + r == f + c);
    CHECK(atomic_load(&freed) == s);
    CHECK(atomic_load(&early) == 0);
    CHECK(atomic_load(&double_fire) == 0);
    printf("test_threads: all tests passed\n");
    return 0;
}
