#!/usr/bin/env python3
"""Redwood's tokenizers against llama.cpp's own tokenizer test cases (issue 46):

    python3 tests/python/test_llamacpp_vocab.py --redwood build/redwood [--llamacpp build/llamacpp/src]
        [--workdir DIR] [--only NAME,...]

llama.cpp's source (the llama-cpp-python sdist, unpacked as bench/llamacpp_reference.sh
does) ships vocab-only GGUFs models/ggml-vocab-NAME.gguf, and for most of them
NAME.gguf.inp (texts separated by "\\n__ggml_vocab_test__\\n") and NAME.gguf.out (the
expected ids, one line per text; no BOS, no special-token parsing: test-tokenizer-0).
Every such vocabulary found there is run, so new ones are covered as they come:
its tokenizer.ggml.* keys grafted onto a tiny random model
(tools/make-synthetic-gguf.py --tokenizer-from), then `redwood tokenize --raw
--jsonl` over all texts, compared case by case.

Per vocabulary it prints one line: PASS (every case matched), FAIL (cases
matched / total, and the first differences), or UNSUPPORTED when Redwood
refuses the vocabulary (a pre-tokenizer or tokenizer model it does not
implement): that refusal must be a one-line error naming it, never exit 0
with other ids, and never for one of SUPPORTED below. Exits 1 on any FAIL, 77 (CTest: skipped) when the llama.cpp
source or the gguf package is missing. Nothing of llama.cpp's is copied into
the repository: the files are read where they are.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SEP = "\n__ggml_vocab_test__\n"
SKIP = 77
# The vocabularies whose tokenizer Redwood implements (tokenizer.ggml.model and
# pre-tokenizer): each must match every case; refusing one is a failure. Any
# other vocabulary must match every case too, or be refused with a one-line error.
SUPPORTED = {"gpt-2", "llama-bpe", "llama-spm", "phi-3", "qwen2", "qwen35", "starcoder", "refact", "command-r",
             "deepseek-llm", "deepseek-coder", "falcon", "mpt"}


def read_cases(inp: str, out: str) -> list[tuple[str, list[int]]]:
    """The texts and expected ids, parsed as llama.cpp's test-tokenizer-0 does."""
    with open(inp, encoding="utf-8", newline="") as f:
        raw = f.read()
    texts, pos = [], 0
    while pos < len(raw):
        nxt = raw.find(SEP, pos)
        if nxt < 0:
            texts.append(raw[pos:])
            break
        texts.append(raw[pos:nxt])
        pos = nxt + len(SEP)
    with open(out, encoding="utf-8") as f:
        ids = [[int(t) for t in line.split()] for line in f.read().split("\n")]
    if ids and ids[-1] == [] and len(ids) == len(texts) + 1:
        ids.pop()  # the final newline
    if len(ids) != len(texts):
        raise SystemExit(f"{inp}: {len(texts)} texts but {len(ids)} lines in {out}")
    return list(zip(texts, ids))


def graft(vocab: str, model: str) -> None:
    """A one-layer random model whose tokenizer is the vocabulary's."""
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make-synthetic-gguf.py"), "--out", model,
                    "--tokenizer-from", vocab, "--layers", "1", "--dim", "32", "--heads", "1", "--kv-heads", "1",
                    "--ffn", "32", "--type", "Q4_0", "--tied", "--mode", "exact"],
                   check=True, stdout=subprocess.DEVNULL)


def show(ids: list[int], n: int = 24) -> str:
    return " ".join(map(str, ids[:n])) + (" ..." if len(ids) > n else "")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--redwood", required=True)
    ap.add_argument("--llamacpp", default=os.environ.get("REDWOOD_LLAMACPP_DIR",
                                                         os.path.join(ROOT, "build", "llamacpp", "src")))
    ap.add_argument("--workdir", help="where the grafted models go (default: a temporary folder)")
    ap.add_argument("--only", help="comma-separated vocabulary names (default: every one with test cases)")
    a = ap.parse_args()

    models = os.path.join(a.llamacpp, "models")
    vocabs = sorted(p for p in glob.glob(os.path.join(models, "ggml-vocab-*.gguf"))
                    if os.path.exists(p + ".inp") and os.path.exists(p + ".out"))
    if not vocabs:
        print(f"SKIP: no llama.cpp vocabularies with test cases in {models} (unpack the llama.cpp source "
              f"as bench/llamacpp_reference.sh does, or set REDWOOD_LLAMACPP_DIR)")
        return SKIP
    try:
        import gguf  # noqa: F401  (tools/make-synthetic-gguf.py writes the grafted models with it)
    except ImportError:
        print("SKIP: the gguf Python package is missing (pip install gguf)")
        return SKIP

    def name_of(p: str) -> str:
        return os.path.basename(p)[len("ggml-vocab-"):-len(".gguf")]

    if a.only:
        wanted = set(a.only.split(","))
        unknown = wanted - {name_of(p) for p in vocabs}
        if unknown:
            raise SystemExit(f"--only: no vocabulary with test cases named {', '.join(sorted(unknown))}")
        vocabs = [p for p in vocabs if name_of(p) in wanted]

    tmp = tempfile.TemporaryDirectory(prefix="redwood_vocab_")
    work = a.workdir or tmp.name
    os.makedirs(work, exist_ok=True)
    failed, passed, unsupported = [], [], []
    for vocab in vocabs:
        name = name_of(vocab)
        cases = read_cases(vocab + ".inp", vocab + ".out")
        model = os.path.join(work, f"vocab-{name}.gguf")
        graft(vocab, model)
        jsonl = os.path.join(work, f"vocab-{name}.jsonl")
        with open(jsonl, "w", encoding="utf-8") as f:
            for text, _ in cases:
                f.write(json.dumps({"text": text}) + "\n")
        r = subprocess.run([a.redwood, "tokenize", "--model", model, "--raw", "--jsonl", jsonl],
                           capture_output=True, text=True)
        os.remove(model)
        err = r.stderr.strip()
        if r.returncode != 0:
            one_line = err.count("\n") == 0 and err.startswith("redwood: ")
            refusal = "does not implement" in err or "unsupported tokenizer model" in err
            if one_line and refusal and r.returncode == 1 and name not in SUPPORTED:
                unsupported.append(name)
                print(f"UNSUPPORTED {name}: 0/{len(cases)} ({err})", flush=True)
            else:
                failed.append(name)
                why = "a vocabulary Redwood supports refused" if name in SUPPORTED else "no one-line refusal"
                print(f"FAIL {name}: exit {r.returncode}, {why}: {err[:500]}", flush=True)
            continue
        got = [json.loads(line) for line in r.stdout.splitlines()]
        if len(got) != len(cases):
            failed.append(name)
            print(f"FAIL {name}: {len(got)} results for {len(cases)} cases", flush=True)
            continue
        bad = [(text, want, ids) for (text, want), ids in zip(cases, got) if ids != want]
        ok = len(cases) - len(bad)
        if bad:
            failed.append(name)
            print(f"FAIL {name}: {ok}/{len(cases)} cases match", flush=True)
            for text, want, ids in bad[:5]:
                print(f"    text {text!r}\n      llama.cpp {show(want)}\n      redwood   {show(ids)}", flush=True)
        else:
            passed.append(name)
            print(f"PASS {name}: {ok}/{len(cases)} cases match", flush=True)
    print(f"{len(passed)} vocabularies match every case, {len(unsupported)} refused as unsupported"
          + (f" ({', '.join(unsupported)})" if unsupported else "") + f", {len(failed)} failed"
          + (f": {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
