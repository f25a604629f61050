#!/usr/bin/env bash
# Continuous batching on the regime stand-in (issue 44): one job of N prompts x M
# tokens, run three ways in the same device-memory limit, and its whole-job
# throughput (generated tokens per second of the job's wall time after loading,
# prefill included: the summary's tokens_per_second_this_run):
#   plain    one prompt at a time, plain streaming        ([batch] sequences = 1)
#   sequoia  one prompt at a time, speculative (Q3_K draft, Sequoia tree of BUDGET nodes)
#   shared   continuous batching, sequences = "auto"      (as many as the budget holds)
#   trees    continuous batching with the draft: sequences = "auto", a Sequoia tree of up to
#            BUDGET nodes per prompt, split evenly in passes of PASS tokens (default 64)
#   auto     what a user gets by asking for it: sequences = "auto", tree = "auto" (at most
#            BUDGET nodes), passes of at most AUTO_PASS tokens (default 64, the job default): the node budget
#            rule picks each pass's size and trees from the measured t(n) and the acceptance
# then the ratios shared / plain and shared / sequoia from this one run.
#
#   bench/shared_passes.sh                 N=16 M=16 MEM=820MiB BUDGET=16 KV=f16 T=0
#   N=64 M=64 T=0.6 bench/shared_passes.sh the issue's job (about 2 hours one at a time here)
#   ARMS="shared trees" bench/shared_passes.sh   only these arms; the others' last summaries
#                                          (same N, M, T) are reported, marked "earlier run"
#   OUTDIR=out/x bench/shared_passes.sh   write there instead of out/shared/T<T>
#   SHARD=1/8 N=64 M=64 bench/shared_passes.sh   the one-prompt-at-a-time arms (plain, sequoia)
#                                          run only shard 1 of 8 of the prompts (batch --shard:
#                                          by prompt id): one at a time, each prompt's time is its
#                                          own, so the shard's tokens/s estimates the whole job's
#                                          (the report marks them "shard 1/8")
#
# Builds what is missing the way bench/regime.sh does (the 2.4 GiB stand-in, the Q3_K
# draft, the acceptance profile at T) into models/ and out/regime/; writes
# out/shared/<T>/{plain,sequoia,shared}.jsonl(+.summary.json) and out/shared/<T>/report.md.
# The KV cache type is the same for all three (KV=f16 by default: the stand-in's KV is
# heavy, 285 KB per position in f16, so the budget, not the pass, bounds the sequences).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SHARD="${SHARD:-}"
N="${N:-16}" M="${M:-16}" MEM="${MEM:-820MiB}" BUDGET="${BUDGET:-16}" KV="${KV:-f16}" T="${T:-0}" PASS="${PASS:-64}"
AUTO_PASS="${AUTO_PASS:-64}"
ARMS="${ARMS:-plain sequoia shared trees auto}"
RW=./build/redwood
SRC=models/SmolLM2-135M-Instruct.Q4_1.gguf
DATA="${REDWOOD_DATA:-../shared/data}"
OUT="${OUTDIR:-out/shared/T$T}"
mkdir -p "$OUT" out/regime
[[ -x $RW ]] || { echo "shared_passes: build first (tools/setup.sh build)" >&2; exit 1; }
[[ -f $SRC ]] || tools/fetch-models.sh
[[ -f models/regime-target.gguf ]] ||
  python3 tools/make-regime-target.py --from "$SRC" --insert 350 --out models/regime-target.gguf
[[ -f models/regime-draft-Q3_K.gguf ]] || $RW quantize --from "$SRC" --type Q3_K --out models/regime-draft-Q3_K.gguf

