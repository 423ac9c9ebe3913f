"""Shared by the tests of the seed's policy (test_gates, test_cells, test_decide,
test_schedule): tune a written sweep and read its problems and cells; write a healthy grid and
change one run of it.

Runs within a cell are identical unless a test needs spread, so MAD = 0 and the conservative
score is the median: the expected numbers then follow from the values written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
from sweep_builder import combo_name, write_combo, write_grid

from lib.problems import Problem, Severity
from lib.schedule import TuningResult, tune
from lib.settings import DEFAULT_K_VAR, Settings
from lib.sweeps import load_experiment


def tuned(root: Path, k_var: str = DEFAULT_K_VAR, **settings: Any) -> TuningResult:
    return tune(load_experiment(root, k_var=k_var), Settings(**settings))


def rules(result: TuningResult, severity: Severity = Severity.ERROR) -> list[str]:
    return sorted(p.rule for p in result.problems if p.severity is severity)


def one_problem(result: TuningResult, rule: str) -> Problem:
    (problem,) = [p for p in result.problems if p.rule == rule]
    return problem


def cell_row(result: TuningResult, anchor: int, k: int) -> dict[str, Any]:
    (row,) = result.cells.filter((pl.col("anchor") == anchor) & (pl.col("k") == k)).to_dicts()
    return row


def healthy_grid(root: Path, **options: Any) -> Path:
    """Anchors 1 and 64, K 0 and 3; K=3 wins at 1 (150 vs 100), K=0 at 64 (100 vs 80)."""
    cells = {
        (1, 0): [100.0] * 3,
        (1, 3): [150.0] * 3,
        (64, 0): [100.0] * 3,
        (64, 3): [80.0] * 3,
    }
    return write_grid(root, cells, **options)


def replace_run(root: Path, anchor: int, k: int, run_number: int, **fields: Any) -> None:
    """Overwrite one run of a cell written by write_grid (in summary.json and run=N.json)."""
    folder = root / combo_name(anchor, k)
    runs = json.loads((folder / "summary.json").read_text())
    runs[run_number] = {**runs[run_number], **fields}
    for name in [name for name, value in fields.items() if value is DELETE]:
        del runs[run_number][name]
    write_combo(folder, runs)


#: A field value for :func:`replace_run` that deletes the field.
DELETE = object()


ACCEPTANCE = "spec_decode_acceptance_length"
