"""lib.calibration: the noise ratio, the knot weights, the leading K's peak and the calibrated
P(eps-good) (docs/confidence.md, "Calibration").
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from confidence_helpers import INDEPENDENT, WORKED_BATCH_64, anchor_row, cells_of, p_of, report_of
from paths import REPO
from sweep_builder import write_grid

from lib.calibration import (
    CALIBRATION_KNOTS,
    LEADER_CALIBRATION,
    LEAN_LAPSE,
    LEAN_LAPSE_RAMP,
    PEAK_CAP,
    calibrated,
    knot_weights,
    leader_peak,
    lean_lapse,
    noise_ratio,
)
from lib.confidence import ConfidenceSettings, assess
from lib.schedule import tune
from lib.settings import Settings
from lib.sweeps import load_experiment


def test_noise_ratio_is_the_standard_error_of_a_difference_over_the_tolerance() -> None:
    counts = np.array([3, 3, 5, 5])
    margin = math.log(1 - 0.01)
    # 2 % noise, 4 runs per cell on average: sqrt(2 / 4) * 0.02 / 0.01005 = 1.407.
    assert noise_ratio(0.02, counts, margin) == pytest.approx(0.02 * math.sqrt(0.5) / -margin)
    assert noise_ratio(0.0, counts, margin) == 0.0
    assert noise_ratio(0.02, counts, 0.0) == math.inf


@pytest.mark.parametrize(
    ("ratio", "expected"),
    [
        (math.exp(0.25), {1: 0.5, 2: 0.5}),  # halfway between the knots 0 and 0.5
        (math.exp(-5.0), {0: 1.0}),  # below the first knot: held at it
        (math.exp(9.0), {6: 1.0}),  # above the last: held at it
        (math.inf, {6: 1.0}),
    ],
)
def test_knot_weights_interpolate_linearly_in_log_ratio(
    ratio: float, expected: dict[int, float]
) -> None:
    weights = knot_weights(ratio)
    assert weights.sum() == pytest.approx(1.0)
    assert {i: w for i, w in enumerate(weights) if w} == pytest.approx(expected)


@pytest.mark.parametrize("ratio", [0.3, 1.0, math.e, 4.0, 8.0, 30.0])
@pytest.mark.parametrize("peak", [0.0, 2.0, 6.0])
def test_calibration_is_monotone_and_strictly_inside_0_1(ratio: float, peak: float) -> None:
    grid = np.array([0.0, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95, 0.99, 1.0])
    # A lone K is its anchor's leader; beside a K at P = 1 every K is one of the others.
    leader = np.array([calibrated(np.array([p]), ratio, peak)[0] for p in grid])
    other = np.array([calibrated(np.array([1.0, p]), ratio, peak)[1] for p in grid])
    for mapped in (leader, other):
        assert np.all(np.diff(mapped) >= 0)
        assert np.all((mapped > 0) & (mapped < 1))


def test_a_peaked_leader_is_doubted_and_the_lapse_caps_it() -> None:
    """The leading K's P falls as it stands further above its neighbours' line (every knot's
    peak slope is negative), the other K's P does not move, and at the knot with a lapse the
    leader's P stays below 1 - lapse however sure the model is."""
    model = np.array([0.999, 0.3])
    for ratio in (1.0, 4.0, 12.0):
        by_peak = [calibrated(model, ratio, peak) for peak in (0.0, 1.0, 3.0)]
        assert by_peak[0][0] > by_peak[1][0] > by_peak[2][0]
        assert by_peak[0][1] == by_peak[1][1] == by_peak[2][1]
    for knot, (_, _, peak_slope, lapse) in enumerate(LEADER_CALIBRATION):
        assert peak_slope < 0
        ratio = math.exp(CALIBRATION_KNOTS[knot])
        assert calibrated(np.array([1.0]), ratio, 0.0)[0] <= 1.0 - lapse


@pytest.mark.parametrize(
    ("ks", "means", "model"),
    [
        ([0, 1, 2], [0.0, 0.1, 0.05], [0.1, 0.8, 0.1]),  # K=1 above the line of 0 and 2
        ([0, 1, 4], [0.0, 0.2, 0.4], [0.1, 0.9, 0.3]),  # unequal steps: the line at K=1 is 0.1
    ],
)
def test_leader_peak_is_the_rise_above_the_neighbours_line_in_standard_errors(
    ks: list[int], means: list[float], model: list[float]
) -> None:
    counts = np.array([3, 3, 3])
    log_sd = 0.02
    # Independently: the line by np.interp, and the variance of mean_1 - line as the sum of
    # each mean's squared coefficient over its count (the coefficients from the line's slope).
    line = np.interp(ks[1], [ks[0], ks[2]], [means[0], means[2]])
    share = (ks[1] - ks[0]) / (ks[2] - ks[0])
    coefficients = np.array([-(1 - share), 1.0, -share])
    standard_error = log_sd * math.sqrt(float((coefficients**2 / counts).sum()))
    expected = (means[1] - line) / standard_error
    got = leader_peak(np.array(ks), counts, np.array(means), log_sd, np.array(model))
    assert got == pytest.approx(expected, rel=1e-12)
    assert got > 3


