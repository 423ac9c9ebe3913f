"""Shared by the tests of the confidence model (test_confidence, test_posterior,
test_calibration, test_policy): the worked example of docs/confidence.md as sweeps, and the
report of a written sweep with its per-anchor and per-K views."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
from paths import REPO
from sweep_builder import WORKED_EXAMPLE, write_grid

from lib.confidence import ConfidenceReport, ConfidenceSettings, assess
from lib.schedule import TuningResult, tune
from lib.settings import Settings
from lib.sweeps import load_experiment

NOISY_SAMPLE = REPO / "data" / "sample_sweeps" / "noisy"

# decision-statistics.md, worked example (3 runs, maximise tok/s, tie 1 %), per anchor: K -> runs.
WORKED_BATCH_1 = {k: runs for (anchor, k), runs in WORKED_EXAMPLE.items() if anchor == 1}
WORKED_BATCH_64 = {k: runs for (anchor, k), runs in WORKED_EXAMPLE.items() if anchor == 64}


def cells_of(by_anchor: dict[int, dict[int, list[float]]]) -> dict[tuple[int, int], list[float]]:
    return {(a, k): runs for a, ks in by_anchor.items() for k, runs in ks.items()}


def worked(root: Path, **options: Any) -> Path:
    return write_grid(root, WORKED_EXAMPLE, **options)


def tuned(root: Path, **settings: Any) -> TuningResult:
    return tune(load_experiment(root), Settings(**settings))


#: A single-run sweep (issue 40, docs/confidence.md "Lean sweeps"): at batch 1 K=3 leads K=2
#: by 20 % (and K is monotone: no peak to doubt), at batch 64 K=1, K=2 and K=3 are within 1 %.
LEAN = {
    (1, 0): [100.0],
    (1, 1): [130.0],
    (1, 2): [150.0],
    (1, 3): [180.0],
    (64, 0): [1000.0],
    (64, 1): [1500.0],
    (64, 2): [1510.0],
    (64, 3): [1495.0],
}

#: The model of decision-statistics.md: runs independent (no server offsets assumed); the
#: tests of the server model give their own --server-cv.
INDEPENDENT = ConfidenceSettings(server_cv=0.0)


def report_of(root: Path, confidence: ConfidenceSettings = INDEPENDENT, **settings: Any) -> Any:
    result = tuned(root, **settings)
    return result, assess(result, confidence)


def p_of(
    report: ConfidenceReport, anchor: int, column: str = "p_eps_good"
) -> dict[int, float | None]:
    rows = report.cells.filter(pl.col("anchor") == anchor).select("k", column).rows()
    return dict(rows)  # type: ignore[arg-type]


def model_p(report: ConfidenceReport, anchor: int) -> dict[int, float | None]:
    """The flat-prior model's P(eps-good), before calibration: what the published worked
    example and the closed forms give."""
    return p_of(report, anchor, "p_model")


def anchor_row(report: ConfidenceReport, anchor: int) -> dict[str, Any]:
    (row,) = report.anchors.filter(pl.col("anchor") == anchor).to_dicts()
    return row


#: Two K at one anchor, 3 server starts each, 3 runs per server: K=1 ahead by about 3 %, the
#: servers of one K 2 % apart, runs on one server 0.5 % apart.
REPLICATED = {
    (4, 0): [[100.0, 100.5, 99.5], [102.0, 102.5, 101.5], [98.0, 98.5, 97.5]],
    (4, 1): [[103.0, 103.5, 102.5], [105.0, 105.5, 104.5], [101.0, 101.5, 100.5]],
}
