"""Where to switch K between anchors (``docs/confidence.md``, "Switch points and
the interpolated schedule").

vLLM's lookup gives a batch size between two anchors the lower anchor's K, so a step schedule
switches exactly at the upper anchor. Between anchors nothing was measured; the best guess is
that each K's log speed-up over a baseline K changes linearly in log(batch size). Then, between
two neighbouring anchors whose picks differ (``from_k`` below, ``to_k`` above), the upper
envelope of the two picks' curves at every integer batch size (an exact tie to the smaller K)
switches once: the **switch point**, the first batch size past the **crossover** where the
curves meet. The **interpolated schedule** is the step schedule with every switch moved to its
switch point. Each anchor keeps the pick the policy made there, and only the two neighbouring
picks compete between them: a K picked at neither anchor would enter on the strength of two
straight lines alone.

The policy's picks do not always follow the means (the seed's tie rule and MAD penalty, the
confident rule's P(eps-good)). Where the upper pick's mean is not above the lower pick's at the
upper anchor, the switch stays at the upper anchor, as in the step schedule; where it is above
already at the lower anchor, the switch follows right after the lower anchor. A note says so.

The expected gain of the interpolated schedule over the step schedule comes from the same
interpolated curves: the mean, over every integer batch size up to the largest, of
``exp(curve(interpolated K) - curve(step K)) - 1``, so batch sizes where both agree count 0.
For a minimised objective the curves hold ``-log x``: the gain is a speed-up (``x_step / x - 1``).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from lib.confidence import ConfidenceReport
from lib.schedule import Range, Schedule, TuningResult

__all__ = ["CURVE_SCHEMA", "SWITCH_SCHEMA", "SwitchPoints", "find_switch_points"]

#: One row per (integer batch size, K): the interpolated log speed-up over the baseline K.
CURVE_SCHEMA = pl.Schema(
    {
        "batch_size": pl.Int64,
        "k": pl.Int64,
        "log_gain": pl.Float64,  # mean log objective minus the baseline's (negated when minimising)
        "measured": pl.Boolean,  # the batch size is an anchor where this K was measured
    }
)

#: One row per pair of neighbouring anchors whose picks differ.
SWITCH_SCHEMA = pl.Schema(
    {
        "lower_anchor": pl.Int64,
        "upper_anchor": pl.Int64,
        "from_k": pl.Int64,
        "to_k": pl.Int64,
        "crossover": pl.Float64,  # batch size where the two curves cross; null when not between
        "switch_at": pl.Int64,  # first batch size that runs to_k in the interpolated schedule
        "step_switch_at": pl.Int64,  # first batch size that runs to_k in the step schedule
        "changed_batch_sizes": pl.Int64,
        "gain_percent": pl.Float64,  # mean expected gain over the changed batch sizes
        "note": pl.Utf8,
    }
)


@dataclass(frozen=True, eq=False)
class SwitchPoints:
    """Switch points, the interpolated schedule and its expected gain over the step one.
    :attr:`curves` (:data:`CURVE_SCHEMA`) is built when first read: the CLI never needs it."""

    baseline_k: int | None
    curve_arrays: dict[int, np.ndarray[Any, Any]]
    gains: dict[tuple[int, int], float]
    switches: pl.DataFrame
    step_schedule: Schedule
    schedule: Schedule
    mean_gain_percent: float
    max_gain_percent: float

    @functools.cached_property
    def curves(self) -> pl.DataFrame:
        """Every K's interpolated log speed-up at every integer batch size it spans."""
        return _curve_frame(self.curve_arrays, self.gains)

    def to_json(self, emitted: str) -> dict[str, Any]:
        """The ``switch_points`` key of the result JSON; ``emitted`` names the schedule the
        JSON deploys (``"step"`` or ``"interpolated"``)."""
        return {
            "schedule_emitted": emitted,
            "step_schedule": self.step_schedule.to_json(),
            "interpolated_schedule": self.schedule.to_json(),
            "baseline_k": self.baseline_k,
            "expected_gain_percent": {
                "mean_over_batch_sizes": round(self.mean_gain_percent, 4),
                "max": round(self.max_gain_percent, 4),
            },
            "switches": [
                {key: _rounded(value) for key, value in row.items()}
                for row in self.switches.to_dicts()
            ],
        }


