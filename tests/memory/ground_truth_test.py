#!/usr/bin/env python3
"""Ground truth for MARP: measure real training steps on CPU, compare with `frenzy predict`.

For every configuration of the grid (architectures x micro-batch x sequence length x precision
(fp32, pure bf16, bf16 autocast) x optimizer x recomputation), tools/measure_memory.py builds the model with random weights, runs
real training steps with PyTorch and measures the exact peak of tensor memory; `frenzy predict
--framework hf --device cpu --no-flash-attn` predicts it from the architecture alone. Every
prediction must be within 3% of its measurement, and must peak in the phase of the step where the
measurement peaks.

Usage: ground_truth_test.py FRENZY_BIN [--csv OUT.csv] [--quick]
Exit status 0 when every case is within tolerance and in the measured phase; prints one line per
case and a summary.
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import measure_memory  # noqa: E402

TOLERANCE = 0.03

# MARP's phases (src/memory/memory_model.h): "forward", "loss" (the start of backward on the last
# stage, while the loss's own backward holds its vocabulary-sized gradients), "backward" (the
# layers' backward) and "optimizer". tools/measure_memory.py attributes the peak to the last
# `phase:` marker before it; a tool that marks the loss's backward apart declares its phases in
# PHASES. Without that, its "backward" marker wraps all of loss.backward(), which begins with
# MARP's "loss" phase, so both MARP backward phases read as "backward".
MEASURED_PHASES = getattr(measure_memory, "PHASES", ("forward", "backward", "optimizer"))


def measured_name(marp_phase):
    """The measurement's name for the phase MARP predicts the peak in."""
    if marp_phase in MEASURED_PHASES:
        return marp_phase
    if marp_phase == "loss":
        return "backward"
    raise ValueError(f"MARP phase {marp_phase!r} has no counterpart in the measurement")

