"""lib/gates.py: the seed's run gates (README, "The policy", rules 1-3 and 6), one rule at a
time: health, objective, acceptance values, global K, servers, and what the gates report.

Each test builds the smallest sweep in which breaking its rule changes an assertion
(:mod:`tuning_helpers`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from sweep_builder import combo_name, grid, record, write_combo, write_grid
from tuning_helpers import (
    ACCEPTANCE,
    DELETE,
    cell_row,
    healthy_grid,
    one_problem,
    replace_run,
    rules,
    tuned,
)

from lib.problems import Severity
from lib.schedule import tune
from lib.settings import GLOBAL_K_VAR, Settings
from lib.sweeps import load_experiment

# --------------------------------------------------------------------------- health gate


def test_failed_requests_exclude_the_run(tmp_path: Path) -> None:
    root = healthy_grid(tmp_path)
    replace_run(root, 1, 3, 1, failed=2, completed=98)
    result = tuned(root, min_runs=2)
    problem = one_problem(result, "failed-requests")
    assert (problem.severity, problem.anchor, problem.k) == (Severity.ERROR, 1, 3)
    assert "failed=2" in (problem.value or "")
    # only one rule fires for the run: failed > 0 implies completed != num_prompts
    assert "incomplete-run" not in rules(result)
    assert cell_row(result, 1, 3)["num_runs"] == 2
    assert not result.ok


def test_incomplete_run_is_unhealthy(tmp_path: Path) -> None:
    root = healthy_grid(tmp_path)
    replace_run(root, 64, 0, 2, completed=99)
    result = tuned(root, min_runs=2)
    problem = one_problem(result, "incomplete-run")
    assert (problem.anchor, problem.k) == (64, 0)
    assert "completed=99 num_prompts=100" in (problem.value or "")
    assert cell_row(result, 64, 0)["num_runs"] == 2


def test_failure_file_is_unhealthy(tmp_path: Path) -> None:
    root = healthy_grid(tmp_path)
    write_combo(root / combo_name(1, 0), [], summary=False, failures={3: {"error": "timeout"}})
    result = tuned(root)
    problem = one_problem(result, "failed-run")
    assert (problem.anchor, problem.k) == (1, 0)
    assert problem.files == (f"{combo_name(1, 0)}/run=3.failure.json",)
    assert not result.ok


@pytest.mark.parametrize(
    "missing", [("failed",), ("completed",), ("num_prompts",), ("failed", "completed")]
)
def test_missing_health_fields_are_not_failures(tmp_path: Path, missing: tuple[str, ...]) -> None:
    root = healthy_grid(tmp_path)
    for anchor, k in [(1, 0), (1, 3), (64, 0), (64, 3)]:
        for run in range(3):
            replace_run(root, anchor, k, run, **dict.fromkeys(missing, DELETE))
    result = tuned(root)
    assert result.ok, [p.describe() for p in result.problems]


# --------------------------------------------------------------------------- objective gate


def test_objective_absent_from_every_run(tmp_path: Path) -> None:
    result = tuned(healthy_grid(tmp_path), objective="no_such_metric")
    problem = one_problem(result, "missing-objective")
    assert problem.field == "no_such_metric"
    assert result.schedule is None


def test_null_goodput_says_the_bench_ran_without_goodput(tmp_path: Path) -> None:
    # the builder writes request_goodput: null, as vLLM does without --goodput
    result = tuned(healthy_grid(tmp_path), objective="request_goodput")
    problem = one_problem(result, "missing-objective")
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
    root = healthy_grid(tmp_path)
    replace_run(root, 1, 3, 0, output_throughput=value)
    result = tuned(root)
    problem = one_problem(result, rule)
    assert problem.field == "output_throughput"
    assert problem.value == shown
    assert problem.files == (f"{combo_name(1, 3)}/summary.json",)
    assert cell_row(result, 1, 3)["num_runs"] == 2


@pytest.mark.parametrize("text", ["123.4", " 123.4", "1.234e2"])
def test_an_objective_written_as_a_numeric_text_is_that_number(tmp_path: Path, text: str) -> None:
    # The seed reads the objective with float(): the run counts, with its value.
    root = healthy_grid(tmp_path)
    replace_run(root, 1, 3, 0, output_throughput=text)
    result = tuned(root)
    assert not [p for p in result.problems if p.rule.endswith("-objective")]
    assert cell_row(result, 1, 3)["num_runs"] == 3
    assert 123.4 in load_experiment(root).runs["output_throughput"].to_list()


def test_zero_objective_is_rejected_only_when_minimising(tmp_path: Path) -> None:
    root = healthy_grid(tmp_path)
    replace_run(root, 1, 3, 0, output_throughput=0.0, median_tpot_ms=0.0)
    assert "out-of-range-objective" not in rules(tuned(root, min_runs=2))
    minimised = tuned(root, objective="median_tpot_ms", direction="minimize")
    problem = one_problem(minimised, "out-of-range-objective")
    assert problem.expected == "a number from 1e-100 to 1e+100"


# --------------------------------------------------------------------------- global K


def test_default_k_var_requires_the_global(tmp_path: Path) -> None:
    result = tuned(healthy_grid(tmp_path, global_k=None))
    problem = one_problem(result, "missing-global-k")
    assert problem.field == GLOBAL_K_VAR
    assert not result.ok


def test_other_k_var_does_not_require_the_global(tmp_path: Path) -> None:
    root = healthy_grid(tmp_path, global_k=None)
    result = tuned(root, k_var="speculative_config.num_speculative_tokens_per_batch_size")
    assert "missing-global-k" in rules(result)
    static = write_grid(tmp_path / "static", grid([1], {1: [1.0] * 3, 2: [2.0] * 3}), spec="static")
    assert "missing-global-k" not in rules(
        tuned(static, k_var=GLOBAL_K_VAR, allow_mixed_global_k=True)
    )


def _mixed_global(root: Path) -> Path:
    write_grid(root, grid([1, 64], {0: [100.0] * 3}), global_k=7)
    write_grid(root, grid([1, 64], {3: [150.0] * 3}), global_k=5)
    return root


def test_mixed_global_is_an_error(tmp_path: Path) -> None:
    result = tuned(_mixed_global(tmp_path))
    problem = one_problem(result, "mixed-global-k")
    assert (problem.severity, problem.value) == (Severity.ERROR, "5, 7")
    assert "--allow-mixed-global-k" in problem.message
    assert not result.ok


def test_mixed_global_is_a_note_when_allowed(tmp_path: Path) -> None:
    result = tuned(_mixed_global(tmp_path), allow_mixed_global_k=True)
    assert one_problem(result, "mixed-global-k").severity is Severity.NOTE
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
    root = healthy_grid(tmp_path)
    write_grid(root, grid([1, 64], {9: [200.0] * 3}))
    result = tuned(root)
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
    healthy_grid(tmp_path)
    # Two servers, "k0" (the grid's K=0, with a config) and "eagle-k5" (K on its command
    # line), both read as K=0 at batch size 1.
    write_combo(tmp_path / "SERVE--eagle-k5-BENCH--c1", _no_spec_runs([300.0] * 3))
    result = tuned(tmp_path)
    problem = one_problem(result, "pooled-servers")
    assert (problem.anchor, problem.k) == (1, 0)
    # In the order the folders are read (by name).
    assert problem.value == "SERVE--eagle-k5, SERVE--k0"
    assert problem.files == (
        "SERVE--eagle-k5-BENCH--c1/summary.json",
        "SERVE--k0-BENCH--c1/summary.json",
    )
    assert "--k-var" in (problem.expected or "")
    # Pooled, the six runs would have made K=0 the winner at batch size 1 (median 200 > 150).
    assert cell_row(result, 1, 0)["num_runs"] == 0
    reasons = result.excluded_runs.filter(pl.col("anchor") == 1)["reason"].unique().to_list()
    assert reasons == ["runs of different servers"]


def test_one_server_in_several_folders_is_one_server(tmp_path: Path) -> None:
    # A sweep resumed into a second experiment folder: the same serve combo, more runs.
    write_grid(tmp_path / "first", {(1, 0): [100.0] * 2, (1, 3): [150.0] * 3})
    write_grid(tmp_path / "second", {(1, 0): [101.0]})
    result = tuned(tmp_path)
    assert "pooled-servers" not in rules(result)
    assert cell_row(result, 1, 0)["num_runs"] == 3


def test_folders_outside_the_sweep_layout_are_not_compared(tmp_path: Path) -> None:
    healthy_grid(tmp_path)
    write_combo(tmp_path / "my-extra-runs", _no_spec_runs([100.0] * 3))
    assert "pooled-servers" not in rules(tuned(tmp_path))


# --------------------------------------------------------------------------- acceptance values


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
    root = healthy_grid(tmp_path)
    runs = [record(1, 0, run_number=n, **{ACCEPTANCE: value}) for n in range(3)]
    write_combo(root / combo_name(1, 0), runs)
    result = tuned(root, acceptance=ACCEPTANCE)
    problem = one_problem(result, rule)
    assert (problem.anchor, problem.k, problem.field) == (1, 0, ACCEPTANCE)
    assert shown in (problem.value or "")
    assert cell_row(result, 1, 0)["num_runs"] == 0
    # Without --acceptance-var the field is not read: the same runs tune.
    assert tuned(root).ok


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
    assert "non-numeric-objective" in rules(result)
    assert "missing-objective" not in rules(result)
    acceptance = [p for p in result.problems if p.rule == "non-numeric-acceptance"]
    assert [(p.k, p.value) for p in acceptance] == [(0, "'n/a'"), (3, "'n/a'")]


def test_an_acceptance_written_as_numeric_text_is_that_number(tmp_path: Path) -> None:
    root = healthy_grid(tmp_path)
    runs = [record(1, 3, run_number=n, **{ACCEPTANCE: f"{2.0 + n / 10}"}) for n in range(3)]
    write_combo(root / combo_name(1, 3), runs)
    result = tuned(root, acceptance=ACCEPTANCE)
    assert result.ok
    assert cell_row(result, 1, 3)["median_acceptance"] == 2.1


# --------------------------------------------------------------------------- what the gates report


def test_excluded_runs_are_reported_with_reasons(tmp_path: Path) -> None:
    root = healthy_grid(tmp_path)
    replace_run(root, 1, 3, 1, failed=3)
    replace_run(root, 64, 0, 0, output_throughput=-5.0)
    excluded = tuned(root).excluded_runs.sort("anchor")
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
    result = tuned(healthy_grid(tmp_path, spec="none"))
    assert result.ok, [p.describe() for p in result.problems]
    note = one_problem(result, "k0-without-speculation")
    assert note.severity is Severity.NOTE
    assert note.message.startswith("6 K=0 run(s)")
    with_config = tuned(healthy_grid(tmp_path / "with-config"))
    assert "k0-without-speculation" not in rules(with_config, Severity.NOTE)


def test_record_with_literal_dotted_keys_is_checked_like_a_nested_one(tmp_path: Path) -> None:
    nested = tuned(_mixed_global(tmp_path / "nested"))
    write_grid(tmp_path / "dotted", grid([1, 64], {0: [100.0] * 3}), keys="dotted", global_k=7)
    write_grid(tmp_path / "dotted", grid([1, 64], {3: [150.0] * 3}), keys="dotted", global_k=5)
    dotted = tuned(tmp_path / "dotted")
    assert rules(dotted) == rules(nested) == ["mixed-global-k"]


def test_record_builder_default_is_healthy() -> None:
    # guards the fixtures above: a default record passes every health rule
    run = record(1, 3)
    assert run["failed"] == 0 and run["completed"] == run["num_prompts"]
