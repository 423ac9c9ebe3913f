"""Regret of the seed rule and the confident rule on simulated sweeps with a known truth.

    uv run python bench/simulate_regret.py [--trials 400] [--draws 4000] [--workers 2]

Each trial draws a throughput model (below), measures it like ``vllm bench sweep serve`` would
(every (anchor, K) cell RUNS times, multiplicative lognormal noise of the given CV, and each run
independently an outlier 20 % low with probability 5 %), and runs the real policy code on it:
``lib.schedule.tune`` (the seed rule) and ``lib.confidence.assess`` + ``apply_policy``
(the confident rule), on an in-memory :class:`lib.sweeps.Sweep` (no files).

Ground truth per trial: anchors 1, 4, 16, 64, 256 and K 0..4. Throughput of a batch b at K is
``1000 * b * (1 + a + ... + a^K) / step_ms(b, K)``: a decode step costs a fixed part, a part per
sequence, a drafting cost for K > 0 growing with K, and a verification cost per scored token
``b * (K + 1)``; the acceptance ``a`` and every cost are drawn per trial (uniform ranges below),
so speculation pays at small batches and costs at large ones, with the crossover (and the
close calls around it) in a different place every trial.

Scored per anchor: regret = 1 - truth(pick) / truth(best K) in %, and a pick is wrong when
its true throughput is more than the tie tolerance (1 %) below the best. Per trial: the mean
regret over the anchors; the tables give the mean and the 95th percentile of that over trials.

The seed's relative-MAD gate (0.1) rejects noisy cells, and then the seed writes no schedule
(exit 2). Such a trial is scored as "no schedule": its rate is reported, and "seed" regrets are
over the trials the seed accepted (the confident rule is scored on the same trials beside it).
A second seed column runs with the gate off (``--max-objective-relative-mad 1e9``), so both
rules are also compared on every trial.

A second table scores the confident rule's deployed schedules at every integer batch size
1..256 against the best K there: the step schedule, and the interpolated one of ``lib.switch``.

Same arguments, same numbers (seeded with numpy's default_rng). Exit status 1 when a target is
missed: the confident rule's mean and p95 regret below the seed's (gate off, every trial), and
its wrong-and-unflagged rate below 5 %, at every noise level and run count.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lib.confidence import ConfidenceSettings, apply_policy, assess  # noqa: E402
from lib.schedule import Schedule, TuningResult, tune  # noqa: E402
from lib.settings import DEFAULT_K_VAR, Settings  # noqa: E402
from lib.sweeps import Sweep  # noqa: E402
from lib.switch_points import find_switch_points  # noqa: E402

ANCHORS = (1, 4, 16, 64, 256)
K_VALUES = (0, 1, 2, 3, 4)
NOISE_CVS = (0.01, 0.02, 0.05, 0.10)
RUN_COUNTS = (3, 5)
OUTLIER_PROBABILITY = 0.05
OUTLIER_FACTOR = 0.8
TOLERANCE = 0.01
MASTER_SEED = 4_2026
TARGET_WRONG_UNFLAGGED = 0.05
#: A relative-MAD threshold no cell reaches: the seed rule without its noise gate.
GATE_OFF = 1e9


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


def measure(model: Model, cv: float, runs: int, rng: np.random.Generator) -> Sweep:
    """The sweep a benchmark of ``model`` would write, as the loader's run frame."""
    rows: dict[str, list[Any]] = {
        name: [] for name in ("source", "position", "combo", "run_number", "anchor", "k", "value")
    }
    for anchor in ANCHORS:
        for k in K_VALUES:
            truth = model.throughput(anchor, k)
            noise = np.exp(cv * rng.standard_normal(runs))
            outlier = np.where(rng.random(runs) < OUTLIER_PROBABILITY, OUTLIER_FACTOR, 1.0)
            combo = f"SERVE--k{k}-BENCH--c{anchor}"
            for number, value in enumerate(truth * noise * outlier):
                rows["source"].append(f"{combo}/summary.json")
                rows["position"].append(number)
                rows["combo"].append(combo)
                rows["run_number"].append(number)
                rows["anchor"].append(anchor)
                rows["k"].append(k)
                rows["value"].append(float(value))
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
            "global_k": [max(K_VALUES)] * count,
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


