"""Fit the calibration of P(eps-good) (``lib.calibration.LEADER_CALIBRATION`` and
``OTHER_CALIBRATION``) on simulated sweeps with a known truth.

    uv run python bench/fit_calibration.py [--trials 6000] [--workers 2]

The sweeps are those of ``bench/simulate_regret.py`` (its truth model and noise), drawn from
another seed than the simulator's, so that the simulator's calibration table is measured on
sweeps the fit never saw, with the noise CV log-uniform over :data:`CV_RANGE`, 3 and 5 runs per
cell and the tail models :data:`FIT_TAILS`. Two stages:

1. **Logistic maps.** For every anchor with a noise estimate, each K gives one observation: its
   model P(eps-good) (``p_model``: flat prior, before calibration), whether it is the anchor's
   leading K, the anchor's noise ratio, the leading K's peak
   (:func:`lib.calibration.leader_peak`), and whether the K is truly within the tie tolerance of
   the best. Two logistic regressions of that truth, every coefficient linear in
   ``log(noise ratio)`` between the knots (:func:`lib.calibration.knot_weights`), fitted by
   iteratively reweighted least squares: the other K on ``logit(p_model)``; the leading K on
   ``logit(p_model)`` and its peak, fitted on the leaders whose model P reaches
   :data:`LEADER_FIT_FROM_LOGIT` (where picks are resolved: fitted over every leader, the map
   bends to the many unsure ones and is over-confident at the top).
2. **The guard.** A map calibrated on average over the noise levels is not calibrated at each:
   the anchors of a noisy sweep that get resolved are those whose noise was under-estimated,
   and they look like the anchors of a quieter sweep. So per knot from :data:`GUARD_FROM` up,
   the leading K's map gets a lower intercept (:data:`SHIFTS`) and a lapse (:data:`LAPSES`:
   its P is at most ``1 - lapse``), the least that keeps, in every stratum of the true noise
   (:data:`STRATUM_EDGES` x runs per cell x tail model), the share of wrong picks among the
   anchors resolved at each of :data:`CHECKED_LEVELS` at most :data:`GUARD_TARGET` x
   ``(1 - level)``. Chosen knot by knot, from the noisiest, by coordinate descent: fewest wrong
   picks beyond the target first, then most anchors resolved.

Prints the two constants as Python, to paste into ``lib/calibration.py``. Same arguments, same
numbers.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulate_regret import (  # noqa: E402
    ANCHORS,
    CONFIDENCE_LEVELS,
    GATE_OFF,
    K_VALUES,
    RUN_COUNTS,
    TOLERANCE,
    draw_model,
    measure,
)

from lib.calibration import (  # noqa: E402
    CALIBRATION_CLIP,
    CALIBRATION_KNOTS,
    calibration_inputs,
    knot_weights,
)
from lib.confidence import ConfidenceSettings, assess  # noqa: E402
from lib.schedule import tune  # noqa: E402
from lib.settings import Settings  # noqa: E402

#: Another seed than the simulator's MASTER_SEED: fitted and checked on different sweeps.
#: (The fitted runs are independent, and the model is told so: ``server_cv=0.0``. The CLI's
#: assumed 1 % would keep every noise ratio at 1.4 or more, log 0.34: no data at the two lowest
#: knots, and maps fitted to a model the sweeps do not follow.)
FIT_SEED = 11_2026
#: Noise CVs of the fitted sweeps: log-uniform and wider than the simulator's 1-10 %, so that
#: an anchor whose noise happens to look lower (or higher) than it is meets the same mix of
#: true noise levels at the ends of the range as in the middle.
CV_RANGE = (0.005, 0.2)
#: The tail models fitted: the Student-t one is left out, as the check of a tail model the
#: calibration never saw.
FIT_TAILS = ("none", "low-runs")
#: Ridge on the coefficients: keeps a knot with few observations near its neighbours' fit.
RIDGE = 1e-3
#: The leading K's map is fitted on the leaders whose model P has at least this logit (P 0.92).
LEADER_FIT_FROM_LOGIT = 2.5
#: The guard's strata of the true noise CV (log-spaced), each with 3 and 5 runs and each tail
#: model: up to 12 %,
#: past the 10 % the simulator checks (noisier sweeps are fitted in stage 1 but not guarded:
#: holding the bound there too would cost the anchors at 2-5 % noise most of their picks).
STRATUM_EDGES = (0.005, 0.0085, 0.0145, 0.025, 0.042, 0.071, 0.12)
#: The confidence levels the guard checks: those of the simulator's calibration table.
CHECKED_LEVELS = CONFIDENCE_LEVELS
#: The guard keeps the wrong share at most this fraction of its bound on the fitted sweeps,
#: a margin for sweeps it never saw.
GUARD_TARGET = 0.8
#: The guard acts from this knot (log noise ratio 1: the standard error of a difference is
#: 2.7 times the tolerance); below it the stage-1 map is kept.
GUARD_FROM = 1.0
#: The intercept shifts and lapses the guard chooses from, per knot.
SHIFTS = tuple(-0.25 * i for i in range(17))
LAPSES = tuple(0.01 * i for i in range(11))


@dataclass(frozen=True)
class Decision:
    """What decides one anchor: the model P per K (every K feasible), the noise ratio, the
    leading K's peak, which K are truly eps-good, and the stratum of the true noise."""

    p_model: tuple[float, ...]
    ratio: float
    peak: float
    good: tuple[bool, ...]
    stratum: tuple[int, int, str] | None  # None past the last STRATUM_EDGES: not guarded


