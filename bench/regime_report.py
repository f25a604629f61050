#!/usr/bin/env python3
"""The regime bench's headline and goal checks (issue 31), from one run of bench/regime.sh.

    python3 bench/regime_report.py [out/regime]

Reads DIR/suite/results.json (Q3_K draft), DIR/perfect/results.json (perfect draft) and
DIR/llamacpp.json (bench/llamacpp_regime.sh), and prints markdown:
  - the headline: plain streaming, the best speculative configuration per temperature,
    llama.cpp plain and speculative in the same memory limit;
  - every cell's speedup over plain streaming (the same temperature's baseline);
  - the perfect draft against its ideal tokens-per-pass x t(1) / (t(tree) + draft time),
    where t(1) is plain streaming's s/token and t(tree), draft time are the cell's own
    target-pass and drafting seconds per step;
  - --tree auto against the best configuration of the sweep.
"""
import json
import os
import sys


def split(c):
    """Where a streamed cell's time goes: `redwood bench run`'s time_split (None for a cell that
    streamed nothing, or results older than it)."""
    t = c.get("time_split")
    if not t:
        return None
    return {"step": t["step_s"], "draft": t["draft_s_per_step"], "pass": t["pass_s"],
            "io": t["io_busy_s_per_pass"], "compute": t["compute_s_per_pass"], "stall": c["stall_s_per_pass"],
            "gbps": t["read_gb_per_s"]}


def cells(path):
    return json.load(open(path))["cells"] if os.path.exists(path) else []


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "out/regime"
    suite, perfect = cells(f"{d}/suite/results.json"), cells(f"{d}/perfect/results.json")
    llama = json.load(open(f"{d}/llamacpp.json")) if os.path.exists(f"{d}/llamacpp.json") else None
    base = {c["temperature"]: c for c in suite if not c["tree"]}
    spec = [c for c in suite if c["tree"]]
    print("| configuration | T | s/token | tokens/pass | speedup vs plain streaming |")
    print("|---|---:|---:|---:|---:|")
    best = {}
    for t, b in sorted(base.items()):
        print(f"| Redwood, plain streaming | {t:g} | {b['s_per_token']:.3f} | 1.00 | 1.00x |")
        cs = [c for c in spec if c["temperature"] == t]
        if cs:
            bc = min(cs, key=lambda c: c["s_per_token"])
            best[t] = bc
            print(f"| Redwood, best speculative: {bc['tree']} (budget {bc['budget']}) | {t:g} | "
                  f"{bc['s_per_token']:.3f} | {bc['tokens_per_pass']:.2f} | "
                  f"**{b['s_per_token'] / bc['s_per_token']:.2f}x** |")
    if llama:
        b0 = base.get(0.0)
        for k, name in (("plain", "llama.cpp plain"), ("speculative", "llama.cpp speculative (draft-simple)")):
            if not llama.get(k):  # SPEC_ONLY=1 runs leave plain out
                continue
            v = llama[k]["s_per_token"]
            vs = f"{b0['s_per_token'] / v:.2f}x" if b0 else "-"
            print(f"| {name}, same memory limit ({llama['limit_mib']} MiB) | 0 | {v:.3f} | - | {vs} |")
        if 0.0 in best and llama.get("plain") and llama.get("speculative"):
            r = best[0.0]["s_per_token"]
            print(f"\nRedwood's best speculative (T = 0) against llama.cpp in the same limit: "
                  f"{llama['plain']['s_per_token'] / r:.1f}x plain, {llama['speculative']['s_per_token'] / r:.1f}x "
                  f"speculative.")

    heads = [base[t] for t in sorted(base)] + [best[t] for t in sorted(best)]
    if any(split(c) for c in heads):
        print("\nWhere the time goes (per step: drafting and one target pass, a token for plain streaming; per "
              "streamed pass, prefill included: wall, the I/O thread's busy time, compute, the compute's wait "
              "for layers, the reads' rate):\n")
        print("| configuration | T | s/step | draft s/step | pass s | I/O busy s | compute s | stall s | read GB/s |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for c in heads:
            x = split(c)
            if x:
                name = f"{c['tree']} (budget {c['budget']})" if c["tree"] else "plain streaming"
                print(f"| {name} | {c['temperature']:g} | {x['step']:.3f} | {x['draft']:.3f} | {x['pass']:.3f} | "
                      f"{x['io']:.3f} | {x['compute']:.3f} | {x['stall']:.3f} | {x['gbps']:.2f} |")

    print("\nEvery cell (speedup over the same temperature's plain streaming):\n")
    print("| T | tree | budget | s/token | tokens/pass | tree nodes | draft share | stall s/pass | peak RSS MiB | "
          "speedup |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in sorted(spec, key=lambda c: (c["temperature"], c["tree"], c["budget"])):
        b = base[c["temperature"]]["s_per_token"]
        print(f"| {c['temperature']:g} | {c['tree']} | {c['budget']} | {c['s_per_token']:.3f} | "
              f"{c['tokens_per_pass']:.2f} | {c['tree_nodes']:.1f} | {c['draft_share']:.2f} | "
              f"{c['stall_s_per_pass']:.3f} | {c['peak_rss_bytes'] / 2**20:.0f} | {b / c['s_per_token']:.2f}x |")

    for t in sorted(best):
        autos = [c for c in spec if c["temperature"] == t and c["tree"] == "auto"]
        if autos:
            a = min(autos, key=lambda c: c["s_per_token"])
            choice = a["summary"]["config"].get("tree_auto_choice", "")
            print(f"\n--tree auto, T = {t:g}: best cap {a['budget']} at {a['s_per_token']:.3f} s/token "
                  f"({choice}); the sweep's best {best[t]['s_per_token']:.3f} ({best[t]['tree']}, budget "
                  f"{best[t]['budget']}): auto / best = {a['s_per_token'] / best[t]['s_per_token']:.2f}")

    pb = {c["temperature"]: c for c in perfect if not c["tree"]}
    if perfect:
        print("\nPerfect draft (the source model): measured speedup against the ideal tokens/pass x t(1) / "
              "(t(tree) + draft), t(1) the plain run's s/token, t(tree) and draft the cell's own seconds per step "
              "in the target pass (+ verification) and in drafting; measured / ideal is the share of decoding "
              "time spent in those two, the rest being the loop's own overhead\n")
        print("| tree | budget | tokens/pass | t(tree) s | t(tree) / t(1) | draft s/step | measured | ideal | "
              "measured / ideal |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for c in perfect:
            if not c["tree"]:
                continue
            s = c["summary"]
            passes = s["target_passes"]
            t1 = pb[c["temperature"]]["s_per_token"]
            tt, td = s["verify_seconds"] / passes, s["draft_seconds"] / passes
            ideal = c["tokens_per_pass"] * t1 / (tt + td)
            meas = t1 / c["s_per_token"]
            print(f"| {c['tree']} | {c['budget']} | {c['tokens_per_pass']:.2f} | {tt:.3f} | {tt / t1:.2f} | {td:.3f} | "
                  f"{meas:.2f}x | {ideal:.2f}x | {meas / ideal:.2f} |")


if __name__ == "__main__":
    main()
