"""``vllm-rfc-48944``, a context format (:mod:`lib.context_formats`, docs/context.md
"Exports"): reads a result JSON with a context grid; built by
:func:`lib.deploy.grid.build_context_format`."""

from __future__ import annotations

import functools

from lib.deploy.grid import CONTEXT_FLAGS, build_context_format
from lib.deploy.registry import EngineFormat

__all__ = ["FORMAT"]

FORMAT = EngineFormat(
    name="vllm-rfc-48944",
    label="vLLM RFC #48627 / PR #48944: (batch x context) 5-tuples",
    file_name="vllm_rfc_48944_schedule.json",
    position=50,
    build=functools.partial(build_context_format, "vllm-rfc-48944"),
    flags=frozenset(CONTEXT_FLAGS | {"ctx_agg", "legacy_field_name"}),
    needs_grid=True,
)
