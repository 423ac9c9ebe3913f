"""``vllm-pr-54801``: a (batch x context) grid as vLLM PR #54801 (open) holds it: a batch table
and a separate context-length table, assumed combined by taking the smaller K; the pair chosen
by :func:`table_pair_search`, with a warning wherever it cannot express the measured optimum;
its rules (:func:`pr_54801_violations`) and a deployed schedule read back
(:class:`Pr54801Schedule`)."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from lib.context_grid import ContextGrid
from lib.deploy.decisions import GLOBAL_K_KEY, SCHEDULE_KEY
from lib.deploy.engine_format import EngineFormat
from lib.deploy.grid import (
    CONTEXT_FLAGS,
    CellLoss,
    ContextExport,
    ContextMix,
    build_context_format,
    cell_losses,
    context_ranges,
    entry_violations,
    finished_export,
    global_k_violations,
    invalid_export,
    loss_percent,
    merge_identical_neighbours,
    range_k_at,
    ranges_violations,
    too_close,
    whole_entry,
)
from lib.deploy.releases import names, newest
from lib.deploy.settings import ExportSettings
from lib.numbers import percent_text
from lib.problems import Problem, Severity, show_value
from lib.schedule import Schedule, validate_schedule

__all__ = [
    "FORMAT",
    "MAX_EXHAUSTIVE",
    "PR_54801_COMBINATION",
    "SEQ_LEN_KEY",
    "Pr54801Schedule",
    "TablePair",
    "pr_54801_export",
    "pr_54801_k_at",
    "pr_54801_violations",
    "seq_len_violations",
    "table_pair_search",
]


#: PR #54801's context-length table (its shape is presumed: the PR does not publish it).
SEQ_LEN_KEY = "num_speculative_tokens_per_seq_len"
#: The largest PR #54801 search done exhaustively, counted as (length tables) x (batch anchors)
#: x (candidate Ks): one batch K tried at one anchor under one length table.
MAX_EXHAUSTIVE = 200_000
#: The assumption every PR #54801 export states.
PR_54801_COMBINATION = (
    "assumed: the engine runs the smaller of the batch table's K and the length table's K"
    " (PR #54801 does not publish how it combines them)"
)


def _export(
    grid: ContextGrid, mix: ContextMix, global_k: int, settings: ExportSettings
) -> tuple[ContextExport | None, list[Problem]]:
    return pr_54801_export(grid, mix, global_k)


FORMAT = EngineFormat(
    name="vllm-pr-54801",
    label="vLLM PR #54801: batch table + seq_len table",
    file_name="vllm_pr_54801_schedule.json",
    position=60,
    build=functools.partial(build_context_format, "vllm-pr-54801", _export),
    flags=frozenset(CONTEXT_FLAGS),
    needs_grid=True,
)


def seq_len_violations(table: Any) -> list[str]:
    """The rules a ``num_speculative_tokens_per_seq_len`` table ``[[len_lo, len_hi, K], ...]``
    is held to (the PR publishes none; these are PR #48944's for context ranges): a non-empty
    list of 3 integers each, bounds >= 1, lo <= hi, K >= 0, ranges from 1 and contiguous.

    >>> seq_len_violations([[1, 2180, 3], [2181, 2147483647, 0]])
    []
    >>> seq_len_violations([[1, 100, 3], [200, 300, 0]])  # doctest: +NORMALIZE_WHITESPACE
    ['context ranges [1, 100] and [200, 300] are not contiguous
      (expected the next to start at 101)']
    """
    if not isinstance(table, list | tuple) or not table:
        return [f"{SEQ_LEN_KEY} must be a non-empty list of [len_lo, len_hi, K]"]
    violations = []
    ranges = []
    for index, entry in enumerate(table):
        if not whole_entry(entry, 3):
            violations.append(f"entry {index} {show_value(entry)} is not a list of 3 integers")
            continue
        lo, hi, _ = entry
        violations += entry_violations(index, entry, [("length", "len", lo, hi)])
        ranges.append((lo, hi))
    return violations or ranges_violations(ranges, "context")


def pr_54801_violations(config: Mapping[str, Any]) -> list[str]:
    """A PR #54801 config: ``num_speculative_tokens`` > 0, the batch table by today's vLLM
    rules (:func:`lib.schedule.validate_schedule`), the length table by
    :func:`seq_len_violations`."""
    return (
        global_k_violations(config)
        + validate_schedule(config.get(SCHEDULE_KEY))
        + seq_len_violations(config.get(SEQ_LEN_KEY))
    )


def pr_54801_k_at(
    batch_table: Schedule, length_table: Sequence[Sequence[int]], batch_size: int, context: int
) -> int:
    """The K PR #54801 is assumed to run (:data:`PR_54801_COMBINATION`): the smaller of the
    batch table's K at ``batch_size`` (:meth:`lib.schedule.Schedule.k_at`) and the length
    table's at ``context`` (:func:`range_k_at`).

    >>> pr_54801_k_at(Schedule(((1, 63, 3), (64, 256, 5))), [[1, 2180, 3], [2181, 9999, 0]],
    ...               64, 2180)
    3
    """
    return min(batch_table.k_at(batch_size), range_k_at(length_table, context))


@dataclass(frozen=True)
class TablePair:
    """PR #54801's two tables, as chosen: a K per batch anchor and a K per context point; how
    they were found (``"exhaustive"`` or ``"coordinate ascent"``) and how many (length table,
    anchor, batch K) trials that took."""

    batch_ks: tuple[int, ...]
    length_ks: tuple[int, ...]
    method: str
    trials: int
    #: How many (anchor, batch K, cell) terms the search looked up: its cost, counted.
    lookups: int = 0
    #: Coordinate ascent's full passes over the context points (0: exhaustive).
    passes: int = 0


def _anchor_key(
    grid: ContextGrid, index: int, batch_k: int, length_ks: Sequence[int], mix: ContextMix
) -> tuple[float, float] | None:
    """How well one anchor does under ``min(batch_k, length K)``, ranked as the tuner ranks:
    (the loss of its mix-weighted conservative score against the grid's picks' under the same
    mix, the sum of its cells' losses by the same score), smaller is better; None when some
    cell's K was not kept there. Scores as :meth:`GridCell.score` (the median where the file
    has none); a grid pick whose score is not > 0 is compared on medians."""
    expected = optimum = plain = 0.0
    for cell, length_k in zip(grid.rows[index], length_ks, strict=True):
        k = min(batch_k, length_k)
        picked = cell.score(cell.selected_k)
        value = cell.score(k) if picked is not None and picked > 0 else cell.median(k)
        best = picked if picked is not None and picked > 0 else cell.optimum
        if value is None:
            return None
        weight = mix.weight(cell.point.prompt_tokens)
        expected += weight * value
        optimum += weight * best
        plain += loss_percent(value, best, grid.direction)
    return loss_percent(expected, optimum, grid.direction), plain


def _best_batch_ks(
    grid: ContextGrid, length_ks: Sequence[int], mix: ContextMix
) -> tuple[tuple[float, float], tuple[int, ...]] | None:
    """The best batch table under a length table, anchor by anchor (exact: the anchors'
    batch Ks do not interact): per anchor the smallest key of :func:`_anchor_key`, ties to the
    smallest K; the summed key. None when some anchor has no feasible K."""
    total = (0.0, 0.0)
    picks = []
    for index in range(len(grid.anchors)):
        best: tuple[tuple[float, float], int] | None = None
        for k in grid.ks:
            key = _anchor_key(grid, index, k, length_ks, mix)
            if key is not None and (best is None or key < best[0]):
                best = (key, k)
        if best is None:
            return None
        total = (total[0] + best[0][0], total[1] + best[0][1])
        picks.append(best[1])
    return total, tuple(picks)


def table_pair_search(
    grid: ContextGrid, mix: ContextMix, max_exhaustive: int = MAX_EXHAUSTIVE
) -> TablePair | None:
    """The batch table and length table that do best under the smaller-K rule.

    Objective, smaller is better: per batch anchor, the loss of its mix-weighted expected
    objective against the 2-D optimum's under the same mix (so each anchor counts equally, and
    with an unrestricting length table the batch table is :func:`mix_choice`'s), summed over
    the anchors; ties go to the smaller sum of every cell's own loss (the mix's unweighted
    contexts count then), then to the smaller Ks (length table first, compared in order).
    Only pairs whose every cell runs a kept K are feasible.

    Search: given a length table the best batch table is found exactly, anchor by anchor. With
    at most ``max_exhaustive`` trials (length tables x anchors x Ks) every length table is
    tried: the pair is the exact optimum over every pair. Else coordinate ascent from the
    length table that restricts nothing (the largest K everywhere): each context point in turn
    takes its best K given the others (ties: smallest; kept only when strictly better), until
    a full pass changes nothing (:func:`_coordinate_ascent`: its cost is linear in anchors
    and in points, about anchors x Ks^2 x points look-ups a pass, counted in
    :attr:`TablePair.lookups`). Deterministic either way. None when no pair is feasible.
    """
    ks = grid.ks
    size = len(grid.points)
    anchors = len(grid.anchors)
    exhaustive = len(ks) ** size * anchors * len(ks) <= max_exhaustive
    if not exhaustive:
        return _coordinate_ascent(grid, mix)
    best: tuple[tuple[float, float], tuple[int, ...], tuple[int, ...]] | None = None
    trials = 0
    for length_ks in itertools.product(ks, repeat=size):
        trials += anchors * len(ks)
        found = _best_batch_ks(grid, length_ks, mix)
        if found is not None and (best is None or found[0] < best[0]):
            best = (found[0], length_ks, found[1])
    if best is None:
        return None
    return TablePair(best[2], best[1], "exhaustive", trials, trials * size)


#: One cell's term of an anchor's key under a K: (mix weight x expected score, the cell's own
#: loss), or None where the K was not kept there (infeasible).
_Term = tuple[float, float] | None


def _cell_terms(grid: ContextGrid, mix: ContextMix) -> list[list[dict[int, _Term]]]:
    """Per anchor, per context point, per K: the cell's term of :func:`_anchor_key` (looked
    up once: the ascent adds terms, it does not recompute them)."""
    terms = []
    for row in grid.rows:
        row_terms = []
        for cell in row:
            picked = cell.score(cell.selected_k)
            by_score = picked is not None and picked > 0
            best = picked if by_score and picked is not None else cell.optimum
            weight = mix.weight(cell.point.prompt_tokens)
            by_k: dict[int, _Term] = {}
            for k in grid.ks:
                value = cell.score(k) if by_score else cell.median(k)
                by_k[k] = (
                    None
                    if value is None
                    else (
                        weight * value,
                        loss_percent(value, best, grid.direction),
                    )
                )
            row_terms.append(by_k)
        terms.append(row_terms)
    return terms


def _anchor_optima(grid: ContextGrid, mix: ContextMix) -> list[float]:
    """Per anchor, the mix-weighted score of the grid's own picks (:func:`_anchor_key`'s
    reference: it depends on no table)."""
    optima = []
    for row in grid.rows:
        total = 0.0
        for cell in row:
            picked = cell.score(cell.selected_k)
            best = picked if picked is not None and picked > 0 else cell.optimum
            total += mix.weight(cell.point.prompt_tokens) * best
        optima.append(total)
    return optima


def _add(first: _Term, second: _Term) -> _Term:
    if first is None or second is None:
        return None
    return (first[0] + second[0], first[1] + second[1])


def _coordinate_ascent(grid: ContextGrid, mix: ContextMix) -> TablePair | None:
    """:func:`table_pair_search` beyond the exhaustive bound: from the length table that
    restricts nothing, each context point in turn takes its best K given the others (ties:
    the smallest; changed only when strictly better), until a full pass changes nothing.

    Near-linear in the grid: an anchor's key under a trial K at point ``p`` is the sum of its
    cells' terms before ``p`` (kept as the pass moves on), the term at ``p``, and the sum after
    ``p`` (summed once per pass), so a pass looks up about anchors x Ks x points x (Ks + 2)
    terms, not anchors x Ks^2 x points^2. The best batch table of the final length table is
    then found exactly (:func:`_best_batch_ks`)."""
    ks = grid.ks
    size = len(grid.points)
    terms = _cell_terms(grid, mix)
    optima = _anchor_optima(grid, mix)
    zero: _Term = (0.0, 0.0)
    length_ks = [ks[-1]] * size
    lookups = trials = passes = 0

    def key_of(anchor: int, total: _Term) -> tuple[float, float] | None:
        if total is None:
            return None
        return loss_percent(total[0], optima[anchor], grid.direction), total[1]

    def best_total(
        keys: Sequence[Sequence[tuple[float, float] | None]],
    ) -> tuple[float, float] | None:
        """The summed best key over anchors (per anchor the smallest over batch Ks)."""
        total = (0.0, 0.0)
        for by_batch in keys:
            feasible = [key for key in by_batch if key is not None]
            if not feasible:
                return None
            smallest = min(feasible)
            total = (total[0] + smallest[0], total[1] + smallest[1])
        return total

    changed = True
    while changed:
        changed = False
        passes += 1
        # suffix[a][b][p]: the terms after point p under the current length table.
        suffix = []
        for anchor in range(len(grid.anchors)):
            by_batch = []
            for batch_k in ks:
                sums = [zero] * (size + 1)
                for position in range(size - 1, -1, -1):
                    term = terms[anchor][position][min(batch_k, length_ks[position])]
                    sums[position] = _add(term, sums[position + 1])
                    lookups += 1
                by_batch.append(sums)
            suffix.append(by_batch)
        prefix = [[zero] * len(ks) for _ in grid.anchors]
        for position in range(size):
            scored: list[tuple[tuple[float, float] | None, int]] = []
            for k in ks:
                keys = []
                for anchor in range(len(grid.anchors)):
                    keys.append(
                        [
                            key_of(
                                anchor,
                                _add(
                                    _add(
                                        prefix[anchor][b],
                                        terms[anchor][position][min(batch_k, k)],
                                    ),
                                    suffix[anchor][b][position + 1],
                                ),
                            )
                            for b, batch_k in enumerate(ks)
                        ]
                    )
                lookups += len(grid.anchors) * len(ks)
                trials += len(grid.anchors) * len(ks)
                scored.append((best_total(keys), k))
            current = next(key for key, k in scored if k == length_ks[position])
            feasible = [(key, k) for key, k in scored if key is not None]
            if feasible:
                key, k = min(feasible)
                if current is None or key < current:
                    changed = changed or k != length_ks[position]
                    length_ks[position] = k
            for anchor in range(len(grid.anchors)):
                for b, batch_k in enumerate(ks):
                    term = terms[anchor][position][min(batch_k, length_ks[position])]
                    prefix[anchor][b] = _add(prefix[anchor][b], term)
                    lookups += 1
    found = _best_batch_ks(grid, length_ks, mix)
    if found is None:
        return None
    lookups += len(grid.anchors) * len(ks) * size
    return TablePair(found[1], tuple(length_ks), "coordinate ascent", trials, lookups, passes)


def _pr_54801_warnings(
    grid: ContextGrid, pair: TablePair, losses: Sequence[CellLoss], mix: ContextMix
) -> list[str]:
    """One warning per cell where the pair cannot run the measured optimum's K, with the lost
    percent; where the batch table says 0 and the optimum speculates, what raising the batch
    table would cost at that batch's other contexts."""
    warnings = []
    by_cell = {(loss.batch_size, loss.prompt_tokens): loss for loss in losses}
    for index, row in enumerate(grid.rows):
        batch_k = pair.batch_ks[index]
        for cell, length_k in zip(row, pair.length_ks, strict=True):
            loss = by_cell[cell.batch_size, cell.point.prompt_tokens]
            if loss.exported_k == cell.selected_k:
                continue
            if batch_k < cell.selected_k and length_k >= cell.selected_k:
                cause = "the batch table caps it"
            elif length_k < cell.selected_k and batch_k >= cell.selected_k:
                cause = "the length table caps it"
            elif loss.exported_k < cell.selected_k:
                cause = "both tables cap it"
            else:
                cause = "both tables allow more"
            text = (
                f"batch {cell.batch_size}, prompt {cell.point.prompt_tokens} tokens: the pair runs"
                f" K={loss.exported_k} (the smaller of batch K {batch_k} and length K"
                f" {length_k}; {cause}) where the measured optimum is K={cell.selected_k}:"
                f" loses {percent_text(loss.loss_percent)}"
            )
            if batch_k == 0 < cell.selected_k:
                raised = _anchor_mix_loss(grid, index, cell.selected_k, pair.length_ks, mix)
                now = _anchor_mix_loss(grid, index, batch_k, pair.length_ks, mix)
                text += (
                    f". The batch table says 0 at batch {cell.batch_size}, and the smaller-K rule"
                    " lets no length table turn speculation back on; raising the batch table to"
                    f" {cell.selected_k} there would make batch {cell.batch_size}'s mix-weighted"
                    f" loss {percent_text(raised)} instead of {percent_text(now)}"
                )
            warnings.append(text)
    return warnings


