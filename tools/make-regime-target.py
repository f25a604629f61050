#!/usr/bin/env python3
"""Write the regime bench's stand-in target: a benchmark stand-in, not a model.

Its function is exactly the source model's, and its pass streams gigabytes.
Every block of the source GGUF (a llama model) is copied byte for byte; N
blocks are inserted between them whose weight matrices are seeded random F16
(real bytes to read, real FLOPs to run) and whose 1-D tensors (the two RMSNorm
weights) are zero. A zero norm weight makes the block's attention and FFN
inputs exactly zero, so Q = K = V = 0, the attention output is 0, the FFN
output is 0, and each inserted block adds exactly 0 to the residual stream:
logits are bit-identical to the source model's (tests/python/test_regime_target.py).

With SmolLM2-135M (width 576) one inserted block is 7.1 MB; the reference
stand-in has 350 of them (2.5 GB), so that under a memory budget of a third of
its bytes most layers stream every pass, as Llama2-70B's do on a 48 GB L40.

    python3 tools/make-regime-target.py --from models/SmolLM2-135M-Instruct.Q4_1.gguf \
        --insert 350 --out models/regime-target.gguf

Inserted blocks are spread evenly: after original block i come
floor((i+1)N/L) - floor(iN/L) of them. Only numpy is needed.
"""
import argparse
import os
import struct
import sys

import numpy as np

# ggml type id -> (elements per block, bytes per block)
BLOCKS = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 10: (256, 84),
          11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 20: (32, 18), 23: (256, 136), 30: (1, 2)}
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q", 11: "<q", 12: "<d"}
GGML_F32, GGML_F16, GGML_BF16 = 0, 1, 30


class Reader:
    def __init__(self, f):
        self.f = f

    def get(self, fmt):
        n = struct.calcsize(fmt)
        b = self.f.read(n)
        if len(b) != n:
            raise ValueError("unexpected end of file")
        return struct.unpack(fmt, b)[0]

    def string(self):
        n = self.get("<Q")
        if n > 1 << 30:
            raise ValueError("string too long")
        return self.f.read(n).decode("utf-8", "replace")

    def skip_value(self, t):
        if t in SCALARS:
            self.get(SCALARS[t])
        elif t == 8:
            self.string()
        elif t == 9:
            et, n = self.get("<I"), self.get("<Q")
            if et in SCALARS:
                self.f.seek(n * struct.calcsize(SCALARS[et]), os.SEEK_CUR)
            else:
                for _ in range(n):
                    self.skip_value(et)
        else:
            raise ValueError(f"unknown metadata type {t}")


def parse(path):
    with open(path, "rb") as f:
        r = Reader(f)
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        version, n_tensors, n_kv = r.get("<I"), r.get("<Q"), r.get("<Q")
        if version not in (2, 3):
            raise ValueError(f"{path}: GGUF version {version} is not supported")
        kv_start = f.tell()
        kv = {}  # key -> (type, offset of the value, value for scalars/strings)
        for _ in range(n_kv):
            key = r.string()
            t = r.get("<I")
            at = f.tell()
            if t in SCALARS:
                kv[key] = (t, at, r.get(SCALARS[t]))
            elif t == 8:
                kv[key] = (t, at, r.string())
            else:
                r.skip_value(t)
                kv[key] = (t, at, None)
        kv_end = f.tell()
        tensors = []
        for _ in range(n_tensors):
            name = r.string()
            nd = r.get("<I")
            ne = [r.get("<Q") for _ in range(nd)]
            tensors.append({"name": name, "ne": ne, "type": r.get("<I"), "offset": r.get("<Q")})
        align = kv.get("general.alignment", (0, 0, 32))[2]
        data_start = (f.tell() + align - 1) // align * align
        size = os.fstat(f.fileno()).st_size
    for t in tensors:
        t["offset"] += data_start
        t["bytes"] = tensor_bytes(t["ne"], t["type"])
        if t["offset"] + t["bytes"] > size:
            raise ValueError(f"{path}: tensor {t['name']} runs past the end of the file")
    return {"kv": kv, "kv_range": (kv_start, kv_end), "n_kv": n_kv, "tensors": tensors, "align": align}


