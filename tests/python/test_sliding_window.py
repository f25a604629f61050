#!/usr/bin/env python3
"""Sliding-window attention (Mistral 7B v0.1, GGUF {arch}.attention.sliding_window)
end to end against the numpy/gguf oracle (tools/oracle/gguf_llama_ref.py, which
masks by llama.cpp's convention: query position p does not see key position k
when p - k >= window).

    python3 tests/python/test_sliding_window.py --redwood build/redwood --workdir DIR

Small random Llamas with short windows (8 and 5 positions), written by
tools/make-synthetic-gguf.py: head size 64 (the CPU's vector attention path)
and 12 (its generic path), and one with the window on its second layer only
(attention.sliding_window_pattern; the window on every layer is then a
negative control too). tests/python/test_oracles.py checks redwood's logits
(1-, 5-, 17- and 40-token passes: positions well past the window) and greedy
continuations (prompts of up to 24 tokens and 48 generated). Negative control:
the oracle with the window ignored (full attention) must disagree with redwood
on the 40-token prompt by far more than the tolerance, so the check above can
fail. And `redwood logits --positions` (0, 2, 4, ...) over more tokens than one
logits pass, against the oracle at those positions. Plain script; exits non-zero
on any failure.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "oracle"))

import gguf_llama_ref as ref  # noqa: E402

TOL = 1e-3  # test_oracles.py's default per-row relative tolerance
MODELS = [
    ("window 8, head 64", ["--dim", "256", "--heads", "4", "--kv-heads", "2", "--sliding-window", "8"]),
    ("window 5, head 12", ["--dim", "96", "--heads", "8", "--kv-heads", "2", "--sliding-window", "5"]),
    # The window on the second layer only (attention.sliding_window_pattern, which the oracle reads too).
    ("window 5 on layer 1, head 64", ["--dim", "256", "--heads", "4", "--kv-heads", "2", "--sliding-window", "5",
                                      "--sliding-window-pattern", "0,1"]),
]


def worst_row_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(max(np.linalg.norm(g - w) / max(np.linalg.norm(w), 1e-30) for g, w in zip(got, want)))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--redwood", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    failed = passed = 0
    for i, (label, shape) in enumerate(MODELS):
        path = os.path.join(a.workdir, f"swa-{i}.gguf")
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make-synthetic-gguf.py"), "--out", path,
                        "--layers", "2", "--ffn", "256", "--vocab", "512", "--type", "F32", "--seed", str(i + 11),
                        *shape], check=True, stdout=subprocess.DEVNULL)
        for only, more in (("logits", []), ("greedy", ["--greedy-n", "48"])):
            r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "python", "test_oracles.py"),
                                "--redwood", a.redwood, "--model", path, "--only", only, "--logits-tol", str(TOL),
                                *more], capture_output=True, text=True)
            last = (r.stdout.strip().splitlines() or ["(no output)"])[-1]
            name = f"{label} {only}"
            if r.returncode == 0:
                passed += 1
                print(f"PASS {name}: {last}", flush=True)
            else:
                failed += 1
                print(f"FAIL {name}:\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}", flush=True)
        # Negative control: full attention is not what redwood computes past the window.
        rng = np.random.default_rng(7)
        ids = [int(x) for x in rng.integers(3, 512, size=40)]
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "logits.npy")
            r = subprocess.run([a.redwood, "logits", "--model", path, "--tokens", ",".join(map(str, ids)),
                                "--out", out], capture_output=True, text=True)
            if r.returncode != 0:
                failed += 1
                print(f"FAIL {label} negative control: redwood logits: {r.stderr.strip()}", flush=True)
                continue
            got = np.load(out)
        windowed = worst_row_err(got, ref.logits(ref.load_model(path), ids))
        full = worst_row_err(got, ref.logits(ref.load_model(path, ignore_window=True), ids))
        # With a pattern, also the window on every layer must disagree.
        every = worst_row_err(got, ref.logits(ref.load_model(path, window_layers=[True, True]), ids)) \
            if "--sliding-window-pattern" in shape else float("inf")
        name = f"{label} negative control"
        if windowed < TOL and full > 10 * TOL and every > 10 * TOL:
            passed += 1
            print(f"PASS {name}: rel err {windowed:.1e} against the window, {full:.1e} against full attention"
                  + (f", {every:.1e} against the window on every layer" if every != float("inf") else ""),
                  flush=True)
        else:
            failed += 1
            print(f"FAIL {name}: rel err {windowed:.1e} against the window, {full:.1e} against full attention, "
                  f"{every:.1e} against it on every layer (want < {TOL:g} and > {10 * TOL:g})", flush=True)
        # Positions of the caller's (--positions), more tokens than one logits pass (256): every
        # row is masked by its own position (2 i here), the rows of the earlier pass too.
        ids = [int(x) for x in rng.integers(3, 512, size=300)]
        positions = [2 * j for j in range(len(ids))]
        name = f"{label} positions 0, 2, 4, ... over 300 tokens"
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "logits.npy")
            r = subprocess.run([a.redwood, "logits", "--model", path, "--tokens", ",".join(map(str, ids)),
                                "--positions", ",".join(map(str, positions)), "--out", out],
                               capture_output=True, text=True)
            got = np.load(out) if r.returncode == 0 else None
        if got is None:
            failed += 1
            print(f"FAIL {name}: redwood logits: {r.stderr.strip()}", flush=True)
        else:
            err = worst_row_err(got, ref.logits(ref.load_model(path), ids, positions))
            if err < TOL:
                passed += 1
                print(f"PASS {name}: rel err {err:.1e}", flush=True)
            else:
                failed += 1
                print(f"FAIL {name}: rel err {err:.1e} (want < {TOL:g})", flush=True)
        os.remove(path)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
