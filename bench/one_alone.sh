#!/usr/bin/env bash
# One prompt alone, two binaries alternated (issue 44 goal "one prompt alone: no
# slower than today"): `redwood generate` of one prompt on the regime stand-in at
# --device-mem MEM, plain streaming and speculative (Sequoia BUDGET, Q3_K draft),
# OLD and NEW run in turn ROUNDS times each, page cache dropped before every run;
# prints s/token per run and the ratio new / old per pair (< 1: new is faster).
#
#   OLD=/path/to/old/redwood bench/one_alone.sh        NEW=./build/redwood ROUNDS=3 M=32 T=0
#
# OLD is a build of the commit before the change (e.g. `git worktree add
# /tmp/old <commit>` and `cmake -S /tmp/old -B /tmp/old/build -G Ninja
# -DCMAKE_BUILD_TYPE=Release -DREDWOOD_CUDA=OFF && ninja -C /tmp/old/build
# redwood`). Needs the models bench/shared_passes.sh or bench/regime.sh builds
# (models/regime-target.gguf, models/regime-draft-Q3_K.gguf and
# out/regime/acceptance-regime-draft-Q3_K-T<T>.json). Writes out/one_alone/report.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OLD="${OLD:?OLD=path to the older redwood binary}"
NEW="${NEW:-./build/redwood}"
ROUNDS="${ROUNDS:-3}" M="${M:-32}" T="${T:-0}" MEM="${MEM:-820MiB}" BUDGET="${BUDGET:-16}"
DATA="${REDWOOD_DATA:-../shared/data}"
ACC="out/regime/acceptance-regime-draft-Q3_K-T$T.json"
for f in "$OLD" "$NEW"; do [[ -x $f ]] || { echo "one_alone: $f is not an executable" >&2; exit 1; }; done
for f in models/regime-target.gguf models/regime-draft-Q3_K.gguf "$ACC"; do
  [[ -f $f ]] || { echo "one_alone: $f is missing (run bench/shared_passes.sh with T=$T first)" >&2; exit 1; }
done
OUT=out/one_alone
mkdir -p "$OUT"
PROMPT="$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readlines()[500])["question"])' \
  "$DATA/gsm8k_test_first1000.jsonl")"
COMMON=(generate -m models/regime-target.gguf --kv-type f16 --chat --prompt "$PROMPT" --max-tokens "$M"
  --temperature "$T" --seed 1 --json)
run() {  # binary, arm -> s/token
  local args=("${COMMON[@]}")
  if [[ $2 == spec ]]; then
    args+=(--device-mem "$MEM+draft" --draft models/regime-draft-Q3_K.gguf --tree sequoia --budget "$BUDGET"
      --acceptance "$ACC")
  else
    args+=(--device-mem "$MEM")
  fi
  sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
  "$1" "${args[@]}" 2>/dev/null | python3 -c 'import json,sys; print("%.4f" % json.load(sys.stdin)["s_per_token"])'
}
{
  echo "| arm | pair | old s/token | new s/token | new / old |"
  echo "|---|---:|---:|---:|---:|"
  for arm in plain spec; do
    for ((r = 1; r <= ROUNDS; ++r)); do
      if ((r % 2)); then o=$(run "$OLD" $arm); n=$(run "$NEW" $arm); else n=$(run "$NEW" $arm); o=$(run "$OLD" $arm); fi
      echo "| $arm | $r | $o | $n | $(python3 -c "print(f'{$n / $o:.3f}')") |"
    done
  done
} | tee "$OUT/report.md"
