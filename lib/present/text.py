"""Every result as lines of text, the way the CLI prints them (and the app shows them).

One function per result: :func:`decision_lines` (the seed's line per anchor, as it prints
it), :func:`anchor_detail_lines` (tune-spec-k's),
:func:`confidence_lines`, :func:`switch_point_lines`, :func:`measurement_plan_lines`,
:func:`sweep_plan_lines`, :func:`check_lines`, :func:`diff_lines`, and the two lines a user
pastes: :func:`speculative_config_line`. The HTML helpers at the end wrap such lines for the
app, escaped. A path or a name from the user's files is :func:`~lib.problems.printable` in
every line: a folder name cannot start a line of its own.
"""

from __future__ import annotations

import html
import json
import shlex
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

from lib.confidence import ConfidenceReport, log_change_percent
from lib.effective_batch import EffectiveBatch
from lib.measurement_plan import MeasurementPlan, new_servers_text
from lib.numbers import objective_text, probability_text, signed_percent_text
from lib.problems import Problem, printable
from lib.schedule import NO_SCHEDULE, TuningResult, finite_or_none
from lib.servers import configuration_of
from lib.settings import RANDOM_PROMPT_LENGTH
from lib.switch_points import SwitchPoints

if TYPE_CHECKING:
    from lib.context import ContextAnalysis

    # Only their types: tuning prints its lines without loading the loop's modules.
    from lib.loop.check.report import CheckReport
    from lib.loop.diff import DiffReport
    from lib.loop.plan.sweep_plan import SweepPlan, SweepStep

__all__ = [
    "anchor_detail_lines",
    "check_lines",
    "confidence_lines",
    "context_export_lines",
    "context_grid_lines",
    "context_plan_lines",
    "decision_lines",
    "diff_lines",
    "effective_batch_lines",
    "html_list",
    "measurement_plan_lines",
    "problem_list_html",
    "speculative_config_line",
    "sweep_plan_lines",
    "switch_point_lines",
    "text_block_html",
]


# --------------------------------------------------------------------------- tuning


def decision_lines(result: TuningResult) -> list[str]:
    """One line per anchor exactly as the seed prints it (vLLM PR #49163's ``run_main``): the
    pick, its conservative objective and its percent against the best to 2 decimals, and its
    percent against K=0 as the JSON holds it (``str`` of the float, ``None`` without a K=0
    arm). An anchor without a pick (only in a context grid's answer, which the seed never
    writes) says so instead."""
    lines = []
    for row in result.decisions.to_dicts():
        if row["selected_k"] is None:
            lines.append(f"batch_size={row['anchor']}: no K (every cell rejected)")
            continue
        lines.append(
            f"batch_size={row['anchor']}: K={row['selected_k']},"
            f" conservative_objective={row['selected_conservative']:.2f},"
            f" vs_best={row['vs_best_percent']:.2f}%,"
            f" vs_k0={finite_or_none(row['vs_k0_percent'])}"
        )
    return lines


def anchor_detail_lines(result: TuningResult) -> list[str]:
    """tune-spec-k's line per anchor, after the seed's: the pick with its median too, both
    percents signed to 2 decimals (``n/a`` without a K=0 arm) and the K tied with it."""
    lines = []
    tied = dict(zip(result.decisions["anchor"], result.decisions["tied_k"], strict=True))
    for row in result.decisions.to_dicts():
        if row["selected_k"] is None:
            continue
        lines.append(
            f"anchor {row['anchor']}: K={row['selected_k']}"
            f" median={objective_text(row['selected_median'])}"
            f" conservative={objective_text(row['selected_conservative'])}"
            f" vs_best={signed_percent_text(row['vs_best_percent'])}"
            f" vs_k0={signed_percent_text(row['vs_k0_percent'])}"
            f" tied={list(tied[row['anchor']])}"
        )
    return lines


def paste_line(config: Mapping[str, Any]) -> str:
    """A speculative config as the ``--speculative-config '...'`` argument to paste into
    ``vllm serve``, shell-quoted."""
    return "--speculative-config " + shlex.quote(json.dumps(config))


