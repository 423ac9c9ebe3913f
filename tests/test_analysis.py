"""lib/analysis.py: the whole analysis the CLI writes and the app shows, in one call."""

from __future__ import annotations

import json
from pathlib import Path

from sweep_builder import WORKED_EXAMPLE, write_grid

from lib.analysis import analyse, metrics_needed
from lib.schedule import Schedule, tune
from lib.settings import Options, Settings
from lib.sweeps import load_experiment

# K=3 doubles K=0 at batch 1 and quarters it at 16: step schedule [[1, 15, 3], [16, 16, 0]],
# interpolated [[1, 2, 3], [3, 16, 0]] (tests/test_switch_points.py).
CROSSING = {(1, 0): [100.0] * 3, (1, 3): [200.0] * 3, (16, 0): [1600.0] * 3, (16, 3): [400.0] * 3}


def test_the_seed_policy_is_the_basis_and_the_report_is_added(tmp_path: Path) -> None:
    sweep = load_experiment(write_grid(tmp_path, WORKED_EXAMPLE))
    analysis = analyse(sweep, Settings())
    seed = tune(sweep, Settings())
    assert analysis.seed_result.schedule == seed.schedule == analysis.result.schedule
    assert analysis.report is not None and analysis.plan is not None
    data = json.loads(analysis.result.to_json_text())
    assert data["decision_policy"]["policy"] == "seed"
    assert all("confidence" in decision for decision in data["batch_decisions"])
    assert "switch_points" in data


def test_options_choose_the_rule_and_the_schedule(tmp_path: Path) -> None:
    sweep = load_experiment(write_grid(tmp_path, CROSSING))
    step = analyse(sweep, Settings()).result
    interpolated = analyse(sweep, Settings(), Options(interpolated_schedule=True)).result
    assert step.schedule == Schedule(((1, 15, 3), (16, 16, 0)))
    assert interpolated.schedule == Schedule(((1, 2, 3), (3, 16, 0)))
    assert json.loads(interpolated.to_json_text())["switch_points"]["schedule_emitted"] == (
        "interpolated"
    )
    confident = analyse(sweep, Settings(), Options(policy="confident")).result
    assert json.loads(confident.to_json_text())["decision_policy"]["policy"] == "confident"


def test_invalid_settings_leave_the_confidence_out_and_say_why(tmp_path: Path) -> None:
    sweep = load_experiment(write_grid(tmp_path, CROSSING))
    analysis = analyse(sweep, Settings(), Options(confidence=2.0))
    assert (analysis.report, analysis.switch_points, analysis.plan) == (None, None, None)
    assert not analysis.result.ok
    assert [p.message for p in analysis.result.errors] == ["--confidence 2.0: expected in (0, 1]"]
    assert analyse(sweep, Settings(relative_tolerance=1.5)).report is None


def test_metrics_needed_are_what_the_policy_reads() -> None:
    assert metrics_needed(Settings()) == ("output_throughput", "failed", "completed", "num_prompts")
    assert metrics_needed(Settings(objective="failed"))[0] == "failed"
    assert len(set(metrics_needed(Settings(objective="failed")))) == 3
