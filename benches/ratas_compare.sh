#!/usr/bin/env bash
# Ratas' benchmark workload, side by side: Ratas' own binary (if given),
# tickwheel's `Wheel` (benches/ratas.rs), its `EmbeddedWheel`
# (benches/ratas_embedded.rs), tickwheel's C ABI with keys
# (ffi-tests/ratas_workload.c) and with embedded `tw_entry` timers
# (ffi-tests/ratas_workload_entry.c), the C ones built with gcc -O3 against the static
# library and, when a clang is found, both with cross-language LTO as well
# (docs/C.md, "Linking with cross-language LTO"; `ffi-tests/run.sh lto`
# builds them; RATAS_LTO=no skips them).
# User CPU seconds, paired alternating runs: each round runs every binary
# once, in turn. The seconds shown are each binary's median; each ratio is
# the median of the rounds' own ratios, so that a round the host ran slow
# or fast for every binary moves no ratio (the host's speed drifts by a
# third from minute to minute on the shared machines this runs on).
#
# Usage: RATAS_BENCH=/path/to/ratas_benchmark bash benches/ratas_compare.sh
#   RATAS_PAIRS (default "5 100 1000"), RATAS_ROUNDS (default 9).
# This script never fetches or builds Ratas. Build Ratas' own benchmark from
# its repository (github.com/jsnell/ratas, src/test/test_benchmark.cc, with
# g++ -O3) yourself and point RATAS_BENCH at the binary.
set -euo pipefail
cd "$(dirname "$0")/.."

pairs=${RATAS_PAIRS:-"5 100 1000"}
rounds=${RATAS_ROUNDS:-9}
ratas=${RATAS_BENCH:-}
if [ -z "$ratas" ] || [ ! -x "$ratas" ]; then
    echo "Ratas was not found (RATAS_BENCH is unset or not executable): only tickwheel runs."
    echo "Build Ratas' own benchmark from its repository and set RATAS_BENCH=/path/to/it."
    ratas=""
fi

# The static library, with the C ABI (the `capi` feature; no `[lib]
# crate-type` in Cargo.toml: see there).
cargo rustc --release --lib --features capi --crate-type staticlib --quiet
target_dir=$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
cargo bench --bench ratas --bench ratas_embedded --no-run --quiet 2>/dev/null ||
    cargo bench --bench ratas --bench ratas_embedded --no-run
rust_bench=$(ls -t "$target_dir"/release/deps/ratas-* | grep -v '\.d$' | head -n 1)
embedded_bench=$(ls -t "$target_dir"/release/deps/ratas_embedded-* | grep -v '\.d$' | head -n 1)
c_bench="$target_dir/release/ratas_workload_c"
entry_bench="$target_dir/release/ratas_workload_entry_c"
# -O3, as Ratas' benchmark is built (g++ -O3) and as Cargo builds the Rust
# port (opt-level 3): the three then differ only in their code.
gcc -std=c11 -O3 -Wall -Wextra -Werror -Iinclude -o "$c_bench" ffi-tests/ratas_workload.c \
    "$target_dir/release/libtickwheel.a" -lgcc_s -lutil -lrt -lpthread -lm -ldl
# Without LTO the tw_entry port is driven by tw_entry_wheel_advance_to_next
# (one call per pass): its poll loop would make a call per fired entry,
# which only pays once LTO inlines it (docs/C.md). The LTO build polls.
gcc -std=c11 -O3 -Wall -Wextra -Werror -Iinclude -DRATAS_ADVANCE -o "$entry_bench" \
    ffi-tests/ratas_workload_entry.c "$target_dir/release/libtickwheel.a" -lgcc_s -lutil -lrt -lpthread -lm -ldl
# The LTO build, when a usable clang is there (the mode checks its version).
lto_bench=""
entry_lto_bench=""
if [ "${RATAS_LTO:-yes}" = no ]; then
    echo "C ABI with cross-language LTO: skipped (RATAS_LTO=no)"
elif bash ffi-tests/run.sh lto >/tmp/tw_ratas_lto.log 2>&1; then
    lto_bench=ffi-tests/build/ratas_workload_lto
    entry_lto_bench=ffi-tests/build/ratas_workload_entry_lto
else
    echo "C ABI with cross-language LTO: not built ($(grep -m1 '^lto:' /tmp/tw_ratas_lto.log || tail -n 1 /tmp/tw_ratas_lto.log))"
fi

