#!/usr/bin/env python3
"""Mixed plans in the scheduler (issue 19): frenzy against frenzy-no-mixed on fragmented
heterogeneous clusters.

A fragmented cluster here is one whose GPU types are each too small, or too few, for the larger
jobs: `frag64` (16 each of A100-40GB, V100-32GB, RTX-3090 and T4) and `sia64` (16 A100-40GB,
24 V100-32GB, 24 T4). The workload per seed is `frenzy workload generate` on the cluster (its
default 125M-70B mix, restricted by the generator to the models some single type holds; 120
jobs at an offered load of 0.9) plus
--big jobs of models that no single type of the cluster holds but a mixed plan does (checked
with `frenzy plan --json` before use), arriving uniformly over the generated jobs' span, each
trained for a duration log-uniform in [4, 24] h on its fastest mixed plan. Without mixed options
those jobs never run. The all-jobs average counts a job a policy did not finish from its
submission to the last finish of either policy in the run (a lower bound for that policy).

Reported per cluster, mean over seeds: jobs finished, average JCT over the jobs both policies
finished (common), over every job (all), p99 (common), average queueing, OOMs, GPU-hours.

usage: bench/mixed_eval.py FRENZY_BIN [--seeds N] [--big N] [--out DIR]
"""
import argparse
import csv
import json
import math
import os
import random
import subprocess
import sys
import tempfile

BIG_MODELS = ["qwen3-32b", "falcon-40b", "mixtral-8x7b", "opt-66b", "llama-2-70b",
              "llama-3.1-70b", "qwen2.5-72b"]
CLUSTERS = ["frag64", "sia64"]
POLICIES = ["frenzy", "frenzy-no-mixed"]
JOBS, LOAD = 120, 0.9


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode not in (0, 3):
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr}")
    return p.stdout


def mixed_only(frenzy, cluster, model):
    """Tokens/s of the fastest mixed plan of `model` on `cluster`, or None when a single type
    holds it (or nothing does)."""
    d = json.loads(run([frenzy, "plan", "-m", model, "--tokens", "1e9", "--global-batch", "128",
                        "--cluster", cluster, "--json"]))
    if d["plans"] or not d.get("mixed_plans"):
        return None
    return d["mixed_plans"][0]["tokens_per_s"]


def workload(frenzy, cluster, seed, big, folder):
    base = os.path.join(folder, f"{cluster}-{seed}-base.csv")
    run([frenzy, "workload", "generate", "--cluster", cluster, "--jobs", str(JOBS), "--load", str(LOAD),
         "--seed", str(seed), "--out", base])
    lines = open(base).read().splitlines()
    header, rows = lines[0], lines[1:]
    span = max(float(r.split(",")[1]) for r in rows)
    speeds = {m: mixed_only(frenzy, cluster, m) for m in BIG_MODELS}
    models = [m for m, s in speeds.items() if s]
    rng = random.Random(seed)
    largest = json.loads(run([frenzy, "cluster", "show", cluster, "--json"]))
    top = max(largest["gpu_types"], key=lambda t: t["memory_gib"])
    for k in range(big):
        m = rng.choice(models)
        hours = math.exp(rng.uniform(math.log(4), math.log(24)))
        tokens = int(speeds[m] * hours * 3600)
        rows.append(f"big-{k:03d},{rng.uniform(0, span):.3f},{m},{tokens},128,2048,"
                    f"{top['gpu']},{top['gpus']},bf16,0,")
    rows.sort(key=lambda r: float(r.split(",")[1]))
    path = os.path.join(folder, f"{cluster}-{seed}.csv")
    with open(path, "w") as f:
        f.write("\n".join([header] + rows) + "\n")
    return path, models


def simulate(frenzy, cluster, path, seed, folder):
    out = os.path.join(folder, f"sim-{cluster}-{seed}")
    doc = json.loads(run([frenzy, "simulate", "-c", cluster, "-w", path, "-p", ",".join(POLICIES),
                          "--seed", str(seed), "--no-progress", "--json", "--out", out]))
    # Every job over one horizon: a job a policy did not finish counts from its submission to the
    # last finish of any policy in the run (simulate's own all-jobs average stops each policy's
    # clock at its own last event, which flatters a policy that cannot run some jobs at all).
    with open(os.path.join(out, "jobs.csv")) as f:
        jobs = list(csv.DictReader(f))
    horizon = max(float(j["finish_s"]) for j in jobs if j["finish_s"])
    for p in doc["policies"]:
        mine = [j for j in jobs if j["policy"] == p["policy"]]
        p["avg_jct_horizon_s"] = sum(
            float(j["jct_s"]) if j["outcome"] == "finished" else horizon - float(j["submit_s"])
            for j in mine) / len(mine)
    return doc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("frenzy")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--big", type=int, default=0,
                    help="jobs of models no single type holds, added to each workload")
    ap.add_argument("--out")
    a = ap.parse_args()
    folder = a.out or tempfile.mkdtemp(prefix="mixed-eval-")
    os.makedirs(folder, exist_ok=True)
    print("| cluster | policy | done | avg JCT h (common) | avg JCT h (all) | p99 h (common) | "
          "avg queue h | OOMs | GPU-h |")
    print("|---|---|---|---|---|---|---|---|---|")
    for cluster in CLUSTERS:
        acc = {p: [] for p in POLICIES}
        for seed in range(1, a.seeds + 1):
            path, models = workload(a.frenzy, cluster, seed, a.big, folder)
            doc = simulate(a.frenzy, cluster, path, seed, folder)
            common = {c["policy"]: c for c in doc["common"]["policies"]}
            for p in doc["policies"]:
                acc[p["policy"]].append({
                    "done": p["finished"], "common": common[p["policy"]]["avg_jct_s"] / 3600,
                    "all": p["avg_jct_horizon_s"] / 3600,
                    "p99": common[p["policy"]]["p99_jct_s"] / 3600,
                    "queue": p["avg_queue_s"] / 3600, "ooms": p["oom_events"],
                    "gpuh": p["gpu_hours"]})
        for p in POLICIES:
            r = acc[p]
            mean = lambda k: sum(x[k] for x in r) / len(r)  # noqa: E731
            print(f"| {cluster} | {p} | {mean('done'):.1f} | {mean('common'):.2f} | "
                  f"{mean('all'):.2f} | {mean('p99'):.1f} | {mean('queue'):.2f} | "
                  f"{mean('ooms'):.1f} | {mean('gpuh'):.0f} |")
        ratio = lambda k: sum(x[k] for x in acc["frenzy"]) / sum(  # noqa: E731
            x[k] for x in acc["frenzy-no-mixed"])
        print(f"| {cluster} | frenzy / frenzy-no-mixed | | {ratio('common'):.2f} | "
              f"{ratio('all'):.2f} | {ratio('p99'):.2f} | | | {ratio('gpuh'):.2f} |")
    print(f"\n(workloads in {folder}; big models used: those of {BIG_MODELS} that no single "
          "type of the cluster holds)")


if __name__ == "__main__":
    main()
