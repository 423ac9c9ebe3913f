"""What a follow-up sweep must measure (:class:`FollowUpNeeds`), read from a tuning result with
unresolved anchors (the measurement plan of :mod:`lib.measurement_plan`, or the ``confidence``
blocks of a result JSON): the cells that need more runs, the runs each has so far, and the
suggested new anchors (or, for a context grid, new prompt lengths)."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lib.confidence import MAX_RUNS_NEEDED, MIN_RUNS_NEEDED
from lib.deploy.result_file import (
    AnchorConfidence,
    ResultAnchor,
    ResultFile,
    is_result,
    result_file_of,
)
from lib.files import read_json
from lib.loop.plan.inputs import other_prompt_field, refusal, whole_or_none
from lib.measurement_plan import new_anchor_runs
from lib.problems import Problem
from lib.second_runs import SecondRuns, second_runs
from lib.settings import DEFAULT_CONFIDENCE, RANDOM_PROMPT_LENGTH, Settings

__all__ = ["FollowUpNeeds", "capture_boundary_cells", "first_experiment", "follow_up_needs"]


@dataclass(frozen=True)
class FollowUpNeeds:
    """Runs still needed per (anchor, K), the runs each of those cells has so far (its first
    new seed, :func:`lib.loop.plan.follow_up.follow_up_plan`), where they came from, and notes.
    ``result_file`` is the tuning result read, if any; ``experiment_dir`` the first sweep's
    experiment folder where the inputs tell it (:func:`first_experiment`): the follow-up's
    results belong inside it."""

    more_runs: dict[tuple[int, int], int]
    runs_so_far: dict[tuple[int, int], int]
    new_anchors: tuple[int, ...]
    global_k: int | None
    ks: tuple[int, ...]
    notes: tuple[str, ...]
    result_file: str | None = None
    #: A context follow-up: runs still needed per (anchor, prompt tokens, K) of the grid (its
    #: unresolved and undecided cells, and the prompt lengths to measure next at every anchor
    #: and K), and the runs each has so far.
    context_runs: dict[tuple[int, int, int], int] = dataclasses.field(default_factory=dict)
    context_runs_so_far: dict[tuple[int, int, int], int] = dataclasses.field(default_factory=dict)
    #: The new prompt lengths among them (the context measurement plan's).
    new_prompt_lengths: tuple[int, ...] = ()
    #: Whether the needs are a context grid's (the follow-up plans (anchor, prompt) cells).
    of_grid: bool = False
    #: New server starts per (anchor, K) where the measurement plan asks for more than the one
    #: a follow-up sweep starts (server offsets dominate: lib.measurement_plan).
    new_servers: dict[tuple[int, int], int] = dataclasses.field(default_factory=dict)
    #: The K the follow-up measures that the first sweep did not: the capped K of the capture
    #: boundaries (:func:`capture_boundary_cells`).
    new_ks: tuple[int, ...] = ()
    #: The first sweep's experiment folder (:func:`first_experiment`), None where unknown.
    experiment_dir: str | None = None


def follow_up_needs(files: Sequence[str | Path]) -> tuple[FollowUpNeeds | None, list[Problem]]:
    """What a follow-up sweep must measure, from a measurement plan (``tune-spec-k DIR
    --plan-json PATH``: reruns and new anchors) and/or a result JSON (``speculative_k_schedule
    .json``: its per-anchor ``confidence`` blocks give the reruns of unresolved anchors; its
    global K and candidate K are checked against the design). With both, the plan's numbers
    are used and the result only supplies the global K. The runs so far of a cell: the plan's
    ``runs`` for a rerun, else the result's ``num_runs`` where it measured the cell, else 0 (a
    new anchor). None and the problems of a file that is neither, or is damaged."""
    plan_data: dict[str, Any] | None = None
    result: ResultFile | None = None
    experiment: Path | None = None
    plan_experiment: Path | None = None
    for path in files:
        data, problems = read_json(path)
        if problems:
            return None, problems
        if isinstance(data, dict) and "reruns" in data and "new_anchors" in data:
            problems = _plan_problems(data, path)
            if problems:
                return None, problems
            plan_data = data
            plan_experiment = first_experiment(path, None)
        elif is_result(data):
            result, problems = result_file_of(data, str(path))
            if result is None:
                return None, problems
            experiment = first_experiment(path, data.get("input_summary_files"))
        else:
            return None, [
                refusal(
                    path,
                    "neither a measurement plan (keys 'reruns', 'new_anchors': write one with"
                    " `tune-spec-k DIR --plan-json PATH`) nor a tuning result (key"
                    " 'batch_decisions')",
                )
            ]
    if result is not None and result.has_grid and not result.context_cells:
        # Planned without it, the follow-up would re-measure the batch-only answer instead.
        return None, list(result.grid_problems)
    where = str(experiment or plan_experiment) if (experiment or plan_experiment) else None
    if result is not None and result.context_cells:
        found, problems = _context_follow_up_needs(result, plan_data)
        if found is None:
            return None, problems
        return dataclasses.replace(found, experiment_dir=where), []
    if plan_data is not None and "context_field" in plan_data:
        return None, [
            refusal(
                files[0],
                "a context measurement plan needs its result JSON too (its grid's runs so far"
                " and K): pass both to --follow-up",
            )
        ]
    more: dict[tuple[int, int], int] = {}
    counted: dict[tuple[int, int], int] = {}
    notes: list[str] = []
    new_anchors: list[int] = []
    ks: set[int] = set()
    global_k = None
    if result is not None:
        global_k = result.configured_global_k
        ks.update(result.candidate_ks)
        counted = {
            (anchor.batch_size, candidate.k): candidate.num_runs
            for anchor in result.anchors
            for candidate in anchor.candidates
        }
    starts: dict[tuple[int, int], int] = {}
    if plan_data is not None:
        for row in plan_data["reruns"]:
            if row["more_runs"] > 0:
                more[(row["batch_size"], row["k"])] = row["more_runs"]
                counted[(row["batch_size"], row["k"])] = row["runs"]
                servers = whole_or_none(row.get("new_servers"))
                if servers is not None and servers > 1:
                    starts[(row["batch_size"], row["k"])] = servers
            if row.get("noise_limited"):
                notes.append(
                    f"batch size {row['batch_size']}, K={row['k']} is noise-limited: past"
                    f" {MAX_RUNS_NEEDED} runs its rivals are a tie; more runs will not settle it"
                )
        for row in plan_data["new_anchors"]:
            new_anchors.append(row["batch_size"])
            for k in row["ks"]:
                key = (row["batch_size"], k)
                more[key] = max(more.get(key, 0), row["runs_per_k"])
    elif result is not None:
        if not result.has_confidence:
            return None, [
                refusal(
                    result.source,
                    "the result has no per-anchor 'confidence' blocks (written by tune-spec-k since"
                    " the confidence analysis); pass its measurement plan (`tune-spec-k DIR"
                    " --plan-json PATH`) instead",
                )
            ]
        more, starts = _reruns_from_confidence(result)
        # A K a bracketed sweep left open at an anchor: as many runs as the measurement plan
        # gives it (as the sweep's median cell, one in a lean sweep).
        counts = [c.num_runs for a in result.anchors for c in a.candidates]
        typical = new_anchor_runs(float(statistics.median(counts)) if counts else None)
        for cell in result.unmeasured_cells:
            more[cell] = max(more.get(cell, 0), typical)
        notes.append(
            "the measurement plan's new anchors (between anchors that disagree, around a"
            " cliff) are only in it: pass the file of `tune-spec-k DIR --plan-json PATH` too"
            " to measure them"
        )
    new_ks: list[int] = []
    if result is not None and result.anchors_to_measure:
        # The capture boundaries the schedule crosses (lib.deploy.tuning.Deployment).
        measured = {anchor.batch_size for anchor in result.anchors} | set(new_anchors)
        boundary = capture_boundary_cells(measured, ks, result.anchors_to_measure)
        for cell, runs in boundary.items():
            more[cell] = max(more.get(cell, 0), runs)
        new_anchors += [batch for batch, _ in result.anchors_to_measure]
        new_ks = sorted({k for _, k in boundary} - ks)
        notes.append(
            "the capture boundaries (the result's deployment.anchors_to_measure) are new"
            f" anchors {sorted({b for b, _ in result.anchors_to_measure})}"
            + (f" and new K {new_ks} (the capped K)" if new_ks else "")
            + ": each new anchor is measured at every K and each new K at every anchor,"
            f" {MIN_RUNS_NEEDED} runs each, since the tuner needs the same K at every anchor"
            " of the merged sweeps"
        )
    needs = FollowUpNeeds(
        more,
        {cell: counted.get(cell, 0) for cell in more},
        tuple(sorted(set(new_anchors))),
        global_k,
        tuple(sorted(ks)),
        tuple(notes),
        result.source if result is not None else None,
        new_servers=starts,
        new_ks=tuple(new_ks),
        experiment_dir=where,
    )
    return needs, []


def first_experiment(path: str | Path, input_files: Any) -> Path | None:
    """The first sweep's experiment folder, where a follow-up's results must go to merge with
    its runs (the tuner reads ``summary.json`` at any depth below the folder it is given).

    - of a result JSON (``input_files``: its ``input_summary_files``, relative to the folder
      tuned): the nearest folder at or above the result's own that holds every one of them
      (a result written inside its experiment, the default, is found at once; one written
      elsewhere with ``--output-json``, e.g. beside read-only data, is not found);
    - of a measurement plan (``input_files`` None: it names no file): its own folder, where
      that holds a combo folder's ``summary.json`` (``FOLDER/*/summary.json``, the layout
      ``vllm bench sweep serve`` writes; one level only, so a plan in a large folder costs
      one listing);
    - None otherwise: no input files, or not a list of relative paths, or none found.

    >>> first_experiment("/nonexistent/r.json", ["SERVE--k0-BENCH--c1/summary.json"]) is None
    True
    >>> first_experiment("/nonexistent/r.json", "not a list") is None
    True
    """
    folder = Path(path).absolute().parent
    if input_files is None:
        return folder if next(folder.glob("*/summary.json"), None) is not None else None
    if not isinstance(input_files, list) or not input_files:
        return None
    if not all(
        isinstance(name, str) and name and not Path(name).is_absolute() for name in input_files
    ):
        return None
    for candidate in (folder, *folder.parents):
        if all((candidate / name).is_file() for name in input_files):
            return candidate
    return None


def capture_boundary_cells(
    anchors: Collection[int],
    ks: Collection[int],
    boundaries: Sequence[tuple[int, Sequence[int]]],
) -> dict[tuple[int, int], int]:
    """The cells a follow-up measures for the capture boundaries a result names (its
    ``deployment.anchors_to_measure``: a batch size and the K that decide it there, the tuned K
    and the capped K), :data:`MIN_RUNS_NEEDED` runs each. The first sweep measured every K of
    ``ks`` at every one of ``anchors``; its results and the follow-up's are tuned together, and
    the tuner needs the same K at every anchor (``unequal-k-sets``). So the merged grid is
    (``anchors`` and the boundaries) x (``ks`` and the boundaries' K), and the cells are those
    of it the first sweep lacks: each boundary anchor at every K, each K new to the sweep (a
    capped K it never ran) at every anchor. A boundary at a measured anchor adds only its new
    K; a boundary whose K were all measured, at a measured anchor, adds nothing; no boundary,
    no cell.

    >>> sorted(capture_boundary_cells([1, 64], [0, 7], [(33, [6, 7])]))
    [(1, 6), (33, 0), (33, 6), (33, 7), (64, 6)]
    >>> capture_boundary_cells([1, 64], [0, 7], [(64, [0, 7])])
    {}
    >>> capture_boundary_cells([1, 64], [0, 7], [(64, [5, 7])])
    {(1, 5): 3, (64, 5): 3}
    """
    every_anchor = set(anchors) | {batch for batch, _ in boundaries}
    every_k = set(ks) | {k for _, boundary_ks in boundaries for k in boundary_ks}
    return {
        (anchor, k): MIN_RUNS_NEEDED
        for anchor in sorted(every_anchor)
        for k in sorted(every_k)
        if anchor not in anchors or k not in ks
    }


def _context_follow_up_needs(
    result: ResultFile, plan_data: dict[str, Any] | None
) -> tuple[FollowUpNeeds | None, list[Problem]]:
    """A follow-up of a context result: per (anchor, prompt length, K) the runs still needed.

    - an **unresolved** cell: its contenders, by the batch-only rule (:func:`_target_runs`);
    - an **undecided** cell (every candidate rejected): every candidate, by the same rule
      with the minimum of :data:`MIN_RUNS_NEEDED` runs (no noise estimate says more);
    - each prompt length the result's ``context_measurement_plan`` proposes: every anchor of
      the grid and every K measured there, :data:`MIN_RUNS_NEEDED` runs (a new point, as a
      capture boundary is a new anchor);
    - with a context measurement plan (``--plan-json`` of a context sweep): its reruns and
      new anchors, each at its ``prompt_tokens``, instead of the first two.

    The prompt lengths are planned as ``random_input_len``: a grid whose axis was read from
    another field is refused (the follow-up could not reproduce its prompts). The result's
    batch-only keys (the seed's answer, pooled or the shortest context's) are not re-measured."""
    if result.context_field != RANDOM_PROMPT_LENGTH:
        return None, other_prompt_field(result, "a follow-up")
    more: dict[tuple[int, int, int], int] = {}
    counted: dict[tuple[int, int, int], int] = {}
    for prompt, anchor in result.context_cells:
        for candidate in anchor.candidates:
            counted[(anchor.batch_size, prompt, candidate.k)] = candidate.num_runs
    ks = sorted({key[2] for key in counted})
    anchors = sorted({key[0] for key in counted})
    notes = [
        "the result's batch-only keys (the seed's answer) are not re-measured: the grid's"
        " cells are, each at its prompt length"
    ]
    if plan_data is not None:
        problems = _context_plan_problems(plan_data, result.source)
        if problems:
            return None, problems
        for row in plan_data["reruns"]:
            if row["more_runs"] > 0:
                more[(row["batch_size"], row["prompt_tokens"], row["k"])] = row["more_runs"]
        for row in plan_data["new_anchors"]:
            for k in row["ks"]:
                key = (row["batch_size"], row["prompt_tokens"], k)
                more[key] = max(more.get(key, 0), row["runs_per_k"])
    else:
        for prompt, anchor in result.context_cells:
            confidence = anchor.confidence
            status = confidence.status if confidence is not None else ""
            if status == "unresolved" and confidence is not None:
                wanted = [(k, confidence.runs_needed.get(k)) for k in confidence.contenders]
            elif status == "undecided":
                wanted = [(c.k, None) for c in anchor.candidates]
            else:
                continue
            for k, needed in wanted:
                runs = counted.get((anchor.batch_size, prompt, k), 0)
                target = _target_runs(runs, needed)
                if target > runs:
                    more[(anchor.batch_size, prompt, k)] = target - runs
        notes.append(
            "new anchors at each prompt length are only in the context measurement plan: pass"
            " the file of `tune-spec-k DIR --plan-json PATH` too to measure them"
        )
    measured = {prompt for prompt, _ in result.context_cells}
    new_lengths = sorted(set(result.context_points_to_measure) - measured)
    for prompt in new_lengths:
        for anchor_size in anchors:
            for k in ks:
                more[(anchor_size, prompt, k)] = MIN_RUNS_NEEDED
    # The capture boundaries, as for a batch sweep (capture_boundary_cells), at every prompt
    # length: the grid needs the same K at every cell.
    boundary = capture_boundary_cells(anchors, ks, result.anchors_to_measure)
    for prompt in sorted(measured | set(new_lengths)):
        for (anchor_size, k), runs in boundary.items():
            key = (anchor_size, prompt, k)
            more[key] = max(more.get(key, 0), runs)
    new_ks = sorted({k for _, k in boundary} - set(ks))
    if boundary:
        notes.append(
            "the capture boundaries (the result's deployment.anchors_to_measure) are measured"
            " at every prompt length: each new anchor at every K, each new K at every anchor"
        )
    needs = FollowUpNeeds(
        {},
        {},
        (),
        result.configured_global_k,
        tuple(ks),
        tuple(notes),
        result.source,
        context_runs=more,
        context_runs_so_far={cell: counted.get(cell, 0) for cell in more},
        new_prompt_lengths=tuple(new_lengths),
        of_grid=True,
        new_ks=tuple(new_ks),
    )
    return needs, []


def _context_plan_problems(data: dict[str, Any], source: str) -> list[Problem]:
    """What is wrong with a context measurement plan's rows: the batch-only plan's checks
    (:func:`_plan_problems`) and a whole ``prompt_tokens`` >= 1 in every row."""
    problems = _plan_problems(data, source)
    if problems:
        return problems
    for key in ("reruns", "new_anchors"):
        for index, row in enumerate(data[key]):
            prompt = whole_or_none(row.get("prompt_tokens"))
            if prompt is None or prompt < 1:
                return [
                    refusal(
                        source,
                        "not usable",
                        f"{key}[{index}].prompt_tokens",
                        json.dumps(row.get("prompt_tokens")),
                        "a whole prompt length >= 1",
                    )
                ]
    return []


def _target_runs(runs: int, needed: int | None) -> int:
    """The runs a contender should have, by :mod:`lib.measurement_plan`'s rule: what its noise
    calls for (:data:`MIN_RUNS_NEEDED` where unknown), at least one more than it has, at most
    :data:`MAX_RUNS_NEEDED` in all (never fewer than it has).

    >>> _target_runs(3, 5), _target_runs(3, None), _target_runs(3, 2), _target_runs(10, 40)
    (5, 4, 4, 10)
    """
    wanted = needed or MIN_RUNS_NEEDED
    return min(max(wanted, runs + 1), max(MAX_RUNS_NEEDED, runs))


def _plan_problems(data: dict[str, Any], path: str | Path) -> list[Problem]:
    """What is wrong with a measurement plan's rows (it may be hand-edited); empty when fine."""
    for key, fields in (
        ("reruns", ("batch_size", "k", "more_runs", "runs")),
        ("new_anchors", ("batch_size", "ks", "runs_per_k")),
    ):
        rows = data[key]
        if not isinstance(rows, list):
            return [refusal(path, "not a list", key)]
        for index, row in enumerate(rows):
            if not isinstance(row, dict):
                return [refusal(path, "not an object", f"{key}[{index}]")]
            for name in fields:
                value = row.get(name)
                if name == "ks":
                    good = isinstance(value, list) and all(
                        whole_or_none(v) is not None and v >= 0 for v in value
                    )
                else:
                    number = whole_or_none(value)
                    good = number is not None and number >= (1 if name == "batch_size" else 0)
                if not good:
                    expected = "a list of K" if name == "ks" else "a whole number"
                    field = f"{key}[{index}].{name}"
                    return [refusal(path, "not usable", field, json.dumps(value), expected)]
    return []


def _reruns_from_confidence(
    result: ResultFile,
) -> tuple[dict[tuple[int, int], int], dict[tuple[int, int], int]]:
    """Reruns from a result's confidence analysis, by :mod:`lib.measurement_plan`'s rule: each
    contender of an unresolved anchor up to the runs its noise calls for, at least one more,
    at most MAX_RUNS_NEEDED in all; where the servers it needs are more than one past those it
    has (server offsets dominate), all of its runs (``runs_needed``, a multiple of its runs
    per server) on that many new server starts."""
    more: dict[tuple[int, int], int] = {}
    starts: dict[tuple[int, int], int] = {}
    for anchor in result.anchors:
        confidence = anchor.confidence
        if confidence is None or confidence.status != "unresolved":
            continue
        lean = _second_runs(result, anchor, confidence)
        for k in confidence.contenders:
            candidate = anchor.candidate(k)
            runs = candidate.num_runs if candidate is not None else 0
            if lean is not None and k in lean.more_runs:
                if lean.more_runs[k]:
                    more[(anchor.batch_size, k)] = lean.more_runs[k]
                continue
            wanted = confidence.servers_needed.get(k)
            servers = confidence.num_servers.get(k, 1)
            if wanted is not None and wanted > servers + 1:
                needed = confidence.runs_needed.get(k, runs)
                if needed > runs:
                    more[(anchor.batch_size, k)] = needed - runs
                    starts[(anchor.batch_size, k)] = wanted - servers
                continue
            target = _target_runs(runs, confidence.runs_needed.get(k))
            if target > runs:
                more[(anchor.batch_size, k)] = target - runs
    return more, starts


def _second_runs(
    result: ResultFile, anchor: ResultAnchor, confidence: AnchorConfidence
) -> SecondRuns | None:
    """The lean rule (:mod:`lib.second_runs`) at an unresolved anchor of a result JSON, from
    its candidates' runs and medians (a single run's value, as the measurement plan's
    geometric mean), its P(eps-good) per K, and the confidence and tie tolerance it was tuned
    with (the defaults where the file has none)."""
    return second_runs(
        runs={c.k: c.num_runs for c in anchor.candidates},
        p_eps_good=dict(confidence.p_eps_good),
        centres={c.k: c.median if c.median is not None else math.nan for c in anchor.candidates},
        contenders=confidence.contenders,
        confidence=result.confidence_level
        if result.confidence_level is not None
        else DEFAULT_CONFIDENCE,
        tolerance=result.tie_tolerance
        if result.tie_tolerance is not None
        else Settings().relative_tolerance,
    )
