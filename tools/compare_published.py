#!/usr/bin/env python3
"""MARP and its peers against published peak-memory measurements.

Reads data/measurements/published.csv (measured figures others published, each with its source
and full configuration), predicts each with `frenzy predict`, and, where they apply, with the
two formulas practitioners use today, written down from their documentation:

  * Megatron-LM's theoretical memory (megatron/training/theoretical_memory_usage.py; also
    Korthikanti et al. 2023): weights and optimizer = params_on_rank x (18, or 6 + 12/dp with the
    distributed optimizer); activations = s*b*h*(18 + 4*ffn/h) bytes per layer (which assumes
    sequence parallelism and selective recomputation), times layers per stage, times the
    micro-batches in flight, divided by tp; plus the first stage's embedding dropout mask
    (s*b*h*pp) and the output layer (4*s*b*h*(1 + V/h)) when pp == 1. No temporaries.
  * DeepSpeed's model-state estimators (DeepSpeed docs, "Memory Requirements"; functions
    estimate_zero2_model_states_mem_needs / estimate_zero3_model_states_mem_needs): ZeRO-2 (no
    offload) 4*P + 16*P/gpus; ZeRO-3 (no offload) 4*largest_layer + 18*P/gpus. States only.

The measured quantity decides what is compared: max_allocated -> peak_bytes,
max_reserved -> peak_reserved_bytes, nvidia_smi -> device_bytes.

With --bands FILE it also writes MARP's error band per modelled framework (megatron, deepspeed,
fsdp, hf) over the plain rows (no feature MARP does not model): the rows, the most negative
(under-prediction) and most positive relative errors and the mean absolute error. `frenzy
predict` reports the band and `frenzy plan --safe-margin` sizes its margin by it
(data/measurements/error_bands.json; tests check that file is what this tool writes now).

The held-out set (data/measurements/heldout.csv, sources in HELDOUT_SOURCES.md) was gathered
after the mechanisms were built and was not used to choose or tune any of them:
`--csv data/measurements/heldout.csv`. Its rows carry an `args` column with the flags of the
source's own settings (fine-tuning, loop, software), fixed before the first prediction was run.

Usage: compare_published.py FRENZY_BIN [--csv data/measurements/published.csv] [--markdown]
                            [--bands FILE]
"""
import argparse
import csv
import json
import os
import shlex
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
GIB = 1 << 30

# Models that are not in the zoo: configs kept beside the measurements.
EXTRA_MODELS = {
    "meta-llama/Llama-3.2-3B": "data/measurements/configs/llama-3.2-3b.json",
    "TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T": "data/measurements/configs/tinyllama-1.1b.json",
    "google/gemma-2b": "data/measurements/configs/gemma-2b.json",
}

FRAMEWORK = {  # how each measured system maps onto the frameworks MARP models
    "megatron": "megatron", "deepspeed": "deepspeed", "hf": "hf",
    "torchtitan": "fsdp", "litgpt": "fsdp", "torchtune": "hf", "other": "hf", "fsdp": "fsdp",
}

# Features MARP does not model yet; rows that use them are reported apart.
UNMODELLED = ("float8", "torch.compile on", "+ compile", "chunked", "activation offloading",
              "optimizer_in_bwd=true", "gemini", "megatron-fsdp")


def features(r):
    """The features a row exercises (issue 17's, and pipeline and expert parallelism), from its
    layout columns and its flags (a row may have several; "plain full training" is one with none
    of the fine-tuning, offload or FP8 ones)."""
    args = shlex.split(r.get("args") or "")
    arg = lambda flag: args[args.index(flag) + 1] if flag in args[:-1] else None  # noqa: E731
    note = r["source_note"].lower()
    n = lambda k: int(r[k] or 1)  # noqa: E731
    tags = []
    if n("cp") > 1:
        tags.append("context parallel")
    if FRAMEWORK[r["framework"]] == "fsdp" and r["zero"] == "3" and n("tp") > 1:
        tags.append("FSDP + TP")
    if r["precision"] == "fp8" or "float8" in note or arg("--precision") == "fp8":
        tags.append("FP8")
    tune = arg("--finetune")
    if tune in ("lora", "qlora"):
        tags.append({"lora": "LoRA", "qlora": "QLoRA"}[tune])
    if (arg("--offload") or "none") != "none" or "--offload-activations" in args:
        tags.append("offload")
    if r["seq_len"] and int(r["seq_len"]) >= 32768:
        tags.append("long context (>= 32k)")
    if n("pp") > 1:
        tags.append("pipeline parallel")
    if int(arg("--ep") or 1) > 1:
        tags.append("expert parallel")
    if not set(tags) & {"FP8", "LoRA", "QLoRA", "offload"}:
        tags.append("plain full training")
    return tags


