#!/usr/bin/env python3
"""Measures the real peak memory of training steps of a decoder LLM built from a config.json.

Ground truth for Frenzy's memory model (MARP). The model is built with random weights (nothing
is downloaded) from a HuggingFace config.json (or a Frenzy zoo entry that wraps one), with the
module structure of HuggingFace's eager implementations (Llama-style RMSNorm/rotary/gated MLP,
GPT-2, GPT-NeoX, OPT), and trained for a few real steps with the given micro-batch, sequence
length, precision, optimizer and recomputation. The peak of the last step is reported:

  * on CUDA: torch.cuda.max_memory_allocated / max_memory_reserved, reset before the step;
  * on CPU: the exact tensor memory, as the running sum of the profiler's allocation and free
    events during the step, on top of the bytes held at its start (parameters, optimizer states).

Usage:
  measure_memory.py --config CONFIG.json [--micro-batch 1] [--seq-len 128]
      [--precision fp32|bf16|fp16|bf16-pure] [--optimizer adamw|adam|sgd|sgdm]
      [--recompute none|selective|full] [--recompute-every N] [--attn eager|sdpa] [--steps 3]
      [--device cpu|cuda]
      [--dropout on|off] [--keep-grads] [--accum N] [--json]

Prints one JSON object with --json: the configuration, "params", "peak_bytes",
"peak_reserved_bytes" (CUDA), "baseline_bytes", "peak_phase" and "saved_activation_bytes".
"""
import argparse
import json
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as ckpt
from torch.profiler import record_function

# The phases of a step that the CPU measurement tells apart, in the order they run (MARP's
# phases, src/memory/memory_model.h); the peak is attributed to the last one begun before it.
# loss.backward() first runs the loss's own backward, which holds vocabulary-sized gradients
# ("loss"); the logits' gradient being ready is where the model's backward begins ("backward").
PHASES = ("forward", "loss", "backward", "optimizer")


def mark_phase(name):
    """A gradient hook that records a zero-length `phase:NAME` profiler event when it runs."""
    def hook(grad):
        with record_function("phase:" + name):
            pass
    return hook


# ----------------------------------------------------------------------------------------------
# Config parsing: the fields of each HuggingFace model_type with its configuration class's
# defaults (the same rules as Frenzy's src/model/hf_config.cc).

LLAMA_LIKE = {
    # model_type: (vocab, hidden, ffn, layers, heads, kv_heads, max_pos, act, tied, qkv_bias)
    "llama": (32000, 4096, 11008, 32, 32, None, 2048, "silu", False, False),
    "mistral": (32000, 4096, 14336, 32, 32, 8, 131072, "silu", False, False),
    "qwen2": (151936, 4096, 22016, 32, 32, 32, 32768, "silu", False, True),
    "gemma": (256000, 3072, 24576, 28, 16, 16, 8192, "gelu_pytorch_tanh", True, False),
    "phi3": (32064, 3072, 8192, 32, 32, None, 4096, "silu", False, False),
    "qwen3": (151936, 4096, 22016, 32, 32, 32, 32768, "silu", False, False),
    "olmo2": (50304, 4096, 11008, 32, 32, None, 2048, "silu", False, False),
    "gemma2": (256000, 2304, 9216, 26, 8, 4, 8192, "gelu_pytorch_tanh", True, False),
    "gemma3_text": (262208, 2304, 9216, 26, 8, 4, 131072, "gelu_pytorch_tanh", True, False),
    "mixtral": (32000, 4096, 14336, 32, 32, 8, 131072, "silu", False, False),
    "qwen3_moe": (151936, 2048, 6144, 24, 32, 4, 32768, "silu", False, False),
    "deepseek_v3": (129280, 7168, 18432, 61, 128, 128, 4096, "silu", False, False),
    "gpt_oss": (201088, 2880, 2880, 36, 64, 8, 131072, "silu", False, True),
}
# Block variants of the 2026 families (transformers' modeling_<type>.py): q/k RMSNorm over each
# head ("head") or the whole projection ("full"); norms after the sublayers instead of before
# ("post", OLMo-2) or on both sides ("sandwich", Gemma-2/3).
QK_NORM = {"qwen3": "head", "qwen3_moe": "head", "gemma3_text": "head", "olmo2": "full"}
NORMS = {"olmo2": "post", "gemma2": "sandwich", "gemma3_text": "sandwich"}
GEMMA = ("gemma", "gemma2", "gemma3_text")


