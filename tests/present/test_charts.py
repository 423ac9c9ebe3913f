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
import pytest
from sweep_builder import combo_name, record, write_combo, write_grid

from lib.analysis import Analysis, analyse
from lib.confidence import apply_policy
from lib.loop.diff import DiffReport
from lib.present import charts
from lib.schedule import Schedule, TuningResult, tune
from lib.settings import Options, Settings
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
    inner = spec.get("spec", spec)
    layers = inner["layer"]
    assert isinstance(layers, list)
    return layers


def _layer_with_mark(spec: dict[str, Any], mark: str) -> dict[str, Any]:
    (found,) = [layer for layer in _layers(spec) if layer["mark"]["type"] == mark]
    return found


def test_objective_chart_marks_each_cell_with_its_verdict(result: TuningResult) -> None:
    spec = charts.objective_chart(result).to_dict()
    cells = [row for row in _values(spec) if row["layer"] == "cell"]
    assert {(row["anchor"], row["k"]): row["verdict"] for row in cells} == EXPECTED_VERDICTS
    # The chosen K in the chart is the one in the decisions.
    chosen = {(row["anchor"], row["k"]) for row in cells if row["verdict"] == "chosen"}
    decisions = result.decisions.select("anchor", "selected_k").rows()
    assert chosen == set(decisions)
    rejected = next(row for row in cells if row["verdict"] == "rejected")
    assert "relative MAD" in rejected["reason"]


def test_objective_chart_draws_median_with_mad_error_bars(result: TuningResult) -> None:
    spec = charts.objective_chart(result).to_dict()
    cells = {(row["anchor"], row["k"]): row for row in _values(spec) if row["layer"] == "cell"}
    # (1, 7): median of 100/200/300 is 200; deviations 100/0/100 have median 100.
    assert (cells[(1, 7)]["median"], cells[(1, 7)]["lo"], cells[(1, 7)]["hi"]) == (200, 100, 300)
    assert (cells[(1, 1)]["lo"], cells[(1, 1)]["hi"]) == (150, 150)
    bars = _layer_with_mark(spec, "errorbar")
    assert bars["encoding"]["y"]["field"] == "lo"
    assert bars["encoding"]["y2"]["field"] == "hi"
    # The conservative score (what the policy ranks) is drawn for kept cells only.
    tick = _layer_with_mark(spec, "tick")
    assert tick["encoding"]["y"]["field"] == "conservative"
    assert "rejected" in str(tick["transform"])


def test_objective_chart_shows_every_run_as_a_faint_point(result: TuningResult) -> None:
    spec = charts.objective_chart(result).to_dict()
    runs = [row for row in _values(spec) if row["layer"] == "run"]
    by_cell: dict[tuple[int, int], list[float]] = {}
    for row in runs:
        by_cell.setdefault((row["anchor"], row["k"]), []).append(row["value"])
    assert {cell: sorted(values) for cell, values in by_cell.items()} == RUNS
    points = _layer_with_mark(spec, "circle")
    assert points["mark"]["opacity"] < 0.5
    assert "run" in str(points["transform"])


def test_objective_chart_axes_facets_and_legend(result: TuningResult) -> None:
    spec = charts.objective_chart(result).to_dict()
    assert spec["facet"]["field"] == "anchor"
    assert spec["facet"]["title"] == "batch size (max_concurrency)"
    assert spec["resolve"]["scale"]["y"] == "independent"
    medians = _layer_with_mark(spec, "point")
    encoding = medians["encoding"]
    assert encoding["x"]["field"] == "k"
    assert encoding["x"]["title"] == "K (draft tokens per step)"
    assert encoding["y"]["title"] == "output_throughput (output tokens/s)"
    assert encoding["y"]["scale"]["zero"] is False
    assert encoding["color"]["field"] == "verdict"
    assert encoding["color"]["scale"]["domain"] == ["chosen", "tied", "kept", "rejected"]
    assert encoding["shape"]["scale"]["range"][-1] == "cross"
    assert "1.0 x 1.4826 x MAD" in str(spec["title"])


def test_minimised_objective_has_its_unit_and_direction(tmp_path: Path) -> None:
    runs = {(1, 0): [20.0] * 3, (1, 3): [12.0] * 3}
    result = tune(
        load_experiment(write_grid(tmp_path, runs, objective="median_tpot_ms")),
        Settings(objective="median_tpot_ms", direction="minimize", uncertainty_penalty=2.0),
    )
    spec = charts.objective_chart(result).to_dict()
    assert _layer_with_mark(spec, "point")["encoding"]["y"]["title"] == "median_tpot_ms (ms)"
    assert "minimize" in str(spec["title"])
    assert "median + 2.0 x 1.4826 x MAD" in str(spec["title"])
    chosen = [row["k"] for row in _values(spec) if row.get("verdict") == "chosen"]
    assert chosen == [3]


