"""What every engine format is built on: :class:`EngineFormat` (a format's name, label, file
name, the flags it reads, its build and its reader), the export a build returns
(:class:`Exported`, :class:`BatchExport` for the batch-only formats) and the global-K rule every
format applies. Each format is one module of :mod:`lib.deploy.formats` defining ``FORMAT``;
:mod:`lib.deploy.registry` finds them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from lib.deploy.ceiling import CaptureCeiling
from lib.deploy.decisions import Decisions
from lib.deploy.settings import ExportSettings
from lib.flags import flag_name
from lib.problems import Problem, Severity

__all__ = [
    "VLLM_ENGINE_FLAGS",
    "BatchExport",
    "Build",
    "EngineFormat",
    "Exported",
    "Read",
    "given_global_k_problem",
    "global_k_problem",
]


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


#: The deployment settings every vLLM format reads (its ``engine_flags``): the capture rule's.
VLLM_ENGINE_FLAGS = frozenset(
    {
        "max_cudagraph_capture_size",
        "max_num_seqs",
        "max_decode_cudagraph_capture_requests",
        "max_decode_cudagraph_capture_tokens",
        "vllm_version",
        "gpu_memory_gib",
    }
)


@dataclass(frozen=True)
class EngineFormat:
    """One engine format.

    ``name``: the ``--format`` value; ``label``: how the app names it; ``file_name``: the
    download's file name; ``position``: where it is listed; ``flags``: the :class:`ExportSettings`
    and :class:`~lib.settings.DeploySettings` fields it reads besides the format and the
    global K (any other one given is an error); ``needs_grid``: it reads a result's context
    grid; ``build``; ``read`` (None: nothing to read back) and ``reads``, what files it reads,
    for error messages; ``least_global_k``: the smallest global K (``--global-k``) its engine
    starts with (:func:`given_global_k_problem`)."""

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
    least_global_k: int = 1

    @property
    def reads_ceiling(self) -> bool:
        """Whether the format runs on vLLM and so is checked by the capture rule."""
        return bool(self.engine_flags)


def _global_k_error(rule: str, message: str, given: int, least: int) -> Problem:
    """An error on ``--global-k``: ``given`` where at least ``least`` was expected."""
    return Problem(
        Severity.ERROR,
        rule,
        message,
        field=flag_name(ExportSettings, "global_k"),
        value=str(given),
        expected=f">= {least}",
    )


def global_k_problem(chosen: int, largest: int, whose: str) -> Problem:
    """A global K below the largest K exported: vLLM would clamp the schedule to it, silently."""
    return _global_k_error(
        "global-k-too-small", f"below the {whose} largest K {largest}", chosen, max(largest, 1)
    )


def given_global_k_problem(given: int | None, least: int, name: str) -> Problem | None:
    """A ``--global-k`` below the smallest global K the format's engine starts with (``least``:
    1 for vLLM's ``num_speculative_tokens`` and SGLang's ``--speculative-num-steps``, 0 for
    TensorRT-LLM's ``max_draft_len``, whose own rule then says which methods take 0): an error,
    never a silent fall back to the file's K. Not given (None): no problem; ``least`` itself
    is accepted.

    >>> given_global_k_problem(0, 1, "vllm").expected, given_global_k_problem(1, 1, "vllm")
    ('>= 1', None)
    >>> given_global_k_problem(-1, 0, "trtllm").message
    "--format trtllm's engine starts with a global K of at least 0"
    """
    if given is None or given >= least:
        return None
    message = f"--format {name}'s engine starts with a global K of at least {least}"
    return _global_k_error("global-k-below-engine-minimum", message, given, least)
