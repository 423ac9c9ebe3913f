"""lib/second_runs.py: which single-run contenders of an unresolved anchor get a second run;
each rule's boundary from both sides."""

from __future__ import annotations

import pytest

from lib.confidence import CONTENDER_PROBABILITY
from lib.second_runs import differ_beyond_tolerance, second_runs, undecided


@pytest.mark.parametrize(
    ("p", "open_"),
    [
        (None, True),  # unknown: no noise estimate reaches the anchor
        (CONTENDER_PROBABILITY, True),  # the lower bound is in
        (CONTENDER_PROBABILITY - 1e-9, False),
        (0.9 - 1e-9, True),
        (0.9, False),  # reaching the confidence is eps-good already
    ],
)
def test_a_k_is_open_between_the_bounds(p: float | None, open_: bool) -> None:
    assert undecided(p, 0.9) is open_


def test_the_tolerance_boundary_is_a_tie() -> None:
    # 1 / (1 - 0.01) = 1.010101...: exactly there is a tie, a hair above is not.
    at = 100.0 / 0.99
    assert not differ_beyond_tolerance([100.0, at * (1 - 1e-12)], 0.01)
    assert differ_beyond_tolerance([100.0, at * (1 + 1e-9)], 0.01)
    # The order of the values does not matter (a minimised objective reads the same).
    assert differ_beyond_tolerance([at * 1.001, 100.0], 0.01)
    # A zero (no usable measurement) always matters; one value never differs.
    assert differ_beyond_tolerance([100.0, 0.0], 0.01)
    assert not differ_beyond_tolerance([100.0], 0.01)


def test_no_single_run_contender_leaves_the_anchor_to_the_other_rule() -> None:
    assert second_runs({3: 3, 7: 3}, {3: 0.5, 7: 0.5}, {3: 100.0, 7: 110.0}, [3, 7], 0.9, 0.01) is (
        None
    )


def test_open_contenders_far_apart_get_one_run_each() -> None:
    found = second_runs(
        {0: 1, 3: 1, 7: 3},
        {0: 0.01, 3: 0.4, 7: 0.6},
        {0: 50.0, 3: 100.0, 7: 104.0},
        [3, 7],
        0.9,
        0.01,
    )
    assert found is not None
    # K=7 has 3 runs: not this rule's; K=0 is no contender.
    assert dict(found.more_runs) == {3: 1}
    assert found.reasons[3].startswith("lean: a second run (P(eps-good)=0.40")


def test_open_contenders_within_the_tolerance_get_none() -> None:
    found = second_runs({3: 1, 7: 1}, {3: 0.6, 7: 0.7}, {3: 100.0, 7: 100.5}, [3, 7], 0.9, 0.01)
    assert found is not None
    assert dict(found.more_runs) == {3: 0, 7: 0}
    assert "within the 1% tie tolerance of each other (0.5% apart)" in found.reasons[7]


def test_a_settled_contender_gets_none_and_leaves_the_spread_to_the_open_ones() -> None:
    # K=7 at P 0.95 is eps-good already; the open K are 3 and 5, 3 % apart: K=3 and K=5 get
    # second runs, K=7 none, though it is 10 % above them.
    found = second_runs(
        {3: 1, 5: 1, 7: 1},
        {3: 0.3, 5: 0.2, 7: 0.95},
        {3: 100.0, 5: 103.0, 7: 110.0},
        [3, 5, 7],
        0.9,
        0.01,
    )
    assert found is not None
    assert dict(found.more_runs) == {3: 1, 5: 1, 7: 0}
    assert found.reasons[7] == "lean: P(eps-good)=0.95, not between 0.05 and 0.9: no second run"


def test_unknown_p_asks_for_the_noise_estimate() -> None:
    found = second_runs({5: 1, 7: 1}, {}, {5: 100.0, 7: 105.0}, [5, 7], 0.9, 0.01)
    assert found is not None
    assert dict(found.more_runs) == {5: 1, 7: 1}
    assert (
        "P(eps-good) unknown: the second runs give the anchor a noise estimate"
        in (found.reasons[5])
    )


def test_a_k_open_alone_gets_its_second_run() -> None:
    # K=3 alone is open (K=0 at 0.01 is below the bounds): nothing to tie with, so its second
    # run is asked for; with K=5 open beside it and within the tolerance, neither is.
    alone = second_runs({0: 1, 3: 1}, {0: 0.01, 3: 0.47}, {0: 50.0, 3: 100.0}, [3], 0.9, 0.01)
    assert alone is not None and dict(alone.more_runs) == {3: 1}
    assert "the only open K: nothing to tie with" in alone.reasons[3]
    pair = second_runs({3: 1, 5: 1}, {3: 0.47, 5: 0.4}, {3: 100.0, 5: 100.5}, [3, 5], 0.9, 0.01)
    assert pair is not None and dict(pair.more_runs) == {3: 0, 5: 0}
