"""lib/loop/run/rounds.py: rounds.json written and read back unchanged, byte for byte; a
damaged field refused naming it, its value and what was expected."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from paths import REPO

from lib.loop.run.rounds import (
    RoundCost,
    RoundRecord,
    RunLog,
    design_ks_of,
    rounds_of,
    rounds_text,
    with_design_ks,
)
from lib.settings import Settings


def _log() -> RunLog:
    first = RoundRecord(
        number=0,
        plan_dir="plans/round-0",
        purpose="the grid once",
        planned_runs=9,
        planned_starts=3,
        estimated_seconds=189.0,
        status="tuned",
        cost=RoundCost(9, 174.25, 3, 195.5, 2, "the median of 2 measured, 65 s"),
        asked={(1, 0): 0, (1, 3): 0},
        verdict="provisional",
        unresolved=(1, 2),
        picks={1: 3, 2: None},
        p_eps_good={1: 0.5, 2: None},
        schedule=((1, 4, 3),),
    )
    second = RoundRecord(
        number=1,
        plan_dir="plans/round-1",
        purpose="follow-up",
        planned_runs=12,
        planned_starts=2,
        estimated_seconds=300.0,
        status="failed",
        resumes=2,
        failure="the sweep failed",
    )
    return RunLog(
        arguments={"design": {"ks": [0, 3]}},
        rounds=(first, second),
        stop_rule="budget",
        stop_text="over",
        full_grid_seconds=900.0,
    )


def test_a_log_reads_back_as_written() -> None:
    text = rounds_text(_log())
    log, problems = rounds_of(json.loads(text), "rounds.json")
    assert not problems and log == _log()
    assert log is not None and rounds_text(log) == text


def test_spent_is_every_rounds_runs_and_starts() -> None:
    # 174.25 + 195.5 (round 0) + nothing measured in round 1.
    assert _log().spent_seconds == pytest.approx(369.75)
    assert json.loads(rounds_text(_log()))["gpu_seconds"] == 369.75


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("version",), 2, "version"),
        (("rounds", 0, "status"), "done", "rounds[0].status"),
        (("rounds", 0, "runs"), -1, "rounds[0].runs"),
        (("rounds", 0, "schedule"), [[1, 4]], "rounds[0].schedule"),
        (("rounds", 1, "round"), 5, "rounds"),
        (("rounds", 0, "anchors", 0, "p_eps_good"), "high", "rounds[0].anchors[0].p_eps_good"),
        (("arguments",), [], "arguments"),
    ],
)
def test_a_damaged_field_is_named(path: tuple[object, ...], value: object, field: str) -> None:
    data = json.loads(rounds_text(_log()))
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    log, problems = rounds_of(data, "R/E/rounds.json")
    assert log is None and len(problems) == 1
    problem = problems[0]
    assert problem.rule == "invalid-rounds" and problem.field == field
    assert problem.files == ("R/E/rounds.json",) and problem.expected


def test_a_loop_experiment_is_tuned_with_its_design_k(tmp_path: Path) -> None:
    # The real CPU loop's rounds.json holds the design it ran: --ks 0,1,2,3,5.
    sample = REPO / "data/sample_sweeps/real-cpu-loop"
    assert design_ks_of(sample) == (0, 1, 2, 3, 5)
    assert with_design_ks(Settings(), sample).design_ks == (0, 1, 2, 3, 5)
    # Given K win; any other folder has none; a damaged rounds.json gives none (the rounds
    # view and a resumed run say why).
    assert with_design_ks(Settings(design_ks=(0, 7)), sample).design_ks == (0, 7)
    assert design_ks_of(REPO / "data/sample_sweeps/lean") == ()
    (tmp_path / "rounds.json").write_text("{")
    assert design_ks_of(tmp_path) == ()
