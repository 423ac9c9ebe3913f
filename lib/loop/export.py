"""``tune-spec-k export``: any file holding a schedule, in any registered engine format.

The file is read by the one typed reader (:func:`lib.deploy.registry.read_decisions`: a
tune-spec-k or seed result, a ``speculative_config``, a bare ``[[lo, hi, K], ...]`` list, a
TensorRT-LLM ``draft_len_schedule``, an SGLang adaptive config); the format is built by
:func:`lib.deploy.registry.export`, which checks the format's rules and the deployment
constraints. A result JSON held in memory (the app's) goes through :func:`export_text`, the
very text ``export -o`` writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lib.deploy.engine_format import Exported
from lib.deploy.registry import decisions_from_json, export, formats, grid_decisions, read_decisions
from lib.deploy.settings import ExportSettings
from lib.problems import Problem
from lib.settings import DeploySettings

__all__ = ["export_data", "export_file", "export_text"]


def _needs_grid(settings: ExportSettings) -> bool:
    """Whether the format asked for reads a context grid (an unknown one: no)."""
    return any(f.needs_grid for f in formats() if f.name == settings.format)


def export_file(
    path: str | Path, settings: ExportSettings, deploy: DeploySettings | None = None
) -> tuple[Exported | None, list[Problem]]:
    """The export of the schedule in the file at ``path``, or None and every problem."""
    decisions, problems = read_decisions(path, for_grid=_needs_grid(settings))
    if decisions is None:
        return None, problems
    return export(decisions, settings, deploy)


def export_data(
    data: Any, settings: ExportSettings, source: str = "the result"
) -> tuple[Exported | None, list[Problem]]:
    """The export of a parsed file (a result JSON in memory), or None and every problem."""
    reader = grid_decisions if _needs_grid(settings) else decisions_from_json
    decisions, problems = reader(data, source)
    if decisions is None:
        return None, problems
    return export(decisions, settings)


def export_text(
    data: Any, settings: ExportSettings, source: str = "the result"
) -> tuple[str | None, list[Problem]]:
    """The file ``tune-spec-k export RESULT --format F -o PATH`` writes, for a result in memory;
    None and the problems when it cannot be made."""
    exported, problems = export_data(data, settings, source)
    return (None if exported is None else exported.text()), problems
