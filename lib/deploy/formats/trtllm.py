"""TensorRT-LLM's ``max_draft_len`` and ``draft_len_schedule`` (``{batch_size_upper_bound: K}``;
docs/formats.md, "TensorRT-LLM").

TensorRT-LLM's validator (``tensorrt_llm/llmapi/llm_args.py`` @``00043967``) wants keys >= 1,
values >= 0, ``schedule[smallest key] == max_draft_len`` and every value <= ``max_draft_len``.
So :func:`max_draft_len_rule`: ``max_draft_len`` is the first range's K; a later, larger K is
refused (:func:`later_k_rule`), or capped to it with ``--cap-draft-len``; a first K of 0 is
refused for Eagle (:func:`first_k_rule`). Its runtime (``_torch/speculative/utils.py``
@``011d0933``) differs from vLLM's where :func:`runtime_warnings` says. Each of these rules is
a ``trtllm`` row of :mod:`lib.deploy.releases`, read for :data:`RELEASE`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lib.deploy.ceiling import CaptureCeiling
from lib.deploy.decisions import Decisions
from lib.deploy.engine_format import BatchExport, EngineFormat, Exported
from lib.deploy.releases import Release, holds, names, newest, number, text
from lib.deploy.settings import ExportSettings
from lib.flags import flag_name
from lib.keys import stated_k
from lib.numbers import percent_text
from lib.problems import Problem, Severity
from lib.schedule import Schedule, merge_picks, trtllm_bound

__all__ = [
    "FORMAT",
    "MAX_DRAFT_LEN",
    "RELEASE",
    "build",
    "first_k_rule",
    "later_k_rule",
    "max_draft_len_rule",
    "read",
    "runtime_warnings",
]

#: The TensorRT-LLM source whose rules apply (the newest known: no sweep records one).
RELEASE: Release = newest("trtllm")
#: TensorRT-LLM's name for the maximum draft length (vLLM's ``num_speculative_tokens``).
MAX_DRAFT_LEN = text("trtllm", "max_draft_len_field", RELEASE)
#: TensorRT-LLM's field of the schedule.
TRTLLM_SCHEDULE = text("trtllm", "schedule_field", RELEASE)
#: The methods whose TensorRT-LLM config requires ``max_draft_len > 0``.
EAGLE_METHODS = names("trtllm", "positive_max_draft_len_methods", RELEASE)


def read(data: Any, source: str) -> tuple[Decisions | None, str] | None:
    """A ``draft_len_schedule`` (with its ``max_draft_len``), or a bare ``{bound: K}`` dict of
    draft lengths; None: not TensorRT-LLM's."""
    if not isinstance(data, dict) or not data:
        return None
    if TRTLLM_SCHEDULE in data:
        raw, global_k = data[TRTLLM_SCHEDULE], data.get(MAX_DRAFT_LEN)
    elif all(trtllm_bound(key) is not None for key in data) and not any(
        isinstance(value, dict) for value in data.values()
    ):
        raw, global_k = data, None
    else:
        return None
    schedule, violations = Schedule.from_trtllm(raw)
    if schedule is None:
        return None, violations[0]
    # The key 1 this module writes (and any equal neighbours) say nothing of their own.
    merged = Schedule(
        tuple(
            merge_picks(
                [lo for lo, _, _ in schedule], [k for _, _, k in schedule], schedule.ranges[-1][1]
            )
        )
    )
    return Decisions(merged, stated_k(global_k), "TensorRT-LLM draft_len_schedule", source), ""


def max_draft_len_rule(bounds: Mapping[int, int]) -> int:
    """``max_draft_len`` is the K at the smallest key where the validator wants that equality
    (``max_draft_len_at_smallest_key``), else the largest K.

    >>> max_draft_len_rule({31: 3, 127: 1, 256: 0})
    3
    """
    if holds("trtllm", "max_draft_len_at_smallest_key", RELEASE):
        return bounds[min(bounds)]
    return max(bounds.values())


