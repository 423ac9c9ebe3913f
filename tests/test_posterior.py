"""lib.posterior: one anchor's P(eps-good) against closed forms and exact cases, and its noise
split into run noise and server offsets (docs/confidence.md, "Servers").

For two K the expected P is the closed form
``P(eps-good) = P(t_df >= (log(1 - eps) - d) / (s * sqrt(1/n_a + 1/n_b)))`` from scipy.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from confidence_helpers import REPLICATED, anchor_row, model_p, p_of, report_of, tuned, worked
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from sweep_builder import write_grid, write_replicated_grid

from lib.calibration import noise_ratio
from lib.confidence import ConfidenceSettings, assess
from lib.posterior import anchor_cells, anchor_verdict, cell_mean_sd, cell_mean_variances


@pytest.mark.parametrize("gap_percent", [0.5, 1.5, 3.0])
def test_two_k_probability_matches_the_closed_form(tmp_path: Path, gap_percent: float) -> None:
    spread = [0.99, 1.0, 1.01]
    values = {
        0: [100.0 * f for f in spread],
        3: [100.0 * (1 + gap_percent / 100) * f for f in spread],
    }
    write_grid(tmp_path, {(1, k): runs for k, runs in values.items()})
    _, report = report_of(tmp_path, ConfidenceSettings(draws=200_000, server_cv=0.0))
    logs = {k: np.log(runs) for k, runs in values.items()}
    s = math.sqrt(sum(float(((x - x.mean()) ** 2).sum()) for x in logs.values()) / 4)
    scale = s * math.sqrt(1 / 3 + 1 / 3)
    margin = math.log(1 - 0.01)
    d = float(logs[0].mean() - logs[3].mean())
    # K=0 is eps-good when mu_0 - mu_3 >= log(1 - eps); mu_0 - mu_3 ~ d + scale * t_4.
    expected_k0 = stats.t.sf((margin - d) / scale, df=4)
    expected_k3 = stats.t.sf((margin + d) / scale, df=4)
    p = model_p(report, 1)
    assert p[0] == pytest.approx(expected_k0, abs=0.005)
    assert p[3] == pytest.approx(expected_k3, abs=0.005)


def test_identical_runs_give_probabilities_of_exactly_zero_or_one(tmp_path: Path) -> None:
    write_grid(tmp_path, {(1, 0): [100.0] * 3, (1, 2): [150.0] * 3, (1, 4): [149.0] * 3})
    _, report = report_of(tmp_path)
    # No noise: K=2 (150) and K=4 (149, within 1 %) are eps-good for sure, K=0 never.
    assert p_of(report, 1) == {0: 0.0, 2: 1.0, 4: 1.0}
    row = anchor_row(report, 1)
    assert row["pooled_log_sd"] == 0.0
    # Exact probabilities need no calibration: the calibrated P is the model's.
    assert row["noise_ratio"] == 0.0 and model_p(report, 1) == p_of(report, 1)
    assert (row["status"], row["selected_k"], row["qualifying_k"]) == ("resolved", 2, [2, 4])
    assert not report.runs["flagged"].any()


def test_a_cell_with_zero_mad_still_has_noise(tmp_path: Path) -> None:
    """[100, 100, 96] has MAD 0 (the median run's nearer neighbour is equal), but its runs
    spread: the pooled noise sees it, so the probabilities are neither 0 nor 1."""
    write_grid(tmp_path, {(1, 0): [100.0, 100.0, 96.0], (1, 1): [101.0, 100.5, 101.5]})
    _, report = report_of(tmp_path)
    row = anchor_row(report, 1)
    logs = [np.log([100.0, 100.0, 96.0]), np.log([101.0, 100.5, 101.5])]
    squares = sum(float(((x - x.mean()) ** 2).sum()) for x in logs)
    assert row["pooled_log_sd"] == pytest.approx(math.sqrt(squares / 4), rel=1e-12)
    assert all(0.0 < p < 1.0 for p in p_of(report, 1).values())  # type: ignore[operator]
    assert row["noise_ratio"] > 0


def test_a_single_k_is_certain_without_calibration(tmp_path: Path) -> None:
    write_grid(tmp_path, {(1, 2): [100.0, 97.0, 104.0]})
    _, report = report_of(tmp_path)
    assert p_of(report, 1) == model_p(report, 1) == {2: 1.0}
    assert anchor_row(report, 1)["status"] == "resolved"


def _log_mean(values: list[float]) -> float:
    return sum(math.log(v) for v in values) / len(values)


def test_a_replicated_cell_is_decided_on_its_server_means(tmp_path: Path) -> None:
    """With replicas the unit of replication is the server: the same P as a sweep whose runs
    are the servers' (geometric) means, measured on one server each with independent runs."""
    replicated = report_of(write_replicated_grid(tmp_path / "replicas", REPLICATED))[1]
    means = {
        cell: [math.exp(_log_mean(server)) for server in servers]
        for cell, servers in REPLICATED.items()
    }
    collapsed = report_of(write_grid(tmp_path / "means", means))[1]
    for k in (0, 1):
        assert p_of(replicated, 4)[k] == pytest.approx(p_of(collapsed, 4)[k], abs=2e-4)
    row = anchor_row(replicated, 4)
    assert row["servers_measured"] and row["server_df"] == 2 * (3 - 1)
    assert replicated.cells["num_servers"].to_list() == [3, 3]
    assert replicated.cells["num_runs"].to_list() == [9, 9]


def test_the_server_sd_is_measured_by_the_method_of_moments(tmp_path: Path) -> None:
    _, report = report_of(write_replicated_grid(tmp_path, REPLICATED))
    # By hand: per cell the variance of the 3 server means of log(value), pooled over the two
    # cells (2 degrees of freedom each), less the pooled run variance within servers (2 per
    # server, 12 in all) over the 3 runs per server.
    between, within = [], []
    for servers in REPLICATED.values():
        server_means = [_log_mean(server) for server in servers]
        centre = sum(server_means) / 3
        between.append(sum((m - centre) ** 2 for m in server_means) / 2)
        for server, m in zip(servers, server_means, strict=True):
            within.append(sum((math.log(v) - m) ** 2 for v in server))
    run_variance = sum(within) / 12
    server_variance = sum(between) / 2 - run_variance / 3
    row = anchor_row(report, 4)
    assert row["pooled_log_sd"] == pytest.approx(math.sqrt(run_variance), rel=1e-9)
    assert row["pooled_df"] == 12
    assert row["server_log_sd"] == pytest.approx(math.sqrt(server_variance), rel=1e-9)
    # About 2 % between servers, 0.5 % between runs: as built.
    assert 0.015 < row["server_log_sd"] < 0.025 and 0.003 < row["pooled_log_sd"] < 0.007
    (note,) = [n for n in row["notes"] if "server" in n]
    assert note.startswith("server replicas: servers of one configuration vary by 2.")
    assert "--server-cv is not used" in note


def test_replicas_with_no_server_offset_measure_none(tmp_path: Path) -> None:
    """Servers alike (the same runs on every server): the server variance is clipped at 0,
    never negative, and the note says 0.0 %."""
    # The same runs in another order on each server (identical records would be copies).
    same = {
        cell: [servers[0][r:] + servers[0][:r] for r in range(3)]
        for cell, servers in REPLICATED.items()
    }
    row = anchor_row(report_of(write_replicated_grid(tmp_path, same))[1], 4)
    assert row["server_log_sd"] == 0.0
    assert any("vary by 0.0% here (measured" in note for note in row["notes"])


def test_without_replicas_the_assumed_server_sd_widens_p(tmp_path: Path) -> None:
    """Identical runs (no run noise at all): P comes from the assumed offsets alone, a normal
    difference ``gap + server_sd * sqrt(2) * Z``. Closed form for the trailing K (before
    calibration): ``P(eps-good) = P(-gap + s * sqrt(2) * Z >= log(1 - eps))``."""
    gap = math.log(1.02)  # K=1 2 % ahead
    sweep = write_grid(tmp_path, {(4, 0): [100.0] * 3, (4, 1): [102.0] * 3})
    cv = 0.01
    _, report = report_of(sweep, ConfidenceSettings(server_cv=cv, draws=200_000))
    server_sd = math.sqrt(math.log1p(cv**2))
    expected = 1 - stats.norm.cdf((math.log(0.99) + gap) / (server_sd * math.sqrt(2)))
    assert model_p(report, 4)[0] == pytest.approx(expected, abs=0.005)
    row = anchor_row(report, 4)
    assert not row["servers_measured"] and row["server_df"] == 0
    assert row["server_log_sd"] == pytest.approx(server_sd)
    # Independent runs (no offsets): identical runs make P exactly 0 or 1.
    _, independent = report_of(sweep)
    assert model_p(independent, 4) == {0: 0.0, 1: 1.0}


def test_a_larger_assumed_server_sd_never_makes_a_pick_surer(tmp_path: Path) -> None:
    sweep = tuned(worked(tmp_path))
    leaders = []
    for cv in (0.0, 0.005, 0.01, 0.02, 0.05):
        report = assess(sweep, ConfidenceSettings(server_cv=cv))
        leaders.append(report.cells.filter(pl.col("anchor") == 64)["p_model"].max())
    assert leaders == sorted(leaders, reverse=True), leaders
    assert leaders[-1] < leaders[0]


# --------------------------------------------------------------------------- issue 38, kind 2
# Server means that happen to agree are no evidence that a cell mean is surer than its runs:
# the variance of a server's mean is never below the run variance over its runs.

#: Six runs per K at +-7 %, on two servers whose means agree (to 1e-4; identical records
#: would be read as copies); K=1 4 % ahead.
_AGREEING = {
    (4, k): [[c * f for f in (0.93, 1.0, 1.07)], [c * f for f in (1.0701, 0.9999, 0.93)]]
    for k, c in ((0, 100.0), (1, 104.0))
}


def _one_server(cells: dict[tuple[int, int], list[list[float]]]) -> dict[Any, list[float]]:
    return {cell: [v for server in servers for v in server] for cell, servers in cells.items()}


def test_server_means_that_agree_keep_their_run_noise(tmp_path: Path) -> None:
    """The issue's case: the same six runs per K are unresolved in one server even with no
    server offsets assumed (--server-cv 0), so on two servers whose means agree they cannot be
    surer: the server variance is measured as 0 (clipped), and the cell means keep the run
    noise (before the fix: resolved at P 0.9996 on a server spread of 0)."""
    settings = ConfidenceSettings(server_cv=0.0)
    _, replicas = report_of(write_replicated_grid(tmp_path / "r", _AGREEING), settings)
    _, one = report_of(write_grid(tmp_path / "o", _one_server(_AGREEING)), settings)
    row = anchor_row(replicas, 4)
    assert row["servers_measured"] and row["server_log_sd"] == 0.0
    assert p_of(replicas, 4)[1] <= p_of(one, 4)[1]  # type: ignore[operator]
    assert model_p(replicas, 4)[1] <= model_p(one, 4)[1]  # type: ignore[operator]
    assert row["status"] == "unresolved" and row["selected_k"] == 1
    # The noise the P rests on is the run noise's, not the servers' spread of 0.
    run_only = noise_ratio(row["pooled_log_sd"], np.array([6, 6]), math.log(1 - 0.01))
    assert row["noise_ratio"] == pytest.approx(run_only, rel=1e-9)


def test_cell_mean_variance_is_never_below_the_run_noise() -> None:
    """``run_variance / N + server_variance * w``: the run term stays whatever the servers
    measured (0 included), and w is 1 for one server, 1 / S for S equal servers."""
    runs, weights = np.array([6, 6, 4]), np.array([1.0, 0.5, 10 / 16])
    assert cell_mean_variances(0.04, 0.0, runs, weights).tolist() == pytest.approx(
        [0.04 / 6, 0.04 / 6, 0.01]
    )
    assert cell_mean_variances(0.04, 0.01, runs, weights).tolist() == pytest.approx(
        [0.04 / 6 + 0.01, 0.04 / 6 + 0.005, 0.01 + 0.01 * 10 / 16]
    )
    assert cell_mean_sd(0.02, 0.0, [3, 3]) == pytest.approx(0.02 / math.sqrt(6))


def _runs_frame(values: dict[int, list[list[float]]], replicas: bool) -> pl.DataFrame:
    """Scored runs (lib.confidence.RUN_SCHEMA's columns the posterior reads) of one anchor:
    per K its servers' runs; ``replicas`` False puts every K's runs on one server."""
    rows = [
        {
            "anchor": 1,
            "k": k,
            "server": f"k{k}-seed={s}" if replicas else f"k{k}",
            "score": math.log(v),
            "infeasible": False,
        }
        for k, servers in values.items()
        for s, server in enumerate(servers)
        for v in server
    ]
    return pl.DataFrame(rows)


@st.composite
def _split_runs(draw: st.DrawFn) -> dict[int, list[list[float]]]:
    """2..4 K, each with S servers (2..3) of n runs (1..3), the same S and n for every K:
    cell centres up to 6 % apart, server offsets and run noise up to 8 %."""
    ks = draw(st.integers(2, 4))
    servers, runs = draw(st.integers(2, 3)), draw(st.integers(1, 3))
    offset_sd = draw(st.sampled_from([0.0, 0.005, 0.02, 0.08]))
    run_sd = draw(st.sampled_from([0.005, 0.02, 0.08]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    centres = 100.0 * np.exp(rng.uniform(0.0, 0.06, ks))
    return {
        k: [
            (centres[k] * np.exp(rng.normal(0, offset_sd) + rng.normal(0, run_sd, runs))).tolist()
            for _ in range(servers)
        ]
        for k in range(ks)
    }


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(_split_runs())
def test_replicas_never_make_a_pick_surer_than_the_same_runs_on_one_server(
    values: dict[int, list[list[float]]],
) -> None:
    """For run values split into S equal servers per K, the leading K's model P(eps-good) is
    never higher than with the same runs as one server per K and no server offset assumed
    (--server-cv 0): the measured server offsets can only add to the run noise. (Up to the
    Monte-Carlo error: the two use different t degrees of freedom, so different draws; 0.01
    is about three of its standard errors at 4,000 draws.)"""
    settings = ConfidenceSettings(server_cv=0.0, draws=4000)
    margin = math.log(1 - 0.01)
    (replicated,) = anchor_cells(_runs_frame(values, replicas=True)).values()
    (one,) = anchor_cells(_runs_frame(values, replicas=False)).values()
    with_replicas = anchor_verdict(replicated, margin, settings)
    on_one = anchor_verdict(one, margin, settings)
    assert with_replicas.noise is not None and with_replicas.noise.measured
    assert on_one.p is not None and on_one.model is not None
    if with_replicas.p is None or with_replicas.model is None:
        return  # one run per server and every server mean alike: nothing measured
    assert with_replicas.model.max() <= on_one.model.max() + 0.01
