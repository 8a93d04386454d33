#!/usr/bin/python3
"""tools/compare_published.py files each published row under the issue-17 features it exercises
and under the document it was read from; the rows below are written by hand, each with the tags
a reader of its columns and flags would give it.

usage: compare_features_test.py
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import compare_published as cp  # noqa: E402


def row(**kw):
    r = {"framework": "megatron", "cp": "1", "tp": "1", "pp": "1", "zero": "0",
         "precision": "bf16", "seq_len": "4096", "source_note": "", "args": "",
         "source_url": "https://github.com/NVIDIA/Megatron-LM/tree/main/tests"}
    r.update(kw)
    return r


CASES = [
    (row(), ["plain full training"]),
    (row(cp="4", pp="2", seq_len="131072"),
     ["context parallel", "long context (>= 32k)", "pipeline parallel", "plain full training"]),
    # FSDP + TP needs a fully sharded FSDP-like framework: Megatron's TP alone is not it.
    (row(framework="torchtitan", zero="3", tp="8"), ["FSDP + TP", "plain full training"]),
    (row(tp="8"), ["plain full training"]),
    (row(tp="2", args="--ep 2 --moe-grouped-gemm"), ["expert parallel", "plain full training"]),
    (row(args="--ep 1"), ["plain full training"]),
    (row(framework="fsdp", zero="3", args="--finetune qlora --lora-rank 64 --offload params"),
     ["QLoRA", "offload"]),
    (row(framework="hf", args="--finetune lora --lora-rank 8 --drop-logits"), ["LoRA"]),
    (row(framework="hf", args="--finetune full"), ["plain full training"]),
    (row(precision="fp8"), ["FP8"]),
    (row(framework="torchtitan", source_note="torchao float8 tensorwise"), ["FP8"]),
    (row(framework="hf", args="--offload-activations"), ["offload"]),
]


def main():
    bad = 0
    for r, want in CASES:
        got = cp.features(r)
        if got != want:
            print(f"features({r}) = {got}, want {want}")
            bad += 1
    for url, want in (("https://github.com/AnswerDotAI/fsdp_qlora/blob/main/b.md", "AnswerDotAI/fsdp_qlora"),
                      ("https://huggingface.co/docs/transformers/v4.27.2/en/perf", "huggingface.co")):
        got = cp.source_doc({"source_url": url})
        if got != want:
            print(f"source_doc({url}) = {got}, want {want}")
            bad += 1
    print("ok" if not bad else f"{bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
