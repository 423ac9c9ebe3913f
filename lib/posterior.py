"""One anchor's posterior: how sure each K is to be within the tie tolerance of the best
(``docs/confidence.md``, "The model" and "Servers").

:func:`anchor_cells` turns the scored runs into each anchor's cells as arrays
(:class:`AnchorCells`); :func:`anchor_verdict` splits the anchor's noise into run noise and server
offsets (:class:`Noise`), draws the posterior of every K's centre with seeded Monte-Carlo
(common random numbers: an anchor's P depends only on its own runs, the seed and the draw
count), calibrates the model's P (:mod:`lib.calibration`) and picks the smallest K that
reaches the confidence (:class:`Verdict`). :func:`lib.confidence.assess` runs it per anchor.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import polars as pl
from numpy.typing import NDArray

from lib.calibration import calibrated, leader_peak, noise_ratio

__all__ = [
    "AnchorCells",
    "ModelSettings",
    "Noise",
    "Verdict",
    "aligned_cells",
    "anchor_cells",
    "anchor_verdict",
    "leading_k",
]

_NORMAL_STREAM = 1
_CHI2_STREAM = 2
_SERVER_STREAM = 3


class ModelSettings(Protocol):
    """What the posterior reads of :class:`lib.confidence.ConfidenceSettings`."""

    @property
    def confidence(self) -> float: ...

    @property
    def seed(self) -> int: ...

    @property
    def draws(self) -> int: ...

    @property
    def ordered_k(self) -> bool: ...

    @property
    def server_log_variance(self) -> float: ...


@dataclass(frozen=True)
class AnchorCells:
    """One anchor's cells as arrays, in K order."""

    ks: NDArray[np.int64]
    counts: NDArray[np.int64]
    means: NDArray[np.float64]
    squares: NDArray[np.float64]  # sum of squared deviations from the cell mean
    infeasible: NDArray[np.bool_]
    servers: NDArray[np.int64]  # server starts (serve combos) the cell's runs came from
    within: NDArray[np.float64]  # squared deviations of runs from their server's mean
    server_means: NDArray[np.float64]  # the mean of the cell's server means
    between: NDArray[np.float64]  # squared deviations of server means from their mean


def anchor_cells(runs: pl.DataFrame) -> dict[int, AnchorCells]:
    """Each anchor's cells as arrays, from its scored runs (:data:`lib.confidence.RUN_SCHEMA`);
    an infeasible cell's means are -inf."""
    score = pl.col("score")
    stats = (
        runs.group_by("anchor", "k")
        .agg(
            pl.len().alias("count"),
            score.mean().alias("mean"),
            ((score - score.mean()) ** 2).sum().alias("squares"),
            pl.col("infeasible").any().alias("infeasible"),
            pl.col("server").n_unique().alias("servers"),
        )
        .sort("anchor", "k")
    )
    if stats.is_empty():
        return {}
    if stats["servers"].max() == 1:
        # No replicas (the usual sweep): each cell is one server, its mean the server's.
        stats = stats.with_columns(
            pl.col("squares").alias("within"),
            pl.col("mean").alias("server_mean"),
            pl.lit(0.0).alias("between"),
        )
    else:
        servers = (
            runs.group_by("anchor", "k", "server")
            .agg(score.mean().alias("m"), ((score - score.mean()) ** 2).sum().alias("sq"))
            .group_by("anchor", "k")
            .agg(
                pl.col("sq").sum().alias("within"),
                pl.col("m").mean().alias("server_mean"),
                ((pl.col("m") - pl.col("m").mean()) ** 2).sum().alias("between"),
            )
        )
        stats = stats.join(servers, on=["anchor", "k"], how="left").sort("anchor", "k")
    anchors = stats["anchor"].to_numpy()
    infeasible = stats["infeasible"].to_numpy()

    def column(name: str, infeasible_value: float) -> NDArray[np.float64]:
        return np.where(infeasible, infeasible_value, stats[name].fill_null(0.0).to_numpy())

    arrays: tuple[NDArray[Any], ...] = (
        stats["k"].to_numpy(),
        stats["count"].cast(pl.Int64).to_numpy(),
        column("mean", -np.inf),
        column("squares", 0.0),
        infeasible,
        stats["servers"].cast(pl.Int64).to_numpy(),
        column("within", 0.0),
        column("server_mean", -np.inf),
        column("between", 0.0),
    )
    starts = np.flatnonzero(np.r_[True, anchors[1:] != anchors[:-1]])
    ends = np.r_[starts[1:], len(anchors)]
    return {
        int(anchors[a]): AnchorCells(*(array[a:b] for array in arrays))
        for a, b in zip(starts, ends, strict=True)
    }


