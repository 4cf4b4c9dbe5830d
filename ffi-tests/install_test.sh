#!/usr/bin/env bash
# Installs tickwheel the way a C user or a distribution packager does, with
# cargo-c, into a temporary DESTDIR, and builds a C program against the
# installed copy with nothing but pkg-config:
#   - the files land where they should (header subdirectory, C++ header,
#     versioned shared library and its links, static library, .pc, valgrind
#     suppressions);
#   - the shared library's SONAME is libtickwheel.so.0;
#   - ffi-tests/install_check.c links with `pkg-config --cflags --libs` and
#     runs against the shared library (LD_LIBRARY_PATH into the DESTDIR);
#   - it links with `pkg-config --static --cflags --libs` against a
#     static-only install (what `cargo cinstall --library-type staticlib`
#     gives) and runs without the shared library;
#   - <tickwheel.hpp> compiles as C++17 with the same flags;
#   - under valgrind with the installed suppression file, the shared build
#     reports no error (skipped when valgrind is missing).
# Needs cargo-c (`cargo cinstall`); .ci/run installs it when missing.
# Usage: bash ffi-tests/install_test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo-cinstall >/dev/null || {
    echo "cargo-c is not installed (cargo install cargo-c --locked)" >&2
    exit 1
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dest="$tmp/dest"
prefix=/usr
lib="$dest$prefix/lib"

step() { printf '\n--- install test: %s ---\n' "$*"; }
fail() {
    echo "install test: $*" >&2
    exit 1
}

step "cargo cinstall --release --prefix $prefix --destdir DESTDIR"
cargo cinstall --release --prefix "$prefix" --libdir lib --destdir "$dest"
(cd "$dest" && find . -type f -o -type l | sort)

for file in include/tickwheel/tickwheel.h include/tickwheel/tickwheel.hpp \
    lib/libtickwheel.a lib/libtickwheel.so lib/libtickwheel.so.0 \
    lib/pkgconfig/tickwheel.pc share/tickwheel/valgrind.supp; do
    [ -e "$dest$prefix/$file" ] || fail "$prefix/$file not installed"
done
# The installed header is the committed one, byte for byte.
cmp include/tickwheel.h "$dest$prefix/include/tickwheel/tickwheel.h"

step "SONAME"
soname=$(readelf -d "$lib/libtickwheel.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
echo "SONAME: $soname"
[ "$soname" = libtickwheel.so.0 ] || fail "SONAME is '$soname', expected libtickwheel.so.0"

step "tickwheel.pc"
cat "$lib/pkgconfig/tickwheel.pc"
grep -Eq '^Libs\.private:.*-l' "$lib/pkgconfig/tickwheel.pc" ||
    fail "Libs.private lists no native library"

# pkg-config finds the DESTDIR's .pc and prefixes its -I/-L paths with the
# DESTDIR (the .pc itself says /usr, as an installed package would).
export PKG_CONFIG_PATH="$lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$dest"
pkg-config --exists --print-errors tickwheel

step "shared: cc install_check.c \$(pkg-config --cflags --libs tickwheel)"
# shellcheck disable=SC2046 # pkg-config output is meant to be word-split
gcc -std=c11 -Wall -Wextra -Wpedantic -Werror -o "$tmp/check_shared" \
    ffi-tests/install_check.c $(pkg-config --cflags --libs tickwheel)
readelf -d "$tmp/check_shared" | grep -q 'NEEDED.*\[libtickwheel\.so\.0\]' ||
    fail "the shared build does not need libtickwheel.so.0"
LD_LIBRARY_PATH="$lib" "$tmp/check_shared"

step "static: cc install_check.c \$(pkg-config --static --cflags --libs tickwheel)"
# A static-only install: the same tree without the shared library, so that
# -ltickwheel can only mean libtickwheel.a.
static="$tmp/static"
cp -a "$dest" "$static"
rm "$static$prefix"/lib/libtickwheel.so*
# shellcheck disable=SC2046
gcc -std=c11 -Wall -Wextra -Wpedantic -Werror -o "$tmp/check_static" \
    ffi-tests/install_check.c $(PKG_CONFIG_SYSROOT_DIR="$static" \
    PKG_CONFIG_PATH="$static$prefix/lib/pkgconfig" pkg-config --static --cflags --libs tickwheel)
if readelf -d "$tmp/check_static" | grep -q 'NEEDED.*libtickwheel'; then
    fail "the static build needs a shared libtickwheel"
fi
"$tmp/check_static"

step "C++: #include <tickwheel.hpp> with \$(pkg-config --cflags tickwheel)"
# shellcheck disable=SC2046
printf '#include <tickwheel.hpp>\nint main() { tickwheel::service s; return 0; }\n' |
    g++ -std=c++17 -Wall -Wextra -Wpedantic -Werror -x c++ -o "$tmp/check_cpp" - \
        $(pkg-config --cflags --libs tickwheel)
LD_LIBRARY_PATH="$lib" "$tmp/check_cpp"

if command -v valgrind >/dev/null; then
    step "valgrind with the installed suppression file"
    LD_LIBRARY_PATH="$lib" valgrind -q --error-exitcode=1 --leak-check=full \
        --errors-for-leak-kinds=definite,possible \
        --suppressions="$dest$prefix/share/tickwheel/valgrind.supp" "$tmp/check_shared"
fi

printf '\n--- install test: passed ---\n'