def parse_config(doc):
    if "config" in doc and isinstance(doc["config"], dict):
        doc = doc["config"]
    t = doc.get("model_type")
    c = {"model_type": t}
    if t in LLAMA_LIKE:
        v, h, f, l, a, kv, mp, act, tied, qb = LLAMA_LIKE[t]
        c.update(arch="llama", vocab=doc.get("vocab_size", v), hidden=doc.get("hidden_size", h),
                 ffn=doc.get("intermediate_size", f), layers=doc.get("num_hidden_layers", l),
                 heads=doc.get("num_attention_heads", a), max_pos=doc.get("max_position_embeddings", mp),
                 act=doc.get("hidden_act", act), tied=doc.get("tie_word_embeddings", tied))
        c["kv_heads"] = doc.get("num_key_value_heads") or (kv if kv is not None else c["heads"])
        c["head_dim"] = doc.get("head_dim") or (256 if t in GEMMA else 128 if t == "qwen3"
                                                else c["hidden"] // c["heads"])
        ab = (doc.get("attention_bias", False) if t in ("llama", "qwen3", "olmo2")
              else doc.get("attention_bias", True) if t == "gpt_oss" else False)
        c.update(qkv_bias=qb or ab, o_bias=ab, mlp_bias=doc.get("mlp_bias", False) if t == "llama" else False,
                 norm="rms", gated=True, pos="rotary", parallel=False, attn_dropout=doc.get("attention_dropout", 0.0),
                 hidden_dropout=0.0, embed_scale=(t in GEMMA), gemma_norm=(t in GEMMA),
                 qk_norm=QK_NORM.get(t), norms=NORMS.get(t, "pre"),
                 softcap=doc.get("attn_logit_softcapping", 50.0) if t == "gemma2" else None,
                 final_softcap=doc.get("final_logit_softcapping", 30.0) if t == "gemma2" else None)
        if t in GEMMA and "hidden_activation" in doc:
            c["act"] = doc["hidden_activation"]
        if t == "mixtral":  # every layer sparse, experts of intermediate_size, top-k renormalised
            c.update(experts=doc.get("num_local_experts", 8), top_k=doc.get("num_experts_per_tok", 2),
                     expert_ffn=c["ffn"], norm_topk=True, moe_layers=set(range(c["layers"])))
        if t == "gpt_oss":  # sinks; experts with biases and a clamped SwiGLU; every layer sparse
            c["head_dim"] = doc.get("head_dim") or 64
            c.update(sinks=True, gpt_oss_moe=True, experts=doc.get("num_local_experts", 128),
                     top_k=doc.get("num_experts_per_tok", 4), expert_ffn=c["ffn"],
                     moe_layers=set(range(c["layers"])))
        if t == "deepseek_v3":  # MLA; shared + routed experts after first_k_dense_replace
            c.update(mla=dict(q_lora=doc.get("q_lora_rank", 1536), kv_lora=doc.get("kv_lora_rank", 512),
                              nope=doc.get("qk_nope_head_dim", 128), rope=doc.get("qk_rope_head_dim", 64),
                              v=doc.get("v_head_dim", 128)),
                     experts=doc.get("n_routed_experts", 256), top_k=doc.get("num_experts_per_tok", 8),
                     expert_ffn=doc.get("moe_intermediate_size", 2048), norm_topk=doc.get("norm_topk_prob", True),
                     shared=doc.get("n_shared_experts", 1),
                     moe_layers=set(range(doc.get("first_k_dense_replace", 3), c["layers"])))
            c["kv_heads"] = c["heads"]
            c["head_dim"] = c["mla"]["nope"] + c["mla"]["rope"]
        if t == "qwen3_moe":
            step = doc.get("decoder_sparse_step", 1)
            dense = set(doc.get("mlp_only_layers") or [])
            c.update(experts=doc.get("num_experts", 128), top_k=doc.get("num_experts_per_tok", 8),
                     expert_ffn=doc.get("moe_intermediate_size", 768),
                     norm_topk=doc.get("norm_topk_prob", False),
                     moe_layers={i for i in range(c["layers"]) if i not in dense and (i + 1) % step == 0})
    elif t == "gpt2":
        h = doc.get("n_embd", 768)
        c.update(arch="gpt2", vocab=doc.get("vocab_size", 50257), hidden=h, layers=doc.get("n_layer", 12),
                 heads=doc.get("n_head", 12), ffn=doc.get("n_inner") or 4 * h, max_pos=doc.get("n_positions", 1024),
                 act=doc.get("activation_function", "gelu_new"), tied=doc.get("tie_word_embeddings", True),
                 qkv_bias=True, o_bias=True, mlp_bias=True, norm="layer", gated=False, pos="learned",
                 parallel=False, attn_dropout=doc.get("attn_pdrop", 0.1), hidden_dropout=doc.get("resid_pdrop", 0.1),
                 embd_dropout=doc.get("embd_pdrop", 0.1))
        c["kv_heads"] = c["heads"]
        c["head_dim"] = h // c["heads"]
    elif t == "gpt_neox":
        c.update(arch="neox", vocab=doc.get("vocab_size", 50432), hidden=doc.get("hidden_size", 6144),
                 layers=doc.get("num_hidden_layers", 44), heads=doc.get("num_attention_heads", 64),
                 ffn=doc.get("intermediate_size", 24576), max_pos=doc.get("max_position_embeddings", 2048),
                 act=doc.get("hidden_act", "gelu"), tied=doc.get("tie_word_embeddings", False),
                 qkv_bias=doc.get("attention_bias", True), o_bias=doc.get("attention_bias", True), mlp_bias=True,
                 norm="layer", gated=False, pos="rotary", parallel=doc.get("use_parallel_residual", True),
                 attn_dropout=doc.get("attention_dropout", 0.0), hidden_dropout=doc.get("hidden_dropout", 0.0),
                 rotary_pct=doc.get("rotary_pct", 0.25))
        c["kv_heads"] = c["heads"]
        c["head_dim"] = c["hidden"] // c["heads"]
    else:
        raise SystemExit(f"measure_memory.py: model_type {t!r} is not supported "
                         "(llama, mistral, qwen2, qwen3, olmo2, gemma, gemma2, gemma3_text, phi3, "
                         "gpt2, gpt_neox)")
    return c


# ----------------------------------------------------------------------------------------------
# Modules, structured as HuggingFace's eager implementations.

def act_fn(name):
    return {
        "silu": F.silu, "swish": F.silu, "relu": F.relu, "gelu": F.gelu,
        "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
        "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
        "gelu_fast": lambda x: F.gelu(x, approximate="tanh"),
    }[name]


class MeanKeepsNoInput(torch.autograd.Function):
    """x.mean(-1, keepdim=True) as PyTorch >= 2.2 differentiates it (pytorch/pytorch#109935): the
    backward keeps the input's shape and element count, not the input. Older releases keep the
    input (MeanBackward's `_saved_self`); `--torch22-mean` measures a newer release's account on
    them."""

    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        return x.mean(-1, keepdim=True)

    @staticmethod
    def backward(ctx, g):
        return g.expand(ctx.shape) / ctx.shape[-1]


# Whether RMSNorm's mean keeps no input (PyTorch >= 2.2's), whatever this PyTorch does; set by
# _measure from --torch22-mean for the model it builds.
_TORCH22_MEAN = [False]


class RMSNorm(nn.Module):
    def __init__(self, h, eps=1e-6, gemma=False):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(h) if gemma else torch.ones(h))
        self.eps, self.gemma = eps, gemma

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        sq = x.pow(2)
        var = MeanKeepsNoInput.apply(sq) if _TORCH22_MEAN[0] else sq.mean(-1, keepdim=True)
        x = x * torch.rsqrt(var + self.eps)
        if self.gemma:
            return (x * (1.0 + self.weight.float())).to(dtype)
        return self.weight * x.to(dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Rotary(nn.Module):
    def __init__(self, dim, base=10000.0):
        super().__init__()
        self.dim = dim
        self.inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))

    def forward(self, s, dtype, device):
        t = torch.arange(s, device=device, dtype=torch.float32)
        freqs = torch.outer(t, self.inv_freq.to(device))
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype)[None, None], emb.sin().to(dtype)[None, None]


def attention_core_sinks(q, k, v, mask, sinks, dropout_p, training):
    """GPT-OSS's eager attention: a learned logit per head joins every row's softmax."""
    scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(q.shape[-1]) + mask
    b, h, s, _ = scores.shape
    combined = torch.cat([scores, sinks.reshape(1, -1, 1, 1).expand(b, -1, s, -1)], dim=-1)
    combined = combined - combined.max(dim=-1, keepdim=True).values
    probs = F.softmax(combined, dim=-1, dtype=combined.dtype)[..., :-1]
    probs = F.dropout(probs, p=dropout_p, training=training)
    return torch.matmul(probs, v)


