#!/usr/bin/env bash
# Tokens per target pass (mean_accepted, bonus included) of trained drafts
# (tools/train-draft.py) vs the truncated self-draft with the same number of
# blocks, for SmolLM2-135M-Instruct, greedy, --chat, 64 tokens of each of GSM8K
# test questions 500..504 (the drafts are trained on questions 0..499 only).
# Deterministic (acceptance); the draft_s/pass column is wall time and noisy.
#
# Usage: bench/trained_draft_acceptance.sh [DRAFT.gguf ...]   (default: build/train-draft/trained-2L-0-1-Q8_0.gguf)
#   TREES="chain:4 chain:8"  trees to measure (default chain:4 chain:8)
#   FIRST=500 COUNT=5        GSM8K question range
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
M=${M:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
R=./build/redwood
DATA=${DATA:-../shared/data/gsm8k_test_first1000.jsonl}
FIRST=${FIRST:-500}
COUNT=${COUNT:-5}
TREES=${TREES:-chain:4 chain:8}
DRAFTS=("$@")
[[ ${#DRAFTS[@]} -gt 0 ]] || DRAFTS=(build/train-draft/trained-2L-0-1-Q8_0.gguf)

mapfile -t QS < <(python3 -c "
import json, sys
for i, l in enumerate(open('$DATA')):
    if $FIRST <= i < $FIRST + $COUNT: print(json.dumps(json.loads(l)['question']))")

layers() { $R info "$1" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['layers'])"; }
mib() { $R info "$1" --json | python3 -c "import json,sys; print(round(json.load(sys.stdin)['total_bytes']/2**20,1))"; }

# list: trained drafts, then one truncated self-draft per distinct block count
ALL=()
declare -A SEEN=()
for D in "${DRAFTS[@]}"; do
  [[ -f $D ]] || { echo "missing draft $D (train it with tools/train-draft.py)" >&2; exit 1; }
  ALL+=("$D")
done
for D in "${DRAFTS[@]}"; do
  K=$(layers "$D")
  [[ -n ${SEEN[$K]:-} ]] && continue
  SEEN[$K]=1
  mkdir -p build/train-draft; T=build/train-draft/self-draft-first-$K.gguf
  [[ -f $T ]] || $R make-draft --from "$M" --layers "$K" --out "$T" >/dev/null
  ALL+=("$T")
done

echo "target: $M (target file $(mib "$M") MiB); GSM8K questions $FIRST..$((FIRST + COUNT - 1)), --chat, -n 64, greedy"
for TREE in $TREES; do
  echo
  echo "### --tree $TREE: tokens per target pass (mean_accepted)"
  hdr="| draft | blocks | MiB |"
  sep="|---|---|---|"
  for ((i = 0; i < COUNT; i++)); do hdr+=" q$((FIRST + i)) |"; sep+="---|"; done
  echo "$hdr mean | draft_s/pass |"
  echo "$sep---|---|"
  for D in "${ALL[@]}"; do
    row="| $(basename "$D") | $(layers "$D") | $(mib "$D") |"
    vals=()
    dsp=()
    for Q in "${QS[@]}"; do
      P=$(python3 -c "import json,sys; print(json.loads(sys.argv[1]))" "$Q")
      J=$($R generate -m "$M" -p "$P" --chat -n 64 --json --draft "$D" --tree "$TREE" 2>/dev/null)
      read -r acc ds < <(echo "$J" | python3 -c "
import json,sys; j=json.load(sys.stdin)
print(f\"{j['mean_accepted']:.2f}\", f\"{j['draft_seconds']/max(j['target_passes'],1)*1e3:.2f}\")")
      vals+=("$acc"); dsp+=("$ds")
      row+=" $acc |"
    done
    mean=$(python3 -c "import sys; v=[float(x) for x in sys.argv[1:]]; print(f'{sum(v)/len(v):.2f}')" "${vals[@]}")
    dms=$(python3 -c "import sys; v=[float(x) for x in sys.argv[1:]]; print(f'{sum(v)/len(v):.2f} ms')" "${dsp[@]}")
    echo "$row **$mean** | $dms |"
  done
done
