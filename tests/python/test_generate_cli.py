#!/usr/bin/env python3
"""`redwood generate` through the shared generation loop (label "model"; seconds).

    python3 tests/python/test_generate_cli.py --redwood build/redwood --model models/SmolLM2-135M-Instruct.Q4_1.gguf

Checks:
    --stop    : the text ends just before the first stop string (plain, --json and --draft), the
                repeatable flag takes several, finish_reason "stop"; an empty stop string is an error.
    SIGINT    : a running generate (long --max-tokens) stopped by SIGINT exits 130 with one line on
                stderr saying so; what it printed is a prefix of the uninterrupted greedy text.
Prints "N passed, M failed" and exits non-zero on any failure.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from harness import check, default_signals, summary as finish, cli_args


def run(args, cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([args.redwood] + cmd, capture_output=True, text=True, timeout=600)


def main() -> int:
    args = cli_args()
    m = ["--model", args.model, "--threads", "1"]
    draft = os.path.join(os.path.dirname(os.path.abspath(args.model)), "smollm2-draft-10L.gguf")
    prompt = ["--prompt", "The capital of France is", "-n", "40"]

    # --stop
    full = run(args, ["generate"] + m + prompt + ["--json"])
    text = json.loads(full.stdout)["text"] if full.returncode == 0 else ""
    check("generate --json without --stop", full.returncode == 0 and len(text) > 12, full.stderr)
    stop = text[len(text) // 2:len(text) // 2 + 3]
    want = text[:text.find(stop)]
    p = run(args, ["generate"] + m + prompt + ["--json", "--stop", "never there", "--stop", stop])
    j = json.loads(p.stdout) if p.returncode == 0 else {}
    check("--stop cuts the text (json)", j.get("text") == want and j.get("finish_reason") == "stop",
          f"stop {stop!r}: {j.get('text')!r} vs {want!r}; {p.stderr}")
    p = run(args, ["generate"] + m + prompt + ["--stop", stop])
    check("--stop cuts the streamed text", p.returncode == 0 and p.stdout == want + "\n",
          f"{p.stdout!r} vs {want!r}; {p.stderr}")
    if os.path.exists(draft):
        p = run(args, ["generate"] + m + prompt + ["--draft", draft, "--stop", stop])
        check("--stop with --draft", p.returncode == 0 and p.stdout == want + "\n", f"{p.stdout!r}; {p.stderr}")
    p = run(args, ["generate"] + m + prompt + ["--stop", ""])
    check("an empty --stop is an error", p.returncode == 1 and "--stop" in p.stderr and
          len(p.stderr.strip().splitlines()) == 1, p.stderr)

    # SIGINT: the text printed so far stays, exit 130, one line on stderr.
    long = ["generate"] + m + ["--prompt", "Once upon a time", "-n", "100000", "--ctx", "100010"]
    ref = run(args, ["generate"] + m + ["--prompt", "Once upon a time", "-n", "60"])
    proc = subprocess.Popen([args.redwood] + long, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=default_signals)
    os.set_blocking(proc.stdout.fileno(), False)
    got = b""
    deadline = time.time() + 120
    while len(got) < 40 and time.time() < deadline and proc.poll() is None:  # text is streaming
        time.sleep(0.05)
        got += proc.stdout.read() or b""
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    out = got + out
    err_lines = [line for line in err.decode().splitlines() if "interrupted" in line or "internal" in line]
    check("SIGINT: exit 130", proc.returncode == 130, f"exit {proc.returncode}; {err.decode()[-400:]}")
    check("SIGINT: one line on stderr", len(err_lines) == 1 and "SIGINT" in err_lines[0],
          err.decode()[-400:])
    printed = out.decode(errors="replace").rstrip("\n")
    common = min(len(printed), len(ref.stdout.rstrip("\n")))
    check("SIGINT: the text so far is the greedy text's prefix", len(printed) >= 40 and
          printed[:common] == ref.stdout[:common], f"{printed[:200]!r} vs {ref.stdout[:200]!r}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
