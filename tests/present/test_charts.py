"""The app's charts (lib/charts.py), checked on their Vega-Lite specifications.

Each sweep is written so the verdicts follow from the numbers by hand (MAD = 0 where runs are
identical, so the conservative score is the median); the tests then find those verdicts, the
error bars and the schedule in the chart data, and check the specification is valid Vega-Lite
(``to_dict()`` validates against Altair's schema).
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from pathlib import Path
from typing import Any

import altair as alt
import polars as pl
import pytest
import vl_convert
from paths import SAMPLE_SWEEPS
from sweep_builder import GB200_LIKE, combo_name, record, write_combo, write_grid, write_table

from lib.analysis import Analysis, analyse
from lib.app import context as app_context
from lib.loop.diff import DiffReport
from lib.policy import apply_policy
from lib.present import charts
from lib.schedule import Schedule, TuningResult, tune
from lib.settings import DeploySettings, Options, Settings
from lib.sweeps import load_experiment

ANCHORS = (1, 64)

# Batch size 1: K=3 scores best (151); K=1 (150) is within 1 % of it (150 / 151 = 0.9934), so
# K=1 and K=3 tie and the smaller, K=1, is chosen. K=7's runs 100/200/300 have median 200 and
# MAD 100: relative MAD 0.5 > 0.1, so the noise gate rejects it.
# Batch size 64: K=0 (200) is best by far, nothing ties with it.
RUNS = {
    (1, 0): [100.0, 100.0, 100.0],
    (1, 1): [150.0, 150.0, 150.0],
    (1, 3): [151.0, 151.0, 151.0],
    (1, 7): [100.0, 200.0, 300.0],
    (64, 0): [200.0, 200.0, 200.0],
    (64, 1): [150.0, 150.0, 150.0],
    (64, 3): [100.0, 100.0, 100.0],
    (64, 7): [90.0, 90.0, 90.0],
}
EXPECTED_VERDICTS = {
    (1, 0): "kept",
    (1, 1): "chosen",
    (1, 3): "tied",
    (1, 7): "rejected",
    (64, 0): "chosen",
    (64, 1): "kept",
    (64, 3): "kept",
    (64, 7): "kept",
}

# Batch size 64 has only K=0 and K=3, both too noisy (relative MAD 0.5): both are rejected, it
# gets no K, so there is no schedule.
NO_SCHEDULE_RUNS = {
    (1, 0): [100.0] * 3,
    (1, 3): [150.0] * 3,
    (64, 0): [100.0, 200.0, 300.0],
    (64, 3): [100.0, 200.0, 300.0],
}


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> TuningResult:
    root = write_grid(tmp_path_factory.mktemp("sweep"), RUNS)
    return tune(load_experiment(root), Settings())


def _values(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows embedded in a chart specification."""
    rows = spec["data"]["values"]
    assert isinstance(rows, list)
    return rows


