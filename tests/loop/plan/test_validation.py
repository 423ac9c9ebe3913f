"""lib/loop/plan/validation.py: the validation plan: its refusals, its held-out seeds, its
context schedules and replicas, run as vLLM runs them and checked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from plan_inputs import CONTEXT_DESIGN, context_result, sonnet_result
from vllm_sweep import llama_design, run_planned_sweeps

from lib.loop.plan.design import SweepDesign
from lib.loop.plan.validation import validation_plan
from lib.loop.plan.write import write_plan
from lib.schedule import Schedule
from lib.settings import Options


def test_validation_plan_refuses_another_drafter(tmp_path: Path) -> None:
    result = sonnet_result(tmp_path)
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
    plan, problems = validation_plan(llama_design(), sonnet_result(tmp_path), "r", "v", [0, 3])
    assert plan is None
    assert [p.rule for p in problems] == ["invalid-static-ks"]


def test_a_validation_plan_measures_seeds_the_tuning_did_not(tmp_path: Path) -> None:
    """The check's seeds start at the most runs any tuning cell has (its runs used the seeds
    below), so the schedule is checked on prompts it was not chosen on; every arm at an
    anchor gets the same seeds."""
    path = sonnet_result(tmp_path)
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

    result = sonnet_result(tmp_path)
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
    result = context_result(tmp_path)
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

    result = context_result(tmp_path)
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
    result = context_result(tmp_path)
    not_export = tmp_path / "not-export.json"
    not_export.write_text(json.dumps({"format": "vllm", "x": 1}))
    plan, problems = validation_plan(CONTEXT_DESIGN, result, "r", "v", None, not_export)
    assert plan is None and [p.field for p in problems] == ["format"]
    assert "expected the -o file of tune-spec-k export" in problems[0].message
    exported = _exported(tmp_path, result, "vllm-rfc-48944")
    plan, problems = validation_plan(
        CONTEXT_DESIGN, sonnet_result(tmp_path), "r", "v", None, exported
    )
    assert plan is None and "no context_grid" in problems[0].message
    other_field = context_result(tmp_path / "f", lambda d: d["context_axis"].update(field="my_len"))
    plan, problems = validation_plan(CONTEXT_DESIGN, other_field, "r", "v", None, exported)
    assert plan is None and problems[0].field == "context_axis.field"


# --------------------------------------------------------------------------- server replicas


def test_a_validation_plan_of_a_replicated_design_replicates_every_arm(tmp_path: Path) -> None:
    """Each arm (dynamic, static K, no speculation) on R servers, named and seeded as the
    tuning's replicas; `check` puts every run in its arm by its speculative_config, so each
    arm at each anchor pools R x --num-runs runs."""
    from lib.loop.check.judge import CheckSettings
    from lib.loop.check.report import check_deployment
    from lib.servers import configuration_of

    plan, problems = validation_plan(
        llama_design(server_replicas=2), sonnet_result(tmp_path), "results", "validation"
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
