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
if [ ! -f "$model/model.safetensors" ]; then
  python "$repo/scripts/real_cpu_sweep/build_tiny_model.py" "$model"
fi

# No --seed in --serve-args: the plan gives each replica its own.
(cd "$repo" && uv run tune-spec-k plan \
  --model "$model" --method ngram \
  --spec-option prompt_lookup_max=4 --spec-option prompt_lookup_min=2 \
  --ks 0,1,3 --anchors 1,4 --server-replicas 3 \
  --input-len 64 --output-len 64 --num-prompts 16 --num-runs 3 \
  --port "$port" \
  --serve-args "--max-model-len 1024 --served-model-name tiny" \
  --bench-args "--served-model-name tiny" \
  --results-dir "$work/results" --experiment-name real-cpu-replicas \
  -o "$work/plan")

run_plan_into "$work/results/real-cpu-replicas" "$@"
