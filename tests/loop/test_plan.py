"""lib/loop/plan.py: the design and its checks, the tuning, follow-up and validation plans, and
the files a plan writes. (What vLLM makes of the files is tests/cli/test_plan.py's.)"""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from paths import SAMPLE_SWEEPS
from sweep_builder import write_combo
from vllm_sweep import (
    NOISY_DESIGN,
    NOISY_FIRST_RUNS,
    llama_design,
    noisy_first_sweep,
    parse_sweep_command,
    planned,
    planned_k,
    run_planned_sweeps,
    vllm_apply_to_cmd,
    vllm_read_params,
    vllm_record,
    vllm_records_params,
)

from lib.confidence import (
    MIN_RUNS_NEEDED,
    ConfidenceReport,
    ConfidenceSettings,
    assess,
)
from lib.deploy.result_file import result_text
from lib.loop.plan import (
    RANDOM_TOKENS_NOTE,
    FollowUpNeeds,
    SweepDesign,
    SweepPlan,
    SweepStep,
    default_anchors,
    design_from,
    follow_up_needs,
    follow_up_plan,
    validation_plan,
    write_plan,
)
from lib.measurement_plan import measurement_plan
from lib.policy import apply_policy
from lib.schedule import Schedule, TuningResult, tune
from lib.settings import Options, Settings
from lib.sweeps import load_experiment


def tuned(root: Path) -> tuple[TuningResult, ConfidenceReport]:
    result = tune(load_experiment(root), Settings(max_objective_relative_mad=1.0))
    report = assess(result, ConfidenceSettings())
    return apply_policy(result, report, "seed"), report


def test_a_sweep_of_the_plan_tunes(tmp_path: Path) -> None:
    """Records made the way the sweep makes them from the planned files load and tune, with
    the planned anchors and K, one global K and the planned runs per cell."""
    plan = planned(llama_design(goodput=("tpot:50",)))
    written, problems = write_plan(plan, tmp_path / "plan")
    assert problems == [] and (tmp_path / "plan" / "run.sh") in written
    (experiment,) = run_planned_sweeps(
        tmp_path / "plan",
        tmp_path,
        lambda serve, bench, _: {"output_throughput": 100.0 + planned_k(serve) + bench["seed"]},
    )
    result = tune(load_experiment(experiment), Settings())
    assert result.ok, [p.describe() for p in result.problems]
    assert sorted(set(result.cells["anchor"].to_list())) == [1, 64, 128, 256]
    assert sorted(set(result.cells["k"].to_list())) == [0, 1, 3, 7]
    assert set(result.cells["num_runs"].to_list()) == {SweepDesign().num_runs}
    assert result.configured_global_k == 7
    # K=7 has the highest throughput everywhere (100 + K + seed).
    assert result.schedule == Schedule(((1, 256, 7),))


def test_follow_up_results_merge_with_the_first_sweep(tmp_path: Path) -> None:
    first = noisy_first_sweep(tmp_path / "tuning")
    before = tune(load_experiment(first), Settings(max_objective_relative_mad=1.0))
    extra = {"max_concurrency": 16, "num_prompts": 32}
    serve = vllm_records_params(
        planned(llama_design(ks=(0, 3), anchors=(1, 16))).steps[0].serve_params
    )
    records = [
        {**vllm_record(serve[1], extra, n), "output_throughput": 1000.0 + n} for n in range(4)
    ]
    write_combo(first / "followup-1" / "SERVE--k3-BENCH--c16", records)
    after = tune(load_experiment(first), Settings(max_objective_relative_mad=1.0))
    runs = {
        (row["anchor"], row["k"]): row["num_runs"]
        for table in (before.cells, after.cells)
        for row in table.to_dicts()
    }
    assert after.ok
    assert runs[(16, 3)] == 3 + 4


def test_follow_up_from_the_result_alone_reruns_contenders(tmp_path: Path) -> None:
    first = noisy_first_sweep(tmp_path / "tuning")
    result, report = tuned(first)
    path = tmp_path / "result.json"
    path.write_text(result_text(result))
    needs, problems = follow_up_needs([path])
    assert needs is not None, problems
    assert needs.result_file == str(path)
    unresolved = report.anchors.filter(report.anchors["status"] == "unresolved").to_dicts()
    expected_cells = {(row["anchor"], k) for row in unresolved for k in row["contenders"]}
    assert set(needs.more_runs) == expected_cells
    assert all(runs >= 1 for runs in needs.more_runs.values())
    assert any("--plan-json" in note for note in needs.notes)


def test_follow_up_measures_the_capture_boundaries_of_the_result(tmp_path: Path) -> None:
    first = noisy_first_sweep(tmp_path / "tuning")
    result, _ = tuned(first)
    data = json.loads(result_text(result))
    # What tune writes when K=5 would run past C from batch 86 (lib/deploy/tuning.py).
    data["deployment"] = {
        "anchors_to_measure": [{"batch_size": 86, "ks": [4, 5], "reason": "boundary"}]
    }
    path = tmp_path / "result.json"
    path.write_text(json.dumps(data))
    needs, problems = follow_up_needs([path])
    assert needs is not None, problems
    assert 86 in needs.new_anchors
    assert needs.more_runs[(86, 4)] == needs.more_runs[(86, 5)] == 3
    # Without the block, no such anchor.
    del data["deployment"]
    path.write_text(json.dumps(data))
    needs, _ = follow_up_needs([path])
    assert needs is not None and 86 not in needs.new_anchors


def test_follow_up_refuses_a_different_engine(tmp_path: Path) -> None:
    first = noisy_first_sweep(tmp_path / "tuning")
    result, _ = tuned(first)
    path = tmp_path / "result.json"
    path.write_text(result_text(result))
    needs, _ = follow_up_needs([path])
    assert needs is not None
    plan, problems = follow_up_plan(llama_design(ks=(0, 1, 3, 7)), needs, "r", "followup")
    assert plan is None
    (problem,) = problems
    assert problem.rule == "follow-up-mismatch"
    assert "set --global-k 3" in problem.message


def _sonnet_result(tmp_path: Path) -> Path:
    path = tmp_path / "speculative_k_schedule.json"
    result = tune(load_experiment(SAMPLE_SWEEPS / "sonnet-like"), Settings())
    path.write_text(result_text(result))
    return path


def test_validation_plan_refuses_another_drafter(tmp_path: Path) -> None:
    result = _sonnet_result(tmp_path)
    for design, message in (
        (
            llama_design(method="ngram", draft_model=None),
            "speculative_config.method 'eagle3', the design has --method 'ngram'",
        ),
        (llama_design(draft_model="other/drafter"), "--draft-model 'other/drafter'"),
    ):
        plan, problems = validation_plan(design, result, "r", "v")
        assert plan is None
        (problem,) = problems
        assert message in problem.message
        assert problem.files == (str(result),)


def test_validation_plan_needs_a_result_with_a_schedule(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"batch_decisions": []}))
    plan, problems = validation_plan(llama_design(), path, "r", "v")
    assert plan is None
    assert "no 'speculative_config' with a schedule" in problems[0].message


def test_static_ks_of_a_validation_plan_must_be_positive(tmp_path: Path) -> None:
    plan, problems = validation_plan(llama_design(), _sonnet_result(tmp_path), "r", "v", [0, 3])
    assert plan is None
    assert [p.rule for p in problems] == ["invalid-static-ks"]


