#!/usr/bin/env python3
"""Scheduling evaluation: frenzy against the baselines, side by side (issue 6).

Runs `frenzy simulate` on
  1. the lab cluster with the bundled synthetic LLM workload (lab-synthetic);
  2. cluster64 with the Microsoft ITP trace (cluster04, first 300 jobs) converted at several
     offered loads;
  3. cluster2048 with the full ITP trace (69,351 jobs, real arrival times) — fifo-static,
     tiresias and frenzy only: gavel's LP and sia's ILP per round make a full replay take hours;
and the ablation (each ingredient of frenzy switched off) on the first two. Prints markdown
tables: every metric per policy, frenzy's average JCT against the best baseline (over all
finished jobs, and over the jobs both finished), p99 against the best baseline's, and the
overhead ratio against sia.

usage: bench/sched_eval.py FRENZY_BIN TRACE_DIR [--out DIR] [--quick]
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

BASELINES = ["fifo-static", "tiresias", "gavel", "sia"]
ABLATION = ["frenzy", "frenzy-no-marp", "frenzy-no-srpt", "frenzy-no-swap", "frenzy-no-elastic",
            "frenzy-no-preempt", "frenzy-no-move", "frenzy-no-tick"]


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr}")
    return p.stdout


def simulate(frenzy, cluster, workload, policies, out):
    os.makedirs(out, exist_ok=True)
    j = json.loads(run([frenzy, "simulate", "-c", cluster, "-w", workload, "-p",
                        ",".join(policies), "--no-progress", "--json", "--out", out]))
    jobs = {}
    with open(os.path.join(out, "jobs.csv")) as f:
        for r in csv.DictReader(f):
            if r["jct_s"]:
                jobs.setdefault(r["policy"], {})[r["job_id"]] = float(r["jct_s"])
    return j["policies"], jobs


def table(title, metrics):
    print(f"\n{title}\n")
    print("| policy | done | lost | avg JCT h | p50 h | p99 h | makespan h | avg queue h | GPU-h | "
          "util | OOMs | wasted GPU-h | sched mean ms | sched max ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for m in metrics:
        lost = m["given_up"] + m["unfinished"] + m.get("impossible", 0)
        print(f"| {m['policy']} | {m['finished']} | {lost} | {m['avg_jct_s']/3600:.2f} | "
              f"{m['p50_jct_s']/3600:.2f} | {m['p99_jct_s']/3600:.2f} | "
              f"{m['makespan_s']/3600:.1f} | {m['avg_queue_s']/3600:.2f} | "
              f"{m['gpu_hours']:.0f} | {100*m['gpu_util']:.1f}% | {m['oom_events']} | "
              f"{m['wasted_gpu_hours']:.1f} | {m['sched_overhead_ms_mean']:.4f} | "
              f"{m['sched_overhead_ms_max']:.3f} |")


def verdict(metrics, jobs):
    by = {m["policy"]: m for m in metrics}
    if "frenzy" not in by:
        return
    base = [m for m in metrics if m["policy"] in BASELINES and m["finished"] > 0]
    best = min(base, key=lambda m: m["avg_jct_s"])
    f = by["frenzy"]
    common = [k for k in jobs.get("frenzy", {}) if k in jobs.get(best["policy"], {})]
    fc = sum(jobs["frenzy"][k] for k in common) / max(1, len(common))
    bc = sum(jobs[best["policy"]][k] for k in common) / max(1, len(common))
    print(f"\nfrenzy vs the best baseline ({best['policy']}): average JCT "
          f"{f['avg_jct_s']/3600:.2f} h vs {best['avg_jct_s']/3600:.2f} h "
          f"({100*(f['avg_jct_s']/best['avg_jct_s']-1):+.1f}%); on the {len(common)} jobs both "
          f"finished {fc/3600:.2f} h vs {bc/3600:.2f} h ({100*(fc/bc-1):+.1f}%); p99 "
          f"{f['p99_jct_s']/3600:.2f} h vs {best['p99_jct_s']/3600:.2f} h; OOM crashes "
          f"{f['oom_events']}; jobs lost {f['given_up'] + f['unfinished']} vs "
          f"{best['given_up'] + best['unfinished']}.")
    if "sia" in by and f["sched_overhead_ms_mean"] > 0:
        print(f"Overhead: frenzy {f['sched_overhead_ms_mean']:.4f} ms mean per call vs sia "
              f"{by['sia']['sched_overhead_ms_mean']:.3f} ms: "
              f"{by['sia']['sched_overhead_ms_mean']/f['sched_overhead_ms_mean']:.0f}x lower.")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("frenzy")
    ap.add_argument("trace_dir")
    ap.add_argument("--out", default=None)
    ap.add_argument("--loads", default="0.5,0.9,1.5")
    ap.add_argument("--quick", action="store_true", help="skip the 2,048-GPU full trace")
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="frenzy-eval-")
    everyone = BASELINES + ["frenzy"]

    m, j = simulate(a.frenzy, "lab", "lab-synthetic", everyone, f"{out}/lab")
    table("### lab (24 GPUs, 3 types), lab-synthetic (60 jobs, load 0.9)", m)
    verdict(m, j)
    m, j = simulate(a.frenzy, "lab", "lab-synthetic", ABLATION, f"{out}/lab-ablation")
    table("#### Ablation, lab-synthetic", m)

    itp = os.path.join(a.trace_dir, "cluster04.csv")
    for load in a.loads.split(","):
        w = f"{out}/itp-c04-{load}.csv"
        run([a.frenzy, "trace", "convert", "--from", "itp", itp, "--cluster", "cluster64",
             "--max-jobs", "300", "--seed", "1", "--load", load, "--out", w])
        m, j = simulate(a.frenzy, "cluster64", w, everyone, f"{out}/itp64-{load}")
        table(f"### cluster64 (64 GPUs, 3 types), ITP cluster04 first 300 jobs, load {load}", m)
        verdict(m, j)
        if load == "0.9":
            m, j = simulate(a.frenzy, "cluster64", w, ABLATION, f"{out}/itp64-ablation")
            table("#### Ablation, ITP on cluster64 at load 0.9", m)

    if not a.quick:
        traces = sorted(os.path.join(a.trace_dir, f) for f in os.listdir(a.trace_dir)
                        if f.endswith(".csv"))
        w = f"{out}/itp-all-2048.csv"
        run([a.frenzy, "trace", "convert", "--from", "itp", *traces, "--cluster", "cluster2048",
             "--seed", "1", "--out", w])
        m, j = simulate(a.frenzy, "cluster2048", w, ["fifo-static", "tiresias", "frenzy"],
                        f"{out}/itp2048")
        table("### cluster2048 (2,048 GPUs, 5 types), full ITP trace (69,351 jobs, real "
              "arrivals)", m)
    print(f"\n(outputs, CSVs and SVG plots: {out})")


if __name__ == "__main__":
    main()
