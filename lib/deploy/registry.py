"""Every engine format, found in one place: each module of :mod:`lib.deploy.formats` defines
``FORMAT``, an :class:`~lib.deploy.engine_format.EngineFormat`. Adding a format is adding such
a module (and its test): :func:`formats` finds it, and ``tune-spec-k export --format``,
``tune``'s printed configs, the file readers and the app's downloads list it.

- :func:`export` is the one way to build a format's config: it refuses the flags the format
  does not read, gives each engine its schedule (:func:`engine_decisions`: vLLM's capture cap
  is vLLM's), resolves the deployment constraints (:mod:`lib.deploy.constraints`) for the
  formats that read them, builds, and checks the global K;
- :func:`read_decisions` reads any file holding a schedule, each format's reader tried in turn;
- :func:`grid_export` / :func:`grid_exports`: a context analysis's exports, built once.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lib.deploy.formats
from lib.deploy.ceiling import (
    DECODE_REQUESTS_FLAG,
    DECODE_TOKENS_FLAG,
    CaptureCeiling,
    release_refusals,
    resolve_ceiling,
)
from lib.deploy.decisions import Decisions, context_decisions, result_decisions
from lib.deploy.engine import EngineFacts, Fact, GpuMemory, TextFact
from lib.deploy.engine_format import BatchExport, EngineFormat, Exported, given_global_k_problem
from lib.deploy.result_file import is_result, result_file_of
from lib.deploy.settings import ExportSettings
from lib.files import read_json
from lib.flags import flag_name
from lib.keys import MISSING
from lib.problems import Problem, Severity
from lib.schedule import Schedule
from lib.settings import DeploySettings

if TYPE_CHECKING:
    from lib.context import ContextAnalysis

__all__ = [
    "GridExport",
    "ceiling_for",
    "decisions_from_json",
    "engine_decisions",
    "export",
    "format_named",
    "format_names",
    "formats",
    "gpu_flags",
    "grid_decisions",
    "grid_export",
    "grid_exports",
    "read_decisions",
]


@functools.cache
def formats() -> tuple[EngineFormat, ...]:
    """Every module of :mod:`lib.deploy.formats`'s ``FORMAT``, by position then name.

    The modules are found by listing the package (``pkgutil``), so a new format needs no line
    here; they are imported on the first call, not when this module is: ``tune-spec-k DIR``
    on a batch sweep never loads the context formats' table searches.

    >>> [f.name for f in formats()][:3]
    ['trtllm', 'vllm', 'sglang']
    """
    found = []
    for module in pkgutil.iter_modules(lib.deploy.formats.__path__):
        loaded = importlib.import_module(f"{lib.deploy.formats.__name__}.{module.name}")
        found.append(loaded.FORMAT)
    return tuple(sorted(found, key=lambda f: (f.position, f.name)))


def format_names() -> tuple[str, ...]:
    """The registered formats' names, in listing order (``--format``'s choices)."""
    return tuple(engine_format.name for engine_format in formats())


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


def gpu_flags(deploy: DeploySettings) -> dict[str, Any]:
    """The GPU the flags state (``--gpu-memory-gib``, ``--tensor-parallel-size``), as
    :class:`~lib.deploy.engine.EngineFacts` fields: what vLLM's and SGLang's defaults read."""
    found: dict[str, Any] = {}
    if deploy.gpu_memory_gib is not None:
        found["gpu_memory_gib"] = GpuMemory(
            deploy.gpu_memory_gib, flag_name(DeploySettings, "gpu_memory_gib")
        )
    if deploy.tensor_parallel_size is not None:
        found["tensor_parallel_size"] = Fact(
            deploy.tensor_parallel_size, flag_name(DeploySettings, "tensor_parallel_size")
        )
    return found


def ceiling_for(decisions: Decisions, deploy: DeploySettings, global_k: int) -> CaptureCeiling:
    """The capture ceiling a vLLM export is checked against: the flags, else what the decisions'
    source was tuned under, else vLLM's defaults (:func:`resolve_ceiling`). 0.34's explicit
    decode settings given as flags win over a saved server config's."""
    flags = EngineFacts(
        max_cudagraph_capture_size=(
            Fact(deploy.max_cudagraph_capture_size, "--max-cudagraph-capture-size")
            if deploy.max_cudagraph_capture_size is not None
            else None
        ),
        max_num_seqs=(
            Fact(deploy.max_num_seqs, "--max-num-seqs") if deploy.max_num_seqs is not None else None
        ),
        vllm_version=(
            TextFact(deploy.vllm_version, "--vllm-version")
            if deploy.vllm_version is not None
            else None
        ),
        decode_requests=(
            Fact(deploy.max_decode_cudagraph_capture_requests, DECODE_REQUESTS_FLAG)
            if deploy.max_decode_cudagraph_capture_requests is not None
            else None
        ),
        decode_tokens=(
            Fact(deploy.max_decode_cudagraph_capture_tokens, DECODE_TOKENS_FLAG)
            if deploy.max_decode_cudagraph_capture_tokens is not None
            else None
        ),
        **gpu_flags(deploy),
    )
    last = max((hi for _, hi, _ in decisions.schedule.ranges), default=1)
    return resolve_ceiling(flags, decisions.engine, global_k, last)