def _layers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The chart's layers with a mark, a nested layer's (the headline's K track) included."""
    inner = spec.get("spec", spec)
    layers = inner["layer"]
    assert isinstance(layers, list)
    return [leaf for layer in layers for leaf in (_layers(layer) if "layer" in layer else [layer])]


def _layer_with_mark(spec: dict[str, Any], mark: str) -> dict[str, Any]:
    (found,) = [layer for layer in _layers(spec) if layer["mark"]["type"] == mark]
    return found


def _rows(built: list[charts.Chart]) -> list[dict[str, Any]]:
    """The rows of several charts together."""
    return [row for chart in built for row in _values(chart.to_dict())]


def test_objective_charts_mark_each_cell_with_its_verdict(result: TuningResult) -> None:
    cells = [row for row in _rows(charts.objective_charts(result)) if row["layer"] == "cell"]
    assert {(row["anchor"], row["k"]): row["verdict"] for row in cells} == EXPECTED_VERDICTS
    # The chosen K in the charts is the one in the decisions.
    chosen = {(row["anchor"], row["k"]) for row in cells if row["verdict"] == "chosen"}
    decisions = result.decisions.select("anchor", "selected_k").rows()
    assert chosen == set(decisions)
    rejected = next(row for row in cells if row["verdict"] == "rejected")
    assert "relative MAD" in rejected["reason"]


def test_objective_charts_are_one_small_chart_per_batch_size(result: TuningResult) -> None:
    built = charts.objective_charts(result)
    specs = [chart.to_dict() for chart in built]
    # One per anchor, in batch-size order, each holding only its own anchor's rows.
    assert [{row["anchor"] for row in _values(spec)} for spec in specs] == [{1}, {64}]
    assert [spec["title"] for spec in specs] == [
        {"text": "batch size 1", "subtitle": "K=1 chosen"},
        {"text": "batch size 64", "subtitle": "K=0 chosen"},
    ]
    for spec in specs:
        # A fixed width that fits a phone, so that the charts wrap to the page.
        assert spec["width"] <= 300 and "facet" not in spec


def test_objective_charts_draw_median_with_mad_error_bars(result: TuningResult) -> None:
    first = charts.objective_charts(result)[0].to_dict()
    cells = {(row["anchor"], row["k"]): row for row in _values(first) if row["layer"] == "cell"}
    # (1, 7): median of 100/200/300 is 200; deviations 100/0/100 have median 100.
    assert (cells[(1, 7)]["median"], cells[(1, 7)]["lo"], cells[(1, 7)]["hi"]) == (200, 100, 300)
    assert (cells[(1, 1)]["lo"], cells[(1, 1)]["hi"]) == (150, 150)
    bars = _layer_with_mark(first, "errorbar")
    assert bars["encoding"]["y"]["field"] == "lo"
    assert bars["encoding"]["y2"]["field"] == "hi"
    # The conservative score (what the policy ranks) is drawn for kept cells only.
    tick = _layer_with_mark(first, "tick")
    assert tick["encoding"]["y"]["field"] == "conservative"
    assert "rejected" in str(tick["transform"])


def test_objective_charts_show_every_run_as_a_faint_point(result: TuningResult) -> None:
    built = charts.objective_charts(result)
    by_cell: dict[tuple[int, int], list[float]] = {}
    for row in _rows(built):
        if row["layer"] == "run":
            by_cell.setdefault((row["anchor"], row["k"]), []).append(row["value"])
    assert {cell: sorted(values) for cell, values in by_cell.items()} == RUNS
    points = _layer_with_mark(built[0].to_dict(), "circle")
    assert points["mark"]["opacity"] < 0.5
    assert "run" in str(points["transform"])


def test_objective_charts_axes_and_legend(result: TuningResult) -> None:
    spec = charts.objective_charts(result)[0].to_dict()
    medians = _layer_with_mark(spec, "point")
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
    assert sizes["datum.verdict === 'chosen'"] == charts.VERDICTS["chosen"][2]
    assert encoding["size"]["value"] == charts.VERDICTS["rejected"][2]
    caption = charts.objective_caption(result)
    assert "1.0 x 1.4826 x MAD" in caption and "batch size (max_concurrency)" in caption


def test_a_batch_size_without_a_kept_cell_has_no_score_layer(tmp_path: Path) -> None:
    # Batch size 64: both cells rejected (NO_SCHEDULE_RUNS), so its chart has no
    # conservative-score tick (an empty layer makes Vega warn "Infinite extent").
    result = tune(load_experiment(write_grid(tmp_path, NO_SCHEDULE_RUNS)), Settings())
    first, second = (chart.to_dict() for chart in charts.objective_charts(result))
    assert "tick" in [layer["mark"]["type"] for layer in _layers(first)]
    assert "tick" not in [layer["mark"]["type"] for layer in _layers(second)]
    assert second["title"]["subtitle"] == "no K chosen"


def test_minimised_objective_has_its_unit_and_direction(tmp_path: Path) -> None:
    runs = {(1, 0): [20.0] * 3, (1, 3): [12.0] * 3}
    result = tune(
        load_experiment(write_grid(tmp_path, runs, objective="median_tpot_ms")),
        Settings(objective="median_tpot_ms", direction="minimize", uncertainty_penalty=2.0),
    )
    (chart,) = charts.objective_charts(result)
    spec = chart.to_dict()
    assert _layer_with_mark(spec, "point")["encoding"]["y"]["title"] == "median_tpot_ms (ms)"
    caption = charts.objective_caption(result)
    assert "minimize" in caption and "median + 2.0 x 1.4826 x MAD" in caption
    chosen = [row["k"] for row in _values(spec) if row.get("verdict") == "chosen"]
    assert chosen == [3]


def test_excluded_runs_stay_visible_with_their_reason(tmp_path: Path) -> None:
    write_grid(tmp_path, {(1, 0): [100.0] * 3})
    healthy = [record(1, 3, run_number=n, output_throughput=120.0) for n in range(3)]
    failed = record(1, 3, run_number=3, output_throughput=50.0, failed=4)
    write_combo(tmp_path / combo_name(1, 3), [*healthy, failed])
    result = tune(load_experiment(tmp_path), Settings())
    runs = [row for row in _rows(charts.objective_charts(result)) if row["layer"] == "run"]
    excluded = [row for row in runs if row["excluded"]]
    assert [(row["k"], row["value"]) for row in excluded] == [(3, 50.0)]
    assert "failed" in excluded[0]["excluded"]


def test_image_grid_puts_the_small_charts_into_one_image(result: TuningResult) -> None:
    built = charts.objective_charts(result)
    grid = charts.image_grid(built, columns=3)
    spec = grid.to_dict()
    assert spec["columns"] == 3
    assert [part["title"] for part in spec["concat"]] == [c.to_dict()["title"] for c in built]
    assert [part["data"]["values"] for part in spec["concat"]] == [
        _values(c.to_dict()) for c in built
    ]
    assert grid.png().startswith(b"\x89PNG\r\n\x1a\n")
    with pytest.raises(ValueError, match="at least one chart"):
        charts.image_grid([])


def test_schedule_chart_is_a_step_line_on_a_log_batch_size_axis(result: TuningResult) -> None:
    # Batch size 1 chose K=1 and 64 chose K=0: [[1, 63, 1], [64, 64, 0]].
    assert result.schedule == Schedule(((1, 63, 1), (64, 64, 0)))
    spec = charts.schedule_chart(result).to_dict()
    rows = _values(spec)
    steps = [(row["batch_size"], row["k"]) for row in rows if row["layer"] == "step"]
    assert steps == [(1, 1), (64, 0), (64, 0)]  # each range's start, then the last range's end
    anchors = [(row["batch_size"], row["k"]) for row in rows if row["layer"] == "anchor"]
    assert anchors == [(1, 1), (64, 0)]
    line = _layer_with_mark(spec, "line")
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
    rows = _values(charts.schedule_chart(result).to_dict())
    assert [row["layer"] for row in rows] == ["anchor"]
    assert (rows[0]["batch_size"], rows[0]["k"]) == (1, 3)


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
    (chart,) = charts.acceptance_charts(result)
    spec = chart.to_dict()
    cells = {row["k"]: row for row in _values(spec) if row["layer"] == "cell"}
    assert set(cells) == {1, 3}  # K=0 drafts nothing, so it has no acceptance
    for k, values in lengths.items():
        median = statistics.median(values)
        mad = statistics.median(abs(v - median) for v in values)
        assert cells[k]["median"] == pytest.approx(median)
        assert (cells[k]["lo"], cells[k]["hi"]) == pytest.approx((median - mad, median + mad))
    assert cells[3]["verdict"] == "chosen"
    title = _layer_with_mark(spec, "point")["encoding"]["y"]["title"]
    assert title == "spec_decode_acceptance_length (tokens per draft)"


def test_no_acceptance_chart_without_an_acceptance_field(tmp_path: Path) -> None:
    runs = {(1, 0): [100.0] * 3, (1, 3): [150.0] * 3}
    result = tune(load_experiment(write_grid(tmp_path, runs)), Settings())
    result_without = tune(
        load_experiment(write_grid(tmp_path / "none", {(1, 0): [100.0] * 3})), Settings()
    )
    assert charts.acceptance_charts(result)  # the builder writes acceptance for K>0
    assert charts.acceptance_charts(result_without) == []
    assert charts.acceptance_caption(result_without) == "The sweep has no acceptance field to plot."


def test_large_cells_show_evenly_spaced_runs_including_the_extremes(tmp_path: Path) -> None:
    values = [1000.0 + n for n in range(201)]
    runs = {(1, 0): values, (1, 3): [500.0] * 3}
    result = tune(load_experiment(write_grid(tmp_path, runs, run_files=False)), Settings())
    most = charts.points_per_cell(result.cells.height)
    assert most == charts.MAX_POINTS_PER_CELL
    spec = charts.objective_charts(result)[0].to_dict()
    shown = sorted(row["value"] for row in _values(spec) if row["layer"] == "run" and row["k"] == 0)
    assert len(shown) == most
    assert (shown[0], shown[-1]) == (values[0], values[-1])
    gaps = {round(b - a) for a, b in itertools.pairwise(shown)}
    assert gaps <= {3, 4}  # 200 / 59 = 3.4: evenly spaced ranks
    assert f"{most} evenly spaced runs" in charts.objective_caption(result)


def test_points_per_cell_keeps_charts_under_altairs_row_limit() -> None:
    for cells in (1, 16, 400, 1600):
        per_cell = charts.points_per_cell(cells)
        assert 2 <= per_cell <= charts.MAX_POINTS_PER_CELL
        assert cells * (per_cell + 1) <= 5000


@pytest.mark.parametrize(
    ("field", "title"),
    [
        ("output_throughput", "output_throughput (output tokens/s)"),
        ("request_goodput", "request_goodput (requests/s)"),
        ("p99_itl_ms", "p99_itl_ms (ms)"),
        ("num_prompts", "num_prompts"),
    ],
)
def test_axis_titles_carry_units(field: str, title: str) -> None:
    assert charts.axis_title(field) == title


# --------------------------------------------------------------------------- switch points

# Identical runs (no noise). K=3's log speed-up over K=0 is log 3 at batch size 1 (300 / 100) and
# log(1/2) at 64 (100 / 200). Drawn as straight lines in log batch size, K=0's advantage over
# K=3 goes from -log 3 to +log 2 and is 0 at 64^(log 3 / (log 3 + log 2)) = 64^(log 3 / log 6)
# = 12.81: the interpolated schedule switches to K=0 at 13, the step schedule at 64.
SWITCH_RUNS = {
    (1, 0): [100.0] * 3,
    (1, 3): [300.0] * 3,
    (64, 0): [200.0] * 3,
    (64, 3): [100.0] * 3,
}


def _analysis(root: Path, runs: dict[tuple[int, int], list[float]], **options: Any) -> Analysis:
    return analyse(
        load_experiment(write_grid(root, runs)),
        Settings(),
        Options(**{"server_cv": 0.0, **options}),
    )


def test_schedule_chart_draws_the_interpolated_schedule_and_its_switch_points(
    tmp_path: Path,
) -> None:
    analysis = _analysis(tmp_path, SWITCH_RUNS)
    assert analysis.result.schedule == Schedule(((1, 63, 3), (64, 64, 0)))
    spec = charts.schedule_chart(analysis.result, analysis.switch_points).to_dict()
    rows = _values(spec)

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
    lines = _layer_with_mark(spec, "line")
    assert lines["encoding"]["color"]["scale"]["domain"] == ["step", "interpolated"]
    assert lines["encoding"]["strokeDash"]["field"] == "line"
    rule = _layer_with_mark(spec, "rule")
    assert rule["encoding"]["x"]["field"] == "batch_size" and "switch" in str(rule["transform"])
    assert "deployed: the step schedule" in str(spec["title"]["subtitle"])
    # The deployed schedule's ranges are written beside it.
    labelled = [(row["line"], row["range"]) for row in rows if row.get("labelled")]
    assert labelled == [("step", "[1, 63]"), ("step", "[64, 64]"), ("step", "end")]
    # With the interpolated schedule deployed, the result carries it and the subtitle says so.
    deployed = _analysis(tmp_path / "interpolated", SWITCH_RUNS, interpolated_schedule=True)
    assert deployed.result.schedule == Schedule(((1, 12, 3), (13, 64, 0)))
    spec = charts.schedule_chart(deployed.result, deployed.switch_points).to_dict()
    assert "deployed: the interpolated schedule" in str(spec["title"]["subtitle"])
    labelled = [(row["line"], row["range"]) for row in _values(spec) if row.get("labelled")]
    assert labelled == [
        ("interpolated", "[1, 12]"),
        ("interpolated", "[13, 64]"),
        ("interpolated", "end"),
    ]
    assert [(r["batch_size"], r["k"]) for r in _values(spec) if r["layer"] == "step"] == [
        (1, 3),
        (64, 0),
        (64, 0),
    ]


# --------------------------------------------------------------------------- confidence

# Batch size 1: identical runs, so the pooled noise is 0 and P(eps-good) is exactly 0 or 1: K=3
# (151) is the best, K=1 (150 / 151 = 0.9934 >= 0.99) is within the 1 % tolerance, K=0 is not.
# Both rules pick K=1 (the smaller eps-good K). Batch size 64: K=0 and K=1 have the same centre
# (about 200) with a few % of noise, so neither reaches P >= 0.9 (unresolved, both contenders);
# the seed picks K=1 (MAD 5 against K=0's 10 gives it the better conservative score); K=3 (100)
# is far behind.
CONFIDENCE_RUNS = {
    (1, 0): [100.0] * 3,
    (1, 1): [150.0] * 3,
    (1, 3): [151.0] * 3,
    (64, 0): [200.0, 210.0, 190.0],
    (64, 1): [205.0, 195.0, 200.0],
    (64, 3): [100.0] * 3,
}


def test_confidence_charts_show_p_eps_good_per_k_with_the_unresolved_anchors_marked(
    tmp_path: Path,
) -> None:
    analysis = _analysis(tmp_path, CONFIDENCE_RUNS)
    assert analysis.report is not None
    specs = [c.to_dict() for c in charts.confidence_charts(analysis.result, analysis.report)]
    rows = [row for spec in specs for row in _values(spec)]
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
        {"text": "batch size 64: unresolved", "color": charts.VERDICTS["chosen"][0]},
    ]
    thresholds = [
        [row["confidence"] for row in _values(s) if row["layer"] == "threshold"] for s in specs
    ]
    assert thresholds == [[0.9], [0.9]]
    bar_layer = _layer_with_mark(specs[0], "bar")
    assert bar_layer["encoding"]["y"]["scale"]["domain"] == [0, 1]
    assert bar_layer["encoding"]["color"]["scale"]["domain"] == list(charts.CONFIDENCE_ROLES)
    caption = charts.confidence_caption(analysis.result, analysis.report)
    assert "1 of 2 anchor(s) unresolved" in caption


