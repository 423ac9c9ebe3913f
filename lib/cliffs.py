"""Cross-anchor cliffs: a K whose objective falls off a cliff between two neighbouring anchors
while the other Ks scale normally (``docs/confidence.md``, "Cross-anchor cliffs").

The rule (:func:`is_cliff`, applied by :func:`find_cliffs`): for every pair of neighbouring
anchors ``b1 < b2`` and every K with a cell median at both, the K's **scaling** is

    g(K) = m(b2, K) / m(b1, K)     when maximising (throughput: how much it grows)
    g(K) = m(b1, K) / m(b2, K)     when minimising (latency: the same, the right way up)

``m`` the cell median of the objective. Its reference is the median of the other Ks' scaling
over the same pair, ``g_others`` (each K measured at both anchors; at least
:data:`MIN_OTHERS` of them, else no check: with one other K the two disagree symmetrically
and neither is the odd one out, a crossing the switch points handle). K falls
off a cliff when ``g(K) < g_others / CLIFF_FACTOR``: it does at least ``CLIFF_FACTOR`` times
worse between the two anchors than the typical K. At exactly the factor it does not.

Why a factor of 2 (:data:`CLIFF_FACTOR`): a cell median of 3 runs at 10 % run-to-run noise
(the most the seed's relative-MAD gate of 0.1 lets through is about 15 %) has a log standard
deviation of about 0.07; the log of ``g(K) / g_others`` then about 0.12, and ``log 2 = 0.69``
is more than 5 of those. Measured, not assumed: over every sample of ``data/sample_sweeps``
and every real sweep of ``../shared/data/real`` (the H100 ones single runs, the noisiest
case), for ``output_throughput`` and ``median_tpot_ms``, the worst ``g_others / g(K)`` is
1.81 (real-cpu-server-info, median TPOT, K=3 from batch 1 to 2, a tiny model on a CPU) and
1.34 on the real GPU sweeps; the GB200 case that motivated the rule (605 -> 228 tok/s from
batch 4 to 8 while the other Ks grow about 1.7x) is 4.5. Edge cases: a K whose lower median
is 0 (maximising) has no scaling and is skipped; an upper median of 0 is a scaling of 0, a
cliff when the others grow; when half the Ks or more fall at once their median falls too, and
the rule sees no cliff (it compares a K with the typical K, not with a model).

A cliff is not a drafter problem when acceptance stays where it was: each finding carries the
acceptance at both anchors when recorded (``--acceptance-var``, else
``spec_decode_acceptance_length`` when the records hold it). Its likely cause
(:func:`cliff_cause`): the CUDA-graph capture ceiling C when ``b*(1+K)`` passes it between
the two anchors (``b1*(1+K) <= C < b2*(1+K)``); otherwise an execution-mode change (a
CUDA-graph or scheduling mode switch). This module is the core: it does not know C; the
deployment layer passes it in (:class:`CeilingHint`), known or assumed.

Nothing is interpolated across a cliff: switch points between the two anchors stay at the
anchor with no promised gain (:mod:`lib.switch_points`), and the measurement plan proposes the
midpoint to find where the cliff starts (:mod:`lib.measurement_plan`).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

import polars as pl

from lib.numbers import objective_text
from lib.problems import Problem, Severity
from lib.settings import CLIFF_ACCEPTANCE_FIELD as ACCEPTANCE_FIELD

if TYPE_CHECKING:
    from lib.schedule import TuningResult

__all__ = [
    "ACCEPTANCE_FIELD",
    "CLIFF_FACTOR",
    "CLIFF_RULE",
    "MIN_OTHERS",
    "STEADY_ACCEPTANCE",
    "CeilingHint",
    "Cliff",
    "CliffCause",
    "CliffCell",
    "cliff_cause",
    "cliff_problems",
    "crosses",
    "find_cliffs",
    "is_cliff",
    "spanning",
]

#: A K scaling this many times worse than the other Ks' median between two anchors is a cliff.
CLIFF_FACTOR = 2.0
#: Acceptance that changes by at most this fraction between the two anchors is steady: the
#: drafter did not change, the engine's execution did (the seed's acceptance-stability gate).
STEADY_ACCEPTANCE = 0.1
#: Other Ks a K is compared with, at least: the median of one K says nothing of which is odd.
MIN_OTHERS = 2
#: The rule name of a cliff's warning.
CLIFF_RULE = "cross-anchor-cliff"


class CliffCause(StrEnum):
    """Why a K likely fell off: past the CUDA-graph capture ceiling, or another mode change."""

    CAPTURE_CEILING = "capture-ceiling"
    EXECUTION_MODE = "execution-mode"


@dataclass(frozen=True)
class CeilingHint:
    """The capture ceiling C the deployment layer resolved: ``known`` when stated (flag,
    records, saved server config), else vLLM's default, ``source`` saying which."""

    size: int
    known: bool
    source: str


