"""Speed of the loader and the policy on a large sweep, as ratios against baselines run in the
same process (no absolute targets: machines differ, ratios travel).

    uv run python bench/bench_core.py [SWEEP_DIR] [--repeats 5] [--runs 20000]

Without SWEEP_DIR a sweep of ``--runs`` runs is generated into a temporary folder by
``bench/make_large_sweep.py`` (and removed afterwards); with it, that sweep is reused as is.

Measured (median of ``--repeats`` timed repetitions after one untimed warm-up; lib and baseline
alternate, so a slow spell of the machine hits both):

- load: ``lib.sweeps.load_experiment(dir)`` against a plain loop
  ``json.loads(path.read_bytes())`` over the very files the loader reads (every summary.json,
  the list made beforehand). Target ratio <= 1.0.
- load with metrics: ``load_experiment(dir, metrics=CLI_METRICS)`` (the columns the CLI needs
  with its default flags) against the same loop. Target ratio <= 0.5. Beside it, for
  information: against an ``orjson.loads`` loop (parsing alone, so 1.0 is the floor of a loader
  that parses with orjson), and the loader with its pause of the garbage collector undone
  against the loader as it is, and the same for the ``orjson.loads`` loop.
- policy: ``lib.schedule.tune(sweep, Settings())`` on the loaded sweep against the pure-Python
  reference policy (``tests/reference_policy.reference_tune_records``) on records parsed
  beforehand. Target: lib at least 10x faster (ratio <= 0.1).
- end to end (no target): load + tune against ``reference_tune(dir)``, both reading the files.
- parsing share (no target): an ``orjson.loads`` loop over the same files against
  ``load_experiment``: the part of loading that is parsing alone.

Both policies must give the same schedule (the bench stops with an AssertionError otherwise).
Peak memory of loading (full, with metrics, the plain loop) is measured in fresh subprocesses
(growth of the peak resident set, ``VmHWM``, above what the interpreter holds after its
imports). Exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "tests")]

from make_large_sweep import DEFAULT_RUNS, bench_sweep  # noqa: E402
from reference_policy import reference_tune, reference_tune_records  # noqa: E402

from lib import sweep_files  # noqa: E402
from lib.schedule import tune  # noqa: E402
from lib.settings import Settings  # noqa: E402
from lib.sweeps import Sweep, load_experiment  # noqa: E402

#: The metric columns the CLI needs with its default flags: the objective and what the health
#: gate reads.
CLI_METRICS = ("output_throughput", "failed", "completed", "num_prompts")

# Child process for the memory figures: argv = mode, sweep dir; prints the growth of the peak
# resident set (KiB) caused by loading, above what the shared imports left. VmHWM, not
# ru_maxrss: Linux carries ru_maxrss over from the (large) parent across exec.
_MEMORY_PROBE = """
import json, resource, sys
from pathlib import Path
from lib.sweeps import load_experiment

def peak_kib():
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

mode, root = sys.argv[1], Path(sys.argv[2])
files = sorted(root.rglob("summary.json"))
before = peak_kib()
if mode == "lib":
    kept = load_experiment(root)
elif mode == "metrics":
    kept = load_experiment(root, metrics=sys.argv[3:])
else:
    kept = [json.loads(path.read_bytes()) for path in files]
print(peak_kib() - before)
"""


class _CollectorLeftRunning:
    """Stands in for the gc module inside lib.sweeps, so that its pause of the collector does
    nothing: the loader as it would be without the pause."""

    isenabled = staticmethod(gc.isenabled)

    @staticmethod
    def disable() -> None:
        pass

    @staticmethod
    def enable() -> None:
        pass


@dataclass(frozen=True)
class Timing:
    """Medians in seconds: wall clock (the figure judged) and this process's CPU time (steadier
    on a busy machine; it adds up Polars' threads, so it can exceed the wall time)."""

    lib_wall: float
    baseline_wall: float
    lib_cpu: float
    baseline_cpu: float


def time_pair(lib: Callable[[], Any], baseline: Callable[[], Any], repeats: int) -> Timing:
    """Both calls timed ``repeats`` times after one warm-up call each, alternating. The garbage
    of the previous call is collected before each timed call, so neither pays for the other's."""
    lib()
    baseline()
    samples: dict[str, list[tuple[float, float]]] = {"lib": [], "baseline": []}
    for _ in range(repeats):
        for name, call in (("lib", lib), ("baseline", baseline)):
            gc.collect()
            wall, cpu = time.perf_counter(), time.process_time()
            call()
            samples[name].append((time.perf_counter() - wall, time.process_time() - cpu))

    def median(name: str, index: int) -> float:
        return statistics.median(sample[index] for sample in samples[name])

    return Timing(median("lib", 0), median("baseline", 0), median("lib", 1), median("baseline", 1))


