"""Coverage of the traffic answer's interval (lib/traffic_value.py, docs/traffic.md): the share
of simulated sweeps whose true expected gain lies in the interval, which must be at least its
level (0.9).

    uv run python bench/traffic_coverage.py [--trials 400] [--draws 4000] [--seed 42]

Each trial draws a truth from ``bench/simulate_regret.py`` (the step-time model of speculative
decoding: anchors 1, 4, 16, 64, 256, K 0..4), measures it as a sweep would (3 runs per cell,
lognormal run noise of each CV in ``--cvs``; with ``--server-sd``, one offset per cell server
too), tunes it with the real code (``lib.analysis.analyse``, the seed's rule, the CLI's
defaults: ``--server-cv`` 1 %) and weighs the deployed schedule on a mix with
:func:`lib.traffic_value.traffic_value`. The truth: the same expected objective computed from
the true throughput, for the same schedule and the same static K (the one the answer chose),
so what is checked is the interval, not the choice.

Mixes (``MIXES``): weight on the anchors only (measured: the interval's own claim), and a mix
spread over every batch size 1..256 (interpolated: the truth between anchors is the true
curve, not the interpolation, so a miss there is the interpolation's error, which the answer
states as a share, not in the interval).

Same arguments, same numbers. Exit 1 when the coverage of an anchors-only row is below the
level by more than its Monte-Carlo error (the 95 % Wilson upper end under the level).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import simulate_regret as simulator  # noqa: E402

from lib.analysis import analyse  # noqa: E402
from lib.settings import Options, Settings  # noqa: E402
from lib.traffic import TrafficMix, mix_of  # noqa: E402
from lib.traffic_value import INTERVAL_LEVEL, traffic_value  # noqa: E402

ANCHORS = simulator.ANCHORS


def mixes() -> dict[str, TrafficMix]:
    """The mixes each trial is weighed on: small batches, large ones, and all of 1..256."""
    small = mix_of({1: 0.5, 4: 0.3, 16: 0.2}, "small", "csv-weights", 3)
    large = mix_of({16: 0.2, 64: 0.4, 256: 0.4}, "large", "csv-weights", 3)
    spread = mix_of({b: 1.0 / b for b in range(1, 257)}, "spread", "csv-weights", 256)
    assert small is not None and large is not None and spread is not None
    return {"anchors-small": small, "anchors-large": large, "spread-1..256": spread}


def true_gain(
    model: Any, mix: TrafficMix, schedule: Any, static_k: int, maximize: bool = True
) -> float:
    """The schedule's true expected gain over ``static_k`` on ``mix`` (percent), batch sizes
    within the anchors only (as the answer weighs them)."""
    sizes = np.array([b for b in mix.batch_sizes if ANCHORS[0] <= b <= ANCHORS[-1]])
    weights = np.array([w for b, w in zip(mix.batch_sizes, mix.weights, strict=True) if b in sizes])
    scheduled = sum(
        w * model.throughput(float(b), schedule.k_at(int(b)))
        for b, w in zip(sizes, weights, strict=True)
    )
    static = sum(
        w * model.throughput(float(b), static_k) for b, w in zip(sizes, weights, strict=True)
    )
    return 100 * (scheduled / static - 1)


def run_trial(seed: int, cv: float, draws: int, server_sd: float) -> dict[str, tuple[int, int]]:
    """(covered, counted) per mix and arm for one simulated sweep."""
    rng = np.random.default_rng([seed])
    model = simulator.draw_model(rng)
    servers = simulator.Servers("per-cell-server", server_sd, 1) if server_sd > 0 else None
    sweep = simulator.measure(model, cv, 3, "none", rng, servers=servers)
    settings = Settings(max_objective_relative_mad=simulator.GATE_OFF)
    analysis = analyse(sweep, settings, Options(seed=seed))
    result, report = analysis.result, analysis.report
    found: dict[str, tuple[int, int]] = {}
    if result.schedule is None or report is None:
        return found
    report = _with_draws(report, draws)
    for name, mix in mixes().items():
        value = traffic_value(mix, result.schedule, report, settings.objective)
        for arm_name, arm in (("best-static", value.best_static), ("k0", value.k0)):
            if arm is None or arm.k is None or arm.interval is None:
                continue
            truth = true_gain(model, mix, result.schedule, arm.k)
            low, high = arm.interval
            found[f"{name}/{arm_name}"] = (int(low <= truth <= high), 1)
    return found


def _with_draws(report: Any, draws: int) -> Any:
    import dataclasses

    return dataclasses.replace(report, settings=dataclasses.replace(report.settings, draws=draws))


def coverage(
    trials: int, seed: int, cv: float, draws: int = 4000, server_sd: float = 0.0
) -> dict[str, tuple[int, int]]:
    """Covered and counted per mix/arm over ``trials`` seeded trials."""
    totals: dict[str, tuple[int, int]] = {}
    for trial in range(trials):
        for key, (covered, counted) in run_trial(
            seed * 100_003 + trial, cv, draws, server_sd
        ).items():
            c, n = totals.get(key, (0, 0))
            totals[key] = (c + covered, n + counted)
    return totals


def wilson(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    if trials == 0:
        return (0.0, 1.0)
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = (
        z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    )
    return centre - half, centre + half


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--draws", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--cvs", type=float, nargs="+", default=[0.01, 0.02, 0.05])
    parser.add_argument("--server-sd", type=float, default=0.0)
    arguments = parser.parse_args()
    missed = False
    print(f"| run CV | mix / arm | covered | share | 95 % Wilson | level {INTERVAL_LEVEL:g} |")
    print("|---|---|---|---|---|---|")
    for cv in arguments.cvs:
        found = coverage(arguments.trials, arguments.seed, cv, arguments.draws, arguments.server_sd)
        for key, (covered, counted) in sorted(found.items()):
            low, high = wilson(covered, counted)
            below = high < INTERVAL_LEVEL
            missed |= below and key.startswith("anchors")
            mark = "below" if below else "ok"
            print(
                f"| {cv:.0%} | {key} | {covered}/{counted} | {covered / max(counted, 1):.3f} |"
                f" [{low:.3f}, {high:.3f}] | {mark} |"
            )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
