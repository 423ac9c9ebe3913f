"""``tune-spec-k export``: a tuned schedule for vLLM or TensorRT-LLM, from any file holding one.

The input may be a tune-spec-k (or seed) result, a ``speculative_config``, a bare
``[[lo, hi, K], ...]`` list, or a TensorRT-LLM config (``draft_len_schedule``, optionally with
``max_draft_len``) or its bare ``{batch_size_upper_bound: K}`` dict. The conversions between the
two engines' forms are :class:`lib.schedule.Schedule`'s; this module finds the schedule in a
file and builds the exported config.

Past the last bound vLLM keeps the last K; what TensorRT-LLM does there is its own rule, so the
exported largest bound is the schedule's maximum batch size, which should be the engine's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lib.files import read_json
from lib.flags import flag, flag_name
from lib.keys import MISSING
from lib.problems import Problem, Severity
from lib.schedule import TRTLLM_SCHEDULE, Schedule, trtllm_bound

__all__ = [
    "FORMATS",
    "TRTLLM_FILE",
    "TRTLLM_MAX_DRAFT_LEN",
    "ExportSettings",
    "ScheduleFile",
    "config_text",
    "export_config",
    "read_schedule",
    "trtllm_config",
    "trtllm_text",
]

#: TensorRT-LLM's name for the maximum draft length (vLLM's ``num_speculative_tokens``).
TRTLLM_MAX_DRAFT_LEN = "max_draft_len"
#: The file name the app offers the TensorRT-LLM export under.
TRTLLM_FILE = "trtllm_draft_len_schedule.json"
Format = Literal["trtllm", "vllm"]
FORMATS: tuple[Format, ...] = ("trtllm", "vllm")
_SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"


@dataclass(frozen=True)
class ExportSettings:
    """What to export: the engine's format, and the global K to start it with."""

    format: Format = field(
        default="trtllm",
        metadata=flag(
            "--format",
            "trtllm: TensorRT-LLM's max_draft_len and draft_len_schedule; vllm: vLLM's"
            " num_speculative_tokens and num_speculative_tokens_per_batch_size",
        ),
    )
    global_k: int | None = field(
        default=None,
        metadata=flag(
            "--global-k",
            "num_speculative_tokens / max_draft_len (default: the file's, else the largest K)",
        ),
    )


@dataclass(frozen=True)
class ScheduleFile:
    """A schedule found in a file: the schedule, the global K it states (None when none), and
    what kind of file it was."""

    schedule: Schedule
    global_k: int | None
    kind: str


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_schedule(path: str | Path) -> tuple[ScheduleFile | None, list[Problem]]:
    """The schedule in a JSON file of any of the kinds above, or None and what is wrong."""
    data, problems = read_json(path)
    if data is MISSING:
        return None, problems
    found, reason = _schedule_of(data)
    if found is None:
        return None, [Problem(Severity.ERROR, "no-schedule", reason, files=(str(path),))]
    return found, []


def _schedule_of(data: Any) -> tuple[ScheduleFile | None, str]:
    if isinstance(data, list):
        schedule, violations = Schedule.parse(data)
        return _found(schedule, violations, None, "vLLM schedule")
    if not isinstance(data, dict):
        return None, "expected a JSON object or a [[lo, hi, K], ...] list"
    if isinstance(data.get("speculative_config"), dict) and _SCHEDULE_KEY not in data:
        return _schedule_of(data["speculative_config"])
    if _SCHEDULE_KEY in data:
        schedule, violations = Schedule.parse(data[_SCHEDULE_KEY])
        global_k = data.get("num_speculative_tokens")
        if global_k is None:
            global_k = data.get("configured_global_num_speculative_tokens")
        if global_k is None and isinstance(data.get("speculative_config"), dict):
            global_k = data["speculative_config"].get("num_speculative_tokens")
        return _found(schedule, violations, global_k, "vLLM schedule")
    if TRTLLM_SCHEDULE in data:
        schedule, violations = Schedule.from_trtllm(data[TRTLLM_SCHEDULE])
        found = _found(
            schedule, violations, data.get(TRTLLM_MAX_DRAFT_LEN), "TensorRT-LLM draft_len_schedule"
        )
        return found if schedule is not None else (None, violations[0])
    if data and all(trtllm_bound(key) is not None for key in data):
        schedule, violations = Schedule.from_trtllm(data)
        found = _found(schedule, violations, None, "TensorRT-LLM draft_len_schedule")
        return found if schedule is not None else (None, violations[0])
    return None, (
        f"no schedule found (expected {_SCHEDULE_KEY}, a speculative_config,"
        f" a [[lo, hi, K], ...] list or a {TRTLLM_SCHEDULE}); keys: {sorted(data)[:8]}"
    )


def _found(
    schedule: Schedule | None, violations: list[str], global_k: Any, kind: str
) -> tuple[ScheduleFile | None, str]:
    if schedule is None:
        return None, "not a valid vLLM schedule: " + "; ".join(violations)
    return ScheduleFile(schedule, global_k if _whole(global_k) else None, kind), ""


def trtllm_config(schedule: Schedule, max_draft_len: int) -> dict[str, Any]:
    """The two speculative-config fields TensorRT-LLM reads: ``max_draft_len`` (vLLM's
    ``num_speculative_tokens``) and ``draft_len_schedule``, JSON-ready (string keys).

    >>> trtllm_config(Schedule(((1, 63, 7), (64, 256, 0))), 7)
    {'max_draft_len': 7, 'draft_len_schedule': {'63': 7, '256': 0}}
    """
    return {
        TRTLLM_MAX_DRAFT_LEN: max_draft_len,
        TRTLLM_SCHEDULE: {str(bound): k for bound, k in schedule.to_trtllm().items()},
    }


def export_config(
    found: ScheduleFile, settings: ExportSettings
) -> tuple[dict[str, Any] | None, list[Problem]]:
    """The config to export: TensorRT-LLM's two fields, or vLLM's ``num_speculative_tokens``
    and ``num_speculative_tokens_per_batch_size``. The global K is ``settings.global_k`` if given,
    else the file's, else the schedule's largest K (at least 1, vLLM's minimum); one below the
    schedule's largest K is refused (vLLM would clamp the schedule to it)."""
    largest = found.schedule.largest_k
    chosen = settings.global_k or found.global_k or max(largest, 1)
    if chosen < max(largest, 1):
        problem = Problem(
            Severity.ERROR,
            "global-k-too-small",
            f"below the schedule's largest K {largest}",
            field=flag_name(ExportSettings, "global_k"),
            value=str(chosen),
            expected=f">= {max(largest, 1)}",
        )
        return None, [problem]
    if settings.format == "trtllm":
        return trtllm_config(found.schedule, chosen), []
    return {"num_speculative_tokens": chosen, _SCHEDULE_KEY: found.schedule.to_json()}, []


def trtllm_text(schedule: Schedule, max_draft_len: int) -> str:
    """The file ``tune-spec-k export --format trtllm -o PATH`` writes (the app's download)."""
    return config_text(trtllm_config(schedule, max_draft_len))


def config_text(config: dict[str, Any]) -> str:
    """An exported config as the file ``export -o`` writes: indented JSON and a newline."""
    return json.dumps(config, indent=2) + "\n"
