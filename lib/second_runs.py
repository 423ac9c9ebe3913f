"""Second runs of a lean sweep: at an unresolved anchor, which single-run contenders the
measurement plan asks to run once more (``docs/loop.md``, "Lean designs").

A lean sweep (``tune-spec-k plan --design lean``) measures most cells once. Where such an anchor
is unresolved, the seed-style rule would ask every contender for ``MIN_RUNS_NEEDED`` runs
(or what its noise calls for), 2 more per cell at every anchor: most of the sweep again. This
rule asks less, and only where it decides something:

- **The K that matter** (:func:`undecided`): a contender whose P(eps-good) lies between the
  bounds, at least :data:`~lib.confidence.CONTENDER_PROBABILITY` (the contender's own test) and
  below the confidence (a K at or above it is already eps-good); where P is unknown (no noise
  estimate reaches the anchor) every contender the confidence analysis named (the best single
  run, its ties and the strongest challenger).
- **Where the choice matters** (:func:`differ_beyond_tolerance`): those K's measured objectives
  (geometric means; a single run's value) differ by more than the tie tolerance, largest over
  smallest above ``1 / (1 - tolerance)``, the distance the confidence model calls a tie
  (the same for a minimised objective). Within it, they tie by what was measured: whichever
  is picked, the smaller K where they tie, loses no more than the tolerance by those
  measurements, so a second run is not worth its cost; the anchor stays unresolved, and its
  row says why. A K open alone (:func:`open_alone`: every other K settled below the bounds)
  ties with nothing: its own P is what is in doubt, and its second run is what can settle it.
- **One run more**: each such K with one run gets its second, not the
  runs the noise formula would size from one run's gap (a gap measured once is as noisy as
  the noise it would be compared with); tuning again after the follow-up updates P, and the
  next plan asks again only where it is still needed.

A contender with more runs (a noise probe's cell) is left to the measurement plan's own rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lib.confidence import CONTENDER_PROBABILITY
from lib.numbers import percent_text
from lib.unmeasured import leads

__all__ = [
    "SecondRuns",
    "differ_beyond_tolerance",
    "open_alone",
    "second_runs",
    "undecided",
]


def undecided(p: float | None, confidence: float) -> bool:
    """Whether a contender's P(eps-good) leaves it open: unknown (no noise estimate), or at
    least :data:`CONTENDER_PROBABILITY` and below ``confidence``.

    >>> undecided(None, 0.9), undecided(0.5, 0.9), undecided(0.9, 0.9), undecided(0.04, 0.9)
    (True, True, False, False)
    """
    return p is None or CONTENDER_PROBABILITY <= p < confidence


def differ_beyond_tolerance(centres: Sequence[float], tolerance: float) -> bool:
    """Whether the largest of ``centres`` (measured objectives, > 0) exceeds the smallest by
    more than the tie tolerance (:func:`lib.unmeasured.leads`: ``max * (1 - tolerance) >
    min``, that is ``max / min > 1 / (1 - tolerance)``); exactly at it is a tie.
    A zero or missing centre (no usable measurement) always matters.

    >>> differ_beyond_tolerance([100.0, 101.0], 0.01), differ_beyond_tolerance([100.0, 102.0], 0.01)
    (False, True)
    >>> differ_beyond_tolerance([100.0], 0.01)
    False
    """
    if len(centres) < 2:
        return False
    if not all(math.isfinite(c) and c > 0 for c in centres):
        return True
    return leads(max(centres), min(centres), tolerance, maximize=True)


def open_alone(open_ks: Sequence[int]) -> bool:
    """Whether one K alone is open at the anchor: there is no rival to tie with, so the
    tie-tolerance rule does not apply (its second run is asked for).

    >>> open_alone([3]), open_alone([3, 5]), open_alone([])
    (True, False, False)
    """
    return len(open_ks) == 1


@dataclass(frozen=True)
class SecondRuns:
    """The rule's answer at one anchor, per single-run contender: its more runs (1 for a
    second run, 0 for none) and why."""

    more_runs: Mapping[int, int]
    reasons: Mapping[int, str]


def second_runs(
    runs: Mapping[int, int],
    p_eps_good: Mapping[int, float | None],
    centres: Mapping[int, float],
    contenders: Sequence[int],
    confidence: float,
    tolerance: float,
) -> SecondRuns | None:
    """Second runs at an unresolved anchor (the module doc's rule), from per K its runs so far,
    P(eps-good) (None: unknown) and measured objective, and the confidence analysis'
    contenders. None where no contender has a single run (the measurement plan's own rule
    applies); else per single-run contender 1 more run (it matters, and so does the choice)
    or 0, and why."""
    single = [k for k in contenders if runs.get(k) == 1]
    if not single:
        return None
    open_ks = [k for k in contenders if undecided(p_eps_good.get(k), confidence)]
    bounds = f"between {CONTENDER_PROBABILITY:g} and {confidence:g}"
    named = ", ".join(f"K={k}" for k in open_ks)
    values = [centres.get(k, math.nan) for k in open_ks]
    more: dict[int, int] = {}
    reasons: dict[int, str] = {}
    for k in single:
        p = p_eps_good.get(k)
        if k not in open_ks:
            more[k], reasons[k] = 0, f"lean: P(eps-good)={p:.2f}, not {bounds}: no second run"
        elif not open_alone(open_ks) and not differ_beyond_tolerance(values, tolerance):
            spread = max(values) / min(values) - 1 if len(values) > 1 else 0.0
            more[k], reasons[k] = (
                0,
                f"lean: {named} measured within the {tolerance * 100:g}% tie tolerance of each"
                f" other ({percent_text(spread * 100)} apart): a tie by what was measured, so a"
                " second run would not change what is deployed by more than the tolerance"
                " (keep the smaller K)",
            )
        else:
            state = (
                f"P(eps-good)={p:.2f}, {bounds}"
                if p is not None
                else "P(eps-good) unknown: the second runs give the anchor a noise estimate"
            )
            why = (
                "the only open K: nothing to tie with"
                if open_alone(open_ks)
                else f"the open K, {named}, measured more than the {tolerance * 100:g}% tie"
                " tolerance apart"
            )
            more[k], reasons[k] = (1, f"lean: a second run ({state}; {why}); tune again after it")
    return SecondRuns(more, reasons)
