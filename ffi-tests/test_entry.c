/* Tests of the embedded timers of the C ABI (tw_entry, tw_entry_wheel):
 * order and exact ticks, range scheduling, the capped advance, callbacks
 * that re-arm, cancel and free entries (their own included), the rules of
 * who may free what when (run under ASan and valgrind by ffi-tests/run.sh,
 * so a use of freed memory fails), and bad input; then the same for
 * tw_entry_wheel_poll, whose caller handles each due entry itself, and
 * that polling fires what an advance fires. Prints "passed". */
#define _DEFAULT_SOURCE
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* A connection-like record with its timer inside. */
struct conn {
    int id;
    tw_entry timer;
};

#define CONN_OF(e) ((struct conn *)((char *)(e) - offsetof(struct conn, timer)))

/* What the callbacks saw: (id, tick) per firing. */
struct log {
    tw_entry_wheel *wheel;
    int ids[64];
    uint64_t ticks[64];
    int n;
};

static void record(tw_entry *e, void *ctx) {
    struct log *log = ctx;
    uint64_t now = 0;
    CHECK_OK(tw_entry_wheel_now(log->wheel, &now));
    bool armed = true;
    CHECK_OK(tw_entry_deadline(e, &armed, NULL));
    CHECK(!armed); /* a fired entry is no longer armed */
    CHECK(log->n < 64);
    log->ids[log->n] = CONN_OF(e)->id;
    log->ticks[log->n] = now;
    log->n++;
}

/* Numbers `n` connections from 0 and sets up their timers with `cb`. */
static void init_conns(struct conn *c, int n, tw_entry_fn cb) {
    for (int i = 0; i < n; i++) {
        c[i].id = i;
        CHECK_OK(tw_entry_init(&c[i].timer, cb));
    }
}

static void test_order_and_exact_ticks(void) {
    tw_entry_wheel *w = NULL;
    CHECK_OK(tw_entry_wheel_new(0, &w));
    struct conn c[4];
    init_conns(c, 4, record);
    /* Levels 0, 1 and 2, and two on one tick: arming order within it; a
     * schedule of an armed entry moves it and counts as arming again. */
    CHECK_OK(tw_entry_schedule(w, &c[0].timer, 5000));
    CHECK_OK(tw_entry_schedule(w, &c[1].timer, 70));
    CHECK_OK(tw_entry_schedule(w, &c[2].timer, 5000));
    CHECK_OK(tw_entry_schedule_at(w, &c[3].timer, 3));
    CHECK_OK(tw_entry_schedule(w, &c[0].timer, 5000)); /* now after 2 */
    size_t len = 0;
    CHECK_OK(tw_entry_wheel_len(w, &len));
    CHECK(len == 4);
    uint64_t ticks = 0;
    CHECK_OK(tw_entry_wheel_ticks_to_next_event(w, 1000, &ticks));
    CHECK(ticks == 3);
    bool armed = false;
    uint64_t deadline = 0;
    CHECK_OK(tw_entry_deadline(&c[1].timer, &armed, &deadline));
    CHECK(armed && deadline == 70);

    struct log log = {.wheel = w};
    size_t expired = 0;
    bool complete = false;
    CHECK_OK(tw_entry_wheel_advance(w, 10000, SIZE_MAX, &log, &expired, &complete));
    CHECK(expired == 4 && complete);
    CHECK(log.n == 4);
    CHECK(log.ids[0] == 3 && log.ticks[0] == 3);
    CHECK(log.ids[1] == 1 && log.ticks[1] == 70);
    CHECK(log.ids[2] == 2 && log.ticks[2] == 5000);
    CHECK(log.ids[3] == 0 && log.ticks[3] == 5000);
    CHECK_OK(tw_entry_wheel_len(w, &len));
    CHECK(len == 0);
    tw_entry_wheel_free(w);
}

