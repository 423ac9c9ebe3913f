"""`tune-spec-k run` against a simulated engine, beside the seed's full grid on the same truths
and noise (issue 41, item 5).

    uv run python bench/simulate_run.py [--seeds 10] [--max-rounds 4] [--families ...]

Each trial puts the stand-in `vllm` (bench/standin_vllm/vllm) on PATH with a truth grid (the
true mean output throughput per (batch size, K), interpolated linearly in log batch size
between the grid's anchors), run noise and a per-server-start offset, and runs:

- the loop: `tune-spec-k run --ks KS --anchors 1,2,4,...,256 --max-rounds R` (round 0 its
  default, the bracketed lean design: K=0, the middle K and the largest at every anchor once
  plus a noise probe, or what ``--first-ks`` picks; later rounds the follow-ups, trimmed to
  the budget where one would pass it), its final schedule the result JSON it leaves, its GPU
  time rounds.json's;
- the seed's full grid: `tune-spec-k plan --num-runs 3` over the same K and anchors, its
  run.sh through the same stand-in (same truth, same noise model, its own draws), tuned by
  `tune-spec-k DIR` with the seed's defaults; its GPU time by the same accounting
  (lib.loop.run.accounting: the runs' durations plus the server starts from the timestamps).

Scored at every batch size 1..256: the deployed K (the schedule's) is "within the tolerance"
when its true throughput there is at least (1 - 1 %) of the truth's best K there. The table
gives, per family, the mean share of batch sizes within the tolerance for both, the mean GPU
hours, and the loop's GPU time as a share of the full grid's (mean of the per-trial ratios).

Families (truths):

- ``sonnet-like-5k`` / ``sonnet-like-8k``, ``moe-5k``: the performance models behind the
  synthetic samples (data/sample_sweeps/generate.py: sonnet-like and moe-non-monotone), at K
  in {0, 1, 2, 3, 5} or {0, ..., 7};
- ``smooth-5k``: speculation pays at small batches and fades smoothly (gains shrink with log
  batch size), K=0 best from 128 on;
- ``cliff-8k``: like smooth, but K >= 4 fall off a cliff (-25 %) from batch 32 on (a capture
  ceiling or a kernel switch), so the best K jumps there.

Noise: run-to-run lognormal 3 % (2 % for the sample models, as their samples), server offsets
1 %; server start 120 s; each run's duration its output tokens over its throughput.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.machinery
import importlib.util
import io
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lib.cli.main import main as cli  # noqa: E402
from lib.loop.run.accounting import read_runs, round_cost, start_basis, start_gaps  # noqa: E402
from lib.schedule import Schedule  # noqa: E402

STANDIN = ROOT / "bench" / "standin_vllm"
ANCHORS = tuple(2**i for i in range(9))
TOLERANCE = 0.01


def _load(name: str, path: Path) -> ModuleType:
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


STANDIN_MODULE = _load("standin_vllm", STANDIN / "vllm")
GENERATE = _load("sample_generate", ROOT / "data" / "sample_sweeps" / "generate.py")


@dataclass(frozen=True)
class Family:
    name: str
    ks: tuple[int, ...]
    truth: Callable[[int, int], float]
    run_cv: float = 0.03
    server_cv: float = 0.01


def _sample_truth(name: str) -> Callable[[int, int], float]:
    experiment = next(e for e in GENERATE.EXPERIMENTS if e.name == name)

    def truth(batch: int, k: int) -> float:
        value: float = GENERATE.model_output_throughput(
            experiment, batch, k, experiment.alpha, experiment.input_len
        )
        return value

    return truth


def _smooth(batch: int, k: int) -> float:
    """Throughput of batch b at K: b x 100 x a gain that starts at 1 + 0.6 (1 - 0.8^K) at
    b = 1 and shrinks with log b, minus a verification cost growing with b x K."""
    gain = 1 + 0.6 * (1 - 0.8**k) * max(0.0, 1 - math.log2(batch) / 7)
    cost = 1 + 0.0004 * batch * k
    return 100.0 * batch**0.85 * gain / cost


def _cliff(batch: int, k: int) -> float:
    return _smooth(batch, k) * (0.75 if k >= 4 and batch >= 32 else 1.0)


FAMILIES = (
    Family("sonnet-like-5k", (0, 1, 2, 3, 5), _sample_truth("sonnet-like"), run_cv=0.02),
    Family("sonnet-like-8k", tuple(range(8)), _sample_truth("sonnet-like"), run_cv=0.02),
    Family("moe-5k", (0, 1, 2, 3, 5), _sample_truth("moe-non-monotone"), run_cv=0.02),
    Family("smooth-5k", (0, 1, 2, 3, 5), _smooth),
    Family("cliff-8k", tuple(range(8)), _cliff),
)


def _ends_two(ks: tuple[int, ...]) -> tuple[int, ...]:
    ordered = sorted(ks)
    inner = {ordered[round(len(ordered) * i / 3)] for i in (1, 2)}
    return tuple(sorted({ordered[0], ordered[-1], *inner}))


FIRST_KS: dict[str, Callable[[tuple[int, ...]], tuple[int, ...]] | None] = {
    "run-default": None,
    "every-k": lambda ks: tuple(sorted(ks)),
    "ends-two": _ends_two,
}


def truth_grid(family: Family) -> dict[str, dict[str, float]]:
    return {str(b): {str(k): family.truth(b, k) for k in family.ks} for b in ANCHORS}


def share_within(
    schedule: Schedule | None, grid: dict[str, dict[str, float]], ks: tuple[int, ...]
) -> float:
    """The share of batch sizes 1..256 whose deployed K is within the tolerance of the
    truth's best there (0 without a schedule)."""
    if schedule is None:
        return 0.0
    good = 0
    for batch in range(1, ANCHORS[-1] + 1):
        values = {k: STANDIN_MODULE.truth_at(grid, batch, k) for k in ks}
        deployed = schedule.k_at(batch)
        if deployed in values and values[deployed] >= (1 - TOLERANCE) * max(values.values()):
            good += 1
    return good / ANCHORS[-1]