def speculative_config_line(result: TuningResult) -> str:
    """The ``--speculative-config '...'`` argument to paste into ``vllm serve``."""
    return paste_line(result.speculative_config())


def confidence_lines(report: ConfidenceReport, result: TuningResult | None = None) -> list[str]:
    """One line per anchor: resolved or not, the rule's K and its P(eps-good), the
    contenders, flagged runs; with ``result``, also its pick where it differs."""
    picks = {}
    if result is not None:
        picks = dict(zip(result.decisions["anchor"], result.decisions["selected_k"], strict=True))
    p_of = {(c["anchor"], c["k"]): c["p_eps_good"] for c in report.cells.to_dicts()}
    p_clean = {
        (c["anchor"], c["k"]): c["p_eps_good_without_flagged"] for c in report.cells.to_dicts()
    }
    flagged: dict[int, list[str]] = {}
    for run in report.runs.filter(pl.col("flagged")).to_dicts():
        change = log_change_percent(run["residual"], report.maximize)
        flagged.setdefault(run["anchor"], []).append(
            f"K={run['k']} run {run['run_number']} in {printable(run['source'])}"
            f" ({signed_percent_text(change, 1)} vs its cell's median)"
        )
    lines = []
    for row in report.anchors.to_dicts():
        anchor, k = row["anchor"], row["selected_k"]
        head = f"batch_size={anchor}: {row['status']}"
        head += f", provisional K={k}" if row["provisional"] else f", K={k}"
        head += f" P(eps-good)={probability_text(p_of.get((anchor, k)))}"
        if p_clean.get((anchor, k)) is not None:
            head += f" ({probability_text(p_clean[(anchor, k)])} without the flagged runs)"
        parts = [head]
        if row["status"] == "unresolved":
            parts.append("contenders=" + str(list(row["contenders"])))
            parts += list(row["reasons"])
        parts += list(row["notes"])
        if anchor in flagged:
            parts.append("flagged: " + ", ".join(flagged[anchor]))
        picked = picks.get(anchor)
        if picked is not None and picked != k:
            shown = probability_text(p_of.get((anchor, picked)))
            parts.append(f"the reported pick K={picked} has P(eps-good)={shown}")
        lines.append("; ".join(parts))
    return lines


def context_grid_lines(analysis: ContextAnalysis) -> list[str]:
    """The chosen K per (batch size, context point) as a table: a row per batch size, a
    column per prompt length (decode-time context below it). ``?`` marks an unresolved pick
    (P(eps-good) below the confidence, or a problem at that cell), ``-`` an undecided one."""
    points = analysis.axis.points
    rows: dict[int, dict[int, str]] = {}
    for cell in analysis.grid():
        k = cell["selected_k"]
        mark = {"resolved": "", "unresolved": "?", "undecided": ""}[cell["status"]]
        shown = "-" if k is None else f"{k}{mark}"
        rows.setdefault(cell["batch_size"], {})[cell["prompt_tokens"]] = shown
    head = ["batch size", *(str(point.prompt_tokens) for point in points)]
    sub = ["(context)", *(f"~{point.context_tokens}" for point in points)]
    body = [
        [str(batch), *(cells.get(point.prompt_tokens, "") for point in points)]
        for batch, cells in sorted(rows.items())
    ]
    table = [head, sub, *body]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines = [
        f"context grid: chosen K by batch size (rows) and prompt tokens (columns), from"
        f" {printable(analysis.axis.field)}; ? = unresolved, - = no K"
    ]
    lines += [
        "  " + "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True))
        for row in table
    ]
    return lines


def context_plan_lines(analysis: ContextAnalysis) -> list[str]:
    """One line per context point worth measuring next (where neighbouring picks disagree)."""
    lines = []
    for proposal in analysis.context_points_to_measure():
        low, high = proposal["between"]
        where = ", ".join(
            f"batch size {row['batch_size']} picks K={row['k_below']} at {low} and"
            f" K={row['k_above']} at {high}"
            for row in proposal["batch_sizes"]
        )
        lines.append(
            f"measure next: prompt length {proposal['prompt_tokens']} tokens, between {low}"
            f" and {high} ({where}): tune-spec-k plan --context-lengths"
            f" {proposal['prompt_tokens']} with the sweep's other settings"
        )
    return lines


