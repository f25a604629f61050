#!/usr/bin/env python3
"""llama.cpp as the oracle for every model family Redwood runs: its own
architecture code (src/models/llama.cpp, qwen2.cpp, qwen3.cpp) on the same
random checkpoints (tools/make-family-checkpoint), F32 and F16.

    python3 tests/python/test_llamacpp_oracle.py --redwood build/redwood --workdir DIR \
        [--llamacpp build/llamacpp/src]

Needs a llama.cpp build (libllama): bench/llamacpp_reference.sh's download of
the llama-cpp-python sdist, built with `cmake --build build/llamacpp/src/build
--target llama`. Without one it prints why and exits 77 (CTest: skipped).
tools/llamacpp-logits.c is compiled here against it (F32 KV cache, no flash
attention, CPU).

Checks, per family and type:
  - logits of one causal pass over a 24-token prompt (all rows): resident, and
    streamed (--device-mem small enough that layers stream), each row
    ||redwood - llama.cpp|| / ||llama.cpp|| under the tolerance (F32 weights:
    fp32 accuracy; F16 weights: llama.cpp's CPU matmul rounds the activations
    to F16, so a looser bound);
  - greedy continuations (24 tokens) identical: plain, streamed, and
    speculative with a same-family draft (another seed, same vocabulary).
Prints each measured worst row error. Exits non-zero on any failure.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np
from harness import streamed_budget

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FAMILIES = ["llama", "qwen2", "qwen3"]
TOL = {"F32": 1e-4, "F16": 5e-3}
PROMPT = [1, 300, 301, 302, 45, 67, 89, 101, 203, 305, 407, 509, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53]
GREEDY_N = 24
SKIP = 77


def build_oracle(llamacpp: str, workdir: str) -> str:
    lib_dir = os.path.join(llamacpp, "build", "bin")
    if not os.path.exists(os.path.join(lib_dir, "libllama.so")):
        print(f"SKIP: no llama.cpp build ({lib_dir}/libllama.so missing): fetch and unpack the sdist as "
              f"bench/llamacpp_reference.sh does, then cmake --build {llamacpp}/build --target llama")
        sys.exit(SKIP)
    exe = os.path.join(workdir, "llamacpp-logits")
    subprocess.run(["cc", "-O2", "-o", exe, os.path.join(ROOT, "tools", "llamacpp-logits.c"),
                    "-I", os.path.join(llamacpp, "include"), "-I", os.path.join(llamacpp, "ggml", "include"),
                    "-L", lib_dir, "-lllama", "-lggml", "-lggml-base", f"-Wl,-rpath,{lib_dir}"], check=True)
    return exe


def row_errors(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    return np.linalg.norm(got - ref, axis=1) / np.linalg.norm(ref, axis=1)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--redwood", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--llamacpp", default=os.path.join(ROOT, "build", "llamacpp", "src"))
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    oracle = build_oracle(a.llamacpp, a.workdir)
    failed = passed = 0

    def check(name: str, ok: bool, detail: str) -> None:
        nonlocal failed, passed
        passed, failed = passed + ok, failed + (not ok)
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)

    toks = ",".join(map(str, PROMPT))
    for i, fam in enumerate(FAMILIES):
        for t in ("F32", "F16"):
            model = os.path.join(a.workdir, f"{fam}-{t.lower()}.gguf")
            draft = os.path.join(a.workdir, f"{fam}-{t.lower()}-draft.gguf")
            for path, seed in ((model, i + 1), (draft, i + 101)):
                subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make-family-checkpoint"), "--family", fam,
                                "--type", t, "--out", path, "--seed", str(seed)], check=True, stdout=subprocess.DEVNULL)
            ref_npy = os.path.join(a.workdir, "ref.npy")
            r = subprocess.run([oracle, model, toks, ref_npy, str(GREEDY_N)], capture_output=True, text=True)
            if r.returncode != 0:
                check(f"{fam} {t} llama.cpp", False, r.stderr.strip())
                continue
            ref = np.load(ref_npy)
            ref_greedy = json.loads(r.stdout)
            budget = streamed_budget(a.redwood, model)
            if budget is None:
                check(f"{fam} {t} streaming", False, "no --device-mem budget streams its layers")
            for label, extra in (("resident", []), ("streamed", ["--device-mem", budget] if budget else None)):
                if extra is None:
                    continue
                out = os.path.join(a.workdir, "got.npy")
                r = subprocess.run([a.redwood, "logits", "--model", model, "--tokens", toks, "--out", out, *extra],
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    check(f"{fam} {t} {label} logits", False, r.stderr.strip())
                else:
                    err = row_errors(np.load(out), ref)
                    check(f"{fam} {t} {label} logits", bool(err.max() < TOL[t]),
                          f"worst row {err.max():.2e}, median {np.median(err):.2e} (tolerance {TOL[t]:g}, "
                          f"{len(err)} rows)")
                gen_runs = [(label, extra)]
                if label == "resident":
                    gen_runs.append(("speculative", ["--draft", draft]))
                for glabel, gextra in gen_runs:
                    r = subprocess.run([a.redwood, "generate", "--model", model, "--prompt-tokens", toks,
                                        "--max-tokens", str(GREEDY_N), "--temperature", "0", "--json", *gextra],
                                       capture_output=True, text=True)
                    if r.returncode != 0:
                        check(f"{fam} {t} {glabel} greedy", False, r.stderr.strip())
                        continue
                    got = json.loads(r.stdout)["tokens"]
                    check(f"{fam} {t} {glabel} greedy", got == ref_greedy,
                          f"{len(got)} tokens {'identical' if got == ref_greedy else f'{got} vs llama.cpp {ref_greedy}'}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
