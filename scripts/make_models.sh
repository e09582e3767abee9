#!/bin/sh
# make_models.sh: reproduces vlmspec's target VLM from the seed (docs/target.md, models/README.md).
#
#   1. data       vlmspec data gen        -> $WORK/world        (skipped when world.json exists)
#   2. tokenizer  vlmspec tokenizer train -> $WORK/tok.gguf     (skipped when present)
#   3. training   vlmspec train target --resume, in chunks of at most $CHUNK_SECONDS each (every chunk
#                 ends with a checkpoint; the next one continues exactly) until $WORK/train/target.gguf
#                 exists
#   4. eval       vlmspec eval on the test split -> $WORK/eval.json, $WORK/eval.txt (redone when the
#                 model is newer)
#   5. results    $OUT/target.gguf, $OUT/target-mmproj.gguf (F16), $OUT/target-train.json,
#                 $OUT/target-eval.json, $OUT/target-eval.txt, $OUT/target-loss.svg (copied when changed)
#
# Idempotent: run it again after an interruption (or from cron with ONE_CHUNK=1) and it picks up where
# it stopped. Every setting is an environment variable; the defaults are the shipped model's.
# It runs from the repository root (relative paths below are relative to it).
#
#   VLMSPEC          the CLI binary (default build/vlmspec)
#   SEED             world seed (default 1)
#   TRAIN_PER_SUITE  training conversations per suite (default 4000)
#   TEST_PER_SUITE   test conversations per suite (default 100)
#   VOCAB            BPE vocabulary (default 2048)
#   EPOCHS           passes over the training split (default 3)
#   CAPTIONS         1: also train on the captions split, one caption per training image (default 1)
#   FREEZE_VISION    steps the vision tower keeps its initial weights while the projector and LM learn
#                    to read its features (default 4000; without it the tower collapsed, docs/target.md)
#   VISION_WARMUP    steps over which the unfrozen tower's learning rate ramps up (default 500)
#   VISION_LR        the tower's learning rate as a multiple of the schedule's (default 0.1; at the full
#                    rate the tower drifted away from OCR and charts, docs/target.md)
#   TRAIN_FLAGS      extra `vlmspec train target` flags (sizes, --lr, --batch ...; default none: the
#                    command's defaults, a 28.8M-parameter target)
#   THREADS          threads (default 2)
#   GEMM_SWITCH      the step at which training switches from OpenBLAS's F32 products to amx-bf16x3
#                    (default 0: amx-bf16x3 from the start, as the shipped target; only on CPUs with
#                    AMX-BF16, elsewhere the whole run uses OpenBLAS)
#   ATTENTION_SWITCH the step at which the attention switches from the direct F32 kernels to per-head
#                    products on the AMX-BF16 tiles (`--attention gemm`, ~1.9x faster steps; default
#                    4000, as the shipped target; 0: gemm from the start; only with amx-bf16x3)
#   CHUNK_SECONDS    wall-time limit of one training run (default 7000, under 2 hours)
#   ONE_CHUNK        1: stop after one training chunk (default 0: train to the end)
#   EVAL_FLAGS       extra `vlmspec eval` flags (e.g. --limit 20; default none: the whole test split)
#   WORK             scratch directory (default out/models; not committed)
#   OUT              results directory (default models)
set -eu
cd "$(dirname "$0")/.."

VLMSPEC=${VLMSPEC:-build/vlmspec}
SEED=${SEED:-1}
TRAIN_PER_SUITE=${TRAIN_PER_SUITE:-4000}
TEST_PER_SUITE=${TEST_PER_SUITE:-100}
VOCAB=${VOCAB:-2048}
EPOCHS=${EPOCHS:-3}
CAPTIONS=${CAPTIONS:-1}
FREEZE_VISION=${FREEZE_VISION:-4000}
VISION_WARMUP=${VISION_WARMUP:-500}
VISION_LR=${VISION_LR:-0.1}
TRAIN_FLAGS=${TRAIN_FLAGS:-}
THREADS=${THREADS:-2}
GEMM_SWITCH=${GEMM_SWITCH:-0}
ATTENTION_SWITCH=${ATTENTION_SWITCH:-4000}
CHUNK_SECONDS=${CHUNK_SECONDS:-7000}
ONE_CHUNK=${ONE_CHUNK:-0}
EVAL_FLAGS=${EVAL_FLAGS:-}
WORK=${WORK:-out/models}
OUT=${OUT:-models}

log() { printf '[make_models %s] %s\n' "$(date '+%H:%M:%S')" "$*"; }

if [ ! -x "$VLMSPEC" ]; then
    echo "make_models: $VLMSPEC not found (build first: cmake --build build)" >&2
    exit 1
fi
mkdir -p "$WORK" "$OUT"

# 1. data (world.json is written last: its presence means the directory is complete)
if [ -f "$WORK/world/world.json" ]; then
    log "data: $WORK/world exists"