def run_trial(task: tuple[int, float, int, int, int]) -> dict[str, Any]:
    config, cv, runs, trial, draws = task
    rng = np.random.default_rng([MASTER_SEED, config, trial])
    model = draw_model(rng)
    sweep = measure(model, cv, runs, rng)
    seed = tune(sweep, Settings())
    relaxed = tune(sweep, Settings(max_objective_relative_mad=GATE_OFF))
    report = assess(relaxed, ConfidenceSettings(draws=draws))
    confident = apply_policy(relaxed, report, "confident")
    assert relaxed.ok and confident.ok, [p.describe() for p in confident.errors]
    relaxed_regret, relaxed_wrong = _score(model, _picks(relaxed))
    confident_regret, confident_wrong = _score(model, _picks(confident))
    switches = find_switch_points(confident, report)
    assert switches is not None and confident.schedule is not None
    assert not switches.schedule.violations()
    status = dict(zip(report.anchors["anchor"], report.anchors["status"], strict=True))
    picks = _picks(confident)
    wrong_unflagged = 0
    for anchor in ANCHORS:
        truth = {k: model.throughput(anchor, k) for k in K_VALUES}
        wrong = truth[picks[anchor]] < (1 - TOLERANCE) * max(truth.values())
        wrong_unflagged += wrong and status[anchor] == "resolved"
    return {
        "config": config,
        "seed_ok": seed.ok,
        "seed_regret": _score(model, _picks(seed))[0] if seed.ok else None,
        "relaxed_regret": relaxed_regret,
        "relaxed_wrong": relaxed_wrong,
        "confident_regret": confident_regret,
        "confident_wrong": confident_wrong,
        "wrong_unflagged": wrong_unflagged,
        "unresolved": sum(s == "unresolved" for s in status.values()),
        "step_schedule_regret": schedule_regret(model, confident.schedule),
        "interpolated_schedule_regret": schedule_regret(model, switches.schedule),
        "expected_gain": switches.mean_gain_percent,
    }


def summarise(results: list[dict[str, Any]], configs: list[tuple[float, int]]) -> pl.DataFrame:
    frame = pl.DataFrame(results)
    anchors = len(ANCHORS)
    rows = []
    for index, (cv, runs) in enumerate(configs):
        part = frame.filter(pl.col("config") == index)
        accepted = part.filter(pl.col("seed_ok"))
        rows.append(
            {
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
                "wrong_unflagged_percent": 100
                * part["wrong_unflagged"].sum()
                / (anchors * part.height),
                "unresolved_percent": 100 * part["unresolved"].sum() / (anchors * part.height),
                "step_schedule_mean": _mean(part["step_schedule_regret"]),
                "interpolated_schedule_mean": _mean(part["interpolated_schedule_regret"]),
                "expected_gain_mean": _mean(part["expected_gain"]),
            }
        )
    return pl.DataFrame(rows)


def _mean(values: pl.Series) -> float | None:
    return float(np.mean(values.to_numpy())) if len(values) else None


def _p95(values: pl.Series) -> float | None:
    return float(np.percentile(values.to_numpy(), 95)) if len(values) else None


