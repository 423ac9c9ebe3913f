"""lib/loop/plan/follow_up.py: the follow-up plan: its engine, its seeds continuing each cell's,
its context cells and its replicas, run and merged with the first sweep."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from plan_inputs import (
    CONTEXT_DESIGN,
    LONG_CONTEXT,
    context_result,
    noisy_result,
    servers_per_cell,
    tuned,
)
from sweep_builder import write_combo
from vllm_sweep import (
    NOISY_DESIGN,
    NOISY_FIRST_RUNS,
    llama_design,
    noisy_first_sweep,
    planned,
    planned_k,
    run_planned_sweeps,
    vllm_record,
    vllm_records_params,
)

from lib.confidence import MIN_RUNS_NEEDED
from lib.deploy.result_file import result_text
from lib.loop.plan.follow_up import first_replica_after, follow_up_plan, follow_up_results_dir
from lib.loop.plan.follow_up_needs import FollowUpNeeds, follow_up_needs
from lib.loop.plan.sweep_plan import SweepPlan
from lib.loop.plan.write import write_plan
from lib.measurement_plan import measurement_plan
from lib.schedule import tune
from lib.settings import Settings
from lib.sweeps import load_experiment


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


def test_follow_up_refuses_a_different_engine(tmp_path: Path) -> None:
    path, _, _ = noisy_result(tmp_path)
    needs, _ = follow_up_needs([path])
    assert needs is not None
    plan, problems = follow_up_plan(llama_design(ks=(0, 1, 3, 7)), needs, "r", "followup")
    assert plan is None
    (problem,) = problems
    assert problem.rule == "follow-up-mismatch"
    assert "set --global-k 3" in problem.message


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
    path, result, _ = noisy_result(tmp_path)
    assert set(result.cells["num_runs"].to_list()) == {3}
    needs, problems = follow_up_needs([path])
    assert needs is not None, problems
    assert set(needs.runs_so_far.values()) == {3}
    plan, problems = follow_up_plan(llama_design(**NOISY_DESIGN), needs, "r", "followup")
    assert plan is not None and plan.steps, problems
    for step in plan.steps:
        assert set(step.seeds().values()) == {tuple(range(3, 3 + step.runs_per_cell))}


# --------------------------------------------------------------------------- context grids


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
    path = context_result(tmp_path)
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
    path = context_result(tmp_path, _unresolve(64, 2048, "unresolved", [0, 3], {"0": 5, "3": 6}))
    plan = _context_plan(path)
    # Each contender has 3 runs (seeds 0-2): K=0 up to 5 (2 more), K=3 up to 6 (3 more); the
    # sweep of a K runs its cells the same number of times, so they go to separate steps.
    assert _benched(plan) == {(64, 2048, 0): [3, 4], (64, 2048, 3): [3, 4, 5]}
    assert "nothing to measure" not in " ".join(plan.notes)


def test_an_undecided_cell_reruns_every_candidate(tmp_path: Path) -> None:
    path = context_result(tmp_path, _unresolve(8, 512, "undecided", [], {}))
    # Every candidate at 3 runs: one more each (the minimum of 3 reached, at least 1 more).
    assert _benched(_context_plan(path)) == {(8, 512, k): [3] for k in (0, 1, 3, 5)}


def test_a_resolved_grid_with_nothing_proposed_has_nothing_to_measure(tmp_path: Path) -> None:
    plan = _context_plan(context_result(tmp_path, lambda d: d.update(context_measurement_plan=[])))
    assert plan.steps == ()
    assert "nothing to measure: every grid cell is resolved" in plan.notes[-1]


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


# --------------------------------------------------------------------------- server replicas


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
    servers = servers_per_cell(load_experiment(experiment))
    for anchor, k in needs.more_runs:
        assert servers[(anchor, k)] == (3 if anchor in needs.new_anchors else 6), (anchor, k)


# --------------------------------------------------------------------------- capture boundaries


def _run_k3_best(serve: dict[str, Any], bench: dict[str, Any], _: int) -> dict[str, Any]:
    """Every K 5 % above the one below it, at every anchor (K=3 wins everywhere), seeds 1 %
    apart."""
    center = 100.0 * bench["max_concurrency"] * (1 + 0.05 * planned_k(serve))
    return {"output_throughput": center * (1 + 0.01 * (bench["seed"] % 3 - 1))}


def test_the_capture_boundaries_are_planned_run_and_tuned_with_the_first_sweep(
    tmp_path: Path,
) -> None:
    """K=3 wins at 1 and 16 under C=32 (every record holds it): [[1, 16, 3]] is capped to K=2
    from 9 (9 x 4 = 36 > 32) and K=1 from 11 (11 x 3 = 33 > 32), so the result asks to measure
    9 at K=[2, 3] and 11 at K=[1, 3]; K=1 and K=2 were never measured (the design's K are 0
    and 3). The follow-up plans them rather than refusing them: 9 and 11 at every K, K=1 and
    K=2 at every anchor; run into the first experiment and tuned again, the merged sweep has
    the same K at every anchor and tunes."""
    from lib.cli.main import main

    design = llama_design(
        ks=(0, 3), anchors=(1, 16), max_num_seqs=16, max_cudagraph_capture_size=32
    )
    assert write_plan(planned(design), tmp_path / "plan")[1] == []
    (experiment,) = run_planned_sweeps(tmp_path / "plan", tmp_path, _run_k3_best)
    result_json = experiment / "result.json"
    assert main([str(experiment), "--output-json", str(result_json)]) == 0
    boundaries = json.loads(result_json.read_text())["deployment"]["anchors_to_measure"]
    assert [(row["batch_size"], row["ks"]) for row in boundaries] == [(9, [2, 3]), (11, [1, 3])]
    needs, problems = follow_up_needs([result_json])
    assert needs is not None, problems
    assert needs.new_ks == (1, 2)
    follow_up, problems = follow_up_plan(design, needs, str(experiment), "followup")
    assert follow_up is not None, problems
    assert follow_up.design.ks == (0, 1, 2, 3)
    assert set(needs.more_runs) == {
        (anchor, k) for anchor in (1, 9, 11, 16) for k in (0, 1, 2, 3)
    } - {(anchor, k) for anchor in (1, 16) for k in (0, 3)}
    assert write_plan(follow_up, tmp_path / "followup")[1] == []
    run_planned_sweeps(tmp_path / "followup", tmp_path, _run_k3_best)
    merged = tmp_path / "merged.json"
    assert main([str(experiment), "--output-json", str(merged)]) == 0
    cells = {
        (candidate["batch_size"], candidate["k"])
        for decision in json.loads(merged.read_text())["batch_decisions"]
        for candidate in decision["candidates"]
    }
    assert cells == {(anchor, k) for anchor in (1, 9, 11, 16) for k in (0, 1, 2, 3)}


def test_a_k_new_to_the_sweep_is_refused_unless_a_capture_boundary_asks_for_it(
    tmp_path: Path,
) -> None:
    """The boundary's capped K is new on purpose; a plan row asking for another new K (K=2,
    never measured, no boundary) is still a mismatch."""
    path, result, _ = noisy_result(tmp_path)
    data = json.loads(result_text(result))
    data["deployment"] = {
        "anchors_to_measure": [{"batch_size": 8, "ks": [1, 3], "reason": "boundary"}]
    }
    path.write_text(json.dumps(data))
    design = llama_design(**NOISY_DESIGN)
    needs, problems = follow_up_needs([path])
    assert needs is not None and needs.new_ks == (1,), problems
    plan, problems = follow_up_plan(design, needs, "r", "followup")
    assert plan is not None, problems
    stray = dataclasses.replace(needs, more_runs={**needs.more_runs, (16, 2): 3})
    plan, problems = follow_up_plan(design, stray, "r", "followup")
    assert plan is None and "K=[2], which the first sweep did not measure" in problems[0].message


def test_the_follow_up_s_results_go_into_the_first_experiment_or_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--results-dir as given; else the first experiment's folder; refused, naming
    --results-dir, where that is unknown, not a folder, or not writable."""
    from lib.loop.plan import follow_up as module

    path, _, _ = noisy_result(tmp_path)
    needs, _ = follow_up_needs([path])
    assert needs is not None and needs.experiment_dir is None
    assert follow_up_results_dir(needs, "given", [str(path)]) == ("given", [])
    found, problems = follow_up_results_dir(needs, None, [str(path)])
    assert found is None and problems[0].rule == "unknown-first-experiment"
    assert problems[0].field == "--results-dir" and problems[0].files == (str(path),)
    experiment = tmp_path / "tuning"
    known = dataclasses.replace(needs, experiment_dir=str(experiment))
    assert follow_up_results_dir(known, None, [str(path)]) == (str(experiment), [])
    for unwritable in (dataclasses.replace(needs, experiment_dir=str(path)), known):
        if unwritable is known:
            monkeypatch.setattr(module.os, "access", lambda *_: False)
        found, problems = follow_up_results_dir(unwritable, None, [str(path)])
        assert found is None and problems[0].rule == "unwritable-first-experiment"
        assert "--experiment-name" in (problems[0].expected or "")


