"""The rows of the small charts per batch size: each cell's runs as faint points (thinned to
:func:`points_per_cell` per cell, the runs the policy excluded marked), and each cell's median,
MAD band and verdict, of the objective (:func:`objective_cells`) or of the acceptance field
(:func:`acceptance_cells`).

The runs depend on the sweep, the field and the runs the policy excluded, never on a slider:
they are cached, so a slider change only joins new verdicts to them."""

from __future__ import annotations

import functools

import polars as pl

from lib import robust
from lib.schedule import TuningResult
from lib.sweeps import Sweep

#: Above this many runs in one cell, the faint points show evenly spaced order statistics of
#: the runs (minimum, quantiles, maximum) instead of every run: a browser draws a 20,000-run
#: sweep slowly, and the spread looks the same.
MAX_POINTS_PER_CELL = 60
#: Rows one chart embeds at most (while every cell keeps at least its two extreme runs).
MAX_CHART_ROWS = 3000


def _verdicts() -> pl.Expr:
    return (
        pl.when(pl.col("selected"))
        .then(pl.lit("chosen"))
        .when(pl.col("tied"))
        .then(pl.lit("tied"))
        .when(pl.col("status") == "kept")
        .then(pl.lit("kept"))
        .otherwise(pl.lit("rejected"))
        .alias("verdict")
    )


