"""lib/context_grid.py: reading a result's (batch x context) grid, each bad field named.

Every expected number is derived in a comment (tests/grid_builder.py builds the inputs).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from grid_builder import (
    PUBLISHED,
    grid_of,
    result_json,
    write,
)

from lib.context_grid import ContextPoint, context_grid_of, read_context_grid


def test_reads_the_grid_of_a_result(tmp_path: Path) -> None:
    grid, problems = read_context_grid(write(tmp_path, result_json(PUBLISHED)))
    assert problems == []
    assert grid is not None
    assert grid.anchors == (1, 256)
    assert grid.points == (ContextPoint(500, 550, 100), ContextPoint(4000, 4050, 100))
    assert [[cell.selected_k for cell in row] for row in grid.rows] == [[3, 3], [0, 3]]
    assert (grid.global_k, grid.max_batch_size, grid.direction, grid.ks) == (
        3,
        256,
        "maximize",
        (0, 3),
    )
    assert grid.rows[1][1].median(0) == 1200.0
    assert grid.to_json()["selected_k"] == [[3, 3], [0, 3]]


def test_a_rejected_candidate_has_no_expected_objective() -> None:
    grid = grid_of(result_json(PUBLISHED, rejected=((1, 500, 0),)))
    assert (grid.rows[0][0].median(0), grid.rows[0][1].median(0)) == (None, 80.0)


def test_without_global_k_the_largest_observed_k_is_used() -> None:
    assert grid_of(result_json(PUBLISHED, global_k=None)).global_k == 3


def test_a_file_without_a_context_grid_is_refused() -> None:
    grid, problems = context_grid_of({"num_speculative_tokens_per_batch_size": []}, "r.json")
    assert grid is None
    (problem,) = problems
    assert (problem.rule, problem.files, problem.field) == (
        "no-context-grid",
        ("r.json",),
        "context_grid",
    )


def test_a_missing_cell_is_named() -> None:
    data = result_json(PUBLISHED)
    data["context_grid"] = [
        c for c in data["context_grid"] if (c["batch_size"], c["prompt_tokens"]) != (256, 4000)
    ]
    grid, problems = context_grid_of(data, "r.json")
    assert grid is None
    (problem,) = problems
    assert problem.rule == "incomplete-context-grid"
    assert problem.message == "the grid has no cell for batch 256 at prompt 4000"


def test_an_undecided_cell_is_named() -> None:
    grid, problems = context_grid_of(result_json(PUBLISHED, selected={(1, 500): None}), "r.json")
    assert grid is None
    (problem,) = problems
    assert problem.rule == "undecided-context-cell"
    assert "batch 1 at prompt 500" in problem.message
    assert "batch 256" not in problem.message


def test_a_bad_field_names_the_file_the_field_the_value_and_what_was_expected() -> None:
    data = result_json(PUBLISHED)
    data["context_grid"][2]["candidates"][1]["k"] = "three"
    grid, problems = context_grid_of(data, "r.json")
    assert grid is None
    (problem,) = problems
    assert (problem.files, problem.field, problem.value, problem.expected) == (
        ("r.json",),
        "context_grid[2].candidates[1].k",
        "'three'",
        "a whole number >= 0",
    )


def _set(path: tuple[Any, ...], value: Any) -> Any:
    """An edit of a result dict: set the item at ``path`` (``DELETE`` removes it)."""

    def edit(data: dict[str, Any]) -> None:
        target: Any = data
        for key in path[:-1]:
            target = target[key]
        if value is DELETE:
            del target[path[-1]]
        else:
            target[path[-1]] = value

    return edit


DELETE = object()


@pytest.mark.parametrize(
    ("edit", "field", "value"),
    [
        (_set(("context_grid", 0, "candidates", 1), "x"), "context_grid[0].candidates[1]", "'x'"),
        (
            _set(("context_grid", 0, "candidates", 1, "k"), 0),
            "context_grid[0].candidates[1].k",
            "0",
        ),
        (
            _set(("context_grid", 0, "candidates", 0, "median_objective"), DELETE),
            "context_grid[0].candidates[0].median_objective",
            "missing",
        ),
        (
            _set(("context_grid", 0, "candidates", 0, "median_objective"), -1.0),
            "context_grid[0].candidates[0].median_objective",
            "-1.0",
        ),
        (
            _set(("context_grid", 0, "candidates", 0, "verdict"), "maybe"),
            "context_grid[0].candidates[0].verdict",
            "'maybe'",
        ),
        (_set(("context_grid", 0, "prompt_tokens"), 777), "context_grid[0].prompt_tokens", "777"),
        (_set(("context_grid", 3), {"batch_size": 1}), "context_grid[3].prompt_tokens", "missing"),
        (
            _set(("context_axis", "points", 0, "prompt_tokens"), 0),
            "context_axis.points[0].prompt_tokens",
            "0",
        ),
        (_set(("context_axis", "points", 0, "prompt_tokens"), 5000), "context_axis.points", None),
        (_set(("context_axis", "tolerance"), -0.1), "context_axis.tolerance", "-0.1"),
        (_set(("context_axis", "deployable"), "yes"), "context_axis.deployable", "'yes'"),
        (_set(("selection", "objective_direction"), "up"), "selection.objective_direction", "'up'"),
        (_set(("selection", "max_batch_size"), 64), "selection.max_batch_size", "64"),
    ],
)
def test_each_bad_field_of_the_grid_is_named(edit: Any, field: str, value: str | None) -> None:
    data = result_json(PUBLISHED)
    edit(data)
    grid, problems = context_grid_of(data, "r.json")
    assert grid is None
    assert field in [problem.field for problem in problems]
    problem = next(problem for problem in problems if problem.field == field)
    assert problem.files == ("r.json",)
    assert problem.expected
    if value is not None:
        assert problem.value == value


def test_a_repeated_cell_is_refused() -> None:
    data = result_json(PUBLISHED)
    data["context_grid"].append(copy.deepcopy(data["context_grid"][0]))
    grid, problems = context_grid_of(data, "r.json")
    assert grid is None
    assert [p.message for p in problems] == [
        "context_grid[4] repeats the cell of batch 1 at prompt 500"
    ]


def test_a_selected_k_that_was_rejected_is_refused() -> None:
    grid, problems = context_grid_of(result_json(PUBLISHED, rejected=((1, 500, 3),)), "r.json")
    assert grid is None
    assert [p.field for p in problems] == ["context_grid[0].selected_k"]
