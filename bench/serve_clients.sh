#!/usr/bin/env bash
# redwood serve under N concurrent clients vs the same prompts as one batch job
# (issue 45's bench goal): on the regime stand-in with 16 clients, aggregate
# tokens/s within 10% of the equivalent batch job; median time to first token
# and each client's tokens/s reported; an idle server uses no CPU.
#
#   bench/serve_clients.sh                              N=16 M=64 MEM=820MiB KV=f16 SEQ=16 on the stand-in
#   MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf MEM= N=2 M=8 bench/serve_clients.sh   (a quick check)
#
# Both arms: greedy, chat prompts, max_tokens M, the same memory settings; the batch job
# with sequences = "auto" (up to its N prompts, a KV pool sized to the budget), the server
# with --sequences SEQ (its pool sized to the budget the same way, up to SEQ x ctx).
# batch: its summary's tokens_per_second_this_run (wall after loading, prefill included). serve: every client sends its request at once (streamed,
# usage included); aggregate = all completion tokens / (last end - first send); per
# client: tokens / (end - send); TTFT: send -> first content chunk. Idle: the server's
# CPU seconds (utime + stime, /proc/PID/stat) over IDLE seconds after the last reply.
# Writes out/serve/<model>/{prompts.jsonl,batch.toml,serve.toml,batch.jsonl,serve.log,clients.json,report.md}.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
N="${N:-16}" M="${M:-64}" MEM="${MEM-820MiB}" KV="${KV:-f16}" SEQ="${SEQ:-$N}" IDLE="${IDLE:-10}"
MODEL="${MODEL:-models/regime-target.gguf}"
RW=./build/redwood
SRC=models/SmolLM2-135M-Instruct.Q4_1.gguf
DATA="${REDWOOD_DATA:-../shared/data}"
OUT="out/serve/$(basename "$MODEL" .gguf)"
mkdir -p "$OUT"
[[ -x $RW ]] || { echo "serve_clients: build first (tools/setup.sh build)" >&2; exit 1; }
[[ -f $SRC ]] || tools/fetch-models.sh
if [[ $MODEL == models/regime-target.gguf && ! -f $MODEL ]]; then
  python3 tools/make-regime-target.py --from "$SRC" --insert 350 --out "$MODEL"
fi

# Prompts: GSM8K and MT-bench interleaved when the data is there, else a fixed list.
python3 - "$DATA" "$OUT/prompts.jsonl" "$N" <<'PY'
import json, os, sys
data, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
fixed = ["What is the capital of France?", "Name three colors.", "Write a haiku about rain.", "What is 12 times 3?",
         "Say hello in Spanish.", "Why is the sky blue?", "List two fruits.", "Who wrote Hamlet?"]
