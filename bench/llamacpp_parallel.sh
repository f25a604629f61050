#!/usr/bin/env bash
# Issue 44's comparison with llama.cpp's parallel decoding: the job of bench/shared_passes.sh
# (its prompts, N, M, T, chat template) run by Redwood's shared arm (sequences = "auto"; ARM=
# trees or auto for those arms, with the draft) and by
# llama.cpp's continuous batching with as many sequences as Redwood's run of that arm held in
# flight, both in ONE memory cgroup (limit covering the page cache, caches dropped before each
# run), alternated ROUNDS times, so that the ratio Redwood / llama.cpp comes from one run.
#
#   N=16 M=16 bench/shared_passes.sh          first: the prompts, the job and Redwood's peak RSS
#   [ROUNDS=1] [T=0] [KV_MIB=] bench/llamacpp_parallel.sh [LIMIT_MIB]
#   ARM=auto OUTDIR=out/sweep/T0/Q64 bench/llamacpp_parallel.sh   Redwood's side is that folder's
#                                          auto arm (tree and sequences "auto", with the draft)
#
# llama.cpp's side is tools/llamacpp-parallel.c on libllama (llama-parallel draws its prompts
# at random, wraps them in its own text and stops at "User:", so it cannot do this job): every
# step one llama_decode of the next token of each sequence in flight plus the prompts of those
# admitted, greedy (or sampled at the job's T > 0), each prompt up to M tokens or its end
# token, a finished sequence's KV rows removed and its slot given the next prompt. llama.cpp
# mmaps the model: in a limit below its size, the kernel re-reads the weights through page
# faults on every step.
# LIMIT_MIB defaults to the peak RSS of shared_passes.sh's run of the arm (its summary); Redwood
# runs inside the same cgroup (--device-mem as in that job; it reads with O_DIRECT).
# llama.cpp allocates its whole KV cache up front; by default sized for the worst case (the
# longest prompts all in flight at once; on the stand-in 285 KiB a position), which may not fit
# the limit (the row then reads "killed at the limit"). KV_MIB gives it that much KV instead:
# a prompt then waits until the cells the sequences in flight may need leave room for it.
# Writes out/shared/T<T>/llamacpp.md (and llamacpp-r<k>.{jsonl,json}, llamacpp-redwood-r<k>.*); with
# OUTDIR, there; with ARM other than shared, named llamacpp-<ARM>.md (llamacpp-<ARM>-r<k>.*,
# llamacpp-redwood-<ARM>-r<k>.*), so the arms' reports sit side by side.
# Needs root (cgroups, drop_caches); builds libllama (build/llamacpp) and the driver if missing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=bench/llamacpp_common.sh
source bench/llamacpp_common.sh
T="${T:-0}" ROUNDS="${ROUNDS:-1}" THREADS="${THREADS:-$(nproc)}"
ARM="${ARM:-shared}"
SUFFIX=""
[[ $ARM == shared ]] || SUFFIX="-$ARM"
RW=./build/redwood
OUT="${OUTDIR:-out/shared/T$T}"
die() { echo "llamacpp_parallel: $*" >&2; exit 1; }
[[ -x $RW ]] || die "build first (tools/setup.sh build)"
[[ $ARM == shared || $ARM == trees || $ARM == auto ]] || die "ARM must be shared, trees or auto, not '$ARM'"
for f in prompts.jsonl "$ARM.toml" "$ARM.jsonl.summary.json"; do
  [[ -f $OUT/$f ]] ||
    die "$OUT/$f missing: run OUTDIR=$OUT ARMS=$ARM bench/shared_passes.sh first (with the same N, M and T=$T)"
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a whole number >= 1, not '$ROUNDS'"
[[ -z ${KV_MIB:-} || $KV_MIB =~ ^[1-9][0-9]*$ ]] || die "KV_MIB must be a whole number of MiB, not '$KV_MIB'"

