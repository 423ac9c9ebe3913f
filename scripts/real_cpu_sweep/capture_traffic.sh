#!/usr/bin/env bash
# A real traffic capture for `tune-spec-k --traffic` (data/traffic/real-cpu-tiny-ngram/): vLLM's
# CPU build serves the tiny model with n-gram speculation and the schedule tuned on
# data/sample_sweeps/real-cpu-tiny-ngram; `vllm bench serve` drives it at concurrencies 1, 4, 2,
# 8 and 3 in turn (idle gaps between) while scrape_running.py reads /metrics every 0.5 s.
#
# Usage: capture_traffic.sh VENV_DIR WORK_DIR
#   VENV_DIR  made by install_vllm_cpu.sh (outside the repository)
#   WORK_DIR  model, caches, logs and the capture (outside the repository)
# Environment: PORT (default 8790). About 4 minutes on 2 cores (each load runs 20-35 s). The
# server is stopped and what it leaks is removed as in common.sh; no process is left running.
set -euo pipefail

venv=$(realpath -m "${1:?usage: capture_traffic.sh VENV_DIR WORK_DIR}")
work=$(realpath -m "${2:?usage: capture_traffic.sh VENV_DIR WORK_DIR}")
repo=$(cd "$(dirname "$0")/../.." && pwd)
port=${PORT:-8790}
# shellcheck source=common.sh
. "$repo/scripts/real_cpu_sweep/common.sh"

model="$work/tiny-llama"
tiny_model "$model"
spec='{"method": "ngram", "prompt_lookup_max": 4, "prompt_lookup_min": 2, "num_speculative_tokens": 5, "num_speculative_tokens_per_batch_size": [[1, 1, 2], [2, 3, 5], [4, 7, 3], [8, 8, 0]]}'

server_pid="" scraper_pid=""
stop_all() {
  [ -n "$scraper_pid" ] && { kill -TERM "$scraper_pid" 2>/dev/null || true; wait "$scraper_pid" 2>/dev/null || true; }
  # The server runs in a session of its own: its engine processes stop with it.
  [ -n "$server_pid" ] && { kill -TERM -- "-$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; }
  cleanup
}
trap stop_all EXIT

setsid vllm serve "$model" --host 127.0.0.1 --port "$port" --max-num-seqs 8 --max-model-len 1024 \
  --served-model-name tiny --seed 0 --speculative-config "$spec" > "$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 300); do
  curl -sf "http://127.0.0.1:$port/health" > /dev/null && break
  kill -0 "$server_pid" 2>/dev/null || { echo "the server died: see $work/server.log" >&2; exit 1; }
  sleep 1
done
python3 "$repo/scripts/real_cpu_sweep/scrape_running.py" "http://127.0.0.1:$port/metrics" \
  "$work/num_requests_running" 0.5 &
scraper_pid=$!
sleep 3
for step in "1 150" "4 400" "2 250" "8 800" "3 300"; do
  set -- $step
  vllm bench serve --model "$model" --served-model-name tiny --host 127.0.0.1 --port "$port" \
    --dataset-name random --random-input-len 64 --random-output-len 128 --ignore-eos \
    --temperature 0 --seed 0 --max-concurrency "$1" --num-prompts "$2" \
    > "$work/bench-c$1.log" 2>&1
  echo "concurrency $1: $2 prompts done at $(date -u +%H:%M:%S)"
  sleep 3
done
kill -TERM "$scraper_pid"; wait "$scraper_pid" || true; scraper_pid=""
"$venv/bin/vllm" --version > "$work/vllm-version.txt" 2>/dev/null || true
echo "wrote $work/num_requests_running.json and .csv"
