"""lib.switch: switch points between anchors, the interpolated schedule and its expected gain.

Runs within a cell are identical, so each cell's mean log objective is the log of its value and
every expected number follows from the values by hand (derivations in the comments). Random
tables are checked against the rule evaluated at every batch size by an oracle written here.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from sweep_builder import write_grid

from lib.cli.common import EXIT_OK
from lib.cli.main import main
from lib.confidence import ConfidenceReport, assess
from lib.policy import apply_policy
from lib.present.text import switch_point_lines
from lib.schedule import Schedule, TuningResult, tune
from lib.settings import Settings
from lib.sweeps import load_experiment
from lib.switch_points import (
    CURVE_SCHEMA,
    SWITCH_SCHEMA,
    TERM_BY_TERM_LIMIT,
    SwitchPoints,
    find_switch_points,
)

# K=3 doubles K=0 at batch 1 and quarters it at batch 16. Log gain of K=3 over K=0:
# +log 2 at 1, -log 4 = -2 log 2 at 16; linear in t = log b / log 16 it is
# log 2 * (1 - 3 t), zero at t = 1/3: the curves cross at b = 16^(1/3) = 2.52, so from
# batch size 3 on K=0 is better. Step schedule: K=3 up to 15. Interpolated: K=3 up to 2.
CROSSING = {(1, 0): [100.0] * 3, (1, 3): [200.0] * 3, (16, 0): [1600.0] * 3, (16, 3): [400.0] * 3}


def _analyse(root: Path, policy: str = "seed", **settings: Any) -> SwitchPoints:
    result = tune(load_experiment(root), Settings(**settings))
    report = assess(result)
    analysis = find_switch_points(apply_policy(result, report, policy), report)  # type: ignore[arg-type]
    assert analysis is not None
    return analysis


def _k3_advantage(b: int) -> float:
    """K=3's log gain over K=0 in CROSSING at batch size b (the straight line above)."""
    return math.log(2) * (1 - 3 * math.log(b) / math.log(16))


def test_switch_moves_to_the_crossover(tmp_path: Path) -> None:
    analysis = _analyse(write_grid(tmp_path, CROSSING))
    assert analysis.step_schedule == Schedule(((1, 15, 3), (16, 16, 0)))
    assert analysis.schedule == Schedule(((1, 2, 3), (3, 16, 0)))
    (switch,) = analysis.switches.to_dicts()
    assert (switch["from_k"], switch["to_k"]) == (3, 0)
    assert switch["crossover"] == pytest.approx(16 ** (1 / 3))
    assert (switch["switch_at"], switch["step_switch_at"]) == (3, 16)
    assert switch["changed_batch_sizes"] == 13  # 3..15 now run K=0
    assert switch["note"] is None
    assert analysis.schedule.violations() == []


def test_expected_gain_comes_from_the_same_lines(tmp_path: Path) -> None:
    analysis = _analyse(write_grid(tmp_path, CROSSING))
    # At 3..15 the interpolated schedule runs K=0 where the step one runs K=3: the gain is
    # exp(-advantage) - 1; elsewhere both agree (0). Averaged over batch sizes 1..16.
    gains = [math.expm1(-_k3_advantage(b)) * 100 for b in range(3, 16)]
    assert analysis.mean_gain_percent == pytest.approx(sum(gains) / 16)
    assert analysis.max_gain_percent == pytest.approx(max(gains))
    (switch,) = analysis.switches.to_dicts()
    assert switch["gain_percent"] == pytest.approx(sum(gains) / len(gains))


def test_curves_interpolate_linearly_in_log_batch_size(tmp_path: Path) -> None:
    analysis = _analyse(write_grid(tmp_path, CROSSING))
    assert analysis.baseline_k == 0
    assert analysis.curves.schema == CURVE_SCHEMA
    assert analysis.switches.schema == SWITCH_SCHEMA
    curve = dict(analysis.curves.filter(pl.col("k") == 3).select("batch_size", "log_gain").rows())
    assert sorted(curve) == list(range(1, 17))
    for b in (1, 4, 7, 16):
        assert curve[b] == pytest.approx(_k3_advantage(b))
    measured = analysis.curves.filter(pl.col("measured"))["batch_size"].unique().sort()
    assert measured.to_list() == [1, 16]
    assert set(analysis.curves.filter(pl.col("k") == 0)["log_gain"].to_list()) == {0.0}


