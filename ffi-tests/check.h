/* Tiny assertion helpers shared by the C and C++ tests. */
#ifndef TICKWHEEL_FFI_CHECK_H
#define TICKWHEEL_FFI_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "tickwheel.h"

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__,     \
                    #cond);                                                      \
            abort();                                                             \
        }                                                                        \
    } while (0)

/* Checks that an expression returns the given tw_result, naming both on failure. */
#define CHECK_RESULT(expr, expected)                                             \
    do {                                                                         \
        tw_result check_got_ = (expr);                                           \
        tw_result check_want_ = (expected);                                      \
        if (check_got_ != check_want_) {                                         \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s\n", __FILE__,    \
                    __LINE__, #expr, tw_result_str(check_got_),                  \
                    tw_result_str(check_want_));                                 \
            abort();                                                             \
        }                                                                        \
    } while (0)

#define CHECK_OK(expr) CHECK_RESULT(expr, TW_OK)

#endif /* TICKWHEEL_FFI_CHECK_H */
