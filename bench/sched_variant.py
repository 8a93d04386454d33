#!/usr/bin/env python3
"""Quick comparison of frenzy (or a variant of it) with the baselines, reusing the baselines' runs.

bench/sched_eval.py runs every policy on every workload and seed (~19 minutes, most of it Sia's
ILP). A change to frenzy leaves the baselines' runs unchanged (each policy runs in its own
simulated world from the same seed), so this script runs the baselines once per (workload, seed)
into a cache folder, with their per-job outcomes (`frenzy simulate --out`), and then only the
policies under test. The figures are sched_eval.py's verdict, computed from the per-job rows:
average and p99 JCT over the jobs every policy (baselines and the policy under test) finished,
against the best baseline; the average over all jobs (one not finished counted to when the clock
stopped) against the best baseline's; GPU-hours on those jobs against Sia's; jobs finished; OOM crashes.

usage: bench/sched_variant.py FRENZY_BIN SHARED_TRACES_DIR --cache DIR [--policy P ...]
       [--seeds N] [--only WORKLOAD ...] [--jobs N] [--set main|heldout] [--same-work]

--set heldout runs the held-out workloads (sched_eval.HELDOUT: ITP clusters other than
cluster04) instead of sched_eval.py's seven; use a cache folder of its own.

--same-work withholds from each (workload, seed) the jobs some baseline cannot finish (they never
fit its options, or it held them after crashes; `frenzy simulate --withhold`: the same world
without them), repeated until every baseline finishes every job (at most 4 rounds), and runs
every policy on what is left: the same work for all. On the full workloads a
policy that runs such a job spends contended GPUs that the common jobs wait for, and the common
set does not see it (bench/RESULTS.md, 2026-12-06).
"""
import argparse
import concurrent.futures
import csv
import io
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sched_eval  # noqa: E402  (workload conversion and the baseline list)


def percentile(v, p):
    """Linear interpolation between closest ranks (the simulator's rule)."""
    if not v:
        return 0.0
    v = sorted(v)
    idx = p * (len(v) - 1)
    lo = int(idx)
    hi = min(len(v) - 1, lo + 1)
    return v[lo] + (v[hi] - v[lo]) * (idx - lo)


