"""lib/deploy/formats/sglang.py: the adaptive config SGLang reads, what it refuses, and where its
padding to CUDA-graph batch sizes moves a boundary."""

from __future__ import annotations

import bisect
import json
import re

import pytest
from paths import SAMPLE_SWEEPS

from lib.deploy.decisions import Decisions
from lib.deploy.formats.sglang import (
    MULTI_LAYER_EAGLE_TARGETS,
    decode_graph_max,
    default_decode_graph_max,
    graph_batch_sizes,
    padding_shifts,
    read,
)
from lib.deploy.registry import export
from lib.deploy.releases import names, newest
from lib.deploy.settings import ExportSettings
from lib.schedule import Schedule
from lib.settings import DeploySettings

SGLANG = ExportSettings(format="sglang")
ISSUE = Schedule(((1, 31, 3), (32, 127, 1), (128, 256, 0)))


def decisions(schedule: Schedule, **config: object) -> Decisions:
    return Decisions(schedule, 3, "t", "t", speculative_config={"method": "eagle3", **config})


def sglang_accepts(config: dict[str, object], num_steps: int, strategy: str = "ema") -> bool:
    """SGLang's checks, written from its source's rules (engines.md 6 and docs/formats.md):
    integer-string slot keys with a non-empty list of whole candidate steps (positive under
    throughput_aware), and --speculative-num-steps in their union."""
    slots = {key: value for key, value in config.items() if key.isdigit()}
    if not slots:
        return False
    union: set[int] = set()
    for slot in slots.values():
        steps = slot["candidate_steps"]  # type: ignore[index]
        if not steps or not all(
            isinstance(s, int) and s >= (1 if strategy != "ema" else 0) for s in steps
        ):
            return False
        union |= set(steps)
    return num_steps in union and config.get("strategy", "ema") in ("ema", "throughput_aware")


def test_each_range_is_a_frozen_slot_keyed_by_its_lower_bound() -> None:
    exported, problems = export(decisions(ISSUE), SGLANG)
    assert problems == [] and exported is not None
    assert exported.config == {
        "strategy": "ema",
        "1": {"candidate_steps": [3]},
        "32": {"candidate_steps": [1]},
        "128": {"candidate_steps": [0]},
    }
    assert sglang_accepts(dict(exported.config), num_steps=3)
    line = exported.lines()[1]
    assert "--speculative-num-steps 3" in line
    assert (
        "--speculative-adaptive --speculative-adaptive-config sglang_adaptive_config.json" in line
    )
    assert "--speculative-algorithm EAGLE3" in line


def test_its_file_reads_back_as_the_schedule() -> None:
    exported, _ = export(decisions(ISSUE), SGLANG)
    assert exported is not None
    found = read(dict(exported.config), "s.json")
    assert found is not None and found[0] is not None
    # The file has no upper bound: the last range ends at its start; vLLM keeps K=0 past it.
    assert found[0].schedule == Schedule(((1, 31, 3), (32, 127, 1), (128, 128, 0)))
    refused = read({"1": {"candidate_steps": [1, 3]}}, "s.json")
    assert refused is not None and refused[0] is None and "not one step" in refused[1]


@pytest.mark.parametrize("key", ["6\u00b2", "\u0666\u0664", "0", "-64", " 64", "+64", "64.0"])
def test_a_slot_under_a_key_that_is_no_batch_size_is_refused(key: str) -> None:
    """Issue 38, kind 16: "6²" passed ``str.isdigit()`` and crashed ``int()``; "٦٤" was read as
    64. A slot's key is a batch size in ASCII digits from 1 (lib.keys.whole_number_text);
    other slots are refused by name, never skipped."""
    slots = {"1": {"candidate_steps": [3]}, key: {"candidate_steps": [0]}}
    found = read({"strategy": "ema", **slots}, "s.json")
    assert found is not None and found[0] is None
    assert found[1].startswith(f"SGLang slot key {key!r} is not a batch size"), found[1]
    # A key that holds no slot is a default of every slot, as SGLang reads it.
    found = read({"ema_alpha": 0.2, "1": {"candidate_steps": [3]}}, "s.json")
    assert found is not None and found[0] is not None