# One run of a Ratas-style binary: prints "seconds checksum".
run_env() {
    BENCH_PRINT_TRACE=no BENCH_PAIR_COUNT=$1 BENCH_ALLOW_SCHEDULE_IN_RANGE=$2 "$3" 2>/dev/null |
        tail -n 1 | awk -F, '{print $4, $5}'
}
run_rust() {
    RATAS_PAIRS=$1 RATAS_ROUNDS=1 RATAS_BENCH= RATAS_RANGE=$2 "$rust_bench" --bench |
        awk -F'|' -v r="$2" '$3 ~ r {gsub(/ /, "", $5); split($7, c, " "); print $5, c[3]}'
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# The median of the per-round ratios of two files of seconds, round by
# round, as "1.23x"; rounds that read 0 (too short for the CPU clock, at 5
# pairs) are left out, and "-" is printed when none is left.
ratio_of_rounds() {
    local m
    m=$(paste -d' ' "$1" "$2" | awk '$1 + 0 > 0 && $2 + 0 > 0 { print $1 / $2 }' | median)
    if [ -n "$m" ]; then printf '%.2fx\n' "$m"; else echo "-"; fi
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| pairs | range | Ratas (s) | Wheel (s) | Wheel/Ratas | Embedded (s) | Embedded/Ratas | C ABI (s) | C/Wheel | C tw_entry (s) | tw_entry/Embedded | C ABI, LTO (s) | LTO/Wheel | C tw_entry, LTO (s) | tw_entry LTO/Embedded | checksums (Ratas / Wheel / Embedded / C / tw_entry / LTO / tw_entry LTO) |"
echo "|---:|:---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
for p in $pairs; do
    for range in yes no; do
        : >/tmp/tw_ratas_r; : >/tmp/tw_ratas_w; : >/tmp/tw_ratas_c; : >/tmp/tw_ratas_l
        : >/tmp/tw_ratas_e; : >/tmp/tw_ratas_ce; : >/tmp/tw_ratas_el
        sums=""
        for _ in $(seq "$rounds"); do
            if [ -n "$ratas" ]; then
                read -r s c < <(run_env "$p" "$range" "$ratas"); echo "$s" >>/tmp/tw_ratas_r; sr=$c
            fi
            read -r s c < <(run_rust "$p" "$range"); echo "$s" >>/tmp/tw_ratas_w; sw=$c
            read -r s c < <(run_env "$p" "$range" "$embedded_bench"); echo "$s" >>/tmp/tw_ratas_e; se=$c
            read -r s c < <(run_env "$p" "$range" "$c_bench"); echo "$s" >>/tmp/tw_ratas_c; sc=$c
            read -r s c < <(run_env "$p" "$range" "$entry_bench"); echo "$s" >>/tmp/tw_ratas_ce; sce=$c
            if [ -n "$lto_bench" ]; then
                read -r s c < <(run_env "$p" "$range" "$lto_bench"); echo "$s" >>/tmp/tw_ratas_l; sl=$c
            fi
            if [ -n "$entry_lto_bench" ]; then
                read -r s c < <(run_env "$p" "$range" "$entry_lto_bench"); echo "$s" >>/tmp/tw_ratas_el; sel=$c
            fi
            sums="${sr:-n/a} / $sw / $se / $sc / $sce / ${sl:-n/a} / ${sel:-n/a}"
        done
        w=$(median </tmp/tw_ratas_w); cc=$(median </tmp/tw_ratas_c)
        e=$(median </tmp/tw_ratas_e); ce=$(median </tmp/tw_ratas_ce)
        if [ -n "$ratas" ]; then
            r=$(median </tmp/tw_ratas_r)
            wr=$(ratio_of_rounds /tmp/tw_ratas_w /tmp/tw_ratas_r)
            er=$(ratio_of_rounds /tmp/tw_ratas_e /tmp/tw_ratas_r)
        else r="not found"; wr="-"; er="-"; fi
        cw=$(ratio_of_rounds /tmp/tw_ratas_c /tmp/tw_ratas_w)
        cee=$(ratio_of_rounds /tmp/tw_ratas_ce /tmp/tw_ratas_e)
        if [ -n "$lto_bench" ]; then
            l=$(median </tmp/tw_ratas_l); lw=$(ratio_of_rounds /tmp/tw_ratas_l /tmp/tw_ratas_w)
        else l="not built"; lw="-"; fi
        if [ -n "$entry_lto_bench" ]; then
            el=$(median </tmp/tw_ratas_el); elw=$(ratio_of_rounds /tmp/tw_ratas_el /tmp/tw_ratas_e)
        else el="not built"; elw="-"; fi
        echo "| $p | $range | $r | $w | $wr | $e | $er | $cc | $cw | $ce | $cee | $l | $lw | $el | $elw | $sums |"
    done
done
