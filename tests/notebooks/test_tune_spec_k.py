"""notebooks/tune_spec_k.py: the app, run headless.

``app.run()`` executes every cell as a script and returns the cells' definitions: the tests
compare those with what lib computes on its own (``analyse(load_experiment(...), Settings(...),
Options(...))``) and with the file the CLI writes for the same folder and flags, so the app
cannot drift from the CLI. Controls are replaced through ``defs`` the way a user would set them.
"""

from __future__ import annotations

import ast
import base64
import html
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import marimo as mo
import polars as pl
import pytest
from notebook_runner import (
    NOTEBOOK,
    load_notebook,
    load_sections,
    run_notebook,
    run_notebook_with_outputs,
)
from paths import BAD_INPUTS, REPO
from sweep_builder import WORKED_EXAMPLE, grid, write_grid

from lib.analysis import analyse
from lib.app import guide
from lib.app import support as app_support
from lib.cli.common import EXIT_BAD_INPUT, EXIT_OK
from lib.cli.main import build_parser, main
from lib.cli.tune import TuneArgs
from lib.context import analyse_contexts
from lib.context_axis import find_context_axis
from lib.deploy.registry import formats
from lib.deploy.result_file import result_text
from lib.deploy.traffic import with_traffic
from lib.deploy.tuning import deploy_analysis
from lib.deploy.verdict import verdict_in
from lib.loop.diff import DiffReport, DiffSettings, compare, read_side
from lib.loop.run.rounds import with_design_ks
from lib.present import tables
from lib.present.charts.confidence import confidence_charts
from lib.present.charts.schedule import schedule_chart
from lib.present.charts.small_multiples import objective_charts
from lib.problems import Severity
from lib.schedule import Schedule, TuningResult
from lib.settings import GLOBAL_K_VAR, ContextSettings, DeploySettings, Options, Settings
from lib.sweeps import load_experiment

#: Each context format's download, by its registered file name.
CONTEXT_FILES = {f.name: f.file_name for f in formats() if f.needs_grid}

SAMPLE_SWEEPS = REPO / "data" / "sample_sweeps"
SAMPLES = sorted(path for path in SAMPLE_SWEEPS.iterdir() if path.is_dir())

# WORKED_EXAMPLE (docs/confidence.md): at batch size 1 the seed's rule picks K=2 while the
# confident rule flags K=4's 160 run and, without it, K=4 leads: unresolved, provisional K=4.
# At batch size 64 both rules pick K=1 (P(eps-good) 0.97): resolved.
CONFIDENT = mo.ui.radio(app_support.POLICY_CHOICES, value="confident: P(eps-good)")
INTERPOLATED = mo.ui.checkbox(value=True)
#: Independent runs: no offsets between server starts assumed (--server-cv 0).
NO_SERVER_OFFSETS = mo.ui.slider(steps=[0.0, 0.01], value=0.0)


@pytest.fixture(scope="module")
def notebook() -> ModuleType:
    return load_notebook()


def _cli_file(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], *flags: str
) -> bytes | None:
    """What `tune-spec-k FOLDER FLAGS --output-json F` writes to F (None: exit 2, no file)."""
    output = tmp_path / "cli.json"
    output.unlink(missing_ok=True)
    status = main([str(folder), "--output-json", str(output), *flags])
    capsys.readouterr()
    assert status in (EXIT_OK, EXIT_BAD_INPUT)
    assert output.exists() == (status == EXIT_OK)
    return output.read_bytes() if status == EXIT_OK else None


