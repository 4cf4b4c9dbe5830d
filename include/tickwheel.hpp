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
//    timer and gives the handle back; `forget()` lets it run on unowned.
//  * Callbacks are any callable taking `const tw_expiry &` or nothing. Each is
//    moved to the heap and destroyed exactly once, by the service, when it
//    lets go of it: after the handle is gone and the callback is not running,
//    or when the service is destroyed. So a callable may own resources
//    (unique_ptr, sockets, even other timers).
//  * A `timer` may outlive its `service`: its operations then report
//    inactive / TW_SHUTDOWN and its destructor does nothing. Destroying the
//    service while other threads still use its timers is a data race, as for
//    any C++ object used while destroyed.
//  * Callbacks run on the shard owner's thread and are called through a
//    noexcept trampoline: an exception escaping a callback calls
//    std::terminate (it must never unwind into tickwheel).
#ifndef TICKWHEEL_HPP
#define TICKWHEEL_HPP

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "tickwheel.h"

namespace tickwheel {

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

namespace detail {

inline void check(tw_result code, const char *what) {
    if (code != TW_OK) {
        throw error(code, what);
    }
}

inline std::uint64_t nanos(std::chrono::nanoseconds d) noexcept {
    return d.count() <= 0 ? 0 : static_cast<std::uint64_t>(d.count());
}

// Shared between a service and its timers, so that a timer can tell that its
// service is gone. Also holds the wake function for embedded services.
struct service_state {
    tw_service *raw = nullptr;
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
    /// outcome, or nothing when the timer is empty, freed or its service is
    /// shut down (never throws: safe inside callbacks).
    std::optional<restart_outcome> restart(std::chrono::nanoseconds delay) const noexcept {
        const tw_service *raw = live();
        tw_restart outcome = TW_RESTART_MOVED;
        if (raw == nullptr || tw_timer_restart(raw, id_, detail::nanos(delay), &outcome) != TW_OK) {
            return std::nullopt;
        }
        return outcome == TW_RESTART_MOVED ? restart_outcome::moved : restart_outcome::rearmed;
    }

    /// `true` while the timer is armed.
    bool armed() const noexcept {
        bool armed = false;
        const tw_service *raw = live();
        return raw != nullptr && tw_timer_is_armed(raw, id_, &armed) == TW_OK && armed;
    }

    /// Stops the timer and gives the handle back; the timer is empty after.
    void reset() noexcept {
        if (const tw_service *raw = live()) {
            (void)tw_timer_free(raw, id_);
        }
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
        return (id_ != 0 && state_) ? state_->raw : nullptr;
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

    /// Fires every due timer of this shard on this thread; returns how many
    /// ran. Throws on TW_REENTRANT, TW_SHUTDOWN, TW_WRONG_THREAD.
    std::size_t poll() {
        std::size_t fired = 0;
        detail::check(tw_shard_poll(raw_, &fired), "tw_shard_poll");
        return fired;
    }

    /// Time until the next deadline (zero: poll again before sleeping), or
    /// nothing if no timer is armed. Call it right before sleeping.
    std::optional<std::chrono::nanoseconds> next_deadline() {
        std::uint64_t ns = 0;
        detail::check(tw_shard_next_deadline_ns(raw_, &ns), "tw_shard_next_deadline_ns");
        if (ns == UINT64_MAX) {
            return std::nullopt;
        }
        return std::chrono::nanoseconds(static_cast<std::int64_t>(ns > INT64_MAX ? INT64_MAX : ns));
    }

    /// The same, as an epoll_wait timeout: milliseconds rounded up, -1 for none.
    int next_timeout_ms() {
        int ms = -1;
        detail::check(tw_shard_next_timeout_ms(raw_, &ms), "tw_shard_next_timeout_ms");
        return ms;
    }

    std::size_t index() const {
        std::size_t index = 0;
        detail::check(tw_shard_index(raw_, &index), "tw_shard_index");
        return index;
    }

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
};

/// An RAII timer service. Move-only.
class service {
public:
    service() : service(config{}) {}
    explicit service(const config &cfg) : state_(std::make_shared<detail::service_state>()) {
        tw_service_config raw{};
        raw.shards = cfg.shards;
        raw.tick_ns = detail::nanos(cfg.tick);
        raw.flags = (cfg.embedded ? TW_SERVICE_EMBEDDED : 0u) |
                    (cfg.pin_threads ? TW_SERVICE_PIN_THREADS : 0u) |
                    (cfg.manual_clock ? TW_SERVICE_MANUAL_CLOCK : 0u);
        if (cfg.wake) {
            state_->wake = cfg.wake;
            raw.wake = detail::wake_trampoline;
            raw.wake_ctx = state_.get();
        }
        detail::check(tw_service_new(&raw, &state_->raw), "tw_service_new");
    }
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

