"""A (batch x context) grid of chosen K, exported to every engine format that can hold it.

A sweep with a context axis gives the tuner one chosen K per (batch anchor, context point): the
result JSON's ``context_axis`` and ``context_grid`` (docs/context.md, "Exports"). No engine reads
that grid as it is; each format below says less, and each export says how much less:

- ``vllm-context``: today's vLLM (merged Dynamic SD) has no context axis. The grid collapses to
  one batch schedule for a context mix (:func:`mix_choice`), reported with one schedule per
  measured context (the grid's columns).
- ``vllm-rfc-48944``: vLLM RFC #48627 / PR #48944 (open): ``[bs_lo, bs_hi, ctx_lo, ctx_hi, K]``
  entries forming a rectangular grid; it holds the grid exactly.
- ``vllm-pr-54801``: vLLM PR #54801 (open): a batch table and a separate context-length table,
  assumed combined by taking the smaller K; the pair chosen by :func:`table_pair_search`, with a
  warning wherever it cannot express the measured optimum.

The expected objective of a cell under a K is that candidate's median
(:meth:`GridCell.median`); the loss of a choice is measured against the grid's selected K there
(:func:`loss_percent`), cell by cell (:func:`cell_losses`) and summarised
(:func:`loss_summary`). Every config is checked against its format's rules
(:func:`vllm_context_violations`, :func:`rfc_48944_violations`, :func:`pr_54801_violations`)
before it is returned: a violation is an error, never a file. Everything here is pure: the same
grid and choices give the same bytes (:meth:`ContextExport.text`).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, get_args

from lib.files import read_json
from lib.keys import LARGEST_WHOLE_NUMBER, MISSING, parse_json_string, whole_number
from lib.numbers import percent_text
from lib.problems import Problem, Severity, show_value
from lib.schedule import Schedule, validate_schedule
from lib.settings import Direction, prompt_length_expected, prompt_length_reason

__all__ = [
    "CONTEXT_FORMATS",
    "CONTEXT_SCHEDULE_FORMATS",
    "CTX_AGGS",
    "MAX_EXHAUSTIVE",
    "PR_54801_COMBINATION",
    "RFC_48944_KEY",
    "RFC_48944_LEGACY_KEY",
    "SEQ_LEN_KEY",
    "UNBOUNDED_CONTEXT",
    "CellLoss",
    "ContextExport",
    "ContextFormat",
    "ContextGrid",
    "ContextMix",
    "ContextPoint",
    "ContextSchedule",
    "ContextScheduleFormat",
    "CtxAgg",
    "GridCell",
    "LossSummary",
    "Pr54801Schedule",
    "Rfc48944Schedule",
    "TablePair",
    "assemble_grid",
    "batch_ranges",
    "cell_losses",
    "completeness_problems",
    "context_boundary",
    "context_export",
    "context_grid_of",
    "context_mix",
    "context_ranges",
    "context_schedule_key",
    "context_schedule_of",
    "default_context_mix",
    "loss_percent",
    "loss_summary",
    "merge_identical_neighbours",
    "mix_choice",
    "normalised_weights",
    "not_deployable_refusal",
    "pr_54801_export",
    "pr_54801_k_at",
    "pr_54801_violations",
    "range_k_at",
    "read_context_grid",
    "rfc_48944_entries",
    "rfc_48944_export",
    "rfc_48944_k_at",
    "rfc_48944_violations",
    "seq_len_violations",
    "table_pair_search",
    "unexportable_grid_problems",
    "vllm_context_export",
    "vllm_context_violations",
]

ContextFormat = Literal["vllm-context", "vllm-rfc-48944", "vllm-pr-54801"]
#: The formats that need a context grid, in the order ``--help`` lists them.
CONTEXT_FORMATS: tuple[ContextFormat, ...] = get_args(ContextFormat)
CtxAgg = Literal["median", "mean", "max"]
#: PR #48944's ways to turn a batch's per-request context lengths into one number.
CTX_AGGS: tuple[CtxAgg, ...] = get_args(CtxAgg)

#: The ``hi`` of the last context range: PR #48944 ends its last bucket at 2^31 - 1 and treats it
#: as unbounded (tune-spec-k's own limit on any number is the same).
UNBOUNDED_CONTEXT = LARGEST_WHOLE_NUMBER
#: The largest PR #54801 search done exhaustively, counted as (length tables) x (batch anchors)
#: x (candidate Ks): one batch K tried at one anchor under one length table.
MAX_EXHAUSTIVE = 200_000
#: The field PR #48944 names the 5-item schedule, and the deprecated alias it keeps.
RFC_48944_KEY = "speculative_token_schedule"
RFC_48944_LEGACY_KEY = "num_speculative_tokens_per_batch_size"
#: PR #54801's context-length table (its shape is presumed: the PR does not publish it).
SEQ_LEN_KEY = "num_speculative_tokens_per_seq_len"
#: The assumption every PR #54801 export states.
PR_54801_COMBINATION = (
    "assumed: the engine runs the smaller of the batch table's K and the length table's K"
    " (PR #54801 does not publish how it combines them)"
)

_GLOBAL_KEY = "num_speculative_tokens"
_SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
_DIRECTIONS: tuple[Direction, ...] = ("maximize", "minimize")


# --------------------------------------------------------------------------- the grid


@dataclass(frozen=True)
class ContextPoint:
    """One measured context point: the prompt length (what ``--context-mix`` names), the
    decode-time context (prompt + output / 2: what bucket boundaries fall between) and the
    output length (None when the tuner did not know it)."""

    prompt_tokens: int
    context_tokens: int
    output_tokens: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "context_tokens": self.context_tokens,
            "output_tokens": self.output_tokens,
        }


@dataclass(frozen=True)
class GridCell:
    """One (batch anchor, context point) of the grid: the K the tuner selected there, its
    status, and the median objective of every candidate kept there (``(K, median)``, by K)."""

    batch_size: int
    point: ContextPoint
    selected_k: int
    status: str
    medians: tuple[tuple[int, float], ...]
    #: The conservative score of every kept candidate (``(K, score)``), what the tuner ranked.
    scores: tuple[tuple[int, float], ...] = ()
    #: P(eps-good) of the selected K (the confidence analysis's), None where unknown.
    p_eps_good: float | None = None

    def score(self, k: int) -> float | None:
        """Candidate ``k``'s conservative score, its median when the file has none."""
        score = self._scores_by_k.get(k)
        return self.median(k) if score is None else score

    # The table searches look a cell up thousands of times: the pairs as dicts, built once.
    @functools.cached_property
    def _medians_by_k(self) -> dict[int, float]:
        return dict(self.medians)

    @functools.cached_property
    def _scores_by_k(self) -> dict[int, float]:
        return dict(self.scores)

    def median(self, k: int) -> float | None:
        """The expected objective of this cell under ``k``: the median of candidate ``k``, or
        None when ``k`` was not measured here or its candidate was rejected (a rejected median
        is not trusted to choose with).

        >>> cell = GridCell(1, ContextPoint(512, 576, 128), 3, "resolved", ((0, 90.0), (3, 120.0)))
        >>> cell.median(3), cell.median(1)
        (120.0, None)
        """
        return self._medians_by_k.get(k)

    @property
    def optimum(self) -> float:
        """The expected objective of the 2-D optimum: the selected K's median."""
        value = self.median(self.selected_k)
        assert value is not None  # context_grid_of refuses a grid where it is missing
        return value


@dataclass(frozen=True)
class ContextGrid:
    """The result JSON's context grid, complete: ``rows[i][j]`` is the cell of batch anchor
    ``anchors[i]`` at context point ``points[j]``.

    ``global_k``: the file's configured ``num_speculative_tokens``, else the largest K
    observed, else the largest candidate K (at least 1, vLLM's minimum). ``max_batch_size``:
    the upper end of the last batch range (the file's, else the largest anchor).
    ``deployable``: false when the anchors do not start at 1; every format is then refused with
    ``not_deployable_reason``.
    """

    points: tuple[ContextPoint, ...]
    anchors: tuple[int, ...]
    rows: tuple[tuple[GridCell, ...], ...]
    objective: str
    direction: Direction
    global_k: int
    max_batch_size: int
    tolerance: float
    axis_field: str
    deployable: bool
    not_deployable_reason: str | None
    #: The tuner's tie tolerance (``selection.relative_tolerance``): scores within it tie.
    relative_tolerance: float = 0.0

    @property
    def cells(self) -> tuple[GridCell, ...]:
        """Every cell, batch anchor by batch anchor, each row in context order."""
        return tuple(cell for row in self.rows for cell in row)

    @functools.cached_property
    def ks(self) -> tuple[int, ...]:
        """Every K kept somewhere in the grid, ascending."""
        return tuple(sorted({k for cell in self.cells for k, _ in cell.medians}))

    def to_json(self) -> dict[str, Any]:
        return {
            "points": [point.to_json() for point in self.points],
            "anchors": list(self.anchors),
            "selected_k": [[cell.selected_k for cell in row] for row in self.rows],
            "objective_metric": self.objective,
            "objective_direction": self.direction,
            "global_k": self.global_k,
            "max_batch_size": self.max_batch_size,
            "tolerance": self.tolerance,
            "field": self.axis_field,
            "deployable": self.deployable,
            "not_deployable_reason": self.not_deployable_reason,
        }


