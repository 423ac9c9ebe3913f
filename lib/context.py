"""A sweep with a context axis, tuned per context point (:func:`analyse_contexts`): the whole
analysis of :mod:`lib.analysis` once per point of :mod:`lib.context_axis`, so every (batch
anchor, context point) cell gets the seed's rules and the confidence model, and every problem
is listed with the context it belongs to; the grid of chosen K is what the result file writes
(``context_axis``, ``context_grid``) and :mod:`lib.context_grid` reads back.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from lib.analysis import Analysis, analyse
from lib.context_axis import ContextAxis, ContextPoint
from lib.context_grid import (
    ContextGrid,
    GridCell,
    assemble_grid,
    not_deployable_refusal,
    unexportable_grid_problems,
)
from lib.context_grid import ContextPoint as GridPoint
from lib.noise_summary import ServerNoise, combined_servers
from lib.objectives import direction_problems
from lib.problems import Problem, Severity
from lib.schedule import candidate_json, finite_or_none, interpolated_schedule
from lib.settings import (
    Options,
    Settings,
)
from lib.sweeps import Sweep

__all__ = ["ContextAnalysis", "analyse_contexts", "in_context"]


# --------------------------------------------------------------------------- the grid

#: Rules whose problems concern the deployable schedule, not the cell's decision: a sweep
#: measured at fixed batch sizes above 1 still gives a grid (the published evidence is such),
#: and one warning replaces them (the schedule of such picks starts above 1: invalid).
_SCHEDULE_RULES = ("anchors-not-from-1", "invalid-schedule")


@dataclass(frozen=True, eq=False)
class ContextAnalysis:
    """The analysis per context point, the seed's pooled answer, and every problem.

    ``contexts[i]`` is the whole :class:`~lib.analysis.Analysis` of ``axis.points[i]``.
    ``pooled`` is the seed's analysis of the sweep as one context (cells mixing lengths);
    ``answer`` is the batch-only analysis the result's seed keys come from: ``pooled`` when the
    seed's rules accept it, else the shortest context point's (the seed's world), else None.
    """

    axis: ContextAxis
    pooled: Analysis
    contexts: tuple[Analysis, ...]
    answer: Analysis | None
    problems: tuple[Problem, ...]
    confidence: float

    @property
    def servers(self) -> ServerNoise | None:
        """What the grid's P(eps-good) rest on about server starts, over every point (None
        where no point has a confidence report)."""
        reports = [
            (point.prompt_tokens, context.report)
            for point, context in zip(self.axis.points, self.contexts, strict=True)
            if context.report is not None
        ]
        if not reports:
            return None
        parts = [(prompt, report.servers) for prompt, report in reports]
        return combined_servers(parts, reports[0][1].settings.server_cv)

    @property
    def deployable(self) -> bool:
        """Whether a schedule can be built: every context's anchors start at 1."""
        return self.not_deployable_reason is None

    @property
    def not_deployable_reason(self) -> str | None:
        return _not_deployable_reason(self.contexts)

    @property
    def ok(self) -> bool:
        """No error anywhere in the grid (the exit status of the CLI)."""
        return not any(problem.severity is Severity.ERROR for problem in self.problems)

    def grid(self) -> list[dict[str, Any]]:
        """One object per (batch anchor, context point), by batch size then prompt length: the
        pick, its status and P(eps-good), and every K measured there. Built once (shared: read
        it, do not change it)."""
        return self._grid

    @functools.cached_property
    def _grid(self) -> list[dict[str, Any]]:
        rows = []
        for point, analysis in zip(self.axis.points, self.contexts, strict=True):
            rows += _grid_rows(point, analysis, self.confidence)
        return sorted(rows, key=lambda row: (row["batch_size"], row["prompt_tokens"]))

    @functools.cached_property
    def typed_grid(self) -> tuple[ContextGrid | None, list[Problem]]:
        """The grid the context formats export, built from the analyses themselves (no
        JSON): the same grid :func:`lib.context_grid.context_grid_of` reads back from the
        result file (tested); None and the problems of a grid that cannot be exported (by the
        rules the file's reader applies, :func:`lib.context_grid.unexportable_grid_problems`)."""
        cells: dict[tuple[int, int], GridCell] = {}
        points = tuple(
            GridPoint(
                point.prompt_tokens,
                point.context_tokens,
                point.output_tokens,
                interpolated_schedule(analysis.result),
            )
            for point, analysis in zip(self.axis.points, self.contexts, strict=True)
        )
        for point, analysis in zip(points, self.contexts, strict=True):
            cells.update(_grid_cells(point, analysis, self.confidence))
        anchors = tuple(sorted({batch for batch, _ in cells}))
        problems = unexportable_grid_problems(cells, anchors, points, "the result")
        if problems:
            return None, problems + not_deployable_refusal(
                not self.deployable, self.not_deployable_reason, "the result"
            )
        source = (self.answer or self.pooled).result
        settings = source.settings
        return (
            assemble_grid(
                cells,
                points,
                objective=settings.objective,
                direction=settings.direction,
                configured_global_k=source.configured_global_k,
                observed_k=source.max_k_observed,
                max_batch_size=source.max_batch_size,
                tolerance=float(self.axis.tolerance),
                axis_field=self.axis.field,
                deployable=self.deployable,
                not_deployable_reason=self.not_deployable_reason,
                relative_tolerance=float(settings.relative_tolerance),
            ),
            [],
        )

    def context_points_to_measure(self) -> list[dict[str, Any]]:
        """Where measuring another prompt length would tell most: between two neighbouring
        context points where some batch size picks a different K, at their geometric mean
        (context effects are multiplicative: attention cost grows with the length). Each
        proposal names the batch sizes that disagree and their two picks; cells without a K
        disagree with nothing.

        >>> ContextAnalysis.between(512, 8192)
        2048
        """
        picks = {(c["batch_size"], c["prompt_tokens"]): c["selected_k"] for c in self.grid()}
        batches = sorted({batch for batch, _ in picks})
        proposals = []
        for lower, upper in itertools.pairwise(self.axis.points):
            disagreeing = []
            for batch in batches:
                below = picks.get((batch, lower.prompt_tokens))
                above = picks.get((batch, upper.prompt_tokens))
                if below is not None and above is not None and below != above:
                    disagreeing.append({"batch_size": batch, "k_below": below, "k_above": above})
            if disagreeing:
                proposals.append(
                    {
                        "prompt_tokens": self.between(lower.prompt_tokens, upper.prompt_tokens),
                        "between": [lower.prompt_tokens, upper.prompt_tokens],
                        "batch_sizes": disagreeing,
                    }
                )
        return proposals

    def measurement_plan(self) -> dict[str, Any]:
        """The context measurement plan (``tune-spec-k DIR --plan-json PATH`` on a context
        sweep): each context point's own measurement plan (:mod:`lib.measurement_plan`), its
        rows with the point's ``prompt_tokens`` first, and the prompt lengths to measure next
        (:meth:`context_points_to_measure`). ``total_more_runs`` counts the reruns and new
        anchors only: a new prompt length is a new sweep (``plan --context-lengths``)."""
        reruns: list[dict[str, Any]] = []
        new_anchors: list[dict[str, Any]] = []
        for point, analysis in zip(self.axis.points, self.contexts, strict=True):
            if analysis.plan is None:
                continue
            plan = analysis.plan.to_json()
            reruns += [{"prompt_tokens": point.prompt_tokens, **row} for row in plan["reruns"]]
            new_anchors += [
                {"prompt_tokens": point.prompt_tokens, **row} for row in plan["new_anchors"]
            ]
        return {
            "context_field": self.axis.field,
            "confidence": self.confidence,
            "total_more_runs": sum(row["more_runs"] for row in reruns)
            + sum(len(row["ks"]) * row["runs_per_k"] for row in new_anchors),
            "reruns": reruns,
            "new_anchors": new_anchors,
            "context_points_to_measure": self.context_points_to_measure(),
        }

    def measurement_plan_text(self) -> str:
        """The context measurement plan file's exact text (same input, same bytes)."""
        return json.dumps(self.measurement_plan(), indent=2, allow_nan=False) + "\n"

    @staticmethod
    def between(lower: int, upper: int) -> int:
        """The geometric mean of two prompt lengths, rounded to the nearest token."""
        return round(math.sqrt(lower * upper))


