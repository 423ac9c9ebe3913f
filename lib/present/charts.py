"""Charts of a :class:`lib.schedule.TuningResult` for the app, as Vega-Lite specifications.

- :func:`headline_chart`: the answer at a glance: each K's median speed-up over K=0 (%) with its
  MAD band against batch size on a log axis, the chosen K at each anchor, unresolved anchors
  and doubtful picks marked, and under it the K the deployed schedule runs at every batch size
  (measured, not measured, capped marked).
- :func:`objective_charts`: one small chart per batch size, the objective against K: every run a
  faint point, the median with MAD error bars, the conservative score the policy ranks, and each
  cell's verdict (chosen, tied, kept, rejected) as colour and shape. Small charts of a fixed
  width wrap to the page's width (``mo.hstack(charts, wrap=True)``); :func:`image_grid` puts
  them into one image.
- :func:`schedule_chart`: the schedule as a step chart over a log batch-size axis, with the
  measured anchors marked and, given the switch-point analysis, the interpolated schedule as a
  second line and a vertical rule at each interpolated switch point.
- :func:`acceptance_charts`: per batch size, acceptance length (or the chosen acceptance field)
  against K, small charts like :func:`objective_charts`.
- :func:`confidence_charts`: per batch size, P(eps-good) of every K as bars, against the
  confidence a pick needs; unresolved anchors stand out. Small charts too.
- :func:`rules_chart`: the schedules of the seed's rule and the confident rule, with the
  anchors where they pick differently marked.
- :func:`comparison_chart`: two tunings' schedules (``tune-spec-k diff``), with each side's
  measured anchors.
- :func:`context_heatmap`: the chosen K over batch size x prompt length, unresolved cells and
  cells where the batch-only schedule loses more than the tie tolerance marked.

This is the only module that imports Altair (and vl-convert, for images).

Altair builds each chart's template (marks, encodings, axes, legends) once per axis title and
validates it against the Vega-Lite schema; a slider change then only puts new rows and a new
title into a copy of the template. Building and serialising Altair objects on every change
would cost several times the policy itself.

Every layer of a chart reads the same rows and keeps its own with a filter on ``layer``. A
layer whose filter would keep no row is left out of the specification: Vega warns about the
infinite extent of an empty layer's fields (and an empty log axis "includes zero").

Colours are mid-tones readable on marimo's light and dark themes; text, axes and backgrounds
are left to the theme (marimo renders charts with Vega's ``dark`` theme in dark mode).
"""

from __future__ import annotations

import functools
import itertools
import json
import math
from dataclasses import dataclass
from typing import Any

import altair as alt
import polars as pl
import vl_convert

from lib import robust
from lib.cliffs import Cliff, find_cliffs
from lib.confidence import ConfidenceReport
from lib.deploy.constraints import STRETCH_STATUSES, CappedRange, deployed_stretches
from lib.deploy.tuning import Deployment
from lib.loop.diff import DiffReport, Side
from lib.numbers import signed_percent_text
from lib.policy import policy_differences
from lib.schedule import Schedule, TuningResult
from lib.sweeps import Sweep
from lib.switch_points import SwitchPoints

__all__ = [
    "ACCEPTANCE_LENGTH",
    "CONFIDENCE_ROLES",
    "DEPLOYED_MARKS",
    "DOUBTS",
    "IMAGE_WIDTH",
    "MAX_CHART_ROWS",
    "MAX_POINTS_PER_CELL",
    "MIMETYPE",
    "NEUTRAL",
    "RULES",
    "SCHEDULE_LINES",
    "SIDE_COLOURS",
    "UNRESOLVED",
    "VERDICTS",
    "Chart",
    "acceptance_caption",
    "acceptance_charts",
    "acceptance_metric",
    "axis_title",
    "comparison_chart",
    "confidence_caption",
    "confidence_charts",
    "context_heatmap",
    "headline_chart",
    "image_grid",
    "label_rows",
    "objective_caption",
    "objective_charts",
    "points_per_cell",
    "rules_chart",
    "schedule_chart",
    "speed_up_percent",
]

#: Above this many runs in one cell, the faint points show evenly spaced order statistics of
#: the runs (minimum, quantiles, maximum) instead of every run: a browser draws a 20,000-run
#: sweep slowly, and the spread looks the same.
MAX_POINTS_PER_CELL = 60
#: Rows one chart embeds at most (while every cell keeps at least its two extreme runs).
MAX_CHART_ROWS = 3000

#: The colour of neutral marks (runs, ticks, thresholds, baselines): a mid grey, readable on
#: marimo's light and dark backgrounds alike (black would vanish in dark mode, white in light).
NEUTRAL = "#8c8c8c"

#: Cell verdicts, in legend order, with their colour, shape and size.
VERDICTS: dict[str, tuple[str, str, int]] = {
    "chosen": ("#d62728", "diamond", 220),
    "tied": ("#ff7f0e", "triangle-up", 120),
    "kept": ("#4c78a8", "circle", 70),
    "rejected": (NEUTRAL, "cross", 90),
}

#: Why the headline chart doubts an anchor's pick, with the symbol written above the anchor.
DOUBTS: dict[str, str] = {
    "unresolved": "?",  # no K reaches the confidence: the pick is provisional
    "pick below the confidence": "!",  # some K does, but not the exported one
}

#: How the headline chart's K track draws each stretch of the deployed schedule
#: (:data:`lib.deploy.constraints.STRETCH_STATUSES`), with colour and dash: a measured anchor
#: solid, the batch sizes nothing measured dashed, a capped range (capped, not measured) red
#: and dotted.
DEPLOYED_MARKS: dict[str, tuple[str, list[int]]] = dict(
    zip(
        STRETCH_STATUSES,
        [("#4c78a8", [1, 0]), ("#4c78a8", [6, 4]), ("#e45756", [2, 3])],
        strict=True,
    )
)

#: The two schedules of the schedule chart: vLLM's steps at the anchors, and the one that
#: switches at the interpolated crossovers (lib.switch), in legend order, with colour and dash.
SCHEDULE_LINES: dict[str, tuple[str, list[int]]] = {
    "step": ("#4c78a8", [1, 0]),
    "interpolated": ("#e45756", [6, 3]),
}

#: P(eps-good) bars, in legend order: the K the reported rule picked, other K that reach the
#: confidence, other contenders (could still be the right pick), and the rest.
CONFIDENCE_ROLES: dict[str, str] = {
    "picked": "#d62728",
    "reaches the confidence": "#54a24b",
    "contender": "#f58518",
    "other": "#bab0ac",
}

#: The two decision rules of :func:`rules_chart`, with colour and dash.
RULES: dict[str, tuple[str, list[int]]] = {
    "seed": ("#4c78a8", [1, 0]),
    "confident": ("#f58518", [6, 3]),
}

ACCEPTANCE_LENGTH = "spec_decode_acceptance_length"

#: How marimo and Jupyter recognise a Vega-Lite specification of Altair's schema version.
MIMETYPE = f"application/vnd.vegalite.{alt.SCHEMA_VERSION.split('.')[0]}+json"
_VL_CONVERT_VERSION = "_".join(alt.SCHEMA_VERSION.split(".")[:2])

_UNITS = {
    "output_throughput": "output tokens/s",
    "total_token_throughput": "tokens/s",
    "max_output_tokens_per_s": "output tokens/s",
    "request_throughput": "requests/s",
    "request_goodput": "requests/s",
    "spec_decode_acceptance_length": "tokens per draft",
    "spec_decode_acceptance_rate": "%",
    "duration": "s",
}

#: The plot of one batch size's small chart: with its axes about 310 px wide, so one fits a
#: phone (390 px) and four fit a 1280 px page.
_SMALL_WIDTH = 240
_HEIGHT = 200
_HEADLINE_HEIGHT = 240
#: With the deployed schedule drawn, the headline's speed-up track, the gap under it and the
#: K track under that (one plot: both share the batch-size axis and follow the container).
_SPEED_UP_TRACK = 156
_TRACK_GAP = 22
_K_TRACK = 60
#: The plot width of an image of a chart that follows its container on screen.
IMAGE_WIDTH = 640
#: Ticks that stand for a score beside the points (the conservative score, P without the
#: flagged runs): purple, apart from the verdict colours and readable on both themes.
_SCORE_TICK = "#9467bd"
_CONFIDENCE_HEIGHT = 120
_ROWS = "rows"
UNRESOLVED = "unresolved"


@dataclass(frozen=True, eq=False)
class Chart:
    """A Vega-Lite chart: marimo shows it as is (``_mime_``), :meth:`to_dict` is the
    specification (``alt.LayerChart.from_dict`` / ``alt.ConcatChart.from_dict`` turn it back into
    Altair objects), :meth:`png` and :meth:`svg` render it offline with vl-convert.

    ``rows`` is the data as a JSON array, written by Polars: the rows are never turned into
    Python objects on the way to the browser.
    """

    template: dict[str, Any]
    rows: str

    def to_dict(self) -> dict[str, Any]:
        return {**self.template, "data": {"values": json.loads(self.rows)}}

    def to_json(self) -> str:
        # The template is a non-empty object: its closing brace makes room for the data.
        return (
            json.dumps(self.template, allow_nan=False)[:-1]
            + f', "data": {{"values": {self.rows}}}}}'
        )

    def _mime_(self) -> tuple[str, str]:
        return MIMETYPE, self.to_json()

    def _image_json(self) -> str:
        """The specification for an image: an image has no container, so a chart that follows
        its container's width is drawn :data:`IMAGE_WIDTH` px wide (vl-convert would fall
        back to a narrow default)."""
        if self.template.get("width") != "container":
            return self.to_json()
        return Chart({**self.template, "width": IMAGE_WIDTH}, self.rows).to_json()

    def png(self, scale: float = 2) -> bytes:
        """A PNG at ``scale`` times the screen resolution."""
        return bytes(
            vl_convert.vegalite_to_png(
                self._image_json(), vl_version=_VL_CONVERT_VERSION, scale=scale
            )
        )

    def svg(self) -> bytes:
        return vl_convert.vegalite_to_svg(
            self._image_json(), vl_version=_VL_CONVERT_VERSION
        ).encode()


def axis_title(field: str) -> str:
    """A field name with its unit: ``output_throughput (output tokens/s)``, ``mean_tpot_ms
    (ms)``."""
    unit = _UNITS.get(field) or ("ms" if field.endswith("_ms") else None)
    return f"{field} ({unit})" if unit else field


def _batch_size_title(result: TuningResult) -> str:
    return f"batch size ({result.sweep.batch_size_var})"


