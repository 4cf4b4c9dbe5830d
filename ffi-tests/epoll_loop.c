/* An event loop that sleeps in epoll_wait exactly until its next timer is
 * due, and checks that it wakes once per expiry (docs/CONTRACT.md item 22:
 * an owner sleeps until its earliest armed deadline, not until the next
 * cascade point of the wheel).
 *
 *   epoll_loop [period_ms [expiries_per_phase]]     (default 50 8)
 *
 * An embedded service (TW_SERVICE_EMBEDDED) with one shard, claimed by this
 * thread, and one timer kept `period_ms` ahead. Each loop iteration runs
 * what is due, then sleeps in epoll_wait with the timeout from
 * tw_shard_next_timeout_ms; the service's wake callback writes to an
 * eventfd in the epoll set. Two phases of `expiries_per_phase` expiries:
 *   1. tw_shard_poll runs the timer's callback, which re-arms its own
 *      timer (tw_timer_restart);
 *   2. collect-then-run: tw_shard_poll_due(shard, false, ...) hands the due
 *      timer to the loop, which re-arms it itself.
 *
 * What must hold, whatever the machine's speed:
 *   - every wakeup fires the timer: no wakeup finds nothing due. The loop
 *     runs what is due before its first sleep and stops right after the
 *     last expiry, so there is no first or last iteration to allow for. A
 *     timeout rounded up to whole milliseconds never wakes the loop early,
 *     and epoll_wait never returns before its timeout (an interrupted wait,
 *     EINTR, is counted apart: it is not the timeout's doing). On a machine
 *     that keeps up, that is one wakeup per expiry; one that stalls the loop
 *     for a whole period (valgrind on a loaded machine did) finds two
 *     expiries after one wakeup, so the count may fall short, never exceed;
 *   - no eventfd wakeup: no other thread touches the shard, so the service
 *     has no reason to call the wake callback.
 * A timeout that stopped at a coarse wheel bucket's first tick (50 ms often
 * crosses a 64 ms level-0 block) or was capped short would wake the loop
 * without an expiry and fail the first check.
 *
 * Prints the counts and "passed"; exits 1 when a check fails, 2 on an error. */
#define _GNU_SOURCE

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "tickwheel.h"

#define MS 1000000ull

static void check(tw_result result, const char *what) {
    if (result != TW_OK) {
        fprintf(stderr, "%s: %s\n", what, tw_result_str(result));
        exit(2);
    }
}

typedef struct loop {
    tw_service *service;
    tw_shard *shard;
    uint64_t period_ns;
    long expiries;
    uint64_t worst_lateness_ns;
} loop;

static void wake(void *ctx, size_t shard) {
    (void)shard;
    uint64_t one = 1;
    /* Never blocks: the eventfd is non-blocking, and a full counter
     * already means "wake up". */
    ssize_t n = write(*(int *)ctx, &one, sizeof one);
    (void)n;
}

/* What either phase does for one expiry: count it and keep the timer a
 * period ahead (restarting a fired timer re-arms it). */
static void expired(loop *l, const tw_expiry *expiry) {
    l->expiries++;
    if (expiry->lateness_ns > l->worst_lateness_ns) {
        l->worst_lateness_ns = expiry->lateness_ns;
    }
    tw_restart outcome = TW_RESTART_MOVED;
    check(tw_timer_restart(l->service, expiry->timer, l->period_ns, &outcome),
          "tw_timer_restart");
    if (outcome != TW_RESTART_REARMED) {
        fprintf(stderr, "a fired timer was moved, not re-armed\n");
        exit(1);
    }
}

/* Phase 1: the timer's callback, run by tw_shard_poll. */
static void on_timer(void *ctx, const tw_expiry *expiry) {
    expired(ctx, expiry);
}