def test_no_earlier_switch_where_the_upper_pick_rests_on_a_tie(tmp_path: Path) -> None:
    # At 16 K=3 (1005) is 0.5 % above K=0 (1000): a tie, so the seed picks K=0 there. The
    # lines never put K=0 above K=3 before 16, so the switch stays at the anchor.
    cells = {(1, 0): [100.0] * 3, (1, 3): [200.0] * 3, (16, 0): [1000.0] * 3, (16, 3): [1005.0] * 3}
    analysis = _analyse(write_grid(tmp_path, cells))
    assert analysis.schedule == analysis.step_schedule == Schedule(((1, 15, 3), (16, 16, 0)))
    (switch,) = analysis.switches.to_dicts()
    assert switch["switch_at"] == 16 and switch["crossover"] is None
    assert "stays at the anchor" in switch["note"]
    assert analysis.mean_gain_percent == 0.0


def test_switch_right_after_a_lower_pick_that_rests_on_a_tie(tmp_path: Path) -> None:
    # At 1 K=3 (100.5) ties K=0 (100), so K=0 is picked; at 16 K=3 doubles K=0. K=3's line is
    # above K=0's over the whole interval: it takes over right after the anchor.
    cells = {(1, 0): [100.0] * 3, (1, 3): [100.5] * 3, (16, 0): [1000.0] * 3, (16, 3): [2000.0] * 3}
    analysis = _analyse(write_grid(tmp_path, cells))
    assert analysis.step_schedule == Schedule(((1, 15, 0), (16, 16, 3)))
    assert analysis.schedule == Schedule(((1, 1, 0), (2, 16, 3)))
    (switch,) = analysis.switches.to_dicts()
    assert "already above" in switch["note"]
    assert analysis.mean_gain_percent > 0


def test_no_switches_when_every_anchor_picks_the_same_k(tmp_path: Path) -> None:
    cells = {(1, 0): [100.0] * 3, (1, 3): [90.0] * 3, (8, 0): [800.0] * 3, (8, 3): [500.0] * 3}
    analysis = _analyse(write_grid(tmp_path, cells))
    assert analysis.switches.is_empty()
    assert analysis.schedule == analysis.step_schedule == Schedule(((1, 8, 0),))
    assert switch_point_lines(analysis) == ["switch points: none (the same K at every anchor)"]


def test_without_k0_the_smallest_k_is_the_baseline(tmp_path: Path) -> None:
    cells = {(1, 1): [100.0] * 3, (1, 3): [200.0] * 3, (16, 1): [1600.0] * 3, (16, 3): [400.0] * 3}
    analysis = _analyse(write_grid(tmp_path, cells))
    # Same lines as CROSSING with K=1 in K=0's place: the envelope does not move.
    assert analysis.baseline_k == 1
    assert analysis.schedule == Schedule(((1, 2, 3), (3, 16, 1)))


def test_minimised_latency_switches_where_throughput_does(tmp_path: Path) -> None:
    latency = {cell: [1000.0 / v for v in values] for cell, values in CROSSING.items()}
    write_grid(tmp_path, latency, objective="mean_tpot_ms")
    analysis = _analyse(tmp_path, objective="mean_tpot_ms", direction="minimize")
    assert analysis.schedule == Schedule(((1, 2, 3), (3, 16, 0)))
    assert analysis.switches["crossover"].item() == pytest.approx(16 ** (1 / 3))


def test_switches_follow_the_confident_picks(tmp_path: Path) -> None:
    analysis = _analyse(write_grid(tmp_path, CROSSING), policy="confident")
    assert analysis.schedule == Schedule(((1, 2, 3), (3, 16, 0)))


def test_cli_emits_the_interpolated_schedule_on_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = write_grid(tmp_path / "sweep", CROSSING)
    step_file, interpolated_file = tmp_path / "step.json", tmp_path / "interpolated.json"
    assert main([str(sweep), "--output-json", str(step_file)]) == EXIT_OK
    step_out = capsys.readouterr().out
    argv = [str(sweep), "--interpolated-schedule", "--output-json", str(interpolated_file)]
    assert main(argv) == EXIT_OK
    interpolated_out = capsys.readouterr().out
    assert json.loads(step_out.splitlines()[0]) == [[1, 15, 3], [16, 16, 0]]
    assert json.loads(interpolated_out.splitlines()[0]) == [[1, 2, 3], [3, 16, 0]]
    step, interpolated = (
        json.loads(step_file.read_text()),
        json.loads(interpolated_file.read_text()),
    )
    assert step["switch_points"]["schedule_emitted"] == "step"
    assert interpolated["switch_points"]["schedule_emitted"] == "interpolated"
    assert interpolated["num_speculative_tokens_per_batch_size"] == [[1, 2, 3], [3, 16, 0]]
    deployed = interpolated["speculative_config"]["num_speculative_tokens_per_batch_size"]
    assert deployed == [[1, 2, 3], [3, 16, 0]]
    assert step["switch_points"]["interpolated_schedule"] == [[1, 2, 3], [3, 16, 0]]
    assert "K=3 -> K=0 between 1 and 16: curves cross at 2.5; switch at 3" in step_out


