#!/usr/bin/env python3
"""The negative control of tools/check-thread-safety (CTest thread_safety runs
it on offload/): a field written without its mutex and a REQUIRES function
called without it (tests/data/thread-safety/unguarded.cpp) fail, each named,
and nothing else in that file does (its add_locked holds the mutex)."""
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CHECK = os.path.join(ROOT, "tools", "check-thread-safety")
DATA = os.path.join(ROOT, "tests", "data", "thread-safety")


def run(*files):
    return subprocess.run([CHECK, *files], capture_output=True, text=True)


failures = 0


def check(what, ok, detail=""):
    global failures
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else "\n" + detail))
    failures += not ok


p = run(os.path.join(DATA, "unguarded.cpp"))
check("unguarded: exit 1", p.returncode == 1, f"rc {p.returncode}\n{p.stdout}{p.stderr}")
check("unguarded: the write without the mutex is named",
      "writing variable 'n_' requires holding mutex 'mu_'" in p.stderr, p.stderr)
check("unguarded: the call without the mutex is named",
      "calling function 'bump' requires holding mutex 'mu_'" in p.stderr, p.stderr)
check("unguarded: nothing else is named (add_locked holds the mutex)", p.stderr.count(": error: ") == 2, p.stderr)

sys.exit(1 if failures else 0)