def attention_core(q, k, v, mask, dropout_p, training, attn_impl, softcap=None):
    """softmax(q k^T / sqrt(d) + mask) v, eager (scores kept) or fused SDPA."""
    if attn_impl == "sdpa":
        return F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                              dropout_p=dropout_p if training else 0.0)
    scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(q.shape[-1])
    if softcap:  # Gemma-2: cap * tanh(scores / cap)
        scores = torch.tanh(scores / softcap) * softcap
    scores = scores + mask
    probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    probs = F.dropout(probs, p=dropout_p, training=training)
    return torch.matmul(probs, v)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        h, d = c["hidden"], c["head_dim"]
        self.nh, self.nkv, self.d = c["heads"], c["kv_heads"], d
        if c["arch"] == "llama":
            self.q_proj = nn.Linear(h, self.nh * d, bias=c["qkv_bias"])
            self.k_proj = nn.Linear(h, self.nkv * d, bias=c["qkv_bias"])
            self.v_proj = nn.Linear(h, self.nkv * d, bias=c["qkv_bias"])
        else:
            self.qkv = nn.Linear(h, 3 * h, bias=c["qkv_bias"])
        self.o_proj = nn.Linear(self.nh * d, h, bias=c["o_bias"])
        if c.get("sinks"):
            self.sinks = nn.Parameter(torch.zeros(self.nh))
        qk = c.get("qk_norm")
        if qk:
            gemma = c.get("gemma_norm", False)
            self.q_norm = RMSNorm(d if qk == "head" else self.nh * d, gemma=gemma)
            self.k_norm = RMSNorm(d if qk == "head" else self.nkv * d, gemma=gemma)
        if c["pos"] == "rotary":
            self.rot_dim = int(d * c.get("rotary_pct", 1.0))

    def forward(self, x, mask, rope, run):
        b, s, _ = x.shape
        c = self.c
        if c["arch"] == "llama" and c.get("qk_norm") == "head":  # Qwen3, Gemma-3
            q = self.q_norm(self.q_proj(x).view(b, s, self.nh, self.d)).transpose(1, 2)
            k = self.k_norm(self.k_proj(x).view(b, s, self.nkv, self.d)).transpose(1, 2)
            v = self.v_proj(x).view(b, s, self.nkv, self.d).transpose(1, 2)
        elif c["arch"] == "llama" and c.get("qk_norm") == "full":  # OLMo-2
            q = self.q_norm(self.q_proj(x)).view(b, s, self.nh, self.d).transpose(1, 2)
            k = self.k_norm(self.k_proj(x)).view(b, s, self.nkv, self.d).transpose(1, 2)
            v = self.v_proj(x).view(b, s, self.nkv, self.d).transpose(1, 2)
        elif c["arch"] == "llama":
            q = self.q_proj(x).view(b, s, self.nh, self.d).transpose(1, 2)
            k = self.k_proj(x).view(b, s, self.nkv, self.d).transpose(1, 2)
            v = self.v_proj(x).view(b, s, self.nkv, self.d).transpose(1, 2)
        elif c["arch"] == "gpt2":
            q, k, v = self.qkv(x).split(c["hidden"], dim=2)
            q = q.view(b, s, self.nh, self.d).transpose(1, 2)
            k = k.view(b, s, self.nh, self.d).transpose(1, 2)
            v = v.view(b, s, self.nh, self.d).transpose(1, 2)
        else:  # neox: interleaved per head [q|k|v]
            qkv = self.qkv(x).view(b, s, self.nh, 3 * self.d).permute(0, 2, 1, 3)
            q, k, v = qkv[..., : self.d], qkv[..., self.d: 2 * self.d], qkv[..., 2 * self.d:]
        if c["pos"] == "rotary":
            cos, sin = rope
            if self.rot_dim == self.d:
                q = q * cos + rotate_half(q) * sin
                k = k * cos + rotate_half(k) * sin
            else:
                r = self.rot_dim
                qr, qp = q[..., :r], q[..., r:]
                kr, kp = k[..., :r], k[..., r:]
                q = torch.cat((qr * cos + rotate_half(qr) * sin, qp), dim=-1)
                k = torch.cat((kr * cos + rotate_half(kr) * sin, kp), dim=-1)
        if self.nkv != self.nh:  # repeat_kv
            rep = self.nh // self.nkv
            k = k[:, :, None].expand(b, self.nkv, rep, s, self.d).reshape(b, self.nh, s, self.d)
            v = v[:, :, None].expand(b, self.nkv, rep, s, self.d).reshape(b, self.nh, s, self.d)
        p = c["attn_dropout"] if run["dropout"] else 0.0
        cap = c.get("softcap")
        if c.get("sinks"):
            if run["recompute"] == "selective":
                o = ckpt.checkpoint(attention_core_sinks, q, k, v, mask, self.sinks, p, self.training)
            else:
                o = attention_core_sinks(q, k, v, mask, self.sinks, p, self.training)
        elif run["recompute"] == "selective":
            o = ckpt.checkpoint(attention_core, q, k, v, mask, p, self.training, run["attn"], cap)
        else:
            o = attention_core(q, k, v, mask, p, self.training, run["attn"], cap)
        o = o.transpose(1, 2).contiguous().view(b, s, self.nh * self.d)
        return self.o_proj(o)


