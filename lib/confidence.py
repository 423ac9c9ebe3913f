"""How sure each pick is: pooled noise per anchor, P(eps-good) per K, outlier runs, and the
``confident`` selection rule (``docs/confidence.md``, "The model").

Data flow (each step a Polars frame with a documented schema):

1. :func:`assess` takes a :class:`lib.schedule.TuningResult` (the seed policy's, from
   :func:`lib.schedule.tune`) and reads the runs behind its cells: :data:`RUN_SCHEMA`, one row
   per usable run with its log-scale score, its residual and its outlier flag.
2. Per anchor, every K's runs are pooled into one noise estimate on the log scale, and seeded
   Monte-Carlo draws from the posterior give each K's probability of being within the tie
   tolerance of the best: :data:`CONFIDENCE_CELL_SCHEMA` (one row per (anchor, K)) and
   :data:`ANCHOR_SCHEMA` (one row per anchor: status, pick, contenders, reasons).
3. :func:`lib.policy.apply_policy` returns the TuningResult to report: the seed's picks
   (``"seed"``) or the confident rule's (``"confident"``), with a ``confidence`` block per
   anchor in its JSON.

The model: ``score = log x`` when maximising, ``-log x`` when minimising, so "higher is better"
either way and a relative tolerance is a fixed distance. ``score = mu_K + sigma * noise`` with
one sigma per anchor; with Jeffreys' prior the posterior is ``sigma^2 = s^2 * df / chi2_df`` and
``mu_K = mean_K + sigma * z_K / sqrt(n_K)`` (so each ``mu_K`` is ``mean_K + s / sqrt(n_K) * t_df``
and the K share one sigma draw). ``P(eps-good, K) = P(mu_K >= max_j mu_j + log(1 - eps))``
is the model's (``p_model``); the P reported and decided on (``p_eps_good``) is calibrated by
simulation (:func:`lib.calibration.calibrated`): the flat prior ignores how close K usually
are and that throughput changes smoothly with K, so at high noise the model's P, above all the
leading K's, is over-confident, and most of all when the leading K is a lone spike above both
neighbours (:func:`lib.calibration.leader_peak`). One anchor's posterior is
:func:`lib.posterior.anchor_verdict`.

Edge cases, each stated in the anchor's ``reasons``/``notes``:

- A zero objective (zero goodput: no request met the SLO) has no logarithm. A K with a zero run
  is **infeasible**: worse than any K that always delivered, so its P(eps-good) is 0, unless
  every K at the anchor is infeasible (then they tie, every P is 1 and the smallest K wins).
- No replicate runs at an anchor (one run per cell, a lean sweep): the run noise is borrowed
  from the sweep's anchors that have replicate runs through a noise model over batch size
  (:mod:`lib.noise_model`), or, where no cell of the sweep has two runs, assumed
  (``--run-cv``); every anchor line of a lean sweep says which (``noise_source``). With
  ``--run-cv 0`` and nothing to borrow, the noise cannot be estimated, so P(eps-good) is
  unknown (null), the anchor is **unresolved**, and the provisional K is the best single run
  (the smallest K within the tolerance of it), as the seed does with ``--min-runs 1``. The
  contenders are then that K, any K tied with it and the strongest challenger (the next best
  run): rerunning those gives the noise estimate where it matters.
- Identical runs: sigma is 0, every draw equals the means, and P is exactly 0 or 1 (nothing to
  calibrate). With any noise a calibrated P is never exactly 0 or 1.
- Flagged runs: the anchor is decided without them (they look like glitches), and is unresolved
  when the leading K changes without them.
- One K at an anchor: it is the best by definition (P = 1).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
from numpy.typing import NDArray

from lib.cells import acceptance_gate, min_runs_gate
from lib.flags import flag_name
from lib.noise_model import MeasuredNoise, NoiseSource, fit_run_noise
from lib.noise_summary import RunNoise, ServerNoise, relative_sd
from lib.numbers import json_float, percent_text
from lib.posterior import (
    AnchorCells,
    Noise,
    Verdict,
    aligned_cells,
    anchor_cells,
    anchor_verdict,
    cell_mean_sd,
    leading_k,
    run_noise_of,
)
from lib.schedule import TuningResult
from lib.servers import serve_combo_expression
from lib.settings import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RUN_CV,
    DEFAULT_SEED,
    DEFAULT_SERVER_CV,
    Options,
    Policy,
)
from lib.sweeps import Sweep

__all__ = [
    "ANCHOR_SCHEMA",
    "CONFIDENCE_CELL_SCHEMA",
    "CONTENDER_PROBABILITY",
    "DEFAULT_DRAWS",
    "MAX_RUNS_NEEDED",
    "MAX_SERVERS_NEEDED",
    "MIN_RUNS_NEEDED",
    "OUTLIER_FACTOR",
    "RUNS_PER_NOISE_RATIO",
    "RUN_SCHEMA",
    "ConfidenceReport",
    "ConfidenceSettings",
    "assess",
    "cell_mean_sd",
    "eligible_cells",
    "log_change_percent",
    "servers_dominate",
]

#: Posterior draws per anchor: the Monte-Carlo error of a P near 0.9 is about 0.003.
DEFAULT_DRAWS = 10_000
#: A K with at least this P(eps-good) could still be the right pick: worth re-measuring.
CONTENDER_PROBABILITY = 0.05
#: A run is flagged when its residual exceeds this many times the anchor's median |residual|.
OUTLIER_FACTOR = 6.0
#: Runs per contender to separate a gap delta at relative noise s with 80 % power, one-sided
#: alpha 0.05, two samples: 2 * (1.645 + 0.842)^2 = 12.4, times (s / delta)^2.
RUNS_PER_NOISE_RATIO = 12.4
#: Past this many runs a gap is not worth resolving: call it a tie (the smaller K).
MAX_RUNS_NEEDED = 10
#: Fewest runs worth asking for: the sweep default, and enough for a per-cell spread.
MIN_RUNS_NEEDED = 3
#: Past this many server starts per (anchor, K) a gap is not worth resolving: call it a tie.
MAX_SERVERS_NEEDED = 6

#: One row per usable run at an eligible cell.
RUN_SCHEMA = pl.Schema(
    {
        "anchor": pl.Int64,
        "k": pl.Int64,
        "source": pl.Utf8,
        "position": pl.Int64,
        "run_number": pl.Int64,
        "server": pl.Utf8,  # the serve combo (one server start); "" outside the sweep's layout
        "value": pl.Float64,  # the objective as measured
        "score": pl.Float64,  # log(value), or -log(value) when minimising; null when infeasible
        "infeasible": pl.Boolean,  # a zero objective when maximising
        "residual": pl.Float64,  # score minus the median score of its cell's runs on its server
        # |residual| > OUTLIER_FACTOR * the anchor's median nonzero |residual|
        "flagged": pl.Boolean,
    }
)

#: One row per (anchor, K) that the rule may pick (enough runs, acceptance not rejected).
CONFIDENCE_CELL_SCHEMA = pl.Schema(
    {
        "anchor": pl.Int64,
        "k": pl.Int64,
        "num_runs": pl.Int64,
        "num_servers": pl.Int64,  # server starts the runs came from (replicas: lib.servers)
        "mean_score": pl.Float64,  # mean of the scores; -inf when infeasible
        "geometric_mean": pl.Float64,  # exp(mean log value): the centre the rule ranks by
        "infeasible": pl.Boolean,
        "flagged_runs": pl.Int64,
        "p_eps_good": pl.Float64,  # calibrated (lib.calibration); null when the noise is unknown
        "p_model": pl.Float64,  # the flat-prior model's P(eps-good), before calibration
        "p_eps_good_without_flagged": pl.Float64,  # null unless the anchor has flagged runs
        "p_model_without_flagged": pl.Float64,  # the same before calibration
        "contender": pl.Boolean,  # P(eps-good) >= CONTENDER_PROBABILITY (see the module doc)
        "runs_needed": pl.Int64,  # total runs this contender needs; null for non-contenders
        # total server starts those runs should come from (see _more_measurement); null for
        # non-contenders and where the noise is unknown
        "servers_needed": pl.Int64,
        "noise_limited": pl.Boolean,  # the formula asked for more than MAX_RUNS_NEEDED
    }
)

#: One row per anchor with at least one eligible cell.
ANCHOR_SCHEMA = pl.Schema(
    {
        "anchor": pl.Int64(),
        "status": pl.Utf8(),  # "resolved" | "unresolved"
        "selected_k": pl.Int64(),  # the confident rule's pick (provisional when unresolved)
        "provisional": pl.Boolean(),
        "qualifying_k": pl.List(pl.Int64),  # K whose P(eps-good) reaches the confidence
        "contenders": pl.List(pl.Int64),
        # the anchor's run noise on the log scale (~ relative noise), between runs of a server
        "pooled_log_sd": pl.Float64(),
        "pooled_df": pl.Int64(),  # degrees of freedom: runs minus servers (feasible cells only)
        # how much server starts of one configuration differ (log scale): measured from the
        # replicas, else the assumed --server-cv; null when the noise is unknown
        "server_log_sd": pl.Float64(),
        "servers_measured": pl.Boolean(),  # the anchor has replicas: the server sd is measured
        "server_df": pl.Int64(),  # degrees of freedom of the measured server sd (0: assumed)
        "noise_ratio": pl.Float64(),  # lib.calibration.noise_ratio; null: noise unknown
        "noise_ratio_without_flagged": pl.Float64(),  # null unless the anchor has flagged runs
        "leader_peak": pl.Float64(),  # lib.calibration.leader_peak; null: noise unknown
        "leader_peak_without_flagged": pl.Float64(),  # null unless the anchor has flagged runs
        # where the run noise came from (lib.noise_model): "measured" here, "borrowed" from
        # the anchors in noise_from, "assumed" (--run-cv); null where the noise is unknown
        "noise_source": pl.Utf8(),
        "noise_from": pl.List(pl.Int64),  # the anchors a borrowed noise was fitted to
        "flagged_runs": pl.Int64(),
        "depends_on_flagged": pl.Boolean(),  # the pick changes when the flagged runs are left out
        "reasons": pl.List(pl.Utf8),  # why the anchor is unresolved (empty when resolved)
        "notes": pl.List(pl.Utf8),  # other things the user should know about this anchor
    }
)


@dataclass(frozen=True)
class ConfidenceSettings:
    """How sure a pick must be, and the Monte-Carlo that measures it.

    ``ordered_k``: the K are draft lengths, so a K standing alone above both neighbours is
    doubted (:func:`lib.calibration.leader_peak`); False where the "K" only label arms with no
    order between them (``tune-spec-k check``), so that which code an arm gets cannot change a
    result.
    """

    confidence: float = DEFAULT_CONFIDENCE
    seed: int = DEFAULT_SEED
    draws: int = DEFAULT_DRAWS
    ordered_k: bool = True
    server_cv: float = DEFAULT_SERVER_CV
    run_cv: float = DEFAULT_RUN_CV

    @classmethod
    def of(cls, options: Options, *, ordered_k: bool = True) -> ConfidenceSettings:
        """The settings the command-line options (``--confidence``, ``--seed``,
        ``--server-cv``, ``--run-cv``) ask for."""
        return cls(
            confidence=options.confidence,
            seed=options.seed,
            ordered_k=ordered_k,
            server_cv=options.server_cv,
            run_cv=options.run_cv,
        )

    def invalid(self) -> list[str]:
        """Human-readable reasons why these settings cannot be used (empty when fine)."""
        reasons = []
        if not 0 < self.confidence <= 1:
            reasons.append(
                f"{flag_name(Options, 'confidence')} {self.confidence}: expected in (0, 1]"
            )
        if self.seed < 0:
            reasons.append(f"{flag_name(Options, 'seed')} {self.seed}: expected >= 0")
        if self.draws < 100:
            reasons.append(f"draws {self.draws}: expected >= 100")
        if not (math.isfinite(self.server_cv) and 0 <= self.server_cv < 1):
            reasons.append(
                f"{flag_name(Options, 'server_cv')} {self.server_cv}: expected a relative"
                " standard deviation in [0, 1), e.g. 0.01 for servers 1 % apart"
            )
        if not (math.isfinite(self.run_cv) and 0 <= self.run_cv < 1):
            reasons.append(
                f"{flag_name(Options, 'run_cv')} {self.run_cv}: expected a relative standard"
                " deviation in [0, 1), e.g. 0.02 for runs 2 % apart (0: assume nothing)"
            )
        return reasons

    def assumed_run_noise(self) -> NoiseSource | None:
        """The run noise ``--run-cv`` assumes where nothing was replicated (known, as a
        log-normal's log sd); None with ``--run-cv 0``: assume nothing."""
        if self.run_cv <= 0:
            return None
        return NoiseSource("assumed", math.sqrt(math.log1p(self.run_cv**2)), 0)

    @property
    def server_log_variance(self) -> float:
        """The assumed variance of a server's offset on the log scale: a log-normal offset of
        relative standard deviation ``cv`` has ``var(log) = log(1 + cv^2)``."""
        return math.log1p(self.server_cv**2)


def _server_noise_of(
    noises: Mapping[int, Noise], settings: ConfidenceSettings, runs: RunNoise | None
) -> ServerNoise:
    measured = {anchor: n for anchor, n in noises.items() if n.measured}
    df = sum(n.server_df for n in measured.values())
    excess = sum(n.server_df * (n.server_excess or 0.0) for n in measured.values())
    return ServerNoise(
        assumed_cv=settings.server_cv,
        measured_at=tuple(sorted(measured)),
        assumed_at=tuple(sorted(a for a, n in noises.items() if not n.measured)),
        measured_sd=math.sqrt(max(excess / df, 0.0)) if df else None,
        measured_df=df,
        runs=runs,
    )


@dataclass(frozen=True, eq=False)
class ConfidenceReport:
    """Everything :func:`assess` found; frames follow the schemas above, sorted by anchor, K."""

    settings: ConfidenceSettings
    tolerance: float
    maximize: bool
    runs: pl.DataFrame
    cells: pl.DataFrame
    anchors: pl.DataFrame
    servers: ServerNoise = dataclasses.field(default_factory=lambda: ServerNoise(DEFAULT_SERVER_CV))
    #: Per anchor without a cell of two runs (and without replicas): the run noise it borrowed
    #: or assumed (:func:`_fallback_noise`), the one its P rests on; absent elsewhere.
    fallbacks: Mapping[int, NoiseSource | None] = dataclasses.field(default_factory=dict)

    def blocks(self) -> dict[int, dict[str, Any]]:
        """The ``batch_decisions[i]["confidence"]`` block per anchor: ``status``,
        ``p_eps_good``, ``contenders``, ``runs_needed`` (K as strings, as JSON keys are), then
        the rule's pick, the pooled noise, the flagged runs and the reasons."""
        by_anchor: dict[int, list[dict[str, Any]]] = {}
        for cell in self.cells.to_dicts():
            by_anchor.setdefault(cell["anchor"], []).append(cell)
        flagged: dict[int, list[dict[str, Any]]] = {}
        for run in self.runs.filter(pl.col("flagged")).to_dicts():
            flagged.setdefault(run["anchor"], []).append(
                {
                    "k": run["k"],
                    "file": run["source"],
                    "position": run["position"],
                    "run_number": run["run_number"],
                    "value": run["value"],
                    "vs_cell_median_percent": json_float(
                        log_change_percent(run["residual"], self.maximize)
                    ),
                }
            )
        blocks = {}
        for row in self.anchors.to_dicts():
            cells = by_anchor.get(row["anchor"], [])
            block: dict[str, Any] = {
                "status": row["status"],
                "p_eps_good": {str(c["k"]): c["p_eps_good"] for c in cells},
                "contenders": list(row["contenders"]),
                "runs_needed": {
                    str(c["k"]): c["runs_needed"] for c in cells if c["runs_needed"] is not None
                },
                "selected_k": row["selected_k"],
                "provisional": row["provisional"],
                "pooled_log_sd": json_float(row["pooled_log_sd"], 6),
                "pooled_df": row["pooled_df"],
                "num_servers": {str(c["k"]): c["num_servers"] for c in cells},
                "servers_needed": {
                    str(c["k"]): c["servers_needed"]
                    for c in cells
                    if c["servers_needed"] is not None
                },
                "server_log_sd": json_float(row["server_log_sd"], 6),
                "servers_measured": row["servers_measured"],
                "server_df": row["server_df"],
                "flagged_runs": flagged.get(row["anchor"], []),
                "depends_on_flagged_runs": row["depends_on_flagged"],
                "reasons": list(row["reasons"]),
                "notes": list(row["notes"]),
            }
            if row["flagged_runs"]:
                block["p_eps_good_without_flagged"] = {
                    str(c["k"]): c["p_eps_good_without_flagged"] for c in cells
                }
            if self.servers.runs is not None:  # a lean sweep: where each anchor's noise is from
                block["run_noise"] = {
                    "source": row["noise_source"],
                    "run_cv": json_float(
                        None if row["pooled_log_sd"] is None else relative_sd(row["pooled_log_sd"]),
                        6,
                    ),
                    "df": row["pooled_df"],
                    "borrowed_from": list(row["noise_from"]),
                }
            blocks[row["anchor"]] = block
        return blocks

    def settings_json(self, policy: Policy) -> dict[str, Any]:
        """The ``decision_policy`` key of the result JSON: which rule picked, and how."""
        return {
            "policy": policy,
            "confidence": self.settings.confidence,
            "tie_tolerance": self.tolerance,
            "monte_carlo_seed": self.settings.seed,
            "monte_carlo_draws": self.settings.draws,
            "server_cv": self.settings.server_cv,
            **({} if self.servers.runs is None else {"run_cv": self.settings.run_cv}),
            "servers": self.servers.to_json(),
            "outlier_factor": OUTLIER_FACTOR,
            "contender_probability": CONTENDER_PROBABILITY,
            "max_runs_needed": MAX_RUNS_NEEDED,
        }


# --------------------------------------------------------------------------- runs


def eligible_cells(result: TuningResult) -> pl.DataFrame:
    """The (anchor, K) cells either rule may pick: enough runs (``--min-runs``) and acceptance
    not rejected. Unlike the seed, the confident rule keeps cells the relative-MAD gate
    rejects: it weighs their noise through the pooled estimate instead of discarding them."""
    cells = result.cells
    if cells.is_empty():
        return cells.select("anchor", "k")
    too_few, _ = min_runs_gate(cells, result.settings.min_runs)
    acceptance, _ = acceptance_gate(cells, result.settings)
    keep = too_few.is_null() & acceptance.is_null() & (cells["num_runs"] > 0)
    return cells.filter(keep).select("anchor", "k")


def _run_filters(
    result: TuningResult,
) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[int, int], ...]]:
    """What picks the usable runs besides the sweep and the objective, as hashable keys: the
    runs a gate excluded (source, position) and the cells no rule may pick (anchor, K). A
    healthy sweep has neither, and neither changes with the tie tolerance or the MAD penalty."""
    excluded = tuple(result.excluded_runs.select("source", "position").iter_rows())
    ineligible = result.cells.select("anchor", "k").join(
        eligible_cells(result), on=["anchor", "k"], how="anti"
    )
    return excluded, tuple(ineligible.iter_rows())