def context_export_lines(analysis: ContextAnalysis) -> list[str]:
    """Per context format of the registry, the paste-ready config on one line (the default
    context mix: the shortest context), or why there is none; ``tune-spec-k export --format F``
    gives the loss table and the options."""
    from lib.deploy.registry import grid_exports

    answer = analysis.answer or analysis.pooled
    shared_settings = answer.result.speculative_config()
    lines = []
    for name, exported, problems in grid_exports(analysis):
        if exported is None:
            reasons = "; ".join(problem.message for problem in problems)
            lines.append(f"{name}: none ({printable(reasons)})")
            continue
        lines.append(f"{name}: {_paste_ready(shared_settings, exported.config)}")
        summary = getattr(exported, "summary", None)
        if summary is not None:
            lines.append("  " + summary.line(name, exported.mix))  # type: ignore[attr-defined]
    return lines


def _paste_ready(shared: Mapping[str, Any], config: Mapping[str, Any]) -> str:
    """A context format's config as the ``--speculative-config '...'`` argument to paste: the
    draft settings every speculative run shared (method, model, ...; ``"<method>"`` where the
    sweep recorded none), then the format's own fields, shell-quoted."""
    own = ("num_speculative_tokens", "num_speculative_tokens_per_batch_size")
    merged = {key: value for key, value in shared.items() if key not in own}
    merged.update(config)
    return paste_line(merged)


def switch_point_lines(switch_points: SwitchPoints) -> list[str]:
    """The switch points between anchors and the interpolated schedule's expected gain."""
    if switch_points.switches.is_empty():
        return ["switch points: none (the same K at every anchor)"]
    lines = ["switch points (each K's log speed-up interpolated linearly in log batch size):"]
    for row in switch_points.switches.to_dicts():
        crossing = (
            "not interpolable"
            if not row["interpolable"]
            else f"curves cross at {row['crossover']:.1f}"
            if row["crossover"] is not None
            else "curves do not cross between the anchors"
        )
        line = (
            f"  K={row['from_k']} -> K={row['to_k']} between {row['lower_anchor']} and"
            f" {row['upper_anchor']}: {crossing}; switch at {row['switch_at']}"
            f" (step schedule: {row['step_switch_at']})"
        )
        if row["changed_batch_sizes"]:
            line += (
                f", {signed_percent_text(row['gain_percent'])} expected on the"
                f" {row['changed_batch_sizes']} batch size(s) that change"
            )
        if row["note"]:
            line += f"; {row['note']}"
        lines.append(line)
    lines.append(
        f"  interpolated schedule {switch_points.schedule.json_text()}: expected"
        f" {signed_percent_text(switch_points.mean_gain_percent)} over the step schedule on"
        " average over batch"
        f" sizes (at most {signed_percent_text(switch_points.max_gain_percent)})"
    )
    return lines


def measurement_plan_lines(plan: MeasurementPlan) -> list[str]:
    """The measurement plan for a person, grouped by anchor."""
    if plan.empty:
        return [
            "measurement plan: nothing to measure (every anchor is resolved and"
            " neighbouring picks agree within the tie tolerance)"
        ]
    lines = [
        f"measurement plan (confidence {plan.confidence:g}, tie tolerance"
        f" {plan.tolerance * 100:g}%):"
    ]
    if plan.ordered_by is not None:
        lines.append(f"  {plan.ordered_by}")
    for (anchor,), group in plan.reruns.group_by("batch_size", maintain_order=True):
        lines.append(f"  batch_size={anchor}:")
        for row in group.to_dicts():
            if row["more_runs"]:
                lines.append(
                    f"    K={row['k']}: {row['more_runs']} more run(s)"
                    f" ({row['runs']} -> {row['target_runs']}){new_servers_text(row)}:"
                    f" {row['reason']}"
                )
            else:
                lines.append(f"    K={row['k']}: no more runs: {row['reason']}")
    for row in plan.new_anchors.to_dicts():
        lines.append(
            f"  new anchor batch_size={row['batch_size']}: measure K={list(row['ks'])},"
            f" {row['runs_per_k']} run(s) each: {row['reason']}"
        )
    return lines


