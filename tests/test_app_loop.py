"""The app's parts of the loop: the TensorRT-LLM export and the comparison of two experiments
(notebooks/tune_spec_k.py with lib/export.py and lib/compare.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import marimo as mo
import pytest
from notebook_runner import load_notebook, run_notebook

from lib import cli
from lib.compare import DiffReport, DiffSettings, compare, read_side

REPO = Path(__file__).resolve().parents[1]
SAMPLE_SWEEPS = REPO / "data" / "sample_sweeps"


@pytest.fixture(scope="module")
def notebook() -> ModuleType:
    return load_notebook()


def picker(name: str) -> Any:
    return mo.ui.dropdown({name: SAMPLE_SWEEPS / name}, value=name)


def test_trtllm_download_is_the_cli_export(
    notebook: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sample = SAMPLE_SWEEPS / "sonnet-like"
    defs = run_notebook(notebook, monkeypatch, "--sweeps", str(sample))
    result, exported = tmp_path / "result.json", tmp_path / "trtllm.json"
    assert cli.main([str(sample), "--output-json", str(result)]) == 0
    assert cli.main(["export", str(result), "--format", "trtllm", "-o", str(exported)]) == 0
    capsys.readouterr()
    assert defs["trtllm_file"] == exported.read_bytes()
    # sonnet-like tunes to [[1, 63, 7], [64, 256, 0]] with num_speculative_tokens 7.
    assert json.loads(defs["trtllm_file"]) == {
        "max_draft_len": 7,
        "draft_len_schedule": {"63": 7, "256": 0},
    }


def test_no_trtllm_download_without_a_schedule(
    notebook: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    defs = run_notebook(notebook, monkeypatch, "--sweeps", str(SAMPLE_SWEEPS / "noisy"))
    assert not defs["result"].ok
    assert defs["trtllm_file"] is None


def test_nothing_is_compared_until_an_experiment_is_picked(
    notebook: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    defs = run_notebook(notebook, monkeypatch, "--sweeps", str(SAMPLE_SWEEPS))
    assert defs["compare_picker"].value is None
    assert defs["comparison"] is None
    assert defs["comparison_error"] is None


def test_comparison_is_what_diff_gives(
    notebook: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweeps = SAMPLE_SWEEPS / "sonnet-like"
    defs = run_notebook(
        notebook, monkeypatch, "--sweeps", str(sweeps), compare_picker=picker("random-control")
    )
    shown: DiffReport = defs["comparison"]
    settings = DiffSettings()
    expected = compare(
        read_side(sweeps, settings), read_side(SAMPLE_SWEEPS / "random-control", settings), settings
    )
    assert shown.material and expected.material
    assert shown.rows.drop("reasons").equals(expected.rows.drop("reasons"))
    assert shown.rows["reasons"].to_list() == expected.rows["reasons"].to_list()
    assert shown.a.schedule == ((1, 63, 7), (64, 256, 0))
    assert shown.b.schedule == ((1, 256, 0),)


def test_an_experiment_that_cannot_be_tuned_is_explained(
    notebook: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    defs = run_notebook(
        notebook,
        monkeypatch,
        "--sweeps",
        str(SAMPLE_SWEEPS / "sonnet-like"),
        compare_picker=picker("noisy"),
    )
    assert defs["comparison"] is None
    assert "cannot be tuned with these settings" in defs["comparison_error"]
    assert "noisy-objective" in defs["comparison_error"]
