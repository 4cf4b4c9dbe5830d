// tickwheel.hpp: a header-only C++17 wrapper over tickwheel.h.
//
//   tickwheel::service svc;                        // RAII: frees the service
//   tickwheel::timer t = svc.start(std::chrono::milliseconds(30),
//                                  [&](const tw_expiry &) { on_idle(); });
//   t.restart(std::chrono::milliseconds(30));      // activity: push it back
//   t.stop();                                      // or let `t` go out of scope
//
// Ownership, in short:
//  * `service` owns a tw_service and frees it in its destructor. It is
//    move-only.
//  * `timer` is a move-only handle. Destroying it (or `reset()`) stops the
//    timer, WAITS until its callback is not running on any thread, and gives
//    the handle back; `forget()` lets it run on unowned. So an object that
//    owns a `timer` whose callback uses the object is safe to destroy from
//    any thread: once the timer member is destroyed, the callback is not
//    running and will not run again. Declare the timer as the object's last
//    member (members are destroyed in reverse order), or reset() it first
//    in the destructor, so the callback never sees a half-destroyed object.
//    Inside the timer's own callback the destructor does not wait for
//    itself (no deadlock): the callback may destroy its owner, and must not
//    touch it afterwards. As with tw_timer_stop_sync, two callbacks must not
//    destroy each other's timers at the same time (they would wait on each
//    other).
//  * Callbacks are any callable taking `const tw_expiry &` or nothing. Each is
//    moved to the heap and destroyed exactly once, by the service, when it
//    lets go of it: after the handle is gone and the callback is not running,
//    or when the service is destroyed. So a callable may own resources
//    (unique_ptr, sockets, even other timers).
//  * A `timer` may outlive its `service`: its operations then report
//    inactive / TW_SHUTDOWN and its destructor does nothing.
//  * Destroying a `service` while callbacks on its driver threads use its
//    timers is safe: the service pointer that timers share is atomic, and
//    tw_service_free waits for a running driver callback before freeing, so
//    such a callback sees either the service shutting down (its calls report
//    TW_SHUTDOWN / inactive) or no service. Other threads, and the owners of
//    embedded shards, must have stopped using the service and its timers
//    (and released their shards) first, as for any C++ object.
//  * Callbacks run on the shard owner's thread and are called through a
//    noexcept trampoline: an exception escaping a callback calls
//    std::terminate (it must never unwind into tickwheel).
//
// Errors. Every operation that can fail has a noexcept overload taking a
// trailing `tw_result &status` (like std::filesystem's error_code
// overloads): it sets `status` to TW_OK or to the failure and returns an
// empty object (an empty `timer`, `shard` or `service`, zero, nullopt) on
// failure. The overloads without it throw `tickwheel::error`. With
// exceptions disabled (-fno-exceptions, detected through __cpp_exceptions,
// or TICKWHEEL_NO_EXCEPTIONS defined before including this header) only the
// status overloads exist. The status overloads call std::terminate if
// an allocation or a copy of the callable throws.
//
// Durations. A negative duration (delay, period, range end, tick, clock
// step) is refused with TW_INVALID_ARGUMENT, never clamped to zero.
// `start` and `restart` also take a std::chrono::time_point (an absolute
// deadline, any clock): it is converted to a delay against that clock's
// now() at the call, rounded up to whole nanoseconds; a deadline already
// past is a zero delay (due at the service's next tick). Manual-clock
// services count time only by advance_clock, so give them durations, not
// time points.
#ifndef TICKWHEEL_HPP
#define TICKWHEEL_HPP

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <type_traits>
#include <utility>

#if !defined(TICKWHEEL_NO_EXCEPTIONS) && (defined(__cpp_exceptions) || defined(__EXCEPTIONS))
#define TICKWHEEL_EXCEPTIONS 1
#include <stdexcept>
#include <string>
#else
#define TICKWHEEL_EXCEPTIONS 0
#endif

#include "tickwheel.h"

