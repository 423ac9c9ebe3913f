"""``tune-spec-k export``: a tuned schedule for vLLM or TensorRT-LLM, from any file holding one;
or a result's (batch x context) grid for the context-aware formats (:mod:`lib.context_formats`).

The input may be a tune-spec-k (or seed) result, a ``speculative_config``, a bare
``[[lo, hi, K], ...]`` list, or a TensorRT-LLM config (``draft_len_schedule``, optionally with
``max_draft_len``) or its bare ``{batch_size_upper_bound: K}`` dict. The conversions between the
two engines' forms are :class:`lib.schedule.Schedule`'s; this module finds the schedule in a
file and builds the exported config.

Past the last bound vLLM keeps the last K; what TensorRT-LLM does there is its own rule, so the
exported largest bound is the schedule's maximum batch size, which should be the engine's.

The context formats (``vllm-context``, ``vllm-rfc-48944``, ``vllm-pr-54801``) read a result JSON
with a ``context_grid`` (:func:`export_context`); the app's download of each is
:func:`context_export_text`, the very text ``export -o`` writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lib.context_formats import (
    CONTEXT_FORMATS,
    ContextExport,
    CtxAgg,
    context_export,
    context_grid_of,
    context_mix,
)
from lib.files import read_json
from lib.flags import flag, flag_name
from lib.keys import MISSING
from lib.problems import Problem, Severity
from lib.schedule import TRTLLM_SCHEDULE, Schedule, trtllm_bound

__all__ = [
    "CONTEXT_FILES",
    "FORMATS",
    "TRTLLM_FILE",
    "TRTLLM_MAX_DRAFT_LEN",
    "ExportSettings",
    "ScheduleFile",
    "config_text",
    "context_export_text",
    "export_config",
    "export_context",
    "read_context_export",
    "read_schedule",
    "trtllm_config",
    "trtllm_text",
]

#: TensorRT-LLM's name for the maximum draft length (vLLM's ``num_speculative_tokens``).
TRTLLM_MAX_DRAFT_LEN = "max_draft_len"
#: The file name the app offers the TensorRT-LLM export under.
TRTLLM_FILE = "trtllm_draft_len_schedule.json"
#: The batch-only formats, then :data:`lib.context_formats.CONTEXT_FORMATS` (a test keeps the
#: two lists in step: a ``Literal`` cannot be built from another).
Format = Literal["trtllm", "vllm", "vllm-context", "vllm-rfc-48944", "vllm-pr-54801"]
FORMATS: tuple[Format, ...] = ("trtllm", "vllm", *CONTEXT_FORMATS)
#: The file name the app offers each context format's export under.
CONTEXT_FILES: dict[str, str] = {
    "vllm-context": "vllm_context_schedule.json",
    "vllm-rfc-48944": "vllm_rfc_48944_schedule.json",
    "vllm-pr-54801": "vllm_pr_54801_schedule.json",
}
_SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"


@dataclass(frozen=True)
class ExportSettings:
    """What to export: the engine's format, and the global K to start it with."""

    format: Format = field(
        default="trtllm",
        metadata=flag(
            "--format",
            "trtllm: TensorRT-LLM's max_draft_len and draft_len_schedule; vllm: vLLM's"
            " num_speculative_tokens and num_speculative_tokens_per_batch_size. From a result"
            " with a context grid: vllm-context: today's vLLM, one batch schedule for the"
            " --context-mix, plus one per measured context; vllm-rfc-48944: the grid as"
            " [bs_lo, bs_hi, ctx_lo, ctx_hi, K] entries (vLLM PR #48944); vllm-pr-54801: a batch"
            " table and a num_speculative_tokens_per_seq_len table (vLLM PR #54801, assumed"
            " combined by the smaller K). Each says what it loses against the measured 2-D"
            " optimum",
        ),
    )
    global_k: int | None = field(
        default=None,
        metadata=flag(
            "--global-k",
            "num_speculative_tokens / max_draft_len (default: the file's, else the largest K)",
        ),
    )
    context_mix: str | None = field(
        default=None,
        metadata=flag(
            "--context-mix",
            "context formats: the traffic's prompt lengths and weights, e.g. 512:0.7,8192:0.3;"
            " each length is matched to a measured context point within the context axis's"
            " tolerance, weights > 0 are normalised to sum 1. vllm-context's schedule is the"
            " K per batch size with the best mix-weighted conservative score (ties within the"
            " result's relative tolerance to the smallest K);"
            " vllm-pr-54801's tables are chosen on it; every format's mix-weighted mean loss"
            " uses it (default: the shortest measured context, weight 1)",
            metavar="PROMPT:WEIGHT,...",
            echo="changed",
        ),
    )
    ctx_agg: CtxAgg = field(
        default="mean",
        metadata=flag(
            "--ctx-agg",
            "vllm-rfc-48944: how the engine turns a batch's per-request context lengths into"
            " one number (the ctx_agg field)",
            echo="changed",
        ),
    )
    legacy_field_name: bool = field(
        default=False,
        metadata=flag(
            "--legacy-field-name",
            "vllm-rfc-48944: write the entries under num_speculative_tokens_per_batch_size"
            " (PR #48944's deprecated alias) instead of speculative_token_schedule",
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
    schedule's largest K is refused (vLLM would clamp the schedule to it), and so is a context
    format's flag (``--context-mix``, ...): these formats do not read it."""
    misplaced = _misplaced_flags(settings)
    if misplaced:
        return None, misplaced
    largest = found.schedule.largest_k
    chosen = settings.global_k or found.global_k or max(largest, 1)
    if chosen < max(largest, 1):
        return None, [_global_k_problem(chosen, largest, "schedule's")]
    if settings.format == "trtllm":
        return trtllm_config(found.schedule, chosen), []
    return {"num_speculative_tokens": chosen, _SCHEDULE_KEY: found.schedule.to_json()}, []


def _global_k_problem(chosen: int, largest: int, whose: str) -> Problem:
    """A global K below the largest K of what is exported: vLLM would clamp it, silently."""
    return Problem(
        Severity.ERROR,
        "global-k-too-small",
        f"below the {whose} largest K {largest}",
        field=flag_name(ExportSettings, "global_k"),
        value=str(chosen),
        expected=f">= {max(largest, 1)}",
    )


def _misplaced_flags(settings: ExportSettings) -> list[Problem]:
    """A context flag given with a format that does not read it: an error, not ignored."""
    context = settings.format in CONTEXT_FORMATS
    rfc = settings.format == "vllm-rfc-48944"
    misplaced = [
        (name, "the context formats " + ", ".join(CONTEXT_FORMATS))
        for name, given in [("context_mix", settings.context_mix is not None)]
        if given and not context
    ] + [
        (name, "--format vllm-rfc-48944")
        for name, given in [
            ("ctx_agg", settings.ctx_agg != "mean"),
            ("legacy_field_name", settings.legacy_field_name),
        ]
        if given and not rfc
    ]
    return [
        Problem(
            Severity.ERROR,
            "flag-not-for-format",
            f"{flag_name(ExportSettings, name)} applies only to {formats}",
            field=flag_name(ExportSettings, "format"),
            value=settings.format,
            expected=formats,
        )
        for name, formats in misplaced
    ]


def export_context(
    data: Any, settings: ExportSettings, source: str
) -> tuple[ContextExport | None, list[Problem]]:
    """The context format ``settings.format`` of a result JSON (``data``, read from
    ``source``): its grid (:func:`lib.context_formats.context_grid_of`), the mix of
    ``--context-mix``, the global K (``--global-k``, else the file's, else the largest K: never
    below the largest K exported), then :func:`lib.context_formats.context_export`. None and
    every problem when any of them fails."""
    problems = _misplaced_flags(settings)
    if problems:
        return None, problems
    assert settings.format in CONTEXT_FORMATS, settings.format
    grid, problems = context_grid_of(data, source)
    if grid is None:
        return None, problems
    mix, problems = context_mix(
        settings.context_mix, grid, field=flag_name(ExportSettings, "context_mix"), source=source
    )
    if mix is None:
        return None, problems
    chosen = settings.global_k or grid.global_k
    exported, problems = context_export(
        grid,
        settings.format,
        mix,
        chosen,
        ctx_agg=settings.ctx_agg,
        legacy_field_name=settings.legacy_field_name,
        source=source,
    )
    if exported is not None and chosen < max(exported.largest_k, 1):
        return None, [_global_k_problem(chosen, exported.largest_k, "export's")]
    return exported, problems


def read_context_export(
    path: str | Path, settings: ExportSettings
) -> tuple[ContextExport | None, list[Problem]]:
    """:func:`export_context` of a result JSON file."""
    problems = _misplaced_flags(settings)
    if problems:
        return None, problems
    data, problems = read_json(path)
    if data is MISSING:
        return None, problems
    return export_context(data, settings, str(path))


def context_export_text(
    data: Any, settings: ExportSettings, source: str = "the result"
) -> tuple[str | None, list[Problem]]:
    """The file of a context format (:data:`CONTEXT_FILES` names it) for a result JSON held in
    memory (the app's ``TuningResult.to_json()``): byte for byte what ``tune-spec-k export
    RESULT --format FORMAT -o PATH`` writes; None and the problems when it cannot be made."""
    exported, problems = export_context(data, settings, source)
    return (None if exported is None else exported.text()), problems


def trtllm_text(schedule: Schedule, max_draft_len: int) -> str:
    """The file ``tune-spec-k export --format trtllm -o PATH`` writes (the app's download)."""
    return config_text(trtllm_config(schedule, max_draft_len))


def config_text(config: dict[str, Any]) -> str:
    """An exported config as the file ``export -o`` writes: indented JSON and a newline."""
    return json.dumps(config, indent=2) + "\n"
