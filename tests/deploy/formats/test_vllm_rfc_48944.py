"""lib/deploy/formats/vllm_rfc_48944.py: the 5-item entries hold the grid exactly, the rules
each fail when broken, the lookup, and the format's entry in the registry.
"""

from __future__ import annotations

from typing import Any

import pytest
from grid_builder import (
    PUBLISHED,
    PUBLISHED_BOUNDARY,
    Medians,
    grid_of,
    mix_of,
    result_json,
)

from lib.deploy.formats.vllm_rfc_48944 import (
    FORMAT,
    rfc_48944_export,
    rfc_48944_k_at,
    rfc_48944_violations,
)
from lib.deploy.grid import (
    UNBOUNDED_CONTEXT,
)
from lib.deploy.registry import format_named


def test_rfc_48944_holds_the_grid_exactly() -> None:
    grid = grid_of(result_json(PUBLISHED))
    exported, problems = rfc_48944_export(grid, mix_of(grid, None), 3)
    assert problems == []
    assert exported is not None
    top = UNBOUNDED_CONTEXT
    assert exported.config == {
        "num_speculative_tokens": 3,
        "speculative_token_schedule": [
            [1, 255, 1, PUBLISHED_BOUNDARY, 3],
            [1, 255, PUBLISHED_BOUNDARY + 1, top, 3],
            [256, 256, 1, PUBLISHED_BOUNDARY, 0],
            [256, 256, PUBLISHED_BOUNDARY + 1, top, 3],
        ],
        "ctx_agg": "mean",
    }
    assert all(loss.loss_percent == 0.0 for loss in exported.losses)
    assert exported.summary.largest_at is None


def test_rfc_48944_merges_identical_whole_rows_and_columns_without_loss() -> None:
    # Batches 1 and 8 run K=3 at both contexts (identical rows: one range 1-63); both contexts
    # of every batch agree... except at 64, where the columns differ: no column merge.
    medians: Medians = {}
    for batch in (1, 8):
        for prompt in (500, 1000, 4000):
            medians[batch, prompt] = {0: 100.0, 3: 150.0}
    for prompt, best in ((500, 0), (1000, 0), (4000, 3)):
        medians[64, prompt] = {0: 100.0, 3: 150.0} if best == 3 else {0: 150.0, 3: 100.0}
    grid = grid_of(result_json(medians, max_batch_size=128))
    exported, _ = rfc_48944_export(grid, mix_of(grid, None), 3)
    assert exported is not None
    # Rows: batch 1-63 (3, 3, 3), batch 64-128 (0, 0, 3). Columns 500 and 1000 are (3, 0) in
    # both: merged into [1, 2062] (the boundary between 1050 and 4050, as derived above).
    assert exported.config["speculative_token_schedule"] == [
        [1, 63, 1, 2062, 3],
        [1, 63, 2063, UNBOUNDED_CONTEXT, 3],
        [64, 128, 1, 2062, 0],
        [64, 128, 2063, UNBOUNDED_CONTEXT, 3],
    ]
    assert {loss.loss_percent for loss in exported.losses} == {0.0}
    assert rfc_48944_violations(exported.config["speculative_token_schedule"]) == []


def test_rfc_48944_options_legacy_name_and_ctx_agg() -> None:
    grid = grid_of(result_json(PUBLISHED))
    exported, _ = rfc_48944_export(grid, mix_of(grid, None), 3, "max", legacy_field_name=True)
    assert exported is not None
    assert list(exported.config) == [
        "num_speculative_tokens",
        "num_speculative_tokens_per_batch_size",
        "ctx_agg",
    ]
    assert exported.config["ctx_agg"] == "max"
    assert any("deprecated alias" in note for note in exported.notes)


def test_rfc_48944_lookup_takes_the_first_context_range_reaching_the_value() -> None:
    entries = [[1, 8, 1, 100, 3], [1, 8, 101, UNBOUNDED_CONTEXT, 5], [9, 16, 1, 100, 0]]
    entries.append([9, 16, 101, UNBOUNDED_CONTEXT, 1])
    assert [rfc_48944_k_at(entries, b, c) for b, c in ((8, 100), (8, 101), (9, 5), (99, 500))] == [
        3,
        5,
        0,
        1,
    ]


VALID_48944 = [[1, 8, 1, 100, 3], [1, 8, 101, 200, 5], [9, 64, 1, 100, 0], [9, 64, 101, 200, 2]]