namespace tickwheel {

#if TICKWHEEL_EXCEPTIONS
/// A failed tickwheel call, carrying its tw_result.
class error : public std::runtime_error {
public:
    explicit error(tw_result code, const char *what)
        : std::runtime_error(std::string(what) + ": " + tw_result_str(code) + " (" +
                             tw_result_describe(code) + ")"),
          code_(code) {}
    tw_result code() const noexcept { return code_; }

private:
    tw_result code_;
};
#endif

namespace detail {

#if TICKWHEEL_EXCEPTIONS
inline void check(tw_result code, const char *what) {
    if (code != TW_OK) {
        throw error(code, what);
    }
}
#endif

// A duration in whole nanoseconds; negative ones are refused rather than
// clamped, so that a sign error in the caller's arithmetic is reported.
inline tw_result nanos(std::chrono::nanoseconds d, std::uint64_t &out) noexcept {
    if (d.count() < 0) {
        return TW_INVALID_ARGUMENT;
    }
    out = static_cast<std::uint64_t>(d.count());
    return TW_OK;
}

// The delay from Clock::now() to `deadline`, rounded up to whole
// nanoseconds; 0 for a deadline already past (a zero delay); saturated at
// the largest nanosecond count (about 292 years) instead of overflowing.
template <class Clock, class Duration>
std::uint64_t nanos_until(std::chrono::time_point<Clock, Duration> deadline) noexcept {
    using seconds = std::chrono::duration<double>;
    const auto now = Clock::now();
    const double deadline_s = seconds(deadline.time_since_epoch()).count();
    const double now_s = seconds(now.time_since_epoch()).count();
    // Within about 142 years of the clock's epoch both points, and their
    // difference, fit in int64 nanoseconds: computed exactly there.
    constexpr double exact_s = 4.5e9;
    if (deadline_s > -exact_s && deadline_s < exact_s && now_s > -exact_s && now_s < exact_s) {
        const auto left =
            std::chrono::ceil<std::chrono::nanoseconds>(deadline.time_since_epoch()) -
            std::chrono::floor<std::chrono::nanoseconds>(now.time_since_epoch());
        return left.count() <= 0 ? 0 : static_cast<std::uint64_t>(left.count());
    }
    // Far from the epoch (time_point::max(), say): converting to nanoseconds
    // would overflow, so saturate instead.
    const double left_s = deadline_s - now_s;
    if (left_s <= 0) {
        return 0;
    }
    constexpr double max_s = 9.2e9;
    return left_s >= max_s ? static_cast<std::uint64_t>(INT64_MAX)
                           : static_cast<std::uint64_t>(left_s * 1e9);
}

// Shared between a service and its timers, so that a timer can tell that its
// service is gone. `raw` is atomic because service::destroy() clears it
// while callbacks on driver threads may be reading it (see the file
// comment). Also holds the wake function for embedded services.
struct service_state {
    std::atomic<tw_service *> raw{nullptr};
    std::function<void(std::size_t)> wake;
};

template <class F>
struct callback {
    static void call(void *ctx, const tw_expiry *expiry) noexcept {
        F &f = *static_cast<F *>(ctx);
        if constexpr (std::is_invocable_v<F &, const tw_expiry &>) {
            f(*expiry);
        } else {
            static_assert(std::is_invocable_v<F &>,
                          "a tickwheel callback takes (const tw_expiry &) or ()");
            (void)expiry;
            f();
        }
    }
    static void destroy(void *ctx) noexcept { delete static_cast<F *>(ctx); }
};

inline void wake_trampoline(void *ctx, std::size_t shard) noexcept {
    static_cast<service_state *>(ctx)->wake(shard);
}

} // namespace detail

/// What `timer::stop` decided.
enum class stop_outcome { cancelled, fired, running, inactive };
/// What `timer::stop_sync` decided.
enum class stop_sync_outcome { cancelled, fired, inactive, from_own_callback };
/// What `timer::restart` did.
enum class restart_outcome { moved, rearmed };

/// A move-only timer handle. See the file comment for ownership.
class timer {
public:
    timer() noexcept = default;
    timer(const timer &) = delete;
    timer &operator=(const timer &) = delete;
    timer(timer &&other) noexcept
        : state_(std::move(other.state_)), id_(std::exchange(other.id_, 0)) {}
    timer &operator=(timer &&other) noexcept {
        if (this != &other) {
            reset();
            state_ = std::move(other.state_);
            id_ = std::exchange(other.id_, 0);
        }
        return *this;
    }
    /// Stops the timer and waits for its running callback: see `reset()`.
    ~timer() { reset(); }

