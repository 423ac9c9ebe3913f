"""Regret, calibration and decisiveness of the seed rule and the confident rule on simulated
sweeps with a known truth (issue 11).

    uv run python bench/simulate_regret.py [--trials 400] [--draws 4000] [--workers 2]
        [--reliability-png docs/confidence-reliability.png] [--server-cv 0]
        [--families independent servers lean] [--server-trials 200] [--lean-trials 200]

Each trial draws a throughput model (below), measures it like ``vllm bench sweep serve`` would
(every (anchor, K) cell RUNS times, multiplicative noise of the given CV under one of three tail
models: lognormal only; lognormal with each run independently an outlier 20 % low with
probability 5 %; Student-t with 3 degrees of freedom on the log scale, see ``run_noise``), and
runs the real policy code on it: ``lib.schedule.tune`` (the seed rule) and
``lib.confidence.assess`` + ``lib.policy.apply_policy`` (the confident rule), on an in-memory
:class:`lib.sweeps.Sweep` (no files).

Ground truth per trial: anchors 1, 4, 16, 64, 256 and K 0..4. Throughput of a batch b at K is
``1000 * b * (1 + a + ... + a^K) / step_ms(b, K)``: a decode step costs a fixed part, a part per
sequence, a drafting cost for K > 0 growing with K, and a verification cost per scored token
``b * (K + 1)``; the acceptance ``a`` and every cost are drawn per trial (uniform ranges below),
so speculation pays at small batches and costs at large ones, with the crossover (and the
close calls around it) in a different place every trial.

Scored per anchor: regret = 1 - truth(pick) / truth(best K) in %, and a pick is wrong when
its true throughput is more than the tie tolerance (1 %) below the best (so where two K are
within the tolerance in truth, either is right). Per trial: the mean regret over the anchors;
the tables give the mean and the 95th percentile of that over trials.

The seed's relative-MAD gate (0.1) rejects noisy cells, and then the seed writes no schedule
(exit 2). Such a trial is scored as "no schedule": its rate is reported, and "seed" regrets are
over the trials the seed accepted (the confident rule is scored on the same trials beside it).
A second seed column runs with the gate off (``--max-objective-relative-mad 1e9``), so both
rules are also compared on every trial.

Calibration: at confidence 0.8, 0.9 and 0.95, the share of resolved anchors whose pick is
wrong, with its 95 % Wilson interval. Decisiveness: the share unresolved among anchors whose
best K beats the runner-up by more than twice the tolerance. The reliability diagram (PNG)
bins every predicted P(eps-good) against the observed share of truly eps-good K. A last table
scores the confident rule's deployed schedules at every integer batch size 1..256 against the
best K there: the step schedule, and the interpolated one of ``lib.switch_points``.

**Server offsets** (issue 23, ``--families servers``; the tables above are ``independent``,
the default; ``--families independent servers`` runs both):
the runs above are independent, but ``vllm bench sweep serve`` runs every run of a serve combo
on one server start, and each start adds one offset to all of them (:class:`Servers`). The
families: offsets log-normal with SD 1, 2 and 3 %; one server per (anchor, K) cell
(``per-cell-server``) or one per K serving every anchor (``per-K-server``, the seed's design);
K 0..4 and K 0..7 (close calls: the best K within 2 % of the runner-up at 80 % of the anchors);
run noise 1 and 2 % (lognormal); 1 server x 3 runs (no replicas), 3 replicas x 3 runs and
3 replicas x 1 run per K (or cell). Without replicas the model is run with ``server_cv`` 0, the
default 1 % and the true SD; with replicas it measures the offsets. Each row is labelled
whether the model's assumption holds (:func:`assumption_holds`); every row is printed, and one
where it holds misses when a cell's 95 % Wilson interval lies wholly above its bound
(:func:`shown_over_bound`).

The independent runs are assessed with ``--server-cv 0`` by default, their truth (the model
told the truth, as on the families' rows with ``server_cv`` at the true SD); ``--server-cv 0.01``
shows what the CLI's default assumption costs on them.

Same arguments, same numbers (seeded with numpy's default_rng). Exit status 1 when a target of
issue 11 (``missed_targets``) or of issue 23 (``missed_family_targets``) is missed.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import altair as alt
import numpy as np
import polars as pl
from scipy import stats

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lib.confidence import ConfidenceSettings, assess  # noqa: E402
from lib.policy import apply_policy  # noqa: E402
from lib.schedule import Schedule, TuningResult, tune  # noqa: E402
from lib.servers import replica_combo_name  # noqa: E402
from lib.settings import (  # noqa: E402
    DEFAULT_CONFIDENCE,
    DEFAULT_K_VAR,
    DEFAULT_REPLICA_VAR,
    DEFAULT_SERVER_CV,
    Settings,
)
from lib.sweeps import Sweep  # noqa: E402
from lib.switch_points import find_switch_points  # noqa: E402

ANCHORS = (1, 4, 16, 64, 256)
K_VALUES = (0, 1, 2, 3, 4)
NOISE_CVS = (0.01, 0.02, 0.05, 0.10)
RUN_COUNTS = (3, 5)
OUTLIER_PROBABILITY = 0.05
OUTLIER_FACTOR = 0.8
#: How runs stray beyond lognormal noise (see run_noise).
TAIL_MODELS = ("none", "low-runs", "student-t3")
TOLERANCE = 0.01
MASTER_SEED = 4_2026
#: Goal for the unresolved share among anchors with a clear winner (no tails, CV <= 2 %, 3 runs).
TARGET_UNRESOLVED = 0.10
#: The confidence levels the calibration table checks ("resolved at c": wrong at most 1 - c).
CONFIDENCE_LEVELS = (0.8, 0.9, 0.95)
#: Bins of the predicted P(eps-good) in the reliability diagram: finer where picks are made.
RELIABILITY_BINS = (0.0, 0.05, 0.2, 0.4, 0.6, 0.8, 0.9, 0.95, 0.99, 1.0 + 1e-9)
#: A relative-MAD threshold no cell reaches: the seed rule without its noise gate.
GATE_OFF = 1e9

# Server-offset families (issue 23): see Servers and the module doc.
#: How server offsets are shared (:class:`Servers`).
OFFSET_STRUCTURES = ("per-cell-server", "per-K-server")
#: The true SD of a server start's offset.
OFFSET_SDS = (0.01, 0.02, 0.03)
#: The K of the families: today's five, and eight, where the truth model's best K is within
#: 2 % of the runner-up at 80 % of the anchors (54 % with five K).
FAMILY_K_SETS = (K_VALUES, tuple(range(8)))
#: The run noise of the families (lognormal, no tails).
FAMILY_NOISE_CVS = (0.01, 0.02)
#: (server starts per K, runs per server start) of the families: none, and three replicas.
SERVER_DESIGNS = ((1, 3), (3, 3), (3, 1))
#: Seed of the families' sweeps: neither the simulator's other tables' nor the fit's.
SERVER_SEED = 23_2026
#: Trials per server family by default (about 12 minutes on 2 cores, docs/confidence.md).
SERVER_TRIALS = 200


@dataclass(frozen=True)
class Model:
    """One trial's truth: a step-time model of speculative decoding."""

    acceptance: float  # probability each further draft token is accepted
    fixed_ms: float
    per_sequence_ms: float
    draft_ms: float
    draft_per_k_ms: float
    verify_per_token_ms: float

    def throughput(self, batch: Any, k: int) -> Any:
        """Output tokens per second at ``batch`` (a number or a numpy array) and K."""
        tokens = sum(self.acceptance**i for i in range(k + 1))
        step = (
            self.fixed_ms
            + self.per_sequence_ms * batch
            + (self.draft_ms + self.draft_per_k_ms * k) * (k > 0)
            + self.verify_per_token_ms * batch * (k + 1)
        )
        return 1000.0 * batch * tokens / step


