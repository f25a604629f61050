#!/usr/bin/env python3
"""Every model family Redwood runs, end to end against the numpy/gguf oracle
(tools/oracle/gguf_llama_ref.py: llama, qwen2 biases, qwen3 per-head q/k norms,
NEOX RoPE), on every CI run; llama.cpp as the oracle is
tests/python/test_llamacpp_oracle.py (needs a llama.cpp build).

    python3 tests/python/test_families.py --redwood build/redwood --workdir DIR

For each family and type (F32, F16) tools/make-family-checkpoint writes a
small random checkpoint; tests/python/test_oracles.py then checks redwood's
logits (1-, 5-, 17- and 40-token passes) and greedy continuations, resident and
streamed (--device-mem small enough that layers stream through the ring).
Plain script; exits non-zero on any failure.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from harness import streamed_budget

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FAMILIES = ["llama", "qwen2", "qwen3"]
TYPES = ["F32", "F16"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--redwood", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    failed = passed = 0
    for i, fam in enumerate(FAMILIES):
        for t in TYPES:
            path = os.path.join(a.workdir, f"{fam}-{t.lower()}.gguf")
            subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make-family-checkpoint"), "--family", fam,
                            "--type", t, "--out", path, "--seed", str(i + 1)], check=True, stdout=subprocess.DEVNULL)
            info = subprocess.run([a.redwood, "info", path, "--json"], capture_output=True, text=True)
            ok = info.returncode == 0 and json.loads(info.stdout)["architecture"] == fam
            print(f"{'PASS' if ok else 'FAIL'} {fam} {t} info: {info.stdout[:0] or info.stderr.strip()}", flush=True)
            passed, failed = passed + ok, failed + (not ok)
            runs = [("resident", [])]
            budget = streamed_budget(a.redwood, path)
            if budget is None:
                failed += 1
                print(f"FAIL {fam} {t}: no --device-mem budget streams its layers", flush=True)
            else:
                runs.append((f"streamed {budget}", [f"--redwood-arg=--device-mem", f"--redwood-arg={budget}"]))
            for label, extra in runs:
                for only, more in (("logits", []), ("greedy", ["--greedy-n", "24"])):
                    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "python", "test_oracles.py"),
                                        "--redwood", a.redwood, "--model", path, "--only", only, *more, *extra],
                                       capture_output=True, text=True)
                    last = (r.stdout.strip().splitlines() or ["(no output)"])[-1]
                    name = f"{fam} {t} {label} {only}"
                    if r.returncode == 0:
                        passed += 1
                        print(f"PASS {name}: {last}", flush=True)
                    else:
                        failed += 1
                        print(f"FAIL {name}:\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}", flush=True)
            os.remove(path)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
