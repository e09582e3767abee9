#!/bin/sh
# make_drafters.sh: the LLaVA-recipe, pooled and MASSV drafters of the finished target (docs/training.md,
# "Drafters"). Run it after scripts/make_models.sh.
#
#   1. inputs   the target ($TARGET_DIR/target.gguf + target-mmproj.gguf), its tokenizer (the target
#               LM file carries it) and the world ($DATA: train + captions splits)
#   2. llava    vlmspec train drafter --recipe llava --resume, in chunks of at most $CHUNK_SECONDS, until
#               $WORK/draft-llava.gguf exists: phases a-text (LM on the world's text), b-proj (projector
#               on captions, LM frozen), c-llava (instruction tuning, single-image + text conversations)
#   2b. pool    with POOL > 0: vlmspec train drafter --recipe pool --pool $POOL --resume: reuses a-text and
#               b-proj of step 2, then c-pool (IbED's pooled-finetuned drafter: llava's conversations with
#               every picture's patch grid average-pooled POOL x POOL, as ensemble mode p drafts from it)
#   3. distill  vlmspec data distill: the target answers $DISTILL_LIMIT training conversations per suite
#               at temperatures $DISTILL_TEMPS (top-p $DISTILL_TOP_P), chunks, until complete
#               ($WORK/distill.done)
#   4. massv    vlmspec train drafter --recipe massv --distill ... --resume: reuses a-text and b-proj of
#               step 2 (same settings, same directory), then c-massv (SDViT on the target's answers)
#   5. results  $OUT/draft-llava.gguf, draft-massv.gguf, draft-pool.gguf (the LMs as $DRAFT_TYPE: `vlmspec
#               model convert`), draft-{llava,massv,pool}-mmproj.gguf (F16), draft-*-train.json (per phase:
#               steps, rows, seconds, losses) and the loss curves draft-*-loss-*.svg (copied when changed)
#
# Idempotent: every step is skipped when its output exists (so changing a recipe's settings, POOL
# included, takes removing its output first), training always passes --resume, so running
# it again (or from cron with ONE_CHUNK=1) continues where it stopped. Every step is logged with a time
# stamp. It runs from the repository root.
#
#   VLMSPEC          the CLI binary (default build/vlmspec)
#   TARGET_DIR       where the finished target is (default models)
#   TARGET           target LM (default $TARGET_DIR/target.gguf)
#   TARGET_MMPROJ    target mmproj (default $TARGET_DIR/target-mmproj.gguf)
#   TOKENIZER        tokenizer GGUF (default $TARGET: the target's own tokenizer keys)
#   DATA             the world directory (default out/models/world, made by make_models.sh)
#   THREADS          threads (default 2)
#   GEMM             training products (default amx-bf16x3 where `vlmspec version` lists it, else
#                    openblas; docs/training.md)
#   CHUNK_SECONDS    wall-time limit of one training / distill run (default 7000, under 2 hours)
#   ONE_CHUNK        1: stop after one chunk (default 0: run to the end)
#   DRAFTER_FLAGS    extra flags of both recipes: shapes, steps ... (default none: the CLI defaults,
#                    LM 192 x 4 layers, steps a / b / c 2000 / 500 / 800 of 32 / 16 / 16 sequences)
#   LLAVA_FLAGS      extra flags of the llava recipe (default none)
#   MASSV_FLAGS      extra flags of the massv recipe (default --steps-c 500)
#   POOL             pooling window of the pool recipe (default 2; 0: no pooled drafter)
#   POOL_FLAGS       extra flags of the pool recipe (default none)
#   DISTILL_LIMIT    conversations per suite the target answers (default 100)
#   DISTILL_TEMPS    sampling temperatures (default 0,0.7,1.0)
#   DISTILL_TOP_P    top-p (default 0.9)
#   DISTILL_FLAGS    extra `vlmspec data distill` flags (e.g. --max-tokens 192)
#   DRAFT_TYPE       weight type of the shipped drafter LMs (default BF16: their batched draft steps run
#                    on the AMX tiles without conversion, docs/ensemble.md; F16 keeps the trainer's export)
#   WORK             scratch directory (default out/drafters; not committed)
#   OUT              results directory (default models)
set -eu
cd "$(dirname "$0")/.."

