"""Result JSONs with a (batch x context) grid, built by hand after the grid contract
(``context_axis`` and ``context_grid``, docs/context.md "Exports"), and the context formats'
exports of them: shared by the tests of the grid (tests/test_context_grid.py), of what the
context formats share (tests/deploy/test_grid.py), of each context format
(tests/deploy/formats/) and of a deployed context schedule (tests/deploy/test_deployed.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lib.context_grid import ContextGrid, context_grid_of
from lib.deploy.decisions import Decisions
from lib.deploy.grid import ContextExport, ContextMix, context_mix
from lib.deploy.registry import format_named, formats
from lib.deploy.settings import ExportSettings
from lib.problems import Problem
from lib.schedule import Schedule

#: The registry's context formats, in listing order.
CONTEXT_FORMATS = tuple(f.name for f in formats() if f.needs_grid)

Medians = dict[tuple[int, int], dict[int, float]]

#: The published shape (PR #48944's 2-D finding), with round numbers: at batch 256 speculation
#: loses at short context (K*=0) and wins at long context (K*=3); at batch 1 K*=3 everywhere.
#: Prompts 500 and 4000 with 100 output tokens: decode-time contexts 550 and 4050.
PUBLISHED: Medians = {
    (1, 500): {0: 100.0, 3: 150.0},
    (1, 4000): {0: 80.0, 3: 120.0},
    (256, 500): {0: 2000.0, 3: 1600.0},
    (256, 4000): {0: 1200.0, 3: 1600.0},
}
#: isqrt(550 * 4050) = isqrt(2227500) = 1492 (1492^2 = 2226064 <= 2227500 < 1493^2 = 2229049).
PUBLISHED_BOUNDARY = 1492


def result_json(
    medians: Medians,
    *,
    output_tokens: int = 100,
    direction: str = "maximize",
    selected: dict[tuple[int, int], int | None] | None = None,
    rejected: tuple[tuple[int, int, int], ...] = (),
    deployable: bool = True,
    reason: str | None = None,
    global_k: int | None = 3,
    max_batch_size: int | None = 256,
) -> dict[str, Any]:
    """A result JSON after the grid contract. The selected K of a cell is the K of the best
    median unless ``selected`` says otherwise; ``rejected`` lists (batch, prompt, K)
    candidates with verdict "rejected"."""
    prompts = sorted({prompt for _, prompt in medians})
    best = min if direction == "minimize" else max
    cells = []
    for (batch, prompt), by_k in sorted(medians.items()):
        chosen = (selected or {}).get((batch, prompt), best(by_k, key=lambda k: by_k[k]))
        cells.append(
            {
                "batch_size": batch,
                "prompt_tokens": prompt,
                "context_tokens": prompt + output_tokens // 2,
                "selected_k": chosen,
                "selected_median_objective": None if chosen is None else by_k[chosen],
                "status": "undecided" if chosen is None else "resolved",
                "p_eps_good": None,
                "candidates": [
                    {
                        "k": k,
                        "num_runs": 3,
                        "median_objective": median,
                        "mad_objective": 1.0,
                        "conservative_objective": median - 1.5,
                        "objective_relative_mad": 0.01,
                        "verdict": "rejected" if (batch, prompt, k) in rejected else "kept",
                        "reason": "too noisy" if (batch, prompt, k) in rejected else None,
                    }
                    for k, median in sorted(by_k.items())
                ],
            }
        )
    return {
        "num_speculative_tokens_per_batch_size": [[1, 256, 3]],
        "configured_global_num_speculative_tokens": global_k,
        "max_num_speculative_tokens_observed": 3,
        "selection": {
            "objective_metric": "output_throughput",
            "objective_direction": direction,
            "max_batch_size": max_batch_size,
        },
        "context_axis": {
            "field": "random_input_len",
            "tolerance": 0.1,
            "points": [
                {
                    "prompt_tokens": prompt,
                    "output_tokens": output_tokens,
                    "context_tokens": prompt + output_tokens // 2,
                    "num_runs": 6,
                }
                for prompt in prompts
            ],
            "deployable": deployable,
            "not_deployable_reason": reason,
        },
        "context_grid": cells,
    }


def grid_of(data: dict[str, Any]) -> ContextGrid:
    grid, problems = context_grid_of(data, "result.json")
    assert problems == []
    assert grid is not None
    return grid


def mix_of(grid: ContextGrid, text: str | None) -> ContextMix:
    mix, problems = context_mix(text, grid, field="--context-mix", source="result.json")
    assert problems == []
    assert mix is not None
    return mix


def write(tmp_path: Path, data: object, name: str = "result.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


# --------------------------------------------------------------------------- reading the grid


def context_export(
    grid: ContextGrid, format: str, mix: str | None, global_k: int, source: str = ""
) -> tuple[ContextExport | None, list[Problem]]:
    """``format``'s export of ``grid`` under the context mix ``mix`` (None: the default), as
    ``tune-spec-k export --format FORMAT --global-k GLOBAL_K`` builds it from a result file."""
    decisions = Decisions(Schedule(()), None, "result JSON", source, grid=grid)
    settings = ExportSettings(format=format, global_k=global_k, context_mix=mix)
    exported, problems = format_named(format).build(decisions, settings, None)
    assert exported is None or isinstance(exported, ContextExport)
    return exported, problems
