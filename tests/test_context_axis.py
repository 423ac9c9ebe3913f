"""lib/context_axis.py: the context points of a sweep, each run placed at its point, and the
one prompt length of a validation sweep; every run that cannot be placed named with its reason."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from sweep_builder import CONTEXT_GRID, spread, write_context_grid, write_grid

from lib.cli.main import main
from lib.context import analyse_contexts
from lib.context_axis import find_context_axis, sole_context_point
from lib.settings import ContextSettings, Options, Settings
from lib.sweeps import load_experiment

#: (batch, prompt) -> K the grid must choose, from CONTEXT_GRID's medians (sweep_builder.py).
EXPECTED = {(1, 512): 3, (64, 512): 0, (1, 8192): 3, (64, 8192): 3}


def _axis(root: Path, **settings: object):  # type: ignore[no-untyped-def]
    sweep = load_experiment(root)
    return sweep, *find_context_axis(sweep, ContextSettings(**settings))  # type: ignore[arg-type]


def test_the_swept_prompt_length_is_the_axis(tmp_path: Path) -> None:
    _, axis, problems = _axis(write_context_grid(tmp_path, CONTEXT_GRID))
    assert axis is not None and problems == []
    assert axis.field == "random_input_len"
    # output 128 tokens: decode-time context = prompt + 64.
    assert [(p.prompt_tokens, p.context_tokens) for p in axis.points] == [(512, 576), (8192, 8256)]
    assert [p.num_runs for p in axis.points] == [12, 12]


def test_a_point_s_sweep_is_one_object_so_the_analysis_caches_serve_it(tmp_path: Path) -> None:
    # The analysis caches compare sweeps by identity: a slider moved in the app analyses each
    # point again, and must hand the caches the same sweep; another sweep gets its own.
    sweep, axis, _ = _axis(write_context_grid(tmp_path, CONTEXT_GRID))
    assert axis is not None
    first = axis.sweep_at(sweep, 0)
    assert axis.sweep_at(sweep, 0) is first
    assert axis.sweep_at(sweep, 1) is not first
    assert first.runs.height == axis.points[0].num_runs
    again = load_experiment(tmp_path)
    assert axis.sweep_at(again, 0) is not first
    assert axis.sweep_at(again, 0).runs.equals(first.runs)


def test_a_shared_random_prefix_is_added(tmp_path: Path) -> None:
    root = write_context_grid(
        tmp_path,
        CONTEXT_GRID,
        prompt_fields={"random_input_len": lambda p: p - 100, "random_prefix_len": 100},
    )
    _, axis, _ = _axis(root)
    assert axis is not None
    assert axis.field == "random_input_len+random_prefix_len"
    assert [p.prompt_tokens for p in axis.points] == [512, 8192]


def test_prefix_repetition_prompts_are_prefix_plus_suffix(tmp_path: Path) -> None:
    root = write_context_grid(
        tmp_path,
        CONTEXT_GRID,
        prompt_fields={
            "prefix_repetition_prefix_len": lambda p: p - 96,
            "prefix_repetition_suffix_len": 96,
        },
    )
    _, axis, _ = _axis(root)
    assert axis is not None
    assert axis.field == "prefix_repetition_prefix_len+prefix_repetition_suffix_len"
    assert [p.prompt_tokens for p in axis.points] == [512, 8192]


def test_without_a_swept_key_the_measured_mean_prompt_is_used(tmp_path: Path) -> None:
    root = write_context_grid(tmp_path, CONTEXT_GRID, prompt_fields={})
    _, axis, _ = _axis(root)
    assert axis is not None
    assert axis.field == "total_input_tokens/completed"
    assert [p.prompt_tokens for p in axis.points] == [512, 8192]


def test_a_named_field_is_used_and_a_missing_one_is_an_error(tmp_path: Path) -> None:
    root = write_context_grid(tmp_path, CONTEXT_GRID, prompt_fields={"my_len": lambda p: p})
    _, axis, _ = _axis(root, context_var="my_len")
    assert axis is not None and axis.field == "my_len"
    _, axis, problems = _axis(root, context_var="no_such_field")
    assert axis is None
    assert [(p.severity.value, p.rule, p.value) for p in problems] == [
        ("error", "context-field-missing", "'no_such_field'")
    ]


def test_none_ignores_the_prompt_length(tmp_path: Path) -> None:
    _, axis, problems = _axis(write_context_grid(tmp_path, CONTEXT_GRID), context_var="none")
    assert axis is None and problems == []


def test_lengths_within_the_tolerance_are_one_point(tmp_path: Path) -> None:
    # 512 and 540 differ by 5.5 %: one point at 10 %, two at 1 %.
    cells = {(1, k, prompt): spread(100.0 + k) for k in (0, 3) for prompt in (512, 540)}
    root = write_context_grid(tmp_path, cells)
    _, axis, _ = _axis(root, context_tolerance=0.1)
    assert axis is None
    _, axis, _ = _axis(root, context_tolerance=0.01)
    assert axis is not None and [p.prompt_tokens for p in axis.points] == [512, 540]


def test_a_chain_of_close_lengths_is_split_where_it_outgrows_its_first(tmp_path: Path) -> None:
    # 500 -> 540 -> 580: each within 10 % of the next, but 580 is 16 % above 500. A point
    # starts at 500 and holds up to 550 (500 x 1.1): {500, 540}, then {580}; no point pools
    # prompts further apart than the tolerance.
    cells = {
        (1, k, prompt): spread(100.0 + k + prompt / 100)
        for k in (0, 3)
        for prompt in (500, 540, 580, 8192)
    }
    root = write_context_grid(tmp_path, cells)
    _, axis, problems = _axis(root)
    assert axis is not None, problems
    assert [p.prompt_tokens for p in axis.points] == [520, 580, 8192]
    for point in axis.points:
        members = axis.runs.filter(pl.col("context_point") == axis.points.index(point))
        low, high = members["prompt_tokens"].min(), members["prompt_tokens"].max()
        assert high <= low * 1.1  # type: ignore[operator]


def test_a_long_chain_at_one_tolerance_is_many_points_not_one(tmp_path: Path) -> None:
    # The chain: 512, 560, ... each 9.4 % above the last, up to 17x the first. Grouped
    # by neighbours it was one point (and no axis, silently); bounded by a point's first
    # length, a point holds at most two neighbours (9.4 % <= 10 % < 2 x 9.4 %).
    lengths = [round(512 * 1.094**step) for step in range(32)]
    assert lengths[-1] / lengths[0] > 16
    cells = {(1, k, prompt): spread(100.0 + k) for k in (0, 3) for prompt in lengths}
    _, axis, _ = _axis(write_context_grid(tmp_path, cells))
    assert axis is not None
    assert len(axis.points) == 16
    spans = [
        axis.runs.filter(pl.col("context_point") == index)["prompt_tokens"]
        for index in range(len(axis.points))
    ]
    assert all(span.max() <= span.min() * 1.1 for span in spans)  # type: ignore[operator]


def test_one_point_that_holds_every_length_still_bounds_its_spread(tmp_path: Path) -> None:
    # 512 and 563 (10 % apart, the tolerance itself): one point, no axis; 564 is beyond it.
    for top, points in ((563, None), (564, [512, 564])):
        cells = {(1, k, p): spread(100.0 + k + p / 10) for k in (0, 3) for p in (512, top)}
        _, axis, _ = _axis(write_context_grid(tmp_path / str(top), cells))
        assert (None if axis is None else [p.prompt_tokens for p in axis.points]) == points


def test_lengths_that_differ_only_between_anchors_are_no_axis(tmp_path: Path) -> None:
    # Each concurrency sampled its own prompts: batch 1 saw 512 tokens, batch 64 saw 700.
    cells = {
        (1, 0, 512): spread(100.0),
        (1, 3, 512): spread(150.0),
        (64, 0, 700): spread(4000.0),
        (64, 3, 700): spread(3000.0),
    }
    _, axis, problems = _axis(write_context_grid(tmp_path, cells))
    assert axis is None
    assert [(p.severity.value, p.rule) for p in problems] == [("note", "no-context-axis")]


def test_measured_lengths_that_differ_only_by_seed_are_no_axis(tmp_path: Path) -> None:
    """Seed 0 sampled prompts of 512 tokens, seed 1 of 700 (the measured mean prompt: no
    swept length), every K the same per seed: repeats, no axis, a note naming the seeds.
    Without the seed in the records the same runs read as an axis; and one seed measured at
    both lengths is one (tests/loop/test_plan.py runs the plan's own seeded sweeps)."""
    for seed, prompt in ((0, 512), (1, 700)):
        cells = {(1, k, prompt): spread(100.0 + k) for k in (0, 3)}
        write_context_grid(tmp_path / "seeded", cells, prompt_fields={}, seed=seed)
        write_context_grid(tmp_path / "unseeded", cells, prompt_fields={})
    _, axis, problems = _axis(tmp_path / "seeded")
    assert axis is None
    assert [(p.rule, p.value) for p in problems] == [("no-context-axis", "512, 700")]
    assert "only between the repeats' seeds" in problems[0].message
    _, axis, _ = _axis(tmp_path / "unseeded")
    assert axis is not None and [p.prompt_tokens for p in axis.points] == [512, 700]
    root = write_context_grid(tmp_path / "one-seed", CONTEXT_GRID, prompt_fields={}, seed=0)
    _, axis, _ = _axis(root)
    assert axis is not None and [p.prompt_tokens for p in axis.points] == [512, 8192]


@pytest.mark.parametrize(
    ("prompt_fields", "context_var"),
    [
        (None, "auto"),
        ({"random_input_len": lambda p: p - 100, "random_prefix_len": 100}, "auto"),
        (
            {"prefix_repetition_prefix_len": lambda p: p - 96, "prefix_repetition_suffix_len": 96},
            "auto",
        ),
        ({}, "auto"),  # the measured mean prompt
        (None, "random_input_len"),
    ],
)
def test_the_fields_read_are_all_the_axis_reads(
    tmp_path: Path, prompt_fields: dict[str, object] | None, context_var: str
) -> None:
    """The CLI loads only ``Settings.metrics_read()`` and ``ContextSettings.fields_read()``:
    the axis found on that load must be the one found on the full load (a field the axis
    reads that fields_read left out would change the points or lose the axis)."""
    extra = {} if prompt_fields is None else {"prompt_fields": prompt_fields}
    root = write_context_grid(tmp_path, CONTEXT_GRID, **extra)  # type: ignore[arg-type]
    settings = ContextSettings(context_var=context_var)
    full, full_problems = find_context_axis(load_experiment(root), settings)
    metrics = (*Settings().metrics_read(), *settings.fields_read())
    lean, lean_problems = find_context_axis(load_experiment(root, metrics=metrics), settings)
    assert full is not None and lean is not None
    assert (lean.field, lean.points) == (full.field, full.points)
    assert lean_problems == full_problems


@pytest.mark.parametrize("context_var", ["auto", "random_input_len"])
def test_a_prompt_length_written_as_a_json_string_is_that_number(
    tmp_path: Path, context_var: str
) -> None:
    """Issue 22: "random_input_len": "512" switched the axis off under auto and was "held by
    no record" when named. A JSON string of a number is that number, as the seed reads its
    numbers (lib.records.numeric_text): the same axis and grid as with numbers."""
    as_text = load_experiment(
        write_context_grid(tmp_path / "text", CONTEXT_GRID, prompt_fields={"random_input_len": str})
    )
    as_numbers = load_experiment(write_context_grid(tmp_path / "numbers", CONTEXT_GRID))
    settings = ContextSettings(context_var=context_var)
    text_axis, text_notes = find_context_axis(as_text, settings)
    number_axis, number_notes = find_context_axis(as_numbers, settings)
    assert text_axis is not None and number_axis is not None
    assert [p.prompt_tokens for p in text_axis.points] == [512, 8192]
    assert [p.prompt_tokens for p in text_axis.points] == [
        p.prompt_tokens for p in number_axis.points
    ]
    assert [n.rule for n in text_notes] == [n.rule for n in number_notes]
    grids = [
        analyse_contexts(sweep, axis, Settings(), Options()).grid()
        for sweep, axis in ((as_text, text_axis), (as_numbers, number_axis))
    ]
    assert grids[0] == grids[1]


@pytest.mark.parametrize(
    ("context_var", "objective", "refused"),
    [
        ("anchor", None, True),  # a column the loader derives for every run
        ("output_throughput", "output_throughput", True),  # the objective itself
        ("output_throughput", "median_tpot_ms", False),  # a field, not the objective: read
        ("random_input_len", "output_throughput", False),
    ],
)
def test_the_app_s_context_field_is_refused_as_the_cli_s_flag_is(
    tmp_path: Path, context_var: str, objective: str | None, refused: bool
) -> None:
    """Issue 22: --context-var naming a derived column or the objective gave errors such as
    "at 0 tokens: only 2 usable run(s)". The CLI refuses the flag before reading; the app's
    control reaches find_context_axis, which refuses it the same way (one rule,
    lib.settings.context_var_reason)."""
    sweep = load_experiment(write_context_grid(tmp_path, CONTEXT_GRID))
    settings = ContextSettings(context_var=context_var)
    axis, problems = find_context_axis(sweep, settings, objective)
    errors = [p for p in problems if p.severity.value == "error"]
    if refused:
        assert axis is None and [p.rule for p in errors] == ["invalid-setting"]
        assert errors[0].message == settings.invalid(objective)[0]
    else:
        assert not [p for p in errors if p.rule == "invalid-setting"]


@pytest.mark.parametrize(("output_len", "refused"), [(2**30, False), (2**30 + 1, True)])
def test_an_output_length_no_engine_takes_is_refused_not_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], output_len: int, refused: bool
) -> None:
    """Issue 22: prompt + output / 2 past 2^31 - 1 gave a result its own export refused. The
    same top as prompt lengths (2^30): 2^30 output tokens is a length (the grid and every
    export are written), one more is an error naming the field (exit 2, nothing written)."""
    root = write_context_grid(tmp_path / "sweep", CONTEXT_GRID, output_len=output_len)
    out = tmp_path / "result.json"
    status = main([str(root), "--output-json", str(out)])
    err = capsys.readouterr().err
    assert status == (2 if refused else 0) and out.exists() is not refused
    assert ("error [invalid-output-length]" in err) is refused
    if not refused:
        exported = tmp_path / "vllm_context.json"
        assert main(["export", str(out), "--format", "vllm-context", "-o", str(exported)]) == 0


