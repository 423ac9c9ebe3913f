"""The (batch x context) grid of a sweep with a context axis: one chosen K per (batch anchor,
context point), as the result JSON's ``context_axis`` and ``context_grid`` hold it
(docs/context.md, "Exports").

:class:`ContextGrid` is the typed grid, read from a result file (:func:`context_grid_of`,
:func:`read_context_grid`) or assembled from an analysis in memory (:func:`assemble_grid`); the
same rules refuse a grid that cannot be exported either way (:func:`unexportable_grid_problems`).
What an engine can hold of the grid, and what each form loses, is the deployment layer's
(:mod:`lib.deploy.grid` and the context formats in :mod:`lib.deploy.formats`).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lib.files import read_json
from lib.keys import MISSING, whole_number
from lib.problems import Problem, Severity, show_value
from lib.schedule import Schedule
from lib.settings import Direction, prompt_length_expected, prompt_length_reason

__all__ = [
    "INTERPOLATED_KEY",
    "ContextGrid",
    "ContextPoint",
    "GridCell",
    "assemble_grid",
    "completeness_problems",
    "context_grid_of",
    "not_deployable_refusal",
    "read_context_grid",
    "unexportable_grid_problems",
]


_DIRECTIONS: tuple[Direction, ...] = ("maximize", "minimize")
#: A context point's schedule switching at its interpolated crossovers
#: (``--interpolated-schedule``).
INTERPOLATED_KEY = "interpolated_schedule"

# --------------------------------------------------------------------------- the grid


@dataclass(frozen=True)
class ContextPoint:
    """One measured context point: the prompt length (what ``--context-mix`` names), the
    decode-time context (prompt + output / 2: what bucket boundaries fall between), the
    output length (None when the tuner did not know it) and, tuned with
    ``--interpolated-schedule``, the point's schedule switching at its interpolated crossovers
    (None: it switches at the anchors)."""

    prompt_tokens: int
    context_tokens: int
    output_tokens: int | None
    interpolated: Schedule | None = None

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "context_tokens": self.context_tokens,
            "output_tokens": self.output_tokens,
        }
        if self.interpolated is not None:
            found[INTERPOLATED_KEY] = self.interpolated.to_json()
        return found


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
    context lengths (bucket boundaries need distinct, ordered contexts), and an interpolated
    schedule where one is written (vLLM's rules, :meth:`lib.schedule.Schedule.parse`)."""
    points = []
    for path, raw in reader.objects(axis, "points", "context_axis"):
        prompt = reader.prompt(raw, path)
        context = reader.whole(raw, "context_tokens", path, 1)
        output = None
        if "output_tokens" in raw:
            output = reader.whole(raw, "output_tokens", path, 0, nullable=True)
        interpolated = None
        if raw.get(INTERPOLATED_KEY) is not None:
            interpolated, violations = Schedule.parse(raw[INTERPOLATED_KEY])
            for violation in violations:
                reader.bad(
                    f"{path}.{INTERPOLATED_KEY}",
                    raw[INTERPOLATED_KEY],
                    "a schedule vLLM accepts",
                    f"the interpolated schedule breaks vLLM's rule: {violation}",
                )
        if prompt is not None and context is not None:
            points.append(ContextPoint(prompt, context, output, interpolated))
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
