#!/usr/bin/python3
"""Frenzy's reference training entry point: a small GPT/LLaMA-style decoder trained with
data parallelism (PyTorch DDP, or sharded: ZeRO-2/3 with full or hybrid shard, sharding.py),
driven by a plan that frenzy's planner chose.

One process runs one rank. frenzyd's backends (src/backend/backend.h) start `plan.gpus` copies
of this script with the usual launcher environment:

    RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
    CUDA_VISIBLE_DEVICES

and the run's extra environment (all optional):

    FRENZY_PLAN         the plan: a JSON object, or the path of a file holding one
                        (`--plan FILE` wins over it)
    FRENZY_WORKDIR      the run's folder; the checkpoint lives there (`--workdir` wins; default
                        the current directory)
    FRENZY_REPORT_URL   where rank 0 POSTs progress reports (JSON)
    FRENZY_TOKEN        sent as `Authorization: Bearer <token>` with every report

Without WORLD_SIZE (or with WORLD_SIZE=1) the script runs as a single process.

The plan contract
-----------------
The plan is one JSON object whose fields are named as frenzy's planner names them
(`frenzy plan --json`), plus the job's goals and, optionally, the model's size. Unknown fields
(peak_bytes, iteration_s, mfu, cost, ...) are ignored, so a planner plan can be passed as is.

    field         default             meaning here
    gpu           ""                  GPU type; informational only
    gpus          WORLD_SIZE          ranks of the run; must equal WORLD_SIZE
    tp, pp, cp    1                   must be 1: tensor/pipeline/context parallelism need
                                      Megatron (refused, exit 2)
    ep            1                   must be 1 (a dense model; refused, exit 2)
    offload       "none"              must be "none", and offload_activations false: states
                                      and activations stay on the device (refused, exit 2)
    dp            WORLD_SIZE          data-parallel ranks; must equal WORLD_SIZE
    micro_batch   4                   sequences per rank per forward/backward
    zero          0                   0: DDP, plain AdamW; 1: DDP with the optimizer state
                                      sharded (ZeroRedundancyOptimizer); 2: gradients and
                                      optimizer state sharded (FSDP's SHARD_GRAD_OP); 3: weights
                                      too (FULL_SHARD), each block's gathered only while it
                                      runs. Stages 2 and 3 run sharding.py (FSDP itself cannot
                                      be imported on Debian 12's torch 1.13 + Python 3.11).
    shard_group   dp                  zero 2/3: ranks that share one copy of the sharded state;
                                      fewer than dp is hybrid sharding (HYBRID_SHARD: a copy
                                      per group of consecutive ranks, i.e. per node, gradients
                                      all-reduced across the copies); must divide dp
    distributed_optimizer  false      Megatron's name for stage-1 sharding; true acts as zero 1
    recompute     "none"              "none", "selective" (the attention core of each layer is
                                      recomputed in backward), "full" (whole layers are;
                                      `recompute_every` N: every Nth, 1-based);
                                      the planner's "op" runs as "selective" (printed note)
    precision     "bf16"              "bf16" (autocast), "fp16" (autocast + loss scaling, CUDA
                                      only: fp32 on CPU with a printed note), "fp32";
                                      "bf16-pure" runs as "bf16" (printed note)
    tokens        100 * global_batch * seq_len
                                      training stops once this many tokens (all ranks
                                      together) have been consumed
    global_batch  micro_batch * dp    sequences per optimizer step, all ranks together;
                                      gradient accumulation = global_batch / (micro_batch * dp)
                                      must be a whole number >= 1 (else refused, exit 2)
    seq_len       64                  tokens per sequence
    layers        2                   decoder layers
    hidden        64                  model width
    heads         4                   attention heads (must divide hidden)
    vocab         256                 embedding rows; at least 256 (byte-level tokenizer)
    arch          "gpt"               "gpt" or "llama"; --arch wins
    data_groups   []                  heterogeneous data parallelism (frenzy's mixed
                                      data-parallel plans): [{"gpu", "dp", "micro_batch",
                                      "batch"}, ...], consecutive ranks per group (the first dp
                                      ranks the first group's), each group taking `batch`
                                      sequences of every global batch as micro-batches of its
                                      own size (accumulation batch / (dp x micro_batch), so
                                      groups differ); the dp add up to WORLD_SIZE, the batches
                                      to global_batch. Gradients are weighted so that the step
                                      is the mean over the global batch's sequences, whatever
                                      rank computed them: each micro-batch's mean loss is
                                      scaled by micro_batch x WORLD_SIZE / global_batch before
                                      DDP averages over the ranks. zero 0 or 1 only.

Outputs
-------
* Every `--report-every` steps and at the end, rank 0 prints one line
      step 10 tokens 5120 loss 4.1234 tokens/s 8412.3 peak_bytes 412385280 (cpu_max_rss)
  and, when FRENZY_REPORT_URL is set, POSTs the same as JSON:
      {"step", "tokens", "loss", "peak_bytes", "peak_source", "tokens_per_s",
       "rank_peaks", "world_size", "final", "checkpoint_tokens"}
  `loss` is the mean training loss over the steps since the previous report, averaged over
  ranks; `tokens_per_s` is measured over the same window. `peak_bytes` is the largest of the
  ranks' peaks (`rank_peaks`, by rank): torch.cuda.max_memory_allocated() on a GPU
  (peak_source "cuda_max_allocated"), the process's peak resident set size on CPU
  ("cpu_max_rss", which includes the Python interpreter and libraries). Reports never fail the
  training: an unreachable daemon gives one warning on stderr. `checkpoint_tokens` is what the
  last checkpoint holds (what the run resumed from, before its first): a crash resumes there.
* `checkpoint.pt` in the work folder, every `--checkpoint-every` steps and at the end, written
  by rank 0 to a temporary file and renamed into place. It holds the model, the optimizer
  (consolidated when sharded: always the layout of an unsharded run's model state_dict and
  torch AdamW state_dict, so any layout resumes from any other's), the loss scaler, the step, the tokens consumed and every rank's
  random-number state. A run that finds it resumes from it ("resumed from step N"); the
  learning-rate schedule depends only on the step, so a resumed run continues the same curve.

Exit codes: 0 success; 2 the plan or arguments were refused (message on stderr); 1 anything
else (a Python traceback).

Example (one process, then two ranks by hand):

    FRENZY_PLAN='{"tokens": 65536, "global_batch": 8, "seq_len": 64}' \\
        /usr/bin/python3 examples/train.py --workdir /tmp/run1
    for r in 0 1; do RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \\
        /usr/bin/python3 examples/train.py --plan plan.json --workdir /tmp/run2 & done; wait
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import math
import os
import pathlib
import resource
import sys
import time
import urllib.error
import urllib.request
from typing import Any, Optional

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.checkpoint import checkpoint

import sharding  # examples/sharding.py: ZeRO-2/3, full and hybrid shard

EXIT_REFUSED = 2
CHECKPOINT_NAME = "checkpoint.pt"
CHECKPOINT_FORMAT = "frenzy-train/1"
DEFAULT_CORPUS = pathlib.Path(__file__).resolve().parent / "data" / "corpus.txt"
BYTE_VOCAB = 256
ADAM_BETAS = (0.9, 0.95)


class Refused(Exception):
    """A plan or argument this script will not run; reported on stderr with exit code 2."""


# --------------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Group:
    """One group of a heterogeneous data-parallel plan: `dp` consecutive ranks on one GPU type
    taking `batch` sequences of every global batch in micro-batches of `micro_batch`."""
    gpu: str
    dp: int
    micro_batch: int
    batch: int


@dataclasses.dataclass(frozen=True)
class Plan:
    """The validated plan, every field filled in (see the module docstring)."""
    gpu: str
    gpus: int
    tp: int
    pp: int
    dp: int
    cp: int
    micro_batch: int
    zero: int
    recompute: str      # "none" | "selective" | "full"
    precision: str      # "bf16" | "fp16" | "fp32" (as requested; the device may demote fp16)
    tokens: int
    global_batch: int
    seq_len: int
    layers: int
    hidden: int
    heads: int
    vocab: int
    arch: str           # "gpt" | "llama"
    recompute_every: int = 1  # with "full": every Nth block (1-based) is checkpointed
    shard_group: int = 1      # zero >= 2: ranks one copy of the sharded state spans (dp: full
                              # shard; fewer: hybrid shard, replicated over dp / shard_group)
    groups: tuple = ()        # heterogeneous data parallelism: Group per consecutive ranks

    def group_of(self, rank: int) -> Optional[Group]:
        """The data group `rank` belongs to, or None for a homogeneous plan."""
        first = 0
        for g in self.groups:
            if rank < first + g.dp:
                return g
            first += g.dp
        return None

    def rank_micro_batch(self, rank: int) -> int:
        g = self.group_of(rank)
        return g.micro_batch if g else self.micro_batch

    def rank_accumulation(self, rank: int) -> int:
        g = self.group_of(rank)
        return g.batch // (g.dp * g.micro_batch) if g else self.accumulation

    @property
    def accumulation(self) -> int:
        """Micro-batches each rank runs per optimizer step."""
        return self.global_batch // (self.micro_batch * self.dp)

    @property
    def tokens_per_step(self) -> int:
        """Tokens one optimizer step consumes, all ranks together."""
        return self.global_batch * self.seq_len


def read_plan_json(plan_arg: Optional[str]) -> dict[str, Any]:
    """The raw plan object: from --plan FILE, else FRENZY_PLAN (inline JSON or a file's path),
    else an empty object (all defaults)."""
    if plan_arg:
        source, text = plan_arg, _read_text(plan_arg)
    elif os.environ.get("FRENZY_PLAN", "").strip():
        value = os.environ["FRENZY_PLAN"].strip()
        if value[0] in "{[":  # inline JSON; anything else names a file
            source, text = "FRENZY_PLAN", value
        else:
            source, text = value, _read_text(value)
    else:
        return {}
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise Refused(f"plan from {source} is not valid JSON: {e}") from None
    if not isinstance(raw, dict):
        raise Refused(f"plan from {source} must be a JSON object, not {type(raw).__name__}")
    return raw


def _read_text(path: str) -> str:
    try:
        return pathlib.Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise Refused(f"cannot read plan file {path}: {e.strerror}") from None


def parse_plan(raw: dict[str, Any], world_size: int, arch_override: Optional[str],
               notes: list[str]) -> Plan:
    """Fills in defaults and refuses what this script cannot run faithfully. Notes about
    requests it runs differently than asked are appended to `notes`."""

    def integer(name: str, default: int, minimum: int = 1) -> int:
        value = raw.get(name, default)
        # JSON has one number type; accept 4.0 but not 4.5, and not true/false.
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise Refused(f"plan field {name!r} must be an integer, got {value!r}")
        if value < minimum:
            raise Refused(f"plan field {name!r} must be at least {minimum}, got {value}")
        return value

    def choice(name: str, default: str, allowed: tuple[str, ...]) -> str:
        value = raw.get(name, default)
        if value not in allowed:
            raise Refused(f"plan field {name!r} must be one of {', '.join(allowed)}; "
                          f"got {value!r}")
        return value

    tp, pp, cp = integer("tp", 1), integer("pp", 1), integer("cp", 1)
    if tp > 1 or pp > 1 or cp > 1:
        raise Refused(f"plan has tp={tp} pp={pp} cp={cp}: tensor/pipeline/context parallelism "
                      "needs Megatron; this script supports data parallelism only")
    ep = integer("ep", 1)
    if ep > 1:
        raise Refused(f"plan has ep={ep}: expert parallelism needs an MoE framework (Megatron-LM, "
                      "torchtitan); this script trains a dense model")
    offload = raw.get("offload", "none")
    if offload != "none" or raw.get("offload_activations", False) is not False:
        raise Refused(f"plan offloads (offload={offload!r}, offload_activations="
                      f"{raw.get('offload_activations', False)!r}): this script keeps its states "
                      "and activations on the device (ZeRO-Offload and FSDP CPU offload need "
                      "DeepSpeed or FSDP, which Debian's torch 1.13 cannot import)")
    dp = integer("dp", world_size)
    gpus = integer("gpus", world_size)
    if dp != world_size or gpus != world_size:
        raise Refused(f"plan has dp={dp} gpus={gpus} but WORLD_SIZE={world_size}: start one "
                      "process per data-parallel rank")

    micro_batch = integer("micro_batch", 4)
    global_batch = integer("global_batch", micro_batch * dp)
    if global_batch % (micro_batch * dp) != 0 and not raw.get("data_groups"):
        raise Refused(f"global_batch {global_batch} is not a multiple of micro_batch "
                      f"{micro_batch} x dp {dp} = {micro_batch * dp}: gradient accumulation "
                      "must be a whole number of micro-batches")
    seq_len = integer("seq_len", 64)

    zero = integer("zero", 0, minimum=0)
    if zero > 3:
        raise Refused(f"plan field 'zero' must be 0, 1, 2 or 3; got {zero}")
    distributed_optimizer = raw.get("distributed_optimizer", False)
    if not isinstance(distributed_optimizer, bool):
        raise Refused("plan field 'distributed_optimizer' must be true or false")
    if distributed_optimizer and zero == 0:
        notes.append("distributed_optimizer runs as ZeRO stage 1 (sharded optimizer state)")
        zero = 1
    # FSDP's words for the same: FULL_SHARD is stage 3, SHARD_GRAD_OP stage 2, HYBRID_SHARD
    # stage 3 within a shard group (a node) replicated across groups.
    shard_group = integer("shard_group", dp)
    if zero < 2 and shard_group != dp:
        raise Refused(f"plan field 'shard_group' ({shard_group}) needs zero 2 or 3: only "
                      "sharded weights and gradients have a shard group")
    if dp % shard_group != 0:
        raise Refused(f"shard_group {shard_group} does not divide dp {dp}: hybrid sharding "
                      "replicates whole shard groups")

    recompute = choice("recompute", "none", ("none", "selective", "op", "full"))
    if recompute == "op":
        notes.append("recompute 'op' runs as 'selective' (the attention core is recomputed)")
        recompute = "selective"
    recompute_every = integer("recompute_every", 1)
    if recompute != "full" and recompute_every != 1:
        raise Refused("plan field 'recompute_every' needs recompute 'full'")
    precision = choice("precision", "bf16", ("bf16", "bf16-pure", "fp16", "fp32"))
    if precision == "bf16-pure":
        notes.append("precision bf16-pure runs as bf16 mixed precision (fp32 master weights)")
        precision = "bf16"

    layers, hidden = integer("layers", 2), integer("hidden", 64)
    heads, vocab = integer("heads", 4), integer("vocab", BYTE_VOCAB)
    if hidden % heads != 0:
        raise Refused(f"hidden {hidden} is not divisible by heads {heads}")
    if vocab < BYTE_VOCAB:
        raise Refused(f"vocab {vocab} is below {BYTE_VOCAB}, the byte-level tokenizer's size")
    arch = arch_override or choice("arch", "gpt", ("gpt", "llama"))
    if arch == "llama" and (hidden // heads) % 2 != 0:
        raise Refused(f"llama's rotary embeddings need an even head size; "
                      f"hidden {hidden} / heads {heads} is odd")

    groups = parse_groups(raw.get("data_groups", []), dp, zero,
                          global_batch if "global_batch" in raw else None)
    if groups:
        global_batch = sum(g.batch for g in groups)
    tokens = integer("tokens", 100 * global_batch * seq_len)
    gpu = raw.get("gpu", "")
    return Plan(gpu=str(gpu), gpus=gpus, tp=tp, pp=pp, dp=dp, cp=cp, micro_batch=micro_batch,
                zero=zero, recompute=recompute, precision=precision, tokens=tokens,
                global_batch=global_batch, seq_len=seq_len, layers=layers, hidden=hidden,
                heads=heads, vocab=vocab, arch=arch, recompute_every=recompute_every,
                shard_group=shard_group, groups=groups)


def parse_groups(raw: Any, dp: int, zero: int, global_batch: Optional[int]) -> tuple:
    """The plan's data_groups, validated: each {"gpu", "dp", "micro_batch", "batch"} with whole
    micro-batches per rank, the batches adding up to global_batch (when the plan names it), the
    groups' ranks to dp."""
    if not isinstance(raw, list):
        raise Refused("plan field 'data_groups' must be a list of groups")
    if not raw:
        return ()
    if len(raw) < 2:
        raise Refused("plan field 'data_groups' needs two groups or more (one is plain dp)")
    if zero >= 2:
        raise Refused(f"data_groups with zero {zero}: sharded gradients are reduced at every "
                      "micro-batch, so every rank would need the same accumulation; use zero 0 "
                      "or 1")
    groups = []
    for k, g in enumerate(raw):
        if not isinstance(g, dict):
            raise Refused(f"data_groups[{k}] must be an object")
        values = {}
        for name in ("dp", "micro_batch", "batch"):
            v = g.get(name)
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise Refused(f"data_groups[{k}].{name} must be a positive integer, got {v!r}")
            values[name] = v
        if values["batch"] % (values["dp"] * values["micro_batch"]) != 0:
            raise Refused(f"data_groups[{k}]: batch {values['batch']} is not a multiple of dp "
                          f"{values['dp']} x micro_batch {values['micro_batch']}")
        groups.append(Group(gpu=str(g.get("gpu", "")), **values))
    if global_batch is not None and sum(g.batch for g in groups) != global_batch:
        raise Refused(f"data_groups' batches add up to {sum(g.batch for g in groups)}; "
                      f"global_batch is {global_batch}")
    if sum(g.dp for g in groups) != dp:
        raise Refused(f"data_groups have {sum(g.dp for g in groups)} ranks; dp is {dp}")
    return tuple(groups)


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ModelConfig:
    arch: str           # "gpt": LayerNorm, GELU MLP, learned positions; "llama": RMSNorm,
                        # SwiGLU MLP, rotary positions, no biases
    layers: int
    hidden: int
    heads: int
    vocab: int
    max_seq_len: int
    tie_embeddings: bool

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def ffn_hidden(self) -> int:
        if self.arch == "gpt":
            return 4 * self.hidden
        # LLaMA: two thirds of 4h (SwiGLU has three matrices), rounded up to a multiple of 16.
        return 16 * math.ceil(8 * self.hidden / 3 / 16)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (normed * self.weight).to(x.dtype)


def rotary_tables(seq_len: int, head_dim: int, device: torch.device):
    """cos and sin of the rotary angles, each (seq_len, head_dim / 2)."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    angles = torch.outer(torch.arange(seq_len, device=device).float(), inv_freq)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotates each (even, odd) pair of x's last dimension; x is (batch, heads, seq, head_dim)."""
    even, odd = x[..., 0::2].float(), x[..., 1::2].float()
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2).to(x.dtype)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + causal mask) v: the "attention core" that selective
    recomputation recomputes. The mask is built here rather than kept as a module buffer: DDP
    under gloo cannot broadcast bool buffers."""
    seq = q.shape[-2]
    mask = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(1)
    scores = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
    scores = scores.float().masked_fill(mask, float("-inf"))
    return scores.softmax(dim=-1).to(v.dtype) @ v


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, recompute_core: bool):
        super().__init__()
        bias = cfg.arch == "gpt"
        self.heads, self.head_dim = cfg.heads, cfg.head_dim
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden, bias=bias)
        self.proj = nn.Linear(cfg.hidden, cfg.hidden, bias=bias)
        self.rotary = cfg.arch == "llama"
        self.recompute_core = recompute_core

    def forward(self, x: torch.Tensor, rope) -> torch.Tensor:
        batch, seq, hidden = x.shape
        q, k, v = (t.view(batch, seq, self.heads, self.head_dim).transpose(1, 2)
                   for t in self.qkv(x).split(hidden, dim=-1))
        if self.rotary:
            q, k = apply_rotary(q, *rope), apply_rotary(k, *rope)
        if self.recompute_core and self.training:
            # Non-reentrant checkpointing: works under DDP and with autocast re-entered.
            out = checkpoint(causal_attention, q, k, v, use_reentrant=False)
        else:
            out = causal_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(batch, seq, hidden))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.swiglu = cfg.arch == "llama"
        bias = not self.swiglu
        self.up = nn.Linear(cfg.hidden, cfg.ffn_hidden, bias=bias)
        if self.swiglu:
            self.gate = nn.Linear(cfg.hidden, cfg.ffn_hidden, bias=False)
        self.proj = nn.Linear(cfg.ffn_hidden, cfg.hidden, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu:
            return self.proj(F.silu(self.gate(x)) * self.up(x))
        return self.proj(F.gelu(self.up(x)))


class Block(nn.Module):
    """Pre-norm decoder layer: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg: ModelConfig, recompute_core: bool):
        super().__init__()
        norm = RMSNorm if cfg.arch == "llama" else nn.LayerNorm
        self.norm1, self.norm2 = norm(cfg.hidden), norm(cfg.hidden)
        self.attn = Attention(cfg, recompute_core)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, rope) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), rope)
        return x + self.mlp(self.norm2(x))


