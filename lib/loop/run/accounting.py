"""GPU time, honestly: what a round's sweep spent, from the files it wrote, and what a plan will
spend, estimated from what the rounds before it measured.

The rules (docs/loop.md, "Run the loop"):

- A round's GPU time is the sum of its runs' own ``duration`` plus its server starts.
- Server starts are read from the records' timestamps (``date``, when a run ended; minus its
  ``duration``, when it started): a round's runs in time order (its sweeps run one after
  another) fall into stretches on one server; each stretch is a server start, and the gap
  between the end of one stretch and the start of the next is that start's time (the old
  server stopped, the new one loaded and warmed up: the GPU is held throughout). The round's
  first server has no run before it: it counts at the median measured gap (of this round or
  an earlier one), else at the stated estimate (``--server-start-seconds``). A resumed sweep
  restarts the server it was on: one more start each time, at the same value (the timestamps
  cannot tell a restart from a pause; a pause that falls between two servers counts in that
  gap).
- A plan's estimate: its runs at the mean duration measured for each (anchor, K) so far, else
  at the mean of every run so far, else at ``--run-seconds``; its server starts at the median
  measured gap, else at the stated estimate.
"""

from __future__ import annotations

import datetime
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lib.files import read_json
from lib.keys import MISSING
from lib.loop.plan.sweep_plan import SweepPlan
from lib.loop.run.rounds import RoundCost

__all__ = [
    "MeasuredRun",
    "PlanEstimate",
    "StartBasis",
    "plan_estimate",
    "read_runs",
    "record_k",
    "round_cost",
    "run_durations",
    "start_basis",
    "start_gaps",
]

#: The format of a record's ``date`` (``vllm bench serve --save-result``).
DATE_FORMAT = "%Y%m%d-%H%M%S"
#: The combo folder's marker between the serve and the bench combo's names.
_BENCH_MARK = "-BENCH--"


@dataclass(frozen=True)
class MeasuredRun:
    """One run file of a sweep: its sweep folder, serve combo, anchor and K, and when it ended
    and how long it took (None where the record does not say)."""

    sweep: str
    serve: str
    anchor: int | None
    k: int
    end: float | None
    duration: float | None

    @property
    def start(self) -> float | None:
        if self.end is None or self.duration is None:
            return None
        return self.end - self.duration


def record_k(record: Mapping[str, Any]) -> int:
    """The K a run of a plan's sweep ran: its one-range schedule's, 0 without speculation."""
    config = record.get("speculative_config")
    if not isinstance(config, dict):
        return 0
    schedule = config.get("num_speculative_tokens_per_batch_size")
    if isinstance(schedule, list) and schedule and isinstance(schedule[0], list):
        k = schedule[0][-1]
        return k if isinstance(k, int) else 0
    k = config.get("num_speculative_tokens", 0)
    return k if isinstance(k, int) else 0


def _end_time(record: Mapping[str, Any]) -> float | None:
    value = record.get("date")
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.datetime.strptime(value, DATE_FORMAT)
    except ValueError:
        return None
    return moment.replace(tzinfo=datetime.UTC).timestamp()


def read_runs(sweep_dirs: Iterable[Path]) -> list[MeasuredRun]:
    """Every measured run (``run=N.json``; not warm-ups, not failures) of the given sweep
    folders (each a sweep's ``-o/-e`` folder), in a stable order. A file that cannot be read
    counts as a run without a duration (the tuning names it)."""
    found = []
    for sweep in sweep_dirs:
        for path in sorted(sweep.glob("*/run=*.json")):
            if path.name.endswith(".failure.json"):
                continue
            data, _ = read_json(path)
            record = data if data is not MISSING and isinstance(data, dict) else {}
            duration = record.get("duration")
            anchor = record.get("max_concurrency")
            serve = path.parent.name.partition(_BENCH_MARK)[0]
            found.append(
                MeasuredRun(
                    sweep=sweep.as_posix(),
                    serve=serve,
                    anchor=anchor if isinstance(anchor, int) else None,
                    k=record_k(record),
                    end=_end_time(record),
                    duration=float(duration)
                    if isinstance(duration, int | float) and duration >= 0
                    else None,
                )
            )
    return found