def _not_deployable_reason(contexts: Sequence[Analysis]) -> str | None:
    """Why no schedule can be built from the grid (None when one can): vLLM's schedule must
    cover batch size 1, so the smallest anchor measured at any context must be 1."""
    anchors = sorted({anchor for context in contexts for anchor in _anchors(context)})
    if anchors and anchors[0] != 1:
        return (
            f"the batch-size anchors start at {anchors[0]}, not 1: vLLM's schedule must"
            " cover batch size 1, so the grid cannot be deployed as measured"
        )
    return None


def _anchors(analysis: Analysis) -> list[int]:
    return [int(anchor) for anchor in analysis.result.decisions["anchor"].to_list()]


def _statuses(
    analysis: Analysis, confidence: float
) -> list[tuple[int, int | None, float | None, str, float | None]]:
    """Per anchor of one context point: (anchor, selected K, its P(eps-good), status, selected
    median). A cell is undecided without a K; unresolved when its P(eps-good) is missing or
    below ``confidence`` or an error (other than the schedule's own) names it; else resolved."""
    result = analysis.result
    failing = {
        problem.anchor
        for problem in result.problems
        if problem.severity is Severity.ERROR and problem.rule not in _SCHEDULE_RULES
    }
    p_of: dict[tuple[int, int], float | None] = {}
    if analysis.report is not None:
        cells = analysis.report.cells.select("anchor", "k", "p_eps_good").rows()
        p_of = {(anchor, k): p for anchor, k, p in cells}
    rows = []
    for decision in result.decisions.to_dicts():
        anchor, k = decision["anchor"], decision["selected_k"]
        p = None if k is None else p_of.get((anchor, k))
        if k is None:
            status = "undecided"
        elif anchor in failing or None in failing or p is None or p < confidence:
            status = "unresolved"
        else:
            status = "resolved"
        rows.append((anchor, k, p, status, finite_or_none(decision["selected_median"])))
    return rows


