"""lib/loop/plan.py: the design and its checks, the tuning, follow-up and validation plans, and
the files a plan writes. (What vLLM makes of the files is tests/cli/test_plan.py's.)"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from paths import SAMPLE_SWEEPS
from sweep_builder import write_combo
from vllm_sweep import (
    llama_design,
    noisy_first_sweep,
    planned,
    vllm_read_params,
    vllm_record,
    vllm_records_params,
)

from lib.confidence import ConfidenceReport, ConfidenceSettings, apply_policy, assess
from lib.deploy.result_file import result_text
from lib.loop.plan import (
    RANDOM_TOKENS_NOTE,
    SweepDesign,
    default_anchors,
    design_from,
    follow_up_needs,
    follow_up_plan,
    validation_plan,
    write_plan,
)
from lib.schedule import Schedule, TuningResult, tune
from lib.settings import Settings
from lib.sweeps import load_experiment


def tuned(root: Path) -> tuple[TuningResult, ConfidenceReport]:
    result = tune(load_experiment(root), Settings(max_objective_relative_mad=1.0))
    report = assess(result, ConfidenceSettings())
    return apply_policy(result, report, "seed"), report


def test_a_sweep_of_the_plan_tunes(tmp_path: Path) -> None:
    """Records made the way the sweep makes them from the planned params load and tune, with
    the planned anchors and K and one global K."""
    plan = planned(llama_design(goodput=("tpot:50",)))
    written, problems = write_plan(plan, tmp_path / "plan")
    assert problems == [] and (tmp_path / "plan" / "run.sh") in written
    plan_dir = tmp_path / "plan"
    experiment = tmp_path / "results" / "tuning"
    serve = vllm_read_params(plan_dir / "serve_params.json")
    bench = vllm_read_params(plan_dir / "bench_params.json")
    for serve_item in serve:
        for bench_item in bench:
            k = serve_item["speculative_config"]["num_speculative_tokens_per_batch_size"][0][2]
            records = [
                {
                    **vllm_record(serve_item, bench_item, run),
                    "output_throughput": 100.0 + k + run,
                }
                for run in range(3)
            ]
            name = f"SERVE--{serve_item['_benchmark_name']}-BENCH--{bench_item['_benchmark_name']}"
            write_combo(experiment / name, records)
    result = tune(load_experiment(experiment), Settings())
    assert result.ok, [p.describe() for p in result.problems]
    assert sorted(set(result.cells["anchor"].to_list())) == [1, 64, 128, 256]
    assert sorted(set(result.cells["k"].to_list())) == [0, 1, 3, 7]
    assert result.configured_global_k == 7
    # K=7 has the highest throughput everywhere (100 + K + run).
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


def test_the_real_cpu_sample_was_run_from_this_plan() -> None:
    """The committed real sweep's params are exactly what its script's plan command writes
    (the model path aside, which is the machine's)."""
    sample = SAMPLE_SWEEPS / "real-cpu-tiny-ngram"
    if not (sample / "serve_params.json").is_file():
        pytest.skip(f"{sample} has not been committed yet")
    design = SweepDesign(
        model="MODEL",
        method="ngram",
        speculative_options={"prompt_lookup_max": 4, "prompt_lookup_min": 2},
        ks=(0, 1, 2, 3, 5),
        anchors=(1, 2, 4, 8),
        input_len=64,
        output_len=128,
        num_prompts=48,
    )
    step = planned(design).steps[0]
    assert json.loads((sample / "serve_params.json").read_text()) == step.serve_params
    assert json.loads((sample / "bench_params.json").read_text()) == step.bench_params


def test_the_real_server_info_sample_was_run_from_this_plan() -> None:
    """The real sweep that saved its servers' configs ran the params this plan writes, the
    engine setting (max_num_seqs 4, above the largest anchor) in every combo; each combo
    folder holds the config its server reported, with that max_num_seqs."""
    sample = SAMPLE_SWEEPS / "real-cpu-server-info"
    if not (sample / "serve_params.json").is_file():
        pytest.skip(f"{sample} has not been committed yet")
    design = SweepDesign(
        model="MODEL",
        method="ngram",
        speculative_options={"prompt_lookup_max": 4, "prompt_lookup_min": 2},
        ks=(0, 1, 3),
        anchors=(1, 2),
        max_num_seqs=4,
        input_len=64,
        output_len=128,
        num_prompts=16,
        num_runs=2,
    )
    step = planned(design).steps[0]
    assert json.loads((sample / "serve_params.json").read_text()) == step.serve_params
    assert json.loads((sample / "bench_params.json").read_text()) == step.bench_params
    for combo in sorted(sample.glob("SERVE--*")):
        saved = json.loads((combo / "server_info.json").read_text())
        assert saved["vllm_config"]["scheduler_config"]["max_num_seqs"] == 4, combo.name


def test_run_script_dry_run_without_vllm_prints_every_sweep(tmp_path: Path) -> None:
    """Without `vllm` on PATH, `run.sh --dry-run` prints each step's command as `commands`
    gives it (params beside the script, every extra argument appended) and runs nothing."""
    one = planned(llama_design(serve_args='--served-model-name "it\'s"'))
    (step,) = one.steps
    second = dataclasses.replace(step, name="more", num_runs=5, experiment_name="more")
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
        ({"context_lengths": (512, 0)}, "--context-lengths", "prompt lengths >= 1"),
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
                "reruns": [{"batch_size": 1, "k": 3, "more_runs": 2}],
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
    """A bench combo per (anchor, length) with the length as random_input_len; the servers get
    a --max-model-len for the longest prompt and its output; records made from the params as
    the sweep makes them give the tuner a context axis with the planned lengths."""
    from lib.context import analyse_contexts, find_context_axis
    from lib.settings import ContextSettings

    design = llama_design(
        anchors=(1, 64), ks=(0, 3), context_lengths=(4096, 512), input_len=None, output_len=100
    )
    plan = planned(design)
    step = plan.steps[0]
    assert sorted(step.bench_params) == ["c1-p4096", "c1-p512", "c64-p4096", "c64-p512"]
    assert step.bench_params["c64-p512"]["random_input_len"] == 512
    assert "--max-model-len 4196" in plan.commands("plan")[0]  # 4096 + 100
    assert write_plan(plan, tmp_path / "plan")[1] == []
    serve = vllm_read_params(tmp_path / "plan" / "serve_params.json")
    bench = vllm_read_params(tmp_path / "plan" / "bench_params.json")
    experiment = tmp_path / "results"
    for serve_item in serve:
        k = serve_item["speculative_config"]["num_speculative_tokens_per_batch_size"][0][2]
        for bench_item in bench:
            # K=3 pays except at batch 64 with short prompts.
            short_and_busy = (
                bench_item["max_concurrency"] == 64 and bench_item["random_input_len"] == 512
            )
            value = 100.0 + (-k if short_and_busy else k)
            records = [
                {**vllm_record(serve_item, bench_item, run), "output_throughput": value + run / 10}
                for run in range(3)
            ]
            name = f"SERVE--{serve_item['_benchmark_name']}-BENCH--{bench_item['_benchmark_name']}"
            write_combo(experiment / name, records)
    sweep = load_experiment(experiment)
    axis, problems = find_context_axis(sweep, ContextSettings())
    assert axis is not None and problems == []
    assert axis.field == "random_input_len"
    assert [point.prompt_tokens for point in axis.points] == [512, 4096]
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


def test_repeats_as_seeded_bench_combos_pool_into_one_cell(tmp_path: Path) -> None:
    """A per-repeat ``--seed`` as a bench-params axis (one bench combo per (anchor, seed), each
    run once, as `vllm bench sweep serve` runs a list of combos with --num-runs 1): every
    record holds its ``seed``, and the tuner still pools the repeats of an (anchor, K) into one
    cell (different bench combos of one serve combo are one server), not a new axis."""
    plan = planned(llama_design(anchors=(1, 64), ks=(0, 3)))
    step = plan.steps[0]
    seeds = (0, 1, 2)
    experiment = tmp_path / "e"
    for serve_item in vllm_records_params(step.serve_params):
        k = serve_item["speculative_config"]["num_speculative_tokens_per_batch_size"][0][2]
        for bench_item in vllm_records_params(step.bench_params):
            for seed in seeds:
                bench_seeded = {
                    **bench_item,
                    "_benchmark_name": f"{bench_item['_benchmark_name']}-seed{seed}",
                    "seed": seed,
                }
                record = {
                    **vllm_record(serve_item, bench_seeded, 0),
                    # K=3 wins at 1 (by 50 %), K=0 at 64 (by 20 %), 1 % apart per seed.
                    "output_throughput": (150.0 if k else 100.0)
                    * (1 if bench_item["max_concurrency"] == 1 else (0.8 if k else 1.2))
                    * (1 + 0.01 * seed),
                }
                bench_name = bench_seeded["_benchmark_name"]
                name = f"SERVE--{serve_item['_benchmark_name']}-BENCH--{bench_name}"
                write_combo(experiment / name, [record])
    sweep = load_experiment(experiment)
    assert sorted(set(sweep.runs["seed"].to_list())) == list(seeds)
    result = tune(sweep, Settings())
    assert result.ok, [p.describe() for p in result.problems]
    assert result.cells.height == 4  # 2 anchors x 2 K, the seeds pooled
    assert set(result.cells["num_runs"].to_list()) == {3}
    assert result.schedule == Schedule(((1, 63, 3), (64, 64, 0)))
