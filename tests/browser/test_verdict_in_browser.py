"""The verdict on the dashboard's first screen, in a real browser, on issue 20's cases: each
page shows the verdict the CLI prints for the same folder and settings (its state, and every
reason with its fix, word for word), and what the issue found wrong is not there.

Expected texts come from the CLI run in-process on the same folder (its result file's
``verdict``), never written here. One page load per case; the synthetic cases are built from
their shapes (the A40-like below, the GB200-like of tests/sweep_builder.py) in one folder served
for the module; the real sweep is read in place from ../shared/data/real (skipped when absent).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from paths import REAL_DATA, SAMPLE_SWEEPS
from sweep_builder import GB200_LIKE, TABLE_KS, write_grid, write_table

from lib.analysis import analyse
from lib.app import guide
from lib.app import support as app_support
from lib.app.context import analyse_sweep
from lib.cli.common import EXIT_OK
from lib.cli.main import main
from lib.deploy.constraints import deployed_stretches
from lib.deploy.tuning import deploy_analysis
from lib.deploy.verdict import Verdict
from lib.numbers import probability_text
from lib.problems import Severity
from lib.settings import DeploySettings, Fields, Options, Settings
from lib.sweeps import load_experiment

LOAD_TIMEOUT_MS = 60_000
UPDATE_TIMEOUT_MS = 30_000
FIRST_SCREEN = {"width": 1280, "height": 800}
ERROR_TOAST = "An internal error occurred"
HEADLINE_TITLE = "Speed-up over K=0 by batch size"
REAL_EXPERIMENT = "qwen3-32b-fp8-eagle3-tp2"

#: Median output_throughput per batch size for K = 0, 1, 3, 5 (TABLE_KS), five runs per cell:
#: the issue's A40 shape. At batch size 4, K=3 (660) leads K=5 (625) with or without its one run
#: 10 % low, which is flagged (it is far beyond 6 times the anchor's median residual): with it
#: K=3's P(eps-good) is about 0.86, without it about 0.998, and the anchor is resolved (the pick
#: does not depend on the run). At 16 and 32, K=1 and K=3 are 1 % apart with 3 % noise: no K
#: reaches 0.9, both unresolved. Every other anchor has one clear winner.
A40_LIKE = {
    1: (100.0, 150.0, 190.0, 200.0),
    2: (195.0, 285.0, 360.0, 375.0),
    4: (380.0, 540.0, 660.0, 625.0),
    8: (720.0, 960.0, 1100.0, 1050.0),
    16: (1300.0, 1600.0, 1616.0, 1500.0),
    32: (2300.0, 2500.0, 2525.0, 2100.0),
}
A40_NOISY = {16: 0.03, 32: 0.03}
A40_FLAGGED = (4, 3)


def _a40_cells() -> dict[tuple[int, int], list[float]]:
    cells = {}
    for batch, values in A40_LIKE.items():
        for k, value in zip(TABLE_KS, values, strict=True):
            noise = A40_NOISY.get(batch, 0.004)
            runs = [value * (1 + noise * step) for step in (-1.0, -0.5, 0.0, 0.5, 1.0)]
            if (batch, k) == A40_FLAGGED:
                runs[0] = value * 0.9
            cells[(batch, k)] = runs
    return cells


@pytest.fixture(scope="module")
def verdict_server(
    start_server: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory
) -> Any:
    """One server for the module's synthetic and sample cases (copies of the samples)."""
    root = tmp_path_factory.mktemp("verdicts")
    for sample in ("sonnet-like", "random-control", "long-context"):
        shutil.copytree(SAMPLE_SWEEPS / sample, root / sample)
    write_grid(root / "a40-like", _a40_cells())
    write_table(root / "gb200-like", GB200_LIKE)
    return start_server(root)


@pytest.fixture(scope="module")
def real_server(start_server: Callable[..., Any]) -> Any:
    if not (REAL_DATA / REAL_EXPERIMENT).is_dir():
        pytest.skip(
            f"{REAL_DATA / REAL_EXPERIMENT} is absent: the real sweeps live beside the repo"
        )
    return start_server(REAL_DATA)


def _cli_verdict(folder: Path, tmp_path: Path, *flags: str) -> dict[str, Any]:
    """The verdict the CLI writes for ``folder`` (its result file's ``verdict``)."""
    output = tmp_path / f"{folder.name}.json"
    assert main([str(folder), *flags, "--output-json", str(output)]) == EXIT_OK
    verdict: dict[str, Any] = json.loads(output.read_text())["verdict"]
    return verdict


