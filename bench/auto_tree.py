#!/usr/bin/env python3
"""Does `--tree auto` choose well? (issue 6's check, on this machine)

    python3 bench/auto_tree.py [--redwood build/redwood] [--device-mem 80MiB+draft] [--temperature 0]

1. `generate --tree auto` (profiles measured into a fresh cache first) on a few prompts:
   its choice, its predicted s/token, and the measured s/token of that choice.
2. A brute-force sweep over (policy, parameters): plain decoding, chains, Sequoia trees on a
   grid of budgets and depths, DySpec (heap budgets and layer-wise thresholds), OPT-Tree,
   SpecExec and k-ary trees, each measured the same way.
3. Prints both: |predicted - measured| / measured for the chosen configuration (goal
   <= 15%), and best measured s/token / chosen measured s/token (goal >= 0.95).

Every configuration runs the same prompts with the same settings; s/token is the total
decode time over the total tokens. One run; this VM is noisy, so the sweep runs each
configuration twice and keeps the faster.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS = [
    "Explain in two sentences why the sky is blue.",
    "Write a short poem about a lighthouse.",
    "List three uses of copper.",
]


def run(rw: str, args: list[str], env: dict) -> tuple[float, int, str]:
    """Runs generate on every prompt; returns (s/token, tokens, stderr of the first)."""
    secs, toks, first_err = 0.0, 0, ""
    for i, p in enumerate(PROMPTS):
        r = subprocess.run([rw, "generate", "--prompt", p, "--chat", "--json"] + args, capture_output=True, text=True,
                           env=env, timeout=900)
        if r.returncode != 0:
            raise SystemExit(f"failed: {' '.join(args)}\n{r.stderr}")
        if i == 0:
            first_err = r.stderr
        j = json.loads(r.stdout)
        secs += j["seconds"]
        toks += j["n_tokens"]
    return (secs / toks if toks else float("inf")), toks, first_err


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--redwood", default=os.path.join(ROOT, "build", "redwood"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--draft", default=os.path.join(ROOT, "models", "smollm2-draft-10L.gguf"))
    ap.add_argument("--device-mem", default="80MiB+draft")
    ap.add_argument("--temperature", default="0")
    ap.add_argument("--max-tokens", default="32")
    ap.add_argument("--budget", type=int, default=32, help="cap for --tree auto and the sweep")
    ap.add_argument("--depth", type=int, default=8)
    a = ap.parse_args()
    env = dict(os.environ, REDWOOD_CACHE_DIR=tempfile.mkdtemp(prefix="redwood_auto_cache_"))
    common = ["--model", a.model, "--device-mem", a.device_mem, "--temperature", a.temperature,
              "--max-tokens", a.max_tokens, "--seed", "1"]
    spec = common + ["--draft", a.draft]

    # 1. auto (the first call measures the profiles; time it again once they are cached)
    run(a.redwood, spec + ["--tree", "auto", "--budget", str(a.budget), "--depth", str(a.depth)], env)
    auto_spt, _, err = run(a.redwood, spec + ["--tree", "auto", "--budget", str(a.budget), "--depth", str(a.depth)], env)
    m = re.search(r"--tree auto: (sequoia|dyspec|opt-tree|specexec) ([^,]*), verify (\S+): predicted ([\d.]+) "
                  r"tokens/pass, ([\d.]+) s/token", err)
    if m:
        if m.group(1) == "sequoia":
            nd = re.match(r"budget (\d+) depth (\d+)", m.group(2))
            choice = f"sequoia n={nd.group(1)} d={nd.group(2)}"
        else:
            choice = f"{m.group(1)} {m.group(2)}"
        choice += "" if m.group(3) in ("greedy", "sequoia", "target-sample") else f" {m.group(3)}"
        predicted = float(m.group(5))
    else:
        m = re.search(r"plain decoding is predicted fastest here \(([\d.]+) s/token", err)
        if not m:
            raise SystemExit("could not read the auto choice from:\n" + err)
        choice, predicted = "autoregressive", float(m.group(1))
    for line in err.splitlines():
        if "predicted s/token:" in line:
            print(line)
    print(f"auto chose: {choice}; predicted {predicted:.4f} s/token, measured {auto_spt:.4f}")

    # 2. the sweep
    configs: list[tuple[str, list[str]]] = [("autoregressive", common)]
    for k in (1, 2, 4):
        configs.append((f"chain:{k}", spec + ["--tree", f"chain:{k}"]))
    for n in (4, 8, 16, 32):
        if n > a.budget:
            continue
        for d in (2, 3, 4, 6):
            if d <= a.depth:
                configs.append((f"sequoia n={n} d={d}", spec + ["--tree", "sequoia", "--budget", str(n), "--depth", str(d)]))
        configs.append((f"dyspec n={n}", spec + ["--tree", "dyspec", "--budget", str(n), "--depth", str(a.depth)]))
    configs.append(("kary:2x2", spec + ["--tree", "kary:2x2"]))
    # Dynamic policies with parameters from --tree auto's grid (a few: the sweep is timed).
    cap = ["--budget", str(a.budget), "--depth", str(a.depth)]
    for t in ("0.5", "0.3", "0.1"):
        configs.append((f"dyspec threshold {t} budget {a.budget} depth {a.depth}",
                        spec + ["--tree", "dyspec", "--threshold", t] + cap))
    configs.append((f"opt-tree budget 8 depth {a.depth} delta 1", spec + ["--tree", "opt-tree", "--budget", "8", "--depth",
                                                                           str(a.depth), "--delta", "1"]))
    configs.append((f"specexec budget 8 depth {a.depth} width 4", spec + ["--tree", "specexec", "--budget", "8", "--depth",
                                                                           str(a.depth), "--width", "4"]))
    results = []
    for name, args in configs:
        spt = min(run(a.redwood, args, env)[0] for _ in range(2))
        results.append((spt, name))
        print(f"  {name:24s} {spt:.4f} s/token", flush=True)
    results.sort()
    best_spt, best_name = results[0]
    chosen_spt = min(auto_spt, dict((n, s) for s, n in results).get(choice, auto_spt))
    print()
    print("| | configuration | s/token |")
    print("|---|---|---|")
    print(f"| chosen by --tree auto (predicted) | {choice} | {predicted:.4f} |")
    print(f"| chosen by --tree auto (measured) | {choice} | {auto_spt:.4f} |")
    print(f"| best of the sweep ({len(results)} configurations) | {best_name} | {best_spt:.4f} |")
    print()
    print(f"prediction error |predicted - measured| / measured = {abs(predicted - auto_spt) / auto_spt:.3f} (goal <= 0.15)")
    print(f"best / chosen = {best_spt / chosen_spt:.3f} (goal >= 0.95)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
