#!/bin/sh
# make_models.sh: reproduces vlmspec's target VLM from the seed (docs/target.md, models/README.md).
#
#   1. data       vlmspec data gen        -> $WORK/world        (skipped when world.json exists)
#   2. tokenizer  vlmspec tokenizer train -> $WORK/tok.gguf     (skipped when present)
#   2b. vision    with VISION_STEPS > 0: vlmspec train vision -> $WORK/vision/vision-mmproj.gguf, in
#                 resumable chunks; the target then starts from that tower (--vision-init)
#   2c. text      with TEXT_PER_SUITE > 0: LM text pretraining on a text-and-drill world of its own
#                 ($WORK/text-world) -> $WORK/text, in resumable chunks; the target then starts from its
#                 weights (--init; with 2b the tower is the pretrained one)
#   2d. look      with LOOK_PER_SUITE > 0: the short-answer look suite on a world of its own
#                 ($WORK/look-world) with the tower frozen throughout -> $WORK/look, in resumable chunks,
#                 from 2b's tower and 2c's LM; the target then starts from its weights (--init)
#   3. training   vlmspec train target --resume, in chunks of at most $CHUNK_SECONDS each (every chunk
#                 ends with a checkpoint; the next one continues exactly) until $WORK/train/target.gguf
#                 exists; with FINISH_AT, until step FINISH_AT, then a finishing run in $WORK/train-finish
#                 (train target --init that checkpoint: FINISH_STEPS steps whose rate decays from
#                 FINISH_LR to FINISH_LR_MIN) until $WORK/train-finish/target.gguf exists
#   4. eval       vlmspec eval on the test split -> $WORK/eval.json, $WORK/eval.txt (redone when the
#                 model is newer)
#   5. results    $OUT/target.gguf, $OUT/target-mmproj.gguf (F16), $OUT/target-train.json,
#                 $OUT/target-eval.json, $OUT/target-eval.txt, $OUT/target-loss.svg (and with FINISH_AT
#                 target-loss-finish.svg; copied when changed)
#
# Idempotent: run it again after an interruption (or from cron with ONE_CHUNK=1) and it picks up where
# it stopped. Every setting is an environment variable; the defaults are the shipped model's.
# It runs from the repository root (relative paths below are relative to it).
#
#   VLMSPEC          the CLI binary (default build/vlmspec)
#   SEED             world seed (default 1)
#   TRAIN_PER_SUITE  training conversations per suite (default 4000)
#   TEST_PER_SUITE   test conversations per suite (default 100)
#   SUITES           the world's suites (`data gen --suites`; default: data gen's default, as the shipped
#                    target; `all` adds the drills and the short-answer look suite)
#   VOCAB            BPE vocabulary (default 2048)
#   TOKENIZER_PRE    the BPE's pre-tokeniser: gpt-2 (default, as the shipped target) or starcoder (single
#                    digits, so sums see digits rather than ~100 number tokens; docs/target.md)
#   EPOCHS           passes over the training split (default 3)
#   CAPTIONS         1: also train on the captions split, one caption per training image (default 1)
#   FREEZE_VISION    steps the vision tower keeps its initial weights while the projector and LM learn
#                    to read its features (default 4000; without it the tower collapsed, docs/target.md)
#   FREEZE_LM        steps the LM keeps the weights it starts from (with TEXT_PER_SUITE, the text stage's)
#                    while the projector learns to feed it: LLaVA's stage 1 (`train target --freeze-lm`;
#                    default 0)
#   VISION_WARMUP    steps over which the unfrozen tower's learning rate ramps up (default 500)
#   VISION_LR        the tower's learning rate as a multiple of the schedule's (default 0.1; at the full
#                    rate the tower drifted away from OCR and charts, docs/target.md)
#   VISION_STEPS     steps of vision pretraining (`train vision`, fresh labelled images every step) before
#                    the target's training (default 0: none, as the shipped target)
#   VISION_FLAGS     extra `vlmspec train vision` flags (--batch, --lr ...; the tower's shape flags must
#                    match TRAIN_FLAGS', which --vision-init checks)
#   TEXT_PER_SUITE   conversations per suite (text, drill) of the text stage's world (default 0: no text
#                    stage, as the shipped target)
#   TEXT_TEST        its test conversations per suite (default 200)
#   TEXT_SEED        its world seed (default 3)
#   TEXT_EPOCHS      its passes over that world (default 1)
#   TEXT_SUITES      the text stage world's suites (default text,drill; with look, and --images-as-text in
#                    TEXT_FLAGS, the LM learns the pictures' facts from their scenes in words)
#   TEXT_EVAL_FLAGS  extra flags of the text stage's eval (e.g. --ablate-images words with look in words)
#   TEXT_EVAL_LIMIT  test conversations per suite the stage's model is evaluated on once it is trained
#                    ($WORK/text/eval.txt, the text and drill accuracy the main run starts from, with
#                    EVAL_FLAGS; default 100; 0: no eval)
#   TEXT_FLAGS       extra `vlmspec train target` flags of the text stage (--lr, --warmup ...; not --steps:
#                    the stage gives --epochs; the model's shape flags must be TRAIN_FLAGS', since the main
#                    run starts from its weights; with TEXT_GROW=1 half its LM's). The stage trains no image
#                    weights, but AdamW's decay still shrinks the untouched tower and projector (the tower
#                    is replaced with VISION_STEPS > 0; the projector starts the main run smaller than its
#                    initialisation).
#                    The tokenizer is trained on the main world: SUITES=all lets it see the drills.
#   TEXT_GROW        1: the text stage's LM has half the main LM's width, layers, heads, KV heads and SwiGLU
#                    width (its shape flags in TEXT_FLAGS, e.g. --width 256 --layers 4 --heads 4
#                    --kv-heads 2 --ffn 704 for the default 8 x 512), about five times cheaper per row, and
#                    the next stage starts from it grown (`train target --grow`, docs/target.md; default 0)
#   LOOK_PER_SUITE   training pictures of the look stage's world (default 0: no look stage)
#   LOOK_TEST        its test pictures (default 200)
#   LOOK_SEED        its world seed (default 4)
#   LOOK_EPOCHS      its passes over that world (default 1)
#   LOOK_FLAGS       extra `vlmspec train target` flags of the look stage (--lr, --batch, --prompt-loss ...;
#                    the shape flags must be TRAIN_FLAGS'). Its model is evaluated on the look test split
#                    with the reference history, own and swapped pictures ($WORK/look/eval.txt,
#                    eval-swap.txt; LOOK_EVAL_LIMIT pictures, default 200, 0: no eval)
#   NORM_CAP         keep the projector's image rows within this multiple of the token embeddings' mean
#                    norm (`train target --norm-cap`; default 0: off, as the shipped target)
#   TRAIN_FLAGS      extra `vlmspec train target` flags (sizes, --lr, --batch ...; default none: the
#                    command's defaults, a 28.8M-parameter target); the finishing run's FINISH_* settings
#                    win over the same flags here. On AVX-512 CPUs without AMX (Zen 4 / 5), `--gemm
#                    avx512-bf16` here trains about 1.4x faster (bf16 products, docs/training.md)
#   THREADS          threads (default 2)
#   GEMM_SWITCH      the step at which training switches from OpenBLAS's F32 products to amx-bf16x3
#                    (default 0: amx-bf16x3 from the start, as the shipped target; only on CPUs with
#                    AMX-BF16, elsewhere the whole run uses OpenBLAS unless TRAIN_FLAGS names a --gemm)
#   ATTENTION_SWITCH the step at which the attention switches from the direct F32 kernels to per-head
#                    products on the AMX-BF16 tiles (`--attention gemm`, ~1.9x faster steps; default
#                    4000, as the shipped target; 0: gemm from the start; only with amx-bf16x3)
#   FINISH_AT        stop the schedule's run at this step and finish with a short run of its own (default
#                    11500 of the schedule's 15561, as the shipped target, docs/target.md; 0: off, the
#                    whole schedule)
#   FINISH_STEPS     steps of the finishing run (default 1500)
#   FINISH_LR        its peak learning rate, reached after FINISH_WARMUP steps (default 2.45e-4: the main
#                    schedule's rate at step 11500)
#   FINISH_LR_MIN    its final rate (default 1e-4: the main schedule's last)
#   FINISH_WARMUP    its warm-up steps (default 50: its AdamW moments start at zero)
#   FINISH_SEED      its data order (default 2)
#   CHUNK_SECONDS    wall-time limit of one training run (default 7000, under 2 hours)
#   ONE_CHUNK        1: stop after one training chunk of any stage (default 0: train to the end)
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
TOKENIZER_PRE=${TOKENIZER_PRE:-gpt-2}
EPOCHS=${EPOCHS:-3}
CAPTIONS=${CAPTIONS:-1}
FREEZE_VISION=${FREEZE_VISION:-4000}
FREEZE_LM=${FREEZE_LM:-0}
VISION_WARMUP=${VISION_WARMUP:-500}
VISION_LR=${VISION_LR:-0.1}
VISION_STEPS=${VISION_STEPS:-0}
VISION_FLAGS=${VISION_FLAGS:-}
SUITES=${SUITES:-}
TEXT_PER_SUITE=${TEXT_PER_SUITE:-0}
TEXT_TEST=${TEXT_TEST:-200}
TEXT_SEED=${TEXT_SEED:-3}
TEXT_EPOCHS=${TEXT_EPOCHS:-1}
TEXT_FLAGS=${TEXT_FLAGS:-}
TEXT_SUITES=${TEXT_SUITES:-text,drill}
TEXT_EVAL_FLAGS=${TEXT_EVAL_FLAGS:-}
TEXT_EVAL_LIMIT=${TEXT_EVAL_LIMIT:-100}
TEXT_GROW=${TEXT_GROW:-0}
LOOK_PER_SUITE=${LOOK_PER_SUITE:-0}
LOOK_TEST=${LOOK_TEST:-200}
LOOK_SEED=${LOOK_SEED:-4}
LOOK_EPOCHS=${LOOK_EPOCHS:-1}
LOOK_FLAGS=${LOOK_FLAGS:-}
LOOK_EVAL_LIMIT=${LOOK_EVAL_LIMIT:-200}
NORM_CAP=${NORM_CAP:-0}
TRAIN_FLAGS=${TRAIN_FLAGS:-}
THREADS=${THREADS:-2}
GEMM_SWITCH=${GEMM_SWITCH:-0}
ATTENTION_SWITCH=${ATTENTION_SWITCH:-4000}
FINISH_AT=${FINISH_AT:-11500}
FINISH_STEPS=${FINISH_STEPS:-1500}
FINISH_LR=${FINISH_LR:-2.45e-4}
FINISH_LR_MIN=${FINISH_LR_MIN:-1e-4}
FINISH_WARMUP=${FINISH_WARMUP:-50}
FINISH_SEED=${FINISH_SEED:-2}
CHUNK_SECONDS=${CHUNK_SECONDS:-7000}
ONE_CHUNK=${ONE_CHUNK:-0}
EVAL_FLAGS=${EVAL_FLAGS:-}
WORK=${WORK:-out/models}
OUT=${OUT:-models}

