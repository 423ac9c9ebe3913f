"""The seed's tuning result (vLLM PR #49163) and the schedule it deploys.

- :class:`Schedule`: vLLM's ``num_speculative_tokens_per_batch_size``, built from per-anchor
  picks (:func:`merge_picks`), checked by vLLM's rules (:func:`validate_schedule`), read and
  written in vLLM's and TensorRT-LLM's forms.
- :class:`TuningResult`: everything a policy found (cells with verdicts, decisions, the
  schedule, problems), what the later stages refine and the result file writes.
- :func:`tune`: the seed's policy on a loaded sweep, the gate stage (:func:`lib.gates.gate`)
  then the decision stage (:func:`seed_decision`, with :mod:`lib.decide`'s tie rule).

Nothing here stops at the first problem: :func:`tune` returns every cell with its verdict and
every problem found, and the CLI refuses to write when any problem is an error.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import polars as pl

from lib.decide import decide, tie_rule, zero_score_problems
from lib.flags import flag_name
from lib.gates import GatedSweep, gate
from lib.keys import LARGEST_WHOLE_NUMBER, whole_number, whole_number_text
from lib.problems import Problem, Severity, errors
from lib.settings import Settings
from lib.sweeps import Sweep

__all__ = [
    "NO_SCHEDULE",
    "TRTLLM_SCHEDULE",
    "ConfidenceBlocks",
    "JsonValue",
    "Range",
    "Schedule",
    "TuningResult",
    "candidate_json",
    "decided_schedule",
    "emitted_schedule",
    "finite_or_none",
    "interpolated_schedule",
    "merge_picks",
    "schedule_problems",
    "seed_decision",
    "trtllm_bound",
    "tune",
    "validate_schedule",
]

#: One inclusive ``[lo, hi, K]`` range of a schedule.
Range = tuple[int, int, int]


# --------------------------------------------------------------------------- schedules


def merge_picks(anchors: Sequence[int], ks: Sequence[int], max_batch_size: int) -> list[Range]:
    """The seed's schedule merge: anchor i covers ``[anchor_i, anchor_{i+1} - 1]`` and the
    last anchor covers up to ``max_batch_size``; neighbouring ranges with the same K merge. No
    monotonicity is assumed: K may go down and up again.

    >>> merge_picks([1, 64, 128, 256], [7, 0, 0, 0], 256)
    [(1, 63, 7), (64, 256, 0)]
    >>> merge_picks([1, 8, 32], [2, 0, 2], 64)
    [(1, 7, 2), (8, 31, 0), (32, 64, 2)]
    """
    pairs = sorted(zip(anchors, ks, strict=True))
    merged: list[Range] = []
    for index, (anchor, k) in enumerate(pairs):
        upper = pairs[index + 1][0] - 1 if index + 1 < len(pairs) else max_batch_size
        if merged and merged[-1][2] == k:
            merged[-1] = (merged[-1][0], upper, k)
        else:
            merged.append((anchor, upper, k))
    return merged


def validate_schedule(schedule: Any) -> list[str]:
    """vLLM's own checks on ``num_speculative_tokens_per_batch_size`` at engine start
    (``vllm/v1/spec_decode/dynamic/utils.py``), as a list of violations (empty = valid).

    A non-empty list; each entry a list of 3 integers ``[lo, hi, K]`` with ``lo > 0``,
    ``hi > 0``, ``lo <= hi``, ``K >= 0``; sorted by ``lo``, no two ranges may overlap; the first
    range must start at 1. Gaps are allowed (they inherit the previous K at run time). One
    rule of tune-spec-k's own, the same for every command that reads a schedule or a sweep: no
    number above :data:`~lib.keys.LARGEST_WHOLE_NUMBER`.

    >>> validate_schedule([[1, 63, 7], [64, 256, 0]])
    []
    >>> validate_schedule([[2, 8, 3], [5, 9, 1]])
    ['ranges [2, 8, 3] and [5, 9, 1] overlap', 'the first range starts at 2, not 1']
    """
    if not isinstance(schedule, list | tuple) or not schedule:
        return ["the schedule must be a non-empty list of [lo, hi, K] ranges"]
    violations = []
    ranges = []
    for index, entry in enumerate(schedule):
        if not (
            isinstance(entry, list | tuple)
            and len(entry) == 3
            and all(isinstance(x, int) and not isinstance(x, bool) for x in entry)
        ):
            violations.append(f"entry {index} {entry!r} is not a list of 3 integers")
            continue
        lo, hi, k = entry
        if lo <= 0 or hi <= 0:
            violations.append(f"entry {index} {list(entry)}: batch sizes must be > 0")
        if lo > hi:
            violations.append(f"entry {index} {list(entry)}: lo > hi")
        if k < 0:
            violations.append(f"entry {index} {list(entry)}: K must be >= 0")
        if max(lo, hi, k) > LARGEST_WHOLE_NUMBER:
            violations.append(
                f"entry {index} {list(entry)}: numbers above {LARGEST_WHOLE_NUMBER}"
                " (tune-spec-k's limit on batch sizes and K) are typos or damage"
            )
        ranges.append((lo, hi, k))
    ranges.sort()
    for before, after in itertools.pairwise(ranges):
        if after[0] <= before[1]:
            violations.append(f"ranges {list(before)} and {list(after)} overlap")
    if ranges and ranges[0][0] != 1:
        violations.append(f"the first range starts at {ranges[0][0]}, not 1")
    return violations


@dataclass(frozen=True, order=True)
class Schedule:
    """vLLM's ``num_speculative_tokens_per_batch_size``: inclusive ``[lo, hi, K]`` ranges, in
    the order given. Built from per-anchor picks (:meth:`from_picks`), read from a user's JSON
    (:meth:`parse`, :meth:`from_trtllm`), checked against vLLM's rules (:meth:`violations`),
    looked up (:meth:`k_at`) and written (:meth:`to_json`, :meth:`json_text`,
    :meth:`to_trtllm`) in one place.

    TensorRT-LLM's ``draft_len_schedule`` says the same with ``{batch_size_upper_bound: K}``: a
    batch size uses the K of the smallest bound at or above it. To it, each range's bound is
    one below the next range's start (a gap goes to the range before it, as in vLLM) and the
    last bound is the last ``hi``; neighbours with equal K merge. Back, the bounds give
    ``[[1, b1, K1], [b1 + 1, b2, K2], ...]`` without gaps. So vLLM runs the round trip exactly
    as the original at every batch size up to the last ``hi``.

    >>> schedule = Schedule.from_picks([1, 64, 128, 256], [7, 0, 0, 0], 256)
    >>> schedule.json_text()
    '[[1, 63, 7], [64, 256, 0]]'
    >>> schedule.k_at(63), schedule.k_at(64), schedule.k_at(1000), schedule.k_at(1, global_k=3)
    (7, 0, 0, 3)
    >>> schedule.to_trtllm()
    {63: 7, 256: 0}
    >>> Schedule.from_trtllm({"63": 7, "256": 0}) == (schedule, [])
    True
    """

    ranges: tuple[Range, ...]

    @classmethod
    def from_picks(cls, anchors: Sequence[int], ks: Sequence[int], max_batch_size: int) -> Schedule:
        """The step schedule of per-anchor picks (:func:`merge_picks`)."""
        return cls(tuple(merge_picks(anchors, ks, max_batch_size)))

    @classmethod
    def parse(cls, raw: Any) -> tuple[Schedule | None, list[str]]:
        """A schedule from a user's JSON value, or None and vLLM's violated rules."""
        violations = validate_schedule(raw)
        if violations:
            return None, violations
        return cls(tuple((int(lo), int(hi), int(k)) for lo, hi, k in raw)), []

    @classmethod
    def from_trtllm(cls, draft_len_schedule: Any) -> tuple[Schedule | None, list[str]]:
        """A schedule from TensorRT-LLM's ``{batch_size_upper_bound: K}``, or None and what is
        wrong with it. Bounds may be ints or their JSON spelling (``"63"``); K whole and >= 0.
        """
        if not isinstance(draft_len_schedule, Mapping) or not draft_len_schedule:
            return None, [
                f"{TRTLLM_SCHEDULE} must be a non-empty object of batch_size_upper_bound: K"
                f" (got {json.dumps(draft_len_schedule, default=str)})"
            ]
        bounds: dict[int, int] = {}
        for raw_bound, k in draft_len_schedule.items():
            bound = trtllm_bound(raw_bound)
            if bound is None or not 1 <= bound <= LARGEST_WHOLE_NUMBER:
                return None, [
                    f"{TRTLLM_SCHEDULE} key {raw_bound!r} is not a batch size (expected a"
                    f" whole number from 1 to {LARGEST_WHOLE_NUMBER})"
                ]
            if not _whole(k) or whole_number(k) is None:
                return None, [
                    f"{TRTLLM_SCHEDULE}[{raw_bound!r}] = {json.dumps(k)} is not a draft length"
                    f" (expected a whole number from 0 to {LARGEST_WHOLE_NUMBER})"
                ]
            if bound in bounds:
                return None, [f"{TRTLLM_SCHEDULE} repeats the bound {bound}"]
            bounds[bound] = k
        ranges = []
        start = 1
        for bound in sorted(bounds):
            ranges.append((start, bound, bounds[bound]))
            start = bound + 1
        return cls(tuple(ranges)), []

    def __iter__(self) -> Iterator[Range]:
        return iter(self.ranges)

    def __len__(self) -> int:
        return len(self.ranges)

    @property
    def largest_k(self) -> int:
        """The largest K of any range (0 for an empty schedule)."""
        return max((k for _, _, k in self.ranges), default=0)

    def violations(self) -> list[str]:
        """vLLM's rules this schedule breaks (:func:`validate_schedule`)."""
        return validate_schedule(self.to_json())

    def k_at(self, batch_size: int, global_k: int | None = None) -> int:
        """The K vLLM runs at ``batch_size``: the K of the last range whose ``lo <=
        batch_size``, so a batch size in a gap inherits the previous range's K and one past the
        last range the last K; clamped to the startup maximum ``global_k`` when given. A batch
        size below the first range (invalid schedules only) uses the first range's K."""
        ordered = sorted(self.ranges)
        chosen = ordered[0][2]
        for lo, _, k in ordered:
            if lo <= batch_size:
                chosen = k
        return chosen if global_k is None else min(chosen, global_k)

    def to_json(self) -> list[list[int]]:
        """The ``[[lo, hi, K], ...]`` list vLLM reads."""
        return [list(r) for r in self.ranges]

    def json_text(self) -> str:
        """The schedule as one line of JSON, as the CLI prints it first."""
        return json.dumps(self.to_json())

    def to_trtllm(self) -> dict[int, int]:
        """TensorRT-LLM's ``{batch_size_upper_bound: K}`` (see the class); the schedule must be
        valid."""
        violations = self.violations()
        if violations:
            raise ValueError("not a valid vLLM schedule: " + "; ".join(violations))
        ordered = sorted(self.ranges)
        bounds: dict[int, int] = {}
        for index, (_, hi, k) in enumerate(ordered):
            bound = ordered[index + 1][0] - 1 if index + 1 < len(ordered) else hi
            if bounds and list(bounds.values())[-1] == k:
                # Equal neighbours: the earlier bound would only repeat the same K.
                del bounds[list(bounds)[-1]]
            bounds[bound] = k
        return bounds


