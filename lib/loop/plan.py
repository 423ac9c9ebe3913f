"""``tune-spec-k plan``: the params files and the command for `vllm bench sweep serve`.

Three kinds of plan, each one or more *steps* (one ``vllm bench sweep serve`` invocation each):

- **tuning** (the seed's design): K x anchor matrix. Every serve combo keeps the global
  ``speculative_config.num_speculative_tokens`` at the largest K (it sizes buffers and CUDA
  graphs, so every candidate runs on the same engine) and sets K with a one-range schedule
  ``[[1, max_batch_size, K]]``, K=0 included the same way. Bench combos set ``max_concurrency``
  to each anchor, from 1 to the deployment maximum.
- **follow-up**: after a tuning result with unresolved anchors (the measurement plan of
  :mod:`lib.measurement_plan`, or the ``confidence`` blocks of a result JSON), only the cells
  that need more runs and the suggested new anchors, with the same engine settings, so its
  results merge with the first sweep's (the tuner reads ``summary.json`` at any depth: write
  them inside the first experiment folder).
- **validation**: the tuned schedule served as a dynamic config next to the alternatives a
  user would otherwise deploy: static-K servers (``num_speculative_tokens: K``, no schedule)
  and a server without speculation (K=0); ``tune-spec-k check`` reads the result.

**Repeats** are seeds (:func:`bench_params`): one bench combo per (anchor, repeat) with the
repeat's ``seed`` (``vllm bench serve --seed``, which samples the prompts), each run once
(``--num-runs 1``), rather than one combo run N times with one seed, which would send the same
prompts N times. Every K sees the same prompts for the same seed at an anchor, so the K are
compared on paired prompt sets; the bench combos of a serve combo share its one server start.

**Replicas** are server starts (:func:`replicated`): ``--server-replicas R`` writes each serve
combo R times, ``<combo>-seed=<r>`` with ``vllm serve --seed r``, in shuffled blocks, so the
between-server spread is measured and drift over the sweep is noise, not a bias between K; a
follow-up's replicas continue after the first sweep's values (:func:`first_replica_after`).

Params files are dicts of named combos (``vllm bench sweep serve`` also reads lists of dicts);
nested dicts such as ``speculative_config`` stay nested: the sweep passes them to the command
as JSON and copies them into every record as they are.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lib.confidence import MAX_RUNS_NEEDED, MIN_RUNS_NEEDED
from lib.deploy.decisions import SCHEDULE_KEY
from lib.deploy.formats.vllm_pr_54801 import SEQ_LEN_KEY
from lib.deploy.formats.vllm_rfc_48944 import RFC_48944_KEY
from lib.deploy.result_file import ResultFile, is_result, read_result_file, result_file_of
from lib.files import read_json, write_files
from lib.flags import flag, flag_name
from lib.keys import parse_json_string
from lib.loop.check.schedule_file import context_schedule_file, speculative_config_of
from lib.problems import Problem, Severity, show_value
from lib.schedule import Schedule
from lib.server_info import SERVER_INFO_FILE_GLOB
from lib.servers import replica_combo_name
from lib.settings import (
    DEFAULT_REPLICA_VAR,
    PROMPT_TOKENS_RANGE,
    RANDOM_PROMPT_LENGTH,
    REPEAT_SEED,
    prompt_length_reason,
)

__all__ = [
    "DESIGN_FILE",
    "RANDOM_TOKENS_NOTE",
    "FollowUpNeeds",
    "SweepDesign",
    "SweepPlan",
    "SweepStep",
    "default_anchors",
    "design_from",
    "first_replica_after",
    "follow_up_needs",
    "follow_up_plan",
    "spec_option",
    "tuning_plan",
    "validation_plan",
    "write_plan",
]

SERVE_PARAMS = "serve_params.json"
BENCH_PARAMS = "bench_params.json"
RUN_SCRIPT = "run.sh"
COMMAND_FILE = "command.txt"
DESIGN_FILE = "sweep_plan.json"

#: Per dataset, the bench flags for input and output length (None: the dataset has none).
DATASET_LENGTH_FLAGS: dict[str, tuple[str | None, str | None]] = {
    "random": ("--random-input-len", "--random-output-len"),
    "sonnet": ("--sonnet-input-len", "--sonnet-output-len"),
    "sharegpt": (None, "--sharegpt-output-len"),
    "custom": (None, "--custom-output-len"),
    "hf": (None, "--hf-output-len"),
}
GOODPUT_METRICS = ("ttft", "tpot", "e2el")
#: What ``vllm bench sweep serve`` POSTs after each run unless ``--after-bench-cmd`` is given
#: (vLLM 0.32.0 ``benchmarks/sweep/server.py``): the after-bench command must POST them too.
RESET_ENDPOINTS = ("/reset_prefix_cache", "/reset_mm_cache", "/reset_encoder_cache")
#: Why a tuning on the random dataset does not measure what a deployment sees: said in every
#: such plan's notes. The seed's own random control (vLLM PR #49163: Llama 3.1 8B, EAGLE3,
#: single H100) measured acceptance lengths of 1.09-1.15 and chose K=0 everywhere, where the
#: Sonnet dataset chose K=7 up to batch 63.
RANDOM_TOKENS_NOTE = (
    "the random dataset's prompts are token sequences no text has: the drafter cannot predict"
    " what follows them (acceptance length 1.09-1.15 in the seed's own random control), so"
    " speculation looks useless (that control chose K=0 at every batch size); tune on natural"
    " text for a"
    " deployment (--dataset sonnet --dataset-path vLLM's benchmarks/sonnet.txt, or sharegpt,"
    " custom, hf with a file of your traffic)"
)
#: ``vllm bench serve --random-output-len``'s default.
RANDOM_OUTPUT_LEN_DEFAULT = 128

#: The design's engine settings that go into every serve combo when given (named after vLLM's
#: settings and ``vllm serve`` flags): the ones the capture-ceiling rule needs.
ENGINE_PARAMS = ("max_num_seqs", "max_cudagraph_capture_size")

#: ``--num-runs`` of every sweep: each seeded bench combo is one repeat (:func:`bench_params`).
SWEEP_NUM_RUNS = 1

#: Prompts per bench combo when not given: enough waves at every concurrency to reach a steady
#: state (8 per slot), and never so few that one slow request dominates (32).
PROMPTS_PER_SLOT = 8
MIN_PROMPTS = 32


def spec_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``--spec-option``, the value parsed as JSON when it is.

    >>> spec_option("prompt_lookup_max=4")
    ('prompt_lookup_max', 4)
    """
    key, separator, raw = text.partition("=")
    if not separator or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE, e.g. prompt_lookup_max=4")
    return key, parse_json_string(raw)


