"""Cells a sweep did not measure: an anchor that lacks a K measured at other anchors
(``docs/loop.md``, "Bracketed designs").

The seed refuses such a sweep (every anchor must measure the same K). A bracketed design
(``tune-spec-k plan --design lean --first-ks ...``) skips cells on purpose: it measures a few K
at every anchor, and the others only where those few cannot rule them out. This module says,
per missing (anchor, K), whether the K measured there rule it out, by one assumption stated
wherever it is used: **at one batch size, throughput is unimodal in K** (it rises with K up
to the best K and falls after it: each drafted token is accepted less often than the one
before it, and verifying it costs about the same). A capture ceiling that a large K crosses
only makes the fall steeper.

- **A lead** (:func:`leads`): one measured value beats another by more than the tie
  tolerance, ``better * (1 - tolerance) > worse`` for a maximised objective (``worse * (1 -
  tolerance) > better`` minimised); within the tolerance nothing is concluded. To rule a K
  out the lead must be clear of the runs' spread too: each median moved by the seed's noise
  penalty (``--uncertainty-penalty`` robust sigmas, the gap between its median and its
  conservative score), the leader's against it, the led one's towards it.
- **Ruled out** (:func:`ruling_pair`): K is not the best at the anchor when some measured K_n
  lies strictly between K and a measured K_out that leads K_n. Then the curve still rises from
  K_n towards K_out, so its peak is on K_out's side of K_n, and K, on the other side, is no
  better than K_n.
- **Unless the measurements are not unimodal** (:func:`valley`): a measured K led by a measured
  K on each side of it fits no unimodal curve. There the assumption is refuted by the data
  and no missing K is ruled out.

The values compared are the cells' medians (a single run's value where a cell has one run),
of the cells the gates kept. A missing K not ruled out leaves its anchor undecided: the
verdict cannot be ``ready`` and the measurement plan asks for the cell.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import polars as pl

from lib.numbers import percent_text

__all__ = [
    "UNMEASURED_RULE",
    "UNMEASURED_RULED_OUT_RULE",
    "UnmeasuredCell",
    "leads",
    "ruling_pair",
    "unmeasured_cells",
    "valley",
]

#: The problem rules: a missing K the measured K do not rule out (a warning that keeps the
#: verdict from ``ready``), and one they do (a note; the verdict's ``assumes:`` names it).
UNMEASURED_RULE = "unmeasured-k"
UNMEASURED_RULED_OUT_RULE = "unmeasured-k-ruled-out"


def leads(better: float, worse: float, tolerance: float, maximize: bool) -> bool:
    """Whether ``better`` beats ``worse`` by more than the tie tolerance: ``better * (1 -
    tolerance) > worse`` when the objective is maximised, ``worse * (1 - tolerance) > better``
    when minimised. Exactly at the tolerance is a tie, not a lead.

    >>> leads(102.0, 100.0, 0.01, True), leads(101.0, 100.0, 0.01, True)
    (True, False)
    >>> leads(100.0, 100.0 / 0.99, 0.01, True), leads(98.0, 100.0, 0.01, False)
    (False, True)
    """
    if maximize:
        return better * (1 - tolerance) > worse
    return worse * (1 - tolerance) > better


def valley(
    values: Mapping[int, float], tolerance: float, maximize: bool
) -> tuple[int, int, int] | None:
    """A measured K led (:func:`leads`) by a measured K on each side of it, as (left, K,
    right), the first found in K order; None where the measurements fit a unimodal curve
    (fewer than three K never form a valley).

    >>> valley({0: 100.0, 2: 80.0, 5: 95.0}, 0.01, True)
    (0, 2, 5)
    >>> valley({0: 100.0, 2: 99.5, 5: 95.0}, 0.01, True) is None
    True
    """
    ks = sorted(values)
    for i, k in enumerate(ks):
        left = [a for a in ks[:i] if leads(values[a], values[k], tolerance, maximize)]
        right = [b for b in ks[i + 1 :] if leads(values[b], values[k], tolerance, maximize)]
        if left and right:
            return (left[0], k, right[0])
    return None


def ruling_pair(
    k: int,
    values: Mapping[int, float],
    tolerance: float,
    maximize: bool,
    spreads: Mapping[int, float] | None = None,
) -> tuple[int, int] | None:
    """(K_n, K_out): measured K with K_n strictly between ``k`` and K_out and K_out clearly
    leading K_n, which rule ``k`` out under unimodality; the K_n nearest ``k`` first, then the
    K_out that leads it most. ``spreads`` (per K, >= 0; none: 0) widen each value by the
    seed's noise penalty: K_out leads K_n only where its value moved against it by its spread
    still leads K_n's moved towards it by its own (a cell of one run has no spread: its value
    as measured). None when no pair does (among others: ``k`` beyond every measured K on the
    side where the values rise, or fewer than two K measured).

    >>> ruling_pair(1, {0: 60.0, 2: 80.0, 5: 100.0}, 0.01, True)
    (2, 5)
    >>> ruling_pair(3, {0: 60.0, 2: 80.0, 5: 100.0}, 0.01, True) is None
    True
    >>> ruling_pair(7, {0: 100.0, 2: 80.0, 5: 60.0}, 0.01, True)
    (5, 0)
    >>> ruling_pair(1, {0: 60.0, 2: 80.0, 5: 100.0}, 0.01, True, {2: 6.0, 5: 15.0}) is None
    True
    """
    spread = spreads or {}
    sign = 1.0 if maximize else -1.0

    def moved(m: int, towards_better: bool) -> float:
        return values[m] + (sign if towards_better else -sign) * spread.get(m, 0.0)

    for n in sorted(values, key=lambda m: (abs(m - k), m)):
        if n == k:
            continue
        beyond = [o for o in values if (o > n > k or o < n < k)]
        winners = [o for o in beyond if leads(moved(o, False), moved(n, True), tolerance, maximize)]
        if winners:
            best = (
                max(winners, key=lambda o: values[o])
                if maximize
                else min(winners, key=lambda o: values[o])
            )
            return (n, best)
    return None


@dataclass(frozen=True)
class UnmeasuredCell:
    """A K measured at other anchors but not at ``anchor``: whether the K measured there rule
    it out (:func:`ruling_pair`), and why, in a sentence."""

    anchor: int
    k: int
    ruled_out: bool
    reason: str


def unmeasured_cells(
    cells: pl.DataFrame, tolerance: float, maximize: bool, design_ks: Iterable[int] = ()
) -> list[UnmeasuredCell]:
    """Every (anchor, K) not measured where K was measured at some other anchor or is one of
    ``design_ks`` (the K the design holds, measured or not), in anchor then K order. ``cells``
    holds every measured cell (``anchor``, ``k``, ``median``, ``status``): a cell counts as
    measured whether kept or not, but only kept cells' medians rule a K out (a rejected
    cell's value is not trusted)."""
    measured: dict[int, set[int]] = {}
    kept: dict[int, dict[int, float]] = {}
    spreads: dict[int, dict[int, float]] = {}
    columns = ("anchor", "k", "median", "conservative", "status")
    for row in cells.select(columns).iter_rows(named=True):
        measured.setdefault(row["anchor"], set()).add(row["k"])
        if row["status"] == "kept" and row["median"] is not None:
            kept.setdefault(row["anchor"], {})[row["k"]] = float(row["median"])
            conservative = row["conservative"]
            gap = abs(row["median"] - conservative) if conservative is not None else 0.0
            spreads.setdefault(row["anchor"], {})[row["k"]] = gap
    every_k = set(design_ks).union(*measured.values())
    found = []
    for anchor in sorted(measured):
        values = kept.get(anchor, {})
        bad = valley(values, tolerance, maximize)
        for k in sorted(every_k - measured[anchor]):
            found.append(
                _judge(anchor, k, values, spreads.get(anchor, {}), bad, tolerance, maximize)
            )
    return found


