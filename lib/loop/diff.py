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

Exit status of the command: 0 nothing material, 1 something material, 2 bad input.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

import polars as pl

from lib.analysis import analyse
from lib.confidence import ConfidenceReport, ConfidenceSettings
from lib.deploy.result_file import read_result_file
from lib.flags import flag, flag_name
from lib.problems import Problem, Severity, errors
from lib.robust import NORMAL_MAD_SCALE
from lib.schedule import NO_SCHEDULE, Schedule, TuningResult
from lib.settings import Fields, Options, Settings
from lib.sweeps import load_experiment

_SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"

__all__ = [
    "ROW_SCHEMA",
    "Cell",
    "DiffReport",
    "DiffSettings",
    "Side",
    "compare",
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
        confidence = ConfidenceSettings(confidence=self.confidence, seed=self.options.seed)
        return reasons + confidence.invalid()


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


@dataclass(frozen=True, eq=False)
class DiffReport:
    a: Side
    b: Side
    settings: DiffSettings
    rows: pl.DataFrame

    @property
    def same_schedule(self) -> bool:
        return self.a.schedule == self.b.schedule

    @property
    def material(self) -> bool:
        return bool(self.rows["material"].any())

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
        }

    def to_json_text(self) -> str:
        return json.dumps(self.to_json(), indent=2, allow_nan=False) + "\n"


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
        within=within,
    )
    analysis = analyse(sweep, settings.tuning, settings.options)
    result = analysis.result
    if not result.ok or result.schedule is None or analysis.report is None:
        heading = Problem(
            Severity.ERROR,
            "untunable-experiment",
            "cannot be tuned with these settings (the problems follow)",
            files=(str(folder),),
        )
        return None, [heading, *errors(list(result.problems))]
    return side_from_result(str(folder), result, analysis.report), []


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
    if result.schedule is None:
        problem = Problem(
            Severity.ERROR,
            "not-a-result",
            "the result has no batch schedule (null: a context grid that cannot be deployed)",
            files=(str(path),),
            field=_SCHEDULE_KEY,
        )
        return None, [problem]
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
    z = NormalDist().inv_cdf(0.5 + settings.confidence / 2)
    rows = [
        _row(batch_size, a, b, settings, z)
        for batch_size in sorted(set(a.anchors) | set(b.anchors))
    ]
    return DiffReport(a, b, settings, pl.DataFrame(rows, schema=ROW_SCHEMA)), []


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
        objective_change_percent=math.expm1(log_change) * 100,
    )
    spread = _log_se(cell_a) ** 2 + _log_se(cell_b) ** 2 if _known(cell_a, cell_b) else None
    beyond_noise = True
    if spread is not None:
        half = z * math.sqrt(spread)
        row["change_low_percent"] = math.expm1(log_change - half) * 100
        row["change_high_percent"] = math.expm1(log_change + half) * 100
        beyond_noise = abs(log_change) > half
    large = abs(math.expm1(log_change)) > settings.max_objective_change
    if large and beyond_noise:
        direction = "better" if log_change > 0 else "worse"
        reasons.append(
            f"B is {abs(math.expm1(log_change)):.2%} {direction} at its pick: beyond"
            f" {settings.max_objective_change:.1%}" + (" and the noise" if spread else "")
        )
        return True
    if large:
        reasons.append("the objective moved beyond the threshold, but within the noise")
    return False


def _known(*cells: Cell) -> bool:
    return all(c.relative_mad is not None and c.num_runs > 0 for c in cells)


def _log_se(cell: Cell) -> float:
    """Standard error of a cell's log centre from its robust spread (relative MAD ~ log MAD)."""
    assert cell.relative_mad is not None
    return NORMAL_MAD_SCALE * cell.relative_mad / math.sqrt(cell.num_runs)
