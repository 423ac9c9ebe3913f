#!/usr/bin/env bash
# `tune-spec-k run` for real (issue 41, item 6): the loop on vLLM's CPU build serving the tiny
# local model with n-gram speculation, the design of run_sweep.sh (K in {0,1,2,3,5} x
# concurrency {1,2,4,8}, 64 input / 128 output tokens, 48 prompts), round 0 the loop's default,
# the bracketed lean design (K=0, 2 and 5 at every anchor once plus a noise probe: K=0 and K=5
# 3 times at concurrency 1, 2 and 8, the smallest, middle and largest anchor;
# lib/loop/plan/lean.py; --first-ks 0,1,2,3,5 measures every K at once, as the real-cpu-loop
# sample's round 0 did), then follow-ups until the verdict is ready, the budget is spent or 4
# rounds are done. Each round's sweep is the real `vllm bench sweep serve`, run by the round's
# plan's run.sh.
#
# Usage: run_loop.sh VENV_DIR WORK_DIR [EXTRA ARGS FOR tune-spec-k run, e.g. --max-rounds 2]
#   VENV_DIR  made by install_vllm_cpu.sh (outside the repository)
#   WORK_DIR  model, caches, temp files, logs and results (outside the repository)
# Environment: PORT (default 8768), BUDGET_HOURS (default 1.0: the CPU's wall time counts as
# "GPU time"), EXPERIMENT (default real-cpu-loop), COPY_TO (a folder to copy the finished
# experiment to, e.g. data/sample_sweeps/real-cpu-bracket). Stopped (Ctrl-C) or failed, the
# same command resumes.
# Round 0 is about 10 minutes on 2 cores (5 server starts of ~50 s, 20 runs); each follow-up
# a few minutes more.
set -euo pipefail

venv=$(realpath -m "${1:?usage: run_loop.sh VENV_DIR WORK_DIR}")
work=$(realpath -m "${2:?usage: run_loop.sh VENV_DIR WORK_DIR}")
shift 2
repo=$(cd "$(dirname "$0")/../.." && pwd)
port=${PORT:-8768}
# shellcheck source=common.sh
. "$repo/scripts/real_cpu_sweep/common.sh"

model="$work/tiny-llama"
tiny_model "$model"

# tune-spec-k runs in the project's environment and starts the sweeps itself: only vLLM's
# processes get Intel OpenMP preloaded, through a `vllm` on PATH that sets it and runs vLLM's.
shim="$work/shim"
mkdir -p "$shim"
cat > "$shim/vllm" <<SHIM
#!/usr/bin/env bash
LD_PRELOAD="$venv/lib/libiomp5.so" exec "$venv/bin/vllm" "\$@"
SHIM
chmod +x "$shim/vllm"
unset LD_PRELOAD
export PATH="$shim:$PATH"

name=${EXPERIMENT:-real-cpu-loop}
experiment="$work/results/$name"
start=$(date +%s)
(cd "$work" && uv run --project "$repo" tune-spec-k run \
  --model "$model" --method ngram \
  --spec-option prompt_lookup_max=4 --spec-option prompt_lookup_min=2 \
  --ks 0,1,2,3,5 --anchors 1,2,4,8 \
  --input-len 64 --output-len 128 --num-prompts 48 \
  --serve-args "--max-model-len 1024 --served-model-name tiny --seed 0" \
  --bench-args "--served-model-name tiny" --port "$port" \
  --results-dir "$work/results" -e "$name" \
  --budget-gpu-hours "${BUDGET_HOURS:-1.0}" --max-rounds 4 \
  --server-start-seconds 50 --run-seconds 10 \
  --max-objective-relative-mad 0.2 "$@")
echo "the loop took $(( $(date +%s) - start )) s"
if [ -n "${COPY_TO:-}" ] && [ -d "$experiment" ]; then
  mkdir -p "$COPY_TO" && cp -r "$experiment/." "$COPY_TO/"
  echo "copied to $COPY_TO"
fi
