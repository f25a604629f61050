#!/usr/bin/env python3
"""`redwood serve` against the official `openai` client and raw HTTP, on the
default model, loopback only (labels "python;model").

    python3 tests/python/test_serve.py --redwood build/redwood --model models/SmolLM2-135M-Instruct.Q4_1.gguf

Checks:
    api       : /v1/models, /health, chat and completion, streamed and not (same text), usage,
                stop strings, seed reproducibility, errors (unsupported field, unknown field,
                unknown model, bad JSON, oversized body) in OpenAI's shape.
    identity  : a greedy request's text equals `redwood generate` with the same settings, alone and
                while 15 other requests run.
    load      : 16 clients, 64 requests (greedy ones checked against their solo text, streams that
                disconnect mid-way, malformed JSON, oversized bodies); the server stays up and
                /metrics ends with nothing in flight or queued.
    solo/keys : --sequences 1 --max-queue 0 (one request at a time through generate): a second
                concurrent request gets 429 with Retry-After; --api-key: 401 without the key.
    refused   : a non-loopback --host without --api-key exits 2 with one line.
    config    : --config FILE (configs/serve/ keys): its max_tokens, batch and API key (from the
                variable api_key_env names) apply, flags given win over its keys; an unknown key,
                a wrong type, an unset key variable: one line naming file:line and key, exit 2.
    slow      : server.timeout_s = 2 and a connection pool of 7: 8 clients trickling their headers, one
                trickling its body, one connection idle, one stream never read; a normal request still
                completes in bounded time, the slow ones are closed by the server near the timeout, and
                /metrics ends with nothing in flight.
    shutdown  : SIGTERM with a stream in flight: the stream ends, exit 0 within a bound.
Prints "N passed, M failed" and exits non-zero on any failure.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import http.client
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from harness import check, summary

try:
    import openai
except ImportError:  # tools/setup.sh installs it (PY_PACKAGES)
    print("openai is not installed: pip install openai")
    sys.exit(1)

CTX = "512"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPTS = ["What is the capital of France?", "Name three colors.", "Write a haiku about rain.",
           "What is 12 times 3?", "Say hello in Spanish.", "Why is the sky blue?", "List two fruits.",
           "Who wrote Hamlet?"]


class Server:
    def __init__(self, rw: str, model: str, *extra: str, env: dict | None = None):
        self.p = subprocess.Popen([rw, "serve", "-m", model, "--port", "0", "--ctx", CTX, *extra],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = self.p.stdout.readline()
        m = re.search(r"http://([^:]+):(\d+)", line)
        if not m:
            self.p.kill()
            raise RuntimeError("no port line: " + line + self.p.stderr.read())
        self.port = int(m.group(2))
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 120
        while time.time() < deadline:
            st, _, _ = self.get("/health")
            if st == 200:
                return
            time.sleep(0.2)
        raise RuntimeError("the server never became ready")

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, r.read().decode("utf-8", "replace"), dict(r.getheaders())
        finally:
            c.close()

    def get(self, path: str):
        try:
            return self.request("GET", path)
        except OSError:
            return 0, "", {}

    def post(self, path: str, obj, headers: dict | None = None):
        body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        h = {"Content-Type": "application/json", **(headers or {})}
        st, text, hd = self.request("POST", path, body, h)
        try:
            return st, json.loads(text), hd
        except json.JSONDecodeError:
            return st, text, hd

    def metrics(self) -> dict:
        _, text, _ = self.get("/metrics")
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def client(self, key: str = "none") -> "openai.OpenAI":
        return openai.OpenAI(base_url=self.base + "/v1", api_key=key, max_retries=0, timeout=120)

    def stop(self, sig=signal.SIGTERM, timeout: float = 30) -> int:
        if self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            return -999


def chat(cl, model, prompt, **kw):
    return cl.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}], **kw)


def stream_text(stream) -> tuple[str, str, object]:
    text, finish, usage = "", None, None
    for ch in stream:
        if ch.usage:
            usage = ch.usage
        for c in ch.choices:
            piece = c.delta.content if hasattr(c, "delta") else c.text
            text += piece or ""
            finish = c.finish_reason or finish
    return text, finish, usage


def api_checks(s: Server, model: str) -> None:
    cl = s.client()
    ids = [m.id for m in cl.models.list().data]
    check("models: one, the served model", ids == [model], str(ids))
    st, body, _ = s.request("GET", "/health")
    check("health: ok", st == 200 and json.loads(body)["status"] == "ok", body)

    r = chat(cl, model, PROMPTS[0], max_tokens=16, temperature=0)
    text = r.choices[0].message.content
    check("chat: text, finish, usage", bool(text) and r.choices[0].finish_reason in ("stop", "length") and
          r.usage.completion_tokens > 0 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens,
          str(r))
    st_text, st_finish, usage = stream_text(chat(cl, model, PROMPTS[0], max_tokens=16, temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    check("chat stream: the same text and finish, usage last", st_text == text and
          st_finish == r.choices[0].finish_reason and usage is not None and
          usage.completion_tokens == r.usage.completion_tokens, f"{st_text!r} vs {text!r}, {usage}")

    c = cl.completions.create(model=model, prompt="The capital of France is", max_tokens=12, temperature=0)
    ctext = c.choices[0].text
    check("completion: text and usage", bool(ctext) and c.usage.completion_tokens > 0, str(c))
    cs, cfin, _ = stream_text(cl.completions.create(model=model, prompt="The capital of France is", max_tokens=12,
                                                    temperature=0, stream=True))
    check("completion stream: the same text", cs == ctext and cfin == c.choices[0].finish_reason, f"{cs!r} {ctext!r}")

    words = [w for w in re.findall(r"[A-Za-z]{3,}", ctext)]
    if len(words) >= 2:
        stop = words[1]
        cut = cl.completions.create(model=model, prompt="The capital of France is", max_tokens=12, temperature=0,
                                    stop=[stop, "zzzz"])
        check("stop: the text ends before the stop string", cut.choices[0].text == ctext[:ctext.index(stop)] and
              cut.choices[0].finish_reason == "stop", f"{cut.choices[0].text!r} / {ctext!r} / {stop!r}")
        scut, sfin, _ = stream_text(cl.completions.create(model=model, prompt="The capital of France is",
                                                          max_tokens=12, temperature=0, stop=stop, stream=True))
        check("stop: streamed too", scut == cut.choices[0].text and sfin == "stop", repr(scut))
    else:
        check("stop: a greedy text with two words to stop at", False, repr(ctext))

    a = [chat(cl, model, PROMPTS[2], max_tokens=16, temperature=0.9, seed=s_).choices[0].message.content
         for s_ in (5, 5, 6, 7)]
    check("seed: the same seed, the same text", a[0] == a[1], f"{a[0]!r} {a[1]!r}")
    check("seed: other seeds, other texts", a[2] != a[0] or a[3] != a[0], str(a))

    def error_of(fn):
        try:
            fn()
        except openai.APIStatusError as e:
            return e
        return None

    e = error_of(lambda: chat(cl, model, "hi", n=2))
    check("error: n=2 is a 400 naming n", isinstance(e, openai.BadRequestError) and e.body.get("param") == "n", str(e))
    e = error_of(lambda: chat(cl, model, "hi", tools=[{"type": "function", "function": {"name": "f"}}]))
    check("error: tools is a 400 naming tools", isinstance(e, openai.BadRequestError) and
          e.body.get("param") == "tools", str(e))
    e = error_of(lambda: chat(cl, model, "hi", extra_body={"frobnicate": 1}))
    check("error: an unknown field is a 400 naming it", isinstance(e, openai.BadRequestError) and
          "frobnicate" in str(e), str(e))
    e = error_of(lambda: chat(cl, "gpt-4o", "hi"))
    check("error: an unknown model is a 404 model_not_found", isinstance(e, openai.NotFoundError) and
          e.body.get("code") == "model_not_found", str(e))
    e = error_of(lambda: chat(cl, model, "hi", temperature=5))
    check("error: temperature out of range is a 400", isinstance(e, openai.BadRequestError), str(e))
    e = error_of(lambda: chat(cl, model, "word " * 600, max_tokens=16))
    check("error: a prompt beyond --ctx is a 400", isinstance(e, openai.BadRequestError) and "--ctx" in str(e), str(e))
    st, body, _ = s.post("/v1/chat/completions", b"{not json")
    check("error: malformed JSON is a 400 in OpenAI's shape", st == 400 and isinstance(body, dict) and
          body["error"]["type"] == "invalid_request_error", str(body))
    st, body, _ = s.post("/v1/completions", b'{"prompt": "' + b"a" * (2 << 20) + b'"}')
    check("error: a 2 MiB body is a 413", st == 413, f"{st} {str(body)[:200]}")
    m = s.metrics()
    check("metrics: pass time split (target passes; no draft, no streamed layers here)",
          m.get("redwood_pass_seconds_total", 0) > 0 and m.get("redwood_draft_seconds_total") == 0 and
          m.get("redwood_io_wait_seconds_total") == 0, str({k: v for k, v in m.items() if "seconds" in k}))


def identity_checks(s: Server, rw: str, model_path: str, model: str) -> dict:
    """Greedy texts alone (the load test's answers) and against `redwood generate`."""
    cl = s.client()
    solo = {p: chat(cl, model, p, max_tokens=12, temperature=0).choices[0].message.content for p in PROMPTS}
    g = subprocess.run([rw, "generate", "-m", model_path, "--chat", "--prompt", PROMPTS[1], "--max-tokens", "12"],
                       capture_output=True, text=True, timeout=300)
    gen_text = g.stdout[:-1] if g.stdout.endswith("\n") else g.stdout
    check("identity: greedy text equals redwood generate's", g.returncode == 0 and gen_text == solo[PROMPTS[1]],
          f"{gen_text!r} vs {solo[PROMPTS[1]]!r} {g.stderr[-300:]}")

    def other(i):
        return chat(cl, model, PROMPTS[i % len(PROMPTS)], max_tokens=24, temperature=0.8, seed=i).choices[0]

    with cf.ThreadPoolExecutor(16) as ex:
        others = [ex.submit(other, i) for i in range(15)]
        time.sleep(0.3)
        mine = ex.submit(lambda: chat(cl, model, PROMPTS[1], max_tokens=12, temperature=0).choices[0].message.content)
        res = mine.result()
        ok = all(f.result().finish_reason in ("stop", "length") for f in others)
    check("identity: the same text while 15 other requests run", res == gen_text and ok, f"{res!r} vs {gen_text!r}")
    return solo


def draft_checks(rw: str, model_path: str, model: str, solo: dict) -> None:
    """A draft and a static tree: Sequoia trees in shared passes (4 sequences given, then the default);
    greedy texts equal the plain ones."""
    draft = os.path.join(ROOT, "models", "smollm2-draft-10L.gguf")
    for given in (["--sequences", "4"], []):
        what = "4 sequences" if given else "default sequences"
        s = Server(rw, model_path, "--draft", draft, "--tree", "sequoia", "--budget", "8", "--depth", "4", *given)
        try:
            cl = s.client()
            with cf.ThreadPoolExecutor(len(PROMPTS)) as ex:
                got = dict(zip(PROMPTS, ex.map(
                    lambda p: chat(cl, model, p, max_tokens=12, temperature=0).choices[0].message.content, PROMPTS)))
            check(f"draft, {what}: every greedy text equals the plain server's", got == solo,
                  str({p: (got[p], solo[p]) for p in PROMPTS if got[p] != solo[p]}))
            if not given:
                err = ""
                while "ready:" not in err and s.p.poll() is None:
                    err = s.p.stderr.readline()
                check("draft with a static tree: 8 sequences share the passes by default",
                      "8 sequences of up to" in err, err)
        finally:
            check(f"draft server ({what}) exits 0 on SIGTERM", s.stop() == 0)


def disconnecting_stream(s: Server, prompt: str) -> bool:
    """Reads the first bytes of a long stream, then closes the socket."""
    body = json.dumps({"messages": [{"role": "user", "content": prompt}], "max_tokens": 200, "stream": True}).encode()
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=60)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    got = sock.recv(4096)
    sock.close()
    return got.startswith(b"HTTP/1.1 200")


