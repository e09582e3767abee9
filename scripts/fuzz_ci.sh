#!/usr/bin/env bash
# fuzz_ci.sh: coverage-guided fuzzing of every fuzz/fuzz_*.c target (libFuzzer + ASan + UBSan, clang),
# bounded in time, from a copy of the committed corpus (docs/fuzzing.md).
#
#   scripts/fuzz_ci.sh [--merge] [BUILD_DIR]        (BUILD_DIR default: build-fuzz)
#
# Configures (or refreshes) BUILD_DIR with CC=clang -DVLMSPEC_FUZZ=ON (Release), builds only the fuzz
# targets, then runs each for FUZZ_SECONDS (default 60) in one process from a fresh copy of
# fuzz/corpus/<target>/ under BUILD_DIR/fuzz-run/<target>/ (so the repository is never written), with a
# per-target -max_len. One line per target: executions, exec/s, final cov: and ft:, corpus units
# before -> after, new units, and the outcome. Exit status 1 if any target crashed, leaked, hung,
# ran out of memory or tripped a sanitizer (the reproducer's path is printed; rerun it with
# BUILD_DIR/fuzz/<target> PATH); 0 otherwise. Exits 0 with a message when clang or its libFuzzer
# runtime (Debian: clang, libclang-rt-<N>-dev) is missing.
#
# --merge (developers): afterwards, libFuzzer's -merge=1 adds to fuzz/corpus/<target>/ only the
# units of the run's corpus that add coverage to it (the committed corpus only grows by such units;
# nothing is removed). Coverage here means edges (-use_counters=0: hit-count buckets are not new
# coverage), which keeps the corpus about half as large; FUZZ_MERGE_FLAGS replaces that flag (e.g.
# FUZZ_MERGE_FLAGS= to count hit-count buckets too). Review and commit the new files.
#
# Environment: FUZZ_SECONDS (per target, default 60), FUZZ_TARGETS (space-separated subset, e.g.
# "fuzz_json fuzz_gguf"), FUZZ_RUNS (stop each target after this many executions instead, e.g.
# 1000000; FUZZ_SECONDS still bounds it), FUZZ_BUILD_JOBS (default 1), FUZZ_EXTRA (more libFuzzer flags),
# FUZZ_SKIP_CODE (exit status when clang or libFuzzer is missing; default 0, ctest sets 77 = skipped).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

MERGE=0
BUILD=
for a in "$@"; do
    case "$a" in
    --merge) MERGE=1 ;;
    -h | --help)
        sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    -*)
        echo "fuzz_ci: unknown option $a" >&2
        exit 2
        ;;
    *) BUILD=$a ;;
    esac
done
BUILD=${BUILD:-build-fuzz}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
SECONDS_EACH=${FUZZ_SECONDS:-60}
JOBS=${FUZZ_BUILD_JOBS:-1}

# Longest input per target: a little above the largest seed, so mutations can grow it without
# spending executions on inputs far larger than the format needs.
max_len() {
    case "$1" in
    fuzz_gguf) echo 4096 ;;
    fuzz_image) echo 4096 ;;
    fuzz_json) echo 4096 ;;
    fuzz_tokenizer) echo 1024 ;;
    fuzz_dataset) echo 8192 ;;
    fuzz_checkpoint) echo 28672 ;; # the seed checkpoints are 24 KiB
    fuzz_oai) echo 2048 ;;
    *) echo 4096 ;;
    esac
}

# --- can this machine build a libFuzzer target at all? ---
CLANG=${CC:-clang}
case "$(basename "$CLANG")" in clang*) ;; *) CLANG=clang ;; esac
if ! command -v "$CLANG" >/dev/null 2>&1; then
    echo "fuzz_ci: SKIPPED: clang not found (Debian: apt-get install clang libclang-rt-dev)"
    exit "${FUZZ_SKIP_CODE:-0}"
fi
PROBE=$(mktemp -d)
trap 'rm -rf "$PROBE"' EXIT
printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return 0; }\n' > "$PROBE/p.c"
if ! "$CLANG" -fsanitize=fuzzer,address,undefined "$PROBE/p.c" -o "$PROBE/p" > "$PROBE/log" 2>&1; then
    echo "fuzz_ci: SKIPPED: $CLANG cannot link a libFuzzer + ASan + UBSan program (Debian: apt-get install libclang-rt-dev):"
    head -3 "$PROBE/log" | sed 's/^/  /'
    exit "${FUZZ_SKIP_CODE:-0}"
fi

# --- build ---
TARGETS=${FUZZ_TARGETS:-$(cd fuzz && ls fuzz_*.c | sed 's/\.c$//' | tr '\n' ' ')}
T0=$(date +%s)
# (Re)configured every time: a new fuzz/fuzz_*.c is a new target only after the glob runs again.
if [ -f "$BUILD/CMakeCache.txt" ] && ! grep -q '^CMAKE_C_COMPILER_ID:.*Clang\|^CMAKE_C_COMPILER:.*clang' "$BUILD/CMakeCache.txt"; then
    echo "fuzz_ci: $BUILD was configured with another compiler than clang; use another folder"
    exit 1
