"""Calibration of P(eps-good): the flat-prior model's probabilities corrected by simulation
(``docs/confidence.md``, "Calibration").

The flat prior ignores how close K usually are and that throughput changes smoothly with K, so
at high noise the model's P, above all the leading K's, is over-confident, and most of all when
the leading K is a lone spike above both neighbours (:func:`leader_peak`). :func:`calibrated`
maps the model's P through a logistic fit whose constants are interpolated at the anchor's
:func:`noise_ratio` over :data:`CALIBRATION_KNOTS`; ``bench/fit_calibration.py`` fits them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "CALIBRATION_CLIP",
    "CALIBRATION_KNOTS",
    "LEADER_CALIBRATION",
    "LEAN_LAPSE",
    "LEAN_LAPSE_RAMP",
    "OTHER_CALIBRATION",
    "PEAK_CAP",
    "calibrated",
    "calibration_inputs",
    "knot_weights",
    "leader_peak",
    "lean_lapse",
    "noise_ratio",
]

#: Noise ratios (natural log of the standard error of a difference of two cell means over the
#: tie tolerance) at which the calibration is fitted: linear in between, flat outside.
CALIBRATION_KNOTS = (-1.0, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5)
#: A leading K's peak (:func:`leader_peak`) counts up to this many standard errors. Noise
#: makes spikes of a few; one far beyond is a real shape (the sharp peaks of a MoE sweep, as in
#: data/sample_sweeps/moe-non-monotone), which the simulated curves never have: uncapped, the
#: fitted discount would call such a K, far ahead of every other, almost surely not eps-good.
PEAK_CAP = 12.0
#: Model probabilities are clipped to [this, 1 - this] before their logit: the resolution of
#: the default 10,000 draws, so that a P of exactly 0 or 1 from a noisy anchor stays finite.
CALIBRATION_CLIP = 1e-4
#: Per knot, for the anchor's leading K (the highest model P: the winner's curse makes it
#: over-confident), ``(intercept, slope, peak_slope, lapse)`` of
#: ``calibrated = (1 - lapse) * expit(intercept + slope * logit(model) + peak_slope * peak)``
#: (``peak`` from :func:`leader_peak`; ``lapse``: the share of leaders wrong however sure the
#: model is), and for the other K ``(intercept, slope)`` of
#: ``calibrated = expit(intercept + slope * logit(model))``. Fitted by
#: ``uv run python bench/fit_calibration.py`` (docs/confidence.md, "Calibration").
LEADER_CALIBRATION: tuple[tuple[float, float, float, float], ...] = (
    (1.7710, 0.6651, -0.1375, 0.0000),
    (2.2745, 0.6215, -0.3151, 0.0000),
    (2.1041, 0.5092, -0.3977, 0.0000),
    (1.8867, 0.5072, -0.4275, 0.0400),
    (0.5240, 0.7099, -0.9288, 0.0000),
    (1.4010, 0.3742, -0.6701, 0.0000),
    (0.4909, 0.9466, -1.3343, 0.0000),
)
OTHER_CALIBRATION: tuple[tuple[float, float], ...] = (
    (-0.0815, 0.8339),
    (0.1967, 0.8830),
    (0.1476, 0.7872),
    (0.2748, 0.8290),
    (0.0734, 0.6897),
    (0.1833, 0.6582),
    (0.2120, 0.6888),
)


#: An anchor whose cells have one run each (its noise borrowed or assumed: docs/confidence.md,
#: "Lean sweeps") keeps its leading K's calibrated P at most ``1 - lean_lapse(ratio)``: with one
#: run per K the leader's lead is all noise luck the flat prior cannot see, and at high noise
#: among eight close K the map alone let 2 of 5 picks resolved at 0.95 be wrong (seed 40_2026).
#: The lapse ramps linearly in log noise ratio between the two ends of :data:`LEAN_LAPSE_RAMP`,
#: from 0 to :data:`LEAN_LAPSE`: at full lapse a single-run anchor cannot reach 0.95. 0.03 and
#: 0.05 both hold every row of bench/simulate_lean.py at seed 41_2026, but 0.03 still let one
#: wrong pick resolve at 0.95 at 40_2026 (a model P of 1.0); checked at 42_2026, the published
#: table's (docs/confidence.md, "Lean sweeps").
LEAN_LAPSE = 0.05
LEAN_LAPSE_RAMP = (1.0, 1.75)


def lean_lapse(ratio: float) -> float:
    """The share a single-run anchor's leading K keeps back (:data:`LEAN_LAPSE`), from its
    :func:`noise_ratio`: 0 up to ``exp(1.0)`` (2.7 standard errors of a difference per
    tolerance), :data:`LEAN_LAPSE` from ``exp(1.75)`` (5.8) on, linear in between.

    >>> lean_lapse(2.0), lean_lapse(math.exp(1.375)), lean_lapse(10.0)
    (0.0, 0.025, 0.05)
    """
    if ratio <= 0.0 or not math.isfinite(ratio):
        return 0.0 if ratio <= 0.0 else LEAN_LAPSE
    low, high = LEAN_LAPSE_RAMP
    share = min(max((math.log(ratio) - low) / (high - low), 0.0), 1.0)
    return round(LEAN_LAPSE * share, 12)


def noise_ratio(
    log_sd: float, counts: NDArray[np.number[Any]], margin: float, server_variance: float = 0.0
) -> float:
    """How noisy an anchor is against the tie tolerance: the standard error of a difference of
    two cell means, ``sqrt(2 * (log_sd^2 / mean(counts) + server_variance))``, over
    ``-margin = -log(1 - eps)`` (``server_variance``: the assumed server offset's, added to
    every cell mean where there are no replicas).

    0 without noise; infinite with a zero tolerance (then any noise is large).
    """
    variance = log_sd**2 / float(np.mean(counts)) + server_variance
    if variance == 0.0:
        return 0.0
    if margin == 0.0:
        return math.inf
    return math.sqrt(2.0 * variance) / -margin


def leader_peak(
    ks: NDArray[np.int64],
    counts: NDArray[np.number[Any]],
    means: NDArray[np.float64],
    log_sd: float,
    model: NDArray[np.float64],
    server_variance: float = 0.0,
) -> float:
    """How far the leading K (the highest model P, as in :func:`calibration_inputs`) stands
    above the straight line through its two neighbouring K, in standard errors of that
    difference, at most :data:`PEAK_CAP`; 0 when it does not (or is on it), when it is the
    smallest or the largest K, and without noise.

    Throughput changes smoothly with K (more draft tokens: more accepted, more to verify), so a
    K far above both neighbours is more likely noise than a peak. This is the shape the flat
    prior cannot see: at 10 % noise most confidently wrong picks were such lone spikes (a K=3
    leading where K=4 is truly better), docs/confidence.md, "Calibration".
    """
    leader = int(np.argmax(model))
    if (log_sd == 0.0 and server_variance == 0.0) or leader == 0 or leader == len(ks) - 1:
        return 0.0
    low, high = float(ks[leader - 1]), float(ks[leader + 1])
    # The line through the neighbours at the leader's K (unequal K steps weigh the nearer more).
    share = (float(ks[leader]) - low) / (high - low)
    line = (1.0 - share) * means[leader - 1] + share * means[leader + 1]
    variance = log_sd**2 * (
        1.0 / counts[leader]
        + (1.0 - share) ** 2 / counts[leader - 1]
        + share**2 / counts[leader + 1]
    ) + server_variance * (1.0 + (1.0 - share) ** 2 + share**2)
    return min(max(float(means[leader] - line) / math.sqrt(variance), 0.0), PEAK_CAP)


def knot_weights(ratio: float) -> NDArray[np.float64]:
    """Linear-interpolation weights of ``log(ratio)`` over :data:`CALIBRATION_KNOTS` (summing
    to 1; the nearest end knot gets all the weight outside them)."""
    knots = np.asarray(CALIBRATION_KNOTS)
    where = min(max(math.log(ratio), knots[0]), knots[-1])
    right = int(min(np.searchsorted(knots, where, side="right"), len(knots) - 1))
    weights = np.zeros(len(knots))
    share = (where - knots[right - 1]) / (knots[right] - knots[right - 1])
    weights[right - 1] = 1.0 - share
    weights[right] += share
    return weights


def calibration_inputs(model: NDArray[np.float64]) -> tuple[NDArray[np.bool_], NDArray[np.float64]]:
    """The anchor's leading K (the highest model P; ties to the smaller K, the first) and every
    K's logit of its model P, clipped to :data:`CALIBRATION_CLIP`."""
    leader = np.zeros(len(model), dtype=bool)
    leader[int(np.argmax(model))] = True
    clipped = np.clip(model, CALIBRATION_CLIP, 1.0 - CALIBRATION_CLIP)
    return leader, np.log(clipped / (1.0 - clipped))