    /// The raw handle (0 for an empty timer).
    std::uint64_t id() const noexcept { return id_; }
    explicit operator bool() const noexcept { return id_ != 0; }

    /// Disarms the timer without waiting.
    stop_outcome stop() const noexcept {
        tw_stop outcome = TW_STOP_INACTIVE;
        if (const tw_service *raw = live()) {
            if (tw_timer_stop(raw, id_, &outcome) != TW_OK) {
                return stop_outcome::inactive;
            }
        }
        switch (outcome) {
        case TW_STOP_CANCELLED: return stop_outcome::cancelled;
        case TW_STOP_FIRED: return stop_outcome::fired;
        case TW_STOP_RUNNING: return stop_outcome::running;
        default: return stop_outcome::inactive;
        }
    }

    /// Disarms the timer and waits until its callback is not running
    /// (returns at once from the timer's own callback).
    stop_sync_outcome stop_sync() const noexcept {
        tw_stop_sync outcome = TW_STOP_SYNC_INACTIVE;
        if (const tw_service *raw = live()) {
            if (tw_timer_stop_sync(raw, id_, &outcome) != TW_OK) {
                return stop_sync_outcome::inactive;
            }
        }
        switch (outcome) {
        case TW_STOP_SYNC_CANCELLED: return stop_sync_outcome::cancelled;
        case TW_STOP_SYNC_FIRED: return stop_sync_outcome::fired;
        case TW_STOP_SYNC_FROM_OWN_CALLBACK: return stop_sync_outcome::from_own_callback;
        default: return stop_sync_outcome::inactive;
        }
    }

    /// Moves the timer to `delay` from now, or re-arms it. Returns the
    /// outcome, or nothing when the delay is negative, the timer is empty or
    /// freed, or its service is shut down (never throws: safe inside
    /// callbacks). The overload with `status` says which.
    /// Same-tick order: a moved timer counts as newly armed, so it fires after
    /// every timer already armed for its new tick, whether it came from a
    /// later tick, an earlier one or that same tick (docs/CONTRACT.md item 5).
    std::optional<restart_outcome> restart(std::chrono::nanoseconds delay) const noexcept {
        tw_result status = TW_OK;
        return restart(delay, status);
    }
    std::optional<restart_outcome> restart(std::chrono::nanoseconds delay,
                                           tw_result &status) const noexcept {
        std::uint64_t ns = 0;
        status = detail::nanos(delay, ns);
        return status == TW_OK ? restart_ns(ns, status) : std::nullopt;
    }
    /// The same with an absolute deadline (see the file comment).
    template <class Clock, class Duration>
    std::optional<restart_outcome>
    restart(std::chrono::time_point<Clock, Duration> deadline) const noexcept {
        tw_result status = TW_OK;
        return restart_ns(detail::nanos_until(deadline), status);
    }
    template <class Clock, class Duration>
    std::optional<restart_outcome> restart(std::chrono::time_point<Clock, Duration> deadline,
                                           tw_result &status) const noexcept {
        return restart_ns(detail::nanos_until(deadline), status);
    }

    /// `true` while the timer is armed.
    bool armed() const noexcept {
        bool armed = false;
        const tw_service *raw = live();
        return raw != nullptr && tw_timer_is_armed(raw, id_, &armed) == TW_OK && armed;
    }

