"""What a deployment needs of a tuning, as typed data: :class:`Decisions`.

Two ways in, one type out:

- :func:`decisions_of`: a :class:`~lib.schedule.TuningResult` in memory (the CLI's ``tune``, the
  app), with the measured medians of its kept cells;
- :func:`result_decisions`: a result JSON read by the one typed reader
  (:func:`lib.deploy.result_file.result_file_of`), its medians, capture ceiling and grid kept.
  Any other file holding a schedule (a ``speculative_config``, a bare ``[[lo, hi, K], ...]``
  list, a TensorRT-LLM ``draft_len_schedule``, an SGLang adaptive config) is read back by its
  format (:attr:`EngineFormat.read <lib.deploy.engine_format.EngineFormat.read>`), each tried
  in turn by :func:`lib.deploy.registry.read_decisions`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lib.cliffs import find_cliffs
from lib.deploy import releases
from lib.deploy.engine import EngineFacts, VllmCap
from lib.deploy.result_file import ResultFile
from lib.keys import stated_k
from lib.problems import Problem
from lib.schedule import Schedule

if TYPE_CHECKING:
    from lib.cliffs import Cliff
    from lib.context import ContextAnalysis
    from lib.context_grid import ContextGrid
    from lib.schedule import TuningResult

__all__ = [
    "SCHEDULE_KEY",
    "Decisions",
    "context_decisions",
    "decisions_of",
    "result_decisions",
]

#: vLLM's field for the schedule (``schedule_field``; also the seed's first output key).
SCHEDULE_KEY = releases.text("vllm", "schedule_field", releases.newest("vllm"))
#: vLLM's field for the startup maximum K (the global K).
GLOBAL_K_KEY = "num_speculative_tokens"


@dataclass(frozen=True)
class Decisions:
    """A schedule and the evidence behind it, ready for any engine format.

    ``global_k``: the engine's startup maximum the source states (vLLM's
    ``num_speculative_tokens``, TensorRT-LLM's ``max_draft_len``), None when it states none.
    ``medians``: per batch-size anchor, each kept K's median objective (empty when the source
    has no measurements, e.g. a bare list). ``speculative_config``: the draft settings every
    speculative run shared (``method``, ``model``, ...), empty when unknown. ``engine``: the
    server settings the source was tuned under (the capture ceiling). ``grid``: the
    (batch x context) grid, typed, for the context formats; ``grid_problems``: why a source
    that has a grid cannot give one (empty when it has none at all). ``not_interpolable``:
    (lower anchor, upper anchor, K) where K falls off a cross-anchor cliff (:mod:`lib.cliffs`),
    so no estimate between those anchors reads a line through K's medians. ``vllm_cap``: where
    ``schedule`` is the tuned schedule capped to vLLM's CUDA-graph capture ceiling (tune's
    deployment, C known), the tuned one and the ceiling; None where nothing was capped. Only
    vLLM's formats build from the capped ``schedule``
    (:func:`lib.deploy.registry.engine_decisions`).
    """

    schedule: Schedule
    global_k: int | None
    kind: str
    source: str
    medians: Mapping[int, Mapping[int, float]] = field(default_factory=dict)
    maximize: bool = True
    speculative_config: Mapping[str, Any] = field(default_factory=dict)
    engine: EngineFacts = field(default_factory=EngineFacts)
    grid: ContextGrid | None = None
    grid_problems: tuple[Problem, ...] = ()
    not_interpolable: frozenset[tuple[int, int, int]] = frozenset()
    vllm_cap: VllmCap | None = None

    @property
    def method(self) -> str | None:
        """The speculative method the sweep recorded (lower case), or None."""
        method = self.speculative_config.get("method")
        return method.lower() if isinstance(method, str) else None

    @property
    def largest_k(self) -> int:
        return self.schedule.largest_k

    def engine_k(self, given: int | None = None) -> int:
        """The startup maximum to deploy with: ``given`` (a flag) as given, else the source's
        when >= 1, else the schedule's largest K and at least 1 (vLLM's minimum). A given 0
        is the flag's, never "not given": :func:`lib.deploy.registry.export` refuses it first
        (:func:`lib.deploy.engine_format.given_global_k_problem`)."""
        if given is not None:
            return given
        if self.global_k is not None and self.global_k >= 1:
            return self.global_k
        return max(self.largest_k, 1)


def _medians_of_cells(result: TuningResult) -> dict[int, dict[int, float]]:
    """Per anchor, each kept cell's finite median."""
    medians: dict[int, dict[int, float]] = {}
    kept = result.cells.filter(result.cells["status"] == "kept")
    for anchor, k, median in kept.select("anchor", "k", "median").rows():
        if isinstance(median, float) and math.isfinite(median):
            medians.setdefault(anchor, {})[k] = median
    return medians


def decisions_of(
    result: TuningResult,
    engine: EngineFacts | None = None,
    cliffs: Iterable[Cliff] | None = None,
    vllm_cap: VllmCap | None = None,
) -> Decisions:
    """The decisions of a tuning in memory (its schedule must exist: ``result.ok``), with the
    stretches its ``cliffs`` make not interpolable (None: :func:`lib.cliffs.find_cliffs` of
    ``result``, for a caller that has not found them) and, where ``result``'s schedule is
    capped for vLLM, the cap (:func:`lib.deploy.tuning.deployed_decisions` finds it)."""
    if cliffs is None:
        cliffs = find_cliffs(result)
    assert result.schedule is not None, "no schedule to deploy"
    shared = {
        key: value
        for key, value in result.speculative_config().items()
        if key not in ("num_speculative_tokens", SCHEDULE_KEY)
    }
    if shared.get("method") == "<method>":
        shared.pop("method")
    return Decisions(
        schedule=result.schedule,
        global_k=result.deploy_global_k,
        kind="tune-spec-k result",
        source=str(result.sweep.root),
        medians=_medians_of_cells(result),
        maximize=result.settings.maximize,
        speculative_config=shared,
        engine=engine or EngineFacts(),
        not_interpolable=frozenset(cliff.stretch for cliff in cliffs),
        vllm_cap=vllm_cap,
    )


def context_decisions(analysis: ContextAnalysis) -> Decisions:
    """The decisions of a context analysis in memory, for the context formats: its typed grid
    (:attr:`lib.context.ContextAnalysis.typed_grid`), or why it cannot be exported."""
    grid, problems = analysis.typed_grid
    global_k = grid.global_k if grid is not None else None
    return Decisions(
        Schedule(()),
        global_k,
        "context analysis",
        "the result",
        grid=grid,
        grid_problems=tuple(problems),
    )


def result_decisions(result: ResultFile) -> Decisions:
    """A result file's decisions: its schedule (empty where the file has null), the global K it
    states (the sweep's, else its ``speculative_config``'s), each candidate's median, the
    direction, the draft settings, the ceiling it was tuned under, the cap it took for vLLM
    and its grid."""
    config = result.speculative_config or {}
    shared = {
        key: value
        for key, value in config.items()
        if key not in ("num_speculative_tokens", SCHEDULE_KEY)
        and not (key == "method" and value == "<method>")
    }
    global_k = result.configured_global_k
    if global_k is None:
        global_k = stated_k(config.get("num_speculative_tokens"))
    return Decisions(
        schedule=result.schedule or Schedule(()),
        global_k=global_k,
        kind="result JSON",
        source=result.source,
        medians=result.medians(),
        maximize=result.direction != "minimize",
        speculative_config=shared,
        engine=result.engine,
        grid=result.grid,
        grid_problems=result.grid_problems,
        not_interpolable=result.not_interpolable,
        vllm_cap=result.vllm_cap,
    )
