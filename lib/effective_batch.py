"""The batch the engine actually ran: requests in flight per cell by Little's law
(``docs/confidence.md``, "Effective batch size").

The anchor is the ``max_concurrency`` the sweep set, a cap on requests in flight; ramp-up,
the tail of the last requests and a client that cannot keep up all run fewer. vLLM looks K up
by the number of scheduled requests (prefills included), so the batch the schedule sees is the
effective one. Per run, the time-average number in flight is, by Little's law,

    effective batch = request_throughput (req/s) * mean_e2el_ms / 1000

(never ``max_concurrent_requests``: a one-second peak, not an average). Per cell: the median
over its usable runs, and the **spread**, the relative range ``(max - min) / median``.

Rules (each one small function):

- :func:`is_below_anchor`: ``effective < 0.9 * anchor`` (:data:`BELOW_ANCHOR_FRACTION`;
  exactly 0.9 is not below) is a warning ``effective-batch-below-anchor``: the cell's numbers
  describe a smaller batch than its anchor claims. 0.9: a closed-loop bench at concurrency b
  keeps b in flight but for the first and last requests; the samples' synthetic and real
  CPU sweeps stay at 0.93-0.95 of the anchor with 100 prompts or more.
- :func:`is_spread`: ``spread > 0.2`` (:data:`MAX_SPREAD`; exactly 0.2 is not) is a warning
  ``effective-batch-spread``: the runs did not run the same batch. The range, not the MAD:
  at 3 runs the MAD does not see one run off on its own, the range does
  (``../shared/docs/decision-statistics.md``: a range check catches one run 20 % low); on the
  samples the largest spread is 0.148 (real-cpu-replicas, batch 4, K=1, whose 9 runs come
  from 3 servers, one of them run during a burst of other load on the machine).
- Where the records lack either field (the published real sweeps hold neither), one note
  ``effective-batch-unknown`` says so, no warning per cell, and nothing is guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from lib.numbers import objective_text
from lib.problems import Problem, Severity
from lib.settings import EFFECTIVE_BATCH_FIELDS

if TYPE_CHECKING:
    from lib.schedule import TuningResult

__all__ = [
    "BELOW_ANCHOR_FRACTION",
    "EFFECTIVE_BATCH_FIELDS",
    "EFFECTIVE_BATCH_SCHEMA",
    "MAX_SPREAD",
    "EffectiveBatch",
    "effective_batch",
    "effective_batch_problems",
    "is_below_anchor",
    "is_spread",
]

#: An effective batch below this fraction of the anchor is a warning.
BELOW_ANCHOR_FRACTION = 0.9
#: A relative range of the runs' effective batch above this is a warning.
MAX_SPREAD = 0.2

#: One row per (anchor, K) with at least one run holding both fields.
EFFECTIVE_BATCH_SCHEMA = pl.Schema(
    {
        "anchor": pl.Int64(),
        "k": pl.Int64(),
        "runs": pl.Int64(),  # usable runs holding both fields
        "effective_batch": pl.Float64(),  # median over the runs
        "spread": pl.Float64(),  # (max - min) / median; 0 for one run
        "files": pl.List(pl.Utf8),
    }
)


@dataclass(frozen=True, eq=False)
class EffectiveBatch:
    """The effective batch per cell (:data:`EFFECTIVE_BATCH_SCHEMA`), and the fields the
    records lack (``missing``; then ``cells`` is empty)."""

    cells: pl.DataFrame
    missing: tuple[str, ...] = ()

    def by_cell(self) -> dict[tuple[int, int], tuple[float, float, int]]:
        """(anchor, K) -> (effective batch, spread, runs)."""
        return {
            (a, k): (value, spread, runs)
            for a, k, runs, value, spread in self.cells.select(
                "anchor", "k", "runs", "effective_batch", "spread"
            ).rows()
        }

    def blocks(self) -> Mapping[tuple[int, int], Mapping[str, Any]]:
        """Each cell's ``effective_batch_size`` JSON value (the last key of its candidate)."""
        return {
            cell: {"median": round(value, 4), "spread": round(spread, 4), "runs": runs}
            for cell, (value, spread, runs) in self.by_cell().items()
        }


def is_below_anchor(effective: float, anchor: int, fraction: float = BELOW_ANCHOR_FRACTION) -> bool:
    """The rule: ``effective < fraction * anchor`` (strict).

    >>> is_below_anchor(57.5, 64), is_below_anchor(57.6, 64), is_below_anchor(0.9, 1)
    (True, False, False)
    """
    return effective < fraction * anchor