static void test_range_and_capped_advance(void) {
    tw_entry_wheel *w = NULL;
    CHECK_OK(tw_entry_wheel_new(0, &w));
    struct conn c[3];
    init_conns(c, 3, record);
    uint64_t tick = 0;
    /* The tick with the most trailing zero bits in 100..200 is 128. */
    CHECK_OK(tw_entry_schedule_in_range(w, &c[0].timer, 100, 200, &tick));
    CHECK(tick == 128);
    /* Inside 120..300 already: kept. */
    CHECK_OK(tw_entry_schedule_in_range(w, &c[0].timer, 120, 300, &tick));
    CHECK(tick == 128);
    CHECK_RESULT(tw_entry_schedule_in_range(w, &c[0].timer, 9, 8, &tick), TW_INVALID_RANGE);
    CHECK_OK(tw_entry_schedule(w, &c[1].timer, 128));
    CHECK_OK(tw_entry_schedule(w, &c[2].timer, 129));

    struct log log = {.wheel = w};
    size_t expired = 0;
    bool complete = true;
    CHECK_OK(tw_entry_wheel_advance(w, 1000, 1, &log, &expired, &complete));
    CHECK(expired == 1 && !complete && log.n == 1 && log.ids[0] == 0);
    CHECK_OK(tw_entry_wheel_advance(w, 1000, 1, &log, &expired, &complete));
    CHECK(expired == 1 && !complete && log.ids[1] == 1);
    CHECK_OK(tw_entry_wheel_advance(w, 1000, 5, &log, &expired, &complete));
    CHECK(expired == 1 && complete && log.ids[2] == 2 && log.ticks[2] == 129);
    uint64_t now = 0;
    CHECK_OK(tw_entry_wheel_now(w, &now));
    CHECK(now == 1000);
    tw_entry_wheel_free(w);
}

/* A moved entry counts as newly armed (CONTRACT 5): on its new tick it
 * fires after every entry already armed for that tick, whether it came from
 * a later tick (l in the same wheel bucket, f from a far level), an earlier
 * one (e) or that same tick (z, armed for it before the others). Each
 * schedule function, with the tick on level 0, 1 and 2, the moves made at
 * the start or after time moved (a armed before, b after). The range
 * schedule keeps z, already in its window, with its place. */
static void test_a_moved_entry_fires_after_those_already_armed(void) {
    static const uint64_t cases[][5] = {
        /* tick, earlier, later, far, the tick the moves are made at */
        {40, 20, 50, 5000, 10},
        {200, 130, 203, 9000, 0},
        {200, 130, 203, 9000, 100},
        {5000, 4200, 5001, 300000, 0},
        {5000, 4200, 5001, 300000, 4100},
    };
    const char names[] = "zelfab";
    for (int how = 0; how < 3; how++) {
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            uint64_t t = cases[k][0], pause = cases[k][4];
            tw_entry_wheel *w = NULL;
            CHECK_OK(tw_entry_wheel_new(0, &w));
            struct conn c[6];
            const uint64_t at[] = {t, cases[k][1], cases[k][2], cases[k][3], t, t};
            for (int i = 0; i < 6; i++) {
                c[i].id = i;
                CHECK_OK(tw_entry_init(&c[i].timer, record));
                if (i < 5) {
                    CHECK_OK(tw_entry_schedule_at(w, &c[i].timer, at[i]));
                }
            }
            struct log log = {.wheel = w};
            size_t expired = 9;
            bool complete = false;
            CHECK_OK(tw_entry_wheel_advance(w, pause, SIZE_MAX, &log, &expired, &complete));
            CHECK(expired == 0 && complete);
            CHECK_OK(tw_entry_schedule_at(w, &c[5].timer, t));
            const int moved[] = {2, 1, 0, 3}; /* l, e, z, f */
            for (int m = 0; m < 4; m++) {
                tw_entry *e = &c[moved[m]].timer;
                uint64_t tick = 0;
                switch (how) {
                case 0: CHECK_OK(tw_entry_schedule(w, e, t - pause)); break;
                case 1: CHECK_OK(tw_entry_schedule_at(w, e, t)); break;
                default:
                    CHECK_OK(tw_entry_schedule_in_range(w, e, t - pause, t - pause, &tick));
                    CHECK(tick == t);
                    break;
                }
            }
            CHECK_OK(tw_entry_wheel_advance(w, t - 1, SIZE_MAX, &log, &expired, &complete));
            CHECK(expired == 0);
            CHECK_OK(tw_entry_wheel_advance(w, t, SIZE_MAX, &log, &expired, &complete));
            CHECK(expired == 6 && complete && log.n == 6);
            char order[7] = {0};
            for (int i = 0; i < 6; i++) {
                CHECK(log.ticks[i] == t);
                order[i] = names[log.ids[i]];
            }
            const char *want = how < 2 ? "ablezf" : "zablef";
            if (strcmp(order, want) != 0) {
                fprintf(stderr, "move %d onto tick %llu at %llu: fired %s, expected %s\n", how,
                        (unsigned long long)t, (unsigned long long)pause, order, want);
                abort();
            }
            tw_entry_wheel_free(w);
        }
    }
}

