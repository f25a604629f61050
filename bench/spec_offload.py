#!/usr/bin/env python3
"""Speculative vs autoregressive decoding with the target streamed under a budget.

    python3 bench/spec_offload.py [--redwood build/redwood] [--prompts 5] [--tokens 64]
                                  [--draft-layers 10 | --draft PATH]

SmolLM2-135M target, device budget = the planner's minimum plus a third of the
layers (so about two thirds of the target streams from storage every pass),
a self-draft (first K blocks) resident and counted in the budget. GSM8K
questions from ../shared/data (evaluation subset: questions 500.., disjoint from
anything used to tune trees), chat template. Prints a Markdown table of
seconds per token, tokens per target pass and speedup vs autoregressive at
temperature 0 and 0.6, the numbers in docs/perf-log/2026-11-23.md.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
DATA = os.path.join(ROOT, "..", "shared", "data", "gsm8k_test_first1000.jsonl")


def redwood(args, cmd):
    p = subprocess.run([args.redwood] + cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"redwood {' '.join(cmd)} failed: {p.stderr.strip()}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--redwood", default=os.path.join(ROOT, "build", "redwood"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--prompts", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--draft-layers", type=int, default=10, help="self-draft: the target's first K blocks")
    ap.add_argument("--draft", help="a draft GGUF instead of a self-draft (e.g. one from tools/train-draft.py)")
    ap.add_argument("--first", type=int, default=500, help="index of the first GSM8K question used")
    args = ap.parse_args()

    draft = args.draft or os.path.join(ROOT, "build", f"self-draft-{args.draft_layers}L.gguf")
    if args.draft and not os.path.exists(draft):
        sys.exit(f"spec_offload: no draft file {draft}")
    if not os.path.exists(draft):
        redwood(args, ["make-draft", "--from", args.model, "--layers", str(args.draft_layers), "--out", draft])
    with open(DATA) as f:
        questions = [json.loads(line)["question"] for line in f][args.first:args.first + args.prompts]

    # Budget: minimum (with the draft, ctx and tree of this run) + a third of the layers.
    ctx, tokens = 512, 64  # tokens per pass: prompts are prefilled in chunks of 64 (--prefill-chunk)
    # Each mode gets the budget that leaves the SAME target layers resident (a
    # third), so every mode streams the same bytes per target pass; with a
    # draft the budget also holds the draft, its KV cache and activations.
    def budget_for(with_draft: bool) -> int:
        extra = ["--draft", draft] if with_draft else []
        plan = json.loads(redwood(args, ["plan-memory", "--model", args.model, "--ctx", str(ctx),
                                         "--tokens", str(tokens), "--json"] + extra))
        layer = max(layer["bytes"] for layer in plan["layers"])
        return plan["device_min"] + len(plan["layers"]) // 3 * layer

    budget_ar, budget = budget_for(False), budget_for(True)
    modes = {
        "autoregressive": [],
        "chain:4": ["--draft", draft, "--tree", "chain:4"],
        "kary:2x4": ["--draft", draft, "--tree", "kary:2x4"],
        "sequoia 16/6": ["--draft", draft, "--tree", "sequoia", "--budget", "16", "--depth", "6"],
        "sequoia 32/8": ["--draft", draft, "--tree", "sequoia", "--budget", "32", "--depth", "8"],
    }
    print(f"target {os.path.basename(args.model)}, --device-mem {budget_ar / 2**20:.1f} MiB (autoregressive) / "
          f"{budget / 2**20:.1f} MiB (with the draft): 10 of 30 target layers resident, 20 streamed; " +
          (f"draft {os.path.relpath(draft, ROOT)}" if args.draft else f"self-draft {args.draft_layers} of 30 blocks") +
          f", {len(questions)} GSM8K prompts x {args.tokens} tokens\n")
    print("| T | mode | s/token | tokens/target pass | speedup vs autoregressive | stall s/pass |")
    print("|---|---|---|---|---|---|")
    for temp in ["0", "0.6"]:
        base = None
        for name, extra in modes.items():
            secs = toks = passes = stall = n_target = 0.0
            for i, q in enumerate(questions):
                out = json.loads(redwood(args, [
                    "generate", "--model", args.model, "--prompt", q, "--chat", "-n", str(args.tokens),
                    "--temperature", temp, "--seed", str(i), "--ctx", str(ctx), "--prefill-chunk", str(tokens),
                    "--device-mem", str(budget if extra else budget_ar),
                    "--json"] + extra))
                secs += out["seconds"]
                toks += out["n_tokens"]
                off = out["offload"]
                passes += out.get("target_passes", out["n_tokens"])
                stall += off["stall_seconds"]
                n_target += off["passes"]
            spt = secs / toks
            base = base or spt
            per_pass = toks / passes if passes else 1.0
            print(f"| {temp} | {name} | {spt:.4f} | {per_pass:.2f} | {base / spt:.2f}x | "
                  f"{stall / max(n_target, 1):.4f} |", flush=True)


if __name__ == "__main__":
    main()
