#!/usr/bin/env python3
"""Independent numpy reference forward pass for Llama-family GGUF models.

Test oracle for Redwood only; never used by the runtime.

Tensors are read with gguf.GGUFReader and dequantized with gguf.quants.dequantize
(the gguf package's own dequantizers). Activations are computed in float64 by
default (--dtype float32 to halve memory for huge synthetic shapes).

Families: llama (GGML "normal" rope, i.e. the layout produced by llama.cpp's
converter, which permutes Wq/Wk so that RoPE rotates *adjacent pairs*); qwen2
(q/k/v biases added after the projections; NEOX rope: pairs (i, i + n_rot/2));
qwen3 (q and k RMS-normed per head with attn_q_norm/attn_k_norm before RoPE;
NEOX rope), as llama.cpp's src/models/qwen2.cpp / qwen3.cpp compute them.
Model (llama):
    x = token_embd[tokens]
    per layer:
        h  = rmsnorm(x) * attn_norm
        q  = rope(Wq h), k = rope(Wk h), v = Wv h            (pairs (2i, 2i+1), angle pos*base^(-2i/n_rot))
        x += Wo · softmax(q k^T / sqrt(head_dim) + causal) v    (GQA: head h uses kv head h // (n_head/n_kv))
                                                              (sliding window W: also masked where pos_q - pos_k >= W)
        h  = rmsnorm(x) * ffn_norm
        x += Wdown · (silu(Wgate h) * Wup h)
    logits = (output.weight or token_embd.weight) · (rmsnorm(x) * output_norm)
    rmsnorm(x) = x / sqrt(mean(x^2) + eps)

CLI:
    gguf_llama_ref.py logits --model M --tokens 1,2,3 --out ref.npy    # float32 [n, vocab]
    gguf_llama_ref.py greedy --model M --tokens 1,2,3 --n 64             # JSON array of generated ids
    gguf_llama_ref.py info   --model M                                   # hyperparameters as JSON
Module:
    load_model(path, dtype=np.float64, cache_budget_gb=6.0, ignore_window=False) -> RefModel
    logits(model, tokens) -> np.ndarray float32 [n, vocab]
    greedy(model, tokens, n, stop_at_eos=False) -> list[int]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time

import numpy as np

try:
    from gguf import GGMLQuantizationType, GGUFReader
    from gguf.quants import dequantize as _gguf_dequantize
except ImportError as e:  # pragma: no cover
    raise SystemExit(f"gguf_llama_ref: the PyPI 'gguf' package is required ({e})")

# Rows of a weight matrix processed at once when the matrix is not cached.
_ROW_CHUNK_ELEMS = 1 << 25  # ~32M elements per chunk


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


class RefModel:
    def __init__(self, path: str, dtype=np.float64, cache_budget_gb: float = 6.0, ignore_window: bool = False):
        self.path = path
        self.dtype = np.dtype(dtype)
        self.reader = GGUFReader(path, "r")
        r = self.reader
        self.arch = _field(r, "general.architecture", "llama")
        a = self.arch

        def need(key):
            v = _field(r, f"{a}.{key}")
            if v is None:
                raise SystemExit(f"gguf_llama_ref: missing metadata {a}.{key}")
            return v

        if a not in ("llama", "qwen2", "qwen3"):
            raise SystemExit(f"gguf_llama_ref: architecture {a!r} is not implemented")
        self.neox = a in ("qwen2", "qwen3")
        self.n_layer = int(need("block_count"))
        self.n_embd = int(need("embedding_length"))
        self.n_ff = int(need("feed_forward_length"))
        self.n_head = int(need("attention.head_count"))
        self.n_head_kv = int(_field(r, f"{a}.attention.head_count_kv", self.n_head))
        self.head_dim = int(_field(r, f"{a}.attention.key_length", self.n_embd // self.n_head))
        self.n_rot = int(_field(r, f"{a}.rope.dimension_count", self.head_dim))
        self.rope_base = float(_field(r, f"{a}.rope.freq_base", 10000.0))
        self.eps = float(_field(r, f"{a}.attention.layer_norm_rms_epsilon", 1e-5))
        self.n_ctx_train = int(_field(r, f"{a}.context_length", 0) or 0)
        self.eos = _field(r, "tokenizer.ggml.eos_token_id")
        # Sliding-window attention (Mistral 7B v0.1): attention.sliding_window,
        # 0 or absent is none. llama.cpp's convention (is_masked_swa,
        # LLAMA_SWA_TYPE_STANDARD): query position p does not see key position
        # k when p - k >= window (itself and window - 1 before it).
        # ignore_window: full attention (a test's negative control).
        self.window = 0 if ignore_window else int(_field(r, f"{a}.attention.sliding_window", 0) or 0)
        # The layers the window applies to (None: every layer): the bool array
        # attention.sliding_window_pattern (llama.cpp's); load_model can set
        # both for a config.json's per-layer windows.
        pat = None if ignore_window else _field(r, f"{a}.attention.sliding_window_pattern")
        self.window_layers = None
        if pat is not None:
            if not isinstance(pat, list) or len(pat) != self.n_layer:
                raise SystemExit(f"gguf_llama_ref: {a}.attention.sliding_window_pattern is not one bool a layer")
            self.window_layers = [bool(w) for w in pat]
        # Linear RoPE scaling as llama.cpp reads it: rope.scaling.factor, else
        # rope.scale_linear; 0 or absent is none; the type defaults to linear
        # and "none" switches the factor off.
        scaling = _field(r, f"{a}.rope.scaling.type") or "linear"
        if scaling not in ("linear", "none"):
            raise SystemExit(f"gguf_llama_ref: rope scaling {scaling!r} is not implemented")
        factor = _field(r, f"{a}.rope.scaling.factor")
        if factor is None:
            factor = _field(r, f"{a}.rope.scale_linear", 0.0)
        self.rope_linear = 1.0 if scaling == "none" or float(factor) == 0.0 else float(factor)
        if self.n_head % self.n_head_kv:
            raise SystemExit("gguf_llama_ref: n_head not a multiple of n_head_kv")
        if self.n_rot % 2 or self.n_rot > self.head_dim:
            raise SystemExit("gguf_llama_ref: bad rope dimension count")

        self.tensors = {t.name: t for t in r.tensors}
        self.lm_head_name = "output.weight" if "output.weight" in self.tensors else "token_embd.weight"
        emb = self.tensors["token_embd.weight"]
        self.n_vocab = int(emb.shape[1])  # gguf shape is [ne0=n_embd, ne1=n_vocab]
        if int(emb.shape[0]) != self.n_embd:
            raise SystemExit(f"gguf_llama_ref: token_embd shape {list(emb.shape)} vs n_embd {self.n_embd}")

        self._cache: dict[str, np.ndarray] = {}
        self._cache_bytes = 0
        self._cache_budget = int(cache_budget_gb * (1 << 30))

        # Pre-check every expected tensor and its shape ([ne0, ne1] = [in, out]).
        H, K, D, E, F = self.n_head, self.n_head_kv, self.head_dim, self.n_embd, self.n_ff
        expect = {"output_norm.weight": (E,)}
        for i in range(self.n_layer):
            p = f"blk.{i}."
            expect.update({
                p + "attn_norm.weight": (E,),
                p + "attn_q.weight": (E, H * D),
                p + "attn_k.weight": (E, K * D),
                p + "attn_v.weight": (E, K * D),
                p + "attn_output.weight": (H * D, E),
                p + "ffn_norm.weight": (E,),
                p + "ffn_gate.weight": (E, F),
                p + "ffn_up.weight": (E, F),
                p + "ffn_down.weight": (F, E),
            })
            if a == "qwen3":
                expect.update({p + "attn_q_norm.weight": (D,), p + "attn_k_norm.weight": (D,)})
        # Biases where present (llama.cpp reads them in any of these families).
        self.bias = (self.n_layer > 0 and "blk.0.attn_q.bias" in self.tensors)
        if self.bias:
            for i in range(self.n_layer):
                p = f"blk.{i}."
                expect.update({p + "attn_q.bias": (H * D,), p + "attn_k.bias": (K * D,), p + "attn_v.bias": (K * D,)})
        expect[self.lm_head_name] = (E, self.n_vocab)
        for name, shp in expect.items():
            t = self.tensors.get(name)
            if t is None:
                raise SystemExit(f"gguf_llama_ref: missing tensor {name}")
            got = tuple(int(s) for s in t.shape)
            if got != shp:
                raise SystemExit(f"gguf_llama_ref: tensor {name} has gguf shape {list(got)}, expected {list(shp)}")

        # RoPE inverse frequencies: base^(-2i/n_rot), i = 0..n_rot/2-1, divided by
        # the linear scaling factor and by Llama 3's per-pair rope_freqs (as
        # llama.cpp's ggml_rope_ext applies its freq_factors).
        self.inv_freq = self.rope_base ** (-np.arange(0, self.n_rot, 2, dtype=np.float64) / self.n_rot)
        self.inv_freq /= self.rope_linear
        if "rope_freqs.weight" in self.tensors:
            ff = np.asarray(self.tensors["rope_freqs.weight"].data, dtype=np.float64).reshape(-1)
            if ff.shape != (self.n_rot // 2,):
                raise SystemExit(f"gguf_llama_ref: rope_freqs.weight has {ff.size} values, expected {self.n_rot // 2}")
            self.inv_freq /= ff

    # ---------------------------------------------------------------- weights
    def _dequant_rows(self, name: str, r0: int, r1: int) -> np.ndarray:
        """Rows [r0, r1) of tensor `name` as a (rows, ne0) array in self.dtype."""
        t = self.tensors[name]
        ne0 = int(t.shape[0])
        raw = t.data[r0:r1] if t.data.ndim > 1 else t.data
        out = _gguf_dequantize(np.ascontiguousarray(raw), t.tensor_type)
        out = out.reshape(-1, ne0) if t.data.ndim > 1 else out.reshape(ne0)
        return out.astype(self.dtype, copy=False)

    def vec(self, name: str) -> np.ndarray:
        if name not in self._cache:
            self._cache[name] = self._dequant_rows(name, 0, 0)
        return self._cache[name]

    def _n_rows(self, name: str) -> int:
        t = self.tensors[name]
        return int(t.shape[1]) if len(t.shape) > 1 else 1

    def matrix(self, name: str):
        """Whole (out, in) matrix if it fits in the cache budget, else None."""
        w = self._cache.get(name)
        if w is not None:
            return w
        t = self.tensors[name]
        nbytes = int(t.n_elements) * self.dtype.itemsize
        if self._cache_bytes + nbytes > self._cache_budget:
            return None
        w = self._dequant_rows(name, 0, self._n_rows(name))
        self._cache[name] = w
        self._cache_bytes += nbytes
        return w

    def matmul(self, name: str, x: np.ndarray) -> np.ndarray:
        """x (n, in) -> x @ W^T (n, out), W stored as gguf [ne0=in, ne1=out]."""
        w = self.matrix(name)
        if w is not None:
            return x @ w.T
        n_out = self._n_rows(name)
        ne0 = int(self.tensors[name].shape[0])
        step = max(1, _ROW_CHUNK_ELEMS // ne0)
        y = np.empty((x.shape[0], n_out), dtype=self.dtype)
        for r0 in range(0, n_out, step):
            r1 = min(n_out, r0 + step)
            y[:, r0:r1] = x @ self._dequant_rows(name, r0, r1).T
        return y

    def embed(self, tokens) -> np.ndarray:
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.size and (tokens.min() < 0 or tokens.max() >= self.n_vocab):
            raise SystemExit(f"gguf_llama_ref: token id out of range [0, {self.n_vocab})")
        t = self.tensors["token_embd.weight"]
        raw = np.ascontiguousarray(t.data[tokens])
        out = _gguf_dequantize(raw, t.tensor_type).reshape(len(tokens), self.n_embd)
        return out.astype(self.dtype)

    # ---------------------------------------------------------------- blocks
    def rmsnorm(self, x: np.ndarray, name: str) -> np.ndarray:
        """RMSNorm over the last axis (a row, or one head of (n, heads, head_dim))."""
        x64 = x.astype(np.float64, copy=False)
        ms = np.mean(x64 * x64, axis=-1, keepdims=True)
        return (x64 / np.sqrt(ms + self.eps)).astype(self.dtype, copy=False) * self.vec(name)

    def rope(self, x: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """x: (n, heads, head_dim); rotates the first n_rot dims: adjacent pairs
        (2i, 2i+1), or for NEOX families (qwen2/3) pairs (i, i + n_rot/2)."""
        ang = pos.astype(np.float64)[:, None] * self.inv_freq[None, :]  # (n, n_rot/2)
        c = np.cos(ang)[:, None, :].astype(self.dtype)
        s = np.sin(ang)[:, None, :].astype(self.dtype)
        out = x.copy()
        if self.neox:
            h = self.n_rot // 2
            i0, i1 = slice(0, h), slice(h, self.n_rot)
        else:
            i0, i1 = slice(0, self.n_rot, 2), slice(1, self.n_rot, 2)
        x0 = x[..., i0]
        x1 = x[..., i1]
        out[..., i0] = x0 * c - x1 * s
        out[..., i1] = x0 * s + x1 * c
        return out


class KVCache:
    def __init__(self, model: RefModel):
        self.k = [None] * model.n_layer  # (t, n_kv, head_dim)
        self.v = [None] * model.n_layer
        self.n = 0
        self.pos = np.zeros(0, dtype=np.int64)  # each row's position


def _forward(m: RefModel, tokens, cache: KVCache, all_rows: bool, positions=None) -> np.ndarray:
    """Runs tokens through the model appending to cache; returns normalized final hidden
    states (all rows or just the last). positions: each token's (default: its row)."""
    n = len(tokens)
    H, K, D = m.n_head, m.n_head_kv, m.head_dim
    group = H // K
    rows = np.arange(cache.n, cache.n + n)
    pos = rows if positions is None else np.asarray(positions, dtype=np.int64)
    key_pos = np.concatenate([cache.pos, pos])
    x = m.embed(tokens)
    scale = 1.0 / math.sqrt(D)
    t_total = cache.n + n
    # causal mask: query row i sees rows j <= i
    full = np.arange(t_total)[None, :] > rows[:, None]  # (n, t_total)
    windowed = full
    if m.window > 0:  # and only keys at positions > its position - window
        windowed = full | (pos[:, None] - key_pos[None, :] >= m.window)
    for il in range(m.n_layer):
        p = f"blk.{il}."
        mask = windowed if m.window_layers is None or m.window_layers[il] else full
        h = m.rmsnorm(x, p + "attn_norm.weight")
        q = m.matmul(p + "attn_q.weight", h)
        k = m.matmul(p + "attn_k.weight", h)
        v = m.matmul(p + "attn_v.weight", h)
        if m.bias:
            q = q + m.vec(p + "attn_q.bias")
            k = k + m.vec(p + "attn_k.bias")
            v = v + m.vec(p + "attn_v.bias")
        q, k, v = q.reshape(n, H, D), k.reshape(n, K, D), v.reshape(n, K, D)
        if m.arch == "qwen3":
            q = m.rmsnorm(q, p + "attn_q_norm.weight")
            k = m.rmsnorm(k, p + "attn_k_norm.weight")
        q = m.rope(q, pos)
        k = m.rope(k, pos)
        if cache.k[il] is None:
            cache.k[il], cache.v[il] = k, v
        else:
            cache.k[il] = np.concatenate([cache.k[il], k], axis=0)
            cache.v[il] = np.concatenate([cache.v[il], v], axis=0)
        kk, vv = cache.k[il], cache.v[il]  # (t, K, D)
        attn = np.empty((n, H, D), dtype=m.dtype)
        for hh in range(H):
            kv = hh // group
            s = (q[:, hh, :] @ kk[:, kv, :].T).astype(np.float64) * scale  # (n, t)
            s[mask] = -np.inf
            s -= s.max(axis=1, keepdims=True)
            e = np.exp(s)
            e /= e.sum(axis=1, keepdims=True)
            attn[:, hh, :] = e.astype(m.dtype) @ vv[:, kv, :]
        x = x + m.matmul(p + "attn_output.weight", attn.reshape(n, H * D))
        h = m.rmsnorm(x, p + "ffn_norm.weight")
        g = m.matmul(p + "ffn_gate.weight", h)
        u = m.matmul(p + "ffn_up.weight", h)
        g64 = g.astype(np.float64, copy=False)
        act = (g64 / (1.0 + np.exp(-g64))).astype(m.dtype, copy=False) * u
        x = x + m.matmul(p + "ffn_down.weight", act)
    cache.n += n
    cache.pos = key_pos
    if not all_rows:
        x = x[-1:]
    return m.rmsnorm(x, "output_norm.weight")