def draw_model(rng: np.random.Generator) -> Model:
    return Model(
        acceptance=rng.uniform(0.45, 0.85),
        fixed_ms=rng.uniform(4.0, 8.0),
        per_sequence_ms=rng.uniform(0.02, 0.08),
        draft_ms=rng.uniform(0.3, 1.5),
        draft_per_k_ms=rng.uniform(0.2, 0.6),
        verify_per_token_ms=rng.uniform(0.01, 0.06),
    )


def run_noise(tail: str, cv: float, runs: int, rng: np.random.Generator) -> Any:
    """Multiplicative noise of ``runs`` runs of one cell under a tail model: lognormal of the
    given CV, times 0.8 for a run that is an outlier (probability 5 %, ``"low-runs"``); or a
    Student-t with 3 degrees of freedom on the log scale, scaled to the same SD
    (``"student-t3"``: symmetric heavy tails, a run beyond 3 SD about 8 times as often)."""
    if tail == "student-t3":
        return np.exp(cv * rng.standard_t(3, runs) / np.sqrt(3.0))
    noise = np.exp(cv * rng.standard_normal(runs))
    if tail == "low-runs":
        noise *= np.where(rng.random(runs) < OUTLIER_PROBABILITY, OUTLIER_FACTOR, 1.0)
    return noise


@dataclass(frozen=True)
class Servers:
    """How a simulated sweep's runs share server starts (issue 23). ``vllm bench sweep serve``
    starts one server per serve combo and runs every bench combo on it, and each start adds
    one multiplicative offset to all of its runs, log-normal with log-scale SD ``offset_sd``
    (about the relative SD). ``structure``:

    - ``"per-cell-server"``: every (anchor, K) has servers of its own (a serve combo per cell);
    - ``"per-K-server"``: the seed's design, the server of a K serves every anchor, so one
      offset per K (per K and replica) is shared by all anchors.

    ``replicas`` server starts per K (or cell), each of ``measure``'s ``runs``; with more than
    one they are serve combos that differ only in the replica marker
    (``k3-seed=0``, ``k3-seed=1``: :func:`lib.servers.replica_combo_name`), with one the name
    has no marker (``k3``), as a sweep without replicas has.
    """

    structure: str
    offset_sd: float
    replicas: int


def server_offsets(
    servers: Servers, k_values: tuple[int, ...], rng: np.random.Generator
) -> dict[tuple[int, int, int], float]:
    """The multiplicative offset of each (anchor, K, replica) server: drawn per (K, replica)
    and shared by every anchor (``per-K-server``), or drawn per (anchor, K, replica)."""
    if servers.structure not in OFFSET_STRUCTURES:
        raise ValueError(f"server structure {servers.structure!r}: expected {OFFSET_STRUCTURES}")
    keys = [(k, r) for k in k_values for r in range(servers.replicas)]
    if servers.structure == "per-K-server":
        draws = np.exp(servers.offset_sd * rng.standard_normal(len(keys)))
        shared = {key: float(offset) for key, offset in zip(keys, draws, strict=True)}
        return {(a, k, r): shared[k, r] for a in ANCHORS for k, r in keys}
    draws = np.exp(servers.offset_sd * rng.standard_normal(len(ANCHORS) * len(keys)))
    cells = [(a, k, r) for a in ANCHORS for k, r in keys]
    return {cell: float(offset) for cell, offset in zip(cells, draws, strict=True)}


def serve_combo(k: int, replica: int | None) -> str:
    """The serve combo name of K's server: ``k3``, or ``k3-seed=1`` for replica 1."""
    name = f"k{k}"
    return name if replica is None else replica_combo_name(name, DEFAULT_REPLICA_VAR, replica)