@dataclass(frozen=True, eq=False)
class _Scored:
    """The usable runs and, per anchor, their cells as arrays, with and without flagged runs
    (the latter only at anchors with flagged runs)."""

    runs: pl.DataFrame
    cells: dict[int, AnchorCells]
    clean: dict[int, AnchorCells]
    flags_at: Counter[tuple[int, int]]


@functools.lru_cache(maxsize=8)
def _scored(
    sweep: Sweep,
    objective: str,
    maximize: bool,
    excluded: tuple[tuple[str, int], ...],
    ineligible: tuple[tuple[int, int], ...],
) -> _Scored:
    """Cached: a slider of the app that moves only the tolerance, the penalty or the noise
    threshold reuses it (sweeps compare by identity; their frames are immutable)."""
    runs = sweep.runs
    if objective not in runs.columns or runs.is_empty():
        return _Scored(pl.DataFrame(schema=RUN_SCHEMA), {}, {}, Counter())
    value = pl.col(objective)
    infeasible = (value == 0.0) if maximize else pl.lit(False)
    log_value = pl.when(value > 0).then(value.log())
    score = log_value if maximize else -log_value
    scored = runs.lazy().select(
        "anchor",
        "k",
        "source",
        "position",
        "run_number",
        serve_combo_expression().fill_null("").alias("server"),
        value.cast(pl.Float64).alias("value"),
        score.alias("score"),
        infeasible.alias("infeasible"),
    )
    # Both joins cost more than the rest together; a healthy sweep needs neither.
    if excluded:
        left_out = pl.LazyFrame(
            excluded, schema={"source": pl.Utf8, "position": pl.Int64}, orient="row"
        )
        scored = scored.join(left_out, on=["source", "position"], how="anti")
    if ineligible:
        unpicked = pl.LazyFrame(
            ineligible, schema={"anchor": pl.Int64, "k": pl.Int64}, orient="row"
        )
        scored = scored.join(unpicked, on=["anchor", "k"], how="anti")
    placed = pl.col("anchor").is_not_null() & pl.col("k").is_not_null()
    scored = scored.filter(pl.col("value").is_not_null() & placed)
    # Against the run's own server (its cell's one server where there are no replicas): a
    # whole server off is a server offset, which the model weighs, not a glitch.
    residual = pl.col("score") - pl.col("score").median().over("anchor", "k", "server")
    spread = pl.col("_abs").filter(pl.col("_abs") > 0).median().over("anchor")
    usable = (
        scored.with_columns(residual.alias("residual"))
        .with_columns(pl.col("residual").abs().alias("_abs"))
        .with_columns((pl.col("_abs") > OUTLIER_FACTOR * spread).fill_null(False).alias("flagged"))
        # The loader's run order is deterministic: keep it within a cell (sorting by the file
        # names too would cost more than everything else here).
        .sort("anchor", "k", maintain_order=True)
        .select(list(RUN_SCHEMA))
        .cast(RUN_SCHEMA)
        .collect()
    )
    flagged = usable.filter(pl.col("flagged"))
    # The same anchors again without their flagged runs, to see whether the pick depends on them.
    at_flagged_anchors = pl.col("anchor").is_in(flagged["anchor"].unique().implode())
    return _Scored(
        runs=usable,
        cells=anchor_cells(usable),
        clean=anchor_cells(usable.filter(at_flagged_anchors & ~pl.col("flagged"))),
        flags_at=Counter(zip(flagged["anchor"].to_list(), flagged["k"].to_list(), strict=True)),
    )


