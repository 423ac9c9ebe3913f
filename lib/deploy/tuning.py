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

import polars as pl

from lib.cliffs import CLIFF_RULE, CeilingHint, cliff_problems
from lib.context import in_context
from lib.deploy import releases
from lib.deploy.ceiling import (
    ASSUMED_GPU,
    CaptureCeiling,
    GpuAssumption,
    release_refusals,
    request_ceiling,
    tokens_per_step,
)
from lib.deploy.constraints import (
    CeilingCheck,
    cells_past_ceiling,
    check_ceiling,
    data_parallel_warnings,
    method_warnings,
    past_max_num_seqs,
)
from lib.deploy.decisions import Decisions, decisions_of
from lib.deploy.engine import EngineFacts, Fact, TextFact, VllmCap, gpu_of
from lib.deploy.registry import ceiling_for
from lib.deploy.releases import Release
from lib.deploy.verdict import verdict_of
from lib.keys import lookup, parse_json_string, whole_number
from lib.problems import Problem, Severity
from lib.server_info import SavedServers, ServerSettings, read_server_settings
from lib.settings import ENGINE_FIELDS, DeploySettings

if TYPE_CHECKING:
    from lib.analysis import Analysis
    from lib.context import ContextAnalysis
    from lib.schedule import TuningResult
    from lib.sweeps import Sweep

__all__ = [
    "Deployment",
    "anchors_above_max_num_seqs",
    "deploy_analysis",
    "deploy_contexts",
    "deployed_decisions",
    "sweep_engine_facts",
]


def _capture_size(config: dict[str, Any]) -> int | None:
    """The capture ceiling a ``compilation_config`` states: ``max_cudagraph_capture_size``,
    else the largest of ``cudagraph_capture_sizes``; None when it states neither. Each a whole
    number >= 1 as :func:`lib.keys.whole_number` reads one (``256.0`` is 256, as the saved
    server configs read it; a JSON string of a number is parsed); the keys in either spelling
    (``max-cudagraph-capture-size``, as vLLM's CLI writes it)."""
    size = whole_number(parse_json_string(lookup(config, "max_cudagraph_capture_size")))
    if size is not None and size >= 1:
        return size
    sizes = parse_json_string(lookup(config, "cudagraph_capture_sizes"))
    if isinstance(sizes, list) and sizes:
        wholes = [whole_number(s) for s in sizes]
        if all(w is not None and w >= 1 for w in wholes):
            return max(w for w in wholes if w is not None)
    return None


def _states_decode_graphs(server: ServerSettings) -> bool:
    """Whether a saved config is of a release that keys decode graphs by requests (vLLM 0.34:
    its version says so, or it has the decode fields), whose ``max_cudagraph_capture_size`` is
    the widest graph of any kind, not the decode ceiling (``ceiling_fields``)."""
    release = Release.parse(server.vllm_version) if server.vllm_version else None
    if release is not None:
        return "max_cudagraph_capture_size" not in releases.names("vllm", "ceiling_fields", release)
    return server.prefill_ceiling is not None


def _explicit_decode_requests(server: ServerSettings) -> int | None:
    """A saved 0.34 config's ``max_decode_cudagraph_capture_requests`` where it was set
    explicitly: it differs from what 0.34's defaults give that server (its C0, max_num_seqs,
    K and GPU: :func:`lib.deploy.ceiling.request_ceiling`); None where it is the default (the
    deployed schedule's own R is computed from its Ks) or not stated."""
    stated = server.max_decode_cudagraph_capture_requests
    if stated is None and server.decode_cudagraph_capture_request_sizes:
        stated = max(server.decode_cudagraph_capture_request_sizes)
    c0, seqs = server.prefill_ceiling, server.max_num_seqs
    if stated is None or c0 is None or seqs is None:
        return stated
    gpu = gpu_of(server.gpu_models) if server.gpu_models else ASSUMED_GPU
    server_ceiling = CaptureCeiling(
        c0, True, "", seqs, True, "", gpu=GpuAssumption(gpu, True, ""), engine_seqs=seqs
    )
    default = request_ceiling(server_ceiling, [server.num_speculative_tokens or 0])
    return None if stated == default else stated