/* Callbacks that change the wheel: a periodic one re-arms itself, a
 * closing one cancels another entry and frees its own record. */
struct world {
    tw_entry_wheel *wheel;
    struct conn *periodic;
    struct conn *doomed; /* freed by the closer's callback */
    struct conn *victim; /* cancelled by the closer's callback */
    int periodic_fired;
    int closer_fired;
    int victim_fired;
    int reentrant_seen;
};

static struct world *world;

static void on_periodic(tw_entry *e, void *ctx) {
    (void)ctx;
    CHECK(CONN_OF(e) == world->periodic);
    world->periodic_fired++;
    if (world->periodic_fired < 3) {
        CHECK_OK(tw_entry_schedule(world->wheel, e, 10));
    }
    /* Advancing or freeing the wheel from its own callback is refused. */
    CHECK_RESULT(tw_entry_wheel_advance(world->wheel, 100000, 1, NULL, NULL, NULL), TW_REENTRANT);
    tw_entry_wheel_free(world->wheel); /* ignored */
    world->reentrant_seen++;
}

static void on_closer(tw_entry *e, void *ctx) {
    (void)ctx;
    world->closer_fired++;
    bool cancelled = false;
    CHECK_OK(tw_entry_cancel(&world->victim->timer, &cancelled));
    CHECK(cancelled);
    /* The fired entry is not armed: its record may go, now. */
    free(CONN_OF(e));
    world->doomed = NULL;
}

static void on_victim(tw_entry *e, void *ctx) {
    (void)e;
    (void)ctx;
    world->victim_fired++;
}

static void test_callbacks_change_the_wheel_and_free_records(void) {
    struct world wo = {0};
    world = &wo;
    CHECK_OK(tw_entry_wheel_new(100, &wo.wheel));
    wo.periodic = malloc(sizeof *wo.periodic);
    wo.doomed = malloc(sizeof *wo.doomed);
    wo.victim = malloc(sizeof *wo.victim);
    CHECK(wo.periodic && wo.doomed && wo.victim);
    CHECK_OK(tw_entry_init(&wo.periodic->timer, on_periodic));
    CHECK_OK(tw_entry_init(&wo.doomed->timer, on_closer));
    CHECK_OK(tw_entry_init(&wo.victim->timer, on_victim));
    CHECK_OK(tw_entry_schedule(wo.wheel, &wo.periodic->timer, 10));
    CHECK_OK(tw_entry_schedule(wo.wheel, &wo.doomed->timer, 15));
    CHECK_OK(tw_entry_schedule(wo.wheel, &wo.victim->timer, 15)); /* after the closer */
    size_t expired = 0;
    bool complete = false;
    CHECK_OK(tw_entry_wheel_advance(wo.wheel, 1000, SIZE_MAX, NULL, &expired, &complete));
    CHECK(complete && expired == 4); /* periodic x3 + closer */
    CHECK(wo.periodic_fired == 3 && wo.closer_fired == 1 && wo.victim_fired == 0);
    CHECK(wo.reentrant_seen == 3 && wo.doomed == NULL);
    /* Not armed any more: the records may be freed. */
    free(wo.periodic);
    free(wo.victim);
    tw_entry_wheel_free(wo.wheel);
    world = NULL;
}

