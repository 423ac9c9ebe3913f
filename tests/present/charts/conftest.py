"""Fixtures of the chart tests: the worked sweep's result (tests/chart_specs.py)."""

from __future__ import annotations

import pytest
from chart_specs import RUNS
from sweep_builder import write_grid

from lib.schedule import TuningResult, tune
from lib.settings import Settings
from lib.sweeps import load_experiment


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> TuningResult:
    root = write_grid(tmp_path_factory.mktemp("sweep"), RUNS)
    return tune(load_experiment(root), Settings())
