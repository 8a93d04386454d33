#!/usr/bin/env bash
# Builds Frenzy and runs the main job on the embedded defaults (no cluster needed):
# the model zoo with exact parameter counts, one model in detail, the GPU catalog and a
# bundled heterogeneous cluster, and a simulated week of LLM jobs on it under five schedulers.
#
# usage: scripts/demo.sh [--serve [PORT]]
#   --serve  leave frenzyd up at the end, with the demo's jobs and two long ones still running,
#            and print the dashboard's URL (http://127.0.0.1:PORT/, PORT 8470 by default);
#            Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
serve=0 serve_port=8470
while [ $# -gt 0 ]; do
  case "$1" in
    --serve) serve=1; if [ $# -gt 1 ] && [[ "$2" =~ ^[0-9]+$ ]]; then serve_port=$2; shift; fi ;;
    *) echo "usage: scripts/demo.sh [--serve [PORT]]" >&2; exit 2 ;;
  esac
  shift
done
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
printf '\nThe comparison and its plots in one page, offline: %s\n' "$PWD/build/demo-sim/index.html"

# The serverless flow on the embedded default: frenzyd with its simulated lab cluster (time
# runs 20,000x faster), jobs submitted over HTTP with a model and goals only, planned,
# scheduled, run and finished.
printf '\n== frenzyd (sim backend, lab cluster)\n'
work=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
if [ "$serve" = 1 ]; then port=$serve_port; fi
export FRENZY_SERVER="http://127.0.0.1:$port" FRENZY_TOKEN="demo-token"
build/bin/frenzyd --backend sim --cluster lab --time-scale 20000 --listen "127.0.0.1:$port" \
  --db "$work/frenzy.db" --runs-dir "$work/runs" 2>"$work/frenzyd.log" &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 50); do "$frenzy" jobs >/dev/null 2>&1 && break; sleep 0.1; done
run submit --model llama-2-7b --tokens 2e10 --global-batch 256 --seq-len 4096 --name pretrain-7b
run submit --model opt-30b --tokens 5e9 --global-batch 64 --seq-len 2048 --name big-one
run submit --model gpt2 --tokens 2e9 --global-batch 64 --seq-len 1024 --name small
run submit --model mistral-7b --tokens 1e10 --global-batch 128 --seq-len 4096 --name finetune
sleep 1
run jobs
run cluster status
while "$frenzy" jobs --state queued --json | grep -q '"id"' || "$frenzy" jobs --state running --json | grep -q '"id"'; do
  sleep 1
done
run jobs
run status j-000002

if [ "$serve" = 1 ]; then
  # Two long jobs (about 40 minutes at this time scale) keep the dashboard's views moving.
  run submit --model llama-2-7b --tokens 2e12 --global-batch 256 --seq-len 4096 --name long-pretrain
  run submit --model mistral-7b --tokens 5e11 --global-batch 128 --seq-len 4096 --name long-finetune
  printf '\n== the dashboard: http://127.0.0.1:%s/  (token for submit and cancel: %s)\n' "$port" "$FRENZY_TOKEN"
  printf 'frenzyd keeps running; Ctrl-C stops it.\n'
  wait $daemon
fi
