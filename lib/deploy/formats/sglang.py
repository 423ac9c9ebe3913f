"""SGLang's adaptive speculative decoding: the file of ``--speculative-adaptive-config``
(docs/formats.md, "SGLang"), as SGLang 0.5.23 reads and runs it (``../shared/docs/
engines-2026-12.md`` 1c, read from the 0.5.23 wheel and run on this tool's exports).

SGLang (``srt/speculative/adaptive_spec_params.py``) reads a JSON object whose integer-string
keys are batch-size lower bounds, each a slot ``{"candidate_steps": [...], ...}`` (top-level keys
are every slot's defaults). A slot with one candidate is frozen at it, so each range becomes
``"lo": {"candidate_steps": [K]}``: the step runs as measured, and hysteresis, ``ema_alpha`` and
``update_interval`` have nothing to choose between. ``--speculative-num-steps`` must be in the
union of the candidates: the largest K. The strategy is ``ema`` (0.5.23 has no selector: the
key is skipped as a slot and merged into each slot unused; newer builds read it).

Refused, as SGLang refuses or silently falls back to static K on: a method its adaptive mode
does not run (:func:`sglang_method`, :func:`draft_fallback`), a recorded top-k other than 1, a
schedule that is K=0 everywhere, a global K not among the candidates. Warned: where SGLang's
padding to its decode CUDA-graph batch sizes moves a boundary (:func:`padding_shifts`), with the
``--cuda-graph-bs-decode`` list that keeps it (:func:`exact_boundary_sizes`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

from lib.deploy.ceiling import GPU_MEMORY_FLAG, CaptureCeiling, stated_gpu_memory
from lib.deploy.decisions import Decisions
from lib.deploy.engine import EngineFacts
from lib.deploy.engine_format import BatchExport, EngineFormat, Exported
from lib.deploy.releases import Release, holds, names, newest, number, size_runs, text
from lib.deploy.settings import ExportSettings
from lib.flags import flag_name
from lib.keys import LARGEST_WHOLE_NUMBER, whole_number_text
from lib.problems import Problem, Severity
from lib.schedule import Schedule

__all__ = [
    "ADAPTIVE_ALGORITHMS",
    "DECODE_GRAPH_MAX_BY_GPU_MEMORY",
    "DECODE_GRAPH_MAX_UNKNOWN_GPU",
    "FORMAT",
    "GEMMA4_ASSISTANT_ALGORITHM",
    "GEMMA4_ASSISTANT_ARCHITECTURES",
    "GRAPH_LIST_FLAG",
    "LARGE_TP",
    "METHODS",
    "MULTI_LAYER_EAGLE_TARGETS",
    "NEXTN_RESOLVES_TO",
    "RELEASE",
    "DecodeGraphMax",
    "SglangMethod",
    "build",
    "decode_graph_max",
    "default_decode_graph_max",
    "draft_fallback",
    "exact_boundary_sizes",
    "graph_batch_sizes",
    "padding_shifts",
    "read",
    "sglang_method",
    "slot_key_problem",
]

#: The SGLang release whose facts (:mod:`lib.deploy.releases`, engine ``sglang``) this module
#: applies: the newest known, as nothing a vLLM sweep records says which SGLang will serve.
RELEASE: Release = newest("sglang")


@dataclass(frozen=True)
class SglangMethod:
    """What SGLang makes of a vLLM speculative method: its ``--speculative-algorithm`` and, when
    its adaptive mode does not run it, why (``falls_back``; None: it runs)."""

    algorithm: str
    falls_back: str | None = None


#: The algorithms SGLang's adaptive mode runs, after alias resolution (fact
#: ``adaptive_algorithms``); NEXTN and EAGLE resolve to :data:`NEXTN_RESOLVES_TO` first
#: (``nextn_resolves_to``).
ADAPTIVE_ALGORITHMS = names("sglang", "adaptive_algorithms", RELEASE)
NEXTN_RESOLVES_TO = text("sglang", "nextn_resolves_to", RELEASE)
#: Why an algorithm adaptive mode does not run exists at all, or what would change it (the
#: engine's state, beside the facts; engines-2026-12.md 1c).
_WHY_NOT_ADAPTIVE = {
    "STANDALONE": "SGLang serves a separate draft model as STANDALONE",
    "NGRAM": "adaptive NGRAM is SGLang PR #23629, open",
    "DFLASH": "SGLang PR #24596 was closed",
}


def _resolved(algorithm: str) -> str:
    """The algorithm SGLang runs for ``algorithm`` before its adaptive check (NEXTN and EAGLE:
    :data:`NEXTN_RESOLVES_TO`; a Gemma-4 assistant draft aside, :func:`draft_fallback`)."""
    return NEXTN_RESOLVES_TO if algorithm in ("NEXTN", "EAGLE") else algorithm


def _methods() -> dict[str, SglangMethod]:
    """Fact ``method_algorithms`` (``vllm=SGLANG`` pairs), each with why adaptive mode falls
    back to static K on it where it does (:data:`ADAPTIVE_ALGORITHMS`)."""
    methods = {}
    for pair in names("sglang", "method_algorithms", RELEASE):
        method, algorithm = pair.split("=")
        falls_back = None
        if _resolved(algorithm) not in ADAPTIVE_ALGORITHMS:
            why = _WHY_NOT_ADAPTIVE.get(algorithm)
            falls_back = f"SGLang's adaptive mode does not run {algorithm}" + (
                f" ({why})" if why else ""
            )
        methods[method] = SglangMethod(algorithm, falls_back)
    return methods


#: vLLM's speculative methods, by vLLM's name, as SGLang takes them. vLLM's per-model MTP names
#: (``deepseek_mtp``, ``qwen3_next_mtp``, ...) are ``mtp`` (:func:`sglang_method`).
METHODS: dict[str, SglangMethod] = _methods()

#: The draft architectures SGLang serves as :data:`GEMMA4_ASSISTANT_ALGORITHM` under NEXTN or
#: EAGLE (and refuses with EAGLE3); their checkpoints are named ``*gemma-4*-assistant`` (e.g.
#: ``google/gemma-4-31B-it-assistant``).
GEMMA4_ASSISTANT_ARCHITECTURES = names("sglang", "gemma4_assistant_architectures", RELEASE)
GEMMA4_ASSISTANT_ALGORITHM = text("sglang", "gemma4_assistant_algorithm", RELEASE)

#: How a model's name shows the target families of fact ``multi_layer_eagle_architectures``
#: (SGLang turns multi-layer EAGLE on for them under EAGLE, so NEXTN): an architecture's
#: prefix -> fragments of checkpoint names (lower case). The tool's reading of names, not an
#: engine fact: SGLang reads the checkpoint's architecture, which a sweep does not record.
_MULTI_LAYER_EAGLE_NAMES: dict[str, tuple[str, ...]] = {
    "MiMoV2": ("mimo-v2", "mimov2"),
    "GigaChat35": ("gigachat3.5", "gigachat-3.5", "gigachat35"),
    "Step3p5": ("step-3.5", "step3.5", "step3p5"),
    "Step3p7": ("step-3.7", "step3.7", "step3p7"),
}


def _multi_layer_eagle_targets() -> dict[tuple[str, ...], str]:
    """Name fragments -> the architectures of fact ``multi_layer_eagle_architectures`` they
    stand for (every architecture has fragments: a test checks)."""
    targets = {}
    architectures = names("sglang", "multi_layer_eagle_architectures", RELEASE)
    for prefix, fragments in _MULTI_LAYER_EAGLE_NAMES.items():
        named = [arch for arch in architectures if arch.startswith(prefix)]
        if named:
            targets[fragments] = ", ".join(named)
    return targets


#: Name fragments -> the multi-layer EAGLE target architectures they stand for.
MULTI_LAYER_EAGLE_TARGETS = _multi_layer_eagle_targets()


def _graph_max_rows() -> tuple[tuple[float, int, int], ...]:
    """Fact ``decode_graph_max_by_gpu_memory``: (memory below, GiB; maximum at TP below
    :data:`LARGE_TP`; at TP from it), ``below:small:large`` in the table."""
    rows = []
    for row in names("sglang", "decode_graph_max_by_gpu_memory", RELEASE):
        below, small, large = row.split(":")
        rows.append((float(below), int(small), int(large)))
    return tuple(rows)


#: SGLang's default decode CUDA-graph maximum batch size by the memory of one GPU: (memory
#: below, in GiB; the maximum at tensor parallelism below :data:`LARGE_TP`; from it). SGLang
#: compares MiB against ``N * 1024``, the same bounds.
DECODE_GRAPH_MAX_BY_GPU_MEMORY = _graph_max_rows()
#: SGLang's default decode CUDA-graph maximum where it cannot read the GPU's memory.
DECODE_GRAPH_MAX_UNKNOWN_GPU = number("sglang", "decode_graph_max_unknown_gpu", RELEASE)
#: The tensor parallelism from which the larger default applies.
LARGE_TP = number("sglang", "decode_graph_max_large_tp", RELEASE)
#: The flag listing the decode graph batch sizes, and whether its list replaces the default.
GRAPH_LIST_FLAG = text("sglang", "decode_graph_list_flag", RELEASE)
_LIST_REPLACES_DEFAULT = holds("sglang", "decode_graph_list_replaces_default", RELEASE)

#: The speculative_config fields that may state a top-k (tree drafting).
_TOPK_FIELDS = ("speculative_eagle_topk", "eagle_topk", "topk")
_ADAPTIVE_TOPK = number("sglang", "adaptive_topk", RELEASE)
_STEPS = "candidate_steps"


def sglang_method(method: str | None) -> SglangMethod | None:
    """SGLang's algorithm for vLLM's speculative ``method`` (lower case), or None where
    SGLang has none. Rule: :data:`METHODS`; vLLM's per-model MTP names end in ``mtp``
    (``deepseek_mtp``, ``qwen3_next_mtp``, ...) and are MTP, SGLang's NEXTN.

    >>> sglang_method("deepseek_mtp").algorithm, sglang_method("ngram").algorithm
    ('NEXTN', 'NGRAM')
    >>> sglang_method("medusa") is None
    True
    """
    if method is None:
        return None
    if method.endswith("mtp"):
        return METHODS["mtp"]
    return METHODS.get(method)


def _name_has(model: str, fragments: tuple[str, ...]) -> bool:
    name = model.lower()
    return any(fragment in name for fragment in fragments)


def draft_fallback(algorithm: str, model: str | None) -> str | None:
    """Why SGLang would not run ``algorithm`` adaptively with the draft (or MTP) model the sweep
    recorded, ``model``; None: nothing in its name says so. SGLang decides by the checkpoint's
    architecture, which a sweep does not record, so the rule reads the name:

    - a Gemma-4 assistant draft (a name holding ``gemma-4`` or ``gemma4`` and ``assistant``):
      NEXTN and EAGLE become FROZEN_KV_MTP, which adaptive mode does not run; EAGLE3 is an
      error at startup;
    - a MiMo-V2, GigaChat 3.5 or Step-3.5/3.7 model (:data:`MULTI_LAYER_EAGLE_TARGETS`) under
      NEXTN or EAGLE: SGLang turns multi-layer EAGLE on, which adaptive mode does not run.

    >>> draft_fallback("NEXTN", "google/gemma-4-31B-it-assistant")[:44]
    'the draft google/gemma-4-31B-it-assistant is'
    >>> draft_fallback("EAGLE3", "XiaomiMiMo/MiMo-V2-Flash"), draft_fallback("NEXTN", None)
    (None, None)
    """
    if model is None:
        return None
    resolves = _resolved(algorithm) == NEXTN_RESOLVES_TO
    if _name_has(model, ("gemma-4", "gemma4")) and "assistant" in model.lower():
        architectures = " or ".join(GEMMA4_ASSISTANT_ARCHITECTURES)
        kind = f"the draft {model} is a Gemma-4 assistant ({architectures})"
        if not resolves:
            return f"{kind}: SGLang refuses it with {algorithm} (NEXTN or EAGLE only)"
        return (
            f"{kind}: SGLang serves it as {GEMMA4_ASSISTANT_ALGORITHM}, which its adaptive mode"
            " does not run"
        )
    if resolves:
        for fragments, architectures in MULTI_LAYER_EAGLE_TARGETS.items():
            if _name_has(model, fragments):
                return (
                    f"{model} is named as a model of {architectures}, for which SGLang turns"
                    f" multi-layer EAGLE on under {algorithm}, and its adaptive mode does not run"
                    " multi-layer EAGLE"
                )
    return None


@dataclass(frozen=True)
class DecodeGraphMax:
    """The largest decode CUDA-graph batch size the SGLang server captures, and how it is known
    (``basis``: the words the export prints)."""

    size: int
    basis: str


def default_decode_graph_max(gpu_memory_gib: float | None, tensor_parallel: int) -> int:
    """SGLang's default decode CUDA-graph maximum for a GPU of ``gpu_memory_gib`` GiB
    (None: SGLang could not read it) at tensor parallelism ``tensor_parallel``
    (:data:`DECODE_GRAPH_MAX_BY_GPU_MEMORY`; each bound belongs to the row above it: 20 GiB
    is 48 at TP < 4). SGLang then caps it at ``--max-running-requests`` when that is set.

    >>> default_decode_graph_max(79.6, 1), default_decode_graph_max(79.6, 4)
    (256, 512)
    >>> default_decode_graph_max(None, 8), default_decode_graph_max(180, 1)
    (160, 512)
    """
    if gpu_memory_gib is None:
        return DECODE_GRAPH_MAX_UNKNOWN_GPU
    for below, small_tp, large_tp in DECODE_GRAPH_MAX_BY_GPU_MEMORY:
        if gpu_memory_gib < below:
            return large_tp if tensor_parallel >= LARGE_TP else small_tp
    raise AssertionError("the last row has no upper bound")


def _largest_default() -> int:
    return max(max(small, large) for _, small, large in DECODE_GRAPH_MAX_BY_GPU_MEMORY)


def decode_graph_max(
    gpu_memory_gib: float | None, tensor_parallel: int | None, recorded: str | None = None
) -> DecodeGraphMax:
    """The decode graph maximum the padding is checked against, and what it rests on. With the
    GPU's memory given: SGLang's default for it (:func:`default_decode_graph_max`; TP 1 assumed
    when not given, and said). Without it: the largest default of any GPU, 512 (GPUs of 160 GiB
    or more, or 60 GiB or more at TP >= 4), said to be assumed: every smaller default's list is
    a prefix of its list, and a batch above the real maximum is not padded, so the warnings are
    then a superset of the server's (none missed, some spurious above its maximum).

    >>> decode_graph_max(None, None).size, decode_graph_max(40, None).basis[-20:]
    (512, 'rallelism 1, assumed')
    """
    if gpu_memory_gib is None:
        largest = _largest_default()
        return DecodeGraphMax(
            largest,
            f"the GPU is not recorded, so SGLang {RELEASE}'s largest default is assumed (GPUs"
            f" of 160 GiB or more, or 60 GiB or more at tensor parallelism {LARGE_TP} or more;"
            f" 256 on H100/H200 at TP < {LARGE_TP}) and no moved boundary is missed; give"
            f" {GPU_MEMORY_FLAG} for yours",
        )
    tp = tensor_parallel if tensor_parallel is not None else 1
    size = default_decode_graph_max(gpu_memory_gib, tp)
    said = "" if tensor_parallel is not None else ", assumed"
    return DecodeGraphMax(
        size,
        f"SGLang {RELEASE}'s default for a GPU of {gpu_memory_gib:g} GiB"
        + (f" (from {recorded}; give {GPU_MEMORY_FLAG} for another)" if recorded else "")
        + f" at tensor parallelism {tp}{said}",
    )


#: Fact ``decode_graph_sizes``: (first, last or None for the maximum, step) per run.
_SIZE_RUNS = size_runs("sglang", "decode_graph_sizes", RELEASE)
_MAX_APPENDED = holds("sglang", "decode_graph_max_appended", RELEASE)


def graph_batch_sizes(largest: int = 512) -> list[int]:
    """SGLang's default decode CUDA-graph batch sizes with speculation on (facts
    ``decode_graph_sizes``, ``decode_graph_max_appended``): 1-8, 10-32 step 2, 40-64 step 4,
    72-256 step 8, then step 16 up to ``largest`` (the server's decode graph maximum,
    :func:`decode_graph_max`), and ``largest`` itself when the steps miss it.

    >>> graph_batch_sizes(80)[7:]
    [8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 40, 44, 48, 52, 56, 60, 64, 72, 80]
    >>> graph_batch_sizes(9)[-3:], graph_batch_sizes(300)[-3:]
    ([7, 8, 9], [272, 288, 300])
    """
    sizes = [
        size
        for first, last, step in _SIZE_RUNS
        for size in range(first, (largest if last is None else last) + 1, step)
        if size <= largest
    ]
    if _MAX_APPENDED and largest not in sizes:
        sizes.append(largest)
    return sizes


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


def exact_boundary_sizes(schedule: Schedule, sizes: list[int]) -> list[int]:
    """The batch sizes to add to ``sizes`` so that padding moves no boundary: ``lo - 1`` for
    each key ``lo`` whose batch ``lo - 1`` pads past it (:func:`padding_shifts`). Padded to
    ``lo - 1`` itself, the batches below ``lo`` then take their own slot.

    >>> exact_boundary_sizes(Schedule(((1, 35, 3), (36, 64, 1))), graph_batch_sizes(256))
    [35]
    """
    moved = {
        batch
        for low, high, _, _ in padding_shifts(schedule, sizes)
        for batch in range(low, high + 1)
    }
    return sorted(lo - 1 for lo, _, _ in schedule.ranges if lo - 1 in moved)


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


def _algorithm(decisions: Decisions) -> tuple[str, list[Problem]]:
    """SGLang's ``--speculative-algorithm`` for the recorded method and draft, or why its
    adaptive mode would not run them (an error naming the method or the draft and why):
    :func:`sglang_method`, then :func:`draft_fallback`. No method recorded: EAGLE3."""
    method = decisions.method
    algorithm = "EAGLE3"
    if method is not None:
        mapped = sglang_method(method)
        if mapped is None or mapped.falls_back is not None:
            why = (
                f"SGLang {RELEASE} has no speculative algorithm for vLLM's method {method}"
                if mapped is None
                else f"SGLang {RELEASE} would run {mapped.algorithm} at a static K: "
                + str(mapped.falls_back)
            )
            return algorithm, [
                Problem(
                    Severity.ERROR,
                    "sglang-method",
                    why,
                    files=(decisions.source,),
                    field="speculative_config.method",
                    value=method,
                    expected="eagle, eagle3 or mtp (SGLang's adaptive mode runs EAGLE, EAGLE3"
                    " and NEXTN, which it resolves to EAGLE)",
                )
            ]
        algorithm = mapped.algorithm
    model = decisions.speculative_config.get("model")
    fallback = draft_fallback(algorithm, model if isinstance(model, str) else None)
    if fallback is not None:
        return algorithm, [
            Problem(
                Severity.ERROR,
                "sglang-draft",
                f"SGLang {RELEASE} would not run {algorithm} adaptively: {fallback}",
                files=(decisions.source,),
                field="speculative_config.model",
                value=str(model),
                expected="a draft SGLang's adaptive mode runs (an EAGLE/EAGLE3 head, or a"
                " model's own MTP head)",
            )
        ]
    return algorithm, []


def _batches(low: int, high: int) -> str:
    return f"batch size {low}" if low == high else f"batch sizes {low}-{high}"


def _padding_warnings(schedule: Schedule, graph_max: DecodeGraphMax) -> list[str]:
    """Each boundary SGLang's padding moves, and the :data:`GRAPH_LIST_FLAG` list that keeps
    them all: an explicit list *replaces* SGLang's default list and sets the maximum to its
    largest entry (fact ``decode_graph_list_replaces_default``), so it is the default list plus
    the new sizes."""
    sizes = graph_batch_sizes(graph_max.size)
    shifts = padding_shifts(schedule, sizes)
    if not shifts:
        return []
    added = exact_boundary_sizes(schedule, sizes)
    replaces = "replaces SGLang's default list" if _LIST_REPLACES_DEFAULT else "adds to it"
    warnings = [
        f"SGLang pads {_batches(low, high)} up to its next decode CUDA-graph batch size,"
        f" past the next range's start, so they run K={runs} where the schedule says K={meant};"
        f" to keep the boundary, capture {high} too: {GRAPH_LIST_FLAG} {replaces}, so give the"
        f" default list plus {high} (the line below)"
        for low, high, runs, meant in shifts
    ]
    listed = " ".join(str(size) for size in sorted(set(sizes) | set(added)))
    warnings.append(
        f"to keep every boundary: {GRAPH_LIST_FLAG} {listed} (SGLang {RELEASE}'s default"
        f" decode graph batch sizes up to {graph_max.size} plus"
        f" {', '.join(str(size) for size in added)})"
    )
    return warnings


def build(
    decisions: Decisions, settings: ExportSettings, ceiling: CaptureCeiling | None
) -> tuple[Exported | None, list[Problem]]:
    """The adaptive config: a frozen slot per range, ``strategy`` ema. (``--gpu-memory-gib``
    and ``--tensor-parallel-size`` are checked with the deployment's settings.)"""
    schedule = decisions.schedule
    algorithm, refused = _algorithm(decisions)
    if refused:
        return None, refused
    topk = _topk(decisions)
    if topk is not None and topk != _ADAPTIVE_TOPK:
        return None, [
            Problem(
                Severity.ERROR,
                "sglang-topk",
                f"SGLang's adaptive mode needs a top-k of {_ADAPTIVE_TOPK} (chain drafting)",
                field="speculative_config topk",
                value=str(topk),
                expected=str(_ADAPTIVE_TOPK),
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
    if holds("sglang", "num_steps_in_candidates", RELEASE) and steps not in candidates:
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
    paste = (
        f"--speculative-algorithm {algorithm} --speculative-eagle-topk {_ADAPTIVE_TOPK}"
        f" --speculative-num-steps {steps} --speculative-adaptive"
        f" --speculative-adaptive-config {FORMAT.file_name}",
    )
    memory = stated_gpu_memory(EngineFacts(), decisions.engine)
    tensor_parallel = decisions.engine.tensor_parallel_size
    graph_max = decode_graph_max(
        memory.value if memory is not None else None,
        tensor_parallel.value if tensor_parallel is not None else None,
        memory.source if memory is not None and memory.source != GPU_MEMORY_FLAG else None,
    )
    notes = ["each slot has one candidate step, so SGLang runs the measured K (no adaptation)"]
    if decisions.method is None:
        notes.append(
            "the sweep recorded no method: EAGLE3 assumed in the line above (SGLang's"
            " adaptive mode runs EAGLE, EAGLE3 and NEXTN)"
        )
    if algorithm == "NEXTN":
        notes.append(
            f"NEXTN: the model's MTP head, which SGLang {RELEASE} resolves to EAGLE before its"
            " adaptive check (not for Gemma-4 assistant drafts, nor MiMo-V2, GigaChat 3.5 or"
            " Step-3.5 models, where it falls back to static K)"
        )
    notes.append(
        f"padding checked against SGLang's decode CUDA-graph batch sizes up to {graph_max.size}:"
        f" {graph_max.basis}"
    )
    return BatchExport(
        format=FORMAT.name,
        config=config,
        file=config,
        largest_k=largest,
        paste=paste,
        warnings=tuple(_padding_warnings(schedule, graph_max)),
        notes=tuple(notes),
    ), []


FORMAT = EngineFormat(
    name="sglang",
    label="SGLang (--speculative-adaptive-config)",
    file_name="sglang_adaptive_config.json",
    position=30,
    build=build,
    # Deployment settings it reads besides (not engine_flags: those mark vLLM's formats).
    flags=frozenset({"gpu_memory_gib", "tensor_parallel_size"}),
    read=read,
    reads="an SGLang --speculative-adaptive-config",
)
