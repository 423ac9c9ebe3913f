"""What the schedule buys on a traffic mix: its expected objective against the best static K
and against K=0, each gain with an interval from the confidence model's posterior
(``docs/traffic.md``).

For every batch size b of the mix (:class:`~lib.traffic.TrafficMix`) inside the anchors'
range, an arm's objective at b is its K's cell centre (the mean log objective, the centre the
confidence model ranks by), interpolated linearly in log b between the two anchors around b
(as :mod:`lib.switch_points` interpolates); at an anchor it is the anchor's own. An arm is the
deployed schedule (its K at b: :meth:`~lib.schedule.Schedule.k_at`), a static K (measured at
every anchor), or K=0. Its expected objective is the mix-weighted mean over those b, and the
schedule's gain over an arm is ``E_schedule / E_arm - 1`` (``E_arm / E_schedule - 1`` for a
latency): positive when the schedule is better.

The interval: the same sum over draws of every cell centre from the posterior the confidence
model decides by (:func:`lib.posterior.centre_draws`: run noise and server offsets), each
anchor drawn independently; the gain's :data:`INTERVAL_LEVEL` central interval, widened by
:data:`INTERVAL_WIDENING` about the point for the winner's curse. Its coverage
(the share of simulated sweeps whose true expected gain lies inside) is checked on the
simulator (``bench/traffic_coverage.py``, ``tests/test_traffic_value.py``).

What is not measured is said, never hidden:

- the share of the mix at batch sizes between anchors (interpolated, nothing measured there);
- the share above the largest anchor (the schedule carries its last K there; nothing measured
  says what it buys: reported and left out of the expectation);
- the share where the schedule's K was not measured at both anchors around b (a capped range).

The result file's ``traffic`` block has one writer (:meth:`TrafficValue.to_json`) and one
typed reader (:func:`read_traffic_block`).

Rules (:func:`within_tolerance`): a gain at most the tie tolerance means the schedule buys no
more than noise over that arm.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
from numpy.typing import NDArray

from lib.numbers import objective_text, percent_text
from lib.posterior import AnchorCells, aligned_cells, anchor_cells, centre_draws
from lib.traffic import TrafficMix

if TYPE_CHECKING:
    from lib.confidence import ConfidenceReport
    from lib.schedule import Schedule

__all__ = [
    "INTERVAL_LEVEL",
    "INTERVAL_WIDENING",
    "LOG_RATIO_BOUND",
    "TRAFFIC_STREAM",
    "ArmSet",
    "ArmValue",
    "TrafficBlock",
    "TrafficGain",
    "TrafficValue",
    "bracket",
    "gain_interval",
    "read_traffic_block",
    "traffic_value",
    "within_tolerance",
]

#: The level of the gain's interval: its 5th to 95th percentile.
INTERVAL_LEVEL = 0.9
#: How much wider than the posterior's central interval the reported one is, on each side of
#: the point: the posterior ignores that the schedule's K were picked on the same runs (the
#: winner's curse puts the truth below the posterior interval 8-9 % of the time at 1-10 % run
#: noise, so its 90 % covers 90-91 %); 1.2 covers 94-96 % on the simulator
#: (bench/traffic_coverage.py, docs/traffic.md, "Coverage").
INTERVAL_WIDENING = 1.2
#: The largest log ratio of two arms' values a draw keeps (e^50: far past any real gain, far
#: below float overflow): a heavy-tailed draw saturates instead of turning into inf / inf.
LOG_RATIO_BOUND = 50.0
#: The random stream of the traffic draws (apart from the confidence model's streams).
TRAFFIC_STREAM = 7
#: Posterior draws behind the interval: fewer than the confidence model's 10,000, which decide
#: a P near its bounds; a 5 % / 95 % quantile of 2,000 draws is off by about 0.5 % of the
#: probability (sqrt(0.05 * 0.95 / 2000)), well inside the widening's margin, and the draws of
#: every anchor of a large sweep were most of the CLI's time (bench/bench_cli.py).
TRAFFIC_DRAWS = 2_000


@dataclass(frozen=True)
class ArmSet:
    """Which of the report's "K" are which arm, where they are not draft lengths (``tune-spec-k
    check``'s servers, each a code): the static arms the best is chosen from, the K=0 arm (a
    schedule-enabled engine at K=0), the server without a drafter, each arm's name and the K
    it ran (None: not one K)."""

    statics: tuple[int, ...]
    k0: int | None
    no_drafter: int | None
    labels: Mapping[int, str]
    ks: Mapping[int, int | None]


@dataclass(frozen=True)
class ArmValue:
    """One arm's expected objective over the mix, and the schedule's gain over it (percent;
    None for the schedule itself) with its interval (None where the noise is unknown)."""

    label: str
    k: int | None
    expected: float
    gain_percent: float | None = None
    interval: tuple[float, float] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "expected_objective": round(self.expected, 4),
            "schedule_gain_percent": (
                None if self.gain_percent is None else round(self.gain_percent, 4)
            ),
            "interval_percent": (
                None if self.interval is None else [round(v, 4) for v in self.interval]
            ),
        }

    def gain_text(self) -> str:
        if self.gain_percent is None:
            return ""
        shown = f"{self.gain_percent:+.1f}%"
        if self.interval is not None:
            shown += f" [{self.interval[0]:+.1f}, {self.interval[1]:+.1f}]"
        return shown


@dataclass(frozen=True)
class TrafficValue:
    """The answer on one mix: the schedule, the best static K on the same mix and K=0 (None
    where K=0 was not measured at every anchor), and the shares of the mix (of its busy
    time) that are measured, interpolated, above the largest anchor or at a K not measured."""

    mix: TrafficMix
    objective: str
    maximize: bool
    tolerance: float
    schedule: ArmValue
    best_static: ArmValue | None
    k0: ArmValue | None
    measured_share: float
    interpolated_share: float
    above_share: float
    unmeasured_k_share: float
    largest_anchor: int
    interval_known: bool
    #: The anchors (measured batch sizes) the answer interpolates between.
    anchors: tuple[int, ...] = ()
    #: A server without a drafter, where the sweep has one (``check``): the drafter's cost.
    no_drafter: ArmValue | None = None

    @property
    def evaluated_share(self) -> float:
        return self.measured_share + self.interpolated_share

    def answers(self) -> list[str]:
        """The schedule's gain over each other arm, in the words the CLI's line and the app's
        chart both use."""
        found = []
        best, k0 = self.best_static, self.k0
        if best is not None and best.k != 0:
            name = best.label if best.label.startswith("K=") else f"arm ({best.label})"
            found.append(f"{best.gain_text()} over the best static {name}")
        if k0 is not None:
            also = " (also the best static K)" if best is not None and best.k == 0 else ""
            found.append(f"{k0.gain_text()} over K=0, no speculation{also}")
        else:
            found.append("K=0 not measured at every anchor")
        if self.no_drafter is not None:
            found.append(f"{self.no_drafter.gain_text()} over a server without a drafter")
        return found

    def line(self) -> str:
        """The CLI's one line, printed before the verdict."""
        head = f"traffic ({self.mix.description()}):"
        if self.evaluated_share <= 0:
            return (
                f"{head} no batch size of the mix lies within the measured anchors (all"
                f" {percent_text(100 * self.above_share)} above {self.largest_anchor}):"
                " nothing to weigh"
            )
        parts = [
            f"expected {self.objective} {objective_text(self.schedule.expected)} with the schedule"
        ]
        parts += self.answers()
        level = (
            f"{INTERVAL_LEVEL:.0%} interval from the confidence model's posterior"
            if self.interval_known
            else "no interval: one run per cell, the noise is unknown"
        )
        parts.append(level)
        parts.append(
            f"{percent_text(100 * self.interpolated_share)} of the mix between anchors"
            " (interpolated, nothing measured there)"
        )
        if self.above_share > 0:
            parts.append(
                f"{percent_text(100 * self.above_share)} above the largest anchor"
                f" {self.largest_anchor} (not measured, left out)"
            )
        if self.unmeasured_k_share > 0:
            parts.append(
                f"{percent_text(100 * self.unmeasured_k_share)} where the schedule's K was"
                " not measured (left out)"
            )
        if self.mix.idle_share > 0:
            parts.append(f"idle {percent_text(100 * self.mix.idle_share)} of the samples")
        return f"{head} " + "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "mix": self.mix.to_json(),
            "given": self.mix.given,
            "objective": self.objective,
            "direction": "maximize" if self.maximize else "minimize",
            "interval_level": INTERVAL_LEVEL,
            "schedule": self.schedule.to_json(),
            "best_static_k": None if self.best_static is None else self.best_static.to_json(),
            "k0": None if self.k0 is None else self.k0.to_json(),
            **(
                {}
                if self.no_drafter is None
                else {"no_drafter": {"arm": self.no_drafter.label, **self.no_drafter.to_json()}}
            ),
            "shares": {
                "measured": round(self.measured_share, 6),
                "interpolated": round(self.interpolated_share, 6),
                "above_largest_anchor": round(self.above_share, 6),
                "unmeasured_k": round(self.unmeasured_k_share, 6),
            },
            "largest_anchor": self.largest_anchor,
            "statement": self.line(),
        }


