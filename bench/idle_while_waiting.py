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

usage: bench/idle_while_waiting.py FOLDER [FOLDER ...]
"""
import collections
import csv
import glob
import os
import sys


def read(folder):
    runs, jobs = collections.defaultdict(list), collections.defaultdict(dict)
    for sub in [folder] + sorted(glob.glob(os.path.join(folder, "test-*"))):
        if not os.path.exists(os.path.join(sub, "runs.csv")):
            continue
        for r in csv.DictReader(open(os.path.join(sub, "runs.csv"))):
            runs[r["policy"]].append(r)
        for r in csv.DictReader(open(os.path.join(sub, "jobs.csv"))):
            jobs[r["policy"]][r["job_id"]] = r
    return runs, jobs


def capacities(runs):
    """Each type's GPU count: the most GPUs of it busy at once under any policy is a lower
    bound; the cluster's own count is passed where known."""
    known = {"A100-80GB": 16, "V100-32GB": 16, "RTX-3090": 32,  # cluster64 (frenzy cluster show)
             "A100-40GB": 16, "T4": 24}                          # sia64's A100s and T4s
    types = {t for rs in runs.values() for r in rs for t in r["gpu"].split("+")}
    return {t: known.get(t, 0) for t in types}


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
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    print("| folder | policy | type | idle GPU-h | idle while a job that fits there waits |")
    print("|---|---|---|---|---|")
    for folder in sys.argv[1:]:
        runs, jobs = read(folder)
        cap, can = capacities(runs), smallest_runs(runs)
        for pol in sorted(runs):
            idle, gap = idle_while_waiting(runs[pol], jobs[pol], can, cap)
            for t in sorted(cap):
                print(f"| {os.path.basename(folder)} | {pol} | {t} | {idle[t] / 3600:.0f} | "
                      f"{gap[t] / 3600:.0f} |")


if __name__ == "__main__":
    main()
