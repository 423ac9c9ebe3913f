"""``vllm-context``: a (batch x context) grid as today's vLLM (merged Dynamic SD) can hold it.
vLLM has no context axis: the grid collapses to one batch schedule for a context mix
(:func:`mix_choice`), reported with one schedule per measured context (the grid's columns), and
the export says what the mix schedule loses at every cell (docs/context.md, "Exports")."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from lib.context_grid import ContextGrid
from lib.deploy.decisions import GLOBAL_K_KEY, SCHEDULE_KEY
from lib.deploy.engine_format import VLLM_ENGINE_FLAGS, EngineFormat
from lib.deploy.grid import (
    CONTEXT_FLAGS,
    ContextExport,
    ContextMix,
    build_context_format,
    cell_losses,
    finished_export,
    global_k_violations,
    invalid_export,
)
from lib.deploy.settings import ExportSettings
from lib.problems import Problem, Severity
from lib.schedule import Schedule, validate_schedule

__all__ = [
    "FORMAT",
    "mix_choice",
    "vllm_context_export",
    "vllm_context_violations",
]


def _export(
    grid: ContextGrid, mix: ContextMix, global_k: int, settings: ExportSettings
) -> tuple[ContextExport | None, list[Problem]]:
    return vllm_context_export(grid, mix, global_k)


FORMAT = EngineFormat(
    name="vllm-context",
    label="vLLM today: one batch schedule for the context mix",
    file_name="vllm_context_schedule.json",
    position=40,
    build=functools.partial(build_context_format, "vllm-context", _export),
    flags=frozenset(CONTEXT_FLAGS),
    needs_grid=True,
    engine_flags=VLLM_ENGINE_FLAGS,
)


def mix_choice(grid: ContextGrid, anchor_index: int, mix: ContextMix) -> int | None:
    """The one K that batch anchor ``grid.anchors[anchor_index]`` runs at every context under
    a batch-only schedule, by the tuner's own rule applied to the mix: each K's score is the
    mix-weighted conservative score ``sum(weight(c) * score(K at c))`` over the context points
    (the median where the file has no score); every K within the tuner's relative tolerance
    of the best score ties with it (``score / best >= 1 - tolerance``, or ``best / score`` for a
    minimised objective; when maximising and the best is <= 0, all tie), and the smallest tied K
    wins. With a mix of one context point this is that point's own pick. Only a K kept at every
    context point of the anchor can be chosen (its loss must be known everywhere it runs);
    None when there is none."""
    row = grid.rows[anchor_index]
    weighted: dict[int, float] = {}
    for k in grid.ks:
        scores = [cell.score(k) for cell in row]
        if any(score is None for score in scores):
            continue
        weighted[k] = sum(
            mix.weight(cell.point.prompt_tokens) * (score or 0.0)
            for cell, score in zip(row, scores, strict=True)
        )
    if not weighted:
        return None
    maximize = grid.direction == "maximize"
    best = max(weighted.values()) if maximize else min(weighted.values())
    floor = 1 - grid.relative_tolerance

    def ties(score: float) -> bool:
        if maximize:
            return best <= 0 or score / best >= floor
        return score > 0 and best / score >= floor

    return min(k for k, score in weighted.items() if ties(score) or score == best)


def vllm_context_violations(
    config: Mapping[str, Any], per_context: Mapping[str, Any] | None = None
) -> list[str]:
    """Today's vLLM rules (merged Dynamic SD, #32374) on a config and on each per-context
    schedule: ``num_speculative_tokens`` a whole number > 0, and every
    ``num_speculative_tokens_per_batch_size`` as :func:`lib.schedule.validate_schedule` checks
    it (non-empty, ``[lo, hi, K]`` integers, bounds >= 1, lo <= hi, K >= 0, no overlap, the
    first range starting at 1).

    >>> vllm_context_violations({"num_speculative_tokens": 3,
    ...     "num_speculative_tokens_per_batch_size": [[1, 63, 3], [64, 256, 0]]})
    []
    >>> vllm_context_violations({"num_speculative_tokens": 0,
    ...     "num_speculative_tokens_per_batch_size": [[2, 8, 3]]}, {"512": [[1, 9, -1]]})
    ... # doctest: +NORMALIZE_WHITESPACE
    ['num_speculative_tokens 0 is not a whole number > 0',
     'the first range starts at 2, not 1', 'per-context 512: entry 0 [1, 9, -1]: K must be >= 0']
    """
    violations = global_k_violations(config)
    violations += validate_schedule(config.get(SCHEDULE_KEY))
    for prompt, schedule in (per_context or {}).items():
        violations += [f"per-context {prompt}: {v}" for v in validate_schedule(schedule)]
    return violations


def mix_schedule(grid: ContextGrid, mix: ContextMix, step: Schedule) -> tuple[Schedule, str | None]:
    """The batch schedule for ``mix`` and what to say of it. Tuned with
    ``--interpolated-schedule`` (each point then holds its schedule switching at the
    interpolated crossovers, :attr:`lib.context_grid.ContextPoint.interpolated`), a mix of one
    context point runs that point's interpolated schedule: the one the batch-only answer of
    that length runs, so one run never prints two vLLM configs for the same traffic. A mix of
    several points has no interpolated curve of its own: ``step`` (switching at the anchors),
    and a note saying so. Without interpolated points: ``step`` and nothing to say."""
    if not any(point.interpolated is not None for point in grid.points):
        return step, None
    weighed = [point for point in grid.points if mix.weight(point.prompt_tokens) > 0]
    if len(weighed) == 1 and weighed[0].interpolated is not None:
        return weighed[0].interpolated, (
            f"the schedule switches at the interpolated crossovers of the"
            f" {weighed[0].prompt_tokens}-token point (--interpolated-schedule), as that"
            " length's batch-only schedule does"
        )
    return step, (
        "--interpolated-schedule interpolates a mix of one prompt length only: this mix's"
        " schedule switches at the anchors"
    )


def vllm_context_export(
    grid: ContextGrid, mix: ContextMix, global_k: int
) -> tuple[ContextExport | None, list[Problem]]:
    """Today's vLLM: one batch schedule for the context mix (per anchor :func:`mix_choice`,
    merged as the seed merges, :meth:`lib.schedule.Schedule.from_picks`), beside one schedule
    per context point (the grid's column: no loss at its own context). The losses are those of
    the mix schedule at every cell, K looked up as vLLM does (:meth:`Schedule.k_at`; a
    ``global_k`` below the tables' largest K, which vLLM would clamp them to, is refused by the
    caller: :attr:`ContextExport.largest_k`)."""
    picks = [mix_choice(grid, index, mix) for index in range(len(grid.anchors))]
    lacking = [str(a) for a, k in zip(grid.anchors, picks, strict=True) if k is None]
    if lacking:
        return None, [
            Problem(
                Severity.ERROR,
                "no-common-k",
                "no K was kept at every context point of batch "
                + ", ".join(lacking)
                + ": a batch-only schedule runs one K at every context",
                value=", ".join(lacking),
            )
        ]
    step = Schedule.from_picks(grid.anchors, [k or 0 for k in picks], grid.max_batch_size)
    schedule, interpolation = mix_schedule(grid, mix, step)
    per_context = {
        str(point.prompt_tokens): (
            point.interpolated
            or Schedule.from_picks(
                grid.anchors, [row[index].selected_k for row in grid.rows], grid.max_batch_size
            )
        ).to_json()
        for index, point in enumerate(grid.points)
    }
    config = {GLOBAL_K_KEY: global_k, SCHEDULE_KEY: schedule.to_json()}
    violations = vllm_context_violations(config, per_context)
    if violations:
        return None, invalid_export("vllm-context", config, violations)
    detail_lines = [
        f"per context (prompt {prompt}, context {point.context_tokens} tokens): {json.dumps(s)}"
        for (prompt, s), point in zip(per_context.items(), grid.points, strict=True)
    ]
    notes = [
        "the config runs one batch schedule at every context length (vLLM has no context"
        " axis): it is the mix's best; per_context holds each measured context's own schedule"
        " (no loss at that context)",
        *([interpolation] if interpolation is not None else []),
    ]
    return finished_export(
        grid,
        "vllm-context",
        config,
        cell_losses(grid, lambda batch, _: schedule.k_at(batch), mix),
        mix,
        details={"per_context": per_context},
        detail_lines=detail_lines,
        notes=notes,
    ), []