static void test_freeing_the_wheel_detaches_entries(void) {
    tw_entry_wheel *w = NULL;
    CHECK_OK(tw_entry_wheel_new(0, &w));
    struct conn *c = malloc(sizeof *c);
    CHECK(c);
    CHECK_OK(tw_entry_init(&c->timer, record));
    CHECK_OK(tw_entry_schedule(w, &c->timer, 1000000));
    tw_entry_wheel_free(w);
    bool armed = true;
    CHECK_OK(tw_entry_deadline(&c->timer, &armed, NULL));
    CHECK(!armed);
    bool cancelled = true;
    CHECK_OK(tw_entry_cancel(&c->timer, &cancelled));
    CHECK(!cancelled);
    /* Armed again on another wheel, then cancelled and freed. */
    CHECK_OK(tw_entry_wheel_new(0, &w));
    CHECK_OK(tw_entry_schedule(w, &c->timer, 5));
    CHECK_OK(tw_entry_cancel(&c->timer, &cancelled));
    CHECK(cancelled);
    free(c);
    size_t len = 1;
    CHECK_OK(tw_entry_wheel_len(w, &len));
    CHECK(len == 0);
    tw_entry_wheel_free(w);
}

static void test_bad_input(void) {
    tw_entry_wheel *a = NULL, *b = NULL;
    CHECK_OK(tw_entry_wheel_new(0, &a));
    CHECK_OK(tw_entry_wheel_new(0, &b));
    struct conn c = {.id = 1};
    CHECK_RESULT(tw_entry_init(NULL, record), TW_NULL_POINTER);
    CHECK_RESULT(tw_entry_init(&c.timer, NULL), TW_NULL_POINTER);
    CHECK_OK(tw_entry_init(&c.timer, record));
    CHECK_RESULT(tw_entry_wheel_new(0, NULL), TW_NULL_POINTER);
    CHECK_RESULT(tw_entry_schedule(NULL, &c.timer, 1), TW_NULL_POINTER);
    CHECK_RESULT(tw_entry_schedule(a, NULL, 1), TW_NULL_POINTER);
    CHECK_RESULT(tw_entry_cancel(NULL, NULL), TW_NULL_POINTER);
    CHECK_RESULT(tw_entry_deadline(&c.timer, NULL, NULL), TW_NULL_POINTER);
    CHECK_RESULT(tw_entry_wheel_advance(NULL, 1, 1, NULL, NULL, NULL), TW_NULL_POINTER);
    CHECK_RESULT(tw_entry_wheel_ticks_to_next_event(a, 5, NULL), TW_NULL_POINTER);
    /* Misaligned entry. */
    _Alignas(8) char bytes[sizeof(tw_entry) + 8];
    CHECK_RESULT(tw_entry_init((tw_entry *)(void *)(bytes + 1), record), TW_INVALID_ARGUMENT);
    /* One wheel at a time. */
    CHECK_OK(tw_entry_schedule(a, &c.timer, 10));
    CHECK_RESULT(tw_entry_schedule(b, &c.timer, 10), TW_FOREIGN_ENTRY);
    CHECK_RESULT(tw_entry_schedule_in_range(b, &c.timer, 1, 20, NULL), TW_FOREIGN_ENTRY);
    CHECK(strcmp(tw_result_str(TW_FOREIGN_ENTRY), "TW_FOREIGN_ENTRY") == 0);
    bool armed = false;
    uint64_t deadline = 0;
    CHECK_OK(tw_entry_deadline(&c.timer, &armed, &deadline));
    CHECK(armed && deadline == 10);
    CHECK_OK(tw_entry_cancel(&c.timer, NULL));
    CHECK_OK(tw_entry_schedule(b, &c.timer, 10));
    CHECK_OK(tw_entry_cancel(&c.timer, NULL));
    tw_entry_wheel_free(NULL);
    tw_entry_wheel_free(a);
    tw_entry_wheel_free(b);
}

/* ---- tw_entry_wheel_poll: the caller handles each due entry itself ---- */

/* The callback the last poll_one wrote (the entry's own, NULL with no
 * entry). */
static tw_entry_fn last_callback;

/* A second callback, to tell entries apart by theirs. */
static void record_too(tw_entry *e, void *ctx) {
    record(e, ctx);
}

/* One poll: the entry handed out, checked no longer armed, or NULL when
 * the pass ended; its callback in last_callback. */