log() { printf '[make_models %s] %s\n' "$(date '+%H:%M:%S')" "$*"; }
# Called before every training chunk of every stage: with ONE_CHUNK=1 the second one stops the script.
RAN=0
chunk_gate() {
    if [ "$ONE_CHUNK" = 1 ] && [ "$RAN" = 1 ]; then
        log "$1: one chunk ran (ONE_CHUNK=1); run again to continue"
        exit 0
    fi
    RAN=1
}

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
    SUITE_FLAGS=""
    [ -n "$SUITES" ] && SUITE_FLAGS="--suites $SUITES"
    # shellcheck disable=SC2086 # SUITE_FLAGS is a list of flags
    "$VLMSPEC" data gen --out "$WORK/world" --seed "$SEED" --train "$TRAIN_PER_SUITE" \
        --test "$TEST_PER_SUITE" --quiet $SUITE_FLAGS
fi

# 2. tokenizer
if [ -f "$WORK/tok.gguf" ]; then
    log "tokenizer: $WORK/tok.gguf exists"
else
    log "tokenizer: training a $VOCAB-token BPE (pre-tokeniser $TOKENIZER_PRE)"
    "$VLMSPEC" tokenizer train --data "$WORK/world" --vocab "$VOCAB" --pre "$TOKENIZER_PRE" -o "$WORK/tok.gguf.tmp"
    mv "$WORK/tok.gguf.tmp" "$WORK/tok.gguf"