def _without_seeds(step: SweepStep) -> tuple[dict[str, Any], dict[str, list[int]]]:
    """A step's bench combos with the repeat's seed taken out: the workloads (each name as
    the plan gives it, less ``-seed<seed>``) and the seeds of each."""
    workloads: dict[str, Any] = {}
    seeds: dict[str, list[int]] = {}
    for name, combo in step.bench_params.items():
        workload = name.removesuffix(f"-seed{combo['seed']}")
        params = {key: value for key, value in combo.items() if key != "seed"}
        assert workloads.setdefault(workload, params) == params, name
        seeds.setdefault(workload, []).append(combo["seed"])
    return workloads, seeds


def _as_run_before_the_seeds(sample: Path, design: SweepDesign) -> None:
    """The committed params are what the plan writes (the model path aside, the machine's),
    but for the repeats: the sample was run before the plan seeded them, one bench combo per
    workload run --num-runs times with one seed; the plan runs the same workloads once per
    seed 0 .. num_runs - 1."""
    step = planned(design).steps[0]
    assert json.loads((sample / "serve_params.json").read_text()) == step.serve_params
    workloads, seeds = _without_seeds(step)
    assert json.loads((sample / "bench_params.json").read_text()) == workloads
    assert set(map(tuple, seeds.values())) == {tuple(range(design.num_runs))}
    command = parse_sweep_command((sample / "command.txt").read_text().strip())
    assert command["--num-runs"] == str(design.num_runs)


def _tiny_ngram_design(**changes: Any) -> SweepDesign:
    """The design of the real CPU samples' plans (scripts/real_cpu_sweep): the tiny model with
    n-gram speculation, 64 input tokens; ``changes`` are each sample's own flags. The model
    path is the machine's, in no params file."""
    speculation = {"prompt_lookup_max": 4, "prompt_lookup_min": 2}
    values: dict[str, Any] = {"model": "MODEL", "method": "ngram", "input_len": 64}
    return SweepDesign(**values, speculative_options=speculation, **changes)


def test_the_real_cpu_sample_was_run_from_this_plan() -> None:
    """The committed real sweep's params are what its script's plan command writes, but for
    the seeded repeats (:func:`_as_run_before_the_seeds`)."""
    sample = SAMPLE_SWEEPS / "real-cpu-tiny-ngram"
    if not (sample / "serve_params.json").is_file():
        pytest.skip(f"{sample} has not been committed yet")
    design = _tiny_ngram_design(
        ks=(0, 1, 2, 3, 5), anchors=(1, 2, 4, 8), output_len=128, num_prompts=48
    )
    _as_run_before_the_seeds(sample, design)


def test_the_real_server_info_sample_was_run_from_this_plan() -> None:
    """The real sweep that saved its servers' configs ran the params this plan writes (but for
    the seeded repeats, :func:`_as_run_before_the_seeds`), the engine setting (max_num_seqs 4,
    above the largest anchor) in every combo; each combo folder holds the config its server
    reported, with that max_num_seqs."""
    sample = SAMPLE_SWEEPS / "real-cpu-server-info"
    if not (sample / "serve_params.json").is_file():
        pytest.skip(f"{sample} has not been committed yet")
    design = _tiny_ngram_design(
        ks=(0, 1, 3), anchors=(1, 2), max_num_seqs=4, output_len=128, num_prompts=16, num_runs=2
    )
    _as_run_before_the_seeds(sample, design)
    for combo in sorted(sample.glob("SERVE--*")):
        saved = json.loads((combo / "server_info.json").read_text())
        assert saved["vllm_config"]["scheduler_config"]["max_num_seqs"] == 4, combo.name


def test_the_real_replica_sample_was_run_from_this_plan() -> None:
    """The committed replicated sweep ran exactly the params its script's plan command writes
    (scripts/real_cpu_sweep/run_replica_sweep.sh): 3 replicas per K in the shuffled blocks,
    every seeded bench combo; every serve combo has a folder per bench combo."""
    sample = SAMPLE_SWEEPS / "real-cpu-replicas"
    if not (sample / "serve_params.json").is_file():
        pytest.skip(f"{sample} has not been committed yet")
    design = _tiny_ngram_design(
        ks=(0, 1, 3), anchors=(1, 4), server_replicas=3, output_len=64, num_prompts=16
    )
    step = planned(design).steps[0]
    assert json.loads((sample / "serve_params.json").read_text()) == step.serve_params
    assert json.loads((sample / "bench_params.json").read_text()) == step.bench_params
    stored = json.loads((sample / "sweep_plan.json").read_text())["design"]
    assert stored["server_replicas"] == 3
    folders = {path.name for path in sample.glob("SERVE--*")}
    assert folders == {
        f"SERVE--{serve}-BENCH--{bench}"
        for serve in step.serve_params
        for bench in step.bench_params
    }