static tw_entry *poll_one(tw_entry_wheel *w, uint64_t target) {
    static tw_entry marker;
    tw_entry *e = &marker;
    tw_entry_fn cb = record_too;
    CHECK_OK(tw_entry_wheel_poll(w, target, &e, &cb));
    CHECK(e != &marker);
    CHECK((e == NULL) == (cb == NULL));
    last_callback = cb;
    if (e) {
        bool armed = true;
        CHECK_OK(tw_entry_deadline(e, &armed, NULL));
        CHECK(!armed);
    }
    return e;
}

static uint64_t now_of(tw_entry_wheel *w) {
    uint64_t now = UINT64_MAX;
    CHECK_OK(tw_entry_wheel_now(w, &now));
    return now;
}

/* Polls once and checks it handed out `c` on tick `tick`. */
static void expect_poll(tw_entry_wheel *w, uint64_t target, struct conn *c, uint64_t tick) {
    tw_entry *e = poll_one(w, target);
    CHECK(e == &c->timer);
    CHECK(now_of(w) == tick);
}

static void test_poll_order_and_exact_ticks(void) {
    tw_entry_wheel *w = NULL;
    CHECK_OK(tw_entry_wheel_new(0, &w));
    struct conn c[5];
    init_conns(c, 5, record);
    /* c[1] has a callback of its own, which its poll hands back. */
    CHECK_OK(tw_entry_init(&c[1].timer, record_too));
    /* As test_order_and_exact_ticks, and one due after the target. */
    CHECK_OK(tw_entry_schedule(w, &c[0].timer, 5000));
    CHECK_OK(tw_entry_schedule(w, &c[1].timer, 70));
    CHECK_OK(tw_entry_schedule(w, &c[2].timer, 5000));
    CHECK_OK(tw_entry_schedule_at(w, &c[3].timer, 3));
    CHECK_OK(tw_entry_schedule(w, &c[0].timer, 5000)); /* now after 2 */
    CHECK_OK(tw_entry_schedule(w, &c[4].timer, 20000));
    expect_poll(w, 10000, &c[3], 3);
    CHECK(last_callback == record);
    expect_poll(w, 10000, &c[1], 70);
    CHECK(last_callback == record_too);
    expect_poll(w, 10000, &c[2], 5000);
    CHECK(last_callback == record);
    expect_poll(w, 10000, &c[0], 5000);
    CHECK(poll_one(w, 10000) == NULL);
    CHECK(now_of(w) == 10000);
    CHECK(poll_one(w, 10000) == NULL); /* a pass of its own, empty */
    expect_poll(w, 20000, &c[4], 20000);
    CHECK(poll_one(w, 20000) == NULL);
    tw_entry_wheel_free(w);
}

/* CONTRACT 1: an entry re-armed with delay 0 during a poll pass comes in
 * the next pass, on its tick, first; one that always re-arms itself so
 * comes once per pass, and the loop that polls until NULL ends. */
static void test_poll_a_zero_delay_waits_for_the_next_pass(void) {
    tw_entry_wheel *w = NULL;
    CHECK_OK(tw_entry_wheel_new(0, &w));
    struct conn c[3];
    init_conns(c, 3, record);
    CHECK_OK(tw_entry_schedule(w, &c[0].timer, 5));
    CHECK_OK(tw_entry_schedule(w, &c[1].timer, 5));
    CHECK_OK(tw_entry_schedule(w, &c[2].timer, 9));
    expect_poll(w, 100, &c[0], 5);
    CHECK_OK(tw_entry_schedule(w, &c[0].timer, 0));
    expect_poll(w, 100, &c[1], 5); /* armed before the pass reached 5 */
    CHECK(poll_one(w, 100) == NULL); /* the pass ends where 0 waits */
    CHECK(now_of(w) == 5);
    for (int pass = 0; pass < 3; pass++) {
        int handed = 0;
        for (tw_entry *e; (e = poll_one(w, 100)) != NULL; handed++) {
            CHECK(e == &c[0].timer && now_of(w) == 5);
            CHECK_OK(tw_entry_schedule(w, e, 0));
        }
        CHECK(handed == 1);
    }
    CHECK_OK(tw_entry_cancel(&c[0].timer, NULL));
    expect_poll(w, 100, &c[2], 9);
    CHECK(poll_one(w, 100) == NULL);
    CHECK(now_of(w) == 100);
    tw_entry_wheel_free(w);
}

