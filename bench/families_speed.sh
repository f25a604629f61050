#!/usr/bin/env bash
# In-RAM decode speed of each model family per byte of weights (issue 46 goal:
# every family within 10% of Redwood's Llama speed per byte). One random
# checkpoint per family, all of one shape (tools/make-synthetic-gguf.py: DIM,
# LAYERS, FFN, HEADS / KV_HEADS, VOCAB, untied LM head, matrices in TYPE): llama,
# qwen2 (q/k/v biases, NEOX RoPE) and qwen3 (per-head q/k RMSNorm, NEOX RoPE).
# `redwood generate` decodes N tokens greedily after a fixed 8-token prompt, all
# resident, THREADS threads; ROUNDS rounds, the families in turn (the order
# reversed every other round, so a drifting machine biases none). Bytes per
# token are what a decode step reads: every tensor but the embedding table
# (`redwood info --json` total_bytes less vocab x dim of TYPE).
#
#   bench/families_speed.sh            DIM=1024 LAYERS=12 FFN=2816 TYPE=F16 N=64 ROUNDS=5
#
# Prints every run; writes out/families_speed/report.md: per family the median
# s/token, GB/s and GB/s relative to llama's (>= 0.90 meets the goal).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
RW="${RW:-./build/redwood}"
DIM="${DIM:-1024}" LAYERS="${LAYERS:-12}" FFN="${FFN:-2816}" HEADS="${HEADS:-16}" KV_HEADS="${KV_HEADS:-4}"
VOCAB="${VOCAB:-32000}" TYPE="${TYPE:-F16}" N="${N:-64}" ROUNDS="${ROUNDS:-5}" THREADS="${THREADS:-2}"
OUT="${OUT:-out/families_speed}"
[[ -x $RW ]] || { echo "families_speed: $RW is not an executable (RW=...)" >&2; exit 1; }
case "$TYPE" in F32|F16|BF16|Q8_0|Q4_0) ;; *) echo "families_speed: TYPE must be F32, F16, BF16, Q8_0 or Q4_0" >&2; exit 1;; esac
mkdir -p "$OUT"
FAMILIES=(llama qwen2 qwen3)
declare -A EXTRA=([llama]="--rope-base 500000" [qwen2]="--arch qwen2 --rope-base 1000000"
  [qwen3]="--arch qwen3 --rope-base 1000000")
SHAPE="$TYPE-d$DIM-l$LAYERS-f$FFN-h$HEADS-kv$KV_HEADS-v$VOCAB"
for f in "${FAMILIES[@]}"; do
  m="$OUT/$f-$SHAPE.gguf"
  if [[ ! -f $m ]]; then
    # shellcheck disable=SC2086
    python3 tools/make-synthetic-gguf.py --out "$m" --layers "$LAYERS" --dim "$DIM" --heads "$HEADS" \
      --kv-heads "$KV_HEADS" --ffn "$FFN" --vocab "$VOCAB" --type "$TYPE" --seed 5 ${EXTRA[$f]} >/dev/null
  fi
done
RUNS="$OUT/runs.tsv"
printf 'round\tfamily\ts_per_token\n' > "$RUNS"
for ((r = 1; r <= ROUNDS; r++)); do
  order=("${FAMILIES[@]}")
  if ((r % 2 == 0)); then order=(qwen3 qwen2 llama); fi
  for f in "${order[@]}"; do
    m="$OUT/$f-$SHAPE.gguf"
    json=$("$RW" generate -m "$m" --threads "$THREADS" --prompt-tokens 5,6,7,8,9,10,11,12 --max-tokens "$N" \
      --temperature 0 --json 2>"$OUT/stderr.txt") || { echo "families_speed: $f failed: $(cat "$OUT/stderr.txt")" >&2; exit 1; }
    s=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["s_per_token"])' "$json")
    printf '%d\t%s\t%s\n' "$r" "$f" "$s" | tee -a "$RUNS"
  done
done
python3 - "$OUT" "$RW" "$TYPE" "$DIM" "$LAYERS" "$FFN" "$HEADS" "$KV_HEADS" "$VOCAB" "$N" "$ROUNDS" "$THREADS" "$SHAPE" <<'EOF'
import json, statistics, subprocess, sys
out, rw, typ, dim, layers, ffn, heads, kvh, vocab, n, rounds, threads, shape = sys.argv[1:]
per_elem = {"F32": 4.0, "F16": 2.0, "BF16": 2.0, "Q8_0": 34 / 32, "Q4_0": 18 / 32}[typ]
rows = [l.rstrip("\n").split("\t") for l in open(f"{out}/runs.tsv")][1:]
res = {}
for fam in ("llama", "qwen2", "qwen3"):
    info = json.loads(subprocess.run([rw, "info", f"{out}/{fam}-{shape}.gguf", "--json"],
                                     check=True, capture_output=True, text=True).stdout)
    step_bytes = info["total_bytes"] - int(vocab) * int(dim) * per_elem
    s = statistics.median(float(r[2]) for r in rows if r[1] == fam)
    res[fam] = (s, step_bytes, step_bytes / s / 1e9)
base = res["llama"][2]
lines = [f"# Decode speed per byte of weights by family", "",
         f"`DIM={dim} LAYERS={layers} FFN={ffn} HEADS={heads} KV_HEADS={kvh} VOCAB={vocab} TYPE={typ} N={n} "
         f"ROUNDS={rounds} THREADS={threads} bench/families_speed.sh` ({rw})", "",
         "| family | MiB read per token | median s/token | GB/s | GB/s / llama's |", "|---|---|---|---|---|"]
for fam, (s, b, gbs) in res.items():
    lines.append(f"| {fam} | {b / 2**20:.1f} | {s:.5f} | {gbs:.2f} | {gbs / base:.3f} |")
open(f"{out}/report.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
