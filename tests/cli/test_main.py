"""lib/cli/main.py: the entry point dispatches to tuning or to a registered subcommand, its help
lists every subcommand once and every default once, and a closed stdout ends quietly."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO, SAMPLE_SWEEPS
from sweep_builder import grid, write_grid

from lib.cli.common import EXIT_BAD_INPUT, EXIT_OK
from lib.cli.main import SUBCOMMANDS, build_parser, main


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as stopped:
        main([*argv, "--help"])
    assert stopped.value.code == 0
    return capsys.readouterr().out


def test_help_lists_every_subcommand_on_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(capsys)
    for command in SUBCOMMANDS:
        (line,) = [line for line in text.splitlines() if line.startswith(f"  {command.name} ")]
        assert line.split(maxsplit=1)[1] == command.summary


@pytest.mark.parametrize("command", ["", *(c.name for c in SUBCOMMANDS)])
def test_every_help_prints_each_default_once(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    text = " ".join(_help(capsys, *([command] if command else [])).split())
    assert "(default: None)" not in text
    # Each flag's entry holds at most one "(default: ...)".
    entries = re.split(r" (?=--?[a-z])", text)
    assert all(entry.count("(default:") <= 1 for entry in entries), entries


def test_every_subcommand_loads_and_builds_its_parser() -> None:
    for command in SUBCOMMANDS:
        args_class, run = command.load()
        assert callable(run)
        assert hasattr(args_class, "add_cli_args") and hasattr(args_class, "from_cli_args")
    assert build_parser().prog == "tune-spec-k"


def test_a_folder_named_like_a_subcommand_is_tuned_as_dot_slash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_grid(tmp_path / "plan", grid([1], {0: [100.0, 101.0, 99.0], 3: [150.0, 151.0, 149.0]}))
    monkeypatch.chdir(tmp_path)
    assert main(["./plan"]) == EXIT_OK
    assert capsys.readouterr().out.splitlines()[0] == "[[1, 1, 3]]"
    # Without ./ it is the subcommand, which wants a design.
    assert main(["plan"]) == EXIT_BAD_INPUT
    assert "every plan needs it" in capsys.readouterr().err


def test_a_closed_stdout_ends_quietly(tmp_path: Path) -> None:
    # `tune-spec-k DIR | head -1`: the pipe closes after the first line.
    command = (
        f"{sys.executable} -m lib.cli {SAMPLE_SWEEPS / 'sonnet-like'}"
        f" --output-json {tmp_path / 'out.json'} | head -1"
    )
    completed = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {command}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.stdout == "[[1, 63, 7], [64, 256, 0]]\n"
    assert completed.stderr == ""
