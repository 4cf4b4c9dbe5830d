// C++17 tests of include/tickwheel.hpp: RAII service, move-only timers,
// callbacks from any callable (also move-only ones), heap-allocated callables
// destroyed exactly once whether the timer fires, is stopped, is reset from
// its own callback, or the service goes first; and std::threads starting and
// stopping timers on each other's shards.
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "check.h"
#include "tickwheel.hpp"

using namespace std::chrono_literals;
using tickwheel::restart_outcome;
using tickwheel::stop_outcome;
using tickwheel::stop_sync_outcome;

namespace {

std::atomic<int> live_callables{0};

// A callable that counts its live copies, to catch leaks and double frees.
struct counted {
    std::atomic<int> *fired;
    explicit counted(std::atomic<int> *f) : fired(f) { ++live_callables; }
    counted(const counted &other) : fired(other.fired) { ++live_callables; }
    counted(counted &&other) noexcept : fired(other.fired) { ++live_callables; }
    ~counted() { --live_callables; }
    void operator()(const tw_expiry &) { ++*fired; }
};

tickwheel::config manual_config(std::size_t shards = 1) {
    tickwheel::config cfg;
    cfg.shards = shards;
    cfg.tick = 1ms;
    cfg.embedded = true;
    cfg.manual_clock = true;
    return cfg;
}

void wait_for(const std::atomic<int> &value, int at_least) {
    for (int i = 0; i < 5000 && value.load() < at_least; i++) {
        std::this_thread::sleep_for(1ms);
    }
    CHECK(value.load() >= at_least);
}

void test_raii_and_outcomes() {
    tickwheel::service svc(manual_config());
    tickwheel::shard shard = svc.claim(0);
    CHECK(shard.index() == 0 && svc.shard_count() == 1 && svc.tick() == 1ms);
    CHECK(shard.next_timeout_ms() == -1 && !shard.next_deadline());
    std::atomic<int> fired{0};
    {
        tickwheel::timer t = svc.start(5ms, counted(&fired));
        CHECK(t && t.armed() && live_callables == 1);
        CHECK(shard.next_deadline() == std::chrono::nanoseconds(5ms));
        svc.advance_clock(5ms);
        CHECK(shard.poll() == 1 && fired == 1 && !t.armed());
        CHECK(t.stop() == stop_outcome::fired);
        CHECK(t.restart(2ms) == restart_outcome::rearmed);
        CHECK(t.restart(3ms) == restart_outcome::moved);
        CHECK(t.stop() == stop_outcome::cancelled);
        CHECK(t.stop() == stop_outcome::inactive);
        CHECK(t.stop_sync() == stop_sync_outcome::inactive);
        // Moving the handle moves ownership; the moved-from one is empty.
        tickwheel::timer moved = std::move(t);
        CHECK(!t && moved && t.stop() == stop_outcome::inactive);
        CHECK(!t.restart(1ms));
        CHECK(live_callables == 1);
    }
    // Handle gone: the service frees the callable at the owner's next poll.
    shard.poll();
    CHECK(live_callables == 0);

    // A plain lambda, a std::function, a move-only callable, one taking ().
    std::atomic<int> calls{0};
    auto plain = svc.start(1ms, [&calls] { ++calls; });
    std::function<void(const tw_expiry &)> function = [&calls](const tw_expiry &e) {
        CHECK(e.deadline_tick == 6 && e.poll_tick == 6 && e.lateness_ns == 0);
        ++calls;
    };
    auto wrapped = svc.start(1ms, function);
    auto owned = std::make_unique<int>(41);
    auto move_only = svc.start(1ms, [&calls, p = std::move(owned)] { calls += *p - 40; });
    auto periodic = svc.start_periodic(2ms, [&calls] { ++calls; });
    auto within = svc.start_within(1ms, 4ms, [&calls] { ++calls; });
    for (int i = 0; i < 4; i++) { // tick by tick: nobody is late
        svc.advance_clock(1ms);
        shard.poll();
    }
    CHECK(calls == 6); // 3 one-shots, the periodic twice (7, 9), the range one
    periodic.reset();
    svc.advance_clock(10ms);
    shard.poll();
    CHECK(calls == 6);

    // Errors throw, with the code, and destroy the callable.
    bool threw = false;
    try {
        tw_timer_spec spec{};
        spec.flags = TW_TIMER_ON_SHARD;
        spec.shard = 5;
        (void)svc.schedule(spec, counted(&fired));
    } catch (const tickwheel::error &e) {
        threw = e.code() == TW_SHARD_OUT_OF_RANGE;
    }
    CHECK(threw && live_callables == 0);
    threw = false;
    try {
        (void)svc.start_periodic(0ms, [] {});
    } catch (const tickwheel::error &e) {
        threw = e.code() == TW_INVALID_PERIOD;
    }
    CHECK(threw);
    threw = false;
    try {
        (void)svc.claim(0); // already ours
    } catch (const tickwheel::error &e) {
        threw = e.code() == TW_SHARD_CLAIMED;
    }
    CHECK(threw);
}

void test_callbacks_on_their_own_timer() {
    tickwheel::service svc(manual_config());
    tickwheel::shard shard = svc.claim(0);
    std::atomic<int> fired{0};

    // A callback that resets (frees) its own handle: the callable lives until
    // it returns, then the service destroys it.
    tickwheel::timer self;
    struct self_reset {
        tickwheel::timer *handle;
        std::atomic<int> *fired;
        counted guard;
        void operator()() {
            ++*fired;
            handle->reset();
            CHECK(live_callables == 1); // still alive while running
        }
    };
    self = svc.start(1ms, self_reset{&self, &fired, counted(&fired)});
    svc.advance_clock(1ms);
    CHECK(shard.poll() == 1 && fired == 1 && !self);
    CHECK(live_callables == 0);

    // Restart itself, stop_sync itself.
    int runs = 0;
    tickwheel::timer again;
    again = svc.start(1ms, [&] {
        if (++runs < 3) {
            CHECK(again.restart(1ms) == restart_outcome::rearmed);
        } else {
            CHECK(again.stop_sync() == stop_sync_outcome::from_own_callback);
        }
    });
    for (int i = 0; i < 6; i++) {
        svc.advance_clock(1ms);
        shard.poll();
    }
    CHECK(runs == 3);

    // A callable that owns another timer: destroying it (when the service
    // lets go of it) frees that timer too.
    std::atomic<int> inner_fired{0};
    tickwheel::timer outer;
    {
        tickwheel::timer inner = svc.start(1h, counted(&inner_fired));
        outer = svc.start(1h, [owned = std::make_shared<tickwheel::timer>(std::move(inner))] {});
    }
    CHECK(live_callables == 1);
    outer.reset();
    shard.poll();
    shard.poll();
    CHECK(live_callables == 0 && inner_fired == 0);

    // A poll from inside a callback of the same shard throws inside the
    // callback; catch it there (nothing may escape a callback).
    bool refused = false;
    auto reentrant = svc.start(1ms, [&] {
        try {
            shard.poll();
        } catch (const tickwheel::error &e) {
            refused = e.code() == TW_REENTRANT;
        }
    });
    svc.advance_clock(1ms);
    shard.poll();
    CHECK(refused);
}

void test_service_goes_first() {
    std::atomic<int> fired{0};
    tickwheel::timer survivor;
    tickwheel::timer holder_of_self;
    {
        tickwheel::config cfg;
        cfg.shards = 2;
        tickwheel::service svc(cfg);
        survivor = svc.start(1h, counted(&fired));
        for (int i = 0; i < 50; i++) {
            svc.start(1h, counted(&fired)).forget();
        }
        // A callable that holds a handle to another timer, destroyed during
        // the service's own destruction: must not call into the dying service.
        auto other = std::make_shared<tickwheel::timer>(svc.start(1h, counted(&fired)));
        holder_of_self = svc.start(1h, [other, c = counted(&fired)] {});
        CHECK(live_callables == 53);
    }
    // Every callable was destroyed by the service, none ran.
    CHECK(live_callables == 0 && fired == 0);
    // Handles that outlived their service are inert.
    CHECK(survivor.stop() == stop_outcome::inactive && !survivor.armed());
    CHECK(!survivor.restart(1ms));
    survivor.reset();
    holder_of_self.reset();

    // Shut down, then free: starts throw, old handles are inactive.
    tickwheel::service svc;
    tickwheel::timer t = svc.start(1h, counted(&fired));
    svc.shutdown();
    CHECK(live_callables == 0 && t.stop() == stop_outcome::inactive);
    bool threw = false;
    try {
        (void)svc.start(1ms, [] {});
    } catch (const tickwheel::error &e) {
        threw = e.code() == TW_SHUTDOWN;
    }
    CHECK(threw);

    // Move assignment of services frees the old one.
    tickwheel::service a;
    tickwheel::timer ta = a.start(1h, counted(&fired));
    a = tickwheel::service();
    CHECK(live_callables == 0 && ta.stop() == stop_outcome::inactive);
}

void test_driver_threads_and_wake() {
    tickwheel::service svc;
    std::atomic<int> fired{0};
    auto t = svc.start(2ms, counted(&fired));
    wait_for(fired, 1);
    CHECK(t.stop() == stop_outcome::fired);

    // An embedded shard on another std::thread, woken through `wake`.
    std::atomic<int> wakes{0};
    tickwheel::config cfg;
    cfg.shards = 1;
    cfg.embedded = true;
    cfg.wake = [&wakes](std::size_t shard) {
        CHECK(shard == 0);
        ++wakes;
    };
    tickwheel::service embedded(cfg);
    std::atomic<bool> stop{false};
    std::atomic<int> embedded_fired{0};
    std::thread owner([&] {
        tickwheel::shard shard = embedded.claim(0);
        while (!stop.load()) {
            shard.poll();
            int ms = shard.next_timeout_ms();
            // Stand-in for epoll_wait: sleep at most 1 ms at a time.
            std::this_thread::sleep_for(ms < 0 || ms > 1 ? 1ms : std::chrono::milliseconds(ms));
        }
    });
    std::this_thread::sleep_for(5ms); // let the owner go to sleep
    auto e = embedded.start(1ms, counted(&embedded_fired));
    wait_for(embedded_fired, 1);
    CHECK(wakes >= 1);
    stop = true;
    owner.join();
}

void test_threads_on_each_others_shards() {
    tickwheel::config cfg;
    cfg.shards = 4;
    cfg.tick = 100us;
    tickwheel::service svc(cfg);
    std::atomic<int> fired{0};
    std::atomic<long> cancelled{0};
    constexpr int kThreads = 8;
    constexpr int kRounds = 1500;
    std::vector<tickwheel::timer> shared(64);
    std::vector<std::mutex> locks(64);
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; i++) {
        threads.emplace_back([&, i] {
            unsigned seed = 17u * static_cast<unsigned>(i) + 3u;
            for (int round = 0; round < kRounds; round++) {
                seed = seed * 1103515245u + 12345u;
                tw_timer_spec spec{};
                spec.delay_ns = (seed >> 8) % 500000;
                spec.flags = TW_TIMER_ON_SHARD;
                spec.shard = (seed >> 4) % 4;
                tickwheel::timer t = svc.schedule(spec, counted(&fired));
                std::size_t slot = (seed >> 12) % shared.size();
                tickwheel::timer previous;
                {
                    std::lock_guard<std::mutex> guard(locks[slot]);
                    previous = std::exchange(shared[slot], std::move(t));
                }
                if (previous && previous.stop() == stop_outcome::cancelled) {
                    ++cancelled;
                }
                // `previous` goes out of scope: its handle is freed here.
            }
        });
    }
    for (auto &thread : threads) {
        thread.join();
    }
    for (auto &t : shared) {
        if (t.stop_sync() == stop_sync_outcome::cancelled) {
            ++cancelled;
        }
        t.reset();
    }
    // stop_sync / stop decided every arming: started == fired + cancelled.
    // Fires still in flight finish before the service is destroyed.
    svc.shutdown();
    CHECK(static_cast<long>(fired.load()) + cancelled.load() == long{kThreads} * kRounds);
    CHECK(live_callables == 0);
    std::printf("test_cpp: %d fired, %ld cancelled on 4 shards from %d threads\n", fired.load(),
                cancelled.load(), kThreads);
}

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

