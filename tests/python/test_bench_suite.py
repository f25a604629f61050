#!/usr/bin/env python3
"""`redwood bench run` on a tiny suite (labels "python;model"; well under a minute).

    python3 tests/python/test_bench_suite.py --redwood build/redwood --model models/SmolLM2-135M-Instruct.Q4_1.gguf

Checks: the suite writes results.csv / .json / .md with one row per cell (autoregressive
baseline + policies x budgets); the PNG is a valid image (decoded here with zlib: signature,
IHDR, CRCs, filters) that contains pixels of each series' colour (one per tree policy plus
the baseline); re-running resumes (no cell re-runs, identical tables); a bad suite -> exit 1,
one line with file:line: key.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import struct
import subprocess
import sys
import zlib

from harness import check, summary as finish, scratch_dir, cli_args

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Must match src/app/suite_runner.cpp (kColours, kBaselineColour).
COLOURS = {"chain": (0x1F, 0x77, 0xB4), "sequoia": (0xD6, 0x27, 0x28), "autoregressive": (0x44, 0x44, 0x44)}



def decode_png(path: str) -> tuple[int, int, list[bytes]]:
    """Returns width, height and RGB rows of an 8-bit RGB/RGBA/palette PNG; raises on any defect."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("bad signature")
    pos, idat, ihdr, plte = 8, b"", None, None
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        if zlib.crc32(kind + body) != crc:
            raise ValueError(f"bad CRC in {kind!r}")
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"PLTE":
            plte = body
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = ihdr
    if depth != 8 or interlace != 0 or ctype not in (2, 3, 6):
        raise ValueError(f"unsupported PNG: depth {depth} type {ctype} interlace {interlace}")
    bpp = {2: 3, 6: 4, 3: 1}[ctype]
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            elif f != 0:
                raise ValueError(f"bad filter {f}")
        prev = line
        if ctype == 3:
            rows.append(b"".join(plte[3 * k:3 * k + 3] for k in line))
        elif ctype == 6:
            rows.append(bytes(v for i, v in enumerate(line) if i % 4 != 3))
        else:
            rows.append(bytes(line))
    return w, h, rows


def colour_count(rows: list[bytes], rgb: tuple[int, int, int]) -> int:
    needle = bytes(rgb)
    n = 0
    for r in rows:
        for i in range(0, len(r), 3):
            if r[i:i + 3] == needle:
                n += 1
    return n


