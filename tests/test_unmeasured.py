"""lib/unmeasured.py and --allow-unmeasured-k: cells a bracketed design did not measure, judged
by the unimodal-in-K rule (docs/loop.md, "Bracketed designs"), through the gate, the verdict
and the measurement plan."""

from __future__ import annotations

import itertools
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sweep_builder import write_grid
from tuning_helpers import one_problem, tuned

from lib.analysis import analyse
from lib.deploy.verdict import unimodal_assumption, unmeasured_reasons
from lib.problems import Severity
from lib.settings import Settings
from lib.sweeps import load_experiment
from lib.unmeasured import (
    UNMEASURED_RULE,
    UNMEASURED_RULED_OUT_RULE,
    leads,
    ruling_pair,
    unmeasured_cells,
    valley,
)

TOL = 0.01

# --------------------------------------------------------------------------- the rule


def test_a_lead_is_strictly_beyond_the_tolerance_both_directions() -> None:
    # 100 * (1 - 0.01) = 99: 99.0 is a tie, anything below it is led.
    assert leads(100.0, 98.99, TOL, maximize=True)
    assert not leads(100.0, 99.0, TOL, maximize=True)
    # Minimised (a latency): 99 vs 100 is a tie, 98.9 leads 100 (100 * 0.99 = 99 > 98.9).
    assert leads(98.9, 100.0, TOL, maximize=False)
    assert not leads(99.0, 100.0, TOL, maximize=False)
    # The worse value never leads.
    assert not leads(98.0, 100.0, TOL, maximize=True)


def test_rising_curve_rules_out_k_below_the_middle_but_not_above_it() -> None:
    values = {0: 60.0, 2: 80.0, 5: 100.0}
    # K=1: K=2 lies between it and K=5, which leads K=2: the peak is above 2.
    assert ruling_pair(1, values, TOL, True) == (2, 5)
    # K=3 and K=4 lie between K=2 and K=5: the peak may be there.
    assert ruling_pair(3, values, TOL, True) is None
    assert ruling_pair(4, values, TOL, True) is None
    # K=7, past the largest measured, on the rising side: could be the best.
    assert ruling_pair(7, values, TOL, True) is None


def test_falling_curve_rules_out_k_above_the_middle() -> None:
    values = {0: 100.0, 2: 80.0, 5: 60.0}
    assert ruling_pair(3, values, TOL, True) == (2, 0)
    assert ruling_pair(7, values, TOL, True) == (5, 0)  # the nearest K_n first
    assert ruling_pair(1, values, TOL, True) is None


def test_a_tie_rules_nothing_out_and_just_past_it_does() -> None:
    # K=5 at exactly 1 % above K=2 (80 / 0.99 would be past; 80 * 1/(1-0.01) is the edge).
    edge = 80.0 / (1 - TOL)
    assert ruling_pair(1, {0: 60.0, 2: 80.0, 5: edge}, TOL, True) is None
    assert ruling_pair(1, {0: 60.0, 2: 80.0, 5: edge * 1.001}, TOL, True) == (2, 5)


def test_a_valley_is_named_and_a_monotone_set_has_none() -> None:
    assert valley({0: 100.0, 2: 80.0, 5: 95.0}, TOL, True) == (0, 2, 5)
    assert valley({0: 100.0, 2: 80.0, 5: 60.0}, TOL, True) is None
    assert valley({0: 100.0, 5: 60.0}, TOL, True) is None
    # A dip within the tolerance is no valley.
    assert valley({0: 100.0, 2: 99.5, 5: 100.0}, TOL, True) is None


def _unimodal(ks: list[int], peak: int, slope: float) -> dict[int, float]:
    return {k: 100.0 * (1 - slope * abs(k - peak)) for k in ks}