def load_checks(s: Server, model: str, solo: dict) -> None:
    cl = s.client()
    kinds = ["greedy", "stream", "disconnect", "greedy", "malformed", "sampled", "oversized", "greedy"]

    def one(i):
        kind, prompt = kinds[i % len(kinds)], PROMPTS[i % len(PROMPTS)]
        if kind == "greedy":
            t = chat(cl, model, prompt, max_tokens=12, temperature=0).choices[0].message.content
            return kind, t == solo[prompt], t
        if kind == "stream":
            t, fin, _ = stream_text(chat(cl, model, prompt, max_tokens=12, temperature=0, stream=True))
            return kind, t == solo[prompt], t
        if kind == "sampled":
            r = chat(cl, model, prompt, max_tokens=12, temperature=0.7, seed=i).choices[0]
            return kind, r.finish_reason in ("stop", "length"), r.finish_reason
        if kind == "disconnect":
            return kind, disconnecting_stream(s, prompt), ""
        if kind == "malformed":
            st, _, _ = s.post("/v1/chat/completions", b'{"messages": [')
            return kind, st == 400, st
        st, _, _ = s.post("/v1/chat/completions", b'{"messages": "' + b"x" * (1 << 21) + b'"}')
        return kind, st == 413, st

    def rss_mib() -> float:
        with open(f"/proc/{s.p.pid}/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) / 1024

    # Two rounds: the first warms the allocator and the connection threads; the second must not grow the
    # server's resident memory (a leak of a request's buffers or sequence would, 64 times over).
    rss = []
    for rnd in (1, 2):
        t0 = time.time()
        with cf.ThreadPoolExecutor(16) as ex:
            results = list(ex.map(one, range(64)))
        bad = [(k, v) for k, ok, v in results if not ok]
        check(f"load round {rnd}: 64 requests from 16 clients answered correctly ({time.time() - t0:.1f} s)",
              not bad, str(bad[:5]))
        rss.append(rss_mib())
    check(f"load: no memory growth in the second round (RSS {rss[0]:.0f} -> {rss[1]:.0f} MiB)",
          rss[1] <= rss[0] * 1.1 + 16, str(rss))
    st, _, _ = s.get("/health")
    check("load: the server is still up", st == 200 and s.p.poll() is None, str(st))
    deadline, m = time.time() + 30, {}
    while time.time() < deadline:
        m = s.metrics()
        if m.get("redwood_requests_in_flight") == 0 and m.get("redwood_queue_depth") == 0:
            break
        time.sleep(0.2)
    check("load: metrics back to nothing in flight or queued", m.get("redwood_requests_in_flight") == 0 and
          m.get("redwood_queue_depth") == 0 and m.get("redwood_requests_cancelled_total", 0) >= 1,
          str({k: v for k, v in m.items() if "request" in k or "queue" in k}))


def solo_and_key_checks(rw: str, model_path: str, model: str) -> None:
    s = Server(rw, model_path, "--sequences", "1", "--max-queue", "0", "--api-key", "sekrit")
    try:
        e = None
        try:
            chat(s.client("wrong"), model, "hi", max_tokens=2)
        except openai.APIStatusError as err:
            e = err
        check("key: a wrong key is a 401", isinstance(e, openai.AuthenticationError), str(e))
        st, _, _ = s.request("GET", "/v1/models")
        check("key: no key is a 401", st == 401, str(st))
        st, _, _ = s.request("GET", "/health")
        check("key: /health needs none", st == 200, str(st))
        cl = s.client("sekrit")
        # A greedy count runs to its length (no end of text): seconds, whatever the machine's speed.
        first = cf.ThreadPoolExecutor(1).submit(
            lambda: cl.completions.create(model=model, prompt="1, 2, 3, 4, 5, 6, 7, 8,", max_tokens=300,
                                          temperature=0).choices[0].finish_reason)
        time.sleep(1.0)
        st, body, hd = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                       "max_tokens": 2}, {"Authorization": "Bearer sekrit"})
        check("queue: full is a 429 with Retry-After", st == 429 and "Retry-After" in hd, f"{st} {body} {hd}")
        check("solo: the running request ends normally", first.result() in ("stop", "length"), "")
        r = chat(cl, model, PROMPTS[3], max_tokens=8, temperature=0)
        check("solo: answers again after the 429", r.choices[0].finish_reason in ("stop", "length"), str(r))
    finally:
        s.stop()