def test_confidence_charts_mark_unknown_probabilities(tmp_path: Path) -> None:
    # One run per cell: no noise estimate, so every P(eps-good) is unknown (null), drawn as "?".
    runs = {(1, 0): [100.0], (1, 3): [150.0]}
    root = write_grid(tmp_path, runs)
    analysis = analyse(load_experiment(root), Settings(min_runs=1))
    assert analysis.report is not None
    (chart,) = charts.confidence_charts(analysis.result, analysis.report)
    spec = chart.to_dict()
    cells = [row for row in _values(spec) if row["layer"] == "cell"]
    assert [row["p_eps_good"] for row in cells] == [None, None]
    unknown = _layer_with_mark(spec, "text")
    assert unknown["mark"]["text"] == "?" and "null" in str(unknown["transform"])
    # Without a known P there is no bar to draw: no bar layer (it would be empty).
    assert "bar" not in [layer["mark"]["type"] for layer in _layers(spec)]


def test_no_confidence_charts_without_a_cell_with_enough_runs(tmp_path: Path) -> None:
    # One run per cell at --min-runs 3: no cell the confident rule may pick.
    runs = {(1, 0): [100.0], (1, 3): [150.0]}
    analysis = analyse(load_experiment(write_grid(tmp_path, runs)), Settings())
    assert analysis.report is not None and analysis.report.cells.is_empty()
    assert charts.confidence_charts(analysis.result, analysis.report) == []
    assert "No cell has enough runs" in charts.confidence_caption(analysis.result, analysis.report)