    /// Stops the timer, waits until its callback is not running on any
    /// thread (unless called from that very callback), and gives the handle
    /// back; the timer is empty after. Once it returns (elsewhere than in
    /// the callback) the callback will not run again, so what it uses may be
    /// destroyed.
    void reset() noexcept {
        if (const tw_service *raw = live()) {
            // The callback may re-arm its own timer while we wait for it
            // (restart from inside the callback); stop that arming too, so
            // nothing is armed when the handle is freed. Only the callback
            // can re-arm it meanwhile (this object is ours), so this ends.
            for (;;) {
                tw_stop_sync outcome = TW_STOP_SYNC_INACTIVE;
                bool armed = false;
                if (tw_timer_stop_sync(raw, id_, &outcome) != TW_OK ||
                    outcome == TW_STOP_SYNC_FROM_OWN_CALLBACK ||
                    tw_timer_is_armed(raw, id_, &armed) != TW_OK || !armed) {
                    break;
                }
            }
            // From the own callback, the service frees the callable after
            // the callback returns.
            (void)tw_timer_free(raw, id_);
        }
        // Written only after the wait: the running callback may read this
        // handle (restart, armed) until it returns.
        id_ = 0;
        state_.reset();
    }

    /// Gives the handle back without stopping the timer (a one-shot timer
    /// still fires once). Returns the old id, which is stale from now on.
    std::uint64_t forget() noexcept {
        std::uint64_t id = id_;
        if (const tw_service *raw = live()) {
            (void)tw_timer_forget(raw, id_);
        }
        id_ = 0;
        state_.reset();
        return id;
    }

private:
    friend class service;
    timer(std::shared_ptr<detail::service_state> state, std::uint64_t id) noexcept
        : state_(std::move(state)), id_(id) {}

    const tw_service *live() const noexcept {
        return (id_ != 0 && state_) ? state_->raw.load(std::memory_order_acquire) : nullptr;
    }

    std::optional<restart_outcome> restart_ns(std::uint64_t ns, tw_result &status) const noexcept {
        const tw_service *raw = live();
        if (raw == nullptr) {
            status = id_ == 0 ? TW_STALE_HANDLE : TW_SHUTDOWN;
            return std::nullopt;
        }
        tw_restart outcome = TW_RESTART_MOVED;
        status = tw_timer_restart(raw, id_, ns, &outcome);
        if (status != TW_OK) {
            return std::nullopt;
        }
        return outcome == TW_RESTART_MOVED ? restart_outcome::moved : restart_outcome::rearmed;
    }

    std::shared_ptr<detail::service_state> state_;
    std::uint64_t id_ = 0;
};

/// Ownership of one shard of an embedded service by the calling thread.
/// Move-only; the destructor releases the claim (on the claiming thread).
class shard {
public:
    shard() noexcept = default;
    shard(const shard &) = delete;
    shard &operator=(const shard &) = delete;
    shard(shard &&other) noexcept : raw_(std::exchange(other.raw_, nullptr)) {}
    shard &operator=(shard &&other) noexcept {
        if (this != &other) {
            release();
            raw_ = std::exchange(other.raw_, nullptr);
        }
        return *this;
    }
    ~shard() { release(); }

    explicit operator bool() const noexcept { return raw_ != nullptr; }

    /// Fires every due timer of this shard on this thread; returns how many
    /// ran. Fails with TW_REENTRANT, TW_SHUTDOWN, TW_WRONG_THREAD.
    std::size_t poll(tw_result &status) noexcept {
        std::size_t fired = 0;
        status = tw_shard_poll(raw_, &fired);
        return fired;
    }

    /// Time until the next deadline (zero: poll again before sleeping), or
    /// nothing if no timer is armed (or on failure). Call it right before
    /// sleeping.
    std::optional<std::chrono::nanoseconds> next_deadline(tw_result &status) noexcept {
        std::uint64_t ns = 0;
        status = tw_shard_next_deadline_ns(raw_, &ns);
        if (status != TW_OK || ns == UINT64_MAX) {
            return std::nullopt;
        }
        return std::chrono::nanoseconds(static_cast<std::int64_t>(ns > INT64_MAX ? INT64_MAX : ns));
    }

    /// The same, as an epoll_wait timeout: milliseconds rounded up, -1 for
    /// none (and on failure).
    int next_timeout_ms(tw_result &status) noexcept {
        int ms = -1;
        status = tw_shard_next_timeout_ms(raw_, &ms);
        return status == TW_OK ? ms : -1;
    }