@dataclass(frozen=True)
class SweepDesign:
    """Everything that fixes the engine and the workload of a sweep. ``speculative_options``
    are further ``speculative_config`` keys (e.g. ``prompt_lookup_max`` for n-gram). Empty
    ``anchors`` mean powers of two up to ``max_batch_size`` (:meth:`with_default_anchors`)."""

    model: str | None = field(
        default=None, metadata=flag("--model", "the target model, as `vllm serve` takes it")
    )
    method: str | None = field(
        default=None,
        metadata=flag(
            "--method", "speculative_config.method: ngram, eagle, eagle3, draft_model, mtp, ..."
        ),
    )
    draft_model: str | None = field(
        default=None,
        metadata=flag("--draft-model", "speculative_config.model (the drafter), if any"),
    )
    speculative_options: Mapping[str, Any] = field(
        default_factory=dict,
        metadata=flag(
            "--spec-option",
            "a further speculative_config key (VALUE parsed as JSON when it is), repeatable,"
            " e.g. prompt_lookup_max=4",
            metavar="KEY=VALUE",
            parse=spec_option,
            repeat=True,
        ),
    )
    ks: tuple[int, ...] = field(
        default=(0, 1, 3, 7), metadata=flag("--ks", "K to measure, 0 included")
    )
    global_k: int | None = field(
        default=None,
        metadata=flag(
            "--global-k", "num_speculative_tokens of every server (default: the largest K)"
        ),
    )
    anchors: tuple[int, ...] = field(
        default=(),
        metadata=flag(
            "--anchors",
            "max_concurrency values, from 1 to the deployment maximum (default: powers of two"
            " up to --max-batch-size)",
        ),
    )
    max_batch_size: int | None = field(
        default=None,
        metadata=flag(
            "--max-batch-size",
            "the deployment maximum (by default --max-num-seqs; the schedule's upper end); must"
            " equal the largest anchor",
        ),
    )
    input_len: int | None = field(
        default=None, metadata=flag("--input-len", "prompt tokens (random / sonnet datasets)")
    )
    output_len: int | None = field(
        default=None, metadata=flag("--output-len", "output tokens per request")
    )
    context_lengths: tuple[int, ...] = field(
        default=(),
        metadata=flag(
            "--context-lengths",
            "prompt lengths to sweep as a second axis (random dataset: random_input_len per"
            " bench combo), e.g. 512,4096,32768; the servers get a --max-model-len that fits"
            " the longest prompt and its output",
        ),
    )
    dataset: str = field(
        default="random",
        metadata=flag(
            "--dataset", "`vllm bench serve --dataset-name`: random, sonnet, sharegpt, ..."
        ),
    )
    dataset_path: str | None = field(
        default=None, metadata=flag("--dataset-path", "`--dataset-path` for file-based datasets")
    )
    num_prompts: int | None = field(
        default=None,
        metadata=flag(
            "--num-prompts",
            f"prompts per run (default: max({MIN_PROMPTS}, {PROMPTS_PER_SLOT} x concurrency))",
        ),
    )
    goodput: tuple[str, ...] = field(
        default=(),
        metadata=flag(
            "--goodput",
            "a goodput SLO for `vllm bench serve --goodput`, repeatable (e.g. tpot:50)",
            metavar="METRIC:MS",
            repeat=True,
        ),
    )
    num_runs: int = field(
        default=3,
        metadata=flag(
            "--num-runs",
            "runs per (anchor, K), each with its own --seed (a bench combo per seed, so the"
            " repeats send different prompts)",
        ),
    )
    server_replicas: int = field(
        default=1,
        metadata=flag(
            "--server-replicas",
            "servers per K: R >= 2 writes R serve combos per K (k3-seed=0, k3-seed=1, ...) that"
            " differ only in vLLM serve's --seed (the sampler's seed, which a temperature-0"
            " benchmark does not see), run in a shuffled order. Each replica is one more server"
            " start (about a minute on the CPU build, minutes for a large model on a GPU); they"
            " measure how much servers of one configuration differ, which runs on one server"
            " cannot",
        ),
    )
    first_replica: int = field(
        default=0,
        metadata=flag(
            "--first-replica",
            "the --seed of each K's first replica (a follow-up of a replicated design starts"
            " after the last one that design used, so its servers are read as new ones)",
        ),
    )
    warmup_num_prompts: int = field(
        default=0,
        metadata=flag(
            "--warmup-num-prompts",
            "prompts of an unmeasured warm-up run before every bench combo (so before each"
            " seeded run)",
        ),
    )
    max_num_seqs: int | None = field(
        default=None,
        metadata=flag(
            "--max-num-seqs",
            "vLLM's max_num_seqs of every server, as a serve-params key so every record holds"
            " it; at least the deployment maximum (default: the deployment maximum, in the"
            " serve command only)",
        ),
    )
    max_cudagraph_capture_size: int | None = field(
        default=None,
        metadata=flag(
            "--max-cudagraph-capture-size",
            "vLLM's max_cudagraph_capture_size (the CUDA-graph capture ceiling C) of every"
            " server, as a serve-params key so every record holds it (default: vLLM resolves"
            " it; the run script saves what each server resolved)",
        ),
    )
    host: str = field(default="127.0.0.1", metadata=flag("--host", "server host"))
    port: int = field(default=8000, metadata=flag("--port", "server port"))
    serve_args: str = field(
        default="",
        metadata=flag(
            "--serve-args",
            "further `vllm serve` arguments shared by every server, as one string",
        ),
    )
    bench_args: str = field(
        default="",
        metadata=flag("--bench-args", "further `vllm bench serve` arguments, as one string"),
    )

    @property
    def deploy_max(self) -> int:
        """The deployment maximum batch size: the schedule's upper end, and ``--max-num-seqs``
        unless ``max_num_seqs`` is given (:attr:`server_max_num_seqs`)."""
        return self.max_batch_size if self.max_batch_size is not None else max(self.anchors)

    @property
    def server_max_num_seqs(self) -> int:
        """``--max-num-seqs`` of every server: ``max_num_seqs`` when given, else the deployment
        maximum."""
        return self.max_num_seqs if self.max_num_seqs is not None else self.deploy_max

    @property
    def engine_params(self) -> dict[str, int]:
        """The engine settings every serve combo carries, so that every record holds them
        (records hold only serve-params keys): ``max_num_seqs`` and
        ``max_cudagraph_capture_size`` where given (the sweep passes them as
        ``--max-num-seqs`` and ``--max-cudagraph-capture-size``); empty when neither is."""
        return {name: value for name in ENGINE_PARAMS if (value := getattr(self, name)) is not None}

    @property
    def replica_values(self) -> tuple[int, ...]:
        """The ``--seed`` of each K's servers, ``first_replica`` .. ``first_replica +
        server_replicas - 1``; none for a design without replicas (one server per K, its serve
        combo named without a marker, as before replicas), that is one replica from 0."""
        if self.server_replicas == 1 and self.first_replica == 0:
            return ()
        return tuple(range(self.first_replica, self.first_replica + self.server_replicas))

    @property
    def output_tokens(self) -> int:
        """Output tokens per request: ``--output-len``, else the random dataset's default."""
        return self.output_len if self.output_len is not None else RANDOM_OUTPUT_LEN_DEFAULT

    @property
    def max_model_len_needed(self) -> int:
        """The context a server must hold for the longest prompt and its whole output."""
        return max(self.context_lengths, default=0) + self.output_tokens

    @property
    def target_model(self) -> str:
        """The model to serve; only a complete design (:meth:`incomplete`) is planned."""
        if self.model is None:
            raise ValueError("an incomplete design cannot be planned: no model")
        return self.model

    @property
    def startup_k(self) -> int:
        """``num_speculative_tokens`` of every schedule-enabled server: the largest K."""
        return self.global_k if self.global_k is not None else max(self.ks)

    def with_default_anchors(self) -> SweepDesign:
        """The design with its anchors filled in when none were given: powers of two up to
        ``max_batch_size`` (:func:`default_anchors`)."""
        if self.anchors or self.max_batch_size is None:
            return self
        return dataclasses.replace(self, anchors=default_anchors(self.max_batch_size))

    def incomplete(self) -> list[Problem]:
        """What every plan needs and the design lacks: the model, the method, the anchors."""
        missing = [name for name in ("model", "method") if not getattr(self, name)]
        if not self.anchors and self.max_batch_size is None:
            missing.append("anchors")
        return [
            Problem(
                Severity.ERROR,
                "incomplete-design",
                "every plan needs it",
                field=_flag(name),
                expected="a value (or an earlier plan's sweep_plan.json)"
                if name != "anchors"
                else f"anchors, or {_flag('max_batch_size')} to derive them (or an earlier"
                " plan's sweep_plan.json)",
            )
            for name in missing
        ]

    def invalid(self) -> list[Problem]:
        """Why this design cannot be planned (empty when fine), each naming its flag."""
        problems = self.incomplete()

        def bad(name: str, value: Any, expected: str) -> None:
            problems.append(_design_problem(name, expected, value))

        if not self.ks or any(k < 0 for k in self.ks):
            bad("ks", list(self.ks), "whole numbers >= 0")
        elif 0 not in self.ks:
            bad("ks", list(self.ks), "K=0 among them (the baseline)")
        elif max(self.ks) < 1:
            bad("ks", list(self.ks), "at least one K >= 1")
        if len(set(self.ks)) != len(self.ks):
            bad("ks", list(self.ks), "no repeated K")
        if any(a < 1 for a in self.anchors):
            bad("anchors", list(self.anchors), "batch sizes >= 1")
        elif self.anchors and min(self.anchors) != 1:
            bad(
                "anchors",
                list(self.anchors),
                "the first anchor to be 1 (the schedule must start at batch size 1)",
            )
        if len(set(self.anchors)) != len(self.anchors):
            bad("anchors", list(self.anchors), "no repeated anchor")
        if (
            self.anchors
            and self.max_batch_size is not None
            and self.max_batch_size != max(self.anchors)
        ):
            bad(
                "max_batch_size",
                self.max_batch_size,
                f"the largest anchor, {max(self.anchors)} (the tuner will not extrapolate past it)",
            )
        if self.ks and self.global_k is not None and self.global_k < max(self.ks):
            bad(
                "global_k",
                self.global_k,
                f">= the largest K, {max(self.ks)} (vLLM clamps K to it)",
            )
        for name in ("input_len", "output_len", "num_prompts"):
            value = getattr(self, name)
            if value is not None and value < 1:
                bad(name, value, ">= 1")
        if self.num_runs < 1:
            bad("num_runs", self.num_runs, ">= 1")
        if self.max_num_seqs is not None and (
            self.max_num_seqs < 1 or (self.anchors and self.max_num_seqs < self.deploy_max)
        ):
            bad(
                "max_num_seqs",
                self.max_num_seqs,
                f">= the deployment maximum, {self.deploy_max} (a server runs at most"
                " max_num_seqs requests at once)"
                if self.anchors
                else ">= 1",
            )
        if self.max_cudagraph_capture_size is not None and self.max_cudagraph_capture_size < 1:
            bad(
                "max_cudagraph_capture_size",
                self.max_cudagraph_capture_size,
                ">= 1 (to run without CUDA graphs: --serve-args --enforce-eager)",
            )
        for name, value in self.engine_params.items():
            if _argument_value(self.serve_args, "--" + name.replace("_", "-")) is not None:
                bad(
                    "serve_args",
                    repr(self.serve_args),
                    f"no --{name.replace('_', '-')} in it: {_flag(name)} {value} sets it for"
                    " every server",
                )
        if _argument_value(self.bench_args, "--seed") is not None:
            bad(
                "bench_args",
                repr(self.bench_args),
                "no --seed in it: the plan gives each repeat its own seed (a bench-params key,"
                " which would replace it)",
            )
        replicas_readable = True
        if _whole_or_none(self.server_replicas) is None or self.server_replicas < 1:
            bad("server_replicas", self.server_replicas, "a whole number >= 1")
            replicas_readable = False
        if _whole_or_none(self.first_replica) is None or self.first_replica < 0:
            bad("first_replica", self.first_replica, "a whole number >= 0")
            replicas_readable = False
        if replicas_readable and self.replica_values:
            problems.extend(self._replica_problems())
        if self.warmup_num_prompts < 0:
            bad("warmup_num_prompts", self.warmup_num_prompts, ">= 0")
        if self.dataset != "random" and not self.dataset_path:
            bad("dataset", self.dataset, f"{_flag('dataset_path')} with it")
        refused = [length for length in self.context_lengths if prompt_length_reason(length)]
        if refused:
            reason = prompt_length_reason(refused[0])
            bad(
                "context_lengths",
                list(self.context_lengths),
                f"prompt lengths from {PROMPT_TOKENS_RANGE[0]} to {PROMPT_TOKENS_RANGE[1]}"
                f" ({refused[0]} is {reason})",
            )
        if len(set(self.context_lengths)) != len(self.context_lengths):
            bad("context_lengths", list(self.context_lengths), "no repeated length")
        if self.context_lengths and self.dataset != "random":
            bad(
                "context_lengths",
                list(self.context_lengths),
                "the random dataset (--dataset random): it sets each prompt's length",
            )
        if self.context_lengths and self.input_len is not None:
            bad(
                "input_len",
                self.input_len,
                f"none with {_flag('context_lengths')}, which sets the prompt lengths",
            )
        given = _max_model_len(self.serve_args)
        if self.context_lengths and given is not None and given < self.max_model_len_needed:
            bad(
                "serve_args",
                f"--max-model-len {given}",
                f">= {self.max_model_len_needed}: the longest prompt"
                f" ({max(self.context_lengths)}) and its output ({self.output_tokens})",
            )
        if self.input_len is not None and DATASET_LENGTH_FLAGS.get(self.dataset, ("",))[0] is None:
            bad(
                "input_len",
                self.input_len,
                f"none: the {self.dataset} dataset has its own prompts",
            )
        for slo in self.goodput:
            metric, _, value = slo.partition(":")
            if metric not in GOODPUT_METRICS or not _positive_number(value):
                bad(
                    "goodput",
                    slo,
                    f"METRIC:MILLISECONDS with METRIC one of {', '.join(GOODPUT_METRICS)}",
                )
        for name in ("serve_args", "bench_args"):
            text = getattr(self, name)
            try:
                shlex.split(text)
            except ValueError as error:
                bad(name, repr(text), f"arguments a shell can split ({error})")
        reserved = {"num_speculative_tokens", "num_speculative_tokens_per_batch_size", "method"}
        clash = sorted(reserved & set(self.speculative_options))
        if clash:
            bad(
                "speculative_options",
                ", ".join(clash),
                f"none of these: the plan sets them itself (use {_flag('ks')},"
                f" {_flag('global_k')}, {_flag('method')})",
            )
        return problems

    def _replica_problems(self) -> list[Problem]:
        """Why the serve arguments forbid replicas: a ``--seed`` of their own (the plan gives
        each replica its own, a serve-params key, which would replace it), and
        ``--load-format dummy`` (the seed draws the dummy weights: servers with different
        seeds are different models, not replicas)."""
        problems = []
        if _argument_value(self.serve_args, "--" + DEFAULT_REPLICA_VAR) is not None:
            problems.append(
                _design_problem(
                    "serve_args",
                    f"no --{DEFAULT_REPLICA_VAR} in it: {_flag('server_replicas')} gives each"
                    " server its own (the replica marker)",
                    repr(self.serve_args),
                )
            )
        if _argument_value(self.serve_args, "--load-format") == "dummy":
            problems.append(
                _design_problem(
                    "server_replicas",
                    "1 with --load-format dummy: the seed draws the dummy weights, so servers"
                    " with different seeds serve different models, not replicas",
                    self.server_replicas,
                )
            )
        return problems

    def to_json(self) -> dict[str, Any]:
        """The design as ``sweep_plan.json`` stores it, field by field (``--design`` reads it
        back)."""
        stored: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(self)))
        # Written only when set, so a plan without them writes the file it always wrote.
        for name in ENGINE_PARAMS:
            if stored[name] is None:
                del stored[name]
        for name, unset in (("server_replicas", 1), ("first_replica", 0)):
            if stored[name] == unset:
                del stored[name]
        return stored


