#!/usr/bin/env python3
"""One prepared GPU run: what an epoch of batches of varying length reserves (needs CUDA).

MARP's `predict --length-file` replays a dataset's own sample lengths, in order, through its
caching-allocator model (src/memory/variable_lengths.h). This script measures the same thing on
a real GPU: for each case it draws sample lengths (a gamma of the case's mean and spread, seeded),
writes them to a length file, trains one epoch of micro-batches padded to their longest sample
with tools/measure_memory.py's models (HF eager structure, random weights, nothing downloaded)
and records `max_memory_reserved` / `max_memory_allocated` over the epoch, beside the same
model's reading over two steps at the longest length. Each run is a fresh process.

usage: gpu_variable_lengths.py OUT_DIR [--budget-s 480]      (on the GPU machine)
       gpu_variable_lengths.py --compare FRENZY_BIN OUT_DIR   (anywhere: MARP on the same files)
       gpu_variable_lengths.py --dry-run OUT_DIR              (writes the length files only)
OUT_DIR gets results.csv and one lengths-CASE.txt per case; commit them to
data/measurements/ with the environment the CSV records.
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
sys.path.insert(0, HERE)
from gpu_memory_grid import MODELS  # noqa: E402
import variable_length_reserve as vlr  # noqa: E402

# (name, model, micro_batch, max_len, recompute, attn, mean, sd, samples, drop_long)
CASES = [
    ("l1b-b1-full", "llama-1b", 1, 2048, "full", "sdpa", 1200.0, 900.0, 600, False),
    ("l1b-b1-full-drop", "llama-1b", 1, 2048, "full", "sdpa", 3234.4, 2547.5, 1500, True),
    ("l1b-b4-full", "llama-1b", 4, 2048, "full", "sdpa", 1200.0, 900.0, 800, False),
    ("l1b-b1-none", "llama-1b", 1, 2048, "none", "sdpa", 1200.0, 900.0, 600, False),
    ("l3b-b1-full", "llama-3b", 1, 4096, "full", "sdpa", 2500.0, 2000.0, 400, False),
]
PRECISION, OPTIMIZER = "bf16-pure", "adamw"

CHILD = """
import json, sys
sys.path.insert(0, {here!r})
import measure_memory, torch
args = json.loads(sys.argv[1])
try:
    print(json.dumps(measure_memory.measure(args.pop("doc"), device="cuda", **args)))
except torch.cuda.OutOfMemoryError:
    print(json.dumps({{"oom": True}}))