def measure(
    model: Model,
    cv: float,
    runs: int,
    tail: str,
    rng: np.random.Generator,
    k_values: tuple[int, ...] = K_VALUES,
    servers: Servers | None = None,
) -> Sweep:
    """The sweep a benchmark of ``model`` would write, as the loader's run frame: ``runs``
    runs per (anchor, K) cell and server, each server's offset (``servers``; None: the runs are
    independent, no offset) times every run's noise."""
    offsets = server_offsets(servers, k_values, rng) if servers is not None else None
    replicas = servers.replicas if servers is not None else 1
    rows: dict[str, list[Any]] = {
        name: [] for name in ("source", "position", "combo", "run_number", "anchor", "k", "value")
    }
    for anchor in ANCHORS:
        for k in k_values:
            truth = model.throughput(anchor, k)
            for replica in range(replicas):
                offset = 1.0 if offsets is None else offsets[anchor, k, replica]
                noise = run_noise(tail, cv, runs, rng)
                serve = serve_combo(k, replica if replicas > 1 else None)
                combo = f"SERVE--{serve}-BENCH--c{anchor}"
                for number, value in enumerate(truth * offset * noise):
                    rows["source"].append(f"{combo}/summary.json")
                    rows["position"].append(number)
                    rows["combo"].append(combo)
                    rows["run_number"].append(number)
                    rows["anchor"].append(anchor)
                    rows["k"].append(k)
                    rows["value"].append(float(value))
    return sweep_of(rows, k_values)


def sweep_of(rows: dict[str, list[Any]], k_values: tuple[int, ...]) -> Sweep:
    """The in-memory sweep of simulated runs (``rows``: ``source, position, combo,
    run_number, anchor, k, value`` per run), as the loader's run frame."""
    count = len(rows["value"])
    frame = pl.DataFrame(
        {
            "source": rows["source"],
            "position": rows["position"],
            "combo": rows["combo"],
            "run_number": rows["run_number"],
            "failure_file": [False] * count,
            "speculation": [True] * count,
            "anchor": rows["anchor"],
            "k": rows["k"],
            "global_k": [max(k_values)] * count,
            "output_throughput": rows["value"],
        },
        schema={
            "source": pl.Utf8,
            "position": pl.Int64,
            "combo": pl.Utf8,
            "run_number": pl.Int64,
            "failure_file": pl.Boolean,
            "speculation": pl.Boolean,
            "anchor": pl.Int64,
            "k": pl.Int64,
            "global_k": pl.Int64,
            "output_throughput": pl.Float64,
        },
    )
    return Sweep(
        root=Path("simulated"),
        batch_size_var="max_concurrency",
        k_var=DEFAULT_K_VAR,
        runs=frame,
        input_files=tuple(sorted(set(rows["source"]))),
        problems=(),
    )


def _picks(result: TuningResult) -> dict[int, int]:
    return {
        int(a): int(k)
        for a, k in zip(result.decisions["anchor"], result.decisions["selected_k"], strict=True)
        if k is not None
    }


def _score(model: Model, picks: dict[int, int]) -> tuple[float, int]:
    """Mean regret over the anchors (%), and how many picks are wrong."""
    regrets = []
    wrong = 0
    for anchor in ANCHORS:
        truth = {k: model.throughput(anchor, k) for k in K_VALUES}
        best = max(truth.values())
        got = truth[picks[anchor]]
        regrets.append((1 - got / best) * 100)
        wrong += got < (1 - TOLERANCE) * best
    return float(np.mean(regrets)), wrong


def schedule_regret(model: Model, schedule: Schedule) -> float:
    """Mean regret (%) of a deployed schedule over every integer batch size 1..256 (vLLM's
    lookup: the K of the range holding the batch size), against the best K at each size."""
    sizes = np.arange(1, ANCHORS[-1] + 1)
    truth = np.stack([model.throughput(sizes.astype(float), k) for k in K_VALUES])
    chosen = np.zeros(len(sizes), dtype=int)
    for lo, hi, k in schedule:
        chosen[lo - 1 : hi] = K_VALUES.index(k)
    got = truth[chosen, np.arange(len(sizes))]
    return float(np.mean(1 - got / truth.max(axis=0)) * 100)


def run_trial(task: tuple[int, float, int, str, int, int, float]) -> dict[str, Any]:
    config, cv, runs, tail, trial, draws, server_cv = task
    rng = np.random.default_rng([MASTER_SEED, config, trial])
    model = draw_model(rng)
    sweep = measure(model, cv, runs, tail, rng)
    seed = tune(sweep, Settings())
    relaxed = tune(sweep, Settings(max_objective_relative_mad=GATE_OFF))
    reports = {
        level: assess(
            relaxed, ConfidenceSettings(confidence=level, draws=draws, server_cv=server_cv)
        )
        for level in CONFIDENCE_LEVELS
    }
    report = reports[DEFAULT_CONFIDENCE]
    confident = apply_policy(relaxed, report, "confident")
    assert relaxed.ok and confident.ok, [p.describe() for p in confident.errors]
    relaxed_regret, relaxed_wrong = _score(model, _picks(relaxed))
    confident_regret, confident_wrong = _score(model, _picks(confident))
    switches = find_switch_points(confident, report)
    assert switches is not None and confident.schedule is not None
    assert not switches.schedule.violations()
    result: dict[str, Any] = {
        "config": config,
        "seed_ok": seed.ok,
        "seed_regret": _score(model, _picks(seed))[0] if seed.ok else None,
        "relaxed_regret": relaxed_regret,
        "relaxed_wrong": relaxed_wrong,
        "confident_regret": confident_regret,
        "confident_wrong": confident_wrong,
        "step_schedule_regret": schedule_regret(model, confident.schedule),
        "interpolated_schedule_regret": schedule_regret(model, switches.schedule),
        "expected_gain": switches.mean_gain_percent,
        "clear": sum(clear_winner(model, anchor) for anchor in ANCHORS),
    }
    for level, each in reports.items():
        result |= resolution_counts(model, each.anchors, level)
    result |= reliability_counts(model, report.cells)
    return result


