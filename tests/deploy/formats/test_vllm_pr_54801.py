"""lib/deploy/formats/vllm_pr_54801.py: the table-pair search, its warnings and cost, the
rules of the length table, and the format's entry in the registry.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from grid_builder import (
    PUBLISHED,
    grid_of,
    mix_of,
    result_json,
)

from lib.context_grid import ContextGrid
from lib.deploy.formats.vllm_pr_54801 import (
    FORMAT,
    PR_54801_COMBINATION,
    pr_54801_export,
    pr_54801_violations,
    seq_len_violations,
    table_pair_search,
)
from lib.deploy.grid import (
    UNBOUNDED_CONTEXT,
)
from lib.deploy.registry import format_named


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


def test_it_is_registered_as_a_context_format() -> None:
    assert format_named("vllm-pr-54801") is FORMAT
    assert FORMAT.needs_grid and "context_mix" in FORMAT.flags
