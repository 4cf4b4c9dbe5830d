/* Link shim for `bash ffi-tests/run.sh tsan`. A Rust library built with
 * -Zsanitizer=thread (LLVM) calls __tsan_memcpy / __tsan_memmove /
 * __tsan_memset for its memory intrinsics; GCC 12's libtsan predates those
 * entry points. Forward them to the C library functions, which libtsan
 * intercepts, so the accesses are still checked. With a newer libtsan
 * that has its own, these take precedence and do the same. */
#include <stddef.h>
#include <string.h>

void *__tsan_memcpy(void *dst, const void *src, size_t n);
void *__tsan_memmove(void *dst, const void *src, size_t n);
void *__tsan_memset(void *dst, int c, size_t n);

void *__tsan_memcpy(void *dst, const void *src, size_t n) { return memcpy(dst, src, n); }
void *__tsan_memmove(void *dst, const void *src, size_t n) { return memmove(dst, src, n); }
void *__tsan_memset(void *dst, int c, size_t n) { return memset(dst, c, n); }
