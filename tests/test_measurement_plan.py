"""lib.plan: reruns for unresolved anchors and new anchors where neighbouring picks disagree,
as JSON and as text, and the CLI's ``--plan-json``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from sweep_builder import WORKED_EXAMPLE, write_grid

from lib.cli.common import EXIT_BAD_INPUT, EXIT_OK
from lib.cli.main import main
from lib.confidence import (
    MAX_RUNS_NEEDED,
    MAX_SERVERS_NEEDED,
    ConfidenceSettings,
    assess,
)
from lib.measurement_plan import NEW_ANCHOR_SCHEMA, RERUN_SCHEMA, MeasurementPlan, measurement_plan
from lib.policy import apply_policy
from lib.present.text import measurement_plan_lines
from lib.schedule import tune
from lib.settings import RESULT_FILE, Settings
from lib.sweeps import load_experiment

#: Independent runs (no server offsets): the model the plan's older tests derive by hand.
INDEPENDENT = ConfidenceSettings(server_cv=0.0)


def _plan(
    root: Path,
    policy: str = "seed",
    confidence: ConfidenceSettings = INDEPENDENT,
    **settings: Any,
) -> MeasurementPlan:
    """The plan with independent runs (no server offsets) unless ``confidence`` says."""
    result = tune(load_experiment(root), Settings(**settings))
    report = assess(result, confidence)
    return measurement_plan(apply_policy(result, report, policy), report)  # type: ignore[arg-type]


def test_worked_example_reruns_the_contenders_and_the_flagged_run(tmp_path: Path) -> None:
    plan = _plan(write_grid(tmp_path, WORKED_EXAMPLE))
    assert plan.reruns.schema == RERUN_SCHEMA
    # Published: re-measure K=4, rerun K=2 and K=3 (batch 64 is resolved: nothing there).
    assert plan.reruns["batch_size"].to_list() == [1, 1, 1]
    assert plan.reruns["k"].to_list() == [2, 3, 4]
    # Pooled noise 5.2 % against gaps of at most 1.6 %: 12.4 * (5.2 / 1.6)^2 = 131 runs, past
    # the cap of 10, so every contender goes to 10 runs and is noise-limited.
    assert plan.reruns["target_runs"].to_list() == [MAX_RUNS_NEEDED] * 3
    assert plan.reruns["more_runs"].to_list() == [7, 7, 7]
    assert plan.reruns["noise_limited"].all()
    k4 = plan.reruns.filter(plan.reruns["k"] == 4)["reason"].item()
    assert "re-measure the flagged run 0 in SERVE--k4-BENCH--c1/summary.json" in k4


def test_new_anchor_at_the_geometric_midpoint_where_picks_disagree(tmp_path: Path) -> None:
    plan = _plan(write_grid(tmp_path, WORKED_EXAMPLE))
    assert plan.new_anchors.schema == NEW_ANCHOR_SCHEMA
    (row,) = plan.new_anchors.to_dicts()
    # The seed picks K=2 at 1 and K=1 at 64; sqrt(1 * 64) = 8.
    assert (row["batch_size"], row["lower_anchor"], row["upper_anchor"]) == (8, 1, 64)
    assert (row["lower_k"], row["upper_k"]) == (2, 1)
    assert row["ks"] == [0, 1, 2, 3, 4] and row["runs_per_k"] == 3
    # At 1, K=1 (mean log of 148/150/151) loses to K=2 (181/183/184) by exp(difference) - 1;
    # at 64 K=2 loses less to K=1, so the disagreement is the larger, batch 1's.
    mean = {cell: sum(map(math.log, WORKED_EXAMPLE[cell])) / 3 for cell in WORKED_EXAMPLE}
    expected = math.expm1(mean[(1, 2)] - mean[(1, 1)]) * 100
    assert row["disagreement_percent"] == pytest.approx(expected)
    assert "at 1 K=1 is" in row["reason"]


def test_no_new_anchor_between_adjacent_batch_sizes(tmp_path: Path) -> None:
    cells = {(1, 0): [100.0] * 3, (1, 3): [200.0] * 3, (2, 0): [400.0] * 3, (2, 3): [100.0] * 3}
    plan = _plan(write_grid(tmp_path, cells))
    assert plan.new_anchors.is_empty()
    assert plan.empty
    assert measurement_plan_lines(plan)[0].startswith("measurement plan: nothing to measure")


def test_agreeing_neighbours_need_no_new_anchor(tmp_path: Path) -> None:
    cells = {(1, 0): [100.0] * 3, (1, 3): [200.0] * 3, (64, 0): [900.0] * 3, (64, 3): [1000.0] * 3}
    plan = _plan(write_grid(tmp_path, cells))
    assert plan.empty


def test_target_runs_follow_the_formula_when_below_the_cap(tmp_path: Path) -> None:
    # Three K with the same centre and 0.8 % noise: each is eps-good with P between 0.8 and
    # 0.97, short of 0.99. Their gaps are below the 1 % tolerance, so delta is the tolerance.
    values = {0: [99.2, 100.0, 100.8], 1: [99.28, 100.0, 100.88], 2: [99.12, 100.0, 100.8]}
    plan = _plan(
        write_grid(tmp_path, {(1, k): runs for k, runs in values.items()}),
        confidence=ConfidenceSettings(confidence=0.99, server_cv=0.0),
    )
    logs = {k: [math.log(v) for v in runs] for k, runs in values.items()}
    means = {k: sum(x) / 3 for k, x in logs.items()}
    s = math.sqrt(sum((v - means[k]) ** 2 for k, x in logs.items() for v in x) / 6)
    expected = math.ceil(12.4 * (s / -math.log(1 - 0.01)) ** 2)
    assert 3 < expected < MAX_RUNS_NEEDED
    assert plan.reruns["k"].to_list() == [0, 1, 2]
    assert plan.reruns["target_runs"].to_list() == [expected] * 3
    assert plan.reruns["more_runs"].to_list() == [expected - 3] * 3
    assert not plan.reruns["noise_limited"].any()


def test_single_runs_ask_for_a_second_run_of_the_best_and_its_challenger(tmp_path: Path) -> None:
    # No replicated cell: P unknown, the contenders are the best single run (K=2, 160) and the
    # challenger (K=1, 150), 160 / 150 - 1 = 6.7 % apart, beyond the 1 % tolerance: one more
    # run each (lib.second_runs), not the 3 runs of the rule for replicated cells.
    # --run-cv 0: no noise assumed where nothing was replicated, so none is known here.
    cells = {(1, 0): [100.0], (1, 1): [150.0], (1, 2): [160.0], (1, 3): [120.0]}
    assuming_nothing = ConfidenceSettings(server_cv=0.0, run_cv=0.0)
    plan = _plan(write_grid(tmp_path, cells), confidence=assuming_nothing, min_runs=1)
    assert plan.reruns.select("k", "runs", "target_runs", "more_runs").rows() == [
        (1, 1, 2, 1),
        (2, 1, 2, 1),
    ]
    assert "lean: a second run (P(eps-good) unknown" in plan.reruns["reason"][0]


def test_single_runs_within_the_tolerance_get_no_second_run(tmp_path: Path) -> None:
    # The other side: best K=2 (151) and challenger K=1 (150) are 0.67 % apart, within the 1 %
    # tolerance (151 / 150 < 1 / 0.99): a tie by what was measured, no run asked for.
    cells = {(1, 0): [100.0], (1, 1): [150.0], (1, 2): [151.0], (1, 3): [120.0]}
    plan = _plan(write_grid(tmp_path, cells), min_runs=1)
    assert plan.reruns.select("k", "more_runs").rows() == [(1, 0), (2, 0)]
    assert "within the 1% tie tolerance of each other (0.7% apart)" in plan.reruns["reason"][0]


#: A lean anchor with a noise probe: K=0 run 3 times (5 % apart, so the anchor's noise is
#: known and every K gets a P), the other K once.
PROBED = {(1, 0): [100.0, 105.0, 95.0]}


def _probed_plan(tmp_path: Path, single: dict[int, list[float]]) -> tuple[Any, MeasurementPlan]:
    cells = {**PROBED, **{(1, k): runs for k, runs in single.items()}}
    result = tune(load_experiment(write_grid(tmp_path, cells)), Settings(min_runs=1))
    report = assess(result, INDEPENDENT)
    return report, measurement_plan(apply_policy(result, report, "seed"), report)


def test_with_p_known_a_second_run_for_open_contenders_far_apart(tmp_path: Path) -> None:
    # K=3 at 150 and K=7 at 156 (4 % apart) against a 5 % noise: neither is sure, both open.
    report, plan = _probed_plan(tmp_path, {3: [150.0], 7: [156.0]})
    p = dict(zip(report.cells["k"], report.cells["p_eps_good"], strict=True))
    assert 0.05 <= p[3] < 0.9 and 0.05 <= p[7] < 0.9, p
    assert p[0] < 0.05  # 100 against 156: not a contender
    assert plan.reruns.select("k", "runs", "target_runs", "more_runs").rows() == [
        (3, 1, 2, 1),
        (7, 1, 2, 1),
    ]
    assert plan.reruns["reason"][0].startswith(f"lean: a second run (P(eps-good)={p[3]:.2f}")


def test_with_p_known_open_contenders_within_the_tolerance_get_none(tmp_path: Path) -> None:
    # K=3 at 150 and K=7 at 150.9: 0.6 % apart, within the 1 % tolerance, both open.
    report, plan = _probed_plan(tmp_path, {3: [150.0], 7: [150.9]})
    p = dict(zip(report.cells["k"], report.cells["p_eps_good"], strict=True))
    assert 0.05 <= p[3] < 0.9 and 0.05 <= p[7] < 0.9, p
    assert plan.reruns.select("k", "more_runs").rows() == [(3, 0), (7, 0)]


def test_a_probed_contender_keeps_the_rule_for_replicated_cells(tmp_path: Path) -> None:
    # K=7 probed (3 runs around 150) is the one contender; K=3, once at 152, is a lone single
    # run the calibration doubts (P below 0.05): K=7 gets the runs its noise calls for (at
    # least one more than its 3), by the rule for replicated cells, and K=3 nothing.
    report, plan = _probed_plan(tmp_path, {7: [150.0, 157.0, 143.0], 3: [152.0]})
    p = dict(zip(report.cells["k"], report.cells["p_eps_good"], strict=True))
    assert p[3] < 0.05 <= p[7] < 0.9, p
    (row,) = plan.reruns.to_dicts()
    assert (row["k"], row["runs"]) == (7, 3) and row["target_runs"] >= 4
    assert row["reason"].startswith("contender, P(eps-good)=")


def test_json_and_text_present_the_same_plan(tmp_path: Path) -> None:
    plan = _plan(write_grid(tmp_path, WORKED_EXAMPLE))
    data = json.loads(plan.to_json_text())
    assert plan.to_json_text() == plan.to_json_text()
    # 3 reruns of 7 runs, and one new anchor measuring 5 K 3 times.
    assert data["total_more_runs"] == 3 * 7 + 5 * 3
    assert [r["k"] for r in data["reruns"]] == [2, 3, 4]
    assert data["new_anchors"][0]["batch_size"] == 8
    text = "\n".join(measurement_plan_lines(plan))
    assert "  batch_size=1:\n    K=2: 7 more run(s) (3 -> 10)" in text
    assert "new anchor batch_size=8: measure K=[0, 1, 2, 3, 4], 3 run(s) each" in text


def test_plan_follows_the_policy_picks(tmp_path: Path) -> None:
    plan = _plan(write_grid(tmp_path, WORKED_EXAMPLE), policy="confident")
    # The confident rule leans to K=4 at batch 1 (see test_confidence.py).
    assert plan.new_anchors.select("lower_k", "upper_k").rows() == [(4, 1)]


def test_cli_writes_the_plan_json_and_prints_the_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = write_grid(tmp_path / "sweep", WORKED_EXAMPLE)
    plan_file = tmp_path / "plan.json"
    assert main([str(sweep), "--server-cv", "0", "--plan-json", str(plan_file)]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    data = json.loads(plan_file.read_text())
    assert [r["k"] for r in data["reruns"]] == [2, 3, 4]
    assert "measurement plan (confidence 0.9, tie tolerance 1%):" in lines
    assert lines[-2] == f"Wrote {plan_file}"
    assert lines[-1] == f"Wrote {sweep / RESULT_FILE}"


def test_cli_reports_an_unwritable_plan_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = write_grid(tmp_path / "sweep", WORKED_EXAMPLE)
    (tmp_path / "no").write_text("")  # a file where a folder would be made
    missing = tmp_path / "no" / "such" / "plan.json"
    assert main([str(sweep), "--server-cv", "0", "--plan-json", str(missing)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"[unwritable-file] cannot write the file: Not a directory in {missing}" in err


def test_cli_plan_bytes_repeat(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = write_grid(tmp_path / "sweep", WORKED_EXAMPLE)
    texts = []
    for name in ("a", "b"):
        plan_file = tmp_path / f"{name}.json"
        assert (
            main(
                [
                    str(sweep),
                    "--server-cv",
                    "0",
                    "--policy",
                    "confident",
                    "--plan-json",
                    str(plan_file),
                ]
            )
            == 0
        )
        texts.append(plan_file.read_bytes())
    capsys.readouterr()
    assert texts[0] == texts[1]


def test_contenders_already_at_the_cap_are_a_tie_not_a_rerun(tmp_path: Path) -> None:
    # Ten runs each, 5 % noise, 0.2 % apart: no number of runs will separate them.
    pattern = [0.95, 1.05, 0.97, 1.03, 0.99, 1.01, 0.92, 1.08, 0.96, 1.04]
    cells = {(1, 0): [100.0 * f for f in pattern], (1, 2): [100.2 * f for f in pattern]}
    plan = _plan(write_grid(tmp_path, cells))
    assert plan.reruns.select("k", "runs", "more_runs", "noise_limited").rows() == [
        (0, 10, 0, True),
        (2, 10, 0, True),
    ]
    assert "K=0: no more runs: " in "\n".join(measurement_plan_lines(plan))


def _percent(log_sd: float) -> str:
    return f"{math.sqrt(math.expm1(log_sd**2)) * 100:.1f}%"


def test_server_offsets_that_dominate_ask_for_new_server_starts(tmp_path: Path) -> None:
    """K=1 1.6 % ahead of K=0, runs 0.2 % apart, servers assumed 1 % apart (the default), no
    tie tolerance, confidence 0.95: unresolved, and the offsets dominate, so the plan asks for
    server starts of 3 runs each, as many as ``12.4 * (tau^2 + s^2 / 3) / delta^2`` (delta
    the gap), and says what each option buys."""
    base = [99.8, 100.0, 100.2]
    values = {0: base, 1: [v * 1.016 for v in reversed(base)]}
    plan = _plan(
        write_grid(tmp_path, {(1, k): runs for k, runs in values.items()}),
        confidence=ConfidenceSettings(confidence=0.95),
        relative_tolerance=0.0,
    )
    logs = {k: [math.log(v) for v in runs] for k, runs in values.items()}
    means = {k: sum(x) / 3 for k, x in logs.items()}
    run_var = sum((v - means[k]) ** 2 for k, x in logs.items() for v in x) / 4
    server_var = math.log1p(0.01**2)
    gap = means[1] - means[0]
    servers = math.ceil(12.4 * (server_var + run_var / 3) / gap**2)
    assert 2 < servers <= MAX_SERVERS_NEEDED
    rows = plan.reruns.to_dicts()
    assert [row["k"] for row in rows] == [0, 1]
    for row in rows:
        assert (row["servers"], row["new_servers"], row["runs_per_new_server"]) == (
            1,
            servers - 1,
            3,
        )
        assert row["target_runs"] == 3 * servers and row["more_runs"] == 3 * (servers - 1)
        assert "server offsets dominate" in row["reason"]
        more = row["more_runs"]
        now = math.sqrt(run_var / 3 + server_var)
        spread = math.sqrt(run_var / (3 + more) + server_var / servers)
        one = math.sqrt(run_var / (3 + more) + server_var * (9 + more**2) / (3 + more) ** 2)
        assert (
            f"{_percent(now)} now, becomes {_percent(spread)} with {more} more runs on"
            f" {servers - 1} new server starts, {_percent(one)} with them on one"
        ) in row["reason"]


def test_run_noise_that_dominates_asks_for_more_runs_on_one_server(tmp_path: Path) -> None:
    """The same gap with runs 3 % apart: run noise dominates the 1 % assumed offsets, so the
    plan asks for more runs, on the one server start a follow-up sweep makes."""
    values = {0: [97.0, 100.0, 103.0], 1: [98.5, 101.5, 104.5]}
    plan = _plan(
        write_grid(tmp_path, {(1, k): runs for k, runs in values.items()}),
        confidence=ConfidenceSettings(),
    )
    assert not plan.reruns.is_empty()
    for row in plan.reruns.to_dicts():
        assert row["new_servers"] == 1 and row["runs_per_new_server"] == row["more_runs"]
        assert "run noise dominates" in row["reason"]