def test_leader_peak_is_zero_at_the_ends_below_the_line_and_without_noise() -> None:
    ks, counts = np.array([0, 1, 2]), np.array([3, 3, 3])
    means = np.array([0.0, 0.1, 0.3])
    # The leader (highest model P) is the largest K: nothing beyond it to draw a line to.
    assert leader_peak(ks, counts, means, 0.02, np.array([0.0, 0.1, 0.9])) == 0.0
    assert leader_peak(ks, counts, means[::-1].copy(), 0.02, np.array([0.9, 0.1, 0.0])) == 0.0
    # K=1 leads but lies below the line through K=0 and K=2 (0.15): no peak.
    assert leader_peak(ks, counts, means, 0.02, np.array([0.1, 0.8, 0.1])) == 0.0
    # A single K, and identical runs.
    assert leader_peak(ks[:1], counts[:1], means[:1], 0.02, np.array([1.0])) == 0.0
    assert leader_peak(ks, counts, np.array([0.0, 0.2, 0.0]), 0.0, np.array([0, 1.0, 0])) == 0.0


def test_a_sharp_real_peak_counts_only_up_to_the_cap_and_stays_resolved() -> None:
    """moe-non-monotone, batch 128: K=3 (6694 tok/s) stands 40 % above K=1 and K=7 at 1.5 %
    noise, 38 standard errors above their line; capped at PEAK_CAP it stays resolved (the model
    says P = 1.0; uncapped, the discount took it to 0.006)."""
    ks, counts = np.array([0, 1, 2]), np.array([3, 3, 3])
    huge = leader_peak(ks, counts, np.array([0.0, 1.0, 0.0]), 0.01, np.array([0.0, 1.0, 0.0]))
    assert huge == PEAK_CAP
    result = tune(load_experiment(REPO / "data" / "sample_sweeps" / "moe-non-monotone"), Settings())
    row = anchor_row(assess(result, INDEPENDENT), 128)
    assert row["leader_peak"] == PEAK_CAP
    assert (row["status"], row["selected_k"]) == ("resolved", 3)


def test_unordered_k_have_no_peak_so_their_labels_cannot_change_a_result(tmp_path: Path) -> None:
    """``tune-spec-k check`` codes its arms as K with no order between them. Batch 64 of the
    worked example has K=1 4.3 standard errors above the line through K=0 and K=2; with
    ``ordered_k=False`` there is no peak, and swapping the runs of K=1 and K=4 (K=1 now at an
    end of the range) gives the same P to the same runs (a peak would have moved them by far
    more: compare the ordered P of K=1)."""
    cells = {k: WORKED_BATCH_64[k] for k in (0, 1, 2, 3, 4)}
    swapped = {**cells, 1: cells[4], 4: cells[1]}
    unordered = ConfidenceSettings(ordered_k=False, server_cv=0.0)
    _, ordered = report_of(write_grid(tmp_path / "a", cells_of({64: cells})))
    _, plain = report_of(write_grid(tmp_path / "b", cells_of({64: cells})), unordered)
    _, moved = report_of(write_grid(tmp_path / "c", cells_of({64: swapped})), unordered)
    assert (
        anchor_row(ordered, 64)["leader_peak"] > 4 and anchor_row(plain, 64)["leader_peak"] == 0.0
    )
    assert p_of(plain, 64)[1] > p_of(ordered, 64)[1]  # type: ignore[operator]
    # The same runs get the same P, up to the Monte-Carlo error (the draws follow the columns).
    assert p_of(moved, 64)[4] == pytest.approx(p_of(plain, 64)[1], abs=0.005)
    assert p_of(moved, 64)[1] == pytest.approx(p_of(plain, 64)[4], abs=0.005)


def test_calibration_keeps_exact_probabilities_without_noise() -> None:
    exact = np.array([0.0, 1.0, 1.0])
    assert calibrated(exact, 0.0, 0.0).tolist() == [0.0, 1.0, 1.0]


def test_the_lean_lapse_ramps_from_zero_to_its_cap_between_the_knots() -> None:
    low, high = LEAN_LAPSE_RAMP
    assert lean_lapse(math.exp(low)) == 0.0  # the ramp's start: none yet
    assert 0.0 < lean_lapse(math.exp(low + 0.01)) < LEAN_LAPSE
    # Half-way in log ratio: half the lapse.
    assert lean_lapse(math.exp((low + high) / 2)) == pytest.approx(LEAN_LAPSE / 2)
    assert lean_lapse(math.exp(high)) == lean_lapse(1e6) == LEAN_LAPSE
    assert lean_lapse(0.0) == 0.0  # no noise: nothing to doubt
