#!/usr/bin/env python3
"""How many bytes lossless exponent coding could save on a model's weights (issue 33's bench).

    python3 bench/weight_entropy.py MODEL.gguf [--as F16|BF16] [--max-tensors N] [--json OUT]

For every matrix (2-D tensor) it splits each 16-bit value into its exponent field (F16: 5
bits, BF16: 8 bits) and the rest (sign + mantissa, kept raw), and reports, per stored type:

  * H(exp): the exponent field's Shannon entropy in bits (the bound of any per-symbol code);
  * huff:   the bits of a Huffman code built for that tensor's exponent histogram (what a
            DFloat11-style table decoder stores), plus a 256-entry code-length table;
  * ratio:  coded bytes / raw bytes with the Huffman code (sign + mantissa raw).

Quantized tensors (Q4_1, Q8_0, ...) are dequantized with the gguf package and measured as
--as (default BF16: the issue's target type; a real model's value statistics in that type).
F16/BF16 tensors are measured as stored. Python and numpy only: a measurement, not the codec.
"""
from __future__ import annotations

import argparse
import heapq
import json
import sys

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType as Q
    from gguf.quants import dequantize
except ImportError:  # pragma: no cover
    sys.exit("weight_entropy: needs the gguf Python package (tools/setup.sh installs it)")


def huffman_bits(counts: np.ndarray) -> int:
    """Total bits of a Huffman code for a histogram (0 or 1 symbol: 1 bit a symbol)."""
    c = [int(x) for x in counts if x > 0]
    if len(c) <= 1:
        return int(sum(c))
    heap = [(x, i, 0) for i, x in enumerate(c)]  # (weight, tiebreak, bits so far of the subtree)
    heapq.heapify(heap)
    total, k = 0, len(c)
    while len(heap) > 1:
        w1, _, _ = heapq.heappop(heap)
        w2, _, _ = heapq.heappop(heap)
        total += w1 + w2  # every symbol under the merged node gets one more bit
        heapq.heappush(heap, (w1 + w2, k, 0))
        k += 1
    return total


def split(bits: np.ndarray, kind: str) -> np.ndarray:
    if kind == "F16":
        return ((bits >> 10) & 0x1F).astype(np.int64)
    return ((bits >> 7) & 0xFF).astype(np.int64)


def as_bits(values: np.ndarray, kind: str) -> np.ndarray:
    if kind == "F16":
        return values.astype(np.float16).view(np.uint16)
    f = values.astype(np.float32).view(np.uint32)
    return ((f + 0x7FFF + ((f >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--as", dest="as_type", choices=["F16", "BF16"], default="BF16",
                    help="type quantized tensors are dequantized to (default BF16)")
    ap.add_argument("--max-tensors", type=int, default=0, help="measure at most N matrices per stored type")
    ap.add_argument("--json", help="write the per-type table as JSON")
    a = ap.parse_args()
    r = gguf.GGUFReader(a.model)
    per: dict[str, dict[str, float]] = {}
    for t in r.tensors:
        if len(t.shape) != 2:
            continue
        stored = t.tensor_type.name
        if t.tensor_type in (Q.F16, Q.BF16):
            kind = "F16" if t.tensor_type == Q.F16 else "BF16"
            bits = np.asarray(t.data).view(np.uint16).ravel()
            key = stored
        elif t.tensor_type == Q.F32:
            kind = a.as_type
            bits = as_bits(np.asarray(t.data).ravel(), kind)
            key = f"F32 as {kind}"
        else:
            kind = a.as_type
            bits = as_bits(dequantize(t.data, t.tensor_type).ravel(), kind)
            key = f"{stored} as {kind}"
        s = per.setdefault(key, {"tensors": 0, "values": 0, "raw_bits": 0, "huff_bits": 0, "ent_bits": 0.0,
                                 "exp_bits": 5 if kind == "F16" else 8})
        if a.max_tensors and s["tensors"] >= a.max_tensors:
            continue
        e = split(bits, kind)
        hist = np.bincount(e, minlength=256 if kind == "BF16" else 32)
        p = hist[hist > 0] / e.size
        n = int(e.size)
        s["tensors"] += 1
        s["values"] += n
        s["raw_bits"] += 16 * n
        s["ent_bits"] += float(-(p * np.log2(p)).sum()) * n
        # Huffman exponents + raw sign/mantissa + a code-length table (1 byte a symbol).
        s["huff_bits"] += huffman_bits(hist) + (16 - s["exp_bits"]) * n + 8 * hist.size
    print(f"{a.model}")
    print(f"{'stored (measured as)':<22} {'tensors':>7} {'values':>12} {'H(exp)':>7} {'huff':>6} {'ratio':>6} {'saved':>6}")
    for key, s in per.items():
        n = s["values"]
        ratio = s["huff_bits"] / s["raw_bits"]
        print(f"{key:<22} {s['tensors']:>7} {n:>12} {s['ent_bits'] / n:>7.3f} "
              f"{(s['huff_bits'] - (16 - s['exp_bits']) * n) / n:>6.3f} {ratio:>6.3f} {1 - ratio:>6.1%}")
        s["ratio"] = ratio
    if a.json:
        with open(a.json, "w") as f:
            json.dump(per, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
