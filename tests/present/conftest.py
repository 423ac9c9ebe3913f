"""Fixtures of the presentation tests."""

from __future__ import annotations

import pytest
from paths import SAMPLE_SWEEPS

from lib.loop.diff import DiffReport, DiffSettings, compare, read_side


@pytest.fixture(scope="module")
def sample_diff() -> DiffReport:
    """``tune-spec-k diff sonnet-like random-control``: schedules [[1, 63, 7], [64, 256, 0]]
    and [[1, 256, 0]] (data/sample_sweeps/README.md)."""
    settings = DiffSettings()
    a, _ = read_side(SAMPLE_SWEEPS / "sonnet-like", settings)
    b, _ = read_side(SAMPLE_SWEEPS / "random-control", settings)
    assert a is not None and b is not None
    report, _ = compare(a, b, settings)
    assert report is not None
    return report