class _Reader:
    """Reads the grid's fields from a result JSON, one problem per bad field, each naming the
    file, the field (as a JSON path), the value and what was expected."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.problems: list[Problem] = []

    def bad(self, path: str, value: Any, expected: str, message: str = "") -> None:
        shown = "missing" if value is MISSING else show_value(value)
        self.problems.append(
            Problem(
                Severity.ERROR,
                "invalid-context-grid",
                message or f"{path} is {'missing' if value is MISSING else 'not ' + expected}",
                files=(self.source,),
                field=path,
                value=shown,
                expected=expected,
            )
        )

    def whole(
        self, data: Mapping[str, Any], key: str, path: str, minimum: int, *, nullable: bool = False
    ) -> int | None:
        value = data.get(key, MISSING)
        if nullable and value is None:
            return None
        number = None if value is MISSING else whole_number(value)
        if number is None or number < minimum:
            expected = f"a whole number >= {minimum}" + (" or null" if nullable else "")
            self.bad(f"{path}.{key}" if path else key, value, expected)
            return None
        return number

    def prompt(self, data: Mapping[str, Any], path: str) -> int | None:
        """A ``prompt_tokens`` field: a whole number within the prompt lengths every command
        accepts (:data:`lib.settings.PROMPT_TOKENS_RANGE`), so the grid the tuner writes is
        the grid this reads, and no export takes a length the tuner would refuse."""
        value = data.get("prompt_tokens", MISSING)
        number = None if value is MISSING else whole_number(value)
        if number is None or prompt_length_reason(number) is not None:
            self.bad(f"{path}.prompt_tokens", value, prompt_length_expected() + " (whole)")
            return None
        return number

    def mapping(self, data: Mapping[str, Any], key: str, path: str = "") -> Mapping[str, Any]:
        value = data.get(key, MISSING)
        if not isinstance(value, dict):
            self.bad(f"{path}.{key}" if path else key, value, "a JSON object")
            return {}
        return value

    def objects(
        self, data: Mapping[str, Any], key: str, path: str = ""
    ) -> list[tuple[str, Mapping[str, Any]]]:
        """The JSON objects listed under ``key``, each with its path; a problem for a missing
        or empty list and for each item that is not an object."""
        where = f"{path}.{key}" if path else key
        value = data.get(key, MISSING)
        if not isinstance(value, list) or not value:
            self.bad(where, value, "a non-empty list of JSON objects")
            return []
        found: list[tuple[str, Mapping[str, Any]]] = []
        for index, item in enumerate(value):
            if isinstance(item, dict):
                found.append((f"{where}[{index}]", item))
            else:
                self.bad(f"{where}[{index}]", item, "a JSON object")
        return found


def read_context_grid(path: str | Path) -> tuple[ContextGrid | None, list[Problem]]:
    """The context grid of a result JSON file (:func:`context_grid_of`), or None and what is
    wrong (an unreadable file, invalid JSON, a missing or incomplete grid)."""
    data, problems = read_json(path)
    if data is MISSING:
        return None, problems
    return context_grid_of(data, str(path))


def context_grid_of(data: Any, source: str) -> tuple[ContextGrid | None, list[Problem]]:
    """The complete context grid of a result JSON (``data``, read from ``source``), or None and
    every problem found.

    Refused, each with a problem naming ``source``: a file without ``context_grid`` (tuned
    without a context axis); a field of the wrong type (named as a JSON path, e.g.
    ``context_grid[3].candidates[0].k``); a cell at a prompt length that is not a context point;
    a (batch anchor, context point) with no cell, or with two; an undecided cell (no selected K:
    every candidate was rejected); a selected K that is not a kept candidate with a median > 0
    (losses are ratios to it). A grid that is not deployable is returned (the export refuses
    it, :func:`context_export`), unless it is also invalid: then the refusal joins the problems.

    >>> grid, problems = context_grid_of({"num_speculative_tokens_per_batch_size": []}, "r.json")
    >>> grid, [problem.rule for problem in problems]
    (None, ['no-context-grid'])
    """
    if not isinstance(data, dict) or "context_grid" not in data:
        return None, [
            Problem(
                Severity.ERROR,
                "no-context-grid",
                "the file has no context_grid: it was tuned without a context axis (a sweep"
                " that varies the prompt length gives one); the context formats need it, and"
                " --format vllm or trtllm exports its batch-only schedule",
                files=(source,),
                field="context_grid",
                expected="a result JSON of a sweep with a context axis",
            )
        ]
    reader = _Reader(source)
    axis = reader.mapping(data, "context_axis")
    points = _points(reader, axis)
    deployable = axis.get("deployable", MISSING)
    if not isinstance(deployable, bool):
        reader.bad("context_axis.deployable", deployable, "true or false")
    reason = axis.get("not_deployable_reason")
    reason = reason if isinstance(reason, str) else None
    tolerance = axis.get("tolerance", MISSING)
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float):
        reader.bad("context_axis.tolerance", tolerance, "a number >= 0")
        tolerance = 0.0
    elif not math.isfinite(tolerance) or tolerance < 0:
        reader.bad("context_axis.tolerance", tolerance, "a number >= 0")
    selection = reader.mapping(data, "selection")
    direction = selection.get("objective_direction", MISSING)
    if direction not in _DIRECTIONS:
        reader.bad("selection.objective_direction", direction, '"maximize" or "minimize"')
    objective = selection.get("objective_metric")
    max_batch_size = reader.whole(selection, "max_batch_size", "selection", 1, nullable=True)
    configured = reader.whole(
        data, "configured_global_num_speculative_tokens", "", 0, nullable=True
    )
    observed = reader.whole(data, "max_num_speculative_tokens_observed", "", 0, nullable=True)
    cells = _cells(reader, data, points)
    if reader.problems:
        return None, reader.problems + not_deployable_refusal(deployable is False, reason, source)
    anchors = tuple(sorted({batch for batch, _ in cells}))
    problems = unexportable_grid_problems(cells, anchors, points, source)
    if problems:
        return None, problems + not_deployable_refusal(deployable is False, reason, source)
    top = anchors[-1]
    if max_batch_size is not None and max_batch_size < top:
        reader.bad(
            "selection.max_batch_size",
            max_batch_size,
            f"at least the largest batch anchor {top}",
            f"selection.max_batch_size {max_batch_size} is below the largest batch anchor {top}",
        )
        return None, reader.problems
    tie = selection.get("relative_tolerance", 0.0)
    if isinstance(tie, bool) or not isinstance(tie, int | float) or not 0 <= tie < 1:
        reader.bad("selection.relative_tolerance", tie, "a number in [0, 1)")
        return None, reader.problems
    grid = assemble_grid(
        cells,
        points,
        objective=objective if isinstance(objective, str) else "objective",
        direction="minimize" if direction == "minimize" else "maximize",
        configured_global_k=configured,
        observed_k=observed,
        max_batch_size=max_batch_size,
        tolerance=float(tolerance),
        axis_field=str(axis.get("field", "")),
        deployable=deployable is True,
        not_deployable_reason=reason,
        relative_tolerance=float(tie),
    )
    return grid, []


def assemble_grid(
    cells: Mapping[tuple[int, int], GridCell],
    points: tuple[ContextPoint, ...],
    *,
    objective: str,
    direction: Direction,
    configured_global_k: int | None,
    observed_k: int | None,
    max_batch_size: int | None,
    tolerance: float,
    axis_field: str,
    deployable: bool,
    not_deployable_reason: str | None,
    relative_tolerance: float,
) -> ContextGrid:
    """The grid of complete ``cells`` (one per (batch anchor, context point), each decided:
    :func:`completeness_problems` found nothing), from a result JSON (:func:`context_grid_of`)
    or from an analysis in memory (:attr:`lib.context.ContextAnalysis.typed_grid`), so both
    give the same grid. ``global_k``: the configured K, else the largest observed, else the
    largest candidate K, at least 1; ``max_batch_size``: the given one, else the largest
    anchor."""
    anchors = tuple(sorted({batch for batch, _ in cells}))
    largest = max(k for cell in cells.values() for k, _ in cell.medians)
    global_k = configured_global_k if configured_global_k is not None else (observed_k or largest)
    return ContextGrid(
        points=points,
        anchors=anchors,
        rows=tuple(tuple(cells[anchor, p.prompt_tokens] for p in points) for anchor in anchors),
        objective=objective,
        direction=direction,
        global_k=max(global_k, 1),
        max_batch_size=max_batch_size if max_batch_size is not None else anchors[-1],
        tolerance=tolerance,
        axis_field=axis_field,
        deployable=deployable,
        not_deployable_reason=not_deployable_reason,
        relative_tolerance=relative_tolerance,
    )


def not_deployable_refusal(refused: bool, reason: str | None, source: str) -> list[Problem]:
    """The not-deployable refusal, when ``refused``."""
    if not refused:
        return []
    return [
        Problem(
            Severity.ERROR,
            "not-deployable",
            "the context grid cannot be deployed in any format: "
            + (reason or "the file says so (context_axis.deployable is false)"),
            files=(source,),
            field="context_axis.deployable",
            value="false",
            expected="true",
        )
    ]


def _points(reader: _Reader, axis: Mapping[str, Any]) -> tuple[ContextPoint, ...]:
    """The axis's context points, checked: whole token counts, strictly increasing prompt and
    context lengths (bucket boundaries need distinct, ordered contexts)."""
    points = []
    for path, raw in reader.objects(axis, "points", "context_axis"):
        prompt = reader.prompt(raw, path)
        context = reader.whole(raw, "context_tokens", path, 1)
        output = None
        if "output_tokens" in raw:
            output = reader.whole(raw, "output_tokens", path, 0, nullable=True)
        if prompt is not None and context is not None:
            points.append(ContextPoint(prompt, context, output))
    for before, after in itertools.pairwise(points):
        if after.prompt_tokens <= before.prompt_tokens or (
            after.context_tokens <= before.context_tokens
        ):
            reader.bad(
                "context_axis.points",
                [before.prompt_tokens, after.prompt_tokens],
                "points in increasing prompt_tokens and context_tokens",
                f"context points are not in increasing order: prompt {before.prompt_tokens}"
                f" (context {before.context_tokens}) then prompt {after.prompt_tokens}"
                f" (context {after.context_tokens})",
            )
    return tuple(points)


def _cells(
    reader: _Reader, data: Mapping[str, Any], points: tuple[ContextPoint, ...]
) -> dict[tuple[int, int], GridCell]:
    """The grid's cells by (batch size, prompt tokens); a duplicate is a problem."""
    by_prompt = {point.prompt_tokens: point for point in points}
    cells: dict[tuple[int, int], GridCell] = {}
    for path, raw in reader.objects(data, "context_grid"):
        batch = reader.whole(raw, "batch_size", path, 1)
        prompt = reader.prompt(raw, path)
        selected = reader.whole(raw, "selected_k", path, 0, nullable=True)
        status = raw.get("status")
        candidates = _candidates(reader, raw, path)
        if batch is None or prompt is None or candidates is None:
            continue
        point = by_prompt.get(prompt)
        if point is None:
            reader.bad(
                f"{path}.prompt_tokens",
                prompt,
                "one of the context points' prompt_tokens " + ", ".join(str(p) for p in by_prompt),
                f"{path} is at prompt length {prompt}, which is not a context point",
            )
            continue
        if (batch, prompt) in cells:
            reader.bad(
                path,
                [batch, prompt],
                "one cell per (batch_size, prompt_tokens)",
                f"{path} repeats the cell of batch {batch} at prompt {prompt}",
            )
            continue
        undecided = selected is None or status == "undecided"
        chosen = -1 if undecided else selected or 0
        p_eps_good = raw.get("p_eps_good")
        if p_eps_good is not None and not (_finite_number(p_eps_good, 0.0) and p_eps_good <= 1):
            reader.bad(f"{path}.p_eps_good", p_eps_good, "a probability in [0, 1] or null")
            continue
        p = None if p_eps_good is None else float(p_eps_good)
        cell = GridCell(batch, point, chosen, str(status), *candidates, p_eps_good=p)
        if not undecided and (cell.median(cell.selected_k) or 0.0) <= 0.0:
            reader.bad(
                f"{path}.selected_k",
                selected,
                "a kept candidate's K with a median objective > 0",
                f"{path}: the selected K={selected} is not a kept candidate with a median > 0"
                " (losses are measured against it)",
            )
            continue
        cells[batch, prompt] = cell
    return cells


def _candidates(
    reader: _Reader, raw: Mapping[str, Any], path: str
) -> tuple[tuple[tuple[int, float], ...], tuple[tuple[int, float], ...]] | None:
    """The (K, median) and the (K, conservative score) of every kept candidate of a cell (a
    candidate without ``verdict`` is kept, as the seed's are; one without a conservative score
    has none); None when a candidate is malformed. A conservative score may be negative (a
    median less its MAD penalty)."""
    medians: dict[int, float] = {}
    scores: dict[int, float] = {}
    seen: set[int] = set()
    before = len(reader.problems)
    for where, candidate in reader.objects(raw, "candidates", path):
        k = reader.whole(candidate, "k", where, 0)
        median = candidate.get("median_objective", MISSING)
        score = candidate.get("conservative_objective")
        verdict = candidate.get("verdict", "kept")
        if median is not None and not _finite_number(median, 0.0):
            reader.bad(f"{where}.median_objective", median, "a finite number >= 0 or null")
        if score is not None and not _finite_number(score, -math.inf):
            reader.bad(f"{where}.conservative_objective", score, "a finite number or null")
        if verdict not in ("kept", "rejected"):
            reader.bad(f"{where}.verdict", verdict, '"kept" or "rejected"')
        if k is not None and k in seen:
            reader.bad(f"{where}.k", k, "each K once per cell", f"{where} repeats K={k}")
        elif k is not None and verdict == "kept" and isinstance(median, int | float):
            medians[k] = float(median)
            if isinstance(score, int | float):
                scores[k] = float(score)
        if k is not None:
            seen.add(k)
    if len(reader.problems) > before:
        return None
    return tuple(sorted(medians.items())), tuple(sorted(scores.items()))


