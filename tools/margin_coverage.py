#!/usr/bin/env python3
"""Would a memory margin have held runs from sources it never saw? (leave one source out)

For every plain row of the calibration set (data/measurements/published.csv) and the held-out
set (heldout.csv), MARP's relative error (predicted - measured) / measured, as
tools/compare_published.py computes it. A margin m "covers" a row when predicted x (1 + m) >=
measured: a plan judged with that margin would not have run out of memory there. Rules compared:

  flat-10       the planner's default 10%;
  cal-band      `plan --safe-margin` today: the framework's worst under-prediction on the
                calibration set, + 2 points (memory/error_bands.h), at least 10%;
  loso-band     the same rule from every row of both sets except those of the row's own source
                (the source a new user's run would be: unseen);
  loso-any      the worst under-prediction of any framework, other sources only.

For each rule: rows covered, and the memory it would have asked for relative to the measured
peak (mean of predicted x (1 + m) / measured): the price of the cover.

usage: tools/margin_coverage.py FRENZY_BIN
"""
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_published as cp  # noqa: E402


def rows(frenzy, path, tag):
    out = []
    for r in csv.DictReader(open(path)):
        if not r["seq_len"] or not r["micro_batch"] or cp.unmodelled(r):
            continue
        try:
            pred, meas = cp.predicted_and_measured(frenzy, r)
        except RuntimeError:
            continue  # compare_published.py lists such rows as skipped
        out.append({"id": r["id"], "fw": cp.FRAMEWORK[r["framework"]], "set": tag,
                    "src": "/".join(r["source_url"].split("/")[2:5]),
                    "err": (pred - meas) / meas})
    return out


def margin(errs, base=0.10):
    """SafeMargin's rule (src/memory/error_bands.cc) over the errors `errs`."""
    worst = min(errs) if errs else 0.0
    return base if worst >= 0 else max(base, 1.0 / (1.0 + worst) - 1.0 + 0.02)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    data = os.path.join(cp.ROOT, "data", "measurements")
    R = (rows(sys.argv[1], os.path.join(data, "published.csv"), "calibration") +
         rows(sys.argv[1], os.path.join(data, "heldout.csv"), "held-out"))
    cal = {}
    for r in R:
        if r["set"] == "calibration":
            cal.setdefault(r["fw"], []).append(r["err"])
    rules = {
        "flat-10": lambda r: 0.10,
        "cal-band": lambda r: margin(cal.get(r["fw"], [])),
        "loso-band": lambda r: margin([x["err"] for x in R
                                       if x["fw"] == r["fw"] and x["src"] != r["src"]]),
        "loso-any": lambda r: margin([x["err"] for x in R if x["src"] != r["src"]]),
    }
    print("| rule | rows | covered | memory asked / measured (mean) | margins |")
    print("|---|---|---|---|---|")
    for name, rule in rules.items():
        for subset in ("held-out", "all"):
            rs = [r for r in R if subset == "all" or r["set"] == subset]
            ms = [rule(r) for r in rs]
            cov = sum((1 + r["err"]) * (1 + m) >= 1 - 1e-12 for r, m in zip(rs, ms))
            asked = sum((1 + r["err"]) * (1 + m) for r, m in zip(rs, ms)) / len(rs)
            print(f"| {name} | {subset} {len(rs)} | {cov} | {asked:.2f} | "
                  f"{100 * min(ms):.0f}–{100 * max(ms):.0f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
