"""lib/decide.py: the seed's tie rule (README, "The policy", rule 8): the smallest K within
the tolerance of the best conservative score, in either direction.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sweep_builder import write_grid
from tuning_helpers import cell_row, one_problem, rules, tuned

from lib.schedule import Schedule

# --------------------------------------------------------------------------- tie rule


def _two_k(root: Path, k0: float, k3: float, objective: str = "output_throughput") -> Path:
    return write_grid(root, {(1, 0): [k0] * 3, (1, 3): [k3] * 3}, objective=objective)


def test_tie_at_exactly_the_tolerance_goes_to_the_smaller_k(tmp_path: Path) -> None:
    # ratio 75 / 100 = 0.75 = 1 - 0.25: tied, and K=0 is the smaller
    result = tuned(_two_k(tmp_path, 75.0, 100.0), relative_tolerance=0.25)
    assert result.schedule == Schedule(((1, 1, 0),))
    assert result.decisions["tied_k"].to_list() == [[0, 3]]
    # selected vs best: 0.75 - 1 = -25 %
    assert result.decisions["vs_best_percent"].to_list() == pytest.approx([-25.0])


def test_just_outside_the_tolerance_the_best_wins(tmp_path: Path) -> None:
    # ratio 74.99 / 100 < 0.75
    result = tuned(_two_k(tmp_path, 74.99, 100.0), relative_tolerance=0.25)
    assert result.schedule == Schedule(((1, 1, 3),))


def test_ties_rank_by_conservative_score_not_median(tmp_path: Path) -> None:
    # K=3: median 105, MAD 5 -> 105 - 1.4826 * 5 = 97.587; K=0: 100 -> K=0 is the best
    write_grid(tmp_path, {(1, 0): [100.0] * 3, (1, 3): [100.0, 105.0, 110.0]})
    assert tuned(tmp_path).schedule == Schedule(((1, 1, 0),))
    assert cell_row(tuned(tmp_path), 1, 3)["conservative"] == pytest.approx(105 - 1.4826 * 5)
    # penalty 0 ranks by the median: 100 / 105 = 0.952 < 0.99, so K=3
    assert tuned(tmp_path, uncertainty_penalty=0.0).schedule == Schedule(((1, 1, 3),))


def test_minimise_direction(tmp_path: Path) -> None:
    root = _two_k(tmp_path, 10.0, 8.0, objective="median_tpot_ms")
    minimised = tuned(root, objective="median_tpot_ms", direction="minimize")
    # ratio of K=0 = best / value = 8 / 10 = 0.8 < 0.99: K=3, the lower latency, wins
    assert minimised.schedule == Schedule(((1, 1, 3),))
    assert cell_row(minimised, 1, 0)["ratio"] == pytest.approx(0.8)
    # maximising the same numbers would prefer K=0
    assert tuned(root, objective="median_tpot_ms").schedule == Schedule(((1, 1, 0),))
    # 0.8 >= 1 - 0.2: tied, smaller K
    assert tuned(
        root, objective="median_tpot_ms", direction="minimize", relative_tolerance=0.2
    ).schedule == Schedule(((1, 1, 0),))


def test_minimising_penalty_adds_spread(tmp_path: Path) -> None:
    # K=3 TPOT [7, 8, 9]: conservative 8 + 1.4826 = 9.4826 > 9.0 of K=0 -> K=0 wins
    write_grid(tmp_path, {(1, 0): [9.0] * 3, (1, 3): [7.0, 8.0, 9.0]}, objective="median_tpot_ms")
    result = tuned(tmp_path, objective="median_tpot_ms", direction="minimize")
    assert cell_row(result, 1, 3)["conservative"] == pytest.approx(9.4826)
    assert result.schedule == Schedule(((1, 1, 0),))


def test_no_pick_where_no_k_scores_above_zero(tmp_path: Path) -> None:
    # Every K measured 0 at batch 1: nothing to rank (the seed's "No positive conservative
    # objective for batch_size=1"), one error naming the anchor, and no schedule.
    write_grid(tmp_path / "zero", {(1, 1): [0.0] * 3, (1, 3): [0.0] * 3})
    result = tuned(tmp_path / "zero")
    assert not result.ok and result.schedule is None
    problem = one_problem(result, "no-positive-objective")
    assert (problem.anchor, problem.value) == (1, "0.0")
    assert result.decisions["selected_k"].to_list() == [None]
    # One K above 0 (the other side of the rule): it is picked, and nothing is refused.
    write_grid(tmp_path / "one", {(1, 1): [0.0] * 3, (1, 3): [0.5] * 3})
    result = tuned(tmp_path / "one")
    assert result.ok and result.schedule == Schedule(((1, 1, 3),))
    # The penalty can clip a score to 0 (median 1, MAD 1: 1 - 1.4826 < 0): the same refusal.
    write_grid(tmp_path / "clipped", {(1, 1): [0.0, 1.0, 2.0], (1, 3): [0.0, 1.0, 2.0]})
    result = tuned(tmp_path / "clipped", max_objective_relative_mad=1.0)
    assert rules(result) == ["no-positive-objective", "undecided-anchor"]
    minimised = tuned(tmp_path / "one", objective="output_throughput", direction="minimize")
    assert "no-positive-objective" not in rules(minimised)


def test_rejected_cells_are_never_selected(tmp_path: Path) -> None:
    # the best median (K=3) is noisy: relative MAD 0.2; K=0 is picked from what is left
    write_grid(tmp_path, {(1, 0): [100.0] * 3, (1, 3): [160.0, 200.0, 240.0]})
    result = tuned(tmp_path)
    assert result.decisions["selected_k"].to_list() == [0]
    assert cell_row(result, 1, 3)["selected"] is False
    assert result.decisions["complete"].to_list() == [False]