def test_run_script_dry_run_without_vllm_prints_every_sweep(tmp_path: Path) -> None:
    """Without `vllm` on PATH, `run.sh --dry-run` prints each step's command as `commands`
    gives it (params beside the script, every extra argument appended) and runs nothing."""
    one = planned(llama_design(serve_args='--served-model-name "it\'s"'))
    (step,) = one.steps
    second = dataclasses.replace(step, name="more", experiment_name="more")
    plan = dataclasses.replace(one, steps=(step, second))
    plan_dir = tmp_path / "plan"
    _, problems = write_plan(plan, plan_dir)
    assert problems == []
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    dirname, bash = shutil.which("dirname"), shutil.which("bash")
    assert dirname is not None and bash is not None
    (bin_dir / "dirname").symlink_to(dirname)
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        [bash, str(plan_dir / "run.sh"), "--dry-run", "--resume"],
        cwd=work,
        env={"PATH": str(bin_dir)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    expected = [f"{command} --dry-run --resume" for command in plan.commands(str(plan_dir))]
    assert done.stdout.splitlines() == expected
    assert "/more/serve_params.json" in expected[1]
    assert list(work.iterdir()) == []


# --------------------------------------------------------------------------- the design


def test_default_anchors_are_powers_of_two_up_to_the_maximum() -> None:
    assert default_anchors(48) == (1, 2, 4, 8, 16, 32, 48)
    assert default_anchors(1) == (1,)
    design = SweepDesign(model="m", method="ngram", max_batch_size=48).with_default_anchors()
    assert design.anchors == default_anchors(48)


@pytest.mark.parametrize(
    ("changes", "field", "expected"),
    [
        ({"ks": (1, 3)}, "--ks", "K=0 among them (the baseline)"),
        ({"ks": (0,)}, "--ks", "at least one K >= 1"),
        ({"ks": (0, 1, 1)}, "--ks", "no repeated K"),
        ({"anchors": (2, 8)}, "--anchors", "the first anchor to be 1"),
        ({"max_batch_size": 16}, "--max-batch-size", "the largest anchor, 8"),
        ({"global_k": 2}, "--global-k", ">= the largest K, 3"),
        ({"goodput": ("tpot50",)}, "--goodput", "METRIC:MILLISECONDS"),
        ({"dataset": "sharegpt"}, "--dataset", "--dataset-path with it"),
        ({"num_runs": 0}, "--num-runs", ">= 1"),
        ({"speculative_options": {"method": "x"}}, "--spec-option", "the plan sets them itself"),
        ({"serve_args": "'open"}, "--serve-args", "arguments a shell can split"),
        ({"model": None}, "--model", "a value (or an earlier plan's sweep_plan.json)"),
        # The shared range of prompt lengths (lib.settings.PROMPT_TOKENS_RANGE), both ends.
        ({"context_lengths": (512, 0)}, "--context-lengths", "(0 is below 1 token)"),
        (
            {"context_lengths": (512, 2**30 + 1)},
            "--context-lengths",
            "prompt lengths from 1 to 1073741824 (1073741825 is above",
        ),
        ({"context_lengths": (512, 512)}, "--context-lengths", "no repeated length"),
        (
            {"context_lengths": (512,), "dataset": "sonnet", "dataset_path": "s.txt"},
            "--context-lengths",
            "the random dataset",
        ),
        ({"context_lengths": (512,), "input_len": 64}, "--input-len", "none with"),
        (
            {"context_lengths": (512, 4096), "serve_args": "--max-model-len 2048"},
            "--serve-args",
            ">= 4224",  # 4096 + the default 128 output tokens
        ),
        ({"max_num_seqs": 4}, "--max-num-seqs", ">= the deployment maximum, 8"),
        ({"max_cudagraph_capture_size": 0}, "--max-cudagraph-capture-size", ">= 1"),
        (
            {"max_cudagraph_capture_size": 64, "serve_args": "--max_cudagraph_capture_size=32"},
            "--serve-args",
            "no --max-cudagraph-capture-size in it: --max-cudagraph-capture-size 64 sets it",
        ),
        (
            {"max_num_seqs": 8, "serve_args": "--seed 0 --max-num-seqs 16"},
            "--serve-args",
            "no --max-num-seqs in it",
        ),
    ],
)
def test_a_bad_design_names_its_flag(changes: dict[str, Any], field: str, expected: str) -> None:
    values: dict[str, Any] = {"model": "m", "method": "ngram", "ks": (0, 1, 3), "anchors": (1, 8)}
    problems = SweepDesign(**{**values, **changes}).invalid()
    assert [p.field for p in problems] == [field]
    assert expected in str(problems[0].expected)


def test_engine_settings_at_their_limits_are_planned() -> None:
    """The other side of the rules above: max_num_seqs equal to the deployment maximum and a
    capture ceiling of 1 are fine, and without the flags --max-num-seqs in --serve-args is
    left alone (the serve command's own is the deployment maximum)."""
    values: dict[str, Any] = {"model": "m", "method": "ngram", "ks": (0, 1), "anchors": (1, 8)}
    for changes in (
        {"max_num_seqs": 8, "max_cudagraph_capture_size": 1},
        {"serve_args": "--max-cudagraph-capture-size 32"},
    ):
        assert SweepDesign(**{**values, **changes}).invalid() == []


def test_engine_settings_go_into_every_serve_combo_and_every_record(tmp_path: Path) -> None:
    """--max-num-seqs and --max-cudagraph-capture-size are one-valued serve keys of every combo
    of every kind of plan, so the sweep passes them to every server (as vLLM's flags of the same
    names) and copies them into every record; the serve command's --max-num-seqs agrees."""
    design = llama_design(max_num_seqs=512, max_cudagraph_capture_size=2048)
    engine = {"max_num_seqs": 512, "max_cudagraph_capture_size": 2048}
    tuning = planned(design)
    needs = follow_up_needs([_sonnet_plan_json(tmp_path)])[0]
    assert needs is not None
    follow_up, problems = follow_up_plan(design, needs, "r", "followup")
    assert follow_up is not None, problems
    validation, problems = validation_plan(design, _sonnet_result(tmp_path), "r", "v")
    assert validation is not None, problems
    for plan in (tuning, follow_up, validation):
        for step in plan.steps:
            for name, combo in step.serve_params.items():
                assert {key: combo.get(key) for key in engine} == engine, (plan.kind, name)
        assert "--max-num-seqs 512" in plan.commands("plan")[0]
    assert validation.steps[0].serve_params["no-spec"] == engine
    serve = vllm_records_params(tuning.steps[0].serve_params)
    record = vllm_record(serve[0], {"max_concurrency": 1, "num_prompts": 32}, 0)
    assert {key: record[key] for key in engine} == engine
    stored = design.to_json()
    assert {key: stored[key] for key in engine} == engine
    assert design_from(stored, {})[0] == design


def test_without_engine_settings_the_plan_is_as_before() -> None:
    """No flag, no key: the serve combos hold only speculative_config, the stored design has
    no engine keys (earlier plans' sweep_plan.json read and write the same), and the servers'
    --max-num-seqs is the deployment maximum."""
    plan = planned(llama_design())
    assert all(
        list(combo) == ["speculative_config"] for combo in plan.steps[0].serve_params.values()
    )
    stored = llama_design().to_json()
    assert "max_num_seqs" not in stored and "max_cudagraph_capture_size" not in stored
    assert "--max-num-seqs 256" in plan.commands("plan")[0]


def _sonnet_plan_json(tmp_path: Path) -> Path:
    path = tmp_path / "measurement_plan.json"
    path.write_text(
        json.dumps(
            {
                "reruns": [{"batch_size": 1, "k": 3, "runs": 3, "more_runs": 2}],
                "new_anchors": [{"batch_size": 8, "ks": [0, 3], "runs_per_k": 3}],
            }
        )
    )
    return path


def test_design_from_layers_the_defaults_the_stored_design_and_the_flags() -> None:
    stored = llama_design().to_json()
    design, problems = design_from(stored, {"ks": (0, 2)}, "sweep_plan.json")
    assert problems == [] and design is not None
    assert design.ks == (0, 2)  # the flag
    assert design.anchors == (1, 64, 128, 256)  # the stored design
    assert design.num_runs == SweepDesign().num_runs  # the default
    assert design.to_json() == {**stored, "ks": [0, 2]}
    design, problems = design_from({"modle": "typo"}, {}, "sweep_plan.json")
    assert design is None
    assert (problems[0].rule, problems[0].value) == ("invalid-design", "['modle']")


def test_write_plan_reports_a_file_it_cannot_write(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the plan folder should be")
    written, problems = write_plan(planned(llama_design()), blocker / "plan")
    assert written == []
    assert [p.rule for p in problems] == ["unwritable-file"]


def test_a_context_plan_sweeps_every_prompt_length_and_tunes_into_a_grid(tmp_path: Path) -> None:
    """A bench combo per (anchor, length, seed) with the length as random_input_len; the
    servers get a --max-model-len for the longest prompt and its output; records made from
    the params as the sweep makes them give the tuner a context axis with the planned lengths
    (the seeds are repeats within it)."""
    from lib.context import analyse_contexts
    from lib.context_axis import find_context_axis
    from lib.settings import ContextSettings

    design = llama_design(
        anchors=(1, 64), ks=(0, 3), context_lengths=(4096, 512), input_len=None, output_len=100
    )
    plan = planned(design)
    step = plan.steps[0]
    assert list(step.bench_params) == [
        f"c{anchor}-p{length}-seed{seed}"
        for anchor in (1, 64)
        for length in (512, 4096)
        for seed in range(3)
    ]
    assert step.bench_params["c64-p512-seed2"] == {
        "max_concurrency": 64,
        "num_prompts": 512,
        "random_input_len": 512,
        "seed": 2,
    }
    assert "--max-model-len 4196" in plan.commands("plan")[0]  # 4096 + 100
    assert write_plan(plan, tmp_path / "plan")[1] == []

    def measure(serve: dict[str, Any], bench: dict[str, Any], _: int) -> dict[str, Any]:
        # K=3 pays except at batch 64 with short prompts.
        k = planned_k(serve)
        short_and_busy = bench["max_concurrency"] == 64 and bench["random_input_len"] == 512
        return {"output_throughput": 100.0 + (-k if short_and_busy else k) + bench["seed"] / 10}

    (experiment,) = run_planned_sweeps(tmp_path / "plan", tmp_path, measure)
    sweep = load_experiment(experiment)
    axis, problems = find_context_axis(sweep, ContextSettings())
    assert axis is not None and problems == []
    assert axis.field == "random_input_len"
    assert [point.prompt_tokens for point in axis.points] == [512, 4096]
    # 2 anchors x 2 K x 3 seeds at each length.
    assert [point.num_runs for point in axis.points] == [12, 12]
    grid = analyse_contexts(sweep, axis, Settings()).grid()
    assert {(c["batch_size"], c["prompt_tokens"]): c["selected_k"] for c in grid} == {
        (1, 512): 3,
        (64, 512): 0,
        (1, 4096): 3,
        (64, 4096): 3,
    }


def test_a_random_dataset_plan_says_why_random_tokens_mislead() -> None:
    random_notes = planned(llama_design()).notes
    assert RANDOM_TOKENS_NOTE in random_notes and "1.09-1.15" in RANDOM_TOKENS_NOTE
    sonnet = planned(llama_design(dataset="sonnet", dataset_path="sonnet.txt", input_len=550))
    assert RANDOM_TOKENS_NOTE not in sonnet.notes


def test_repeats_are_bench_combos_each_with_its_own_seed() -> None:
    """--num-runs N: N bench combos per anchor, ``c<anchor>-seed<r>`` with seed r = 0 .. N-1,
    each run once (the sweep's --num-runs 1), so the runs, the summary and the stored steps
    count N per cell; as the sweep applies a combo, its client command holds --seed r once.
    One run is one seed."""
    for num_runs in (1, 3):
        plan = planned(llama_design(anchors=(1, 64), ks=(0, 3), num_runs=num_runs))
        (step,) = plan.steps
        seeds = tuple(range(num_runs))
        assert list(step.bench_params) == [f"c{a}-seed{r}" for a in (1, 64) for r in seeds]
        assert step.seeds() == {1: seeds, 64: seeds}
        assert step.runs_per_cell == num_runs
        flags = parse_sweep_command(plan.commands("plan")[0])
        assert flags["--num-runs"] == "1"
        for combo in vllm_records_params(step.bench_params):
            client = vllm_apply_to_cmd(combo, shlex.split(flags["--bench-cmd"]))
            assert client.count("--seed") == 1
            assert client[client.index("--seed") + 1] == str(combo["seed"])
        # 2 K x 2 anchors x N runs, one server start per K.
        assert step.runs == 2 * 2 * num_runs
        assert (
            plan.summary_line() == f"1 sweep(s), 2 server start(s), {4 * num_runs} benchmark runs"
        )
        stored = json.loads(plan.files("plan")["sweep_plan.json"])
        assert stored["steps"][0]["num_runs"] == num_runs


def test_a_seed_in_the_bench_arguments_is_refused_and_one_for_the_server_is_not() -> None:
    """The plan owns the bench seed (a seed there would be replaced in every run); vllm serve's
    own --seed (its sampling) is the user's."""
    (problem,) = llama_design(bench_args="--seed=3").invalid()
    assert problem.field == "--bench-args" and "no --seed in it" in str(problem.expected)
    assert llama_design(serve_args="--seed 0", bench_args="--served-model-name x").invalid() == []


def _seeded_effect(serve: dict[str, Any], bench: dict[str, Any], _: int) -> dict[str, Any]:
    """K=3 wins at batch 1 (by 50 %), K=0 at 64 (by 20 %); the seeds 1 % apart."""
    busy = bench["max_concurrency"] > 1
    base = (150.0 if planned_k(serve) else 100.0) * (
        (0.8 if planned_k(serve) else 1.2) if busy else 1
    )
    return {"output_throughput": base * (1 + 0.01 * bench["seed"])}


def test_seeded_repeats_pool_into_one_cell_of_one_server(tmp_path: Path) -> None:
    """A sweep run from the plan's files: every record holds its seed, and the tuner pools an
    (anchor, K)'s seeded bench combos into one cell of --num-runs runs (different bench combos
    of one serve combo are one server: no pooled-servers error), with no context axis."""
    from lib.context_axis import find_context_axis
    from lib.settings import ContextSettings

    plan = planned(llama_design(anchors=(1, 64), ks=(0, 3)))
    assert write_plan(plan, tmp_path / "plan")[1] == []
    (experiment,) = run_planned_sweeps(tmp_path / "plan", tmp_path, _seeded_effect)
    sweep = load_experiment(experiment)
    seeds = sweep.runs.group_by("anchor", "k").agg(pl.col("seed").sort())
    assert {tuple(row) for row in seeds["seed"].to_list()} == {(0, 1, 2)}
    result = tune(sweep, Settings())
    assert result.ok, [p.describe() for p in result.problems]
    assert "pooled-servers" not in {p.rule for p in result.problems}
    assert result.cells.height == 4  # 2 anchors x 2 K, the seeds pooled
    assert set(result.cells["num_runs"].to_list()) == {3}
    assert result.schedule == Schedule(((1, 63, 3), (64, 64, 0)))
    assert find_context_axis(sweep, ContextSettings()) == (None, [])


def test_prompt_lengths_that_differ_only_by_seed_are_no_context_axis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a dataset of real prompts each seed samples prompts of other lengths: the measured
    mean prompt (total_input_tokens / completed) of a cell's runs differs by seed, by more than
    the context tolerance (230 > 1.1 x 180, 290 > 1.1 x 230), while every K at an anchor saw
    the same prompts per seed. Those are repeats of one workload, not a context axis: the
    cells pool, in the CLI too (its loader keeps the seed). Lengths that differ within one
    seed are an axis (tests/test_context.py)."""
    from lib.cli.main import main
    from lib.context_axis import find_context_axis
    from lib.settings import ContextSettings

    design = llama_design(
        anchors=(1, 64), ks=(0, 3), dataset="sharegpt", dataset_path="s.json", input_len=None
    )
    assert write_plan(planned(design), tmp_path / "plan")[1] == []
    lengths = (180, 230, 290)

    def measure(serve: dict[str, Any], bench: dict[str, Any], run: int) -> dict[str, Any]:
        tokens = {"total_input_tokens": bench["num_prompts"] * lengths[bench["seed"]]}
        return {**_seeded_effect(serve, bench, run), **tokens}

    (experiment,) = run_planned_sweeps(tmp_path / "plan", tmp_path, measure)
    sweep = load_experiment(experiment)
    axis, problems = find_context_axis(sweep, ContextSettings())
    assert axis is None
    (note,) = problems
    assert (note.rule, note.field, note.value) == (
        "no-context-axis",
        "total_input_tokens/completed",
        "180, 230, 290",
    )
    assert "only between the repeats' seeds" in note.message
    assert main([str(experiment)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "[[1, 63, 3], [64, 64, 0]]"
    assert "context grid" not in out


def _run_noisy(serve: dict[str, Any], bench: dict[str, Any], _: int) -> dict[str, Any]:
    """NOISY_FIRST_RUNS by seed (seed r: run r), later seeds 1 % apart around its median;
    a cell it has none of at 2 % per K."""
    anchor, k, seed = bench["max_concurrency"], planned_k(serve), bench["seed"]
    runs = NOISY_FIRST_RUNS.get((anchor, k))
    if runs is not None and seed < len(runs):
        return {"output_throughput": runs[seed]}
    center = sorted(runs)[1] if runs else 100.0 * anchor * (1 + 0.02 * k)
    return {"output_throughput": center * (1 + 0.01 * (seed % 3 - 1))}


def test_a_follow_up_continues_each_cell_s_seeds(tmp_path: Path) -> None:
    """The plan's seeded sweep, tuned: the follow-up of its measurement plan and result gives
    each cell to rerun the seeds from its runs so far (3: the first sweep ran 0-2) and the new
    anchor's the seeds from 0. Run into the first experiment and tuned again, every cell's
    runs hold the seeds 0 .. its runs - 1, each once: no prompts were sent twice."""
    design = llama_design(**NOISY_DESIGN)
    first_plan = planned(design)
    assert write_plan(first_plan, tmp_path / "plan")[1] == []
    (experiment,) = run_planned_sweeps(tmp_path / "plan", tmp_path, _run_noisy)
    result, report = tuned(experiment)
    plan_json, result_json = experiment / "plan.json", experiment / "result.json"
    plan_json.write_text(measurement_plan(result, report).to_json_text())
    result_json.write_text(result_text(result))
    needs, problems = follow_up_needs([plan_json, result_json])
    assert needs is not None, problems
    follow_up, problems = follow_up_plan(design, needs, str(experiment), "followup")
    assert follow_up is not None, problems
    assert 4 in needs.new_anchors and any(anchor == 16 for anchor, _ in needs.more_runs)
    for step in follow_up.steps:
        for anchor, seeds in step.seeds().items():
            first = 0 if anchor in needs.new_anchors else 3
            assert seeds == tuple(range(first, first + step.runs_per_cell)), (step.name, anchor)
    assert write_plan(follow_up, tmp_path / "followup")[1] == []
    run_planned_sweeps(tmp_path / "followup", tmp_path, _run_noisy)
    runs = load_experiment(experiment).runs
    for (anchor, k), cell in runs.group_by("anchor", "k"):
        assert sorted(cell["seed"].to_list()) == list(range(cell.height)), (anchor, k)
    assert runs.filter(pl.col("anchor") == 16).height > 2 * 3


def test_k_with_different_runs_so_far_at_an_anchor_get_sweeps_of_their_own() -> None:
    """Each cell continues its own seeds: at anchor 16, K=0 has 3 runs (seeds 0-2) and K=3
    has 5 (0-4); 2 more each gives K=0 seeds 3-4 and K=3 seeds 5-6, in two sweeps (one serve x
    bench product cannot hold both). With equal runs so far the two share one sweep."""
    design = llama_design(**NOISY_DESIGN)

    def needs(so_far: dict[tuple[int, int], int]) -> FollowUpNeeds:
        more = {(16, 0): 2, (16, 3): 2}
        return FollowUpNeeds(more, so_far, new_anchors=(), global_k=None, ks=(0, 3), notes=())

    plan, problems = follow_up_plan(design, needs({(16, 0): 3, (16, 3): 5}), "r", "f")
    assert plan is not None, problems
    assert [(list(step.serve_params), step.seeds()) for step in plan.steps] == [
        (["k0"], {16: (3, 4)}),
        (["k3"], {16: (5, 6)}),
    ]
    plan, problems = follow_up_plan(design, needs({(16, 0): 3, (16, 3): 3}), "r", "f")
    assert plan is not None, problems
    (step,) = plan.steps
    assert (list(step.serve_params), step.seeds()) == (["k0", "k3"], {16: (3, 4)})


def test_a_follow_up_of_a_one_seed_sweep_uses_new_seeds(tmp_path: Path) -> None:
    """A hand-written sweep of the old design (a combo per anchor, --num-runs 3, one seed in
    the bench command, none in the records) tunes as before, and its follow-up starts at seed
    3: its cells have 3 runs, so no new run sends the seed-0 prompts again."""
    first = noisy_first_sweep(tmp_path / "tuning")
    result, _ = tuned(first)
    assert set(result.cells["num_runs"].to_list()) == {3}
    path = tmp_path / "result.json"
    path.write_text(result_text(result))
    needs, problems = follow_up_needs([path])
    assert needs is not None, problems
    assert set(needs.runs_so_far.values()) == {3}
    plan, problems = follow_up_plan(llama_design(**NOISY_DESIGN), needs, "r", "followup")
    assert plan is not None and plan.steps, problems
    for step in plan.steps:
        assert set(step.seeds().values()) == {tuple(range(3, 3 + step.runs_per_cell))}


def test_a_validation_plan_measures_seeds_the_tuning_did_not(tmp_path: Path) -> None:
    """The check's seeds start at the most runs any tuning cell has (its runs used the seeds
    below), so the schedule is checked on prompts it was not chosen on; every arm at an
    anchor gets the same seeds."""
    path = _sonnet_result(tmp_path)
    decisions = json.loads(path.read_text())["batch_decisions"]
    most = max(c["num_runs"] for decision in decisions for c in decision["candidates"])
    plan, problems = validation_plan(llama_design(num_runs=2), path, "r", "v")
    assert plan is not None, problems
    (step,) = plan.steps
    assert set(step.seeds().values()) == {(most, most + 1)}
    assert step.runs == len(step.serve_params) * len(decisions) * 2


def test_a_validation_sweep_of_the_plan_is_judged_with_its_seeds_pooled(tmp_path: Path) -> None:
    """The validation plan's files run as the sweep runs them: `check` puts each seeded run in
    its arm by its speculative_config, so every arm at every anchor holds --num-runs runs, and
    a dynamic server 5 % ahead of every alternative passes everywhere."""
    from lib.loop.check.judge import CheckSettings
    from lib.loop.check.report import check_deployment

    result = _sonnet_result(tmp_path)
    plan, problems = validation_plan(llama_design(), result, "results", "validation")
    assert plan is not None, problems
    assert write_plan(plan, tmp_path / "validate")[1] == []

    def measure(serve: dict[str, Any], bench: dict[str, Any], _: int) -> dict[str, Any]:
        ahead = 1.05 if serve["_benchmark_name"] == "dynamic" else 1.0
        return {"output_throughput": 100.0 * ahead * (1 + 0.001 * bench["seed"])}

    (experiment,) = run_planned_sweeps(tmp_path / "validate", tmp_path, measure)
    report = check_deployment(experiment, CheckSettings())
    assert [p.describe() for p in report.problems if p.severity.value == "error"] == []
    assert set(report.arms["num_runs"].to_list()) == {SweepDesign().num_runs}
    # dynamic, static K=1, 3, 7 and no speculation at each of the 4 anchors.
    assert report.arms.height == 5 * 4
    assert set(report.verdicts["verdict"].to_list()) == {"ok"}


# --------------------------------------------------------------------------- context grids

LONG_CONTEXT = SAMPLE_SWEEPS / "long-context"
#: The long-context sample's design (data/sample_sweeps/README.md): K 0/1/3/5 under global
#: K 5, concurrency 1 / 8 / 64 / 256, the random dataset.
CONTEXT_DESIGN = SweepDesign(
    model="m", method="mtp", ks=(0, 1, 3, 5), anchors=(1, 8, 64, 256), global_k=5,
    dataset="random",
)  # fmt: skip


def _context_result(tmp_path: Path, edit: Any = None) -> Path:
    from lib.cli.main import main

    path = tmp_path / "result.json"
    # Independent runs (no server offsets): every cell of the sample resolves.
    assert main([str(LONG_CONTEXT), "--server-cv", "0", "--output-json", str(path)]) == 0
    if edit is not None:
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))
    return path


def _context_plan(path: Path, *files: Path) -> SweepPlan:
    needs, problems = follow_up_needs([*files, path])
    assert needs is not None, problems
    plan, problems = follow_up_plan(CONTEXT_DESIGN, needs, "results", "followup")
    assert plan is not None, problems
    return plan


def _benched(plan: SweepPlan) -> dict[tuple[int, int, int], list[int]]:
    """(anchor, prompt, K) -> seeds planned."""
    found: dict[tuple[int, int, int], list[int]] = {}
    for step in plan.steps:
        for k in (int(name.removeprefix("k")) for name in step.serve_params):
            for combo in step.bench_params.values():
                key = (combo["max_concurrency"], combo["random_input_len"], k)
                found.setdefault(key, []).append(combo["seed"])
    return found


def test_a_resolved_grid_plans_the_proposed_prompt_lengths(tmp_path: Path) -> None:
    path = _context_result(tmp_path)
    data = json.loads(path.read_text())
    proposed = [row["prompt_tokens"] for row in data["context_measurement_plan"]]
    assert all(cell["status"] == "resolved" for cell in data["context_grid"])
    planned = _benched(_context_plan(path))
    # Every anchor and K of the grid at each proposed length, seeds 0 .. MIN_RUNS_NEEDED - 1
    # (a new cell has no runs so far).
    expected = {
        (anchor, prompt, k): list(range(MIN_RUNS_NEEDED))
        for anchor in (1, 8, 64, 256)
        for prompt in proposed
        for k in (0, 1, 3, 5)
    }
    assert planned == expected


def _unresolve(
    batch: int, prompt: int, status: str, contenders: list[int], needed: dict[str, int]
) -> Any:
    def edit(data: dict[str, Any]) -> None:
        data["context_measurement_plan"] = []
        for cell in data["context_grid"]:
            if (cell["batch_size"], cell["prompt_tokens"]) == (batch, prompt):
                cell.update(status=status, contenders=contenders, runs_needed=needed)

    return edit


def test_an_unresolved_cell_reruns_its_contenders_on_new_seeds(tmp_path: Path) -> None:
    path = _context_result(tmp_path, _unresolve(64, 2048, "unresolved", [0, 3], {"0": 5, "3": 6}))
    plan = _context_plan(path)
    # Each contender has 3 runs (seeds 0-2): K=0 up to 5 (2 more), K=3 up to 6 (3 more); the
    # sweep of a K runs its cells the same number of times, so they go to separate steps.
    assert _benched(plan) == {(64, 2048, 0): [3, 4], (64, 2048, 3): [3, 4, 5]}
    assert "nothing to measure" not in " ".join(plan.notes)


def test_an_undecided_cell_reruns_every_candidate(tmp_path: Path) -> None:
    path = _context_result(tmp_path, _unresolve(8, 512, "undecided", [], {}))
    # Every candidate at 3 runs: one more each (the minimum of 3 reached, at least 1 more).
    assert _benched(_context_plan(path)) == {(8, 512, k): [3] for k in (0, 1, 3, 5)}


def test_a_resolved_grid_with_nothing_proposed_has_nothing_to_measure(tmp_path: Path) -> None:
    plan = _context_plan(_context_result(tmp_path, lambda d: d.update(context_measurement_plan=[])))
    assert plan.steps == ()
    assert "nothing to measure: every grid cell is resolved" in plan.notes[-1]


def test_a_grid_read_from_another_field_is_refused(tmp_path: Path) -> None:
    path = _context_result(tmp_path, lambda d: d["context_axis"].update(field="my_len"))
    needs, problems = follow_up_needs([path])
    assert needs is None and problems[0].field == "context_axis.field"
    assert "'my_len'" in problems[0].message


def test_the_context_measurement_plan_is_written_and_planned(tmp_path: Path) -> None:
    from lib.cli.main import main

    result, plan_file = tmp_path / "result.json", tmp_path / "plan.json"
    assert (
        main(
            [
                str(LONG_CONTEXT),
                "--server-cv",
                "0",
                "--output-json",
                str(result),
                "--plan-json",
                str(plan_file),
            ]
        )
        == 0
    )
    plan_data = json.loads(plan_file.read_text())
    assert plan_data["context_field"] == "random_input_len"
    rows = plan_data["new_anchors"]
    assert rows and all(row["prompt_tokens"] in (512, 2048, 8192, 32768) for row in rows)
    planned = _benched(_context_plan(result, plan_file))
    for row in rows:
        for k in row["ks"]:
            assert planned[(row["batch_size"], row["prompt_tokens"], k)] == list(
                range(row["runs_per_k"])
            )
    # A plan without its result cannot be planned: the runs so far are in the result.
    needs, problems = follow_up_needs([plan_file])
    assert needs is None and "needs its result JSON" in problems[0].message


def test_a_damaged_grid_is_refused_not_planned_as_batch_only(tmp_path: Path) -> None:
    def damage(data: dict[str, Any]) -> None:
        data["context_grid"][0]["prompt_tokens"] = "512"

    needs, problems = follow_up_needs([_context_result(tmp_path, damage)])
    assert needs is None
    assert problems and problems[0].field is not None and "context_grid[0]" in problems[0].field


# --------------------------------------------------------------------------- context validation


def _exported(tmp_path: Path, result: Path, format: str) -> Path:
    from lib.cli.main import main

    path = tmp_path / f"{format}.json"
    assert main(["export", str(result), "--format", format, "-o", str(path)]) == 0
    return path


def _grid_picks(result: Path) -> dict[tuple[int, int], int]:
    """(anchor, prompt) -> the grid's selected K: what the vllm-rfc-48944 export runs at each
    cell (it holds the grid exactly: docs/context.md, "Exports")."""
    cells = json.loads(result.read_text())["context_grid"]
    return {(c["batch_size"], c["prompt_tokens"]): c["selected_k"] for c in cells}


def test_a_context_validation_plan_serves_the_export_at_every_anchor_and_prompt_length(
    tmp_path: Path,
) -> None:
    result = _context_result(tmp_path)
    exported = _exported(tmp_path, result, "vllm-rfc-48944")
    plan, problems = validation_plan(
        CONTEXT_DESIGN, result, "results", "validation", None, exported
    )
    assert plan is not None, problems
    (step,) = plan.steps
    config = json.loads(exported.read_text())["speculative_config"]
    dynamic = step.serve_params["dynamic"]["speculative_config"]
    # The export's config as written, beside the tuned method; the static servers without it.
    assert {key: dynamic[key] for key in config} == config
    assert dynamic["method"] == "mtp"
    assert step.serve_params["static-k3"]["speculative_config"] == {
        key: value for key, value in dynamic.items() if key not in config
    } | {"num_speculative_tokens": 3}
    picks = _grid_picks(result)
    combos = {(c["max_concurrency"], c["random_input_len"]) for c in step.bench_params.values()}
    assert combos == set(picks)
    assert (
        plan.notes[-1] == f"check with: tune-spec-k check results/validation --schedule {exported}"
    )


@pytest.mark.parametrize("format", ["vllm-rfc-48944", "vllm-pr-54801", "vllm-context"])
def test_a_context_validation_sweep_of_the_plan_is_judged_per_prompt_length(
    tmp_path: Path, format: str
) -> None:
    """Run the plan as the sweep runs it, with each server measuring 100 tok/s at the cell's
    pick and 90 elsewhere; the dynamic server runs the K the export runs there (the grid's pick
    for vllm-rfc-48944, read off its loss table for the others): judged per prompt length at
    that K, it ties the best static server where it runs the pick, and loses where not."""
    from lib.loop.check.judge import CheckSettings
    from lib.loop.check.report import check_deployment
    from lib.loop.check.schedule_file import context_schedule_file

    result = _context_result(tmp_path)
    exported = _exported(tmp_path, result, format)
    plan, problems = validation_plan(
        CONTEXT_DESIGN, result, "results", "validation", None, exported
    )
    assert plan is not None, problems
    assert write_plan(plan, tmp_path / "validate")[1] == []
    picks = _grid_picks(result)
    data = json.loads(exported.read_text())
    runs = {(c["batch_size"], c["prompt_tokens"]): c["exported_k"] for c in data["loss"]["cells"]}
    assert format != "vllm-rfc-48944" or runs == picks

    def measure(serve: dict[str, Any], bench: dict[str, Any], _: int) -> dict[str, Any]:
        cell = (bench["max_concurrency"], bench["random_input_len"])
        name = serve["_benchmark_name"]
        k = {"dynamic": runs[cell], "no-spec": 0}.get(name)
        k = int(name.removeprefix("static-k")) if k is None else k
        value = 100.0 if k == picks[cell] else 90.0
        return {"output_throughput": value * (1 + 0.001 * bench["seed"])}

    (experiment,) = run_planned_sweeps(tmp_path / "validate", tmp_path, measure)
    # The schedule under test as `check --schedule EXPORT` reads it.
    schedule, _ = context_schedule_file(data, str(exported))
    if format == "vllm-context":
        schedule = Schedule.parse(
            data["speculative_config"]["num_speculative_tokens_per_batch_size"]
        )[0]
    # Independent runs (no server offsets): ties between two servers are then sure.
    report = check_deployment(experiment, CheckSettings(options=Options(server_cv=0.0)), schedule)
    assert [p.describe() for p in report.errors] == []
    verdicts = {
        (row["anchor"], context.prompt_tokens): (row["dynamic_k"], row["verdict"])
        for context in report.contexts
        for row in context.verdicts.to_dicts()
    }
    assert {cell: k for cell, (k, _) in verdicts.items()} == runs
    expected = {cell: "ok" if runs[cell] == picks[cell] else "loss" for cell in picks}
    assert {cell: v for cell, (_, v) in verdicts.items()} == expected


def test_a_context_validation_needs_an_export_and_a_grid(tmp_path: Path) -> None:
    result = _context_result(tmp_path)
    not_export = tmp_path / "not-export.json"
    not_export.write_text(json.dumps({"format": "vllm", "x": 1}))
    plan, problems = validation_plan(CONTEXT_DESIGN, result, "r", "v", None, not_export)
    assert plan is None and [p.field for p in problems] == ["format"]
    assert "expected the -o file of tune-spec-k export" in problems[0].message
    exported = _exported(tmp_path, result, "vllm-rfc-48944")
    plan, problems = validation_plan(
        CONTEXT_DESIGN, _sonnet_result(tmp_path), "r", "v", None, exported
    )
    assert plan is None and "no context_grid" in problems[0].message
    other_field = _context_result(
        tmp_path / "f", lambda d: d["context_axis"].update(field="my_len")
    )
    plan, problems = validation_plan(CONTEXT_DESIGN, other_field, "r", "v", None, exported)
    assert plan is None and problems[0].field == "context_axis.field"


# --------------------------------------------------------------------------- server replicas


def _k_of_combos(serve_params: dict[str, Any]) -> dict[str, int]:
    return {name: planned_k(combo) for name, combo in serve_params.items()}


def test_one_server_replica_is_the_plan_without_replicas() -> None:
    """R = 1 (the default) writes what a plan wrote before replicas: a serve combo per K named
    k<K>, in K order, without a seed, and a design without the replica keys (so its files
    are byte for byte the earlier ones; the committed samples' params are checked against
    them above)."""
    plan = planned(llama_design(server_replicas=1))
    (step,) = plan.steps
    assert list(step.serve_params) == ["k0", "k1", "k3", "k7"]
    assert all("seed" not in combo for combo in step.serve_params.values())
    stored = plan.design.to_json()
    assert "server_replicas" not in stored and "first_replica" not in stored
    assert not any("replica" in note for note in plan.notes)
    assert plan.files("p") == planned(llama_design()).files("p")


def test_two_server_replicas_are_two_combos_per_k_differing_only_in_the_seed() -> None:
    """R = 2: each K's combo twice, named <combo>-seed=<r> for r = 0, 1, which lib.servers
    reads back as the K's configuration and the replica; each is the R = 1 combo with the
    serve param seed r added, nothing else; the design records R."""
    from lib.servers import configuration_of, replica_of

    single = planned(llama_design()).steps[0].serve_params
    plan = planned(llama_design(server_replicas=2))
    serve = plan.steps[0].serve_params
    assert len(serve) == 2 * len(single)
    for name, combo in serve.items():
        configuration, replica = configuration_of(name), replica_of(name)
        assert replica in {"0", "1"} and configuration in single, name
        assert combo == {**single[configuration], "seed": int(str(replica))}
    assert sorted(serve) == sorted(f"{k}-seed={r}" for k in single for r in (0, 1))
    assert plan.design.to_json()["server_replicas"] == 2
    assert design_from(plan.design.to_json(), {})[0] == plan.design
    # 4 K x 2 replicas: 8 server starts, said in the summary and the notes.
    assert "8 server start(s)" in plan.summary_line()
    assert any("8 server starts, 2x the servers of one per K" in note for note in plan.notes)


def test_replicas_run_in_shuffled_blocks_the_same_every_time() -> None:
    """The serve combos' order (the sweep's order of server starts) is a permutation of every
    (K, replica), in blocks of one replica of every K, each block's K order drawn by
    random.Random(SERVE_ORDER_SEED) one block after the other (the documented rule, computed
    here from it); the same design gives the same order."""
    import random

    from lib.loop.plan import SERVE_ORDER_SEED

    design = llama_design(server_replicas=3)
    names = list(planned(design).steps[0].serve_params)
    assert names == list(planned(design).steps[0].serve_params)
    draw = random.Random(SERVE_ORDER_SEED)
    expected = []
    for replica in range(3):
        block = ["k0", "k1", "k3", "k7"]
        draw.shuffle(block)
        expected += [f"{combo}-seed={replica}" for combo in block]
    assert names == expected
    assert sorted(names) == sorted(f"k{k}-seed={r}" for k in (0, 1, 3, 7) for r in range(3))
    # Not K order in every block: the shuffle moved something (true for this seed).
    assert any(names[i : i + 4] != sorted(names[i : i + 4]) for i in (0, 4, 8))


@pytest.mark.parametrize(
    ("changes", "field", "expected"),
    [
        ({"server_replicas": 0}, "--server-replicas", "a whole number >= 1"),
        ({"server_replicas": 1.5}, "--server-replicas", "a whole number >= 1"),
        ({"server_replicas": True}, "--server-replicas", "a whole number >= 1"),
        ({"first_replica": -1}, "--first-replica", "a whole number >= 0"),
        ({"server_replicas": 2, "serve_args": "--seed 0"}, "--serve-args", "no --seed in it"),
        ({"first_replica": 3, "serve_args": "--seed=1"}, "--serve-args", "no --seed in it"),
        (
            {"server_replicas": 2, "serve_args": "--load-format dummy"},
            "--server-replicas",
            "the seed draws the dummy weights",
        ),
    ],
)
def test_bad_replica_settings_name_their_flag(
    changes: dict[str, Any], field: str, expected: str
) -> None:
    (problem,) = llama_design(**changes).invalid()
    assert problem.field == field and expected in str(problem.expected)


def test_one_replica_leaves_the_server_seed_and_the_load_format_to_the_user() -> None:
    """The other side: without replicas a --seed and dummy weights in --serve-args are fine."""
    for serve_args in ("--seed 0", "--load-format dummy"):
        assert llama_design(serve_args=serve_args).invalid() == []
    assert llama_design(server_replicas=2, serve_args="--load-format auto").invalid() == []


def _server_offset(serve: dict[str, Any], bench: dict[str, Any], _: int) -> dict[str, Any]:
    """K=3 wins at batch 1 by 50 %, K=0 at 64 by 20 %; each server 1 % above the last (its
    replica value), the seeds 0.1 % apart."""
    effect = _seeded_effect(serve, bench, 0)["output_throughput"]
    return {"output_throughput": effect * (1 + 0.01 * serve["seed"]) * (1 + 0.001 * bench["seed"])}


def _servers_per_cell(sweep: Any) -> dict[tuple[int, int], int]:
    from lib.servers import serve_combo_expression

    counts = sweep.runs.group_by("anchor", "k").agg(serve_combo_expression().n_unique())
    return {(a, k): n for a, k, n in counts.iter_rows()}


def test_a_replicated_sweep_reads_as_cells_of_several_servers(tmp_path: Path) -> None:
    """The R = 3 plan's files run as vLLM runs them (records: serve keys, then bench keys, so
    the bench seed replaces the serve seed; folders named by the combos): the serve command
    gets each replica's --seed, the tuner reads every (anchor, K) as one cell with no
    pooled-servers problem, of 3 servers x 3 runs, and tunes as without replicas."""
    plan = planned(llama_design(anchors=(1, 64), ks=(0, 3), server_replicas=3))
    assert write_plan(plan, tmp_path / "plan")[1] == []
    command = parse_sweep_command((tmp_path / "plan" / "command.txt").read_text().strip())
    for item in vllm_read_params(Path(command["--serve-params"])):
        served = vllm_apply_to_cmd(item, shlex.split(command["--serve-cmd"]))
        assert served[served.index("--seed") + 1] == str(item["seed"])
    (experiment,) = run_planned_sweeps(tmp_path / "plan", tmp_path, _server_offset)
    sweep = load_experiment(experiment)
    assert _servers_per_cell(sweep) == {cell: 3 for cell in ((1, 0), (1, 3), (64, 0), (64, 3))}
    # The records' seed is the bench combo's (bench keys win): 0-2 on each of 3 servers.
    seeds = sweep.runs.group_by("anchor", "k").agg(pl.col("seed").sort())
    assert {tuple(row) for row in seeds["seed"].to_list()} == {(0, 0, 0, 1, 1, 1, 2, 2, 2)}
    result = tune(sweep, Settings())
    assert "pooled-servers" not in {p.rule for p in result.problems}
    assert result.ok, [p.describe() for p in result.problems]
    assert set(result.cells["num_runs"].to_list()) == {9}
    assert result.schedule == Schedule(((1, 63, 3), (64, 64, 0)))


def _run_noisy_servers(serve: dict[str, Any], bench: dict[str, Any], _: int) -> dict[str, Any]:
    """:func:`_run_noisy`, each server 0.2 % above the last (servers whose records were all
    equal would read as copies of one folder)."""
    value = _run_noisy(serve, bench, 0)["output_throughput"]
    return {"output_throughput": value * (1 + 0.002 * serve["seed"])}


def test_a_follow_up_of_a_replicated_design_starts_new_servers(tmp_path: Path) -> None:
    """A follow-up of an R = 3 design continues the replica values after the first sweep's
    (0-2): its servers are k<K>-seed=3..5, new starts that lib.servers reads as further
    replicas of the same configurations, with the same R; merged into the first experiment,
    a rerun cell has the first sweep's 3 servers and the follow-up's 3."""
    from lib.loop.plan import first_replica_after

    design = llama_design(**NOISY_DESIGN, server_replicas=3)
    assert first_replica_after(design) == 3
    assert first_replica_after(llama_design()) == 0
    assert first_replica_after(dataclasses.replace(design, first_replica=3)) == 6
    assert write_plan(planned(design), tmp_path / "plan")[1] == []
    (experiment,) = run_planned_sweeps(tmp_path / "plan", tmp_path, _run_noisy_servers)
    result, report = tuned(experiment)
    plan_json = experiment / "plan.json"
    plan_json.write_text(measurement_plan(result, report).to_json_text())
    needs, problems = follow_up_needs([plan_json])
    assert needs is not None and needs.more_runs, problems
    follow_design = dataclasses.replace(design, first_replica=first_replica_after(design))
    follow_up, problems = follow_up_plan(follow_design, needs, str(experiment), "followup")
    assert follow_up is not None, problems
    for step in follow_up.steps:
        assert {name.rsplit("=", 1)[1] for name in step.serve_params} == {"3", "4", "5"}
        assert {combo["seed"] for combo in step.serve_params.values()} == {3, 4, 5}
    assert any("start at 3" in note for note in follow_up.notes)
    assert follow_up.design.to_json()["first_replica"] == 3
    assert write_plan(follow_up, tmp_path / "followup")[1] == []
    run_planned_sweeps(tmp_path / "followup", tmp_path, _run_noisy_servers)
    servers = _servers_per_cell(load_experiment(experiment))
    for anchor, k in needs.more_runs:
        assert servers[(anchor, k)] == (3 if anchor in needs.new_anchors else 6), (anchor, k)


def test_a_validation_plan_of_a_replicated_design_replicates_every_arm(tmp_path: Path) -> None:
    """Each arm (dynamic, static K, no speculation) on R servers, named and seeded as the
    tuning's replicas; `check` puts every run in its arm by its speculative_config, so each
    arm at each anchor pools R x --num-runs runs."""
    from lib.loop.check.judge import CheckSettings
    from lib.loop.check.report import check_deployment
    from lib.servers import configuration_of

    plan, problems = validation_plan(
        llama_design(server_replicas=2), _sonnet_result(tmp_path), "results", "validation"
    )
    assert plan is not None, problems
    serve = plan.steps[0].serve_params
    arms = {"dynamic", "static-k1", "static-k3", "static-k7", "no-spec"}
    assert sorted(serve) == sorted(f"{arm}-seed={r}" for arm in arms for r in (0, 1))
    assert all(combo["seed"] in (0, 1) for combo in serve.values())
    assert write_plan(plan, tmp_path / "validate")[1] == []

    def measure(serve: dict[str, Any], bench: dict[str, Any], _: int) -> dict[str, Any]:
        ahead = 1.05 if configuration_of(serve["_benchmark_name"]) == "dynamic" else 1.0
        server = 1 + 0.002 * serve["seed"]  # equal records would read as copied folders
        return {"output_throughput": 100.0 * ahead * server * (1 + 0.001 * bench["seed"])}

    (experiment,) = run_planned_sweeps(tmp_path / "validate", tmp_path, measure)
    report = check_deployment(experiment, CheckSettings())
    assert [p.describe() for p in report.problems if p.severity.value == "error"] == []
    assert set(report.arms["num_runs"].to_list()) == {2 * SweepDesign().num_runs}
    assert set(report.verdicts["verdict"].to_list()) == {"ok"}
