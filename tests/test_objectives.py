"""The catalogue of objectives (lib/objectives.py): its fields are a real record's, README's
table is the catalogue's, and the CLI and the app take their directions from it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO, SAMPLE_SWEEPS

from lib.app import support as app_support
from lib.objectives import (
    OBJECTIVES,
    OBJECTIVES_BY_NAME,
    catalogue_direction,
    direction_problems,
    find_objective,
    latency_maximized,
    markdown_table,
)
from lib.problems import Severity
from lib.schedule import tune
from lib.settings import Settings
from lib.sweeps import load_experiment

REAL_CPU = SAMPLE_SWEEPS / "real-cpu-tiny-ngram"


def _first_record() -> dict[str, object]:
    summary = sorted(REAL_CPU.rglob("summary.json"))[0]
    records = json.loads(summary.read_text())
    return dict(records[0])


def test_every_field_of_a_real_k0_record_is_catalogued_or_no_objective() -> None:
    # vLLM 0.32.0's own record (the real CPU sweep): each numeric measurement is in the
    # catalogue; the rest are settings, counters or the anchor, listed here by hand.
    not_objectives = {
        "burstiness",
        "completed",
        "failed",
        "max_concurrency",
        "max_concurrent_requests",
        "num_prompts",
        "run_number",
        "rtfx",  # an ASR benchmark's real-time factor, 0 for text
        "total_input_tokens",
        "total_output_tokens",
        "spec_decode_accepted_tokens",
        "spec_decode_draft_tokens",
        "spec_decode_num_drafts",
    }
    numeric = {
        name
        for name, value in _first_record().items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }
    assert numeric - not_objectives - set(OBJECTIVES_BY_NAME) == set()
    # And every catalogued field but the goodput (needs --goodput) is in such a record.
    absent = set(OBJECTIVES_BY_NAME) - numeric
    assert absent <= {"request_goodput", "spec_decode_acceptance_length",
                      "spec_decode_acceptance_rate"}  # fmt: skip


def test_latencies_are_minimised_and_throughputs_maximised() -> None:
    for objective in OBJECTIVES:
        if objective.name.endswith("_ms") or objective.name == "duration":
            assert objective.direction == "minimize", objective
        else:
            assert objective.direction == "maximize", objective
        assert objective.unit and objective.meaning
    assert len(OBJECTIVES_BY_NAME) == len(OBJECTIVES)  # no field twice


@pytest.mark.parametrize(
    ("name", "direction"),
    [
        ("p99_ttft_ms", "minimize"),
        ("p50_itl_ms", "minimize"),
        ("p99.9_e2el_ms", "minimize"),
        ("p_ttft_ms", None),
        ("p99_ttft", None),
        ("xp99_ttft_ms", None),
        ("p99_foo_ms", None),
        ("my_latency_ms", None),
        ("output_throughput", "maximize"),
    ],
)
def test_percentiles_of_the_latencies_are_known(name: str, direction: str | None) -> None:
    assert catalogue_direction(name) == direction
    if direction is not None:
        assert find_objective(name) is not None


def test_readme_table_is_the_catalogue() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    table = markdown_table()
    assert table in readme
    # README's only table of objectives, its rows together.
    assert readme.count("| field | unit | better | meaning |") == 1


@pytest.mark.parametrize(
    ("objective", "direction", "warned"),
    [
        ("median_tpot_ms", "maximize", True),  # the seed's default direction on a latency
        ("median_tpot_ms", "minimize", False),
        ("duration", "maximize", True),
        ("p90_ttft_ms", "maximize", True),
        ("output_throughput", "maximize", False),
        ("output_throughput", "minimize", False),  # chosen on purpose; not this rule's case
        ("my_latency_ms", "maximize", False),  # unknown: the default stands, no warning
    ],
)
def test_a_latency_maximised_is_a_warning(objective: str, direction: str, warned: bool) -> None:
    settings = Settings(objective=objective, direction=direction)  # type: ignore[arg-type]
    found = latency_maximized(settings)
    assert (found is not None) is warned
    assert direction_problems(settings) == ([] if found is None else [found])
    if found is not None:
        assert found.severity is Severity.WARNING and found.rule == "latency-maximized"
        assert "--objective-direction minimize" in found.message


def test_tune_reports_it_and_the_app_default_gives_the_minimising_answer() -> None:
    sweep = load_experiment(SAMPLE_SWEEPS / "sonnet-like")
    cli_default = tune(sweep, Settings(objective="median_tpot_ms"))
    assert [p.rule for p in cli_default.problems].count("latency-maximized") == 1
    app_direction = app_support.chosen_direction(app_support.USUAL_DIRECTION, "median_tpot_ms")
    app = tune(sweep, Settings(objective="median_tpot_ms", direction=app_direction))
    flagged = tune(sweep, Settings(objective="median_tpot_ms", direction="minimize"))
    assert "latency-maximized" not in {p.rule for p in app.problems}
    # The app's default is the CLI with --objective-direction minimize, and not the CLI's
    # default: a latency maximised picks other K.
    assert app.schedule == flagged.schedule
    assert app.schedule != cli_default.schedule


def test_the_cli_warns_on_stderr_and_still_writes(tmp_path: Path) -> None:
    output = tmp_path / "r.json"
    command = [sys.executable, "-m", "lib.cli", str(SAMPLE_SWEEPS / "sonnet-like")]
    command += ["--objective-var", "median_tpot_ms", "--output-json", str(output)]
    run = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    warned = [line for line in run.stderr.splitlines() if "[latency-maximized]" in line]
    assert len(warned) == 1 and warned[0].startswith("warning [latency-maximized]")
    assert "give --objective-direction minimize" in warned[0]
    problems = json.loads(output.read_text())["problems"]
    assert [p["rule"] for p in problems].count("latency-maximized") == 1
    quiet = subprocess.run(
        [*command, "--objective-direction", "minimize"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert quiet.returncode == 0 and "latency-maximized" not in quiet.stderr
