"""data/sample_sweeps/real-cpu-bracket: a real `tune-spec-k run` on vLLM's CPU build with the
bracketed round 0 and the reruns of a refused tuning (its README). What its log says is checked
against the run files themselves, read here independently of the loop's code."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from paths import SAMPLE_SWEEPS

from lib.loop.run.rounds import rounds_of

SAMPLE = SAMPLE_SWEEPS / "real-cpu-bracket"
LOG = json.loads((SAMPLE / "rounds.json").read_text(encoding="utf-8"))
COMBO = re.compile(r"SERVE--k(\d+)-BENCH--c(\d+)-seed\d+")


def _round_files(number: int) -> list[Path]:
    """Round ``number``'s run files: its sweeps' folders, ``round-N`` (round 0's inner
    ``grid`` included) and ``round-N-*``."""
    folders = [SAMPLE / f"round-{number}", *sorted(SAMPLE.glob(f"round-{number}-*"))]
    return sorted(p for f in folders if f.is_dir() for p in f.rglob("run=*.json"))


def _cells(files: list[Path]) -> Counter[tuple[int, int]]:
    """(anchor, K) -> runs, from the combo folders' names."""
    found: Counter[tuple[int, int]] = Counter()
    for path in files:
        match = COMBO.fullmatch(path.parent.name)
        assert match is not None, path
        found[(int(match[2]), int(match[1]))] += 1
    return found


def test_the_log_reads_back_and_stopped_on_the_refused_cells() -> None:
    log, problems = rounds_of(LOG, "rounds.json")
    assert problems == [] and log is not None
    assert [r.status for r in log.rounds] == ["tuned"] * 5
    assert [r.verdict for r in log.rounds] == ["provisional", *["cannot-tune"] * 4]
    assert log.stop_rule == "cannot-tune"


@pytest.mark.parametrize("number", range(5))
def test_each_round_counts_its_own_run_files_and_their_durations(number: int) -> None:
    record = LOG["rounds"][number]
    files = _round_files(number)
    assert record["runs"] == len(files)
    durations = sum(json.loads(p.read_text(encoding="utf-8"))["duration"] for p in files)
    assert record["run_seconds"] == pytest.approx(durations, abs=0.01)
    assert record["gpu_seconds"] == pytest.approx(
        record["run_seconds"] + record["server_start_seconds"], abs=0.01
    )


def test_round_zero_measured_the_bracket_and_the_others_only_where_open() -> None:
    first = _cells(_round_files(0))
    assert {k for _, k in first} == {0, 2, 5}
    later = _cells([p for n in range(1, 5) for p in _round_files(n)])
    # K=1 at batch 1 was ruled out by round 0 (K=5 beat K=2 clearly): never measured.
    assert (1, 1) not in later
    assert {cell for cell in later if cell[1] in (1, 3)} == {
        (2, 1), (4, 1), (8, 1), (1, 3), (2, 3), (4, 3), (8, 3)
    }  # fmt: skip


def test_the_refused_cells_were_rerun_to_the_cap_and_nothing_else() -> None:
    reruns = _cells([p for n in (2, 3, 4) for p in _round_files(n)])
    assert set(reruns) == {(8, 1), (8, 3)}
    every = _cells([p for n in range(5) for p in _round_files(n)])
    assert every[(8, 1)] == every[(8, 3)] == 10