try:
    gsm = [json.loads(l)["question"] for l in open(f"{data}/gsm8k_test_first1000.jsonl")]
    mt = [json.loads(l)["turns"][0] for l in open(f"{data}/mt_bench_questions.jsonl")]
    pool = [gsm[500 + k // 2] if k % 2 == 0 else mt[(k // 2) % len(mt)] for k in range(n)]
except OSError:
    pool = [fixed[k % len(fixed)] + ("" if k < len(fixed) else f" ({k})") for k in range(n)]
with open(out, "w") as f:
    for k, p in enumerate(pool):
        f.write(json.dumps({"id": f"c{k}", "prompt": p}) + "\n")
PY

MEMORY="[memory]
ctx = 1024
kv_type = \"$KV\""
[[ -n $MEM ]] && MEMORY="$MEMORY
device = \"$MEM\""
COMMON="[model]
target = \"$MODEL\"
$MEMORY
[sampling]
temperature = 0
max_tokens = $M"

cat > "$OUT/batch.toml" <<EOF
name = "serve-clients-batch"
$COMMON
seed = 1
[batch]
sequences = "auto"
[input]
prompts = "$OUT/prompts.jsonl"
chat = true
[output]
path = "$OUT/batch.jsonl"
EOF
rm -f "$OUT/batch.jsonl" "$OUT/batch.jsonl.summary.json"
echo "serve_clients: batch job ($N prompts x $M tokens, sequences \"auto\")" >&2
$RW batch "$OUT/batch.toml" -q

cat > "$OUT/serve.toml" <<EOF
$COMMON
[batch]
sequences = $SEQ
[server]
port = 0
max_queue = $N
EOF
echo "serve_clients: serve + $N clients" >&2
python3 - "$RW" "$OUT" "$N" "$M" "$IDLE" <<'PY' | tee "$OUT/report.md"
import http.client, json, os, re, signal, statistics, subprocess, sys, threading, time
rw, out, n, m, idle = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
log = open(f"{out}/serve.log", "w")
p = subprocess.Popen([rw, "serve", "--config", f"{out}/serve.toml"], stdout=subprocess.PIPE, stderr=log, text=True)
line = p.stdout.readline()
port = int(re.search(r":(\d+)\s*$", line).group(1))
while True:  # ready: /health 200
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/health")
        if c.getresponse().status == 200:
            break
    except OSError:
        pass
    if p.poll() is not None:
        sys.exit("serve_clients: the server exited: " + open(f"{out}/serve.log").read())
    time.sleep(0.5)
prompts = [json.loads(l)["prompt"] for l in open(f"{out}/prompts.jsonl")]
res = [None] * n
go = threading.Barrier(n)

def client(i):
    body = json.dumps({"messages": [{"role": "user", "content": prompts[i]}], "max_tokens": m, "temperature": 0,
                       "seed": 1, "stream": True, "stream_options": {"include_usage": True}})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    go.wait()
    t0 = time.time()
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    first, tokens = None, 0
    for raw in r:
        s = raw.decode().strip()
        if not s.startswith("data: ") or s == "data: [DONE]":
            continue
        j = json.loads(s[6:])
        if j.get("usage"):
            tokens = j["usage"]["completion_tokens"]
        for ch in j.get("choices", []):
            if first is None and ch.get("delta", {}).get("content"):
                first = time.time()
    res[i] = {"send": t0, "first": first, "end": time.time(), "tokens": tokens}

th = [threading.Thread(target=client, args=(i,)) for i in range(n)]
for t in th: t.start()
for t in th: t.join()
def cpu():
    f = open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
c0 = cpu(); time.sleep(idle); idle_cpu = cpu() - c0
p.send_signal(signal.SIGTERM); p.wait(60)
json.dump(res, open(f"{out}/clients.json", "w"), indent=1)
start, end = min(r["send"] for r in res), max(r["end"] for r in res)
total = sum(r["tokens"] for r in res)
agg = total / (end - start)
ttft = statistics.median(r["first"] - r["send"] for r in res if r["first"])
per = [r["tokens"] / (r["end"] - r["send"]) for r in res]
s = json.load(open(f"{out}/batch.jsonl.summary.json"))
def find(d, key):
    if isinstance(d, dict):
        if key in d: return d[key]
        for v in d.values():
            x = find(v, key)
            if x is not None: return x
    return None
batch_tps, batch_tok = find(s, "tokens_per_second_this_run"), find(s, "tokens_this_run")
print(f"| {n} clients x {m} tokens | tokens | tokens/s |")
print("|---|---:|---:|")
print(f"| batch job (sequences auto: {find(s, 'max_in_flight')} in flight at most) | {batch_tok} | {batch_tps:.3f} |")
print(f"| serve, aggregate | {total} | {agg:.3f} |")
print()
print(f"serve / batch = {agg / batch_tps:.3f} (goal: >= 0.90); median TTFT {ttft:.2f} s; per-client tokens/s "
      f"median {statistics.median(per):.3f} (min {min(per):.3f}, max {max(per):.3f}); "
      f"idle server: {idle_cpu:.2f} CPU s over {idle:.0f} s")
PY
