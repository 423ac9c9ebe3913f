"""The engines' facts by release: every engine rule the deployment layer applies (the capture
rule, defaults, method gates, Dynamic SD limits, format rules) as one row of :data:`FACTS`, with
the releases it holds for and where it was read. The deployment code asks :func:`fact` (or a
typed reader: :func:`number`, :func:`names`, :func:`text`, :func:`holds`) for a fact of a
release instead of branching on versions, so a new release is a new row (and a new entry of
:data:`KNOWN_RELEASES`), not new branches. ``docs/formats.md`` prints :func:`facts_table`
(a test checks the two agree).

A release is a version as the engine prints it (``0.34.0``, ``v0.33.1``, ``0.34.0rc1+cu128``):
:meth:`Release.parse` keeps its leading numbers. A row holds for a range of releases
(:class:`Releases`): bounds compare as many numbers as they name, so ``0.33`` covers every
``0.33.x``. A release newer than the newest known one is read with the newest rows (the
caller says so: :func:`newer_than_known`).

Imports only the version pattern of :mod:`lib.settings` (``--vllm-version`` is checked
there): the table is data.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

from lib.settings import VERSION_PATTERN

__all__ = [
    "ENGINES",
    "FACTS",
    "KNOWN_RELEASES",
    "Engine",
    "EngineFact",
    "FactValue",
    "Release",
    "Releases",
    "fact",
    "facts_of",
    "facts_table",
    "holds",
    "names",
    "newer_than_known",
    "newest",
    "number",
    "number_or_none",
    "size_runs",
    "text",
]

Engine = Literal["vllm", "sglang", "trtllm"]
#: The engines, in the order the table lists them.
ENGINES: tuple[Engine, ...] = ("vllm", "sglang", "trtllm")
#: What a fact's value may be: a number, a yes/no, a text, or a list of names.
FactValue = int | bool | str | tuple[str, ...]


@dataclass(frozen=True, order=True)
class Release:
    """An engine version: its leading numbers (``key``) and the text it was read from.

    >>> Release.parse("v0.34.0rc1+cu128")
    Release(key=(0, 34, 0), label='v0.34.0rc1+cu128')
    >>> Release.parse("nightly") is None
    True
    """

    key: tuple[int, ...]
    label: str

    @classmethod
    def parse(cls, label: str) -> Release | None:
        """The release ``label`` names, or None when it starts with no version number."""
        found = VERSION_PATTERN.match(label)
        if found is None:
            return None
        return cls(tuple(int(part) for part in found.group(1).split(".")), label.strip())

    def __str__(self) -> str:
        return self.label

    def series(self, depth: int) -> tuple[int, ...]:
        """The first ``depth`` numbers, missing ones as 0 (``0.34`` is ``0.34.0``)."""
        return (self.key + (0,) * depth)[:depth]


def _release(label: str) -> Release:
    """A release of the table: a version, or a commit of the source (no numbers: every range
    without bounds covers it)."""
    found = Release.parse(label)
    return found if found is not None else Release((), label)


@dataclass(frozen=True)
class Releases:
    """The releases a fact holds for: from ``first`` to ``last`` inclusive, each compared on
    as many numbers as it names (``0.33`` holds for ``0.33.2``); None: no bound on that side.

    >>> Releases("0.24", "0.33").covers(_release("0.33.2")), str(Releases("0.34", None))
    (True, '0.34 and newer')
    """

    first: str | None
    last: str | None

    def covers(self, release: Release) -> bool:
        if self.first is not None:
            bound = _release(self.first).key
            if release.series(len(bound)) < bound:
                return False
        if self.last is not None:
            bound = _release(self.last).key
            if release.series(len(bound)) > bound:
                return False
        return True

    def __str__(self) -> str:
        if self.first is None and self.last is None:
            return "every release"
        if self.first is None:
            return f"{self.last} and older"
        if self.last is None:
            return f"{self.first} and newer"
        if self.first == self.last:
            return self.first
        return f"{self.first} to {self.last}"


#: Every release of each engine whose facts were read from its source, oldest first; the last
#: is the one assumed when nothing says which release serves.
KNOWN_RELEASES: dict[Engine, tuple[str, ...]] = {
    "vllm": ("0.32.0", "0.33.0", "0.34.0"),
    "sglang": ("0.5.23",),
    # Read from stored source by commit, not a release (engines-2026-12.md section 1d).
    "trtllm": ("main@00043967",),
}


@dataclass(frozen=True)
class EngineFact:
    """One engine rule: the engine, the releases it holds for, its name (what the code asks
    for), what it is, its value (a number, yes/no, a text or a list of names) and its
    source (the engine's file and lines, or the note that holds them)."""

    engine: Engine
    releases: Releases
    name: str
    what: str
    value: FactValue
    source: str


_E12 = "engines-2026-12.md"
_E = "engines.md"
_OLD = Releases("0.24", "0.33")
_MRV2_ONLY = Releases("0.34", None)
#: SGLang's facts, read from the 0.5.23 wheel.
_SGLANG = Releases("0.5.23", None)
#: TensorRT-LLM's facts, read from its stored source by commit: a commit names no numbers, so
#: the range bounds nothing (every release is read with these rows; the source names the
#: commit each was read at).
_TRTLLM = Releases("main@00043967", "main@00043967")
_TRT_VALIDATOR = "tensorrt_llm/llmapi/llm_args.py @00043967"
_TRT_RUNTIME = "tensorrt_llm/_torch/speculative/utils.py @011d0933"

#: The table. Keep each engine's rows together, by name then release.
FACTS: tuple[EngineFact, ...] = (
    # --- SGLang 0.5.23 (read from its wheel, engines-2026-12.md section 1c; paths under srt/)
    EngineFact(
        "sglang",
        _SGLANG,
        "adaptive_algorithms",
        "the --speculative-algorithm values adaptive mode runs, after alias resolution; any"
        " other falls back to static K with a warning",
        ("EAGLE", "EAGLE3"),
        f"speculative/adaptive_spec_params.py#L56-L100 adaptive_unsupported_reason ({_E12} 1c)",
    ),
    EngineFact(
        "sglang",
        _SGLANG,
        "method_algorithms",
        "the --speculative-algorithm of each vLLM method, vllm=SGLang (vLLM's per-model *_mtp"
        " names are mtp)",
        (
            "eagle=EAGLE",
            "eagle3=EAGLE3",
            "mtp=NEXTN",
            "draft_model=STANDALONE",
            "ngram=NGRAM",
            "dflash=DFLASH",
        ),
        f'{_E12} 1c, "The method refusal is too strict"',
    ),
    EngineFact(
        "sglang",
        _SGLANG,
        "nextn_resolves_to",
        "what NEXTN (and EAGLE) resolve to before the adaptive check (L154, before"
        " _maybe_disable_adaptive at L262)",
        "EAGLE",
        f"arg_groups/speculative_hook.py#L81-L118 _resolve_speculative_algorithm_alias ({_E12} 1c)",
    ),
    EngineFact(
        "sglang",
        _SGLANG,
        "gemma4_assistant_architectures",
        "draft architectures NEXTN and EAGLE resolve to gemma4_assistant_algorithm for (EAGLE3"
        " is refused at startup)",
        ("Gemma4AssistantForCausalLM", "Gemma4UnifiedAssistantForCausalLM"),
        f"arg_groups/speculative_hook.py#L81-L118 ({_E12} 1c)",
    ),
    EngineFact(
        "sglang",
        _SGLANG,
        "gemma4_assistant_algorithm",
        "the algorithm a Gemma-4 assistant draft runs as (not one adaptive mode runs)",
        "FROZEN_KV_MTP",
        f"arg_groups/speculative_hook.py#L81-L118 ({_E12} 1c)",
    ),
    EngineFact(
        "sglang",
        _SGLANG,
        "multi_layer_eagle_architectures",
        "target architectures for which EAGLE (so NEXTN) turns enable_multi_layer_eagle on,"
        " which adaptive mode does not run (MultiLayerEagleWorkerV2)",
        (
            "MiMoV2ForCausalLM",
            "MiMoV2FlashForCausalLM",
            "GigaChat35ForCausalLM",
            "GigaChat35ForCausalLMNextN",
            "Step3p5ForCausalLM",
            "Step3p7ForConditionalGeneration",
        ),
        "arg_groups/model_overrides/mimo_v2.py#L19-L25, model_overrides/gigachat35.py#L14-L22,"
        " arg_groups/overrides.py#L331-L350; speculative/adaptive_spec_params.py#L85-L89",
    ),
    EngineFact(
        "sglang",
        _SGLANG,
        "adaptive_topk",
        "the only --speculative-eagle-topk adaptive mode runs (unset means it)",
        1,
        f"speculative/adaptive_spec_params.py#L75-L79 ({_E} section 6)",
    ),
    EngineFact(
        "sglang",
        _SGLANG,
        "num_steps_in_candidates",
        "--speculative-num-steps must be one of the slots' candidate steps (else ValueError)",
        True,
        f"arg_groups/speculative_hook.py#L1392-L1427 ({_E12} 1c, list1 with steps 4)",
    ),
    EngineFact(
        "sglang",
        _SGLANG,
        "decode_graph_sizes",
        "decode CUDA-graph batch sizes with speculation, first-last/step, up to the decode"
        " graph maximum",
        ("1-8/1", "10-32/2", "40-64/4", "72-256/8", "272-max/16"),
        f"arg_groups/cuda_graph_hook.py#L500-L532 ({_E12} 1c)",
    ),
    EngineFact(
        "sglang",
        _SGLANG,
        "decode_graph_max_appended",
        "the decode graph maximum is itself a size when the steps miss it",
        True,
        f"arg_groups/cuda_graph_hook.py#L529-L530 ({_E12} 1c)",
    ),
    EngineFact(
        "sglang",
        _SGLANG,
        "decode_graph_max_by_gpu_memory",
        "default decode graph maximum: GPU memory below (GiB) : at TP below"
        " decode_graph_max_large_tp : at TP from it; then capped at --max-running-requests",
        ("20:8:8", "35:48:160", "60:32:160", "160:256:512", "inf:512:512"),
        f"arg_groups/memory_hook.py#L84-L205 ({_E12} 1c)",
    ),
    EngineFact(
        "sglang",
        _SGLANG,
        "decode_graph_max_large_tp",
        "the tensor parallelism from which decode_graph_max_by_gpu_memory's larger maximum holds",
        4,
        f"arg_groups/memory_hook.py#L84-L205 ({_E12} 1c)",
    ),
    EngineFact(
        "sglang",
        _SGLANG,
        "decode_graph_max_unknown_gpu",
        "default decode graph maximum where SGLang cannot read the GPU's memory",
        160,
        f"arg_groups/memory_hook.py#L84-L205 ({_E12} 1c)",
    ),
    EngineFact(
        "sglang",
        _SGLANG,
        "decode_graph_list_flag",
        "the flag listing the decode graph batch sizes (0.5.23 has no --cuda-graph-bs)",
        "--cuda-graph-bs-decode",
        f"arg_groups/fields/exec_.py#L629-L647 ({_E12} 1c)",
    ),
    EngineFact(
        "sglang",
        _SGLANG,
        "decode_graph_list_replaces_default",
        "an explicit decode_graph_list_flag list replaces the default list, its largest entry"
        " the maximum",
        True,
        f"arg_groups/memory_hook.py#L200-L207 ({_E12} 1c)",
    ),
    # --- vLLM: the schedule's format and validator
    EngineFact(
        "vllm",
        Releases("0.24", None),
        "schedule_field",
        "the speculative_config field of the batch schedule (Dynamic SD exists from 0.24.0)",
        "num_speculative_tokens_per_batch_size",
        f"v1/spec_decode/dynamic/utils.py#L7-L74 (0.24.0, 0.33.0); 0.34.0 byte-identical ({_E12}"
        " finding 4)",
    ),
    EngineFact(
        "vllm",
        Releases("0.24", None),
        "schedule_entry_items",
        "items of one schedule entry [lo, hi, K]; 5-item entries are refused",
        3,
        f"v1/spec_decode/dynamic/utils.py#L7-L74; 0.34.0 ({_E12} finding 4)",
    ),
    EngineFact(
        "vllm",
        Releases("0.24", None),
        "rejected_fields",
        "open-PR schedule fields released vLLM refuses (Unexpected keyword argument)",
        ("speculative_token_schedule", "num_speculative_tokens_per_seq_len"),
        f"SpeculativeConfig, 0.33.0 and 0.34.0 ({_E12} finding 4)",
    ),
    EngineFact(
        "vllm",
        Releases("0.24", None),
        "k_clamped_to_global",
        "a K above num_speculative_tokens is clamped silently (not refused)",
        True,
        f"v1/spec_decode/dynamic/utils.py#L77-L148 ({_E} section 4)",
    ),
    EngineFact(
        "vllm",
        Releases("0.24", None),
        "ranges_past_max_num_seqs_ignored",
        "ranges past max_num_seqs are ignored, not refused",
        True,
        f"v1/spec_decode/dynamic/utils.py#L7-L74 ({_E} section 4)",
    ),
    # --- vLLM: Dynamic SD switched off or changed
    EngineFact(
        "vllm",
        Releases("0.24", None),
        "dp_disables_dsd",
        "data parallelism > 1 disables the schedule (static K, with a warning): read from a"
        " saved server config's parallel_config.data_parallel_size (a warning where it is"
        " above 1); not known without one",
        True,
        f"config/vllm.py: 0.33.0 L1110-L1127 ({_E} section 4), 0.34.0 L1031-L1048 ({_E12} 1b)",
    ),
    EngineFact(
        "vllm",
        _OLD,
        "mrv1_dsd_methods",
        "methods model runner v1 keeps the schedule for (others: static K, with a warning)",
        ("ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash"),
        "config/vllm.py, 0.33.0 L1088-L1108",
    ),
    EngineFact(
        "vllm",
        _OLD,
        "mrv1_forces_piecewise",
        "model runner v1 forces PIECEWISE CUDA graphs under Dynamic SD (the capture check"
        " assumes model runner v2, 0.33's default, and a note says so)",
        True,
        "config/vllm.py: 0.24.0 L758-L772, 0.33.0 L1069-L1086",
    ),
    EngineFact(
        "vllm",
        _MRV2_ONLY,
        "mrv1_forces_piecewise",
        "model runner v1 is removed (VLLM_USE_V2_MODEL_RUNNER other than 1 is an error): no"
        " method gate, no forced PIECEWISE",
        False,
        "platforms/interface.py#L1481-L1490 (0.34.0)",
    ),
    # --- vLLM: the CUDA-graph capture rule
    EngineFact(
        "vllm",
        _OLD,
        "capture_rule",
        "how decode steps meet CUDA graphs: token-ceiling: b*(1+K(b)) <= C, C the final"
        " max_cudagraph_capture_size",
        "token-ceiling",
        "config/vllm.py#L2398-L2650 (0.33.0), #L1635-L1760 (0.24.0)",
    ),
    EngineFact(
        "vllm",
        _MRV2_ONLY,
        "capture_rule",
        "how decode steps meet CUDA graphs: decode-requests: R = min(S, floor(C0/(1+Kmin)));"
        " FULL iff b <= R and b*(1+K(b)) <= M, else PIECEWISE iff b*(1+K(b)) <= C0, else none",
        "decode-requests",
        "config/vllm.py#L2322-L2700, config/compilation.py#L54-L127,"
        " v1/worker/gpu/cudagraph_utils.py#L154-L604 (0.34.0)",
    ),
    EngineFact(
        "vllm",
        Releases("0.24", None),
        "platform_ceiling",
        "C0's platform limit off SM100: C0 = min(2*max_num_seqs*(1+K), this), then at most"
        " max_num_batched_tokens",
        512,
        "config/vllm.py: 0.24.0 L1688-L1692, 0.33.0 L2463-L2465; 0.34.0 runs (resolved 512)",
    ),
    EngineFact(
        "vllm",
        Releases("0.24", "0.32"),
        "sm100_platform_ceiling",
        "C0's platform limit on SM100 (B200, GB200, B300)",
        512,
        "config/vllm.py#L1688-L1692 (0.24.0: 512 everywhere)",
    ),
    EngineFact(
        "vllm",
        Releases("0.33", None),
        "sm100_platform_ceiling",
        "C0's platform limit on SM100 (B200, GB200, B300)",
        1024,
        "config/vllm.py#L2463-L2465 (0.33.0, #49390)",
    ),
    EngineFact(
        "vllm",
        _MRV2_ONLY,
        "sm100_decode_token_budget",
        "max_decode_cudagraph_capture_tokens's default on SM100 (none elsewhere); there the"
        " decode request ceiling is max_num_seqs",
        8192,
        "config/compilation.py#L54-L127, config/vllm.py#L2655-L2660 (0.34.0)",
    ),
    EngineFact(
        "vllm",
        Releases("0.24", None),
        "capture_sizes",
        "default capture sizes, in tokens, first-last/step (a lone number: itself) up to the"
        " ceiling: 1, 2, 4, steps of 8 to 256, of 16 beyond",
        ("1", "2", "4", "8-256/8", "272-max/16"),
        f"config/vllm.py#L1635-L1760 (0.24.0), #L2398-L2650 (0.33.0) ({_E} section 1)",
    ),
    EngineFact(
        "vllm",
        _OLD,
        "ceiling_fields",
        "the /server_info compilation_config fields that state the capture ceiling",
        ("max_cudagraph_capture_size", "cudagraph_capture_sizes"),
        "entrypoints/serve/dev/server_info/api_router.py#L43-L59",
    ),
    EngineFact(
        "vllm",
        _MRV2_ONLY,
        "ceiling_fields",
        "the /server_info compilation_config fields that state the decode graphs"
        " (max_cudagraph_capture_size is the widest graph of any kind, drafter's included:"
        " not the target's decode ceiling)",
        (
            "max_decode_cudagraph_capture_requests",
            "decode_cudagraph_capture_request_sizes",
            "max_decode_cudagraph_capture_tokens",
            "prefill_cudagraph_capture_token_sizes",
        ),
        "config/compilation.py#L752-L801, config/vllm.py#L2731-L2732 (0.34.0)",
    ),
    EngineFact(
        "vllm",
        _OLD,
        "raise_ceiling",
        "how to raise the ceiling for a schedule instead of capping it",
        "list n*(1+K) per tier in cudagraph_capture_sizes",
        f"{_E} section 1",
    ),
    EngineFact(
        "vllm",
        _MRV2_ONLY,
        "raise_ceiling",
        "how to raise the ceiling for a schedule instead of capping it",
        "-cc.max_decode_cudagraph_capture_requests=N",
        f"config/compilation.py#L54-L127 (0.34.0; {_E12} section 1b)",
    ),
    # --- vLLM: defaults
    EngineFact(
        "vllm",
        Releases("0.24", None),
        "default_max_num_seqs",
        "max_num_seqs when not given, on a GPU below large_gpu_gib (every GPU up to 0.32 as"
        " this tool assumes; the GPU rule was read from 0.33 on)",
        256,
        f"{_E} section 1 (up to 0.32); {_E12} finding 3 (0.33.0, 0.34.0)",
    ),
    EngineFact(
        "vllm",
        Releases("0.33", None),
        "large_gpu_gib",
        "GPU memory, in GiB, from which max_num_seqs's default is large_gpu_max_num_seqs",
        70,
        f"{_E12} finding 3 (0.33.0, 0.34.0)",
    ),
    EngineFact(
        "vllm",
        Releases("0.33", None),
        "large_gpu_max_num_seqs",
        "max_num_seqs when not given, on a GPU of large_gpu_gib or more (H100, H200, B200)",
        1024,
        f"{_E12} finding 3 (0.33.0, 0.34.0)",
    ),
    # --- TensorRT-LLM (stored source by commit; engines.md section 5, engines-2026-12.md 1d)
    EngineFact(
        "trtllm",
        _TRTLLM,
        "schedule_field",
        "the speculative config field of the batch schedule {batch_size_upper_bound: K}",
        "draft_len_schedule",
        f"{_TRT_VALIDATOR} DecodingBaseConfig ({_E} section 5)",
    ),
    EngineFact(
        "trtllm",
        _TRTLLM,
        "max_draft_len_field",
        "the speculative config field of the maximum draft length (vLLM's num_speculative_tokens)",
        "max_draft_len",
        f"{_TRT_VALIDATOR} ({_E} section 5)",
    ),
    EngineFact(
        "trtllm",
        _TRTLLM,
        "max_draft_len_at_smallest_key",
        "the validator wants schedule[smallest key] == max_draft_len",
        True,
        f"{_TRT_VALIDATOR} validate_draft_len_schedule_and_sort ({_E} section 5)",
    ),
    EngineFact(
        "trtllm",
        _TRTLLM,
        "k_above_max_draft_len_refused",
        "the validator refuses a K above max_draft_len",
        True,
        f"{_TRT_VALIDATOR} validate_draft_len_schedule_and_sort ({_E} section 5)",
    ),
    EngineFact(
        "trtllm",
        _TRTLLM,
        "positive_max_draft_len_methods",
        "methods whose config requires max_draft_len > 0 (a first K of 0 is refused)",
        ("eagle", "eagle3"),
        f"{_TRT_VALIDATOR} EagleDecodingConfig.validate_eagle_config ({_E12} 1d)",
    ),
    EngineFact(
        "trtllm",
        _TRTLLM,
        "older_copies_require_key_one",
        "older copies of the validator (stage 1) require key 1 and schedule[1] =="
        " max_draft_len (so key 1 is written)",
        True,
        f"the stage-1 llm_args.py ({_E12} 1d, finding 4)",
    ),
    EngineFact(
        "trtllm",
        _TRTLLM,
        "upper_bound_keys_since",
        "the PR from which keys are batch-size upper bounds (builds before it read them as"
        " lower bounds)",
        "#10860",
        f"{_TRT_RUNTIME} ({_E} section 5; {_E12} 1d)",
    ),
    EngineFact(
        "trtllm",
        _TRTLLM,
        "draft_len_past_largest_key",
        "the draft length above the largest key (min_draft_len; newer builds: the mode's"
        " floor), where vLLM keeps the last K",
        0,
        f"{_TRT_RUNTIME} get_draft_len_for_batch_size ({_E} section 5; {_E12} 1d)",
    ),
    EngineFact(
        "trtllm",
        _TRTLLM,
        "floor_zero_modes",
        "modes whose min_runtime_draft_len is 0: a K=0 range drafts 0",
        ("linear Eagle3 one-model", "MTP one-model", "NGram"),
        f"{_TRT_RUNTIME} ({_E12} 1d)",
    ),
    EngineFact(
        "trtllm",
        _TRTLLM,
        "floor_one_modes",
        "modes whose min_runtime_draft_len is 1: a K=0 range drafts 1",
        ("Eagle3 dynamic tree", "MTP with the SA enhancer", "draft-target", "PARD"),
        f"{_TRT_RUNTIME} ({_E12} 1d: floor 1 runs K=1 where the schedule says 0)",
    ),
    EngineFact(
        "trtllm",
        _TRTLLM,
        "schedule_ignored_by",
        "methods whose runtime ignores draft_len_schedule (vanilla MTP, not MTP-Eagle)",
        ("mtp",),
        f"{_TRT_RUNTIME} ({_E} section 5)",
    ),
)


@functools.cache  # the table is constant; the deployment asks the same rows per batch size
def facts_of(engine: Engine, release: Release) -> tuple[EngineFact, ...]:
    """Every row of ``engine`` that holds for ``release``, in the table's order."""
    return tuple(f for f in FACTS if f.engine == engine and f.releases.covers(release))


@functools.cache
def fact(engine: Engine, name: str, release: Release) -> EngineFact | None:
    """The row ``name`` of ``engine`` for ``release``; None where no row holds for it (the
    fact is not known for that release, or does not apply).

    >>> fact("vllm", "capture_rule", Release.parse("0.33.0")).value
    'token-ceiling'
    >>> fact("vllm", "mrv1_dsd_methods", Release.parse("0.34.0")) is None
    True
    """
    found = [f for f in facts_of(engine, release) if f.name == name]
    assert len(found) <= 1, f"two rows of {engine} {name} hold for {release}"
    return found[0] if found else None


def _value(engine: Engine, name: str, release: Release) -> FactValue:
    found = fact(engine, name, release)
    if found is None:
        raise KeyError(f"no {engine} fact {name!r} for release {release}")
    return found.value


def number(engine: Engine, name: str, release: Release) -> int:
    """A fact that is a number (KeyError where none holds for ``release``)."""
    value = _value(engine, name, release)
    assert isinstance(value, int) and not isinstance(value, bool), (name, value)
    return value


def number_or_none(engine: Engine, name: str, release: Release) -> int | None:
    """A fact that is a number, or None where no row holds for ``release``."""
    return number(engine, name, release) if fact(engine, name, release) is not None else None


def holds(engine: Engine, name: str, release: Release) -> bool:
    """A yes/no fact; False where no row holds for ``release``."""
    found = fact(engine, name, release)
    if found is None:
        return False
    assert isinstance(found.value, bool), (name, found.value)
    return found.value


def text(engine: Engine, name: str, release: Release) -> str:
    """A fact that is a text (KeyError where none holds for ``release``)."""
    value = _value(engine, name, release)
    assert isinstance(value, str), (name, value)
    return value


def names(engine: Engine, name: str, release: Release) -> tuple[str, ...]:
    """A fact that is a list of names; empty where no row holds for ``release``."""
    found = fact(engine, name, release)
    if found is None:
        return ()
    assert isinstance(found.value, tuple), (name, found.value)
    return found.value


@functools.cache
def size_runs(
    engine: Engine, name: str, release: Release
) -> tuple[tuple[int, int | None, int], ...]:
    """A fact that lists sizes as runs ``first-last/step`` (``max``: up to a maximum the caller
    gives; a lone number: itself), as (first, last or None, step) per run.

    >>> size_runs("vllm", "capture_sizes", Release.parse("0.34.0"))[2:]
    ((4, 4, 1), (8, 256, 8), (272, None, 16))
    """
    runs = []
    for run in names(engine, name, release):
        span, _, step = run.partition("/")
        first, _, last = span.partition("-")
        end = None if last == "max" else int(last or first)
        runs.append((int(first), end, int(step or 1)))
    return tuple(runs)


def newest(engine: Engine) -> Release:
    """The newest known release of ``engine``: the one assumed when nothing says which.

    >>> str(newest("vllm"))
    '0.34.0'
    """
    return _release(KNOWN_RELEASES[engine][-1])


def newer_than_known(engine: Engine, release: Release) -> bool:
    """Whether ``release`` is newer than every known release of ``engine`` (its facts are
    then the newest known release's, an assumption the caller names)."""
    return release.key > newest(engine).key


def _cell(value: FactValue) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, tuple):
        return ", ".join(f"`{v}`" for v in value)
    if isinstance(value, int):
        return str(value)
    return f"`{value}`" if " " not in value else value


def facts_table() -> str:
    """The table as Markdown, one row per fact, as ``docs/formats.md`` prints it."""
    lines = [
        "| engine | releases | fact | value | what | source |",
        "|---|---|---|---|---|---|",
    ]
    for engine in ENGINES:
        known = ", ".join(KNOWN_RELEASES[engine])
        lines.append(f"| {engine} | known: {known} | (newest assumed) | {newest(engine)} | | |")
        for row in FACTS:
            if row.engine != engine:
                continue
            what = row.what.replace("|", "\\|")
            lines.append(
                f"| {engine} | {row.releases} | `{row.name}` | {_cell(row.value)} | {what} |"
                f" {row.source} |"
            )
    return "\n".join(lines) + "\n"