# --------------------------------------------------------------------------- one prompt length

WHY = "the schedule's K depends on it"


def _sole(root: Path, **settings: object):  # type: ignore[no-untyped-def]
    return sole_context_point(load_experiment(root), ContextSettings(**settings), WHY)  # type: ignore[arg-type]


def test_a_sweep_of_one_prompt_length_is_one_point_at_its_decode_time_context(
    tmp_path: Path,
) -> None:
    # 512-token prompts, 128 output tokens: decode-time context 512 + 128 / 2 = 576.
    cells = {(anchor, k, 512): spread(100.0 + k) for anchor in (1, 64) for k in (0, 3)}
    point, label, problems = _sole(write_context_grid(tmp_path, cells))
    assert problems == [] and label == "random_input_len"
    assert point is not None
    assert (point.prompt_tokens, point.output_tokens, point.context_tokens) == (512, 128, 576)
    # Without the swept key, the measured mean prompt (total_input_tokens / completed).
    root = write_context_grid(tmp_path / "measured", cells, prompt_fields={})
    point, label, _ = _sole(root)
    assert label == "total_input_tokens/completed"
    assert point is not None and point.context_tokens == 576


def test_lengths_within_the_tolerance_are_the_one_point_and_beyond_it_an_error(
    tmp_path: Path,
) -> None:
    """Each anchor measured at its own length: 512 and 563 (563 <= 512 x 1.1 = 563.2) are one
    point named by their median, 537.5 -> 538 (the axis's rounding); 512 and 564 are two
    lengths that are no axis, so there is no one length to judge at."""
    for top, expected in ((563, 538), (564, None)):
        cells = {(1, k, 512): spread(100.0 + k) for k in (0, 3)}
        cells |= {(64, k, top): spread(4000.0 + k) for k in (0, 3)}
        point, _, problems = _sole(write_context_grid(tmp_path / str(top), cells))
        assert (None if point is None else point.prompt_tokens) == expected
        if expected is None:
            assert [p.rule for p in problems] == ["several-prompt-lengths"]
            assert problems[0].value == "512, 564" and problems[0].message.endswith(WHY)


def test_no_prompt_length_is_an_error_that_says_why_it_is_needed(tmp_path: Path) -> None:
    # write_grid's records hold neither a swept length nor total_input_tokens.
    bare = write_grid(tmp_path / "bare", {(1, 0): spread(100.0), (1, 3): spread(150.0)})
    measured = write_context_grid(tmp_path / "v", {(1, k, 512): spread(100.0) for k in (0, 3)})
    for root, settings in ((bare, {}), (measured, {"context_var": "none"})):
        point, _, problems = _sole(root, **settings)
        assert point is None
        assert [p.rule for p in problems] == ["no-prompt-length"]
        assert problems[0].message.endswith(WHY)
    _, _, problems = _sole(measured, context_var="my_len")
    assert [p.rule for p in problems] == ["context-field-missing"]
