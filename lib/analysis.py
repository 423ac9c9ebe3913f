"""The whole analysis of one sweep, exactly as the CLI writes it: the stages in order, each a
function of the previous stage's typed output.

1. gate (:func:`lib.gates.gate`): a loaded :class:`~lib.sweeps.Sweep` ->
   :class:`~lib.gates.GatedSweep` (every cell with its verdict, excluded runs, problems);
2. decide (:func:`lib.schedule.seed_decision`, the tie rule of :mod:`lib.decide`) ->
   :class:`~lib.schedule.TuningResult`, the seed policy's picks and schedule;
3. assess confidence (:func:`lib.confidence.assess`) -> :class:`~lib.confidence.ConfidenceReport`;
4. apply the policy (:func:`lib.policy.apply_policy`): the seed's result and the report -> the
   :class:`~lib.schedule.TuningResult` reported (``--policy``);

then the cliffs, the effective batch, the switch points and the measurement plan of it.

The CLI and the app both call :func:`analyse`, so the app's download is the CLI's file by
construction (:func:`lib.deploy.result_file.result_text`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from lib.cliffs import Cliff, cliff_problems, find_cliffs
from lib.confidence import ConfidenceReport, ConfidenceSettings, assess
from lib.effective_batch import EffectiveBatch, effective_batch, effective_batch_problems
from lib.gates import gate
from lib.measurement_plan import MeasurementPlan, measurement_plan
from lib.policy import apply_policy
from lib.problems import Problem, Severity
from lib.schedule import TuningResult, schedule_problems, seed_decision
from lib.settings import Options, Settings
from lib.sweeps import Sweep
from lib.switch_points import EmittedSwitchPoints, SwitchPoints, find_switch_points

__all__ = ["Analysis", "analyse"]


@dataclass(frozen=True, eq=False)
class Analysis:
    """``result`` is what the CLI writes; ``seed_result`` the seed policy's own answer (the
    same as ``result`` under the default policy), for comparing the two rules. ``report``,
    ``switch_points`` and ``plan`` are None when they could not be computed (invalid
    confidence settings; no schedule). ``cliffs``: :func:`lib.cliffs.find_cliffs` of the
    result's cells, each also a warning among its problems; switch points and the plan do
    not interpolate across them. ``effective_batch``: requests in flight per cell
    (:mod:`lib.effective_batch`), its warnings among the problems, in each JSON candidate."""

    result: TuningResult
    seed_result: TuningResult
    report: ConfidenceReport | None
    switch_points: SwitchPoints | None
    plan: MeasurementPlan | None
    cliffs: tuple[Cliff, ...] = ()
    effective_batch: EffectiveBatch | None = None


def analyse(sweep: Sweep, settings: Settings, options: Options | None = None) -> Analysis:
    """Tune ``sweep`` with the seed's ``settings``, then apply ``options``: the stages in order.

    The seed policy always runs first (its cells, gates and problems are the basis of
    everything); the confidence report is computed for every anchor under either policy, so the
    JSON says how sure each pick is; ``options.policy`` chooses whose picks are reported;
    with ``options.interpolated_schedule`` the schedule switches at the interpolated
    crossovers instead of at the upper anchor.
    """
    options = options or Options()
    gated = gate(sweep, settings)
    seed_result = seed_decision(gated)
    confidence_settings = ConfidenceSettings.of(options)
    invalid = [
        Problem(Severity.ERROR, "invalid-setting", reason)
        for reason in confidence_settings.invalid()
    ]
    if invalid or not gated.usable_settings:
        # The seed's invalid settings are already among seed_result's problems; the
        # confidence model cannot run on them (a tolerance of 1.5 has no log).
        result = dataclasses.replace(seed_result, problems=(*seed_result.problems, *invalid))
        return Analysis(result, seed_result, None, None, None)
    report = assess(seed_result, confidence_settings)
    result = apply_policy(seed_result, report, options.policy)
    cliffs = find_cliffs(result)
    in_flight = effective_batch(result)
    result = _with_anomalies(result, cliffs, in_flight)
    switch_points = find_switch_points(result, report, cliffs) if result.ok else None
    if switch_points is not None:
        result = _with_switch_points(result, switch_points, options.interpolated_schedule)
    return Analysis(
        result=result,
        seed_result=seed_result,
        report=report,
        switch_points=switch_points,
        plan=measurement_plan(result, report, cliffs),
        cliffs=cliffs,
        effective_batch=in_flight,
    )


def _with_anomalies(
    result: TuningResult, cliffs: tuple[Cliff, ...], in_flight: EffectiveBatch
) -> TuningResult:
    """``result`` with a warning per cliff and per effective-batch finding, and each cell's
    effective batch (written in every JSON candidate)."""
    found = [
        *cliff_problems(cliffs, result.settings.objective),
        *effective_batch_problems(in_flight, result),
    ]
    return dataclasses.replace(
        result, problems=(*result.problems, *found), effective_batch=in_flight
    )


def _with_switch_points(
    result: TuningResult, switch_points: SwitchPoints, interpolated: bool
) -> TuningResult:
    """``result`` with its ``switch_points`` key; with ``interpolated`` its schedule switches at
    the interpolated crossovers (checked against vLLM's rules) instead of at the upper anchor."""
    emitted = "interpolated" if interpolated else "step"
    additions = {**result.additions, "switch_points": EmittedSwitchPoints(switch_points, emitted)}
    result = dataclasses.replace(result, additions=additions)
    if not interpolated:
        return result
    return dataclasses.replace(
        result,
        schedule=switch_points.schedule,
        problems=(*result.problems, *schedule_problems(switch_points.schedule)),
    )
