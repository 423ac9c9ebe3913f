"""``tune-spec-k export JSON``: a schedule for TensorRT-LLM or vLLM, from any file holding one,
or a result's (batch x context) grid for the context formats (:mod:`lib.loop.export`,
:mod:`lib.deploy.grid`). Exit status: 0 written, 2 bad input."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from lib.cli.common import (
    EXIT_BAD_INPUT,
    PROGRAM,
    Output,
    check_outputs,
    print_output_problems,
    print_problems,
    write_and_print,
)
from lib.deploy.registry import format_names
from lib.deploy.settings import ExportSettings
from lib.flags import add_flags, from_arguments
from lib.loop.export import export_file
from lib.settings import DeploySettings

__all__ = ["ExportArgs", "main"]

_COMMAND = f"{PROGRAM} export"


@dataclass(frozen=True)
class ExportArgs:
    """The schedule file ``tune-spec-k export`` converts, how, and where it writes."""

    source: str
    output: str | None
    settings: ExportSettings
    deploy: DeploySettings

    description: ClassVar[str] = (
        "Convert a schedule for another engine: --format trtllm writes TensorRT-LLM's"
        " max_draft_len and draft_len_schedule ({batch_size_upper_bound: K}); --format vllm"
        " writes vLLM's speculative_config fields (num_speculative_tokens and"
        " num_speculative_tokens_per_batch_size), capped to the CUDA-graph capture ceiling"
        " when --max-cudagraph-capture-size is known; --format sglang writes SGLang's"
        " --speculative-adaptive-config file; from any kind of input.\n\nFrom a result"
        " JSON with a context grid (a sweep that varied the prompt length), the context"
        " formats: vllm-context (today's vLLM: a batch-only schedule for --context-mix, and"
        " one per measured context), vllm-rfc-48944 (vLLM PR #48944's 5-item batch x context"
        " entries) and vllm-pr-54801 (vLLM PR #54801's batch and length tables). Each is"
        " checked against its format's rules before anything is written, and says per cell"
        " what it loses against the measured 2-D optimum. The first line printed is the"
        " paste-ready config; then the loss summary, the loss table, notes and warnings; -o"
        " writes all of it as indented JSON.\n\nExit status: 0 written, 2 bad input."
    )
    example: ClassVar[str] = (
        f"example: {_COMMAND} results/tuning/speculative_k_schedule.json --format trtllm"
        " -o trtllm.json"
    )

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "source",
            metavar="JSON",
            help="a result JSON, a speculative_config, a [[lo, hi, K]] list, or a TensorRT-LLM"
            " draft_len_schedule (bare or with max_draft_len)",
        )
        add_flags(parser, ExportSettings, choices={"format": format_names()})
        add_flags(parser, DeploySettings)
        parser.add_argument("-o", "--output", help="write the JSON here too")

    @classmethod
    def from_cli_args(cls, arguments: argparse.Namespace) -> ExportArgs:
        return cls(
            arguments.source,
            arguments.output,
            from_arguments(ExportSettings, arguments),
            from_arguments(DeploySettings, arguments),
        )


def main(args: ExportArgs) -> int:
    """Print the exported config on one line (and write its file with ``-o``), then what the
    format adds: the line to paste, a context format's loss summary and table, notes and
    warnings."""
    outputs = [Output("--output", Path(args.output))] if args.output else []
    if print_output_problems(_COMMAND, check_outputs(outputs, [args.source])):
        return EXIT_BAD_INPUT
    exported, problems = export_file(args.source, args.settings, args.deploy)
    if exported is None:
        print_problems(problems, lambda count: f"{_COMMAND}: nothing written: {count} problem(s)")
        return EXIT_BAD_INPUT
    text = exported.text()
    return write_and_print(_COMMAND, [(output, text) for output in outputs], exported.lines())
