"""Results as display tables for the app: one Polars frame per view, with readable column
names, rounded numbers and lists joined into text. Each function takes what :mod:`lib`
computed and adds nothing to it.
"""

from __future__ import annotations

import polars as pl

from lib.confidence import ConfidenceReport
from lib.loop.diff import DiffReport
from lib.measurement_plan import MeasurementPlan
from lib.numbers import OBJECTIVE_DECIMALS, PROBABILITY_DECIMALS
from lib.policy import policy_differences
from lib.schedule import TuningResult
from lib.switch_points import SwitchPoints

__all__ = [
    "cell_table",
    "comparison_table",
    "confidence_table",
    "decision_table",
    "excluded_runs_table",
    "flagged_runs_table",
    "k_sets_table",
    "new_anchor_table",
    "rejected_cells_table",
    "rerun_table",
    "rule_table",
    "switch_table",
]


def excluded_runs_table(result: TuningResult) -> pl.DataFrame:
    """Runs left out of every cell, one row per reason: how many, where, and example files."""
    excluded = result.excluded_runs
    return (
        excluded.group_by("reason", maintain_order=True)
        .agg(
            pl.len().alias("runs"),
            pl.col("anchor").drop_nulls().unique().sort().alias("batch sizes"),
            pl.col("k").drop_nulls().unique().sort().alias("K"),
            pl.col("source").unique(maintain_order=True).head(3).alias("files (first 3)"),
        )
        .with_columns(
            pl.col(name).cast(pl.List(pl.Utf8)).list.join(", ")
            for name in ("batch sizes", "K", "files (first 3)")
        )
    )


def rejected_cells_table(result: TuningResult) -> pl.DataFrame:
    """Cells (batch size, K) the gates rejected, with the reason."""
    return result.cells.filter(pl.col("status") == "rejected").select(
        pl.col("anchor").alias("batch size"),
        pl.col("k").alias("K"),
        pl.col("num_runs").alias("runs"),
        pl.col("relative_mad").round(4).alias("relative MAD"),
        "reason",
    )


def k_sets_table(result: TuningResult) -> pl.DataFrame:
    """Per batch size: the K measured, the K the policy kept, and the K chosen."""
    cells = result.cells
    return (
        cells.group_by("anchor", maintain_order=True)
        .agg(
            pl.col("k").sort().alias("K measured"),
            pl.col("k").filter(pl.col("status") == "kept").sort().alias("K kept"),
        )
        .join(result.decisions.select("anchor", "selected_k"), on="anchor", how="left")
        .sort("anchor")
        .select(
            pl.col("anchor").alias("batch size"),
            pl.col("K measured").cast(pl.List(pl.Utf8)).list.join(", "),
            pl.col("K kept").cast(pl.List(pl.Utf8)).list.join(", "),
            pl.col("selected_k").alias("K chosen"),
        )
    )