    std::size_t index(tw_result &status) const noexcept {
        std::size_t index = 0;
        status = tw_shard_index(raw_, &index);
        return index;
    }

#if TICKWHEEL_EXCEPTIONS
    /// Throwing forms of the above.
    std::size_t poll() {
        tw_result status = TW_OK;
        std::size_t fired = poll(status);
        detail::check(status, "tw_shard_poll");
        return fired;
    }
    std::optional<std::chrono::nanoseconds> next_deadline() {
        tw_result status = TW_OK;
        auto deadline = next_deadline(status);
        detail::check(status, "tw_shard_next_deadline_ns");
        return deadline;
    }
    int next_timeout_ms() {
        tw_result status = TW_OK;
        int ms = next_timeout_ms(status);
        detail::check(status, "tw_shard_next_timeout_ms");
        return ms;
    }
    std::size_t index() const {
        tw_result status = TW_OK;
        std::size_t i = index(status);
        detail::check(status, "tw_shard_index");
        return i;
    }
#endif

    tw_shard *raw() const noexcept { return raw_; }

private:
    friend class service;
    explicit shard(tw_shard *raw) noexcept : raw_(raw) {}
    void release() noexcept {
        if (raw_ != nullptr) {
            (void)tw_shard_release(raw_);
            raw_ = nullptr;
        }
    }
    tw_shard *raw_ = nullptr;
};

/// How to build a service; all defaults are tickwheel's (see tw_service_config).
struct config {
    std::size_t shards = 0;
    std::chrono::nanoseconds tick{0};
    bool embedded = false;
    bool pin_threads = false;
    bool manual_clock = false;
    /// Embedded services: wake the owner of a shard (any thread, must not block).
    std::function<void(std::size_t)> wake;
    /// Driver threads only: lend their shards while they sleep (see
    /// `TW_SERVICE_NO_LEND`); false keeps them awake more. Last, so that
    /// positional initialisers written before it existed still compile.
    bool lend_while_idle = true;
};

/// An RAII timer service. Move-only.
class service {
public:
#if TICKWHEEL_EXCEPTIONS
    /// A service with tickwheel's defaults. Throws `error` on failure.
    service() : service(config{}) {}
    explicit service(const config &cfg) {
        tw_result status = TW_OK;
        create(cfg, status);
        detail::check(status, "tw_service_new");
    }
#endif
    /// Builds a service; on failure `status` says why and the service is
    /// empty (`!*this`; starting timers on it reports TW_NULL_POINTER).
    service(const config &cfg, tw_result &status) noexcept { create(cfg, status); }
    service(const service &) = delete;
    service &operator=(const service &) = delete;
    service(service &&) noexcept = default;
    service &operator=(service &&other) noexcept {
        if (this != &other) {
            destroy();
            state_ = std::move(other.state_);
        }
        return *this;
    }
    ~service() { destroy(); }

    explicit operator bool() const noexcept { return raw() != nullptr; }

    // The functions returning a `timer` are [[nodiscard]]: a discarded timer
    // is destroyed at once, which stops it (call forget() to let it run).

    /// Starts a one-shot timer running `f` once `delay` has passed.
    template <class F>
    [[nodiscard]] timer start(std::chrono::nanoseconds delay, F &&f, tw_result &status) noexcept {
        tw_timer_spec spec{};
        status = detail::nanos(delay, spec.delay_ns);
        return status == TW_OK ? schedule(spec, std::forward<F>(f), status) : timer();
    }
    /// Starts a one-shot timer running `f` at `deadline` (see the file comment).
    template <class Clock, class Duration, class F>
    [[nodiscard]] timer start(std::chrono::time_point<Clock, Duration> deadline, F &&f,
                              tw_result &status) noexcept {
        tw_timer_spec spec{};
        spec.delay_ns = detail::nanos_until(deadline);
        return schedule(spec, std::forward<F>(f), status);
    }