def servers_dominate(run_sd: float, server_sd: float, runs: int, servers: int) -> bool:
    """Whether server offsets are at least half of a cell mean's variance
    (``server_sd^2 / servers >= run_sd^2 / runs``): then new server starts reduce the error
    that matters, and more runs on as many servers barely do. Ties go to the servers, except
    with no noise at all (then neither helps, and the runs' cap says so)."""
    return server_sd > 0 and server_sd**2 / servers >= run_sd**2 / runs


def _more_measurement(
    cells: AnchorCells, contenders: NDArray[np.bool_], noise: Noise | None, margin: float
) -> tuple[list[int | None], list[int | None], list[bool]]:
    """Per contender, the total runs and server starts to tell it from its nearest rival:
    a cell-mean variance of at most ``delta^2 / 12.4`` (80 % power, one-sided alpha 0.05),
    ``delta`` the gap to the leading K (for the leader, to the best other contender), at
    least the tie tolerance (smaller gaps are ties anyway).

    Where run noise dominates (:func:`servers_dominate` false): ``12.4 * (s / delta)^2`` runs,
    between MIN_ and MAX_RUNS_NEEDED, on one more server start (a follow-up sweep starts its
    own). Where server offsets dominate: ``(server_sd^2 + s^2 / n) * 12.4 / delta^2`` server
    starts of ``n`` runs each (``n`` the cell's runs per server so far), between one more than
    now and MAX_SERVERS_NEEDED, and their runs. ``limited`` where the formula asked for more
    than either cap: the gap is not worth resolving (call it a tie), or no number would do
    (two K measured alike with a tolerance of 0). Without a noise estimate: MIN_RUNS_NEEDED
    runs, enough to estimate it, and no server count."""
    size = len(cells.ks)
    runs: list[int | None] = [None] * size
    servers: list[int | None] = [None] * size
    limited = [False] * size
    indices = [i for i in range(size) if contenders[i]]
    if not indices:
        return runs, servers, limited
    leader = max(indices, key=lambda i: (cells.means[i], -i))
    for i in indices:
        if noise is None:
            runs[i] = MIN_RUNS_NEEDED
            continue
        rivals = [j for j in indices if j != i] if i == leader else [leader]
        gap = min((abs(cells.means[i] - cells.means[j]) for j in rivals), default=math.inf)
        delta = max(gap, -margin)
        run_sd, server_sd = noise.run_sd or 0.0, noise.server_sd
        count, started = int(cells.counts[i]), int(cells.servers[i])
        if servers_dominate(run_sd, server_sd, count, started):
            per_server = max(round(count / started), 1)
            one_server = server_sd**2 + run_sd**2 / per_server
            wanted = math.inf if delta == 0 else RUNS_PER_NOISE_RATIO * one_server / delta**2
            limited[i] = wanted > MAX_SERVERS_NEEDED
            # An exact tie (no gap, no tolerance) needs infinitely many: capped before ceil,
            # which has no integer for infinity.
            total = MAX_SERVERS_NEEDED if limited[i] else max(math.ceil(wanted), started + 1)
            servers[i], runs[i] = total, total * per_server
            continue
        wanted = math.inf if delta == 0 else RUNS_PER_NOISE_RATIO * (run_sd / delta) ** 2
        limited[i] = wanted > MAX_RUNS_NEEDED
        runs[i] = MAX_RUNS_NEEDED if limited[i] else max(math.ceil(wanted), MIN_RUNS_NEEDED)
        servers[i] = started + 1
    return runs, servers, limited


