"""Fit the calibration of P(eps-good) (``lib.confidence.LEADER_CALIBRATION`` and
``OTHER_CALIBRATION``) on simulated sweeps with a known truth.

    uv run python bench/fit_calibration.py [--trials 150] [--workers 2]

The sweeps are those of ``bench/simulate_regret.py`` (its truth model and noise), drawn from
another seed than the simulator's, so that the simulator's calibration table is measured on
sweeps the fit never saw: every noise CV (1, 2, 5, 10 %), 3 and 5 runs per cell and every
tail model, ``--trials`` sweeps each. For every anchor with a noise estimate, each K gives one
observation: its model P(eps-good) (``p_model``: flat prior, before calibration), whether it is
the anchor's leading K, the anchor's noise ratio, and whether the K is truly within the tie
tolerance of the best. Two logistic regressions (leading K, other K) of that truth on
``logit(p_model)``, with intercept and slope linear in ``log(noise ratio)`` between the knots
(:func:`lib.confidence.knot_weights`), fitted by iteratively reweighted least squares.

Prints the two constants as Python, to paste into ``lib/confidence.py``. Same arguments, same
numbers.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulate_regret import (  # noqa: E402
    ANCHORS,
    GATE_OFF,
    K_VALUES,
    RUN_COUNTS,
    TOLERANCE,
    draw_model,
    measure,
)

from lib.confidence import ConfidenceSettings, assess, calibration_inputs, knot_weights  # noqa: E402
from lib.schedule import tune  # noqa: E402
from lib.settings import Settings  # noqa: E402

#: Another seed than the simulator's MASTER_SEED: fitted and checked on different sweeps.
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


def observations(trial: int) -> list[tuple[Any, ...]]:
    """(leader, logit, knot weights, truly eps-good) per K at every anchor of one sweep, for
    the model P with every run and, where runs are flagged, without them (what decides)."""
    rng = np.random.default_rng([FIT_SEED, trial])
    cv = float(np.exp(rng.uniform(np.log(CV_RANGE[0]), np.log(CV_RANGE[1]))))
    runs = RUN_COUNTS[trial % len(RUN_COUNTS)]
    tail = FIT_TAILS[(trial // len(RUN_COUNTS)) % len(FIT_TAILS)]
    model = draw_model(rng)
    sweep = measure(model, cv, runs, tail, rng)
    report = assess(
        tune(sweep, Settings(max_objective_relative_mad=GATE_OFF)), ConfidenceSettings()
    )
    rows = []
    anchors = {row["anchor"]: row for row in report.anchors.to_dicts()}
    for (anchor,), cells in report.cells.group_by("anchor", maintain_order=True):
        best = max(model.throughput(anchor, k) for k in K_VALUES)
        good = [model.throughput(anchor, k) >= (1 - TOLERANCE) * best for k in cells["k"]]
        for column, ratio in (
            ("p_model", anchors[anchor]["noise_ratio"]),
            ("p_model_without_flagged", anchors[anchor]["noise_ratio_without_flagged"]),
        ):
            if ratio is None or ratio == 0.0:
                continue
            feasible = ~cells["infeasible"].to_numpy()
            leader, logit = calibration_inputs(cells[column].to_numpy()[feasible])
            weights = knot_weights(ratio)
            truth = np.asarray(good)[feasible]
            rows += [
                (bool(leader[i]), float(logit[i]), weights, bool(truth[i]))
                for i in range(len(truth))
            ]
    return rows


def fit(design: np.ndarray, truth: np.ndarray) -> np.ndarray:
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--trials", type=int, default=6000, help="simulated sweeps")
    parser.add_argument("--workers", type=int, default=2)
    arguments = parser.parse_args()
    with multiprocessing.get_context("fork").Pool(arguments.workers) as pool:
        parts = pool.map(observations, range(arguments.trials), chunksize=50)
    rows = [row for part in parts for row in part]
    frame = pl.DataFrame(rows, schema=["leader", "logit", "weights", "good"], orient="row")
    print(f"# {arguments.trials} sweeps ({len(ANCHORS)} anchors each), {frame.height} observations")
    for name, part in (
        ("LEADER_CALIBRATION", frame.filter(pl.col("leader"))),
        ("OTHER_CALIBRATION", frame.filter(~pl.col("leader"))),
    ):
        weights = np.stack(part["weights"].to_numpy())
        design = np.hstack([weights, weights * part["logit"].to_numpy()[:, np.newaxis]])
        coefficients = fit(design, part["good"].to_numpy().astype(float))
        knots = len(weights[0])
        pairs = ", ".join(
            f"({coefficients[i]:.4f}, {coefficients[knots + i]:.4f})" for i in range(knots)
        )
        print(f"{name}: tuple[tuple[float, float], ...] = ({pairs})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