@pytest.mark.parametrize(
    ("config", "rule"),
    [
        ({"method": "ngram"}, "sglang-method"),
        ({"method": "medusa"}, "sglang-method"),
        ({"speculative_eagle_topk": 4}, "sglang-topk"),
    ],
)
def test_what_sglangs_adaptive_mode_does_not_run_is_refused(
    config: dict[str, object], rule: str
) -> None:
    exported, problems = export(decisions(ISSUE, **config), SGLANG)
    assert exported is None and problems[0].rule == rule
    allowed, problems = export(decisions(ISSUE, speculative_eagle_topk=1), SGLANG)
    assert allowed is not None and problems == []


def test_k0_everywhere_and_num_steps_outside_the_candidates_are_refused() -> None:
    none, problems = export(decisions(Schedule(((1, 64, 0),))), SGLANG)
    assert none is None and problems[0].rule == "sglang-no-speculation"
    # engines-2026-12.md 1c: list1 with steps 4 was rejected by 0.5.23 ("--speculative-num-steps=4
    # is not in the adaptive config candidate_steps [0, 1, 3]").
    rejected, problems = export(decisions(ISSUE), ExportSettings(format="sglang", global_k=4))
    assert rejected is None and problems[0].expected == "0, 1, 3"
    outside, problems = export(decisions(ISSUE), ExportSettings(format="sglang", global_k=2))
    assert outside is None and problems[0].rule == "sglang-num-steps"
    inside, problems = export(decisions(ISSUE), ExportSettings(format="sglang", global_k=1))
    assert inside is not None and problems == []


def test_padding_moves_a_boundary_unless_lo_minus_1_is_a_graph_size() -> None:
    sizes = graph_batch_sizes(256)
    assert 34 not in sizes and 32 in sizes and 40 in sizes
    # Key 36: batches 33-35 pad to 40 and take its K.
    assert padding_shifts(Schedule(((1, 35, 3), (36, 64, 1))), sizes) == [(33, 35, 1, 3)]
    assert padding_shifts(Schedule(((1, 32, 3), (33, 64, 1))), sizes) == []
    # Past the largest graph size there is no padding.
    assert padding_shifts(Schedule(((1, 300, 3), (301, 400, 1))), graph_batch_sizes(256)) == []
    exported, _ = export(decisions(Schedule(((1, 35, 3), (36, 64, 1)))), SGLANG)
    assert exported is not None and any("33-35" in w for w in exported.warnings)


# ------------------------------------------------------------------ SGLang 0.5.23's own code
# engines-2026-12.md 1c ran SGLang 0.5.23's router (adaptive_spec_params.py: _pad_to_cuda_graph_bs,
# bisect_left over the decode graph sizes, a batch above the largest not padded; then
# _find_closest_bs, bisect_right - 1 over the slot keys) on three exports at six decode graph
# maxima. Below: what it found, and the router written again from that description.


def sglang_routes(batch: int, sizes: list[int], keys: list[int]) -> int:
    """The slot key SGLang 0.5.23 routes a decode batch of ``batch`` requests to."""
    position = bisect.bisect_left(sizes, batch)
    padded = sizes[position] if position < len(sizes) else batch
    return keys[max(0, bisect.bisect_right(keys, padded) - 1)]


def moved_batches(schedule: Schedule, sizes: list[int], upto: int = 600) -> set[int]:
    """The batches whose routed slot's K is not the schedule's K for them (vLLM's lookup)."""
    keys = sorted(lo for lo, _, _ in schedule.ranges)
    return {
        batch
        for batch in range(1, upto + 1)
        if schedule.k_at(sglang_routes(batch, sizes, keys)) != schedule.k_at(batch)
    }


