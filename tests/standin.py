"""The stand-in ``vllm`` (bench/standin_vllm/vllm) set up for a test: its truth grid written,
its folder first on PATH, its clock and its log of measured runs in the test's folder."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from paths import REPO

STANDIN_DIR = REPO / "bench" / "standin_vllm"

#: K=3 leads K=1 by about 30 % and K=0 by 70 % at every anchor: two runs more of the two
#: leading K resolve every anchor (the test that the loop ends ready relies on it).
CLEAR_TRUTH = {
    "1": {"0": 100.0, "1": 130.0, "3": 170.0},
    "2": {"0": 190.0, "1": 250.0, "3": 320.0},
    "4": {"0": 360.0, "1": 470.0, "3": 600.0},
}
#: The flags of a run on :data:`CLEAR_TRUTH`'s grid.
CLEAR_FLAGS = (
    "--model",
    "M",
    "--method",
    "eagle3",
    "--draft-model",
    "D",
    "--ks",
    "0,1,3",
    "--anchors",
    "1,2,4",
)


def use_standin(
    monkeypatch: pytest.MonkeyPatch, folder: Path, truth: dict[str, Any], **model: Any
) -> Path:
    """Put the stand-in on PATH with ``truth`` and the ``model`` settings (run_cv, server_cv,
    start_seconds, crash_at_run, sleep_seconds, ...); returns the truth file (rewrite it to
    change the model between two commands)."""
    path = folder / "standin-truth.json"
    write_model(path, truth, **model)
    monkeypatch.setenv("PATH", f"{STANDIN_DIR}:{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_VLLM_TRUTH", str(path))
    monkeypatch.setenv("STANDIN_VLLM_CLOCK", str(folder / "standin-clock"))
    monkeypatch.setenv("STANDIN_VLLM_LOG", str(folder / "standin-measured.log"))
    return path


def write_model(path: Path, truth: dict[str, Any], **model: Any) -> None:
    settings = {"run_cv": 0.02, "server_cv": 0.005, "seed": 3, "start_seconds": 60.0}
    settings.update(model)
    path.write_text(json.dumps({"truth": truth, **settings}))


def measured(folder: Path) -> Counter[tuple[str, str, str]]:
    """How often the stand-in measured each (experiment, combo folder, run number)."""
    log = folder / "standin-measured.log"
    if not log.exists():
        return Counter()
    lines = log.read_text().splitlines()
    return Counter((e, c, r) for e, c, r in (line.split("\t") for line in lines))
