"""Small charts, one per batch size, of a field against K: :func:`objective_charts` (every run
a faint point, the median with MAD error bars, the conservative score the policy ranks, and each
cell's verdict as colour and shape) and :func:`acceptance_charts` (acceptance length, or the
chosen acceptance field, with the objective cell's verdict). Small charts of a fixed width wrap
to the page's width (``mo.hstack(charts, wrap=True)``); :func:`lib.present.charts.base.image_grid`
puts them into one image."""

from __future__ import annotations

import functools
from typing import Any

import altair as alt
import polars as pl

from lib.present.charts.base import (
    K_CATEGORIES,
    NEUTRAL,
    SCORE_TICK,
    SMALL_WIDTH,
    VERDICTS,
    Chart,
    axis_title,
    batch_size_axis_title,
    build_chart,
    in_layer,
    layered_template,
)
from lib.present.charts.cells import acceptance_cells, objective_cells, run_points, runs_caption
from lib.schedule import TuningResult

ACCEPTANCE_LENGTH = "spec_decode_acceptance_length"

#: The plot height of one batch size's small chart.
_HEIGHT = 200


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
    x = K_CATEGORIES
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
        .transform_filter(in_layer("run"))
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
        .transform_filter(in_layer("cell"))
    )
    line = (
        alt.Chart()
        .mark_line(color=VERDICTS["kept"][0], opacity=0.5, strokeDash=[4, 3])
        .encode(x=x, y=alt.Y("median:Q", title=y_title).scale(zero=False))
        .transform_filter(in_layer("cell"))
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
        .transform_filter(in_layer("cell"))
    )
    score = (
        alt.Chart()
        .mark_tick(color=SCORE_TICK, thickness=2, size=14)
        .encode(
            x=x,
            y=alt.Y("conservative:Q", title=y_title).scale(zero=False),
            tooltip=tooltip,
        )
        .transform_filter(in_layer("cell") & (alt.datum.verdict != "rejected"))
    )
    named = [("run", runs), ("cell", bars), ("cell", line), ("score", score), ("cell", medians)]
    return [chart for name, chart in named if name in layers]


@functools.lru_cache(maxsize=32)
def _small_template(y_title: str, conservative: bool, layers: frozenset[str]) -> dict[str, Any]:
    """One batch size's chart of a field against K (:func:`_cell_layers`)."""
    layer = _cell_layers(y_title, conservative, layers)
    return layered_template(layer, width=SMALL_WIDTH, height=_HEIGHT)


def _small_charts(
    result: TuningResult, cells: pl.DataFrame, field: str, conservative: bool
) -> list[Chart]:
    """One chart of ``field`` against K per anchor of ``cells`` that has a finite median (an
    anchor whose runs were all excluded has nothing to draw), in batch-size order. Each leaves
    out the layers it has no rows for."""
    runs = run_points(result, field)
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
        built.append((anchor, build_chart(template, rows, runs.get(anchor, ""), title=title)))
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
    return _small_charts(result, objective_cells(result), result.settings.objective, True)


def objective_caption(result: TuningResult) -> str:
    """How to read :func:`objective_charts` for ``result``, in one paragraph: the objective, its
    direction, the conservative score's formula, which runs the dots show, and the batch
    sizes that have no chart."""
    settings = result.settings
    sign = "-" if settings.maximize else "+"
    caption = (
        f"{settings.objective} against K ({settings.direction}; median with MAD error bars),"
        f" one chart per {batch_size_axis_title(result)}. Purple tick: conservative score (median"
        f" {sign} {settings.uncertainty_penalty} x 1.4826 x MAD), the score the policy ranks;"
        f" red dots: runs the policy excluded; {runs_caption(result)}."
    )
    undrawn = _undrawn_anchors(result.cells)
    if undrawn:
        caption += (
            f" No chart at batch size {', '.join(map(str, undrawn))}: every run there was excluded."
        )
    return caption


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
    return _small_charts(result, acceptance_cells(result, field), field, False)


def acceptance_caption(result: TuningResult) -> str:
    """How to read :func:`acceptance_charts` for ``result`` (or that there are none)."""
    field = acceptance_metric(result)
    if field is None or field not in result.sweep.runs.columns:
        return "The sweep has no acceptance field to plot."
    return (
        f"{field} against K (median with MAD error bars), one chart per"
        f" {batch_size_axis_title(result)}. Colour and shape: the objective cell's verdict; K=0"
        f" drafts nothing; {runs_caption(result)}."
    )
