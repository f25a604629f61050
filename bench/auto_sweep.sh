#!/usr/bin/env bash
# The automatic choice against fixed settings (issue 44: sequences = "auto" with
# tree = "auto" within 10% of the best fixed (sequences, tree) setting at 1, 4,
# 16 and 64 prompts queued). For each Q in QUEUED, one job of Q prompts x M
# tokens through bench/shared_passes.sh (OUTDIR=out/sweep/T<T>/Q<Q>), arms:
#   Q = 1    plain and Sequoia 16 one at a time, auto (at 1 queued the shared
#            arms are those two: "auto" sequences take one prompt)
#   Q > 1    Sequoia 16 one at a time (on a shard of 4 prompts when Q > 4: one at
#            a time each prompt's time is its own), plain batching ("auto"
#            sequences), trees (Sequoia 16 split in passes of 64), auto. Plain one
#            at a time is left out: Q = 1 shows Sequoia beats it.
#   Q = 64   SKIP_64_SHARED=1 leaves out the 400 s plain-batching arm
# then out/sweep/T<T>/report.md: each Q's tokens/s per arm and auto / best.
# An arm not run this time keeps whatever summary its folder holds (e.g. one
# copied there from an earlier run), and the report uses it: the folders are
# not keyed by M or the binary.
#
#   bench/auto_sweep.sh                      QUEUED="1 4 16 64" M=64 T=0
#   QUEUED="1 4" M=32 bench/auto_sweep.sh    a quicker look
#   REPORT_ONLY=1 bench/auto_sweep.sh        the report of the runs already there
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
QUEUED="${QUEUED:-1 4 16 64}" M="${M:-64}" T="${T:-0}"
SWEEP="out/sweep/T$T"
mkdir -p "$SWEEP"
for q in $QUEUED; do
  [[ -z ${REPORT_ONLY:-} ]] || break
  if ((q == 1)); then
    arms="plain sequoia auto" shard=""
  else
    arms="sequoia shared trees auto" shard=""
    ((q > 4)) && shard="1/$((q / 4))"
    ((q == 64)) && [[ -n ${SKIP_64_SHARED:-} ]] && arms="sequoia trees auto"
  fi
  echo "auto_sweep: $q queued: $arms" >&2
  OUTDIR="$SWEEP/Q$q" N=$q M=$M T=$T SHARD=$shard ARMS="$arms" bench/shared_passes.sh > /dev/null
done
python3 - "$SWEEP" "$M" "$T" $QUEUED <<'PY' | tee "$SWEEP/report.md"
import glob, json, os, sys
sweep, m, t, qs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
arms = ("plain", "sequoia", "shared", "trees", "auto")
print(f"| queued (x {m} tokens, T = {t}) | " + " | ".join(arms) + " | auto / best fixed |")
print("|---:|" + "---:|" * (len(arms) + 1))
for q in qs:
    tps = {}
    for a in arms:
        paths = [f"{sweep}/Q{q}/{a}.jsonl.summary.json"] + glob.glob(f"{sweep}/Q{q}/{a}.shard-*.jsonl.summary.json")
        paths = [p for p in paths if os.path.exists(p)]
        if paths:
            tps[a] = json.load(open(paths[0]))["tokens_per_second_this_run"]
    best = max((v for k, v in tps.items() if k != "auto"), default=0)
    cells = [f"{tps[a]:.3f}" if a in tps else "" for a in arms]
    ratio = f"{tps['auto'] / best:.2f}x" if "auto" in tps and best else ""
    print(f"| {q} | " + " | ".join(cells) + f" | {ratio} |")
PY