class Decoder(nn.Module):
    """Token embedding, `layers` blocks, a final norm and the LM head; forward returns the mean
    next-token cross-entropy."""

    def __init__(self, cfg: ModelConfig, recompute: str, recompute_every: int = 1):
        super().__init__()
        self.cfg = cfg
        self.full_recompute = recompute == "full"
        self.recompute_every = recompute_every
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        # GPT learns absolute positions; LLaMA rotates q and k instead (no parameters).
        self.positions = nn.Embedding(cfg.max_seq_len, cfg.hidden) if cfg.arch == "gpt" else None
        self.blocks = nn.ModuleList(Block(cfg, recompute == "selective")
                                    for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden) if cfg.arch == "llama" else nn.LayerNorm(cfg.hidden)
        self.head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        self.apply(self._init_weights)
        # GPT-2's scaling of the residual projections, so the residual stream's variance does
        # not grow with depth.
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * cfg.layers))
        if cfg.tie_embeddings:
            self.head.weight = self.embed.weight
        self.sharding = None  # a sharding.ShardedModel once the weights are sharded (ZeRO-2/3)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        seq = tokens.shape[1]
        sharding = self.sharding
        if sharding is not None:
            sharding.before_root()  # the embeddings, final norm and head, for the whole step
        x = self.embed(tokens)
        rope = None
        if self.positions is not None:
            x = x + self.positions(torch.arange(seq, device=tokens.device))
        else:
            rope = rotary_tables(seq, self.cfg.head_dim, tokens.device)
        for i, block in enumerate(self.blocks):
            if sharding is not None:
                sharding.before_block(i)
            if (self.full_recompute and self.training and
                    (i + 1) % self.recompute_every == 0):
                x = checkpoint(block, x, rope, use_reentrant=False)
            else:
                x = block(x, rope)
            if sharding is not None:
                x = sharding.after_block(i, x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                               targets.reshape(-1))