def test_rules_chart_draws_both_rules_and_marks_where_they_differ(tmp_path: Path) -> None:
    # Batch size 1: K=3's runs 140/160/180 have median 160 and MAD 20, so the seed's score is
    # 160 - 1.4826 x 20 = 130.3, below K=1's 150: the seed picks K=1. K=3's geometric mean (159)
    # is 6 % above K=1's, more than the tolerance: the confident rule leans to K=3. Batch size
    # 64: K=0 wins by far under both rules.
    runs = {
        (1, 0): [100.0] * 3,
        (1, 1): [150.0] * 3,
        (1, 3): [140.0, 160.0, 180.0],
        (64, 0): [200.0] * 3,
        (64, 1): [100.0] * 3,
        (64, 3): [90.0] * 3,
    }
    analysis = _analysis(tmp_path, runs)
    assert analysis.report is not None
    seed = analysis.seed_result
    confident = apply_policy(seed, analysis.report, "confident")
    assert seed.schedule == Schedule(((1, 63, 1), (64, 64, 0)))
    assert confident.schedule == Schedule(((1, 63, 3), (64, 64, 0)))
    spec = charts.rules_chart(seed, confident).to_dict()
    rows = _values(spec)
    steps = {
        rule: [
            (row["batch_size"], row["k"])
            for row in rows
            if row["layer"] == "step" and row["line"] == rule
        ]
        for rule in charts.RULES
    }
    assert steps == {"seed": [(1, 1), (64, 0), (64, 0)], "confident": [(1, 3), (64, 0), (64, 0)]}
    picks = {
        (row["line"], row["batch_size"]): (row["k"], row["differs"])
        for row in rows
        if row["layer"] == "pick"
    }
    assert picks == {
        ("seed", 1): (1, True),
        ("confident", 1): (3, True),
        ("seed", 64): (0, False),
        ("confident", 64): (0, False),
    }
    assert "1 of 2 anchor(s) pick a different K" in str(spec["title"])
    band = _layer_with_mark(spec, "rule")
    assert "differs" in str(band["transform"])


def test_specifications_are_valid_vega_lite(result: TuningResult, tmp_path: Path) -> None:
    # Altair validates a specification against the Vega-Lite schema when it reads it back.
    acceptance = charts.acceptance_charts(result)[0]
    analysis = _analysis(tmp_path, CONFIDENCE_RUNS)
    assert analysis.report is not None and analysis.switch_points is not None
    confident = apply_policy(analysis.seed_result, analysis.report, "confident")
    objective = charts.objective_charts(result)
    for chart, kind in (
        (charts.headline_chart(analysis.result, analysis.report), alt.LayerChart),
        (objective[0], alt.LayerChart),
        (charts.image_grid(objective), alt.ConcatChart),
        (acceptance, alt.LayerChart),
        (charts.schedule_chart(result), alt.LayerChart),
        (charts.schedule_chart(analysis.result, analysis.switch_points), alt.LayerChart),
        (charts.confidence_charts(analysis.result, analysis.report)[0], alt.LayerChart),
        (charts.rules_chart(analysis.seed_result, confident), alt.LayerChart),
    ):
        spec = chart.to_dict()
        assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/v6")
        assert isinstance(kind.from_dict(spec, validate=True), kind)  # raises when invalid
        mimetype, text = chart._mime_()
        assert (mimetype, json.loads(text)) == (charts.MIMETYPE, spec)


def test_images_render_offline(result: TuningResult) -> None:
    chart = charts.schedule_chart(result)
    png = chart.png(scale=1)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    svg = chart.svg().decode()
    assert svg.startswith("<svg") and "num_speculative_tokens_per_batch_size" in svg
    # On screen it follows its container; as an image it is IMAGE_WIDTH wide (plus its axes).
    assert chart.to_dict()["width"] == "container"
    width = int.from_bytes(png[16:20], "big")
    assert charts.IMAGE_WIDTH < width < charts.IMAGE_WIDTH + 200


def test_comparison_chart_has_both_schedules_and_their_anchors(sample_diff: DiffReport) -> None:
    report = sample_diff
    chart = charts.comparison_chart(report)
    rows = chart.to_dict()["data"]["values"]
    steps = {
        side: [
            (r["batch_size"], r["k"]) for r in rows if r["side"] == side and r["layer"] == "step"
        ]
        for side in ("A", "B")
    }
    # A [[1, 63, 7], [64, 256, 0]]: starts of both ranges, then the end of the last.
    assert steps["A"] == [(1, 7), (64, 0), (256, 0)]
    assert steps["B"] == [(1, 0), (256, 0)]
    anchors = [
        (r["batch_size"], r["k"]) for r in rows if r["side"] == "A" and r["layer"] == "anchor"
    ]
    assert anchors == [(1, 7), (64, 0), (128, 0), (256, 0)]
    assert "<svg" in chart.svg().decode()


# --------------------------------------------------------------------------- headline


def _headline_rows(spec: dict[str, Any], layer: str) -> dict[tuple[int, int], dict[str, Any]]:
    return {(row["batch_size"], row["k"]): row for row in _values(spec) if row["layer"] == layer}


