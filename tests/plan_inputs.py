"""What the plan tests (tests/loop/plan/) plan from: tuning results of the sample sweeps (a
Sonnet-like one, the long-context one with its grid) and of a sweep of the tests' own, and the
servers a sweep's cells were measured on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from paths import SAMPLE_SWEEPS
from vllm_sweep import noisy_first_sweep

from lib.confidence import ConfidenceReport, ConfidenceSettings, assess
from lib.deploy.result_file import result_text
from lib.loop.plan.design import SweepDesign
from lib.policy import apply_policy
from lib.schedule import TuningResult, tune
from lib.servers import serve_combo_expression
from lib.settings import Settings
from lib.sweeps import Sweep, load_experiment

LONG_CONTEXT = SAMPLE_SWEEPS / "long-context"
#: The long-context sample's design (data/sample_sweeps/README.md): K 0/1/3/5 under global
#: K 5, concurrency 1 / 8 / 64 / 256, the random dataset.
CONTEXT_DESIGN = SweepDesign(
    model="m", method="mtp", ks=(0, 1, 3, 5), anchors=(1, 8, 64, 256), global_k=5,
    dataset="random",
)  # fmt: skip


def tuned(root: Path) -> tuple[TuningResult, ConfidenceReport]:
    """The seed policy's result of the sweep at ``root`` (noise allowed), and its confidence."""
    result = tune(load_experiment(root), Settings(max_objective_relative_mad=1.0))
    report = assess(result, ConfidenceSettings())
    return apply_policy(result, report, "seed"), report


def noisy_result(tmp_path: Path) -> tuple[Path, TuningResult, ConfidenceReport]:
    """The result JSON of the tests' noisy first sweep (``noisy_first_sweep``), both below
    ``tmp_path``; its result and confidence."""
    result, report = tuned(noisy_first_sweep(tmp_path / "tuning"))
    path = tmp_path / "result.json"
    path.write_text(result_text(result))
    return path, result, report


def sonnet_result(tmp_path: Path) -> Path:
    """The result JSON of the Sonnet-like sample, written below ``tmp_path``."""
    path = tmp_path / "speculative_k_schedule.json"
    result = tune(load_experiment(SAMPLE_SWEEPS / "sonnet-like"), Settings())
    path.write_text(result_text(result))
    return path


def context_result(tmp_path: Path, edit: Any = None) -> Path:
    """The long-context sample's result JSON, written below ``tmp_path``, changed by ``edit``."""
    from lib.cli.main import main

    path = tmp_path / "result.json"
    # Independent runs (no server offsets): every cell of the sample resolves.
    assert main([str(LONG_CONTEXT), "--server-cv", "0", "--output-json", str(path)]) == 0
    if edit is not None:
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))
    return path


def servers_per_cell(sweep: Sweep) -> dict[tuple[int, int], int]:
    """(anchor, K) -> the servers its runs were measured on."""
    counts = sweep.runs.group_by("anchor", "k").agg(serve_combo_expression().n_unique())
    return {(a, k): n for a, k, n in counts.iter_rows()}
