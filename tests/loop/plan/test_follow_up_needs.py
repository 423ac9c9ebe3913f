"""lib/loop/plan/follow_up_needs.py: what a follow-up must measure, read from a tuning result
and its measurement plan, and the inputs refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from plan_inputs import context_result, noisy_result
from sweep_builder import write_grid

from lib.analysis import analyse
from lib.deploy.result_file import result_text
from lib.loop.plan.follow_up_needs import first_experiment, follow_up_needs
from lib.settings import Options, Settings
from lib.sweeps import load_experiment


def test_follow_up_from_the_result_alone_reruns_contenders(tmp_path: Path) -> None:
    path, _, report = noisy_result(tmp_path)
    needs, problems = follow_up_needs([path])
    assert needs is not None, problems
    assert needs.result_file == str(path)
    unresolved = report.anchors.filter(report.anchors["status"] == "unresolved").to_dicts()
    expected_cells = {(row["anchor"], k) for row in unresolved for k in row["contenders"]}
    assert set(needs.more_runs) == expected_cells
    assert all(runs >= 1 for runs in needs.more_runs.values())
    assert any("--plan-json" in note for note in needs.notes)


def test_follow_up_measures_the_capture_boundaries_of_the_result(tmp_path: Path) -> None:
    path, result, _ = noisy_result(tmp_path)
    data = json.loads(result_text(result))
    # What tune writes when K=5 would run past C from batch 86 (lib/deploy/tuning.py).
    data["deployment"] = {
        "anchors_to_measure": [{"batch_size": 86, "ks": [4, 5], "reason": "boundary"}]
    }
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


def test_a_grid_read_from_another_field_is_refused(tmp_path: Path) -> None:
    path = context_result(tmp_path, lambda d: d["context_axis"].update(field="my_len"))
    needs, problems = follow_up_needs([path])
    assert needs is None and problems[0].field == "context_axis.field"
    assert "'my_len'" in problems[0].message


def test_a_damaged_grid_is_refused_not_planned_as_batch_only(tmp_path: Path) -> None:
    def damage(data: dict[str, Any]) -> None:
        data["context_grid"][0]["prompt_tokens"] = "512"

    needs, problems = follow_up_needs([context_result(tmp_path, damage)])
    assert needs is None
    assert problems and problems[0].field is not None and "context_grid[0]" in problems[0].field


def test_the_first_experiment_is_found_from_the_result_s_input_files(tmp_path: Path) -> None:
    """The nearest folder at or above the result's that holds every input summary file: the
    experiment itself for a result inside it or in a folder below it; none for a result
    written elsewhere (then the follow-up's results cannot be placed)."""
    path, result, _ = noisy_result(tmp_path)
    experiment = tmp_path / "tuning"
    text = result_text(result)
    inside, below = experiment / "r.json", experiment / "results" / "deep" / "r.json"
    below.parent.mkdir(parents=True)
    for where in (inside, below):
        where.write_text(text)
        needs, problems = follow_up_needs([where])
        assert needs is not None, problems
        assert needs.experiment_dir == str(experiment)
    needs, _ = follow_up_needs([path])  # tmp_path/result.json, beside the experiment
    assert needs is not None and needs.experiment_dir is None
    inputs = json.loads(text)["input_summary_files"]
    assert first_experiment(inside, inputs) == experiment
    # One input missing from the experiment: not it (nor any folder above).
    assert first_experiment(inside, [*inputs, "SERVE--gone/summary.json"]) is None
    for damaged in ([], "SERVE/summary.json", [3], ["/abs/summary.json"], None):
        if damaged is not None:
            assert first_experiment(inside, damaged) is None


def test_a_measurement_plan_alone_names_its_folder_where_that_holds_combos(
    tmp_path: Path,
) -> None:
    experiment = tmp_path / "tuning"
    noisy_result(tmp_path)
    assert first_experiment(experiment / "plan.json", None) == experiment
    assert first_experiment(tmp_path / "plan.json", None) is None


def test_follow_up_from_the_result_alone_measures_the_k_a_bracket_left_open(
    tmp_path: Path,
) -> None:
    # K=0, 2, 5 at batch 1 and 64 (3 runs each), the design's K 0-5: at 1 the values rise
    # (K=5 best), so K=1 is ruled out and K=3 open; at 64 they fall, so K=3 is ruled out and
    # K=1 open. The result alone (no measurement plan) asks for the open two, 3 runs each (as
    # many as the sweep's median cell).
    cells = {
        (1, 0): [60.0] * 3,
        (1, 2): [80.0] * 3,
        (1, 5): [100.0] * 3,
        (64, 0): [100.0] * 3,
        (64, 2): [80.0] * 3,
        (64, 5): [60.0] * 3,
    }
    folder = write_grid(tmp_path / "sweep", cells)
    result = analyse(load_experiment(folder), Settings(design_ks=(0, 1, 2, 3, 5)), Options()).result
    path = tmp_path / "result.json"
    path.write_text(result_text(result))
    needs, problems = follow_up_needs([path])
    assert needs is not None, problems
    assert {cell: runs for cell, runs in needs.more_runs.items() if cell[1] in (1, 3)} == {
        (1, 3): 3,
        (64, 1): 3,
    }
