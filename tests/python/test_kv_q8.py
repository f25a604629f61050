#!/usr/bin/env python3
"""--kv-type q8_0 through the CLI (issue 44; label "python;model"; under a minute).

    python3 tests/python/test_kv_q8.py --redwood build/redwood --model models/SmolLM2-135M-Instruct.Q4_1.gguf

Checks:
    generate  : `generate --kv-type q8_0` runs and its (up to) 32 greedy tokens are sensible text; how
                many of them equal f16's is printed (reported, not asserted: the rows are rounded
                differently). --draft with q8_0 rows gives the plain q8_0 greedy text.
    plan      : plan-memory counts the KV cache at 34 bytes per 32 elements (f16: 64).
    auto pool : a batch job with sequences = "auto" under one device budget holds about 1.9 times
                f16's positions with kv_type q8_0 (config.kv_pool_rows in the summary), and every
                line is its prompt's greedy text under q8_0 run alone (sequences = 1, resident).
    refused   : a KV type name not listed is one line naming the choices, exit 1.
Prints "N passed, M failed" and exits non-zero on any failure.
"""
from __future__ import annotations

import json
import os
import re
import string
import subprocess
import sys

from harness import check, summary as finish, scratch_dir, write, lines_of, cli_args


def run(rw: str, cmd: list[str], timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([rw] + cmd, capture_output=True, text=True, timeout=timeout)


def job_text(model: str, out: str, prompts: str, kv: str, batch: str, device: str) -> str:
    return (f'[model]\ntarget = "{model}"\n'
            f'[memory]\n' + (f'device = "{device}"\n' if device else '') + f'kv_type = "{kv}"\nthreads = 2\n'
            f'[batch]\n{batch}\n'
            f'[sampling]\ntemperature = 0.0\nmax_tokens = 4\n'
            f'[input]\nprompts = "{prompts}"\n'
            f'[output]\npath = "{out}"\n')


def main() -> int:
    args = cli_args()
    rw, model = args.redwood, args.model
    tmp = scratch_dir("redwood_kv_q8_")
    gen = ["generate", "--model", model, "--threads", "2", "--json", "-n", "32",
           "--prompt", "Once upon a time"]

    # generate: q8_0 against f16.
    res = {}
    for kv in ("f16", "q8_0"):
        p = run(rw, gen + ["--kv-type", kv])
        check(f"generate --kv-type {kv}: exit 0", p.returncode == 0, p.stderr[-400:])
        res[kv] = json.loads(p.stdout) if p.returncode == 0 else {"tokens": [], "text": ""}
    q8, f16 = res["q8_0"], res["f16"]
    text = q8["text"]
    words = re.findall(r"[A-Za-z]{2,}", text)
    check("q8_0: up to 32 greedy tokens of sensible text (printable, mostly words)",
          0 < len(q8["tokens"]) <= 32 and len(words) >= len(q8["tokens"]) // 3
          and all(c in string.printable for c in text), repr(text))
    same = sum(a == b for a, b in zip(q8["tokens"], f16["tokens"]))
    prefix = next((i for i, (a, b) in enumerate(zip(q8["tokens"], f16["tokens"])) if a != b),
                  min(len(q8["tokens"]), len(f16["tokens"])))
    print(f"REPORT q8_0 vs f16: {same} of the first {len(q8['tokens'])} greedy tokens equal (the first {prefix} in a row)\n"
          f"  f16 : {f16['text']!r}\n  q8_0: {text!r}", flush=True)
    draft = os.path.join(os.path.dirname(os.path.abspath(model)), "smollm2-draft-10L.gguf")
    if os.path.exists(draft):
        p = run(rw, gen + ["--kv-type", "q8_0", "--draft", draft])
        j = json.loads(p.stdout) if p.returncode == 0 else {}
        check("q8_0 with --draft: the plain q8_0 greedy tokens", j.get("tokens") == q8["tokens"], p.stderr[-400:])

    # plan-memory: the KV cache's bytes.
    kvb = {}
    for kv in ("f16", "q8_0"):
        p = run(rw, ["plan-memory", "--model", model, "--device-mem", "1GiB", "--ctx", "1024", "--kv-type", kv,
                     "--json"])
        items = json.loads(p.stdout).get("items", []) if p.returncode == 0 else []
        kvb[kv] = next((it.get("bytes", 0) for it in items if str(it.get("what", "")).startswith("KV cache")), 0)
    # SmolLM2-135M: 30 layers, 3 KV heads x 64: 192 elements per row, 6 blocks of 34 bytes.
    check("plan-memory: the q8_0 KV cache is 34 bytes per 32 elements",
          kvb["q8_0"] == 30 * 2 * 1024 * 6 * 34 and kvb["f16"] == 30 * 2 * 1024 * 192 * 2, json.dumps(kvb))

    # "auto" under one device budget: q8_0 holds about 1.9 times f16's positions.
    words_ = "one two three four five six seven eight nine ten "
    prompts = write(os.path.join(tmp, "p.jsonl"), "\n".join(
        json.dumps({"id": f"p{i}", "prompt": f"Item {i}: " + words_ * 40}) for i in range(12)) + "\n")
    rows, outs = {}, {}
    for kv in ("f16", "q8_0"):
        out = os.path.join(tmp, f"auto-{kv}.jsonl")
        p = run(rw, ["batch", write(os.path.join(tmp, f"auto-{kv}.toml"),
                                    job_text(model, out, prompts, kv, 'sequences = "auto"', "80MiB")), "-q"])
        check(f"auto, {kv}: exit 0, 12 lines", p.returncode == 0 and len(lines_of(out)) == 12, p.stderr[-400:])
        if p.returncode == 0:
            summ = json.load(open(out + ".summary.json"))
            rows[kv] = summ.get("config", {}).get("kv_pool_rows", 0)
            outs[kv] = {r["id"]: r["tokens"] for r in lines_of(out)}
    print(f"REPORT kv_pool_rows in 80 MiB: {json.dumps(rows)}", flush=True)
    need = 12 * 420  # the prompts' own rows (about 410 tokens each, plus 4): the pool's cap
    check("auto: q8_0 holds 1.7 to 2 times f16's positions in the same budget, both under the prompts' need",
          rows.get("f16", 0) > 0 and 1.7 * rows["f16"] <= rows.get("q8_0", 0) <= 2.0 * rows["f16"]
          and rows["q8_0"] < need, json.dumps(rows))
    out = os.path.join(tmp, "alone-q8_0.jsonl")
    p = run(rw, ["batch", write(os.path.join(tmp, "alone.toml"),
                                job_text(model, out, prompts, "q8_0", "sequences = 1", "")), "-q"])
    check("auto, q8_0: every line equals its prompt run alone",
          p.returncode == 0 and outs.get("q8_0") == {r["id"]: r["tokens"] for r in lines_of(out)}, p.stderr[-400:])

    # A name not in the list.
    p = run(rw, gen + ["--kv-type", "q8"])
    err = p.stderr.strip()
    check("--kv-type q8: one line listing the names, exit 1",
          p.returncode != 0 and len(err.splitlines()) == 1 and "q8_0" in err and "bf16" in err, err)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