def _flag(name: str) -> str:
    return flag_name(SweepDesign, name)


def _design_problem(name: str, expected: str, value: Any = None) -> Problem:
    return Problem(
        Severity.ERROR,
        "invalid-design",
        "the design cannot be planned",
        field=_flag(name),
        value=None if value is None else str(value),
        expected=expected,
    )


def _mismatch(message: str) -> Problem:
    return Problem(Severity.ERROR, "follow-up-mismatch", message)


def design_from(
    stored: Mapping[str, Any] | None, given: Mapping[str, Any], source: str | None = None
) -> tuple[SweepDesign | None, list[Problem]]:
    """The design of a plan: the defaults, overridden by ``stored`` (the ``design`` object of an
    earlier plan's ``sweep_plan.json``, read from ``source``), overridden by the flags
    ``given``; anchors filled in from ``max_batch_size`` when none are given."""
    names = {f.name for f in dataclasses.fields(SweepDesign)}
    values: dict[str, Any] = {}
    if stored is not None:
        unknown = sorted(set(stored) - names)
        if unknown:
            problem = Problem(
                Severity.ERROR,
                "invalid-design",
                "unknown design keys",
                files=(source or "",),
                value=str(unknown),
                expected="the keys of sweep_plan.json's 'design'",
            )
            return None, [problem]
        for name, value in stored.items():
            values[name] = tuple(value) if isinstance(value, list) else value
    values.update(given)
    return SweepDesign(**values).with_default_anchors(), []


def _positive_number(text: str) -> bool:
    try:
        value = float(text)
    except ValueError:
        return False
    return math.isfinite(value) and value > 0


def default_anchors(max_batch_size: int) -> tuple[int, ...]:
    """Powers of two from 1 up to the deployment maximum, which is always included."""
    anchors = []
    anchor = 1
    while anchor < max_batch_size:
        anchors.append(anchor)
        anchor *= 2
    anchors.append(max_batch_size)
    return tuple(anchors)


# --------------------------------------------------------------------------- combos


def speculative_config(design: SweepDesign, **fields: Any) -> dict[str, Any]:
    """The design's ``speculative_config`` (method, draft model, options) plus ``fields``."""
    config: dict[str, Any] = {"method": design.method}
    if design.draft_model:
        config["model"] = design.draft_model
    config.update(design.speculative_options)
    config.update(fields)
    return config


def k_combo_name(k: int) -> str:
    return f"k{k}"


def anchor_combo_name(anchor: int) -> str:
    return f"c{anchor}"


#: The seed of the serve combos' order in a plan with replicas (:func:`replicated`): fixed, so
#: the same design always writes the same files.
SERVE_ORDER_SEED = 23


