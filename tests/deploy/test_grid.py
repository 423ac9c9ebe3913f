"""lib/deploy/grid.py: what the context formats share: the build (a source without a grid is
refused naming what makes one, a grid that is not deployable in every format, a grid's
vllm-context schedule checked by the capture rule), losses and mixes, context ranges, and
``tune-spec-k export`` on every context format (the CLI and the app's function write the same
bytes). Every expected number is derived in a comment."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from grid_builder import (
    CONTEXT_FORMATS,
    PUBLISHED,
    context_export,
    grid_of,
    mix_of,
    result_json,
    write,
)
from paths import REPO, SAMPLE_SWEEPS

from lib.cli.common import EXIT_BAD_INPUT, EXIT_OK
from lib.cli.main import main
from lib.context_grid import ContextPoint
from lib.deploy.decisions import Decisions
from lib.deploy.formats.vllm_pr_54801 import (
    PR_54801_COMBINATION,
)
from lib.deploy.formats.vllm_rfc_48944 import (
    rfc_48944_export,
)
from lib.deploy.grid import (
    UNBOUNDED_CONTEXT,
    context_boundary,
    context_mix,
    context_ranges,
    loss_percent,
)
from lib.deploy.registry import export, formats, read_decisions
from lib.deploy.settings import ExportSettings
from lib.loop.export import export_text
from lib.schedule import Schedule
from lib.settings import DeploySettings


@pytest.fixture(scope="module")
def long_context_result(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("long") / "result.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "lib.cli",
            str(SAMPLE_SWEEPS / "long-context"),
            "--output-json",
            str(out),
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    return out


def test_a_file_without_a_grid_is_refused_for_every_context_format() -> None:
    plain = Decisions(Schedule(((1, 8, 3),)), 3, "vLLM schedule", "s.json")
    for name in ("vllm-context", "vllm-rfc-48944", "vllm-pr-54801"):
        exported, problems = export(plain, ExportSettings(format=name))
        assert exported is None and problems[0].rule == "no-context-grid"
        assert "vLLM schedule" in problems[0].message


def test_every_context_format_builds_from_the_long_context_result(
    long_context_result: Path,
) -> None:
    decisions, problems = read_decisions(long_context_result)
    assert problems == [] and decisions is not None and decisions.grid is not None
    for name in ("vllm-context", "vllm-rfc-48944", "vllm-pr-54801"):
        exported, problems = export(decisions, ExportSettings(format=name))
        assert exported is not None, problems
        assert json.loads(exported.text())["format"] == name


def test_the_vllm_context_schedule_is_checked_against_the_ceiling(
    long_context_result: Path,
) -> None:
    decisions, _ = read_decisions(long_context_result)
    assert decisions is not None
    # [[1, 63, 3], [64, 256, 0]]: 50 * 4 = 200 fits a ceiling of 200, 51 * 4 = 204 does not;
    # 63 * 4 = 252 fits 256.
    tight, _ = export(
        decisions,
        ExportSettings(format="vllm-context"),
        DeploySettings(max_cudagraph_capture_size=200, vllm_version="0.33.0"),
    )
    assert tight is not None
    assert any("batch sizes 51-63 run K=3" in w for w in tight.warnings)
    roomy, _ = export(
        decisions,
        ExportSettings(format="vllm-context"),
        DeploySettings(max_cudagraph_capture_size=256),
    )
    assert roomy is not None and not any("capture ceiling" in w for w in roomy.warnings)


@pytest.mark.parametrize("format", CONTEXT_FORMATS)
def test_a_grid_that_is_not_deployable_is_refused_in_every_format(format: Any) -> None:
    reason = "the batch anchors start at 8, not 1"
    data = result_json(PUBLISHED, deployable=False, reason=reason)
    grid = grid_of(data)
    exported, problems = context_export(grid, format, None, 3, source="r.json")
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
            context_export(grid, format, text, 3)[0]
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


@pytest.mark.parametrize("format", CONTEXT_FORMATS)
def test_every_export_is_json_ready_and_deterministic(format: Any) -> None:
    grid = grid_of(result_json(PUBLISHED))
    first, _ = context_export(grid, format, "500:2,4000:1", 3)
    again, _ = context_export(grid_of(result_json(PUBLISHED)), format, "500:2,4000:1", 3)
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
    # 128 * 4 = 512 fits vLLM's default ceiling; 129..256 at K=3 do not (on 0.34, assumed and
    # said, too: the only K, 3, sets R = 512 // 4 = 128).
    assert any(line.startswith("warning: batch sizes 129-256 run K=3") for line in printed[1:])
    assert "note: checked by vLLM 0.34.0's capture rule and defaults (assumed:" in printed[1]


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