fi

HAS_AMX=0
"$VLMSPEC" version | grep -q "training products:.* amx-bf16x3" && HAS_AMX=1

# 2b. vision pretraining, in resumable chunks (its mmproj is written last: its presence means done)
VISION_INIT=""
if [ "$VISION_STEPS" -gt 0 ]; then
    while [ ! -f "$WORK/vision/vision-mmproj.gguf" ]; do
        chunk_gate vision
        log "vision: chunk of at most $CHUNK_SECONDS s ($VISION_STEPS steps in all)"
        # shellcheck disable=SC2086 # VISION_FLAGS is a list of flags
        "$VLMSPEC" train vision --out "$WORK/vision" --steps "$VISION_STEPS" --threads "$THREADS" --resume \
            --time-limit "$CHUNK_SECONDS" $VISION_FLAGS
    done
    VISION_INIT="--vision-init $WORK/vision/vision-mmproj.gguf"
fi

# 2c. LM text pretraining, in resumable chunks (its target.gguf is written last: its presence means done;
#     its final checkpoint holds the same weights and is what the main run starts from)
TEXT_INIT=""
if [ "$TEXT_PER_SUITE" -gt 0 ]; then
    if [ -f "$WORK/text-world/world.json" ]; then
        log "text: $WORK/text-world exists"
    else
        log "text: generating seed $TEXT_SEED, $TEXT_PER_SUITE train + $TEXT_TEST test per suite ($TEXT_SUITES)"
        "$VLMSPEC" data gen --out "$WORK/text-world" --seed "$TEXT_SEED" --train "$TEXT_PER_SUITE" \
            --test "$TEXT_TEST" --suites "$TEXT_SUITES" --quiet
    fi
    TEXT_GEMM="" # the products of the main run after its switches (a text-only LM has no image rows)
    [ "$HAS_AMX" = 1 ] && TEXT_GEMM="--gemm amx-bf16x3 --attention gemm"
    while [ ! -f "$WORK/text/target.gguf" ]; do
        chunk_gate text
        log "text: chunk of at most $CHUNK_SECONDS s ($TEXT_EPOCHS epochs) $TEXT_GEMM"
        # shellcheck disable=SC2086 # TEXT_GEMM and TEXT_FLAGS are lists of flags
        "$VLMSPEC" train target --data "$WORK/text-world" --tokenizer "$WORK/tok.gguf" --out "$WORK/text" \
            --epochs "$TEXT_EPOCHS" --threads "$THREADS" --resume --time-limit "$CHUNK_SECONDS" $TEXT_GEMM \
            $TEXT_FLAGS
    done
    if [ "$TEXT_EVAL_LIMIT" -gt 0 ]; then
        if [ ! -f "$WORK/text/eval.txt" ] || [ "$WORK/text/target.gguf" -nt "$WORK/text/eval.txt" ]; then
            log "text: eval on $TEXT_EVAL_LIMIT test conversations per suite, greedy"
            # shellcheck disable=SC2086 # EVAL_FLAGS and TEXT_EVAL_FLAGS are lists of flags
            "$VLMSPEC" eval --model "$WORK/text/target.gguf" --mmproj "$WORK/text/target-mmproj.gguf" \
                --data "$WORK/text-world" --limit "$TEXT_EVAL_LIMIT" --threads "$THREADS" --quiet \
                --json "$WORK/text/eval.json" $EVAL_FLAGS $TEXT_EVAL_FLAGS > "$WORK/text/eval.txt.tmp"
            mv "$WORK/text/eval.txt.tmp" "$WORK/text/eval.txt"
        fi
        cat "$WORK/text/eval.txt"
    fi
    TEXT_INIT="--init $WORK/text/ckpt/ckpt.gguf"
    if [ "$TEXT_GROW" = 1 ]; then TEXT_INIT="--grow $WORK/text/ckpt/ckpt.gguf"; fi # half the LM, grown
