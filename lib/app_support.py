"""What the notebook (``notebooks/tune_spec_k.py``) needs besides the policy: where its input
is, which controls to offer, and the analysis as tables and text.

The app calls :func:`lib.sweeps.load_experiment` and :func:`lib.analysis.analyse` as the CLI
does, and downloads ``analysis.result.to_json_text()``, the text the CLI writes; everything
here only prepares their input or presents what they return, so the app and the CLI cannot
disagree. :func:`cli_arguments` gives the command line that reproduces the app's file.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from lib import cli
from lib.analysis import Analysis, Options
from lib.confidence import ConfidenceReport, Policy, apply_policy, policy_differences
from lib.plan import MeasurementPlan
from lib.problems import Problem, Severity
from lib.schedule import KNOWN_OBJECTIVES, Direction, Settings, TuningResult
from lib.sweeps import DEFAULT_K_VAR, GLOBAL_K_VAR, Sweep
from lib.switch import SwitchAnalysis

#: File name the CLI writes by default, used for the app's download too.
SCHEDULE_FILE = cli.OUTPUT_FILE

#: How K is recorded in a sweep: the seed's design (a fixed global maximum, the effective K set
#: by a one-range ``num_speculative_tokens_per_batch_size``), or one static-K server per K.
K_VAR_CHOICES: dict[str, str] = {
    "a one-range schedule (seed)": DEFAULT_K_VAR,
    "num_speculative_tokens": GLOBAL_K_VAR,
}

#: Acceptance fields offered first, most useful first.
PREFERRED_ACCEPTANCE = ("spec_decode_acceptance_length", "spec_decode_acceptance_rate")

NO_ACCEPTANCE = "(none)"

#: The decision rules (``--policy``), as the app's toggle names them; the seed's first.
POLICY_CHOICES: dict[str, Policy] = {
    "the seed's: conservative score": "seed",
    "confident: P(eps-good)": "confident",
}

#: Background of the rows a table highlights (unresolved anchors, rules that differ).
HIGHLIGHT = {"backgroundColor": "#fde2e1"}

_DATA_FILE = re.compile(r"^(summary|run=\d+|run=\d+\.failure)\.json$")


@dataclass(frozen=True)
class AppArguments:
    """What the notebook was started with (``-- --sweeps DIR`` after the notebook path)."""

    sweeps: str | None


def parse_app_arguments(argv: Sequence[str]) -> AppArguments:
    """``--sweeps DIR`` from ``sys.argv[1:]``; anything else is left to marimo.

    One parser for every way the notebook runs: ``marimo run/edit/export ... -- --sweeps DIR``
    and ``python notebooks/tune_spec_k.py --sweeps DIR`` all put the flag in ``sys.argv``.
    """
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--sweeps", default=None)
    known, _ = parser.parse_known_args(list(argv))
    return AppArguments(sweeps=known.sweeps)


def resolve_root(sweeps: str | None, notebook_dir: Path, cwd: Path) -> Path:
    """The folder the app may read: ``--sweeps`` resolved from the working directory, or the
    bundled ``data/sample_sweeps/`` beside the notebook's folder."""
    if sweeps is None:
        return (notebook_dir.parent / "data" / "sample_sweeps").resolve()
    return (cwd / Path(sweeps).expanduser()).resolve()


def folder_below_root(root: Path, requested: str | Sequence[str] | None) -> tuple[Path, str | None]:
    """The folder a ``?sweeps=`` query (or the folder browser) asks for, if it is an existing
    folder at or below ``root``; else ``root`` and the reason the request was refused.

    Whoever opens the page sets the query, so it may only narrow what the command line allowed:
    a relative path is taken from ``root``, and ``..`` or symbolic links that lead outside are
    refused after resolving. A query given twice uses its first value.
    """
    if requested is not None and not isinstance(requested, str):
        requested = next(iter(requested), None)
    if not requested:
        return root, None
    candidate = (root / requested).resolve()
    if not candidate.is_relative_to(root.resolve()):
        return root, f"?sweeps={requested} is outside {root}: showing {root} instead"
    if not candidate.is_dir():
        return root, f"?sweeps={requested} is not a folder below {root}: showing {root} instead"
    return candidate, None


def _has_data_files(folder: Path, *, any_depth: bool) -> bool:
    if not any_depth:
        try:
            return any(_DATA_FILE.match(entry.name) for entry in os.scandir(folder))
        except OSError:
            return False
    return any(_DATA_FILE.match(name) for _, _, names in os.walk(folder) for name in names)


def _subfolders(folder: Path) -> list[Path]:
    try:
        return sorted(entry for entry in folder.iterdir() if entry.is_dir())
    except OSError:
        return []