# --------------------------------------------------------------------------- large anchors

# CROSSING with the upper anchor at N: K=3's log gain over K=0 is log 2 at 1 and -2 log 2 at
# N, so K=0's advantage over K=3 is d(b) = -log 2 + 3 log 2 * log b / log N
# = -log 2 + beta log b with beta = 3 log 2 / log N, and exp(d(b)) = b^beta / 2.
# - It crosses 0 at b^beta = 2, b = N^(1/3): the switch is the smallest b with b^3 > N.
# - The gain at b is b^beta / 2 - 1; the largest, at N - 1, is (N - 1)^beta / 2 - 1: 3 (300 %)
#   up to a relative 1e-18 when N = 2^62 (N^beta = 2^3).
# - Summed over the changed batch sizes s..N-1 it is the integral of x^beta / 2 - 1 up to
#   O(1) terms: (N^(beta+1) - s^(beta+1)) / (2 (beta + 1)) - (N - s). With N = 2^62,
#   beta = 3/62: N^(beta+1) = 2^65, and the mean over about N batch sizes is
#   2^65 / (2^62 * 2 * 65/62) - 1 = 248/65 - 1 = 183/65 (281.54 %), to a relative s / N (1e-12).
#   With N = 2^63 - 1 the same steps give 8 * 21 / (2 * 22) - 1 = 62/22 (281.82 %).


#
# The loader stops at 2^31 - 1 (lib.keys.LARGEST_WHOLE_NUMBER), the largest anchor a sweep can
# hold: there beta = 3 log 2 / log N, N^beta = 8, and the mean is 8 / (2 (beta + 1)) - 1 to a
# relative s / N = N^(-2/3) (6e-7).


def _mean_gain(upper: int) -> float:
    beta = 3 * math.log(2) / math.log(upper)
    return 8 / (2 * (beta + 1)) - 1


@pytest.mark.parametrize(
    ("upper", "mean_gain", "relative"),
    [(2**31 - 1, _mean_gain(2**31 - 1), 1e-5)],
    ids=["2^31-1"],
)
def test_anchors_up_to_the_limit_cost_what_small_anchors_cost(
    tmp_path: Path, upper: int, mean_gain: float, relative: float
) -> None:
    # The per-batch-size implementation allocated an array of upper + 1 entries: it raised here.
    cells = {(1, 0): [100.0] * 3, (1, 3): [200.0] * 3, (upper, 0): [1600.0] * 3}
    cells[(upper, 3)] = [400.0] * 3
    analysis = _analyse(write_grid(tmp_path, cells))
    switch_at = round(upper ** (1 / 3))
    while switch_at**3 <= upper:
        switch_at += 1
    while (switch_at - 1) ** 3 > upper:
        switch_at -= 1
    assert analysis.schedule == Schedule(((1, switch_at - 1, 3), (switch_at, upper, 0)))
    (switch,) = analysis.switches.to_dicts()
    assert switch["switch_at"] == switch_at
    assert switch["changed_batch_sizes"] == upper - switch_at
    assert switch["crossover"] == pytest.approx(upper ** (1 / 3), rel=1e-12)
    assert switch["gain_percent"] == pytest.approx(100 * mean_gain, rel=relative)
    assert analysis.mean_gain_percent == pytest.approx(100 * mean_gain, rel=relative)
    assert analysis.max_gain_percent == pytest.approx(300.0, rel=1e-8)
    assert json.dumps(analysis.to_json("step"))  # finite numbers, nothing left unserialisable


# --------------------------------------------------------------------------- the rule, brute force