def make_optimizer(model: nn.Module, lr: float, weight_decay: float, zero: int,
                   distributed: bool) -> torch.optim.Optimizer:
    """AdamW with weight decay on matrices only; sharded across ranks when zero >= 1."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    if zero >= 1 and distributed:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        return ZeroRedundancyOptimizer(groups, optimizer_class=torch.optim.AdamW, lr=lr,
                                       betas=ADAM_BETAS)
    return torch.optim.AdamW(groups, lr=lr, betas=ADAM_BETAS)


def learning_rate(step: int, total_steps: int, peak: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak at `total_steps`. A function of
    the step alone, so nothing about it needs checkpointing."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------

class ByteCorpus:
    """A text file as bytes (token ids 0-255); batches are random windows of it."""

    def __init__(self, path: pathlib.Path, seq_len: int):
        try:
            data = path.read_bytes()
        except OSError as e:
            raise Refused(f"cannot read corpus {path}: {e.strerror}") from None
        if len(data) < seq_len + 1:
            raise Refused(f"corpus {path} has {len(data)} bytes, fewer than seq_len + 1 = "
                          f"{seq_len + 1}")
        self.data = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
        self.seq_len = seq_len

    def batch(self, size: int, generator: torch.Generator, device: torch.device):
        """`size` windows at random offsets: inputs and the next-token targets."""
        starts = torch.randint(0, len(self.data) - self.seq_len, (size,), generator=generator)
        offsets = torch.arange(self.seq_len + 1)
        windows = self.data[starts[:, None] + offsets]
        return windows[:, :-1].to(device), windows[:, 1:].to(device)


# --------------------------------------------------------------------------------------------
# Distributed helpers
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Dist:
    rank: int
    world: int
    local_rank: int
    device: torch.device

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, by rank, on every rank."""
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
        if not self.enabled:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def mean(self, values: list[float]) -> list[float]:
        """The element-wise mean of `values` over ranks."""
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        if self.enabled:
            dist.all_reduce(t)
            t /= self.world
        return t.tolist()


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    try:
        return int(value) if value else default
    except ValueError:
        raise Refused(f"environment variable {name}={value!r} is not an integer") from None