def points_per_cell(cells: int) -> int:
    """How many runs of each cell a chart shows: :data:`MAX_POINTS_PER_CELL`, fewer when the
    chart would otherwise hold more than :data:`MAX_CHART_ROWS` rows, at least 2 (the
    extremes)."""
    return max(2, min(MAX_POINTS_PER_CELL, (MAX_CHART_ROWS - cells) // max(cells, 1)))


def _thin(runs: pl.DataFrame, most: int) -> pl.DataFrame:
    """At most ``most`` runs per (anchor, K), evenly spaced by rank (extremes included)."""
    rank = pl.col("value").rank("ordinal").over("anchor", "k") - 1
    count = pl.len().over("anchor", "k")
    # The rank nearest to each of `most` evenly spaced positions keeps its run.
    step = (count - 1) / (most - 1)
    nearest = ((rank / step).round() * step).round()
    return runs.filter((count <= most) | (rank == nearest))


@functools.lru_cache(maxsize=8)
def _thinned_runs(sweep: Sweep, field: str, most: int) -> pl.DataFrame:
    """Every placed run of ``sweep`` with a finite ``field``, thinned to ``most`` runs per cell
    and sorted. Cached: it depends on the sweep alone, not on the policy's settings, so a
    slider change reuses it (sweeps compare by identity, and the cache holds them)."""
    runs = sweep.runs
    if field not in runs.columns:
        return pl.DataFrame(
            schema={
                "source": pl.Utf8,
                "position": pl.Int64,
                "anchor": pl.Int64,
                "k": pl.Int64,
                "value": pl.Float64,
            }
        )
    points = runs.filter(
        pl.col("anchor").is_not_null() & pl.col("k").is_not_null() & pl.col(field).is_finite()
    ).select("source", "position", "anchor", "k", pl.col(field).cast(pl.Float64).alias("value"))
    return _thin(points, most).sort("anchor", "k", "value")


#: Runs the policy excluded, as a hashable cache key: (source, position, reason) rows.
_Excluded = tuple[tuple[str, int, str], ...]


def _points_key(result: TuningResult, field: str) -> tuple[Sweep, str, int, _Excluded]:
    """What the run points of ``field`` depend on: the sweep, the runs shown per cell and the
    runs the policy excluded."""
    excluded = tuple(result.excluded_runs.select("source", "position", "reason").iter_rows())
    return result.sweep, field, points_per_cell(result.cells.height), excluded


def run_points(result: TuningResult, field: str) -> dict[int, str]:
    """Per anchor, every run with a finite ``field`` at a usable K, with the reason the policy
    excluded it (empty when used); thinned to :func:`points_per_cell` runs per cell; as JSON
    rows for :func:`build_chart`. An anchor without such a run is absent."""
    return _run_rows_by_anchor(*_points_key(result, field))


@functools.lru_cache(maxsize=8)
def _run_rows_by_anchor(sweep: Sweep, field: str, most: int, excluded: _Excluded) -> dict[int, str]:
    """Cached with the frame: a slider change does not even write the runs again."""
    runs = _excluded_marked(sweep, field, most, excluded)
    by_anchor = runs.partition_by("anchor", as_dict=True, maintain_order=True)
    return {anchor: rows.write_json()[1:-1] for (anchor,), rows in by_anchor.items()}


@functools.lru_cache(maxsize=8)
def _excluded_marked(sweep: Sweep, field: str, most: int, excluded: _Excluded) -> pl.DataFrame:
    """Cached: the runs a policy excludes change with the objective or the K field, never
    with a slider."""
    points = _thinned_runs(sweep, field, most)
    reasons = pl.DataFrame(
        list(excluded),
        schema={"source": pl.Utf8, "position": pl.Int64, "reason": pl.Utf8},
        orient="row",
    )
    joined = points.join(reasons, on=["source", "position"], how="left", maintain_order="left")
    return joined.select(
        pl.lit("run").alias("layer"),
        "anchor",
        "k",
        "value",
        pl.format("{} #{}", "source", "position").alias("run"),
        pl.col("reason").fill_null("").alias("excluded"),
    )


def runs_caption(result: TuningResult) -> str:
    most = points_per_cell(result.cells.height)
    largest = result.cells["num_runs"].max() if result.cells.height else 0
    if isinstance(largest, int) and largest > most:
        return f"grey dots: {most} evenly spaced runs of each cell (cells hold up to {largest})"
    return "grey dots: every run"


def _median_band() -> list[pl.Expr | str]:
    """A cell row's start: its layer, anchor, K, runs, median and ``lo``/``hi`` (median -/+
    MAD)."""
    band = [
        (pl.col("median") - pl.col("mad")).alias("lo"),
        (pl.col("median") + pl.col("mad")).alias("hi"),
    ]
    return [pl.lit("cell").alias("layer"), "anchor", "k", "num_runs", "median", *band]


def objective_cells(result: TuningResult) -> pl.DataFrame:
    """One row per (anchor, K): median, ``lo``/``hi`` (median -/+ MAD), conservative score,
    relative MAD, verdict and rejection reason."""
    return result.cells.select(
        *_median_band(),
        "conservative",
        pl.col("relative_mad").round(4),
        _verdicts(),
        pl.col("reason").fill_null(""),
    )


@functools.lru_cache(maxsize=8)
def _used_medians(sweep: Sweep, field: str, most: int, excluded: _Excluded) -> pl.DataFrame:
    """Median and MAD per (anchor, K) of the run points the policy used. Cached like them:
    only the verdicts joined to it change with a slider."""
    return (
        _excluded_marked(sweep, field, most, excluded)
        .filter(pl.col("excluded") == "")
        .group_by("anchor", "k")
        .agg(
            pl.len().cast(pl.Int64).alias("num_runs"),
            robust.median("value").alias("median"),
            robust.median_abs_deviation("value").alias("mad"),
        )
        .sort("anchor", "k")
    )


def acceptance_cells(result: TuningResult, field: str) -> pl.DataFrame:
    """Median and MAD of the acceptance field over the runs the policy used, per (anchor, K),
    with the objective cell's verdict so the chosen K stands out here too."""
    verdicts = result.cells.select("anchor", "k", _verdicts(), "reason")
    return (
        _used_medians(*_points_key(result, field))
        .join(verdicts, on=["anchor", "k"], how="left", maintain_order="left")
        .select(
            *_median_band(),
            pl.col("verdict").fill_null("rejected"),
            pl.col("reason").fill_null(""),
        )
    )
