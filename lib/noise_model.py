"""Where an anchor's run noise comes from when its cells have one run each (lean sweeps,
``docs/confidence.md``, "Lean sweeps"): measured at the anchor, borrowed from the sweep's
anchors that have replicate runs through a noise model over batch size, or assumed
(``--run-cv``).

The model: ``log sigma^2`` is linear in ``log batch size``, fitted to the anchors whose noise
was measured (each a pooled sample variance ``s_i^2`` with ``df_i`` degrees of freedom). The
log of a sample variance is biased and noisy in a known way (``E log(s^2 / sigma^2) =
psi(df/2) - log(df/2)``, ``var = psi1(df/2)``, digamma and trigamma), so the fit is weighted
least squares on the bias-corrected logs with those variances, a flat prior on the intercept
and a normal prior on the slope (:data:`SLOPE_PRIOR_SD`: one anchor alone borrows a level, not
a trend, and its uncertainty grows with the distance in batch size). Where more anchors than
parameters disagree beyond their sampling noise, the variance is inflated by the excess.

The prediction's uncertainty is carried into the posterior as a scaled-inverse-chi-square:
the one whose ``log sigma^2`` has the predicted mean and variance (``df`` from
``psi1(df/2) = variance``, rounded down, so never surer than the fit), which the posterior
draws exactly as it draws a measured noise (``s^2 df / chi2_df``). Why not a conservative
upper quantile used as known: it throws the fit's uncertainty away where it is small (every
anchor pays the quantile's margin) and keeps no tail where it is large; the inverse-chi-square
widens each K's posterior by as much as the fit is unsure at that batch size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from lib.numbers import percent_text

__all__ = [
    "LEAN_DESIGN",
    "SLOPE_PRIOR_SD",
    "MeasuredNoise",
    "NoiseSource",
    "digamma",
    "fit_run_noise",
    "trigamma",
]

#: Prior standard deviation of the slope of ``log sigma^2`` per unit of ``log batch size``:
#: 0.5 lets the noise change x4 (``log sigma`` by ``log 4``) from batch 1 to 256 at one
#: standard deviation. Real sweeps: 1.4-1.7 % at batch 1-8 and 0.6-0.8 % at 64-128 on
#: qwen3-32b-fp8-eagle3-tp2 (a slope near -0.4), 8.5-24 % on real-cpu-tiny-ngram.
SLOPE_PRIOR_SD = 0.5
#: How the verdict and every assumed anchor say to replace ``--run-cv`` by a measurement.
LEAN_DESIGN = "the noise probe of `tune-spec-k plan --design lean`"
#: Largest degrees of freedom given to a borrowed noise (a fit that sure is as good as known).
MAX_BORROWED_DF = 1000

Source = Literal["measured", "borrowed", "assumed"]


@dataclass(frozen=True)
class MeasuredNoise:
    """One anchor's measured run noise: its pooled log-scale sd, degrees of freedom and the
    cells with two or more runs behind it."""

    anchor: int
    log_sd: float
    df: int
    cells: int


@dataclass(frozen=True)
class NoiseSource:
    """An anchor's run noise and where it came from. ``df``: degrees of freedom of the
    posterior's scaled-inverse-chi-square (0: known, as an assumption is). ``from_anchors``,
    ``cells`` and ``measured_df``: what a borrowed noise was fitted to."""

    source: Source
    log_sd: float  # the posterior's scale s (sigma^2 = s^2 df / chi2_df; sigma = s if known)
    df: int
    from_anchors: tuple[int, ...] = ()
    cells: int = 0
    measured_df: int = 0
    #: The noise stated (log scale): ``exp(E log sigma)``; ``log_sd`` where None.
    centre: float | None = None

    @property
    def cv(self) -> float:
        """The noise stated, as a relative sd (the log-normal's)."""
        centre = self.log_sd if self.centre is None else self.centre
        return math.sqrt(math.expm1(centre**2))

    def statement(self, run_cv_flag: str) -> str:
        """What the anchor line says, e.g. ``noise 1.8% measured here (4 df)``.

        >>> NoiseSource("borrowed", 0.024, 9, (8, 64), 4, 8).statement("--run-cv")
        'noise 2.4% borrowed from batch 8 and 64 (4 cells, 8 df)'
        >>> NoiseSource("assumed", 0.02, 0).statement("--run-cv")[:48]
        'no replicate runs: assumes runs vary by 2.0% (--'
        """
        shown = percent_text(self.cv * 100)
        if self.source == "measured":
            return f"noise {shown} measured here ({self.df} df)"
        if self.source == "borrowed":
            where = _and_list(self.from_anchors)
            return (
                f"noise {shown} borrowed from batch {where}"
                f" ({self.cells} cell{'s' if self.cells != 1 else ''}, {self.measured_df} df)"
            )
        return (
            f"no replicate runs: assumes runs vary by {shown} ({run_cv_flag}; measure it with"
            f" {LEAN_DESIGN})"
        )


def fit_run_noise(measured: Sequence[MeasuredNoise], anchor: int) -> NoiseSource:
    """The run noise at ``anchor`` borrowed from the ``measured`` anchors (at least one, each
    with ``df >= 1``), as the module doc describes: its centre ``exp(mean log sigma)`` and a
    scaled-inverse-chi-square of ``df`` degrees of freedom matching the fit's uncertainty
    there (at least 1, at most :data:`MAX_BORROWED_DF`)."""
    if not measured or any(m.df < 1 for m in measured):
        raise ValueError("the noise model needs anchors with measured noise (df >= 1)")
    x = np.log([float(m.anchor) for m in measured])
    df = np.array([float(m.df) for m in measured])
    half = df / 2.0
    # Bias-corrected log variances and their sampling variances.
    logs = np.array([2.0 * math.log(max(m.log_sd, 1e-12)) for m in measured])
    y = logs - np.array([digamma(h) - math.log(h) for h in half])
    weights = 1.0 / np.array([trigamma(h) for h in half])
    centre = float(np.average(x, weights=weights))
    design = np.column_stack([np.ones_like(x), x - centre])
    precision = design.T @ (design * weights[:, None])
    precision[1, 1] += 1.0 / SLOPE_PRIOR_SD**2
    covariance = np.linalg.inv(precision)
    beta = covariance @ (design.T @ (weights * y))
    if len(measured) > 2:
        residual = y - design @ beta
        dispersion = float(np.sum(weights * residual**2)) / (len(measured) - 2)
        covariance = covariance * max(dispersion, 1.0)
    at = np.array([1.0, math.log(anchor) - centre])
    mean = float(at @ beta)
    variance = float(at @ covariance @ at)
    borrowed_df = max(min(_df_of_log_variance(variance), MAX_BORROWED_DF), 1)
    # s^2 of the scaled-inverse-chi-square whose E[log sigma^2] is the fitted mean.
    h = borrowed_df / 2.0
    log_s2 = mean - math.log(h) + digamma(h)
    return NoiseSource(
        "borrowed",
        math.exp(log_s2 / 2.0),
        borrowed_df,
        tuple(sorted(m.anchor for m in measured)),
        sum(m.cells for m in measured),
        int(df.sum()),
        centre=math.exp(mean / 2.0),
    )


def _df_of_log_variance(variance: float) -> int:
    """The degrees of freedom whose ``log(chi2_df / df)`` has this variance
    (``psi1(df/2) = variance``), rounded down; bisection on the log scale."""
    if variance <= 0.0:
        return MAX_BORROWED_DF
    low, high = 1e-3, 1e7
    for _ in range(200):
        middle = math.sqrt(low * high)
        if trigamma(middle / 2.0) > variance:
            low = middle
        else:
            high = middle
    return math.floor(low)


def digamma(x: float) -> float:
    """psi(x) for x > 0: the recurrence up to 10, then the asymptotic series (error < 1e-10).

    >>> round(digamma(1.0), 8)  # -Euler's gamma
    -0.57721566
    """
    total = 0.0
    while x < 10.0:
        total -= 1.0 / x
        x += 1.0
    inverse = 1.0 / (x * x)
    series = inverse * (1 / 12 - inverse * (1 / 120 - inverse * (1 / 252 - inverse / 240)))
    return total + math.log(x) - 0.5 / x - series


def trigamma(x: float) -> float:
    """psi1(x) for x > 0: the recurrence up to 10, then the asymptotic series (error < 1e-10).

    >>> round(trigamma(1.0), 8)  # pi^2 / 6
    1.64493407
    """
    total = 0.0
    while x < 10.0:
        total += 1.0 / (x * x)
        x += 1.0
    inverse = 1.0 / (x * x)
    series = 1.0 / x + inverse / 2.0
    series += inverse / x * (1 / 6 - inverse * (1 / 30 - inverse * (1 / 42 - inverse / 30)))
    return total + series


def _and_list(anchors: Sequence[int]) -> str:
    """``8``, ``8 and 64``, ``1, 8 and 64``."""
    names = [str(a) for a in anchors]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
