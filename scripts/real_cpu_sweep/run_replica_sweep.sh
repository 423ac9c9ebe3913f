#!/usr/bin/env bash
# The real CPU sweep behind data/sample_sweeps/real-cpu-replicas: vLLM's CPU build serving the
# tiny local model with n-gram speculation, K in {0,1,3} x concurrency {1,4} x 3 runs on each of
# 3 server replicas per K (`tune-spec-k plan --server-replicas 3`: serve combos k<K>-seed=<r>,
# started with `vllm serve --seed r`, in a shuffled order), run by the real
# `vllm bench sweep serve` on 127.0.0.1.
#
# Usage: run_replica_sweep.sh VENV_DIR WORK_DIR [EXTRA ARGS FOR THE SWEEP, e.g. --dry-run]
# Environment: PORT (default 8767), COPY_TO (a folder to copy the finished experiment to).
# About 25-35 minutes on 2 cores (9 server starts).
set -euo pipefail

venv=$(realpath -m "${1:?usage: run_replica_sweep.sh VENV_DIR WORK_DIR}")
work=$(realpath -m "${2:?usage: run_replica_sweep.sh VENV_DIR WORK_DIR}")
shift 2
repo=$(cd "$(dirname "$0")/../.." && pwd)
port=${PORT:-8767}
# shellcheck source=common.sh
. "$repo/scripts/real_cpu_sweep/common.sh"

model="$work/tiny-llama"
tiny_model "$model"

# No --seed in --serve-args: the plan gives each replica its own.
plan_tiny_ngram "$model" --ks 0,1,3 --anchors 1,4 --server-replicas 3 \
  --input-len 64 --output-len 64 --num-prompts 16 --num-runs 3 \
  --serve-args "--max-model-len 1024 --served-model-name tiny" \
  --experiment-name real-cpu-replicas

run_plan_into "$work/results/real-cpu-replicas" "$@"
