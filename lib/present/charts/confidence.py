"""Per batch size, P(eps-good) of every K as bars, against the confidence a pick needs
(:func:`confidence_charts`); unresolved anchors stand out. Small charts, like the objective's."""

from __future__ import annotations

import functools
from typing import Any

import altair as alt
import polars as pl

from lib.confidence import ConfidenceReport
from lib.present.charts.base import (
    K_CATEGORIES,
    NEUTRAL,
    SCORE_TICK,
    SMALL_WIDTH,
    UNRESOLVED,
    VERDICTS,
    Chart,
    batch_size_axis_title,
    build_chart,
    in_layer,
    layered_template,
)
from lib.schedule import TuningResult

#: confidence, other contenders (could still be the right pick), and the rest.
CONFIDENCE_ROLES: dict[str, str] = {
    "picked": "#d62728",
    "reaches the confidence": "#54a24b",
    "contender": "#f58518",
    "other": "#bab0ac",
}

_CONFIDENCE_HEIGHT = 120


@functools.lru_cache(maxsize=8)
def _confidence_template(layers: frozenset[str]) -> dict[str, Any]:
    """One anchor's confidence chart: the ``threshold`` rule, and the ``bars``, the
    ``without_flagged`` ticks and the ``unknown`` marks when ``layers`` names them."""
    x = K_CATEGORIES
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
        .transform_filter(in_layer("cell"))
    )
    without_flagged = (
        alt.Chart()
        .mark_tick(color=SCORE_TICK, thickness=2, size=12)
        .encode(
            x=x,
            y=alt.Y("p_without_flagged:Q", title="P(eps-good)"),
            tooltip=tooltip,
        )
        .transform_filter(in_layer("cell") & (alt.datum.p_without_flagged != None))  # noqa: E711
    )
    unknown = (
        alt.Chart()
        .mark_text(text="?", dy=-6, color=NEUTRAL, fontSize=13)
        .encode(x=x, y=alt.value(_CONFIDENCE_HEIGHT), tooltip=tooltip)
        .transform_filter(in_layer("cell") & (alt.datum.p_eps_good == None))  # noqa: E711
    )
    threshold = (
        alt.Chart()
        .mark_rule(color=NEUTRAL, strokeDash=[4, 3])
        .encode(
            y=alt.Y("confidence:Q", title="P(eps-good)"),
            tooltip=[alt.Tooltip("confidence:Q", title="confidence a pick needs")],
        )
        .transform_filter(in_layer("threshold"))
    )
    named = [
        ("bars", bars),
        ("without_flagged", without_flagged),
        ("unknown", unknown),
        ("threshold", threshold),
    ]
    drawn = [layer for name, layer in named if name in layers]
    return layered_template(drawn, width=SMALL_WIDTH, height=_CONFIDENCE_HEIGHT)


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
        built.append(build_chart(template, rows, threshold, title=title))
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
        f" {batch_size_axis_title(result)}. Dashed: the confidence a pick needs"
        f" ({report.settings.confidence:g}); {unresolved} of {report.anchors.height} anchor(s)"
        " unresolved (red titles). Purple tick: P without the flagged runs; ?: no noise"
        " estimate (one run per cell)."
    )
