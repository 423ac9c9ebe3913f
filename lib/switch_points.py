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

The cost grows with the number of anchors, not with the batch sizes they span: anchors
{1, 2^62} cost about what {1, 16} costs (``bench/bench_switch_points.py``). The switch point is
found by a search on the sign of the advantage (:func:`_first_true`: up to 11 vectorised
evaluations of the rule's own formula for a range of 2^62), the interpolated schedule is built
from its range starts, and a switch's expected gain is summed batch size by batch size over at
most :data:`TERM_BY_TERM_LIMIT` changed batch sizes and in closed form (Euler-Maclaurin) past
that. Only :attr:`SwitchPoints.curves`, a row per integer batch size by definition, grows with
the largest batch size; the CLI never reads it.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from lib.cliffs import CLIFF_RULE, Cliff, spanning
from lib.confidence import ConfidenceReport
from lib.numbers import json_float
from lib.schedule import Schedule, TuningResult

__all__ = [
    "CURVE_SCHEMA",
    "SWITCH_SCHEMA",
    "TERM_BY_TERM_LIMIT",
    "EmittedSwitchPoints",
    "SwitchPoints",
    "find_switch_points",
]

#: A switch that changes at most this many batch sizes has its expected gain summed term by term,
#: exactly as the rule states; a longer one in closed form (:meth:`_Lines.gain_sum_and_max`),
#: which costs the same for 10^4 changed batch sizes as for 2^62. At this length the two agree
#: to about 1e-13 relative, and one term-by-term sum still takes about a millisecond.
TERM_BY_TERM_LIMIT = 4096

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
        "max_gain_percent": pl.Float64,  # the largest gain at one changed batch size (0: none)
        "note": pl.Utf8,
        "interpolable": pl.Boolean,  # False across a cross-anchor cliff (lib.cliffs)
    }
)


@dataclass(frozen=True, eq=False)
class SwitchPoints:
    """Switch points, the interpolated schedule and its expected gain over the step one.

    ``anchors`` are the anchors in order, ``last_batch_size`` the largest batch size either
    schedule covers, ``gains`` every finite cell's log gain over ``baseline_k`` by (anchor, K).
    :attr:`curves` (:data:`CURVE_SCHEMA`) is built from them when first read.
    """

    baseline_k: int | None
    anchors: tuple[int, ...]
    last_batch_size: int
    gains: dict[tuple[int, int], float]
    switches: pl.DataFrame
    step_schedule: Schedule
    schedule: Schedule
    mean_gain_percent: float
    max_gain_percent: float

    @functools.cached_property
    def curves(self) -> pl.DataFrame:
        """Every K's interpolated log speed-up at every integer batch size it spans.

        One row per batch size and K, so its size grows with the largest batch size (anchors
        {1, 10^8}: 10^8 rows per K): read it for schedules small enough to draw. Nothing else
        in :class:`SwitchPoints` depends on it.
        """
        return _curve_frame(self.anchors, self.gains, self.last_batch_size)

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


