"""lib/loop/run/stopping.py: each stop rule on both sides of its boundary, and the order in
which they apply."""

from __future__ import annotations

from lib.loop.run.stopping import (
    added_nothing,
    is_ready,
    nothing_left,
    over_budget,
    picks_only,
    rounds_spent,
    stop_after_round,
    stop_before_round,
)


def test_ready_only_for_ready() -> None:
    assert is_ready("ready")
    assert not any(is_ready(v) for v in ("provisional", "cannot-tune", None))


def test_added_nothing_when_no_asked_cell_gained_a_run() -> None:
    asked = {(1, 3): 1, (4, 3): 3}
    assert added_nothing(asked, {(1, 3): 1, (4, 3): 3})
    assert not added_nothing(asked, {(1, 3): 1, (4, 3): 4})  # one run more in one cell
    assert added_nothing(asked, {(1, 3): 1, (4, 3): 3, (2, 0): 9})  # a cell not asked for


def test_rounds_spent_at_the_limit_not_before() -> None:
    assert rounds_spent(3, 3) and not rounds_spent(2, 3) and not rounds_spent(50, None)


def test_nothing_left_without_a_sweep() -> None:
    assert nothing_left(0) and not nothing_left(1)


def test_over_budget_past_it_not_at_it() -> None:
    assert not over_budget(1000.0, 2600.0, 3600.0)  # exactly the budget
    assert over_budget(1000.0, 2600.5, 3600.0)
    assert not over_budget(1e12, 1e12, None)


def test_after_a_round_ready_comes_first_then_added_nothing_then_the_limit() -> None:
    nothing = ({(1, 3): 1}, {(1, 3): 1})
    something = ({(1, 3): 1}, {(1, 3): 3})
    stop = stop_after_round("ready", *nothing, 5, 5)
    assert stop is not None and stop.rule == "ready"
    stop = stop_after_round("provisional", *nothing, 5, 5)
    assert stop is not None and stop.rule == "added-nothing"
    stop = stop_after_round("provisional", *something, 5, 5)
    assert stop is not None and stop.rule == "max-rounds"
    assert stop_after_round("provisional", *something, 4, 5) is None


def test_before_a_round_nothing_left_comes_before_the_budget() -> None:
    stop = stop_before_round(0, 3000.0, 9999.0, 3600.0)
    assert stop is not None and stop.rule == "nothing-left"
    stop = stop_before_round(2, 3000.0, 601.0, 3600.0)
    assert stop is not None and stop.rule == "budget" and "1.00 GPU-h" in stop.text
    assert stop_before_round(2, 3000.0, 600.0, 3600.0) is None


def test_picks_only_when_every_cell_is_its_anchor_s_pick() -> None:
    picks = {1: 3, 2: 3, 4: 0}
    assert picks_only([(2, 3)], picks) and picks_only([(2, 3), (4, 0)], picks)
    # Another K at an anchor, or a new anchor (no pick yet), could change what is deployed.
    assert not picks_only([(2, 3), (2, 1)], picks)
    assert not picks_only([(2, 3), (3, 0)], picks)
    assert not picks_only([], picks)


def test_before_a_round_picks_only_comes_after_nothing_left_and_before_the_budget() -> None:
    picks = {2: 3}
    stop = stop_before_round(2, 3000.0, 9999.0, 3600.0, [(2, 3)], picks)
    assert stop is not None and stop.rule == "picks-only"
    stop = stop_before_round(2, 3000.0, 9999.0, 3600.0, [(2, 3), (2, 1)], picks)
    assert stop is not None and stop.rule == "budget"
    assert stop_before_round(2, 3000.0, 9999.0, None, [(2, 3), (2, 1)], picks) is None
    # Without the picks (not known) the rule is not applied.
    assert stop_before_round(2, 3000.0, 9999.0, None, [(2, 3)]) is None
