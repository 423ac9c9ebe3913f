#!/usr/bin/env bash
# The validation sweep behind data/validation_sweeps/real-cpu-tiny-ngram: the schedule tuned from
# the real CPU sweep (run_sweep.sh first), served as a dynamic config next to a static K=3 server
# and a server without speculation, at concurrency {1,2,4,8} x 2 runs; then `tune-spec-k check`.
#
# Usage: run_validation.sh VENV_DIR WORK_DIR [EXTRA ARGS FOR THE SWEEP]
# Environment: PORT (default 8765), COPY_TO (a folder to copy the finished experiment to).
# About 30 minutes on 2 cores.
set -euo pipefail

venv=$(realpath -m "${1:?usage: run_validation.sh VENV_DIR WORK_DIR}")
work=$(realpath -m "${2:?usage: run_validation.sh VENV_DIR WORK_DIR}")
shift 2
repo=$(cd "$(dirname "$0")/../.." && pwd)
port=${PORT:-8765}
# shellcheck source=common.sh
. "$repo/scripts/real_cpu_sweep/common.sh"

tuning="$work/results/real-cpu-tiny-ngram"
schedule="$work/validation-schedule.json"
# The seed's policy; its noise gate is loosened as the sample's README explains.
(cd "$repo" && uv run tune-spec-k "$tuning" --max-objective-relative-mad 0.2 \
  --output-json "$schedule" > /dev/null)
(cd "$repo" && uv run tune-spec-k plan --design "$tuning/sweep_plan.json" \
  --validate "$schedule" --static-ks 3 --num-runs 2 --port "$port" \
  --results-dir "$work/results" --experiment-name real-cpu-tiny-ngram-validation \
  -o "$work/validation-plan")

start=$(date +%s)
(cd "$work" && bash "$work/validation-plan/run.sh" "$@")
echo "sweep took $(( $(date +%s) - start )) s"

experiment="$work/results/real-cpu-tiny-ngram-validation"
cp "$schedule" "$experiment/tuned_schedule.json" 2>/dev/null || true
cp "$work/validation-plan/command.txt" "$work/validation-plan/sweep_plan.json" "$experiment/" \
  2>/dev/null || true
(cd "$repo" && uv run tune-spec-k check "$experiment" --min-runs 2 \
  --schedule "$experiment/tuned_schedule.json") || true
if [ -n "${COPY_TO:-}" ] && [ -d "$experiment" ]; then
  mkdir -p "$COPY_TO" && cp -r "$experiment/." "$COPY_TO/"
  echo "copied to $COPY_TO"
fi
