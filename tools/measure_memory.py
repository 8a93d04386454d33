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
      [--recompute none|selective|full] [--attn eager|sdpa] [--steps 3] [--device cpu|cuda]
      [--dropout on|off] [--json]

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


class RMSNorm(nn.Module):
    def __init__(self, h, eps=1e-6, gemma=False):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(h) if gemma else torch.ones(h))
        self.eps, self.gemma = eps, gemma

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        var = x.pow(2).mean(-1, keepdim=True)
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
        for blk in self.blocks:
            if run["recompute"] == "full":
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


def measure(doc, micro_batch=1, seq_len=128, precision="fp32", optimizer="adamw", recompute="none",
            attn="eager", dropout="on", steps=3, device=None, seed=0):
    """Builds the model of config `doc`, trains `steps` steps and returns the measured peak."""
    args = argparse.Namespace(micro_batch=micro_batch, seq_len=seq_len, precision=precision,
                              optimizer=optimizer, recompute=recompute, attn=attn, dropout=dropout,
                              steps=steps, seed=seed,
                              device=device or ("cuda" if torch.cuda.is_available() else "cpu"))
    return _measure(parse_config(doc), args)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16", "bf16-pure"])
    ap.add_argument("--optimizer", default="adamw")
    ap.add_argument("--recompute", default="none", choices=["none", "selective", "full"])
    ap.add_argument("--attn", default="eager", choices=["eager", "sdpa"])
    ap.add_argument("--dropout", default="on", choices=["on", "off"])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with open(args.config) as f:
        c = parse_config(json.load(f))
    result = _measure(c, args)
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:>24}: {v}")


def _measure(c, args):
    if args.attn == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
        raise SystemExit("measure_memory.py: --attn sdpa needs PyTorch >= 2.0")
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    model = Decoder(c).to(dev)
    if args.precision == "bf16-pure":
        model = model.to(torch.bfloat16)
    model.train()
    params = [p for p in model.parameters()]
    n_params = sum(p.numel() for p in params)
    opt = make_optimizer(args.optimizer, params)
    run = {"recompute": args.recompute, "attn": args.attn, "dropout": args.dropout == "on"}
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    scaler = torch.cuda.amp.GradScaler() if args.precision == "fp16" else None
    b, s, V = args.micro_batch, args.seq_len, c["vocab"]
    gen = torch.Generator().manual_seed(args.seed)
    ids = torch.randint(0, V, (b, s + 1), generator=gen).to(dev)
    inputs, labels = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()

    saved = {"bytes": 0}
    param_storages = {p.storage().data_ptr() for p in params}

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

        with record_function("phase:forward"):
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                if amp_dtype is not None:
                    with torch.autocast(device_type=dev.type, dtype=amp_dtype):
                        logits = model(inputs, run)
                else:
                    logits = model(inputs, run)
                loss = F.cross_entropy(logits.view(-1, V).float(), labels.view(-1))
        with record_function("phase:loss"):  # until the logits' gradient marks "backward"
            if scaler is not None:
                scaler.scale(loss).backward()
            else:
                loss.backward()
        with record_function("phase:optimizer"):
            if scaler is not None:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(max(0, args.steps - 1)):
        step()
    state_tensors = list(params)
    for st in opt.state.values():
        state_tensors += [v for v in st.values() if torch.is_tensor(v)]
    baseline = tensor_bytes(state_tensors)
    result = {"params": n_params, "baseline_bytes": baseline}
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
                  dropout=args.dropout, device=dev.type, torch=torch.__version__)
    return result


if __name__ == "__main__":
    sys.exit(main())