def find_experiments(folder: Path) -> dict[str, Path]:
    """The experiments to choose from in ``folder``, by name.

    ``folder`` is one experiment when run files lie in it or in its immediate subfolders (the
    ``SERVE--...-BENCH--...`` combo folders); otherwise each immediate subfolder with run files
    at any depth is an experiment (vLLM writes ``<output-dir>/<experiment-name>/``).
    """
    subfolders = _subfolders(folder)
    if _has_data_files(folder, any_depth=False) or any(
        _has_data_files(sub, any_depth=False) for sub in subfolders
    ):
        return {folder.name: folder}
    return {sub.name: sub for sub in subfolders if _has_data_files(sub, any_depth=True)}


# --------------------------------------------------------------------------- controls


def default_direction(field: str) -> Direction:
    """The direction that means "better" for a field: known objectives as listed in
    :data:`lib.schedule.KNOWN_OBJECTIVES`, latencies (``*_ms``) minimised, the rest maximised."""
    if field in KNOWN_OBJECTIVES:
        return KNOWN_OBJECTIVES[field]
    return "minimize" if field.endswith("_ms") else "maximize"


def objective_options(sweep: Sweep) -> list[str]:
    """The known objectives first (even when absent, so choosing one explains why it cannot be
    used), then every other numeric field of the sweep, sorted."""
    known = list(KNOWN_OBJECTIVES)
    return known + sorted(set(sweep.metrics) - set(known))


def acceptance_options(sweep: Sweep) -> list[str]:
    """:data:`NO_ACCEPTANCE` (the seed's default), the usual acceptance fields present in the
    sweep, then the other ``spec_decode_*`` fields."""
    metrics = set(sweep.metrics)
    preferred = [name for name in PREFERRED_ACCEPTANCE if name in metrics]
    others = sorted(
        name for name in metrics if name.startswith("spec_decode_") and name not in preferred
    )
    return [NO_ACCEPTANCE, *preferred, *others]


def acceptance_field(choice: str) -> str | None:
    """The ``acceptance`` setting for a dropdown choice."""
    return None if choice == NO_ACCEPTANCE else choice


def slider_steps(stop: float, step: float, start: float = 0.0) -> list[float]:
    """Slider stops ``start, start + step, ..., stop`` rounded to the step's decimals, so a
    slider value is the same float a user types on the CLI (``0.3``, not
    ``0.30000000000000004``) and the exported JSON matches the CLI's byte for byte."""
    return [round(start + index * step, 10) for index in range(round((stop - start) / step) + 1)]


# --------------------------------------------------------------------------- data health


@dataclass(frozen=True)
class HealthCounts:
    """Headline numbers about what was read and what the policy could use."""

    files_read: int
    runs_loaded: int
    runs_excluded: int
    cells: int
    cells_rejected: int
    anchors: int
    errors: int
    warnings: int


def health_counts(result: TuningResult) -> HealthCounts:
    severities = [problem.severity for problem in result.problems]
    return HealthCounts(
        files_read=len(result.sweep.input_files),
        runs_loaded=result.sweep.runs.height,
        runs_excluded=result.excluded_runs.height,
        cells=result.cells.height,
        cells_rejected=result.cells.filter(pl.col("status") == "rejected").height,
        anchors=result.decisions.height,
        errors=severities.count(Severity.ERROR),
        warnings=severities.count(Severity.WARNING),
    )


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


def global_k_text(result: TuningResult) -> str:
    """The engine's startup maximum (``num_speculative_tokens``): configured, observed, used."""
    configured = result.configured_global_k
    observed = result.max_k_observed
    stated = (
        f"configured num_speculative_tokens = {configured}"
        if configured is not None
        else "no single configured num_speculative_tokens"
    )
    return (
        f"{stated}; largest K measured = {observed if observed is not None else 'none'};"
        f" the exported config starts the engine with {result.deploy_global_k}"
    )


def baseline_text(result: TuningResult) -> str:
    """What the K=0 baseline is: the schedule-enabled engine at K=0 (the seed's honest
    baseline), a server without speculation, both, or missing."""
    k0 = result.sweep.runs.filter(pl.col("k") == 0)
    on_engine = k0.filter(pl.col("speculation").fill_null(False)).height
    plain_notes = [p for p in result.problems if p.rule == "k0-without-speculation"]
    parts = []
    if on_engine:
        parts.append(
            f"{on_engine} K=0 run(s) on the speculative engine with K set to 0 (the seed's"
            " baseline: same engine configuration as the candidates)"
        )
    parts += [note.message for note in plain_notes]
    if not parts:
        return "no K=0 runs: the 'vs K=0' figures are not available"
    return "; ".join(parts)