@dataclass(frozen=True)
class CliffCell:
    """One side of a cliff: the cell's median objective, its median acceptance (None when not
    recorded), the tokens per decode step ``batch_size * (1 + k)`` and its files."""

    batch_size: int
    value: float
    acceptance: float | None
    tokens_per_step: int
    files: tuple[str, ...]


@dataclass(frozen=True)
class Cliff:
    """K falls off a cliff from ``lower`` to ``upper`` (neighbouring anchors).

    ``scaling`` is g(K), ``others_scaling`` the median g of ``others`` (the Ks compared), both
    oriented so that larger is better (module docstring).
    """

    k: int
    lower: CliffCell
    upper: CliffCell
    scaling: float
    others_scaling: float
    others: tuple[int, ...]
    maximize: bool

    @property
    def drop_factor(self) -> float:
        """How many times worse than the other Ks it scales: ``others_scaling / scaling``
        (infinite when its upper objective is 0)."""
        return self.others_scaling / self.scaling if self.scaling > 0 else math.inf

    @property
    def acceptance_ratio(self) -> float | None:
        """Upper acceptance over lower; None when either is not recorded (or the lower is 0)."""
        low, high = self.lower.acceptance, self.upper.acceptance
        if low is None or high is None or low == 0:
            return None
        return high / low

    @property
    def stretch(self) -> tuple[int, int, int]:
        """(lower anchor, upper anchor, K): what no estimate interpolates across."""
        return (self.lower.batch_size, self.upper.batch_size, self.k)

    def spans(self, lower: int, upper: int) -> bool:
        """Whether the cliff lies between these two anchors (the stretch not interpolable)."""
        return self.lower.batch_size == lower and self.upper.batch_size == upper


def is_cliff(scaling: float, others_scaling: float, factor: float = CLIFF_FACTOR) -> bool:
    """The rule: ``scaling < others_scaling / factor`` (strict: at the factor, no cliff).

    >>> is_cliff(0.377, 1.7)  # 605 -> 228 tok/s while the others grow 1.7x
    True
    >>> is_cliff(0.85, 1.7), is_cliff(0.84, 1.7)
    (False, True)
    """
    return scaling < others_scaling / factor


def crosses(cliff: Cliff, ceiling: int) -> bool:
    """Whether ``b*(1+K)`` passes ``ceiling`` between the two anchors:
    ``lower tokens <= ceiling < upper tokens``.

    >>> cell = lambda b, t: CliffCell(b, 1.0, None, t, ())
    >>> cliff = Cliff(7, cell(4, 32), cell(8, 64), 0.4, 1.7, (0, 3), True)
    >>> crosses(cliff, 32), crosses(cliff, 63), crosses(cliff, 64), crosses(cliff, 31)
    (True, True, False, False)
    """
    return cliff.lower.tokens_per_step <= ceiling < cliff.upper.tokens_per_step


