"""The headline chart's K track: the K the deployed schedule runs at every batch size, one rule
per stretch (:func:`lib.deploy.constraints.deployed_stretches`), with what backs it (measured,
not measured, capped) as colour and dash, and a vertical rule where K changes."""

from __future__ import annotations

import itertools
from typing import Any

import altair as alt
import polars as pl

from lib.deploy.constraints import STRETCH_STATUSES, CappedRange, deployed_stretches
from lib.deploy.tuning import Deployment
from lib.present.charts.base import NEUTRAL, in_layer
from lib.schedule import TuningResult

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

#: The K track's height, under the headline's speed-up track (one plot: both share the
#: batch-size axis and follow the container).
K_TRACK = 60


def deployment_of(result: TuningResult) -> Deployment | None:
    """The capture check :func:`lib.deploy.tuning.deploy_analysis` attached to ``result``."""
    deployment = result.additions.get("deployment")
    return deployment if isinstance(deployment, Deployment) else None


def _capped_note(capped: tuple[CappedRange, ...], lo: int) -> str:
    """What a capped stretch starting at ``lo`` runs instead, in the check's words."""
    for span in capped:
        if span.lo <= lo <= span.hi:
            return f"K={span.capped_k} instead of K={span.measured_k}: capped, not measured"
    return ""


def deployed_rows(result: TuningResult, deployment: Deployment | None) -> list[pl.DataFrame]:
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


def deployed_layers(x: Any, layers: frozenset[str], height: int) -> list[alt.Chart]:
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
        scale=alt.Scale(range=[height, height - K_TRACK], zero=True, nice=False, padding=6),
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
        .transform_filter(in_layer("deployed"))
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
        .transform_filter(in_layer("jump"))
    )
    anchors = (
        alt.Chart()
        .mark_point(filled=True, size=45, opacity=1, color=DEPLOYED_MARKS["measured"][0])
        .encode(x=x, y=y, tooltip=tooltip)
        .transform_filter(in_layer("deployed") & (alt.datum.status == "measured"))
    )
    named = [("deployed", stretches), ("jump", jumps), ("deployed:measured", anchors)]
    return [layer for name, layer in named if name in layers]