VLMSPEC=${VLMSPEC:-build/vlmspec}
TARGET_DIR=${TARGET_DIR:-models}
TARGET=${TARGET:-$TARGET_DIR/target.gguf}
TARGET_MMPROJ=${TARGET_MMPROJ:-$TARGET_DIR/target-mmproj.gguf}
TOKENIZER=${TOKENIZER:-$TARGET}
DATA=${DATA:-out/models/world}
THREADS=${THREADS:-2}
if [ -z "${GEMM:-}" ]; then
    if "$VLMSPEC" version | grep -q "training products:.* amx-bf16x3"; then GEMM=amx-bf16x3; else GEMM=default; fi
fi
CHUNK_SECONDS=${CHUNK_SECONDS:-7000}
ONE_CHUNK=${ONE_CHUNK:-0}
DRAFTER_FLAGS=${DRAFTER_FLAGS:-}
LLAVA_FLAGS=${LLAVA_FLAGS:-}
MASSV_FLAGS=${MASSV_FLAGS:---steps-c 500}
POOL=${POOL:-2}
POOL_FLAGS=${POOL_FLAGS:-}
DISTILL_LIMIT=${DISTILL_LIMIT:-100}
DISTILL_TEMPS=${DISTILL_TEMPS:-0,0.7,1.0}
DISTILL_TOP_P=${DISTILL_TOP_P:-0.9}
DISTILL_FLAGS=${DISTILL_FLAGS:-}
WORK=${WORK:-out/drafters}
OUT=${OUT:-models}
DRAFT_TYPE=${DRAFT_TYPE:-BF16}

log() { printf '[make_drafters %s] %s\n' "$(date '+%H:%M:%S')" "$*"; }
fail() { log "error: $*" >&2; exit 1; }

# 1. inputs
[ -x "$VLMSPEC" ] || fail "$VLMSPEC not found (build first: cmake --build build)"
for f in "$TARGET" "$TARGET_MMPROJ" "$TOKENIZER" "$DATA/world.json" "$DATA/captions.jsonl"; do
    [ -f "$f" ] || fail "$f is missing (run scripts/make_models.sh first, or set TARGET_DIR / DATA)"
done
mkdir -p "$WORK" "$OUT"
log "inputs: target $TARGET + $TARGET_MMPROJ, tokenizer $TOKENIZER, world $DATA"

common() {
    # shellcheck disable=SC2086 # the *_FLAGS are lists of flags
    "$VLMSPEC" train drafter --data "$DATA" --tokenizer "$TOKENIZER" --target "$TARGET" \
        --target-mmproj "$TARGET_MMPROJ" --out "$WORK/train" --threads "$THREADS" --gemm "$GEMM" --resume \
        --time-limit "$CHUNK_SECONDS" $DRAFTER_FLAGS "$@"
}

# recipe NAME FLAGS...: chunks of `train drafter --recipe NAME` until draft-NAME.gguf exists
recipe() {
    r=$1
    shift
    while [ ! -f "$WORK/train/draft-$r.gguf" ]; do
        log "$r: training chunk of at most $CHUNK_SECONDS s"
        common --recipe "$r" "$@"
        if [ "$ONE_CHUNK" = 1 ] && [ ! -f "$WORK/train/draft-$r.gguf" ]; then
            log "$r: chunk done (ONE_CHUNK=1); run again to continue"
            exit 0
        fi
    done
    log "$r: done ($WORK/train/draft-$r.gguf)"
}

# 2. the LLaVA recipe
# shellcheck disable=SC2086
recipe llava $LLAVA_FLAGS

