#!/usr/bin/env bash
# compare_llamacpp.sh: vlmspec against llama.cpp on the same machine and the same GGUF files, runs
# alternating, medians over rounds. Builds the peer from ../shared/peers when it is not built yet.
#
#   scripts/compare_llamacpp.sh [--rounds N] [--reps N] [--ks LIST] [--threads N] FILE...
#       per file: pp64 and tg32 (tokens/s), and the time of one forward over k rows after a 64-row
#       prompt (llama-bench -d 64 -p k; vlmspec bench --verify-prompt 64 --ks), with T(k)/T(1) and
#       the ratio vlmspec / llama.cpp (> 1: vlmspec faster).
#   scripts/compare_llamacpp.sh load [--rounds N] [--busy LIST] FILE
#       decoding (tg32, both engines) on a quiet machine and beside B busy processes (`yes > /dev/null`)
#       for each B of LIST (default 1,3), alternating; prints each speed as a share of the quiet one.
#   scripts/compare_llamacpp.sh spec --target T --draft D [--prompts FILE] [-n N] [--draft-max G]
#                                    [--p-min P] [--rounds N] [--threads N]
#       speculative decoding, greedy: llama-speculative against `vlmspec generate -md` on each prompt
#       (one per line of FILE; default: eight built-in text prompts), the median decode time per token
#       of each side and whether the two produced the same text. --p-min P: vlmspec's adaptive draft
#       length (default 0: a fixed length, as llama-speculative's, whose example does not read p-min).
#
# Environment: LLAMA_BIN (a folder with llama-bench and llama-speculative; default: build the peer into
# /tmp/llama.cpp-peer), VLMSPEC (the vlmspec binary; default build/vlmspec). Quote the printed ratios
# with the machine's ISA and bandwidth (vlmspec kbench prints both); figures from different machines or
# sittings are not comparable. KEEP_TMP=1 keeps the runs' raw output (its folder is printed).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
VLMSPEC=${VLMSPEC:-$root/build/vlmspec}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

die() { echo "compare_llamacpp: $*" >&2; exit 1; }
[ -x "$VLMSPEC" ] || die "no vlmspec binary at $VLMSPEC (build first, or set VLMSPEC)"

peer_bin() {
  if [ -n "${LLAMA_BIN:-}" ]; then echo "$LLAMA_BIN"; return; fi
  local dest=/tmp/llama.cpp-peer
  if [ ! -x "$dest/build/bin/llama-bench" ] || [ ! -x "$dest/build/bin/llama-speculative" ]; then
    local script="$root/../shared/peers/build-llama-cpp.sh"
    [ -f "$script" ] || die "llama.cpp is not built and $script is missing (set LLAMA_BIN)"
    echo "compare_llamacpp: building llama.cpp into $dest (10-20 minutes on 2 cores) ..." >&2
    bash "$script" "$dest" >&2 || die "building llama.cpp failed"
  fi
  echo "$dest/build/bin"
}

mode=bench
case "${1:-}" in spec|load) mode=$1; shift ;; esac
busy=1,3
rounds=3 reps=5 ks=1,2,4,6,8,16,32 threads=2
target="" draft="" prompts="" n_predict=64 gmax=5 pmin=0
files=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --ks) ks=$2; shift 2 ;;
    -t|--threads) threads=$2; shift 2 ;;
    --target) target=$2; shift 2 ;;
    --draft) draft=$2; shift 2 ;;
    --prompts) prompts=$2; shift 2 ;;
    -n) n_predict=$2; shift 2 ;;
    --draft-max) gmax=$2; shift 2 ;;
    --busy) busy=$2; shift 2 ;;
    --p-min) pmin=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (--help lists them)" ;;
    *) files+=("$1"); shift ;;
  esac
done
for v in "$rounds" "$reps" "$threads" "$n_predict" "$gmax"; do
  [[ "$v" =~ ^[0-9]+$ ]] && [ "$v" -ge 1 ] || die "counts must be positive integers (got '$v')"
