"""What the dashboard says besides the verdict (lib/deploy/verdict.py): the problems grouped by
rule with the sidebar control that changes the outcome, and the controls' names and help.

Every sentence here is built from the current result and settings, so what the page states is
true for them: with errors there is no "resolved", no "nothing to measure" and no config; a
pick whose P(eps-good) is below the confidence is named; a problem names the control of the
app (its label), never the CLI flag the same setting has on the command line.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from lib.analysis import Analysis
from lib.flags import flag_name
from lib.problems import Problem, Severity
from lib.settings import (
    DEFAULT_K_VAR,
    GLOBAL_K_VAR,
    HEALTH_FIELDS,
    PROMPT_LENGTH_FIELDS,
    REPEAT_SEED,
    Fields,
    Options,
    Settings,
)
from lib.sweeps import Sweep

__all__ = [
    "CONTROL_HELP",
    "CONTROL_LABELS",
    "DEFAULT_EXPERIMENT",
    "Fix",
    "ProblemGroup",
    "default_experiment",
    "fixable_values",
    "in_app_words",
    "objective_choices",
    "pick_confidence",
    "problem_groups",
]

#: The experiment README's quick start analyses: the dashboard opens on it where it is listed.
DEFAULT_EXPERIMENT = "sonnet-like"

#: The sidebar's label of each setting, by its field name in Fields, Settings or Options.
CONTROL_LABELS: dict[str, str] = {
    "batch_size_var": "Batch-size field",
    "replica_var": "Server replica marker (serve parameter)",
    "k_var": "K is recorded as",
    "allow_mixed_global_k": "Allow a global K that differs between runs",
    "allow_unmeasured_k": "Judge a K missing at some anchors (unimodal in K)",
    "objective": "Objective",
    "direction": "Better is",
    "uncertainty_penalty": "MAD penalty (robust sigmas)",
    "relative_tolerance": "Tie tolerance (relative)",
    "max_objective_relative_mad": "Noise threshold (relative MAD)",
    "min_runs": "Minimum runs per cell",
    "acceptance": "Acceptance metric",
    "max_acceptance_relative_mad": "Acceptance noise threshold (relative MAD)",
    "strict_acceptance_stability": "Unstable acceptance is an error (strict)",
    "policy": "Decision rule",
    "confidence": "Confidence a pick needs (P(eps-good))",
    "server_cv": "Servers differ by (assumed without replicas)",
    "run_cv": "Runs differ by (assumed where no cell has two runs)",
    "interpolated_schedule": "Deploy the interpolated schedule (switch between anchors)",
    "context_var": "Prompt-length field (auto, none, or a field)",
    "context_mix": "Context mix (prompt:weight, ...)",
}

#: What each control does, shown when the pointer rests on it.
CONTROL_HELP: dict[str, str] = {
    "experiment": "The experiment folder (a `vllm bench sweep serve` output) to analyse.",
    "batch_size_var": "The record field holding each run's batch size (the anchor).",
    "replica_var": "The serve parameter whose KEY=VALUE part of a serve combo's name marks a"
    " server replica (tune-spec-k plan --server-replicas writes k3-seed=1): such combos are"
    " one configuration on several server starts, and their spread measures how much servers"
    " differ.",
    "k_var": "Where a record keeps K: the seed's one-range schedule, or"
    " num_speculative_tokens for sweeps of static-K servers.",
    "allow_mixed_global_k": "Sweeps of one-range schedules may start each server with its own"
    " num_speculative_tokens; allow it, and deploy the largest (static-K sweeps read as"
    " num_speculative_tokens need not).",
    "allow_unmeasured_k": "A bracketed sweep (tune-spec-k plan --first-ks) measures some K only"
    " at some anchors: judge each missing one, ruled out where the K measured there show it"
    " cannot be the best (throughput unimodal in K), else a warning that keeps the verdict"
    " from ready. Off, such a sweep is refused, as the seed refuses it.",
    "objective": "The measured field the schedule optimises (numeric fields that vary).",
    "direction": "Whether a larger value of the objective is better (throughput) or a"
    " smaller one (latency); usual: the direction README's table of objectives gives the"
    " field, larger for a field it does not list. The CLI's default is maximize: the"
    " command line shown under “Decisions” gives --objective-direction.",
    "uncertainty_penalty": "The seed ranks each K by its median less this many robust"
    " sigmas (1.4826 x MAD): noisier K are penalised.",
    "relative_tolerance": "K within this fraction of the best score tie; the smallest tied K wins.",
    "max_objective_relative_mad": "Cells whose runs disagree more than this (MAD / median)"
    " are rejected as too noisy to rank.",
    "min_runs": "Cells with fewer usable runs are rejected: one run says nothing about noise.",
    "acceptance": "An acceptance field to check for stability (optional).",
    "max_acceptance_relative_mad": "Acceptance that varies more than this between runs is"
    " unstable.",
    "strict_acceptance_stability": "Reject cells with unstable acceptance instead of warning.",
    "policy": "The seed ranks by its conservative score; the confident rule picks the"
    " smallest K whose P(eps-good) reaches the confidence.",
    "confidence": "How sure a pick must be: P(the K is within the tie tolerance of the best).",
    "server_cv": "Without server replicas, how much two server starts of one configuration are"
    " assumed to differ (relative sd of a server's offset): every P(eps-good) includes it."
    " With replicas it is measured instead.",
    "run_cv": "Where no cell of the sweep has two runs, how much runs of one cell are assumed"
    " to differ (relative sd of one run): P(eps-good) there rests on it. Measured where cells"
    " have replicate runs, and borrowed from them by single-run batch sizes; 0 assumes"
    " nothing.",
    "interpolated_schedule": "Switch K between anchors where the interpolated curves"
    " cross, instead of at the upper anchor.",
    "compare": "Tune another experiment with the same settings and compare the picks.",
    "context_var": "The record field holding the prompt length the sweep varied: auto finds"
    " random_input_len (or the measured mean prompt); none tunes the sweep as one context.",
    "context_mix": "The traffic's prompt lengths and weights, e.g. 512:0.7,8192:0.3: the"
    " batch-only export and the heatmap's losses are for it (empty: the shortest context).",
    "context_point": "Which prompt length the schedule, the headline chart and the sections"
    " below show.",
    "context_format": "The engine format of the (batch x context) schedule to export.",
}

#: Record fields that count or configure a run, never an objective.
_NOT_OBJECTIVES = frozenset(
    {
        *HEALTH_FIELDS,
        "run_number",
        "request_rate",
        "burstiness",
        "max_concurrency",
        REPEAT_SEED,
        # The prompt length a sweep varies is a second axis, not a measurement.
        *(name for required, added in PROMPT_LENGTH_FIELDS for name in (*required, *added)),
        "random_output_len",
        "prefix_repetition_output_len",
    }
)


def default_experiment(experiments: Mapping[str, Path]) -> str:
    """:data:`DEFAULT_EXPERIMENT` when listed, else the first experiment.

    >>> default_experiment({"a": Path("a"), "sonnet-like": Path("s")})
    'sonnet-like'
    >>> default_experiment({"a": Path("a")})
    'a'
    """
    return DEFAULT_EXPERIMENT if DEFAULT_EXPERIMENT in experiments else next(iter(experiments))


def objective_choices(sweep: Sweep, known: Mapping[str, Any], fields: Fields) -> list[str]:
    """The fields that can be objectives: numeric record fields with at least two different
    values (a field measured nowhere, such as ``request_goodput`` without ``--goodput``, or one
    that is the same in every run, such as a bench parameter, cannot rank K), less the run
    counters and the anchor and K fields. ``known`` objectives come first, in their order.
    """
    excluded = _NOT_OBJECTIVES | {fields.batch_size_var, fields.k_var, GLOBAL_K_VAR}
    named = [
        name
        for name in sweep.metrics
        if name not in excluded and not name.startswith(("speculative_config", "record."))
    ]
    # One query for every field, not one a field: this runs at each first load of the app.
    distinct = (
        sweep.runs.select(pl.col(name).drop_nulls().n_unique() for name in named).row(0)
        if named
        else ()
    )
    candidates = [name for name, count in zip(named, distinct, strict=True) if count > 1]
    first = [name for name in known if name in candidates]
    return first + sorted(set(candidates) - set(first))


def in_app_words(text: str) -> str:
    """``text`` with every command-line flag of a setting replaced by its control's label.

    >>> in_app_words("expected >= 3 (--min-runs)")
    'expected >= 3 (“Minimum runs per cell”)'
    """
    return _FLAG_PATTERN.sub(lambda match: f"“{_LABEL_OF_FLAG[match.group(0)]}”", text)


def _labels_by_flag() -> dict[str, str]:
    labels = {}
    for cls in (Fields, Settings, Options):
        for field in dataclasses.fields(cls):
            if field.name in CONTROL_LABELS and field.metadata:
                labels[flag_name(cls, field.name)] = CONTROL_LABELS[field.name]
    return labels


_LABEL_OF_FLAG = _labels_by_flag()
# Longest first, and never a prefix of a longer flag (--k-var is not --k-var-x).
_FLAG_PATTERN = re.compile(
    "|".join(re.escape(flag) for flag in sorted(_LABEL_OF_FLAG, key=len, reverse=True))
    + r"(?![\w-])"
)


# --------------------------------------------------------------------------- problems


@dataclass(frozen=True)
class Fix:
    """A one-click change of one control that changes the outcome."""

    control: str  # a key of CONTROL_LABELS
    value: Any
    label: str  # the button's text


def fixable_values(settings: Settings) -> dict[str, Any]:
    """The settings a :class:`Fix` may set that the app builds from one state, by control:
    their values in ``settings``. The K field, which a fix may set too, has a state of its own:
    a new K field reads the sweep again, and the other controls must not cause that.

    >>> fixable_values(Settings(min_runs=1))["min_runs"]
    1
    """
    return {
        "allow_mixed_global_k": settings.allow_mixed_global_k,
        "allow_unmeasured_k": settings.allow_unmeasured_k,
        "min_runs": settings.min_runs,
        "max_objective_relative_mad": settings.max_objective_relative_mad,
        "strict_acceptance_stability": settings.strict_acceptance_stability,
    }


@dataclass(frozen=True)
class ProblemGroup:
    """The problems of one rule: how many, one sentence naming the control that changes the
    outcome, and the fix where one click makes it."""

    rule: str
    severity: Severity
    problems: tuple[Problem, ...]
    sentence: str
    fix: Fix | None = None


_SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.NOTE: 2}


def problem_groups(
    problems: tuple[Problem, ...], settings: Settings, fields: Fields
) -> list[ProblemGroup]:
    """``problems`` grouped by (severity, rule): errors first, then the largest groups.

    A rule the sidebar can change gets a sentence that names the control and what to set
    (:func:`_explained`); any other rule, its first message in the app's words with the count.
    """
    grouped: dict[tuple[Severity, str], list[Problem]] = {}
    for problem in problems:
        grouped.setdefault((problem.severity, problem.rule), []).append(problem)
    groups = [
        _explained(rule, severity, tuple(members), settings, fields)
        for (severity, rule), members in grouped.items()
    ]
    return sorted(groups, key=lambda group: (_SEVERITY_ORDER[group.severity], -len(group.problems)))


def _cells(count: int) -> str:
    return f"{count} cell{'s' if count != 1 else ''}"


def _explained(
    rule: str,
    severity: Severity,
    problems: tuple[Problem, ...],
    settings: Settings,
    fields: Fields,
) -> ProblemGroup:
    count = len(problems)
    label = CONTROL_LABELS
    if rule == "too-few-runs":
        runs = sorted({int(problem.value or 0) for problem in problems})
        lowest = max(1, runs[0])
        shown = " or ".join(str(number) for number in runs[:3])
        return ProblemGroup(
            rule,
            severity,
            problems,
            f"{_cells(count)} {'has' if count == 1 else 'have'} {shown} run(s), fewer than"
            f" “{label['min_runs']}” ({settings.min_runs}): set it to {lowest} for a"
            " provisional schedule, or rerun those cells.",
            Fix("min_runs", lowest, f"Set “{label['min_runs']}” to {lowest}"),
        )
    if rule == "noisy-objective":
        largest = max(float(problem.value or 0) for problem in problems)
        raised = math.ceil(largest * 100) / 100
        fix = (
            Fix(
                "max_objective_relative_mad",
                raised,
                f"Set “{label['max_objective_relative_mad']}” to {raised:g}",
            )
            if raised <= 1
            else None
        )
        return ProblemGroup(
            rule,
            severity,
            problems,
            f"The runs of {_cells(count)} disagree more than"
            f" “{label['max_objective_relative_mad']}” allows"
            f" ({settings.max_objective_relative_mad:g}; the largest is {largest:.3f}): raise it"
            " to rank them anyway, or rerun them.",
            fix,
        )
    if rule == "mixed-global-k" and severity is Severity.ERROR:
        return ProblemGroup(
            rule,
            severity,
            problems,
            "The global K (num_speculative_tokens) differs between runs, as in a sweep of"
            f" static-K servers: tick “{label['allow_mixed_global_k']}” to compare them (the"
            " engine is deployed with the largest).",
            Fix("allow_mixed_global_k", True, f"Tick “{label['allow_mixed_global_k']}”"),
        )
    if rule == "unequal-k-sets" and severity is Severity.ERROR:
        return ProblemGroup(
            rule,
            severity,
            problems,
            f"{count} anchor{'s' if count != 1 else ''} lack K measured at other anchors, as a"
            f" bracketed sweep leaves them: tick “{label['allow_unmeasured_k']}” to judge each"
            " missing one (ruled out where the K measured there show it cannot be the best;"
            " else it keeps the verdict from ready), or measure them.",
            Fix("allow_unmeasured_k", True, f"Tick “{label['allow_unmeasured_k']}”"),
        )
    if rule in ("missing-k", "invalid-k", "pooled-servers"):
        other = GLOBAL_K_VAR if fields.k_var == DEFAULT_K_VAR else DEFAULT_K_VAR
        shown_other = "num_speculative_tokens" if other == GLOBAL_K_VAR else "a one-range schedule"
        return ProblemGroup(
            rule,
            severity,
            problems,
            f"{count} x {in_app_words(problems[0].message)}. If each server ran one K, set"
            f" “{label['k_var']}” to {shown_other}.",
            Fix("k_var", other, f"Set “{label['k_var']}” to {shown_other}"),
        )
    if rule == "unstable-acceptance" and severity is Severity.ERROR:
        return ProblemGroup(
            rule,
            severity,
            problems,
            f"{_cells(count)} {'has' if count == 1 else 'have'} unstable acceptance: untick"
            f" “{label['strict_acceptance_stability']}” to warn instead, or raise"
            f" “{label['max_acceptance_relative_mad']}”.",
            Fix(
                "strict_acceptance_stability",
                False,
                f"Untick “{label['strict_acceptance_stability']}”",
            ),
        )
    if rule == "missing-objective":
        return ProblemGroup(
            rule,
            severity,
            problems,
            f"{count} x {in_app_words(problems[0].message)}: choose another"
            f" “{label['objective']}”.",
        )
    if rule == "missing-anchor":
        return ProblemGroup(
            rule,
            severity,
            problems,
            f"{count} x {in_app_words(problems[0].message)}: check"
            f" “{label['batch_size_var']}” ({fields.batch_size_var}).",
        )
    first = in_app_words(problems[0].message)
    return ProblemGroup(rule, severity, problems, first if count == 1 else f"{count} x {first}")


# --------------------------------------------------------------------------- verdict


def pick_confidence(analysis: Analysis) -> pl.DataFrame:
    """One row per decided anchor: ``anchor``, ``selected_k``, ``p_eps_good`` (the pick's
    P(eps-good); null when the noise cannot be estimated or there is no report) and
    ``below_confidence`` (true when that P is below the confidence or unknown)."""
    decisions = analysis.result.decisions.select("anchor", "selected_k").drop_nulls()
    report = analysis.report
    if report is None:
        probabilities = pl.DataFrame(
            schema={"anchor": pl.Int64, "selected_k": pl.Int64, "p_eps_good": pl.Float64}
        )
    else:
        probabilities = report.cells.select("anchor", pl.col("k").alias("selected_k"), "p_eps_good")
    confidence = report.settings.confidence if report is not None else 1.0
    return decisions.join(probabilities, on=["anchor", "selected_k"], how="left").with_columns(
        below_confidence=pl.col("p_eps_good").is_null() | (pl.col("p_eps_good") < confidence)
    )
