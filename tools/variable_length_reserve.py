#!/usr/bin/env python3
"""What variable-length batches add to the caching allocator's reserve (a diagnostic).

With a fixed sequence length every step allocates the same blocks, so the caching allocator's
free blocks serve every step after the first. With variable lengths (HF Trainer's default
collator pads each batch to its longest sample) a step longer than every step before it needs
blocks larger than any the allocator holds: it reserves new segments and keeps the old ones (no
`empty_cache`). The largest blocks of a causal-LM step are its vocabulary-sized loss tensors
(b x L x V), so the reserve grows with each *record* batch length and depends on the order the
data comes in, not only on its longest batch.

This script replays, through the independent allocator model of tools/fsdp_init_replay.py, one
epoch of a dataset whose sample lengths follow a gamma distribution with a given mean and
standard deviation (the form every published token statistic gives; a gamma's tail matches the
stated maximum of the ms-swift benchmark's dataset, a log-normal's does not), per batch the
decoder layers' checkpoints (b x L x h, 16-bit, as HF gradient checkpointing keeps them) and the
loss's vocabulary-sized tensors (tools/fsdp_init_replay.hf_loss_chain, in the model's dtype as
Qwen's remote code of 2023 computes it, or upcast as transformers ~4.38's Llama does), and
compares the reserve with that of the same epoch at a fixed length. Several data orders (seeds)
show how much the order alone moves it.

usage: tools/variable_length_reserve.py FRENZY_BIN [--orders 9]
prints, for the held-out ms-swift rows (data/measurements/heldout.csv, ho001-ho004, ho008,
ho009; their dataset: 4,959 samples, 3234.4 +- 2547.5 tokens, min 91, samples longer than
max_length dropped, at most 1,000 samples above max_length 2,048), MARP's reserved prediction, the
extra reserve the replay gives over the orders (median, range) and the measured residual.
Nothing here is fitted; bench/RESULTS.md (2026-12-07) records what it prints. MARP now runs
the replay itself (`frenzy predict --length-mean ...`, src/memory/variable_lengths.h) on its own
step account; this script, with the loss chain tensor by tensor, is the independent version it
was checked against.
"""
import csv
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fsdp_init_replay import GIB, ROOT, CachingAllocator, hf_loss_chain  # noqa: E402
import compare_published  # noqa: E402


def gamma_lengths(n, mean, sd, lo, max_len, drop_long, seed):
    """n sample lengths drawn from a gamma of this mean and sd (at least `lo`); longer than
    max_len: dropped (ms-swift's truncation_strategy 'delete') or cut to max_len."""
    shape, scale = (mean / sd) ** 2, sd * sd / mean
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        length = max(lo, int(rng.gammavariate(shape, scale)))
        if length <= max_len:
            out.append(length)
        elif not drop_long:
            out.append(max_len)
    return out


def batch_lengths(lengths, batch):
    """Each batch padded to its longest sample, in the data's order."""
    return [max(lengths[i:i + batch]) for i in range(0, len(lengths), batch)]


def replay_epoch(batches, b, hidden, layers, vocab, upcast):
    """Reserved bytes after one epoch of these batch lengths: per batch the layers' checkpoints,
    then the loss chain (logits freed when the step ends), then the checkpoints freed in
    backward, last layer first."""
    a = CachingAllocator()
    for length in batches:
        kept = [a.malloc(2 * b * length * hidden) for _ in range(layers)]
        hf_loss_chain(b, length, vocab, keep_logits=False, a=a, upcast=upcast)
        for blk in reversed(kept):
            a.release(blk)
    return a.reserved


def row_setting(r):
    cfg = compare_published.model_arg(r["model"])
    with open(cfg) as f:
        c = json.load(f)
    c = c.get("config", c)  # the kept configs wrap the HF config with its source
    hidden = c.get("hidden_size") or c.get("n_embd")
    layers = c.get("num_hidden_layers") or c.get("n_layer")
    return hidden, layers, c["vocab_size"]


def main():
    frenzy = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build/bin/frenzy")
    orders = int(sys.argv[sys.argv.index("--orders") + 1]) if "--orders" in sys.argv else 9
    with open(os.path.join(ROOT, "data/measurements/heldout.csv")) as f:
        rows = [r for r in csv.DictReader(f)
                if "ms-swift" in r["source_url"] and r["recompute"] == "full"
                and r["precision"] == "bf16"]
    print("| row | b x max_length | measured GiB | MARP reserved GiB | measured - MARP | "
          "variable-length reserve over fixed length: median (range) GiB |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        b, max_len = int(r["micro_batch"]), int(r["seq_len"])
        hidden, layers, vocab = row_setting(r)
        predicted, measured = compare_published.predicted_and_measured(frenzy, r)
        n = 4959 if max_len <= 2048 else 1000  # run_single.py: 1,000 samples above 2,048
        fixed = None
        extra = []
        for seed in range(1, orders + 1):
            lengths = gamma_lengths(n, 3234.4, 2547.5, 91, max_len, True, seed)
            batches = batch_lengths(lengths, b)
            # Qwen's remote code computes its loss in the model's dtype (no upcast).
            varied = replay_epoch(batches, b, hidden, layers, vocab, upcast=False)
            if fixed is None:
                fixed = replay_epoch([max_len] * 2, b, hidden, layers, vocab, upcast=False)
            extra.append(varied - fixed)
        extra.sort()
        print(f"| {r['id']} | {b} x {max_len} | {measured / GIB:.2f} | {predicted / GIB:.2f} | "
              f"{(measured - predicted) / GIB:+.2f} | {extra[len(extra) // 2] / GIB:.2f} "
              f"({extra[0] / GIB:.2f}-{extra[-1] / GIB:.2f}) |")


if __name__ == "__main__":
    main()
