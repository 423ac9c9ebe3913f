"""The context heatmap (lib/present/charts/heatmap.py)."""

from __future__ import annotations

from typing import Any

import altair as alt

from lib.present.charts.heatmap import context_heatmap


def _grid_cell(batch: int, prompt: int, k: int | None, status: str = "resolved") -> dict[str, Any]:
    return {
        "batch_size": batch,
        "prompt_tokens": prompt,
        "context_tokens": prompt + 64,
        "selected_k": k,
        "status": status,
        "p_eps_good": None if k is None else 0.95,
    }


def test_context_heatmap_marks_unresolved_undecided_and_losing_cells() -> None:
    grid = [
        _grid_cell(1, 512, 3),
        _grid_cell(1, 8192, 5, "unresolved"),
        _grid_cell(64, 512, 0),
        _grid_cell(64, 8192, None, "undecided"),
    ]
    # Batch-only loses 0.5 % at (1, 8192), within a 1 % tolerance, and 23 % at (64, 512).
    losses = {(1, 512): 0.0, (1, 8192): 0.5, (64, 512): 23.0, (64, 8192): None}
    chart = context_heatmap(grid, {1: 3, 64: 3}, losses, 1.0)
    spec = chart.to_dict()
    alt.LayerChart.from_dict(spec)  # valid Vega-Lite
    rows = spec["data"]["values"]
    labels = {
        (r["batch_size"], r["prompt_tokens"]): r["label"] for r in rows if r["layer"] == "cell"
    }
    assert labels == {(1, 512): "3", (1, 8192): "5?", (64, 512): "0", (64, 8192): "-"}
    losing = [(r["batch_size"], r["prompt_tokens"]) for r in rows if r["layer"] == "loses"]
    assert losing == [(64, 512)]
    assert "loses more than 1%" in " ".join(spec["title"]["subtitle"])
    # The grey rect of an undecided cell is drawn only when there is one.
    assert len(spec["layer"]) == 4


def test_context_heatmap_without_losses_leaves_the_outline_layer_out() -> None:
    grid = [_grid_cell(1, 512, 3), _grid_cell(1, 8192, 3)]
    spec = context_heatmap(grid, {1: 3}, {(1, 512): 0.0, (1, 8192): 0.0}, 1.0).to_dict()
    # Cells and their labels only: an empty layer would make Vega warn about its extent.
    assert len(spec["layer"]) == 2
    assert "red outline" not in " ".join(spec["title"]["subtitle"])
    assert context_heatmap(grid, {1: 3}, {}, 1.0).png()[:4] == b"\x89PNG"
