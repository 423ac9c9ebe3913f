"""What a deployment needs of a tuning, as typed data: :class:`Decisions`.

Two ways in, one type out:

- :func:`decisions_of`: a :class:`~lib.schedule.TuningResult` in memory (the CLI's ``tune``, the
  app), with the measured medians of its kept cells;
- :func:`decisions_from_json` / :func:`read_decisions`: any file holding a schedule (a result
  JSON of tune-spec-k or the seed, a ``speculative_config``, a bare ``[[lo, hi, K], ...]`` list,
  a TensorRT-LLM ``draft_len_schedule`` with or without ``max_draft_len``, an SGLang adaptive
  config): each registered format reads back its own files (:attr:`EngineFormat.read
  <lib.deploy.registry.EngineFormat.read>`); a result JSON's batch decisions give the medians,
  its ``deployment`` block the capture ceiling it was tuned under, its ``context_grid`` the
  grid (read by :func:`lib.context_formats.context_grid_of`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lib.deploy.constraints import EngineFacts, Fact
from lib.files import read_json
from lib.keys import MISSING, whole_number
from lib.problems import Problem, Severity
from lib.schedule import Schedule

if TYPE_CHECKING:
    from lib.context import ContextAnalysis
    from lib.context_formats import ContextGrid
    from lib.schedule import TuningResult

__all__ = [
    "SCHEDULE_KEY",
    "Decisions",
    "context_decisions",
    "decisions_from_json",
    "decisions_of",
    "grid_decisions",
    "read_decisions",
    "result_json_decisions",
    "stated_k",
]

#: vLLM's field for the schedule (also the seed's first output key).
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"


@dataclass(frozen=True)
class Decisions:
    """A schedule and the evidence behind it, ready for any engine format.

    ``global_k``: the engine's startup maximum the source states (vLLM's
    ``num_speculative_tokens``, TensorRT-LLM's ``max_draft_len``), None when it states none.
    ``medians``: per batch-size anchor, each kept K's median objective (empty when the source
    has no measurements, e.g. a bare list). ``speculative_config``: the draft settings every
    speculative run shared (``method``, ``model``, ...), empty when unknown. ``engine``: the
    server settings the source was tuned under (the capture ceiling). ``result``: the parsed
    result JSON, for the context formats (its ``context_grid``); None otherwise.
    """

    schedule: Schedule
    global_k: int | None
    kind: str
    source: str
    medians: Mapping[int, Mapping[int, float]] = field(default_factory=dict)
    maximize: bool = True
    speculative_config: Mapping[str, Any] = field(default_factory=dict)
    engine: EngineFacts = field(default_factory=EngineFacts)
    result: Mapping[str, Any] | None = None
    #: The (batch x context) grid, typed, when the source is a context analysis in memory.
    grid: ContextGrid | None = None

    @property
    def method(self) -> str | None:
        """The speculative method the sweep recorded (lower case), or None."""
        method = self.speculative_config.get("method")
        return method.lower() if isinstance(method, str) else None

    @property
    def largest_k(self) -> int:
        return self.schedule.largest_k

    def engine_k(self, given: int | None = None) -> int:
        """The startup maximum to deploy with: ``given`` (a flag), else the source's, else the
        schedule's largest K; at least 1 (vLLM's minimum)."""
        return given or self.global_k or max(self.largest_k, 1)


def _medians_of_cells(result: TuningResult) -> dict[int, dict[int, float]]:
    """Per anchor, each kept cell's finite median."""
    medians: dict[int, dict[int, float]] = {}
    kept = result.cells.filter(result.cells["status"] == "kept")
    for anchor, k, median in kept.select("anchor", "k", "median").rows():
        if isinstance(median, float) and math.isfinite(median):
            medians.setdefault(anchor, {})[k] = median
    return medians


def decisions_of(result: TuningResult, engine: EngineFacts | None = None) -> Decisions:
    """The decisions of a tuning in memory (its schedule must exist: ``result.ok``)."""
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
    )


def context_decisions(analysis: ContextAnalysis) -> Decisions:
    """The decisions of a context analysis in memory, for the context formats: its typed grid
    (:attr:`lib.context.ContextAnalysis.typed_grid`); a grid that cannot be exported goes
    through the result JSON's reader, which says why."""
    grid, _ = analysis.typed_grid
    source = "the result"
    if grid is None:
        return Decisions(Schedule(()), None, "result JSON", source, result=analysis.to_json())
    return Decisions(Schedule(()), grid.global_k, "context analysis", source, grid=grid)


def stated_k(value: Any) -> int | None:
    """A file's global K (``num_speculative_tokens``, ``max_draft_len``): a JSON integer as
    written, else None (a text, a boolean, a float is no K)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _whole(value: Any) -> int | None:
    """A JSON integer within tune-spec-k's limit on any count, else None."""
    return None if stated_k(value) is None else whole_number(value)