def within_tolerance(gain_percent: float | None, tolerance: float) -> bool:
    """The rule: the schedule's expected gain over an arm is within the tie tolerance when it
    is at most ``100 * tolerance`` percent (equal is within; a loss is within). Unknown: not.

    >>> within_tolerance(1.0, 0.01), within_tolerance(1.01, 0.01), within_tolerance(-3, 0.01)
    (True, False, True)
    >>> within_tolerance(None, 0.01)
    False
    """
    return gain_percent is not None and gain_percent <= 100 * tolerance


def bracket(anchors: Sequence[int], batch_size: int) -> tuple[int, int, float] | None:
    """The anchors around ``batch_size`` and its position between them in log batch size
    (0 at the lower, 1 at the upper); None outside ``[anchors[0], anchors[-1]]``.

    >>> bracket([1, 64], 8), bracket([1, 64], 64), bracket([1, 64], 65)
    ((1, 64, 0.5), (64, 64, 0.0), None)
    """
    if not anchors or batch_size < anchors[0] or batch_size > anchors[-1]:
        return None
    i = bisect.bisect_right(anchors, batch_size) - 1
    lower = anchors[i]
    if lower == batch_size:
        return lower, lower, 0.0
    upper = anchors[i + 1]
    return lower, upper, math.log(batch_size / lower) / math.log(upper / lower)