def effective_batch_lines(found: EffectiveBatch) -> list[str]:
    """The effective batch per cell, a line per anchor (K and the median requests in flight,
    ``*`` after one below 0.9 x its anchor or whose runs spread); none when the records lack
    the fields (a note says so)."""
    from lib.effective_batch import is_below_anchor, is_spread

    if found.missing:
        return []
    lines = [
        "effective batch (requests in flight, request_throughput x mean_e2el_ms / 1000; vLLM"
        " looks K up by the requests it schedules; * = below 0.9 x the anchor or spread"
        " across runs):"
    ]
    for (anchor,), group in found.cells.group_by("anchor", maintain_order=True):
        cells = [
            f"K={k} {objective_text(value)}"
            + ("*" if is_below_anchor(value, anchor) or is_spread(spread) else "")
            for k, value, spread in group.select("k", "effective_batch", "spread").rows()
        ]
        lines.append(f"  batch_size={anchor}: " + ", ".join(cells))
    return lines


# --------------------------------------------------------------------------- the loop


def sweep_plan_lines(plan: SweepPlan, plan_dir: str) -> list[str]:
    """What a sweep plan runs: a summary, a line per sweep, the notes, then each command."""
    lines = [f"{plan.kind} plan: {plan.summary_line()}"]
    for step in plan.steps:
        lines.append(
            f"  {step.name}: {_step_servers(plan, step)} x {_bench_cells(step)} x"
            f" {_step_runs(step)} run(s) ({_step_seeds(step)}) ->"
            f" {printable(f'{step.results_dir}/{step.experiment_name}')}: {step.purpose}"
        )
    lines += [f"  note: {note}" for note in plan.notes]
    return lines + plan.commands(plan_dir)


def _step_runs(step: SweepStep) -> str:
    """A sweep's runs per cell: one number, or the range where its anchors differ (a lean
    design's probe repeats some anchors only)."""
    counts = {len(seeds) for seeds in step.seeds().values()}
    if len(counts) > 1:
        return f"{min(counts)}-{max(counts)}"
    return str(step.runs_per_cell)


def _step_servers(plan: SweepPlan, step: SweepStep) -> str:
    """The servers of a sweep: its serve combos; with replicas, each configuration once (in
    the order of the first block) and the replicas' serve seeds."""
    from lib.loop.plan.tuning import seeds_text

    values = plan.design.replica_values
    if not values:
        return f"servers [{', '.join(step.serve_params)}]"
    configurations = dict.fromkeys(configuration_of(name) for name in step.serve_params)
    return (
        f"servers [{', '.join(configurations)}] x {len(values)} replica(s) (serve"
        f" {seeds_text(values)}, shuffled)"
    )


def _bench_cells(step: SweepStep) -> str:
    """What every server of a sweep measures: ``concurrency [..]`` (and ``x prompt tokens
    [..]`` when the whole product of the two is measured), else the (concurrency, prompt
    tokens) pairs themselves, e.g. ``cells [1 x 1024, 8 x 16384]``: a follow-up planning
    some cells at some lengths would otherwise read as every anchor at every length. Sorted
    by number."""
    pairs = sorted(
        {(v["max_concurrency"], v.get(RANDOM_PROMPT_LENGTH)) for v in step.bench_params.values()},
        key=lambda pair: (pair[0], pair[1] or 0),
    )
    anchors = sorted({anchor for anchor, _ in pairs})
    lengths = sorted({length for _, length in pairs if length is not None})
    concurrency = f"concurrency [{', '.join(str(a) for a in anchors)}]"
    if not lengths:
        return concurrency
    if len(pairs) == len(anchors) * len(lengths):
        return f"{concurrency} x prompt tokens [{', '.join(str(n) for n in lengths)}]"
    return "cells [" + ", ".join(f"{a} x {n} tokens" for a, n in pairs) + "]"