class MlaAttention(nn.Module):
    """DeepSeek-V2/V3 multi-head latent attention, as transformers' eager DeepseekV3Attention."""

    def __init__(self, c):
        super().__init__()
        self.c, m = c, c["mla"]
        h, self.nh = c["hidden"], c["heads"]
        self.nope, self.rope, self.v, self.kl = m["nope"], m["rope"], m["v"], m["kv_lora"]
        self.qk = self.nope + self.rope
        if m["q_lora"]:
            self.q_a_proj = nn.Linear(h, m["q_lora"], bias=False)
            self.q_a_layernorm = RMSNorm(m["q_lora"])
            self.q_b_proj = nn.Linear(m["q_lora"], self.nh * self.qk, bias=False)
        else:
            self.q_proj = nn.Linear(h, self.nh * self.qk, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(h, self.kl + self.rope, bias=False)
        self.kv_a_layernorm = RMSNorm(self.kl)
        self.kv_b_proj = nn.Linear(self.kl, self.nh * (self.nope + self.v), bias=False)
        self.o_proj = nn.Linear(self.nh * self.v, h, bias=False)

    def forward(self, x, mask, rope, run):
        b, s, _ = x.shape
        if hasattr(self, "q_proj"):
            q = self.q_proj(x)
        else:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(b, s, self.nh, self.qk).transpose(1, 2)
        q_pass, q_rot = torch.split(q, [self.nope, self.rope], dim=-1)
        ckv = self.kv_a_proj_with_mqa(x)
        k_pass, k_rot = torch.split(ckv, [self.kl, self.rope], dim=-1)
        k_pass = self.kv_b_proj(self.kv_a_layernorm(k_pass)).view(b, s, self.nh, self.nope + self.v)
        k_pass = k_pass.transpose(1, 2)
        k_pass, v = torch.split(k_pass, [self.nope, self.v], dim=-1)
        k_rot = k_rot.view(b, 1, s, self.rope)
        cos, sin = rope
        q_rot = q_rot * cos + rotate_half(q_rot) * sin
        k_rot = k_rot * cos + rotate_half(k_rot) * sin
        k_rot = k_rot.expand(*k_pass.shape[:-1], -1)
        q = torch.cat((q_pass, q_rot), dim=-1)
        k = torch.cat((k_pass, k_rot), dim=-1)
        p = self.c["attn_dropout"] if run["dropout"] else 0.0
        if run["recompute"] == "selective":
            o = ckpt.checkpoint(attention_core, q, k, v, mask, p, self.training, run["attn"])
        else:
            o = attention_core(q, k, v, mask, p, self.training, run["attn"])
        o = o.transpose(1, 2).contiguous().view(b, s, self.nh * self.v)
        return self.o_proj(o)


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, f, bias = c["hidden"], c["ffn"], c["mlp_bias"]
        self.gated = c["gated"]
        self.act = act_fn(c["act"])
        if self.gated:
            self.gate_proj = nn.Linear(h, f, bias=bias)
        self.up_proj = nn.Linear(h, f, bias=bias)
        self.down_proj = nn.Linear(f, h, bias=bias)

    def forward(self, x):
        if self.gated:
            return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))
        return self.down_proj(self.act(self.up_proj(x)))


class SparseMoe(nn.Module):
    """Mixtral's / Qwen3-MoE's eager block: softmax router, top-k, a loop over the experts that
    gathers each one's tokens and index_adds its weighted output (transformers v4.4x-4.5x)."""

    def __init__(self, c):
        super().__init__()
        self.k, self.norm_topk = c["top_k"], c["norm_topk"]
        self.gate = nn.Linear(c["hidden"], c["experts"], bias=False)
        self.experts = nn.ModuleList(Mlp(dict(c, ffn=c["expert_ffn"], mlp_bias=False))
                                     for _ in range(c["experts"]))
        # DeepSeek: one ungated shared MLP of moe_intermediate_size x n_shared_experts.
        self.shared = (Mlp(dict(c, ffn=c["expert_ffn"] * c["shared"], mlp_bias=False))
                       if c.get("shared") else None)

    def forward(self, x):
        b, s, h = x.shape
        residual = x
        x = x.view(-1, h)
        logits = self.gate(x)
        w = F.softmax(logits, dim=1, dtype=torch.float)
        w, chosen = torch.topk(w, self.k, dim=-1)
        if self.norm_topk:
            w = w / w.sum(dim=-1, keepdim=True)
        w = w.to(x.dtype)
        out = torch.zeros((b * s, h), dtype=x.dtype, device=x.device)
        mask = F.one_hot(chosen, num_classes=len(self.experts)).permute(2, 1, 0)
        for e, expert in enumerate(self.experts):
            idx, top_x = torch.where(mask[e])
            y = expert(x[None, top_x].reshape(-1, h)) * w[top_x, idx, None]
            out.index_add_(0, top_x, y.to(x.dtype))
        out = out.view(b, s, h)
        if self.shared is not None:
            out = out + self.shared(residual)
        return out


class GptOssMoe(nn.Module):
    """transformers' GptOssMLP on CPU / in training: a router with a bias, softmax over the
    top-k logits, experts with biases and a clamped SwiGLU, looped over the experts hit."""

    def __init__(self, c):
        super().__init__()
        h, f, e = c["hidden"], c["expert_ffn"], c["experts"]
        self.k = c["top_k"]
        self.router = nn.Linear(h, e, bias=True)
        self.gate_up_proj = nn.Parameter(torch.randn(e, h, 2 * f) * 0.02)
        self.gate_up_proj_bias = nn.Parameter(torch.zeros(e, 2 * f))
        self.down_proj = nn.Parameter(torch.randn(e, f, h) * 0.02)
        self.down_proj_bias = nn.Parameter(torch.zeros(e, h))
        self.alpha, self.limit = 1.702, 7.0

    def forward(self, x):
        b, s, h = x.shape
        x = x.reshape(-1, h)
        logits = self.router(x)
        top, chosen = torch.topk(logits, self.k, dim=-1)
        top = F.softmax(top, dim=1, dtype=top.dtype)
        scores = torch.zeros_like(logits).scatter_(1, chosen, top)
        out = torch.zeros_like(x)
        with torch.no_grad():
            mask = F.one_hot(chosen, num_classes=scores.shape[1]).permute(2, 1, 0)
            hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
        for e in hit[:]:
            e = e[0]
            with torch.no_grad():
                _, tok = torch.where(mask[e])
            cur = x[tok]
            gate_up = cur @ self.gate_up_proj[e] + self.gate_up_proj_bias[e]
            gate, up = gate_up[..., ::2], gate_up[..., 1::2]
            gate = gate.clamp(min=None, max=self.limit)
            up = up.clamp(min=-self.limit, max=self.limit)
            glu = gate * torch.sigmoid(gate * self.alpha)
            y = ((up + 1) * glu) @ self.down_proj[e] + self.down_proj_bias[e]
            out.index_add_(0, tok, (y * scores[tok, e, None]).to(x.dtype))
        return out.view(b, s, h)


class Block(nn.Module):
    def __init__(self, c, layer=0):
        super().__init__()
        self.c = c
        norm = (lambda: RMSNorm(c["hidden"], gemma=c.get("gemma_norm", False))) if c["norm"] == "rms" \
            else (lambda: nn.LayerNorm(c["hidden"]))
        self.ln1, self.ln2 = norm(), norm()
        if c.get("norms") == "sandwich":  # post_attention_layernorm, post_feedforward_layernorm
            self.ln3, self.ln4 = norm(), norm()
        self.attn = MlaAttention(c) if c.get("mla") else Attention(c)
        sparse = layer in c.get("moe_layers", ())
        self.mlp = (GptOssMoe(c) if c.get("gpt_oss_moe") else SparseMoe(c)) if sparse else Mlp(c)

    def forward(self, x, mask, rope, run):
        p = self.c["hidden_dropout"] if run["dropout"] else 0.0
        if self.c.get("norms") == "post":  # OLMo-2: x + norm(sublayer(x))
            x = x + self.ln1(self.attn(x, mask, rope, run))
            return x + self.ln2(self.mlp(x))
        if self.c.get("norms") == "sandwich":  # Gemma-2/3: x + post(sublayer(pre(x)))
            x = x + self.ln3(self.attn(self.ln1(x), mask, rope, run))
            return x + self.ln4(self.mlp(self.ln2(x)))
        if self.c["parallel"]:
            a = F.dropout(self.attn(self.ln1(x), mask, rope, run), p, self.training)
            m = F.dropout(self.mlp(self.ln2(x)), p, self.training)
            return x + a + m
        x = x + F.dropout(self.attn(self.ln1(x), mask, rope, run), p, self.training)
        return x + F.dropout(self.mlp(self.ln2(x)), p, self.training)


