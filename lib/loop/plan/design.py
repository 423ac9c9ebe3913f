"""The design of a sweep: everything that fixes its engine and its workload (:class:`SweepDesign`,
a field per ``tune-spec-k plan`` flag, and the checks that name those flags), and a plan's
design layered from the defaults, an earlier plan's ``sweep_plan.json`` and the flags
(:func:`design_from`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from lib.flags import flag, flag_name
from lib.keys import parse_json_string, whole_number_text
from lib.loop.plan.inputs import whole_or_none
from lib.problems import Problem, Severity
from lib.settings import (
    DEFAULT_REPLICA_VAR,
    ENGINE_SETTING_EXPECTED,
    PROMPT_TOKENS_RANGE,
    beyond_every_count,
    prompt_length_reason,
)

__all__ = [
    "DATASET_LENGTH_FLAGS",
    "LAYOUTS",
    "MIN_PROMPTS",
    "PROMPTS_PER_SLOT",
    "Layout",
    "SweepDesign",
    "default_anchors",
    "design_flag",
    "design_from",
    "spec_option",
]

#: Per dataset, the bench flags for input and output length (None: the dataset has none).
DATASET_LENGTH_FLAGS: dict[str, tuple[str | None, str | None]] = {
    "random": ("--random-input-len", "--random-output-len"),
    "sonnet": ("--sonnet-input-len", "--sonnet-output-len"),
    "sharegpt": (None, "--sharegpt-output-len"),
    "custom": (None, "--custom-output-len"),
    "hf": (None, "--hf-output-len"),
}
GOODPUT_METRICS = ("ttft", "tpot", "e2el")
#: ``vllm bench serve --random-output-len``'s default.
RANDOM_OUTPUT_LEN_DEFAULT = 128

#: The design's engine settings that go into every serve combo when given (named after vLLM's
#: settings and ``vllm serve`` flags): the ones the capture-ceiling rule needs.
ENGINE_PARAMS = ("max_num_seqs", "max_cudagraph_capture_size")

#: How a tuning plan lays out its runs (``--design``): ``full``, the seed's grid of
#: ``--num-runs`` runs per cell; ``lean``, one run per cell plus a noise probe
#: (:mod:`lib.loop.plan.lean`).
Layout = Literal["full", "lean"]
LAYOUTS: tuple[Layout, ...] = ("full", "lean")

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
    first_ks: tuple[int, ...] = field(
        default=(),
        metadata=flag(
            "--first-ks",
            "with --design lean: the K measured at every anchor (default: every K of --ks);"
            " they must hold K=0 and the largest K (the noise probe's). The other K are left"
            " to the follow-up, which measures one only where the K measured at an anchor"
            " cannot rule it out, assuming throughput unimodal in K (tune with"
            " --design-ks and the K of --ks); e.g. --ks 0,1,2,3,5 --first-ks 0,2,5",
        ),
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
    layout: Layout = field(
        default="full",
        metadata=flag(
            "--design",
            "full: every (anchor, K) --num-runs times (the seed's design); lean: every (anchor,"
            " K) once, plus a noise probe: K=0 and the largest K --num-runs times at the"
            " smallest, the middle and the largest anchor (on --server-replicas servers each),"
            " so that the tuner can estimate the noise; the plan prints its runs beside the"
            " full grid's",
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
    def max_model_len_given(self) -> int | None:
        """The ``--max-model-len`` of ``serve_args``, if any (None when absent or unreadable)."""
        return _max_model_len(self.serve_args)

    @property
    def max_model_len_held(self) -> int:
        """The context every server holds: ``--max-model-len`` of ``serve_args`` when given,
        else :attr:`max_model_len_needed` (what the serve command then sets)."""
        return self.max_model_len_given or self.max_model_len_needed

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
                field=design_flag(name),
                expected="a value (or an earlier plan's sweep_plan.json)"
                if name != "anchors"
                else f"anchors, or {design_flag('max_batch_size')} to derive them (or an earlier"
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
        for name in ENGINE_PARAMS:
            # A stored design (--design) is no flag: the limit of every count is checked here.
            if beyond_every_count(getattr(self, name)):
                bad(name, getattr(self, name), ENGINE_SETTING_EXPECTED)
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
                    f"no --{name.replace('_', '-')} in it: {design_flag(name)} {value} sets it for"
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
        if whole_or_none(self.server_replicas) is None or self.server_replicas < 1:
            bad("server_replicas", self.server_replicas, "a whole number >= 1")
            replicas_readable = False
        if whole_or_none(self.first_replica) is None or self.first_replica < 0:
            bad("first_replica", self.first_replica, "a whole number >= 0")
            replicas_readable = False
        if replicas_readable and self.replica_values:
            problems.extend(self._replica_problems())
        if self.warmup_num_prompts < 0:
            bad("warmup_num_prompts", self.warmup_num_prompts, ">= 0")
        if self.dataset != "random" and not self.dataset_path:
            bad("dataset", self.dataset, f"{design_flag('dataset_path')} with it")
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
                f"none with {design_flag('context_lengths')}, which sets the prompt lengths",
            )
        given = self.max_model_len_given
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
        if self.layout not in LAYOUTS:
            bad("layout", self.layout, " or ".join(LAYOUTS))
        elif self.layout == "lean" and self.num_runs < 2:
            bad(
                "num_runs",
                self.num_runs,
                f">= 2 with {design_flag('layout')} lean: the noise probe's runs of a cell on"
                " each server (one run per server estimates no noise)",
            )
        elif self.first_ks and self.layout != "lean":
            bad("layout", self.layout, f"lean with {design_flag('first_ks')}")
        elif self.first_ks and not set(self.first_ks) <= set(self.ks):
            bad("first_ks", list(self.first_ks), f"K among {design_flag('ks')}")
        elif self.first_ks and not {min(self.ks), max(self.ks)} <= set(self.first_ks):
            bad(
                "first_ks",
                list(self.first_ks),
                f"K={min(self.ks)} and K={max(self.ks)} among them (the noise probe's K)",
            )
        elif self.layout == "lean" and self.context_lengths:
            bad(
                "layout",
                self.layout,
                f"full with {design_flag('context_lengths')}: a lean design's noise probe is"
                " laid out over batch sizes only",
            )
        reserved = {"num_speculative_tokens", "num_speculative_tokens_per_batch_size", "method"}
        clash = sorted(reserved & set(self.speculative_options))
        if clash:
            bad(
                "speculative_options",
                ", ".join(clash),
                f"none of these: the plan sets them itself (use {design_flag('ks')},"
                f" {design_flag('global_k')}, {design_flag('method')})",
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
                    f"no --{DEFAULT_REPLICA_VAR} in it: {design_flag('server_replicas')} gives each"
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
        unset_values = (("server_replicas", 1), ("first_replica", 0), ("layout", "full"))
        for name, unset in (*unset_values, ("first_ks", [])):
            if stored[name] == unset:
                del stored[name]
        return stored


def design_flag(name: str) -> str:
    """The flag of a design field, as problems name it (``ks`` -> ``--ks``)."""
    return flag_name(SweepDesign, name)


def _design_problem(name: str, expected: str, value: Any = None) -> Problem:
    return Problem(
        Severity.ERROR,
        "invalid-design",
        "the design cannot be planned",
        field=design_flag(name),
        value=None if value is None else str(value),
        expected=expected,
    )


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


def _max_model_len(serve_args: str) -> int | None:
    """The ``--max-model-len`` in extra serve arguments, if any (None when absent or unreadable:
    :func:`~lib.keys.whole_number_text` reads ASCII digits only).

    >>> _max_model_len("--seed 0 --max-model-len 4096"), _max_model_len("--max-model-len=8k")
    (4096, None)
    >>> _max_model_len("--max-model-len ²"), _max_model_len("--max-model-len 99999999999")
    (None, None)
    """
    value = _argument_value(serve_args, "--max-model-len")
    return whole_number_text(value)


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
