#!/usr/bin/python3
"""tools/gpu_variable_lengths.py without a GPU: its length files and batching, and that MARP reads
the files it writes (the comparison a GPU session runs).

Batching by hand: samples [5, 9, 3, 12, 7] with micro-batch 2 and longest length 8 give, cut,
[5, 9->8, 3, 12->8, 7] -> batches [8, 8, 7]; dropped, [5, 3, 7] -> batches [5, 7].

usage: gpu_variable_lengths_test.py FRENZY_BIN
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import gpu_variable_lengths as g  # noqa: E402

failures = []
if g.batch_lengths([5, 9, 3, 12, 7], 2, 8, False) != [8, 8, 7]:
    failures.append("cut batching")
if g.batch_lengths([5, 9, 3, 12, 7], 2, 8, True) != [5, 7]:
    failures.append("dropped batching")
a = g.sample_lengths(1200.0, 900.0, 20000, seed=1)
if a != g.sample_lengths(1200.0, 900.0, 20000, seed=1) or min(a) < 1:
    failures.append("draws: the same for a seed, at least 1")
if abs(sum(a) / len(a) - 1200.0) > 0.02 * 1200.0:
    failures.append(f"draws' mean {sum(a) / len(a):.0f}, want 1200 within 2%")

with tempfile.TemporaryDirectory() as d:
    path = g.write_lengths(d, "t", [300, 900, 2048, 5000])
    cfg = os.path.join(d, "config.json")
    with open(cfg, "w") as f:
        json.dump(g.MODELS["llama-1b"], f)
    out = subprocess.run([sys.argv[1], "predict", "--model", cfg, "--framework", "hf",
                          "--seq-len", "2048", "--recompute", "full", "--precision",
                          "bf16-pure", "--drop-logits", "--length-file", path, "--drop-long",
                          "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        failures.append("frenzy refused the length file: " + out.stderr.strip())
    else:
        p = json.loads(out.stdout)
        rank = p["ranks"][0]["length_reserve_bytes"]
        # 5000 is dropped: three batches, 300 then 900 then 2048, each longer than the last.
        if rank["batches"] != 3 or rank["orders"] != 1:
            failures.append(f"expected 3 batches in the file's order, got {rank}")
        if not p["length_reserved_bytes"] > p["peak_reserved_bytes"]:
            failures.append("shorter batches before the longest must leave segments behind")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("ok")
