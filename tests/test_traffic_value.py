"""What the schedule buys on a mix (lib/traffic_value.py): the expected objective of each arm,
derived by hand below; the shares of the mix said; the interval's coverage on the simulator."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from bench_scripts import load_bench_script
from sweep_builder import write_grid

from lib.analysis import analyse
from lib.schedule import Schedule
from lib.settings import Options, Settings
from lib.sweeps import load_experiment
from lib.traffic import mix_of
from lib.traffic_value import INTERVAL_LEVEL, TrafficValue, gain_interval, traffic_value

#: Runs whose geometric mean is the centre exactly: x / 1.01, x, x * 1.01.
SPREAD = (1 / 1.01, 1.0, 1.01)


def _cells(centres: dict[tuple[int, int], float]) -> dict[tuple[int, int], list[float]]:
    return {cell: [x * f for f in SPREAD] for cell, x in centres.items()}


#: Batch 1: K=2 wins 150 vs 100; batch 4: K=0 400 vs K=2 380.
CENTRES = {(1, 0): 100.0, (1, 2): 150.0, (4, 0): 400.0, (4, 2): 380.0}


def _value(tmp_path: Path, weights: dict[int, float], schedule: Schedule) -> TrafficValue:
    analysis = analyse(load_experiment(write_grid(tmp_path, _cells(CENTRES))), Settings())
    assert analysis.report is not None
    mix = mix_of(weights, "mix.csv", "csv-weights", len(weights))
    assert mix is not None
    return traffic_value(mix, schedule, analysis.report, "output_throughput")


def test_each_arm_s_expected_objective_and_the_gains(tmp_path: Path) -> None:
    schedule = Schedule(((1, 3, 2), (4, 4, 0)))
    value = _value(tmp_path, {1: 0.5, 2: 0.25, 4: 0.25}, schedule)
    # At 2 (halfway between 1 and 4 in log b) each K is the geometric mean of its anchors:
    # K=2 sqrt(150 * 380) = 238.75, K=0 sqrt(100 * 400) = 200. The schedule runs K=2 at 1 and
    # 2, K=0 at 4: 0.5 * 150 + 0.25 * 238.75 + 0.25 * 400 = 234.69; static K=2:
    # 0.5 * 150 + 0.25 * 238.75 + 0.25 * 380 = 229.69; K=0: 50 + 50 + 100 = 200.
    mid = math.sqrt(150 * 380)
    scheduled = 0.5 * 150 + 0.25 * mid + 0.25 * 400
    static2 = 0.5 * 150 + 0.25 * mid + 0.25 * 380
    assert value.schedule.expected == pytest.approx(scheduled)
    assert value.best_static is not None and value.best_static.k == 2
    assert value.best_static.expected == pytest.approx(static2)
    assert value.best_static.gain_percent == pytest.approx(100 * (scheduled / static2 - 1))
    assert value.k0 is not None and value.k0.expected == pytest.approx(200.0)
    assert value.k0.gain_percent == pytest.approx(100 * (scheduled / 200 - 1))
    # The interval holds the point: the runs are noisy (1 %), the centre is their mean.
    assert value.best_static.interval is not None
    low, high = value.best_static.interval
    assert low < value.best_static.gain_percent < high
    assert value.measured_share == pytest.approx(0.75)
    assert value.interpolated_share == pytest.approx(0.25)
    assert value.above_share == 0.0


def test_the_best_static_k_is_chosen_on_the_mix(tmp_path: Path) -> None:
    # All at batch 4: K=0 (400) beats K=2 (380); all at 1: K=2. Same sweep, two mixes.
    schedule = Schedule(((1, 3, 2), (4, 4, 0)))
    large = _value(tmp_path / "a", {4: 1.0}, schedule)
    small = _value(tmp_path / "b", {1: 1.0}, schedule)
    assert large.best_static is not None and large.best_static.k == 0
    assert small.best_static is not None and small.best_static.k == 2
    # The schedule is the best static K on either mix: no gain, a zero-width interval (the
    # same draws on both sides).
    assert large.best_static.gain_percent == pytest.approx(0.0)
    assert large.best_static.interval == pytest.approx((0.0, 0.0))


def test_batch_sizes_above_the_largest_anchor_are_reported_not_weighed(tmp_path: Path) -> None:
    schedule = Schedule(((1, 3, 2), (4, 4, 0)))
    value = _value(tmp_path, {1: 0.6, 8: 0.4}, schedule)
    assert value.above_share == pytest.approx(0.4)
    # Only batch 1 weighed: the schedule is K=2 there, 150 against K=0's 100.
    assert value.schedule.expected == pytest.approx(150.0)
    assert "40.0% above the largest anchor 4 (not measured, left out)" in value.line()


def test_a_k_the_schedule_runs_unmeasured_is_said(tmp_path: Path) -> None:
    value = _value(tmp_path, {1: 0.5, 4: 0.5}, Schedule(((1, 3, 3), (4, 4, 0))))
    # K=3 was not measured at 1: half of the mix cannot be weighed.
    assert value.unmeasured_k_share == pytest.approx(0.5)
    assert "where the schedule's K was not measured" in value.line()


def test_the_answer_is_deterministic(tmp_path: Path) -> None:
    schedule = Schedule(((1, 3, 2), (4, 4, 0)))
    first = _value(tmp_path / "a", {1: 0.5, 2: 0.5}, schedule)
    second = _value(tmp_path / "b", {1: 0.5, 2: 0.5}, schedule)
    assert first.to_json() == second.to_json()


def test_the_interval_covers_the_true_gain_on_the_simulator() -> None:
    """A small seeded run of bench/traffic_coverage.py (the big run: docs/traffic.md): over
    60 simulated sweeps at 2 % run noise, the share whose true expected gain lies in the
    interval, on the mixes at anchors, is at least the level less its Monte-Carlo error
    (the 95 % Wilson upper end reaches it)."""
    bench = load_bench_script("traffic_coverage")
    found = bench.coverage(60, 7, 0.02, draws=2000)
    for key, (covered, counted) in found.items():
        if not key.startswith("anchors"):
            continue
        assert counted >= 50, key
        assert bench.wilson(covered, counted)[1] >= INTERVAL_LEVEL, (key, covered, counted)


def test_the_block_written_reads_back(tmp_path: Path) -> None:
    import json

    from lib.traffic_value import read_traffic_block

    value = _value(tmp_path, {1: 0.5, 2: 0.25, 4: 0.25}, Schedule(((1, 3, 2), (4, 4, 0))))
    data = json.loads(json.dumps({"traffic": value.to_json()}))
    block, reasons = read_traffic_block(data)
    assert reasons == [] and block is not None
    assert block.given and block.source == "mix.csv"
    assert value.best_static is not None and block.best_static is not None
    assert block.best_static.k == 2
    assert block.best_static.gain_percent == pytest.approx(value.best_static.gain_percent, 1e-4)
    assert value.best_static.interval is not None and block.best_static.interval is not None
    assert block.best_static.interval == pytest.approx(value.best_static.interval, abs=1e-4)
    assert block.shares["interpolated"] == pytest.approx(0.25)
    assert block.statement == value.line()
    # A file without the block (the seed's, or before issue 42): none, no complaint.
    assert read_traffic_block({}) == (None, [])
    # A damaged block is refused, naming the field.
    data["traffic"]["best_static_k"]["interval_percent"] = "wide"
    assert read_traffic_block(data) == (
        None,
        ["traffic.best_static_k.interval_percent: expected [low, high] or null"],
    )


def test_single_run_cells_get_an_interval_from_the_assumed_or_borrowed_noise(
    tmp_path: Path,
) -> None:
    # A lean sweep: every cell once. The anchors' P rest on --run-cv's assumed noise
    # (lib.confidence's fallbacks), and so must the traffic interval: with --run-cv 0 the noise
    # is unknown and there is no interval; with the default 2 % there is one around the point.
    single = {cell: [x] for cell, x in CENTRES.items()}
    schedule = Schedule(((1, 3, 2), (4, 4, 0)))
    mix = mix_of({1: 0.5, 4: 0.5}, "mix.csv", "csv-weights", 2)
    assert mix is not None
    gains = {}
    for run_cv, folder in ((0.02, "assumed"), (0.0, "unknown")):
        sweep = load_experiment(write_grid(tmp_path / folder, single))
        analysis = analyse(sweep, Settings(min_runs=1), options=Options(run_cv=run_cv))
        assert analysis.report is not None
        gains[run_cv] = traffic_value(mix, schedule, analysis.report, "output_throughput").k0
    assumed, unknown = gains[0.02], gains[0.0]
    assert assumed is not None and assumed.interval is not None
    low, high = assumed.interval
    assert low < assumed.gain_percent < high
    assert unknown is not None and unknown.interval is None


def test_a_heavy_tailed_draw_saturates_instead_of_turning_the_interval_into_nan() -> None:
    """A borrowed noise of one degree of freedom draws log objectives far in the tails (a
    stand-in sweep met draws past 709, where exp overflows: both arms' values were inf in the
    same draws, their ratio inf / inf = NaN, the interval NaN, and the result file could not
    be written). 10 of 100 draws at a log of 800 in both arms (a ratio of 1 taken in logs),
    the other 90 a gain of 10 %."""
    scheduled = np.concatenate([np.log(np.full(90, 110.0)), np.full(10, 800.0)])
    other = np.concatenate([np.log(np.full(90, 100.0)), np.full(10, 800.0)])
    # The naive ratio of the exponentials is NaN in those draws.
    with np.errstate(over="ignore", invalid="ignore"):
        assert np.isnan(np.exp(scheduled) / np.exp(other)).sum() == 10
    low, high = gain_interval(scheduled, other, True, 9.0)
    # Sorted gains: 10 of 0 %, 90 of 10 %: the 5th percentile is 0, the 95th 10; widened
    # from 9 by 1.2: 9 - 1.2 x 9 and 9 + 1.2 x 1.
    assert (round(low, 6), round(high, 6)) == (-1.8, 10.2)
    # Minimised, the same logs are losses: 100 / 110 - 1 = -9.09 % in 90 draws, 0 in 10.
    low, high = gain_interval(scheduled, other, False, -8.0)
    assert math.isfinite(low) and math.isfinite(high) and high == pytest.approx(-8.0 + 1.2 * 8.0)
