"""lib/cli/plan.py: `tune-spec-k plan` writes params files that parse the way `vllm bench sweep
serve` parses them, commands that are what the sweep runs, and refuses bad designs naming the
flag."""

from __future__ import annotations

import collections
import contextlib
import http.server
import json
import shlex
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from paths import SAMPLE_SWEEPS
from vllm_sweep import (
    LLAMA_FLAGS,
    noisy_first_sweep,
    parse_sweep_command,
    vllm_apply_to_cmd,
    vllm_read_params,
)

from lib.cli.main import main
from lib.confidence import assess
from lib.deploy.result_file import result_text
from lib.measurement_plan import measurement_plan
from lib.policy import apply_policy
from lib.schedule import TuningResult, tune
from lib.server_info import SERVER_INFO_FILE_GLOB, read_server_settings
from lib.settings import Settings
from lib.sweeps import load_experiment


def tuned(root: Path) -> TuningResult:
    result = tune(load_experiment(root), Settings(max_objective_relative_mad=1.0))
    return apply_policy(result, assess(result), "seed")


def plan_files(tmp_path: Path, *flags: str) -> Path:
    plan_dir = tmp_path / "plan"
    assert main(["plan", "-o", str(plan_dir), *flags]) == 0
    return plan_dir


def test_params_parse_as_vllm_parses_them(tmp_path: Path) -> None:
    plan_dir = plan_files(tmp_path, *LLAMA_FLAGS)
    serve = vllm_read_params(plan_dir / "serve_params.json")
    bench = vllm_read_params(plan_dir / "bench_params.json")
    assert [item["_benchmark_name"] for item in serve] == ["k0", "k1", "k3", "k7"]
    # A combo per (anchor, repeat), the repeat's seed in it (--num-runs 3 by default).
    assert [item["_benchmark_name"] for item in bench] == [
        f"c{anchor}-seed{seed}" for anchor in (1, 64, 128, 256) for seed in range(3)
    ]
    assert [item["seed"] for item in bench] == 4 * [0, 1, 2]
    for item, k in zip(serve, (0, 1, 3, 7), strict=True):
        # Nested, not dotted: the sweep passes it as one JSON argument and records it nested.
        assert item["speculative_config"] == {
            "method": "eagle3",
            "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
            "num_speculative_tokens": 7,
            "num_speculative_tokens_per_batch_size": [[1, 256, k]],
        }
    # Prompts: max(32, 8 x concurrency).
    assert [(b["max_concurrency"], b["num_prompts"]) for b in bench[::3]] == [
        (1, 32),
        (64, 512),
        (128, 1024),
        (256, 2048),
    ]


def test_commands_are_what_the_sweep_runs(tmp_path: Path) -> None:
    plan_dir = plan_files(tmp_path, *LLAMA_FLAGS)
    flags = parse_sweep_command((plan_dir / "command.txt").read_text().strip())
    # Each seeded bench combo runs once: the default 3 runs per cell are 3 combos.
    assert flags["--num-runs"] == "1"
    assert flags["--serve-params"] == f"{plan_dir}/serve_params.json"
    serve = vllm_read_params(Path(flags["--serve-params"]))
    server = vllm_apply_to_cmd(serve[2], shlex.split(flags["--serve-cmd"]))
    assert server[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    assert server[server.index("--max-num-seqs") + 1] == "256"
    config = json.loads(server[server.index("--speculative-config") + 1])
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 256, 3]]
    bench = vllm_read_params(Path(flags["--bench-params"]))
    client = vllm_apply_to_cmd(bench[5], shlex.split(flags["--bench-cmd"]))
    assert bench[5]["_benchmark_name"] == "c64-seed2"
    for flag, value in (
        ("--seed", "2"),
        ("--max-concurrency", "64"),
        ("--num-prompts", "512"),
        ("--random-input-len", "128"),
        ("--random-output-len", "128"),
        ("--dataset-name", "random"),
        ("--goodput", "tpot:50"),
    ):
        assert client[client.index(flag) + 1] == value
    assert "--ignore-eos" in client