def streamed_checks(rw: str, model_path: str, model: str) -> None:
    """Layers streamed from storage (--device-mem): the answer is the resident server's, /metrics counts the
    seconds passes waited for layers, and the sequences share a KV pool sized to the budget."""
    s = Server(rw, model_path, "--device-mem", "150MiB")
    try:
        r = s.client().completions.create(model=model, prompt="1, 2, 3,", max_tokens=8, temperature=0)
        m = s.metrics()
        check("streamed: passes waited for streamed layers (redwood_io_wait_seconds_total > 0)",
              m.get("redwood_io_wait_seconds_total", 0) > 0 and m.get("redwood_pass_seconds_total", 0) > 0,
              str({k: v for k, v in m.items() if "seconds" in k}))
        err = ""
        while "ready:" not in err and s.p.poll() is None:
            err = s.p.stderr.readline()
        check("streamed: 8 sequences share a KV pool sized to the budget",
              f"8 sequences of up to {CTX} positions sharing a KV pool of" in err, err)
    finally:
        check("streamed: exits 0 on SIGTERM", s.stop() == 0, "")
    s = Server(rw, model_path)
    try:
        alone = s.client().completions.create(model=model, prompt="1, 2, 3,", max_tokens=8, temperature=0)
        check("streamed: the greedy text equals the resident server's", r.choices[0].text == alone.choices[0].text,
              f"{r.choices[0].text!r} {alone.choices[0].text!r}")
    finally:
        s.stop()


