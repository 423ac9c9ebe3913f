"""lib/deploy/formats/vllm_context.py: the mix collapse to one batch schedule, its rules, and
the format's entry in the registry.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from grid_builder import (
    PUBLISHED,
    grid_of,
    mix_of,
    result_json,
)
from paths import SAMPLE_SWEEPS

from lib.cli.main import main
from lib.context_grid import context_grid_of
from lib.deploy.formats.vllm_context import (
    FORMAT,
    mix_choice,
    vllm_context_export,
    vllm_context_violations,
)
from lib.deploy.registry import format_named


@pytest.mark.parametrize(
    ("text", "expected_k"),
    [
        # Batch 256: K=0 -> 0.7 * 2000 + 0.3 * 1200 = 1760; K=3 -> 0.7 * 1600 + 0.3 * 1600 = 1600.
        ("500:7,4000:3", 0),
        # K=0 -> 0.3 * 2000 + 0.7 * 1200 = 1440; K=3 -> 1600.
        ("500:3,4000:7", 3),
        # K=0 -> 0.5 * 2000 + 0.5 * 1200 = 1600 = K=3's 1600: a tie, the smallest K.
        ("500:1,4000:1", 0),
    ],
)
def test_the_mix_collapse_takes_the_best_mix_weighted_expected_objective(
    text: str, expected_k: int
) -> None:
    grid = grid_of(result_json(PUBLISHED))
    assert mix_choice(grid, 1, mix_of(grid, text)) == expected_k
    # Batch 1 wants K=3 at both contexts: any mix keeps it.
    assert mix_choice(grid, 0, mix_of(grid, text)) == 3


def test_the_mix_collapse_minimises_a_minimised_objective() -> None:
    # TPOT in ms: at batch 8, K=3 is better short (20 < 25), K=0 long (40 < 50).
    tpot = {(8, 500): {0: 25.0, 3: 20.0}, (8, 4000): {0: 40.0, 3: 50.0}}
    grid = grid_of(result_json(tpot, direction="minimize", max_batch_size=8))
    # Mix 0.5/0.5: K=0 -> 32.5, K=3 -> 35.0: K=0. Mix 0.9/0.1: K=0 -> 26.5, K=3 -> 23.0: K=3.
    assert mix_choice(grid, 0, mix_of(grid, "500:1,4000:1")) == 0
    assert mix_choice(grid, 0, mix_of(grid, "500:9,4000:1")) == 3


def test_a_k_rejected_at_one_context_is_not_a_batch_only_choice() -> None:
    grid = grid_of(result_json(PUBLISHED, rejected=((256, 4000, 0),), selected={}))
    # Batch 256 may run K=0 only where it was kept: K=3 is the only K kept at both contexts.
    assert mix_choice(grid, 1, mix_of(grid, None)) == 3


# --------------------------------------------------------------------------- vllm-context


def test_vllm_context_exports_the_mix_schedule_and_one_per_context() -> None:
    grid = grid_of(result_json(PUBLISHED))
    exported, problems = vllm_context_export(grid, mix_of(grid, "500:7,4000:3"), 3)
    assert problems == []
    assert exported is not None
    # Batch 1 runs K=3 and batch 256 K=0 (the mix collapse above): ranges as the seed merges.
    assert exported.config == {
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": [[1, 255, 3], [256, 256, 0]],
    }
    assert exported.details["per_context"] == {
        "500": [[1, 255, 3], [256, 256, 0]],
        "4000": [[1, 256, 3]],
    }
    # Only batch 256 at 4000 is off the optimum: K=0 for K=3, 1 - 1200 / 1600 = 25 %. Mix-weighted
    # mean: (batch 1: 0) + (batch 256: 0.7 * 0 + 0.3 * 25 = 7.5), over 2 anchors = 3.75 %.
    summary = exported.summary
    assert summary.largest_loss_percent == pytest.approx(25.0)
    assert summary.largest_at == (256, 4000)
    assert summary.mix_weighted_mean_loss_percent == pytest.approx(3.75)
    assert (summary.cells_off_optimum, summary.cells) == (1, 4)
    losses = {(c.batch_size, c.prompt_tokens): c for c in exported.losses}
    assert (losses[256, 4000].exported_k, losses[256, 4000].expected_objective) == (0, 1200.0)
    assert losses[256, 4000].weight == pytest.approx(0.3)


def test_vllm_context_rules_each_fail_when_broken() -> None:
    valid = {
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": [[1, 63, 3], [64, 256, 0]],
    }
    assert vllm_context_violations(valid, {"500": [[1, 256, 3]]}) == []
    assert vllm_context_violations({**valid, "num_speculative_tokens": 0}) == [
        "num_speculative_tokens 0 is not a whole number > 0"
    ]
    assert vllm_context_violations(valid, {"500": [[2, 256, 3]]}) == [
        "per-context 500: the first range starts at 2, not 1"
    ]
    broken = {**valid, "num_speculative_tokens_per_batch_size": [[1, 63, 3], [60, 256, 0]]}
    assert vllm_context_violations(broken) == ["ranges [1, 63, 3] and [60, 256, 0] overlap"]


def test_a_grid_whose_anchors_do_not_start_at_1_fails_validation_before_export() -> None:
    # A file that says it is deployable but is not: the validator stops it.
    shifted = {(8 if b == 1 else b, prompt): by_k for (b, prompt), by_k in PUBLISHED.items()}
    grid = grid_of(result_json(shifted))
    exported, problems = vllm_context_export(grid, mix_of(grid, None), 3)
    assert exported is None
    assert [p.rule for p in problems] == ["invalid-export", "invalid-export", "invalid-export"]
    assert "the first range starts at 8, not 1" in problems[0].message


# --------------------------------------------------------------------------- context ranges


def test_it_is_registered_as_a_context_format() -> None:
    assert format_named("vllm-context") is FORMAT
    assert FORMAT.needs_grid and "context_mix" in FORMAT.flags


def test_it_is_checked_by_the_capture_rule() -> None:
    assert FORMAT.reads_ceiling


# --------------------------------------------------------------------------- interpolated


def _tune(tmp_path: Path, *flags: str) -> tuple[list[str], Path]:
    """`tune-spec-k long-context FLAGS`: its stdout lines and the result file."""
    result = tmp_path / "result.json"
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        status = main([str(SAMPLE_SWEEPS / "long-context"), "--output-json", str(result), *flags])
    assert status == 0
    return out.getvalue().splitlines(), result


def _vllm_context_schedule(lines: list[str]) -> list[list[int]]:
    (line,) = [line for line in lines if line.startswith("vllm-context: --speculative-config")]
    return json.loads(line.split("'")[1])["num_speculative_tokens_per_batch_size"]


def _exported(result: Path, *flags: str) -> tuple[list[list[int]], list[str]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["export", str(result), "--format", "vllm-context", *flags]) == 0
    lines = out.getvalue().splitlines()
    return json.loads(lines[0])["num_speculative_tokens_per_batch_size"], lines


def test_an_interpolated_tuning_prints_one_vllm_config_for_one_length(tmp_path: Path) -> None:
    """Issue 38, kind 1: with --interpolated-schedule the batch-only answer switched at the
    interpolated crossovers and vllm-context (the default mix: the shortest length alone) at
    the anchors, so one run printed two vLLM configs. Now both are the interpolated one, in the
    run's lines and in `export` of its file alike."""
    lines, result = _tune(tmp_path, "--interpolated-schedule")
    answer = json.loads(lines[0])
    assert _vllm_context_schedule(lines) == answer
    exported, export_lines = _exported(result)
    assert exported == answer
    assert any("interpolated crossovers of the 512-token point" in line for line in export_lines)
    # Tuned at the anchors (the default), both are the step schedule, and it differs.
    step_lines, step_result = _tune(tmp_path / "step")
    assert _vllm_context_schedule(step_lines) == json.loads(step_lines[0]) != answer
    assert _exported(step_result)[0] == json.loads(step_lines[0])


def test_a_mix_of_several_lengths_switches_at_the_anchors_and_says_so(tmp_path: Path) -> None:
    _, result = _tune(tmp_path, "--interpolated-schedule")
    _, step_result = _tune(tmp_path / "step")
    mix = ["--context-mix", "512:0.5,32768:0.5"]
    exported, lines = _exported(result, *mix)
    assert exported == _exported(step_result, *mix)[0]
    assert any("interpolates a mix of one prompt length only" in line for line in lines)


def test_a_damaged_interpolated_schedule_is_refused_naming_the_field() -> None:
    data = result_json(PUBLISHED)
    data["context_axis"]["points"][0]["interpolated_schedule"] = [[2, 256, 3]]
    grid, problems = context_grid_of(data, "result.json")
    assert grid is None
    (problem,) = problems
    assert problem.field == "context_axis.points[0].interpolated_schedule"
    assert problem.files == ("result.json",)
    assert problem.message.endswith("the first range starts at 2, not 1")
