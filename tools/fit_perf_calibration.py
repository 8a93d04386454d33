#!/usr/bin/env python3
"""Fits the throughput model's per-GPU training efficiency on the calibration rows.

Real training reaches only part of a GPU's best matmul rate: smaller per-GPU matrices run less
efficiently, and kernels other than large GEMMs cost more than their FLOPs suggest. The model
multiplies the matmul rate by scale * h/(h + h0), h the hidden size per tensor-parallel rank.
This script takes per-row results of `compare_throughput.py --rows odd --uncalibrated --dump`
(scale = 1, h0 = 0; on compute-bound rows predicted/measured is close to 1/efficiency), and for each
GPU type picks h0 from a grid and the median scale that minimise the median absolute log error.
The even rows stay held out for evaluation.

Usage: fit_perf_calibration.py DUMP.json
"""
import json
import math
import statistics
import sys


def main():
    rows = json.load(open(sys.argv[1]))
    by_gpu = {}
    for r in rows:
        # FP8 rows are evaluated, not fitted: their GEMMs run at the FP8 peak times the bf16
        # MAMF fraction, a prior rather than a fit.
        if r.get("precision") == "fp8":
            continue
        by_gpu.setdefault(r["gpu"], []).append(r)
    out = {}
    for gpu, xs in sorted(by_gpu.items()):
        best = None
        for h0 in (0, 64, 128, 256, 512, 1024, 2048):
            # measured/predicted = scale * h/(h+h0)  =>  scale = ratio * (h+h0)/h
            scales = [x["measured"] / x["predicted"] * (x["h_local"] + h0) / x["h_local"] for x in xs]
            scale = statistics.median(scales)
            err = statistics.median(
                abs(math.log(scale * x["h_local"] / (x["h_local"] + h0) * x["predicted"] / x["measured"]))
                for x in xs)
            if best is None or err < best[0]:
                best = (err, h0, scale)
        err, h0, scale = best
        out[gpu] = {"training_scale": round(scale, 3), "h0": h0, "rows": len(xs),
                    "median_abs_log_error": round(err, 3)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
