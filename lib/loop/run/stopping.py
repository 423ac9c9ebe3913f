"""When ``tune-spec-k run`` stops: one small pure function per rule, each True when its rule
says stop, and :func:`stop_after_round` / :func:`stop_before_round`, which apply them in order
and say why (docs/loop.md, "Run the loop").

After a round is tuned, in this order:

1. :func:`is_ready`: the verdict is ``ready``: nothing left to measure.
2. :func:`added_nothing`: the round added no run to any cell its plan asked for (every run
   failed, or the plan asked for nothing new): another round planned from the same result
   would ask for the same again.
3. :func:`rounds_spent`: ``--max-rounds`` rounds are done.

Before the next round, once it is planned:

4. :func:`nothing_left`: the follow-up plan has no sweep: nothing left that changes a
   decision (every anchor resolved, no switch point worth a new anchor).
5. :func:`picks_only`: the follow-up would measure only anchors' current picks (no new
   anchor, no other K): no other K contends there (each below P(eps-good) 0.05) or it ties
   with the pick within the tolerance by what was measured, so the round could make the
   verdict ready but, by the tuning so far, change no deployed K (a run-only rule: ``plan
   --follow-up`` still plans those runs, for a verdict of ready).
6. :func:`over_budget`: the GPU time spent plus the next round's estimate exceeds
   ``--budget-gpu-hours``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "Stop",
    "added_nothing",
    "budget_stop",
    "is_ready",
    "nothing_left",
    "over_budget",
    "picks_only",
    "rounds_spent",
    "stop_after_round",
    "stop_before_round",
]


@dataclass(frozen=True)
class Stop:
    """A stop: the rule's name (as ``rounds.json`` records it) and what it found."""

    rule: str
    text: str


def is_ready(verdict: str | None) -> bool:
    """The verdict is ``ready`` (``provisional``, ``cannot-tune`` and none go on).

    >>> is_ready("ready"), is_ready("provisional"), is_ready(None)
    (True, False, False)
    """
    return verdict == "ready"


def added_nothing(asked: Mapping[tuple[int, int], int], now: Mapping[tuple[int, int], int]) -> bool:
    """No cell the plan asked for (``asked``: (anchor, K) -> its runs before the round) has
    more runs ``now``; a plan that asked for nothing added nothing.

    >>> added_nothing({(1, 3): 1}, {(1, 3): 3}), added_nothing({(1, 3): 1}, {(1, 3): 1})
    (False, True)
    >>> added_nothing({}, {(1, 3): 3})
    True
    """
    return not any(now.get(cell, 0) > before for cell, before in asked.items())


def rounds_spent(rounds_done: int, max_rounds: int | None) -> bool:
    """``max_rounds`` rounds (round 0 included) are done; no limit when None.

    >>> rounds_spent(2, 2), rounds_spent(1, 2), rounds_spent(9, None)
    (True, False, False)
    """
    return max_rounds is not None and rounds_done >= max_rounds


def nothing_left(planned_sweeps: int) -> bool:
    """The next round's plan has no sweep to run.

    >>> nothing_left(0), nothing_left(1)
    (True, False)
    """
    return planned_sweeps == 0


def picks_only(cells: Iterable[tuple[int, int]], picks: Mapping[int, int | None]) -> bool:
    """Every (anchor, K) the next round would measure is that anchor's current pick (an anchor
    not tuned yet, a new one, has no pick); False for a round that measures nothing.

    >>> picks_only([(2, 3), (4, 0)], {2: 3, 4: 0}), picks_only([(2, 3), (2, 1)], {2: 3})
    (True, False)
    >>> picks_only([(3, 0)], {2: 3, 4: 0}), picks_only([], {2: 3})
    (False, False)
    """
    found = list(cells)
    return bool(found) and all(picks.get(anchor) == k for anchor, k in found)


def over_budget(spent: float, next_round: float, budget: float | None) -> bool:
    """Spent plus the next round's estimate (GPU seconds) exceeds the budget; reaching it
    exactly is within it; no budget when None.

    >>> over_budget(3000, 600, 3600), over_budget(3000, 601, 3600), over_budget(1e9, 1, None)
    (False, True, False)
    """
    return budget is not None and spent + next_round > budget


def stop_after_round(
    verdict: str | None,
    asked: Mapping[tuple[int, int], int],
    now: Mapping[tuple[int, int], int],
    rounds_done: int,
    max_rounds: int | None,
) -> Stop | None:
    """Rules 1-3 after a tuned round, the first that applies (None: plan the next round)."""
    if is_ready(verdict):
        return Stop("ready", "the verdict is ready: every pick resolved")
    if added_nothing(asked, now):
        return Stop(
            "added-nothing",
            "the round added no run to any cell its plan asked for; another round would ask"
            " for the same",
        )
    if rounds_spent(rounds_done, max_rounds):
        return Stop("max-rounds", f"{rounds_done} round(s) done, the --max-rounds limit")
    return None


def stop_before_round(
    planned_sweeps: int,
    spent: float,
    next_round: float,
    budget: float | None,
    cells: Iterable[tuple[int, int]] = (),
    picks: Mapping[int, int | None] | None = None,
) -> Stop | None:
    """Rules 4-6 once the next round is planned (None: run it): ``cells`` are the (anchor, K)
    it measures, ``picks`` each anchor's pick after the last round (None: rule 5 is not
    applied)."""
    if nothing_left(planned_sweeps):
        return Stop(
            "nothing-left",
            "the follow-up plan has nothing to measure that could change a decision",
        )
    if picks is not None and picks_only(cells, picks):
        return Stop(
            "picks-only",
            "the follow-up would only measure the anchors' current picks again (no other K"
            " is asked for there: none contends, or it ties with the pick within the tolerance"
            " by what was measured): it could make the verdict ready, but by the tuning so far"
            " it would change no deployed K",
        )
    return budget_stop(spent, next_round, budget)


def budget_stop(spent: float, next_round: float, budget: float | None) -> Stop | None:
    """Rule 6 alone (:func:`over_budget`), with what it found; None within the budget."""
    if not over_budget(spent, next_round, budget):
        return None
    assert budget is not None
    return Stop(
        "budget",
        f"the next round's estimate, {hours_text(next_round)}, on top of the"
        f" {hours_text(spent)} spent, exceeds the budget of {hours_text(budget)}",
    )


def hours_text(seconds: float) -> str:
    """GPU seconds as the CLI prints them.

    >>> hours_text(5400), hours_text(90)
    ('1.50 GPU-h', '0.03 GPU-h (90 s)')
    """
    hours = seconds / 3600
    return f"{hours:.2f} GPU-h" if hours >= 0.1 else f"{hours:.2f} GPU-h ({seconds:.0f} s)"