    /// Starts a one-shot timer running `f` once `delay` has passed.
    template <class F>
    timer start(std::chrono::nanoseconds delay, F &&f) {
        tw_timer_spec spec{};
        spec.delay_ns = detail::nanos(delay);
        return schedule(spec, std::forward<F>(f));
    }

    /// Starts a periodic timer: first after `period`, then every `period`.
    template <class F>
    timer start_periodic(std::chrono::nanoseconds period, F &&f) {
        tw_timer_spec spec{};
        spec.delay_ns = detail::nanos(period);
        spec.period_ns = detail::nanos(period);
        if (spec.period_ns == 0) {
            throw error(TW_INVALID_PERIOD, "tw_timer_schedule");
        }
        return schedule(spec, std::forward<F>(f));
    }

    /// Starts a one-shot timer firing somewhere in [earliest, latest].
    template <class F>
    timer start_within(std::chrono::nanoseconds earliest, std::chrono::nanoseconds latest, F &&f) {
        if (latest < earliest) {
            throw error(TW_INVALID_RANGE, "tw_timer_schedule");
        }
        tw_timer_spec spec{};
        spec.delay_ns = detail::nanos(earliest);
        spec.latest_ns = detail::nanos(latest) == spec.delay_ns ? 0 : detail::nanos(latest);
        return schedule(spec, std::forward<F>(f));
    }

    /// Starts a timer described by a raw spec. Throws `error` on failure (the
    /// callable is destroyed then).
    template <class F>
    timer schedule(const tw_timer_spec &spec, F &&f) {
        using Fn = std::decay_t<F>;
        Fn *heap = new Fn(std::forward<F>(f));
        std::uint64_t id = 0;
        // On failure tickwheel has already destroyed `heap` through `destroy`.
        detail::check(tw_timer_schedule(raw(), &spec, detail::callback<Fn>::call, heap,
                                        detail::callback<Fn>::destroy, &id),
                      "tw_timer_schedule");
        return timer(state_, id);
    }

    /// Claims shard `index` (embedded services) for the calling thread.
    shard claim(std::size_t index) {
        tw_shard *raw_shard = nullptr;
        detail::check(tw_shard_claim(raw(), index, &raw_shard), "tw_shard_claim");
        return shard(raw_shard);
    }

    std::size_t shard_count() const {
        std::size_t count = 0;
        detail::check(tw_service_shard_count(raw(), &count), "tw_service_shard_count");
        return count;
    }

    std::chrono::nanoseconds tick() const {
        std::uint64_t ns = 0;
        detail::check(tw_service_tick_ns(raw(), &ns), "tw_service_tick_ns");
        return std::chrono::nanoseconds(static_cast<std::int64_t>(ns));
    }

    /// Manual-clock services: move time forward.
    void advance_clock(std::chrono::nanoseconds by) {
        detail::check(tw_service_advance_clock(raw(), detail::nanos(by)),
                      "tw_service_advance_clock");
    }

    /// Drops every pending callback; later starts throw TW_SHUTDOWN.
    void shutdown() { detail::check(tw_service_shutdown(raw()), "tw_service_shutdown"); }

    /// The C object (nullptr after a move).
    tw_service *raw() const noexcept { return state_ ? state_->raw : nullptr; }

private:
    void destroy() noexcept {
        if (state_ && state_->raw != nullptr) {
            // Timers destroyed from now on (also by callables that tickwheel
            // destroys inside tw_service_free) see no service and do nothing.
            tw_service *raw = std::exchange(state_->raw, nullptr);
            tw_service_free(raw);
        }
        state_.reset();
    }

    std::shared_ptr<detail::service_state> state_;
};

} // namespace tickwheel

#endif // TICKWHEEL_HPP