SONNET_LIKE = Schedule(((1, 63, 7), (64, 256, 0)))  # {"1": [7], "64": [0]}
LIST1 = ISSUE  # {"1": [3], "32": [1], "128": [0]}
LIST2 = Schedule(((1, 32, 5), (33, 64, 3), (65, 128, 1), (129, 256, 0)))
#: The harness's table, "routing vs vLLM's lookup (graph max 8 / 32 / 48 / 160 / 256 / 512)":
#: per export and graph maximum, (first batch, last batch, K run, K meant) of each moved run.
HARNESS_ROUTING = {
    "sonnet-like": (
        SONNET_LIKE,
        {8: (), 32: (), 48: (), **dict.fromkeys((160, 256, 512), ((61, 63, 0, 7),))},
    ),
    "list1": (
        LIST1,
        {
            8: (),
            **dict.fromkeys((32, 48), ((31, 31, 1, 3),)),
            **dict.fromkeys((160, 256, 512), ((31, 31, 1, 3), (121, 127, 0, 1))),
        },
    ),
    "list2": (LIST2, dict.fromkeys((8, 32, 48, 160, 256, 512), ())),
}


@pytest.mark.parametrize("name", sorted(HARNESS_ROUTING))
def test_padding_shifts_are_the_batches_sglangs_router_moved(name: str) -> None:
    schedule, by_graph_max = HARNESS_ROUTING[name]
    for graph_max, found in by_graph_max.items():
        sizes = graph_batch_sizes(graph_max)
        assert padding_shifts(schedule, sizes) == list(found), (name, graph_max)
        # The router written again agrees, batch by batch, up to past every maximum.
        expected = {batch for low, high, _, _ in found for batch in range(low, high + 1)}
        assert moved_batches(schedule, sizes) == expected, (name, graph_max)


def test_default_graph_sizes_are_the_ones_sglang_captured() -> None:
    """The harness: list1 at graph max 256 captured K=3 at 19 sizes 1-30, K=1 at 15 sizes
    32-120, K=0 at 17 sizes 128-256 (graphs for a K only at the sizes routing to it)."""
    sizes = graph_batch_sizes(256)
    keys = [1, 32, 128]
    by_k: dict[int, list[int]] = {}
    for size in sizes:
        by_k.setdefault(LIST1.k_at(sglang_routes(size, sizes, keys)), []).append(size)
    assert {k: (len(s), s[0], s[-1]) for k, s in by_k.items()} == {
        3: (19, 1, 30),
        1: (15, 32, 120),
        0: (17, 128, 256),
    }
    # 0.5.23 appends the maximum itself when the steps miss it; above 256 the step is 16.
    assert graph_batch_sizes(300)[-3:] == [272, 288, 300]
    assert graph_batch_sizes(512)[-2:] == [496, 512]


@pytest.mark.parametrize(
    ("gib", "tp", "largest"),
    [
        # The doc's table (memory_hook.py L84-L205), each memory bound from both sides.
        (15.0, 1, 8),
        (15.0, 8, 8),
        (19.9, 1, 8),
        (20.0, 1, 48),
        (24.0, 3, 48),
        (24.0, 4, 160),
        (34.9, 1, 48),
        (35.0, 1, 32),
        (40.0, 4, 160),
        (59.9, 1, 32),
        (60.0, 1, 256),
        (79.6, 1, 256),  # H100
        (79.6, 3, 256),
        (79.6, 4, 512),
        (139.8, 2, 256),  # H200
        (159.9, 8, 512),
        (160.0, 1, 512),
        (178.4, 1, 512),  # B200
        (None, 1, 160),
        (None, 8, 160),
    ],
)
def test_sglangs_default_decode_graph_max_by_gpu_and_tp(
    gib: float | None, tp: int, largest: int
) -> None:
    assert default_decode_graph_max(gib, tp) == largest


def test_an_unrecorded_gpu_assumes_the_largest_default_and_says_so() -> None:
    """Every default maximum (8, 32, 48, 160, 256, 512) is one of the 512 list's sizes, so each
    default list is a prefix of it: checked against 512, no moved boundary is missed."""
    assumed = decode_graph_max(None, None)
    assert (
        assumed.size == 512
        and "not recorded, so SGLang 0.5.23's largest default is assumed" in assumed.basis
    )
    longest = graph_batch_sizes(512)
    for largest in (8, 32, 48, 160, 256):
        assert graph_batch_sizes(largest) == longest[: longest.index(largest) + 1]
    given = decode_graph_max(79.6, None)
    assert given.size == 256 and "tensor parallelism 1, assumed" in given.basis
    assert decode_graph_max(79.6, 4).size == 512
    exported, _ = export(decisions(ISSUE), SGLANG)
    assert exported is not None
    assert any("up to 512: the GPU is not recorded" in note for note in exported.notes)
    h100 = DeploySettings(gpu_memory_gib=79.6, tensor_parallel_size=1)
    exported, _ = export(decisions(ISSUE), SGLANG, h100)
    assert exported is not None
    assert any(
        "up to 256: SGLang 0.5.23's default for a GPU of 79.6 GiB" in n for n in exported.notes
    )


