#!/usr/bin/env python3
"""Generates tests/hostile/: malformed GGUF files and Hugging Face safetensors
directories, each paired in MANIFEST.json with the substring its redwood::Error
must contain. tests/test_hostile.cpp loads every entry.

Everything is written by hand from a tiny valid model built here (a 1-layer
llama, dim 8, a 12-token SPM vocabulary), so the corpus is small (a few kB a
file) and deterministic. Re-run after changing the cases:

    python3 tools/make-hostile-corpus.py [--out tests/hostile] [--valid DIR]

--valid also writes the valid tiny GGUF and safetensors directory there (used
as fuzzing seeds; they are not part of the hostile corpus).
"""
import argparse
import json
import shutil
import struct
from pathlib import Path

import numpy as np

# ---- GGUF writer ------------------------------------------------------------------------

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
              BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}
GGML_F32, GGML_F16, GGML_Q8_0, GGML_Q4_K, GGML_IQ3_S = 0, 1, 8, 12, 21
GGML_BYTES = {GGML_F32: 4, GGML_F16: 2}


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gval(t, v):
    if t == STRING:
        return gstr(v)
    if t == ARRAY:
        et, items = v
        out = struct.pack("<IQ", et, len(items))
        return out + b"".join(gval(et, x) for x in items)
    return struct.pack(SCALAR_FMT[t], v)


class Gguf:
    """A GGUF file as editable parts: metadata (key, type, value) or raw bytes,
    tensor infos, and the data blobs."""

    def __init__(self):
        self.version = 3
        self.kv = []        # (key, type, value) or ("raw", bytes)
        self.tensors = []   # dict(name, ne, type, data, offset=None)
        self.alignment = 32
        self.n_kv = None    # override counts
        self.n_tensors = None

    def set(self, key, t, v):
        for i, e in enumerate(self.kv):
            if e[0] == key:
                self.kv[i] = (key, t, v)
                return self
        self.kv.append((key, t, v))
        return self

    def drop(self, pred):
        self.kv = [e for e in self.kv if not pred(e[0])]
        return self

    def tensor(self, name):
        return next(t for t in self.tensors if t["name"] == name)

    def drop_tensor(self, name):
        self.tensors = [t for t in self.tensors if t["name"] != name]
        return self

    def parts(self):
        """Returns (header bytes up to the tensor infos, tensor info bytes, data bytes)."""
        head = b"GGUF" + struct.pack("<I", self.version)
        head += struct.pack("<QQ", len(self.tensors) if self.n_tensors is None else self.n_tensors,
                            len(self.kv) if self.n_kv is None else self.n_kv)
        meta = b""
        for e in self.kv:
            if e[0] == "raw":
                meta += e[1]
            else:
                meta += gstr(e[0]) + struct.pack("<I", e[1]) + gval(e[1], e[2])
        a = self.alignment
        infos = b""
        data = b""
        for t in self.tensors:
            data += b"\0" * (-len(data) % a)
            off = len(data) if t.get("offset") is None else t["offset"]
            infos += gstr(t["name"]) + struct.pack("<I", len(t["ne"]))
            infos += b"".join(struct.pack("<Q", d) for d in t["ne"])
            infos += struct.pack("<IQ", t["type"], off)
            data += t["data"]
        return head + meta, infos, data

    def bytes(self):
        head, infos, data = self.parts()
        pre = head + infos
        pre += b"\0" * (-len(pre) % self.alignment)
        return pre + data


DIM, HEADS, KV_HEADS, FFN = 8, 2, 1, 16
HEAD_DIM = DIM // HEADS
SPM_TOKENS = ["<unk>", "<s>", "</s>", "<0x0A>", "\u2581", "a", "b", "c", "\u2581a", "ab", "\u2581ab", "\u2581c"]
SPM_TYPES = [2, 3, 3, 6, 1, 1, 1, 1, 1, 1, 1, 1]


def tensor_data(rng, ne, ggml_type):
    n = int(np.prod(ne))
    if ggml_type == GGML_F32:
        return (rng.standard_normal(n) * 0.1).astype("<f4").tobytes()
    return (rng.standard_normal(n) * 0.1).astype("<f2").tobytes()