def _finite_number(value: Any, lowest: float) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and value >= lowest
    )


def unexportable_grid_problems(
    cells: Mapping[tuple[int, int], GridCell],
    anchors: Sequence[int],
    points: Sequence[ContextPoint],
    source: str,
) -> list[Problem]:
    """Why a grid of well-formed cells cannot be exported (empty: it can): no cell at all, a
    selected K without a median > 0 (losses are ratios to it), or
    :func:`completeness_problems`. The file's reader (:func:`context_grid_of`) and the
    analysis in memory (:attr:`lib.context.ContextAnalysis.typed_grid`) apply the same rules."""
    if not cells:
        return [
            Problem(
                Severity.ERROR,
                "incomplete-context-grid",
                "the grid has no cell: no context point has a decided batch anchor",
                files=(source,),
                field="context_grid",
                expected="one cell per (batch anchor, context point)",
            )
        ]
    unusable = [
        f"batch {batch} at prompt {prompt} (K={cell.selected_k})"
        for (batch, prompt), cell in sorted(cells.items())
        if cell.selected_k >= 0 and (cell.median(cell.selected_k) or 0.0) <= 0.0
    ]
    problems = completeness_problems(cells, anchors, points, source)
    if unusable:
        problems.append(
            Problem(
                Severity.ERROR,
                "invalid-context-grid",
                "the selected K is not a kept candidate with a median > 0 (losses are measured"
                " against it) for " + ", ".join(unusable),
                files=(source,),
                field="context_grid[].selected_k",
                expected="a kept candidate's K with a median objective > 0",
            )
        )
    return problems


def completeness_problems(
    cells: Mapping[tuple[int, int], GridCell],
    anchors: Sequence[int],
    points: Sequence[ContextPoint],
    source: str,
) -> list[Problem]:
    """An ``incomplete-context-grid`` error naming every (batch, prompt) without a cell, and an
    ``undecided-context-cell`` error naming every cell without a selected K."""
    missing = [
        f"batch {anchor} at prompt {point.prompt_tokens}"
        for anchor in anchors
        for point in points
        if (anchor, point.prompt_tokens) not in cells
    ]
    undecided = [
        f"batch {batch} at prompt {prompt}"
        for (batch, prompt), cell in sorted(cells.items())
        if cell.selected_k < 0
    ]
    found = [
        ("incomplete-context-grid", "the grid has no cell for", missing, "context_grid", None,
         "one cell per (batch anchor, context point)"),
        ("undecided-context-cell", "no K was chosen (every candidate rejected) for", undecided,
         "context_grid[].selected_k", "null", "a selected K in every cell"),
    ]  # fmt: skip
    problems = []
    for rule, message, cells_named, field, value, expected in found:
        if cells_named:
            problems.append(
                Problem(
                    Severity.ERROR,
                    rule,
                    f"{message} {', '.join(cells_named)}",
                    files=(source,),
                    field=field,
                    value=value,
                    expected=expected,
                )
            )
    return problems


# --------------------------------------------------------------------------- losses


def loss_percent(expected: float, optimum: float, direction: Direction) -> float:
    """What an expected objective loses against the optimum's, in percent; positive = worse.

    Maximised objective: ``(1 - expected / optimum) * 100``; minimised:
    ``(expected / optimum - 1) * 100``. Negative when the choice's median beats the optimum's
    (the tuner's selected K need not have the best median: it weighs noise and ties). The
    optimum must be > 0.

    >>> loss_percent(75.0, 100.0, "maximize"), loss_percent(125.0, 100.0, "minimize")
    (25.0, 25.0)
    >>> loss_percent(100.0, 100.0, "maximize")
    0.0
    """
    ratio = expected / optimum
    return (1.0 - ratio) * 100.0 if direction == "maximize" else (ratio - 1.0) * 100.0


@dataclass(frozen=True)
class ContextMix:
    """Weights over the context points (``(prompt tokens, weight)`` in point order, each > 0,
    summing to 1) and a sentence saying where they came from."""

    weights: tuple[tuple[int, float], ...]
    rule: str

    def weight(self, prompt_tokens: int) -> float:
        """The weight of a context point (0 when the mix leaves it out)."""
        return self._by_prompt.get(prompt_tokens, 0.0)

    @functools.cached_property
    def _by_prompt(self) -> dict[int, float]:
        return dict(self.weights)

    def text(self) -> str:
        """The mix as ``--context-mix`` spells it.

        >>> ContextMix(((512, 0.7), (8192, 0.3)), "given").text()
        '512:0.7,8192:0.3'
        """
        return ",".join(f"{prompt}:{weight:g}" for prompt, weight in self.weights)

    def to_json(self) -> dict[str, Any]:
        return {"weights": {str(p): w for p, w in self.weights}, "rule": self.rule}


def default_context_mix(grid: ContextGrid) -> ContextMix:
    """The mix when none is given: the shortest context point, weight 1 (the seed's world: a
    sweep at one short prompt length)."""
    shortest = grid.points[0].prompt_tokens
    return ContextMix(
        ((shortest, 1.0),), f"default: the shortest measured context (prompt {shortest}), weight 1"
    )


def _mix_terms(text: str) -> tuple[list[tuple[int, float]], str | None]:
    """``PROMPT:WEIGHT,...`` as pairs, or why not: prompts whole numbers (ASCII digits) within
    the prompt lengths every command accepts (:func:`lib.settings.prompt_length_reason`),
    weights finite and > 0.

    >>> _mix_terms("512:0.7, 8192:0.3")
    ([(512, 0.7), (8192, 0.3)], None)
    >>> _mix_terms("512:0")
    ([], "weight '0' of 512 is not > 0")
    >>> _mix_terms("512²:1")[1], _mix_terms("0:1")[1]
    ("prompt length '512²' is not a whole number of tokens", 'prompt length 0 is below 1 token')
    """
    terms = []
    for part in (part.strip() for part in text.split(",")):
        prompt_text, colon, weight_text = part.partition(":")
        if not colon:
            return [], f"{part!r} is not PROMPT:WEIGHT"
        digits = prompt_text.strip()
        # ASCII digits only: str.isdigit() also takes "²", which int() refuses.
        prompt = int(digits) if digits.isascii() and digits.isdigit() else None
        if prompt is None:
            return [], f"prompt length {digits!r} is not a whole number of tokens"
        if prompt_length_reason(prompt) is not None:
            return [], f"prompt length {prompt} is {prompt_length_reason(prompt)}"
        try:
            weight = float(weight_text)
        except ValueError:
            return [], f"weight {weight_text.strip()!r} of {prompt} is not a number"
        if not math.isfinite(weight) or weight <= 0:
            return [], f"weight {weight_text.strip()!r} of {prompt} is not > 0"
        terms.append((prompt, weight))
    return terms, None


def normalised_weights(weights: Sequence[float]) -> tuple[float, ...]:
    """Finite weights > 0 scaled to sum 1, without overflow: divided by their sum; where that
    sum overflows, each is first divided by the largest (so every one is in (0, 1] and their
    sum at most their count). ``1e308, 1e308`` is ``1, 1``'s mix, not a sum of infinity that
    makes every weight 0.

    >>> normalised_weights([1e308, 1e308]), normalised_weights([1.0, 1.0])
    ((0.5, 0.5), (0.5, 0.5))
    >>> normalised_weights([7.0, 3.0]), normalised_weights([5e-324])
    ((0.7, 0.3), (1.0,))
    """
    total = sum(weights)
    if not math.isfinite(total):
        largest = max(weights)
        weights = [weight / largest for weight in weights]
        total = sum(weights)
    return tuple(weight / total for weight in weights)


def _matched_point(prompt: int, grid: ContextGrid) -> ContextPoint | None:
    """The context point a ``--context-mix`` prompt length means: the nearest measured prompt
    length within the axis tolerance (relative to the measured length), else None."""
    near = [
        (abs(prompt - point.prompt_tokens) / point.prompt_tokens, point.prompt_tokens, point)
        for point in grid.points
        if abs(prompt - point.prompt_tokens) <= grid.tolerance * point.prompt_tokens
    ]
    return min(near, key=lambda item: item[:2])[2] if near else None


def context_mix(
    text: str | None, grid: ContextGrid, *, field: str, source: str
) -> tuple[ContextMix | None, list[Problem]]:
    """The context mix ``text`` (``"512:0.7,8192:0.3"``) names, matched to the grid's context
    points; :func:`default_context_mix` when ``text`` is None.

    Each prompt length is matched to the nearest measured prompt length within the axis's
    tolerance; one that matches none, two that match one point, a malformed term or a weight
    that is not > 0 is an ``invalid-context-mix`` error naming ``field`` (the flag), the value,
    and the measured points. The weights are normalised to sum 1, and the rule says so.
    """
    if text is None:
        return default_context_mix(grid), []
    measured = ", ".join(str(point.prompt_tokens) for point in grid.points)

    def invalid(message: str) -> tuple[None, list[Problem]]:
        problem = Problem(
            Severity.ERROR,
            "invalid-context-mix",
            message,
            files=(source,),
            field=field,
            value=show_value(text),
            expected=f"PROMPT:WEIGHT,... over the measured prompt lengths {measured}"
            f" (within {grid.tolerance:g} relative), weights > 0",
        )
        return None, [problem]

    terms, reason = _mix_terms(text)
    if reason is not None:
        return invalid(reason)
    weights: dict[int, float] = {}
    given: dict[int, int] = {}
    for prompt, weight in terms:
        point = _matched_point(prompt, grid)
        if point is None:
            return invalid(f"prompt length {prompt} matches no measured context point")
        if point.prompt_tokens in weights:
            return invalid(
                f"prompt lengths {given[point.prompt_tokens]} and {prompt} both match the"
                f" context point {point.prompt_tokens}"
            )
        weights[point.prompt_tokens] = weight
        given[point.prompt_tokens] = prompt
    normalised = normalised_weights(
        [weights[p.prompt_tokens] for p in grid.points if p.prompt_tokens in weights]
    )
    ordered = tuple(
        zip(
            (p.prompt_tokens for p in grid.points if p.prompt_tokens in weights),
            normalised,
            strict=True,
        )
    )
    rule = f"{field} {text}, matched to the measured prompt lengths and normalised to sum 1"
    return ContextMix(ordered, rule), []