@dataclass(frozen=True)
class _Anchor:
    """One anchor's cell centres: the means and, where known, the posterior draws, by K."""

    means: Mapping[int, float]
    draws: Mapping[int, NDArray[np.float64]] | None


def _anchors(report: ConfidenceReport, rng: np.random.Generator) -> dict[int, _Anchor]:
    """Each anchor's centres, from its runs without the flagged ones (the anchor is decided
    without them; a cell whose every run was flagged keeps its runs, as the confidence model
    keeps them: :func:`lib.posterior.aligned_cells`), infeasible K left out."""
    full: dict[int, AnchorCells] = anchor_cells(report.runs)
    clean = anchor_cells(report.runs.filter(~pl.col("flagged")))
    settings = dataclasses.replace(report.settings, draws=TRAFFIC_DRAWS)
    found: dict[int, _Anchor] = {}
    for anchor, every in sorted(full.items()):
        cells = aligned_cells(clean[anchor], every) if anchor in clean else every
        draws = centre_draws(cells, settings, rng, report.fallbacks.get(anchor))
        feasible = [i for i, bad in enumerate(cells.infeasible) if not bad]
        means = {int(cells.ks[i]): float(cells.means[i]) for i in feasible}
        by_k = None if draws is None else {int(cells.ks[i]): draws[i] for i in feasible}
        found[anchor] = _Anchor(means, by_k)
    return found


