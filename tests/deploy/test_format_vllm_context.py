"""lib/deploy/format_vllm_context.py: registered, and built from a grid."""

from __future__ import annotations

from lib.deploy.format_vllm_context import FORMAT
from lib.deploy.registry import format_named


def test_it_is_registered_as_a_context_format() -> None:
    assert format_named("vllm-context") is FORMAT
    assert FORMAT.needs_grid and "context_mix" in FORMAT.flags


def test_it_is_checked_by_the_capture_rule() -> None:
    assert FORMAT.reads_ceiling
