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

With --gpu-hours it splits instead the GPU-hours each policy spent on the jobs every policy
finished into those spent on a type while some job that could start there waited (contended:
another job was kept from those GPUs) and those spent while none did (GPUs nobody else could use
then). Issue 15 asks for GPU-hours within 10% of Sia's, "growing into idle GPUs is fine; wasting
contended ones is not": the contended column is that criterion. A job "could start" on a type as
above (it ran there alone without an OOM under some policy), with at most the type's GPUs.

usage: bench/idle_while_waiting.py FRENZY_BIN CLUSTER FOLDER [FOLDER ...]
       bench/idle_while_waiting.py --gpu-hours FRENZY_BIN CLUSTER FOLDER [FOLDER ...]
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


def intervals(runs, jobs, counted=None):
    """Per elementary interval of the replay (between two consecutive events): its length, the
    GPUs busy per type (of the jobs in `counted`, all when None) and the jobs waiting (arrived,
    not finished, holding nothing). A sweep over the events: a run [start, end) is busy in every
    interval it covers, a job present from its submission to its finish."""
    events = collections.defaultdict(list)  # time -> [(order, kind, payload)]
    for r in runs:
        s, e = float(r["start_s"]), float(r["end_s"])
        if e <= s:
            continue
        run = (r["job_id"], r["gpu"].split("+"), int(r["gpus"]))
        events[s].append((1, "start", run))
        events[e].append((0, "end", run))
    for j, v in jobs.items():
        events[float(v["submit_s"])].append((1, "submit", j))
        if v["finish_s"]:
            events[float(v["finish_s"])].append((0, "finish", j))
    busy, active, present = collections.Counter(), collections.Counter(), set()
    pts = sorted(events)
    for a, b in zip(pts, pts[1:] + [None]):
        for _, kind, x in sorted(events[a], key=lambda k: k[0]):  # ends before starts
            if kind in ("start", "end"):
                job, parts, n = x
                sign = 1 if kind == "start" else -1
                active[job] += sign
                if counted is None or job in counted:
                    for t in parts:
                        busy[t] += sign * n / len(parts)
            elif kind == "submit":
                present.add(x)
            else:
                present.discard(x)
        if b is None:
            break
        waiting = [j for j in present if active[j] <= 0]
        yield b - a, busy, waiting


def idle_while_waiting(runs, jobs, can, cap):
    idle, gap = collections.Counter(), collections.Counter()
    for dt, busy, waiting in intervals(runs, jobs):
        for t, c in cap.items():
            free = max(0.0, c - busy[t])
            idle[t] += free * dt
            if any(can[j].get(t, 1 << 30) <= free for j in waiting):
                gap[t] += free * dt
    return idle, gap


def gpu_hours_split(runs, jobs, can, cap, common):
    """GPU-seconds per type on the `common` jobs: all, and while a job that could start on
    the type (with at most its GPUs) waited."""
    used, contended = collections.Counter(), collections.Counter()
    for dt, busy, waiting in intervals(runs, jobs, common):
        for t, c in cap.items():
            used[t] += busy[t] * dt
            if any(can[j].get(t, 1 << 30) <= c for j in waiting):
                contended[t] += busy[t] * dt
    return used, contended


def split_main(args):
    cap = capacities(args[0], args[1])
    print("| folder | policy | GPU-h (common jobs) | while a job that fits the type waits | "
          "while none does |")
    print("|---|---|---|---|---|")
    for folder in args[2:]:
        runs, jobs = read(folder)
        can = smallest_runs(runs)
        common = set.intersection(*[{j for j, v in js.items() if v["finish_s"]}
                                    for js in jobs.values()])
        for pol in sorted(runs):
            used, contended = gpu_hours_split(runs[pol], jobs[pol], can, cap, common)
            u, c = sum(used.values()) / 3600, sum(contended.values()) / 3600
            print(f"| {os.path.basename(folder)} | {pol} | {u:.0f} | {c:.0f} | {u - c:.0f} |")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--gpu-hours" and len(sys.argv) >= 5:
        return split_main(sys.argv[2:])
    if len(sys.argv) < 4 or sys.argv[1].startswith("--"):
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