def tiny_gguf():
    rng = np.random.default_rng(1234)
    g = Gguf()
    g.set("general.architecture", STRING, "llama")
    g.set("general.name", STRING, "hostile-tiny")
    g.set("general.alignment", U32, 32)
    g.set("llama.block_count", U32, 1)
    g.set("llama.context_length", U32, 64)
    g.set("llama.embedding_length", U32, DIM)
    g.set("llama.feed_forward_length", U32, FFN)
    g.set("llama.attention.head_count", U32, HEADS)
    g.set("llama.attention.head_count_kv", U32, KV_HEADS)
    g.set("llama.rope.freq_base", F32, 10000.0)
    g.set("llama.attention.layer_norm_rms_epsilon", F32, 1e-5)
    g.set("llama.rope.dimension_count", U32, HEAD_DIM)
    g.set("llama.vocab_size", U32, len(SPM_TOKENS))
    g.set("tokenizer.ggml.model", STRING, "llama")
    g.set("tokenizer.ggml.tokens", ARRAY, (STRING, SPM_TOKENS))
    g.set("tokenizer.ggml.scores", ARRAY, (F32, [0.0, 0.0, 0.0, 0.0] + [-float(i) for i in range(8)]))
    g.set("tokenizer.ggml.token_type", ARRAY, (I32, SPM_TYPES))
    g.set("tokenizer.ggml.bos_token_id", U32, 1)
    g.set("tokenizer.ggml.eos_token_id", U32, 2)
    g.set("tokenizer.ggml.unknown_token_id", U32, 0)
    g.set("tokenizer.ggml.add_bos_token", BOOL, 1)
    V = len(SPM_TOKENS)
    specs = [("token_embd.weight", [DIM, V], GGML_F16), ("output_norm.weight", [DIM], GGML_F32),
             ("blk.0.attn_norm.weight", [DIM], GGML_F32),
             ("blk.0.attn_q.weight", [DIM, HEADS * HEAD_DIM], GGML_F16),
             ("blk.0.attn_k.weight", [DIM, KV_HEADS * HEAD_DIM], GGML_F16),
             ("blk.0.attn_v.weight", [DIM, KV_HEADS * HEAD_DIM], GGML_F16),
             ("blk.0.attn_output.weight", [HEADS * HEAD_DIM, DIM], GGML_F16),
             ("blk.0.ffn_norm.weight", [DIM], GGML_F32),
             ("blk.0.ffn_gate.weight", [DIM, FFN], GGML_F16),
             ("blk.0.ffn_up.weight", [DIM, FFN], GGML_F16),
             ("blk.0.ffn_down.weight", [FFN, DIM], GGML_F16)]
    for name, ne, t in specs:
        g.tensors.append(dict(name=name, ne=ne, type=t, data=tensor_data(rng, ne, t)))
    return g