def problems_of(result: TuningResult, severity: Severity) -> list[Problem]:
    return [problem for problem in result.problems if problem.severity is severity]


def html_list(lines: Sequence[str]) -> str:
    """Lines as an HTML list, escaped: field and file names such as ``mean_tpot_ms`` must not
    turn into Markdown emphasis."""
    items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    return f"<ul>{items}</ul>"


def text_block_html(lines: Sequence[str]) -> str:
    """Lines as preformatted text that wraps (the CLI's indented output, escaped)."""
    text = html.escape("\n".join(lines))
    return f'<pre style="white-space: pre-wrap; font-size: 0.85em">{text}</pre>'


def problem_list_html(problems: Sequence[Problem]) -> str:
    """Problems as an HTML list of the CLI's one-line descriptions."""
    return html_list([problem.describe() for problem in problems])


# --------------------------------------------------------------------------- decisions


def decision_table(result: TuningResult) -> pl.DataFrame:
    """One row per batch size: the chosen K and how it compares, the tied K, and every K's
    conservative score (null where the cell was rejected)."""
    conservative = (
        result.cells.filter(pl.col("status") == "kept")
        .select("anchor", pl.format("conservative K={}", "k").alias("column"), "conservative")
        .pivot(on="column", index="anchor", values="conservative")
    )
    ordered = [f"conservative K={k}" for k in sorted(result.cells["k"].unique().to_list())]
    decisions = result.decisions.join(conservative, on="anchor", how="left")
    return decisions.select(
        pl.col("anchor").alias("batch size"),
        pl.col("selected_k").alias("chosen K"),
        pl.col("selected_median").round(2).alias("median"),
        pl.col("selected_conservative").round(2).alias("conservative"),
        pl.col("vs_best_percent").round(2).alias("vs best %"),
        pl.col("vs_k0_percent").round(2).alias("vs K=0 %"),
        pl.col("tied_k").cast(pl.List(pl.Utf8)).list.join(", ").alias("tied K"),
        pl.col("complete").alias("every K kept"),
        *[
            (
                pl.col(name).round(2) if name in decisions.columns else pl.lit(None, pl.Float64)
            ).alias(name)
            for name in ordered
        ],
    )


def schedule_text(result: TuningResult) -> str:
    """The schedule as the CLI's first stdout line prints it (``[]`` when undecided)."""
    return json.dumps([list(r) for r in result.schedule or ()])


def speculative_config_argument(result: TuningResult) -> str:
    """The ``--speculative-config '...'`` line the CLI prints, ready for ``vllm serve``."""
    return "--speculative-config " + shlex.quote(json.dumps(result.speculative_config()))


# --------------------------------------------------------------------------- confidence


def rule_text(options: Options) -> str:
    """Markdown: which decision rule and which schedule the app reports and exports."""
    rule = next(name for name, policy in POLICY_CHOICES.items() if policy == options.policy)
    schedule = (
        "interpolated (switches between anchors)"
        if options.interpolated_schedule
        else "step (switches at the anchors)"
    )
    return f"**Decision rule:** {rule}, confidence {options.confidence:g}; **schedule:** {schedule}"


def highlight_rows(
    frame: pl.DataFrame, column: str, value: Any = True
) -> Callable[[str, str, Any], dict[str, str]]:
    """A ``style_cell`` for ``mo.ui.table(frame)`` that highlights the rows whose ``column``
    holds ``value`` (marimo names rows by their position)."""
    marked = {str(index) for index, cell in enumerate(frame[column].to_list()) if cell == value}

    def style(row: str, _column: str, _value: Any) -> dict[str, str]:
        return HIGHLIGHT if row in marked else {}

    return style


def _joined(column: str) -> pl.Expr:
    return pl.col(column).cast(pl.List(pl.Utf8)).list.join(", ")


def _p_columns(report: ConfidenceReport) -> pl.DataFrame:
    """Per anchor, one ``P K=<k>`` column per K of the sweep (null where K was not eligible)."""
    wide = report.cells.select(
        "anchor", pl.format("P K={}", "k").alias("column"), pl.col("p_eps_good").round(3)
    ).pivot(on="column", index="anchor", values="p_eps_good")
    ordered = [f"P K={k}" for k in sorted(report.cells["k"].unique().to_list())]
    return wide.select("anchor", *ordered)


