#!/usr/bin/env bash
# Builds the C11/C++17 tests of the C ABI against libtickwheel and runs them:
#   plain      static library, -Wall -Wextra -Wpedantic -Werror
#   shared     the same C test linked against libtickwheel.so (rpath)
#   asan       gcc -fsanitize=address,undefined (LeakSanitizer on)
#   valgrind   valgrind --error-exitcode=1 --leak-check=full
# Usage: bash ffi-tests/run.sh [plain|shared|asan|valgrind]...   (default: all)
# `cargo test --test ffi_c` runs the plain and shared builds; .ci/run runs this.
set -euo pipefail
cd "$(dirname "$0")/.."

modes=("$@")
[ ${#modes[@]} -eq 0 ] && modes=(plain shared asan valgrind)

target_dir=$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
# The package builds only an rlib by default; the C libraries are built with
# explicit crate types into a target directory of their own, the same one as
# tests/ffi_c.rs uses (so whichever runs first builds, the other reuses it).
CARGO_TARGET_DIR="$target_dir/ffi" cargo rustc --lib --crate-type staticlib,cdylib --quiet
libdir="$target_dir/ffi/debug"
[ -f "$libdir/libtickwheel.a" ] || { echo "no $libdir/libtickwheel.a" >&2; exit 1; }

build=ffi-tests/build
mkdir -p "$build"
cflags=(-std=c11 -Wall -Wextra -Wpedantic -Werror -g -O1 -Iinclude)
cxxflags=(-std=c++17 -Wall -Wextra -Wpedantic -Werror -g -O1 -Iinclude)
# What `rustc --print native-static-libs` lists for this target.
libs=(-lgcc_s -lutil -lrt -lpthread -lm -ldl)
supp=share/tickwheel/valgrind.supp

# compile <suffix> <extra flags...>: the four programs that link tickwheel.
compile() {
    local suffix=$1
    shift
    gcc "${cflags[@]}" "$@" -o "$build/test_c$suffix" ffi-tests/test_c.c "$libdir/libtickwheel.a" "${libs[@]}"
    gcc "${cflags[@]}" "$@" -o "$build/test_threads$suffix" ffi-tests/test_threads.c "$libdir/libtickwheel.a" "${libs[@]}"
    g++ "${cxxflags[@]}" "$@" -o "$build/test_cpp$suffix" ffi-tests/test_cpp.cpp "$libdir/libtickwheel.a" "${libs[@]}"
    gcc "${cflags[@]}" "$@" -o "$build/echo_server$suffix" ffi-tests/echo_server.c "$libdir/libtickwheel.a" "${libs[@]}"
}
gcc "${cflags[@]}" -o "$build/echo_test" ffi-tests/echo_test.c

step() { printf '\n--- ffi-tests: %s ---\n' "$*"; }

for mode in "${modes[@]}"; do
    case $mode in
    plain)
        step "plain"
        compile ""
        "$build/test_c"
        "$build/test_threads"
        "$build/test_cpp"
        "$build/echo_test" 300 500 250 "$build/echo_server" 500
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
        "$build/test_threads_asan"
        "$build/test_cpp_asan"
        "$build/echo_test" 300 500 500 "$build/echo_server_asan" 500
        unset ASAN_OPTIONS UBSAN_OPTIONS
        ;;
    valgrind)
        step "valgrind"
        compile ""
        vg=(valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,possible
            --suppressions="$supp")
        "${vg[@]}" "$build/test_c"
        "${vg[@]}" "$build/test_threads"
        "${vg[@]}" "$build/test_cpp"
        # The server runs under valgrind, about 20x slower: a wider tolerance.
        "$build/echo_test" 300 500 1500 "${vg[@]}" "$build/echo_server" 500
        ;;
    *)
        echo "unknown mode: $mode (plain, shared, asan, valgrind)" >&2
        exit 2
        ;;
    esac
done
printf '\n--- ffi-tests: passed (%s) ---\n' "${modes[*]}"
