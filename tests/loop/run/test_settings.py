"""lib/loop/run/settings.py: each setting refused past its limit and accepted at it."""

from __future__ import annotations

import math

from lib.loop.run.settings import LoopSettings


def test_limits_on_both_sides() -> None:
    assert LoopSettings().invalid() == []
    assert (
        LoopSettings(
            budget_gpu_hours=0.001, max_rounds=1, server_start_seconds=0, run_seconds=0
        ).invalid()
        == []
    )
    assert LoopSettings(budget_gpu_hours=0).invalid() == [
        "--budget-gpu-hours 0: expected a number > 0"
    ]
    assert LoopSettings(max_rounds=0).invalid() == ["--max-rounds 0: expected >= 1"]
    assert LoopSettings(server_start_seconds=-1).invalid() == [
        "--server-start-seconds -1: expected a number >= 0"
    ]
    assert LoopSettings(run_seconds=math.inf).invalid() == [
        "--run-seconds inf: expected a number >= 0"
    ]


def test_the_budget_in_seconds() -> None:
    assert LoopSettings(budget_gpu_hours=1.5).budget_seconds == 5400
    assert LoopSettings().budget_seconds is None
