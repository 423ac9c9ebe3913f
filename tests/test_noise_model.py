"""The noise model of single-run anchors (lib/noise_model.py): borrowed run noise, its
uncertainty as a scaled-inverse-chi-square, and the special functions behind it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats

from lib.noise_model import (
    MAX_BORROWED_DF,
    MeasuredNoise,
    NoiseSource,
    digamma,
    fit_run_noise,
    trigamma,
)


@pytest.mark.parametrize("x", [0.05, 0.5, 1.0, 2.0, 5.5, 6.0, 40.0, 1e4])
def test_digamma_and_trigamma_match_scipy(x: float) -> None:
    assert digamma(x) == pytest.approx(float(special.digamma(x)), abs=1e-9)
    assert trigamma(x) == pytest.approx(float(special.polygamma(1, x)), rel=1e-9)


def test_a_log_linear_noise_measured_surely_is_interpolated() -> None:
    # 1 % at batch 1 and 4 % at 256, each with 2,000 df (almost known): at 16, half-way in log
    # batch size, log sigma is half-way too, sqrt(1 x 4) = 2 %; at 4, a quarter: 4^(1/4) %.
    measured = [MeasuredNoise(1, 0.01, 2000, 10), MeasuredNoise(256, 0.04, 2000, 10)]
    assert fit_run_noise(measured, 16).log_sd == pytest.approx(0.02, rel=0.01)
    assert fit_run_noise(measured, 4).log_sd == pytest.approx(0.01 * 4**0.25, rel=0.01)
    assert fit_run_noise(measured, 16).df == MAX_BORROWED_DF


def test_one_measured_anchor_lends_its_level_less_surely_the_further_away() -> None:
    (near, far) = (fit_run_noise([MeasuredNoise(8, 0.02, 10, 5)], anchor) for anchor in (16, 1024))
    # One anchor fits no trend: the centre is its level (bias-corrected), wherever.
    assert near.centre == pytest.approx(far.centre)
    bias = digamma(5.0) - math.log(5.0)
    assert near.centre == pytest.approx(0.02 * math.exp(-bias / 2))
    assert far.df < near.df <= 10
    assert (near.from_anchors, near.cells, near.measured_df) == ((8,), 5, 10)


def test_the_inverse_chi_square_has_the_fitted_mean_of_log_sigma() -> None:
    borrowed = fit_run_noise([MeasuredNoise(1, 0.01, 4, 2), MeasuredNoise(256, 0.04, 4, 2)], 16)
    half = borrowed.df / 2
    # sigma^2 = s^2 df / chi2_df: E log sigma^2 = log s^2 + log(df / 2) - psi(df / 2).
    mean_log_variance = 2 * math.log(borrowed.log_sd) + math.log(half) - digamma(half)
    assert borrowed.centre is not None
    assert mean_log_variance == pytest.approx(2 * math.log(borrowed.centre))


@pytest.mark.parametrize("slope", [-0.25, 0.0, 0.25])
def test_the_borrowed_noise_covers_the_true_noise_as_often_as_it_says(slope: float) -> None:
    # Probes at 1, 16 and 256 (4 df each, as 2 cells x 3 runs give), the true log sigma linear
    # in log batch size (x4 from 1 to 256 either way, or flat); the borrowed posterior's 80 %
    # central interval of sigma^2 at batch 4 and 64 should hold the truth about 80 % of the
    # time (at least: never surer than the fit), over 600 sweeps.
    rng = np.random.default_rng(40)
    probes, targets = (1, 16, 256), (4, 64)
    inside = total = 0
    for _ in range(600):
        measured = []
        for anchor in probes:
            sigma = 0.02 * anchor**slope
            s2 = sigma**2 * rng.chisquare(4) / 4
            measured.append(MeasuredNoise(anchor, math.sqrt(s2), 4, 2))
        for anchor in targets:
            borrowed = fit_run_noise(measured, anchor)
            truth = (0.02 * anchor**slope) ** 2
            # P(sigma^2 <= truth) = P(chi2_df >= s^2 df / truth)
            level = stats.chi2.sf(borrowed.log_sd**2 * borrowed.df / truth, borrowed.df)
            inside += 0.1 <= level <= 0.9
            total += 1
    assert 0.78 <= inside / total <= 0.97


def test_a_fit_needs_a_measured_anchor() -> None:
    with pytest.raises(ValueError, match="df >= 1"):
        fit_run_noise([], 4)
    with pytest.raises(ValueError, match="df >= 1"):
        fit_run_noise([MeasuredNoise(1, 0.01, 0, 0)], 4)


def test_statements_name_the_source() -> None:
    assert NoiseSource("measured", 0.018, 4).statement("--run-cv") == (
        "noise 1.8% measured here (4 df)"
    )
    one = NoiseSource("borrowed", 0.02, 3, (64,), 1, 2, centre=0.024)
    assert one.statement("--run-cv") == "noise 2.4% borrowed from batch 64 (1 cell, 2 df)"
    three = NoiseSource("borrowed", 0.02, 9, (1, 16, 256), 6, 12)
    assert three.statement("--run-cv").startswith("noise 2.0% borrowed from batch 1, 16 and 256")