def cliff_cause(cliff: Cliff, ceiling: CeilingHint | None) -> CliffCause:
    """The capture ceiling when ``b*(1+K)`` passes it between the anchors (:func:`crosses`),
    else an execution-mode change (also when C is not given)."""
    if ceiling is not None and crosses(cliff, ceiling.size):
        return CliffCause.CAPTURE_CEILING
    return CliffCause.EXECUTION_MODE


def _acceptance_medians(result: TuningResult) -> dict[tuple[int, int], float]:
    """Median acceptance per (anchor, K): the policy's acceptance field, else
    :data:`ACCEPTANCE_FIELD` when the runs hold it; empty when neither."""
    cells = result.cells
    if result.settings.acceptance is not None:
        rows = cells.select("anchor", "k", "median_acceptance").rows()
        return {(a, k): v for a, k, v in rows if v is not None and math.isfinite(v)}
    runs = result.sweep.runs
    if ACCEPTANCE_FIELD not in runs.columns:
        return {}
    medians = (
        runs.filter(pl.col(ACCEPTANCE_FIELD).is_not_null() & pl.col("anchor").is_not_null())
        .group_by("anchor", "k")
        .agg(pl.col(ACCEPTANCE_FIELD).cast(pl.Float64).median())
    )
    return {(a, k): v for a, k, v in medians.rows() if v is not None and math.isfinite(v)}


def find_cliffs(result: TuningResult, factor: float = CLIFF_FACTOR) -> tuple[Cliff, ...]:
    """Every cliff of ``result``'s cells (the module docstring's rule), by anchor pair then K.

    Every cell with a finite median counts, kept or rejected by the noise gate (a cliff is in
    the medians, not in the noise). Anchors are neighbours in the sweep's sorted anchors.
    """
    maximize = result.settings.maximize
    medians: dict[int, dict[int, float]] = {}
    files: dict[tuple[int, int], tuple[str, ...]] = {}
    for anchor, k, median, cell_files in result.cells.select(
        "anchor", "k", "median", "files"
    ).rows():
        if median is not None and math.isfinite(median):
            medians.setdefault(anchor, {})[k] = median
            files[(anchor, k)] = tuple(cell_files)
    acceptance = _acceptance_medians(result) if medians else {}
    found = []
    for lower, upper in itertools.pairwise(sorted(medians)):
        scalings = _scalings(medians[lower], medians[upper], maximize)
        for k, scaling in sorted(scalings.items()):
            others = sorted(j for j in scalings if j != k)
            if len(others) < MIN_OTHERS:
                continue
            reference = statistics.median(scalings[j] for j in others)
            if not is_cliff(scaling, reference, factor):
                continue
            found.append(
                Cliff(
                    k=k,
                    lower=_cell(lower, k, medians, acceptance, files),
                    upper=_cell(upper, k, medians, acceptance, files),
                    scaling=scaling,
                    others_scaling=reference,
                    others=tuple(others),
                    maximize=maximize,
                )
            )
    return tuple(found)


def _scalings(low: dict[int, float], high: dict[int, float], maximize: bool) -> dict[int, float]:
    """g(K) for every K measured at both anchors (module docstring); a K whose "before" value
    is 0 has none."""
    found = {}
    for k in sorted(low.keys() & high.keys()):
        before, after = (low[k], high[k]) if maximize else (high[k], low[k])
        if before > 0:
            found[k] = after / before
    return found


def _cell(
    anchor: int,
    k: int,
    medians: dict[int, dict[int, float]],
    acceptance: dict[tuple[int, int], float],
    files: dict[tuple[int, int], tuple[str, ...]],
) -> CliffCell:
    return CliffCell(
        anchor,
        medians[anchor][k],
        acceptance.get((anchor, k)),
        anchor * (1 + k),
        files[(anchor, k)],
    )