def _autocast_block(blk, dtype, x, mask, rope, run):
    with torch.autocast(device_type=x.device.type, dtype=dtype):
        return blk(x, mask, rope, run)


class Decoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed = nn.Embedding(c["vocab"], c["hidden"])
        if c["pos"] == "learned":
            self.pos = nn.Embedding(c["max_pos"], c["hidden"])
        if c["pos"] == "rotary":
            # Computed once per forward and shared by the layers (HuggingFace >= 4.45).
            rot = c["mla"]["rope"] if c.get("mla") else int(c["head_dim"] * c.get("rotary_pct", 1.0))
            self.rotary = Rotary(rot)
        self.blocks = nn.ModuleList(Block(c, i) for i in range(c["layers"]))
        self.norm = RMSNorm(c["hidden"], gemma=c.get("gemma_norm", False)) if c["norm"] == "rms" \
            else nn.LayerNorm(c["hidden"])
        self.lm_head = nn.Linear(c["hidden"], c["vocab"], bias=False)
        if c["tied"]:
            self.lm_head.weight = self.embed.weight

    def forward(self, ids, run):
        b, s = ids.shape
        x = self.embed(ids)
        if self.c.get("embed_scale"):
            x = x * torch.tensor(self.c["hidden"] ** 0.5, dtype=x.dtype)
        if self.c["pos"] == "learned":
            x = x + self.pos(torch.arange(s, device=ids.device))[None]
        if run["dropout"] and self.c.get("embd_dropout"):
            x = F.dropout(x, self.c["embd_dropout"], self.training)
        mask = torch.full((s, s), torch.finfo(x.dtype).min, device=ids.device, dtype=x.dtype).triu(1)[None, None]
        rope = self.rotary(s, x.dtype, ids.device) if self.c["pos"] == "rotary" else None
        for i, blk in enumerate(self.blocks):
            # Every Nth block (1-based) is checkpointed, as torchtitan's layer-wise AC wraps
            # them (selective_ac_option = "N"); N = 1: every block.
            every = run.get("recompute_every", 1)
            if run["recompute"] == "full" and (i + 1) % every != 0:
                x = blk(x, mask, rope, run)
            elif run["recompute"] == "full" and run.get("autocast_in_recompute"):
                # As on CUDA, where checkpoint re-enters the forward's autocast to recompute
                # (torch 1.13 restores CUDA autocast only; on CPU the recompute would run
                # without it). Used for the fine-tuning cases.
                x = ckpt.checkpoint(_autocast_block, blk, run["autocast_in_recompute"], x, mask,
                                    rope, run)
            elif run["recompute"] == "full":
                x = ckpt.checkpoint(blk, x, mask, rope, run)
            else:
                x = blk(x, mask, rope, run)
        logits = self.lm_head(self.norm(x))
        if self.c.get("final_softcap"):  # Gemma-2: cap * tanh(logits / cap)
            cap = self.c["final_softcap"]
            logits = torch.tanh(logits / cap) * cap
        if logits.requires_grad:
            logits.register_hook(mark_phase("backward"))
        return logits


# ----------------------------------------------------------------------------------------------
# Fine-tuning: LoRA adapters as PEFT's LoraLayer runs them, and a 4-bit NF4 linear with the
# memory behaviour of bitsandbytes' Linear4bit (no library needed on CPU).

# The 16 NF4 levels: quantiles of N(0, 1) normalised to [-1, 1] (Dettmers et al., "QLoRA",
# 2023, appendix E).
NF4_LEVELS = (-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
              -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
              0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
              0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0)
NF4_BLOCK = 64        # values per absmax (bitsandbytes' default blocksize for 4-bit)
NF4_BLOCK2 = 256      # absmax values per second-level fp32 absmax (double quantisation)


class _Nf4MatMul(torch.autograd.Function):
    """x @ dequant(W)^T. Like bitsandbytes' MatMul4Bit: forward and backward each dequantise
    the whole weight into a transient of the compute dtype, and the input is kept whenever it
    needs a gradient (MatMul4Bit's `ctx.tensors = (A, B)`), though the frozen weight needs
    none."""

    @staticmethod
    def forward(ctx, x, layer):
        ctx.layer = layer
        ctx.tensors = (x,) if ctx.needs_input_grad[0] else (None,)
        return F.linear(x, layer.dequantize(x.dtype))

    @staticmethod
    def backward(ctx, grad):
        return grad @ ctx.layer.dequantize(grad.dtype), None


