/* An epoll TCP echo server on 127.0.0.1 whose per-connection idle timeouts
 * are tickwheel timers, driven from the server's own event loop.
 *
 *   echo_server [idle_ms]     (default 1000)
 *
 * Prints "PORT <n>" on stdout once it listens on an ephemeral port; exits
 * cleanly (freeing everything) on SIGTERM or SIGINT.
 *
 * How tickwheel fits into the loop:
 *  - an embedded service (no driver threads), one shard, claimed by this
 *    thread; timers started here go to that shard;
 *  - each loop iteration first collects the due timers without anything
 *    being called (tw_shard_poll_due with run false) and handles each one
 *    itself, in its own order, on its own stack: it closes that idle
 *    connection. Then it sleeps in epoll_wait for tw_shard_next_timeout_ms:
 *    until the earliest idle deadline (docs/CONTRACT.md item 22), -1 when
 *    no timer is armed;
 *  - a collected timer is named by its handle only, so the server keeps a
 *    map from handle to connection (a POSIX tsearch tree);
 *  - the service's wake callback writes to an eventfd in the epoll set, so a
 *    timer started from another thread could cut the sleep short (this
 *    server starts them all on its own thread; the eventfd is there to show
 *    the wiring);
 *  - each connection's timer owns the connection: its ctx_free closes the
 *    socket, leaves the map and frees the struct once the service lets go
 *    of the timer, so one path frees a connection however it ends. */
#define _GNU_SOURCE

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <search.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tickwheel.h"

#define MS 1000000ull

static void die(const char *what) {
    perror(what);
    exit(2);
}

static void check(tw_result result, const char *what) {
    if (result != TW_OK) {
        fprintf(stderr, "%s: %s\n", what, tw_result_str(result));
        exit(2);
    }
}

typedef struct server {
    tw_service *service;
    tw_shard *shard;
    int epoll;
    int wake_fd;
    uint64_t idle_ns;
    long open, idle_closed;
    void *by_timer; /* tsearch tree of conn *, ordered by timer handle */
} server;

typedef struct conn {
    server *server;
    int fd;
    uint64_t timer;
} conn;

/* Tags for epoll_event.data.u64 of the non-connection descriptors. */
enum { TAG_LISTEN = 1, TAG_WAKE = 2, TAG_SIGNAL = 3 };

static void wake(void *ctx, size_t shard) {
    (void)shard;
    uint64_t one = 1;
    /* Never blocks: the eventfd is non-blocking, and a full counter
     * already means "wake up". */
    ssize_t n = write(*(int *)ctx, &one, sizeof one);
    (void)n;
}

static int by_timer(const void *a, const void *b) {
    uint64_t x = ((const conn *)a)->timer, y = ((const conn *)b)->timer;
    return (x > y) - (x < y);
}

/* The connection whose timer has handle `timer` (every armed timer has one). */
static conn *conn_of(server *s, uint64_t timer) {
    conn key = {.timer = timer};
    conn **found = tfind(&key, &s->by_timer, by_timer);
    if (found == NULL) {
        fprintf(stderr, "a collected timer with no connection\n");
        exit(2);
    }
    return *found;
}

static void close_conn(conn *c) {
    if (c->fd >= 0) {
        close(c->fd); /* also leaves the epoll set */
        c->fd = -1;
        c->server->open--;
    }
}

/* ctx_free of a connection's timer: the service no longer needs it. */
static void free_conn(void *ctx) {
    conn *c = ctx;
    close_conn(c);
    tdelete(c, &c->server->by_timer, by_timer);
    free(c);
}

/* The idle timeout came due: close the connection and give the timer back
 * (its ctx_free frees the struct later, at a poll of the shard). */
static void idle_timeout(conn *c) {
    c->server->idle_closed++;
    close_conn(c);
    check(tw_timer_free(c->server->service, c->timer), "tw_timer_free");
}

/* The timer's callback, for a loop that lets tw_shard_poll run it. This
 * loop collects its due timers instead (run_due_timers), so it is not
 * called here, but the timer behaves the same either way. */
static void on_idle(void *ctx, const tw_expiry *expiry) {
    (void)expiry;
    idle_timeout(ctx);
}

/* Collect-then-run: take the due timers out of the shard in batches (no
 * callback runs meanwhile), then handle each, in the order collected
 * (deadline order, arming order within a tick). */
static void run_due_timers(server *s) {
    bool found = true;
    while (found) {
        tw_expiry due[64];
        size_t n = 0;
        while (n < 64) {
            check(tw_shard_poll_due(s->shard, false, &due[n], &found), "tw_shard_poll_due");
            if (!found) {
                break;
            }
            n++;
        }
        for (size_t i = 0; i < n; i++) {
            idle_timeout(conn_of(s, due[i].timer));
        }
    }
}