def _judge(
    anchor: int,
    k: int,
    values: Mapping[int, float],
    spreads: Mapping[int, float],
    bad: tuple[int, int, int] | None,
    tolerance: float,
    maximize: bool,
) -> UnmeasuredCell:
    tie = f"{tolerance * 100:g}% tie tolerance"
    if bad is not None:
        left, middle, right = bad
        return UnmeasuredCell(
            anchor,
            k,
            False,
            f"K={k} was not measured here, and the K measured here are not unimodal (K={middle}"
            f" is beaten beyond the {tie} by K={left} and by K={right}), so nothing rules it"
            " out",
        )
    pair = ruling_pair(k, values, tolerance, maximize, spreads)
    if pair is None:
        shown = ", ".join(f"K={m}" for m in sorted(values)) or "no K"
        return UnmeasuredCell(
            anchor,
            k,
            False,
            f"K={k} was not measured here, and the K measured here ({shown}) do not rule it"
            " out (no lead beyond the tie tolerance and the runs' spread): it could be the best"
            " K at this batch size",
        )
    near, far = pair
    gap = values[far] / values[near] - 1 if maximize else values[near] / values[far] - 1
    return UnmeasuredCell(
        anchor,
        k,
        True,
        f"K={k} was not measured here; ruled out assuming throughput is unimodal in K: K={far}"
        f" beats K={near} by {percent_text(gap * 100)} (beyond the {tie} and their runs'"
        f" spread), so the best K lies on K={far}'s side of K={near}",
    )