class Nf4Linear(nn.Module):
    """A frozen linear layer stored as packed 4-bit NF4 codes with blockwise absmax scales:
    uint8 absmax per 64 values plus an fp32 scale and offset per 256 blocks with double
    quantisation, fp32 absmax per block without. Inputs are cast to the compute dtype and the
    output back to the input's dtype (Linear4bit's forward)."""

    def __init__(self, linear, compute_dtype, double_quant=True):
        super().__init__()
        w = linear.weight.detach().float().reshape(-1)
        self.shape, self.compute_dtype, self.double = tuple(linear.weight.shape), compute_dtype, double_quant
        n = w.numel()
        assert n % NF4_BLOCK == 0, "NF4 needs a multiple of 64 values"
        blocks = w.view(-1, NF4_BLOCK)
        absmax = blocks.abs().amax(dim=1).clamp(min=1e-12)
        levels = torch.tensor(NF4_LEVELS)
        codes = (blocks / absmax[:, None]).unsqueeze(-1).sub(levels).abs().argmin(dim=-1).to(torch.uint8)
        codes = codes.view(-1)
        self.register_buffer("packed", (codes[0::2] << 4 | codes[1::2]).contiguous())
        self.register_buffer("levels", levels)
        if double_quant:
            pad = (-absmax.numel()) % NF4_BLOCK2
            a = torch.cat([absmax, absmax.new_zeros(pad)]).view(-1, NF4_BLOCK2)
            offset = a.mean(dim=1, keepdim=True)
            scale = (a - offset).abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127.0
            q = torch.round((a - offset) / scale).clamp(-127, 127).to(torch.int8)
            self.register_buffer("absmax_q", q.view(-1)[: absmax.numel()].contiguous())
            self.register_buffer("absmax_scale", scale.view(-1).contiguous())
            self.register_buffer("absmax_offset", offset.view(-1).contiguous())
        else:
            self.register_buffer("absmax", absmax.contiguous())
        self.bias = linear.bias

    def dequantize(self, dtype):
        # Written straight into one weight-sized tensor of `dtype`, a few blocks at a time, as
        # bitsandbytes' kernel does (its only allocation is the output).
        with torch.no_grad():
            out = torch.empty(self.shape, dtype=dtype, device=self.packed.device)
            flat = out.view(-1, NF4_BLOCK)
            step = 16  # blocks per chunk: 1024 values, a few KiB of temporaries
            for b0 in range(0, flat.shape[0], step):
                b1 = min(b0 + step, flat.shape[0])
                packed = self.packed[b0 * NF4_BLOCK // 2: b1 * NF4_BLOCK // 2]
                codes = torch.stack([packed >> 4, packed & 15], dim=1).view(-1).long()
                if self.double:
                    blk = torch.arange(b0, b1, device=packed.device) // NF4_BLOCK2
                    absmax = self.absmax_q[b0:b1].float() * self.absmax_scale[blk] + self.absmax_offset[blk]
                else:
                    absmax = self.absmax[b0:b1]
                flat[b0:b1] = (self.levels[codes].view(-1, NF4_BLOCK) * absmax[:, None]).to(dtype)
            return out

    def forward(self, x):
        out = _Nf4MatMul.apply(x.to(self.compute_dtype), self)
        if self.bias is not None:
            out = out + self.bias.to(out.dtype)
        return out.to(x.dtype)


class LoraLinear(nn.Module):
    """PEFT's lora.Linear: base(x) + lora_B(lora_A(dropout(x.to(A's dtype)))) * alpha / r, in
    the base output's dtype, with the base frozen; the adapters are fp32 (get_peft_model's
    autocast_adapter_dtype)."""

    def __init__(self, base, rank, alpha, dropout):
        super().__init__()
        self.base_layer = base
        fin = base.shape[1] if isinstance(base, Nf4Linear) else base.in_features
        fout = base.shape[0] if isinstance(base, Nf4Linear) else base.out_features
        dev = next(iter(base.buffers() if isinstance(base, Nf4Linear) else base.parameters())).device
        self.lora_A = nn.Linear(fin, rank, bias=False, device=dev)
        self.lora_B = nn.Linear(rank, fout, bias=False, device=dev)
        nn.init.normal_(self.lora_B.weight, std=0.02)  # nonzero, so that every gradient flows
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.scaling = alpha / rank

    def forward(self, x):
        result = self.base_layer(x)
        dtype = result.dtype
        x = x.to(self.lora_A.weight.dtype)
        # The sum is in the wider dtype (fp32 adapters over a 16-bit base), cast back to the
        # base's as PEFT's Linear.forward ends (`result.to(torch_result_dtype)`).
        return (result + self.lora_B(self.lora_A(self.dropout(x))) * self.scaling).to(dtype)


LORA_TARGETS = {
    "attention": ("q_proj", "k_proj", "v_proj", "qkv", "o_proj"),
    "all-linear": ("q_proj", "k_proj", "v_proj", "qkv", "o_proj", "gate_proj", "up_proj", "down_proj"),
}


def apply_finetune(model, finetune, rank, alpha, dropout, targets, compute_dtype, double_quant,
                   adapter_dtype=torch.float32):
    """Freezes the model and wraps the targeted linear layers (by name, as PEFT matches them)
    with adapters; with qlora the layers' linear weights become NF4 first and every other
    parameter is upcast to fp32, as peft.prepare_model_for_kbit_training does. The adapters are
    `adapter_dtype` (PEFT's fp32, or 16-bit where a script casts them, as fsdp_qlora's casts
    the whole model). Returns the trainable parameters."""
    names = tuple(n for word in targets.split(",") for n in LORA_TARGETS.get(word, (word,)))
    for p in model.parameters():
        p.requires_grad_(False)
    for blk in model.blocks:
        for parent in list(blk.modules()):
            for name, child in list(parent.named_children()):
                if not isinstance(child, nn.Linear):
                    continue
                base = child
                if finetune == "qlora":
                    base = Nf4Linear(child, compute_dtype, double_quant)
                if name in names:
                    base = LoraLinear(base, rank, alpha, dropout)
                setattr(parent, name, base)
    if "lm_head" in names:
        # The output layer adapted too (PEFT's target_modules with "lm_head", litgpt's
        # lora_head); bitsandbytes leaves the head unquantised.
        model.lm_head = LoraLinear(model.lm_head, rank, alpha, dropout)
    if finetune == "qlora":
        for p in model.parameters():
            if p.dtype in (torch.float16, torch.bfloat16):
                p.data = p.data.float()
    trainable = [p for n, p in model.named_parameters() if "lora_" in n]
    for p in trainable:
        p.data = p.data.to(adapter_dtype)
        p.requires_grad_(True)
    return trainable


def make_optimizer(name, params):
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, foreach=False)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-4, foreach=False)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3, foreach=False)
    if name == "sgdm":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=False)
    raise SystemExit(f"measure_memory.py: optimizer {name!r} is not supported here")


def tensor_bytes(tensors):
    seen, total = set(), 0
    for t in tensors:
        st = t.storage()
        key = (st.data_ptr(), st.size())
        if key not in seen:
            seen.add(key)
            total += st.size() * t.element_size()
    return total


def write_alloc_events(prof, path):
    """The profiled allocations and frees in the order they ran, as Frenzy's StepEvent lines:
    `BYTES -1` allocates (its index is its line number, from 0), `0 I` frees the allocation on
    line I. A free is paired with the last live allocation at its address; frees of blocks
    allocated before the profile began (the states the step replaces) are left out, as are
    allocations still alive at its end. Returns the number of lines written."""
    def walk(events, out):
        for e in events:
            out.append(e)
            walk(e.children, out)
    nodes = []
    walk(prof.profiler.kineto_results.experimental_event_tree(), nodes)
    allocs = sorted((e.start_time_ns, i, e.extra_fields) for i, e in enumerate(nodes)
                    if type(e.extra_fields).__name__.endswith("Allocation"))
    events, live = [], {}  # (bytes, index of the allocation freed)
    for _, _, f in allocs:
        if f.alloc_size > 0:
            live[f.ptr] = len(events)
            events.append((f.alloc_size, -1))
        elif f.alloc_size < 0 and f.ptr in live:
            events.append((0, live.pop(f.ptr)))
    kept = set(live.values())  # still alive at the end: left out, as said
    index, lines = {}, []
    for i, (n, of) in enumerate(events):
        if i in kept:
            continue
        index[i] = len(lines)
        lines.append(f"{n} -1" if of < 0 else f"0 {index[of]}")
    with open(path, "w") as out:
        out.write("".join(x + "\n" for x in lines))
    return len(lines)


