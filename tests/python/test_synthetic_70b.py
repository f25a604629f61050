#!/usr/bin/env python3
"""A synthetic GGUF with Llama2-70B's exact dimensions (width 8192, 64 heads,
8 KV heads, FFN 28672, vocab 32000), 1 layer, Q4_0: written by
tools/make-synthetic-gguf.py, loaded by redwood (info + one pass) and compared
with the independent numpy oracle. Prints 'N passed, M failed'."""
import argparse, json, os, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "oracle"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--redwood", required=True)
    ap.add_argument("--workdir", required=True, help="where the synthetic model is cached")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    path = os.path.join(a.workdir, "llama2-70b-shape-1L-Q4_0.gguf")
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        print(("PASS " if ok else "FAIL ") + what, flush=True)
        passed, failed = passed + ok, failed + (not ok)

    if not os.path.exists(path):
        tmp = path + ".part"
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make-synthetic-gguf.py"), "--preset",
                        "llama2-70b", "--layers", "1", "--type", "Q4_0", "--seed", "7", "--out", tmp], check=True)
        os.replace(tmp, path)

    info = json.loads(subprocess.run([a.redwood, "info", path, "--json"], check=True, capture_output=True,
                                     text=True).stdout)
    want = dict(dim=8192, heads=64, kv_heads=8, ffn_dim=28672, vocab=32000, layers=1)
    check(all(info[k] == v for k, v in want.items()), f"info reports Llama2-70B dimensions: {info}")

    tokens = [1, 450, 4996, 17354, 1701, 29916]
    with tempfile.TemporaryDirectory() as td:
        out = os.path.join(td, "l.npy")
        r = subprocess.run([a.redwood, "logits", "--model", path, "--tokens", ",".join(map(str, tokens)), "--out", out],
                           capture_output=True, text=True)
        check(r.returncode == 0, "redwood logits runs" + ("" if r.returncode == 0 else ": " + r.stderr.strip()))
        if r.returncode != 0:
            print(f"{passed} passed, {failed} failed")
            return 1
        import numpy as np
        got = np.load(out)
    check(got.shape == (len(tokens), 32000) and bool(np.isfinite(got).all()), f"logits shape {got.shape}, finite")
    import gguf_llama_ref as ref
    m = ref.load_model(path, dtype=np.float32)
    exp = ref.logits(m, tokens)
    worst = max(float(np.linalg.norm(got[i] - exp[i]) / np.linalg.norm(exp[i])) for i in range(len(tokens)))
    check(worst < 1e-3, f"logits vs numpy oracle: worst row ||d||/||ref|| = {worst:.2e} (< 1e-3)")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