def simulate(frenzy, cluster, workload, policies, seed, out, extra=()):
    os.makedirs(out, exist_ok=True)
    p = subprocess.run([frenzy, "simulate", "-c", cluster, "-w", workload, "-p",
                        ",".join(policies), "--seed", str(seed), "--no-progress", "--json",
                        "--out", out, *extra], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {policies} on {workload} seed {seed}\n{p.stderr}")
    doc = json.loads(p.stdout)
    with open(os.path.join(out, "jobs.csv")) as f:
        rows = list(csv.DictReader(f))
    return {"summary": {m["policy"]: m for m in doc["policies"]}, "rows": rows}


def load_or_run_baselines(frenzy, cluster, workload, seed, folder, extra):
    done = os.path.join(folder, "baselines.json")
    if os.path.exists(done):
        with open(done) as f:
            return json.load(f)
    r = simulate(frenzy, cluster, workload, sched_eval.BASELINES, seed, folder, extra)
    with open(done, "w") as f:
        json.dump(r, f)
    return r


def same_work(frenzy, label, cluster, path, seed, cache, extra, rounds=4):
    """The jobs some baseline cannot finish, withheld, and the baselines' runs without them.

    A job a baseline never finishes (it never fits that baseline's options, or it was held after
    crashes) leaves the common set, but a policy that runs it spends contended GPUs on it that
    the common jobs then wait for. Withholding such jobs (`frenzy simulate --withhold`: drawn
    into the simulated world, never submitted, so every other job keeps its truths) gives every
    policy the same work. Without them the baselines' runs differ, so repeat until every
    baseline finishes every job submitted (at most `rounds` times). Returns (the simulate flags
    that withhold them, the baselines' runs, how many were withheld)."""
    withheld = set()
    flags = list(extra)
    for r in range(rounds + 1):
        folder = os.path.join(cache, f"{label}-{seed}" + (f"-same{r}" if r else ""))
        base = load_or_run_baselines(frenzy, cluster, path, seed, folder, flags)
        lost = {x["job_id"] for x in base["rows"] if x["outcome"] != "finished"}
        if not lost or r == rounds:
            return flags, base, len(withheld)
        withheld |= lost
        ids = os.path.join(cache, f"{label}-{seed}-same{r + 1}.txt")
        with open(ids, "w") as f:
            f.write("".join(i + "\n" for i in sorted(withheld)))
        flags = list(extra) + ["--withhold", ids]


def verdict(base, test, policy):
    """Ratios of `policy` to the best baseline on the jobs every policy finished."""
    rows = base["rows"] + test["rows"]
    policies = sched_eval.BASELINES + [policy]
    by = {p: {} for p in policies}
    for r in rows:
        if r["policy"] in by:
            by[r["policy"]][r["job_id"]] = r
    ids = set.intersection(*[{i for i, r in by[p].items() if r["outcome"] == "finished"}
                             for p in policies])
    fig = {}
    for p in policies:
        jct = [float(by[p][i]["jct_s"]) for i in ids]
        fig[p] = {"avg": sum(jct) / len(jct) if jct else 0, "p99": percentile(jct, 0.99),
                  "gpuh": sum(float(by[p][i]["gpu_hours"]) for i in ids),
                  "finished": sum(1 for r in by[p].values() if r["outcome"] == "finished")}
    if not ids:
        sys.exit(f"no job finished under every policy ({policy} and the baselines)")
    f = fig[policy]
    best = min((fig[b] for b in sched_eval.BASELINES), key=lambda x: x["avg"])
    summ = test["summary"][policy]
    # Caches written before the all-jobs average existed lack it: nan there.
    alls = {p: (base if p in sched_eval.BASELINES else test)["summary"][p].get(
        "avg_jct_all_s", float("nan")) for p in policies}
    return {"avg": f["avg"] / best["avg"],
            "all": alls[policy] / min(alls[b] for b in sched_eval.BASELINES),
            "p99": f["p99"] / min(fig[b]["p99"] for b in sched_eval.BASELINES),
            "gpuh": f["gpuh"] / fig["sia"]["gpuh"],
            "finishes": f["finished"] >= max(fig[b]["finished"] for b in sched_eval.BASELINES),
            "ooms": summ["oom_events"], "avg_h": f["avg"] / 3600, "common": len(ids)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("frenzy")
    ap.add_argument("traces")
    ap.add_argument("--cache", required=True, help="folder of the baselines' runs (reused)")
    ap.add_argument("--policy", action="append", help="policies under test [frenzy]")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--only", action="append", help="workload labels to run [all]")
    ap.add_argument("--jobs", type=int, default=2, help="simulations run at once")
    ap.add_argument("--sim-args", default="",
                    help="more `frenzy simulate` flags for every run, e.g. '--perf-error 0' "
                         "(use a cache folder of its own)")
    ap.add_argument("--same-work", action="store_true",
                    help="withhold from each workload the jobs some baseline cannot finish, so that "
                         "every policy does the same work (see same_work)")
    ap.add_argument("--set", choices=["main", "heldout"], default="main",
                    help="sched_eval.py's seven workloads, or the held-out ones [main]")
    a = ap.parse_args()
    extra = a.sim_args.split()
    policies = a.policy or ["frenzy"]
    os.makedirs(a.cache, exist_ok=True)
    make = sched_eval.workloads if a.set == "main" else sched_eval.heldout_workloads
    ws = [w for w in make(a.frenzy, a.traces, a.cache) if not a.only or w[0] in a.only]
    seeds = list(range(1, a.seeds + 1))
    todo = [(label, cluster, path, s) for label, cluster, path in ws for s in seeds]

    def one(label, cluster, path, seed):
        folder = os.path.join(a.cache, f"{label}-{seed}")
        removed, flags = 0, extra
        if a.same_work:
            flags, base, removed = same_work(a.frenzy, label, cluster, path, seed, a.cache, extra)
        else:
            base = load_or_run_baselines(a.frenzy, cluster, path, seed, folder, extra)
        test = simulate(a.frenzy, cluster, path, policies, seed,
                        os.path.join(folder, "test-" + str(os.getpid())), flags)
        return {p: dict(verdict(base, test, p), removed=removed) for p in policies}

    results = {}
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        futs = {pool.submit(one, *t): (t[0], t[3]) for t in todo}
        for fut in concurrent.futures.as_completed(futs):
            results[futs[fut]] = fut.result()
    for p in policies:
        print(f"\n{p}: against the best baseline on the jobs every policy finished\n")
        print("| workload | avg JCT ratio (mean) | (worst) | all jobs (mean) | (worst) | "
              "p99 ratio (mean) | (worst) | GPU-h vs sia | finishes as many | OOMs | "
              "per seed avg/p99 |" + (" jobs withheld per seed |" if a.same_work else ""))
        print("|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if a.same_work else ""))
        for label, _, _ in ws:
            v = [results[(label, s)][p] for s in seeds]
            mean = lambda k: sum(x[k] for x in v) / len(v)  # noqa: E731
            per = " ".join(f"{x['avg']:.2f}/{x['p99']:.2f}" for x in v)
            print(f"| {label} | {mean('avg'):.2f} | {max(x['avg'] for x in v):.2f} | "
                  f"{mean('all'):.2f} | {max(x['all'] for x in v):.2f} | "
                  f"{mean('p99'):.2f} | {max(x['p99'] for x in v):.2f} | {mean('gpuh'):.2f} | "
                  f"{'yes' if all(x['finishes'] for x in v) else 'no'} | "
                  f"{sum(x['ooms'] for x in v)} | {per} |" +
                  (" " + " ".join(str(x["removed"]) for x in v) + " |" if a.same_work else ""))


if __name__ == "__main__":
    main()