void test_time_points() {
    tickwheel::service svc(manual_config());
    tickwheel::shard shard = svc.claim(0);
    std::atomic<int> fired{0};
    test_clock::now_ns = 7'000'000'000;

    // 5 ms after the test clock's now: the service fires it 5 ms from its own.
    tickwheel::timer t = svc.start(test_clock::now() + 5ms, counted(&fired));
    CHECK(shard.next_deadline() == std::chrono::nanoseconds(5ms));
    test_clock::now_ns += 1'000'000;
    CHECK(t.restart(test_clock::now() + 7ms) == restart_outcome::moved);
    CHECK(shard.next_deadline() == std::chrono::nanoseconds(7ms));
    // A fractional deadline rounds up (2.5 ms: due at tick 3).
    auto fractional = test_clock::now() + std::chrono::duration<double, std::milli>(2.5);
    CHECK(t.restart(fractional) == restart_outcome::moved);
    CHECK(shard.next_deadline() == std::chrono::nanoseconds(3ms));
    svc.advance_clock(3ms);
    CHECK(shard.poll() == 1 && fired == 1);

    // A deadline already past is due now: the next poll fires it, with no
    // tick to wait for.
    tickwheel::timer late = svc.start(test_clock::now() - 1s, counted(&fired));
    CHECK(shard.next_deadline() == std::chrono::nanoseconds(0));
    CHECK(shard.poll() == 1 && fired == 2);
    CHECK(late.restart(test_clock::now() - 1h) == restart_outcome::rearmed);
    CHECK(shard.next_deadline() == std::chrono::nanoseconds(0));
    CHECK(shard.poll() == 1 && fired == 3);

    // The farthest time point (in hours, which overflow as nanoseconds)
    // saturates instead of wrapping to the past.
    tickwheel::timer far =
        svc.start(std::chrono::time_point<test_clock, std::chrono::hours>::max(), counted(&fired));
    auto far_deadline = shard.next_deadline();
    CHECK(far.armed() && far_deadline && *far_deadline > std::chrono::hours(24 * 365 * 200));
    CHECK(shard.poll() == 0 && fired == 3);
    far.reset();

    // A real clock: the delay is measured against its now() (200 ms, less
    // the few microseconds between the two now() calls).
    tickwheel::timer wall = svc.start(std::chrono::system_clock::now() + 200ms, counted(&fired));
    svc.advance_clock(150ms);
    CHECK(shard.poll() == 0 && fired == 3);
    svc.advance_clock(50ms);
    CHECK(shard.poll() == 1 && fired == 4);
}