def decision_table(result: TuningResult, picks: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per batch size: the chosen K and how it compares, the tied K, and every K's
    conservative score (null where the cell was rejected).

    With ``picks`` (``anchor``, ``p_eps_good``, ``below_confidence`` per anchor, as
    :func:`lib.app.guide.pick_confidence` gives them), the pick's P(eps-good) and whether it
    is ``sure enough`` (false when below the confidence or unknown) follow the chosen K."""
    conservative = (
        result.cells.filter(pl.col("status") == "kept")
        .select("anchor", pl.format("conservative K={}", "k").alias("column"), "conservative")
        .pivot(on="column", index="anchor", values="conservative")
    )
    ordered = [f"conservative K={k}" for k in sorted(result.cells["k"].unique().to_list())]
    decisions = result.decisions.join(conservative, on="anchor", how="left")
    sure: list[pl.Expr] = []
    if picks is not None:
        decisions = decisions.join(
            picks.select("anchor", "p_eps_good", "below_confidence"), on="anchor", how="left"
        )
        sure = [
            _rounded_down(pl.col("p_eps_good")).alias("P(eps-good)"),
            (~pl.col("below_confidence")).alias("sure enough"),
        ]
    return decisions.select(
        pl.col("anchor").alias("batch size"),
        pl.col("selected_k").alias("chosen K"),
        *sure,
        pl.col("selected_median").round(OBJECTIVE_DECIMALS).alias("median"),
        pl.col("selected_conservative").round(OBJECTIVE_DECIMALS).alias("conservative"),
        pl.col("vs_best_percent").round(2).alias("vs best %"),
        pl.col("vs_k0_percent").round(2).alias("vs K=0 %"),
        pl.col("tied_k").cast(pl.List(pl.Utf8)).list.join(", ").alias("tied K"),
        pl.col("complete").alias("every K kept"),
        *[
            (
                pl.col(name).round(OBJECTIVE_DECIMALS)
                if name in decisions.columns
                else pl.lit(None, pl.Float64)
            ).alias(name)
            for name in ordered
        ],
    )


def _rounded_down(probability: pl.Expr) -> pl.Expr:
    """A probability as :func:`lib.numbers.probability_text` writes it (to
    :data:`lib.numbers.PROBABILITY_DECIMALS` decimals, rounded down), so that a shown P never
    exceeds the one the decision used (0.899 is not shown as 0.90 beside "unresolved") and
    reads the same in a table as in a line."""
    scale = float(10**PROBABILITY_DECIMALS)
    shown: pl.Expr = (probability * scale).round(6).floor() / scale
    return shown


def _joined(column: str) -> pl.Expr:
    return pl.col(column).cast(pl.List(pl.Utf8)).list.join(", ")


def _p_columns(report: ConfidenceReport) -> pl.DataFrame:
    """Per anchor, one ``P K=<k>`` column per K of the sweep (null where K was not eligible)."""
    wide = report.cells.select(
        "anchor", pl.format("P K={}", "k").alias("column"), _rounded_down(pl.col("p_eps_good"))
    ).pivot(on="column", index="anchor", values="p_eps_good")
    ordered = [f"P K={k}" for k in sorted(report.cells["k"].unique().to_list())]
    return wide.select("anchor", *ordered)


def confidence_table(result: TuningResult, report: ConfidenceReport) -> pl.DataFrame:
    """One row per anchor: resolved or not, the confident rule's K (provisional when
    unresolved), the reported K and its P(eps-good), the contenders, the pooled noise, the
    flagged runs and why the anchor is unresolved; then every K's P(eps-good)."""
    reported = result.decisions.select("anchor", pl.col("selected_k").alias("reported K"))
    p_of = report.cells.select(
        "anchor", pl.col("k").alias("reported K"), _rounded_down(pl.col("p_eps_good"))
    )
    return (
        report.anchors.join(reported, on="anchor", how="left")
        .join(p_of, on=["anchor", "reported K"], how="left")
        .join(_p_columns(report), on="anchor", how="left")
        .select(
            pl.col("anchor").alias("batch size"),
            "status",
            pl.col("selected_k").alias("confident K"),
            pl.col("provisional"),
            "reported K",
            pl.col("p_eps_good").alias("P(eps-good) of the reported K"),
            _joined("contenders").alias("contenders"),
            (pl.col("pooled_log_sd") * 100).round(2).alias("noise %"),
            _relative_percent(pl.col("server_log_sd")).alias("server noise %"),
            pl.when(pl.col("servers_measured"))
            .then(pl.lit("measured"))
            .when(pl.col("servers_measured").not_())
            .then(pl.lit("assumed"))
            .alias("server noise"),
            pl.col("flagged_runs").alias("flagged runs"),
            pl.col("depends_on_flagged").alias("pick depends on flagged runs"),
            pl.col("reasons").list.join("; ").alias("why unresolved"),
            pl.col("notes").list.join("; ").alias("notes"),
            pl.selectors.starts_with("P K="),
        )
    )


def _relative_percent(log_sd: pl.Expr) -> pl.Expr:
    """A log-scale sd as the percent relative sd of its log-normal (what the texts say)."""
    return ((log_sd**2).exp() - 1).sqrt().mul(100).round(2)


def cell_table(report: ConfidenceReport) -> pl.DataFrame:
    """One row per (batch size, K) the confident rule weighs: its runs and the server starts
    they came from (replicas: :mod:`lib.servers`), its centre and P(eps-good), and for a
    contender what would settle it (total runs, total server starts)."""
    return report.cells.select(
        pl.col("anchor").alias("batch size"),
        pl.col("k").alias("K"),
        pl.col("num_runs").alias("runs"),
        pl.col("num_servers").alias("servers"),
        pl.col("geometric_mean").round(OBJECTIVE_DECIMALS).alias("geometric mean"),
        _rounded_down(pl.col("p_eps_good")).alias("P(eps-good)"),
        pl.col("contender"),
        pl.col("runs_needed").alias("runs needed"),
        pl.col("servers_needed").alias("servers needed"),
    )


