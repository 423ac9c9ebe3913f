"""lib/present/rounds.py: the rounds' lines say what rounds.json holds, and the app's table
has a row per (round, anchor) tuned."""

from __future__ import annotations

from lib.loop.run.rounds import RoundCost, RoundRecord, RunLog
from lib.present.rounds import (
    ROUNDS_TABLE_SCHEMA,
    round_measured_lines,
    round_tuned_lines,
    rounds_table,
    summary_lines,
)


def _record(number: int, verdict: str | None, p: float | None, k: int = 3) -> RoundRecord:
    return RoundRecord(
        number=number,
        plan_dir=f"plans/round-{number}",
        purpose="x",
        planned_runs=9,
        planned_starts=3,
        estimated_seconds=100.0,
        status="tuned" if verdict else "planned",
        cost=RoundCost(9, 1800.0, 3, 180.0, 2, "the median of 2 measured, 60 s"),
        verdict=verdict,
        unresolved=(1,) if verdict == "provisional" else (),
        picks={1: k, 4: 0} if verdict else {},
        p_eps_good={1: p, 4: 0.95} if verdict else {},
        schedule=((1, 3, k), (4, 4, 0)) if verdict else None,
    )


def test_the_table_holds_each_tuned_rounds_picks_and_p() -> None:
    log = RunLog(
        {}, (_record(0, "provisional", None), _record(1, "ready", 0.93), _record(2, None, None))
    )
    table = rounds_table(log)
    assert dict(table.schema) == ROUNDS_TABLE_SCHEMA
    assert table.rows() == [
        (0, 1, 3, None, "provisional"),
        (0, 4, 0, 0.95, "provisional"),
        (1, 1, 3, 0.93, "ready"),
        (1, 4, 0, 0.95, "ready"),
    ]


def test_the_lines_say_what_changed_and_what_was_spent() -> None:
    before, after = _record(0, "provisional", None), _record(1, "ready", 0.93, k=2)
    [line] = round_tuned_lines(after, before)
    assert "verdict ready (was provisional)" in line
    assert "unresolved anchors [] (were [1])" in line
    assert "(was [[1, 3, 3], [4, 4, 0]])" in line
    [line] = round_measured_lines(after, 3960.0)
    # 1800 s of runs + 180 s of starts = 0.55 GPU-h; 2 measured, 1 at the median.
    assert "0.55 GPU-h" in line and "2 measured" in line and "1 at the median" in line


def test_the_summary_compares_with_the_full_grid() -> None:
    log = RunLog(
        {},
        (_record(0, "provisional", None), _record(1, "ready", 0.93)),
        stop_rule="ready",
        stop_text="the verdict is ready",
        full_grid_seconds=9900.0,
    )
    lines = summary_lines(log, "--speculative-config '{}'", 45)
    # Spent: 2 x 1980 s = 3960 s, 40 % of 9900 s.
    assert lines[0] == "run stopped: the verdict is ready (ready)"
    assert "--speculative-config '{}'" in lines
    assert lines[-1].endswith(
        "1.10 GPU-h spent; the seed's full grid (45 runs) is estimated at 2.75 GPU-h: 40 % of it"
    )