def pick_device(choice: str, local_rank: int) -> torch.device:
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise Refused("--device cuda but CUDA is not available")
        # Launchers either expose all of a node's GPUs (pick by LOCAL_RANK) or set
        # CUDA_VISIBLE_DEVICES to one GPU per rank (then it is device 0).
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def peak_bytes(device: torch.device) -> tuple[int, str]:
    """This process's peak memory and what it measures."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), "cuda_max_allocated"
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return (maxrss if sys.platform == "darwin" else maxrss * 1024), "cpu_max_rss"


# --------------------------------------------------------------------------------------------
# Checkpoints and reports
# --------------------------------------------------------------------------------------------

def save_checkpoint(path: pathlib.Path, state: dict[str, Any]) -> None:
    """Writes `state` to a temporary file beside `path`, syncs it and renames it into place,
    so a crash never leaves a truncated checkpoint behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class Reporter:
    """POSTs progress to frenzyd. Failures never stop training; the first one is printed."""

    def __init__(self, url: Optional[str], token: Optional[str]):
        self.url, self.token = url, token
        self.warned = False
        # Reports go straight to the daemon: an http_proxy meant for the outside world must not
        # intercept a cluster-internal address.
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def post(self, payload: dict[str, Any]) -> None:
        if not self.url:
            return
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(self.url, data=json.dumps(payload).encode(),
                                         headers=headers, method="POST")
        try:
            with self.opener.open(request, timeout=2) as response:
                response.read()
        except Exception as e:  # noqa: BLE001 - any failure to report is only a warning
            if not self.warned:
                self.warned = True
                print(f"warning: cannot report progress to {self.url}: {e} "
                      "(training continues; further failures are not printed)",
                      file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------

def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Train a small GPT/LLaMA-style decoder with data parallelism, following a "
                    "frenzy plan (see the module docstring for the plan's fields).")
    p.add_argument("--plan", help="plan JSON file (default: $FRENZY_PLAN)")
    p.add_argument("--workdir", help="folder for checkpoint.pt (default: $FRENZY_WORKDIR, "
                                     "else the current directory)")
    p.add_argument("--arch", choices=("gpt", "llama"), help="overrides the plan's arch")
    p.add_argument("--tie-embeddings", action=argparse.BooleanOptionalAction, default=None,
                   help="share the embedding and LM-head matrix (default: on for gpt, off for "
                        "llama)")
    p.add_argument("--data", type=pathlib.Path, default=DEFAULT_CORPUS, help="text corpus")
    p.add_argument("--max-steps", type=int, default=None,
                   help="stop at this optimizer step (counted from the start of training, "
                        "resumed steps included) even if `tokens` is not reached")
    p.add_argument("--checkpoint-every", type=int, default=100,
                   help="checkpoint every N steps (0: only at the end)")
    p.add_argument("--report-every", type=int, default=10, help="report every N steps")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    p.add_argument("--warmup-steps", type=int, default=5)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip-grad", type=float, default=1.0, help="0 disables clipping")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--dist-timeout", type=float, default=600,
                   help="seconds a rank waits for the others before failing")
    args = p.parse_args(argv)
    for name in ("max_steps", "checkpoint_every", "report_every", "warmup_steps"):
        value = getattr(args, name)
        if value is not None and value < (1 if name == "report_every" else 0):
            p.error(f"--{name.replace('_', '-')} must not be {value}")
    return args