@dataclass(frozen=True)
class _Unit:
    """What the posterior of one anchor treats as its independent observations
    (docs/confidence.md, "Servers"), feasible cells only.

    With replicas (a cell with runs from two or more server starts): the **server means**,
    each ``mu_K + offset + run noise / n``, pooled over the anchor's cells (``df`` = servers
    minus cells); the server's variance is inside their spread, so nothing is added. Without:
    the runs, and the assumed server variance (``--server-cv``) added to each cell mean."""

    counts: NDArray[np.int64]
    means: NDArray[np.float64]
    df: int
    log_sd: float  # sd of one observation; 0.0 where df is 0 (then unused)
    server_variance: float  # known variance added to every cell mean (0 with replicas)
    measured: bool


def _unit(cells: AnchorCells, feasible: NDArray[np.bool_], settings: ModelSettings) -> _Unit:
    """The observations of :class:`_Unit`: server means where the anchor has replicas, else
    runs with the assumed server variance."""
    if bool((cells.servers[feasible] > 1).any()):
        counts = cells.servers[feasible]
        df = int(counts.sum() - len(counts))
        squares = float(cells.between[feasible].sum())
        return _Unit(counts, cells.server_means[feasible], df, math.sqrt(squares / df), 0.0, True)
    counts = cells.counts[feasible]
    df = int(counts.sum() - len(counts))
    log_sd = math.sqrt(float(cells.squares[feasible].sum()) / df) if df else 0.0
    return _Unit(counts, cells.means[feasible], df, log_sd, settings.server_log_variance, False)


@dataclass(frozen=True)
class Noise:
    """An anchor's two noise components on the log scale (docs/confidence.md, "Servers")."""

    run_sd: float | None  # between runs of one server; None without two runs on one server
    run_df: int
    server_sd: float  # between server starts of one configuration: measured, or assumed
    server_df: int  # 0: assumed (no replicas)
    measured: bool
    #: Measured only: the server variance before clipping at 0 (what the sweep pools).
    server_excess: float | None = None


def _noise(cells: AnchorCells, feasible: NDArray[np.bool_], unit: _Unit) -> Noise:
    """Split the anchor's noise into run noise and server offsets.

    Run noise: the pooled spread of runs around their own server's mean (runs minus servers
    degrees of freedom). With replicas the server variance is the method-of-moments estimate
    ``var(server means) - run variance * mean(1 / runs per server)``, at least 0 (with one
    run per server the two cannot be split: all of it is counted as the server's). Without,
    it is the assumed ``--server-cv``.
    """
    run_df = int((cells.counts[feasible] - cells.servers[feasible]).sum())
    run_sd = math.sqrt(float(cells.within[feasible].sum()) / run_df) if run_df else None
    if not unit.measured:
        return Noise(run_sd, run_df, math.sqrt(unit.server_variance), 0, False)
    per_server = float(np.mean(cells.servers[feasible] / cells.counts[feasible]))
    excess = unit.log_sd**2 - (run_sd or 0.0) ** 2 * per_server
    return Noise(run_sd, run_df, math.sqrt(max(excess, 0.0)), unit.df, True, excess)


@dataclass(frozen=True)
class Verdict:
    """One anchor's P(eps-good) per K (in its K order) and the confident rule's pick."""

    p: NDArray[np.float64] | None  # calibrated; None: the noise cannot be estimated
    model: NDArray[np.float64] | None  # the flat-prior model's P, before calibration
    noise: Noise | None  # None when the noise cannot be estimated
    ratio: float | None  # noise_ratio; None when the noise is unknown or not needed
    peak: float | None  # leader_peak; None when the noise is unknown or not needed
    pick: int
    qualifying: list[int]


@functools.lru_cache(maxsize=64)
def _posterior_noise(seed: int, draws: int, df: int, columns: int) -> NDArray[np.float32]:
    """Standardised posterior draws, shared by every anchor with the same shape (common random
    numbers): an anchor's P depends only on its own runs, the seed and the draw count.

    ``[j, d] = sqrt(df / chi2_d) * z_jd``: the posterior ``(mu_j - mean_j)`` in units of
    ``s / sqrt(n_j)``, one row per K (reductions over K then run along contiguous rows). Kept
    in float32: the scores are centred on the anchor's best mean first, so the differences
    that matter (about 1e-3 and up) keep 6 digits. Read-only, as the cache shares it.
    """
    z = np.random.default_rng([seed, _NORMAL_STREAM, columns]).standard_normal((columns, draws))
    chi2 = 2.0 * np.random.default_rng([seed, _CHI2_STREAM, df]).standard_gamma(
        df / 2.0, size=draws
    )
    noise = (np.sqrt(df / np.maximum(chi2, np.finfo(float).tiny)) * z).astype(np.float32)
    noise.setflags(write=False)
    return noise


