"""``tune-spec-k diff A B``: comparing two tunings, for a retune after a hardware or vLLM change.

A and B are each an experiment folder (tuned here with the given settings and policy) or a
result JSON written by ``tune-spec-k`` (or the seed). Per batch size in either's anchors:

- the K each schedule runs there, and whether it changed;
- for a changed K, how much the other side's K loses in each sweep that measured both: the
  shortfall of its median against the best median at that anchor, with its P(eps-good) from
  the confidence analysis where known. The change is **material** when that loss exceeds
  ``max_k_loss`` in a sweep whose confidence analysis does not call the K a tie
  (P(eps-good) below the confidence, or unknown), or when neither sweep measured the other K;
- the objective at each side's pick, B against A in percent (positive: B is better), with an
  interval at the confidence from both cells' robust spreads (``1.4826 x relative MAD`` on the
  log scale, over ``sqrt(runs)``). The change is **material** when it exceeds
  ``max_objective_change`` and the interval excludes 0 (the noise cannot explain it).

A side tuned with a context axis (a sweep that varied the prompt length, or a result JSON with
a ``context_grid``) is also compared **cell by cell** (:func:`compare_grids`): per (batch
anchor, prompt length) the K each grid picks. Prompt lengths are matched within the larger of
the two axis tolerances; a cell whose anchor or prompt length the other side has not measured
(or a whole grid against a batch-only side) has no counterpart: it is listed, not compared. A
changed pick is **material** when its loss (:func:`cell_loss`) is beyond ``max_k_loss``: B's
pick measured in A's cell against A's pick, else (A's cell did not keep B's K) A's pick in B's
cell against B's pick, else it cannot be judged and is material too. The batch rows above still
compare the two batch-only answers (the seed's keys).

Exit status of the command: 0 nothing material, 1 something material, 2 bad input.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

import polars as pl

from lib.analysis import analyse
from lib.confidence import ConfidenceReport, ConfidenceSettings
from lib.context import analyse_contexts
from lib.context_axis import find_context_axis
from lib.context_grid import ContextGrid, ContextPoint, GridCell
from lib.deploy.grid import loss_percent
from lib.deploy.result_file import read_result_file
from lib.flags import flag, flag_name
from lib.problems import Problem, Severity, errors
from lib.robust import NORMAL_MAD_SCALE
from lib.schedule import NO_SCHEDULE, Schedule, TuningResult
from lib.settings import ContextSettings, Direction, Fields, Options, Settings
from lib.sweeps import load_experiment

_SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"

__all__ = [
    "CONTEXT_ROW_SCHEMA",
    "ROW_SCHEMA",
    "Cell",
    "DiffReport",
    "DiffSettings",
    "Side",
    "cell_loss",
    "compare",
    "compare_grids",
    "matched_points",
    "read_side",
    "side_from_result",
]


@dataclass(frozen=True)
class Cell:
    median: float | None
    relative_mad: float | None
    num_runs: int
    p_eps_good: float | None


@dataclass(frozen=True)
class Side:
    """What one input says: its schedule, and per (anchor, K) what was measured."""

    label: str
    schedule: Schedule
    objective: str
    direction: str
    cells: dict[tuple[int, int], Cell]
    global_k: int | None = None
    #: The context grid of a side tuned with a context axis, else None.
    grid: ContextGrid | None = None

    @property
    def anchors(self) -> list[int]:
        return sorted({anchor for anchor, _ in self.cells})

    @property
    def maximize(self) -> bool:
        return self.direction == "maximize"

    def k_at(self, batch_size: int) -> int:
        """The schedule's K at ``batch_size``, unclamped: the comparison is of schedules."""
        return self.schedule.k_at(batch_size)

    def best_median(self, anchor: int) -> float | None:
        medians = [
            c.median for (a, _), c in self.cells.items() if a == anchor and c.median is not None
        ]
        if not medians:
            return None
        return max(medians) if self.maximize else min(medians)

    def loss(self, anchor: int, k: int) -> float | None:
        """How far K's median falls short of the anchor's best, as a fraction (0 = best)."""
        cell = self.cells.get((anchor, k))
        best = self.best_median(anchor)
        if cell is None or cell.median is None or best is None or best <= 0 or cell.median <= 0:
            return None
        ratio = cell.median / best if self.maximize else best / cell.median
        return max(0.0, 1.0 - ratio)