int main(int argc, char **argv) {
    long period_ms = argc > 1 ? strtol(argv[1], NULL, 10) : 50;
    long per_phase = argc > 2 ? strtol(argv[2], NULL, 10) : 8;
    if (period_ms <= 0 || per_phase <= 0) {
        fprintf(stderr, "usage: epoll_loop [period_ms [expiries_per_phase]]\n");
        return 2;
    }
    loop l = {0};
    l.period_ns = (uint64_t)period_ms * MS;

    int epoll = epoll_create1(EPOLL_CLOEXEC);
    int wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll < 0 || wake_fd < 0) {
        perror("epoll/eventfd");
        return 2;
    }
    struct epoll_event event = {.events = EPOLLIN, .data.fd = wake_fd};
    if (epoll_ctl(epoll, EPOLL_CTL_ADD, wake_fd, &event) != 0) {
        perror("epoll_ctl");
        return 2;
    }

    tw_service_config config = {0};
    config.shards = 1;
    config.tick_ns = 1 * MS;
    config.flags = TW_SERVICE_EMBEDDED;
    config.wake = wake;
    config.wake_ctx = &wake_fd;
    check(tw_service_new(&config, &l.service), "tw_service_new");
    check(tw_shard_claim(l.service, 0, &l.shard), "tw_shard_claim");
    uint64_t timer = 0;
    check(tw_timer_start(l.service, l.period_ns, on_timer, &l, &timer), "tw_timer_start");

    long wakeups = 0, timeouts = 0, eventfd_wakes = 0, interrupted = 0, empty = 0;
    long expiries_at_wake = -1; /* -1: not woken since the last run */
    const long total = 2 * per_phase;
    for (;;) {
        /* Run what is due. */
        if (l.expiries < per_phase) {
            check(tw_shard_poll(l.shard, NULL), "tw_shard_poll");
        } else {
            /* Collect-then-run: take every due timer, then handle it. */
            tw_expiry due;
            bool found = false;
            for (;;) {
                check(tw_shard_poll_due(l.shard, false, &due, &found), "tw_shard_poll_due");
                if (!found) {
                    break;
                }
                expired(&l, &due);
            }
        }
        if (expiries_at_wake >= 0 && l.expiries == expiries_at_wake) {
            empty++; /* woke, and nothing was due */
        }
        expiries_at_wake = -1;
        if (l.expiries >= total) {
            break;
        }
        /* Sleep until the next deadline. */
        int timeout = -1;
        check(tw_shard_next_timeout_ms(l.shard, &timeout), "tw_shard_next_timeout_ms");
        struct epoll_event events[4];
        int n = epoll_wait(epoll, events, 4, timeout);
        if (n < 0) {
            if (errno != EINTR) {
                perror("epoll_wait");
                return 2;
            }
            interrupted++;
            continue;
        }
        wakeups++;
        expiries_at_wake = l.expiries;
        if (n == 0) {
            timeouts++;
        }
        for (int i = 0; i < n; i++) {
            uint64_t count;
            ssize_t r = read(wake_fd, &count, sizeof count);
            (void)r;
            eventfd_wakes++;
        }
    }

    printf("epoll_loop: period %ld ms, %ld expiries, %ld wakeups (%ld timeouts, %ld by the "
           "eventfd, %ld interrupted, %ld with nothing due), worst lateness %.3f ms\n",
           period_ms, l.expiries, wakeups, timeouts, eventfd_wakes, interrupted, empty,
           (double)l.worst_lateness_ns / 1e6);
    check(tw_timer_free(l.service, timer), "tw_timer_free");
    check(tw_shard_release(l.shard), "tw_shard_release");
    tw_service_free(l.service);
    close(wake_fd);
    close(epoll);
    int failed = 0;
    if (empty != 0 || wakeups > l.expiries) {
        fprintf(stderr, "epoll_loop: %ld wakeups for %ld expiries, %ld of them with nothing due: "
                        "the loop must wake only when its timer is due\n",
                wakeups, l.expiries, empty);
        failed = 1;
    }
    if (eventfd_wakes != 0) {
        fprintf(stderr, "epoll_loop: woken %ld times through the eventfd with no other thread\n",
                eventfd_wakes);
        failed = 1;
    }
    if (failed) {
        return 1;
    }
    printf("epoll_loop: passed\n");
    return 0;
}
