#!/bin/sh
# check_vision.sh: is a training run's vision tower still looking at the pictures? (docs/target.md)
#
#   scripts/check_vision.sh [CKPT] [WORLD]
#
# Exports CKPT (default out/models/train/ckpt/ckpt.gguf, copied first: the run may overwrite it) and
#   1. encodes five test pictures (two OCR, two shapes, one chart) with `vlmspec embed-image` and prints
#      the projected rows' norm, the variation across the 64 patches of a picture (as a share of the
#      rows' magnitude) and the cosines between pictures;
#   2. answers "Describe the image briefly." greedily for four of them.
# Healthy: patch variation of several %, cosines clearly below 1, different answers per picture.
# Collapsed (the first three target runs): variation below 1%, cosine 1.0000 between the OCR pictures,
# the same answer for every picture.
# Needs Debian's python3-numpy (/usr/bin/python3) for step 1.
set -eu
cd "$(dirname "$0")/.."
VLMSPEC=${VLMSPEC:-build/vlmspec}
CKPT=${1:-out/models/train/ckpt/ckpt.gguf}
WORLD=${2:-out/models/world}
TOK=${TOK:-out/models/tok.gguf}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

cp "$CKPT" "$TMP/ck.gguf"
"$VLMSPEC" train export --ckpt "$TMP/ck.gguf" --tokenizer "$TOK" --lm "$TMP/t.gguf" --mmproj "$TMP/t-mm.gguf" | tail -1
i=0
for img in ocr-00000-0 ocr-00001-0 describe-00000-0 describe-00001-0 chart-00000-0; do
    "$VLMSPEC" embed-image --mmproj "$TMP/t-mm.gguf" --image "$WORLD/img/test/$img.png" -o "$TMP/e$i" > /dev/null 2>&1
    i=$((i + 1))
done
/usr/bin/python3 - "$TMP" << 'EOF'
import sys
import numpy as np
d = sys.argv[1]
E = [np.fromfile(f"{d}/e{i}.f32", dtype=np.float32).reshape(64, -1) for i in range(5)]
cos = lambda a, b: float(a.ravel() @ b.ravel() / np.linalg.norm(a) / np.linalg.norm(b))
print("projected row norm %.1f, patch variation %.1f%%" %
      (np.linalg.norm(E[0], axis=1).mean(), 100 * E[0].std(0).mean() / np.abs(E[0]).mean()))
print("cosines: ocr-ocr %.4f  ocr-shapes %.4f  shapes-shapes %.4f  shapes-chart %.4f" %
      (cos(E[0], E[1]), cos(E[0], E[2]), cos(E[2], E[3]), cos(E[2], E[4])))
EOF
for img in describe-00000-0 describe-00001-0 ocr-00000-0 chart-00000-0; do
    printf '%s: ' "$img"
    "$VLMSPEC" generate -m "$TMP/t.gguf" --mmproj "$TMP/t-mm.gguf" --image "$WORLD/img/test/$img.png" \
        -p "<image> Describe the image briefly." --temp 0 -n 32 -t 1 2> /dev/null |
        tr '\n' ' ' | sed 's/.*ASSISTANT://'
    echo
done