def peak_memory_mib(mode: str, sweep_dir: Path) -> float:
    probe = subprocess.run(
        [sys.executable, "-c", _MEMORY_PROBE, mode, str(sweep_dir), *CLI_METRICS],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return int(probe.stdout.strip()) / 1024


def summary_files(sweep_dir: Path) -> list[Path]:
    """The files the loader reads on a sweep where every combo has its summary.json."""
    return sorted(sweep_dir.rglob("summary.json"))


def check_same_schedule(sweep_dir: Path) -> tuple[list[list[int]], int]:
    sweep = load_experiment(sweep_dir)
    result = tune(sweep, Settings())
    assert result.ok, "lib rejected the bench sweep:\n" + "\n".join(
        problem.describe() for problem in result.errors
    )
    reference = reference_tune(sweep_dir)
    assert result.schedule is not None
    schedule = result.schedule.to_json()
    assert schedule == reference["schedule"], (
        f"lib and the reference disagree: {schedule} vs {reference['schedule']}"
    )
    lib_picks = dict(zip(result.decisions["anchor"], result.decisions["selected_k"], strict=True))
    reference_picks = {d["batch_size"]: d["selected_k"] for d in reference["decisions"]}
    assert lib_picks == reference_picks, "lib and the reference pick different K at some anchor"
    kept = tune(load_experiment(sweep_dir, metrics=CLI_METRICS), Settings())
    assert kept.decisions.equals(result.decisions), "loading fewer metrics changed the decisions"
    return schedule, sweep.runs.height


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("sweep_dir", nargs="?", type=Path, help="reuse this sweep")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    with bench_sweep(args.sweep_dir, args.runs) as sweep_dir:
        return run_bench(sweep_dir, args.repeats)


def run_bench(sweep_dir: Path, repeats: int) -> int:
    schedule, num_runs = check_same_schedule(sweep_dir)
    files = summary_files(sweep_dir)
    print(f"{num_runs} runs in {len(files)} summary.json files; both policies give {schedule}")

    def plain_loop() -> list[Any]:
        return [json.loads(path.read_bytes()) for path in files]

    def orjson_loop() -> list[Any]:
        return [orjson.loads(path.read_bytes()) for path in files]

    def orjson_loop_collector_paused() -> list[Any]:
        gc.disable()
        try:
            return orjson_loop()
        finally:
            gc.enable()

    def load_metrics() -> Sweep:
        return load_experiment(sweep_dir, metrics=CLI_METRICS)

    def load_metrics_collector_running() -> Sweep:
        real, sweep_files.gc = sweep_files.gc, _CollectorLeftRunning  # type: ignore[assignment]
        try:
            return load_metrics()
        finally:
            sweep_files.gc = real

    load = time_pair(lambda: load_experiment(sweep_dir), plain_loop, repeats)
    parse_share = time_pair(orjson_loop, lambda: load_experiment(sweep_dir), repeats)
    load_kept = time_pair(load_metrics, plain_loop, repeats)
    kept_vs_parse = time_pair(load_metrics, orjson_loop, repeats)
    kept_collector = time_pair(load_metrics_collector_running, load_metrics, repeats)
    parse_collector = time_pair(orjson_loop, orjson_loop_collector_paused, repeats)

    sweep = load_experiment(sweep_dir)
    settings = Settings()
    records_by_file = {
        path.relative_to(sweep_dir).as_posix(): json.loads(path.read_bytes()) for path in files
    }
    policy = time_pair(
        lambda: tune(sweep, settings), lambda: reference_tune_records(records_by_file), repeats
    )
    end_to_end = time_pair(
        lambda: tune(load_experiment(sweep_dir), settings),
        lambda: reference_tune(sweep_dir),
        repeats,
    )

    rows = [
        ("load: load_experiment vs json.loads loop", load, 1.0),
        ("  parsing: orjson loop vs load_experiment", parse_share, None),
        ("load, metrics=CLI's vs json.loads loop", load_kept, 0.5),
        ("  metrics=CLI's vs orjson loop", kept_vs_parse, None),
        ("  metrics=CLI's: GC running vs paused", kept_collector, None),
        ("  orjson loop: GC running vs paused", parse_collector, None),
        ("policy: tune vs reference_tune_records", policy, 0.1),
        ("end to end: load+tune vs reference_tune", end_to_end, None),
    ]
    print(f"\nmedian of {repeats} repetitions; ratio = lib / baseline, lower is better\n")
    header = (
        f"{'what':42} {'lib ms':>8} {'base ms':>8} {'ratio':>6} {'target':>7}  verdict"
        f"  {'cpu ratio':>9}"
    )
    print(header)
    print("-" * len(header))
    missed = 0
    for what, timing, target in rows:
        ratio = timing.lib_wall / timing.baseline_wall
        verdict = "-" if target is None else ("PASS" if ratio <= target else "FAIL")
        missed += verdict == "FAIL"
        shown_target = "-" if target is None else f"<= {target:g}"
        print(
            f"{what:42} {timing.lib_wall * 1e3:8.1f} {timing.baseline_wall * 1e3:8.1f}"
            f" {ratio:6.3f} {shown_target:>7}  {verdict:7}"
            f"  {timing.lib_cpu / timing.baseline_cpu:9.3f}"
        )
    lib_mib = peak_memory_mib("lib", sweep_dir)
    kept_mib = peak_memory_mib("metrics", sweep_dir)
    plain_mib = peak_memory_mib("plain", sweep_dir)
    print(
        f"\npeak RSS growth while loading: load_experiment {lib_mib:.0f} MiB,"
        f" with metrics=CLI's {kept_mib:.0f} MiB,"
        f" json.loads loop {plain_mib:.0f} MiB (ratio {lib_mib / plain_mib:.2f});"
        f" policy speed-up {policy.baseline_wall / policy.lib_wall:.1f}x"
    )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