def test_run_script_runs_the_command_and_keeps_the_params(tmp_path: Path) -> None:
    """run.sh with a stand-in `vllm` on PATH that records its arguments and makes the
    experiment folder, as the sweep would: started from another folder, extra arguments passed."""
    plan_dir = plan_files(tmp_path, *LLAMA_FLAGS)
    script = plan_dir / "run.sh"
    assert script.stat().st_mode & 0o111
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "vllm"
    fake.write_text(
        "#!/usr/bin/env python3\n"
        "import json, pathlib, sys\n"
        "args = sys.argv[1:]\n"
        "pathlib.Path('args.json').write_text(json.dumps(args))\n"
        "if '--dry-run' not in args:\n"
        "    out = pathlib.Path(args[args.index('-o') + 1]) / args[args.index('-e') + 1]\n"
        "    out.mkdir(parents=True)\n"
    )
    fake.chmod(0o755)
    workdir = tmp_path / "work"
    workdir.mkdir()
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    subprocess.run(["bash", str(script), "--continue-on-error"], cwd=workdir, env=env, check=True)
    args = json.loads((workdir / "args.json").read_text())
    expected = parse_sweep_command((plan_dir / "command.txt").read_text().strip())
    assert args[:3] == ["bench", "sweep", "serve"]
    assert args[-1] == "--continue-on-error"
    recorded = dict(zip(args[3:-1:2], args[4:-1:2], strict=True))
    assert recorded["--serve-params"] == str(plan_dir.resolve() / "serve_params.json")
    for flag in ("--serve-cmd", "--bench-cmd", "--num-runs", "-o", "-e"):
        assert recorded[flag] == expected[flag]
    experiment = workdir / "results" / "tuning"
    for name in ("serve_params.json", "bench_params.json"):
        assert (experiment / name).read_text() == (plan_dir / name).read_text()
    # A dry run makes no experiment folder, and nothing is copied.
    dry = tmp_path / "dry"
    dry.mkdir()
    subprocess.run(["bash", str(script), "--dry-run"], cwd=dry, env=env, check=True)
    assert not (dry / "results").exists()
    assert json.loads((dry / "args.json").read_text())[-1] == "--dry-run"
    # Nor over the params an earlier run left with its results.
    (experiment / "serve_params.json").write_text("{}\n")
    subprocess.run(["bash", str(script), "--dry-run"], cwd=workdir, env=env, check=True)
    assert (experiment / "serve_params.json").read_text() == "{}\n"


class _Server(http.server.ThreadingHTTPServer):
    """A stand-in vLLM server on 127.0.0.1: records every request, answers the resets with
    200 (or ``reset_status``) and /server_info with ``info`` (404 when None)."""

    def __init__(self, info: dict[str, Any] | None, reset_status: int = 200) -> None:
        self.requests: list[tuple[str, str]] = []
        self.info = info
        self.reset_status = reset_status
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def answer(self, status: int, body: bytes = b"") -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.server.requests.append(("POST", self.path))
        self.answer(self.server.reset_status)

    def do_GET(self) -> None:
        self.server.requests.append(("GET", self.path))
        info = self.server.info
        if self.path == "/server_info?config_format=json" and info is not None:
            self.answer(200, json.dumps(info).encode())
        else:
            self.answer(404)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def stand_in_server(info: dict[str, Any] | None, reset_status: int = 200) -> Iterator[_Server]:
    server = _Server(info, reset_status)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


#: A stand-in `vllm` that does what `vllm bench sweep serve` does around each run, in its
#: order: the benchmark writes run=N.json into the combo folder, then the after-bench command
#: runs (split as vLLM splits it, from the sweep's folder, failing the run when it fails).
_SWEEP_STAND_IN = """#!/usr/bin/env python3
import json, pathlib, shlex, subprocess, sys
args = sys.argv[1:]
pathlib.Path("args.json").write_text(json.dumps(args))
out = pathlib.Path(args[args.index("-o") + 1]) / args[args.index("-e") + 1]
after_bench = shlex.split(args[args.index("--after-bench-cmd") + 1])
codes = []
for combo in ("SERVE--k0-BENCH--c1", "SERVE--k3-BENCH--c1"):
    (out / combo).mkdir(parents=True)
    (out / combo / "run=0.json").write_text("{}")
    codes.append(subprocess.run(after_bench).returncode)
pathlib.Path("codes.json").write_text(json.dumps(codes))
"""


def run_with_stand_in_sweep(tmp_path: Path, port: int) -> tuple[Path, list[int]]:
    """run.sh of a plan for ``port``, with the stand-in `vllm` first on PATH; the experiment
    folder and the after-bench commands' exit codes."""
    plan_dir = plan_files(tmp_path, *LLAMA_FLAGS, "--port", str(port))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_text(_SWEEP_STAND_IN)
    (bin_dir / "vllm").chmod(0o755)
    workdir = tmp_path / "work"
    workdir.mkdir()
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    subprocess.run(["bash", str(plan_dir / "run.sh")], cwd=workdir, env=env, check=True)
    codes = json.loads((workdir / "codes.json").read_text())
    return workdir / "results" / "tuning", codes


RESETS = [
    ("POST", "/reset_prefix_cache"),
    ("POST", "/reset_mm_cache"),
    ("POST", "/reset_encoder_cache"),
]