#: A result without a schedule: vLLM rejects it; written as ``[]``.
NO_SCHEDULE = Schedule(())
#: TensorRT-LLM's field for its schedule.
TRTLLM_SCHEDULE = "draft_len_schedule"


def trtllm_bound(raw: Any) -> int | None:
    """A ``draft_len_schedule`` key as a batch size: an int, or the digits JSON keys are
    (:func:`~lib.keys.whole_number_text`: ASCII digits only, up to the limit)."""
    if _whole(raw):
        return int(raw)
    return whole_number_text(raw)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def schedule_problems(schedule: Schedule) -> list[Problem]:
    """One ``invalid-schedule`` error per vLLM rule ``schedule`` breaks, naming it as JSON."""
    return [
        Problem(Severity.ERROR, "invalid-schedule", violation, value=schedule.json_text())
        for violation in schedule.violations()
    ]


def decided_schedule(
    decisions: pl.DataFrame, max_batch_size: int | None, undecided: str
) -> tuple[Schedule | None, list[Problem]]:
    """The step schedule of the per-anchor picks in ``decisions``, checked against vLLM's
    rules; None with an ``undecided-anchor`` error (``undecided`` says why) when some anchor
    has no K, and None without problems when there are no anchors at all."""
    anchors = decisions["anchor"].to_list()
    picks = decisions["selected_k"].to_list()
    if anchors and max_batch_size is not None and None not in picks:
        schedule = Schedule.from_picks(anchors, picks, max_batch_size)
        return schedule, schedule_problems(schedule)
    if not anchors:
        return None, []
    missing = [a for a, k in zip(anchors, picks, strict=True) if k is None]
    problem = Problem(
        Severity.ERROR,
        "undecided-anchor",
        "no K could be chosen: " + undecided,
        value=", ".join(str(a) for a in missing),
    )
    return None, [problem]


