"""The loop's subcommands: ``tune-spec-k plan | check | diff | export``.

``tune-spec-k EXPERIMENT_DIR [flags]`` (tuning, :mod:`lib.cli`) is unchanged; its ``main``
hands argv here when the first argument is one of :data:`SUBCOMMANDS` (a folder literally named
like one is given as ``./plan``). Exit status everywhere: 0 success, 2 bad input or flags (the
problems on stderr, never a traceback); ``check`` and ``diff`` use 1 for a finding (a loss, a
material difference) so they work as CI gates.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from lib import export, sweep_plan
from lib.compare import CompareError, DiffSettings, compare, read_side
from lib.confidence import DEFAULT_CONFIDENCE, DEFAULT_SEED, POLICIES
from lib.problems import Severity
from lib.schedule import Settings
from lib.sweep_plan import PlanError, SweepDesign, SweepPlan
from lib.sweeps import DEFAULT_BATCH_SIZE_VAR, DEFAULT_K_VAR
from lib.validate_deployment import CheckSettings, check_deployment

SUBCOMMANDS = ("plan", "check", "diff", "export")
EXIT_OK = 0
EXIT_FINDING = 1
EXIT_BAD_INPUT = 2


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected comma-separated whole numbers, e.g. 0,1,3,7"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError(f"{text!r}: expected at least one number")
    return values


def _spec_option(text: str) -> tuple[str, Any]:
    key, separator, raw = text.partition("=")
    if not separator or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE, e.g. prompt_lookup_max=4")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return key, value


# --------------------------------------------------------------------------- plan

#: Design flags: (dest, default). None-defaults let --design fill them; explicit flags win.
_DESIGN_DEFAULTS: dict[str, Any] = {
    "model": None,
    "method": None,
    "draft_model": None,
    "ks": [0, 1, 3, 7],
    "global_k": None,
    "anchors": None,
    "max_batch_size": None,
    "input_len": None,
    "output_len": None,
    "dataset": "random",
    "dataset_path": None,
    "num_prompts": None,
    "goodput": [],
    "num_runs": 3,
    "warmup_num_prompts": 0,
    "host": "127.0.0.1",
    "port": 8000,
    "serve_args": "",
    "bench_args": "",
}


def plan_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tune-spec-k plan",
        description=(
            "Write serve_params.json, bench_params.json, run.sh and command.txt for `vllm bench"
            " sweep serve`: the seed's K x anchor matrix (one global num_speculative_tokens = the"
            " largest K, K set by one-range schedules [[1, MAX, K]], K=0 included, anchors from"
            " 1 to the deployment maximum); with --follow-up, only the cells an earlier result"
            " left unresolved; with --validate, the tuned schedule next to static-K servers and a"
            " server without speculation."
        ),
        epilog=(
            "Example: tune-spec-k plan --model meta-llama/Llama-3.1-8B-Instruct --method eagle3"
            " --draft-model yuhuili/EAGLE3-LLaMA3.1-Instruct-8B --ks 0,1,3,7 --anchors"
            " 1,64,128,256 --input-len 128 --output-len 128 -o plan"
        ),
    )
    parser.add_argument("-o", "--output-dir", default="sweep-plan", help="where to write the plan")
    parser.add_argument(
        "--design",
        metavar="SWEEP_PLAN_JSON",
        help="read the design (every flag below) from an earlier plan's sweep_plan.json; flags"
        " given here override it",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--follow-up",
        nargs="+",
        metavar="JSON",
        help="plan only what an earlier tuning left open: a measurement plan (tune-spec-k DIR"
        " --plan-json PATH) and/or the result JSON (speculative_k_schedule.json)",
    )
    mode.add_argument(
        "--validate",
        metavar="RESULT_JSON",
        help="plan the check of a tuned schedule: the result JSON's schedule as a dynamic server"
        " next to static-K servers and a server without speculation",
    )
    parser.add_argument(
        "--static-ks",
        type=_int_list,
        help="with --validate: the static K servers (default: every K > 0 of --ks and of the"
        " schedule)",
    )
    design = parser.add_argument_group("design")
    design.add_argument("--model", help="the target model, as `vllm serve` takes it")
    design.add_argument(
        "--method", help="speculative_config.method: ngram, eagle, eagle3, draft_model, mtp, ..."
    )
    design.add_argument("--draft-model", help="speculative_config.model (the drafter), if any")
    design.add_argument(
        "--spec-option",
        action="append",
        type=_spec_option,
        default=None,
        metavar="KEY=VALUE",
        help="a further speculative_config key (VALUE parsed as JSON when it is), repeatable,"
        " e.g. prompt_lookup_max=4",
    )
    design.add_argument("--ks", type=_int_list, help="K to measure, 0 included (default 0,1,3,7)")
    design.add_argument(
        "--global-k",
        type=int,
        help="num_speculative_tokens of every server (default: the largest K)",
    )
    design.add_argument(
        "--anchors",
        type=_int_list,
        help="max_concurrency values, from 1 to the deployment maximum (default: powers of two"
        " up to --max-batch-size)",
    )
    design.add_argument(
        "--max-batch-size",
        type=int,
        help="the deployment maximum (--max-num-seqs; the schedule's upper end); must equal the"
        " largest anchor",
    )
    design.add_argument("--input-len", type=int, help="prompt tokens (random / sonnet datasets)")
    design.add_argument("--output-len", type=int, help="output tokens per request")
    design.add_argument(
        "--dataset",
        help="`vllm bench serve --dataset-name` (default random): random, sonnet, sharegpt, ...",
    )
    design.add_argument("--dataset-path", help="`--dataset-path` for file-based datasets")
    design.add_argument(
        "--num-prompts",
        type=int,
        help=f"prompts per run (default: max({sweep_plan.MIN_PROMPTS},"
        f" {sweep_plan.PROMPTS_PER_SLOT} x concurrency))",
    )
    design.add_argument(
        "--goodput",
        action="append",
        default=None,
        metavar="METRIC:MS",
        help="a goodput SLO for `vllm bench serve --goodput`, repeatable (e.g. tpot:50)",
    )
    design.add_argument("--num-runs", type=int, help="runs per (anchor, K) (default 3)")
    design.add_argument(
        "--warmup-num-prompts", type=int, help="an unmeasured warm-up run per combo (default 0)"
    )
    design.add_argument("--host", help="server host (default 127.0.0.1)")
    design.add_argument("--port", type=int, help="server port (default 8000)")
    design.add_argument(
        "--serve-args",
        help="further `vllm serve` arguments shared by every server, as one string",
    )
    design.add_argument(
        "--bench-args",
        help="further `vllm bench serve` arguments, as one string",
    )
    parser.add_argument(
        "--results-dir",
        help="`-o` of the sweep (default: results; a follow-up defaults to the folder of the"
        " result JSON, which is the first experiment's, so the runs merge)",
    )
    parser.add_argument(
        "--experiment-name",
        help="`-e` of the sweep (default: tuning, followup or validation)",
    )
    return parser


def _design_from(arguments: argparse.Namespace) -> SweepDesign:
    values = dict(_DESIGN_DEFAULTS)
    values["speculative_options"] = {}
    if arguments.design:
        stored = sweep_plan.read_json_file(arguments.design)
        design_data = stored.get("design") if isinstance(stored, dict) else None
        if not isinstance(design_data, dict):
            raise PlanError(f"{arguments.design}: no 'design' object (expected sweep_plan.json)")
        unknown = sorted(set(design_data) - set(values))
        if unknown:
            raise PlanError(f"{arguments.design}: unknown design keys {unknown}")
        values.update(design_data)
    for name in _DESIGN_DEFAULTS:
        given = getattr(arguments, name)
        if given is not None:
            values[name] = given
    if arguments.spec_option is not None:
        values["speculative_options"] = dict(arguments.spec_option)
    missing = [f"--{n.replace('_', '-')}" for n in ("model", "method") if values[n] is None]
    if values["anchors"] is None and values["max_batch_size"] is None:
        missing.append("--anchors or --max-batch-size")
    if missing:
        raise PlanError(f"{', '.join(missing)}: required (or --design SWEEP_PLAN_JSON)")
    if values["anchors"] is None:
        values["anchors"] = sweep_plan.default_anchors(values["max_batch_size"])
    values["ks"] = tuple(values["ks"])
    values["anchors"] = tuple(values["anchors"])
    values["goodput"] = tuple(values["goodput"])
    return SweepDesign(**values)


def run_plan(argv: Sequence[str]) -> int:
    arguments = plan_parser().parse_args(argv)
    try:
        design = _design_from(arguments)
        plan = _make_plan(design, arguments)
        written = sweep_plan.write_plan(plan, arguments.output_dir)
    except PlanError as error:
        print(f"tune-spec-k plan: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as error:
        print(f"tune-spec-k plan: cannot write {error.filename}: {error.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for line in plan.text_lines(arguments.output_dir):
        print(line)
    for command in plan.commands(arguments.output_dir):
        print(command)
    for path in written:
        print(f"Wrote {path}")
    return EXIT_OK


def _make_plan(design: SweepDesign, arguments: argparse.Namespace) -> SweepPlan:
    if arguments.follow_up:
        needs = sweep_plan.follow_up_needs(arguments.follow_up)
        results_default = str(Path(arguments.follow_up[-1]).parent)
        for path in arguments.follow_up:
            data = sweep_plan.read_json_file(path)
            if isinstance(data, dict) and "batch_decisions" in data:
                results_default = str(Path(path).parent)
        return sweep_plan.follow_up_plan(
            design,
            needs,
            arguments.results_dir or results_default,
            arguments.experiment_name or "followup",
        )
    if arguments.validate:
        result = sweep_plan.read_json_file(arguments.validate)
        if not isinstance(result, dict):
            raise PlanError(f"{arguments.validate}: expected a tune-spec-k result object")
        try:
            return sweep_plan.validation_plan(
                design,
                result,
                arguments.results_dir or "results",
                arguments.experiment_name or "validation",
                arguments.static_ks,
            )
        except PlanError as error:
            raise PlanError(f"{arguments.validate}: {error}") from None
    if arguments.static_ks is not None:
        raise PlanError("--static-ks: only with --validate")
    return sweep_plan.tuning_plan(
        design, arguments.results_dir or "results", arguments.experiment_name or "tuning"
    )


# --------------------------------------------------------------------------- check


def _add_objective_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--objective-var", default="output_throughput", help="record field to compare"
    )
    parser.add_argument(
        "--objective-direction",
        choices=("maximize", "minimize"),
        default="maximize",
        help="whether a larger or a smaller objective is better",
    )
    parser.add_argument(
        "--batch-size-var", default=DEFAULT_BATCH_SIZE_VAR, help="record field of the anchor"
    )
    parser.add_argument("--min-runs", type=int, default=3, help="runs needed per cell")
    parser.add_argument(
        "--relative-tolerance",
        type=float,
        default=0.01,
        help="within this fraction of the best counts as at least as good",
    )
    parser.add_argument(
        "--confidence",
        type=float,
        default=DEFAULT_CONFIDENCE,
        help="probability needed for a verdict (P(eps-good), lib.confidence)",
    )
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help="seed of the Monte-Carlo behind P"
    )


def check_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tune-spec-k check",
        description=(
            "Judge a deployed schedule from a validation sweep (tune-spec-k plan --validate):"
            " per anchor, is the dynamic server at least as good as the best static K and as"
            " K=0 (within the relative tolerance, with the confidence analysis)? Exit status:"
            " 0 no loss, 1 a loss at some anchor (or, with --strict, an inconclusive anchor),"
            " 2 bad input."
        ),
    )
    parser.add_argument("experiment_dir", metavar="VALIDATION_DIR", help="the validation sweep")
    parser.add_argument(
        "--schedule",
        metavar="JSON",
        help="the schedule under test: a result JSON, a speculative_config, a [[lo, hi, K]]"
        " list or a TensorRT-LLM draft_len_schedule (default: the sweep's one multi-range"
        " schedule)",
    )
    _add_objective_flags(parser)
    parser.add_argument("--strict", action="store_true", help="exit 1 for inconclusive anchors too")
    parser.add_argument("--output-json", help="also write the report as JSON")
    return parser


def run_check(argv: Sequence[str]) -> int:
    arguments = check_parser().parse_args(argv)
    schedule = None
    if arguments.schedule:
        try:
            schedule, _, _ = export.read_schedule(arguments.schedule)
        except export.ExportError as error:
            print(f"tune-spec-k check: {error}", file=sys.stderr)
            return EXIT_BAD_INPUT
    settings = CheckSettings(
        objective=arguments.objective_var,
        direction=arguments.objective_direction,
        relative_tolerance=arguments.relative_tolerance,
        confidence=arguments.confidence,
        min_runs=arguments.min_runs,
        seed=arguments.seed,
        batch_size_var=arguments.batch_size_var,
    )
    report = check_deployment(arguments.experiment_dir, settings, schedule)
    for problem in report.problems:
        if problem.severity is not Severity.ERROR:
            print(problem.describe(), file=sys.stderr)
    if report.errors:
        print(
            f"tune-spec-k check: cannot judge {arguments.experiment_dir}:"
            f" {len(report.errors)} problem(s)",
            file=sys.stderr,
        )
        for problem in report.errors:
            print("  " + problem.describe(), file=sys.stderr)
        return EXIT_BAD_INPUT
    if arguments.output_json and not _write(arguments.output_json, report.to_json_text()):
        return EXIT_BAD_INPUT
    for line in report.text_lines():
        print(line)
    if arguments.output_json:
        print(f"Wrote {arguments.output_json}")
    inconclusive = report.verdicts.filter(pl.col("verdict") == "inconclusive").height
    return EXIT_FINDING if report.losses or (arguments.strict and inconclusive) else EXIT_OK


def _write(path: str, text: str) -> bool:
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as error:
        print(f"tune-spec-k: cannot write {path}: {error.strerror or error}", file=sys.stderr)
        return False
    return True


# --------------------------------------------------------------------------- diff


def diff_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tune-spec-k diff",
        description=(
            "Compare two tunings (experiment folders, tuned here, or result JSONs): schedules"
            " side by side, per batch size the K change and its cost in either sweep, and the"
            " objective change with its interval. Exit status: 0 no material difference,"
            " 1 materially different, 2 bad input: usable as a CI gate."
        ),
    )
    parser.add_argument("a", metavar="A", help="the reference: experiment folder or result JSON")
    parser.add_argument("b", metavar="B", help="the candidate: experiment folder or result JSON")
    parser.add_argument(
        "--max-k-loss",
        type=float,
        default=DiffSettings.max_k_loss,
        help="a changed K is material when the other side's K loses more than this fraction"
        " in a sweep that does not call it a tie",
    )
    parser.add_argument(
        "--max-objective-change",
        type=float,
        default=DiffSettings.max_objective_change,
        help="a change of the objective at the picks beyond this fraction (and beyond the"
        " noise) is material",
    )
    _add_objective_flags(parser)
    parser.add_argument("--k-var", default=DEFAULT_K_VAR, help="record field of K (folders only)")
    parser.add_argument("--policy", choices=POLICIES, default="seed", help="how folders are tuned")
    parser.add_argument(
        "--uncertainty-penalty", type=float, default=1.0, help="as for tuning (folders only)"
    )
    parser.add_argument(
        "--max-objective-relative-mad",
        type=float,
        default=0.1,
        help="as for tuning (folders only)",
    )
    parser.add_argument(
        "--allow-mixed-global-k", action="store_true", help="as for tuning (folders only)"
    )
    parser.add_argument("--output-json", help="also write the comparison as JSON")
    return parser


def run_diff(argv: Sequence[str]) -> int:
    arguments = diff_parser().parse_args(argv)
    settings = DiffSettings(
        max_k_loss=arguments.max_k_loss,
        max_objective_change=arguments.max_objective_change,
        confidence=arguments.confidence,
        tuning=Settings(
            objective=arguments.objective_var,
            direction=arguments.objective_direction,
            min_runs=arguments.min_runs,
            uncertainty_penalty=arguments.uncertainty_penalty,
            max_objective_relative_mad=arguments.max_objective_relative_mad,
            relative_tolerance=arguments.relative_tolerance,
            allow_mixed_global_k=arguments.allow_mixed_global_k,
        ),
        policy=arguments.policy,
        seed=arguments.seed,
        batch_size_var=arguments.batch_size_var,
        k_var=arguments.k_var,
    )
    invalid = settings.invalid()
    if invalid:
        for reason in invalid:
            print(f"tune-spec-k diff: {reason}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        report = compare(
            read_side(arguments.a, settings), read_side(arguments.b, settings), settings
        )
    except CompareError as error:
        print(f"tune-spec-k diff: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if arguments.output_json and not _write(arguments.output_json, report.to_json_text()):
        return EXIT_BAD_INPUT
    for line in report.text_lines():
        print(line)
    if arguments.output_json:
        print(f"Wrote {arguments.output_json}")
    return EXIT_FINDING if report.material else EXIT_OK


# --------------------------------------------------------------------------- export


def export_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tune-spec-k export",
        description=(
            "Convert a schedule for another engine: --format trtllm writes TensorRT-LLM's"
            " max_draft_len and draft_len_schedule ({batch_size_upper_bound: K}); --format"
            " vllm writes vLLM's speculative_config fields (num_speculative_tokens and"
            " num_speculative_tokens_per_batch_size) from either kind of input."
        ),
    )
    parser.add_argument(
        "source",
        metavar="JSON",
        help="a result JSON, a speculative_config, a [[lo, hi, K]] list, or a TensorRT-LLM"
        " draft_len_schedule (bare or with max_draft_len)",
    )
    parser.add_argument("--format", choices=("trtllm", "vllm"), default="trtllm")
    parser.add_argument(
        "--global-k",
        type=int,
        help="num_speculative_tokens / max_draft_len (default: the file's, else the largest K)",
    )
    parser.add_argument("-o", "--output", help="write the JSON here too")
    return parser


def run_export(argv: Sequence[str]) -> int:
    arguments = export_parser().parse_args(argv)
    try:
        schedule, global_k, _ = export.read_schedule(arguments.source)
        largest = max(k for _, _, k in schedule)
        global_k = arguments.global_k or global_k or max(largest, 1)
        if global_k < max(largest, 1):
            raise export.ExportError(
                f"--global-k {global_k}: below the schedule's largest K {largest}"
            )
        if arguments.format == "trtllm":
            data: dict[str, Any] = export.trtllm_config(schedule, global_k)
        else:
            data = {
                "num_speculative_tokens": global_k,
                "num_speculative_tokens_per_batch_size": schedule,
            }
    except export.ExportError as error:
        print(f"tune-spec-k export: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    text = json.dumps(data)
    if arguments.output and not _write(arguments.output, json.dumps(data, indent=2) + "\n"):
        return EXIT_BAD_INPUT
    print(text)
    if arguments.output:
        print(f"Wrote {arguments.output}")
    return EXIT_OK


# --------------------------------------------------------------------------- dispatch


def main(argv: Sequence[str]) -> int:
    """``argv[0]`` is the subcommand."""
    command, rest = argv[0], list(argv[1:])
    runners = {"plan": run_plan, "check": run_check, "diff": run_diff, "export": run_export}
    return runners[command](rest)
