"""Checking a synthetic validation sweep, for the tests of lib/loop/check/: the check with
independent runs, and the context schedules served in the sweeps of
:func:`sweep_builder.write_context_validation`."""

from __future__ import annotations

from pathlib import Path

from lib.deploy.grid import UNBOUNDED_CONTEXT
from lib.loop.check.arms import UnderTest
from lib.loop.check.judge import CheckSettings
from lib.loop.check.report import CheckReport, check_deployment
from lib.settings import Options

#: Independent runs (no server offsets): the model these expectations were derived with.
INDEPENDENT = Options(server_cv=0.0)


def check(root: Path, settings: CheckSettings | None = None, **schedule: UnderTest) -> CheckReport:
    return check_deployment(
        root, settings or CheckSettings(options=INDEPENDENT), schedule.get("schedule")
    )


TOP = UNBOUNDED_CONTEXT
#: PR #48944 entries running the right K of CONTEXT_ARMS everywhere: K=3, except 0 at batch
#: 64-256 above context 2180 (8192 tokens: context 8256).
RFC_GOOD = [
    [1, 63, 1, 2180, 3],
    [1, 63, 2181, TOP, 3],
    [64, 256, 1, 2180, 3],
    [64, 256, 2181, TOP, 0],
]
#: The two contexts swapped at batch 64: K=0 at 512 tokens, K=3 at 8192 (both wrong).
RFC_SWAPPED = [
    [1, 63, 1, 2180, 3],
    [1, 63, 2181, TOP, 3],
    [64, 256, 1, 2180, 0],
    [64, 256, 2181, TOP, 3],
]
#: The K each config runs per (anchor, prompt), read off its entries by hand.
RFC_GOOD_KS = {(1, 512): 3, (1, 8192): 3, (64, 512): 3, (64, 8192): 0}
RFC_SWAPPED_KS = {(1, 512): 3, (1, 8192): 3, (64, 512): 0, (64, 8192): 3}


def rfc(entries: list[list[int]], global_k: int = 3) -> dict[str, object]:
    return {
        "method": "eagle3",
        "model": "drafter",
        "num_speculative_tokens": global_k,
        "speculative_token_schedule": entries,
        "ctx_agg": "mean",
    }


def pr(batch: list[list[int]], lengths: list[list[int]]) -> dict[str, object]:
    return {
        "method": "eagle3",
        "model": "drafter",
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": batch,
        "num_speculative_tokens_per_seq_len": lengths,
    }


def by_cell(report: CheckReport, column: str) -> dict[tuple[int, int], object]:
    """(anchor, prompt tokens) -> the verdict row's ``column``, over every context point."""
    return {
        (row["anchor"], context.prompt_tokens): row[column]
        for context in report.contexts
        for row in context.verdicts.to_dicts()
    }
