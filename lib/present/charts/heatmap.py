"""The chosen K over batch size x prompt length (:func:`context_heatmap`), unresolved cells and
cells where the batch-only schedule loses more than the tie tolerance marked."""

from __future__ import annotations

import functools
from typing import Any

import altair as alt
import polars as pl

from lib.present.charts.base import (
    NEUTRAL,
    UNRESOLVED,
    Chart,
    build_chart,
    in_layer,
    layered_template,
    present_layers,
)

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
        .transform_filter(in_layer("cell") & (alt.datum.selected_k != None))  # noqa: E711
    )
    undecided = (
        alt.Chart()
        .mark_rect(color=NEUTRAL, opacity=0.3)
        .encode(x=x, y=y, tooltip=tooltip)
        .transform_filter(in_layer("cell") & (alt.datum.selected_k == None))  # noqa: E711
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
        .transform_filter(in_layer("cell"))
    )
    loses = (
        alt.Chart()
        .mark_rect(fillOpacity=0, stroke=_LOSS_STROKE, strokeWidth=3)
        .encode(x=x, y=y, tooltip=tooltip)
        .transform_filter(in_layer("loses"))
    )
    named = [("cell", cells), ("undecided", undecided), ("cell", labels), ("loses", loses)]
    return layered_template(
        [layer for name, layer in named if name in layers],
        width={"step": _HEATMAP_CELL_PX},
        height={"step": _HEATMAP_CELL_PX * 3 // 4},
    )


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
        mark = "?" if cell["status"] == UNRESOLVED else ""
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
    layers = set(present_layers([frame]))
    if any(row["selected_k"] is None for row in rows):
        layers.add("undecided")
    subtitle = ["colour and text: the chosen K; ?: unresolved"]
    if losing:
        subtitle.append(
            f"red outline: the batch-only schedule loses more than {tolerance_percent:g}%"
        )
    return build_chart(
        _heatmap_template(frozenset(layers)),
        frame,
        title={"text": "Chosen K by batch size and prompt length", "subtitle": subtitle},
    )