def _saved_values(saved: list[ServerSettings]) -> dict[str, dict[int, str]]:
    """Each setting's values in the server configs the sweep saved (:mod:`lib.server_info`),
    with the file each was first read from: the capture ceiling C of a release that states it
    (0.33 and older), the token graphs' ceiling C0 and explicit decode settings of 0.34."""
    values: dict[str, dict[int, str]] = {}
    for server in saved:
        size = server.max_cudagraph_capture_size
        if size is None and server.cudagraph_capture_sizes:
            size = max(server.cudagraph_capture_sizes)
        decode = _states_decode_graphs(server)
        for name, value in (
            ("max_cudagraph_capture_size", None if decode else size),
            ("max_num_seqs", server.max_num_seqs),
            ("max_num_batched_tokens", server.max_num_batched_tokens),
            ("prefill_ceiling", server.prefill_ceiling if decode else None),
            ("decode_requests", _explicit_decode_requests(server) if decode else None),
            ("decode_tokens", server.max_decode_cudagraph_capture_tokens if decode else None),
            ("data_parallel_size", server.data_parallel_size),
        ):
            if value is not None and value >= 1:
                values.setdefault(name, {}).setdefault(
                    value, f"the saved server config {server.source}"
                )
    return values


def _saved_texts(saved: list[ServerSettings]) -> dict[str, dict[str, str]]:
    """The vLLM versions and GPU names the saved server configs state, each with the file it
    was first read from."""
    texts: dict[str, dict[str, str]] = {}
    for server in saved:
        for name, value in (("vllm_version", server.vllm_version), ("gpu", server.gpu_models)):
            if value is not None:
                texts.setdefault(name, {}).setdefault(
                    value, f"the saved server config {server.source}"
                )
    return texts


def _recorded_values(sweep: Sweep) -> dict[str, dict[int, str]]:
    """Each setting's values in the sweep's records: the :data:`~lib.settings.ENGINE_FIELDS`
    columns, then the capture ceiling of each ``compilation_config``."""
    stated: dict[str, dict[int, str]] = {setting: {} for setting in ENGINE_FIELDS}
    for setting, names in ENGINE_FIELDS.items():
        for name in names:
            if name not in sweep.runs.columns:
                continue
            for value in sweep.runs[name].drop_nulls().unique().sort().to_list():
                number = whole_number(value)
                if number is not None and number >= 1:
                    stated[setting].setdefault(number, f"the records' {name}")
    for config in sweep.compilation_configs:
        size = _capture_size(config)
        if size is not None:
            stated["max_cudagraph_capture_size"].setdefault(size, "the records' compilation_config")
    return stated


def _folder(source: str) -> str:
    """The folder of a file named relative to the experiment (``""`` for its root)."""
    return source.rsplit("/", 1)[0] if "/" in source else ""


def _folder_and_above(folder: str) -> list[str]:
    """``folder`` (relative, ``/``-separated; ``""`` the experiment's root) and every folder
    above it, the root included.

    >>> _folder_and_above("a/b"), _folder_and_above("")
    (['', 'a', 'a/b'], [''])
    """
    parts = folder.split("/") if folder else []
    return ["/".join(parts[:depth]) for depth in range(len(parts) + 1)]