@given(
    peak=st.integers(0, 7),
    slope=st.floats(0.02, 0.1),
    measured=st.sets(st.integers(0, 7), min_size=2, max_size=6),
)
def test_on_any_unimodal_curve_the_best_k_is_never_ruled_out(
    peak: int, slope: float, measured: set[int]
) -> None:
    """Property: whatever K are measured on a strictly unimodal curve (leads beyond the
    tolerance), no valley is seen and the true best K, if unmeasured, is never ruled out;
    every K ruled out is truly worse than some measured K."""
    curve = _unimodal(list(range(8)), peak, slope)
    values = {k: curve[k] for k in measured}
    assert valley(values, TOL, True) is None
    for k in set(range(8)) - measured:
        pair = ruling_pair(k, values, TOL, True)
        if k == peak:
            assert pair is None
        if pair is not None:
            assert curve[k] < curve[pair[0]]


# --------------------------------------------------------------------------- the gate


def _bracketed(root: Path) -> Path:
    """Anchors 1, 8 and 64; K 0, 2 and 5 everywhere, K=1 and K=3 only where measured:
    at 1 the values rise with K (5 best), at 64 they fall (0 best), at 8 they dip at K=2
    (a valley: 0 and 5 both beat 2)."""
    cells = {
        (1, 0): [60.0] * 3,
        (1, 2): [80.0] * 3,
        (1, 5): [100.0] * 3,
        (8, 0): [100.0] * 3,
        (8, 2): [80.0] * 3,
        (8, 5): [95.0] * 3,
        (64, 0): [100.0] * 3,
        (64, 2): [80.0] * 3,
        (64, 5): [60.0] * 3,
        (64, 1): [90.0] * 3,
        (1, 3): [105.0] * 3,
    }
    return write_grid(root, cells)


def test_the_seed_refuses_unequal_k_sets_and_names_the_flag(tmp_path: Path) -> None:
    result = tuned(_bracketed(tmp_path))
    problem = next(p for p in result.problems if p.rule == "unequal-k-sets")
    assert "--allow-unmeasured-k" in (problem.expected or "")
    assert not result.ok


def test_allowed_missing_cells_are_judged_cell_by_cell(tmp_path: Path) -> None:
    result = tuned(_bracketed(tmp_path), allow_unmeasured_k=True)
    assert result.ok
    found = {
        (p.anchor, p.k): p.severity
        for p in result.problems
        if p.rule in (UNMEASURED_RULE, UNMEASURED_RULED_OUT_RULE)
    }
    assert found == {
        # Rising at 1: K=1 lies below K=2, which K=5 (and K=3) lead: ruled out.
        (1, 1): Severity.NOTE,
        # A valley at 8: nothing is ruled out.
        (8, 1): Severity.WARNING,
        (8, 3): Severity.WARNING,
        # Falling at 64: K=3 lies above K=2, which K=0 leads: ruled out.
        (64, 3): Severity.NOTE,
    }
    (at_8,) = [p for p in result.problems if (p.anchor, p.k) == (8, 1)]
    assert "not unimodal" in at_8.message


def test_only_kept_cells_rule_a_k_out(tmp_path: Path) -> None:
    """A rejected cell's value is not trusted: K=2 at 1 too noisy to keep, so K=1 (which only
    K=2 between it and K=5 could rule out) stays open."""
    cells = {
        (1, 0): [60.0] * 3,
        (1, 2): [60.0, 80.0, 100.0],  # relative MAD 0.25, past the default 0.1
        (1, 5): [100.0] * 3,
        (64, 0): [100.0] * 3,
        (64, 1): [90.0] * 3,
        (64, 2): [80.0] * 3,
        (64, 5): [60.0] * 3,
    }
    result = tuned(write_grid(tmp_path, cells), allow_unmeasured_k=True)
    assert one_problem(result, UNMEASURED_RULE).anchor == 1


