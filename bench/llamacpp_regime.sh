#!/usr/bin/env bash
# llama.cpp in the regime bench's memory limit (issue 31): the same stand-in target, the same
# Q3_K draft, the same eval prompts (chat template applied the same way) and token counts, run
# by llama.cpp's plain generation (llama-completion) and its speculative example
# (llama-speculative-simple), each inside a memory cgroup whose limit covers the page cache
# (cgroup v1 memory.limit_in_bytes, or v2 memory.max), with the page cache dropped before each
# run. llama.cpp mmaps the model, so a model larger than the limit is re-read from storage
# through page faults on every pass: plain offloading by the kernel.
#   [TARGET=GGUF] [SPEC_ONLY=1] bench/llamacpp_regime.sh [LIMIT_MIB]
# SPEC_ONLY=1 runs only the speculative example (plain decoding in a tight limit takes
# minutes per prompt); its plain row then reads "not run".
# LIMIT_MIB defaults to the smallest peak RSS of Redwood's speculative cells in
# out/regime/suite (the suite runs its cells in one process, and later cells' peaks also
# hold memory the allocator kept from earlier cells; a single `redwood batch` run of the
# best configuration peaked at 925 MiB on 2026-11-26).
# Needs root (cgroups, drop_caches). llama.cpp is built from the llama-cpp-python sdist on
# PyPI into build/llamacpp/ (as bench/llamacpp_reference.sh does). Prints a markdown table.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=bench/llamacpp_common.sh
source bench/llamacpp_common.sh
BIN="$LLAMACPP_BIN"
OUT=out/regime
TARGET="${TARGET:-models/regime-target.gguf}"  # TARGET=models/regime-target-bf16.gguf: the BF16 stand-in
DRAFT=models/regime-draft-Q3_K.gguf
N_PROMPTS="${N_PROMPTS:-4}"
N_TOKENS="${N_TOKENS:-32}"
DRAFT_MAX="${DRAFT_MAX:-8}"
THREADS="$(nproc)"
llamacpp_build llama-completion llama-speculative-simple

LIMIT_MIB="${1:-}"
if [[ -z $LIMIT_MIB ]]; then
  LIMIT_MIB=$(python3 -c "
import json; j = json.load(open('$OUT/suite/results.json'))
print(int(min(c['peak_rss_bytes'] for c in j['cells'] if c['tree']) / 2**20) + 1)")
fi

llamacpp_cgroup "$LIMIT_MIB"
# The eval prompts with SmolLM2's chat template, as `redwood` applies it with chat = true.
mapfile -t PROMPTS < <(llamacpp_chat_prompts "$OUT/prompts-eval.jsonl" "$N_PROMPTS")

plain_s=0 plain_n=0 spec_s=0 spec_n=0 drafted=0 accepted=0 peak_plain=0 peak_spec=0
for p in "${PROMPTS[@]}"; do
  text=$(python3 -c "import json,sys; print(json.loads(sys.argv[1]), end='')" "$p")
  if [[ ${SPEC_ONLY:-0} != 1 ]]; then
    log=$(run_in_cgroup "$BIN/llama-completion" -m "$TARGET" -p "$text" -n "$N_TOKENS" -t "$THREADS" --temp 0 \
      -c 320 -no-cnv --no-warmup --ignore-eos --no-display-prompt 2>&1 </dev/null || true)
    peak_plain=$(($(cat "$PEAK") > peak_plain ? $(cat "$PEAK") : peak_plain))
    # "eval time =  X ms /  N runs"
    read -r ms runs < <(echo "$log" | sed -n 's/.*[^t] eval time = *\([0-9.]*\) ms \/ *\([0-9]*\) runs.*/\1 \2/p' | tail -1)
    [[ -n ${ms:-} ]] || { echo "llamacpp_regime: llama-completion failed:" >&2; echo "$log" | tail -5 >&2; exit 1; }
    plain_s=$(python3 -c "print($plain_s + $ms / 1000)")
    plain_n=$((plain_n + runs))
  fi
  log=$(run_in_cgroup "$BIN/llama-speculative-simple" -m "$TARGET" -md "$DRAFT" -p "$text" -n "$N_TOKENS" \
    -t "$THREADS" --temp 0 -c 320 --spec-type draft-simple --spec-draft-n-max "$DRAFT_MAX" 2>&1 </dev/null || true)
  peak_spec=$(($(cat "$PEAK") > peak_spec ? $(cat "$PEAK") : peak_spec))
  read -r n secs < <(echo "$log" | sed -n 's/.*decoded *\([0-9]*\) tokens in *\([0-9.]*\) seconds.*/\1 \2/p' | tail -1)
  [[ -n ${n:-} ]] || { echo "llamacpp_regime: llama-speculative-simple failed:" >&2; echo "$log" | tail -5 >&2; exit 1; }
  spec_s=$(python3 -c "print($spec_s + $secs)")
  spec_n=$((spec_n + n))
  drafted=$((drafted + $(echo "$log" | sed -n 's/.*n_drafted = *\([0-9]*\).*/\1/p' | tail -1)))
  accepted=$((accepted + $(echo "$log" | sed -n 's/.*n_accept *= *\([0-9]*\).*/\1/p' | tail -1)))
done
rmdir "$CG" 2>/dev/null || true
# bench/regime_report.py reads llamacpp.json (the default target); another target's result is kept apart.
RESULT="$OUT/llamacpp.json"
[ "$TARGET" = models/regime-target.gguf ] || RESULT="$OUT/llamacpp-$(basename "$TARGET" .gguf)-$LIMIT_MIB.json"
[[ ${SPEC_ONLY:-0} != 1 ]] || RESULT="$OUT/llamacpp-spec-$(basename "$TARGET" .gguf)-$LIMIT_MIB.json"

python3 - "$plain_s" "$plain_n" "$spec_s" "$spec_n" "$drafted" "$accepted" "$LIMIT_MIB" "$peak_plain" "$peak_spec" \
  "$N_PROMPTS" "$N_TOKENS" "$DRAFT_MAX" "$RESULT" "$TARGET" <<'PY'
import json, sys
ps, pn, ss, sn, dr, ac, lim, pk1, pk2, np_, nt, dm, out, target = sys.argv[1:]
ps, ss = float(ps), float(ss)
pn, sn, dr, ac = int(pn), int(sn), int(dr), int(ac)
print(f"llama.cpp on {target} in a memory cgroup of {lim} MiB (page cache included, dropped before each run), "
      f"{np_} prompts x {nt} tokens, greedy, {__import__('os').cpu_count()} threads\n")
print("| llama.cpp | s/token | tokens | accepted / drafted | peak cgroup MiB |")
print("|---|---:|---:|---:|---:|")
print(f"| plain (llama-completion) | {ps / pn:.3f} | {pn} | - | {int(pk1) / 2**20:.0f} |" if pn else
      "| plain (llama-completion) | not run | - | - | - |")
print(f"| speculative (llama-speculative-simple, --spec-draft-n-max {dm}) | {ss / max(sn, 1):.3f} | {sn} | "
      f"{ac} / {dr} | {int(pk2) / 2**20:.0f} |")
json.dump({"target": target, "limit_mib": int(lim), "prompts": int(np_), "max_tokens": int(nt),
           "plain": {"s_per_token": ps / pn, "tokens": pn, "peak_bytes": int(pk1)} if pn else None,
           "speculative": {"s_per_token": ss / max(sn, 1), "tokens": sn, "drafted": dr, "accepted": ac,
                           "draft_max": int(dm), "peak_bytes": int(pk2)}}, open(out, "w"), indent=1)
PY
