#!/usr/bin/env python3
"""Issue 32, a hostile user's findings, end to end (labels "python;model"; about a minute).

    python3 tests/python/test_hostile_cli.py --redwood build/redwood --model models/SmolLM2-135M-Instruct.Q4_1.gguf

Checks, each a one-line error and exit 1 unless said otherwise:
  out:      no writer replaces an input (make-draft, logits, profile-*, --trace; by path, "..",
            symlink or hard link) or a non-regular file (a FIFO); --trace streams to a FIFO.
  batch:    output.summary is never the results file (however spelled) or the job file.
  fifo:     a FIFO given as any input is refused at once (every command runs under a timeout:
            the old code blocked forever on open).
  stdout:   a failed write on stdout (/dev/full) is exit 1 with a line on stderr.
  validate: --temperature inf, --seed -1 / overflow, --device-mem "", --tree sequoia:,
            SIZE+draft without --draft; "" for any option (--temperature, --verify, ...),
            --acceptance with a tree that is not the Sequoia DP's.
  signal:   SIGINT, SIGTERM or SIGHUP during `pack` or `quantize` kills it (exit by the signal)
            and leaves neither the output nor its temp file.
  fsize:    a file-size limit (ulimit -f) hit by `pack` or `quantize` is a one-line error.
Only the files of a temporary folder are written (copies of a small self-draft stand in for models).
"""
from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

from harness import check, default_signals, summary as finish, cli_args


