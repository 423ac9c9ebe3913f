"""A tuning made deployable: the capture rule (:mod:`lib.deploy.constraints`) applied to the
analysis's schedule, once, for the CLI's ``tune`` and the app alike.

:func:`deploy_analysis` resolves the ceiling (the flags, else the sweep's records, else
vLLM's defaults), caps the schedule where C is known (the result's schedule, its
``speculative_config`` and its first stdout line are then the capped one), and adds the
``deployment`` block to the result JSON and a warning per range past the ceiling, per cell
measured past it, and per method vLLM would run without the schedule. With C assumed the
schedule stays the seed's, byte for byte. Each cross-anchor cliff's warning
(:mod:`lib.cliffs`) is restated with the ceiling, so its likely cause says whether
``b*(1+K)`` passes C between the two anchors.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Any

from lib.cliffs import CLIFF_RULE, CeilingHint, cliff_problems
from lib.deploy.constraints import (
    CeilingCheck,
    cells_past_ceiling,
    check_ceiling,
    method_warnings,
    tokens_per_step,
)
from lib.deploy.decisions import decisions_of
from lib.deploy.engine import EngineFacts, Fact
from lib.deploy.registry import ceiling_for
from lib.deploy.verdict import verdict_of
from lib.keys import LARGEST_WHOLE_NUMBER
from lib.problems import Problem, Severity
from lib.server_info import SavedServers, ServerSettings, read_server_settings
from lib.settings import ENGINE_FIELDS, DeploySettings

if TYPE_CHECKING:
    from lib.analysis import Analysis
    from lib.sweeps import Sweep

__all__ = ["Deployment", "deploy_analysis", "sweep_engine_facts"]


def _capture_size(config: dict[str, Any]) -> int | None:
    """The capture ceiling a ``compilation_config`` states: ``max_cudagraph_capture_size``,
    else the largest of ``cudagraph_capture_sizes``; None when it states neither."""
    size = config.get("max_cudagraph_capture_size")
    if isinstance(size, int) and not isinstance(size, bool) and 1 <= size <= LARGEST_WHOLE_NUMBER:
        return int(size)
    sizes = config.get("cudagraph_capture_sizes")
    if (
        isinstance(sizes, list)
        and sizes
        and all(
            isinstance(s, int) and not isinstance(s, bool) and 1 <= s <= LARGEST_WHOLE_NUMBER
            for s in sizes
        )
    ):
        return int(max(sizes))
    return None


def _saved_values(saved: list[ServerSettings]) -> dict[str, dict[int, str]]:
    """Each setting's values in the server configs the sweep saved (:mod:`lib.server_info`),
    with the file each was first read from."""
    values: dict[str, dict[int, str]] = {}
    for server in saved:
        size = server.max_cudagraph_capture_size
        if size is None and server.cudagraph_capture_sizes:
            size = max(server.cudagraph_capture_sizes)
        for name, value in (
            ("max_cudagraph_capture_size", size),
            ("max_num_seqs", server.max_num_seqs),
            ("max_num_batched_tokens", server.max_num_batched_tokens),
        ):
            if value is not None and value >= 1:
                values.setdefault(name, {}).setdefault(
                    value, f"the saved server config {server.source}"
                )
    return values


def _recorded_values(sweep: Sweep) -> dict[str, dict[int, str]]:
    """Each setting's values in the sweep's records: the :data:`~lib.settings.ENGINE_FIELDS`
    columns, then the capture ceiling of each ``compilation_config``."""
    stated: dict[str, dict[int, str]] = {setting: {} for setting in ENGINE_FIELDS}
    for setting, names in ENGINE_FIELDS.items():
        for name in names:
            if name not in sweep.runs.columns:
                continue
            for value in sweep.runs[name].drop_nulls().unique().sort().to_list():
                if float(value).is_integer() and 1 <= value <= LARGEST_WHOLE_NUMBER:
                    stated[setting].setdefault(int(value), f"the records' {name}")
    for config in sweep.compilation_configs:
        size = _capture_size(config)
        if size is not None:
            stated["max_cudagraph_capture_size"].setdefault(size, "the records' compilation_config")
    return stated


def _facts(sweep: Sweep, saved_servers: SavedServers) -> tuple[EngineFacts, tuple[Problem, ...]]:
    saved, problems = saved_servers
    found: dict[str, Fact] = {}
    warnings = list(problems)
    from_saved = _saved_values(saved)
    for target, recorded in _recorded_values(sweep).items():
        values = recorded or from_saved.get(target, {})
        if not values:
            continue
        chosen = max(values) if target == "max_num_seqs" else min(values)
        found[target] = Fact(chosen, values[chosen])
        if len(values) > 1:
            warnings.append(
                Problem(
                    Severity.WARNING,
                    "servers-differ",
                    f"the sweep's servers differ in {target}: {sorted(values)}; the capture"
                    f" rule is checked with {chosen}",
                    field=target,
                )
            )
    return EngineFacts(**found), tuple(warnings)


@functools.lru_cache(maxsize=16)
def _facts_of(sweep: Sweep) -> tuple[EngineFacts, tuple[Problem, ...]]:
    """:func:`_facts` with the sweep's saved configs read here, once per sweep (sweeps compare
    by identity): the app checks the schedule again on every change of a setting, and builds
    its downloads from the same facts."""
    return _facts(sweep, read_server_settings(sweep.root))


def sweep_engine_facts(
    sweep: Sweep, saved_servers: SavedServers | None = None
) -> tuple[EngineFacts, list[Problem]]:
    """The server settings the sweep states: its records' (:data:`~lib.settings.ENGINE_FIELDS`,
    a ``compilation_config``), else the server configs it saved (``server_info.json``, written
    by ``tune-spec-k plan``'s run script; ``saved_servers``: already read, as the CLI's reader
    child does). One value each, or, where servers differ, the safest (the smallest C, the
    largest max_num_seqs) with a warning naming the values."""
    facts, problems = _facts_of(sweep) if saved_servers is None else _facts(sweep, saved_servers)
    return facts, list(problems)


@dataclasses.dataclass(frozen=True)
class Deployment:
    """The capture check of a tuning and the measured cells past its ceiling."""

    check: CeilingCheck
    past_ceiling: tuple[tuple[int, int], ...]
    anchors: tuple[int, ...] = ()

    def boundaries(self) -> list[dict[str, Any]]:
        """An anchor to measure at each capture boundary the schedule crosses: the first batch
        size past the ceiling for the tuned K (a graphless range's start, or a capped range's),
        with the Ks that decide it (the tuned K and, where capped, the capped K); none where
        that batch size is already an anchor."""
        found: dict[int, set[int]] = {}
        for stretch in self.check.graphless:
            found.setdefault(stretch.lo, set()).add(stretch.k)
        for capped in self.check.capped:
            found.setdefault(capped.lo, set()).update((capped.measured_k, capped.capped_k))
        size = self.check.ceiling.size
        return [
            {
                "batch_size": batch,
                "ks": sorted(ks),
                "reason": f"the capture boundary: K={max(ks)} at {batch} runs"
                f" {tokens_per_step(batch, max(ks))} tokens per step, past C={size}",
            }
            for batch, ks in sorted(found.items())
            if batch not in self.anchors
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            **self.check.to_json(),
            "cells_past_ceiling": [
                {"batch_size": b, "k": k, "tokens": tokens_per_step(b, k)}
                for b, k in self.past_ceiling
            ],
            "anchors_to_measure": self.boundaries(),
        }

    def problems(self, past_means: str) -> list[Problem]:
        """A warning per finding of the check, and one naming the cells measured past the
        ceiling (``past_means``: what that makes of their numbers)."""
        found = [Problem(Severity.WARNING, f.rule, f.line) for f in self.check.findings()]
        if self.past_ceiling:
            ceiling = self.check.ceiling
            cells = ", ".join(
                f"batch {b} K={k} ({tokens_per_step(b, k)} tokens)" for b, k in self.past_ceiling
            )
            found.append(
                Problem(
                    Severity.WARNING,
                    "measured-past-capture-ceiling",
                    f"measured past the CUDA-graph capture ceiling C={ceiling.size}"
                    f" ({'from ' + ceiling.source if ceiling.known else ceiling.source}), so"
                    f" without CUDA graphs: {cells}; {past_means}",
                )
            )
        return found

    def lines(self) -> list[str]:
        """What ``tune`` prints of it, after the seed's lines."""
        return [
            self.check.summary(),
            *(
                f"  {line}"
                for line in self.check.warnings()
                if line.startswith("capped, not measured")
            ),
            *(
                f"  measure next: batch size {row['batch_size']}, K={row['ks']}: {row['reason']}"
                for row in self.boundaries()
            ),
        ]


