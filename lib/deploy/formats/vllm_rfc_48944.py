"""``vllm-rfc-48944``: a (batch x context) grid as vLLM RFC #48627 / PR #48944 (open) holds it:
``[bs_lo, bs_hi, ctx_lo, ctx_hi, K]`` entries forming a rectangular grid, which holds the grid
exactly (:func:`rfc_48944_export`); its rules (:func:`rfc_48944_violations`) and a deployed
schedule read back (:class:`Rfc48944Schedule`)."""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, get_args

from lib.context_grid import ContextGrid
from lib.deploy.decisions import GLOBAL_K_KEY, SCHEDULE_KEY
from lib.deploy.engine_format import EngineFormat
from lib.deploy.grid import (
    CONTEXT_FLAGS,
    UNBOUNDED_CONTEXT,
    ContextExport,
    ContextMix,
    batch_ranges,
    build_context_format,
    cell_losses,
    context_ranges,
    entry_violations,
    finished_export,
    global_k_violations,
    invalid_export,
    merge_identical_neighbours,
    range_k_at,
    ranges_violations,
    too_close,
    whole_entry,
)
from lib.deploy.releases import names, newest, number
from lib.deploy.settings import CtxAgg, ExportSettings
from lib.problems import Problem, show_value
from lib.schedule import Schedule

__all__ = [
    "CTX_AGGS",
    "FORMAT",
    "RFC_48944_KEY",
    "RFC_48944_LEGACY_KEY",
    "Rfc48944Schedule",
    "rfc_48944_entries",
    "rfc_48944_export",
    "rfc_48944_k_at",
    "rfc_48944_violations",
]


#: The field PR #48944 names the 5-item schedule, and the deprecated alias it keeps.
RFC_48944_KEY = "speculative_token_schedule"
RFC_48944_LEGACY_KEY = SCHEDULE_KEY
#: PR #48944's ways to turn a batch's per-request context lengths into one number.
CTX_AGGS: tuple[CtxAgg, ...] = get_args(CtxAgg)


#: Items of one PR #48944 entry: [bs_lo, bs_hi, ctx_lo, ctx_hi, K].
ENTRY_ITEMS = 5


def _needs_pr(key: str) -> list[str]:
    """The note that released vLLM refuses the export, where the newest known release does:
    its field is one released vLLM rejects (``rejected_fields``) or its entries are not of the
    released entry's length (``schedule_entry_items``)."""
    release = newest("vllm")
    rejects_items = number("vllm", "schedule_entry_items", release) != ENTRY_ITEMS
    if not rejects_items and key not in names("vllm", "rejected_fields", release):
        return []
    return [
        "needs vLLM with PR #48944 (open)"
        + (f"; released vLLM rejects {ENTRY_ITEMS}-item entries" if rejects_items else "")
    ]


def _export(
    grid: ContextGrid, mix: ContextMix, global_k: int, settings: ExportSettings
) -> tuple[ContextExport | None, list[Problem]]:
    return rfc_48944_export(grid, mix, global_k, settings.ctx_agg, settings.legacy_field_name)


FORMAT = EngineFormat(
    name="vllm-rfc-48944",
    label="vLLM RFC #48627 / PR #48944: (batch x context) 5-tuples",
    file_name="vllm_rfc_48944_schedule.json",
    position=50,
    build=functools.partial(build_context_format, "vllm-rfc-48944", _export),
    flags=frozenset(CONTEXT_FLAGS | {"ctx_agg", "legacy_field_name"}),
    needs_grid=True,
)


def rfc_48944_entries(grid: ContextGrid, ranges: Sequence[tuple[int, int]]) -> list[list[int]]:
    """The grid as PR #48944's ``[bs_lo, bs_hi, ctx_lo, ctx_hi, K]`` entries: the seed's batch
    ranges (:func:`batch_ranges`) by the context ``ranges``, K the grid's selected K;
    neighbouring whole rows, then whole columns, that are identical merge
    (:func:`merge_identical_neighbours`: the grid stays rectangular, and no cell changes K).
    Batch-major, then by context."""
    rows = [tuple(cell.selected_k for cell in row) for row in grid.rows]
    batch, rows = merge_identical_neighbours(batch_ranges(grid.anchors, grid.max_batch_size), rows)
    columns = [tuple(column) for column in zip(*rows, strict=True)]
    contexts, columns = merge_identical_neighbours(ranges, columns)
    rows = [tuple(row) for row in zip(*columns, strict=True)]
    return [
        [bs_lo, bs_hi, ctx_lo, ctx_hi, k]
        for (bs_lo, bs_hi), row in zip(batch, rows, strict=True)
        for (ctx_lo, ctx_hi), k in zip(contexts, row, strict=True)
    ]