    /// Starts a periodic timer: first after `period`, then every `period`.
    template <class F>
    [[nodiscard]] timer start_periodic(std::chrono::nanoseconds period, F &&f,
                                       tw_result &status) noexcept {
        tw_timer_spec spec{};
        status = detail::nanos(period, spec.period_ns);
        if (status == TW_OK && spec.period_ns == 0) {
            status = TW_INVALID_PERIOD;
        }
        spec.delay_ns = spec.period_ns;
        return status == TW_OK ? schedule(spec, std::forward<F>(f), status) : timer();
    }

    /// Starts a one-shot timer firing somewhere in [earliest, latest].
    template <class F>
    [[nodiscard]] timer start_within(std::chrono::nanoseconds earliest,
                                     std::chrono::nanoseconds latest, F &&f,
                                     tw_result &status) noexcept {
        tw_timer_spec spec{};
        std::uint64_t latest_ns = 0;
        status = detail::nanos(earliest, spec.delay_ns);
        if (status == TW_OK) {
            status = detail::nanos(latest, latest_ns);
        }
        if (status == TW_OK && latest_ns < spec.delay_ns) {
            status = TW_INVALID_RANGE;
        }
        if (status != TW_OK) {
            return timer();
        }
        spec.latest_ns = latest_ns == spec.delay_ns ? 0 : latest_ns;
        return schedule(spec, std::forward<F>(f), status);
    }

    /// Starts a timer described by a raw spec. On failure the callable is
    /// destroyed and the timer is empty.
    template <class F>
    [[nodiscard]] timer schedule(const tw_timer_spec &spec, F &&f, tw_result &status) noexcept {
        // noexcept: an allocation or a callable copy that throws terminates.
        return schedule_heap(spec, new std::decay_t<F>(std::forward<F>(f)), status);
    }

    /// Claims shard `index` (embedded services) for the calling thread.
    [[nodiscard]] shard claim(std::size_t index, tw_result &status) noexcept {
        tw_shard *raw_shard = nullptr;
        status = tw_shard_claim(raw(), index, &raw_shard);
        return status == TW_OK ? shard(raw_shard) : shard();
    }

    std::size_t shard_count(tw_result &status) const noexcept {
        std::size_t count = 0;
        status = tw_service_shard_count(raw(), &count);
        return count;
    }

    std::chrono::nanoseconds tick(tw_result &status) const noexcept {
        std::uint64_t ns = 0;
        status = tw_service_tick_ns(raw(), &ns);
        return std::chrono::nanoseconds(static_cast<std::int64_t>(ns));
    }

    /// Manual-clock services: move time forward.
    void advance_clock(std::chrono::nanoseconds by, tw_result &status) noexcept {
        std::uint64_t ns = 0;
        status = detail::nanos(by, ns);
        if (status == TW_OK) {
            status = tw_service_advance_clock(raw(), ns);
        }
    }