def _result_medians(data: Mapping[str, Any]) -> dict[int, dict[int, float]]:
    """Per anchor, each candidate's median objective from a result's ``batch_decisions``
    (entries that are not well formed are skipped: the schedule, not the evidence, is read)."""
    medians: dict[int, dict[int, float]] = {}
    decisions = data.get("batch_decisions")
    if not isinstance(decisions, list):
        return medians
    for decision in decisions:
        candidates = decision.get("candidates") if isinstance(decision, dict) else None
        for candidate in candidates if isinstance(candidates, list) else []:
            if not isinstance(candidate, dict):
                continue
            anchor, k = _whole(candidate.get("batch_size")), _whole(candidate.get("k"))
            median = candidate.get("median_objective")
            if (
                anchor is not None
                and k is not None
                and isinstance(median, int | float)
                and not isinstance(median, bool)
                and math.isfinite(median)
            ):
                medians.setdefault(anchor, {})[k] = float(median)
    return medians


def _engine_of_result(data: Mapping[str, Any]) -> EngineFacts:
    """The capture ceiling a result was tuned under, when it was stated (not assumed)."""
    block = data.get("deployment")
    ceiling = block.get("capture_ceiling") if isinstance(block, dict) else None
    if not isinstance(ceiling, dict):
        return EngineFacts()
    facts: dict[str, Fact] = {}
    for name, known in (("size", "known"), ("max_num_seqs", "max_num_seqs_known")):
        value = _whole(ceiling.get(name))
        if value is not None and value >= 1 and ceiling.get(known) is True:
            target = "max_cudagraph_capture_size" if name == "size" else name
            source = ceiling.get("source" if name == "size" else "max_num_seqs_source")
            facts[target] = Fact(value, f"the result's {source}")
    return EngineFacts(**facts)


def result_json_decisions(
    data: Mapping[str, Any], schedule: Schedule, global_k: int | None, source: str
) -> Decisions:
    """A result JSON's decisions: its schedule and global K (read by the vLLM format), and what
    else it holds (medians, direction, draft settings, the ceiling, the grid)."""
    selection = data.get("selection")
    direction = selection.get("objective_direction") if isinstance(selection, dict) else None
    config = data.get("speculative_config")
    shared = {
        key: value
        for key, value in (config.items() if isinstance(config, dict) else ())
        if key not in ("num_speculative_tokens", SCHEDULE_KEY)
        and not (key == "method" and value == "<method>")
    }
    return Decisions(
        schedule=schedule,
        global_k=global_k,
        kind="result JSON" if "batch_decisions" in data else "vLLM speculative_config",
        source=source,
        medians=_result_medians(data),
        maximize=direction != "minimize",
        speculative_config=shared,
        engine=_engine_of_result(data),
        result=data if "context_grid" in data else None,
    )


def decisions_from_json(data: Any, source: str) -> tuple[Decisions | None, list[Problem]]:
    """The decisions in a parsed file: each registered format's reader is tried in listing
    order; the first that recognises the file reads it (its own errors are the file's); a file
    none recognises is a ``no-schedule`` error listing what was expected."""
    from lib.deploy.registry import formats

    for engine_format in formats():
        if engine_format.read is None:
            continue
        read = engine_format.read(data, source)
        if read is None:
            continue
        decisions, reason = read
        if decisions is None:
            return None, [Problem(Severity.ERROR, "no-schedule", reason, files=(source,))]
        return decisions, []
    expected = ", ".join(f.reads for f in formats() if f.read is not None)
    keys = sorted(data)[:8] if isinstance(data, dict) else None
    found = f"; keys: {keys}" if keys is not None else ""
    message = (
        f"no schedule found (expected {expected}){found}"
        if isinstance(data, dict | list)
        else "expected a JSON object or a [[lo, hi, K], ...] list"
    )
    return None, [Problem(Severity.ERROR, "no-schedule", message, files=(source,))]


def grid_decisions(data: Any, source: str) -> tuple[Decisions | None, list[Problem]]:
    """The decisions a context format reads: the result JSON itself, its batch schedule
    optional (the grid is what counts; :func:`lib.deploy.grid.build_context_format` says when
    there is none)."""
    if not isinstance(data, dict):
        message = "expected a JSON object (a result JSON with a context_grid)"
        return None, [Problem(Severity.ERROR, "no-schedule", message, files=(source,))]
    found, _ = decisions_from_json(data, source)
    if found is not None and found.result is not None:
        return found, []
    kind = found.kind if found is not None else "JSON object without a schedule"
    return Decisions(Schedule(()), None, kind, source, result=None), []


def read_decisions(
    path: str | Path, for_grid: bool = False
) -> tuple[Decisions | None, list[Problem]]:
    """:func:`decisions_from_json` (:func:`grid_decisions` with ``for_grid``) of a file, or
    None and why it could not be read."""
    data, problems = read_json(path)
    if data is MISSING:
        return None, problems
    return (grid_decisions if for_grid else decisions_from_json)(data, str(path))