def _grid_rows(point: ContextPoint, analysis: Analysis, confidence: float) -> list[dict[str, Any]]:
    result = analysis.result
    candidates: dict[int, list[dict[str, Any]]] = {}
    for cell in result.cells.sort("anchor", "k").to_dicts():
        candidates.setdefault(cell["anchor"], []).append(
            {**candidate_json(cell), "verdict": cell["status"], "reason": cell["reason"]}
        )
    blocks = analysis.report.blocks() if analysis.report is not None else {}
    return [
        {
            "batch_size": anchor,
            "prompt_tokens": point.prompt_tokens,
            "context_tokens": point.context_tokens,
            "selected_k": k,
            "selected_median_objective": median,
            "status": status,
            "p_eps_good": p,
            # What a follow-up reruns here (plan --follow-up), as batch_decisions' confidence.
            "contenders": blocks.get(anchor, {}).get("contenders", []),
            "runs_needed": blocks.get(anchor, {}).get("runs_needed", {}),
            "candidates": candidates.get(anchor, []),
        }
        for anchor, k, p, status, median in _statuses(analysis, confidence)
    ]


def _grid_cells(
    point: GridPoint, analysis: Analysis, confidence: float
) -> dict[tuple[int, int], GridCell]:
    """One context point's cells of the typed grid, from the analysis itself: each kept
    candidate's finite median and conservative score, the selected K (-1: undecided), its
    status and P(eps-good), as :func:`_grid_rows` writes them."""
    medians: dict[int, dict[int, float]] = {}
    scores: dict[int, dict[int, float]] = {}
    kept = analysis.result.cells.filter(pl.col("status") == "kept")
    for anchor, k, median, score in kept.select("anchor", "k", "median", "conservative").rows():
        if finite_or_none(median) is not None:
            medians.setdefault(anchor, {})[k] = median
            if finite_or_none(score) is not None:
                scores.setdefault(anchor, {})[k] = score
    return {
        (anchor, point.prompt_tokens): GridCell(
            anchor,
            point,
            -1 if k is None or status == "undecided" else k,
            status,
            tuple(sorted(medians.get(anchor, {}).items())),
            tuple(sorted(scores.get(anchor, {}).items())),
            p_eps_good=p,
        )
        for anchor, k, p, status, _ in _statuses(analysis, confidence)
    }


