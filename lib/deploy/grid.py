"""What the context formats share: a context mix and the loss of a choice against the grid's
measured 2-D optimum, the export every context format returns (:class:`ContextExport`), the
context ranges the 2-D formats draw between measured points, and the common build.

A sweep with a context axis gives the tuner one chosen K per (batch anchor, context point)
(:class:`lib.context_grid.ContextGrid`). No engine reads that grid as it is; each context
format (``vllm-context``, ``vllm-rfc-48944``, ``vllm-pr-54801``: one module each in
:mod:`lib.deploy.formats`) says less, and each export says how much less. The expected objective
of a cell under a K is that candidate's median (:meth:`GridCell.median`); the loss of a choice
is measured against the grid's selected K there (:func:`loss_percent`), cell by cell
(:func:`cell_losses`) and summarised (:func:`loss_summary`). Every config is checked against its
format's rules before it is returned: a violation is an error, never a file. Everything here is
pure: the same grid and choices give the same bytes (:meth:`ContextExport.text`).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lib.context_grid import ContextGrid, ContextPoint, not_deployable_refusal
from lib.deploy.ceiling import CaptureCeiling, graphless_ranges
from lib.deploy.decisions import GLOBAL_K_KEY, SCHEDULE_KEY, Decisions
from lib.deploy.engine_format import Exported, global_k_problem
from lib.deploy.settings import ExportSettings
from lib.flags import flag_name
from lib.keys import LARGEST_WHOLE_NUMBER, whole_number, whole_number_text
from lib.numbers import percent_text
from lib.problems import Problem, Severity, show_value
from lib.schedule import Schedule
from lib.settings import Direction, prompt_length_reason

__all__ = [
    "CONTEXT_FLAGS",
    "UNBOUNDED_CONTEXT",
    "CellLoss",
    "ContextExport",
    "ContextMix",
    "GridExporter",
    "LossSummary",
    "batch_ranges",
    "build_context_format",
    "cell_losses",
    "context_boundary",
    "context_mix",
    "context_ranges",
    "default_context_mix",
    "entry_violations",
    "finished_export",
    "global_k_violations",
    "invalid_export",
    "loss_percent",
    "loss_summary",
    "loss_table_lines",
    "merge_identical_neighbours",
    "normalised_weights",
    "range_k_at",
    "ranges_violations",
    "too_close",
    "whole_entry",
]


#: The ``hi`` of the last context range: PR #48944 ends its last bucket at 2^31 - 1 and treats it
#: as unbounded (tune-spec-k's own limit on any number is the same).
UNBOUNDED_CONTEXT = LARGEST_WHOLE_NUMBER

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
        prompt = whole_number_text(digits)
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


def loss_table_lines(grid: ContextGrid, losses: Sequence[CellLoss]) -> list[str]:
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

    format: str
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


def invalid_export(format: str, config: Any, violations: Sequence[str]) -> list[Problem]:
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


def finished_export(
    grid: ContextGrid,
    format: str,
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
        table_lines=tuple(loss_table_lines(grid, losses)),
        warnings=tuple(warnings),
        notes=tuple(notes),
    )


def global_k_violations(config: Mapping[str, Any]) -> list[str]:
    """vLLM's rule on the startup maximum: ``num_speculative_tokens`` a whole number > 0."""
    value = config.get(GLOBAL_K_KEY)
    if whole_number(value) is None or value == 0 or isinstance(value, float):
        return [f"{GLOBAL_K_KEY} {show_value(value)} is not a whole number > 0"]
    return []


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


def too_close(grid: ContextGrid) -> list[Problem]:
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


def whole_entry(entry: Any, size: int) -> bool:
    return (
        isinstance(entry, list | tuple)
        and len(entry) == size
        and all(isinstance(x, int) and not isinstance(x, bool) for x in entry)
    )


def entry_violations(
    index: int, entry: Sequence[int], ranges: Sequence[tuple[str, str, int, int]]
) -> list[str]:
    """The rules on one entry of integers ending in K: each of its ``(name, prefix, lo, hi)``
    ranges has bounds >= 1 and lo <= hi; K >= 0; no number above
    :data:`~lib.keys.LARGEST_WHOLE_NUMBER` (tune-spec-k's own limit).

    >>> entry_violations(2, [0, 5, 3], [("length", "len", 0, 5)])
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


def ranges_violations(ranges: Sequence[tuple[int, int]], what: str) -> list[str]:
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


# ------------------------------------------------------------------ the build

#: The export flags every context format reads.
CONTEXT_FLAGS = frozenset({"context_mix"})

#: A context format's own export of a grid, under a mix and a global K, with the export's
#: settings (the format reads its own flags from them).
GridExporter = Callable[
    [ContextGrid, ContextMix, int, ExportSettings], tuple[ContextExport | None, list[Problem]]
]


def _ceiling_warnings(config: dict[str, object], ceiling: CaptureCeiling | None) -> list[str]:
    """The capture rule on a context export's batch schedule: named, never repaired (a
    repair would change the cells the loss table is about)."""
    if ceiling is None or not isinstance(config.get(SCHEDULE_KEY), list):
        return []
    schedule, _ = Schedule.parse(config[SCHEDULE_KEY])
    if schedule is None:
        return []
    if not ceiling.max_num_seqs_known:
        # The decisions' own schedule said nothing of the grid's: check to the export's end.
        last = max(hi for _, hi, _ in schedule.ranges)
        ceiling = dataclasses.replace(ceiling, max_num_seqs=last)
    return [
        f"batch sizes {g.lo}-{g.hi} run K={g.k} at {g.tokens[0]}-{g.tokens[1]} tokens per"
        f" decode step, past the CUDA-graph capture ceiling {ceiling.name}={ceiling.size}"
        f" ({ceiling.source if not ceiling.known else 'from ' + ceiling.source}): vLLM runs"
        " them without CUDA graphs (the context formats are checked, not capped)"
        for g in graphless_ranges(schedule, ceiling)
    ]


def build_context_format(
    name: str,
    export_grid: GridExporter,
    decisions: Decisions,
    settings: ExportSettings,
    ceiling: CaptureCeiling | None,
) -> tuple[Exported | None, list[Problem]]:
    """Format ``name``'s export (``export_grid``) of ``decisions.grid`` (of an analysis in memory
    or a result file); a grid that cannot be exported is refused with its problems, a source
    without one naming the command that makes one, a grid that is not deployable in every
    format with the file's ``not_deployable_reason``."""
    source = decisions.source
    grid = decisions.grid
    if grid is None and decisions.grid_problems:
        return None, list(decisions.grid_problems)
    if grid is None:
        return None, [
            Problem(
                Severity.ERROR,
                "no-context-grid",
                f"the file has no context_grid: --format {name} needs a result JSON with one"
                " (tune-spec-k on a sweep that varied the prompt length); this file is a "
                + decisions.kind,
                files=(source,),
            )
        ]
    mix, problems = context_mix(
        settings.context_mix, grid, field=flag_name(ExportSettings, "context_mix"), source=source
    )
    if mix is None:
        return None, problems
    chosen = settings.global_k if settings.global_k is not None else grid.global_k
    if not grid.deployable:
        return None, not_deployable_refusal(True, grid.not_deployable_reason, source)
    exported, problems = export_grid(grid, mix, chosen, settings)
    if exported is None:
        return None, problems
    if chosen < max(exported.largest_k, 1):
        return None, [global_k_problem(chosen, exported.largest_k, "export's")]
    extra = _ceiling_warnings(dict(exported.config), ceiling)
    if extra:
        exported = dataclasses.replace(exported, warnings=(*exported.warnings, *extra))
    return exported, problems
