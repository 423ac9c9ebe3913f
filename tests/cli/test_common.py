"""lib/cli/common.py: how every command prints problems and writes its files."""

from __future__ import annotations

import errno
import io
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from paths import SAMPLE_SWEEPS
from sweep_builder import record, write_combo, write_grid

from lib.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    Output,
    StdoutFailed,
    check_outputs,
    print_problems,
    say,
    write_and_print,
)
from lib.cli.main import main
from lib.problems import Problem, Severity
from lib.server_info import read_server_settings
from lib.settings import DEFAULT_K_VAR
from lib.sweep_files import read_sweep_files

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
    files = [(Output("--a", first), "1\n"), (Output("--b", second), "2\n")]
    assert write_and_print("cmd", files, ["x", "y"]) == EXIT_OK
    assert (first.read_text(), second.read_text()) == ("1\n", "2\n")
    assert capsys.readouterr().out == f"x\ny\nWrote {first}\nWrote {second}\n"


def test_a_path_given_that_cannot_be_written_prints_nothing_but_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A missing folder would be made (as the seed makes its --output-json's); one that is a
    # regular file cannot be.
    (tmp_path / "no").write_text("")
    missing = tmp_path / "no" / "c.json"
    files = [(Output("--ok", tmp_path / "ok.json"), "1\n"), (Output("--c", missing), "3\n")]
    assert write_and_print("cmd", files, ["x"]) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "cmd: nothing written: 1 problem(s) with --c\n"
        f"  error [unwritable-file] cannot write the file: Not a directory in {missing}\n"
    )
    assert list(tmp_path.iterdir()) == [tmp_path / "no"]  # nothing written, ok.json neither


def test_missing_folders_of_an_output_are_made_as_the_seed_makes_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = tmp_path / "out" / "new" / "schedule.json"
    assert check_outputs([Output("--o", deep)]) == []
    assert not (tmp_path / "out").exists()  # checking creates nothing
    assert write_and_print("cmd", [(Output("--o", deep), "1\n")], ["x"]) == EXIT_OK
    assert deep.read_text() == "1\n"
    assert capsys.readouterr().out == f"x\nWrote {deep}\n"


@pytest.mark.parametrize("how", ["read-only folder", "a folder in the way"])
def test_a_default_path_that_cannot_be_written_still_prints_the_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    default = shared / "result.json"
    if how == "read-only folder":
        # chmod 555 does not stop root: the refusal is made by hand.
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != shared and real(p, mode))
        reason = "Permission denied"
    else:
        default.mkdir()
        reason = "Is a directory"
    plan = tmp_path / "plan.json"
    files = [(Output("--plan", plan), "1\n"), (Output("--out", default, default=True), "2\n")]
    assert write_and_print("cmd", files, ["the analysis"]) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    assert captured.out == "the analysis\n"
    assert captured.err == (
        "cmd: nothing written: 1 problem(s) with --out\n"
        f"  error [unwritable-file] cannot write the file: {reason} in {default}\n"
        "cmd: the output above is not saved: choose a path with --out PATH\n"
    )
    assert not plan.exists()


def _link(path: Path, target: Path) -> Path:
    path.symlink_to(target)
    return path


