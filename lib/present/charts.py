"""Charts of a :class:`lib.schedule.TuningResult` for the app, as Vega-Lite specifications.

- :func:`objective_chart`: per batch size, the objective against K: every run a faint point,
  the median with MAD error bars, the conservative score the policy ranks, and each cell's
  verdict (chosen, tied, kept, rejected) as colour and shape.
- :func:`schedule_chart`: the schedule as a step chart over a log batch-size axis, with the
  measured anchors marked and, given the switch-point analysis, the interpolated schedule as a
  second line and a vertical rule at each interpolated switch point.
- :func:`acceptance_chart`: acceptance length (or the chosen acceptance field) against K.
- :func:`confidence_chart`: per batch size, P(eps-good) of every K as bars, against the
  confidence a pick needs; unresolved anchors stand out.
- :func:`rules_chart`: the schedules of the seed's rule and the confident rule, with the
  anchors where they pick differently marked.
- :func:`comparison_chart`: two tunings' schedules (``tune-spec-k diff``), with each side's
  measured anchors.

This is the only module that imports Altair (and vl-convert, for images).

Altair builds each chart's template (marks, encodings, axes, legends) once per axis title and
validates it against the Vega-Lite schema; a slider change then only puts new rows and a new
title into a copy of the template. Building and serialising Altair objects on every change
would cost several times the policy itself.

Charts are layered first and faceted by batch size second (Vega-Lite cannot layer facets), so
every layer reads the same rows and keeps its own with a filter on ``layer``.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

import altair as alt
import polars as pl
import vl_convert

from lib import robust
from lib.confidence import ConfidenceReport, policy_differences
from lib.loop.diff import DiffReport, Side
from lib.schedule import Schedule, TuningResult
from lib.sweeps import Sweep
from lib.switch_points import SwitchPoints

__all__ = [
    "ACCEPTANCE_LENGTH",
    "CONFIDENCE_ROLES",
    "MAX_CHART_ROWS",
    "MAX_POINTS_PER_CELL",
    "MIMETYPE",
    "RULES",
    "SCHEDULE_LINES",
    "SIDE_COLOURS",
    "UNRESOLVED",
    "VERDICTS",
    "Chart",
    "acceptance_chart",
    "acceptance_metric",
    "axis_title",
    "comparison_chart",
    "confidence_chart",
    "objective_chart",
    "points_per_cell",
    "rules_chart",
    "schedule_chart",
]

#: Above this many runs in one cell, the faint points show evenly spaced order statistics of
#: the runs (minimum, quantiles, maximum) instead of every run: a browser draws a 20,000-run
#: sweep slowly, and the spread looks the same.
MAX_POINTS_PER_CELL = 60
#: Rows one chart embeds at most (while every cell keeps at least its two extreme runs).
MAX_CHART_ROWS = 3000

#: Cell verdicts, in legend order, with their colour, shape and size.
VERDICTS: dict[str, tuple[str, str, int]] = {
    "chosen": ("#d62728", "diamond", 220),
    "tied": ("#ff7f0e", "triangle-up", 120),
    "kept": ("#4c78a8", "circle", 70),
    "rejected": ("#9d9d9d", "cross", 90),
}

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

_FACET_COLUMNS = 4
_FACET_WIDTH = 140
_HEIGHT = 200
_CONFIDENCE_HEIGHT = 120
_ROWS = "rows"
UNRESOLVED = "unresolved"


@dataclass(frozen=True, eq=False)
class Chart:
    """A Vega-Lite chart: marimo shows it as is (``_mime_``), :meth:`to_dict` is the
    specification (``alt.FacetChart.from_dict`` / ``alt.LayerChart.from_dict`` turn it back into
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

    def png(self, scale: float = 2) -> bytes:
        """A PNG at ``scale`` times the screen resolution."""
        return bytes(
            vl_convert.vegalite_to_png(self.to_json(), vl_version=_VL_CONVERT_VERSION, scale=scale)
        )

    def svg(self) -> bytes:
        return vl_convert.vegalite_to_svg(self.to_json(), vl_version=_VL_CONVERT_VERSION).encode()


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


def _run_points(result: TuningResult, field: str) -> str:
    """Every run with a finite ``field`` at a usable (anchor, K), with the reason the policy
    excluded it (empty when used); thinned to :func:`points_per_cell` runs per cell; as JSON
    rows for :func:`_chart`."""
    return _run_rows_json(*_points_key(result, field))


@functools.lru_cache(maxsize=8)
def _run_rows_json(sweep: Sweep, field: str, most: int, excluded: _Excluded) -> str:
    """Cached with the frame: a slider change does not even write the runs again."""
    return _excluded_marked(sweep, field, most, excluded).write_json()[1:-1]


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
    of a ``labelled`` line are written beside it."""
    ranges = list(schedule or ())
    starts = [(lo, k, f"[{lo}, {hi}]") for lo, hi, k in ranges]
    if ranges:
        _, hi, k = ranges[-1]
        starts.append((hi, k, "end"))
    return pl.DataFrame(
        starts, schema={"batch_size": pl.Int64, "k": pl.Int64, "range": pl.Utf8}, orient="row"
    ).select(
        pl.lit(layer).alias("layer"),
        pl.lit(line).alias("line"),
        pl.all(),
        pl.lit(labelled).alias("labelled"),
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
    deployed = _deployed(result, switch_points)
    return [
        _step_rows(switch_points.step_schedule, "step", "step", deployed == "step"),
        _step_rows(
            switch_points.schedule, "interpolated", "interpolated", deployed == "interpolated"
        ),
        switches,
        _decided_anchors(result),
    ]


# --------------------------------------------------------------------------- templates


def _layer(name: str) -> Any:
    return alt.datum.layer == name


def _verdict_encoding() -> dict[str, Any]:
    names = list(VERDICTS)
    colours, shapes, sizes = (list(values) for values in zip(*VERDICTS.values(), strict=True))
    legend = alt.Legend(title="cell", orient="top")
    return {
        "color": alt.Color("verdict:N", scale=alt.Scale(domain=names, range=colours)).legend(
            legend
        ),
        "shape": alt.Shape("verdict:N", scale=alt.Scale(domain=names, range=shapes)).legend(legend),
        "size": alt.Size("verdict:N", scale=alt.Scale(domain=names, range=sizes)).legend(None),
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


def _cell_layers(y_title: str, conservative: bool) -> list[alt.Chart]:
    """Faint run points, MAD error bars, a median line, optionally the conservative score, and
    verdict-coloured medians on top."""
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
            color=alt.condition("datum.excluded != ''", alt.value("#d62728"), alt.value("#555555")),
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
        .mark_errorbar(ticks=alt.MarkConfig(size=10), color="#4c78a8")
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
        .mark_line(color="#4c78a8", opacity=0.5, strokeDash=[4, 3])
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
    layers = [runs, bars, line, medians]
    if conservative:
        tick = (
            alt.Chart()
            .mark_tick(color="#222222", thickness=2, size=14)
            .encode(
                x=x,
                y=alt.Y("conservative:Q", title=y_title).scale(zero=False),
                tooltip=tooltip,
            )
            .transform_filter(_layer("cell") & (alt.datum.verdict != "rejected"))
        )
        layers.insert(3, tick)
    return layers


def _without_data(chart: alt.TopLevelMixin) -> dict[str, Any]:
    """The chart's specification, validated against the schema (once per template), without
    the placeholder data each :class:`Chart` replaces."""
    spec: dict[str, Any] = chart.to_dict()
    del spec["data"]
    return spec


@functools.lru_cache(maxsize=32)
def _faceted_template(y_title: str, header: str, conservative: bool) -> dict[str, Any]:
    chart = alt.FacetChart(
        data=alt.NamedData(name=_ROWS),
        spec=alt.LayerChart(
            layer=_cell_layers(y_title, conservative), width=_FACET_WIDTH, height=_HEIGHT
        ),
        facet=alt.Facet("anchor:O", title=header),
        columns=_FACET_COLUMNS,
        resolve=alt.Resolve(scale=alt.ScaleResolveMap(y="independent")),
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


@functools.lru_cache(maxsize=8)
def _schedule_template(batch_size_title: str) -> dict[str, Any]:
    x = _log_batch_size(batch_size_title)
    y = _K_AXIS
    lines = (
        alt.Chart()
        .mark_line(interpolate="step-after", strokeWidth=3)
        .encode(
            x=x,
            y=y,
            tooltip=[alt.Tooltip("line:N", title="schedule"), "range:N", "k:Q"],
            **_line_encoding("line", SCHEDULE_LINES, "schedule"),
        )
        .transform_filter(_layer("step") | _layer("interpolated"))
    )
    labels = (
        alt.Chart()
        .mark_text(align="left", dx=4, dy=-8)
        .encode(x=x, y=y, text=alt.Text("range:N"), color=alt.Color("line:N").legend(None))
        .transform_filter(alt.datum.labelled & (alt.datum.range != "end"))
    )
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
    switch_labels = (
        alt.Chart()
        .mark_text(align="left", dx=3, baseline="top", color=SCHEDULE_LINES["interpolated"][0])
        .encode(x=x, y=alt.value(2), text=alt.Text("change:N"))
        .transform_filter(_layer("switch"))
    )
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
    chart = alt.LayerChart(
        data=alt.NamedData(name=_ROWS),
        layer=[lines, labels, switches, switch_labels, anchors],
        width=520,
        height=240,
        title=alt.TitleParams("num_speculative_tokens_per_batch_size"),
    )
    return _without_data(chart)


@functools.lru_cache(maxsize=8)
def _confidence_template(header: str) -> dict[str, Any]:
    x = alt.X("k:O", title="K (draft tokens per step)", axis=alt.Axis(labelAngle=0))
    y = alt.Y("p_eps_good:Q", title="P(eps-good)").scale(domain=[0, 1])
    names = list(CONFIDENCE_ROLES)
    tooltip = [
        alt.Tooltip("anchor:O", title="batch size"),
        alt.Tooltip("status:N"),
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
        .mark_tick(color="#222222", thickness=2, size=12)
        .encode(
            x=x,
            y=alt.Y("p_without_flagged:Q", title="P(eps-good)"),
            tooltip=tooltip,
        )
        .transform_filter(_layer("cell") & (alt.datum.p_without_flagged != None))  # noqa: E711
    )
    unknown = (
        alt.Chart()
        .mark_text(text="?", dy=-6, color="#555555", fontSize=13)
        .encode(x=x, y=alt.value(_CONFIDENCE_HEIGHT), tooltip=tooltip)
        .transform_filter(_layer("cell") & (alt.datum.p_eps_good == None))  # noqa: E711
    )
    threshold = (
        alt.Chart()
        .mark_rule(color="#222222", strokeDash=[4, 3])
        .encode(
            y=alt.Y("confidence:Q", title="P(eps-good)"),
            tooltip=[alt.Tooltip("confidence:Q", title="confidence a pick needs")],
        )
        .transform_filter(_layer("anchor"))
    )
    chart = alt.FacetChart(
        data=alt.NamedData(name=_ROWS),
        spec=alt.LayerChart(
            layer=[bars, without_flagged, unknown, threshold],
            width=_FACET_WIDTH,
            height=_CONFIDENCE_HEIGHT,
        ),
        facet=alt.Facet(
            "panel:N",
            title=header,
            sort=alt.EncodingSortField(field="anchor", op="min"),
            header=alt.Header(
                labelColor=alt.ExprRef(
                    f"indexof('' + parent.panel, '{UNRESOLVED}') >= 0 ? '#d62728' : '#222222'"
                ),
                labelFontWeight="bold",
            ),
        ),
        columns=_FACET_COLUMNS,
    )
    return _without_data(chart)


@functools.lru_cache(maxsize=8)
def _rules_template(batch_size_title: str) -> dict[str, Any]:
    x = _log_batch_size(batch_size_title)
    y = _K_AXIS
    lines = (
        alt.Chart()
        .mark_line(interpolate="step-after", strokeWidth=3, opacity=0.85)
        .encode(
            x=x,
            y=y,
            tooltip=[alt.Tooltip("line:N", title="rule"), "range:N", "k:Q"],
            **_line_encoding("line", RULES, "decision rule"),
        )
        .transform_filter(_layer("step"))
    )
    picks = (
        alt.Chart()
        .mark_point(filled=True)
        .encode(
            x=x,
            y=y,
            color=alt.Color("line:N").legend(None),
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
    differences = (
        alt.Chart()
        .mark_rule(color="#d62728", opacity=0.25, strokeWidth=10)
        .encode(x=x)
        .transform_filter(_layer("pick") & alt.datum.differs & (alt.datum.line == "seed"))
    )
    chart = alt.LayerChart(
        data=alt.NamedData(name=_ROWS),
        layer=[differences, lines, picks],
        width=520,
        height=240,
        title=alt.TitleParams("The seed's rule against the confident rule"),
    )
    return _without_data(chart)


# --------------------------------------------------------------------------- charts


def objective_chart(result: TuningResult) -> Chart:
    """Per batch size, the objective against K (see the module docstring)."""
    settings = result.settings
    template = _faceted_template(
        axis_title(settings.objective), _batch_size_title(result), conservative=True
    )
    title = {
        "text": f"{settings.objective} against K ({settings.direction};"
        " median with MAD error bars)",
        "subtitle": [
            f"dark tick: conservative score (median {'-' if settings.maximize else '+'} "
            f"{settings.uncertainty_penalty} x 1.4826 x MAD), the score the policy ranks;"
            " red dots: runs the policy excluded",
            _runs_caption(result),
        ],
    }
    runs = _run_points(result, settings.objective)
    return _chart(template, _objective_cells(result), runs, title=title)


def schedule_chart(result: TuningResult, switch_points: SwitchPoints | None = None) -> Chart:
    """The schedule as K against batch size on a log axis; points mark the measured anchors.
    With ``switch_points``, both the step and the interpolated schedule are drawn (the subtitle
    says which one ``result`` deploys), with a rule at each interpolated switch point."""
    subtitle = ["diamonds: measured anchors and their chosen K; each range runs to the next"]
    if switch_points is not None:
        subtitle[:0] = [
            f"deployed: the {_deployed(result, switch_points)} schedule; the interpolated one"
            " switches where the picks' interpolated speed-ups cross (dotted rules):",
            f"expected {switch_points.mean_gain_percent:+.2f}% over the step one on average"
            f" over batch sizes (at most {switch_points.max_gain_percent:+.2f}%)",
        ]
    title = {"text": "num_speculative_tokens_per_batch_size", "subtitle": subtitle}
    return _chart(
        _schedule_template(_batch_size_title(result)),
        *_schedule_rows(result, switch_points),
        title=title,
    )


def confidence_chart(result: TuningResult, report: ConfidenceReport) -> Chart:
    """Per batch size, every K's P(eps-good) as a bar: the K ``result`` picked, the other K
    that reach the confidence, the other contenders and the rest; a dashed rule at the
    confidence a pick needs, a dark tick at P without the flagged runs (where runs are
    flagged), ``?`` where the noise is unknown. Panels of unresolved anchors have red titles."""
    picked = result.decisions.select("anchor", pl.col("selected_k").alias("_picked"))
    anchors = report.anchors.select(
        "anchor",
        "status",
        pl.format("{}: {}", "anchor", "status").alias("panel"),
        pl.col("qualifying_k").alias("_qualifying"),
    )
    cells = (
        report.cells.join(anchors, on="anchor", how="left")
        .join(picked, on="anchor", how="left")
        .select(
            pl.lit("cell").alias("layer"),
            "anchor",
            "panel",
            "status",
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
    thresholds = anchors.select(
        pl.lit("anchor").alias("layer"),
        "anchor",
        "panel",
        pl.lit(report.settings.confidence).alias("confidence"),
    )
    unresolved = report.anchors.filter(pl.col("status") == UNRESOLVED).height
    title = {
        "text": "P(eps-good): the chance each K is within the tie tolerance"
        f" ({report.tolerance * 100:g}%) of the best",
        "subtitle": [
            f"dashed: the confidence a pick needs ({report.settings.confidence:g});"
            f" {unresolved} of {report.anchors.height} anchor(s) unresolved (red titles)",
            "dark tick: P without the flagged runs; ?: no noise estimate (one run per cell)",
        ],
    }
    template = _confidence_template(_batch_size_title(result))
    return _chart(template, cells, thresholds, title=title)


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
    title = {
        "text": "The seed's rule against the confident rule",
        "subtitle": f"{changed} of {differences.height} anchor(s) pick a different K (shaded)",
    }
    return _chart(
        _rules_template(_batch_size_title(seed)),
        _step_rows(seed.schedule, "step", "seed"),
        _step_rows(confident.schedule, "step", "confident"),
        *picks,
        title=title,
    )


def acceptance_metric(result: TuningResult) -> str | None:
    """The acceptance field to plot: the chosen ``--acceptance-var``, else acceptance length
    when the sweep has it."""
    if result.settings.acceptance is not None:
        return result.settings.acceptance
    return ACCEPTANCE_LENGTH if ACCEPTANCE_LENGTH in result.sweep.runs.columns else None


def acceptance_chart(result: TuningResult) -> Chart | None:
    """Per batch size, acceptance against K; None when the sweep has no acceptance field."""
    field = acceptance_metric(result)
    if field is None or field not in result.sweep.runs.columns:
        return None
    template = _faceted_template(axis_title(field), _batch_size_title(result), conservative=False)
    title = {
        "text": f"{field} against K (median with MAD error bars)",
        "subtitle": [
            "colour and shape: the objective cell's verdict; K=0 drafts nothing",
            _runs_caption(result),
        ],
    }
    runs = _run_points(result, field)
    return _chart(template, _acceptance_cells(result, field), runs, title=title)


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
            strokeDash=alt.StrokeDash("side:N", legend=None).scale(
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
            shape=alt.Shape("side:N", legend=None),
            tooltip=["side:N", alt.Tooltip("batch_size:Q", title="anchor"), "k:Q"],
        )
        .transform_filter(alt.datum.layer == "anchor")
    )
    layered = alt.LayerChart(
        data=alt.NamedData(name="rows"),
        layer=[steps, anchors],
        width=520,
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
