"""The app's view of a sweep with a context axis: the grid, the context picker's choices, the
heatmap's batch-only losses and each format's download, all computed by the CLI's functions
(:mod:`lib.context`, :mod:`lib.deploy`), so the downloads are the CLI's files. The engine
formats' downloads iterate the registry (:func:`lib.deploy.registry.formats`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lib.analysis import Analysis, analyse
from lib.context import ContextAnalysis, analyse_contexts
from lib.context_axis import ContextAxis
from lib.deploy.grid import ContextExport
from lib.deploy.registry import export, formats, grid_export
from lib.deploy.result_file import context_text, result_text
from lib.deploy.settings import ExportSettings
from lib.deploy.traffic import with_traffic
from lib.deploy.tuning import deploy_analysis, deploy_contexts, deployed_decisions
from lib.deploy.verdict import Verdict, context_verdict, verdict_in
from lib.problems import Problem
from lib.schedule import TuningResult
from lib.settings import DeploySettings, Options, Settings
from lib.sweeps import Sweep
from lib.traffic import TrafficMix

__all__ = [
    "FORMAT_LABELS",
    "ContextDownload",
    "EngineDownload",
    "SweepAnalysis",
    "analyse_sweep",
    "context_downloads",
    "engine_downloads",
    "heatmap_losses",
    "point_labels",
]

#: What each context format is, in the picker's words (each format's registered label).
FORMAT_LABELS: dict[str, str] = {f.name: f.label for f in formats() if f.needs_grid}


@dataclass(frozen=True, eq=False)
class SweepAnalysis:
    """A sweep as the page shows it: ``grid`` when it has a context axis (else None), and
    ``analysis``, the batch-only analysis the rest of the page shows: the chosen context
    point's (``point``), or the whole sweep's."""

    analysis: Analysis
    grid: ContextAnalysis | None
    point: int | None

    @property
    def ok(self) -> bool:
        """Whether the CLI writes its result file: the grid has no error, or the analysis is
        ok (without an axis)."""
        return self.grid.ok if self.grid is not None else self.analysis.result.ok

    @property
    def problems(self) -> tuple[Problem, ...]:
        """Every problem of what the page shows: the whole grid's, or the analysis's."""
        return self.grid.problems if self.grid is not None else self.analysis.result.problems

    @property
    def verdict(self) -> Verdict:
        """The verdict the CLI prints for this sweep (:mod:`lib.deploy.verdict`): the grid's
        when there is one, else the deployed analysis's."""
        if self.grid is not None:
            return context_verdict(self.grid)
        found = verdict_in(self.analysis.result)
        assert found is not None, "analyse_sweep deploys every batch-only analysis"
        return found

    def result_text(self) -> str:
        """The result JSON, as the CLI writes it for this sweep (the grid's when there is one)."""
        if self.grid is not None:
            return context_text(self.grid, context_verdict(self.grid))
        return result_text(self.analysis.result)


def analyse_sweep(
    sweep: Sweep,
    settings: Settings,
    options: Options,
    axis: ContextAxis | None,
    point: int | None = None,
    deploy: DeploySettings | None = None,
    traffic: TrafficMix | None = None,
) -> SweepAnalysis:
    """The whole sweep's analysis, per context point when ``axis`` (from
    :func:`lib.context_axis.find_context_axis`) is not None; ``point``: which one the page details
    (default, or out of range: the shortest, the seed's world); every point deployed by
    :func:`lib.deploy.tuning.deploy_contexts` like a batch-only sweep (the grid's own exports
    are checked, not capped: :mod:`lib.deploy.grid`). A batch-only analysis is weighed on
    ``traffic`` (None: the sweep's own runs) as the CLI weighs it
    (:func:`lib.deploy.traffic.with_traffic`)."""
    if axis is None:
        deployed, _ = deploy_analysis(analyse(sweep, settings, options), deploy or DeploySettings())
        return SweepAnalysis(with_traffic(deployed, traffic), None, None)
    # Every point deployed as the CLI deploys it (capped where C is known): the page's point
    # is the grid's own, so the headline's K track, the downloads and the verdict agree.
    grid = deploy_contexts(
        analyse_contexts(sweep, axis, settings, options), deploy or DeploySettings()
    )
    chosen = point if point is not None and 0 <= point < len(axis.points) else 0
    return SweepAnalysis(grid.contexts[chosen], grid, chosen)