@pytest.mark.parametrize(
    ("outputs", "inputs", "refused"),
    [
        # Paths that cannot be written.
        # A missing folder is made (the seed makes its output's folders): no problem.
        (lambda t: [t / "missing" / "x.json"], lambda t: [], []),
        (lambda t: [t / "folder"], lambda t: [], [("unwritable-file", 0)]),
        (lambda t: [t / "data.json" / "x.json"], lambda t: [], [("unwritable-file", 0)]),
        # An input file, however spelled.
        (lambda t: [t / "data.json"], lambda t: [t / "data.json"], [("output-is-input", 0)]),
        (lambda t: [t / "." / "data.json"], lambda t: [t / "data.json"], [("output-is-input", 0)]),
        (
            lambda t: [_link(t / "link.json", t / "data.json")],
            lambda t: [t / "data.json"],
            [("output-is-input", 0)],
        ),
        # A data file of an input sweep: read, or a backup beside a summary, or a warm-up.
        (
            lambda t: [t / "sweep" / "SERVE--a" / "summary.json"],
            lambda t: [t / "sweep"],
            [("output-is-input", 0)],
        ),
        (
            lambda t: [t / "sweep" / "SERVE--a" / "run=0.json"],
            lambda t: [t / "sweep"],
            [("output-is-input", 0)],
        ),
        (
            lambda t: [t / "sweep" / "SERVE--a" / "run=3.failure.json"],
            lambda t: [t / "sweep"],
            [("output-is-input", 0)],
        ),
        (
            lambda t: [_link(t / "elsewhere", t / "sweep" / "SERVE--a") / "summary.json"],
            lambda t: [t / "sweep"],
            [("output-is-input", 0)],
        ),
        (
            lambda t: [t / "sweep" / "SERVE--a" / "summary.json"],
            lambda t: [_link(t / "sweep-link", t / "sweep")],
            [("output-is-input", 0)],
        ),
        # The same file twice.
        (lambda t: [t / "x.json", t / "x.json"], lambda t: [], [("same-output", 1)]),
        (lambda t: [t / "x.json", t / "." / "x.json"], lambda t: [], [("same-output", 1)]),
        (
            lambda t: [t / "data.json", _link(t / "link.json", t / "data.json")],
            lambda t: [],
            [("same-output", 1)],
        ),
        # A file a later read would take as input, though new, and wherever it lies (any
        # folder above it may be read as an experiment): the next tuning would read it.
        (
            lambda t: [t / "sweep" / "new" / "summary.json"],
            lambda t: [t / "sweep"],
            [("output-is-input", 0)],
        ),
        (
            lambda t: [t / "sweep" / "SERVE--a" / "run=9.json"],
            lambda t: [],
            [("output-is-input", 0)],
        ),
        (lambda t: [t / "summary.json"], lambda t: [], [("output-is-input", 0)]),
        (lambda t: [t / "warmup.json"], lambda t: [], [("output-is-input", 0)]),
        (
            lambda t: [t / "a.json", t / "sweep" / "SERVE--a" / "server_info.json"],
            lambda t: [t / "sweep"],
            [("output-is-input", 1)],
        ),
        (lambda t: [t / "other" / "server_info.json"], lambda t: [], [("output-is-input", 0)]),
        (  # a link named otherwise whose target is a saved server config
            lambda t: [_link(t / "out.json", t / "sweep" / "SERVE--a" / "server_info.json")],
            lambda t: [],
            [("output-is-input", 0)],
        ),
        # Fine: new files, a result beside the sweep's data, names the readers do not take.
        (lambda t: [t / "a.json", t / "b.json"], lambda t: [t / "data.json"], []),
        (lambda t: [t / "sweep" / "speculative_k_schedule.json"], lambda t: [t / "sweep"], []),
        (lambda t: [t / "sweep" / "SERVE--a" / "notes.json"], lambda t: [t / "sweep"], []),
        (lambda t: [t / "Summary.json", t / "server_info.json.bak"], lambda t: [], []),
        (lambda t: [t / "run=.json", t / "run=1.failure"], lambda t: [], []),
    ],
)
def test_check_outputs_refuses_what_would_fail_or_replace_an_input(
    tmp_path: Path,
    outputs: Callable[[Path], list[Path]],
    inputs: Callable[[Path], list[Path]],
    refused: list[tuple[str, int]],
) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "data.json").write_text("{}")
    combo = tmp_path / "sweep" / "SERVE--a"
    combo.mkdir(parents=True)
    for name in ("summary.json", "run=0.json", "run=3.failure.json", "server_info.json"):
        (combo / name).write_text("[]")
    paths, given = outputs(tmp_path), inputs(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    targets = [Output(f"--out{i}", path) for i, path in enumerate(paths)]
    problems = check_outputs(targets, given)
    assert [(p.rule, p.files, p.extra) for p in problems] == [
        (rule, (str(paths[index]),), {"flag": f"--out{index}"}) for rule, index in refused
    ]
    assert sorted(tmp_path.rglob("*")) == before  # creates nothing


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


def test_every_file_a_tuning_reads_is_refused_as_an_output(tmp_path: Path) -> None:
    # check_outputs knows a sweep's inputs by name; every file the readers take has one, and
    # writing any of them is refused, in the experiment or anywhere else.
    root = write_grid(tmp_path / "sweep", {(1, 0): [1.0, 2.0], (1, 3): [3.0, 4.0]})
    write_combo(root / "SERVE--x-BENCH--c2", [record(2, 0)], warmup={}, failures={4: {}})
    write_combo(root / "SERVE--y-BENCH--c2", [record(2, 3)], summary=False)
    (root / "SERVE--y-BENCH--c2" / "server_info.json").write_text('{"vllm_config": {}}')
    read = read_sweep_files(root, batch_size_var="max_concurrency", k_var=DEFAULT_K_VAR)
    servers, _ = read_server_settings(root)
    names = {Path(path).name for path in read.input_files} | {"warmup.json"}
    assert {"summary.json", "run=0.json", "run=4.failure.json"} <= names
    assert [server.source for server in servers] == ["SERVE--y-BENCH--c2/server_info.json"]
    names.add(Path(servers[0].source).name)
    for name in sorted(names):
        for folder in (root / "SERVE--y-BENCH--c2", tmp_path / "elsewhere"):
            problems = check_outputs([Output("--out", folder / name)], [root])
            assert [problem.rule for problem in problems] == ["output-is-input"], name
            assert name in problems[0].message


def test_a_tuning_refuses_to_write_a_file_the_next_tuning_would_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --output-json or --plan-json onto a saved server config, or a new summary.json in the
    # sweep: refused before anything is read, and every file stays as it was.
    root = Path(shutil.copytree(SAMPLE_SWEEPS / "sonnet-like", tmp_path / "sweep"))
    saved = next(root.rglob("summary.json")).parent / "server_info.json"
    saved.write_text('{"vllm_config": {"scheduler_config": {"max_num_seqs": 256}}}')
    before = {path: path.read_bytes() for path in root.rglob("*") if path.is_file()}
    for flags in (
        ["--output-json", str(saved)],
        ["--plan-json", str(saved)],
        ["--output-json", str(root / "new" / "summary.json")],
    ):
        assert main([str(root), *flags]) == EXIT_BAD_INPUT
        err = capsys.readouterr().err
        assert "[output-is-input]" in err and "Traceback" not in err
    after = {path: path.read_bytes() for path in root.rglob("*") if path.is_file()}
    assert after == before


def test_a_file_that_fails_while_written_names_its_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    out = tmp_path / "out.json"
    assert write_and_print("cmd", [(Output("--out", out), "1")], ["lines"]) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    assert captured.out == "lines\n"
    assert captured.err == (
        "cmd: nothing written: 1 problem(s) with --out\n"
        f"  error [unwritable-file] cannot write the file: No space left on device in {out}\n"
    )
    assert list(tmp_path.iterdir()) == []
