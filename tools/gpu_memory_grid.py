#!/usr/bin/env python3
"""One prepared run of real single-GPU memory measurements (needs CUDA and PyTorch >= 2.0).

Runs tools/measure_memory.py's `measure` over a grid of realistic single-GPU training
configurations — GPT-2 XL, OPT-1.3B-shaped, and Llama-style 1B/3B/8B models, several micro-batch
and sequence sizes, with and without recomputation and fused (SDPA) attention, pure bf16 and
mixed bf16 — and writes one CSV row per configuration with the GPU, the date and the measured
max_memory_allocated / max_memory_reserved. Configurations that run out of memory are recorded
as such. Each case runs in a fresh process so that one OOM cannot disturb the next.

Usage: gpu_memory_grid.py OUT.csv [--budget-s 480]
Commit the CSV to data/measurements/ and compare with `frenzy predict --framework hf` (with
`--global-batch micro_batch x accum` where a row accumulates, `--finetune lora --lora-rank 64`
where it fine-tunes, and `--transformers 4.38` / `4.46` where its hf_loss is
sliced-model / sliced-loss).
"""
import argparse
import csv
import datetime
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

MODELS = {
    "gpt2-xl": {"model_type": "gpt2", "n_embd": 1600, "n_layer": 48, "n_head": 25,
                "n_positions": 1024, "vocab_size": 50257},
    "opt-1.3b-shape": {"model_type": "gpt2", "n_embd": 2048, "n_layer": 24, "n_head": 32,
                       "n_positions": 2048, "vocab_size": 50272, "activation_function": "relu",
                       "resid_pdrop": 0.1, "attn_pdrop": 0.0, "embd_pdrop": 0.1},
    "llama-1b": {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192,
                 "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
                 "vocab_size": 128256, "tie_word_embeddings": True},
    "llama-3b": {"model_type": "llama", "hidden_size": 3072, "intermediate_size": 8192,
                 "num_hidden_layers": 28, "num_attention_heads": 24, "num_key_value_heads": 8,
                 "vocab_size": 128256, "tie_word_embeddings": True},
    # Llama-2's vocabulary (32,000) at 1B scale: the sliced loss chains' cases below.
    "llama2-1b-shape": {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5504,
                        "num_hidden_layers": 16, "num_attention_heads": 16,
                        "vocab_size": 32000},
    "llama-8b": {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
                 "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                 "vocab_size": 128256},
}

# (model, micro_batch, seq_len, precision, optimizer, recompute, attn)
GRID = [
    ("gpt2-xl", 1, 1024, "bf16-pure", "adamw", "none", "eager"),
    ("gpt2-xl", 4, 1024, "bf16-pure", "adamw", "none", "sdpa"),
    ("gpt2-xl", 8, 1024, "bf16-pure", "adamw", "full", "sdpa"),
    ("gpt2-xl", 2, 1024, "bf16", "adamw", "selective", "eager"),
    ("gpt2-xl", 4, 1024, "fp32", "adamw", "full", "eager"),
    ("opt-1.3b-shape", 4, 2048, "bf16-pure", "adamw", "none", "sdpa"),
    ("opt-1.3b-shape", 2, 2048, "bf16-pure", "sgdm", "selective", "eager"),
    ("opt-1.3b-shape", 8, 2048, "bf16", "adamw", "full", "sdpa"),
    ("llama-1b", 4, 2048, "bf16-pure", "adamw", "none", "sdpa"),
    ("llama-1b", 2, 4096, "bf16-pure", "adamw", "none", "eager"),
    ("llama-1b", 8, 4096, "bf16-pure", "adamw", "full", "sdpa"),
    ("llama-1b", 4, 2048, "bf16", "adamw", "selective", "eager"),
    ("llama-3b", 2, 4096, "bf16-pure", "adamw", "none", "sdpa"),
    ("llama-3b", 4, 4096, "bf16-pure", "adamw", "full", "sdpa"),
    ("llama-3b", 1, 8192, "bf16-pure", "adamw", "selective", "eager"),
    ("llama-8b", 1, 4096, "bf16-pure", "adamw", "full", "sdpa"),
    ("llama-8b", 2, 8192, "bf16-pure", "adamw", "full", "sdpa"),
    ("llama-8b", 1, 2048, "bf16-pure", "sgd", "none", "sdpa"),
    # Gradient accumulation (the eighth field: measure()'s extra settings): the gradients of the
    # first micro-batch held through the next ones; also shows the reserve across micro-batches.
    ("llama-1b", 4, 2048, "bf16-pure", "adamw", "none", "sdpa", {"accum": 4}),
    ("llama-3b", 2, 4096, "bf16", "adamw", "full", "sdpa", {"accum": 2}),
    ("gpt2-xl", 4, 1024, "bf16-pure", "adamw", "none", "sdpa", {"accum": 8}),
    # transformers' sliced loss chains (predict --transformers 4.38 / 4.46), LoRA under the HF
    # Trainer's autocast: the reserved reading MARP replays, beside the padded chain; at 10
    # sequences a shorter block leaves more than 1 MiB when a full-size tensor is cut from it.
    ("llama2-1b-shape", 4, 2048, "bf16", "adamw", "full", "sdpa",
     {"finetune": "lora", "lora_rank": 64, "hf_loss": "sliced-model"}),
    ("llama2-1b-shape", 10, 2048, "bf16", "adamw", "full", "sdpa",
     {"finetune": "lora", "lora_rank": 64, "hf_loss": "sliced-model"}),
    ("llama2-1b-shape", 10, 2048, "bf16", "adamw", "full", "sdpa",
     {"finetune": "lora", "lora_rank": 64, "hf_loss": "sliced-loss"}),
    ("llama2-1b-shape", 10, 2048, "bf16", "adamw", "full", "sdpa",
     {"finetune": "lora", "lora_rank": 64}),
]

CHILD = """
import json, sys
sys.path.insert(0, {here!r})
import measure_memory, torch
args = json.loads(sys.argv[1])
try:
    r = measure_memory.measure(args.pop("doc"), steps=3, device="cuda", **args)
    print(json.dumps(r))
except torch.cuda.OutOfMemoryError as e:
    print(json.dumps({{"oom": True}}))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--budget-s", type=float, default=480)
    a = ap.parse_args()
    start = time.time()
    fields = ["model", "micro_batch", "seq_len", "precision", "optimizer", "recompute", "attn",
              "accum", "finetune", "hf_loss", "gpu", "date", "peak_bytes", "peak_reserved_bytes",
              "params", "note"]
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for case in GRID:
            model, mb, seq, prec, opt, rc, attn = case[:7]
            extra = case[7] if len(case) > 7 else {}
            if time.time() - start > a.budget_s:
                print("time budget spent; stopping", flush=True)
                break
            args = {"doc": MODELS[model], "micro_batch": mb, "seq_len": seq, "precision": prec,
                    "optimizer": opt, "recompute": rc, "attn": attn, **extra}
            row = {"model": model, "micro_batch": mb, "seq_len": seq, "precision": prec,
                   "optimizer": opt, "recompute": rc, "attn": attn,
                   "accum": extra.get("accum", 1), "finetune": extra.get("finetune", "full"),
                   "hf_loss": extra.get("hf_loss", "padded"),
                   "date": datetime.date.today().isoformat()}
            p = subprocess.run([sys.executable, "-c", CHILD.format(here=HERE), json.dumps(args)],
                               capture_output=True, text=True, timeout=300)
            try:
                r = json.loads(p.stdout.strip().splitlines()[-1])
            except (IndexError, json.JSONDecodeError):
                row["note"] = "failed: " + p.stderr.strip()[-300:]
                r = {}
            if r.get("oom"):
                row["note"] = "out of memory"
            elif r:
                row.update(gpu=r.get("gpu"), peak_bytes=r["peak_bytes"],
                           peak_reserved_bytes=r["peak_reserved_bytes"], params=r["params"])
            w.writerow(row)
            f.flush()
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
