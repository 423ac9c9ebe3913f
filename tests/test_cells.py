"""lib/cells.py: the seed's cell gates (README, "The policy", rules 4, 6 and 7), one rule at a
time: minimum runs, noise, acceptance stability, the anchor grid.
"""

from __future__ import annotations

from pathlib import Path

from sweep_builder import grid, write_grid
from tuning_helpers import (
    ACCEPTANCE,
    DELETE,
    cell_row,
    healthy_grid,
    one_problem,
    replace_run,
    tuned,
)

from lib.problems import Severity

# --------------------------------------------------------------------------- cell gates


def test_min_runs(tmp_path: Path) -> None:
    write_grid(tmp_path, {(1, 0): [100.0] * 2, (1, 3): [150.0] * 3})
    result = tuned(tmp_path)
    problem = one_problem(result, "too-few-runs")
    assert (problem.anchor, problem.k, problem.value) == (1, 0, "2")
    assert cell_row(result, 1, 0)["status"] == "rejected"
    assert tuned(tmp_path, min_runs=2).ok


def test_noise_gate_keeps_a_cell_exactly_at_the_threshold(tmp_path: Path) -> None:
    # median 100, deviations [10, 0, 10] -> MAD 10, relative MAD 10 / 100 = 0.1 = threshold
    write_grid(tmp_path, {(1, 0): [90.0, 100.0, 110.0], (1, 3): [150.0] * 3})
    result = tuned(tmp_path)
    assert cell_row(result, 1, 0)["relative_mad"] == 0.1
    assert cell_row(result, 1, 0)["status"] == "kept"
    assert result.ok


def test_noise_gate_rejects_a_cell_just_above_the_threshold(tmp_path: Path) -> None:
    # MAD 10.01, relative MAD 0.1001 > 0.1
    write_grid(tmp_path, {(1, 0): [89.99, 100.0, 110.01], (1, 3): [150.0] * 3})
    result = tuned(tmp_path)
    problem = one_problem(result, "noisy-objective")
    assert (problem.anchor, problem.k, problem.value) == (1, 0, "0.1001")
    assert cell_row(result, 1, 0)["status"] == "rejected"
    assert not result.ok
    assert tuned(tmp_path, max_objective_relative_mad=0.2).ok


def test_acceptance_may_be_absent_at_k0(tmp_path: Path) -> None:
    # the builder writes spec_decode_* fields only for K > 0, as vLLM does
    result = tuned(healthy_grid(tmp_path), acceptance=ACCEPTANCE)
    assert result.ok, [p.describe() for p in result.problems]
    assert cell_row(result, 1, 3)["median_acceptance"] == 2.5  # 1 + 0.5 * 3


def test_partial_acceptance_is_an_error(tmp_path: Path) -> None:
    root = healthy_grid(tmp_path)
    replace_run(root, 64, 3, 1, **{ACCEPTANCE: DELETE})
    result = tuned(root, acceptance=ACCEPTANCE)
    problem = one_problem(result, "partial-acceptance")
    assert (problem.anchor, problem.k) == (64, 3)
    assert cell_row(result, 64, 3)["status"] == "rejected"


def test_k_above_zero_without_acceptance_is_an_error(tmp_path: Path) -> None:
    root = healthy_grid(tmp_path)
    for run in range(3):
        replace_run(root, 1, 3, run, **{ACCEPTANCE: DELETE})
    result = tuned(root, acceptance=ACCEPTANCE)
    problem = one_problem(result, "missing-acceptance")
    assert (problem.anchor, problem.k, problem.field) == (1, 3, ACCEPTANCE)


def _unstable_acceptance(root: Path) -> Path:
    healthy_grid(root)
    # acceptance [1.5, 2.0, 2.5]: median 2, MAD 0.5, relative 0.25 > 0.1
    for run, value in enumerate([1.5, 2.0, 2.5]):
        replace_run(root, 1, 3, run, **{ACCEPTANCE: value})
    return root


def test_unstable_acceptance_is_a_warning(tmp_path: Path) -> None:
    result = tuned(_unstable_acceptance(tmp_path), acceptance=ACCEPTANCE)
    problem = one_problem(result, "unstable-acceptance")
    assert (problem.severity, problem.value) == (Severity.WARNING, "0.2500")
    assert cell_row(result, 1, 3)["status"] == "kept"
    assert result.ok


def test_unstable_acceptance_is_an_error_when_strict(tmp_path: Path) -> None:
    root = _unstable_acceptance(tmp_path)
    result = tuned(root, acceptance=ACCEPTANCE, strict_acceptance_stability=True)
    assert one_problem(result, "unstable-acceptance").severity is Severity.ERROR
    assert cell_row(result, 1, 3)["status"] == "rejected"
    assert not result.ok


# --------------------------------------------------------------------------- anchor grid


def test_anchors_must_start_at_one(tmp_path: Path) -> None:
    write_grid(tmp_path, grid([2, 64], {0: [100.0] * 3, 3: [150.0] * 3}))
    result = tuned(tmp_path)
    problem = one_problem(result, "anchors-not-from-1")
    assert problem.value == "2"
    assert not result.ok


def test_every_anchor_needs_the_same_k_set(tmp_path: Path) -> None:
    write_grid(tmp_path, grid([1, 64], {0: [100.0] * 3}) | {(1, 3): [150.0] * 3})
    result = tuned(tmp_path)
    problem = one_problem(result, "unequal-k-sets")
    assert (problem.anchor, problem.value) == (64, "0")
    assert not result.ok
