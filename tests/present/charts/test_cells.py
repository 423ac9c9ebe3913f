"""The rows of the small charts (lib/present/charts/cells.py): how many runs a cell shows."""

from __future__ import annotations

import itertools
from pathlib import Path

from chart_specs import spec_values
from sweep_builder import write_grid

from lib.present.charts.cells import MAX_POINTS_PER_CELL, points_per_cell
from lib.present.charts.small_multiples import objective_caption, objective_charts
from lib.schedule import tune
from lib.settings import Settings
from lib.sweeps import load_experiment


def test_large_cells_show_evenly_spaced_runs_including_the_extremes(tmp_path: Path) -> None:
    values = [1000.0 + n for n in range(201)]
    runs = {(1, 0): values, (1, 3): [500.0] * 3}
    result = tune(load_experiment(write_grid(tmp_path, runs, run_files=False)), Settings())
    most = points_per_cell(result.cells.height)
    assert most == MAX_POINTS_PER_CELL
    spec = objective_charts(result)[0].to_dict()
    shown = sorted(
        row["value"] for row in spec_values(spec) if row["layer"] == "run" and row["k"] == 0
    )
    assert len(shown) == most
    assert (shown[0], shown[-1]) == (values[0], values[-1])
    gaps = {round(b - a) for a, b in itertools.pairwise(shown)}
    assert gaps <= {3, 4}  # 200 / 59 = 3.4: evenly spaced ranks
    assert f"{most} evenly spaced runs" in objective_caption(result)


def test_points_per_cell_keeps_charts_under_altairs_row_limit() -> None:
    for cells in (1, 16, 400, 1600):
        per_cell = points_per_cell(cells)
        assert 2 <= per_cell <= MAX_POINTS_PER_CELL
        assert cells * (per_cell + 1) <= 5000