def _best_and_challenger(cells: AnchorCells, margin: float) -> NDArray[np.bool_]:
    """Contenders where the noise is unknown: the best single run, every K within the tie
    tolerance of it, and the strongest challenger (the next best), as in LUCB-style best-arm
    identification: rerunning these estimates the noise where it decides."""
    order = np.argsort(-cells.means, kind="stable")
    chosen: NDArray[np.bool_] = cells.means >= cells.means[order[0]] + margin
    chosen[order[:2]] = True
    return chosen & ~cells.infeasible


# --------------------------------------------------------------------------- the report


def assess(result: TuningResult, settings: ConfidenceSettings | None = None) -> ConfidenceReport:
    """P(eps-good) per (anchor, K), the confident rule's pick and status per anchor, and
    flagged runs, for the cells of ``result`` either rule may pick (:func:`eligible_cells`).

    Deterministic: the same result and settings give the same frames, bit for bit.
    """
    return _assess(
        _scored(
            result.sweep, result.settings.objective, result.settings.maximize, *_run_filters(result)
        ),
        result.settings.relative_tolerance,
        result.settings.maximize,
        settings or ConfidenceSettings(),
    )


@functools.lru_cache(maxsize=8)
def _assess(
    scored: _Scored, tolerance: float, maximize: bool, settings: ConfidenceSettings
) -> ConfidenceReport:
    """Cached: the app's decision-rule toggle, penalty and noise sliders reuse the report."""
    margin = math.log1p(-tolerance) if 0 <= tolerance < 1 else 0.0
    runs, clean, flags_at = scored.runs, scored.clean, scored.flags_at
    cell_columns: dict[str, list[Any]] = {name: [] for name in CONFIDENCE_CELL_SCHEMA}
    anchor_columns: dict[str, list[Any]] = {name: [] for name in ANCHOR_SCHEMA}
    noises: dict[int, Noise] = {}
    fallbacks, fitted = _fallback_noise(scored, settings)
    lean = any(source is not None for source in fallbacks.values())
    run_flag = flag_name(Options, "run_cv")
    for anchor, cells in scored.cells.items():
        fallback = fallbacks.get(anchor)
        verdict = anchor_verdict(cells, margin, settings, fallback)
        ks: list[int] = cells.ks.tolist()
        flags = [flags_at.get((anchor, k), 0) for k in ks]
        reasons: list[str] = []
        notes: list[str] = []
        without: Verdict | None = None
        if sum(flags) and anchor in clean:
            without = anchor_verdict(
                aligned_cells(clean[anchor], cells), margin, settings, fallback
            )
        # Flagged runs look like glitches (a run 20 % low): the anchor is decided without them,
        # unless the leading K changes when they are left out (then it is unresolved).
        decision = verdict if without is None else without
        leading = leading_k(verdict, cells.ks)
        leading_without = leading if without is None else leading_k(without, cells.ks)
        depends = leading_without != leading
        pick = decision.pick
        resolved = bool(decision.qualifying) and not depends
        if verdict.p is None:
            reasons.append(
                "no replicate runs: the noise cannot be estimated, so P(eps-good) is unknown"
                " (the provisional K is the best single run)"
            )
        elif not decision.qualifying:
            reasons.append(
                f"no K reaches P(eps-good) >= {settings.confidence:g}"
                + ("" if without is None else " without the flagged runs")
            )
        if depends:
            reasons.append(
                f"the pick depends on flagged run(s): with them K={leading}, without them"
                f" K={leading_without} (provisional: the flagged runs look like glitches;"
                " re-measure)"
            )
        if cells.infeasible.all():
            notes.append("every K has a zero objective here (infeasible): they tie")
        elif cells.infeasible.any():
            bad = [k for k, off in zip(ks, cells.infeasible, strict=True) if off]
            notes.append(f"K={bad} had a zero objective (infeasible): never preferred")
        p = verdict.p
        if p is None:
            contenders = _best_and_challenger(cells, margin)
        else:
            contenders = (p >= CONTENDER_PROBABILITY) & ~cells.infeasible
        if not contenders.any():
            contenders = cells.ks == pick
        needed, servers_needed, limited = _more_measurement(
            cells, contenders, verdict.noise, margin
        )
        noise = verdict.noise
        source = _noise_source(noise)
        if noise is not None:
            stated = source is not None and (noise.run_source is not None or noise.run_df > 0)
            if lean and stated and source is not None:
                notes.append(source.statement(run_flag))
            notes.append(server_note(noise, settings))
            noises[anchor] = noise
        unknown = [None] * len(ks)
        for name, values in (
            ("anchor", [anchor] * len(ks)),
            ("k", ks),
            ("num_runs", cells.counts.tolist()),
            ("num_servers", cells.servers.tolist()),
            ("mean_score", cells.means.tolist()),
            ("infeasible", cells.infeasible.tolist()),
            ("flagged_runs", flags),
            ("p_eps_good", unknown if p is None else p.tolist()),
            ("p_model", unknown if verdict.model is None else verdict.model.tolist()),
            (
                "p_eps_good_without_flagged",
                unknown if without is None or without.p is None else without.p.tolist(),
            ),
            (
                "p_model_without_flagged",
                unknown if without is None or without.model is None else without.model.tolist(),
            ),
            ("contender", contenders.tolist()),
            ("runs_needed", needed),
            ("servers_needed", servers_needed),
            ("noise_limited", limited),
        ):
            cell_columns[name] += values
        for name, value in (
            ("anchor", anchor),
            ("status", "resolved" if resolved else "unresolved"),
            ("selected_k", pick),
            ("provisional", not resolved),
            ("qualifying_k", decision.qualifying),
            ("contenders", cells.ks[contenders].tolist()),
            ("pooled_log_sd", None if noise is None else noise.run_sd),
            ("pooled_df", 0 if noise is None else noise.run_df),
            ("server_log_sd", None if noise is None else noise.server_sd),
            ("servers_measured", None if noise is None else noise.measured),
            ("server_df", 0 if noise is None else noise.server_df),
            ("noise_ratio", verdict.ratio),
            ("noise_ratio_without_flagged", None if without is None else without.ratio),
            ("leader_peak", verdict.peak),
            ("leader_peak_without_flagged", None if without is None else without.peak),
            ("noise_source", None if source is None else source.source),
            ("noise_from", [] if source is None else list(source.from_anchors)),
            ("flagged_runs", sum(flags)),
            ("depends_on_flagged", depends),
            ("reasons", reasons),
            ("notes", notes),
        ):
            anchor_columns[name].append(value)
    return ConfidenceReport(
        settings=settings,
        tolerance=tolerance,
        maximize=maximize,
        runs=runs,
        cells=pl.DataFrame(
            {**cell_columns, "geometric_mean": None}, schema=CONFIDENCE_CELL_SCHEMA
        ).with_columns(
            # exp(-inf) = 0: an infeasible (zero) cell's centre is 0 when maximising.
            (pl.col("mean_score") if maximize else -pl.col("mean_score"))
            .exp()
            .alias("geometric_mean")
        ),
        anchors=pl.DataFrame(anchor_columns, schema=ANCHOR_SCHEMA),
        servers=_server_noise_of(
            noises, settings, _run_noise_summary(fallbacks, fitted, settings) if lean else None
        ),
        fallbacks=fallbacks,
    )


