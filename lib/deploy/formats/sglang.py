"""SGLang's adaptive speculative decoding: the file of ``--speculative-adaptive-config``
(docs/formats.md, "SGLang").

SGLang (``speculative/adaptive_spec_params.py`` @``015c8726``, ``adaptive_step_router.py``
@``a12239f6``) reads a JSON object whose integer-string keys are batch-size lower bounds, each a
slot ``{"candidate_steps": [...], ...}`` (top-level keys are every slot's defaults). A slot
with one candidate is frozen at it, so each range becomes ``"lo": {"candidate_steps": [K]}``:
the step runs as measured, and hysteresis, ``ema_alpha`` and ``update_interval`` have nothing
to choose between. ``--speculative-num-steps`` must be in the union of the candidates: the
largest K. The strategy is ``ema``, the only one that takes K=0.

Refused, as SGLang refuses (or silently falls back to static K on): a recorded method other
than EAGLE/EAGLE3, a recorded top-k other than 1, a schedule that is K=0 everywhere, a global
K not among the candidates. Warned: where SGLang's padding to its CUDA-graph batch sizes moves a
boundary (:func:`padding_shifts`).
"""

from __future__ import annotations

import bisect
from typing import Any

from lib.deploy.constraints import CaptureCeiling
from lib.deploy.decisions import Decisions
from lib.deploy.engine_format import BatchExport, EngineFormat, Exported
from lib.deploy.settings import ExportSettings
from lib.flags import flag_name
from lib.keys import LARGEST_WHOLE_NUMBER, whole_number_text
from lib.problems import Problem, Severity
from lib.schedule import Schedule

__all__ = [
    "FORMAT",
    "METHODS",
    "build",
    "graph_batch_sizes",
    "padding_shifts",
    "read",
    "slot_key_problem",
]

#: The speculative methods SGLang's adaptive mode runs, by vLLM's method name.
METHODS = {"eagle": "EAGLE", "eagle3": "EAGLE3"}
#: The speculative_config fields that may state a top-k (tree drafting); adaptive needs 1.
_TOPK_FIELDS = ("speculative_eagle_topk", "eagle_topk", "topk")
_STEPS = "candidate_steps"


def graph_batch_sizes(largest: int = 512) -> list[int]:
    """SGLang's default CUDA-graph batch sizes with speculation on: 1-8, 10-32 step 2, 40-64
    step 4, 72-256 step 8, then step 16 up to ``largest`` (the server's cuda-graph max bs;
    its default depends on the GPU and TP, 160 to 512).

    >>> graph_batch_sizes(80)[7:]
    [8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 40, 44, 48, 52, 56, 60, 64, 72, 80]
    """
    sizes = list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4))
    sizes += list(range(72, 257, 8)) + list(range(272, largest + 1, 16))
    return [size for size in sizes if size <= largest]


def padding_shifts(schedule: Schedule, sizes: list[int]) -> list[tuple[int, int, int, int]]:
    """Where padding moves a boundary: a batch b pads up to the smallest graph size g >= b and
    takes the slot of the largest key <= g, so batches just below a key ``lo`` whose ``lo - 1``
    is not a graph size run ``lo``'s K (or a later key's). Returns (first batch, last batch, K
    they run, K the schedule gives them), consecutive batches with the same pair merged; none
    past the largest graph size (no padding there). Only the batches between a key and the
    graph size below it are looked at: at most the gap between two graph sizes per key.

    >>> padding_shifts(Schedule(((1, 35, 3), (36, 64, 1))), graph_batch_sizes(256))
    [(33, 35, 1, 3)]
    >>> padding_shifts(Schedule(((1, 32, 3), (33, 64, 1))), graph_batch_sizes(256))
    []
    """
    keys = sorted(lo for lo, _, _ in schedule.ranges)
    moved: dict[int, tuple[int, int]] = {}
    for lo in keys[1:]:
        if lo > sizes[-1]:
            continue
        position = bisect.bisect_left(sizes, lo) - 1
        previous = sizes[position] if position >= 0 else 0
        for batch in range(previous + 1, lo):
            padded = sizes[bisect.bisect_left(sizes, batch)]
            runs, meant = schedule.k_at(padded), schedule.k_at(batch)
            if runs != meant:
                moved[batch] = (runs, meant)
    found: list[tuple[int, int, int, int]] = []
    for batch in sorted(moved):
        runs, meant = moved[batch]
        if found and found[-1][1] == batch - 1 and found[-1][2:] == (runs, meant):
            found[-1] = (found[-1][0], batch, runs, meant)
        else:
            found.append((batch, batch, runs, meant))
    return found


def slot_key_problem(key: str, value: Any) -> str | None:
    """Why a key holding a slot (an object with ``candidate_steps``) is no batch size: SGLang's
    slot keys are batch-size lower bounds, whole numbers in ASCII digits
    (:func:`~lib.keys.whole_number_text`), from 1. Any other key is a default of every slot,
    as SGLang reads it; None: nothing wrong.

    >>> slot_key_problem("²", {_STEPS: [3]})[:42]
    "SGLang slot key '²' is not a batch size (e"
    >>> slot_key_problem("64", {_STEPS: [3]}), slot_key_problem("ema_alpha", 0.2)
    (None, None)
    """
    number = whole_number_text(key)
    is_slot = isinstance(value, dict) and _STEPS in value
    if not is_slot or (number is not None and number >= 1):
        return None
    return (
        f"SGLang slot key {key!r} is not a batch size (expected a whole number from 1 to"
        f" {LARGEST_WHOLE_NUMBER} in ASCII digits)"
    )


