"""``tune-spec-k check``: is the deployed schedule at least as good as the alternatives?

Input: a sweep in which the tuned schedule was served as a dynamic config next to static-K
servers and, ideally, a server without speculation (``tune-spec-k plan --validate`` writes
it). :func:`check_deployment` puts each run in an arm (:mod:`lib.loop.check.arms`), judges the
dynamic arm per anchor (:mod:`lib.loop.check.judge`), per context point where the prompt length
varied or a context schedule is under test (:mod:`lib.loop.check.context`), and holds the
schedule to vLLM's capture rule; :class:`CheckReport` holds the verdicts.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from lib.context_axis import ContextPoint, find_context_axis, sole_context_point
from lib.deploy.ceiling import release_refusals
from lib.deploy.constraints import cells_past_ceiling, check_ceiling
from lib.deploy.decisions import Decisions
from lib.deploy.deployed import ContextSchedule
from lib.deploy.registry import ceiling_for
from lib.deploy.tuning import Deployment, sweep_engine_facts
from lib.flags import flag_name
from lib.loop.check.arms import (
    DYNAMIC,
    UnderTest,
    arm_of,
    clamped_lookup,
    configs_by_row,
    dynamic_candidates,
    normalized,
    schedule_text,
    served_global_k,
)
from lib.loop.check.context import (
    ContextCheck,
    judge_contexts,
    one_length_statement,
    placed_points,
    row_contexts,
)
from lib.loop.check.judge import (
    ARM_SCHEMA,
    REPORTED_OVERHEAD,
    VERDICT_SCHEMA,
    CheckSettings,
    frames_json,
    judge,
    traffic_of,
)
from lib.noise_summary import ServerNoise
from lib.problems import Problem, Severity, errors
from lib.schedule import NO_SCHEDULE, Schedule
from lib.settings import GLOBAL_K_VAR, DeploySettings
from lib.sweeps import Sweep, load_experiment
from lib.traffic import TrafficMix
from lib.traffic_value import TrafficValue

__all__ = ["CheckReport", "check_deployment"]


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
    #: The dynamic arm weighed on ``--traffic`` (:func:`lib.loop.check.judge.traffic_of`).
    traffic: TrafficValue | None = None

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
            **frames_json(self.verdicts, self.arms),
            "problems": [p.to_json() for p in self.problems],
            "reported_dynamic_sd_overhead": REPORTED_OVERHEAD,
            "assumption": self.assumption,
            **({"deployment": dict(self.deployment)} if self.deployment is not None else {}),
            **contexts,
            **({"one_prompt_length": self.one_prompt_length} if self.one_prompt_length else {}),
            **({"traffic": self.traffic.to_json()} if self.traffic is not None else {}),
        }

    def to_json_text(self) -> str:
        return json.dumps(self.to_json(), indent=2, allow_nan=False) + "\n"


def check_deployment(
    path: str | Path,
    settings: CheckSettings,
    schedule: UnderTest | None = None,
    deploy: DeploySettings | None = None,
    traffic: TrafficMix | None = None,
) -> CheckReport:
    """Read a validation sweep and judge the dynamic arm at every anchor; never raises for bad
    input (problems are in the report; errors mean no verdict can be trusted). The schedule
    under test is also checked by vLLM's capture rule (``deploy``, else the sweep's records,
    else vLLM's defaults): ranges past the ceiling, and anchors of the dynamic arm measured
    past it, are warnings.

    A context schedule under test (or the sweep's one multi-K context schedule) is judged per
    context point at the K it runs there (:func:`row_contexts`); on a sweep that did not vary
    the prompt length, at its one prompt length (:func:`lib.context_axis.sole_context_point`).
    With a ``traffic`` mix, a batch-only check also weighs the dynamic arm on it
    (:func:`lib.loop.check.judge.traffic_of`)."""
    deploy = deploy or DeploySettings()
    problems: list[Problem] = [
        Problem(Severity.ERROR, "invalid-setting", reason)
        for reason in (
            *settings.invalid(),
            *deploy.invalid(),
            *release_refusals(deploy.vllm_version),
            *_unread_by_check(deploy),
        )
    ]
    dynamic: UnderTest | None = schedule
    if isinstance(schedule, Schedule):
        dynamic = normalized(schedule.to_json())
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
    if errors(problems) or sweep.runs.is_empty():
        return _report(settings, dynamic, problems)
    # The loader's warnings and notes (a warm-up file ignored, ...) leave the axis as it is.
    axis, found = find_context_axis(sweep, settings.context)
    if axis is None:
        # Why there is none: a note, or an error (a named field no record holds, ...).
        problems += found
        if errors(found):
            return _report(settings, dynamic, problems)
    configs = configs_by_row(sweep)
    if dynamic is None:
        candidates = dynamic_candidates(configs)
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
            return _report(settings, dynamic, problems)
        dynamic = candidates[0] if candidates else None
    points = tuple(axis.points) if axis is not None else ()
    context_field = axis.field if axis is not None else None
    one_length = None
    if isinstance(dynamic, ContextSchedule) and axis is None:
        point, label, found = sole_context_point(
            sweep, settings.context, "the context schedule's K depends on it"
        )
        problems += found
        if point is None or errors(found):
            return _report(settings, dynamic, problems)
        points, context_field = (point,), label
        one_length = one_length_statement(point, label)
    contexts = row_contexts(sweep, points, axis)
    arms = [
        arm_of(config, anchor, context, dynamic)
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
        return _report(settings, dynamic, problems)
    assert dynamic is not None  # a dynamic arm serves it
    global_k, clamp = _served_clamp(dynamic, configs, [arm for arm, _, _ in arms])
    problems += clamp
    block, summary, capture = _capture_check(sweep, dynamic, points, deploy, global_k)
    if points:
        placed = placed_points(axis, points, runs)
        judged, found, servers = judge_contexts(sweep, placed, settings, dynamic, global_k)
        if traffic is not None:
            found = [
                *found,
                Problem(
                    Severity.NOTE,
                    "traffic-not-weighed",
                    "--traffic is not weighed on a check per prompt length (docs/traffic.md)",
                ),
            ]
        return dataclasses.replace(
            _report(
                settings, dynamic, [*problems, *(axis.problems if axis else ()), *found, *capture]
            ),
            deployment=block,
            deployment_summary=summary,
            contexts=judged,
            context_field=context_field,
            servers=servers,
            one_prompt_length=one_length,
        )
    assert isinstance(dynamic, Schedule)  # a context schedule has a point
    arm_frame, verdicts, found, servers = judge(
        sweep, runs, settings, clamped_lookup(dynamic.k_at, global_k)
    )
    return dataclasses.replace(
        _report(settings, dynamic, problems + found + capture),
        arms=arm_frame,
        verdicts=verdicts,
        deployment=block,
        deployment_summary=summary,
        servers=servers,
        traffic=None if traffic is None else traffic_of(sweep, runs, settings, traffic),
    )


def _report(
    settings: CheckSettings, dynamic: UnderTest | None, problems: Sequence[Problem]
) -> CheckReport:
    """A report on ``dynamic`` with ``problems`` and without verdicts (yet)."""
    return CheckReport(
        settings,
        dynamic if isinstance(dynamic, Schedule) else None,
        pl.DataFrame(schema=ARM_SCHEMA),
        pl.DataFrame(schema=VERDICT_SCHEMA),
        tuple(problems),
        context_schedule=None if isinstance(dynamic, Schedule) else dynamic,
    )


def _unread_by_check(deploy: DeploySettings) -> list[str]:
    """The deployment settings ``check`` does not read (refused, never ignored): the tensor
    parallelism only SGLang's defaults read (tune records it for its exports).

    >>> _unread_by_check(DeploySettings(tensor_parallel_size=2))[0][:40]
    '--tensor-parallel-size 2: check judges v'
    """
    if deploy.tensor_parallel_size is None:
        return []
    return [
        f"{flag_name(DeploySettings, 'tensor_parallel_size')} {deploy.tensor_parallel_size}:"
        " check judges vLLM servers; only tune and export --format sglang read it"
    ]


def _served_clamp(
    schedule: UnderTest, configs: Sequence[Any], arms: Sequence[str]
) -> tuple[int | None, list[Problem]]:
    """The ``num_speculative_tokens`` the dynamic arm's servers were started with (the largest
    where they differ: no server ran a larger K), and a warning where it is below a K of the
    schedule under test: vLLM clamps every K of the schedule to it, silently
    (``../shared/docs/engines.md``, section 4), so the check judges, and holds to the capture
    rule, the clamped K, and says so. None (no clamp) where no dynamic server states one; a
    warning too where its servers state different ones."""
    stated = sorted(
        {
            k
            for config, arm in zip(configs, arms, strict=True)
            if arm == DYNAMIC and (k := served_global_k(config)) is not None
        }
    )
    if not stated:
        return None, []
    global_k = stated[-1]
    problems = []
    if len(stated) > 1:
        problems.append(
            Problem(
                Severity.WARNING,
                "mixed-global-k",
                "the dynamic arm's servers were started with different num_speculative_tokens:"
                f" judged at the largest, {global_k}",
                field="speculative_config.num_speculative_tokens",
                value=", ".join(str(k) for k in stated),
                expected="one global K for every server of the schedule under test",
            )
        )
    above = _clamped_part(schedule, global_k)
    if above:
        problems.append(
            Problem(
                Severity.WARNING,
                "clamped-schedule",
                f"the dynamic server ran with num_speculative_tokens={global_k}, below the"
                f" schedule's {above}: vLLM clamps every K to it (silently), so it ran"
                f" K={global_k} there, and the check judges that K (and holds it to the"
                " capture rule)",
                field="speculative_config.num_speculative_tokens",
                value=str(global_k),
                expected=">= the schedule's largest K to run it as written (tune-spec-k plan"
                " --validate sets it)",
            )
        )
    return global_k, problems


def _clamped_part(schedule: UnderTest, global_k: int) -> str:
    """What of ``schedule`` a global K clamps, in words: a batch schedule's ranges above it
    (``K=7 at batch sizes 1-63``), a context schedule's K above it; empty when none is.

    >>> _clamped_part(Schedule(((1, 63, 7), (64, 256, 3))), 3)
    'K=7 at batch sizes 1-63'
    >>> _clamped_part(Schedule(((1, 63, 7), (64, 256, 3))), 7)
    ''
    """
    if isinstance(schedule, Schedule):
        return ", ".join(
            f"K={k} at batch sizes {lo}-{hi}" if lo != hi else f"K={k} at batch size {lo}"
            for lo, hi, k in sorted(schedule.ranges)
            if k > global_k
        )
    above = sorted(k for k in schedule.ks if k > global_k)
    return f"K={', '.join(str(k) for k in above)} (context schedule)" if above else ""


def _capture_check(
    sweep: Sweep,
    schedule: UnderTest,
    points: Sequence[ContextPoint],
    deploy: DeploySettings,
    served_k: int | None = None,
) -> tuple[dict[str, Any] | None, str | None, list[Problem]]:
    """The capture rule on the deployed schedule (never repaired here: it is what ran), with
    the dynamic arm's anchors measured past the ceiling. A context schedule is held to the
    largest K it runs at each batch size over every context (``batch_bound``), and its cells
    past the ceiling are its (anchor, K at each context point). ``served_k``: the dynamic
    server's ``num_speculative_tokens`` (:func:`_served_clamp`): every K is clamped to it, and
    an assumed C is vLLM's default for it; without it, the schedule's largest K."""
    bound = schedule if isinstance(schedule, Schedule) else schedule.batch_bound()
    facts, problems = sweep_engine_facts(sweep)
    global_k = served_k if served_k is not None else max(bound.largest_k, 1)
    ceiling = ceiling_for(Decisions(bound, None, "check", "", engine=facts), deploy, global_k)
    # Checked as it ran: never repaired, whether C is known or not.
    check = check_ceiling(bound, ceiling, {}, global_k=global_k, repair=False)
    anchors = tuple(sorted(set(sweep.runs["anchor"].drop_nulls().to_list())))
    cells = (
        [(a, min(schedule.k_at(a), global_k)) for a in anchors]
        if isinstance(schedule, Schedule)
        else sorted(
            {
                (a, min(schedule.k_at(a, p.context_tokens), global_k))
                for a in anchors
                for p in points
            }
        )
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