fi
mkdir -p "$BUILD"
CC="$CLANG" cmake -S "$ROOT" -B "$BUILD" -DVLMSPEC_FUZZ=ON -DCMAKE_BUILD_TYPE=Release > "$BUILD/fuzz_ci.configure.log" 2>&1 ||
    { cat "$BUILD/fuzz_ci.configure.log"; echo "fuzz_ci: configure failed"; exit 1; }
# shellcheck disable=SC2086
if ! cmake --build "$BUILD" -j"$JOBS" --target $TARGETS > "$BUILD/fuzz_ci.build.log" 2>&1; then
    grep -E -B2 -A6 'error|Error' "$BUILD/fuzz_ci.build.log" | head -60
    echo "fuzz_ci: build failed ($BUILD/fuzz_ci.build.log)"
    exit 1
fi
T1=$(date +%s)
echo "fuzz_ci: built $(echo $TARGETS | wc -w) targets in $((T1 - T0)) s ($BUILD); ${SECONDS_EACH} s each"

# --- run ---
# UBSan stops at the first report (the library is built with recoverable checks otherwise);
# ASan's leak check is on (libFuzzer reports a leaking input as a crash).
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
units() { find "$1" -maxdepth 1 -type f | wc -l; }
bytes() { find "$1" -maxdepth 1 -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}'; }
stat_of() { sed -n "s/^stat::$1: *//p" "$2" | tail -1; }

FAIL=0
for t in $TARGETS; do
    bin="$BUILD/fuzz/$t"
    seed="$ROOT/fuzz/corpus/$t"
    work="$BUILD/fuzz-run/$t"
    rm -rf "$work"
    mkdir -p "$work/corpus"
    [ -d "$seed" ] && cp "$seed"/* "$work/corpus/" 2>/dev/null
    before=$(units "$work/corpus")
    ml=$(max_len "$t")
    runs=()
    [ -n "${FUZZ_RUNS:-}" ] && runs=(-runs="$FUZZ_RUNS")
    # shellcheck disable=SC2086
    "$bin" "$work/corpus" -max_total_time="$SECONDS_EACH" "${runs[@]}" -max_len="$ml" -timeout=20 \
        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/" ${FUZZ_EXTRA:-} > "$work/log" 2>&1
    rc=$?
    execs=$(stat_of number_of_executed_units "$work/log")
    eps=$(stat_of average_exec_per_sec "$work/log")
    newu=$(stat_of new_units_added "$work/log")
    last=$(grep -E '^#[0-9]+.*cov: ' "$work/log" | tail -1)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<< "$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<< "$last")
    after=$(units "$work/corpus")
    if [ $rc -eq 0 ]; then
        outcome=ok
    else
        FAIL=1
        art=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$work/log" | tail -1)
        kind=$(grep -m1 -oE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer|UndefinedBehaviorSanitizer)[^(]*|runtime error:.*|property violated:.*' "$work/log" | head -1)
        outcome="FAILED (rc $rc${kind:+: $kind}) input: ${art:-none written} log: $work/log"
    fi
    printf '%-16s execs %10s  %7s exec/s  cov %5s  ft %6s  corpus %4s -> %4s units (+%s new)  %s\n' \
        "$t" "${execs:-?}" "${eps:-?}" "${cov:-?}" "${ft:-?}" "$before" "$after" "${newu:-?}" "$outcome"
    if [ $rc -ne 0 ]; then
        grep -A40 -m1 -E '==ERROR|runtime error|property violated|ALARM|out-of-memory' "$work/log" | head -60 | sed 's/^/    /'
        continue
    fi
    if [ $MERGE -eq 1 ]; then
        mkdir -p "$seed"
        ub=$(units "$seed") bb=$(bytes "$seed")
        # shellcheck disable=SC2086
        "$bin" -merge=1 ${FUZZ_MERGE_FLAGS--use_counters=0} -max_len="$ml" -timeout=20 -rss_limit_mb=2048 "$seed" \
            "$work/corpus" > "$work/merge.log" 2>&1 ||
            { echo "    merge failed: $work/merge.log"; FAIL=1; continue; }
        printf '    merged into fuzz/corpus/%s: %s -> %s units, %s -> %s bytes\n' "$t" "$ub" "$(units "$seed")" \
            "$bb" "$(bytes "$seed")"
    fi
done
echo "fuzz_ci: $([ $FAIL -eq 0 ] && echo 'no crash' || echo 'FAILURES above'); $(($(date +%s) - T0)) s in all"
exit $FAIL