def _schedule(path: Path) -> Schedule | None:
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    schedule, _ = Schedule.parse(data.get("num_speculative_tokens_per_batch_size"))
    return schedule


def _quiet(argv: list[str]) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return cli(argv)


@dataclass(frozen=True)
class Outcome:
    """One tuning of one trial: its GPU seconds, share within the tolerance, rounds, and
    whether it ended ready (the full grid: its verdict)."""

    seconds: float
    share: float
    rounds: int
    ready: bool
    #: The run refused to start: round 0's estimate alone is over the budget (exit 2).
    refused: bool = False


def _loop(
    design: list[str], folder: Path, name: str, flags: list[str], grid: Any, ks: tuple[int, ...]
) -> Outcome:
    status = _quiet(["run", *design, "--results-dir", "R", "-e", name, *flags])
    if status == 2 and not (folder / "R" / name / "rounds.json").exists():
        return Outcome(0.0, 0.0, 0, False, refused=True)
    assert status == 0, f"tune-spec-k run exit {status} in {folder}"
    rounds = json.loads((folder / "R" / name / "rounds.json").read_text())
    return Outcome(
        seconds=float(rounds["gpu_seconds"]),
        share=share_within(
            _schedule(folder / "R" / name / "speculative_k_schedule.json"), grid, ks
        ),
        rounds=len(rounds["rounds"]),
        ready=rounds["stop"]["rule"] == "ready",
    )


def trial(
    family: Family,
    seed: int,
    max_rounds: int,
    budget_shares: list[float],
    folder: Path,
    loop_anchors: tuple[int, ...] = ANCHORS,
    loop_flags: tuple[str, ...] = (),
    first_ks: Callable[[tuple[int, ...]], tuple[int, ...]] | None = None,
) -> dict[str, Outcome]:
    grid = truth_grid(family)
    model = {
        "truth": grid,
        "run_cv": family.run_cv,
        "server_cv": family.server_cv,
        "seed": seed,
        "start_seconds": 120.0,
        "overhead_seconds": 5.0,
    }
    truth_file = folder / "truth.json"
    truth_file.write_text(json.dumps(model))
    os.environ["STANDIN_VLLM_TRUTH"] = str(truth_file)
    # The stand-in draws its noise from seeds that include its clock: a fixed start makes a
    # trial the same each time it is run.
    (folder / "clock").write_text(repr(1_800_000_000.0))
    os.environ["STANDIN_VLLM_CLOCK"] = str(folder / "clock")
    design = ["--model", "M", "--method", "eagle3", "--draft-model", "D"]
    design += ["--ks", ",".join(map(str, family.ks)), "--anchors", ",".join(map(str, ANCHORS))]
    loop_design = [*design[:-1], ",".join(map(str, loop_anchors)), *loop_flags]
    if first_ks is not None:
        loop_design += ["--first-ks", ",".join(map(str, first_ks(family.ks)))]
    os.chdir(folder)
    # The seed's full grid, 3 runs per cell, tuned with the seed's defaults.
    _quiet(
        [
            "plan",
            *design,
            "--num-runs",
            "3",
            "-o",
            "plan",
            "--results-dir",
            "R",
            "--experiment-name",
            "grid",
        ]
    )
    status = os.system("bash plan/run.sh > grid.log 2>&1")
    assert status == 0, (folder / "grid.log").read_text()[-2000:]
    _quiet([str(folder / "R" / "grid")])
    runs = read_runs([folder / "R" / "grid"])
    cost = round_cost(runs, start_basis(start_gaps(runs), 120.0), 0)
    result = json.loads((folder / "R" / "grid" / "speculative_k_schedule.json").read_text())
    outcomes = {
        "full grid": Outcome(
            cost.seconds,
            share_within(
                _schedule(folder / "R" / "grid" / "speculative_k_schedule.json"), grid, family.ks
            ),
            1,
            result.get("verdict", {}).get("state") == "ready",
        )
    }
    rounds = ["--max-rounds", str(max_rounds)]
    outcomes[f"loop, <= {max_rounds} rounds"] = _loop(
        loop_design, folder, "loop", rounds, grid, family.ks
    )
    # Within a budget of a share of the full grid's GPU time, the runs estimated at the full
    # grid's mean duration (what a user who has run this model before would state).
    mean_run = statistics.fmean(r.duration for r in runs if r.duration is not None)
    for share in budget_shares:
        budget = ["--budget-gpu-hours", f"{share * cost.seconds / 3600:.6f}"]
        budget += ["--run-seconds", f"{mean_run:.3f}", "--server-start-seconds", "120"]
        name = f"loop, budget {100 * share:.0f} % of the grid"
        experiment = f"budget-{100 * share:.0f}"
        outcomes[name] = _loop(loop_design, folder, experiment, [*rounds, *budget], grid, family.ks)
    return outcomes