def flagged_runs_table(report: ConfidenceReport) -> pl.DataFrame:
    """Every flagged run with its file, how far it lies from its cell's median, and whether its
    anchor's pick depends on it (the pick changes when the flagged runs are left out)."""
    runs = report.runs.filter(pl.col("flagged"))
    signed = pl.col("residual") if report.maximize else -pl.col("residual")
    anchors = report.anchors.select("anchor", "status", "depends_on_flagged")
    return (
        runs.join(anchors, on="anchor", how="left")
        .select(
            pl.col("anchor").alias("batch size"),
            pl.col("k").alias("K"),
            pl.col("source").alias("file"),
            pl.col("run_number").alias("run"),
            "value",
            ((signed.exp() - 1) * 100).round(1).alias("vs its cell's median %"),
            pl.col("depends_on_flagged").alias("the pick depends on it"),
            pl.col("status").alias("anchor status"),
        )
        .sort("batch size", "K", maintain_order=True)
    )


def switch_table(switch_points: SwitchPoints) -> pl.DataFrame:
    """One row per switch between neighbouring anchors whose picks differ."""
    return switch_points.switches.select(
        pl.format("K={} -> K={}", "from_k", "to_k").alias("switch"),
        pl.format("{} - {}", "lower_anchor", "upper_anchor").alias("between anchors"),
        pl.col("crossover").round(1).alias("curves cross at"),
        pl.col("switch_at").alias("interpolated: switch at"),
        pl.col("step_switch_at").alias("step: switch at"),
        pl.col("changed_batch_sizes").alias("batch sizes that change"),
        pl.col("gain_percent").round(2).alias("expected gain % there"),
        pl.col("note").fill_null(""),
    )


def rerun_table(plan: MeasurementPlan) -> pl.DataFrame:
    """The plan's reruns: per (batch size, K) the runs so far, the target and why."""
    return plan.reruns.select(
        pl.col("batch_size").alias("batch size"),
        pl.col("k").alias("K"),
        pl.col("runs").alias("runs so far"),
        pl.col("target_runs").alias("target runs"),
        pl.col("more_runs").alias("more runs"),
        pl.col("noise_limited").alias("noise-limited"),
        "reason",
    )


def new_anchor_table(plan: MeasurementPlan) -> pl.DataFrame:
    """The plan's new anchors: where, between which picks, and what to measure there."""
    return plan.new_anchors.select(
        pl.col("batch_size").alias("batch size"),
        pl.format(
            "K={} at {}, K={} at {}", "lower_k", "lower_anchor", "upper_k", "upper_anchor"
        ).alias("between"),
        pl.col("disagreement_percent").round(1).alias("disagreement %"),
        _joined("ks").alias("K to measure"),
        pl.col("runs_per_k").alias("runs per K"),
        "reason",
    )


def rule_table(seed: TuningResult, confident: TuningResult) -> pl.DataFrame:
    """Per anchor: each rule's K and its P(eps-good), and whether they differ."""
    return policy_differences(seed, confident).select(
        pl.col("anchor").alias("batch size"),
        pl.col("seed_k").alias("seed's K"),
        pl.col("confident_k").alias("confident K"),
        "differs",
        "status",
        _rounded_down(pl.col("seed_p_eps_good")).alias("P(eps-good) of the seed's K"),
        _rounded_down(pl.col("confident_p_eps_good")).alias("P(eps-good) of the confident K"),
    )


def comparison_table(report: DiffReport) -> pl.DataFrame:
    """One display row per batch size: both K, both objectives, the change and its interval,
    the K-change losses, the verdict and its reasons as one text."""
    return report.rows.select(
        pl.col("batch_size").alias("batch size"),
        pl.col("k_a").alias("K (A)"),
        pl.col("k_b").alias("K (B)"),
        pl.col("objective_a").round(OBJECTIVE_DECIMALS).alias(f"{report.a.objective} (A)"),
        pl.col("objective_b").round(OBJECTIVE_DECIMALS).alias(f"{report.b.objective} (B)"),
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
