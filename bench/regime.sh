#!/usr/bin/env bash
# The regime bench (issue 31): a 70B-like streaming regime on this machine.
#
#   bench/regime.sh            build what is missing, then run the suites and the llama.cpp comparison
#   bench/regime.sh models     only build the models, prompt sets and acceptance profiles
#
# The target is a benchmark stand-in (tools/make-regime-target.py): SmolLM2-135M's
# function exactly, with 350 inserted zero-contribution F16 blocks, 2.4 GiB. Under
# --device-mem 820MiB (a third of it) the planner keeps 75 of 380 layers resident and
# streams 1.9 GiB every pass, as Llama2-70B streams most of itself on a 48 GB L40.
# Drafts: SmolLM2 requantized to Q3_K (`redwood quantize`; Q4_0 where rows are not a
# multiple of 256) — the reference draft, agreeing like a smaller sibling —, and the
# source model itself (the perfect draft: its function is the target's).
#
# Prompts come from ../shared/data: acceptance profiles are measured on one subset
# (GSM8K 0-99, MT-bench 81-100 first turns) and the suites run on a disjoint one
# (GSM8K 500+, MT-bench 121+, interleaved). The acceptance profiles are measured with
# the source model as the target: its function is the stand-in's, so the profile is
# the same, and profiling does not pay for streaming.
#
# Outputs: out/regime/{suite,perfect}/results.{md,csv,json} + plots,
#          out/regime/llamacpp.md (llama.cpp in the same memory limit, bench/llamacpp_regime.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
RW=./build/redwood
SRC=models/SmolLM2-135M-Instruct.Q4_1.gguf
OUT=out/regime
DATA="${REDWOOD_DATA:-../shared/data}"
mkdir -p "$OUT"
[[ -x $RW ]] || { echo "regime: build first (tools/setup.sh build)" >&2; exit 1; }
[[ -f $SRC ]] || tools/fetch-models.sh

if [[ ! -f models/regime-target.gguf ]]; then
  python3 tools/make-regime-target.py --from "$SRC" --insert 350 --out models/regime-target.gguf
fi
[[ -f models/regime-draft-Q3_K.gguf ]] ||
  $RW quantize --from "$SRC" --type Q3_K --out models/regime-draft-Q3_K.gguf

if [[ ! -f $OUT/prompts-eval.jsonl || ! -f $OUT/prompts-profile.jsonl ]]; then
  python3 - "$DATA" "$OUT" <<'PY'
import json, sys
data, out = sys.argv[1], sys.argv[2]
gsm = [json.loads(l)["question"] for l in open(f"{data}/gsm8k_test_first1000.jsonl")]
mt = {json.loads(l)["question_id"]: json.loads(l)["turns"][0] for l in open(f"{data}/mt_bench_questions.jsonl")}
def write(path, items):
    with open(path, "w") as f:
        for i, p in items:
            f.write(json.dumps({"id": i, "prompt": p}) + "\n")
prof = [(f"gsm8k-{i}", gsm[i]) for i in range(100)] + [(f"mt-{q}", mt[q]) for q in range(81, 101)]
ev = []
for k in range(20):
    ev.append((f"gsm8k-{500 + k}", gsm[500 + k]))
    ev.append((f"mt-{121 + k}", mt[121 + k]))
write(f"{out}/prompts-profile.jsonl", prof)
write(f"{out}/prompts-eval.jsonl", ev)
PY
fi
for T in 0 0.6; do
  for D in regime-draft-Q3_K SmolLM2-135M-Instruct.Q4_1; do
    f="$OUT/acceptance-$D-T$T.json"
    [[ -f $f ]] || $RW profile-acceptance -m "$SRC" --draft "models/$D.gguf" --prompts "$OUT/prompts-profile.jsonl" \
      --temperature "$T" --count 256 --quiet --out "$f"
  done
done
[[ "${1:-}" == models ]] && exit 0

export REDWOOD_CACHE_DIR="$ROOT/$OUT/cache"  # --tree auto measures its profiles in this configuration
$RW bench run configs/bench/regime.toml --out "$OUT/suite"
$RW bench run configs/bench/regime-perfect.toml --out "$OUT/perfect"
bench/llamacpp_regime.sh | tee "$OUT/llamacpp.md"
