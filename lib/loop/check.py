"""``tune-spec-k check``: is the deployed schedule at least as good as the alternatives?

Input: a sweep in which the tuned schedule was served as a dynamic config next to static-K
servers and, ideally, a server without speculation (``tune-spec-k plan --validate`` writes
it). Each run is put in an *arm* by its ``speculative_config``:

============== =========================================================================
arm            the run's server
============== =========================================================================
``dynamic``    the schedule under test (``--schedule``), or else the one multi-range schedule
               (a batch schedule, or a context schedule setting more than one K)
``static K=k`` ``num_speculative_tokens: k`` without a schedule
``K=k (1-range)`` a one-range schedule ``[[1, hi, k]]``: the seed's sweep design
``other ...``  another schedule
``no speculation`` no ``speculative_config``: K=0 without the Dynamic SD engine
============== =========================================================================

A context schedule (PR #48944's 5-tuples, PR #54801's table pair) runs the K its tables give at
the run's context point's decode-time context (:func:`check_deployment`); the validation sweep
is then judged per context point, or at its one prompt length.

Per anchor, with the confidence machinery of :mod:`lib.confidence` (the arms play the part of
K: pooled log-scale noise, seeded Monte-Carlo), three probabilities that the dynamic arm is
within the relative tolerance of the best:

- among the static arms with K > 0 (``vs_best_static``),
- against the K=0 baseline (``vs_k0``): the server without speculation where there is one,
  else the one-range K=0 arm,
- among every arm (``overall``).

Verdict per anchor: **ok** when both comparisons reach the confidence; **loss** when either
is at most ``1 - confidence`` (the dynamic server is confidently worse by more than the
tolerance); **inconclusive** otherwise. A missing comparison is stated, not guessed.

Dynamic SD has a cost of its own: vLLM issue #49548 measured +6.6 % TPOT at concurrency 2 and
+21.6 % at 189 for a schedule-enabled engine at K=0 against a plain server. Where the schedule
runs K=k and a static K=k (or, for K=0, a server without speculation) was measured, the report
gives that overhead directly.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from lib.confidence import ConfidenceSettings, ServerNoise, assess
from lib.context import ContextAxis, ContextPoint, find_context_axis, sole_context_point
from lib.deploy.constraints import cells_past_ceiling, check_ceiling
from lib.deploy.decisions import Decisions
from lib.deploy.deployed import (
    CONTEXT_SCHEDULE_FORMATS,
    ContextSchedule,
    context_schedule_key,
    context_schedule_of,
)
from lib.deploy.formats.vllm_pr_54801 import SEQ_LEN_KEY
from lib.deploy.formats.vllm_rfc_48944 import RFC_48944_KEY
from lib.deploy.registry import ceiling_for
from lib.deploy.tuning import Deployment, sweep_engine_facts
from lib.files import read_json
from lib.keys import MISSING, lookup, parse_json_string
from lib.numbers import percent_text
from lib.problems import Problem, Severity, errors, show_value
from lib.schedule import NO_SCHEDULE, Schedule, tune
from lib.settings import (
    GLOBAL_K_VAR,
    ContextSettings,
    DeploySettings,
    Fields,
    Options,
    Settings,
)
from lib.sweeps import Sweep, load_experiment

__all__ = [
    "ARM_SCHEMA",
    "VERDICT_SCHEMA",
    "CheckReport",
    "CheckSettings",
    "UnderTest",
    "check_deployment",
    "context_schedule_file",
    "speculative_config_of",
]

DYNAMIC = "dynamic"
NO_SPECULATION = "no speculation"
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
DRAFTS_FIELD = "spec_decode_num_drafts"
#: A schedule under test: one K per batch size, or a K per (batch size, context).
UnderTest = Schedule | ContextSchedule
#: The cost of the Dynamic SD engine reported in vLLM issue #49548 (TPOT, at K=0).
REPORTED_OVERHEAD = "vLLM issue #49548 measured +6.6% TPOT at concurrency 2 and +21.6% at 189"

#: One row per (anchor, arm) with enough runs.
ARM_SCHEMA = pl.Schema(
    {
        "anchor": pl.Int64(),
        "arm": pl.Utf8(),
        "kind": pl.Utf8(),  # dynamic / static / one-range / plain
        "k": pl.Int64(),  # the K the arm runs at this anchor
        "num_runs": pl.Int64(),
        "median": pl.Float64(),
        "relative_mad": pl.Float64(),
        "p_eps_good": pl.Float64(),  # among every arm at the anchor; null without noise estimate
    }
)

#: One row per anchor: the verdict and its numbers.
VERDICT_SCHEMA = pl.Schema(
    {
        "anchor": pl.Int64(),
        "verdict": pl.Utf8(),  # ok / loss / inconclusive
        "dynamic_k": pl.Int64(),
        "dynamic_median": pl.Float64(),
        "best_static": pl.Utf8(),
        "vs_best_static_percent": pl.Float64(),  # + means the dynamic arm is better
        "p_vs_best_static": pl.Float64(),
        "k0_arm": pl.Utf8(),
        "vs_k0_percent": pl.Float64(),
        "p_vs_k0": pl.Float64(),
        "p_overall": pl.Float64(),
        "same_k_arm": pl.Utf8(),  # the static arm running the dynamic arm's K here
        # How much worse the dynamic arm is than that arm (see _overhead); + means worse.
        "overhead_percent": pl.Float64(),
        "reasons": pl.List(pl.Utf8),
    }
)


@dataclass(frozen=True)
class CheckSettings:
    """How the arms are compared: the tuning settings the check uses (objective, direction,
    minimum runs, relative tolerance), the confidence and seed, and the batch-size field."""

    tuning: Settings = field(default_factory=Settings)
    options: Options = field(default_factory=Options)
    fields: Fields = field(default_factory=Fields)
    #: Whether and how the validation sweep's prompt length is an axis (judged per context point).
    context: ContextSettings = field(default_factory=ContextSettings)

    @property
    def maximize(self) -> bool:
        return self.tuning.maximize

    @property
    def confidence(self) -> float:
        return self.options.confidence

    def confidence_settings(self) -> ConfidenceSettings:
        # The arms' codes stand in for K but have no order: no shape to doubt (leader_peak).
        return ConfidenceSettings.of(self.options, ordered_k=False)

    def invalid(self) -> list[str]:
        return self.tuning.invalid() + self.confidence_settings().invalid() + self.context.invalid()

    def to_json(self) -> dict[str, Any]:
        return {
            "objective": self.tuning.objective,
            "direction": self.tuning.direction,
            "relative_tolerance": self.tuning.relative_tolerance,
            "confidence": self.options.confidence,
            "min_runs": self.tuning.min_runs,
            "seed": self.options.seed,
            "server_cv": self.options.server_cv,
            "batch_size_var": self.fields.batch_size_var,
        }


@dataclass(frozen=True, eq=False)
class ContextCheck:
    """The arms and verdicts at one context point of a validation sweep that varied the prompt
    length: the schedule under test judged on that point's runs alone. With a context schedule
    under test, ``context_tokens`` is the point's decode-time context, where its K was looked
    up."""

    prompt_tokens: int
    arms: pl.DataFrame
    verdicts: pl.DataFrame
    context_tokens: int | None = None

    def to_json(self) -> dict[str, Any]:
        context = {} if self.context_tokens is None else {"context_tokens": self.context_tokens}
        return {
            "prompt_tokens": self.prompt_tokens,
            **context,
            "anchors": [_finite_row(row) for row in self.verdicts.to_dicts()],
            "arms": [_finite_row(row) for row in self.arms.to_dicts()],
        }


@dataclass(frozen=True, eq=False)
class CheckReport:
    """``arms`` and ``verdicts`` per anchor; with a validation sweep that varied the prompt
    length, or a context schedule under test (``context_schedule``, then ``schedule`` is
    None), those are empty and ``contexts`` holds them per context point (from
    ``context_field``); ``one_prompt_length`` says so where a context schedule was judged at
    the sweep's one prompt length."""

    settings: CheckSettings
    schedule: Schedule | None
    arms: pl.DataFrame
    verdicts: pl.DataFrame
    problems: tuple[Problem, ...]
    #: The capture rule on the schedule under test (:mod:`lib.deploy.constraints`).
    deployment: Mapping[str, Any] | None = None
    #: Its one-line summary, as ``tune`` prints it.
    deployment_summary: str | None = None
    contexts: tuple[ContextCheck, ...] = ()
    context_field: str | None = None
    #: What the check's P rest on about server starts (measured from replicas or assumed).
    servers: ServerNoise | None = None
    context_schedule: ContextSchedule | None = None
    one_prompt_length: str | None = None

    @property
    def assumption(self) -> str | None:
        return None if self.servers is None else self.servers.statement()

    @property
    def errors(self) -> list[Problem]:
        return errors(list(self.problems))

    @property
    def losses(self) -> list[int]:
        """The anchors judged a loss (at any context point)."""
        frames = [self.verdicts, *(context.verdicts for context in self.contexts)]
        return sorted(
            {a for frame in frames for a in frame.filter(pl.col("verdict") == "loss")["anchor"]}
        )

    @property
    def every_verdict(self) -> list[str]:
        """Every verdict, per anchor and, with contexts, per (anchor, context point)."""
        frames = [self.verdicts, *(context.verdicts for context in self.contexts)]
        return [verdict for frame in frames for verdict in frame["verdict"].to_list()]

    def to_json(self) -> dict[str, Any]:
        contexts = (
            {
                "context_field": self.context_field,
                "contexts": [context.to_json() for context in self.contexts],
            }
            if self.contexts
            else {}
        )
        under_test = (
            self.context_schedule.to_json()
            if self.context_schedule is not None
            else (self.schedule or NO_SCHEDULE).to_json()
        )
        return {
            "schedule": under_test,
            "settings": self.settings.to_json(),
            "anchors": [_finite_row(row) for row in self.verdicts.to_dicts()],
            "arms": [_finite_row(row) for row in self.arms.to_dicts()],
            "problems": [p.to_json() for p in self.problems],
            "reported_dynamic_sd_overhead": REPORTED_OVERHEAD,
            "assumption": self.assumption,
            **({"deployment": dict(self.deployment)} if self.deployment is not None else {}),
            **contexts,
            **({"one_prompt_length": self.one_prompt_length} if self.one_prompt_length else {}),
        }

    def to_json_text(self) -> str:
        return json.dumps(self.to_json(), indent=2, allow_nan=False) + "\n"