def test_a_context_result_s_capture_boundaries_are_planned_at_every_prompt_length(
    tmp_path: Path,
) -> None:
    """A boundary at batch 16 with K=[2, 3] in a context result (K 0/1/3/5 at 1/8/64/256):
    16 at every K and the new K=2 at every anchor, at every prompt length of the grid."""

    def boundary(data: dict[str, Any]) -> None:
        data["deployment"] = {
            "anchors_to_measure": [{"batch_size": 16, "ks": [2, 3], "reason": "boundary"}]
        }

    path = context_result(tmp_path, boundary)
    needs, problems = follow_up_needs([path])
    assert needs is not None and needs.new_ks == (2,), problems
    planned = _benched(_context_plan(path))
    prompts = {prompt for _, prompt, _ in planned}
    assert {512, 2048, 8192, 32768} <= prompts
    for prompt in prompts:
        for anchor in (1, 8, 16, 64, 256):
            for k in (0, 1, 2, 3, 5):
                if anchor == 16 or k == 2:
                    assert planned[(anchor, prompt, k)] == [0, 1, 2], (anchor, prompt, k)


def test_a_lean_follow_up_runs_each_cell_as_often_as_it_was_asked() -> None:
    """K=3 asks for 1 second run at 16 and 64 and 5 more runs at 128 (a probe cell), K=0 one at
    16. The seed's design runs a K's sweep's every anchor as often as its most demanding one
    (K=3: 5 runs at each of 16, 64, 128: 15); a lean design's follow-up runs each cell as
    asked (1 + 1 + 5 = 7), on the same server starts (one per K). Where a cell's runs go to
    several new server starts, a lean follow-up gives it a sweep of its own, so that the
    second runs of the K's other anchors are not run on each of those servers too."""
    design = llama_design(**NOISY_DESIGN)
    more = {(16, 0): 1, (16, 3): 1, (64, 3): 1, (128, 3): 5}
    so_far = {(16, 0): 1, (16, 3): 1, (64, 3): 1, (128, 3): 3}
    needs = FollowUpNeeds(more, so_far, new_anchors=(), global_k=None, ks=(0, 3), notes=())

    def runs_per_k(plan: SweepPlan | None) -> dict[str, int]:
        assert plan is not None
        runs: dict[str, int] = {}
        for step in plan.steps:
            for name in step.serve_params:
                runs[name] = runs.get(name, 0) + len(step.bench_params)
        return runs

    full, _ = follow_up_plan(design, needs, "r", "f")
    lean, _ = follow_up_plan(dataclasses.replace(design, layout="lean"), needs, "r", "f")
    assert runs_per_k(full) == {"k0": 1, "k3": 15}
    assert runs_per_k(lean) == {"k0": 1, "k3": 7}
    assert lean is not None
    [k3] = [step for step in lean.steps if "k3" in step.serve_params]
    assert k3.seeds() == {16: (1,), 64: (1,), 128: (3, 4, 5, 6, 7)}
    # 6 more runs at 128 on 3 new server starts (2 each): the lean plan's k3 servers run 128
    # only; the other anchors' second runs stay on one server of their own.
    servers = FollowUpNeeds(
        more | {(128, 3): 6}, so_far, (), None, (0, 3), (), new_servers={(128, 3): 3}
    )
    lean, _ = follow_up_plan(dataclasses.replace(design, layout="lean"), servers, "r", "f")
    assert lean is not None
    k3_steps = [step for step in lean.steps if any(n.startswith("k3") for n in step.serve_params)]
    assert sorted((len(s.serve_params), sorted(s.seeds())) for s in k3_steps) == [
        (1, [16, 64]),
        (3, [128]),
    ]
