"""The follow-up plan: after a tuning result with unresolved anchors, only the cells that need
more runs (:class:`lib.loop.plan.follow_up_needs.FollowUpNeeds`) and the suggested new anchors,
with the same engine settings, so its results merge with the first sweep's (the tuner reads
``summary.json`` at any depth: write them inside the first experiment folder). Each cell's seeds
continue its own, and a follow-up's replicas continue after the first sweep's values
(:func:`first_replica_after`)."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lib.confidence import MIN_RUNS_NEEDED
from lib.loop.plan.combos import (
    bench_params,
    context_workload,
    seeded_combos,
    tuning_serve_params,
)
from lib.loop.plan.design import SweepDesign, design_flag
from lib.loop.plan.follow_up_needs import FollowUpNeeds
from lib.loop.plan.inputs import whole_or_none
from lib.loop.plan.sweep_plan import SweepPlan, SweepStep
from lib.loop.plan.tuning import TUNER_READS_REPLICAS, replica_notes, warmup_notes
from lib.problems import Problem, Severity
from lib.settings import DEFAULT_REPLICA_VAR

__all__ = ["first_replica_after", "follow_up_plan", "follow_up_results_dir"]


def first_replica_after(first_sweep: SweepDesign) -> int:
    """The first replica value of a follow-up of ``first_sweep``: one past the last value that
    sweep's servers used, since a follow-up is new server starts and a value used again would
    read a new server as one of the first sweep's; 0 after a sweep without replicas (its serve
    combos carry no marker, so every value is new). A stored design whose replica fields are
    not whole numbers (no plan writes one) is treated as one without replicas."""
    if whole_or_none(first_sweep.server_replicas) is None:
        return 0
    if whole_or_none(first_sweep.first_replica) is None:
        return 0
    values = first_sweep.replica_values
    return values[-1] + 1 if values else 0


def follow_up_results_dir(
    needs: FollowUpNeeds, given: str | None, sources: Sequence[str]
) -> tuple[str | None, list[Problem]]:
    """Where the follow-up's results go (``-o`` of its sweeps): ``given`` (``--results-dir``)
    as it is (the user's choice; the sweep may run on another machine), else the first
    sweep's experiment folder (:attr:`FollowUpNeeds.experiment_dir`), so that tuning that
    folder again pools both sweeps' runs. Refused, naming ``--results-dir`` and
    ``--experiment-name``, where that folder is unknown (a result written outside its
    experiment, e.g. beside read-only data) or cannot be written: beside the result the runs
    would never merge. ``sources``: the ``--follow-up`` files, named in the problem."""
    if given is not None:
        return given, []
    folder = needs.experiment_dir
    if folder is None:
        return None, [
            Problem(
                Severity.ERROR,
                "unknown-first-experiment",
                "the first sweep's experiment folder is not known: no folder at or above the"
                " result JSON holds its input_summary_files (a result written outside its"
                " experiment with --output-json), so the follow-up's results would not merge"
                " with the first sweep's",
                files=tuple(sources),
                field="--results-dir",
                expected="--results-dir FIRST_EXPERIMENT_FOLDER (the folder that was tuned;"
                " --experiment-name names the follow-up's folders inside it)",
            )
        ]
    if not (Path(folder).is_dir() and os.access(folder, os.W_OK | os.X_OK)):
        return None, [
            Problem(
                Severity.ERROR,
                "unwritable-first-experiment",
                f"the first sweep's experiment folder {folder} cannot be written, and the"
                " follow-up's results must go inside it to merge with its runs",
                files=tuple(sources),
                field="--results-dir",
                value=folder,
                expected="a writable copy of the experiment as --results-dir COPY (and"
                " --experiment-name NAME for the follow-up's folders inside it), then tune"
                " the copy",
            )
        ]
    return folder, []


def _mismatch(message: str) -> Problem:
    return Problem(Severity.ERROR, "follow-up-mismatch", message)


def follow_up_plan(
    design: SweepDesign, needs: FollowUpNeeds, results_dir: str, experiment_name: str
) -> tuple[SweepPlan | None, list[Problem]]:
    """Only the cells that need more runs, grouped so that each sweep's serve x bench product
    holds no cell that was not asked for: per K the anchors it needs, the most runs any of
    them needs and the runs each has so far; K alike in all three share a sweep (one server
    start each).

    Seeds continue each cell's own: a cell with n runs so far gets seeds n, n+1, ... The
    tuning plan ran it with seeds 0 .. n-1 (a sweep of the older design, one seed, ran seed 0
    n times), so the follow-up sends none of its runs' prompts again; a planned cell's seeds
    stay 0 .. its runs - 1, and the K of an anchor stay paired on the seeds they share. Hence
    K at one anchor with different runs so far go to different sweeps (their bench combos
    differ). The counts are the usable runs the inputs report: a run the tuner did not count
    (a failed one) leaves its seed to be used again."""
    problems = design.invalid()
    if needs.global_k is not None and needs.global_k != design.startup_k:
        problems.append(
            _mismatch(
                f"the first sweep ran with num_speculative_tokens={needs.global_k} but this"
                f" design gives {design.startup_k}: the follow-up must use the same engine to"
                f" merge (set {design_flag('global_k')} {needs.global_k})"
            )
        )
    asked_ks = {k for _, k in needs.more_runs} | {k for _, _, k in needs.context_runs}
    # The capped K of a capture boundary are new on purpose (FollowUpNeeds.new_ks).
    unknown = sorted(asked_ks - set(design.ks) - set(needs.ks) - set(needs.new_ks))
    if unknown and needs.ks:
        problems.append(
            _mismatch(f"the plan asks for K={unknown}, which the first sweep did not measure")
        )
    too_big = sorted({k for k in asked_ks if k > design.startup_k})
    if too_big:
        problems.append(
            _mismatch(
                f"the plan asks for K={too_big}, above the design's global K {design.startup_k}"
            )
        )
    if problems:
        return None, problems
    if needs.new_ks:
        # The follow-up's design measures them: a later follow-up of its sweep_plan.json knows.
        design = dataclasses.replace(design, ks=tuple(sorted({*design.ks, *needs.new_ks})))
    if needs.of_grid:
        return _context_follow_up_plan(design, needs, results_dir, experiment_name)
    if not needs.more_runs:
        plan = SweepPlan(
            "follow-up",
            design,
            (),
            (*needs.notes, "nothing to measure: every anchor is resolved"),
        )
        return plan, []
    per_k: dict[int, dict[int, int]] = {}
    for (anchor, k), runs in sorted(needs.more_runs.items()):
        per_k.setdefault(k, {})[anchor] = runs
    lean = design.layout == "lean"
    groups: dict[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], int], list[int]] = {}
    for k, runs_at in sorted(per_k.items()):
        for part in _cell_groups(k, runs_at, needs.new_servers, lean):
            anchors = tuple(sorted(part))
            so_far = tuple(needs.runs_so_far.get((anchor, k), 0) for anchor in anchors)
            servers = max(needs.new_servers.get((anchor, k), 1) for anchor in anchors)
            runs_of = _step_runs([runs_at[anchor] for anchor in anchors], lean)
            groups.setdefault((anchors, runs_of, so_far, servers), []).append(k)
    steps = []
    for index, ((anchors, runs_of, so_far, servers), ks) in enumerate(
        sorted(groups.items(), key=lambda item: (item[1][0], item[0])), start=1
    ):
        new = [a for a in anchors if a in needs.new_anchors]
        # Where server offsets dominate, the runs go to that many new server starts (replicas
        # named after the first sweep's); else to the design's servers. Each server runs its
        # share of the cell's more runs.
        step_design = design
        if servers > 1 and servers > len(design.replica_values):
            step_design = dataclasses.replace(design, server_replicas=servers)
        replicas = max(len(step_design.replica_values), 1)
        per_server = [math.ceil(runs / replicas) for runs in runs_of]
        if len(set(per_server)) == 1:
            purpose = (
                f"K={ks} at batch sizes {list(anchors)}, {per_server[0] * replicas} more run(s)"
            )
        else:
            pairs = zip(anchors, per_server, strict=True)
            asked = ", ".join(f"{anchor}: {runs * replicas}" for anchor, runs in pairs)
            purpose = f"K={ks} at batch sizes {list(anchors)}, more runs as asked ({asked})"
        if replicas > 1:
            purpose += f" on {replicas} new server starts ({max(per_server)} each)"
        if new:
            purpose += f" (new anchor(s) {new})"
        first_seeds = dict(zip(anchors, so_far, strict=True))
        if len(set(per_server)) == 1:
            combos = bench_params(step_design, anchors, per_server[0], first_seeds)
        else:
            combos = {}
            for anchor, runs in zip(anchors, per_server, strict=True):
                combos.update(bench_params(step_design, [anchor], runs, first_seeds))
        steps.append(
            SweepStep(
                name=f"{experiment_name}-{index}",
                serve_params=tuning_serve_params(step_design, ks),
                bench_params=combos,
                runs_per_cell=max(per_server),
                results_dir=results_dir,
                experiment_name=f"{experiment_name}-{index}",
                purpose=purpose,
            )
        )
    notes = [*needs.notes, *_runs_notes(sum(needs.more_runs.values()), design, steps)]
    notes.append(
        f"write the results inside the first experiment folder (here: {results_dir}) and"
        " tune that folder again: tune-spec-k reads summary.json at any depth, so the runs"
        " of both sweeps are pooled per (anchor, K)"
    )
    if needs.new_anchors:
        notes.append(
            f"the new anchor(s) {list(needs.new_anchors)} are measured for every K, as the"
            " seed requires the same K at every anchor"
        )
    return SweepPlan("follow-up", design, tuple(steps), tuple(notes)), []


def _context_follow_up_plan(
    design: SweepDesign, needs: FollowUpNeeds, results_dir: str, experiment_name: str
) -> tuple[SweepPlan | None, list[Problem]]:
    """:func:`follow_up_plan` of a context follow-up: as for batch sizes, with (anchor, prompt
    length) in place of the anchor. Per K the cells it needs, the most runs any needs and the
    runs each has so far; K alike in all three share a sweep, whose bench combos are those
    cells' alone, each prompt length as ``random_input_len`` (as ``--context-lengths``
    writes it) and each repeat a seed continuing the cell's own. Every server holds the
    longest prompt of the first sweep's design and of the follow-up."""
    lengths = sorted(set(design.context_lengths) | {p for _, p, _ in needs.context_runs})
    design = dataclasses.replace(design, context_lengths=tuple(lengths))
    problems = design.invalid()
    if problems:
        return None, problems
    per_k: dict[int, dict[tuple[int, int], int]] = {}
    for (anchor, prompt, k), runs in sorted(needs.context_runs.items()):
        per_k.setdefault(k, {})[(anchor, prompt)] = runs
    groups: dict[tuple[tuple[tuple[int, int], ...], int, tuple[int, ...]], list[int]] = {}
    for k, runs_at in sorted(per_k.items()):
        cells = tuple(sorted(runs_at))
        so_far = tuple(needs.context_runs_so_far.get((a, p, k), 0) for a, p in cells)
        groups.setdefault((cells, max(runs_at.values()), so_far), []).append(k)
    steps = []
    for index, ((cells, runs, so_far), ks) in enumerate(sorted(groups.items()), start=1):
        where = ", ".join(f"batch {a} x {p} tokens" for a, p in cells)
        bench: dict[str, Any] = {}
        for (anchor, prompt), first in zip(cells, so_far, strict=True):
            workload, params = context_workload(design, anchor, prompt)
            bench.update(seeded_combos(workload, params, first, runs))
        steps.append(
            SweepStep(
                name=f"{experiment_name}-{index}",
                serve_params=tuning_serve_params(design, ks),
                bench_params=bench,
                runs_per_cell=runs,
                results_dir=results_dir,
                experiment_name=f"{experiment_name}-{index}",
                purpose=f"K={ks} at {where}, {runs} more run(s)",
            )
        )
    notes = list(needs.notes)
    if not steps:
        notes.append(
            "nothing to measure: every grid cell is resolved and no prompt length is proposed"
        )
        return SweepPlan("follow-up", design, (), tuple(notes)), []
    if needs.new_prompt_lengths:
        notes.append(
            f"the new prompt length(s) {list(needs.new_prompt_lengths)} (the context"
            " measurement plan's) are measured at every anchor and K of the grid,"
            f" {MIN_RUNS_NEEDED} runs each"
        )
    notes += _runs_notes(sum(needs.context_runs.values()), design, steps)
    notes.append(
        f"every server holds --max-model-len {design.max_model_len_held} (the longest prompt,"
        f" {lengths[-1]}, plus {design.output_tokens} output tokens)"
    )
    notes.append(
        f"write the results inside the first experiment folder (here: {results_dir}) and"
        " tune that folder again: the runs of both sweeps are pooled per (anchor, K, prompt"
        " length)"
    )
    return SweepPlan("follow-up", design, tuple(steps), tuple(notes)), []