def anchors_above_max_num_seqs(sweep: Sweep, saved: list[ServerSettings]) -> list[Problem]:
    """A warning ``max-num-seqs-below-anchor`` per anchor some of whose runs ran on a server
    whose ``max_num_seqs`` was below it (:func:`~lib.deploy.constraints.past_max_num_seqs`): the
    run's own record (:data:`~lib.settings.ENGINE_FIELDS`), else a saved server config in the run's
    combo folder or a folder above it (one at the experiment's root: every run). Each names the
    smallest such ``max_num_seqs`` and where it was stated, every file of a run below the anchor,
    and what was expected."""
    runs = sweep.runs
    if "anchor" not in runs.columns or "source" not in runs.columns:
        return []
    columns = [name for name in ENGINE_FIELDS["max_num_seqs"] if name in runs.columns]
    by_folder: dict[str, list[tuple[int, str]]] = {}
    for server in saved:
        if server.max_num_seqs is not None:
            by_folder.setdefault(_folder(server.source), []).append(
                (server.max_num_seqs, f"the saved server config {server.source}")
            )
    if not columns and not by_folder:
        return []
    # Per distinct (anchor, folder, recorded values), not per run: the rule reads no more.
    placed = runs.filter(pl.col("anchor").is_not_null()).with_columns(
        pl.col("source").str.extract(r"^(.*)/[^/]*$", 1).fill_null("").alias("_folder")
    )
    keys = ["anchor", "_folder", *columns]
    chosen_below: list[tuple[dict[str, Any], tuple[int, str]]] = []
    for key in placed.select(keys).unique(maintain_order=True).to_dicts():
        found = [
            (number, f"the records' {name}")
            for name in columns
            if (number := whole_number(key[name])) is not None and number >= 1
        ]
        if by_folder:
            found += [
                s for folder in _folder_and_above(key["_folder"]) for s in by_folder.get(folder, [])
            ]
        if not found:
            continue
        # The records' own value wins; among saved configs, the largest (the safest reading).
        records = [f for f in found if f[1].startswith("the records'")]
        chosen = max(records or found)
        if past_max_num_seqs(key["anchor"], chosen[0]):
            chosen_below.append((key, chosen))
    # Per anchor below its servers: the smallest max_num_seqs met, where it was first stated,
    # and every file of a run below the anchor (read only for those).
    below: dict[int, tuple[tuple[int, str], dict[str, None]]] = {}
    for key, chosen in chosen_below:
        matching = placed.filter(
            pl.all_horizontal(
                [
                    pl.col(name).is_null() if key[name] is None else pl.col(name) == key[name]
                    for name in keys
                ]
            )
        )
        smallest, files = below.setdefault(key["anchor"], (chosen, {}))
        files.update(dict.fromkeys(matching["source"].to_list()))
        if chosen[0] < smallest[0]:
            below[key["anchor"]] = (chosen, files)
    problems = []
    for anchor in sorted(below):
        (seqs, where), files = below[anchor]
        problems.append(
            Problem(
                Severity.WARNING,
                "max-num-seqs-below-anchor",
                f"runs at batch size {anchor} ran on a server with max_num_seqs={seqs} (from"
                f" {where}): it never ran {anchor} requests at once (the rest waited), so these"
                " numbers describe a smaller batch than the anchor",
                files=tuple(files),
                field="max_num_seqs",
                value=str(seqs),
                anchor=anchor,
                expected=f">= {anchor} (the anchor)",
            )
        )
    return problems


def _facts(sweep: Sweep, saved_servers: SavedServers) -> tuple[EngineFacts, tuple[Problem, ...]]:
    saved, problems = saved_servers
    found: dict[str, Any] = {}  # EngineFacts' fields that are a Fact
    warnings = list(problems)
    warnings += anchors_above_max_num_seqs(sweep, saved)
    from_saved = _saved_values(saved)
    recorded = _recorded_values(sweep)
    for target in (
        *recorded,
        "prefill_ceiling",
        "decode_requests",
        "decode_tokens",
        "data_parallel_size",
    ):
        values = recorded.get(target) or from_saved.get(target, {})
        if not values:
            continue
        # The largest data parallelism: one server above 1 runs without the schedule.
        chosen = max(values) if target in ("max_num_seqs", "data_parallel_size") else min(values)
        found[target] = Fact(chosen, values[chosen])
        if len(values) > 1:
            warnings.append(_differ(target, sorted(values), str(chosen)))
    texts: dict[str, TextFact] = {}
    for target, stated in _saved_texts(saved).items():
        chosen_text = sorted(stated)[0]
        texts[target] = TextFact(chosen_text, stated[chosen_text])
        if len(stated) > 1:
            warnings.append(_differ(target, sorted(stated), chosen_text))
    return EngineFacts(
        **found, vllm_version=texts.get("vllm_version"), gpu=texts.get("gpu")
    ), tuple(warnings)


