"""lib/context_formats.py: reading a result's (batch x context) grid, the losses against it, the
three context formats with their validators, and ``tune-spec-k export`` on them (the CLI and
the app's function write the same bytes).

The inputs are result dicts built by hand after the grid contract (``context_axis`` and
``context_grid``, docs/context.md "Exports"); every expected number is derived in a comment.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest

from lib.cli.common import EXIT_BAD_INPUT, EXIT_OK
from lib.cli.main import main
from lib.context_formats import (
    CONTEXT_FORMATS,
    PR_54801_COMBINATION,
    UNBOUNDED_CONTEXT,
    ContextGrid,
    ContextMix,
    ContextPoint,
    Pr54801Schedule,
    Rfc48944Schedule,
    context_boundary,
    context_export,
    context_grid_of,
    context_mix,
    context_ranges,
    context_schedule_key,
    context_schedule_of,
    loss_percent,
    mix_choice,
    pr_54801_export,
    pr_54801_k_at,
    pr_54801_violations,
    read_context_grid,
    rfc_48944_export,
    rfc_48944_k_at,
    rfc_48944_violations,
    seq_len_violations,
    table_pair_search,
    vllm_context_export,
    vllm_context_violations,
)
from lib.deploy.registry import formats
from lib.deploy.settings import ExportSettings
from lib.loop.export import export_text
from lib.schedule import Schedule

Medians = dict[tuple[int, int], dict[int, float]]

#: The published shape (PR #48944's 2-D finding), with round numbers: at batch 256 speculation
#: loses at short context (K*=0) and wins at long context (K*=3); at batch 1 K*=3 everywhere.
#: Prompts 500 and 4000 with 100 output tokens: decode-time contexts 550 and 4050.
PUBLISHED: Medians = {
    (1, 500): {0: 100.0, 3: 150.0},
    (1, 4000): {0: 80.0, 3: 120.0},
    (256, 500): {0: 2000.0, 3: 1600.0},
    (256, 4000): {0: 1200.0, 3: 1600.0},
}
#: isqrt(550 * 4050) = isqrt(2227500) = 1492 (1492^2 = 2226064 <= 2227500 < 1493^2 = 2229049).
PUBLISHED_BOUNDARY = 1492


def result_json(
    medians: Medians,
    *,
    output_tokens: int = 100,
    direction: str = "maximize",
    selected: dict[tuple[int, int], int | None] | None = None,
    rejected: tuple[tuple[int, int, int], ...] = (),
    deployable: bool = True,
    reason: str | None = None,
    global_k: int | None = 3,
    max_batch_size: int | None = 256,
) -> dict[str, Any]:
    """A result JSON after the grid contract. The selected K of a cell is the K of the best
    median unless ``selected`` says otherwise; ``rejected`` lists (batch, prompt, K)
    candidates with verdict "rejected"."""
    prompts = sorted({prompt for _, prompt in medians})
    best = min if direction == "minimize" else max
    cells = []
    for (batch, prompt), by_k in sorted(medians.items()):
        chosen = (selected or {}).get((batch, prompt), best(by_k, key=lambda k: by_k[k]))
        cells.append(
            {
                "batch_size": batch,
                "prompt_tokens": prompt,
                "context_tokens": prompt + output_tokens // 2,
                "selected_k": chosen,
                "selected_median_objective": None if chosen is None else by_k[chosen],
                "status": "undecided" if chosen is None else "resolved",
                "p_eps_good": None,
                "candidates": [
                    {
                        "k": k,
                        "num_runs": 3,
                        "median_objective": median,
                        "mad_objective": 1.0,
                        "conservative_objective": median - 1.5,
                        "objective_relative_mad": 0.01,
                        "verdict": "rejected" if (batch, prompt, k) in rejected else "kept",
                        "reason": "too noisy" if (batch, prompt, k) in rejected else None,
                    }
                    for k, median in sorted(by_k.items())
                ],
            }
        )
    return {
        "num_speculative_tokens_per_batch_size": [[1, 256, 3]],
        "configured_global_num_speculative_tokens": global_k,
        "max_num_speculative_tokens_observed": 3,
        "selection": {
            "objective_metric": "output_throughput",
            "objective_direction": direction,
            "max_batch_size": max_batch_size,
        },
        "context_axis": {
            "field": "random_input_len",
            "tolerance": 0.1,
            "points": [
                {
                    "prompt_tokens": prompt,
                    "output_tokens": output_tokens,
                    "context_tokens": prompt + output_tokens // 2,
                    "num_runs": 6,
                }
                for prompt in prompts
            ],
            "deployable": deployable,
            "not_deployable_reason": reason,
        },
        "context_grid": cells,
    }


def grid_of(data: dict[str, Any]) -> ContextGrid:
    grid, problems = context_grid_of(data, "result.json")
    assert problems == []
    assert grid is not None
    return grid


def mix_of(grid: ContextGrid, text: str | None) -> ContextMix:
    mix, problems = context_mix(text, grid, field="--context-mix", source="result.json")
    assert problems == []
    assert mix is not None
    return mix


def write(tmp_path: Path, data: object, name: str = "result.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


# --------------------------------------------------------------------------- reading the grid


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


@pytest.mark.parametrize("format", CONTEXT_FORMATS)
def test_a_grid_that_is_not_deployable_is_refused_in_every_format(format: Any) -> None:
    reason = "the batch anchors start at 8, not 1"
    data = result_json(PUBLISHED, deployable=False, reason=reason)
    grid = grid_of(data)
    exported, problems = context_export(grid, format, mix_of(grid, None), 3, source="r.json")
    assert exported is None
    (problem,) = problems
    assert problem.rule == "not-deployable"
    assert reason in problem.message
    assert problem.files == ("r.json",)


# --------------------------------------------------------------------------- losses and mixes


def test_loss_percent_in_both_directions() -> None:
    # Maximised: 1 - 1200/1600 = 0.25; minimised: 30/24 - 1 = 0.25; a better median: -25 %.
    assert loss_percent(1200.0, 1600.0, "maximize") == 25.0
    assert loss_percent(30.0, 24.0, "minimize") == 25.0
    assert loss_percent(2000.0, 1600.0, "maximize") == -25.0


def test_the_default_mix_is_the_shortest_context_with_weight_1() -> None:
    grid = grid_of(result_json(PUBLISHED))
    mix = mix_of(grid, None)
    assert (mix.weights, mix.text()) == (((500, 1.0),), "500:1")
    assert "default" in mix.rule


def test_a_mix_is_matched_within_the_tolerance_and_normalised() -> None:
    grid = grid_of(result_json(PUBLISHED))
    # 520 is 4 % from 500 and 4200 is 5 % from 4000, both within the axis tolerance of 10 %;
    # weights 7 and 3 sum to 10: 0.7 and 0.3.
    mix = mix_of(grid, "520:7,4200:3")
    assert mix.weights == ((500, 0.7), (4000, 0.3))
    assert "normalised to sum 1" in mix.rule


@pytest.mark.parametrize("huge", ["1e308", "1.7976931348623157e308"])
def test_weights_whose_sum_overflows_are_the_same_mix(huge: str) -> None:
    # 1e308 + 1e308 is inf in floats: divided by it, every weight was 0 (and every export K=0
    # with "mean loss 0.0%"). Scaled by the largest first, it is 1:1's mix, and its schedule.
    grid = grid_of(result_json(PUBLISHED))
    assert mix_of(grid, f"500:{huge},4000:{huge}").weights == mix_of(grid, "500:1,4000:1").weights
    for format in CONTEXT_FORMATS:
        exported = [
            context_export(grid, format, mix_of(grid, text), 3)[0]
            for text in (f"500:{huge},4000:{huge}", "500:1,4000:1")
        ]
        assert exported[0] is not None and exported[1] is not None
        assert exported[0].config == exported[1].config


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # 560 is 12 % from 500: outside the tolerance.
        ("560:1", "prompt length 560 matches no measured context point"),
        ("500:0", "weight '0' of 500 is not > 0"),
        ("500:-1", "weight '-1' of 500 is not > 0"),
        ("500:nan", "weight 'nan' of 500 is not > 0"),
        ("500", "'500' is not PROMPT:WEIGHT"),
        ("x:1", "prompt length 'x' is not a whole number of tokens"),
        # "²" is a digit to str.isdigit() but not to int(): a refusal, not a ValueError.
        ("500²:1", "prompt length '500²' is not a whole number of tokens"),
        # The shared range of prompt lengths (lib.settings.PROMPT_TOKENS_RANGE), both ends.
        ("0:1", "prompt length 0 is below 1 token"),
        (
            "1073741825:1",
            "prompt length 1073741825 is above the largest prompt length 1073741824 tokens",
        ),
        ("1073741824:1", "prompt length 1073741824 matches no measured context point"),
        ("500:1,510:1", "prompt lengths 500 and 510 both match the context point 500"),
    ],
)
def test_a_bad_mix_names_the_value_and_the_measured_points(text: str, message: str) -> None:
    grid = grid_of(result_json(PUBLISHED))
    mix, problems = context_mix(text, grid, field="--context-mix", source="r.json")
    assert mix is None
    (problem,) = problems
    assert problem.message == message
    assert (problem.field, problem.value) == ("--context-mix", repr(text))
    assert problem.expected is not None and "500, 4000" in problem.expected


@pytest.mark.parametrize(
    ("text", "expected_k"),
    [
        # Batch 256: K=0 -> 0.7 * 2000 + 0.3 * 1200 = 1760; K=3 -> 0.7 * 1600 + 0.3 * 1600 = 1600.
        ("500:7,4000:3", 0),
        # K=0 -> 0.3 * 2000 + 0.7 * 1200 = 1440; K=3 -> 1600.
        ("500:3,4000:7", 3),
        # K=0 -> 0.5 * 2000 + 0.5 * 1200 = 1600 = K=3's 1600: a tie, the smallest K.
        ("500:1,4000:1", 0),
    ],
)
def test_the_mix_collapse_takes_the_best_mix_weighted_expected_objective(
    text: str, expected_k: int
) -> None:
    grid = grid_of(result_json(PUBLISHED))
    assert mix_choice(grid, 1, mix_of(grid, text)) == expected_k
    # Batch 1 wants K=3 at both contexts: any mix keeps it.
    assert mix_choice(grid, 0, mix_of(grid, text)) == 3


def test_the_mix_collapse_minimises_a_minimised_objective() -> None:
    # TPOT in ms: at batch 8, K=3 is better short (20 < 25), K=0 long (40 < 50).
    tpot = {(8, 500): {0: 25.0, 3: 20.0}, (8, 4000): {0: 40.0, 3: 50.0}}
    grid = grid_of(result_json(tpot, direction="minimize", max_batch_size=8))
    # Mix 0.5/0.5: K=0 -> 32.5, K=3 -> 35.0: K=0. Mix 0.9/0.1: K=0 -> 26.5, K=3 -> 23.0: K=3.
    assert mix_choice(grid, 0, mix_of(grid, "500:1,4000:1")) == 0
    assert mix_choice(grid, 0, mix_of(grid, "500:9,4000:1")) == 3


def test_a_k_rejected_at_one_context_is_not_a_batch_only_choice() -> None:
    grid = grid_of(result_json(PUBLISHED, rejected=((256, 4000, 0),), selected={}))
    # Batch 256 may run K=0 only where it was kept: K=3 is the only K kept at both contexts.
    assert mix_choice(grid, 1, mix_of(grid, None)) == 3


# --------------------------------------------------------------------------- vllm-context


def test_vllm_context_exports_the_mix_schedule_and_one_per_context() -> None:
    grid = grid_of(result_json(PUBLISHED))
    exported, problems = vllm_context_export(grid, mix_of(grid, "500:7,4000:3"), 3)
    assert problems == []
    assert exported is not None
    # Batch 1 runs K=3 and batch 256 K=0 (the mix collapse above): ranges as the seed merges.
    assert exported.config == {
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": [[1, 255, 3], [256, 256, 0]],
    }
    assert exported.details["per_context"] == {
        "500": [[1, 255, 3], [256, 256, 0]],
        "4000": [[1, 256, 3]],
    }
    # Only batch 256 at 4000 is off the optimum: K=0 for K=3, 1 - 1200 / 1600 = 25 %. Mix-weighted
    # mean: (batch 1: 0) + (batch 256: 0.7 * 0 + 0.3 * 25 = 7.5), over 2 anchors = 3.75 %.
    summary = exported.summary
    assert summary.largest_loss_percent == pytest.approx(25.0)
    assert summary.largest_at == (256, 4000)
    assert summary.mix_weighted_mean_loss_percent == pytest.approx(3.75)
    assert (summary.cells_off_optimum, summary.cells) == (1, 4)
    losses = {(c.batch_size, c.prompt_tokens): c for c in exported.losses}
    assert (losses[256, 4000].exported_k, losses[256, 4000].expected_objective) == (0, 1200.0)
    assert losses[256, 4000].weight == pytest.approx(0.3)


def test_vllm_context_rules_each_fail_when_broken() -> None:
    valid = {
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": [[1, 63, 3], [64, 256, 0]],
    }
    assert vllm_context_violations(valid, {"500": [[1, 256, 3]]}) == []
    assert vllm_context_violations({**valid, "num_speculative_tokens": 0}) == [
        "num_speculative_tokens 0 is not a whole number > 0"
    ]
    assert vllm_context_violations(valid, {"500": [[2, 256, 3]]}) == [
        "per-context 500: the first range starts at 2, not 1"
    ]
    broken = {**valid, "num_speculative_tokens_per_batch_size": [[1, 63, 3], [60, 256, 0]]}
    assert vllm_context_violations(broken) == ["ranges [1, 63, 3] and [60, 256, 0] overlap"]


def test_a_grid_whose_anchors_do_not_start_at_1_fails_validation_before_export() -> None:
    # A file that says it is deployable but is not: the validator stops it.
    shifted = {(8 if b == 1 else b, prompt): by_k for (b, prompt), by_k in PUBLISHED.items()}
    grid = grid_of(result_json(shifted))
    exported, problems = vllm_context_export(grid, mix_of(grid, None), 3)
    assert exported is None
    assert [p.rule for p in problems] == ["invalid-export", "invalid-export", "invalid-export"]
    assert "the first range starts at 8, not 1" in problems[0].message


# --------------------------------------------------------------------------- context ranges


def test_boundaries_are_never_on_a_measured_context() -> None:
    # Independently of the rule's formula: every boundary lies strictly between two measured
    # contexts, neither hi nor hi + 1 being one of them.
    for below in range(1, 200):
        for above in range(below + 3, below + 400, 7):
            hi = context_boundary(below, above)
            assert hi is not None
            assert below < hi and hi + 1 < above, (below, above, hi)
    assert context_boundary(100, 102) is None


def test_context_ranges_are_contiguous_from_1_with_geometric_boundaries() -> None:
    points = [ContextPoint(500, 550, 100), ContextPoint(1000, 1050, 100)]
    points.append(ContextPoint(4000, 4050, 100))
    # isqrt(550 * 1050) = isqrt(577500) = 759 (759^2 = 576081, 760^2 = 577600);
    # isqrt(1050 * 4050) = isqrt(4252500) = 2062 (2062^2 = 4251844, 2063^2 = 4255969).
    assert context_ranges(points) == ((1, 759), (760, 2062), (2063, UNBOUNDED_CONTEXT))


def test_points_too_close_for_a_boundary_are_an_error() -> None:
    medians = {(1, 500): {0: 1.0, 3: 2.0}, (1, 501): {0: 1.0, 3: 2.0}}
    grid = grid_of(result_json(medians, max_batch_size=1))
    exported, problems = rfc_48944_export(grid, mix_of(grid, None), 3)
    assert exported is None
    assert [p.rule for p in problems] == ["context-points-too-close"]
    assert "550 and 551" in problems[0].message


# --------------------------------------------------------------------------- vllm-rfc-48944


def test_rfc_48944_holds_the_grid_exactly() -> None:
    grid = grid_of(result_json(PUBLISHED))
    exported, problems = rfc_48944_export(grid, mix_of(grid, None), 3)
    assert problems == []
    assert exported is not None
    top = UNBOUNDED_CONTEXT
    assert exported.config == {
        "num_speculative_tokens": 3,
        "speculative_token_schedule": [
            [1, 255, 1, PUBLISHED_BOUNDARY, 3],
            [1, 255, PUBLISHED_BOUNDARY + 1, top, 3],
            [256, 256, 1, PUBLISHED_BOUNDARY, 0],
            [256, 256, PUBLISHED_BOUNDARY + 1, top, 3],
        ],
        "ctx_agg": "mean",
    }
    assert all(loss.loss_percent == 0.0 for loss in exported.losses)
    assert exported.summary.largest_at is None


def test_rfc_48944_merges_identical_whole_rows_and_columns_without_loss() -> None:
    # Batches 1 and 8 run K=3 at both contexts (identical rows: one range 1-63); both contexts
    # of every batch agree... except at 64, where the columns differ: no column merge.
    medians: Medians = {}
    for batch in (1, 8):
        for prompt in (500, 1000, 4000):
            medians[batch, prompt] = {0: 100.0, 3: 150.0}
    for prompt, best in ((500, 0), (1000, 0), (4000, 3)):
        medians[64, prompt] = {0: 100.0, 3: 150.0} if best == 3 else {0: 150.0, 3: 100.0}
    grid = grid_of(result_json(medians, max_batch_size=128))
    exported, _ = rfc_48944_export(grid, mix_of(grid, None), 3)
    assert exported is not None
    # Rows: batch 1-63 (3, 3, 3), batch 64-128 (0, 0, 3). Columns 500 and 1000 are (3, 0) in
    # both: merged into [1, 2062] (the boundary between 1050 and 4050, as derived above).
    assert exported.config["speculative_token_schedule"] == [
        [1, 63, 1, 2062, 3],
        [1, 63, 2063, UNBOUNDED_CONTEXT, 3],
        [64, 128, 1, 2062, 0],
        [64, 128, 2063, UNBOUNDED_CONTEXT, 3],
    ]
    assert {loss.loss_percent for loss in exported.losses} == {0.0}
    assert rfc_48944_violations(exported.config["speculative_token_schedule"]) == []


def test_rfc_48944_options_legacy_name_and_ctx_agg() -> None:
    grid = grid_of(result_json(PUBLISHED))
    exported, _ = rfc_48944_export(grid, mix_of(grid, None), 3, "max", legacy_field_name=True)
    assert exported is not None
    assert list(exported.config) == [
        "num_speculative_tokens",
        "num_speculative_tokens_per_batch_size",
        "ctx_agg",
    ]
    assert exported.config["ctx_agg"] == "max"
    assert any("deprecated alias" in note for note in exported.notes)


def test_rfc_48944_lookup_takes_the_first_context_range_reaching_the_value() -> None:
    entries = [[1, 8, 1, 100, 3], [1, 8, 101, UNBOUNDED_CONTEXT, 5], [9, 16, 1, 100, 0]]
    entries.append([9, 16, 101, UNBOUNDED_CONTEXT, 1])
    assert [rfc_48944_k_at(entries, b, c) for b, c in ((8, 100), (8, 101), (9, 5), (99, 500))] == [
        3,
        5,
        0,
        1,
    ]


VALID_48944 = [[1, 8, 1, 100, 3], [1, 8, 101, 200, 5], [9, 64, 1, 100, 0], [9, 64, 101, 200, 2]]


@pytest.mark.parametrize(
    ("entries", "violation"),
    [
        ([], "the schedule must be a non-empty list of [bs_lo, bs_hi, ctx_lo, ctx_hi, K]"),
        (
            [[1, 8, 1, 100]],
            "entry 0 [1, 8, 1, 100] is not a list of 5 integers [bs_lo, bs_hi, ctx_lo, ctx_hi, K]",
        ),
        ([[1, 8, 3], [1, 8, 1, 100, 3]], "3- and 5-item entries are mixed (3 items: entry 0)"),
        (
            [[1, 8, 1, 100, 2.5]],
            "entry 0 [1, 8, 1, 100, 2.5] is not a list of 5 integers"
            " [bs_lo, bs_hi, ctx_lo, ctx_hi, K]",
        ),
        ([[0, 8, 1, 100, 3]], "entry 0 [0, 8, 1, 100, 3]: batch bounds must be >= 1"),
        ([[1, 8, 0, 100, 3]], "entry 0 [1, 8, 0, 100, 3]: context bounds must be >= 1"),
        ([[1, 8, 1, 100, -1]], "entry 0 [1, 8, 1, 100, -1]: K must be >= 0"),
        ([[9, 8, 1, 100, 3]], "entry 0 [9, 8, 1, 100, 3]: bs_lo > bs_hi"),
        ([[1, 8, 100, 1, 3]], "entry 0 [1, 8, 100, 1, 3]: ctx_lo > ctx_hi"),
        ([[2, 8, 1, 100, 3]], "the first batch range [2, 8] does not start at 1"),
        (
            [[1, 8, 1, 100, 3], [5, 9, 1, 100, 3]],
            "batch ranges [1, 8] and [5, 9] overlap",
        ),
        (
            VALID_48944[:3],
            "batch range [9, 64] lacks the context ranges [101, 200]: every batch range must"
            " carry the same context ranges",
        ),
        (
            [*VALID_48944, [1, 8, 1, 100, 4]],
            "the cell (batch [1, 8], context [1, 100]) appears 2 times",
        ),
        (
            [*VALID_48944, [1, 8, 1, 100, 4]],
            "5 entries, expected 2 batch ranges x 2 context ranges = 4",
        ),
        ([[1, 8, 2, 100, 3]], "the first context range [2, 100] does not start at 1"),
        (
            [[1, 8, 1, 100, 3], [1, 8, 150, 200, 3]],
            "context ranges [1, 100] and [150, 200] are not contiguous (expected the next to"
            " start at 101)",
        ),
        (
            [[1, 8, 1, 100, 3], [1, 8, 90, 200, 3]],
            "context ranges [1, 100] and [90, 200] are not contiguous (expected the next to"
            " start at 101)",
        ),
        ([[1, 8, 1, 2**31, 3]], f"entry 0 [1, 8, 1, {2**31}, 3]: numbers above {2**31 - 1}"),
    ],
)
def test_each_rfc_48944_rule_fails_when_broken(entries: list[Any], violation: str) -> None:
    assert violation in rfc_48944_violations(entries)


def test_the_rfc_48944_validator_accepts_a_valid_grid() -> None:
    assert rfc_48944_violations(VALID_48944) == []
    # Batch gaps are not forbidden (the rule is: from 1, no overlap).
    assert rfc_48944_violations([[1, 8, 1, 100, 3], [16, 32, 1, 100, 0]]) == []


@pytest.mark.parametrize(
    ("global_k", "ctx_agg", "violation"),
    [
        (3, "sum", "ctx_agg 'sum' is not one of ('median', 'mean', 'max')"),
        (0, "mean", "num_speculative_tokens 0 is not a whole number > 0"),
    ],
)
def test_a_config_breaking_a_rule_is_an_error_not_an_export(
    global_k: int, ctx_agg: Any, violation: str
) -> None:
    grid = grid_of(result_json(PUBLISHED))
    exported, problems = rfc_48944_export(grid, mix_of(grid, None), global_k, ctx_agg)
    assert exported is None
    assert [(p.rule, p.message) for p in problems] == [
        ("invalid-export", f"the vllm-rfc-48944 config breaks its format's rule: {violation}")
    ]


# --------------------------------------------------------------------------- vllm-pr-54801


def test_pr_54801_warns_where_the_batch_table_turns_speculation_off() -> None:
    """The published case: at batch 256, K*=0 at short context and K*=3 at long context.

    Default mix (prompt 500, weight 1). Length tables (short, long) over {0, 3}:
    - (3, 3): batch 1 runs K=3 (no loss); batch 256 picks K=0 (short: no loss; K=3 would lose
      1 - 1600/2000 = 20 % at short). Mix loss 0 + 0; cell losses: batch 256 long 25 %.
    - (3, 0): the same mix loss, but batch 1 long also runs K=0: 1 - 80/120 = 33 % more.
    - (0, x): batch 1 short runs K=0: 1 - 100/150 = 33 % of mix loss.
    So batch table [3 at 1-255, 0 at 256], length table 3 everywhere (merged to one range); at
    batch 256 long the pair runs min(0, 3) = 0 where the optimum is 3: loses 25 %, and raising
    batch 256 to 3 would lose 20 % at its short context (the only weighted one).
    """
    grid = grid_of(result_json(PUBLISHED))
    exported, problems = pr_54801_export(grid, mix_of(grid, None), 3)
    assert problems == []
    assert exported is not None
    assert exported.config == {
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": [[1, 255, 3], [256, 256, 0]],
        "num_speculative_tokens_per_seq_len": [[1, UNBOUNDED_CONTEXT, 3]],
    }
    (warning,) = exported.warnings
    assert warning.startswith(
        "batch 256, prompt 4000 tokens: the pair runs K=0 (the smaller of batch K 0 and length"
        " K 3; the batch table caps it) where the measured optimum is K=3: loses 25.0%."
    )
    assert warning.endswith(
        "raising the batch table to 3 there would make batch 256's mix-weighted loss 20.0%"
        " instead of 0.0%"
    )
    assert PR_54801_COMBINATION in exported.notes
    assert exported.to_json()["combination"] == PR_54801_COMBINATION
    assert f"warning: {warning}" in exported.lines()
    assert exported.summary.largest_at == (256, 4000)


def test_pr_54801_raises_the_batch_table_when_the_mix_pays_for_it() -> None:
    """Mix 500:1,4000:1 (0.5 each). Length table (3, 3):
    - batch 256 K=0: 0.5 * 2000 + 0.5 * 1200 = 1600 vs the optimum's 0.5 * 2000 + 0.5 * 1600 =
      1800: 11.1 %; K=3: 0.5 * 1600 + 0.5 * 1600 = 1600: also 11.1 %, a tie on the mix; the
      cell losses break it: K=0 loses 0 + 25, K=3 loses 20 + 0: K=3.
    - batch 1: K=3, no loss. Total 11.1 %.
    Length (0, 3) with batch 256 at K=3 would cost batch 256 nothing but batch 1 (short K=0):
    1 - (0.5 * 100 + 0.5 * 120) / (0.5 * 150 + 0.5 * 120) = 1 - 110/135 = 18.5 %: worse.
    So one K=3 everywhere, and batch 256 at prompt 500 runs 3 for its optimum 0: 20 % lost.
    """
    grid = grid_of(result_json(PUBLISHED))
    exported, _ = pr_54801_export(grid, mix_of(grid, "500:1,4000:1"), 3)
    assert exported is not None
    assert exported.config["num_speculative_tokens_per_batch_size"] == [[1, 256, 3]]
    assert exported.config["num_speculative_tokens_per_seq_len"] == [[1, UNBOUNDED_CONTEXT, 3]]
    (warning,) = exported.warnings
    assert "batch 256, prompt 500 tokens: the pair runs K=3" in warning
    assert "both tables allow more" in warning
    assert "loses 20.0%" in warning


def test_pr_54801_coordinate_ascent_when_the_search_is_large() -> None:
    grid = grid_of(result_json(PUBLISHED))
    mix = mix_of(grid, None)
    exhaustive = table_pair_search(grid, mix)
    ascent = table_pair_search(grid, mix, max_exhaustive=0)
    assert exhaustive is not None and ascent is not None
    # 2 Ks ^ 2 contexts length tables x 2 anchors x 2 Ks = 16 trials.
    assert (exhaustive.method, exhaustive.trials) == ("exhaustive", 16)
    # The ascent starts from length (3, 3), which restricts nothing, and scores both Ks at
    # each of the 2 points (2 Ks x 2 anchors x 2 batch Ks = 8 trials a point); neither move is
    # better, so one pass: 16 trials.
    assert (ascent.method, ascent.trials, ascent.passes) == ("coordinate ascent", 16, 1)
    assert (ascent.batch_ks, ascent.length_ks) == (exhaustive.batch_ks, exhaustive.length_ks)


def _random_grid(anchors: int, ks: int, points: int) -> ContextGrid:
    """A grid of ``anchors`` x ``points`` cells, every K in 0..ks-1 kept, medians drawn from a
    fixed seed."""
    rng = random.Random(anchors * 1000 + ks * 100 + points)
    medians = {
        (anchor, 500 * 2**point): {k: 100.0 + 50.0 * rng.random() for k in range(ks)}
        for anchor in range(1, anchors + 1)
        for point in range(points)
    }
    return grid_of(result_json(medians, max_batch_size=anchors, global_k=ks))


@pytest.mark.parametrize(("anchors", "ks", "points"), [(8, 4, 4), (16, 4, 4), (8, 4, 8)])
def test_pr_54801_ascent_cost_is_linear_in_the_grid(anchors: int, ks: int, points: int) -> None:
    # Counted, not timed: a pass sums each (anchor, batch K)'s terms after every point once (A x
    # K x C look-ups), then at each point scores K trial Ks for every (anchor, batch K) from
    # the running sums (C x A x K x K) and moves the running sum on (C x A x K); the final batch
    # table looks up A x K x C more. Linear in anchors and in points (the old search summed
    # every point anew for every trial: A x K^2 x C^2 a pass).
    grid = _random_grid(anchors, ks, points)
    pair = table_pair_search(grid, mix_of(grid, None), max_exhaustive=0)
    assert pair is not None and pair.method == "coordinate ascent"
    cells = anchors * ks * points
    assert pair.lookups == pair.passes * (cells + points * anchors * ks * (ks + 1)) + cells
    assert 1 <= pair.passes <= points * ks  # each pass but the last changes a length K


def test_pr_54801_a_large_grid_is_searched_in_few_look_ups() -> None:
    # The 128 x 20 x 16 grid: about a minute before. Bounded by the count above with
    # at most 3 passes (the seeded grid takes 2): 128 x 20 x 16 x (1 + 21) x 3 + ... < 3.0e6.
    grid = _random_grid(128, 20, 16)
    pair = table_pair_search(grid, mix_of(grid, None))
    assert pair is not None and pair.method == "coordinate ascent"
    assert pair.passes <= 3 and pair.lookups < 3_000_000


def test_pr_54801_coordinate_ascent_lowers_a_length_k() -> None:
    # One batch anchor, K*=3 short and K*=0 long: only the length table can say so. The ascent
    # starts from length (3, 3) with batch K=3 (loses at long), and moves long to 0.
    medians = {(1, 500): {0: 100.0, 3: 150.0}, (1, 4000): {0: 120.0, 3: 80.0}}
    grid = grid_of(result_json(medians, max_batch_size=1))
    pair = table_pair_search(grid, mix_of(grid, "500:1,4000:1"), max_exhaustive=0)
    assert pair is not None
    assert (pair.batch_ks, pair.length_ks, pair.method) == ((3,), (3, 0), "coordinate ascent")


def test_pr_54801_ties_go_to_the_smallest_ks() -> None:
    # K=1 is the optimum at both contexts (130 > 120 > 100). Batch K 1 or 3 under length K 1
    # run the same K=1: a tie, the smaller batch K. Length tables (1, 1), (1, 3), (3, 1) and
    # (3, 3) with batch K 1 all run K=1 everywhere: a tie, the first in order, (1, 1).
    by_k = {0: 100.0, 1: 130.0, 3: 120.0}
    grid = grid_of(result_json({(1, 500): by_k, (1, 4000): by_k}, max_batch_size=1))
    pair = table_pair_search(grid, mix_of(grid, "500:1,4000:1"))
    assert pair is not None
    assert (pair.batch_ks, pair.length_ks) == ((1,), (1, 1))


VALID_SEQ_LEN = [[1, 100, 3], [101, UNBOUNDED_CONTEXT, 0]]


@pytest.mark.parametrize(
    ("table", "violation"),
    [
        ([], "num_speculative_tokens_per_seq_len must be a non-empty list of [len_lo, len_hi, K]"),
        ([[1, 100]], "entry 0 [1, 100] is not a list of 3 integers"),
        ([[0, 100, 3]], "entry 0 [0, 100, 3]: length bounds must be >= 1"),
        ([[1, 0, 3]], "entry 0 [1, 0, 3]: length bounds must be >= 1"),
        ([[100, 1, 3]], "entry 0 [100, 1, 3]: len_lo > len_hi"),
        ([[1, 100, -1]], "entry 0 [1, 100, -1]: K must be >= 0"),
        ([[2, 100, 3]], "the first context range [2, 100] does not start at 1"),
        (
            [[1, 100, 3], [102, 200, 0]],
            "context ranges [1, 100] and [102, 200] are not contiguous (expected the next to"
            " start at 101)",
        ),
    ],
)
def test_each_seq_len_rule_fails_when_broken(table: list[Any], violation: str) -> None:
    assert violation in seq_len_violations(table)


def test_the_pr_54801_validator_checks_both_tables_and_the_global_k() -> None:
    valid = {
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": [[1, 256, 3]],
        "num_speculative_tokens_per_seq_len": VALID_SEQ_LEN,
    }
    assert seq_len_violations(VALID_SEQ_LEN) == []
    assert pr_54801_violations(valid) == []
    bad = {
        **valid,
        "num_speculative_tokens": 0,
        "num_speculative_tokens_per_batch_size": [[2, 256, 3]],
    }
    assert pr_54801_violations(bad) == [
        "num_speculative_tokens 0 is not a whole number > 0",
        "the first range starts at 2, not 1",
    ]


# --------------------------------------------------------------------------- every format


@pytest.mark.parametrize("format", CONTEXT_FORMATS)
def test_every_export_is_json_ready_and_deterministic(format: Any) -> None:
    grid = grid_of(result_json(PUBLISHED))
    first, _ = context_export(grid, format, mix_of(grid, "500:2,4000:1"), 3)
    again, _ = context_export(
        grid_of(result_json(PUBLISHED)), format, mix_of(grid, "500:2,4000:1"), 3
    )
    assert first is not None and again is not None
    assert first.text() == again.text()
    document = json.loads(first.text())
    assert list(document)[:3] == ["format", "speculative_config", "context_mix"]
    assert document["format"] == format
    assert len(document["loss"]["cells"]) == 4
    assert json.loads(first.lines()[0]) == document["speculative_config"]
    assert first.lines()[1].startswith(f"{format}: ")


def test_the_formats_of_the_export_command_include_the_context_formats() -> None:
    assert tuple(f.name for f in formats() if f.needs_grid) == CONTEXT_FORMATS


# --------------------------------------------------------------------------- the command line


@pytest.mark.parametrize("format", CONTEXT_FORMATS)
def test_the_cli_prints_the_config_first_and_writes_the_apps_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], format: str
) -> None:
    data = result_json(PUBLISHED)
    source = write(tmp_path, data)
    out = tmp_path / "out.json"
    flags = ["--context-mix", "500:7,4000:3"]
    assert main(["export", str(source), "--format", format, *flags, "-o", str(out)]) == EXIT_OK
    printed = capsys.readouterr().out.splitlines()
    written = json.loads(out.read_text())
    assert json.loads(printed[0]) == written["speculative_config"]
    assert printed[1].startswith(f"{format}: ")
    assert printed[-1] == f"Wrote {out}"
    settings = ExportSettings(format=format, context_mix="500:7,4000:3")
    text, problems = export_text(copy.deepcopy(data), settings)
    assert problems == []
    assert out.read_bytes() == text.encode()  # type: ignore[union-attr]


def test_the_cli_prints_the_pr_54801_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write(tmp_path, result_json(PUBLISHED))
    assert main(["export", str(source), "--format", "vllm-pr-54801"]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert json.loads(lines[0])["num_speculative_tokens_per_seq_len"] == [[1, UNBOUNDED_CONTEXT, 3]]
    assert any(line.startswith("warning: batch 256, prompt 4000 tokens") for line in lines)
    assert f"note: {PR_54801_COMBINATION}" in lines


@pytest.mark.parametrize(
    ("data", "flags", "message"),
    [
        (
            {"num_speculative_tokens_per_batch_size": [[1, 8, 3]]},
            ["--format", "vllm-context"],
            "the file has no context_grid",
        ),
        (
            result_json(PUBLISHED, deployable=False, reason="the anchors start at 8"),
            ["--format", "vllm-rfc-48944"],
            "cannot be deployed in any format: the anchors start at 8",
        ),
        (result_json(PUBLISHED), ["--format", "vllm-context", "--context-mix", "9000:1"], "9000"),
        (result_json(PUBLISHED), ["--format", "vllm", "--context-mix", "500:1"], "applies only"),
        (result_json(PUBLISHED), ["--format", "vllm-context", "--ctx-agg", "max"], "applies only"),
        (
            result_json(PUBLISHED),
            ["--format", "vllm-pr-54801", "--legacy-field-name"],
            "--legacy-field-name applies only to --format vllm-rfc-48944",
        ),
        (
            result_json(PUBLISHED),
            ["--format", "vllm-rfc-48944", "--global-k", "2"],
            "below the export's largest K 3",
        ),
    ],
)
def test_bad_input_for_a_context_format_exits_2_with_the_reason(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    data: object,
    flags: list[str],
    message: str,
) -> None:
    source = write(tmp_path, data)
    out = tmp_path / "out.json"
    assert main(["export", str(source), *flags, "-o", str(out)]) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    assert message in captured.err
    assert "Traceback" not in captured.err
    assert captured.out == ""
    assert not out.exists()


def test_the_app_gets_the_same_problems_as_the_cli() -> None:
    text, problems = export_text({"other": 1}, ExportSettings(format="vllm-context"))
    assert text is None
    assert [p.rule for p in problems] == ["no-context-grid"]


def test_a_context_result_still_exports_its_batch_only_schedule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write(tmp_path, result_json(PUBLISHED))
    assert main(["export", str(source), "--format", "vllm"]) == EXIT_OK
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == json.dumps(
        {"num_speculative_tokens": 3, "num_speculative_tokens_per_batch_size": [[1, 256, 3]]}
    )
    # 128 * 4 = 512 fits vLLM's default ceiling; 129..256 at K=3 do not.
    assert printed[1].startswith("warning: batch sizes 129-256 run K=3")


def test_help_documents_the_context_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["export", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for text in (
        "--context-mix PROMPT:WEIGHT,...",
        "--ctx-agg {median,mean,max}",
        "--legacy-field-name",
        "vllm-pr-54801",
        "(default: mean)",
        "default: the shortest measured context, weight 1",
    ):
        assert text in help_text, text


# --------------------------------------------------------------------------- deployed schedules

#: A PR #48944 schedule with a context edge at 576 (a decode-time context of 512 + 128 / 2):
#: batch 1-63 K=3 up to 576 and K=5 from 577, batch 64-256 K=0 up to 576 and K=2 from 577.
EDGE_ENTRIES = [
    [1, 63, 1, 576, 3],
    [1, 63, 577, UNBOUNDED_CONTEXT, 5],
    [64, 256, 1, 576, 0],
    [64, 256, 577, UNBOUNDED_CONTEXT, 2],
]


@pytest.mark.parametrize(
    ("batch", "context", "k"),
    [
        (1, 576, 3),  # the range's hi itself: still the range (the first whose hi >= 576)
        (1, 577, 5),  # one past it: the next range
        (63, 576, 3),  # the batch range's hi
        (64, 576, 0),  # the next batch range's lo
        (64, 577, 2),
        (300, 1, 0),  # past the last batch range: its row
        (300, UNBOUNDED_CONTEXT, 2),
    ],
)
def test_a_deployed_rfc_48944_schedule_runs_its_cell_on_both_sides_of_each_edge(
    batch: int, context: int, k: int
) -> None:
    schedule, violations = context_schedule_of({"speculative_token_schedule": EDGE_ENTRIES})
    assert violations == []
    assert isinstance(schedule, Rfc48944Schedule)
    assert schedule.k_at(batch, context) == k


def test_a_deployed_rfc_48944_schedule_is_the_same_in_any_order_and_under_either_name() -> None:
    first, _ = context_schedule_of({"speculative_token_schedule": EDGE_ENTRIES})
    legacy, _ = context_schedule_of(
        {"num_speculative_tokens_per_batch_size": json.dumps(EDGE_ENTRIES[::-1])}
    )
    assert legacy == first
    assert legacy is not None and legacy.key == "num_speculative_tokens_per_batch_size"
    assert context_schedule_key({"num_speculative_tokens_per_batch_size": [[1, 8, 3]]}) is None
    # The largest K per batch range over every context, for the capture rule: 5 and 2.
    assert first is not None and first.batch_bound() == Schedule(((1, 63, 5), (64, 256, 2)))
    assert first.ks == {0, 2, 3, 5}


@pytest.mark.parametrize(
    ("batch", "context", "k"),
    [
        (1, 576, 3),  # min(batch 3, length 4)
        (1, 577, 1),  # min(3, 1): one past the length table's edge
        (64, 576, 4),  # min(5, 4)
        (63, 577, 1),
        (64, 577, 1),
    ],
)
def test_a_deployed_pr_54801_schedule_runs_the_smaller_k_of_its_two_tables(
    batch: int, context: int, k: int
) -> None:
    config = {
        "num_speculative_tokens_per_batch_size": [[64, 256, 5], [1, 63, 3]],
        "num_speculative_tokens_per_seq_len": [[577, UNBOUNDED_CONTEXT, 1], [1, 576, 4]],
    }
    schedule, violations = context_schedule_of(config)
    assert violations == []
    assert isinstance(schedule, Pr54801Schedule)
    assert schedule.k_at(batch, context) == k
    assert pr_54801_k_at(schedule.batch_table, schedule.length_table, batch, context) == k
    assert schedule.batch_bound() == Schedule(((1, 63, 3), (64, 256, 5)))


@pytest.mark.parametrize(
    ("config", "key", "text"),
    [
        (
            {"speculative_token_schedule": [[1, 8, 0, 100, 3]]},
            "speculative_token_schedule",
            "context bounds must be >= 1",
        ),
        (
            {"speculative_token_schedule": [[1, 8, 1, 100, 3], [1, 8, 200, 300, 0]]},
            "speculative_token_schedule",
            "not contiguous",
        ),
        (
            {
                "speculative_token_schedule": EDGE_ENTRIES,
                "num_speculative_tokens_per_batch_size": EDGE_ENTRIES,
            },
            "speculative_token_schedule",
            "under one of its names",
        ),
        (
            {"num_speculative_tokens_per_seq_len": [[1, 100, 3]]},
            "num_speculative_tokens_per_batch_size",
            "missing",
        ),
        (
            {
                "num_speculative_tokens_per_batch_size": [[1, 8, 3]],
                "num_speculative_tokens_per_seq_len": [[2, 100, 3]],
            },
            "num_speculative_tokens_per_seq_len",
            "does not start at 1",
        ),
        (
            {
                "num_speculative_tokens_per_batch_size": [[2, 8, 3]],
                "num_speculative_tokens_per_seq_len": [[1, 100, 3]],
            },
            "num_speculative_tokens_per_batch_size",
            "",
        ),
        (
            {
                "speculative_token_schedule": EDGE_ENTRIES,
                "num_speculative_tokens_per_seq_len": [[1, 100, 3]],
            },
            "num_speculative_tokens_per_seq_len",
            "one context format at a time",
        ),
    ],
)
def test_a_broken_deployed_context_schedule_names_its_key_and_rule(
    config: dict[str, Any], key: str, text: str
) -> None:
    schedule, violations = context_schedule_of(config)
    assert schedule is None
    assert violations and all(found == key for found, _ in violations)
    assert any(text in rule for _, rule in violations)


def test_a_batch_schedule_is_no_context_schedule() -> None:
    assert context_schedule_of({"num_speculative_tokens_per_batch_size": [[1, 8, 3]]}) == (
        None,
        [],
    )
    assert context_schedule_of({"num_speculative_tokens": 3}) == (None, [])


@pytest.mark.parametrize("format", ["vllm-rfc-48944", "vllm-pr-54801"])
def test_a_deployed_export_runs_the_k_its_loss_table_says_at_every_cell(format: Any) -> None:
    """What check looks up in a deployed config is what the export's loss table says the config
    runs: the same lookup on the config as written, read back from its JSON."""
    grid = grid_of(result_json(PUBLISHED))
    exported, problems = context_export(grid, format, mix_of(grid, None), 3)
    assert problems == [] and exported is not None
    schedule, violations = context_schedule_of(json.loads(json.dumps(dict(exported.config))))
    assert violations == [] and schedule is not None and schedule.format == format
    for loss in exported.losses:
        assert schedule.k_at(loss.batch_size, loss.context_tokens) == loss.exported_k