def _heading(verdict: dict[str, Any]) -> str:
    """The verdict's first line on the page (verdict_view in notebooks/sections.py)."""
    count = len(verdict["reasons"])
    title = Verdict(verdict["state"], ()).title
    return f"{title} ({count} reason{'s' if count != 1 else ''}):"


def _items(verdict: dict[str, Any]) -> list[str]:
    """Each reason as the page writes it: the message, then its fix."""
    return [f"{reason['message']}. Fix: {reason['fix']}." for reason in verdict["reasons"]]


def _first_screen_verdict(page: Any, verdict: dict[str, Any]) -> list[str]:
    """Wait for the verdict's heading, check it is on the first screen, and return the reasons
    the verdict's callout lists."""
    heading = page.get_by_text(_heading(verdict)).first
    heading.wait_for(timeout=UPDATE_TIMEOUT_MS)
    box = heading.bounding_box()
    assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= FIRST_SCREEN["height"]
    assert page.get_by_text("Ready to deploy").count() == 0
    callout = page.locator("marimo-callout-output").filter(has=heading)
    shown: list[str] = callout.first.locator("li").all_inner_texts()
    return shown


def _headline_spec(page: Any) -> dict[str, Any]:
    """The headline chart's Vega-Lite specification as the page received it."""
    page.locator(".vega-embed").first.wait_for(timeout=UPDATE_TIMEOUT_MS)
    for renderer in page.locator("marimo-mime-renderer").all():
        if "vegalite" not in (renderer.get_attribute("data-mime") or ""):
            continue
        # marimo writes each attribute as JSON: the specification is a JSON string in it.
        spec: dict[str, Any] = json.loads(json.loads(renderer.get_attribute("data-data")))
        if spec.get("title", {}).get("text") == HEADLINE_TITLE:
            return spec
    raise AssertionError("no headline chart on the page")


def _deployed_track_marks_what_lib_deploys(page: Any, folder: Path) -> None:
    """The K track of the headline chart: its stretches (lo, hi, K, status) are lib's
    deployed_stretches of the schedule deployed for the folder, with the kept cells as the
    measured ones and the capped ranges of its capture check."""
    analysis, deployment = deploy_analysis(
        analyse(load_experiment(folder), Settings(), Options()), DeploySettings()
    )
    result = analysis.result
    assert result.schedule is not None and deployment is not None
    kept = set(result.cells.filter(pl.col("status") == "kept").select("anchor", "k").rows())
    expected = [
        (s.lo, s.hi, s.k, s.status)
        for s in deployed_stretches(
            result.schedule, kept, deployment.check.capped, result.deploy_global_k
        )
    ]
    # sonnet-like deploys [[1, 63, 7], [64, 256, 0]], measured at its anchors 1 (K=7), 64, 128
    # and 256 (K=0): every batch size between and past them ran nothing.
    assert expected == [
        (1, 1, 7, "measured"),
        (2, 63, 7, "not measured"),
        (64, 64, 0, "measured"),
        (65, 127, 0, "not measured"),
        (128, 128, 0, "measured"),
        (129, 255, 0, "not measured"),
        (256, 256, 0, "measured"),
    ]
    rows = _headline_spec(page)["data"]["values"]
    shown = [
        (row["lo"], row["hi"], row["k"], row["status"])
        for row in rows
        if row.get("layer") == "deployed"
    ]
    assert shown == expected


def _flagged_runs_do_not_doubt_batch_4(page: Any, folder: Path) -> None:
    """The A40-like case: batch size 4 is resolved without its flagged run (its P with the
    run is below the confidence, without it above), so the verdict does not name it; the
    verdict's unresolved anchors are the ones "How sure" counts."""
    analysis = analyse(load_experiment(folder), Settings(), Options())
    report = analysis.report
    assert report is not None
    batch, k = A40_FLAGGED
    cell = report.cells.filter((pl.col("anchor") == batch) & (pl.col("k") == k)).row(0, named=True)
    anchors = {row["anchor"]: row for row in report.anchors.to_dicts()}
    confidence = report.settings.confidence
    assert cell["flagged_runs"] == 1 and anchors[batch]["status"] == "resolved"
    assert cell["p_eps_good"] < confidence <= cell["p_eps_good_without_flagged"]
    shown = page.locator("marimo-callout-output").first.locator("li").all_inner_texts()
    assert not [item for item in shown if item.startswith(f"batch size {batch}")], shown
    unresolved = sorted(anchor for anchor, row in anchors.items() if row["status"] != "resolved")
    assert unresolved == [16, 32]
    named = [item for item in shown if " is unresolved (" in item]
    assert [int(item.split()[2]) for item in named] == unresolved
    page.get_by_role("button", name="How sure").first.click()
    page.get_by_text(f"{len(unresolved)} unresolved anchor(s):").first.wait_for(
        timeout=UPDATE_TIMEOUT_MS
    )