@dataclass(frozen=True)
class CellLoss:
    """What an export runs at one cell against the 2-D optimum there."""

    batch_size: int
    prompt_tokens: int
    context_tokens: int
    weight: float
    optimum_k: int
    optimum_objective: float
    exported_k: int
    expected_objective: float
    loss_percent: float

    def to_json(self) -> dict[str, Any]:
        return {
            "batch_size": self.batch_size,
            "prompt_tokens": self.prompt_tokens,
            "context_tokens": self.context_tokens,
            "mix_weight": self.weight,
            "optimum_k": self.optimum_k,
            "optimum_objective": self.optimum_objective,
            "exported_k": self.exported_k,
            "expected_objective": self.expected_objective,
            "loss_percent": self.loss_percent,
        }


def cell_losses(
    grid: ContextGrid, exported_k: Callable[[int, int], int], mix: ContextMix
) -> tuple[CellLoss, ...]:
    """Per cell, the K the exported config runs there (``exported_k(batch_size,
    context_tokens)``: the format's own lookup, applied to the config as written), its expected
    objective and its loss against the grid's selected K (:func:`loss_percent`). Every exported
    K must have been measured and kept at its cell (each builder makes sure)."""
    losses = []
    for cell in grid.cells:
        k = exported_k(cell.batch_size, cell.point.context_tokens)
        expected = cell.median(k)
        if expected is None:
            raise ValueError(f"K={k} was not measured at batch {cell.batch_size}")
        losses.append(
            CellLoss(
                batch_size=cell.batch_size,
                prompt_tokens=cell.point.prompt_tokens,
                context_tokens=cell.point.context_tokens,
                weight=mix.weight(cell.point.prompt_tokens),
                optimum_k=cell.selected_k,
                optimum_objective=cell.optimum,
                exported_k=k,
                expected_objective=expected,
                loss_percent=loss_percent(expected, cell.optimum, grid.direction),
            )
        )
    return tuple(losses)


@dataclass(frozen=True)
class LossSummary:
    """The largest loss of any cell and where (None when no cell loses), the mix-weighted mean
    loss (each batch anchor counts equally; within one, the context points by their mix weight)
    and how many cells run another K than the optimum."""

    largest_loss_percent: float
    largest_at: tuple[int, int] | None
    mix_weighted_mean_loss_percent: float
    cells_off_optimum: int
    cells: int

    def line(self, format: str, mix: ContextMix) -> str:
        """The one-line summary the CLI prints after the config."""
        if self.largest_at is None:
            worst = "no cell loses against the 2-D optimum"
        else:
            batch, prompt = self.largest_at
            worst = (
                f"largest loss {percent_text(self.largest_loss_percent)} (batch {batch}, prompt"
                f" {prompt} tokens) against the 2-D optimum"
            )
        return (
            f"{format}: {worst}; mix-weighted mean loss"
            f" {percent_text(self.mix_weighted_mean_loss_percent)} (context mix {mix.text()});"
            f" {self.cells_off_optimum} of {self.cells} cells off the optimum K"
        )

    def to_json(self) -> dict[str, Any]:
        at = self.largest_at
        return {
            "largest_loss_percent": self.largest_loss_percent,
            "largest_loss_at": None
            if at is None
            else {"batch_size": at[0], "prompt_tokens": at[1]},
            "mix_weighted_mean_loss_percent": self.mix_weighted_mean_loss_percent,
            "cells_off_optimum": self.cells_off_optimum,
            "cells": self.cells,
        }


def loss_summary(losses: Sequence[CellLoss]) -> LossSummary:
    """The summary of a loss table: its largest loss and the first cell (by batch, then
    context) where it occurs, or None there when no loss is > 0; the mix-weighted mean loss,
    ``sum(weight * loss) / number of batch anchors``; the cells whose K is not the optimum's.

    >>> point = dict(prompt_tokens=512, context_tokens=576, optimum_objective=100.0)
    >>> losses = [CellLoss(1, weight=1.0, optimum_k=3, exported_k=3, expected_objective=100.0,
    ...                    loss_percent=0.0, **point),
    ...           CellLoss(256, weight=1.0, optimum_k=0, exported_k=3, expected_objective=80.0,
    ...                    loss_percent=20.0, **point)]
    >>> summary = loss_summary(losses)
    >>> summary.largest_at, summary.mix_weighted_mean_loss_percent, summary.cells_off_optimum
    ((256, 512), 10.0, 1)
    """
    largest = max(loss.loss_percent for loss in losses)
    at = next(
        (loss.batch_size, loss.prompt_tokens) for loss in losses if loss.loss_percent == largest
    )
    anchors = len({loss.batch_size for loss in losses})
    mean = sum(loss.weight * loss.loss_percent for loss in losses) / anchors
    return LossSummary(
        largest_loss_percent=largest,
        largest_at=at if largest > 0 else None,
        mix_weighted_mean_loss_percent=mean,
        cells_off_optimum=sum(loss.exported_k != loss.optimum_k for loss in losses),
        cells=len(losses),
    )


def _loss_table_lines(grid: ContextGrid, losses: Sequence[CellLoss]) -> list[str]:
    """The loss table as text: a row per batch anchor, a column per context point, each cell
    ``exported K/optimum K  loss %``."""
    by_cell = {(loss.batch_size, loss.prompt_tokens): loss for loss in losses}
    lines = [
        "expected objective vs the 2-D optimum, per cell (exported K/optimum K, loss %);"
        " rows: batch size, columns: prompt tokens",
        f"{'batch':>7}" + "".join(f"{point.prompt_tokens:>16}" for point in grid.points),
    ]
    for anchor in grid.anchors:
        shown = []
        for point in grid.points:
            loss = by_cell[anchor, point.prompt_tokens]
            text = f"{loss.exported_k}/{loss.optimum_k} {percent_text(loss.loss_percent):>7}"
            shown.append(f"{text:>16}")
        lines.append(f"{anchor:>7}" + "".join(shown))
    return lines


# --------------------------------------------------------------------------- the exports


@dataclass(frozen=True)
class ContextExport:
    """One format's export: the paste-ready ``config`` (the fields of vLLM's
    ``--speculative-config``), what the format adds beside it (``details``, e.g. the
    per-context schedules), the mix, the loss table and its summary, warnings and notes."""

    format: ContextFormat
    config: Mapping[str, Any]
    details: Mapping[str, Any]
    mix: ContextMix
    objective: str
    direction: Direction
    losses: tuple[CellLoss, ...]
    summary: LossSummary
    detail_lines: tuple[str, ...]
    table_lines: tuple[str, ...]
    warnings: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def largest_k(self) -> int:
        """The largest K any table of the config holds (what ``num_speculative_tokens`` must
        reach, else vLLM clamps the tables)."""
        tables = [rows for rows in self.config.values() if isinstance(rows, list)]
        return max((row[-1] for rows in tables for row in rows), default=0)

    def to_json(self) -> dict[str, Any]:
        """The ``-o`` file's content: format, config, mix, the format's details, the loss
        table, warnings and notes."""
        return {
            "format": self.format,
            "speculative_config": dict(self.config),
            "context_mix": self.mix.to_json(),
            **self.details,
            "loss": {
                "objective_metric": self.objective,
                "objective_direction": self.direction,
                "against": "the grid's selected K per (batch, context): the measured 2-D optimum",
                "summary": self.summary.to_json(),
                "cells": [loss.to_json() for loss in self.losses],
            },
            "warnings": list(self.warnings),
            "notes": list(self.notes),
        }

    def text(self) -> str:
        """The file ``tune-spec-k export --format FORMAT -o PATH`` writes (and the app offers):
        indented JSON and a newline; the same grid and choices give the same bytes."""
        return json.dumps(self.to_json(), indent=2, allow_nan=False) + "\n"

    def lines(self) -> list[str]:
        """What the CLI prints: the paste-ready config on one line first, then the summary,
        the format's details, the loss table, notes and warnings."""
        return [
            json.dumps(dict(self.config)),
            self.summary.line(self.format, self.mix),
            *self.detail_lines,
            *self.table_lines,
            *(f"note: {note}" for note in self.notes),
            *(f"warning: {warning}" for warning in self.warnings),
        ]


def _invalid(format: ContextFormat, config: Any, violations: Sequence[str]) -> list[Problem]:
    """One ``invalid-export`` error per violated rule of ``format``: nothing is written."""
    return [
        Problem(
            Severity.ERROR,
            "invalid-export",
            f"the {format} config breaks its format's rule: {violation}",
            value=show_value(config),
        )
        for violation in violations
    ]


def _finished(
    grid: ContextGrid,
    format: ContextFormat,
    config: dict[str, Any],
    losses: tuple[CellLoss, ...],
    mix: ContextMix,
    *,
    details: Mapping[str, Any],
    detail_lines: Sequence[str],
    warnings: Sequence[str] = (),
    notes: Sequence[str] = (),
) -> ContextExport:
    return ContextExport(
        format=format,
        config=config,
        details=details,
        mix=mix,
        objective=grid.objective,
        direction=grid.direction,
        losses=losses,
        summary=loss_summary(losses),
        detail_lines=tuple(detail_lines),
        table_lines=tuple(_loss_table_lines(grid, losses)),
        warnings=tuple(warnings),
        notes=tuple(notes),
    )


def _global_k_violations(config: Mapping[str, Any]) -> list[str]:
    """vLLM's rule on the startup maximum: ``num_speculative_tokens`` a whole number > 0."""
    value = config.get(_GLOBAL_KEY)
    if whole_number(value) is None or value == 0 or isinstance(value, float):
        return [f"{_GLOBAL_KEY} {show_value(value)} is not a whole number > 0"]
    return []


# ------------------------------------------------------------------ vllm-context (merged DSD)


def mix_choice(grid: ContextGrid, anchor_index: int, mix: ContextMix) -> int | None:
    """The one K that batch anchor ``grid.anchors[anchor_index]`` runs at every context under
    a batch-only schedule, by the tuner's own rule applied to the mix: each K's score is the
    mix-weighted conservative score ``sum(weight(c) * score(K at c))`` over the context points
    (the median where the file has no score); every K within the tuner's relative tolerance
    of the best score ties with it (``score / best >= 1 - tolerance``, or ``best / score`` for a
    minimised objective; when maximising and the best is <= 0, all tie), and the smallest tied K
    wins. With a mix of one context point this is that point's own pick. Only a K kept at every
    context point of the anchor can be chosen (its loss must be known everywhere it runs);
    None when there is none."""
    row = grid.rows[anchor_index]
    weighted: dict[int, float] = {}
    for k in grid.ks:
        scores = [cell.score(k) for cell in row]
        if any(score is None for score in scores):
            continue
        weighted[k] = sum(
            mix.weight(cell.point.prompt_tokens) * (score or 0.0)
            for cell, score in zip(row, scores, strict=True)
        )
    if not weighted:
        return None
    maximize = grid.direction == "maximize"
    best = max(weighted.values()) if maximize else min(weighted.values())
    floor = 1 - grid.relative_tolerance

    def ties(score: float) -> bool:
        if maximize:
            return best <= 0 or score / best >= floor
        return score > 0 and best / score >= floor

    return min(k for k, score in weighted.items() if ties(score) or score == best)


