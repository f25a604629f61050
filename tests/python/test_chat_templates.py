#!/usr/bin/env python3
"""The chat formatting cases of tests/data/chat_templates.json against their oracles
(issue 46, item 2; test_runtime's ChatTemplates.* checks Redwood against the same file):

    python3 tests/python/test_chat_templates.py [--llamacpp build/llamacpp/src]

Checks, for every case:
    source   : the template is the one shipped (a .jinja file or a vocab GGUF's
               tokenizer.chat_template in the llama.cpp source; needs the source and the gguf package).
    jinja2   : the template rendered by Jinja2 (as Hugging Face's apply_chat_template) is the expected text.
    llama.cpp: llama_chat_apply_template (libllama, through ctypes) gives the expected text where the case
               says so (ChatML without a default system message; the fallback through its "chatml" name).
Each oracle that is missing is said and skipped; exit 77 (skip) when none ran.
Prints "N passed, M failed" and exits non-zero on any failure.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys

from harness import check, summary

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class LlamaChat:
    """llama_chat_apply_template from libllama."""

    class Message(ctypes.Structure):
        _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]

    def __init__(self, lib_dir: str):
        for dep in ("libggml-base.so", "libggml-cpu.so", "libggml.so"):
            p = os.path.join(lib_dir, dep)
            if os.path.exists(p):
                ctypes.CDLL(p, mode=ctypes.RTLD_GLOBAL)
        self.lib = ctypes.CDLL(os.path.join(lib_dir, "libllama.so"))
        f = self.lib.llama_chat_apply_template
        f.argtypes = [ctypes.c_char_p, ctypes.POINTER(self.Message), ctypes.c_size_t, ctypes.c_bool,
                      ctypes.c_char_p, ctypes.c_int32]
        f.restype = ctypes.c_int32

    def apply(self, tmpl: str, messages: list[dict]) -> str:
        arr = (self.Message * len(messages))(
            *[self.Message(m["role"].encode(), m["content"].encode()) for m in messages])
        size = 4096
        while True:
            buf = ctypes.create_string_buffer(size)
            n = self.lib.llama_chat_apply_template(tmpl.encode(), arr, len(messages), True, buf, size)
            if n < 0:
                raise RuntimeError(f"llama_chat_apply_template: {n} (template not supported)")
            if n <= size:
                return buf.raw[:n].decode()
            size = n


def shipped_template(models: str, source: str) -> str | None:
    path = os.path.join(models, source)
    if source.endswith(".gguf"):
        import gguf  # noqa: PLC0415 (optional)
        r = gguf.GGUFReader(path)
        f = r.fields["tokenizer.chat_template"]
        return bytes(f.parts[f.data[0]]).decode()
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llamacpp", default=os.path.join(ROOT, "build", "llamacpp", "src"))
    ap.add_argument("--data", default=os.path.join(ROOT, "tests", "data", "chat_templates.json"))
    a = ap.parse_args()
    with open(a.data, encoding="utf-8") as fh:
        doc = json.load(fh)
    templates, cases = doc["templates"], doc["cases"]
    ran = 0

    models = os.path.join(a.llamacpp, "models")
    if os.path.isdir(models):
        try:
            import gguf  # noqa: F401,PLC0415
            have_gguf = True
        except ImportError:
            have_gguf = False
            print("skip: no gguf package (the vocab GGUFs' templates are not compared)")
        for name, t in templates.items():
            if t["source"] == "redwood" or (t["source"].endswith(".gguf") and not have_gguf):
                continue
            check(f"source {name}: the template is {t['source']} as shipped",
                  shipped_template(models, t["source"]) == t["text"])
            ran += 1
    else:
        print(f"skip: no llama.cpp source at {a.llamacpp} (shipped templates not compared)")

    try:
        from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: PLC0415
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        for c in cases:
            t = templates[c["template"]]
            got = env.from_string(t["text"]).render(messages=c["messages"], add_generation_prompt=True,
                                                    bos_token=t.get("bos_token", ""), eos_token=t.get("eos_token", ""))
            check(f"jinja2 {c['template']} / {c['conversation']}", got == c["expected"], repr(got))
            ran += 1
    except ImportError:
        print("skip: no jinja2 (the templates' own rendering is not compared)")

    lib_dir = os.path.join(a.llamacpp, "build", "bin")
    if os.path.exists(os.path.join(lib_dir, "libllama.so")):
        chat = LlamaChat(lib_dir)
        for c in cases:
            if not c["llamacpp"]:
                continue
            t = templates[c["template"]]
            got = chat.apply(t.get("llamacpp_name", t["text"]), c["messages"])
            check(f"llama.cpp {c['template']} / {c['conversation']}", got == c["expected"], repr(got))
            ran += 1
    else:
        print(f"skip: no libllama under {lib_dir} (llama_chat_apply_template not compared)")

    if ran == 0:
        print("skip: no oracle available")
        return 77
    return summary()


if __name__ == "__main__":
    sys.exit(main())