def _stretches(runs: Sequence[MeasuredRun]) -> tuple[int, list[float]]:
    """The server stretches of a round's runs in time order (the sweeps of a round run one
    after another, so they share one timeline; a stretch, the runs of one serve combo of one
    sweep in a row, is a server start) and the measured gap before every stretch but the
    first. Runs without timestamps: one stretch per serve combo of each sweep, unmeasured."""
    timed = sorted((r for r in runs if r.start is not None), key=lambda r: r.start or 0.0)
    servers = {(r.sweep, r.serve) for r in timed}
    count = len({(r.sweep, r.serve) for r in runs if r.start is None} - servers)
    gaps: list[float] = []
    previous: MeasuredRun | None = None
    for run in timed:
        if previous is None or (run.sweep, run.serve) != (previous.sweep, previous.serve):
            count += 1
            gap = None if previous is None else (run.start or 0.0) - (previous.end or 0.0)
            if gap is not None and gap >= 0:
                gaps.append(gap)
        previous = run
    return count, gaps


def start_gaps(runs: Sequence[MeasuredRun]) -> list[float]:
    """The server starts measured from the runs' timestamps, in seconds (:func:`_stretches`)."""
    return _stretches(runs)[1]


@dataclass(frozen=True)
class StartBasis:
    """What a server start counts where it was not measured, and why (for the printed text)."""

    seconds: float
    text: str


def start_basis(gaps: Sequence[float], estimate: float) -> StartBasis:
    """The median of the measured starts where there are any, else the stated estimate.

    >>> start_basis([50.0, 70.0, 61.0], 120).text
    'the median of 3 measured, 61 s'
    >>> start_basis([], 120).text
    'the estimate, 120 s (--server-start-seconds)'
    """
    if gaps:
        median = statistics.median(gaps)
        return StartBasis(median, f"the median of {len(gaps)} measured, {median:.0f} s")
    return StartBasis(estimate, f"the estimate, {estimate:.0f} s (--server-start-seconds)")


def round_cost(runs: Sequence[MeasuredRun], basis: StartBasis, resumes: int) -> RoundCost:
    """The GPU time of a round's runs (module docstring): their durations, their server starts
    (measured gaps, the rest and each resume's restart at ``basis``)."""
    starts, gaps = _stretches(runs)
    unmeasured = starts - len(gaps) + resumes
    return RoundCost(
        runs=len(runs),
        run_seconds=sum(r.duration for r in runs if r.duration is not None),
        server_starts=starts + resumes,
        start_seconds=sum(gaps) + unmeasured * basis.seconds,
        measured_starts=len(gaps),
        start_basis=basis.text,
    )


def run_durations(runs: Iterable[MeasuredRun]) -> dict[tuple[int, int], float]:
    """The mean duration of each (anchor, K)'s runs, in seconds."""
    pooled: dict[tuple[int, int], list[float]] = {}
    for run in runs:
        if run.anchor is not None and run.duration is not None:
            pooled.setdefault((run.anchor, run.k), []).append(run.duration)
    return {cell: statistics.fmean(values) for cell, values in pooled.items()}


@dataclass(frozen=True)
class PlanEstimate:
    """A plan's runs, server starts and estimated GPU seconds."""

    runs: int
    starts: int
    seconds: float


def plan_estimate(
    plan: SweepPlan,
    durations: Mapping[tuple[int, int], float],
    run_seconds: float,
    basis: StartBasis,
) -> PlanEstimate:
    """The plan's runs at the mean measured duration of their (anchor, K), else the mean over
    the cells measured at their anchor (a run's duration depends on the batch size far more
    than on K: a K a bracketed design left open, or a new anchor's neighbours), else the mean
    over every cell measured, else ``run_seconds``; its server starts at ``basis``."""
    fallback = statistics.fmean(durations.values()) if durations else run_seconds
    by_anchor: dict[int, list[float]] = {}
    for (measured_anchor, _), duration in durations.items():
        by_anchor.setdefault(measured_anchor, []).append(duration)
    runs = starts = 0
    seconds = 0.0
    for step in plan.steps:
        starts += len(step.serve_params)
        for serve in step.serve_params.values():
            k = record_k(serve)
            for bench in step.bench_params.values():
                anchor = bench.get("max_concurrency")
                runs += 1
                if not isinstance(anchor, int):
                    seconds += fallback
                elif (anchor, k) in durations:
                    seconds += durations[(anchor, k)]
                else:
                    near = by_anchor.get(anchor)
                    seconds += statistics.fmean(near) if near else fallback
    return PlanEstimate(runs, starts, seconds + starts * basis.seconds)
