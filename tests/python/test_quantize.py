#!/usr/bin/env python3
"""`redwood quantize` against the gguf Python package (label "model"; seconds).

    python3 tests/python/test_quantize.py --redwood build/redwood \
        --model models/SmolLM2-135M-Instruct.Q4_1.gguf --workdir build/quantize-test

Checks:
    Q8_0, Q4_0, Q4_1, Q5_0, Q5_1: every requantized tensor's bytes equal the gguf package's quantizer
        applied to the gguf package's dequantization of the source (an implementation we did not write);
        1-D tensors are copied unchanged; metadata other than the name and file type is kept.
    Q3_K: every 256-multiple matrix is Q3_K, the others Q4_0; the gguf package's dequantization of the
        result is within 30% relative RMS error of the source per tensor (3-bit), and better than a
        control that keeps only each sub-block's sign times its mean magnitude.
    bad input: --out equal to --from is refused; a missing source is one line, exit 1.
Prints "N passed, M failed" and exits non-zero on any failure.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize, quantize

from harness import check, summary as finish


def tensors(path):
    r = gguf.GGUFReader(path)
    return r, {t.name: t for t in r.tensors}


def as_float(t):
    return dequantize(np.asarray(t.data), t.tensor_type).reshape(-1).astype(np.float32)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--redwood", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    _, src = tensors(args.model)
    src_float = {n: as_float(t) for n, t in src.items()}

    for name, qt in [("Q8_0", Q.Q8_0), ("Q4_0", Q.Q4_0), ("Q4_1", Q.Q4_1), ("Q5_0", Q.Q5_0), ("Q5_1", Q.Q5_1)]:
        out = os.path.join(args.workdir, f"m-{name}.gguf")
        p = subprocess.run([args.redwood, "quantize", "--from", args.model, "--type", name, "--out", out],
                           capture_output=True, text=True, timeout=600)
        check(f"quantize {name}", p.returncode == 0, p.stderr)
        if p.returncode != 0:
            continue
        r, got = tensors(out)
        bad = []
        for n, t in src.items():
            g = got[n]
            if len(t.shape) == 1 or t.tensor_type == qt:
                if g.tensor_type != t.tensor_type or not np.array_equal(np.asarray(g.data), np.asarray(t.data)):
                    bad.append(n + " (copied)")
                continue
            want = quantize(src_float[n].reshape(int(t.shape[1]), int(t.shape[0])), qt)
            if g.tensor_type != qt or np.asarray(g.data).tobytes() != want.tobytes():
                bad.append(n)
        check(f"{name}: bytes equal the gguf package's quantizer", not bad, f"{len(bad)} differ: {bad[:4]}")
        check(f"{name}: metadata kept", int(r.fields["llama.block_count"].parts[-1][0]) == 30
              and "requantized" in bytes(r.fields["general.name"].parts[-1]).decode())

    out = os.path.join(args.workdir, "m-Q3_K.gguf")
    p = subprocess.run([args.redwood, "quantize", "--from", args.model, "--type", "Q3_K", "--out", out],
                       capture_output=True, text=True, timeout=600)
    check("quantize Q3_K", p.returncode == 0, p.stderr)
    if p.returncode == 0:
        _, got = tensors(out)
        types_ok, worst, control_beaten = True, 0.0, True
        for n, t in src.items():
            if len(t.shape) == 1:
                continue
            g = got[n]
            want_type = Q.Q3_K if int(t.shape[0]) % 256 == 0 else Q.Q4_0
            types_ok &= g.tensor_type == want_type
            x = src_float[n]
            y = as_float(g)
            rel = float(np.sqrt(np.mean((x - y) ** 2) / max(np.mean(x * x), 1e-30)))
            worst = max(worst, rel)
            if want_type == Q.Q3_K:
                sub = x.reshape(-1, 16)
                ctl = (np.sign(sub) * np.abs(sub).mean(axis=1, keepdims=True)).reshape(-1)
                control_beaten &= rel < float(np.sqrt(np.mean((x - ctl) ** 2) / np.mean(x * x)))
        check("Q3_K: 256-multiple matrices Q3_K, the others Q4_0", types_ok)
        check("Q3_K: relative RMS error <= 0.30 per tensor", worst <= 0.30, f"worst {worst:.3f}")
        check("Q3_K: beats a sign x mean-magnitude control", control_beaten)

    before = os.path.getsize(args.model)
    p = subprocess.run([args.redwood, "quantize", "--from", args.model, "--type", "Q4_0", "--out",
                        os.path.join(os.path.dirname(args.model), ".", os.path.basename(args.model))],
                       capture_output=True, text=True, timeout=600)
    check("--out naming the source model is refused, the source intact", p.returncode == 1
          and os.path.getsize(args.model) == before and len(p.stderr.strip().splitlines()) == 1, p.stderr)
    p = subprocess.run([args.redwood, "quantize", "--from", os.path.join(args.workdir, "missing.gguf"), "--type",
                        "Q4_0", "--out", os.path.join(args.workdir, "y.gguf")], capture_output=True, text=True)
    check("missing source: one line, exit 1", p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1, p.stderr)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