def refused_and_shutdown(rw: str, model_path: str, model: str) -> None:
    p = subprocess.run([rw, "serve", "-m", model_path, "--host", "0.0.0.0", "--port", "0"], capture_output=True,
                       text=True, timeout=60)
    check("refused: 0.0.0.0 without --api-key exits 2 with one line",
          p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "--api-key" in p.stderr,
          f"{p.returncode} {p.stderr!r}")
    s = Server(rw, model_path)
    got = {}

    def streaming():
        try:
            # A greedy count runs to its length (a story ended by itself within the 2 s below
            # on a quiet machine, so the stream finished "stop" before the SIGTERM).
            got["text"], got["finish"], _ = stream_text(s.client().completions.create(
                model=model, prompt="1, 2, 3, 4, 5, 6, 7, 8,", max_tokens=480, temperature=0, stream=True))
        except Exception as e:  # noqa: BLE001 - the check says what happened
            got["error"] = repr(e)

    th = threading.Thread(target=streaming)
    th.start()
    time.sleep(1.0)
    t0 = time.time()
    rc = s.stop(signal.SIGTERM, timeout=20)
    th.join(30)
    check("shutdown: SIGTERM mid-stream exits 0 within 10 s", rc == 0 and time.time() - t0 < 10,
          f"rc {rc} after {time.time() - t0:.1f} s {s.p.stderr.read()[-300:]}")
    check("shutdown: the stream ended (cancelled)", got.get("finish") == "cancelled" or "error" in got, str(got))


