#!/usr/bin/env python3
"""`redwood batch --shard K/N` and `--check-shards N` (issue 44 item 5: a job split
across machines by a scheduler), as real subprocesses on the default model
(labels "python;model"; well under a minute).

    python3 tests/python/test_batch_shards.py --redwood build/redwood --model models/SmolLM2-135M-Instruct.Q4_1.gguf

Checks:
    empty shard : a 3-prompt job whose ids all fall in shard 2: shards 1 and 3 run nothing, write a
                  summary and no results file, and the check passes.
    shards      : an 18-prompt job in 3 shards writes out.shard-K-of-3.jsonl (+ summaries), whose lines
                  together equal the unsharded job's, line for line; --check-shards 3 passes (exit 0, one line).
    check fails : a deleted line, a shard's output copied over another's, a shard run with another
                  max_tokens -> exit 1, one line naming the missing id / the line / the setting.
    refused     : resuming shard 2 into shard 1's output; --shard 3/2, 0/0, a/b; --shard with --check-shards
                  -> exit 1, one line, nothing written.
    progress    : a shared-pass run's progress line shows the prompts in flight.
    resume      : a shard killed (SIGKILL) mid-run fails the check, and resumed, passes it with the same lines.
Prints "N passed, M failed" and exits non-zero on any failure.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

from harness import check, summary as finish, scratch_dir, write, lines_of, cli_args

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPTS = os.path.join(ROOT, "configs", "jobs", "prompts-smoke.jsonl")


def job_text(model: str, out: str, prompts: str, max_tokens: int = 12) -> str:
    return (f'[model]\ntarget = "{model}"\n'
            f'[sampling]\ntemperature = 0.0\nmax_tokens = {max_tokens}\n'
            f'[input]\nprompts = "{prompts}"\nchat = true\n'
            f'[output]\npath = "{out}"\nfsync_every = 1\n')


def by_id(paths: list[str]) -> dict:
    out = {}
    for p in paths:
        for r in lines_of(p) if os.path.exists(p) else []:
            out[json.dumps(r["id"])] = (r["text"], tuple(r["tokens"]), r["finish_reason"])
    return out


def batch(rw: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([rw, "batch", *args], capture_output=True, text=True, timeout=timeout)


def one_line(p: subprocess.CompletedProcess) -> bool:
    return len(p.stderr.strip().splitlines()) == 1


def main() -> int:
    args = cli_args()
    rw, model = args.redwood, args.model
    tmp = scratch_dir("redwood_batch_shards_")
    with open(PROMPTS) as f:
        first = f.read().splitlines()[:18]
    prompts = write(os.path.join(tmp, "p.jsonl"), "\n".join(first) + "\n")
    ids = [json.dumps(json.loads(l)["id"]) for l in first]

    # The whole job, unsharded: the reference.
    ref = os.path.join(tmp, "ref.jsonl")
    p = batch(rw, write(os.path.join(tmp, "ref.toml"), job_text(model, ref, prompts)), "-q")
    check("unsharded reference: exit 0", p.returncode == 0, p.stderr[-400:])

    out = os.path.join(tmp, "out.jsonl")
    job = write(os.path.join(tmp, "job.toml"), job_text(model, out, prompts))
    shard = [os.path.join(tmp, f"out.shard-{k}-of-3.jsonl") for k in (1, 2, 3)]
    sizes = []
    for k in (1, 2, 3):
        p = batch(rw, job, "--shard", f"{k}/3", "-q")
        check(f"shard {k}/3: exit 0", p.returncode == 0, p.stderr[-400:])
        summ = json.load(open(shard[k - 1] + ".summary.json")) if os.path.exists(shard[k - 1] + ".summary.json") else {}
        sizes.append(summ.get("prompts", {}).get("total", 0))
        check(f"shard {k}/3: its summary names the shard and is complete",
              summ.get("config", {}).get("shard") == f"{k}/3" and summ.get("complete") is True, json.dumps(summ)[:300])
    check("no unsharded output written", not os.path.exists(out), "")
    check("the shards split the 18 prompts", sum(sizes) == 18 and min(sizes) > 0, str(sizes))
    check("the shards' lines equal the unsharded job's, line for line",
          by_id(shard) == by_id([ref]) and sorted(by_id(shard)) == sorted(ids), "")
    check("every shard line records its shard",
          all(r["settings"].get("shard") == f"{k}/3" for k in (1, 2, 3) for r in lines_of(shard[k - 1])), "")

    def check_shards(name: str, expect_ok: bool, expect: str) -> None:
        p = batch(rw, job, "--check-shards", "3")
        check(name, p.returncode == (0 if expect_ok else 1) and one_line(p) and expect in p.stderr,
              f"rc={p.returncode} {p.stderr[-500:]}")

    check_shards("check: 3 shards pass", True, "redwood: 18 prompts answered once by 3 shards")
    good = {k: open(shard[k - 1]).read() for k in (1, 2, 3)}

    def restore() -> None:
        for k in (1, 2, 3):
            write(shard[k - 1], good[k])

    # A deleted line: its id is named, with the shard it belongs to.
    gone = json.loads(good[2].splitlines()[0])["id"]
    write(shard[1], "".join(l + "\n" for l in good[2].splitlines()[1:]))
    check_shards("check: a deleted line names its id", False,
                 f"id {json.dumps(gone)} ({prompts}:")
    check_shards("check: ... and its shard", False, f"shard 2/3 ('{shard[1]}') has no line for it")
    p = batch(rw, job, "--shard", "2/3", "-q")
    check("the shard resumed: exit 0, the line back", p.returncode == 0 and by_id(shard) == by_id([ref]), p.stderr[-300:])
    check_shards("check: passes again after the resume", True, "18 prompts answered once by 3 shards")
    restore()

    # A shard's output copied over another's; resuming shard 2 into shard 1's output.
    shutil.copyfile(shard[0], shard[1])
    check_shards("check: a duplicated shard", False, f"{shard[1]}:1: written by shard 1/3, in shard 2/3's output")
    before = open(shard[1]).read()
    p = batch(rw, job, "--shard", "2/3", "-q")
    check("shard 2 refuses to resume into shard 1's output (one line)",
          p.returncode == 1 and one_line(p) and 'shard "1/3" -> "2/3"' in p.stderr and open(shard[1]).read() == before,
          p.stderr[-400:])
    restore()

    # Shard 3 run with another max_tokens (the same output name).
    os.remove(shard[2])
    other = write(os.path.join(tmp, "other.toml"), job_text(model, out, prompts, max_tokens=10))
    p = batch(rw, other, "--shard", "3/3", "-q")
    check("shard 3 with max_tokens 10: exit 0", p.returncode == 0, p.stderr[-300:])
    check_shards("check: a shard run with another setting", False,
                 f"{shard[2]}:1: shard 3/3 ran with other settings than {shard[0]}:1 (max_tokens 12 -> 10)")
    restore()
    check_shards("check: restored outputs pass", True, "18 prompts answered once by 3 shards")

    # Bad shards and options: one line, exit 1, nothing written.
    for bad in ("3/2", "0/0", "a/b"):
        p = batch(rw, job, "--shard", bad)
        check(f"--shard {bad}: refused", p.returncode == 1 and one_line(p) and f"got '{bad}'" in p.stderr,
              f"rc={p.returncode} {p.stderr}")
    p = batch(rw, job, "--shard", "1/3", "--check-shards", "3")
    check("--shard with --check-shards: refused", p.returncode == 1 and one_line(p), f"rc={p.returncode} {p.stderr}")
    p = batch(rw, job, "--check-shards", "0")
    check("--check-shards 0: refused", p.returncode == 1 and one_line(p), f"rc={p.returncode} {p.stderr}")
    check("nothing else written", sorted(f for f in os.listdir(tmp) if f.startswith("out.")) ==
          sorted([os.path.basename(s) for s in shard] + [os.path.basename(s) + ".summary.json" for s in shard]),
          str(sorted(os.listdir(tmp))))

    # A job whose prompts all fall in one shard (ids "q00".."q02": shard 2 of 3): the others are empty.
    few_out = os.path.join(tmp, "few.jsonl")
    few = write(os.path.join(tmp, "few.toml"), job_text(model, few_out, write(os.path.join(tmp, "few.jsonl.in"),
                                                                                "\n".join(first[:3]) + "\n")))
    rcs = [batch(rw, few, "--shard", f"{k}/3", "-q").returncode for k in (1, 2, 3)]
    empty = [json.load(open(os.path.join(tmp, f"few.shard-{k}-of-3.jsonl.summary.json")))["prompts"]["total"]
             for k in (1, 3)]
    check("empty shards: exit 0, a summary of 0 prompts, no results file",
          rcs == [0, 0, 0] and empty == [0, 0] and
          not any(os.path.exists(os.path.join(tmp, f"few.shard-{k}-of-3.jsonl")) for k in (1, 3)), f"{rcs} {empty}")
    p = batch(rw, few, "--check-shards", "3")
    check("empty shards: the check passes", p.returncode == 0 and "3 prompts answered once by 3 shards" in p.stderr,
          p.stderr)

    # Shared passes ([batch] sequences = 4) as shard 1 of 1: the same lines; the progress line counts the
    # prompts in flight and their tokens.
    shared_out = os.path.join(tmp, "shared.jsonl")
    text = job_text(model, shared_out, prompts).replace("fsync_every = 1\n", "fsync_every = 1\nprogress_every = 0.01\n")
    p = batch(rw, write(os.path.join(tmp, "shared.toml"), "[batch]\nsequences = 4\n" + text), "--shard", "1/1")
    shared_file = os.path.join(tmp, "shared.shard-1-of-1.jsonl")
    check("shared passes, shard 1/1: the same lines", p.returncode == 0 and by_id([shared_file]) == by_id([ref]),
          p.stderr[-300:])
    check("shared passes: the progress line shows prompts in flight",
          any(" in flight | " in l and " tok/s" in l for l in p.stderr.splitlines() if l.startswith("batch: ")),
          p.stderr[-600:])

    # A shard killed mid-run: the check fails, a resume completes it with the same lines.
    big = max((1, 2, 3), key=lambda k: sizes[k - 1])
    partial = sizes[big - 1]
    for _ in range(3):
        os.remove(shard[big - 1])
        proc = subprocess.Popen([rw, "batch", job, "--shard", f"{big}/3", "-q"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            if os.path.exists(shard[big - 1]) and open(shard[big - 1]).read().count("\n") >= 1:
                break
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        partial = open(shard[big - 1]).read().count("\n")
        if partial < sizes[big - 1]:
            break
    check("killed shard: stopped mid-run", 0 < partial < sizes[big - 1], f"{partial} of {sizes[big - 1]}")
    p = batch(rw, job, "--check-shards", "3")  # its missing prompts, or its torn last line
    check("check: a killed shard fails", p.returncode == 1 and one_line(p) and (
        f"shard {big}/3 ('{shard[big - 1]}') has no line for it" in p.stderr or
        f"a torn last line (shard {big}/3 was interrupted)" in p.stderr), f"rc={p.returncode} {p.stderr[-400:]}")
    p = batch(rw, job, "--shard", f"{big}/3")
    check("killed shard resumed: exit 0", p.returncode == 0 and "resuming" in p.stderr, p.stderr[-300:])
    check("killed shard resumed: the same lines", by_id(shard) == by_id([ref]), "")
    check_shards("check: passes after the resume", True, "18 prompts answered once by 3 shards")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