def vllm_context_violations(
    config: Mapping[str, Any], per_context: Mapping[str, Any] | None = None
) -> list[str]:
    """Today's vLLM rules (merged Dynamic SD, #32374) on a config and on each per-context
    schedule: ``num_speculative_tokens`` a whole number > 0, and every
    ``num_speculative_tokens_per_batch_size`` as :func:`lib.schedule.validate_schedule` checks
    it (non-empty, ``[lo, hi, K]`` integers, bounds >= 1, lo <= hi, K >= 0, no overlap, the
    first range starting at 1).

    >>> vllm_context_violations({"num_speculative_tokens": 3,
    ...     "num_speculative_tokens_per_batch_size": [[1, 63, 3], [64, 256, 0]]})
    []
    >>> vllm_context_violations({"num_speculative_tokens": 0,
    ...     "num_speculative_tokens_per_batch_size": [[2, 8, 3]]}, {"512": [[1, 9, -1]]})
    ... # doctest: +NORMALIZE_WHITESPACE
    ['num_speculative_tokens 0 is not a whole number > 0',
     'the first range starts at 2, not 1', 'per-context 512: entry 0 [1, 9, -1]: K must be >= 0']
    """
    violations = _global_k_violations(config)
    violations += validate_schedule(config.get(_SCHEDULE_KEY))
    for prompt, schedule in (per_context or {}).items():
        violations += [f"per-context {prompt}: {v}" for v in validate_schedule(schedule)]
    return violations


def vllm_context_export(
    grid: ContextGrid, mix: ContextMix, global_k: int
) -> tuple[ContextExport | None, list[Problem]]:
    """Today's vLLM: one batch schedule for the context mix (per anchor :func:`mix_choice`,
    merged as the seed merges, :meth:`lib.schedule.Schedule.from_picks`), beside one schedule
    per context point (the grid's column: no loss at its own context). The losses are those of
    the mix schedule at every cell, K looked up as vLLM does (:meth:`Schedule.k_at`; a
    ``global_k`` below the tables' largest K, which vLLM would clamp them to, is refused by the
    caller: :attr:`ContextExport.largest_k`)."""
    picks = [mix_choice(grid, index, mix) for index in range(len(grid.anchors))]
    lacking = [str(a) for a, k in zip(grid.anchors, picks, strict=True) if k is None]
    if lacking:
        return None, [
            Problem(
                Severity.ERROR,
                "no-common-k",
                "no K was kept at every context point of batch "
                + ", ".join(lacking)
                + ": a batch-only schedule runs one K at every context",
                value=", ".join(lacking),
            )
        ]
    schedule = Schedule.from_picks(grid.anchors, [k or 0 for k in picks], grid.max_batch_size)
    per_context = {
        str(point.prompt_tokens): Schedule.from_picks(
            grid.anchors, [row[index].selected_k for row in grid.rows], grid.max_batch_size
        ).to_json()
        for index, point in enumerate(grid.points)
    }
    config = {_GLOBAL_KEY: global_k, _SCHEDULE_KEY: schedule.to_json()}
    violations = vllm_context_violations(config, per_context)
    if violations:
        return None, _invalid("vllm-context", config, violations)
    detail_lines = [
        f"per context (prompt {prompt}, context {point.context_tokens} tokens): {json.dumps(s)}"
        for (prompt, s), point in zip(per_context.items(), grid.points, strict=True)
    ]
    notes = [
        "the config runs one batch schedule at every context length (vLLM has no context"
        " axis): it is the mix's best; per_context holds each measured context's own schedule"
        " (no loss at that context)",
    ]
    return _finished(
        grid,
        "vllm-context",
        config,
        cell_losses(grid, lambda batch, _: schedule.k_at(batch), mix),
        mix,
        details={"per_context": per_context},
        detail_lines=detail_lines,
        notes=notes,
    ), []


# ------------------------------------------------------------------ context ranges


def context_boundary(below: int, above: int) -> int | None:
    """The last context length of the range holding the measured context ``below``, when the
    next measured context is ``above``: the geometric midpoint rounded down,
    ``isqrt(below * above)``. No measured context is ever a range's bound: ``below < hi`` and
    ``hi + 1 < above`` whenever ``above - below >= 3`` (then ``below * above >= (below + 1)^2``,
    and the geometric mean is at most the arithmetic one, ``<= above - 1.5``). None when the two
    are closer than that.

    >>> context_boundary(576, 8256), context_boundary(100, 103), context_boundary(100, 102)
    (2180, 101, None)
    """
    if above - below < 3:
        return None
    return math.isqrt(below * above)


def context_ranges(points: Sequence[ContextPoint]) -> tuple[tuple[int, int], ...] | None:
    """Inclusive context ranges, one per context point, by decode-time context
    (``context_tokens``): contiguous from 1, each boundary :func:`context_boundary` between two
    neighbouring points, the last ending at :data:`UNBOUNDED_CONTEXT`. None when two points are
    too close to put a boundary between them.

    >>> context_ranges([ContextPoint(512, 576, 128), ContextPoint(8192, 8256, 128)])
    ((1, 2180), (2181, 2147483647))
    """
    his = []
    for before, after in itertools.pairwise(points):
        hi = context_boundary(before.context_tokens, after.context_tokens)
        if hi is None:
            return None
        his.append(hi)
    his.append(UNBOUNDED_CONTEXT)
    return tuple(zip([1, *(hi + 1 for hi in his[:-1])], his, strict=True))


def _too_close(grid: ContextGrid) -> list[Problem]:
    close = [
        f"{before.context_tokens} and {after.context_tokens}"
        for before, after in itertools.pairwise(grid.points)
        if context_boundary(before.context_tokens, after.context_tokens) is None
    ]
    return [
        Problem(
            Severity.ERROR,
            "context-points-too-close",
            "no context range boundary fits strictly between the measured contexts "
            + ", ".join(close),
            field="context_axis.points",
            expected="measured contexts at least 3 tokens apart",
        )
    ]


def batch_ranges(anchors: Sequence[int], max_batch_size: int) -> tuple[tuple[int, int], ...]:
    """The seed's batch ranges: anchor i covers ``[anchor_i, anchor_{i+1} - 1]``, the last up
    to ``max_batch_size``.

    >>> batch_ranges([1, 64, 256], 512)
    ((1, 63), (64, 255), (256, 512))
    """
    uppers = [after - 1 for after in anchors[1:]] + [max_batch_size]
    return tuple(zip(anchors, uppers, strict=True))


def merge_identical_neighbours(
    ranges: Sequence[tuple[int, int]], rows: Sequence[tuple[int, ...]]
) -> tuple[list[tuple[int, int]], list[tuple[int, ...]]]:
    """Neighbouring ranges whose rows of K are identical, merged into one range (the rows of
    a rectangular grid: a partial merge would break the rectangle).

    >>> merge_identical_neighbours([(1, 7), (8, 31), (32, 64)], [(3, 3), (3, 3), (0, 3)])
    ([(1, 31), (32, 64)], [(3, 3), (0, 3)])
    """
    merged_ranges: list[tuple[int, int]] = []
    merged_rows: list[tuple[int, ...]] = []
    for (lo, hi), row in zip(ranges, rows, strict=True):
        if merged_rows and merged_rows[-1] == row:
            merged_ranges[-1] = (merged_ranges[-1][0], hi)
        else:
            merged_ranges.append((lo, hi))
            merged_rows.append(row)
    return merged_ranges, merged_rows


def range_k_at(table: Sequence[Sequence[int]], value: int) -> int:
    """The K of a ``[[lo, hi, K], ...]`` context-length table at ``value``: the first range
    (by ``lo``) whose ``hi >= value`` (PR #48944's bucket rule, presumed for PR #54801); past the
    last range, the last K.

    >>> range_k_at([[1, 2180, 3], [2181, 2147483647, 0]], 2180), range_k_at([[1, 10, 1]], 11)
    (3, 1)
    """
    ordered = sorted((lo, hi, k) for lo, hi, k in table)
    return next((k for _, hi, k in ordered if hi >= value), ordered[-1][2])


# ------------------------------------------------------------------ vllm-rfc-48944


def rfc_48944_entries(grid: ContextGrid, ranges: Sequence[tuple[int, int]]) -> list[list[int]]:
    """The grid as PR #48944's ``[bs_lo, bs_hi, ctx_lo, ctx_hi, K]`` entries: the seed's batch
    ranges (:func:`batch_ranges`) by the context ``ranges``, K the grid's selected K;
    neighbouring whole rows, then whole columns, that are identical merge
    (:func:`merge_identical_neighbours`: the grid stays rectangular, and no cell changes K).
    Batch-major, then by context."""
    rows = [tuple(cell.selected_k for cell in row) for row in grid.rows]
    batch, rows = merge_identical_neighbours(batch_ranges(grid.anchors, grid.max_batch_size), rows)
    columns = [tuple(column) for column in zip(*rows, strict=True)]
    contexts, columns = merge_identical_neighbours(ranges, columns)
    rows = [tuple(row) for row in zip(*columns, strict=True)]
    return [
        [bs_lo, bs_hi, ctx_lo, ctx_hi, k]
        for (bs_lo, bs_hi), row in zip(batch, rows, strict=True)
        for (ctx_lo, ctx_hi), k in zip(contexts, row, strict=True)
    ]


def rfc_48944_k_at(entries: Sequence[Sequence[int]], batch_size: int, context: int) -> int:
    """The K PR #48944 runs: the row of the batch range holding ``batch_size`` (past the last,
    the last row), then in it the first context range whose ``hi >= context``.

    >>> rfc_48944_k_at([[1, 8, 1, 100, 3], [1, 8, 101, 2147483647, 5]], 4, 500)
    5
    """
    batches = sorted({(entry[0], entry[1]) for entry in entries})
    row = next(((lo, hi) for lo, hi in batches if lo <= batch_size <= hi), batches[-1])
    table = [[e[2], e[3], e[4]] for e in entries if (e[0], e[1]) == row]
    return range_k_at(table, context)


def _whole_entry(entry: Any, size: int) -> bool:
    return (
        isinstance(entry, list | tuple)
        and len(entry) == size
        and all(isinstance(x, int) and not isinstance(x, bool) for x in entry)
    )


def _entry_violations(
    index: int, entry: Sequence[int], ranges: Sequence[tuple[str, str, int, int]]
) -> list[str]:
    """The rules on one entry of integers ending in K: each of its ``(name, prefix, lo, hi)``
    ranges has bounds >= 1 and lo <= hi; K >= 0; no number above
    :data:`~lib.keys.LARGEST_WHOLE_NUMBER` (tune-spec-k's own limit).

    >>> _entry_violations(2, [0, 5, 3], [("length", "len", 0, 5)])
    ['entry 2 [0, 5, 3]: length bounds must be >= 1']
    """
    shown = f"entry {index} {list(entry)}"
    violations = []
    for name, prefix, lo, hi in ranges:
        if lo < 1 or hi < 1:
            violations.append(f"{shown}: {name} bounds must be >= 1")
        if lo > hi:
            violations.append(f"{shown}: {prefix}_lo > {prefix}_hi")
    if entry[-1] < 0:
        violations.append(f"{shown}: K must be >= 0")
    if max(entry) > LARGEST_WHOLE_NUMBER:
        violations.append(f"{shown}: numbers above {LARGEST_WHOLE_NUMBER}")
    return violations


def _ranges_violations(ranges: Sequence[tuple[int, int]], what: str) -> list[str]:
    """Distinct ``what`` ranges, sorted: the first starts at 1, each next one starts right
    after the previous ``hi`` (contiguous: no gap, no overlap)."""
    ordered = sorted(set(ranges))
    violations = []
    if ordered and ordered[0][0] != 1:
        violations.append(f"the first {what} range {list(ordered[0])} does not start at 1")
    for before, after in itertools.pairwise(ordered):
        if after[0] != before[1] + 1:
            violations.append(
                f"{what} ranges {list(before)} and {list(after)} are not contiguous"
                f" (expected the next to start at {before[1] + 1})"
            )
    return violations