def test_after_each_run_the_caches_are_reset_and_the_server_config_saved(tmp_path: Path) -> None:
    """--after-bench-cmd replaces the sweep's own cache reset: run.sh's after-bench command
    POSTs the same three resets, then saves GET /server_info?config_format=json beside the run
    just written, in its combo folder, where the tuner's reader finds it."""
    info = {
        "vllm_config": {
            "compilation_config": {"max_cudagraph_capture_size": 16},
            "scheduler_config": {"max_num_seqs": 256},
            "speculative_config": {"method": "eagle3", "num_speculative_tokens": 7},
        },
        "vllm_env": {},
    }
    with stand_in_server(info) as server:
        experiment, codes = run_with_stand_in_sweep(tmp_path, server.server_address[1])
    assert codes == [0, 0]
    assert server.requests == 2 * [*RESETS, ("GET", "/server_info?config_format=json")]
    for combo in ("SERVE--k0-BENCH--c1", "SERVE--k3-BENCH--c1"):
        saved = experiment / combo / SERVER_INFO_FILE_GLOB
        assert json.loads(saved.read_text()) == info
    settings, problems = read_server_settings(experiment)
    assert problems == []
    assert [(s.source, s.max_cudagraph_capture_size) for s in settings] == [
        ("SERVE--k0-BENCH--c1/server_info.json", 16),
        ("SERVE--k3-BENCH--c1/server_info.json", 16),
    ]
    # The command is the one command.txt shows.
    command = parse_sweep_command((tmp_path / "plan" / "command.txt").read_text().strip())
    recorded = json.loads((tmp_path / "work" / "args.json").read_text())
    assert recorded[recorded.index("--after-bench-cmd") + 1] == command["--after-bench-cmd"]


def test_a_failed_reset_fails_the_run_and_a_failed_save_only_warns(tmp_path: Path) -> None:
    """A reset that fails makes the after-bench command fail (the sweep's own reset raises
    too); a server without /server_info (an older vLLM) leaves the runs standing, unsaved."""
    with stand_in_server(None, reset_status=500) as server:
        experiment, codes = run_with_stand_in_sweep(tmp_path / "a", server.server_address[1])
    assert codes == [1, 1]
    assert server.requests == 2 * RESETS[:1]
    with stand_in_server(None) as server:
        experiment, codes = run_with_stand_in_sweep(tmp_path / "b", server.server_address[1])
    assert codes == [0, 0]
    assert server.requests[-1] == ("GET", "/server_info?config_format=json")
    assert read_server_settings(experiment) == ([], [])


def test_the_engine_settings_reach_the_server_command(tmp_path: Path) -> None:
    """As the sweep applies a serve combo: --max-num-seqs replaced (not doubled), the capture
    ceiling appended as vLLM's own flag."""
    plan_dir = plan_files(
        tmp_path, *LLAMA_FLAGS, "--max-num-seqs", "512", "--max-cudagraph-capture-size", "1024"
    )
    flags = parse_sweep_command((plan_dir / "command.txt").read_text().strip())
    serve = vllm_read_params(Path(flags["--serve-params"]))
    server = vllm_apply_to_cmd(serve[0], shlex.split(flags["--serve-cmd"]))
    assert server.count("--max-num-seqs") == 1
    assert server[server.index("--max-num-seqs") + 1] == "512"
    assert server[server.index("--max-cudagraph-capture-size") + 1] == "1024"


