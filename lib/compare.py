"""Comparing two tunings: ``tune-spec-k diff A B``, for a retune after a hardware or vLLM change.

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
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

import altair as alt
import polars as pl

from lib.analysis import Analysis, Options, analyse
from lib.charts import Chart
from lib.confidence import ConfidenceReport, ConfidenceSettings, Policy
from lib.problems import Problem
from lib.robust import NORMAL_MAD_SCALE
from lib.schedule import Settings, TuningResult, k_for_batch_size, validate_schedule
from lib.sweeps import DEFAULT_BATCH_SIZE_VAR, DEFAULT_K_VAR, load_experiment

#: Larger than any real K: the schedule lookup must not clamp while comparing.
_NO_CLAMP = 1 << 30


class CompareError(ValueError):
    """An input that cannot be compared; the message names it and why."""


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
    schedule: tuple[tuple[int, int, int], ...]
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
        return k_for_batch_size(self.schedule, batch_size, _NO_CLAMP)

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
    max_k_loss: float = 0.02
    max_objective_change: float = 0.05
    confidence: float = 0.9
    tuning: Settings = field(default_factory=Settings)
    policy: Policy = "seed"
    seed: int = ConfidenceSettings().seed
    batch_size_var: str = DEFAULT_BATCH_SIZE_VAR
    k_var: str = DEFAULT_K_VAR

    def invalid(self) -> list[str]:
        reasons = list(self.tuning.invalid())
        for name in ("max_k_loss", "max_objective_change"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                reasons.append(f"--{name.replace('_', '-')} {value}: expected a number >= 0")
        reasons += ConfidenceSettings(confidence=self.confidence, seed=self.seed).invalid()
        return reasons


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

    def text_lines(self) -> list[str]:
        lines = [
            f"A: {json.dumps([list(r) for r in self.a.schedule])}  ({self.a.label})",
            f"B: {json.dumps([list(r) for r in self.b.schedule])}  ({self.b.label})",
            f"objective: {self.a.objective} ({self.a.direction})",
        ]
        for row in self.rows.to_dicts():
            head = f"batch_size={row['batch_size']}: K {row['k_a']} -> {row['k_b']}"
            if row["objective_change_percent"] is not None:
                head += (
                    f"; {self.a.objective} {row['objective_a']:.2f} -> {row['objective_b']:.2f}"
                    f" ({row['objective_change_percent']:+.2f}%"
                )
                if row["change_low_percent"] is not None:
                    head += (
                        f", {self.settings.confidence:.0%} interval"
                        f" [{row['change_low_percent']:+.2f}%, {row['change_high_percent']:+.2f}%]"
                    )
                head += ")"
            head += "; MATERIAL" if row["material"] else "; same"
            lines.append(head)
            lines += [f"  {reason}" for reason in row["reasons"]]
        verdict = "materially different" if self.material else "no material difference"
        lines.append(
            f"{verdict} (thresholds: K loss {self.settings.max_k_loss:.1%}, objective change"
            f" {self.settings.max_objective_change:.1%}, confidence {self.settings.confidence:g})"
        )
        return lines


def _side_json(side: Side) -> dict[str, Any]:
    return {
        "source": side.label,
        "schedule": [list(r) for r in side.schedule],
        "num_speculative_tokens": side.global_k,
    }


# --------------------------------------------------------------------------- reading a side


def read_side(path: str | Path, settings: DiffSettings) -> Side:
    """An experiment folder (tuned here) or a result JSON (as written)."""
    source = Path(path)
    if source.is_dir():
        return _side_from_folder(source, settings)
    if source.is_file():
        return _side_from_json(source)
    raise CompareError(f"{source}: no such folder or file (expected an experiment or result JSON)")


def _side_from_folder(folder: Path, settings: DiffSettings) -> Side:
    sweep = load_experiment(folder, batch_size_var=settings.batch_size_var, k_var=settings.k_var)
    options = Options(policy=settings.policy, confidence=settings.confidence, seed=settings.seed)
    analysis = analyse(sweep, settings.tuning, options)
    result = analysis.result
    if not result.ok or result.schedule is None or analysis.report is None:
        raise CompareError(
            f"{folder}: cannot be tuned with these settings:\n"
            + "\n".join("  " + p.describe() for p in _errors(result.problems))
        )
    return side_from_result(str(folder), result, analysis.report)


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
        schedule=tuple(result.schedule or ()),
        objective=result.settings.objective,
        direction=result.settings.direction,
        cells=cells,
        global_k=result.deploy_global_k,
    )


def _errors(problems: tuple[Problem, ...]) -> list[Problem]:
    return [p for p in problems if p.severity.value == "error"]


def _side_from_json(path: Path) -> Side:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise CompareError(f"{path}: cannot read the file: {error.strerror or error}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CompareError(f"{path}: not a JSON file: {error}") from None
    if not isinstance(data, dict) or "num_speculative_tokens_per_batch_size" not in data:
        raise CompareError(
            f"{path}: not a tuning result (expected the JSON written by tune-spec-k, with"
            " 'num_speculative_tokens_per_batch_size' and 'batch_decisions')"
        )
    schedule = data["num_speculative_tokens_per_batch_size"]
    violations = validate_schedule(schedule) if isinstance(schedule, list) else ["not a list"]
    if violations:
        raise CompareError(
            f"{path}: field 'num_speculative_tokens_per_batch_size' is not a valid schedule:"
            f" {'; '.join(violations)}"
        )
    selection = _dict(data.get("selection"))
    decisions = data.get("batch_decisions")
    if not isinstance(decisions, list):
        raise CompareError(f"{path}: field 'batch_decisions' is missing or not a list")
    cells: dict[tuple[int, int], Cell] = {}
    for index, decision in enumerate(decisions):
        if not isinstance(decision, dict) or not isinstance(decision.get("candidates"), list):
            raise CompareError(f"{path}: batch_decisions[{index}] has no 'candidates' list")
        p = _dict(_dict(decision.get("confidence")).get("p_eps_good"))
        for candidate in decision["candidates"]:
            try:
                key = (int(candidate["batch_size"]), int(candidate["k"]))
            except (KeyError, TypeError, ValueError):
                raise CompareError(
                    f"{path}: batch_decisions[{index}] has a candidate without batch_size/k"
                ) from None
            cells[key] = Cell(
                median=_number(candidate.get("median_objective")),
                relative_mad=_number(candidate.get("objective_relative_mad")),
                num_runs=int(candidate.get("num_runs") or 0),
                p_eps_good=_number(p.get(str(key[1]))),
            )
    return Side(
        label=str(path),
        schedule=tuple((int(lo), int(hi), int(k)) for lo, hi, k in schedule),
        objective=str(selection.get("objective_metric", "output_throughput")),
        direction=str(selection.get("objective_direction", "maximize")),
        cells=cells,
        global_k=_int(data.get("configured_global_num_speculative_tokens")),
    )


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# --------------------------------------------------------------------------- the diff


def compare(a: Side, b: Side, settings: DiffSettings) -> DiffReport:
    """Per batch size in either's anchors: the K change and its cost, the objective change."""
    if (a.objective, a.direction) != (b.objective, b.direction):
        raise CompareError(
            f"the two tunings optimise different objectives: A {a.objective} ({a.direction}),"
            f" B {b.objective} ({b.direction})"
        )
    z = NormalDist().inv_cdf(0.5 + settings.confidence / 2)
    rows = [
        _row(batch_size, a, b, settings, z)
        for batch_size in sorted(set(a.anchors) | set(b.anchors))
    ]
    return DiffReport(a, b, settings, pl.DataFrame(rows, schema=ROW_SCHEMA))


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