def test_the_padding_hint_gives_the_default_list_plus_the_boundary_sizes() -> None:
    """0.5.23 has --cuda-graph-bs-decode (no --cuda-graph-bs), and an explicit list *replaces*
    the default one, its maximum the list's largest (memory_hook.py L200-L207): the hint gives
    the default list plus each lo - 1, and with it SGLang's router moves no batch."""
    for gib, graph_max in ((79.6, 256), (None, 512)):
        exported, _ = export(decisions(ISSUE), SGLANG, DeploySettings(gpu_memory_gib=gib))
        assert exported is not None
        assert not any("--cuda-graph-bs " in w for w in exported.warnings)
        assert any("batch size 31 " in w and "plus 31" in w for w in exported.warnings)
        assert all("replaces SGLang's default list" in w for w in exported.warnings[:-1])
        (hint,) = [w for w in exported.warnings if w.startswith("to keep every boundary")]
        match = re.search(r"--cuda-graph-bs-decode ([\d ]+) \(", hint)
        assert match is not None
        listed = [int(size) for size in match.group(1).split()]
        defaults = graph_batch_sizes(graph_max)
        assert set(listed) - set(defaults) == {31, 127}
        assert set(defaults) <= set(listed) and listed == sorted(listed)
        assert max(listed) == graph_max
        assert moved_batches(ISSUE, listed) == set() != moved_batches(ISSUE, defaults)
    exact, _ = export(decisions(LIST2), SGLANG)
    assert exact is not None and exact.warnings == ()


def _long_context_speculative_config() -> dict[str, object]:
    """The long-context sample's recorded speculative_config (its draft is a Gemma-4
    assistant)."""
    run = next(SAMPLE_SWEEPS.glob("long-context/*/run=0.json"))
    config = json.loads(run.read_text())["speculative_config"]
    assert isinstance(config, dict)
    return config