def config_checks(rw: str, model_path: str, model: str, tmp: str) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    cfg = os.path.join(tmp, "serve.toml")
    with open(cfg, "w") as f:  # the flags --port 0 and -m win over port (in use) and target (no such file)
        f.write(f"""[model]\ntarget = "no/such/model.gguf"\n[memory]\nctx = 64\nkv_type = "f16"\n
[batch]\nsequences = 2\npass_tokens = 32\n[sampling]\ntemperature = 0.0\nmax_tokens = 5\n
[server]\nport = {busy.getsockname()[1]}\nmax_queue = 3\napi_key_env = "REDWOOD_TEST_KEY"\ntimeout_s = 10\n""")
    s = Server(rw, model_path, "--config", cfg, env={**os.environ, "REDWOOD_TEST_KEY": "from-env"})
    try:
        st, _, _ = s.request("GET", "/v1/models")
        check("config: the key from api_key_env is required", st == 401, str(st))
        r = s.client("from-env").completions.create(model=model, prompt="1, 2, 3, 4,")
        check("config: sampling.max_tokens is a request's default", r.usage.completion_tokens == 5 and
              r.choices[0].finish_reason == "length", str(r))
        long_prompt = "one two three four five six seven eight nine ten " * 8  # > 64 tokens: --ctx 512 won
        r = s.client("from-env").completions.create(model=model, prompt=long_prompt, max_tokens=2)
        check("config: --ctx on the command line wins over memory.ctx", r.usage.prompt_tokens > 64, str(r.usage))
        check("config: --port 0 and -m won (served)", True, "")
        err = ""
        while "ready:" not in err and s.p.poll() is None:
            err = s.p.stderr.readline()
        check("config: batch.sequences applies", "2 sequences of up to 512 positions" in err, err)
    finally:
        check("config: exits 0 on SIGTERM", s.stop() == 0, "")
        busy.close()

    def refused(name: str, text: str, want: str, env: dict | None = None) -> None:
        bad = os.path.join(tmp, name.replace(" ", "-") + ".toml")
        with open(bad, "w") as f:
            f.write(text)
        p = subprocess.run([rw, "serve", "-m", model_path, "--config", bad, "--port", "0"], capture_output=True,
                           text=True, timeout=60, env=env)
        lines = p.stderr.strip().splitlines()
        check(f"config: {name}: exit 2, one line naming it", p.returncode == 2 and len(lines) == 1 and
              want in p.stderr and not p.stdout, f"{p.returncode} {p.stderr!r} {p.stdout!r}")

    refused("unknown key", "[server]\nport = 0\nhots = \"x\"\n", "unknown-key.toml:3: unknown key 'server.hots'")
    refused("unknown section", "[input]\nprompts = \"p.jsonl\"\n", "unknown-section.toml:1: unknown key 'input'")
    refused("bad type", "[batch]\nsequences = \"two\"\n", "bad-type.toml:2: batch.sequences: expected an integer")
    refused("out of range", "[server]\nport = 70000\n", "out-of-range.toml:2: server.port: must be in [0, 65535]")
    refused("secret in file", "[server]\napi_key = \"sekrit\"\n", "unknown key 'server.api_key'")
    refused("unset key variable", "[server]\napi_key_env = \"REDWOOD_TEST_NO_SUCH_KEY\"\n",
            "server.api_key_env: the environment variable 'REDWOOD_TEST_NO_SUCH_KEY' is not set",
            {k: v for k, v in os.environ.items() if k != "REDWOOD_TEST_NO_SUCH_KEY"})
    refused("syntax", "[server\n", "syntax.toml:1:")
    refused("speculation without draft", "[speculation]\nbudget = 8\n", "needs a draft")
    p = subprocess.run([rw, "serve", "-m", model_path, "--config", os.path.join(tmp, "none.toml")],
                       capture_output=True, text=True, timeout=60)
    check("config: a missing file: exit 2, one line", p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
          and "none.toml" in p.stderr, f"{p.returncode} {p.stderr!r}")
    shipped = os.path.join(ROOT, "configs", "serve", "default.toml")
    s = Server(rw, model_path, "--config", shipped, "--max-tokens", "3")
    try:
        r = s.client().completions.create(model=model, prompt="1, 2, 3, 4,")
        check("config: configs/serve/default.toml serves; --max-tokens wins", r.usage.completion_tokens == 3, str(r))
    finally:
        s.stop()


