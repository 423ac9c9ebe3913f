"""A tuned schedule for other engines: TensorRT-LLM's ``draft_len_schedule``, and back.

vLLM's ``num_speculative_tokens_per_batch_size`` is a list of inclusive ``[lo, hi, K]`` ranges;
at run time a batch size in a gap inherits the previous range's K and one past the last range
inherits the last K. TensorRT-LLM's ``draft_len_schedule`` says the same with a dict
``{batch_size_upper_bound: K}``: a batch size uses the K of the smallest bound at or above it,
so each bound closes a range that starts one past the previous bound (the first at 1).

Conversions, with vLLM's run-time lookup as the reference:

- list -> dict: each range's bound is one below the next range's start (so a gap goes to the
  range before it, as in vLLM), the last range's bound is its ``hi``; neighbours with equal K
  merge (a dict with two bounds of equal K means the same as one).
- dict -> list: ``[[1, b1, K1], [b1 + 1, b2, K2], ...]``, ranges without gaps.

So list -> dict -> list gives the schedule with its gaps filled and equal neighbours merged:
vLLM runs it exactly as the original for every batch size up to the last ``hi``. Past the last
bound vLLM keeps the last K; what TensorRT-LLM does there is its own rule, so the exported
largest bound is the schedule's maximum batch size, which should be the engine's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lib.schedule import validate_schedule

Schedule = list[list[int]]

#: TensorRT-LLM's name for the maximum draft length (vLLM's ``num_speculative_tokens``).
TRTLLM_MAX_DRAFT_LEN = "max_draft_len"
TRTLLM_SCHEDULE = "draft_len_schedule"
#: The file name the app offers the TensorRT-LLM export under.
TRTLLM_FILE = "trtllm_draft_len_schedule.json"


class ExportError(ValueError):
    """A schedule or file that cannot be converted; the message names what and why."""


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def vllm_to_trtllm(schedule: Sequence[Sequence[int]]) -> dict[int, int]:
    """``{batch_size_upper_bound: K}`` for a valid vLLM schedule (raises :class:`ExportError`
    naming vLLM's violated rule otherwise)."""
    violations = validate_schedule(schedule)
    if violations:
        raise ExportError("not a valid vLLM schedule: " + "; ".join(violations))
    ordered = sorted((lo, hi, k) for lo, hi, k in schedule)
    bounds: dict[int, int] = {}
    for index, (_, hi, k) in enumerate(ordered):
        bound = ordered[index + 1][0] - 1 if index + 1 < len(ordered) else hi
        if bounds and list(bounds.values())[-1] == k:
            # Equal neighbours: the earlier bound would only repeat the same K.
            del bounds[list(bounds)[-1]]
        bounds[bound] = k
    return bounds


def trtllm_to_vllm(draft_len_schedule: Mapping[Any, Any]) -> Schedule:
    """vLLM's ``[[lo, hi, K], ...]`` for a ``draft_len_schedule`` dict. Keys may be ints or
    their JSON spelling (``"63"``); values must be whole numbers >= 0."""
    if not isinstance(draft_len_schedule, Mapping) or not draft_len_schedule:
        raise ExportError(
            f"{TRTLLM_SCHEDULE} must be a non-empty object of batch_size_upper_bound: K"
            f" (got {json.dumps(draft_len_schedule, default=str)})"
        )
    bounds: dict[int, int] = {}
    for raw_bound, k in draft_len_schedule.items():
        bound = _parse_bound(raw_bound)
        if bound is None or bound < 1:
            raise ExportError(
                f"{TRTLLM_SCHEDULE} key {raw_bound!r} is not a batch size (expected a whole"
                " number >= 1)"
            )
        if not _whole(k) or k < 0:
            raise ExportError(
                f"{TRTLLM_SCHEDULE}[{raw_bound!r}] = {json.dumps(k)} is not a draft length"
                " (expected a whole number >= 0)"
            )
        if bound in bounds:
            raise ExportError(f"{TRTLLM_SCHEDULE} repeats the bound {bound}")
        bounds[bound] = k
    schedule: Schedule = []
    start = 1
    for bound in sorted(bounds):
        schedule.append([start, bound, bounds[bound]])
        start = bound + 1
    return schedule


def _parse_bound(raw: Any) -> int | None:
    if _whole(raw):
        return int(raw)
    if isinstance(raw, str) and raw.strip().isdigit():
        return int(raw)
    return None


def trtllm_config(schedule: Sequence[Sequence[int]], max_draft_len: int) -> dict[str, Any]:
    """The two speculative-config fields TensorRT-LLM reads: ``max_draft_len`` (vLLM's
    ``num_speculative_tokens``) and ``draft_len_schedule``, JSON-ready (string keys)."""
    bounds = vllm_to_trtllm(schedule)
    return {
        TRTLLM_MAX_DRAFT_LEN: max_draft_len,
        TRTLLM_SCHEDULE: {str(bound): k for bound, k in bounds.items()},
    }


def read_schedule(path: str | Path) -> tuple[Schedule, int | None, str]:
    """(vLLM schedule, global K or None, what the file was) from a JSON file holding any of:
    a tune-spec-k / seed result (``num_speculative_tokens_per_batch_size`` at the top), a
    ``speculative_config`` object, a bare ``[[lo, hi, K], ...]`` list, or a TensorRT-LLM config
    (``draft_len_schedule``, optionally with ``max_draft_len``) or its bare dict."""
    source = Path(path)
    try:
        data = json.loads(source.read_text(encoding="utf-8"))
    except OSError as error:
        raise ExportError(f"{source}: cannot read the file: {error.strerror or error}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ExportError(f"{source}: not a JSON file: {error}") from None
    try:
        return _schedule_of(data)
    except ExportError as error:
        raise ExportError(f"{source}: {error}") from None


def _schedule_of(data: Any) -> tuple[Schedule, int | None, str]:
    if isinstance(data, list):
        return _checked(data), None, "vLLM schedule"
    if not isinstance(data, dict):
        raise ExportError("expected a JSON object or a [[lo, hi, K], ...] list")
    if isinstance(data.get("speculative_config"), dict) and (
        "num_speculative_tokens_per_batch_size" not in data
    ):
        return _schedule_of(data["speculative_config"])
    if "num_speculative_tokens_per_batch_size" in data:
        schedule = _checked(data["num_speculative_tokens_per_batch_size"])
        global_k = data.get("num_speculative_tokens")
        if global_k is None:
            global_k = data.get("configured_global_num_speculative_tokens")
        if global_k is None and isinstance(data.get("speculative_config"), dict):
            global_k = data["speculative_config"].get("num_speculative_tokens")
        return schedule, global_k if _whole(global_k) else None, "vLLM schedule"
    if TRTLLM_SCHEDULE in data:
        max_draft_len = data.get(TRTLLM_MAX_DRAFT_LEN)
        return (
            trtllm_to_vllm(data[TRTLLM_SCHEDULE]),
            max_draft_len if _whole(max_draft_len) else None,
            "TensorRT-LLM draft_len_schedule",
        )
    if data and all(_parse_bound(key) is not None for key in data):
        return trtllm_to_vllm(data), None, "TensorRT-LLM draft_len_schedule"
    raise ExportError(
        "no schedule found (expected num_speculative_tokens_per_batch_size, a speculative_config,"
        f" a [[lo, hi, K], ...] list or a {TRTLLM_SCHEDULE}); keys: {sorted(data)[:8]}"
    )


def _checked(schedule: Any) -> Schedule:
    violations = validate_schedule(schedule)
    if violations:
        raise ExportError("not a valid vLLM schedule: " + "; ".join(violations))
    return [[int(lo), int(hi), int(k)] for lo, hi, k in schedule]


def trtllm_file(schedule: Sequence[Sequence[int]], max_draft_len: int) -> bytes:
    """The file ``tune-spec-k export --format trtllm -o PATH`` writes: the app's download."""
    return (json.dumps(trtllm_config(schedule, max_draft_len), indent=2) + "\n").encode()