def later_k_rule(bounds: Mapping[int, int], max_draft_len: int) -> list[tuple[int, int, int]]:
    """The ranges (lo, bound, K) whose K is above ``max_draft_len``: the validator refuses
    them (``k_above_max_draft_len_refused``; none where it does not). A K equal to it is fine.

    >>> later_k_rule({1: 3, 127: 5, 128: 3}, 3)
    [(2, 127, 5)]
    >>> later_k_rule({1: 3, 127: 3}, 3)
    []
    """
    if not holds("trtllm", "k_above_max_draft_len_refused", RELEASE):
        return []
    found = []
    low = 1
    for bound in sorted(bounds):
        if bounds[bound] > max_draft_len:
            found.append((low, bound, bounds[bound]))
        low = bound + 1
    return found


def first_k_rule(first_k: int, method: str | None) -> tuple[str | None, str | None]:
    """(error, warning) for a first K of 0: TensorRT-LLM's Eagle and Eagle3 configs require
    ``max_draft_len > 0`` (:data:`EAGLE_METHODS`), so an Eagle sweep is refused; an unrecorded
    method is warned about; other methods pass.

    >>> first_k_rule(0, "eagle3")[0] is not None, first_k_rule(0, None)[1] is not None
    (True, True)
    >>> first_k_rule(1, "eagle3")
    (None, None)
    """
    if first_k > 0:
        return None, None
    message = (
        "the first range's K is 0, so max_draft_len would be 0: TensorRT-LLM's Eagle and"
        " Eagle3 configs require max_draft_len > 0"
    )
    if method in EAGLE_METHODS:
        return message, None
    if method is None:
        return None, message + "; the sweep recorded no method: check yours"
    return None, None


def _measured_loss(decisions: Decisions, low: int, high: int, k: int, capped: int) -> str:
    """The loss of ``capped`` against ``k`` at the anchors measured inside ``low..high``."""
    losses = []
    for anchor in sorted(decisions.medians):
        if low <= anchor <= high:
            medians = decisions.medians[anchor]
            if k in medians and capped in medians and medians[k] > 0 and medians[capped] > 0:
                ratio = (
                    medians[capped] / medians[k]
                    if decisions.maximize
                    else medians[k] / medians[capped]
                )
                losses.append(f"{percent_text((1 - ratio) * 100)} at batch {anchor}")
    if not losses:
        return "no measured loss (no anchor in the range measured both K)"
    return "measured loss " + ", ".join(losses)


def runtime_warnings(bounds: Mapping[int, int], method: str | None) -> list[str]:
    """Where TensorRT-LLM's runtime differs from vLLM's on the same schedule: past the largest
    key it drafts 0 (newer builds raise it to the mode's floor), where vLLM keeps the last K;
    K=0 runs the mode's floor (1 on Eagle3 dynamic tree, MTP with the SA enhancer,
    draft-target and PARD; 0 on linear Eagle3 one-model, MTP one-model and NGram); vanilla
    MTP ignores the schedule.

    >>> runtime_warnings({63: 7, 256: 0}, "eagle3")[0].startswith("ranges with K=0")
    True
    >>> len(runtime_warnings({63: 7, 256: 3}, None))
    1
    """
    warnings = []
    largest = max(bounds)
    past = number("trtllm", "draft_len_past_largest_key", RELEASE)
    if bounds[largest] != past:
        warnings.append(
            f"above batch size {largest} TensorRT-LLM drafts {past} tokens (newer builds: the"
            f" mode's floor, min_runtime_draft_len) where vLLM keeps K={bounds[largest]}: make"
            " the last bound the engine's max_batch_size"
        )
    if any(k == 0 for k in bounds.values()):
        ones = _and(names("trtllm", "floor_one_modes", RELEASE))
        zeros = _and(names("trtllm", "floor_zero_modes", RELEASE))
        warnings.append(
            f"ranges with K=0 run the mode's floor (min_runtime_draft_len): 1 on {ones}; 0 on"
            f" {zeros}"
        )
    if method in names("trtllm", "schedule_ignored_by", RELEASE):
        warnings.append(f"vanilla MTP (not MTP-Eagle) ignores {TRTLLM_SCHEDULE}")
    return warnings