def is_spread(spread: float, limit: float = MAX_SPREAD) -> bool:
    """The rule: ``spread > limit`` (strict).

    >>> is_spread(0.2), is_spread(0.21)
    (False, True)
    """
    return spread > limit


def effective_batch(result: TuningResult) -> EffectiveBatch:
    """Little's law per run of ``result``'s cells (the runs its gates kept), then per cell."""
    runs = result.sweep.runs
    missing = tuple(
        name
        for name in EFFECTIVE_BATCH_FIELDS
        if name not in runs.columns or runs[name].null_count() == runs.height
    )
    if missing:
        return EffectiveBatch(pl.DataFrame(schema=EFFECTIVE_BATCH_SCHEMA), missing)
    throughput, latency = EFFECTIVE_BATCH_FIELDS
    excluded = result.excluded_runs.select("source", "position")
    per_run = (
        runs.filter(pl.col("anchor").is_not_null() & pl.col("k").is_not_null())
        .join(excluded, on=["source", "position"], how="anti")
        .select(
            "anchor",
            "k",
            "source",
            (pl.col(throughput).cast(pl.Float64) * pl.col(latency).cast(pl.Float64) / 1000).alias(
                "value"
            ),
        )
        .filter(pl.col("value").is_finite() & (pl.col("value") >= 0))
    )
    cells = (
        per_run.group_by("anchor", "k")
        .agg(
            pl.len().cast(pl.Int64).alias("runs"),
            pl.col("value").median().alias("effective_batch"),
            ((pl.col("value").max() - pl.col("value").min()) / pl.col("value").median()).alias(
                "spread"
            ),
            pl.col("source").unique(maintain_order=True).alias("files"),
        )
        .with_columns(
            pl.when(pl.col("effective_batch") > 0)
            .then(pl.col("spread"))
            .otherwise(0.0)
            .alias("spread")
        )
        .sort("anchor", "k")
    )
    return EffectiveBatch(cells.select(list(EFFECTIVE_BATCH_SCHEMA)).cast(EFFECTIVE_BATCH_SCHEMA))


def effective_batch_problems(found: EffectiveBatch, result: TuningResult) -> list[Problem]:
    """A warning per cell below its anchor (:func:`is_below_anchor`), one per cell whose runs
    spread (:func:`is_spread`), one note when the fields are missing from every record and one
    naming the cells none of whose runs hold them."""
    if found.missing:
        return [
            Problem(
                Severity.NOTE,
                "effective-batch-unknown",
                "effective batch (requests in flight, request_throughput x mean_e2el_ms / 1000)"
                " not computed: the records lack " + " and ".join(found.missing) + "; the"
                " anchors are taken as the batch the schedule sees",
                field=found.missing[0],
            )
        ]
    problems = []
    for anchor, k, runs, value, spread, files in found.cells.rows():
        if is_below_anchor(value, anchor):
            problems.append(
                Problem(
                    Severity.WARNING,
                    "effective-batch-below-anchor",
                    f"the runs held {objective_text(value)} requests in flight on average"
                    " (Little's law,"
                    f" median of {runs} run(s)), below {BELOW_ANCHOR_FRACTION:g} x the anchor"
                    f" {anchor}: vLLM looks K up by the requests it schedules, so these numbers"
                    " describe a smaller batch than the anchor",
                    files=tuple(files),
                    field="request_throughput x mean_e2el_ms / 1000",
                    value=objective_text(value),
                    anchor=anchor,
                    k=k,
                    expected=f">= {BELOW_ANCHOR_FRACTION * anchor:g}",
                )
            )
        if is_spread(spread):
            problems.append(
                Problem(
                    Severity.WARNING,
                    "effective-batch-spread",
                    f"the runs' effective batch spreads by {spread:.0%} of its median"
                    f" {objective_text(value)} ((max - min) / median over {runs} runs): they did"
                    " not run"
                    " the same batch",
                    files=tuple(files),
                    field="request_throughput x mean_e2el_ms / 1000",
                    value=f"{spread:.3f}",
                    anchor=anchor,
                    k=k,
                    expected=f"<= {MAX_SPREAD:g}",
                )
            )
    measured = set(found.by_cell())
    without = [
        f"batch {a} K={k}"
        for a, k in result.cells.select("anchor", "k").rows()
        if (a, k) not in measured
    ]
    if without:
        problems.append(
            Problem(
                Severity.NOTE,
                "effective-batch-unknown",
                "effective batch not computed where no usable run holds both "
                + " and ".join(EFFECTIVE_BATCH_FIELDS)
                + ": "
                + ", ".join(without),
            )
        )
    return problems
