#!/usr/bin/env bash
# The real CPU context sweep behind data/sample_sweeps/real-cpu-context: vLLM's CPU build serving
# the tiny local model (built with 4096 positions) with n-gram speculation, prompt lengths
# {64, 1024, 3072} x concurrency {1, 4} x K in {0, 1, 3} x 3 runs, planned by
# `tune-spec-k plan --context-lengths` and run by the real `vllm bench sweep serve` on 127.0.0.1.
#
# Usage: run_context_sweep.sh VENV_DIR WORK_DIR [EXTRA ARGS FOR THE SWEEP, e.g. --dry-run]
# Environment: PORT (default 8766), COPY_TO (a folder to copy the finished experiment to).
# About 30-40 minutes on 2 cores.
set -euo pipefail

venv=$(realpath -m "${1:?usage: run_context_sweep.sh VENV_DIR WORK_DIR}")
work=$(realpath -m "${2:?usage: run_context_sweep.sh VENV_DIR WORK_DIR}")
shift 2
repo=$(cd "$(dirname "$0")/../.." && pwd)
port=${PORT:-8766}
# shellcheck source=common.sh
. "$repo/scripts/real_cpu_sweep/common.sh"

model="$work/tiny-llama-4k"
tiny_model "$model" 4096

plan_tiny_ngram "$model" --ks 0,1,3 --anchors 1,4 --context-lengths 64,1024,3072 \
  --output-len 128 --num-prompts 32 --num-runs 3 \
  --serve-args "--served-model-name tiny --seed 0" \
  --experiment-name real-cpu-context

run_plan_into "$work/results/real-cpu-context" "$@"
