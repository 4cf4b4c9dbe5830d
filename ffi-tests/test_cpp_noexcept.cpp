// C++17 test of include/tickwheel.hpp built with -fno-exceptions: only the
// `tw_result &status` overloads exist, and they report every failure
// (wrong arguments, negative durations, shutdown, a claimed shard) with its
// code, destroying the callable; time_point deadlines work as well.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <type_traits>

#include "check.h"
#include "tickwheel.hpp"

#if defined(__cpp_exceptions) || TICKWHEEL_EXCEPTIONS
#error "build this test with -fno-exceptions"
#endif

using namespace std::chrono_literals;

// Without exceptions there is no throwing constructor to fall back on.
static_assert(!std::is_default_constructible_v<tickwheel::service>,
              "no throwing service() without exceptions");

namespace {

std::atomic<int> live_callables{0};

struct counted {
    std::atomic<int> *fired;
    explicit counted(std::atomic<int> *f) : fired(f) { ++live_callables; }
    counted(const counted &other) : fired(other.fired) { ++live_callables; }
    counted(counted &&other) noexcept : fired(other.fired) { ++live_callables; }
    ~counted() { --live_callables; }
    void operator()() { ++*fired; }
};

// A clock the test moves by hand, for the time_point overloads.
struct test_clock {
    using rep = std::int64_t;
    using period = std::nano;
    using duration = std::chrono::nanoseconds;
    using time_point = std::chrono::time_point<test_clock>;
    static constexpr bool is_steady = true;
    static inline std::int64_t now_ns = 0;
    static time_point now() noexcept { return time_point(duration(now_ns)); }
};

void test_status_api() {
    tickwheel::config cfg;
    cfg.shards = 1;
    cfg.tick = 1ms;
    cfg.embedded = true;
    cfg.manual_clock = true;
    tw_result status = TW_PANIC;
    tickwheel::service svc(cfg, status);
    CHECK(status == TW_OK && svc);

    tickwheel::shard shard = svc.claim(0, status);
    CHECK(status == TW_OK && shard);
    tickwheel::shard again = svc.claim(0, status);
    CHECK(status == TW_SHARD_CLAIMED && !again);
    CHECK(svc.shard_count(status) == 1 && status == TW_OK);
    CHECK(svc.tick(status) == 1ms && status == TW_OK);

    std::atomic<int> fired{0};
    tickwheel::timer t = svc.start(2ms, counted(&fired), status);
    CHECK(status == TW_OK && t && live_callables == 1);
    CHECK(shard.next_deadline(status) == std::chrono::nanoseconds(2ms) && status == TW_OK);
    svc.advance_clock(2ms, status);
    CHECK(status == TW_OK);
    CHECK(shard.poll(status) == 1 && status == TW_OK && fired == 1);

    // Restart: outcome and status; a negative delay changes nothing.
    CHECK(t.restart(3ms, status) == tickwheel::restart_outcome::rearmed && status == TW_OK);
    CHECK(!t.restart(-1ms, status) && status == TW_INVALID_ARGUMENT);
    CHECK(shard.next_timeout_ms(status) == 3 && status == TW_OK);

    // An absolute deadline on a test clock: 4 ms from its now.
    test_clock::now_ns = 1'000'000'000;
    CHECK(t.restart(test_clock::now() + 4ms, status) == tickwheel::restart_outcome::moved);
    CHECK(status == TW_OK && shard.next_timeout_ms(status) == 4);
    tickwheel::timer at = svc.start(test_clock::now() + 1ms, counted(&fired), status);
    CHECK(status == TW_OK && at);
    svc.advance_clock(1ms, status);
    CHECK(shard.poll(status) == 1 && fired == 2);

    // Refused: negative durations, a bad range, a zero period, a bad shard.
    // The callable is destroyed each time and the timer is empty.
    CHECK(!svc.start(-1ns, counted(&fired), status) && status == TW_INVALID_ARGUMENT);
    CHECK(!svc.start_periodic(-5ms, counted(&fired), status) && status == TW_INVALID_ARGUMENT);
    CHECK(!svc.start_periodic(0ms, counted(&fired), status) && status == TW_INVALID_PERIOD);
    CHECK(!svc.start_within(-1ms, 1ms, counted(&fired), status) && status == TW_INVALID_ARGUMENT);
    CHECK(!svc.start_within(1ms, -1ms, counted(&fired), status) && status == TW_INVALID_ARGUMENT);
    CHECK(!svc.start_within(2ms, 1ms, counted(&fired), status) && status == TW_INVALID_RANGE);
    tw_timer_spec spec{};
    spec.flags = TW_TIMER_ON_SHARD;
    spec.shard = 3;
    CHECK(!svc.schedule(spec, counted(&fired), status) && status == TW_SHARD_OUT_OF_RANGE);
    svc.advance_clock(-1ms, status);
    CHECK(status == TW_INVALID_ARGUMENT);
    CHECK(live_callables == 2); // only `t`'s and `at`'s

    // A poll from inside a callback of the same shard: TW_REENTRANT, no throw.
    tw_result inner = TW_OK;
    tickwheel::timer reentrant = svc.start(1ms, [&] { (void)shard.poll(inner); }, status);
    svc.advance_clock(1ms, status);
    CHECK(shard.poll(status) == 1 && inner == TW_REENTRANT);

    // Shutdown: starts fail with TW_SHUTDOWN, restarts report it.
    // (This thread still claims the shard, so its timers are swept at its
    // next poll, which reports the shutdown.)
    svc.shutdown(status);
    CHECK(status == TW_OK);
    CHECK(shard.poll(status) == 0 && status == TW_SHUTDOWN && live_callables == 0);
    CHECK(!svc.start(1ms, counted(&fired), status) && status == TW_SHUTDOWN);
    CHECK(!t.restart(1ms, status) && status == TW_SHUTDOWN);
    CHECK(live_callables == 0);

    // A bad config: the service is empty and says why; using it reports
    // TW_NULL_POINTER.
    tickwheel::config bad;
    bad.tick = -1ms;
    tickwheel::service none(bad, status);
    CHECK(status == TW_INVALID_ARGUMENT && !none);
    CHECK(!none.start(1ms, counted(&fired), status) && status == TW_NULL_POINTER);
    CHECK(live_callables == 0);
}

} // namespace

int main() {
    test_status_api();
    CHECK(live_callables == 0);
    std::printf("test_cpp_noexcept: all tests passed\n");
    return 0;
}