else
    log "data: generating seed $SEED, $TRAIN_PER_SUITE train + $TEST_PER_SUITE test per suite"
    "$VLMSPEC" data gen --out "$WORK/world" --seed "$SEED" --train "$TRAIN_PER_SUITE" \
        --test "$TEST_PER_SUITE" --quiet
fi

# 2. tokenizer
if [ -f "$WORK/tok.gguf" ]; then
    log "tokenizer: $WORK/tok.gguf exists"
else
    log "tokenizer: training a $VOCAB-token BPE"
    "$VLMSPEC" tokenizer train --data "$WORK/world" --vocab "$VOCAB" -o "$WORK/tok.gguf.tmp"
    mv "$WORK/tok.gguf.tmp" "$WORK/tok.gguf"
fi

# 3. training, in resumable chunks. With GEMM_SWITCH > 0 the first GEMM_SWITCH steps use OpenBLAS's F32
#    products and the rest amx-bf16x3 (about twice the speed, docs/training.md); the attention runs the
#    direct kernels before ATTENTION_SWITCH and per-head AMX products after it: a chunk that starts
#    before a switch stops at it.
step_now() { # the checkpoint's step, 0 before the first one
    if [ -f "$WORK/train/ckpt/ckpt.gguf" ]; then
        "$VLMSPEC" gguf "$WORK/train/ckpt/ckpt.gguf" | awk '$1 == "train.step" { print $3 }'
    else
        echo 0
    fi
}
CAPTION_FLAGS=""
[ "$CAPTIONS" = 1 ] && CAPTION_FLAGS="--captions"
[ "$FREEZE_VISION" -gt 0 ] && CAPTION_FLAGS="$CAPTION_FLAGS --freeze-vision $FREEZE_VISION"
[ "$FREEZE_VISION" -gt 0 ] && [ "$VISION_WARMUP" -gt 0 ] && CAPTION_FLAGS="$CAPTION_FLAGS --vision-warmup $VISION_WARMUP"
[ "$VISION_LR" != 1 ] && CAPTION_FLAGS="$CAPTION_FLAGS --vision-lr $VISION_LR"
while [ ! -f "$WORK/train/target.gguf" ]; do
    GEMM_FLAGS=""
    if "$VLMSPEC" version | grep -q "training products:.* amx-bf16x3"; then
        STEP=$(step_now)
        if [ "$STEP" -lt "$GEMM_SWITCH" ]; then
            GEMM_FLAGS="--gemm openblas --attention direct --chunk-steps $((GEMM_SWITCH - STEP))"
        elif [ "$STEP" -lt "$ATTENTION_SWITCH" ]; then
            GEMM_FLAGS="--gemm amx-bf16x3 --attention direct --chunk-steps $((ATTENTION_SWITCH - STEP))"
        else
            GEMM_FLAGS="--gemm amx-bf16x3 --attention gemm"
        fi
    fi
    log "training: chunk of at most $CHUNK_SECONDS s $GEMM_FLAGS"
    # shellcheck disable=SC2086 # the *_FLAGS are lists of flags
    "$VLMSPEC" train target --data "$WORK/world" --tokenizer "$WORK/tok.gguf" --out "$WORK/train" \
        --epochs "$EPOCHS" --threads "$THREADS" --resume --time-limit "$CHUNK_SECONDS" $CAPTION_FLAGS \
        $GEMM_FLAGS $TRAIN_FLAGS
    if [ "$ONE_CHUNK" = 1 ] && [ ! -f "$WORK/train/target.gguf" ]; then
        log "training: chunk done (ONE_CHUNK=1); run again to continue"
        exit 0
    fi
done
log "training: done ($WORK/train/target.gguf)"

# 4. eval (again when the model is newer than the results)
if [ ! -f "$WORK/eval.json" ] || [ "$WORK/train/target.gguf" -nt "$WORK/eval.json" ]; then
    log "eval: test split, greedy"
    # shellcheck disable=SC2086
    "$VLMSPEC" eval --model "$WORK/train/target.gguf" --mmproj "$WORK/train/target-mmproj.gguf" \
        --data "$WORK/world" --threads "$THREADS" --json "$WORK/eval.json.tmp" $EVAL_FLAGS \
        > "$WORK/eval.txt.tmp"
    mv "$WORK/eval.txt.tmp" "$WORK/eval.txt"
    mv "$WORK/eval.json.tmp" "$WORK/eval.json"
else
    log "eval: $WORK/eval.json is up to date"
fi
cat "$WORK/eval.txt"

# 5. results
copy() { cmp -s "$1" "$2" 2> /dev/null || { cp "$1" "$2.tmp" && mv "$2.tmp" "$2" && log "wrote $2"; }; }
copy "$WORK/train/target.gguf" "$OUT/target.gguf"
copy "$WORK/train/target-mmproj.gguf" "$OUT/target-mmproj.gguf"
copy "$WORK/train/train.json" "$OUT/target-train.json"
copy "$WORK/train/loss.svg" "$OUT/target-loss.svg"
copy "$WORK/eval.json" "$OUT/target-eval.json"
copy "$WORK/eval.txt" "$OUT/target-eval.txt"
log "done"