def path_without_vllm(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH has the few programs run.sh uses, and no `vllm` whatever this
    machine has installed."""
    bin_dir = tmp_path / "no-vllm-bin"
    bin_dir.mkdir()
    for name in ("dirname", "cp"):
        found = shutil.which(name)
        assert found is not None, name
        (bin_dir / name).symlink_to(found)
    return {"PATH": str(bin_dir)}


def test_run_script_dry_run_prints_the_commands_without_vllm(tmp_path: Path) -> None:
    """docs/loop.md: `bash plan/run.sh --dry-run` prints the commands and runs nothing, also on
    a machine without vLLM (where the plan is checked before it goes to the GPU machine)."""
    plan_dir = plan_files(tmp_path, *LLAMA_FLAGS, "--serve-args", "--served-model-name 'it s'")
    workdir = tmp_path / "work"
    workdir.mkdir()
    env = path_without_vllm(tmp_path)
    bash = shutil.which("bash")
    assert bash is not None
    done = subprocess.run(
        [bash, str(plan_dir / "run.sh"), "--dry-run", "--resume"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    command = (plan_dir / "command.txt").read_text().strip()
    # The exact command vLLM would be given, quoted as command.txt quotes it.
    assert done.stdout.splitlines() == [f"{command} --dry-run --resume"]
    assert parse_sweep_command(done.stdout)["--serve-cmd"].endswith("'it s'")
    assert "vLLM is not installed here" in done.stderr
    assert list(workdir.iterdir()) == []


def test_run_script_without_vllm_says_vllm_is_needed(tmp_path: Path) -> None:
    plan_dir = plan_files(tmp_path, *LLAMA_FLAGS)
    workdir = tmp_path / "work"
    workdir.mkdir()
    bash = shutil.which("bash")
    assert bash is not None
    done = subprocess.run(
        [bash, str(plan_dir / "run.sh"), "--continue-on-error"],
        cwd=workdir,
        env=path_without_vllm(tmp_path),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert "run.sh: vLLM is needed to run the sweep" in done.stderr
    assert "--dry-run` prints the commands without vLLM" in done.stderr
    assert "command not found" not in done.stderr
    assert list(workdir.iterdir()) == []


def test_default_anchors_are_powers_of_two_up_to_the_maximum(tmp_path: Path) -> None:
    plan_dir = plan_files(
        tmp_path, "--model", "m", "--method", "ngram", "--ks", "0,2", "--max-batch-size", "48"
    )
    bench = json.loads((plan_dir / "bench_params.json").read_text())
    anchors = [v["max_concurrency"] for v in bench.values()]
    assert list(dict.fromkeys(anchors)) == [1, 2, 4, 8, 16, 32, 48]


def test_design_file_round_trips(tmp_path: Path) -> None:
    first = plan_files(tmp_path, *LLAMA_FLAGS)
    again = tmp_path / "again"
    assert main(["plan", "--design", str(first / "sweep_plan.json"), "-o", str(again)]) == 0
    for name in ("serve_params.json", "bench_params.json"):
        assert (again / name).read_text() == (first / name).read_text()


def test_design_lean_or_full_beside_a_design_file(tmp_path: Path) -> None:
    """``--design`` takes a layout, a sweep_plan.json or one of each; ``full`` is the default
    (the same files as no flag), and a lean plan's design file plans it lean again."""
    first = plan_files(tmp_path, *LLAMA_FLAGS)
    full = tmp_path / "full"
    assert main(["plan", "--design", "full", *LLAMA_FLAGS, "-o", str(full)]) == 0
    for name in ("serve_params.json", "bench_params.json", "sweep_plan.json"):
        assert (full / name).read_text() == (first / name).read_text()
    lean = tmp_path / "lean"
    design = str(first / "sweep_plan.json")
    assert main(["plan", "--design", design, "--design", "lean", "-o", str(lean)]) == 0
    assert json.loads((lean / "sweep_plan.json").read_text())["design"]["layout"] == "lean"
    assert sorted(p.name for p in lean.iterdir() if p.is_dir()) == ["grid", "probe"]
    again = tmp_path / "again"
    assert main(["plan", "--design", str(lean / "sweep_plan.json"), "-o", str(again)]) == 0
    for name in ("probe/bench_params.json", "grid/serve_params.json"):
        assert (again / name).read_text() == (lean / name).read_text()


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["lean", "full"], "--design: one layout (full, lean) at most, got a second: 'full'"),
        (["a.json", "b.json"], "--design: one design file at most, got a second: 'b.json'"),
    ],
)
def test_design_given_twice_alike_exits_2(
    capsys: pytest.CaptureFixture[str], values: list[str], message: str
) -> None:
    flags = [word for value in values for word in ("--design", value)]
    with pytest.raises(SystemExit) as stop:
        main(["plan", *flags])
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--ks", "1,3"], "expected K=0 among them"),
        (["--ks", "0"], "at least one K >= 1"),
        (["--ks", "0,1,1"], "repeated K"),
        (["--anchors", "2,8"], "expected the first anchor to be 1"),
        (["--anchors", "1,8", "--max-batch-size", "16"], "expected the largest anchor, 8"),
        (["--global-k", "2"], "expected >= the largest K, 3"),
        (["--goodput", "tpot50"], "expected METRIC:MILLISECONDS"),
        (["--dataset", "sharegpt"], "expected --dataset-path"),
        (
            ["--dataset", "sharegpt", "--dataset-path", "s.json", "--input-len", "9"],
            "has its own prompts",
        ),
        (["--num-runs", "0"], "field '--num-runs'; value 0; expected >= 1"),
        (
            ["--server-replicas", "0"],
            "field '--server-replicas'; value 0; expected a whole number >= 1",
        ),
        (["--first-replica", "-1"], "field '--first-replica'; value -1; expected a whole number"),
        (
            ["--server-replicas", "2", "--serve-args", "--seed 1"],
            "field '--serve-args'; value '--seed 1'; expected no --seed in it",
        ),
        (["--spec-option", "num_speculative_tokens=3"], "the plan sets them itself"),
        (
            ["--design", "lean", "--num-runs", "1"],
            "field '--num-runs'; value 1; expected >= 2 with --design lean",
        ),
        (
            ["--design", "lean", "--context-lengths", "512,4096"],
            "field '--design'; value lean; expected full with --context-lengths",
        ),
        (["--static-ks", "1"], "only with --validate"),
        (
            ["--validate-export", "rfc.json"],
            "only with --validate (field '--validate-export'; value rfc.json)",
        ),
    ],
)
def test_bad_designs_exit_2_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    base = ["--model", "m", "--method", "ngram", "--ks", "0,1,3", "--anchors", "1,8"]
    assert main(["plan", "-o", str(tmp_path / "p"), *base, *flags]) == 2
    error = capsys.readouterr().err
    assert message in error
    assert not (tmp_path / "p").exists()


def test_missing_model_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-o", str(tmp_path / "p"), "--method", "ngram", "--anchors", "1"]) == 2
    assert "[incomplete-design] every plan needs it (field '--model'" in capsys.readouterr().err


