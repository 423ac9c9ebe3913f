"""How each analysis and export grows with its input, one dimension at a time (issue 24, item 3).

    uv run python bench/bench_scaling.py [--repeats 3]

Four series of synthetic sweeps (bench/make_large_sweep.py's records, written to a temporary
folder), each doubling one dimension from a small base while the others stay put:

- anchors: 16, 32, 64, 128 (4 K, 3 runs per cell);
- K: 2, 4, 8, 16 (16 anchors, 3 runs);
- runs per cell: 3, 12, 48, 192 (8 anchors, 4 K);
- context points: 2, 4, 8, 16 (4 anchors, 4 K, 3 runs; prompt lengths 512 x 2^i, swept as
  ``random_input_len``).

Per size, the median over ``--repeats`` of each stage, timed in this process (after one warm-up
run): ``analyse`` (the seed's policy, the confidence model, switch points, the plan),
``deploy`` (the capture rule and the verdict), each batch-only engine format's export, and for
the context series ``grid`` (the analysis per context point) and each context format's export.
The slope is the least-squares slope of log(time) against log(size): 1 is linear, 2 quadratic.
A slope above :data:`SUPER_LINEAR` is flagged. Small sizes carry fixed costs, so slopes below 1
are common; the flag is what to read. Reading the files is bench_cli.py's, not this one's.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_large_sweep import START, anchors, make_record

from lib.analysis import analyse
from lib.context import analyse_contexts
from lib.context_axis import find_context_axis
from lib.deploy.decisions import context_decisions, decisions_of
from lib.deploy.registry import export, formats
from lib.deploy.settings import ExportSettings
from lib.deploy.tuning import deploy_analysis
from lib.settings import ContextSettings, DeploySettings, Options, Settings
from lib.sweeps import load_experiment

#: A slope of log(time) on log(size) above this is flagged: more than linear, with room for
#: the noise of a few repeats on a shared machine.
SUPER_LINEAR = 1.3
SEED = 49_163


def _write(root: Path, num_anchors: int, ks: int, runs: int, prompts: tuple[int, ...] = ()) -> Path:
    """A sweep of ``num_anchors`` x ``ks`` K (0, 1, ...) x ``runs`` runs, at each prompt
    length of ``prompts`` (none: one workload), in the real layout; same arguments, same
    files."""
    rng = random.Random(SEED)
    largest = max(ks - 1, 1)
    for length in prompts or (None,):
        for k in range(ks):
            for batch in anchors(num_anchors):
                name = f"SERVE--k{k}-BENCH--c{batch}" + ("" if length is None else f"-p{length}")
                records: list[dict[str, Any]] = []
                for run in range(runs):
                    # make_large_sweep's model (its context model too), beyond its 8 K: the
                    # record's K is capped where its acceptance model ends, the config's is not.
                    record = make_record(rng, batch, min(k, 7), run, START, context=length)
                    record["speculative_config"] = {
                        "method": "eagle3",
                        "model": "drafter",
                        "num_speculative_tokens": largest,
                        "num_speculative_tokens_per_batch_size": [[1, 2048, k]],
                    }
                    records.append(record)
                folder = root / name
                folder.mkdir(parents=True)
                (folder / "summary.json").write_text(json.dumps(records))
    return root


def _timed(prepare: Callable[[], Any], stage: Callable[[Any], object], repeats: int) -> float:
    """The median time of ``stage`` over ``repeats`` runs, each on a fresh input from
    ``prepare`` (untimed): the analysis caches results per sweep object, and a stage timed
    twice on one object would time the cache. One untimed warm-up first (imports)."""
    stage(prepare())
    times = []
    for _ in range(repeats):
        given = prepare()
        started = time.perf_counter()
        stage(given)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


Stage = tuple[Callable[[], Any], Callable[[Any], object]]


def _stages(root: Path, context: bool) -> dict[str, Stage]:
    """Every stage to time on the sweep at ``root``, by name: (prepare, stage)."""
    settings, options, deploy = Settings(), Options(), DeploySettings()

    def fresh() -> Any:
        return load_experiment(root)

    stages: dict[str, Stage] = {}
    if context:

        def with_axis() -> Any:
            sweep = fresh()
            axis, _ = find_context_axis(sweep, ContextSettings())
            assert axis is not None, "the context series has no axis"
            return sweep, axis

        def grid_decisions() -> Any:
            sweep, axis = with_axis()
            return context_decisions(analyse_contexts(sweep, axis, settings, options))

        stages["grid"] = (with_axis, lambda given: analyse_contexts(*given, settings, options))
        for engine_format in formats():
            if engine_format.needs_grid:
                chosen = ExportSettings(format=engine_format.name)
                stages[f"export {engine_format.name}"] = (
                    grid_decisions,
                    lambda decisions, c=chosen: export(decisions, c),
                )
        return stages

    def analysed() -> Any:
        return analyse(fresh(), settings, options)

    def batch_decisions() -> Any:
        return decisions_of(analysed().result)

    stages["analyse"] = (fresh, lambda sweep: analyse(sweep, settings, options))
    stages["deploy"] = (analysed, lambda analysis: deploy_analysis(analysis, deploy))
    for engine_format in formats():
        if not engine_format.needs_grid:
            chosen = ExportSettings(format=engine_format.name)
            stages[f"export {engine_format.name}"] = (
                batch_decisions,
                lambda decisions, c=chosen: export(decisions, c),
            )
    return stages


def slope(sizes: list[int], seconds: list[float]) -> float:
    """Least-squares slope of log(seconds) on log(size).

    >>> round(slope([1, 2, 4], [1.0, 2.0, 4.0]), 6), round(slope([1, 2, 4], [1.0, 4.0, 16.0]), 6)
    (1.0, 2.0)
    """
    xs = [math.log(s) for s in sizes]
    ys = [math.log(max(t, 1e-9)) for t in seconds]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread


#: Each series: its name, its sizes, and the sweep of a size (anchors, K, runs, prompts).
SERIES: tuple[
    tuple[str, tuple[int, ...], Callable[[int], tuple[int, int, int, tuple[int, ...]]]], ...
] = (
    ("anchors", (16, 32, 64, 128), lambda n: (n, 4, 3, ())),
    ("K", (2, 4, 8, 16), lambda n: (16, n, 3, ())),
    ("runs per cell", (3, 12, 48, 192), lambda n: (8, 4, n, ())),
    ("context points", (2, 4, 8, 16), lambda n: (4, 4, 3, tuple(512 * 2**i for i in range(n)))),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"median of {args.repeats} runs per stage and size; slope of log(time) on log(size)")
    print(f"{'series':<16}{'stage':<28}{'ms per size':<40}{'slope':>7}  flag")
    with tempfile.TemporaryDirectory() as scratch:
        for name, sizes, shape in SERIES:
            times: dict[str, list[float]] = {}
            for size in sizes:
                num_anchors, ks, runs, prompts = shape(size)
                root = _write(Path(scratch) / f"{name}-{size}", num_anchors, ks, runs, prompts)
                for stage, (prepare, run) in _stages(root, context=bool(prompts)).items():
                    times.setdefault(stage, []).append(_timed(prepare, run, args.repeats))
            for stage, seconds in times.items():
                shown = " ".join(f"{1000 * s:7.1f}" for s in seconds)
                rate = slope(list(sizes), seconds)
                flag = "SUPER-LINEAR" if rate > SUPER_LINEAR else ""
                print(f"{name:<16}{stage:<28}{shown:<40}{rate:7.2f}  {flag}")


if __name__ == "__main__":
    main()
