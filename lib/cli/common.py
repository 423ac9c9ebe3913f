"""What every ``tune-spec-k`` command shares: exit statuses, how lines and problems are printed,
the ``--output-json`` flag, and checking and writing the output files.

Every line goes out through :func:`say` (stdout) or :func:`print_problems` (stderr), each made
:func:`~lib.problems.printable`: a folder name with a newline cannot forge a line. A command
checks every path it will write (:func:`check_outputs`) before it reads or prints anything,
and :func:`write_and_print` prints, then writes every file or none.

Imports only the standard library and the light core modules, so that ``tune-spec-k --help``
starts fast; each command imports what its work needs when it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from lib.problems import Problem

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FINDING",
    "EXIT_OK",
    "PROGRAM",
    "Output",
    "StdoutFailed",
    "add_output_json",
    "check_outputs",
    "print_output_problems",
    "print_problems",
    "say",
    "stdout_to_devnull",
    "write_and_print",
]

PROGRAM = "tune-spec-k"
#: Success: the output was written (``check``, ``diff``: and nothing was found).
EXIT_OK = 0
#: ``check`` found a loss, ``diff`` a material difference: the commands work as CI gates.
EXIT_FINDING = 1
#: Bad input or bad flags: nothing was written, every problem is on stderr.
EXIT_BAD_INPUT = 2


class StdoutFailed(Exception):
    """Standard output could not be written (a full disk, ``> /dev/full``, an I/O error): the
    command stops; :func:`lib.cli.main.main` says so on stderr and exits 2."""


def add_output_json(parser: argparse.ArgumentParser, help: str) -> None:
    """The ``--output-json PATH`` flag: where a command writes its JSON."""
    parser.add_argument("--output-json", metavar="PATH", default=None, help=help)


def say(lines: Sequence[str]) -> None:
    """Print ``lines`` on stdout, each :func:`~lib.problems.printable`, and flush them now, so
    that a failure is met here, before any file is written.

    A closed pipe (``tune-spec-k DIR | head -1``) is not a failure: the rest of the output goes
    nowhere and the command carries on, writing its files as it always did. Any other error
    raises :class:`StdoutFailed`; so does a standard output that was closed before the start.
    """
    from lib.problems import printable

    stdout = sys.stdout
    if stdout is None:
        raise StdoutFailed("it was closed before the start")
    text = "".join(printable(line) + "\n" for line in lines)
    try:
        stdout.write(text)
        stdout.flush()
    except BrokenPipeError:
        stdout_to_devnull()
    except OSError as error:
        raise StdoutFailed(str(error)) from error


def stdout_to_devnull() -> None:
    """Point stdout at the null device: Python would complain again when flushing a dead pipe
    (or a full disk) at exit, and what is left to print has nowhere to go."""
    # Without a descriptor (a stream replaced in-process) nothing flushes to a dead file.
    if sys.stdout is not None:
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def print_problems(problems: Sequence[Problem], heading: Callable[[int], str]) -> bool:
    """Warnings and notes on stderr, one line each; then, when some problems are errors,
    ``heading(number of errors)`` and every error, indented. True when there were errors: the
    command writes nothing and exits :data:`EXIT_BAD_INPUT`. The heading may name the user's
    paths: it is :func:`~lib.problems.printable` as the problems are."""
    from lib.problems import Severity, printable

    for problem in problems:
        if problem.severity is not Severity.ERROR:
            print(problem.describe(), file=sys.stderr)
    found = [problem for problem in problems if problem.severity is Severity.ERROR]
    if found:
        print(printable(heading(len(found))), file=sys.stderr)
        for problem in found:
            print("  " + problem.describe(), file=sys.stderr)
    return bool(found)


# --------------------------------------------------------------------------- output files


@dataclass(frozen=True)
class Output:
    """A file a command will write: the flag naming it and its path; ``default`` when the flag
    was not given (the path is the command's default)."""

    flag: str
    path: Path
    default: bool = False


def _identity(path: str | os.PathLike[str]) -> tuple[str, tuple[int, int] | None]:
    """The path with every link resolved, and its (device, inode) where it exists."""
    try:
        status = os.stat(path)
        inode: tuple[int, int] | None = (status.st_dev, status.st_ino)
    except OSError:
        inode = None
    return os.path.realpath(path), inode


def _same(a: tuple[str, tuple[int, int] | None], b: tuple[str, tuple[int, int] | None]) -> bool:
    return a[0] == b[0] or (a[1] is not None and a[1] == b[1])


def _input_name(path: Path) -> str | None:
    """The name by which a later read would take ``path`` as an experiment's input
    (:func:`lib.sweep_files.taken_as_input`), looked at as given and with its links resolved
    (``out.json`` may be a link to a summary.json, which writing would replace); None when
    neither is."""
    from lib.sweep_files import taken_as_input

    for name in (path.name, os.path.basename(os.path.realpath(path))):
        if taken_as_input(name):
            return name
    return None


def check_outputs(
    outputs: Sequence[Output],
    inputs: Sequence[str | os.PathLike[str]] = (),
    *,
    make_folders: bool = True,
    defaults: bool = False,
) -> list[Problem]:
    """Every reason not to write ``outputs``, each a problem naming the flag and the path;
    creates nothing.

    Refused: a path that cannot be written (:func:`lib.files.unwritable_reason`: its folder is
    missing, not a folder or not writable; it is a folder itself; a read-only file), a path
    that is one of ``inputs`` (a file given: writing it would replace the data read), a path
    named like a file a later read of an experiment takes as input, wherever it lies and
    whether it exists or not (:func:`lib.sweep_files.taken_as_input`: summary.json,
    run=N.json, server_info.json, ...; as given or through its links), and two outputs that
    are one file. Each problem names the
    path; its ``extra["flag"]`` the flag (:func:`print_output_problems` shows it: the line of
    a problem keeps the wording the write itself would fail with). Paths are compared
    resolved, so ``./x``, ``x`` and a link to ``x`` are one file. ``make_folders`` (every
    command's default, as the seed's ``tune_speculative_k`` makes the folders of its
    ``--output-json``): missing folders will be made. Whether a default path can be written is
    checked only with ``defaults``: a command checks it once its work is done and printed, so
    that a read-only default folder does not cost the user the analysis.
    """
    from lib.files import unwritable_reason
    from lib.problems import Problem, Severity

    def refused(output: Output, rule: str, message: str) -> Problem:
        return Problem(
            Severity.ERROR, rule, message, files=(str(output.path),), extra={"flag": output.flag}
        )

    problems = []
    seen: list[tuple[Output, tuple[str, tuple[int, int] | None]]] = []
    files = [_identity(path) for path in inputs if not os.path.isdir(path)]
    for output in outputs:
        identity = _identity(output.path)
        reason = None
        if defaults or not output.default:
            reason = unwritable_reason(output.path, make_folders=make_folders)
        if reason is not None:
            problems.append(refused(output, "unwritable-file", reason))
        if any(_same(identity, input_identity) for input_identity in files):
            message = "cannot write the file: the command reads it (it would replace the input)"
            problems.append(refused(output, "output-is-input", message))
        name = _input_name(output.path)
        if name is not None:
            message = (
                f"cannot write the file: a later read of any folder above it takes a file"
                f" named {name} as a sweep's input (summary.json, run=N.json,"
                " run=N.failure.json, warmup.json, server_info.json); choose another name"
            )
            problems.append(refused(output, "output-is-input", message))
        for other, other_identity in seen:
            if _same(identity, other_identity):
                # Blame the flag the user gave, not the default it collides with.
                given, named = (other, output) if output.default else (output, other)
                where = f"{named.flag} (its default)" if named.default else named.flag
                message = f"cannot write the file: {where} writes there too ({named.path})"
                problems.append(refused(given, "same-output", message))
        seen.append((output, identity))
    return problems


def print_output_problems(command: str, problems: Sequence[Problem]) -> bool:
    """:func:`print_problems` for the problems of :func:`check_outputs` (or of writing), under
    a heading naming the flags of the paths refused (a problem names its path)."""
    flags = ", ".join(dict.fromkeys(str(p.extra["flag"]) for p in problems if "flag" in p.extra))
    with_flags = f" with {flags}" if flags else ""
    return print_problems(
        problems, lambda count: f"{command}: nothing written: {count} problem(s){with_flags}"
    )


def write_and_print(command: str, files: Sequence[tuple[Output, str]], lines: Sequence[str]) -> int:
    """Print ``lines``, write ``files`` (all or none, :func:`lib.files.write_files`, making
    missing folders), then
    print ``Wrote PATH`` for each file, last; :data:`EXIT_OK`, else :data:`EXIT_BAD_INPUT`.

    Each path is checked again first (:func:`check_outputs`). A path the user gave that cannot
    be written is only refused, nothing printed (a command checks its paths before its work, so
    this is rare); a default path that cannot be written (a read-only experiment folder) still
    has the lines printed (the analysis is not lost), then the problem and how to choose
    another path. A file that fails while written (a full disk) leaves the lines
    printed, the problem on stderr and every file as it was.
    """
    from lib.files import write_files

    outputs = [output for output, _ in files]
    if print_output_problems(command, check_outputs(outputs)):
        return EXIT_BAD_INPUT
    say(lines)
    if print_output_problems(command, check_outputs(outputs, defaults=True)):
        for flag in sorted({output.flag for output in outputs if output.default}):
            print(
                f"{command}: the output above is not saved: choose a path with {flag} PATH",
                file=sys.stderr,
            )
        return EXIT_BAD_INPUT
    flags = {str(output.path): output.flag for output in outputs}
    problems = [
        dataclasses.replace(problem, extra={"flag": flags[problem.files[0]]})
        if problem.files and problem.files[0] in flags
        else problem
        for problem in write_files(
            [(output.path, text) for output, text in files], make_folders=True
        )
    ]
    if print_output_problems(command, problems):
        return EXIT_BAD_INPUT
    say([f"Wrote {output.path}" for output in outputs])
    return EXIT_OK