def _rule_by_batch_size(
    anchors: list[int], picks: list[int], means: dict[tuple[int, int], float], last: int
) -> dict[str, Any]:
    """The documented rule (module docstring, docs/confidence.md), evaluated at every integer
    batch size from the first anchor to ``last`` with libm's log: an oracle written apart from
    lib.switch_points and as slow as the rule reads. ``switches``: per pair of neighbouring
    anchors whose picks differ, (upper anchor, switch_at, what the note says or None,
    changed batch sizes)."""
    everywhere = [k for k in sorted({k for _, k in means}) if all((a, k) in means for a in anchors)]
    baseline = everywhere[0] if everywhere else None

    def gain(anchor: int, k: int) -> float:
        return means[(anchor, k)] - (means[(anchor, baseline)] if baseline is not None else 0.0)

    def advantage(lower: int, upper: int, from_k: int, to_k: int, b: int) -> float:
        """to_k's straight line in log batch size minus from_k's, at b."""
        share = math.log(b / lower) / math.log(upper / lower)
        low = gain(lower, to_k) - gain(lower, from_k)
        return low + (gain(upper, to_k) - gain(upper, from_k) - low) * share

    interpolated = {}
    for i, (anchor, k) in enumerate(zip(anchors, picks, strict=True)):
        end = anchors[i + 1] if i + 1 < len(anchors) else last + 1
        interpolated.update(dict.fromkeys(range(anchor, end), k))
    gains = dict.fromkeys(interpolated, 0.0)
    switches = []
    for i in range(len(anchors) - 1):
        (lower, upper), (from_k, to_k) = anchors[i : i + 2], picks[i : i + 2]
        if from_k == to_k:
            continue
        if any((a, k) not in means for a in (lower, upper) for k in (from_k, to_k)):
            switches.append((upper, upper, "no mean for", 0))
            continue
        # The upper envelope; an exact tie goes to the smaller K.
        runs_to_k = {
            b: advantage(lower, upper, from_k, to_k, b) > 0
            or (advantage(lower, upper, from_k, to_k, b) == 0 and to_k < from_k)
            for b in range(lower + 1, upper + 1)
        }
        if not runs_to_k[upper]:
            switches.append((upper, upper, "stays at the anchor", 0))
            continue
        behind = [b for b, ahead in runs_to_k.items() if not ahead]
        switch_at = behind[-1] + 1 if behind else lower + 1
        switches.append((upper, switch_at, None if behind else "already above", upper - switch_at))
        for b in range(switch_at, upper):
            interpolated[b] = to_k
            gains[b] = math.expm1(advantage(lower, upper, from_k, to_k, b)) * 100
    ranges: list[tuple[int, int, int]] = []
    for b, k in interpolated.items():
        if ranges and ranges[-1][2] == k:
            ranges[-1] = (ranges[-1][0], b, k)
        else:
            ranges.append((b, b, k))
    return {
        "switches": switches,
        "schedule": Schedule(tuple(ranges)),
        "mean": math.fsum(gains.values()) / len(gains),
        "max": max(gains.values()),
    }


