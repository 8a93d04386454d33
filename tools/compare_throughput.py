#!/usr/bin/env python3
"""The throughput model against published measured training throughput.

Reads data/measurements/throughput.csv (measured figures with full configurations, each with
its source), predicts each row with `frenzy perf`, and reports the error per source and GPU.
Measured TFLOP/s of Megatron-LM's papers count FLOPs with their formula (Narayanan et al.
SC'21, eq. 3: 96·B·s·l·h²·(1 + s/6h + V/16lh) per iteration with full recomputation, 72·... without);
they are turned back into tokens per second per GPU with that same formula before comparing.

Usage: compare_throughput.py FRENZY_BIN [--csv PATH] [--markdown]
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

FRAMEWORK = {"megatron": "megatron", "deepspeed": "deepspeed", "llm-foundry": "fsdp",
             "torchtitan": "fsdp", "fsdp": "fsdp", "other": "hf"}
# GPUs named by sources but not in the catalog, mapped to the part with the same tensor cores.
GPU_ALIAS = {"H100-96GB-HBM2e": "H100-80GB"}
# Inter-node bandwidth per node when a source does not state it (GB/s): DGX A100 8 x 200 Gb/s,
# DGX H100 8 x 400 Gb/s, DGX-2 V100 8 x 100 Gb/s.
DEFAULT_NET_GBS = {"A100-80GB": 200, "A100-40GB": 200, "H100-80GB": 400, "H200": 400,
                   "V100-16GB": 100, "V100-32GB": 100}


def config_for(r):
    name = r["model"].lower()
    gated = any(k in name for k in ("llama", "mistral", "qwen", "mixtral"))
    cfg = {"model_type": "llama" if gated else "gpt_neox",
           "hidden_size": int(r["hidden"]), "num_hidden_layers": int(r["layers"]),
           "num_attention_heads": int(r["heads"]), "intermediate_size": int(r["ffn"]),
           "vocab_size": int(r["vocab"]), "max_position_embeddings": int(r["seq_len"])}
    if gated:
        cfg["num_key_value_heads"] = int(r["kv_heads"] or r["heads"])
    else:
        cfg["use_parallel_residual"] = False
        cfg["tie_word_embeddings"] = True
    return cfg


def megatron_tokens_per_s_per_gpu(r, tflops):
    l, h, s, v = int(r["layers"]), int(r["hidden"]), int(r["seq_len"]), int(r["vocab"])
    k = 96 if r["recompute"] == "full" else 72
    flops_per_token = k * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))
    return tflops * 1e12 / flops_per_token


def measured_tokens_per_s_per_gpu(r):
    v = float(r["measured"])
    n = int(r["num_gpus"])
    if r["metric"] == "tokens_per_s_per_gpu":
        return v
    if r["metric"] == "tokens_per_s":
        return v / n
    if r["metric"] == "tflops_per_gpu":
        return megatron_tokens_per_s_per_gpu(r, v)
    if r["metric"] == "iteration_s" and r["global_batch"]:
        return int(r["global_batch"]) * int(r["seq_len"]) / v / n
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("frenzy")
    ap.add_argument("--csv", default=os.path.join(ROOT, "data/measurements/throughput.csv"))
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--rows", choices=["all", "odd", "even"], default="all",
                    help="odd: the calibration rows; even: the held-out rows")
    ap.add_argument("--dump", help="write per-row results as JSON (for the calibration fit)")
    ap.add_argument("--uncalibrated", action="store_true",
                    help="predict without the fitted training efficiency (input of the fit)")
    a = ap.parse_args()
    rows = list(csv.DictReader(open(a.csv)))
    if a.rows != "all":
        parity = 1 if a.rows == "odd" else 0
        rows = [r for r in rows if int(r["id"][2:]) % 2 == parity]
    results, skipped = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in rows:
            meas = measured_tokens_per_s_per_gpu(r)
            gpu = GPU_ALIAS.get(r["gpu"], r["gpu"])
            if meas is None:
                skipped.append((r["id"], "metric"))
                continue
            # Rows naming a zoo model (moe_throughput.csv) use it; the others give the shape.
            path = r.get("zoo") or os.path.join(tmp, r["id"] + ".json")
            if not r.get("zoo"):
                with open(path, "w") as f:
                    json.dump(config_for(r), f)
            tp, pp, cp = int(r["tp"] or 1), int(r["pp"] or 1), int(r["cp"] or 1)
            n = int(r["num_gpus"])
            dp = int(r["dp"] or n // (tp * pp * cp))
            gb = int(r["global_batch"] or 0)
            mb = r["micro_batch"] or ("1" if not gb else str(max(1, gb // dp // max(1, pp * 4))))
            net = float(r["network_gbps"]) / 8 if r["network_gbps"] else DEFAULT_NET_GBS.get(gpu, 25)
            # A cluster file describing the source's nodes.
            cluster = {"name": "src", "node_groups": [{"prefix": "n", "count": max(1, n // 8),
                       "gpu": gpu, "gpus_per_node": min(8, n), "network_gbs": net}]}
            cpath = os.path.join(tmp, r["id"] + "-cluster.json")
            with open(cpath, "w") as f:
                json.dump(cluster, f)
            precision = {"fp16": "fp16", "bf16": "bf16", "fp32": "fp32",
                         "fp8": "fp8"}.get(r["precision"], "bf16")
            args = [a.frenzy, "perf", "--model", path, "--gpu", gpu, "--cluster", cpath,
                    "--tp", str(tp), "--pp", str(pp), "--dp", str(dp), "--cp", str(cp),
                    "--seq-len", r["seq_len"], "--micro-batch", mb, "--precision", precision,
                    "--framework", FRAMEWORK.get(r["framework"], "hf"),
                    "--recompute", r["recompute"] or "none", "--json"]
            if precision == "fp8":
                # llm-foundry's amp_fp8 is Transformer Engine (delayed scaling); torchtitan's
                # Float8 is torchao's tensorwise dynamic scaling; rows may name the recipe.
                recipe = r.get("fp8_recipe") or (
                    "delayed" if r["framework"] == "llm-foundry" else "tensorwise")
                args += ["--fp8-recipe", recipe]
            for col, flag in (("vpp", "--vpp"), ("ep", "--ep"), ("etp", "--etp"),
                              ("moe_capacity_factor", "--moe-capacity-factor"),
                              ("moe_dispatcher", "--moe-dispatcher")):
                if r.get(col):
                    args += [flag, r[col]]
            if "ep" in r and r["framework"] == "megatron":
                # Megatron-core MoE runs (moe_throughput.csv): sequence parallel wherever TP
                # is (Megatron requires it for MoE), the distributed optimizer (their recipes).
                if tp > 1:
                    args.append("--sequence-parallel")
                if dp > 1:
                    args.append("--distributed-optimizer")
            if gb:
                args += ["--global-batch", str(gb)]
            if r["zero"] and r["zero"] != "0":
                args += ["--zero", r["zero"]]
            if r.get("flash_attn") == "0":
                args.append("--no-flash-attn")
            if a.uncalibrated:
                args.append("--uncalibrated")
            p = subprocess.run(args, capture_output=True, text=True)
            if p.returncode != 0:
                skipped.append((r["id"], p.stderr.strip().splitlines()[-1][:120]))
                continue
            pred = json.loads(p.stdout)["tokens_per_s_per_gpu"]
            results.append({"id": r["id"], "source": r["framework"], "gpu": gpu,
                            "model": r.get("model") or r.get("zoo"), "measured": meas, "predicted": pred,
                            "err": (pred - meas) / meas, "precision": precision,
                            "h_local": int(r["hidden"]) / tp if r.get("hidden") else None})
    if a.dump:
        with open(a.dump, "w") as f:
            json.dump(results, f)
    if a.markdown:
        print("| id | source | GPU | model | measured tok/s/GPU | predicted | error |")
        print("|---|---|---|---|---|---|---|")
        for x in results:
            print(f"| {x['id']} | {x['source']} | {x['gpu']} | {x['model']} | {x['measured']:.0f} | "
                  f"{x['predicted']:.0f} | {100 * x['err']:+.1f}% |")
        print()
    print("| group | rows | median abs. error | mean abs. error | worst |")
    print("|---|---|---|---|---|")
    groups = {}
    for x in results:
        groups.setdefault(("source", x["source"]), []).append(x)
        groups.setdefault(("gpu", x["gpu"]), []).append(x)
        groups.setdefault(("precision", x["precision"]), []).append(x)
    for (kind, name), xs in sorted(groups.items()) + [(("all", "all"), results)]:
        errs = [abs(x["err"]) for x in xs]
        print(f"| {kind}: {name} | {len(xs)} | {100 * statistics.median(errs):.1f}% | "
              f"{100 * statistics.mean(errs):.1f}% | {100 * max(errs):.1f}% |")
    within = sum(1 for x in results if abs(x["err"]) <= 0.25)
    print(f"\n{within} of {len(results)} rows within 25%")
    if skipped:
        print("skipped: " + "; ".join(f"{i} ({w})" for i, w in skipped[:20]) +
              (f" and {len(skipped) - 20} more" if len(skipped) > 20 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
