"""bench/simulate_lean.py's lean families (issue 40): the noise profiles, the sweeps with and
without a noise probe, and the rule that decides which rows are checked."""

from __future__ import annotations

import math

import numpy as np
import pytest
from bench_scripts import load_bench_script

from lib.settings import DEFAULT_RUN_CV

simulator = load_bench_script("simulate_regret")  # simulate_lean imports it by name
lean = load_bench_script("simulate_lean")
FIVE_K = (0, 1, 2, 3, 4)


def _family(**changes: object) -> object:
    base = {"k_values": FIVE_K, "low_cv": 0.01, "growing": True, "offset_sd": 0.0, "probes": True}
    return lean.LeanFamily(**{**base, **changes})


@pytest.mark.parametrize("growing", [True, False])
def test_the_noise_changes_x4_log_linearly_over_the_anchors(growing: bool) -> None:
    family = _family(growing=growing)
    first, last = family.noise_at(1), family.noise_at(256)
    assert (first, last) == pytest.approx((0.01, 0.04) if growing else (0.04, 0.01))
    # 16 is half-way from 1 to 256 in log batch size: the geometric mean, 2 %.
    assert family.noise_at(16) == pytest.approx(0.02)


def test_a_noiseless_lean_sweep_is_the_truth_with_probes_on_the_two_best_k() -> None:
    family = _family(low_cv=0.0)
    model = simulator.draw_model(np.random.default_rng(3))
    runs = lean.lean_sweep(model, family, np.random.default_rng(4)).runs
    counts = runs.group_by("anchor", "k").len()
    for anchor in simulator.ANCHORS:
        truth = {k: model.throughput(anchor, k) for k in FIVE_K}
        best_two = set(sorted(truth, key=lambda k: -truth[k])[:2])
        for k in FIVE_K:
            values = runs.filter((runs["anchor"] == anchor) & (runs["k"] == k))["output_throughput"]
            expected = 3 if anchor in lean.PROBE_ANCHORS and k in best_two else 1
            assert len(values) == expected, (anchor, k)
            assert all(math.isclose(v, truth[k]) for v in values)
    # 25 cells, 2 probed at 3 anchors with 2 more runs each: 37 runs.
    assert counts["len"].sum() == 25 + 2 * 3 * 2


def test_without_probes_every_cell_has_one_run() -> None:
    family = _family(probes=False, low_cv=0.02)
    model = simulator.draw_model(np.random.default_rng(5))
    runs = lean.lean_sweep(model, family, np.random.default_rng(6)).runs
    assert runs.height == len(simulator.ANCHORS) * len(FIVE_K)


def test_the_assumption_holds_with_probes_or_a_run_cv_at_least_the_largest_truth() -> None:
    assert _family().holds(0.0)  # probes: measured
    bare = _family(probes=False)  # the truth goes up to 4 %
    assert bare.holds(0.04) and not bare.holds(0.039)
    assert bare.assumed_run_cvs() == (DEFAULT_RUN_CV, 0.04)
    assert _family(probes=False, low_cv=0.005).assumed_run_cvs() == (DEFAULT_RUN_CV,)  # 2 %


def _results(bad_family: int, bad_cv: float, wrong: int) -> list[dict[str, object]]:
    """Every family and run_cv: 10 resolved, none wrong, except one at 0.9."""
    rows = []
    for index, family in enumerate(lean.LEAN_FAMILIES):
        for run_cv in family.assumed_run_cvs():
            row: dict[str, object] = {"family": index, "run_cv": run_cv, "clear": 4, "big": 1}
            for level in simulator.CONFIDENCE_LEVELS:
                bad = (index, run_cv, level) == (bad_family, bad_cv, 0.9)
                row |= {
                    f"resolved_{level}": 10,
                    f"wrong_resolved_{level}": wrong if bad else 0,
                    f"clear_unresolved_{level}": 1,
                    f"big_unresolved_{level}": 0,
                }
            rows.append(row)
    return rows


def test_only_rows_where_the_assumption_holds_can_miss_and_every_row_is_printed() -> None:
    index = next(i for i, f in enumerate(lean.LEAN_FAMILIES) if not f.probes and f.low_cv == 0.01)
    # 5 wrong of 10 at 0.9: 50 %, Wilson interval [23.7, 76.3] %, wholly above 10 %.
    failing = lean.summarise_lean(_results(index, DEFAULT_RUN_CV, 5))
    assert lean.missed_lean_targets(failing) == []  # 2 % under a truth up to 4 %: no target
    rows = lean.lean_markdown(failing).splitlines()[2:]
    assert len(rows) == failing.height
    labelled = [line for line in rows if "| 50.0%*! [" in line]
    assert len(labelled) == 1 and "| 2% | does not hold |" in labelled[0]
    # 3 of the 4 clear anchors per trial resolved, the big lead always.
    assert labelled[0].endswith("| 75% of 4 | 100% of 1 |")
    held = lean.summarise_lean(_results(index, 0.04, 5))
    (missed,) = lean.missed_lean_targets(held)
    assert "run_cv 0.04: wrong among resolved at 0.9 above 10%" in missed


def test_a_lean_trial_assesses_its_sweep_at_every_assumed_run_cv_and_level() -> None:
    index = next(i for i, f in enumerate(lean.LEAN_FAMILIES) if not f.probes and f.low_cv == 0.01)
    rows = lean.run_lean_trial((index, 0, 200, 1))
    assert [row["run_cv"] for row in rows] == [DEFAULT_RUN_CV, 0.04]
    for row in rows:
        for level in simulator.CONFIDENCE_LEVELS:
            assert 0 <= row[f"wrong_resolved_{level}"] <= row[f"resolved_{level}"] <= 5
            assert 0 <= row[f"big_unresolved_{level}"] <= row["big"] <= 5
