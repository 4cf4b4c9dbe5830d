#!/usr/bin/env bash
# Builds the C11/C++17 tests of the C ABI against libtickwheel and runs them:
#   plain      static library, -Wall -Wextra -Wpedantic -Werror
#   shared     the same C test linked against libtickwheel.so (rpath)
#   asan       gcc -fsanitize=address,undefined (LeakSanitizer on)
#   valgrind   valgrind --error-exitcode=1 --leak-check=full
#   tsan       the C++ tests built with -fsanitize=thread against a
#              TSan-instrumented build of the library (nightly, -Zbuild-std)
#   lto        cross-language LTO, as docs/C.md "Linking with cross-language
#              LTO" describes: the library as LLVM bitcode, the C tests and
#              the Ratas workload ports with clang -flto=thin, linked by the
#              toolchain's rust-lld, so the C callers inline the hot calls;
#              checks that they did, and that the port's checksum is the
#              one of the gcc-built port. Needs clang (LLVM <= rustc's).
#   overload   a measurement, not a test: ffi-tests/overload.c (8 threads
#              arming 1.6 M timers on 4 shards; CONTRACT 20, BENCHMARKS.md)
#              against the release library, as a C user builds it.
#              Arguments after `overload` go to the program (see its top).
# Usage: bash ffi-tests/run.sh [plain|shared|asan|valgrind|tsan|lto]...
#        bash ffi-tests/run.sh overload [threads timers_per_thread shards max_delay_ms timeout_s arm_nice lend]
#        (default: plain shared asan valgrind; tsan needs the nightly
#        toolchain with rust-src, so it runs only when named)
# `cargo test --features capi --test ffi_c` runs the plain and shared builds;
# .ci/run runs this.
set -euo pipefail
cd "$(dirname "$0")/.."