void test_negative_durations_are_refused() {
    tickwheel::service svc(manual_config());
    tickwheel::shard shard = svc.claim(0);
    std::atomic<int> fired{0};
    auto refused = [](auto &&call) {
        try {
            call();
        } catch (const tickwheel::error &e) {
            return e.code() == TW_INVALID_ARGUMENT;
        }
        return false;
    };
    CHECK(refused([&] { (void)svc.start(-1ms, counted(&fired)); }));
    CHECK(refused([&] { (void)svc.start(-1ns, counted(&fired)); }));
    CHECK(refused([&] { (void)svc.start_periodic(-2ms, counted(&fired)); }));
    CHECK(refused([&] { (void)svc.start_within(-2ms, 1ms, counted(&fired)); }));
    CHECK(refused([&] { (void)svc.start_within(1ms, -2ms, counted(&fired)); }));
    CHECK(refused([&] { svc.advance_clock(-1ms); }));
    CHECK(refused([&] {
        tickwheel::config cfg = manual_config();
        cfg.tick = -1ms;
        tickwheel::service bad(cfg);
    }));
    CHECK(live_callables == 0 && fired == 0);

    // restart: nothing changes, and the status overload says why.
    tickwheel::timer t = svc.start(4ms, counted(&fired));
    CHECK(!t.restart(-1ms));
    tw_result status = TW_OK;
    CHECK(!t.restart(-1ms, status) && status == TW_INVALID_ARGUMENT);
    CHECK(t.armed() && shard.next_deadline() == std::chrono::nanoseconds(4ms));

    // The status overloads exist with exceptions too, and do not throw.
    tickwheel::timer u = svc.start(-1ms, counted(&fired), status);
    CHECK(!u && status == TW_INVALID_ARGUMENT && live_callables == 1);
    u = svc.start(1ms, counted(&fired), status);
    CHECK(u && status == TW_OK);
    tickwheel::timer none;
    CHECK(!none.restart(1ms, status) && status == TW_STALE_HANDLE);
}

} // namespace

int main() {
    test_raii_and_outcomes();
    test_callbacks_on_their_own_timer();
    test_service_goes_first();
    test_driver_threads_and_wake();
    test_threads_on_each_others_shards();
    test_time_points();
    test_negative_durations_are_refused();
    CHECK(live_callables == 0);
    std::printf("test_cpp: all tests passed\n");
    return 0;
}