def markdown(table: pl.DataFrame) -> str:
    """The regret table of docs/confidence.md."""
    lines = [
        "| CV | runs | seed: no schedule | seed | confident (same trials)"
        " | seed, gate off | confident |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in table.to_dicts():

        def pair(a: str, b: str, row: dict[str, Any] = row) -> str:
            if row[a] is None:
                return "n/a"
            return f"{row[a]:.2f} / {row[b]:.2f}"

        lines.append(
            f"| {row['cv_percent']:g}% | {row['runs']} | {row['seed_no_schedule_percent']:.1f}%"
            f" | {pair('seed_mean', 'seed_p95')}"
            f" | {pair('confident_mean_same_trials', 'confident_p95_same_trials')}"
            f" | {pair('seed_gate_off_mean', 'seed_gate_off_p95')}"
            f" | {pair('confident_mean', 'confident_p95')} |"
        )
    return "\n".join(lines)


def flag_markdown(table: pl.DataFrame) -> str:
    """How often picks are wrong, and whether the confident rule said so (% of anchors)."""
    lines = [
        "| CV | runs | wrong picks: seed (gate off) | wrong picks: confident | unresolved"
        " | wrong and resolved | wrong among resolved |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in table.to_dicts():
        resolved = 100 - row["unresolved_percent"]
        among = 100 * row["wrong_unflagged_percent"] / resolved if resolved else 0.0
        lines.append(
            f"| {row['cv_percent']:g}% | {row['runs']} | {row['seed_wrong_percent']:.1f}%"
            f" | {row['confident_wrong_percent']:.1f}% | {row['unresolved_percent']:.1f}%"
            f" | {row['wrong_unflagged_percent']:.2f}% | {among:.1f}% |"
        )
    return "\n".join(lines)


def switch_markdown(table: pl.DataFrame) -> str:
    """Step against interpolated schedules (confident picks), over every batch size."""
    lines = [
        "| CV | runs | step schedule regret | interpolated schedule regret | expected gain |",
        "|---|---|---|---|---|",
    ]
    for row in table.to_dicts():
        lines.append(
            f"| {row['cv_percent']:g}% | {row['runs']} | {row['step_schedule_mean']:.2f}%"
            f" | {row['interpolated_schedule_mean']:.2f}% | {row['expected_gain_mean']:+.2f}% |"
        )
    return "\n".join(lines)


def missed_targets(table: pl.DataFrame) -> list[str]:
    missed = []
    for row in table.to_dicts():
        where = f"CV {row['cv_percent']:g}%, {row['runs']} runs"
        if not row["confident_mean"] < row["seed_gate_off_mean"]:
            missed.append(f"{where}: confident mean regret is not below the seed's")
        if not row["confident_p95"] < row["seed_gate_off_p95"]:
            missed.append(f"{where}: confident p95 regret is not below the seed's")
        if not row["wrong_unflagged_percent"] < 100 * TARGET_WRONG_UNFLAGGED:
            missed.append(f"{where}: wrong-and-unflagged rate is not below 5%")
    return missed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--trials", type=int, default=400, help="trials per CV and run count")
    parser.add_argument(
        "--draws", type=int, default=4000, help="posterior draws per anchor (the CLI uses 10000)"
    )
    parser.add_argument("--workers", type=int, default=2)
    arguments = parser.parse_args()
    configs = [(cv, runs) for runs in RUN_COUNTS for cv in NOISE_CVS]
    tasks = [
        (index, cv, runs, trial, arguments.draws)
        for index, (cv, runs) in enumerate(configs)
        for trial in range(arguments.trials)
    ]
    started = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(arguments.workers) as pool:
        results = pool.map(run_trial, tasks, chunksize=20)
    table = summarise(results, configs)
    print(
        f"{len(tasks)} simulated sweeps ({arguments.trials} per row) in"
        f" {time.perf_counter() - started:.0f} s; regrets in % of the true best throughput,"
        " mean over the 5 anchors of a sweep, then mean / p95 over sweeps\n"
    )
    print(markdown(table))
    print(
        "\nWrong picks (true throughput more than 1 % below the best K's), unresolved anchors,"
        " and wrong picks the confident rule called resolved, in % of all anchors (the last"
        " column: in % of the resolved ones):\n"
    )
    print(flag_markdown(table))
    print(
        "\nDeployed schedules of the confident rule, regret over every batch size 1..256"
        " (the step schedule switches at the upper anchor; the interpolated one at the switch"
        " points), and the gain lib.switch expected from the measurements:\n"
    )
    print(switch_markdown(table))
    missed = missed_targets(table)
    for line in missed:
        print("target missed: " + line)
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
