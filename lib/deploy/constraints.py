"""What an engine does with a schedule between and beyond the anchors: vLLM's CUDA-graph capture
ceiling, applied in one place for every command that deploys or checks a schedule.

vLLM captures CUDA graphs for decode steps of up to C tokens (the server's final
``max_cudagraph_capture_size``). A step of b requests with K drafts each verifies ``b*(1+K)``
tokens; past C it runs without any CUDA graph (``CUDAGraphMode.NONE``), several times slower,
and vLLM neither warns nor clamps (``../shared/docs/engines.md``, section 1). So a schedule is
capture-safe when, with D(b) vLLM's dense lookup (:func:`dense_runs`)::

    b * (1 + D(b)) <= C      for every b in 1..max_num_seqs

and the repair (:func:`capped_schedule`) is ``K'(b) = min(D(b), max(0, floor(C / b) - 1))``,
re-merged. Every function here is pure and costs O(ranges x sqrt(C)) at most, never O(batch
sizes): a schedule up to 2^31 - 1 is checked as fast as one up to 256.

Where C and max_num_seqs come from (:func:`resolve_ceiling`): the flags, else what the sweep
recorded (serve params in the records, a saved ``/server_info``), else vLLM's defaults, and
then C is an *assumption*: the schedule is kept as tuned and the ranges past it are named.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from lib.deploy.engine import EngineFacts
from lib.numbers import percent_text
from lib.schedule import Range, Schedule, merge_picks

__all__ = [
    "DEFAULT_MAX_NUM_SEQS",
    "DSD_METHODS_MRV1",
    "PLATFORM_CEILING",
    "SM100_PLATFORM_CEILING",
    "STRETCH_STATUSES",
    "CappedRange",
    "CaptureCeiling",
    "CeilingCheck",
    "Finding",
    "GraphlessRange",
    "Stretch",
    "assumed_capture_size",
    "capped_ranges",
    "capped_schedule",
    "capture_sizes",
    "cells_past_ceiling",
    "check_ceiling",
    "dense_runs",
    "deployed_stretches",
    "graphless_ranges",
    "method_warnings",
    "past_max_num_seqs",
    "reachable_batch_sizes",
    "resolve_ceiling",
    "tokens_per_step",
]

#: vLLM's platform ceiling on the capture size outside SM100 (0.24: 512 everywhere).
PLATFORM_CEILING = 512
#: vLLM 0.33's ceiling on SM100-family GPUs (B200, GB200, B300; vLLM #49390).
SM100_PLATFORM_CEILING = 1024
#: vLLM's default ``max_num_seqs``: what the check assumes when neither flag nor sweep says.
DEFAULT_MAX_NUM_SEQS = 256


def tokens_per_step(batch_size: int, k: int) -> int:
    """Tokens one decode step verifies: each of ``batch_size`` requests its token and K drafts.

    >>> tokens_per_step(86, 5)
    516
    """
    return batch_size * (1 + k)


def capture_sizes(largest: int) -> list[int]:
    """vLLM's default capture sizes up to ``largest``: 1, 2, 4, then steps of 8 to 256, then of
    16 (``config/vllm.py``, 0.24 and 0.33).

    >>> capture_sizes(40)
    [1, 2, 4, 8, 16, 24, 32, 40]
    >>> capture_sizes(512)[-3:]
    [480, 496, 512]
    """
    sizes = [size for size in (1, 2, 4) if size <= largest]
    sizes += list(range(8, min(largest, 256) + 1, 8))
    sizes += list(range(272, largest + 1, 16))
    return sizes


def assumed_capture_size(
    max_num_seqs: int,
    global_k: int,
    max_num_batched_tokens: int | None = None,
    platform: int = PLATFORM_CEILING,
) -> int:
    """The C vLLM's defaults give: ``C0 = min(2 * max_num_seqs * (1 + K), platform)``, then at
    most ``max_num_batched_tokens``, then the largest default capture size at or below that.

    >>> assumed_capture_size(256, 7)
    512
    >>> assumed_capture_size(4, 3)  # 2 * 4 * 4 = 32
    32
    >>> assumed_capture_size(256, 7, max_num_batched_tokens=300)  # 300 -> the size 288
    288
    >>> assumed_capture_size(256, 7, platform=SM100_PLATFORM_CEILING)
    1024
    """
    largest = min(2 * max_num_seqs * (1 + global_k), platform)
    if max_num_batched_tokens is not None:
        largest = min(largest, max_num_batched_tokens)
    sizes = capture_sizes(max(largest, 1))
    return sizes[-1]


@dataclass(frozen=True)
class CaptureCeiling:
    """The capture ceiling C a schedule is checked against, up to ``max_num_seqs``.

    ``known`` is True when C was stated (a flag, the sweep's records, a saved server config);
    False when it is vLLM's default as :func:`assumed_capture_size` computes it, and then
    ``source`` says what was assumed. The same holds for ``max_num_seqs``.
    """

    size: int
    known: bool
    source: str
    max_num_seqs: int
    max_num_seqs_known: bool
    max_num_seqs_source: str

    def describe(self) -> str:
        """One line: C and max_num_seqs with where each came from.

        >>> CaptureCeiling(512, True, "--max-cudagraph-capture-size", 256, False,
        ...                "assumed: vLLM's default").describe()
        "C=512 (from --max-cudagraph-capture-size), max_num_seqs=256 (assumed: vLLM's default)"
        """
        c = f"from {self.source}" if self.known else self.source
        n = (
            f"from {self.max_num_seqs_source}"
            if self.max_num_seqs_known
            else (self.max_num_seqs_source)
        )
        return f"C={self.size} ({c}), max_num_seqs={self.max_num_seqs} ({n})"


def resolve_ceiling(
    flags: EngineFacts, sweep: EngineFacts, global_k: int, largest_batch: int
) -> CaptureCeiling:
    """C and max_num_seqs for the check: each from the flags first, else from the sweep, else
    assumed. Without a stated max_num_seqs the check covers batch sizes up to
    ``largest_batch`` (the schedule's last), and an assumed C is :func:`assumed_capture_size`
    of vLLM's default max_num_seqs 256 (or ``largest_batch`` when larger: the sweep ran that
    many requests at once), the engine's ``global_k`` and any known
    ``max_num_batched_tokens``, on a GPU outside SM100.

    >>> from lib.deploy.engine import Fact
    >>> resolve_ceiling(EngineFacts(), EngineFacts(), 7, 256).describe()  # doctest: +ELLIPSIS
    "C=512 (assumed: vLLM's default for max_num_seqs=256, num_speculative_tokens=7...
    >>> flags = EngineFacts(max_cudagraph_capture_size=Fact(512, "--max-cudagraph-capture-size"))
    >>> resolve_ceiling(flags, EngineFacts(), 5, 128).known
    True
    """
    seqs = flags.max_num_seqs or sweep.max_num_seqs
    if seqs is not None:
        max_num_seqs, seqs_known, seqs_source = seqs.value, True, seqs.source
        engine_seqs = seqs.value
    else:
        # Past the schedule's last batch size vLLM carries the last K up to max_num_seqs; not
        # knowing it, the check stops where the schedule does and says so.
        max_num_seqs, seqs_known = largest_batch, False
        seqs_source = (
            "assumed: the schedule's last batch size; vLLM carries the last K to the"
            " server's max_num_seqs: give --max-num-seqs"
        )
        engine_seqs = max(DEFAULT_MAX_NUM_SEQS, largest_batch)
    stated = flags.max_cudagraph_capture_size or sweep.max_cudagraph_capture_size
    if stated is not None:
        return CaptureCeiling(
            stated.value, True, stated.source, max_num_seqs, seqs_known, seqs_source
        )
    batched = flags.max_num_batched_tokens or sweep.max_num_batched_tokens
    size = assumed_capture_size(engine_seqs, global_k, batched.value if batched else None)
    source = (
        f"assumed: vLLM's default for max_num_seqs={engine_seqs},"
        f" num_speculative_tokens={global_k}"
        + (f", max_num_batched_tokens={batched.value}" if batched else "")
        + f" on a GPU outside SM100; {SM100_PLATFORM_CEILING} on B200/GB200/B300 from vLLM 0.33"
    )
    return CaptureCeiling(size, False, source, max_num_seqs, seqs_known, seqs_source)


def dense_runs(schedule: Schedule, upto: int, global_k: int | None = None) -> list[Range]:
    """vLLM's dense lookup D over ``1..upto`` as constant-K runs: a batch size in a gap takes
    the previous range's K, one past the last range the last K (to ``upto``), each K clamped
    to ``global_k`` when given; ranges starting past ``upto`` are never reached. Equal
    neighbours merge. An empty schedule or ``upto < 1`` gives no run.

    >>> dense_runs(Schedule(((1, 4, 3), (9, 16, 1))), 32)
    [(1, 8, 3), (9, 32, 1)]
    >>> dense_runs(Schedule(((1, 4, 7), (5, 8, 2))), 6, global_k=5)
    [(1, 4, 5), (5, 6, 2)]
    """
    ordered = sorted(r for r in schedule.ranges if r[0] <= upto)
    if not ordered or upto < 1:
        return []
    anchors = [lo for lo, _, _ in ordered]
    ks = [k if global_k is None else min(k, global_k) for _, _, k in ordered]
    return merge_picks(anchors, ks, upto)


@dataclass(frozen=True)
class GraphlessRange:
    """Batch sizes ``lo..hi`` that run K drafts past the capture ceiling: no CUDA graph."""

    lo: int
    hi: int
    k: int

    @property
    def tokens(self) -> tuple[int, int]:
        """Tokens per decode step at ``lo`` and at ``hi``."""
        return tokens_per_step(self.lo, self.k), tokens_per_step(self.hi, self.k)

    def to_json(self) -> dict[str, int]:
        low, high = self.tokens
        return {"lo": self.lo, "hi": self.hi, "k": self.k, "tokens_lo": low, "tokens_hi": high}


def _safe_k_limit(batch_size: int, ceiling: int) -> int:
    """The largest K that keeps ``batch_size`` requests inside the ceiling (0 if none does)."""
    return max(0, ceiling // batch_size - 1)


def graphless_ranges(
    schedule: Schedule, ceiling: CaptureCeiling, global_k: int | None = None
) -> list[GraphlessRange]:
    """Every batch range where ``b * (1 + D(b)) > C``, for b in ``1..max_num_seqs``. Within a
    constant-K run the unsafe batch sizes are those above ``C // (1 + K)`` (for K=0, more
    than C requests).

    >>> ceiling = CaptureCeiling(512, True, "test", 128, True, "test")
    >>> [r.to_json() for r in graphless_ranges(Schedule(((1, 1, 3), (2, 127, 5), (128, 128, 3))),
    ...                                        ceiling)]
    [{'lo': 86, 'hi': 127, 'k': 5, 'tokens_lo': 516, 'tokens_hi': 762}]
    """
    found = []
    for lo, hi, k in dense_runs(schedule, ceiling.max_num_seqs, global_k):
        first_unsafe = ceiling.size // (1 + k) + 1
        if first_unsafe <= hi:
            found.append(GraphlessRange(max(lo, first_unsafe), hi, k))
    return found


def capped_schedule(
    schedule: Schedule, ceiling: CaptureCeiling, global_k: int | None = None
) -> Schedule:
    """The repair: ``K'(b) = min(D(b), max(0, floor(C / b) - 1))`` over ``1..max_num_seqs``
    (or the schedule's last batch size, when larger), re-merged. A schedule already safe comes
    back as it was (the same ranges, not re-derived), so a safe seed answer is byte-identical.

    The published GB200 case (C = 512, max_num_seqs 128):

    >>> ceiling = CaptureCeiling(512, True, "test", 128, True, "test")
    >>> capped_schedule(Schedule(((1, 1, 3), (2, 127, 5), (128, 128, 3))), ceiling).json_text()
    '[[1, 1, 3], [2, 85, 5], [86, 102, 4], [103, 128, 3]]'
    """
    if not graphless_ranges(schedule, ceiling, global_k):
        return schedule
    last = max((hi for _, hi, _ in schedule.ranges), default=0)
    # The whole schedule is repaired (ranges past a known max_num_seqs are harmless, never
    # run); what is reported capped stops at max_num_seqs (:func:`capped_ranges`).
    upto = max(ceiling.max_num_seqs, last)
    anchors: list[int] = []
    ks: list[int] = []
    for lo, hi, k in dense_runs(schedule, upto, global_k):
        b = lo
        while b <= hi:
            limit = _safe_k_limit(b, ceiling.size)
            if limit == 0:
                # The limit only falls with b: K=0 from here to the run's end (past C even
                # K=0 cannot be made safe).
                value, end = 0, hi
            elif limit >= k:
                value, end = k, min(hi, ceiling.size // (1 + k))
            else:
                value, end = limit, min(hi, ceiling.size // (1 + limit))
            anchors.append(b)
            ks.append(value)
            b = end + 1
    return Schedule(tuple(merge_picks(anchors, ks, upto)))


def past_max_num_seqs(batch_size: int, max_num_seqs: int | None) -> bool:
    """The rule: a server started with ``max_num_seqs`` N never schedules more than N requests
    at once, so a batch size above N (strict: N itself runs) is never run: runs at such an
    anchor described a smaller batch (the rest waited in the queue), and nothing there needs
    measuring. ``max_num_seqs`` None (not known) reaches every batch size.

    >>> past_max_num_seqs(65, 64), past_max_num_seqs(64, 64), past_max_num_seqs(10**6, None)
    (True, False, False)
    """
    return max_num_seqs is not None and batch_size > max_num_seqs


def reachable_batch_sizes(ceiling: CaptureCeiling, schedule: Schedule) -> int:
    """The largest batch size vLLM can run the schedule at: a known ``max_num_seqs`` (vLLM
    never schedules more requests at once, however far the schedule's ranges go), else the
    larger of the assumed one and the schedule's last batch size. What is reported of a
    schedule (capped ranges, the anchors to measure) stops there: a range past a known
    max_num_seqs is never used, so nothing there is worth measuring.

    >>> tuned = Schedule(((1, 256, 3),))
    >>> reachable_batch_sizes(CaptureCeiling(200, True, "t", 64, True, "t"), tuned)
    64
    >>> reachable_batch_sizes(CaptureCeiling(200, True, "t", 64, False, "t"), tuned)
    256
    """
    if ceiling.max_num_seqs_known:
        return ceiling.max_num_seqs
    return max(ceiling.max_num_seqs, max((hi for _, hi, _ in schedule.ranges), default=0))


@dataclass(frozen=True)
class CappedRange:
    """Batch sizes ``lo..hi`` whose K the repair lowered from ``measured_k`` (what the tuned
    schedule says there) to ``capped_k``: capped, not measured. ``loss_percent`` is the expected
    loss against ``measured_k`` run with CUDA graphs, interpolated between the anchors around the
    range (``basis`` says which, or why there is no estimate, and whether a cell it reads was
    itself measured past the ceiling)."""

    lo: int
    hi: int
    measured_k: int
    capped_k: int
    loss_percent: float | None
    basis: str

    def to_json(self) -> dict[str, object]:
        return {
            "lo": self.lo,
            "hi": self.hi,
            "measured_k": self.measured_k,
            "capped_k": self.capped_k,
            "expected_loss_percent": (
                None if self.loss_percent is None else round(self.loss_percent, 4)
            ),
            "basis": self.basis,
        }


#: Per anchor, each K's median objective (the measured evidence a loss estimate reads).
Medians = Mapping[int, Mapping[int, float]]


def _interpolated(medians: Medians, below: int, above: int, k: int, batch: int) -> float | None:
    """K's median at ``batch``, linear in log-log between the anchors ``below`` and ``above``;
    None when K was not measured at both (or a median is not positive)."""
    low, high = medians.get(below, {}).get(k), medians.get(above, {}).get(k)
    if low is None or high is None or low <= 0 or high <= 0:
        return None
    if below == above:
        return low
    share = (math.log(batch) - math.log(below)) / (math.log(above) - math.log(below))
    return math.exp(math.log(low) + share * (math.log(high) - math.log(low)))


def _loss(kept: float, lost: float, maximize: bool) -> float:
    """Percent the capped K's objective is worse than the measured K's (positive = a loss)."""
    ratio = kept / lost if maximize else lost / kept
    return (1 - ratio) * 100


#: Stretches no estimate interpolates across: (lower anchor, upper anchor, K) where K falls off a
#: cross-anchor cliff between the two neighbouring anchors (:mod:`lib.cliffs`).
NotInterpolable = Collection[tuple[int, int, int]]


def capped_ranges(
    original: Schedule,
    capped: Schedule,
    ceiling: CaptureCeiling,
    medians: Medians,
    maximize: bool = True,
    global_k: int | None = None,
    not_interpolable: NotInterpolable = (),
) -> list[CappedRange]:
    """Where ``capped`` runs a smaller K than ``original`` (both by vLLM's lookup, over the
    batch sizes vLLM can run: :func:`reachable_batch_sizes`, so never past a known
    max_num_seqs), each stretch with its expected loss: the largest, over the stretch's two
    ends, of the loss of the capped K against the measured K, both interpolated between the
    nearest anchors at or below and at or above the stretch (log objective linear in log
    batch size, so the worst point is an end). None, with the reason, where either K lacks a
    median at either anchor, or where either K falls off a cliff between them
    (``not_interpolable``): a straight line across a cliff would put the drop anywhere.

    >>> ceiling = CaptureCeiling(512, True, "test", 128, True, "test")
    >>> tuned = Schedule(((1, 1, 3), (2, 127, 5), (128, 128, 3)))
    >>> medians = {64: {4: 90.0, 5: 100.0}, 128: {3: 80.0, 4: 90.0, 5: 100.0}}
    >>> [r.to_json()["expected_loss_percent"] for r in
    ...  capped_ranges(tuned, capped_schedule(tuned, ceiling), ceiling, medians)]
    [10.0, None]
    """
    upto = reachable_batch_sizes(ceiling, original)
    before = dense_runs(original, upto, global_k)
    after = dense_runs(capped, upto, global_k)
    anchors = sorted(medians)
    stretches: list[tuple[int, int, int, int]] = []
    for lo, hi, k in after:
        for o_lo, o_hi, o_k in before:
            start, end = max(lo, o_lo), min(hi, o_hi)
            if start <= end and k < o_k:
                stretches.append((start, end, o_k, k))
    found = []
    for lo, hi, measured, kept in stretches:
        below = max((a for a in anchors if a <= lo), default=None)
        above = min((a for a in anchors if a >= hi), default=None)
        if below is None or above is None:
            found.append(
                CappedRange(lo, hi, measured, kept, None, "no measured anchor on both sides")
            )
            continue
        across = sorted(
            k for k in {kept, measured} if below < above and (below, above, k) in not_interpolable
        )
        if across:
            named = " and ".join(f"K={k}" for k in across)
            basis = (
                f"no estimate: {named} falls off a cliff between {below} and {above}"
                " (cross-anchor-cliff): nothing is interpolated across it"
            )
            found.append(CappedRange(lo, hi, measured, kept, None, basis))
            continue
        losses = []
        for batch in (lo, hi):
            kept_value = _interpolated(medians, below, above, kept, batch)
            measured_value = _interpolated(medians, below, above, measured, batch)
            if kept_value is None or measured_value is None:
                break
            losses.append(_loss(kept_value, measured_value, maximize))
        if len(losses) < 2:
            found.append(
                CappedRange(
                    lo,
                    hi,
                    measured,
                    kept,
                    None,
                    f"no estimate: K={kept} or K={measured} not measured at both {below} and"
                    f" {above}",
                )
            )
            continue
        where = f"anchor {below}" if below == above else f"anchors {below} and {above}"
        basis = f"interpolated between {where}"
        graphless = [a for a in (below, above) if tokens_per_step(a, measured) > ceiling.size]
        if graphless:
            at = " and ".join(str(a) for a in graphless)
            basis += (
                f"; K={measured} at {at} was itself measured past C, without CUDA graphs, so"
                " the estimate compares with a graphless step"
            )
        found.append(CappedRange(lo, hi, measured, kept, max(losses), basis))
    return found


def cells_past_ceiling(cells: Sequence[tuple[int, int]], ceiling: int) -> list[tuple[int, int]]:
    """The measured (batch size, K) cells whose own step ``b * (1 + K)`` exceeded C: they were
    measured without CUDA graphs, so their numbers say nothing of a graph-captured step.

    >>> cells_past_ceiling([(64, 7), (128, 7), (128, 3), (256, 1)], 512)
    [(128, 7)]
    """
    return [(b, k) for b, k in cells if tokens_per_step(b, k) > ceiling]


#: The speculative methods vLLM 0.33 keeps Dynamic SD for on model runner v1.
DSD_METHODS_MRV1 = ("ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash")


#: What backs the K a deployed schedule runs on a stretch of batch sizes, in legend order: a
#: kept cell at that anchor and K (``measured``, one batch size), nothing (``not measured``: the
#: batch sizes between and beyond the anchors), or nothing and a K the capture ceiling lowered
#: (``capped, not measured``, the check's own words for a :class:`CappedRange`).
STRETCH_STATUSES = ("measured", "not measured", "capped, not measured")


@dataclass(frozen=True)
class Stretch:
    """Batch sizes ``lo..hi`` that a deployed schedule runs at ``k``, with what backs it
    (:data:`STRETCH_STATUSES`)."""

    lo: int
    hi: int
    k: int
    status: str


def deployed_stretches(
    schedule: Schedule,
    measured: Collection[tuple[int, int]],
    capped: Sequence[CappedRange] = (),
    global_k: int | None = None,
) -> list[Stretch]:
    """What ``schedule`` runs at every batch size from 1 to its last range's end, as vLLM's
    dense lookup (:func:`dense_runs`, clamped to ``global_k``) cut into stretches of one K and
    one status:

    - ``capped, not measured``: inside a range of ``capped`` (it wins over the others: the
      CLI says "capped, not measured" of the whole range);
    - ``measured``: an anchor whose (batch size, K) is in ``measured`` (the kept cells), one
      batch size each;
    - ``not measured``: every other batch size (between the anchors, past the last one, and an
      anchor whose K there was not measured).

    Neighbours with the same K and status merge, except measured anchors. O(ranges + anchors
    + capped ranges), never one row per batch size: a schedule up to 2^31 - 1 is as cheap as
    one up to 256. An empty schedule gives none.

    >>> schedule = Schedule(((1, 63, 7), (64, 256, 0)))
    >>> [(s.lo, s.hi, s.k, s.status) for s in deployed_stretches(schedule, {(1, 7), (64, 0)})]
    ... # doctest: +NORMALIZE_WHITESPACE
    [(1, 1, 7, 'measured'), (2, 63, 7, 'not measured'), (64, 64, 0, 'measured'),
     (65, 256, 0, 'not measured')]
    """
    if not schedule.ranges:
        return []
    end = max(hi for _, hi, _ in schedule.ranges)
    runs = dense_runs(schedule, end, global_k)
    run_starts = [lo for lo, _, _ in runs]
    spans = sorted((c.lo, c.hi) for c in capped)
    anchors = {anchor for anchor, _ in measured if 1 <= anchor <= end}
    cuts = {*run_starts, *anchors, *(a + 1 for a in anchors)}
    cuts |= {edge for lo, hi in spans for edge in (lo, hi + 1)}
    starts = sorted(cut for cut in cuts if 1 <= cut <= end)
    stretches: list[Stretch] = []
    for index, lo in enumerate(starts):
        hi = starts[index + 1] - 1 if index + 1 < len(starts) else end
        k = runs[bisect.bisect_right(run_starts, lo) - 1][2]
        inside = bisect.bisect_right(spans, (lo, end)) - 1
        if inside >= 0 and spans[inside][0] <= lo <= spans[inside][1]:
            status = "capped, not measured"
        elif lo == hi and (lo, k) in measured:
            status = "measured"
        else:
            status = "not measured"
        last = stretches[-1] if stretches else None
        if last and status != "measured" and (last.k, last.status) == (k, status):
            stretches[-1] = Stretch(last.lo, hi, k, status)
        else:
            stretches.append(Stretch(lo, hi, k, status))
    return stretches


@dataclass(frozen=True)
class Finding:
    """One thing the capture check found: its rule, what it found, the fix (None where none is
    needed: vLLM never reaches an unreached range) and its size as a number (a capped range's
    expected loss in percent, where the anchors give one). ``line`` is the warning printed:
    the message and its fix, or the message alone where the fix is left to the anchors to
    measure that follow it (``fix_in_line`` false: a capped range). The verdict
    (:func:`lib.deploy.verdict.capture_reasons`) reads the same findings."""

    rule: str
    message: str
    fix: str | None = None
    size: float | None = None
    fix_in_line: bool = True

    @property
    def line(self) -> str:
        if self.fix is None or not self.fix_in_line:
            return self.message
        return f"{self.message}; {self.fix}"


@dataclass(frozen=True)
class CeilingCheck:
    """A vLLM schedule checked against the capture ceiling: the ``schedule`` to deploy (capped
    where C is known, else the tuned one as is), what was capped, what runs without CUDA graphs,
    and the lines that say so (the same in ``tune``, ``export``, ``check`` and the app)."""

    ceiling: CaptureCeiling
    schedule: Schedule
    capped: tuple[CappedRange, ...]
    graphless: tuple[GraphlessRange, ...]
    #: Ranges that start past a known max_num_seqs: vLLM never reaches them.
    unreached: tuple[Range, ...] = ()
    #: The schedule as tuned, before any cap (the seed's answer).
    tuned: Schedule | None = None

    @property
    def changed(self) -> bool:
        return bool(self.capped)

    def warnings(self) -> list[str]:
        """The lines of :meth:`findings`."""
        return [finding.line for finding in self.findings()]

    def findings(self) -> list[Finding]:
        """One for the ranges past a known max_num_seqs (``unreached-range``), one per
        graphless range (``graphless-range``: C assumed, or a schedule checked as it ran) or
        capped range (``capped-range``: C known; its size the expected loss, where known)."""
        found: list[Finding] = []
        if self.unreached:
            spans = ", ".join(json.dumps(list(r)) for r in self.unreached)
            found.append(
                Finding(
                    "unreached-range",
                    f"ranges past max_num_seqs={self.ceiling.max_num_seqs} ({self._source_seqs()})"
                    f" are never used by vLLM: {spans}",
                )
            )
        for stretch in self.graphless:
            low, high = stretch.tokens
            fix = (
                "cap them (tune-spec-k export --format vllm caps to a known C) or raise C"
                if self.ceiling.known
                else "give --max-cudagraph-capture-size C (the server's"
                " max_cudagraph_capture_size, e.g. from its /server_info) to cap them"
            )
            found.append(
                Finding(
                    "graphless-range",
                    f"batch sizes {_span(stretch.lo, stretch.hi)} run K={stretch.k} at"
                    f" {_span(low, high)} tokens per decode step, past the CUDA-graph capture"
                    f" ceiling C={self.ceiling.size} ({self._source()}): vLLM runs them"
                    " without CUDA graphs",
                    fix,
                )
            )
        for capped in self.capped:
            if capped.loss_percent is None:
                loss = capped.basis
            else:
                size = "loss" if capped.loss_percent >= 0 else "gain"
                loss = (
                    f"expected {size} {percent_text(abs(capped.loss_percent))} against"
                    f" K={capped.measured_k} ({capped.basis})"
                )
            found.append(
                Finding(
                    "capped-range",
                    f"capped, not measured: batch sizes {_span(capped.lo, capped.hi)} run"
                    f" K={capped.capped_k} instead of K={capped.measured_k} to stay within"
                    f" C={self.ceiling.size} tokens per step ({self._source()}); {loss}",
                    f"measure an anchor at {capped.lo} with K={capped.capped_k}",
                    capped.loss_percent,
                    fix_in_line=False,
                )
            )
        return found

    def _source_seqs(self) -> str:
        ceiling = self.ceiling
        return f"from {ceiling.max_num_seqs_source}"

    def _source(self) -> str:
        ceiling = self.ceiling
        return f"from {ceiling.source}" if ceiling.known else ceiling.source

    def summary(self) -> str:
        """The one line ``tune`` prints of the check."""
        head = f"capture ceiling: {self.ceiling.describe()}"
        if self.capped:
            return f"{head}: {len(self.capped)} range(s) capped, not measured"
        if self.graphless:
            spans = ", ".join(f"{_span(g.lo, g.hi)} (K={g.k})" for g in self.graphless)
            return f"{head}: batch sizes {spans} would run without CUDA graphs"
        return f"{head}: every batch size up to {self.ceiling.max_num_seqs} within it"

    def to_json(self) -> dict[str, object]:
        ceiling = self.ceiling
        return {
            "capture_ceiling": {
                "size": ceiling.size,
                "known": ceiling.known,
                "source": ceiling.source,
                "max_num_seqs": ceiling.max_num_seqs,
                "max_num_seqs_known": ceiling.max_num_seqs_known,
                "max_num_seqs_source": ceiling.max_num_seqs_source,
            },
            "tuned_schedule": (self.tuned or self.schedule).to_json(),
            "capped_ranges": [capped.to_json() for capped in self.capped],
            "graphless_ranges": [stretch.to_json() for stretch in self.graphless],
        }


def _span(low: int, high: int) -> str:
    return str(low) if low == high else f"{low}-{high}"


def check_ceiling(
    schedule: Schedule,
    ceiling: CaptureCeiling,
    medians: Medians,
    maximize: bool = True,
    global_k: int | None = None,
    repair: bool = True,
    not_interpolable: NotInterpolable = (),
) -> CeilingCheck:
    """The capture rule applied to a schedule: with C known (and ``repair``), the repaired
    schedule and its capped ranges (each with its expected loss); with C assumed, or a
    schedule checked as it ran (``repair=False``: ``check``, the context formats), the
    schedule unchanged and the ranges that run without CUDA graphs.

    >>> ceiling = CaptureCeiling(512, False, "assumed", 128, True, "test")
    >>> tuned = Schedule(((1, 1, 3), (2, 127, 5), (128, 128, 3)))
    >>> check = check_ceiling(tuned, ceiling, {})
    >>> check.schedule == tuned, [g.to_json()["lo"] for g in check.graphless]
    (True, [86])
    """
    graphless = graphless_ranges(schedule, ceiling, global_k)
    unreached = tuple(
        r for r in schedule.ranges if ceiling.max_num_seqs_known and r[0] > ceiling.max_num_seqs
    )
    if not (repair and ceiling.known) or not graphless:
        return CeilingCheck(ceiling, schedule, (), tuple(graphless), unreached, schedule)
    repaired = capped_schedule(schedule, ceiling, global_k)
    capped = capped_ranges(
        schedule, repaired, ceiling, medians, maximize, global_k, not_interpolable
    )
    return CeilingCheck(ceiling, repaired, tuple(capped), (), unreached, schedule)


def method_warnings(method: str | None) -> list[str]:
    """vLLM 0.33 switches Dynamic SD off on model runner v1 for methods outside
    :data:`DSD_METHODS_MRV1` (with a warning of its own; model runner v2 keeps it)."""
    if method is None or method in DSD_METHODS_MRV1:
        return []
    return [
        f"vLLM 0.33 disables the schedule on model runner v1 for method {method!r} (it keeps"
        f" it for {', '.join(DSD_METHODS_MRV1)}): serve on model runner v2 or expect static K"
    ]