def replicated(design: SweepDesign, combos: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """The serve combos of a design with replicas: each combo once per replica value ``r``
    (:attr:`SweepDesign.replica_values`), named ``<combo>-seed=<r>``
    (:func:`lib.servers.replica_combo_name`), its params with the serve param ``seed: r`` added
    (``vllm serve --seed r``, the sampler's seed, which a temperature-0 benchmark does not
    see) and nothing else changed. The sweep starts the servers in file order; they come in
    blocks, one per replica value, each holding every combo once in an order drawn by
    ``random.Random(SERVE_ORDER_SEED)``, so drift over the sweep falls on every K alike (noise
    between a K's servers, never a bias between K). ``combos`` as they are without replicas."""
    values = design.replica_values
    if not values:
        return dict(combos)
    order = random.Random(SERVE_ORDER_SEED)
    serve: dict[str, Any] = {}
    for value in values:
        names = list(combos)
        order.shuffle(names)
        for name in names:
            marked = replica_combo_name(name, DEFAULT_REPLICA_VAR, value)
            serve[marked] = {**combos[name], DEFAULT_REPLICA_VAR: value}
    return serve


def tuning_serve_params(design: SweepDesign, ks: Sequence[int]) -> dict[str, Any]:
    """One serve combo per K (per replica, :func:`replicated`): the global maximum fixed, K set
    by a one-range schedule."""
    combos = {
        k_combo_name(k): {
            **design.engine_params,
            "speculative_config": speculative_config(
                design,
                num_speculative_tokens=design.startup_k,
                num_speculative_tokens_per_batch_size=[[1, design.deploy_max, k]],
            ),
        }
        for k in sorted(ks)
    }
    return replicated(design, combos)


def prompts_for(design: SweepDesign, anchor: int) -> int:
    if design.num_prompts is not None:
        return design.num_prompts
    return max(MIN_PROMPTS, PROMPTS_PER_SLOT * anchor)


def workloads(design: SweepDesign, anchors: Sequence[int]) -> dict[str, Any]:
    """What is measured at each anchor, before the repeats: one combo per anchor,
    ``max_concurrency`` (the anchor the tuner reads) and the number of prompts; with context
    lengths, one per (anchor, length), the length as ``random_input_len`` (a swept key, so
    every record holds it)."""
    if not design.context_lengths:
        return {
            anchor_combo_name(anchor): {
                "max_concurrency": anchor,
                "num_prompts": prompts_for(design, anchor),
            }
            for anchor in sorted(anchors)
        }
    return {
        f"{anchor_combo_name(anchor)}-p{length}": {
            "max_concurrency": anchor,
            "num_prompts": prompts_for(design, anchor),
            RANDOM_PROMPT_LENGTH: length,
        }
        for anchor in sorted(anchors)
        for length in sorted(design.context_lengths)
    }


def seeded_combo_name(workload: str, seed: int) -> str:
    return f"{workload}-seed{seed}"


def bench_params(
    design: SweepDesign,
    anchors: Sequence[int],
    runs: int,
    first_seeds: Mapping[int, int] | None = None,
) -> dict[str, Any]:
    """The bench combos: each workload (:func:`workloads`) once per repeat, the repeat's
    ``seed`` added, named ``<workload>-seed<seed>``, in workload order and then seed order (a
    cell's runs follow each other, as ``--num-runs`` ran them).

    Repeat r at an anchor has seed ``first_seeds[anchor] + r`` (the first seed 0 where not
    given), r = 0 .. ``runs`` - 1: the repeats of a cell sample different prompts, and every
    K and prompt length at the anchor sees the same prompts for the same repeat (the K are
    compared on paired prompt sets). The sweep passes the key as ``--seed`` (it would replace
    a ``--seed`` of the bench command, which has none)."""
    combos: dict[str, Any] = {}
    for name, params in workloads(design, anchors).items():
        first = (first_seeds or {}).get(params["max_concurrency"], 0)
        for seed in range(first, first + runs):
            combos[seeded_combo_name(name, seed)] = {**params, REPEAT_SEED: seed}
    return combos


def _max_model_len(serve_args: str) -> int | None:
    """The ``--max-model-len`` in extra serve arguments, if any (None when absent or unreadable).

    >>> _max_model_len("--seed 0 --max-model-len 4096"), _max_model_len("--max-model-len=8k")
    (4096, None)
    """
    value = _argument_value(serve_args, "--max-model-len")
    return int(value) if value is not None and value.isdigit() else None


def _argument_value(arguments: str, name: str) -> str | None:
    """The value of flag ``name`` (``--flag VALUE`` or ``--flag=VALUE``, either spelling of
    ``-``/``_`` as vLLM accepts) in extra arguments; None when absent or unsplittable.

    >>> _argument_value("--seed 0 --max_num_seqs=8", "--max-num-seqs")
    '8'
    """
    try:
        words = shlex.split(arguments)
    except ValueError:
        return None
    spellings = {name, "--" + name[2:].replace("-", "_")}
    for index, word in enumerate(words):
        if word in spellings and index + 1 < len(words):
            return words[index + 1]
        flag, separator, value = word.partition("=")
        if separator and flag in spellings:
            return value
    return None


# --------------------------------------------------------------------------- commands


def serve_command(design: SweepDesign) -> str:
    """``vllm serve`` with what every combo shares; the combos add ``--speculative-config``."""
    parts = [
        "vllm",
        "serve",
        design.target_model,
        "--host",
        design.host,
        "--port",
        str(design.port),
        "--max-num-seqs",
        str(design.server_max_num_seqs),
    ]
    if design.context_lengths and _max_model_len(design.serve_args) is None:
        parts += ["--max-model-len", str(design.max_model_len_needed)]
    return _join(parts, design.serve_args)


def bench_command(design: SweepDesign) -> str:
    """``vllm bench serve`` with the workload; the combos add concurrency, prompt count and the
    repeat's ``--seed``."""
    parts = [
        "vllm",
        "bench",
        "serve",
        "--model",
        design.target_model,
        "--host",
        design.host,
        "--port",
        str(design.port),
        "--dataset-name",
        design.dataset,
    ]
    if design.dataset_path:
        parts += ["--dataset-path", design.dataset_path]
    input_flag, output_flag = DATASET_LENGTH_FLAGS.get(
        design.dataset, ("--input-len", "--output-len")
    )
    if design.input_len is not None and input_flag is not None:
        parts += [input_flag, str(design.input_len)]
    if design.output_len is not None and output_flag is not None:
        parts += [output_flag, str(design.output_len)]
    # Fixed-length and greedy: every K decodes the same tokens for the same prompts (the seed,
    # and so the prompts, is each bench combo's).
    parts += ["--ignore-eos", "--temperature", "0"]
    if design.goodput:
        parts += ["--goodput", *design.goodput]
    return _join(parts, design.bench_args)


def _join(parts: list[str], extra: str) -> str:
    text = shlex.join(parts)
    return f"{text} {extra.strip()}" if extra.strip() else text


#: The first argument of ``run.sh`` that runs its after-bench mode (:data:`_AFTER_BENCH_MODE`).
AFTER_BENCH = "--after-bench"

#: ``run.sh --after-bench URL EXPERIMENT_DIR``: what the sweep runs after each benchmark run
#: (``--after-bench-cmd``; the sweep runs it from its own folder, with its environment, and
#: tells it nothing about the combo). ``--after-bench-cmd`` replaces the sweep's cache reset,
#: so first the same three POSTs (``ServerProcess.VLLM_RESET_CACHE_ENDPOINTS`` of vLLM 0.32.0's
#: ``benchmarks/sweep/server.py``); one that fails fails the run, as there. Then
#: ``GET /server_info?config_format=json`` (the sweep starts every server with
#: ``VLLM_SERVER_DEV_MODE=1``) is saved as ``server_info.json`` into the combo folder of the
#: newest ``run=N.json`` / ``warmup.json`` below EXPERIMENT_DIR: the benchmark run just written
#: (the sweep rewrites that file only after this command). A save that fails only warns:
#: the run's measurement stands (as does one with no run to put it beside). Standard-library
#: Python, so no curl is needed.
_AFTER_BENCH_MODE = f"""if [ "${{1:-}}" = {AFTER_BENCH} ]; then
    usage="usage: $0 {AFTER_BENCH} URL EXPERIMENT_DIR"
    python3 - "${{2:?$usage}}" "${{3:?$usage}}" <<'PY'
import json, pathlib, sys, urllib.request

url, experiment = sys.argv[1], pathlib.Path(sys.argv[2])
say = "run.sh {AFTER_BENCH}:"
for endpoint in {RESET_ENDPOINTS!r}:
    try:
        request = urllib.request.Request(url + endpoint, method="POST")
        urllib.request.urlopen(request, timeout=120).close()
    except OSError as error:
        sys.exit(f"{{say}} POST {{url}}{{endpoint}} failed: {{error}}")
runs = [
    path
    for path in experiment.glob("*/*.json")
    if path.name.startswith("run=") or path.name == "warmup.json"
]
if not runs:
    print(f"{{say}} the server config is not saved: no run below {{experiment}}", file=sys.stderr)
    sys.exit(0)
folder = max(runs, key=lambda path: path.stat().st_mtime_ns).parent
try:
    with urllib.request.urlopen(url + "/server_info?config_format=json", timeout=120) as answer:
        info = json.load(answer)
except (OSError, ValueError) as error:
    print(f"{{say}} the server config is not saved: GET /server_info: {{error}}", file=sys.stderr)
    sys.exit(0)
part = folder / "{SERVER_INFO_FILE_GLOB}.part"
part.write_text(json.dumps(info, indent=2) + "\\n")
part.replace(folder / "{SERVER_INFO_FILE_GLOB}")
PY
    exit
fi""".splitlines()

#: The part of ``run.sh`` that decides how each sweep runs (``sweep``): with vLLM as it is;
#: without it, a dry run (a check of the plan before it reaches the GPU machine) prints each
#: command quoted as ``shlex.join`` quotes it, so it reads like ``command.txt``, and a real run
#: stops before the first sweep with a message instead of bash's "command not found".
_RUN_SCRIPT_PRELUDE = r"""dry_run=false
for arg in "$@"; do
    case $arg in --dry-run) dry_run=true ;; esac
done
if command -v vllm >/dev/null 2>&1; then
    sweep() { "$@"; }
elif $dry_run; then
    echo "run.sh: vLLM is not installed here (no \`vllm\` on PATH): each sweep's command" \
        "follows; with vLLM, \`vllm bench sweep serve --dry-run\` prints every server and" \
        "benchmark command." >&2
    sweep() {
        local word quoted=()
        local tick="'" escaped="'\"'\"'"
        for word in "$@"; do
            if [[ -n $word && $word != *[!A-Za-z0-9_@%+=:,./-]* ]]; then
                quoted+=("$word")
            else
                quoted+=("'${word//"$tick"/"$escaped"}'")
            fi
        done
        printf '%s\n' "${quoted[*]}"
    }
else
    echo "run.sh: vLLM is needed to run the sweep, and there is no \`vllm\` on PATH:" \
        "install vLLM (0.25 or newer) or activate the environment that has it, then run" \
        "this again. \`bash $0 --dry-run\` prints the commands without vLLM." >&2
    exit 1
fi""".splitlines()


# --------------------------------------------------------------------------- plans


@dataclass(frozen=True)
class SweepStep:
    """One ``vllm bench sweep serve`` invocation: its params, runs and output folder. The bench
    combos hold a combo per (workload, seed) (:func:`bench_params`), each run once."""

    name: str
    serve_params: dict[str, Any]
    bench_params: dict[str, Any]
    #: Runs of each (anchor, K) cell: its seeded bench combos.
    runs_per_cell: int
    results_dir: str
    experiment_name: str
    #: What each (anchor, K) cell is measured for, for the plan's summary.
    purpose: str

    @property
    def runs(self) -> int:
        """Benchmark runs: every serve combo with every bench combo, ``--num-runs`` times."""
        return len(self.serve_params) * len(self.bench_params) * SWEEP_NUM_RUNS

    def seeds(self) -> dict[int, tuple[int, ...]]:
        """The repeats' seeds per anchor, in order (every K and length there has the same)."""
        seeds: dict[int, dict[int, None]] = {}
        for combo in self.bench_params.values():
            seeds.setdefault(combo["max_concurrency"], {})[combo[REPEAT_SEED]] = None
        return {anchor: tuple(found) for anchor, found in seeds.items()}


@dataclass(frozen=True)
class SweepPlan:
    """A plan: its kind, design, steps and notes. :meth:`files` gives every file to write."""

    kind: str
    design: SweepDesign
    steps: tuple[SweepStep, ...]
    notes: tuple[str, ...] = ()

    def step_folder(self, step: SweepStep) -> str:
        """Where a step's params files go, relative to the plan folder."""
        return "" if len(self.steps) == 1 else step.name

    def after_bench_words(self, step: SweepStep, plan_dir: str) -> list[str]:
        """The command the sweep runs after each benchmark run (``--after-bench-cmd``, split):
        ``run.sh --after-bench`` resets the server's caches and saves its config into the combo
        folder of the run (:data:`AFTER_BENCH`)."""
        url = f"http://{self.design.host}:{self.design.port}"
        script = (Path(plan_dir) / RUN_SCRIPT).as_posix()
        return ["bash", script, AFTER_BENCH, url, f"{step.results_dir}/{step.experiment_name}"]

    def sweep_command(self, step: SweepStep, plan_dir: str, after_bench: str | None = None) -> str:
        """The exact ``vllm bench sweep serve`` command for ``step``, its params files under
        ``plan_dir`` (as written: relative paths stay relative to where the plan was made).
        ``after_bench`` stands in for the ``--after-bench-cmd`` value (default: the command
        of :meth:`after_bench_words`, quoted)."""
        folder = Path(plan_dir) / self.step_folder(step)
        parts = [
            "vllm",
            "bench",
            "sweep",
            "serve",
            "--serve-cmd",
            serve_command(self.design),
            "--bench-cmd",
            bench_command(self.design),
            "--serve-params",
            (folder / SERVE_PARAMS).as_posix(),
            "--bench-params",
            (folder / BENCH_PARAMS).as_posix(),
            "--num-runs",
            str(SWEEP_NUM_RUNS),
        ]
        if self.design.warmup_num_prompts:
            parts += ["--warmup-num-prompts", str(self.design.warmup_num_prompts)]
        parts += [
            "--after-bench-cmd",
            after_bench or shlex.join(self.after_bench_words(step, plan_dir)),
            "-o",
            step.results_dir,
            "-e",
            step.experiment_name,
        ]
        return shlex.join(parts)

    def commands(self, plan_dir: str) -> list[str]:
        return [self.sweep_command(step, plan_dir) for step in self.steps]

    def run_script(self) -> str:
        """A bash script running every step; extra arguments (``--dry-run``,
        ``--continue-on-error``, ``--resume``) go to each sweep. Params are found beside the
        script; results go below the folder it is run from. Without ``vllm`` on PATH a dry run
        prints each sweep's command (what ``vllm bench sweep serve`` would be asked) and a real
        run stops at once with a message saying vLLM is needed.

        The sweep runs the script itself after each benchmark run (``run.sh --after-bench URL
        EXPERIMENT_DIR``, :data:`_AFTER_BENCH_MODE`): ``--after-bench-cmd`` replaces the sweep's
        own cache reset, so the script POSTs the same three resets (failing the run as the
        sweep's reset would), then saves the server's resolved config into the combo folder
        of the run just written."""
        lines = [
            "#!/usr/bin/env bash",
            f"# Written by `tune-spec-k plan` ({self.kind} plan): {self.summary_line()}",
            "# Run it from the folder the results folder is relative to; extra arguments",
            "# (--dry-run, --continue-on-error, --resume) are passed to every sweep.",
            "set -euo pipefail",
            'plan_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)',
            *_AFTER_BENCH_MODE,
            *_RUN_SCRIPT_PRELUDE,
        ]
        for step in self.steps:
            # The params lie beside the script wherever it is run from; the after-bench
            # command names the script by its absolute path, quoted for vLLM's shlex.split.
            _, _, *rest = self.after_bench_words(step, "PLAN_DIR")
            command = self.sweep_command(step, "PLAN_DIR", "AFTER_BENCH_CMD")
            command = command.replace("PLAN_DIR/", '"${plan_dir}"/')
            command = command.replace("AFTER_BENCH_CMD", '"${after_bench}"')
            folder = self.step_folder(step)
            params = '"${plan_dir}"/' + (f"{shlex.quote(folder)}/" if folder else "")
            results = shlex.quote(f"{step.results_dir}/{step.experiment_name}")
            lines += [
                "",
                f"# {step.name}: {step.purpose}",
                "after_bench=$(printf '%q ' bash \"${plan_dir}\"/"
                + RUN_SCRIPT
                + f" {shlex.join(rest)})",
                "after_bench=${after_bench% }",
                f'sweep {command} "$@"',
                "# Keep the params with the results; a dry run has none, and an earlier run's",
                "# folder keeps the params it was run with.",
                f"if ! $dry_run && [ -d {results} ]; then"
                f" cp {params}{SERVE_PARAMS} {params}{BENCH_PARAMS} {results}/; fi",
            ]
        return "\n".join(lines) + "\n"

    def summary_line(self) -> str:
        runs = sum(step.runs for step in self.steps)
        servers = sum(len(step.serve_params) for step in self.steps)
        return f"{len(self.steps)} sweep(s), {servers} server start(s), {runs} benchmark runs"

    def files(self, plan_dir: str) -> dict[str, str]:
        """Relative path -> text of every file of the plan (params, run.sh, command.txt and the
        design, which ``--design`` reads back for a follow-up or validation plan)."""
        texts: dict[str, str] = {}
        for step in self.steps:
            folder = self.step_folder(step)
            prefix = f"{folder}/" if folder else ""
            texts[prefix + SERVE_PARAMS] = _json_text(step.serve_params)
            texts[prefix + BENCH_PARAMS] = _json_text(step.bench_params)
        texts[RUN_SCRIPT] = self.run_script()
        texts[COMMAND_FILE] = "\n\n".join(self.commands(plan_dir)) + "\n"
        texts[DESIGN_FILE] = _json_text(
            {
                "kind": self.kind,
                "design": self.design.to_json(),
                "steps": [
                    {
                        "name": step.name,
                        "folder": self.step_folder(step),
                        "num_runs": step.runs_per_cell,
                        "results": f"{step.results_dir}/{step.experiment_name}",
                        "purpose": step.purpose,
                    }
                    for step in self.steps
                ],
                "notes": list(self.notes),
            }
        )
        return texts


def seeds_text(seeds: Sequence[int]) -> str:
    """Seeds as the plan's notes and summary name them.

    >>> seeds_text(range(3)), seeds_text([4]), seeds_text([0, 2])
    ('seeds 0-2', 'seed 4', 'seeds 0, 2')
    """
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    if list(seeds) == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"seeds {seeds[0]}-{seeds[-1]}"
    return "seeds " + ", ".join(str(seed) for seed in seeds)


def _more_runs_notes(asked: int, steps: Sequence[SweepStep]) -> list[str]:
    """A follow-up's notes on its runs: how many more than asked for the steps run (a sweep
    runs each cell as often as its most demanding one), and how each cell's seeds go on."""
    planned = sum(step.runs for step in steps)
    notes = []
    if planned > asked:
        notes.append(
            f"{planned - asked} run(s) more than asked for: a sweep runs each cell as often as"
            " its most demanding cell (cheaper than another server start)"
        )
    notes.append(
        "each cell's new runs continue its seeds (a cell with n runs so far gets seeds n, n+1,"
        " ...), so its earlier runs' prompts are not sent again, unless a run was not counted"
        " (a failed one): then a seed of the cell may come again"
    )
    return notes


def _follow_up_replica_notes(design: SweepDesign, steps: Sequence[SweepStep]) -> list[str]:
    """A follow-up's replicas: what they cost and buy, and why their values are new ones."""
    notes = _replica_notes(design, steps, read_as=_TUNER_READS_REPLICAS)
    if design.first_replica > 0:
        notes.append(
            f"the replicas' --{DEFAULT_REPLICA_VAR} values start at {design.first_replica},"
            " after those of the design this follows up, so its servers are read as new"
            " ones; a later follow-up planned from this plan's sweep_plan.json continues"
            " after these"
        )
    return notes


def _warmup_notes(design: SweepDesign) -> list[str]:
    """What ``--warmup-num-prompts`` costs with seeded repeats (none without it)."""
    if not design.warmup_num_prompts:
        return []
    return [
        f"the sweep warms up before every bench combo ({design.warmup_num_prompts} prompts,"
        " not measured), so a cell gets a warm-up before each of its seeded runs"
    ]


def _replica_notes(
    design: SweepDesign, steps: Sequence[SweepStep], unit: str = "K", read_as: str = ""
) -> list[str]:
    """What a plan's server replicas cost and buy, and how they are ordered (none without
    replicas); ``unit`` is what each server runs (a K, or a validation arm), ``read_as`` how
    the reading command treats the replicas."""
    values = design.replica_values
    if not values:
        return []
    starts = sum(len(step.serve_params) for step in steps)
    return [
        f"{len(values)} server(s) per {unit}, serve combos <combo>-{DEFAULT_REPLICA_VAR}=<r>"
        f" started with vLLM serve's --{DEFAULT_REPLICA_VAR} r for serve {seeds_text(values)}"
        f" (the sampler's seed, which a temperature-0 benchmark does not see): {starts} server"
        f" starts, {len(values)}x the servers of one per {unit}, each a start of its own"
        " (about a minute on the CPU build, minutes for a large model on a GPU). They measure"
        " how much servers of one configuration differ, which runs on one server cannot"
        + (f": {read_as}" if read_as else ""),
        f"the serve combos run in {len(values)} block(s), each holding every {unit} once in an"
        f" order drawn by random.Random({SERVE_ORDER_SEED}): drift over the sweep shows up as"
        f" noise between the servers of a {unit}, not as a bias between them",
    ]


#: How the tuner reads a tuning sweep's replicas (lib.schedule.server_gate, lib.servers).
_TUNER_READS_REPLICAS = "tune-spec-k reads a K's replicas as one cell with several servers"


def first_replica_after(first_sweep: SweepDesign) -> int:
    """The first replica value of a follow-up of ``first_sweep``: one past the last value that
    sweep's servers used, since a follow-up is new server starts and a value used again would
    read a new server as one of the first sweep's; 0 after a sweep without replicas (its serve
    combos carry no marker, so every value is new). A stored design whose replica fields are
    not whole numbers (no plan writes one) is treated as one without replicas."""
    if _whole_or_none(first_sweep.server_replicas) is None:
        return 0
    if _whole_or_none(first_sweep.first_replica) is None:
        return 0
    values = first_sweep.replica_values
    return values[-1] + 1 if values else 0


def _json_text(data: Any) -> str:
    return json.dumps(data, indent=2) + "\n"


def tuning_plan(
    design: SweepDesign, results_dir: str, experiment_name: str
) -> tuple[SweepPlan | None, list[Problem]]:
    """The seed's K x anchor matrix in one sweep (None and the problems of a bad design)."""
    problems = design.invalid()
    if problems:
        return None, problems
    step = SweepStep(
        name="tuning",
        serve_params=tuning_serve_params(design, design.ks),
        bench_params=bench_params(design, design.anchors, design.num_runs),
        runs_per_cell=design.num_runs,
        results_dir=results_dir,
        experiment_name=experiment_name,
        purpose=f"every K in {sorted(design.ks)} at every anchor in {sorted(design.anchors)}"
        + (
            f" and every prompt length in {sorted(design.context_lengths)}"
            if design.context_lengths
            else ""
        ),
    )
    notes = [
        f"every server starts with num_speculative_tokens={design.startup_k} and runs K through"
        f" the one-range schedule [[1, {design.deploy_max}, K]] (the seed's design: one engine"
        " configuration for every candidate, K=0 included)",
        f"each ({'anchor, prompt length' if design.context_lengths else 'anchor'}, K) runs"
        f" {design.num_runs} time(s), with"
        f" {seeds_text(range(design.num_runs))}: a bench combo per seed, each run once (the"
        " repeats send different prompts; every K gets the same prompts for the same seed), and"
        + (
            f" each of a K's {design.server_replicas} servers serves all of them"
            if design.replica_values
            else " a server serves all of them (one start per K)"
        ),
        *_replica_notes(design, (step,), read_as=_TUNER_READS_REPLICAS),
        *_warmup_notes(design),
        f"tune with: tune-spec-k {results_dir}/{experiment_name}",
    ]
    if design.dataset == "random":
        notes.append(RANDOM_TOKENS_NOTE)
    if design.context_lengths:
        holds = _max_model_len(design.serve_args) or design.max_model_len_needed
        notes.append(
            f"the prompt length is a second axis ({RANDOM_PROMPT_LENGTH} per bench combo);"
            f" every server holds --max-model-len {holds}"
            f" (the longest prompt plus {design.output_tokens} output tokens); the tuner finds"
            " the axis itself and tunes K per (batch size, prompt length)"
        )
    return SweepPlan("tuning", design, (step,), tuple(notes)), []


# --------------------------------------------------------------------------- follow-up


@dataclass(frozen=True)
class FollowUpNeeds:
    """Runs still needed per (anchor, K), the runs each of those cells has so far (its first
    new seed, :func:`follow_up_plan`), where they came from, and notes. ``result_file`` is the
    tuning result read, if any: the follow-up's results belong beside it."""

    more_runs: dict[tuple[int, int], int]
    runs_so_far: dict[tuple[int, int], int]
    new_anchors: tuple[int, ...]
    global_k: int | None
    ks: tuple[int, ...]
    notes: tuple[str, ...]
    result_file: str | None = None
    #: A context follow-up: runs still needed per (anchor, prompt tokens, K) of the grid (its
    #: unresolved and undecided cells, and the prompt lengths to measure next at every anchor
    #: and K), and the runs each has so far.
    context_runs: dict[tuple[int, int, int], int] = dataclasses.field(default_factory=dict)
    context_runs_so_far: dict[tuple[int, int, int], int] = dataclasses.field(default_factory=dict)
    #: The new prompt lengths among them (the context measurement plan's).
    new_prompt_lengths: tuple[int, ...] = ()
    #: Whether the needs are a context grid's (the follow-up plans (anchor, prompt) cells).
    of_grid: bool = False
    #: New server starts per (anchor, K) where the measurement plan asks for more than the one
    #: a follow-up sweep starts (server offsets dominate: lib.measurement_plan).
    new_servers: dict[tuple[int, int], int] = dataclasses.field(default_factory=dict)


def _refused(path: str | Path, message: str, field: str | None = None) -> list[Problem]:
    return [Problem(Severity.ERROR, "invalid-plan-input", message, files=(str(path),), field=field)]


def _other_prompt_field(result: ResultFile, plan: str) -> list[Problem]:
    """The refusal of a grid whose prompt length was not ``random_input_len``: ``plan`` (a
    follow-up, a validation) sets prompt lengths as that key, which would not reproduce the
    grid's prompts."""
    return _refused(
        result.source,
        f"the grid's prompt length was read from {result.context_field!r}; {plan}"
        f" plans prompt lengths as {RANDOM_PROMPT_LENGTH} (plan --context-lengths), which"
        " would not reproduce these prompts: plan it with the sweep's own dataset",
        "context_axis.field",
    )


def follow_up_needs(files: Sequence[str | Path]) -> tuple[FollowUpNeeds | None, list[Problem]]:
    """What a follow-up sweep must measure, from a measurement plan (``tune-spec-k DIR
    --plan-json PATH``: reruns and new anchors) and/or a result JSON (``speculative_k_schedule
    .json``: its per-anchor ``confidence`` blocks give the reruns of unresolved anchors; its
    global K and candidate K are checked against the design). With both, the plan's numbers
    are used and the result only supplies the global K. The runs so far of a cell: the plan's
    ``runs`` for a rerun, else the result's ``num_runs`` where it measured the cell, else 0 (a
    new anchor). None and the problems of a file that is neither, or is damaged."""
    plan_data: dict[str, Any] | None = None
    result: ResultFile | None = None
    for path in files:
        data, problems = read_json(path)
        if problems:
            return None, problems
        if isinstance(data, dict) and "reruns" in data and "new_anchors" in data:
            problems = _plan_problems(data, path)
            if problems:
                return None, problems
            plan_data = data
        elif is_result(data):
            result, problems = result_file_of(data, str(path))
            if result is None:
                return None, problems
        else:
            return None, _refused(
                path,
                "neither a measurement plan (keys 'reruns', 'new_anchors': write one with"
                " `tune-spec-k DIR --plan-json PATH`) nor a tuning result (key"
                " 'batch_decisions')",
            )
    if result is not None and result.has_grid and not result.context_cells:
        # Planned without it, the follow-up would re-measure the batch-only answer instead.
        return None, list(result.grid_problems)
    if result is not None and result.context_cells:
        return _context_follow_up_needs(result, plan_data)
    if plan_data is not None and "context_field" in plan_data:
        return None, _refused(
            files[0],
            "a context measurement plan needs its result JSON too (its grid's runs so far"
            " and K): pass both to --follow-up",
        )
    more: dict[tuple[int, int], int] = {}
    counted: dict[tuple[int, int], int] = {}
    notes: list[str] = []
    new_anchors: list[int] = []
    ks: set[int] = set()
    global_k = None
    if result is not None:
        global_k = result.configured_global_k
        ks.update(result.candidate_ks)
        counted = {
            (anchor.batch_size, candidate.k): candidate.num_runs
            for anchor in result.anchors
            for candidate in anchor.candidates
        }
    starts: dict[tuple[int, int], int] = {}
    if plan_data is not None:
        for row in plan_data["reruns"]:
            if row["more_runs"] > 0:
                more[(row["batch_size"], row["k"])] = row["more_runs"]
                counted[(row["batch_size"], row["k"])] = row["runs"]
                servers = _whole_or_none(row.get("new_servers"))
                if servers is not None and servers > 1:
                    starts[(row["batch_size"], row["k"])] = servers
            if row.get("noise_limited"):
                notes.append(
                    f"batch size {row['batch_size']}, K={row['k']} is noise-limited: past"
                    f" {MAX_RUNS_NEEDED} runs its rivals are a tie; more runs will not settle it"
                )
        for row in plan_data["new_anchors"]:
            new_anchors.append(row["batch_size"])
            for k in row["ks"]:
                key = (row["batch_size"], k)
                more[key] = max(more.get(key, 0), row["runs_per_k"])
    elif result is not None:
        if not result.has_confidence:
            return None, _refused(
                result.source,
                "the result has no per-anchor 'confidence' blocks (written by tune-spec-k since"
                " the confidence analysis); pass its measurement plan (`tune-spec-k DIR"
                " --plan-json PATH`) instead",
            )
        more, starts = _reruns_from_confidence(result)
        notes.append(
            "new anchors are only in the measurement plan: pass the file of `tune-spec-k DIR"
            " --plan-json PATH` too to measure them"
        )
    if result is not None:
        # The capture boundaries the schedule crosses (lib.deploy.tuning.Deployment).
        for batch, boundary_ks in result.anchors_to_measure:
            new_anchors.append(batch)
            for k in boundary_ks:
                more[(batch, k)] = max(more.get((batch, k), 0), MIN_RUNS_NEEDED)
    needs = FollowUpNeeds(
        more,
        {cell: counted.get(cell, 0) for cell in more},
        tuple(sorted(set(new_anchors))),
        global_k,
        tuple(sorted(ks)),
        tuple(notes),
        result.source if result is not None else None,
        new_servers=starts,
    )
    return needs, []


def _context_follow_up_needs(
    result: ResultFile, plan_data: dict[str, Any] | None
) -> tuple[FollowUpNeeds | None, list[Problem]]:
    """A follow-up of a context result: per (anchor, prompt length, K) the runs still needed.

    - an **unresolved** cell: its contenders, by the batch-only rule (:func:`_target_runs`);
    - an **undecided** cell (every candidate rejected): every candidate, by the same rule
      with the minimum of :data:`MIN_RUNS_NEEDED` runs (no noise estimate says more);
    - each prompt length the result's ``context_measurement_plan`` proposes: every anchor of
      the grid and every K measured there, :data:`MIN_RUNS_NEEDED` runs (a new point, as a
      capture boundary is a new anchor);
    - with a context measurement plan (``--plan-json`` of a context sweep): its reruns and
      new anchors, each at its ``prompt_tokens``, instead of the first two.

    The prompt lengths are planned as ``random_input_len``: a grid whose axis was read from
    another field is refused (the follow-up could not reproduce its prompts). The result's
    batch-only keys (the seed's answer, pooled or the shortest context's) are not re-measured."""
    if result.context_field != RANDOM_PROMPT_LENGTH:
        return None, _other_prompt_field(result, "a follow-up")
    more: dict[tuple[int, int, int], int] = {}
    counted: dict[tuple[int, int, int], int] = {}
    for prompt, anchor in result.context_cells:
        for candidate in anchor.candidates:
            counted[(anchor.batch_size, prompt, candidate.k)] = candidate.num_runs
    ks = sorted({key[2] for key in counted})
    anchors = sorted({key[0] for key in counted})
    notes = [
        "the result's batch-only keys (the seed's answer) are not re-measured: the grid's"
        " cells are, each at its prompt length"
    ]
    if plan_data is not None:
        problems = _context_plan_problems(plan_data, result.source)
        if problems:
            return None, problems
        for row in plan_data["reruns"]:
            if row["more_runs"] > 0:
                more[(row["batch_size"], row["prompt_tokens"], row["k"])] = row["more_runs"]
        for row in plan_data["new_anchors"]:
            for k in row["ks"]:
                key = (row["batch_size"], row["prompt_tokens"], k)
                more[key] = max(more.get(key, 0), row["runs_per_k"])
    else:
        for prompt, anchor in result.context_cells:
            confidence = anchor.confidence
            status = confidence.status if confidence is not None else ""
            if status == "unresolved" and confidence is not None:
                wanted = [(k, confidence.runs_needed.get(k)) for k in confidence.contenders]
            elif status == "undecided":
                wanted = [(c.k, None) for c in anchor.candidates]
            else:
                continue
            for k, needed in wanted:
                runs = counted.get((anchor.batch_size, prompt, k), 0)
                target = _target_runs(runs, needed)
                if target > runs:
                    more[(anchor.batch_size, prompt, k)] = target - runs
        notes.append(
            "new anchors at each prompt length are only in the context measurement plan: pass"
            " the file of `tune-spec-k DIR --plan-json PATH` too to measure them"
        )
    measured = {prompt for prompt, _ in result.context_cells}
    new_lengths = sorted(set(result.context_points_to_measure) - measured)
    for prompt in new_lengths:
        for anchor_size in anchors:
            for k in ks:
                more[(anchor_size, prompt, k)] = MIN_RUNS_NEEDED
    needs = FollowUpNeeds(
        {},
        {},
        (),
        result.configured_global_k,
        tuple(ks),
        tuple(notes),
        result.source,
        context_runs=more,
        context_runs_so_far={cell: counted.get(cell, 0) for cell in more},
        new_prompt_lengths=tuple(new_lengths),
        of_grid=True,
    )
    return needs, []


def _context_plan_problems(data: dict[str, Any], source: str) -> list[Problem]:
    """What is wrong with a context measurement plan's rows: the batch-only plan's checks
    (:func:`_plan_problems`) and a whole ``prompt_tokens`` >= 1 in every row."""
    problems = _plan_problems(data, source)
    if problems:
        return problems
    for key in ("reruns", "new_anchors"):
        for index, row in enumerate(data[key]):
            prompt = _whole_or_none(row.get("prompt_tokens"))
            if prompt is None or prompt < 1:
                return [
                    Problem(
                        Severity.ERROR,
                        "invalid-plan-input",
                        "not usable",
                        files=(source,),
                        field=f"{key}[{index}].prompt_tokens",
                        value=json.dumps(row.get("prompt_tokens")),
                        expected="a whole prompt length >= 1",
                    )
                ]
    return []


def _target_runs(runs: int, needed: int | None) -> int:
    """The runs a contender should have, by :mod:`lib.measurement_plan`'s rule: what its noise
    calls for (:data:`MIN_RUNS_NEEDED` where unknown), at least one more than it has, at most
    :data:`MAX_RUNS_NEEDED` in all (never fewer than it has).

    >>> _target_runs(3, 5), _target_runs(3, None), _target_runs(3, 2), _target_runs(10, 40)
    (5, 4, 4, 10)
    """
    wanted = needed or MIN_RUNS_NEEDED
    return min(max(wanted, runs + 1), max(MAX_RUNS_NEEDED, runs))


def _plan_problems(data: dict[str, Any], path: str | Path) -> list[Problem]:
    """What is wrong with a measurement plan's rows (it may be hand-edited); empty when fine."""
    for key, fields in (
        ("reruns", ("batch_size", "k", "more_runs", "runs")),
        ("new_anchors", ("batch_size", "ks", "runs_per_k")),
    ):
        rows = data[key]
        if not isinstance(rows, list):
            return _refused(path, "not a list", key)
        for index, row in enumerate(rows):
            if not isinstance(row, dict):
                return _refused(path, "not an object", f"{key}[{index}]")
            for name in fields:
                value = row.get(name)
                if name == "ks":
                    good = isinstance(value, list) and all(
                        _whole_or_none(v) is not None and v >= 0 for v in value
                    )
                else:
                    number = _whole_or_none(value)
                    good = number is not None and number >= (1 if name == "batch_size" else 0)
                if not good:
                    expected = "a list of K" if name == "ks" else "a whole number"
                    return [
                        Problem(
                            Severity.ERROR,
                            "invalid-plan-input",
                            "not usable",
                            files=(str(path),),
                            field=f"{key}[{index}].{name}",
                            value=json.dumps(value),
                            expected=expected,
                        )
                    ]
    return []


def _reruns_from_confidence(
    result: ResultFile,
) -> tuple[dict[tuple[int, int], int], dict[tuple[int, int], int]]:
    """Reruns from a result's confidence analysis, by :mod:`lib.measurement_plan`'s rule: each
    contender of an unresolved anchor up to the runs its noise calls for, at least one more,
    at most MAX_RUNS_NEEDED in all; where the servers it needs are more than one past those it
    has (server offsets dominate), all of its runs (``runs_needed``, a multiple of its runs
    per server) on that many new server starts."""
    more: dict[tuple[int, int], int] = {}
    starts: dict[tuple[int, int], int] = {}
    for anchor in result.anchors:
        confidence = anchor.confidence
        if confidence is None or confidence.status != "unresolved":
            continue
        for k in confidence.contenders:
            candidate = anchor.candidate(k)
            runs = candidate.num_runs if candidate is not None else 0
            wanted = confidence.servers_needed.get(k)
            servers = confidence.num_servers.get(k, 1)
            if wanted is not None and wanted > servers + 1:
                needed = confidence.runs_needed.get(k, runs)
                if needed > runs:
                    more[(anchor.batch_size, k)] = needed - runs
                    starts[(anchor.batch_size, k)] = wanted - servers
                continue
            target = _target_runs(runs, confidence.runs_needed.get(k))
            if target > runs:
                more[(anchor.batch_size, k)] = target - runs
    return more, starts


def _whole_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def follow_up_plan(
    design: SweepDesign, needs: FollowUpNeeds, results_dir: str, experiment_name: str
) -> tuple[SweepPlan | None, list[Problem]]:
    """Only the cells that need more runs, grouped so that each sweep's serve x bench product
    holds no cell that was not asked for: per K the anchors it needs, the most runs any of
    them needs and the runs each has so far; K alike in all three share a sweep (one server
    start each).

    Seeds continue each cell's own: a cell with n runs so far gets seeds n, n+1, ... The
    tuning plan ran it with seeds 0 .. n-1 (a sweep of the older design, one seed, ran seed 0
    n times), so the follow-up sends none of its runs' prompts again; a planned cell's seeds
    stay 0 .. its runs - 1, and the K of an anchor stay paired on the seeds they share. Hence
    K at one anchor with different runs so far go to different sweeps (their bench combos
    differ). The counts are the usable runs the inputs report: a run the tuner did not count
    (a failed one) leaves its seed to be used again."""
    problems = design.invalid()
    if needs.global_k is not None and needs.global_k != design.startup_k:
        problems.append(
            _mismatch(
                f"the first sweep ran with num_speculative_tokens={needs.global_k} but this"
                f" design gives {design.startup_k}: the follow-up must use the same engine to"
                f" merge (set {_flag('global_k')} {needs.global_k})"
            )
        )
    asked_ks = {k for _, k in needs.more_runs} | {k for _, _, k in needs.context_runs}
    unknown = sorted(asked_ks - set(design.ks) - set(needs.ks))
    if unknown and needs.ks:
        problems.append(
            _mismatch(f"the plan asks for K={unknown}, which the first sweep did not measure")
        )
    too_big = sorted({k for k in asked_ks if k > design.startup_k})
    if too_big:
        problems.append(
            _mismatch(
                f"the plan asks for K={too_big}, above the design's global K {design.startup_k}"
            )
        )
    if problems:
        return None, problems
    if needs.of_grid:
        return _context_follow_up_plan(design, needs, results_dir, experiment_name)
    if not needs.more_runs:
        plan = SweepPlan(
            "follow-up",
            design,
            (),
            (*needs.notes, "nothing to measure: every anchor is resolved"),
        )
        return plan, []
    per_k: dict[int, dict[int, int]] = {}
    for (anchor, k), runs in sorted(needs.more_runs.items()):
        per_k.setdefault(k, {})[anchor] = runs
    groups: dict[tuple[tuple[int, ...], int, tuple[int, ...], int], list[int]] = {}
    for k, runs_at in sorted(per_k.items()):
        anchors = tuple(sorted(runs_at))
        so_far = tuple(needs.runs_so_far.get((anchor, k), 0) for anchor in anchors)
        servers = max(needs.new_servers.get((anchor, k), 1) for anchor in anchors)
        groups.setdefault((anchors, max(runs_at.values()), so_far, servers), []).append(k)
    steps = []
    for index, ((anchors, runs, so_far, servers), ks) in enumerate(
        sorted(groups.items(), key=lambda item: (item[1][0], item[0])), start=1
    ):
        new = [a for a in anchors if a in needs.new_anchors]
        # Where server offsets dominate, the runs go to that many new server starts (replicas
        # named after the first sweep's); else to the design's servers. Each server runs its
        # share of the cell's more runs.
        step_design = design
        if servers > 1 and servers > len(design.replica_values):
            step_design = dataclasses.replace(design, server_replicas=servers)
        replicas = max(len(step_design.replica_values), 1)
        per_server = math.ceil(runs / replicas)
        purpose = f"K={ks} at batch sizes {list(anchors)}, {per_server * replicas} more run(s)"
        if replicas > 1:
            purpose += f" on {replicas} new server starts ({per_server} each)"
        if new:
            purpose += f" (new anchor(s) {new})"
        first_seeds = dict(zip(anchors, so_far, strict=True))
        steps.append(
            SweepStep(
                name=f"{experiment_name}-{index}",
                serve_params=tuning_serve_params(step_design, ks),
                bench_params=bench_params(step_design, anchors, per_server, first_seeds),
                runs_per_cell=per_server,
                results_dir=results_dir,
                experiment_name=f"{experiment_name}-{index}",
                purpose=purpose,
            )
        )
    notes = list(needs.notes)
    notes += _more_runs_notes(sum(needs.more_runs.values()), steps)
    notes += _follow_up_replica_notes(design, steps)
    notes += _warmup_notes(design)
    notes.append(
        f"write the results inside the first experiment folder (here: {results_dir}) and"
        " tune that folder again: tune-spec-k reads summary.json at any depth, so the runs"
        " of both sweeps are pooled per (anchor, K)"
    )
    if needs.new_anchors:
        notes.append(
            f"the new anchor(s) {list(needs.new_anchors)} are measured for every K, as the"
            " seed requires the same K at every anchor"
        )
    return SweepPlan("follow-up", design, tuple(steps), tuple(notes)), []


def _context_follow_up_plan(
    design: SweepDesign, needs: FollowUpNeeds, results_dir: str, experiment_name: str
) -> tuple[SweepPlan | None, list[Problem]]:
    """:func:`follow_up_plan` of a context follow-up: as for batch sizes, with (anchor, prompt
    length) in place of the anchor. Per K the cells it needs, the most runs any needs and the
    runs each has so far; K alike in all three share a sweep, whose bench combos are those
    cells' alone, each prompt length as ``random_input_len`` (as ``--context-lengths``
    writes it) and each repeat a seed continuing the cell's own. Every server holds the
    longest prompt of the first sweep's design and of the follow-up."""
    lengths = sorted(set(design.context_lengths) | {p for _, p, _ in needs.context_runs})
    design = dataclasses.replace(design, context_lengths=tuple(lengths))
    problems = design.invalid()
    if problems:
        return None, problems
    per_k: dict[int, dict[tuple[int, int], int]] = {}
    for (anchor, prompt, k), runs in sorted(needs.context_runs.items()):
        per_k.setdefault(k, {})[(anchor, prompt)] = runs
    groups: dict[tuple[tuple[tuple[int, int], ...], int, tuple[int, ...]], list[int]] = {}
    for k, runs_at in sorted(per_k.items()):
        cells = tuple(sorted(runs_at))
        so_far = tuple(needs.context_runs_so_far.get((a, p, k), 0) for a, p in cells)
        groups.setdefault((cells, max(runs_at.values()), so_far), []).append(k)
    steps = []
    for index, ((cells, runs, so_far), ks) in enumerate(sorted(groups.items()), start=1):
        where = ", ".join(f"batch {a} x {p} tokens" for a, p in cells)
        bench: dict[str, Any] = {}
        for (anchor, prompt), first in zip(cells, so_far, strict=True):
            workload = f"{anchor_combo_name(anchor)}-p{prompt}"
            params = {
                "max_concurrency": anchor,
                "num_prompts": prompts_for(design, anchor),
                RANDOM_PROMPT_LENGTH: prompt,
            }
            for seed in range(first, first + runs):
                bench[seeded_combo_name(workload, seed)] = {**params, REPEAT_SEED: seed}
        steps.append(
            SweepStep(
                name=f"{experiment_name}-{index}",
                serve_params=tuning_serve_params(design, ks),
                bench_params=bench,
                runs_per_cell=runs,
                results_dir=results_dir,
                experiment_name=f"{experiment_name}-{index}",
                purpose=f"K={ks} at {where}, {runs} more run(s)",
            )
        )
    notes = list(needs.notes)
    if not steps:
        notes.append(
            "nothing to measure: every grid cell is resolved and no prompt length is proposed"
        )
        return SweepPlan("follow-up", design, (), tuple(notes)), []
    if needs.new_prompt_lengths:
        notes.append(
            f"the new prompt length(s) {list(needs.new_prompt_lengths)} (the context"
            " measurement plan's) are measured at every anchor and K of the grid,"
            f" {MIN_RUNS_NEEDED} runs each"
        )
    notes += _more_runs_notes(sum(needs.context_runs.values()), steps)
    notes += _follow_up_replica_notes(design, steps)
    notes += _warmup_notes(design)
    holds = _max_model_len(design.serve_args) or design.max_model_len_needed
    notes.append(
        f"every server holds --max-model-len {holds} (the longest prompt, {lengths[-1]}, plus"
        f" {design.output_tokens} output tokens)"
    )
    notes.append(
        f"write the results inside the first experiment folder (here: {results_dir}) and"
        " tune that folder again: the runs of both sweeps are pooled per (anchor, K, prompt"
        " length)"
    )
    return SweepPlan("follow-up", design, tuple(steps), tuple(notes)), []


# --------------------------------------------------------------------------- validation

DYNAMIC_COMBO = "dynamic"
NO_SPECULATION_COMBO = "no-spec"


def static_combo_name(k: int) -> str:
    return f"static-k{k}"


def validation_plan(
    design: SweepDesign,
    result_file: str | Path,
    results_dir: str,
    experiment_name: str,
    static_ks: Sequence[int] | None = None,
    context_schedule: str | Path | None = None,
) -> tuple[SweepPlan | None, list[Problem]]:
    """The tuned schedule (``result_file``: a tune-spec-k result JSON) as a dynamic server,
    next to static-K servers and a server without speculation, at the result's anchors, on
    seeds the tuning did not use (:func:`held_out_first_seed`).

    With ``context_schedule`` (the ``-o`` file of ``tune-spec-k export --format
    vllm-rfc-48944`` or ``vllm-pr-54801`` of that result): the dynamic server serves its
    ``speculative_config`` and every server runs at every anchor and prompt length of the
    result's grid (:func:`_context_dynamic`)."""
    problems = design.incomplete()
    if problems:
        return None, problems
    result, problems = read_result_file(result_file)
    if result is None:
        return None, problems
    if context_schedule is not None:
        found, problems = _context_dynamic(result, context_schedule)
    else:
        found, problems = _batch_dynamic(result)
    if found is None:
        return None, problems
    dynamic, anchors, prompts = dict(found.config), found.anchors, found.prompts
    if dynamic.get("method") in (None, "<method>"):
        dynamic["method"] = design.method
    for key, name in (("method", "method"), ("model", "draft_model")):
        tuned, designed = dynamic.get(key), getattr(design, name)
        if designed is not None and tuned is not None and tuned != designed:
            return None, _refused(
                result_file,
                f"the result was tuned with speculative_config.{key} {tuned!r}, the design has"
                f" {_flag(name)} {designed!r}: validate the configuration that was tuned",
            )
    dynamic.update(found.tables)
    shared = {key: value for key, value in dynamic.items() if key not in _SCHEDULE_FIELDS}
    chosen = (
        sorted(set(static_ks))
        if static_ks is not None
        else sorted({k for k in design.ks if k > 0} | set(found.scheduled_ks))
    )
    if any(k < 1 for k in chosen):
        problem = Problem(
            Severity.ERROR,
            "invalid-static-ks",
            "a static server needs K >= 1 (K=0 is the no-spec server)",
            value=str(chosen),
            expected="K >= 1",
        )
        return None, [problem]
    engine = design.engine_params
    serve: dict[str, Any] = {DYNAMIC_COMBO: {**engine, "speculative_config": dynamic}}
    for k in chosen:
        serve[static_combo_name(k)] = {
            **engine,
            "speculative_config": {**shared, "num_speculative_tokens": k},
        }
    serve[NO_SPECULATION_COMBO] = dict(engine)
    serve = replicated(design, serve)
    validation_design = _with_anchors(design, anchors)
    if prompts:
        validation_design = dataclasses.replace(validation_design, context_lengths=prompts)
        problems = validation_design.invalid()
        if problems:
            return None, problems
    first_seed = held_out_first_seed(result)
    step = SweepStep(
        name="validation",
        serve_params=serve,
        bench_params=bench_params(
            validation_design, anchors, design.num_runs, dict.fromkeys(anchors, first_seed)
        ),
        runs_per_cell=design.num_runs,
        results_dir=results_dir,
        experiment_name=experiment_name,
        purpose=f"{found.purpose} against static K={chosen} and no speculation",
    )
    notes = [
        "static-K servers run num_speculative_tokens=K without a schedule, and K=0 is a server"
        " without speculation: the deployments the schedule replaces, so the check also shows"
        " the Dynamic SD engine's own cost (vLLM issue #49548 measured +6.6% TPOT at"
        " concurrency 2 and +21.6% at 189)",
        f"every server runs each anchor with"
        f" {seeds_text(range(first_seed, first_seed + design.num_runs))}: the tuning ran at most"
        f" {first_seed} counted run(s) per cell, with seeds from 0, so the check measures"
        " prompts the schedule was not chosen on (where every tuning run was counted)",
        *_replica_notes(
            design,
            (step,),
            "arm",
            "tune-spec-k check pools the runs of an arm's servers at each anchor",
        ),
        *_warmup_notes(design),
    ]
    if prompts:
        holds = _max_model_len(design.serve_args) or validation_design.max_model_len_needed
        notes.append(
            f"every server runs every anchor at each prompt length of the result's grid,"
            f" {list(prompts)} ({RANDOM_PROMPT_LENGTH} per bench combo), and holds"
            f" --max-model-len {holds}; the check judges the context schedule per prompt length"
            " at the K it runs there"
        )
    schedule_file = "TUNING_JSON" if context_schedule is None else str(context_schedule)
    notes.append(
        f"check with: tune-spec-k check {results_dir}/{experiment_name} --schedule {schedule_file}"
    )
    return SweepPlan("validation", validation_design, (step,), tuple(notes)), []


#: The speculative_config fields a static server leaves out: the startup maximum and the tables.
_SCHEDULE_FIELDS = (
    "num_speculative_tokens",
    SCHEDULE_KEY,
    RFC_48944_KEY,
    SEQ_LEN_KEY,
    "ctx_agg",
)


@dataclass(frozen=True)
class _Dynamic:
    """What a validation's dynamic server serves, and where: its ``speculative_config`` before
    the schedule (the tuned method and drafter), the schedule's fields, the Ks they run, the
    anchors, the prompt lengths (none: the design's one) and what the sweep is for."""

    config: Mapping[str, Any]
    tables: Mapping[str, Any]
    scheduled_ks: tuple[int, ...]
    anchors: tuple[int, ...]
    prompts: tuple[int, ...]
    purpose: str


def _batch_dynamic(result: ResultFile) -> tuple[_Dynamic | None, list[Problem]]:
    """The result's own schedule and speculative_config, at its anchors."""
    config = result.speculative_config
    if config is None or result.schedule is None or not result.schedule.ranges:
        return None, _refused(
            result.source,
            "the tuning result has no 'speculative_config' with a schedule (expected the JSON"
            " written by tune-spec-k)",
        )
    schedule = result.schedule.to_json()
    anchors = sorted({anchor.batch_size for anchor in result.anchors})
    if not anchors:
        return None, _refused(
            result.source, "the tuning result has no 'batch_decisions': no anchors to validate at"
        )
    return _Dynamic(
        config,
        {SCHEDULE_KEY: schedule},
        tuple(sorted({int(k) for _, _, k in schedule if k > 0})),
        tuple(anchors),
        (),
        f"the schedule {json.dumps(schedule)}",
    ), []


def _context_dynamic(
    result: ResultFile, export_file: str | Path
) -> tuple[_Dynamic | None, list[Problem]]:
    """A context schedule exported from the result: served as the export's
    ``speculative_config`` (beside the result's method and drafter), at every anchor and
    prompt length of the result's grid, each prompt length as ``random_input_len`` (a grid
    read from another field is refused: the sweep could not reproduce its prompts)."""
    data, problems = read_json(export_file)
    if problems:
        return None, problems
    exported = _exported(data, str(export_file))
    if isinstance(exported, list):
        return None, exported
    format, ks = exported
    if result.grid is None:
        return None, list(result.grid_problems) or _refused(
            result.source,
            "the tuning result has no context_grid: a context schedule is validated at the"
            " grid's anchors and prompt lengths",
        )
    if result.context_field != RANDOM_PROMPT_LENGTH:
        return None, _other_prompt_field(result, "a validation")
    tuned = result.speculative_config or {}
    return _Dynamic(
        {key: value for key, value in tuned.items() if key not in _SCHEDULE_FIELDS},
        speculative_config_of(data)[0],
        tuple(k for k in ks if k > 0),
        result.grid.anchors,
        tuple(point.prompt_tokens for point in result.grid.points),
        f"the {format} schedule of {export_file}",
    ), []


def _exported(data: Any, source: str) -> tuple[str, tuple[int, ...]] | list[Problem]:
    """The format of an export of a context format and every K its config runs: a context
    schedule (:func:`lib.loop.check.context_schedule_file`), or ``vllm-context``'s batch
    schedule; else why not (the file, the field and what was expected)."""
    schedule, problems = context_schedule_file(data, source)
    if schedule is not None:
        return schedule.format, tuple(sorted(schedule.ks))
    if problems:
        return problems
    if not isinstance(data, dict) or data.get("format") != "vllm-context":
        return _refused(
            source,
            "not an export of a context format: expected the -o file of tune-spec-k export"
            " --format vllm-context, vllm-rfc-48944 or vllm-pr-54801",
            "format",
        )
    config, prefix = speculative_config_of(data)
    raw = parse_json_string(config.get(SCHEDULE_KEY))
    batch, violations = Schedule.parse(raw)
    if batch is None:
        return [
            Problem(
                Severity.ERROR,
                "invalid-plan-input",
                f"the vllm-context schedule breaks vLLM's rule: {violation}",
                files=(source,),
                field=prefix + SCHEDULE_KEY,
                value=show_value(raw),
                expected="[[lo, hi, K], ...] starting at 1, sorted, no overlap",
            )
            for violation in violations
        ]
    return "vllm-context", tuple(sorted({k for _, _, k in batch.ranges}))


def held_out_first_seed(result: ResultFile) -> int:
    """The first seed of a validation sweep: the most runs any cell of the tuning result has.
    The tuning's runs of a cell used seeds 0 .. its runs - 1 (its follow-ups continue them,
    :func:`follow_up_plan`; a sweep of one seed used one), so the check sees prompt sets the
    schedule was not chosen on; 0 for a result without runs. The counts are usable runs: a
    cell whose failed runs were not counted may have used a seed at or above it. The cells of
    a context grid count too."""
    anchors = [*result.anchors, *(anchor for _, anchor in result.context_cells)]
    return max(
        (candidate.num_runs for anchor in anchors for candidate in anchor.candidates),
        default=0,
    )


def _with_anchors(design: SweepDesign, anchors: Sequence[int]) -> SweepDesign:
    return dataclasses.replace(design, anchors=tuple(anchors), max_batch_size=max(anchors))


# --------------------------------------------------------------------------- writing


def write_plan(plan: SweepPlan, plan_dir: str | Path) -> tuple[list[Path], list[Problem]]:
    """Write every file of the plan under ``plan_dir`` (folders made as needed, ``run.sh``
    executable); returns the paths, or the problem of the first that could not be written."""
    root = Path(plan_dir)
    files = [(root / relative, text) for relative, text in plan.files(str(plan_dir)).items()]
    problems = write_files(files, make_folders=True, executable={root / RUN_SCRIPT})
    return ([] if problems else [path for path, _ in files]), problems