def test_headline_speed_ups_are_each_median_against_k0(result: TuningResult) -> None:
    spec = charts.headline_chart(result, None).to_dict()
    medians = {cell: statistics.median(values) for cell, values in RUNS.items()}
    expected = {
        (anchor, k): round((median / medians[(anchor, 0)] - 1) * 100, 2)
        for (anchor, k), median in medians.items()
        if k
    }
    speed_ups = _headline_rows(spec, "speedup")
    rejected = _headline_rows(spec, "rejected")
    # (1, 7) was rejected by the noise gate: a grey cross, never on a line or a band.
    assert set(rejected) == {(1, 7)} and set(speed_ups) == set(expected) - {(1, 7)}
    assert {cell: row["speedup"] for cell, row in speed_ups.items()} == {
        cell: expected[cell] for cell in speed_ups
    }
    assert speed_ups[(1, 1)]["speedup"] == 50.0 and speed_ups[(64, 3)]["speedup"] == -50.0
    assert "relative MAD" in rejected[(1, 7)]["reason"]
    # Identical runs: no MAD, so the band is the line itself.
    assert all(row["lo"] == row["speedup"] == row["hi"] for row in speed_ups.values())
    # The noise gate's error means no schedule: no pick is drawn. With the gate relaxed, the
    # chosen schedule: K=1 (+50 %) at batch size 1, K=0 (the baseline, 0 %) at 64.
    assert not result.ok and _headline_rows(spec, "chosen") == {}
    relaxed = tune(result.sweep, Settings(max_objective_relative_mad=1.0))
    chosen = _headline_rows(charts.headline_chart(relaxed, None).to_dict(), "chosen")
    assert {cell: row["speedup"] for cell, row in chosen.items()} == {(1, 1): 50.0, (64, 0): 0.0}
    baselines = [(row["batch_size"], row["speedup"]) for row in _values(spec)]
    assert [
        b for b, layer in zip(baselines, _values(spec), strict=True) if layer["layer"] == "baseline"
    ] == [(1, 0.0), (64, 0.0)]


def test_headline_band_is_the_ratio_times_one_plus_minus_the_relative_mad(tmp_path: Path) -> None:
    # K=3: median 100, MAD 10 (relative 0.1), against K=0's 50: ratio 2, so +100 % with the
    # band 2 x 0.9 - 1 = +80 % to 2 x 1.1 - 1 = +120 %.
    runs = {(1, 0): [50.0] * 3, (1, 3): [90.0, 100.0, 110.0]}
    result = tune(load_experiment(write_grid(tmp_path, runs)), Settings())
    spec = charts.headline_chart(result, None).to_dict()
    row = _headline_rows(spec, "speedup")[(1, 3)]
    assert (row["lo"], row["speedup"], row["hi"]) == pytest.approx((80.0, 100.0, 120.0))
    band = _layer_with_mark(spec, "area")
    assert (band["encoding"]["y"]["field"], band["encoding"]["y2"]["field"]) == ("lo", "hi")


def test_headline_lines_stop_at_a_cliff_and_start_again_past_it(tmp_path: Path) -> None:
    """GB200_LIKE (tests/test_cliffs.py): K=5 falls off a cliff from batch 4 to 8. Its line is
    two pieces (segment 0 up to 4, 1 from 8 on); the other Ks' lines are one; the band is
    broken the same way, and the subtitle says what a gap is. Without the cliff, one piece
    each and no such line."""

    def drawn(table: dict[int, tuple[float, ...]], name: str) -> dict[str, Any]:
        sweep = load_experiment(write_table(tmp_path / name, table))
        return charts.headline_chart(tune(sweep, Settings()), None).to_dict()

    spec = drawn(GB200_LIKE, "cliff")
    segments = {cell: row["segment"] for cell, row in _headline_rows(spec, "speedup").items()}
    assert {b: segment for (b, k), segment in segments.items() if k == 5} == {
        1: 0,
        2: 0,
        4: 0,
        8: 1,
        16: 1,
    }
    assert {segment for (_, k), segment in segments.items() if k != 5} == {0}
    # The K lines (coloured by K) and the band: each broken by segment.
    (line,) = [
        layer
        for layer in _layers(spec)
        if layer["mark"]["type"] == "line"
        and layer["encoding"].get("color", {}).get("field") == "k"
    ]
    band = _layer_with_mark(spec, "area")
    assert line["encoding"]["detail"]["field"] == band["encoding"]["detail"]["field"] == "segment"
    assert any("a gap in a line: a cliff" in text for text in spec["title"]["subtitle"])
    calm = {b: (*values[:3], values[2] * 1.05) for b, values in GB200_LIKE.items()}
    spec = drawn(calm, "calm")
    assert {row["segment"] for row in _headline_rows(spec, "speedup").values()} == {0}
    assert not any("a gap" in text for text in spec["title"]["subtitle"])


def test_headline_of_a_minimised_objective_is_the_rate_speed_up(tmp_path: Path) -> None:
    # TPOT 20 ms at K=0: 16 ms is 20 / 16 - 1 = +25 % (better), 25 ms is 20 / 25 - 1 = -20 %.
    runs = {(1, 0): [20.0] * 3, (1, 1): [25.0] * 3, (1, 3): [16.0] * 3}
    result = tune(
        load_experiment(write_grid(tmp_path, runs, objective="median_tpot_ms")),
        Settings(objective="median_tpot_ms", direction="minimize"),
    )
    spec = charts.headline_chart(result, None).to_dict()
    speed_ups = _headline_rows(spec, "speedup")
    assert {cell: row["speedup"] for cell, row in speed_ups.items()} == {
        (1, 1): -20.0,
        (1, 3): 25.0,
    }
    assert list(_headline_rows(spec, "chosen")) == [(1, 3)]
    assert "K=0's median / K's - 1" in str(spec["title"]["subtitle"])


def test_headline_says_where_there_is_no_k0_baseline(tmp_path: Path) -> None:
    # Batch size 64 has no K=0 cell: no speed-up is drawn there, a "no K=0" rule says why.
    runs = {(1, 0): [100.0] * 3, (1, 3): [150.0] * 3, (64, 1): [90.0] * 3, (64, 3): [80.0] * 3}
    result = tune(load_experiment(write_grid(tmp_path, runs)), Settings())
    spec = charts.headline_chart(result, None).to_dict()
    drawn = {row["batch_size"] for row in _values(spec) if row["layer"] in ("speedup", "chosen")}
    assert drawn == {1}
    (marked,) = [row for row in _values(spec) if row["layer"] == "no_baseline"]
    assert marked["batch_size"] == 64
    assert "no K=0" in str(spec["title"]["subtitle"])
    texts = [
        layer["mark"].get("text") for layer in _layers(spec) if layer["mark"]["type"] == "text"
    ]
    assert "no K=0" in texts


