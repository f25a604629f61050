#!/usr/bin/env bash
# Issue 44's sweep: the shared arm's job of bench/shared_passes.sh (its prompts, N, M, T,
# memory) run with each [batch] sequences setting of SEQS in turn, caches dropped before
# each, and a table of whole-job tokens/s, prompts in flight, KV pool rows and passes,
# with "auto" / the best fixed setting from this one run.
#
#   N=16 M=32 bench/shared_passes.sh first (the job and its prompts), then
#   [T=0] [SEQS='"auto" 8 4'] bench/sequences_sweep.sh
#
# A setting that does not fit the budget is reported as refused. Writes
# out/shared/T<T>/sweep/s<setting>.{toml,jsonl,jsonl.summary.json} and sweep.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
T="${T:-0}" SEQS="${SEQS:-\"auto\" 8 4}"
RW=./build/redwood
OUT="out/shared/T$T"
[[ -x $RW ]] || { echo "sequences_sweep: build first (tools/setup.sh build)" >&2; exit 1; }
[[ -f $OUT/shared.toml ]] || { echo "sequences_sweep: $OUT/shared.toml missing: run bench/shared_passes.sh first" >&2; exit 1; }
mkdir -p "$OUT/sweep"
for b in $SEQS; do
  n="${b//\"/}"
  [[ $n == auto || $n =~ ^[1-9][0-9]*$ ]] || { echo "sequences_sweep: '$b' is not \"auto\" or a count" >&2; exit 1; }
  sed "s/^sequences = .*/sequences = $b/; s|^path = .*|path = \"$OUT/sweep/s$n.jsonl\"|" "$OUT/shared.toml" > "$OUT/sweep/s$n.toml"
  rm -f "$OUT/sweep/s$n.jsonl" "$OUT/sweep/s$n.jsonl.summary.json"
  sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
  echo "sequences_sweep: sequences = $b" >&2
  $RW batch "$OUT/sweep/s$n.toml" -q || echo "sequences_sweep: sequences = $b did not run (see above)" >&2
done
python3 - "$OUT" "$SEQS" <<'PY' | tee "$OUT/sweep.md"
import json, os, sys
out, seqs = sys.argv[1], sys.argv[2].replace('"', "").split()
print("| sequences | tokens/s | in flight | KV pool rows | passes |")
print("|---|---:|---:|---:|---:|")
tps = {}
for n in seqs:
    p = f"{out}/sweep/s{n}.jsonl.summary.json"
    if not os.path.exists(p):
        print(f"| {n} | refused | | | |")
        continue
    s = json.load(open(p))
    sp = s.get("shared_passes", {})
    tps[n] = s["tokens_per_second_this_run"]
    print(f"| {n} | {tps[n]:.3f} | {sp.get('max_in_flight', 1)} | {s['config'].get('kv_pool_rows', '')} | "
          f"{sp.get('passes', '')} |")
fixed = {k: v for k, v in tps.items() if k != "auto"}
if "auto" in tps and fixed:
    best = max(fixed, key=fixed.get)
    print(f"\n\"auto\" / best fixed ({best}) = {tps['auto'] / fixed[best]:.2f}x")
PY
