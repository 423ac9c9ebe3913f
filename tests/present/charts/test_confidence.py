"""The P(eps-good) charts (lib/present/charts/confidence.py)."""

from __future__ import annotations

from pathlib import Path

from chart_specs import CONFIDENCE_RUNS, analysis_of, layer_with_mark, mark_layers, spec_values
from sweep_builder import write_grid

from lib.analysis import analyse
from lib.present.charts.base import VERDICTS
from lib.present.charts.confidence import CONFIDENCE_ROLES, confidence_caption, confidence_charts
from lib.settings import Options, Settings
from lib.sweeps import load_experiment


def test_confidence_charts_show_p_eps_good_per_k_with_the_unresolved_anchors_marked(
    tmp_path: Path,
) -> None:
    analysis = analysis_of(tmp_path, CONFIDENCE_RUNS)
    assert analysis.report is not None
    specs = [c.to_dict() for c in confidence_charts(analysis.result, analysis.report)]
    rows = [row for spec in specs for row in spec_values(spec)]
    bars = {(row["anchor"], row["k"]): row for row in rows if row["layer"] == "cell"}
    assert {cell: row["p_eps_good"] for cell, row in bars.items() if cell[0] == 1} == {
        (1, 0): 0.0,
        (1, 1): 1.0,
        (1, 3): 1.0,
    }
    assert {cell: row["role"] for cell, row in bars.items()} == {
        (1, 0): "other",
        (1, 1): "picked",
        (1, 3): "reaches the confidence",
        (64, 0): "contender",
        (64, 1): "picked",
        (64, 3): "other",
    }
    assert all(row["p_eps_good"] < 0.9 for cell, row in bars.items() if cell[0] == 64)
    # One small chart per batch size, in order; the unresolved one has a red title.
    assert [spec["title"] for spec in specs] == [
        {"text": "batch size 1: resolved"},
        {"text": "batch size 64: unresolved", "color": VERDICTS["chosen"][0]},
    ]
    thresholds = [
        [row["confidence"] for row in spec_values(s) if row["layer"] == "threshold"] for s in specs
    ]
    assert thresholds == [[0.9], [0.9]]
    bar_layer = layer_with_mark(specs[0], "bar")
    assert bar_layer["encoding"]["y"]["scale"]["domain"] == [0, 1]
    assert bar_layer["encoding"]["color"]["scale"]["domain"] == list(CONFIDENCE_ROLES)
    caption = confidence_caption(analysis.result, analysis.report)
    assert "1 of 2 anchor(s) unresolved" in caption


def test_confidence_charts_mark_unknown_probabilities(tmp_path: Path) -> None:
    # One run per cell and --run-cv 0 (no run noise assumed): no noise estimate, so every
    # P(eps-good) is unknown (null), drawn as "?".
    runs = {(1, 0): [100.0], (1, 3): [150.0]}
    root = write_grid(tmp_path, runs)
    analysis = analyse(load_experiment(root), Settings(min_runs=1), Options(run_cv=0.0))
    assert analysis.report is not None
    (chart,) = confidence_charts(analysis.result, analysis.report)
    spec = chart.to_dict()
    cells = [row for row in spec_values(spec) if row["layer"] == "cell"]
    assert [row["p_eps_good"] for row in cells] == [None, None]
    unknown = layer_with_mark(spec, "text")
    assert unknown["mark"]["text"] == "?" and "null" in str(unknown["transform"])
    # Without a known P there is no bar to draw: no bar layer (it would be empty).
    assert "bar" not in [layer["mark"]["type"] for layer in mark_layers(spec)]


def test_no_confidence_charts_without_a_cell_with_enough_runs(tmp_path: Path) -> None:
    # One run per cell at --min-runs 3: no cell the confident rule may pick.
    runs = {(1, 0): [100.0], (1, 3): [150.0]}
    analysis = analyse(load_experiment(write_grid(tmp_path, runs)), Settings())
    assert analysis.report is not None and analysis.report.cells.is_empty()
    assert confidence_charts(analysis.result, analysis.report) == []
    assert "No cell has enough runs" in confidence_caption(analysis.result, analysis.report)
