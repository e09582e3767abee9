#!/bin/sh
# bench_report.sh: the speculative-decoding report of the shipped models in one command
# (docs/bench.md, "The shipped models' report"). Run it from anywhere; paths are relative to the
# repository root.
#
#   1. data     the world's test split (`vlmspec data gen --seed 1 --train 0 --test 100`: the same
#               800 test conversations as the training world of scripts/make_models.sh) into $DATA,
#               unless $DATA/world.json exists
#   2. bench    `vlmspec bench spec` of $METHODS at gamma $GAMMA, temperatures $TEMPS, turns 1 and 2,
#               the first $LIMIT samples of each suite, every cell timed $REPEAT times (the fastest
#               kept), with `--with-model-bench` (model-bench-*.json: `vlmspec bench -m` of each LM);
#               resumes when $OUT holds part of the same run; then `vlmspec kbench` on the target's FFN
#               shape (F16 and BF16, 1-6 rows) into $OUT/kbench.txt
#   3. compare  with COMPARE_WITH=DIR (another run's folder of the same command): both runs' median
#               speedups side by side after the report; exit 1 when one differs by more than $TOLERANCE
#               (or when a greedy output differed from target-only decoding)
#
# The report is $OUT/report.md (its first table is the README's headline table); results.csv,
# summary.json and the SVG plots are beside it.
#
#   VLMSPEC       the CLI binary (default build/vlmspec)
#   MODELS        model directory (default models)
#   DATA          world directory (default out/world-test)
#   OUT           report folder (default out/bench-report)
#   METHODS       default ar,m,t,c,p,mt,mtcp,tabed-mt,tabed-mtcp,massv,massv-t
#   GAMMA         default 5
#   TEMPS         default 0,1
#   LIMIT         samples per suite (default 10)
#   REPEAT        timed runs per cell (default 2)
#   THREADS       default 2
#   BENCH_FLAGS   extra `vlmspec bench spec` flags (e.g. -n 64 or --fresh)
#   COMPARE_WITH  a previous run's OUT to compare with (default none)
#   TOLERANCE     relative tolerance of the comparison (default 0.05)
set -eu
cd "$(dirname "$0")/.."

VLMSPEC=${VLMSPEC:-build/vlmspec}
MODELS=${MODELS:-models}
DATA=${DATA:-out/world-test}
OUT=${OUT:-out/bench-report}
METHODS=${METHODS:-ar,m,t,c,p,mt,mtcp,tabed-mt,tabed-mtcp,massv,massv-t}
GAMMA=${GAMMA:-5}
TEMPS=${TEMPS:-0,1}
LIMIT=${LIMIT:-10}
REPEAT=${REPEAT:-2}
THREADS=${THREADS:-2}
BENCH_FLAGS=${BENCH_FLAGS:-}
COMPARE_WITH=${COMPARE_WITH:-}
TOLERANCE=${TOLERANCE:-0.05}

log() { echo "[bench_report $(date -u +%H:%M:%S)] $*" >&2; }
[ -x "$VLMSPEC" ] || { log "error: $VLMSPEC not found; build first (README.md)"; exit 1; }
[ -f "$MODELS/target.gguf" ] || { log "error: $MODELS/target.gguf not found (models/README.md)"; exit 1; }

if [ ! -f "$DATA/world.json" ]; then
    log "data: the world's test split into $DATA"
    "$VLMSPEC" data gen --out "$DATA" --seed 1 --train 0 --test 100 --quiet
fi

log "bench: $METHODS, gamma $GAMMA, temperatures $TEMPS, $LIMIT samples per suite, repeat $REPEAT, $THREADS threads -> $OUT"
start=$(date +%s)
rc=0
# shellcheck disable=SC2086
"$VLMSPEC" bench spec --models "$MODELS" --data "$DATA" --out "$OUT" --methods "$METHODS" --gamma "$GAMMA" \
    --temp "$TEMPS" --turns 1,2 --limit "$LIMIT" --repeat "$REPEAT" --threads "$THREADS" --with-model-bench \
    ${COMPARE_WITH:+--compare-with "$COMPARE_WITH" --tolerance "$TOLERANCE"} $BENCH_FLAGS || rc=$?
log "bench: exit $rc after $(( $(date +%s) - start )) s; report $OUT/report.md"
if [ -d "$OUT" ]; then
    # kernel figures beside the model figures: the target's FFN shape (F16) and its BF16 twin
    "$VLMSPEC" kbench --threads "$THREADS" --type F16,BF16 --out 1408 --in 512 --rows 1,2,4,6 --reps 10 \
        > "$OUT/kbench.txt" 2>&1 || log "kbench: exit $? (see $OUT/kbench.txt)"
    log "kernels: $OUT/kbench.txt"
fi
[ -z "$COMPARE_WITH" ] || [ "$rc" -ne 0 ] || log "compare: every median speedup within $TOLERANCE of $COMPARE_WITH's"
exit "$rc"