def _finite_row(row: dict[str, Any]) -> dict[str, Any]:
    return {
        key: (None if isinstance(value, float) and not math.isfinite(value) else value)
        for key, value in row.items()
    }


# --------------------------------------------------------------------------- arms


def _normalized(raw: Any) -> Schedule | None:
    """A valid schedule with its ranges sorted (so equal schedules compare equal), or None."""
    schedule, _ = Schedule.parse(raw) if isinstance(raw, list) else (None, [])
    return None if schedule is None else Schedule(tuple(sorted(schedule)))


def _configs_by_row(sweep: Sweep) -> list[Any]:
    """Each run's ``speculative_config`` (MISSING where absent), read back from its file: the
    loader keeps numbers only, and the arm depends on the schedule list."""
    cache: dict[str, Any] = {}
    configs = []
    for source, position in sweep.runs.select("source", "position").iter_rows():
        if source not in cache:
            # The loader's reader (regular files only, a BOM allowed): it read this file already.
            cache[source] = read_json(sweep.root / source)[0]
        data = cache[source]
        record = data[position] if isinstance(data, list) and position < len(data) else data
        config = lookup(record, "speculative_config") if isinstance(record, dict) else MISSING
        configs.append(parse_json_string(config))
    return configs


def schedule_text(schedule: UnderTest) -> str:
    """A schedule under test as one line of JSON: a batch schedule's ``[[lo, hi, K], ...]``, a
    context schedule's format and tables."""
    if isinstance(schedule, Schedule):
        return schedule.json_text()
    return json.dumps(schedule.to_json())


