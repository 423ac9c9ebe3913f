"""lib/deploy/deployed.py: a deployed context schedule read back, each broken rule named, and
the K it runs at every cell is the K the export's loss table says.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from grid_builder import (
    PUBLISHED,
    context_export,
    grid_of,
    result_json,
)

from lib.deploy.deployed import context_schedule_key, context_schedule_of
from lib.deploy.formats.vllm_pr_54801 import (
    Pr54801Schedule,
    pr_54801_k_at,
)
from lib.deploy.formats.vllm_rfc_48944 import (
    Rfc48944Schedule,
)
from lib.deploy.grid import (
    UNBOUNDED_CONTEXT,
)
from lib.schedule import Schedule

#: A PR #48944 schedule with a context edge at 576 (a decode-time context of 512 + 128 / 2):
#: batch 1-63 K=3 up to 576 and K=5 from 577, batch 64-256 K=0 up to 576 and K=2 from 577.
EDGE_ENTRIES = [
    [1, 63, 1, 576, 3],
    [1, 63, 577, UNBOUNDED_CONTEXT, 5],
    [64, 256, 1, 576, 0],
    [64, 256, 577, UNBOUNDED_CONTEXT, 2],
]


@pytest.mark.parametrize(
    ("batch", "context", "k"),
    [
        (1, 576, 3),  # the range's hi itself: still the range (the first whose hi >= 576)
        (1, 577, 5),  # one past it: the next range
        (63, 576, 3),  # the batch range's hi
        (64, 576, 0),  # the next batch range's lo
        (64, 577, 2),
        (300, 1, 0),  # past the last batch range: its row
        (300, UNBOUNDED_CONTEXT, 2),
    ],
)
def test_a_deployed_rfc_48944_schedule_runs_its_cell_on_both_sides_of_each_edge(
    batch: int, context: int, k: int
) -> None:
    schedule, violations = context_schedule_of({"speculative_token_schedule": EDGE_ENTRIES})
    assert violations == []
    assert isinstance(schedule, Rfc48944Schedule)
    assert schedule.k_at(batch, context) == k


def test_a_deployed_rfc_48944_schedule_is_the_same_in_any_order_and_under_either_name() -> None:
    first, _ = context_schedule_of({"speculative_token_schedule": EDGE_ENTRIES})
    legacy, _ = context_schedule_of(
        {"num_speculative_tokens_per_batch_size": json.dumps(EDGE_ENTRIES[::-1])}
    )
    assert legacy == first
    assert legacy is not None and legacy.key == "num_speculative_tokens_per_batch_size"
    assert context_schedule_key({"num_speculative_tokens_per_batch_size": [[1, 8, 3]]}) is None
    # The largest K per batch range over every context, for the capture rule: 5 and 2.
    assert first is not None and first.batch_bound() == Schedule(((1, 63, 5), (64, 256, 2)))
    assert first.ks == {0, 2, 3, 5}


@pytest.mark.parametrize(
    ("batch", "context", "k"),
    [
        (1, 576, 3),  # min(batch 3, length 4)
        (1, 577, 1),  # min(3, 1): one past the length table's edge
        (64, 576, 4),  # min(5, 4)
        (63, 577, 1),
        (64, 577, 1),
    ],
)
def test_a_deployed_pr_54801_schedule_runs_the_smaller_k_of_its_two_tables(
    batch: int, context: int, k: int
) -> None:
    config = {
        "num_speculative_tokens_per_batch_size": [[64, 256, 5], [1, 63, 3]],
        "num_speculative_tokens_per_seq_len": [[577, UNBOUNDED_CONTEXT, 1], [1, 576, 4]],
    }
    schedule, violations = context_schedule_of(config)
    assert violations == []
    assert isinstance(schedule, Pr54801Schedule)
    assert schedule.k_at(batch, context) == k
    assert pr_54801_k_at(schedule.batch_table, schedule.length_table, batch, context) == k
    assert schedule.batch_bound() == Schedule(((1, 63, 3), (64, 256, 5)))


@pytest.mark.parametrize(
    ("config", "key", "text"),
    [
        (
            {"speculative_token_schedule": [[1, 8, 0, 100, 3]]},
            "speculative_token_schedule",
            "context bounds must be >= 1",
        ),
        (
            {"speculative_token_schedule": [[1, 8, 1, 100, 3], [1, 8, 200, 300, 0]]},
            "speculative_token_schedule",
            "not contiguous",
        ),
        (
            {
                "speculative_token_schedule": EDGE_ENTRIES,
                "num_speculative_tokens_per_batch_size": EDGE_ENTRIES,
            },
            "speculative_token_schedule",
            "under one of its names",
        ),
        (
            {"num_speculative_tokens_per_seq_len": [[1, 100, 3]]},
            "num_speculative_tokens_per_batch_size",
            "missing",
        ),
        (
            {
                "num_speculative_tokens_per_batch_size": [[1, 8, 3]],
                "num_speculative_tokens_per_seq_len": [[2, 100, 3]],
            },
            "num_speculative_tokens_per_seq_len",
            "does not start at 1",
        ),
        (
            {
                "num_speculative_tokens_per_batch_size": [[2, 8, 3]],
                "num_speculative_tokens_per_seq_len": [[1, 100, 3]],
            },
            "num_speculative_tokens_per_batch_size",
            "",
        ),
        (
            {
                "speculative_token_schedule": EDGE_ENTRIES,
                "num_speculative_tokens_per_seq_len": [[1, 100, 3]],
            },
            "num_speculative_tokens_per_seq_len",
            "one context format at a time",
        ),
    ],
)
def test_a_broken_deployed_context_schedule_names_its_key_and_rule(
    config: dict[str, Any], key: str, text: str
) -> None:
    schedule, violations = context_schedule_of(config)
    assert schedule is None
    assert violations and all(found == key for found, _ in violations)
    assert any(text in rule for _, rule in violations)


def test_a_batch_schedule_is_no_context_schedule() -> None:
    assert context_schedule_of({"num_speculative_tokens_per_batch_size": [[1, 8, 3]]}) == (
        None,
        [],
    )
    assert context_schedule_of({"num_speculative_tokens": 3}) == (None, [])


@pytest.mark.parametrize("format", ["vllm-rfc-48944", "vllm-pr-54801"])
def test_a_deployed_export_runs_the_k_its_loss_table_says_at_every_cell(format: Any) -> None:
    """What check looks up in a deployed config is what the export's loss table says the config
    runs: the same lookup on the config as written, read back from its JSON."""
    grid = grid_of(result_json(PUBLISHED))
    exported, problems = context_export(grid, format, None, 3)
    assert problems == [] and exported is not None
    schedule, violations = context_schedule_of(json.loads(json.dumps(dict(exported.config))))
    assert violations == [] and schedule is not None and schedule.format == format
    for loss in exported.losses:
        assert schedule.k_at(loss.batch_size, loss.context_tokens) == loss.exported_k