def source_doc(r):
    """The document a row was read from: owner/repo for GitHub, the host otherwise."""
    url = r["source_url"].split("://", 1)[-1]
    parts = url.split("/")
    return "/".join(parts[1:3]) if parts[0] == "github.com" else parts[0]


def unmodelled(r):
    note = r["source_note"].lower()
    return [u for u in UNMODELLED if u in note]


# The software each source ran, where it changes memory (from the sources' own notes):
# the HF documentation's runs (Jan 2022: V100, CUDA 11.2, PyTorch 1.10, transformers.AdamW) had a
# 1343 MiB CUDA context measured in that same document and no foreach optimizer; the 2022
# ColossalAI/Lightning GPT-2 runs used PyTorch 1.x.
ENVIRONMENT = {
    "hf": ["--cuda-context-mib", "1343", "--no-foreach", "--keep-grads"],
    "other": ["--no-foreach", "--keep-grads"],
    "deepspeed": ["--no-foreach"],
    # published.csv's Megatron rows ran Megatron-LM 992da75 (April 2023): its own transformer
    # layers (Transformer Engine was opt-in), and a GPT model that passed fp32 logits to a cross
    # entropy that subtracted their maximum out of place.
    "megatron": ["--megatron-legacy"],
    # litgpt's GPT returns the lm_head's output in the model's dtype (bf16-true) and its
    # chunked_cross_entropy (litgpt/utils.py) takes F.cross_entropy of those 16-bit logits, 128
    # tokens at a time, without an fp32 copy. Its model is its own GPT class (--litgpt-model).
    "litgpt": ["--loss-in-model-dtype", "--litgpt-model"],
    # torchtune's recipes take the loss and `del logits` before backward.
    "torchtune": ["--drop-logits"],
}

METRIC = {"max_allocated": "peak_bytes", "max_reserved": "peak_reserved_bytes",
          "nvidia_smi": "device_bytes", "allocated": "peak_bytes"}
LENGTH_METRIC = {"peak_reserved_bytes": "length_reserved_bytes",
                 "device_bytes": "length_device_bytes"}


def model_arg(name):
    for key, path in EXTRA_MODELS.items():
        if name.startswith(key.split("-intermediate")[0]):
            return os.path.join(ROOT, path)
    kept = os.path.join(ROOT, "data/measurements/configs", name + ".json")
    return kept if os.path.exists(kept) else name


def frenzy_json(frenzy, args):
    out = subprocess.run([frenzy] + args + ["--json"], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip())
    return json.loads(out.stdout)


def predict_row(frenzy, r):
    framework = FRAMEWORK[r["framework"]]
    recompute = r["recompute"] or "none"
    if r["framework"] == "torchtitan" and recompute == "selective":
        recompute = "op"  # torchtitan's default selective_ac_option is per-op
    args = ["predict", "--model", model_arg(r["model"]), "--seq-len", r["seq_len"],
            "--micro-batch", r["micro_batch"] or "1", "--precision", r["precision"],
            "--optimizer", r["optimizer"], "--recompute", recompute,
            "--framework", framework]
    for flag in ("tp", "pp", "dp", "cp"):
        if r[flag]:
            args += [f"--{flag}", r[flag]]
    if framework == "megatron" and r["zero"] == "1":
        args.append("--distributed-optimizer")  # Megatron's ZeRO-1
    elif r["zero"] and r["zero"] != "0":
        args += ["--zero", r["zero"]]
    if r["global_batch"]:
        args += ["--global-batch", r["global_batch"]]
    if r["flash_attn"] == "0":
        args.append("--no-flash-attn")
    if r["sequence_parallel"] == "1":
        args.append("--sequence-parallel")
    if r["model"].startswith("bert"):
        args += ["--head", "classification"]
    if r.get("args") is not None:
        # A row that names its own flags (heldout.csv: the source's software and fine-tuning
        # settings, each explained in HELDOUT_SOURCES.md) replaces the per-framework defaults.
        args += shlex.split(r["args"])
        return frenzy_json(frenzy, args)
    args += ENVIRONMENT.get(r["framework"], [])
    if r["framework"] == "litgpt" and int(r["dp"] or 1) > 1 and r["zero"] in ("2", "3"):
        # litgpt's finetune loops accumulate under fabric.no_backward_sync, which is FSDP's
        # no_sync: unsharded gradients between micro-batches.
        args.append("--accumulate-unsharded")
    if r["framework"] == "deepspeed" and r["precision"] == "fp16":
        # DeepSpeed fp16 runs the HF model in fp16 without autocast; that GPT-2 (2022)
        # computed its cross-entropy on the fp16 logits.
        args.append("--loss-in-model-dtype")
    return frenzy_json(frenzy, args)