def _arm_of(
    config: Any, anchor: int | None, context: int | None, dynamic: UnderTest | None
) -> tuple[str, str, int | None]:
    """(arm, kind, K at the anchor) of one run; ``context``: the decode-time context of its
    context point (None: unknown), where a context schedule's K is looked up."""
    if config is MISSING or config is None:
        return NO_SPECULATION, "plain", 0
    if not isinstance(config, dict):
        return "unreadable", "unknown", None
    global_k = config.get("num_speculative_tokens")
    if context_schedule_key(config) is not None:
        return _context_arm_of(config, anchor, context, dynamic)
    schedule = _normalized(parse_json_string(config.get(SCHEDULE_KEY)))
    if schedule is not None:
        k = schedule.k_at(anchor or 1, global_k if isinstance(global_k, int) else None)
        if schedule == dynamic:
            return DYNAMIC, "dynamic", k
        if len(schedule) == 1:
            return f"K={k} (1-range)", "one-range", k
        return "other schedule " + schedule.json_text(), "other", k
    if isinstance(global_k, int) and not isinstance(global_k, bool):
        return f"static K={global_k}", "static", global_k
    return "unreadable", "unknown", None


def _context_arm_of(
    config: dict[str, Any], anchor: int | None, context: int | None, dynamic: UnderTest | None
) -> tuple[str, str, int | None]:
    """(arm, kind, K) of a run served with a context schedule: the dynamic arm when it is the
    one under test, else another schedule; K at the anchor and ``context``, clamped to
    ``num_speculative_tokens`` as the engine clamps its tables (None where the context is
    unknown); unreadable where its tables break their format's rules (no engine ran it)."""
    served, _ = context_schedule_of(config)
    if served is None:
        return "unreadable", "unknown", None
    k = None if context is None else served.k_at(anchor or 1, context)
    global_k = config.get("num_speculative_tokens")
    if k is not None and isinstance(global_k, int) and not isinstance(global_k, bool):
        k = min(k, global_k)
    if served == dynamic:
        return DYNAMIC, "dynamic", k
    return "other schedule " + schedule_text(served), "other", k


def _dynamic_candidates(configs: Sequence[Any]) -> list[UnderTest]:
    """The schedules served that set more than one K: multi-range batch schedules (sorted),
    then context schedules (by their text)."""
    batch: set[Schedule] = set()
    context: dict[str, ContextSchedule] = {}
    for config in configs:
        if not isinstance(config, dict):
            continue
        if context_schedule_key(config) is None:
            served = _normalized(parse_json_string(config.get(SCHEDULE_KEY)))
            if served is not None and len({r[2] for r in served}) > 1:
                batch.add(served)
            continue
        found, _ = context_schedule_of(config)
        if found is not None and len(found.ks) > 1:
            context[schedule_text(found)] = found
    return [*sorted(batch), *(context[text] for text in sorted(context))]


def _row_contexts(
    sweep: Sweep, points: Sequence[ContextPoint], axis: ContextAxis | None
) -> list[int | None]:
    """Each run's decode-time context: its context point's (None where unplaced), or with one
    point, that point's; None everywhere without a point."""
    if axis is not None:
        return [
            None if index is None else axis.points[index].context_tokens
            for index in axis.runs["context_point"].to_list()
        ]
    context = points[0].context_tokens if points else None
    return [context] * sweep.runs.height


# --------------------------------------------------------------------------- the check


