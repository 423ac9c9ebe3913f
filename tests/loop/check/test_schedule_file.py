"""lib/loop/check/schedule_file.py: the context schedule a ``--schedule`` file holds (the
errors of a malformed one: tests/cli/test_check.py)."""

from __future__ import annotations

import pytest

from lib.loop.check.schedule_file import context_schedule_file


@pytest.mark.parametrize(
    "data",
    [
        {
            "format": "vllm-context",
            "speculative_config": {"num_speculative_tokens_per_batch_size": [[1, 64, 3]]},
        },
        {"num_speculative_tokens_per_batch_size": [[1, 64, 3]]},
        [[1, 64, 3]],
    ],
)
def test_a_batch_schedule_file_is_no_context_schedule(data: object) -> None:
    assert context_schedule_file(data, "s.json") == (None, [])