def find_switch_points(result: TuningResult, report: ConfidenceReport) -> SwitchPoints | None:
    """Switch points for ``result``'s picks from ``report``'s per-cell means; None when
    ``result`` has no schedule."""
    if result.schedule is None or result.max_batch_size is None:
        return None
    picks = [
        (int(a), int(k))
        for a, k in zip(result.decisions["anchor"], result.decisions["selected_k"], strict=True)
    ]
    anchors = [a for a, _ in picks]
    scores = {
        (int(row["anchor"]), int(row["k"])): float(row["mean_score"])
        for row in report.cells.select("anchor", "k", "mean_score").to_dicts()
        if math.isfinite(row["mean_score"])
    }
    baseline = _baseline(anchors, scores)
    gains = {
        (a, k): score - (scores[(a, baseline)] if baseline is not None else 0.0)
        for (a, k), score in scores.items()
    }
    last = max(result.max_batch_size, anchors[-1])
    step = np.zeros(last + 1, dtype=np.int64)
    for (anchor, k), (upper, _) in zip(picks, [*picks[1:], (last + 1, -1)], strict=True):
        step[anchor:upper] = k
    chosen = step.copy()
    rows: list[dict[str, Any]] = []
    for (lower, from_k), (upper, to_k) in itertools.pairwise(picks):
        if from_k == to_k:
            continue
        switch_at, crossover, note = _switch(lower, upper, from_k, to_k, gains)
        chosen[switch_at:upper] = to_k
        rows.append(
            {
                "lower_anchor": lower,
                "upper_anchor": upper,
                "from_k": from_k,
                "to_k": to_k,
                "crossover": crossover,
                "switch_at": switch_at,
                "step_switch_at": upper,
                "note": note,
            }
        )
    curves = _curves(anchors, gains, last)
    gain = _gain_by_batch_size(curves, step, chosen, anchors[0])
    for row in rows:
        changed = gain[row["switch_at"] - anchors[0] : row["upper_anchor"] - anchors[0]]
        row["changed_batch_sizes"] = len(changed)
        row["gain_percent"] = float(changed.mean()) if len(changed) else 0.0
    return SwitchPoints(
        baseline_k=baseline,
        curve_arrays=curves,
        gains=gains,
        switches=pl.DataFrame(rows, schema=SWITCH_SCHEMA),
        step_schedule=result.schedule,
        schedule=Schedule(_ranges(chosen, anchors[0], last)),
        mean_gain_percent=float(gain.mean()) if len(gain) else 0.0,
        max_gain_percent=float(gain.max()) if len(gain) else 0.0,
    )


def _baseline(anchors: Sequence[int], scores: dict[tuple[int, int], float]) -> int | None:
    """K=0 when measured at every anchor, else the smallest K that is: the envelope does not
    depend on the baseline (it shifts every K's curve alike), only the reported speed-ups do."""
    everywhere = sorted(
        k for (a, k) in scores if a == anchors[0] and all((b, k) in scores for b in anchors)
    )
    return everywhere[0] if everywhere else None


