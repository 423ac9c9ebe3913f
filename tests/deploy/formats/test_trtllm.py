"""lib/deploy/formats/trtllm.py: TensorRT-LLM's validator rules, each on both sides, and the
warnings where its runtime differs from vLLM's."""

from __future__ import annotations

import pytest

from lib.deploy.decisions import Decisions
from lib.deploy.formats.trtllm import (
    first_k_rule,
    later_k_rule,
    max_draft_len_rule,
    read,
    runtime_warnings,
)
from lib.deploy.registry import export
from lib.deploy.settings import ExportSettings
from lib.schedule import Schedule

TRT = ExportSettings(format="trtllm")
ISSUE = Schedule(((1, 31, 3), (32, 127, 1), (128, 256, 0)))


def decisions(
    ranges: tuple[tuple[int, int, int], ...],
    global_k: int | None = 7,
    method: str | None = "eagle3",
    medians: dict[int, dict[int, float]] | None = None,
) -> Decisions:
    return Decisions(
        Schedule(ranges),
        global_k,
        "test",
        "test.json",
        medians=medians or {},
        speculative_config={"method": method} if method else {},
    )


def validator_accepts(config: dict[str, object]) -> bool:
    """TensorRT-LLM's validator on draft_len_schedule, written from its rules (engines.md 5):
    keys >= 1, values >= 0, schedule[min key] == max_draft_len, every value <= it."""
    schedule = {int(key): value for key, value in config["draft_len_schedule"].items()}  # type: ignore[attr-defined]
    top = config["max_draft_len"]
    return (
        all(key >= 1 for key in schedule)
        and all(isinstance(v, int) and v >= 0 for v in schedule.values())
        and schedule[min(schedule)] == top
        and all(v <= top for v in schedule.values())  # type: ignore[operator]
    )


def test_the_issues_schedule_gets_the_first_ks_max_draft_len_and_passes_the_validator() -> None:
    # The file states num_speculative_tokens 7: the old export wrote max_draft_len 7, refused.
    exported, problems = export(decisions(ISSUE.ranges), TRT)
    assert problems == [] and exported is not None
    assert exported.config == {
        "max_draft_len": 3,
        "draft_len_schedule": {"1": 3, "31": 3, "127": 1, "256": 0},
    }
    assert validator_accepts(dict(exported.config))


def test_a_global_k_other_than_the_first_k_is_refused() -> None:
    exported, problems = export(
        decisions(ISSUE.ranges), ExportSettings(format="trtllm", global_k=7)
    )
    assert exported is None
    assert (problems[0].rule, problems[0].value, problems[0].expected) == (
        "trtllm-max-draft-len",
        "7",
        "3",
    )
    equal, problems = export(decisions(ISSUE.ranges), ExportSettings(format="trtllm", global_k=3))
    assert equal is not None and problems == []


def test_a_later_larger_k_is_refused_naming_the_range_and_the_flag() -> None:
    published = ((1, 1, 3), (2, 127, 5), (128, 128, 3))
    exported, problems = export(decisions(published), TRT)
    assert exported is None
    (problem,) = problems
    assert problem.rule == "trtllm-k-above-max-draft-len"
    assert "batch sizes 2-127 K=5" in problem.message and "--cap-draft-len" in problem.message


def test_capping_a_later_k_warns_with_its_measured_loss() -> None:
    medians = {1: {3: 100.0, 5: 90.0}, 64: {3: 800.0, 5: 1000.0}, 128: {3: 1200.0}}
    capped, problems = export(
        decisions(((1, 1, 3), (2, 127, 5), (128, 128, 3)), medians=medians),
        ExportSettings(format="trtllm", cap_draft_len=True),
    )
    assert problems == [] and capped is not None
    # Every K is 3 now: one bound, and key 1 that validators requiring it want.
    assert capped.config["draft_len_schedule"] == {"1": 3, "128": 3}
    assert validator_accepts(dict(capped.config))
    (warning,) = [w for w in capped.warnings if w.startswith("capped")]
    # At batch 64 (inside 2-127): K=3 800 against K=5 1000, 20 % less.
    assert "batch sizes 2-127 run K=3 instead of K=5" in warning
    assert "measured loss 20.0% at batch 64" in warning


@pytest.mark.parametrize(
    ("bounds", "top", "above"),
    [
        ({1: 3, 127: 5, 128: 3}, 3, [(2, 127, 5)]),
        ({1: 3, 127: 3}, 3, []),  # equal to max_draft_len is fine
        ({31: 3, 127: 4}, 3, [(32, 127, 4)]),  # one above is not
    ],
)
def test_later_k_rule_on_both_sides(
    bounds: dict[int, int], top: int, above: list[tuple[int, int, int]]
) -> None:
    assert max_draft_len_rule(bounds) == next(iter(bounds.values()))
    assert later_k_rule(bounds, top) == above


@pytest.mark.parametrize(
    ("first", "method", "refused", "warned"),
    [
        (0, "eagle3", True, False),
        (0, "eagle", True, False),
        (0, None, False, True),
        (0, "ngram", False, False),
        (1, "eagle3", False, False),
    ],
)
def test_a_first_k_of_zero(first: int, method: str | None, refused: bool, warned: bool) -> None:
    error, warning = first_k_rule(first, method)
    assert (error is not None, warning is not None) == (refused, warned)


def test_an_eagle_schedule_starting_at_k0_is_not_exported() -> None:
    exported, problems = export(decisions(((1, 256, 0),), method="eagle3"), TRT)
    assert exported is None and problems[0].rule == "trtllm-max-draft-len"
    allowed, problems = export(decisions(((1, 256, 0),), method="ngram"), TRT)
    assert allowed is not None and problems == []


def test_runtime_warnings_where_trtllm_differs_from_vllm() -> None:
    last_positive = runtime_warnings({63: 7, 256: 3}, None)
    assert len(last_positive) == 1 and "above batch size 256" in last_positive[0]
    assert runtime_warnings({63: 7, 256: 0}, None)[0].startswith("ranges with K=0")
    assert not any("K=0" in w for w in runtime_warnings({256: 3}, None))
    assert any("vanilla MTP" in w for w in runtime_warnings({256: 0}, "mtp"))
    assert not any("vanilla MTP" in w for w in runtime_warnings({256: 0}, "eagle3"))


def test_its_files_read_back_as_the_schedule() -> None:
    exported, _ = export(decisions(ISSUE.ranges), TRT)
    assert exported is not None
    found = read(dict(exported.config), "f.json")
    assert found is not None and found[0] is not None
    assert found[0].schedule == ISSUE and found[0].global_k == 3
    assert read({"strategy": "ema", "1": {"candidate_steps": [3]}}, "s.json") is None
    assert read({"1": {"candidate_steps": [3]}}, "s.json") is None


@pytest.mark.parametrize(
    "key", ["6\u00b2", "\u0666\u0664", "\uff16\uff14", " 64", "+64", "64.0", "0"]
)
def test_a_schedule_key_that_is_no_batch_size_is_refused(key: str) -> None:
    """Issue 38, kind 16: "6²" passed ``str.isdigit()`` and crashed ``int()``; Arabic-Indic and
    fullwidth digits were read as 64. A key is a batch size in ASCII digits from 1
    (lib.keys.whole_number_text)."""
    found = read({"max_draft_len": 7, "draft_len_schedule": {"1": 7, key: 0}}, "t.json")
    assert found is not None and found[0] is None
    assert f"key {key!r} is not a batch size" in found[1], found[1]
    found = read({"max_draft_len": 7, "draft_len_schedule": {"1": 7, "64": 0}}, "t.json")
    assert found is not None and found[0] is not None
