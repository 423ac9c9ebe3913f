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

#: K=3 leads by about 30 % at batch 1 and 2, K=0 by 28 % at batch 4: the lean design's round 0
#: (K=0 and K=3, the probe K, 3 times at each of the 3 anchors, K=1 once) resolves every
#: anchor, and the picks switch between 2 and 4, so the measurement plan asks for the new
#: anchor 3 (round(sqrt(2 x 4)); that of 1 and 2 rounds to 1, no anchor between them), where
#: the truth, linear in log batch size, has K=0 13 % ahead: the follow-up resolves it (the
#: tests that the loop ends ready rely on it).
CLEAR_TRUTH = {
    "1": {"0": 100.0, "1": 130.0, "3": 170.0},
    "2": {"0": 190.0, "1": 250.0, "3": 320.0},
    "4": {"0": 600.0, "1": 470.0, "3": 400.0},
}
#: Where the stand-in's simulated clock starts (its server offsets and run noise are drawn
#: from seeds that include the clock, so a fixed start makes a test's draws the same each time).
CLOCK_START = 1_800_000_000.0
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
    clock = folder / "standin-clock"
    if not clock.exists():
        clock.write_text(repr(CLOCK_START))
    monkeypatch.setenv("STANDIN_VLLM_CLOCK", str(clock))
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