def check_deployment(
    path: str | Path,
    settings: CheckSettings,
    schedule: UnderTest | None = None,
    deploy: DeploySettings | None = None,
) -> CheckReport:
    """Read a validation sweep and judge the dynamic arm at every anchor; never raises for bad
    input (problems are in the report; errors mean no verdict can be trusted). The schedule
    under test is also checked by vLLM's capture rule (``deploy``, else the sweep's records,
    else vLLM's defaults): ranges past the ceiling, and anchors of the dynamic arm measured
    past it, are warnings.

    A context schedule under test (or the sweep's one multi-K context schedule) is judged per
    context point at the K it runs there (:func:`_row_contexts`); on a sweep that did not vary
    the prompt length, at its one prompt length (:func:`lib.context.sole_context_point`)."""
    deploy = deploy or DeploySettings()
    problems: list[Problem] = [
        Problem(Severity.ERROR, "invalid-setting", reason)
        for reason in (*settings.invalid(), *deploy.invalid())
    ]
    dynamic: UnderTest | None = schedule
    if isinstance(schedule, Schedule):
        dynamic = _normalized(schedule.to_json())
        if dynamic is None:
            problems.append(
                Problem(
                    Severity.ERROR,
                    "invalid-schedule",
                    "the schedule under test is not a valid vLLM schedule",
                    value=schedule.json_text(),
                    expected="[[lo, hi, K], ...] starting at 1, sorted, no overlap",
                )
            )
    sweep = load_experiment(
        path,
        batch_size_var=settings.fields.batch_size_var,
        k_var=GLOBAL_K_VAR,
        replica_var=settings.fields.replica_var,
    )
    # The loader judges K by the global field; arms are judged here, so its K findings go.
    problems += [p for p in sweep.problems if p.rule not in ("missing-k", "invalid-k")]
    empty = _report(settings, dynamic, ())
    if errors(problems) or sweep.runs.is_empty():
        return dataclasses.replace(empty, problems=tuple(problems))
    # The loader's warnings and notes (a warm-up file ignored, ...) leave the axis as it is.
    axis, found = find_context_axis(sweep, settings.context)
    if axis is None:
        # Why there is none: a note, or an error (a named field no record holds, ...).
        problems += found
        if errors(found):
            return dataclasses.replace(empty, problems=tuple(problems))
    configs = _configs_by_row(sweep)
    if dynamic is None:
        candidates = _dynamic_candidates(configs)
        if len(candidates) > 1:
            problems.append(
                Problem(
                    Severity.ERROR,
                    "ambiguous-dynamic-arm",
                    "the sweep served several multi-range schedules: say which is under test",
                    value="; ".join(schedule_text(s) for s in candidates),
                    expected="--schedule RESULT_JSON",
                )
            )
            return dataclasses.replace(empty, problems=tuple(problems))
        dynamic = candidates[0] if candidates else None
    empty = _report(settings, dynamic, ())
    points = tuple(axis.points) if axis is not None else ()
    context_field = axis.field if axis is not None else None
    one_length = None
    if isinstance(dynamic, ContextSchedule) and axis is None:
        point, label, found = sole_context_point(
            sweep, settings.context, "the context schedule's K depends on it"
        )
        problems += found
        if point is None or errors(found):
            return dataclasses.replace(empty, problems=tuple(problems))
        points, context_field = (point,), label
        one_length = _one_length_statement(point, label)
    contexts = _row_contexts(sweep, points, axis)
    arms = [
        _arm_of(config, anchor, context, dynamic)
        for config, anchor, context in zip(
            configs, sweep.runs["anchor"].to_list(), contexts, strict=True
        )
    ]
    runs = sweep.runs.with_columns(
        pl.Series("arm", [a for a, _, _ in arms], dtype=pl.Utf8),
        pl.Series("kind", [kind for _, kind, _ in arms], dtype=pl.Utf8),
        pl.Series("arm_k", [k for _, _, k in arms], dtype=pl.Int64),
    )
    if DYNAMIC not in runs["arm"].to_list():
        problems.append(
            Problem(
                Severity.ERROR,
                "no-dynamic-arm",
                "no run served the schedule under test"
                + ("" if schedule is not None else " (no multi-range schedule in the sweep)"),
                value=None if dynamic is None else schedule_text(dynamic),
                expected="a serve combo with the tuned speculative_config (tune-spec-k plan"
                " --validate RESULT_JSON writes one)",
            )
        )
        return dataclasses.replace(empty, problems=tuple(problems))
    assert dynamic is not None  # a dynamic arm serves it
    block, summary, capture = _capture_check(sweep, dynamic, points, deploy)
    if points:
        placed = _placed_points(axis, points, runs)
        judged, found, servers = _judge_contexts(sweep, placed, settings, dynamic)
        return dataclasses.replace(
            empty,
            problems=(*problems, *(axis.problems if axis else ()), *found, *capture),
            deployment=block,
            deployment_summary=summary,
            contexts=judged,
            context_field=context_field,
            servers=servers,
            one_prompt_length=one_length,
        )
    assert isinstance(dynamic, Schedule)  # a context schedule has a point
    arm_frame, verdicts, found, servers = _judge(sweep, runs, settings, dynamic.k_at)
    return dataclasses.replace(
        empty,
        arms=arm_frame,
        verdicts=verdicts,
        problems=tuple(problems + found + capture),
        deployment=block,
        deployment_summary=summary,
        servers=servers,
    )