def autocast_context(precision: str, device: torch.device):
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    if precision == "fp16":
        return torch.autocast(device.type, dtype=torch.float16)
    return contextlib.nullcontext()


def train(args: argparse.Namespace) -> None:
    world = env_int("WORLD_SIZE", 1)
    rank, local_rank = env_int("RANK", 0), env_int("LOCAL_RANK", 0)
    if not 0 <= rank < world:
        raise Refused(f"RANK={rank} is outside WORLD_SIZE={world}")

    # Everything that can be refused is checked before the ranks meet, so every rank refuses
    # the same plan on its own instead of leaving the others waiting.
    notes: list[str] = []
    plan = parse_plan(read_plan_json(args.plan), world, args.arch, notes)
    device = pick_device(args.device, local_rank)
    precision = plan.precision
    if precision == "fp16" and device.type != "cuda":
        notes.append("fp16 needs a GPU; running in fp32 on CPU")
        precision = "fp32"
    if plan.zero >= 1 and world == 1:
        notes.append("ZeRO has nothing to shard with one rank; plain AdamW")
    corpus = ByteCorpus(args.data, plan.seq_len)
    workdir = pathlib.Path(args.workdir or os.environ.get("FRENZY_WORKDIR") or ".")
    checkpoint_path = workdir / CHECKPOINT_NAME

    d = Dist(rank, world, local_rank, device)
    if d.enabled:
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                init_method="env://", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=args.dist_timeout))
    try:
        run(args, plan, precision, notes, corpus, checkpoint_path, d)
        if d.enabled:
            # No rank tears down while another may still be talking to it.
            dist.barrier()
    finally:
        if d.enabled:
            dist.destroy_process_group()


