"""TensorRT-LLM's draft_len_schedule from vLLM's schedule and back (lib/export.py), and the
`tune-spec-k export` command."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest

from lib.cli import main
from lib.export import (
    ExportError,
    read_schedule,
    trtllm_config,
    trtllm_file,
    trtllm_to_vllm,
    vllm_to_trtllm,
)
from lib.schedule import k_for_batch_size, validate_schedule


def trtllm_k(bounds: dict[int, int], batch_size: int) -> int:
    """TensorRT-LLM's reading, written independently: the K of the smallest bound at or above
    the batch size."""
    return bounds[min(bound for bound in bounds if bound >= batch_size)]


def test_two_range_schedule_gives_one_bound_per_range() -> None:
    # [1, 63] runs K=7 and [64, 256] K=0: bounds 63 and 256.
    assert vllm_to_trtllm([[1, 63, 7], [64, 256, 0]]) == {63: 7, 256: 0}


def test_a_gap_belongs_to_the_range_before_it_as_in_vllm() -> None:
    # vLLM: batch sizes 5-7 fall in a gap and inherit K=3 from [1, 4]; so the bound is 7.
    schedule = [[1, 4, 3], [8, 16, 1]]
    assert vllm_to_trtllm(schedule) == {7: 3, 16: 1}
    assert [k_for_batch_size(schedule, b, 7) for b in (4, 5, 7, 8)] == [3, 3, 3, 1]


def test_equal_neighbours_merge() -> None:
    assert vllm_to_trtllm([[1, 8, 2], [9, 32, 2], [33, 64, 0]]) == {32: 2, 64: 0}


def test_unsorted_input_is_read_in_batch_size_order() -> None:
    assert vllm_to_trtllm([[64, 256, 0], [1, 63, 7]]) == {63: 7, 256: 0}


def test_dict_to_list_has_contiguous_ranges_from_one() -> None:
    assert trtllm_to_vllm({"63": 7, "256": 0}) == [[1, 63, 7], [64, 256, 0]]
    assert trtllm_to_vllm({256: 0, 4: 3, 63: 2}) == [[1, 4, 3], [5, 63, 2], [64, 256, 0]]


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


@pytest.mark.parametrize("schedule", random_schedules(40))
def test_round_trip_runs_the_same_k_at_every_batch_size(schedule: list[list[int]]) -> None:
    assert validate_schedule(schedule) == []
    bounds = vllm_to_trtllm(schedule)
    back = trtllm_to_vllm(bounds)
    assert validate_schedule(back) == []
    last = max(hi for _, hi, _ in schedule)
    for batch_size in range(1, last + 1):
        expected = k_for_batch_size(schedule, batch_size, 10)
        assert trtllm_k(bounds, batch_size) == expected
        assert k_for_batch_size(back, batch_size, 10) == expected
    # dict -> list -> dict is the identity: the exported dict has no redundant bound.
    assert vllm_to_trtllm(back) == bounds
    assert all(a != b for a, b in itertools.pairwise(bounds.values()))


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ([], "non-empty"),
        ([[2, 8, 1]], "starts at 2"),
        ([[1, 8, 1], [4, 16, 0]], "overlap"),
        ([[1, 8, -1]], "K must be >= 0"),
    ],
)
def test_invalid_vllm_schedules_are_refused_with_vllms_rule(
    schedule: list[list[int]], message: str
) -> None:
    with pytest.raises(ExportError, match=message):
        vllm_to_trtllm(schedule)


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
    with pytest.raises(ExportError, match=message):
        trtllm_to_vllm(bounds)


def test_trtllm_config_holds_max_draft_len_and_json_keys() -> None:
    config = trtllm_config([[1, 63, 7], [64, 256, 0]], 7)
    assert config == {"max_draft_len": 7, "draft_len_schedule": {"63": 7, "256": 0}}
    assert json.loads(json.dumps(config)) == config


@pytest.mark.parametrize(
    ("content", "schedule", "global_k"),
    [
        ([[1, 63, 7], [64, 256, 0]], [[1, 63, 7], [64, 256, 0]], None),
        (
            {
                "num_speculative_tokens_per_batch_size": [[1, 8, 3]],
                "configured_global_num_speculative_tokens": 5,
            },
            [[1, 8, 3]],
            5,
        ),
        (
            {
                "method": "ngram",
                "num_speculative_tokens": 4,
                "num_speculative_tokens_per_batch_size": [[1, 8, 3]],
            },
            [[1, 8, 3]],
            4,
        ),
        (
            {
                "speculative_config": {
                    "num_speculative_tokens": 4,
                    "num_speculative_tokens_per_batch_size": [[1, 2, 1]],
                }
            },
            [[1, 2, 1]],
            4,
        ),
        (
            {"max_draft_len": 7, "draft_len_schedule": {"63": 7, "256": 0}},
            [[1, 63, 7], [64, 256, 0]],
            7,
        ),
        ({"63": 7, "256": 0}, [[1, 63, 7], [64, 256, 0]], None),
    ],
)
def test_read_schedule_accepts_every_form(
    tmp_path: Path, content: object, schedule: list[list[int]], global_k: int | None
) -> None:
    path = tmp_path / "in.json"
    path.write_text(json.dumps(content))
    found, found_global, _ = read_schedule(path)
    assert found == schedule
    assert found_global == global_k


def test_cli_exports_a_tuning_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = tmp_path / "speculative_k_schedule.json"
    sample = Path(__file__).resolve().parents[1] / "data" / "sample_sweeps" / "sonnet-like"
    assert main([str(sample), "--output-json", str(result)]) == 0
    capsys.readouterr()
    out = tmp_path / "trtllm.json"
    assert main(["export", str(result), "--format", "trtllm", "-o", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    # sonnet-like tunes to [[1, 63, 7], [64, 256, 0]] (data/sample_sweeps/README.md).
    expected = {"max_draft_len": 7, "draft_len_schedule": {"63": 7, "256": 0}}
    assert json.loads(printed[0]) == expected
    assert json.loads(out.read_text()) == expected
    assert main(["export", str(out), "--format", "vllm"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0]) == {
        "num_speculative_tokens": 7,
        "num_speculative_tokens_per_batch_size": [[1, 63, 7], [64, 256, 0]],
    }


@pytest.mark.parametrize(
    ("content", "flags", "message"),
    [
        ("{not json", [], "not a JSON file"),
        (json.dumps({"other": 1}), [], "no schedule found"),
        (json.dumps([[2, 8, 1]]), [], "starts at 2"),
        (json.dumps([[1, 8, 5]]), ["--global-k", "3"], "below the schedule's largest K 5"),
    ],
)
def test_cli_export_bad_input_exits_2_with_the_reason(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str,
    flags: list[str],
    message: str,
) -> None:
    path = tmp_path / "in.json"
    path.write_text(content)
    assert main(["export", str(path), *flags]) == 2
    error = capsys.readouterr().err
    assert message in error
    assert str(path) in error or "--global-k" in error
    assert "Traceback" not in error


def test_cli_export_missing_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["export", str(tmp_path / "absent.json")]) == 2
    assert "cannot read the file" in capsys.readouterr().err


def test_the_apps_download_is_the_cli_file(tmp_path: Path) -> None:
    source = tmp_path / "schedule.json"
    source.write_text(json.dumps([[1, 63, 7], [64, 256, 0]]))
    out = tmp_path / "trtllm.json"
    assert main(["export", str(source), "--global-k", "7", "-o", str(out)]) == 0
    assert trtllm_file([[1, 63, 7], [64, 256, 0]], 7) == out.read_bytes()
