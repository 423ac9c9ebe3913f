"""lib/schedule.py: the seed's policy end to end (README, "The policy") and the
:class:`Schedule` type (merge, vLLM's validation, lookup, JSON and TensorRT-LLM forms).

Each test builds the smallest sweep in which breaking its rule changes an assertion
(:mod:`tuning_helpers`).
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from sweep_builder import grid, write_grid
from tuning_helpers import healthy_grid, one_problem, replace_run, rules, tuned

from lib.deploy.result_file import result_text
from lib.schedule import NO_SCHEDULE, Schedule, merge_picks, validate_schedule

# --------------------------------------------------------------------------- the happy path


def test_healthy_sweep_gives_the_expected_schedule(tmp_path: Path) -> None:
    result = tuned(healthy_grid(tmp_path))
    assert result.ok, [p.describe() for p in result.problems]
    # anchor 1 picks K=3, anchor 64 picks K=0; anchor 1 covers 1..63, the last up to 64
    assert result.schedule == Schedule(((1, 63, 3), (64, 64, 0)))
    assert result.configured_global_k == 7
    assert result.decisions["selected_k"].to_list() == [3, 0]
    # vs K=0 at anchor 1: 150 / 100 - 1 = +50 %; at anchor 64 the pick is K=0 itself
    assert result.decisions["vs_k0_percent"].to_list() == pytest.approx([50.0, 0.0])


@pytest.mark.parametrize(
    "settings", [{"objective": "source"}, {"acceptance": "k"}, {"relative_tolerance": 1.5}]
)
def test_invalid_settings_tune_nothing(tmp_path: Path, settings: dict[str, Any]) -> None:
    # Under these settings every gate would speak of the setting, not of the sweep (a text
    # objective, a tolerance past 100 %): only the setting is reported.
    result = tuned(healthy_grid(tmp_path), **settings)
    assert rules(result) == ["invalid-setting"]
    assert (result.cells.height, result.decisions.height, result.schedule) == (0, 0, None)
    assert result.max_k_observed == 3
    # The frames keep their schemas: whoever shows them needs no special case.
    healthy = tuned(tmp_path)
    assert result.cells.schema == healthy.cells.schema
    assert result.decisions.schema == healthy.decisions.schema


# --------------------------------------------------------------------------- schedules


def test_merge_picks_merges_equal_neighbours() -> None:
    assert merge_picks([1, 64, 128, 256], [7, 0, 0, 0], 256) == [(1, 63, 7), (64, 256, 0)]


def test_merge_picks_keeps_non_monotone_choices() -> None:
    # K goes down, up again, then down: nothing is smoothed
    assert merge_picks([1, 8, 32, 64], [3, 1, 3, 0], 128) == [
        (1, 7, 3),
        (8, 31, 1),
        (32, 63, 3),
        (64, 128, 0),
    ]


def test_merge_picks_sorts_anchors() -> None:
    assert merge_picks([64, 1], [0, 3], 64) == [(1, 63, 3), (64, 64, 0)]


def test_non_monotone_schedule_end_to_end(tmp_path: Path) -> None:
    # the winner per anchor (all others 100): 1 -> K=3, 8 -> K=1, 32 -> K=3, 64 -> K=0
    winners = {1: 3, 8: 1, 32: 3, 64: 0}
    cells = {
        (anchor, k): [150.0 if k == winner else 100.0] * 3
        for anchor, winner in winners.items()
        for k in (0, 1, 3)
    }
    result = tuned(write_grid(tmp_path, cells))
    assert result.schedule == Schedule(((1, 7, 3), (8, 31, 1), (32, 63, 3), (64, 64, 0)))
    assert result.schedule.violations() == []


@pytest.mark.parametrize(
    ("schedule", "fragment"),
    [
        ([], "non-empty"),
        ("1-16", "non-empty"),
        ([[1, 16]], "not a list of 3 integers"),
        ([[1, 16, 2.0]], "not a list of 3 integers"),
        ([[1, 16, True]], "not a list of 3 integers"),
        ([[0, 16, 2]], "must be > 0"),
        ([[1, 16, 2], [20, -4, 1]], "must be > 0"),
        ([[1, 16, 2], [40, 20, 1]], "lo > hi"),
        ([[1, 16, -1]], "K must be >= 0"),
        ([[1, 16, 2], [16, 32, 1]], "overlap"),
        ([[2, 16, 2]], "not 1"),
    ],
)
def test_validate_schedule_rules(schedule: Any, fragment: str) -> None:
    violations = validate_schedule(schedule)
    assert any(fragment in violation for violation in violations), violations


def test_validate_schedule_allows_gaps_and_any_order() -> None:
    assert validate_schedule([[64, 128, 0], [1, 7, 3]]) == []


SCHEDULE_WITH_GAP = [[1, 7, 5], [16, 63, 3], [64, 128, 0]]


@pytest.mark.parametrize(
    ("batch_size", "global_k", "expected"),
    [
        (1, 7, 5),
        (10, 7, 5),  # in the gap 8..15: the previous range's K
        (16, 7, 3),
        (500, 7, 0),  # past the end: the last K
        (1, 4, 4),  # clamped to the global
        (20, 2, 2),
    ],
)
def test_k_at_a_batch_size(batch_size: int, global_k: int, expected: int) -> None:
    schedule, _ = Schedule.parse(SCHEDULE_WITH_GAP)
    assert schedule is not None
    assert schedule.k_at(batch_size, global_k) == expected


def test_max_batch_size_must_equal_the_largest_anchor(tmp_path: Path) -> None:
    root = healthy_grid(tmp_path)
    problem = one_problem(tuned(root, max_batch_size=256), "max-batch-size")
    assert (problem.value, problem.expected) == ("256", "64")
    assert tuned(root, max_batch_size=64).ok


def test_invalid_settings_are_problems(tmp_path: Path) -> None:
    result = tuned(healthy_grid(tmp_path), relative_tolerance=1.0, min_runs=0)
    assert rules(result).count("invalid-setting") == 2
    assert not result.ok


# --------------------------------------------------------------------------- the whole result


def test_every_problem_and_every_cell_is_reported(tmp_path: Path) -> None:
    cells = grid([1, 8, 64], {0: [100.0] * 3, 3: [150.0] * 3})
    cells[(8, 3)] = [100.0, 150.0, 200.0]  # noisy: relative MAD 1/3
    write_grid(tmp_path, cells)
    replace_run(tmp_path, 1, 0, 0, failed=1)
    replace_run(tmp_path, 64, 3, 2, output_throughput=float("nan"))
    write_grid(tmp_path, {(64, 5): [1.0] * 3})  # K=5 only at anchor 64
    result = tuned(tmp_path)
    assert set(rules(result)) >= {
        "failed-requests",
        "non-finite-objective",
        "noisy-objective",
        "too-few-runs",
        "unequal-k-sets",
    }
    assert result.cells.select("anchor", "k").rows() == [
        (1, 0),
        (1, 3),
        (8, 0),
        (8, 3),
        (64, 0),
        (64, 3),
        (64, 5),
    ]
    rejected = result.cells.filter(pl.col("status") == "rejected")
    assert rejected.select("anchor", "k").rows() == [(1, 0), (8, 3), (64, 3)]
    assert rejected["reason"].null_count() == 0
    assert not result.ok


def test_same_input_gives_identical_json(tmp_path: Path) -> None:
    cells = grid([1, 8, 64], {0: [100.0, 101.0, 99.0], 1: [120.0, 119.0, 121.0]})
    healthy_grid(tmp_path / "a")
    write_grid(tmp_path / "a", cells)
    # the same files written in the opposite order into another folder
    healthy_grid(tmp_path / "b")
    write_grid(tmp_path / "b", dict(reversed(list(cells.items()))))
    texts = [result_text(tuned(tmp_path / name)) for name in ("a", "a", "b")]
    assert texts[0] == texts[1] == texts[2]
    data = json.loads(texts[0])
    assert (
        data["num_speculative_tokens_per_batch_size"]
        == (tuned(tmp_path / "a").schedule or NO_SCHEDULE).to_json()
    )


def test_json_output_never_holds_nan(tmp_path: Path) -> None:
    # every run of K=3 has a NaN objective: its cell has no usable statistics
    write_grid(tmp_path, {(1, 0): [1.0] * 3, (1, 3): [float("nan")] * 3})
    data = json.loads(result_text(tuned(tmp_path)), parse_constant=_reject_constant)
    (decision,) = data["batch_decisions"]
    assert [c["k"] for c in decision["candidates"]] == [0, 3]


def _reject_constant(name: str) -> None:
    raise AssertionError(f"{name} in the JSON output")


def test_run_files_and_summary_give_the_same_result(tmp_path: Path) -> None:
    healthy_grid(tmp_path / "summary", run_files=False)
    healthy_grid(tmp_path / "runs", summary=False)
    by_summary, by_runs = tuned(tmp_path / "summary"), tuned(tmp_path / "runs")
    assert by_summary.schedule == by_runs.schedule
    assert by_summary.cells.drop("files").equals(by_runs.cells.drop("files"))


# --------------------------------------------------------------------------- TensorRT-LLM form


def trtllm_k(bounds: dict[int, int], batch_size: int) -> int:
    """TensorRT-LLM's reading, written independently: the K of the smallest bound at or above
    the batch size."""
    return bounds[min(bound for bound in bounds if bound >= batch_size)]


def _schedule(ranges: list[list[int]]) -> Schedule:
    schedule, violations = Schedule.parse(ranges)
    assert schedule is not None, violations
    return schedule


def test_two_range_schedule_gives_one_bound_per_range() -> None:
    # [1, 63] runs K=7 and [64, 256] K=0: bounds 63 and 256.
    assert _schedule([[1, 63, 7], [64, 256, 0]]).to_trtllm() == {63: 7, 256: 0}


def test_a_gap_belongs_to_the_range_before_it_as_in_vllm() -> None:
    # vLLM: batch sizes 5-7 fall in a gap and inherit K=3 from [1, 4]; so the bound is 7.
    schedule = _schedule([[1, 4, 3], [8, 16, 1]])
    assert schedule.to_trtllm() == {7: 3, 16: 1}
    assert [schedule.k_at(b, 7) for b in (4, 5, 7, 8)] == [3, 3, 3, 1]


def test_equal_neighbours_merge() -> None:
    assert _schedule([[1, 8, 2], [9, 32, 2], [33, 64, 0]]).to_trtllm() == {32: 2, 64: 0}


def test_unsorted_input_is_read_in_batch_size_order() -> None:
    assert _schedule([[64, 256, 0], [1, 63, 7]]).to_trtllm() == {63: 7, 256: 0}


def test_dict_to_list_has_contiguous_ranges_from_one() -> None:
    assert Schedule.from_trtllm({"63": 7, "256": 0}) == (_schedule([[1, 63, 7], [64, 256, 0]]), [])
    assert Schedule.from_trtllm({256: 0, 4: 3, 63: 2}) == (
        _schedule([[1, 4, 3], [5, 63, 2], [64, 256, 0]]),
        [],
    )


def random_schedules(count: int) -> list[list[list[int]]]:
    """Valid vLLM schedules with gaps and equal neighbours, from a fixed seed."""
    rng = random.Random(20261129)
    schedules = []
    for _ in range(count):
        starts = sorted(rng.sample(range(2, 300), rng.randint(0, 5)))
        bounds = [1, *starts]
        schedule = []
        for index, lo in enumerate(bounds):
            end = bounds[index + 1] - 1 if index + 1 < len(bounds) else lo + rng.randint(0, 50)
            hi = rng.randint(lo, end)  # may leave a gap before the next range
            schedule.append([lo, hi, rng.randint(0, 4)])
        schedules.append(schedule)
    return schedules


@pytest.mark.parametrize("ranges", random_schedules(40))
def test_round_trip_runs_the_same_k_at_every_batch_size(ranges: list[list[int]]) -> None:
    schedule = _schedule(ranges)
    bounds = schedule.to_trtllm()
    back, problems = Schedule.from_trtllm(bounds)
    assert back is not None and problems == [] and back.violations() == []
    last = max(hi for _, hi, _ in ranges)
    for batch_size in range(1, last + 1):
        expected = schedule.k_at(batch_size, 10)
        assert trtllm_k(bounds, batch_size) == expected
        assert back.k_at(batch_size, 10) == expected
    # dict -> list -> dict is the identity: the exported dict has no redundant bound.
    assert back.to_trtllm() == bounds
    assert all(a != b for a, b in itertools.pairwise(bounds.values()))


@pytest.mark.parametrize(
    ("ranges", "message"),
    [
        ([], "non-empty"),
        ([[2, 8, 1]], "starts at 2"),
        ([[1, 8, 1], [4, 16, 0]], "overlap"),
        ([[1, 8, -1]], "K must be >= 0"),
    ],
)
def test_invalid_vllm_schedules_are_refused_with_vllms_rule(
    ranges: list[list[int]], message: str
) -> None:
    schedule, violations = Schedule.parse(ranges)
    assert schedule is None
    assert any(message in violation for violation in violations), violations
    with pytest.raises(ValueError, match=message):
        Schedule(tuple((lo, hi, k) for lo, hi, k in ranges)).to_trtllm()


@pytest.mark.parametrize(
    ("bounds", "message"),
    [
        ({}, "non-empty"),
        ({"0": 3}, "key '0' is not a batch size"),
        ({"x": 3}, "key 'x' is not a batch size"),
        ({"8": -1}, "is not a draft length"),
        ({"8": 1.5}, "is not a draft length"),
        ({"8": 1, 8: 2}, "repeats the bound 8"),
    ],
)
def test_invalid_draft_len_schedules_name_the_entry(
    bounds: dict[object, object], message: str
) -> None:
    schedule, problems = Schedule.from_trtllm(bounds)
    assert schedule is None
    assert any(message in problem for problem in problems), problems


def test_json_forms() -> None:
    schedule = _schedule([[1, 63, 7], [64, 256, 0]])
    assert schedule.to_json() == [[1, 63, 7], [64, 256, 0]]
    assert schedule.json_text() == "[[1, 63, 7], [64, 256, 0]]"
    assert json.loads(schedule.json_text()) == schedule.to_json()
    assert NO_SCHEDULE.to_json() == [] and NO_SCHEDULE.json_text() == "[]"
    assert (schedule.largest_k, NO_SCHEDULE.largest_k) == (7, 0)
