#!/usr/bin/env python3
"""MARP's synthetic step against real allocation sequences, on the CPU.

Where MARP replays a step through its caching-allocator model (the sliced loss chain of HF
releases before 4.49, batches of varying length; docs/memory-model.md §1) it builds the step's
allocations and frees from its activation account (src/memory/step_events.h). This script
measures what a real step allocates, op by op, and compares the reserve both leave:

  * real: `tools/measure_memory.py --device cpu --events-out F` (PyTorch's profiler, one
    training step of a model built from the config; or, with a lengths file, an epoch of one
    batch a length) replayed by `frenzy_alloc_replay F 3`: reserved minus the allocated peak;
  * MARP: `frenzy predict ... --json`, the rank's `step_excess_bytes` (the same difference for
    its synthetic step) or, for an epoch, `length_reserve_bytes.median` (the epoch's reserve over
    the fixed-length step's at the longest length; the real figure is then the epoch's replayed
    reserve less the fixed-length step's at that length).

Both replays use the same allocator model, so the comparison isolates the step's sequence.
The configs and length files are under bench/step_events/ (two small Llama models; the CPU runs
are fp32, eager attention, the loss as transformers computed it before 4.46, AdamW one tensor at
a time).

usage: bench/step_events_check.py FRENZY_BIN ALLOC_REPLAY_BIN [--before FRENZY_BIN] [--python PY]
       [--only NAME ...]

--before adds a column with another build's MARP (the real sequences are measured once).
--events-dir DIR keeps the real sequences there and reuses them on the next run.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(HERE, "step_events")

# name, config, micro-batch, sequence (or None: the epoch of the lengths file), recompute,
# extra measure_memory flags, extra predict flags
CASES = [
    ("h512-2x512-ckpt", "llama-h512", 2, 512, "full", [], []),
    ("h512-1x466-ckpt", "llama-h512", 1, 466, "full", [], []),
    ("h512-1x466", "llama-h512", 1, 466, "none", [], []),
    ("h512-epoch-ckpt", "llama-h512", 1, None, "full", [], []),
    ("h512-epoch", "llama-h512", 1, None, "none", [], []),
    ("h768-2x384-ckpt", "llama-h768-gqa", 2, 384, "full", [], []),
    ("h768-1x340", "llama-h768-gqa", 1, 340, "none", [], []),
    ("h768-epoch", "llama-h768-gqa", 1, None, "none", [], []),
    ("h512-lora-2x466-ckpt", "llama-h512", 2, 466, "full",
     ["--finetune", "lora", "--lora-rank", "8", "--lora-targets", "q_proj,k_proj,v_proj",
      "--dropout", "off"],
     ["--finetune", "lora", "--lora-rank", "8", "--lora-targets", "q_proj,k_proj,v_proj"]),
]


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return p.stdout


def lengths_of(cfg):
    with open(os.path.join(DATA, cfg + ".lengths")) as f:
        return [int(x) for x in f.read().split()]


def real_reserve(py, replay, cfg, mb, seq, recompute, extra, events, lengths=None):
    cmd = [py, os.path.join(ROOT, "tools", "measure_memory.py"), "--config",
           os.path.join(DATA, cfg + ".json"), "--device", "cpu", "--precision", "fp32",
           "--attn", "eager", "--hf-loss", "sliced-model", "--micro-batch", str(mb),
           "--recompute", recompute, *extra]
    if lengths:
        cmd += ["--lengths", ",".join(map(str, lengths)), "--seq-len", str(max(lengths))]
    else:
        cmd += ["--seq-len", str(seq)]
    if not os.path.exists(events):
        run(cmd + ["--events-out", events + ".part"])
        os.replace(events + ".part", events)
    r = json.loads(run([replay, events, "3"]))
    return r["reserved_bytes"], r["peak_allocated_bytes"]


def marp(frenzy, cfg, mb, seq, recompute, extra, lengths_file=None):
    cmd = [frenzy, "predict", "--model", os.path.join(DATA, cfg + ".json"), "--framework", "hf",
           "--precision", "fp32", "--no-flash-attn", "--transformers", "4.38", "--no-foreach",
           "--micro-batch", str(mb), "--seq-len", str(seq), "--recompute", recompute, "--json",
           *extra]
    if lengths_file:
        cmd += ["--length-file", lengths_file]
    rank = json.loads(run(cmd))["ranks"][0]
    if lengths_file:
        return rank.get("length_reserve_bytes", {}).get("median", 0)
    return rank.get("step_excess_bytes", 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("frenzy")
    ap.add_argument("alloc_replay")
    ap.add_argument("--python", default="/usr/bin/python3", help="a Python with torch")
    ap.add_argument("--only", action="append", help="case names [all]")
    ap.add_argument("--before", help="another frenzy build, for a column of its own")
    ap.add_argument("--events-dir", help="keep the real sequences here, and reuse them")
    a = ap.parse_args()
    mb_ = 1e6
    print("| case | real | MARP |" + (" before |" if a.before else ""))
    print("|---|---|---|" + ("---|" if a.before else ""))
    with tempfile.TemporaryDirectory() as tmp:
        keep = a.events_dir or tmp
        os.makedirs(keep, exist_ok=True)
        for name, cfg, mb, seq, rc, mflags, pflags in CASES:
            if a.only and name not in a.only:
                continue
            if seq is None:
                lengths = lengths_of(cfg)
                longest = max(lengths)
                epoch, _ = real_reserve(a.python, a.alloc_replay, cfg, mb, None, rc, mflags,
                                        os.path.join(keep, name + ".txt"), lengths)
                fixed, _ = real_reserve(a.python, a.alloc_replay, cfg, mb, longest, rc, mflags,
                                        os.path.join(keep, name + "-fixed.txt"))
                real = epoch - fixed
                bins = [a.frenzy] + ([a.before] if a.before else [])
                preds = [marp(b, cfg, mb, longest, rc, pflags, os.path.join(DATA, cfg + ".lengths"))
                         for b in bins]
            else:
                reserved, peak = real_reserve(a.python, a.alloc_replay, cfg, mb, seq, rc, mflags,
                                              os.path.join(keep, name + ".txt"))
                real = reserved - peak
                bins = [a.frenzy] + ([a.before] if a.before else [])
                preds = [marp(b, cfg, mb, seq, rc, pflags) for b in bins]
            cols = " | ".join(f"{x / mb_:.1f} MB" for x in preds)
            print(f"| {name} | {real / mb_:.1f} MB | {cols} |", flush=True)


if __name__ == "__main__":
    main()
