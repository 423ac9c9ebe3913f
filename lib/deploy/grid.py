"""The context formats' common build: a result's (batch x context) grid
(:func:`lib.context_formats.context_grid_of`), the traffic mix of ``--context-mix``, the global
K, then :func:`lib.context_formats.context_export` for the format. The three formats
(``format_vllm_context``, ``format_vllm_rfc_48944``, ``format_vllm_pr_54801``) are a module
each; what they share is here."""

from __future__ import annotations

import dataclasses

from lib.context_formats import (
    ContextFormat,
    context_export,
    context_mix,
)
from lib.deploy.constraints import CaptureCeiling, graphless_ranges
from lib.deploy.decisions import SCHEDULE_KEY, Decisions
from lib.deploy.registry import Exported, global_k_problem
from lib.deploy.settings import ExportSettings
from lib.flags import flag_name
from lib.problems import Problem, Severity
from lib.schedule import Schedule

__all__ = ["CONTEXT_FLAGS", "build_context_format"]

#: The export flags every context format reads.
CONTEXT_FLAGS = frozenset({"context_mix"})


def _ceiling_warnings(config: dict[str, object], ceiling: CaptureCeiling | None) -> list[str]:
    """The capture rule on a context export's batch schedule: named, never repaired (a
    repair would change the cells the loss table is about)."""
    if ceiling is None or not isinstance(config.get(SCHEDULE_KEY), list):
        return []
    schedule, _ = Schedule.parse(config[SCHEDULE_KEY])
    if schedule is None:
        return []
    if not ceiling.max_num_seqs_known:
        # The decisions' own schedule said nothing of the grid's: check to the export's end.
        last = max(hi for _, hi, _ in schedule.ranges)
        ceiling = dataclasses.replace(ceiling, max_num_seqs=last)
    return [
        f"batch sizes {g.lo}-{g.hi} run K={g.k} at {g.tokens[0]}-{g.tokens[1]} tokens per"
        f" decode step, past the CUDA-graph capture ceiling C={ceiling.size}"
        f" ({ceiling.source if not ceiling.known else 'from ' + ceiling.source}): vLLM runs"
        " them without CUDA graphs (the context formats are checked, not capped)"
        for g in graphless_ranges(schedule, ceiling)
    ]


def build_context_format(
    name: ContextFormat,
    decisions: Decisions,
    settings: ExportSettings,
    ceiling: CaptureCeiling | None,
) -> tuple[Exported | None, list[Problem]]:
    """Format ``name``'s export of ``decisions.grid`` (of an analysis in memory or a result
    file); a grid that cannot be exported is refused with its problems, a source without one
    naming the command that makes one."""
    source = decisions.source
    grid = decisions.grid
    if grid is None and decisions.grid_problems:
        return None, list(decisions.grid_problems)
    if grid is None:
        return None, [
            Problem(
                Severity.ERROR,
                "no-context-grid",
                f"the file has no context_grid: --format {name} needs a result JSON with one"
                " (tune-spec-k on a sweep that varied the prompt length); this file is a "
                + decisions.kind,
                files=(source,),
            )
        ]
    mix, problems = context_mix(
        settings.context_mix, grid, field=flag_name(ExportSettings, "context_mix"), source=source
    )
    if mix is None:
        return None, problems
    chosen = settings.global_k or grid.global_k
    exported, problems = context_export(
        grid,
        name,
        mix,
        chosen,
        ctx_agg=settings.ctx_agg,
        legacy_field_name=settings.legacy_field_name,
        source=source,
    )
    if exported is None:
        return None, problems
    if chosen < max(exported.largest_k, 1):
        return None, [global_k_problem(chosen, exported.largest_k, "export's")]
    extra = _ceiling_warnings(dict(exported.config), ceiling)
    if extra:
        exported = dataclasses.replace(exported, warnings=(*exported.warnings, *extra))
    return exported, problems
