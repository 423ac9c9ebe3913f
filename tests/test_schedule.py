"""lib/schedule.py: the seed's policy (README, "The policy"), one rule at a time, and the
:class:`Schedule` type (merge, vLLM's validation, lookup, JSON and TensorRT-LLM forms).

Each test builds the smallest sweep in which breaking its rule changes an assertion. Runs
within a cell are identical unless a test needs spread, so MAD = 0 and the conservative score
is the median: the expected numbers then follow from the values written.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from sweep_builder import combo_name, grid, record, write_combo, write_grid

from lib.deploy.result_file import result_text
from lib.problems import Problem, Severity
from lib.schedule import NO_SCHEDULE, Schedule, TuningResult, merge_picks, tune, validate_schedule
from lib.settings import DEFAULT_K_VAR, GLOBAL_K_VAR, Settings
from lib.sweeps import load_experiment


def _tune(root: Path, k_var: str = DEFAULT_K_VAR, **settings: Any) -> TuningResult:
    return tune(load_experiment(root, k_var=k_var), Settings(**settings))


def _rules(result: TuningResult, severity: Severity = Severity.ERROR) -> list[str]:
    return sorted(p.rule for p in result.problems if p.severity is severity)


def _one(result: TuningResult, rule: str) -> Problem:
    (problem,) = [p for p in result.problems if p.rule == rule]
    return problem


def _cell(result: TuningResult, anchor: int, k: int) -> dict[str, Any]:
    (row,) = result.cells.filter((pl.col("anchor") == anchor) & (pl.col("k") == k)).to_dicts()
    return row


def _healthy_grid(root: Path, **options: Any) -> Path:
    """Anchors 1 and 64, K 0 and 3; K=3 wins at 1 (150 vs 100), K=0 at 64 (100 vs 80)."""
    cells = {
        (1, 0): [100.0] * 3,
        (1, 3): [150.0] * 3,
        (64, 0): [100.0] * 3,
        (64, 3): [80.0] * 3,
    }
    return write_grid(root, cells, **options)


def _replace_run(root: Path, anchor: int, k: int, run_number: int, **fields: Any) -> None:
    """Overwrite one run of a cell written by write_grid (in summary.json and run=N.json)."""
    folder = root / combo_name(anchor, k)
    runs = json.loads((folder / "summary.json").read_text())
    runs[run_number] = {**runs[run_number], **fields}
    for name in [name for name, value in fields.items() if value is _DELETE]:
        del runs[run_number][name]
    write_combo(folder, runs)


_DELETE = object()


# --------------------------------------------------------------------------- the happy path


def test_healthy_sweep_gives_the_expected_schedule(tmp_path: Path) -> None:
    result = _tune(_healthy_grid(tmp_path))
    assert result.ok, [p.describe() for p in result.problems]
    # anchor 1 picks K=3, anchor 64 picks K=0; anchor 1 covers 1..63, the last up to 64
    assert result.schedule == Schedule(((1, 63, 3), (64, 64, 0)))
    assert result.configured_global_k == 7
    assert result.decisions["selected_k"].to_list() == [3, 0]
    # vs K=0 at anchor 1: 150 / 100 - 1 = +50 %; at anchor 64 the pick is K=0 itself
    assert result.decisions["vs_k0_percent"].to_list() == pytest.approx([50.0, 0.0])


@pytest.mark.parametrize(
    "settings", [{"objective": "source"}, {"acceptance": "k"}, {"relative_tolerance": 1.5}]
)
def test_invalid_settings_tune_nothing(tmp_path: Path, settings: dict[str, Any]) -> None:
    # Under these settings every gate would speak of the setting, not of the sweep (a text
    # objective, a tolerance past 100 %): only the setting is reported.
    result = _tune(_healthy_grid(tmp_path), **settings)
    assert _rules(result) == ["invalid-setting"]
    assert (result.cells.height, result.decisions.height, result.schedule) == (0, 0, None)
    assert result.max_k_observed == 3
    # The frames keep their schemas: whoever shows them needs no special case.
    healthy = _tune(tmp_path)
    assert result.cells.schema == healthy.cells.schema
    assert result.decisions.schema == healthy.decisions.schema


# --------------------------------------------------------------------------- health gate


def test_failed_requests_exclude_the_run(tmp_path: Path) -> None:
    root = _healthy_grid(tmp_path)
    _replace_run(root, 1, 3, 1, failed=2, completed=98)
    result = _tune(root, min_runs=2)
    problem = _one(result, "failed-requests")
    assert (problem.severity, problem.anchor, problem.k) == (Severity.ERROR, 1, 3)
    assert "failed=2" in (problem.value or "")
    # only one rule fires for the run: failed > 0 implies completed != num_prompts
    assert "incomplete-run" not in _rules(result)
    assert _cell(result, 1, 3)["num_runs"] == 2
    assert not result.ok


def test_incomplete_run_is_unhealthy(tmp_path: Path) -> None:
    root = _healthy_grid(tmp_path)
    _replace_run(root, 64, 0, 2, completed=99)
    result = _tune(root, min_runs=2)
    problem = _one(result, "incomplete-run")
    assert (problem.anchor, problem.k) == (64, 0)
    assert "completed=99 num_prompts=100" in (problem.value or "")
    assert _cell(result, 64, 0)["num_runs"] == 2


def test_failure_file_is_unhealthy(tmp_path: Path) -> None:
    root = _healthy_grid(tmp_path)
    write_combo(root / combo_name(1, 0), [], summary=False, failures={3: {"error": "timeout"}})
    result = _tune(root)
    problem = _one(result, "failed-run")
    assert (problem.anchor, problem.k) == (1, 0)
    assert problem.files == (f"{combo_name(1, 0)}/run=3.failure.json",)
    assert not result.ok


@pytest.mark.parametrize(
    "missing", [("failed",), ("completed",), ("num_prompts",), ("failed", "completed")]
)
def test_missing_health_fields_are_not_failures(tmp_path: Path, missing: tuple[str, ...]) -> None:
    root = _healthy_grid(tmp_path)
    for anchor, k in [(1, 0), (1, 3), (64, 0), (64, 3)]:
        for run in range(3):
            _replace_run(root, anchor, k, run, **dict.fromkeys(missing, _DELETE))
    result = _tune(root)
    assert result.ok, [p.describe() for p in result.problems]


# --------------------------------------------------------------------------- objective gate


def test_objective_absent_from_every_run(tmp_path: Path) -> None:
    result = _tune(_healthy_grid(tmp_path), objective="no_such_metric")
    problem = _one(result, "missing-objective")
    assert problem.field == "no_such_metric"
    assert result.schedule is None


def test_null_goodput_says_the_bench_ran_without_goodput(tmp_path: Path) -> None:
    # the builder writes request_goodput: null, as vLLM does without --goodput
    result = _tune(_healthy_grid(tmp_path), objective="request_goodput")
    problem = _one(result, "missing-objective")
    assert "--goodput" in problem.message
    assert len(problem.files) == 4


@pytest.mark.parametrize(
    ("value", "rule", "shown"),
    [
        # A text that is no finite number, and a boolean (the seed's float(True) is 1.0, a
        # throughput no run measured): not numbers.
        ("fast", "non-numeric-objective", "'fast'"),
        ("inf", "non-numeric-objective", "'inf'"),
        (True, "non-numeric-objective", "true"),
        (float("nan"), "non-finite-objective", "nan"),
        (float("inf"), "non-finite-objective", "inf"),
        (-1.0, "out-of-range-objective", "-1.0"),
        # Past any unit's plausible range: damage, and their logs would overflow the gains.
        (1e300, "out-of-range-objective", "1e+300"),
        (1e-300, "out-of-range-objective", "1e-300"),
    ],
)
def test_unusable_objective_values(tmp_path: Path, value: object, rule: str, shown: str) -> None:
    root = _healthy_grid(tmp_path)
    _replace_run(root, 1, 3, 0, output_throughput=value)
    result = _tune(root)
    problem = _one(result, rule)
    assert problem.field == "output_throughput"
    assert problem.value == shown
    assert problem.files == (f"{combo_name(1, 3)}/summary.json",)
    assert _cell(result, 1, 3)["num_runs"] == 2


@pytest.mark.parametrize("text", ["123.4", " 123.4", "1.234e2"])
def test_an_objective_written_as_a_numeric_text_is_that_number(tmp_path: Path, text: str) -> None:
    # The seed reads the objective with float(): the run counts, with its value.
    root = _healthy_grid(tmp_path)
    _replace_run(root, 1, 3, 0, output_throughput=text)
    result = _tune(root)
    assert not [p for p in result.problems if p.rule.endswith("-objective")]
    assert _cell(result, 1, 3)["num_runs"] == 3
    assert 123.4 in load_experiment(root).runs["output_throughput"].to_list()


def test_zero_objective_is_rejected_only_when_minimising(tmp_path: Path) -> None:
    root = _healthy_grid(tmp_path)
    _replace_run(root, 1, 3, 0, output_throughput=0.0, median_tpot_ms=0.0)
    assert "out-of-range-objective" not in _rules(_tune(root, min_runs=2))
    minimised = _tune(root, objective="median_tpot_ms", direction="minimize")
    problem = _one(minimised, "out-of-range-objective")
    assert problem.expected == "a number from 1e-100 to 1e+100"


# --------------------------------------------------------------------------- global K


def test_default_k_var_requires_the_global(tmp_path: Path) -> None:
    result = _tune(_healthy_grid(tmp_path, global_k=None))
    problem = _one(result, "missing-global-k")
    assert problem.field == GLOBAL_K_VAR
    assert not result.ok


def test_other_k_var_does_not_require_the_global(tmp_path: Path) -> None:
    root = _healthy_grid(tmp_path, global_k=None)
    result = _tune(root, k_var="speculative_config.num_speculative_tokens_per_batch_size")
    assert "missing-global-k" in _rules(result)
    static = write_grid(tmp_path / "static", grid([1], {1: [1.0] * 3, 2: [2.0] * 3}), spec="static")
    assert "missing-global-k" not in _rules(
        _tune(static, k_var=GLOBAL_K_VAR, allow_mixed_global_k=True)
    )


def _mixed_global(root: Path) -> Path:
    write_grid(root, grid([1, 64], {0: [100.0] * 3}), global_k=7)
    write_grid(root, grid([1, 64], {3: [150.0] * 3}), global_k=5)
    return root


def test_mixed_global_is_an_error(tmp_path: Path) -> None:
    result = _tune(_mixed_global(tmp_path))
    problem = _one(result, "mixed-global-k")
    assert (problem.severity, problem.value) == (Severity.ERROR, "5, 7")
    assert "--allow-mixed-global-k" in problem.message
    assert not result.ok


def test_mixed_global_is_a_note_when_allowed(tmp_path: Path) -> None:
    result = _tune(_mixed_global(tmp_path), allow_mixed_global_k=True)
    assert _one(result, "mixed-global-k").severity is Severity.NOTE
    assert result.ok
    # the largest global is exported
    assert result.configured_global_k == 7


def test_one_sweep_tuned_again_with_other_settings_is_tuned_as_a_fresh_one(
    tmp_path: Path,
) -> None:
    # tune keeps what the run-level gates found per sweep and gate settings (the app's sliders
    # reuse it): each setting those gates read must give what a freshly loaded sweep gives.
    root = _mixed_global(tmp_path)
    write_grid(root, grid([1], {0: [0.0]}), global_k=7)  # a zero: minimising rejects it
    shared = load_experiment(root)
    for settings in [
        Settings(),
        Settings(allow_mixed_global_k=True),
        Settings(allow_mixed_global_k=True, direction="minimize"),
        Settings(allow_mixed_global_k=True, objective="median_tpot_ms"),
        Settings(allow_mixed_global_k=True, relative_tolerance=0.2, min_runs=4),
        Settings(),
    ]:
        fresh = tune(load_experiment(root), settings)
        again = tune(shared, settings)
        assert again.problems == fresh.problems, settings
        assert again.excluded_runs.equals(fresh.excluded_runs), settings
        assert again.cells.equals(fresh.cells), settings
        assert again.schedule == fresh.schedule, settings


def test_k_above_the_global(tmp_path: Path) -> None:
    root = _healthy_grid(tmp_path)
    write_grid(root, grid([1, 64], {9: [200.0] * 3}))
    result = _tune(root)
    problems = [p for p in result.problems if p.rule == "k-above-global"]
    assert [(p.anchor, p.k, p.value) for p in problems] == [(1, 9, "7"), (64, 9, "7")]
    assert set(result.excluded_runs.filter(pl.col("k") == 9)["reason"]) == {"K above the global"}


# --------------------------------------------------------------------------- servers


def _no_spec_runs(values: Sequence[float]) -> list[dict[str, Any]]:
    """Runs of a server whose K came from its command line: nothing in them says K."""
    return [
        record(1, 0, run_number=n, spec="none", output_throughput=v) for n, v in enumerate(values)
    ]


def test_runs_of_different_servers_are_not_pooled(tmp_path: Path) -> None:
    _healthy_grid(tmp_path)
    # Two servers, "k0" (the grid's K=0, with a config) and "eagle-k5" (K on its command
    # line), both read as K=0 at batch size 1.
    write_combo(tmp_path / "SERVE--eagle-k5-BENCH--c1", _no_spec_runs([300.0] * 3))
    result = _tune(tmp_path)
    problem = _one(result, "pooled-servers")
    assert (problem.anchor, problem.k) == (1, 0)
    # In the order the folders are read (by name).
    assert problem.value == "SERVE--eagle-k5, SERVE--k0"
    assert problem.files == (
        "SERVE--eagle-k5-BENCH--c1/summary.json",
        "SERVE--k0-BENCH--c1/summary.json",
    )
    assert "--k-var" in (problem.expected or "")
    # Pooled, the six runs would have made K=0 the winner at batch size 1 (median 200 > 150).
    assert _cell(result, 1, 0)["num_runs"] == 0
    reasons = result.excluded_runs.filter(pl.col("anchor") == 1)["reason"].unique().to_list()
    assert reasons == ["runs of different servers"]


def test_one_server_in_several_folders_is_one_server(tmp_path: Path) -> None:
    # A sweep resumed into a second experiment folder: the same serve combo, more runs.
    write_grid(tmp_path / "first", {(1, 0): [100.0] * 2, (1, 3): [150.0] * 3})
    write_grid(tmp_path / "second", {(1, 0): [101.0]})
    result = _tune(tmp_path)
    assert "pooled-servers" not in _rules(result)
    assert _cell(result, 1, 0)["num_runs"] == 3


def test_folders_outside_the_sweep_layout_are_not_compared(tmp_path: Path) -> None:
    _healthy_grid(tmp_path)
    write_combo(tmp_path / "my-extra-runs", _no_spec_runs([100.0] * 3))
    assert "pooled-servers" not in _rules(_tune(tmp_path))


# --------------------------------------------------------------------------- cell gates


def test_min_runs(tmp_path: Path) -> None:
    write_grid(tmp_path, {(1, 0): [100.0] * 2, (1, 3): [150.0] * 3})
    result = _tune(tmp_path)
    problem = _one(result, "too-few-runs")
    assert (problem.anchor, problem.k, problem.value) == (1, 0, "2")
    assert _cell(result, 1, 0)["status"] == "rejected"
    assert _tune(tmp_path, min_runs=2).ok


def test_noise_gate_keeps_a_cell_exactly_at_the_threshold(tmp_path: Path) -> None:
    # median 100, deviations [10, 0, 10] -> MAD 10, relative MAD 10 / 100 = 0.1 = threshold
    write_grid(tmp_path, {(1, 0): [90.0, 100.0, 110.0], (1, 3): [150.0] * 3})
    result = _tune(tmp_path)
    assert _cell(result, 1, 0)["relative_mad"] == 0.1
    assert _cell(result, 1, 0)["status"] == "kept"
    assert result.ok


def test_noise_gate_rejects_a_cell_just_above_the_threshold(tmp_path: Path) -> None:
    # MAD 10.01, relative MAD 0.1001 > 0.1
    write_grid(tmp_path, {(1, 0): [89.99, 100.0, 110.01], (1, 3): [150.0] * 3})
    result = _tune(tmp_path)
    problem = _one(result, "noisy-objective")
    assert (problem.anchor, problem.k, problem.value) == (1, 0, "0.1001")
    assert _cell(result, 1, 0)["status"] == "rejected"
    assert not result.ok
    assert _tune(tmp_path, max_objective_relative_mad=0.2).ok


ACCEPTANCE = "spec_decode_acceptance_length"


def test_acceptance_may_be_absent_at_k0(tmp_path: Path) -> None:
    # the builder writes spec_decode_* fields only for K > 0, as vLLM does
    result = _tune(_healthy_grid(tmp_path), acceptance=ACCEPTANCE)
    assert result.ok, [p.describe() for p in result.problems]
    assert _cell(result, 1, 3)["median_acceptance"] == 2.5  # 1 + 0.5 * 3


def test_partial_acceptance_is_an_error(tmp_path: Path) -> None:
    root = _healthy_grid(tmp_path)
    _replace_run(root, 64, 3, 1, **{ACCEPTANCE: _DELETE})
    result = _tune(root, acceptance=ACCEPTANCE)
    problem = _one(result, "partial-acceptance")
    assert (problem.anchor, problem.k) == (64, 3)
    assert _cell(result, 64, 3)["status"] == "rejected"


def test_k_above_zero_without_acceptance_is_an_error(tmp_path: Path) -> None:
    root = _healthy_grid(tmp_path)
    for run in range(3):
        _replace_run(root, 1, 3, run, **{ACCEPTANCE: _DELETE})
    result = _tune(root, acceptance=ACCEPTANCE)
    problem = _one(result, "missing-acceptance")
    assert (problem.anchor, problem.k, problem.field) == (1, 3, ACCEPTANCE)


@pytest.mark.parametrize(
    ("value", "rule", "shown"),
    [
        ("abc", "non-numeric-acceptance", "'abc'"),
        (float("nan"), "non-finite-acceptance", "nan"),
        (-1.5, "negative-acceptance", "-1.5"),
    ],
    ids=["text", "nan", "negative"],
)
def test_an_unusable_acceptance_is_an_error_at_k0_too(
    tmp_path: Path, value: Any, rule: str, shown: str
) -> None:
    """K=0 may lack an acceptance, but one that is there must be a number >= 0 (the seed's
    float() refuses "abc", its finite check NaN, its sign check -1.5, whatever the K): the
    runs are excluded, one error names them. Numeric text ("2.5") is that number."""
    root = _healthy_grid(tmp_path)
    runs = [record(1, 0, run_number=n, **{ACCEPTANCE: value}) for n in range(3)]
    write_combo(root / combo_name(1, 0), runs)
    result = _tune(root, acceptance=ACCEPTANCE)
    problem = _one(result, rule)
    assert (problem.anchor, problem.k, problem.field) == (1, 0, ACCEPTANCE)
    assert shown in (problem.value or "")
    assert _cell(result, 1, 0)["num_runs"] == 0
    # Without --acceptance-var the field is not read: the same runs tune.
    assert _tune(root).ok


@pytest.mark.parametrize("metrics", [None, ["output_throughput", ACCEPTANCE]], ids=["app", "cli"])
def test_text_in_every_run_is_no_number_not_no_field(
    tmp_path: Path, metrics: list[str] | None
) -> None:
    """An objective or an acceptance that every run holds as text ("fast", "n/a": no numeric
    column at all) is reported as not a number, the same in the full load (the app) and in
    the load of the named fields (the CLI): the field is there."""
    for k in (0, 3):
        runs = [
            record(1, k, run_number=n, output_throughput="fast", **{ACCEPTANCE: "n/a"})
            for n in range(3)
        ]
        write_combo(tmp_path / combo_name(1, k), runs)
    sweep = load_experiment(tmp_path, metrics=metrics)
    result = tune(sweep, Settings(acceptance=ACCEPTANCE))
    assert "non-numeric-objective" in _rules(result)
    assert "missing-objective" not in _rules(result)
    acceptance = [p for p in result.problems if p.rule == "non-numeric-acceptance"]
    assert [(p.k, p.value) for p in acceptance] == [(0, "'n/a'"), (3, "'n/a'")]


def test_an_acceptance_written_as_numeric_text_is_that_number(tmp_path: Path) -> None:
    root = _healthy_grid(tmp_path)
    runs = [record(1, 3, run_number=n, **{ACCEPTANCE: f"{2.0 + n / 10}"}) for n in range(3)]
    write_combo(root / combo_name(1, 3), runs)
    result = _tune(root, acceptance=ACCEPTANCE)
    assert result.ok
    assert _cell(result, 1, 3)["median_acceptance"] == 2.1


def _unstable_acceptance(root: Path) -> Path:
    _healthy_grid(root)
    # acceptance [1.5, 2.0, 2.5]: median 2, MAD 0.5, relative 0.25 > 0.1
    for run, value in enumerate([1.5, 2.0, 2.5]):
        _replace_run(root, 1, 3, run, **{ACCEPTANCE: value})
    return root


def test_unstable_acceptance_is_a_warning(tmp_path: Path) -> None:
    result = _tune(_unstable_acceptance(tmp_path), acceptance=ACCEPTANCE)
    problem = _one(result, "unstable-acceptance")
    assert (problem.severity, problem.value) == (Severity.WARNING, "0.2500")
    assert _cell(result, 1, 3)["status"] == "kept"
    assert result.ok


def test_unstable_acceptance_is_an_error_when_strict(tmp_path: Path) -> None:
    root = _unstable_acceptance(tmp_path)
    result = _tune(root, acceptance=ACCEPTANCE, strict_acceptance_stability=True)
    assert _one(result, "unstable-acceptance").severity is Severity.ERROR
    assert _cell(result, 1, 3)["status"] == "rejected"
    assert not result.ok


# --------------------------------------------------------------------------- anchor grid


def test_anchors_must_start_at_one(tmp_path: Path) -> None:
    write_grid(tmp_path, grid([2, 64], {0: [100.0] * 3, 3: [150.0] * 3}))
    result = _tune(tmp_path)
    problem = _one(result, "anchors-not-from-1")
    assert problem.value == "2"
    assert not result.ok


def test_every_anchor_needs_the_same_k_set(tmp_path: Path) -> None:
    write_grid(tmp_path, grid([1, 64], {0: [100.0] * 3}) | {(1, 3): [150.0] * 3})
    result = _tune(tmp_path)
    problem = _one(result, "unequal-k-sets")
    assert (problem.anchor, problem.value) == (64, "0")
    assert not result.ok


# --------------------------------------------------------------------------- tie rule


def _two_k(root: Path, k0: float, k3: float, objective: str = "output_throughput") -> Path:
    return write_grid(root, {(1, 0): [k0] * 3, (1, 3): [k3] * 3}, objective=objective)


def test_tie_at_exactly_the_tolerance_goes_to_the_smaller_k(tmp_path: Path) -> None:
    # ratio 75 / 100 = 0.75 = 1 - 0.25: tied, and K=0 is the smaller
    result = _tune(_two_k(tmp_path, 75.0, 100.0), relative_tolerance=0.25)
    assert result.schedule == Schedule(((1, 1, 0),))
    assert result.decisions["tied_k"].to_list() == [[0, 3]]
    # selected vs best: 0.75 - 1 = -25 %
    assert result.decisions["vs_best_percent"].to_list() == pytest.approx([-25.0])


def test_just_outside_the_tolerance_the_best_wins(tmp_path: Path) -> None:
    # ratio 74.99 / 100 < 0.75
    result = _tune(_two_k(tmp_path, 74.99, 100.0), relative_tolerance=0.25)
    assert result.schedule == Schedule(((1, 1, 3),))


def test_ties_rank_by_conservative_score_not_median(tmp_path: Path) -> None:
    # K=3: median 105, MAD 5 -> 105 - 1.4826 * 5 = 97.587; K=0: 100 -> K=0 is the best
    write_grid(tmp_path, {(1, 0): [100.0] * 3, (1, 3): [100.0, 105.0, 110.0]})
    assert _tune(tmp_path).schedule == Schedule(((1, 1, 0),))
    assert _cell(_tune(tmp_path), 1, 3)["conservative"] == pytest.approx(105 - 1.4826 * 5)
    # penalty 0 ranks by the median: 100 / 105 = 0.952 < 0.99, so K=3
    assert _tune(tmp_path, uncertainty_penalty=0.0).schedule == Schedule(((1, 1, 3),))


def test_minimise_direction(tmp_path: Path) -> None:
    root = _two_k(tmp_path, 10.0, 8.0, objective="median_tpot_ms")
    minimised = _tune(root, objective="median_tpot_ms", direction="minimize")
    # ratio of K=0 = best / value = 8 / 10 = 0.8 < 0.99: K=3, the lower latency, wins
    assert minimised.schedule == Schedule(((1, 1, 3),))
    assert _cell(minimised, 1, 0)["ratio"] == pytest.approx(0.8)
    # maximising the same numbers would prefer K=0
    assert _tune(root, objective="median_tpot_ms").schedule == Schedule(((1, 1, 0),))
    # 0.8 >= 1 - 0.2: tied, smaller K
    assert _tune(
        root, objective="median_tpot_ms", direction="minimize", relative_tolerance=0.2
    ).schedule == Schedule(((1, 1, 0),))


def test_minimising_penalty_adds_spread(tmp_path: Path) -> None:
    # K=3 TPOT [7, 8, 9]: conservative 8 + 1.4826 = 9.4826 > 9.0 of K=0 -> K=0 wins
    write_grid(tmp_path, {(1, 0): [9.0] * 3, (1, 3): [7.0, 8.0, 9.0]}, objective="median_tpot_ms")
    result = _tune(tmp_path, objective="median_tpot_ms", direction="minimize")
    assert _cell(result, 1, 3)["conservative"] == pytest.approx(9.4826)
    assert result.schedule == Schedule(((1, 1, 0),))


def test_no_pick_where_no_k_scores_above_zero(tmp_path: Path) -> None:
    # Every K measured 0 at batch 1: nothing to rank (the seed's "No positive conservative
    # objective for batch_size=1"), one error naming the anchor, and no schedule.
    write_grid(tmp_path / "zero", {(1, 1): [0.0] * 3, (1, 3): [0.0] * 3})
    result = _tune(tmp_path / "zero")
    assert not result.ok and result.schedule is None
    problem = _one(result, "no-positive-objective")
    assert (problem.anchor, problem.value) == (1, "0.0")
    assert result.decisions["selected_k"].to_list() == [None]
    # One K above 0 (the other side of the rule): it is picked, and nothing is refused.
    write_grid(tmp_path / "one", {(1, 1): [0.0] * 3, (1, 3): [0.5] * 3})
    result = _tune(tmp_path / "one")
    assert result.ok and result.schedule == Schedule(((1, 1, 3),))
    # The penalty can clip a score to 0 (median 1, MAD 1: 1 - 1.4826 < 0): the same refusal.
    write_grid(tmp_path / "clipped", {(1, 1): [0.0, 1.0, 2.0], (1, 3): [0.0, 1.0, 2.0]})
    result = _tune(tmp_path / "clipped", max_objective_relative_mad=1.0)
    assert _rules(result) == ["no-positive-objective", "undecided-anchor"]
    minimised = _tune(tmp_path / "one", objective="output_throughput", direction="minimize")
    assert "no-positive-objective" not in _rules(minimised)


def test_rejected_cells_are_never_selected(tmp_path: Path) -> None:
    # the best median (K=3) is noisy: relative MAD 0.2; K=0 is picked from what is left
    write_grid(tmp_path, {(1, 0): [100.0] * 3, (1, 3): [160.0, 200.0, 240.0]})
    result = _tune(tmp_path)
    assert result.decisions["selected_k"].to_list() == [0]
    assert _cell(result, 1, 3)["selected"] is False
    assert result.decisions["complete"].to_list() == [False]


# --------------------------------------------------------------------------- schedules


def test_merge_picks_merges_equal_neighbours() -> None:
    assert merge_picks([1, 64, 128, 256], [7, 0, 0, 0], 256) == [(1, 63, 7), (64, 256, 0)]


def test_merge_picks_keeps_non_monotone_choices() -> None:
    # K goes down, up again, then down: nothing is smoothed
    assert merge_picks([1, 8, 32, 64], [3, 1, 3, 0], 128) == [
        (1, 7, 3),
        (8, 31, 1),
        (32, 63, 3),
        (64, 128, 0),
    ]


def test_merge_picks_sorts_anchors() -> None:
    assert merge_picks([64, 1], [0, 3], 64) == [(1, 63, 3), (64, 64, 0)]


def test_non_monotone_schedule_end_to_end(tmp_path: Path) -> None:
    # the winner per anchor (all others 100): 1 -> K=3, 8 -> K=1, 32 -> K=3, 64 -> K=0
    winners = {1: 3, 8: 1, 32: 3, 64: 0}
    cells = {
        (anchor, k): [150.0 if k == winner else 100.0] * 3
        for anchor, winner in winners.items()
        for k in (0, 1, 3)
    }
    result = _tune(write_grid(tmp_path, cells))
    assert result.schedule == Schedule(((1, 7, 3), (8, 31, 1), (32, 63, 3), (64, 64, 0)))
    assert result.schedule.violations() == []


@pytest.mark.parametrize(
    ("schedule", "fragment"),
    [
        ([], "non-empty"),
        ("1-16", "non-empty"),
        ([[1, 16]], "not a list of 3 integers"),
        ([[1, 16, 2.0]], "not a list of 3 integers"),
        ([[1, 16, True]], "not a list of 3 integers"),
        ([[0, 16, 2]], "must be > 0"),
        ([[1, 16, 2], [20, -4, 1]], "must be > 0"),
        ([[1, 16, 2], [40, 20, 1]], "lo > hi"),
        ([[1, 16, -1]], "K must be >= 0"),
        ([[1, 16, 2], [16, 32, 1]], "overlap"),
        ([[2, 16, 2]], "not 1"),
    ],
)
def test_validate_schedule_rules(schedule: Any, fragment: str) -> None:
    violations = validate_schedule(schedule)
    assert any(fragment in violation for violation in violations), violations


def test_validate_schedule_allows_gaps_and_any_order() -> None:
    assert validate_schedule([[64, 128, 0], [1, 7, 3]]) == []


SCHEDULE_WITH_GAP = [[1, 7, 5], [16, 63, 3], [64, 128, 0]]


@pytest.mark.parametrize(
    ("batch_size", "global_k", "expected"),
    [
        (1, 7, 5),
        (10, 7, 5),  # in the gap 8..15: the previous range's K
        (16, 7, 3),
        (500, 7, 0),  # past the end: the last K
        (1, 4, 4),  # clamped to the global
        (20, 2, 2),
    ],
)
def test_k_at_a_batch_size(batch_size: int, global_k: int, expected: int) -> None:
    schedule, _ = Schedule.parse(SCHEDULE_WITH_GAP)
    assert schedule is not None
    assert schedule.k_at(batch_size, global_k) == expected


def test_max_batch_size_must_equal_the_largest_anchor(tmp_path: Path) -> None:
    root = _healthy_grid(tmp_path)
    problem = _one(_tune(root, max_batch_size=256), "max-batch-size")
    assert (problem.value, problem.expected) == ("256", "64")
    assert _tune(root, max_batch_size=64).ok


def test_invalid_settings_are_problems(tmp_path: Path) -> None:
    result = _tune(_healthy_grid(tmp_path), relative_tolerance=1.0, min_runs=0)
    assert _rules(result).count("invalid-setting") == 2
    assert not result.ok


# --------------------------------------------------------------------------- the whole result


def test_every_problem_and_every_cell_is_reported(tmp_path: Path) -> None:
    cells = grid([1, 8, 64], {0: [100.0] * 3, 3: [150.0] * 3})
    cells[(8, 3)] = [100.0, 150.0, 200.0]  # noisy: relative MAD 1/3
    write_grid(tmp_path, cells)
    _replace_run(tmp_path, 1, 0, 0, failed=1)
    _replace_run(tmp_path, 64, 3, 2, output_throughput=float("nan"))
    write_grid(tmp_path, {(64, 5): [1.0] * 3})  # K=5 only at anchor 64
    result = _tune(tmp_path)
    assert set(_rules(result)) >= {
        "failed-requests",
        "non-finite-objective",
        "noisy-objective",
        "too-few-runs",
        "unequal-k-sets",
    }
    assert result.cells.select("anchor", "k").rows() == [
        (1, 0),
        (1, 3),
        (8, 0),
        (8, 3),
        (64, 0),
        (64, 3),
        (64, 5),
    ]
    rejected = result.cells.filter(pl.col("status") == "rejected")
    assert rejected.select("anchor", "k").rows() == [(1, 0), (8, 3), (64, 3)]
    assert rejected["reason"].null_count() == 0
    assert not result.ok


def test_excluded_runs_are_reported_with_reasons(tmp_path: Path) -> None:
    root = _healthy_grid(tmp_path)
    _replace_run(root, 1, 3, 1, failed=3)
    _replace_run(root, 64, 0, 0, output_throughput=-5.0)
    excluded = _tune(root).excluded_runs.sort("anchor")
    source_1_3 = f"{combo_name(1, 3)}/summary.json"
    source_64_0 = f"{combo_name(64, 0)}/summary.json"
    assert excluded.select("source", "position", "anchor", "k").rows() == [
        (source_1_3, 1, 1, 3),
        (source_64_0, 0, 64, 0),
    ]
    reasons = excluded["reason"].to_list()
    assert "failed > 0" in reasons[0]
    assert ">= 0" in reasons[1]


def test_k0_server_without_speculation_gets_a_note(tmp_path: Path) -> None:
    result = _tune(_healthy_grid(tmp_path, spec="none"))
    assert result.ok, [p.describe() for p in result.problems]
    note = _one(result, "k0-without-speculation")
    assert note.severity is Severity.NOTE
    assert note.message.startswith("6 K=0 run(s)")
    with_config = _tune(_healthy_grid(tmp_path / "with-config"))
    assert "k0-without-speculation" not in _rules(with_config, Severity.NOTE)


def test_same_input_gives_identical_json(tmp_path: Path) -> None:
    cells = grid([1, 8, 64], {0: [100.0, 101.0, 99.0], 1: [120.0, 119.0, 121.0]})
    _healthy_grid(tmp_path / "a")
    write_grid(tmp_path / "a", cells)
    # the same files written in the opposite order into another folder
    _healthy_grid(tmp_path / "b")
    write_grid(tmp_path / "b", dict(reversed(list(cells.items()))))
    texts = [result_text(_tune(tmp_path / name)) for name in ("a", "a", "b")]
    assert texts[0] == texts[1] == texts[2]
    data = json.loads(texts[0])
    assert (
        data["num_speculative_tokens_per_batch_size"]
        == (_tune(tmp_path / "a").schedule or NO_SCHEDULE).to_json()
    )


def test_json_output_never_holds_nan(tmp_path: Path) -> None:
    # every run of K=3 has a NaN objective: its cell has no usable statistics
    write_grid(tmp_path, {(1, 0): [1.0] * 3, (1, 3): [float("nan")] * 3})
    data = json.loads(result_text(_tune(tmp_path)), parse_constant=_reject_constant)
    (decision,) = data["batch_decisions"]
    assert [c["k"] for c in decision["candidates"]] == [0, 3]


def _reject_constant(name: str) -> None:
    raise AssertionError(f"{name} in the JSON output")


def test_record_with_literal_dotted_keys_is_checked_like_a_nested_one(tmp_path: Path) -> None:
    nested = _tune(_mixed_global(tmp_path / "nested"))
    write_grid(tmp_path / "dotted", grid([1, 64], {0: [100.0] * 3}), keys="dotted", global_k=7)
    write_grid(tmp_path / "dotted", grid([1, 64], {3: [150.0] * 3}), keys="dotted", global_k=5)
    dotted = _tune(tmp_path / "dotted")
    assert _rules(dotted) == _rules(nested) == ["mixed-global-k"]


def test_run_files_and_summary_give_the_same_result(tmp_path: Path) -> None:
    _healthy_grid(tmp_path / "summary", run_files=False)
    _healthy_grid(tmp_path / "runs", summary=False)
    by_summary, by_runs = _tune(tmp_path / "summary"), _tune(tmp_path / "runs")
    assert by_summary.schedule == by_runs.schedule
    assert by_summary.cells.drop("files").equals(by_runs.cells.drop("files"))


def test_record_builder_default_is_healthy() -> None:
    # guards the fixtures above: a default record passes every health rule
    run = record(1, 3)
    assert run["failed"] == 0 and run["completed"] == run["num_prompts"]


# --------------------------------------------------------------------------- TensorRT-LLM form


def trtllm_k(bounds: dict[int, int], batch_size: int) -> int:
    """TensorRT-LLM's reading, written independently: the K of the smallest bound at or above
    the batch size."""
    return bounds[min(bound for bound in bounds if bound >= batch_size)]


def _schedule(ranges: list[list[int]]) -> Schedule:
    schedule, violations = Schedule.parse(ranges)
    assert schedule is not None, violations
    return schedule


def test_two_range_schedule_gives_one_bound_per_range() -> None:
    # [1, 63] runs K=7 and [64, 256] K=0: bounds 63 and 256.
    assert _schedule([[1, 63, 7], [64, 256, 0]]).to_trtllm() == {63: 7, 256: 0}


def test_a_gap_belongs_to_the_range_before_it_as_in_vllm() -> None:
    # vLLM: batch sizes 5-7 fall in a gap and inherit K=3 from [1, 4]; so the bound is 7.
    schedule = _schedule([[1, 4, 3], [8, 16, 1]])
    assert schedule.to_trtllm() == {7: 3, 16: 1}
    assert [schedule.k_at(b, 7) for b in (4, 5, 7, 8)] == [3, 3, 3, 1]


def test_equal_neighbours_merge() -> None:
    assert _schedule([[1, 8, 2], [9, 32, 2], [33, 64, 0]]).to_trtllm() == {32: 2, 64: 0}


def test_unsorted_input_is_read_in_batch_size_order() -> None:
    assert _schedule([[64, 256, 0], [1, 63, 7]]).to_trtllm() == {63: 7, 256: 0}


def test_dict_to_list_has_contiguous_ranges_from_one() -> None:
    assert Schedule.from_trtllm({"63": 7, "256": 0}) == (_schedule([[1, 63, 7], [64, 256, 0]]), [])
    assert Schedule.from_trtllm({256: 0, 4: 3, 63: 2}) == (
        _schedule([[1, 4, 3], [5, 63, 2], [64, 256, 0]]),
        [],
    )


def random_schedules(count: int) -> list[list[list[int]]]:
    """Valid vLLM schedules with gaps and equal neighbours, from a fixed seed."""
    rng = random.Random(20261129)
    schedules = []
    for _ in range(count):
        starts = sorted(rng.sample(range(2, 300), rng.randint(0, 5)))
        bounds = [1, *starts]
        schedule = []
        for index, lo in enumerate(bounds):
            end = bounds[index + 1] - 1 if index + 1 < len(bounds) else lo + rng.randint(0, 50)
            hi = rng.randint(lo, end)  # may leave a gap before the next range
            schedule.append([lo, hi, rng.randint(0, 4)])
        schedules.append(schedule)
    return schedules


@pytest.mark.parametrize("ranges", random_schedules(40))
def test_round_trip_runs_the_same_k_at_every_batch_size(ranges: list[list[int]]) -> None:
    schedule = _schedule(ranges)
    bounds = schedule.to_trtllm()
    back, problems = Schedule.from_trtllm(bounds)
    assert back is not None and problems == [] and back.violations() == []
    last = max(hi for _, hi, _ in ranges)
    for batch_size in range(1, last + 1):
        expected = schedule.k_at(batch_size, 10)
        assert trtllm_k(bounds, batch_size) == expected
        assert back.k_at(batch_size, 10) == expected
    # dict -> list -> dict is the identity: the exported dict has no redundant bound.
    assert back.to_trtllm() == bounds
    assert all(a != b for a, b in itertools.pairwise(bounds.values()))


@pytest.mark.parametrize(
    ("ranges", "message"),
    [
        ([], "non-empty"),
        ([[2, 8, 1]], "starts at 2"),
        ([[1, 8, 1], [4, 16, 0]], "overlap"),
        ([[1, 8, -1]], "K must be >= 0"),
    ],
)
def test_invalid_vllm_schedules_are_refused_with_vllms_rule(
    ranges: list[list[int]], message: str
) -> None:
    schedule, violations = Schedule.parse(ranges)
    assert schedule is None
    assert any(message in violation for violation in violations), violations
    with pytest.raises(ValueError, match=message):
        Schedule(tuple((lo, hi, k) for lo, hi, k in ranges)).to_trtllm()


@pytest.mark.parametrize(
    ("bounds", "message"),
    [
        ({}, "non-empty"),
        ({"0": 3}, "key '0' is not a batch size"),
        ({"x": 3}, "key 'x' is not a batch size"),
        ({"8": -1}, "is not a draft length"),
        ({"8": 1.5}, "is not a draft length"),
        ({"8": 1, 8: 2}, "repeats the bound 8"),
    ],
)
def test_invalid_draft_len_schedules_name_the_entry(
    bounds: dict[object, object], message: str
) -> None:
    schedule, problems = Schedule.from_trtllm(bounds)
    assert schedule is None
    assert any(message in problem for problem in problems), problems


def test_json_forms() -> None:
    schedule = _schedule([[1, 63, 7], [64, 256, 0]])
    assert schedule.to_json() == [[1, 63, 7], [64, 256, 0]]
    assert schedule.json_text() == "[[1, 63, 7], [64, 256, 0]]"
    assert json.loads(schedule.json_text()) == schedule.to_json()
    assert NO_SCHEDULE.to_json() == [] and NO_SCHEDULE.json_text() == "[]"
    assert (schedule.largest_k, NO_SCHEDULE.largest_k) == (7, 0)
