"""What an engine does with a schedule between and beyond the anchors: vLLM's CUDA-graph capture
ceiling, applied in one place for every command that deploys or checks a schedule.

The rule itself, per vLLM release, is :mod:`lib.deploy.ceiling`'s (0.33 and older: a step of b
requests at K runs a graph iff ``b * (1 + D(b)) <= C``, with D(b) vLLM's dense lookup; 0.34:
FULL within the decode request ceiling R, PIECEWISE within the token graphs' C0, else none),
as is the repair (:func:`~lib.deploy.ceiling.capped_schedule`: ``K'(b) = min(D(b), max(0,
floor(C / b) - 1))``, re-merged; on 0.34 re-checked after capping). Here: what the check
reports of it (:class:`CeilingCheck`: capped ranges with their expected loss, graphless,
PIECEWISE and unreached ranges, the lines that say so), the stretches a deployed schedule
runs, and the methods a release runs without the schedule. Every function here is pure and
costs O(ranges x sqrt(C)) at most, never O(batch sizes): a schedule up to 2^31 - 1 is checked
as fast as one up to 256.

Where C and max_num_seqs come from (:func:`resolve_ceiling`): the flags, else what the sweep
recorded (serve params in the records, a saved ``/server_info``), else vLLM's defaults for
the release and the GPU, and then C is an *assumption*: the schedule is kept as tuned and the
ranges past it are named.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from lib.deploy import releases
from lib.deploy.ceiling import (
    CaptureCeiling,
    GraphlessRange,
    assumed_capture_size,
    capped_schedule,
    capture_sizes,
    dense_runs,
    full_past_ceiling,
    graph_bounds,
    graphless_ranges,
    piecewise_ranges,
    resolve_ceiling,
    schedule_requests,
    smallest_k,
    tokens_per_step,
)
from lib.deploy.engine import EngineFacts
from lib.numbers import percent_text
from lib.schedule import Range, Schedule

__all__ = [
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
    "data_parallel_warnings",
    "dense_runs",
    "deployed_stretches",
    "full_past_ceiling",
    "graphless_ranges",
    "method_warnings",
    "past_max_num_seqs",
    "piecewise_ranges",
    "reachable_batch_sizes",
    "resolve_ceiling",
    "schedule_requests",
    "tokens_per_step",
]


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
    #: A note (why nothing needs doing), not a warning.
    note: bool = False

    @property
    def line(self) -> str:
        if self.fix is None or not self.fix_in_line:
            return self.message
        return f"{self.message}; {self.fix}"


@dataclass(frozen=True)
class CeilingCheck:
    """A vLLM schedule checked against the capture ceiling: the ``schedule`` to deploy (capped
    where C is known, else the tuned one as is), what was capped, what runs without CUDA graphs
    (re-checked on the capped schedule: a K=0 step past C stays graphless), and the lines that
    say so (the same in ``tune``, ``export``, ``check`` and the app). On vLLM 0.34 also what
    runs PIECEWISE graphs (``piecewise``), what runs FULL graphs past C0 (``full_past``: why a
    K the token rule would cap is kept) and the request ceiling R (``requests``)."""

    ceiling: CaptureCeiling
    schedule: Schedule
    capped: tuple[CappedRange, ...]
    graphless: tuple[GraphlessRange, ...]
    #: Ranges that start past a known max_num_seqs: vLLM never reaches them.
    unreached: tuple[Range, ...] = ()
    #: The schedule as tuned, before any cap (the seed's answer).
    tuned: Schedule | None = None
    piecewise: tuple[GraphlessRange, ...] = ()
    full_past: tuple[GraphlessRange, ...] = ()
    requests: int = 0
    smallest_k: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.capped)

    def warnings(self) -> list[str]:
        """The lines of :meth:`findings` that are warnings."""
        return [finding.line for finding in self.findings() if not finding.note]

    def notes(self) -> list[str]:
        """The lines of :meth:`findings` that are notes."""
        return [finding.line for finding in self.findings() if finding.note]

    def _past(self) -> str:
        """Why a step has no graph, by the release's rule."""
        ceiling = self.ceiling
        if not ceiling.by_requests:
            return f"past the CUDA-graph capture ceiling C={ceiling.size} ({self._source()})"
        return (
            f"past {self._requests_text()} and the token graphs' ceiling C0={ceiling.size}"
            f" ({self._source()})"
        )

    def _requests_text(self) -> str:
        ceiling = self.ceiling
        if ceiling.decode_requests is not None:
            why = f"explicit: {ceiling.decode_source.lstrip('; ')}"
        elif ceiling.sm100:
            why = "max_num_seqs, on SM100"
        else:
            why = f"set by the schedule's smallest K={self.smallest_k}"
        return f"vLLM 0.34's decode request ceiling R={self.requests} ({why})"

    def findings(self) -> list[Finding]:
        """One for the ranges past a known max_num_seqs (``unreached-range``), one per
        graphless range with K > 0 (``graphless-range``: C assumed, or a schedule checked as it
        ran) or capped range (``capped-range``: C known; its size the expected loss, where
        known); one per K=0 range past C (``graphless-platform``: a server without speculation
        runs it without graphs too, so it is the platform's limit, not the schedule's); on
        vLLM 0.34 one per range that runs PIECEWISE graphs, not FULL (``piecewise-range``)."""
        found: list[Finding] = []
        ceiling = self.ceiling
        if self.unreached:
            spans = ", ".join(json.dumps(list(r)) for r in self.unreached)
            found.append(
                Finding(
                    "unreached-range",
                    f"ranges past max_num_seqs={ceiling.max_num_seqs} ({self._source_seqs()})"
                    f" are never used by vLLM: {spans}",
                )
            )
        name = "C0" if ceiling.by_requests else "C"
        raise_it = ceiling.fact("raise_ceiling")
        for stretch in self.graphless:
            if stretch.k == 0:
                found.append(
                    Finding(
                        "graphless-platform",
                        f"{stretch.head()}, past {name}="
                        f"{ceiling.size} ({self._source()}): no CUDA graph, as on a server"
                        " without speculation with the same max_num_seqs (a platform limit,"
                        " not the schedule's)",
                        f"raise {name} (--max-cudagraph-capture-size on vllm serve) or serve"
                        f" with --max-num-seqs {ceiling.size} or less",
                    )
                )
                continue
            fix = (
                f"cap them (tune-spec-k export --format vllm caps to a known {name}) or raise"
                f" the ceiling ({raise_it})"
                if ceiling.known
                else f"give --max-cudagraph-capture-size {name} (the server's"
                + (
                    " largest token graph, e.g. from its /server_info" + "'s"
                    " prefill_cudagraph_capture_token_sizes)"
                    if ceiling.by_requests
                    else " max_cudagraph_capture_size, e.g. from its /server_info)"
                )
                + " to cap them"
            )
            found.append(
                Finding(
                    "graphless-range",
                    f"{stretch.head()}, {self._past()}: vLLM runs them without CUDA graphs",
                    fix,
                )
            )
        for stretch in self.piecewise:
            found.append(
                Finding(
                    "piecewise-range",
                    f"{stretch.head()} in PIECEWISE CUDA graphs, not FULL: past"
                    f" {self._requests_text()}"
                    + (
                        f" or the token bound {ceiling.decode_tokens}"
                        if ceiling.decode_tokens is not None
                        else ""
                    ),
                    f"raise it: {raise_it.replace('=N', f'={stretch.hi}')}",
                )
            )
        for stretch in self.full_past:
            found.append(
                Finding(
                    "full-graph-past-ceiling",
                    f"{stretch.head()}, past C0={ceiling.size}, in"
                    f" FULL CUDA graphs: vLLM {ceiling.vllm.release if ceiling.vllm else ''}"
                    " keys decode graphs by requests and query length, and they are within"
                    f" {self._requests_text()}{self._token_bound_text()}, so they are not"
                    " capped",
                    note=True,
                )
            )
        found += self._runner_notes()
        for capped in self.capped:
            if capped.loss_percent is None:
                loss = capped.basis
            else:
                size = "loss" if capped.loss_percent >= 0 else "gain"
                loss = (
                    f"expected {size} {percent_text(abs(capped.loss_percent))} against"
                    f" K={capped.measured_k} ({capped.basis})"
                )
            why = f"to keep a CUDA graph ({self._past()})"
            if (
                ceiling.by_requests
                and capped.lo > graph_bounds(ceiling, capped.capped_k, self.requests)[1]
            ):
                why = (
                    f"(they stay without CUDA graphs, past C0={ceiling.size}: the lower K"
                    f" raises vLLM 0.34's decode request ceiling to R={self.requests} for"
                    " every smaller batch size)"
                )
            found.append(
                Finding(
                    "capped-range",
                    f"capped, not measured: batch sizes {_span(capped.lo, capped.hi)} run"
                    f" K={capped.capped_k} instead of K={capped.measured_k} {why}; {loss}"
                    if ceiling.by_requests
                    else f"capped, not measured: batch sizes {_span(capped.lo, capped.hi)} run"
                    f" K={capped.capped_k} instead of K={capped.measured_k} to stay within"
                    f" C={ceiling.size} tokens per step ({self._source()}); {loss}",
                    f"measure an anchor at {capped.lo} with K={capped.capped_k}",
                    capped.loss_percent,
                    fix_in_line=False,
                )
            )
        return found

    def _runner_notes(self) -> list[Finding]:
        """Where the release still has model runner v1 (``mrv1_forces_piecewise``: 0.33 and
        older), that runner forces PIECEWISE CUDA graphs under Dynamic SD: the check is of
        model runner v2 (0.33's default), which the note says. None on 0.34 (v1 removed) or
        for a ceiling given without a release."""
        vllm = self.ceiling.vllm
        if vllm is None or not releases.holds("vllm", "mrv1_forces_piecewise", vllm.release):
            return []
        return [
            Finding(
                "mrv1-piecewise",
                f"on model runner v1 vLLM {vllm.release} forces PIECEWISE CUDA graphs under"
                " Dynamic SD (no FULL decode graph at any batch size); this check is of model"
                " runner v2 (VLLM_USE_V2_MODEL_RUNNER=1)",
                note=True,
            )
        ]

    def _token_bound_text(self) -> str:
        """How the FULL graphs' token bound is known (0.34)."""
        if self.ceiling.decode_tokens is not None:
            return f" and the token bound {self.ceiling.decode_source}"
        widest = max((g.tokens[1] for g in self.full_past), default=0)
        return (
            f" (max_num_batched_tokens not known: assumed at least {widest} tokens; a smaller"
            " one runs the wider steps PIECEWISE)"
        )

    def _source_seqs(self) -> str:
        ceiling = self.ceiling
        return f"from {ceiling.max_num_seqs_source}"

    def _source(self) -> str:
        ceiling = self.ceiling
        return f"from {ceiling.source}" if ceiling.known else ceiling.source

    def summary(self) -> str:
        """The one line ``tune`` prints of the check."""
        head = f"capture ceiling: {self.ceiling.describe()}"
        if self.ceiling.by_requests:
            head += f", R={self.requests}"
        if self.capped:
            return f"{head}: {len(self.capped)} range(s) capped, not measured"
        repairable = [g for g in self.graphless if g.k > 0]
        if repairable:
            spans = ", ".join(f"{_span(g.lo, g.hi)} (K={g.k})" for g in repairable)
            return f"{head}: batch sizes {spans} would run without CUDA graphs"
        if self.graphless:
            spans = ", ".join(_span(g.lo, g.hi) for g in self.graphless)
            return f"{head}: K=0 at batch sizes {spans} runs without CUDA graphs (the platform's)"
        if not self.ceiling.by_requests:
            return f"{head}: every batch size up to {self.ceiling.max_num_seqs} within it"
        kind = "a FULL or PIECEWISE" if self.piecewise else "a FULL"
        line = f"{head}: every batch size up to {self.ceiling.max_num_seqs} runs {kind} CUDA graph"
        if self.full_past:
            spans = ", ".join(f"{_span(g.lo, g.hi)} at K={g.k}" for g in self.full_past)
            line += f" ({spans} past C0={self.ceiling.size} too: not capped)"
        return line

    def to_json(self) -> dict[str, object]:
        ceiling = self.ceiling
        block: dict[str, object] = {
            "size": ceiling.size,
            "known": ceiling.known,
            "source": ceiling.source,
            "max_num_seqs": ceiling.max_num_seqs,
            "max_num_seqs_known": ceiling.max_num_seqs_known,
            "max_num_seqs_source": ceiling.max_num_seqs_source,
        }
        if ceiling.vllm is not None:
            block |= {
                "vllm_version": str(ceiling.vllm.release),
                "vllm_version_known": ceiling.vllm.known,
                "vllm_version_source": ceiling.vllm.source,
                "capture_rule": ceiling.rule,
            }
        if ceiling.gpu is not None:
            block |= {
                "gpu": ceiling.gpu.gpu.name,
                "gpu_known": ceiling.gpu.known,
                "gpu_source": ceiling.gpu.source,
            }
            # Only where stated (--gpu-memory-gib, --tensor-parallel-size): the exports of
            # the result read them (SGLang's defaults too).
            if ceiling.gpu.memory is not None:
                block |= {
                    "gpu_memory_gib": ceiling.gpu.memory.value,
                    "gpu_memory_gib_source": ceiling.gpu.memory.source,
                }
            if ceiling.gpu.tensor_parallel is not None:
                block |= {
                    "tensor_parallel_size": ceiling.gpu.tensor_parallel.value,
                    "tensor_parallel_size_source": ceiling.gpu.tensor_parallel.source,
                }
        if ceiling.by_requests:
            block |= {
                "decode_request_ceiling": self.requests,
                "explicit_decode_requests": ceiling.decode_requests,
                "decode_token_bound": ceiling.decode_tokens,
                "decode_source": ceiling.decode_source or None,
            }
        found: dict[str, object] = {
            "capture_ceiling": block,
            "tuned_schedule": (self.tuned or self.schedule).to_json(),
            "capped_ranges": [capped.to_json() for capped in self.capped],
            "graphless_ranges": [stretch.to_json() for stretch in self.graphless],
        }
        if ceiling.by_requests:
            found["piecewise_ranges"] = [stretch.to_json() for stretch in self.piecewise]
            found["full_past_ceiling"] = [stretch.to_json() for stretch in self.full_past]
        return found


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
    schedule and its capped ranges (each with its expected loss), re-checked (what still runs
    without graphs: a K=0 step past C); with C assumed, or a schedule checked as it ran
    (``repair=False``: ``check``, the context formats), the schedule unchanged and the ranges
    that run without CUDA graphs.

    >>> ceiling = CaptureCeiling(512, False, "assumed", 128, True, "test")
    >>> tuned = Schedule(((1, 1, 3), (2, 127, 5), (128, 128, 3)))
    >>> check = check_ceiling(tuned, ceiling, {})
    >>> check.schedule == tuned, [g.to_json()["lo"] for g in check.graphless]
    (True, [86])
    """
    graphless = graphless_ranges(schedule, ceiling, global_k)
    # vLLM's validator ignores ranges past max_num_seqs (it does not refuse them): named as
    # never used where the release does so.
    ignored = releases.holds("vllm", "ranges_past_max_num_seqs_ignored", _release_of(ceiling))
    unreached = tuple(
        r
        for r in schedule.ranges
        if ignored and ceiling.max_num_seqs_known and r[0] > ceiling.max_num_seqs
    )
    deployed: Schedule = schedule
    capped: tuple[CappedRange, ...] = ()
    if repair and ceiling.known and any(g.k > 0 for g in graphless):
        deployed = capped_schedule(schedule, ceiling, global_k)
        capped = tuple(
            capped_ranges(
                schedule, deployed, ceiling, medians, maximize, global_k, not_interpolable
            )
        )
        graphless = graphless_ranges(deployed, ceiling, global_k)
    return CeilingCheck(
        ceiling,
        deployed,
        capped,
        tuple(graphless),
        unreached,
        schedule,
        tuple(piecewise_ranges(deployed, ceiling, global_k)),
        tuple(full_past_ceiling(deployed, ceiling, global_k)),
        schedule_requests(deployed, ceiling, global_k),
        smallest_k(deployed, ceiling, global_k),
    )


def _release_of(ceiling: CaptureCeiling | None) -> releases.Release:
    """The release whose rules the ceiling was resolved for (the newest known where none)."""
    if ceiling is not None and ceiling.vllm is not None:
        return ceiling.vllm.release
    return releases.newest("vllm")


def method_warnings(method: str | None, ceiling: CaptureCeiling | None = None) -> list[str]:
    """Where the release has model runner v1 (``mrv1_dsd_methods``: 0.33 and older), vLLM
    switches Dynamic SD off there for methods outside that list (with a warning of its own;
    model runner v2 keeps it). 0.34 removed model runner v1: no warning. ``ceiling`` None:
    the newest known release."""
    release = _release_of(ceiling)
    methods = releases.names("vllm", "mrv1_dsd_methods", release)
    if method is None or not methods or method in methods:
        return []
    return [
        f"vLLM {release} disables the schedule on model runner v1 for method {method!r} (it"
        f" keeps it for {', '.join(methods)}): serve on model runner v2 or expect static K"
    ]


def data_parallel_warnings(engine: EngineFacts, ceiling: CaptureCeiling | None = None) -> list[str]:
    """Where the release turns Dynamic SD off under data parallelism (``dp_disables_dsd``) and
    the server's ``data_parallel_size`` is known to be above 1 (a saved server config states
    it): vLLM runs static K, with a warning of its own. Not known (no saved config): nothing
    said, as nothing can know it.

    >>> from lib.deploy.engine import Fact
    >>> data_parallel_warnings(EngineFacts(data_parallel_size=Fact(2, "f")))[0][:34]
    'vLLM 0.34.0 disables the schedule '
    >>> data_parallel_warnings(EngineFacts(data_parallel_size=Fact(1, "f")))
    []
    """
    release = _release_of(ceiling)
    stated = engine.data_parallel_size
    if stated is None or stated.value <= 1:
        return []
    if not releases.holds("vllm", "dp_disables_dsd", release):
        return []
    return [
        f"vLLM {release} disables the schedule under data parallelism (data_parallel_size="
        f"{stated.value}, from {stated.source}): it runs static K; serve with"
        " --data-parallel-size 1 to keep it"
    ]
