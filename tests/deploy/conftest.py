"""Fixtures of the deployment layer's tests."""

from __future__ import annotations

import pytest
from paths import SAMPLE_SWEEPS

from lib.context import ContextAnalysis, analyse_contexts
from lib.context_axis import find_context_axis
from lib.settings import ContextSettings, Settings
from lib.sweeps import load_experiment


@pytest.fixture(scope="session")
def long_context() -> ContextAnalysis:
    """The long-context sample's grid, tuned with the defaults (read it, do not change it:
    :func:`lib.deploy.result_file.result_document` gives a copy to change)."""
    sweep = load_experiment(SAMPLE_SWEEPS / "long-context")
    axis, _ = find_context_axis(sweep, ContextSettings())
    assert axis is not None
    return analyse_contexts(sweep, axis, Settings())