# Prompts: GSM8K 500+ and MT-bench 121+ interleaved (disjoint from the profile's).
python3 - "$DATA" "$OUT/prompts.jsonl" "$N" out/regime/prompts-profile.jsonl <<'PY'
import json, sys
data, out, n, prof = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
gsm = [json.loads(l)["question"] for l in open(f"{data}/gsm8k_test_first1000.jsonl")]
mt = {json.loads(l)["question_id"]: json.loads(l)["turns"][0] for l in open(f"{data}/mt_bench_questions.jsonl")}
items = []
for k in range(n):
    items.append((f"gsm8k-{500 + k}", gsm[500 + k]) if k % 2 == 0 else (f"mt-{121 + k // 2}", mt.get(121 + k // 2, gsm[700 + k])))
with open(out, "w") as f:
    for i, p in items:
        f.write(json.dumps({"id": i, "prompt": p}) + "\n")
import os
if not os.path.exists(prof):
    with open(prof, "w") as f:
        for i in range(100):
            f.write(json.dumps({"id": f"gsm8k-{i}", "prompt": gsm[i]}) + "\n")
        for q in range(81, 101):
            f.write(json.dumps({"id": f"mt-{q}", "prompt": mt[q]}) + "\n")
PY
ACC="out/regime/acceptance-regime-draft-Q3_K-T$T.json"
[[ -f $ACC ]] || $RW profile-acceptance -m "$SRC" --draft models/regime-draft-Q3_K.gguf \
  --prompts out/regime/prompts-profile.jsonl --temperature "$T" --count 256 --quiet --out "$ACC"

job() {  # name, extra TOML
  [[ " $ARMS " == *" $1 "* ]] || { echo "shared_passes: $1 not run (ARMS); its last summary is reported" >&2; return; }
  cat > "$OUT/$1.toml" <<EOF
name = "shared-passes-$1"
[model]
target = "models/regime-target.gguf"
$2
[sampling]
temperature = $T
seed = 1
max_tokens = $M
[input]
prompts = "$OUT/prompts.jsonl"
chat = true
[output]
path = "$OUT/$1.jsonl"
EOF
  rm -f "$OUT/$1".jsonl "$OUT/$1".jsonl.summary.json "$OUT/$1".shard-*.jsonl "$OUT/$1".shard-*.jsonl.summary.json
  sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
  echo "shared_passes: $1" >&2
  $RW batch "$OUT/$1.toml" -q
}
MEMORY="[memory]
device = \"$MEM\"
kv_type = \"$KV\"
ctx = 1024"
SHARD_KEY=""
[[ -z $SHARD ]] || SHARD_KEY="shard = \"$SHARD\""
job plain "$MEMORY
[batch]
sequences = 1
$SHARD_KEY"
SPECULATION="draft = \"models/regime-draft-Q3_K.gguf\"
[memory]
device = \"$MEM+draft\"
kv_type = \"$KV\"
ctx = 1024
[speculation]
tree = \"sequoia\"
budget = $BUDGET
acceptance = \"$ACC\""
job sequoia "$SPECULATION
[batch]
sequences = 1
$SHARD_KEY"
job shared "$MEMORY
[batch]
sequences = \"auto\""
job trees "$SPECULATION
[batch]
sequences = \"auto\"
pass_tokens = $PASS"
job auto "${SPECULATION/tree = \"sequoia\"/tree = \"auto\"}
[batch]
sequences = \"auto\"
pass_tokens = $AUTO_PASS"

python3 - "$OUT" "$N" "$M" "$MEM" "$KV" "$T" "$ARMS" "$SHARD" <<'PY' | tee "$OUT/report.md"
import glob, json, os, sys
out, n, m, mem, kv, t, arms, shard = sys.argv[1:]
arms = arms.split()
rows, where = {}, {}
for name in ("plain", "sequoia", "shared", "trees", "auto"):
    path = f"{out}/{name}.jsonl.summary.json"
    if name in ("plain", "sequoia") and not os.path.exists(path):
        found = glob.glob(f"{out}/{name}.shard-*.jsonl.summary.json")
        if found:
            path = found[0]
            where[name] = " (shard " + path.split(".shard-")[1].split(".")[0].replace("-of-", "/") + ")"
    if not os.path.exists(path):
        continue  # an arm never run here
    s = json.load(open(path))
    run = s.get("run", s)
    def find(d, key):
        if isinstance(d, dict):
            if key in d: return d[key]
            for v in d.values():
                r = find(v, key)
                if r is not None: return r
        return None
    rows[name] = (find(s, "tokens_this_run"), find(s, "wall_seconds_this_run"), find(s, "tokens_per_second_this_run"),
                  find(s, "sequences"), s.get("shared_passes", {}))
print(f"| {n} prompts x {m} tokens, T = {t}, --device-mem {mem}, KV {kv} | tokens | wall s | tokens/s | sequences |")
print("|---|---:|---:|---:|---:|")
for name, (tok, wall, tps, seqs, sp) in rows.items():
    print(f"| {name}{where.get(name, '')}{'' if name in arms else ' (earlier run)'} | {tok} | {wall:.1f} | {tps:.3f} | {seqs} |")
print()
tps = {k: v[2] for k, v in rows.items()}
pairs = [("shared", "plain"), ("shared", "sequoia"), ("trees", "plain"), ("trees", "sequoia"), ("trees", "shared"),
         ("auto", "plain"), ("auto", "sequoia")]
print(", ".join(f"{a} / {b} = {tps[a] / tps[b]:.2f}x" for a, b in pairs if a in tps and b in tps))
if "auto" in tps and len(tps) > 1:
    best = max((v, k) for k, v in tps.items() if k != "auto")
    print(f"auto / best other arm ({best[1]}) = {tps['auto'] / best[0]:.2f}x")
for arm in ("shared", "trees", "auto"):
  if arm not in rows: continue
  sp = rows[arm][4]
  if sp:
    print(f"{arm}: {sp.get('passes')} passes, {sp.get('tokens_per_pass', 0):.1f} tokens per pass "
          f"({sp.get('decode_tokens_per_pass', 0):.1f} decode), {sp.get('pass_seconds', 0):.1f} s in passes, "
          f"at most {sp.get('max_in_flight')} in flight"
          + (f", {sp.get('tokens_per_decode_slot', 0):.2f} tokens per decode slot" if 'tokens_per_decode_slot' in sp else "")
          + (f", {sp['draft_passes']} draft passes ({sp.get('draft_tokens_per_pass', 0):.1f} tokens each, "
             f"{sp.get('draft_seconds', 0):.1f} s)" if 'draft_passes' in sp else ""))
PY
