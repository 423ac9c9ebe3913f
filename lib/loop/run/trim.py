"""A follow-up round trimmed to the budget left (docs/loop.md, "Run the loop"): where the whole
next round would pass ``--budget-gpu-hours``, ``tune-spec-k run`` runs the part of it that fits
instead of stopping, by two rules:

1. :func:`measured_anchors_only`: no new anchor. Measured at only some K (the others left for a
   later round), a new anchor's pick would be made among them and deployed, which can be worse
   than not having it; a new anchor waits for a round that can afford it whole.
2. :func:`affordable_steps`: of what is left, whole sweeps that fit, chosen greedily: first
   those measuring the most cells for the first time (the K a bracketed design left open at an
   anchor, :mod:`lib.unmeasured`: an unmeasured K may lead by far more than a second run moves
   a measured one), then the most cells per GPU second.

Every follow-up sweep of the loop starts one server (:func:`one_server_per_sweep`), so a
sweep is a server start and its runs: the unit a budget can take or leave. A sweep's cost is
mostly its start, so half of one saves little; what is left out is planned again by the next
round's follow-up, if the budget allows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from lib.loop.plan.sweep_plan import SweepPlan, SweepStep
from lib.loop.run.accounting import record_k

__all__ = [
    "StepCost",
    "affordable_steps",
    "measured_anchors_only",
    "one_server_per_sweep",
    "plan_cells",
    "restricted",
    "step_cells",
]

Cell = tuple[int, int]


def step_cells(step: SweepStep) -> set[Cell]:
    """The (anchor, K) cells a sweep measures: each serve combo's K at each bench combo's
    ``max_concurrency``."""
    return {
        (int(bench["max_concurrency"]), record_k(serve))
        for serve in step.serve_params.values()
        for bench in step.bench_params.values()
    }


def plan_cells(plan: SweepPlan) -> set[Cell]:
    """The (anchor, K) cells a plan measures."""
    return set().union(*(step_cells(step) for step in plan.steps))


def restricted(plan: SweepPlan, keep: Callable[[Cell], bool]) -> SweepPlan:
    """``plan`` with each sweep's bench combos cut to those whose every cell (one per serve
    combo of the sweep) ``keep`` accepts, and the sweeps left with none dropped."""
    steps = []
    for step in plan.steps:
        ks = [record_k(serve) for serve in step.serve_params.values()]
        bench = {
            name: params
            for name, params in step.bench_params.items()
            if all(keep((int(params["max_concurrency"]), k)) for k in ks)
        }
        if bench:
            steps.append(dataclasses.replace(step, bench_params=bench))
    return dataclasses.replace(plan, steps=tuple(steps))


def measured_anchors_only(plan: SweepPlan, before: Mapping[Cell, int]) -> SweepPlan:
    """Rule 1 of the module doc: ``plan`` cut to its cells at anchors already measured
    (``before``: runs per cell so far); an empty plan (no sweep) where it has none."""
    anchors = {anchor for (anchor, _), runs in before.items() if runs}
    return restricted(plan, lambda cell: cell[0] in anchors)


def one_server_per_sweep(plan: SweepPlan) -> SweepPlan:
    """``plan`` with each sweep of several serve combos (several server starts: the K a
    follow-up measures at the same bench combos) split into one sweep per serve combo, in
    order, named ``NAME-1``, ``NAME-2``, ... (results in ``EXPERIMENT-1``, ...); sweeps of one
    serve combo are kept as they are. The runs and starts are the same; a budget can then
    take or leave each server start on its own."""
    steps: list[SweepStep] = []
    for step in plan.steps:
        if len(step.serve_params) == 1:
            steps.append(step)
            continue
        for index, (name, serve) in enumerate(step.serve_params.items(), start=1):
            steps.append(
                dataclasses.replace(
                    step,
                    name=f"{step.name}-{index}",
                    serve_params={name: serve},
                    experiment_name=f"{step.experiment_name}-{index}",
                )
            )
    return dataclasses.replace(plan, steps=tuple(steps))


@dataclass(frozen=True)
class StepCost:
    """One sweep of a planned round: its name, estimated GPU seconds (runs and server starts),
    the (anchor, K) cells it measures, and how many of them have no run yet (a K a bracketed
    design left open at an anchor)."""

    name: str
    seconds: float
    cells: int
    first_cells: int


def affordable_steps(steps: Sequence[StepCost], left: float) -> tuple[str, ...]:
    """The sweeps to run within ``left`` GPU seconds, in plan order: taken greedily, first the
    sweeps that measure cells for the first time (most such cells first: an unmeasured K may
    lead by far more than a second run moves a measured one), then by cells per GPU second,
    ties in plan order; a sweep that does not fit is skipped and the next tried. Empty when
    none fits; every sweep when all fit. A sweep of exactly the seconds left fits.

    >>> steps = [StepCost("a", 100.0, 4, 0), StepCost("b", 100.0, 2, 2), StepCost("c", 50.0, 4, 0)]
    >>> affordable_steps(steps, 150.0)
    ('b', 'c')
    >>> affordable_steps(steps, 49.0), affordable_steps(steps, 250.0)
    ((), ('a', 'b', 'c'))
    """
    order = sorted(
        range(len(steps)),
        key=lambda i: (
            -steps[i].first_cells,
            -(steps[i].cells / steps[i].seconds if steps[i].seconds > 0 else float("inf")),
            i,
        ),
    )
    chosen: set[int] = set()
    spent = 0.0
    for i in order:
        if spent + steps[i].seconds <= left:
            chosen.add(i)
            spent += steps[i].seconds
    return tuple(steps[i].name for i in sorted(chosen))
