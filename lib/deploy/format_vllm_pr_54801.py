"""``vllm-pr-54801``, a context format (:mod:`lib.context_formats`, docs/context.md "Exports"):
reads a result JSON with a context grid; built by
:func:`lib.deploy.grid.build_context_format`."""

from __future__ import annotations

import functools

from lib.deploy.grid import CONTEXT_FLAGS, build_context_format
from lib.deploy.registry import EngineFormat

__all__ = ["FORMAT"]

FORMAT = EngineFormat(
    name="vllm-pr-54801",
    label="vLLM PR #54801: batch table + seq_len table",
    file_name="vllm_pr_54801_schedule.json",
    position=60,
    build=functools.partial(build_context_format, "vllm-pr-54801"),
    flags=frozenset(CONTEXT_FLAGS),
    needs_grid=True,
)