"""


def sample_lengths(mean, sd, n, seed):
    """n sample lengths, a gamma of this mean and sd (at least 1), in data order."""
    return vlr.gamma_lengths(n, mean, sd, 1, float("inf"), True, seed)


def batch_lengths(lengths, batch, max_len, drop_long):
    """Longer samples dropped or cut to max_len; micro-batches padded to their longest."""
    kept = [x for x in lengths if x <= max_len] if drop_long else [min(x, max_len) for x in lengths]
    return vlr.batch_lengths(kept, batch)


def write_lengths(out_dir, case, lengths):
    path = os.path.join(out_dir, f"lengths-{case}.txt")
    with open(path, "w") as f:
        f.write(f"# {case}: sample lengths in data order\n")
        f.write("\n".join(str(x) for x in lengths) + "\n")
    return path


def run_child(args):
    p = subprocess.run([sys.executable, "-c", CHILD.format(here=HERE), json.dumps(args)],
                       capture_output=True, text=True, timeout=900)
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"error": p.stderr.strip()[-300:]}


def measure(out_dir, budget_s):
    fields = ["case", "model", "micro_batch", "max_len", "recompute", "attn", "precision",
              "optimizer", "samples", "drop_long", "lengths_file", "fixed_peak_bytes",
              "fixed_reserved_bytes", "epoch_peak_bytes", "epoch_reserved_bytes", "gpu", "torch",
              "date", "note"]
    import torch
    start = time.time()
    with open(os.path.join(out_dir, "results.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for case, model, b, max_len, rc, attn, mean, sd, n, drop in CASES:
            if time.time() - start > budget_s:
                print("time budget spent; stopping", flush=True)
                break
            lengths = sample_lengths(mean, sd, n, seed=1)
            path = write_lengths(out_dir, case, lengths)
            common = {"doc": MODELS[model], "micro_batch": b, "precision": PRECISION,
                      "optimizer": OPTIMIZER, "recompute": rc, "attn": attn,
                      "drop_logits": True}
            row = {"case": case, "model": model, "micro_batch": b, "max_len": max_len,
                   "recompute": rc, "attn": attn, "precision": PRECISION, "optimizer": OPTIMIZER,
                   "samples": n, "drop_long": int(drop), "lengths_file": os.path.basename(path),
                   "torch": torch.__version__, "date": datetime.date.today().isoformat()}
            fixed = run_child({**common, "lengths": [max_len, max_len]})
            epoch = run_child({**common, "lengths": batch_lengths(lengths, b, max_len, drop)})
            if fixed.get("oom") or epoch.get("oom"):
                row["note"] = "out of memory"
            elif "error" in fixed or "error" in epoch:
                row["note"] = "failed: " + (fixed.get("error") or epoch.get("error"))
            else:
                row.update(fixed_peak_bytes=fixed["epoch_peak_bytes"],
                           fixed_reserved_bytes=fixed["epoch_reserved_bytes"],
                           epoch_peak_bytes=epoch["epoch_peak_bytes"],
                           epoch_reserved_bytes=epoch["epoch_reserved_bytes"], gpu=epoch["gpu"])
            w.writerow(row)
            f.flush()
            print(row, flush=True)


def compare(frenzy, out_dir):
    """MARP's extra reserve for each measured case, on the same length file."""
    gib = 1 << 30
    print("| case | measured fixed / epoch reserved GiB | measured extra | MARP fixed / epoch "
          "reserved GiB | MARP extra |")
    print("|---|---|---|---|---|")
    with open(os.path.join(out_dir, "results.csv")) as f:
        for r in csv.DictReader(f):
            if not r["epoch_reserved_bytes"]:
                continue
            cfg = os.path.join(out_dir, f"config-{r['model']}.json")
            with open(cfg, "w") as c:
                json.dump(MODELS[r["model"]], c)
            args = [frenzy, "predict", "--model", cfg, "--framework", "hf", "--seq-len",
                    r["max_len"], "--micro-batch", r["micro_batch"], "--precision",
                    r["precision"], "--optimizer", r["optimizer"], "--recompute", r["recompute"],
                    "--drop-logits", "--no-dropout", "--length-file",
                    os.path.join(out_dir, r["lengths_file"]), "--json"]
            if r["attn"] == "eager":
                args.append("--no-flash-attn")
            if r["drop_long"] == "1":
                args.append("--drop-long")
            p = json.loads(subprocess.run(args, capture_output=True, text=True,
                                          check=True).stdout)
            mf, me = int(r["fixed_reserved_bytes"]), int(r["epoch_reserved_bytes"])
            pf, pe = p["peak_reserved_bytes"], p["length_reserved_bytes"]
            print(f"| {r['case']} | {mf / gib:.2f} / {me / gib:.2f} | {(me - mf) / gib:.2f} | "
                  f"{pf / gib:.2f} / {pe / gib:.2f} | {(pe - pf) / gib:.2f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--budget-s", type=float, default=480)
    ap.add_argument("--compare", metavar="FRENZY_BIN")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    if a.compare:
        compare(a.compare, a.out_dir)
    elif a.dry_run:
        for case, _, b, max_len, _, _, mean, sd, n, drop in CASES:
            lengths = sample_lengths(mean, sd, n, seed=1)
            write_lengths(a.out_dir, case, lengths)
            print(case, len(batch_lengths(lengths, b, max_len, drop)), "batches")
    else:
        measure(a.out_dir, a.budget_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