@functools.lru_cache(maxsize=64)
def _server_noise(seed: int, draws: int, columns: int) -> NDArray[np.float32]:
    """Standard normal draws of each K's server offset, in units of the server sd (its own
    stream: the run noise of :func:`_posterior_noise` is the same with and without it)."""
    z = np.random.default_rng([seed, _SERVER_STREAM, columns]).standard_normal((columns, draws))
    offsets = z.astype(np.float32)
    offsets.setflags(write=False)
    return offsets


def anchor_verdict(cells: AnchorCells, margin: float, settings: ModelSettings) -> Verdict:
    """P(eps-good) per K and the confident rule's pick. ``margin = log(1 - eps) <= 0``.

    The posterior of each K's centre is ``mean_K + sd / sqrt(n_K) * t_df`` over the anchor's
    observations (:func:`_unit`: server means with replicas, runs without), plus
    ``server_sd * z_K`` for the assumed server offset where there are no replicas."""
    feasible = ~cells.infeasible
    count = len(cells.ks)
    if not feasible.any() or feasible.sum() == 1:
        # Every K infeasible: they tie at the worst. One feasible K: it is the best.
        p = np.where(feasible, 1.0, 0.0) if feasible.any() else np.ones(count)
        qualifying = cells.ks[p >= settings.confidence].tolist()
        return Verdict(p, p, None, None, None, qualifying[0], qualifying)
    unit = _unit(cells, feasible, settings)
    counts, means = unit.counts, unit.means
    if unit.df == 0:
        best = means.max()
        tied = [k for k, m in zip(cells.ks[feasible], means, strict=True) if m >= best + margin]
        return Verdict(None, None, None, None, None, int(min(tied)), [])
    noise = _noise(cells, feasible, unit)
    log_sd, server_variance = unit.log_sd, unit.server_variance
    centred = (means - means.max()).astype(np.float32)[:, np.newaxis]
    mu: NDArray[Any] = centred
    if log_sd > 0.0:
        spread = (log_sd / np.sqrt(counts)).astype(np.float32)[:, np.newaxis]
        mu = _posterior_noise(settings.seed, settings.draws, unit.df, len(counts)) * spread + mu
    if server_variance > 0.0:
        offsets = _server_noise(settings.seed, settings.draws, len(counts))
        mu = offsets * np.float32(math.sqrt(server_variance)) + mu
    good = mu >= mu.max(axis=0) + np.float32(margin)
    model = np.zeros(count)
    model[feasible] = np.count_nonzero(good, axis=1) / mu.shape[1]
    p = np.zeros(count)
    ratio = noise_ratio(log_sd, counts, margin, server_variance)
    peak = (
        leader_peak(cells.ks[feasible], counts, means, log_sd, model[feasible], server_variance)
        if settings.ordered_k
        else 0.0
    )
    # Rounded like the JSON (to 1e-4, the Monte-Carlo resolution): the status compares the
    # number shown, and the last bit of a platform's exp cannot change it.
    p[feasible] = np.round(calibrated(model[feasible], ratio, peak), 4)
    qualifying = cells.ks[p >= settings.confidence].tolist()
    if qualifying:
        return Verdict(p, model, noise, ratio, peak, qualifying[0], qualifying)
    # Provisional: the highest P, ties to the smaller K (argmax returns the first).
    return Verdict(p, model, noise, ratio, peak, int(cells.ks[np.argmax(p)]), [])


def leading_k(verdict: Verdict, ks: NDArray[np.int64]) -> int:
    """The K with the highest P(eps-good) (ties to the smaller K); the pick without P."""
    if verdict.p is None:
        return verdict.pick
    return int(ks[np.argmax(verdict.p)])


def aligned_cells(clean: AnchorCells, full: AnchorCells) -> AnchorCells:
    """``clean`` (the anchor without flagged runs) on ``full``'s K order; a cell whose every
    run was flagged keeps its runs (there is nothing else to judge it by)."""
    index = {int(k): i for i, k in enumerate(clean.ks)}
    take = [index.get(int(k)) for k in full.ks]

    def pick(values: NDArray[Any], fallback: NDArray[Any]) -> NDArray[Any]:
        return np.array(
            [fallback[j] if i is None else values[i] for j, i in enumerate(take)],
            dtype=fallback.dtype,
        )

    return AnchorCells(
        ks=full.ks,
        **{
            name.name: pick(getattr(clean, name.name), getattr(full, name.name))
            for name in dataclasses.fields(AnchorCells)
            if name.name != "ks"
        },
    )