def test_unmeasured_cells_reads_the_frame_directly() -> None:
    cells = pl.DataFrame(
        {
            "anchor": [1, 1, 1, 2, 2, 2, 2],
            "k": [0, 2, 5, 0, 1, 2, 5],
            "median": [60.0, 80.0, 100.0, 60.0, 70.0, 80.0, 100.0],
            "conservative": [60.0, 80.0, 100.0, 60.0, 70.0, 80.0, 100.0],  # one run: no spread
            "status": ["kept"] * 7,
        }
    )
    (cell,) = unmeasured_cells(cells, TOL, maximize=True)
    assert (cell.anchor, cell.k, cell.ruled_out) == (1, 1, True)
    assert "K=5 beats K=2 by 25" in cell.reason
    # Minimised, the same numbers say the opposite: the smallest is best, so K=1 sits between
    # the best (K=0) and K=2: not ruled out.
    (cell,) = unmeasured_cells(cells, TOL, maximize=False)
    assert not cell.ruled_out


# --------------------------------------------------------------------------- verdict and plan


def test_verdict_and_plan_ask_for_the_open_cells_only(tmp_path: Path) -> None:
    analysis = analyse(
        load_experiment(_bracketed(tmp_path)), Settings(allow_unmeasured_k=True, min_runs=1)
    )
    reasons = unmeasured_reasons(analysis.result.problems)
    assert [r.message.split(":")[0] for r in reasons] == ["batch size 8"]
    assert "measure K=1, K=3 at batch size 8" in reasons[0].fix
    assumption = unimodal_assumption(analysis.result.problems)
    assert assumption is not None
    assert "K=1 at batch sizes 1; K=3 at batch sizes 64" in assumption
    assert analysis.plan is not None
    asked = {
        (row["batch_size"], row["k"]): row["more_runs"]
        for row in analysis.plan.reruns.to_dicts()
        if row["runs"] == 0
    }
    # 3 runs a cell in this sweep: a new cell gets as many (lib.measurement_plan.new_anchor_runs).
    assert asked == {(8, 1): 3, (8, 3): 3}


@pytest.mark.parametrize("order", list(itertools.permutations([0, 2, 5])))
def test_the_judgement_does_not_depend_on_file_order(order: tuple[int, ...]) -> None:
    medians = {0: 60.0, 2: 80.0, 5: 100.0}
    cells = pl.DataFrame(
        {
            "anchor": [1] * 3 + [2] * 4,
            "k": [*order, 0, 1, 2, 5],
            "median": [medians[k] for k in order] + [1.0, 1.0, 1.0, 1.0],
            "conservative": [medians[k] for k in order] + [1.0, 1.0, 1.0, 1.0],
            "status": ["kept"] * 7,
        }
    )
    (cell,) = unmeasured_cells(cells, TOL, maximize=True)
    assert cell.ruled_out


def test_a_lead_inside_the_runs_spread_rules_nothing_out(tmp_path: Path) -> None:
    """At 1, K=5 leads K=2 by 10 % in the medians, but K=2's runs spread 10 % (MAD 8: a robust
    sigma of 11.9, the default penalty 1) and K=5's too: 110 - 11.9 = 98.1 is not clear of
    100 + 11.9. K=1 stays open. With steady runs (the other anchor) the same medians rule it
    out."""
    cells = {
        (1, 0): [60.0] * 3,
        (1, 2): [92.0, 100.0, 108.0],
        (1, 5): [102.0, 110.0, 118.0],
        (64, 0): [60.0] * 3,
        (64, 2): [100.0] * 3,
        (64, 5): [110.0] * 3,
        (8, 0): [60.0] * 3,
        (8, 1): [70.0] * 3,
        (8, 2): [100.0] * 3,
        (8, 5): [110.0] * 3,
    }
    result = tuned(write_grid(tmp_path, cells), allow_unmeasured_k=True)
    found = {
        (p.anchor, p.k): p.rule
        for p in result.problems
        if p.rule in (UNMEASURED_RULE, UNMEASURED_RULED_OUT_RULE)
    }
    assert found == {(1, 1): UNMEASURED_RULE, (64, 1): UNMEASURED_RULED_OUT_RULE}
