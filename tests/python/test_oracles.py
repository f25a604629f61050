#!/usr/bin/env python3
"""Checks the redwood binary against the independent Python oracles.

    python3 tests/python/test_oracles.py --redwood build/redwood --model models/SmolLM2-135M-Instruct.Q4_1.gguf
            [--only logits|greedy|tokenizer] [--logits-tol 1e-3] [--greedy-n 64] [--redwood-arg=--kv-type ...]

CLI contracts exercised:
    redwood logits   --model M --tokens 1,2,3 --out F.npy          float32 .npy [n, vocab], all rows
    redwood generate --model M --prompt-tokens 1,2,3 --max-tokens N --temperature 0 --json
                                                                    one JSON object with "tokens": [generated ids]
    redwood tokenize --model M --jsonl FILE                         one JSON id array per input line

Tests:
    logits    : >= 4 prompts (1..~40 tokens); every row ||got - ref|| / ||ref|| < tol.
    greedy    : >= 3 prompts; generated ids identical to the reference greedy
                continuation (an early stop is accepted only right after an end-of-generation
                token that the reference also produced; a divergence is accepted only at a
                reference near-tie, |logit gap| < --tie-tol, and is reported).
    tokenizer : ids equal the reference on every corpus line; the reference decoder maps
                both the reference ids and redwood's ids back to the exact input text.

Plain script (no pytest). Prints "N passed, M failed" and exits non-zero on any failure.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "oracle"))

import gguf_llama_ref as ref  # noqa: E402
import tokenizer_ref as tokref  # noqa: E402

# Prompts (real sentences) used when the model has a gpt2 tokenizer the reference can build.
LOGITS_TEXTS = [
    "Hello",
    "The capital of France is",
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "Once upon a time, in a small village at the edge of a great forest, there lived an old "
    "clockmaker who repaired every broken clock in town for free, asking only for a story in return.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))",
]
GREEDY_TEXTS = [
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "Once upon a time, there was a little girl who",
    "<|im_start|>user\nWrite a short poem about the sea.<|im_end|>\n<|im_start|>assistant\n",
]


class Results:
    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.failures: list[str] = []

    def ok(self, name: str, msg: str = ""):
        self.passed += 1
        print(f"PASS {name}" + (f": {msg}" if msg else ""), flush=True)

    def fail(self, name: str, msg: str):
        self.failed += 1
        self.failures.append(name)
        print(f"FAIL {name}: {msg}", flush=True)


def _tail(s: str, n: int = 1500) -> str:
    s = (s or "").strip()
    return s if len(s) <= n else "..." + s[-n:]


def run_redwood(args, cmd: list[str], timeout: float):
    """Runs redwood; returns (stdout, error message or None). Never raises."""
    full = [args.redwood] + cmd + (args.redwood_arg if cmd[0] in ("logits", "generate") else [])
    try:
        p = subprocess.run(full, capture_output=True, text=True, timeout=timeout,
                           encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None, f"redwood binary not found: {args.redwood!r}"
    except PermissionError:
        return None, f"redwood binary not executable: {args.redwood!r}"
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f}s: {' '.join(full)}"
    except OSError as e:
        return None, f"could not run {args.redwood!r}: {e}"
    if p.returncode != 0:
        return None, (f"`{' '.join(full)}` exited with rc={p.returncode} "
                      f"(feature missing or broken?)\n  stderr: {_tail(p.stderr)}\n  stdout: {_tail(p.stdout, 500)}")
    return p.stdout, None


def ids_arg(ids) -> str:
    return ",".join(str(int(t)) for t in ids)


# ------------------------------------------------------------------------- prompts
def make_prompts(model: ref.RefModel, tok, texts, fallback_lengths, seed):
    """Token-id prompts: from the reference tokenizer when available, else deterministic
    pseudo-random ids (synthetic models)."""
    if tok is not None:
        return [(repr(t[:40]) + ("..." if len(t) > 40 else ""), tokref.encode(tok, t)) for t in texts]
    rng = np.random.default_rng(seed)
    lo = min(3, model.n_vocab - 1)
    out = []
    for n in fallback_lengths:
        ids = [int(x) for x in rng.integers(lo, model.n_vocab, size=n)]
        out.append((f"random[{n}]", ids))
    return out


# ------------------------------------------------------------------------- logits
def test_logits(args, model, tok, res: Results, tmp: str):
    prompts = make_prompts(model, tok, LOGITS_TEXTS, [1, 5, 17, 40], seed=1234)
    worst_all = 0.0
    for i, (label, ids) in enumerate(prompts):
        name = f"logits[{i}] {label} (n={len(ids)})"
        try:
            t0 = time.time()
            want = ref.logits(model, ids)
            t_ref = time.time() - t0
            out = os.path.join(tmp, f"logits_{i}.npy")
            if os.path.exists(out):
                os.remove(out)
            _, err = run_redwood(args, ["logits", "--model", args.model, "--tokens", ids_arg(ids), "--out", out],
                                 args.timeout)
            if err:
                res.fail(name, err)
                continue
            if not os.path.exists(out):
                res.fail(name, f"redwood logits exited 0 but wrote no file {out}")
                continue
            try:
                got = np.load(out, allow_pickle=False)
            except Exception as e:
                res.fail(name, f"cannot read {out} as .npy: {e}")
                continue
            problems = []
            if got.dtype != np.float32:
                problems.append(f"dtype {got.dtype} (contract: float32)")
            if got.shape != want.shape:
                res.fail(name, f"shape {got.shape}, expected {want.shape} ([n_tokens, n_vocab], all rows)")
                continue
            got64 = got.astype(np.float64)
            want64 = want.astype(np.float64)
            if not np.all(np.isfinite(got64)):
                res.fail(name, f"non-finite logits in rows {sorted(set(np.nonzero(~np.isfinite(got64))[0].tolist()))[:10]}")
                continue
            rel = np.linalg.norm(got64 - want64, axis=1) / np.maximum(np.linalg.norm(want64, axis=1), 1e-30)
            worst_row = int(np.argmax(rel))
            worst = float(rel[worst_row])
            worst_all = max(worst_all, worst)
            argmax_agree = int(np.sum(got.argmax(1) == want.argmax(1)))
            info = (f"worst row {worst_row} rel err {worst:.3e} (tol {args.logits_tol:g}), "
                    f"argmax agree {argmax_agree}/{len(ids)}, ref {t_ref:.1f}s")
            if worst >= args.logits_tol:
                problems.append(info + f"; per-row rel err: {np.array2string(rel, precision=2, max_line_width=200)}")
            if problems:
                res.fail(name, "; ".join(problems))
            else:
                res.ok(name, info)
        except Exception:
            res.fail(name, "test harness error:\n" + traceback.format_exc())
    print(f"logits: worst relative row error over all prompts = {worst_all:.3e}", flush=True)


# ------------------------------------------------------------------------- greedy
def _parse_generate_json(stdout: str):
    """The last line (or the whole output) that parses as a JSON object with 'tokens'."""
    cands = [stdout] + stdout.strip().splitlines()[::-1]
    for c in cands:
        c = c.strip()
        if not c.startswith("{"):
            continue
        try:
            obj = json.loads(c)
        except ValueError:
            continue
        if isinstance(obj, dict) and "tokens" in obj:
            return obj
    return None


def _eog_ids(model: ref.RefModel):
    ids = set()
    if model.eos is not None:
        ids.add(int(model.eos))
    for key in ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"):
        f = model.reader.fields.get(key)
        if f is not None:
            ids.add(int(f.contents()))
    # control tokens that llama.cpp-style runtimes conventionally treat as end-of-generation
    names = {"<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end|>", "</s>", "<end_of_turn>", "<|end_of_text|>"}
    tf, tt = model.reader.fields.get("tokenizer.ggml.tokens"), model.reader.fields.get("tokenizer.ggml.token_type")
    if tf is not None and tt is not None:
        for i, (t, ty) in enumerate(zip(tf.contents(), tt.contents())):
            if ty == 3 and t in names:
                ids.add(i)
    return ids


def test_greedy(args, model, tok, res: Results):
    prompts = make_prompts(model, tok, GREEDY_TEXTS, [1, 8, 24], seed=4321)
    eog = _eog_ids(model)
    n = args.greedy_n
    for i, (label, ids) in enumerate(prompts):
        name = f"greedy[{i}] {label} (prompt n={len(ids)}, gen {n})"
        try:
            t0 = time.time()
            want, margins = ref.greedy(model, ids, n, return_margins=True)
            t_ref = time.time() - t0
            stdout, err = run_redwood(args, ["generate", "--model", args.model, "--prompt-tokens", ids_arg(ids),
                                             "--max-tokens", str(n), "--temperature", "0", "--json"], args.timeout)
            if err:
                res.fail(name, err)
                continue
            obj = _parse_generate_json(stdout)
            if obj is None:
                res.fail(name, f"no JSON object with \"tokens\" on stdout: {_tail(stdout, 500)!r}")
                continue
            got = obj["tokens"]
            if not isinstance(got, list) or not all(isinstance(t, int) for t in got):
                res.fail(name, f"\"tokens\" is not a list of ints: {str(got)[:200]}")
                continue
            text = ""
            if tok is not None:
                text = f" ref text {tokref.decode(tok, want)[:120]!r}"
            info = f"ref min top-2 margin {min(margins):.4f}, ref {t_ref:.1f}s"
            if got == want:
                res.ok(name, info + text)
                continue
            # first divergence
            k = next((j for j in range(min(len(got), len(want))) if got[j] != want[j]), min(len(got), len(want)))
            if k == len(got) and len(got) < len(want):
                # redwood stops BEFORE emitting an end-of-generation token (finish_reason "stop",
                # the stop token is not part of "tokens"); the reference must produce one there.
                if obj.get("finish_reason") == "stop" and want[len(got)] in eog:
                    res.ok(name, f"stopped at end-of-generation token {want[len(got)]} after {len(got)} tokens "
                                 f"(reference prefix identical); " + info)
                elif len(got) > 0 and got[-1] in eog:
                    res.ok(name, f"stopped at end-of-generation token {got[-1]} after {len(got)} tokens "
                                 f"(matches reference prefix); " + info)
                else:
                    res.fail(name, f"only {len(got)} tokens generated (expected {n}), "
                                   f"last token {got[-1] if got else None} is not an EOG token {sorted(eog)}")
                continue
            if k == len(want):
                res.fail(name, f"generated {len(got)} tokens, more than --max-tokens {n}")
                continue
            # Divergence at k: is it a reference near-tie?
            lg = ref.logits(model, ids + want[:k])[-1].astype(np.float64)
            gap = float(lg[want[k]] - lg[got[k]]) if 0 <= got[k] < len(lg) else float("inf")
            detail = (f"diverges at step {k}: ref {want[k]} (logit {lg[want[k]]:.5f}) vs redwood {got[k]} "
                      f"(ref logit {lg[got[k]] if 0 <= got[k] < len(lg) else float('nan'):.5f}), gap {gap:.5f}; "
                      f"ref {want[:k + 3]}... got {got[:k + 3]}...")
            if gap < args.tie_tol:
                res.ok(name, f"NEAR-TIE accepted (gap {gap:.2e} < tie-tol {args.tie_tol:g}); " + detail)
            else:
                res.fail(name, detail)
        except Exception:
            res.fail(name, "test harness error:\n" + traceback.format_exc())


# ------------------------------------------------------------------------- tokenizer
def test_tokenizer(args, model, tok, res: Results):
    if tok is None:
        print("SKIP tokenizer: the reference tokenizer supports only tokenizer.ggml.model=gpt2 models", flush=True)
        return
    texts = []
    with open(args.corpus, "r", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                texts.append(json.loads(line)["text"])
    want = [tokref.encode(tok, t) for t in texts]
    # Oracle self-check: decode(encode(text)) == text.
    for i, (t, w) in enumerate(zip(texts, want)):
        dec = tokref.decode(tok, w)
        if dec != t:
            res.fail(f"tokenizer-ref-roundtrip[{i}]", f"reference decode(encode(x)) != x for {t!r}: {dec!r}")
    stdout, err = run_redwood(args, ["tokenize", "--model", args.model, "--jsonl", args.corpus], args.timeout)
    if err:
        res.fail("tokenizer (all lines)", err)
        return
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    if len(lines) != len(texts):
        res.fail("tokenizer line count", f"redwood printed {len(lines)} non-empty lines for {len(texts)} inputs")
    n_ok = 0
    for i, t in enumerate(texts):
        name = f"tokenizer[{i}] {t[:30]!r}"
        if i >= len(lines):
            res.fail(name, "no output line")
            continue
        try:
            got = json.loads(lines[i])
        except ValueError:
            res.fail(name, f"output line is not JSON: {lines[i][:200]!r}")
            continue
        if not isinstance(got, list) or not all(isinstance(x, int) for x in got):
            res.fail(name, f"output line is not a JSON array of ints: {lines[i][:200]!r}")
            continue
        if got != want[i]:
            k = next((j for j in range(min(len(got), len(want[i]))) if got[j] != want[i][j]),
                     min(len(got), len(want[i])))
            pieces_w = [tok.id_to_token(x) for x in want[i][max(0, k - 2):k + 4]]
            pieces_g = [tok.id_to_token(x) if 0 <= x < model.n_vocab else f"<bad {x}>"
                        for x in got[max(0, k - 2):k + 4]]
            res.fail(name, f"text {t!r}\n  ref {want[i]}\n  got {got}\n  first diff at {k}: "
                           f"ref pieces {pieces_w} vs got {pieces_g}")
            continue
        if any(not (0 <= x < model.n_vocab) for x in got):
            res.fail(name, "id out of vocab range")
            continue
        dec = tokref.decode(tok, got)
        if dec != t:
            res.fail(name, f"reference decode of redwood ids != text: {dec!r} vs {t!r}")
            continue
        n_ok += 1
        res.passed += 1
    print(f"tokenizer: {n_ok}/{len(texts)} corpus lines identical to the reference and round-trip", flush=True)


# ------------------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--redwood", required=True, help="path to the redwood binary")
    ap.add_argument("--model", required=True, help="GGUF model")
    ap.add_argument("--only", choices=["logits", "greedy", "tokenizer"], action="append",
                    help="run only this part (repeatable)")
    ap.add_argument("--corpus", default=os.path.join(ROOT, "tests", "data", "tokenizer_corpus.jsonl"))
    ap.add_argument("--logits-tol", type=float, default=1e-3, help="max per-row ||got-ref||/||ref||")
    ap.add_argument("--tie-tol", type=float, default=1e-2,
                    help="accept a greedy divergence when the reference logit gap is below this")
    ap.add_argument("--greedy-n", type=int, default=64)
    ap.add_argument("--timeout", type=float, default=600, help="seconds per redwood invocation")
    ap.add_argument("--ref-dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--keep-tmp", action="store_true")
    ap.add_argument("--redwood-arg", action="append", default=[],
                    help="extra argument for every model-running redwood command (repeat: --redwood-arg=--kv-type "
                         "--redwood-arg=f16)")
    args = ap.parse_args(argv)
    parts = args.only or ["logits", "greedy", "tokenizer"]

    args.redwood = os.path.abspath(args.redwood) if os.sep in args.redwood else (shutil.which(args.redwood) or args.redwood)
    if not os.path.exists(args.model):
        print(f"error: model not found: {args.model}", file=sys.stderr)
        print("0 passed, 1 failed")
        return 2
    try:
        model = ref.load_model(args.model, dtype=np.float64 if args.ref_dtype == "float64" else np.float32)
    except SystemExit as e:
        print(f"error: reference cannot load {args.model}: {e}", file=sys.stderr)
        print("0 passed, 1 failed")
        return 2
    tok = None
    tmodel = (model.reader.fields.get("tokenizer.ggml.model"))
    if tmodel is not None and tmodel.contents() == "gpt2":
        tok = tokref.build_tokenizer(args.model)
    print(f"model {args.model}: {model.n_layer} layers, dim {model.n_embd}, heads {model.n_head}/{model.n_head_kv}, "
          f"vocab {model.n_vocab}, tokenizer {'gpt2/' + str(model.reader.fields['tokenizer.ggml.pre'].contents()) if tok else 'not covered by reference'}",
          flush=True)
    if not os.path.exists(args.redwood):
        print(f"warning: redwood binary {args.redwood!r} does not exist; every check will fail", flush=True)

    res = Results()
    tmp = tempfile.mkdtemp(prefix="redwood-oracle-")
    try:
        if "logits" in parts:
            test_logits(args, model, tok, res, tmp)
        if "greedy" in parts:
            test_greedy(args, model, tok, res)
        if "tokenizer" in parts:
            test_tokenizer(args, model, tok, res)
    finally:
        if args.keep_tmp:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if res.failures:
        print("failed: " + ", ".join(res.failures[:20]) + (" ..." if len(res.failures) > 20 else ""))
    print(f"{res.passed} passed, {res.failed} failed")
    return 1 if res.failed else 0


if __name__ == "__main__":
    sys.exit(main())