def _differ(target: str, values: list[Any], chosen: str) -> Problem:
    return Problem(
        Severity.WARNING,
        "servers-differ",
        f"the sweep's servers differ in {target}: {values}; the capture rule is checked with"
        f" {chosen}",
        field=target,
    )


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
        size = f"{self.check.ceiling.name}={self.check.ceiling.size}"
        return [
            {
                "batch_size": batch,
                "ks": sorted(ks),
                "reason": f"the capture boundary: K={max(ks)} at {batch} runs"
                f" {tokens_per_step(batch, max(ks))} tokens per step, past {size}",
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
        found = [
            Problem(Severity.NOTE if f.note else Severity.WARNING, f.rule, f.line)
            for f in self.check.findings()
        ]
        if self.past_ceiling:
            ceiling = self.check.ceiling
            cells = ", ".join(
                f"batch {b} K={k} ({tokens_per_step(b, k)} tokens)" for b, k in self.past_ceiling
            )
            found.append(
                Problem(
                    Severity.WARNING,
                    "measured-past-capture-ceiling",
                    f"measured past the CUDA-graph capture ceiling {ceiling.name}={ceiling.size}"
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


def deploy_contexts(
    grid: ContextAnalysis,
    deploy: DeploySettings,
    sweep_facts: EngineFacts | None = None,
    fact_problems: list[Problem] | None = None,
) -> ContextAnalysis:
    """A context analysis deployed as a batch-only one is: every context point's analysis
    (:func:`deploy_analysis`, the same ceiling for all: the flags, else what the sweep recorded
    or saved, else vLLM's defaults) and the answer (the seed keys' batch-only schedule: the
    pooled analysis or the shortest point's), so that the schedule printed and written is the
    capped one, each point's verdict holds the batch rules (capture, unmeasured switches,
    cliffs, ...) and the grid's verdict (:func:`lib.deploy.verdict.context_verdict`) counts
    them. What the deployment adds to a point's problems is added to the grid's, saying which
    point; the sweep's own fact problems are added once."""
    sweep = grid.pooled.result.sweep
    if sweep_facts is None:
        sweep_facts, fact_problems = sweep_engine_facts(sweep)
    contexts = tuple(deploy_analysis(point, deploy, sweep_facts, [])[0] for point in grid.contexts)
    added: list[Problem] = list(fact_problems or [])
    for point, before, after in zip(grid.axis.points, grid.contexts, contexts, strict=True):
        added += [in_context(problem, point) for problem in _added(before, after)]
    pooled = grid.pooled
    if grid.answer is grid.pooled:
        pooled = deploy_analysis(grid.pooled, deploy, sweep_facts, [])[0]
        added += _added(grid.pooled, pooled)
    answer = pooled if grid.answer is grid.pooled else None
    if grid.answer is not None and answer is None:
        answer = contexts[grid.contexts.index(grid.answer)]
    return dataclasses.replace(
        grid,
        pooled=pooled,
        contexts=contexts,
        answer=answer,
        problems=(*grid.problems, *added),
    )


def _added(before: Analysis, after: Analysis) -> list[Problem]:
    """The problems the deployment added to an analysis (it appends; restated cliff warnings
    replace theirs in place and are not new)."""
    return list(after.result.problems[len(before.result.problems) :])


def _checked(
    analysis: Analysis,
    deploy: DeploySettings,
    sweep_facts: EngineFacts | None,
    fact_problems: list[Problem] | None,
) -> tuple[Analysis, Deployment | None]:
    """The analysis with its schedule checked by the capture rule (see deploy_analysis)."""
    result = analysis.result
    invalid = [
        Problem(Severity.ERROR, "invalid-setting", reason)
        for reason in (*deploy.invalid(), *release_refusals(deploy.vllm_version))
    ]
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
        for line in (
            *method_warnings(decisions.method, ceiling),
            *data_parallel_warnings(facts, ceiling),
        )
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


def deployed_decisions(result: TuningResult, engine: EngineFacts | None = None) -> Decisions:
    """The decisions of a tuning :func:`deploy_analysis` deployed (``engine``: the sweep's
    facts, :func:`sweep_engine_facts`, when already found): its schedule as deployed on
    vLLM and, where the capture check capped it (C known), the cap
    (:class:`~lib.deploy.engine.VllmCap`: the schedule as tuned, C and its source), so that
    every other engine is given the tuned schedule (:func:`lib.deploy.registry.engine_decisions`),
    as ``export`` of the result file gives it."""
    if engine is None:
        engine, _ = sweep_engine_facts(result.sweep)
    deployment = result.additions.get("deployment")
    if isinstance(deployment, Deployment):
        # The release the check applied, where stated (a flag, the sweep), as the result
        # file records it: an export from memory and one from the file read the same rules.
        vllm = deployment.check.ceiling.vllm
        if vllm is not None and vllm.known and engine.vllm_version is None:
            engine = dataclasses.replace(
                engine, vllm_version=TextFact(str(vllm.release), vllm.source)
            )
    cap = None
    if isinstance(deployment, Deployment) and deployment.check.changed:
        check = deployment.check
        tuned = check.tuned if check.tuned is not None else check.schedule
        cap = VllmCap(tuned, check.ceiling.size, check.ceiling.source)
    return decisions_of(result, engine, vllm_cap=cap)
