"""lib/loop/check/report.py: the check of a validation sweep, its errors, its JSON report and
the capture rule on the schedule under test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sweep_builder import CONTEXT_ARMS, GOOD_VALIDATION, write_context_validation, write_validation
from validation_check import RFC_GOOD, RFC_GOOD_KS, check, rfc

from lib.loop.check.judge import CheckSettings
from lib.settings import Options

GOOD = GOOD_VALIDATION


@pytest.mark.parametrize(
    ("values", "settings", "rule"),
    [
        (None, CheckSettings(), "missing-folder"),
        (
            {key: runs for key, runs in GOOD.items() if key[1] != "dynamic"},
            CheckSettings(),
            "no-dynamic-arm",
        ),
        (GOOD, CheckSettings(options=Options(confidence=1.5)), "invalid-setting"),
    ],
)
def test_bad_input_is_an_error_not_an_exception(
    tmp_path: Path,
    values: dict[tuple[int, str], list[float]] | None,
    settings: CheckSettings,
    rule: str,
) -> None:
    root = tmp_path / "v"
    if values is not None:
        write_validation(root, values)
    report = check(root, settings)
    assert rule in [p.rule for p in report.errors]
    assert report.verdicts.is_empty()


def test_json_report_is_deterministic(tmp_path: Path) -> None:
    root = write_validation(tmp_path / "v", GOOD)
    first, second = check(root).to_json_text(), check(root).to_json_text()
    assert first == second
    data = json.loads(first)
    assert [row["verdict"] for row in data["anchors"]] == ["ok", "ok"]
    assert {row["arm"] for row in data["arms"]} == {
        "dynamic",
        "static K=3",
        "static K=7",
        "no speculation",
    }
    assert data["settings"] == {
        "objective": "output_throughput",
        "direction": "maximize",
        "relative_tolerance": 0.01,
        "confidence": 0.9,
        "min_runs": 3,
        "seed": 49163,
        "server_cv": 0.0,
        "batch_size_var": "max_concurrency",
    }
    assert data["assumption"] == (
        "no server replicas: P(eps-good) assumes servers vary by at most 0.0% (--server-cv;"
        " measure it with tune-spec-k plan --server-replicas)"
    )


def test_the_capture_rule_holds_a_context_schedule_to_its_largest_k_per_batch_size(
    tmp_path: Path,
) -> None:
    """Batch 64-256 runs K=3 at short contexts: 129 x 4 = 516 tokens per step pass vLLM's
    default C=512 there (128 x 4 = 512 does not), whatever it runs at long ones."""
    report = check(
        write_context_validation(tmp_path / "v", CONTEXT_ARMS, rfc(RFC_GOOD), RFC_GOOD_KS)
    )
    assert report.deployment is not None
    assert [(r["lo"], r["hi"], r["k"]) for r in report.deployment["graphless_ranges"]] == [
        (129, 256, 3)
    ]
    (warning,) = [p for p in report.problems if p.rule == "graphless-range"]
    assert warning.message.startswith(
        "the context schedule held to its largest K per batch size over every context,"
        " [[1, 63, 3], [64, 256, 3]]: batch sizes 129-256 run K=3"
    )
