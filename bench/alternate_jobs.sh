#!/usr/bin/env bash
# Two batch jobs run in turn (A B B A by default), page cache dropped before
# each run, so that their ratio comes from one stretch of this VM's drifting
# disk: whole-job tokens/s of every run (the summary's tokens_per_second_this_run),
# the mean of each job and the ratio B / A.
#
#   A=out/sweep/T0/Q1/plain.toml A_SHARD=1/16 B=out/sweep/T0/Q64/auto.toml \
#     A_PROMPTS=out/sweep/T0/Q64/prompts.jsonl bench/alternate_jobs.sh
#
# A, B: job files (e.g. those bench/shared_passes.sh writes); A_SHARD / B_SHARD:
# run only that shard of the job's prompts (`batch --shard`: one at a time each
# prompt's time is its own, so a shard's tokens/s estimates the whole job's);
# A_PROMPTS / B_PROMPTS: another prompt file (`batch --prompts`); ORDER (default
# "A B B A"); OUT (default out/alternate): each run's output and summary,
# r<k>-<A|B>.jsonl(.summary.json), and report.md. Needs root for drop_caches
# (otherwise runs without dropping them, and says so).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
RW="${RW:-./build/redwood}" ORDER="${ORDER:-A B B A}" OUT="${OUT:-out/alternate}"
die() { echo "alternate_jobs: $*" >&2; exit 1; }
[[ -x $RW ]] || die "build first (tools/setup.sh build)"
for j in "${A:-}" "${B:-}"; do [[ -n $j && -f $j ]] || die "A and B must name job files (got '${A:-}', '${B:-}')"; done
for arm in $ORDER; do [[ $arm == A || $arm == B ]] || die "ORDER holds A and B only, not '$arm'"; done
mkdir -p "$OUT"
rm -f "$OUT"/r*-[AB]*.jsonl "$OUT"/r*-[AB]*.summary.json
k=0
for arm in $ORDER; do
  k=$((k + 1))
  job="$A" shard="${A_SHARD:-}" prompts="${A_PROMPTS:-}"
  [[ $arm == B ]] && job="$B" shard="${B_SHARD:-}" prompts="${B_PROMPTS:-}"
  args=(batch "$job" -q -o "$OUT/r$k-$arm.jsonl")
  [[ -z $shard ]] || args+=(--shard "$shard")
  [[ -z $prompts ]] || args+=(--prompts "$prompts")
  sync
  echo 3 2>/dev/null >/proc/sys/vm/drop_caches || echo "alternate_jobs: page cache not dropped (not root)" >&2
  echo "alternate_jobs: run $k: $arm ($job${shard:+, shard $shard})" >&2
  "$RW" "${args[@]}"
done
python3 - "$OUT" "$A" "$B" "${A_SHARD:-}" "${B_SHARD:-}" <<'PY' | tee "$OUT/report.md"
import glob, json, statistics, sys
out, a, b, a_shard, b_shard = sys.argv[1:]
runs = {"A": [], "B": []}
print(f"A: `{a}`{f' (shard {a_shard})' if a_shard else ''}; B: `{b}`{f' (shard {b_shard})' if b_shard else ''}\n")
print("| run | job | tokens/s | tokens | wall s | in flight | passes |")
print("|---:|---|---:|---:|---:|---:|---:|")
for path in sorted(glob.glob(f"{out}/r*-*.summary.json"), key=lambda p: int(p.split("/r")[-1].split("-")[0])):
    k, arm = path.split("/r")[-1].split(".")[0].split("-")[:2]
    s = json.load(open(path))
    sp = s.get("shared_passes") or {}
    runs[arm].append(s["tokens_per_second_this_run"])
    print(f"| {k} | {arm} | {s['tokens_per_second_this_run']:.3f} | {s['tokens_this_run']} | "
          f"{s['wall_seconds_this_run']:.1f} | {sp.get('max_in_flight', 1)} | {sp.get('passes', '')} |")
if runs["A"] and runs["B"]:
    ma, mb = statistics.mean(runs["A"]), statistics.mean(runs["B"])
    ratio = f"{mb / ma:.2f}x" if ma > 0 else "- (A generated nothing)"
    print(f"\nmean A {ma:.3f}, mean B {mb:.3f} tokens/s: B / A = {ratio}")
PY