# The job as shared_passes.sh ran it: N prompts, M tokens, its target and temperature, the
# sequences its run of ARM held in flight, its peak RSS.
read -r N M TARGET TEMP SEQS PEAK_MIB < <(python3 - "$OUT" "$ARM" <<'PY'
import json, sys, tomllib
out, arm = sys.argv[1:]
s = json.load(open(f"{out}/{arm}.jsonl.summary.json"))
job = tomllib.load(open(f"{out}/{arm}.toml", "rb"))
seqs = (s.get("shared_passes") or {}).get("max_in_flight") or s["config"]["sequences"]
print(sum(1 for l in open(f"{out}/prompts.jsonl") if l.strip()), job["sampling"]["max_tokens"], job["model"]["target"],
      job["sampling"]["temperature"], seqs, s["peak_rss_bytes"] // 2**20 + 1)
PY
)
LIMIT_MIB="${1:-${LIMIT_MIB:-$PEAK_MIB}}"
[[ $LIMIT_MIB =~ ^[1-9][0-9]*$ ]] || die "LIMIT_MIB must be a whole number of MiB, not '$LIMIT_MIB'"

DRIVER="$(llamacpp_driver llamacpp-parallel)"
llamacpp_chat_prompts "$OUT/prompts.jsonl" "$N" "$OUT/llamacpp-prompts.bin"
llamacpp_cgroup "$LIMIT_MIB"
trap 'rmdir "$CG" 2>/dev/null || true' EXIT

# Each arm: its result files, its exit status and the cgroup's peak in <name>.cgroup.
redwood() {  # round
  local o="$OUT/llamacpp-redwood$SUFFIX-r$1.jsonl" rc=0
  rm -f "$o" "$o.summary.json"
  echo "llamacpp_parallel: round $1: redwood ($ARM, sequences auto)" >&2
  run_in_cgroup "$RW" batch "$OUT/$ARM.toml" -o "$o" -q -t "$THREADS" || rc=$?
  echo "$rc $(cat "$PEAK")" >"$o.cgroup"
}
llamacpp() {  # round
  local o="$OUT/llamacpp$SUFFIX-r$1" rc=0
  rm -f "$o.jsonl" "$o.jsonl.part" "$o.json"
  echo "llamacpp_parallel: round $1: llama.cpp ($SEQS sequences)" >&2
  run_in_cgroup "$DRIVER" "$TARGET" "$OUT/llamacpp-prompts.bin" "$SEQS" "$M" "$o.jsonl" "$THREADS" "${KV_MIB:-0}" \
    "$TEMP" >"$o.json" || rc=$?
  echo "$rc $(cat "$PEAK")" >"$o.cgroup"
}
for ((r = 1; r <= ROUNDS; r++)); do
  if ((r % 2)); then redwood $r; llamacpp $r; else llamacpp $r; redwood $r; fi
done

# The report: printed, and written to llamacpp$SUFFIX.md only when every round could be read.
python3 - "$OUT" "$N" "$M" "$SEQS" "$LIMIT_MIB" "$TEMP" "$ROUNDS" "$THREADS" "$TARGET" "$ARM" <<'PY'
import json, os, statistics, sys
out, n, m, seqs, limit, t, rounds, threads, target, arm = sys.argv[1:]
sfx = "" if arm == "shared" else f"-{arm}"
lines = []
def say(text=""):
    lines.append(text)
ids = [json.loads(l)["id"] for l in open(f"{out}/prompts.jsonl") if l.strip()]

def status(path):
    rc, peak = open(path).read().split()
    return int(rc), int(peak) / 2**20

def failed(who, rc):
    sys.exit(f"llamacpp_parallel: {who} exited with status {rc}"
             + (" (killed: the cgroup's out-of-memory killer at this limit?)" if rc == 137 else ""))

ref_name = "plain.jsonl" if os.path.exists(f"{out}/plain.jsonl") else None
greedy = float(t) == 0
say(f"{target}, {n} prompts x {m} tokens, T = {t}, one memory cgroup of {limit} MiB (page cache included, dropped "
    f"before each run), {threads} threads; Redwood: `{out}/{arm}.toml` (sequences auto); llama.cpp: "
    f"tools/llamacpp-parallel.c, {seqs} sequences, continuous batching\n")
say(f"| round | Redwood {arm} tokens/s | llama.cpp tokens/s | Redwood / llama.cpp | tokens (Redwood, llama.cpp) "
    "| cgroup peak MiB (Redwood, llama.cpp) | llama.cpp steps, most in flight, KV MiB |")
say("|---|---:|---:|---:|---|---|---|")
ratios, notes = [], []
for r in range(1, int(rounds) + 1):
    rw_rc, rw_peak = status(f"{out}/llamacpp-redwood{sfx}-r{r}.jsonl.cgroup")
    ll_rc, ll_peak = status(f"{out}/llamacpp{sfx}-r{r}.cgroup")
    if rw_rc:
        failed("redwood batch", rw_rc)
    s = json.load(open(f"{out}/llamacpp-redwood{sfx}-r{r}.jsonl.summary.json"))
    rw_tps, rw_tok = s["tokens_per_second_this_run"], s["tokens_this_run"]
    if ll_rc == 137:
        say(f"| {r} | {rw_tps:.3f} | killed at the limit | - | {rw_tok}, - | {rw_peak:.0f}, {ll_peak:.0f} | - |")
        notes.append(f"round {r}: llama.cpp was killed at {limit} MiB (its KV cache is allocated whole; KV_MIB=... "
                     "gives it less)")
        continue
    if ll_rc:
        failed("llamacpp-parallel", ll_rc)
    ll = json.load(open(f"{out}/llamacpp{sfx}-r{r}.json"))
    ratios.append(rw_tps / ll["tokens_per_second"])
    say(f"| {r} | {rw_tps:.3f} | {ll['tokens_per_second']:.3f} | {ratios[-1]:.2f}x | {rw_tok}, {ll['tokens']} "
        f"| {rw_peak:.0f}, {ll_peak:.0f} | {ll['steps']}, {ll['max_in_flight']}, {ll['kv_mib']:.0f} |")
    # The same work? llama.cpp's outputs beside Redwood's (plain job if there, else this round's).
    ref = {}
    for line in open(f"{out}/{ref_name or f'llamacpp-redwood{sfx}-r{r}.jsonl'}"):
        j = json.loads(line)
        ref[j["id"]] = j
    same = same_prompt = 0
    for line in open(f"{out}/llamacpp{sfx}-r{r}.jsonl", errors="replace"):
        j = json.loads(line)
        mine = ref.get(ids[j["index"]])
        if mine is None:
            continue
        same += mine["tokens"] == j["tokens"]
        same_prompt += mine["metrics"]["prompt_tokens"] == j["prompt_tokens"]
    versus = f"Redwood's ({ref_name or f'this round, {arm}'})"
    notes.append(f"round {r}: prompt lengths equal to {versus} on {same_prompt} of {n}; "
                 + (f"llama.cpp's greedy output equals Redwood's token for token on {same} of {n}" if greedy
                    else "outputs sampled (T > 0), not compared"))
say()
if ratios:
    say(f"Redwood / llama.cpp: median {statistics.median(ratios):.2f}x over {len(ratios)} round(s)")
for note in notes:
    say(note)
with open(f"{out}/llamacpp{sfx}.md.part", "w") as f:
    f.write("\n".join(lines) + "\n")
os.replace(f"{out}/llamacpp{sfx}.md.part", f"{out}/llamacpp{sfx}.md")
sys.stdout.write(open(f"{out}/llamacpp{sfx}.md").read())
PY
