/* Drives ffi-tests/echo_server.c: starts it (optionally under a wrapper such
 * as valgrind), opens a few hundred loopback connections, keeps a third of
 * them active and lets the rest idle, and checks that exactly the idle ones
 * are closed by the server, and on time.
 *
 *   echo_test <connections> <idle_ms> <tolerance_ms> <server command...>
 *
 * for example `echo_test 300 500 200 ./echo_server 500`.
 *
 * "On time": every idle connection is closed no earlier than idle_ms after
 * its connect() call began (the server's timer starts at accept, which
 * comes later, and tickwheel never fires early) and no later than
 * idle_ms + tolerance_ms after connect() returned. No active connection may be closed while
 * it is active (3 x idle_ms). Then the server gets SIGTERM and must exit 0
 * (it exits 1 if it could not account for every connection). */
#define _GNU_SOURCE

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 1000

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void fail(const char *what) {
    fprintf(stderr, "echo_test: FAILED: %s\n", what);
    exit(1);
}

typedef struct client {
    int fd;
    int active;
    double connecting, connected, closed;
    long echoed_bytes, sent_bytes;
} client;

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: echo_test <connections> <idle_ms> <tolerance_ms> <server...>\n");
        return 2;
    }
    int count = atoi(argv[1]);
    double idle = atof(argv[2]), tolerance = atof(argv[3]);
    if (count <= 0 || count > MAX_CONNS || idle <= 0) {
        fail("bad arguments");
    }

    int out[2];
    if (pipe(out) != 0) {
        fail("pipe");
    }
    pid_t server = fork();
    if (server == 0) {
        dup2(out[1], 1);
        close(out[0]);
        close(out[1]);
        execvp(argv[4], &argv[4]);
        perror("exec");
        _exit(127);
    }
    close(out[1]);
    FILE *lines = fdopen(out[0], "r");
    int port = 0;
    char line[128];
    if (lines == NULL || fgets(line, sizeof line, lines) == NULL ||
        sscanf(line, "PORT %d", &port) != 1) {
        fail("the server did not print its port");
    }
    printf("echo_test: server on 127.0.0.1:%d, %d connections, idle %.0f ms, tolerance %.0f ms\n",
           port, count, idle, tolerance);

    static client clients[MAX_CONNS];
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < count; i++) {
        client *c = &clients[i];
        c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        c->connecting = now_ms();
        if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
            fail("connect");
        }
        c->connected = now_ms();
        c->active = i % 3 == 0;
        c->closed = -1;
    }

    /* Active clients send a line every idle/5 ms; everyone watches for EOF. */
    double start = now_ms(), last_ping = 0, end = start + 3 * idle;
    struct pollfd fds[MAX_CONNS];
    while (now_ms() < end) {
        if (now_ms() - last_ping >= idle / 5) {
            last_ping = now_ms();
            for (int i = 0; i < count; i++) {
                if (clients[i].active && clients[i].closed < 0) {
                    ssize_t n = send(clients[i].fd, "ping\n", 5, MSG_NOSIGNAL);
                    if (n == 5) {
                        clients[i].sent_bytes += 5;
                    }
                }
            }
        }
        for (int i = 0; i < count; i++) {
            fds[i].fd = clients[i].closed < 0 ? clients[i].fd : -1;
            fds[i].events = POLLIN;
            fds[i].revents = 0;
        }
        if (poll(fds, (nfds_t)count, 2) < 0 && errno != EINTR) {
            fail("poll");
        }
        for (int i = 0; i < count; i++) {
            if (fds[i].revents == 0) {
                continue;
            }
            char buffer[512];
            ssize_t n = recv(clients[i].fd, buffer, sizeof buffer, MSG_DONTWAIT);
            if (n > 0) {
                clients[i].echoed_bytes += n;
            } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
                clients[i].closed = now_ms();
            }
        }
    }

    int idle_closed = 0, active_open = 0, failures = 0;
    double worst = 0, best = 1e18;
    for (int i = 0; i < count; i++) {
        client *c = &clients[i];
        if (c->active) {
            if (c->closed >= 0) {
                fprintf(stderr, "active connection %d closed after %.1f ms\n", i,
                        c->closed - c->connected);
                failures++;
            }
            if (c->echoed_bytes == 0 || c->echoed_bytes > c->sent_bytes) {
                fprintf(stderr, "active connection %d: sent %ld, echoed %ld\n", i, c->sent_bytes,
                        c->echoed_bytes);
                failures++;
            }
            active_open += c->closed < 0;
            continue;
        }
        if (c->closed < 0) {
            fprintf(stderr, "idle connection %d was not closed\n", i);
            failures++;
            continue;
        }
        /* The server accepts (and starts the timer) after connect() was
         * called, and possibly before it returned here. */
        double earliest = c->closed - c->connecting, latest = c->closed - c->connected;
        worst = latest > worst ? latest : worst;
        best = earliest < best ? earliest : best;
        if (earliest < idle || latest > idle + tolerance) {
            fprintf(stderr,
                    "idle connection %d closed %.1f ms after connect() began, %.1f ms after it "
                    "returned (want %.0f..%.0f)\n",
                    i, earliest, latest, idle, idle + tolerance);
            failures++;
        }
        idle_closed++;
    }
    printf("echo_test: %d idle connections closed after %.1f..%.1f ms; %d active ones kept open\n",
           idle_closed, best, worst, active_open);

    kill(server, SIGTERM);
    int status = 0;
    if (waitpid(server, &status, 0) != server) {
        fail("waitpid");
    }
    for (int i = 0; i < count; i++) {
        close(clients[i].fd);
    }
    fclose(lines);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "echo_test: the server exited with status %d\n", status);
        failures++;
    }
    if (failures != 0) {
        fail("see above");
    }
    printf("echo_test: passed\n");
    return 0;
}
