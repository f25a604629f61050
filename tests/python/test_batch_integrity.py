#!/usr/bin/env python3
"""Issue 32: what a batch job trusts (labels "python;model"; well under a minute).

    python3 tests/python/test_batch_integrity.py --redwood build/redwood --model models/SmolLM2-135M-Instruct.Q4_1.gguf

Checks:
    changed model : a streamed target rewritten under a running job stops it (exit 1, one line naming
                    the file), and no line is written after the change; [memory] verify_io = true runs.
    resume checks : a duplicated id, or a line answered for a prompt since edited under its id -> exit 1,
                    one line, the file untouched; a line whose id is not a prompt is kept, reported, not done.
    long prompt   : a prompt of more than 64 bytes per token of the context (8 MiB, ctx 256) is refused before
                    it is tokenized (small peak RSS), naming its id; on_bad_line = "skip" skips it; generate too.
Prints "N passed, M failed" and exits non-zero on any failure.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from harness import check, summary as finish, cli_args


def write(path: str, text: str) -> str:
    with open(path, "w") as f:
        f.write(text)
    return path


def job_text(model: str, out: str, prompts: str, memory: str = "", max_tokens: int = 8) -> str:
    return (f'[model]\ntarget = "{model}"\n' + (f"[memory]\n{memory}" if memory else "") +
            f'[sampling]\ntemperature = 0.0\nmax_tokens = {max_tokens}\n'
            f'[input]\nprompts = "{prompts}"\n'
            f'[output]\npath = "{out}"\nfsync_every = 1\n')


def count_lines(path: str) -> int:
    try:
        with open(path) as f:
            return sum(1 for l in f if l.endswith("\n"))
    except FileNotFoundError:
        return 0


def lines_of(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(l) for l in f.read().splitlines()]


def main() -> int:
    args = cli_args()
    tmp = tempfile.mkdtemp(prefix="redwood_batch_integrity_")
    env = dict(os.environ, REDWOOD_CACHE_DIR=os.path.join(tmp, "cache"))
    rw = args.redwood
    model = os.path.join(tmp, "target.gguf")
    shutil.copyfile(args.model, model)
    prompts = write(os.path.join(tmp, "p.jsonl"),
                    "".join(json.dumps({"id": f"p{i}", "prompt": f"Count from {i} to {i + 20}:"}) + "\n"
                            for i in range(12)))

    def run(job: str, *extra: str, timeout: int = 300) -> subprocess.CompletedProcess:
        return subprocess.run([rw, "batch", job, "-q", *extra], capture_output=True, text=True, timeout=timeout, env=env)

    # ---- a huge prompt is bounded by bytes before tokenizing ----
    big = write(os.path.join(tmp, "big.jsonl"), json.dumps({"id": "big", "prompt": "word " * ((8 << 20) // 5)}) + "\n" +
                json.dumps({"id": "small", "prompt": "Say hi."}) + "\n")
    out = os.path.join(tmp, "big.out.jsonl")
    job = write(os.path.join(tmp, "big.toml"), job_text(args.model, out, big, "ctx = 256\n", max_tokens=2))
    t0 = time.time()
    proc = subprocess.Popen([rw, "batch", job, "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env)
    err = proc.stderr.read()
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    rss_mib = ru.ru_maxrss / 1024
    check("8 MiB prompt, ctx 256: refused before tokenizing, naming the id", proc.returncode == 1 and
          err.count("\n") == 1 and ':1: id "big": the prompt is ' in err and "so it is not tokenized" in err and
          'on_bad_line = "skip"' in err and not os.path.exists(out), f"rc {proc.returncode}: {err[-600:]}")
    # Against the binary's own footprint: a CUDA build maps the CUDA libraries (about 220 MiB at start).
    base = subprocess.Popen([rw, "--version"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base_mib = os.wait4(base.pid, 0)[2].ru_maxrss / 1024
    check("8 MiB prompt: small peak memory", rss_mib < base_mib + 150,
          f"{rss_mib:.0f} MiB (the binary alone {base_mib:.0f}), {time.time() - t0:.1f} s")
    job = write(os.path.join(tmp, "big_skip.toml"),
                job_text(args.model, out, big, "ctx = 256\n", max_tokens=2).replace("[output]",
                                                                                    'on_bad_line = "skip"\n[output]'))
    p = run(job)
    check("8 MiB prompt, on_bad_line = skip: skipped, the rest runs", p.returncode == 0 and
          'skipped ' in p.stderr and 'id "big"' in p.stderr and [r["id"] for r in lines_of(out)] == ["small"],
          p.stderr[-600:])
    p = subprocess.run([rw, "generate", "--model", args.model, "--ctx", "64", "--max-tokens", "2",
                        "--prompt", "x" * 100000], capture_output=True, text=True, timeout=120, env=env)
    check("generate --prompt of 100000 bytes, --ctx 64: refused before tokenizing", p.returncode == 1 and
          "--prompt is 100000 bytes; --ctx 64 allows at most 64 bytes per token (4096)" in p.stderr, p.stderr[-600:])

    # ---- resume checks what the output already holds ----
    few = write(os.path.join(tmp, "few.jsonl"),
                "".join(json.dumps({"id": f"p{i}", "prompt": f"Say {i}."}) + "\n" for i in range(4)))
    out = os.path.join(tmp, "resume.jsonl")
    job = write(os.path.join(tmp, "resume.toml"), job_text(args.model, out, few, max_tokens=2))
    p = run(job)
    check("resume: the first run", p.returncode == 0 and count_lines(out) == 4, p.stderr[-600:])
    with open(out) as f:
        orig = f.read()
    first = orig.splitlines(keepends=True)[0]

    def resume_refused(name: str, content: str, expect: str) -> None:
        write(out, content)
        p = run(job)
        with open(out) as f:
            after = f.read()
        check(f"resume: {name}: refused, file untouched", p.returncode == 1 and p.stderr.count("\n") == 1 and
              expect in p.stderr and after == content, f"rc {p.returncode}: {p.stderr[-600:]}")

    resume_refused("a duplicated id", orig + first, ':5: id "p0" is already on line 1')
    write(few, few_text := open(few).read().replace("Say 2.", "Say two."))
    resume_refused("a prompt edited under its id", orig, ':3: id "p2" was answered for another prompt')
    write(few, few_text.replace("Say two.", "Say 2."))
    foreign = json.loads(first)
    foreign["id"] = "not-a-prompt"
    write(out, orig + json.dumps(foreign) + "\n")
    p = run(job)
    s = json.load(open(out + ".summary.json"))
    check("resume: a line whose id is not a prompt: kept, reported, not counted", p.returncode == 0 and
          "1 lines have ids that are not in" in p.stderr and count_lines(out) == 5 and s["prompts"]["done"] == 4,
          p.stderr[-600:])
    old = "".join(json.dumps({k: v for k, v in json.loads(l).items() if k != "prompt_hash"}) + "\n"
                  for l in orig.splitlines())
    write(out, old)
    p = run(job)
    check("resume: lines without a prompt hash (older redwood): accepted and said so", p.returncode == 0 and
          "4 lines from an older redwood carry no prompt hash" in p.stderr, p.stderr[-600:])

    # ---- verify_io = true is a job key (it was rejected as unknown) ----
    out = os.path.join(tmp, "vio.jsonl")
    job = write(os.path.join(tmp, "vio.toml"),
                job_text(model, out, prompts, 'device = "110MiB"\nctx = 256\nverify_io = true\n', max_tokens=2))
    p = run(job)
    check("verify_io = true: accepted and the job runs", p.returncode == 0 and count_lines(out) == 12 and
          json.load(open(out + ".summary.json"))["config"]["verify_io"] is True, p.stderr[-600:])
    job = write(os.path.join(tmp, "vio_nobudget.toml"), job_text(model, out + "2", prompts, "verify_io = true\n"))
    p = run(job)
    check("verify_io without a budget: refused at validation", p.returncode == 1 and
          "memory.verify_io" in p.stderr and p.stderr.count("\n") == 1, p.stderr[-600:])

    # ---- a model file changed under a running (streamed) job ----
    out = os.path.join(tmp, "changed.jsonl")
    job = write(os.path.join(tmp, "changed.toml"), job_text(model, out, prompts, 'device = "110MiB"\nctx = 256\n', max_tokens=16))
    proc = subprocess.Popen([rw, "batch", job, "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env)
    deadline = time.time() + 240
    while count_lines(out) < 1 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    size = os.path.getsize(model)
    with open(model, "r+b") as f:  # 1 MiB of zeros in the middle: the same size and inode, a new mtime
        f.seek(size // 2)
        f.write(b"\0" * (1 << 20))
    at_change = count_lines(out)
    _, err = proc.communicate(timeout=300)
    final = count_lines(out)
    last = err.strip().splitlines()[-1] if err.strip() else ""
    check("changed model: exit 1 with one line naming the file", proc.returncode == 1 and
          err.count("changed while the job ran") == 1 and model in last and "changed while the job ran" in last and
          "it was modified" in last, f"rc {proc.returncode}: {err[-600:]}")
    check("changed model: no line written after the change", 1 <= at_change == final < 12, f"{at_change} -> {final}")

    # a replaced file (the same bytes, a new inode)
    shutil.copyfile(args.model, model)
    os.remove(out)
    proc = subprocess.Popen([rw, "batch", job, "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env)
    while count_lines(out) < 1 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    shutil.copyfile(args.model, model + ".new")
    os.replace(model + ".new", model)
    at_change = count_lines(out)
    _, err = proc.communicate(timeout=300)
    check("replaced model (same bytes, new inode): stopped", proc.returncode == 1 and "replaced by another file" in err and
          at_change == count_lines(out) < 12, f"rc {proc.returncode}: {err[-600:]}")

    shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
