"""Time and memory of loading a sweep whose summary.json holds per-request lists
(`vllm bench serve --save-detailed`), as ratios against a baseline run in the same process.

    uv run python bench/bench_bulky_lists.py [--megabytes 225] [--repeats 3]

The sweep: ``make_large_sweep.write_sweep`` (one anchor, K 0..7), then the first combo's
summary.json given, in each record, the six lists `--save-detailed` writes for 1,000 requests
of 128 tokens (``ttfts``, ``itls``, ``input_lens``, ``output_lens``, ``generated_texts``,
``errors``), with as many runs as make that file about ``--megabytes`` MB. Seeded: same
arguments, same bytes.

Each load runs in a forked child, so that its peak memory is its own: memory is the child's
peak resident size (``ru_maxrss``) minus its size when it started. Loads compared:

- ``cli``: ``load_experiment(..., metrics=Settings().metrics_read())``, what ``tune-spec-k``
  reads; ``all``: every metric (``metrics=None``), what the app reads;
- ``whole``: each of those with the large-file reading turned off (the file parsed whole, as
  before :mod:`lib.bulky_lists`): the baseline;
- ``lean``: the same sweep with no lists at all: the memory of the kept columns themselves.

Case and baseline alternate ``--repeats`` times; medians are printed. Targets: the load with
the lists emptied takes at most the whole load's time (ratio <= 1), and its memory is near the
kept columns: at most the lean load's plus 5 % of the file's size (it holds the kept text and
one list at a time, never the file). Exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import make_large_sweep  # noqa: E402

import lib.sweep_files  # noqa: E402
from lib.settings import Settings  # noqa: E402
from lib.sweeps import load_experiment  # noqa: E402

SEED = 20261130
TOKENS_PER_REQUEST = 128
REQUESTS = 1000
TARGET_TIME_RATIO = 1.0
TARGET_MEMORY_SHARE = 0.05


def detailed_lists(rng: random.Random, requests: int) -> dict[str, Any]:
    """The six per-request lists of one `vllm bench serve --save-detailed` record."""
    return {
        "input_lens": [rng.randint(100, 1000) for _ in range(requests)],
        "output_lens": [TOKENS_PER_REQUEST] * requests,
        "ttfts": [rng.uniform(0.01, 0.5) for _ in range(requests)],
        "itls": [
            [rng.uniform(0.005, 0.05) for _ in range(TOKENS_PER_REQUEST - 1)]
            for _ in range(requests)
        ],
        "generated_texts": [f"text {rng.random()}" for _ in range(requests)],
        "errors": [""] * requests,
    }


def write_bulky_sweep(folder: Path, megabytes: float, *, lists: bool) -> Path:
    """The bench's sweep under ``folder``; returns the summary.json made large.

    Eight combos (one anchor, K 0..7) of RUNS runs each, RUNS chosen so that the first
    combo's summary.json, whose records get ``REQUESTS`` requests' lists each, holds about
    ``megabytes`` MB (vLLM writes it with ``indent=4``, as here)."""
    rng = random.Random(SEED)
    record_bytes = len(json.dumps(detailed_lists(random.Random(SEED), REQUESTS), indent=4))
    runs = max(1, round(megabytes * 1e6 / record_bytes))
    make_large_sweep.write_sweep(folder, 8 * runs, runs)
    summary = min(folder.glob("*/summary.json"))
    if lists:
        records = json.loads(summary.read_text())
        for record in records:
            record.update(detailed_lists(rng, REQUESTS))
        summary.write_text(json.dumps(records, indent=4))
    return summary


def _resident_bytes() -> int:
    with open("/proc/self/statm") as file:
        return int(file.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measured(load: Callable[[], Any]) -> tuple[float, int]:
    """(seconds, peak bytes above the start) of ``load`` in a forked child."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(reader)
        start_bytes = _resident_bytes()
        start = time.perf_counter()
        load()
        seconds = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        os.write(writer, json.dumps([seconds, max(0, peak - start_bytes)]).encode())
        os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as pipe:
        text = pipe.read()
    _, status = os.waitpid(pid, 0)
    if status != 0 or not text:
        raise SystemExit(f"a measured load failed (status {status})")
    seconds, peak = json.loads(text)
    return float(seconds), int(peak)


def loader(folder: Path, metrics: tuple[str, ...] | None, digest: bool) -> Callable[[], Any]:
    def load() -> Any:
        if not digest:
            lib.sweep_files.SCAN_FROM_BYTES = 1 << 62  # type: ignore[attr-defined]
        experiment = load_experiment(folder, metrics=metrics)
        if experiment.problems:
            raise SystemExit(f"unexpected problems: {experiment.problems}")
        return experiment

    return load


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--megabytes", type=float, default=225.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    missed = 0
    with tempfile.TemporaryDirectory(prefix="tune-spec-k-bench-") as scratch:
        bulky = Path(scratch) / "bulky"
        lean = Path(scratch) / "lean"
        summary = write_bulky_sweep(bulky, args.megabytes, lists=True)
        write_bulky_sweep(lean, args.megabytes, lists=False)
        size = summary.stat().st_size
        print(f"{summary.relative_to(bulky)}: {size / 1e6:.0f} MB; medians of {args.repeats}\n")
        header = (
            f"{'metrics':>8} {'s':>7} {'whole s':>8} {'ratio':>6} {'MiB':>8} {'whole MiB':>10}"
            f" {'lean MiB':>9}  verdict"
        )
        print(header)
        print("-" * len(header))
        for name, metrics in (("cli", Settings().metrics_read()), ("all", None)):
            samples: dict[str, list[tuple[float, int]]] = {"case": [], "whole": [], "lean": []}
            for _ in range(args.repeats):
                samples["case"].append(measured(loader(bulky, metrics, True)))
                samples["whole"].append(measured(loader(bulky, metrics, False)))
                samples["lean"].append(measured(loader(lean, metrics, True)))
            seconds = {
                key: statistics.median(s for s, _ in value) for key, value in samples.items()
            }
            memory = {key: statistics.median(m for _, m in value) for key, value in samples.items()}
            ratio = seconds["case"] / seconds["whole"]
            ok = (
                ratio <= TARGET_TIME_RATIO
                and memory["case"] - memory["lean"] <= TARGET_MEMORY_SHARE * size
            )
            missed += not ok
            print(
                f"{name:>8} {seconds['case']:7.2f} {seconds['whole']:8.2f} {ratio:6.2f}"
                f" {memory['case'] / 2**20:8.0f} {memory['whole'] / 2**20:10.0f}"
                f" {memory['lean'] / 2**20:9.0f}  {'PASS' if ok else 'FAIL'}"
            )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
