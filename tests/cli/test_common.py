"""lib/cli/common.py: how every command prints problems and writes its files."""

from __future__ import annotations

import errno
import io
import sys
from pathlib import Path

import pytest

from lib.cli.common import (
    EXIT_OK,
    StdoutFailed,
    print_problems,
    say,
    write_and_print,
)
from lib.problems import Problem, Severity

WARNING = Problem(Severity.WARNING, "unstable-acceptance", "acceptance is unstable", anchor=1, k=3)
NOTE = Problem(Severity.NOTE, "warmup-ignored", "warm-up run ignored", files=("a/warmup.json",))
ERROR = Problem(Severity.ERROR, "noisy-objective", "the runs disagree", field="output_throughput")


def test_warnings_and_notes_go_to_stderr_without_a_heading(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert not print_problems([WARNING, NOTE], lambda count: f"{count} problems")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [WARNING.describe(), NOTE.describe()]


def test_a_heading_naming_a_path_is_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    assert print_problems([ERROR], lambda count: "cannot judge /data/x\nerror [forged]")
    assert capsys.readouterr().err.splitlines()[0] == "cannot judge /data/x\\nerror [forged]"


def test_errors_follow_their_heading_indented(capsys: pytest.CaptureFixture[str]) -> None:
    assert print_problems([ERROR, WARNING, ERROR], lambda count: f"nothing written: {count}")
    assert capsys.readouterr().err.splitlines() == [
        WARNING.describe(),
        "nothing written: 2",
        "  " + ERROR.describe(),
        "  " + ERROR.describe(),
    ]


def test_the_lines_come_first_and_wrote_comes_last(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    assert write_and_print("cmd", [(first, "1\n"), (second, "2\n")], ["x", "y"]) == EXIT_OK
    assert (first.read_text(), second.read_text()) == ("1\n", "2\n")
    assert capsys.readouterr().out == f"x\ny\nWrote {first}\nWrote {second}\n"


def test_a_file_that_cannot_be_written_prints_nothing_but_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no" / "c.json"
    assert write_and_print("cmd", [(tmp_path / "ok.json", "1"), (missing, "3\n")], ["x"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("cmd: a file could not be written\n")
    assert f"in {missing}" in captured.err
    assert list(tmp_path.iterdir()) == []


def test_say_escapes_every_line_and_flushes(capsys: pytest.CaptureFixture[str]) -> None:
    say(["plain", "forged\nerror [x] y", "bad \udcff byte"])
    assert capsys.readouterr().out == "plain\nforged\\nerror [x] y\nbad \\xff byte\n"


class _FailingStdout(io.StringIO):
    def __init__(self, error: OSError) -> None:
        super().__init__()
        self.error = error

    def flush(self) -> None:
        raise self.error


def test_say_raises_stdout_failed_on_any_error_but_a_closed_pipe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "stdout", _FailingStdout(OSError(errno.EIO, "I/O error")))
    with pytest.raises(StdoutFailed, match="I/O error"):
        say(["x"])
    monkeypatch.setattr(sys, "stdout", _FailingStdout(BrokenPipeError(errno.EPIPE, "pipe")))
    say(["x"])  # the command carries on, writing its files
    monkeypatch.setattr(sys, "stdout", None)
    with pytest.raises(StdoutFailed, match="closed"):
        say(["x"])