def test_unparsable_flag_value_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["plan", "--ks", "zero,one"])
    assert stop.value.code == 2
    assert "expected comma-separated whole numbers" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["1.5", "two", ""])
def test_a_server_replica_count_that_is_no_whole_number_exits_2(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["plan", "--model", "m", "--method", "ngram", "--server-replicas", value])
    assert stop.value.code == 2
    assert f"argument --server-replicas: {value!r}: expected a whole number" in (
        capsys.readouterr().err
    )


def _replica_values(plan_dir: Path) -> set[int]:
    """The serve seeds of every serve combo of a plan, read back from their names too."""
    from lib.servers import replica_of

    values = set()
    for step in json.loads((plan_dir / "sweep_plan.json").read_text())["steps"]:
        for item in vllm_read_params(plan_dir / step["folder"] / "serve_params.json"):
            assert replica_of(item["_benchmark_name"]) == str(item["seed"])
            values.add(item["seed"])
    return values


@pytest.mark.parametrize(
    ("flags", "values"),
    [
        # The first sweep's R = 3 used 0-2: the follow-up's 3 servers per K are 3-5.
        ((), {3, 4, 5}),
        # Fewer replicas still start after the first sweep's last value, not at 0 + R.
        (("--server-replicas", "2"), {3, 4}),
        (("--first-replica", "10"), {10, 11, 12}),
    ],
)
def test_a_follow_up_of_a_replicated_plan_starts_new_servers(
    tmp_path: Path, flags: tuple[str, ...], values: set[int]
) -> None:
    design = [*LLAMA_FLAGS[:6], "--ks", "0,3", "--anchors", "1,16", "--server-replicas", "3"]
    first = plan_files(tmp_path, *design)
    assert _replica_values(first) == {0, 1, 2}
    tuning = noisy_first_sweep(tmp_path / "results" / "tuning")
    result_json = tuning / "speculative_k_schedule.json"
    result_json.write_text(result_text(tuned(tuning)))
    out = tmp_path / "follow"
    stored = ["--design", str(first / "sweep_plan.json")]
    follow = ["--follow-up", str(result_json)]
    assert main(["plan", "-o", str(out), *stored, *follow, *flags]) == 0
    assert _replica_values(out) == values
    recorded = json.loads((out / "sweep_plan.json").read_text())["design"]
    assert (recorded["first_replica"], recorded["server_replicas"]) == (min(values), len(values))


def test_follow_up_covers_only_the_unresolved_cells_and_the_new_anchor(tmp_path: Path) -> None:
    first = noisy_first_sweep(tmp_path / "results" / "tuning")
    result = tuned(first)
    plan = measurement_plan(result, assess(tune(load_experiment(first), result.settings)))
    plan_json = tmp_path / "measurement_plan.json"
    plan_json.write_text(plan.to_json_text())
    result_json = first / "speculative_k_schedule.json"
    result_json.write_text(result_text(result))
    expected = {
        (row["batch_size"], row["k"]): row["more_runs"]
        for row in plan.reruns.to_dicts()
        if row["more_runs"] > 0
    }
    for row in plan.new_anchors.to_dicts():
        for k in row["ks"]:
            expected[(row["batch_size"], k)] = row["runs_per_k"]
    assert expected, "the fixture must leave something to measure"
    assert 4 in {anchor for anchor, _ in expected}, "the midpoint anchor is planned"
    assert 1 not in {anchor for anchor, _ in expected}, "the resolved anchor is not rerun"

    out = tmp_path / "follow"
    assert (
        main(
            [
                "plan",
                "-o",
                str(out),
                "--follow-up",
                str(plan_json),
                str(result_json),
                *LLAMA_FLAGS[:6],
                "--ks",
                "0,3",
                "--anchors",
                "1,16",
            ]
        )
        == 0
    )
    design = json.loads((out / "sweep_plan.json").read_text())
    planned: dict[tuple[int, int], int] = {}
    seeds: dict[tuple[int, int], list[int]] = collections.defaultdict(list)
    for step in design["steps"]:
        folder = out / step["folder"]
        serve = vllm_read_params(folder / "serve_params.json")
        bench = vllm_read_params(folder / "bench_params.json")
        for serve_item in serve:
            config = serve_item["speculative_config"]
            assert config["num_speculative_tokens"] == 3, "the first sweep's engine"
            k = config["num_speculative_tokens_per_batch_size"][0][2]
            for bench_item in bench:
                planned[(bench_item["max_concurrency"], k)] = step["num_runs"]
                seeds[(bench_item["max_concurrency"], k)].append(bench_item["seed"])
        # Results land inside the first experiment, so the loader pools both sweeps.
        assert step["results"].startswith(str(first))
    assert set(planned) == set(expected)
    assert all(planned[cell] >= runs for cell, runs in expected.items())
    # Each cell's seeds continue from its runs so far (a new anchor's from 0), one per run.
    so_far = {(row["batch_size"], row["k"]): row["runs"] for row in plan.reruns.to_dicts()}
    assert so_far and set(so_far.values()) == {3}
    for cell, runs in planned.items():
        start = so_far.get(cell, 0)
        assert seeds[cell] == list(range(start, start + runs)), cell


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"something": 1}, "neither a measurement plan"),
        (
            {"reruns": [{"batch_size": 1, "k": "3", "more_runs": 2}], "new_anchors": []},
            "field 'reruns[0].k'; value \"3\"",
        ),
        (
            # Without its runs so far a rerun has no first seed.
            {"reruns": [{"batch_size": 1, "k": 3, "more_runs": 2}], "new_anchors": []},
            "field 'reruns[0].runs'; value null; expected a whole number",
        ),
        (
            {"reruns": [], "new_anchors": [{"batch_size": 0, "ks": [0], "runs_per_k": 3}]},
            "field 'new_anchors[0].batch_size'; value 0",
        ),
        ({"batch_decisions": [{"batch_size": 1, "candidates": []}]}, "no per-anchor 'confidence'"),
        ({"batch_decisions": {"1": 2}}, "field 'batch_decisions'"),
    ],
)
def test_follow_up_bad_input_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: object, message: str
) -> None:
    path = tmp_path / "in.json"
    path.write_text(json.dumps(content))
    flags = ["--model", "m", "--method", "ngram", "--ks", "0,3", "--anchors", "1,16"]
    assert main(["plan", "-o", str(tmp_path / "p"), "--follow-up", str(path), *flags]) == 2
    error = capsys.readouterr().err
    assert message in error
    assert str(path) in error


