#!/usr/bin/env python3
"""`redwood chat` in a pseudo-terminal (labels "python;model"; about 30 s).

    python3 tests/python/test_chat.py --redwood build/redwood --model models/SmolLM2-135M-Instruct.Q4_1.gguf

Checks:
    first turn : the reply equals `redwood generate --chat` with the same prompt (greedy).
    history    : a second turn is answered (the conversation through the chat template).
    Ctrl-C     : stops a reply, not the program ("[stopped]", the prompt again); Ctrl-C at the prompt too.
    /exit      : ends it, exit 0.
    --config   : a serve file's sampling.max_tokens is the reply's bound (--max-tokens wins), its
                 [server] ignored (an unset api_key_env too); an unknown key: one line, exit 2.
Prints "N passed, M failed" and exits non-zero on any failure.
"""
from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import tempfile
import time

from harness import check, summary, cli_args


class Term:
    def __init__(self, argv: list[str]):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execv(argv[0], argv)
        self.buf = b""

    def read_until(self, marker: bytes, timeout: float) -> bytes:
        """Output up to and including `marker` (the rest stays buffered)."""
        deadline = time.time() + timeout
        while marker not in self.buf and time.time() < deadline:
            r, _, _ = select.select([self.fd], [], [], 0.1)
            if r:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                self.buf += chunk
        if marker not in self.buf:
            out, self.buf = self.buf, b""
            raise TimeoutError(f"no {marker!r} in {out[-400:]!r}")
        i = self.buf.index(marker) + len(marker)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def send(self, data: bytes) -> None:
        os.write(self.fd, data)

    def wait(self, timeout: float) -> int | None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            try:  # keep draining the terminal
                r, _, _ = select.select([self.fd], [], [], 0.1)
                if r:
                    os.read(self.fd, 4096)
            except OSError:
                time.sleep(0.1)
        os.kill(self.pid, 9)
        os.waitpid(self.pid, 0)
        return None


def reply_of(out: bytes, sent: str) -> str:
    """The reply in a turn's echo: after the echoed line, before the next prompt."""
    text = out.decode("utf-8", "replace").replace("\r\n", "\n")
    text = text.split(sent + "\n", 1)[-1]
    return text[: text.rfind("> ")].rstrip("\n")


def main() -> int:
    args = cli_args()
    rw, model = args.redwood, args.model
    q1 = "What is the capital of France?"
    # A reply budget the dragon story below cannot finish within the half second before
    # its Ctrl-C (at 40 tokens a quiet machine finished it first); the first reply ends
    # by itself well before it.
    g = subprocess.run([rw, "generate", "-m", model, "--chat", "--prompt", q1, "--max-tokens", "400"],
                       capture_output=True, text=True, timeout=300)
    expected = g.stdout.rstrip("\n")

    t = Term([rw, "chat", "-m", model, "--max-tokens", "400", "--ctx", "1024"])
    try:
        t.read_until(b"> ", 120)
        t.send(q1.encode() + b"\n")
        first = reply_of(t.read_until(b"\n> ", 120), q1)
        check("first turn: the reply equals redwood generate --chat", first == expected and g.returncode == 0,
              f"{first!r} vs {expected!r}")
        q2 = "And of Germany?"
        t.send(q2.encode() + b"\n")
        second = reply_of(t.read_until(b"\n> ", 120), q2)
        check("history: a second turn is answered", len(second.strip()) > 0, repr(second))
        t.send(b"Write a very long story about a dragon, with many details.\n")
        t.read_until(b"details.\r\n", 30)
        time.sleep(0.5)  # some of the reply printed
        t.send(b"\x03")
        out = t.read_until(b"> ", 60)
        check("Ctrl-C: stops the reply, the prompt comes back", b"[stopped]" in out, repr(out[-200:]))
        t.send(b"\x03")
        out = t.read_until(b"> ", 30)
        check("Ctrl-C at the prompt: a note, the prompt again", b"/exit" in out, repr(out))
        t.send(b"/exit\n")
        rc = t.wait(30)
        check("/exit: exit 0", rc == 0, str(rc))
    except TimeoutError as e:
        check("the conversation went through", False, str(e))
        t.wait(1)
    config_checks(rw, model, q1)
    return summary()


def config_checks(rw: str, model: str, q1: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, "serve.toml")
        with open(cfg, "w") as f:
            f.write("[memory]\nctx = 1024\n[sampling]\nmax_tokens = 4\n[batch]\nsequences = 4\n"
                    "[server]\nport = 0\napi_key_env = \"REDWOOD_TEST_CHAT_NO_SUCH_KEY\"\n")
        want = {}
        for n in ("4", "6"):
            g = subprocess.run([rw, "generate", "-m", model, "--chat", "--prompt", q1, "--max-tokens", n],
                               capture_output=True, text=True, timeout=300)
            want[n] = g.stdout.rstrip("\n")
        for extra, n in (([], "4"), (["--max-tokens", "6"], "6")):
            t = Term([rw, "chat", "-m", model, "--config", cfg, *extra])
            try:
                t.read_until(b"> ", 120)
                t.send(q1.encode() + b"\n")
                got = reply_of(t.read_until(b"\n> ", 120), q1)
                check(f"--config: the reply is generate's with --max-tokens {n}", got == want[n],
                      f"{got!r} vs {want[n]!r}")
                t.send(b"/exit\n")
                check(f"--config: exit 0 ({' '.join(extra) or 'file only'})", t.wait(30) == 0, "")
            except TimeoutError as e:
                check("--config: the conversation went through", False, str(e))
                t.wait(1)
        with open(cfg, "w") as f:
            f.write("[sampling]\nmax_tokns = 4\n")
        p = subprocess.run([rw, "chat", "-m", model, "--config", cfg], capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
        check("--config: an unknown key: one line naming it, exit 2", p.returncode == 2 and
              len(p.stderr.strip().splitlines()) == 1 and "sampling.max_tokns" in p.stderr,
              f"{p.returncode} {p.stderr!r}")


if __name__ == "__main__":
    sys.exit(main())
