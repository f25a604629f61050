#!/usr/bin/env python3
"""`redwood batch` as real subprocesses (labels "python;model"; a few minutes).

    python3 tests/python/test_batch_cli.py --redwood build/redwood --model models/SmolLM2-135M-Instruct.Q4_1.gguf

Checks:
    crash safety : a 24-prompt job killed with SIGKILL at random points several times and
                   resumed each time ends with exactly one valid line per id, identical
                   (greedy: id, text, tokens, finish reason) to an uninterrupted run.
    torn line    : half a line appended by hand is dropped on resume and regenerated.
    never mix    : resuming with other settings (another model under the same file name among
                   them; a copy of the same model elsewhere resumes), into a file that is not a job's output, or
                   while another run writes it -> exit 1, the file untouched.
    signals      : SIGINT and SIGTERM stop cleanly (exit 130 / 143, a message saying how
                   to resume, only whole lines written); resuming completes the job.
    speculative  : the same job with a self-draft (greedy, Sequoia tree) gives the same output.
    summary      : counts, s/token percentiles, acceptance.
    bad input    : bad configs, a bad prompt line (fail / skip), an impossible memory budget
                   -> exit 1 with one line naming file, line and key; no output file created.
Prints "N passed, M failed" and exits non-zero on any failure.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

from harness import check, default_signals, summary as finish, scratch_dir, write, lines_of

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPTS = os.path.join(ROOT, "configs", "jobs", "prompts-smoke.jsonl")



def job_text(model: str, out: str, extra: str = "", draft: str = "", prompts: str = PROMPTS) -> str:
    t = f'[model]\ntarget = "{model}"\n'
    if draft:
        t += f'draft = "{draft}"\n'
    t += extra
    t += ('[sampling]\ntemperature = 0.0\nmax_tokens = 24\n'
          f'[input]\nprompts = "{prompts}"\nchat = true\n'
          f'[output]\npath = "{out}"\nfsync_every = 1\nprogress_every = 0.5\n')
    return t


def key(r: dict) -> tuple:
    return (json.dumps(r["id"]), r["text"], tuple(r["tokens"]), r["finish_reason"])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--redwood", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    args = ap.parse_args()
    rng = random.Random(args.seed)
    print(f"seed {args.seed}", flush=True)
    tmp = scratch_dir("redwood_batch_cli_")
    rw = args.redwood
    with open(PROMPTS) as f:
        ids = [json.loads(l)["id"] for l in f if l.strip()]
    check("at least 20 prompts", len(ids) >= 20, str(len(ids)))

    # ---- the uninterrupted reference ----
    ref_out = os.path.join(tmp, "ref.jsonl")
    job = write(os.path.join(tmp, "ref.toml"), job_text(args.model, ref_out))
    t0 = time.time()
    p = subprocess.run([rw, "batch", job], capture_output=True, text=True, timeout=900)
    full_seconds = time.time() - t0
    check("reference run", p.returncode == 0, p.stderr[-2000:])
    ref = {json.dumps(r["id"]): key(r) for r in lines_of(ref_out)}
    check("reference: one line per id", sorted(ref) == sorted(json.dumps(i) for i in ids), str(sorted(ref)))
    check("plain progress lines in logs", "batch: " in p.stderr and "prompts" in p.stderr, p.stderr[-500:])
    summary = json.load(open(ref_out + ".summary.json"))
    check("summary counts", summary["prompts"]["done"] == len(ids) and summary["complete"] and
          summary["s_per_token"]["p50"] > 0 and summary["s_per_token"]["p99"] >= summary["s_per_token"]["p50"],
          json.dumps(summary)[:500])

    # ---- SIGKILL at random points, resume, repeat ----
    out = os.path.join(tmp, "killed.jsonl")
    job = write(os.path.join(tmp, "killed.toml"), job_text(args.model, out))
    kills = 0
    runs = 0
    while runs < 40:
        runs += 1
        proc = subprocess.Popen([rw, "batch", job], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                preexec_fn=default_signals)
        if kills < 4:
            time.sleep(rng.uniform(0.3, max(0.6, full_seconds / 4)))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                kills += 1
            proc.communicate(timeout=600)
            continue
        _, err = proc.communicate(timeout=900)
        check("resumed run completes", proc.returncode == 0, err[-1500:])
        break
    check("killed at least 4 times mid-run", kills >= 4, f"{kills} kills in {runs} runs")
    got = lines_of(out)
    got_ids = [json.dumps(r["id"]) for r in got]
    check("after kills: exactly one line per id", sorted(got_ids) == sorted(ref), f"{len(got_ids)} lines")
    check("after kills: output identical to the uninterrupted run",
          all(ref.get(json.dumps(r["id"])) == key(r) for r in got))

    # ---- a torn last line ----
    with open(out) as f:
        lines = f.read().splitlines(keepends=True)
    victim = lines[-1]
    write(out, "".join(lines[:-1]) + victim[: len(victim) // 2])
    p = subprocess.run([rw, "batch", job], capture_output=True, text=True, timeout=900)
    got = lines_of(out)
    check("torn line dropped and regenerated", p.returncode == 0 and "torn last line" in p.stderr and
          sorted(json.dumps(r["id"]) for r in got) == sorted(ref) and all(ref[json.dumps(r["id"])] == key(r) for r in got),
          p.stderr[-800:])
    p = subprocess.run([rw, "batch", job], capture_output=True, text=True, timeout=900)
    check("complete job: re-run does nothing", p.returncode == 0 and "24 of 24 prompts already done" in p.stderr and
          len(lines_of(out)) == len(ref), p.stderr[-500:])

    # ---- never mix: other settings, a foreign file, two runs at once ----
    before = open(out).read()
    # The target is known by content: a copy elsewhere resumes; another model
    # under the same file name (here a 2-block self-draft) is refused.
    base = os.path.basename(args.model)
    for sub in ("copy", "impostor"):
        os.makedirs(os.path.join(tmp, sub), exist_ok=True)
    copy = os.path.join(tmp, "copy", base)
    shutil.copyfile(args.model, copy)
    p = subprocess.run([rw, "batch", write(os.path.join(tmp, "copy.toml"), job_text(copy, out))],
                       capture_output=True, text=True, timeout=300)
    check("the same model copied elsewhere resumes", p.returncode == 0 and "24 of 24 prompts already done" in p.stderr
          and open(out).read() == before, p.stderr[-500:])
    impostor = os.path.join(tmp, "impostor", base)
    p = subprocess.run([rw, "make-draft", "--from", args.model, "--layers", "2", "--out", impostor],
                       capture_output=True, text=True, timeout=300)
    check("make-draft for the impostor", p.returncode == 0, p.stderr[-500:])
    p = subprocess.run([rw, "batch", write(os.path.join(tmp, "impostor.toml"), job_text(impostor, out))],
                       capture_output=True, text=True, timeout=300)
    fps = [json.loads(subprocess.run([rw, "info", path, "--json"], capture_output=True, text=True,
                                     check=True).stdout)["fingerprint"] for path in (args.model, impostor)]
    check("another model under the same file name: refused, file untouched; `info` shows both fingerprints",
          p.returncode == 1 and open(out).read() == before and
          f'written with other settings (target_fingerprint "{fps[0]}" -> "{fps[1]}")' in p.stderr,
          p.stderr[-500:] + str(fps))
    os.remove(copy)
    os.remove(impostor)
    other = write(os.path.join(tmp, "other.toml"), job_text(args.model, out).replace("max_tokens = 24", "max_tokens = 12"))
    p = subprocess.run([rw, "batch", other], capture_output=True, text=True, timeout=300)
    check("resume with other settings: refused, file untouched", p.returncode == 1 and
          "written with other settings (max_tokens 24 -> 12)" in p.stderr and open(out).read() == before,
          p.stderr[-500:])
    notes = write(os.path.join(tmp, "notes.txt"), "important notes\n")
    p = subprocess.run([rw, "batch", job, "--output", notes, "-q"], capture_output=True, text=True, timeout=300)
    check("a file that is not this job's output: refused, untouched", p.returncode == 1 and
          "not a result line of redwood batch" in p.stderr and open(notes).read() == "important notes\n",
          p.stderr[-500:])
    # A run holds an exclusive flock(2) on its output for its whole life: hold one here as that run.
    out = os.path.join(tmp, "twice.jsonl")
    job = write(os.path.join(tmp, "twice.toml"), job_text(args.model, out))
    with open(out, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        p = subprocess.run([rw, "batch", job, "-q"], capture_output=True, text=True, timeout=300)
    check("a second run of a running job: refused, nothing written", p.returncode == 1 and
          "another redwood run is writing this file" in p.stderr and os.path.getsize(out) == 0, p.stderr[-500:])
    p = subprocess.run([rw, "batch", job, "-q"], capture_output=True, text=True, timeout=900)
    check("...and once released, the job runs", p.returncode == 0 and
          sorted(json.dumps(r["id"]) for r in lines_of(out)) == sorted(ref), p.stderr[-500:])

    # ---- SIGINT / SIGTERM ----
    for sig, code, name in [(signal.SIGINT, 130, "SIGINT"), (signal.SIGTERM, 143, "SIGTERM")]:
        out = os.path.join(tmp, f"sig{code}.jsonl")
        job = write(os.path.join(tmp, f"sig{code}.toml"), job_text(args.model, out))
        proc = subprocess.Popen([rw, "batch", job], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                preexec_fn=default_signals)
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            if os.path.exists(out) and os.path.getsize(out) > 0:
                break
            time.sleep(0.05)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=300)
        partial = lines_of(out)
        check(f"{name}: exit {code} with a resume hint", proc.returncode == code and
              f"interrupted by {name}" in err and "run the same command again to resume" in err,
              f"rc {proc.returncode}: {err[-600:]}")
        check(f"{name}: only whole, correct lines", 0 < len(partial) < len(ref) and
              all(ref[json.dumps(r["id"])] == key(r) for r in partial), f"{len(partial)} lines")
        p = subprocess.run([rw, "batch", job], capture_output=True, text=True, timeout=900)
        check(f"{name}: resume completes", p.returncode == 0 and
              sorted(json.dumps(r["id"]) for r in lines_of(out)) == sorted(ref), p.stderr[-500:])

    # ---- speculative decoding through a job: same greedy output ----
    draft = os.path.join(tmp, "draft.gguf")
    p = subprocess.run([rw, "make-draft", "--from", args.model, "--layers", "10", "--out", draft],
                       capture_output=True, text=True, timeout=300)
    check("make-draft", p.returncode == 0, p.stderr)
    out = os.path.join(tmp, "spec.jsonl")
    spec = ('[memory]\ndevice = "400MiB"\nctx = 512\n'
            '[speculation]\ntree = "sequoia"\nverify = "greedy"\nbudget = 16\ndepth = 6\n')
    job = write(os.path.join(tmp, "spec.toml"), job_text(args.model, out, spec, draft))
    p = subprocess.run([rw, "batch", job, "--quiet"], capture_output=True, text=True, timeout=900)
    got = lines_of(out) if p.returncode == 0 else []
    check("speculative job == autoregressive reference", p.returncode == 0 and
          sorted(ref) == sorted(json.dumps(r["id"]) for r in got) and all(ref[json.dumps(r["id"])] == key(r) for r in got),
          p.stderr[-800:])
    s = json.load(open(out + ".summary.json")) if p.returncode == 0 else {}
    check("speculative summary has acceptance and offload stats",
          (s.get("mean_accepted") or 0) >= 1.0 and "offload" in s, json.dumps(s)[:400])
    check("speculative lines carry metrics", all(r["metrics"]["target_passes"] > 0 for r in got))

    # a dynamic tree (DySpec, layer-wise threshold) through a job: same greedy output too
    out = os.path.join(tmp, "dyspec.jsonl")
    dyn = '[memory]\nctx = 512\n[speculation]\ntree = "dyspec"\nbudget = 24\ndepth = 8\nthreshold = 0.05\n'
    job = write(os.path.join(tmp, "dyspec.toml"), job_text(args.model, out, dyn, draft))
    p = subprocess.run([rw, "batch", job, "--quiet"], capture_output=True, text=True, timeout=900)
    got = lines_of(out) if p.returncode == 0 else []
    check("dyspec job == autoregressive reference", p.returncode == 0 and
          sorted(ref) == sorted(json.dumps(r["id"]) for r in got) and all(ref[json.dumps(r["id"])] == key(r) for r in got),
          p.stderr[-800:])
    s = json.load(open(out + ".summary.json")) if p.returncode == 0 else {}
    check("dyspec summary names the tree", s.get("config", {}).get("tree") == "dyspec" and (s.get("mean_tree_nodes") or 0) > 1, json.dumps(s)[:400])

    # ---- overrides: --prompts / --output ----
    sub = write(os.path.join(tmp, "sub.jsonl"),
                '{"id": "x", "prompt": "Say hi."}\n{"id": 5, "messages": [{"role": "user", "content": "Say bye."}]}\n')
    out2 = os.path.join(tmp, "dir", "o2.jsonl")
    p = subprocess.run([rw, "batch", os.path.join(tmp, "ref.toml"), "--prompts", sub, "--output", out2, "-q"],
                       capture_output=True, text=True, timeout=600)
    check("--prompts/--output override the job", p.returncode == 0 and
          [r["id"] for r in lines_of(out2)] == ["x", 5] and os.path.exists(out2 + ".summary.json"), p.stderr[-500:])

    # ---- bad input: one line, exit 1, nothing written ----
    def bad(name: str, text: str, expect: str, prompts_text: str | None = None) -> None:
        pr = PROMPTS
        if prompts_text is not None:
            pr = write(os.path.join(tmp, name + ".jsonl"), prompts_text)
        o = os.path.join(tmp, name + ".out.jsonl")
        j = write(os.path.join(tmp, name + ".toml"), text.replace("@PROMPTS@", pr).replace("@OUT@", o))
        p = subprocess.run([rw, "batch", j], capture_output=True, text=True, timeout=300)
        err = p.stderr.strip()
        check(f"bad input: {name}", p.returncode == 1 and err.count("\n") == 0 and expect in err and
              not os.path.exists(o), f"rc {p.returncode}: {err[:500]}")

    base = job_text(args.model, "@OUT@", prompts="@PROMPTS@")
    bad("unknown key", base + "colour = 1\n", ".toml:13: unknown key 'output.colour'")
    bad("wrong type", base.replace("max_tokens = 24", 'max_tokens = "24"'),
        ".toml:5: sampling.max_tokens: expected an integer, got a string")
    bad("missing model", base.replace(args.model, "/nonexistent.gguf"), ".toml:2: model.target: no such file")
    bad("impossible budget", base.replace("[sampling]", '[memory]\ndevice = "8MiB"\n[sampling]'),
        ".toml:4: memory.device: device budget 8.00 MiB is too small")
    bad("bad prompt line", base, ".jsonl:2: not valid JSON (set input.on_bad_line",
        prompts_text='{"id": 1, "prompt": "hi"}\n{"id": 2, "prompt": \n')
    bad("duplicate id", base, ".jsonl:2: duplicate id 1 (first on line 1)",
        prompts_text='{"id": 1, "prompt": "hi"}\n{"id": 1, "prompt": "ho"}\n')
    bad("prompt too long", base.replace("[output]", "[output]").replace("[sampling]", "[memory]\nctx = 32\n[sampling]"),
        ".jsonl:1: the prompt has")
    skip_prompts = write(os.path.join(tmp, "skip.jsonl"), '{"id": 1, "prompt": "Say hi."}\nnot json\n{"id": 2}\n')
    o = os.path.join(tmp, "skip.out.jsonl")
    j = write(os.path.join(tmp, "skip.toml"),
              job_text(args.model, o, prompts=skip_prompts).replace('chat = true', 'chat = true\non_bad_line = "skip"'))
    p = subprocess.run([rw, "batch", j], capture_output=True, text=True, timeout=300)
    check("on_bad_line = skip: reported with line numbers, the rest runs", p.returncode == 0 and
          "skip.jsonl:2: not valid JSON" in p.stderr and "skip.jsonl:3: give exactly one of" in p.stderr and
          [r["id"] for r in lines_of(o)] == [1] and json.load(open(o + ".summary.json"))["prompts"]["bad_lines"] == 2,
          p.stderr[-600:])

    return finish()


if __name__ == "__main__":
    sys.exit(main())
