#!/usr/bin/env python3
"""The Hugging Face layout end to end: a safetensors directory gives the logits
the numpy/gguf oracle computes for the same weights in GGUF form.

    python3 tests/python/test_hf_layout.py --redwood build/redwood --workdir DIR

For each case a small random Llama is written as GGUF by
tools/make-synthetic-gguf.py, then rewritten here as a Hugging Face directory
(config.json, model.safetensors, tokenizer.json): tensor names mapped, Q and K
rows un-permuted to HF's rotate-half order (the inverse of llama.cpp's
convert_hf_to_gguf.py permute), config.json carrying the rope settings. Redwood
runs the directory; tools/oracle/gguf_llama_ref.py runs the GGUF. Cases:
  - plain (rope_theta 10000), F16 and BF16 safetensors;
  - Llama 3.1 rope_scaling ("llama3": factor 8, low 1, high 4, original
    context 64, so the scaling bites at short positions). The GGUF carries the
    rope_freqs tensor that convert_hf_to_gguf.py's formula gives; Redwood
    computes its factors from config.json itself;
  - linear rope_scaling (factor 4);
  - Qwen2 (q/k/v biases, tied embedding; BF16) and Qwen3 (q_norm/k_norm,
    head_dim 128 on a 256-wide model): model_type qwen2 / qwen3;
  - sliding windows on some layers only (Qwen2's max_window_layers, layer_types),
    with the window on every layer and on none as negative controls.
Plain script; exits non-zero on any failure.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "oracle"))
import gguf_llama_ref as ref  # noqa: E402
import gguf  # noqa: E402
from gguf import GGUFReader  # noqa: E402

SHAPE = ["--layers", "2", "--dim", "256", "--heads", "4", "--kv-heads", "2", "--ffn", "512", "--vocab", "512"]
CASES = [
    # name, make-synthetic-gguf args, rope_theta, rope_scaling, safetensors dtype
    ("plain-F16", ["--type", "F16"], 10000.0, None, "F16"),
    ("plain-BF16", ["--type", "BF16"], 10000.0, None, "BF16"),
    ("llama3", ["--type", "F16", "--rope-base", "500000", "--rope-llama3", "8,1,4,64"], 500000.0,
     {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 64}, "F16"),
    ("linear", ["--type", "F16", "--rope-linear", "4"], 10000.0, {"type": "linear", "factor": 4.0}, "F16"),
    # Qwen2 (q/k/v biases, tied embedding) and Qwen3 (per-head q/k norms, head_dim 128 > hidden / heads):
    # no Q/K permutation either side (llama.cpp's converter leaves qwen rows in HF order).
    ("qwen2", ["--type", "BF16", "--arch", "qwen2", "--tied", "--rope-base", "1000000"], 1000000.0, None, "BF16"),
    ("qwen3", ["--type", "F16", "--arch", "qwen3", "--head-dim", "128", "--rope-base", "1000000"], 1000000.0, None,
     "F16"),
]
# Sliding windows on some layers only, as config.json says (GGUF cannot): Qwen2's use_sliding_window from
# layer max_window_layers on, and layer_types. The oracle gets the same window on the same layers; the
# negative controls (the window on every layer, on none) must disagree with redwood on the 33-token pass.
QWEN2 = ["--type", "BF16", "--arch", "qwen2", "--tied", "--rope-base", "1000000"]
QWEN3 = ["--type", "F16", "--arch", "qwen3", "--head-dim", "128", "--rope-base", "1000000"]
WINDOW_CASES = [
    # name, make-synthetic-gguf args, safetensors dtype, config.json extras, the windowed layers
    ("qwen2-window-from-layer-1", QWEN2, "BF16",
     {"use_sliding_window": True, "sliding_window": 5, "max_window_layers": 1}, [False, True]),
    ("qwen3-layer-types", QWEN3, "F16",
     {"use_sliding_window": True, "sliding_window": 5, "layer_types": ["sliding_attention", "full_attention"]},
     [True, False]),
]


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """GGUF (interleaved pairs) -> HF (rotate-half) row order for Q/K: llama.cpp
    permutes HF rows with reshape(n_head, 2, d/2, ...).swapaxes(1, 2); undo it."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def to_bf16_bytes(a: np.ndarray) -> bytes:
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16  # round to nearest even
    return rounded.astype(np.uint16).tobytes()