@dataclass(frozen=True)
class DiffSettings:
    """When a difference is material, and how experiment folders are tuned (``tuning``,
    ``options`` and ``fields`` apply to folders only: a result JSON is read as written)."""

    max_k_loss: float = field(
        default=0.02,
        metadata=flag(
            "--max-k-loss",
            "a changed K is material when the other side's K loses more than this fraction in"
            " a sweep that does not call it a tie",
        ),
    )
    max_objective_change: float = field(
        default=0.05,
        metadata=flag(
            "--max-objective-change",
            "a change of the objective at the picks beyond this fraction (and beyond the"
            " noise) is material",
        ),
    )
    tuning: Settings = field(default_factory=Settings)
    options: Options = field(default_factory=Options)
    fields: Fields = field(default_factory=Fields)
    context: ContextSettings = field(default_factory=ContextSettings)

    @property
    def confidence(self) -> float:
        """The level of the intervals and of the tie test (``--confidence``)."""
        return self.options.confidence

    def invalid(self) -> list[str]:
        reasons = list(self.tuning.invalid())
        for name in ("max_k_loss", "max_objective_change"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                reasons.append(f"{flag_name(DiffSettings, name)} {value}: expected a number >= 0")
        confidence = dataclasses.replace(
            ConfidenceSettings.of(self.options), confidence=self.confidence
        )
        return reasons + confidence.invalid() + self.context.invalid()


#: One row per batch size compared.
ROW_SCHEMA = pl.Schema(
    {
        "batch_size": pl.Int64(),
        "anchor_in_a": pl.Boolean(),
        "anchor_in_b": pl.Boolean(),
        "k_a": pl.Int64(),
        "k_b": pl.Int64(),
        "k_changed": pl.Boolean(),
        "loss_of_k_b_in_a_percent": pl.Float64(),
        "p_eps_good_of_k_b_in_a": pl.Float64(),
        "loss_of_k_a_in_b_percent": pl.Float64(),
        "p_eps_good_of_k_a_in_b": pl.Float64(),
        "objective_a": pl.Float64(),
        "objective_b": pl.Float64(),
        "objective_change_percent": pl.Float64(),  # + means B is better
        "change_low_percent": pl.Float64(),
        "change_high_percent": pl.Float64(),
        "material": pl.Boolean(),
        "reasons": pl.List(pl.Utf8),
    }
)


#: One row per (batch anchor, prompt length) of either grid (:func:`compare_grids`). The
#: prompt lengths are each side's own (null where the side has no such cell); ``judged_in``
#: says whose measurements the loss is of (null: not judged).
CONTEXT_ROW_SCHEMA = pl.Schema(
    {
        "batch_size": pl.Int64(),
        "prompt_tokens_a": pl.Int64(),
        "prompt_tokens_b": pl.Int64(),
        "k_a": pl.Int64(),
        "k_b": pl.Int64(),
        "k_changed": pl.Boolean(),
        "judged_in": pl.Utf8(),
        "loss_percent": pl.Float64(),
        "material": pl.Boolean(),
        "reasons": pl.List(pl.Utf8),
    }
)


@dataclass(frozen=True, eq=False)
class DiffReport:
    """The comparison: a row per batch size (``rows``, :data:`ROW_SCHEMA`) and, when either
    side has a context grid, a row per grid cell (``context_rows``, :data:`CONTEXT_ROW_SCHEMA`;
    None when neither has one)."""

    a: Side
    b: Side
    settings: DiffSettings
    rows: pl.DataFrame
    context_rows: pl.DataFrame | None = None

    @property
    def same_schedule(self) -> bool:
        return self.a.schedule == self.b.schedule

    @property
    def material(self) -> bool:
        return bool(self.rows["material"].any()) or self.context_material

    @property
    def context_material(self) -> bool:
        """Whether some grid cell's changed pick is material."""
        return self.context_rows is not None and bool(self.context_rows["material"].any())

    def to_json(self) -> dict[str, Any]:
        return {
            "a": _side_json(self.a),
            "b": _side_json(self.b),
            "objective": self.a.objective,
            "objective_direction": self.a.direction,
            "same_schedule": self.same_schedule,
            "materially_different": self.material,
            "thresholds": {
                "max_k_loss": self.settings.max_k_loss,
                "max_objective_change": self.settings.max_objective_change,
                "confidence": self.settings.confidence,
            },
            "batch_sizes": [
                {
                    key: (None if isinstance(v, float) and not math.isfinite(v) else v)
                    for key, v in row.items()
                }
                for row in self.rows.to_dicts()
            ],
            **({} if self.context_rows is None else {"context_cells": self._context_json()}),
        }

    def _context_json(self) -> dict[str, Any]:
        return {
            "prompt_tokens_a": _prompts(self.a.grid),
            "prompt_tokens_b": _prompts(self.b.grid),
            "materially_different": self.context_material,
            "cells": [
                {
                    key: (None if isinstance(v, float) and not math.isfinite(v) else v)
                    for key, v in row.items()
                }
                for row in (self.context_rows.to_dicts() if self.context_rows is not None else [])
            ],
        }

    def to_json_text(self) -> str:
        return json.dumps(self.to_json(), indent=2, allow_nan=False) + "\n"


def _prompts(grid: ContextGrid | None) -> list[int] | None:
    return None if grid is None else [point.prompt_tokens for point in grid.points]


def _side_json(side: Side) -> dict[str, Any]:
    return {
        "source": side.label,
        "schedule": side.schedule.to_json(),
        "num_speculative_tokens": side.global_k,
    }


# --------------------------------------------------------------------------- reading a side


def read_side(
    path: str | Path, settings: DiffSettings, *, within: str | os.PathLike[str] | None = None
) -> tuple[Side | None, list[Problem]]:
    """An experiment folder (tuned here) or a result JSON (as written), or None and why not.

    ``within`` (the dashboard passes its root) confines the reading as
    :func:`lib.sweeps.load_experiment` does: a ``path`` whose real path is outside it is not
    read (an ``outside-root`` problem), and neither is anything behind a link below it that
    leads outside. Without it, paths and links are followed wherever they lead.
    """
    source = Path(path)
    if within is not None and not Path(os.path.realpath(source)).is_relative_to(
        Path(within).resolve()
    ):
        problem = Problem(
            Severity.ERROR,
            "outside-root",
            f"leads outside {within}; not read",
            files=(str(source),),
            expected=f"a folder or file inside {within}",
        )
        return None, [problem]
    if source.is_dir():
        return _side_from_folder(source, settings, within)
    if source.exists():
        # A FIFO or a device too: the reader names what it is instead of reading it.
        return _side_from_json(source)
    problem = Problem(
        Severity.ERROR,
        "missing-input",
        "no such folder or file",
        files=(str(source),),
        expected="an experiment folder or a result JSON",
    )
    return None, [problem]


def _side_from_folder(
    folder: Path, settings: DiffSettings, within: str | os.PathLike[str] | None
) -> tuple[Side | None, list[Problem]]:
    sweep = load_experiment(
        folder,
        batch_size_var=settings.fields.batch_size_var,
        k_var=settings.fields.k_var,
        replica_var=settings.fields.replica_var,
        within=within,
    )
    heading = Problem(
        Severity.ERROR,
        "untunable-experiment",
        "cannot be tuned with these settings (the problems follow)",
        files=(str(folder),),
    )
    axis, axis_problems = find_context_axis(sweep, settings.context)
    if axis is None and errors(axis_problems):
        return None, [heading, *errors(axis_problems)]
    if axis is not None:
        contexts = analyse_contexts(sweep, axis, settings.tuning, settings.options)
        grid, grid_problems = contexts.typed_grid
        answer = contexts.answer
        if not contexts.ok or grid is None:
            return None, [heading, *errors([*contexts.problems, *grid_problems])]
        if answer is None or answer.result.schedule is None or answer.report is None:
            return None, [heading, _no_batch_schedule(str(folder))]
        side = side_from_result(str(folder), answer.result, answer.report)
        return dataclasses.replace(side, grid=grid), []
    analysis = analyse(sweep, settings.tuning, settings.options)
    result = analysis.result
    if not result.ok or result.schedule is None or analysis.report is None:
        return None, [heading, *errors(list(result.problems))]
    return side_from_result(str(folder), result, analysis.report), []


def _no_batch_schedule(source: str) -> Problem:
    return Problem(
        Severity.ERROR,
        "not-a-result",
        "the result has no batch schedule (null: a context grid that cannot be deployed)",
        files=(source,),
        field=_SCHEDULE_KEY,
    )


def side_from_result(label: str, result: TuningResult, report: ConfidenceReport) -> Side:
    """A side from a tuning already done (the app's current experiment), with P(eps-good)
    from its confidence report."""
    p = {(c["anchor"], c["k"]): c["p_eps_good"] for c in report.cells.to_dicts()}
    cells = {
        (row["anchor"], row["k"]): Cell(
            median=row["median"],
            relative_mad=row["relative_mad"],
            num_runs=row["num_runs"],
            p_eps_good=p.get((row["anchor"], row["k"])),
        )
        for row in result.cells.to_dicts()
        if row["num_runs"] > 0
    }
    return Side(
        label=label,
        schedule=result.schedule or NO_SCHEDULE,
        objective=result.settings.objective,
        direction=result.settings.direction,
        cells=cells,
        global_k=result.deploy_global_k,
    )


def _side_from_json(path: Path) -> tuple[Side | None, list[Problem]]:
    """A side from a result file, read by the one typed reader."""
    result, problems = read_result_file(path)
    if result is None:
        return None, problems
    if result.grid_problems:
        # A grid that cannot be read is not left out silently: the comparison would be wrong.
        return None, list(result.grid_problems)
    if result.schedule is None:
        return None, [_no_batch_schedule(str(path))]
    cells = {}
    for anchor in result.anchors:
        p_eps_good = anchor.confidence.p_eps_good if anchor.confidence is not None else {}
        for candidate in anchor.candidates:
            cells[candidate.batch_size, candidate.k] = Cell(
                median=candidate.median,
                relative_mad=candidate.relative_mad,
                num_runs=candidate.num_runs,
                p_eps_good=p_eps_good.get(candidate.k),
            )
    side = Side(
        label=str(path),
        schedule=result.schedule,
        objective=result.objective,
        direction=result.direction,
        cells=cells,
        global_k=result.configured_global_k,
        grid=result.grid,
    )
    return side, []


# --------------------------------------------------------------------------- the diff


def compare(a: Side, b: Side, settings: DiffSettings) -> tuple[DiffReport | None, list[Problem]]:
    """Per batch size in either's anchors: the K change and its cost, the objective change;
    None and the problem when the two optimise different objectives."""
    if (a.objective, a.direction) != (b.objective, b.direction):
        problem = Problem(
            Severity.ERROR,
            "different-objectives",
            "the two tunings optimise different objectives",
            files=(a.label, b.label),
            field="selection.objective_metric",
            value=f"A {a.objective} ({a.direction}), B {b.objective} ({b.direction})",
            expected="the same objective and direction",
        )
        return None, [problem]
    z = interval_z(settings.confidence)
    rows = [
        _row(batch_size, a, b, settings, z)
        for batch_size in sorted(set(a.anchors) | set(b.anchors))
    ]
    context_rows = None
    if a.grid is not None or b.grid is not None:
        direction: Direction = "maximize" if a.maximize else "minimize"
        context_rows = compare_grids(a.grid, b.grid, settings.max_k_loss, direction)
    frame = pl.DataFrame(rows, schema=ROW_SCHEMA)
    return DiffReport(a, b, settings, frame, context_rows), []


# --------------------------------------------------------------------------- the grids


def matched_points(
    a: Sequence[ContextPoint], b: Sequence[ContextPoint], tolerance: float
) -> list[tuple[ContextPoint | None, ContextPoint | None]]:
    """The context points of two grids paired by prompt length: each of A's points (in order)
    with the nearest of B's not yet paired whose prompt length is within ``tolerance``
    (relative to A's), else None; then B's unpaired points, each with None. Equal distances go
    to the shorter of B's prompts.

    >>> P = lambda n: ContextPoint(n, n + 64, 128)
    >>> [(x and x.prompt_tokens, y and y.prompt_tokens)
    ...  for x, y in matched_points([P(512), P(8192)], [P(520), P(4096)], 0.1)]
    [(512, 520), (8192, None), (None, 4096)]
    """
    pairs: list[tuple[ContextPoint | None, ContextPoint | None]] = []
    free = list(b)
    for point in a:
        near = [
            other
            for other in free
            if abs(other.prompt_tokens - point.prompt_tokens) <= tolerance * point.prompt_tokens
        ]
        match = min(
            near,
            key=lambda other: (abs(other.prompt_tokens - point.prompt_tokens), other.prompt_tokens),
            default=None,
        )
        if match is not None:
            free.remove(match)
        pairs.append((point, match))
    return pairs + [(None, other) for other in free]


def cell_loss(cell_a: GridCell, cell_b: GridCell, direction: Direction) -> tuple[str, float] | None:
    """The loss of a changed pick at one cell, in percent (positive: worse), and whose
    measurements it is of: B's pick in A's cell against A's pick (``"A"``) when A's cell kept a
    median for B's K; else A's pick in B's cell against B's pick (``"B"``); None when neither
    cell kept the other's K (the change cannot be judged).

    >>> from lib.context_grid import ContextPoint as P
    >>> a = GridCell(64, P(8192, 8256, 128), 3, "resolved", ((0, 2000.0), (3, 2600.0)))
    >>> b = GridCell(64, P(8192, 8256, 128), 0, "resolved", ((0, 2100.0),))
    >>> cell_loss(a, b, "maximize")
    ('A', 23.076923076923073)
    """
    for name, measured, other_k in (
        ("A", cell_a, cell_b.selected_k),
        ("B", cell_b, cell_a.selected_k),
    ):
        median = measured.median(other_k)
        if median is not None:
            return name, loss_percent(median, measured.optimum, direction)
    return None


def compare_grids(
    a: ContextGrid | None, b: ContextGrid | None, max_k_loss: float, direction: Direction
) -> pl.DataFrame:
    """A row per (batch anchor, matched prompt length) of either grid (:data:`CONTEXT_ROW_SCHEMA`),
    by batch size then prompt length. A cell both grids hold is **material** when the picks
    differ and :func:`cell_loss` is beyond ``max_k_loss`` (a fraction: a loss of exactly it is
    not material), or when the loss cannot be judged. A cell only one side holds (its anchor
    or prompt length not measured by the other, or the other side batch-only) has no
    counterpart: listed, never material."""
    tolerance = max(grid.tolerance for grid in (a, b) if grid is not None)
    pairs = matched_points(a.points if a else (), b.points if b else (), tolerance)
    anchors = sorted(set(a.anchors if a else ()) | set(b.anchors if b else ()))
    rows = [
        _grid_row(
            anchor, _cell(a, anchor, point_a), _cell(b, anchor, point_b), max_k_loss, direction
        )
        for anchor in anchors
        for point_a, point_b in pairs
        if _cell(a, anchor, point_a) is not None or _cell(b, anchor, point_b) is not None
    ]
    rows.sort(key=lambda row: (row["batch_size"], row["prompt_tokens_a"] or row["prompt_tokens_b"]))
    return pl.DataFrame(rows, schema=CONTEXT_ROW_SCHEMA)


def _cell(grid: ContextGrid | None, anchor: int, point: ContextPoint | None) -> GridCell | None:
    if grid is None or point is None or anchor not in grid.anchors:
        return None
    return grid.rows[grid.anchors.index(anchor)][grid.points.index(point)]


def _grid_row(
    anchor: int,
    cell_a: GridCell | None,
    cell_b: GridCell | None,
    max_k_loss: float,
    direction: Direction,
) -> dict[str, Any]:
    reasons: list[str] = []
    row: dict[str, Any] = dict.fromkeys(CONTEXT_ROW_SCHEMA)
    row.update(
        batch_size=anchor,
        prompt_tokens_a=cell_a.point.prompt_tokens if cell_a else None,
        prompt_tokens_b=cell_b.point.prompt_tokens if cell_b else None,
        k_a=cell_a.selected_k if cell_a else None,
        k_b=cell_b.selected_k if cell_b else None,
        k_changed=None,
        material=False,
        reasons=reasons,
    )
    if cell_a is None or cell_b is None:
        reasons.append(f"no counterpart in {'B' if cell_b is None else 'A'}: not compared")
        return row
    row["k_changed"] = cell_a.selected_k != cell_b.selected_k
    if not row["k_changed"]:
        return row
    judged = cell_loss(cell_a, cell_b, direction)
    if judged is None:
        reasons.append(
            f"neither grid kept the other's K here (A K={cell_a.selected_k}, B"
            f" K={cell_b.selected_k}): the change cannot be judged"
        )
        row["material"] = True
        return row
    name, loss = judged
    row.update(judged_in=name, loss_percent=loss)
    picked, pick = ("B", cell_b.selected_k) if name == "A" else ("A", cell_a.selected_k)
    own = cell_a.selected_k if name == "A" else cell_b.selected_k
    material = loss > max_k_loss * 100
    row["material"] = material
    reasons.append(
        f"in {name}, {picked}'s K={pick} loses {loss:.2f}% against {name}'s K={own}"
        + (f": beyond {max_k_loss:.1%}, material" if material else ": within the threshold")
    )
    return row


def _row(batch_size: int, a: Side, b: Side, settings: DiffSettings, z: float) -> dict[str, Any]:
    k_a, k_b = a.k_at(batch_size), b.k_at(batch_size)
    in_a, in_b = batch_size in a.anchors, batch_size in b.anchors
    reasons: list[str] = []
    row: dict[str, Any] = dict.fromkeys(ROW_SCHEMA)
    row.update(
        batch_size=batch_size,
        anchor_in_a=in_a,
        anchor_in_b=in_b,
        k_a=k_a,
        k_b=k_b,
        k_changed=k_a != k_b,
        reasons=reasons,
    )
    material = False
    if not in_a or not in_b:
        reasons.append(f"measured only in {'A' if in_a else 'B'}: K from the other's schedule")
    if k_a != k_b:
        material = _k_change(batch_size, a, b, k_a, k_b, settings, row, reasons)
    cell_a, cell_b = a.cells.get((batch_size, k_a)), b.cells.get((batch_size, k_b))
    if cell_a is not None and cell_b is not None:
        material |= _objective_change(cell_a, cell_b, a.maximize, settings, z, row, reasons)
    row["material"] = material
    return row


def _k_change(
    batch_size: int,
    a: Side,
    b: Side,
    k_a: int,
    k_b: int,
    settings: DiffSettings,
    row: dict[str, Any],
    reasons: list[str],
) -> bool:
    """Whether the K change at ``batch_size`` matters; fills the loss columns."""
    judged = []
    for side, name, other_k, loss_key, p_key in (
        (a, "A", k_b, "loss_of_k_b_in_a_percent", "p_eps_good_of_k_b_in_a"),
        (b, "B", k_a, "loss_of_k_a_in_b_percent", "p_eps_good_of_k_a_in_b"),
    ):
        if batch_size not in side.anchors:
            continue
        loss = side.loss(batch_size, other_k)
        cell = side.cells.get((batch_size, other_k))
        p = cell.p_eps_good if cell is not None else None
        row[loss_key] = None if loss is None else loss * 100
        row[p_key] = p
        if loss is None:
            reasons.append(f"K={other_k} was not measured at batch size {batch_size} in {name}")
            continue
        tie = p is not None and p >= settings.confidence
        costly = loss > settings.max_k_loss and not tie
        judged.append(costly)
        reasons.append(
            f"in {name}, K={other_k} is {loss:.2%} below the best"
            + (f", P(eps-good)={p:.2f}" if p is not None else "")
            + (": material" if costly else ": within the thresholds")
        )
    if not judged:
        reasons.append("neither sweep measured the other K here: the change cannot be judged")
        return True
    return any(judged)


def _objective_change(
    cell_a: Cell,
    cell_b: Cell,
    maximize: bool,
    settings: DiffSettings,
    z: float,
    row: dict[str, Any],
    reasons: list[str],
) -> bool:
    if cell_a.median is None or cell_b.median is None or cell_a.median <= 0 or cell_b.median <= 0:
        return False
    log_change = math.log(cell_b.median / cell_a.median) * (1 if maximize else -1)
    row.update(
        objective_a=cell_a.median,
        objective_b=cell_b.median,
        objective_change_percent=percent_of_log(log_change),
    )
    half = log_half_width(cell_a, cell_b, z)
    beyond_noise = True
    if half is None:
        reasons.append(
            "no interval: the spread of "
            + " and ".join(
                name for name, cell in (("A", cell_a), ("B", cell_b)) if usable_spread(cell) is None
            )
            + "'s cell is unknown (a relative MAD that is missing, not finite or negative, or"
            " no runs), so the change is judged by the threshold alone"
        )
    else:
        row["change_low_percent"] = percent_of_log(log_change - half)
        row["change_high_percent"] = percent_of_log(log_change + half)
        beyond_noise = abs(log_change) > half
    change = percent_of_log(log_change) / 100
    large = abs(change) > settings.max_objective_change
    if large and beyond_noise:
        direction = "better" if log_change > 0 else "worse"
        reasons.append(
            f"B is {abs(change):.2%} {direction} at its pick: beyond"
            f" {settings.max_objective_change:.1%}" + (" and the noise" if half is not None else "")
        )
        return True
    if large:
        reasons.append("the objective moved beyond the threshold, but within the noise")
    return False


def interval_z(confidence: float) -> float:
    """The normal quantile of a two-sided interval at ``confidence``: ``inv_cdf(0.5 +
    confidence / 2)``. At a confidence of 1 (which the settings accept, as every command does)
    it is infinite: the interval is unbounded and no change is beyond the noise. The settings
    refuse a confidence outside (0, 1]; a value so close to 1 that ``0.5 + confidence / 2``
    rounds to 1 is treated as 1.

    >>> round(interval_z(0.9), 4), interval_z(1.0), round(interval_z(1e-300), 4)
    (1.6449, inf, 0.0)
    """
    p = 0.5 + confidence / 2
    return math.inf if p >= 1 else NormalDist().inv_cdf(p)


def usable_spread(cell: Cell) -> float | None:
    """A cell's relative MAD when it can size an interval: a finite number >= 0 from at least
    one run; None otherwise (missing, infinite, NaN, negative, no runs).

    >>> usable_spread(Cell(1.0, 0.0, 3, None)), usable_spread(Cell(1.0, math.inf, 3, None))
    (0.0, None)
    """
    mad = cell.relative_mad
    if mad is None or not math.isfinite(mad) or mad < 0 or cell.num_runs < 1:
        return None
    return mad


def log_half_width(cell_a: Cell, cell_b: Cell, z: float) -> float | None:
    """Half the width of the interval of the log change between two cells: ``z`` times the
    root sum of squares of their standard errors (:func:`_log_se`), computed with ``hypot`` so
    that a huge spread (1e200) gives a huge or infinite width, never an overflow. Zero spread
    gives 0 whatever ``z`` (the interval is the point, also at confidence 1); None when either
    spread is unknown (:func:`usable_spread`).

    >>> log_half_width(Cell(1.0, 0.0, 3, None), Cell(1.0, 0.0, 3, None), math.inf)
    0.0
    >>> log_half_width(Cell(1.0, 1e200, 3, None), Cell(1.0, 1e200, 3, None), 1.6) > 1e200
    True
    """
    if usable_spread(cell_a) is None or usable_spread(cell_b) is None:
        return None
    se = math.hypot(_log_se(cell_a), _log_se(cell_b))
    if se == 0:
        return 0.0
    return z * se


def percent_of_log(log_change: float) -> float:
    """A log change in percent, ``expm1(x) x 100``: +infinity where that overflows (a log
    change past about 709), -100 % at -infinity.

    >>> percent_of_log(0.0), percent_of_log(1e200), percent_of_log(-math.inf)
    (0.0, inf, -100.0)
    """
    try:
        return math.expm1(log_change) * 100
    except OverflowError:
        return math.inf


def _log_se(cell: Cell) -> float:
    """Standard error of a cell's log centre from its robust spread (relative MAD ~ log MAD);
    the spread must be usable (:func:`usable_spread`). A spread near the largest float gives
    infinity, not an error."""
    mad = usable_spread(cell)
    assert mad is not None
    return NORMAL_MAD_SCALE * mad / math.sqrt(cell.num_runs)