def slow_client_checks(rw: str, model_path: str, model: str, tmp: str) -> None:
    cfg = os.path.join(tmp, "slow.toml")
    with open(cfg, "w") as f:  # a thread per connection: sequences + max_queue + 4 = 7
        f.write("[batch]\nsequences = 2\n[server]\nmax_queue = 1\ntimeout_s = 2\n")
    s = Server(rw, model_path, "--config", cfg)
    stop = threading.Event()
    closed_after = []  # seconds until the server closed a trickling connection

    def trickle(head: bytes, drip: bytes) -> None:
        t0 = time.time()
        try:
            sock = socket.create_connection(("127.0.0.1", s.port), timeout=60)
            sock.sendall(head)
            while not stop.is_set():
                sock.sendall(drip)  # fails once the server has closed it (and a reset arrived)
                r, _, _ = select.select([sock], [], [], 0.5)
                if r and not sock.recv(4096, socket.MSG_PEEK):
                    break
                if r:  # a response (an error for a cut-off request): read it, the server closes next
                    sock.recv(65536)
        except OSError:
            pass
        closed_after.append(time.time() - t0)

    body = json.dumps({"prompt": "1, 2, 3,", "max_tokens": 4}).encode()
    threads = [threading.Thread(target=trickle, args=(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n", b"X"),
                                daemon=True) for _ in range(8)]
    threads.append(threading.Thread(target=trickle, daemon=True, args=(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + str(len(body) + 1000).encode() +
        b"\r\n\r\n" + body[:1], b" ")))
    for th in threads:
        th.start()
    idle = socket.create_connection(("127.0.0.1", s.port), timeout=60)
    reader = socket.socket()
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    reader.connect(("127.0.0.1", s.port))
    stream = json.dumps({"prompt": "Tell me a long story.", "max_tokens": 200, "stream": True}).encode()
    reader.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: " + str(len(stream)).encode() + b"\r\n\r\n" + stream)
    time.sleep(1.0)
    got = {}

    def normal() -> None:
        t0 = time.time()
        try:
            got["r"] = s.client().completions.create(model=model, prompt="1, 2, 3,", max_tokens=4, temperature=0)
        except Exception as e:  # noqa: BLE001 - the check says what happened
            got["error"] = repr(e)
        got["s"] = time.time() - t0

    th = threading.Thread(target=normal, daemon=True)
    th.start()
    th.join(20)
    check("slow: a normal request completes beside slow and stalled clients",
          "r" in got and got["s"] < 15, str(got))
    t0 = time.time()
    idle_closed = False
    try:
        idle.settimeout(15)
        idle_closed = idle.recv(1) == b""
    except OSError:
        idle_closed = True
    check("slow: an idle connection is closed", idle_closed and time.time() - t0 < 15, f"{time.time() - t0:.1f} s")
    until = time.time() + 15
    for th in threads:
        th.join(max(0.0, until - time.time()))
    stop.set()
    for th in threads:
        th.join(5)
    check("slow: trickling clients are cut off near server.timeout_s", len(closed_after) == 9 and
          max(closed_after) < 10, str([round(x, 1) for x in closed_after]))
    reader.close()
    idle.close()
    deadline = time.time() + 60
    m = {}
    while time.time() < deadline:
        m = s.metrics()
        if m.get("redwood_requests_in_flight") == 0 and m.get("redwood_queue_depth") == 0:
            break
        time.sleep(0.2)
    check("slow: nothing in flight or queued afterwards", m.get("redwood_requests_in_flight") == 0 and
          m.get("redwood_queue_depth") == 0, str({k: v for k, v in m.items() if "request" in k or "queue" in k}))
    st, _, _ = s.get("/health")
    check("slow: the server is up", st == 200 and s.p.poll() is None, str(st))
    check("slow: exits 0 on SIGTERM", s.stop() == 0, "")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--redwood", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--only", choices=["api", "load", "config", "slow"], help="api: API, errors, keys, 429, refusal, "
                    "--config, slow clients (fast); load: identity, the load test, shutdown; config, slow: those alone")
    args = ap.parse_args()
    model = os.path.basename(args.model.rstrip("/"))
    model = model[:-5] if model.endswith(".gguf") else model
    if args.only in ("config", "slow"):
        with tempfile.TemporaryDirectory() as tmp:
            (config_checks if args.only == "config" else slow_client_checks)(args.redwood, args.model, model, tmp)
        return summary()
    s = Server(args.redwood, args.model)
    try:
        if args.only != "load":
            api_checks(s, model)
        if args.only != "api":
            solo = identity_checks(s, args.redwood, args.model, model)
            load_checks(s, model, solo)
            draft_checks(args.redwood, args.model, model, solo)
    finally:
        rc = s.stop()
        check("serve exits 0 on SIGTERM", rc == 0, str(rc))
    if args.only != "load":
        solo_and_key_checks(args.redwood, args.model, model)
        streamed_checks(args.redwood, args.model, model)
        with tempfile.TemporaryDirectory() as tmp:
            config_checks(args.redwood, args.model, model, tmp)
            slow_client_checks(args.redwood, args.model, model, tmp)
    if args.only != "api":
        refused_and_shutdown(args.redwood, args.model, model)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