def _cell_groups(
    k: int, runs_at: Mapping[int, int], new_servers: Mapping[tuple[int, int], int], lean: bool
) -> list[list[int]]:
    """The anchors of one K's more runs, split into the sweeps that measure them: one sweep
    for all of them, except in a lean design's follow-up, where the anchors whose runs go to
    several new server starts (server offsets dominate there) get a sweep of their own, so
    that the others are not run on those servers too (a lean follow-up asks for a second run
    here and there; spread over every new server it would be a run per server).

    >>> _cell_groups(3, {1: 1, 16: 6, 64: 1}, {(16, 3): 3}, lean=True)
    [[1, 64], [16]]
    >>> _cell_groups(3, {1: 1, 16: 6, 64: 1}, {(16, 3): 3}, lean=False)
    [[1, 16, 64]]
    """
    anchors = sorted(runs_at)
    if not lean:
        return [anchors]
    one = [a for a in anchors if new_servers.get((a, k), 1) <= 1]
    several = [a for a in anchors if new_servers.get((a, k), 1) > 1]
    return [part for part in (one, several) if part]


def _step_runs(asked: Sequence[int], lean: bool) -> tuple[int, ...]:
    """The more runs a follow-up sweep gives each of its anchors (``asked``, in order): a sweep
    starts each K's server once and runs every bench combo on it, so each anchor can run as
    often as it was asked; the seed's design runs every anchor as often as the most demanding
    one (a few runs more than asked), a lean design's follow-up each as asked (its cells ask
    for one second run where others ask for several: the most demanding one would multiply
    them).

    >>> _step_runs([1, 3, 1], lean=True), _step_runs([1, 3, 1], lean=False)
    ((1, 3, 1), (3, 3, 3))
    """
    if lean:
        return tuple(asked)
    return (max(asked),) * len(asked)


