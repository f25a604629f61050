#!/usr/bin/env bash
# Tokens per target pass of SmolLM2 self-drafts (first K of 30 blocks), greedy,
# --tree chain:4, 64 tokens of one prompt. Reproduces the table in docs/PERFORMANCE.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
P="Once upon a time, there was a little girl who"
echo "| draft blocks | tokens per target pass | accepted-by-depth histogram |"
echo "|---|---|---|"
for K in 10 20 26; do
  D=build/self-draft-${K}L.gguf
  [[ -f $D ]] || ./build/redwood make-draft --from "$M" --layers "$K" --out "$D" >/dev/null
  ./build/redwood generate -m "$M" -p "$P" -n 64 --json --draft "$D" --tree chain:4 |
    python3 -c "import json,sys; j=json.load(sys.stdin); print(f\"| $K of 30 | {j['mean_accepted']:.2f} | {j['accepted_by_depth']} |\")"
done
