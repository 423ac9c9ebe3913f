"""The schedule as a step chart over a log batch-size axis (:func:`schedule_chart`), with the
measured anchors marked and, given the switch-point analysis, the interpolated schedule as a
second line and a vertical rule at each interpolated switch point."""

from __future__ import annotations

import functools
from typing import Any

import altair as alt
import polars as pl

from lib.numbers import signed_percent_text
from lib.present.charts.base import (
    K_AXIS,
    VERDICTS,
    Chart,
    batch_size_axis_title,
    build_chart,
    colour_and_dash,
    in_layer,
    layered_template,
    log_batch_size,
    notice_chart,
    present_layers,
)
from lib.present.charts.labels import LABEL_ROW_PX, label_layers, label_rows, label_rows_in
from lib.schedule import Schedule, TuningResult
from lib.switch_points import SwitchPoints

#: The two schedules of the schedule chart: vLLM's steps at the anchors, and the one that
#: switches at the interpolated crossovers (lib.switch_points), in legend order, with colour and
#: dash.
SCHEDULE_LINES: dict[str, tuple[str, list[int]]] = {
    "step": ("#4c78a8", [1, 0]),
    "interpolated": ("#e45756", [6, 3]),
}

#: The rows of the schedule chart whose range is written beside the line.
_RANGE_LABEL = alt.datum.labelled & (alt.datum.range != "end")


def step_rows(
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
            step_rows(result.schedule, "step", "step", labelled=True),
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
        step_rows(switch_points.step_schedule, "step", "step", deployed == "step"),
        step_rows(
            switch_points.schedule, "interpolated", "interpolated", deployed == "interpolated"
        ),
        switches,
        _decided_anchors(result),
    ]


@functools.lru_cache(maxsize=16)
def _schedule_template(batch_size_title: str, layers: frozenset[str]) -> dict[str, Any]:
    """The layers of :func:`schedule_chart` that ``layers`` names (:func:`_schedule_layers`)."""
    x = log_batch_size(batch_size_title)
    y = K_AXIS
    line_encoding = colour_and_dash("line", SCHEDULE_LINES, "schedule")
    lines = (
        alt.Chart()
        .mark_line(interpolate="step-after", strokeWidth=3)
        .encode(
            x=x,
            y=y,
            tooltip=[alt.Tooltip("line:N", title="schedule"), "range:N", "k:Q"],
            **line_encoding,
        )
        .transform_filter(in_layer("step") | in_layer("interpolated"))
    )
    labels = [
        (
            f"range_label:{row}",
            alt.Chart()
            .mark_text(align="left", dx=4, dy=-8 - LABEL_ROW_PX * row)
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
        for row in label_rows_in(layers, "range_label")
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
        .transform_filter(in_layer("switch"))
    )
    switch_labels = [
        (
            f"switch_label:{row}",
            alt.Chart()
            .mark_text(align="left", dx=3, baseline="top", color=SCHEDULE_LINES["interpolated"][0])
            .encode(x=x, y=alt.value(2 + LABEL_ROW_PX * row), text=alt.Text("change:N"))
            .transform_filter(in_layer("switch") & (alt.datum.label_row == row)),
        )
        for row in label_rows_in(layers, "switch_label")
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
        .transform_filter(in_layer("anchor"))
    )
    named = [("line", lines), *labels, ("switch", switches), *switch_labels, ("anchor", anchors)]
    return layered_template(
        [layer for name, layer in named if name in layers],
        width="container",
        height=240,
        title=alt.TitleParams("num_speculative_tokens_per_batch_size"),
    )


def _schedule_layers(rows: list[pl.DataFrame]) -> frozenset[str]:
    """The layers of the schedule chart that have rows: ``line`` (either schedule), a
    ``range_label`` layer per row of range labels, ``switch`` with a ``switch_label`` layer
    per row of their labels, and ``anchor``."""
    present = present_layers(rows)
    names = {"switch", "anchor"} & present
    if present & {"step", "interpolated"}:
        names.add("line")
    for frame in rows:
        if "labelled" in frame.columns:
            labelled = frame.filter(pl.col("labelled") & (pl.col("range") != "end"))
            names |= label_layers(labelled, "range_label")
        if "change" in frame.columns:
            names |= label_layers(frame, "switch_label")
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
        return notice_chart(title_text, "No schedule and no decided batch size (see the errors).")
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
    return build_chart(
        _schedule_template(batch_size_axis_title(result), layers), *rows, title=title
    )
