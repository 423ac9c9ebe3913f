"""``tune-spec-k plan``: write the params files, run script and command of a sweep to run
(:mod:`lib.loop.plan`). Exit status: 0 written, 2 bad input."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from lib.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    PROGRAM,
    Output,
    check_outputs,
    print_output_problems,
    print_problems,
    say,
)
from lib.files import read_json
from lib.flags import add_flags, flag_name, flag_of, given, int_list
from lib.keys import MISSING
from lib.loop.plan.design import LAYOUTS, SweepDesign, design_from
from lib.loop.plan.follow_up import first_replica_after, follow_up_plan, follow_up_results_dir
from lib.loop.plan.follow_up_needs import follow_up_needs
from lib.loop.plan.sweep_plan import SweepPlan
from lib.loop.plan.tuning import tuning_plan
from lib.loop.plan.validation import validation_plan
from lib.loop.plan.write import plan_files, plan_folder_reason, write_plan
from lib.present.text import sweep_plan_lines
from lib.problems import Problem, Severity

__all__ = ["PlanArgs", "main", "plan_of", "write_planned"]

_COMMAND = f"{PROGRAM} plan"


@dataclass(frozen=True)
class PlanArgs:
    """What ``tune-spec-k plan`` was asked to write."""

    output_dir: str
    design_file: str | None
    #: The design flags given on the command line (they override ``design_file``).
    design: Mapping[str, Any]
    follow_up: tuple[str, ...] | None
    validate: str | None
    static_ks: tuple[int, ...] | None
    results_dir: str | None
    experiment_name: str | None
    #: With ``validate``: an export of a context format to serve as the dynamic server.
    validate_export: str | None = None

    description: ClassVar[str] = (
        "Write serve_params.json, bench_params.json, run.sh and command.txt for `vllm bench"
        " sweep serve`: the seed's K x anchor matrix (one global num_speculative_tokens = the"
        " largest K, K set by one-range schedules [[1, MAX, K]], K=0 included, anchors from 1 to"
        " the deployment maximum), each of a cell's --num-runs repeats a bench combo with its"
        " own --seed; with --follow-up, only the cells an earlier result left unresolved, on"
        " new seeds; with --validate, the tuned schedule next to static-K servers and a server"
        " without speculation.\n\nExit status: 0 written, 2 bad input."
    )
    example: ClassVar[str] = (
        f"example: {_COMMAND} --model meta-llama/Llama-3.1-8B-Instruct --method eagle3"
        " --draft-model yuhuili/EAGLE3-LLaMA3.1-Instruct-8B --ks 0,1,3,7 --anchors"
        " 1,64,128,256 --input-len 128 --output-len 128 -o plan"
    )

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "-o",
            "--output-dir",
            default="sweep-plan",
            help="where to write the plan (default: sweep-plan)",
        )
        layout = flag_of(SweepDesign, "layout")
        parser.add_argument(
            layout.name,
            action=_DesignAction,
            dest="design_file",
            metavar="{" + ",".join(LAYOUTS) + "}|SWEEP_PLAN_JSON",
            help=f"{layout.help} (default: full); SWEEP_PLAN_JSON: read the"
            " design (every flag below) from an earlier plan's sweep_plan.json, flags given"
            " here overriding it; give it twice for both (a file named full or lean: ./full)",
        )
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument(
            "--follow-up",
            nargs="+",
            metavar="JSON",
            help="plan only what an earlier tuning left open: a measurement plan (tune-spec-k"
            " DIR --plan-json PATH) and/or the result JSON (speculative_k_schedule.json)",
        )
        mode.add_argument(
            "--validate",
            metavar="RESULT_JSON",
            help="plan the check of a tuned schedule: the result JSON's schedule as a dynamic"
            " server next to static-K servers and a server without speculation",
        )
        parser.add_argument(
            "--validate-export",
            metavar="EXPORT_JSON",
            help="with --validate: serve this export of the result's context grid (the -o file"
            " of tune-spec-k export --format vllm-context, vllm-rfc-48944 or vllm-pr-54801) as"
            " the dynamic server, every server at every anchor and prompt length of the grid",
        )
        parser.add_argument(
            "--static-ks",
            type=int_list,
            help="with --validate: the static K servers (default: every K > 0 of"
            f" {flag_name(SweepDesign, 'ks')} and of the schedule)",
        )
        add_flags(
            parser.add_argument_group("design"),
            SweepDesign,
            only=[f.name for f in dataclasses.fields(SweepDesign) if f.name != "layout"],
        )
        parser.add_argument(
            "--results-dir",
            help="`-o` of the sweep (default: results; a follow-up defaults to the first"
            " experiment's folder, found from the result JSON's input_summary_files, so the"
            " runs merge; refused where that folder is unknown or not writable)",
        )
        parser.add_argument(
            "--experiment-name",
            help="`-e` of the sweep (default: tuning, followup or validation)",
        )

    @classmethod
    def from_cli_args(cls, arguments: argparse.Namespace) -> PlanArgs:
        return cls(
            output_dir=arguments.output_dir,
            design_file=arguments.design_file,
            design=given(SweepDesign, arguments),
            follow_up=tuple(arguments.follow_up) if arguments.follow_up else None,
            validate=arguments.validate,
            validate_export=arguments.validate_export,
            static_ks=arguments.static_ks,
            results_dir=arguments.results_dir,
            experiment_name=arguments.experiment_name,
        )


class _DesignAction(argparse.Action):
    """``--design``: a layout (``full``, ``lean``: the design field ``layout``) or an earlier
    plan's ``sweep_plan.json``; at most one of each, so both may be given."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        name = "layout" if values in LAYOUTS else "design_file"
        if getattr(namespace, name, None) is not None:
            what = "layout (" + ", ".join(LAYOUTS) + ")" if name == "layout" else "design file"
            parser.error(f"{option_string}: one {what} at most, got a second: {values!r}")
        setattr(namespace, name, values)


