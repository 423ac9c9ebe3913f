"""lib/cli/diff.py: `tune-spec-k diff A B` prints both schedules and a verdict and exits 0, 1 or
2, so a CI job can gate on it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from paths import SAMPLE_SWEEPS

from lib.cli.common import EXIT_FINDING, EXIT_OK
from lib.cli.main import main
from lib.loop.diff import DiffSettings, compare, read_side
from lib.present.text import diff_lines

SONNET = str(SAMPLE_SWEEPS / "sonnet-like")
RANDOM = str(SAMPLE_SWEEPS / "random-control")


def test_a_sweep_against_itself_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", SONNET, SONNET]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"A: [[1, 63, 7], [64, 256, 0]]  ({SONNET})"
    assert lines[1] == f"B: [[1, 63, 7], [64, 256, 0]]  ({SONNET})"
    assert lines[-1].startswith("no material difference")


def test_a_material_difference_exits_1_and_writes_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "diff.json"
    assert main(["diff", SONNET, RANDOM, "--output-json", str(output)]) == EXIT_FINDING
    out = capsys.readouterr().out
    assert "batch_size=1: K 7 -> 0" in out and "MATERIAL" in out
    assert out.splitlines()[-1] == f"Wrote {output}"
    assert json.loads(output.read_text())["materially_different"] is True


def test_thresholds_are_flags(tmp_path: Path) -> None:
    result = tmp_path / "result.json"
    assert main([SONNET, "--output-json", str(result)]) == EXIT_OK
    # The folder and its result JSON: the same tuning.
    assert main(["diff", str(result), SONNET]) == EXIT_OK
    # sonnet-like vs random-control: K=7 at batch 1 loses 28 % in random-control and K=0 34 %
    # in sonnet-like; the objectives at the picks differ by up to 34 %. Thresholds above both
    # make the difference immaterial; either alone does not.
    loose = ["--max-k-loss", "0.5", "--max-objective-change", "10"]
    assert main(["diff", SONNET, RANDOM, *loose]) == EXIT_OK
    assert main(["diff", SONNET, RANDOM, *loose[:2]]) == EXIT_FINDING
    assert main(["diff", SONNET, RANDOM, *loose[2:]]) == EXIT_FINDING


@pytest.mark.parametrize(
    ("b", "flags", "message"),
    [
        ("absent", [], "no such folder or file"),
        (str(SAMPLE_SWEEPS / "noisy"), [], "cannot be tuned with these settings"),
        (SONNET, ["--max-k-loss", "-1"], "--max-k-loss -1.0"),
        (SONNET, ["--confidence", "2"], "--confidence 2.0"),
        (SONNET, ["--server-cv", "-0.01"], "--server-cv -0.01: expected"),
        (SONNET, ["--replica-var", ""], "--replica-var '': expected"),
    ],
)
def test_bad_input_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], b: str, flags: list[str], message: str
) -> None:
    assert main(["diff", SONNET, str(tmp_path / b) if b == "absent" else b, *flags]) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert "tune-spec-k diff: cannot compare" in captured.err
    assert "Traceback" not in captured.err
    assert captured.out == ""


def test_a_label_with_a_newline_prints_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = tmp_path / "x\nB: [[1, 256, 0]]  (forged).json"
    assert main([SONNET, "--output-json", str(result)]) == EXIT_OK
    capsys.readouterr()
    assert main(["diff", str(result), SONNET]) == EXIT_OK
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [
        f"A: [[1, 63, 7], [64, 256, 0]]  ({tmp_path}/x\\nB: [[1, 256, 0]]  (forged).json)",
        f"B: [[1, 63, 7], [64, 256, 0]]  ({SONNET})",
    ]
    # The lines themselves, as the app shows them too.
    settings = DiffSettings()
    a, _ = read_side(result, settings)
    b, _ = read_side(SONNET, settings)
    assert a is not None and b is not None
    report, _ = compare(a, b, settings)
    assert report is not None
    assert diff_lines(report)[0] == out[0]


def test_two_grids_that_pick_differently_at_one_cell_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sweep_builder import CONTEXT_GRID, spread, write_context_grid

    # The case: K=3 against K=0 at batch 64, 8192 tokens, the batch-only answers
    # (the 512-token column) the same.
    a = write_context_grid(tmp_path / "a", CONTEXT_GRID)
    b = write_context_grid(tmp_path / "b", {**CONTEXT_GRID, (64, 0, 8192): spread(2700.0)})
    assert main(["diff", str(a), str(b)]) == EXIT_FINDING
    out = capsys.readouterr().out
    assert "batch_size=64, prompt 8192 tokens: K 3 -> 0; MATERIAL" in out
    assert out.splitlines()[-1].startswith("materially different")
    # --context-var none: the seed's view, which pools both lengths: its noise gate rejects
    # the sweep (see CONTEXT_GRID), so nothing is compared.
    assert main(["diff", str(a), str(b), "--context-var", "none"]) == 2
    assert "context grid" not in capsys.readouterr().out


@pytest.mark.parametrize(("confidence", "status"), [("0", 2), ("0.5", EXIT_OK), ("1", EXIT_OK)])
def test_every_confidence_the_other_commands_accept_compares(
    capsys: pytest.CaptureFixture[str], confidence: str, status: int
) -> None:
    """0 is refused as every command refuses it; 0.5 and 1 compare (1: unbounded intervals)."""
    assert main(["diff", SONNET, SONNET, "--confidence", confidence]) == status
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    if status == 2:
        assert "--confidence 0.0: expected in (0, 1]" in captured.err
    else:
        assert f"{float(confidence):.0%} interval" in captured.out
