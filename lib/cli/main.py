"""The ``tune-spec-k`` entry point: tuning, and a registry of subcommands for the loop.

``tune-spec-k EXPERIMENT_DIR [flags]`` tunes (:mod:`lib.cli.tune`, the seed's drop-in CLI);
``tune-spec-k COMMAND ...`` runs one of :data:`SUBCOMMANDS`. Each command is a module with an
``Args`` dataclass that adds its flags to a parser (``add_cli_args``), builds itself from the
parsed namespace (``from_cli_args``), and a ``main(args)`` returning the exit status; the
settings' flags come from the settings dataclasses (:mod:`lib.flags`). A subcommand's module is
imported only when it runs, so ``tune-spec-k --help`` loads neither Polars nor Altair.

A folder literally named like a subcommand is tuned as ``tune-spec-k ./plan``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from lib import signals
from lib.cli import tune
from lib.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    PROGRAM,
    StdoutFailed,
    say,
    stdout_to_devnull,
)

__all__ = ["SUBCOMMANDS", "Subcommand", "build_parser", "main", "run"]


@dataclass(frozen=True)
class Subcommand:
    """A ``tune-spec-k COMMAND``: its name, one line for ``tune-spec-k --help``, and the module
    holding its ``Args`` class (``args_class``) and ``main``."""

    name: str
    summary: str
    module: str
    args_class: str

    def load(self) -> tuple[Any, Any]:
        """(the Args class, main) of the command, importing its module."""
        module = importlib.import_module(self.module)
        return getattr(module, self.args_class), module.main


SUBCOMMANDS = (
    Subcommand(
        "plan",
        "write the params files and the command of a sweep to run (tuning, follow-up, validation)",
        "lib.cli.plan",
        "PlanArgs",
    ),
    Subcommand(
        "run",
        "the loop, closed: plan, sweep, tune and follow up, round after round, within a budget",
        "lib.cli.run",
        "RunArgs",
    ),
    Subcommand(
        "check",
        "judge a deployed schedule against static K and no speculation (exit 1 on a loss)",
        "lib.cli.check",
        "CheckArgs",
    ),
    Subcommand(
        "diff",
        "compare two tunings, folders or result JSONs (exit 1 when materially different)",
        "lib.cli.diff",
        "DiffArgs",
    ),
    Subcommand(
        "export",
        "convert a schedule for TensorRT-LLM (draft_len_schedule) or vLLM",
        "lib.cli.export",
        "ExportArgs",
    ),
)


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's formatter at the terminal's width as argparse finds it (``COLUMNS``, else the
    terminal, else 80), without importing shutil: that import alone is a tenth of the time
    ``tune-spec-k --help`` takes."""

    def __init__(self, prog: str) -> None:
        try:
            columns = int(os.environ.get("COLUMNS", ""))
        except ValueError:
            try:
                columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
            except (AttributeError, ValueError, OSError):
                columns = 80
        super().__init__(prog, width=columns - 2)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, but ``--help`` is printed as every other output is (:func:`say`):
    argparse ignores a failure to write it (``--help > /dev/full`` would exit 0); and a usage
    error is :func:`~lib.problems.printable`: it quotes the arguments as given
    (``unrecognized arguments: ...``), newlines included."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        return super().parse_known_args(
            dashed_flags(sys.argv[1:] if args is None else args), namespace
        )

    def print_help(self, file: Any = None) -> None:
        if file is not None:
            super().print_help(file)
            return
        say(self.format_help().splitlines())

    def error(self, message: str) -> NoReturn:
        from lib.problems import printable

        super().error(printable(message))


def dashed_flags(arguments: Sequence[str]) -> list[str]:
    """The arguments with each flag's underscores as dashes, as vLLM's own parser takes them
    (``--min_runs 5`` is ``--min-runs 5``, ``--k_var=x_y`` is ``--k-var=x_y``): only the name
    of a token that starts with ``--``, never a value, and nothing after a bare ``--``. A
    token with a space is a value (argparse reads it so: ``--serve-args "--seed_x 1"``).

    >>> dashed_flags(["d", "--min_runs", "5", "--k_var=a_b", "--", "--x_y", "--a_b c"])
    ['d', '--min-runs', '5', '--k-var=a_b', '--', '--x_y', '--a_b c']
    """
    found: list[str] = []
    for position, argument in enumerate(arguments):
        if argument == "--":
            return found + list(arguments[position:])
        if argument.startswith("--") and " " not in argument:
            name, equals, value = argument.partition("=")
            argument = name.replace("_", "-") + equals + value
        found.append(argument)
    return found


