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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import polars as pl
from numpy.typing import NDArray

from lib.calibration import calibrated, leader_peak, lean_lapse, noise_ratio
from lib.noise_model import NoiseSource

__all__ = [
    "AnchorCells",
    "ModelSettings",
    "Noise",
    "Verdict",
    "aligned_cells",
    "anchor_cells",
    "anchor_verdict",
    "cell_mean_sd",
    "cell_mean_variances",
    "centre_draws",
    "leading_k",
    "run_noise_of",
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
    between: NDArray[np.float64]  # squared deviations of server means from their mean
    inverse_runs: NDArray[np.float64]  # sum over the cell's servers of 1 / (its runs)
    # sum over the cell's servers of (its runs)^2, over (the cell's runs)^2: how much one
    # server's offset weighs in the cell mean (1 with one server, 1 / servers when balanced)
    server_weight: NDArray[np.float64]


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
            pl.lit(0.0).alias("between"),
            (1.0 / pl.col("count")).alias("inverse_runs"),
            pl.lit(1.0).alias("server_weight"),
        )
    else:
        servers = (
            runs.group_by("anchor", "k", "server")
            .agg(
                score.mean().alias("m"),
                ((score - score.mean()) ** 2).sum().alias("sq"),
                pl.len().cast(pl.Float64).alias("n"),
            )
            .group_by("anchor", "k")
            .agg(
                pl.col("sq").sum().alias("within"),
                ((pl.col("m") - pl.col("m").mean()) ** 2).sum().alias("between"),
                (1.0 / pl.col("n")).sum().alias("inverse_runs"),
                ((pl.col("n") ** 2).sum() / pl.col("n").sum() ** 2).alias("server_weight"),
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
        column("between", 0.0),
        column("inverse_runs", 0.0),
        column("server_weight", 0.0),
    )
    starts = np.flatnonzero(np.r_[True, anchors[1:] != anchors[:-1]])
    ends = np.r_[starts[1:], len(anchors)]
    return {
        int(anchors[a]): AnchorCells(*(array[a:b] for array in arrays))
        for a, b in zip(starts, ends, strict=True)
    }


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
    #: Where no cell has two runs (lean sweeps): the run noise borrowed from other anchors or
    #: assumed (``--run-cv``), which the posterior draws from; None where measured here.
    run_source: NoiseSource | None = None


def run_noise_of(cells: AnchorCells) -> tuple[float | None, int]:
    """The anchor's pooled run noise over its feasible cells and its degrees of freedom (None
    and 0 where no server has two runs): what the sweep's noise model is fitted to."""
    return _run_noise(cells, ~cells.infeasible)


def _run_noise(cells: AnchorCells, feasible: NDArray[np.bool_]) -> tuple[float | None, int]:
    """The pooled run noise: the spread of runs around their own server's mean, with runs
    minus servers degrees of freedom (None and 0 where no server has two runs)."""
    run_df = int((cells.counts[feasible] - cells.servers[feasible]).sum())
    run_sd = math.sqrt(float(cells.within[feasible].sum()) / run_df) if run_df else None
    return run_sd, run_df


def _replica_noise(cells: AnchorCells, feasible: NDArray[np.bool_]) -> Noise:
    """The server offsets measured from replicas: a one-way random-effects method of moments.

    A server's mean is ``mu_K + offset + mean of its n runs' noise``, of variance
    ``tau^2 + sigma^2 / n``, so the squared deviations of a cell's S server means from their
    mean have the expectation ``(S - 1) * (tau^2 + sigma^2 * mean(1 / n))``; pooled over the
    anchor's cells, ``tau^2 = (between - sigma^2 * sum((S - 1) * mean(1 / n))) / sum(S - 1)``
    (``server_excess``, negative when the server means agree better than their runs allow),
    clipped at 0 (``server_sd``). With one run per server the two cannot be split: all of it is
    counted as the server's. Degrees of freedom: servers minus cells.
    """
    run_sd, run_df = _run_noise(cells, feasible)
    servers = cells.servers[feasible]
    server_df = int((servers - 1).sum())
    # sum over cells of (S - 1) * mean(1 / n): the run variance's share of the between squares
    share = float(((servers - 1) / servers * cells.inverse_runs[feasible]).sum())
    between = float(cells.between[feasible].sum())
    excess = (between - (run_sd or 0.0) ** 2 * share) / server_df
    return Noise(run_sd, run_df, math.sqrt(max(excess, 0.0)), server_df, True, excess)


def _assumed_noise(
    cells: AnchorCells,
    feasible: NDArray[np.bool_],
    settings: ModelSettings,
    fallback: NoiseSource | None,
) -> Noise:
    """Without replicas: the run noise, and the assumed ``--server-cv`` for the offsets. Where
    no cell has two runs, the run noise is ``fallback``'s (borrowed or assumed; None: unknown),
    stated at its centre."""
    run_sd, run_df = _run_noise(cells, feasible)
    server_sd = math.sqrt(settings.server_log_variance)
    if run_df == 0 and fallback is not None:
        centre = fallback.log_sd if fallback.centre is None else fallback.centre
        return Noise(centre, fallback.df, server_sd, 0, False, run_source=fallback)
    return Noise(run_sd, run_df, server_sd, 0, False)


def cell_mean_sd(run_sd: float, server_sd: float, runs_per_server: Sequence[int]) -> float:
    """The standard error of a cell mean (log scale) whose runs came from server starts with
    ``runs_per_server`` runs each: ``sqrt(run_sd^2 / N + server_sd^2 * sum(n_s^2) / N^2)``
    (each server's offset weighs as its share of the runs; :func:`cell_mean_variances`).

    >>> round(cell_mean_sd(0.02, 0.0, [4]), 4), round(cell_mean_sd(0.0, 0.02, [1, 1, 1, 1]), 4)
    (0.01, 0.01)
    >>> round(cell_mean_sd(0.0, 0.02, [3, 1]), 4)  # one server's offset weighs 3/4
    0.0158
    """
    total = sum(runs_per_server)
    weight = sum(n * n for n in runs_per_server) / total**2
    variances = cell_mean_variances(run_sd**2, server_sd**2, np.array([total]), np.array([weight]))
    return math.sqrt(float(variances[0]))


def cell_mean_variances(
    run_variance: float,
    server_variance: float,
    runs: NDArray[np.int64],
    server_weight: NDArray[np.float64],
) -> NDArray[np.float64]:
    """Each cell mean's variance (log scale): ``run_variance / N + server_variance * w``, ``N``
    the cell's runs and ``w = sum(n_s^2) / N^2`` its servers' weight
    (:attr:`AnchorCells.server_weight`: 1 for one server, ``1 / S`` for S equal ones). Never
    below ``run_variance / N``: server starts add to the run noise, never replace it."""
    variances: NDArray[np.float64] = run_variance / runs + server_variance * server_weight
    return variances


@dataclass(frozen=True)
class _Unit:
    """What the posterior of one anchor draws each K's centre from (docs/confidence.md,
    "Servers"), feasible cells only: ``mean_K + log_sd / sqrt(counts_K) * t_df``, plus
    ``sqrt(server_variance) * z_K`` where that variance is assumed rather than measured.

    Without replicas: the runs (``counts`` the runs, ``df`` runs minus cells), and the assumed
    server variance (``--server-cv``) added to each cell mean. With replicas (a cell with runs
    from two or more server starts): the cell mean's variance combines both measured components
    (:func:`cell_mean_variances`), written as ``log_sd^2 / counts`` (``log_sd``: the sd of one
    server mean of the anchor's average size, ``counts``: servers' worth of them, not whole
    numbers when unbalanced); ``df`` is the servers minus cells where the offsets are measured
    above the run noise (then, for balanced cells, exactly the t of the server means), else the
    runs minus servers: server means that agree better than their runs allow are no evidence
    that the cell means are surer than their runs."""

    counts: NDArray[np.float64]
    means: NDArray[np.float64]
    df: int
    log_sd: float  # sd of one observation; 0.0 where df is 0 (then unused)
    server_variance: float  # known variance added to every cell mean (0 with replicas)
    measured: bool
    #: ``log_sd`` is known (assumed, ``--run-cv``): normal draws instead of Student-t.
    known: bool = False


def _replicated(cells: AnchorCells, feasible: NDArray[np.bool_]) -> bool:
    """Whether the anchor measures server offsets: a feasible cell has two or more servers."""
    return bool((cells.servers[feasible] > 1).any())


def _unit(
    cells: AnchorCells, feasible: NDArray[np.bool_], noise: Noise, settings: ModelSettings
) -> _Unit:
    """The observations of :class:`_Unit`, from the anchor's :class:`Noise`."""
    means = cells.means[feasible]
    if not noise.measured:
        counts = cells.counts[feasible]
        source = noise.run_source
        if source is not None:  # no cell with two runs: borrowed or assumed
            return _Unit(
                counts.astype(np.float64),
                means,
                source.df,
                source.log_sd,
                settings.server_log_variance,
                False,
                known=source.df == 0,
            )
        df = int(counts.sum() - len(counts))
        log_sd = math.sqrt(float(cells.squares[feasible].sum()) / df) if df else 0.0
        return _Unit(
            counts.astype(np.float64), means, df, log_sd, settings.server_log_variance, False
        )
    servers = cells.servers[feasible]
    run_variance = (noise.run_sd or 0.0) ** 2
    variances = cell_mean_variances(
        run_variance, noise.server_sd**2, cells.counts[feasible], cells.server_weight[feasible]
    )
    # One server mean of the anchor's (harmonic) average size: the scale of the draws.
    one_server = noise.server_sd**2 + run_variance * float(
        cells.inverse_runs[feasible].sum() / servers.sum()
    )
    # Without any noise every variance is 0: then the counts are only weights (the servers).
    noisy = variances > 0.0
    weights: NDArray[np.float64] = np.where(
        noisy, one_server / np.where(noisy, variances, 1.0), servers.astype(np.float64)
    )
    offsets_show = (noise.server_excess or 0.0) > 0.0 or noise.run_df == 0
    df = noise.server_df if offsets_show else noise.run_df
    return _Unit(weights, means, df, math.sqrt(one_server), 0.0, True)


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
def _known_noise(seed: int, draws: int, columns: int) -> NDArray[np.float32]:
    """:func:`_posterior_noise` where the noise is known (assumed): the same standard normal
    draws, without the chi-square of an estimated sd."""
    z = np.random.default_rng([seed, _NORMAL_STREAM, columns]).standard_normal((columns, draws))
    noise = z.astype(np.float32)
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


def anchor_verdict(
    cells: AnchorCells,
    margin: float,
    settings: ModelSettings,
    fallback: NoiseSource | None = None,
) -> Verdict:
    """P(eps-good) per K and the confident rule's pick. ``margin = log(1 - eps) <= 0``.

    The posterior of each K's centre is ``mean_K + sd / sqrt(n_K) * t_df`` (:class:`_Unit`:
    with replicas, the measured run noise and server offsets together, never less than the
    run noise alone; without, the runs), plus ``server_sd * z_K`` for the assumed server
    offset where there are no replicas. Where no cell has two runs and there are no replicas,
    the run noise is ``fallback`` (:mod:`lib.noise_model`: borrowed, a scaled-inverse-chi-square
    of its degrees of freedom; assumed, known: ``mean_K + sd / sqrt(n_K) * z``); without one
    the noise is unknown and so is P."""
    feasible = ~cells.infeasible
    count = len(cells.ks)
    if not feasible.any() or feasible.sum() == 1:
        # Every K infeasible: they tie at the worst. One feasible K: it is the best.
        p = np.where(feasible, 1.0, 0.0) if feasible.any() else np.ones(count)
        qualifying = cells.ks[p >= settings.confidence].tolist()
        return Verdict(p, p, None, None, None, qualifying[0], qualifying)
    if _replicated(cells, feasible):
        noise = _replica_noise(cells, feasible)
    else:
        noise = _assumed_noise(cells, feasible, settings, fallback)
    unit = _unit(cells, feasible, noise, settings)
    counts, means = unit.counts, unit.means
    if unit.df == 0 and not unit.known:
        best = means.max()
        tied = [k for k, m in zip(cells.ks[feasible], means, strict=True) if m >= best + margin]
        return Verdict(None, None, None, None, None, int(min(tied)), [])
    log_sd, server_variance = unit.log_sd, unit.server_variance
    centred = (means - means.max()).astype(np.float32)[:, np.newaxis]
    mu: NDArray[Any] = centred
    if log_sd > 0.0:
        spread = (log_sd / np.sqrt(counts)).astype(np.float32)[:, np.newaxis]
        if unit.known:
            draws = _known_noise(settings.seed, settings.draws, len(counts))
        else:
            draws = _posterior_noise(settings.seed, settings.draws, unit.df, len(counts))
        mu = draws * spread + mu
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
    shown = calibrated(model[feasible], ratio, peak)
    if noise.run_source is not None and ratio > 0.0:
        # One run per cell (borrowed or assumed noise): the leading K keeps a lapse back.
        leader = int(np.argmax(model[feasible]))
        shown[leader] *= 1.0 - lean_lapse(ratio)
    p[feasible] = np.round(shown, 4)
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


def centre_draws(
    cells: AnchorCells,
    settings: ModelSettings,
    rng: np.random.Generator,
    fallback: NoiseSource | None = None,
) -> NDArray[np.float64] | None:
    """Draws of every K's centre (the mean score, log scale) from the posterior
    :func:`anchor_verdict` decides by (:class:`_Unit`: run noise, measured or assumed server
    offsets), ``settings.draws`` columns, one row per K in ``cells``' order; an infeasible K's
    row is -inf. ``rng`` is the caller's, so that anchors can be drawn independently (the
    verdict's common random numbers make every anchor's draws alike, which is right for one
    anchor's P and wrong for a sum over anchors). ``fallback``: the run noise the anchor
    borrowed or assumed where no cell has two runs (:func:`anchor_verdict`'s); None where the
    noise is unknown (one run per cell, no replicas and no fallback)."""
    feasible = ~cells.infeasible
    draws = np.full((len(cells.ks), settings.draws), -np.inf)
    if feasible.sum() == 0:
        return draws
    if _replicated(cells, feasible):
        noise = _replica_noise(cells, feasible)
    else:
        noise = _assumed_noise(cells, feasible, settings, fallback)
    unit = _unit(cells, feasible, noise, settings)
    if unit.df == 0 and not unit.known:
        return None
    columns = int(feasible.sum())
    mu = np.repeat(unit.means[:, np.newaxis], settings.draws, axis=1)
    if unit.log_sd > 0.0:
        # Known (assumed) noise: normal draws; estimated: Student-t (a scaled-inverse-chi-square
        # variance), as anchor_verdict draws them.
        scale: NDArray[np.float64] | float = 1.0
        if not unit.known:
            chi2 = 2.0 * rng.standard_gamma(unit.df / 2.0, size=settings.draws)
            scale = np.sqrt(unit.df / np.maximum(chi2, np.finfo(float).tiny))
        z = rng.standard_normal((columns, settings.draws))
        mu = mu + (unit.log_sd / np.sqrt(unit.counts))[:, np.newaxis] * scale * z
    if unit.server_variance > 0.0:
        offsets = rng.standard_normal((columns, settings.draws))
        mu = mu + math.sqrt(unit.server_variance) * offsets
    draws[feasible] = mu
    return draws
