"""The headline chart (lib/present/charts/headline.py): speed-ups over K=0, bands, cliffs,
baselines, doubts.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from chart_specs import (
    CONFIDENCE_RUNS,
    RUNS,
    analysis_of,
    layer_with_mark,
    mark_layers,
    spec_values,
)
from sweep_builder import GB200_LIKE, write_grid, write_table

from lib.present.charts.headline import headline_chart
from lib.schedule import TuningResult, tune
from lib.settings import Settings
from lib.sweeps import load_experiment


def _headline_rows(spec: dict[str, Any], layer: str) -> dict[tuple[int, int], dict[str, Any]]:
    return {
        (row["batch_size"], row["k"]): row for row in spec_values(spec) if row["layer"] == layer
    }


def test_headline_speed_ups_are_each_median_against_k0(result: TuningResult) -> None:
    spec = headline_chart(result, None).to_dict()
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
    chosen = _headline_rows(headline_chart(relaxed, None).to_dict(), "chosen")
    assert {cell: row["speedup"] for cell, row in chosen.items()} == {(1, 1): 50.0, (64, 0): 0.0}
    baselines = [(row["batch_size"], row["speedup"]) for row in spec_values(spec)]
    assert [
        b
        for b, layer in zip(baselines, spec_values(spec), strict=True)
        if layer["layer"] == "baseline"
    ] == [(1, 0.0), (64, 0.0)]


def test_headline_band_is_the_ratio_times_one_plus_minus_the_relative_mad(tmp_path: Path) -> None:
    # K=3: median 100, MAD 10 (relative 0.1), against K=0's 50: ratio 2, so +100 % with the
    # band 2 x 0.9 - 1 = +80 % to 2 x 1.1 - 1 = +120 %.
    runs = {(1, 0): [50.0] * 3, (1, 3): [90.0, 100.0, 110.0]}
    result = tune(load_experiment(write_grid(tmp_path, runs)), Settings())
    spec = headline_chart(result, None).to_dict()
    row = _headline_rows(spec, "speedup")[(1, 3)]
    assert (row["lo"], row["speedup"], row["hi"]) == pytest.approx((80.0, 100.0, 120.0))
    band = layer_with_mark(spec, "area")
    assert (band["encoding"]["y"]["field"], band["encoding"]["y2"]["field"]) == ("lo", "hi")


def test_headline_lines_stop_at_a_cliff_and_start_again_past_it(tmp_path: Path) -> None:
    """GB200_LIKE (tests/test_cliffs.py): K=5 falls off a cliff from batch 4 to 8. Its line is
    two pieces (segment 0 up to 4, 1 from 8 on); the other Ks' lines are one; the band is
    broken the same way, and the subtitle says what a gap is. Without the cliff, one piece
    each and no such line."""

    def drawn(table: dict[int, tuple[float, ...]], name: str) -> dict[str, Any]:
        sweep = load_experiment(write_table(tmp_path / name, table))
        return headline_chart(tune(sweep, Settings()), None).to_dict()

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
        for layer in mark_layers(spec)
        if layer["mark"]["type"] == "line"
        and layer["encoding"].get("color", {}).get("field") == "k"
    ]
    band = layer_with_mark(spec, "area")
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
    spec = headline_chart(result, None).to_dict()
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
    spec = headline_chart(result, None).to_dict()
    drawn = {
        row["batch_size"] for row in spec_values(spec) if row["layer"] in ("speedup", "chosen")
    }
    assert drawn == {1}
    (marked,) = [row for row in spec_values(spec) if row["layer"] == "no_baseline"]
    assert marked["batch_size"] == 64
    assert "no K=0" in str(spec["title"]["subtitle"])
    texts = [
        layer["mark"].get("text") for layer in mark_layers(spec) if layer["mark"]["type"] == "text"
    ]
    assert "no K=0" in texts


def test_headline_without_any_baseline_only_says_so(tmp_path: Path) -> None:
    runs = {(1, 1): [100.0] * 3, (1, 3): [150.0] * 3}
    result = tune(load_experiment(write_grid(tmp_path, runs)), Settings())
    spec = headline_chart(result, None).to_dict()
    assert [row["notice"] for row in spec_values(spec)] == [
        "No kept K=0 cell at any batch size: no speed-up over K=0 to show."
    ]
    assert "scale" not in json.dumps(spec)  # no axis, so no empty (log) domain to warn about


def test_headline_marks_unresolved_anchors(tmp_path: Path) -> None:
    analysis = analysis_of(tmp_path, CONFIDENCE_RUNS)
    assert analysis.report is not None
    spec = headline_chart(analysis.result, analysis.report).to_dict()
    doubts = [row for row in spec_values(spec) if row["layer"] == "doubt"]
    # Batch size 64 is unresolved (see CONFIDENCE_RUNS); batch size 1 is not.
    assert [(row["batch_size"], row["doubt"], row["symbol"]) for row in doubts] == [
        (64, "unresolved", "?")
    ]
    assert _headline_rows(spec, "chosen")[(64, 1)]["doubt"] == "unresolved"
    assert "?: unresolved" in str(spec["title"]["subtitle"])
    # Without a report nothing is marked (and no empty layer is left behind).
    plain = headline_chart(analysis.result, None).to_dict()
    assert not [row for row in spec_values(plain) if row["layer"] == "doubt"]
    assert '"field": "symbol"' not in json.dumps(mark_layers(plain))


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
    analysis = analysis_of(tmp_path, runs)
    assert analysis.result.ok
    report = analysis.report
    assert report is not None
    anchor = report.anchors.filter(pl.col("anchor") == 1).row(0, named=True)
    p_pick = report.cells.filter((pl.col("anchor") == 1) & (pl.col("k") == 1))["p_eps_good"][0]
    assert analysis.result.schedule is not None and analysis.result.schedule.k_at(1) == 1
    assert anchor["status"] == "resolved" and p_pick < report.settings.confidence
    spec = headline_chart(analysis.result, report).to_dict()
    doubts = [row for row in spec_values(spec) if row["layer"] == "doubt"]
    assert [(row["batch_size"], row["symbol"]) for row in doubts] == [(1, "!")]
    assert doubts[0]["p_pick"] == pytest.approx(p_pick, abs=1e-4)


def test_headline_follows_the_container_on_a_log_batch_size_axis(result: TuningResult) -> None:
    spec = headline_chart(result, None).to_dict()
    assert spec["width"] == "container" and 200 <= spec["height"] <= 360
    for layer in mark_layers(spec):
        x = layer["encoding"]["x"]
        assert (x["field"], x["scale"]["type"]) == ("batch_size", "log")
    assert min(row["batch_size"] for row in spec_values(spec)) >= 1  # a log domain never holds 0


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
    spec = headline_chart(result, None).to_dict()
    layers = {row.get("layer") for row in spec_values(spec)}
    assert "chosen" not in layers and "doubt" not in layers
    assert "no pick shown: the result has errors" in spec["title"]["subtitle"][1]
    fine = tune(load_experiment(folder), Settings(min_runs=1))
    assert fine.ok
    assert "chosen" in {
        row.get("layer") for row in spec_values(headline_chart(fine, None).to_dict())
    }