# --------------------------------------------------------------------------- the tuning result


class ConfidenceBlocks(Protocol):
    """What a result keeps of its confidence analysis: the per-anchor blocks it writes."""

    def blocks(self) -> Mapping[int, Mapping[str, Any]]: ...


class CellBlocks(Protocol):
    """Per-cell JSON values a result writes as the last key of each candidate."""

    def blocks(self) -> Mapping[tuple[int, int], Mapping[str, Any]]: ...


class JsonValue(Protocol):
    """A typed part of the result that becomes one top-level JSON key when it is written."""

    def to_json(self) -> Any: ...


@dataclass(frozen=True, eq=False)
class TuningResult:
    """Everything the policy found: cells with verdicts, decisions, the schedule, problems.

    ``cells``: :data:`lib.cells.CELL_SCHEMA` plus ``status`` ("kept" / "rejected"), ``reason``,
    ``ratio``, ``tied``, ``selected``. ``decisions``: :data:`lib.decide.DECISION_SCHEMA`.
    ``excluded_runs``: source, position, anchor, k, reason for every run left out of the cells.
    ``schedule`` is None when some anchor has no decision.
    """

    sweep: Sweep
    settings: Settings
    cells: pl.DataFrame
    decisions: pl.DataFrame
    excluded_runs: pl.DataFrame
    schedule: Schedule | None
    max_batch_size: int | None
    configured_global_k: int | None
    max_k_observed: int | None
    problems: tuple[Problem, ...]
    #: The confidence report (:class:`lib.confidence.ConfidenceReport`, typed frames) whose
    #: ``blocks()`` become each ``batch_decisions[i]["confidence"]`` when the result file is
    #: written (:func:`lib.deploy.result_file.result_document`).
    confidence: ConfidenceBlocks | None = None
    #: Further top-level JSON keys (decision policy, switch points, deployment), after
    #: ``problems``: typed values (:class:`JsonValue`), serialised when the file is written.
    additions: Mapping[str, JsonValue] = field(default_factory=dict)
    #: The effective batch per cell (:class:`lib.effective_batch.EffectiveBatch`): each
    #: candidate's last key ``effective_batch_size`` (null where not computed); no key when None.
    effective_batch: CellBlocks | None = None

    @property
    def ok(self) -> bool:
        """True when the seed would have succeeded: a schedule and no error."""
        return self.schedule is not None and not errors(list(self.problems))

    @property
    def errors(self) -> list[Problem]:
        return errors(list(self.problems))

    @property
    def deploy_global_k(self) -> int:
        """The ``num_speculative_tokens`` to start the engine with: the configured global, or
        the largest K in the schedule when the sweep stated none (at least 1, vLLM's minimum)."""
        if self.configured_global_k is not None:
            return self.configured_global_k
        largest = (self.schedule or NO_SCHEDULE).largest_k
        return max(largest, self.max_k_observed or 0, 1)

    def speculative_config(self) -> dict[str, Any]:
        """The ``--speculative-config`` to paste into ``vllm serve``: the settings every
        speculative run shared (method, draft model, ...), the global K, and the schedule.
        ``method`` is ``"<method>"`` when no run recorded one (a placeholder to fill in)."""
        shared: dict[str, Any] = {}
        configs = self.sweep.speculative_configs
        if configs:
            first = configs[0]
            shared = {
                key: value
                for key, value in first.items()
                if all(key in other and other[key] == value for other in configs[1:])
            }
        shared.pop("num_speculative_tokens_per_batch_size", None)
        shared.setdefault("method", "<method>")
        shared["num_speculative_tokens"] = self.deploy_global_k
        shared["num_speculative_tokens_per_batch_size"] = (self.schedule or NO_SCHEDULE).to_json()
        return shared


