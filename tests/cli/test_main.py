"""lib/cli/main.py: the entry point dispatches to tuning or to a registered subcommand, its help
lists every subcommand once and every default once, and a closed stdout ends quietly."""

from __future__ import annotations

import errno
import io
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from paths import REPO, SAMPLE_SWEEPS
from sweep_builder import GOOD_VALIDATION, grid, write_grid, write_validation
from vllm_sweep import LLAMA_FLAGS

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
    # Nothing but the analysis's own warnings (no traceback, no broken-pipe message).
    assert all(line.startswith("warning [") for line in completed.stderr.splitlines())
    # As before stdout was checked: the result is written whenever the pipe closes.
    assert (tmp_path / "out.json").is_file()


# --------------------------------------------------------------------------- hostile input files


@dataclass(frozen=True)
class Inputs:
    """Good inputs for every command, made once: a sweep, its result, a validation sweep and
    a plan's design."""

    sweep: Path
    result: Path
    validation: Path
    design: Path


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Inputs:
    root = tmp_path_factory.mktemp("inputs")
    sweep = root / "sweep"
    shutil.copytree(SAMPLE_SWEEPS / "sonnet-like", sweep)
    result = root / "result.json"
    assert main([str(sweep), "--output-json", str(result)]) == EXIT_OK
    assert main(["plan", "-o", str(root / "plan"), *LLAMA_FLAGS]) == EXIT_OK
    validation = write_validation(root / "validation", GOOD_VALIDATION)
    return Inputs(sweep, result, validation, root / "plan" / "sweep_plan.json")


def _summary(folder: Path) -> Path:
    return sorted(folder.rglob("summary.json"))[0]


def _hostile_in_a_copy(folder: Callable[[Inputs], Path], file: Callable[[Path], Path]) -> Any:
    """(argv, the file to spoil) for a command reading a copy of a sweep."""

    def make(given: Inputs, tmp_path: Path) -> tuple[list[str], Path, str]:
        copy = tmp_path / "copy"
        shutil.copytree(folder(given), copy)
        target = file(copy)
        return [str(copy)], target, target.relative_to(copy).as_posix()

    return make


def _without_summaries(copy: Path) -> Path:
    for summary in copy.rglob("summary.json"):
        summary.unlink()
    return sorted(copy.rglob("run=0.json"))[0]


def _check_copy(given: Inputs, tmp_path: Path) -> tuple[list[str], Path, str]:
    copy = tmp_path / "copy"
    shutil.copytree(given.validation, copy)
    target = _summary(copy)
    return ["check", str(copy)], target, target.relative_to(copy).as_posix()


def _hostile_file(argv: Callable[[Inputs, str], list[str]]) -> Any:
    """(argv, the file to spoil) for a command given a file of its own."""

    def make(given: Inputs, tmp_path: Path) -> tuple[list[str], Path, str]:
        target = tmp_path / "given.json"
        return argv(given, str(target)), target, str(target)

    return make


#: Every way a command reads a file the user names: (argv, the file spoiled, as reported).
READERS = {
    "tune summary.json": _hostile_in_a_copy(lambda given: given.sweep, _summary),
    "tune run=0.json": _hostile_in_a_copy(lambda given: given.sweep, _without_summaries),
    "check summary.json": _check_copy,
    "check --schedule": _hostile_file(
        lambda given, path: ["check", str(given.validation), "--schedule", path]
    ),
    "diff A": _hostile_file(lambda given, path: ["diff", path, str(given.sweep)]),
    "export": _hostile_file(lambda given, path: ["export", path]),
    "plan --design": _hostile_file(lambda given, path: ["plan", "--design", path]),
    "plan --follow-up": _hostile_file(
        lambda given, path: ["plan", "--design", str(given.design), "--follow-up", path]
    ),
    "plan --validate": _hostile_file(
        lambda given, path: ["plan", "--design", str(given.design), "--validate", path]
    ),
}


def _run_cli(argv: list[str], cwd: Path, **options: Any) -> subprocess.CompletedProcess[str]:
    """The CLI as a process in ``cwd`` (where a plan would go), stopped by a timeout if it
    hangs (the test fails)."""
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "lib.cli", *argv],
        cwd=cwd,
        env=environment,
        text=True,
        timeout=120,
        check=False,
        **({"capture_output": True} | options),
    )


@pytest.mark.parametrize("reader", list(READERS))
def test_a_fifo_given_as_data_is_refused_not_read(
    inputs: Inputs, tmp_path: Path, reader: str
) -> None:
    argv, target, shown = READERS[reader](inputs, tmp_path)
    target.unlink(missing_ok=True)
    os.mkfifo(target)
    completed = _run_cli(argv, tmp_path)
    assert completed.returncode == EXIT_BAD_INPUT, completed.stderr
    assert "Traceback" not in completed.stderr
    assert completed.stdout == ""
    message = (
        "[unreadable-file] cannot read the file: it is a FIFO (named pipe), not a regular file"
    )
    assert f"{message} in {shown}" in completed.stderr