def causal_loss(logits, labels, V, hf_loss="padded"):
    """The loop's logits and the loss, as transformers' causal LMs compute it. padded (4.49 on):
    cross entropy over an fp32 copy of all positions. sliced-loss (4.46-4.48): the fp32 copy
    sliced one position short and made contiguous (the labels shifted to match). sliced-model
    (before 4.46): the model returns `logits.float()`, which the loop keeps, and the loss
    slices that."""
    if hf_loss == "padded":
        return logits, F.cross_entropy(logits.view(-1, V).float(), labels.view(-1))
    if hf_loss == "sliced-model":
        logits = logits.float()
        upcast = logits
    else:
        upcast = logits.float()
    shifted = upcast[..., :-1, :].contiguous()
    return logits, F.cross_entropy(shifted.view(-1, V), labels[..., 1:].contiguous().view(-1))


def measure(doc, micro_batch=1, seq_len=128, precision="fp32", optimizer="adamw", recompute="none",
            attn="eager", dropout="on", steps=3, device=None, seed=0, finetune="full", lora_rank=8,
            lora_alpha=16.0, lora_dropout=0.0, lora_targets="all-linear", double_quant=True,
            recompute_every=1, keep_grads=False, accum=1, drop_logits=False, lengths=None,
            hf_loss="padded", lora_dtype="fp32", torch22_mean=False):
    """Builds the model of config `doc`, trains `steps` steps and returns the measured peak.
    With `lengths` (CUDA only): one step per entry, each batch that many tokens long (an epoch
    of batches of varying length, in that order), and the readings over all of them."""
    args = argparse.Namespace(micro_batch=micro_batch, seq_len=seq_len, precision=precision,
                              optimizer=optimizer, recompute=recompute, attn=attn, dropout=dropout,
                              steps=steps, seed=seed, finetune=finetune, lora_rank=lora_rank,
                              lora_alpha=lora_alpha, lora_dropout=lora_dropout,
                              lora_targets=lora_targets, double_quant=double_quant,
                              recompute_every=recompute_every, keep_grads=keep_grads,
                              accum=accum, drop_logits=drop_logits, hf_loss=hf_loss,
                              lora_dtype=lora_dtype, torch22_mean=torch22_mean,
                              device=device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if lengths:
        return _measure_epoch(parse_config(doc), args, lengths)
    return _measure(parse_config(doc), args)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16", "bf16-pure"])
    ap.add_argument("--optimizer", default="adamw")
    ap.add_argument("--recompute", default="none", choices=["none", "selective", "full"])
    ap.add_argument("--recompute-every", type=int, default=1,
                    help="with --recompute full: checkpoint every Nth block only")
    ap.add_argument("--attn", default="eager", choices=["eager", "sdpa"])
    ap.add_argument("--dropout", default="on", choices=["on", "off"])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--finetune", default="full", choices=["full", "lora", "qlora"])
    ap.add_argument("--lora-rank", type=int, default=8)
    ap.add_argument("--lora-alpha", type=float, default=16.0)
    ap.add_argument("--lora-dropout", type=float, default=0.0)
    ap.add_argument("--lora-dtype", default="fp32", choices=["fp32", "bf16"],
                    help="the adapters' dtype: PEFT's fp32, or bf16 as scripts that cast the "
                         "model after get_peft_model have it")
    ap.add_argument("--lora-targets", default="all-linear",
                    help="attention, all-linear, or module names (q_proj,v_proj,...); lm_head adapts the output layer too")
    ap.add_argument("--no-double-quant", dest="double_quant", action="store_false")
    ap.add_argument("--keep-grads", action="store_true",
                    help="zero_grad(set_to_none=False), PyTorch < 2.0's default: gradients stay "
                         "allocated between steps")
    ap.add_argument("--accum", type=int, default=1,
                    help="gradient accumulation: micro-batches per optimizer step")
    ap.add_argument("--drop-logits", action="store_true",
                    help="the loop keeps only the loss when backward starts (HF Trainer, torchtune)")
    ap.add_argument("--hf-loss", default="padded",
                    choices=["padded", "sliced-loss", "sliced-model"],
                    help="the causal-LM loss as transformers computes it: padded labels (4.49 "
                         "on), an fp32 copy sliced one position short (4.46-4.48), or fp32 "
                         "logits from the model, kept, then sliced (before 4.46)")
    ap.add_argument("--events-out", metavar="FILE",
                    help="CPU: write the measured step's allocations and frees, in order, to FILE "
                         "(one line per event: `BYTES -1` allocates, `0 I` frees event I), for "
                         "replays through Frenzy's caching-allocator model (bench/alloc_replay.cc)")
    ap.add_argument("--lengths", metavar="L,L,...",
                    help="an epoch of one batch per length, in order (CUDA: its readings; CPU: "
                         "with --events-out, the epoch's events)")
    ap.add_argument("--torch22-mean", action="store_true",
                    help="RMSNorm's mean keeps no input for backward, as from PyTorch 2.2")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with open(args.config) as f:
        c = parse_config(json.load(f))
    if args.lengths:
        result = _measure_epoch(c, args, [int(x) for x in args.lengths.split(",")])
    else:
        args.lengths = None
        result = _measure(c, args)
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:>24}: {v}")


def _measure_epoch(c, args, lengths):
    """An epoch of batches of `lengths` tokens, in order (CUDA): what max_memory_allocated and
    max_memory_reserved read over all of it (the caching allocator keeps every segment a longer
    batch added), beside the fixed-length reading of the longest batch."""
    if args.device != "cuda" and not getattr(args, "events_out", None):
        raise SystemExit("measure_memory.py: an epoch of varying lengths needs CUDA (or, on "
                         "a CPU, --events-out)")
    args.seq_len = max(lengths)
    args.lengths = list(lengths)
    args.steps = len(lengths)
    return _measure(c, args)