/* A handler cancels an entry due on the same tick before it is polled,
 * and frees the record of the entry it was given (ASan and valgrind see a
 * later touch of either). */
static void test_poll_handler_cancels_and_frees(void) {
    tw_entry_wheel *w = NULL;
    CHECK_OK(tw_entry_wheel_new(0, &w));
    struct conn *c[3];
    for (int i = 0; i < 3; i++) {
        c[i] = malloc(sizeof *c[i]);
        CHECK(c[i]);
        c[i]->id = i;
        CHECK_OK(tw_entry_init(&c[i]->timer, record));
        CHECK_OK(tw_entry_schedule(w, &c[i]->timer, i < 2 ? 10 : 11));
    }
    tw_entry *e = poll_one(w, 50);
    CHECK(e == &c[0]->timer);
    bool cancelled = false;
    CHECK_OK(tw_entry_cancel(&c[1]->timer, &cancelled));
    CHECK(cancelled);
    free(c[1]);
    free(CONN_OF(e));
    expect_poll(w, 50, c[2], 11);
    CHECK(poll_one(w, 50) == NULL);
    size_t len = 1;
    CHECK_OK(tw_entry_wheel_len(w, &len));
    CHECK(len == 0);
    free(c[2]);
    tw_entry_wheel_free(w);
}

static void test_poll_target_before_now_and_bad_input(void) {
    tw_entry_wheel *w = NULL;
    CHECK_OK(tw_entry_wheel_new(100, &w));
    struct conn c[2] = {{.id = 0}, {.id = 1}};
    CHECK_OK(tw_entry_init(&c[0].timer, record));
    CHECK_OK(tw_entry_init(&c[1].timer, record));
    CHECK_OK(tw_entry_schedule_at(w, &c[0].timer, 40)); /* in the past: due now */
    CHECK_OK(tw_entry_schedule(w, &c[1].timer, 0));
    tw_entry *e = &c[0].timer;
    CHECK_RESULT(tw_entry_wheel_poll(NULL, 200, &e, NULL), TW_NULL_POINTER);
    CHECK_RESULT(tw_entry_wheel_poll(w, 200, NULL, NULL), TW_NULL_POINTER);
    CHECK(e == &c[0].timer); /* not written on failure */
    CHECK(now_of(w) == 100);
    expect_poll(w, 7, &c[0], 100); /* a target before now counts as now */
    expect_poll(w, 7, &c[1], 100);
    CHECK(poll_one(w, 7) == NULL);
    CHECK(now_of(w) == 100); /* never backwards */
    tw_entry_wheel_free(w);
}

/* Polling from an advance's callback is refused; an advance made while a
 * poll pass is open ends that pass and begins its own; the wheel may be
 * freed between two polls of a pass. */
static void on_fire_poll_refused(tw_entry *e, void *ctx) {
    struct log *log = ctx;
    record(e, ctx);
    tw_entry *got = e;
    CHECK_RESULT(tw_entry_wheel_poll(log->wheel, 1000, &got, NULL), TW_REENTRANT);
    CHECK(got == e);
    if (log->n == 1) {
        CHECK_OK(tw_entry_schedule(log->wheel, e, 0)); /* waits: advance incomplete */
    }
}

static void test_poll_and_advance_and_free(void) {
    tw_entry_wheel *w = NULL;
    CHECK_OK(tw_entry_wheel_new(0, &w));
    struct conn c[3];
    for (int i = 0; i < 3; i++) {
        c[i].id = i;
        CHECK_OK(tw_entry_init(&c[i].timer, on_fire_poll_refused));
        CHECK_OK(tw_entry_schedule(w, &c[i].timer, i < 2 ? 5 : 8));
    }
    expect_poll(w, 100, &c[0], 5);
    CHECK_OK(tw_entry_schedule(w, &c[0].timer, 0)); /* would wait for the next poll pass */
    struct log log = {.wheel = w};
    size_t expired = 0;
    bool complete = true;
    CHECK_OK(tw_entry_wheel_advance(w, 100, SIZE_MAX, &log, &expired, &complete));
    /* The advance's own pass: 0 is due in it, after 1; 1's zero-delay
     * re-arm waits for the next pass, and 2 (tick 8) behind it. */
    CHECK(expired == 2 && !complete && log.n == 2);
    CHECK(log.ids[0] == 1 && log.ticks[0] == 5 && log.ids[1] == 0 && log.ticks[1] == 5);
    expect_poll(w, 100, &c[1], 5);
    /* Freed in the middle of the pass: 2 is detached. */
    tw_entry_wheel_free(w);
    bool armed = true;
    CHECK_OK(tw_entry_deadline(&c[2].timer, &armed, NULL));
    CHECK(!armed);
}