@pytest.mark.parametrize("reader", list(READERS))
def test_deeply_nested_json_is_refused_by_every_reader(
    inputs: Inputs,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    reader: str,
) -> None:
    argv, target, shown = READERS[reader](inputs, tmp_path)
    target.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    monkeypatch.chdir(tmp_path)  # a plan goes to ./sweep-plan, if any is made
    assert main(argv) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    assert captured.out == ""
    message = "[invalid-json] not valid JSON: nested deeper than 1024 levels of lists and objects"
    assert f"{message} in {shown}" in captured.err
    assert not (tmp_path / "sweep-plan").exists()


# --------------------------------------------------------------------------- a failing stdout

#: A successful run of every command: (argv, the files it writes), under a folder of its own.
SUCCESSES: dict[str, Callable[[Inputs, Path], tuple[list[str], list[Path]]]] = {
    "tune": lambda given, out: (
        [str(given.sweep), "--output-json", str(out / "r.json"), "--plan-json", str(out / "p")],
        [out / "r.json", out / "p"],
    ),
    "plan": lambda given, out: (["plan", "-o", str(out / "plan"), *LLAMA_FLAGS], [out / "plan"]),
    "check": lambda given, out: (
        ["check", str(given.validation), "--output-json", str(out / "c.json")],
        [out / "c.json"],
    ),
    "diff": lambda given, out: (
        ["diff", str(given.result), str(given.sweep), "--output-json", str(out / "d.json")],
        [out / "d.json"],
    ),
    "export": lambda given, out: (
        ["export", str(given.result), "-o", str(out / "e.json")],
        [out / "e.json"],
    ),
    "--help": lambda given, out: (["--help"], []),
    "plan --help": lambda given, out: (["plan", "--help"], []),
}