modes=("$@")
[ ${#modes[@]} -eq 0 ] && modes=(plain shared asan valgrind)

target_dir=$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')

if [ "${modes[0]}" = overload ]; then
    # Timing needs the optimized library (docs/C.md, "Without cargo-c"),
    # built into the same target directory as the tests' debug one.
    CARGO_TARGET_DIR="$target_dir/ffi" cargo rustc --release --lib --features capi --crate-type staticlib,cdylib --quiet
    mkdir -p ffi-tests/build
    gcc -std=c11 -Wall -Wextra -Wpedantic -Werror -O2 -Iinclude -o ffi-tests/build/overload \
        ffi-tests/overload.c "$target_dir/ffi/release/libtickwheel.a" -lgcc_s -lutil -lrt -lpthread -lm -ldl
    exec ffi-tests/build/overload "${modes[@]:1}"
fi

# The package builds only an rlib, without the C ABI, by default; the C
# libraries are built with the `capi` feature and explicit crate types into a
# target directory of their own, with the same features as tests/ffi_c.rs
# uses (so whichever runs first builds, the other reuses it).
CARGO_TARGET_DIR="$target_dir/ffi" cargo rustc --lib --features capi --crate-type staticlib,cdylib --quiet
libdir="$target_dir/ffi/debug"
[ -f "$libdir/libtickwheel.a" ] || { echo "no $libdir/libtickwheel.a" >&2; exit 1; }

build=ffi-tests/build
mkdir -p "$build"
cflags=(-std=c11 -Wall -Wextra -Wpedantic -Werror -g -O1 -Iinclude)
cxxflags=(-std=c++17 -Wall -Wextra -Wpedantic -Werror -g -O1 -Iinclude)
# What `rustc --print native-static-libs` lists for this target.
libs=(-lgcc_s -lutil -lrt -lpthread -lm -ldl)
supp=share/tickwheel/valgrind.supp

# compile_cpp <suffix> <library> <extra flags...>: the C++ tests (the
# -fno-exceptions one checks the wrapper's error-code API).
compile_cpp() {
    local suffix=$1 lib=$2
    shift 2
    g++ "${cxxflags[@]}" "$@" -o "$build/test_cpp$suffix" ffi-tests/test_cpp.cpp "$lib" "${libs[@]}"
    g++ "${cxxflags[@]}" "$@" -o "$build/test_cpp_lifetime$suffix" ffi-tests/test_cpp_lifetime.cpp "$lib" "${libs[@]}"
    g++ "${cxxflags[@]}" -fno-exceptions "$@" -o "$build/test_cpp_noexcept$suffix" ffi-tests/test_cpp_noexcept.cpp "$lib" "${libs[@]}"
}
run_cpp() {
    local suffix=$1
    shift
    "$@" "$build/test_cpp$suffix"
    "$@" "$build/test_cpp_lifetime$suffix"
    "$@" "$build/test_cpp_noexcept$suffix"
}

# compile <suffix> <extra flags...>: the programs that link tickwheel.
compile() {
    local suffix=$1
    shift
    gcc "${cflags[@]}" "$@" -o "$build/test_c$suffix" ffi-tests/test_c.c "$libdir/libtickwheel.a" "${libs[@]}"
    gcc "${cflags[@]}" "$@" -o "$build/test_entry$suffix" ffi-tests/test_entry.c "$libdir/libtickwheel.a" "${libs[@]}"
    gcc "${cflags[@]}" "$@" -o "$build/test_threads$suffix" ffi-tests/test_threads.c "$libdir/libtickwheel.a" "${libs[@]}"
    compile_cpp "$suffix" "$libdir/libtickwheel.a" "$@"
    gcc "${cflags[@]}" "$@" -o "$build/echo_server$suffix" ffi-tests/echo_server.c "$libdir/libtickwheel.a" "${libs[@]}"
    gcc "${cflags[@]}" "$@" -o "$build/epoll_loop$suffix" ffi-tests/epoll_loop.c "$libdir/libtickwheel.a" "${libs[@]}"
}
gcc "${cflags[@]}" -o "$build/echo_test" ffi-tests/echo_test.c

step() { printf '\n--- ffi-tests: %s ---\n' "$*"; }

for mode in "${modes[@]}"; do
    case $mode in
    plain)
        step "plain"
        compile ""
        # Built so that it keeps compiling, not run: a measurement (mode overload).
        gcc "${cflags[@]}" -o "$build/overload" ffi-tests/overload.c "$libdir/libtickwheel.a" "${libs[@]}"
        "$build/test_c"
        "$build/test_entry"
        "$build/test_threads"
        run_cpp ""
        "$build/echo_test" 300 500 250 "$build/echo_server" 500
        "$build/epoll_loop" 50 8
        ;;
    shared)
        step "shared library"
        gcc "${cflags[@]}" -o "$build/test_c_shared" ffi-tests/test_c.c \
            -L"$libdir" -ltickwheel -Wl,-rpath,"$libdir"
        "$build/test_c_shared"
        ;;
    asan)
        step "AddressSanitizer + UBSan"
        compile "_asan" -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
        export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
        export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
        "$build/test_c_asan"
        "$build/test_entry_asan"
        "$build/test_threads_asan"
        run_cpp "_asan"
        "$build/echo_test" 300 500 500 "$build/echo_server_asan" 500
        "$build/epoll_loop_asan" 50 8
        unset ASAN_OPTIONS UBSAN_OPTIONS
        ;;
    valgrind)
        step "valgrind"
        compile ""
        # --fair-sched=yes: valgrind runs one thread at a time, and its default
        # lock is unfair: a thread spinning for another (a destructor waiting
        # for a running callback) can keep the lock and starve it. In CI one
        # run of test_cpp_lifetime took 8-12 min that way (3-5 s usually).
        vg=(valgrind -q --fair-sched=yes --error-exitcode=1 --leak-check=full
            --errors-for-leak-kinds=definite,possible --suppressions="$supp")
        "${vg[@]}" "$build/test_c"
        "${vg[@]}" "$build/test_entry"
        "${vg[@]}" "$build/test_threads"
        run_cpp "" "${vg[@]}"
        # The server runs under valgrind, about 20x slower: a wider tolerance.
        "$build/echo_test" 300 500 1500 "${vg[@]}" "$build/echo_server" 500
        "${vg[@]}" "$build/epoll_loop" 50 8
        ;;
    tsan)
        step "ThreadSanitizer (C++ tests, instrumented library)"
        # TSan only sees synchronization in instrumented code, so the library
        # and Rust's std are rebuilt with -Zsanitizer=thread (own target dir).
        # `cargo rustc --crate-type staticlib` builds the archive whatever
        # crate-type Cargo.toml lists.
        host=$(rustc -vV | sed -n 's/^host: //p')
        RUSTFLAGS="-Zsanitizer=thread" cargo +nightly rustc --quiet --lib --features capi --crate-type staticlib \
            -Zbuild-std --target "$host" --target-dir "$target_dir/tsan"
        tsan_lib="$target_dir/tsan/$host/debug/libtickwheel.a"
        # GCC 12's libtsan lacks the __tsan_mem* entry points that LLVM's
        # instrumentation calls: a shim forwards them to the intercepted libc.
        gcc "${cflags[@]}" -fno-builtin -fsanitize=thread -c -o "$build/tsan_shim.o" ffi-tests/tsan_shim.c
        compile_cpp "_tsan" "$tsan_lib" -fsanitize=thread "$build/tsan_shim.o"
        export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
        run_cpp "_tsan"
        unset TSAN_OPTIONS
        ;;
    lto)
        step "cross-language LTO (clang -flto=thin, rust-lld)"
        # The linker must read both sides' bitcode: the toolchain's own
        # rust-lld (LLVM as new as rustc's) does; a clang as old as or older
        # than rustc's LLVM writes bitcode it reads.
        llvm_major=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
        clang=""
        for candidate in clang $(seq -f 'clang-%g' "$llvm_major" -1 14); do
            command -v "$candidate" >/dev/null || continue
            major=$("$candidate" -dumpversion | cut -d. -f1)
            if [ "$major" -le "$llvm_major" ]; then clang=$candidate; break; fi
        done
        [ -n "$clang" ] || { echo "lto: no clang with LLVM <= $llvm_major on PATH" >&2; exit 1; }
        host=$(rustc -vV | sed -n 's/^host: //p')
        gcc_ld="$(rustc --print sysroot)/lib/rustlib/$host/bin/gcc-ld"
        [ -x "$gcc_ld/ld.lld" ] || { echo "lto: the toolchain has no rust-lld ($gcc_ld)" >&2; exit 1; }
        echo "$clang ($("$clang" -dumpversion)), rustc's LLVM $llvm_major, linker $gcc_ld/ld.lld"
        RUSTFLAGS="-Clinker-plugin-lto" CARGO_TARGET_DIR="$target_dir/xlto" \
            cargo rustc --release --lib --features capi --crate-type staticlib --quiet
        lto_lib="$target_dir/xlto/release/libtickwheel.a"
        # ThinLTO imports functions of up to 100 instructions and inlines
        # below a cost of 250 by default: the hot entry points (checks,
        # panic boundary, the wheel's fast path) are bigger, so raise both.
        # A call inside a loop that runs 60 times or more per call of its
        # function gets the "locally hot" limit instead, 525 by default,
        # even when the other is higher: raised as well.
        lto_flags=(--target="$host" -O3 -flto=thin -B"$gcc_ld" -fuse-ld=lld
            -Wl,-mllvm,-import-instr-limit=1000 -Wl,-mllvm,-inline-threshold=2000
            -Wl,-mllvm,-locally-hot-callsite-threshold=2000)
        lto_c() { "$clang" -std=c11 -Wall -Wextra -Wpedantic -Werror -Iinclude "${lto_flags[@]}" "$@" "$lto_lib" "${libs[@]}"; }
        lto_c -o "$build/test_c_lto" ffi-tests/test_c.c
        lto_c -o "$build/test_threads_lto" ffi-tests/test_threads.c
        lto_c -o "$build/ratas_workload_lto" ffi-tests/ratas_workload.c
        lto_c -o "$build/test_entry_lto" ffi-tests/test_entry.c
        # The benchmark build (NDEBUG: no per-pass assertion, as Cargo's
        # bench profile has none); the checked build asserts every pass.
        lto_c -DNDEBUG -o "$build/ratas_workload_entry_lto" ffi-tests/ratas_workload_entry.c
        lto_c -o "$build/ratas_workload_entry_checked_lto" ffi-tests/ratas_workload_entry.c
        lto_c -DRATAS_ADVANCE -o "$build/ratas_workload_entry_advance_lto" ffi-tests/ratas_workload_entry.c
        "$build/test_c_lto"
        "$build/test_entry_lto"
        "$build/test_threads_lto"
        # The port's hot calls (schedule, reschedule, cancel, the advance of
        # its main loop) must be inlined: a call left to any of them means
        # the recipe no longer works. (Only the one-tick advance of its first
        # second, tw_wheel_advance_keep, may stay a call.)
        left=$(objdump -d --no-show-raw-insn "$build/ratas_workload_lto" |
            grep -cE 'call +[0-9a-f]+ <tw_wheel_((re)?schedule(_in_range)?_after|cancel|advance_to_next)>' || true)
        [ "$left" -eq 0 ] || { echo "lto: $left calls to hot tw_wheel_* functions were not inlined" >&2; exit 1; }
        # The port on embedded timers (tw_entry) is built the same way for
        # benches/ratas_compare.sh; its checksum is checked below. Its loop
        # polls (tw_entry_wheel_poll_to_next) and its packet path range-schedules
        # and cancels: those calls must be inlined too, or its handlers
        # are not inlined into its loop either.
        left=$(objdump -d --no-show-raw-insn "$build/ratas_workload_entry_lto" |
            grep -cE 'call +[0-9a-f]+ <tw_entry_(wheel_poll(_to_next)?|schedule_in_range|cancel)>' || true)
        [ "$left" -eq 0 ] || { echo "lto: $left calls to hot tw_entry_* functions were not inlined" >&2; exit 1; }
        gcc -std=c11 -O2 -Iinclude -o "$build/ratas_workload_gcc" ffi-tests/ratas_workload.c \
            "$target_dir/ffi/debug/libtickwheel.a" "${libs[@]}"
        for range in yes no; do
            gcc_sum=$(BENCH_PAIR_COUNT=20 BENCH_ALLOW_SCHEDULE_IN_RANGE=$range "$build/ratas_workload_gcc" | cut -d, -f5)
            for port in ratas_workload_lto ratas_workload_entry_lto ratas_workload_entry_checked_lto ratas_workload_entry_advance_lto; do
                lto_sum=$(BENCH_PAIR_COUNT=20 BENCH_ALLOW_SCHEDULE_IN_RANGE=$range "$build/$port" | cut -d, -f5)
                echo "Ratas workload, 20 pairs, range $range: checksum $lto_sum ($port) / $gcc_sum (gcc, debug library)"
                [ -n "$lto_sum" ] && [ "$lto_sum" = "$gcc_sum" ] || { echo "lto: checksums differ" >&2; exit 1; }
            done
        done
        ;;
    *)
        echo "unknown mode: $mode (plain, shared, asan, valgrind, tsan, lto; overload alone)" >&2
        exit 2
        ;;
    esac
done
printf '\n--- ffi-tests: passed (%s) ---\n' "${modes[*]}"