def _json_rows(*frames: pl.DataFrame | str) -> str:
    """The frames' rows as one JSON array (Polars writes a float that is not finite as null);
    a string is rows already written, without the brackets."""
    parts = [frame if isinstance(frame, str) else frame.write_json()[1:-1] for frame in frames]
    return "[" + ",".join(part for part in parts if part) + "]"


def _chart(template: dict[str, Any], *frames: pl.DataFrame | str, **properties: Any) -> Chart:
    return Chart({**template, **properties}, _json_rows(*frames))


# --------------------------------------------------------------------------- rows


def _verdicts() -> pl.Expr:
    return (
        pl.when(pl.col("selected"))
        .then(pl.lit("chosen"))
        .when(pl.col("tied"))
        .then(pl.lit("tied"))
        .when(pl.col("status") == "kept")
        .then(pl.lit("kept"))
        .otherwise(pl.lit("rejected"))
        .alias("verdict")
    )


def points_per_cell(cells: int) -> int:
    """How many runs of each cell a chart shows: :data:`MAX_POINTS_PER_CELL`, fewer when the
    chart would otherwise hold more than :data:`MAX_CHART_ROWS` rows, at least 2 (the
    extremes)."""
    return max(2, min(MAX_POINTS_PER_CELL, (MAX_CHART_ROWS - cells) // max(cells, 1)))


def _thin(runs: pl.DataFrame, most: int) -> pl.DataFrame:
    """At most ``most`` runs per (anchor, K), evenly spaced by rank (extremes included)."""
    rank = pl.col("value").rank("ordinal").over("anchor", "k") - 1
    count = pl.len().over("anchor", "k")
    # The rank nearest to each of `most` evenly spaced positions keeps its run.
    step = (count - 1) / (most - 1)
    nearest = ((rank / step).round() * step).round()
    return runs.filter((count <= most) | (rank == nearest))


@functools.lru_cache(maxsize=8)
def _thinned_runs(sweep: Sweep, field: str, most: int) -> pl.DataFrame:
    """Every placed run of ``sweep`` with a finite ``field``, thinned to ``most`` runs per cell
    and sorted. Cached: it depends on the sweep alone, not on the policy's settings, so a
    slider change reuses it (sweeps compare by identity, and the cache holds them)."""
    runs = sweep.runs
    if field not in runs.columns:
        return pl.DataFrame(
            schema={
                "source": pl.Utf8,
                "position": pl.Int64,
                "anchor": pl.Int64,
                "k": pl.Int64,
                "value": pl.Float64,
            }
        )
    points = runs.filter(
        pl.col("anchor").is_not_null() & pl.col("k").is_not_null() & pl.col(field).is_finite()
    ).select("source", "position", "anchor", "k", pl.col(field).cast(pl.Float64).alias("value"))
    return _thin(points, most).sort("anchor", "k", "value")


#: Runs the policy excluded, as a hashable cache key: (source, position, reason) rows.
_Excluded = tuple[tuple[str, int, str], ...]


def _points_key(result: TuningResult, field: str) -> tuple[Sweep, str, int, _Excluded]:
    """What the run points of ``field`` depend on: the sweep, the runs shown per cell and the
    runs the policy excluded."""
    excluded = tuple(result.excluded_runs.select("source", "position", "reason").iter_rows())
    return result.sweep, field, points_per_cell(result.cells.height), excluded


def _run_points(result: TuningResult, field: str) -> dict[int, str]:
    """Per anchor, every run with a finite ``field`` at a usable K, with the reason the policy
    excluded it (empty when used); thinned to :func:`points_per_cell` runs per cell; as JSON
    rows for :func:`_chart`. An anchor without such a run is absent."""
    return _run_rows_by_anchor(*_points_key(result, field))


@functools.lru_cache(maxsize=8)
def _run_rows_by_anchor(sweep: Sweep, field: str, most: int, excluded: _Excluded) -> dict[int, str]:
    """Cached with the frame: a slider change does not even write the runs again."""
    runs = _excluded_marked(sweep, field, most, excluded)
    by_anchor = runs.partition_by("anchor", as_dict=True, maintain_order=True)
    return {anchor: rows.write_json()[1:-1] for (anchor,), rows in by_anchor.items()}


@functools.lru_cache(maxsize=8)
def _excluded_marked(sweep: Sweep, field: str, most: int, excluded: _Excluded) -> pl.DataFrame:
    """Cached: the runs a policy excludes change with the objective or the K field, never
    with a slider."""
    points = _thinned_runs(sweep, field, most)
    reasons = pl.DataFrame(
        list(excluded),
        schema={"source": pl.Utf8, "position": pl.Int64, "reason": pl.Utf8},
        orient="row",
    )
    joined = points.join(reasons, on=["source", "position"], how="left", maintain_order="left")
    return joined.select(
        pl.lit("run").alias("layer"),
        "anchor",
        "k",
        "value",
        pl.format("{} #{}", "source", "position").alias("run"),
        pl.col("reason").fill_null("").alias("excluded"),
    )


def _runs_caption(result: TuningResult) -> str:
    most = points_per_cell(result.cells.height)
    largest = result.cells["num_runs"].max() if result.cells.height else 0
    if isinstance(largest, int) and largest > most:
        return f"grey dots: {most} evenly spaced runs of each cell (cells hold up to {largest})"
    return "grey dots: every run"


def _objective_cells(result: TuningResult) -> pl.DataFrame:
    """One row per (anchor, K): median, ``lo``/``hi`` (median -/+ MAD), conservative score,
    relative MAD, verdict and rejection reason."""
    return result.cells.select(
        pl.lit("cell").alias("layer"),
        "anchor",
        "k",
        "num_runs",
        "median",
        (pl.col("median") - pl.col("mad")).alias("lo"),
        (pl.col("median") + pl.col("mad")).alias("hi"),
        "conservative",
        pl.col("relative_mad").round(4),
        _verdicts(),
        pl.col("reason").fill_null(""),
    )


@functools.lru_cache(maxsize=8)
def _used_medians(sweep: Sweep, field: str, most: int, excluded: _Excluded) -> pl.DataFrame:
    """Median and MAD per (anchor, K) of the run points the policy used. Cached like them:
    only the verdicts joined to it change with a slider."""
    return (
        _excluded_marked(sweep, field, most, excluded)
        .filter(pl.col("excluded") == "")
        .group_by("anchor", "k")
        .agg(
            pl.len().cast(pl.Int64).alias("num_runs"),
            robust.median("value").alias("median"),
            robust.median_abs_deviation("value").alias("mad"),
        )
        .sort("anchor", "k")
    )


def _acceptance_cells(result: TuningResult, field: str) -> pl.DataFrame:
    """Median and MAD of the acceptance field over the runs the policy used, per (anchor, K),
    with the objective cell's verdict so the chosen K stands out here too."""
    verdicts = result.cells.select("anchor", "k", _verdicts(), "reason")
    return (
        _used_medians(*_points_key(result, field))
        .join(verdicts, on=["anchor", "k"], how="left", maintain_order="left")
        .select(
            pl.lit("cell").alias("layer"),
            "anchor",
            "k",
            "num_runs",
            "median",
            (pl.col("median") - pl.col("mad")).alias("lo"),
            (pl.col("median") + pl.col("mad")).alias("hi"),
            pl.col("verdict").fill_null("rejected"),
            pl.col("reason").fill_null(""),
        )
    )


def _step_rows(
    schedule: Schedule | None, layer: str, line: str, labelled: bool = False
) -> pl.DataFrame:
    """A step line: each range's start, then the last range's end, named ``line``; the ranges
    of a ``labelled`` line are written beside it, on the ``label_row`` (further up) where it
    would overlap the one before (:func:`label_rows`)."""
    ranges = list(schedule or ())
    starts = [(lo, k, f"[{lo}, {hi}]") for lo, hi, k in ranges]
    rows: list[int] = []
    if ranges:
        _, hi, k = ranges[-1]
        texts = [text for _, _, text in starts]
        rows = [*label_rows([lo for lo, _, _ in starts], texts, (ranges[0][0], hi)), 0]
        starts.append((hi, k, "end"))
    return pl.DataFrame(
        starts, schema={"batch_size": pl.Int64, "k": pl.Int64, "range": pl.Utf8}, orient="row"
    ).select(
        pl.lit(layer).alias("layer"),
        pl.lit(line).alias("line"),
        pl.all(),
        pl.lit(labelled).alias("labelled"),
        pl.Series("label_row", rows, pl.Int64),
    )


def _deployed(result: TuningResult, switch_points: SwitchPoints) -> str:
    """Which of the two schedules ``result`` deploys (``"step"`` when they are the same)."""
    interpolated = result.schedule == switch_points.schedule != switch_points.step_schedule
    return "interpolated" if interpolated else "step"


def _decided_anchors(result: TuningResult) -> pl.DataFrame:
    return result.decisions.filter(pl.col("selected_k").is_not_null()).select(
        pl.lit("anchor").alias("layer"),
        pl.col("anchor").alias("batch_size"),
        pl.col("selected_k").alias("k"),
        pl.col("vs_best_percent").round(2),
        pl.col("vs_k0_percent").round(2),
        pl.col("tied_k").cast(pl.List(pl.Utf8)).list.join(", ").alias("tied_k"),
    )


def _schedule_rows(result: TuningResult, switch_points: SwitchPoints | None) -> list[pl.DataFrame]:
    """The step line (``layer == "step"``), the interpolated one (``"interpolated"``), one row
    per interpolated switch point (``"switch"``) and one per decided anchor (``"anchor"``)."""
    if switch_points is None:
        return [
            _step_rows(result.schedule, "step", "step", labelled=True),
            _decided_anchors(result),
        ]
    switches = switch_points.switches.select(
        pl.lit("switch").alias("layer"),
        pl.col("switch_at").alias("batch_size"),
        pl.format("K={} -> K={}", "from_k", "to_k").alias("change"),
        "lower_anchor",
        "upper_anchor",
        pl.col("crossover").round(1),
        "step_switch_at",
        pl.col("gain_percent").round(2),
        pl.col("note").fill_null(""),
    )
    steps = switch_points.step_schedule.ranges
    extent = (steps[0][0], steps[-1][1]) if steps else (1, 1)
    # Switch labels hang from the top, one row lower wherever they would overlap.
    rows = label_rows(switches["batch_size"].to_list(), switches["change"].to_list(), extent)
    switches = switches.with_columns(pl.Series("label_row", rows, pl.Int64))
    deployed = _deployed(result, switch_points)
    return [
        _step_rows(switch_points.step_schedule, "step", "step", deployed == "step"),
        _step_rows(
            switch_points.schedule, "interpolated", "interpolated", deployed == "interpolated"
        ),
        switches,
        _decided_anchors(result),
    ]


# --------------------------------------------------------------------------- headline rows


def speed_up_percent(median: pl.Expr, baseline: pl.Expr, maximize: bool) -> pl.Expr:
    """How much better ``median`` is than the K=0 ``baseline``, in percent; positive = better.

    Maximised objective (throughput): ``(median / baseline - 1) x 100``. Minimised objective
    (TPOT, latency): ``(baseline / median - 1) x 100``, the speed-up of the rate, so TPOT 20 ms
    at K=0 and 16 ms at K is +25 % (1.25 times the tokens per second), and a slower K is
    negative. The same convention as the decisions' ``vs_k0_percent``. Null when either value
    is not positive (no ratio to take).

    >>> frame = pl.DataFrame({"m": [120.0, 16.0, 0.0], "b": [100.0, 20.0, 10.0]})
    >>> def percent(maximize: bool) -> list[float | None]:
    ...     up = speed_up_percent(pl.col("m"), pl.col("b"), maximize).round(2).alias("up")
    ...     return frame.select(up)["up"].to_list()
    >>> percent(maximize=True)
    [20.0, -20.0, None]
    >>> percent(maximize=False)
    [-16.67, 25.0, None]
    """
    ratio = median / baseline if maximize else baseline / median
    return pl.when((median > 0) & (baseline > 0)).then((ratio - 1) * 100)


def _baselines(cells: pl.DataFrame) -> pl.DataFrame:
    """Per anchor, the median of its K=0 cell when that cell was kept and is positive: the
    baseline a speed-up is taken against (a rejected K=0 cell is no baseline)."""
    usable = (pl.col("k") == 0) & (pl.col("status") == "kept") & (pl.col("median") > 0)
    return cells.filter(usable).select("anchor", pl.col("median").alias("baseline"))


def _segments(cliffs: tuple[Cliff, ...]) -> pl.Expr:
    """Per (anchor, K) row, which piece of K's line it is on: the number of K's cross-anchor
    cliffs (:mod:`lib.cliffs`) at or below the anchor, so that no line or band joins the two
    sides of a cliff (a straight line would put the drop anywhere between the anchors)."""
    segment = pl.lit(0, pl.Int64)
    for cliff in cliffs:
        past = (pl.col("k") == cliff.k) & (pl.col("anchor") >= cliff.upper.batch_size)
        segment = segment + past.cast(pl.Int64)
    return segment.alias("segment")


def _speed_ups(result: TuningResult, cliffs: tuple[Cliff, ...] = ()) -> pl.DataFrame:
    """Every cell with K > 0 at an anchor with a baseline, with its median speed-up over K=0
    and the MAD band: the ratio to K=0 times 1 -/+ the cell's relative MAD (the K=0 cell's own
    noise is not added), in percent, and its line's ``segment`` (:func:`_segments`). Cells
    whose speed-up is not finite are left out."""
    maximize = result.settings.maximize
    ratio = 1 + pl.col("speedup") / 100
    relative_mad = pl.col("relative_mad").fill_null(0.0)
    return (
        result.cells.filter(pl.col("k") > 0)
        .join(_baselines(result.cells), on="anchor", how="inner")
        .with_columns(
            speed_up_percent(pl.col("median"), pl.col("baseline"), maximize).alias("speedup")
        )
        .filter(pl.col("speedup").is_finite())
        .select(
            pl.when(pl.col("status") == "kept")
            .then(pl.lit("speedup"))
            .otherwise(pl.lit("rejected"))
            .alias("layer"),
            pl.col("anchor").alias("batch_size"),
            "k",
            pl.col("speedup").round(2),
            ((ratio * (1 - relative_mad) - 1) * 100).round(2).alias("lo"),
            ((ratio * (1 + relative_mad) - 1) * 100).round(2).alias("hi"),
            "median",
            "baseline",
            "num_runs",
            pl.col("reason").fill_null(""),
            _segments(cliffs),
        )
        .sort("layer", "k", "batch_size")
    )


def _doubts(result: TuningResult, report: ConfidenceReport | None) -> pl.DataFrame:
    """Per anchor whose pick is in doubt, the doubt (:data:`DOUBTS`) and its symbol: the
    report says ``unresolved``, or the exported K's P(eps-good) is below the confidence (when
    P is known). Nothing without a report."""
    schema = {"anchor": pl.Int64, "doubt": pl.Utf8, "p_pick": pl.Float64}
    if report is None:
        return pl.DataFrame(schema=schema)
    picks = result.decisions.select("anchor", pl.col("selected_k").alias("k"))
    p_pick = picks.join(report.cells.select("anchor", "k", "p_eps_good"), on=["anchor", "k"])
    below = pl.col("p_eps_good") < report.settings.confidence
    return (
        report.anchors.select("anchor", "status")
        .join(p_pick.select("anchor", "p_eps_good"), on="anchor", how="left")
        .select(
            "anchor",
            pl.when(pl.col("status") == UNRESOLVED)
            .then(pl.lit(UNRESOLVED))
            .when(below.fill_null(False))
            .then(pl.lit("pick below the confidence"))
            .alias("doubt"),
            pl.col("p_eps_good").round(4).alias("p_pick"),
        )
        .drop_nulls("doubt")
        .cast(schema)  # type: ignore[arg-type]
    )


def _headline_rows(
    result: TuningResult, report: ConfidenceReport | None, cliffs: tuple[Cliff, ...]
) -> list[pl.DataFrame]:
    """The rows of :func:`headline_chart`: ``speedup`` and ``rejected`` cells
    (:func:`_speed_ups`, their lines broken at ``cliffs``), a ``baseline`` row at 0 % per
    anchor with a baseline, a ``chosen`` row per anchor with a pick and a baseline, a
    ``no_baseline`` row per other anchor with cells, and a ``doubt`` row per doubtful pick
    (:func:`_doubts`)."""
    baselines = _baselines(result.cells)
    speed_ups = _speed_ups(result, cliffs)
    # With errors nothing is picked (the CLI writes no schedule): no pick, no doubt about one.
    doubts = _doubts(result, report).filter(pl.lit(result.ok))
    symbol = pl.col("doubt").replace_strict(DOUBTS, default="")
    chosen = (
        result.decisions.filter(pl.col("selected_k").is_not_null() & pl.lit(result.ok))
        .join(baselines, on="anchor", how="inner")
        .join(
            speed_ups.filter(pl.col("layer") == "speedup").select(
                pl.col("batch_size").alias("anchor"), "k", "speedup"
            ),
            left_on=["anchor", "selected_k"],
            right_on=["anchor", "k"],
            how="left",
        )
        .join(doubts, on="anchor", how="left")
        .select(
            pl.lit("chosen").alias("layer"),
            pl.col("anchor").alias("batch_size"),
            pl.col("selected_k").alias("k"),
            # The chosen K=0 is the baseline itself.
            pl.when(pl.col("selected_k") == 0).then(0.0).otherwise("speedup").alias("speedup"),
            pl.col("doubt").fill_null(""),
        )
        .drop_nulls("speedup")
    )
    anchors = result.cells.select("anchor").unique().sort("anchor")
    no_baseline = anchors.join(baselines, on="anchor", how="anti")
    labels = ["no K=0"] * no_baseline.height
    rows = label_rows(no_baseline["anchor"].to_list(), labels, _extent(anchors["anchor"]))
    return [
        speed_ups,
        baselines.sort("anchor").select(
            pl.lit("baseline").alias("layer"),
            pl.col("anchor").alias("batch_size"),
            pl.lit(0.0).alias("speedup"),
            "baseline",
        ),
        chosen,
        no_baseline.select(
            pl.lit("no_baseline").alias("layer"),
            pl.col("anchor").alias("batch_size"),
            pl.lit("no kept K=0 cell: no speed-up to show").alias("note"),
            pl.Series("label_row", rows, pl.Int64),
        ),
        doubts.sort("anchor").select(
            pl.lit("doubt").alias("layer"),
            pl.col("anchor").alias("batch_size"),
            "doubt",
            symbol.alias("symbol"),
            "p_pick",
        ),
    ]


def _deployment_of(result: TuningResult) -> Deployment | None:
    """The capture check :func:`lib.deploy.tuning.deploy_analysis` attached to ``result``."""
    deployment = result.additions.get("deployment")
    return deployment if isinstance(deployment, Deployment) else None


def _capped_note(capped: tuple[CappedRange, ...], lo: int) -> str:
    """What a capped stretch starting at ``lo`` runs instead, in the check's words."""
    for span in capped:
        if span.lo <= lo <= span.hi:
            return f"K={span.capped_k} instead of K={span.measured_k}: capped, not measured"
    return ""


def _deployed_rows(result: TuningResult, deployment: Deployment | None) -> list[pl.DataFrame]:
    """The K track of :func:`headline_chart`: one ``deployed`` row per stretch of the schedule
    ``result`` deploys (:func:`lib.deploy.constraints.deployed_stretches`: from 1 to the last
    range's end, cut where K or what backs it changes), drawn from its first batch size to the
    next stretch's (the last one to its own end), and one ``jump`` row per change of K, at the
    batch size where the new K starts. Rows per stretch, never per batch size. None while the
    result has errors or no schedule (the CLI writes none)."""
    schedule = result.schedule
    if not result.ok or schedule is None or not schedule.ranges:
        return []
    kept = result.cells.filter(pl.col("status") == "kept").select("anchor", "k").rows()
    capped = deployment.check.capped if deployment is not None else ()
    stretches = deployed_stretches(schedule, set(kept), capped, result.deploy_global_k)
    ends = [*(stretch.lo for stretch in stretches[1:]), stretches[-1].hi]
    deployed = pl.DataFrame(
        {
            "batch_size": [stretch.lo for stretch in stretches],
            "batch_size_end": ends,
            "lo": [stretch.lo for stretch in stretches],
            "hi": [stretch.hi for stretch in stretches],
            "k": [stretch.k for stretch in stretches],
            "status": [stretch.status for stretch in stretches],
            "note": [_capped_note(capped, stretch.lo) for stretch in stretches],
        },
        schema={
            "batch_size": pl.Int64,
            "batch_size_end": pl.Int64,
            "lo": pl.Int64,
            "hi": pl.Int64,
            "k": pl.Int64,
            "status": pl.Utf8,
            "note": pl.Utf8,
        },
    )
    pairs = itertools.pairwise(stretches)
    changes = [(after.lo, before.k, after.k) for before, after in pairs if before.k != after.k]
    jumps = pl.DataFrame(
        changes, schema={"batch_size": pl.Int64, "k": pl.Int64, "k_to": pl.Int64}, orient="row"
    )
    return [
        deployed.select(pl.lit("deployed").alias("layer"), pl.all()),
        jumps.select(pl.lit("jump").alias("layer"), pl.all()),
    ]


# --------------------------------------------------------------------------- label layout

#: The narrowest plot labels are laid out for (a phone): labels apart there are apart on any
#: wider plot too, since positions on a log axis scale with the width.
_NARROWEST_PLOT_PX = 300
#: The width of one character of an 11 px label, generously, and the space between labels.
_LABEL_CHAR_PX = 6.5
_LABEL_GAP_PX = 4
#: The height of one row of labels.
_LABEL_ROW_PX = 13


def _label_layers(frame: pl.DataFrame, prefix: str) -> set[str]:
    """The names of the text layers ``frame``'s labels need: one per row of labels they take
    (``"<prefix>:<row>"``; a mark's ``dy`` cannot follow the data, and Vega-Lite drops a
    ``yOffset`` on a continuous y, so each row is a layer)."""
    return {f"{prefix}:{row}" for row in frame["label_row"].unique()}


def _label_rows_in(layers: frozenset[str], prefix: str) -> list[int]:
    """The label rows ``layers`` names for ``prefix`` (:func:`_label_layers`)."""
    return sorted(int(name.split(":")[1]) for name in layers if name.startswith(prefix + ":"))


def _extent(values: pl.Series) -> tuple[int, int]:
    """The smallest and largest of positive batch sizes (1, 1 when there are none)."""
    positive = values.filter(values > 0)
    if positive.is_empty():
        return 1, 1
    return int(positive.min()), int(positive.max())  # type: ignore[arg-type]


def label_rows(batch_sizes: list[int], texts: list[str], extent: tuple[int, int]) -> list[int]:
    """For labels written left-aligned from ``batch_sizes`` on a log axis spanning ``extent``,
    the row each goes on (0 = the first) so that no two labels on a row overlap on the
    narrowest plot (300 px; further apart on a wider one). Greedy from the left: a label takes
    the first row whose last label ends before it starts. The axis is taken to run between
    the powers of two around ``extent``, as Vega-Lite's "nice" log scale does.

    >>> label_rows([1, 2, 64], ["K=3 -> K=1", "K=1 -> K=0", "x"], (1, 256))
    [0, 1, 0]
    """
    low = 2 ** math.floor(math.log2(max(extent[0], 1)))
    span = max(math.log2(max(extent[1], 1) / low), 1.0)
    ends: list[float] = []
    rows = [0] * len(batch_sizes)
    for index in sorted(range(len(batch_sizes)), key=lambda i: batch_sizes[i]):
        start = math.log2(max(batch_sizes[index], 1) / low) / span * _NARROWEST_PLOT_PX
        row = next((row for row, end in enumerate(ends) if end <= start), len(ends))
        if row == len(ends):
            ends.append(0.0)
        ends[row] = start + len(texts[index]) * _LABEL_CHAR_PX + _LABEL_GAP_PX
        rows[index] = row
    return rows


# --------------------------------------------------------------------------- templates


def _layer(name: str) -> Any:
    return alt.datum.layer == name


def _verdict_encoding() -> dict[str, Any]:
    """Colour and shape by verdict, in one legend; size by verdict as fixed values.

    Size is not a scale of ``verdict``: a size scale of a nominal field makes Vega-Lite warn
    ("Channel size should not be used with an unsorted discrete field"), and a size legend
    disabled beside the colour and shape legends of the same field conflicts with them
    ("Conflicting legend property disable")."""
    names = list(VERDICTS)
    colours, shapes, sizes = (list(values) for values in zip(*VERDICTS.values(), strict=True))
    legend = alt.Legend(title="cell", orient="top")
    *sized, (_, default_size) = zip(names, sizes, strict=True)
    return {
        "color": alt.Color("verdict:N", scale=alt.Scale(domain=names, range=colours)).legend(
            legend
        ),
        "shape": alt.Shape("verdict:N", scale=alt.Scale(domain=names, range=shapes)).legend(legend),
        "size": alt.SizeValue(
            default_size,
            condition=[
                alt.ConditionalPredicateValueDefnumberExprRef(
                    test=f"datum.verdict === '{name}'", value=size
                )
                for name, size in sized
            ],
        ),
    }


def _cell_tooltip(number_format: str, conservative: bool) -> list[alt.Tooltip]:
    tooltip = [
        alt.Tooltip("k:O", title="K"),
        alt.Tooltip("verdict:N"),
        alt.Tooltip("num_runs:Q", title="runs"),
        alt.Tooltip("median:Q", format=number_format),
        alt.Tooltip("lo:Q", format=number_format, title="median - MAD"),
        alt.Tooltip("hi:Q", format=number_format, title="median + MAD"),
    ]
    if conservative:
        tooltip += [
            alt.Tooltip("conservative:Q", format=number_format, title="conservative score"),
            alt.Tooltip("relative_mad:Q", title="relative MAD"),
        ]
    return [*tooltip, alt.Tooltip("reason:N", title="rejected because")]


def _cell_layers(y_title: str, conservative: bool, layers: frozenset[str]) -> list[alt.Chart]:
    """Faint run points (``"run"``), MAD error bars, a median line and verdict-coloured medians
    (``"cell"``), and the conservative score of the cells not rejected (``"score"``), as far
    as ``layers`` names them."""
    x = alt.X("k:O", title="K (draft tokens per step)", axis=alt.Axis(labelAngle=0))
    number_format = ",.2f" if conservative else ",.3f"
    tooltip = _cell_tooltip(number_format, conservative)
    runs = (
        alt.Chart()
        .mark_circle(size=18, opacity=0.35)
        .encode(
            x=x,
            y=alt.Y("value:Q", title=y_title).scale(zero=False),
            # Runs the policy left out (failed, unusable) stay visible, in red.
            color=alt.condition(
                "datum.excluded != ''", alt.value(VERDICTS["chosen"][0]), alt.value(NEUTRAL)
            ),
            tooltip=[
                alt.Tooltip("run:N"),
                alt.Tooltip("value:Q", format=number_format),
                alt.Tooltip("excluded:N", title="excluded because"),
            ],
        )
        .transform_filter(_layer("run"))
    )
    bars = (
        alt.Chart()
        .mark_errorbar(ticks=alt.MarkConfig(size=10), color=VERDICTS["kept"][0])
        .encode(
            x=x,
            y=alt.Y("lo:Q", title=y_title).scale(zero=False),
            y2="hi:Q",
            opacity=alt.condition(alt.datum.verdict == "rejected", alt.value(0.35), alt.value(1)),
        )
        .transform_filter(_layer("cell"))
    )
    line = (
        alt.Chart()
        .mark_line(color=VERDICTS["kept"][0], opacity=0.5, strokeDash=[4, 3])
        .encode(x=x, y=alt.Y("median:Q", title=y_title).scale(zero=False))
        .transform_filter(_layer("cell"))
    )
    medians = (
        alt.Chart()
        .mark_point(filled=True, opacity=1)
        .encode(
            x=x,
            y=alt.Y("median:Q", title=y_title).scale(zero=False),
            tooltip=tooltip,
            **_verdict_encoding(),
        )
        .transform_filter(_layer("cell"))
    )
    score = (
        alt.Chart()
        .mark_tick(color=_SCORE_TICK, thickness=2, size=14)
        .encode(
            x=x,
            y=alt.Y("conservative:Q", title=y_title).scale(zero=False),
            tooltip=tooltip,
        )
        .transform_filter(_layer("cell") & (alt.datum.verdict != "rejected"))
    )
    named = [("run", runs), ("cell", bars), ("cell", line), ("score", score), ("cell", medians)]
    return [chart for name, chart in named if name in layers]


def _without_data(chart: alt.TopLevelMixin) -> dict[str, Any]:
    """The chart's specification, validated against the schema (once per template), without
    the placeholder data each :class:`Chart` replaces."""
    spec: dict[str, Any] = chart.to_dict()
    del spec["data"]
    return spec


@functools.lru_cache(maxsize=32)
def _small_template(y_title: str, conservative: bool, layers: frozenset[str]) -> dict[str, Any]:
    """One batch size's chart of a field against K (:func:`_cell_layers`)."""
    chart = alt.LayerChart(
        data=alt.NamedData(name=_ROWS),
        layer=_cell_layers(y_title, conservative, layers),
        width=_SMALL_WIDTH,
        height=_HEIGHT,
    )
    return _without_data(chart)


def _line_encoding(field: str, lines: dict[str, tuple[str, list[int]]], title: str) -> Any:
    names = list(lines)
    colours, dashes = (list(values) for values in zip(*lines.values(), strict=True))
    legend = alt.Legend(title=title, orient="top")
    return {
        "color": alt.Color(f"{field}:N", scale=alt.Scale(domain=names, range=colours)).legend(
            legend
        ),
        "strokeDash": alt.StrokeDash(
            f"{field}:N", scale=alt.Scale(domain=names, range=dashes)
        ).legend(legend),
    }


def _log_batch_size(batch_size_title: str) -> Any:
    return alt.X("batch_size:Q", title=batch_size_title + ", log scale").scale(type="log", base=2)


_K_AXIS = alt.Y("k:Q", title="K (draft tokens per step)").axis(tickMinStep=1)
#: The rows of the schedule chart whose range is written beside the line.
_RANGE_LABEL = alt.datum.labelled & (alt.datum.range != "end")


@functools.lru_cache(maxsize=16)
def _schedule_template(batch_size_title: str, layers: frozenset[str]) -> dict[str, Any]:
    """The layers of :func:`schedule_chart` that ``layers`` names (:func:`_schedule_layers`)."""
    x = _log_batch_size(batch_size_title)
    y = _K_AXIS
    line_encoding = _line_encoding("line", SCHEDULE_LINES, "schedule")
    lines = (
        alt.Chart()
        .mark_line(interpolate="step-after", strokeWidth=3)
        .encode(
            x=x,
            y=y,
            tooltip=[alt.Tooltip("line:N", title="schedule"), "range:N", "k:Q"],
            **line_encoding,
        )
        .transform_filter(_layer("step") | _layer("interpolated"))
    )
    labels = [
        (
            f"range_label:{row}",
            alt.Chart()
            .mark_text(align="left", dx=4, dy=-8 - _LABEL_ROW_PX * row)
            .encode(
                x=x,
                y=y,
                text=alt.Text("range:N"),
                # The lines' colour encoding, legend and all: a label layer without the legend
                # would conflict with it ("Conflicting legend property disable").
                color=line_encoding["color"],
            )
            .transform_filter(_RANGE_LABEL & (alt.datum.label_row == row)),
        )
        for row in _label_rows_in(layers, "range_label")
    ]
    switches = (
        alt.Chart()
        .mark_rule(color=SCHEDULE_LINES["interpolated"][0], strokeDash=[2, 2], strokeWidth=1.5)
        .encode(
            x=x,
            tooltip=[
                alt.Tooltip("change:N", title="switch"),
                alt.Tooltip("batch_size:Q", title="interpolated switch at"),
                alt.Tooltip("step_switch_at:Q", title="step schedule switches at"),
                alt.Tooltip("crossover:Q", title="curves cross at"),
                alt.Tooltip("gain_percent:Q", title="expected gain % where it changes"),
                alt.Tooltip("note:N"),
            ],
        )
        .transform_filter(_layer("switch"))
    )
    switch_labels = [
        (
            f"switch_label:{row}",
            alt.Chart()
            .mark_text(align="left", dx=3, baseline="top", color=SCHEDULE_LINES["interpolated"][0])
            .encode(x=x, y=alt.value(2 + _LABEL_ROW_PX * row), text=alt.Text("change:N"))
            .transform_filter(_layer("switch") & (alt.datum.label_row == row)),
        )
        for row in _label_rows_in(layers, "switch_label")
    ]
    anchors = (
        alt.Chart()
        .mark_point(filled=True, size=90, color=VERDICTS["chosen"][0], shape="diamond")
        .encode(
            x=x,
            y=y,
            tooltip=[
                alt.Tooltip("batch_size:Q", title="anchor"),
                alt.Tooltip("k:Q", title="chosen K"),
                alt.Tooltip("vs_best_percent:Q", title="vs best %"),
                alt.Tooltip("vs_k0_percent:Q", title="vs K=0 %"),
                alt.Tooltip("tied_k:N", title="tied K"),
            ],
        )
        .transform_filter(_layer("anchor"))
    )
    named = [("line", lines), *labels, ("switch", switches), *switch_labels, ("anchor", anchors)]
    chart = alt.LayerChart(
        data=alt.NamedData(name=_ROWS),
        layer=[layer for name, layer in named if name in layers],
        width="container",
        height=240,
        title=alt.TitleParams("num_speculative_tokens_per_batch_size"),
    )
    return _without_data(chart)


@functools.lru_cache(maxsize=16)
def _headline_template(batch_size_title: str, layers: frozenset[str]) -> dict[str, Any]:
    """The layers of :func:`headline_chart` that ``layers`` names; the width follows the
    container."""
    x = _log_batch_size(batch_size_title)
    track = "deployed" in layers
    # With the K track, the speed-up takes the plot's top part (a scale's range, in pixels).
    top = alt.Scale(range=[_SPEED_UP_TRACK, 0]) if track else alt.Scale()
    y = alt.Y("speedup:Q", title="speed-up over K=0 (%)", scale=top)
    # Full opacity in the legend: its symbols would otherwise take the faint band's.
    legend = alt.Legend(orient="top", symbolOpacity=1, symbolType="circle")
    colour = alt.Color("k:O", title="K").scale(scheme="tableau10").legend(legend)
    speed_up_tooltip = [
        alt.Tooltip("batch_size:Q", title="batch size"),
        alt.Tooltip("k:O", title="K"),
        alt.Tooltip("speedup:Q", title="speed-up over K=0 %", format="+.2f"),
        alt.Tooltip("lo:Q", title="band from %", format="+.2f"),
        alt.Tooltip("hi:Q", title="band to %", format="+.2f"),
        alt.Tooltip("median:Q", format=",.2f"),
        alt.Tooltip("baseline:Q", title="K=0 median", format=",.2f"),
        alt.Tooltip("num_runs:Q", title="runs"),
    ]
    band = (
        alt.Chart()
        .mark_area(opacity=0.15)
        .encode(
            x=x,
            y=alt.Y("lo:Q", title="speed-up over K=0 (%)", scale=top),
            y2="hi:Q",
            color=colour,
            detail="segment:O",
        )
        .transform_filter(_layer("speedup"))
    )
    baseline = (
        alt.Chart()
        .mark_line(color=NEUTRAL, strokeDash=[4, 3], point=alt.OverlayMarkDef(color=NEUTRAL))
        .encode(
            x=x,
            y=y,
            tooltip=[
                alt.Tooltip("batch_size:Q", title="batch size"),
                alt.Tooltip("baseline:Q", title="K=0 median", format=",.2f"),
            ],
        )
        .transform_filter(_layer("baseline"))
    )
    lines = (
        alt.Chart()
        .mark_line(point=alt.OverlayMarkDef(size=30))
        .encode(x=x, y=y, color=colour, detail="segment:O", tooltip=speed_up_tooltip)
        .transform_filter(_layer("speedup"))
    )
    rejected = (
        alt.Chart()
        .mark_point(shape="cross", filled=True, size=70, color=NEUTRAL)
        .encode(
            x=x,
            y=y,
            tooltip=[*speed_up_tooltip, alt.Tooltip("reason:N", title="rejected because")],
        )
        .transform_filter(_layer("rejected"))
    )
    chosen_tooltip = [
        alt.Tooltip("batch_size:Q", title="batch size"),
        alt.Tooltip("k:O", title="chosen K"),
        alt.Tooltip("speedup:Q", title="speed-up over K=0 %", format="+.2f"),
        alt.Tooltip("doubt:N"),
    ]
    chosen = (
        alt.Chart()
        .mark_point(shape="diamond", filled=True, size=180, opacity=1)
        .encode(x=x, y=y, color=colour, tooltip=chosen_tooltip)
        .transform_filter(_layer("chosen"))
    )
    no_baseline = (
        alt.Chart()
        .mark_rule(color=NEUTRAL, strokeDash=[2, 3])
        .encode(
            x=x,
            tooltip=[alt.Tooltip("batch_size:Q", title="batch size"), alt.Tooltip("note:N")],
        )
        .transform_filter(_layer("no_baseline"))
    )
    bottom = _SPEED_UP_TRACK if track else _HEADLINE_HEIGHT
    no_baseline_labels = [
        (
            f"no_baseline_label:{row}",
            alt.Chart()
            .mark_text(align="left", dx=3, baseline="bottom", color=NEUTRAL, text="no K=0")
            .encode(x=x, y=alt.value(bottom - 2 - _LABEL_ROW_PX * row))
            .transform_filter(_layer("no_baseline") & (alt.datum.label_row == row)),
        )
        for row in _label_rows_in(layers, "no_baseline_label")
    ]
    doubts = (
        alt.Chart()
        .mark_text(fontSize=15, fontWeight="bold", color=VERDICTS["tied"][0], baseline="top")
        .encode(
            x=x,
            y=alt.value(2),
            text=alt.Text("symbol:N"),
            tooltip=[
                alt.Tooltip("batch_size:Q", title="batch size"),
                alt.Tooltip("doubt:N"),
                alt.Tooltip("p_pick:Q", title="P(eps-good) of the pick", format=".3f"),
            ],
        )
        .transform_filter(_layer("doubt"))
    )
    named = [
        ("speedup", band),
        ("baseline", baseline),
        ("speedup", lines),
        ("rejected", rejected),
        ("chosen", chosen),
        ("no_baseline", no_baseline),
        *no_baseline_labels,
        ("doubt", doubts),
    ]
    speed_up = [layer for name, layer in named if name in layers]
    if not track:
        chart = alt.LayerChart(
            data=alt.NamedData(name=_ROWS),
            layer=speed_up,
            width="container",
            height=_HEADLINE_HEIGHT,
        )
        return _without_data(chart)
    height = _SPEED_UP_TRACK + _TRACK_GAP + _K_TRACK
    # The K track's own colour and dash scales (resolved apart from the K colours above).
    chart = alt.LayerChart(
        data=alt.NamedData(name=_ROWS),
        layer=[
            alt.LayerChart(layer=speed_up),
            alt.LayerChart(layer=_deployed_layers(x, layers, height)),
        ],
        width="container",
        height=height,
    ).resolve_scale(y="independent", color="independent", strokeDash="independent")
    return _without_data(chart)


def _deployed_layers(x: Any, layers: frozenset[str], height: int) -> list[alt.Chart]:
    """The headline's K track, below the speed-ups: the deployed K per stretch as horizontal
    rules (colour and dash by what backs it, :data:`DEPLOYED_MARKS`, only the statuses
    ``layers`` names in the legend), a thin vertical rule at each change of K, and a point
    on each measured anchor."""
    statuses = [name for name in DEPLOYED_MARKS if f"deployed:{name}" in layers]
    marks = [DEPLOYED_MARKS[status] for status in statuses]
    colours, dashes = [colour for colour, _ in marks], [dash for _, dash in marks]
    legend = alt.Legend(title="deployed K", orient="top", symbolStrokeWidth=3)
    y = alt.Y(
        "k:Q",
        title="deployed K",
        scale=alt.Scale(range=[height, height - _K_TRACK], zero=True, nice=False, padding=6),
        axis=alt.Axis(orient="right", tickMinStep=1, grid=False),
    )
    tooltip = [
        alt.Tooltip("lo:Q", title="batch sizes from"),
        alt.Tooltip("hi:Q", title="to"),
        alt.Tooltip("k:Q", title="deployed K"),
        alt.Tooltip("status:N", title="measured"),
        alt.Tooltip("note:N"),
    ]
    stretches = (
        alt.Chart()
        .mark_rule(strokeWidth=3)
        .encode(
            x=x,
            x2="batch_size_end:Q",
            y=y,
            color=alt.Color("status:N", scale=alt.Scale(domain=statuses, range=colours)).legend(
                legend
            ),
            strokeDash=alt.StrokeDash(
                "status:N", scale=alt.Scale(domain=statuses, range=dashes)
            ).legend(legend),
            tooltip=tooltip,
        )
        .transform_filter(_layer("deployed"))
    )
    jumps = (
        alt.Chart()
        .mark_rule(color=NEUTRAL, strokeWidth=1.5)
        .encode(
            x=x,
            y=y,
            y2="k_to:Q",
            tooltip=[
                alt.Tooltip("batch_size:Q", title="K changes at batch size"),
                alt.Tooltip("k:Q", title="from K"),
                alt.Tooltip("k_to:Q", title="to K"),
            ],
        )
        .transform_filter(_layer("jump"))
    )
    anchors = (
        alt.Chart()
        .mark_point(filled=True, size=45, opacity=1, color=DEPLOYED_MARKS["measured"][0])
        .encode(x=x, y=y, tooltip=tooltip)
        .transform_filter(_layer("deployed") & (alt.datum.status == "measured"))
    )
    named = [("deployed", stretches), ("jump", jumps), ("deployed:measured", anchors)]
    return [layer for name, layer in named if name in layers]


@functools.lru_cache(maxsize=4)
def _notice_template() -> dict[str, Any]:
    """A chart that only says why there is nothing to draw (its rows hold the ``notice``): no
    scale, so no empty extent for Vega to warn about."""
    text = alt.Chart().mark_text(align="left", baseline="middle", fontSize=13, color=NEUTRAL)
    chart = alt.LayerChart(
        data=alt.NamedData(name=_ROWS),
        layer=[text.encode(x=alt.value(0), y=alt.value(20), text=alt.Text("notice:N"))],
        width="container",
        height=40,
    )
    return _without_data(chart)


def _notice(title: str, notice: str) -> Chart:
    return _chart(_notice_template(), pl.DataFrame({"notice": [notice]}), title=title)


@functools.lru_cache(maxsize=8)
def _confidence_template(layers: frozenset[str]) -> dict[str, Any]:
    """One anchor's confidence chart: the ``threshold`` rule, and the ``bars``, the
    ``without_flagged`` ticks and the ``unknown`` marks when ``layers`` names them."""
    x = alt.X("k:O", title="K (draft tokens per step)", axis=alt.Axis(labelAngle=0))
    y = alt.Y("p_eps_good:Q", title="P(eps-good)").scale(domain=[0, 1])
    names = list(CONFIDENCE_ROLES)
    tooltip = [
        alt.Tooltip("anchor:O", title="batch size"),
        alt.Tooltip("k:O", title="K"),
        alt.Tooltip("role:N"),
        alt.Tooltip("p_eps_good:Q", title="P(eps-good)", format=".3f"),
        alt.Tooltip("p_without_flagged:Q", title="P without flagged runs", format=".3f"),
        alt.Tooltip("num_runs:Q", title="runs"),
        alt.Tooltip("runs_needed:Q", title="runs needed"),
    ]
    bars = (
        alt.Chart()
        .mark_bar()
        .encode(
            x=x,
            y=y,
            color=alt.Color(
                "role:N", scale=alt.Scale(domain=names, range=list(CONFIDENCE_ROLES.values()))
            ).legend(alt.Legend(title="K at the anchor", orient="top")),
            tooltip=tooltip,
        )
        .transform_filter(_layer("cell"))
    )
    without_flagged = (
        alt.Chart()
        .mark_tick(color=_SCORE_TICK, thickness=2, size=12)
        .encode(
            x=x,
            y=alt.Y("p_without_flagged:Q", title="P(eps-good)"),
            tooltip=tooltip,
        )
        .transform_filter(_layer("cell") & (alt.datum.p_without_flagged != None))  # noqa: E711
    )
    unknown = (
        alt.Chart()
        .mark_text(text="?", dy=-6, color=NEUTRAL, fontSize=13)
        .encode(x=x, y=alt.value(_CONFIDENCE_HEIGHT), tooltip=tooltip)
        .transform_filter(_layer("cell") & (alt.datum.p_eps_good == None))  # noqa: E711
    )
    threshold = (
        alt.Chart()
        .mark_rule(color=NEUTRAL, strokeDash=[4, 3])
        .encode(
            y=alt.Y("confidence:Q", title="P(eps-good)"),
            tooltip=[alt.Tooltip("confidence:Q", title="confidence a pick needs")],
        )
        .transform_filter(_layer("threshold"))
    )
    named = [
        ("bars", bars),
        ("without_flagged", without_flagged),
        ("unknown", unknown),
        ("threshold", threshold),
    ]
    chart = alt.LayerChart(
        data=alt.NamedData(name=_ROWS),
        layer=[layer for name, layer in named if name in layers],
        width=_SMALL_WIDTH,
        height=_CONFIDENCE_HEIGHT,
    )
    return _without_data(chart)


@functools.lru_cache(maxsize=8)
def _rules_template(batch_size_title: str, layers: frozenset[str]) -> dict[str, Any]:
    """The layers of the rules chart that ``layers`` names: ``band`` (where the rules differ),
    ``step`` (their schedules) and ``pick``."""
    x = _log_batch_size(batch_size_title)
    y = _K_AXIS
    line_encoding = _line_encoding("line", RULES, "decision rule")
    lines = (
        alt.Chart()
        .mark_line(interpolate="step-after", strokeWidth=3, opacity=0.85)
        .encode(
            x=x,
            y=y,
            tooltip=[alt.Tooltip("line:N", title="rule"), "range:N", "k:Q"],
            **line_encoding,
        )
        .transform_filter(_layer("step"))
    )
    picks = (
        alt.Chart()
        .mark_point(filled=True)
        .encode(
            x=x,
            y=y,
            # The lines' colour encoding with its legend: see _schedule_template.
            color=line_encoding["color"],
            shape=alt.condition(alt.datum.differs, alt.value("diamond"), alt.value("circle")),
            size=alt.condition(alt.datum.differs, alt.value(200), alt.value(40)),
            tooltip=[
                alt.Tooltip("batch_size:Q", title="anchor"),
                alt.Tooltip("line:N", title="rule"),
                alt.Tooltip("k:Q", title="K"),
                alt.Tooltip("p_eps_good:Q", title="P(eps-good)", format=".3f"),
                alt.Tooltip("status:N"),
                alt.Tooltip("differs:N", title="the rules differ here"),
            ],
        )
        .transform_filter(_layer("pick"))
    )
    band = (
        alt.Chart()
        .mark_rule(color=VERDICTS["chosen"][0], opacity=0.25, strokeWidth=10)
        .encode(x=x)
        .transform_filter(_layer("pick") & alt.datum.differs & (alt.datum.line == "seed"))
    )
    chart = alt.LayerChart(
        data=alt.NamedData(name=_ROWS),
        layer=[
            layer
            for name, layer in (("band", band), ("step", lines), ("pick", picks))
            if name in layers
        ],
        width="container",
        height=240,
        title=alt.TitleParams("The seed's rule against the confident rule"),
    )
    return _without_data(chart)


# --------------------------------------------------------------------------- charts


def _small_charts(
    result: TuningResult, cells: pl.DataFrame, field: str, conservative: bool
) -> list[Chart]:
    """One chart of ``field`` against K per anchor of ``cells`` that has a finite median (an
    anchor whose runs were all excluded has nothing to draw), in batch-size order. Each leaves
    out the layers it has no rows for."""
    runs = _run_points(result, field)
    y_title = axis_title(field)
    picked = dict(result.decisions.select("anchor", "selected_k").iter_rows())
    built = []
    drawable = cells.filter(pl.col("median").is_finite())
    for (anchor,), rows in drawable.partition_by("anchor", as_dict=True).items():
        layers = {"cell"}
        if anchor in runs:
            layers.add("run")
        if conservative and (rows["verdict"] != "rejected").any():
            layers.add("score")
        chosen = picked.get(anchor)
        title = {
            "text": f"batch size {anchor}",
            "subtitle": "no K chosen" if chosen is None else f"K={chosen} chosen",
        }
        template = _small_template(y_title, conservative, frozenset(layers))
        built.append((anchor, _chart(template, rows, runs.get(anchor, ""), title=title)))
    return [chart for _, chart in sorted(built, key=lambda pair: pair[0])]


def _undrawn_anchors(cells: pl.DataFrame) -> list[int]:
    """The anchors with cells but no finite median: every run there was excluded."""
    finite = pl.col("median").is_finite().fill_null(False)
    undrawn = cells.group_by("anchor").agg(finite.any().alias("drawn")).filter(~pl.col("drawn"))
    return sorted(undrawn["anchor"].to_list())


def objective_charts(result: TuningResult) -> list[Chart]:
    """Per batch size with cells, a small chart of the objective against K: every run a faint
    point (excluded runs red), the median with MAD error bars, the conservative score the seed
    ranks (a purple tick, cells not rejected only) and each cell's verdict as colour and shape.
    Each chart has a fixed width (about 310 px), so that they wrap to the page; empty when no
    cell has a finite median. :func:`objective_caption` says how to read them."""
    return _small_charts(result, _objective_cells(result), result.settings.objective, True)


def objective_caption(result: TuningResult) -> str:
    """How to read :func:`objective_charts` for ``result``, in one paragraph: the objective, its
    direction, the conservative score's formula, which runs the dots show, and the batch
    sizes that have no chart."""
    settings = result.settings
    sign = "-" if settings.maximize else "+"
    caption = (
        f"{settings.objective} against K ({settings.direction}; median with MAD error bars),"
        f" one chart per {_batch_size_title(result)}. Purple tick: conservative score (median"
        f" {sign} {settings.uncertainty_penalty} x 1.4826 x MAD), the score the policy ranks;"
        f" red dots: runs the policy excluded; {_runs_caption(result)}."
    )
    undrawn = _undrawn_anchors(result.cells)
    if undrawn:
        caption += (
            f" No chart at batch size {', '.join(map(str, undrawn))}: every run there was excluded."
        )
    return caption


def image_grid(charts: list[Chart], columns: int = 4) -> Chart:
    """``charts`` in rows of ``columns``, as one chart for a single PNG or SVG: each keeps its
    own data and title. Raises ValueError when ``charts`` is empty (there is nothing to draw)."""
    if not charts:
        raise ValueError("image_grid needs at least one chart")
    parts = [
        {key: value for key, value in chart.to_dict().items() if key not in ("$schema", "config")}
        for chart in charts
    ]
    template = {"$schema": charts[0].template["$schema"], "columns": columns, "concat": parts}
    # Every part carries its own rows; the grid's own data is an empty placeholder.
    return Chart(template, "[]")


def _present_layers(frames: list[pl.DataFrame]) -> frozenset[str]:
    """The ``layer`` names that have rows."""
    return frozenset(name for frame in frames if frame.height for name in frame["layer"].unique())


def headline_chart(
    result: TuningResult,
    report: ConfidenceReport | None,
    deployment: Deployment | None = None,
) -> Chart:
    """The answer at a glance: per K > 0, its median speed-up over K=0 (%) against batch size
    on a log axis, one coloured line per K with its MAD band, the K=0 baseline at 0 % (dashed),
    the chosen K's speed-up at each anchor (big diamonds) and, under them on the same batch
    axis, the schedule ``result`` deploys (``result.schedule``: the step schedule, the
    interpolated one, or the one capped to the CUDA-graph capture ceiling by
    :func:`lib.deploy.tuning.deploy_analysis`, whose ``deployment`` is read from the result
    when not given).

    Why a K track and not a line in the speed-up plot: between the anchors nothing was
    measured, so there is no speed-up to draw for the deployed K there (a capped K may not
    have been measured anywhere); a line joining the anchors' speed-ups would show the same
    thing for the step and the interpolated schedule and hide where K changes. The track shows
    what vLLM runs, K(b) for every b from 1 to the last range's end (horizontal rules, a
    vertical rule where K changes, at the batch size the new range starts), and what backs it:
    solid with a point at a measured anchor, dashed where nothing was measured, red and dotted
    where the capture ceiling capped K (capped, not measured). The speed-ups above say what
    each K gave at the anchors; the track below says where each K runs. It has one row per
    stretch (:func:`lib.deploy.constraints.deployed_stretches`), never one per batch size.

    - Sign: :func:`speed_up_percent`, positive = better than K=0 whichever the direction (for a
      minimised objective such as TPOT, K=0's median over K's, less 1).
    - Band: the speed-up's ratio to K=0 times 1 -/+ the cell's relative MAD.
    - Cells a gate rejected are grey crosses off the lines, never part of a line or band.
    - A K's line and band stop at a cross-anchor cliff (:func:`lib.cliffs.find_cliffs`) and
      start again past it: nothing is interpolated across one.
    - An anchor without a kept K=0 cell has no speed-up to show: a dashed rule says "no K=0"
      there (nothing is made up); the chosen K there is not drawn.
    - With a confidence ``report``, an unresolved anchor gets a "?" above it, and one whose
      exported K has P(eps-good) below the confidence (while another K reaches it) a "!".
    - Without a baseline anywhere, the chart only says so.
    - With errors (``result.ok`` false) no pick and no K track are drawn and the subtitle says
      why: the CLI would write no schedule.

    The width follows the container (from a phone to a wide screen); the height is fixed.
    """
    cliffs = find_cliffs(result)
    rows = _headline_rows(result, report, cliffs)
    deployed = _deployed_rows(result, deployment or _deployment_of(result))
    labelled = [frame for frame in rows if "label_row" in frame.columns]
    layers = _present_layers([*rows, *deployed]).union(
        *(_label_layers(frame, "no_baseline_label") for frame in labelled),
        {f"deployed:{status}" for frame in deployed[:1] for status in frame["status"]},
    )
    title = "Speed-up over K=0 by batch size"
    if not layers & {"speedup", "baseline"}:
        return _notice(title, "No kept K=0 cell at any batch size: no speed-up over K=0 to show.")
    settings = result.settings
    formula = "K's median / K=0's" if settings.maximize else "K=0's median / K's"
    # Few short lines: the chart is on the first screen, a subtitle does not wrap, and the
    # chart must fit a phone.
    picks = "diamonds: the chosen K" if result.ok else "no pick shown: the result has errors"
    subtitle = [
        f"{settings.objective}: {formula} - 1, higher is better",
        f"lines: each K with its MAD band; {picks}",
    ]
    marks = [
        ("rejected", "crosses: rejected cells"),
        ("doubt", "?: unresolved, !: pick below confidence"),
        ("no_baseline", "no K=0: no baseline there"),
    ]
    notes = [line for name, line in marks if name in layers]
    if cliffs:
        notes.append("a gap in a line: a cliff, not joined")
    if notes:
        subtitle.append("; ".join(notes))
    if "deployed" in layers:
        subtitle.append("below: the deployed K at every batch size; dashed: not measured")
    template = _headline_template(_batch_size_title(result), layers)
    return _chart(template, *rows, *deployed, title={"text": title, "subtitle": subtitle})


def _schedule_layers(rows: list[pl.DataFrame]) -> frozenset[str]:
    """The layers of the schedule chart that have rows: ``line`` (either schedule), a
    ``range_label`` layer per row of range labels, ``switch`` with a ``switch_label`` layer
    per row of their labels, and ``anchor``."""
    present = _present_layers(rows)
    names = {"switch", "anchor"} & present
    if present & {"step", "interpolated"}:
        names.add("line")
    for frame in rows:
        if "labelled" in frame.columns:
            labelled = frame.filter(pl.col("labelled") & (pl.col("range") != "end"))
            names |= _label_layers(labelled, "range_label")
        if "change" in frame.columns:
            names |= _label_layers(frame, "switch_label")
    return frozenset(names)


def schedule_chart(result: TuningResult, switch_points: SwitchPoints | None = None) -> Chart:
    """The schedule as K against batch size on a log axis; points mark the measured anchors.
    With ``switch_points``, both the step and the interpolated schedule are drawn (the subtitle
    says which one ``result`` deploys), with a rule at each interpolated switch point. Labels
    that would overlap go on further rows. Without a schedule or a decided anchor, the chart
    only says so. The width follows the container."""
    title_text = "num_speculative_tokens_per_batch_size"
    rows = _schedule_rows(result, switch_points)
    layers = _schedule_layers(rows)
    if not layers:
        return _notice(title_text, "No schedule and no decided batch size (see the errors).")
    # Short lines: a subtitle does not wrap, and the chart must fit a phone.
    subtitle = ["diamonds: anchors and their chosen K"]
    if switch_points is not None:
        subtitle[:0] = [
            f"deployed: the {_deployed(result, switch_points)} schedule",
            "dotted rules: interpolated switch points",
            "interpolated vs step:"
            f" {signed_percent_text(switch_points.mean_gain_percent)} on average"
            f" (max {signed_percent_text(switch_points.max_gain_percent)})",
        ]
    title = {"text": title_text, "subtitle": subtitle}
    return _chart(_schedule_template(_batch_size_title(result), layers), *rows, title=title)


def _confidence_cells(result: TuningResult, report: ConfidenceReport) -> pl.DataFrame:
    """One row per (anchor, K) of the report: P(eps-good) with and without the flagged runs,
    the runs needed, and the K's role at its anchor (:data:`CONFIDENCE_ROLES`)."""
    picked = result.decisions.select("anchor", pl.col("selected_k").alias("_picked"))
    qualifying = report.anchors.select("anchor", pl.col("qualifying_k").alias("_qualifying"))
    return (
        report.cells.join(qualifying, on="anchor", how="left")
        .join(picked, on="anchor", how="left")
        .select(
            pl.lit("cell").alias("layer"),
            "anchor",
            "k",
            "num_runs",
            pl.col("p_eps_good").round(4),
            pl.col("p_eps_good_without_flagged").round(4).alias("p_without_flagged"),
            "runs_needed",
            pl.when(pl.col("k") == pl.col("_picked"))
            .then(pl.lit("picked"))
            .when(pl.col("_qualifying").list.contains(pl.col("k")))
            .then(pl.lit("reaches the confidence"))
            .when(pl.col("contender"))
            .then(pl.lit("contender"))
            .otherwise(pl.lit("other"))
            .alias("role"),
        )
    )


def _confidence_layers(cells: pl.DataFrame) -> frozenset[str]:
    """The layers of one anchor's confidence chart that have rows (the threshold always has
    its own row)."""
    layers = {"threshold"}
    if cells["p_eps_good"].is_not_null().any():
        layers.add("bars")
    if cells["p_without_flagged"].is_not_null().any():
        layers.add("without_flagged")
    if cells["p_eps_good"].is_null().any():
        layers.add("unknown")
    return frozenset(layers)


def confidence_charts(result: TuningResult, report: ConfidenceReport) -> list[Chart]:
    """Per batch size of the report, a small chart of every K's P(eps-good) as a bar: the K
    ``result`` picked, the other K that reach the confidence, the other contenders and the
    rest; a dashed rule at the confidence a pick needs, a purple tick at P without the flagged
    runs (where runs are flagged), ``?`` where the noise is unknown. An unresolved anchor's
    title says so in red. Empty when no cell has enough runs for P(eps-good);
    :func:`confidence_caption` says how to read them."""
    cells = _confidence_cells(result, report)
    statuses = dict(report.anchors.select("anchor", "status").iter_rows())
    built = []
    for (anchor,), rows in sorted(cells.partition_by("anchor", as_dict=True).items()):
        status = statuses.get(anchor, "")
        threshold = pl.DataFrame(
            {"layer": ["threshold"], "confidence": [report.settings.confidence]}
        )
        title: dict[str, Any] = {"text": f"batch size {anchor}: {status}"}
        if status == UNRESOLVED:
            title["color"] = VERDICTS["chosen"][0]
        template = _confidence_template(_confidence_layers(rows))
        built.append(_chart(template, rows, threshold, title=title))
    return built


def confidence_caption(result: TuningResult, report: ConfidenceReport) -> str:
    """How to read :func:`confidence_charts`: what P(eps-good) is, the confidence, how many
    anchors are unresolved, and the marks."""
    if report.cells.is_empty():
        return "No cell has enough runs (and a usable acceptance) for P(eps-good)."
    unresolved = report.anchors.filter(pl.col("status") == UNRESOLVED).height
    return (
        "P(eps-good): the chance each K is within the tie tolerance"
        f" ({report.tolerance * 100:g}%) of the best, one chart per"
        f" {_batch_size_title(result)}. Dashed: the confidence a pick needs"
        f" ({report.settings.confidence:g}); {unresolved} of {report.anchors.height} anchor(s)"
        " unresolved (red titles). Purple tick: P without the flagged runs; ?: no noise"
        " estimate (one run per cell)."
    )


def rules_chart(seed: TuningResult, confident: TuningResult) -> Chart:
    """The two rules' step schedules over a log batch-size axis, with both picks at every
    anchor; where they differ, large diamonds on a shaded band."""
    differences = policy_differences(seed, confident)
    picks = [
        differences.select(
            pl.lit("pick").alias("layer"),
            pl.col("anchor").alias("batch_size"),
            pl.lit(rule).alias("line"),
            pl.col(f"{rule}_k").alias("k"),
            pl.col(f"{rule}_p_eps_good").round(4).alias("p_eps_good"),
            "status",
            "differs",
        ).drop_nulls("k")
        for rule in RULES
    ]
    changed = differences["differs"].sum()
    title_text = "The seed's rule against the confident rule"
    rows = [
        _step_rows(seed.schedule, "step", "seed"),
        _step_rows(confident.schedule, "step", "confident"),
        *picks,
    ]
    layers = _present_layers(rows)
    if not layers:
        return _notice(title_text, "Neither rule picks a K anywhere.")
    if picks[0].filter(pl.col("differs")).height:
        layers |= {"band"}
    title = {
        "text": title_text,
        "subtitle": f"{changed} of {differences.height} anchor(s) pick a different K (shaded)",
    }
    return _chart(_rules_template(_batch_size_title(seed), layers), *rows, title=title)


def acceptance_metric(result: TuningResult) -> str | None:
    """The acceptance field to plot: the chosen ``--acceptance-var``, else acceptance length
    when the sweep has it."""
    if result.settings.acceptance is not None:
        return result.settings.acceptance
    return ACCEPTANCE_LENGTH if ACCEPTANCE_LENGTH in result.sweep.runs.columns else None


def acceptance_charts(result: TuningResult) -> list[Chart]:
    """Per batch size, acceptance against K, small charts like :func:`objective_charts` (the
    colour and shape of a cell are the objective cell's verdict, so the chosen K stands out
    here too); empty when the sweep has no acceptance field."""
    field = acceptance_metric(result)
    if field is None or field not in result.sweep.runs.columns:
        return []
    return _small_charts(result, _acceptance_cells(result, field), field, False)


def acceptance_caption(result: TuningResult) -> str:
    """How to read :func:`acceptance_charts` for ``result`` (or that there are none)."""
    field = acceptance_metric(result)
    if field is None or field not in result.sweep.runs.columns:
        return "The sweep has no acceptance field to plot."
    return (
        f"{field} against K (median with MAD error bars), one chart per"
        f" {_batch_size_title(result)}. Colour and shape: the objective cell's verdict; K=0"
        f" drafts nothing; {_runs_caption(result)}."
    )


# --------------------------------------------------------------------------- diff

#: Colours of the two sides in the comparison chart.
SIDE_COLOURS = {"A": "#4c78a8", "B": "#e45756"}


def _side_rows(side: Side, name: str) -> list[dict[str, Any]]:
    """A schedule as points of a step-after line: each range's start, and the last range's end."""
    rows: list[dict[str, Any]] = []
    ordered = sorted(side.schedule)
    for lo, hi, k in ordered:
        rows.append(
            {"side": name, "layer": "step", "batch_size": lo, "k": k, "range": f"{lo}-{hi}"}
        )
    lo, hi, k = ordered[-1]
    rows.append({"side": name, "layer": "step", "batch_size": hi, "k": k, "range": f"{lo}-{hi}"})
    rows += [
        {"side": name, "layer": "anchor", "batch_size": anchor, "k": side.k_at(anchor), "range": ""}
        for anchor in side.anchors
    ]
    return rows


def comparison_chart(report: DiffReport) -> Chart:
    """Both schedules as step lines over a log batch-size axis (A blue, B red, B dashed), with
    each side's measured anchors marked."""
    x = alt.X("batch_size:Q", title="batch size, log scale").scale(type="log", base=2)
    y = alt.Y("k:Q", title="K (draft tokens per step)").axis(tickMinStep=1)
    colour = alt.Color("side:N", title="schedule").scale(
        domain=list(SIDE_COLOURS), range=list(SIDE_COLOURS.values())
    )
    steps = (
        alt.Chart()
        .mark_line(interpolate="step-after", strokeWidth=3, opacity=0.8)
        .encode(
            x=x,
            y=y,
            color=colour,
            # Colour, dash and shape share one legend: a channel of the same field without
            # a legend beside one with it makes Vega-Lite warn ("Conflicting legend
            # property disable").
            strokeDash=alt.StrokeDash("side:N", title="schedule").scale(
                domain=list(SIDE_COLOURS), range=[[1, 0], [6, 4]]
            ),
            tooltip=["side:N", "range:N", "k:Q"],
        )
        .transform_filter(alt.datum.layer == "step")
    )
    anchors = (
        alt.Chart()
        .mark_point(filled=True, size=80)
        .encode(
            x=x,
            y=y,
            color=colour,
            shape=alt.Shape("side:N", title="schedule"),
            tooltip=["side:N", alt.Tooltip("batch_size:Q", title="anchor"), "k:Q"],
        )
        .transform_filter(alt.datum.layer == "anchor")
    )
    layered = alt.LayerChart(
        data=alt.NamedData(name="rows"),
        layer=[steps, anchors],
        width="container",
        height=220,
        title=alt.TitleParams(
            "A and B: num_speculative_tokens_per_batch_size",
            subtitle=[f"A: {report.a.label}", f"B: {report.b.label}"],
        ),
    )
    template = layered.to_dict()
    template.pop("data", None)
    rows = _side_rows(report.a, "A") + _side_rows(report.b, "B")
    return Chart(template, json.dumps(rows))


# --------------------------------------------------------------------------- context axis

_LOSS_STROKE = "#d62728"
_HEATMAP_CELL_PX = 56


@functools.lru_cache(maxsize=8)
def _heatmap_template(layers: frozenset[str]) -> dict[str, Any]:
    """The context heatmap: a ``cell`` rect per (batch size, prompt length) coloured by K, its
    K as text (``?`` added when unresolved, ``-`` without a K), and a ``loses`` outline where
    the batch-only schedule loses more than the tie tolerance."""
    x = alt.X("prompt:O", title="prompt tokens").sort(field="prompt_tokens")
    x = x.axis(labelAngle=0)
    # Short titles: with two rows the plot is about 80 px high, a longer title would overflow.
    y = alt.Y("batch:O", title="batch size").sort(field="batch_size", order="descending")
    tooltip = [
        alt.Tooltip("batch_size:Q", title="batch size"),
        alt.Tooltip("prompt_tokens:Q", title="prompt tokens"),
        alt.Tooltip("context_tokens:Q", title="decode-time context (tokens)"),
        alt.Tooltip("selected_k:Q", title="chosen K"),
        alt.Tooltip("status:N"),
        alt.Tooltip("p_eps_good:Q", title="P(eps-good) of the chosen K", format=".2f"),
        alt.Tooltip("batch_only_k:Q", title="K of the batch-only schedule"),
        alt.Tooltip(
            "loss_percent:Q", title="batch-only loss vs this cell's pick (%)", format=".1f"
        ),
    ]
    cells = (
        alt.Chart()
        .mark_rect()
        .encode(
            x=x,
            y=y,
            # A ramp (dark purple to yellow) that reads on light and dark pages alike; the
            # labels take the contrasting colour of their cell.
            color=alt.Color("selected_k:O", title="chosen K").scale(scheme="viridis"),
            tooltip=tooltip,
        )
        .transform_filter(_layer("cell") & (alt.datum.selected_k != None))  # noqa: E711
    )
    undecided = (
        alt.Chart()
        .mark_rect(color=NEUTRAL, opacity=0.3)
        .encode(x=x, y=y, tooltip=tooltip)
        .transform_filter(_layer("cell") & (alt.datum.selected_k == None))  # noqa: E711
    )
    labels = (
        alt.Chart()
        .mark_text(fontSize=14, fontWeight="bold")
        .encode(
            x=x,
            y=y,
            text=alt.Text("label:N"),
            # The label sits on the cell's colour, not the page's: dark text on the light end
            # of the ramp, light text on the dark end.
            color=alt.condition(alt.datum.light_fill, alt.value("#222222"), alt.value("#f5f5f5")),
            tooltip=tooltip,
        )
        .transform_filter(_layer("cell"))
    )
    loses = (
        alt.Chart()
        .mark_rect(fillOpacity=0, stroke=_LOSS_STROKE, strokeWidth=3)
        .encode(x=x, y=y, tooltip=tooltip)
        .transform_filter(_layer("loses"))
    )
    named = [("cell", cells), ("undecided", undecided), ("cell", labels), ("loses", loses)]
    chart = alt.LayerChart(
        data=alt.NamedData(name=_ROWS),
        layer=[layer for name, layer in named if name in layers],
        width={"step": _HEATMAP_CELL_PX},
        height={"step": _HEATMAP_CELL_PX * 3 // 4},
    )
    return _without_data(chart)


def context_heatmap(
    grid: list[dict[str, Any]],
    batch_only: dict[int, int],
    loss_percent: dict[tuple[int, int], float | None],
    tolerance_percent: float,
) -> Chart:
    """The chosen K over (batch size x prompt length), from ``ContextAnalysis.grid()``.

    - Colour: the chosen K (an ordinal ramp); text: K, with ``?`` when the pick is unresolved
      (P(eps-good) below the confidence, or a problem at that cell); ``-`` and a grey cell
      where no K could be chosen.
    - A red outline marks the cells where the batch-only schedule (``batch_only``: K per
      batch size, e.g. the vLLM export for the chosen context mix) loses more than
      ``tolerance_percent`` against the cell's own pick (``loss_percent``, positive = worse).
    - Rows: batch size, largest at the top; columns: prompt length, shortest at the left.
    """
    ks = sorted({cell["selected_k"] for cell in grid if cell["selected_k"] is not None})
    # The ramp's upper half is light (viridis runs from dark purple to yellow).
    light = set(ks[len(ks) // 2 :]) if len(ks) > 1 else set()
    rows = []
    for cell in grid:
        key = (cell["batch_size"], cell["prompt_tokens"])
        k = cell["selected_k"]
        loss = loss_percent.get(key)
        mark = "?" if cell["status"] == "unresolved" else ""
        rows.append(
            {
                "layer": "cell",
                "batch": str(cell["batch_size"]),
                "batch_size": cell["batch_size"],
                "prompt": str(cell["prompt_tokens"]),
                "prompt_tokens": cell["prompt_tokens"],
                "context_tokens": cell["context_tokens"],
                "selected_k": k,
                "label": "-" if k is None else f"{k}{mark}",
                "light_fill": k in light,
                "status": cell["status"],
                "p_eps_good": cell["p_eps_good"],
                "batch_only_k": batch_only.get(cell["batch_size"]),
                "loss_percent": loss,
            }
        )
    losing = [
        {**row, "layer": "loses"}
        for row in rows
        if row["loss_percent"] is not None and row["loss_percent"] > tolerance_percent
    ]
    frame = pl.DataFrame(rows + losing, infer_schema_length=None)
    layers = set(_present_layers([frame]))
    if any(row["selected_k"] is None for row in rows):
        layers.add("undecided")
    subtitle = ["colour and text: the chosen K; ?: unresolved"]
    if losing:
        subtitle.append(
            f"red outline: the batch-only schedule loses more than {tolerance_percent:g}%"
        )
    return _chart(
        _heatmap_template(frozenset(layers)),
        frame,
        title={"text": "Chosen K by batch size and prompt length", "subtitle": subtitle},
    )
