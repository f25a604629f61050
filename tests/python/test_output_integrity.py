#!/usr/bin/env python3
"""Issue 42: nothing lost, nothing silently wrong: outputs (labels "python;model"; under a minute).

    python3 tests/python/test_output_integrity.py --redwood build/redwood --model models/SmolLM2-135M-Instruct.Q4_1.gguf

Checks (src/util/output_path.h, the policy of every writer):
    owners : a batch job's results file is never replaced by another writer: a second job's summary
             named after it (explicitly, or by default: r.jsonl.summary.json), `logits --out` onto it,
             while the job runs (its lock) and after (its content) -> one-line error, the results
             intact and resumable; a results file replaced under a running job stops it (exit 1, one
             line) before it writes another line.
    links  : a link is written through or refused, never replaced: make-draft --out LINK -> /dev/stdout
             with stdout redirected to a file (an open descriptor), logits --out LINK -> /dev/stderr (a
             pipe), a link to nothing: refused, the link kept, nothing created; batch --output LINK ->
             /dev/stdout > FILE appends to FILE and puts its summary beside FILE, not beside the link.
    kill   : a writer killed with SIGKILL mid-write (pack) leaves nothing beside its output.
    fifo   : generate --trace FIFO with no reader ends with a one-line error (it blocked forever).
    sighup : SIGHUP stops batch like SIGINT: exit 129, "interrupted by SIGHUP ... resume", resumable.
    summaries: another job's summary, or the summary name of a running job's results -> refused.
    knobs  : REDWOOD_DECODE_THREADS / REDWOOD_IO_PRIORITY with bad values -> one-line error in every run.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

from harness import check, default_signals, scratch_dir, summary as finish, cli_args


def write(path: str, text: str) -> str:
    with open(path, "w") as f:
        f.write(text)
    return path


def job_text(model: str, out: str, prompts: str, summary: str = "", max_tokens: int = 4) -> str:
    return (f'[model]\ntarget = "{model}"\n[sampling]\ntemperature = 0.0\nmax_tokens = {max_tokens}\n'
            f'[input]\nprompts = "{prompts}"\n[output]\npath = "{out}"\nfsync_every = 1\n' +
            (f'summary = "{summary}"\n' if summary else ""))


def count_lines(path: str) -> int:
    try:
        with open(path, "rb") as f:
            return sum(1 for l in f if l.endswith(b"\n"))
    except FileNotFoundError:
        return 0


def read(path: str, mode: str = "r"):
    with open(path, mode, **({} if "b" in mode else {"errors": "replace"})) as f:
        return f.read()


def one_line_error(p, needle: str = "") -> bool:
    lines = p.stderr.strip().splitlines()
    return p.returncode == 1 and len(lines) == 1 and lines[0].startswith("redwood: ") and needle in lines[0]


def main() -> int:
    args = cli_args()
    if not os.path.exists(args.model):
        print(f"SKIP: {args.model} missing (run tools/fetch-models.sh)")
        return 0
    tmp = scratch_dir("redwood_output_integrity_")
    env = dict(os.environ, REDWOOD_CACHE_DIR=os.path.join(tmp, "cache"))
    rw, model = args.redwood, args.model

    def run(argv: list[str], timeout: float = 120, **kw) -> subprocess.CompletedProcess:
        kw.setdefault("stdout", subprocess.PIPE)
        try:
            return subprocess.run([rw, *argv], stderr=subprocess.PIPE, text=True, timeout=timeout, env=env, **kw)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess([rw, *argv], None, "", "TIMEOUT (hung)")

    def start(argv: list[str]) -> subprocess.Popen:
        return subprocess.Popen([rw, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                                preexec_fn=default_signals)

    def wait_lines(path: str, n: int, proc: subprocess.Popen) -> None:
        deadline = time.time() + 120
        while count_lines(path) < n and proc.poll() is None and time.time() < deadline:
            time.sleep(0.01)

    few = write(os.path.join(tmp, "few.jsonl"),
                "".join(json.dumps({"id": f"q{i}", "prompt": f"Say {i}."}) + "\n" for i in range(3)))
    many = write(os.path.join(tmp, "many.jsonl"),
                 "".join(json.dumps({"id": f"p{i}", "prompt": f"Count from {i} to {i + 50}:"}) + "\n"
                         for i in range(40)))

    # ---- owners: a finished job's results ----------------------------------------------------
    a = os.path.join(tmp, "a.jsonl")
    job_a = write(os.path.join(tmp, "a.toml"), job_text(model, a, few))
    p = run(["batch", job_a, "-q"])
    check("owners: job A runs", p.returncode == 0 and count_lines(a) == 3, p.stderr[-400:])
    a_text = read(a)
    job_b = write(os.path.join(tmp, "b.toml"), job_text(model, os.path.join(tmp, "b.jsonl"), few, summary=a))
    p = run(["batch", job_b, "-q"])
    check("owners: job B's summary named A's results: refused", one_line_error(p, "holds a batch job's results"),
          f"rc={p.returncode} {p.stderr[-400:]}")
    check("owners: A's results intact after B", read(a) == a_text, "replaced")
    p = run(["logits", "-m", model, "--tokens", "1,2", "--out", a])
    check("owners: logits --out A's results: refused", one_line_error(p, "holds a batch job's results"),
          f"rc={p.returncode} {p.stderr[-400:]}")
    check("owners: A's results intact after logits", read(a) == a_text, "replaced")
    p = run(["batch", job_a, "-q"])
    check("owners: A resumes (nothing to do)", p.returncode == 0 and read(a) == a_text, p.stderr[-400:])
    # A's summary is A's record: B may not write its own summary over it.
    a_summary = read(a + ".summary.json")
    job_b = write(os.path.join(tmp, "b3.toml"),
                  job_text(model, os.path.join(tmp, "b3.jsonl"), few, summary=a + ".summary.json"))
    p = run(["batch", job_b, "-q"])
    check("owners: job B's summary named A's summary: refused",
          one_line_error(p, "is the summary of another job's results"), f"rc={p.returncode} {p.stderr[-400:]}")
    check("owners: A's summary intact after B", read(a + ".summary.json") == a_summary, "replaced")
    # A running job's summary name is taken by nobody else: a lock held on C's results (as a running job
    # holds it) makes C.summary.json refused as another job's output.
    import fcntl
    c = write(os.path.join(tmp, "c.jsonl"), "")
    with open(c, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        job_d = write(os.path.join(tmp, "d.toml"), job_text(model, c + ".summary.json", few))
        p = run(["batch", job_d, "-q"])
    check("owners: B's output named a running job's summary: refused",
          one_line_error(p, "the summary name of") and not os.path.exists(c + ".summary.json"),
          f"rc={p.returncode} {p.stderr[-400:]}")
    # The streaming knobs are checked in every run, streamed or not.
    for var, val in (("REDWOOD_DECODE_THREADS", "abc"), ("REDWOOD_DECODE_THREADS", "-1"),
                     ("REDWOOD_IO_PRIORITY", "abc")):
        env[var] = val
        p = run(["generate", "-m", model, "--prompt", "Hi", "--max-tokens", "2"])
        del env[var]
        check(f"knobs: {var}={val} on a resident run: refused", one_line_error(p, var), f"rc={p.returncode} {p.stderr[-300:]}")

    # ---- owners: while job A runs (its lock) --------------------------------------------------
    r = os.path.join(tmp, "r.jsonl.summary.json")  # A's results are named like B's default summary
    job_r = write(os.path.join(tmp, "r.toml"), job_text(model, r, many, max_tokens=24))
    proc = start(["batch", job_r, "-q"])
    try:
        wait_lines(r, 1, proc)
        running = proc.poll() is None
        job_b = write(os.path.join(tmp, "b2.toml"), job_text(model, os.path.join(tmp, "r.jsonl"), few))
        p = run(["batch", job_b, "-q"])
        check("owners: B's default summary is running A's results: refused",
              running and one_line_error(p, "being written by another redwood run"),
              f"running={running} rc={p.returncode} {p.stderr[-400:]}")
        p = run(["logits", "-m", model, "--tokens", "1,2", "--out", r])
        check("owners: logits --out a running job's results: refused",
              one_line_error(p, "being written by another redwood run"), f"rc={p.returncode} {p.stderr[-400:]}")
        # Something that does not ask (an older redwood, a script) replaces the file under A.
        n = count_lines(r)
        write(r + ".new", "not a result\n")
        os.replace(r + ".new", r)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    check("owners: results replaced under a running job: exit 1, one line naming it", proc.returncode == 1 and
          err.strip().count("\n") == 0 and "replaced or removed while the job ran" in err and r in err,
          f"rc={proc.returncode} {err[-400:]}")
    check("owners: nothing written into the replacement", read(r) == "not a result\n", repr(read(r)[:200]))
    check("owners: the job stopped before all its lines", 1 <= n < 40, f"{n} lines before the replacement")

    # ---- links: written through, never replaced ------------------------------------------------
    link = os.path.join(tmp, "to-stdout")
    os.symlink("/dev/stdout", link)
    got = os.path.join(tmp, "got.gguf")
    with open(got, "wb") as f:
        p = run(["make-draft", "--from", model, "--layers", "1", "--out", link], stdout=f, timeout=300)
    check("links: make-draft --out LINK->/dev/stdout > FILE: refused, the link stays, FILE empty",
          one_line_error(p, "open file descriptor") and os.path.islink(link) and os.path.getsize(got) == 0,
          f"rc={p.returncode} {p.stderr[-400:]}")
    link_err = os.path.join(tmp, "to-stderr")
    os.symlink("/dev/stderr", link_err)
    p = run(["logits", "-m", model, "--tokens", "1,2", "--out", link_err])  # stderr is a pipe
    check("links: logits --out LINK->/dev/stderr (a pipe): refused", one_line_error(p, "not a regular file") and
          os.path.islink(link_err), f"rc={p.returncode} {p.stderr[-400:]}")
    dangling = os.path.join(tmp, "dangling")
    os.symlink(os.path.join(tmp, "nowhere", "x.npy"), dangling)
    p = run(["logits", "-m", model, "--tokens", "1,2", "--out", dangling])
    check("links: logits --out a link to nothing: refused, the link stays", one_line_error(p, "symbolic link") and
          os.path.islink(dangling) and not os.path.exists(os.path.join(tmp, "nowhere")),
          f"rc={p.returncode} {p.stderr[-400:]}")
    res = os.path.join(tmp, "res.jsonl")
    with open(res, "w") as f:
        p = run(["batch", job_a, "-q", "--output", link], stdout=f)
    check("links: batch --output LINK->/dev/stdout > FILE: results in FILE, summary beside FILE",
          p.returncode == 0 and count_lines(res) == 3 and os.path.isfile(res + ".summary.json") and
          not os.path.lexists(link + ".summary.json") and os.path.islink(link), f"rc={p.returncode} {p.stderr[-400:]}")

    # ---- kill: SIGKILL mid-write leaves nothing ------------------------------------------------
    kdir = os.path.join(tmp, "kill")
    os.makedirs(kdir)
    out = os.path.join(kdir, "m.rwpk")
    proc = start(["pack", "--from", model, "--out", out])
    deadline, seen = time.time() + 60, ""
    while proc.poll() is None and time.time() < deadline and not seen:
        try:  # the writer's open output: a named temp file, or an unnamed one in kdir
            for fd in os.listdir(f"/proc/{proc.pid}/fd"):
                t = os.readlink(f"/proc/{proc.pid}/fd/{fd}")
                if t.startswith(kdir) and os.path.getsize(f"/proc/{proc.pid}/fd/{fd}") > (1 << 20):
                    seen = t
        except OSError:
            pass
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    check("kill: the writer was killed mid-write", seen != "" and proc.returncode == -signal.SIGKILL,
          f"seen={seen!r} rc={proc.returncode}")
    check("kill: nothing left beside the output", os.listdir(kdir) == [], str(os.listdir(kdir)))

    # ---- fifo: no reader ----------------------------------------------------------------------
    fifo = os.path.join(tmp, "trace.fifo")
    os.mkfifo(fifo)
    t0 = time.time()
    p = run(["generate", "-m", model, "--device-mem", "1GiB", "--trace", fifo, "-p", "Hi", "-n", "2"], timeout=60)
    check("fifo: --trace FIFO without a reader: an error (the last line), no hang",
          p.returncode == 1 and "no reader" in p.stderr.strip().splitlines()[-1] and p.stderr.count("no reader") == 1,
          f"rc={p.returncode} {time.time() - t0:.1f} s {p.stderr[-400:]}")

    # ---- sighup: batch stops cleanly ----------------------------------------------------------
    h = os.path.join(tmp, "h.jsonl")
    ten = write(os.path.join(tmp, "ten.jsonl"), "".join(read(many).splitlines(keepends=True)[:10]))
    job_h = write(os.path.join(tmp, "h.toml"), job_text(model, h, ten, max_tokens=24))
    proc = start(["batch", job_h, "-q"])
    wait_lines(h, 1, proc)
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=120)
    check("sighup: batch exits 129 with the interrupted line", proc.returncode == 129 and
          "interrupted by SIGHUP" in err and "resume" in err, f"rc={proc.returncode} {err[-400:]}")
    n = count_lines(h)
    p = run(["batch", job_h, "-q"], timeout=300)
    check("sighup: the job resumes", p.returncode == 0 and count_lines(h) == 10 and n >= 1,
          f"{n} lines, rc={p.returncode} {p.stderr[-400:]}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