def candidate_json(cell: Mapping[str, Any]) -> dict[str, Any]:
    """A cell of :attr:`TuningResult.cells` as the seed's JSON candidate (without its batch
    size): K, runs and the statistics, non-finite floats as null."""
    return {
        "k": cell["k"],
        "num_runs": cell["num_runs"],
        "median_objective": finite_or_none(cell["median"]),
        "mad_objective": finite_or_none(cell["mad"]),
        "conservative_objective": finite_or_none(cell["conservative"]),
        "objective_relative_mad": finite_or_none(cell["relative_mad"]),
        "median_acceptance": finite_or_none(cell["median_acceptance"]),
        "acceptance_relative_mad": finite_or_none(cell["acceptance_relative_mad"]),
    }


# --------------------------------------------------------------------------- the seed's policy


def tune(sweep: Sweep, settings: Settings) -> TuningResult:
    """Apply the seed's policy to a loaded sweep, collecting every problem on the way: the gate
    stage (:func:`lib.gates.gate`), then the decision stage (:func:`seed_decision`)."""
    return seed_decision(gate(sweep, settings))


def seed_decision(gated: GatedSweep) -> TuningResult:
    """The seed's decision on the gated cells: per anchor the smallest K tied with the best
    conservative score (:func:`lib.decide.tie_rule`), merged into a :class:`Schedule` that is
    checked against vLLM's rules. The maximum batch size is the largest anchor unless the
    settings name it, and must then equal it (the seed's rule: the schedule would extrapolate
    beyond what was measured). Settings that cannot be used gated no cell
    (:func:`lib.gates.gate`), so nothing is decided, and they state no maximum batch size."""
    settings = gated.settings
    problems = list(gated.problems)
    cells = tie_rule(gated.cells, settings.relative_tolerance, settings.maximize)
    problems += zero_score_problems(cells, settings.maximize)
    decisions = decide(cells, settings.maximize)

    anchors = decisions["anchor"].to_list()
    max_batch_size = None
    if gated.usable_settings:
        max_batch_size = settings.max_batch_size or (max(anchors) if anchors else None)
    if settings.max_batch_size is not None and anchors and settings.max_batch_size != max(anchors):
        problems.append(
            Problem(
                Severity.ERROR,
                "max-batch-size",
                "the maximum batch size must equal the largest anchor (the seed's rule: the"
                " schedule would extrapolate beyond what was measured)",
                field=flag_name(Settings, "max_batch_size"),
                value=str(settings.max_batch_size),
                expected=str(max(anchors)),
            )
        )
    schedule, found = decided_schedule(
        decisions, max_batch_size, "every cell at the anchor was rejected, or none scored above 0"
    )
    problems += found
    return TuningResult(
        sweep=gated.sweep,
        settings=settings,
        cells=cells,
        decisions=decisions,
        excluded_runs=gated.excluded_runs,
        schedule=schedule,
        max_batch_size=max_batch_size,
        configured_global_k=gated.configured_global_k,
        max_k_observed=_largest_k(gated.sweep.runs),
        problems=tuple(problems),
    )