def test_headline_without_any_baseline_only_says_so(tmp_path: Path) -> None:
    runs = {(1, 1): [100.0] * 3, (1, 3): [150.0] * 3}
    result = tune(load_experiment(write_grid(tmp_path, runs)), Settings())
    spec = charts.headline_chart(result, None).to_dict()
    assert [row["notice"] for row in _values(spec)] == [
        "No kept K=0 cell at any batch size: no speed-up over K=0 to show."
    ]
    assert "scale" not in json.dumps(spec)  # no axis, so no empty (log) domain to warn about


def test_headline_marks_unresolved_anchors(tmp_path: Path) -> None:
    analysis = _analysis(tmp_path, CONFIDENCE_RUNS)
    assert analysis.report is not None
    spec = charts.headline_chart(analysis.result, analysis.report).to_dict()
    doubts = [row for row in _values(spec) if row["layer"] == "doubt"]
    # Batch size 64 is unresolved (see CONFIDENCE_RUNS); batch size 1 is not.
    assert [(row["batch_size"], row["doubt"], row["symbol"]) for row in doubts] == [
        (64, "unresolved", "?")
    ]
    assert _headline_rows(spec, "chosen")[(64, 1)]["doubt"] == "unresolved"
    assert "?: unresolved" in str(spec["title"]["subtitle"])
    # Without a report nothing is marked (and no empty layer is left behind).
    plain = charts.headline_chart(analysis.result, None).to_dict()
    assert not [row for row in _values(plain) if row["layer"] == "doubt"]
    assert '"field": "symbol"' not in json.dumps(_layers(plain))


def test_headline_marks_a_pick_below_the_confidence(tmp_path: Path) -> None:
    # Batch size 1 (9 runs per cell): K=3's runs 150/160/170 have median 160 and MAD 10, so
    # the seed's score is 160 - 1.4826 x 10 = 145.2 < K=1's 150 and the seed exports K=1. But
    # K=3 is about 6.5 % better on median with little pooled noise: K=3 reaches the confidence
    # (the anchor is resolved) while K=1, outside the 1 % tolerance, has P(eps-good) near 0.
    runs = {
        (1, 0): [100.0] * 9,
        (1, 1): [150.0] * 9,
        (1, 3): [150.0, 160.0, 170.0] * 3,
        (64, 0): [200.0] * 9,
        (64, 1): [100.0] * 9,
        (64, 3): [90.0] * 9,
    }
    analysis = _analysis(tmp_path, runs)
    assert analysis.result.ok
    report = analysis.report
    assert report is not None
    anchor = report.anchors.filter(pl.col("anchor") == 1).row(0, named=True)
    p_pick = report.cells.filter((pl.col("anchor") == 1) & (pl.col("k") == 1))["p_eps_good"][0]
    assert analysis.result.schedule is not None and analysis.result.schedule.k_at(1) == 1
    assert anchor["status"] == "resolved" and p_pick < report.settings.confidence
    spec = charts.headline_chart(analysis.result, report).to_dict()
    doubts = [row for row in _values(spec) if row["layer"] == "doubt"]
    assert [(row["batch_size"], row["symbol"]) for row in doubts] == [(1, "!")]
    assert doubts[0]["p_pick"] == pytest.approx(p_pick, abs=1e-4)


def test_headline_follows_the_container_on_a_log_batch_size_axis(result: TuningResult) -> None:
    spec = charts.headline_chart(result, None).to_dict()
    assert spec["width"] == "container" and 200 <= spec["height"] <= 360
    for layer in _layers(spec):
        x = layer["encoding"]["x"]
        assert (x["field"], x["scale"]["type"]) == ("batch_size", "log")
    assert min(row["batch_size"] for row in _values(spec)) >= 1  # a log domain never holds 0


# --------------------------------------------------------------------------- labels


def test_overlapping_labels_go_to_separate_rows() -> None:
    # On a 300 px log axis from 1 to 256 (8 doublings, 37.5 px each), a 10-character label
    # (69 px) at 1 reaches past 2 and 2.5 (37.5 and 49.6 px) but not past 8 (112.5 px).
    texts = ["K=3 -> K=1"] * 4
    assert charts.label_rows([1, 2, 8, 3], texts, (1, 256)) == [0, 1, 0, 2]
    # Far apart, they share the first row.
    assert charts.label_rows([1, 16, 256], texts[:3], (1, 256)) == [0, 0, 0]
    assert charts.label_rows([], [], (1, 1)) == []


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
    analysis = _analysis(tmp_path, runs)
    assert analysis.switch_points is not None
    spec = charts.schedule_chart(analysis.result, analysis.switch_points).to_dict()
    switches = [row for row in _values(spec) if row["layer"] == "switch"]
    assert [row["change"] for row in switches] == ["K=7 -> K=3", "K=3 -> K=0"]
    assert [row["label_row"] for row in switches] == [0, 1]
    # Each row of labels is its own text layer, one label height lower than the last.
    label_layers = [
        layer
        for layer in _layers(spec)
        if layer["mark"]["type"] == "text" and "switch" in str(layer["transform"])
    ]
    assert [layer["encoding"]["y"]["value"] for layer in label_layers] == [2, 15]


# --------------------------------------------------------------------------- every chart

# Sweeps that leave some layer of some chart without rows: no schedule (64 too noisy), one run
# per cell (rejected at --min-runs 3), no K=0 anywhere, rules that differ.
EDGE_SWEEPS: dict[str, tuple[dict[tuple[int, int], list[float]], Settings]] = {
    "worked": (RUNS, Settings()),
    "no schedule": (NO_SCHEDULE_RUNS, Settings()),
    "single run": ({(1, 0): [100.0], (1, 3): [150.0], (8, 0): [90.0], (8, 3): [80.0]}, Settings()),
    "single run allowed": (
        {(1, 0): [100.0], (1, 3): [150.0], (8, 0): [90.0], (8, 3): [80.0]},
        Settings(min_runs=1),
    ),
    "no baseline": ({(1, 1): [100.0] * 3, (1, 3): [150.0] * 3}, Settings()),
    "switches": (SWITCH_RUNS, Settings()),
    "confidence": (CONFIDENCE_RUNS, Settings()),
}