def deploy_analysis(
    analysis: Analysis,
    deploy: DeploySettings,
    sweep_facts: EngineFacts | None = None,
    fact_problems: list[Problem] | None = None,
) -> tuple[Analysis, Deployment | None]:
    """The analysis with its schedule checked (and, C known, capped) and its verdict
    (:func:`lib.deploy.verdict.verdict_of`, the result's ``verdict`` addition, last); the
    deployment is None when there is no schedule to deploy. ``sweep_facts`` and
    ``fact_problems``: :func:`sweep_engine_facts` of the sweep, when already found."""
    deployed, deployment = _checked(analysis, deploy, sweep_facts, fact_problems)
    verdict = verdict_of(deployed, deployment.check if deployment is not None else None)
    result = deployed.result
    judged = dataclasses.replace(result, additions={**result.additions, "verdict": verdict})
    return dataclasses.replace(deployed, result=judged), deployment


def _checked(
    analysis: Analysis,
    deploy: DeploySettings,
    sweep_facts: EngineFacts | None,
    fact_problems: list[Problem] | None,
) -> tuple[Analysis, Deployment | None]:
    """The analysis with its schedule checked by the capture rule (see deploy_analysis)."""
    result = analysis.result
    invalid = [Problem(Severity.ERROR, "invalid-setting", reason) for reason in deploy.invalid()]
    if invalid:
        refused = dataclasses.replace(result, problems=(*result.problems, *invalid))
        return dataclasses.replace(analysis, result=refused), None
    if not result.ok or result.schedule is None:
        return analysis, None
    if sweep_facts is None:
        facts, problems = sweep_engine_facts(result.sweep)
    else:
        facts, problems = sweep_facts, list(fact_problems or [])
    decisions = decisions_of(result, facts, analysis.cliffs)
    global_k = result.deploy_global_k
    ceiling = ceiling_for(decisions, deploy, global_k)
    check = check_ceiling(
        result.schedule,
        ceiling,
        decisions.medians,
        decisions.maximize,
        global_k,
        not_interpolable=decisions.not_interpolable,
    )
    measured = result.cells.select("anchor", "k").rows()
    past = tuple(cells_past_ceiling(measured, ceiling.size))
    anchors = tuple(sorted({anchor for anchor, _ in measured}))
    deployment = Deployment(check, past, anchors)
    problems += deployment.problems("their numbers say nothing of a graph-captured step")
    problems += [
        Problem(Severity.WARNING, "schedule-disabled", line)
        for line in method_warnings(decisions.method)
    ]
    kept = result.problems
    if analysis.cliffs:
        hint = CeilingHint(ceiling.size, ceiling.known, ceiling.source)
        restated = iter(cliff_problems(analysis.cliffs, result.settings.objective, hint))
        kept = tuple(next(restated) if p.rule == CLIFF_RULE else p for p in result.problems)
    deployed = dataclasses.replace(
        result,
        schedule=check.schedule,
        additions={**result.additions, "deployment": deployment},
        problems=(*kept, *problems),
    )
    return dataclasses.replace(analysis, result=deployed), deployment
