"""What every ``tune-spec-k`` command shares: exit statuses, how lines and problems are printed,
the ``--output-json`` flag and writing the output files.

Every line goes out through :func:`say` (stdout) or :func:`print_problems` (stderr), each made
:func:`~lib.problems.printable`: a folder name with a newline cannot forge a line.

Imports only the standard library and the light core modules, so that ``tune-spec-k --help``
starts fast; each command imports what its work needs when it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from lib.problems import Problem

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FINDING",
    "EXIT_OK",
    "PROGRAM",
    "StdoutFailed",
    "add_output_json",
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


def write_and_print(command: str, files: Sequence[tuple[Path, str]], lines: Sequence[str]) -> int:
    """Print ``lines``, write ``files`` (:func:`lib.files.write_files`, all or none), then print
    ``Wrote PATH`` for each file, last; :data:`EXIT_OK`, else :data:`EXIT_BAD_INPUT`.

    The lines are printed before anything is written, so that a stdout that fails
    (:class:`StdoutFailed`) leaves nothing written. A path that cannot be written is refused
    first (nothing printed); a file that fails while written (a full disk) leaves the lines
    printed, the problem on stderr and every file as it was.
    """
    from lib.files import unwritable_reason, write_files
    from lib.problems import Problem, Severity

    def refuse(problems: list[Problem]) -> bool:
        return print_problems(problems, lambda count: f"{command}: a file could not be written")

    reasons = [(path, unwritable_reason(path)) for path, _ in files]
    unwritable = [
        Problem(Severity.ERROR, "unwritable-file", reason, files=(str(path),))
        for path, reason in reasons
        if reason is not None
    ]
    if refuse(unwritable):
        return EXIT_BAD_INPUT
    say(lines)
    if refuse(write_files(files)):
        return EXIT_BAD_INPUT
    say([f"Wrote {path}" for path, _ in files])
    return EXIT_OK
