"""lib/deploy/formats/sglang.py: the adaptive config SGLang reads, what it refuses, and where its
padding to CUDA-graph batch sizes moves a boundary."""

from __future__ import annotations

import pytest

from lib.deploy.decisions import Decisions
from lib.deploy.formats.sglang import graph_batch_sizes, padding_shifts, read
from lib.deploy.registry import export
from lib.deploy.settings import ExportSettings
from lib.schedule import Schedule

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
