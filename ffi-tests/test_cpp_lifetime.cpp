// C++17 tests of the wrapper's lifetime guarantees against callbacks that
// are running right now on a driver thread (CONTRACT 17):
//  * an object that owns a `tickwheel::timer` and is destroyed (or whose timer
//    is reset) on another thread while that timer's callback runs and touches
//    the object: the destructor must not return before the callback has
//    returned (stop-and-wait). Before the fix the callback wrote to freed
//    memory: ASan reports a heap-use-after-free, and plain builds fail the
//    `returned_first` checks below.
//  * the same from inside the callback itself (the object deletes itself):
//    no waiting for oneself, no deadlock.
//  * `service` destroyed while callbacks on its driver threads use their
//    timers (`timer::armed`, `restart`): race-free under TSan (before the
//    fix, the wrapper's shared service pointer was a plain pointer written by
//    destroy and read by those callbacks).
// Run plain, under ASan/UBSan, valgrind and TSan by ffi-tests/run.sh.
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "check.h"
#include "tickwheel.hpp"

using namespace std::chrono_literals;

namespace {

void wait_until(const std::atomic<bool> &flag) {
    for (int i = 0; i < 10000 && !flag.load(); i++) {
        std::this_thread::sleep_for(1ms);
    }
    CHECK(flag.load());
}

// An object whose timer callback touches the object for a while (a session
// with an idle timeout, say). `timer` is the last member: it is destroyed
// first, while the rest of the object is still intact.
struct session {
    std::atomic<bool> ready{false}; // `timer` is assigned
    std::atomic<bool> entered{false};
    std::atomic<bool> left{false};
    std::atomic<bool> *left_outside;
    long work = 0;
    bool rearm = false;
    tickwheel::timer timer;

    session(tickwheel::service &svc, std::atomic<bool> *outside, bool rearm_itself)
        : left_outside(outside), rearm(rearm_itself) {
        timer = svc.start(1ms, [this] { on_idle(); });
        ready = true;
    }

    void on_idle() {
        while (!ready.load()) {
            std::this_thread::yield();
        }
        entered = true;
        // Busy for a while, writing to the object, so that the destructor
        // on the other thread runs in the middle of it.
        for (int i = 0; i < 30; i++) {
            std::this_thread::sleep_for(1ms);
            work += i;
        }
        if (rearm) {
            // Re-arms itself while the other thread waits for it: the
            // destructor must stop the new arming too.
            (void)timer.restart(1ms);
        }
        left = true;
        *left_outside = true;
    }
};

void test_destroyed_while_its_callback_runs() {
    tickwheel::config cfg;
    cfg.shards = 2;
    tickwheel::service svc(cfg);
    for (int round = 0; round < 4; round++) {
        std::atomic<bool> left{false};
        auto *s = new session(svc, &left, round % 2 == 1);
        wait_until(s->entered);
        delete s; // on this thread; the callback runs on a driver thread
        // The callback returned before the destructor did.
        bool returned_first = left.load();
        // Give a callback that did not finish time to write to freed memory
        // (ASan names it), then fail in any build.
        std::this_thread::sleep_for(60ms);
        CHECK(returned_first);
    }
}

void test_reset_while_its_callback_runs() {
    tickwheel::service svc;
    std::atomic<bool> left{false};
    auto s = std::make_unique<session>(svc, &left, true);
    wait_until(s->entered);
    s->timer.reset();
    CHECK(left.load() && !s->timer);
    // Nothing fires any more: the re-arming was stopped too.
    s->left = false;
    std::this_thread::sleep_for(20ms);
    CHECK(!s->left.load());
}

// The callback deletes the object that owns its own timer: the destructor
// runs inside that very callback and must not wait for itself.
struct self_deleting {
    std::atomic<int> *deleted;
    tickwheel::timer timer;
    ~self_deleting() { ++*deleted; }
};

void test_destroyed_from_its_own_callback() {
    tickwheel::service svc;
    std::atomic<int> deleted{0};
    std::atomic<bool> go{false}; // every `timer` member is assigned
    for (int i = 0; i < 8; i++) {
        auto *s = new self_deleting{&deleted, {}};
        s->timer = svc.start(1ms, [s, &go] {
            while (!go.load()) {
                std::this_thread::yield();
            }
            delete s;
        });
    }
    go = true;
    for (int i = 0; i < 5000 && deleted.load() < 8; i++) {
        std::this_thread::sleep_for(1ms);
    }
    CHECK(deleted.load() == 8);
}

// The service is destroyed while a callback on one of its driver threads is
// in the middle of using its own timer (and another timer) through the
// wrapper. The callback's calls see either the live, shutting-down service
// or no service; destroy() returns after the callback.
void test_service_destroyed_while_callbacks_use_timers() {
    for (int round = 0; round < 3; round++) {
        tickwheel::config cfg;
        cfg.shards = 2;
        auto svc = std::make_unique<tickwheel::service>(cfg);
        std::atomic<bool> go{false}; // `self` is assigned
        std::atomic<bool> running{false};
        std::atomic<bool> finished{false};
        std::atomic<long> calls{0};
        tickwheel::timer other = svc->start(1h, [] {});
        tickwheel::timer self;
        self = svc->start_periodic(1ms, [&] {
            while (!go.load()) {
                std::this_thread::yield();
            }
            running = true;
            // At least one round even if this thread is preempted past
            // `until` (a loaded machine): `calls > 0` is checked below.
            auto until = std::chrono::steady_clock::now() + 20ms;
            do {
                (void)self.armed();
                (void)other.restart(1h);
                ++calls;
            } while (std::chrono::steady_clock::now() < until);
            finished = true;
        });
        go = true;
        wait_until(running);
        svc.reset(); // destroy while the callback runs
        // tw_service_free waited for the running callback.
        CHECK(finished.load() && calls.load() > 0);
        CHECK(!self.armed() && !other.armed());
        CHECK(self.stop() == tickwheel::stop_outcome::inactive);
    }
}

} // namespace

// With an argument, runs only the tests whose name contains it (to show one
// finding at a time on an old wrapper).
int main(int argc, char **argv) {
    struct {
        const char *name;
        void (*run)();
    } const tests[] = {
        {"destroyed_while_its_callback_runs", test_destroyed_while_its_callback_runs},
        {"reset_while_its_callback_runs", test_reset_while_its_callback_runs},
        {"destroyed_from_its_own_callback", test_destroyed_from_its_own_callback},
        {"service_destroyed_while_callbacks_use_timers",
         test_service_destroyed_while_callbacks_use_timers},
    };
    int ran = 0;
    for (const auto &test : tests) {
        if (argc < 2 || std::strstr(test.name, argv[1]) != nullptr) {
            test.run();
            ran++;
        }
    }
    CHECK(ran > 0);
    std::printf("test_cpp_lifetime: %d tests passed\n", ran);
    return 0;
}
