#!/usr/bin/env python3
"""How the simulator's cost grows with jobs and GPUs.

Converts the Microsoft ITP 2021 trace (all ten clusters, 69,351 jobs) for clusters of 64, 512,
2,048 and 8,192 GPUs (five GPU types, as cluster2048), keeps the first 1k / 10k / all jobs by
submit time, scales arrivals to an offered load of 0.9 (so every size sees the same pressure),
replays each with one policy (fifo-static by default) and reports wall time, events per second
and peak memory (max RSS) of the `frenzy simulate` process.

usage: bench/sim_scale.py FRENZY_BIN TRACE_DIR [--policy P] [--jobs 1000,10000,0]
                          [--gpus 64,512,2048,8192] [--markdown]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

# Five GPU types in the proportions of cluster2048 (data/clusters/cluster2048.json).
GROUPS = [("h100", "H100-80GB", 8, 50, 1 / 8), ("a100-80g", "A100-80GB", 8, 25, 1 / 4),
          ("a100-40g", "A100-40GB", 8, 25, 1 / 4), ("v100", "V100-32GB", 8, 12.5, 1 / 4),
          ("l40s", "L40S", 4, 25, 1 / 8)]


def cluster_file(gpus, folder):
    if gpus == 64:
        return "cluster64"
    if gpus == 2048:
        return "cluster2048"
    groups = []
    for prefix, gpu, per_node, net, share in GROUPS:
        nodes = max(1, round(gpus * share / per_node))
        groups.append({"prefix": prefix, "count": nodes, "gpu": gpu, "gpus_per_node": per_node,
                       "network_gbs": net})
    path = os.path.join(folder, f"scale{gpus}.json")
    with open(path, "w") as f:
        json.dump({"name": f"scale{gpus}", "node_groups": groups}, f)
    return path


def run_measured(cmd):
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = p.stdout.read()
    err = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"failed ({code}): {' '.join(cmd)}\n{err.decode()}")
    return out.decode(), wall, usage.ru_maxrss / 1024  # MiB


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("frenzy")
    ap.add_argument("trace_dir")
    ap.add_argument("--policy", default="fifo-static")
    ap.add_argument("--jobs", default="1000,10000,0", help="0 = all")
    ap.add_argument("--gpus", default="64,512,2048,8192")
    ap.add_argument("--load", default="0.9")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    traces = sorted(os.path.join(a.trace_dir, f) for f in os.listdir(a.trace_dir)
                    if f.endswith(".csv"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for gpus in [int(g) for g in a.gpus.split(",")]:
            cluster = cluster_file(gpus, tmp)
            for jobs in [int(j) for j in a.jobs.split(",")]:
                w = os.path.join(tmp, f"w{gpus}-{jobs}.csv")
                conv = [a.frenzy, "trace", "convert", "--from", "itp", *traces, "--cluster",
                        cluster, "--load", a.load, "--seed", "1", "--out", w]
                if jobs:
                    conv += ["--max-jobs", str(jobs)]
                _, conv_wall, _ = run_measured(conv)
                out, wall, rss = run_measured([a.frenzy, "simulate", "--cluster", cluster,
                                               "--workload", w, "--policy", a.policy,
                                               "--no-progress", "--json"])
                m = json.loads(out)["policies"][0]
                rows.append((gpus, m["jobs"], m["events"], wall, m["events"] / wall, rss,
                             m["sim_wall_s"], conv_wall, m["finished"]))
                print(f"{gpus} GPUs, {m['jobs']} jobs: {wall:.2f} s, {rss:.0f} MiB",
                      file=sys.stderr)
    if a.markdown:
        print(f"| GPUs | jobs | events | wall s | events/s | peak RSS MiB | finished | convert s |")
        print("|---|---|---|---|---|---|---|---|")
        for g, j, e, wall, eps, rss, _, cw, fin in rows:
            print(f"| {g:,} | {j:,} | {e:,} | {wall:.2f} | {eps:,.0f} | {rss:.0f} | {fin:,} | "
                  f"{cw:.2f} |")
    else:
        for r in rows:
            print(*r)


if __name__ == "__main__":
    main()