def find_switch_points(
    result: TuningResult, report: ConfidenceReport, cliffs: Sequence[Cliff] = ()
) -> SwitchPoints | None:
    """Switch points for ``result``'s picks from ``report``'s per-cell means.

    Parameters
    ----------
    result
        A policy's result; its decisions (sorted by anchor) give the pick at every anchor and
        ``max_batch_size`` the end of the last range.
    report
        The confidence report whose ``cells`` hold each (anchor, K)'s ``mean_score`` (mean log
        objective, negated when minimising); cells with a non-finite mean count as unmeasured.
    cliffs
        :func:`lib.cliffs.find_cliffs` of ``result``: between two anchors where either pick
        falls off a cliff nothing is interpolated; the switch stays at the upper anchor with
        no gain, and its note says the stretch is not interpolable.

    Returns
    -------
    SwitchPoints or None
        None when ``result`` has no schedule. Otherwise one row of ``switches`` per pair of
        neighbouring anchors whose picks differ, the interpolated schedule, and the expected
        gain over the step schedule: the mean over every integer batch size from the first
        anchor to the last batch size (0 where both schedules run the same K) and the largest
        single batch size's gain (at least 0: the first anchor never changes).

    Notes
    -----
    Anchors up to 2^63 - 1 are handled in time and memory independent of the batch sizes they
    span (see the module docstring). A switch that changes more than
    :data:`TERM_BY_TERM_LIMIT` batch sizes has its gain summed in closed form, to about 1e-13
    relative; every other number is the rule's own formula evaluated where it decides.
    """
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
    # The interpolated schedule as range starts: every anchor with its pick, and every switch
    # point before its upper anchor with the upper pick.
    starts, start_ks = list(anchors), [k for _, k in picks]
    rows: list[dict[str, Any]] = []
    gain_sum = 0.0
    gain_max = 0.0  # the first anchor runs the same K in both schedules: its gain is 0
    for (lower, from_k), (upper, to_k) in itertools.pairwise(picks):
        if from_k == to_k:
            continue
        across = spanning(cliffs, lower, upper, (from_k, to_k))
        note: str | None
        if across:
            switch_at, crossover, note = upper, None, _not_interpolable(across)
        else:
            switch_at, crossover, note = _switch(lower, upper, from_k, to_k, gains)
        changed = upper - switch_at
        row_sum = row_max = 0.0
        if changed:
            starts.append(switch_at)
            start_ks.append(to_k)
            lines = _Lines.between(lower, upper, from_k, to_k, gains)
            row_sum, row_max = lines.gain_sum_and_max(switch_at, upper - 1)
            gain_sum += row_sum
            gain_max = max(gain_max, row_max)
        rows.append(
            {
                "lower_anchor": lower,
                "upper_anchor": upper,
                "from_k": from_k,
                "to_k": to_k,
                "crossover": crossover,
                "switch_at": switch_at,
                "step_switch_at": upper,
                "changed_batch_sizes": changed,
                "gain_percent": row_sum / changed if changed else 0.0,
                "max_gain_percent": row_max,
                "note": note,
                "interpolable": not across,
            }
        )
    return SwitchPoints(
        baseline_k=baseline,
        anchors=tuple(anchors),
        last_batch_size=last,
        gains=gains,
        switches=pl.DataFrame(rows, schema=SWITCH_SCHEMA),
        step_schedule=result.schedule,
        schedule=Schedule.from_picks(starts, start_ks, last),
        mean_gain_percent=gain_sum / (last - anchors[0] + 1),
        max_gain_percent=gain_max,
    )