def test_excluded_runs_stay_visible_with_their_reason(tmp_path: Path) -> None:
    write_grid(tmp_path, {(1, 0): [100.0] * 3})
    healthy = [record(1, 3, run_number=n, output_throughput=120.0) for n in range(3)]
    failed = record(1, 3, run_number=3, output_throughput=50.0, failed=4)
    write_combo(tmp_path / combo_name(1, 3), [*healthy, failed])
    result = tune(load_experiment(tmp_path), Settings())
    runs = [
        row for row in _values(charts.objective_chart(result).to_dict()) if row["layer"] == "run"
    ]
    excluded = [row for row in runs if row["excluded"]]
    assert [(row["k"], row["value"]) for row in excluded] == [(3, 50.0)]
    assert "failed" in excluded[0]["excluded"]


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
    # Batch size 64 has only K=0 and K=3, both too noisy: it gets no K, so there is no schedule.
    runs = {
        (1, 0): [100.0] * 3,
        (1, 3): [150.0] * 3,
        (64, 0): [100.0, 200.0, 300.0],
        (64, 3): [100.0, 200.0, 300.0],
    }
    result = tune(load_experiment(write_grid(tmp_path, runs)), Settings())
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
    chart = charts.acceptance_chart(result)
    assert chart is not None
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
    assert charts.acceptance_chart(result) is not None  # the builder writes acceptance for K>0
    assert charts.acceptance_chart(result_without) is None


def test_large_cells_show_evenly_spaced_runs_including_the_extremes(tmp_path: Path) -> None:
    values = [1000.0 + n for n in range(201)]
    runs = {(1, 0): values, (1, 3): [500.0] * 3}
    result = tune(load_experiment(write_grid(tmp_path, runs, run_files=False)), Settings())
    most = charts.points_per_cell(result.cells.height)
    assert most == charts.MAX_POINTS_PER_CELL
    spec = charts.objective_chart(result).to_dict()
    shown = sorted(row["value"] for row in _values(spec) if row["layer"] == "run" and row["k"] == 0)
    assert len(shown) == most
    assert (shown[0], shown[-1]) == (values[0], values[-1])
    gaps = {round(b - a) for a, b in itertools.pairwise(shown)}
    assert gaps <= {3, 4}  # 200 / 59 = 3.4: evenly spaced ranks
    assert f"{most} evenly spaced runs" in str(spec["title"])


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
    return analyse(load_experiment(write_grid(root, runs)), Settings(), Options(**options))


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


def test_confidence_chart_shows_p_eps_good_per_k_with_the_unresolved_anchors_marked(
    tmp_path: Path,
) -> None:
    analysis = _analysis(tmp_path, CONFIDENCE_RUNS)
    assert analysis.report is not None
    spec = charts.confidence_chart(analysis.result, analysis.report).to_dict()
    rows = _values(spec)
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
    assert {row["panel"] for row in rows} == {"1: resolved", "64: unresolved"}
    thresholds = [row for row in rows if row["layer"] == "anchor"]
    assert [(row["anchor"], row["confidence"]) for row in thresholds] == [(1, 0.9), (64, 0.9)]
    # Panels are ordered by batch size, and unresolved ones get a red title.
    assert spec["facet"]["sort"] == {"field": "anchor", "op": "min"}
    assert "unresolved" in str(spec["facet"]["header"]["labelColor"])
    bar_layer = _layer_with_mark(spec, "bar")
    assert bar_layer["encoding"]["y"]["scale"]["domain"] == [0, 1]
    assert bar_layer["encoding"]["color"]["scale"]["domain"] == list(charts.CONFIDENCE_ROLES)
    assert "1 of 2 anchor(s) unresolved" in str(spec["title"]["subtitle"])


def test_confidence_chart_marks_unknown_probabilities(tmp_path: Path) -> None:
    # One run per cell: no noise estimate, so every P(eps-good) is unknown (null), drawn as "?".
    runs = {(1, 0): [100.0], (1, 3): [150.0]}
    root = write_grid(tmp_path, runs)
    analysis = analyse(load_experiment(root), Settings(min_runs=1))
    assert analysis.report is not None
    spec = charts.confidence_chart(analysis.result, analysis.report).to_dict()
    cells = [row for row in _values(spec) if row["layer"] == "cell"]
    assert [row["p_eps_good"] for row in cells] == [None, None]
    unknown = _layer_with_mark(spec, "text")
    assert unknown["mark"]["text"] == "?" and "null" in str(unknown["transform"])


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
    acceptance = charts.acceptance_chart(result)
    assert acceptance is not None
    analysis = _analysis(tmp_path, CONFIDENCE_RUNS)
    assert analysis.report is not None and analysis.switch_points is not None
    confident = apply_policy(analysis.seed_result, analysis.report, "confident")
    for chart, kind in (
        (charts.objective_chart(result), alt.FacetChart),
        (acceptance, alt.FacetChart),
        (charts.schedule_chart(result), alt.LayerChart),
        (charts.schedule_chart(analysis.result, analysis.switch_points), alt.LayerChart),
        (charts.confidence_chart(analysis.result, analysis.report), alt.FacetChart),
        (charts.rules_chart(analysis.seed_result, confident), alt.LayerChart),
    ):
        spec = chart.to_dict()
        assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/v6")
        assert isinstance(kind.from_dict(spec, validate=True), kind)  # raises when invalid
        mimetype, text = chart._mime_()
        assert (mimetype, json.loads(text)) == (charts.MIMETYPE, spec)


def test_images_render_offline(result: TuningResult) -> None:
    chart = charts.schedule_chart(result)
    assert chart.png().startswith(b"\x89PNG\r\n\x1a\n")
    svg = chart.svg().decode()
    assert svg.startswith("<svg") and "num_speculative_tokens_per_batch_size" in svg


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
