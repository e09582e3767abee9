#!/usr/bin/env bash
# The main job: a multimodal generation with speculative decoding, checked against target-only
# decoding of the same request (--compare), on the models in models/.
#
# It uses the shipped model family (models/README.md: the target and the LLaVA-recipe drafter). Without
# it (a checkout without models/*.gguf) it runs the same pipeline on random-weight models made on the
# spot: their text is noise, but everything else is real - image decode and ViT, projectors over shared
# features, multimodal drafting, batched verification - and the output still equals the target's own.
#
# Usage: bash scripts/demo.sh [extra vlmspec generate flags, e.g. --temp 0.7 or --draft-mode m,t]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${VLMSPEC_BIN:-build/vlmspec}
WORK=${VLMSPEC_DEMO_DIR:-build/demo}
[ -x "$BIN" ] || { echo "demo: $BIN not found; build first (see README.md)" >&2; exit 1; }
mkdir -p "$WORK"

models=models
if [ ! -f "$models/target.gguf" ] || [ ! -f "$models/draft-llava.gguf" ]; then
  echo "demo: models/ holds no trained models; using random-weight models (text will be noise)" >&2
  models=$WORK/random-models
  [ -f "$models/target.gguf" ] || "$BIN" bench spec --make-random-models "$models" >&2
fi

# One question about one image from the generated world (deterministic for the seed).
[ -f "$WORK/world/world.json" ] || "$BIN" data gen --out "$WORK/world" --seed 7 --train 0 --test 1 --suites vqa --quiet
sample=$(head -n 1 "$WORK/world/test.jsonl")
image=$WORK/world/$(printf '%s' "$sample" | sed -n 's/.*"images":\["\([^"]*\)".*/\1/p')
user=$(printf '%s' "$sample" | sed -n 's/.*"turns":\[{[^}]*"user":"\([^"]*\)".*/\1/p')
prompt=$user # generate formats it as a user turn (chat template vicuna-short: "USER: ... ASSISTANT:")
echo "demo: image $image" >&2
echo "demo: prompt $prompt" >&2

exec "$BIN" generate -m "$models/target.gguf" --mmproj "$models/target-mmproj.gguf" \
  -md "$models/draft-llava.gguf" --mmproj-draft "$models/draft-llava-mmproj.gguf" \
  --draft 5 --draft-mode m --image "$image" -p "$prompt" -n 64 --temp 0 --compare "$@"
