#!/usr/bin/env python3
"""Formats bench_kernels --json output as the markdown tables of docs/PERFORMANCE.md and docs/perf-log/."""
import json, sys

j = json.load(open(sys.argv[1]))
print(f"Machine: {j['threads']} threads. STREAM-style copy {j['copy_bw_GBps']:.2f} GB/s (read + write), "
      f"read-only sum {j['read_bw_GBps']:.2f} GB/s, FMA peak {j['fma_peak_GFLOPs']:.1f} GFLOP/s.\n")
print("| GEMV n = 1 (8192 x 8192) | GB/s of weights | copy bw around it, GB/s | / that copy bw (goal >= 0.8) "
      "| read-only bw around it, GB/s | / that read-only bw |")
print("|---|---|---|---|---|---|")
for t, v in j["gemv"].items():
    here = v.get("copy_bw_here_GBps", j["copy_bw_GBps"])
    rhere = v.get("read_bw_here_GBps", j["read_bw_GBps"])  # older JSON: the figure at the top
    print(f"| {t} | {v['GBps']:.2f} | {here:.2f} | {v['ratio_to_copy']:.2f} | {rhere:.2f} | {v['ratio_to_read']:.2f} |")
if "gemv_by_row_length" in j:
    shapes = list(next(iter(j["gemv_by_row_length"].values())).keys())
    print("\n| GEMV n = 1, by row length | " + " | ".join(shapes) + " |")
    print("|---|" + "---|" * len(shapes))
    for t, v in j["gemv_by_row_length"].items():
        print(f"| {t} | " + " | ".join(f"{v[s]['GBps']:.1f} GB/s ({v[s]['ratio_to_copy']:.2f}"
                                       + (f"; {v[s]['ratio_to_read']:.2f})" if "ratio_to_read" in v[s] else ")")
                                       for s in shapes) + " |")
if "gemv_in_cache" in j:
    # One thread's in-cache time per block, spread over all threads, against the
    # 8192 x 8192 GEMV's time: near 1, that GEMV is bound by its instructions.
    print("\n| GEMV n = 1 in the L2 cache, one thread: ns per 32-weight block | 2048 cols | 8192 cols "
          "| that time for the 8192 x 8192 GEMV on all threads / its measured time |")
    print("|---|---|---|---|")
    for t, v in j["gemv_in_cache"].items():
        blocks = 8192 * 8192 / 32
        est_ms = v["8192"]["ns_per_block"] * blocks / j["threads"] / 1e6
        frac = f"{est_ms / j['gemv'][t]['ms']:.2f}" if t in j.get("gemv", {}) else "-"
        print(f"| {t} | {v['2048']['ns_per_block']:.3f} | {v['8192']['ns_per_block']:.3f} | {frac} |")
if "small_batches" in j:
    print("\n| small batches, LM head 49152 x 576 Q8_0: n | ms per pass | ms per token |")
    print("|---|---|---|")
    for n, v in sorted(j["small_batches"].items(), key=lambda kv: int(kv[0])):
        print(f"| {n} | {v['ms']:.3f} | {v['ms_per_token']:.3f} |")
if "gemm" in j:
    print("\n| batched matmul (4096 x 4096) | n | GFLOP/s | / FMA peak (goal >= 0.5) |")
    print("|---|---|---|---|")
for t, v in j.get("gemm", {}).items():
    for n, r in v.items():
        print(f"| {t} | {n} | {r['GFLOPs']:.1f} | {r['ratio_to_peak']:.2f} |")
if "models" in j:
    print("\n| model | weights GB | decode tok/s | 64-token prefill tok/s |")
    print("|---|---|---|---|")
for m, v in j.get("models", {}).items():
    print(f"| {m} | {v['weights_GB']:.2f} | {v['decode_tok_s']:.2f} | {v['prefill64_tok_s']:.2f} |")
