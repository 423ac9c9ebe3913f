"""The cells of a sweep: one row per (anchor, K) with its robust statistics
(:func:`cell_statistics`, :data:`CELL_SCHEMA`), and the seed's gates that reject a cell
(:func:`min_runs_gate`, :func:`noise_gate`, :func:`acceptance_gate`) or the grid
(:func:`anchor_grid_gate`).

Each cell gate returns a rejection reason per cell (null when kept) and its problems;
:func:`lib.gates.gate` applies them after the run gates. The confident rule
(:func:`lib.confidence.eligible_cells`) reuses the minimum-runs and acceptance gates.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from lib import robust
from lib.flags import flag_name
from lib.problems import Problem, Severity
from lib.settings import Settings
from lib.unmeasured import UNMEASURED_RULE, UNMEASURED_RULED_OUT_RULE, unmeasured_cells

__all__ = [
    "CELL_SCHEMA",
    "acceptance_gate",
    "anchor_grid_gate",
    "cell_statistics",
    "min_runs_gate",
    "noise_gate",
]


#: Schema of the cell frame returned by :func:`cell_statistics` (and kept by
#: :class:`lib.gates.GatedSweep` and :class:`lib.schedule.TuningResult`).
CELL_SCHEMA = {
    "anchor": pl.Int64,
    "k": pl.Int64,
    "num_runs": pl.Int64,
    "median": pl.Float64,
    "mad": pl.Float64,
    "relative_mad": pl.Float64,
    "conservative": pl.Float64,
    "acceptance_runs": pl.Int64,
    "median_acceptance": pl.Float64,
    "acceptance_relative_mad": pl.Float64,
    "files": pl.List(pl.Utf8),
}


def cell_statistics(runs: pl.DataFrame, settings: Settings) -> pl.DataFrame:
    """One row per (anchor, K) of ``runs`` (:data:`CELL_SCHEMA`), sorted by anchor, K.

    A run whose objective is null (an excluded run) is not counted: ``num_runs`` counts the
    usable runs, so a cell whose runs were all excluded has ``num_runs == 0``.

    ``conservative`` is :func:`lib.robust.conservative_score` of the median and MAD;
    acceptance columns are null without ``settings.acceptance``.
    """
    objective = settings.objective
    acceptance = settings.acceptance
    median = robust.median(objective)
    mad = robust.median_abs_deviation(objective)
    if acceptance is not None and acceptance in runs.columns:
        accepted = pl.col(acceptance).is_not_null() & pl.col(acceptance).is_finite()
        acceptance_exprs = [
            accepted.sum().cast(pl.Int64).alias("acceptance_runs"),
            robust.median(acceptance).alias("median_acceptance"),
            robust.median_abs_deviation(acceptance).alias("_acceptance_mad"),
        ]
    else:
        acceptance_exprs = [
            pl.lit(0, pl.Int64).alias("acceptance_runs"),
            pl.lit(None, pl.Float64).alias("median_acceptance"),
            pl.lit(None, pl.Float64).alias("_acceptance_mad"),
        ]
    cells = (
        runs.group_by("anchor", "k")
        .agg(
            pl.col(objective).count().cast(pl.Int64).alias("num_runs"),
            median.alias("median"),
            mad.alias("mad"),
            *acceptance_exprs,
            pl.col("source").unique(maintain_order=True).alias("files"),
        )
        .with_columns(
            robust.relative_mad(pl.col("mad"), pl.col("median")).alias("relative_mad"),
            robust.conservative_score(
                pl.col("median"), pl.col("mad"), settings.uncertainty_penalty, settings.maximize
            ).alias("conservative"),
            robust.relative_mad(pl.col("_acceptance_mad"), pl.col("median_acceptance")).alias(
                "acceptance_relative_mad"
            ),
        )
        .sort("anchor", "k")
    )
    return cells.select(list(CELL_SCHEMA)).cast(CELL_SCHEMA)  # type: ignore[arg-type]


def _cell_problem(row: dict[str, Any], rule: str, message: str, **fields: Any) -> Problem:
    return Problem(
        Severity.ERROR,
        rule,
        message,
        files=tuple(row["files"]),
        anchor=row["anchor"],
        k=row["k"],
        **fields,
    )


def min_runs_gate(cells: pl.DataFrame, min_runs: int) -> tuple[pl.Series, list[Problem]]:
    """Reject cells with fewer than ``min_runs`` usable runs: a median of one or two runs says
    nothing about noise. Returns a rejection reason per cell (null when kept) and problems."""
    mask = cells["num_runs"] < min_runs
    problems = [
        _cell_problem(
            row,
            "too-few-runs",
            f"only {row['num_runs']} usable run(s)",
            field="num_runs",
            value=str(row["num_runs"]),
            expected=f">= {min_runs} ({flag_name(Settings, 'min_runs')})",
        )
        for row in cells.filter(mask).to_dicts()
    ]
    return _reasons(mask, f"fewer than {min_runs} runs"), problems


def noise_gate(cells: pl.DataFrame, settings: Settings) -> tuple[pl.Series, list[Problem]]:
    """Reject cells whose objective relative MAD exceeds ``max_objective_relative_mad``.

    A cell at exactly the threshold is kept (the seed's ``>``). With 3 runs the MAD ignores the
    farther of the two outer runs, so this gate misses a single far-off run; it catches cells
    whose runs are all spread out.
    """
    threshold = settings.max_objective_relative_mad
    mask = cells["relative_mad"] > threshold
    problems = [
        _cell_problem(
            row,
            "noisy-objective",
            "the runs disagree too much to rank this cell",
            field=settings.objective + " relative MAD",
            value=f"{row['relative_mad']:.4f}",
            expected=f"<= {threshold} ({flag_name(Settings, 'max_objective_relative_mad')})",
        )
        for row in cells.filter(mask).to_dicts()
    ]
    return _reasons(mask, f"objective relative MAD above {threshold}"), problems


def acceptance_gate(cells: pl.DataFrame, settings: Settings) -> tuple[pl.Series, list[Problem]]:
    """Acceptance stability (only with ``--acceptance-var``).

    - K=0 may lack acceptance (no drafts, so vLLM writes no ``spec_decode_*`` fields).
    - A cell with no usable run says nothing more: each of its runs' exclusions is reported.
    - A cell where only some runs have it is an error: the runs measured different things.
    - A K>0 cell with none is an error: the field is wrong or drafting never happened.
    - A relative MAD above ``max_acceptance_relative_mad`` is a warning, or an error that
      rejects the cell with ``strict_acceptance_stability``.
    """
    count = len(cells)
    if settings.acceptance is None:
        return pl.Series([None] * count, dtype=pl.Utf8), []
    field = settings.acceptance
    reasons: list[str | None] = []
    problems = []
    for row in cells.to_dicts():
        runs, have = row["num_runs"], row["acceptance_runs"]
        reason = None
        if runs == 0 or (have == 0 and row["k"] == 0):
            # No usable run (each exclusion is reported with its reason), or K=0 (no drafts).
            pass
        elif have == 0:
            reason = "no acceptance values"
            problems.append(
                _cell_problem(row, "missing-acceptance", reason, field=field, expected="a number")
            )
        elif have < runs:
            reason = f"acceptance in only {have} of {runs} runs"
            problems.append(
                _cell_problem(
                    row, "partial-acceptance", reason, field=field, expected="in every run or none"
                )
            )
        elif row["acceptance_relative_mad"] > settings.max_acceptance_relative_mad:
            message = "acceptance is unstable between runs"
            strict = settings.strict_acceptance_stability
            problems.append(
                Problem(
                    Severity.ERROR if strict else Severity.WARNING,
                    "unstable-acceptance",
                    message,
                    files=tuple(row["files"]),
                    anchor=row["anchor"],
                    k=row["k"],
                    field=field + " relative MAD",
                    value=f"{row['acceptance_relative_mad']:.4f}",
                    expected=f"<= {settings.max_acceptance_relative_mad}"
                    f" ({flag_name(Settings, 'max_acceptance_relative_mad')})",
                )
            )
            if strict:
                reason = message
        reasons.append(reason)
    return pl.Series(reasons, dtype=pl.Utf8), problems


def anchor_grid_gate(cells: pl.DataFrame, settings: Settings) -> list[Problem]:
    """The anchors must start at 1 (vLLM's schedule must cover batch size 1), and every anchor
    must have measured the same set of K (otherwise "best" means different things per anchor),
    unless ``allow_unmeasured_k`` or ``design_ks``: then each missing cell (a K of the design
    or measured elsewhere) is judged by :mod:`lib.unmeasured` (a warning where the K measured
    there do not rule it out, a note where they do). Checked
    on every cell measured, kept or not; ``cells`` carries the gates' ``status``."""
    problems = []
    anchors = sorted(cells["anchor"].unique().to_list())
    # One aggregation, not a frame per anchor: this gate runs on every slider move in the app.
    per_anchor = cells.group_by("anchor", maintain_order=True).agg(
        pl.col("k"), pl.col("files").explode().drop_nulls().unique(maintain_order=True)
    )
    # Grid problems concern whole anchors: name their files so the user can find them.
    files_at = {anchor: tuple(files) for anchor, _, files in per_anchor.iter_rows()}
    if anchors and anchors[0] != 1:
        problems.append(
            Problem(
                Severity.ERROR,
                "anchors-not-from-1",
                "the smallest batch-size anchor is not 1, so the schedule cannot start at 1",
                files=files_at[anchors[0]],
                field="anchor",
                value=str(anchors[0]),
                expected="an anchor at batch size 1",
                extra={"anchors": anchors},
            )
        )
    if settings.allow_unmeasured_k or settings.design_ks:
        return problems + _unmeasured_problems(cells, settings, files_at)
    k_sets = {anchor: set(ks) for anchor, ks, _ in per_anchor.iter_rows()}
    every_k = set().union(*k_sets.values()) if k_sets else set()
    for anchor in anchors:
        missing = sorted(every_k - k_sets[anchor])
        if missing:
            problems.append(
                Problem(
                    Severity.ERROR,
                    "unequal-k-sets",
                    "this anchor lacks K "
                    + ", ".join(str(k) for k in missing)
                    + ", measured at other anchors",
                    files=files_at[anchor],
                    anchor=anchor,
                    field="k",
                    value=", ".join(str(k) for k in sorted(k_sets[anchor])),
                    expected="the K set "
                    + ", ".join(str(k) for k in sorted(every_k))
                    + f" (or {flag_name(Settings, 'allow_unmeasured_k')}: judge the missing"
                    " cells, assuming throughput unimodal in K)",
                )
            )
    return problems


def _unmeasured_problems(
    cells: pl.DataFrame, settings: Settings, files_at: dict[int, tuple[str, ...]]
) -> list[Problem]:
    """One problem per missing (anchor, K) (:func:`lib.unmeasured.unmeasured_cells`): a
    warning where nothing rules it out (the verdict cannot be ready), a note where the K
    measured at the anchor do (the verdict's ``assumes:`` says on what)."""
    return [
        Problem(
            Severity.NOTE if cell.ruled_out else Severity.WARNING,
            UNMEASURED_RULED_OUT_RULE if cell.ruled_out else UNMEASURED_RULE,
            cell.reason,
            files=files_at[cell.anchor],
            anchor=cell.anchor,
            k=cell.k,
        )
        for cell in unmeasured_cells(
            cells, settings.relative_tolerance, settings.maximize, settings.design_ks
        )
    ]


def _reasons(mask: pl.Series, reason: str) -> pl.Series:
    return pl.select(pl.when(pl.lit(mask)).then(pl.lit(reason))).to_series()
