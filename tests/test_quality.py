"""The code-quality gates run by the test command, so `uv run pytest` is the whole of CI."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO

ROOT = REPO
BIN = Path(sys.executable).parent


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)


def _tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        found = shutil.which(name)
        assert found, f"{name} is not installed in the project environment (uv sync)"
        return found
    return str(path)


def test_ruff_check_is_clean() -> None:
    result = _run(_tool("ruff"), "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean() -> None:
    result = _run(_tool("ruff"), "format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_on_lib_is_clean() -> None:
    result = _run(_tool("mypy"), "--strict", "lib")
    assert result.returncode == 0, result.stdout + result.stderr


#: The marimo notebooks (notebooks/ also holds sections.py, a plain module they import).
NOTEBOOKS = sorted(
    path
    for path in (ROOT / "notebooks").glob("*.py")
    if "marimo.App(" in path.read_text(encoding="utf-8")
)


def test_the_app_notebook_is_checked() -> None:
    assert ROOT / "notebooks" / "tune_spec_k.py" in NOTEBOOKS


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=str)
def test_marimo_check_strict_is_clean(notebook: Path) -> None:
    result = _run(_tool("marimo"), "check", "--strict", str(notebook.relative_to(ROOT)))
    assert result.returncode == 0, result.stdout + result.stderr