def engine_decisions(
    decisions: Decisions, engine_format: EngineFormat
) -> tuple[Decisions, str | None]:
    """The decisions ``engine_format`` builds from, and a note saying which schedule it got.

    Rule: the capture cap is vLLM's. vLLM keys its decode CUDA graphs by tokens per step
    (batch x (1 + K)), so a tuning capped its schedule to vLLM's ceiling C where C was known
    (:attr:`Decisions.vllm_cap`); vLLM's formats (those that read the ceiling) build from that
    capped schedule. An engine that keys its graphs by batch size (TensorRT-LLM, SGLang) has
    no such ceiling: it builds from the schedule as tuned, and the note says so, naming C.
    Decisions with nothing capped go to every format as they are, without a note.
    """
    cap = decisions.vllm_cap
    if cap is None or engine_format.reads_ceiling:
        return decisions, None
    note = (
        f"the schedule as tuned, {cap.tuned.json_text()}: the result's is capped to vLLM's"
        f" CUDA-graph capture ceiling C={cap.ceiling} tokens per decode step (from"
        f" {cap.source}), a rule of vLLM's alone (it keys decode graphs by batch x (1 + K));"
        f" --format {engine_format.name}'s engine keys its graphs by batch size, so the cap"
        " does not apply"
    )
    return dataclasses.replace(decisions, schedule=cap.tuned, vllm_cap=None), note


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
    decisions, note = engine_decisions(decisions, engine_format)
    problems = _misplaced(engine_format, settings, deploy)
    too_small = given_global_k_problem(
        settings.global_k, engine_format.least_global_k, engine_format.name
    )
    problems += [too_small] if too_small is not None else []
    invalid = [
        Problem(Severity.ERROR, "invalid-setting", reason)
        for reason in (*deploy.invalid(), *release_refusals(deploy.vllm_version))
    ]
    if problems or invalid:
        return None, problems + invalid
    # The GPU the flags state wins over what the decisions' source recorded of it.
    decisions = dataclasses.replace(
        decisions, engine=dataclasses.replace(decisions.engine, **gpu_flags(deploy))
    )
    ceiling = None
    if engine_format.reads_ceiling:
        ceiling = ceiling_for(decisions, deploy, decisions.engine_k(settings.global_k))
    exported, problems = engine_format.build(decisions, settings, ceiling)
    if exported is not None and note is not None:
        # Another engine than vLLM's: a batch-only format (the context formats are vLLM's).
        assert isinstance(exported, BatchExport), engine_format.name
        exported = dataclasses.replace(exported, notes=(note, *exported.notes))
    return exported, problems


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


# --------------------------------------------------------------------------- reading any file


def decisions_from_json(data: Any, source: str) -> tuple[Decisions | None, list[Problem]]:
    """The decisions in a parsed file: each registered format's reader is tried in listing
    order; the first that recognises the file reads it (its own errors are the file's); a file
    none recognises is a ``no-schedule`` error listing what was expected."""
    for engine_format in formats():
        if engine_format.read is None:
            continue
        read = engine_format.read(data, source)
        if read is None:
            continue
        decisions, reason = read
        if decisions is None:
            return None, [Problem(Severity.ERROR, "no-schedule", reason, files=(source,))]
        return decisions, []
    expected = ", ".join(f.reads for f in formats() if f.read is not None)
    keys = sorted(data)[:8] if isinstance(data, dict) else None
    found = f"; keys: {keys}" if keys is not None else ""
    message = (
        f"no schedule found (expected {expected}){found}"
        if isinstance(data, dict | list)
        else "expected a JSON object or a [[lo, hi, K], ...] list"
    )
    return None, [Problem(Severity.ERROR, "no-schedule", message, files=(source,))]


def grid_decisions(data: Any, source: str) -> tuple[Decisions | None, list[Problem]]:
    """The decisions a context format reads: a result JSON with or without a batch schedule
    (the grid is what counts; :func:`lib.deploy.grid.build_context_format` says when there is
    none), else whatever file :func:`decisions_from_json` recognises (it has no grid)."""
    if not isinstance(data, dict):
        message = "expected a JSON object (a result JSON with a context_grid)"
        return None, [Problem(Severity.ERROR, "no-schedule", message, files=(source,))]
    if is_result(data):
        result, problems = result_file_of(data, source)
        return (result_decisions(result), []) if result is not None else (None, problems)
    found, _ = decisions_from_json(data, source)
    kind = found.kind if found is not None else "JSON object without a schedule"
    return Decisions(Schedule(()), None, kind, source), []


def read_decisions(
    path: str | Path, for_grid: bool = False
) -> tuple[Decisions | None, list[Problem]]:
    """:func:`decisions_from_json` (:func:`grid_decisions` with ``for_grid``) of a file, or
    None and why it could not be read."""
    data, problems = read_json(path)
    if data is MISSING:
        return None, problems
    return (grid_decisions if for_grid else decisions_from_json)(data, str(path))
