"""lib/deploy/format_vllm_rfc_48944.py: registered, and built from a grid."""

from __future__ import annotations

from lib.deploy.format_vllm_rfc_48944 import FORMAT
from lib.deploy.registry import format_named


def test_it_is_registered_as_a_context_format() -> None:
    assert format_named("vllm-rfc-48944") is FORMAT
    assert FORMAT.needs_grid and "context_mix" in FORMAT.flags


def test_only_pr_48944_reads_its_own_flags() -> None:
    assert {"ctx_agg", "legacy_field_name"} <= FORMAT.flags