done
[[ "$ks" =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--ks wants a comma list of row counts (got '$ks')"
bin=$(peer_bin)
tmp=$(mktemp -d)
if [ -n "${KEEP_TMP:-}" ]; then echo "compare_llamacpp: raw output kept in $tmp" >&2; else trap 'rm -rf "$tmp"' EXIT; fi

if [ "$mode" = bench ]; then
  [ ${#files[@]} -gt 0 ] || die "no GGUF files given (--help)"
  for f in "${files[@]}"; do [ -f "$f" ] || die "no such file: $f"; done
  case ",$ks," in *,1,*) ;; *) ks="1,$ks" ;; esac
  for f in "${files[@]}"; do
    for r in $(seq 1 "$rounds"); do
      echo "compare_llamacpp: $(basename "$f") round $r/$rounds" >&2
      "$bin/llama-bench" -m "$f" -t "$threads" -p 64 -n 32 -r "$reps" -o json >"$tmp/l-pp-$r.json" 2>"$tmp/l.err" ||
        { cat "$tmp/l.err" >&2; die "llama-bench failed on $f"; }
      "$bin/llama-bench" -m "$f" -t "$threads" -d 64 -p "$ks" -n 0 -r "$reps" -o json >"$tmp/l-k-$r.json" 2>"$tmp/l.err" ||
        { cat "$tmp/l.err" >&2; die "llama-bench -d 64 failed on $f"; }
      "$VLMSPEC" bench -m "$f" -t "$threads" --pp 64 --tg 32 --verify-prompt 64 --ks "$ks" -r "$reps" \
        --json "$tmp/v-$r.json" >/dev/null 2>"$tmp/v.err" || { cat "$tmp/v.err" >&2; die "vlmspec bench failed on $f"; }
    done
    "$PY" - "$tmp" "$rounds" "$ks" "$f" <<'EOF'
import json, statistics, sys, os
tmp, rounds, ks, f = sys.argv[1], int(sys.argv[2]), [int(k) for k in sys.argv[3].split(",")], sys.argv[4]
L = {}  # figure -> list over rounds; seconds per forward for k rows, tokens/s for pp64 / tg32
V = {}
def add(d, k, v): d.setdefault(k, []).append(v)
for r in range(1, rounds + 1):
    for name in ("l-pp", "l-k"):
        for t in json.load(open(os.path.join(tmp, f"{name}-{r}.json"))):
            sec = statistics.median(t["samples_ns"]) / 1e9
            if t["n_gen"] > 0: add(L, "tg32", t["n_gen"] / sec)
            elif t["n_depth"] == 0: add(L, "pp64", t["n_prompt"] / sec)
            else: add(L, ("k", t["n_prompt"]), sec * 1e3)
    v = json.load(open(os.path.join(tmp, f"v-{r}.json")))
    for t in v["tests"]: add(V, t["test"], t["tokens_per_s"])
    for t in v["verify"]: add(V, ("k", t["k"]), t["median_ms"])
med = lambda d, k: statistics.median(d[k]) if k in d else float("nan")
print(f"\n{os.path.basename(f)}: {rounds} alternating rounds, medians (llama.cpp | vlmspec | ratio, > 1: vlmspec faster)")
print(f"| figure | llama.cpp | vlmspec | ratio |\n| --- | ---: | ---: | ---: |")
for k in ("pp64", "tg32"):
    a, b = med(L, k), med(V, k)
    print(f"| {k} t/s | {a:.1f} | {b:.1f} | {b / a:.2f} |")
l1, v1 = med(L, ("k", 1)), med(V, ("k", 1))
for k in ks:
    a, b = med(L, ("k", k)), med(V, ("k", k))
    print(f"| T({k}) ms after 64 rows | {a:.2f} | {b:.2f} | {a / b:.2f} |")
print("| T(k)/T(1) | " + ", ".join(f"{k}: {med(L, ('k', k)) / l1:.2f}" for k in ks[1:]) + " | "
      + ", ".join(f"{k}: {med(V, ('k', k)) / v1:.2f}" for k in ks[1:]) + " | |")
EOF
  done
  exit 0
fi

# ---- load mode ----
if [ "$mode" = load ]; then
  [ ${#files[@]} -eq 1 ] && [ -f "${files[0]}" ] || die "load mode wants one GGUF file"
  [[ "$busy" =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--busy wants a comma list of process counts"
  f=${files[0]}
  pids=()
  stop_busy() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; pids=(); }
  if [ -n "${KEEP_TMP:-}" ]; then trap 'stop_busy' EXIT; else trap 'stop_busy; rm -rf "$tmp"' EXIT; fi
  : >"$tmp/load.txt"
  for r in $(seq 1 "$rounds"); do
    for b in 0 ${busy//,/ }; do
      for ((i = 0; i < b; i++)); do yes >/dev/null & pids+=($!); done
      sleep 0.5
      echo "compare_llamacpp: load round $r/$rounds, $b busy" >&2
      "$bin/llama-bench" -m "$f" -t "$threads" -p 0 -n 32 -r "$reps" -o json </dev/null >"$tmp/l.json" 2>/dev/null ||
        die "llama-bench failed on $f"
      "$VLMSPEC" bench -m "$f" -t "$threads" --pp "" --tg 32 --ks "" -r "$reps" --json "$tmp/v.json" \
        >/dev/null 2>"$tmp/v.err" || { cat "$tmp/v.err" >&2; die "vlmspec bench failed"; }
      stop_busy
      "$PY" - "$tmp" "$b" >>"$tmp/load.txt" <<'EOF'
import json, statistics, sys, os
tmp, b = sys.argv[1], sys.argv[2]
l = [t for t in json.load(open(os.path.join(tmp, "l.json"))) if t["n_gen"] > 0][0]
v = [t for t in json.load(open(os.path.join(tmp, "v.json")))["tests"] if t["test"] == "tg32"][0]
print(b, l["n_gen"] / (statistics.median(l["samples_ns"]) / 1e9), v["tokens_per_s"])
EOF
    done
  done
  "$PY" - "$tmp/load.txt" "$rounds" "$(basename "$f")" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
by = {}
for b, l, v in rows: by.setdefault(int(b), ([], []))[0].append(float(l)); by[int(b)][1].append(float(v))
ql, qv = statistics.median(by[0][0]), statistics.median(by[0][1])
print(f"\n{sys.argv[3]}: tg32 t/s beside busy processes, {sys.argv[2]} alternating rounds, medians (share of quiet)")
print("| busy processes | llama.cpp | vlmspec | vlmspec / llama.cpp |\n| --- | ---: | ---: | ---: |")
for b in sorted(by):
    l, v = statistics.median(by[b][0]), statistics.median(by[b][1])
    print(f"| {b} | {l:.1f} ({100 * l / ql:.0f}%) | {v:.1f} ({100 * v / qv:.0f}%) | {v / l:.2f} |")
EOF
  exit 0
fi

# ---- spec mode ----
[ -f "$target" ] && [ -f "$draft" ] || die "spec mode needs --target FILE and --draft FILE"
if [ -n "$prompts" ]; then
  [ -f "$prompts" ] || die "no such prompt file: $prompts"
  cp "$prompts" "$tmp/prompts.txt"
else
  cat >"$tmp/prompts.txt" <<'EOF'
The capital of France is
Once upon a time, in a small village by the sea,
The three primary colours are
In the morning the market opens and the first traders arrive with
A recipe for bread starts with flour, water and
The history of the bicycle begins in
Write a short story about a red star and a blue circle.
The most important rule of the game is
EOF
fi
n_prompts=$(grep -c '[^[:space:]]' "$tmp/prompts.txt" || true)
[ "$n_prompts" -ge 1 ] || die "the prompt file has no prompts"
for r in $(seq 1 "$rounds"); do
  i=0
  while IFS= read -r p; do
    [[ "$p" =~ [^[:space:]] ]] || continue
    i=$((i + 1))
    echo "compare_llamacpp: spec round $r/$rounds prompt $i/$n_prompts" >&2
    "$bin/llama-speculative" -m "$target" -md "$draft" -p "$p" -n "$n_predict" --spec-draft-n-max "$gmax" \
      --spec-draft-n-min 0 --temp 0 -t "$threads" -td "$threads" --ignore-eos </dev/null >"$tmp/l-$r-$i.out" 2>"$tmp/l-$r-$i.err" ||
      { tail -5 "$tmp/l-$r-$i.err" >&2; die "llama-speculative failed"; }
    "$VLMSPEC" generate -m "$target" -md "$draft" --raw -p "$p" -n "$n_predict" --draft-max "$gmax" \
      --draft-p-min "$pmin" --temp 0 \
      -t "$threads" --ignore-eos --json "$tmp/v-$r-$i.json" </dev/null >/dev/null 2>"$tmp/v.err" ||
      { cat "$tmp/v.err" >&2; die "vlmspec generate failed"; }
  done <"$tmp/prompts.txt"
done
"$PY" - "$tmp" "$rounds" "$n_prompts" "$n_predict" "$pmin" <<'EOF'
import json, re, statistics, sys, os
tmp, rounds, n_prompts, n_predict = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
prompts = [l.rstrip("\n") for l in open(os.path.join(tmp, "prompts.txt")) if l.strip()]
lt, vt, match, tau_v = [], [], [], []
for r in range(1, rounds + 1):
    for i in range(1, n_prompts + 1):
        err = open(os.path.join(tmp, f"l-{r}-{i}.err"), errors="replace").read()
        out = open(os.path.join(tmp, f"l-{r}-{i}.out"), errors="replace").read()
        m = re.search(r"decoded\s+(\d+)\s+tokens in\s+([0-9.]+)\s+seconds", err + out)
        if not m:
            print(f"compare_llamacpp: round {r} prompt {i}: no 'decoded N tokens in T seconds' line from "
                  f"llama-speculative; run left out", file=sys.stderr)
            continue
        lt.append(float(m.group(2)) / int(m.group(1)))
        v = json.load(open(os.path.join(tmp, f"v-{r}-{i}.json")))
        vt.append(v["stats"]["t_decode"] / max(1, v["stats"]["tokens"]))
        tau_v.append(v["stats"]["tau"])
        # the characters of vlmspec's text that llama.cpp's output repeats after the prompt (the two
        # engines round differently, so greedy paths may part at a near-tie)
        prompt = prompts[i - 1]
        k = out.find(prompt)
        rest = out[k + len(prompt):] if k >= 0 else out
        n = 0
        while n < min(len(rest), len(v["text"])) and rest[n] == v["text"][n]: n += 1
        match.append(n / max(1, len(v["text"])))
print(f"\nspeculative decoding, greedy, {n_prompts} prompts x {rounds} alternating rounds, {n_predict} tokens each, "
      f"vlmspec draft p-min {sys.argv[5]} (llama-speculative: a fixed length)")
print("| figure | llama-speculative | vlmspec generate -md | ratio |\n| --- | ---: | ---: | ---: |")
a, b = statistics.median(lt) * 1e3, statistics.median(vt) * 1e3
print(f"| median decode ms/token | {a:.3f} | {b:.3f} | {a / b:.2f} |")
print(f"| share of vlmspec's text that llama.cpp's output repeats (median; min) | | {statistics.median(match):.2f}; {min(match):.2f} | |")
print(f"| runs | {len(lt)} | {len(vt)} | |")
print(f"| vlmspec median tau | | {statistics.median(tau_v):.2f} | |")
EOF