def test_validation_plan_serves_the_schedule_next_to_static_and_plain_servers(
    tmp_path: Path,
) -> None:
    result = tmp_path / "speculative_k_schedule.json"
    sample = SAMPLE_SWEEPS / "sonnet-like"
    assert main([str(sample), "--output-json", str(result)]) == 0
    out = tmp_path / "validate"
    assert main(["plan", "-o", str(out), "--validate", str(result), *LLAMA_FLAGS]) == 0
    serve = {item["_benchmark_name"]: item for item in vllm_read_params(out / "serve_params.json")}
    assert list(serve) == ["dynamic", "static-k1", "static-k3", "static-k7", "no-spec"]
    dynamic = serve["dynamic"]["speculative_config"]
    assert dynamic["num_speculative_tokens_per_batch_size"] == [[1, 63, 7], [64, 256, 0]]
    assert dynamic["num_speculative_tokens"] == 7
    assert serve["static-k3"]["speculative_config"] == {
        "method": "eagle3",
        "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        "num_speculative_tokens": 3,
    }
    # A plain server: the combo sets nothing, so the serve command has no --speculative-config.
    assert vllm_apply_to_cmd(serve["no-spec"], ["vllm", "serve", "m"]) == ["vllm", "serve", "m"]
    bench = vllm_read_params(out / "bench_params.json")
    assert [b["max_concurrency"] for b in bench[::3]] == [1, 64, 128, 256]


def test_follow_up_of_the_real_cpu_sample_reuses_its_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real sample, tuned with the confident rule: every anchor is unresolved, and the
    follow-up plan runs exactly the first sweep's server configs at the cells the measurement
    plan lists (data/sample_sweeps/real-cpu-tiny-ngram/README.md)."""
    sample = SAMPLE_SWEEPS / "real-cpu-tiny-ngram"
    if not (sample / "sweep_plan.json").is_file():
        pytest.skip(f"{sample} has not been committed yet")
    result, plan_json = tmp_path / "result.json", tmp_path / "plan.json"
    flags = ["--policy", "confident", "--output-json", str(result), "--plan-json", str(plan_json)]
    assert main([str(sample), *flags]) == 0
    capsys.readouterr()
    out = tmp_path / "followup"
    # The result is outside the (read-only) sample: the follow-up's results go to a copy.
    design = ["--design", str(sample / "sweep_plan.json"), "--results-dir", str(tmp_path / "copy")]
    assert main(["plan", "-o", str(out), *design, "--follow-up", str(plan_json), str(result)]) == 0
    first_serve = json.loads((sample / "serve_params.json").read_text())
    planned: set[tuple[int, int]] = set()
    for step in json.loads((out / "sweep_plan.json").read_text())["steps"]:
        serve = json.loads((out / step["folder"] / "serve_params.json").read_text())
        bench = json.loads((out / step["folder"] / "bench_params.json").read_text())
        for name, combo in serve.items():
            assert combo == first_serve[name]
            k = combo["speculative_config"]["num_speculative_tokens_per_batch_size"][0][2]
            planned |= {(b["max_concurrency"], k) for b in bench.values()}
    wanted = json.loads(plan_json.read_text())
    asked = {(r["batch_size"], r["k"]) for r in wanted["reruns"] if r["more_runs"]}
    asked |= {(a["batch_size"], k) for a in wanted["new_anchors"] for k in a["ks"]}
    assert planned == asked
    assert {a["batch_size"] for a in wanted["new_anchors"]} <= {b for b, _ in planned}


def test_validate_export_plans_a_context_schedule_at_every_prompt_length(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/context.md, "check": tune the long-context sample, export its grid for PR #48944,
    plan the validation of that export; the dynamic server serves the export's config and
    every server runs each anchor at the grid's four prompt lengths."""
    result = tmp_path / "result.json"
    sample = str(SAMPLE_SWEEPS / "long-context")
    assert main([sample, "--server-cv", "0", "--output-json", str(result)]) == 0
    exported = tmp_path / "rfc.json"
    flags = ["--format", "vllm-rfc-48944", "-o", str(exported)]
    assert main(["export", str(result), *flags]) == 0
    capsys.readouterr()
    design = ["--model", "m", "--method", "mtp", "--ks", "0,1,3,5", "--global-k", "5"]
    design += ["--anchors", "1,8,64,256", "--dataset", "random"]
    out = tmp_path / "validate"
    arguments = ["--validate", str(result), "--validate-export", str(exported), "-o", str(out)]
    assert main(["plan", *arguments, *design]) == 0
    printed = capsys.readouterr().out
    assert f"the vllm-rfc-48944 schedule of {exported} against static K=[1, 3, 5]" in printed
    assert f"check with: tune-spec-k check results/validation --schedule {exported}" in printed
    serve = json.loads((out / "serve_params.json").read_text())
    config = json.loads(exported.read_text())["speculative_config"]
    assert {key: serve["dynamic"]["speculative_config"][key] for key in config} == config
    bench = json.loads((out / "bench_params.json").read_text())
    assert {combo["random_input_len"] for combo in bench.values()} == {512, 2048, 8192, 32768}
    # The longest prompt, 32768, plus the 128 output tokens of the default design.
    assert "--max-model-len 32896" in (out / "command.txt").read_text()


