"""The decision policy: which rule's picks a result reports (``--policy``), the seed's or the
``confident`` rule's (``docs/confidence.md``), given the seed's :class:`lib.schedule.TuningResult`
and its :class:`lib.confidence.ConfidenceReport`.

:func:`apply_policy` returns the result to report, with the confidence block in every decision
and the ``decision_policy`` key (:class:`DecisionPolicy`); :func:`policy_differences` shows
where the two rules disagree.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import polars as pl

from lib.confidence import ConfidenceReport
from lib.decide import decide
from lib.problems import Problem, Severity
from lib.schedule import TuningResult, decided_schedule
from lib.settings import Policy

__all__ = ["DecisionPolicy", "apply_policy", "policy_differences"]


@dataclass(frozen=True, eq=False)
class DecisionPolicy:
    """The result JSON's ``decision_policy`` key: which rule picked, with the report's settings
    (:meth:`ConfidenceReport.settings_json`), written when the JSON is."""

    report: ConfidenceReport
    policy: Policy

    def to_json(self) -> dict[str, Any]:
        return self.report.settings_json(self.policy)


def apply_policy(result: TuningResult, report: ConfidenceReport, policy: Policy) -> TuningResult:
    """The result to report under ``policy``, with the confidence block in every decision.

    ``"seed"``: the seed's picks, schedule and problems unchanged.

    ``"confident"``: per anchor the smallest K whose P(eps-good) reaches the confidence, else
    the provisional pick. Cells the relative-MAD gate rejected are ranked (their noise error
    becomes a warning); every unresolved anchor adds a warning, so no pick is silent. In the
    decisions, ``selected_*`` are the picked cell's median and conservative score as before,
    ``vs_best_percent`` / ``vs_k0_percent`` compare medians (the rule does not use the MAD
    penalty), ``tied_k`` lists the K that reach the confidence.
    """
    additions = {**result.additions, "decision_policy": DecisionPolicy(report, policy)}
    if policy == "seed":
        return dataclasses.replace(result, confidence=report, additions=additions)
    picks = dict(zip(report.anchors["anchor"], report.anchors["selected_k"], strict=True))
    # The report's cells are the eligible ones (each with at least one usable run).
    eligible = report.cells.select("anchor", "k", pl.lit(True).alias("_eligible"))
    reaching = (
        report.anchors.select("anchor", pl.col("qualifying_k").alias("k"))
        .explode("k")
        .drop_nulls()
        .with_columns(pl.lit(True).alias("_qualifies"))
    )
    cells = (
        result.cells.join(eligible, on=["anchor", "k"], how="left")
        .join(reaching, on=["anchor", "k"], how="left")
        .with_columns(pl.col("_eligible", "_qualifies").fill_null(False))
    )
    median = pl.when(pl.col("_eligible")).then(pl.col("median"))
    best = (median.max() if result.settings.maximize else median.min()).over("anchor")
    ratio = median / best if result.settings.maximize else best / median
    picked = pl.col("k") == pl.col("anchor").replace_strict(picks, default=None)
    cells = cells.with_columns(
        pl.when(pl.col("_eligible"))
        .then(pl.lit("kept"))
        .otherwise(pl.lit("rejected"))
        .alias("status"),
        pl.when(pl.col("_eligible")).then(None).otherwise(pl.col("reason")).alias("reason"),
        pl.when(best > 0).then(ratio).alias("ratio"),
        (pl.col("_eligible") & pl.col("_qualifies")).alias("tied"),
        (pl.col("_eligible") & picked.fill_null(False)).alias("selected"),
    ).drop("_eligible", "_qualifies")
    # The confident rule ranks medians (no MAD penalty), so K=0 is compared by median too.
    decisions = decide(cells, result.settings.maximize, score="median")
    problems = _confident_problems(result, report)
    schedule, found = decided_schedule(
        decisions, result.max_batch_size, "no cell at the anchor has enough usable runs"
    )
    problems += found
    return dataclasses.replace(
        result,
        cells=cells,
        decisions=decisions,
        schedule=schedule,
        problems=tuple(problems),
        confidence=report,
        additions=additions,
    )


def _confident_problems(result: TuningResult, report: ConfidenceReport) -> list[Problem]:
    """The seed's problems, less those the confident rule settles: the noise gate's errors
    become warnings, schedule problems are recomputed; plus a warning per unresolved anchor."""
    problems = []
    for problem in result.problems:
        if problem.rule in ("undecided-anchor", "invalid-schedule"):
            continue
        if problem.rule == "noisy-objective" and problem.severity is Severity.ERROR:
            problem = dataclasses.replace(
                problem,
                severity=Severity.WARNING,
                message=problem.message + ": the confident rule weighs this noise through the"
                " anchor's pooled estimate instead of rejecting the cell",
            )
        problems.append(problem)
    files = dict(
        report.runs.filter(pl.col("flagged"))
        .group_by("anchor", maintain_order=True)
        .agg(pl.col("source").unique(maintain_order=True))
        .iter_rows()
    )
    for row in report.anchors.filter(pl.col("status") == "unresolved").to_dicts():
        problems.append(
            Problem(
                Severity.WARNING,
                "unresolved-anchor",
                f"provisional K={row['selected_k']}: " + "; ".join(row["reasons"]),
                files=tuple(files.get(row["anchor"], ())),
                anchor=row["anchor"],
                field="P(eps-good)",
                expected=f">= {report.settings.confidence:g} for some K (see the measurement plan)",
                extra={"contenders": list(row["contenders"])},
            )
        )
    return problems


def policy_differences(seed: TuningResult, confident: TuningResult) -> pl.DataFrame:
    """Where the two rules pick differently: one row per anchor with ``seed_k``,
    ``confident_k``, ``differs`` and both picks' P(eps-good) (from either result's blocks)."""
    report = confident.confidence or seed.confidence
    blocks = report.blocks() if report is not None else {}
    rows = []
    seed_picks = dict(zip(seed.decisions["anchor"], seed.decisions["selected_k"], strict=True))
    for anchor, k in zip(
        confident.decisions["anchor"], confident.decisions["selected_k"], strict=True
    ):
        block = blocks.get(anchor, {})
        p = block.get("p_eps_good", {})
        other = seed_picks.get(anchor)
        rows.append(
            {
                "anchor": anchor,
                "seed_k": other,
                "confident_k": k,
                "differs": other != k,
                "status": block.get("status"),
                "seed_p_eps_good": p.get(str(other)),
                "confident_p_eps_good": p.get(str(k)),
            }
        )
    schema = {
        "anchor": pl.Int64,
        "seed_k": pl.Int64,
        "confident_k": pl.Int64,
        "differs": pl.Boolean,
        "status": pl.Utf8,
        "seed_p_eps_good": pl.Float64,
        "confident_p_eps_good": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema)