def rfc_48944_violations(entries: Any) -> list[str]:
    """PR #48944's validator (stricter than the RFC text), as violations (empty = valid):

    - a non-empty list; every entry 5 integers ``[bs_lo, bs_hi, ctx_lo, ctx_hi, K]``, and 3-
      and 5-item entries may not be mixed;
    - batch and context bounds >= 1 (``ctx_lo = 0`` is rejected), lo <= hi, K >= 0;
    - the distinct batch ranges, sorted, start at 1 and do not overlap;
    - rectangular: every batch range carries the same context ranges, each (batch range,
      context range) cell exactly once, the entry count = batch ranges x context ranges;
    - the distinct context ranges start at 1 and are contiguous (the last one's ``hi`` is
      treated as unbounded).

    K is not checked against ``num_speculative_tokens`` (the engine clamps it). Plus
    tune-spec-k's own limit: no number above :data:`~lib.keys.LARGEST_WHOLE_NUMBER`.

    >>> rfc_48944_violations([[1, 8, 1, 100, 3], [1, 8, 101, 2147483647, 5],
    ...                       [9, 64, 1, 100, 0], [9, 64, 101, 2147483647, 2]])
    []
    >>> rfc_48944_violations([[1, 8, 0, 100, 3]])
    ['entry 0 [1, 8, 0, 100, 3]: context bounds must be >= 1']
    """
    if not isinstance(entries, list | tuple) or not entries:
        return ["the schedule must be a non-empty list of [bs_lo, bs_hi, ctx_lo, ctx_hi, K]"]
    sizes = {len(entry) for entry in entries if isinstance(entry, list | tuple)}
    if {3, 5} <= sizes:
        threes = [
            str(i) for i, e in enumerate(entries) if isinstance(e, list | tuple) and len(e) == 3
        ]
        return ["3- and 5-item entries are mixed (3 items: entry " + ", ".join(threes) + ")"]
    violations = []
    cells = []
    for index, entry in enumerate(entries):
        if not _whole_entry(entry, 5):
            violations.append(
                f"entry {index} {show_value(entry)} is not a list of 5 integers"
                " [bs_lo, bs_hi, ctx_lo, ctx_hi, K]"
            )
            continue
        bs_lo, bs_hi, ctx_lo, ctx_hi, _ = entry
        violations += _entry_violations(
            index, entry, [("batch", "bs", bs_lo, bs_hi), ("context", "ctx", ctx_lo, ctx_hi)]
        )
        cells.append(((bs_lo, bs_hi), (ctx_lo, ctx_hi)))
    if violations:
        return violations
    return (
        _batch_range_violations([batch for batch, _ in cells])
        + _rectangle_violations(cells)
        + _ranges_violations([context for _, context in cells], "context")
    )


def _batch_range_violations(ranges: Sequence[tuple[int, int]]) -> list[str]:
    """The distinct batch ranges, sorted, start at 1 and do not overlap (gaps are allowed)."""
    ordered = sorted(set(ranges))
    violations = []
    if ordered[0][0] != 1:
        violations.append(f"the first batch range {list(ordered[0])} does not start at 1")
    for before, after in itertools.pairwise(ordered):
        if after[0] <= before[1]:
            violations.append(f"batch ranges {list(before)} and {list(after)} overlap")
    return violations


def _rectangle_violations(
    cells: Sequence[tuple[tuple[int, int], tuple[int, int]]],
) -> list[str]:
    """Every batch range carries the same context ranges; each cell appears once; the entry
    count is batch ranges x context ranges."""
    violations = []
    contexts_of: dict[tuple[int, int], set[tuple[int, int]]] = collections.defaultdict(set)
    for batch, context in cells:
        contexts_of[batch].add(context)
    every: set[tuple[int, int]] = set()
    for contexts in contexts_of.values():
        every |= contexts
    for batch, contexts in sorted(contexts_of.items()):
        if contexts != every:
            missing = ", ".join(str(list(c)) for c in sorted(every - contexts))
            violations.append(
                f"batch range {list(batch)} lacks the context ranges {missing}: every batch"
                " range must carry the same context ranges"
            )
    for (batch, context), count in sorted(collections.Counter(cells).items()):
        if count > 1:
            violations.append(
                f"the cell (batch {list(batch)}, context {list(context)}) appears {count} times"
            )
    expected = len(contexts_of) * len(every)
    if len(cells) != expected:
        violations.append(
            f"{len(cells)} entries, expected {len(contexts_of)} batch ranges x {len(every)}"
            f" context ranges = {expected}"
        )
    return violations


def _rfc_48944_config_violations(config: Mapping[str, Any]) -> list[str]:
    """The whole config: ``num_speculative_tokens`` > 0, ``ctx_agg`` one of :data:`CTX_AGGS`,
    the schedule under exactly one of its two names, and the entries' rules."""
    keys = [key for key in (RFC_48944_KEY, RFC_48944_LEGACY_KEY) if key in config]
    violations = _global_k_violations(config)
    if config.get("ctx_agg") not in CTX_AGGS:
        violations.append(f"ctx_agg {show_value(config.get('ctx_agg'))} is not one of {CTX_AGGS}")
    if len(keys) != 1:
        violations.append(
            f"expected the schedule under exactly one of {RFC_48944_KEY}, {RFC_48944_LEGACY_KEY}"
        )
        return violations
    return violations + rfc_48944_violations(config[keys[0]])


def rfc_48944_export(
    grid: ContextGrid,
    mix: ContextMix,
    global_k: int,
    ctx_agg: CtxAgg = "mean",
    legacy_field_name: bool = False,
) -> tuple[ContextExport | None, list[Problem]]:
    """PR #48944: the grid itself (:func:`rfc_48944_entries`) under ``speculative_token_schedule``
    (or its deprecated alias ``num_speculative_tokens_per_batch_size`` with
    ``legacy_field_name``), with ``ctx_agg`` and ``num_speculative_tokens``. Context ranges from
    :func:`context_ranges`. The losses look every cell up in the entries as written
    (:func:`rfc_48944_k_at`): 0 everywhere, since merging identical
    neighbours changes no cell."""
    ranges = context_ranges(grid.points)
    if ranges is None:
        return None, _too_close(grid)
    entries = rfc_48944_entries(grid, ranges)
    key = RFC_48944_LEGACY_KEY if legacy_field_name else RFC_48944_KEY
    config = {_GLOBAL_KEY: global_k, key: entries, "ctx_agg": ctx_agg}
    violations = _rfc_48944_config_violations(config)
    if violations:
        return None, _invalid("vllm-rfc-48944", config, violations)
    notes = [
        "needs vLLM with PR #48944 (open); released vLLM rejects 5-item entries",
        "context ranges by decode-time context (prompt + output / 2), each boundary the"
        " geometric midpoint of two neighbouring measured contexts rounded down, never on a"
        f" measured context; the last range ends at {UNBOUNDED_CONTEXT} (unbounded)",
        "each measured run's requests share one prompt length, so ctx_agg (how a batch's"
        " per-request lengths become one number) did not matter in the sweep; with mixed"
        " lengths it does",
    ]
    if legacy_field_name:
        notes.append(f"{RFC_48944_LEGACY_KEY} is PR #48944's deprecated alias of {RFC_48944_KEY}")
    details = {
        "context_ranges": [
            {
                "lo": lo,
                "hi": hi,
                "prompt_tokens": p.prompt_tokens,
                "context_tokens": p.context_tokens,
            }
            for (lo, hi), p in zip(ranges, grid.points, strict=True)
        ]
    }
    detail_lines = [
        "context ranges: "
        + ", ".join(
            f"[{lo}, {hi}] holds context {p.context_tokens} (prompt {p.prompt_tokens})"
            for (lo, hi), p in zip(ranges, grid.points, strict=True)
        )
    ]
    return _finished(
        grid,
        "vllm-rfc-48944",
        config,
        cell_losses(grid, lambda batch, context: rfc_48944_k_at(entries, batch, context), mix),
        mix,
        details=details,
        detail_lines=detail_lines,
        notes=notes,
    ), []


# ------------------------------------------------------------------ vllm-pr-54801


def seq_len_violations(table: Any) -> list[str]:
    """The rules a ``num_speculative_tokens_per_seq_len`` table ``[[len_lo, len_hi, K], ...]``
    is held to (the PR publishes none; these are PR #48944's for context ranges): a non-empty
    list of 3 integers each, bounds >= 1, lo <= hi, K >= 0, ranges from 1 and contiguous.

    >>> seq_len_violations([[1, 2180, 3], [2181, 2147483647, 0]])
    []
    >>> seq_len_violations([[1, 100, 3], [200, 300, 0]])  # doctest: +NORMALIZE_WHITESPACE
    ['context ranges [1, 100] and [200, 300] are not contiguous
      (expected the next to start at 101)']
    """
    if not isinstance(table, list | tuple) or not table:
        return [f"{SEQ_LEN_KEY} must be a non-empty list of [len_lo, len_hi, K]"]
    violations = []
    ranges = []
    for index, entry in enumerate(table):
        if not _whole_entry(entry, 3):
            violations.append(f"entry {index} {show_value(entry)} is not a list of 3 integers")
            continue
        lo, hi, _ = entry
        violations += _entry_violations(index, entry, [("length", "len", lo, hi)])
        ranges.append((lo, hi))
    return violations or _ranges_violations(ranges, "context")


def pr_54801_violations(config: Mapping[str, Any]) -> list[str]:
    """A PR #54801 config: ``num_speculative_tokens`` > 0, the batch table by today's vLLM
    rules (:func:`lib.schedule.validate_schedule`), the length table by
    :func:`seq_len_violations`."""
    return (
        _global_k_violations(config)
        + validate_schedule(config.get(_SCHEDULE_KEY))
        + seq_len_violations(config.get(SEQ_LEN_KEY))
    )


def pr_54801_k_at(
    batch_table: Schedule, length_table: Sequence[Sequence[int]], batch_size: int, context: int
) -> int:
    """The K PR #54801 is assumed to run (:data:`PR_54801_COMBINATION`): the smaller of the
    batch table's K at ``batch_size`` (:meth:`lib.schedule.Schedule.k_at`) and the length
    table's at ``context`` (:func:`range_k_at`).

    >>> pr_54801_k_at(Schedule(((1, 63, 3), (64, 256, 5))), [[1, 2180, 3], [2181, 9999, 0]],
    ...               64, 2180)
    3
    """
    return min(batch_table.k_at(batch_size), range_k_at(length_table, context))


@dataclass(frozen=True)
class TablePair:
    """PR #54801's two tables, as chosen: a K per batch anchor and a K per context point; how
    they were found (``"exhaustive"`` or ``"coordinate ascent"``) and how many (length table,
    anchor, batch K) trials that took."""

    batch_ks: tuple[int, ...]
    length_ks: tuple[int, ...]
    method: str
    trials: int
    #: How many (anchor, batch K, cell) terms the search looked up: its cost, counted.
    lookups: int = 0
    #: Coordinate ascent's full passes over the context points (0: exhaustive).
    passes: int = 0