def test_where_server_offsets_dominate_the_follow_up_starts_new_servers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real replicated sample (servers 44 % apart, runs 29-39 %): every contender needs
    more server starts than one. The follow-up gives each cell's more runs to that many new
    servers (replica seeds after the first sweep's 0-2), each running its share, so the cell
    gets exactly the runs the result asks for, not that many per server."""
    sample = SAMPLE_SWEEPS / "real-cpu-replicas"
    result_json = tmp_path / "result.json"
    loose = ["--max-objective-relative-mad", "0.6"]
    assert main([str(sample), "--output-json", str(result_json), *loose]) == 0
    capsys.readouterr()
    data = json.loads(result_json.read_text())
    wanted = {}
    for decision in data["batch_decisions"]:
        block = decision["confidence"]
        for k in block["contenders"]:
            needed = block["servers_needed"][str(k)]
            assert needed > block["num_servers"][str(k)] + 1  # offsets dominate
            more = block["runs_needed"][str(k)] - 9
            wanted[decision["batch_size"], k] = (needed - 3, more)
    out = tmp_path / "follow"
    # The result is outside the (read-only) sample: the follow-up's results go to a copy.
    stored = ["--design", str(sample / "sweep_plan.json"), "--results-dir", str(tmp_path / "copy")]
    assert main(["plan", "-o", str(out), *stored, "--follow-up", str(result_json)]) == 0
    capsys.readouterr()
    planned: dict[tuple[int, int], tuple[set[str], int]] = {}
    for step in json.loads((out / "sweep_plan.json").read_text())["steps"]:
        serve = vllm_read_params(out / step["folder"] / "serve_params.json")
        bench = vllm_read_params(out / step["folder"] / "bench_params.json")
        for server in serve:
            k = server["speculative_config"]["num_speculative_tokens_per_batch_size"][0][2]
            for combo in bench:
                cell = (combo["max_concurrency"], k)
                names, runs = planned.get(cell, (set(), 0))
                planned[cell] = (names | {server["_benchmark_name"]}, runs + 1)
    for cell, (starts, more) in wanted.items():
        names, runs = planned[cell]
        assert len(names) == starts and runs == more, (cell, names, runs)
        assert all(int(name.rsplit("=", 1)[1]) >= 3 for name in names)


def test_the_readme_s_capture_boundaries_are_planned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """README, "Deployment": sonnet-like under a hypothetical C=256 asks to "measure next:
    batch size 33, K=[6, 7]" (and 37, 43, 52 with K=5, 4, 3); the capped K 4-6 were never
    measured, and `plan --follow-up` plans them (it refused them as follow-up-mismatch)."""
    result = tmp_path / "r.json"
    sonnet = str(SAMPLE_SWEEPS / "sonnet-like")
    # vLLM 0.33's token rule, as README shows it (on 0.34 the K=0 tier keeps K=7 FULL).
    capped = ["--max-cudagraph-capture-size", "256", "--vllm-version", "0.33.0"]
    assert main([sonnet, *capped, "--output-json", str(result)]) == 0
    assert "measure next: batch size 33, K=[6, 7]" in capsys.readouterr().out
    design = ["--model", "m", "--method", "eagle3", "--ks", "0,1,3,7", "--anchors", "1,64,128,256"]
    out = tmp_path / "followup"
    follow = ["--follow-up", str(result), "--results-dir", str(tmp_path / "copy")]
    assert main(["plan", "-o", str(out), *design, *follow]) == 0
    planned: set[tuple[int, int]] = set()
    for step in json.loads((out / "sweep_plan.json").read_text())["steps"]:
        serve = json.loads((out / step["folder"] / "serve_params.json").read_text())
        bench = json.loads((out / step["folder"] / "bench_params.json").read_text())
        for combo in serve.values():
            k = combo["speculative_config"]["num_speculative_tokens_per_batch_size"][0][2]
            planned |= {(b["max_concurrency"], k) for b in bench.values()}
    anchors, ks = (1, 33, 37, 43, 52, 64, 128, 256), range(8)
    first = {(a, k) for a in (1, 64, 128, 256) for k in (0, 1, 3, 7)}
    assert planned == {(a, k) for a in anchors for k in ks if k != 2} - first


def test_a_follow_up_s_results_go_into_the_first_experiment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A result inside its experiment (the default) or in a folder below it sends the
    follow-up's results into the experiment; one written elsewhere (README's advice for
    read-only data) is refused, naming --results-dir, and planned with it."""
    experiment = tmp_path / "exp"
    shutil.copytree(SAMPLE_SWEEPS / "sonnet-like", experiment)
    design = ["--model", "m", "--method", "eagle3", "--ks", "0,1,3,7", "--anchors", "1,64,128,256"]
    for result in (experiment / "speculative_k_schedule.json", experiment / "out" / "r.json",
                   tmp_path / "r.json"):  # fmt: skip
        result.parent.mkdir(exist_ok=True)
        assert main([str(experiment), "--max-cudagraph-capture-size", "256",
                     "--vllm-version", "0.33.0", "--output-json", str(result)]) == 0  # fmt: skip
        capsys.readouterr()
        out = tmp_path / "plan"
        shutil.rmtree(out, ignore_errors=True)
        status = main(["plan", "-o", str(out), *design, "--follow-up", str(result)])
        if result.is_relative_to(experiment):
            assert status == 0
            command = parse_sweep_command((out / "command.txt").read_text().split("\n\n")[0])
            assert command["-o"] == str(experiment), result
            continue
        assert status == 2 and not out.exists()
        err = capsys.readouterr().err
        assert "error [unknown-first-experiment]" in err and "--results-dir" in err
        assert "Traceback" not in err
        copy = ["--results-dir", str(tmp_path / "copy")]
        assert main(["plan", "-o", str(out), *design, "--follow-up", str(result), *copy]) == 0
        command = parse_sweep_command((out / "command.txt").read_text().split("\n\n")[0])
        assert command["-o"] == str(tmp_path / "copy")


def test_a_plan_folder_holding_other_files_is_refused_before_anything_is_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The plan's folder is replaced whole: what else it holds would be lost.
    folder = tmp_path / "plan"
    folder.mkdir()
    (folder / "notes.md").write_text("mine")
    assert main(["plan", "-o", str(folder), *LLAMA_FLAGS]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "with --output-dir" in captured.err and "holds notes.md," in captured.err
    assert "Traceback" not in captured.err
    assert [path.name for path in folder.iterdir()] == ["notes.md"]
    # An earlier plan in it is replaced.
    (folder / "notes.md").unlink()
    assert main(["plan", "-o", str(folder), *LLAMA_FLAGS]) == 0
    assert main(["plan", "-o", str(folder), *LLAMA_FLAGS, "--ks", "0,3"]) == 0


def test_a_lean_plan_prints_its_sweeps_and_its_cost_beside_the_full_grid_s(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # LLAMA_FLAGS: K 0, 1, 3, 7 at anchors 1, 64, 128, 256, 3 runs; the probe: K=0 and K=7 at
    # 1, 64 (sqrt(1 x 256) = 16: 64 is nearer on the log scale than 128) and 256.
    plan_files(tmp_path, *LLAMA_FLAGS, "--design", "lean")
    out = capsys.readouterr().out.splitlines()
    # 16 cells once + 2 K x 3 anchors x 2 more = 28 runs; the full grid 16 x 3 = 48.
    assert out[0] == "tuning plan: 2 sweep(s), 4 server start(s), 28 benchmark runs"
    assert out[1].startswith(
        "  probe: servers [k0, k7] x concurrency [1, 64, 128, 256] x 1-3 run(s) (seeds 0-2 at"
        " concurrency 1, 64, 256; seed 0 at concurrency 128) -> results/tuning:"
    )
    assert out[2].startswith(
        "  grid: servers [k1, k3] x concurrency [1, 64, 128, 256] x 1 run(s) (seed 0) ->"
        " results/tuning/grid:"
    )
    assert out[3].startswith(
        "  note: lean design: 28 benchmark runs on 4 server start(s); the full grid (--design"
        " full, the same flags) runs 48 on 4: 58 % of its runs"
    )