def _anchor_mix_loss(
    grid: ContextGrid, index: int, batch_k: int, length_ks: Sequence[int], mix: ContextMix
) -> float:
    """The mix-weighted loss of one anchor's cells (as in :func:`loss_summary`) under
    ``min(batch_k, length K)``; a K not kept at a cell counts as unknown (NaN)."""
    total = 0.0
    for cell, length_k in zip(grid.rows[index], length_ks, strict=True):
        median = cell.median(min(batch_k, length_k))
        if median is None:
            return math.nan
        total += mix.weight(cell.point.prompt_tokens) * loss_percent(
            median, cell.optimum, grid.direction
        )
    return total


def pr_54801_export(
    grid: ContextGrid, mix: ContextMix, global_k: int, max_exhaustive: int = MAX_EXHAUSTIVE
) -> tuple[ContextExport | None, list[Problem]]:
    """PR #54801: a batch table ``num_speculative_tokens_per_batch_size`` and a separate
    length table ``num_speculative_tokens_per_seq_len`` (:data:`SEQ_LEN_KEY`, ranges from
    :func:`context_ranges`), the pair from :func:`table_pair_search`, each table's equal
    neighbours merged. The losses look every cell up in the tables as written (the smaller of
    the two Ks: :data:`PR_54801_COMBINATION`), and every cell where the
    pair cannot run the optimum's K is a warning."""
    ranges = context_ranges(grid.points)
    if ranges is None:
        return None, too_close(grid)
    pair = table_pair_search(grid, mix, max_exhaustive)
    if pair is None:
        return None, [
            Problem(
                Severity.ERROR,
                "no-feasible-tables",
                "no batch table and length table run a kept K at every cell",
            )
        ]
    batch_table = Schedule.from_picks(grid.anchors, pair.batch_ks, grid.max_batch_size)
    merged, length_rows = merge_identical_neighbours(ranges, [(k,) for k in pair.length_ks])
    length_table = [[lo, hi, row[0]] for (lo, hi), row in zip(merged, length_rows, strict=True)]
    config = {
        GLOBAL_K_KEY: global_k,
        SCHEDULE_KEY: batch_table.to_json(),
        SEQ_LEN_KEY: length_table,
    }
    violations = pr_54801_violations(config)
    if violations:
        return None, invalid_export("vllm-pr-54801", config, violations)

    def exported_k(batch: int, context: int) -> int:
        return pr_54801_k_at(batch_table, length_table, batch, context)

    losses = cell_losses(grid, exported_k, mix)
    search = {
        "method": pair.method,
        "trials": pair.trials,
        "passes": pair.passes,
        "objective": "per batch anchor, the loss of the mix-weighted conservative score (the"
        " tuner's ranking) against the grid's picks', summed over the anchors; ties: the"
        " smaller sum of cell losses, then the smaller Ks",
    }
    notes = [
        PR_54801_COMBINATION,
        # Released vLLM refuses the length table's field (``rejected_fields``).
        *(
            [
                "needs vLLM with PR #54801 (open); the length table's shape and lookup (the"
                " first range whose hi reaches the length) are presumed"
            ]
            if SEQ_LEN_KEY in names("vllm", "rejected_fields", newest("vllm"))
            else []
        ),
        f"tables chosen by {pair.method} search ({pair.trials} trials"
        + (f", {pair.passes} passes over the context points)" if pair.passes else ")"),
    ]
    return finished_export(
        grid,
        "vllm-pr-54801",
        config,
        losses,
        mix,
        details={"combination": PR_54801_COMBINATION, "search": search},
        detail_lines=[],
        warnings=_pr_54801_warnings(grid, pair, losses, mix),
        notes=notes,
    ), []


# ------------------------------------------------------------------ deployed


@dataclass(frozen=True)
class Pr54801Schedule:
    """A deployed PR #54801 schedule: its batch table and its length table (sorted)."""

    batch_table: Schedule
    length_table: tuple[tuple[int, int, int], ...]

    format: ClassVar[str] = "vllm-pr-54801"

    def k_at(self, batch_size: int, context: int) -> int:
        """The K it is assumed to run at ``batch_size`` and decode-time ``context``
        (:func:`pr_54801_k_at`)."""
        return pr_54801_k_at(self.batch_table, self.length_table, batch_size, context)

    @property
    def ks(self) -> frozenset[int]:
        """Every K either table can make the engine run (the smaller of the two)."""
        return frozenset(
            min(batch_k, length_k)
            for _, _, batch_k in self.batch_table.ranges
            for _, _, length_k in self.length_table
        )

    def batch_bound(self) -> Schedule:
        """The batch table: the smaller-K rule never runs more than it says."""
        return self.batch_table

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            SCHEDULE_KEY: self.batch_table.to_json(),
            SEQ_LEN_KEY: [list(entry) for entry in self.length_table],
        }