def _largest_k(runs: pl.DataFrame) -> int | None:
    """The largest K any run has (None when no run has one)."""
    k_values = runs["k"].drop_nulls()
    return int(k_values.max()) if len(k_values) else None  # type: ignore[arg-type]


def finite_or_none(value: float | None) -> float | None:
    """``value`` where it is a finite float, else None: how the result JSON writes a statistic
    that is not finite (JSON has no NaN or infinity)."""
    return value if value is not None and math.isfinite(value) else None


def emitted_schedule(result: TuningResult) -> str:
    """Which schedule ``result`` deploys: ``"interpolated"`` (``--interpolated-schedule``) or
    ``"step"``, as its ``switch_points`` addition says (step without one). The addition is
    :class:`lib.switch_points.EmittedSwitchPoints`, read by its fields: that module builds on
    this one."""
    emitted = result.additions.get("switch_points")
    return str(getattr(emitted, "emitted", "step"))


def interpolated_schedule(result: TuningResult) -> Schedule | None:
    """The schedule switching at the interpolated crossovers where ``result`` emits it
    (:func:`emitted_schedule`), None where it switches at the anchors. The uncapped one: like
    the grid's picks, it is what the context formats export and check, not what a capture
    ceiling made of it."""
    if emitted_schedule(result) != "interpolated":
        return None
    points = getattr(result.additions.get("switch_points"), "points", None)
    schedule = getattr(points, "schedule", None)
    return schedule if isinstance(schedule, Schedule) else None