    /// Drops every pending callback; later starts fail with TW_SHUTDOWN.
    void shutdown(tw_result &status) noexcept { status = tw_service_shutdown(raw()); }

#if TICKWHEEL_EXCEPTIONS
    /// Throwing forms of the above (`error` carries the tw_result; on
    /// failure the callable is destroyed).
    template <class F>
    [[nodiscard]] timer start(std::chrono::nanoseconds delay, F &&f) {
        tw_timer_spec spec{};
        detail::check(detail::nanos(delay, spec.delay_ns), "tw_timer_schedule");
        return schedule(spec, std::forward<F>(f));
    }
    template <class Clock, class Duration, class F>
    [[nodiscard]] timer start(std::chrono::time_point<Clock, Duration> deadline, F &&f) {
        tw_timer_spec spec{};
        spec.delay_ns = detail::nanos_until(deadline);
        return schedule(spec, std::forward<F>(f));
    }
    template <class F>
    [[nodiscard]] timer start_periodic(std::chrono::nanoseconds period, F &&f) {
        tw_result status = TW_OK;
        timer t = start_periodic(period, std::forward<F>(f), status);
        detail::check(status, "tw_timer_schedule");
        return t;
    }
    template <class F>
    [[nodiscard]] timer start_within(std::chrono::nanoseconds earliest,
                                     std::chrono::nanoseconds latest, F &&f) {
        tw_result status = TW_OK;
        timer t = start_within(earliest, latest, std::forward<F>(f), status);
        detail::check(status, "tw_timer_schedule");
        return t;
    }
    template <class F>
    [[nodiscard]] timer schedule(const tw_timer_spec &spec, F &&f) {
        // Allocated here, where a throw may propagate.
        tw_result status = TW_OK;
        timer t = schedule_heap(spec, new std::decay_t<F>(std::forward<F>(f)), status);
        detail::check(status, "tw_timer_schedule");
        return t;
    }
    [[nodiscard]] shard claim(std::size_t index) {
        tw_result status = TW_OK;
        shard s = claim(index, status);
        detail::check(status, "tw_shard_claim");
        return s;
    }
    std::size_t shard_count() const {
        tw_result status = TW_OK;
        std::size_t count = shard_count(status);
        detail::check(status, "tw_service_shard_count");
        return count;
    }
    std::chrono::nanoseconds tick() const {
        tw_result status = TW_OK;
        auto t = tick(status);
        detail::check(status, "tw_service_tick_ns");
        return t;
    }
    void advance_clock(std::chrono::nanoseconds by) {
        tw_result status = TW_OK;
        advance_clock(by, status);
        detail::check(status, "tw_service_advance_clock");
    }
    void shutdown() {
        tw_result status = TW_OK;
        shutdown(status);
        detail::check(status, "tw_service_shutdown");
    }
#endif

    /// The C object (nullptr after a move or a failed construction).
    tw_service *raw() const noexcept {
        return state_ ? state_->raw.load(std::memory_order_acquire) : nullptr;
    }

private:
    void create(const config &cfg, tw_result &status) noexcept {
        tw_service_config raw_config{};
        raw_config.shards = cfg.shards;
        status = detail::nanos(cfg.tick, raw_config.tick_ns);
        if (status != TW_OK) {
            return;
        }
        raw_config.flags = (cfg.embedded ? TW_SERVICE_EMBEDDED : 0u) |
                           (cfg.pin_threads ? TW_SERVICE_PIN_THREADS : 0u) |
                           (cfg.manual_clock ? TW_SERVICE_MANUAL_CLOCK : 0u) |
                           (cfg.lend_while_idle ? 0u : TW_SERVICE_NO_LEND);
        auto state = std::make_shared<detail::service_state>();
        if (cfg.wake) {
            state->wake = cfg.wake;
            raw_config.wake = detail::wake_trampoline;
            raw_config.wake_ctx = state.get();
        }
        tw_service *raw_service = nullptr;
        status = tw_service_new(&raw_config, &raw_service);
        if (status == TW_OK) {
            state->raw.store(raw_service, std::memory_order_release);
            state_ = std::move(state);
        }
    }

    template <class Fn>
    timer schedule_heap(const tw_timer_spec &spec, Fn *heap, tw_result &status) noexcept {
        std::uint64_t id = 0;
        // On failure tickwheel has already destroyed `heap` through `destroy`.
        status = tw_timer_schedule(raw(), &spec, detail::callback<Fn>::call, heap,
                                   detail::callback<Fn>::destroy, &id);
        return status == TW_OK ? timer(state_, id) : timer();
    }

    void destroy() noexcept {
        if (state_) {
            // Cleared before freeing: timers destroyed from now on (also by
            // callables that tickwheel destroys inside tw_service_free) see
            // no service and do nothing. A driver callback that loaded the
            // pointer before this exchange keeps a valid service: it is
            // freed only after tw_service_free has waited for that callback.
            tw_service *raw = state_->raw.exchange(nullptr, std::memory_order_acq_rel);
            if (raw != nullptr) {
                tw_service_free(raw);
            }
        }
        state_.reset();
    }

    std::shared_ptr<detail::service_state> state_;
};

} // namespace tickwheel

#endif // TICKWHEEL_HPP