def rfc_48944_k_at(entries: Sequence[Sequence[int]], batch_size: int, context: int) -> int:
    """The K PR #48944 runs: the row of the batch range holding ``batch_size`` (past the last,
    the last row), then in it the first context range whose ``hi >= context``.

    >>> rfc_48944_k_at([[1, 8, 1, 100, 3], [1, 8, 101, 2147483647, 5]], 4, 500)
    5
    """
    batches = sorted({(entry[0], entry[1]) for entry in entries})
    row = next(((lo, hi) for lo, hi in batches if lo <= batch_size <= hi), batches[-1])
    table = [[e[2], e[3], e[4]] for e in entries if (e[0], e[1]) == row]
    return range_k_at(table, context)


def rfc_48944_violations(entries: Any) -> list[str]:
    """PR #48944's validator (stricter than the RFC text), as violations (empty = valid):

    - a non-empty list; every entry 5 integers ``[bs_lo, bs_hi, ctx_lo, ctx_hi, K]``, and 3-
      and 5-item entries may not be mixed;
    - batch and context bounds >= 1 (``ctx_lo = 0`` is rejected), lo <= hi, K >= 0;
    - the distinct batch ranges, sorted, start at 1 and do not overlap;
    - rectangular: every batch range carries the same context ranges, each (batch range,
      context range) cell exactly once, the entry count = batch ranges x context ranges;
    - the distinct context ranges start at 1 and are contiguous (the last one's ``hi`` is
      treated as unbounded).

    K is not checked against ``num_speculative_tokens`` (the engine clamps it). Plus
    tune-spec-k's own limit: no number above :data:`~lib.keys.LARGEST_WHOLE_NUMBER`.

    >>> rfc_48944_violations([[1, 8, 1, 100, 3], [1, 8, 101, 2147483647, 5],
    ...                       [9, 64, 1, 100, 0], [9, 64, 101, 2147483647, 2]])
    []
    >>> rfc_48944_violations([[1, 8, 0, 100, 3]])
    ['entry 0 [1, 8, 0, 100, 3]: context bounds must be >= 1']
    """
    if not isinstance(entries, list | tuple) or not entries:
        return ["the schedule must be a non-empty list of [bs_lo, bs_hi, ctx_lo, ctx_hi, K]"]
    sizes = {len(entry) for entry in entries if isinstance(entry, list | tuple)}
    if {3, 5} <= sizes:
        threes = [
            str(i) for i, e in enumerate(entries) if isinstance(e, list | tuple) and len(e) == 3
        ]
        return ["3- and 5-item entries are mixed (3 items: entry " + ", ".join(threes) + ")"]
    violations = []
    cells = []
    for index, entry in enumerate(entries):
        if not whole_entry(entry, 5):
            violations.append(
                f"entry {index} {show_value(entry)} is not a list of 5 integers"
                " [bs_lo, bs_hi, ctx_lo, ctx_hi, K]"
            )
            continue
        bs_lo, bs_hi, ctx_lo, ctx_hi, _ = entry
        violations += entry_violations(
            index, entry, [("batch", "bs", bs_lo, bs_hi), ("context", "ctx", ctx_lo, ctx_hi)]
        )
        cells.append(((bs_lo, bs_hi), (ctx_lo, ctx_hi)))
    if violations:
        return violations
    return (
        _batch_range_violations([batch for batch, _ in cells])
        + _rectangle_violations(cells)
        + ranges_violations([context for _, context in cells], "context")
    )


def _batch_range_violations(ranges: Sequence[tuple[int, int]]) -> list[str]:
    """The distinct batch ranges, sorted, start at 1 and do not overlap (gaps are allowed)."""
    ordered = sorted(set(ranges))
    violations = []
    if ordered[0][0] != 1:
        violations.append(f"the first batch range {list(ordered[0])} does not start at 1")
    for before, after in itertools.pairwise(ordered):
        if after[0] <= before[1]:
            violations.append(f"batch ranges {list(before)} and {list(after)} overlap")
    return violations


def _rectangle_violations(
    cells: Sequence[tuple[tuple[int, int], tuple[int, int]]],
) -> list[str]:
    """Every batch range carries the same context ranges; each cell appears once; the entry
    count is batch ranges x context ranges."""
    violations = []
    contexts_of: dict[tuple[int, int], set[tuple[int, int]]] = collections.defaultdict(set)
    for batch, context in cells:
        contexts_of[batch].add(context)
    every: set[tuple[int, int]] = set()
    for contexts in contexts_of.values():
        every |= contexts
    for batch, contexts in sorted(contexts_of.items()):
        if contexts != every:
            missing = ", ".join(str(list(c)) for c in sorted(every - contexts))
            violations.append(
                f"batch range {list(batch)} lacks the context ranges {missing}: every batch"
                " range must carry the same context ranges"
            )
    for (batch, context), count in sorted(collections.Counter(cells).items()):
        if count > 1:
            violations.append(
                f"the cell (batch {list(batch)}, context {list(context)}) appears {count} times"
            )
    expected = len(contexts_of) * len(every)
    if len(cells) != expected:
        violations.append(
            f"{len(cells)} entries, expected {len(contexts_of)} batch ranges x {len(every)}"
            f" context ranges = {expected}"
        )
    return violations


