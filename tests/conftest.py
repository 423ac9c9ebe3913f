"""Shared fixtures: the real measured sweeps, skipping clearly when they are absent."""

from __future__ import annotations

from pathlib import Path

import pytest
from paths import REAL_DATA


@pytest.fixture
def real_data() -> Path:
    """The folder of real measured sweeps; the test is skipped when it is not there."""
    if not REAL_DATA.is_dir():
        pytest.skip(
            f"real measured sweeps not found at {REAL_DATA}: they live in the shared folder"
            " beside the repository and are not part of it"
        )
    return REAL_DATA