def point_labels(axis: ContextAxis | None) -> dict[str, int]:
    """The context picker's options: a label per point (prompt and decode-time context)."""
    if axis is None:
        return {}
    return {
        f"{point.prompt_tokens} prompt tokens (~{point.context_tokens} at decode)": index
        for index, point in enumerate(axis.points)
    }


def heatmap_losses(
    grid: ContextAnalysis, mix: str | None
) -> tuple[dict[int, int], dict[tuple[int, int], float | None], list[Problem]]:
    """The batch-only schedule the heatmap compares with (the vLLM export for ``mix``: K per
    batch size) and its loss at each (batch size, prompt) against the cell's own pick, in
    percent; empty with the export's problems when it cannot be built."""
    exported, problems = grid_export(grid, ExportSettings(format="vllm-context", context_mix=mix))
    if not isinstance(exported, ContextExport):
        return {}, {}, problems
    batch_only = {loss.batch_size: loss.exported_k for loss in exported.losses}
    losses: dict[tuple[int, int], float | None] = {
        (loss.batch_size, loss.prompt_tokens): loss.loss_percent for loss in exported.losses
    }
    return batch_only, losses, []


@dataclass(frozen=True)
class ContextDownload:
    """One format's file (the CLI's ``export -o`` text) and what the page says of it: the
    paste-ready config, the loss summary line, warnings and notes; or why there is none."""

    format: str
    filename: str
    text: str | None
    problems: tuple[Problem, ...]
    config: Mapping[str, Any] | None = None
    summary: str = ""
    remarks: tuple[str, ...] = ()


def context_downloads(
    grid: ContextAnalysis, mix: str | None, ctx_agg: str = "mean"
) -> list[ContextDownload]:
    """Every context format's file for the grid, as ``tune-spec-k export --format F
    --context-mix MIX -o`` writes it (and ``--ctx-agg`` for PR #48944)."""
    downloads = []
    for engine_format in formats():
        if not engine_format.needs_grid:
            continue
        name = engine_format.name
        settings = ExportSettings(
            format=name,
            context_mix=mix,
            ctx_agg=ctx_agg if "ctx_agg" in engine_format.flags else "mean",  # type: ignore[arg-type]
        )
        exported, problems = grid_export(grid, settings)
        if not isinstance(exported, ContextExport):
            downloads.append(ContextDownload(name, engine_format.file_name, None, tuple(problems)))
            continue
        downloads.append(
            ContextDownload(
                name,
                engine_format.file_name,
                exported.text(),
                tuple(problems),
                exported.config,
                exported.summary.line(name, exported.mix),
                (*exported.warnings, *exported.notes),
            )
        )
    return downloads


@dataclass(frozen=True)
class EngineDownload:
    """One batch-only engine format's file for the page: what ``tune-spec-k export RESULT
    --format F -o`` writes (``text``), the lines it prints (config, paste line, notes,
    warnings), or why there is none (``problems``)."""

    format: str
    label: str
    filename: str
    text: str | None
    lines: tuple[str, ...]
    problems: tuple[Problem, ...]


def engine_downloads(
    result: TuningResult, deploy: DeploySettings | None = None
) -> list[EngineDownload]:
    """Every registered batch-only format's export of the result (its schedule must exist), as
    ``tune-spec-k export RESULT --format F`` with the engine's settings where F reads them."""
    decisions = deployed_decisions(result)
    downloads = []
    for engine_format in formats():
        if engine_format.needs_grid:
            continue
        engine = deploy if engine_format.reads_ceiling and deploy is not None else None
        exported, problems = export(decisions, ExportSettings(format=engine_format.name), engine)
        downloads.append(
            EngineDownload(
                engine_format.name,
                engine_format.label,
                engine_format.file_name,
                None if exported is None else exported.text(),
                () if exported is None else tuple(exported.lines()),
                tuple(problems),
            )
        )
    return downloads
