"""lib.switch: switch points between anchors, the interpolated schedule and its expected gain.

Runs within a cell are identical, so each cell's mean log objective is the log of its value and
every expected number follows from the values by hand (derivations in the comments).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from sweep_builder import write_grid

from lib.cli.common import EXIT_OK
from lib.cli.main import main
from lib.confidence import apply_policy, assess
from lib.present.text import switch_point_lines
from lib.schedule import Schedule, tune
from lib.settings import Settings
from lib.sweeps import load_experiment
from lib.switch_points import CURVE_SCHEMA, SWITCH_SCHEMA, SwitchPoints, find_switch_points

# K=3 doubles K=0 at batch 1 and quarters it at batch 16. Log gain of K=3 over K=0:
# +log 2 at 1, -log 4 = -2 log 2 at 16; linear in t = log b / log 16 it is
# log 2 * (1 - 3 t), zero at t = 1/3: the curves cross at b = 16^(1/3) = 2.52, so from
# batch size 3 on K=0 is better. Step schedule: K=3 up to 15. Interpolated: K=3 up to 2.
CROSSING = {(1, 0): [100.0] * 3, (1, 3): [200.0] * 3, (16, 0): [1600.0] * 3, (16, 3): [400.0] * 3}


def _analyse(root: Path, policy: str = "seed", **settings: Any) -> SwitchPoints:
    result = tune(load_experiment(root), Settings(**settings))
    report = assess(result)
    analysis = find_switch_points(apply_policy(result, report, policy), report)  # type: ignore[arg-type]
    assert analysis is not None
    return analysis


def _k3_advantage(b: int) -> float:
    """K=3's log gain over K=0 in CROSSING at batch size b (the straight line above)."""
    return math.log(2) * (1 - 3 * math.log(b) / math.log(16))


def test_switch_moves_to_the_crossover(tmp_path: Path) -> None:
    analysis = _analyse(write_grid(tmp_path, CROSSING))
    assert analysis.step_schedule == Schedule(((1, 15, 3), (16, 16, 0)))
    assert analysis.schedule == Schedule(((1, 2, 3), (3, 16, 0)))
    (switch,) = analysis.switches.to_dicts()
    assert (switch["from_k"], switch["to_k"]) == (3, 0)
    assert switch["crossover"] == pytest.approx(16 ** (1 / 3))
    assert (switch["switch_at"], switch["step_switch_at"]) == (3, 16)
    assert switch["changed_batch_sizes"] == 13  # 3..15 now run K=0
    assert switch["note"] is None
    assert analysis.schedule.violations() == []


def test_expected_gain_comes_from_the_same_lines(tmp_path: Path) -> None:
    analysis = _analyse(write_grid(tmp_path, CROSSING))
    # At 3..15 the interpolated schedule runs K=0 where the step one runs K=3: the gain is
    # exp(-advantage) - 1; elsewhere both agree (0). Averaged over batch sizes 1..16.
    gains = [math.expm1(-_k3_advantage(b)) * 100 for b in range(3, 16)]
    assert analysis.mean_gain_percent == pytest.approx(sum(gains) / 16)
    assert analysis.max_gain_percent == pytest.approx(max(gains))
    (switch,) = analysis.switches.to_dicts()
    assert switch["gain_percent"] == pytest.approx(sum(gains) / len(gains))


def test_curves_interpolate_linearly_in_log_batch_size(tmp_path: Path) -> None:
    analysis = _analyse(write_grid(tmp_path, CROSSING))
    assert analysis.baseline_k == 0
    assert analysis.curves.schema == CURVE_SCHEMA
    assert analysis.switches.schema == SWITCH_SCHEMA
    curve = dict(analysis.curves.filter(pl.col("k") == 3).select("batch_size", "log_gain").rows())
    assert sorted(curve) == list(range(1, 17))
    for b in (1, 4, 7, 16):
        assert curve[b] == pytest.approx(_k3_advantage(b))
    measured = analysis.curves.filter(pl.col("measured"))["batch_size"].unique().sort()
    assert measured.to_list() == [1, 16]
    assert set(analysis.curves.filter(pl.col("k") == 0)["log_gain"].to_list()) == {0.0}


def test_no_earlier_switch_where_the_upper_pick_rests_on_a_tie(tmp_path: Path) -> None:
    # At 16 K=3 (1005) is 0.5 % above K=0 (1000): a tie, so the seed picks K=0 there. The
    # lines never put K=0 above K=3 before 16, so the switch stays at the anchor.
    cells = {(1, 0): [100.0] * 3, (1, 3): [200.0] * 3, (16, 0): [1000.0] * 3, (16, 3): [1005.0] * 3}
    analysis = _analyse(write_grid(tmp_path, cells))
    assert analysis.schedule == analysis.step_schedule == Schedule(((1, 15, 3), (16, 16, 0)))
    (switch,) = analysis.switches.to_dicts()
    assert switch["switch_at"] == 16 and switch["crossover"] is None
    assert "stays at the anchor" in switch["note"]
    assert analysis.mean_gain_percent == 0.0


