#!/usr/bin/env python3
"""The offload engine through the redwood CLI (label "model"; a few seconds).

    python3 tests/python/test_offload_cli.py --redwood build/redwood --model models/SmolLM2-135M-Instruct.Q4_1.gguf

Checks:
    plan-memory : table and JSON; a budget below the minimum -> exit 1, one line naming "at least"
                  (with --json also {"fits": false, ...} on stdout).
    generate    : a bare prompt the instruct model ends at once -> a note suggesting --chat;
                  greedy tokens with --device-mem (most layers streamed; ring 2 and 3; host tier;
                  --verify-io) equal the tokens without a budget; with --draft too.
    trace       : --trace writes a Chrome trace with I/O and compute events.
    bench       : `bench offload` (small configuration) prints one JSON object with a ratio per size.
    bad input   : a malformed size -> exit 1 with one line on stderr.
Prints "N passed, M failed" and exits non-zero on any failure.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from harness import check, summary as finish, scratch_dir, cli_args




def run(args, cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([args.redwood] + cmd, capture_output=True, text=True, timeout=600)


def main() -> int:
    args = cli_args()
    m = ["--model", args.model]
    tmp = scratch_dir("redwood_offload_cli_")

    # plan-memory
    p = run(args, ["plan-memory"] + m + ["--device-mem", "64MiB", "--ctx", "256", "--tokens", "16", "--json"])
    ok = p.returncode == 0
    plan = json.loads(p.stdout) if ok else {}
    check("plan-memory json", ok and plan.get("fits") is True and "layers" in plan
          and plan.get("device_used", 1 << 60) <= 64 << 20,
          p.stderr + p.stdout[:300])
    tiers = [layer["tier"] for layer in plan.get("layers", [])]
    check("plan-memory streams some layers at 64MiB", "storage" in tiers and "device" in tiers, str(tiers))
    p = run(args, ["plan-memory"] + m + ["--device-mem", "64MiB", "--ctx", "256", "--tokens", "16"])
    check("plan-memory table", p.returncode == 0 and "storage" in p.stdout, p.stderr)
    p = run(args, ["plan-memory"] + m + ["--device-mem", "4MiB"])
    check("plan-memory below minimum", p.returncode == 1 and "at least" in p.stderr
          and len(p.stderr.strip().splitlines()) == 1, p.stderr)
    p = run(args, ["plan-memory"] + m + ["--device-mem", "4MiB", "--json"])
    try:
        verdict = json.loads(p.stdout)
    except ValueError:
        verdict = {}
    check("plan-memory --json below minimum: exit 1 and a verdict on stdout",
          p.returncode == 1 and verdict.get("fits") is False and verdict.get("budget") == "device"
          and verdict.get("given_bytes") == 4 << 20 and verdict.get("min_bytes", 0) > 4 << 20
          and "at least" in verdict.get("error", "") and len(p.stderr.strip().splitlines()) == 1,
          p.stdout[:300] + p.stderr)

    # generate: budgets give the same greedy tokens
    prompts = ["1,4093,198,1780,314,260,3575,282,4649,47,2,198,1,520,9531,198",
               "11865,2464,253,655,28,665,436,253,1165,2902,567"]
    base = ["generate"] + m + ["--max-tokens", "40", "--temperature", "0", "--json"]
    draft = os.path.join(tmp, "draft.gguf")
    p = run(args, ["make-draft", "--from", args.model, "--layers", "8", "--out", draft])
    check("make-draft", p.returncode == 0, p.stderr)
    trace = os.path.join(tmp, "trace.json")
    variants = {
        "device-mem 48MiB": ["--device-mem", "48MiB"],
        "device-mem 48MiB ring 3 verify-io": ["--device-mem", "48MiB", "--ring", "3", "--verify-io"],
        "device-mem 48MiB host-mem 16MiB": ["--device-mem", "48MiB", "--host-mem", "16MiB"],
        "device-mem 48MiB trace": ["--device-mem", "48MiB", "--trace", trace],
    }
    for i, pt in enumerate(prompts):
        ref = run(args, base + ["--prompt-tokens", pt])
        if ref.returncode != 0:
            check(f"generate reference {i}", False, ref.stderr)
            continue
        want = json.loads(ref.stdout)["tokens"]
        for name, extra in variants.items():
            p = run(args, base + ["--prompt-tokens", pt] + extra)
            got = json.loads(p.stdout) if p.returncode == 0 else {}
            check(f"generate {name} prompt {i}", got.get("tokens") == want and got.get("offload", {}).get(
                "storage_bytes", 0) > 0, p.stderr[-500:])
        p = run(args, base + ["--prompt-tokens", pt, "--device-mem", "110MiB", "--draft", draft, "--tree", "chain:3"])
        got = json.loads(p.stdout) if p.returncode == 0 else {}
        check(f"generate --draft --device-mem prompt {i}", got.get("tokens") == want, p.stderr[-500:])

    # trace
    try:
        ev = json.load(open(trace))["traceEvents"]
        tids = {e["tid"] for e in ev if e.get("ph") == "X"}
        check("trace has I/O and compute tracks", {1, 2} <= tids, str(tids))
    except (OSError, ValueError, KeyError) as e:
        check("trace has I/O and compute tracks", False, repr(e))

    # bench offload, small configuration
    p = run(args, ["bench", "offload"] + m + ["--device-mem", "64MiB", "--tokens", "1,4", "--repeat", "1",
                                                "--prefix", "8", "--json"])
    try:
        b = json.loads(p.stdout)
        check("bench offload", p.returncode == 0 and len(b["passes"]) == 2 and all(
            r["ratio"] > 0 and r["storage_bytes"] > 0 for r in b["passes"]) and b["storage_bandwidth"] > 0
              and b["peak_rss"] > 0, p.stdout)
    except (ValueError, KeyError) as e:
        check("bench offload", False, repr(e) + p.stderr[-500:])

    # generate: an instruct model given a bare prompt ends its turn at once (greedy, this
    # model and prompt); stderr says so and suggests --chat, which then gives text.
    bare = ["generate"] + m + ["--prompt", "Tell me a long story about a dragon.", "--max-tokens", "8",
                               "--temperature", "0"]
    p = run(args, bare)
    check("generate bare prompt: note suggests --chat",
          p.returncode == 0 and p.stdout.strip() == "" and "try --chat" in p.stderr, p.stderr)
    p = run(args, bare + ["--chat"])
    check("generate --chat: text and no note", p.returncode == 0 and p.stdout.strip() != ""
          and "try --chat" not in p.stderr, p.stderr)

    # bad input
    p = run(args, base + ["--prompt-tokens", "1,2", "--device-mem", "12XB"])
    check("malformed size", p.returncode == 1 and "invalid size" in p.stderr
          and len(p.stderr.strip().splitlines()) == 1, p.stderr)

    # Argument errors are like every other error: one line, exit code 1 (not CLI11's 100+);
    # flags that would be ignored are errors too.
    for cmd, expect in [(["bogus"], "unknown subcommand 'bogus'"),
                        (["generate", "--max-tokens", "abc"], "--max-tokens: expected an integer from 1 to"),
                        (["make-draft", "--from", "x", "--layers", "0", "--out", "y"],
                         "--layers: expected an integer from 1 to 65536, got '0'"),
                        (["generate", "--bogus"], "not expected: --bogus"),
                        (["info"], "--model is required"),
                        (["generate", "--prompt", "hi", "--tree", "chain:3"], "--tree: speculative decoding needs --draft"),
                        (["generate", "--prompt", "hi", "--device-mem", "0"], "a device budget of 0 bytes"),
                        (["generate", "--prompt", ""], "--prompt is empty")]:
        p = subprocess.run([args.redwood] + cmd, capture_output=True, text=True, timeout=60)
        check(f"argument error {' '.join(cmd)}: one line, exit 1", p.returncode == 1 and
              len(p.stderr.strip().splitlines()) == 1 and expect in p.stderr, f"rc {p.returncode}: {p.stderr}")
    p = subprocess.run([args.redwood, "generate", "--help"], capture_output=True, text=True, timeout=60)
    check("--help still exits 0", p.returncode == 0 and "--max-tokens" in p.stdout, p.stderr)

    return finish()


if __name__ == "__main__":
    sys.exit(main())