def main() -> int:
    args = cli_args()
    tmp = scratch_dir("redwood_bench_suite_")
    draft = os.path.join(tmp, "draft.gguf")
    p = subprocess.run([args.redwood, "make-draft", "--from", args.model, "--layers", "10", "--out", draft],
                       capture_output=True, text=True, timeout=300)
    check("make-draft", p.returncode == 0, p.stderr)
    prompts = os.path.join(ROOT, "configs", "jobs", "prompts-smoke.jsonl")
    suite = os.path.join(tmp, "suite.toml")
    with open(suite, "w") as f:
        f.write(f'name = "test"\n[suite]\nmax_tokens = 6\nctx = 256\nlimit = 2\n'
                f'[[model]]\nname = "m"\ntarget = "{args.model}"\ndraft = "{draft}"\n'
                f'[matrix]\ntrees = ["chain", "sequoia"]\nbudgets = [2, 4]\ntemperatures = [0.0]\n'
                f'prompts = ["{prompts}"]\n')
    out = os.path.join(tmp, "out")
    p = subprocess.run([args.redwood, "bench", "run", suite, "--out", out], capture_output=True, text=True, timeout=600)
    check("bench run", p.returncode == 0, p.stderr[-1500:])
    if p.returncode != 0:
        finish()
        return 1
    rows = list(csv.DictReader(open(os.path.join(out, "results.csv"))))
    trees = sorted((r["tree"], r["budget"]) for r in rows)
    check("csv: baseline + 2 policies x 2 budgets", trees == sorted(
        [("autoregressive", "0"), ("chain", "2"), ("chain", "4"), ("sequoia", "2"), ("sequoia", "4")]), str(trees))
    check("csv: metrics are numbers", all(float(r["s_per_token"]) > 0 and float(r["tokens_per_pass"]) >= 1.0
                                          and int(r["n_prompts"]) == 2 for r in rows), str(rows[:2]))
    doc = json.load(open(os.path.join(out, "results.json")))
    check("json: cells and plots", len(doc["cells"]) == 5 and len(doc["plots"]) == 1, json.dumps(doc)[:300])
    md = open(os.path.join(out, "results.md")).read()
    check("markdown table", md.count("\n| m |") == 5 and "| autoregressive |" in md, md)
    png = doc["plots"][0] if doc["plots"] else ""
    try:
        w, h, px = decode_png(png)
        check("png decodes", w >= 600 and h >= 300, f"{w}x{h}")
        for series, rgb in COLOURS.items():
            n = colour_count(px, rgb)
            check(f"png has the {series} series", n >= 40, f"{n} pixels of {rgb}")
        # Negative control: a colour no series uses is absent.
        check("png colour check has power", colour_count(px, (0x12, 0x34, 0x56)) == 0)
    except Exception as e:  # noqa: BLE001 - any decode failure is a test failure
        check("png decodes", False, repr(e))
    before = open(os.path.join(out, "results.csv")).read()
    p = subprocess.run([args.redwood, "bench", "run", suite, "--out", out], capture_output=True, text=True, timeout=600)
    check("re-run resumes: same table", p.returncode == 0 and open(os.path.join(out, "results.csv")).read() == before,
          p.stderr[-800:])
    bad = os.path.join(tmp, "bad.toml")
    with open(bad, "w") as f:
        f.write(f'[[model]]\ntarget = "{args.model}"\n[matrix]\nbudgets = [2, "x"]\nprompts = ["{prompts}"]\n')
    p = subprocess.run([args.redwood, "bench", "run", bad, "--out", os.path.join(tmp, "bad")],
                       capture_output=True, text=True, timeout=60)
    check("bad suite: one line with file:line: key", p.returncode == 1 and p.stderr.count("\n") == 1 and
          "bad.toml:4: matrix.budgets: expected an array of numbers, got a string" in p.stderr, p.stderr)
    # Issue 42: two prompt sets with one file stem shared their cells' files (results.md showed y's
    # numbers for x): refused at load, naming both.
    for sub in ("x", "y"):
        os.makedirs(os.path.join(tmp, sub), exist_ok=True)
        shutil.copy(prompts, os.path.join(tmp, sub, "p.jsonl"))
    same = os.path.join(tmp, "same-stem.toml")
    with open(same, "w") as f:
        f.write(f'[[model]]\nname = "m"\ntarget = "{args.model}"\n[matrix]\n'
                f'prompts = ["{tmp}/x/p.jsonl", "{tmp}/y/p.jsonl"]\n')
    p = subprocess.run([args.redwood, "bench", "run", same, "--out", os.path.join(tmp, "same")],
                       capture_output=True, text=True, timeout=60)
    check("two prompt sets with one stem: refused, naming both", p.returncode == 1 and p.stderr.count("\n") == 1 and
          f"same-stem.toml:5: matrix.prompts: '{tmp}/x/p.jsonl' and '{tmp}/y/p.jsonl' give two cells the same id"
          in p.stderr and not os.path.exists(os.path.join(tmp, "same")), p.stderr)
    # matrix.sequences: every cell also with 2 prompts sharing each pass; greedy lines equal the one-at-a-time ones.
    seqs = os.path.join(tmp, "seqs.toml")
    with open(seqs, "w") as f:
        f.write(f'[suite]\nmax_tokens = 6\nctx = 256\nlimit = 2\n[[model]]\nname = "m"\ntarget = "{args.model}"\n'
                f'draft = "{draft}"\n[matrix]\ntrees = ["sequoia"]\nbudgets = [4]\nprompts = ["{prompts}"]\n'
                f'sequences = [1, 2]\n')
    so = os.path.join(tmp, "seqs")
    p = subprocess.run([args.redwood, "bench", "run", seqs, "--out", so], capture_output=True, text=True, timeout=600)
    srows = list(csv.DictReader(open(os.path.join(so, "results.csv")))) if p.returncode == 0 else []
    check("sequences: 2 x (baseline + tree) rows with the count and the job's tokens/s",
          sorted((r["tree"], r["sequences"]) for r in srows) == sorted(
              [("autoregressive", "1"), ("sequoia", "1"), ("autoregressive", "2"), ("sequoia", "2")]) and
          all(float(r["job_tokens_per_s"]) > 0 for r in srows), p.stderr[-800:] + str(srows)[:400])

    def texts(cell):
        with open(os.path.join(so, "cells", cell + ".jsonl")) as f:
            return sorted((json.dumps(r["id"]), r["text"]) for r in map(json.loads, f.read().splitlines()))
    cells = sorted(os.listdir(os.path.join(so, "cells"))) if os.path.isdir(os.path.join(so, "cells")) else []
    stem = os.path.splitext(os.path.basename(prompts))[0]
    base = f"m_resident_T0_{stem}"
    check("sequences: every cell's greedy lines equal the one-at-a-time baseline's",
          all(texts(c) == texts(f"{base}_ar") for c in (f"{base}_sequoia_b4", f"{base}_s2_ar", f"{base}_s2_sequoia_b4")),
          str(cells))
    # One tree budget: the plot gets an explicit x range (gnuplot warned "empty x range" on stderr).
    one = os.path.join(tmp, "one.toml")
    with open(one, "w") as f:
        f.write(f'[suite]\nmax_tokens = 2\nctx = 256\nlimit = 1\n[[model]]\nname = "m"\ntarget = "{args.model}"\n'
                f'draft = "{draft}"\n[matrix]\ntrees = ["chain"]\nbudgets = [4]\nprompts = ["{prompts}"]\n')
    p = subprocess.run([args.redwood, "bench", "run", one, "--out", os.path.join(tmp, "one")], capture_output=True,
                       text=True, timeout=600)
    check("one budget: no gnuplot warning", p.returncode == 0 and "empty x range" not in p.stderr, p.stderr[-800:])
    # A budget too small for a cell names the suite's key and line, not the cell job's.
    small = os.path.join(tmp, "small.toml")
    with open(small, "w") as f:
        f.write(f'[[model]]\nname = "m"\ntarget = "{args.model}"\n[matrix]\ndevice_mem = ["1B"]\n'
                f'prompts = ["{prompts}"]\n')
    p = subprocess.run([args.redwood, "bench", "run", small, "--out", os.path.join(tmp, "small")],
                       capture_output=True, text=True, timeout=600)
    check("budget too small: names matrix.device_mem", p.returncode == 1 and "small.toml:5: matrix.device_mem:" in
          p.stderr and "memory.device" not in p.stderr, p.stderr[-800:])
    # Streamed cells: the markdown says where the time goes (draft, pass, I/O, compute, stall, read rate),
    # the JSON carries the same split; resident cells (above) have no such table.
    check("resident suite: no time-split table", "Where the time goes" not in md, md[-400:])
    streamed = os.path.join(tmp, "streamed.toml")
    with open(streamed, "w") as f:
        f.write(f'[suite]\nmax_tokens = 4\nctx = 256\nlimit = 1\n[[model]]\nname = "m"\ntarget = "{args.model}"\n'
                f'draft = "{draft}"\n[matrix]\ndevice_mem = ["110MiB+draft"]\ntrees = ["chain"]\nbudgets = [2]\n'
                f'prompts = ["{prompts}"]\n')
    p = subprocess.run([args.redwood, "bench", "run", streamed, "--out", os.path.join(tmp, "streamed")],
                       capture_output=True, text=True, timeout=600)
    check("streamed suite runs", p.returncode == 0, p.stderr[-800:])
    if p.returncode == 0:
        smd = open(os.path.join(tmp, "streamed", "results.md")).read()
        split = smd[smd.find("Where the time goes"):] if "Where the time goes" in smd else ""
        rows_ = [line.split("|")[1:-1] for line in split.splitlines() if line.startswith("| m |")]
        check("time-split table: one row per streamed cell", len(rows_) == 2, smd[-800:])
        sdoc = json.load(open(os.path.join(tmp, "streamed", "results.json")))
        ts = [c.get("time_split") for c in sdoc["cells"]]
        check("json: time_split for every streamed cell", all(ts), json.dumps(sdoc["cells"][0])[:300])
        if all(ts):
            check("time-split: reads at a positive rate; I/O, compute and passes took time",
                  all(t["read_gb_per_s"] > 0 and t["io_busy_s_per_pass"] > 0 and t["compute_s_per_pass"] > 0
                      and t["pass_s"] >= c["stall_s_per_pass"] and "stall_s_per_pass" not in t
                      for c, t in zip(sdoc["cells"], ts)), str(ts))
            check("time-split: the chain cell drafts, autoregressive does not",
                  [t["draft_s_per_step"] > 0 for t in ts] == [False, True], str(ts))
            # The arithmetic, against the summary's own sums (the result lines' metrics).
            ok = True
            for c, t in zip(sdoc["cells"], ts):
                sm, st = c["summary"], c["summary"]["streamed"]
                steps = sm["target_passes"] or sm["tokens"]
                ok &= abs(t["step_s"] * steps - sm["decode_seconds"]) < 1e-9 * max(1.0, sm["decode_seconds"])
                ok &= abs(t["pass_s"] * sm["streamed_passes"] - st["wall_seconds"]) < 1e-6
                ok &= abs(t["read_gb_per_s"] * st["io_seconds"] * 1e9 - st["storage_bytes"]) < 1e-3 * st["storage_bytes"]
            check("time-split: per step and per pass from the summary's sums", ok, str(ts))
            # A fresh cell's per-prompt sums are its model's whole streaming since it was loaded.
            check("per-prompt sums cover every pass", all(
                c["summary"]["streamed"]["storage_bytes"] == c["summary"]["offload"]["storage_bytes"] and
                c["summary"]["streamed_passes"] == c["summary"]["offload"]["passes"] for c in sdoc["cells"]),
                json.dumps([(c["summary"]["streamed"], c["summary"]["offload"]) for c in sdoc["cells"]])[:600])
            # Resumed (nothing left to run, no model loaded): the same split, read from the result lines.
            p = subprocess.run([args.redwood, "bench", "run", streamed, "--out", os.path.join(tmp, "streamed")],
                               capture_output=True, text=True, timeout=600)
            again = json.load(open(os.path.join(tmp, "streamed", "results.json")))
            check("resumed: the same time split", p.returncode == 0 and
                  [c.get("time_split") for c in again["cells"]] == ts, p.stderr[-400:])
    return finish()


if __name__ == "__main__":
    sys.exit(main())
