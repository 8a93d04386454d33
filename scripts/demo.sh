#!/usr/bin/env bash
# Builds Frenzy and runs the main job on the embedded defaults (no cluster needed):
# the model zoo with exact parameter counts, one model in detail, the GPU catalog and a
# bundled heterogeneous cluster, and a simulated week of LLM jobs on it under five schedulers.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh >/dev/null
frenzy=build/bin/frenzy
run() { printf '\n$ frenzy %s\n' "$*"; "$frenzy" "$@"; }
run models
run inspect --model llama-3.1-8b
run inspect --model mixtral-8x7b
run plan --model llama-2-7b --tokens 2e10 --global-batch 256 --seq-len 4096 --cluster cluster64 --top 5
run predict --model llama-3-8b --tp 2 --dp 4 --zero 1 --distributed-optimizer --gpu h100
run gpus
run cluster show cluster64
run simulate --cluster lab --workload lab-synthetic --policy fifo-static,tiresias,gavel,sia,frenzy --out build/demo-sim --no-progress
