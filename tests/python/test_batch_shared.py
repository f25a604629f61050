#!/usr/bin/env python3
"""`redwood batch` with continuous batching ([batch] sequences > 1), as real
subprocesses on the default model (labels "python;model"; about a minute).

    python3 tests/python/test_batch_shared.py --redwood build/redwood --model models/SmolLM2-135M-Instruct.Q4_1.gguf

Checks:
    identity    : every prompt's line (id, text, tokens, finish) is the same whatever shares its
                  passes (sequences = 4, 3, 8 and "auto"), greedy and sampled (T = 0.8, per-prompt seeds);
                  the control: another job seed changes the sampled lines.
    kill/resume : a job killed (SIGKILL) with prompts in flight resumes to the same lines.
    bad lines   : a prompt too long for memory.ctx is a skipped line (on_bad_line = "skip"), the rest run.
    auto pool   : "auto" under a tight device budget sizes the KV pool to the prompts' own rows: more in
                  flight than that many of the longest prompt would allow (sequences = 3 refused there).
    trees       : with a draft (Sequoia trees in the shared passes: fixed, and shrunk to fit a small pass), greedy
                  lines equal the plain lines; the summary shows tree steps.
    refused     : sequences > 1 with a dynamic tree, sequences = 0, a bad word -> exit 1, one line naming the key.
Prints "N passed, M failed" and exits non-zero on any failure.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from harness import check, summary as finish, scratch_dir, write, lines_of, cli_args

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPTS = os.path.join(ROOT, "configs", "jobs", "prompts-smoke.jsonl")


def job_text(model: str, out: str, batch: str, temperature: float = 0.0, seed: int = 0, prompts: str = PROMPTS,
             extra: str = "") -> str:
    return (f'[model]\ntarget = "{model}"\n{extra}'
            f'[batch]\n{batch}\n'
            f'[sampling]\ntemperature = {temperature}\nseed = {seed}\nmax_tokens = 20\n'
            f'[input]\nprompts = "{prompts}"\nchat = true\non_bad_line = "skip"\n'
            f'[output]\npath = "{out}"\nfsync_every = 1\nprogress_every = 0.5\n')


def by_id(path: str) -> dict:
    return {json.dumps(r["id"]): (r["text"], tuple(r["tokens"]), r["finish_reason"]) for r in lines_of(path)}


def run(rw: str, job: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([rw, "batch", job, "-q"], capture_output=True, text=True, timeout=timeout)


def main() -> int:
    args = cli_args()
    rw, model = args.redwood, args.model
    tmp = scratch_dir("redwood_batch_shared_")
    # The first 10 prompts of the smoke set, and one far too long for memory.ctx.
    with open(PROMPTS) as f:
        first = f.read().splitlines()[:10]
    prompts = write(os.path.join(tmp, "p.jsonl"), "\n".join(first) + "\n")
    long_prompts = write(os.path.join(tmp, "long.jsonl"), "\n".join(
        first[:3] + [json.dumps({"id": "too-long", "prompt": "word " * 3000})]) + "\n")

    for temp in (0.0, 0.8):
        outs = {}
        for batch in ("sequences = 4", "sequences = 3\npass_tokens = 16", "sequences = 8\npass_tokens = 7",
                      'sequences = "auto"'):
            name = f"t{temp}-{batch.splitlines()[0].split('=')[1].strip().strip(chr(34))}"
            out = os.path.join(tmp, name + ".jsonl")
            p = run(rw, write(os.path.join(tmp, name + ".toml"), job_text(model, out, batch, temp, 7, prompts)))
            check(f"T={temp} {batch.splitlines()[0]}: exit 0", p.returncode == 0, p.stderr[-400:])
            if p.returncode == 0:
                outs[batch] = by_id(out)
                summ = json.load(open(out + ".summary.json"))
                shared = summ.get("shared_passes", {})
                check(f"T={temp} {batch.splitlines()[0]}: passes were shared",
                      shared.get("max_in_flight", 0) > 1, json.dumps(shared))
        ref = outs.get("sequences = 4")
        check(f"T={temp}: 10 lines", ref is not None and len(ref) == 10, str(ref and len(ref)))
        for b, o in outs.items():
            check(f"T={temp}: {b.splitlines()[0]} equals sequences = 4, line for line", o == ref,
                  str(sorted(k for k in o if o.get(k) != (ref or {}).get(k))))
        if temp > 0:  # the control: the job seed is used
            out = os.path.join(tmp, "seed8.jsonl")
            p = run(rw, write(os.path.join(tmp, "seed8.toml"), job_text(model, out, "sequences = 4", temp, 8, prompts)))
            check("another seed changes sampled lines", p.returncode == 0 and by_id(out) != ref, p.stderr[-300:])

    # Killed with prompts in flight, resumed: the same lines, one per id.
    ref_path = os.path.join(tmp, "t0.0-4.jsonl")
    out = os.path.join(tmp, "killed.jsonl")
    job = write(os.path.join(tmp, "killed.toml"), job_text(model, out, "sequences = 4", 0.0, 7, prompts))
    proc = subprocess.Popen([rw, "batch", job, "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if os.path.exists(out) and len(lines_of(out)) >= 2:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = len(lines_of(out)) if os.path.exists(out) else 0
    p = run(rw, job)
    got = lines_of(out) if os.path.exists(out) else []
    check("killed mid-job: some lines were written before the kill", 0 < partial < 10, str(partial))
    check("killed and resumed: one line per id, equal to an uninterrupted run",
          p.returncode == 0 and len(got) == 10 and by_id(out) == by_id(ref_path), p.stderr[-300:])

    # A prompt too long for memory.ctx is a skipped bad line; the others run.
    out = os.path.join(tmp, "long.jsonl.out")
    p = run(rw, write(os.path.join(tmp, "long.toml"),
                      job_text(model, out, "sequences = 4", prompts=long_prompts, extra="[memory]\nctx = 256\n")))
    check("a prompt longer than memory.ctx is skipped, the rest run",
          p.returncode == 0 and len(lines_of(out)) == 3 and "too-long" not in open(out).read()
          and "skipped" in p.stderr, p.stderr[-300:])

    # Trees in shared passes (a draft): greedy lines equal the plain ones.
    draft = os.path.join(ROOT, "models", "smollm2-draft-10L.gguf")
    ref = by_id(ref_path)
    for batch in ("sequences = 4\npass_tokens = 64", "sequences = 4\npass_tokens = 12"):
        name = "trees-" + batch.splitlines()[1].split("=")[1].strip()
        out = os.path.join(tmp, name + ".jsonl")
        spec = '[speculation]\ntree = "sequoia"\nbudget = 12\ndepth = 5\n'
        p = run(rw, write(os.path.join(tmp, name + ".toml"),
                          job_text(model, out, batch, 0.0, 7, prompts, extra=f'draft = "{draft}"\n' + spec)))
        check(f"trees, {batch.splitlines()[1]}: exit 0", p.returncode == 0, p.stderr[-400:])
        if p.returncode == 0:
            check(f"trees, {batch.splitlines()[1]}: every line equals the plain greedy line", by_id(out) == ref,
                  str(sorted(k for k, v in by_id(out).items() if ref.get(k) != v)))
            shared = json.load(open(out + ".summary.json")).get("shared_passes", {})
            check(f"trees, {batch.splitlines()[1]}: trees were verified in shared passes",
                  shared.get("tree_steps", 0) > 0 and shared.get("max_in_flight", 0) > 1
                  and shared.get("tokens_per_decode_slot", 0) > 1, json.dumps(shared))
            check(f"trees, {batch.splitlines()[1]}: the draft's passes carried several sequences' levels",
                  shared.get("draft_passes", 0) > 0 and shared.get("draft_tokens_per_pass", 0) > 1, json.dumps(shared))
            # The planner counts the draft's passes at pass_tokens: a prompt reaches the draft in chunks.
            pt = int(batch.splitlines()[1].split("=")[1])
            check(f"trees, {batch.splitlines()[1]}: no target or draft pass larger than pass_tokens",
                  0 < shared.get("max_pass_tokens", 0) <= pt and 0 < shared.get("max_draft_pass_tokens", 0) <= pt,
                  json.dumps(shared))

    # "auto" with a fixed tree (chain:3, 4 nodes each, never shrunk): no more prompts than a 16-token pass
    # holds whole trees for (4), where 10 were chosen before and refused after the weights loaded.
    out = os.path.join(tmp, "chain-auto.jsonl")
    p = run(rw, write(os.path.join(tmp, "chain-auto.toml"), job_text(
        model, out, 'sequences = "auto"\npass_tokens = 16', 0.0, 7, prompts,
        extra=f'draft = "{draft}"\n[speculation]\ntree = "chain:3"\n')))
    check("auto with a fixed tree: exit 0, 2 to 4 in flight, every line the plain greedy line",
          p.returncode == 0 and 1 < json.load(open(out + ".summary.json"))["shared_passes"]["max_in_flight"] <= 4
          and by_id(out) == ref, p.stderr[-400:])

    # "auto" under a device budget: the KV pool holds what the prompts need, not the longest one's rows
    # for each sequence. One long prompt (656 KV positions with its tokens) and nine short ones; at
    # 100 MiB the plan holds about 1,100 positions beside the streamed layers: the ten prompts' own rows,
    # not two of the long one's. The controls: sequences = 3 is refused there, and the old rule (that
    # many of the longest prompt's rows per sequence, halved until they fit) would run one at a time.
    mixed = write(os.path.join(tmp, "mixed.jsonl"), "\n".join(
        [json.dumps({"id": "long", "prompt": "Repeat after me: " + "one two three four " * 150})] + first[:9]) + "\n")
    runs = {}
    for name, batch, mem in (("auto", 'sequences = "auto"', '[memory]\ndevice = "100MiB"\n'),
                             ("three", "sequences = 3", '[memory]\ndevice = "100MiB"\n'),
                             ("alone", "sequences = 1", "")):
        out = os.path.join(tmp, f"mixed-{name}.jsonl")
        runs[name] = (run(rw, write(os.path.join(tmp, f"mixed-{name}.toml"),
                                    job_text(model, out, batch, 0.0, 7, mixed, extra=mem))), out)
    (p, out), (p1, out1), (p3, _) = runs["auto"], runs["alone"], runs["three"]
    check("auto in 100 MiB: exit 0", p.returncode == 0, p.stderr[-400:])
    if p.returncode == 0:
        summ = json.load(open(out + ".summary.json"))
        shared, cfg = summ.get("shared_passes", {}), summ.get("config", {})
        check("auto in 100 MiB: more than 2 prompts in flight (the pool holds their own rows)",
              shared.get("max_in_flight", 0) > 2, json.dumps(shared) + json.dumps(cfg))
        check("auto in 100 MiB: a pool of one to three of the longest prompt's rows",
              656 <= cfg.get("kv_pool_rows", 0) < 3 * 656, json.dumps(cfg))
        check("auto in 100 MiB: every line equals the prompt run alone",
              p1.returncode == 0 and by_id(out) == by_id(out1), p1.stderr[-300:])
    check("the control: sequences = 3 (3 x the longest prompt's rows) does not fit 100 MiB",
          p3.returncode == 1 and "memory.device" in p3.stderr, p3.stderr[-300:])

    # Refused settings: one line naming the key, exit 1, no output.
    for what, batch, extra in (("with a dynamic tree", "sequences = 2",
                                f'draft = "{draft}"\n[speculation]\ntree = "dyspec"\n'),
                               ("sequences = 0", "sequences = 0", ""),
                               ("a word other than auto", 'sequences = "many"', "")):
        out = os.path.join(tmp, "refused.jsonl")
        p = run(rw, write(os.path.join(tmp, "refused.toml"), job_text(model, out, batch, extra=extra)))
        err = p.stderr.strip()
        check(f"refused: {what}", p.returncode == 1 and len(err.splitlines()) == 1 and "batch.sequences" in err
              and not os.path.exists(out), err)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