@pytest.mark.parametrize(
    ("command", "launcher"),
    [*((command, "module") for command in SUCCESSES), ("tune", "console script")],
)
def test_a_stdout_that_fails_ends_with_one_line_and_exit_2(
    inputs: Inputs, tmp_path: Path, command: str, launcher: str
) -> None:
    argv, written = SUCCESSES[command](inputs, tmp_path)
    if launcher == "console script":
        script = Path(sys.executable).parent / "tune-spec-k"
        if not script.exists():
            pytest.skip(f"no tune-spec-k console script beside {sys.executable}")
        runner = [str(script)]
    else:
        runner = [sys.executable, "-m", "lib.cli"]
    with open("/dev/full", "w") as full:
        completed = subprocess.run(
            [*runner, *argv],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    assert completed.returncode == EXIT_BAD_INPUT
    assert "Traceback" not in completed.stderr
    assert completed.stderr.splitlines()[-1:] == [
        "tune-spec-k: cannot write to standard output: [Errno 28] No space left on device"
    ]
    assert completed.stderr.count("standard output") == 1
    # The analysis is printed before anything is written: nothing is.
    assert [path for path in written if path.exists()] == []


def test_main_reports_a_failing_stdout_in_process(
    inputs: Inputs,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    class Failing(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(sys, "stdout", Failing())
    assert main(["export", str(inputs.result), "-o", str(tmp_path / "e.json")]) == EXIT_BAD_INPUT
    assert capsys.readouterr().err == (
        "tune-spec-k: cannot write to standard output: [Errno 5] Input/output error\n"
    )
    assert not (tmp_path / "e.json").exists()


# --------------------------------------------------------------------------- output paths


def _sweep_copy(given: Inputs, tmp_path: Path) -> Path:
    copy = tmp_path / "sweep"
    if not copy.exists():
        shutil.copytree(given.sweep, copy)
    return copy


def _linked(tmp_path: Path, name: str, target: Path) -> Path:
    link = tmp_path / name
    if not link.is_symlink():
        link.symlink_to(target)
    return link


def _plain_file(path: Path) -> Path:
    """``path``, an empty regular file (where an output's folder would have to be)."""
    path.write_text("")
    return path


#: Outputs refused before anything is read, printed or written: (argv, the flag, the path
#: reported), each a function of the inputs and the test's folder.
REFUSALS: dict[
    str, tuple[Callable[[Inputs, Path], list[str]], str, Callable[[Inputs, Path], Path]]
] = {
    # (A missing folder is made, as the seed makes its --output-json's; a file is no folder.)
    "tune: the folder of --output-json is a file (--plan-json fine)": (
        lambda given, t: [
            str(given.sweep),
            "--plan-json",
            str(t / "ok.json"),
            "--output-json",
            str(_plain_file(t / "plain") / "x.json"),
        ],
        "--output-json",
        lambda given, t: t / "plain" / "x.json",
    ),
    "tune: --output-json is a folder": (
        lambda given, t: [str(given.sweep), "--output-json", str(t)],
        "--output-json",
        lambda given, t: t,
    ),
    "tune: --output-json is the sweep's summary.json": (
        lambda given, t: [str(_sweep_copy(given, t)), "--output-json", str(_summary(t / "sweep"))],
        "--output-json",
        lambda given, t: _summary(t / "sweep"),
    ),
    "tune: --plan-json is a run=N.json beside a summary": (
        lambda given, t: [
            str(_sweep_copy(given, t)),
            "--plan-json",
            str(_summary(t / "sweep").with_name("run=0.json")),
        ],
        "--plan-json",
        lambda given, t: _summary(t / "sweep").with_name("run=0.json"),
    ),
    "tune: --output-json through a link to the sweep": (
        lambda given, t: [
            str(_sweep_copy(given, t)),
            "--output-json",
            str(_linked(t, "link", t / "sweep") / _summary(t / "sweep").relative_to(t / "sweep")),
        ],
        "--output-json",
        lambda given, t: t / "link" / _summary(t / "sweep").relative_to(t / "sweep"),
    ),
    "tune: --plan-json and --output-json the same": (
        lambda given, t: [
            str(given.sweep),
            "--plan-json",
            str(t / "x.json"),
            "--output-json",
            str(t / "." / "x.json"),
        ],
        "--output-json",
        lambda given, t: t / "x.json",
    ),
    "tune: --plan-json a link to --output-json": (
        lambda given, t: [
            str(given.sweep),
            "--plan-json",
            str(_linked(t, "link.json", t / "x.json")),
            "--output-json",
            str(t / "x.json"),
        ],
        "--output-json",
        lambda given, t: t / "x.json",
    ),
    "tune: the default output is the plan": (
        lambda given, t: [
            str(_sweep_copy(given, t)),
            "--plan-json",
            str(t / "sweep" / "speculative_k_schedule.json"),
        ],
        "--plan-json",
        lambda given, t: t / "sweep" / "speculative_k_schedule.json",
    ),
    "check: --output-json is the schedule": (
        lambda given, t: [
            "check",
            str(given.validation),
            "--schedule",
            str(given.result),
            "--output-json",
            str(given.result),
        ],
        "--output-json",
        lambda given, t: given.result,
    ),
    "check: --output-json is the validation's data": (
        lambda given, t: [
            "check",
            str(given.validation),
            "--output-json",
            str(_summary(given.validation)),
        ],
        "--output-json",
        lambda given, t: _summary(given.validation),
    ),
    "diff: --output-json is A": (
        lambda given, t: [
            "diff",
            str(given.result),
            str(given.sweep),
            "--output-json",
            str(given.result),
        ],
        "--output-json",
        lambda given, t: given.result,
    ),
    "diff: --output-json is B's data": (
        lambda given, t: [
            "diff",
            str(given.result),
            str(given.sweep),
            "--output-json",
            str(_summary(given.sweep)),
        ],
        "--output-json",
        lambda given, t: _summary(given.sweep),
    ),
    "export: --output is the source": (
        lambda given, t: ["export", str(given.result), "--output", str(given.result)],
        "--output",
        lambda given, t: given.result,
    ),
    "plan: -o holds the design read": (
        lambda given, t: [
            "plan",
            "--design",
            str(given.design),
            "--validate",
            str(given.result),
            "-o",
            str(given.design.parent),
        ],
        "--output-dir",
        lambda given, t: given.design,
    ),
    "plan: -o below a file": (
        lambda given, t: ["plan", *LLAMA_FLAGS, "-o", str(given.result / "plan")],
        "--output-dir",
        lambda given, t: given.result / "plan" / "sweep_plan.json",
    ),
}


def _tree(*folders: Path) -> dict[str, bytes]:
    return {
        str(path): path.read_bytes()
        for folder in folders
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }


@pytest.mark.parametrize("case", list(REFUSALS))
def test_an_output_path_is_refused_before_anything_is_written(
    inputs: Inputs,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    case: str,
) -> None:
    argv, flag, path = REFUSALS[case]
    arguments, reported = argv(inputs, tmp_path), path(inputs, tmp_path)
    before = _tree(tmp_path, inputs.result.parent)
    monkeypatch.chdir(tmp_path)
    assert main(arguments) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    assert captured.out == ""
    heading, *problems = captured.err.splitlines()
    assert heading.endswith(f"problem(s) with {flag}")
    assert any(line.endswith(f" in {reported}") for line in problems), captured.err
    assert _tree(tmp_path, inputs.result.parent) == before


def test_run_reports_a_stdout_that_fails_at_its_last_flush(tmp_path: Path) -> None:
    # Output left in the buffer (by code that does not flush as `say` does) meets the error at
    # run()'s flush, past main().
    script = (
        "import sys\n"
        "from lib.cli import main as entry\n"
        "entry.main = lambda: sys.stdout.write('left in the buffer\\n') and 0\n"
        "entry.run()\n"
    )
    buffered = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    with open("/dev/full", "w") as full:
        completed = subprocess.run(
            [sys.executable, "-c", script],
            cwd=REPO,
            env=buffered,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    assert completed.returncode == EXIT_BAD_INPUT
    assert completed.stderr == (
        "tune-spec-k: cannot write to standard output: [Errno 28] No space left on device\n"
    )


def test_a_usage_error_quotes_the_arguments_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["some-dir", "--no-such-flag\nerror [forged] all is well"])
    assert stopped.value.code == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "unrecognized arguments: --no-such-flag\\nerror [forged] all is well" in err
    assert not any(line.startswith("error [forged]") for line in err.splitlines())