def calibrated(model: NDArray[np.float64], ratio: float, peak: float) -> NDArray[np.float64]:
    """P(eps-good) calibrated by simulation, with the constants interpolated at the anchor's
    :func:`noise_ratio`: ``(1 - lapse) * expit(a + b * logit(model) + c * peak)`` for its
    leading K (``peak`` from :func:`leader_peak`, ``c`` <= 0: a lone spike is doubted more the
    noisier the anchor), ``expit(a + b * logit(model))`` for the others
    (:data:`LEADER_CALIBRATION`, :data:`OTHER_CALIBRATION`).

    Without noise (``ratio`` 0) the model's P is exact (0 or 1) and kept as it is.
    """
    if ratio == 0.0:
        return model.copy()
    leader, logit = calibration_inputs(model)
    weights = knot_weights(ratio)
    intercept, slope, peak_slope, lapse = weights @ np.asarray(LEADER_CALIBRATION)
    other_intercept, other_slope = weights @ np.asarray(OTHER_CALIBRATION)
    score = np.where(
        leader,
        intercept + slope * logit + peak_slope * peak,
        other_intercept + other_slope * logit,
    )
    result: NDArray[np.float64] = np.where(leader, 1.0 - lapse, 1.0) / (1.0 + np.exp(-score))
    return result