def _switch(
    lower: int, upper: int, from_k: int, to_k: int, gains: dict[tuple[int, int], float]
) -> tuple[int, float | None, str | None]:
    """(switch_at, crossover, note) for one pair of neighbouring anchors."""
    needed = [(a, k) for a in (lower, upper) for k in (from_k, to_k)]
    missing = [f"K={k} at {a}" for a, k in needed if (a, k) not in gains]
    if missing:
        return upper, None, "no mean for " + ", ".join(missing) + ": switching at the anchor"
    low = gains[(lower, to_k)] - gains[(lower, from_k)]
    high = gains[(upper, to_k)] - gains[(upper, from_k)]
    span = math.log(upper) - math.log(lower)
    crossover = None
    if low != high and (low <= 0 <= high or high <= 0 <= low):
        crossover = math.exp(math.log(lower) + span * low / (low - high))
    sizes = np.arange(lower + 1, upper + 1)
    advantage = low + (high - low) * (np.log(sizes) - math.log(lower)) / span
    # The upper envelope of the two curves; an exact tie goes to the smaller K.
    prefer = advantage >= 0 if to_k < from_k else advantage > 0
    if not prefer[-1]:
        return (
            upper,
            crossover,
            f"K={to_k}'s mean is not above K={from_k}'s at {upper} (the pick there rests on"
            " the rule's tie, penalty or confidence), so the switch stays at the anchor",
        )
    not_yet = np.flatnonzero(~prefer)
    if len(not_yet):
        return int(sizes[not_yet[-1] + 1]), crossover, None
    return (
        lower + 1,
        crossover,
        f"K={to_k}'s mean is already above K={from_k}'s at {lower} (the pick there rests on"
        " the rule's tie, penalty or confidence), so the switch follows right after it",
    )


def _curves(
    anchors: Sequence[int], gains: dict[tuple[int, int], float], last: int
) -> dict[int, np.ndarray[Any, Any]]:
    """Every K's log gain at batch sizes ``0..last`` (NaN outside the anchors where it was
    measured; beyond the last anchor held flat, as vLLM holds the last K)."""
    curves = {}
    sizes = np.arange(last + 1)
    for k in sorted({k for _, k in gains}):
        measured = [a for a in anchors if (a, k) in gains]
        top = last if measured[-1] == anchors[-1] else measured[-1]
        inside = (sizes >= measured[0]) & (sizes <= top)
        values = np.full(last + 1, np.nan)
        values[inside] = np.interp(
            np.log(sizes[inside]), np.log(measured), [gains[(a, k)] for a in measured]
        )
        curves[k] = values
    return curves


def _curve_frame(
    curves: dict[int, np.ndarray[Any, Any]], gains: dict[tuple[int, int], float]
) -> pl.DataFrame:
    if not curves:
        return pl.DataFrame(schema=CURVE_SCHEMA)
    ks = np.array(list(curves))
    values = np.stack(list(curves.values()), axis=1)  # batch size x K
    measured = np.zeros(values.shape, dtype=bool)
    for column, k in enumerate(ks):
        measured[[a for a, j in gains if j == k], column] = True
    sizes, columns = np.nonzero(~np.isnan(values))
    # As lists: Polars imports numpy.ma (tens of ms) the first time it reads a NumPy array.
    return pl.DataFrame(
        {
            "batch_size": sizes.tolist(),
            "k": ks[columns].tolist(),
            "log_gain": values[sizes, columns].tolist(),
            "measured": measured[sizes, columns].tolist(),
        }
    ).cast(CURVE_SCHEMA)


def _gain_by_batch_size(
    curves: dict[int, np.ndarray[Any, Any]],
    step: np.ndarray[Any, Any],
    chosen: np.ndarray[Any, Any],
    first: int,
) -> np.ndarray[Any, Any]:
    """Percent gain of ``chosen`` over ``step`` at every batch size from ``first`` on (0 where
    they agree or a curve is missing)."""
    gain = np.zeros(len(step))
    for b in np.flatnonzero(step != chosen):
        new, old = curves[int(chosen[b])][b], curves[int(step[b])][b]
        if not (math.isnan(new) or math.isnan(old)):
            gain[b] = math.expm1(new - old) * 100
    return gain[first:]


def _ranges(ks: np.ndarray[Any, Any], first: int, last: int) -> tuple[Range, ...]:
    ranges: list[Range] = []
    for b in range(first, last + 1):
        k = int(ks[b])
        if ranges and ranges[-1][2] == k:
            ranges[-1] = (ranges[-1][0], b, k)
        else:
            ranges.append((b, b, k))
    return tuple(ranges)


def _rounded(value: Any) -> Any:
    """Floats for the JSON, rounded so that the last bit of a platform's log cannot change the
    bytes; None where not finite."""
    if isinstance(value, float):
        return round(value, 4) if math.isfinite(value) else None
    return value