fi

# 2d. the look stage, in resumable chunks: short answers about one picture and its transcript, the tower
#     kept as 2b made it (a fresh LM lets it collapse, docs/target.md); the main run starts from it
if [ "$LOOK_PER_SUITE" -gt 0 ]; then
    if [ -f "$WORK/look-world/world.json" ]; then
        log "look: $WORK/look-world exists"
    else
        log "look: generating seed $LOOK_SEED, $LOOK_PER_SUITE train + $LOOK_TEST test pictures"
        "$VLMSPEC" data gen --out "$WORK/look-world" --seed "$LOOK_SEED" --train "$LOOK_PER_SUITE" \
            --test "$LOOK_TEST" --suites look --quiet
    fi
    LOOK_NORM=""
    [ "$NORM_CAP" != 0 ] && LOOK_NORM="--norm-cap $NORM_CAP"
    while [ ! -f "$WORK/look/target.gguf" ]; do
        chunk_gate look
        log "look: chunk of at most $CHUNK_SECONDS s ($LOOK_EPOCHS epochs, tower frozen)"
        # shellcheck disable=SC2086 # the *_INIT, LOOK_NORM and LOOK_FLAGS are lists of flags
        "$VLMSPEC" train target --data "$WORK/look-world" --tokenizer "$WORK/tok.gguf" --out "$WORK/look" \
            --epochs "$LOOK_EPOCHS" --threads "$THREADS" --resume --time-limit "$CHUNK_SECONDS" \
            --freeze-vision 1000000000000 $VISION_INIT $TEXT_INIT $LOOK_NORM $LOOK_FLAGS
    done
    if [ "$LOOK_EVAL_LIMIT" -gt 0 ]; then
        if [ ! -f "$WORK/look/eval-swap.txt" ] || [ "$WORK/look/target.gguf" -nt "$WORK/look/eval-swap.txt" ]; then
            log "look: eval on $LOOK_EVAL_LIMIT test pictures, reference history, own and swapped pictures"
            for A in own swap; do
                ABL="" SUF=""
                [ "$A" = swap ] && ABL="--ablate-images swap" SUF="-swap"
                # shellcheck disable=SC2086 # ABL and EVAL_FLAGS are lists of flags
                "$VLMSPEC" eval --model "$WORK/look/target.gguf" --mmproj "$WORK/look/target-mmproj.gguf" \
                    --data "$WORK/look-world" --limit "$LOOK_EVAL_LIMIT" --history reference --by-question \
                    --threads "$THREADS" --quiet --json "$WORK/look/eval$SUF.json" $ABL $EVAL_FLAGS \
                    > "$WORK/look/eval$SUF.txt.tmp"
                mv "$WORK/look/eval$SUF.txt.tmp" "$WORK/look/eval$SUF.txt"
            done
        fi
        cat "$WORK/look/eval.txt"
        sed -n 2p "$WORK/look/eval-swap.txt"
    fi
    TEXT_INIT="--init $WORK/look/ckpt/ckpt.gguf" # the main run starts from the look stage's weights
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
[ "$FREEZE_LM" -gt 0 ] && CAPTION_FLAGS="$CAPTION_FLAGS --freeze-lm $FREEZE_LM"
NORM_FLAGS=""
[ "$NORM_CAP" != 0 ] && NORM_FLAGS="--norm-cap $NORM_CAP"
main_done() { # the schedule's run is complete, or has reached FINISH_AT
    [ -f "$WORK/train/target.gguf" ] || { [ "$FINISH_AT" -gt 0 ] && [ "$(step_now)" -ge "$FINISH_AT" ]; }
}
while ! main_done; do
    GEMM_FLAGS=""
    STEP=$(step_now)
    STOP_AT=0 # the next step at which this chunk must stop (0: none)
    if [ "$HAS_AMX" = 1 ]; then
        if [ "$STEP" -lt "$GEMM_SWITCH" ]; then
            GEMM_FLAGS="--gemm openblas --attention direct" STOP_AT=$GEMM_SWITCH
        elif [ "$STEP" -lt "$ATTENTION_SWITCH" ]; then
            GEMM_FLAGS="--gemm amx-bf16x3 --attention direct" STOP_AT=$ATTENTION_SWITCH
        else
            GEMM_FLAGS="--gemm amx-bf16x3 --attention gemm"
        fi
    fi
    if [ "$FINISH_AT" -gt 0 ] && { [ "$STOP_AT" = 0 ] || [ "$FINISH_AT" -lt "$STOP_AT" ]; }; then
        STOP_AT=$FINISH_AT
    fi
    [ "$STOP_AT" -gt 0 ] && GEMM_FLAGS="$GEMM_FLAGS --chunk-steps $((STOP_AT - STEP))"
    chunk_gate training
    log "training: chunk of at most $CHUNK_SECONDS s $GEMM_FLAGS"
    # shellcheck disable=SC2086 # the *_FLAGS are lists of flags
    "$VLMSPEC" train target --data "$WORK/world" --tokenizer "$WORK/tok.gguf" --out "$WORK/train" \
        --epochs "$EPOCHS" --threads "$THREADS" --resume --time-limit "$CHUNK_SECONDS" $CAPTION_FLAGS \
        $VISION_INIT $TEXT_INIT $NORM_FLAGS $GEMM_FLAGS $TRAIN_FLAGS
