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
3. :func:`apply_policy` returns the TuningResult to report: the seed's picks (``"seed"``) or the
   confident rule's (``"confident"``), with a ``confidence`` block per anchor in its JSON.

The model: ``score = log x`` when maximising, ``-log x`` when minimising, so "higher is better"
either way and a relative tolerance is a fixed distance. ``score = mu_K + sigma * noise`` with
one sigma per anchor; with Jeffreys' prior the posterior is ``sigma^2 = s^2 * df / chi2_df`` and
``mu_K = mean_K + sigma * z_K / sqrt(n_K)`` (so each ``mu_K`` is ``mean_K + s / sqrt(n_K) * t_df``
and the K share one sigma draw). ``P(eps-good, K) = P(mu_K >= max_j mu_j + log(1 - eps))``
is the model's (``p_model``); the P reported and decided on (``p_eps_good``) is calibrated by
simulation (:func:`calibrated`): the flat prior ignores how close K usually are and that
throughput changes smoothly with K, so at high noise the model's P, above all the leading K's,
is over-confident, and most of all when the leading K is a lone spike above both neighbours
(:func:`leader_peak`).

Edge cases, each stated in the anchor's ``reasons``/``notes``:

- A zero objective (zero goodput: no request met the SLO) has no logarithm. A K with a zero run
  is **infeasible**: worse than any K that always delivered, so its P(eps-good) is 0, unless
  every K at the anchor is infeasible (then they tie, every P is 1 and the smallest K wins).
- No replicate runs at an anchor (one run per cell): the noise cannot be estimated, so
  P(eps-good) is unknown (null), the anchor is **unresolved**, and the provisional K is the
  best single run (the smallest K within the tolerance of it), as the seed does with
  ``--min-runs 1``. The contenders are then that K, any K tied with it and the strongest
  challenger (the next best run): rerunning those gives the noise estimate where it matters.
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

from lib.flags import flag_name
from lib.numbers import percent_text
from lib.problems import Problem, Severity
from lib.schedule import TuningResult, acceptance_gate, decide, decided_schedule, min_runs_gate
from lib.servers import serve_combo_expression
from lib.settings import DEFAULT_CONFIDENCE, DEFAULT_SEED, DEFAULT_SERVER_CV, Options, Policy
from lib.sweeps import Sweep

