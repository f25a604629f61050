#!/usr/bin/env python3
"""The regime bench's stand-in target (tools/make-regime-target.py) computes the
source model's function exactly, and `redwood quantize` writes drafts that load
(label "model"; about a minute).

    python3 tests/python/test_regime_target.py --redwood build/redwood \
        --model models/SmolLM2-135M-Instruct.Q4_1.gguf --workdir build/regime-test

Checks:
    stand-in (20 inserted blocks): logits bit-identical to the source model's, resident and streamed
        (--device-mem: most layers from storage); greedy speculative output (the source model as the
        perfect draft, and a Q4_0 requantized draft; chain and Sequoia trees) token-identical to plain.
    negative control: one inserted norm weight set to 1.0 -> the logits differ (the test can fail).
    quantize: Q4_0/Q3_K drafts load and generate; a bad --type is a one-line error.
Prints "N passed, M failed" and exits non-zero on any failure.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

from harness import check, summary as finish

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKENS = "1,9690,30,1115,614,253,1345,28,2714,339,3271,3513,30"


def run(args, cmd, timeout=600):
    return subprocess.run([args.redwood] + cmd, capture_output=True, text=True, timeout=timeout)


def logits(args, model, out, extra=()):
    p = run(args, ["logits", "--model", model, "--tokens", TOKENS, "--out", out, *extra])
    if p.returncode != 0:
        print(p.stderr, file=sys.stderr)
        return None
    return np.load(out)


def same_bits(a, b):
    return a is not None and b is not None and a.shape == b.shape and np.array_equal(a.view(np.uint32),
                                                                                        b.view(np.uint32))


def greedy(args, model, extra=()):
    p = run(args, ["generate", "--model", model, "--chat", "--prompt", "Name three prime numbers.",
                   "--max-tokens", "24", "--temperature", "0", "--json", *extra])
    if p.returncode != 0:
        print(p.stderr, file=sys.stderr)
        return None, {}
    j = json.loads(p.stdout)
    return j.get("tokens"), j


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--redwood", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    w = args.workdir
    target = os.path.join(w, "standin-20.gguf")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make-regime-target.py"), "--from", args.model,
                        "--insert", "20", "--out", target], capture_output=True, text=True, timeout=600)
    check("make-regime-target", p.returncode == 0 and os.path.exists(target), p.stderr[-500:])
    if p.returncode != 0:
        return finish()
    info = run(args, ["info", target, "--json"])
    n_layers = json.loads(info.stdout).get("layers") if info.returncode == 0 else None
    check("stand-in has 50 blocks", n_layers == 50, info.stdout[:300] + info.stderr)

    ref = logits(args, args.model, os.path.join(w, "ref.npy"))
    res = logits(args, target, os.path.join(w, "resident.npy"))
    stm = logits(args, target, os.path.join(w, "streamed.npy"), ["--device-mem", "64MiB"])
    check("logits resident == source model (bit for bit)", same_bits(ref, res))
    check("logits streamed == source model (bit for bit)", same_bits(ref, stm))

    # Negative control: a nonzero norm weight in an inserted block changes the function.
    bad = os.path.join(w, "standin-bad.gguf")
    shutil.copyfile(target, bad)
    import gguf  # the gguf package locates the tensor; the patch is one float
    r = gguf.GGUFReader(bad)
    t = next(t for t in r.tensors if t.name == "blk.1.attn_norm.weight")  # block 1 is an inserted one
    off = int(t.data_offset)
    del r
    with open(bad, "r+b") as f:
        f.seek(off)
        f.write(struct.pack("<f", 1.0))
    neg = logits(args, bad, os.path.join(w, "bad.npy"))
    check("negative control: a nonzero inserted norm changes the logits", neg is not None and not same_bits(ref, neg))

    # Drafts: requantized copies of the source model.
    q40 = os.path.join(w, "draft-q4_0.gguf")
    p = run(args, ["quantize", "--from", args.model, "--type", "Q4_0", "--out", q40])
    check("quantize Q4_0", p.returncode == 0 and "wrote" in p.stdout, p.stderr)
    q3k = os.path.join(w, "draft-q3_k.gguf")
    p = run(args, ["quantize", "--from", args.model, "--type", "Q3_K", "--out", q3k])
    check("quantize Q3_K (Q4_0 where rows are not a multiple of 256)", p.returncode == 0 and "as Q4_0" in p.stdout
          and os.path.getsize(q3k) < os.path.getsize(q40), p.stdout + p.stderr)
    p = run(args, ["quantize", "--from", args.model, "--type", "Q7_X", "--out", os.path.join(w, "x.gguf")])
    check("quantize bad type: one line, exit 1", p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1
          and not os.path.exists(os.path.join(w, "x.gguf")), p.stderr)

    plain, _ = greedy(args, target)
    check("plain greedy on the stand-in", plain is not None and len(plain) > 0)
    src_plain, _ = greedy(args, args.model)
    check("stand-in greedy == source model greedy", plain == src_plain, f"{plain} vs {src_plain}")
    for draft, tree in [(args.model, "chain:4"), (q40, "chain:6"), (q3k, "sequoia")]:
        extra = ["--draft", draft, "--tree", tree] + (["--budget", "16", "--depth", "6"] if tree == "sequoia" else [])
        toks, j = greedy(args, target, extra)
        check(f"speculative {os.path.basename(draft)} {tree} == plain", toks == plain, f"{toks} vs {plain}")
        toks, j = greedy(args, target, extra + ["--device-mem", "160MiB+draft"])
        check(f"streamed speculative {os.path.basename(draft)} {tree} == plain", toks == plain, f"{toks} vs {plain}")
        if draft == args.model and tree == "chain:4":
            check("perfect draft accepts every token", j.get("mean_accepted", 0) >= 4.99, str(j.get("mean_accepted")))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
