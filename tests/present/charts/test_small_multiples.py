"""The small charts per batch size (lib/present/charts/small_multiples.py): objective and
acceptance against K, each cell's verdict, error bars and runs.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from chart_specs import (
    EXPECTED_VERDICTS,
    NO_SCHEDULE_RUNS,
    RUNS,
    chart_rows,
    layer_with_mark,
    mark_layers,
    spec_values,
)
from sweep_builder import combo_name, record, write_combo, write_grid

from lib.present.charts.base import VERDICTS
from lib.present.charts.small_multiples import (
    acceptance_caption,
    acceptance_charts,
    objective_caption,
    objective_charts,
)
from lib.schedule import TuningResult, tune
from lib.settings import Settings
from lib.sweeps import load_experiment


def test_objective_charts_mark_each_cell_with_its_verdict(result: TuningResult) -> None:
    cells = [row for row in chart_rows(objective_charts(result)) if row["layer"] == "cell"]
    assert {(row["anchor"], row["k"]): row["verdict"] for row in cells} == EXPECTED_VERDICTS
    # The chosen K in the charts is the one in the decisions.
    chosen = {(row["anchor"], row["k"]) for row in cells if row["verdict"] == "chosen"}
    decisions = result.decisions.select("anchor", "selected_k").rows()
    assert chosen == set(decisions)
    rejected = next(row for row in cells if row["verdict"] == "rejected")
    assert "relative MAD" in rejected["reason"]


def test_objective_charts_are_one_small_chart_per_batch_size(result: TuningResult) -> None:
    built = objective_charts(result)
    specs = [chart.to_dict() for chart in built]
    # One per anchor, in batch-size order, each holding only its own anchor's rows.
    assert [{row["anchor"] for row in spec_values(spec)} for spec in specs] == [{1}, {64}]
    assert [spec["title"] for spec in specs] == [
        {"text": "batch size 1", "subtitle": "K=1 chosen"},
        {"text": "batch size 64", "subtitle": "K=0 chosen"},
    ]
    for spec in specs:
        # A fixed width that fits a phone, so that the charts wrap to the page.
        assert spec["width"] <= 300 and "facet" not in spec


def test_objective_charts_draw_median_with_mad_error_bars(result: TuningResult) -> None:
    first = objective_charts(result)[0].to_dict()
    cells = {(row["anchor"], row["k"]): row for row in spec_values(first) if row["layer"] == "cell"}
    # (1, 7): median of 100/200/300 is 200; deviations 100/0/100 have median 100.
    assert (cells[(1, 7)]["median"], cells[(1, 7)]["lo"], cells[(1, 7)]["hi"]) == (200, 100, 300)
    assert (cells[(1, 1)]["lo"], cells[(1, 1)]["hi"]) == (150, 150)
    bars = layer_with_mark(first, "errorbar")
    assert bars["encoding"]["y"]["field"] == "lo"
    assert bars["encoding"]["y2"]["field"] == "hi"
    # The conservative score (what the policy ranks) is drawn for kept cells only.
    tick = layer_with_mark(first, "tick")
    assert tick["encoding"]["y"]["field"] == "conservative"
    assert "rejected" in str(tick["transform"])


def test_objective_charts_show_every_run_as_a_faint_point(result: TuningResult) -> None:
    built = objective_charts(result)
    by_cell: dict[tuple[int, int], list[float]] = {}
    for row in chart_rows(built):
        if row["layer"] == "run":
            by_cell.setdefault((row["anchor"], row["k"]), []).append(row["value"])
    assert {cell: sorted(values) for cell, values in by_cell.items()} == RUNS
    points = layer_with_mark(built[0].to_dict(), "circle")
    assert points["mark"]["opacity"] < 0.5
    assert "run" in str(points["transform"])


def test_objective_charts_axes_and_legend(result: TuningResult) -> None:
    spec = objective_charts(result)[0].to_dict()
    medians = layer_with_mark(spec, "point")
    encoding = medians["encoding"]
    assert encoding["x"]["field"] == "k"
    assert encoding["x"]["title"] == "K (draft tokens per step)"
    assert encoding["y"]["title"] == "output_throughput (output tokens/s)"
    assert encoding["y"]["scale"]["zero"] is False
    assert encoding["color"]["field"] == "verdict"
    assert encoding["color"]["scale"]["domain"] == ["chosen", "tied", "kept", "rejected"]
    assert encoding["shape"]["scale"]["range"][-1] == "cross"
    # Sizes are fixed values per verdict (no size scale of a nominal field, no size legend).
    sizes = {c["test"]: c["value"] for c in encoding["size"]["condition"]}
    assert sizes["datum.verdict === 'chosen'"] == VERDICTS["chosen"][2]
    assert encoding["size"]["value"] == VERDICTS["rejected"][2]
    caption = objective_caption(result)
    assert "1.0 x 1.4826 x MAD" in caption and "batch size (max_concurrency)" in caption


def test_a_batch_size_without_a_kept_cell_has_no_score_layer(tmp_path: Path) -> None:
    # Batch size 64: both cells rejected (NO_SCHEDULE_RUNS), so its chart has no
    # conservative-score tick (an empty layer makes Vega warn "Infinite extent").
    result = tune(load_experiment(write_grid(tmp_path, NO_SCHEDULE_RUNS)), Settings())
    first, second = (chart.to_dict() for chart in objective_charts(result))
    assert "tick" in [layer["mark"]["type"] for layer in mark_layers(first)]
    assert "tick" not in [layer["mark"]["type"] for layer in mark_layers(second)]
    assert second["title"]["subtitle"] == "no K chosen"


def test_minimised_objective_has_its_unit_and_direction(tmp_path: Path) -> None:
    runs = {(1, 0): [20.0] * 3, (1, 3): [12.0] * 3}
    result = tune(
        load_experiment(write_grid(tmp_path, runs, objective="median_tpot_ms")),
        Settings(objective="median_tpot_ms", direction="minimize", uncertainty_penalty=2.0),
    )
    (chart,) = objective_charts(result)
    spec = chart.to_dict()
    assert layer_with_mark(spec, "point")["encoding"]["y"]["title"] == "median_tpot_ms (ms)"
    caption = objective_caption(result)
    assert "minimize" in caption and "median + 2.0 x 1.4826 x MAD" in caption
    chosen = [row["k"] for row in spec_values(spec) if row.get("verdict") == "chosen"]
    assert chosen == [3]


def test_excluded_runs_stay_visible_with_their_reason(tmp_path: Path) -> None:
    write_grid(tmp_path, {(1, 0): [100.0] * 3})
    healthy = [record(1, 3, run_number=n, output_throughput=120.0) for n in range(3)]
    failed = record(1, 3, run_number=3, output_throughput=50.0, failed=4)
    write_combo(tmp_path / combo_name(1, 3), [*healthy, failed])
    result = tune(load_experiment(tmp_path), Settings())
    runs = [row for row in chart_rows(objective_charts(result)) if row["layer"] == "run"]
    excluded = [row for row in runs if row["excluded"]]
    assert [(row["k"], row["value"]) for row in excluded] == [(3, 50.0)]
    assert "failed" in excluded[0]["excluded"]


def test_acceptance_chart_plots_the_median_acceptance_per_cell(tmp_path: Path) -> None:
    lengths = {1: [1.4, 1.5, 1.9], 3: [2.0, 2.2, 2.3]}
    for k in (0, 1, 3):
        records = [
            record(1, k, run_number=n, output_throughput=100.0 + k)
            | ({"spec_decode_acceptance_length": lengths[k][n]} if k else {})
            for n in range(3)
        ]
        write_combo(tmp_path / combo_name(1, k), records)
    result = tune(load_experiment(tmp_path), Settings())
    (chart,) = acceptance_charts(result)
    spec = chart.to_dict()
    cells = {row["k"]: row for row in spec_values(spec) if row["layer"] == "cell"}
    assert set(cells) == {1, 3}  # K=0 drafts nothing, so it has no acceptance
    for k, values in lengths.items():
        median = statistics.median(values)
        mad = statistics.median(abs(v - median) for v in values)
        assert cells[k]["median"] == pytest.approx(median)
        assert (cells[k]["lo"], cells[k]["hi"]) == pytest.approx((median - mad, median + mad))
    assert cells[3]["verdict"] == "chosen"
    title = layer_with_mark(spec, "point")["encoding"]["y"]["title"]
    assert title == "spec_decode_acceptance_length (tokens per draft)"


def test_no_acceptance_chart_without_an_acceptance_field(tmp_path: Path) -> None:
    runs = {(1, 0): [100.0] * 3, (1, 3): [150.0] * 3}
    result = tune(load_experiment(write_grid(tmp_path, runs)), Settings())
    result_without = tune(
        load_experiment(write_grid(tmp_path / "none", {(1, 0): [100.0] * 3})), Settings()
    )
    assert acceptance_charts(result)  # the builder writes acceptance for K>0
    assert acceptance_charts(result_without) == []
    assert acceptance_caption(result_without) == "The sweep has no acceptance field to plot."