/* Polling until NULL fires what an uncapped advance fires: two wheels with
 * the same entries, one advanced (the callback below) and one polled, with
 * the same handler (`churn`), the same ticks and order, the same time after
 * each step, over targets that stand still, go back and jump. */
#define TWIN_N 64

struct twin {
    tw_entry_wheel *wheel;
    struct conn c[TWIN_N];
    int fired;
    int ids[4096];
    uint64_t ticks[4096];
};

/* What a handler does with entry `id` fired on `tick`: re-arms it (delays
 * 0 to a few thousand), cancels another, arms another at an absolute tick
 * (sometimes past), or nothing; decided from its arguments alone. */
static void churn(struct twin *t, int id, uint64_t tick) {
    CHECK(t->fired < 4096);
    t->ids[t->fired] = id;
    t->ticks[t->fired] = tick;
    t->fired++;
    uint64_t x = ((uint64_t)id + 1) * 0x9e3779b97f4a7c15u ^ tick ^ ((uint64_t)t->fired << 32);
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9u;
    x ^= x >> 32;
    tw_entry *self = &t->c[id].timer, *other = &t->c[(x >> 8) % TWIN_N].timer;
    switch (x % 8) {
    case 0:
    case 1: CHECK_OK(tw_entry_schedule(t->wheel, self, 0)); break;
    case 2:
    case 3: CHECK_OK(tw_entry_schedule(t->wheel, self, (x >> 16) % 70)); break;
    case 4: CHECK_OK(tw_entry_schedule(t->wheel, self, (x >> 16) % 5000)); break;
    case 5: CHECK_OK(tw_entry_cancel(other, NULL)); break;
    case 6:
        CHECK_OK(tw_entry_schedule_at(t->wheel, other, (tick > 3 ? tick - 3 : 0) + (x >> 16) % 9));
        break;
    default: break;
    }
}

static void on_twin(tw_entry *e, void *ctx) {
    struct twin *t = ctx;
    churn(t, CONN_OF(e)->id, now_of(t->wheel));
}

static void test_poll_fires_what_an_advance_fires(void) {
    static struct twin pushed, pulled;
    struct twin *twins[2] = {&pushed, &pulled};
    for (int k = 0; k < 2; k++) {
        CHECK_OK(tw_entry_wheel_new(0, &twins[k]->wheel));
        for (int i = 0; i < TWIN_N; i++) {
            twins[k]->c[i].id = i;
            CHECK_OK(tw_entry_init(&twins[k]->c[i].timer, on_twin));
            uint64_t tick = ((uint64_t)i * 7919) % 3000 + (i % 10 == 0 ? 9000 : 0);
            CHECK_OK(tw_entry_schedule_at(twins[k]->wheel, &twins[k]->c[i].timer, tick));
        }
    }
    uint64_t target = 0;
    for (uint64_t step = 0; step < 300; step++) {
        target = step % 7 == 0 ? target
                 : step % 7 == 1 ? (target > 20 ? target - 20 : 0)
                                 : target + (step * 37) % 120;
        CHECK_OK(tw_entry_wheel_advance(pushed.wheel, target, SIZE_MAX, &pushed, NULL, NULL));
        for (tw_entry *e; (e = poll_one(pulled.wheel, target)) != NULL;) {
            churn(&pulled, CONN_OF(e)->id, now_of(pulled.wheel));
        }
        CHECK(now_of(pushed.wheel) == now_of(pulled.wheel));
    }
    CHECK(pushed.fired == pulled.fired && pushed.fired > 2 * TWIN_N);
    int again = 0; /* firings on the tick of the entry's previous one */
    for (int i = 0; i < pushed.fired; i++) {
        CHECK(pushed.ids[i] == pulled.ids[i] && pushed.ticks[i] == pulled.ticks[i]);
        for (int j = i - 1; j >= 0 && pushed.ticks[j] == pushed.ticks[i]; j--) {
            again += pushed.ids[j] == pushed.ids[i];
        }
    }
    CHECK(again > 0); /* zero delays were exercised */
    tw_entry_wheel_free(pushed.wheel);
    tw_entry_wheel_free(pulled.wheel);
}

