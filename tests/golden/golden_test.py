#!/usr/bin/env python3
"""Golden whole-simulation tests: `frenzy simulate` metrics, pinned per (workload, policy).

Each tests/golden/<case>.json holds the arguments of one `frenzy simulate` run (one policy, seed
1) and the metrics its `--json` output reported when the file was last refreshed, minus the
fields that measure the wall clock (see VOLATILE). CTest runs one check per file:

    golden_test.py FRENZY_BIN tests/golden/<case>.json     # rerun, compare, diff on failure

and one command rewrites every file from the binary of a build (after a deliberate change of
behaviour; review the diff before committing it):

    scripts/refresh-golden.sh [BUILD_DIR]        # = golden_test.py --refresh BUILD_DIR/bin/frenzy

A golden test catches what unit tests miss: any change, anywhere (option tables, perf model,
placement, a policy, the event loop, the metrics), that moves a whole replay. It does not say
whether the new numbers are better; that is the reviewer's call when refreshing.
"""

import argparse
import difflib
import json
import math
import os
import subprocess
import sys
import time

GOLDEN_DIR = os.path.dirname(os.path.abspath(__file__))
POLICIES = ["fifo-static", "tiresias", "gavel", "sia", "frenzy"]

# The cases: (workload label, simulate arguments, {policy: extra arguments}). Seed 1 throughout.
# philly-64 (Gavel's Philly-derived trace on cluster64, docs/workloads.md) runs to the end under
# every policy but Sia: Sia solves an ILP every 60 simulated seconds while any job is active, and
# the whole trace (1,700 simulated hours) takes it about 570 s of wall time; its first 24
# simulated hours take 1 to 5 s (release build).
CASES = [
    ("lab-synthetic", ["-c", "lab", "-w", "lab-synthetic"], {}),
    ("philly-64", ["-c", "cluster64", "-w", "philly-64"], {"sia": ["--max-hours", "24"]}),
]

# Fields that measure the wall clock (the time the scheduler and the simulation took), not the
# simulated run: they differ between two runs of the same binary and are left out. Everything
# else in the output is a pure function of the inputs and the seed (tests/sim/engine_test.cc
# pins that determinism).
VOLATILE = {
    "sim_wall_s",
    "sched_overhead_ms_mean",
    "sched_overhead_ms_p99",
    "sched_overhead_ms_max",
    "sched_overhead_ms_total",
}

# Floats are compared at a relative tolerance of 1e-9. The simulation is deterministic, but the
# golden files are checked by differently compiled binaries (gcc RelWithDebInfo, clang -O0 with
# sanitizers, another libm): those may round a few operations differently (an x87-free x86-64
# build still differs in what it constant-folds and contracts, and in libm's pow/exp/log last
# bits), and sums over ~1e5 events carry such last-bit differences up to ~1e-12 relative. A real
# change of behaviour moves the metrics by far more: one job of 60 finishing one second later
# moves avg_jct_s (~2e5 s) by ~1e-7 relative. Integers (counts) must match exactly. (Today a gcc
# -O2 build and a clang -O0 ASan build reproduce every file to the bit.)
REL_TOL = 1e-9


def run_case(frenzy, args):
    """Runs `frenzy simulate ARGS --json` and returns (header, metrics of its one policy)."""
    cmd = [frenzy, "simulate", *args, "--json", "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)} exited {proc.returncode}\n{proc.stderr}")
    out = json.loads(proc.stdout)
    policies = out.pop("policies")
    if len(policies) != 1:
        sys.exit(f"FAILED: expected one policy in the output of {' '.join(cmd)}")
    metrics = {k: v for k, v in policies[0].items() if k not in VOLATILE}
    return out, metrics


def case_args(base, policy, extra):
    return [*base, "-p", policy, "--seed", "1", *extra]


