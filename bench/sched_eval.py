#!/usr/bin/env python3
"""Scheduling evaluation: frenzy against the baselines, side by side (issues 6 and 15).

Workloads (each with every policy, over several seeds of the simulated world: memory truth,
throughput truth, and with them what every policy sees; the defaults of `frenzy simulate` hold:
MARP's and the throughput model's measured errors, restarts priced from each job's checkpoint):
  lab        the bundled synthetic LLM workload on `lab` (24 GPUs, 3 types);
  itp-<L>    the Microsoft ITP trace (cluster04, first 300 jobs) on `cluster64` at offered
             loads 0.5, 0.9 and 1.5;
  philly     the bundled philly-64 (Gavel's Philly-derived trace, 300 jobs, load 0.9);
  philly-busy  the same trace window at load 1.5;
  sia64-itp  the ITP jobs at load 0.9 on `sia64` (16 A100-40GB, 24 V100-32GB, 24 T4, like Sia's
             testbed);
then the ablation (each ingredient of frenzy switched off) on lab and itp-0.9 (seed 1), and the
full ITP trace (69,351 jobs) on `cluster2048` with fifo-static, tiresias and frenzy (gavel's and
sia's solvers would take hours there).

Average JCT is reported over each policy's own finished jobs and over the jobs every policy
finished ("common", `frenzy simulate`'s fair comparison): a policy that loses its longest jobs
to out-of-memory crashes looks faster on its own jobs alone. The common set has a blind spot of
its own: a policy that never runs some long jobs drops them from it, and the jobs of the same
kind it did run may have waited behind none of them. So a third average takes every job, one a
policy did not finish counted from its submission to when the clock stopped ("all", a lower
bound for that policy). The verdict compares frenzy with the best baseline on the common jobs,
and beside it on all jobs: mean and worst over seeds.

usage: bench/sched_eval.py FRENZY_BIN SHARED_TRACES_DIR [--out DIR] [--seeds N] [--quick]
       (SHARED_TRACES_DIR holds microsoft-itp-2021/ and gavel-philly-msr/)
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import time

BASELINES = ["fifo-static", "tiresias", "gavel", "sia"]
EVERYONE = BASELINES + ["frenzy"]
ABLATION = ["frenzy", "frenzy-no-marp", "frenzy-no-srpt", "frenzy-no-swap", "frenzy-no-fallback",
            "frenzy-no-floor", "frenzy-no-elastic", "frenzy-no-preempt", "frenzy-no-move",
            "frenzy-no-tick", "frenzy-no-dynamic"]


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr}")
    return p.stdout


def simulate(frenzy, cluster, workload, policies, seed, extra=()):
    t = time.time()
    j = json.loads(run([frenzy, "simulate", "-c", cluster, "-w", workload, "-p",
                        ",".join(policies), "--seed", str(seed), "--no-progress", "--json",
                        *extra]))
    j["wall_s"] = time.time() - t
    return j


def workloads(frenzy, traces, out):
    itp = os.path.join(traces, "microsoft-itp-2021", "cluster04.csv")
    philly = os.path.join(traces, "gavel-philly-msr", "seed0", "6c71a0.trace")
    w = [("lab", "lab", "lab-synthetic")]
    for load in ["0.5", "0.9", "1.5"]:
        path = f"{out}/itp-c04-{load}.csv"
        run([frenzy, "trace", "convert", "--from", "itp", itp, "--cluster", "cluster64",
             "--max-jobs", "300", "--seed", "1", "--load", load, "--out", path])
        w.append((f"itp-{load}", "cluster64", path))
    w.append(("philly", "cluster64", "philly-64"))
    path = f"{out}/philly-64-busy.csv"
    run([frenzy, "trace", "convert", "--from", "gavel", philly, "--cluster", "cluster64",
         "--max-jobs", "300", "--seed", "1", "--load", "1.5", "--out", path])
    w.append(("philly-busy", "cluster64", path))
    path = f"{out}/itp-c04-sia64.csv"
    run([frenzy, "trace", "convert", "--from", "itp", itp, "--cluster", "sia64",
         "--max-jobs", "300", "--seed", "1", "--load", "0.9", "--out", path])
    w.append(("sia64-itp", "sia64", path))
    return w


# Held-out workloads: ITP clusters other than the evaluation's cluster04 (first 300 jobs each), at
# other loads, on cluster64 and sia64. No scheduling mechanism was chosen by looking at them
# (bench/RESULTS.md, "HAS v2, step 4"); bench/sched_variant.py --set heldout runs them.
HELDOUT = [("cluster07", "0.9", "cluster64"), ("cluster02", "0.5", "cluster64"),
           ("cluster09", "1.5", "cluster64"), ("cluster07", "0.9", "sia64")]


def heldout_workloads(frenzy, traces, out):
    w = []
    for trace, load, cluster in HELDOUT:
        label = f"{trace}-{load}" if cluster == "cluster64" else f"{cluster}-{trace}-{load}"
        path = f"{out}/itp-{label}.csv"
        run([frenzy, "trace", "convert", "--from", "itp",
             os.path.join(traces, "microsoft-itp-2021", trace + ".csv"), "--cluster", cluster,
             "--max-jobs", "300", "--seed", "1", "--load", load, "--out", path])
        w.append((label, cluster, path))
    return w


def by_policy(doc):
    m = {p["policy"]: dict(p) for p in doc["policies"]}
    for c in doc.get("common", {}).get("policies", []):
        m[c["policy"]].update({"common_avg_jct_s": c["avg_jct_s"],
                               "common_p99_jct_s": c["p99_jct_s"],
                               "common_gpu_hours": c["gpu_hours"]})
    return m


def mean(v):
    return sum(v) / len(v) if v else float("nan")


def table(title, runs, policies):
    print(f"\n{title}\n")
    print("| policy | done | lost | avg JCT h (own) | avg JCT h (common) | avg JCT h (all) | "
          "p99 h (common) | GPU-h (common) | OOMs | wasted GPU-h | sched mean ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for p in policies:
        ms = [by_policy(r)[p] for r in runs]
        lost = mean([m["given_up"] + m["unfinished"] + m.get("impossible", 0) + m.get("failed", 0)
                     for m in ms])
        print(f"| {p} | {mean([m['finished'] for m in ms]):.1f} | {lost:.1f} | "
              f"{mean([m['avg_jct_s'] for m in ms]) / 3600:.2f} | "
              f"{mean([m['common_avg_jct_s'] for m in ms]) / 3600:.2f} | "
              f"{mean([m['avg_jct_all_s'] for m in ms]) / 3600:.2f} | "
              f"{mean([m['common_p99_jct_s'] for m in ms]) / 3600:.1f} | "
              f"{mean([m['common_gpu_hours'] for m in ms]):.0f} | "
              f"{mean([m['oom_events'] for m in ms]):.1f} | "
              f"{mean([m['wasted_gpu_hours'] for m in ms]):.1f} | "
              f"{mean([m['sched_overhead_ms_mean'] for m in ms]):.4f} |")


def verdict(label, runs):
    """frenzy against the best baseline, per seed; returns one row of the summary."""
    ratios, alls, p99s, gpuh, over, done_ok, ooms = [], [], [], [], [], True, 0
    for r in runs:
        m = by_policy(r)
        f = m["frenzy"]
        best = min((m[b] for b in BASELINES), key=lambda x: x["common_avg_jct_s"])
        ratios.append(f["common_avg_jct_s"] / best["common_avg_jct_s"])
        alls.append(f["avg_jct_all_s"] / min(m[b]["avg_jct_all_s"] for b in BASELINES))
        p99s.append(f["common_p99_jct_s"] / min(m[b]["common_p99_jct_s"] for b in BASELINES))
        gpuh.append(f["common_gpu_hours"] / m["sia"]["common_gpu_hours"])
        if f["sched_overhead_ms_mean"] > 0:
            over.append(m["sia"]["sched_overhead_ms_mean"] / f["sched_overhead_ms_mean"])
        done_ok = done_ok and f["finished"] >= max(m[b]["finished"] for b in BASELINES)
        ooms += f["oom_events"]
    return (f"| {label} | {len(runs)} | {mean(ratios):.2f} | {max(ratios):.2f} | "
            f"{mean(alls):.2f} | {max(alls):.2f} | "
            f"{mean(p99s):.2f} | {max(p99s):.2f} | {mean(gpuh):.2f} | "
            f"{min(over) if over else float('nan'):.0f}x | {'yes' if done_ok else 'no'} | {ooms} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("frenzy")
    ap.add_argument("traces")
    ap.add_argument("--out", default=None)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=2, help="simulations run at once")
    ap.add_argument("--quick", action="store_true",
                    help="1 seed, no ablation, no 2,048-GPU replay")
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="frenzy-eval-")
    os.makedirs(out, exist_ok=True)
    seeds = list(range(1, 2 if a.quick else a.seeds + 1))
    ws = workloads(a.frenzy, a.traces, out)

    todo = [(label, cluster, path, seed) for label, cluster, path in ws for seed in seeds]
    results = {}
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        futures = {pool.submit(simulate, a.frenzy, c, p, EVERYONE, s): (l, s)
                   for l, c, p, s in todo}
        for fut in concurrent.futures.as_completed(futures):
            results[futures[fut]] = fut.result()
    with open(f"{out}/results.json", "w") as f:
        json.dump({f"{l}/{s}": r for (l, s), r in results.items()}, f)

    summary = []
    for label, cluster, _ in ws:
        runs = [results[(label, s)] for s in seeds]
        table(f"#### {label} on {cluster} (means over {len(seeds)} seed(s))", runs, EVERYONE)
        summary.append(verdict(f"{label} ({cluster})", runs))
    print("\n#### frenzy against the best baseline, over the jobs every policy finished\n")
    print("| workload | seeds | avg JCT ratio (mean) | (worst seed) | all jobs (mean) | (worst) | "
          "p99 ratio (mean) | (worst) | GPU-h vs sia | sched. time vs sia (worst seed) | "
          "finishes as many | frenzy OOMs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in summary:
        print(row)

    if not a.quick:
        for label, cluster, path in ws:
            if label not in ("lab", "itp-0.9"):
                continue
            r = simulate(a.frenzy, cluster, path, ABLATION, 1)
            table(f"#### Ablation, {label} (seed 1)", [r], ABLATION)
        traces = os.path.join(a.traces, "microsoft-itp-2021")
        files = sorted(os.path.join(traces, f) for f in os.listdir(traces) if f.endswith(".csv"))
        w = f"{out}/itp-all-2048.csv"
        run([a.frenzy, "trace", "convert", "--from", "itp", *files, "--cluster", "cluster2048",
             "--seed", "1", "--out", w])
        for p in ["fifo-static", "tiresias", "frenzy"]:
            r = simulate(a.frenzy, "cluster2048", w, [p], 1)
            m = r["policies"][0]
            print(f"\ncluster2048, full ITP trace, {p}: {m['finished']} done, average JCT "
                  f"{m['avg_jct_s'] / 3600:.2f} h, p99 {m['p99_jct_s'] / 3600:.1f} h, "
                  f"{m['gpu_hours']:.0f} GPU-h, {m['oom_events']} OOMs, replay "
                  f"{m['sim_wall_s']:.1f} s")
    print(f"\n(raw results: {out}/results.json)")


if __name__ == "__main__":
    main()
