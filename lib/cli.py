"""`tune-spec-k EXPERIMENT_DIR`: a drop-in replacement for the seed's
`vllm bench sweep tune_speculative_k` (vLLM PR #49163): same flags, defaults, output file,
JSON keys and stdout lines; where the seed would stop at its first error, this lists every
problem and exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from lib import cli_tools
from lib.analysis import Options, analyse
from lib.confidence import DEFAULT_CONFIDENCE, DEFAULT_SEED, POLICIES
from lib.problems import Severity
from lib.schedule import Settings, TuningResult
from lib.sweeps import DEFAULT_BATCH_SIZE_VAR, DEFAULT_K_VAR, load_experiment

OUTPUT_FILE = "speculative_k_schedule.json"
EXIT_OK = 0
EXIT_BAD_INPUT = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tune-spec-k",
        description=(
            "Choose vLLM's Dynamic speculative-decoding schedule "
            "(speculative_config.num_speculative_tokens_per_batch_size) from the results of "
            "`vllm bench sweep serve`: repeated runs per (batch-size anchor, K). Per anchor, "
            "every K is scored by a conservative objective (median moved against the objective "
            "by PENALTY x 1.4826 x MAD); the smallest K within the relative tolerance of the "
            "best wins. Exit status: 0 written, 2 bad input (every problem is listed)."
        ),
        epilog=(
            "Example: tune-spec-k results/20261129_101500 --objective-var median_tpot_ms "
            "--objective-direction minimize. The rest of the loop (docs/loop.md): "
            "tune-spec-k plan | check | diff | export --help."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "experiment_dir",
        metavar="EXPERIMENT_DIR",
        help="folder written by `vllm bench sweep serve` (summary.json files at any depth)",
    )
    parser.add_argument(
        "--output-json",
        default=None,
        help=f"where to write the result (default: EXPERIMENT_DIR/{OUTPUT_FILE})",
    )
    parser.add_argument(
        "--batch-size-var",
        default=DEFAULT_BATCH_SIZE_VAR,
        help="record field holding the batch-size anchor",
    )
    parser.add_argument(
        "--k-var",
        default=DEFAULT_K_VAR,
        help="record field holding K: a number (static K) or a [[lo, hi, K], ...] schedule "
        "resolved at the anchor; dotted paths walk nested dicts",
    )
    parser.add_argument(
        "--objective-var", default="output_throughput", help="record field to optimise"
    )
    parser.add_argument(
        "--objective-direction",
        choices=("maximize", "minimize"),
        default="maximize",
        help="whether a larger or a smaller objective is better",
    )
    parser.add_argument(
        "--acceptance-var",
        default=None,
        help="acceptance field to check for stability, e.g. spec_decode_acceptance_length",
    )
    parser.add_argument("--min-runs", type=int, default=3, help="runs needed per (anchor, K)")
    parser.add_argument(
        "--uncertainty-penalty",
        type=float,
        default=1.0,
        help="robust sigmas (1.4826 x MAD) subtracted from the median before ranking",
    )
    parser.add_argument(
        "--max-objective-relative-mad",
        type=float,
        default=0.1,
        help="reject an (anchor, K) whose objective MAD / median exceeds this",
    )
    parser.add_argument(
        "--max-acceptance-relative-mad",
        type=float,
        default=0.1,
        help="acceptance MAD / median above this is a warning (an error with --strict-...)",
    )
    parser.add_argument(
        "--strict-acceptance-stability",
        action="store_true",
        help="treat unstable acceptance as an error instead of a warning",
    )
    parser.add_argument(
        "--relative-tolerance",
        type=float,
        default=0.01,
        help="K within this fraction of the best conservative score tie; the smallest wins",
    )
    parser.add_argument(
        "--max-batch-size",
        type=int,
        default=None,
        help="upper end of the last range; must equal the largest anchor (default: it)",
    )
    parser.add_argument(
        "--allow-mixed-global-k",
        action="store_true",
        help="(not in the seed) accept a sweep whose global num_speculative_tokens differs "
        "between candidates, as in sweeps of static-K servers; the schedule is exported "
        "with the largest",
    )
    parser.add_argument(
        "--policy",
        choices=POLICIES,
        default="seed",
        help="(not in the seed) how to pick K per anchor: the seed's conservative score, or "
        "'confident': the smallest K whose probability of being within the relative tolerance "
        "of the best reaches --confidence (anchors where none does are unresolved and get a "
        "provisional K); noisy cells are weighed instead of rejected",
    )
    parser.add_argument(
        "--confidence",
        type=float,
        default=DEFAULT_CONFIDENCE,
        help="(not in the seed) P(eps-good) an anchor's pick needs to count as resolved",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=DEFAULT_SEED,
        help="(not in the seed) seed of the Monte-Carlo behind P(eps-good); same seed, same output",
    )
    parser.add_argument(
        "--interpolated-schedule",
        action="store_true",
        help="(not in the seed) emit the schedule with switch points interpolated between "
        "anchors instead of switching at the upper anchor",
    )
    parser.add_argument(
        "--plan-json",
        default=None,
        metavar="PATH",
        help="(not in the seed) also write the measurement plan (reruns, new anchors) as JSON",
    )
    return parser


def settings_from(arguments: argparse.Namespace) -> Settings:
    return Settings(
        objective=arguments.objective_var,
        direction=arguments.objective_direction,
        acceptance=arguments.acceptance_var,
        min_runs=arguments.min_runs,
        uncertainty_penalty=arguments.uncertainty_penalty,
        max_objective_relative_mad=arguments.max_objective_relative_mad,
        max_acceptance_relative_mad=arguments.max_acceptance_relative_mad,
        strict_acceptance_stability=arguments.strict_acceptance_stability,
        relative_tolerance=arguments.relative_tolerance,
        max_batch_size=arguments.max_batch_size,
        allow_mixed_global_k=arguments.allow_mixed_global_k,
    )


def options_from(arguments: argparse.Namespace) -> Options:
    return Options(
        policy=arguments.policy,
        confidence=arguments.confidence,
        seed=arguments.seed,
        interpolated_schedule=arguments.interpolated_schedule,
    )


def decision_lines(result: TuningResult) -> list[str]:
    """One line per anchor: the pick, its scores, and how it compares."""
    lines = []
    tied = dict(zip(result.decisions["anchor"], result.decisions["tied_k"], strict=True))
    for row in result.decisions.to_dicts():
        if row["selected_k"] is None:
            lines.append(f"batch_size={row['anchor']}: no K (every cell rejected)")
            continue
        vs_k0 = row["vs_k0_percent"]
        lines.append(
            f"batch_size={row['anchor']}: K={row['selected_k']}"
            f" median={row['selected_median']:.2f}"
            f" conservative={row['selected_conservative']:.2f}"
            f" vs_best={row['vs_best_percent']:+.2f}%"
            f" vs_k0={'n/a' if vs_k0 is None else f'{vs_k0:+.2f}%'}"
            f" tied={list(tied[row['anchor']])}"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; a closed stdout (``tune-spec-k DIR | head -1``) ends quietly. A first
    argument naming a subcommand (``plan``, ``check``, ``diff``, ``export``) runs it
    (:mod:`lib.cli_tools`); a folder with such a name is given as ``./plan``."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        if arguments and arguments[0] in cli_tools.SUBCOMMANDS:
            return cli_tools.main(arguments)
        return _run(arguments)
    except BrokenPipeError:
        # Python would complain again when flushing the dead pipe at exit: point it elsewhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _run(argv: Sequence[str] | None) -> int:
    arguments = build_parser().parse_args(argv)
    settings = settings_from(arguments)
    sweep = load_experiment(
        arguments.experiment_dir, batch_size_var=arguments.batch_size_var, k_var=arguments.k_var
    )
    analysis = analyse(sweep, settings, options_from(arguments))
    result = analysis.result
    for problem in result.problems:
        if problem.severity is not Severity.ERROR:
            print(problem.describe(), file=sys.stderr)
    if not result.ok:
        found = result.errors
        print(
            f"tune-spec-k: no schedule written: {len(found)} problem(s) in"
            f" {arguments.experiment_dir}",
            file=sys.stderr,
        )
        for problem in found:
            print("  " + problem.describe(), file=sys.stderr)
        return EXIT_BAD_INPUT
    output = Path(arguments.output_json or Path(arguments.experiment_dir) / OUTPUT_FILE)
    plan = analysis.plan
    writes = [(output, result.to_json_text())]
    if arguments.plan_json is not None and plan is not None:
        writes.insert(0, (Path(arguments.plan_json), plan.to_json_text()))
    for path, text in writes:
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as error:
            print(f"tune-spec-k: cannot write {path}: {error.strerror or error}", file=sys.stderr)
            return EXIT_BAD_INPUT
    print(json.dumps([list(r) for r in result.schedule or ()]))
    for line in decision_lines(result):
        print(line)
    if analysis.report is not None:
        for line in analysis.report.status_lines(result):
            print(line)
    for line in analysis.switch_points.text_lines() if analysis.switch_points else []:
        print(line)
    for line in plan.text_lines() if plan is not None else []:
        print(line)
    print("--speculative-config " + shlex.quote(json.dumps(result.speculative_config())))
    for path, _ in writes:
        print(f"Wrote {path}")
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
