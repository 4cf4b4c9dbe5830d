/* Lateness under overload (CONTRACT 20), through the public C API only.
 *
 * A service with driver threads and S shards; T pthreads each arm N one-shot
 * timers, as fast as they can, each due 1..D ms after it is armed
 * (tw_timer_start + tw_timer_forget). Each callback records, first thing,
 *   lateness = CLOCK_MONOTONIC at callback start - intended deadline
 * where the intended deadline is CLOCK_MONOTONIC read just before
 * tw_timer_start plus the delay (so the 1 ms tick's rounding up counts as
 * lateness, as it would for the user). It also records the library's own
 * view, tw_expiry.lateness_ns (on the service's clock, from the deadline asked for).
 *
 * Recording takes no lock: timer i writes slot i of preallocated arrays
 * (a relaxed atomic store) and bumps one atomic counter.
 *
 * The main thread waits until every timer fired or a timeout passed, then
 * prints the fired count, percentiles of both latenesses (all timers, and
 * split by whether the deadline fell while arming was still going on), how
 * long arming took and how often a tw_timer_start call was slow
 * (backpressure holds a producer up to about 1 ms), the process's CPU time,
 * and a one-line `row:` summary for BENCHMARKS.md.
 *
 * Usage: overload [threads=8] [timers_per_thread=200000] [shards=4]
 *                 [max_delay_ms=50] [timeout_s=30] [arm_nice=0] [lend=1]
 * lend=0 creates the service with TW_SERVICE_NO_LEND (driver threads keep
 * their shards while they sleep).
 * arm_nice > 0 lowers the arming threads' priority (Linux per-thread nice):
 * a diagnostic, to see how much of the lateness is the arming threads
 * taking the CPU from the driver threads.
 * Build and run: bash ffi-tests/run.sh overload (release library). */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "tickwheel.h"

#define UNFIRED INT64_MIN
/* A tw_timer_start call slower than this counts as held up. */
#define SLOW_CALL_NS 200000ull

static tw_service *service;
static size_t total;
static uint64_t *deadline_ns;       /* intended deadline, CLOCK_MONOTONIC ns */
static _Atomic int64_t *lateness;   /* callback start - deadline, ns */
static _Atomic uint64_t *lib_late;  /* tw_expiry.lateness_ns */
static atomic_size_t fired;
static atomic_int go;
static uint64_t arming_end_ns;      /* when the last arming thread finished */

typedef struct arm_thread {
    pthread_t thread;
    size_t first, count;
    uint64_t max_delay_ms;
    uint64_t seed;
    int nice;
    /* results */
    uint64_t begin_ns, end_ns;
    uint64_t slowest_call_ns;
    uint64_t slow_calls;
    double cpu_s;
    tw_result error;
} arm_thread;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void on_fire(void *ctx, const tw_expiry *expiry) {
    uint64_t now = now_ns();
    size_t i = (size_t)(uintptr_t)ctx;
    atomic_store_explicit(&lateness[i], (int64_t)(now - deadline_ns[i]), memory_order_relaxed);
    atomic_store_explicit(&lib_late[i], expiry->lateness_ns, memory_order_relaxed);
    /* Release: the main thread reads the slots after seeing the count. */
    atomic_fetch_add_explicit(&fired, 1, memory_order_release);
}

/* xorshift64* */
static uint64_t next_random(uint64_t *state) {
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545f4914f6cdd1dull;
}

static void *arm(void *arg) {
    arm_thread *a = arg;
    uint64_t rng = a->seed * 0x9e3779b97f4a7c15ull | 1;
    /* On Linux, PRIO_PROCESS with 0 means the calling thread. */
    if (a->nice != 0 && setpriority(PRIO_PROCESS, 0, a->nice) != 0) {
        perror("overload: setpriority");
    }
    while (!atomic_load(&go)) {
        sched_yield();
    }
    a->begin_ns = now_ns();
    for (size_t k = 0; k < a->count; k++) {
        size_t i = a->first + k;
        uint64_t delay = (1 + next_random(&rng) % a->max_delay_ms) * 1000000ull;
        uint64_t before = now_ns();
        deadline_ns[i] = before + delay;
        uint64_t timer;
        tw_result r = tw_timer_start(service, delay, on_fire, (void *)(uintptr_t)i, &timer);
        if (r != TW_OK) {
            a->error = r;
            break;
        }
        uint64_t took = now_ns() - before;
        if (took > a->slowest_call_ns) {
            a->slowest_call_ns = took;
        }
        if (took > SLOW_CALL_NS) {
            a->slow_calls++;
        }
        r = tw_timer_forget(service, timer);
        if (r != TW_OK) {
            a->error = r;
            break;
        }
    }
    a->end_ns = now_ns();
    struct timespec cpu;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
    a->cpu_s = (double)cpu.tv_sec + (double)cpu.tv_nsec / 1e9;
    return NULL;
}

/* CPU seconds of this process's live threads named tickwheel-N (the driver
 * threads), from /proc/self/task/TID/stat (Linux; NAN elsewhere). */
