#!/usr/bin/env bash
# Written by `tune-spec-k plan` (tuning plan): 2 sweep(s), 3 server start(s), 24 benchmark runs
# Run it from the folder the results folder is relative to; extra arguments
# (--dry-run, --continue-on-error, --resume) are passed to every sweep.
set -euo pipefail
plan_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ "${1:-}" = --after-bench ]; then
    usage="usage: $0 --after-bench URL EXPERIMENT_DIR"
    python3 - "${2:?$usage}" "${3:?$usage}" <<'PY'
import json, pathlib, sys, urllib.request

url, experiment = sys.argv[1], pathlib.Path(sys.argv[2])
say = "run.sh --after-bench:"
for endpoint in ('/reset_prefix_cache', '/reset_mm_cache', '/reset_encoder_cache'):
    try:
        request = urllib.request.Request(url + endpoint, method="POST")
        urllib.request.urlopen(request, timeout=120).close()
    except OSError as error:
        sys.exit(f"{say} POST {url}{endpoint} failed: {error}")
runs = [
    path
    for path in experiment.glob("*/*.json")
    if path.name.startswith("run=") or path.name == "warmup.json"
]
if not runs:
    print(f"{say} the server config is not saved: no run below {experiment}", file=sys.stderr)
    sys.exit(0)
folder = max(runs, key=lambda path: path.stat().st_mtime_ns).parent
try:
    with urllib.request.urlopen(url + "/server_info?config_format=json", timeout=120) as answer:
        info = json.load(answer)
except (OSError, ValueError) as error:
    print(f"{say} the server config is not saved: GET /server_info: {error}", file=sys.stderr)
    sys.exit(0)
part = folder / "server_info.json.part"
part.write_text(json.dumps(info, indent=2) + "\n")
part.replace(folder / "server_info.json")
PY
    exit
fi
dry_run=false
for arg in "$@"; do
    case $arg in --dry-run) dry_run=true ;; esac
done
if command -v vllm >/dev/null 2>&1; then
    sweep() { "$@"; }
elif $dry_run; then
    echo "run.sh: vLLM is not installed here (no \`vllm\` on PATH): each sweep's command" \
        "follows; with vLLM, \`vllm bench sweep serve --dry-run\` prints every server and" \
        "benchmark command." >&2
    sweep() {
        local word quoted=()
        local tick="'" escaped="'\"'\"'"
        for word in "$@"; do
            if [[ -n $word && $word != *[!A-Za-z0-9_@%+=:,./-]* ]]; then
                quoted+=("$word")
            else
                quoted+=("'${word//"$tick"/"$escaped"}'")
            fi
        done
        printf '%s\n' "${quoted[*]}"
    }
else
    echo "run.sh: vLLM is needed to run the sweep, and there is no \`vllm\` on PATH:" \
        "install vLLM (0.25 or newer) or activate the environment that has it, then run" \
        "this again. \`bash $0 --dry-run\` prints the commands without vLLM." >&2
    exit 1
fi

# probe: K=[0, 5] at every anchor once, and 3 times at batch sizes [1, 2, 8] (the noise probe)
after_bench=$(printf '%q ' bash "${plan_dir}"/run.sh --after-bench http://127.0.0.1:8771 /work/realwork/results/real-cpu-bracket/round-0)
after_bench=${after_bench% }
sweep vllm bench sweep serve --serve-cmd 'vllm serve /work/realwork/tiny-llama --host 127.0.0.1 --port 8771 --max-num-seqs 8 --max-model-len 1024 --served-model-name tiny --seed 0' --bench-cmd 'vllm bench serve --model /work/realwork/tiny-llama --host 127.0.0.1 --port 8771 --dataset-name random --random-input-len 64 --random-output-len 128 --ignore-eos --temperature 0 --served-model-name tiny' --serve-params "${plan_dir}"/probe/serve_params.json --bench-params "${plan_dir}"/probe/bench_params.json --num-runs 1 --after-bench-cmd "${after_bench}" -o /work/realwork/results/real-cpu-bracket -e round-0 "$@"
# Keep the params with the results; a dry run has none, and an earlier run's
# folder keeps the params it was run with.
if ! $dry_run && [ -d /work/realwork/results/real-cpu-bracket/round-0 ]; then cp "${plan_dir}"/probe/serve_params.json "${plan_dir}"/probe/bench_params.json /work/realwork/results/real-cpu-bracket/round-0/; fi

# grid: K=[2] at every anchor once
after_bench=$(printf '%q ' bash "${plan_dir}"/run.sh --after-bench http://127.0.0.1:8771 /work/realwork/results/real-cpu-bracket/round-0/grid)
after_bench=${after_bench% }
sweep vllm bench sweep serve --serve-cmd 'vllm serve /work/realwork/tiny-llama --host 127.0.0.1 --port 8771 --max-num-seqs 8 --max-model-len 1024 --served-model-name tiny --seed 0' --bench-cmd 'vllm bench serve --model /work/realwork/tiny-llama --host 127.0.0.1 --port 8771 --dataset-name random --random-input-len 64 --random-output-len 128 --ignore-eos --temperature 0 --served-model-name tiny' --serve-params "${plan_dir}"/grid/serve_params.json --bench-params "${plan_dir}"/grid/bench_params.json --num-runs 1 --after-bench-cmd "${after_bench}" -o /work/realwork/results/real-cpu-bracket/round-0 -e grid "$@"
# Keep the params with the results; a dry run has none, and an earlier run's
# folder keeps the params it was run with.
if ! $dry_run && [ -d /work/realwork/results/real-cpu-bracket/round-0/grid ]; then cp "${plan_dir}"/grid/serve_params.json "${plan_dir}"/grid/bench_params.json /work/realwork/results/real-cpu-bracket/round-0/grid/; fi