def predicted_and_measured(frenzy, r):
    """MARP's prediction of the row's measured reading (its stage's, where it names one) and the
    measurement, in bytes. Raises RuntimeError when frenzy refuses the row."""
    p = predict_row(frenzy, r)
    metric = METRIC[r["metric"]]
    if r["stage"] != "":
        p = [x for x in p["ranks"] if x["stage"] == int(r["stage"])][0]
    elif "length_reserved_bytes" in p:
        # A row whose batches vary in length (its args give the dataset's lengths): the
        # reserved and device readings an epoch reaches.
        metric = LENGTH_METRIC.get(metric, metric)
    return p[metric], float(r["measured_gib"]) * GIB


def megatron_formula(info, r):
    """Megatron-LM's theoretical memory, first pipeline stage (its own convention)."""
    m = info
    s, b = int(r["seq_len"]), int(r["micro_batch"] or 1)
    tp, pp, dp = int(r["tp"] or 1), int(r["pp"] or 1), int(r["dp"] or 1)
    h, L, ffn, V = m["hidden_size"], m["num_layers"], m["ffn_hidden_size"], m["vocab_size"]
    params = m["params"]
    emb = V * h
    per_rank = (params - emb) / pp / tp + emb / tp
    weight_opt = per_rank * 18  # no distributed optimizer in these rows
    act = s * b * h * (18 + 4 * ffn / h) * L
    gb = int(r["global_batch"] or b * dp)
    in_flight = min(pp, max(1, gb // (b * dp)))
    act = act / pp * in_flight + 8 * s * b * h * in_flight  # embedding dropout mask etc.
    if pp == 1:
        act += 4 * s * b * h * (1 + V / h)
    return weight_opt + act / tp


def deepspeed_formula(info, r):
    zero = int(r["zero"] or 0)
    gpus = int(r["num_gpus"] or 1)
    params = info["params"]
    largest = max(g["params"] for g in info["params_breakdown"]["per_layer"])
    largest = max(largest, info["params_breakdown"]["embedding"])
    if zero == 2:
        return 4 * params + 16 * params / gpus
    if zero == 3:
        return 4 * largest + 18 * params / gpus
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("frenzy")
    ap.add_argument("--csv", default=os.path.join(ROOT, "data/measurements/published.csv"))
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--bands", help="write the per-framework error bands (JSON) here")
    a = ap.parse_args()
    rows = list(csv.DictReader(open(a.csv)))
    results, skipped = [], []
    for r in rows:
        if not r["seq_len"] or not r["micro_batch"]:
            skipped.append((r["id"], "sequence length or micro-batch not published"))
            continue
        try:
            pred, meas = predicted_and_measured(a.frenzy, r)
            info = frenzy_json(a.frenzy, ["inspect", "--model", model_arg(r["model"])])
        except RuntimeError as e:
            skipped.append((r["id"], str(e)))
            continue
        res = {"id": r["id"], "framework": r["framework"], "model": r["model"],
               "features": features(r), "doc": source_doc(r),
               "unmodelled": ", ".join(unmodelled(r)),
               "metric": r["metric"], "measured_gib": meas / GIB, "marp_gib": pred / GIB,
               "marp_err": (pred - meas) / meas}
        if r["framework"] == "megatron":
            mf = megatron_formula(info, r)
            res["megatron_gib"], res["megatron_err"] = mf / GIB, (mf - meas) / meas
        if r["zero"] in ("2", "3") and "--finetune" not in (r.get("args") or ""):
            df = deepspeed_formula(info, r)  # full training's states only
            res["deepspeed_gib"], res["deepspeed_err"] = df / GIB, (df - meas) / meas
        results.append(res)
    if a.markdown:
        print("| id | system | model | metric | measured GiB | MARP GiB | MARP error | Megatron formula | DeepSpeed estimator | not modelled |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for x in results:
            mf = f"{x['megatron_gib']:.2f} ({100 * x['megatron_err']:+.1f}%)" if "megatron_gib" in x else "-"
            df = f"{x['deepspeed_gib']:.2f} ({100 * x['deepspeed_err']:+.1f}%)" if "deepspeed_gib" in x else "-"
            print(f"| {x['id']} | {x['framework']} | {x['model'][:24]} | {x['metric']} | "
                  f"{x['measured_gib']:.2f} | {x['marp_gib']:.2f} | {100 * x['marp_err']:+.1f}% | {mf} | {df} | "
                  f"{x['unmodelled'] or '-'} |")
        print()
    def acc(xs):
        if not xs:
            return "-", "-"
        errs = [abs(x["marp_err"]) for x in xs]
        return f"{100 * (1 - sum(errs) / len(errs)):.1f}%", f"{100 * (1 - max(errs)):.1f}%"

    # One table per grouping: by the system that ran the row (then all rows), by feature (a row
    # counts under every feature it has) and by the document it was read from.
    for n, (title, key) in enumerate((("source", lambda x: [x["framework"]]),
                                      ("feature", lambda x: x["features"]),
                                      ("source document", lambda x: [x["doc"]]))):
        groups = {}
        for x in results:
            for k in key(x):
                groups.setdefault(k, []).append(x)
        rows = sorted(groups.items()) + ([("all", results)] if title == "source" else [])
        print(("\n" if n else "") + f"| {title} | rows (plain) | MARP mean accuracy, plain rows | "
              "worst | under by more than 3% | rows with unmodelled features | mean accuracy there |")
        print("|---|---|---|---|---|---|---|")
        for k, xs in rows:
            plain = [x for x in xs if not x["unmodelled"]]
            other = [x for x in xs if x["unmodelled"]]
            mean, worst = acc(plain)
            under = sum(1 for x in plain if x["marp_err"] < -0.03)
            print(f"| {k} | {len(plain)} | {mean} | {worst} | {under} | {len(other)} | "
                  f"{acc(other)[0]} |")
    for name, key in (("Megatron formula", "megatron_err"), ("DeepSpeed estimator", "deepspeed_err")):
        xs = [x for x in results if key in x]
        if xs:
            pe = [abs(x[key]) for x in xs]
            me = [abs(x["marp_err"]) for x in xs]
            print(f"\n{name} on its {len(xs)} rows: mean accuracy {100 * (1 - sum(pe) / len(pe)):.1f}% "
                  f"(MARP on the same rows: {100 * (1 - sum(me) / len(me)):.1f}%)")
    if skipped:
        print("\nskipped: " + "; ".join(f"{i} ({why})" for i, why in skipped))
    if a.bands:
        write_bands(a.bands, results)
    return 0


def write_bands(path, results):
    bands = {}
    for x in results:
        if x["unmodelled"]:
            continue
        bands.setdefault(FRAMEWORK[x["framework"]], []).append(x["marp_err"])
    doc = {"source": "tools/compare_published.py --bands over data/measurements/published.csv: "
                     "MARP's relative error (predicted - measured) / measured on the plain rows "
                     "(no feature MARP does not model), by the framework each system is modelled "
                     "as; each row's own source is in published.csv",
           "frameworks": {f: {"rows": len(e), "min_error": round(min(e), 4),
                              "max_error": round(max(e), 4),
                              "mean_abs_error": round(sum(abs(v) for v in e) / len(e), 4)}
                          for f, e in sorted(bands.items())}}
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    sys.exit(main())
