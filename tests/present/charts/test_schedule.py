"""The schedule chart (lib/present/charts/schedule.py): the step line, the interpolated schedule
and its switch points, labels that do not overlap.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from chart_specs import (
    NO_SCHEDULE_RUNS,
    SWITCH_RUNS,
    analysis_of,
    layer_with_mark,
    mark_layers,
    spec_values,
)
from sweep_builder import write_grid

from lib.present.charts.schedule import schedule_chart
from lib.schedule import Schedule, TuningResult, tune
from lib.settings import Settings
from lib.sweeps import load_experiment


def test_schedule_chart_is_a_step_line_on_a_log_batch_size_axis(result: TuningResult) -> None:
    # Batch size 1 chose K=1 and 64 chose K=0: [[1, 63, 1], [64, 64, 0]].
    assert result.schedule == Schedule(((1, 63, 1), (64, 64, 0)))
    spec = schedule_chart(result).to_dict()
    rows = spec_values(spec)
    steps = [(row["batch_size"], row["k"]) for row in rows if row["layer"] == "step"]
    assert steps == [(1, 1), (64, 0), (64, 0)]  # each range's start, then the last range's end
    anchors = [(row["batch_size"], row["k"]) for row in rows if row["layer"] == "anchor"]
    assert anchors == [(1, 1), (64, 0)]
    line = layer_with_mark(spec, "line")
    assert line["mark"]["interpolate"] == "step-after"
    assert line["encoding"]["x"]["scale"]["type"] == "log"
    assert line["encoding"]["x"]["title"] == "batch size (max_concurrency), log scale"
    assert line["encoding"]["y"]["title"] == "K (draft tokens per step)"


def test_schedule_chart_without_a_schedule_still_marks_the_decided_anchors(
    tmp_path: Path,
) -> None:
    # Batch size 64 gets no K (NO_SCHEDULE_RUNS), so there is no schedule.
    result = tune(load_experiment(write_grid(tmp_path, NO_SCHEDULE_RUNS)), Settings())
    assert result.schedule is None
    rows = spec_values(schedule_chart(result).to_dict())
    assert [row["layer"] for row in rows] == ["anchor"]
    assert (rows[0]["batch_size"], rows[0]["k"]) == (1, 3)


def test_schedule_chart_draws_the_interpolated_schedule_and_its_switch_points(
    tmp_path: Path,
) -> None:
    analysis = analysis_of(tmp_path, SWITCH_RUNS)
    assert analysis.result.schedule == Schedule(((1, 63, 3), (64, 64, 0)))
    spec = schedule_chart(analysis.result, analysis.switch_points).to_dict()
    rows = spec_values(spec)

    def line(layer: str) -> list[tuple[int, int]]:
        return [(row["batch_size"], row["k"]) for row in rows if row["layer"] == layer]

    assert line("step") == [(1, 3), (64, 0), (64, 0)]
    assert line("interpolated") == [(1, 3), (13, 0), (64, 0)]
    (switch,) = [row for row in rows if row["layer"] == "switch"]
    crossover = 64 ** (math.log(3) / math.log(6))
    assert switch["crossover"] == pytest.approx(crossover, abs=0.05)
    assert (switch["batch_size"], switch["step_switch_at"]) == (13, 64)
    assert switch["change"] == "K=3 -> K=0"
    # One line layer draws both schedules, told apart by colour and dash.
    lines = layer_with_mark(spec, "line")
    assert lines["encoding"]["color"]["scale"]["domain"] == ["step", "interpolated"]
    assert lines["encoding"]["strokeDash"]["field"] == "line"
    rule = layer_with_mark(spec, "rule")
    assert rule["encoding"]["x"]["field"] == "batch_size" and "switch" in str(rule["transform"])
    assert "deployed: the step schedule" in str(spec["title"]["subtitle"])
    # The deployed schedule's ranges are written beside it.
    labelled = [(row["line"], row["range"]) for row in rows if row.get("labelled")]
    assert labelled == [("step", "[1, 63]"), ("step", "[64, 64]"), ("step", "end")]
    # With the interpolated schedule deployed, the result carries it and the subtitle says so.
    deployed = analysis_of(tmp_path / "interpolated", SWITCH_RUNS, interpolated_schedule=True)
    assert deployed.result.schedule == Schedule(((1, 12, 3), (13, 64, 0)))
    spec = schedule_chart(deployed.result, deployed.switch_points).to_dict()
    assert "deployed: the interpolated schedule" in str(spec["title"]["subtitle"])
    labelled = [(row["line"], row["range"]) for row in spec_values(spec) if row.get("labelled")]
    assert labelled == [
        ("interpolated", "[1, 12]"),
        ("interpolated", "[13, 64]"),
        ("interpolated", "end"),
    ]
    assert [(r["batch_size"], r["k"]) for r in spec_values(spec) if r["layer"] == "step"] == [
        (1, 3),
        (64, 0),
        (64, 0),
    ]


def test_switch_point_labels_do_not_overlap(tmp_path: Path) -> None:
    # Picks K=7, K=3, K=0 at batch sizes 1, 2, 4 (and K=0 at 256): two switches within two
    # doublings of a 1-256 axis, closer than a label is wide, so their labels take two rows.
    runs = {
        (1, 0): [100.0] * 3,
        (1, 3): [150.0] * 3,
        (1, 7): [200.0] * 3,
        (2, 0): [100.0] * 3,
        (2, 3): [150.0] * 3,
        (2, 7): [120.0] * 3,
        (4, 0): [200.0] * 3,
        (4, 3): [150.0] * 3,
        (4, 7): [100.0] * 3,
        (256, 0): [400.0] * 3,
        (256, 3): [200.0] * 3,
        (256, 7): [100.0] * 3,
    }
    analysis = analysis_of(tmp_path, runs)
    assert analysis.switch_points is not None
    spec = schedule_chart(analysis.result, analysis.switch_points).to_dict()
    switches = [row for row in spec_values(spec) if row["layer"] == "switch"]
    assert [row["change"] for row in switches] == ["K=7 -> K=3", "K=3 -> K=0"]
    assert [row["label_row"] for row in switches] == [0, 1]
    # Each row of labels is its own text layer, one label height lower than the last.
    label_layers = [
        layer
        for layer in mark_layers(spec)
        if layer["mark"]["type"] == "text" and "switch" in str(layer["transform"])
    ]
    assert [layer["encoding"]["y"]["value"] for layer in label_layers] == [2, 15]