def _and(items: tuple[str, ...]) -> str:
    """``a, b and c``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


_KEY_ONE = holds("trtllm", "older_copies_require_key_one", RELEASE)

NOTES = (
    f"TensorRT-LLM builds before its PR {text('trtllm', 'upper_bound_keys_since', RELEASE)}"
    " read the keys as lower bounds, not upper bounds",
    *(
        (
            "key 1 is written so that builds whose validator requires it accept the file; the"
            " bound 1 runs the same K as the next one",
        )
        if _KEY_ONE
        else ()
    ),
    "JSON keys are strings: TensorRT-LLM's pydantic model (dict[int, int]) converts them"
    " (checked with pydantic 2.13, not inside TensorRT-LLM)",
    "checked against TensorRT-LLM's llm_args.py @00043967 and _torch/speculative/utils.py"
    " @011d0933",
)


def build(
    decisions: Decisions, settings: ExportSettings, ceiling: CaptureCeiling | None
) -> tuple[Exported | None, list[Problem]]:
    """TensorRT-LLM's two fields, by the rules above."""
    bounds = decisions.schedule.to_trtllm()
    first = max_draft_len_rule(bounds)
    field = flag_name(ExportSettings, "global_k")
    if settings.global_k is not None and settings.global_k != first:
        return None, [
            Problem(
                Severity.ERROR,
                "trtllm-max-draft-len",
                "TensorRT-LLM requires max_draft_len to equal the K at the smallest key",
                field=field,
                value=str(settings.global_k),
                expected=str(first),
            )
        ]
    error, first_warning = first_k_rule(first, decisions.method)
    if error is not None:
        return None, [Problem(Severity.ERROR, "trtllm-max-draft-len", error, value="0")]
    warnings = [first_warning] if first_warning else []
    larger = later_k_rule(bounds, first)
    if larger and not settings.cap_draft_len:
        spans = ", ".join(f"batch sizes {lo}-{hi} K={k}" for lo, hi, k in larger)
        return None, [
            Problem(
                Severity.ERROR,
                "trtllm-k-above-max-draft-len",
                f"TensorRT-LLM refuses a K above max_draft_len {first} (the K at the smallest"
                f" key): {spans}; give {flag_name(ExportSettings, 'cap_draft_len')} to cap them",
                value=str(first),
                expected=f"every K <= {first}",
            )
        ]
    for lo, hi, k in larger:
        warnings.append(
            f"capped, not measured: batch sizes {lo}-{hi} run K={first} instead of K={k}"
            f" (TensorRT-LLM's max_draft_len); {_measured_loss(decisions, lo, hi, k, first)}"
        )
    capped = {bound: min(k, first) for bound, k in bounds.items()}
    merged = Schedule.from_trtllm(capped)[0]
    assert merged is not None
    final = merged.to_trtllm()
    if _KEY_ONE and 1 not in final:
        final = {1: first, **final}
    warnings += runtime_warnings(final, decisions.method)
    config = {
        MAX_DRAFT_LEN: first,
        TRTLLM_SCHEDULE: {str(bound): k for bound, k in final.items()},
    }
    return BatchExport(
        format=FORMAT.name,
        config=config,
        file=config,
        largest_k=first,
        warnings=tuple(warnings),
        notes=NOTES,
    ), []


FORMAT = EngineFormat(
    name="trtllm",
    label="TensorRT-LLM (draft_len_schedule)",
    file_name="trtllm_draft_len_schedule.json",
    position=10,
    build=build,
    flags=frozenset({"cap_draft_len"}),
    read=read,
    reads=f"a {TRTLLM_SCHEDULE}",
    # max_draft_len 0 is TensorRT-LLM's for methods other than Eagle and Eagle3 (first_k_rule).
    least_global_k=0,
)