def observations(trial: int) -> tuple[list[tuple[Any, ...]], list[Decision]]:
    """One sweep: (leader, logit, knot weights, peak, truly eps-good) per K at every anchor
    (peak 0 for the other K), for the model P with every run and, where runs are flagged,
    without them; and the anchors as they are decided (without the flagged runs, where runs
    are flagged; not those whose pick depends on them, which stay unresolved)."""
    rng = np.random.default_rng([FIT_SEED, trial])
    cv = float(np.exp(rng.uniform(np.log(CV_RANGE[0]), np.log(CV_RANGE[1]))))
    runs = RUN_COUNTS[trial % len(RUN_COUNTS)]
    tail = FIT_TAILS[(trial // len(RUN_COUNTS)) % len(FIT_TAILS)]
    model = draw_model(rng)
    sweep = measure(model, cv, runs, tail, rng)
    report = assess(
        tune(sweep, Settings(max_objective_relative_mad=GATE_OFF)),
        ConfidenceSettings(server_cv=0.0),
    )
    index = int(np.searchsorted(STRATUM_EDGES, cv, side="right")) - 1
    stratum = (index, runs, tail) if index < len(STRATUM_EDGES) - 1 else None
    rows: list[tuple[Any, ...]] = []
    decisions = []
    anchors = {row["anchor"]: row for row in report.anchors.to_dicts()}
    for (anchor,), cells in report.cells.group_by("anchor", maintain_order=True):
        best = max(model.throughput(anchor, k) for k in K_VALUES)
        good = [bool(model.throughput(anchor, k) >= (1 - TOLERANCE) * best) for k in cells["k"]]
        row = anchors[anchor]
        versions = [("p_model", row["noise_ratio"], row["leader_peak"])]
        if row["noise_ratio_without_flagged"] is not None:
            versions.append(
                (
                    "p_model_without_flagged",
                    row["noise_ratio_without_flagged"],
                    row["leader_peak_without_flagged"],
                )
            )
        for column, ratio, peak in versions:
            if ratio is None or ratio == 0.0:
                continue
            leader, logit = calibration_inputs(cells[column].to_numpy())
            weights = knot_weights(ratio)
            rows += [
                (bool(leader[i]), float(logit[i]), weights, peak if leader[i] else 0.0, good[i])
                for i in range(len(good))
            ]
        column, ratio, peak = versions[-1]
        if ratio is not None and ratio > 0.0 and not row["depends_on_flagged"]:
            decisions.append(
                Decision(tuple(cells[column].to_list()), ratio, peak, tuple(good), stratum)
            )
    return rows, decisions


def fit(design: NDArray[np.float64], truth: NDArray[np.float64]) -> NDArray[np.float64]:
    """Logistic regression by iteratively reweighted least squares, with a small ridge."""
    coefficients = np.zeros(design.shape[1])
    for _ in range(100):
        predicted = 1.0 / (1.0 + np.exp(-(design @ coefficients)))
        weight = predicted * (1.0 - predicted) + 1e-12
        hessian = (design * weight[:, np.newaxis]).T @ design + RIDGE * np.eye(design.shape[1])
        step = np.linalg.solve(hessian, design.T @ (truth - predicted) - RIDGE * coefficients)
        coefficients += step
        if np.abs(step).max() < 1e-10:
            break
    return coefficients


def fit_maps(
    rows: list[tuple[Any, ...]],
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Stage 1: the leading K's (intercept, slope, peak slope) and the other K's (intercept,
    slope), one row per knot."""
    leader = np.array([row[0] for row in rows])
    logit = np.array([row[1] for row in rows])
    weights = np.stack([row[2] for row in rows])
    peak = np.array([row[3] for row in rows])
    good = np.array([row[4] for row in rows], dtype=float)
    chosen = leader & (logit >= LEADER_FIT_FROM_LOGIT)
    w = weights[chosen]
    lead = fit(np.hstack([w, w * logit[chosen, None], w * peak[chosen, None]]), good[chosen])
    w = weights[~leader]
    other = fit(np.hstack([w, w * logit[~leader, None]]), good[~leader])
    return lead.reshape(3, -1).T, other.reshape(2, -1).T


@dataclass(frozen=True)
class Stacked:
    """The decided anchors as arrays (one row per anchor), with the other K's calibrated P,
    which the guard does not change."""

    leader: NDArray[np.int64]
    leader_logit: NDArray[np.float64]
    weights: NDArray[np.float64]
    peak: NDArray[np.float64]
    others: NDArray[np.float64]  # calibrated P of the other K; -1 in the leader's column
    good: NDArray[np.bool_]
    stratum: NDArray[np.int64]
    strata: int


def stacked(decisions: list[Decision], other: NDArray[np.float64]) -> Stacked:
    """The decided anchors as :class:`Stacked`, the other K mapped by ``other`` (intercept and
    slope per knot) and rounded as ``lib.posterior`` rounds them; every sweep has the same K."""
    p_model = np.array([d.p_model for d in decisions])
    leader = np.argmax(p_model, axis=1)
    clipped = np.clip(p_model, CALIBRATION_CLIP, 1 - CALIBRATION_CLIP)
    logit = np.log(clipped / (1 - clipped))
    weights = np.stack([knot_weights(d.ratio) for d in decisions])
    mapped = weights @ other
    others = np.round(1 / (1 + np.exp(-(mapped[:, :1] + mapped[:, 1:2] * logit))), 4)
    rows = np.arange(len(decisions))
    others[rows, leader] = -1.0
    keys = sorted({d.stratum for d in decisions})
    return Stacked(
        leader=leader,
        leader_logit=logit[rows, leader],
        weights=weights,
        peak=np.array([d.peak for d in decisions]),
        others=others,
        good=np.array([d.good for d in decisions]),
        stratum=np.array([keys.index(d.stratum) for d in decisions]),
        strata=len(keys),
    )


def excess_and_resolved(anchors: Stacked, lead: NDArray[np.float64]) -> tuple[float, int]:
    """Wrong picks beyond GUARD_TARGET x the bound, summed over strata and levels, and the
    anchors resolved, summed over levels, with the leading K's map ``lead`` (intercept, slope,
    peak slope, lapse per knot), deciding as ``lib.posterior`` does (the smallest K reaching
    the level)."""
    mapped = anchors.weights @ lead
    score = mapped[:, 0] + mapped[:, 1] * anchors.leader_logit + mapped[:, 2] * anchors.peak
    p = anchors.others.copy()
    rows = np.arange(len(p))
    p[rows, anchors.leader] = np.round((1 - mapped[:, 3]) / (1 + np.exp(-score)), 4)
    excess = 0.0
    resolved_total = 0
    for level in CHECKED_LEVELS:
        reaches = p >= level
        resolved = reaches.any(axis=1)
        pick = np.argmax(reaches, axis=1)
        wrong = resolved & ~anchors.good[rows, pick]
        count = np.bincount(anchors.stratum[resolved], minlength=anchors.strata)
        bad = np.bincount(anchors.stratum[wrong], minlength=anchors.strata)
        excess += float(np.maximum(bad - GUARD_TARGET * (1 - level) * count, 0).sum())
        resolved_total += int(resolved.sum())
    return excess, resolved_total


def guard(anchors: Stacked, lead: NDArray[np.float64]) -> NDArray[np.float64]:
    """Stage 2: per knot from GUARD_FROM, the intercept shift and lapse (see the module doc),
    added to the stage-1 leading map; returns (intercept, slope, peak slope, lapse) per knot."""
    current = np.hstack([lead, np.zeros((len(lead), 1))])
    guarded = [i for i, knot in enumerate(CALIBRATION_KNOTS) if knot >= GUARD_FROM]
    base = current[:, 0].copy()
    for _ in range(3):
        changed = False
        for knot in reversed(guarded):
            best: tuple[float, int] | None = None
            choice = (current[knot, 0], current[knot, 3])
            for shift, lapse in itertools.product(SHIFTS, LAPSES):
                trial = current.copy()
                trial[knot, 0] = base[knot] + shift
                trial[knot, 3] = lapse
                excess, resolved = excess_and_resolved(anchors, trial)
                if best is None or (excess, -resolved) < (best[0], -best[1]):
                    best = (excess, resolved)
                    choice = (trial[knot, 0], lapse)
            changed |= (current[knot, 0], current[knot, 3]) != choice
            current[knot, 0], current[knot, 3] = choice
        if not changed:
            break
    return current


def _tuples(table: NDArray[np.float64]) -> str:
    """One Python tuple per knot."""
    return ", ".join("(" + ", ".join(f"{value:.4f}" for value in row) + ")" for row in table)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--trials", type=int, default=6000, help="simulated sweeps")
    parser.add_argument("--workers", type=int, default=2)
    arguments = parser.parse_args()
    with multiprocessing.get_context("fork").Pool(arguments.workers) as pool:
        parts = pool.map(observations, range(arguments.trials), chunksize=50)
    rows = [row for part, _ in parts for row in part]
    decisions = [d for _, part in parts for d in part if d.stratum is not None]
    print(f"# {arguments.trials} sweeps ({len(ANCHORS)} anchors each), {len(rows)} observations")
    lead, other = fit_maps(rows)
    anchors = stacked(decisions, other)
    before = excess_and_resolved(anchors, np.hstack([lead, np.zeros((len(lead), 1))]))
    guarded = guard(anchors, lead)
    after = excess_and_resolved(anchors, guarded)
    print(f"# wrong picks beyond the target / resolved: stage 1 {before}, guarded {after}")
    print(
        f"LEADER_CALIBRATION: tuple[tuple[float, float, float, float], ...] = ({_tuples(guarded)})"
    )
    print(f"OTHER_CALIBRATION: tuple[tuple[float, float], ...] = ({_tuples(other)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
