"""lib/loop/export.py: finding the schedule in any file that holds one, and the exported
configs for TensorRT-LLM and vLLM. (The conversions themselves are tests/test_schedule.py's.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lib.loop.export import (
    ExportSettings,
    ScheduleFile,
    config_text,
    export_config,
    read_schedule,
    trtllm_config,
    trtllm_text,
)
from lib.schedule import Schedule

SONNET = Schedule(((1, 63, 7), (64, 256, 0)))


def test_trtllm_config_holds_max_draft_len_and_json_keys() -> None:
    config = trtllm_config(SONNET, 7)
    assert config == {"max_draft_len": 7, "draft_len_schedule": {"63": 7, "256": 0}}
    assert json.loads(json.dumps(config)) == config
    assert trtllm_text(SONNET, 7) == json.dumps(config, indent=2) + "\n" == config_text(config)


@pytest.mark.parametrize(
    ("content", "ranges", "global_k"),
    [
        ([[1, 63, 7], [64, 256, 0]], ((1, 63, 7), (64, 256, 0)), None),
        (
            {
                "num_speculative_tokens_per_batch_size": [[1, 8, 3]],
                "configured_global_num_speculative_tokens": 5,
            },
            ((1, 8, 3),),
            5,
        ),
        (
            {
                "method": "ngram",
                "num_speculative_tokens": 4,
                "num_speculative_tokens_per_batch_size": [[1, 8, 3]],
            },
            ((1, 8, 3),),
            4,
        ),
        (
            {
                "speculative_config": {
                    "num_speculative_tokens": 4,
                    "num_speculative_tokens_per_batch_size": [[1, 2, 1]],
                }
            },
            ((1, 2, 1),),
            4,
        ),
        (
            {"max_draft_len": 7, "draft_len_schedule": {"63": 7, "256": 0}},
            ((1, 63, 7), (64, 256, 0)),
            7,
        ),
        ({"63": 7, "256": 0}, ((1, 63, 7), (64, 256, 0)), None),
    ],
)
def test_read_schedule_accepts_every_form(
    tmp_path: Path, content: object, ranges: tuple[tuple[int, int, int], ...], global_k: int | None
) -> None:
    path = tmp_path / "in.json"
    path.write_text(json.dumps(content))
    found, problems = read_schedule(path)
    assert problems == []
    assert found is not None
    assert found.schedule == Schedule(ranges)
    assert found.global_k == global_k


@pytest.mark.parametrize(
    ("content", "rule", "message"),
    [
        ("{not json", "invalid-json", "not valid JSON"),
        (json.dumps({"other": 1}), "no-schedule", "no schedule found"),
        (json.dumps([[2, 8, 1]]), "no-schedule", "starts at 2"),
        (json.dumps({"draft_len_schedule": {"x": 1}}), "no-schedule", "key 'x'"),
        (json.dumps("text"), "no-schedule", "expected a JSON object"),
    ],
)
def test_a_file_without_a_schedule_is_a_problem_naming_it(
    tmp_path: Path, content: str, rule: str, message: str
) -> None:
    path = tmp_path / "in.json"
    path.write_text(content)
    found, problems = read_schedule(path)
    assert found is None
    (problem,) = problems
    assert (problem.rule, problem.files) == (rule, (str(path),))
    assert message in problem.message


def test_a_missing_file_is_a_problem(tmp_path: Path) -> None:
    found, problems = read_schedule(tmp_path / "absent.json")
    assert found is None
    assert [p.rule for p in problems] == ["unreadable-file"]


@pytest.mark.parametrize(
    ("settings", "file_global_k", "expected"),
    [
        (ExportSettings(), 9, {"max_draft_len": 9, "draft_len_schedule": {"63": 7, "256": 0}}),
        # No global K anywhere: the largest K of the schedule.
        (ExportSettings(), None, {"max_draft_len": 7, "draft_len_schedule": {"63": 7, "256": 0}}),
        (
            ExportSettings(format="vllm", global_k=8),
            9,
            {
                "num_speculative_tokens": 8,
                "num_speculative_tokens_per_batch_size": [[1, 63, 7], [64, 256, 0]],
            },
        ),
    ],
)
def test_export_config_takes_the_flag_then_the_file_then_the_largest_k(
    settings: ExportSettings, file_global_k: int | None, expected: dict[str, object]
) -> None:
    config, problems = export_config(ScheduleFile(SONNET, file_global_k, "test"), settings)
    assert (config, problems) == (expected, [])


def test_a_global_k_below_the_largest_k_is_refused_naming_the_flag() -> None:
    config, problems = export_config(ScheduleFile(SONNET, None, "test"), ExportSettings(global_k=3))
    assert config is None
    (problem,) = problems
    assert (problem.field, problem.value, problem.expected) == ("--global-k", "3", ">= 7")