def in_context(problem: Problem, point: ContextPoint) -> Problem:
    """A problem of one context point's analysis, saying which point."""
    return dataclasses.replace(
        problem,
        message=f"at {point.label()}: {problem.message}",
        extra={**problem.extra, "prompt_tokens": point.prompt_tokens},
    )


def analyse_contexts(
    sweep: Sweep,
    axis: ContextAxis,
    settings: Settings,
    options: Options | None = None,
) -> ContextAnalysis:
    """The whole analysis once per context point, and the seed's pooled answer.

    Problems, in order: the loader's (once), the axis's, the catalogue's about the
    direction (once, :func:`lib.objectives.direction_problems`), each context point's own (its
    message saying which point), then what concerns the grid as a whole: a warning that the
    seed's answer pools prompt lengths (or could not be given), and a warning when the
    anchors do not start at 1 (the grid stands; no schedule can be deployed from it). The
    per-point ``anchors-not-from-1`` errors are replaced by that one warning.
    """
    options = options or Options()
    pooled = analyse(sweep, settings, options)
    contexts = tuple(
        analyse(axis.sweep_at(sweep, index), settings, options) for index in range(len(axis.points))
    )
    # What the catalogue says of the settings holds for the whole grid: said once.
    settings_problems = direction_problems(settings)
    problems: list[Problem] = [*sweep.problems, *axis.problems, *settings_problems]
    said = {problem.rule for problem in settings_problems}
    reason = _not_deployable_reason(contexts)
    for point, context in zip(axis.points, contexts, strict=True):
        problems += [
            in_context(problem, point)
            for problem in context.result.problems
            if (reason is None or problem.rule not in _SCHEDULE_RULES) and problem.rule not in said
        ]
    lengths = ", ".join(str(point.prompt_tokens) for point in axis.points)
    answer: Analysis | None = None
    if pooled.result.ok:
        answer = pooled
        problems.append(
            Problem(
                Severity.WARNING,
                "pooled-contexts",
                f"the batch-only schedule (the seed's answer) pools {len(axis.points)} prompt"
                f" lengths ({lengths} tokens) into one cell per (batch size, K); the context"
                " grid tunes each length: export it with tune-spec-k export --format"
                " vllm-context (a schedule per context or for a --context-mix),"
                " vllm-rfc-48944 or vllm-pr-54801",
                field=axis.field,
                value=lengths,
            )
        )
    else:
        shortest = contexts[0]
        rules = sorted({problem.rule for problem in pooled.result.errors})
        if shortest.result.ok:
            answer = shortest
        given = (
            f"the batch-only schedule given is the shortest context's ({axis.points[0].label()})"
            if answer is not None
            else "no batch-only schedule is given"
        )
        problems.append(
            Problem(
                Severity.WARNING,
                "pooled-contexts",
                f"pooled over its {len(axis.points)} prompt lengths ({lengths} tokens), the"
                f" seed's rules reject the sweep ({len(pooled.result.errors)} errors: "
                + ", ".join(rules)
                + f"); {given}; the context grid tunes each length",
                field=axis.field,
                value=lengths,
            )
        )
    if reason is not None:
        problems.append(
            Problem(
                Severity.WARNING,
                "not-deployable",
                reason + "; the grid is reported, exports are refused",
                field="anchor",
                value=str(min(a for c in contexts for a in _anchors(c))),
                expected="an anchor at batch size 1",
            )
        )
    return ContextAnalysis(axis, pooled, contexts, answer, tuple(problems), options.confidence)