# --------------------------------------------------------------------------- the app's view

#: Colours of the two sides in the comparison chart.
SIDE_COLOURS = {"A": "#4c78a8", "B": "#e45756"}


def comparison_table(report: DiffReport) -> pl.DataFrame:
    """One display row per batch size: both K, both objectives, the change and its interval,
    the K-change losses, the verdict and its reasons as one text."""
    return report.rows.select(
        pl.col("batch_size").alias("batch size"),
        pl.col("k_a").alias("K (A)"),
        pl.col("k_b").alias("K (B)"),
        pl.col("objective_a").round(2).alias(f"{report.a.objective} (A)"),
        pl.col("objective_b").round(2).alias(f"{report.b.objective} (B)"),
        pl.col("objective_change_percent").round(2).alias("B vs A %"),
        pl.col("change_low_percent").round(2).alias("interval low %"),
        pl.col("change_high_percent").round(2).alias("interval high %"),
        pl.col("loss_of_k_b_in_a_percent").round(2).alias("K (B) loses in A %"),
        pl.col("loss_of_k_a_in_b_percent").round(2).alias("K (A) loses in B %"),
        pl.when(pl.col("material"))
        .then(pl.lit("material"))
        .otherwise(pl.lit("same"))
        .alias("verdict"),
        pl.col("reasons").list.join("; ").alias("why"),
    )


