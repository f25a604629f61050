#!/usr/bin/env python3
"""`redwood profile-acceptance` and `profile-hardware` end to end (labels "python;model"; seconds).

    python3 tests/python/test_profile_cli.py --redwood build/redwood --model models/SmolLM2-135M-Instruct.Q4_1.gguf

Checks: a profile at T = 0.6 (sequoia + specinfer vectors, chains) and at T = 0 (greedy) is
written with the models' sizes and hashes; the vectors are probabilities with intervals
around them; the top-level vector is non-increasing and `generate --acceptance` takes the
file; bad input -> exit 1, one line, no output file.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from harness import check, summary as finish, scratch_dir, cli_args




def main() -> int:
    args = cli_args()
    rw = args.redwood
    if not os.path.exists(args.model):
        print(f"SKIP: {args.model} missing (run tools/fetch-models.sh)")
        return 0
    tmp = scratch_dir("redwood_profile_cli_")
    draft = os.path.join(tmp, "draft.gguf")
    p = subprocess.run([rw, "make-draft", "--from", args.model, "--layers", "10", "--out", draft],
                       capture_output=True, text=True, timeout=300)
    check("make-draft", p.returncode == 0, p.stderr)
    prompts = os.path.join(tmp, "p.jsonl")
    with open(prompts, "w") as f:
        f.write('{"id": 1, "prompt": "Write one sentence about the sea."}\n')
        f.write('{"id": 2, "messages": [{"role": "user", "content": "Count from one to ten."}]}\n')

    for temp, schemes in (("0.6", {"sequoia", "specinfer", "target-sample"}), ("0", {"greedy"})):
        out = os.path.join(tmp, f"prof{temp}.json")
        p = subprocess.run([rw, "profile-acceptance", "--model", args.model, "--draft", draft, "--prompts", prompts,
                            "--temperature", temp, "--width", "4", "--count", "40", "--repeats", "2",
                            "--max-tokens", "24", "--chain-depth", "3", "--out", out, "-q"],
                           capture_output=True, text=True, timeout=600)
        check(f"T={temp}: exit 0", p.returncode == 0, p.stderr[-500:])
        if p.returncode != 0:
            continue
        d = json.load(open(out))
        check(f"T={temp}: identities", d["target"]["bytes"] == os.path.getsize(args.model) and
              len(d["target"]["xxh3"]) == 16 and d["draft"]["bytes"] == os.path.getsize(draft) and
              d["target"]["xxh3"] != d["draft"]["xxh3"], json.dumps(d["target"]))
        check(f"T={temp}: schemes", set(d["one_level_trees"]) == schemes, str(list(d["one_level_trees"])))
        check(f"T={temp}: positions and sampling", d["positions"] == 40 and
              abs(d["sampling"]["temperature"] - float(temp)) < 1e-6, str(d["positions"]))
        ok = True
        for name, v in d["one_level_trees"].items():
            a = v["acceptance"]
            ok &= len(a) == 4 and v["trials"] == 80 and abs(sum(a) + v["none"] - 1) < 1e-9
            ok &= all(0 <= x <= 1 and lo <= x <= hi for x, (lo, hi) in zip(a, v["ci95"]))
        check(f"T={temp}: vectors are probabilities with intervals", ok, json.dumps(d["one_level_trees"])[:300])
        acc = d["acceptance"]
        check(f"T={temp}: DP vector non-increasing", all(acc[i] >= acc[i + 1] for i in range(len(acc) - 1)), str(acc))
        ch = d["chain"]
        check(f"T={temp}: chain counts", ch["depth"] == 3 and len(ch["steps_reaching_depth"]) == 4 and
              ch["steps_reaching_depth"][0] > 0, json.dumps(ch))
        g = subprocess.run([rw, "generate", "--model", args.model, "--draft", draft, "--tree", "sequoia",
                            "--acceptance", out, "--budget", "8", "--depth", "4", "--prompt", "Hi",
                            "--max-tokens", "4", "--temperature", temp], capture_output=True, text=True, timeout=300)
        check(f"T={temp}: generate --acceptance takes the profile", g.returncode == 0, g.stderr[-300:])

    # profile-hardware: a small grid, streamed target (SIZE+draft), then bad input
    hw = os.path.join(tmp, "hw.json")
    p = subprocess.run([rw, "profile-hardware", "--model", args.model, "--draft", draft, "--device-mem", "80MiB+draft",
                        "--sizes", "1,8,32", "--widths", "1,4", "--repeats", "2", "--prefix", "16", "--out", hw, "-q"],
                       capture_output=True, text=True, timeout=600)
    check("profile-hardware: exit 0", p.returncode == 0, p.stderr[-500:])
    if p.returncode == 0:
        h = json.load(open(hw))
        check("profile-hardware: grid and config",
              [r["n"] for r in h["target_pass"]] == [1, 8, 32] and [r["width"] for r in h["draft_level"]] == [1, 4] and
              all(r["seconds"] > 0 for r in h["target_pass"] + h["draft_level"]) and
              h["config"]["device_mem"] == "80MiB+draft" and h["layers"]["streamed"] > 0 and
              h["timing"]["repeats"] == 2 and h["target"]["bytes"] == os.path.getsize(args.model), json.dumps(h)[:400])
    for name, extra, expect in (("sizes order", ["--sizes", "8,4"], "--sizes: values must be increasing"),
                                ("budget", ["--device-mem", "1MiB"], "too small")):
        out = os.path.join(tmp, "bad-hw.json")
        p = subprocess.run([rw, "profile-hardware", "--model", args.model, "--draft", draft, "--out", out, "-q"] + extra,
                           capture_output=True, text=True, timeout=300)
        lines = p.stderr.strip().splitlines()
        check(f"profile-hardware bad: {name}", p.returncode == 1 and len(lines) == 1 and expect in lines[0] and
              not os.path.exists(out), p.stderr[-300:])

    # generate --tree auto: measures and caches both profiles, then reuses them
    env = dict(os.environ, REDWOOD_CACHE_DIR=os.path.join(tmp, "cache"))
    auto = [rw, "generate", "--model", args.model, "--draft", draft, "--tree", "auto", "--budget", "16", "--depth", "6",
            "--device-mem", "80MiB+draft", "--prompt", "Name three rivers.", "--chat", "--max-tokens", "8",
            "--temperature", "0.6", "--json"]
    p = subprocess.run(auto, capture_output=True, text=True, timeout=600, env=env)
    j = json.loads(p.stdout) if p.returncode == 0 else {}
    check("--tree auto: runs and says what it chose", p.returncode == 0 and "--tree auto:" in p.stderr and
          "measuring" in p.stderr and "dynamic-tree candidates" in p.stderr and
          "predicted s/token: plain decoding" in p.stderr and
          re.search(r"; (dyspec|opt-tree|specexec) [^;]*budget \d+", p.stderr) is not None and
          re.search(r"--tree auto: (plain decoding is predicted fastest|(sequoia|dyspec|opt-tree|specexec) [^,]*budget "
                    r"\d+ depth \d+[^,]*, verify \S+: predicted)", p.stderr) is not None, p.stderr[-800:])
    check("--tree auto: the JSON names the choice", isinstance(j.get("tree_auto_choice"), str) and
          j.get("tree_auto_predicted_s_per_token", 0) > 0, p.stdout[-300:])
    cached = sorted(os.listdir(env["REDWOOD_CACHE_DIR"])) if os.path.isdir(env["REDWOOD_CACHE_DIR"]) else []
    cached = [f for f in cached if not f.startswith("content-hash-")]  # the models' hashes (identify_files), beside
    check("--tree auto: the three profiles cached", len(cached) == 3 and cached[0].startswith("acceptance-") and
          cached[1].startswith("dynamic-") and cached[2].startswith("hardware-"), str(cached))
    if len(cached) == 3:
        dyn = json.load(open(os.path.join(env["REDWOOD_CACHE_DIR"], cached[1])))
        kinds = {c["tree"] for c in dyn["candidates"]}
        pairs = {"dyspec": "sequoia", "opt-tree": "target-sample", "specexec": "target-sample"}
        check("--tree auto: dynamic candidates at T > 0: dyspec with sequoia, opt-tree and specexec with target-sample",
              kinds == set(pairs) and all(c["verify"] == pairs[c["tree"]] and c["budget"] <= 16 and
                                          len(c["samples"]) == 16 and
                                          all(s["tokens"] >= 1 and 1 <= s["nodes"] <= c["budget"] for s in c["samples"])
                                          for c in dyn["candidates"]), json.dumps(dyn)[:400])
    p = subprocess.run(auto, capture_output=True, text=True, timeout=600, env=env)
    check("--tree auto: second run reuses the cache", p.returncode == 0 and "measuring" not in p.stderr and
          "timing passes" not in p.stderr and "--tree auto:" in p.stderr, p.stderr[-500:])
    p = subprocess.run(auto + ["--threshold", "0.1"], capture_output=True, text=True, timeout=60, env=env)
    check("--tree auto: other tree flags are an error", p.returncode == 1 and
          "--tree auto" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr[-300:])

    # --tree auto with given profiles: a synthetic hardware profile where a target pass costs the same for 1
    # and 16 tokens and draft levels are nearly free, so a tree must win; the measured acceptance profiles
    fake = os.path.join(tmp, "hw-flat.json")
    json.dump({"format": "redwood-hardware-profile", "version": 1,
               "target": {"path": "t", "bytes": 1, "xxh3": "0" * 16}, "draft": {"path": "d", "bytes": 1, "xxh3": "0" * 16},
               "config": {"backend": "cpu", "device_mem": "", "host_mem": "", "ring": 2, "threads": 2, "ctx": 100,
                          "prefix": 0},
               "layers": {"resident": 30, "host": 0, "streamed": 0}, "timing": {"warmup": 0, "repeats": 1},
               "target_pass": [{"n": 1, "seconds": 0.5}, {"n": 16, "seconds": 0.5}],
               "draft_level": [{"width": 1, "seconds": 0.001}, {"width": 16, "seconds": 0.002}]}, open(fake, "w"))
    for temp, verifiers in (("0.6", ("sequoia", "specinfer")), ("0", ("greedy",))):
        p = subprocess.run([rw, "generate", "--model", args.model, "--draft", draft, "--tree", "auto", "--budget", "16",
                            "--depth", "6", "--hardware-profile", fake, "--acceptance", os.path.join(tmp, f"prof{temp}.json"),
                            "--temperature", temp, "--prompt", "Name three rivers.", "--chat", "--max-tokens", "8",
                            "--json"], capture_output=True, text=True, timeout=300, env=env)
        j = json.loads(p.stdout) if p.returncode == 0 else {}
        tree = j.get("tree", {})
        check(f"--tree auto T={temp}: a flat t(n) picks a tree and runs it", p.returncode == 0 and
              "sequoia budget" in p.stderr and tree.get("verify") in verifiers and
              (tree.get("nodes", 0) > 1 or tree.get("budget", 0) > 1) and j["target_passes"] > 0 and
              j.get("tree_auto_choice", "").startswith(tree.get("kind") if tree.get("kind") != "static" else "sequoia"),
              p.stderr[-400:])

    p = subprocess.run([rw, "generate", "--model", args.model, "--draft", draft, "--tree", "auto", "--acceptance",
                        os.path.join(tmp, "prof0.6.json"), "--hardware-profile", fake, "--prompt", "Hi",
                        "--max-tokens", "4"], capture_output=True, text=True, timeout=300, env=env)
    check("--tree auto: a sampled profile for a greedy run is a clear error", p.returncode == 1 and
          "measured at temperature 0.6; this run is greedy" in p.stderr, p.stderr[-300:])

    # tree = "auto" in a batch job (the same cache)
    job = os.path.join(tmp, "auto.toml")
    out = os.path.join(tmp, "auto.jsonl")
    body = (f'[model]\ntarget = "{args.model}"\ndraft = "{draft}"\n[memory]\ndevice = "80MiB+draft"\nctx = 512\n'
            f'[speculation]\ntree = "auto"\nbudget = 16\ndepth = 6\nprefill_chunk = 64\n[sampling]\ntemperature = 0.6\nmax_tokens = 8\n'
            f'[input]\nprompts = "{prompts}"\nchat = true\n[output]\npath = "{out}"\n')
    open(job, "w").write(body)
    p = subprocess.run([rw, "batch", job], capture_output=True, text=True, timeout=600, env=env)
    summ = json.load(open(out + ".summary.json")) if p.returncode == 0 else {}
    check("batch tree = auto: runs, both prompts, the choice in the summary", p.returncode == 0 and
          len(open(out).read().splitlines()) == 2 and summ["config"]["tree_auto_choice"] != "" and
          "--tree auto:" in p.stderr, p.stderr[-500:])
    # tree = "auto" with shared passes: the node budget rule takes the profiles' t(n), c(w) and acceptance;
    # t(n) is timed up to the pass cap (pass_tokens 48 > budget 16), and only Sequoia trees are candidates.
    open(job, "w").write(body + "[batch]\nsequences = 2\npass_tokens = 48\n")
    os.unlink(out)
    os.unlink(out + ".summary.json")
    profiles = lambda: {f for f in os.listdir(env["REDWOOD_CACHE_DIR"]) if f.startswith("hardware-")}
    before = profiles()
    p = subprocess.run([rw, "batch", job], capture_output=True, text=True, timeout=600, env=env)
    summ = json.load(open(out + ".summary.json")) if p.returncode == 0 else {}
    shared = summ.get("shared_passes", {})
    check("batch tree = auto, sequences = 2: runs, both prompts, passes shared", p.returncode == 0 and
          len(open(out).read().splitlines()) == 2 and shared.get("max_in_flight") == 2 and
          summ["config"]["tree_auto_choice"] != "", p.stderr[-500:] + json.dumps(shared))
    new = [json.load(open(os.path.join(env["REDWOOD_CACHE_DIR"], f))) for f in profiles() - before]
    check("batch tree = auto, sequences = 2: t(n) timed up to pass_tokens, a Sequoia tree or none",
          len(new) == 1 and max(x["n"] for x in new[0]["target_pass"]) == 48 and
          summ.get("config", {}).get("tree_auto_choice", "").startswith(("sequoia", "autoregressive")),
          json.dumps(new)[:400] + p.stderr[-300:])
    open(job, "w").write(body.replace("depth = 6\n", "depth = 6\nthreshold = 0.1\n"))
    p = subprocess.run([rw, "batch", job], capture_output=True, text=True, timeout=60, env=env)
    check("batch tree = auto: other tree keys are an error", p.returncode == 1 and "speculation.tree" in p.stderr and
          len(p.stderr.strip().splitlines()) == 1, p.stderr[-300:])

    with open(os.path.join(tmp, "broken.jsonl"), "w") as f:
        f.write('{"id": 1, "prompt": \n')

    def bad(name: str, extra: list[str], expect: str) -> None:
        out = os.path.join(tmp, name + ".json")
        base = ["--model", args.model, "--draft", draft, "--out", out, "-q"]
        if "--prompts" not in extra:
            base += ["--prompts", prompts]
        p = subprocess.run([rw, "profile-acceptance"] + base + extra, capture_output=True, text=True, timeout=300)
        lines = p.stderr.strip().splitlines()
        check(f"bad: {name}", p.returncode == 1 and len(lines) == 1 and expect in lines[0] and
              not os.path.exists(out), f"rc={p.returncode} stderr={p.stderr[-300:]!r}")

    bad("width", ["--width", "0"], "--width: expected an integer in [1, 64]")
    bad("temperature", ["--temperature", "hot"], "--temperature")
    bad("missing prompts", ["--prompts", os.path.join(tmp, "none.jsonl")], "none.jsonl")
    bad("bad prompt line", ["--prompts", os.path.join(tmp, "broken.jsonl")], "broken.jsonl:1")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