def _anchor_key(
    grid: ContextGrid, index: int, batch_k: int, length_ks: Sequence[int], mix: ContextMix
) -> tuple[float, float] | None:
    """How well one anchor does under ``min(batch_k, length K)``, ranked as the tuner ranks:
    (the loss of its mix-weighted conservative score against the grid's picks' under the same
    mix, the sum of its cells' losses by the same score), smaller is better; None when some
    cell's K was not kept there. Scores as :meth:`GridCell.score` (the median where the file
    has none); a grid pick whose score is not > 0 is compared on medians."""
    expected = optimum = plain = 0.0
    for cell, length_k in zip(grid.rows[index], length_ks, strict=True):
        k = min(batch_k, length_k)
        picked = cell.score(cell.selected_k)
        value = cell.score(k) if picked is not None and picked > 0 else cell.median(k)
        best = picked if picked is not None and picked > 0 else cell.optimum
        if value is None:
            return None
        weight = mix.weight(cell.point.prompt_tokens)
        expected += weight * value
        optimum += weight * best
        plain += loss_percent(value, best, grid.direction)
    return loss_percent(expected, optimum, grid.direction), plain


def _best_batch_ks(
    grid: ContextGrid, length_ks: Sequence[int], mix: ContextMix
) -> tuple[tuple[float, float], tuple[int, ...]] | None:
    """The best batch table under a length table, anchor by anchor (exact: the anchors'
    batch Ks do not interact): per anchor the smallest key of :func:`_anchor_key`, ties to the
    smallest K; the summed key. None when some anchor has no feasible K."""
    total = (0.0, 0.0)
    picks = []
    for index in range(len(grid.anchors)):
        best: tuple[tuple[float, float], int] | None = None
        for k in grid.ks:
            key = _anchor_key(grid, index, k, length_ks, mix)
            if key is not None and (best is None or key < best[0]):
                best = (key, k)
        if best is None:
            return None
        total = (total[0] + best[0][0], total[1] + best[0][1])
        picks.append(best[1])
    return total, tuple(picks)


def table_pair_search(
    grid: ContextGrid, mix: ContextMix, max_exhaustive: int = MAX_EXHAUSTIVE
) -> TablePair | None:
    """The batch table and length table that do best under the smaller-K rule.

    Objective, smaller is better: per batch anchor, the loss of its mix-weighted expected
    objective against the 2-D optimum's under the same mix (so each anchor counts equally, and
    with an unrestricting length table the batch table is :func:`mix_choice`'s), summed over
    the anchors; ties go to the smaller sum of every cell's own loss (the mix's unweighted
    contexts count then), then to the smaller Ks (length table first, compared in order).
    Only pairs whose every cell runs a kept K are feasible.

    Search: given a length table the best batch table is found exactly, anchor by anchor. With
    at most ``max_exhaustive`` trials (length tables x anchors x Ks) every length table is
    tried: the pair is the exact optimum over every pair. Else coordinate ascent from the
    length table that restricts nothing (the largest K everywhere): each context point in turn
    takes its best K given the others (ties: smallest; kept only when strictly better), until
    a full pass changes nothing (:func:`_coordinate_ascent`: its cost is linear in anchors
    and in points, about anchors x Ks^2 x points look-ups a pass, counted in
    :attr:`TablePair.lookups`). Deterministic either way. None when no pair is feasible.
    """
    ks = grid.ks
    size = len(grid.points)
    anchors = len(grid.anchors)
    exhaustive = len(ks) ** size * anchors * len(ks) <= max_exhaustive
    if not exhaustive:
        return _coordinate_ascent(grid, mix)
    best: tuple[tuple[float, float], tuple[int, ...], tuple[int, ...]] | None = None
    trials = 0
    for length_ks in itertools.product(ks, repeat=size):
        trials += anchors * len(ks)
        found = _best_batch_ks(grid, length_ks, mix)
        if found is not None and (best is None or found[0] < best[0]):
            best = (found[0], length_ks, found[1])
    if best is None:
        return None
    return TablePair(best[2], best[1], "exhaustive", trials, trials * size)


#: One cell's term of an anchor's key under a K: (mix weight x expected score, the cell's own
#: loss), or None where the K was not kept there (infeasible).
_Term = tuple[float, float] | None


def _cell_terms(grid: ContextGrid, mix: ContextMix) -> list[list[dict[int, _Term]]]:
    """Per anchor, per context point, per K: the cell's term of :func:`_anchor_key` (looked
    up once: the ascent adds terms, it does not recompute them)."""
    terms = []
    for row in grid.rows:
        row_terms = []
        for cell in row:
            picked = cell.score(cell.selected_k)
            by_score = picked is not None and picked > 0
            best = picked if by_score and picked is not None else cell.optimum
            weight = mix.weight(cell.point.prompt_tokens)
            by_k: dict[int, _Term] = {}
            for k in grid.ks:
                value = cell.score(k) if by_score else cell.median(k)
                by_k[k] = (
                    None
                    if value is None
                    else (
                        weight * value,
                        loss_percent(value, best, grid.direction),
                    )
                )
            row_terms.append(by_k)
        terms.append(row_terms)
    return terms


def _anchor_optima(grid: ContextGrid, mix: ContextMix) -> list[float]:
    """Per anchor, the mix-weighted score of the grid's own picks (:func:`_anchor_key`'s
    reference: it depends on no table)."""
    optima = []
    for row in grid.rows:
        total = 0.0
        for cell in row:
            picked = cell.score(cell.selected_k)
            best = picked if picked is not None and picked > 0 else cell.optimum
            total += mix.weight(cell.point.prompt_tokens) * best
        optima.append(total)
    return optima


def _add(first: _Term, second: _Term) -> _Term:
    if first is None or second is None:
        return None
    return (first[0] + second[0], first[1] + second[1])


def _coordinate_ascent(grid: ContextGrid, mix: ContextMix) -> TablePair | None:
    """:func:`table_pair_search` beyond the exhaustive bound: from the length table that
    restricts nothing, each context point in turn takes its best K given the others (ties:
    the smallest; changed only when strictly better), until a full pass changes nothing.

    Near-linear in the grid: an anchor's key under a trial K at point ``p`` is the sum of its
    cells' terms before ``p`` (kept as the pass moves on), the term at ``p``, and the sum after
    ``p`` (summed once per pass), so a pass looks up about anchors x Ks x points x (Ks + 2)
    terms, not anchors x Ks^2 x points^2. The best batch table of the final length table is
    then found exactly (:func:`_best_batch_ks`)."""
    ks = grid.ks
    size = len(grid.points)
    terms = _cell_terms(grid, mix)
    optima = _anchor_optima(grid, mix)
    zero: _Term = (0.0, 0.0)
    length_ks = [ks[-1]] * size
    lookups = trials = passes = 0

    def key_of(anchor: int, total: _Term) -> tuple[float, float] | None:
        if total is None:
            return None
        return loss_percent(total[0], optima[anchor], grid.direction), total[1]

    def best_total(
        keys: Sequence[Sequence[tuple[float, float] | None]],
    ) -> tuple[float, float] | None:
        """The summed best key over anchors (per anchor the smallest over batch Ks)."""
        total = (0.0, 0.0)
        for by_batch in keys:
            feasible = [key for key in by_batch if key is not None]
            if not feasible:
                return None
            smallest = min(feasible)
            total = (total[0] + smallest[0], total[1] + smallest[1])
        return total

    changed = True
    while changed:
        changed = False
        passes += 1
        # suffix[a][b][p]: the terms after point p under the current length table.
        suffix = []
        for anchor in range(len(grid.anchors)):
            by_batch = []
            for batch_k in ks:
                sums = [zero] * (size + 1)
                for position in range(size - 1, -1, -1):
                    term = terms[anchor][position][min(batch_k, length_ks[position])]
                    sums[position] = _add(term, sums[position + 1])
                    lookups += 1
                by_batch.append(sums)
            suffix.append(by_batch)
        prefix = [[zero] * len(ks) for _ in grid.anchors]
        for position in range(size):
            scored: list[tuple[tuple[float, float] | None, int]] = []
            for k in ks:
                keys = []
                for anchor in range(len(grid.anchors)):
                    keys.append(
                        [
                            key_of(
                                anchor,
                                _add(
                                    _add(
                                        prefix[anchor][b],
                                        terms[anchor][position][min(batch_k, k)],
                                    ),
                                    suffix[anchor][b][position + 1],
                                ),
                            )
                            for b, batch_k in enumerate(ks)
                        ]
                    )
                lookups += len(grid.anchors) * len(ks)
                trials += len(grid.anchors) * len(ks)
                scored.append((best_total(keys), k))
            current = next(key for key, k in scored if k == length_ks[position])
            feasible = [(key, k) for key, k in scored if key is not None]
            if feasible:
                key, k = min(feasible)
                if current is None or key < current:
                    changed = changed or k != length_ks[position]
                    length_ks[position] = k
            for anchor in range(len(grid.anchors)):
                for b, batch_k in enumerate(ks):
                    term = terms[anchor][position][min(batch_k, length_ks[position])]
                    prefix[anchor][b] = _add(prefix[anchor][b], term)
                    lookups += 1
    found = _best_batch_ks(grid, length_ks, mix)
    if found is None:
        return None
    lookups += len(grid.anchors) * len(ks) * size
    return TablePair(found[1], tuple(length_ks), "coordinate ascent", trials, lookups, passes)


def _pr_54801_warnings(
    grid: ContextGrid, pair: TablePair, losses: Sequence[CellLoss], mix: ContextMix
) -> list[str]:
    """One warning per cell where the pair cannot run the measured optimum's K, with the lost
    percent; where the batch table says 0 and the optimum speculates, what raising the batch
    table would cost at that batch's other contexts."""
    warnings = []
    by_cell = {(loss.batch_size, loss.prompt_tokens): loss for loss in losses}
    for index, row in enumerate(grid.rows):
        batch_k = pair.batch_ks[index]
        for cell, length_k in zip(row, pair.length_ks, strict=True):
            loss = by_cell[cell.batch_size, cell.point.prompt_tokens]
            if loss.exported_k == cell.selected_k:
                continue
            if batch_k < cell.selected_k and length_k >= cell.selected_k:
                cause = "the batch table caps it"
            elif length_k < cell.selected_k and batch_k >= cell.selected_k:
                cause = "the length table caps it"
            elif loss.exported_k < cell.selected_k:
                cause = "both tables cap it"
            else:
                cause = "both tables allow more"
            text = (
                f"batch {cell.batch_size}, prompt {cell.point.prompt_tokens} tokens: the pair runs"
                f" K={loss.exported_k} (the smaller of batch K {batch_k} and length K"
                f" {length_k}; {cause}) where the measured optimum is K={cell.selected_k}:"
                f" loses {percent_text(loss.loss_percent)}"
            )
            if batch_k == 0 < cell.selected_k:
                raised = _anchor_mix_loss(grid, index, cell.selected_k, pair.length_ks, mix)
                now = _anchor_mix_loss(grid, index, batch_k, pair.length_ks, mix)
                text += (
                    f". The batch table says 0 at batch {cell.batch_size}, and the smaller-K rule"
                    " lets no length table turn speculation back on; raising the batch table to"
                    f" {cell.selected_k} there would make batch {cell.batch_size}'s mix-weighted"
                    f" loss {percent_text(raised)} instead of {percent_text(now)}"
                )
            warnings.append(text)
    return warnings