static void accept_all(server *s, int listener) {
    for (;;) {
        int fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                return;
            }
            die("accept4");
        }
        conn *c = malloc(sizeof *c);
        if (c == NULL) {
            die("malloc");
        }
        c->server = s;
        c->fd = fd;
        s->open++;
        tw_timer_spec spec = {0};
        spec.delay_ns = s->idle_ns;
        /* From here on the timer owns `c`. */
        check(tw_timer_schedule(s->service, &spec, on_idle, c, free_conn, &c->timer),
              "tw_timer_schedule");
        if (tsearch(c, &s->by_timer, by_timer) == NULL) {
            die("tsearch");
        }
        struct epoll_event event = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(s->epoll, EPOLL_CTL_ADD, fd, &event) != 0) {
            die("epoll_ctl");
        }
    }
}

static void on_readable(server *s, conn *c) {
    char buffer[4096];
    ssize_t n = read(c->fd, buffer, sizeof buffer);
    if (n > 0) {
        /* Activity: push the idle deadline back (the cheapest restart). */
        check(tw_timer_restart(s->service, c->timer, s->idle_ns, NULL), "tw_timer_restart");
        ssize_t written = write(c->fd, buffer, (size_t)n);
        (void)written; /* a loopback echo of a few bytes does not block */
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        return;
    }
    /* The client closed: stop and free the timer; ctx_free closes the socket
     * and frees `c` at a later poll of the shard (the next collect here).
     * Close now so epoll forgets it. */
    close_conn(c);
    check(tw_timer_free(s->service, c->timer), "tw_timer_free");
}

int main(int argc, char **argv) {
    server s = {0};
    long idle_ms = argc > 1 ? strtol(argv[1], NULL, 10) : 1000;
    if (idle_ms <= 0) {
        fprintf(stderr, "usage: echo_server [idle_ms]\n");
        return 2;
    }
    s.idle_ns = (uint64_t)idle_ms * MS;

    s.epoll = epoll_create1(EPOLL_CLOEXEC);
    s.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s.epoll < 0 || s.wake_fd < 0) {
        die("epoll/eventfd");
    }

    tw_service_config config = {0};
    config.shards = 1;
    config.tick_ns = 1 * MS;
    config.flags = TW_SERVICE_EMBEDDED;
    config.wake = wake;
    config.wake_ctx = &s.wake_fd;
    check(tw_service_new(&config, &s.service), "tw_service_new");
    check(tw_shard_claim(s.service, 0, &s.shard), "tw_shard_claim");

    int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (listener < 0 || bind(listener, (struct sockaddr *)&addr, sizeof addr) != 0 ||
        listen(listener, 1024) != 0 || getsockname(listener, (struct sockaddr *)&addr, &len) != 0) {
        die("listen");
    }

    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    sigprocmask(SIG_BLOCK, &signals, NULL);
    int signal_fd = signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC);
    if (signal_fd < 0) {
        die("signalfd");
    }

    struct epoll_event event = {.events = EPOLLIN};
    event.data.u64 = TAG_LISTEN;
    epoll_ctl(s.epoll, EPOLL_CTL_ADD, listener, &event);
    event.data.u64 = TAG_WAKE;
    epoll_ctl(s.epoll, EPOLL_CTL_ADD, s.wake_fd, &event);
    event.data.u64 = TAG_SIGNAL;
    epoll_ctl(s.epoll, EPOLL_CTL_ADD, signal_fd, &event);

    printf("PORT %d\n", ntohs(addr.sin_port));
    fflush(stdout);

    int running = 1;
    while (running) {
        /* Handle what is due, then sleep until the next deadline. */
        run_due_timers(&s);
        int timeout = -1;
        check(tw_shard_next_timeout_ms(s.shard, &timeout), "tw_shard_next_timeout_ms");
        struct epoll_event events[64];
        int n = epoll_wait(s.epoll, events, 64, timeout);
        if (n < 0 && errno != EINTR) {
            die("epoll_wait");
        }
        for (int i = 0; i < n; i++) {
            uint64_t tag = events[i].data.u64;
            if (tag == TAG_LISTEN) {
                accept_all(&s, listener);
            } else if (tag == TAG_WAKE) {
                uint64_t count;
                ssize_t r = read(s.wake_fd, &count, sizeof count);
                (void)r;
            } else if (tag == TAG_SIGNAL) {
                running = 0;
            } else {
                on_readable(&s, events[i].data.ptr);
            }
        }
    }

    fprintf(stderr, "echo_server: %ld idle connections closed, %ld open at exit\n", s.idle_closed,
            s.open);
    /* Give the shard back, then free the service: every remaining timer is
     * dropped and its ctx_free closes and frees its connection. */
    check(tw_shard_release(s.shard), "tw_shard_release");
    tw_service_free(s.service);
    if (s.by_timer != NULL) {
        fprintf(stderr, "echo_server: connections left in the map\n");
        s.open++;
    }
    close(listener);
    close(signal_fd);
    close(s.wake_fd);
    close(s.epoll);
    return s.open == 0 ? 0 : 1;
}
