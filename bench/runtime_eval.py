#!/usr/bin/env python3
"""Dynamic memory optimisation and faults: frenzy with and without its runtime, and the
baselines, under prediction error, memory drift and failures (issue 7).

Runs `frenzy simulate` on the lab cluster (lab-synthetic) and on cluster64 (the ITP cluster04
trace at load 0.9, itp-c04-64) under three conditions:
  exact   -- no prediction error, no drift (the reference for frenzy's JCT);
  drift   -- 10% prediction error (normal, sd) and up to 10% memory growth per job;
  faults  -- drift plus node failures (MTBF 200 h per node, 1 h repair), other job crashes
             (MTBF 50 h per run) and 10% straggler nodes at half speed;
each over several seeds (the drawn memory truth, drift and faults change with the seed). Prints
markdown tables and the targets: frenzy's OOM crashes and OOM-wasted GPU-hours against
fifo-static's (>= 90% fewer), its JCT against its exact run (< 5% worse), and jobs lost (0).

usage: bench/runtime_eval.py FRENZY_BIN [--seeds N] [--quick]
"""
import argparse
import json
import statistics
import subprocess
import sys

POLICIES = ["fifo-static", "tiresias", "gavel", "sia", "frenzy-no-dynamic", "frenzy"]
CONDITIONS = {
    "exact": ["--memory-error", "0"],
    "drift": ["--memory-error", "10", "--memory-drift", "10"],
    "faults": ["--memory-error", "10", "--memory-drift", "10", "--mtbf-h", "200", "--repair-h",
               "1", "--crash-mtbf-h", "50", "--stragglers", "0.1", "--straggler-speed", "0.5"],
}
CASES = [("lab", "lab-synthetic"), ("cluster64", "itp-c04-64")]


def simulate(frenzy, cluster, workload, policies, extra, seed):
    cmd = [frenzy, "simulate", "-c", cluster, "-w", workload, "-p", ",".join(policies),
           "--seed", str(seed), "--no-progress", "--json"] + extra
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr}")
    return {m["policy"]: m for m in json.loads(p.stdout)["policies"]}


def mean(xs):
    return statistics.fmean(xs) if xs else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("frenzy")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="one seed, no sia")
    a = ap.parse_args()
    seeds = [1] if a.quick else list(range(1, a.seeds + 1))
    policies = [p for p in POLICIES if not (a.quick and p == "sia")]
    for cluster, workload in CASES:
        runs = {}  # condition -> policy -> [metrics per seed]
        for cond, extra in CONDITIONS.items():
            # Without error the memory truth does not depend on the seed: one run is enough.
            cond_seeds = seeds[:1] if cond == "exact" else seeds
            for seed in cond_seeds:
                for pol, m in simulate(a.frenzy, cluster, workload, policies, extra, seed).items():
                    runs.setdefault(cond, {}).setdefault(pol, []).append(m)
        print(f"\n### {workload} on {cluster} ({len(seeds)} seed(s); means over seeds)\n")
        print("| condition | policy | done | lost | avg JCT h | p99 JCT h | OOMs | wasted GPU-h | "
              "OOM-wasted GPU-h | runtime actions (re-plan/move/requeue) | crashes | "
              "stragglers found |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for cond in CONDITIONS:
            for pol in policies:
                ms = runs[cond][pol]
                def f(key):
                    return mean([m[key] for m in ms])
                print(f"| {cond} | {pol} | {f('finished'):.1f} | {f('jobs_lost'):.1f} | "
                      f"{f('avg_jct_s')/3600:.2f} | {f('p99_jct_s')/3600:.2f} | "
                      f"{f('oom_events'):.1f} | {f('wasted_gpu_hours'):.1f} | "
                      f"{f('oom_wasted_gpu_hours'):.1f} | {f('memory_replans'):.1f}/"
                      f"{f('memory_moves'):.1f}/{f('memory_requeues'):.1f} | {f('crashes'):.1f} | "
                      f"{f('stragglers_detected'):.1f} |")
        exact = runs["exact"]["frenzy"][0]["avg_jct_s"]
        for cond in ("drift", "faults"):
            fz, fifo = runs[cond]["frenzy"], runs[cond]["fifo-static"]
            oom = 1 - mean([m["oom_events"] for m in fz]) / max(1e-9, mean(
                [m["oom_events"] for m in fifo]))
            waste = 1 - mean([m["oom_wasted_gpu_hours"] for m in fz]) / max(1e-9, mean(
                [m["oom_wasted_gpu_hours"] for m in fifo]))
            total = 1 - mean([m["wasted_gpu_hours"] for m in fz]) / max(1e-9, mean(
                [m["wasted_gpu_hours"] for m in fifo]))
            jcts = [m["avg_jct_s"] / exact - 1 for m in fz]
            lost = sum(m["jobs_lost"] for m in fz)
            print(f"\n{cond}: frenzy vs fifo-static: {100*oom:.1f}% fewer OOM crashes, "
                  f"{100*waste:.1f}% fewer OOM-wasted GPU-hours ({100*total:.1f}% fewer wasted "
                  f"GPU-hours of any cause); frenzy's JCT vs its exact run: "
                  f"{100*mean(jcts):+.1f}% on average (seeds: "
                  f"{', '.join(f'{100*j:+.1f}%' for j in jcts)}); jobs lost: {lost} in "
                  f"{len(fz)} run(s).")


if __name__ == "__main__":
    main()