def _lm_head(m: RefModel, h: np.ndarray) -> np.ndarray:
    return m.matmul(m.lm_head_name, h)


# -------------------------------------------------------------------- public API
def load_model(path: str, dtype=np.float64, cache_budget_gb: float = 6.0, ignore_window: bool = False,
               window: int | None = None, window_layers=None) -> RefModel:
    """window / window_layers: a sliding window (and the layers it applies to, one bool a layer) in
    place of the file's."""
    m = RefModel(path, dtype=dtype, cache_budget_gb=cache_budget_gb, ignore_window=ignore_window)
    if window is not None:
        m.window = window
    if window_layers is not None:
        if len(window_layers) != m.n_layer:
            raise ValueError(f"window_layers: {len(window_layers)} flags for {m.n_layer} layers")
        m.window_layers = [bool(w) for w in window_layers]
    return m


def logits(model: RefModel, tokens, positions=None) -> np.ndarray:
    """Logits for every position of `tokens` processed as one causal chain (at `positions`,
    by default 0, 1, ...): float32 [n, vocab]."""
    tokens = [int(t) for t in tokens]
    if not tokens:
        raise ValueError("logits: empty token list")
    cache = KVCache(model)
    h = _forward(model, tokens, cache, all_rows=True, positions=positions)
    return _lm_head(model, h).astype(np.float32)


