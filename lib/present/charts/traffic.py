"""The traffic mix under the headline chart (:func:`traffic_chart`): the share of the server's
busy time at each batch size (a histogram on the headline's log batch-size axis), each bar
marked by what backs the answer there (an anchor: measured; between anchors: interpolated;
above the largest anchor: not measured, left out), and the three answers of
:mod:`lib.traffic_value` (the schedule, the best static K, K=0) in the title, the words the
CLI's ``traffic`` line uses."""

from __future__ import annotations

import functools
from typing import Any

import altair as alt
import polars as pl

from lib.deploy.traffic import traffic_in
from lib.numbers import objective_text
from lib.present.charts.base import (
    NEUTRAL,
    Chart,
    build_chart,
    layered_template,
    log_batch_size,
)
from lib.schedule import TuningResult
from lib.traffic_value import INTERVAL_LEVEL, TrafficValue, bracket

__all__ = ["MIX_STATUSES", "traffic_chart", "traffic_rows"]

#: What backs the answer at a batch size of the mix, with its bar colour.
MIX_STATUSES: dict[str, str] = {
    "measured (an anchor)": "#4c78a8",
    "interpolated between anchors": "#9ecae9",
    "above the largest anchor: left out": NEUTRAL,
}
_HEIGHT = 120


def traffic_rows(value: TrafficValue) -> pl.DataFrame:
    """One row per batch size of the mix: its share of the busy time (%) and its status."""
    statuses = list(MIX_STATUSES)
    rows = []
    for batch, weight in zip(value.mix.batch_sizes, value.mix.weights, strict=True):
        where = bracket(value.anchors, batch)
        if where is None:
            status = statuses[2]
        else:
            status = statuses[0] if where[0] == where[1] else statuses[1]
        rows.append({"batch_size": batch, "share_percent": 100 * weight, "status": status})
    return pl.DataFrame(
        rows, schema={"batch_size": pl.Int64, "share_percent": pl.Float64, "status": pl.Utf8}
    )


@functools.lru_cache(maxsize=8)
def _template(batch_size_title: str) -> dict[str, Any]:
    legend = alt.Legend(title="at this batch size the answer is", orient="top")
    bars = (
        alt.Chart()
        .mark_bar(size=5)
        .encode(
            x=log_batch_size(batch_size_title),
            y=alt.Y("share_percent:Q", title="share of busy time (%)"),
            color=alt.Color(
                "status:N",
                scale=alt.Scale(domain=list(MIX_STATUSES), range=list(MIX_STATUSES.values())),
            ).legend(legend),
            tooltip=[
                alt.Tooltip("batch_size:Q", title="batch size"),
                alt.Tooltip("share_percent:Q", title="share (%)", format=".2f"),
                alt.Tooltip("status:N"),
            ],
        )
    )
    return layered_template([bars], width="container", height=_HEIGHT)


def _answers(value: TrafficValue) -> list[str]:
    """The three answers, one subtitle line each."""
    lines = [f"the schedule: expected {value.objective} {objective_text(value.schedule.expected)}"]
    lines += value.answers()
    lines.append(
        f"[{INTERVAL_LEVEL:.0%} interval]; bars between anchors: interpolated, nothing measured"
        if value.interval_known
        else "no interval: one run per cell"
    )
    return lines


def traffic_chart(result: TuningResult) -> Chart | None:
    """The mix the result was weighed on (:func:`lib.deploy.traffic.with_traffic`) and the
    three answers; None when it was not weighed."""
    value = traffic_in(result)
    if value is None:
        return None
    source = "your traffic" if value.mix.given else "the sweep's own runs (not your traffic)"
    title = {"text": f"The mix of batch sizes: {source}", "subtitle": _answers(value)}
    axis = f"running batch size ({result.sweep.batch_size_var} in the sweep)"
    return build_chart(_template(axis), traffic_rows(value), title=title)
