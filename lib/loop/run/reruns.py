"""A tuning the loop's runs made refuse, rerun instead of stopped (docs/loop.md, "Run the
loop"): where every error is a cell the seed's gates rejected for its runs alone (too noisy
to rank, ``noisy-objective``; too few runs, ``too-few-runs``), more runs of those cells are what
the seed's own fix says ("rerun those cells"), so ``tune-spec-k run`` plans them as its next
round instead of stopping with ``cannot-tune``.

- :func:`refusal_reruns`: the cells and their more runs, or None where the refusal is of
  another kind (a sweep that cannot be tuned whatever is measured) or a cell is already at
  :data:`~lib.confidence.MAX_RUNS_NEEDED` runs (its spread is the noise's, not a fluke of few
  runs: more runs will not pass the gate, and the loop stops naming the flag that would).
- :func:`rerun_plan`: those cells as a measurement plan (:class:`lib.measurement_plan.
  MeasurementPlan`), which ``plan --follow-up`` reads as it reads the tuning's own.

Why more runs can help: the relative MAD of 2-3 runs is itself very noisy (one run far off
sets it), and the seed's gate compares it with a fixed threshold; with more runs the MAD
estimates the cell's real spread. Where that spread is real, the cell reaches the cap and the
loop stops, as before, naming ``--max-objective-relative-mad``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import polars as pl

from lib.confidence import MAX_RUNS_NEEDED, MIN_RUNS_NEEDED
from lib.measurement_plan import NEW_ANCHOR_SCHEMA, RERUN_SCHEMA, MeasurementPlan
from lib.problems import Problem, Severity

__all__ = ["RERUNNABLE_RULES", "refusal_reruns", "rerun_plan"]

#: The errors more runs of the cell can clear (the seed's gates of a cell's runs).
RERUNNABLE_RULES = frozenset({"noisy-objective", "too-few-runs"})


def refusal_reruns(
    problems: Iterable[Problem], runs: Mapping[tuple[int, int], int]
) -> dict[tuple[int, int], int] | None:
    """The more runs per (anchor, K) that could clear the refusal in ``problems`` (``runs``:
    each measured cell's runs so far): :data:`~lib.confidence.MIN_RUNS_NEEDED` more each, to
    at most :data:`~lib.confidence.MAX_RUNS_NEEDED` in all. None where there is no error,
    where an error is not of :data:`RERUNNABLE_RULES` or names no cell, or where a cell is
    already at the cap.

    >>> noisy = Problem(Severity.ERROR, "noisy-objective", "m", anchor=8, k=1)
    >>> refusal_reruns([noisy], {(8, 1): 3}), refusal_reruns([noisy], {(8, 1): 9})
    ({(8, 1): 3}, {(8, 1): 1})
    >>> refusal_reruns([noisy], {(8, 1): 10}) is None
    True
    """
    errors = [p for p in problems if p.severity is Severity.ERROR]
    if not errors:
        return None
    more: dict[tuple[int, int], int] = {}
    for problem in errors:
        if problem.rule not in RERUNNABLE_RULES or problem.anchor is None or problem.k is None:
            return None
        cell = (problem.anchor, problem.k)
        so_far = runs.get(cell, 0)
        if so_far >= MAX_RUNS_NEEDED:
            return None
        more[cell] = min(MIN_RUNS_NEEDED, MAX_RUNS_NEEDED - so_far)
    return dict(sorted(more.items()))


def rerun_plan(
    more: Mapping[tuple[int, int], int],
    runs: Mapping[tuple[int, int], int],
    confidence: float,
    tolerance: float,
) -> MeasurementPlan:
    """The reruns as a measurement plan: a row per cell (its runs so far, the more runs on one
    new server start), no new anchor."""
    rows = [
        {
            "batch_size": anchor,
            "k": k,
            "runs": runs.get((anchor, k), 0),
            "servers": 1,
            "target_runs": runs.get((anchor, k), 0) + count,
            "more_runs": count,
            "new_servers": 1,
            "runs_per_new_server": count,
            "noise_limited": False,
            "reason": "the tuning refused the cell for its runs (too noisy to rank, or too few):"
            f" {count} more run(s), so that its spread is measured, not guessed from a few",
        }
        for (anchor, k), count in sorted(more.items())
    ]
    empty = pl.DataFrame(schema=NEW_ANCHOR_SCHEMA)
    return MeasurementPlan(confidence, tolerance, pl.DataFrame(rows, schema=RERUN_SCHEMA), empty)
