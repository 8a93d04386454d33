#!/usr/bin/python3
"""MARP's `--litgpt-model` layer account (and its HF GPT-NeoX account under a fused attention
kernel) against the tensors litgpt's own blocks keep for backward, counted by PyTorch itself.

Each case builds a few layers the way litgpt's GPT (lit_gpt/model.py, lora.py, rmsnorm.py of
late 2023) writes them: one fused q/k/v projection viewed into q, k and v, rotary embedding
by slicing and cat, GQA by expand and reshape, LoRAQKVLinear (dropout, A, a grouped conv1d
for B, zero_pad's index_copy into the fused width), lit-gpt's RMSNorm computed in the input's
dtype (2023) or upcast to fp32 (since 2024), the GPT-NeoX and LLaMA MLPs, parallel residuals with a shared or a second norm,
LoRALinear on the projection and the MLP layers where every linear layer is adapted, and
torch.mean as this PyTorch differentiates it or as 2.2 does (keeping no input). The
fused attention kernel is stood in for by an autograd function that keeps what PyTorch's
flash kernel keeps (q, k, v as handed over, its output allocated like q, the fp32 row
log-sum-exp); QLoRA's 4-bit layers by one that keeps its input, as bitsandbytes' MatMul4Bit
does; full fine-tuning trains every weight and norm, without adapters. Every tensor autograd saves is recorded through saved_tensors_hooks and counted once per
storage, weights and buffers left out; that is one layer's activations, which MARP predicts
from the architecture (`frenzy predict --device cpu`, the difference between 4 and 2 layers).

usage: litgpt_block_test.py FRENZY
"""
import json
import math
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from measure_memory import MeanKeepsNoInput  # noqa: E402  (torch.mean as PyTorch 2.2 keeps it)

DT = torch.bfloat16


class Flash(torch.autograd.Function):
    """What the fused kernel keeps: q, k, v, its output (laid out like q) and the fp32 lse."""

    @staticmethod
    def forward(ctx, q, k, v):
        s = torch.matmul(q.float(), k.float().transpose(-1, -2)) / math.sqrt(q.size(-1))
        t = q.size(-2)
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        lse = torch.logsumexp(s, -1)
        out = torch.matmul(torch.softmax(s, -1), v.float()).to(q.dtype).contiguous()
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, g):
        q, k, v, _, _ = ctx.saved_tensors
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)