def read(data: Any, source: str) -> tuple[Decisions | None, str] | None:
    """An adaptive config whose slots each hold one candidate step; None: not SGLang's. The
    last range ends at its lower bound: the file has no upper bound, and past it vLLM, like
    SGLang, keeps the last K. A slot under a key that is no batch size is refused
    (:func:`slot_key_problem`)."""
    if not isinstance(data, dict):
        return None
    slots = {
        number: value
        for number, value in ((whole_number_text(key), value) for key, value in data.items())
        if number is not None
    }
    if not slots or not all(isinstance(value, dict) for value in slots.values()):
        return None
    for key, value in data.items():
        problem = slot_key_problem(key, value)
        if problem is not None:
            return None, problem
    picks: dict[int, int] = {}
    for key, slot in slots.items():
        steps = slot.get(_STEPS)
        if not (
            isinstance(steps, list)
            and len(steps) == 1
            and isinstance(steps[0], int)
            and not isinstance(steps[0], bool)
            and steps[0] >= 0
        ):
            return None, (
                f"SGLang slot {str(key)!r}: {_STEPS} {steps!r} is not one step (a fixed K per"
                " batch range is what tune-spec-k reads back)"
            )
        picks[key] = steps[0]
    anchors = sorted(picks)
    schedule, violations = Schedule.parse(
        [
            [lo, (anchors[i + 1] - 1) if i + 1 < len(anchors) else lo, picks[lo]]
            for i, lo in enumerate(anchors)
        ]
    )
    if schedule is None:
        return None, "not a valid schedule: " + "; ".join(violations)
    return Decisions(schedule, None, "SGLang adaptive config", source), ""


def _topk(decisions: Decisions) -> Any:
    for name in _TOPK_FIELDS:
        if name in decisions.speculative_config:
            return decisions.speculative_config[name]
    return None


def build(
    decisions: Decisions, settings: ExportSettings, ceiling: CaptureCeiling | None
) -> tuple[Exported | None, list[Problem]]:
    """The adaptive config: a frozen slot per range, ``strategy`` ema."""
    schedule = decisions.schedule
    method = decisions.method
    if method is not None and method not in METHODS:
        return None, [
            Problem(
                Severity.ERROR,
                "sglang-method",
                "SGLang's adaptive speculative decoding runs EAGLE and EAGLE3 only (other"
                " methods fall back to static K)",
                field="speculative_config.method",
                value=method,
                expected="eagle or eagle3",
            )
        ]
    topk = _topk(decisions)
    if topk is not None and topk != 1:
        return None, [
            Problem(
                Severity.ERROR,
                "sglang-topk",
                "SGLang's adaptive mode needs a top-k of 1 (chain drafting)",
                field="speculative_config topk",
                value=str(topk),
                expected="1",
            )
        ]
    largest = schedule.largest_k
    if largest == 0:
        return None, [
            Problem(
                Severity.ERROR,
                "sglang-no-speculation",
                "K=0 at every batch size: serve SGLang without speculative decoding",
                value=schedule.json_text(),
            )
        ]
    candidates = {k for _, _, k in schedule.ranges}
    steps = settings.global_k if settings.global_k is not None else largest
    if steps not in candidates:
        return None, [
            Problem(
                Severity.ERROR,
                "sglang-num-steps",
                "SGLang requires --speculative-num-steps among the slots' candidate steps",
                field=flag_name(ExportSettings, "global_k"),
                value=str(steps),
                expected=", ".join(str(k) for k in sorted(candidates)),
            )
        ]
    config: dict[str, Any] = {"strategy": "ema"}
    for lo, _, k in sorted(schedule.ranges):
        config[str(lo)] = {_STEPS: [k]}
    algorithm = METHODS.get(method or "", "EAGLE3")
    paste = (
        f"--speculative-algorithm {algorithm} --speculative-eagle-topk 1"
        f" --speculative-num-steps {steps} --speculative-adaptive"
        f" --speculative-adaptive-config {FORMAT.file_name}",
    )
    notes = ["each slot has one candidate step, so SGLang runs the measured K (no adaptation)"]
    if method is None:
        notes.append(
            "the sweep recorded no method: EAGLE3 assumed in the line above (SGLang's"
            " adaptive mode runs EAGLE and EAGLE3 only)"
        )
    warnings = [
        f"SGLang pads batch sizes {low}-{high} up to its next CUDA-graph batch size, past the"
        f" next range's start, so they run K={runs} where the schedule says K={meant} (SGLang's"
        f" default graph batch sizes; list {high} in --cuda-graph-bs to keep the boundary)"
        for low, high, runs, meant in padding_shifts(schedule, graph_batch_sizes())
    ]
    return BatchExport(
        format=FORMAT.name,
        config=config,
        file=config,
        largest_k=largest,
        paste=paste,
        warnings=tuple(warnings),
        notes=tuple(notes),
    ), []


FORMAT = EngineFormat(
    name="sglang",
    label="SGLang (--speculative-adaptive-config)",
    file_name="sglang_adaptive_config.json",
    position=30,
    build=build,
    read=read,
    reads="an SGLang --speculative-adaptive-config",
)