__all__ = [
    "ANCHOR_SCHEMA",
    "CALIBRATION_CLIP",
    "CALIBRATION_KNOTS",
    "CONFIDENCE_CELL_SCHEMA",
    "CONTENDER_PROBABILITY",
    "DEFAULT_DRAWS",
    "LEADER_CALIBRATION",
    "MAX_RUNS_NEEDED",
    "MAX_SERVERS_NEEDED",
    "MIN_RUNS_NEEDED",
    "OTHER_CALIBRATION",
    "OUTLIER_FACTOR",
    "PEAK_CAP",
    "RUNS_PER_NOISE_RATIO",
    "RUN_SCHEMA",
    "ConfidenceReport",
    "ConfidenceSettings",
    "DecisionPolicy",
    "ServerNoise",
    "apply_policy",
    "assess",
    "calibrated",
    "calibration_inputs",
    "cell_mean_sd",
    "combined_servers",
    "eligible_cells",
    "knot_weights",
    "leader_peak",
    "log_change_percent",
    "noise_ratio",
    "policy_differences",
    "relative_sd",
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

_NORMAL_STREAM = 1
_CHI2_STREAM = 2
_SERVER_STREAM = 3

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
        "p_eps_good": pl.Float64,  # calibrated (see calibrated); null when the noise is unknown
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
        "noise_ratio": pl.Float64(),  # see noise_ratio; null when the noise is unknown
        "noise_ratio_without_flagged": pl.Float64(),  # null unless the anchor has flagged runs
        "leader_peak": pl.Float64(),  # see leader_peak; null when the noise is unknown
        "leader_peak_without_flagged": pl.Float64(),  # null unless the anchor has flagged runs
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
    doubted (:func:`leader_peak`); False where the "K" only label arms with no order between
    them (``tune-spec-k check``), so that which code an arm gets cannot change a result.
    """

    confidence: float = DEFAULT_CONFIDENCE
    seed: int = DEFAULT_SEED
    draws: int = DEFAULT_DRAWS
    ordered_k: bool = True
    server_cv: float = DEFAULT_SERVER_CV

    @classmethod
    def of(cls, options: Options, *, ordered_k: bool = True) -> ConfidenceSettings:
        """The settings the command-line options (``--confidence``, ``--seed``,
        ``--server-cv``) ask for."""
        return cls(
            confidence=options.confidence,
            seed=options.seed,
            ordered_k=ordered_k,
            server_cv=options.server_cv,
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
        return reasons

    @property
    def server_log_variance(self) -> float:
        """The assumed variance of a server's offset on the log scale: a log-normal offset of
        relative standard deviation ``cv`` has ``var(log) = log(1 + cv^2)``."""
        return math.log1p(self.server_cv**2)


@dataclass(frozen=True)
class ServerNoise:
    """What the report's P(eps-good) take of server starts, over the whole sweep
    (docs/confidence.md, "Servers"): which anchors measured the server offsets from replicas,
    which assumed ``--server-cv``, and the measured sd pooled over the anchors that have it
    (``sum(df * excess) / sum(df)`` of each anchor's method-of-moments excess, then clipped
    at 0; log scale)."""

    assumed_cv: float
    measured_at: tuple[int, ...] = ()
    assumed_at: tuple[int, ...] = ()
    measured_sd: float | None = None
    measured_df: int = 0

    @property
    def measured_cv(self) -> float | None:
        """The measured sd as a relative one (None without replicas)."""
        return None if self.measured_sd is None else relative_sd(self.measured_sd)

    def statement(self) -> str | None:
        """The assumption every "resolved" and the verdict rest on, in one sentence (None
        where no anchor's noise is known: then no P is stated at all)."""
        flag = flag_name(Options, "server_cv")
        assumed = (
            f"assumes servers vary by at most {percent_text(self.assumed_cv * 100)} ({flag};"
            " measure it with tune-spec-k plan --server-replicas)"
        )
        if self.measured_cv is None:
            return f"no server replicas: P(eps-good) {assumed}" if self.assumed_at else None
        measured = (
            f"servers of one configuration vary by {percent_text(self.measured_cv * 100)}"
            f" (measured, {self.measured_df} degrees of freedom)"
        )
        if not self.assumed_at:
            return f"server replicas: {measured}"
        where = ", ".join(str(anchor) for anchor in self.measured_at)
        return (
            f"server replicas at batch sizes {where}: {measured}; elsewhere P(eps-good) {assumed}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "assumed_server_cv": self.assumed_cv,
            "measured_server_cv": _rounded(self.measured_cv, 6),
            "measured_df": self.measured_df,
            "measured_at": list(self.measured_at),
            "assumed_at": list(self.assumed_at),
            "statement": self.statement(),
        }


def combined_servers(parts: Sequence[ServerNoise], assumed_cv: float) -> ServerNoise:
    """Several reports' server noise as one (a context grid's points): the anchors of each,
    and the measured sd pooled by degrees of freedom (``sqrt(sum(df * sd^2) / sum(df))``)."""
    df = sum(part.measured_df for part in parts)
    squares = sum(part.measured_df * (part.measured_sd or 0.0) ** 2 for part in parts)
    return ServerNoise(
        assumed_cv=assumed_cv,
        measured_at=tuple(sorted({a for part in parts for a in part.measured_at})),
        assumed_at=tuple(sorted({a for part in parts for a in part.assumed_at})),
        measured_sd=math.sqrt(squares / df) if df else None,
        measured_df=df,
    )


def _server_noise_of(noises: Mapping[int, _Noise], settings: ConfidenceSettings) -> ServerNoise:
    measured = {anchor: n for anchor, n in noises.items() if n.measured}
    df = sum(n.server_df for n in measured.values())
    excess = sum(n.server_df * (n.server_excess or 0.0) for n in measured.values())
    return ServerNoise(
        assumed_cv=settings.server_cv,
        measured_at=tuple(sorted(measured)),
        assumed_at=tuple(sorted(a for a, n in noises.items() if not n.measured)),
        measured_sd=math.sqrt(max(excess / df, 0.0)) if df else None,
        measured_df=df,
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
                    "vs_cell_median_percent": _rounded(
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
                "pooled_log_sd": _rounded(row["pooled_log_sd"], 6),
                "pooled_df": row["pooled_df"],
                "num_servers": {str(c["k"]): c["num_servers"] for c in cells},
                "servers_needed": {
                    str(c["k"]): c["servers_needed"]
                    for c in cells
                    if c["servers_needed"] is not None
                },
                "server_log_sd": _rounded(row["server_log_sd"], 6),
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
    cells: dict[int, _Cells]
    clean: dict[int, _Cells]
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
        cells=_cell_arrays(usable),
        clean=_cell_arrays(usable.filter(at_flagged_anchors & ~pl.col("flagged"))),
        flags_at=Counter(zip(flagged["anchor"].to_list(), flagged["k"].to_list(), strict=True)),
    )


# --------------------------------------------------------------------------- one anchor


@dataclass(frozen=True)
class _Cells:
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


def _unit(cells: _Cells, feasible: NDArray[np.bool_], settings: ConfidenceSettings) -> _Unit:
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
class _Noise:
    """An anchor's two noise components on the log scale (docs/confidence.md, "Servers")."""

    run_sd: float | None  # between runs of one server; None without two runs on one server
    run_df: int
    server_sd: float  # between server starts of one configuration: measured, or assumed
    server_df: int  # 0: assumed (no replicas)
    measured: bool
    #: Measured only: the server variance before clipping at 0 (what the sweep pools).
    server_excess: float | None = None


def _noise(cells: _Cells, feasible: NDArray[np.bool_], unit: _Unit) -> _Noise:
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
        return _Noise(run_sd, run_df, math.sqrt(unit.server_variance), 0, False)
    per_server = float(np.mean(cells.servers[feasible] / cells.counts[feasible]))
    excess = unit.log_sd**2 - (run_sd or 0.0) ** 2 * per_server
    return _Noise(run_sd, run_df, math.sqrt(max(excess, 0.0)), unit.df, True, excess)


@dataclass(frozen=True)
class _Verdict:
    p: NDArray[np.float64] | None  # calibrated; None: the noise cannot be estimated
    model: NDArray[np.float64] | None  # the flat-prior model's P, before calibration
    noise: _Noise | None  # None when the noise cannot be estimated
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


def _verdict(cells: _Cells, margin: float, settings: ConfidenceSettings) -> _Verdict:
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
        return _Verdict(p, p, None, None, None, qualifying[0], qualifying)
    unit = _unit(cells, feasible, settings)
    counts, means = unit.counts, unit.means
    if unit.df == 0:
        best = means.max()
        tied = [k for k, m in zip(cells.ks[feasible], means, strict=True) if m >= best + margin]
        return _Verdict(None, None, None, None, None, int(min(tied)), [])
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
        return _Verdict(p, model, noise, ratio, peak, qualifying[0], qualifying)
    # Provisional: the highest P, ties to the smaller K (argmax returns the first).
    return _Verdict(p, model, noise, ratio, peak, int(cells.ks[np.argmax(p)]), [])


def noise_ratio(
    log_sd: float, counts: NDArray[np.int64], margin: float, server_variance: float = 0.0
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
    counts: NDArray[np.int64],
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


def cell_mean_sd(run_sd: float, server_sd: float, runs_per_server: Sequence[int]) -> float:
    """The standard error of a cell mean (log scale) whose runs came from server starts with
    ``runs_per_server`` runs each: ``sqrt(run_sd^2 / N + server_sd^2 * sum(n_s^2) / N^2)``
    (each server's offset weighs as its share of the runs).

    >>> round(cell_mean_sd(0.02, 0.0, [4]), 4), round(cell_mean_sd(0.0, 0.02, [1, 1, 1, 1]), 4)
    (0.01, 0.01)
    >>> round(cell_mean_sd(0.0, 0.02, [3, 1]), 4)  # one server's offset weighs 3/4
    0.0158
    """
    total = sum(runs_per_server)
    weight = sum(n * n for n in runs_per_server) / total**2
    return math.sqrt(run_sd**2 / total + server_sd**2 * weight)


def servers_dominate(run_sd: float, server_sd: float, runs: int, servers: int) -> bool:
    """Whether server offsets are at least half of a cell mean's variance
    (``server_sd^2 / servers >= run_sd^2 / runs``): then new server starts reduce the error
    that matters, and more runs on as many servers barely do. Ties go to the servers, except
    with no noise at all (then neither helps, and the runs' cap says so)."""
    return server_sd > 0 and server_sd**2 / servers >= run_sd**2 / runs


def _more_measurement(
    cells: _Cells, contenders: NDArray[np.bool_], noise: _Noise | None, margin: float
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


def _best_and_challenger(cells: _Cells, margin: float) -> NDArray[np.bool_]:
    """Contenders where the noise is unknown: the best single run, every K within the tie
    tolerance of it, and the strongest challenger (the next best), as in LUCB-style best-arm
    identification: rerunning these estimates the noise where it decides."""
    order = np.argsort(-cells.means, kind="stable")
    chosen: NDArray[np.bool_] = cells.means >= cells.means[order[0]] + margin
    chosen[order[:2]] = True
    return chosen & ~cells.infeasible


def _cell_arrays(runs: pl.DataFrame) -> dict[int, _Cells]:
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
        int(anchors[a]): _Cells(*(array[a:b] for array in arrays))
        for a, b in zip(starts, ends, strict=True)
    }


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
    noises: dict[int, _Noise] = {}
    for anchor, cells in scored.cells.items():
        verdict = _verdict(cells, margin, settings)
        ks: list[int] = cells.ks.tolist()
        flags = [flags_at.get((anchor, k), 0) for k in ks]
        reasons: list[str] = []
        notes: list[str] = []
        without: _Verdict | None = None
        if sum(flags) and anchor in clean:
            without = _verdict(_aligned(clean[anchor], cells), margin, settings)
        # Flagged runs look like glitches (a run 20 % low): the anchor is decided without them,
        # unless the leading K changes when they are left out (then it is unresolved).
        decision = verdict if without is None else without
        leading = _leader(verdict, cells.ks)
        leading_without = leading if without is None else _leader(without, cells.ks)
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
        if noise is not None:
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
        servers=_server_noise_of(noises, settings),
    )


def server_note(noise: _Noise, settings: ConfidenceSettings) -> str:
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


def relative_sd(log_sd: float) -> float:
    """A log-scale standard deviation as the relative one of its log-normal, the inverse of
    :attr:`ConfidenceSettings.server_log_variance`."""
    return math.sqrt(math.expm1(log_sd**2))


def _leader(verdict: _Verdict, ks: NDArray[np.int64]) -> int:
    """The K with the highest P(eps-good) (ties to the smaller K); the pick without P."""
    if verdict.p is None:
        return verdict.pick
    return int(ks[np.argmax(verdict.p)])


def _aligned(clean: _Cells, full: _Cells) -> _Cells:
    """``clean`` (the anchor without flagged runs) on ``full``'s K order; a cell whose every
    run was flagged keeps its runs (there is nothing else to judge it by)."""
    index = {int(k): i for i, k in enumerate(clean.ks)}
    take = [index.get(int(k)) for k in full.ks]

    def pick(values: NDArray[Any], fallback: NDArray[Any]) -> NDArray[Any]:
        return np.array(
            [fallback[j] if i is None else values[i] for j, i in enumerate(take)],
            dtype=fallback.dtype,
        )

    return _Cells(
        ks=full.ks,
        **{
            name.name: pick(getattr(clean, name.name), getattr(full, name.name))
            for name in dataclasses.fields(_Cells)
            if name.name != "ks"
        },
    )


# --------------------------------------------------------------------------- the policies


@dataclass(frozen=True, eq=False)
class DecisionPolicy:
    """The result JSON's ``decision_policy`` key: which rule picked, with the report's settings
    (:meth:`ConfidenceReport.settings_json`), written when the JSON is."""

    report: ConfidenceReport
    policy: Policy

    def to_json(self) -> dict[str, Any]:
        return self.report.settings_json(self.policy)


def apply_policy(result: TuningResult, report: ConfidenceReport, policy: Policy) -> TuningResult:
    """The result to report under ``policy``, with the confidence block in every decision.

    ``"seed"``: the seed's picks, schedule and problems unchanged.

    ``"confident"``: per anchor the smallest K whose P(eps-good) reaches the confidence, else
    the provisional pick. Cells the relative-MAD gate rejected are ranked (their noise error
    becomes a warning); every unresolved anchor adds a warning, so no pick is silent. In the
    decisions, ``selected_*`` are the picked cell's median and conservative score as before,
    ``vs_best_percent`` / ``vs_k0_percent`` compare medians (the rule does not use the MAD
    penalty), ``tied_k`` lists the K that reach the confidence.
    """
    additions = {**result.additions, "decision_policy": DecisionPolicy(report, policy)}
    if policy == "seed":
        return dataclasses.replace(result, confidence=report, additions=additions)
    picks = dict(zip(report.anchors["anchor"], report.anchors["selected_k"], strict=True))
    # The report's cells are the eligible ones (each with at least one usable run).
    eligible = report.cells.select("anchor", "k", pl.lit(True).alias("_eligible"))
    reaching = (
        report.anchors.select("anchor", pl.col("qualifying_k").alias("k"))
        .explode("k")
        .drop_nulls()
        .with_columns(pl.lit(True).alias("_qualifies"))
    )
    cells = (
        result.cells.join(eligible, on=["anchor", "k"], how="left")
        .join(reaching, on=["anchor", "k"], how="left")
        .with_columns(pl.col("_eligible", "_qualifies").fill_null(False))
    )
    median = pl.when(pl.col("_eligible")).then(pl.col("median"))
    best = (median.max() if result.settings.maximize else median.min()).over("anchor")
    ratio = median / best if result.settings.maximize else best / median
    picked = pl.col("k") == pl.col("anchor").replace_strict(picks, default=None)
    cells = cells.with_columns(
        pl.when(pl.col("_eligible"))
        .then(pl.lit("kept"))
        .otherwise(pl.lit("rejected"))
        .alias("status"),
        pl.when(pl.col("_eligible")).then(None).otherwise(pl.col("reason")).alias("reason"),
        pl.when(best > 0).then(ratio).alias("ratio"),
        (pl.col("_eligible") & pl.col("_qualifies")).alias("tied"),
        (pl.col("_eligible") & picked.fill_null(False)).alias("selected"),
    ).drop("_eligible", "_qualifies")
    # The confident rule ranks medians (no MAD penalty), so K=0 is compared by median too.
    decisions = decide(cells, result.settings.maximize, score="median")
    problems = _confident_problems(result, report)
    schedule, found = decided_schedule(
        decisions, result.max_batch_size, "no cell at the anchor has enough usable runs"
    )
    problems += found
    return dataclasses.replace(
        result,
        cells=cells,
        decisions=decisions,
        schedule=schedule,
        problems=tuple(problems),
        confidence=report,
        additions=additions,
    )


def _confident_problems(result: TuningResult, report: ConfidenceReport) -> list[Problem]:
    """The seed's problems, less those the confident rule settles: the noise gate's errors
    become warnings, schedule problems are recomputed; plus a warning per unresolved anchor."""
    problems = []
    for problem in result.problems:
        if problem.rule in ("undecided-anchor", "invalid-schedule"):
            continue
        if problem.rule == "noisy-objective" and problem.severity is Severity.ERROR:
            problem = dataclasses.replace(
                problem,
                severity=Severity.WARNING,
                message=problem.message + ": the confident rule weighs this noise through the"
                " anchor's pooled estimate instead of rejecting the cell",
            )
        problems.append(problem)
    files = dict(
        report.runs.filter(pl.col("flagged"))
        .group_by("anchor", maintain_order=True)
        .agg(pl.col("source").unique(maintain_order=True))
        .iter_rows()
    )
    for row in report.anchors.filter(pl.col("status") == "unresolved").to_dicts():
        problems.append(
            Problem(
                Severity.WARNING,
                "unresolved-anchor",
                f"provisional K={row['selected_k']}: " + "; ".join(row["reasons"]),
                files=tuple(files.get(row["anchor"], ())),
                anchor=row["anchor"],
                field="P(eps-good)",
                expected=f">= {report.settings.confidence:g} for some K (see the measurement plan)",
                extra={"contenders": list(row["contenders"])},
            )
        )
    return problems


def policy_differences(seed: TuningResult, confident: TuningResult) -> pl.DataFrame:
    """Where the two rules pick differently: one row per anchor with ``seed_k``,
    ``confident_k``, ``differs`` and both picks' P(eps-good) (from either result's blocks)."""
    report = confident.confidence or seed.confidence
    blocks = report.blocks() if report is not None else {}
    rows = []
    seed_picks = dict(zip(seed.decisions["anchor"], seed.decisions["selected_k"], strict=True))
    for anchor, k in zip(
        confident.decisions["anchor"], confident.decisions["selected_k"], strict=True
    ):
        block = blocks.get(anchor, {})
        p = block.get("p_eps_good", {})
        other = seed_picks.get(anchor)
        rows.append(
            {
                "anchor": anchor,
                "seed_k": other,
                "confident_k": k,
                "differs": other != k,
                "status": block.get("status"),
                "seed_p_eps_good": p.get(str(other)),
                "confident_p_eps_good": p.get(str(k)),
            }
        )
    schema = {
        "anchor": pl.Int64,
        "seed_k": pl.Int64,
        "confident_k": pl.Int64,
        "differs": pl.Boolean,
        "status": pl.Utf8,
        "seed_p_eps_good": pl.Float64,
        "confident_p_eps_good": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema)


# --------------------------------------------------------------------------- helpers


def log_change_percent(log_residual: float | None, maximize: bool) -> float | None:
    """A log-scale residual as a percent change of the objective itself."""
    if log_residual is None or not math.isfinite(log_residual):
        return None
    return (math.exp(log_residual if maximize else -log_residual) - 1) * 100


def _rounded(value: float | None, digits: int = 4) -> float | None:
    """Derived floats for the JSON, rounded so that the last bit of a platform's log or sum
    cannot change the bytes; None where not finite."""
    return round(value, digits) if value is not None and math.isfinite(value) else None