def confidence_table(result: TuningResult, report: ConfidenceReport) -> pl.DataFrame:
    """One row per anchor: resolved or not, the confident rule's K (provisional when
    unresolved), the reported K and its P(eps-good), the contenders, the pooled noise, the
    flagged runs and why the anchor is unresolved; then every K's P(eps-good)."""
    reported = result.decisions.select("anchor", pl.col("selected_k").alias("reported K"))
    p_of = report.cells.select(
        "anchor", pl.col("k").alias("reported K"), pl.col("p_eps_good").round(3)
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
            pl.col("flagged_runs").alias("flagged runs"),
            pl.col("depends_on_flagged").alias("pick depends on flagged runs"),
            pl.col("reasons").list.join("; ").alias("why unresolved"),
            pl.col("notes").list.join("; ").alias("notes"),
            pl.selectors.starts_with("P K="),
        )
    )


def unresolved_lines(result: TuningResult, report: ConfidenceReport) -> list[str]:
    """The CLI's status line of every unresolved anchor (its provisional K, contenders,
    reasons and flagged runs)."""
    statuses = report.anchors["status"].to_list()
    if "unresolved" not in statuses:
        return []  # the status lines take a few ms on a large sweep: skip them
    lines = report.status_lines(result)
    return [line for line, status in zip(lines, statuses, strict=True) if status == "unresolved"]


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


@dataclass(frozen=True, eq=False)
class RuleComparison:
    """Both decision rules on the same confidence report, each with its step schedule."""

    seed: TuningResult
    confident: TuningResult

    def table(self) -> pl.DataFrame:
        """Per anchor: each rule's K and its P(eps-good), and whether they differ."""
        return policy_differences(self.seed, self.confident).select(
            pl.col("anchor").alias("batch size"),
            pl.col("seed_k").alias("seed's K"),
            pl.col("confident_k").alias("confident K"),
            "differs",
            "status",
            pl.col("seed_p_eps_good").round(3).alias("P(eps-good) of the seed's K"),
            pl.col("confident_p_eps_good").round(3).alias("P(eps-good) of the confident K"),
        )

    def summary(self) -> str:
        """Markdown: both schedules, and whether each could be written."""
        lines = []
        for name, result in (("seed's rule", self.seed), ("confident rule", self.confident)):
            written = "" if result.ok else " (not written: errors)"
            lines.append(f"- **{name}**: `{schedule_text(result)}`{written}")
        return "\n".join(lines)


def compare_rules(analysis: Analysis, options: Options) -> RuleComparison | None:
    """The seed's and the confident rule's results for the analysed sweep (None without a
    confidence report). Both keep the step schedule, so the rules compare like for like; the
    analysis' own result is reused where it is one of them."""
    report = analysis.report
    if report is None:
        return None
    confident = (
        analysis.result
        if options.policy == "confident" and not options.interpolated_schedule
        else apply_policy(analysis.seed_result, report, "confident")
    )
    return RuleComparison(seed=analysis.seed_result, confident=confident)


def switch_table(switch_points: SwitchAnalysis) -> pl.DataFrame:
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


# --------------------------------------------------------------------------- export


def cli_arguments(
    experiment: str | os.PathLike[str],
    settings: Settings,
    options: Options,
    *,
    batch_size_var: str,
    k_var: str,
) -> list[str]:
    """The ``tune-spec-k`` arguments that analyse ``experiment`` exactly as the app does."""
    arguments = [
        os.fspath(experiment),
        f"--batch-size-var={batch_size_var}",
        f"--k-var={k_var}",
        f"--objective-var={settings.objective}",
        f"--objective-direction={settings.direction}",
        f"--min-runs={settings.min_runs}",
        f"--uncertainty-penalty={settings.uncertainty_penalty!r}",
        f"--max-objective-relative-mad={settings.max_objective_relative_mad!r}",
        f"--max-acceptance-relative-mad={settings.max_acceptance_relative_mad!r}",
        f"--relative-tolerance={settings.relative_tolerance!r}",
    ]
    if settings.acceptance is not None:
        arguments.append(f"--acceptance-var={settings.acceptance}")
    if settings.strict_acceptance_stability:
        arguments.append("--strict-acceptance-stability")
    if settings.max_batch_size is not None:
        arguments.append(f"--max-batch-size={settings.max_batch_size}")
    if settings.allow_mixed_global_k:
        arguments.append("--allow-mixed-global-k")
    arguments += [f"--policy={options.policy}", f"--confidence={options.confidence!r}"]
    if options.seed != Options().seed:
        arguments.append(f"--seed={options.seed}")
    if options.interpolated_schedule:
        arguments.append("--interpolated-schedule")
    return arguments


def cli_command(arguments: Sequence[str]) -> str:
    """The arguments as a shell command line to reproduce the app's result."""
    return shlex.join(["tune-spec-k", *arguments])