def _cause_text(cliff: Cliff, ceiling: CeilingHint | None) -> str:
    low, high = cliff.lower.tokens_per_step, cliff.upper.tokens_per_step
    tokens = f"b*(1+K) goes from {low} to {high} tokens per decode step"
    if ceiling is None:
        return (
            f"likely an execution-mode change (a CUDA-graph or scheduling mode switch); {tokens},"
            " so a CUDA-graph capture ceiling C in between would explain it (vLLM runs a step"
            " past C without CUDA graphs)"
        )
    where = f"from {ceiling.source}" if ceiling.known else ceiling.source
    if cliff_cause(cliff, ceiling) is CliffCause.CAPTURE_CEILING:
        first = ceiling.size // (1 + cliff.k) + 1
        return (
            f"likely the CUDA-graph capture ceiling: {tokens}, past C={ceiling.size} ({where}):"
            f" from batch size {first} on K={cliff.k} runs without CUDA graphs"
        )
    return (
        f"likely an execution-mode change (a CUDA-graph or scheduling mode switch): {tokens},"
        f" which does not pass the capture ceiling C={ceiling.size} ({where})"
    )


def cliff_problems(
    cliffs: Iterable[Cliff], objective: str, ceiling: CeilingHint | None = None
) -> list[Problem]:
    """A :data:`CLIFF_RULE` warning per cliff: the two cells (batch size, K, median
    ``objective``, acceptance when recorded), how it scales against the other Ks, the likely
    cause (:func:`cliff_cause` with ``ceiling``, None when the caller does not know C), and
    that nothing is interpolated across it."""
    found = []
    for cliff in cliffs:
        low, high = cliff.lower, cliff.upper
        change = "grow" if cliff.maximize else "improve"
        ratio = cliff.acceptance_ratio
        if low.acceptance is None or high.acceptance is None:
            acceptance = "; acceptance not recorded"
        else:
            acceptance = f"; acceptance {low.acceptance:.2f} -> {high.acceptance:.2f}"
            if ratio is not None and abs(ratio - 1) <= STEADY_ACCEPTANCE:
                acceptance += f" (x{ratio:.2f}, steady: not the drafter)"
            elif ratio is not None:
                acceptance += f" (x{ratio:.2f}: the drafter changed too)"
        others = ", ".join(f"K={k}" for k in cliff.others)
        found.append(
            Problem(
                Severity.WARNING,
                CLIFF_RULE,
                f"K={cliff.k} falls off a cliff from batch size {low.batch_size} to"
                f" {high.batch_size}: {objective} {objective_text(low.value)} ->"
                f" {objective_text(high.value)}"
                f" (x{cliff.scaling:.2f}) while the other Ks ({others}) {change} x"
                f"{cliff.others_scaling:.2f} (median), {cliff.drop_factor:.1f} times worse,"
                f" beyond the factor {CLIFF_FACTOR:g}{acceptance}; {_cause_text(cliff, ceiling)};"
                f" the stretch {low.batch_size}-{high.batch_size} is not interpolable: no switch"
                " point or gain is estimated across it",
                files=tuple(dict.fromkeys((*low.files, *high.files))),
                field=objective,
                anchor=high.batch_size,
                k=cliff.k,
                expected=f"scaling >= {cliff.others_scaling / CLIFF_FACTOR:.2f}",
                extra={
                    "lower_batch_size": low.batch_size,
                    "upper_batch_size": high.batch_size,
                    "lower_value": low.value,
                    "upper_value": high.value,
                    "scaling": cliff.scaling,
                    "others_scaling": cliff.others_scaling,
                    "lower_acceptance": low.acceptance,
                    "upper_acceptance": high.acceptance,
                    "cause": cliff_cause(cliff, ceiling).value,
                },
            )
        )
    return found


def spanning(cliffs: Sequence[Cliff], lower: int, upper: int, ks: Iterable[int]) -> list[Cliff]:
    """The cliffs between these neighbouring anchors for any of ``ks``."""
    wanted = set(ks)
    return [cliff for cliff in cliffs if cliff.spans(lower, upper) and cliff.k in wanted]
