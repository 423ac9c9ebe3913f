"""Two tunings' schedules (``tune-spec-k diff``) as step lines (:func:`comparison_chart`), with
each side's measured anchors."""

from __future__ import annotations

import json
from typing import Any

import altair as alt

from lib.loop.diff import DiffReport, Side
from lib.present.charts.base import K_AXIS, Chart, in_layer, layered_template, log_batch_size

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
    x = log_batch_size("batch size")
    y = K_AXIS
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
        .transform_filter(in_layer("step"))
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
        .transform_filter(in_layer("anchor"))
    )
    template = layered_template(
        [steps, anchors],
        width="container",
        height=220,
        title=alt.TitleParams(
            "A and B: num_speculative_tokens_per_batch_size",
            subtitle=[f"A: {report.a.label}", f"B: {report.b.label}"],
        ),
    )
    rows = _side_rows(report.a, "A") + _side_rows(report.b, "B")
    return Chart(template, json.dumps(rows))
