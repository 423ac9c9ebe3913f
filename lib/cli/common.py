"""What every ``tune-spec-k`` command shares: exit statuses, how problems are printed, the
``--output-json`` flag and writing the output files.

Imports only the standard library and the light core modules, so that ``tune-spec-k --help``
starts fast; each command imports what its work needs when it runs.
"""

from __future__ import annotations

import argparse
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
    "add_output_json",
    "print_problems",
    "write_and_print",
]

PROGRAM = "tune-spec-k"
#: Success: the output was written (``check``, ``diff``: and nothing was found).
EXIT_OK = 0
#: ``check`` found a loss, ``diff`` a material difference: the commands work as CI gates.
EXIT_FINDING = 1
#: Bad input or bad flags: nothing was written, every problem is on stderr.
EXIT_BAD_INPUT = 2


def add_output_json(parser: argparse.ArgumentParser, help: str) -> None:
    """The ``--output-json PATH`` flag: where a command writes its JSON."""
    parser.add_argument("--output-json", metavar="PATH", default=None, help=help)


def print_problems(problems: Sequence[Problem], heading: Callable[[int], str]) -> bool:
    """Warnings and notes on stderr, one line each; then, when some problems are errors,
    ``heading(number of errors)`` and every error, indented. True when there were errors: the
    command writes nothing and exits :data:`EXIT_BAD_INPUT`."""
    from lib.problems import Severity

    for problem in problems:
        if problem.severity is not Severity.ERROR:
            print(problem.describe(), file=sys.stderr)
    found = [problem for problem in problems if problem.severity is Severity.ERROR]
    if found:
        print(heading(len(found)), file=sys.stderr)
        for problem in found:
            print("  " + problem.describe(), file=sys.stderr)
    return bool(found)


def write_and_print(command: str, files: Sequence[tuple[Path, str]], lines: Sequence[str]) -> int:
    """Write ``files`` (:func:`lib.files.write_files`), then print ``lines`` and ``Wrote PATH``
    for each file, last. When a file cannot be written, print the problem under ``command``'s
    name instead and return :data:`EXIT_BAD_INPUT` (else :data:`EXIT_OK`)."""
    from lib.files import write_files

    problems = write_files(files)
    if print_problems(problems, lambda count: f"{command}: a file could not be written"):
        return EXIT_BAD_INPUT
    print("\n".join([*lines, *(f"Wrote {path}" for path, _ in files)]))
    return EXIT_OK