static double driver_cpu(void) {
    double total = 0;
    DIR *tasks = opendir("/proc/self/task");
    if (!tasks) {
        return 0.0 / 0.0;
    }
    struct dirent *task;
    while ((task = readdir(tasks)) != NULL) {
        if (task->d_name[0] == '.') {
            continue;
        }
        char path[300], comm[64];
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", task->d_name);
        FILE *f = fopen(path, "r");
        if (!f) {
            continue;
        }
        int named = fgets(comm, sizeof comm, f) && strncmp(comm, "tickwheel-", 10) == 0;
        fclose(f);
        if (!named) {
            continue;
        }
        snprintf(path, sizeof path, "/proc/self/task/%s/stat", task->d_name);
        f = fopen(path, "r");
        if (!f) {
            continue;
        }
        char line[1024];
        if (fgets(line, sizeof line, f)) {
            /* utime and stime are fields 14 and 15; field 3 follows the ')'. */
            char *p = strrchr(line, ')');
            unsigned long long utime = 0, stime = 0;
            if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
                            &utime, &stime) == 2) {
                total += (double)(utime + stime) / 100.0; /* USER_HZ */
            }
        }
        fclose(f);
    }
    closedir(tasks);
    return total;
}

static int cmp_i64(const void *x, const void *y) {
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

/* Nearest-rank percentile of sorted samples. */
static int64_t pct(const int64_t *sorted, size_t n, double p) {
    if (n == 0) {
        return 0;
    }
    size_t rank = (size_t)((double)n * p / 100.0 + 0.999999999);
    if (rank < 1) {
        rank = 1;
    }
    if (rank > n) {
        rank = n;
    }
    return sorted[rank - 1];
}

static double ms(int64_t ns) { return (double)ns / 1e6; }

static void print_dist(const char *what, int64_t *v, size_t n) {
    qsort(v, n, sizeof *v, cmp_i64);
    printf("%-44s n=%-8zu p50 %8.3f  p90 %8.3f  p99 %8.3f  p99.9 %8.3f  max %8.3f ms\n", what, n,
           ms(pct(v, n, 50)), ms(pct(v, n, 90)), ms(pct(v, n, 99)), ms(pct(v, n, 99.9)),
           n ? ms(v[n - 1]) : 0.0);
}

static unsigned long parse(const char *text, const char *name, unsigned long lo, unsigned long hi) {
    char *end;
    errno = 0;
    unsigned long v = strtoul(text, &end, 10);
    if (errno || *end || end == text || v < lo || v > hi) {
        fprintf(stderr, "overload: %s must be a number in %lu..%lu, got \"%s\"\n", name, lo, hi,
                text);
        fprintf(stderr, "usage: overload [threads=8] [timers_per_thread=200000] [shards=4] "
                        "[max_delay_ms=50] [timeout_s=30] [arm_nice=0] [lend=1]\n");
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
    size_t threads = argc > 1 ? parse(argv[1], "threads", 1, 1024) : 8;
    size_t per_thread = argc > 2 ? parse(argv[2], "timers_per_thread", 1, 100000000) : 200000;
    size_t shards = argc > 3 ? parse(argv[3], "shards", 1, 4096) : 4;
    uint64_t max_delay_ms = argc > 4 ? parse(argv[4], "max_delay_ms", 1, 3600000) : 50;
    uint64_t timeout_s = argc > 5 ? parse(argv[5], "timeout_s", 1, 3600) : 30;
    int arm_nice = argc > 6 ? (int)parse(argv[6], "arm_nice", 0, 19) : 0;
    int lend = argc > 7 ? (int)parse(argv[7], "lend", 0, 1) : 1;
    if (argc > 8) {
        fprintf(stderr, "overload: at most 7 arguments\n");
        return 2;
    }
    total = threads * per_thread;

    char load[128] = "?";
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (!fgets(load, sizeof load, f)) {
            strcpy(load, "?");
        }
        load[strcspn(load, "\n")] = 0;
        fclose(f);
    }
    printf("overload (C API, tickwheel %s): %zu threads x %zu timers = %zu, %zu shards "
           "(driver threads), delays 1-%llu ms; load %s\n",
           tw_version(), threads, per_thread, total, shards, (unsigned long long)max_delay_ms,
           load);

    deadline_ns = calloc(total, sizeof *deadline_ns);
    lateness = calloc(total, sizeof *lateness);
    lib_late = calloc(total, sizeof *lib_late);
    arm_thread *arms = calloc(threads, sizeof *arms);
    if (!deadline_ns || !lateness || !lib_late || !arms) {
        fprintf(stderr, "overload: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < total; i++) {
        atomic_init(&lateness[i], UNFIRED);
        atomic_init(&lib_late[i], 0);
    }

    tw_service_config config = {0};
    config.shards = shards;
    config.flags = lend ? 0 : TW_SERVICE_NO_LEND;
    tw_result r = tw_service_new(&config, &service);
    if (r != TW_OK) {
        fprintf(stderr, "overload: tw_service_new: %s\n", tw_result_str(r));
        return 1;
    }

    struct rusage ru0;
    getrusage(RUSAGE_SELF, &ru0);
    for (size_t t = 0; t < threads; t++) {
        arms[t].first = t * per_thread;
        arms[t].count = per_thread;
        arms[t].max_delay_ms = max_delay_ms;
        arms[t].seed = t + 1;
        arms[t].nice = arm_nice;
        if (pthread_create(&arms[t].thread, NULL, arm, &arms[t]) != 0) {
            fprintf(stderr, "overload: pthread_create failed\n");
            return 1;
        }
    }
    uint64_t start = now_ns();
    atomic_store(&go, 1);
    uint64_t slowest = 0, slow_calls = 0;
    int failed = 0;
    for (size_t t = 0; t < threads; t++) {
        pthread_join(arms[t].thread, NULL);
        if (arms[t].end_ns > arming_end_ns) {
            arming_end_ns = arms[t].end_ns;
        }
        if (arms[t].slowest_call_ns > slowest) {
            slowest = arms[t].slowest_call_ns;
        }
        slow_calls += arms[t].slow_calls;
        if (arms[t].error != TW_OK) {
            fprintf(stderr, "overload: thread %zu: %s\n", t, tw_result_str(arms[t].error));
            failed = 1;
        }
    }
    uint64_t deadline = arming_end_ns + timeout_s * 1000000000ull;
    size_t seen;
    while ((seen = atomic_load_explicit(&fired, memory_order_acquire)) < total && now_ns() < deadline) {
        struct timespec ms1 = {0, 1000000};
        nanosleep(&ms1, NULL);
    }
    uint64_t all_fired = now_ns();
    struct rusage ru1;
    getrusage(RUSAGE_SELF, &ru1);
    double cpu = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) +
                 (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) / 1e6 +
                 (double)(ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
                 (double)(ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) / 1e6;
    double drivers_cpu = driver_cpu();
    double arming_cpu = 0;
    for (size_t t = 0; t < threads; t++) {
        arming_cpu += arms[t].cpu_s;
    }
    /* Stops the drivers, so the arrays stay still while they are read. */
    tw_service_free(service);

    double arm_s = (double)(arming_end_ns - start) / 1e9;
    printf("arming: %.3f s (%.2f M starts/s); tw_timer_start slower than %llu us: %llu calls, "
           "slowest %.3f ms\n",
           arm_s, (double)total / arm_s / 1e6, (unsigned long long)(SLOW_CALL_NS / 1000),
           (unsigned long long)slow_calls, ms((int64_t)slowest));
    printf("run: %.3f s from the first start to the last callback (or timeout); CPU %.2f s "
           "(%.2f cores): arming threads %.2f s, driver threads %.2f s\n",
           (double)(all_fired - start) / 1e9, cpu, cpu / ((double)(all_fired - start) / 1e9),
           arming_cpu, drivers_cpu);

    int64_t *all = malloc(total * sizeof *all);
    int64_t *lib = malloc(total * sizeof *lib);
    int64_t *during = malloc(total * sizeof *during);
    int64_t *after = malloc(total * sizeof *after);
    if (!all || !lib || !during || !after) {
        fprintf(stderr, "overload: out of memory\n");
        return 1;
    }
    size_t n = 0, nd = 0, na = 0, early = 0, unfired = 0;
    for (size_t i = 0; i < total; i++) {
        int64_t late = atomic_load_explicit(&lateness[i], memory_order_relaxed);
        if (late == UNFIRED) {
            unfired++;
            continue;
        }
        if (late < 0) {
            early++;
        }
        all[n] = late;
        lib[n] = (int64_t)atomic_load_explicit(&lib_late[i], memory_order_relaxed);
        n++;
        if (deadline_ns[i] <= arming_end_ns) {
            during[nd++] = late;
        } else {
            after[na++] = late;
        }
    }
    printf("fired %zu of %zu; never fired (within %llu s after arming): %zu; early: %zu\n", n,
           total, (unsigned long long)timeout_s, unfired, early);
    print_dist("lateness, real clock:", all, n);
    print_dist("  deadline while arming went on:", during, nd);
    print_dist("  deadline after arming ended:", after, na);
    print_dist("tw_expiry.lateness_ns (library's view):", lib, n);
    printf("row: | tickwheel C (%zu shards) | %zu / %zu | %.3f | %.3f | %.3f | %.3f | %.3f | %.2f |\n",
           shards, n, total, ms(pct(all, n, 50)), ms(pct(all, n, 90)), ms(pct(all, n, 99)),
           ms(pct(all, n, 99.9)), n ? ms(all[n - 1]) : 0.0, arm_s);
    free(all);
    free(lib);
    free(during);
    free(after);
    free(deadline_ns);
    free((void *)lateness);
    free((void *)lib_late);
    free(arms);
    if (failed || unfired || early) {
        printf("overload: FAILED (a start failed, or timers fired early or never)\n");
        return 1;
    }
    printf("overload: every timer fired, none early: passed\n");
    return 0;
}
