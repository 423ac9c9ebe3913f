"""The settings of ``tune-spec-k run`` beyond the plan's design and the tuning's: the budget and
the estimates its accounting falls back on (:class:`LoopSettings`, a field per flag)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from lib.flags import flag, flag_name

__all__ = ["LoopSettings"]


@dataclass(frozen=True)
class LoopSettings:
    """The budget (GPU hours and/or rounds) and the stated estimates."""

    budget_gpu_hours: float | None = field(
        default=None,
        metadata=flag(
            "--budget-gpu-hours",
            "stop before a round whose estimate would take the GPU time spent past this (GPU"
            " time: the runs' durations plus the server starts, the time the servers hold"
            " their GPUs; multiply by the GPUs per server for a multi-GPU server)",
            in_seed=False,
        ),
    )
    max_rounds: int | None = field(
        default=None,
        metadata=flag(
            "--max-rounds", "stop after this many rounds, round 0 included", in_seed=False
        ),
    )
    server_start_seconds: float = field(
        default=120.0,
        metadata=flag(
            "--server-start-seconds",
            "what a server start (model load, CUDA-graph capture) counts until the records'"
            " timestamps have measured one",
            in_seed=False,
        ),
    )
    run_seconds: float = field(
        default=60.0,
        metadata=flag(
            "--run-seconds",
            "what a benchmark run counts in round 0's estimate (later rounds use the"
            " durations measured)",
            in_seed=False,
        ),
    )

    @property
    def budget_seconds(self) -> float | None:
        return None if self.budget_gpu_hours is None else self.budget_gpu_hours * 3600

    def invalid(self) -> list[str]:
        """Why these settings cannot be used (empty when fine), by flag name.

        >>> LoopSettings(budget_gpu_hours=0, max_rounds=0).invalid()
        ['--budget-gpu-hours 0: expected a number > 0', '--max-rounds 0: expected >= 1']
        """
        reasons = []
        for name in ("budget_gpu_hours", "server_start_seconds", "run_seconds"):
            value = getattr(self, name)
            if value is None:
                continue
            zero_ok = name != "budget_gpu_hours"
            if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
                expected = "a number >= 0" if zero_ok else "a number > 0"
                reasons.append(f"{flag_name(LoopSettings, name)} {value:g}: expected {expected}")
        if self.max_rounds is not None and self.max_rounds < 1:
            reasons.append(
                f"{flag_name(LoopSettings, 'max_rounds')} {self.max_rounds}: expected >= 1"
            )
        return reasons