def _rfc_48944_config_violations(config: Mapping[str, Any]) -> list[str]:
    """The whole config: ``num_speculative_tokens`` > 0, ``ctx_agg`` one of :data:`CTX_AGGS`,
    the schedule under exactly one of its two names, and the entries' rules."""
    keys = [key for key in (RFC_48944_KEY, RFC_48944_LEGACY_KEY) if key in config]
    violations = global_k_violations(config)
    if config.get("ctx_agg") not in CTX_AGGS:
        violations.append(f"ctx_agg {show_value(config.get('ctx_agg'))} is not one of {CTX_AGGS}")
    if len(keys) != 1:
        violations.append(
            f"expected the schedule under exactly one of {RFC_48944_KEY}, {RFC_48944_LEGACY_KEY}"
        )
        return violations
    return violations + rfc_48944_violations(config[keys[0]])


def rfc_48944_export(
    grid: ContextGrid,
    mix: ContextMix,
    global_k: int,
    ctx_agg: CtxAgg = "mean",
    legacy_field_name: bool = False,
) -> tuple[ContextExport | None, list[Problem]]:
    """PR #48944: the grid itself (:func:`rfc_48944_entries`) under ``speculative_token_schedule``
    (or its deprecated alias ``num_speculative_tokens_per_batch_size`` with
    ``legacy_field_name``), with ``ctx_agg`` and ``num_speculative_tokens``. Context ranges from
    :func:`context_ranges`. The losses look every cell up in the entries as written
    (:func:`rfc_48944_k_at`): 0 everywhere, since merging identical
    neighbours changes no cell."""
    ranges = context_ranges(grid.points)
    if ranges is None:
        return None, too_close(grid)
    entries = rfc_48944_entries(grid, ranges)
    key = RFC_48944_LEGACY_KEY if legacy_field_name else RFC_48944_KEY
    config = {GLOBAL_K_KEY: global_k, key: entries, "ctx_agg": ctx_agg}
    violations = _rfc_48944_config_violations(config)
    if violations:
        return None, invalid_export("vllm-rfc-48944", config, violations)
    notes = [
        *_needs_pr(key),
        "context ranges by decode-time context (prompt + output / 2), each boundary the"
        " geometric midpoint of two neighbouring measured contexts rounded down, never on a"
        f" measured context; the last range ends at {UNBOUNDED_CONTEXT} (unbounded)",
        "each measured run's requests share one prompt length, so ctx_agg (how a batch's"
        " per-request lengths become one number) did not matter in the sweep; with mixed"
        " lengths it does",
    ]
    if legacy_field_name:
        notes.append(f"{RFC_48944_LEGACY_KEY} is PR #48944's deprecated alias of {RFC_48944_KEY}")
    details = {
        "context_ranges": [
            {
                "lo": lo,
                "hi": hi,
                "prompt_tokens": p.prompt_tokens,
                "context_tokens": p.context_tokens,
            }
            for (lo, hi), p in zip(ranges, grid.points, strict=True)
        ]
    }
    detail_lines = [
        "context ranges: "
        + ", ".join(
            f"[{lo}, {hi}] holds context {p.context_tokens} (prompt {p.prompt_tokens})"
            for (lo, hi), p in zip(ranges, grid.points, strict=True)
        )
    ]
    return finished_export(
        grid,
        "vllm-rfc-48944",
        config,
        cell_losses(grid, lambda batch, context: rfc_48944_k_at(entries, batch, context), mix),
        mix,
        details=details,
        detail_lines=detail_lines,
        notes=notes,
    ), []


# ------------------------------------------------------------------ deployed


@dataclass(frozen=True)
class Rfc48944Schedule:
    """A deployed PR #48944 schedule: its ``[bs_lo, bs_hi, ctx_lo, ctx_hi, K]`` entries,
    sorted (equal schedules compare equal, whichever of its two names ``key`` held them)."""

    entries: tuple[tuple[int, int, int, int, int], ...]
    key: str = dataclasses.field(default=RFC_48944_KEY, compare=False)

    format: ClassVar[str] = "vllm-rfc-48944"

    def k_at(self, batch_size: int, context: int) -> int:
        """The K it runs at ``batch_size`` and decode-time ``context``
        (:func:`rfc_48944_k_at`)."""
        return rfc_48944_k_at(self.entries, batch_size, context)

    @property
    def ks(self) -> frozenset[int]:
        """Every K the schedule holds."""
        return frozenset(entry[4] for entry in self.entries)

    def batch_bound(self) -> Schedule:
        """The largest K it runs at each batch range, over every context: what the CUDA-graph
        capture rule is held to."""
        largest: dict[tuple[int, int], int] = {}
        for bs_lo, bs_hi, _, _, k in self.entries:
            largest[(bs_lo, bs_hi)] = max(k, largest.get((bs_lo, bs_hi), 0))
        return Schedule(tuple((lo, hi, k) for (lo, hi), k in sorted(largest.items())))

    def to_json(self) -> dict[str, Any]:
        """The format and the table, as the ``speculative_config`` held it."""
        return {"format": self.format, self.key: [list(entry) for entry in self.entries]}
