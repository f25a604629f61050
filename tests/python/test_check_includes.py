#!/usr/bin/env python3
"""The negative control of tools/check-includes (CTest include_order runs it on
this tree): on a tiny fake tree with an upward and a sideways include
(tests/data/include-order) it fails and names each one, and nothing else;
src/app/ sits between src/runtime/ and src/cli/."""
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CHECK = os.path.join(ROOT, "tools", "check-includes")


def run(*args):
    return subprocess.run([sys.executable, CHECK, *args], capture_output=True, text=True)


failures = 0


def check(what, ok, detail=""):
    global failures
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else "\n" + detail))
    failures += not ok


p = run(os.path.join(ROOT, "tests", "data", "include-order"))
expected = [
    "offload/beside.cpp:4: includes src/speculative/verify.h: speculative is beside offload (neither may include the other)",
    "src/engine/upward.h:5: includes src/planner/cost_model.h: planner is above engine",
    "src/runtime/upward.h:5: includes src/app/job_runner.h: app is above runtime",
]
check("fake tree: exit 1", p.returncode == 1, f"rc {p.returncode}\n{p.stdout}{p.stderr}")
check("fake tree: one line per offence", p.stdout.splitlines() == expected, p.stdout)

p = run(os.path.join(ROOT, "no-such-dir"))
check("a missing root is a usage error", p.returncode == 2, f"rc {p.returncode}")

sys.exit(1 if failures else 0)