def _anchor_mix_loss(
    grid: ContextGrid, index: int, batch_k: int, length_ks: Sequence[int], mix: ContextMix
) -> float:
    """The mix-weighted loss of one anchor's cells (as in :func:`loss_summary`) under
    ``min(batch_k, length K)``; a K not kept at a cell counts as unknown (NaN)."""
    total = 0.0
    for cell, length_k in zip(grid.rows[index], length_ks, strict=True):
        median = cell.median(min(batch_k, length_k))
        if median is None:
            return math.nan
        total += mix.weight(cell.point.prompt_tokens) * loss_percent(
            median, cell.optimum, grid.direction
        )
    return total


def pr_54801_export(
    grid: ContextGrid, mix: ContextMix, global_k: int, max_exhaustive: int = MAX_EXHAUSTIVE
) -> tuple[ContextExport | None, list[Problem]]:
    """PR #54801: a batch table ``num_speculative_tokens_per_batch_size`` and a separate
    length table ``num_speculative_tokens_per_seq_len`` (:data:`SEQ_LEN_KEY`, ranges from
    :func:`context_ranges`), the pair from :func:`table_pair_search`, each table's equal
    neighbours merged. The losses look every cell up in the tables as written (the smaller of
    the two Ks: :data:`PR_54801_COMBINATION`), and every cell where the
    pair cannot run the optimum's K is a warning."""
    ranges = context_ranges(grid.points)
    if ranges is None:
        return None, _too_close(grid)
    pair = table_pair_search(grid, mix, max_exhaustive)
    if pair is None:
        return None, [
            Problem(
                Severity.ERROR,
                "no-feasible-tables",
                "no batch table and length table run a kept K at every cell",
            )
        ]
    batch_table = Schedule.from_picks(grid.anchors, pair.batch_ks, grid.max_batch_size)
    merged, length_rows = merge_identical_neighbours(ranges, [(k,) for k in pair.length_ks])
    length_table = [[lo, hi, row[0]] for (lo, hi), row in zip(merged, length_rows, strict=True)]
    config = {
        _GLOBAL_KEY: global_k,
        _SCHEDULE_KEY: batch_table.to_json(),
        SEQ_LEN_KEY: length_table,
    }
    violations = pr_54801_violations(config)
    if violations:
        return None, _invalid("vllm-pr-54801", config, violations)

    def exported_k(batch: int, context: int) -> int:
        return pr_54801_k_at(batch_table, length_table, batch, context)

    losses = cell_losses(grid, exported_k, mix)
    search = {
        "method": pair.method,
        "trials": pair.trials,
        "passes": pair.passes,
        "objective": "per batch anchor, the loss of the mix-weighted conservative score (the"
        " tuner's ranking) against the grid's picks', summed over the anchors; ties: the"
        " smaller sum of cell losses, then the smaller Ks",
    }
    notes = [
        PR_54801_COMBINATION,
        "needs vLLM with PR #54801 (open); the length table's shape and lookup (the first range"
        " whose hi reaches the length) are presumed",
        f"tables chosen by {pair.method} search ({pair.trials} trials"
        + (f", {pair.passes} passes over the context points)" if pair.passes else ")"),
    ]
    return _finished(
        grid,
        "vllm-pr-54801",
        config,
        losses,
        mix,
        details={"combination": PR_54801_COMBINATION, "search": search},
        detail_lines=[],
        warnings=_pr_54801_warnings(grid, pair, losses, mix),
        notes=notes,
    ), []


# ------------------------------------------------------------------ deployed context schedules

ContextScheduleFormat = Literal["vllm-rfc-48944", "vllm-pr-54801"]
#: The context formats whose K depends on the context (``vllm-context`` is one batch schedule).
CONTEXT_SCHEDULE_FORMATS: tuple[ContextScheduleFormat, ...] = get_args(ContextScheduleFormat)


@dataclass(frozen=True)
class Rfc48944Schedule:
    """A deployed PR #48944 schedule: its ``[bs_lo, bs_hi, ctx_lo, ctx_hi, K]`` entries,
    sorted (equal schedules compare equal, whichever of its two names ``key`` held them)."""

    entries: tuple[tuple[int, int, int, int, int], ...]
    key: str = dataclasses.field(default=RFC_48944_KEY, compare=False)

    format: ClassVar[ContextScheduleFormat] = "vllm-rfc-48944"

    def k_at(self, batch_size: int, context: int) -> int:
        """The K it runs at ``batch_size`` and decode-time ``context``
        (:func:`rfc_48944_k_at`)."""
        return rfc_48944_k_at(self.entries, batch_size, context)

    @property
    def ks(self) -> frozenset[int]:
        """Every K the schedule holds."""
        return frozenset(entry[4] for entry in self.entries)

    def batch_bound(self) -> Schedule:
        """The largest K it runs at each batch range, over every context: what the CUDA-graph
        capture rule is held to."""
        largest: dict[tuple[int, int], int] = {}
        for bs_lo, bs_hi, _, _, k in self.entries:
            largest[(bs_lo, bs_hi)] = max(k, largest.get((bs_lo, bs_hi), 0))
        return Schedule(tuple((lo, hi, k) for (lo, hi), k in sorted(largest.items())))

    def to_json(self) -> dict[str, Any]:
        """The format and the table, as the ``speculative_config`` held it."""
        return {"format": self.format, self.key: [list(entry) for entry in self.entries]}


@dataclass(frozen=True)
class Pr54801Schedule:
    """A deployed PR #54801 schedule: its batch table and its length table (sorted)."""

    batch_table: Schedule
    length_table: tuple[tuple[int, int, int], ...]

    format: ClassVar[ContextScheduleFormat] = "vllm-pr-54801"

    def k_at(self, batch_size: int, context: int) -> int:
        """The K it is assumed to run at ``batch_size`` and decode-time ``context``
        (:func:`pr_54801_k_at`)."""
        return pr_54801_k_at(self.batch_table, self.length_table, batch_size, context)

    @property
    def ks(self) -> frozenset[int]:
        """Every K either table can make the engine run (the smaller of the two)."""
        return frozenset(
            min(batch_k, length_k)
            for _, _, batch_k in self.batch_table.ranges
            for _, _, length_k in self.length_table
        )

    def batch_bound(self) -> Schedule:
        """The batch table: the smaller-K rule never runs more than it says."""
        return self.batch_table

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            _SCHEDULE_KEY: self.batch_table.to_json(),
            SEQ_LEN_KEY: [list(entry) for entry in self.length_table],
        }


#: A deployed schedule whose K depends on the context too.
ContextSchedule = Rfc48944Schedule | Pr54801Schedule


def context_schedule_key(config: Mapping[str, Any]) -> str | None:
    """The key that makes a ``speculative_config`` a context schedule: PR #48944's
    :data:`RFC_48944_KEY`, PR #54801's :data:`SEQ_LEN_KEY`, or PR #48944's deprecated alias
    :data:`RFC_48944_LEGACY_KEY` holding 5-item entries; None for a batch schedule or none.

    >>> context_schedule_key({RFC_48944_LEGACY_KEY: [[1, 8, 1, 100, 3]]})
    'num_speculative_tokens_per_batch_size'
    >>> context_schedule_key({RFC_48944_LEGACY_KEY: [[1, 8, 3]]}) is None
    True
    """
    for key in (RFC_48944_KEY, SEQ_LEN_KEY):
        if key in config:
            return key
    legacy = parse_json_string(config.get(RFC_48944_LEGACY_KEY))
    if isinstance(legacy, list) and any(
        isinstance(entry, list) and len(entry) == 5 for entry in legacy
    ):
        return RFC_48944_LEGACY_KEY
    return None


def context_schedule_of(
    config: Mapping[str, Any],
) -> tuple[ContextSchedule | None, list[tuple[str, str]]]:
    """The context schedule a ``speculative_config`` holds, or None and each rule its tables
    break, as (the key, the rule) (none: the config is no context schedule,
    :func:`context_schedule_key`). PR #48944: the entries under exactly one of its two names,
    by :func:`rfc_48944_violations`; PR #54801: the length table (:func:`seq_len_violations`)
    beside a batch table (vLLM's rules), and no PR #48944 table with it. Tables written as JSON
    strings are read as JSON. ``num_speculative_tokens`` and ``ctx_agg`` are not part of the
    schedule.

    >>> context_schedule_of({SEQ_LEN_KEY: [[1, 9, 3]]})[1][0][0]
    'num_speculative_tokens_per_batch_size'
    >>> schedule, _ = context_schedule_of({RFC_48944_KEY: [[1, 8, 101, 999, 0], [1, 8, 1, 100, 3]]})
    >>> schedule.entries, schedule.k_at(4, 100), schedule.k_at(4, 101)
    (((1, 8, 1, 100, 3), (1, 8, 101, 999, 0)), 3, 0)
    """
    key = context_schedule_key(config)
    if key is None:
        return None, []
    if SEQ_LEN_KEY in config:
        if RFC_48944_KEY in config:
            return None, [(SEQ_LEN_KEY, f"beside {RFC_48944_KEY}: one context format at a time")]
        if _SCHEDULE_KEY not in config:
            return None, [
                (_SCHEDULE_KEY, "missing: PR #54801 pairs the length table with a batch table")
            ]
        table = parse_json_string(config[SEQ_LEN_KEY])
        batch, violations = Schedule.parse(parse_json_string(config[_SCHEDULE_KEY]))
        found = [(_SCHEDULE_KEY, v) for v in violations]
        found += [(SEQ_LEN_KEY, v) for v in seq_len_violations(table)]
        if batch is None or found:
            return None, found
        lengths = tuple(sorted((lo, hi, k) for lo, hi, k in table))
        return Pr54801Schedule(Schedule(tuple(sorted(batch.ranges))), lengths), []
    if RFC_48944_KEY in config and RFC_48944_LEGACY_KEY in config:
        return None, [
            (RFC_48944_KEY, f"beside {RFC_48944_LEGACY_KEY}: the schedule under one of its names")
        ]
    entries = parse_json_string(config[key])
    violations = rfc_48944_violations(entries)
    if violations:
        return None, [(key, v) for v in violations]
    ordered = tuple(sorted((a, b, c, d, e) for a, b, c, d, e in entries))
    return Rfc48944Schedule(ordered, key), []


# ------------------------------------------------------------------ every format


def context_export(
    grid: ContextGrid,
    format: ContextFormat,
    mix: ContextMix,
    global_k: int,
    *,
    ctx_agg: CtxAgg = "mean",
    legacy_field_name: bool = False,
    source: str = "",
) -> tuple[ContextExport | None, list[Problem]]:
    """``format``'s export of ``grid`` (:func:`vllm_context_export`,
    :func:`rfc_48944_export`, :func:`pr_54801_export`), or None and why: a grid that is not
    deployable is refused in every format with the file's ``not_deployable_reason``."""
    if not grid.deployable:
        return None, not_deployable_refusal(True, grid.not_deployable_reason, source)
    if format == "vllm-context":
        return vllm_context_export(grid, mix, global_k)
    if format == "vllm-rfc-48944":
        return rfc_48944_export(grid, mix, global_k, ctx_agg, legacy_field_name)
    return pr_54801_export(grid, mix, global_k)