# 2b. the pooled-finetuned drafter, pictures pooled POOL x POOL (phases a-text and b-proj reused from step 2)
# shellcheck disable=SC2086
[ "$POOL" = 0 ] || recipe pool --pool "$POOL" $POOL_FLAGS

# 3. the target's answers for SDViT
while [ ! -f "$WORK/distill.done" ]; do
    log "distill: chunk of at most $CHUNK_SECONDS s ($DISTILL_LIMIT conversations per suite, T = $DISTILL_TEMPS)"
    # shellcheck disable=SC2086
    "$VLMSPEC" data distill --model "$TARGET" --mmproj "$TARGET_MMPROJ" --data "$DATA" \
        --out "$WORK/distill.jsonl" --limit "$DISTILL_LIMIT" --temps "$DISTILL_TEMPS" --top-p "$DISTILL_TOP_P" \
        --threads "$THREADS" --time-limit "$CHUNK_SECONDS" $DISTILL_FLAGS > "$WORK/distill.log.tmp"
    cat "$WORK/distill.log.tmp"
    if ! grep -q "not finished" "$WORK/distill.log.tmp"; then
        mv "$WORK/distill.log.tmp" "$WORK/distill.log"
        touch "$WORK/distill.done"
    elif [ "$ONE_CHUNK" = 1 ]; then
        log "distill: chunk done (ONE_CHUNK=1); run again to continue"
        exit 0
    fi
done
log "distill: done ($WORK/distill.jsonl)"

# 4. MASSV (phases a-text and b-proj are reused from step 2)
# shellcheck disable=SC2086
recipe massv --distill "$WORK/distill.jsonl" $MASSV_FLAGS

# 5. results
copy() { cmp -s "$1" "$2" 2> /dev/null || { cp "$1" "$2.tmp" && mv "$2.tmp" "$2" && log "wrote $2"; }; }
summary() { # recipe, phases...: one JSON object with each phase's done.json and run.json
    r=$1
    shift
    {
        printf '{"recipe":"%s"' "$r"
        for p in "$@"; do
            printf ',"%s":{"result":%s,"settings":%s}' "$p" "$(cat "$WORK/train/$p/done.json")" \
                "$(cat "$WORK/train/$p/run.json")"
        done
        printf '}\n'
    } > "$WORK/draft-$r-train.json"
}
summary llava a-text b-proj c-llava
summary massv a-text b-proj c-massv
RECIPES="llava massv"
if [ "$POOL" != 0 ]; then
    summary pool a-text b-proj c-pool
    RECIPES="$RECIPES pool"
fi
for r in $RECIPES; do
    if [ "$DRAFT_TYPE" = F16 ]; then
        copy "$WORK/train/draft-$r.gguf" "$OUT/draft-$r.gguf"
    else
        if [ ! -f "$WORK/draft-$r-$DRAFT_TYPE.gguf" ] || [ "$WORK/train/draft-$r.gguf" -nt "$WORK/draft-$r-$DRAFT_TYPE.gguf" ]; then
            "$VLMSPEC" model convert -m "$WORK/train/draft-$r.gguf" --type "$DRAFT_TYPE" -o "$WORK/draft-$r-$DRAFT_TYPE.gguf"
        fi
        copy "$WORK/draft-$r-$DRAFT_TYPE.gguf" "$OUT/draft-$r.gguf"
    fi
    copy "$WORK/train/draft-$r-mmproj.gguf" "$OUT/draft-$r-mmproj.gguf"
    copy "$WORK/draft-$r-train.json" "$OUT/draft-$r-train.json"
    copy "$WORK/train/c-$r/loss.svg" "$OUT/draft-$r-loss-c.svg"
done
copy "$WORK/train/a-text/loss.svg" "$OUT/draft-loss-a-text.svg"
copy "$WORK/train/b-proj/loss.svg" "$OUT/draft-loss-b-proj.svg"
log "done"
