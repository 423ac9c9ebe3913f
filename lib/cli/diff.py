"""``tune-spec-k diff A B``: compare two tunings, experiment folders or result JSONs
(:mod:`lib.loop.diff`). Exit status: 0 no material difference, 1 materially different, 2 bad
input: usable as a CI gate."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from lib.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FINDING,
    EXIT_OK,
    PROGRAM,
    Output,
    add_output_json,
    check_outputs,
    print_output_problems,
    print_problems,
    write_and_print,
)
from lib.flags import add_flags, from_arguments
from lib.loop.diff import DiffSettings, compare, read_side
from lib.present.text import diff_lines
from lib.problems import Problem, Severity
from lib.settings import ContextSettings, Fields, Options, Settings

__all__ = ["DiffArgs", "main"]

_COMMAND = f"{PROGRAM} diff"
#: The tuning settings that apply to an experiment folder.
SETTINGS_USED = (
    "objective",
    "direction",
    "min_runs",
    "uncertainty_penalty",
    "max_objective_relative_mad",
    "relative_tolerance",
    "allow_mixed_global_k",
)
OPTIONS_USED = ("policy", "confidence", "seed", "server_cv", "run_cv")


@dataclass(frozen=True)
class DiffArgs:
    """The two sides ``tune-spec-k diff`` compares, and how."""

    a: str
    b: str
    output_json: str | None
    settings: DiffSettings

    description: ClassVar[str] = (
        "Compare two tunings (experiment folders, tuned here, or result JSONs): schedules side"
        " by side, per batch size the K change and its cost in either sweep, and the objective"
        " change with its interval. Two context tunings (a sweep that varied the prompt length,"
        " or a result JSON with a context_grid) are also compared cell by cell (batch size x"
        " prompt length). The tuning flags apply to experiment folders; a result JSON is read"
        " as written.\n\nExit status: 0 no material difference, 1 materially"
        " different, 2 bad input: usable as a CI gate."
    )
    example: ClassVar[str] = (
        f"example: {_COMMAND} baseline/speculative_k_schedule.json results/new-sweep"
    )

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "a", metavar="A", help="the reference: experiment folder or result JSON"
        )
        parser.add_argument(
            "b", metavar="B", help="the candidate: experiment folder or result JSON"
        )
        add_flags(parser, DiffSettings)
        add_flags(parser, Settings, only=SETTINGS_USED)
        add_flags(parser, Fields)
        add_flags(parser, Options, only=OPTIONS_USED)
        add_flags(parser, ContextSettings)
        add_output_json(parser, "also write the comparison as JSON")

    @classmethod
    def from_cli_args(cls, arguments: argparse.Namespace) -> DiffArgs:
        settings = from_arguments(
            DiffSettings,
            arguments,
            tuning=from_arguments(Settings, arguments),
            options=from_arguments(Options, arguments),
            fields=from_arguments(Fields, arguments),
            context=from_arguments(ContextSettings, arguments),
        )
        return cls(arguments.a, arguments.b, arguments.output_json, settings)


def main(args: DiffArgs) -> int:
    """Compare, print the comparison; exit 1 when materially different."""

    def refuse(problems: list[Problem]) -> int:
        heading = f"{_COMMAND}: cannot compare: {{}} problem(s)"
        print_problems(problems, heading.format)
        return EXIT_BAD_INPUT

    settings = args.settings
    invalid = settings.invalid()
    if invalid:
        return refuse([Problem(Severity.ERROR, "invalid-setting", reason) for reason in invalid])
    outputs = [Output("--output-json", Path(args.output_json))] if args.output_json else []
    if print_output_problems(_COMMAND, check_outputs(outputs, [args.a, args.b])):
        return EXIT_BAD_INPUT
    a, problems = read_side(args.a, settings)
    if a is None:
        return refuse(problems)
    b, problems = read_side(args.b, settings)
    if b is None:
        return refuse(problems)
    report, problems = compare(a, b, settings)
    if report is None:
        return refuse(problems)
    files = [(output, report.to_json_text()) for output in outputs]
    if write_and_print(_COMMAND, files, diff_lines(report)) != EXIT_OK:
        return EXIT_BAD_INPUT
    return EXIT_FINDING if report.material else EXIT_OK
