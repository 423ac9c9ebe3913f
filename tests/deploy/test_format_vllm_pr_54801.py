"""lib/deploy/format_vllm_pr_54801.py: registered, and built from a grid."""

from __future__ import annotations

from lib.deploy.format_vllm_pr_54801 import FORMAT
from lib.deploy.registry import format_named


def test_it_is_registered_as_a_context_format() -> None:
    assert format_named("vllm-pr-54801") is FORMAT
    assert FORMAT.needs_grid and "context_mix" in FORMAT.flags
