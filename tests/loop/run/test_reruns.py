"""lib/loop/run/reruns.py: a refused tuning's cells rerun, where more runs could clear the
refusal; the plan it writes reads back as a follow-up's."""

from __future__ import annotations

from pathlib import Path

from lib.loop.plan.follow_up_needs import follow_up_needs
from lib.loop.run.reruns import refusal_reruns, rerun_plan
from lib.problems import Problem, Severity


def _error(rule: str, anchor: int | None = 8, k: int | None = 1) -> Problem:
    return Problem(Severity.ERROR, rule, "m", anchor=anchor, k=k)


def test_only_refusals_of_a_cell_s_runs_are_rerun() -> None:
    runs = {(8, 1): 3, (2, 3): 1}
    assert refusal_reruns([_error("noisy-objective"), _error("too-few-runs", 2, 3)], runs) == {
        (2, 3): 3,
        (8, 1): 3,
    }
    # Another error (the sweep cannot be tuned whatever is measured), one without a cell, or
    # none at all: nothing to rerun. Warnings do not count.
    assert refusal_reruns([_error("noisy-objective"), _error("unequal-k-sets")], runs) is None
    assert refusal_reruns([_error("noisy-objective", None, None)], runs) is None
    assert refusal_reruns([], runs) is None
    warning = Problem(Severity.WARNING, "unstable-acceptance", "m", anchor=8, k=1)
    assert refusal_reruns([warning], runs) is None


def test_the_cap_of_ten_runs_is_reached_and_not_passed() -> None:
    # 3 more a cell, to at most 10 in all: 7 -> 10, 8 -> 10 (2 more), 10: the spread is the
    # noise's, more runs will not clear it: stop.
    assert refusal_reruns([_error("noisy-objective")], {(8, 1): 7}) == {(8, 1): 3}
    assert refusal_reruns([_error("noisy-objective")], {(8, 1): 8}) == {(8, 1): 2}
    assert refusal_reruns([_error("noisy-objective")], {(8, 1): 10}) is None


def test_the_rerun_plan_reads_back_as_a_follow_up_of_those_cells(tmp_path: Path) -> None:
    plan = rerun_plan({(8, 1): 3, (2, 3): 2}, {(8, 1): 3, (2, 3): 8}, 0.9, 0.01)
    path = tmp_path / "measurement_plan.json"
    path.write_text(plan.to_json_text())
    needs, problems = follow_up_needs([path])
    assert needs is not None, problems
    assert needs.more_runs == {(2, 3): 2, (8, 1): 3}
    assert needs.runs_so_far == {(2, 3): 8, (8, 1): 3}
    assert needs.new_anchors == ()