def clear_winner(model: Model, anchor: int, k_values: tuple[int, ...] = K_VALUES) -> bool:
    """The best K beats the runner-up by more than twice the tie tolerance: an anchor the rule
    should resolve (closer calls are near-ties, where either pick costs little)."""
    best, runner_up = sorted((model.throughput(anchor, k) for k in k_values), reverse=True)[:2]
    return bool(best > (1 + 2 * TOLERANCE) * runner_up)


def truly_good(model: Model, anchor: int, k: int, k_values: tuple[int, ...] = K_VALUES) -> bool:
    """K is within the tie tolerance of the best K at the anchor, in truth."""
    best = max(model.throughput(anchor, j) for j in k_values)
    return bool(model.throughput(anchor, k) >= (1 - TOLERANCE) * best)


def resolution_counts(
    model: Model, anchors: pl.DataFrame, level: float, k_values: tuple[int, ...] = K_VALUES
) -> dict[str, int]:
    """At one confidence level: resolved anchors, the resolved ones whose pick is truly wrong
    (more than the tolerance below the best), and the unresolved ones with a clear winner."""
    resolved = wrong = clear_unresolved = 0
    for row in anchors.select("anchor", "status", "selected_k").to_dicts():
        if row["status"] == "resolved":
            resolved += 1
            wrong += not truly_good(model, row["anchor"], row["selected_k"], k_values)
        else:
            clear_unresolved += clear_winner(model, row["anchor"], k_values)
    return {
        f"resolved_{level}": resolved,
        f"wrong_resolved_{level}": wrong,
        f"clear_unresolved_{level}": clear_unresolved,
    }


def reliability_counts(model: Model, cells: pl.DataFrame) -> dict[str, list[float]]:
    """Per bin of :data:`RELIABILITY_BINS`: how many (anchor, K) have a P(eps-good) there, the
    sum of those P, and how many of them are truly eps-good."""
    known = cells.filter(pl.col("p_eps_good").is_not_null())
    p = known["p_eps_good"].to_numpy()
    good = np.array(
        [truly_good(model, a, k) for a, k in known.select("anchor", "k").iter_rows()], dtype=float
    )
    bins = np.clip(
        np.searchsorted(RELIABILITY_BINS, p, side="right") - 1, 0, len(RELIABILITY_BINS) - 2
    )
    size = len(RELIABILITY_BINS) - 1
    return {
        "bin_count": np.bincount(bins, minlength=size).astype(float).tolist(),
        "bin_p": np.bincount(bins, weights=p, minlength=size).tolist(),
        "bin_good": np.bincount(bins, weights=good, minlength=size).tolist(),
    }


def wilson(successes: int, trials: int) -> tuple[float, float]:
    """95 % Wilson score interval of a binomial proportion; (0, 1) without trials."""
    if trials == 0:
        return 0.0, 1.0
    interval = stats.binomtest(successes, trials).proportion_ci(method="wilson")
    return float(interval.low), float(interval.high)


def wrong_among_resolved(part: pl.DataFrame, level: float) -> dict[str, Any]:
    """At confidence ``level``, over the trials of ``part``: the resolved anchors, the wrong
    picks among them (count and share, 0 when none resolved) and the share's 95 % Wilson
    interval."""
    resolved = int(part[f"resolved_{level}"].sum())
    wrong = int(part[f"wrong_resolved_{level}"].sum())
    low, high = wilson(wrong, resolved)
    return {
        f"resolved_{level}": resolved,
        f"wrong_count_{level}": wrong,
        f"wrong_{level}": wrong / resolved if resolved else 0.0,
        f"wrong_low_{level}": low,
        f"wrong_high_{level}": high,
    }


def summarise(results: list[dict[str, Any]], configs: list[tuple[float, int, str]]) -> pl.DataFrame:
    frame = pl.DataFrame(results)
    anchors = len(ANCHORS)
    rows = []
    for index, (cv, runs, tail) in enumerate(configs):
        part = frame.filter(pl.col("config") == index)
        accepted = part.filter(pl.col("seed_ok"))
        row: dict[str, Any] = {
            "tail": tail,
            "cv_percent": cv * 100,
            "runs": runs,
            "trials": part.height,
            "seed_no_schedule_percent": 100 * (1 - accepted.height / part.height),
            "seed_mean": _mean(accepted["seed_regret"]),
            "seed_p95": _p95(accepted["seed_regret"]),
            "confident_mean_same_trials": _mean(accepted["confident_regret"]),
            "confident_p95_same_trials": _p95(accepted["confident_regret"]),
            "seed_gate_off_mean": _mean(part["relaxed_regret"]),
            "seed_gate_off_p95": _p95(part["relaxed_regret"]),
            "confident_mean": _mean(part["confident_regret"]),
            "confident_p95": _p95(part["confident_regret"]),
            "seed_wrong_percent": 100 * part["relaxed_wrong"].sum() / (anchors * part.height),
            "confident_wrong_percent": 100
            * part["confident_wrong"].sum()
            / (anchors * part.height),
            "clear": int(part["clear"].sum()),
            "step_schedule_mean": _mean(part["step_schedule_regret"]),
            "interpolated_schedule_mean": _mean(part["interpolated_schedule_regret"]),
            "expected_gain_mean": _mean(part["expected_gain"]),
        }
        for level in CONFIDENCE_LEVELS:
            row |= wrong_among_resolved(part, level)
            row[f"clear_unresolved_{level}"] = int(part[f"clear_unresolved_{level}"].sum()) / max(
                row["clear"], 1
            )
        rows.append(row)
    return pl.DataFrame(rows)


