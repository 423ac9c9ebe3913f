# Sourced by every run_*.sh here: the environment of every vLLM command and the
# clean-up of what killed servers leave behind. Expects $venv, $work and $repo to be set
# ($port too for plan_tiny_ngram).
case "$work/" in
  "$repo"/*) echo "refusing WORK_DIR $work: it is inside the repository" >&2; exit 2 ;;
esac
mkdir -p "$work"/{hf,cache,inductor,tmp}

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_CPU_KVCACHE_SPACE=1
export HF_HOME="$work/hf" VLLM_CACHE_ROOT="$work/cache" TORCHINDUCTOR_CACHE_DIR="$work/inductor"
export TMPDIR="$work/tmp"
# Speculative decoding on CPU is much slower without Intel OpenMP preloaded.
export LD_PRELOAD="$venv/lib/libiomp5.so"
export PATH="$venv/bin:$PATH"

shm_before=$(mktemp "$work/shm-before.XXXXXX")
ls -1 /dev/shm > "$shm_before"
cleanup() {
  # Only what appeared during this run and matches what vLLM's processes leak.
  comm -13 <(sort "$shm_before") <(ls -1 /dev/shm | sort) \
    | grep -E '^(psm_|sem\.mp-|__KMP_REGISTERED_LIB_)' \
    | while read -r name; do rm -f "/dev/shm/$name"; done || true
  rm -rf "$TMPDIR"/vllm_dist_* "$shm_before"
  find "$TMPDIR" -maxdepth 1 -type s -delete   # ZeroMQ IPC sockets of the killed servers
}
trap cleanup EXIT

# Runs the plan in $work/plan (its run.sh, from $work), then copies the plan's files into the
# experiment folder $1 and, with COPY_TO set, the experiment to COPY_TO.
run_plan_into() {
  local experiment=$1 start
  shift
  start=$(date +%s)
  (cd "$work" && bash "$work/plan/run.sh" "$@")
  echo "sweep took $(( $(date +%s) - start )) s"
  cp "$work/plan/serve_params.json" "$work/plan/bench_params.json" "$work/plan/command.txt" \
    "$work/plan/sweep_plan.json" \
    "$experiment/" 2>/dev/null || true
  if [ -n "${COPY_TO:-}" ] && [ -d "$experiment" ]; then
    mkdir -p "$COPY_TO" && cp -r "$experiment/." "$COPY_TO/"
    echo "copied to $COPY_TO"
  fi
}

# Builds the tiny model into $1 (with $2 positions, default 2048) unless it is there.
tiny_model() {
  if [ ! -f "$1/model.safetensors" ]; then
    python "$repo/scripts/real_cpu_sweep/build_tiny_model.py" "$@"
  fi
}

# Writes the plan into $work/plan with the project's own CLI (its environment, not vLLM's): the
# tiny model $1 with n-gram speculation, served as `tiny` on $port, results in $work/results;
# the other arguments are the sweep's own flags (--ks, --anchors, --experiment-name, ...).
plan_tiny_ngram() {
  local model=$1
  shift
  (cd "$repo" && uv run tune-spec-k plan \
    --model "$model" --method ngram \
    --spec-option prompt_lookup_max=4 --spec-option prompt_lookup_min=2 \
    --port "$port" --bench-args "--served-model-name tiny" \
    --results-dir "$work/results" -o "$work/plan" "$@")
}