def paired_difference(differences: list[float]) -> str:
    """The mean of per-trial differences (the loop's share less the grid's, in points on the
    same truth and noise) with its standard error, ``sd / sqrt(n)``; a dash for the grid
    against itself.

    >>> paired_difference([1.0, 3.0]), paired_difference([0.0, 0.0])
    ('+2.0 +- 1.0', '-')
    """
    if not any(differences):
        return "-"
    error = (
        statistics.stdev(differences) / math.sqrt(len(differences))
        if len(differences) > 1
        else math.nan
    )
    return f"{statistics.fmean(differences):+.1f} +- {error:.1f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--max-rounds", type=int, default=4)
    parser.add_argument("--budget-shares", type=float, nargs="*", default=[0.4, 0.6])
    parser.add_argument("--families", nargs="*", default=[f.name for f in FAMILIES])
    parser.add_argument(
        "--loop-anchors",
        default=",".join(map(str, ANCHORS)),
        help="the loop's --anchors (default: the full grid's, 1,2,4,...,256); e.g."
        " 1,4,16,64,256: round 0 measures every other one, and the measurement plan's new"
        " anchors (geometric midpoints, where neighbouring picks disagree) fill in the rest",
    )
    parser.add_argument(
        "--loop-flags",
        default="",
        help="more flags of the loop's tune-spec-k run, e.g. '--num-runs 2' (the noise probe's"
        " runs of a cell)",
    )
    parser.add_argument(
        "--first-ks",
        choices=sorted(FIRST_KS),
        default="run-default",
        help="round 0's --first-ks per family: 'run-default' the loop's own (K=0, the middle K"
        " and the largest: lib.loop.plan.lean.bracket_ks); 'every-k' every K (the lean design"
        " unbracketed); 'ends-two' K=0, two inner K a third of the way apart and the largest",
    )
    args = parser.parse_args(argv)
    loop_anchors = tuple(int(a) for a in args.loop_anchors.split(","))
    os.environ["PATH"] = f"{STANDIN}:{os.environ['PATH']}"
    here = os.getcwd()
    rows = []
    started = time.monotonic()
    for family in FAMILIES:
        if family.name not in args.families:
            continue
        trials = []
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            with tempfile.TemporaryDirectory(prefix="simulate-run-") as folder:
                try:
                    trials.append(
                        trial(
                            family,
                            seed,
                            args.max_rounds,
                            args.budget_shares,
                            Path(folder),
                            loop_anchors,
                            tuple(args.loop_flags.split()),
                            FIRST_KS[args.first_ks],
                        )
                    )
                finally:
                    os.chdir(here)
        rows.append((family, trials))
        print(
            f"{family.name}: {len(trials)} trials, {time.monotonic() - started:.0f} s",
            file=sys.stderr,
        )
    print(
        f"seeds {args.first_seed}..{args.first_seed + args.seeds - 1}, anchors 1..256 (9),"
        f" the loop's {args.loop_anchors} {args.loop_flags}" + f" --first-ks {args.first_ks}" + ";"
        " GPU time / grid: the mean (and largest) of the per-trial ratios to the full grid's:"
    )
    print()
    print(
        "| family | K | tuning | trials run | GPU-h | GPU time / grid | batch sizes within 1 %"
        " | vs the grid (points, mean +- SE of the paired differences) | rounds | ready |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for family, trials in rows:
        for name in trials[0]:
            pairs = [(t[name], t["full grid"]) for t in trials if not t[name].refused]
            head = f"| {family.name} | {len(family.ks)} | {name} | {len(pairs)}/{len(trials)}"
            if not pairs:
                print(f"{head} (round 0 alone over the budget) | | | | | | |")
                continue
            outcomes = [o for o, _ in pairs]
            ratios = [o.seconds / g.seconds for o, g in pairs]
            print(
                f"{head} | {statistics.fmean(o.seconds for o in outcomes) / 3600:.2f}"
                f" | {100 * statistics.fmean(ratios):.0f} % ({100 * max(ratios):.0f} %)"
                f" | {100 * statistics.fmean(o.share for o in outcomes):.1f} %"
                f" | {paired_difference([100 * (o.share - g.share) for o, g in pairs])}"
                f" | {statistics.fmean(o.rounds for o in outcomes):.1f}"
                f" | {sum(o.ready for o in outcomes)}/{len(outcomes)} |"
            )


if __name__ == "__main__":
    main()
