"""Shared by the CLI tests in this folder: named checks and the final summary.

    from harness import check, summary
    check("name", condition, "what to print when it fails")
    tmp = scratch_dir("redwood_x_")  # removed at exit unless a check failed
    return summary()   # prints "N passed, M failed[: names]"; 1 if anything failed
"""
from __future__ import annotations

import argparse
import atexit
import json
import shutil
import signal
import subprocess
import sys
import tempfile

FAILED: list[str] = []
_PASSED = [0]


def check(name: str, cond: bool, msg: str = "") -> None:
    if cond:
        _PASSED[0] += 1
        print(f"PASS {name}", flush=True)
    else:
        FAILED.append(name)
        print(f"FAIL {name}: {msg}", flush=True)


def summary() -> int:
    print(f"{_PASSED[0]} passed, {len(FAILED)} failed" + (": " + ", ".join(FAILED) if FAILED else ""))
    return 1 if FAILED else 0


def cli_args() -> argparse.Namespace:
    """The two arguments CTest passes every CLI test: --redwood (the binary) and
    --model (the default GGUF), as args.redwood and args.model."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--redwood", required=True)
    ap.add_argument("--model", required=True)
    return ap.parse_args()


def scratch_dir(prefix: str) -> str:
    """A temporary directory for the test's files (models, outputs: tens of
    MB). Removed when the process exits with no failed check; kept, and named,
    when one failed, so that it can be looked at."""
    tmp = tempfile.mkdtemp(prefix=prefix)

    def clean() -> None:
        if FAILED:
            print(f"kept {tmp} (a check failed)", flush=True)
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    atexit.register(clean)
    return tmp


def default_signals() -> None:
    """preexec_fn for a child the test will signal: SIGINT, SIGTERM and SIGHUP at
    their defaults even when the test runner inherited them ignored (nohup, a
    background job), so that the child sees what a user's process does."""
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)


_previous_hook = sys.excepthook


def _uncaught(kind, value, tb) -> None:
    FAILED.append(f"uncaught {kind.__name__}")  # scratch_dir keeps the folder
    _previous_hook(kind, value, tb)


sys.excepthook = _uncaught


def streamed_budget(redwood: str, model: str) -> str | None:
    """A device budget just above the plan's minimum (ctx 256): every layer streams through the ring."""
    r = subprocess.run([redwood, "plan-memory", "--model", model, "--device-mem", "1MiB", "--ctx", "256", "--json"],
                       capture_output=True, text=True)
    try:
        budget = f"{(json.loads(r.stdout)['min_bytes'] >> 10) + 64}KiB"
    except (ValueError, KeyError):
        return None
    r = subprocess.run([redwood, "plan-memory", "--model", model, "--device-mem", budget, "--ctx", "256", "--json"],
                       capture_output=True, text=True)
    if r.returncode != 0 or json.loads(r.stdout)["layer_counts"]["storage"] == 0:
        return None
    return budget


def write(path: str, text: str) -> str:
    """Writes text to path and returns the path."""
    with open(path, "w") as f:
        f.write(text)
    return path


def lines_of(path: str) -> list[dict]:
    """The JSON lines of a results file."""
    with open(path) as f:
        return [json.loads(l) for l in f.read().splitlines()]
