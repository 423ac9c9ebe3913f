"""``tune-spec-k EXPERIMENT_DIR``: a drop-in replacement for the seed's
``vllm bench sweep tune_speculative_k`` (vLLM PR #49163): same flags, defaults, output file,
JSON keys and stdout lines; where the seed would stop at its first error, this lists every
problem and exits 2.

Stdout: the schedule as JSON on one line, a line per anchor (the seed's), then tune-spec-k's
additions (confidence per anchor, switch points, the measurement plan), the
``--speculative-config`` to paste, and ``Wrote PATH`` last. A sweep that varied the prompt
length (:mod:`lib.context`) prints the seed's lines, then the grid of chosen K per (batch size,
prompt length), the context measurement plan and each context format's paste-ready config.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from lib.cli.common import (
    EXIT_BAD_INPUT,
    PROGRAM,
    Output,
    add_output_json,
    check_outputs,
    print_output_problems,
    print_problems,
    write_and_print,
)
from lib.flags import add_flags, from_arguments
from lib.settings import (
    ENGINE_FIELDS,
    RESULT_FILE,
    ROUNDS_FILE,
    ContextSettings,
    DeploySettings,
    Fields,
    Options,
    Settings,
    TrafficSettings,
)

if TYPE_CHECKING:
    from lib.context_axis import ContextAxis
    from lib.deploy.engine import EngineFacts
    from lib.deploy.verdict import Verdict
    from lib.problems import Problem
    from lib.server_info import SavedServers
    from lib.sweep_files import SweepFiles
    from lib.sweeps import Sweep
    from lib.traffic import TrafficMix

__all__ = ["TuneArgs", "main"]


@dataclass(frozen=True)
class TuneArgs:
    """Everything ``tune-spec-k EXPERIMENT_DIR`` was asked to do."""

    experiment_dir: str
    output_json: str | None
    plan_json: str | None
    fields: Fields
    settings: Settings
    options: Options
    context: ContextSettings = field(default_factory=ContextSettings)
    deploy: DeploySettings = field(default_factory=DeploySettings)
    traffic: TrafficSettings = field(default_factory=TrafficSettings)

    description: ClassVar[str] = (
        "Choose vLLM's Dynamic speculative-decoding schedule"
        " (speculative_config.num_speculative_tokens_per_batch_size) from the results of"
        " `vllm bench sweep serve`: repeated runs per (batch-size anchor, K). Per anchor, every"
        " K is scored by a conservative objective (median moved against the objective by"
        " PENALTY x 1.4826 x MAD); the smallest K within the relative tolerance of the best"
        " wins. A sweep that varied the prompt length is also tuned per (batch size, prompt"
        " length) (--context-var; docs/context.md).\n\nExit status: 0 written, 2 bad input"
        " (every problem is listed)."
    )
    example: ClassVar[str] = (
        f"example: {PROGRAM} results/20261129_101500 --objective-var median_tpot_ms"
        " --objective-direction minimize"
    )

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "experiment_dir",
            metavar="EXPERIMENT_DIR",
            help="folder written by `vllm bench sweep serve` (summary.json files at any depth)",
        )
        add_output_json(
            parser, f"where to write the result (default: EXPERIMENT_DIR/{RESULT_FILE})"
        )
        add_flags(parser, Fields)
        add_flags(parser, Settings)
        add_flags(parser, Options)
        add_flags(parser, ContextSettings)
        add_flags(parser, DeploySettings)
        add_flags(parser, TrafficSettings)
        parser.add_argument(
            "--plan-json",
            default=None,
            metavar="PATH",
            help="(not in the seed) also write the measurement plan (reruns, new anchors) as"
            " JSON; on a context sweep, per prompt length, with the prompt lengths to measure"
            " next",
        )

    @classmethod
    def from_cli_args(cls, arguments: argparse.Namespace) -> TuneArgs:
        return cls(
            experiment_dir=arguments.experiment_dir,
            output_json=arguments.output_json,
            plan_json=arguments.plan_json,
            fields=from_arguments(Fields, arguments),
            settings=from_arguments(Settings, arguments),
            options=from_arguments(Options, arguments),
            context=from_arguments(ContextSettings, arguments),
            deploy=from_arguments(DeploySettings, arguments),
            traffic=from_arguments(TrafficSettings, arguments),
        )


def main(args: TuneArgs) -> int:
    """Tune, write the result (and the plan), print what the seed prints and more."""
    import gc

    # A short process: the cyclic collector would only walk the modules being imported, again
    # and again (parsed JSON and Polars frames hold no cycles to find).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _tune(args)
    finally:
        if collecting:
            gc.enable()


def _read(args: TuneArgs) -> tuple[SweepFiles, SavedServers]:
    """The sweep's files, only the metrics the analysis reads, and the server configs it saved
    (run in the prefetch child; a large sweep in as many processes as there are cores)."""
    from lib.prefetch import cores
    from lib.server_info import read_server_settings
    from lib.sweep_files import read_sweep_files

    files = read_sweep_files(
        args.experiment_dir,
        batch_size_var=args.fields.batch_size_var,
        k_var=args.fields.k_var,
        metrics=(
            *args.settings.metrics_read(),
            *args.context.fields_read(),
            *(name for names in ENGINE_FIELDS.values() for name in names),
        ),
        processes=cores(),
    )
    return files, read_server_settings(args.experiment_dir)


def _import_what_follows() -> None:
    """Import, while the child reads, what the rest of the run imports on either path (a
    context axis or not): on a large sweep the reading takes longer than the CLI's first
    imports (150-250 ms longer at 20,000 runs), and these take ~45 ms (the confidence
    draws' ``numpy.random``, the context axis, the deployment, the verdict, the result file
    and the export formats)."""
    import importlib

    from lib.deploy.registry import formats

    for module in (
        "numpy.random",
        "lib.context",
        "lib.deploy.result_file",
        "lib.deploy.tuning",
        "lib.deploy.verdict",
    ):
        importlib.import_module(module)
    formats()


def _outputs(args: TuneArgs) -> tuple[Output, Output | None]:
    """Where the result goes (``--output-json``, else the experiment folder) and the plan."""
    from pathlib import Path

    result = Output("--output-json", Path(args.experiment_dir) / RESULT_FILE, default=True)
    if args.output_json is not None:
        result = Output("--output-json", Path(args.output_json))
    plan = Output("--plan-json", Path(args.plan_json)) if args.plan_json is not None else None
    return result, plan


def _tune(args: TuneArgs) -> int:
    import functools

    from lib.prefetch import Prefetch

    output, plan_output = _outputs(args)
    outputs = [output] if plan_output is None else [plan_output, output]
    if print_output_problems(PROGRAM, check_outputs(outputs, [args.experiment_dir])):
        return EXIT_BAD_INPUT
    mix, refused = _traffic_mix(args)
    if refused:
        return EXIT_BAD_INPUT
    # The files are read in a second process while this one imports Polars and NumPy.
    reading = Prefetch.start(functools.partial(_read, args))
    from lib.analysis import analyse
    from lib.present import text
    from lib.sweeps import sweep_from

    if reading.forked:
        _import_what_follows()
    files, saved = reading.result()
    if os.path.isfile(os.path.join(args.experiment_dir, ROUNDS_FILE)):
        from lib.loop.run.rounds import with_design_ks

        # A `tune-spec-k run` experiment is tuned with its design's K, as its rounds were.
        settings = with_design_ks(args.settings, args.experiment_dir)
        args = dataclasses.replace(args, settings=settings)
    sweep = sweep_from(files, replica_var=args.fields.replica_var)
    from lib.deploy.ceiling import release_refusals

    context_invalid = args.context.invalid(args.settings.objective)
    deploy_invalid = [*args.deploy.invalid(), *release_refusals(args.deploy.vllm_version)]
    if context_invalid or deploy_invalid:
        from lib.problems import Problem, Severity

        reasons = [*context_invalid, *deploy_invalid]
        invalid = [Problem(Severity.ERROR, "invalid-setting", r) for r in reasons]
        print_problems(invalid, lambda count: f"{PROGRAM}: nothing written: {count} problem(s)")
        return EXIT_BAD_INPUT
    from lib.context_axis import find_context_axis

    axis, context_problems = find_context_axis(sweep, args.context)
    from lib.deploy.tuning import sweep_engine_facts

    facts, fact_problems = sweep_engine_facts(sweep, saved)
    if axis is not None:
        return _tune_contexts(args, sweep, axis, output, plan_output, (facts, fact_problems))
    from lib.deploy.result_file import result_text
    from lib.deploy.tuning import deploy_analysis
    from lib.deploy.verdict import verdict_in

    tuned = analyse(sweep, args.settings, args.options)
    if context_problems:
        # Before the deployment, so that the verdict counts them too.
        problems = (*tuned.result.problems, *context_problems)
        tuned = dataclasses.replace(
            tuned, result=dataclasses.replace(tuned.result, problems=problems)
        )
    analysis, deployment = deploy_analysis(tuned, args.deploy, facts, fact_problems)
    from lib.deploy.traffic import traffic_in, with_traffic

    analysis = with_traffic(analysis, mix)
    result = analysis.result
    verdict = verdict_in(result)
    failed = print_problems(
        result.problems,
        lambda count: (
            f"{PROGRAM}: no schedule written: {count} problem(s) in {args.experiment_dir}"
        ),
    )
    if failed or not result.ok or result.schedule is None:
        _print_refused_verdict(verdict)
        return EXIT_BAD_INPUT
    plan = analysis.plan
    writes = [(output, result_text(result))]
    if plan_output is not None and plan is not None:
        writes.insert(0, (plan_output, plan.to_json_text()))
    lines = [result.schedule.json_text(), *text.decision_lines(result)]
    lines += text.anchor_detail_lines(result)
    if analysis.report is not None:
        lines += text.confidence_lines(analysis.report, result)
    if analysis.switch_points is not None:
        lines += text.switch_point_lines(analysis.switch_points)
    if plan is not None:
        lines += text.measurement_plan_lines(plan)
    if analysis.effective_batch is not None:
        lines += text.effective_batch_lines(analysis.effective_batch)
    if deployment is not None:
        lines += deployment.lines()
    weighed = traffic_in(result)
    if weighed is not None:
        lines.append(weighed.line())
    if verdict is not None:
        lines += verdict.lines()
    lines.append(text.speculative_config_line(result))
    return write_and_print(PROGRAM, writes, lines)


def _traffic_mix(args: TuneArgs) -> tuple[TrafficMix | None, bool]:
    """The ``--traffic`` file's mix (None when not given), and whether it was refused (its
    problems printed: nothing is written)."""
    if args.traffic.traffic is None:
        return None, False
    from lib.traffic import read_traffic

    mix, problems = read_traffic(args.traffic.traffic)
    if problems:
        print_problems(
            problems, lambda count: f"{PROGRAM}: nothing written: {count} problem(s) in --traffic"
        )
        return None, True
    return mix, False


def _print_refused_verdict(verdict: Verdict | None) -> None:
    """The verdict of a tuning the CLI refuses (``cannot-tune``, each kind of error with its
    fix), on stderr after the errors: stdout stays the seed's (nothing), and the app's first
    screen says the same."""
    if verdict is not None:
        for line in verdict.lines():
            print(line, file=sys.stderr)


def _tune_contexts(
    args: TuneArgs,
    sweep: Sweep,
    axis: ContextAxis,
    output: Output,
    plan_output: Output | None,
    facts: tuple[EngineFacts, list[Problem]],
) -> int:
    """A sweep with a context axis: the seed's batch-only answer (drop-in), then the grid; the
    context measurement plan to ``plan_output`` (``--plan-json``). Every context point and the
    answer are deployed as a batch-only sweep is (the capture rule under the same flags and
    the sweep's ``facts``), so the grid's verdict counts each point's batch rules."""
    from lib.context import analyse_contexts
    from lib.deploy.result_file import context_text
    from lib.deploy.tuning import Deployment, deploy_contexts
    from lib.deploy.verdict import context_verdict
    from lib.present import text

    analysis = deploy_contexts(
        analyse_contexts(sweep, axis, args.settings, args.options), args.deploy, *facts
    )
    failed = print_problems(
        analysis.problems,
        lambda count: (
            f"{PROGRAM}: no schedule written: {count} problem(s) in {args.experiment_dir}"
        ),
    )
    if failed or not analysis.ok:
        _print_refused_verdict(context_verdict(analysis))
        return EXIT_BAD_INPUT
    lines = []
    if args.traffic.traffic is not None:
        lines.append(
            "traffic: --traffic is not weighed on a sweep that varied the prompt length"
            " (docs/traffic.md); tune per prompt length with --context-var none to weigh it"
        )
    answer = analysis.answer
    if answer is not None and analysis.deployable and answer.result.schedule is not None:
        lines += [answer.result.schedule.json_text(), *text.decision_lines(answer.result)]
        lines += text.anchor_detail_lines(answer.result)
    lines += text.context_grid_lines(analysis)
    lines += text.context_plan_lines(analysis)
    if analysis.deployable:
        lines.append("paste-ready config per format (tune-spec-k export --format F for the rest):")
        lines += text.context_export_lines(analysis)
    if answer is not None and analysis.deployable:
        deployment = answer.result.additions.get("deployment")
        lines += deployment.lines() if isinstance(deployment, Deployment) else []
    verdict = context_verdict(analysis)
    lines += verdict.lines()
    if answer is not None and analysis.deployable:
        lines.append(text.speculative_config_line(answer.result))
    writes = [(output, context_text(analysis, verdict))]
    if plan_output is not None:
        writes.insert(0, (plan_output, analysis.measurement_plan_text()))
    return write_and_print(PROGRAM, writes, lines)
