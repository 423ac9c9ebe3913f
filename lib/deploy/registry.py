"""Every engine format, one module each: ``lib/deploy/format_<name>.py`` defines ``FORMAT``, an
:class:`EngineFormat`. Adding a format is adding such a module (and its test): :func:`formats`
finds it, and ``tune-spec-k export --format``, ``tune``'s printed configs and the app's
downloads list it.

:func:`export` is the one way to build a format's config: it refuses the flags the format does
not read, resolves the deployment constraints (:mod:`lib.deploy.constraints`) for the formats
that read them, builds, and checks the global K.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import pkgutil
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from lib.deploy.constraints import CaptureCeiling, EngineFacts, Fact, resolve_ceiling
from lib.deploy.decisions import Decisions, context_decisions
from lib.deploy.settings import ExportSettings
from lib.flags import flag_name
from lib.problems import Problem, Severity
from lib.settings import DeploySettings

if TYPE_CHECKING:
    from lib.context import ContextAnalysis

__all__ = [
    "MODULE_PREFIX",
    "BatchExport",
    "EngineFormat",
    "Exported",
    "GridExport",
    "ceiling_for",
    "export",
    "format_named",
    "formats",
    "global_k_problem",
    "grid_export",
    "grid_exports",
]

#: The module name prefix of a format module in this package.
MODULE_PREFIX = "format_"


class Exported(Protocol):
    """What every format's build returns: the paste-ready config, the file's text, the lines
    the CLI prints (the config first), warnings and notes, and the largest K it holds."""

    @property
    def config(self) -> Mapping[str, Any]: ...

    @property
    def warnings(self) -> tuple[str, ...]: ...

    @property
    def notes(self) -> tuple[str, ...]: ...

    @property
    def largest_k(self) -> int: ...

    def text(self) -> str: ...

    def lines(self) -> list[str]: ...


@dataclass(frozen=True)
class BatchExport:
    """A batch-only format's export: ``config`` (printed on one line), the ``file`` ``-o``
    writes (indented JSON), the lines to paste into the engine's command line, warnings and
    notes."""

    format: str
    config: Mapping[str, Any]
    file: Mapping[str, Any]
    largest_k: int
    paste: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def text(self) -> str:
        """The file ``export -o`` writes: indented JSON and a newline."""
        return json.dumps(dict(self.file), indent=2) + "\n"

    def lines(self) -> list[str]:
        return [
            json.dumps(dict(self.config)),
            *self.paste,
            *(f"note: {note}" for note in self.notes),
            *(f"warning: {warning}" for warning in self.warnings),
        ]


#: A format's build: the decisions, the settings, and the capture ceiling (None for a format
#: that does not read it) -> the export, or None and why.
Build = Callable[
    [Decisions, ExportSettings, CaptureCeiling | None], tuple[Exported | None, list[Problem]]
]
#: A format's reader of its own files: None when the data is not of this format, else the
#: decisions or None and the reason the file is not valid.
Read = Callable[[Any, str], tuple[Decisions | None, str] | None]


@dataclass(frozen=True)
class EngineFormat:
    """One engine format.

    ``name``: the ``--format`` value; ``label``: how the app names it; ``file_name``: the
    download's file name; ``position``: where it is listed; ``flags``: the :class:`ExportSettings`
    and :class:`~lib.settings.DeploySettings` fields it reads besides the format and the
    global K (any other one given is an error); ``needs_grid``: it reads a result's context
    grid; ``build``; ``read`` (None: nothing to read back) and ``reads``, what files it reads,
    for error messages."""

    name: str
    label: str
    file_name: str
    position: int
    build: Build
    flags: frozenset[str] = frozenset()
    needs_grid: bool = False
    read: Read | None = None
    reads: str = ""
    engine_flags: frozenset[str] = field(default=frozenset())

    @property
    def reads_ceiling(self) -> bool:
        """Whether the format runs on vLLM and so is checked by the capture rule."""
        return bool(self.engine_flags)


@functools.cache
def formats() -> tuple[EngineFormat, ...]:
    """Every ``format_*`` module's ``FORMAT``, by position then name.

    >>> [f.name for f in formats()][:3]
    ['trtllm', 'vllm', 'sglang']
    """
    import lib.deploy

    found = []
    for module in pkgutil.iter_modules(lib.deploy.__path__):
        if module.name.startswith(MODULE_PREFIX):
            loaded = importlib.import_module(f"lib.deploy.{module.name}")
            found.append(loaded.FORMAT)
    return tuple(sorted(found, key=lambda f: (f.position, f.name)))


def format_named(name: str) -> EngineFormat:
    """The registered format called ``name`` (KeyError when none is)."""
    for engine_format in formats():
        if engine_format.name == name:
            return engine_format
    raise KeyError(name)


def _misplaced(
    engine_format: EngineFormat, settings: ExportSettings, deploy: DeploySettings
) -> list[Problem]:
    """A flag given to a format that does not read it: an error naming the formats that do."""
    problems = []
    for values, cls in ((settings, ExportSettings), (deploy, DeploySettings)):
        for setting in dataclasses.fields(cls):
            if setting.name in ("format", "global_k"):
                continue
            if getattr(values, setting.name) == setting.default:
                continue
            if setting.name in engine_format.flags | engine_format.engine_flags:
                continue
            readers = [f.name for f in formats() if setting.name in f.flags | f.engine_flags]
            problems.append(
                Problem(
                    Severity.ERROR,
                    "flag-not-for-format",
                    f"{flag_name(cls, setting.name)} applies only to --format {', '.join(readers)}",
                    field=flag_name(ExportSettings, "format"),
                    value=engine_format.name,
                    expected=", ".join(readers),
                )
            )
    return problems


def ceiling_for(decisions: Decisions, deploy: DeploySettings, global_k: int) -> CaptureCeiling:
    """The capture ceiling a vLLM export is checked against: the flags, else what the decisions'
    source was tuned under, else vLLM's defaults (:func:`resolve_ceiling`)."""
    flags = EngineFacts(
        max_cudagraph_capture_size=(
            Fact(deploy.max_cudagraph_capture_size, "--max-cudagraph-capture-size")
            if deploy.max_cudagraph_capture_size is not None
            else None
        ),
        max_num_seqs=(
            Fact(deploy.max_num_seqs, "--max-num-seqs") if deploy.max_num_seqs is not None else None
        ),
    )
    last = max((hi for _, hi, _ in decisions.schedule.ranges), default=1)
    return resolve_ceiling(flags, decisions.engine, global_k, last)