def _fallback_noise(
    scored: _Scored, settings: ConfidenceSettings
) -> tuple[dict[int, NoiseSource | None], tuple[MeasuredNoise, ...]]:
    """Per anchor without a cell of two runs (and without replicas): the run noise borrowed
    from the anchors that measured it (:func:`lib.noise_model.fit_run_noise`; their noise
    without their flagged runs, which would inflate it), else the one ``--run-cv`` assumes,
    else None. Anchors that measure their own noise get None. Also the measured anchors the
    model was fitted to."""
    measured: list[MeasuredNoise] = []
    unmeasured: list[int] = []
    for anchor, cells in scored.cells.items():
        own = scored.clean.get(anchor, cells)
        run_sd, run_df = run_noise_of(own)
        if run_df > 0 and run_sd is not None:
            replicated = int(np.count_nonzero((own.counts >= 2) & ~own.infeasible))
            measured.append(MeasuredNoise(anchor, run_sd, run_df, replicated))
        elif not (cells.servers > 1).any():
            unmeasured.append(anchor)
    fitted = tuple(m for m in measured if m.log_sd > 0)
    fallbacks: dict[int, NoiseSource | None] = {}
    for anchor in unmeasured:
        if fitted:
            fallbacks[anchor] = fit_run_noise(fitted, anchor)
        elif measured:  # every measured anchor's runs were identical: no noise to borrow
            fallbacks[anchor] = NoiseSource(
                "borrowed",
                0.0,
                0,
                tuple(m.anchor for m in measured),
                sum(m.cells for m in measured),
                sum(m.df for m in measured),
            )
            fitted = tuple(measured)
        else:
            fallbacks[anchor] = settings.assumed_run_noise()
    return fallbacks, fitted