done
TRAINED=$WORK/train
if [ "$FINISH_AT" -gt 0 ]; then
    # the finishing run: weights of the main run's checkpoint at FINISH_AT (pinned as init.gguf), its own
    # short schedule, zeroed AdamW moments, the tower at the same relative rate
    TRAINED=$WORK/train-finish
    mkdir -p "$TRAINED"
    if [ ! -f "$TRAINED/init.gguf" ]; then
        cp "$WORK/train/ckpt/ckpt.gguf" "$TRAINED/init.gguf.tmp"
        mv "$TRAINED/init.gguf.tmp" "$TRAINED/init.gguf"
    fi
    FINISH_FLAGS="--steps $FINISH_STEPS --lr $FINISH_LR --lr-min $FINISH_LR_MIN --warmup $FINISH_WARMUP"
    FINISH_FLAGS="$FINISH_FLAGS --seed $FINISH_SEED --init $TRAINED/init.gguf"
    [ "$CAPTIONS" = 1 ] && FINISH_FLAGS="$FINISH_FLAGS --captions"
    [ "$VISION_LR" != 1 ] && FINISH_FLAGS="$FINISH_FLAGS --vision-lr $VISION_LR"
    [ "$HAS_AMX" = 1 ] && FINISH_FLAGS="$FINISH_FLAGS --gemm amx-bf16x3 --attention gemm"
    while [ ! -f "$TRAINED/target.gguf" ]; do
        chunk_gate finish
        log "finish: run of $FINISH_STEPS steps from step $FINISH_AT, a chunk of at most $CHUNK_SECONDS s"
        # shellcheck disable=SC2086
        "$VLMSPEC" train target --data "$WORK/world" --tokenizer "$WORK/tok.gguf" --out "$TRAINED" \
            --threads "$THREADS" --resume --time-limit "$CHUNK_SECONDS" $TRAIN_FLAGS $NORM_FLAGS $FINISH_FLAGS
    done
fi
log "training: done ($TRAINED/target.gguf)"

# 4. eval (again when the model is newer than the results)
if [ ! -f "$WORK/eval.json" ] || [ "$TRAINED/target.gguf" -nt "$WORK/eval.json" ]; then
    log "eval: test split, greedy"
    # shellcheck disable=SC2086
    "$VLMSPEC" eval --model "$TRAINED/target.gguf" --mmproj "$TRAINED/target-mmproj.gguf" \
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
copy "$TRAINED/target.gguf" "$OUT/target.gguf"
copy "$TRAINED/target-mmproj.gguf" "$OUT/target-mmproj.gguf"
copy "$TRAINED/train.json" "$OUT/target-train.json"
copy "$WORK/train/loss.svg" "$OUT/target-loss.svg"
[ "$FINISH_AT" -gt 0 ] && copy "$TRAINED/loss.svg" "$OUT/target-loss-finish.svg"
copy "$WORK/eval.json" "$OUT/target-eval.json"
copy "$WORK/eval.txt" "$OUT/target-eval.txt"
log "done"
