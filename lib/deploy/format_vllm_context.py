"""``vllm-context``, a context format (:mod:`lib.context_formats`, docs/context.md "Exports"):
reads a result JSON with a context grid; built by
:func:`lib.deploy.grid.build_context_format`."""

from __future__ import annotations

import functools

from lib.deploy.grid import CONTEXT_FLAGS, build_context_format
from lib.deploy.registry import EngineFormat

__all__ = ["FORMAT"]

FORMAT = EngineFormat(
    name="vllm-context",
    label="vLLM today: one batch schedule for the context mix",
    file_name="vllm_context_schedule.json",
    position=40,
    build=functools.partial(build_context_format, "vllm-context"),
    flags=frozenset(CONTEXT_FLAGS),
    needs_grid=True,
    engine_flags=frozenset({"max_cudagraph_capture_size", "max_num_seqs"}),
)
