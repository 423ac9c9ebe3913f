"""The schedules of the seed's rule and the confident rule (:func:`rules_chart`), with the
anchors where they pick differently marked."""

from __future__ import annotations

import functools
from typing import Any

import altair as alt
import polars as pl

from lib.policy import policy_differences
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
from lib.present.charts.schedule import step_rows
from lib.schedule import TuningResult

#: The two decision rules of :func:`rules_chart`, with colour and dash.
RULES: dict[str, tuple[str, list[int]]] = {
    "seed": ("#4c78a8", [1, 0]),
    "confident": ("#f58518", [6, 3]),
}


@functools.lru_cache(maxsize=8)
def _rules_template(batch_size_title: str, layers: frozenset[str]) -> dict[str, Any]:
    """The layers of the rules chart that ``layers`` names: ``band`` (where the rules differ),
    ``step`` (their schedules) and ``pick``."""
    x = log_batch_size(batch_size_title)
    y = K_AXIS
    line_encoding = colour_and_dash("line", RULES, "decision rule")
    lines = (
        alt.Chart()
        .mark_line(interpolate="step-after", strokeWidth=3, opacity=0.85)
        .encode(
            x=x,
            y=y,
            tooltip=[alt.Tooltip("line:N", title="rule"), "range:N", "k:Q"],
            **line_encoding,
        )
        .transform_filter(in_layer("step"))
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
        .transform_filter(in_layer("pick"))
    )
    band = (
        alt.Chart()
        .mark_rule(color=VERDICTS["chosen"][0], opacity=0.25, strokeWidth=10)
        .encode(x=x)
        .transform_filter(in_layer("pick") & alt.datum.differs & (alt.datum.line == "seed"))
    )
    named = [("band", band), ("step", lines), ("pick", picks)]
    return layered_template(
        [layer for name, layer in named if name in layers],
        width="container",
        height=240,
        title=alt.TitleParams("The seed's rule against the confident rule"),
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
        step_rows(seed.schedule, "step", "seed"),
        step_rows(confident.schedule, "step", "confident"),
        *picks,
    ]
    layers = present_layers(rows)
    if not layers:
        return notice_chart(title_text, "Neither rule picks a K anywhere.")
    if picks[0].filter(pl.col("differs")).height:
        layers |= {"band"}
    title = {
        "text": title_text,
        "subtitle": f"{changed} of {differences.height} anchor(s) pick a different K (shaded)",
    }
    return build_chart(_rules_template(batch_size_axis_title(seed), layers), *rows, title=title)