def _step_rows(side: Side, name: str) -> list[dict[str, Any]]:
    """A schedule as points of a step-after line: each range's start, and the last range's end."""
    rows: list[dict[str, Any]] = []
    ordered = sorted(side.schedule)
    for lo, hi, k in ordered:
        rows.append(
            {"side": name, "layer": "step", "batch_size": lo, "k": k, "range": f"{lo}-{hi}"}
        )
    lo, hi, k = ordered[-1]
    rows.append({"side": name, "layer": "step", "batch_size": hi, "k": k, "range": f"{lo}-{hi}"})
    rows += [
        {"side": name, "layer": "anchor", "batch_size": anchor, "k": side.k_at(anchor), "range": ""}
        for anchor in side.anchors
    ]
    return rows


def comparison_chart(report: DiffReport) -> Chart:
    """Both schedules as step lines over a log batch-size axis (A blue, B red, B dashed), with
    each side's measured anchors marked."""
    x = alt.X("batch_size:Q", title="batch size, log scale").scale(type="log", base=2)
    y = alt.Y("k:Q", title="K (draft tokens per step)").axis(tickMinStep=1)
    colour = alt.Color("side:N", title="schedule").scale(
        domain=list(SIDE_COLOURS), range=list(SIDE_COLOURS.values())
    )
    steps = (
        alt.Chart()
        .mark_line(interpolate="step-after", strokeWidth=3, opacity=0.8)
        .encode(
            x=x,
            y=y,
            color=colour,
            strokeDash=alt.StrokeDash("side:N", legend=None).scale(
                domain=list(SIDE_COLOURS), range=[[1, 0], [6, 4]]
            ),
            tooltip=["side:N", "range:N", "k:Q"],
        )
        .transform_filter(alt.datum.layer == "step")
    )
    anchors = (
        alt.Chart()
        .mark_point(filled=True, size=80)
        .encode(
            x=x,
            y=y,
            color=colour,
            shape=alt.Shape("side:N", legend=None),
            tooltip=["side:N", alt.Tooltip("batch_size:Q", title="anchor"), "k:Q"],
        )
        .transform_filter(alt.datum.layer == "anchor")
    )
    layered = alt.LayerChart(
        data=alt.NamedData(name="rows"),
        layer=[steps, anchors],
        width=520,
        height=220,
        title=alt.TitleParams(
            "A and B: num_speculative_tokens_per_batch_size",
            subtitle=[f"A: {report.a.label}", f"B: {report.b.label}"],
        ),
    )
    template = layered.to_dict()
    template.pop("data", None)
    rows = _step_rows(report.a, "A") + _step_rows(report.b, "B")
    return Chart(template, json.dumps(rows))


#: The comparison picker's "nothing to compare with" choice.
NO_COMPARISON = "(none)"


def compare_with(
    label: str, analysis: Analysis, other: str | Path | None, settings: DiffSettings
) -> tuple[DiffReport | None, str | None]:
    """The app's comparison of the shown experiment (already analysed) with ``other``: the
    report, or why there is none (None, None when nothing was picked)."""
    if other is None:
        return None, None
    if not analysis.result.ok or analysis.report is None:
        return None, "No comparison: this experiment has no schedule (see the errors above)."
    try:
        mine = side_from_result(label, analysis.result, analysis.report)
        return compare(mine, read_side(other, settings), settings), None
    except CompareError as error:
        return None, str(error)
