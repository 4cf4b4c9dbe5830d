/* The program a C user writes against an installed tickwheel: it includes
 * <tickwheel.h> through the flags `pkg-config --cflags tickwheel` gives and
 * links with `pkg-config --libs tickwheel` (or `--static`). Built and run by
 * ffi-tests/install_test.sh. It checks that the header and the library
 * agree on the version, and that a timer fires on a manual clock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tickwheel.h>

#define MS 1000000ull

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "install_check: %s:%d: %s\n", __FILE__, __LINE__, \
                    #cond);                                                  \
            exit(1);                                                         \
        }                                                                    \
    } while (0)
#define CHECK_OK(call) CHECK((call) == TW_OK)

static void on_fire(void *ctx, const tw_expiry *expiry) {
    (void)expiry;
    ++*(int *)ctx;
}

int main(void) {
    /* The header's macros and the loaded library's version are the same. */
    char expected[64];
    snprintf(expected, sizeof expected, "%u.%u.%u", (unsigned)TICKWHEEL_VERSION_MAJOR,
             (unsigned)TICKWHEEL_VERSION_MINOR, (unsigned)TICKWHEEL_VERSION_PATCH);
    const char *version = tw_version();
    CHECK(version != NULL);
    CHECK(strncmp(version, expected, strlen(expected)) == 0);

    tw_service_config config = {0};
    config.shards = 1;
    config.flags = TW_SERVICE_EMBEDDED | TW_SERVICE_MANUAL_CLOCK;
    tw_service *service = NULL;
    CHECK_OK(tw_service_new(&config, &service));
    tw_shard *shard = NULL;
    CHECK_OK(tw_shard_claim(service, 0, &shard));

    int fired = 0;
    uint64_t timer = 0;
    CHECK_OK(tw_timer_start(service, 5 * MS, on_fire, &fired, &timer));
    size_t count = 0;
    CHECK_OK(tw_service_advance_clock(service, 4 * MS));
    CHECK_OK(tw_shard_poll(shard, &count));
    CHECK(count == 0 && fired == 0); /* never early */
    CHECK_OK(tw_service_advance_clock(service, MS));
    CHECK_OK(tw_shard_poll(shard, &count));
    CHECK(count == 1 && fired == 1); /* on its deadline */
    CHECK_OK(tw_timer_free(service, timer));

    CHECK_OK(tw_shard_release(shard));
    tw_service_free(service);
    printf("install_check: tickwheel %s (header %s) passed\n", version, expected);
    return 0;
}