def _measure(c, args):
    if args.attn == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
        raise SystemExit("measure_memory.py: --attn sdpa needs PyTorch >= 2.0")
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    _TORCH22_MEAN[0] = getattr(args, "torch22_mean", False)
    model = Decoder(c).to(dev)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    finetune = getattr(args, "finetune", "full")
    if args.precision == "bf16-pure" or (finetune == "lora" and amp_dtype is not None):
        # Pure bf16; or LoRA on a base loaded in the 16-bit compute dtype (torch_dtype=...).
        model = model.to(amp_dtype or torch.bfloat16)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    if finetune == "full":
        params = [p for p in model.parameters()]
    else:
        compute = amp_dtype or (torch.bfloat16 if args.precision == "bf16-pure" else torch.float32)
        adapter = torch.bfloat16 if getattr(args, "lora_dtype", "fp32") == "bf16" else torch.float32
        params = apply_finetune(model, finetune, args.lora_rank, args.lora_alpha, args.lora_dropout,
                                args.lora_targets, compute, args.double_quant, adapter)
        # The embeddings' output requires grad, as PEFT arranges (enable_input_require_grads).
        model.embed.register_forward_hook(lambda mod, inp, out: out.requires_grad_(True))
        # Base, adapters and the 4-bit weights (buffers, no longer parameters).
        n_params = sum(p.numel() for p in model.parameters()) + sum(
            math.prod(m.shape) for m in model.modules() if isinstance(m, Nf4Linear))
    opt = make_optimizer(args.optimizer, params)
    run = {"recompute": args.recompute, "attn": args.attn, "dropout": args.dropout == "on",
           "recompute_every": max(1, getattr(args, "recompute_every", 1)),
           "autocast_in_recompute": amp_dtype if finetune != "full" else None}
    scaler = torch.cuda.amp.GradScaler() if args.precision == "fp16" else None
    b, s, V = args.micro_batch, args.seq_len, c["vocab"]
    gen = torch.Generator().manual_seed(args.seed)

    def batch(length):
        ids = torch.randint(0, V, (b, length + 1), generator=gen).to(dev)
        return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()

    inputs, labels = batch(s)

    saved = {"bytes": 0}
    param_storages = {p.storage().data_ptr() for p in list(model.parameters()) + list(model.buffers())}

    def step(count_saved=False):
        seen = set()

        def pack(t):
            # Activations saved for backward: unique storages that are not parameters (a
            # linear layer saves a transposed view of its weight, which costs nothing).
            if count_saved:
                st = t.storage()
                key = (st.data_ptr(), st.size())
                if key not in seen and st.data_ptr() not in param_storages:
                    seen.add(key)
                    saved["bytes"] += st.size() * t.element_size()
            return t

        # Gradient accumulation: `accum` micro-batches, each forward and backward, before the
        # optimizer step; the gradients of the first stay allocated while the next run.
        for micro in range(accum):
            with record_function("phase:forward"):
                with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                    # The model's output is handed over, not held here: before 4.46 its
                    # 16-bit logits die as the fp32 copy replaces them.
                    out = []
                    if amp_dtype is not None:
                        with torch.autocast(device_type=dev.type, dtype=amp_dtype):
                            out.append(model(inputs, run))
                    else:
                        out.append(model(inputs, run))
                    logits, loss = causal_loss(out.pop(), labels, V, hf_loss)
                    loss = loss / accum
            count_saved = False  # saved bytes are one micro-batch's
            if drop_logits:
                # The loop keeps the loss alone (the HF Trainer's compute_loss, torchtune's
                # `del logits`): the logits go before backward.
                del logits
                logits = None
            with record_function("phase:loss"):  # until the logits' gradient marks "backward"
                if scaler is not None:
                    scaler.scale(loss).backward()
                else:
                    loss.backward()
            del logits
        with record_function("phase:optimizer"):
            if scaler is not None:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            opt.zero_grad(set_to_none=not keep_grads)
        return loss

    keep_grads = getattr(args, "keep_grads", False)
    hf_loss = getattr(args, "hf_loss", "padded")
    accum = max(1, getattr(args, "accum", 1))
    drop_logits = getattr(args, "drop_logits", False)
    if getattr(args, "lengths", None) and dev.type != "cuda":
        # CPU: the epoch's allocation events (a warm-up step first: the optimizer's states).
        del inputs, labels
        inputs, labels = batch(args.lengths[0])
        step()
        del inputs, labels
        from torch.profiler import profile, ProfilerActivity
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            for length in args.lengths:
                inputs, labels = batch(length)
                step()
                del inputs, labels
        n = write_alloc_events(prof, args.events_out)
        return {"params": n_params, "epoch_batches": len(args.lengths), "events": n}
    if getattr(args, "lengths", None):
        # One step per batch length, in order; the readings cover the whole epoch.
        del inputs, labels
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        for length in args.lengths:
            inputs, labels = batch(length)
            step()
            del inputs, labels
        torch.cuda.synchronize()
        return {"params": n_params, "epoch_batches": len(args.lengths),
                "epoch_peak_bytes": torch.cuda.max_memory_allocated(),
                "epoch_reserved_bytes": torch.cuda.max_memory_reserved(),
                "gpu": torch.cuda.get_device_name()}
    for _ in range(max(0, args.steps - 1)):
        step()
    state_tensors = list(model.parameters()) + list(model.buffers())
    # Kept gradients are held at the step's start, like the parameters.
    state_tensors += [p.grad for p in params if p.grad is not None]
    for st in opt.state.values():
        state_tensors += [v for v in st.values() if torch.is_tensor(v)]
    baseline = tensor_bytes(state_tensors)
    result = {"params": n_params, "trainable_params": sum(p.numel() for p in params),
              "baseline_bytes": baseline}
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base_alloc = torch.cuda.memory_allocated()
        step(count_saved=True)
        torch.cuda.synchronize()
        result.update(peak_bytes=torch.cuda.max_memory_allocated(),
                      peak_reserved_bytes=torch.cuda.max_memory_reserved(),
                      allocated_before_step=base_alloc,
                      gpu=torch.cuda.get_device_name())
    else:
        from torch.profiler import profile, ProfilerActivity
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            step(count_saved=True)
        if getattr(args, "events_out", None):
            result["events"] = write_alloc_events(prof, args.events_out)
        all_events = list(prof.profiler.kineto_results.events())
        events = [(e.start_us(), e.nbytes()) for e in all_events if e.name() == "[memory]"]
        phases = sorted((e.start_us(), e.name()[6:]) for e in all_events
                        if e.name().startswith("phase:"))
        cur = peak = 0
        peak_t = 0
        for t, n in events:  # in the order recorded
            cur += n
            if cur > peak:
                peak, peak_t = cur, t
        phase = "forward"
        for t, name in phases:
            if t <= peak_t:
                phase = name
        result.update(peak_bytes=baseline + peak, peak_reserved_bytes=None, peak_phase=phase)
    result["saved_activation_bytes"] = saved["bytes"]
    result.update(model_type=c["model_type"], micro_batch=b, seq_len=s, precision=args.precision,
                  optimizer=args.optimizer, recompute=args.recompute, attn=args.attn,
                  dropout=args.dropout, device=dev.type, torch=torch.__version__, finetune=finetune,
                  keep_grads=keep_grads, accum=accum, drop_logits=drop_logits, hf_loss=hf_loss)
    return result


if __name__ == "__main__":
    sys.exit(main())