def _nothing_more(page: Any, folder: Path) -> None:
    """No check beyond the verdict's reasons."""


#: Each case: the folder below the module's root, the rule the verdict must give, and what
#: else its page must show.
CASES: dict[str, tuple[str, Callable[[Any, Path], None]]] = {
    "sonnet-like": ("unmeasured-switch", _deployed_track_marks_what_lib_deploys),
    "a40-like": ("unresolved-anchor", _flagged_runs_do_not_doubt_batch_4),
    "gb200-like": ("cross-anchor-cliff", _nothing_more),
    "random-control": ("no-speculation", _nothing_more),
    "long-context": ("context-loss", _nothing_more),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_first_screen_shows_the_cli_s_verdict(
    page: Any, verdict_server: Any, tmp_path: Path, name: str
) -> None:
    rule, more = CASES[name]
    folder = verdict_server.root / name
    verdict = _cli_verdict(folder, tmp_path)
    assert verdict["state"] == "provisional"
    assert rule in [reason["rule"] for reason in verdict["reasons"]]
    page.set_viewport_size(FIRST_SCREEN)
    page.goto(f"{verdict_server.url}/?sweeps={name}")
    page.get_by_role("heading", name=f"tune-spec-k · {name}").wait_for(timeout=LOAD_TIMEOUT_MS)
    assert _first_screen_verdict(page, verdict) == _items(verdict)
    more(page, folder)
    assert page.get_by_text(ERROR_TOAST).count() == 0


def test_the_real_sweep_after_its_k_field_fix_names_batch_1_unresolved(
    page: Any, real_server: Any, tmp_path: Path
) -> None:
    """qwen3-32b-fp8-eagle3-tp2 (a static-K sweep): the page offers two one-click fixes (the K
    field, a global K that differs). The K field's fix removes both errors (with the static K
    field no global is checked, as in the seed), and both buttons go; the verdict is then the
    CLI's with the same settings: provisional, batch size 1 unresolved with the P the CLI
    prints."""
    found, _ = app_support.find_experiments(REAL_DATA / REAL_EXPERIMENT, REAL_DATA)
    (folder,) = found.values()
    shown = analyse_sweep(load_experiment(folder, within=REAL_DATA), Settings(), Options(), None)
    groups = guide.problem_groups(shown.problems, Settings(), Fields())
    fixes = [g.fix for g in groups[:2] if g.severity is Severity.ERROR and g.fix is not None]
    assert [fix.control for fix in fixes] == ["k_var", "allow_mixed_global_k"]
    (k_var,) = [fix.value for fix in fixes if fix.control == "k_var"]
    fields, settings = Fields(k_var=k_var), Settings()
    arguments = app_support.cli_arguments(folder, fields, settings, Options())
    verdict = _cli_verdict(folder, tmp_path, *arguments[1:])
    page.set_viewport_size(FIRST_SCREEN)
    page.goto(f"{real_server.url}/?sweeps={REAL_EXPERIMENT}")
    page.get_by_text("Cannot tune:").first.wait_for(timeout=LOAD_TIMEOUT_MS)
    buttons = [page.get_by_role("button", name=fix.label).first for fix in fixes]
    buttons[0].click()
    # A fix applied removes its error, and its button with it: here both errors, both buttons.
    for button in buttons:
        button.wait_for(state="detached", timeout=UPDATE_TIMEOUT_MS)
    assert _first_screen_verdict(page, verdict) == _items(verdict)
    (batch_1,) = [
        reason
        for reason in verdict["reasons"]
        if reason["rule"] == "unresolved-anchor" and reason["message"].startswith("batch size 1 ")
    ]
    assert f"P(eps-good) {probability_text(batch_1['size'])}" in batch_1["message"]
    assert page.get_by_text(ERROR_TOAST).count() == 0