def _every_chart(analysis: Analysis) -> dict[str, charts.Chart]:
    """Every chart the app draws for ``analysis``, by name."""
    result, report = analysis.result, analysis.report
    built = {
        "headline": charts.headline_chart(result, report),
        "headline without a report": charts.headline_chart(result, None),
        "schedule": charts.schedule_chart(result, analysis.switch_points),
        "schedule without switch points": charts.schedule_chart(result),
    }
    built |= {f"objective {i}": c for i, c in enumerate(charts.objective_charts(result))}
    built |= {f"acceptance {i}": c for i, c in enumerate(charts.acceptance_charts(result))}
    if report is not None:
        built |= {
            f"confidence {i}": c for i, c in enumerate(charts.confidence_charts(result, report))
        }
        confident = apply_policy(analysis.seed_result, report, "confident")
        built["rules"] = charts.rules_chart(analysis.seed_result, confident)
    return built


def _edge_charts(root: Path) -> dict[str, charts.Chart]:
    built: dict[str, charts.Chart] = {}
    for name, (runs, settings) in EDGE_SWEEPS.items():
        sweep = load_experiment(write_grid(root / name.replace(" ", "-"), runs))
        analysis = analyse(sweep, settings, Options())
        built |= {f"{name}: {chart}": c for chart, c in _every_chart(analysis).items()}
    for sample in sorted(SAMPLE_SWEEPS.iterdir()):
        if sample.is_dir():
            analysis = analyse(load_experiment(sample), Settings(), Options())
            built |= {f"{sample.name}: {chart}": c for chart, c in _every_chart(analysis).items()}
    return built


@pytest.fixture(scope="module")
def every_chart(tmp_path_factory: pytest.TempPathFactory) -> dict[str, charts.Chart]:
    return _edge_charts(tmp_path_factory.mktemp("edges"))


def _empty_marks(scenegraph: dict[str, Any]) -> list[str]:
    """The marks of a rendered scenegraph that drew nothing in any panel: a layer whose filter
    kept no row (Vega warns "Infinite extent" for its fields in a browser)."""
    drawn: dict[str, int] = {}

    def walk(node: dict[str, Any]) -> None:
        items = node.get("items", [])
        name = node.get("name") or ""
        if node.get("role") == "mark" or name.endswith("_pathgroup"):
            drawn[name] = drawn.get(name, 0) + len(items)
        for item in items:
            if isinstance(item, dict):
                walk(item)

    walk(scenegraph["scenegraph"])
    return sorted(name for name, count in drawn.items() if not count)


def test_no_chart_has_an_empty_layer(every_chart: dict[str, charts.Chart]) -> None:
    # A chart without rows draws no panel (so no empty mark to find below), yet Vega warns
    # about every field of its scales: a chart with nothing to draw says so in a row instead.
    assert [name for name, chart in every_chart.items() if not _values(chart.to_dict())] == []
    empty = {
        name: marks
        for name, chart in every_chart.items()
        if (marks := _empty_marks(vl_convert.vegalite_to_scenegraph(chart.to_json())))
    }
    assert empty == {}


def test_no_chart_makes_vega_lite_warn(
    every_chart: dict[str, charts.Chart], capfd: pytest.CaptureFixture[str]
) -> None:
    # vl-convert prints Vega-Lite's compile warnings (legend conflicts, size of a discrete
    # field, a dropped channel) to the process's stderr.
    warned = {}
    for name, chart in every_chart.items():
        vl_convert.vegalite_to_vega(chart.to_json(), show_warnings=True)
        printed = capfd.readouterr()
        if printed.err or printed.out:
            warned[name] = printed.err + printed.out
    assert warned == {}


def _colours(node: Any) -> set[str]:
    """Every colour written into a specification as ``#rrggbb``."""
    if isinstance(node, dict):
        return set().union(*(_colours(value) for value in node.values()))
    if isinstance(node, list):
        return set().union(*(_colours(value) for value in node))
    found = set()
    if isinstance(node, str):
        found = {word.strip("'") for word in node.split() if word.strip("'").startswith("#")}
    return {colour for colour in found if len(colour) == 7}


def _luminance(colour: str) -> float:
    """WCAG relative luminance of ``#rrggbb``."""
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def test_charts_leave_text_and_background_to_the_theme(
    every_chart: dict[str, charts.Chart],
) -> None:
    # marimo draws charts with Vega's dark theme in dark mode (background #333, light text):
    # a chart must not fix its background or config, and every colour it does fix must stand
    # out from white and from #333 alike (black ink would vanish in dark mode, white in light).
    dark = _luminance("#333333")
    for name, chart in every_chart.items():
        spec = chart.to_dict()
        assert "background" not in spec, name
        assert set(spec.get("config", {})) <= {"view"}, name
        for colour in _colours(spec):
            lightness = _luminance(colour)
            against_white = 1.05 / (lightness + 0.05)
            against_dark = (lightness + 0.05) / (dark + 0.05)
            assert min(against_white, against_dark) >= 1.8, (name, colour)


def test_headline_draws_no_pick_while_the_result_has_errors(tmp_path: Path) -> None:
    # (8, 3) has one run, fewer than 3: an error; the lines still show what was measured,
    # but no diamond claims a pick.
    cells = {
        (1, 0): [100.0] * 3,
        (1, 3): [150.0] * 3,
        (8, 0): [400.0] * 3,
        (8, 3): [300.0],
    }
    folder = write_grid(tmp_path, cells)
    result = tune(load_experiment(folder), Settings())
    assert not result.ok
    spec = charts.headline_chart(result, None).to_dict()
    layers = {row.get("layer") for row in _values(spec)}
    assert "chosen" not in layers and "doubt" not in layers
    assert "no pick shown: the result has errors" in spec["title"]["subtitle"][1]
    fine = tune(load_experiment(folder), Settings(min_runs=1))
    assert fine.ok
    assert "chosen" in {
        row.get("layer") for row in _values(charts.headline_chart(fine, None).to_dict())
    }


def _grid_cell(batch: int, prompt: int, k: int | None, status: str = "resolved") -> dict[str, Any]:
    return {
        "batch_size": batch,
        "prompt_tokens": prompt,
        "context_tokens": prompt + 64,
        "selected_k": k,
        "status": status,
        "p_eps_good": None if k is None else 0.95,
    }


