"""lib/deploy/grid.py: the context formats' build: a source without a grid is refused naming
what makes one, and a grid's vllm-context schedule is checked by the capture rule."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO, SAMPLE_SWEEPS

from lib.deploy.decisions import Decisions, read_decisions
from lib.deploy.registry import export
from lib.deploy.settings import ExportSettings
from lib.schedule import Schedule
from lib.settings import DeploySettings


@pytest.fixture(scope="module")
def long_context_result(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("long") / "result.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "lib.cli",
            str(SAMPLE_SWEEPS / "long-context"),
            "--output-json",
            str(out),
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    return out


def test_a_file_without_a_grid_is_refused_for_every_context_format() -> None:
    plain = Decisions(Schedule(((1, 8, 3),)), 3, "vLLM schedule", "s.json")
    for name in ("vllm-context", "vllm-rfc-48944", "vllm-pr-54801"):
        exported, problems = export(plain, ExportSettings(format=name))
        assert exported is None and problems[0].rule == "no-context-grid"
        assert "vLLM schedule" in problems[0].message


def test_every_context_format_builds_from_the_long_context_result(
    long_context_result: Path,
) -> None:
    decisions, problems = read_decisions(long_context_result)
    assert problems == [] and decisions is not None and decisions.grid is not None
    for name in ("vllm-context", "vllm-rfc-48944", "vllm-pr-54801"):
        exported, problems = export(decisions, ExportSettings(format=name))
        assert exported is not None, problems
        assert json.loads(exported.text())["format"] == name


def test_the_vllm_context_schedule_is_checked_against_the_ceiling(
    long_context_result: Path,
) -> None:
    decisions, _ = read_decisions(long_context_result)
    assert decisions is not None
    # [[1, 63, 3], [64, 256, 0]]: 50 * 4 = 200 fits a ceiling of 200, 51 * 4 = 204 does not;
    # 63 * 4 = 252 fits 256.
    tight, _ = export(
        decisions,
        ExportSettings(format="vllm-context"),
        DeploySettings(max_cudagraph_capture_size=200),
    )
    assert tight is not None
    assert any("batch sizes 51-63 run K=3" in w for w in tight.warnings)
    roomy, _ = export(
        decisions,
        ExportSettings(format="vllm-context"),
        DeploySettings(max_cudagraph_capture_size=256),
    )
    assert roomy is not None and not any("capture ceiling" in w for w in roomy.warnings)
