"""vLLM's Dynamic SD fields: ``num_speculative_tokens`` and
``num_speculative_tokens_per_batch_size`` (docs/formats.md, "vLLM").

Rules: vLLM's validator (:func:`lib.schedule.validate_schedule`); a global K at or above the
schedule's largest K (vLLM would clamp the schedule silently); the CUDA-graph capture rule
(:func:`lib.deploy.constraints.check_ceiling`): capped where C is known, named where it is
assumed. It reads back a result JSON (tune-spec-k's or the seed's), a ``speculative_config``
or a bare ``[[lo, hi, K], ...]`` list.
"""

from __future__ import annotations

from typing import Any

from lib.deploy.ceiling import CaptureCeiling
from lib.deploy.constraints import check_ceiling, data_parallel_warnings, method_warnings
from lib.deploy.decisions import SCHEDULE_KEY, Decisions, result_decisions
from lib.deploy.engine_format import (
    VLLM_ENGINE_FLAGS,
    BatchExport,
    EngineFormat,
    Exported,
    global_k_problem,
)
from lib.deploy.result_file import is_result, result_file_of
from lib.deploy.settings import ExportSettings
from lib.keys import stated_k
from lib.problems import Problem
from lib.schedule import Schedule

__all__ = ["FORMAT", "build", "read"]

_GLOBAL_KEY = "num_speculative_tokens"


def read(data: Any, source: str) -> tuple[Decisions | None, str] | None:
    """A vLLM schedule in ``data``: a result JSON (tune-spec-k's or the seed's, read by
    :func:`lib.deploy.result_file.result_file_of`), a bare list, a dict with the schedule field
    (a ``speculative_config``), or a dict whose ``speculative_config`` has it; the global K from
    ``num_speculative_tokens``, else the nested config's. None: not vLLM's."""
    if is_result(data):
        result, problems = result_file_of(data, source)
        if result is None:
            return None, "; ".join(problem.message for problem in problems)
        if result.schedule is None:
            return None, (
                f"the result's {SCHEDULE_KEY} is null: its context grid has no batch-only"
                " schedule; export it with a context format (--format vllm-context)"
            )
        return result_decisions(result), ""
    if isinstance(data, list):
        schedule, violations = Schedule.parse(data)
        if schedule is None:
            return None, "not a valid vLLM schedule: " + "; ".join(violations)
        return Decisions(schedule, None, "vLLM schedule", source), ""
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("speculative_config"), dict) and SCHEDULE_KEY not in data:
        return read(data["speculative_config"], source)
    if SCHEDULE_KEY not in data:
        return None
    schedule, violations = Schedule.parse(data[SCHEDULE_KEY])
    if schedule is None:
        return None, "not a valid vLLM schedule: " + "; ".join(violations)
    global_k = data.get(_GLOBAL_KEY)
    if global_k is None and isinstance(data.get("speculative_config"), dict):
        global_k = data["speculative_config"].get(_GLOBAL_KEY)
    shared = {k: v for k, v in data.items() if k not in (_GLOBAL_KEY, SCHEDULE_KEY)}
    return Decisions(
        schedule, stated_k(global_k), "vLLM speculative_config", source, speculative_config=shared
    ), ""


def build(
    decisions: Decisions, settings: ExportSettings, ceiling: CaptureCeiling | None
) -> tuple[Exported | None, list[Problem]]:
    """vLLM's two fields, the schedule checked by the capture rule; a global K below the
    schedule's largest K is refused."""
    assert ceiling is not None
    chosen = decisions.engine_k(settings.global_k)
    check = check_ceiling(
        decisions.schedule,
        ceiling,
        decisions.medians,
        decisions.maximize,
        chosen,
        not_interpolable=decisions.not_interpolable,
    )
    schedule = check.schedule
    if chosen < max(schedule.largest_k, 1):
        return None, [global_k_problem(chosen, schedule.largest_k, "schedule's")]
    config = {_GLOBAL_KEY: chosen, SCHEDULE_KEY: schedule.to_json()}
    return BatchExport(
        format=FORMAT.name,
        config=config,
        file=config,
        largest_k=schedule.largest_k,
        warnings=(
            *check.warnings(),
            *method_warnings(decisions.method, ceiling),
            *data_parallel_warnings(decisions.engine, ceiling),
        ),
        notes=(*check.notes(), *_assumed_release(ceiling)),
    ), []


def _assumed_release(ceiling: CaptureCeiling) -> list[str]:
    """A note naming the release whose capture rule the export was checked by, where it was
    assumed (the capture line and the verdict's ``assumes:`` say the same in ``tune``)."""
    assumption = ceiling.assumption()
    return [f"checked by {assumption}"] if assumption is not None else []


FORMAT = EngineFormat(
    name="vllm",
    label="vLLM (num_speculative_tokens_per_batch_size)",
    file_name="vllm_speculative_config.json",
    position=20,
    build=build,
    read=read,
    reads=f"{SCHEDULE_KEY}, a speculative_config, a [[lo, hi, K], ...] list",
    engine_flags=VLLM_ENGINE_FLAGS,
)
