/* Must NOT compile with -Werror, in C11 and in C++17: it ignores the
 * tw_result of tw_timer_stop, which the header marks TW_MUST_USE
 * (warn_unused_result / [[nodiscard]]). tests/ffi_c.rs checks that both
 * compilers refuse it and name the function. Never linked or run. */
#include "tickwheel.h"

int ignores_a_result(const struct tw_service *service, uint64_t timer);

int ignores_a_result(const struct tw_service *service, uint64_t timer) {
    tw_stop outcome = TW_STOP_INACTIVE;
    tw_timer_stop(service, timer, &outcome);
    return (int)outcome;
}