def _parser(args_class: Any, prog: str, epilog: str | None = None) -> argparse.ArgumentParser:
    """A command's parser: its description wrapped by paragraph, its epilog as written."""
    paragraphs = args_class.description.split("\n\n")
    parser = _Parser(
        prog=prog,
        description="\n\n".join(textwrap.fill(paragraph, 88) for paragraph in paragraphs),
        epilog=epilog if epilog is not None else getattr(args_class, "example", None),
        formatter_class=_HelpFormatter,
    )
    args_class.add_cli_args(parser)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``tune-spec-k EXPERIMENT_DIR``; its help lists the subcommands too."""
    width = max(len(command.name) for command in SUBCOMMANDS)
    lines = [f"  {c.name:<{width}}  {c.summary}" for c in SUBCOMMANDS]
    epilog = (
        f"subcommands ({PROGRAM} COMMAND --help for each; the loop is in docs/loop.md):\n"
        + "\n".join(lines)
        + "\n\n"
        + tune.TuneArgs.example
    )
    return _parser(tune.TuneArgs, PROGRAM, epilog)


def _run(argv: list[str]) -> int:
    for command in SUBCOMMANDS:
        if argv and argv[0] == command.name:
            args_class, run = command.load()
            parser = _parser(args_class, f"{PROGRAM} {command.name}")
            return int(run(args_class.from_cli_args(parser.parse_args(argv[1:]))))
    return tune.main(tune.TuneArgs.from_cli_args(build_parser().parse_args(argv)))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; a closed stdout (``tune-spec-k DIR | head -1``) ends quietly, one that
    fails (``> /dev/full``) ends with a line on stderr and :data:`EXIT_BAD_INPUT`; a stop
    signal (SIGINT, SIGTERM, SIGHUP) ends at once, with a line on stderr, no child left and no
    file half-written, and 130 (:data:`lib.signals.EXIT_STOPPED`)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    with signals.raised():
        try:
            return _run(arguments)
        except BrokenPipeError:
            stdout_to_devnull()
            return EXIT_OK
        except StdoutFailed as error:
            return _stdout_failed(error)
        except (signals.Stopped, KeyboardInterrupt) as stop:
            return _stopped(stop)


def _stopped(stop: BaseException) -> int:
    """A command stopped by a signal (:mod:`lib.signals`): every child killed and reaped, one
    line on stderr, no traceback; 130 whichever the signal (:data:`lib.signals.EXIT_STOPPED`)."""
    from lib.prefetch import stop_children

    stop_children()
    number = stop.number if isinstance(stop, signals.Stopped) else int(signal.SIGINT)
    with contextlib.suppress(OSError, ValueError, AttributeError):
        name = signal.Signals(number).name
        print(f"{PROGRAM}: stopped by {name}; every file is whole, old or new", file=sys.stderr)
    return signals.exit_status(number)


def _stdout_failed(error: BaseException) -> int:
    """Say on stderr that standard output failed; :data:`EXIT_BAD_INPUT`."""
    stdout_to_devnull()
    # When stderr fails too, the exit status is all that is left.
    with contextlib.suppress(OSError, ValueError, AttributeError):
        print(f"{PROGRAM}: cannot write to standard output: {error}", file=sys.stderr)
    return EXIT_BAD_INPUT


def run() -> None:
    """The ``tune-spec-k`` script: :func:`main`, then exit without tearing the interpreter down.

    By then every file is written and closed and the output is flushed here; what is left is
    freeing Polars' and NumPy's memory and threads one object at a time, a tenth of the whole
    run, which no one sees. Exceptions still end the usual way (with their traceback); the
    ``SystemExit`` of ``--help`` or a usage error ends here too, its status kept. A stdout that
    fails at this last flush ends as in :func:`main` (a line on stderr, exit 2); a closed pipe
    quietly.
    """
    try:
        status = main()
    except SystemExit as stop:
        if not isinstance(stop.code, int | None):
            raise
        status = stop.code or 0
    except KeyboardInterrupt as stop:  # Ctrl-C before main set its handlers, or after
        status = _stopped(stop)
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        pass
    except OSError as error:
        status = _stdout_failed(error)
    except KeyboardInterrupt as stop:  # Ctrl-C at the last flush: the work is done
        status = _stopped(stop)
    with contextlib.suppress(OSError, AttributeError):
        sys.stderr.flush()
    os._exit(status)