def _step_seeds(step: SweepStep) -> str:
    """The seeds of a sweep's repeats: one range for all its anchors, or per anchor where
    they differ (a follow-up continues each cell's own)."""
    from lib.loop.plan.tuning import seeds_text

    anchors_of: dict[tuple[int, ...], list[str]] = {}
    for anchor, seeds in step.seeds().items():
        anchors_of.setdefault(seeds, []).append(str(anchor))
    if len(anchors_of) == 1:
        return seeds_text(next(iter(anchors_of)))
    return "; ".join(
        f"{seeds_text(seeds)} at concurrency {', '.join(anchors)}"
        for seeds, anchors in anchors_of.items()
    )


def check_lines(report: CheckReport) -> list[str]:
    """The check's verdict per anchor (per context point: with a context schedule, at the
    point's decode-time context), its numbers and reasons, and a closing line on a loss."""
    from lib.loop.check.arms import schedule_text
    from lib.loop.check.judge import REPORTED_OVERHEAD

    under_test = report.context_schedule or report.schedule or NO_SCHEDULE
    lines = [f"schedule under test: {schedule_text(under_test)}"]
    if report.deployment_summary is not None:
        lines.append(report.deployment_summary)
    if report.one_prompt_length is not None:
        lines.append(report.one_prompt_length)
    if report.traffic is not None:
        lines.append(report.traffic.line())
    lines += _verdict_lines(report.verdicts)
    for context in report.contexts:
        where = f"at {context.prompt_tokens} prompt tokens ({report.context_field})"
        if context.context_tokens is not None:
            where += f", decode-time context {context.context_tokens}"
        lines.append(f"{where}:")
        lines += [f"  {line}" for line in _verdict_lines(context.verdicts)]
    losses = [
        f"{row['anchor']} at {context.prompt_tokens} tokens"
        for context in report.contexts
        for row in context.verdicts.to_dicts()
        if row["verdict"] == "loss"
    ] or [str(anchor) for anchor in report.losses]
    if losses:
        lines.append(
            f"LOSS at batch size(s) [{', '.join(losses)}]: the dynamic schedule is confidently"
            f" worse than an alternative by more than"
            f" {report.settings.tuning.relative_tolerance:.0%}"
            f" ({REPORTED_OVERHEAD}, for a schedule-enabled engine at K=0)"
        )
    if report.assumption is not None:
        lines.append(f"assumes: {report.assumption}")
    return lines


def _verdict_lines(verdicts: pl.DataFrame) -> list[str]:
    """A line per anchor of a check's verdicts (its numbers), then its reasons, indented."""
    lines = []
    for row in verdicts.to_dicts():
        parts = [
            f"batch_size={row['anchor']}: {row['verdict'].upper()}",
            f"dynamic K={row['dynamic_k']} median={objective_text(row['dynamic_median'])}",
        ]
        if row["best_static"] is not None:
            change = signed_percent_text(row["vs_best_static_percent"])
            parts.append(
                f"vs best static ({row['best_static']}) {change}"
                f" P(at least as good)={probability_text(row['p_vs_best_static'])}"
            )
        if row["k0_arm"] is not None:
            parts.append(
                f"vs {row['k0_arm']} {signed_percent_text(row['vs_k0_percent'])}"
                f" P(at least as good)={probability_text(row['p_vs_k0'])}"
            )
        if row["same_k_arm"] is not None:
            overhead = signed_percent_text(row["overhead_percent"])
            parts.append(f"Dynamic SD overhead vs {row['same_k_arm']}: {overhead}")
        lines.append("; ".join(parts))
        lines += [f"  {reason}" for reason in row["reasons"]]
    return lines