def run(args: argparse.Namespace, plan: Plan, precision: str, notes: list[str],
        corpus: ByteCorpus, checkpoint_path: pathlib.Path, d: Dist) -> None:
    def log(message: str) -> None:
        if d.main:
            print(message, flush=True)

    for note in notes:
        log(f"note: {note}")

    cfg = ModelConfig(arch=plan.arch, layers=plan.layers, hidden=plan.hidden, heads=plan.heads,
                      vocab=plan.vocab, max_seq_len=plan.seq_len,
                      tie_embeddings=(args.tie_embeddings if args.tie_embeddings is not None
                                      else plan.arch == "gpt"))
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    model = Decoder(cfg, plan.recompute, plan.recompute_every).to(d.device)

    # Rank 0 reads the checkpoint and hands it to the others: no shared file system needed.
    state = None
    if d.main and checkpoint_path.exists():
        state = torch.load(checkpoint_path, map_location="cpu")
    state = d.broadcast(state)
    if state is not None:
        if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
            raise Refused(f"{checkpoint_path} is not a checkpoint of this script")
        if state["model_config"] != dataclasses.asdict(cfg):
            raise Refused(f"{checkpoint_path} holds a different model "
                          f"({state['model_config']}); remove it or match the plan")
        model.load_state_dict(state["model"])

    n_params = sum(p.numel() for p in model.parameters())
    sharded = None  # ZeRO-2/3: sharding.ShardedModel; else DDP (with ZeRO-1's sharded AdamW)
    if plan.zero >= 2 and d.enabled:
        reference = make_optimizer(model, args.lr, args.weight_decay, 0, False).state_dict()
        sharded = sharding.ShardedModel(model, plan.zero,
                                        sharding.Mesh(d.rank, d.world, plan.shard_group),
                                        d.device)
        optimizer = sharding.ShardAdamW(sharded.units, args.lr, ADAM_BETAS, args.weight_decay)
        scaler = sharding.ShardedScaler(enabled=precision == "fp16")
        wrapped = model
    else:
        wrapped = (DistributedDataParallel(model, device_ids=[d.device.index]
                                           if d.device.type == "cuda" else None)
                   if d.enabled else model)
        optimizer = make_optimizer(model, args.lr, args.weight_decay, plan.zero, d.enabled)
        scaler = torch.cuda.amp.GradScaler(enabled=precision == "fp16")

    # Each rank draws its own windows; the stream is seeded by (seed, rank).
    data_rng = torch.Generator().manual_seed(args.seed * 1_000_003 + d.rank)
    step, tokens = 0, 0
    if state is not None:
        if sharded is not None:
            sharded.load_optimizer_state(optimizer, state["optimizer"])
        else:
            optimizer.load_state_dict(state["optimizer"])
        if state["scaler"]:  # empty when saved by a run without loss scaling (not fp16)
            scaler.load_state_dict(state["scaler"])
        step, tokens = state["step"], state["tokens"]
        rng = state["rng"]
        if len(rng) == d.world:
            data_rng.set_state(rng[d.rank]["data"])
            torch.set_rng_state(rng[d.rank]["torch"])
            if d.device.type == "cuda" and rng[d.rank].get("cuda") is not None:
                torch.cuda.set_rng_state(rng[d.rank]["cuda"], d.device)
        else:
            # Another world size: the old streams do not map onto the new ranks; start fresh
            # ones that still differ from those of the first run.
            log(f"note: checkpoint has {len(rng)} ranks' random state, this run {d.world}; "
                "reseeding")
            data_rng.manual_seed(args.seed * 1_000_003 + d.rank + 7919 * step)
        log(f"resumed from step {step} (tokens {tokens})")
        del state

    total_steps = math.ceil(plan.tokens / plan.tokens_per_step)  # the LR schedule's length
    last_step = total_steps if args.max_steps is None else min(total_steps, args.max_steps)
    layout = (f"zero {plan.zero}" if sharded is None else
              f"zero {plan.zero} ({'full' if plan.shard_group == plan.dp else 'hybrid'} shard "
              f"over {plan.shard_group} of {plan.dp} ranks)")
    log(f"frenzy train: arch {cfg.arch} layers {cfg.layers} hidden {cfg.hidden} heads "
        f"{cfg.heads} vocab {cfg.vocab} params {n_params} | dp {plan.dp} micro_batch "
        f"{plan.micro_batch} accumulation {plan.accumulation} global_batch "
        f"{plan.global_batch} seq_len {plan.seq_len} | precision {precision} recompute "
        f"{plan.recompute} {layout} | device {d.device} | steps {step}->{last_step} "
        f"of {total_steps} ({plan.tokens} tokens)")

    # This rank's share: its group's micro-batch and accumulation, and the weight of its
    # micro-batches' mean losses in the step's gradient (heterogeneous data parallelism).
    micro_batch = plan.rank_micro_batch(d.rank)
    accumulation = plan.rank_accumulation(d.rank)
    weight = micro_batch * d.world / plan.global_batch
    if plan.groups:
        log("data groups: " + ", ".join(
            f"{g.gpu or '?'} x {g.dp} rank(s) {g.batch} sequences (micro_batch {g.micro_batch} "
            f"x {g.batch // (g.dp * g.micro_batch)})" for g in plan.groups))
        print(f"rank {d.rank}: micro_batch {micro_batch} accumulation {accumulation} weight "
              f"{weight:.6g}", flush=True)
    reporter = Reporter(os.environ.get("FRENZY_REPORT_URL"), os.environ.get("FRENZY_TOKEN"))
    saved = {"tokens": tokens}  # what the last checkpoint holds: a crash resumes from there

    def checkpoint_now() -> None:
        # Collective: every rank contributes its random state (and its optimizer shard).
        rng_state = {"data": data_rng.get_state(), "torch": torch.get_rng_state(),
                     "cuda": (torch.cuda.get_rng_state(d.device)
                              if d.device.type == "cuda" else None)}
        rng = d.gather(rng_state)
        if sharded is not None:
            # Collective too: the unsharded run's layout, so any run can resume from it.
            model_state = sharded.state_dict()
            optimizer_state = sharded.optimizer_state_dict(optimizer, reference)
        else:
            if hasattr(optimizer, "consolidate_state_dict"):
                optimizer.consolidate_state_dict(to=0)
            model_state = model.state_dict()
            optimizer_state = optimizer.state_dict() if d.main else None
        if d.main:
            save_checkpoint(checkpoint_path, {
                "format": CHECKPOINT_FORMAT, "step": step, "tokens": tokens,
                "model_config": dataclasses.asdict(cfg), "plan": dataclasses.asdict(plan),
                "model": model_state, "optimizer": optimizer_state,
                "scaler": scaler.state_dict(), "rng": rng})
        saved["tokens"] = tokens

    window = {"loss_sum": 0.0, "steps": 0, "tokens": 0, "start": time.perf_counter()}

    def report(final: bool) -> None:
        # Collective: the loss is averaged and the peaks gathered over ranks.
        loss_sum, steps = d.mean([window["loss_sum"], window["steps"]])
        loss = loss_sum / steps if steps else float("nan")
        elapsed = time.perf_counter() - window["start"]
        tokens_per_s = window["tokens"] / elapsed if window["tokens"] and elapsed > 0 else 0.0
        own_peak, source = peak_bytes(d.device)
        rank_peaks = d.gather(own_peak)
        if d.main:
            print(f"step {step} tokens {tokens} loss {loss:.4f} tokens/s {tokens_per_s:.1f} "
                  f"peak_bytes {max(rank_peaks)} ({source})", flush=True)
            reporter.post({"step": step, "tokens": tokens,
                           "loss": loss if math.isfinite(loss) else None,
                           "peak_bytes": max(rank_peaks), "peak_source": source,
                           "tokens_per_s": tokens_per_s, "rank_peaks": rank_peaks,
                           "world_size": d.world, "final": final,
                           "checkpoint_tokens": saved["tokens"]})
        window.update(loss_sum=0.0, steps=0, tokens=0, start=time.perf_counter())

    model.train()
    while step < last_step and tokens < plan.tokens:
        lr = learning_rate(step, total_steps, args.lr, args.warmup_steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        step_loss = 0.0
        for micro in range(accumulation):
            inputs, targets = corpus.batch(micro_batch, data_rng, d.device)
            # Gradients are all-reduced once, on the last micro-batch of the step (each rank's
            # last: ranks of different groups run different numbers of micro-batches).
            sync = micro == accumulation - 1 or sharded is not None
            with (contextlib.nullcontext() if sync or not d.enabled else wrapped.no_sync()):
                with autocast_context(precision, d.device):
                    raw_loss = wrapped(inputs, targets)
                    loss = raw_loss * weight if plan.groups else raw_loss / accumulation
                scaler.scale(loss).backward()
            step_loss += raw_loss.item() / accumulation
        if sharded is not None:
            # Sharded gradients were reduced by each micro-batch's backward.
            overflow = scaler.unscale_and_check(optimizer, d.enabled)
            if not overflow:
                if args.clip_grad > 0:
                    sharded.clip_grad_norm(args.clip_grad)
                optimizer.step()
            scaler.update(overflow)
        else:
            if args.clip_grad > 0:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad)
            scaler.step(optimizer)
            scaler.update()
        optimizer.zero_grad(set_to_none=True)

        step += 1
        tokens += plan.tokens_per_step
        window["loss_sum"] += step_loss
        window["steps"] += 1
        window["tokens"] += plan.tokens_per_step
        # The last step is reported and checkpointed below, after the loop. Every rank takes
        # the same branches: both calls are collective.
        last = step >= last_step or tokens >= plan.tokens
        if step % args.report_every == 0 and not last:
            report(final=False)
        if args.checkpoint_every and step % args.checkpoint_every == 0 and not last:
            checkpoint_now()

    # Always at the end, even when there was nothing left to train (a resumed finished run):
    # the checkpoint first, so the daemon's "final" report never precedes it.
    checkpoint_now()
    report(final=True)


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    try:
        train(args)
    except Refused as e:
        print(f"train.py: refused: {e}", file=sys.stderr, flush=True)
        return EXIT_REFUSED
    return 0


if __name__ == "__main__":
    sys.exit(main())