def _report(
    settings: CheckSettings, dynamic: UnderTest | None, problems: tuple[Problem, ...]
) -> CheckReport:
    """A report without verdicts (yet) on ``dynamic``."""
    return CheckReport(
        settings,
        dynamic if isinstance(dynamic, Schedule) else None,
        pl.DataFrame(schema=ARM_SCHEMA),
        _no_verdicts(),
        problems,
        context_schedule=None if isinstance(dynamic, Schedule) else dynamic,
    )


def _one_length_statement(point: ContextPoint, label: str | None) -> str:
    """What a context schedule judged at a sweep's one prompt length rests on."""
    output = (
        f"prompt + output / 2 = {point.prompt_tokens} + {point.output_tokens} / 2"
        if point.output_tokens is not None
        else "the prompt alone: no output length in the records"
    )
    return (
        "the validation sweep did not vary the prompt length: the context schedule is judged"
        f" at its one prompt length, {point.prompt_tokens} tokens (the median of {label} over"
        f" the runs), at decode-time context {point.context_tokens} ({output}), the K it runs"
        " there"
    )


def _placed_points(
    axis: ContextAxis | None, points: Sequence[ContextPoint], runs: pl.DataFrame
) -> list[tuple[ContextPoint, pl.DataFrame]]:
    """Each context point with its runs: the axis's placement, or every run at the one point."""
    if axis is None:
        return [(points[0], runs)]
    placed = axis.runs.select("source", "position", "context_point")
    return [
        (
            point,
            runs.join(
                placed.filter(pl.col("context_point") == index).drop("context_point"),
                on=["source", "position"],
                how="semi",
            ),
        )
        for index, point in enumerate(axis.points)
    ]


def _judge_contexts(
    sweep: Sweep,
    placed: Sequence[tuple[ContextPoint, pl.DataFrame]],
    settings: CheckSettings,
    schedule: UnderTest,
) -> tuple[tuple[ContextCheck, ...], list[Problem], ServerNoise | None]:
    """The arms judged at each context point (:func:`lib.context.find_context_axis`, or a
    sweep's one prompt length), on that point's runs alone, never their runs pooled: a batch
    schedule under test (one K per batch size, as today's vLLM runs it whatever the prompt),
    or a context schedule at the K it runs at the point's decode-time context, against the
    alternatives at every prompt length. Each point's problems say which point they are at."""
    contexts = []
    problems: list[Problem] = []
    servers: ServerNoise | None = None
    for point, at in placed:
        context = None if isinstance(schedule, Schedule) else point.context_tokens
        arm_frame, verdicts, found, servers = _judge(
            sweep, at, settings, _k_at_point(schedule, point.context_tokens)
        )
        contexts.append(ContextCheck(point.prompt_tokens, arm_frame, verdicts, context))
        where = f"at {point.prompt_tokens} prompt tokens: "
        problems += [dataclasses.replace(p, message=where + p.message) for p in found]
    # Every point's runs come from the same servers: the last point's statement is theirs.
    return tuple(contexts), problems, servers


def _k_at_point(schedule: UnderTest, context: int) -> Callable[[int], int]:
    """The K the schedule runs per batch size at one context point."""
    if isinstance(schedule, Schedule):
        return schedule.k_at
    return functools.partial(schedule.k_at, context=context)


