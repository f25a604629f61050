#!/usr/bin/env python3
"""Reference tokenizer oracle for Redwood (test tool only, never used by the runtime).

Builds a Hugging Face `tokenizers.Tokenizer` from the vocabulary, merges and token
types stored inside a GGUF file, for tokenizer.ggml.model == "gpt2" (byte-level BPE).

Pre-tokenizer per tokenizer.ggml.pre:
  smollm            : Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False, use_regex=True)]
  default/gpt2/...  : ByteLevel(add_prefix_space=False, use_regex=True)
Control (type 3) and user-defined (type 4) tokens are registered as added tokens so
that their literal text (e.g. "<|im_start|>") maps to their single id.

CLI:
  tokenizer_ref.py --model M --jsonl corpus.jsonl            -> one JSON id array per line
  tokenizer_ref.py --model M --text "hello world"            -> one JSON id array
  tokenizer_ref.py --model M --decode 1,2,3                  -> decoded text (JSON string)
Module:
  build_tokenizer(path) -> tokenizers.Tokenizer
  encode(tok, text) -> list[int];  decode(tok, ids) -> str
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np

# GGUF token types (llama.cpp llama_token_type)
TT_NORMAL, TT_UNKNOWN, TT_CONTROL, TT_USER_DEFINED, TT_UNUSED, TT_BYTE = 1, 2, 3, 4, 5, 6


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def read_vocab(path: str) -> dict:
    from gguf import GGUFReader

    r = GGUFReader(path, "r")
    info = {
        "model": _field(r, "tokenizer.ggml.model"),
        "pre": _field(r, "tokenizer.ggml.pre", "default"),
        "tokens": _field(r, "tokenizer.ggml.tokens"),
        "token_type": _field(r, "tokenizer.ggml.token_type"),
        "merges": _field(r, "tokenizer.ggml.merges"),
        "scores": _field(r, "tokenizer.ggml.scores"),
        "bos": _field(r, "tokenizer.ggml.bos_token_id"),
        "eos": _field(r, "tokenizer.ggml.eos_token_id"),
        "add_bos": _field(r, "tokenizer.ggml.add_bos_token", None),
    }
    if info["tokens"] is None:
        raise SystemExit(f"{path}: no tokenizer.ggml.tokens in metadata")
    if info["token_type"] is None:
        info["token_type"] = [TT_NORMAL] * len(info["tokens"])
    return info


def build_tokenizer(path: str):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    info = read_vocab(path)
    if info["model"] != "gpt2":
        raise SystemExit(f"tokenizer_ref: only tokenizer.ggml.model=gpt2 is supported, got {info['model']!r}")
    tokens = info["tokens"]
    vocab = {}
    for i, t in enumerate(tokens):
        if t in vocab:
            # keep the first id, like llama.cpp's token_to_id map
            continue
        vocab[t] = i
    merges = []
    for m in info["merges"] or []:
        a, sep, b = m.partition(" ")
        if not sep:
            raise SystemExit(f"tokenizer_ref: malformed merge {m!r}")
        merges.append((a, b))

    bpe = models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False)
    tok = Tokenizer(bpe)

    pre = info["pre"] or "default"
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level]
        )
    elif pre in ("default", "gpt2", "gpt-2"):
        tok.pre_tokenizer = byte_level
    else:
        raise SystemExit(f"tokenizer_ref: unsupported tokenizer.ggml.pre {pre!r}")
    tok.decoder = decoders.ByteLevel()

    specials, user = [], []
    for i, (t, ty) in enumerate(zip(tokens, info["token_type"])):
        if ty == TT_CONTROL:
            specials.append(AddedToken(t, special=True, normalized=False, single_word=False, lstrip=False, rstrip=False))
        elif ty == TT_USER_DEFINED:
            user.append(AddedToken(t, special=False, normalized=False, single_word=False, lstrip=False, rstrip=False))
    if specials:
        tok.add_special_tokens(specials)
    if user:
        tok.add_tokens(user)
    # Sanity: added tokens must keep their GGUF ids.
    for at in specials + user:
        got = tok.token_to_id(at.content)
        if got != vocab[at.content]:
            raise SystemExit(f"tokenizer_ref: added token {at.content!r} got id {got}, expected {vocab[at.content]}")
    return tok


def encode(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False).ids


def decode(tok, ids) -> str:
    return tok.decode(list(ids), skip_special_tokens=False)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--jsonl", help='file of {"text": ...} lines')
    g.add_argument("--text")
    g.add_argument("--decode", help="comma separated ids")
    a = ap.parse_args(argv)
    tok = build_tokenizer(a.model)
    out = sys.stdout
    if a.jsonl is not None:
        with open(a.jsonl, "r", encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                text = json.loads(line)["text"]
                out.write(json.dumps(encode(tok, text)) + "\n")
    elif a.text is not None:
        out.write(json.dumps(encode(tok, a.text)) + "\n")
    else:
        ids = [int(x) for x in a.decode.split(",") if x.strip()]
        out.write(json.dumps(decode(tok, ids), ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