def _runs_notes(asked: int, design: SweepDesign, steps: Sequence[SweepStep]) -> list[str]:
    """A follow-up's notes on its runs: how many more than asked for the steps run (a sweep
    runs each cell as often as its most demanding one), how each cell's seeds go on, its
    replicas (:func:`_replica_notes`) and its warm-ups."""
    planned = sum(step.runs for step in steps)
    notes = []
    if planned > asked:
        notes.append(
            f"{planned - asked} run(s) more than asked for: a sweep runs each cell as often as"
            " its most demanding cell (cheaper than another server start)"
        )
    notes.append(
        "each cell's new runs continue its seeds (a cell with n runs so far gets seeds n, n+1,"
        " ...), so its earlier runs' prompts are not sent again, unless a run was not counted"
        " (a failed one): then a seed of the cell may come again"
    )
    return notes + _replica_notes(design, steps) + warmup_notes(design)


def _replica_notes(design: SweepDesign, steps: Sequence[SweepStep]) -> list[str]:
    """A follow-up's replicas: what they cost and buy, and why their values are new ones."""
    notes = replica_notes(design, steps, read_as=TUNER_READS_REPLICAS)
    if design.first_replica > 0:
        notes.append(
            f"the replicas' --{DEFAULT_REPLICA_VAR} values start at {design.first_replica},"
            " after those of the design this follows up, so its servers are read as new"
            " ones; a later follow-up planned from this plan's sweep_plan.json continues"
            " after these"
        )
    return notes