def render(doc):
    """The canonical text of a golden document: sorted keys, one field per line."""
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def compare(golden, actual, path=""):
    """Differences beyond tolerance, as readable lines; also returns `actual` with every value
    within tolerance replaced by the golden one, so that the unified diff shows real changes only.
    """
    problems = []
    if isinstance(golden, dict) and isinstance(actual, dict):
        shown = {}
        for key in sorted(set(golden) | set(actual)):
            where = f"{path}.{key}" if path else key
            if key not in actual:
                problems.append(f"{where}: missing from the output (golden {golden[key]!r})")
            elif key not in golden:
                problems.append(f"{where}: new in the output ({actual[key]!r})")
                shown[key] = actual[key]
            else:
                sub, shown[key] = compare(golden[key], actual[key], where)
                problems += sub
        return problems, shown
    if isinstance(golden, list) and isinstance(actual, list) and len(golden) == len(actual):
        shown = []
        for i, (g, a) in enumerate(zip(golden, actual)):
            sub, s = compare(g, a, f"{path}[{i}]")
            problems += sub
            shown.append(s)
        return problems, shown
    numbers = (int, float)
    if (isinstance(golden, numbers) and isinstance(actual, numbers) and
            not isinstance(golden, bool) and not isinstance(actual, bool)):
        if isinstance(golden, int) and isinstance(actual, int):
            ok = golden == actual
        else:
            ok = math.isclose(golden, actual, rel_tol=REL_TOL, abs_tol=0.0)
        if ok:
            return [], golden
        rel = abs(actual - golden) / max(abs(golden), abs(actual))
        problem = f"{path}: golden {golden!r}, now {actual!r} (relative difference {rel:.3g})"
        return [problem], actual
    if golden == actual:
        return [], golden
    return [f"{path}: golden {golden!r}, now {actual!r}"], actual


def check(frenzy, golden_path):
    with open(golden_path) as f:
        golden = json.load(f)
    t0 = time.monotonic()
    header, metrics = run_case(frenzy, golden["args"])
    elapsed = time.monotonic() - t0
    actual = dict(golden, run=header, metrics=metrics)
    problems, shown = compare(golden, actual)
    name = os.path.basename(golden_path)
    if not problems:
        print(f"ok: {name} ({elapsed:.1f} s): frenzy simulate {' '.join(golden['args'])}")
        return 0
    print(f"FAILED: {name}: `frenzy simulate {' '.join(golden['args'])}` no longer reproduces "
          f"the golden metrics ({len(problems)} fields; floats compared at relative {REL_TOL}):")
    for p in problems:
        print("  " + p)
    print()
    sys.stdout.writelines(difflib.unified_diff(
        render(golden).splitlines(keepends=True), render(shown).splitlines(keepends=True),
        fromfile=f"golden/{name}", tofile="now"))
    print("\nIf the change is intended, refresh the golden files with "
          "`scripts/refresh-golden.sh [BUILD_DIR]` and commit them with the change.")
    return 1


def refresh(frenzy):
    wanted = set()
    for label, base, extras in CASES:
        for policy in POLICIES:
            args = case_args(base, policy, extras.get(policy, []))
            t0 = time.monotonic()
            header, metrics = run_case(frenzy, args)
            elapsed = time.monotonic() - t0
            name = f"{label}.{policy}.json"
            wanted.add(name)
            doc = {"args": args, "run": header, "metrics": metrics}
            path = os.path.join(GOLDEN_DIR, name)
            old = None
            if os.path.exists(path):
                with open(path) as f:
                    old = f.read()
            text = render(doc)
            with open(path, "w") as f:
                f.write(text)
            state = "unchanged" if old == text else ("new" if old is None else "CHANGED")
            print(f"{state:9} {name} ({elapsed:.1f} s)")
    for name in sorted(os.listdir(GOLDEN_DIR)):
        if name.endswith(".json") and name not in wanted:
            os.remove(os.path.join(GOLDEN_DIR, name))
            print(f"removed   {name}")
    print("Review `git diff tests/golden` before committing (CMake's glob registers added or "
          "removed files at the next build).")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("frenzy", help="the frenzy binary")
    ap.add_argument("golden", nargs="?", help="the golden file to check")
    ap.add_argument("--refresh", action="store_true", help="rewrite every golden file")
    a = ap.parse_args()
    if a.refresh:
        return refresh(a.frenzy)
    if not a.golden:
        ap.error("give a golden file to check, or --refresh")
    return check(a.frenzy, a.golden)


if __name__ == "__main__":
    sys.exit(main())