@pytest.fixture(scope="module")
def crossing_analysis(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[TuningResult, ConfidenceReport]:
    """A real seed result and report, whose picks and means the tests below replace."""
    sweep = load_experiment(write_grid(tmp_path_factory.mktemp("crossing"), CROSSING))
    result = tune(sweep, Settings())
    report = assess(result)
    return apply_policy(result, report, "seed"), report


def _with_picks(
    base: tuple[TuningResult, ConfidenceReport],
    anchors: list[int],
    picks: list[int],
    means: dict[tuple[int, int], float],
    last: int,
) -> SwitchPoints:
    """find_switch_points on ``base`` with its picks and per-cell means replaced (it reads the
    decisions' anchor and selected_k, max_batch_size, the schedule and the cells' mean_score)."""
    result, report = base
    decisions = pl.DataFrame(
        {"anchor": anchors, "selected_k": picks},
        schema={"anchor": pl.Int64, "selected_k": pl.Int64},
    )
    cells = pl.DataFrame(
        {
            "anchor": [a for a, _ in means],
            "k": [k for _, k in means],
            "mean_score": list(means.values()),
        },
        schema={"anchor": pl.Int64, "k": pl.Int64, "mean_score": pl.Float64},
    )
    analysis = find_switch_points(
        dataclasses.replace(
            result,
            decisions=decisions,
            max_batch_size=last,
            schedule=Schedule.from_picks(anchors, picks, last),
        ),
        dataclasses.replace(report, cells=cells),
    )
    assert analysis is not None
    return analysis


def _random_table(
    rng: random.Random, largest: int
) -> tuple[list[int], list[int], dict[tuple[int, int], float], int]:
    """Random anchors up to ``largest``, K, means (some missing) and picks, following the means
    at most anchors and not at others (as a tie, penalty or confidence makes them)."""
    anchors = sorted({1, *(rng.randint(2, largest) for _ in range(rng.randint(1, 4)))})
    ks = sorted(rng.sample(range(8), rng.randint(2, 4)))
    means = {
        (a, k): math.log(rng.uniform(50, 200)) for a in anchors for k in ks if rng.random() < 0.9
    }
    picks = []
    for a in anchors:
        measured = [(means[(a, k)], -k) for k in ks if (a, k) in means]
        picks.append(-max(measured)[1] if measured and rng.random() < 0.8 else rng.choice(ks))
    return anchors, picks, means, anchors[-1] + rng.choice([0, 0, 0, 37])


@pytest.mark.parametrize("largest", [40, 3000, 12000])
def test_switch_points_follow_the_rule_at_every_batch_size(
    crossing_analysis: tuple[TuningResult, ConfidenceReport], largest: int
) -> None:
    # Against the rule evaluated batch size by batch size: schedules, switch points and
    # counts exactly; gains to 1e-11 (the oracle takes libm's log, lib NumPy's, and past
    # TERM_BY_TERM_LIMIT changed batch sizes lib sums in closed form).
    rng = random.Random(largest)
    long_switches = 0
    for _ in range(60 if largest <= 3000 else 20):
        anchors, picks, means, last = _random_table(rng, largest)
        analysis = _with_picks(crossing_analysis, anchors, picks, means, last)
        expected = _rule_by_batch_size(anchors, picks, means, last)
        assert analysis.schedule == expected["schedule"]
        rows = analysis.switches.to_dicts()
        assert [
            (row["upper_anchor"], row["switch_at"], row["changed_batch_sizes"]) for row in rows
        ] == [(upper, switch_at, changed) for upper, switch_at, _, changed in expected["switches"]]
        for row, (_, _, note, _) in zip(rows, expected["switches"], strict=True):
            assert row["note"] is None if note is None else note in row["note"]
            long_switches += row["changed_batch_sizes"] > TERM_BY_TERM_LIMIT
        assert analysis.mean_gain_percent == pytest.approx(expected["mean"], rel=1e-11, abs=1e-11)
        assert analysis.max_gain_percent == pytest.approx(expected["max"], rel=1e-11, abs=1e-11)
    if largest > TERM_BY_TERM_LIMIT:
        assert long_switches > 0, "no switch long enough for the closed form"


def test_the_most_distant_plausible_objectives_do_not_overflow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The objective gate admits values from 1e-100 to 1e100 (lib.gates.PLAUSIBLE_OBJECTIVE):
    # a log-ratio of at most log(1e200) = 460.5, so a gain of e^460.5 ~ 1e200 (%) at the most,
    # inside a float; beyond the gate's range math.expm1 would overflow (e^709.8).
    lowest, highest = 1e-100, 1e100
    cells = {
        (1, 0): [lowest] * 3,
        (1, 3): [highest] * 3,
        (1000, 0): [highest] * 3,
        (1000, 3): [lowest] * 3,
    }
    write_grid(tmp_path, cells)
    output = tmp_path / "schedule.json"
    code = main([str(tmp_path), "--interpolated-schedule", "--output-json", str(output)])
    captured = capsys.readouterr()
    assert code == EXIT_OK, captured.err
    gain = json.loads(output.read_text())["switch_points"]["expected_gain_percent"]["max"]
    assert math.isfinite(gain)
    assert gain > 1e190


def test_the_written_out_gauss_legendre_rule_is_numpy_s_bit_for_bit() -> None:
    """The 8-point rule is written out so that no start imports numpy.polynomial; it must be
    what ``leggauss(8)`` gives, mapped from [-1, 1] to [0, 1], to the last bit."""
    import numpy as np

    from lib import switch_points

    nodes, weights = np.polynomial.legendre.leggauss(8)
    assert switch_points._GAUSS_LEGENDRE_NODES.tobytes() == ((nodes + 1) / 2).tobytes()
    assert switch_points._GAUSS_LEGENDRE_WEIGHTS.tobytes() == (weights / 2).tobytes()