def gguf_cases():
    """(file name, bytes, expected substring)"""
    cases = []

    def add(name, data, expect):
        cases.append((name + ".gguf", data, expect))

    def mod(name, expect, f):
        g = tiny_gguf()
        r = f(g)
        add(name, r if isinstance(r, bytes) else g.bytes(), expect)

    valid = tiny_gguf().bytes()
    head, infos, data = tiny_gguf().parts()
    header_end = len(head)

    add("bad_magic", b"GGUX" + valid[4:], "bad magic")
    add("empty", b"", "bad magic")
    add("magic_only", b"GGUF", "truncated")
    mod("version_1", "unsupported GGUF version 1", lambda g: setattr(g, "version", 1))
    mod("version_4", "unsupported GGUF version 4", lambda g: setattr(g, "version", 4))
    # Truncations at many points.
    add("trunc_header", valid[:13], "truncated")
    add("trunc_counts", valid[:20], "truncated")
    add("trunc_first_key", valid[:24 + 5], "truncated")
    add("trunc_mid_metadata", valid[:header_end // 2], "truncated")
    add("trunc_metadata_end", valid[:header_end - 3], "truncated")
    add("trunc_mid_tensor_info", valid[:header_end + len(infos) // 2], "truncated")
    add("trunc_before_data", valid[:header_end + len(infos)], "truncated")
    add("trunc_mid_data", valid[:len(valid) - len(data) // 2], "truncated")
    add("trunc_last_byte", valid[:-1], "truncated")
    # Absurd counts and lengths.
    mod("absurd_kv_count", "absurd metadata count", lambda g: setattr(g, "n_kv", 1 << 62))
    mod("absurd_tensor_count", "absurd tensor count", lambda g: setattr(g, "n_tensors", 1 << 62))
    mod("kv_count_past_eof", "metadata count", lambda g: setattr(g, "n_kv", 5000))
    mod("absurd_key_length", "absurd string length",
        lambda g: g.kv.insert(0, ("raw", struct.pack("<Q", 1 << 40) + b"general.x")))
    mod("string_past_eof", "truncated",
        lambda g: g.kv.insert(0, ("raw", gstr("general.x") + struct.pack("<IQ", STRING, 60000) + b"abc")))

    def long_name(g):
        g.tensor("output_norm.weight")["name"] = "x" * 20
        return g.bytes().replace(struct.pack("<Q", 20) + b"x" * 20, struct.pack("<Q", 1 << 50) + b"x" * 20)

    mod("absurd_tensor_name_length", "absurd string length", long_name)

    def nested(depth):
        inner = struct.pack("<IQ", U8, 1) + b"\x01"
        for _ in range(depth - 1):
            inner = struct.pack("<IQ", ARRAY, 1) + inner
        return ("raw", gstr("general.bomb") + struct.pack("<I", ARRAY) + inner)

    mod("nested_array_bomb", "nested too deeply", lambda g: g.kv.insert(0, nested(64)))
    mod("array_count_past_eof", "exceeds the file size",
        lambda g: g.kv.insert(0, ("raw", gstr("general.x") + struct.pack("<IIQ", ARRAY, U32, 1 << 30) + b"\0" * 8)))
    mod("array_of_strings_past_eof", "exceeds the file size",
        lambda g: g.kv.insert(0, ("raw", gstr("general.x") + struct.pack("<IIQ", ARRAY, STRING, 100000))))
    mod("invalid_value_type", "invalid value type 13",
        lambda g: g.kv.insert(0, ("raw", gstr("general.x") + struct.pack("<II", 13, 0))))
    mod("invalid_array_elem_type", "invalid array element type 99",
        lambda g: g.kv.insert(0, ("raw", gstr("general.x") + struct.pack("<IIQ", ARRAY, 99, 1) + b"\0" * 8)))
    mod("invalid_bool", "invalid bool value 2", lambda g: g.set("tokenizer.ggml.add_bos_token", BOOL, 2))
    mod("duplicate_key", "duplicate metadata key 'llama.block_count'",
        lambda g: g.kv.append(("llama.block_count", U32, 1)))
    # Tensor infos.
    mod("zero_dims", "invalid number of dimensions 0", lambda g: g.tensor("output_norm.weight").update(ne=[]))
    mod("five_dims", "invalid number of dimensions 5",
        lambda g: g.tensor("output_norm.weight").update(ne=[8, 1, 1, 1, 1]))
    mod("zero_dimension", "invalid dimension 0", lambda g: g.tensor("blk.0.attn_q.weight").update(ne=[8, 0]))
    mod("huge_dimension", "invalid dimension", lambda g: g.tensor("blk.0.attn_q.weight").update(ne=[8, 1 << 62]))
    mod("dims_product_overflow", "element count overflows",
        lambda g: g.tensor("blk.0.attn_q.weight").update(ne=[1 << 32, 1 << 32, 1 << 32]))
    mod("unsupported_type_iq3_s", "unsupported tensor type IQ3_S",
        lambda g: g.tensor("blk.0.ffn_up.weight").update(type=GGML_IQ3_S, ne=[256, 16]))
    mod("partial_k_block_row", "not a whole number of Q4_K blocks",
        lambda g: g.tensor("blk.0.ffn_up.weight").update(type=GGML_Q4_K))
    mod("unsupported_type_99", "unsupported tensor type unknown (99)",
        lambda g: g.tensor("blk.0.ffn_up.weight").update(type=99))
    mod("partial_block_row", "not a whole number of Q8_0 blocks",
        lambda g: g.tensor("blk.0.ffn_up.weight").update(type=GGML_Q8_0))
    mod("offset_past_eof", "extends past the end of the file",
        lambda g: g.tensor("blk.0.ffn_down.weight").update(offset=1 << 20))
    mod("offset_wraps", "extends past the end of the file",
        lambda g: g.tensor("blk.0.ffn_down.weight").update(offset=(1 << 64) - 32))
    mod("misaligned_offset", "not aligned to 32", lambda g: g.tensor("blk.0.ffn_down.weight").update(offset=36))
    mod("alignment_not_pow2", "power of two", lambda g: g.set("general.alignment", U32, 48))
    mod("alignment_zero", "power of two", lambda g: g.set("general.alignment", U32, 0))
    mod("alignment_string", "power of two", lambda g: g.set("general.alignment", STRING, "32"))
    mod("duplicate_tensor", "duplicate tensor 'blk.0.attn_q.weight'",
        lambda g: g.tensors.append(dict(g.tensor("blk.0.attn_q.weight"))))
    # Model description.
    mod("missing_tensor", "missing tensor 'blk.0.ffn_up.weight'", lambda g: g.drop_tensor("blk.0.ffn_up.weight"))
    mod("missing_embedding", "missing tensor 'token_embd.weight'", lambda g: g.drop_tensor("token_embd.weight"))
    mod("misshaped_tensor", "'blk.0.attn_k.weight' has shape",
        lambda g: g.tensor("blk.0.attn_k.weight").update(ne=[DIM, DIM], data=b"\0" * (DIM * DIM * 2)))
    mod("three_d_tensor", "more than 2 dimensions",
        lambda g: g.tensor("blk.0.attn_k.weight").update(ne=[DIM, 2, 2]))
    mod("block_count_string", "'llama.block_count' has type string",
        lambda g: g.set("llama.block_count", STRING, "1"))
    mod("block_count_zero", "'llama.block_count' = 0 is out of range", lambda g: g.set("llama.block_count", U32, 0))
    mod("block_count_negative", "'llama.block_count' is negative",
        lambda g: g.set("llama.block_count", I32, -1))
    mod("block_count_too_many", "missing tensor 'blk.1.attn_norm.weight'",
        lambda g: g.set("llama.block_count", U32, 2))
    mod("embedding_length_huge", "'llama.embedding_length' = 1099511627776 is out of range",
        lambda g: g.set("llama.embedding_length", U64, 1 << 40))
    mod("missing_block_count", "missing metadata key 'llama.block_count'",
        lambda g: g.drop(lambda k: k == "llama.block_count"))
    mod("head_count_not_dividing", "not a multiple of head_count",
        lambda g: g.set("llama.attention.head_count", U32, 3))
    mod("head_count_kv_not_dividing", "head_count is not a multiple of head_count_kv",
        lambda g: g.set("llama.attention.head_count_kv", U32, 3))
    mod("head_dim_odd", "head dimension must be even",
        lambda g: g.set("llama.attention.head_count", U32, 8).drop(lambda k: k == "llama.rope.dimension_count"))
    mod("partial_rope", "partial RoPE", lambda g: g.set("llama.rope.dimension_count", U32, 2))
    half = HEAD_DIM // 2

    def rope_freqs(values, ggml_type=GGML_F32):
        def f(g):
            raw = np.array(values, dtype="<f4" if ggml_type == GGML_F32 else "<f2").tobytes()
            g.tensors.append(dict(name="rope_freqs.weight", ne=[len(values)], type=ggml_type, data=raw))
        return f

    mod("rope_freqs_wrong_count", "'rope_freqs.weight' must be an F32 vector of", rope_freqs([1.0] * (half + 1)))
    mod("rope_freqs_f16", "'rope_freqs.weight' must be an F32 vector of", rope_freqs([1.0] * half, GGML_F16))
    mod("rope_freqs_negative", "RoPE frequency factor -8 is out of range",
        rope_freqs([1.0] * (half - 1) + [-8.0]))
    mod("rope_freqs_tiny", "RoPE frequency factor 9.99995e-41 is out of range", rope_freqs([1e-40] + [1.0] * (half - 1)))
    mod("rope_scaling_yarn", "RoPE scaling 'yarn' is unsupported",
        lambda g: g.set("llama.rope.scaling.type", STRING, "yarn"))
    mod("rope_scaling_factor_negative", "RoPE scaling factor -2 is out of range",
        lambda g: g.set("llama.rope.scaling.factor", F32, -2.0))
    # Accepted where config.json's siblings were refused: an infinite base, a factor of 0 (taken as none).
    mod("rope_freq_base_inf", "the RoPE base (rope.freq_base, rope_theta) must be a finite number greater than 1, got inf",
        lambda g: g.set("llama.rope.freq_base", F32, float("inf")))
    mod("rope_scaling_factor_huge", "RoPE scaling factor 1e+30 is out of range",
        lambda g: g.set("llama.rope.scaling.factor", F32, 1e30))
    mod("rms_eps_negative", "layer_norm_rms_epsilon",
        lambda g: g.set("llama.attention.layer_norm_rms_epsilon", F32, -1.0))
    mod("vocab_size_mismatch", "vocab_size 999 disagrees", lambda g: g.set("llama.vocab_size", U32, 999))
    mod("unsupported_architecture", "unsupported architecture 'gpt2'",
        lambda g: g.set("general.architecture", STRING, "gpt2"))
    mod("missing_architecture", "missing metadata key 'general.architecture'",
        lambda g: g.drop(lambda k: k == "general.architecture"))
    mod("missing_tokenizer", "no tokenizer", lambda g: g.drop(lambda k: k.startswith("tokenizer.")))
    mod("tokenizer_tokens_wrong_type", "tokenizer.ggml.tokens",
        lambda g: g.set("tokenizer.ggml.tokens", ARRAY, (U32, list(range(len(SPM_TOKENS))))))
    mod("tokenizer_bos_out_of_range", "bos_token_id' = 5000", lambda g: g.set("tokenizer.ggml.bos_token_id", U32, 5000))
    mod("tokenizer_eos_out_of_range", "eos_token_id' = 12", lambda g: g.set("tokenizer.ggml.eos_token_id", U32, 12))

    def more_tokens(g):
        g.set("tokenizer.ggml.tokens", ARRAY, (STRING, SPM_TOKENS + ["zz"]))
        g.set("tokenizer.ggml.scores", ARRAY, (F32, [0.0] * (len(SPM_TOKENS) + 1)))
        g.set("tokenizer.ggml.token_type", ARRAY, (I32, SPM_TYPES + [1]))

    mod("tokenizer_more_tokens_than_vocab", "tokens but the model's vocabulary is", more_tokens)

    # Issue 42: nothing in a file is silently left out or reinterpreted.
    def extra_tensor(name, like):
        def f(g):
            t = dict(g.tensor(like))
            t["name"] = name
            g.tensors.append(t)
        return f

    mod("block_count_short", "tensor 'blk.1.attn_q.weight' is not used by a 1-block llama model",
        extra_tensor("blk.1.attn_q.weight", "blk.0.attn_q.weight"))
    mod("unused_bias", "tensor 'blk.0.attn_q.bias' is not used by a 1-block llama model",
        extra_tensor("blk.0.attn_q.bias", "blk.0.attn_norm.weight"))
    # (A sliding window is the model's attention now, masked by position: issue 46; no longer a load error.)

    def bpe(pre, merges):
        def f(g):
            g.set("tokenizer.ggml.model", STRING, "gpt2")
            if pre is not None:
                g.set("tokenizer.ggml.pre", STRING, pre)
            if merges:
                g.set("tokenizer.ggml.merges", ARRAY, (STRING, ["a b"]))
        return f

    mod("tokenizer_pre_unknown", "tokenizer.ggml.pre = 'no-such-pre' is a pre-tokenizer Redwood does not implement",
        bpe("no-such-pre", True))
    mod("tokenizer_bpe_no_merges", "tokenizer.ggml.merges is missing for a BPE vocabulary", bpe("gpt2", False))
    return cases


# ---- safetensors ------------------------------------------------------------------------


def byte_level_alphabet():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    m = dict(zip(bs, cs))
    return [chr(m[b]) for b in range(256)]


def hf_tokenizer_json():
    vocab = {c: i for i, c in enumerate(byte_level_alphabet())}
    for s in ["he", "ll", "hell"]:
        vocab[s] = len(vocab)
    eos = len(vocab)
    return json.dumps({
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": eos, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": ["h e", "l l", "he ll"]},
    }, ensure_ascii=False)


HF_VOCAB = 260


def hf_config(**over):
    c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 1,
         "hidden_size": DIM, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
         "intermediate_size": FFN, "vocab_size": HF_VOCAB, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
         "max_position_embeddings": 64, "tie_word_embeddings": True, "hidden_act": "silu"}
    c.update(over)
    return c


def hf_tensors():
    kv = KV_HEADS * HEAD_DIM
    return [("model.embed_tokens.weight", "F16", [HF_VOCAB, DIM]), ("model.norm.weight", "F32", [DIM]),
            ("model.layers.0.input_layernorm.weight", "F32", [DIM]),
            ("model.layers.0.self_attn.q_proj.weight", "BF16", [DIM, DIM]),
            ("model.layers.0.self_attn.k_proj.weight", "BF16", [kv, DIM]),
            ("model.layers.0.self_attn.v_proj.weight", "BF16", [kv, DIM]),
            ("model.layers.0.self_attn.o_proj.weight", "BF16", [DIM, DIM]),
            ("model.layers.0.post_attention_layernorm.weight", "F32", [DIM]),
            ("model.layers.0.mlp.gate_proj.weight", "F16", [FFN, DIM]),
            ("model.layers.0.mlp.up_proj.weight", "F16", [FFN, DIM]),
            ("model.layers.0.mlp.down_proj.weight", "F16", [DIM, FFN])]


def st_raw(header_text, data):
    h = header_text.encode()
    return struct.pack("<Q", len(h)) + h + data


def st_bytes(tensors, edit=None):
    """tensors: [(name, dtype, shape)]; edit(header_dict) may tamper with the header."""
    rng = np.random.default_rng(99)
    header = {"__metadata__": {"format": "pt"}}
    data = b""
    for name, dt, shape in tensors:
        n = int(np.prod(shape)) if shape else 1
        es = 4 if dt == "F32" else 2
        blob = (rng.standard_normal(n) * 0.1).astype("<f4").tobytes()
        if es == 2:
            blob = (rng.standard_normal(n) * 0.1).astype("<f2").tobytes()
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    if edit:
        edit(header)
    text = json.dumps(header, separators=(",", ":"))
    text += " " * (-len(text) % 8)
    return st_raw(text, data)


def st_dir(files):
    """Default valid directory contents, overridden/removed (value None) by `files`."""
    d = {"config.json": json.dumps(hf_config()), "tokenizer.json": hf_tokenizer_json(),
         "model.safetensors": st_bytes(hf_tensors())}
    d.update(files)
    return {k: v for k, v in d.items() if v is not None}


def entry(name, **fields):
    def edit(h):
        h[name].update(fields)
    return edit


def safetensors_cases():
    """(directory name, {file: bytes|str}, expected substring)"""
    cases = []

    def add(name, files, expect):
        cases.append(("st_" + name, st_dir(files), expect))

    T = hf_tensors()
    q = "model.layers.0.self_attn.q_proj.weight"
    add("header_length_huge", {"model.safetensors": struct.pack("<Q", 1 << 60) + b"{}"}, "absurd")
    add("header_length_past_eof", {"model.safetensors": struct.pack("<Q", 5000) + b"{}"}, "past the end of the file")
    add("too_short", {"model.safetensors": b"\x02\0\0"}, "truncated")
    add("invalid_json", {"model.safetensors": st_raw('{"a": {"dtype": "F32", "shape": [1], ', b"")}, "invalid JSON")
    add("header_not_object", {"model.safetensors": st_raw("[1, 2, 3]", b"")}, "not a JSON object")
    add("header_nested_bomb", {"model.safetensors": st_raw("[" * 5000 + "]" * 5000, b"")}, "nested too deeply")
    add("offsets_past_eof", {"model.safetensors": st_bytes(T, entry(q, data_offsets=[0, 1 << 40]))},
        "extends past the end of the file")
    add("end_before_begin", {"model.safetensors": st_bytes(T, entry(q, data_offsets=[128, 0]))}, "< begin")
    add("size_mismatch", {"model.safetensors": st_bytes(T, entry(q, shape=[DIM, DIM + 1]))}, "size mismatch")
    add("unknown_dtype", {"model.safetensors": st_bytes(T, entry(q, dtype="Q9"))},
        "unsupported tensor type Q9 for tensor " + q)
    add("negative_dim", {"model.safetensors": st_bytes(T, entry(q, shape=[-8, -8]))}, "non-negative")
    add("shape_overflow", {"model.safetensors": st_bytes(T, entry(q, shape=[1 << 40, 1 << 40]))}, "overflows")
    add("duplicate_tensor", {"model.safetensors": st_raw(
        '{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
        b"\0" * 4)}, "duplicate tensor 'x'")
    add("missing_tensor", {"model.safetensors": st_bytes([t for t in T if "up_proj" not in t[0]])},
        "missing tensor 'model.layers.0.mlp.up_proj.weight'")
    add("misshaped_tensor", {"model.safetensors": st_bytes(
        [(n, d, [DIM, DIM] if "k_proj" in n else s) for n, d, s in T])}, "'model.layers.0.self_attn.k_proj.weight' has shape")
    k = "model.layers.1.self_attn.q_proj.weight"
    add("layer_past_num_hidden_layers", {"model.safetensors": st_bytes(T + [(k, "BF16", [DIM, DIM])])},
        "tensor '" + k + "' is not used by a 1-block llama model")
    add("untied_no_lm_head", {"config.json": json.dumps(hf_config(tie_word_embeddings=False))},
        "missing tensor 'lm_head.weight'")
    add("no_safetensors", {"model.safetensors": None}, "no *.safetensors files")
    add("config_missing", {"config.json": None}, "no config.json")
    add("config_malformed", {"config.json": '{"architectures": ["LlamaForCausalLM"],'}, "config.json: invalid JSON")
    add("config_unsupported_arch", {"config.json": json.dumps(
        hf_config(architectures=["GPTNeoXForCausalLM"], model_type="gpt_neox"))}, "unsupported architecture")
    add("config_wrong_type", {"config.json": json.dumps(hf_config(num_hidden_layers="1"))}, "expected an integer")
    add("config_head_dim", {"config.json": json.dumps(hf_config(head_dim=8))}, "head_dim")
    add("config_rope_scaling_yarn", {"config.json": json.dumps(
        hf_config(rope_scaling={"rope_type": "yarn", "factor": 4.0}))}, "rope_scaling type 'yarn' is unsupported")
    add("config_rope_scaling_incomplete", {"config.json": json.dumps(
        hf_config(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0}))},
        "'rope_scaling' lacks 'high_freq_factor'")
    add("config_kv_heads", {"config.json": json.dumps(hf_config(num_key_value_heads=3))}, "num_key_value_heads")
    add("config_vocab_mismatch", {"config.json": json.dumps(hf_config(vocab_size=300))},
        "'model.embed_tokens.weight' has shape")
    add("tokenizer_missing", {"tokenizer.json": None}, "no tokenizer.json")
    add("tokenizer_malformed", {"tokenizer.json": '{"model": {"type": "BPE", "vocab": '}, "tokenizer.json")
    idx = {"metadata": {}, "weight_map": {n: "model-00001-of-00002.safetensors" if i % 2 == 0
                                           else "model-00002-of-00002.safetensors" for i, (n, _, _) in enumerate(T)}}
    add("index_missing_shard", {"model.safetensors": None,
                                "model.safetensors.index.json": json.dumps(idx),
                                "model-00001-of-00002.safetensors": st_bytes(T[0::2])},
        "missing shard file")
    add("index_path_traversal", {"model.safetensors.index.json": json.dumps(
        {"weight_map": {"model.norm.weight": "../st_config_missing/model.safetensors"}})}, "invalid shard file name")
    add("index_malformed", {"model.safetensors.index.json": "{\"weight_map\": "}, "index.json: invalid JSON")
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = Path(__file__).resolve().parent.parent
    ap.add_argument("--out", default=str(root / "tests" / "hostile"))
    ap.add_argument("--valid", default=None, help="also write the valid tiny models here")
    args = ap.parse_args()
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    manifest = []
    for name, data, expect in gguf_cases():
        (out / name).write_bytes(data)
        manifest.append({"file": name, "expect_substring": expect})
    for name, files, expect in safetensors_cases():
        d = out / name
        d.mkdir()
        for fname, content in files.items():
            p = d / fname
            if isinstance(content, str):
                p.write_text(content, encoding="utf-8")
            else:
                p.write_bytes(content)
        manifest.append({"file": name, "expect_substring": expect})
    names = [m["file"] for m in manifest]
    assert len(names) == len(set(names)), "duplicate case names"
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    if args.valid:
        v = Path(args.valid)
        v.mkdir(parents=True, exist_ok=True)
        (v / "tiny.gguf").write_bytes(tiny_gguf().bytes())
        d = v / "tiny-hf"
        d.mkdir(exist_ok=True)
        for fname, content in st_dir({}).items():
            p = d / fname
            if isinstance(content, str):
                p.write_text(content, encoding="utf-8")
            else:
                p.write_bytes(content)
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {len(manifest)} cases to {out} ({total} bytes)")


if __name__ == "__main__":
    main()