def _noise_source(noise: Noise | None) -> NoiseSource | None:
    """Where an anchor's run noise came from: borrowed or assumed (``run_source``), else
    measured here; None where the noise is unknown."""
    if noise is None:
        return None
    if noise.run_source is not None:
        return noise.run_source
    return NoiseSource("measured", noise.run_sd or 0.0, noise.run_df)


def _run_noise_summary(
    fallbacks: Mapping[int, NoiseSource | None],
    fitted: Sequence[MeasuredNoise],
    settings: ConfidenceSettings,
) -> RunNoise:
    """The sweep's :class:`RunNoise`: which anchors measured, borrowed or assumed."""
    kinds = {anchor: None if f is None else f.source for anchor, f in fallbacks.items()}
    return RunNoise(
        assumed_cv=settings.run_cv,
        measured_at=tuple(sorted(m.anchor for m in fitted)),
        borrowed_at=tuple(sorted(a for a, kind in kinds.items() if kind == "borrowed")),
        assumed_at=tuple(sorted(a for a, kind in kinds.items() if kind == "assumed")),
        borrowed_from=tuple(sorted(m.anchor for m in fitted)),
        borrowed_cells=sum(m.cells for m in fitted),
        borrowed_df=sum(m.df for m in fitted),
    )


def server_note(noise: Noise, settings: ConfidenceSettings) -> str:
    """What the anchor's P(eps-good) assumes about server starts, said with every status
    (resolved or not): measured from replicas, or the assumed ``--server-cv``."""
    flag = flag_name(Options, "server_cv")
    if noise.measured:
        return (
            f"server replicas: servers of one configuration vary by"
            f" {percent_text(relative_sd(noise.server_sd) * 100)} here (measured, {noise.server_df}"
            f" degrees of freedom; {flag} is not used)"
        )
    return (
        f"no server replicas: assumes servers vary by at most"
        f" {percent_text(settings.server_cv * 100)} ({flag})"
    )


# --------------------------------------------------------------------------- helpers


def log_change_percent(log_residual: float | None, maximize: bool) -> float | None:
    """A log-scale residual as a percent change of the objective itself."""
    if log_residual is None or not math.isfinite(log_residual):
        return None
    return (math.exp(log_residual if maximize else -log_residual) - 1) * 100
