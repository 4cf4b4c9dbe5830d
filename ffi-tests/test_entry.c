/* Tests of the embedded timers of the C ABI (tw_entry, tw_entry_wheel):
 * order and exact ticks, range scheduling, the capped advance, callbacks
 * that re-arm, cancel and free entries (their own included), the rules of
 * who may free what when (run under ASan and valgrind by ffi-tests/run.sh,
 * so a use of freed memory fails), and bad input. Prints "passed". */
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

static void test_order_and_exact_ticks(void) {
    tw_entry_wheel *w = NULL;
    CHECK_OK(tw_entry_wheel_new(0, &w));
    struct conn c[4];
    for (int i = 0; i < 4; i++) {
        c[i].id = i;
        CHECK_OK(tw_entry_init(&c[i].timer, record));
    }
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
    for (int i = 0; i < 3; i++) {
        c[i].id = i;
        CHECK_OK(tw_entry_init(&c[i].timer, record));
    }
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

int main(void) {
    test_order_and_exact_ticks();
    test_range_and_capped_advance();
    test_a_moved_entry_fires_after_those_already_armed();
    test_callbacks_change_the_wheel_and_free_records();
    test_freeing_the_wheel_detaches_entries();
    test_bad_input();
    printf("test_entry: passed\n");
    return 0;
}