def reliability(
    results: list[dict[str, Any]], configs: list[tuple[float, int, str]]
) -> pl.DataFrame:
    """Per tail model, CV and bin of the predicted P(eps-good) (both run counts together): the
    mean predicted P, the observed share of truly eps-good K and its 95 % Wilson interval."""
    frame = pl.DataFrame(results)
    rows = []
    for tail in TAIL_MODELS:
        for cv in NOISE_CVS:
            indices = [i for i, (c, _, t) in enumerate(configs) if (c, t) == (cv, tail)]
            part = frame.filter(pl.col("config").is_in(indices))
            count = np.sum(np.stack(part["bin_count"].to_list()), axis=0)
            predicted = np.sum(np.stack(part["bin_p"].to_list()), axis=0)
            good = np.sum(np.stack(part["bin_good"].to_list()), axis=0)
            for b in range(len(count)):
                if count[b] == 0:
                    continue
                low, high = wilson(int(good[b]), int(count[b]))
                rows.append(
                    {
                        "tail": tail,
                        "cv_percent": cv * 100,
                        "bin": f"{RELIABILITY_BINS[b]:g}-{min(RELIABILITY_BINS[b + 1], 1):g}",
                        "count": int(count[b]),
                        "predicted": predicted[b] / count[b],
                        "observed": good[b] / count[b],
                        "observed_low": low,
                        "observed_high": high,
                    }
                )
    return pl.DataFrame(rows)


def _mean(values: pl.Series) -> float | None:
    return float(np.mean(values.to_numpy())) if len(values) else None


def _p95(values: pl.Series) -> float | None:
    return float(np.percentile(values.to_numpy(), 95)) if len(values) else None


def _where(row: dict[str, Any]) -> str:
    return f"| {row['tail']} | {row['cv_percent']:g}% | {row['runs']} |"