# Tiny models of each block variant the measurement tool builds (HuggingFace config.json
# fields): sizes are small so that a CPU step takes a fraction of a second.
ARCHS = {
    "llama-mha": {"model_type": "llama", "vocab_size": 512, "hidden_size": 128,
                  "intermediate_size": 344, "num_hidden_layers": 2, "num_attention_heads": 4},
    "llama-gqa": {"model_type": "llama", "vocab_size": 1024, "hidden_size": 128,
                  "intermediate_size": 256, "num_hidden_layers": 3, "num_attention_heads": 8,
                  "num_key_value_heads": 2},
    # A vocabulary 64x the width, as Llama-3's or Gemma's are 30-100x theirs: the output
    # layer's tensors weigh as they do at scale (the LoRA cases on lm_head).
    "llama-bigvocab": {"model_type": "llama", "vocab_size": 8192, "hidden_size": 128,
                       "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
                       "num_key_value_heads": 2},
    "mistral-gqa-tied": {"model_type": "mistral", "vocab_size": 640, "hidden_size": 96,
                         "intermediate_size": 256, "num_hidden_layers": 2,
                         "num_attention_heads": 6, "num_key_value_heads": 3,
                         "tie_word_embeddings": True},
    "qwen2-bias": {"model_type": "qwen2", "vocab_size": 700, "hidden_size": 128,
                   "intermediate_size": 320, "num_hidden_layers": 2, "num_attention_heads": 4,
                   "num_key_value_heads": 2},
    "gpt2": {"model_type": "gpt2", "vocab_size": 512, "n_embd": 128, "n_layer": 2, "n_head": 4,
             "n_positions": 512},
    "gpt2-relu-nodrop": {"model_type": "gpt2", "vocab_size": 400, "n_embd": 64, "n_layer": 3,
                         "n_head": 4, "n_positions": 512, "activation_function": "relu",
                         "resid_pdrop": 0.0, "attn_pdrop": 0.0, "embd_pdrop": 0.0},
    "neox-parallel": {"model_type": "gpt_neox", "vocab_size": 512, "hidden_size": 128,
                      "intermediate_size": 512, "num_hidden_layers": 2,
                      "num_attention_heads": 4, "rotary_pct": 0.25},
    # 2026 blocks: q/k RMSNorm per head (Qwen3), over the whole projection with norms after the
    # sublayers (OLMo-2), norms on both sides of each sublayer with Gemma's (1 + w) RMSNorm and
    # head_dim != hidden / heads, soft-capped logits (Gemma-2) or q/k norms (Gemma-3).
    "qwen3-qknorm": {"model_type": "qwen3", "vocab_size": 512, "hidden_size": 128,
                     "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
                     "num_key_value_heads": 2, "head_dim": 32},
    "olmo2-postnorm": {"model_type": "olmo2", "vocab_size": 512, "hidden_size": 128,
                       "intermediate_size": 256, "num_hidden_layers": 2,
                       "num_attention_heads": 4, "num_key_value_heads": 2},
    "gemma2-sandwich": {"model_type": "gemma2", "vocab_size": 512, "hidden_size": 96,
                        "intermediate_size": 256, "num_hidden_layers": 2,
                        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
                        "sliding_window": 64},
    "gemma3-sandwich-qknorm": {"model_type": "gemma3_text", "vocab_size": 512,
                               "hidden_size": 96, "intermediate_size": 256,
                               "num_hidden_layers": 2, "num_attention_heads": 4,
                               "num_key_value_heads": 2, "head_dim": 32, "sliding_window": 64},
    # Sparse MoE blocks as transformers runs them eagerly: softmax router, top-k, a loop over
    # the experts (Qwen3-MoE with its q/k norms; Mixtral with renormalised top-2).
    "qwen3-moe": {"model_type": "qwen3_moe", "vocab_size": 512, "hidden_size": 128,
                  "intermediate_size": 256, "moe_intermediate_size": 64, "num_hidden_layers": 2,
                  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
                  "num_experts": 8, "num_experts_per_tok": 2},
    "mixtral-moe": {"model_type": "mixtral", "vocab_size": 512, "hidden_size": 128,
                    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                    "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2},
    # DeepSeek-V3's blocks: multi-head latent attention (query and kv latents with their
    # RMSNorms, decoupled rotary part), a dense first layer, then routed + shared experts.
    "deepseek-mla-moe": {"model_type": "deepseek_v3", "vocab_size": 512, "hidden_size": 128,
                         "intermediate_size": 256, "moe_intermediate_size": 64,
                         "num_hidden_layers": 3, "num_attention_heads": 4,
                         "num_key_value_heads": 4, "q_lora_rank": 64, "kv_lora_rank": 32,
                         "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
                         "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2,
                         "first_k_dense_replace": 1, "norm_topk_prob": True},
    # GPT-OSS: attention with biases and a sink logit per head, experts with biases and a
    # clamped SwiGLU stacked in one parameter, a router with a bias.
    "gpt-oss-sinks-moe": {"model_type": "gpt_oss", "vocab_size": 512, "hidden_size": 128,
                          "intermediate_size": 64, "num_hidden_layers": 2,
                          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
                          "num_local_experts": 8, "num_experts_per_tok": 2,
                          "sliding_window": 64},
}

# (arch, micro_batch, seq_len, precision, optimizer, recompute); "full/N" checkpoints every
# Nth layer only (torchtitan's selective_ac_option = "N").
GRID = [
    ("llama-gqa", 2, 128, "fp32", "adamw", "full/2"),
    ("gpt2", 2, 128, "bf16-pure", "adamw", "full/2"),
    ("qwen3-moe", 2, 128, "fp32", "adamw", "full/2"),
    ("llama-mha", 2, 128, "bf16", "adamw", "full/2"),
    ("llama-mha", 1, 128, "fp32", "adamw", "none"),
    ("llama-mha", 2, 128, "fp32", "adamw", "selective"),
    ("llama-mha", 2, 128, "fp32", "adamw", "full"),
    ("llama-mha", 4, 64, "fp32", "sgd", "none"),
    ("llama-mha", 1, 256, "fp32", "sgdm", "full"),
    ("llama-mha", 2, 128, "bf16-pure", "adamw", "none"),
    ("llama-mha", 2, 128, "bf16-pure", "adamw", "full"),
    ("llama-gqa", 1, 128, "fp32", "adamw", "none"),
    ("llama-gqa", 2, 256, "fp32", "adam", "selective"),
    ("llama-gqa", 4, 64, "fp32", "adamw", "full"),
    ("llama-gqa", 2, 128, "bf16-pure", "sgdm", "selective"),
    ("mistral-gqa-tied", 2, 128, "fp32", "adamw", "none"),
    ("mistral-gqa-tied", 1, 256, "fp32", "sgd", "full"),
    ("mistral-gqa-tied", 3, 96, "bf16-pure", "adamw", "none"),
    ("qwen2-bias", 2, 128, "fp32", "adamw", "none"),
    ("qwen2-bias", 2, 64, "fp32", "adamw", "full"),
    ("qwen2-bias", 1, 192, "bf16-pure", "adam", "selective"),
    ("gpt2", 1, 128, "fp32", "adamw", "none"),
    ("gpt2", 2, 128, "fp32", "adamw", "selective"),
    ("gpt2", 2, 128, "fp32", "adamw", "full"),
    ("gpt2", 4, 64, "fp32", "sgdm", "none"),
    ("gpt2", 2, 256, "bf16-pure", "adamw", "none"),
    ("gpt2", 1, 128, "bf16-pure", "sgd", "full"),
    ("gpt2-relu-nodrop", 2, 128, "fp32", "adamw", "none"),
    ("gpt2-relu-nodrop", 4, 64, "fp32", "adam", "full"),
    ("gpt2-relu-nodrop", 2, 128, "bf16-pure", "adamw", "selective"),
    ("neox-parallel", 2, 128, "fp32", "adamw", "none"),
    ("neox-parallel", 1, 256, "fp32", "adamw", "selective"),
    ("neox-parallel", 2, 64, "fp32", "sgdm", "full"),
    ("neox-parallel", 2, 128, "bf16-pure", "adamw", "none"),
    ("llama-mha", 8, 32, "fp32", "adamw", "none"),
    ("llama-gqa", 1, 512, "fp32", "sgd", "none"),
    # Mixed precision as the HF Trainer runs it: torch.autocast(bf16) over fp32 weights.
    ("llama-mha", 2, 128, "bf16", "adamw", "none"),
    ("llama-mha", 2, 128, "bf16", "adamw", "full"),
    ("llama-gqa", 2, 128, "bf16", "adamw", "selective"),
    ("mistral-gqa-tied", 2, 96, "bf16", "sgdm", "none"),
    ("qwen2-bias", 1, 256, "bf16", "adamw", "full"),
    ("gpt2", 2, 128, "bf16", "adamw", "none"),
    ("gpt2", 2, 128, "bf16", "adam", "full"),
    ("neox-parallel", 2, 128, "bf16", "adamw", "selective"),
    ("qwen3-qknorm", 2, 128, "fp32", "adamw", "none"),
    ("qwen3-qknorm", 2, 128, "bf16-pure", "adamw", "selective"),
    ("qwen3-qknorm", 1, 128, "fp32", "adamw", "full"),
    ("qwen3-qknorm", 2, 128, "bf16", "adamw", "none"),
    ("olmo2-postnorm", 2, 128, "fp32", "adamw", "none"),
    ("olmo2-postnorm", 2, 128, "bf16-pure", "sgdm", "selective"),
    ("olmo2-postnorm", 1, 128, "fp32", "adamw", "full"),
    ("olmo2-postnorm", 2, 128, "bf16", "adamw", "none"),
    ("gemma2-sandwich", 2, 128, "fp32", "adamw", "none"),
    ("gemma2-sandwich", 2, 128, "bf16-pure", "adamw", "selective"),
    ("gemma2-sandwich", 1, 128, "fp32", "adam", "full"),
    ("gemma2-sandwich", 2, 128, "bf16", "adamw", "none"),
    ("gemma3-sandwich-qknorm", 2, 128, "fp32", "adamw", "none"),
    ("gemma3-sandwich-qknorm", 2, 128, "bf16-pure", "adamw", "none"),
    ("gemma3-sandwich-qknorm", 1, 128, "fp32", "sgd", "full"),
    ("gemma3-sandwich-qknorm", 2, 128, "bf16", "adamw", "selective"),
    ("qwen3-moe", 2, 128, "fp32", "adamw", "none"),
    ("qwen3-moe", 2, 128, "bf16-pure", "adamw", "selective"),
    ("qwen3-moe", 1, 128, "fp32", "adamw", "full"),
    ("qwen3-moe", 2, 128, "bf16", "adamw", "none"),
    ("mixtral-moe", 2, 128, "fp32", "adamw", "none"),
    ("mixtral-moe", 2, 128, "bf16-pure", "sgdm", "selective"),
    ("mixtral-moe", 1, 128, "fp32", "adamw", "full"),
    ("mixtral-moe", 2, 128, "bf16", "adamw", "none"),
    ("deepseek-mla-moe", 2, 128, "fp32", "adamw", "none"),
    ("deepseek-mla-moe", 2, 128, "bf16-pure", "adamw", "selective"),
    ("deepseek-mla-moe", 1, 128, "fp32", "adamw", "full"),
    ("deepseek-mla-moe", 2, 128, "bf16", "adamw", "none"),
    ("gpt-oss-sinks-moe", 2, 128, "fp32", "adamw", "none"),
    ("gpt-oss-sinks-moe", 2, 128, "bf16-pure", "adamw", "selective"),
    ("gpt-oss-sinks-moe", 1, 128, "fp32", "adamw", "full"),
    ("gpt-oss-sinks-moe", 2, 128, "bf16", "adamw", "none"),
]

# Fine-tuning (issue 17): PEFT LoRA adapters over a frozen bf16 base, and QLoRA (4-bit NF4
# layers, fp32 everything else, as prepare_model_for_kbit_training leaves it), under the HF
# Trainer's autocast. The seventh field: the fine-tuning settings. QLoRA with full
# recomputation is predicted within 4% only (its backward's fp32 gradients through the 4-bit
# layers are approximated): a known gap, with its own bound rather than the 3%.
LORA, QLORA = {"finetune": "lora"}, {"finetune": "qlora"}
# zero_grad(set_to_none=False), PyTorch < 2.0's default: every gradient is allocated from the
# step's start (measured after two steps that allocated them).
KEEP = {"keep_grads": True}
GRID += [
    ("llama-mha", 2, 128, "fp32", "adamw", "none", KEEP),
    ("gpt2", 2, 128, "bf16", "adamw", "none", KEEP),
    ("llama-gqa", 4, 64, "fp32", "adamw", "full", KEEP),
    ("llama-mha", 2, 128, "bf16", "adamw", "none", dict(LORA, keep_grads=True)),
    ("llama-mha", 2, 128, "bf16", "adamw", "none", LORA),
    ("llama-mha", 2, 128, "bf16", "adamw", "full", LORA),
    ("llama-gqa", 2, 128, "bf16", "adamw", "none", dict(LORA, lora_targets="attention")),
    ("llama-gqa", 2, 128, "bf16", "adamw", "none", dict(LORA, lora_dropout=0.1)),
    ("llama-gqa", 2, 128, "fp32", "adamw", "none", dict(LORA, lora_targets="q_proj,v_proj")),
    ("llama-gqa", 2, 128, "fp32", "sgd", "full", LORA),
    ("mistral-gqa-tied", 2, 96, "bf16", "adamw", "none", dict(LORA, lora_targets="q_proj,v_proj")),
    ("gpt2", 2, 128, "bf16", "adamw", "none", LORA),
    ("gemma2-sandwich", 2, 128, "bf16", "adamw", "none", LORA),
    ("gemma2-sandwich", 2, 128, "bf16", "adamw", "full", LORA),
    ("qwen3-qknorm", 2, 128, "bf16", "adamw", "none", LORA),
    ("llama-mha", 2, 128, "bf16", "adamw", "none", QLORA),
    ("llama-gqa", 2, 128, "bf16", "adamw", "none", dict(QLORA, lora_rank=16, lora_dropout=0.05)),
    ("qwen2-bias", 2, 128, "bf16", "adamw", "none", dict(QLORA, double_quant=False)),
    ("qwen3-qknorm", 2, 128, "bf16", "adamw", "none", QLORA),
    ("llama-mha", 2, 128, "bf16", "adamw", "full", QLORA),
    ("llama-gqa", 2, 128, "bf16", "adamw", "full", dict(QLORA, lora_targets="attention")),
    ("qwen2-bias", 1, 256, "bf16", "adamw", "full", dict(QLORA, lora_rank=16, lora_dropout=0.05)),
    # Dropout's backward under checkpointing (its output's and its input's fp32 gradients
    # together), and dropout in fp32 (its output replaces o_proj's and down_proj's input).
    ("llama-mha", 2, 128, "bf16", "adamw", "full", dict(LORA, lora_dropout=0.1)),
    ("qwen3-qknorm", 2, 128, "bf16", "adamw", "full", dict(LORA, lora_dropout=0.05)),
    ("llama-gqa", 2, 128, "fp32", "adamw", "none", dict(LORA, lora_dropout=0.1)),
    ("gpt2", 2, 128, "fp32", "adamw", "none", dict(LORA, lora_dropout=0.1)),
    ("llama-mha", 2, 128, "fp32", "adamw", "full", dict(LORA, lora_dropout=0.1)),
]
# fp32 adapters (PEFT's default dtype) over a model loaded in bf16 and trained without autocast:
# each adapter keeps an fp32 copy of its input.
GRID += [
    ("llama-mha", 2, 128, "bf16-pure", "adamw", "none", LORA),
    ("llama-mha", 2, 128, "bf16-pure", "adamw", "full", LORA),
    ("llama-gqa", 2, 128, "bf16-pure", "adamw", "none", dict(LORA, lora_targets="q_proj,v_proj")),
    ("llama-gqa", 2, 128, "bf16-pure", "adamw", "none", dict(LORA, lora_dropout=0.1)),
    ("qwen3-qknorm", 2, 128, "bf16-pure", "adamw", "full", LORA),
    ("gpt2", 2, 128, "bf16-pure", "adamw", "none", LORA),
    ("llama-mha", 2, 128, "bf16-pure", "adamw", "full", dict(LORA, lora_dropout=0.1)),
    ("gpt2", 2, 128, "bf16-pure", "adamw", "full", dict(LORA, lora_dropout=0.1)),
]
# 16-bit adapters in a pure bf16 run (the model cast to bf16 after get_peft_model, as the QLoRA
# and fsdp_qlora scripts do): the adapters read the input itself, dropout's output is 16-bit.
BF16_LORA = dict(LORA, lora_dtype="bf16")
GRID += [
    ("llama-mha", 2, 128, "bf16-pure", "adamw", "none", BF16_LORA),
    ("llama-mha", 2, 128, "bf16-pure", "adamw", "none", dict(BF16_LORA, lora_dropout=0.1)),
    ("llama-mha", 2, 128, "bf16-pure", "adamw", "full", dict(BF16_LORA, lora_dropout=0.1)),
    ("gpt2", 2, 128, "bf16-pure", "adamw", "none", dict(BF16_LORA, lora_dropout=0.1)),
    # GPT-NeoX's parallel block: its second norm's output goes only to the frozen MLP.
    ("neox-parallel", 2, 128, "bf16-pure", "adamw", "none", dict(BF16_LORA, lora_dropout=0.1)),
    ("neox-parallel", 2, 128, "bf16-pure", "adamw", "none", BF16_LORA),
    ("qwen3-qknorm", 2, 128, "bf16-pure", "adamw", "full",
     dict(BF16_LORA, lora_dropout=0.1, lora_targets="q_proj,k_proj,v_proj,up_proj,down_proj,gate_proj")),
]
# LoRA on the output layer too (`lm_head` among PEFT's target_modules; litgpt's lora_head):
# fp32 adapters under autocast, over a pure-bf16 base (x.to(fp32) and an fp32 sum cast back),
# 16-bit adapters, a tied head, QLoRA.
HEAD = "all-linear,lm_head"
GRID += [
    ("llama-bigvocab", 2, 128, "bf16", "adamw", "none", dict(LORA, lora_targets=HEAD, lora_dropout=0.1)),
    ("llama-bigvocab", 2, 128, "bf16-pure", "adamw", "none", dict(LORA, lora_targets="q_proj,v_proj,lm_head")),
    ("llama-bigvocab", 2, 128, "bf16-pure", "adamw", "full", dict(BF16_LORA, lora_targets=HEAD, lora_dropout=0.1)),
    ("llama-bigvocab", 2, 128, "fp32", "adamw", "none", dict(LORA, lora_targets="attention,lm_head")),
    ("mistral-gqa-tied", 2, 96, "bf16-pure", "adamw", "none", dict(BF16_LORA, lora_targets=HEAD)),
    ("llama-bigvocab", 2, 128, "bf16", "adamw", "none", dict(QLORA, lora_targets=HEAD)),
]
# Gradient accumulation: several micro-batches a step, the gradients of the first alive while the
# next run (the HF Trainer's gradient_accumulation_steps; predicted with --global-batch).
GRID += [
    ("llama-mha", 2, 128, "fp32", "adamw", "none", {"accum": 2}),
    ("gpt2", 2, 128, "bf16", "adamw", "none", {"accum": 2}),
    ("llama-gqa", 4, 64, "fp32", "adamw", "full", {"accum": 3}),
    ("mistral-gqa-tied", 2, 128, "bf16-pure", "adamw", "selective", {"accum": 2}),
    ("qwen3-moe", 2, 128, "bf16", "adamw", "none", {"accum": 2}),
    ("llama-mha", 2, 128, "bf16", "adamw", "none", dict(LORA, accum=2)),
]
# A loop that keeps only the loss when backward starts (the HF Trainer's compute_loss,
# torchtune's `del logits`): the logits are freed before backward (predicted with --drop-logits).
DROP = {"drop_logits": True}
GRID += [
    ("llama-mha", 2, 128, "fp32", "adamw", "none", DROP),
    ("gpt2", 2, 128, "bf16", "adamw", "none", DROP),
    ("llama-gqa", 4, 64, "fp32", "adamw", "full", DROP),
    ("gemma2-sandwich", 2, 128, "bf16", "adamw", "none", DROP),
    ("qwen3-moe", 2, 128, "bf16", "adamw", "none", dict(DROP, accum=2)),
]


# transformers' sliced causal-LM losses (predicted with --transformers): before 4.46 the model
# returns fp32 logits that the loop keeps and the loss slices; 4.46-4.48 the loss slices its own
# fp32 copy (tools/measure_memory.py's causal_loss).
RELEASE = {"sliced-model": "4.38", "sliced-loss": "4.46"}
GRID += [
    ("llama-mha", 2, 128, "bf16-pure", "adamw", "none", {"hf_loss": "sliced-model"}),
    ("gpt2", 2, 128, "fp32", "adamw", "none", {"hf_loss": "sliced-model"}),
    ("llama-gqa", 4, 64, "bf16-pure", "adamw", "full", dict(DROP, hf_loss="sliced-model")),
    ("llama-gqa", 2, 128, "bf16", "adamw", "full", {"hf_loss": "sliced-loss"}),
    ("mistral-gqa-tied", 2, 128, "bf16", "adamw", "none", dict(DROP, hf_loss="sliced-loss")),
    ("llama-mha", 2, 128, "bf16", "adamw", "none", dict(LORA, hf_loss="sliced-model")),
]
# PyTorch >= 2.2's mean keeps no input (pytorch/pytorch#109935), so an RMSNorm keeps no fp32 x^2:
# measured with the tool's stand-in for that mean (this PyTorch may be older), predicted with
# --torch 2.2 (the other cases pass the release they run on).
T22 = {"torch22_mean": True}
GRID += [
    ("llama-gqa", 2, 128, "fp32", "adamw", "none", T22),
    ("llama-mha", 2, 128, "bf16-pure", "adamw", "selective", T22),
    ("llama-gqa", 2, 128, "bf16", "adamw", "none", T22),
    ("llama-gqa", 4, 64, "fp32", "adamw", "full", T22),
    ("qwen3-qknorm", 2, 128, "bf16-pure", "adamw", "none", T22),
    ("gemma2-sandwich", 2, 128, "bf16", "adamw", "none", T22),
    ("llama-gqa", 2, 128, "bf16", "adamw", "none", dict(LORA, lora_dropout=0.1, **T22)),
    ("llama-mha", 2, 128, "bf16", "adamw", "none", dict(QLORA, **T22)),
]


def finetune_flags(ft):
    keep = ["--keep-grads"] if ft.get("keep_grads") else []
    keep += ["--drop-logits"] if ft.get("drop_logits") else []
    keep += ["--transformers", RELEASE[ft["hf_loss"]]] if ft.get("hf_loss") else []
    if "finetune" not in ft:
        return keep
    flags = keep + ["--finetune", ft["finetune"], "--lora-rank", str(ft.get("lora_rank", 8)),
             "--lora-dropout", str(ft.get("lora_dropout", 0.0)),
             "--lora-targets", ft.get("lora_targets", "all-linear")]
    flags += ["--lora-dtype", ft["lora_dtype"]] if ft.get("lora_dtype") else []
    return flags + ([] if ft.get("double_quant", True) else ["--no-double-quant"])


def finetune_kwargs(ft):
    return {k: v for k, v in ft.items() if k != "tolerance"}


def finetune_name(ft):
    keep = " keep-grads" if ft.get("keep_grads") else ""
    keep += " torch-2.2-mean" if ft.get("torch22_mean") else ""
    keep += f" accum {ft['accum']}" if ft.get("accum", 1) > 1 else ""
    keep += " drop-logits" if ft.get("drop_logits") else ""
    keep += f" {ft['hf_loss']}" if ft.get("hf_loss") else ""
    if "finetune" not in ft:
        return "full" + keep
    return keep.strip() + " " * bool(keep) + " ".join([ft["finetune"], f"r{ft.get('lora_rank', 8)}", ft.get("lora_targets", "all-linear")] +
                    ([f"dropout {ft['lora_dropout']}"] if ft.get("lora_dropout") else []) +
                    ([f"{ft['lora_dtype']} adapters"] if ft.get("lora_dtype") else []) +
                    ([] if ft.get("double_quant", True) else ["no-double-quant"]))


def split_recompute(recompute):
    """("full", 2) for "full/2"; (recompute, 1) otherwise."""
    kind, _, every = recompute.partition("/")
    return kind, int(every or 1)


def predict(frenzy, config_path, mb, seq, precision, optimizer, recompute, ft=None):
    kind, every = split_recompute(recompute)
    cmd = [frenzy, "predict", "--model", config_path, "--micro-batch", str(mb), "--seq-len",
           str(seq), "--precision", precision, "--optimizer", optimizer, "--recompute", kind,
           "--recompute-every", str(every),
           "--framework", "hf", "--device", "cpu", "--no-flash-attn", "--json",
           # what autograd keeps depends on the release measured with (torch.mean, 2.2)
           "--torch", "2.2" if ft.get("torch22_mean") else measure_memory.torch.__version__]
    cmd += finetune_flags(ft)
    if ft and ft.get("accum", 1) > 1:  # predict takes the step's batch: micro-batch x steps
        cmd += ["--global-batch", str(mb * ft["accum"])]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("frenzy")
    ap.add_argument("--csv")
    ap.add_argument("--quick", action="store_true", help="every fourth case only")
    args = ap.parse_args()
    grid = GRID[::4] if args.quick else GRID
    rows, failures, phases_agree = [], 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for name, cfg in ARCHS.items():
            paths[name] = os.path.join(tmp, name + ".json")
            with open(paths[name], "w") as f:
                json.dump(cfg, f)
        for case in grid:
            arch, mb, seq, precision, optimizer, recompute = case[:6]
            ft = case[6] if len(case) > 6 else {}
            m = measure_memory.measure(ARCHS[arch], micro_batch=mb, seq_len=seq,
                                       precision=precision, optimizer=optimizer,
                                       recompute=split_recompute(recompute)[0],
                                       recompute_every=split_recompute(recompute)[1],
                                       device="cpu", **finetune_kwargs(ft))
            p = predict(args.frenzy, paths[arch], mb, seq, precision, optimizer, recompute, ft)
            err = (p["peak_bytes"] - m["peak_bytes"]) / m["peak_bytes"]
            phase_ok = measured_name(p["peak_phase"]) == m["peak_phase"]
            phases_agree += 1 if phase_ok else 0
            ok = abs(err) <= ft.get("tolerance", TOLERANCE) and phase_ok
            failures += 0 if ok else 1
            rows.append({"arch": arch, "micro_batch": mb, "seq_len": seq, "precision": precision,
                         "optimizer": optimizer, "recompute": recompute,
                         "finetune": finetune_name(ft),
                         "measured_bytes": m["peak_bytes"], "measured_phase": m["peak_phase"],
                         "predicted_bytes": p["peak_bytes"], "predicted_phase": p["peak_phase"],
                         "error_pct": round(100 * err, 3)})
            print(f"{'ok ' if ok else 'BAD'} {arch:>17} mb={mb} s={seq:<4} {precision:>9} "
                  f"{finetune_name(ft):>24} "
                  f"{optimizer:>5} {recompute:>9}: measured {m['peak_bytes']:>10} "
                  f"({m['peak_phase']}) predicted {p['peak_bytes']:>10} ({p['peak_phase']}) "
                  f"{100 * err:+.2f}%{'' if phase_ok else ' PHASE DIFFERS'}", flush=True)
    errs = [abs(r["error_pct"]) for r in rows]
    print(f"{len(rows)} cases: mean |error| {sum(errs) / len(errs):.2f}%, worst {max(errs):.2f}%, "
          f"accuracy {100 - sum(errs) / len(errs):.2f}%; peak phase agrees in {phases_agree} of "
          f"{len(rows)} (measured phases: {', '.join(MEASURED_PHASES)})")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            w.writerows(rows)
    print(f"{len(rows) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