def test_context_heatmap_marks_unresolved_undecided_and_losing_cells() -> None:
    grid = [
        _grid_cell(1, 512, 3),
        _grid_cell(1, 8192, 5, "unresolved"),
        _grid_cell(64, 512, 0),
        _grid_cell(64, 8192, None, "undecided"),
    ]
    # Batch-only loses 0.5 % at (1, 8192), within a 1 % tolerance, and 23 % at (64, 512).
    losses = {(1, 512): 0.0, (1, 8192): 0.5, (64, 512): 23.0, (64, 8192): None}
    chart = charts.context_heatmap(grid, {1: 3, 64: 3}, losses, 1.0)
    spec = chart.to_dict()
    alt.LayerChart.from_dict(spec)  # valid Vega-Lite
    rows = spec["data"]["values"]
    labels = {
        (r["batch_size"], r["prompt_tokens"]): r["label"] for r in rows if r["layer"] == "cell"
    }
    assert labels == {(1, 512): "3", (1, 8192): "5?", (64, 512): "0", (64, 8192): "-"}
    losing = [(r["batch_size"], r["prompt_tokens"]) for r in rows if r["layer"] == "loses"]
    assert losing == [(64, 512)]
    assert "loses more than 1%" in " ".join(spec["title"]["subtitle"])
    # The grey rect of an undecided cell is drawn only when there is one.
    assert len(spec["layer"]) == 4


def test_context_heatmap_without_losses_leaves_the_outline_layer_out() -> None:
    grid = [_grid_cell(1, 512, 3), _grid_cell(1, 8192, 3)]
    spec = charts.context_heatmap(grid, {1: 3}, {(1, 512): 0.0, (1, 8192): 0.0}, 1.0).to_dict()
    # Cells and their labels only: an empty layer would make Vega warn about its extent.
    assert len(spec["layer"]) == 2
    assert "red outline" not in " ".join(spec["title"]["subtitle"])
    assert charts.context_heatmap(grid, {1: 3}, {}, 1.0).png()[:4] == b"\x89PNG"


# --------------------------------------------------------------------------- deployed K track

#: sonnet-like's measured anchors (every K of 0, 1, 3, 7 kept at each, data/sample_sweeps).
SONNET_ANCHORS = (1, 64, 128, 256)


def _deployed(deploy: DeploySettings, options: Options) -> tuple[TuningResult, dict[str, Any]]:
    shown = app_context.analyse_sweep(
        load_experiment(SAMPLE_SWEEPS / "sonnet-like"), Settings(), options, None, None, deploy
    )
    result = shown.analysis.result
    return result, charts.headline_chart(result, shown.analysis.report).to_dict()


def _track_at(rows: list[dict[str, Any]], batch_size: int) -> tuple[int, str]:
    """The K and status the K track draws at ``batch_size`` (exactly one stretch holds it)."""
    (row,) = [r for r in rows if r["layer"] == "deployed" and r["lo"] <= batch_size <= r["hi"]]
    return row["k"], row["status"]


@pytest.mark.parametrize(
    ("deploy", "options", "expected"),
    [
        # README's quick start: the step schedule switches at the upper anchor 64.
        (DeploySettings(), Options(), [[1, 63, 7], [64, 256, 0]]),
        # README's switch points: the curves cross at 21.0, so the interpolated one at 21.
        (DeploySettings(), Options(interpolated_schedule=True), [[1, 20, 7], [21, 256, 0]]),
        # README's Deployment: C=256 caps K'(b) = min(7, floor(256 / b) - 1) from 33 to 63.
        (
            DeploySettings(max_cudagraph_capture_size=256),
            Options(),
            [[1, 32, 7], [33, 36, 6], [37, 42, 5], [43, 51, 4], [52, 63, 3], [64, 256, 0]],
        ),
    ],
    ids=["step", "interpolated", "capped"],
)
def test_headline_k_track_draws_the_deployed_schedule(
    deploy: DeploySettings, options: Options, expected: list[list[int]]
) -> None:
    result, spec = _deployed(deploy, options)
    assert result.schedule is not None and result.schedule.to_json() == expected
    rows = [row for row in _values(spec) if row["layer"] == "deployed"]
    # Stretches of equal K merged give back the schedule's ranges; each is drawn from its
    # first batch size to the next one's (no gap, no overlap), the last to its own end.
    merged: list[list[int]] = []
    for row in rows:
        if merged and merged[-1][2] == row["k"] and merged[-1][1] + 1 == row["lo"]:
            merged[-1][1] = row["hi"]
        else:
            merged.append([row["lo"], row["hi"], row["k"]])
    assert merged == expected
    assert [row["batch_size"] for row in rows] == [row["lo"] for row in rows]
    assert [row["batch_size_end"] for row in rows] == [
        *(row["lo"] for row in rows[1:]),
        rows[-1]["hi"],
    ]
    # A vertical jump at each range start where K changes, from the K before to the one after.
    jumps = [(r["batch_size"], r["k"], r["k_to"]) for r in _values(spec) if r["layer"] == "jump"]
    assert jumps == [
        (lo, before[2], k) for before, (lo, _, k) in itertools.pairwise(expected) if before[2] != k
    ]


@pytest.mark.parametrize(("capture", "interpolated"), [(None, False), (None, True), (256, False)])
def test_headline_k_track_marks_what_was_measured_at_every_batch_size(
    capture: int | None, interpolated: bool
) -> None:
    result, spec = _deployed(
        DeploySettings(max_cudagraph_capture_size=capture),
        Options(interpolated_schedule=interpolated),
    )
    assert result.schedule is not None
    tuned = _deployed(DeploySettings(), Options(interpolated_schedule=interpolated))[0].schedule
    assert tuned is not None
    rows = _values(spec)
    # Every batch size, both sides of each boundary: capped where the cap K'(b) = min(D(b),
    # floor(C / b) - 1) is below the tuned K; measured at an anchor (every K was kept there);
    # not measured everywhere else.
    for batch in range(1, 257):
        cap = tuned.k_at(batch) if capture is None else min(tuned.k_at(batch), capture // batch - 1)
        if cap < tuned.k_at(batch):
            status = "capped, not measured"
        elif batch in SONNET_ANCHORS:
            status = "measured"
        else:
            status = "not measured"
        assert _track_at(rows, batch) == (result.schedule.k_at(batch), status), batch
    legend = {
        status
        for layer in _layers(spec)
        for status in layer["encoding"].get("strokeDash", {}).get("scale", {}).get("domain", [])
    }
    assert "capped, not measured" in legend if capture else "capped, not measured" not in legend
    assert "not measured" in str(spec["title"]["subtitle"])


def test_headline_k_track_is_absent_while_the_result_has_errors(result: TuningResult) -> None:
    # RUNS' noise-gate error: no schedule is written, so none is drawn.
    assert not result.ok
    layers = {row["layer"] for row in _values(charts.headline_chart(result, None).to_dict())}
    assert not layers & {"deployed", "jump"}
