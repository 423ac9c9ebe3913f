"""lib/loop/check/report.py: the check of a validation sweep, its errors, its JSON report and
the capture rule on the schedule under test."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from sweep_builder import CONTEXT_ARMS, GOOD_VALIDATION, write_context_validation, write_validation
from validation_check import INDEPENDENT, RFC_GOOD, RFC_GOOD_KS, TOP, check, rfc

from lib.loop.check.judge import CheckSettings
from lib.loop.check.report import CheckReport, check_deployment
from lib.settings import DeploySettings, Options

GOOD = GOOD_VALIDATION


def graphless(report: CheckReport) -> list[tuple[int, int, int]]:
    """(lo, hi, K) of each range the capture check says runs without CUDA graphs."""
    assert report.deployment is not None
    return [(r["lo"], r["hi"], r["k"]) for r in report.deployment["graphless_ranges"]]


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
    assert graphless(report) == [(129, 256, 3)]
    (warning,) = [p for p in report.problems if p.rule == "graphless-range"]
    assert warning.message.startswith(
        "the context schedule held to its largest K per batch size over every context,"
        " [[1, 63, 3], [64, 256, 3]]: batch sizes 129-256 run K=3"
    )


@pytest.mark.parametrize(
    ("global_k", "clamped", "expected"),
    [
        # No global K stated, or one at the schedule's largest K: the schedule as written;
        # K=7 passes C=512 from batch 65 (65 x 8 = 520).
        (None, False, [(65, 127, 7)]),
        (7, False, [(65, 127, 7)]),
        # One below it: vLLM runs K=6 at 1-127, past C from 74 (74 x 7 = 518; 73 x 7 = 511).
        (6, True, [(74, 127, 6)]),
        # K=3 at 1-127: 127 x 4 = 508, within C everywhere.
        (3, True, []),
    ],
)
def test_the_check_judges_the_k_vllm_clamps_the_schedule_to(
    tmp_path: Path, global_k: int | None, clamped: bool, expected: list[tuple[int, int, int]]
) -> None:
    """vLLM clamps every K of the schedule to the server's num_speculative_tokens (silently):
    the capture rule, the K judged and the assumed C are the clamped ones, and a clamp is
    said."""
    dynamic: dict[str, object] = {
        "method": "eagle3",
        "model": "drafter",
        "num_speculative_tokens_per_batch_size": [[1, 127, 7], [128, 256, 0]],
    }
    if global_k is not None:
        dynamic["num_speculative_tokens"] = global_k
    root = write_validation(tmp_path / "v", GOOD, dynamic=dynamic)
    # The token-ceiling rule's release; on 0.34 (below) the schedule's K=0 tier sets R = 512.
    v033 = DeploySettings(vllm_version="0.33.0")
    report = check_deployment(root, CheckSettings(options=INDEPENDENT), None, v033)
    assert graphless(report) == expected
    v034 = DeploySettings(vllm_version="0.34.0")
    assert graphless(check_deployment(root, CheckSettings(options=INDEPENDENT), None, v034)) == []
    assert report.deployment is not None
    assert report.deployment["capture_ceiling"]["size"] == 512
    assert (
        f"num_speculative_tokens={global_k or 7}" in report.deployment["capture_ceiling"]["source"]
    )
    warnings = [p for p in report.problems if p.rule == "clamped-schedule"]
    assert bool(warnings) is clamped
    if clamped:
        message = warnings[0].message
        assert (
            f"num_speculative_tokens={global_k}, below the schedule's K=7 at batch sizes 1-127"
            in message
        )
        assert f"so it ran K={global_k} there" in message
    assert report.verdicts["dynamic_k"].to_list() == [min(7, global_k or 7)] * 2


def test_a_clamped_context_schedule_is_held_to_the_clamped_k(tmp_path: Path) -> None:
    """K=7 at batch 64-256 at short contexts, served under num_speculative_tokens=3: vLLM runs
    K=3 there, so the capture rule holds batch 64-256 to K=3 (graphless from 129, as
    RFC_GOOD), not to K=7 (from 65)."""
    entries = [[1, 63, 1, 2180, 3], [1, 63, 2181, TOP, 3], *RFC_GOOD[2:]]
    entries[2] = [64, 256, 1, 2180, 7]
    report = check(
        write_context_validation(tmp_path / "v", CONTEXT_ARMS, rfc(entries), RFC_GOOD_KS)
    )
    assert graphless(report) == [(129, 256, 3)]
    (warning,) = [p for p in report.problems if p.rule == "clamped-schedule"]
    assert "K=7 (context schedule)" in warning.message


def _replicas_at(root: Path, prompt: int, replicas: int = 3) -> Path:
    """Every serve combo at ``prompt`` tokens replaced by ``replicas`` server starts (the
    marker ``seed=<r>``), replica r's runs ``r`` % faster."""
    for folder in sorted(root.glob(f"*-p{prompt}")):
        serve, bench = folder.name.removeprefix("SERVE--").split("-BENCH--")
        for replica in range(replicas):
            target = root / f"SERVE--{serve}-seed={replica}-BENCH--{bench}"
            for source in folder.glob("*.json"):
                data = json.loads(source.read_text(encoding="utf-8"))
                for run in data if isinstance(data, list) else [data]:
                    run["output_throughput"] *= 1 + 0.01 * replica
                target.mkdir(exist_ok=True)
                (target / source.name).write_text(json.dumps(data), encoding="utf-8")
        shutil.rmtree(folder)
    return root


def test_the_server_statement_covers_every_prompt_length(tmp_path: Path) -> None:
    """Replicas at 512 prompt tokens only (issue 38, kind 15): the statement is every point's,
    per prompt length (before: the last point's alone, "no server replicas", though 512 had
    them)."""
    root = write_context_validation(tmp_path / "v", CONTEXT_ARMS, rfc(RFC_GOOD), RFC_GOOD_KS)
    report = check(_replicas_at(root, 512))
    assert report.assumption is not None
    assert report.assumption.startswith(
        "server replicas at batch sizes 1, 64 at 512 prompt tokens: servers of one"
        " configuration vary by"
    )
    assert "; elsewhere P(eps-good) assumes" in report.assumption
    assert report.servers is not None
    assert [(p.prompt_tokens, p.measured_at, p.assumed_at) for p in report.servers.points] == [
        (512, (1, 64), ()),
        (8192, (), (1, 64)),
    ]