def _assert_exports_the_cli_file(
    defs: dict[str, Any], cli_file: bytes | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The app's download is the CLI's file for the flags a user would type, and for the flags
    the app shows as its command line; it holds the schedule and picks the app shows; no
    download where the CLI refuses."""
    arguments = defs["cli_arguments"]
    parsed = TuneArgs.from_cli_args(build_parser().parse_args(arguments))
    assert (parsed.settings, parsed.options) == (defs["settings"], defs["options"])
    assert parsed.fields == defs["fields"]
    # Whether the page offers the file: the whole grid's errors count on a context sweep (the
    # result shown is one context point's), as they decide the CLI's exit.
    assert defs["shown"].ok == (cli_file is not None)
    shown = defs["result"]
    assert defs["schedule_file"] == cli_file
    assert _cli_file(Path(arguments[0]), tmp_path, capsys, *arguments[1:]) == cli_file
    if cli_file is None:
        return
    written = json.loads(cli_file)
    assert written["num_speculative_tokens_per_batch_size"] == shown.schedule.to_json()
    picks = [(d["batch_size"], d["selected_k"]) for d in written["batch_decisions"]]
    assert picks == shown.decisions.select("anchor", "selected_k").rows()


def _analysed(
    folder: Path, settings: Settings | None = None, options: Options | None = None, **loading: Any
) -> TuningResult:
    """What the CLI reports for ``folder``: lib on its own, without the notebook (for a sweep
    with a context axis, its shortest context point's analysis, which the page shows first),
    deployed as the CLI deploys a batch-only sweep."""
    sweep = load_experiment(folder, **loading)
    # A `tune-spec-k run` experiment is tuned with its design's K (rounds.json), as the CLI does.
    settings = with_design_ks(settings or Settings(), folder)
    axis, _ = find_context_axis(sweep, ContextSettings())
    if axis is not None:
        analysis = analyse_contexts(sweep, axis, settings, options).contexts[0]
        return deploy_analysis(analysis, DeploySettings())[0].result
    analysis = analyse(sweep, settings, options)
    # A batch-only sweep is weighed on the traffic mix (the sweep's own: no --traffic), last.
    return with_traffic(deploy_analysis(analysis, DeploySettings())[0], None).result


def _assert_same_result(shown: TuningResult, expected: TuningResult) -> None:
    assert shown.schedule == expected.schedule
    assert result_text(shown) == result_text(expected)
    assert shown.decisions.equals(expected.decisions)


def _rendered_sections(defs: dict[str, Any]) -> dict[str, str]:
    """Each section below the answer, built as opening it in the page builds it, as HTML."""
    sections = load_sections()
    analysis = defs["analysis"]
    built = {
        "Problems": sections.problems_section(defs["problem_groups"], defs["fix_buttons"]),
        "Data health": sections.health_section(analysis),
        "Decisions": sections.decisions_section(analysis, defs["options"], defs["cli_arguments"]),
        "How sure": sections.confidence_section(analysis),
        "What to measure next": sections.plan_section(analysis),
        "Rules compared": sections.rules_section(defs["rule_comparison"]),
        "Switch points": sections.switch_section(analysis),
        "Objective per batch size": sections.objective_section(analysis),
        "Acceptance": sections.acceptance_section(analysis),
        "Compare": sections.compare_section(
            defs["compare_picker"], defs["comparison"], defs["comparison_error"]
        ),
        "Downloads": sections.downloads_section(analysis, defs["engine_files"]),
    }
    return {name: mo.as_html(element).text for name, element in built.items()}


# --------------------------------------------------------------------------- the notebook


def test_without_arguments_it_opens_the_bundled_samples(
    notebook: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO.parent)  # the samples are found from the notebook, not the cwd
    defs = run_notebook(notebook, monkeypatch)
    assert defs["root"] == SAMPLE_SWEEPS.resolve()
    assert list(defs["experiments"]) == [path.name for path in SAMPLES]
    # README's quick start analyses sonnet-like: the dashboard opens on it.
    first = SAMPLE_SWEEPS / guide.DEFAULT_EXPERIMENT
    assert Path(defs["experiment_picker"].value).resolve() == first.resolve()
    # Every control starts at the seed's default, the decision rule too.
    assert defs["settings"] == Settings()
    assert defs["options"] == Options()
    _assert_same_result(defs["result"], _analysed(first))


def test_every_control_is_in_the_sidebar_grouped_by_what_builds_it_again(
    notebook: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Every control but the comparison's, the context picker's and the export format's (in the
    # page) is in the sidebar, in five parts, one per cell: the experiment's, the K field (its
    # own state: a new K field reads the sweep again), the other controls a one-click fix sets
    # (built from one state, so a fix builds them alone again), the lists built from the sweep,
    # and the rest (built once per folder). A part sent again for a change of one of these
    # sends no control of another.
    outputs, defs = run_notebook_with_outputs(notebook, monkeypatch, "--sweeps", str(SAMPLES[0]))
    parts = [out.text for out in outputs if isinstance(out, mo.sidebar)]
    keys_of = [
        {key for key, help in guide.CONTROL_HELP.items() if html.escape(help) in part}
        for part in parts
    ]
    in_page = {"compare", "context_point", "context_format"}
    assert set().union(*keys_of) == set(guide.CONTROL_HELP) - in_page
    assert len(keys_of) == 5
    assert keys_of[0] == {"experiment", "batch_size_var", "replica_var"}
    assert keys_of[1] == {"k_var"}
    assert keys_of[2] == set(defs["get_fixable"]())
    assert keys_of[3] == {"objective", "acceptance"}
    # One input per control shown (the two context fields: a dictionary's two).
    for part, keys in zip(parts, keys_of, strict=True):
        assert part.count("<marimo-ui-element") == len(keys), keys
    # Without an experiment: the page says so, and no control is shown.
    (tmp_path / "nothing").mkdir()
    outputs, defs = run_notebook_with_outputs(notebook, monkeypatch, "--sweeps", str(tmp_path))
    assert defs["experiments"] == {}
    assert not [out for out in outputs if isinstance(out, mo.sidebar)]
    assert any("No experiment in" in out.text for out in outputs if out is not None)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda path: path.name)
def test_each_sample_shows_what_lib_and_the_cli_give(
    sample: Path,
    notebook: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)  # a relative --sweeps is taken from the working directory
    defs = run_notebook(notebook, monkeypatch, "--sweeps", os.path.relpath(sample, tmp_path))
    assert list(defs["experiments"]) == [sample.name]
    expected = _analysed(sample.resolve())
    _assert_same_result(defs["result"], expected)
    _assert_exports_the_cli_file(
        defs, _cli_file(sample.resolve(), tmp_path, capsys), tmp_path, capsys
    )
    # The charts are built from this result: the chosen K they highlight are its decisions.
    rows = [
        row
        for chart in objective_charts(defs["result"])
        for row in chart.to_dict()["data"]["values"]
    ]
    chosen = {(row["anchor"], row["k"]) for row in rows if row.get("verdict") == "chosen"}
    decided = set(expected.decisions.drop_nulls("selected_k").select("anchor", "selected_k").rows())
    assert chosen == decided
    headline = defs["headline_chart"].to_dict()["data"]["values"]
    assert {
        (row["batch_size"], row["k"]) for row in headline if row.get("layer") == "chosen"
    } <= decided


def test_slider_settings_reach_the_policy_and_the_export(
    notebook: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sample = SAMPLE_SWEEPS / "sonnet-like"
    if not sample.is_dir():
        pytest.skip(f"sample sweep {sample} is missing")
    controls = {
        "tolerance_slider": mo.ui.slider(steps=app_support.slider_steps(0.3, 0.005), value=0.3),
        "penalty_slider": mo.ui.slider(steps=app_support.slider_steps(5.0, 0.1), value=2.5),
        "objective_picker": mo.ui.dropdown(["median_tpot_ms"], value="median_tpot_ms"),
        "acceptance_picker": mo.ui.dropdown(
            ["spec_decode_acceptance_length"], value="spec_decode_acceptance_length"
        ),
    }
    defs = run_notebook(notebook, monkeypatch, "--sweeps", str(sample), **controls)
    settings = Settings(
        objective="median_tpot_ms",
        direction="minimize",  # the direction chooser follows the objective
        acceptance="spec_decode_acceptance_length",
        relative_tolerance=0.3,
        uncertainty_penalty=2.5,
    )
    assert defs["settings"] == settings
    _assert_same_result(defs["result"], _analysed(sample, settings))
    flags = [
        "--objective-var=median_tpot_ms",
        "--objective-direction=minimize",
        "--acceptance-var=spec_decode_acceptance_length",
        "--relative-tolerance=0.3",
        "--uncertainty-penalty=2.5",
    ]
    _assert_exports_the_cli_file(
        defs, _cli_file(sample, tmp_path, capsys, *flags), tmp_path, capsys
    )


def test_decision_rule_controls_reach_the_analysis_and_the_export(
    notebook: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sweep = write_grid(tmp_path / "worked", WORKED_EXAMPLE)
    controls = {
        "policy_picker": CONFIDENT,
        "confidence_slider": mo.ui.slider(
            steps=app_support.slider_steps(1.0, 0.01, 0.5), value=0.8
        ),
        "interpolated_checkbox": INTERPOLATED,
    }
    defs = run_notebook(notebook, monkeypatch, "--sweeps", str(sweep), **controls)
    options = Options(policy="confident", confidence=0.8, interpolated_schedule=True)
    assert defs["options"] == options
    _assert_same_result(defs["result"], _analysed(sweep, Settings(), options))
    flags = ["--policy", "confident", "--confidence", "0.8", "--interpolated-schedule"]
    cli_file = _cli_file(sweep, tmp_path, capsys, *flags)
    _assert_exports_the_cli_file(defs, cli_file, tmp_path, capsys)
    assert cli_file is not None
    written = json.loads(cli_file)
    assert written["decision_policy"]["policy"] == "confident"
    assert written["switch_points"]["schedule_emitted"] == "interpolated"


def test_the_confidence_views_on_the_worked_example(
    notebook: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sweep = write_grid(tmp_path / "worked", WORKED_EXAMPLE)
    # The published example's model: independent runs (no offsets between server starts).
    defs = run_notebook(
        notebook, monkeypatch, "--sweeps", str(sweep), server_cv_slider=NO_SERVER_OFFSETS
    )
    result, report = defs["result"], defs["analysis"].report
    # The seed's rule is reported (the default): K=2 at batch size 1.
    assert result.schedule == Schedule(((1, 63, 2), (64, 64, 1)))
    # Batch size 1 is unresolved, with the provisional K the confident rule would take.
    (line,) = app_support.unresolved_lines(result, report)
    assert line.startswith("batch_size=1: unresolved, provisional K=4")
    assert "the reported pick K=2" in line
    table = tables.confidence_table(result, report)
    assert table.select("batch size", "status", "confident K", "reported K").rows() == [
        (1, "unresolved", 4, 2),
        (64, "resolved", 1, 1),
    ]
    style = app_support.highlight_rows(table, "status", "unresolved")
    assert style("0", "status", "unresolved") == app_support.HIGHLIGHT
    assert style("1", "status", "resolved") == {}
    # The flagged run is listed with its file, and the pick at batch size 1 depends on it.
    flagged = tables.flagged_runs_table(report)
    assert flagged.select("batch size", "K", "value", "the pick depends on it").rows() == [
        (1, 4, 160.0, True)
    ]
    assert flagged["file"].item().startswith("SERVE--k4-BENCH--c1/")
    # The charts: titles carry the status, the picked bars are the reported picks.
    specs = [chart.to_dict() for chart in confidence_charts(result, report)]
    titles = [spec["title"]["text"] for spec in specs]
    assert titles == ["batch size 1: unresolved", "batch size 64: resolved"]
    rows = [row for spec in specs for row in spec["data"]["values"]]
    picked = {(row["anchor"], row["k"]) for row in rows if row.get("role") == "picked"}
    assert picked == {(1, 2), (64, 1)}
    # The two rules differ at batch size 1 only.
    comparison = defs["rule_comparison"]
    differs = comparison.table().filter(pl.col("differs"))
    assert differs.select("batch size", "seed's K", "confident K").rows() == [(1, 2, 4)]
    assert comparison.confident.schedule == Schedule(((1, 63, 4), (64, 64, 1)))
    assert "`[[1, 63, 4], [64, 64, 1]]`" in comparison.summary()
    # The plan reruns the three contenders at batch size 1 and adds an anchor between 1 and 64.
    plan = defs["analysis"].plan
    assert tables.rerun_table(plan).select("batch size", "K").rows() == [
        (1, 2),
        (1, 3),
        (1, 4),
    ]
    assert tables.new_anchor_table(plan)["batch size"].to_list() == [8]  # sqrt(1 x 64)


def test_noisy_sample_is_refused_by_the_seed_rule_and_weighed_by_the_confident_one(
    notebook: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sample = SAMPLE_SWEEPS / "noisy"
    if not sample.is_dir():
        pytest.skip(f"sample sweep {sample} is missing")
    seed = run_notebook(notebook, monkeypatch, "--sweeps", str(sample))
    assert {problem.rule for problem in seed["result"].errors} == {"noisy-objective"}
    assert seed["schedule_file"] is None
    defs = run_notebook(notebook, monkeypatch, "--sweeps", str(sample), policy_picker=CONFIDENT)
    result = defs["result"]
    _assert_same_result(result, _analysed(sample, Settings(), Options(policy="confident")))
    assert result.ok and result.schedule is not None
    # The noisy cell is weighed, with a warning instead of an error; a low run is flagged.
    warnings = app_support.problems_of(result, Severity.WARNING)
    assert "noisy-objective" in {problem.rule for problem in warnings}
    assert tables.flagged_runs_table(defs["analysis"].report).height >= 1
    cli_file = _cli_file(sample, tmp_path, capsys, "--policy", "confident")
    _assert_exports_the_cli_file(defs, cli_file, tmp_path, capsys)


def _log_mean(values: list[float]) -> float:
    return sum(math.log(value) for value in values) / len(values)


def test_switch_points_are_drawn_on_the_schedule_chart(
    notebook: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sample = SAMPLE_SWEEPS / "sonnet-like"
    if not sample.is_dir():
        pytest.skip(f"sample sweep {sample} is missing")
    defs = run_notebook(notebook, monkeypatch, "--sweeps", str(sample))
    step = defs["result"].schedule
    # sonnet-like picks K=7 at batch size 1 and K=0 from 64 on: one switch between 1 and 64.
    assert step is not None and [k for _, _, k in step] == [7, 0]
    # Independently: each K's log speed-up over K=0 is the mean log throughput of its runs
    # minus K=0's; K=7's advantage falls linearly in log batch size from 1 to 64 and crosses 0
    # at the crossover; the switch is the first integer batch size from there on (a tie goes to
    # the smaller K, K=0).
    runs = load_experiment(sample).runs
    advantage = {}
    for anchor in (1, 64):
        at = runs.filter(pl.col("anchor") == anchor)
        means = {
            k: _log_mean(at.filter(pl.col("k") == k)["output_throughput"].to_list()) for k in (0, 7)
        }
        advantage[anchor] = means[0] - means[7]
    share = advantage[1] / (advantage[1] - advantage[64])
    crossover = math.exp(share * math.log(64))
    switch_at = math.ceil(crossover)
    interpolated = [[1, switch_at - 1, 7], [switch_at, 256, 0]]
    drawn = schedule_chart(defs["result"], defs["analysis"].switch_points)
    rows = drawn.to_dict()["data"]["values"]
    (switch,) = [row for row in rows if row["layer"] == "switch"]
    assert switch["batch_size"] == switch_at and switch["change"] == "K=7 -> K=0"
    assert switch["crossover"] == pytest.approx(crossover, abs=0.05)
    line = [(row["batch_size"], row["k"]) for row in rows if row["layer"] == "interpolated"]
    assert line == [(1, 7), (switch_at, 0), (256, 0)]
    assert "deployed: the step schedule" in str(drawn.to_dict()["title"])
    # Deploying the interpolated schedule exports it, as the CLI's --interpolated-schedule.
    defs = run_notebook(
        notebook, monkeypatch, "--sweeps", str(sample), interpolated_checkbox=INTERPOLATED
    )
    assert defs["result"].schedule.to_json() == interpolated
    drawn = schedule_chart(defs["result"], defs["analysis"].switch_points)
    assert "deployed: the interpolated schedule" in str(drawn.to_dict()["title"])
    cli_file = _cli_file(sample, tmp_path, capsys, "--interpolated-schedule")
    _assert_exports_the_cli_file(defs, cli_file, tmp_path, capsys)


def test_invalid_settings_leave_the_confidence_views_empty_not_broken(
    notebook: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sweep = write_grid(tmp_path / "worked", WORKED_EXAMPLE)
    # A tolerance of 1.5 has no logarithm of 1 - tolerance: the CLI refuses it (exit 2).
    tolerance = mo.ui.slider(steps=[1.5], value=1.5)
    defs = run_notebook(notebook, monkeypatch, "--sweeps", str(sweep), tolerance_slider=tolerance)
    assert defs["analysis"].report is None
    assert defs["rule_comparison"] is None and defs["analysis"].plan is None
    sections = _rendered_sections(defs)
    assert "No anchor is resolved or provisional" in sections["How sure"]
    assert "No measurement plan" in sections["What to measure next"]
    assert "resolved**" not in sections["How sure"]
    assert "invalid-setting" in {problem.rule for problem in defs["result"].errors}
    cli_file = _cli_file(sweep, tmp_path, capsys, "--relative-tolerance", "1.5")
    _assert_exports_the_cli_file(defs, cli_file, tmp_path, capsys)


UNUSABLE_SETTINGS = {
    # control overrides, then the same as (load_experiment arguments, Settings arguments)
    "goodput without --goodput": (
        {"objective_picker": mo.ui.dropdown(["request_goodput"], value="request_goodput")},
        {},
        {"objective": "request_goodput"},
    ),
    "too many runs required": (
        {"min_runs_slider": mo.ui.slider(1, 10, 1, value=10)},
        {},
        {"min_runs": 10},
    ),
    "no noise allowed": (
        {"noise_slider": mo.ui.slider(steps=[0.0, 0.1], value=0.0)},
        {},
        {"max_objective_relative_mad": 0.0},
    ),
    "a batch-size field no run has": (
        {"batch_size_var_input": mo.ui.text(value="batch")},
        {"batch_size_var": "batch"},
        {},
    ),
}


@pytest.mark.parametrize("case", UNUSABLE_SETTINGS)
def test_settings_that_leave_nothing_usable_are_shown_not_raised(
    case: str, notebook: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    sample = SAMPLE_SWEEPS / "sonnet-like"
    if not sample.is_dir():
        pytest.skip(f"sample sweep {sample} is missing")
    controls, loading, settings = UNUSABLE_SETTINGS[case]
    defs = run_notebook(notebook, monkeypatch, "--sweeps", str(sample), **controls)
    expected = _analysed(sample, Settings(**settings), **loading)
    assert not expected.ok
    _assert_same_result(defs["result"], expected)
    assert defs["schedule_file"] is None
    # Every section still renders, and none claims what errors rule out.
    sections = _rendered_sections(defs)
    assert "Every anchor is resolved" not in sections["How sure"]
    assert "nothing to measure" not in sections["What to measure next"]
    assert defs["verdict"].state == "cannot-tune"


def test_real_static_k_sweep_with_the_matching_controls(
    real_data: Path,
    notebook: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = real_data / "qwen3-32b-fp8-eagle3-tp2"
    defs = run_notebook(notebook, monkeypatch, "--sweeps", str(folder))
    experiment = Path(defs["experiment_picker"].value)
    assert experiment == folder / "qwen3_32b_fp8_tp2_complete"
    # As recorded (global K varies, no schedule field), the seed's defaults refuse it...
    shown = defs["result"]
    assert {"missing-k", "mixed-global-k"} <= {problem.rule for problem in shown.errors}
    _assert_exports_the_cli_file(defs, _cli_file(experiment, tmp_path, capsys), tmp_path, capsys)
    # ...and with K read from num_speculative_tokens it gives the CLI's file.
    defs = run_notebook(
        notebook,
        monkeypatch,
        "--sweeps",
        str(folder),
        k_var_picker=mo.ui.dropdown(app_support.K_VAR_CHOICES, value="num_speculative_tokens"),
        mixed_global_checkbox=mo.ui.checkbox(value=True),
    )
    settings = Settings(allow_mixed_global_k=True)
    expected = _analysed(experiment, settings, k_var=GLOBAL_K_VAR)
    assert expected.ok
    _assert_same_result(defs["result"], expected)
    flags = ["--k-var", GLOBAL_K_VAR, "--allow-mixed-global-k"]
    cli_file = _cli_file(experiment, tmp_path, capsys, *flags)
    _assert_exports_the_cli_file(defs, cli_file, tmp_path, capsys)


def test_real_single_run_experiments_from_a_folder_of_experiments(
    real_data: Path,
    notebook: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = real_data / "qwen3-32b-h100-single-run"
    names = sorted(path.name for path in folder.iterdir() if path.is_dir())
    assert len(names) == 6, names
    controls = {
        "k_var_picker": mo.ui.dropdown(app_support.K_VAR_CHOICES, value="num_speculative_tokens"),
        "mixed_global_checkbox": mo.ui.checkbox(value=True),
        "min_runs_slider": mo.ui.slider(1, 10, 1, value=1),
    }
    settings = Settings(min_runs=1, allow_mixed_global_k=True)
    flags = ["--k-var", GLOBAL_K_VAR, "--allow-mixed-global-k", "--min-runs", "1"]
    for name in names:
        picker = mo.ui.dropdown({name: folder / name}, value=name)
        defs = run_notebook(
            notebook, monkeypatch, "--sweeps", str(folder), experiment_picker=picker, **controls
        )
        assert list(defs["experiments"]) == names
        expected = _analysed(folder / name, settings, k_var=GLOBAL_K_VAR)
        _assert_same_result(defs["result"], expected)
        cli_file = _cli_file(folder / name, tmp_path, capsys, *flags)
        _assert_exports_the_cli_file(defs, cli_file, tmp_path, capsys)
        # K=0 here is a server without speculation, and the health view says so.
        assert "without speculative decoding" in app_support.baseline_text(defs["result"])
        # One run per cell and no noise probe: every P rests on the assumed run noise
        # (--run-cv, 2 % by default), and every unresolved anchor's line says so.
        report = defs["analysis"].report
        assert set(report.anchors["status"]) <= {"resolved", "unresolved"}
        assert set(report.anchors["noise_source"]) == {"assumed"}
        lines = app_support.unresolved_lines(defs["result"], report)
        assert len(lines) == (report.anchors["status"] == "unresolved").sum()
        assert all("assumes runs vary by 2.0% (--run-cv" in line for line in lines)


@pytest.mark.parametrize(
    "folder", sorted(path for path in BAD_INPUTS.iterdir() if path.is_dir()), ids=lambda p: p.name
)
def test_bad_input_is_shown_not_raised_and_agrees_with_the_cli(
    folder: Path,
    notebook: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    defs = run_notebook(notebook, monkeypatch, "--sweeps", str(folder))
    cli_file = _cli_file(folder, tmp_path, capsys)
    if "result" not in defs:
        # No run file at all: the picker cell stops with a callout, and the CLI fails too.
        assert defs["experiments"] == {}
        assert cli_file is None
        return
    _assert_exports_the_cli_file(defs, cli_file, tmp_path, capsys)
    if folder.name == "bad-prompt-lengths":
        # Issue 22: the page stuck at "Reading experiments" (a StopIteration in the axis); now
        # the axis's errors are on the page, as the CLI prints them.
        rules = {group.rule for group in defs["problem_groups"]}
        assert {"invalid-prompt-length", "non-numeric-prompt-length"} <= rules
    # The rest of the analysis is still there beside the errors.
    _rendered_sections(defs)


def test_sliders_never_reload_the_sweep() -> None:
    """marimo re-runs a cell when a cell argument changes: the one that reads the files may only
    take the experiment and the three field names, none of the policy's controls."""
    tree = ast.parse(NOTEBOOK.read_text(encoding="utf-8"))
    cells = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    loading = [
        cell
        for cell in cells
        if any(
            isinstance(node, ast.Call) and getattr(node.func, "id", None) == "load_experiment"
            for node in ast.walk(cell)
        )
    ]
    assert len(loading) == 1
    # The experiment, the three field names, the root and the query's start (neither changes
    # after the first cell: it says why nothing is read while no experiment is chosen): the
    # Fields are built from the three field controls in the same cell.
    arguments = {argument.arg for argument in loading[0].args.args}
    assert arguments == {
        "experiment_picker",
        "k_var_picker",
        "batch_size_var_input",
        "replica_var_input",
        "root",
        "query_start",
    }


def test_missing_root_stops_with_a_callout(
    notebook: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    defs = run_notebook(notebook, monkeypatch, "--sweeps", str(tmp_path / "absent"))
    assert "experiments" not in defs and "sweep" not in defs


def test_no_experiment_stops_with_a_callout(
    notebook: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "notes").mkdir()
    defs = run_notebook(notebook, monkeypatch, "--sweeps", str(tmp_path))
    assert defs["experiments"] == {}
    assert "experiment_picker" not in defs and "sweep" not in defs


def _root_with_links_outside(tmp_path: Path, root_name: str = "root") -> Path:
    """A root holding a copy of a sample ("clean"), a link to a copy outside ("linked out"),
    and a copy ("mixed") whose first summary.json is a link to a file outside."""
    root, outside = tmp_path / root_name, tmp_path / "outside"
    shutil.copytree(SAMPLE_SWEEPS / "sonnet-like", outside / "sonnet-like")
    (outside / "secret.txt").write_text('"SECRET outside the root"')  # a value errors show
    shutil.copytree(SAMPLE_SWEEPS / "sonnet-like", root / "clean")
    (root / "linked\nout").symlink_to(outside / "sonnet-like")
    shutil.copytree(SAMPLE_SWEEPS / "sonnet-like", root / "mixed")
    summary = min((root / "mixed").glob("*/summary.json"))
    summary.unlink()
    summary.symlink_to(outside / "secret.txt")
    return root


def test_links_outside_the_root_are_neither_listed_nor_read(
    notebook: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    root = _root_with_links_outside(tmp_path)
    link = min((root / "mixed").glob("*/summary.json")).relative_to(root).as_posix()
    mixed = mo.ui.dropdown({"mixed": root / "mixed"}, value="mixed")
    defs = run_notebook(notebook, monkeypatch, "--sweeps", str(root), compare_picker=mixed)
    assert list(defs["experiments"]) == ["clean", "mixed"]
    assert defs["experiment_refusals"] == [
        f"linked\\nout: a link that leads outside {root}; not listed",
        f"{link}: a link that leads outside {root}; not listed",
    ]
    # Comparing with the mixed experiment reads its folder only inside the root.
    assert "outside-root" in defs["comparison_error"]
    assert "SECRET" not in defs["comparison_error"]
    defs = run_notebook(notebook, monkeypatch, "--sweeps", str(root), experiment_picker=mixed)
    problems = defs["result"].problems
    assert [p.files for p in problems if p.rule == "outside-root"] == [(link.split("/", 1)[1],)]
    assert not any("SECRET" in problem.describe() for problem in problems)


def test_odd_folder_names_are_shown_escaped_on_one_line(
    notebook: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A blank line, backticks or HTML in a name must not turn into markup: the folder being
    read and the root are shown whole, escaped, each newline as ``\\n``."""
    root = _root_with_links_outside(tmp_path, "sweeps\n\n`odd` *<b>name</b>*")
    outputs, defs = run_notebook_with_outputs(notebook, monkeypatch, "--sweeps", str(root))
    assert "result" in defs
    (notes,) = [
        out.text for out in outputs if out is not None and "Reading experiments" in out.text
    ]
    shown_root = html.escape(app_support.shown_path(root))
    assert (
        f"Reading experiments in <code>{shown_root}</code> (root <code>{shown_root}</code>)"
        in notes
    )
    assert "\n\n" not in notes


def test_export_html_runs_every_cell(tmp_path: Path) -> None:
    sample = SAMPLE_SWEEPS / "sonnet-like"
    if not sample.is_dir():
        pytest.skip(f"sample sweep {sample} is missing")
    page = tmp_path / "app.html"
    command = [sys.executable, "-m", "marimo", "-q", "export", "html", str(NOTEBOOK)]
    command += ["-o", str(page), "-f", "--", "--sweeps", str(sample)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr  # 1 when any cell raised
    html = page.read_text(encoding="utf-8")
    expected = _analysed(sample)
    assert app_support.schedule_text(expected) in html
    verdict = verdict_in(expected)
    assert verdict is not None
    # The page's first answer is the CLI's verdict: its title and how many reasons (the
    # export escapes the markup twice over; the browser tests read the rendered page).
    count = len(verdict.reasons)
    assert "Data health" in html and verdict.title in html
    assert f"({count} reason{'s' if count != 1 else ''}):" in html
    # The download is eager: the static page carries the CLI's file itself.
    assert base64.b64encode(result_text(expected).encode()).decode() in html


def test_runs_as_a_python_script_from_another_folder(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    write_grid(broken, grid([1, 4], {0: [100.0, 100.0, 100.0], 3: [90.0, 900.0, 9.0]}))
    command = [sys.executable, str(NOTEBOOK), "--sweeps", "broken"]
    done = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr


# --------------------------------------------------------------------------- the loop's views


def picker(name: str) -> Any:
    return mo.ui.dropdown({name: SAMPLE_SWEEPS / name}, value=name)


def _sonnet_compared_with(
    notebook: ModuleType, monkeypatch: pytest.MonkeyPatch, other: str
) -> dict[str, Any]:
    """The app on the samples, showing sonnet-like compared with ``other``: both below the
    root, as the app only compares inside it."""
    return run_notebook(
        notebook,
        monkeypatch,
        "--sweeps",
        str(SAMPLE_SWEEPS),
        experiment_picker=picker("sonnet-like"),
        compare_picker=picker(other),
    )


def test_every_engine_download_is_the_cli_export(
    notebook: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sample = SAMPLE_SWEEPS / "sonnet-like"
    defs = run_notebook(notebook, monkeypatch, "--sweeps", str(sample))
    result = tmp_path / "result.json"
    assert main([str(sample), "--output-json", str(result)]) == 0
    capsys.readouterr()
    downloads = {download.format: download for download in defs["engine_files"]}
    assert list(downloads) == ["trtllm", "vllm", "sglang"]
    for name, download in downloads.items():
        exported = tmp_path / f"{name}.json"
        assert main(["export", str(result), "--format", name, "-o", str(exported)]) == 0
        printed = capsys.readouterr().out.splitlines()
        assert download.text == exported.read_text(), name
        assert list(download.lines) == printed[:-1], name  # less "Wrote PATH"
    # sonnet-like tunes to [[1, 63, 7], [64, 256, 0]] with num_speculative_tokens 7.
    assert json.loads(downloads["trtllm"].text) == {
        "max_draft_len": 7,
        "draft_len_schedule": {"1": 7, "63": 7, "256": 0},
    }


def test_no_engine_download_without_a_schedule(
    notebook: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    defs = run_notebook(notebook, monkeypatch, "--sweeps", str(SAMPLE_SWEEPS / "noisy"))
    assert not defs["result"].ok
    assert defs["engine_files"] is None


def test_nothing_is_compared_until_an_experiment_is_picked(
    notebook: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    defs = run_notebook(notebook, monkeypatch, "--sweeps", str(SAMPLE_SWEEPS))
    assert defs["compare_picker"].value is None
    assert defs["comparison"] is None
    assert defs["comparison_error"] is None


def test_comparison_is_what_diff_gives(
    notebook: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweeps = SAMPLE_SWEEPS / "sonnet-like"
    defs = _sonnet_compared_with(notebook, monkeypatch, "random-control")
    shown: DiffReport = defs["comparison"]
    settings = DiffSettings()
    a, _ = read_side(sweeps, settings)
    b, _ = read_side(SAMPLE_SWEEPS / "random-control", settings)
    assert a is not None and b is not None
    expected, _ = compare(a, b, settings)
    assert expected is not None
    assert shown.material and expected.material
    assert shown.rows.drop("reasons").equals(expected.rows.drop("reasons"))
    assert shown.rows["reasons"].to_list() == expected.rows["reasons"].to_list()
    assert shown.a.schedule == Schedule(((1, 63, 7), (64, 256, 0)))
    assert shown.b.schedule == Schedule(((1, 256, 0),))


def test_an_experiment_that_cannot_be_tuned_is_explained(
    notebook: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    defs = _sonnet_compared_with(notebook, monkeypatch, "noisy")
    assert defs["comparison"] is None
    assert "cannot be tuned with these settings" in defs["comparison_error"]
    assert "noisy-objective" in defs["comparison_error"]


def test_a_context_sweep_shows_its_grid_the_chosen_point_and_the_cli_s_files(
    notebook: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sample = SAMPLE_SWEEPS / "long-context"
    # The picker pointed at the longest prompt (index 3: 32768 tokens); a mix for the exports.
    controls = {
        "context_point_picker": mo.ui.dropdown({"32768": 3}, value="32768"),
        "context_controls": mo.ui.dictionary(
            {"context_var": mo.ui.text(value="auto"), "context_mix": mo.ui.text("512:1,32768:1")}
        ),
    }
    defs = run_notebook(notebook, monkeypatch, "--sweeps", str(sample), **controls)
    grid = defs["shown"].grid
    assert grid is not None and defs["shown"].point == 3
    # The page's schedule is the 32768-token point's (data/sample_sweeps/README.md: K=5 at
    # batch size 1, 3 elsewhere).
    assert defs["result"].decisions["selected_k"].to_list() == [5, 3, 3, 3]
    # The page's result download is the CLI's file, the grid included.
    assert defs["schedule_file"] == _cli_file(sample, tmp_path, capsys)
    block = str(defs["context_block"].text)
    assert "Chosen K by batch size and prompt length" in block
    result = tmp_path / "cli.json"
    for name, filename in CONTEXT_FILES.items():
        written = tmp_path / filename
        assert (
            main(
                [
                    "export",
                    str(result),
                    "--format",
                    name,
                    "--context-mix",
                    "512:1,32768:1",
                    "-o",
                    str(written),
                ]
            )
            == 0
        )
        capsys.readouterr()
        # The download's bytes travel base64-encoded in its data URL.
        encoded = base64.b64encode(written.read_bytes()).decode()
        assert encoded in block, name


def test_the_engine_settings_reach_the_schedule_the_page_and_the_downloads(
    notebook: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sample = SAMPLE_SWEEPS / "sonnet-like"
    # vLLM 0.33's token rule caps K=7 past 32 requests (on 0.34 the K=0 tier keeps it FULL).
    flags = ("--max-cudagraph-capture-size", "256", "--vllm-version", "0.33.0")
    defs = run_notebook(notebook, monkeypatch, "--sweeps", str(sample), *flags)
    # The CLI's file with the same flag: the capped schedule (K=7 fits 32 requests of 8 tokens).
    assert defs["schedule_file"] == _cli_file(sample, tmp_path, capsys, *flags)
    assert defs["result"].schedule.to_json()[:2] == [[1, 32, 7], [33, 36, 6]]
    assert "--max-cudagraph-capture-size=256" in defs["cli_arguments"]
    assert "--vllm-version=0.33.0" in defs["cli_arguments"]
    lines = app_support.capture_lines(defs["result"])
    assert lines and all(line.startswith("capped, not measured") for line in lines)
    downloads = {download.format: download for download in defs["engine_files"]}
    vllm_download = downloads["vllm"].text
    assert vllm_download is not None
    assert json.loads(vllm_download)["num_speculative_tokens_per_batch_size"][1] == [33, 36, 6]


def test_the_answer_says_what_the_verdict_assumes_as_the_cli_does(
    notebook: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The CLI's "assumes:" line (how much server starts are assumed to differ) is in the
    app's answer too, word for word, at the default and at another --server-cv."""
    sample = SAMPLE_SWEEPS / "sonnet-like"
    for controls, flags in (
        ({}, []),
        ({"server_cv_slider": NO_SERVER_OFFSETS}, ["--server-cv", "0"]),
    ):
        defs = run_notebook(notebook, monkeypatch, "--sweeps", str(sample), **controls)
        assumption = defs["verdict"].assumption
        assert assumption is not None
        answer = (
            load_sections()
            .answer_view(
                "sonnet-like",
                defs["verdict"],
                defs["problem_groups"],
                defs["fix_buttons"],
                defs["result"],
                defs["schedule_file"],
                None,
                mo.md(""),
            )
            .text
        )
        assert "The verdict assumes:" in answer and html.escape(assumption) in answer
        # No release given or saved: the newest known is assumed, said in both.
        assert "vLLM 0.34.0's capture rule and defaults (assumed:" in assumption
        assert main([str(sample), "--output-json", str(tmp_path / "r.json"), *flags]) == 0
        assert f"  assumes: {assumption}" in capsys.readouterr().out.splitlines()


def test_an_experiment_of_tune_spec_k_run_shows_its_rounds(
    notebook: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from standin import CLEAR_FLAGS, CLEAR_TRUTH, use_standin

    use_standin(monkeypatch, tmp_path, CLEAR_TRUTH)
    monkeypatch.chdir(tmp_path)
    flags = ["--results-dir", "R", "-e", "E"]
    assert main(["run", *CLEAR_FLAGS, *flags]) == EXIT_OK
    experiment = tmp_path / "R" / "E"
    picker = mo.ui.dropdown({"E": experiment}, value="E")
    controls = {"min_runs_slider": mo.ui.slider(1, 10, 1, value=1)}
    defs = run_notebook(
        notebook, monkeypatch, "--sweeps", str(tmp_path / "R"), experiment_picker=picker, **controls
    )
    # The app tunes every round's runs together, as `tune-spec-k R/E --min-runs 1` does.
    _assert_same_result(defs["result"], _analysed(experiment, Settings(min_runs=1)))
    view = app_support.experiment_rounds(experiment)
    assert view is not None and view.table is not None
    shown = mo.as_html(load_sections().rounds_section(view)).text
    # Round 0, the lean design, resolved every anchor but left the switch between 2 (K=3) and
    # 4 (K=0) unmeasured; round 1 measured the new anchor 3 (K=0 there) and ended ready.
    assert "round 0 (provisional)" in shown and "round 1 (ready)" in shown
    assert "run stopped: the verdict is ready: every pick resolved (ready)" in shown
    rows = {row["batch_size"]: row for row in view.table.to_dicts()}
    assert sorted(rows) == [1, 2, 3, 4]
    assert rows[3]["round 0 (provisional)"] == "" and rows[3]["round 1 (ready)"].startswith("K=0")
    assert rows[4]["round 0 (provisional)"].startswith("K=0, P ")