def tensor_bytes(ne, ty):
    if ty not in BLOCKS:
        raise ValueError(f"tensor type {ty} is not supported")
    per, nbytes = BLOCKS[ty]
    n = int(np.prod(ne))
    if ne[0] % per:
        raise ValueError(f"a row of {ne[0]} elements is not a whole number of blocks of type {ty}")
    return n // per * nbytes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--from", dest="src", required=True, help="source GGUF (llama architecture)")
    ap.add_argument("--insert", type=int, required=True, help="number of inserted zero-contribution blocks")
    ap.add_argument("--out", required=True, help="output GGUF")
    ap.add_argument("--seed", type=int, default=1, help="seed of the inserted matrices (default 1)")
    ap.add_argument("--type", choices=["F16", "BF16"], default="F16",
                    help="type of the inserted matrices (default F16; BF16 as in most released checkpoints, "
                         "whose exponents a packed model codes best)")
    a = ap.parse_args()
    if a.insert < 0:
        sys.exit("make-regime-target: --insert must be >= 0")
    if os.path.exists(a.out) and os.path.exists(a.src) and os.path.samefile(a.out, a.src):
        sys.exit(f"make-regime-target: --out {a.out} is the source model")
    try:
        g = parse(a.src)
    except (OSError, ValueError) as e:
        sys.exit(f"make-regime-target: {e}")
    kv = g["kv"]
    if kv.get("general.architecture", (0, 0, ""))[2] != "llama":
        sys.exit(f"make-regime-target: {a.src}: only llama GGUF models are supported")
    bc_type, bc_at, n_layers = kv["llama.block_count"]
    blocks = {}
    others = []
    for t in g["tensors"]:
        if t["name"].startswith("blk."):
            b, rest = t["name"][4:].split(".", 1)
            blocks.setdefault(int(b), []).append((rest, t))
        else:
            others.append(t)
    if sorted(blocks) != list(range(n_layers)):
        sys.exit(f"make-regime-target: {a.src}: blocks are not 0..{n_layers - 1}")
    # The inserted block's tensors: block 0's names and shapes, 2-D as F16, 1-D as F32 zeros.
    template = []
    for rest, t in blocks[0]:
        if len(t["ne"]) == 2:
            template.append((rest, t["ne"], GGML_BF16 if a.type == "BF16" else GGML_F16))
        else:
            template.append((rest, t["ne"], GGML_F32))
    plan = []  # ("orig", b) or ("new", k)
    k = 0
    for i in range(n_layers):
        plan.append(("orig", i))
        for _ in range(((i + 1) * a.insert) // n_layers - (i * a.insert) // n_layers):
            plan.append(("new", k))
            k += 1
    out_tensors = []  # (name, ne, type, source); source = ("copy", offset) | ("zero",) | ("rand", seed)
    for t in others:
        out_tensors.append((t["name"], t["ne"], t["type"], ("copy", t["offset"])))
    for new_index, (kind, idx) in enumerate(plan):
        if kind == "orig":
            for rest, t in blocks[idx]:
                out_tensors.append((f"blk.{new_index}.{rest}", t["ne"], t["type"], ("copy", t["offset"])))
        else:
            for j, (rest, ne, ty) in enumerate(template):
                src = ("rand", (a.seed, idx, j)) if ty in (GGML_F16, GGML_BF16) else ("zero",)
                out_tensors.append((f"blk.{new_index}.{rest}", ne, ty, src))

    align = g["align"]
    tmp = f"{a.out}.tmp.{os.getpid()}"
    with open(a.src, "rb") as fin, open(tmp, "wb") as out:
        kv_start, kv_end = g["kv_range"]
        fin.seek(kv_start)
        kv_raw = bytearray(fin.read(kv_end - kv_start))
        struct.pack_into(SCALARS[bc_type], kv_raw, bc_at - kv_start, len(plan))
        note = (f"benchmark stand-in: {os.path.basename(a.src)} with {a.insert} inserted zero-norm random {a.type} "
                f"blocks (seed {a.seed}); its function is the source model's").encode()
        key = b"redwood.regime_standin"
        kv_raw += struct.pack("<Q", len(key)) + key + struct.pack("<IQ", 8, len(note)) + note
        header = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(out_tensors), g["n_kv"] + 1))
        header += kv_raw
        sizes = []
        off = 0
        for name, ne, ty, src in out_tensors:
            size = tensor_bytes(ne, ty)
            nm = name.encode()
            header += struct.pack("<Q", len(nm)) + nm + struct.pack("<I", len(ne))
            header += b"".join(struct.pack("<Q", d) for d in ne)
            header += struct.pack("<IQ", ty, off)
            sizes.append(size)
            off = (off + size + align - 1) // align * align
        header += b"\0" * ((align - len(header) % align) % align)
        out.write(header)
        total = len(out_tensors)
        for i, ((name, ne, ty, src), size) in enumerate(zip(out_tensors, sizes)):
            if src[0] == "copy":
                fin.seek(src[1])
                left = size
                while left:
                    chunk = fin.read(min(left, 8 << 20))
                    if not chunk:
                        sys.exit(f"make-regime-target: {a.src}: truncated")
                    out.write(chunk)
                    left -= len(chunk)
            elif src[0] == "zero":
                out.write(b"\0" * size)
            else:
                rng = np.random.default_rng(list(src[1]))
                n = int(np.prod(ne))
                w = rng.standard_normal(n, dtype=np.float32) * np.float32(0.02)
                if ty == GGML_BF16:  # round to nearest even, as every converter does
                    u = w.view(np.uint32)
                    out.write(((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))
                              .astype(np.uint16).tobytes())
                else:
                    out.write(w.astype(np.float16).tobytes())
            out.write(b"\0" * ((align - size % align) % align))
            if (i + 1) % 64 == 0 or i + 1 == total:
                print(f"\rmake-regime-target: {i + 1}/{total} tensors", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, a.out)
    print(f"wrote {a.out}: {len(plan)} blocks ({n_layers} of {a.src} + {a.insert} inserted), "
          f"{os.path.getsize(a.out) / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
