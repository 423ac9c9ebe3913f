"""lib/analysis.py: the whole analysis the CLI writes and the app shows, in one call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from paths import BAD_INPUTS, SAMPLE_SWEEPS
from sweep_builder import WORKED_EXAMPLE, write_grid

from lib.analysis import analyse
from lib.deploy.result_file import result_text
from lib.schedule import Schedule, tune
from lib.settings import Options, Settings
from lib.sweeps import load_experiment

SAMPLES = sorted(path for path in SAMPLE_SWEEPS.iterdir() if path.is_dir())
BAD = sorted(path for path in BAD_INPUTS.iterdir() if path.is_dir())

# K=3 doubles K=0 at batch 1 and quarters it at 16: step schedule [[1, 15, 3], [16, 16, 0]],
# interpolated [[1, 2, 3], [3, 16, 0]] (tests/test_switch_points.py).
CROSSING = {(1, 0): [100.0] * 3, (1, 3): [200.0] * 3, (16, 0): [1600.0] * 3, (16, 3): [400.0] * 3}


def test_the_seed_policy_is_the_basis_and_the_report_is_added(tmp_path: Path) -> None:
    sweep = load_experiment(write_grid(tmp_path, WORKED_EXAMPLE))
    analysis = analyse(sweep, Settings())
    seed = tune(sweep, Settings())
    assert analysis.seed_result.schedule == seed.schedule == analysis.result.schedule
    assert analysis.report is not None and analysis.plan is not None
    data = json.loads(result_text(analysis.result))
    assert data["decision_policy"]["policy"] == "seed"
    assert all("confidence" in decision for decision in data["batch_decisions"])
    assert "switch_points" in data


def test_options_choose_the_rule_and_the_schedule(tmp_path: Path) -> None:
    sweep = load_experiment(write_grid(tmp_path, CROSSING))
    step = analyse(sweep, Settings()).result
    interpolated = analyse(sweep, Settings(), Options(interpolated_schedule=True)).result
    assert step.schedule == Schedule(((1, 15, 3), (16, 16, 0)))
    assert interpolated.schedule == Schedule(((1, 2, 3), (3, 16, 0)))
    assert json.loads(result_text(interpolated))["switch_points"]["schedule_emitted"] == (
        "interpolated"
    )
    confident = analyse(sweep, Settings(), Options(policy="confident")).result
    assert json.loads(result_text(confident))["decision_policy"]["policy"] == "confident"


def test_invalid_settings_leave_the_confidence_out_and_say_why(tmp_path: Path) -> None:
    sweep = load_experiment(write_grid(tmp_path, CROSSING))
    analysis = analyse(sweep, Settings(), Options(confidence=2.0))
    assert (analysis.report, analysis.switch_points, analysis.plan) == (None, None, None)
    assert not analysis.result.ok
    assert [p.message for p in analysis.result.errors] == ["--confidence 2.0: expected in (0, 1]"]
    assert analyse(sweep, Settings(relative_tolerance=1.5)).report is None


@pytest.mark.parametrize(
    "settings",
    [
        Settings(),
        Settings(objective="median_tpot_ms", direction="minimize"),
        Settings(acceptance="spec_decode_acceptance_length", max_objective_relative_mad=0.2),
        Settings(objective="request_goodput"),
    ],
    ids=["default", "tpot", "acceptance", "goodput"],
)
@pytest.mark.parametrize("folder", SAMPLES + BAD, ids=lambda path: path.name)
def test_reading_only_the_metrics_read_changes_nothing(folder: Path, settings: Settings) -> None:
    """The CLI loads only ``settings.metrics_read()``: the whole analysis must be the same."""
    for options in (Options(), Options(policy="confident", interpolated_schedule=True)):
        full = analyse(load_experiment(folder), settings, options).result
        part = analyse(load_experiment(folder, metrics=settings.metrics_read()), settings, options)
        assert result_text(part.result) == result_text(full)
        assert part.result.problems == full.problems
