"""The seed's robust statistics: median, unscaled MAD, relative MAD, conservative score."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from scipy.stats import median_abs_deviation

from lib import robust


def _median(values: list[float]) -> float | None:
    return pl.DataFrame({"x": values}, schema={"x": pl.Float64}).select(robust.median("x")).item()


def _mad(values: list[float]) -> float | None:
    frame = pl.DataFrame({"x": values}, schema={"x": pl.Float64})
    return frame.select(robust.median_abs_deviation("x")).item()


def _relative_mad(mad: float, center: float) -> float:
    return pl.select(robust.relative_mad(pl.lit(mad), pl.lit(center))).item()


def _conservative(center: float, mad: float, penalty: float, maximize: bool) -> float:
    expr = robust.conservative_score(pl.lit(center), pl.lit(mad), penalty, maximize)
    return pl.select(expr).item()


def test_median_odd_even_and_empty() -> None:
    assert _median([3.0, 1.0, 2.0]) == 2.0
    # even count: mean of the two middle values, (2 + 3) / 2
    assert _median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert _median([]) is None


def test_mad_of_one_run_is_zero() -> None:
    assert _mad([123.0]) == 0.0


def test_mad_of_two_runs_is_half_the_range() -> None:
    # median 15, deviations [5, 5] -> 5 = (20 - 10) / 2
    assert _mad([10.0, 20.0]) == 5.0


def test_mad_of_three_runs_is_the_smaller_gap_around_the_middle() -> None:
    # median 10, deviations [1, 0, 4] -> median 1: the far run (14) is invisible
    assert _mad([9.0, 10.0, 14.0]) == 1.0


def test_mad_ignores_one_far_run_when_two_agree() -> None:
    # [100, 100, 50]: median 100, deviations [0, 0, 50] -> median 0
    assert _mad([100.0, 100.0, 50.0]) == 0.0


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7, 20])
def test_mad_matches_scipy_unscaled(size: int) -> None:
    generator = np.random.default_rng(size)
    values = generator.normal(1000.0, 50.0, size).tolist()
    expected = median_abs_deviation(values, scale=1.0)
    assert _mad(values) == pytest.approx(expected, rel=1e-12)


def test_relative_mad_is_mad_over_absolute_median() -> None:
    assert _relative_mad(5.0, 100.0) == pytest.approx(0.05)
    # a negative median still gives a positive relative spread
    assert _relative_mad(5.0, -100.0) == pytest.approx(0.05)


def test_relative_mad_of_all_zero_runs_is_stable() -> None:
    assert _relative_mad(0.0, 0.0) == 0.0


def test_relative_mad_with_zero_median_and_spread_is_infinite() -> None:
    # 0/0-style NaN would slip through a "> threshold" gate; inf cannot
    assert _relative_mad(1.0, 0.0) == math.inf


def test_relative_mad_per_group_with_zero_median() -> None:
    frame = pl.DataFrame({"g": [1, 1, 1, 2, 2, 2], "x": [0.0, 0.0, 0.0, 0.0, 0.0, 3.0]})
    result = (
        frame.group_by("g")
        .agg(robust.median("x").alias("m"), robust.median_abs_deviation("x").alias("d"))
        .with_columns(robust.relative_mad(pl.col("d"), pl.col("m")).alias("r"))
        .sort("g")
    )
    # group 2: median 0, deviations [0, 0, 3] -> MAD 0 -> stable, not inf
    assert result["r"].to_list() == [0.0, 0.0]


def test_conservative_score_maximising_subtracts_robust_sigma() -> None:
    # 100 - 1.0 * 1.4826 * 2 = 97.0348
    assert _conservative(100.0, 2.0, 1.0, maximize=True) == pytest.approx(97.0348)


def test_conservative_score_minimising_adds_robust_sigma() -> None:
    # 10 + 2.0 * 1.4826 * 0.5 = 11.4826
    assert _conservative(10.0, 0.5, 2.0, maximize=False) == pytest.approx(11.4826)


def test_conservative_score_clamps_at_zero_when_maximising() -> None:
    # 1 - 1.4826 * 10 < 0 -> 0
    assert _conservative(1.0, 10.0, 1.0, maximize=True) == 0.0


def test_conservative_score_with_zero_penalty_is_the_median() -> None:
    assert _conservative(100.0, 7.0, 0.0, maximize=True) == 100.0
    assert _conservative(10.0, 7.0, 0.0, maximize=False) == 10.0


def test_normal_mad_scale_is_the_seed_constant() -> None:
    assert robust.NORMAL_MAD_SCALE == 1.4826
