"""Measure where the traffic is (``docs/traffic.md``): the measurement plan's reruns and new
anchors ordered by the share of a given traffic mix each one decides, largest first, and said.

- A rerun at anchor ``a`` decides the K the step schedule runs from ``a`` up to the next anchor
  (vLLM gives a batch size between anchors the lower anchor's K): its share is the mix's
  weight on ``[a, next anchor)`` (the last anchor: ``a`` and above, where vLLM carries its K).
- A new anchor between ``lower`` and ``upper`` decides where to switch in that stretch: its
  share is the weight strictly between them.

Rows of equal share keep the plan's own order (a stable sort). Only a mix the user gave
reorders the plan; the sweep's own mix is the sweep's choice of batch sizes, not traffic.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import polars as pl

from lib.measurement_plan import MeasurementPlan
from lib.numbers import percent_text
from lib.traffic import TrafficMix

__all__ = ["anchor_share", "by_traffic", "stretch_share"]


def anchor_share(mix: TrafficMix, anchors: Sequence[int], anchor: int) -> float:
    """The mix's weight on ``[anchor, next anchor)`` (the last anchor: ``anchor`` and up).

    >>> from lib.traffic import mix_of
    >>> mix = mix_of({1: 1, 2: 1, 4: 1, 9: 1}, "t", "csv-weights", 4)
    >>> anchor_share(mix, [1, 4], 1), anchor_share(mix, [1, 4], 4)
    (0.5, 0.5)
    """
    later = [a for a in anchors if a > anchor]
    end = min(later) if later else None
    return float(
        sum(
            w
            for b, w in zip(mix.batch_sizes, mix.weights, strict=True)
            if b >= anchor and (end is None or b < end)
        )
    )


def stretch_share(mix: TrafficMix, lower: int, upper: int) -> float:
    """The mix's weight strictly between ``lower`` and ``upper``.

    >>> from lib.traffic import mix_of
    >>> stretch_share(mix_of({1: 1, 2: 1, 4: 2}, "t", "csv-weights", 3), 1, 4)
    0.25
    """
    weights = zip(mix.batch_sizes, mix.weights, strict=True)
    return float(sum(w for b, w in weights if lower < b < upper))


def by_traffic(plan: MeasurementPlan, mix: TrafficMix, anchors: Sequence[int]) -> MeasurementPlan:
    """``plan`` with each rerun anchor's group and each new anchor ordered by the share of
    ``mix`` it decides (largest first), a ``traffic_share`` column on both frames, and
    ``ordered_by`` saying so. A plan with nothing to measure is returned as it is."""
    if plan.empty:
        return plan
    order = {a: anchor_share(mix, anchors, a) for a in anchors}
    reruns = plan.reruns.with_columns(
        pl.col("batch_size")
        .replace_strict(order, default=0.0, return_dtype=pl.Float64)
        .round(6)
        .alias("traffic_share")
    ).sort("traffic_share", descending=True, maintain_order=True)
    new = plan.new_anchors.with_columns(
        pl.Series(
            "traffic_share",
            [
                round(stretch_share(mix, lower, upper), 6)
                for lower, upper in plan.new_anchors.select("lower_anchor", "upper_anchor").rows()
            ],
            dtype=pl.Float64,
        )
    ).sort("traffic_share", descending=True, maintain_order=True)
    shares = [
        *(f"batch {a}: {percent_text(100 * s)}" for a, s in reruns.select("batch_size",
            "traffic_share").unique(maintain_order=True).rows()),
        *(f"new anchor {b}: {percent_text(100 * s)}" for b, s in new.select("batch_size",
            "traffic_share").rows()),
    ]  # fmt: skip
    statement = (
        f"ordered by the share of the traffic each decides ({mix.description()}): "
        + ", ".join(shares)
    )
    return dataclasses.replace(plan, reruns=reruns, new_anchors=new, ordered_by=statement)
