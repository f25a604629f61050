#!/usr/bin/env python3
"""Distil a small Llama draft model for a Redwood target (SmolLM2-135M by default).

The draft has the target's width and head layout, a few transformer blocks
(initialised from chosen target blocks), the target's final norm, and the target's
token embedding as a FROZEN tied LM head. It is trained with cross-entropy on the
target's own greedy continuations (what a draft must predict at temperature 0).

Stages (all run by default; the data is cached):
  1. data   : chat-template each training prompt, tokenize it with `redwood tokenize`,
              run `redwood generate --prompt-tokens ... --json` (greedy) and store
              prompt + continuation ids in <workdir>/data-<n>x<tokens>.jsonl.
              Prompts: GSM8K questions 0..N-1 (never 500+, the evaluation range),
              then MT-bench first turns.
  2. train  : JAX (CPU) + optax AdamW; loss = CE on the target's greedy tokens
              (continuation positions, optionally prompt positions with --prompt-weight).
              Progress on stderr: train loss and held-out top-1 agreement.
  3. write  : GGUF with F32 block weights, the target's token_embd tensor bytes as-is,
              the target's output_norm and every metadata key of the target
              (tokenizer included), block_count = draft blocks.
  4. check  : (--check) greedy `redwood generate -m DRAFT` must equal the JAX greedy
              continuation for a held-out prompt.

Example:
  python3 tools/train-draft.py --target models/SmolLM2-135M-Instruct.Q4_1.gguf \\
      --blocks 0,29 --prompts 500 --tokens 160 --minutes 20 --out build/trained-draft-2L.gguf --check

Conventions (same as tools/oracle/gguf_llama_ref.py): GGUF Q/K are stored permuted
for llama.cpp's "normal" rope, so RoPE rotates adjacent pairs (2i, 2i+1) with angle
pos * base^(-2i/head_dim); RMSNorm x/sqrt(mean(x^2)+eps)*w; GQA head h uses kv head
h // (n_head/n_kv); SwiGLU FFN; a GGUF 2-D tensor with shape [ne0, ne1] is the
(ne1 rows, ne0 cols) matrix W with y = W x.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

try:
    import gguf
    from gguf import GGUFReader, GGUFWriter, GGUFValueType
    from gguf.quants import dequantize as gguf_dequantize
except ImportError as e:  # pragma: no cover
    raise SystemExit(f"train-draft: the PyPI 'gguf' package is required ({e})")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def log(*a):
    print("[train-draft]", *a, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- data
def chat_text(q: str) -> str:
    # SmolLM2-Instruct's template as redwood's --chat applies it (checked: identical
    # token counts and outputs, see check_chat_template()).
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{q}<|im_end|>\n"
            f"<|im_start|>assistant\n")


def load_prompts(n_gsm: int, n_mt: int) -> list[str]:
    data = os.path.join(os.path.dirname(REPO), "shared", "data")
    qs = []
    with open(os.path.join(data, "gsm8k_test_first1000.jsonl")) as f:
        for i, line in enumerate(f):
            if i >= min(n_gsm, 500):  # 500+ is the evaluation range: never train on it
                break
            qs.append(json.loads(line)["question"])
    if n_mt:
        with open(os.path.join(data, "mt_bench_questions.jsonl")) as f:
            for i, line in enumerate(f):
                if i >= n_mt:
                    break
                qs.append(json.loads(line)["turns"][0])
    return qs


def tokenize_many(redwood: str, target: str, texts: list[str], workdir: str) -> list[list[int]]:
    path = os.path.join(workdir, "tok-in.jsonl")
    with open(path, "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    out = subprocess.run([redwood, "tokenize", "-m", target, "--jsonl", path], check=True,
                         capture_output=True, text=True).stdout
    rows = [json.loads(l) for l in out.splitlines() if l.strip()]
    if len(rows) != len(texts):
        raise SystemExit(f"train-draft: tokenize returned {len(rows)} rows for {len(texts)} texts")
    return rows


def generate(redwood: str, model: str, prompt_ids: list[int], n: int, draft: str | None = None,
             threads: int = 1) -> dict:
    cmd = [redwood, "generate", "-m", model, "--prompt-tokens", ",".join(map(str, prompt_ids)),
           "-n", str(n), "--json", "-t", str(threads)]
    if draft:
        cmd += ["--draft", draft, "--tree", "chain:4"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def check_chat_template(redwood: str, target: str, q: str, workdir: str):
    """Our template + --prompt-tokens must reproduce `generate --chat` exactly."""
    ids = tokenize_many(redwood, target, [chat_text(q)], workdir)[0]
    a = generate(redwood, target, ids, 24)
    b = json.loads(subprocess.run([redwood, "generate", "-m", target, "-p", q, "--chat", "-n", "24", "--json",
                                   "-t", "1"], check=True, capture_output=True, text=True).stdout)
    if a["tokens"] != b["tokens"] or a.get("prompt_tokens") != b.get("prompt_tokens"):
        raise SystemExit("train-draft: chat template mismatch with redwood --chat")


def build_data(a) -> list[dict]:
    path = os.path.join(a.workdir, f"data-{a.prompts}x{a.tokens}-mt{a.mt_prompts}.jsonl")
    if os.path.exists(path):
        rows = [json.loads(l) for l in open(path)]
        log(f"data: cached {path}: {len(rows)} sequences, "
            f"{sum(len(r['cont']) for r in rows)} continuation tokens")
        return rows
    qs = load_prompts(a.prompts, a.mt_prompts)
    check_chat_template(a.redwood, a.target, qs[0], a.workdir)
    log("data: chat template matches redwood --chat")
    ids = tokenize_many(a.redwood, a.target, [chat_text(q) for q in qs], a.workdir)
    t0 = time.time()
    rows = [None] * len(qs)
    done = [0]

    def job(i):
        r = generate(a.redwood, a.target, ids[i], a.tokens)
        rows[i] = {"i": i, "prompt": ids[i], "cont": r["tokens"]}
        done[0] += 1
        if done[0] % 25 == 0:
            log(f"data: {done[0]}/{len(qs)} sequences, {time.time() - t0:.0f}s")

    with ThreadPoolExecutor(a.gen_workers) as ex:
        list(ex.map(job, range(len(qs))))
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    os.replace(tmp, path)
    log(f"data: wrote {path}: {len(rows)} sequences, {sum(len(r['cont']) for r in rows)} continuation "
        f"tokens, {time.time() - t0:.0f}s")
    return rows


# ----------------------------------------------------------------------------- target weights
class Target:
    def __init__(self, path: str):
        self.reader = GGUFReader(path, "r")
        r = self.reader
        f = lambda k, d=None: (r.fields[k].contents() if k in r.fields else d)
        self.arch = f("general.architecture", "llama")
        a = self.arch
        self.n_layer = int(f(f"{a}.block_count"))
        self.E = int(f(f"{a}.embedding_length"))
        self.F = int(f(f"{a}.feed_forward_length"))
        self.H = int(f(f"{a}.attention.head_count"))
        self.K = int(f(f"{a}.attention.head_count_kv", self.H))
        self.D = int(f(f"{a}.attention.key_length", self.E // self.H))
        self.n_rot = int(f(f"{a}.rope.dimension_count", self.D))
        self.rope_base = float(f(f"{a}.rope.freq_base", 10000.0))
        self.eps = float(f(f"{a}.attention.layer_norm_rms_epsilon", 1e-5))
        self.tensors = {t.name: t for t in r.tensors}
        if "output.weight" in self.tensors:
            raise SystemExit("train-draft: only tied-LM-head targets are supported")
        self.V = int(self.tensors["token_embd.weight"].shape[1])

    def mat(self, name: str) -> np.ndarray:
        t = self.tensors[name]
        ne0 = int(t.shape[0])
        out = gguf_dequantize(np.ascontiguousarray(t.data), t.tensor_type)
        return out.reshape(-1, ne0).astype(np.float32) if len(t.shape) > 1 else out.reshape(ne0).astype(np.float32)

    def block(self, i: int) -> dict:
        p = f"blk.{i}."
        return {k: self.mat(p + k + ".weight") for k in
                ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
                 "ffn_down")}


BLOCK_KEYS = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
              "ffn_down")


# ----------------------------------------------------------------------------- model (JAX)
def make_model(jnp, jax, cfg):
    E, H, K, D, n_rot, base, eps = cfg["E"], cfg["H"], cfg["K"], cfg["D"], cfg["n_rot"], cfg["base"], cfg["eps"]
    group = H // K
    inv_freq = base ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)

    def rms(x, w):
        return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w

    def rope(x, cos, sin):  # x (B, T, h, D): rotate adjacent pairs of the first n_rot dims
        xr = x[..., :n_rot].reshape(x.shape[:-1] + (n_rot // 2, 2))
        x0, x1 = xr[..., 0], xr[..., 1]
        y = jnp.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], axis=-1).reshape(x.shape[:-1] + (n_rot,))
        return jnp.concatenate([y, x[..., n_rot:]], axis=-1) if n_rot < x.shape[-1] else y

    def hidden(params, emb, tokens):
        """tokens (B, T) -> normed final hidden (B, T, E); one causal chain per row from pos 0."""
        B, T = tokens.shape
        x = emb[tokens]
        ang = np.arange(T)[:, None] * inv_freq[None, :]
        cos = jnp.asarray(np.cos(ang), jnp.float32)[None, :, None, :]
        sin = jnp.asarray(np.sin(ang), jnp.float32)[None, :, None, :]
        mask = jnp.asarray(np.tril(np.ones((T, T), bool)))
        for blk in params["blocks"]:
            h = rms(x, blk["attn_norm"])
            q = (h @ blk["attn_q"].T).reshape(B, T, H, D)
            k = (h @ blk["attn_k"].T).reshape(B, T, K, D)
            v = (h @ blk["attn_v"].T).reshape(B, T, K, D)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            q = q.reshape(B, T, K, group, D)
            s = jnp.einsum("btkgd,bskd->bkgts", q, k) / math.sqrt(D)
            s = jnp.where(mask, s, -1e30)
            p = jax.nn.softmax(s, axis=-1)
            o = jnp.einsum("bkgts,bskd->btkgd", p, v).reshape(B, T, H * D)
            x = x + o @ blk["attn_output"].T
            h = rms(x, blk["ffn_norm"])
            x = x + (jax.nn.silu(h @ blk["ffn_gate"].T) * (h @ blk["ffn_up"].T)) @ blk["ffn_down"].T
        return rms(x, params["output_norm"])

    return hidden


# ----------------------------------------------------------------------------- GGUF writing
WTYPES = {"F32": (0, None), "F16": (1, None), "Q8_0": (7, "Q8_0"), "Q4_1": (3, "Q4_1")}


def block_tensor(x: np.ndarray, wtype: str):
    """On-disk data of a 2-D block weight in wtype, and its float32 round trip."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if wtype == "F32":
        return x, x
    if wtype == "F16":
        h = x.astype(np.float16)
        return h, h.astype(np.float32)
    from gguf.quants import quantize as gguf_quantize
    qt = gguf.GGMLQuantizationType[wtype]
    q = gguf_quantize(x, qt)
    return q, gguf_dequantize(q, qt).reshape(x.shape).astype(np.float32)