@pytest.mark.parametrize(
    ("method", "model", "algorithm"),
    [
        ("mtp", "deepseek-ai/DeepSeek-V3", "NEXTN"),
        ("deepseek_mtp", "deepseek-ai/DeepSeek-V3", "NEXTN"),
        ("qwen3_next_mtp", None, "NEXTN"),
        ("eagle", "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "EAGLE"),
        ("eagle3", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "EAGLE3"),
        # SGLang turns multi-layer EAGLE on for MiMo-V2 under EAGLE (NEXTN) only.
        ("eagle3", "XiaomiMiMo/MiMo-V2-Flash-EAGLE3", "EAGLE3"),
    ],
)
def test_mtp_and_eagle_export_with_their_sglang_algorithm(
    method: str, model: str | None, algorithm: str
) -> None:
    """engines-2026-12.md 1c: 0.5.23 resolves NEXTN to EAGLE before its adaptive check, so an
    MTP sweep deploys as --speculative-algorithm NEXTN."""
    config = {"method": method, **({"model": model} if model else {})}
    exported, problems = export(decisions(ISSUE, **config), SGLANG)
    assert problems == [] and exported is not None
    assert f"--speculative-algorithm {algorithm} " in exported.lines()[1]
    assert any(n.startswith("NEXTN") for n in exported.notes) == (algorithm == "NEXTN")


@pytest.mark.parametrize(
    ("method", "model", "rule", "why"),
    [
        ("draft_model", "Qwen/Qwen3-0.6B", "sglang-method", "would run STANDALONE at a static K"),
        ("ngram", None, "sglang-method", "would run NGRAM at a static K"),
        ("dflash", "z-lab/Qwen3-8B-DFlash", "sglang-method", "would run DFLASH at a static K"),
        ("medusa", None, "sglang-method", "no speculative algorithm for vLLM's method medusa"),
        ("mtp", "google/gemma-4-31B-it-assistant", "sglang-draft", "as FROZEN_KV_MTP"),
        ("eagle", "google/gemma-4-E4B-it-assistant", "sglang-draft", "as FROZEN_KV_MTP"),
        ("eagle3", "google/gemma-4-31B-it-assistant", "sglang-draft", "refuses it with EAGLE3"),
        ("mtp", "XiaomiMiMo/MiMo-V2-Flash", "sglang-draft", "multi-layer EAGLE"),
        ("eagle", "stepfun-ai/Step-3.5-Flash", "sglang-draft", "multi-layer EAGLE"),
        (
            "mtp",
            "ai-sage/GigaChat3.5-702B-A36B",
            "sglang-draft",
            "of GigaChat35ForCausalLM, GigaChat35ForCausalLMNextN, for which SGLang turns"
            " multi-layer EAGLE on under NEXTN",
        ),
        ("mtp", "XiaomiMiMo/MiMo-V2-Flash", "sglang-draft", "MiMoV2FlashForCausalLM"),
        ("eagle", "stepfun-ai/Step-3.7", "sglang-draft", "Step3p7ForConditionalGeneration"),
    ],
)
def test_what_0_5_23_falls_back_on_is_refused_naming_why(
    method: str, model: str | None, rule: str, why: str
) -> None:
    config = {"method": method, **({"model": model} if model else {})}
    exported, problems = export(decisions(ISSUE, **config), SGLANG)
    assert exported is None and [p.rule for p in problems] == [rule]
    assert why in problems[0].message and problems[0].files == ("t",)


def test_the_long_context_samples_gemma_4_assistant_draft_is_refused() -> None:
    """engines-2026-12.md 1c: "The long-context sample is refused correctly, because its draft
    is a Gemma-4 assistant" (method mtp, which is otherwise NEXTN)."""
    config = _long_context_speculative_config()
    assert config["method"] == "mtp"
    recorded = Decisions(ISSUE, 3, "t", "t", speculative_config=config)
    exported, problems = export(recorded, SGLANG)
    assert exported is None and problems[0].rule == "sglang-draft"
    assert problems[0].value == "google/gemma-4-31B-it-assistant"
    architectures = "Gemma4AssistantForCausalLM or Gemma4UnifiedAssistantForCausalLM"
    assert f"a Gemma-4 assistant ({architectures})" in problems[0].message
    other = Decisions(ISSUE, 3, "t", "t", speculative_config={**config, "model": "org/mtp-model"})
    assert export(other, SGLANG)[0] is not None


@pytest.mark.parametrize(
    ("deploy", "message"),
    [
        (DeploySettings(gpu_memory_gib=0.0), "--gpu-memory-gib 0: expected a number of GiB > 0"),
        (DeploySettings(gpu_memory_gib=float("nan")), "--gpu-memory-gib nan: expected"),
        (DeploySettings(gpu_memory_gib=float("inf")), "--gpu-memory-gib inf: expected"),
        (DeploySettings(tensor_parallel_size=0), "--tensor-parallel-size 0: expected >= 1"),
    ],
)
def test_a_gpu_memory_or_tp_that_is_none_is_refused(deploy: DeploySettings, message: str) -> None:
    exported, problems = export(decisions(ISSUE), SGLANG, deploy)
    assert exported is None and [p.rule for p in problems] == ["invalid-setting"]
    assert problems[0].message.startswith(message)
    fine = DeploySettings(gpu_memory_gib=0.5, tensor_parallel_size=1)
    assert export(decisions(ISSUE), SGLANG, fine)[0] is not None


def test_every_multi_layer_eagle_architecture_is_known_by_name() -> None:
    """Each architecture of the table's multi_layer_eagle_architectures has name fragments the
    refusal reads (a new row's architecture without them would go unrefused)."""
    named = {arch for archs in MULTI_LAYER_EAGLE_TARGETS.values() for arch in archs.split(", ")}
    assert named == set(names("sglang", "multi_layer_eagle_architectures", newest("sglang")))
