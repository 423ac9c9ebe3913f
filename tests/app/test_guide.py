"""lib/app/guide.py: the grouped problems and their fixes, the controls' words.

Each expectation is derived from the sweep written in the test (the arithmetic in comments)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import polars as pl
import pytest
from sweep_builder import WORKED_EXAMPLE, grid, write_grid

from lib.analysis import analyse
from lib.app import guide
from lib.objectives import OBJECTIVES_BY_NAME
from lib.problems import Problem, Severity
from lib.settings import DEFAULT_K_VAR, GLOBAL_K_VAR, Fields, Options, Settings
from lib.sweeps import load_experiment

STEADY = grid([1, 64], {0: [100.0, 100.5, 99.5], 3: [150.0, 150.5, 149.5]})


def test_one_run_per_cell_is_one_group_with_its_fix(tmp_path: Path) -> None:
    folder = write_grid(tmp_path, grid([1, 8], {0: [100.0], 1: [120.0], 3: [130.0]}))
    settings = Settings()
    analysis = analyse(load_experiment(folder), settings, Options())
    groups = guide.problem_groups(analysis.result.problems, settings, Fields())
    (group,) = [group for group in groups if group.rule == "too-few-runs"]
    # 2 anchors x 3 K = 6 cells of one run each, fewer than the default 3.
    assert len(group.problems) == 6
    assert group.sentence.startswith("6 cells have 1 run(s), fewer than “Minimum runs per cell”")
    assert group.fix == guide.Fix("min_runs", 1, "Set “Minimum runs per cell” to 1")


def test_a_seed_pick_below_the_confidence_is_marked(tmp_path: Path) -> None:
    # The worked example: the seed picks K=2 at batch size 1, whose P(eps-good) is about 0.35.
    folder = write_grid(tmp_path, WORKED_EXAMPLE)
    analysis = analyse(load_experiment(folder), Settings(), Options())
    picks = guide.pick_confidence(analysis)
    row = picks.filter(pl.col("anchor") == 1).row(0, named=True)
    assert row["selected_k"] == 2 and row["p_eps_good"] < 0.9 and row["below_confidence"]
    # At a confidence of 0.3 the same pick is sure enough.
    assert (
        not guide.pick_confidence(
            analyse(load_experiment(folder), Settings(), Options(confidence=0.3))
        )
        .filter(pl.col("anchor") == 1)["below_confidence"]
        .item()
    )


def test_noisy_cells_name_the_threshold_and_offer_the_largest_mad(tmp_path: Path) -> None:
    # K=3 at batch size 1: runs 120, 150, 180, median 150, MAD 30, relative MAD 0.2 > 0.1.
    cells = {**STEADY, (1, 3): [120.0, 150.0, 180.0]}
    folder = write_grid(tmp_path, cells)
    settings = Settings()
    analysis = analyse(load_experiment(folder), settings, Options())
    (group,) = guide.problem_groups(analysis.result.errors, settings, Fields())
    assert group.rule == "noisy-objective"
    assert "the largest is 0.200" in group.sentence
    assert group.fix is not None and group.fix.value == 0.2
    assert group.fix.control == "max_objective_relative_mad"
    fixed = dataclasses.replace(settings, max_objective_relative_mad=group.fix.value)
    assert analyse(load_experiment(folder), fixed, Options()).result.ok


def test_the_k_field_fix_points_to_the_other_choice(tmp_path: Path) -> None:
    folder = write_grid(tmp_path, STEADY, spec="static")
    settings = Settings()
    analysis = analyse(load_experiment(folder), settings, Options())
    groups = guide.problem_groups(analysis.result.problems, settings, Fields())
    fixes = {group.rule: group.fix for group in groups if group.fix}
    assert fixes["missing-k"] == guide.Fix(
        "k_var", GLOBAL_K_VAR, "Set “K is recorded as” to num_speculative_tokens"
    )
    fields = Fields(k_var=GLOBAL_K_VAR)
    analysis = analyse(load_experiment(folder, k_var=GLOBAL_K_VAR), settings, Options())
    groups = guide.problem_groups(analysis.result.problems, settings, fields)
    fixes = {group.rule: group.fix for group in groups if group.fix}
    # Static K read as num_speculative_tokens: the global is each server's K, and no global
    # is checked (as in the seed), so no second fix is needed.
    assert "mixed-global-k" not in fixes and "missing-k" not in fixes
    assert DEFAULT_K_VAR != GLOBAL_K_VAR


def test_groups_put_errors_first_then_the_largest() -> None:
    from lib.problems import Problem

    problems = (
        Problem(Severity.WARNING, "w", "a warning"),
        Problem(Severity.ERROR, "small", "one"),
        Problem(Severity.ERROR, "big", "two"),
        Problem(Severity.ERROR, "big", "two"),
    )
    groups = guide.problem_groups(problems, Settings(), Fields())
    assert [(group.rule, len(group.problems)) for group in groups] == [
        ("big", 2),
        ("small", 1),
        ("w", 1),
    ]
    assert groups[0].sentence == "2 x two"


@pytest.mark.parametrize(
    ("flag", "label"),
    [
        ("--min-runs", "Minimum runs per cell"),
        ("--k-var", "K is recorded as"),
        ("--allow-mixed-global-k", "Allow a global K that differs between runs"),
        ("--max-objective-relative-mad", "Noise threshold (relative MAD)"),
    ],
)
def test_flags_read_as_the_controls_labels(flag: str, label: str) -> None:
    assert guide.in_app_words(f"try {flag} here") == f"try “{label}” here"


def test_a_longer_word_is_not_a_flag() -> None:
    assert guide.in_app_words("--k-varied") == "--k-varied"


def test_objectives_are_fields_that_vary_and_are_measured(tmp_path: Path) -> None:
    folder = write_grid(
        tmp_path,
        STEADY,
        request_goodput=None,
        burst=7.0,
        request_throughput=None,
        mean_e2el_ms=None,
    )
    choices = guide.objective_choices(load_experiment(folder), OBJECTIVES_BY_NAME, Fields())
    # Every record field of this sweep but output_throughput is the same in every run (or
    # null everywhere, as request_goodput without --goodput), or a counter or the anchor.
    assert choices == ["output_throughput"]


def test_objectives_of_a_real_sample_put_the_known_first() -> None:
    sweep = load_experiment(Path(__file__).parents[2] / "data" / "sample_sweeps" / "sonnet-like")
    choices = guide.objective_choices(sweep, OBJECTIVES_BY_NAME, Fields())
    known = [name for name in OBJECTIVES_BY_NAME if name in choices]
    assert choices[: len(known)] == known and "output_throughput" in known
    for absent in ("max_concurrency", "completed", "failed", "num_prompts", "run_number"):
        assert absent not in choices, absent
    for name in choices:
        assert sweep.runs[name].drop_nulls().n_unique() > 1, name


def test_the_default_experiment_is_the_quick_starts() -> None:
    assert guide.default_experiment({"a": Path("a"), "sonnet-like": Path("b")}) == "sonnet-like"
    assert guide.default_experiment({"b": Path("b"), "a": Path("a")}) == "b"


def test_every_control_has_help() -> None:
    assert set(guide.CONTROL_LABELS) <= set(guide.CONTROL_HELP)


def test_every_fix_sets_a_control_the_app_builds_from_the_fixable_values() -> None:
    # The app builds the controls a fix sets from one state, fixable_values, and the K field
    # from its own: a fix of any other control would set nothing. One problem of each rule
    # that has a fix.
    def problem(rule: str, value: str | None = None) -> Problem:
        return Problem(Severity.ERROR, rule, "a message", value=value, extra={"runs": 1})

    problems = (
        problem("too-few-runs"),
        problem("noisy-objective", "0.25"),
        problem("mixed-global-k"),
        problem("missing-k"),
        problem("unstable-acceptance"),
        problem("unequal-k-sets"),
    )
    groups = guide.problem_groups(problems, Settings(), Fields())
    fixes = {group.rule: group.fix for group in groups}
    assert all(fix is not None for fix in fixes.values()), fixes
    fixable = guide.fixable_values(Settings())
    assert {fix.control for fix in fixes.values() if fix} == {*fixable, "k_var"}


def test_a_bracketed_sweep_is_refused_then_judged_with_the_fix(tmp_path: Path) -> None:
    # K=3 measured at 1 only: the seed's refusal, one anchor (64) lacking it.
    cells = grid([1, 64], {0: [100.0] * 3, 5: [130.0] * 3}) | {(1, 3): [120.0] * 3}
    folder = write_grid(tmp_path, cells)
    settings = Settings()
    analysis = analyse(load_experiment(folder), settings, Options())
    (group,) = [
        g
        for g in guide.problem_groups(analysis.result.problems, settings, Fields())
        if g.rule == "unequal-k-sets"
    ]
    assert group.sentence.startswith("1 anchor lack K measured at other anchors")
    assert group.fix == guide.Fix(
        "allow_unmeasured_k", True, "Tick “Judge a K missing at some anchors (unimodal in K)”"
    )
    # Applied: the sweep is tuned. At 64 K=3 lies between the only K measured there, K=0 and
    # K=5, with no measured K beyond either, so nothing rules it out: a warning, not an error.
    fixed = dataclasses.replace(settings, allow_unmeasured_k=True)
    analysis = analyse(load_experiment(folder), fixed, Options())
    assert analysis.result.ok
    rules = {(p.rule, p.anchor, p.k) for p in analysis.result.problems}
    assert ("unmeasured-k", 64, 3) in rules
