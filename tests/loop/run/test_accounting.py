"""lib/loop/run/accounting.py: a round's GPU time from its run files (durations, server
starts from the timestamps, the rest at the median or the estimate) and a plan's estimate."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
from vllm_sweep import llama_design, planned

from lib.loop.run.accounting import (
    MeasuredRun,
    StartBasis,
    plan_estimate,
    read_runs,
    round_cost,
    run_durations,
    start_basis,
    start_gaps,
)

T0 = datetime.datetime(2026, 12, 5, 8, 0, 0, tzinfo=datetime.UTC).timestamp()


def _run(sweep: str, serve: str, end: float | None, duration: float | None = 10.0, k: int = 0):  # type: ignore[no-untyped-def]
    return MeasuredRun(sweep, serve, 1, k, end, duration)


def test_stretches_on_one_server_are_one_start_and_the_gaps_between_are_measured() -> None:
    # k0 runs 0-10 and 12-22; k1 starts at 82 (60 s after k0's end), runs to 92 and 94-104;
    # a second sweep's k3 starts at 134 (30 s after): 3 starts, 2 measured (60 and 30 s).
    runs = [
        _run("a", "SERVE--k0", T0 + 10),
        _run("a", "SERVE--k0", T0 + 22),
        _run("a", "SERVE--k1", T0 + 92),
        _run("a", "SERVE--k1", T0 + 104),
        _run("b", "SERVE--k3", T0 + 144),
    ]
    assert start_gaps(runs) == [60.0, 30.0]
    cost = round_cost(runs, StartBasis(45.0, "the median"), resumes=0)
    # 5 runs x 10 s; starts 60 + 30 measured, the first at 45.
    assert cost.runs == 5 and cost.run_seconds == 50.0
    assert (cost.server_starts, cost.measured_starts, cost.start_seconds) == (3, 2, 135.0)
    assert cost.seconds == 185.0
    # Each resume adds a start at the basis.
    assert round_cost(runs, StartBasis(45.0, ""), resumes=2).start_seconds == 225.0


def test_runs_without_timestamps_count_a_start_per_server_unmeasured() -> None:
    runs = [
        _run("a", "SERVE--k0", None),
        _run("a", "SERVE--k0", None),
        _run("a", "SERVE--k1", None),
    ]
    cost = round_cost(runs, StartBasis(100.0, ""), resumes=0)
    assert (cost.server_starts, cost.measured_starts, cost.start_seconds) == (2, 0, 200.0)


def test_the_basis_is_the_median_measured_else_the_estimate() -> None:
    assert start_basis([10.0, 70.0, 40.0], 120.0).seconds == 40.0
    assert start_basis([], 120.0).seconds == 120.0


def test_read_runs_takes_run_files_not_failures_or_warmups(tmp_path: Path) -> None:
    combo = tmp_path / "round-0" / "SERVE--k3-BENCH--c4-seed0"
    combo.mkdir(parents=True)
    record = {
        "date": "20261205-080010",
        "duration": 10.0,
        "max_concurrency": 4,
        "speculative_config": {"num_speculative_tokens_per_batch_size": [[1, 4, 3]]},
    }
    (combo / "run=0.json").write_text(json.dumps(record))
    (combo / "run=1.failure.json").write_text("{}")
    (combo / "warmup.json").write_text("{}")
    (combo / "summary.json").write_text(json.dumps([record]))
    runs = read_runs([tmp_path / "round-0"])
    assert runs == [
        MeasuredRun((tmp_path / "round-0").as_posix(), "SERVE--k3", 4, 3, T0 + 10, 10.0)
    ]
    assert runs[0].start == T0


def test_a_plan_is_estimated_at_its_cells_measured_durations() -> None:
    plan = planned(llama_design(ks=(0, 3), anchors=(1, 4), num_runs=2))
    # 2 K x 2 anchors x 2 runs = 8 runs, 2 starts. Measured: (1, 0) 10 s, (1, 3) 20 s; the
    # cells not measured at the mean of those, 15 s: 2 x (10 + 20 + 15 + 15) + 2 x 50.
    durations = {(1, 0): 10.0, (1, 3): 20.0}
    estimate = plan_estimate(plan, durations, 99.0, StartBasis(50.0, ""))
    assert (estimate.runs, estimate.starts) == (8, 2)
    assert estimate.seconds == pytest.approx(2 * (10 + 20 + 15 + 15) + 2 * 50)
    # Nothing measured: every run at --run-seconds.
    assert plan_estimate(plan, {}, 99.0, StartBasis(50.0, "")).seconds == 8 * 99 + 100


def test_durations_are_each_cells_mean() -> None:
    runs = [
        _run("a", "s", 1.0, 10.0, k=3),
        _run("a", "s", 2.0, 20.0, k=3),
        _run("a", "s", 3.0, 5.0),
    ]
    assert run_durations(runs) == {(1, 3): 15.0, (1, 0): 5.0}