/* The next-event forms: each call goes to the next tick an entry is due
 * at (within the cap) and fires or hands out that tick's entries only;
 * with nothing due within the cap, time moves the cap; a re-arm for a
 * later tick inside the cap waits for the next call. */
static void test_next_event_forms(void) {
    tw_entry_wheel *w = NULL;
    CHECK_OK(tw_entry_wheel_new(0, &w));
    struct conn c[3];
    init_conns(c, 3, record);
    CHECK_OK(tw_entry_schedule(w, &c[0].timer, 5));
    CHECK_OK(tw_entry_schedule(w, &c[1].timer, 5));
    CHECK_OK(tw_entry_schedule(w, &c[2].timer, 9));
    struct log log = {.wheel = w};
    uint64_t tick = 0;
    size_t expired = 0;
    bool complete = false;
    CHECK_OK(tw_entry_wheel_advance_to_next(w, 100, SIZE_MAX, &log, &tick, &expired, &complete));
    CHECK(tick == 5 && expired == 2 && complete && log.n == 2);
    CHECK(log.ids[0] == 0 && log.ids[1] == 1 && log.ticks[1] == 5);
    /* The pull form: c[2] on 9, then NULL; the pass stays on 9. */
    CHECK_OK(tw_entry_schedule(w, &c[0].timer, 1)); /* due on 6 */
    tw_entry *e = NULL;
    CHECK_OK(tw_entry_wheel_poll_to_next(w, 100, &e, NULL));
    CHECK(e == &c[0].timer && now_of(w) == 6);
    CHECK_OK(tw_entry_wheel_poll_to_next(w, 100, &e, NULL));
    CHECK(e == NULL && now_of(w) == 6);
    CHECK_OK(tw_entry_wheel_poll_to_next(w, 100, &e, NULL));
    CHECK(e == &c[2].timer && now_of(w) == 9);
    CHECK_OK(tw_entry_wheel_poll_to_next(w, 100, &e, NULL));
    CHECK(e == NULL && now_of(w) == 9);
    /* Nothing armed: the cap. */
    CHECK_OK(tw_entry_wheel_advance_to_next(w, 100, SIZE_MAX, &log, &tick, &expired, &complete));
    CHECK(tick == 109 && expired == 0 && complete && log.n == 2);
    CHECK_OK(tw_entry_wheel_poll_to_next(w, 40, &e, NULL));
    CHECK(e == NULL && now_of(w) == 149);
    /* Bad input is refused and moves no time. */
    CHECK_RESULT(tw_entry_wheel_advance_to_next(NULL, 5, 1, NULL, NULL, NULL, NULL), TW_NULL_POINTER);
    CHECK_RESULT(tw_entry_wheel_poll_to_next(w, 5, NULL, NULL), TW_NULL_POINTER);
    CHECK(now_of(w) == 149);
    tw_entry_wheel_free(w);
}

int main(void) {
    test_order_and_exact_ticks();
    test_range_and_capped_advance();
    test_a_moved_entry_fires_after_those_already_armed();
    test_callbacks_change_the_wheel_and_free_records();
    test_freeing_the_wheel_detaches_entries();
    test_bad_input();
    test_poll_order_and_exact_ticks();
    test_poll_a_zero_delay_waits_for_the_next_pass();
    test_poll_handler_cancels_and_frees();
    test_poll_target_before_now_and_bad_input();
    test_poll_and_advance_and_free();
    test_poll_fires_what_an_advance_fires();
    test_next_event_forms();
    printf("test_entry: passed\n");
    return 0;
}