class Keep(torch.autograd.Function):
    """A 4-bit linear layer (bitsandbytes' MatMul4Bit): keeps its input, frozen weight."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x)
        return F.linear(x, w)

    @staticmethod
    def backward(ctx, g):
        return None, None


def saved_per_layer(c):
    """Bytes litgpt's layers keep per layer per token, over hidden size."""
    h, nh, ng, hs, inter, T = c["h"], c["heads"], c["groups"], c["h"] // c["heads"], c["inter"], 64
    qpk = nh // ng
    rope_n = int(hs * c["rotary"])
    r, layers = 8, 2
    parts = [w for w, on in zip((h, ng * hs, ng * hs), c["enable"]) if on]
    full = c.get("full", False)
    frozen = (lambda x, w: Keep.apply(x, w)) if c["qlora"] else F.linear
    torch.manual_seed(0)
    wt = lambda o, i: torch.randn(o, i, dtype=DT) * 0.02  # noqa: E731
    cos, sin = torch.randn(T, rope_n, dtype=DT), torch.randn(T, rope_n, dtype=DT)
    total = (nh + 2 * ng) * hs
    ind = torch.arange(sum(parts))  # which columns zero_pad fills does not change its memory
    layer_w = []
    for _ in range(layers):
        d = dict(qkv=wt(total, h), proj=wt(h, h), n1=torch.ones(h, dtype=DT), n2=torch.ones(h, dtype=DT),
                 b1=torch.zeros(h, dtype=DT), b2=torch.zeros(h, dtype=DT),
                 A=(torch.randn(r * len(parts), h, dtype=DT) * 0.02).requires_grad_(),
                 B=torch.zeros(sum(parts), r, dtype=DT).requires_grad_())
        for name, (o, i) in {"proj": (h, h), "fc1": (inter, h), "fc2": (inter, h), "fc": (inter, h),
                             "mp": (h, inter)}.items():
            d["A_" + name] = (torch.randn(r, i, dtype=DT) * 0.02).requires_grad_()
            d["B_" + name] = torch.zeros(o, r, dtype=DT).requires_grad_()
        if c["mlp"] == "llama":
            d.update(fc1=wt(inter, h), fc2=wt(inter, h), mp=wt(h, inter))
        else:
            d.update(fc=wt(inter, h), mp=wt(h, inter))
        if full:  # full fine-tuning: every weight and norm trains
            for k in d:
                if k not in ("A", "B"):
                    d[k].requires_grad_()
        layer_w.append(d)

    adapted = set() if full else set(c.get("linear", ()))

    def linear(x, d, name):
        """litgpt's LoRALinear where `name` is adapted, else the frozen (or 4-bit) layer."""
        out = frozen(x, d[name])
        if name not in adapted:
            return out
        return out + (F.dropout(x, 0.05, True) @ d["A_" + name].t() @ d["B_" + name].t()) * 2.0

    def rope(x):
        x1, x2 = x[..., : x.size(-1) // 2], x[..., x.size(-1) // 2:]
        return (x * cos + torch.cat((-x2, x1), -1) * sin).type_as(x)

    # The PyTorch release's mean: this one's (which keeps its input before 2.2), or 2.2's.
    mean = MeanKeepsNoInput.apply if c.get("torch22") else (lambda x: torch.mean(x, dim=-1, keepdim=True))

    def rms(x, w):  # lit_gpt/rmsnorm.py of 2023: no upcast
        return w * (x * torch.rsqrt(mean(x * x) + 1e-5))

    def rms32(x, w):  # litgpt since early 2024: computed in fp32, cast back before the weight
        dtype = x.dtype
        x = x.float()
        return (x * torch.rsqrt(mean(x * x) + 1e-5)).to(dtype) * w

    def norm(x, d, i):
        if c["norm"] == "rms":
            return rms(x, d[f"n{i}"])
        if c["norm"] == "rms32":
            return rms32(x, d[f"n{i}"])
        return F.layer_norm(x, (h,), d[f"n{i}"], d[f"b{i}"])

    def attention(x, d):
        B = x.size(0)
        pretrained = frozen(x, d["qkv"])
        if full:
            return attention_core(pretrained, d, B)
        after_a = F.linear(F.dropout(x, 0.05, True), d["A"])
        inp, wb = after_a.transpose(-2, -1), d["B"].unsqueeze(-1)
        if nh == ng:
            after_b = F.conv1d(inp, wb, groups=len(parts))
        else:
            after_b = torch.cat([F.conv1d(a, b) for a, b in
                                 zip(inp.chunk(len(parts), dim=1), wb.split(parts))], dim=1)
        after_b = after_b.transpose(-2, -1)
        if all(c["enable"]):
            lora = after_b * 2.0
        else:  # zero_pad
            z = after_b.transpose(0, 1)
            res = z.new_zeros((*z.shape[:-1], total)).view(-1, total)
            res = res.index_copy(1, ind, z.reshape(-1, sum(parts)))
            lora = res.view((*z.shape[:-1], total)).transpose(0, 1) * 2.0
        return attention_core(pretrained + lora, d, B)

    def attention_core(qkv, d, B):
        qkv = qkv.view(B, T, ng, qpk + 2, hs).permute(0, 2, 3, 1, 4)
        q, k, v = qkv.split((qpk, 1, 1), dim=2)
        if ng != nh:
            k = k.expand(B, ng, qpk, T, hs)
            v = v.expand(B, ng, qpk, T, hs)
        q, k, v = (t.reshape(B, -1, T, hs) for t in (q, k, v))
        q = torch.cat((rope(q[..., :rope_n]), q[..., rope_n:]), dim=-1)
        k = torch.cat((rope(k[..., :rope_n]), k[..., rope_n:]), dim=-1)
        y = Flash.apply(q, k, v).transpose(1, 2).reshape(B, T, h)
        return linear(y, d, "proj")

    def mlp(x, d):
        if c["mlp"] == "llama":
            return linear(F.silu(linear(x, d, "fc1")) * linear(x, d, "fc2"), d, "mp")
        return linear(F.gelu(linear(x, d, "fc"), approximate=c["gelu"]), d, "mp")

    saved = {}

    def pack(t):
        st = t.storage()
        saved[st.data_ptr()] = st.size() * t.element_size()
        return t

    x = torch.randn(1, T, h, dtype=DT, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        for d in layer_w:
            n1 = norm(x, d, 1)
            if c["parallel"]:
                n2 = n1 if c["shared_norm"] else norm(x, d, 2)
                x = mlp(n2, d) + attention(n1, d) + x
            else:
                x = attention(n1, d) + x
                x = mlp(norm(x, d, 2), d) + x
    fixed = {t.storage().data_ptr() for d in layer_w for t in d.values()}
    fixed |= {cos.storage().data_ptr(), sin.storage().data_ptr(), ind.storage().data_ptr()}
    kept = sum(v for k, v in saved.items() if k not in fixed)
    return kept / (layers * T * h)


def hf_config(c, layers):
    h = c["h"]
    if c["type"] == "phi":
        return {"model_type": "phi", "vocab_size": 512, "hidden_size": h, "intermediate_size": c["inter"],
                "num_hidden_layers": layers, "num_attention_heads": c["heads"],
                "max_position_embeddings": 512, "partial_rotary_factor": c["rotary"],
                "hidden_act": "gelu_new", "resid_pdrop": 0.0, "embd_pdrop": 0.0,
                "attention_dropout": 0.0, "tie_word_embeddings": False}
    if c["type"] == "gpt_neox":
        return {"model_type": "gpt_neox", "vocab_size": 512, "hidden_size": h,
                "intermediate_size": c["inter"], "num_hidden_layers": layers,
                "num_attention_heads": c["heads"], "max_position_embeddings": 512,
                "rotary_pct": c["rotary"], "hidden_act": "gelu", "use_parallel_residual": True,
                "tie_word_embeddings": False, "hidden_dropout": 0.0, "attention_dropout": 0.0}
    return {"model_type": "llama", "vocab_size": 512, "hidden_size": h, "intermediate_size": c["inter"],
            "num_hidden_layers": layers, "num_attention_heads": c["heads"],
            "num_key_value_heads": c["groups"], "max_position_embeddings": 512, "hidden_act": "silu",
            "tie_word_embeddings": False, "rms_norm_eps": 1e-5}


def predicted_per_layer(frenzy, c, tmp):
    names = {"proj": ["o_proj"], "fc1": ["gate_proj"], "fc2": ["up_proj"], "fc": ["up_proj"],
             "mp": ["down_proj"]}
    targets = ",".join([n for n, on in zip(("q_proj", "k_proj", "v_proj"), c["enable"]) if on] +
                       [t for name in c.get("linear", ()) for t in names[name]])
    acts = []
    for layers in (2, 4):
        path = os.path.join(tmp, f"{c['name']}-{layers}.json")
        with open(path, "w") as f:
            json.dump(hf_config(c, layers), f)
        args = [frenzy, "predict", "--model", path, "--seq-len", "64", "--framework", "fsdp",
                "--precision", "bf16-pure", "--device", "cpu", "--json",
                "--torch", "2.2" if c.get("torch22") else torch.__version__]
        if not c.get("hf"):
            args.append("--litgpt-model")
        if c["norm"] == "rms":
            args.append("--litgpt-bf16-rmsnorm")
        if not c.get("full"):
            args += ["--finetune", "qlora" if c["qlora"] else "lora", "--lora-targets", targets,
                     "--lora-dtype", "bf16", "--lora-dropout", "0.05"]
        if c["qlora"]:
            args.append("--no-kbit-upcast")
        out = subprocess.run(args, capture_output=True, text=True, check=True)
        acts.append(json.loads(out.stdout)["ranks"][0]["activations_per_microbatch"])
    return (acts[1] - acts[0]) / (2 * 64 * c["h"])


BASE = {"h": 256, "heads": 4, "groups": 4, "inter": 1024, "qlora": False, "enable": (True, False, True)}
CASES = [
    # phi-1.5: parallel residual over one shared LayerNorm, half-rotary, tanh GELU.
    dict(BASE, name="phi", type="phi", norm="layer", mlp="neox", gelu="tanh", rotary=0.5,
         parallel=True, shared_norm=True),
    # StableLM-Alpha: GPT-NeoX's parallel residual with a second LayerNorm, quarter-rotary.
    dict(BASE, name="neox", type="gpt_neox", norm="layer", mlp="neox", gelu="none", rotary=0.25,
         parallel=True, shared_norm=False),
    # Llama-2: RMSNorm, SwiGLU, full rotary, sequential residuals.
    dict(BASE, name="llama", type="llama", norm="rms", mlp="llama", gelu="none", rotary=1.0,
         parallel=False, shared_norm=False, inter=688),
]
CASES += [dict(c, name=c["name"] + "-qlora", qlora=True) for c in CASES]
CASES += [
    # Every one of q, k and v adapted: zero_pad has nothing to fill.
    dict(CASES[2], name="llama-qkv", enable=(True, True, True)),
    # GQA: litgpt expands k and v and reshapes them (copies); B applied part by part.
    dict(CASES[2], name="llama-gqa", groups=2),
]
# Full fine-tuning (litgpt's full.py): every weight and norm trains, no adapters.
CASES += [dict(c, name=c["name"] + "-full", full=True) for c in (CASES[0], CASES[1], CASES[2], CASES[-1])]
# transformers' GPTNeoXAttention under SDPA is the same block: a fused projection viewed into q,
# k and v (chunk), partial rotary by slicing and cat, v handed over as a view
# (sdpa_attention_forward copies nothing); predicted as the HF model, without --litgpt-model.
CASES += [dict(CASES[1], name="neox-hf-full", full=True, hf=True)]
# litgpt since early 2024: its RMSNorm upcasts to fp32 (litgpt/rmsnorm.py, then model.py).
CASES += [dict(CASES[2], name="llama-2024", norm="rms32"),
          dict(CASES[2], name="llama-2024-full", norm="rms32", full=True)]
# Every linear layer adapted (litgpt's LoRALinear on the projection and the MLP: dropout, A, B).
CASES += [dict(CASES[-2], name="llama-all", groups=2, enable=(True, True, True),
               linear=("proj", "fc1", "fc2", "mp")),
          dict(CASES[0], name="phi-all", enable=(True, True, True), linear=("proj", "fc", "mp")),
          dict(CASES[1], name="neox-all", enable=(True, True, True), linear=("proj", "fc", "mp"))]
CASES += [dict(c, name=c["name"] + "-qlora", qlora=True) for c in CASES[-3:]]
# PyTorch >= 2.2: torch.mean keeps no input, so the norm keeps no x^2 (its mean stood in for).
CASES += [dict(c, name=c["name"] + "-t22", torch22=True)
          for c in CASES if c["name"] in ("llama", "llama-2024", "llama-2024-full", "llama-all",
                                          "llama-all-qlora")]


def main():
    frenzy = sys.argv[1]
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for c in CASES:
            measured = saved_per_layer(c)
            predicted = predicted_per_layer(frenzy, c, tmp)
            err = predicted / measured - 1
            ok = abs(err) <= 0.01
            failed += not ok
            print(f"{'ok' if ok else 'FAIL':4} {c['name']:12} kept {measured:7.3f} bytes per token per "
                  f"hidden unit a layer, MARP {predicted:7.3f} ({err:+.2%})")
    print(f"{len(CASES) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