def _not_interpolable(cliffs: Sequence[Cliff]) -> str:
    """The note of a switch across a cliff: why it stays at the anchor."""
    named = ", ".join(f"K={cliff.k}" for cliff in cliffs)
    first = cliffs[0]
    return (
        f"{named} falls off a cliff between {first.lower.batch_size} and"
        f" {first.upper.batch_size} ({CLIFF_RULE}): the stretch is not interpolable, so the"
        " switch stays at the anchor and no gain is estimated"
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
    """(switch_at, crossover, note) for one pair of neighbouring anchors.

    ``switch_at`` is the first batch size in ``lower + 1 .. upper`` from which on the upper
    envelope of the two lines runs ``to_k`` (an exact tie to the smaller K): ``upper`` when
    ``to_k`` is not ahead at ``upper`` or a mean is missing, ``lower + 1`` when ``to_k`` is
    ahead right after ``lower``. ``crossover`` is where the lines meet, None when they do not
    meet between the anchors.
    """
    needed = [(a, k) for a in (lower, upper) for k in (from_k, to_k)]
    missing = [f"K={k} at {a}" for a, k in needed if (a, k) not in gains]
    if missing:
        return upper, None, "no mean for " + ", ".join(missing) + ": switching at the anchor"
    lines = _Lines.between(lower, upper, from_k, to_k, gains)
    low, high = lines.low, lines.high
    span = math.log(upper) - math.log(lower)
    crossover = None
    if low != high and (low <= 0 <= high or high <= 0 <= low):
        crossover = math.exp(math.log(lower) + span * low / (low - high))

    def runs_to_k(sizes: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Whether the envelope runs to_k at each of ``sizes``: the sign of to_k's advantage, a
        straight line in log batch size, with NumPy's log (NumPy's and libm's differ in the
        last bit for some batch sizes, which decides an exact tie)."""
        advantage = low + (high - low) * (np.log(sizes) - math.log(lower)) / span
        ahead: np.ndarray[Any, Any] = advantage >= 0 if to_k < from_k else advantage > 0
        return ahead

    if not runs_to_k(np.array([upper], dtype=np.int64))[0]:
        return (
            upper,
            crossover,
            f"K={to_k}'s mean is not above K={from_k}'s at {upper} (the pick there rests on"
            " the rule's tie, penalty or confidence), so the switch stays at the anchor",
        )
    switch_at = _first_true(runs_to_k, lower + 1, upper)
    if switch_at > lower + 1:
        return switch_at, crossover, None
    return (
        lower + 1,
        crossover,
        f"K={to_k}'s mean is already above K={from_k}'s at {lower} (the pick there rests on"
        " the rule's tie, penalty or confidence), so the switch follows right after it",
    )


#: Batch sizes :func:`_first_true` evaluates at once: a range of 2^62 takes 11 rounds.
_PROBES = 64


def _first_true(
    predicate: Callable[[np.ndarray[Any, Any]], np.ndarray[Any, Any]], first: int, last: int
) -> int:
    """The smallest ``b`` in ``first..last`` where ``predicate`` holds, by a search that splits
    the range into :data:`_PROBES` parts a round (a range of at most that many batch sizes is
    evaluated whole, in one round).

    ``predicate`` maps an int64 array of batch sizes to a boolean array; it must hold at
    ``last`` and be monotone (False up to some batch size, True from it on). The sign of the
    advantage in :func:`_switch` is monotone in the batch size: the advantage is a straight
    line in ``np.log(b)``, every step of its evaluation rounds monotonically, and NumPy's logs
    of consecutive integers below about 10^14 differ by more than its rounding error. Above
    that the computed sign may flip back and forth within a few batch sizes of the crossover,
    and the switch lands on one of those flips.
    """
    while first < last:
        step = -(-(last - first) // _PROBES)
        sizes = [*range(first, last, step), last]
        # The first True: there is one, at ``last`` if not before.
        index = int(np.argmax(predicate(np.array(sizes, dtype=np.int64))))
        if index == 0:
            return first
        first, last = sizes[index - 1] + 1, sizes[index]
    return first


#: B_2k / (2k)! for k = 1..6: the coefficients of the Euler-Maclaurin formula.
_EULER_MACLAURIN_COEFFICIENTS = (
    1 / 12,
    -1 / 720,
    1 / 30240,
    -1 / 1209600,
    1 / 47900160,
    -691 / 1307674368000,
)


#: Nodes and weights of 8-point Gauss-Legendre quadrature on [0, 1]: 8 nodes integrate
#: ``e^(c v)`` over a piece where ``c v`` changes by at most 1 to about 1e-20 relative. Written
#: out rather than computed with ``numpy.polynomial.legendre.leggauss(8)`` (mapped from [-1, 1]:
#: ``(nodes + 1) / 2``, ``weights / 2``), which would import ``numpy.polynomial`` (20-40 ms) at
#: every start; ``tests/test_switch_points.py`` checks they are those values bit for bit.
_GAUSS_LEGENDRE_NODES = np.array(
    [
        0.019855071751231912,
        0.10166676129318664,
        0.2372337950418355,
        0.4082826787521751,
        0.5917173212478248,
        0.7627662049581645,
        0.8983332387068134,
        0.9801449282487681,
    ]
)
_GAUSS_LEGENDRE_WEIGHTS = np.array(
    [
        0.05061426814518853,
        0.11119051722668721,
        0.15685332293894344,
        0.18134189168918083,
        0.18134189168918083,
        0.15685332293894344,
        0.11119051722668721,
        0.05061426814518853,
    ]
)

#: The Euler-Maclaurin formula starts no lower than this batch size plus twice the slope
#: (:meth:`_Lines.gain_sum_and_max`); below it the gains are summed term by term.
_EULER_MACLAURIN_START = 64


@dataclass(frozen=True)
class _Lines:
    """Two K's log gains between neighbouring anchors ``lower`` and ``upper``, each a straight
    line in log batch size through its values at the two anchors (``from_line``: the lower
    anchor's pick, ``to_line``: the upper anchor's; each ``(at lower, at upper)``)."""

    lower: int
    upper: int
    from_line: tuple[float, float]
    to_line: tuple[float, float]

    @classmethod
    def between(
        cls, lower: int, upper: int, from_k: int, to_k: int, gains: dict[tuple[int, int], float]
    ) -> _Lines:
        """The lines of ``from_k`` and ``to_k``; both must have a gain at both anchors."""
        return cls(
            lower,
            upper,
            (gains[(lower, from_k)], gains[(upper, from_k)]),
            (gains[(lower, to_k)], gains[(upper, to_k)]),
        )

    @property
    def low(self) -> float:
        """to_k's advantage (its log gain minus from_k's) at ``lower``."""
        return self.to_line[0] - self.from_line[0]

    @property
    def high(self) -> float:
        """to_k's advantage at ``upper``."""
        return self.to_line[1] - self.from_line[1]

    @property
    def slope(self) -> float:
        """d advantage / d log batch size."""
        return (self.high - self.low) / _log_ratio(self.lower, self.upper)

    def percent_gains(self, sizes: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """``100 * (exp(to_k's line - from_k's line) - 1)`` at each of ``sizes`` (integers in
        ``lower..upper``): the rule evaluated batch size by batch size, each line by
        ``np.interp`` in ``np.log`` of the batch size."""
        log_sizes = np.log(sizes)
        log_anchors = np.log(np.array([self.lower, self.upper], dtype=np.int64))
        difference = np.interp(log_sizes, log_anchors, self.to_line) - np.interp(
            log_sizes, log_anchors, self.from_line
        )
        # math.expm1 (the C library's), not np.expm1: NumPy's vectorised expm1 differs from it
        # in the last bit for some values on some CPUs, and the gains have always been libm's.
        return np.array([math.expm1(value) * 100 for value in difference.tolist()])

    def gain_sum_and_max(self, first: int, last: int) -> tuple[float, float]:
        """Sum and largest of the percent gains at batch sizes ``first..last`` (within
        ``lower + 1 .. upper - 1``).

        Up to :data:`TERM_BY_TERM_LIMIT` batch sizes, term by term (:meth:`percent_gains`).
        Past it the largest is at one end (the gain is monotone in the batch size: its
        exponent is a straight line in log batch size), and the sum is a head
        ``first .. S - 1`` term by term, with ``S = 64 + 2 |slope|``, plus the tail
        ``S .. last`` in closed form (:meth:`_tail_sum`). From ``S`` on each correction term of
        the closed form is below 0.01 times the one before (the k-th holds
        ``slope (slope - 1) ... (slope - 2k + 2) / S^(2k-1)``). While the gains fit in a double
        (exponents within +-709) the head is at most about 850 batch sizes.
        """
        if last - first + 1 <= TERM_BY_TERM_LIMIT:
            gains = self.percent_gains(np.arange(first, last + 1, dtype=np.int64))
            return float(gains.sum()), float(gains.max())
        ends = self.percent_gains(np.array([first, last], dtype=np.int64))
        tail_start = min(
            max(first, _EULER_MACLAURIN_START + math.ceil(2 * abs(self.slope))), last + 1
        )
        head = self.percent_gains(np.arange(first, tail_start, dtype=np.int64))
        total = float(head.sum())
        if tail_start <= last:
            total += 100 * self._tail_sum(tail_start, last)
        return total, float(ends.max())

    def _exponent(self, size: int) -> float:
        """to_k's line minus from_k's at ``size``, with libm's log (for :meth:`_tail_sum`)."""
        return self.low + self.slope * _log_ratio(self.lower, size)

    def _tail_sum(self, first: int, last: int) -> float:
        """``sum(expm1(d(b)) for b in first..last)`` by the Euler-Maclaurin formula, where
        ``d(b) = d(first) + slope * log(b / first)``, so ``f = expm1(d)`` has the derivatives
        ``f^(j)(x) = exp(d(x)) * slope (slope - 1) ... (slope - j + 1) / x^j``::

            sum = integral(first, last) + (f(first) + f(last)) / 2
                  + sum over k of B_2k / (2k)! * (f^(2k-1)(last) - f^(2k-1)(first))

        With ``first`` at least 64 + 2 |slope| the six correction terms leave an error below
        1e-14 times ``exp(d)`` at the ends. The integral, with ``x = first * e^v``, is
        ``first * integral of e^v expm1(d(first) + slope v)`` over ``v`` in
        ``0 .. log(last / first)``: by Gauss-Legendre quadrature, on pieces where the exponent
        changes by at most 1. Its closed form, the difference of two exponentials, would lose
        digits where the gains are small (1e-6: 8 digits); ``expm1`` keeps them.
        """
        slope = self.slope
        start_exponent = self._exponent(first)
        end_exponent = self._exponent(last)
        width = _log_ratio(first, last)
        pieces = max(1, math.ceil((1 + abs(slope)) * width))
        piece = width / pieces
        v = (np.arange(pieces)[:, np.newaxis] + _GAUSS_LEGENDRE_NODES) * piece
        integrand = np.exp(v) * np.expm1(start_exponent + slope * v)
        integral = first * piece * float((integrand @ _GAUSS_LEGENDRE_WEIGHTS).sum())
        ends = (math.expm1(start_exponent) + math.expm1(end_exponent)) / 2
        corrections = _derivative_series(last, end_exponent, slope) - _derivative_series(
            first, start_exponent, slope
        )
        return integral + ends + corrections


def _log_ratio(smaller: int, larger: int) -> float:
    """``log(larger / smaller)``, accurate also when the two are close: the difference of the
    Python ints is exact, then ``log1p``."""
    return math.log1p((larger - smaller) / smaller)


def _derivative_series(size: int, exponent: float, slope: float) -> float:
    """``sum over k of B_2k / (2k)! * f^(2k-1)(size)`` for ``f = expm1(exponent + slope *
    log(x / size))`` (see :meth:`_Lines._tail_sum`), each derivative built from the one two
    orders below, one factor ``(slope - j) / size`` at a time (no power of ``size`` overflows)."""
    derivative = math.exp(exponent) * slope / size  # f'(size)
    order = 1
    total = 0.0
    for coefficient in _EULER_MACLAURIN_COEFFICIENTS:
        total += coefficient * derivative
        for _ in range(2):
            derivative *= (slope - order) / size
            order += 1
    return total


def _curve_frame(
    anchors: Sequence[int], gains: dict[tuple[int, int], float], last: int
) -> pl.DataFrame:
    """:data:`CURVE_SCHEMA` rows, sorted by batch size and K: each K from the first anchor
    where it was measured to the last (to ``last`` when that is the last anchor: beyond it
    vLLM holds the last K, and the curve is held flat), interpolated linearly in log batch
    size between the anchors where it was measured."""
    pieces = []
    for k in sorted({k for _, k in gains}):
        measured = [a for a in anchors if (a, k) in gains]
        top = last if measured[-1] == anchors[-1] else measured[-1]
        sizes = np.arange(measured[0], top + 1, dtype=np.int64)
        values = np.interp(np.log(sizes), np.log(measured), [gains[(a, k)] for a in measured])
        is_measured = np.isin(sizes, [a for a, j in gains if j == k])
        # As lists: Polars imports numpy.ma (tens of ms) the first time it reads a NumPy array.
        pieces.append(
            pl.DataFrame(
                {
                    "batch_size": sizes.tolist(),
                    "k": k,
                    "log_gain": values.tolist(),
                    "measured": is_measured.tolist(),
                }
            )
        )
    if not pieces:
        return pl.DataFrame(schema=CURVE_SCHEMA)
    return pl.concat(pieces).cast(CURVE_SCHEMA).sort("batch_size", "k")


def _rounded(value: Any) -> Any:
    """Floats for the JSON (:func:`lib.numbers.json_float`); any other value as it is."""
    return json_float(value) if isinstance(value, float) else value


@dataclass(frozen=True, eq=False)
class EmittedSwitchPoints:
    """The result JSON's ``switch_points`` key: the switch points and which schedule the JSON
    deploys (``"step"`` or ``"interpolated"``), written when the JSON is."""

    points: SwitchPoints
    emitted: str

    def to_json(self) -> dict[str, Any]:
        return self.points.to_json(self.emitted)