def speculative_config_of(data: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """The ``speculative_config`` a file holds (an export's or a result's; a JSON string is
    read as JSON), else the file itself, and the prefix naming its fields in a problem.

    >>> speculative_config_of({"speculative_config": '{"num_speculative_tokens": 3}'})
    ({'num_speculative_tokens': 3}, 'speculative_config.')
    """
    nested = parse_json_string(data.get("speculative_config"))
    return (nested, "speculative_config.") if isinstance(nested, dict) else (data, "")


def context_schedule_file(data: Any, source: str) -> tuple[ContextSchedule | None, list[Problem]]:
    """The context schedule a ``--schedule`` file holds: a ``tune-spec-k export`` file of
    ``vllm-rfc-48944`` or ``vllm-pr-54801`` (its ``speculative_config``), or a
    ``speculative_config`` (bare, or under that key) holding ``speculative_token_schedule``
    (PR #48944, or its alias ``num_speculative_tokens_per_batch_size`` with 5-item entries) or
    ``num_speculative_tokens_per_seq_len`` (PR #54801) (:func:`context_schedule_of`). Any
    other file is not one (None, no problem: it is read as a batch schedule; a ``vllm-context``
    export is one batch schedule). An error per broken rule, naming the file, the field, its
    value and what was expected; also a context format's export without its table, and a
    table of the other format than the file says.

    >>> export = {"format": "vllm-pr-54801", "speculative_config": {}}
    >>> context_schedule_file(export, "x.json")[1][0].field
    'speculative_config.num_speculative_tokens_per_seq_len'
    >>> context_schedule_file({"format": "vllm-context"}, "x.json")
    (None, [])
    """
    if not isinstance(data, dict):
        return None, []
    config, prefix = speculative_config_of(data)
    kind = data.get("format")
    schedule, violations = context_schedule_of(config)
    key = context_schedule_key(config)
    expected = {
        "vllm-rfc-48944": f"{RFC_48944_KEY}: [[bs_lo, bs_hi, ctx_lo, ctx_hi, K], ...] by PR"
        " #48944's rules (docs/context.md, Exports)",
        "vllm-pr-54801": f"{SCHEDULE_KEY} [[lo, hi, K], ...] by vLLM's rules beside"
        f" {SEQ_LEN_KEY} [[len_lo, len_hi, K], ...] from 1, contiguous (docs/context.md,"
        " Exports)",
    }

    def bad(field: str, message: str, value: Any, wanted: str) -> Problem:
        return Problem(
            Severity.ERROR,
            "invalid-context-schedule",
            message,
            files=(source,),
            field=prefix + field,
            value=None if value is MISSING else show_value(value),
            expected=wanted,
        )

    if key is None:
        if kind not in CONTEXT_SCHEDULE_FORMATS:
            return None, []
        field = RFC_48944_KEY if kind == "vllm-rfc-48944" else SEQ_LEN_KEY
        return None, [
            bad(field, f"the file says format {kind} but holds no {field}", MISSING, expected[kind])
        ]
    if schedule is None:
        wanted = expected["vllm-pr-54801" if SEQ_LEN_KEY in config else "vllm-rfc-48944"]
        return None, [
            bad(
                name,
                f"the context schedule breaks its format's rule: {rule}",
                config.get(name, MISSING),
                wanted,
            )
            for name, rule in violations
        ]
    if kind in CONTEXT_SCHEDULE_FORMATS and kind != schedule.format:
        return None, [
            bad(
                key,
                f"the file says format {kind} but holds a {schedule.format} table",
                kind,
                expected[kind],
            )
        ]
    return schedule, []


def _capture_check(
    sweep: Sweep, schedule: UnderTest, points: Sequence[ContextPoint], deploy: DeploySettings
) -> tuple[dict[str, Any] | None, str | None, list[Problem]]:
    """The capture rule on the deployed schedule (never repaired here: it is what ran), with
    the dynamic arm's anchors measured past the ceiling. A context schedule is held to the
    largest K it runs at each batch size over every context (``batch_bound``), and its cells
    past the ceiling are its (anchor, K at each context point)."""
    bound = schedule if isinstance(schedule, Schedule) else schedule.batch_bound()
    facts, problems = sweep_engine_facts(sweep)
    global_k = max(bound.largest_k, 1)
    ceiling = ceiling_for(Decisions(bound, None, "check", "", engine=facts), deploy, global_k)
    # Checked as it ran: never repaired, whether C is known or not.
    check = check_ceiling(bound, ceiling, {}, global_k=global_k, repair=False)
    anchors = tuple(sorted(set(sweep.runs["anchor"].drop_nulls().to_list())))
    cells = (
        [(a, schedule.k_at(a)) for a in anchors]
        if isinstance(schedule, Schedule)
        else sorted({(a, schedule.k_at(a, p.context_tokens)) for a in anchors for p in points})
    )
    past = cells_past_ceiling(cells, ceiling.size)
    deployment = Deployment(check, tuple(past), anchors)
    found = deployment.problems("the dynamic arm's verdicts there are of steps without graphs")
    summary = check.summary()
    if not isinstance(schedule, Schedule):
        bounded = (
            "the context schedule held to its largest K per batch size over every context,"
            f" {bound.json_text()}"
        )
        summary += f" ({bounded})"
        found = [
            p
            if p.rule == "measured-past-capture-ceiling"
            else dataclasses.replace(p, message=f"{bounded}: {p.message}")
            for p in found
        ]
    return deployment.to_json(), summary, problems + found


def _no_verdicts() -> pl.DataFrame:
    return pl.DataFrame(schema=VERDICT_SCHEMA)


def _arm_codes(runs: pl.DataFrame) -> dict[str, int]:
    """Arms as the small integers the policy ranks (standing in for K); order only fixes
    which code each arm gets, not any result."""
    order = {"plain": 0, "one-range": 1, "static": 2, "other": 3, "dynamic": 4, "unknown": 5}
    arms = runs.select("arm", "kind", "arm_k").unique().to_dicts()
    arms.sort(
        key=lambda a: (order[a["kind"]], a["arm_k"] if a["arm_k"] is not None else -1, a["arm"])
    )
    codes: dict[str, int] = {}
    for arm in arms:
        codes.setdefault(arm["arm"], len(codes))
    return codes


def _p_eps_good(
    sweep: Sweep,
    runs: pl.DataFrame,
    arms: Sequence[str],
    codes: dict[str, int],
    settings: CheckSettings,
) -> tuple[dict[tuple[int, str], float | None], pl.DataFrame, list[Problem], ServerNoise]:
    """P(eps-good) per (anchor, arm) among ``arms`` (via :func:`lib.confidence.assess`), the
    cells of the tuning (median, relative MAD) and the problems the policy's gates found."""
    chosen = runs.filter(pl.col("arm").is_in(list(arms)))
    chosen = chosen.with_columns(
        pl.col("arm").replace_strict(codes, return_dtype=pl.Int64).alias("k"),
        pl.lit(None, pl.Int64).alias("global_k"),
    ).drop("arm", "kind", "arm_k")
    subset = dataclasses.replace(sweep, runs=chosen, k_var="arm")
    result = tune(
        subset,
        settings.tuning,
    )
    report = assess(result, settings.confidence_settings())
    names = {code: arm for arm, code in codes.items()}
    p = {
        (row["anchor"], names[row["k"]]): row["p_eps_good"]
        for row in report.cells.select("anchor", "k", "p_eps_good").to_dicts()
    }
    cells = result.cells.with_columns(
        pl.col("k").replace_strict(names, return_dtype=pl.Utf8).alias("arm")
    )
    return p, cells, list(result.problems), report.servers


def _judge(
    sweep: Sweep,
    runs: pl.DataFrame,
    settings: CheckSettings,
    schedule_k: Callable[[int], int],
) -> tuple[pl.DataFrame, pl.DataFrame, list[Problem], ServerNoise]:
    """The verdict per anchor of ``runs``; ``schedule_k``: the K the schedule under test runs
    at a batch size (at these runs' context)."""
    codes = _arm_codes(runs)
    every = list(codes)
    p_all, cells, found, servers = _p_eps_good(sweep, runs, every, codes, settings)
    problems = [
        p
        for p in found
        if p.rule in ("failed-run", "failed-requests", "incomplete-run")
        or (p.rule.endswith("-objective") and p.rule != "noisy-objective")
    ]
    problems += [
        _arm_warning(p, codes) for p in found if p.rule in ("too-few-runs", "noisy-objective")
    ]
    kind_of = dict(runs.select("arm", "kind").unique().iter_rows())
    k_at = {
        (anchor, arm): k
        for anchor, arm, k in runs.select("anchor", "arm", "arm_k").unique().iter_rows()
    }
    eligible = cells.filter(pl.col("num_runs") >= settings.tuning.min_runs)
    arm_rows = [
        {
            "anchor": row["anchor"],
            "arm": row["arm"],
            "kind": kind_of[row["arm"]],
            "k": k_at.get((row["anchor"], row["arm"])),
            "num_runs": row["num_runs"],
            "median": row["median"],
            "relative_mad": row["relative_mad"],
            "p_eps_good": p_all.get((row["anchor"], row["arm"])),
        }
        for row in eligible.sort("anchor", "arm").to_dicts()
    ]
    arm_frame = pl.DataFrame(arm_rows, schema=ARM_SCHEMA)
    statics = [a for a in every if kind_of[a] in ("static", "one-range") and not _is_k0(a, runs)]
    k0_arm = (
        NO_SPECULATION
        if NO_SPECULATION in codes
        else next((a for a in every if kind_of[a] == "one-range" and _is_k0(a, runs)), None)
    )
    p_static = _p_eps_good(sweep, runs, [DYNAMIC, *statics], codes, settings)[0] if statics else {}
    p_k0 = _p_eps_good(sweep, runs, [DYNAMIC, k0_arm], codes, settings)[0] if k0_arm else {}
    drafting = _dynamic_drafting(runs)
    verdicts = []
    for anchor in sorted(arm_frame["anchor"].unique().to_list()):
        at = {row["arm"]: row for row in arm_frame.filter(pl.col("anchor") == anchor).to_dicts()}
        row = _verdict(anchor, at, statics, k0_arm, p_static, p_k0, p_all, settings)
        row["reasons"] += _smaller_batch_notes(anchor, row, schedule_k, drafting.get(anchor))
        verdicts.append(row)
    return arm_frame, pl.DataFrame(verdicts, schema=VERDICT_SCHEMA), problems, servers


def _dynamic_drafting(runs: pl.DataFrame) -> dict[int, tuple[int, int]]:
    """Per anchor, (dynamic runs that drafted tokens, dynamic runs)."""
    dynamic = runs.filter(pl.col("arm") == DYNAMIC)
    drafted = (
        (pl.col(DRAFTS_FIELD).fill_null(0) > 0)
        if DRAFTS_FIELD in dynamic.columns
        else pl.lit(False)
    )
    counts = dynamic.group_by("anchor").agg(drafted.sum().alias("drafted"), pl.len().alias("runs"))
    return {a: (int(d), int(n)) for a, d, n in counts.iter_rows()}


def _smaller_batch_notes(
    anchor: int,
    row: dict[str, Any],
    k_at: Callable[[int], int],
    drafting: tuple[int, int] | None,
) -> list[str]:
    """A run at concurrency C spends its ramp-up and drain at smaller batch sizes, where the
    schedule (``k_at``: its K per batch size) may run another K: say so where that makes the
    dynamic arm differ from a server running the anchor's K throughout."""
    if row["dynamic_k"] is None:
        return []
    below = sorted({k_at(b) for b in range(1, anchor + 1)})
    if below == [row["dynamic_k"]]:
        return []
    notes = [
        f"the schedule runs K={row['dynamic_k']} at {anchor} requests but K in {below} below it:"
        " ramp-up and drain run at smaller batch sizes, so the dynamic server is not a"
        f" K={row['dynamic_k']} server throughout (its gains and overhead include this)"
    ]
    if row["dynamic_k"] == 0 and drafting is not None and drafting[0]:
        notes.append(
            f"the dynamic server drafted tokens in {drafting[0]} of {drafting[1]} run(s) here"
            f" ({DRAFTS_FIELD} > 0) although its K at {anchor} is 0"
        )
    return notes


def _arm_warning(problem: Problem, codes: dict[str, int]) -> Problem:
    """A cell problem of the policy as a warning about an arm: too few runs leave the arm out
    at that anchor; a noisy arm is weighed through the anchor's pooled noise, not rejected."""
    names = {code: arm for arm, code in codes.items()}
    arm = names.get(problem.k, "?") if problem.k is not None else "?"
    if problem.rule == "noisy-objective":
        return dataclasses.replace(
            problem,
            severity=Severity.WARNING,
            k=None,
            message=f"{arm}: the runs disagree; the check weighs this noise through the"
            " anchor's pooled estimate",
            expected=None,
        )
    return dataclasses.replace(
        problem,
        severity=Severity.WARNING,
        k=None,
        message=f"{arm}: {problem.message}, so it is left out at this batch size",
    )


def _is_k0(arm: str, runs: pl.DataFrame) -> bool:
    ks = runs.filter(pl.col("arm") == arm)["arm_k"].unique().to_list()
    return ks == [0]


def _gain(dynamic: float, other: float, maximize: bool) -> float | None:
    """Percent by which the dynamic arm is better (negative: worse)."""
    if other <= 0 or dynamic <= 0:
        return None
    return ((dynamic / other) if maximize else (other / dynamic)) * 100 - 100


def _overhead(dynamic: float, same_k: float, maximize: bool) -> float | None:
    """Percent by which the objective moved the wrong way from the same-K server to the dynamic
    one: ``1 - dynamic / same_k`` when maximising, ``dynamic / same_k - 1`` when minimising (so a
    TPOT overhead reads as vLLM issue #49548 reports it)."""
    if dynamic <= 0 or same_k <= 0:
        return None
    return ((1 - dynamic / same_k) if maximize else (dynamic / same_k - 1)) * 100


def _verdict(
    anchor: int,
    at: dict[str, dict[str, Any]],
    statics: list[str],
    k0_arm: str | None,
    p_static: dict[tuple[int, str], float | None],
    p_k0: dict[tuple[int, str], float | None],
    p_all: dict[tuple[int, str], float | None],
    settings: CheckSettings,
) -> dict[str, Any]:
    reasons: list[str] = []
    dynamic = at.get(DYNAMIC)
    row: dict[str, Any] = dict.fromkeys(VERDICT_SCHEMA)
    row.update(anchor=anchor, reasons=reasons)
    if dynamic is None:
        reasons.append(
            f"the dynamic arm has fewer than {settings.tuning.min_runs} usable runs here"
        )
        row["verdict"] = "inconclusive"
        return row
    row.update(dynamic_k=dynamic["k"], dynamic_median=dynamic["median"])
    present = [a for a in statics if a in at]
    sign = 1 if settings.maximize else -1
    comparisons: list[float | None] = []
    if present:
        best = max(present, key=lambda a: (sign * at[a]["median"], -(at[a]["k"] or 0)))
        row.update(
            best_static=best,
            vs_best_static_percent=_gain(dynamic["median"], at[best]["median"], settings.maximize),
            p_vs_best_static=p_static.get((anchor, DYNAMIC)),
        )
        comparisons.append(row["p_vs_best_static"])
    else:
        reasons.append("no static K > 0 server measured here: the comparison is missing")
    if k0_arm is not None and k0_arm in at:
        row.update(
            k0_arm=k0_arm,
            vs_k0_percent=_gain(dynamic["median"], at[k0_arm]["median"], settings.maximize),
            p_vs_k0=p_k0.get((anchor, DYNAMIC)),
        )
        comparisons.append(row["p_vs_k0"])
        if k0_arm != NO_SPECULATION:
            reasons.append(
                "K=0 here is the schedule-enabled engine, not a server without speculation: the"
                " Dynamic SD engine's own cost is not measured"
            )
    else:
        reasons.append("no K=0 server measured here: the comparison is missing")
    row["p_overall"] = p_all.get((anchor, DYNAMIC))
    same = _same_k_arm(dynamic["k"], at)
    if same is not None:
        overhead = _overhead(dynamic["median"], at[same]["median"], settings.maximize)
        row.update(same_k_arm=same, overhead_percent=overhead)
        if dynamic["k"] == 0 and same == NO_SPECULATION and overhead is not None:
            reasons.append(
                "the schedule runs K=0 here: the Dynamic SD engine costs"
                f" {percent_text(overhead, 2)} of"
                f" {settings.tuning.objective} against a server without speculation"
                f" ({REPORTED_OVERHEAD})"
                if overhead >= 0
                else "the schedule runs K=0 here and measured"
                f" {percent_text(-overhead, 2)} better than a"
                " server without speculation: at K=0 throughout it could not be, so either"
                " it speculated at the smaller batch sizes of ramp-up and drain, or this is"
                " noise or drift between the two servers' runs"
            )
    confident = settings.confidence
    if any(p is not None and p <= 1 - confident for p in comparisons):
        row["verdict"] = "loss"
    elif comparisons and all(p is not None and p >= confident for p in comparisons):
        row["verdict"] = "ok"
    else:
        row["verdict"] = "inconclusive"
        if any(p is None for p in comparisons):
            reasons.append("no replicate runs: the noise cannot be estimated")
        elif comparisons:
            reasons.append(
                f"P(at least as good) between {1 - confident:.2f} and {confident:g}: more runs"
                " would settle it"
            )
    return row


def _same_k_arm(k: int | None, at: dict[str, dict[str, Any]]) -> str | None:
    if k is None:
        return None
    if k == 0:
        return NO_SPECULATION if NO_SPECULATION in at else None
    for arm in (f"static K={k}", f"K={k} (1-range)"):
        if arm in at:
            return arm
    return None
