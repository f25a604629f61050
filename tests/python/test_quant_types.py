#!/usr/bin/env python3
"""The block types without a dedicated dot kernel (Q5_0, Q5_1, Q2_K ... Q6_K,
IQ4_NL, IQ4_XS)
end to end against the numpy/gguf oracle.

    python3 tests/python/test_quant_types.py --redwood build/redwood --workdir DIR

For each type a small random Llama (2 layers, dim 256: K types need rows of
256-element super-blocks) is written by tools/make-synthetic-gguf.py, plus one
mixed like llama.cpp's Q4_K_M (Q4_K blocks, Q6_K LM head, Q5_0 embedding),
and two with scaled RoPE (Llama 3.1's rope_freqs tensor; linear scaling).
tests/python/test_oracles.py then checks redwood's logits (1-, 5-, 17- and
40-token passes: the decode, small-batch and batched kernels) against the
gguf package's own dequantizers, and greedy continuations.
Plain script; exits non-zero on any failure.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

MODELS = [
    ("Q5_0", []), ("Q5_1", []), ("Q2_K", []), ("Q3_K", []), ("Q4_K", []), ("Q5_K", []), ("Q6_K", []),
    ("Q4_K", ["--output-type", "Q6_K", "--embd-type", "Q5_0"]),
    ("IQ4_NL", []), ("IQ4_XS", []),
    ("IQ4_XS", ["--output-type", "Q6_K", "--embd-type", "IQ4_NL"]),
    # Scaled RoPE: Llama 3.1's rope_freqs tensor (original context 64 so that
    # it bites at short positions), and rope.scaling.type linear.
    ("F16", ["--rope-base", "500000", "--rope-llama3", "8,1,4,64"]),
    ("Q8_0", ["--rope-linear", "4"]),
]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--redwood", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    failed = 0
    for i, (t, extra) in enumerate(MODELS):
        path = os.path.join(a.workdir, f"quant-{i}-{t}.gguf")
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make-synthetic-gguf.py"), "--out", path,
                        "--layers", "2", "--dim", "256", "--heads", "4", "--kv-heads", "2", "--ffn", "512",
                        "--vocab", "512", "--type", t, "--seed", str(i + 1), *extra],
                       check=True, stdout=subprocess.DEVNULL)
        for only, more in (("logits", []), ("greedy", ["--greedy-n", "32"])):
            r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "python", "test_oracles.py"),
                                "--redwood", a.redwood, "--model", path, "--only", only, *more],
                               capture_output=True, text=True)
            last = (r.stdout.strip().splitlines() or ["(no output)"])[-1]
            name = f"{t}{' ' + ' '.join(extra) if extra else ''} {only}"
            if r.returncode == 0:
                print(f"PASS {name}: {last}", flush=True)
            else:
                failed += 1
                print(f"FAIL {name}:\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}", flush=True)
        os.remove(path)
    print(f"{2 * len(MODELS) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
