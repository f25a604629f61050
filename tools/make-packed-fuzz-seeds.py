#!/usr/bin/env python3
"""Writes the fuzzing seeds for packed models and chunks (tests/fuzz/corpus/packed,
tests/fuzz/corpus/wpack): the valid tiny GGUF packed by `redwood pack`, and
each of its chunks in fuzz_wpack's input layout (tests/fuzz/fuzz_harness.h,
run_wpack): byte 0 = mode | width selector << 1, bytes 1..4 = element count,
then the chunk. Plus raw-element seeds for the round-trip mode (F16-like,
BF16-like and F32-like values, seeded).

    python3 tools/make-packed-fuzz-seeds.py --redwood build/redwood [--out tests/fuzz/corpus]
"""
import argparse
import os
import struct
import subprocess
import tempfile

import numpy as np

WIDTH_SEL = {1: 0, 2: 1, 4: 2}


def wpack_input(mode, width, n, body):
    return bytes([mode | (WIDTH_SEL[width] << 1)]) + struct.pack("<I", n) + body


def chunks_of(path):
    """(width, n, chunk bytes) of every chunk in a packed file (layout: src/model/packed.h)."""
    data = open(path, "rb").read()
    magic, meta_off, meta_bytes, index_off, index_count = struct.unpack_from("<8sQQQQ", data, 0)
    assert magic == b"RWPACK1\0", magic
    for i in range(index_count):
        off, stored, raw, _ = struct.unpack_from("<QQQQ", data, index_off + 32 * i)
        smagic, n_chunks, raw_bytes, width = struct.unpack_from("<4sIQI", data, off)
        assert smagic == b"RWS1"
        for c in range(n_chunks):
            c_off, c_stored, c_n = struct.unpack_from("<QII", data, off + 32 + 24 * c)
            yield width, c_n, data[off + c_off: off + c_off + c_stored]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--redwood", required=True)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fuzz", "corpus"))
    a = ap.parse_args()
    packed_dir, wpack_dir = os.path.join(a.out, "packed"), os.path.join(a.out, "wpack")
    os.makedirs(packed_dir, exist_ok=True)
    os.makedirs(wpack_dir, exist_ok=True)
    src = os.path.join(a.out, "gguf", "valid_tiny.gguf")
    dst = os.path.join(packed_dir, "valid_tiny.rwpk")
    subprocess.run([a.redwood, "pack", "--from", src, "--out", dst], check=True, stdout=subprocess.DEVNULL)
    seen = set()
    for width, n, chunk in chunks_of(dst):
        key = (width, n, chunk[0])
        if key in seen:
            continue
        seen.add(key)
        name = "valid_chunk_w%d_n%d_codec%d" % (width, n, chunk[0])
        open(os.path.join(wpack_dir, name), "wb").write(wpack_input(0, width, n, chunk))
    rng = np.random.default_rng(33)
    raw = {
        "f16": (2, rng.normal(0, 0.02, 700).astype(np.float16).tobytes()),
        "bf16": (2, (rng.normal(0, 0.02, 700).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()),
        "f32": (4, rng.normal(0, 0.02, 300).astype(np.float32).tobytes()),
    }
    for name, (width, body) in raw.items():
        open(os.path.join(wpack_dir, "valid_roundtrip_" + name), "wb").write(
            wpack_input(1, width, len(body) // width, body))


if __name__ == "__main__":
    main()
