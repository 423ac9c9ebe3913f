"""The answer at a glance (:func:`headline_chart`): each K's median speed-up over K=0 (%) with
its MAD band against batch size on a log axis, the chosen K at each anchor, unresolved anchors
and doubtful picks marked, and under it the K the deployed schedule runs at every batch size
(:mod:`lib.present.charts.k_track`)."""

from __future__ import annotations

import functools
from typing import Any

import altair as alt
import polars as pl

from lib.cliffs import Cliff, find_cliffs
from lib.confidence import ConfidenceReport
from lib.deploy.tuning import Deployment
from lib.present.charts.base import (
    NEUTRAL,
    UNRESOLVED,
    VERDICTS,
    Chart,
    batch_size_axis_title,
    build_chart,
    in_layer,
    layered_template,
    log_batch_size,
    notice_chart,
    present_layers,
)
from lib.present.charts.k_track import K_TRACK, deployed_layers, deployed_rows, deployment_of
from lib.present.charts.labels import (
    LABEL_ROW_PX,
    batch_size_extent,
    label_layers,
    label_rows,
    label_rows_in,
)
from lib.schedule import TuningResult

#: Why the headline chart doubts an anchor's pick, with the symbol written above the anchor.
DOUBTS: dict[str, str] = {
    "unresolved": "?",  # no K reaches the confidence: the pick is provisional
    "pick below the confidence": "!",  # some K does, but not the exported one
}

_HEADLINE_HEIGHT = 240
#: With the deployed schedule drawn, the headline's speed-up track, the gap under it and the
#: K track under that (one plot: both share the batch-size axis and follow the container).
_SPEED_UP_TRACK = 156
_TRACK_GAP = 22


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
    rows = label_rows(no_baseline["anchor"].to_list(), labels, batch_size_extent(anchors["anchor"]))
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


@functools.lru_cache(maxsize=16)
def _headline_template(batch_size_title: str, layers: frozenset[str]) -> dict[str, Any]:
    """The layers of :func:`headline_chart` that ``layers`` names; the width follows the
    container."""
    x = log_batch_size(batch_size_title)
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
        .transform_filter(in_layer("speedup"))
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
        .transform_filter(in_layer("baseline"))
    )
    lines = (
        alt.Chart()
        .mark_line(point=alt.OverlayMarkDef(size=30))
        .encode(x=x, y=y, color=colour, detail="segment:O", tooltip=speed_up_tooltip)
        .transform_filter(in_layer("speedup"))
    )
    rejected = (
        alt.Chart()
        .mark_point(shape="cross", filled=True, size=70, color=NEUTRAL)
        .encode(
            x=x,
            y=y,
            tooltip=[*speed_up_tooltip, alt.Tooltip("reason:N", title="rejected because")],
        )
        .transform_filter(in_layer("rejected"))
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
        .transform_filter(in_layer("chosen"))
    )
    no_baseline = (
        alt.Chart()
        .mark_rule(color=NEUTRAL, strokeDash=[2, 3])
        .encode(
            x=x,
            tooltip=[alt.Tooltip("batch_size:Q", title="batch size"), alt.Tooltip("note:N")],
        )
        .transform_filter(in_layer("no_baseline"))
    )
    bottom = _SPEED_UP_TRACK if track else _HEADLINE_HEIGHT
    no_baseline_labels = [
        (
            f"no_baseline_label:{row}",
            alt.Chart()
            .mark_text(align="left", dx=3, baseline="bottom", color=NEUTRAL, text="no K=0")
            .encode(x=x, y=alt.value(bottom - 2 - LABEL_ROW_PX * row))
            .transform_filter(in_layer("no_baseline") & (alt.datum.label_row == row)),
        )
        for row in label_rows_in(layers, "no_baseline_label")
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
        .transform_filter(in_layer("doubt"))
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
        return layered_template(speed_up, width="container", height=_HEADLINE_HEIGHT)
    height = _SPEED_UP_TRACK + _TRACK_GAP + K_TRACK
    # The K track's own colour and dash scales (resolved apart from the K colours above).
    independent = alt.ScaleResolveMap(
        y="independent", color="independent", strokeDash="independent"
    )
    return layered_template(
        [alt.LayerChart(layer=speed_up), alt.LayerChart(layer=deployed_layers(x, layers, height))],
        width="container",
        height=height,
        resolve=alt.Resolve(scale=independent),
    )


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
    deployed = deployed_rows(result, deployment or deployment_of(result))
    labelled = [frame for frame in rows if "label_row" in frame.columns]
    layers = present_layers([*rows, *deployed]).union(
        *(label_layers(frame, "no_baseline_label") for frame in labelled),
        {f"deployed:{status}" for frame in deployed[:1] for status in frame["status"]},
    )
    title = "Speed-up over K=0 by batch size"
    if not layers & {"speedup", "baseline"}:
        return notice_chart(
            title, "No kept K=0 cell at any batch size: no speed-up over K=0 to show."
        )
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
    template = _headline_template(batch_size_axis_title(result), layers)
    return build_chart(template, *rows, *deployed, title={"text": title, "subtitle": subtitle})