def markdown(table: pl.DataFrame) -> str:
    """The regret table of docs/confidence.md."""
    lines = [
        "| tails | CV | runs | seed: no schedule | seed | confident (same trials)"
        " | seed, gate off | confident |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in table.to_dicts():

        def pair(a: str, b: str, row: dict[str, Any] = row) -> str:
            if row[a] is None:
                return "n/a"
            return f"{row[a]:.2f} / {row[b]:.2f}"

        lines.append(
            f"{_where(row)} {row['seed_no_schedule_percent']:.1f}%"
            f" | {pair('seed_mean', 'seed_p95')}"
            f" | {pair('confident_mean_same_trials', 'confident_p95_same_trials')}"
            f" | {pair('seed_gate_off_mean', 'seed_gate_off_p95')}"
            f" | {pair('confident_mean', 'confident_p95')} |"
        )
    return "\n".join(lines)


def calibration_markdown(table: pl.DataFrame) -> str:
    """Per confidence level: the share of resolved anchors whose pick is truly wrong, its 95 %
    Wilson interval and the resolved count; a cell over its bound 1 - confidence is starred."""
    levels = " | ".join(
        f"resolved at {level:g} (bound {1 - level:.0%})" for level in CONFIDENCE_LEVELS
    )
    lines = [f"| tails | CV | runs | {levels} |", "|---|---|---|" + "---|" * len(CONFIDENCE_LEVELS)]
    for row in table.to_dicts():
        cells = []
        for level in CONFIDENCE_LEVELS:
            over = "*" if row[f"wrong_{level}"] > 1 - level else ""
            cells.append(
                f"{100 * row[f'wrong_{level}']:.1f}%{over} [{100 * row[f'wrong_low_{level}']:.1f},"
                f" {100 * row[f'wrong_high_{level}']:.1f}] of {row[f'resolved_{level}']}"
            )
        lines.append(f"{_where(row)} " + " | ".join(cells) + " |")
    return "\n".join(lines)


def decisiveness_markdown(table: pl.DataFrame) -> str:
    """Unresolved anchors among those with a clear winner (best over runner-up > 2x the
    tolerance), per confidence level, and the wrong picks of both rules among all anchors."""
    levels = " | ".join(f"unresolved at {level:g}" for level in CONFIDENCE_LEVELS)
    lines = [
        f"| tails | CV | runs | clear anchors | {levels} | wrong picks: seed (gate off)"
        " | wrong picks: confident |",
        "|---|---|---|---|" + "---|" * (len(CONFIDENCE_LEVELS) + 2),
    ]
    for row in table.to_dicts():
        unresolved = " | ".join(
            f"{100 * row[f'clear_unresolved_{level}']:.1f}%" for level in CONFIDENCE_LEVELS
        )
        lines.append(
            f"{_where(row)} {row['clear']} | {unresolved} | {row['seed_wrong_percent']:.1f}%"
            f" | {row['confident_wrong_percent']:.1f}% |"
        )
    return "\n".join(lines)


def switch_markdown(table: pl.DataFrame) -> str:
    """Step against interpolated schedules (confident picks), over every batch size."""
    lines = [
        "| tails | CV | runs | step schedule regret | interpolated schedule regret"
        " | expected gain |",
        "|---|---|---|---|---|---|",
    ]
    for row in table.to_dicts():
        lines.append(
            f"{_where(row)} {row['step_schedule_mean']:.2f}%"
            f" | {row['interpolated_schedule_mean']:.2f}% | {row['expected_gain_mean']:+.2f}% |"
        )
    return "\n".join(lines)


def reliability_chart(bins: pl.DataFrame) -> alt.FacetChart:
    """Predicted P(eps-good) (bin means) against the observed share of truly eps-good K, one
    panel per tail model, one line per noise CV, with the diagonal of perfect calibration."""
    diagonal = (
        alt.Chart(pl.DataFrame({"predicted": [0.0, 1.0], "observed": [0.0, 1.0]}))
        .mark_line(color="gray", strokeDash=[4, 4])
        .encode(x="predicted:Q", y="observed:Q")
    )
    points = (
        alt.Chart()
        .mark_line(point=True)
        .encode(
            x=alt.X(
                "predicted:Q",
                title="predicted P(eps-good), bin mean",
                scale=alt.Scale(domain=[0, 1]),
            ),
            y=alt.Y(
                "observed:Q", title="observed share truly eps-good", scale=alt.Scale(domain=[0, 1])
            ),
            color=alt.Color("cv_percent:O", title="CV %"),
        )
    )
    bars = (
        alt.Chart()
        .mark_rule()
        .encode(x="predicted:Q", y="observed_low:Q", y2="observed_high:Q", color="cv_percent:O")
    )
    return (
        alt.layer(diagonal, points, bars, data=bins)
        .properties(width=220, height=220)
        .facet(column=alt.Column("tail:N", title="tail model"))
    )


def missed_targets(table: pl.DataFrame) -> list[str]:
    """Issue 11's targets: calibration at every level and noise, regret at or below the seed's
    (on the trials the seed accepts and on every trial with its gate off), decisiveness."""
    missed = []
    for row in table.to_dicts():
        where = f"{row['tail']} tails, CV {row['cv_percent']:g}%, {row['runs']} runs"
        for level in CONFIDENCE_LEVELS:
            if row[f"wrong_{level}"] > 1 - level:
                missed.append(f"{where}: wrong among resolved at {level:g} above {1 - level:.0%}")
        for ours, theirs in (
            ("confident_mean", "seed_gate_off_mean"),
            ("confident_p95", "seed_gate_off_p95"),
            ("confident_mean_same_trials", "seed_mean"),
            ("confident_p95_same_trials", "seed_p95"),
        ):
            if row[theirs] is not None and row[ours] > row[theirs]:
                missed.append(f"{where}: {ours} regret above the seed's ({theirs})")
        decisive = row["tail"] == "none" and row["cv_percent"] <= 2 and row["runs"] == 3
        if decisive and row[f"clear_unresolved_{DEFAULT_CONFIDENCE}"] >= TARGET_UNRESOLVED:
            missed.append(f"{where}: unresolved among clear anchors not below 10%")
    return missed


@dataclass(frozen=True)
class ServerFamily:
    """One family of the server-offset check: the truth's servers, its K, the run noise and
    the runs per server start."""

    servers: Servers
    k_values: tuple[int, ...]
    noise_cv: float
    runs_per_server: int

    def assumed_server_cvs(self) -> tuple[float, ...]:
        """The ``server_cv`` values the model runs with. With replicas the model measures the
        offsets and ignores it, so one (the default). Without: none (0), the default and the
        truth, each once (the truth may be the default), ascending."""
        if self.servers.replicas > 1:
            return (DEFAULT_SERVER_CV,)
        return tuple(sorted({0.0, DEFAULT_SERVER_CV, self.servers.offset_sd}))


def server_families() -> tuple[ServerFamily, ...]:
    """Every family: each offset structure x offset SD x K set x run noise x server design."""
    return tuple(
        ServerFamily(Servers(structure, sd, replicas), k_values, cv, runs)
        for structure in OFFSET_STRUCTURES
        for sd in OFFSET_SDS
        for k_values in FAMILY_K_SETS
        for cv in FAMILY_NOISE_CVS
        for replicas, runs in SERVER_DESIGNS
    )


def assumption_holds(replicas: int, server_cv: float, offset_sd: float) -> bool:
    """The model's assumption about servers holds: the sweep has replicas (the model measures
    the offsets), or the ``server_cv`` it is given is at least the true offset SD (equal
    holds; the model then over-states the offsets or states them exactly)."""
    return replicas > 1 or server_cv >= offset_sd


def run_family_trial(task: tuple[int, int, int]) -> list[dict[str, Any]]:
    """One sweep of a server family, assessed at every assumed ``server_cv`` and confidence
    level: per ``server_cv``, the resolved anchors and the wrong ones among them."""
    index, trial, draws = task
    family = SERVER_FAMILIES[index]
    rng = np.random.default_rng([SERVER_SEED, index, trial])
    model = draw_model(rng)
    sweep = measure(
        model,
        family.noise_cv,
        family.runs_per_server,
        "none",
        rng,
        k_values=family.k_values,
        servers=family.servers,
    )
    result = tune(sweep, Settings(max_objective_relative_mad=GATE_OFF))
    assert result.ok, [p.describe() for p in result.errors]
    rows = []
    for server_cv in family.assumed_server_cvs():
        row: dict[str, Any] = {"family": index, "server_cv": server_cv}
        for level in CONFIDENCE_LEVELS:
            settings = ConfidenceSettings(confidence=level, draws=draws, server_cv=server_cv)
            report = assess(result, settings)
            row |= resolution_counts(model, report.anchors, level, family.k_values)
        rows.append(row)
    return rows


SERVER_FAMILIES = server_families()


def summarise_families(results: list[dict[str, Any]]) -> pl.DataFrame:
    """One row per family and assumed ``server_cv``: the trials, and per confidence level the
    resolved anchors, their share of all anchors and the wrong share among them with its
    95 % Wilson interval."""
    frame = pl.DataFrame(results)
    rows = []
    for index, family in enumerate(SERVER_FAMILIES):
        for server_cv in family.assumed_server_cvs():
            part = frame.filter((pl.col("family") == index) & (pl.col("server_cv") == server_cv))
            servers = family.servers
            row: dict[str, Any] = {
                "structure": servers.structure,
                "offset_sd": servers.offset_sd,
                "k_count": len(family.k_values),
                "noise_cv": family.noise_cv,
                "replicas": servers.replicas,
                "runs_per_server": family.runs_per_server,
                "server_cv": server_cv if servers.replicas == 1 else None,
                "holds": assumption_holds(servers.replicas, server_cv, servers.offset_sd),
                "trials": part.height,
            }
            for level in CONFIDENCE_LEVELS:
                row |= wrong_among_resolved(part, level)
                row[f"resolved_share_{level}"] = row[f"resolved_{level}"] / (
                    len(ANCHORS) * part.height
                )
            rows.append(row)
    return pl.DataFrame(rows)


def bound(level: float) -> float:
    """The calibration bound at a confidence level, ``1 - level``, rounded to 1e-9 (so that the
    bound at 0.9 is 0.1, not 0.09999999999999998, and 10 wrong of 100 are not above it)."""
    return round(1 - level, 9)


def within_bound(wrong_share: float, level: float) -> bool:
    """The share of wrong picks among the anchors resolved at ``level`` (the point estimate)
    is at most the bound; no resolved anchor is a share of 0. A cell that is not is starred."""
    return wrong_share <= bound(level)


def shown_over_bound(wrong_low: float, level: float) -> bool:
    """The check of a calibration cell: it **misses** when its 95 % Wilson interval lies
    wholly above the bound (the lower end above ``1 - level``), i.e. the simulation shows the
    wrong share above the bound, at about 97.5 % one-sided. A point estimate above the bound
    whose interval still reaches it (few resolved anchors: 1 wrong of 4 is 25 %) shows
    neither, and is starred but not a miss. The interval takes anchors as independent; where
    one server's offset is shared by a sweep's anchors (``per-K-server``) it is too narrow,
    which makes a miss more likely, not less. No resolved anchor: the interval is (0, 1)."""
    return wrong_low > bound(level)


def resolved_and_wrong_cells(row: dict[str, Any]) -> tuple[str, list[str]]:
    """A summarised row's resolved shares (``80% / 60% / 40%``) and one markdown cell per
    confidence level: the wrong share (``*`` over the bound, ``!`` its whole interval over
    it), its Wilson interval and the resolved count."""
    resolved = " / ".join(
        f"{100 * row[f'resolved_share_{level}']:.0f}%" for level in CONFIDENCE_LEVELS
    )
    cells = []
    for level in CONFIDENCE_LEVELS:
        mark = "" if within_bound(row[f"wrong_{level}"], level) else "*"
        mark += "!" if shown_over_bound(row[f"wrong_low_{level}"], level) else ""
        cells.append(
            f"{100 * row[f'wrong_{level}']:.1f}%{mark} [{100 * row[f'wrong_low_{level}']:.1f},"
            f" {100 * row[f'wrong_high_{level}']:.1f}] of {row[f'resolved_{level}']}"
        )
    return resolved, cells


def family_markdown(table: pl.DataFrame) -> str:
    """The server-offset table of docs/confidence.md: ``*`` a share above its bound, ``!``
    an interval wholly above it (a miss where the assumption holds)."""
    levels = " | ".join(
        f"wrong at {level:g} (bound {1 - level:.0%})" for level in CONFIDENCE_LEVELS
    )
    shares = " / ".join(f"{level:g}" for level in CONFIDENCE_LEVELS)
    lines = [
        "| offsets | offset SD | K | run CV | servers x runs | server_cv | assumption | trials"
        f" | resolved at {shares} | {levels} |",
        "|---|---|---|---|---|---|---|---|---|" + "---|" * len(CONFIDENCE_LEVELS),
    ]
    for row in table.to_dicts():
        assumed = "measured" if row["server_cv"] is None else f"{100 * row['server_cv']:g}%"
        resolved, cells = resolved_and_wrong_cells(row)
        lines.append(
            f"| {row['structure']} | {100 * row['offset_sd']:g}% | {row['k_count']}"
            f" | {100 * row['noise_cv']:g}% | {row['replicas']} x {row['runs_per_server']}"
            f" | {assumed} | {'holds' if row['holds'] else 'does not hold'} | {row['trials']}"
            f" | {resolved} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def pooled_markdown(table: pl.DataFrame) -> str:
    """Per K set, the rows where the assumption holds and where it does not, pooled: the wrong
    picks among every anchor they resolved at each level, with the 95 % Wilson interval."""
    levels = " | ".join(f"wrong at {level:g}" for level in CONFIDENCE_LEVELS)
    lines = [f"| K | assumption | rows | {levels} |", "|---|---|---|" + "---|" * 3]
    for k_count in sorted(set(table["k_count"])):
        for holds in (True, False):
            part = table.filter((pl.col("k_count") == k_count) & (pl.col("holds") == holds))
            cells = []
            for level in CONFIDENCE_LEVELS:
                resolved = int(part[f"resolved_{level}"].sum())
                wrong = int(part[f"wrong_count_{level}"].sum())
                low, high = wilson(wrong, resolved)
                share = wrong / resolved if resolved else 0.0
                cells.append(
                    f"{100 * share:.1f}% [{100 * low:.1f}, {100 * high:.1f}] of {resolved}"
                )
            label = "holds" if holds else "does not hold"
            lines.append(f"| {k_count} | {label} | {part.height} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def missed_family_targets(table: pl.DataFrame) -> list[str]:
    """Issue 23's target: on every row where the model's assumption holds, no calibration
    cell is shown over its bound (:func:`shown_over_bound`). Rows where it does not hold have
    no target (they show what happens then)."""
    missed = []
    for row in table.filter(pl.col("holds")).to_dicts():
        assumed = "measured" if row["server_cv"] is None else f"{row['server_cv']:g}"
        where = (
            f"{row['structure']} offsets of {row['offset_sd']:g}, {row['k_count']} K, run CV"
            f" {row['noise_cv']:g}, {row['replicas']} x {row['runs_per_server']} runs,"
            f" server_cv {assumed}"
        )
        missed += missed_cells(row, where)
    return missed


def missed_cells(row: dict[str, Any], where: str) -> list[str]:
    """One line per confidence level whose cell of ``row`` is shown over its bound
    (:func:`shown_over_bound`), each starting with ``where``."""
    return [
        f"{where}: wrong among resolved at {level:g} above {1 - level:.0%}"
        " (its whole 95 % interval)"
        for level in CONFIDENCE_LEVELS
        if shown_over_bound(row[f"wrong_low_{level}"], level)
    ]


def independent_runs(arguments: argparse.Namespace, pool: Any) -> list[str]:
    """The tables of independent runs (issue 11), printed; its missed targets."""
    configs = [(cv, runs, tail) for tail in TAIL_MODELS for runs in RUN_COUNTS for cv in NOISE_CVS]
    tasks = [
        (index, cv, runs, tail, trial, arguments.draws, arguments.server_cv)
        for index, (cv, runs, tail) in enumerate(configs)
        for trial in range(arguments.trials)
    ]
    started = time.perf_counter()
    results = pool.map(run_trial, tasks, chunksize=20)
    table = summarise(results, configs)
    print(
        f"{len(tasks)} simulated sweeps ({arguments.trials} per row) in"
        f" {time.perf_counter() - started:.0f} s, the model assuming server offsets of"
        f" {arguments.server_cv:g} (--server-cv); regrets in % of the true best throughput,"
        " mean over the 5 anchors of a sweep, then mean / p95 over sweeps\n"
    )
    print(markdown(table))
    print(
        "\nCalibration: among the anchors resolved at each confidence, the share whose pick is"
        " truly more than 1 % below the best K, its 95 % Wilson interval and the resolved count"
        " (* over the bound):\n"
    )
    print(calibration_markdown(table))
    print(
        "\nDecisiveness: unresolved anchors among those whose best K beats the runner-up by"
        " more than 2 %, and wrong picks (true throughput more than 1 % below the best K's) in %"
        " of all anchors:\n"
    )
    print(decisiveness_markdown(table))
    print(
        "\nDeployed schedules of the confident rule, regret over every batch size 1..256"
        " (the step schedule switches at the upper anchor; the interpolated one at the switch"
        " points), and the gain lib.switch expected from the measurements:\n"
    )
    print(switch_markdown(table))
    bins = reliability(results, configs)
    reliability_chart(bins).save(str(arguments.reliability_png), format="png")
    print(f"\nreliability diagram: {arguments.reliability_png}")
    return missed_targets(table)


def server_offset_families(arguments: argparse.Namespace, pool: Any) -> list[str]:
    """The table of server-offset families (issue 23), printed; its missed targets."""
    tasks = [
        (index, trial, arguments.draws)
        for index in range(len(SERVER_FAMILIES))
        for trial in range(arguments.server_trials)
    ]
    started = time.perf_counter()
    results = [row for rows in pool.map(run_family_trial, tasks, chunksize=10) for row in rows]
    table = summarise_families(results)
    print(
        f"\nServer offsets: {len(tasks)} simulated sweeps ({arguments.server_trials} per family)"
        f" in {time.perf_counter() - started:.0f} s. Per row, the share of anchors resolved at"
        " each confidence, and among them the share whose pick is truly more than 1 % below the"
        " best K, its 95 % Wilson interval and the resolved count (* a share over the bound,"
        " ! its whole interval over it: a miss where the assumption holds; rows where it does"
        " not have no target):\n"
    )
    print(family_markdown(table))
    print(
        "\nPooled: every anchor resolved on the rows where the assumption holds, and on those"
        " where it does not, per K set:\n"
    )
    print(pooled_markdown(table))
    return missed_family_targets(table)


def lean_families(arguments: argparse.Namespace, pool: Any) -> list[str]:
    """The lean families (issue 40, bench/simulate_lean.py), printed; their missed targets."""
    from simulate_lean import lean_part

    return lean_part(arguments, pool)


#: The parts of the simulation ``--families`` chooses from.
PARTS = {"independent": independent_runs, "servers": server_offset_families, "lean": lean_families}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--trials", type=int, default=400, help="trials per CV, runs and tails")
    parser.add_argument(
        "--server-trials", type=int, default=SERVER_TRIALS, help="trials per server family"
    )
    parser.add_argument(
        "--server-cv",
        type=float,
        default=0.0,
        help="the server offsets the model assumes on the independent runs (default 0: their"
        " truth; the CLI's default is 0.01); the server families set their own",
    )
    parser.add_argument(
        "--families",
        nargs="+",
        choices=tuple(PARTS),
        default=["independent"],
        help="which parts to simulate: independent runs (the default), server offsets, lean"
        " sweeps (one run per cell: bench/simulate_lean.py)",
    )
    parser.add_argument(
        "--lean-trials", type=int, default=200, help="trials per lean family (--families lean)"
    )
    parser.add_argument(
        "--lean-seed",
        type=int,
        default=42_2026,
        help="seed of the lean families' sweeps (the published table's; tune on another)",
    )
    parser.add_argument(
        "--draws", type=int, default=4000, help="posterior draws per anchor (the CLI uses 10000)"
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--reliability-png",
        type=Path,
        default=ROOT / "docs" / "confidence-reliability.png",
        help="where to write the reliability diagram",
    )
    arguments = parser.parse_args()
    missed = []
    with multiprocessing.get_context("fork").Pool(arguments.workers) as pool:
        for name, part in PARTS.items():
            if name in arguments.families:
                missed += part(arguments, pool)
    for line in missed:
        print("target missed: " + line)
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
