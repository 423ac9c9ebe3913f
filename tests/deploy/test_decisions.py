"""lib/deploy/decisions.py: the one typed reader of every file that holds a schedule, and the
decisions of a tuning in memory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sweep_builder import write_grid

from lib.deploy.decisions import decisions_of
from lib.deploy.registry import read_decisions
from lib.deploy.result_file import result_text
from lib.schedule import Schedule, tune
from lib.settings import Settings
from lib.sweeps import load_experiment


@pytest.mark.parametrize(
    ("content", "ranges", "global_k", "kind"),
    [
        ([[1, 63, 7], [64, 256, 0]], ((1, 63, 7), (64, 256, 0)), None, "vLLM schedule"),
        (
            {
                "num_speculative_tokens_per_batch_size": [[1, 8, 3]],
                "configured_global_num_speculative_tokens": 5,
                "batch_decisions": [],
            },
            ((1, 8, 3),),
            5,
            "result JSON",
        ),
        (
            {
                "method": "ngram",
                "num_speculative_tokens": 4,
                "num_speculative_tokens_per_batch_size": [[1, 8, 3]],
            },
            ((1, 8, 3),),
            4,
            "vLLM speculative_config",
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
            "vLLM speculative_config",
        ),
        (
            {"max_draft_len": 7, "draft_len_schedule": {"63": 7, "256": 0}},
            ((1, 63, 7), (64, 256, 0)),
            7,
            "TensorRT-LLM draft_len_schedule",
        ),
        # The key 1 tune-spec-k writes merges back into the first range.
        (
            {"max_draft_len": 7, "draft_len_schedule": {"1": 7, "63": 7, "256": 0}},
            ((1, 63, 7), (64, 256, 0)),
            7,
            "TensorRT-LLM draft_len_schedule",
        ),
        ({"63": 7, "256": 0}, ((1, 63, 7), (64, 256, 0)), None, "TensorRT-LLM draft_len_schedule"),
        (
            {"strategy": "ema", "1": {"candidate_steps": [7]}, "64": {"candidate_steps": [0]}},
            ((1, 63, 7), (64, 64, 0)),
            None,
            "SGLang adaptive config",
        ),
    ],
)
def test_every_form_is_read(
    tmp_path: Path,
    content: object,
    ranges: tuple[tuple[int, int, int], ...],
    global_k: int | None,
    kind: str,
) -> None:
    path = tmp_path / "in.json"
    path.write_text(json.dumps(content))
    found, problems = read_decisions(path)
    assert problems == []
    assert found is not None
    assert (found.schedule, found.global_k, found.kind) == (Schedule(ranges), global_k, kind)


@pytest.mark.parametrize(
    ("content", "rule", "message"),
    [
        ("{not json", "invalid-json", "not valid JSON"),
        (json.dumps({"other": 1}), "no-schedule", "no schedule found"),
        (json.dumps([[2, 8, 1]]), "no-schedule", "starts at 2"),
        (json.dumps({"draft_len_schedule": {"x": 1}}), "no-schedule", "key 'x'"),
        (json.dumps("text"), "no-schedule", "expected a JSON object"),
        (json.dumps({"1": {"candidate_steps": []}}), "no-schedule", "not one step"),
    ],
)
def test_a_file_without_a_schedule_is_a_problem_naming_it(
    tmp_path: Path, content: str, rule: str, message: str
) -> None:
    path = tmp_path / "in.json"
    path.write_text(content)
    found, problems = read_decisions(path)
    assert found is None
    (problem,) = problems
    assert (problem.rule, problem.files) == (rule, (str(path),))
    assert message in problem.message


def test_a_missing_file_is_a_problem(tmp_path: Path) -> None:
    found, problems = read_decisions(tmp_path / "absent.json")
    assert found is None
    assert [p.rule for p in problems] == ["unreadable-file"]


def test_a_tuning_and_its_written_result_give_the_same_decisions(tmp_path: Path) -> None:
    cells = {
        (1, 0): [100.0, 101.0, 99.0],
        (1, 3): [150.0, 151.0, 149.0],
        (8, 0): [500.0, 505.0, 495.0],
        (8, 3): [400.0, 404.0, 396.0],
    }
    sweep = load_experiment(write_grid(tmp_path / "sweep", cells, global_k=3))
    result = tune(sweep, Settings())
    in_memory = decisions_of(result)
    path = tmp_path / "result.json"
    path.write_text(result_text(result))
    read, problems = read_decisions(path)
    assert problems == [] and read is not None
    assert (read.schedule, read.global_k, read.maximize) == (
        in_memory.schedule,
        in_memory.global_k,
        in_memory.maximize,
    )
    # The medians per anchor and K: the cells' own, in memory and in the file.
    assert read.medians == in_memory.medians == {1: {0: 100.0, 3: 150.0}, 8: {0: 500.0, 3: 400.0}}
    assert read.method == in_memory.method == "eagle3"
