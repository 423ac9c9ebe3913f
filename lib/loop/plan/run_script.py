"""``run.sh``: the bash script of a plan, which runs every step's sweep, and which each sweep
runs after every benchmark run (``run.sh --after-bench``) to reset the server's caches and save
its resolved config."""

from __future__ import annotations

import shlex

from lib.loop.plan.sweep_plan import AFTER_BENCH, BENCH_PARAMS, RUN_SCRIPT, SERVE_PARAMS, SweepPlan
from lib.server_info import SERVER_INFO_FILE_GLOB

__all__ = ["run_script"]

#: What ``vllm bench sweep serve`` POSTs after each run unless ``--after-bench-cmd`` is given
#: (vLLM 0.32.0 ``benchmarks/sweep/server.py``): the after-bench command must POST them too.
RESET_ENDPOINTS = ("/reset_prefix_cache", "/reset_mm_cache", "/reset_encoder_cache")

#: ``run.sh --after-bench URL EXPERIMENT_DIR``: what the sweep runs after each benchmark run
#: (``--after-bench-cmd``; the sweep runs it from its own folder, with its environment, and
#: tells it nothing about the combo). ``--after-bench-cmd`` replaces the sweep's cache reset,
#: so first the same three POSTs (``ServerProcess.VLLM_RESET_CACHE_ENDPOINTS`` of vLLM 0.32.0's
#: ``benchmarks/sweep/server.py``); one that fails fails the run, as there. Then
#: ``GET /server_info?config_format=json`` (the sweep starts every server with
#: ``VLLM_SERVER_DEV_MODE=1``) is saved as ``server_info.json`` into the combo folder of the
#: newest ``run=N.json`` / ``warmup.json`` below EXPERIMENT_DIR: the benchmark run just written
#: (the sweep rewrites that file only after this command). A save that fails only warns:
#: the run's measurement stands (as does one with no run to put it beside). Standard-library
#: Python, so no curl is needed.
_AFTER_BENCH_MODE = f"""if [ "${{1:-}}" = {AFTER_BENCH} ]; then
    usage="usage: $0 {AFTER_BENCH} URL EXPERIMENT_DIR"
    python3 - "${{2:?$usage}}" "${{3:?$usage}}" <<'PY'
import json, pathlib, sys, urllib.request

url, experiment = sys.argv[1], pathlib.Path(sys.argv[2])
say = "run.sh {AFTER_BENCH}:"
for endpoint in {RESET_ENDPOINTS!r}:
    try:
        request = urllib.request.Request(url + endpoint, method="POST")
        urllib.request.urlopen(request, timeout=120).close()
    except OSError as error:
        sys.exit(f"{{say}} POST {{url}}{{endpoint}} failed: {{error}}")
runs = [
    path
    for path in experiment.glob("*/*.json")
    if path.name.startswith("run=") or path.name == "warmup.json"
]
if not runs:
    print(f"{{say}} the server config is not saved: no run below {{experiment}}", file=sys.stderr)
    sys.exit(0)
folder = max(runs, key=lambda path: path.stat().st_mtime_ns).parent
try:
    with urllib.request.urlopen(url + "/server_info?config_format=json", timeout=120) as answer:
        info = json.load(answer)
except (OSError, ValueError) as error:
    print(f"{{say}} the server config is not saved: GET /server_info: {{error}}", file=sys.stderr)
    sys.exit(0)
part = folder / "{SERVER_INFO_FILE_GLOB}.part"
part.write_text(json.dumps(info, indent=2) + "\\n")
part.replace(folder / "{SERVER_INFO_FILE_GLOB}")
PY
    exit
fi""".splitlines()

#: The part of ``run.sh`` that decides how each sweep runs (``sweep``): with vLLM as it is;
#: without it, a dry run (a check of the plan before it reaches the GPU machine) prints each
#: command quoted as ``shlex.join`` quotes it, so it reads like ``command.txt``, and a real run
#: stops before the first sweep with a message instead of bash's "command not found".
_RUN_SCRIPT_PRELUDE = r"""dry_run=false
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
fi""".splitlines()


def run_script(plan: SweepPlan) -> str:
    """A bash script running every step; extra arguments (``--dry-run``,
    ``--continue-on-error``, ``--resume``) go to each sweep. Params are found beside the
    script; results go below the folder it is run from. Without ``vllm`` on PATH a dry run
    prints each sweep's command (what ``vllm bench sweep serve`` would be asked) and a real
    run stops at once with a message saying vLLM is needed.

    The sweep runs the script itself after each benchmark run (``run.sh --after-bench URL
    EXPERIMENT_DIR``, :data:`_AFTER_BENCH_MODE`): ``--after-bench-cmd`` replaces the sweep's
    own cache reset, so the script POSTs the same three resets (failing the run as the
    sweep's reset would), then saves the server's resolved config into the combo folder
    of the run just written."""
    lines = [
        "#!/usr/bin/env bash",
        f"# Written by `tune-spec-k plan` ({plan.kind} plan): {plan.summary_line()}",
        "# Run it from the folder the results folder is relative to; extra arguments",
        "# (--dry-run, --continue-on-error, --resume) are passed to every sweep.",
        "set -euo pipefail",
        'plan_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)',
        *_AFTER_BENCH_MODE,
        *_RUN_SCRIPT_PRELUDE,
    ]
    for step in plan.steps:
        # The params lie beside the script wherever it is run from; the after-bench
        # command names the script by its absolute path, quoted for vLLM's shlex.split.
        _, _, *rest = plan.after_bench_words(step, "PLAN_DIR")
        command = plan.sweep_command(step, "PLAN_DIR", "AFTER_BENCH_CMD")
        command = command.replace("PLAN_DIR/", '"${plan_dir}"/')
        command = command.replace("AFTER_BENCH_CMD", '"${after_bench}"')
        folder = plan.step_folder(step)
        params = '"${plan_dir}"/' + (f"{shlex.quote(folder)}/" if folder else "")
        results = shlex.quote(f"{step.results_dir}/{step.experiment_name}")
        lines += [
            "",
            f"# {step.name}: {step.purpose}",
            "after_bench=$(printf '%q ' bash \"${plan_dir}\"/"
            + RUN_SCRIPT
            + f" {shlex.join(rest)})",
            "after_bench=${after_bench% }",
            f'sweep {command} "$@"',
            "# Keep the params with the results; a dry run has none, and an earlier run's",
            "# folder keeps the params it was run with.",
            f"if ! $dry_run && [ -d {results} ]; then"
            f" cp {params}{SERVE_PARAMS} {params}{BENCH_PARAMS} {results}/; fi",
        ]
    return "\n".join(lines) + "\n"