def write_safetensors(path: str, tensors: dict[str, np.ndarray], dtype: str):
    """Writes the safetensors format: 8-byte header length, JSON header, data."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        dt = "F32" if a.ndim == 1 else dtype  # norm weights stay F32, as in the GGUF
        raw = a.astype(np.float32).tobytes() if dt == "F32" else a.astype(
            np.float16).tobytes() if dt == "F16" else to_bf16_bytes(a)
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)



def gguf_to_hf(gguf_path: str, out_dir: str, rope_theta: float, rope_scaling, dtype: str, extra_config=None):
    r = GGUFReader(gguf_path, "r")
    m = ref.RefModel(gguf_path)
    H, K = m.n_head, m.n_head_kv
    # The weights as stored (F16/BF16 values are exact in the directory's dtype,
    # so both sides compute with the same numbers).
    t = {x.name: gguf.quants.dequantize(x.data, x.tensor_type).astype(np.float32).reshape(
        [int(s) for s in reversed(x.shape)]) for x in r.tensors if x.name != "rope_freqs.weight"}
    tied = "output.weight" not in t
    hf = {"model.embed_tokens.weight": t["token_embd.weight"], "model.norm.weight": t["output_norm.weight"]}
    if not tied:
        hf["lm_head.weight"] = t["output.weight"]
    qk = (lambda w, n: w) if m.neox else unpermute  # only llama's converter permutes Q/K rows
    for i in range(m.n_layer):
        g, h = f"blk.{i}.", f"model.layers.{i}."
        hf[h + "input_layernorm.weight"] = t[g + "attn_norm.weight"]
        hf[h + "self_attn.q_proj.weight"] = qk(t[g + "attn_q.weight"], H)
        hf[h + "self_attn.k_proj.weight"] = qk(t[g + "attn_k.weight"], K)
        for x in ("q", "k", "v"):
            if g + f"attn_{x}.bias" in t:
                hf[h + f"self_attn.{x}_proj.bias"] = t[g + f"attn_{x}.bias"]
            if g + f"attn_{x}_norm.weight" in t:
                hf[h + f"self_attn.{x}_norm.weight"] = t[g + f"attn_{x}_norm.weight"]
        hf[h + "self_attn.v_proj.weight"] = t[g + "attn_v.weight"]
        hf[h + "self_attn.o_proj.weight"] = t[g + "attn_output.weight"]
        hf[h + "post_attention_layernorm.weight"] = t[g + "ffn_norm.weight"]
        hf[h + "mlp.gate_proj.weight"] = t[g + "ffn_gate.weight"]
        hf[h + "mlp.up_proj.weight"] = t[g + "ffn_up.weight"]
        hf[h + "mlp.down_proj.weight"] = t[g + "ffn_down.weight"]
    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), hf, dtype)
    cls = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[m.arch]
    config = {"architectures": [cls], "model_type": m.arch, "hidden_size": m.n_embd, "head_dim": m.head_dim,
              "intermediate_size": m.n_ff, "num_hidden_layers": m.n_layer, "num_attention_heads": H,
              "num_key_value_heads": K, "vocab_size": m.n_vocab, "max_position_embeddings": 4096,
              "rms_norm_eps": m.eps, "rope_theta": rope_theta, "rope_scaling": rope_scaling,
              "tie_word_embeddings": tied, "hidden_act": "silu", "torch_dtype": "float16"}
    config.update(extra_config or {})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f)
    vocab = {f"t{i}": i for i in range(m.n_vocab)}
    with open(os.path.join(out_dir, "tokenizer.json"), "w") as f:
        json.dump({"version": "1.0", "model": {"type": "BPE", "vocab": vocab, "merges": []},
                   "pre_tokenizer": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"}}, f)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--redwood", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    failed = 0
    rng = np.random.default_rng(7)
    cases = [(name, gen, theta, scaling, dtype, None, None) for name, gen, theta, scaling, dtype in CASES]
    cases += [(name, gen, 1000000.0, None, dtype, extra, layers) for name, gen, dtype, extra, layers in WINDOW_CASES]
    for i, (name, gen, theta, scaling, dtype, extra, layers) in enumerate(cases):
        gpath = os.path.join(a.workdir, f"hf-{name}.gguf")
        hdir = os.path.join(a.workdir, f"hf-{name}")
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make-synthetic-gguf.py"), "--out", gpath,
                        *SHAPE, "--seed", str(i + 11), *gen], check=True, stdout=subprocess.DEVNULL)
        gguf_to_hf(gpath, hdir, theta, scaling, dtype, extra)
        window = (extra or {}).get("sliding_window")
        model = ref.load_model(gpath, window=window, window_layers=layers)
        controls = [ref.load_model(gpath, window=window), ref.load_model(gpath, ignore_window=True)] if layers else []
        worst = 0.0
        ok = True
        control_errs = [float("inf")] * len(controls)
        for n in (1, 6, 33):
            ids = [int(x) for x in rng.integers(3, model.n_vocab, size=n)]
            out = os.path.join(a.workdir, f"hf-{name}-{n}.npy")
            r = subprocess.run([a.redwood, "logits", "--model", hdir, "--tokens", ",".join(map(str, ids)),
                                "--out", out], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"FAIL {name} n={n}: redwood exited {r.returncode}: {r.stderr.strip()[-500:]}", flush=True)
                ok = False
                break
            got = np.load(out).astype(np.float64)

            def rel_err(m):
                want = ref.logits(m, ids).astype(np.float64)
                return float((np.linalg.norm(got - want, axis=1) / np.maximum(np.linalg.norm(want, axis=1), 1e-30)).max())

            worst = max(worst, rel_err(model))
            if n == 33:
                control_errs = [rel_err(c) for c in controls]
        controls_ok = all(e > 10 * a.tol for e in control_errs)
        what = f"worst row rel err {worst:.2e} (tol {a.tol:g})"
        if controls:
            what += (f"; the window on every layer {control_errs[0]:.1e}, on none {control_errs[1]:.1e} "
                     f"(want > {10 * a.tol:g})")
        if ok and worst < a.tol and controls_ok:
            print(f"PASS {name} ({dtype} safetensors): {what}", flush=True)
        else:
            if ok:
                print(f"FAIL {name} ({dtype} safetensors): {what}", flush=True)
            failed += 1
    print(f"{len(cases) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