def main(args: PlanArgs) -> int:
    """Plan, write every file of the plan, print the summary, the commands and the files."""
    plan, problems = plan_of(args)
    if plan is None:
        print_problems(problems, lambda count: f"{_COMMAND}: nothing written: {count} problem(s)")
        return EXIT_BAD_INPUT
    return write_planned(args, plan)


def write_planned(args: PlanArgs, plan: SweepPlan) -> int:
    """Check the plan's outputs, print its summary and commands, write its folder
    (``args.output_dir``) and list the files; :data:`EXIT_BAD_INPUT` where it cannot."""
    root = Path(args.output_dir)
    outputs = [Output("--output-dir", root / name) for name in plan_files(plan, args.output_dir)]
    inputs = [args.design_file, args.validate, args.validate_export, *(args.follow_up or ())]
    problems = check_outputs(outputs, [p for p in inputs if p is not None])
    reason = plan_folder_reason(root)
    if reason is not None:
        problems.append(
            Problem(
                Severity.ERROR,
                "unwritable-file",
                reason,
                files=(str(root),),
                extra={"flag": "--output-dir"},
            )
        )
    if print_output_problems(_COMMAND, problems):
        return EXIT_BAD_INPUT
    say(sweep_plan_lines(plan, args.output_dir))
    written, problems = write_plan(plan, args.output_dir)
    if print_problems(problems, lambda count: f"{_COMMAND}: could not write the plan"):
        return EXIT_BAD_INPUT
    say([f"Wrote {path}" for path in written])
    return EXIT_OK


def plan_of(args: PlanArgs) -> tuple[SweepPlan | None, list[Problem]]:
    """The plan the flags ask for (tuning, follow-up or validation), or None and why not."""
    stored = None
    if args.design_file:
        data, problems = read_json(args.design_file)
        if data is MISSING:
            return None, problems
        stored = data.get("design") if isinstance(data, dict) else None
        if not isinstance(stored, dict):
            problem = Problem(
                Severity.ERROR,
                "invalid-design",
                "no 'design' object",
                files=(args.design_file,),
                expected="the sweep_plan.json of an earlier plan",
            )
            return None, [problem]
    design, problems = design_from(stored, args.design, args.design_file)
    if design is None:
        return None, problems
    if args.follow_up:
        needs, problems = follow_up_needs(args.follow_up)
        if needs is None:
            return None, problems
        if "first_replica" not in args.design:
            # The first sweep is the stored design (the flags given here may change R).
            first_sweep = design if stored is None else design_from(stored, {})[0]
            design = dataclasses.replace(
                design, first_replica=first_replica_after(first_sweep or design)
            )
        results_dir, problems = follow_up_results_dir(needs, args.results_dir, args.follow_up)
        if results_dir is None:
            return None, problems
        return follow_up_plan(design, needs, results_dir, args.experiment_name or "followup")
    if args.validate:
        return validation_plan(
            design,
            args.validate,
            args.results_dir or "results",
            args.experiment_name or "validation",
            args.static_ks,
            args.validate_export,
        )
    static_ks = None if args.static_ks is None else ",".join(str(k) for k in args.static_ks)
    for name, value in (("--static-ks", static_ks), ("--validate-export", args.validate_export)):
        if value is not None:
            problem = Problem(
                Severity.ERROR, "invalid-flag", "only with --validate", field=name, value=value
            )
            return None, [problem]
    return tuning_plan(design, args.results_dir or "results", args.experiment_name or "tuning")
