#!/usr/bin/env python3
"""Write a valid GGUF v3 Llama model of any shape with random weights (test tool).

Written with gguf.GGUFWriter (tensor infos first, then data tensor by tensor), so
other GGUF readers (llama.cpp, gguf-py) load it. Quantization uses
gguf.quants.quantize, and for Q2_K ... Q6_K (which gguf-py cannot quantize)
the simple min/max quantizers below; gguf-py dequantizes all of them.

Examples:
  make-synthetic-gguf.py --preset tiny --out /tmp/tiny.gguf
  make-synthetic-gguf.py --preset llama2-70b --layers 1 --type Q4_0 --out /tmp/70b-1l.gguf
  make-synthetic-gguf.py --out m.gguf --layers 4 --dim 256 --heads 8 --kv-heads 2 --ffn 704 --vocab 1000 --tied
  make-synthetic-gguf.py --out q3.gguf --arch qwen3 --layers 2 --dim 256 --heads 8 --kv-heads 2 --head-dim 64 ...

Families (--arch), as llama.cpp's converter writes them: llama (Q/K rows in
GGUF's interleaved RoPE order; random weights, so only the reading matters);
qwen2 (attn_q/k/v.bias F32 vectors, N(0, 0.5^2); NEOX RoPE); qwen3
(attn_q_norm/attn_k_norm.weight F32 vectors of head_dim, N(1, 0.2^2); NEOX RoPE).
--head-dim other than dim / heads writes attention.key_length/value_length.

Weights: 2-D matrices ~ N(0, 1/fan_in) (fan_in = input dim = GGUF ne0), token
embedding / output ~ N(0, 16/dim) so logits have a std of a few units, norm weights
~ N(1, 0.05^2) in F32.

Generation modes (--mode):
  exact : every element drawn independently from the RNG, then quantized.
  pool  : a pool of 2^20 x 32 independent N(0, s^2) values, in blocks, is drawn and
          quantized once per distinct scale s; every tensor is then assembled from
          randomly chosen pool blocks (i.i.d. block draws, so the element
          distribution is the same). ~10x faster; used for huge shapes.
  auto  : exact when the model has <= 64M weight elements, else pool (default).

Tokenizer metadata: tokenizer.ggml.model = "llama" (SentencePiece-style) with exactly
--vocab tokens: "<unk>" (0, type 2), "<s>" (1, type 3), "</s>" (2, type 3), the 256
byte tokens "<0x00>".."<0xFF>" (type 6), then normal pieces (type 1) with decreasing
scores ("▁", letters, digits, punctuation, prefix-closed "▁word" pieces, then
letter n-grams with and without "▁", so every piece can be built by merging two
shorter pieces). bos 1, eos 2, unk 0, add_bos true, add_eos false.
--tokenizer-from VOCAB.gguf instead copies every tokenizer.ggml.* key of another GGUF
(e.g. llama.cpp's vocab-only models/ggml-vocab-NAME.gguf) and sizes --vocab to its
token list: that vocabulary grafted onto a model Redwood loads.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType as QT
    from gguf import GGUFWriter
    from gguf.quants import quantize as gguf_quantize
except ImportError as e:  # pragma: no cover
    raise SystemExit(f"make-synthetic-gguf: the PyPI 'gguf' package is required ({e})")

PRESETS = {
    "llama2-70b": dict(layers=80, dim=8192, heads=64, kv_heads=8, ffn=28672, vocab=32000,
                       rope_base=10000.0, eps=1e-5, ctx=4096),
    "llama2-7b": dict(layers=32, dim=4096, heads=32, kv_heads=32, ffn=11008, vocab=32000,
                      rope_base=10000.0, eps=1e-5, ctx=4096),
    "tiny": dict(layers=2, dim=64, heads=4, kv_heads=2, ffn=128, vocab=320,
                 rope_base=10000.0, eps=1e-5, ctx=512),
}

TYPES = {"F32": QT.F32, "F16": QT.F16, "BF16": QT.BF16, "Q8_0": QT.Q8_0, "Q4_0": QT.Q4_0, "Q4_1": QT.Q4_1,
         "Q5_0": QT.Q5_0, "Q5_1": QT.Q5_1, "Q2_K": QT.Q2_K, "Q3_K": QT.Q3_K, "Q4_K": QT.Q4_K, "Q5_K": QT.Q5_K,
         "Q6_K": QT.Q6_K, "IQ4_NL": QT.IQ4_NL, "IQ4_XS": QT.IQ4_XS}
# llama_ftype "mostly X" (the K types: their _M mixes' ids, the closest named ones)
FILE_TYPE = {"F32": 0, "F16": 1, "BF16": 32, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10, "Q3_K": 12,
             "Q4_K": 15, "Q5_K": 17, "Q6_K": 18, "IQ4_NL": 25, "IQ4_XS": 30}

POOL_BLOCKS = 1 << 20
CHUNK_ELEMS = 1 << 24  # elements generated per chunk (64 MiB of float32)
BLK = 32

# ------------------------------------------------------------------ tokenizer
_WORDS = (
    "the of and to in is you that it he was for on are as with his they at be this have from or one had by "
    "word but not what all were we when your can said there use an each which she do how their if will up "
    "other about out many then them these so some her would make like him into time has look two more write "
    "go see number no way could people my than first water been call who oil its now find long down day did "
    "get come made may part over new sound take only little work know place year live me back give most very "
    "after thing our just name good sentence man think say great where help through much before line right "
    "too mean old any same tell boy follow came want show also around form three small set put end does "
    "another well large must big even such because turn here why ask went men read need land different home "
    "us move try kind hand picture again change off play spell air away animal house point page letter "
    "mother answer found study still learn should world high every near add food between own below country "
    "plant last school father keep tree never start city earth eye light thought head under story saw left "
    "hello model token test llama red wood"
).split()
_LETTERS = "etaoinshrdlcumwfgypbvkjxqz"
_EARLY = ["\u2581t", "\u2581th", "\u2581the", "th", "he", "in", "er", "\u2581a", "\u2581an", "\u2581and",
          "\u2581h", "\u2581he", "\u2581hel", "\u2581hell", "\u2581hello", "\u2581w", "\u2581wo", "\u2581wor",
          "\u2581worl", "\u2581world"]
_PUNCT = list(".,'!?-:;\"()[]{}/\\<>=+*&%$#@_`~|^")


def build_vocab(n_vocab: int):
    """Returns (tokens, scores, token_types) with exactly n_vocab entries."""
    base = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    btypes = [2, 3, 3] + [6] * 256
    if n_vocab < len(base) + 1:
        raise SystemExit(f"--vocab must be >= {len(base) + 1} (specials + 256 byte tokens + 1)")
    need = n_vocab - len(base)
    pieces: list[str] = []
    seen = set(base)

    def add(p):
        if p not in seen and len(pieces) < need:
            seen.add(p)
            pieces.append(p)

    add("\u2581")
    for c in _LETTERS:
        add(c)
    for p in _EARLY:  # a few multi-character pieces so even tiny vocabs exercise merges
        add(p)
    for c in "0123456789":
        add(c)
    for c in _PUNCT:
        add(c)
    for c in _LETTERS:
        add("\u2581" + c)
    for w in _WORDS:  # prefix-closed "▁word" pieces
        for i in range(2, len(w) + 1):
            add("\u2581" + w[:i])
    for c in _LETTERS.upper():
        add(c)
        add("\u2581" + c)
    level = list(_LETTERS)
    while len(pieces) < need:  # letter n-grams, breadth first (prefix closed)
        nxt = [s + c for s in level for c in _LETTERS]
        for s in nxt:
            add(s)
            add("\u2581" + s)
            if len(pieces) >= need:
                break
        level = nxt
    tokens = base + pieces
    scores = [0.0] * len(base) + [-float(i) for i in range(len(pieces))]
    types = btypes + [1] * len(pieces)
    assert len(tokens) == n_vocab and len(set(tokens)) == n_vocab
    return tokens, scores, types


# ------------------------------------------------------------------ weights
def _f16_bytes(v: np.ndarray) -> np.ndarray:
    return v.astype(np.float16).reshape(-1, 1).view(np.uint8)


def _quantize_k45(x: np.ndarray, five: bool) -> np.ndarray:
    """Q4_K / Q5_K super-blocks (a simple min/max quantizer, not ggml's search):
    per 32-element sub-block a 6-bit scale and min relative to d and dmin."""
    levels = 31 if five else 15
    b = x.reshape(-1, 8, 32).astype(np.float32)
    nb = b.shape[0]
    lo = np.minimum(b.min(axis=2), 0.0)
    s, m = (b.max(axis=2) - lo) / levels, -lo
    d = (s.max(axis=1) / 63).astype(np.float16)
    dmin = (m.max(axis=1) / 63).astype(np.float16)
    df, dmf = d.astype(np.float32), dmin.astype(np.float32)
    sc = np.where(df[:, None] > 0, np.clip(np.rint(s / np.where(df > 0, df, 1)[:, None]), 0, 63), 0).astype(np.uint8)
    mq = np.where(dmf[:, None] > 0, np.clip(np.rint(m / np.where(dmf > 0, dmf, 1)[:, None]), 0, 63), 0).astype(np.uint8)
    scales = np.empty((nb, 12), np.uint8)
    scales[:, 0:4] = (sc[:, :4] & 63) | ((sc[:, 4:] >> 4) << 6)
    scales[:, 4:8] = (mq[:, :4] & 63) | ((mq[:, 4:] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:] & 15) | ((mq[:, 4:] & 15) << 4)
    dj = (df[:, None] * sc)[..., None]
    mj = (dmf[:, None] * mq)[..., None]
    q = np.where(dj > 0, np.clip(np.rint((b + mj) / np.where(dj > 0, dj, 1)), 0, levels), 0).astype(np.uint8)
    qs = (q[:, 0::2] & 15) | ((q[:, 1::2] & 15) << 4)  # (nb, 4, 32)
    parts = [_f16_bytes(d), _f16_bytes(dmin), scales]
    if five:
        qh = np.zeros((nb, 32), np.uint8)
        for j in range(8):
            qh |= ((q[:, j] >> 4) << j).astype(np.uint8)
        parts.append(qh)
    parts.append(qs.reshape(nb, 128))
    return np.concatenate(parts, axis=1)


def _signed_absmax(b: np.ndarray) -> np.ndarray:
    """The element of largest magnitude along the last axis, with its sign."""
    return np.take_along_axis(b, np.abs(b).argmax(axis=-1)[..., None], axis=-1)[..., 0]


def _super_scales(s: np.ndarray, smax: int):
    """Sub-block scales s (blocks, k) as integers in [-smax - 1, smax] relative
    to one fp16 d per super-block: (d as fp16, d as fp32, the integers)."""
    d = (np.abs(s).max(axis=1) / smax).astype(np.float16)
    df = d.astype(np.float32)
    sc = np.where(df[:, None] > 0, np.clip(np.rint(s / np.where(df > 0, df, 1)[:, None]), -smax - 1, smax), 0)
    return d, df, sc


def _quantize_q6k(x: np.ndarray) -> np.ndarray:
    """Q6_K super-blocks: per 16-element sub-block an int8 scale relative to d."""
    b = x.reshape(-1, 16, 16).astype(np.float32)
    nb = b.shape[0]
    d, df, sc = _super_scales(_signed_absmax(b) / -32.0, 127)
    sc = sc.astype(np.int8)
    de = (df[:, None] * sc)[..., None]
    q = np.where(de != 0, np.clip(np.rint(b / np.where(de != 0, de, 1) + 32), 0, 63), 32).astype(np.uint8)
    q = q.reshape(nb, 2, 4, 32)  # [half, quarter, l]
    ql = np.concatenate([(q[:, :, 0] & 15) | ((q[:, :, 2] & 15) << 4), (q[:, :, 1] & 15) | ((q[:, :, 3] & 15) << 4)],
                        axis=2)  # (nb, 2, 64)
    qh = np.zeros((nb, 2, 32), np.uint8)
    for k in range(4):
        qh |= ((q[:, :, k] >> 4) << (2 * k)).astype(np.uint8)
    return np.concatenate([ql.reshape(nb, 128), qh.reshape(nb, 64), sc.view(np.uint8), _f16_bytes(d)], axis=1)


def _quantize_q2k(x: np.ndarray) -> np.ndarray:
    """Q2_K super-blocks: per 16-element sub-block a 4-bit scale and min."""
    b = x.reshape(-1, 16, 16).astype(np.float32)
    nb = b.shape[0]
    lo = np.minimum(b.min(axis=2), 0.0)
    s, m = (b.max(axis=2) - lo) / 3, -lo
    d = (s.max(axis=1) / 15).astype(np.float16)
    dmin = (m.max(axis=1) / 15).astype(np.float16)
    df, dmf = d.astype(np.float32), dmin.astype(np.float32)
    sc = np.where(df[:, None] > 0, np.clip(np.rint(s / np.where(df > 0, df, 1)[:, None]), 0, 15), 0).astype(np.uint8)
    mq = np.where(dmf[:, None] > 0, np.clip(np.rint(m / np.where(dmf > 0, dmf, 1)[:, None]), 0, 15), 0).astype(np.uint8)
    dj = (df[:, None] * sc)[..., None]
    mj = (dmf[:, None] * mq)[..., None]
    q = np.where(dj > 0, np.clip(np.rint((b + mj) / np.where(dj > 0, dj, 1)), 0, 3), 0).astype(np.uint8)
    q = q.reshape(nb, 2, 4, 32)  # [half, quarter, l]
    qs = np.zeros((nb, 2, 32), np.uint8)
    for k in range(4):
        qs |= (q[:, :, k] << (2 * k)).astype(np.uint8)
    return np.concatenate([sc | (mq << 4), qs.reshape(nb, 64), _f16_bytes(d), _f16_bytes(dmin)], axis=1)


def _quantize_q3k(x: np.ndarray) -> np.ndarray:
    """Q3_K super-blocks: per 16-element sub-block a signed 6-bit scale; 3-bit quants
    (2 bits in qs, the third in hmask)."""
    b = x.reshape(-1, 16, 16).astype(np.float32)
    nb = b.shape[0]
    mx = np.take_along_axis(b, np.abs(b).argmax(axis=2)[..., None], axis=2)[..., 0]
    s = mx / -4.0
    d = (np.abs(s).max(axis=1) / 31).astype(np.float16)
    df = d.astype(np.float32)
    sc = np.where(df[:, None] > 0, np.clip(np.rint(s / np.where(df > 0, df, 1)[:, None]), -32, 31), 0).astype(np.int32)
    de = (df[:, None] * sc)[..., None]
    q3 = np.where(de != 0, np.clip(np.rint(b / np.where(de != 0, de, 1) + 4), 0, 7), 4).astype(np.uint8)
    q3 = q3.reshape(nb, 2, 4, 32)
    qs = np.zeros((nb, 2, 32), np.uint8)
    hmask = np.zeros((nb, 32), np.uint8)
    for h in range(2):
        for k in range(4):
            qs[:, h] |= ((q3[:, h, k] & 3) << (2 * k)).astype(np.uint8)
            hmask |= ((q3[:, h, k] >> 2) << (4 * h + k)).astype(np.uint8)
    v = (sc + 32).astype(np.uint8)  # (nb, 16), 6 bits
    scales = np.zeros((nb, 12), np.uint8)
    scales[:, 0:8] = (v[:, 0:8] & 15) | ((v[:, 8:16] & 15) << 4)
    for i in range(16):
        scales[:, 8 + (i & 3)] |= ((v[:, i] >> 4) << (2 * (i >> 2))).astype(np.uint8)
    return np.concatenate([hmask, qs.reshape(nb, 64), scales, _f16_bytes(d)], axis=1)


# ggml's kvalues_iq4nl: the sixteen levels IQ4_NL and IQ4_XS nibbles index.
IQ4_LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32)


def _iq4_nearest(v: np.ndarray) -> np.ndarray:
    """Index of the level nearest to each value (midpoint search; no (..., 16) temporary)."""
    return np.searchsorted((IQ4_LEVELS[1:] + IQ4_LEVELS[:-1]) / 2, v).astype(np.uint8)


def _iq4_pack(q: np.ndarray) -> np.ndarray:
    """(..., 32) indices -> (..., 16) bytes: elements 0..15 in the low nibbles, 16..31 high."""
    return (q[..., :16] | (q[..., 16:] << 4)).astype(np.uint8)


def _quantize_iq4nl(x: np.ndarray) -> np.ndarray:
    """IQ4_NL blocks of 32: d = (signed max) / -127, each element the nearest level."""
    b = x.reshape(-1, 32).astype(np.float32)
    d = (_signed_absmax(b) / -127.0).astype(np.float16)
    df = d.astype(np.float32)
    q = _iq4_nearest(np.where(df[:, None] != 0, b / np.where(df != 0, df, 1)[:, None], 0))
    return np.concatenate([_f16_bytes(d), _iq4_pack(q)], axis=1)


def _quantize_iq4xs(x: np.ndarray) -> np.ndarray:
    """IQ4_XS super-blocks: per 32-element sub-block a 6-bit scale (biased by 32) relative to d."""
    b = x.reshape(-1, 8, 32).astype(np.float32)
    nb = b.shape[0]
    d, df, sc = _super_scales(_signed_absmax(b) / -127.0, 31)
    ls = sc.astype(np.int32) + 32
    dl = (df[:, None] * (ls - 32).astype(np.float32))[..., None]
    q = _iq4_nearest(np.where(dl != 0, b / np.where(dl != 0, dl, 1), 0))
    scales_l = ((ls[:, 0::2] & 15) | ((ls[:, 1::2] & 15) << 4)).astype(np.uint8)
    scales_h = np.zeros(nb, np.uint16)
    for j in range(8):
        scales_h |= (((ls[:, j] >> 4) & 3) << (2 * j)).astype(np.uint16)
    return np.concatenate([_f16_bytes(d), scales_h.astype("<u2").view(np.uint8).reshape(nb, 2), scales_l,
                           _iq4_pack(q).reshape(nb, 128)], axis=1)


def quantize(x: np.ndarray, qtype) -> np.ndarray:
    """x (rows, cols) float32 -> (rows, row bytes) uint8 in qtype's layout."""
    k_quantizers = {QT.Q2_K: _quantize_q2k, QT.Q3_K: _quantize_q3k, QT.Q6_K: _quantize_q6k,
                    QT.Q4_K: lambda v: _quantize_k45(v, False), QT.Q5_K: lambda v: _quantize_k45(v, True),
                    QT.IQ4_NL: _quantize_iq4nl, QT.IQ4_XS: _quantize_iq4xs}
    if qtype in k_quantizers:
        return k_quantizers[qtype](x).reshape(x.shape[0], -1)
    return gguf_quantize(x, qtype)


class WeightSource:
    def __init__(self, seed: int, mode: str):
        self.rng = np.random.default_rng(seed)
        self.mode = mode
        self.pools: dict = {}

    def _pool(self, qtype, std: float):
        key = (int(qtype), float(std))
        p = self.pools.get(key)
        if p is None:
            # long rows: gguf's quantizer has a per-16-rows overhead
            x = self.rng.standard_normal((POOL_BLOCKS * BLK // 8192, 8192), dtype=np.float32)
            x *= np.float32(std)
            q = quantize(x, qtype)
            p = q.reshape(-1, gguf.GGML_QUANT_SIZES[qtype][1])  # (blocks, bytes per block)
            self.pools[key] = p
        return p

    def matrix(self, qtype, n_rows: int, n_cols: int, std: float) -> np.ndarray:
        """(n_rows, n_cols) random N(0, std^2) matrix in the on-disk row layout of qtype:
        uint8 (n_rows, row_bytes) for quantized types, float32/float16 otherwise."""
        block, tsize = gguf.GGML_QUANT_SIZES[qtype]
        if n_cols % block:
            raise SystemExit(f"row size {n_cols} is not a multiple of the {qtype.name} block size {block}")
        row_bytes = n_cols // block * tsize
        if qtype == QT.F32:
            out = np.empty((n_rows, n_cols), np.float32)
        elif qtype == QT.F16:
            out = np.empty((n_rows, n_cols), np.float16)
        else:
            out = np.empty((n_rows, row_bytes), np.uint8)
        rows_per_chunk = max(1, CHUNK_ELEMS // n_cols)
        use_pool = self.mode == "pool" and block > 1
        for r0 in range(0, n_rows, rows_per_chunk):
            r1 = min(n_rows, r0 + rows_per_chunk)
            if use_pool:
                pool = self._pool(qtype, std)
                nb = (r1 - r0) * (n_cols // block)
                idx = self.rng.integers(0, pool.shape[0], size=nb)
                out[r0:r1] = pool[idx].reshape(r1 - r0, -1)
            else:
                x = self.rng.standard_normal((r1 - r0, n_cols), dtype=np.float32)
                x *= np.float32(std)
                out[r0:r1] = quantize(x, qtype)
        return out

    def norm(self, n: int) -> np.ndarray:
        return (1.0 + 0.05 * self.rng.standard_normal(n)).astype(np.float32)


def llama3_rope_factors(base: float, head_dim: int, factor: float, low: float, high: float,
                        orig_ctx: float) -> np.ndarray:
    """Per-pair divisors of the RoPE frequencies for Llama 3.1's rope_scaling, as
    llama.cpp's convert_hf_to_gguf.py computes the rope_freqs tensor (float32
    frequencies; wavelengths below orig_ctx / high untouched, above
    orig_ctx / low divided by factor, smoothly blended between)."""
    freqs = 1.0 / (np.float32(base) ** (np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)))
    low_wl, high_wl = orig_ctx / low, orig_ctx / high
    out = []
    for f in freqs:
        wl = 2 * np.pi / float(f)
        if wl < high_wl:
            out.append(1.0)
        elif wl > low_wl:
            out.append(factor)
        else:
            smooth = (orig_ctx / wl - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


# ------------------------------------------------------------------ tokenizer keys
def add_synthetic_tokenizer(w, n_vocab: int) -> None:
    """The synthetic SentencePiece-style vocabulary described above."""
    toks, scores, ttypes = build_vocab(n_vocab)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types(ttypes)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)


def tokenizer_fields(path: str) -> dict:
    """Every tokenizer.ggml.* key of a GGUF: {key: (value, type, array element type)}."""
    r = gguf.GGUFReader(path)
    out = {}
    for key, f in r.fields.items():
        if not key.startswith("tokenizer.ggml."):
            continue
        vtype = f.types[0]
        sub = f.types[1] if vtype == gguf.GGUFValueType.ARRAY and len(f.types) > 1 else None
        out[key] = (f.contents(), vtype, sub)
    if "tokenizer.ggml.tokens" not in out:
        raise SystemExit(f"{path}: no tokenizer.ggml.tokens")
    return out


# ------------------------------------------------------------------ main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--preset", choices=sorted(PRESETS))
    ap.add_argument("--layers", type=int)
    ap.add_argument("--dim", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--kv-heads", type=int)
    ap.add_argument("--ffn", type=int)
    ap.add_argument("--vocab", type=int)
    ap.add_argument("--type", choices=sorted(TYPES), default="Q4_0", help="type of the 2-D weight matrices")
    ap.add_argument("--embd-type", choices=sorted(TYPES), help="token_embd type (default: --type)")
    ap.add_argument("--output-type", choices=sorted(TYPES), help="output.weight type (default: --type)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ctx", type=int)
    ap.add_argument("--rope-base", type=float)
    ap.add_argument("--eps", type=float)
    ap.add_argument("--tied", action="store_true", help="no output.weight: token_embd is the LM head")
    ap.add_argument("--rope-llama3", metavar="FACTOR,LOW,HIGH,ORIG_CTX",
                    help="Llama 3.1-style RoPE scaling: a rope_freqs.weight tensor as llama.cpp's "
                         "convert_hf_to_gguf.py writes it (Llama 3.1: 8,1,4,8192)")
    ap.add_argument("--rope-linear", type=float, metavar="FACTOR",
                    help="rope.scaling.type linear with this rope.scaling.factor")
    ap.add_argument("--arch", choices=["llama", "qwen2", "qwen3"], default="llama",
                    help="general.architecture and its extra tensors (biases, q/k norms)")
    ap.add_argument("--head-dim", type=int, help="attention head size (default: dim / heads)")
    ap.add_argument("--sliding-window", type=int, metavar="N",
                    help="{arch}.attention.sliding_window (Mistral 7B v0.1's sliding-window attention)")
    ap.add_argument("--sliding-window-pattern", metavar="0,1,...",
                    help="{arch}.attention.sliding_window_pattern: one 0/1 a layer, the layers the window applies to")
    ap.add_argument("--mode", choices=["auto", "exact", "pool"], default="auto")
    ap.add_argument("--name", default=None)
    ap.add_argument("--tokenizer-from", metavar="GGUF",
                    help="copy tokenizer.ggml.* from this GGUF (a vocab-only one will do); --vocab = its token count")
    a = ap.parse_args(argv)

    cfg = dict(PRESETS[a.preset]) if a.preset else dict(rope_base=10000.0, eps=1e-5, ctx=4096)
    tok_fields = None
    if a.tokenizer_from:
        tok_fields = tokenizer_fields(a.tokenizer_from)
        if a.vocab is not None:
            raise SystemExit("--tokenizer-from sets the vocabulary size: leave out --vocab")
        cfg["vocab"] = len(tok_fields["tokenizer.ggml.tokens"][0])
    for k in ("layers", "dim", "heads", "kv_heads", "ffn", "vocab", "ctx", "rope_base", "eps"):
        v = getattr(a, k)
        if v is not None:
            cfg[k] = v
    missing = [k for k in ("layers", "dim", "heads", "kv_heads", "ffn", "vocab") if k not in cfg]
    if missing:
        raise SystemExit(f"missing shape arguments (or use --preset): {', '.join('--' + m.replace('_', '-') for m in missing)}")
    L, E, H, K, F, V = (int(cfg[k]) for k in ("layers", "dim", "heads", "kv_heads", "ffn", "vocab"))
    if (E % H and not a.head_dim) or H % K:
        raise SystemExit("--dim must be a multiple of --heads (or give --head-dim) and --heads a multiple of --kv-heads")
    D = a.head_dim or E // H
    if D % 2:
        raise SystemExit("head dim must be even for RoPE")
    wtype = TYPES[a.type]
    etype = TYPES[a.embd_type or a.type]
    otype = TYPES[a.output_type or a.type]

    n_weights = V * E * (1 if a.tied else 2) + L * (E * H * D + 2 * E * K * D + H * D * E + 3 * E * F)
    mode = a.mode if a.mode != "auto" else ("exact" if n_weights <= (64 << 20) else "pool")
    t0 = time.time()

    # Tensor list: (name, kind, n_rows(ne1), n_cols(ne0), qtype, std)
    emb_std = 4.0 / np.sqrt(E)
    tensors = [("token_embd.weight", "mat", V, E, etype, emb_std)]
    for i in range(L):
        p = f"blk.{i}."
        tensors += [
            (p + "attn_norm.weight", "norm", 1, E, QT.F32, 0),
            (p + "attn_q.weight", "mat", H * D, E, wtype, 1 / np.sqrt(E)),
            (p + "attn_k.weight", "mat", K * D, E, wtype, 1 / np.sqrt(E)),
            (p + "attn_v.weight", "mat", K * D, E, wtype, 1 / np.sqrt(E)),
            (p + "attn_output.weight", "mat", E, H * D, wtype, 1 / np.sqrt(H * D)),
            (p + "ffn_norm.weight", "norm", 1, E, QT.F32, 0),
            (p + "ffn_gate.weight", "mat", F, E, wtype, 1 / np.sqrt(E)),
            (p + "ffn_up.weight", "mat", F, E, wtype, 1 / np.sqrt(E)),
            (p + "ffn_down.weight", "mat", E, F, wtype, 1 / np.sqrt(F)),
        ]
        if a.arch == "qwen2":
            tensors += [(p + "attn_q.bias", "bias", 1, H * D, QT.F32, 0.5),
                        (p + "attn_k.bias", "bias", 1, K * D, QT.F32, 0.5),
                        (p + "attn_v.bias", "bias", 1, K * D, QT.F32, 0.5)]
        if a.arch == "qwen3":
            tensors += [(p + "attn_q_norm.weight", "qknorm", 1, D, QT.F32, 0.2),
                        (p + "attn_k_norm.weight", "qknorm", 1, D, QT.F32, 0.2)]
    tensors.append(("output_norm.weight", "norm", 1, E, QT.F32, 0))
    rope_freqs = None
    if a.rope_llama3:
        try:
            factor, low, high, orig = (float(x) for x in a.rope_llama3.split(","))
        except ValueError:
            raise SystemExit("--rope-llama3 takes FACTOR,LOW,HIGH,ORIG_CTX, e.g. 8,1,4,8192")
        rope_freqs = llama3_rope_factors(float(cfg["rope_base"]), D, factor, low, high, orig)
        tensors.append(("rope_freqs.weight", "freqs", 1, D // 2, QT.F32, 0))
    if not a.tied:
        tensors.append(("output.weight", "mat", V, E, otype, emb_std))

    w = GGUFWriter(a.out, a.arch)
    name = a.name or f"redwood-synthetic-{a.preset or 'custom'}-L{L}-{a.type}" + ("" if a.arch == "llama" else "-" + a.arch)
    w.add_name(name)
    w.add_file_type(FILE_TYPE[a.type])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_context_length(int(cfg["ctx"]))
    w.add_embedding_length(E)
    w.add_block_count(L)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(K)
    w.add_rope_dimension_count(D)
    if D != E // H or E % H:
        w.add_key_length(D)
        w.add_value_length(D)
    w.add_rope_freq_base(float(cfg["rope_base"]))
    w.add_layer_norm_rms_eps(float(cfg["eps"]))
    if a.sliding_window:
        w.add_uint32(f"{a.arch}.attention.sliding_window", a.sliding_window)
    if a.sliding_window_pattern:
        pat = [x.strip() == "1" for x in a.sliding_window_pattern.split(",")]
        if len(pat) != cfg["layers"]:
            raise SystemExit(f"--sliding-window-pattern: {len(pat)} flags for {cfg['layers']} layers")
        w.add_array(f"{a.arch}.attention.sliding_window_pattern", pat)
    if a.rope_linear:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(a.rope_linear)
    w.add_vocab_size(V)
    if tok_fields is not None:
        for key, (value, vtype, sub_type) in tok_fields.items():
            w.add_key_value(key, value, vtype, sub_type=sub_type)
    else:
        add_synthetic_tokenizer(w, V)

    for tname, kind, nr, nc, qt, _ in tensors:
        if kind in ("norm", "freqs", "bias", "qknorm"):
            w.add_tensor_info(tname, (nc,), np.dtype(np.float32), nc * 4)
        else:
            block, tsize = gguf.GGML_QUANT_SIZES[qt]
            if nc % block:
                raise SystemExit(f"{tname}: row size {nc} not a multiple of {qt.name} block size {block}")
            nbytes = nr * (nc // block) * tsize
            if qt in (QT.F32, QT.F16):
                w.add_tensor_info(tname, (nr, nc), np.dtype(np.float32 if qt == QT.F32 else np.float16), nbytes)
            else:
                w.add_tensor_info(tname, (nr, nc // block * tsize), np.dtype(np.uint8), nbytes, raw_dtype=qt)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    src = WeightSource(a.seed, mode)
    for tname, kind, nr, nc, qt, std in tensors:
        if kind == "freqs":
            data = rope_freqs
        elif kind == "bias":
            data = (std * src.rng.standard_normal(nc)).astype(np.float32)
        elif kind == "qknorm":
            data = (1.0 + std * src.rng.standard_normal(nc)).astype(np.float32)
        else:
            data = src.norm(nc) if kind == "norm" else src.matrix(qt, nr, nc, std)
        w.write_tensor_data(data)
        del data
    w.close()

    dt = time.time() - t0
    size = os.path.getsize(a.out)
    print(f"wrote {a.out}: {size} bytes ({size / (1 << 20):.1f} MiB), {len(tensors)} tensors, "
          f"{n_weights / 1e6:.1f}M weights, L={L} dim={E} heads={H}/{K} ffn={F} vocab={V} "
          f"type={a.type} tied={a.tied} mode={mode}, {dt:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