def run(rw: str, args: list[str], timeout: float = 120, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    """Runs redwood; a hang past `timeout` comes back as returncode None with stderr "TIMEOUT"."""
    try:
        return subprocess.run([rw, *args], stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess([rw, *args], None, "", "TIMEOUT (hung)")


def one_line_error(p: subprocess.CompletedProcess, needle: str = "") -> bool:
    lines = p.stderr.strip().splitlines()
    return p.returncode == 1 and len(lines) == 1 and lines[0].startswith("redwood: ") and needle in lines[0]


def sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def is_fifo(path: str) -> bool:
    return os.path.exists(path) and stat.S_ISFIFO(os.stat(path).st_mode)


def main() -> int:
    args = cli_args()
    rw = args.redwood
    if not os.path.exists(args.model):
        print(f"SKIP: {args.model} missing (run tools/fetch-models.sh)")
        return 0
    tmp = tempfile.mkdtemp(prefix="redwood_hostile_cli_")
    try:
        return body(rw, args.model, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def body(rw: str, big: str, tmp: str) -> int:
    model = os.path.join(tmp, "m.gguf")  # a 3-block self-draft stands in for the target
    draft = os.path.join(tmp, "d.gguf")
    for path, layers in ((model, "3"), (draft, "2")):
        p = run(rw, ["make-draft", "--from", big, "--layers", layers, "--out", path], timeout=300)
        if p.returncode != 0:
            print(f"setup: make-draft failed: {p.stderr}")
            return 1
    pristine, pristine_draft = os.path.join(tmp, "pristine.gguf"), os.path.join(tmp, "pristine-draft.gguf")
    shutil.copyfile(model, pristine)
    shutil.copyfile(draft, pristine_draft)
    model_sha, draft_sha = sha(model), sha(draft)

    def restore() -> None:  # after a case that (on broken code) replaced the model or the draft
        for path, want, copy in ((model, model_sha, pristine), (draft, draft_sha, pristine_draft)):
            if not os.path.isfile(path) or sha(path) != want:
                if os.path.lexists(path):
                    os.remove(path)
                shutil.copyfile(copy, path)

    prompts = os.path.join(tmp, "p.jsonl")
    with open(prompts, "w") as f:
        f.write('{"id": 1, "prompt": "Hello"}\n')
    prompts_sha = sha(prompts)
    fifo = os.path.join(tmp, "fifo")
    os.mkfifo(fifo)
    os.makedirs(os.path.join(tmp, "sub"))
    gen = ["-p", "Hi", "-n", "2"]

    # ---- out: the output-path policy ---------------------------------------------------------
    spellings = {"itself": model, "dotdot": os.path.join(tmp, "sub", "..", "m.gguf"), "dot": tmp + "/./m.gguf"}
    os.symlink(model, os.path.join(tmp, "link.gguf"))
    spellings["symlink"] = os.path.join(tmp, "link.gguf")
    os.link(model, os.path.join(tmp, "hard.gguf"))
    spellings["hardlink"] = os.path.join(tmp, "hard.gguf")
    for name, out in spellings.items():
        p = run(rw, ["make-draft", "--from", model, "--layers", "1", "--out", out])
        check(f"out: make-draft --out the source ({name}) is refused", one_line_error(p, "input"),
              f"rc={p.returncode} {p.stderr[-300:]}")
        check(f"out: make-draft --out the source ({name}) leaves it intact", sha(model) == model_sha, "replaced")
        restore()
    p = run(rw, ["make-draft", "--from", model, "--layers", "1", "--out", fifo])
    check("out: make-draft --out FIFO is refused", one_line_error(p, "not a regular file"),
          f"rc={p.returncode} {p.stderr[-300:]}")
    check("out: make-draft --out FIFO leaves the FIFO", is_fifo(fifo), "the FIFO was replaced")
    if not is_fifo(fifo):
        os.remove(fifo)
        os.mkfifo(fifo)
    p = run(rw, ["logits", "-m", model, "--tokens", "1,2", "--out", os.path.join(tmp, "sub", "..", "m.gguf")])
    check("out: logits --out MODEL is refused", one_line_error(p, "input"), f"rc={p.returncode} {p.stderr[-300:]}")
    check("out: logits --out MODEL leaves it intact", sha(model) == model_sha, "replaced")
    restore()
    p = run(rw, ["profile-acceptance", "-m", model, "--draft", draft, "--prompts", prompts, "--out", prompts,
                 "--count", "4", "--repeats", "1", "--max-tokens", "2", "--chain-depth", "0", "-q"], timeout=300)
    check("out: profile-acceptance --out PROMPTS is refused", one_line_error(p, "input"),
          f"rc={p.returncode} {p.stderr[-300:]}")
    check("out: profile-acceptance --out PROMPTS leaves them intact", sha(prompts) == prompts_sha, "replaced")
    with open(prompts, "w") as f:
        f.write('{"id": 1, "prompt": "Hello"}\n')
    p = run(rw, ["profile-hardware", "-m", model, "--draft", draft, "--out", draft, "--sizes", "1", "--widths", "1",
                 "--repeats", "1", "--prefix", "4", "-q"], timeout=300)
    check("out: profile-hardware --out DRAFT is refused", one_line_error(p, "input"),
          f"rc={p.returncode} {p.stderr[-300:]}")
    check("out: profile-hardware --out DRAFT leaves it intact", sha(draft) == draft_sha, "replaced")
    restore()
    p = run(rw, ["generate", "-m", model, "--device-mem", "1GiB", "--trace", model, *gen])
    check("out: generate --trace MODEL is refused", one_line_error(p, "input"), f"rc={p.returncode} {p.stderr[-300:]}")
    check("out: generate --trace MODEL leaves it intact", sha(model) == model_sha, "replaced")
    restore()
    # --trace FIFO: streamed to the reader, the FIFO stays.
    got = os.path.join(tmp, "trace-read.json")
    with open(got, "wb") as sink:
        reader = subprocess.Popen(["cat", fifo], stdout=sink)
        p = run(rw, ["generate", "-m", model, "--device-mem", "1GiB", "--trace", fifo, *gen])
        try:
            reader.wait(timeout=30)
        except subprocess.TimeoutExpired:
            reader.kill()
            reader.wait()
    check("out: generate --trace FIFO exits 0", p.returncode == 0, p.stderr[-300:])
    check("out: generate --trace FIFO keeps the FIFO", is_fifo(fifo), "the FIFO was replaced by a file")
    try:
        with open(got) as f:
            trace_ok = bool(json.load(f))
    except (ValueError, OSError):
        trace_ok = False
    check("out: generate --trace FIFO streams the JSON to the reader", trace_ok, open(got, "rb").read()[:200])
    if not is_fifo(fifo):
        os.remove(fifo)
        os.mkfifo(fifo)
    # A regular file that is no input is still replaced (atomically).
    other = os.path.join(tmp, "other.gguf")
    with open(other, "w") as f:
        f.write("old")
    p = run(rw, ["make-draft", "--from", model, "--layers", "1", "--out", other])
    check("out: make-draft over another regular file works", p.returncode == 0 and sha(other) != sha(model),
          p.stderr[-300:])

    # ---- batch: output.summary --------------------------------------------------------------
    out_dir = os.path.join(tmp, "out")
    os.makedirs(out_dir)
    results = os.path.join(out_dir, "sp.jsonl")
    job = os.path.join(tmp, "job.toml")
    for name, summary in (("results ./", os.path.join(out_dir, ".", "sp.jsonl")),
                          ("results ..", os.path.join(out_dir, "..", "out", "sp.jsonl")),
                          ("the job file", job), ("the prompt file", prompts), ("the model", model)):
        with open(job, "w") as f:
            f.write(f'[model]\ntarget = "{model}"\n[sampling]\nmax_tokens = 2\n[input]\nprompts = "{prompts}"\n'
                    f'[output]\npath = "{results}"\nsummary = "{summary}"\n')
        job_sha = sha(job)
        if os.path.exists(results):
            os.remove(results)
        p = run(rw, ["batch", job], timeout=300)
        check(f"batch: output.summary = {name} is refused", one_line_error(p, "output.summary"),
              f"rc={p.returncode} {p.stderr[-300:]}")
        check(f"batch: output.summary = {name}: nothing ran or was replaced",
              not os.path.exists(results) and sha(job) == job_sha and sha(prompts) == prompts_sha and
              sha(model) == model_sha, "an input or the results were written")
        restore()
        with open(prompts, "w") as f:
            f.write('{"id": 1, "prompt": "Hello"}\n')

    # ---- batch: an output directory that exists but is read-only is named so ------------------
    # (not "cannot create directory"). Root writes anywhere, so as root the job runs as nobody.
    ro = os.path.join(tmp, "ro")
    os.makedirs(ro)
    with open(job, "w") as f:
        f.write(f'[model]\ntarget = "{model}"\n[sampling]\nmax_tokens = 2\n[input]\nprompts = "{prompts}"\n'
                f'[output]\npath = "{os.path.join(ro, "out.jsonl")}"\n')
    as_user = []
    if os.geteuid() == 0 and shutil.which("setpriv"):
        as_user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        for path in (tmp, job, prompts, model):
            os.chmod(path, 0o755 if os.path.isdir(path) else 0o644)
    os.chmod(ro, 0o555)
    # (skipped where that user cannot reach the binary or the files, e.g. a clone under a private home)
    reachable = not as_user or subprocess.run(as_user + ["sh", "-c", 'test -x "$0" && test -r "$1" && test -r "$2"',
                                                         rw, model, prompts]).returncode == 0
    if (os.geteuid() != 0 or as_user) and reachable:
        p = subprocess.run(as_user + [rw, "batch", job, "-q"], capture_output=True, text=True, timeout=120)
        check("batch: a read-only output directory is named as such", one_line_error(p, "exists but is not writable")
              and "cannot create" not in p.stderr, f"rc={p.returncode} {p.stderr[-300:]}")
        hf = os.path.join(tmp, "hf")  # a model directory this user cannot read: not "no config.json"
        os.makedirs(hf)
        with open(os.path.join(hf, "config.json"), "w") as f:
            f.write("{}")
        os.chmod(hf, 0o700 if as_user else 0o000)
        p = subprocess.run(as_user + [rw, "info", hf], capture_output=True, text=True, timeout=60)
        check("info: an unreadable model directory is named as such", one_line_error(p, "cannot read the directory")
              and "no config.json" not in p.stderr, f"rc={p.returncode} {p.stderr[-300:]}")
        os.chmod(hf, 0o755)
    os.chmod(ro, 0o755)

    # ---- fifo: every input ------------------------------------------------------------------
    configs = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs")
    hw_cfg = os.path.join(configs, "hardware", "l40.toml")
    cfg = os.path.join(configs, "models", "llama2-7b.toml")
    fifo_cases = {
        "info": ["info", fifo],
        "generate -m": ["generate", "-m", fifo, *gen],
        "generate --draft": ["generate", "-m", model, "--draft", fifo, *gen],
        "generate --acceptance": ["generate", "-m", model, "--draft", draft, "--acceptance", fifo, *gen],
        "generate --tree sequoia:FIFO": ["generate", "-m", model, "--draft", draft, "--tree", "sequoia:" + fifo, *gen],
        "generate --hardware-profile": ["generate", "-m", model, "--draft", draft, "--tree", "auto",
                                        "--hardware-profile", fifo, *gen],
        "tokenize --jsonl": ["tokenize", "-m", model, "--jsonl", fifo],
        "plan --model-config": ["plan", "--model-config", fifo, "--draft-config", cfg, "--hardware", hw_cfg],
        "profile-acceptance --prompts": ["profile-acceptance", "-m", model, "--draft", draft, "--prompts", fifo,
                                         "--out", os.path.join(tmp, "prof.json")],
        "batch JOB": ["batch", fifo],
        "bench run SUITE": ["bench", "run", fifo, "--out", os.path.join(tmp, "bench-out")],
        "make-draft --from": ["make-draft", "--from", fifo, "--layers", "1", "--out", os.path.join(tmp, "x.gguf")],
        "plan-memory -m": ["plan-memory", "-m", fifo],
    }
    for name, argv in fifo_cases.items():
        p = run(rw, argv, timeout=20)
        check(f"fifo: {name} FIFO is refused at once", one_line_error(p, "FIFO"),
              f"rc={p.returncode} {p.stderr[-300:]}")
        if not is_fifo(fifo):
            if os.path.lexists(fifo):
                os.remove(fifo)
            os.mkfifo(fifo)

    # ---- stdout: write errors ---------------------------------------------------------------
    if os.path.exists("/dev/full"):
        for name, argv in (("generate --json", ["generate", "-m", model, "--json", *gen]),
                           ("generate (streaming)", ["generate", "-m", model, *gen]),
                           ("info --json", ["info", model, "--json"]),
                           ("tokenize", ["tokenize", "-m", model, "--text", "hello"]),
                           ("plan-memory --json", ["plan-memory", "-m", model, "--json"])):
            with open("/dev/full", "w") as full:
                p = run(rw, argv, stdout=full)
            last = p.stderr.strip().splitlines()[-1:] or [""]  # generate prints its stats line first
            check(f"stdout: {name} > /dev/full is exit 1", p.returncode == 1 and
                  last[0].startswith("redwood: cannot write to standard output"), f"rc={p.returncode} {p.stderr[-300:]}")

    # ---- validate: options named before any work ---------------------------------------------
    acc = os.path.join(tmp, "acc.json")
    with open(acc, "w") as f:
        json.dump({"acceptance": [0.8, 0.1]}, f)
    for name, argv, needle in (
        # Issue 42: "" was read as 0 / as not given; --acceptance was ignored by a chain.
        ("--temperature ''", ["generate", "-m", model, "--temperature", "", *gen], "--temperature"),
        ("--verify ''", ["generate", "-m", model, "--draft", draft, "--verify", "", *gen], "--verify"),
        ("--threshold ''", ["generate", "-m", model, "--draft", draft, "--tree", "dyspec", "--threshold", "", *gen],
         "--threshold"),
        ("plan --ctx ''", ["plan", "--model-config", cfg, "--hardware", hw_cfg, "--ctx", ""], "--ctx"),
        ("--acceptance with a chain", ["generate", "-m", model, "--draft", draft, "--tree", "chain:3",
                                       "--acceptance", acc, *gen], "--acceptance is only for --tree sequoia"),
        ("--temperature inf", ["generate", "-m", model, "--temperature", "inf", *gen], "finite"),
        ("--seed -1", ["generate", "-m", model, "--seed", "-1", *gen], "--seed"),
        ("--seed overflow", ["generate", "-m", model, "--seed", "99999999999999999999", *gen], "--seed"),
        ("--device-mem ''", ["generate", "-m", model, "--device-mem", "", *gen], "--device-mem"),
        ("--host-mem ''", ["generate", "-m", model, "--host-mem", "", *gen], "--host-mem"),
        ("--tree sequoia:", ["generate", "-m", model, "--draft", draft, "--tree", "sequoia:", *gen], "sequoia:"),
        ("SIZE+draft without --draft", ["generate", "-m", model, "--device-mem", "1GiB+draft", *gen], "--draft"),
        ("plan-memory SIZE+draft without --draft", ["plan-memory", "-m", model, "--device-mem", "1GiB+draft"],
         "--draft"),
    ):
        p = run(rw, argv)
        check(f"validate: {name} is refused", one_line_error(p, needle), f"rc={p.returncode} {p.stderr[-300:]}")
    for name, line, needle in (("duplicate key", '{"id": 1, "prompt": "a", "prompt": "b"}', "duplicate key"),
                               ("unknown key", '{"id": 1, "prompt": "a", "temperature": 5}', "unknown key")):
        bad = os.path.join(tmp, "bad.jsonl")
        with open(bad, "w") as f:
            f.write(line + "\n")
        p = run(rw, ["profile-acceptance", "-m", model, "--draft", draft, "--prompts", bad, "--out",
                     os.path.join(tmp, "prof.json"), "--count", "4", "--repeats", "1", "--max-tokens", "2",
                     "--chain-depth", "0", "-q"], timeout=300)
        check(f"validate: prompt line with a {name} is refused", one_line_error(p, needle),
              f"rc={p.returncode} {p.stderr[-300:]}")

    # ---- signal: a writer killed mid-write leaves no temp file ------------------------------
    # A 256 MiB F16 model, so that pack and quantize are still writing when the signal comes
    # (the test waits for the writer to hold its temp file open, named or unnamed (O_TMPFILE),
    # then signals).
    synth = os.path.join(tmp, "synth-f16.gguf")
    tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "make-synthetic-gguf.py")
    g = subprocess.run([sys.executable, tool, "--layers", "8", "--dim", "1024", "--heads", "8", "--kv-heads", "8",
                        "--ffn", "4096", "--vocab", "1000", "--type", "F16", "--out", synth],
                       capture_output=True, text=True, timeout=300)
    check("signal: synthetic model made", g.returncode == 0, g.stderr[-300:])
    outdir = os.path.join(tmp, "sig")
    os.makedirs(outdir, exist_ok=True)
    for cmd, extra in (("pack", []), ("quantize", ["--type", "Q8_0"])):
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            out = os.path.join(outdir, f"{cmd}.out")
            proc = subprocess.Popen([rw, cmd, "--from", synth, "--out", out, *extra],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True, preexec_fn=default_signals)
            deadline, seen = time.time() + 60, False
            while time.time() < deadline and proc.poll() is None:
                try:
                    fds = [os.readlink(f"/proc/{proc.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{proc.pid}/fd")]
                except OSError:
                    fds = []
                if any(t.startswith(outdir + "/") for t in fds):
                    seen = True
                    break
                time.sleep(0.002)
            proc.send_signal(sig)
            rc = proc.wait(timeout=120)
            left = os.listdir(outdir)
            check(f"signal: {cmd} killed by {sig.name} mid-write leaves nothing", seen and rc == -sig and not left,
                  f"temp file seen={seen} rc={rc} left={left}")
            for f in left:
                os.remove(os.path.join(outdir, f))

    # A file-size limit (ulimit -f 1 MiB) hit mid-write: one line naming the output, exit 1, no
    # temp file (SIGXFSZ used to kill the writer and leave it).
    def small_fsize() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    for cmd, extra in (("pack", []), ("quantize", ["--type", "Q8_0"])):
        out = os.path.join(outdir, f"{cmd}.out")
        p = subprocess.run([rw, cmd, "--from", synth, "--out", out, *extra], capture_output=True, text=True,
                           timeout=300, preexec_fn=small_fsize)
        left = os.listdir(outdir)
        check(f"fsize: {cmd} past ulimit -f is a one-line error, nothing left",
              one_line_error(p, out) and "too large" in p.stderr and not left,
              f"rc={p.returncode} {p.stderr[-300:]} left={left}")
        for f in left:
            os.remove(os.path.join(outdir, f))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