def roundtrip_params(params_np: dict, wtype: str) -> dict:
    return {"blocks": [{k: (block_tensor(v, wtype)[1] if v.ndim == 2 else v) for k, v in b.items()}
                       for b in params_np["blocks"]], "output_norm": params_np["output_norm"]}


def write_gguf(target_path: str, tgt: Target, params_np: dict, out: str, src_blocks: list[int],
               wtype: str = "F32"):
    r = tgt.reader
    arch = tgt.arch
    w = GGUFWriter(out, arch)
    skip = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count", "general.architecture"}
    for key, field in r.fields.items():
        if key in skip:
            continue
        vt = field.types[0]
        val = field.contents()
        if key == f"{arch}.block_count":
            val = len(params_np["blocks"])
        elif key == "general.file_type":
            val = WTYPES[wtype][0]  # block weights' type (the embedding keeps its own)
        elif key == "general.name":
            val = f"{val} trained draft ({len(params_np['blocks'])} blocks from {','.join(map(str, src_blocks))})"
        if vt == GGUFValueType.ARRAY:
            w.add_key_value(key, val, vt, sub_type=field.types[-1] if len(field.types) > 1 else None)
        else:
            w.add_key_value(key, val, vt)
    emb = tgt.tensors["token_embd.weight"]
    w.add_tensor("token_embd.weight", np.asarray(emb.data), raw_shape=None, raw_dtype=emb.tensor_type)
    for i, blk in enumerate(params_np["blocks"]):
        for k in BLOCK_KEYS:
            x = np.asarray(blk[k], np.float32)
            if x.ndim == 1:  # norms stay F32
                w.add_tensor(f"blk.{i}.{k}.weight", np.ascontiguousarray(x))
            elif wtype in ("F32", "F16"):
                w.add_tensor(f"blk.{i}.{k}.weight", block_tensor(x, wtype)[0])
            else:
                w.add_tensor(f"blk.{i}.{k}.weight", block_tensor(x, wtype)[0],
                             raw_dtype=gguf.GGMLQuantizationType[wtype])
    w.add_tensor("output_norm.weight", np.ascontiguousarray(params_np["output_norm"], dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def save_params(path, pnp, src_blocks):
    d = {"src_blocks": np.asarray(src_blocks), "output_norm": pnp["output_norm"]}
    for i, b in enumerate(pnp["blocks"]):
        for k, v in b.items():
            d[f"blk.{i}.{k}"] = v
    np.savez(path, **d)


def load_params(path):
    z = np.load(path)
    n = 1 + max(int(k.split(".")[1]) for k in z.files if k.startswith("blk."))
    return ({"blocks": [{k: z[f"blk.{i}.{k}"] for k in BLOCK_KEYS} for i in range(n)],
             "output_norm": z["output_norm"]}, [int(x) for x in z["src_blocks"]])


def export(a, tgt, pnp, src_blocks):
    outs = [(a.out, a.wtype)]
    for t in filter(None, a.also_wtypes.split(",")):
        if t not in WTYPES:
            raise SystemExit(f"train-draft: unknown --also-wtypes type {t}")
        outs.append((os.path.splitext(a.out)[0] + f"-{t}.gguf", t))
    for path, t in outs:
        write_gguf(a.target, tgt, pnp, path, src_blocks, t)
        log(f"wrote {path} (blocks {t}, {os.path.getsize(path) / 2**20:.1f} MiB)")


# ----------------------------------------------------------------------------- main
def parse_blocks(s: str, n_layer: int) -> list[int]:
    if s.isdigit():
        k = int(s)
        return list(range(k - 1)) + [n_layer - 1] if k > 1 else [0]
    out = []
    for part in s.split(","):
        if "-" in part:
            x, y = part.split("-")
            out += list(range(int(x), int(y) + 1))
        else:
            out.append(int(part))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=os.path.join(REPO, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--redwood", default=os.path.join(REPO, "build/redwood"))
    ap.add_argument("--blocks", default="2",
                    help="N (first N-1 target blocks + the last one) or an explicit list like 0,29 or 0-2")
    ap.add_argument("--prompts", type=int, default=500, help="GSM8K training questions 0..N-1 (N <= 500)")
    ap.add_argument("--mt-prompts", type=int, default=80, help="MT-bench first turns added to the data")
    ap.add_argument("--tokens", type=int, default=160, help="greedy target tokens generated per prompt")
    ap.add_argument("--gen-workers", type=int, default=2, help="parallel single-threaded redwood processes")
    ap.add_argument("--heldout", type=int, default=20, help="sequences held out for top-1 agreement")
    ap.add_argument("--minutes", type=float, default=20.0, help="training wall-clock budget")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0 = time only)")
    ap.add_argument("--batch", type=int, default=4, help="sequences per step")
    ap.add_argument("--seq", type=int, default=256, help="max sequence length (prompt + continuation)")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--wd", type=float, default=0.0)
    ap.add_argument("--prompt-weight", type=float, default=0.0, help="CE weight of prompt positions")
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default=os.path.join(REPO, "build/train-draft"))
    ap.add_argument("--out", help="output GGUF")
    ap.add_argument("--wtype", default="F32", choices=sorted(WTYPES), help="type of the draft's block matrices")
    ap.add_argument("--also-wtypes", default="",
                    help="comma list of extra block types; each writes OUT with a -TYPE suffix (e.g. Q8_0,Q4_1)")
    ap.add_argument("--export-only", metavar="NPZ", help="skip training: write GGUF(s) from saved parameters")
    ap.add_argument("--data-only", action="store_true", help="only build/cache the training data")
    ap.add_argument("--check", action="store_true",
                    help="after writing, compare redwood greedy decoding of the draft with the JAX model")
    a = ap.parse_args(argv)
    os.makedirs(a.workdir, exist_ok=True)

    if a.export_only:
        if not a.out:
            raise SystemExit("train-draft: --out is required")
        pnp, src_blocks = load_params(a.export_only)
        export(a, Target(a.target), pnp, src_blocks)
        return 0
    rows = build_data(a)
    if a.data_only:
        return 0
    if not a.out:
        raise SystemExit("train-draft: --out is required")
    try:
        import jax
        import jax.numpy as jnp
        import optax
    except ImportError as e:
        raise SystemExit(f"train-draft: JAX/optax missing ({e}); install: "
                         f"python3 -m pip install --break-system-packages 'jax[cpu]' optax")
    return train_and_write(a, rows, jax, jnp, optax)


def train_and_write(a, rows, jax, jnp, optax) -> int:
    tgt = Target(a.target)
    src_blocks = parse_blocks(a.blocks, tgt.n_layer)
    log(f"draft: {len(src_blocks)} blocks initialised from target blocks {src_blocks}")
    emb = jnp.asarray(tgt.mat("token_embd.weight"))  # (V, E), frozen tied head
    params = {"blocks": [{k: jnp.asarray(v) for k, v in tgt.block(i).items()} for i in src_blocks],
              "output_norm": jnp.asarray(tgt.mat("output_norm.weight"))}
    cfg = dict(E=tgt.E, H=tgt.H, K=tgt.K, D=tgt.D, n_rot=tgt.n_rot, base=tgt.rope_base, eps=tgt.eps)
    hidden = make_model(jnp, jax, cfg)

    # sequences: prompt + continuation; targets[t] = seq[t+1]; weight 1 on continuation
    rng = np.random.default_rng(a.seed)
    order = rng.permutation(len(rows))
    held = [rows[i] for i in order[:a.heldout]]
    train = [rows[i] for i in order[a.heldout:]]

    # Loss positions are gathered so the (expensive) LM head only runs where the loss is:
    # C per row = the continuation length (+ the prompt when --prompt-weight > 0).
    C = a.seq if a.prompt_weight > 0 else a.tokens

    def pack(rs):
        T = a.seq
        toks = np.zeros((len(rs), T), np.int32)
        pos = np.zeros((len(rs), C), np.int32)
        tg = np.zeros((len(rs), C), np.int32)
        wt = np.zeros((len(rs), C), np.float32)
        for j, r in enumerate(rs):
            s = (r["prompt"] + r["cont"])[:T + 1]
            n = len(s) - 1
            toks[j, :n] = s[:n]
            np_ = len(r["prompt"])
            w = np.full(n, a.prompt_weight, np.float32)
            w[np_ - 1:n] = 1.0  # position np_-1 predicts the first continuation token
            ps = np.arange(n) if a.prompt_weight > 0 else np.arange(np_ - 1, n)
            ps = ps[:C]
            pos[j, :len(ps)] = ps
            tg[j, :len(ps)] = np.asarray(s[1:n + 1])[ps]
            wt[j, :len(ps)] = w[ps]
        return toks, pos, tg, wt

    ntrain_tok = sum(max(0, min(len(r["cont"]), a.seq - len(r["prompt"]) + 1)) for r in train)
    log(f"data: {len(train)} train sequences ({ntrain_tok} continuation tokens), {len(held)} held out")
    htoks, hpos, htg, hwt = pack(held)

    def gathered(p, toks, pos):
        h = hidden(p, emb, toks)
        return jnp.take_along_axis(h, pos[..., None], axis=1)

    def loss_fn(p, toks, pos, tg, wt):
        h = gathered(p, toks, pos)
        lg = h @ emb.T
        lse = jax.nn.logsumexp(lg, axis=-1)
        gold = jnp.take_along_axis(lg, tg[..., None], axis=-1)[..., 0]
        return jnp.sum((lse - gold) * wt) / jnp.maximum(jnp.sum(wt), 1.0)

    @jax.jit
    def agree(p, toks, pos, tg, wt):
        h = gathered(p, toks, pos)
        pred = jnp.argmax(h @ emb.T, axis=-1)
        m = (wt >= 1.0)
        return jnp.sum((pred == tg) & m), jnp.sum(m)

    def heldout_agreement(p):
        c = n = 0
        for j in range(0, len(held), a.batch):
            sl = slice(j, j + a.batch)
            x, y = agree(p, htoks[sl], hpos[sl], htg[sl], hwt[sl])
            c += int(x)
            n += int(y)
        return c / max(n, 1)

    sched = optax.warmup_cosine_decay_schedule(0.0, a.lr, 30, 4000, a.lr * 0.1)
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=a.wd))
    st = opt.init(params)

    @jax.jit
    def step(p, s, toks, pos, tg, wt):
        l, g = jax.value_and_grad(loss_fn)(p, toks, pos, tg, wt)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, l

    acc0 = heldout_agreement(params)
    log(f"step 0: held-out top-1 agreement {acc0:.4f} (initial blocks)")
    t0 = time.time()
    stepn = 0
    ep = 0
    losses = []
    best = (acc0, params)
    done = False
    while not done:
        perm = rng.permutation(len(train))
        ep += 1
        for j in range(0, len(perm) - a.batch + 1, a.batch):
            params, st, l = step(params, st, *pack([train[i] for i in perm[j:j + a.batch]]))
            stepn += 1
            losses.append(float(l))
            if stepn % a.eval_every == 0:
                acc = heldout_agreement(params)
                if acc > best[0]:
                    best = (acc, params)
                log(f"step {stepn} epoch {ep}: loss {np.mean(losses[-a.eval_every:]):.4f}, held-out top-1 "
                    f"agreement {acc:.4f}, {time.time() - t0:.0f}s")
            if time.time() - t0 > a.minutes * 60 or (a.max_steps and stepn >= a.max_steps):
                done = True
                break
    acc = heldout_agreement(params)
    if acc > best[0]:
        best = (acc, params)
    train_s = time.time() - t0
    log(f"done: {stepn} steps ({ep} epochs) in {train_s:.0f}s; final held-out agreement {acc:.4f}, "
        f"best {best[0]:.4f} (kept)")
    params = best[1]
    pnp = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float32), params)
    npz = os.path.splitext(a.out)[0] + ".params.npz"
    save_params(npz, pnp, src_blocks)
    log(f"saved parameters to {npz}")
    export(a, tgt, pnp, src_blocks)
    # the JAX check runs on exactly the weights redwood reads (after the --wtype round trip)
    params = jax.tree_util.tree_map(jnp.asarray, roundtrip_params(pnp, a.wtype))
    summary = {"out": a.out, "src_blocks": src_blocks, "steps": stepn, "epochs": ep, "train_seconds": round(train_s),
               "heldout_agreement_initial": acc0, "heldout_agreement": best[0],
               "train_sequences": len(train), "train_cont_tokens": ntrain_tok}

    if a.check:
        r = held[0]
        n = 16
        ids = list(r["prompt"])
        jh = jax.jit(lambda p, t: hidden(p, emb, t))
        mine = []
        for _ in range(n):
            h = jh(params, jnp.asarray([ids], jnp.int32))[0, -1]
            nxt = int(jnp.argmax(emb @ h))
            mine.append(nxt)
            ids.append(nxt)
        rw = generate(a.redwood, a.out, r["prompt"], n)["tokens"]
        ok = rw == mine[:len(rw)] and len(rw) > 0
        log(f"check: redwood greedy on draft {rw}")
        log(f"check: JAX greedy            {mine}")
        log(f"check: {'PASS' if ok else 'FAIL'}")
        summary["check"] = "PASS" if ok else "FAIL"
    print(json.dumps(summary))
    return 0 if summary.get("check", "PASS") == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
