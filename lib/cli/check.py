"""``tune-spec-k check VALIDATION_DIR``: is the deployed schedule at least as good as static K
and as no speculation (:mod:`lib.loop.check`)? Exit status: 0 no loss, 1 a loss (with
``--strict``: an inconclusive anchor too), 2 bad input."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
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
from lib.deploy.registry import read_decisions
from lib.files import read_json
from lib.flags import add_flags, from_arguments
from lib.loop.check.arms import UnderTest
from lib.loop.check.judge import CheckSettings
from lib.loop.check.report import check_deployment
from lib.loop.check.schedule_file import context_schedule_file
from lib.present.text import check_lines
from lib.problems import Problem
from lib.settings import (
    ContextSettings,
    DeploySettings,
    Fields,
    Options,
    Settings,
    TrafficSettings,
)
from lib.traffic import read_traffic

__all__ = ["CheckArgs", "main"]

_COMMAND = f"{PROGRAM} check"
#: The tuning settings the check uses; the rest do not apply to arms.
SETTINGS_USED = ("objective", "direction", "min_runs", "relative_tolerance")
OPTIONS_USED = ("confidence", "seed", "server_cv", "run_cv")


@dataclass(frozen=True)
class CheckArgs:
    """What ``tune-spec-k check`` was asked to judge, and how."""

    experiment_dir: str
    schedule_file: str | None
    strict: bool
    output_json: str | None
    fields: Fields
    settings: Settings
    options: Options
    deploy: DeploySettings = field(default_factory=DeploySettings)
    context: ContextSettings = field(default_factory=ContextSettings)
    traffic: TrafficSettings = field(default_factory=TrafficSettings)

    description: ClassVar[str] = (
        "Judge a deployed schedule from a validation sweep (tune-spec-k plan --validate): per"
        " anchor, is the dynamic server at least as good as the best static K and as K=0"
        " (within the relative tolerance, with the confidence analysis)?\n\nExit status: 0 no"
        " loss, 1 a loss at some anchor (or, with --strict, an inconclusive anchor), 2 bad"
        " input."
    )
    example: ClassVar[str] = (
        f"example: {_COMMAND} results/validation --schedule"
        " results/tuning/speculative_k_schedule.json"
    )

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("experiment_dir", metavar="VALIDATION_DIR", help="the validation sweep")
        parser.add_argument(
            "--schedule",
            dest="schedule_file",
            metavar="JSON",
            help="the schedule under test: a result JSON, a speculative_config, a [[lo, hi, K]]"
            " list or a TensorRT-LLM draft_len_schedule; or a context schedule, judged per"
            " prompt length: an export of vllm-rfc-48944 or vllm-pr-54801, or a"
            " speculative_config holding speculative_token_schedule or"
            " num_speculative_tokens_per_seq_len (default: the sweep's one multi-range"
            " schedule)",
        )
        add_flags(parser, Settings, only=SETTINGS_USED)
        add_flags(parser, Fields, only=("batch_size_var", "replica_var"))
        add_flags(parser, Options, only=OPTIONS_USED)
        add_flags(parser, DeploySettings)
        add_flags(parser, ContextSettings)
        add_flags(parser, TrafficSettings)
        parser.add_argument(
            "--strict", action="store_true", help="exit 1 for inconclusive anchors too"
        )
        add_output_json(parser, "also write the report as JSON")

    @classmethod
    def from_cli_args(cls, arguments: argparse.Namespace) -> CheckArgs:
        return cls(
            experiment_dir=arguments.experiment_dir,
            schedule_file=arguments.schedule_file,
            strict=arguments.strict,
            output_json=arguments.output_json,
            fields=from_arguments(Fields, arguments),
            settings=from_arguments(Settings, arguments),
            options=from_arguments(Options, arguments),
            deploy=from_arguments(DeploySettings, arguments),
            context=from_arguments(ContextSettings, arguments),
            traffic=from_arguments(TrafficSettings, arguments),
        )


def main(args: CheckArgs) -> int:
    """Check, print the verdicts; exit 1 on a loss (or, strict, an inconclusive anchor)."""
    outputs = [Output("--output-json", Path(args.output_json))] if args.output_json else []
    inputs = [args.experiment_dir, *([args.schedule_file] if args.schedule_file else [])]
    if print_output_problems(_COMMAND, check_outputs(outputs, inputs)):
        return EXIT_BAD_INPUT
    schedule: UnderTest | None = None
    if args.schedule_file:
        schedule, problems = _schedule_under_test(args.schedule_file)
        if schedule is None:
            print_problems(problems, lambda count: f"{_COMMAND}: cannot read the schedule")
            return EXIT_BAD_INPUT
    mix = None
    if args.traffic.traffic is not None:
        mix, problems = read_traffic(args.traffic.traffic)
        if problems:
            print_problems(problems, lambda count: f"{_COMMAND}: cannot read --traffic")
            return EXIT_BAD_INPUT
    settings = CheckSettings(args.settings, args.options, args.fields, args.context)
    report = check_deployment(args.experiment_dir, settings, schedule, args.deploy, mix)
    if print_problems(
        report.problems,
        lambda count: f"{_COMMAND}: cannot judge {args.experiment_dir}: {count} problem(s)",
    ):
        return EXIT_BAD_INPUT
    files = [(output, report.to_json_text()) for output in outputs]
    if write_and_print(_COMMAND, files, check_lines(report)) != EXIT_OK:
        return EXIT_BAD_INPUT
    inconclusive = "inconclusive" in report.every_verdict
    return EXIT_FINDING if report.losses or (args.strict and inconclusive) else EXIT_OK


def _schedule_under_test(path: str) -> tuple[UnderTest | None, list[Problem]]:
    """The ``--schedule`` file's schedule: a context schedule (:func:`context_schedule_file`),
    else the batch schedule of any file ``read_decisions`` reads."""
    data, problems = read_json(path)
    if problems:
        return None, problems
    context, problems = context_schedule_file(data, path)
    if context is not None or problems:
        return context, problems
    found, problems = read_decisions(path)
    return (None, problems) if found is None else (found.schedule, [])
