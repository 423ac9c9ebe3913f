"""Time and memory of the switch points against the largest batch size, as ratios against a
baseline run in the same process (no absolute targets: machines differ, ratios travel).

    uv run python bench/bench_switch_points.py [--repeats 9] [--calls 20] [--uppers 1e4,1e8,2**62]

Every case is the sweep of ``tests/test_switch_points.py``'s CROSSING with its upper anchor
moved: K=3 doubles K=0 at batch size 1, K=0 quadruples K=3 at the upper anchor, so one switch
lies between the two anchors and every batch size from it to the upper anchor changes K. The
baseline is CROSSING itself (anchors 1 and 16: 13 changed batch sizes). Each sweep is written
to a temporary folder and tuned (seed policy, confidence report) before timing; only
``find_switch_points`` is timed: the median of ``--repeats`` samples, each ``--calls`` calls in a
row (a call takes about a millisecond: a sample that short would time the machine's other
jobs), after one untimed warm-up call; case and baseline samples alternate, the garbage of the
previous sample collected before each.

Memory: the peak of what Python and NumPy allocate during one call (``tracemalloc``: NumPy
reports its buffers to it), above what was allocated before it.

Target: every ratio (case / baseline) at most 3, and memory that does not grow with the upper
anchor. Exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from sweep_builder import write_grid  # noqa: E402

from lib.confidence import assess  # noqa: E402
from lib.policy import apply_policy  # noqa: E402
from lib.schedule import tune  # noqa: E402
from lib.settings import Settings  # noqa: E402
from lib.sweeps import load_experiment  # noqa: E402
from lib.switch_points import find_switch_points  # noqa: E402

BASELINE_UPPER = 16
DEFAULT_UPPERS = "1e4,1e6,1e8,2**62,2**63-1"
TARGET_RATIO = 3.0
#: Memory "does not grow" when a case's peak is within this of the baseline's.
MEMORY_SLACK_BYTES = 64 * 1024


def crossing(upper: int) -> dict[tuple[int, int], list[float]]:
    """CROSSING with its upper anchor at ``upper``."""
    return {
        (1, 0): [100.0] * 3,
        (1, 3): [200.0] * 3,
        (upper, 0): [1600.0] * 3,
        (upper, 3): [400.0] * 3,
    }


def prepared_call(folder: Path, upper: int) -> Callable[[], Any]:
    """``find_switch_points`` on the tuned CROSSING sweep with its upper anchor at ``upper``."""
    write_grid(folder, crossing(upper))
    result = tune(load_experiment(folder), Settings())
    report = assess(result)
    seed = apply_policy(result, report, "seed")
    return lambda: find_switch_points(seed, report)


def median_seconds(
    case: Callable[[], Any], baseline: Callable[[], Any], repeats: int, calls: int
) -> tuple[float, float]:
    """Median seconds per call of ``case`` and of ``baseline``."""
    case()
    baseline()
    samples: dict[str, list[float]] = {"case": [], "baseline": []}
    for _ in range(repeats):
        for name, call in (("case", case), ("baseline", baseline)):
            gc.collect()
            start = time.perf_counter()
            for _ in range(calls):
                call()
            samples[name].append((time.perf_counter() - start) / calls)
    return statistics.median(samples["case"]), statistics.median(samples["baseline"])


def peak_bytes(call: Callable[[], Any]) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        call()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def parse_upper(text: str) -> int:
    """``1e8``, ``2**62``, ``2**63-1`` or a plain integer, as an exact int."""
    if "**" in text:
        base, _, rest = text.partition("**")
        exponent, _, minus = rest.partition("-")
        return int(base) ** int(exponent) - int(minus or 0)
    if "e" in text:
        mantissa, _, exponent = text.partition("e")
        return int(mantissa) * 10 ** int(exponent)
    return int(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--calls", type=int, default=20, help="calls per timed sample")
    parser.add_argument("--uppers", default=DEFAULT_UPPERS, help="comma-separated upper anchors")
    args = parser.parse_args()
    uppers = [parse_upper(text) for text in args.uppers.split(",")]

    with tempfile.TemporaryDirectory() as scratch:
        baseline = prepared_call(Path(scratch) / "baseline", BASELINE_UPPER)
        baseline_memory = peak_bytes(baseline)
        header = (
            f"{'anchors':>26} {'changed sizes':>20} {'ms':>8} {'base ms':>8} {'ratio':>6}"
            f" {'peak KiB':>9} {'base KiB':>9}  verdict"
        )
        print(
            f"find_switch_points, ms per call: median of {args.repeats} samples of {args.calls}"
            " calls; ratio = case / baseline"
        )
        print(f"baseline: anchors {{1, {BASELINE_UPPER}}}\n")
        print(header)
        print("-" * len(header))
        missed = 0
        for upper in uppers:
            case = prepared_call(Path(scratch) / f"upper-{upper}", upper)
            analysis = case()
            assert analysis is not None
            changed = analysis.switches["changed_batch_sizes"].item()
            seconds, baseline_seconds = median_seconds(case, baseline, args.repeats, args.calls)
            memory = peak_bytes(case)
            ratio = seconds / baseline_seconds
            ok = ratio <= TARGET_RATIO and memory <= baseline_memory + MEMORY_SLACK_BYTES
            missed += not ok
            print(
                f"{'{1, ' + str(upper) + '}':>26} {changed:>20} {seconds * 1e3:8.2f}"
                f" {baseline_seconds * 1e3:8.2f} {ratio:6.2f} {memory / 1024:9.1f}"
                f" {baseline_memory / 1024:9.1f}  {'PASS' if ok else 'FAIL'}"
            )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
