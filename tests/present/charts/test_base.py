"""What every chart shares (lib/present/charts/base.py): valid Vega-Lite, images rendered offline,
axis titles, image grids; and, over every chart of many sweeps, no empty layer, no Vega-Lite
warning, text and background left to the theme.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import altair as alt
import pytest
import vl_convert
from chart_specs import (
    CONFIDENCE_RUNS,
    NO_SCHEDULE_RUNS,
    RUNS,
    SWITCH_RUNS,
    analysis_of,
    spec_values,
)
from paths import SAMPLE_SWEEPS
from sweep_builder import write_grid

from lib.analysis import Analysis, analyse
from lib.policy import apply_policy
from lib.present.charts.base import IMAGE_WIDTH, MIMETYPE, Chart, axis_title, image_grid
from lib.present.charts.confidence import confidence_charts
from lib.present.charts.headline import headline_chart
from lib.present.charts.rules import rules_chart
from lib.present.charts.schedule import schedule_chart
from lib.present.charts.small_multiples import acceptance_charts, objective_charts
from lib.schedule import TuningResult
from lib.settings import Options, Settings
from lib.sweeps import load_experiment


def test_image_grid_puts_the_small_charts_into_one_image(result: TuningResult) -> None:
    built = objective_charts(result)
    grid = image_grid(built, columns=3)
    spec = grid.to_dict()
    assert spec["columns"] == 3
    assert [part["title"] for part in spec["concat"]] == [c.to_dict()["title"] for c in built]
    assert [part["data"]["values"] for part in spec["concat"]] == [
        spec_values(c.to_dict()) for c in built
    ]
    assert grid.png().startswith(b"\x89PNG\r\n\x1a\n")
    with pytest.raises(ValueError, match="at least one chart"):
        image_grid([])


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
    assert axis_title(field) == title


def test_specifications_are_valid_vega_lite(result: TuningResult, tmp_path: Path) -> None:
    # Altair validates a specification against the Vega-Lite schema when it reads it back.
    acceptance = acceptance_charts(result)[0]
    analysis = analysis_of(tmp_path, CONFIDENCE_RUNS)
    assert analysis.report is not None and analysis.switch_points is not None
    confident = apply_policy(analysis.seed_result, analysis.report, "confident")
    objective = objective_charts(result)
    for chart, kind in (
        (headline_chart(analysis.result, analysis.report), alt.LayerChart),
        (objective[0], alt.LayerChart),
        (image_grid(objective), alt.ConcatChart),
        (acceptance, alt.LayerChart),
        (schedule_chart(result), alt.LayerChart),
        (schedule_chart(analysis.result, analysis.switch_points), alt.LayerChart),
        (confidence_charts(analysis.result, analysis.report)[0], alt.LayerChart),
        (rules_chart(analysis.seed_result, confident), alt.LayerChart),
    ):
        spec = chart.to_dict()
        assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/v6")
        assert isinstance(kind.from_dict(spec, validate=True), kind)  # raises when invalid
        mimetype, text = chart._mime_()
        assert (mimetype, json.loads(text)) == (MIMETYPE, spec)


def test_images_render_offline(result: TuningResult) -> None:
    chart = schedule_chart(result)
    png = chart.png(scale=1)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    svg = chart.svg().decode()
    assert svg.startswith("<svg") and "num_speculative_tokens_per_batch_size" in svg
    # On screen it follows its container; as an image it is IMAGE_WIDTH wide (plus its axes).
    assert chart.to_dict()["width"] == "container"
    width = int.from_bytes(png[16:20], "big")
    assert IMAGE_WIDTH < width < IMAGE_WIDTH + 200


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


def _every_chart(analysis: Analysis) -> dict[str, Chart]:
    """Every chart the app draws for ``analysis``, by name."""
    result, report = analysis.result, analysis.report
    built = {
        "headline": headline_chart(result, report),
        "headline without a report": headline_chart(result, None),
        "schedule": schedule_chart(result, analysis.switch_points),
        "schedule without switch points": schedule_chart(result),
    }
    built |= {f"objective {i}": c for i, c in enumerate(objective_charts(result))}
    built |= {f"acceptance {i}": c for i, c in enumerate(acceptance_charts(result))}
    if report is not None:
        built |= {f"confidence {i}": c for i, c in enumerate(confidence_charts(result, report))}
        confident = apply_policy(analysis.seed_result, report, "confident")
        built["rules"] = rules_chart(analysis.seed_result, confident)
    return built


def _edge_charts(root: Path) -> dict[str, Chart]:
    built: dict[str, Chart] = {}
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
def every_chart(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Chart]:
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


def test_no_chart_has_an_empty_layer(every_chart: dict[str, Chart]) -> None:
    # A chart without rows draws no panel (so no empty mark to find below), yet Vega warns
    # about every field of its scales: a chart with nothing to draw says so in a row instead.
    assert [name for name, chart in every_chart.items() if not spec_values(chart.to_dict())] == []
    empty = {
        name: marks
        for name, chart in every_chart.items()
        if (marks := _empty_marks(vl_convert.vegalite_to_scenegraph(chart.to_json())))
    }
    assert empty == {}


def test_no_chart_makes_vega_lite_warn(
    every_chart: dict[str, Chart], capfd: pytest.CaptureFixture[str]
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
    every_chart: dict[str, Chart],
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