def test_switch_right_after_a_lower_pick_that_rests_on_a_tie(tmp_path: Path) -> None:
    # At 1 K=3 (100.5) ties K=0 (100), so K=0 is picked; at 16 K=3 doubles K=0. K=3's line is
    # above K=0's over the whole interval: it takes over right after the anchor.
    cells = {(1, 0): [100.0] * 3, (1, 3): [100.5] * 3, (16, 0): [1000.0] * 3, (16, 3): [2000.0] * 3}
    analysis = _analyse(write_grid(tmp_path, cells))
    assert analysis.step_schedule == Schedule(((1, 15, 0), (16, 16, 3)))
    assert analysis.schedule == Schedule(((1, 1, 0), (2, 16, 3)))
    (switch,) = analysis.switches.to_dicts()
    assert "already above" in switch["note"]
    assert analysis.mean_gain_percent > 0


def test_no_switches_when_every_anchor_picks_the_same_k(tmp_path: Path) -> None:
    cells = {(1, 0): [100.0] * 3, (1, 3): [90.0] * 3, (8, 0): [800.0] * 3, (8, 3): [500.0] * 3}
    analysis = _analyse(write_grid(tmp_path, cells))
    assert analysis.switches.is_empty()
    assert analysis.schedule == analysis.step_schedule == Schedule(((1, 8, 0),))
    assert switch_point_lines(analysis) == ["switch points: none (the same K at every anchor)"]


def test_without_k0_the_smallest_k_is_the_baseline(tmp_path: Path) -> None:
    cells = {(1, 1): [100.0] * 3, (1, 3): [200.0] * 3, (16, 1): [1600.0] * 3, (16, 3): [400.0] * 3}
    analysis = _analyse(write_grid(tmp_path, cells))
    # Same lines as CROSSING with K=1 in K=0's place: the envelope does not move.
    assert analysis.baseline_k == 1
    assert analysis.schedule == Schedule(((1, 2, 3), (3, 16, 1)))


def test_minimised_latency_switches_where_throughput_does(tmp_path: Path) -> None:
    latency = {cell: [1000.0 / v for v in values] for cell, values in CROSSING.items()}
    write_grid(tmp_path, latency, objective="mean_tpot_ms")
    analysis = _analyse(tmp_path, objective="mean_tpot_ms", direction="minimize")
    assert analysis.schedule == Schedule(((1, 2, 3), (3, 16, 0)))
    assert analysis.switches["crossover"].item() == pytest.approx(16 ** (1 / 3))


def test_switches_follow_the_confident_picks(tmp_path: Path) -> None:
    analysis = _analyse(write_grid(tmp_path, CROSSING), policy="confident")
    assert analysis.schedule == Schedule(((1, 2, 3), (3, 16, 0)))


def test_cli_emits_the_interpolated_schedule_on_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = write_grid(tmp_path / "sweep", CROSSING)
    step_file, interpolated_file = tmp_path / "step.json", tmp_path / "interpolated.json"
    assert main([str(sweep), "--output-json", str(step_file)]) == EXIT_OK
    step_out = capsys.readouterr().out
    argv = [str(sweep), "--interpolated-schedule", "--output-json", str(interpolated_file)]
    assert main(argv) == EXIT_OK
    interpolated_out = capsys.readouterr().out
    assert json.loads(step_out.splitlines()[0]) == [[1, 15, 3], [16, 16, 0]]
    assert json.loads(interpolated_out.splitlines()[0]) == [[1, 2, 3], [3, 16, 0]]
    step, interpolated = (
        json.loads(step_file.read_text()),
        json.loads(interpolated_file.read_text()),
    )
    assert step["switch_points"]["schedule_emitted"] == "step"
    assert interpolated["switch_points"]["schedule_emitted"] == "interpolated"
    assert interpolated["num_speculative_tokens_per_batch_size"] == [[1, 2, 3], [3, 16, 0]]
    deployed = interpolated["speculative_config"]["num_speculative_tokens_per_batch_size"]
    assert deployed == [[1, 2, 3], [3, 16, 0]]
    assert step["switch_points"]["interpolated_schedule"] == [[1, 2, 3], [3, 16, 0]]
    assert "K=3 -> K=0 between 1 and 16: curves cross at 2.5; switch at 3" in step_out
