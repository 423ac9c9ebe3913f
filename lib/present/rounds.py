"""The rounds of a ``tune-spec-k run`` experiment (``rounds.json``, :mod:`lib.loop.run.rounds`)
as text for the CLI and as a table for the app: each round's plan and estimate, what it spent,
its verdict and what changed, the summary at the end, and P(eps-good) of each anchor's pick by
round."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from lib.loop.run.rounds import RoundRecord, RunLog
from lib.loop.run.stopping import hours_text
from lib.numbers import probability_text

__all__ = [
    "ROUNDS_TABLE_SCHEMA",
    "round_measured_lines",
    "round_plan_lines",
    "round_tuned_lines",
    "rounds_pivot",
    "rounds_table",
    "summary_lines",
]

#: The app's table of the rounds: a row per (round, anchor) tuned in that round.
ROUNDS_TABLE_SCHEMA = {
    "round": pl.Int64,
    "batch_size": pl.Int64,
    "selected_k": pl.Int64,
    "p_eps_good": pl.Float64,
    "verdict": pl.String,
}


def _budget_text(spent: float, budget: float | None) -> str:
    if budget is None:
        return f"spent so far {hours_text(spent)} (no --budget-gpu-hours)"
    return f"spent so far {hours_text(spent)} of {hours_text(budget)}"


def round_plan_lines(
    record: RoundRecord, spent: float, budget: float | None, basis: str, resumed: bool
) -> list[str]:
    """Before a round: what it measures, its runs, server starts and estimated GPU time."""
    head = f"round {record.number}" + (
        " (resumed: its sweep goes on with --resume)" if resumed else ""
    )
    return [
        f"{head}: {record.purpose}",
        f"  {record.planned_runs} run(s) on {record.planned_starts} server start(s), estimated"
        f" {hours_text(record.estimated_seconds)} (server starts at {basis}); "
        + _budget_text(spent, budget),
        f"  plan: {record.plan_dir}",
    ]


def round_measured_lines(record: RoundRecord, spent: float) -> list[str]:
    """After a round's sweep: its runs, their time, its server starts and how they were
    counted, and the total so far."""
    cost = record.cost
    unmeasured = cost.server_starts - cost.measured_starts
    starts = f"{cost.server_starts} server start(s), {cost.start_seconds:.0f} s"
    if cost.server_starts:
        starts += f" ({cost.measured_starts} measured from the records' timestamps"
        starts += f", {unmeasured} at {cost.start_basis})" if unmeasured else ")"
    return [
        f"round {record.number} measured: {cost.runs} run(s), {cost.run_seconds:.0f} s; {starts}:"
        f" {hours_text(cost.seconds)}; {hours_text(spent)} in all",
    ]


def _schedule_text(schedule: Sequence[Sequence[int]] | None) -> str:
    return "none" if schedule is None else str([list(r) for r in schedule])


def round_tuned_lines(record: RoundRecord, previous: RoundRecord | None) -> list[str]:
    """After a round's tuning: the verdict, the unresolved anchors and the schedule, each
    beside the round before's where it changed."""
    verdict = f"verdict {record.verdict}"
    unresolved = f"unresolved anchors {list(record.unresolved)}"
    schedule = f"schedule {_schedule_text(record.schedule)}"
    if previous is not None:
        if previous.verdict != record.verdict:
            verdict += f" (was {previous.verdict})"
        if previous.unresolved != record.unresolved:
            unresolved += f" (were {list(previous.unresolved)})"
        schedule += (
            " (unchanged)"
            if previous.schedule == record.schedule
            else f" (was {_schedule_text(previous.schedule)})"
        )
    return [f"round {record.number} tuned: {verdict}; {unresolved}; {schedule}"]


def summary_lines(log: RunLog, config_line: str | None, full_grid_runs: int | None) -> list[str]:
    """The end of a run: why it stopped, every round in a line, the final schedule and verdict,
    the config to paste, and the GPU time spent against the seed's full grid's estimate."""
    lines = [f"run stopped: {log.stop_text} ({log.stop_rule})", "rounds:"]
    for record in log.rounds:
        lines.append(
            f"  round {record.number}: {record.cost.runs} run(s), {record.cost.server_starts}"
            f" server start(s), {hours_text(record.cost.seconds)}; verdict {record.verdict};"
            f" unresolved {list(record.unresolved)}"
        )
    last = next((r for r in reversed(log.rounds) if r.verdict is not None), None)
    if last is not None:
        lines.append(f"final schedule: {_schedule_text(last.schedule)} (verdict {last.verdict})")
    if config_line is not None:
        lines.append(config_line)
    spent = log.spent_seconds
    text = f"GPU time: {hours_text(spent)} spent"
    if log.full_grid_seconds:
        share = 100 * spent / log.full_grid_seconds
        text += (
            "; the seed's full grid"
            + ("" if full_grid_runs is None else f" ({full_grid_runs} runs)")
            + " is estimated at"
            + f" {hours_text(log.full_grid_seconds)}: {share:.0f} % of it"
        )
    lines.append(text)
    return lines


def rounds_table(log: RunLog) -> pl.DataFrame:
    """P(eps-good) of each anchor's pick by round (:data:`ROUNDS_TABLE_SCHEMA`), the rounds
    tuned only."""
    rows = [
        {
            "round": record.number,
            "batch_size": anchor,
            "selected_k": record.picks.get(anchor),
            "p_eps_good": record.p_eps_good.get(anchor),
            "verdict": record.verdict,
        }
        for record in log.rounds
        if record.verdict is not None
        for anchor in sorted(set(record.picks) | set(record.p_eps_good))
    ]
    return pl.DataFrame(rows, schema=ROUNDS_TABLE_SCHEMA, orient="row")


def rounds_pivot(log: RunLog) -> pl.DataFrame:
    """The app's view of :func:`rounds_table`: a row per anchor, a column per tuned round
    (``round N (verdict)``), each cell the pick and its P(eps-good) (``K=3, P 0.93``; empty
    where the round did not tune the anchor)."""
    tuned = [record for record in log.rounds if record.verdict is not None]
    anchors = sorted({a for record in tuned for a in record.picks})
    columns: dict[str, list[Any]] = {"batch_size": anchors}
    for record in tuned:
        columns[f"round {record.number} ({record.verdict})"] = [
            _cell(record.picks[a], record.p_eps_good.get(a)) if a in record.picks else ""
            for a in anchors
        ]
    return pl.DataFrame(
        columns, schema={name: pl.Int64 if name == "batch_size" else pl.String for name in columns}
    )


def _cell(k: int | None, p: float | None) -> str:
    """An anchor's pick and its P(eps-good) in one round.

    >>> _cell(3, 0.934), _cell(0, None), _cell(None, None)
    ('K=3, P 0.93', 'K=0, P unknown', 'undecided')
    """
    if k is None:
        return "undecided"
    return f"K={k}, P {probability_text(p)}"
