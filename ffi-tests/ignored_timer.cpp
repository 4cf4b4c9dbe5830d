// Must NOT compile with -Werror: it discards the timer that service::start
// returns, which would stop the timer at once (the C++ form of a dropped
// Rust `Timer`). tests/ffi_c.rs checks that g++ refuses it. Never linked.
#include "tickwheel.hpp"

void starts_and_drops(tickwheel::service &svc);

void starts_and_drops(tickwheel::service &svc) {
    svc.start(std::chrono::milliseconds(5), [] {});
}