def gain_interval(
    scheduled: NDArray[np.float64], other: NDArray[np.float64], maximize: bool, point: float
) -> tuple[float, float]:
    """The interval of the schedule's gain over another arm, in percent, from the logs of the
    two arms' expected objective per posterior draw: the :data:`INTERVAL_LEVEL` percentiles
    of ``100 (ratio - 1)`` (the ratio the schedule's over the other's, or the other's over
    the schedule's when minimised), each end moved away from ``point`` by
    :data:`INTERVAL_WIDENING`. A log ratio is clipped to :data:`LOG_RATIO_BOUND` first: a
    heavy-tailed draw (a borrowed noise of one degree of freedom) saturates instead of
    overflowing, so the ends are always finite.

    Two draws, gains 10 % and 20 %: the 5th and 95th percentiles 10.5 and 19.5, widened from
    15 by 1.2: 15 - 1.2 x 4.5 and 15 + 1.2 x 4.5.

    >>> low, high = gain_interval(np.log([110.0, 120.0]), np.log([100.0, 100.0]), True, 15.0)
    >>> round(low, 2), round(high, 2)
    (9.6, 20.4)
    """
    log_ratio = scheduled - other if maximize else other - scheduled
    ratio = np.exp(np.clip(log_ratio, -LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    tail = 100 * (1 - INTERVAL_LEVEL) / 2
    low, high = np.percentile(100 * (ratio - 1), [tail, 100 - tail])
    return (
        point - INTERVAL_WIDENING * (point - float(low)),
        point + INTERVAL_WIDENING * (float(high) - point),
    )


def traffic_value(
    mix: TrafficMix,
    schedule: Schedule,
    report: ConfidenceReport,
    objective: str,
    global_k: int | None = None,
    arms: ArmSet | None = None,
) -> TrafficValue:
    """The answer for ``schedule`` on ``mix`` from the runs ``report`` assessed; ``arms``:
    which "K" are which server where they are arm codes (None: draft lengths, K=0 the
    baseline, every K measured at every anchor a static candidate)."""
    rng = np.random.default_rng([report.settings.seed, TRAFFIC_STREAM])
    anchors = _anchors(report, rng)
    ordered = sorted(anchors)
    sign = 1.0 if report.maximize else -1.0
    everywhere = set.intersection(*(set(a.means) for a in anchors.values())) if anchors else set()
    statics = sorted(everywhere if arms is None else everywhere & set(arms.statics))
    k0_code = 0 if arms is None else arms.k0
    drafterless = None if arms is None else arms.no_drafter
    above = interpolated = measured = unmeasured = 0.0
    points: list[tuple[float, int, int, float, int]] = []  # weight, lower, upper, t, K
    for batch, weight in zip(mix.batch_sizes, mix.weights, strict=True):
        where = bracket(ordered, batch)
        if where is None:
            above += weight
            continue
        lower, upper, t = where
        k = schedule.k_at(batch, global_k)
        if k not in anchors[lower].means or k not in anchors[upper].means:
            unmeasured += weight
            continue
        points.append((weight, lower, upper, t, k))
        if lower == upper:
            measured += weight
        else:
            interpolated += weight
    known = all(a.draws is not None for a in anchors.values())
    total = sum(p[0] for p in points)

    def expected(k_of: Any) -> tuple[float, NDArray[np.float64] | None]:
        """The arm's expected objective, and the log of its value per posterior draw: summed
        in log space (:func:`numpy.logaddexp`), since a borrowed noise of few degrees of
        freedom draws heavy tails whose exponentials overflow."""
        point = 0.0
        drawn: NDArray[np.float64] | None = None
        for weight, lower, upper, t, k in points:
            chosen = k_of(k)
            low, high = anchors[lower], anchors[upper]
            centre = (1 - t) * low.means[chosen] + t * high.means[chosen]
            point += weight * math.exp(sign * centre)
            if known and low.draws is not None and high.draws is not None:
                row = math.log(weight) + sign * (
                    (1 - t) * low.draws[chosen] + t * high.draws[chosen]
                )
                drawn = row if drawn is None else np.logaddexp(drawn, row)
        if drawn is not None:
            drawn = drawn - math.log(total)
        return point / total, drawn

    if not points:
        empty = ArmValue("the schedule", None, math.nan)
        return TrafficValue(
            mix, objective, report.maximize, report.tolerance, empty, None, None,
            measured, interpolated, above, unmeasured, ordered[-1] if ordered else 0, known,
            tuple(ordered),
        )  # fmt: skip
    scheduled, scheduled_draws = expected(lambda k: k)
    compared = [k for k in {*statics, k0_code, drafterless} if k is not None and k in everywhere]
    values = {k: expected(lambda _, k=k: k) for k in compared}

    def gain(value: float) -> float:
        return 100 * ((scheduled / value - 1) if report.maximize else (value / scheduled - 1))

    def arm(k: int) -> ArmValue:
        value, drawn = values[k]
        interval = None
        if drawn is not None and scheduled_draws is not None:
            interval = gain_interval(scheduled_draws, drawn, report.maximize, gain(value))
        if arms is None:
            return ArmValue(f"K={k}", k, value, gain(value), interval)
        return ArmValue(arms.labels[k], arms.ks.get(k), value, gain(value), interval)

    best = None
    for k in statics:
        value = values[k][0]
        if best is None or (
            value > values[best][0] if report.maximize else value < values[best][0]
        ):
            best = k
    return TrafficValue(
        mix,
        objective,
        report.maximize,
        report.tolerance,
        ArmValue("the schedule", None, scheduled),
        None if best is None else arm(best),
        arm(k0_code) if k0_code in values else None,
        measured,
        interpolated,
        above,
        unmeasured,
        ordered[-1],
        known,
        tuple(ordered),
        arm(drafterless) if drafterless in values else None,
    )


@dataclass(frozen=True)
class TrafficGain:
    """One arm of a result file's ``traffic`` block, read back: its K, expected objective, and
    the schedule's gain over it with the interval (None where the file has none)."""

    k: int | None
    expected: float | None
    gain_percent: float | None
    interval: tuple[float, float] | None


@dataclass(frozen=True)
class TrafficBlock:
    """A result file's ``traffic`` block (:meth:`TrafficValue.to_json`), read back: whether
    the mix was the user's, its source, the three answers and the shares."""

    given: bool
    source: str
    schedule_expected: float | None
    best_static: TrafficGain | None
    k0: TrafficGain | None
    shares: Mapping[str, float]
    statement: str


def _number_or_none(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _gain_of(value: Any, where: str) -> tuple[TrafficGain | None, list[str]]:
    if value is None:
        return None, []
    if not isinstance(value, Mapping):
        return None, [f"{where}: expected an object or null"]
    interval = value.get("interval_percent")
    bounds = None
    if isinstance(interval, list) and len(interval) == 2:
        low, high = (_number_or_none(v) for v in interval)
        bounds = None if low is None or high is None else (low, high)
    elif interval is not None:
        return None, [f"{where}.interval_percent: expected [low, high] or null"]
    k = value.get("k")
    if k is not None and (not isinstance(k, int) or isinstance(k, bool) or k < 0):
        return None, [f"{where}.k: expected a whole number or null"]
    gain = TrafficGain(
        k,
        _number_or_none(value.get("expected_objective")),
        _number_or_none(value.get("schedule_gain_percent")),
        bounds,
    )
    return gain, []


def read_traffic_block(data: Mapping[str, Any]) -> tuple[TrafficBlock | None, list[str]]:
    """The ``traffic`` block of a result file's JSON (None, no reason: the file has none, as
    files before issue 42 and the seed's), or None and what is wrong with it, each naming
    the field."""
    block = data.get("traffic")
    if block is None:
        return None, []
    if not isinstance(block, Mapping):
        return None, ["traffic: expected an object"]
    reasons = []
    mix = block.get("mix")
    if not isinstance(mix, Mapping) or not isinstance(mix.get("source"), str):
        reasons.append("traffic.mix.source: expected a text")
    if not isinstance(block.get("given"), bool):
        reasons.append("traffic.given: expected true or false")
    schedule = block.get("schedule")
    if not isinstance(schedule, Mapping):
        reasons.append("traffic.schedule: expected an object")
    best, found = _gain_of(block.get("best_static_k"), "traffic.best_static_k")
    reasons += found
    k0, found = _gain_of(block.get("k0"), "traffic.k0")
    reasons += found
    shares = block.get("shares")
    read_shares = {}
    if isinstance(shares, Mapping):
        read_shares = {
            str(name): float(share)
            for name, share in shares.items()
            if _number_or_none(share) is not None
        }
    else:
        reasons.append("traffic.shares: expected an object")
    statement = block.get("statement")
    if not isinstance(statement, str):
        reasons.append("traffic.statement: expected a text")
    if reasons:
        return None, reasons
    assert isinstance(mix, Mapping) and isinstance(schedule, Mapping)
    return (
        TrafficBlock(
            bool(block["given"]),
            str(mix["source"]),
            _number_or_none(schedule.get("expected_objective")),
            best,
            k0,
            read_shares,
            str(statement),
        ),
        [],
    )
