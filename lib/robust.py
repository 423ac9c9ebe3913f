"""Robust statistics for a handful of benchmark runs, as Polars expressions.

Sweeps usually hold 3 runs per (anchor, K). These are the seed policy's statistics
(vLLM PR #49163). They are Polars expressions so that one group-by computes every
(anchor, K) cell at once: the app re-runs the policy on every slider move.
"""

from __future__ import annotations

import polars as pl

__all__ = [
    "NORMAL_MAD_SCALE",
    "conservative_score",
    "median",
    "median_abs_deviation",
    "relative_mad",
]

#: Consistency constant that turns an unscaled MAD into a Normal sigma estimate.
NORMAL_MAD_SCALE = 1.4826


def median(column: str) -> pl.Expr:
    """Median of ``column`` within each group; the mean of the two middle values for an even
    count; null for a group with no non-null value."""
    return pl.col(column).median()


def median_abs_deviation(column: str) -> pl.Expr:
    """Unscaled median absolute deviation: ``median(|x - median(x)|)`` within each group.

    This is ``scipy.stats.median_abs_deviation(x, scale=1.0)`` (note: scipy's ``scale=1.4826``
    *divides* by 1.4826; the Normal-consistent version is ``scale="normal"``). With 3 runs it
    equals the smaller of the two gaps around the middle run, so one far-off run is invisible;
    with 2 runs it is half the range; with 1 run it is 0.

    >>> runs = pl.DataFrame({"k": [0, 0, 0, 3, 3, 3], "tps": [100.0, 100.0, 50.0, 9, 10, 12]})
    >>> runs.group_by("k", maintain_order=True).agg(median_abs_deviation("tps")).rows()
    [(0, 0.0), (3, 1.0)]
    """
    return (pl.col(column) - pl.col(column).median()).abs().median()


def relative_mad(mad: pl.Expr, center: pl.Expr) -> pl.Expr:
    """MAD relative to the median, ``mad / |center|``.

    Edge case: a zero median (zero goodput, say) would give 0/0 = NaN, which passes any
    ``relative_mad > threshold`` gate silently. Instead a zero median with zero MAD (every run
    exactly 0) is perfectly stable (0.0), and a zero median with a non-zero MAD is infinitely
    noisy (``inf``), so any gate rejects it. A group with no values (every run excluded) has
    no spread to judge: null, so the noise gate does not blame it for runs it never had.

    >>> cells = pl.DataFrame({"mad": [5.0, 0.0, 2.0, None], "median": [-100.0, 0.0, 0.0, 1.0]})
    >>> cells.select(relative_mad(pl.col("mad"), pl.col("median")).alias("r"))["r"].to_list()
    [0.05, 0.0, inf, None]
    """
    return (
        pl.when(center.is_null() | mad.is_null())
        .then(pl.lit(None, pl.Float64))
        .when(center != 0.0)
        .then(mad / center.abs())
        .when(mad == 0.0)
        .then(pl.lit(0.0))
        .otherwise(pl.lit(float("inf")))
    )


def conservative_score(center: pl.Expr, mad: pl.Expr, penalty: float, maximize: bool) -> pl.Expr:
    """Median moved against the objective by ``penalty`` robust sigmas (``1.4826 * MAD``).

    Maximising: ``max(center - penalty * 1.4826 * mad, 0)`` (a throughput cannot be negative).
    Minimising: ``center + penalty * 1.4826 * mad``. A penalty of 0 ranks by the median alone.

    >>> cells = pl.DataFrame({"median": [100.0, 1.0], "mad": [2.0, 1.0]})
    >>> score = conservative_score(pl.col("median"), pl.col("mad"), 1.0, True)
    >>> cells.select(score.alias("s"))["s"].to_list()  # 100 - 1.4826 x 2; 1 - 1.4826 below 0
    [97.0348, 0.0]
    """
    spread = penalty * NORMAL_MAD_SCALE * mad
    if maximize:
        return pl.max_horizontal(center - spread, pl.lit(0.0))
    return center + spread
