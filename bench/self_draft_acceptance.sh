#!/usr/bin/env bash
# Tokens per target pass of SmolLM2 self-drafts, greedy, --tree chain:4, 64
# tokens of each of two prompts. Truncated drafts keep the first K of 30 blocks;
# layer-skipping drafts keep a block list (make-draft --blocks). Reproduces the
# table in docs/perf-log/2026-11-23.md. Deterministic.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
P1="Once upon a time, there was a little girl who"
P2="The capital of France is Paris. The capital of Germany is"
echo "| draft (blocks kept of 30) | n blocks | MiB | tokens per target pass, prompt 1 / prompt 2 |"
echo "|---|---|---|---|"
for spec in first:10 first:20 first:26 first:29 0-4,25-29 0-9,20-29 0-3,16-29 0-19,27-29 \
            0-9,11-19,21-29 0-24,26-29 0-14,16-29 0-29; do
  D=build/self-draft-${spec/:/-}.gguf
  if [[ $spec == first:* ]]; then
    [[ -f $D ]] || ./build/redwood make-draft --from "$M" --layers "${spec#first:}" --out "$D" >/dev/null
  else
    [[ -f $D ]] || ./build/redwood make-draft --from "$M" --blocks "$spec" --out "$D" >/dev/null
  fi
  r=()
  for P in "$P1" "$P2"; do
    r+=("$(./build/redwood generate -m "$M" -p "$P" -n 64 --json --draft "$D" --tree chain:4 |
      python3 -c "import json,sys; print(f\"{json.load(sys.stdin)['mean_accepted']:.2f}\")")")
  done
  read -r nb mib < <(./build/redwood info "$D" --json |
    python3 -c "import json,sys; j=json.load(sys.stdin); print(j['layers'], round(j['total_bytes']/2**20,1))")
  echo "| ${spec/first:/first } | $nb | $mib | ${r[0]} / ${r[1]} |"
done
