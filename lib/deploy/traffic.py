"""The traffic mix in the verdict (``docs/traffic.md``): one entry point for the CLI's ``tune``
and the app, after :func:`lib.deploy.tuning.deploy_analysis`.

:func:`with_traffic` weighs the deployed schedule on the mix (:mod:`lib.traffic_value`), adds
the ``traffic`` block to the result (after every other key), and gives the verdict:

- always, which mix it judged on (:attr:`lib.deploy.verdict.Verdict.traffic`): the user's
  file, or the sweep's own runs, said as such;
- on a given mix only (``--traffic``), the measurement plan ordered by the share of the
  traffic each row decides (:func:`lib.traffic_plan.by_traffic`), and the rules of
  :func:`traffic_reasons`: the schedule's
  expected gain over the best static K within the tie tolerance (offer that K, paste-ready
  in every engine format of the registry), over K=0 within it (serve without speculation).
  The sweep's own mix is the batch sizes the sweep chose to measure, not a server's time: it
  judges nothing.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING

from lib.deploy.registry import export, formats
from lib.deploy.settings import ExportSettings
from lib.deploy.tuning import deployed_decisions
from lib.deploy.verdict import Reason, Verdict, verdict_in
from lib.schedule import Schedule
from lib.traffic import TrafficMix, sweep_mix
from lib.traffic_plan import by_traffic
from lib.traffic_value import TrafficValue, traffic_value, within_tolerance

if TYPE_CHECKING:
    from lib.analysis import Analysis
    from lib.schedule import TuningResult

__all__ = [
    "TRAFFIC_KEY",
    "static_k_configs",
    "traffic_in",
    "traffic_reasons",
    "traffic_statement",
    "with_traffic",
]

#: The result JSON's key of the traffic block (after every other key).
TRAFFIC_KEY = "traffic"


def static_k_configs(result: TuningResult, k: int) -> list[str]:
    """``FORMAT: CONFIG`` per batch format of the registry for one static K: the result's
    decisions with the one range ``[[1, largest, k]]``, exported as any schedule is; a format
    that builds none (SGLang refuses an n-gram drafter) says why."""
    decisions = deployed_decisions(result)
    last = max((hi for _, hi, _ in decisions.schedule.ranges), default=1)
    static = dataclasses.replace(decisions, schedule=Schedule(((1, last, k),)), vllm_cap=None)
    configs = []
    for engine_format in formats():
        if engine_format.needs_grid:
            continue
        exported, problems = export(static, ExportSettings(format=engine_format.name, global_k=k))
        if exported is not None:
            configs.append(f"{engine_format.name}: {json.dumps(dict(exported.config))}")
        else:
            why = problems[0].message if problems else "the format builds none"
            configs.append(f"{engine_format.name}: none ({why})")
    return configs


def traffic_reasons(value: TrafficValue, result: TuningResult) -> list[Reason]:
    """On a given mix: K=0 within the tolerance (:func:`within_tolerance`) is "serve without
    speculation on this traffic"; else the best static K (K > 0) within it is a reason offering
    that K's config in every format. Neither on the sweep's own mix, nor where nothing of the
    mix was weighed."""
    if not value.mix.given or value.evaluated_share <= 0:
        return []
    tolerance = value.tolerance
    k0, best = value.k0, value.best_static
    if k0 is not None and within_tolerance(k0.gain_percent, tolerance):
        return [
            Reason(
                "no-speculation-on-traffic",
                f"on this traffic the schedule's expected gain over K=0 is {k0.gain_text()},"
                f" within the {tolerance:.0%} tie tolerance",
                "serve without speculation on this traffic (no --speculative-config: a"
                " drafter at K=0 still costs memory and Dynamic SD's tax)",
                k0.gain_percent,
                "%",
            )
        ]
    if best is None or best.k is None or best.k == 0:
        return []
    if not within_tolerance(best.gain_percent, tolerance):
        return []
    configs = "; ".join(static_k_configs(result, best.k))
    return [
        Reason(
            "static-k-suffices",
            f"on this traffic the schedule's expected gain over the best static K={best.k} is"
            f" {best.gain_text()}, within the {tolerance:.0%} tie tolerance",
            f"serve static K={best.k}, paste-ready per engine: {configs}",
            best.gain_percent,
            "%",
        )
    ]


def traffic_statement(mix: TrafficMix) -> str:
    """Which mix the verdict judged on, for its ``traffic:`` line."""
    if mix.given:
        return f"judged on {mix.description()}"
    return (
        f"no --traffic given: weighed on {mix.description()}; the verdict judges nothing by"
        " it (give --traffic FILE: a Prometheus range query of vllm:num_requests_running, or"
        " a CSV, docs/traffic.md)"
    )


def with_traffic(analysis: Analysis, mix: TrafficMix | None) -> Analysis:
    """``analysis`` (deployed) weighed on ``mix`` (None: the sweep's own,
    :func:`lib.traffic.sweep_mix`): the ``traffic`` addition and the verdict's reasons and
    statement. Unchanged where there is no schedule, no confidence report or no mix."""
    result, report = analysis.result, analysis.report
    verdict = verdict_in(result)
    if result.schedule is None or report is None or verdict is None:
        return analysis
    if verdict.state == "cannot-tune":
        return analysis
    if mix is None:
        anchors = sorted(set(result.decisions["anchor"].to_list()))
        mix = sweep_mix(analysis.effective_batch, anchors)
    if mix is None:
        return analysis
    value = traffic_value(
        mix, result.schedule, report, result.settings.objective, result.deploy_global_k
    )
    reasons = (*verdict.reasons, *traffic_reasons(value, result))
    judged = Verdict(
        "provisional" if reasons else "ready", reasons, verdict.assumption, traffic_statement(mix)
    )
    additions = {
        **{key: item for key, item in result.additions.items() if key != "verdict"},
        "verdict": judged,
        TRAFFIC_KEY: value,
    }
    plan = analysis.plan
    if plan is not None and mix.given:
        plan = by_traffic(plan, mix, value.anchors)
    return dataclasses.replace(
        analysis, result=dataclasses.replace(result, additions=additions), plan=plan
    )


def traffic_in(result: TuningResult) -> TrafficValue | None:
    """The traffic answer :func:`with_traffic` gave ``result`` (None before)."""
    found = result.additions.get(TRAFFIC_KEY)
    return found if isinstance(found, TrafficValue) else None