def global_k_problem(chosen: int, largest: int, whose: str) -> Problem:
    """A global K below the largest K exported: vLLM would clamp the schedule to it, silently."""
    return Problem(
        Severity.ERROR,
        "global-k-too-small",
        f"below the {whose} largest K {largest}",
        field=flag_name(ExportSettings, "global_k"),
        value=str(chosen),
        expected=f">= {max(largest, 1)}",
    )


def export(
    decisions: Decisions,
    settings: ExportSettings,
    deploy: DeploySettings | None = None,
) -> tuple[Exported | None, list[Problem]]:
    """``settings.format``'s export of ``decisions``, or None and every problem."""
    deploy = deploy or DeploySettings()
    try:
        engine_format = format_named(settings.format)
    except KeyError:
        names = ", ".join(f.name for f in formats())
        return None, [
            Problem(
                Severity.ERROR,
                "unknown-format",
                "no such format",
                field=flag_name(ExportSettings, "format"),
                value=settings.format,
                expected=names,
            )
        ]
    problems = _misplaced(engine_format, settings, deploy)
    invalid = [Problem(Severity.ERROR, "invalid-setting", reason) for reason in deploy.invalid()]
    if problems or invalid:
        return None, problems + invalid
    ceiling = None
    if engine_format.reads_ceiling:
        ceiling = ceiling_for(decisions, deploy, decisions.engine_k(settings.global_k))
    return engine_format.build(decisions, settings, ceiling)


#: A context format's name, its export (None where it has none) and the problems.
GridExport = tuple[str, "Exported | None", list[Problem]]


#: Each analysis's :func:`grid_export` per export settings, while the analysis lives (keyed
#: by identity).
_GRID_EXPORTS: weakref.WeakKeyDictionary[
    ContextAnalysis, dict[ExportSettings, tuple[Exported | None, list[Problem]]]
] = weakref.WeakKeyDictionary()


def grid_export(
    analysis: ContextAnalysis, settings: ExportSettings
) -> tuple[Exported | None, list[Problem]]:
    """:func:`export` of the analysis's grid (:func:`lib.deploy.decisions.context_decisions`)
    under ``settings``, built once per (analysis, settings) while the analysis lives.

    The CLI's paste-ready lines, the verdict's loss check and the app's heatmap and downloads
    ask for the same exports (the PR 54801 table search alone took ~45 ms at 20,000 runs, and
    ran two to three times). Callers must not change what they get.
    """
    built = _GRID_EXPORTS.setdefault(analysis, {})
    if settings not in built:
        built[settings] = export(context_decisions(analysis), settings)
    return built[settings]


def grid_exports(analysis: ContextAnalysis) -> tuple[GridExport, ...]:
    """Every context format's :func:`grid_export` under the default export settings (the
    default context mix), in the registry's order."""
    return tuple(
        (f.name, *grid_export(analysis, ExportSettings(format=f.name)))
        for f in formats()
        if f.needs_grid
    )