def greedy(model: RefModel, tokens, n: int, stop_at_eos: bool = False, return_margins: bool = False):
    """Greedy continuation: returns the n generated ids (prompt excluded).
    With return_margins, also returns per-step (top1 - top2) logit margins."""
    tokens = [int(t) for t in tokens]
    if not tokens:
        raise ValueError("greedy: empty prompt")
    cache = KVCache(model)
    out, margins = [], []
    h = _forward(model, tokens, cache, all_rows=False)
    for _ in range(n):
        lg = _lm_head(model, h)[0]
        nxt = int(np.argmax(lg))
        top2 = np.partition(lg, -2)[-2:]
        margins.append(float(abs(top2[1] - top2[0])))
        out.append(nxt)
        if stop_at_eos and model.eos is not None and nxt == int(model.eos):
            break
        if len(out) == n:
            break
        h = _forward(model, [nxt], cache, all_rows=False)
    return (out, margins) if return_margins else out


def _parse_tokens(s: str) -> list[int]:
    return [int(x) for x in s.replace(" ", "").split(",") if x]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--model", required=True)
    common.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    common.add_argument("--cache-gb", type=float, default=6.0,
                        help="max GiB of dequantized weights kept in memory (rest dequantized per use)")
    p = sub.add_parser("logits", parents=[common])
    p.add_argument("--tokens", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("greedy", parents=[common])
    p.add_argument("--tokens", required=True)
    p.add_argument("--n", type=int, default=64)
    p.add_argument("--stop-at-eos", action="store_true")
    sub.add_parser("info", parents=[common])
    a = ap.parse_args(argv)

    t0 = time.time()
    m = load_model(a.model, dtype=np.float64 if a.dtype == "float64" else np.float32, cache_budget_gb=a.cache_gb)
    if a.cmd == "info":
        print(json.dumps({k: getattr(m, k) for k in (
            "arch", "n_layer", "n_embd", "n_ff", "n_head", "n_head_kv", "head_dim", "n_rot",
            "rope_base", "eps", "n_vocab", "lm_head_name", "eos", "window")}))
    elif a.cmd == "logits":
        lg = logits(m, _parse_tokens(a.tokens))
        np.save(a.out, lg)
        print(f"wrote {a.out} {lg.shape} in {time.time() - t0:.1f}s", file=sys.stderr)
    else:
        ids = greedy(m, _parse_tokens(a.tokens), a.n, stop_at_eos=a.stop_at_eos)
        print(json.dumps(ids))
        print(f"greedy {len(ids)} tokens in {time.time() - t0:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
