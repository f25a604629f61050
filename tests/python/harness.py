"""Shared by the CLI tests in this folder: named checks and the final summary.

    from harness import check, summary
    check("name", condition, "what to print when it fails")
    return summary()   # prints "N passed, M failed[: names]"; 1 if anything failed
"""
from __future__ import annotations

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
