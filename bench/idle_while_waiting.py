#!/usr/bin/env python3
"""GPUs left idle while a job that could use them waits, per policy and GPU type.

Reads the per-run and per-job rows `frenzy simulate --out DIR` writes (runs.csv, jobs.csv; a
folder of bench/sched_variant.py's cache holds the baselines' and, under test-*, frenzy's) and
integrates, over the replay, each type's free GPUs at moments when some job that has arrived,
not finished and holds no GPUs *could have started on that type*: a job that ran on that type
alone without an out-of-memory crash under any policy of the same world (the seed fixes the
memory and speed truths), with at most that many GPUs free. This is the work-conservation gap
of a policy: GPU-hours it left idle that the queue could have used now.

A mixed run (types joined with '+') counts its GPUs spread evenly over its types.

A folder with several test-* runs (variants) reports each apart, as "policy (test-...)".

usage: bench/idle_while_waiting.py FRENZY_BIN CLUSTER FOLDER [FOLDER ...]
       (CLUSTER as given to `frenzy simulate -c`: its GPU counts per type)
"""
import collections
import csv
import glob
import json
import os
import subprocess
import sys


def read(folder):
    runs, jobs = collections.defaultdict(list), collections.defaultdict(dict)
    tests = sorted(glob.glob(os.path.join(folder, "test-*")))
    for sub in [folder] + tests:
        if not os.path.exists(os.path.join(sub, "runs.csv")):
            continue
        tag = f" ({os.path.basename(sub)})" if sub != folder and len(tests) > 1 else ""
        for r in csv.DictReader(open(os.path.join(sub, "runs.csv"))):
            runs[r["policy"] + tag].append(r)
        for r in csv.DictReader(open(os.path.join(sub, "jobs.csv"))):
            jobs[r["policy"] + tag][r["job_id"]] = r
    return runs, jobs


def capacities(frenzy, cluster):
    """GPUs per type of the cluster, as `frenzy cluster show` describes it."""
    out = subprocess.run([frenzy, "cluster", "show", cluster, "--json"], capture_output=True,
                         text=True)
    if out.returncode != 0:
        sys.exit(f"frenzy cluster show {cluster}: {out.stderr.strip()}")
    return {t["gpu"]: t["gpus"] for t in json.loads(out.stdout)["gpu_types"]}


def smallest_runs(runs):
    """job -> type -> the fewest GPUs it ran on there, alone and without an OOM, by any policy."""
    can = collections.defaultdict(dict)
    for rs in runs.values():
        for r in rs:
            if r["end"] == "oom" or "+" in r["gpu"]:
                continue
            n = int(r["gpus"])
            can[r["job_id"]][r["gpu"]] = min(n, can[r["job_id"]].get(r["gpu"], n))
    return can


def idle_while_waiting(runs, jobs, can, cap):
    held = collections.defaultdict(list)
    for r in runs:
        held[r["job_id"]].append((float(r["start_s"]), float(r["end_s"]), r["gpu"], int(r["gpus"])))
    pts = set()
    for j, v in jobs.items():
        pts.add(float(v["submit_s"]))
        if v["finish_s"]:
            pts.add(float(v["finish_s"]))
    for iv in held.values():
        for a, b, _, _ in iv:
            pts.update((a, b))
    pts = sorted(pts)
    idle, gap = collections.Counter(), collections.Counter()
    for a, b in zip(pts, pts[1:]):
        m, dt = (a + b) / 2, b - a
        busy, holding = collections.Counter(), set()
        for j, iv in held.items():
            for s, e, g, n in iv:
                if s <= m < e:
                    holding.add(j)
                    parts = g.split("+")
                    for t in parts:
                        busy[t] += n / len(parts)
        waiting = [j for j, v in jobs.items() if float(v["submit_s"]) <= m
                   and (not v["finish_s"] or m < float(v["finish_s"])) and j not in holding]
        for t, c in cap.items():
            free = max(0.0, c - busy[t])
            idle[t] += free * dt
            if any(can[j].get(t, 1 << 30) <= free for j in waiting):
                gap[t] += free * dt
    return idle, gap


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    cap = capacities(sys.argv[1], sys.argv[2])
    print("| folder | policy | type | idle GPU-h | idle while a job that fits there waits |")
    print("|---|---|---|---|---|")
    for folder in sys.argv[3:]:
        runs, jobs = read(folder)
        can = smallest_runs(runs)
        for pol in sorted(runs):
            idle, gap = idle_while_waiting(runs[pol], jobs[pol], can, cap)
            for t in sorted(cap):
                print(f"| {os.path.basename(folder)} | {pol} | {t} | {idle[t] / 3600:.0f} | "
                      f"{gap[t] / 3600:.0f} |")


if __name__ == "__main__":
    main()