def diff_lines(report: DiffReport) -> list[str]:
    """Both schedules, a line per batch size with its reasons, and the verdict."""
    settings = report.settings
    lines = [
        f"A: {report.a.schedule.json_text()}  ({printable(report.a.label)})",
        f"B: {report.b.schedule.json_text()}  ({printable(report.b.label)})",
        f"objective: {report.a.objective} ({report.a.direction})",
    ]
    for row in report.rows.to_dicts():
        head = f"batch_size={row['batch_size']}: K {row['k_a']} -> {row['k_b']}"
        if row["objective_change_percent"] is not None:
            head += (
                f"; {report.a.objective} {objective_text(row['objective_a'])} ->"
                f" {objective_text(row['objective_b'])}"
                f" ({signed_percent_text(row['objective_change_percent'])}"
            )
            if row["change_low_percent"] is not None:
                head += (
                    f", {settings.confidence:.0%} interval"
                    f" [{signed_percent_text(row['change_low_percent'])},"
                    f" {signed_percent_text(row['change_high_percent'])}]"
                )
            head += ")"
        head += "; MATERIAL" if row["material"] else "; same"
        lines.append(head)
        lines += [f"  {reason}" for reason in row["reasons"]]
    if report.context_rows is not None:
        lines += _context_diff_lines(report)
    verdict = "materially different" if report.material else "no material difference"
    lines.append(
        f"{verdict} (thresholds: K loss {settings.max_k_loss:.1%}, objective change"
        f" {settings.max_objective_change:.1%}, confidence {settings.confidence:g})"
    )
    return lines


def _context_diff_lines(report: DiffReport) -> list[str]:
    """The grid comparison: which side has a grid, a line per cell both hold, and the cells
    without a counterpart, grouped by side and prompt length."""
    assert report.context_rows is not None
    grids = {name: side.grid for name, side in (("A", report.a), ("B", report.b))}
    lines = [
        "context grid, cell by cell (the batch rows above compare the batch-only answers):"
        + "".join(
            f" {name} "
            + (
                "batch-only"
                if grid is None
                else "prompt lengths " + ", ".join(str(p.prompt_tokens) for p in grid.points)
            )
            + (";" if name == "A" else "")
            for name, grid in grids.items()
        )
    ]
    alone: dict[tuple[str, int], list[int]] = {}
    for row in report.context_rows.to_dicts():
        if row["prompt_tokens_a"] is None or row["prompt_tokens_b"] is None:
            name = "A" if row["prompt_tokens_a"] is not None else "B"
            prompt = row["prompt_tokens_a"] or row["prompt_tokens_b"]
            alone.setdefault((name, prompt), []).append(row["batch_size"])
            continue
        prompt = row["prompt_tokens_a"]
        if row["prompt_tokens_b"] != prompt:
            prompt = f"{prompt} (B {row['prompt_tokens_b']})"
        lines.append(
            f"batch_size={row['batch_size']}, prompt {prompt} tokens: K {row['k_a']} ->"
            f" {row['k_b']}" + ("; MATERIAL" if row["material"] else "; same")
        )
        lines += [f"  {reason}" for reason in row["reasons"]]
    for (name, prompt), batches in sorted(alone.items()):
        other = "B" if name == "A" else "A"
        lines.append(
            f"no counterpart in {other}: {name}'s cells at prompt {prompt} tokens, batch sizes"
            f" {', '.join(map(str, batches))}: not compared"
        )
    return lines


# --------------------------------------------------------------------------- HTML


def html_list(lines: Sequence[str]) -> str:
    """Lines as an HTML list, escaped: field and file names such as ``mean_tpot_ms`` must not
    turn into Markdown emphasis.

    >>> html_list(["a < b", "c"])
    '<ul><li>a &lt; b</li><li>c</li></ul>'
    """
    items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    return f"<ul>{items}</ul>"


def text_block_html(lines: Sequence[str]) -> str:
    """Lines as preformatted text that wraps (the CLI's indented output, escaped)."""
    text = html.escape("\n".join(lines))
    return f'<pre style="white-space: pre-wrap; font-size: 0.85em">{text}</pre>'


def problem_list_html(problems: Sequence[Problem]) -> str:
    """Problems as an HTML list of the CLI's one-line descriptions."""
    return html_list([problem.describe() for problem in problems])