@pytest.mark.parametrize(
    ("entries", "violation"),
    [
        ([], "the schedule must be a non-empty list of [bs_lo, bs_hi, ctx_lo, ctx_hi, K]"),
        (
            [[1, 8, 1, 100]],
            "entry 0 [1, 8, 1, 100] is not a list of 5 integers [bs_lo, bs_hi, ctx_lo, ctx_hi, K]",
        ),
        ([[1, 8, 3], [1, 8, 1, 100, 3]], "3- and 5-item entries are mixed (3 items: entry 0)"),
        (
            [[1, 8, 1, 100, 2.5]],
            "entry 0 [1, 8, 1, 100, 2.5] is not a list of 5 integers"
            " [bs_lo, bs_hi, ctx_lo, ctx_hi, K]",
        ),
        ([[0, 8, 1, 100, 3]], "entry 0 [0, 8, 1, 100, 3]: batch bounds must be >= 1"),
        ([[1, 8, 0, 100, 3]], "entry 0 [1, 8, 0, 100, 3]: context bounds must be >= 1"),
        ([[1, 8, 1, 100, -1]], "entry 0 [1, 8, 1, 100, -1]: K must be >= 0"),
        ([[9, 8, 1, 100, 3]], "entry 0 [9, 8, 1, 100, 3]: bs_lo > bs_hi"),
        ([[1, 8, 100, 1, 3]], "entry 0 [1, 8, 100, 1, 3]: ctx_lo > ctx_hi"),
        ([[2, 8, 1, 100, 3]], "the first batch range [2, 8] does not start at 1"),
        (
            [[1, 8, 1, 100, 3], [5, 9, 1, 100, 3]],
            "batch ranges [1, 8] and [5, 9] overlap",
        ),
        (
            VALID_48944[:3],
            "batch range [9, 64] lacks the context ranges [101, 200]: every batch range must"
            " carry the same context ranges",
        ),
        (
            [*VALID_48944, [1, 8, 1, 100, 4]],
            "the cell (batch [1, 8], context [1, 100]) appears 2 times",
        ),
        (
            [*VALID_48944, [1, 8, 1, 100, 4]],
            "5 entries, expected 2 batch ranges x 2 context ranges = 4",
        ),
        ([[1, 8, 2, 100, 3]], "the first context range [2, 100] does not start at 1"),
        (
            [[1, 8, 1, 100, 3], [1, 8, 150, 200, 3]],
            "context ranges [1, 100] and [150, 200] are not contiguous (expected the next to"
            " start at 101)",
        ),
        (
            [[1, 8, 1, 100, 3], [1, 8, 90, 200, 3]],
            "context ranges [1, 100] and [90, 200] are not contiguous (expected the next to"
            " start at 101)",
        ),
        ([[1, 8, 1, 2**31, 3]], f"entry 0 [1, 8, 1, {2**31}, 3]: numbers above {2**31 - 1}"),
    ],
)
def test_each_rfc_48944_rule_fails_when_broken(entries: list[Any], violation: str) -> None:
    assert violation in rfc_48944_violations(entries)


def test_the_rfc_48944_validator_accepts_a_valid_grid() -> None:
    assert rfc_48944_violations(VALID_48944) == []
    # Batch gaps are not forbidden (the rule is: from 1, no overlap).
    assert rfc_48944_violations([[1, 8, 1, 100, 3], [16, 32, 1, 100, 0]]) == []


@pytest.mark.parametrize(
    ("global_k", "ctx_agg", "violation"),
    [
        (3, "sum", "ctx_agg 'sum' is not one of ('median', 'mean', 'max')"),
        (0, "mean", "num_speculative_tokens 0 is not a whole number > 0"),
    ],
)
def test_a_config_breaking_a_rule_is_an_error_not_an_export(
    global_k: int, ctx_agg: Any, violation: str
) -> None:
    grid = grid_of(result_json(PUBLISHED))
    exported, problems = rfc_48944_export(grid, mix_of(grid, None), global_k, ctx_agg)
    assert exported is None
    assert [(p.rule, p.message) for p in problems] == [
        ("invalid-export", f"the vllm-rfc-48944 config breaks its format's rule: {violation}")
    ]


# --------------------------------------------------------------------------- vllm-pr-54801


def test_it_is_registered_as_a_context_format() -> None:
    assert format_named("vllm-rfc-48944") is FORMAT
    assert FORMAT.needs_grid and "context_mix" in FORMAT.flags


def test_only_pr_48944_reads_its_own_flags() -> None:
    assert {"ctx_agg", "legacy_field_name"} <= FORMAT.flags
