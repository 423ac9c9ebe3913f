"""Every setting of a tuning, with its command-line flag, default and check.

- :class:`Fields`: which record fields hold the batch-size anchor and K (the loader's input).
- :class:`Settings`: the seed's settings (vLLM PR #49163), by the seed's flag names and
  defaults; they decide which runs and cells count and how K is ranked.
- :class:`Options`: tune-spec-k's additions: the decision rule, the confidence a pick needs,
  the seed of its Monte-Carlo, and whether the schedule switches between anchors.

Each field names its flag once (:mod:`lib.flags`): the CLI's parsers, the app's "same on the
command line" text and the error messages below read the names from there. This module
imports only the standard library, so ``tune-spec-k --help`` starts fast.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from lib.flags import flag, flag_name
from lib.keys import LARGEST_WHOLE_NUMBER

__all__ = [
    "CLIFF_ACCEPTANCE_FIELD",
    "CONTEXT_AUTO",
    "CONTEXT_NONE",
    "DECLARED_OUTPUT",
    "DEFAULT_BATCH_SIZE_VAR",
    "DEFAULT_CONFIDENCE",
    "DEFAULT_K_VAR",
    "DEFAULT_REPLICA_VAR",
    "DEFAULT_RUN_CV",
    "DEFAULT_SEED",
    "DEFAULT_SERVER_CV",
    "DERIVED_COLUMNS",
    "EFFECTIVE_BATCH_FIELDS",
    "ENGINE_FIELDS",
    "ENGINE_SETTING_EXPECTED",
    "GLOBAL_K_VAR",
    "HEALTH_FIELDS",
    "MEASURED_OUTPUT",
    "MEASURED_PROMPT",
    "POLICIES",
    "PROMPT_LENGTH_FIELDS",
    "PROMPT_TOKENS_RANGE",
    "RANDOM_PROMPT_LENGTH",
    "RESULT_FILE",
    "ContextSettings",
    "DeploySettings",
    "Direction",
    "Fields",
    "Options",
    "Policy",
    "Settings",
    "TrafficSettings",
    "beyond_every_count",
    "context_var_reason",
    "prompt_length_expected",
    "prompt_length_reason",
]

Direction = Literal["maximize", "minimize"]
Policy = Literal["seed", "confident"]
POLICIES: tuple[Policy, ...] = ("seed", "confident")

DEFAULT_BATCH_SIZE_VAR = "max_concurrency"
DEFAULT_K_VAR = "speculative_config.num_speculative_tokens_per_batch_size"
#: The engine's startup maximum K: it sizes buffers and CUDA graphs.
GLOBAL_K_VAR = "speculative_config.num_speculative_tokens"
#: Fixed default Monte-Carlo seed: the same sweep and settings give byte-identical output.
DEFAULT_SEED = 49163
DEFAULT_CONFIDENCE = 0.9
#: The serve parameter whose ``KEY=VALUE`` part of a serve combo's name marks a server replica:
#: vLLM's ``--seed`` (the sampler's random seed) changes nothing a greedy benchmark measures.
DEFAULT_REPLICA_VAR = "seed"
#: How much servers of one configuration are assumed to differ (the relative standard deviation
#: of a server start's offset) where the sweep has no replicas to measure it: docs/confidence.md,
#: "Servers".
DEFAULT_SERVER_CV = 0.01
#: The run-to-run noise (relative sd of one run) assumed where a sweep has no replicate runs at
#: all to measure or borrow it from: docs/confidence.md, "Lean sweeps". 2 %: above every anchor
#: of the real repeated GPU sweep (0.6-1.7 %, qwen3-32b-fp8-eagle3-tp2, 10 df each) and of the
#: synthetic samples' GPU models (0.7-1.7 %); CPU builds under load are far noisier (8.5-37 %).
DEFAULT_RUN_CV = 0.02
#: The seed's output file, written into the experiment folder unless told otherwise.
RESULT_FILE = "speculative_k_schedule.json"
#: The log of a ``tune-spec-k run`` experiment's rounds (:mod:`lib.loop.run.rounds`), in its
#: folder: the mark of an experiment the loop made.
ROUNDS_FILE = "rounds.json"
#: The health fields of a record the policy reads (:func:`lib.gates.health_gate`).
HEALTH_FIELDS = ("failed", "completed", "num_prompts")
#: The fields Little's law reads for the effective batch (:mod:`lib.effective_batch`).
EFFECTIVE_BATCH_FIELDS = ("request_throughput", "mean_e2el_ms")
#: The acceptance a cross-anchor cliff reports when no acceptance field is set (:mod:`lib.cliffs`).
CLIFF_ACCEPTANCE_FIELD = "spec_decode_acceptance_length"
#: Columns the loader derives for every run (:mod:`lib.sweep_files`): where it came from and
#: where it sits in the grid, never a measurement. A record field of one of these names is kept
#: as ``record.<name>``, except ``run_number``, which the derived column holds.
DERIVED_COLUMNS = (
    "source",
    "position",
    "combo",
    "run_number",
    "failure_file",
    "speculation",
    "anchor",
    "k",
    "global_k",
)


@dataclass(frozen=True)
class Fields:
    """Where a record keeps its batch-size anchor and its K (dotted paths walk nested dicts),
    and which part of a serve combo's name tells its server replicas apart."""

    batch_size_var: str = field(
        default=DEFAULT_BATCH_SIZE_VAR,
        metadata=flag("--batch-size-var", "record field holding the batch-size anchor"),
    )
    k_var: str = field(
        default=DEFAULT_K_VAR,
        metadata=flag(
            "--k-var",
            "record field holding K: a number (static K) or a [[lo, hi, K], ...] schedule"
            " resolved at the anchor; dotted paths walk nested dicts",
        ),
    )
    replica_var: str = field(
        default=DEFAULT_REPLICA_VAR,
        metadata=flag(
            "--replica-var",
            "serve parameter marking a server replica: serve combos whose names differ only in"
            " its KEY=VALUE part (tune-spec-k plan --server-replicas writes k3-seed=1) are one"
            " configuration measured on several server starts",
            in_seed=False,
            echo="changed",
        ),
    )


@dataclass(frozen=True)
class Settings:
    """The seed's settings, by the seed's flag names, with the seed's defaults."""

    objective: str = field(
        default="output_throughput",
        metadata=flag("--objective-var", "record field to optimise"),
    )
    direction: Direction = field(
        default="maximize",
        metadata=flag("--objective-direction", "whether a larger or a smaller objective is better"),
    )
    acceptance: str | None = field(
        default=None,
        metadata=flag(
            "--acceptance-var",
            "acceptance field to check for stability, e.g. spec_decode_acceptance_length",
        ),
    )
    min_runs: int = field(default=3, metadata=flag("--min-runs", "runs needed per (anchor, K)"))
    uncertainty_penalty: float = field(
        default=1.0,
        metadata=flag(
            "--uncertainty-penalty",
            "robust sigmas (1.4826 x MAD) subtracted from the median before ranking",
        ),
    )
    max_objective_relative_mad: float = field(
        default=0.1,
        metadata=flag(
            "--max-objective-relative-mad",
            "reject an (anchor, K) whose objective MAD / median exceeds this",
        ),
    )
    max_acceptance_relative_mad: float = field(
        default=0.1,
        metadata=flag(
            "--max-acceptance-relative-mad",
            "acceptance MAD / median above this is a warning (an error with"
            " --strict-acceptance-stability)",
        ),
    )
    strict_acceptance_stability: bool = field(
        default=False,
        metadata=flag(
            "--strict-acceptance-stability",
            "treat unstable acceptance as an error instead of a warning",
        ),
    )
    allow_unmeasured_k: bool = field(
        default=False,
        metadata=flag(
            "--allow-unmeasured-k",
            "tune a sweep whose anchors measured different K (a bracketed design's, plan"
            " --first-ks): a K missing at an anchor is ruled out where the K measured there"
            " show it cannot be the best, assuming throughput unimodal in K; elsewhere it keeps"
            " the verdict from ready and the measurement plan asks for it. Without it such a"
            " sweep is refused, as the seed refuses it (unequal-k-sets)",
            in_seed=False,
        ),
    )
    design_ks: tuple[int, ...] = field(
        default=(),
        metadata=flag(
            "--design-ks",
            "the K the sweep's design holds where it measured some of them only at some"
            " anchors, or not yet (a bracketed design, plan --first-ks: the plan prints the"
            " value): each one missing at an anchor is judged as --allow-unmeasured-k judges"
            " it (implies it), so a K the design holds is never silently left out",
            in_seed=False,
            echo="changed",
        ),
    )
    relative_tolerance: float = field(
        default=0.01,
        metadata=flag(
            "--relative-tolerance",
            "K within this fraction of the best conservative score tie; the smallest wins",
        ),
    )
    max_batch_size: int | None = field(
        default=None,
        metadata=flag(
            "--max-batch-size",
            "upper end of the last range; must equal the largest anchor (default: it)",
        ),
    )
    allow_mixed_global_k: bool = field(
        default=False,
        metadata=flag(
            "--allow-mixed-global-k",
            "with the default --k-var, accept a sweep whose global num_speculative_tokens"
            " differs between candidates (one-range schedules, each server started with its"
            " own); the schedule is exported with the largest. Another --k-var (a static-K"
            " sweep's num_speculative_tokens) checks no global, as in the seed",
            in_seed=False,
        ),
    )

    @property
    def maximize(self) -> bool:
        return self.direction == "maximize"

    def metrics_read(self) -> tuple[str, ...]:
        """The record fields the analysis reads with these settings: the objective, the
        acceptance field if any, the health fields, and what the anomaly checks read (the
        effective batch's fields, the cliffs' acceptance). A loader may skip every other metric
        (``load_experiment(..., metrics=settings.metrics_read())``).

        >>> Settings(acceptance="spec_decode_acceptance_length").metrics_read()[:5]
        ('output_throughput', 'spec_decode_acceptance_length', 'failed', 'completed', 'num_prompts')
        >>> Settings().metrics_read()[4:]
        ('request_throughput', 'mean_e2el_ms', 'spec_decode_acceptance_length')
        """
        chosen = (
            self.objective,
            self.acceptance,
            *HEALTH_FIELDS,
            *EFFECTIVE_BATCH_FIELDS,
            CLIFF_ACCEPTANCE_FIELD,
        )
        return tuple(dict.fromkeys(name for name in chosen if name is not None))

    def invalid(self) -> list[str]:
        """Human-readable reasons why these settings cannot be used (empty when fine), each
        naming the setting by its command-line flag, the name users know it by."""
        reasons = []
        if self.direction not in ("maximize", "minimize"):
            reasons.append(f"{_flag('direction')} {self.direction!r}: expected maximize/minimize")
        if self.min_runs < 1:
            reasons.append(f"{_flag('min_runs')} {self.min_runs}: expected >= 1")
        if any(k < 0 for k in self.design_ks) or len(set(self.design_ks)) != len(self.design_ks):
            shown = ",".join(map(str, self.design_ks))
            reasons.append(f"{_flag('design_ks')} {shown}: expected distinct K >= 0")
        # Finite too: the settings are written to the output JSON, which has no inf or NaN.
        for name in (
            "uncertainty_penalty",
            "max_objective_relative_mad",
            "max_acceptance_relative_mad",
        ):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                reasons.append(f"{_flag(name)} {value}: expected a finite number >= 0")
        if not 0 <= self.relative_tolerance < 1:
            reasons.append(
                f"{_flag('relative_tolerance')} {self.relative_tolerance}: expected in [0, 1)"
            )
        for name in ("objective", "acceptance"):
            chosen = getattr(self, name)
            if chosen in DERIVED_COLUMNS:
                kept_as = f"; a record field {chosen!r} is 'record.{chosen}'"
                if chosen == "run_number":
                    kept_as = ""
                reasons.append(
                    f"{_flag(name)} {chosen!r}: a column tune-spec-k derives for every run"
                    f" ({', '.join(DERIVED_COLUMNS)}), not a measurement: expected a numeric"
                    f" record field such as output_throughput{kept_as}"
                )
        if self.max_batch_size is not None and self.max_batch_size < 1:
            reasons.append(f"{_flag('max_batch_size')} {self.max_batch_size}: expected >= 1")
        return reasons


def _flag(name: str) -> str:
    return flag_name(Settings, name)


@dataclass(frozen=True)
class Options:
    """tune-spec-k's additions to the seed's settings: how each anchor's K is decided."""

    policy: Policy = field(
        default="seed",
        metadata=flag(
            "--policy",
            "how to pick K per anchor: the seed's conservative score, or 'confident': the"
            " smallest K whose probability of being within the relative tolerance of the best"
            " reaches --confidence (anchors where none does are unresolved and get a"
            " provisional K); noisy cells are weighed instead of rejected",
            in_seed=False,
        ),
    )
    confidence: float = field(
        default=DEFAULT_CONFIDENCE,
        metadata=flag(
            "--confidence",
            "P(eps-good) an anchor's pick needs to count as resolved",
            in_seed=False,
        ),
    )
    seed: int = field(
        default=DEFAULT_SEED,
        metadata=flag(
            "--seed",
            "seed of the Monte-Carlo behind P(eps-good); same seed, same output",
            in_seed=False,
            echo="changed",
        ),
    )
    interpolated_schedule: bool = field(
        default=False,
        metadata=flag(
            "--interpolated-schedule",
            "emit the schedule with switch points interpolated between anchors instead of"
            " switching at the upper anchor",
            in_seed=False,
        ),
    )
    server_cv: float = field(
        default=DEFAULT_SERVER_CV,
        metadata=flag(
            "--server-cv",
            "without server replicas, how much servers of one configuration are assumed to"
            " differ (relative sd of a server start's offset; 0.01 = 1 %); P(eps-good) and"
            " every 'resolved' include it. With replicas it is measured instead",
            in_seed=False,
            echo="changed",
        ),
    )
    run_cv: float = field(
        default=DEFAULT_RUN_CV,
        metadata=flag(
            "--run-cv",
            "where no cell of the sweep has two runs, how much runs of one cell are assumed"
            " to differ (relative sd of one run; 0.02 = 2 %); P(eps-good) and every"
            " 'resolved' there rest on it. Measured where cells have replicate runs, and"
            " borrowed from them over batch size by single-run anchors; 0: assume nothing"
            " (P unknown without replicate runs)",
            in_seed=False,
            echo="changed",
        ),
    )


#: Record fields that state the server's settings the capture rule reads (a sweep that put
#: them in its serve params has them in every record), each setting's spellings in order; a
#: ``compilation_config`` is kept by the loader (:attr:`lib.sweeps.Sweep.compilation_configs`).
ENGINE_FIELDS: dict[str, tuple[str, ...]] = {
    "max_cudagraph_capture_size": ("max_cudagraph_capture_size", "max-cudagraph-capture-size"),
    "max_num_seqs": ("max_num_seqs", "max-num-seqs"),
    "max_num_batched_tokens": ("max_num_batched_tokens", "max-num-batched-tokens"),
}


#: An engine version as ``--version`` prints it: its leading numbers are the release
#: (``v0.34.0rc1+cu128`` is 0.34.0; :meth:`lib.deploy.releases.Release.parse` reads it).
VERSION_PATTERN = re.compile(r"^\s*v?(\d+(?:\.\d+)*)")

#: What an engine setting (a count or a capture size) must be, as the problems say it.
ENGINE_SETTING_EXPECTED = f"a whole number up to {LARGEST_WHOLE_NUMBER}"


def beyond_every_count(value: Any) -> bool:
    """Whether ``value`` is a number no count can be: larger in size than
    :data:`~lib.keys.LARGEST_WHOLE_NUMBER` (the one limit of every count: batch sizes, K, run
    numbers, prompt lengths), NaN or an infinity. An engine setting such as that (C,
    max_num_seqs, max_num_batched_tokens: a flag, a record's serve params, a saved server
    config) is refused where it enters, never taken: vLLM starts with no such value, and a
    result holding one is unreadable. What is no number (a text, a bool, null) is left to
    each reader's own rules, as is a number in range (a fraction, 0).

    >>> beyond_every_count(2**31 - 1), beyond_every_count(2**31), beyond_every_count(-(2**31))
    (False, True, True)
    >>> beyond_every_count(1e300), beyond_every_count(float("nan")), beyond_every_count(16.5)
    (True, True, False)
    >>> beyond_every_count(True), beyond_every_count("1e300"), beyond_every_count(None)
    (False, False, False)
    """
    if type(value) is int:
        return abs(value) > LARGEST_WHOLE_NUMBER
    if type(value) is float:
        return not math.isfinite(value) or abs(value) > LARGEST_WHOLE_NUMBER
    return False


@dataclass(frozen=True)
class DeploySettings:
    """The serving engine's settings a schedule must respect (:mod:`lib.deploy.constraints`):
    vLLM's CUDA-graph capture ceiling and the largest batch it schedules. None: read from the
    sweep (its records, a saved server config), else assumed from vLLM's defaults and said so.
    """

    max_cudagraph_capture_size: int | None = field(
        default=None,
        metadata=flag(
            "--max-cudagraph-capture-size",
            "vLLM: the server's CUDA-graph capture ceiling C: on 0.33 and older its final"
            " max_cudagraph_capture_size (its /server_info), every batch size b capped to"
            " b*(1+K) <= C tokens per decode step; on 0.34 the value given to vllm serve (the"
            " token graphs' ceiling C0), only steps past both the decode request ceiling and"
            " C0 capped (capped ranges are marked 'capped, not measured'); without it C is"
            " read from the sweep, else assumed (vLLM's default: 512, 1024 on SM100 GPUs from"
            " vLLM 0.33) and the ranges past it are only named",
            in_seed=False,
            metavar="C",
        ),
    )
    max_num_seqs: int | None = field(
        default=None,
        metadata=flag(
            "--max-num-seqs",
            "vLLM: the server's max_num_seqs; the capture rule is checked for every batch size"
            " up to it (vLLM carries the last range's K that far); default: the sweep's, else"
            " vLLM's 256 or the largest anchor if larger",
            in_seed=False,
            metavar="N",
        ),
    )

    max_decode_cudagraph_capture_requests: int | None = field(
        default=None,
        metadata=flag(
            "--max-decode-cudagraph-capture-requests",
            "vLLM 0.34: the server's explicit -cc.max_decode_cudagraph_capture_requests, the"
            " request ceiling R of its FULL decode graphs (default: the sweep's saved server"
            " config, else 0.34's own: set by the schedule's smallest K); batches past it run"
            " PIECEWISE graphs up to C0. Ignored, and said so, on 0.33 and older (their decode"
            " graphs are keyed by tokens per step)",
            in_seed=False,
            metavar="N",
        ),
    )
    max_decode_cudagraph_capture_tokens: int | None = field(
        default=None,
        metadata=flag(
            "--max-decode-cudagraph-capture-tokens",
            "vLLM 0.34: the server's explicit -cc.max_decode_cudagraph_capture_tokens, the token"
            " budget of its FULL decode graphs (with max_num_batched_tokens, the smaller"
            " binds; default: the sweep's saved server config, else none off SM100). Ignored,"
            " and said so, on 0.33 and older",
            in_seed=False,
            metavar="N",
        ),
    )

    vllm_version: str | None = field(
        default=None,
        metadata=flag(
            "--vllm-version",
            "vLLM: the release that will serve the schedule (e.g. 0.34.0, as vllm --version"
            " prints it); its rules apply (docs/formats.md, section 9): 0.34 keys decode CUDA"
            " graphs by requests and query length, 0.33 and older by tokens per step. Default:"
            " the version the sweep's saved server configs state, else the newest release"
            " tune-spec-k knows, said so",
            in_seed=False,
            metavar="VERSION",
        ),
    )

    gpu_memory_gib: float | None = field(
        default=None,
        metadata=flag(
            "--gpu-memory-gib",
            "the memory of one of the server's GPUs in GiB (an 80 GB H100: 79.6); the engines'"
            " defaults depend on it: vLLM's max_num_seqs (0.33 and newer: 1024 from 70 GiB,"
            " 256 below; so how far the capture rule is checked) and SGLang's decode CUDA-graph"
            " batch sizes (with --tensor-parallel-size; its padding can move a boundary)."
            " Default: the GPU a saved server config names, else assumed and said (vLLM: an"
            " 80 GiB H100-class GPU; SGLang: its largest default, 512)",
            in_seed=False,
            metavar="GIB",
        ),
    )
    tensor_parallel_size: int | None = field(
        default=None,
        metadata=flag(
            "--tensor-parallel-size",
            "sglang: the server's tensor parallelism (--tp-size), read with --gpu-memory-gib"
            " (default: 1, said)",
            in_seed=False,
            metavar="N",
        ),
    )

    def invalid(self) -> list[str]:
        """Reasons these settings cannot be used (empty when fine), by flag name.

        >>> DeploySettings(gpu_memory_gib=float("nan")).invalid()
        ['--gpu-memory-gib nan: expected a number of GiB > 0']
        >>> DeploySettings(vllm_version="latest").invalid()
        ['--vllm-version latest: expected a version number such as 0.34.0']
        >>> DeploySettings(max_num_seqs=0).invalid()
        ['--max-num-seqs 0: expected >= 1']
        >>> DeploySettings(max_cudagraph_capture_size=2**31).invalid()
        ['--max-cudagraph-capture-size 2147483648: expected a whole number up to 2147483647']
        >>> DeploySettings(max_decode_cudagraph_capture_requests=0).invalid()
        ['--max-decode-cudagraph-capture-requests 0: expected >= 1']
        """
        reasons = []
        if self.vllm_version is not None and not VERSION_PATTERN.match(self.vllm_version):
            reasons.append(
                f"{flag_name(DeploySettings, 'vllm_version')} {self.vllm_version}: expected a"
                " version number such as 0.34.0"
            )
        memory = self.gpu_memory_gib
        if memory is not None and not (math.isfinite(memory) and memory > 0):
            reasons.append(
                f"{flag_name(DeploySettings, 'gpu_memory_gib')} {memory:g}: expected a number"
                " of GiB > 0"
            )
        for name in (
            "max_cudagraph_capture_size",
            "max_num_seqs",
            "max_decode_cudagraph_capture_requests",
            "max_decode_cudagraph_capture_tokens",
            "tensor_parallel_size",
        ):
            value = getattr(self, name)
            if value is not None and value < 1:
                reasons.append(f"{flag_name(DeploySettings, name)} {value}: expected >= 1")
            elif beyond_every_count(value):
                reasons.append(
                    f"{flag_name(DeploySettings, name)} {value}: expected {ENGINE_SETTING_EXPECTED}"
                )
        return reasons


#: The bench key that sets the random dataset's prompt length (``--random-input-len``): what
#: ``tune-spec-k plan --context-lengths`` sweeps and the context axis looks for first.
RANDOM_PROMPT_LENGTH = "random_input_len"
#: The bench key of a repeat's seed (``vllm bench serve --seed``, which samples the prompts):
#: ``tune-spec-k plan`` sweeps it so that the repeats of a cell send different prompts. Runs
#: that differ only by it are repeats of one workload, never a second axis.
REPEAT_SEED = "seed"
#: ``--context-var`` values that name no field: detect the context axis, or ignore it (the seed).
CONTEXT_AUTO = "auto"
CONTEXT_NONE = "none"
#: The swept bench keys that set the prompt length, in the order ``auto`` looks for them:
#: (fields that must all be present and are summed, fields added where present).
#: ``random``: ``random_input_len`` tokens after a shared ``random_prefix_len``;
#: ``prefix_repetition``: prompt = prefix + suffix exactly.
PROMPT_LENGTH_FIELDS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    ((RANDOM_PROMPT_LENGTH,), ("random_prefix_len",)),
    (("prefix_repetition_prefix_len", "prefix_repetition_suffix_len"), ()),
)
#: The measured mean prompt of a run: prompt tokens over completed requests (client-side).
MEASURED_PROMPT = ("total_input_tokens", "completed")
#: The measured mean output of a run, and the swept output lengths to fall back on.
MEASURED_OUTPUT = ("total_output_tokens", "completed")
DECLARED_OUTPUT = ("random_output_len", "prefix_repetition_output_len")
#: The prompt lengths every command accepts, in tokens (the loader's context axis, the grid's
#: reader, ``plan --context-lengths``, "measure next" and every context export): at least 1
#: token, at most 2^30, so that a context (prompt + output / 2) and a server's
#: ``--max-model-len`` (prompt + output) stay below the engines' 2^31 - 1 for any output up to
#: 2^30. No model today reads a prompt of more than a few million tokens.
PROMPT_TOKENS_RANGE = (1, 2**30)


def prompt_length_reason(value: float) -> str | None:
    """Why ``value`` cannot be a prompt length (None: it can): it must be a finite number
    within :data:`PROMPT_TOKENS_RANGE`. A measured mean prompt may have a fraction (it is
    rounded to whole tokens where a point is named); 0, negatives, NaN and infinities may not.

    >>> prompt_length_reason(512), prompt_length_reason(511.5), prompt_length_reason(2**30)
    (None, None, None)
    >>> prompt_length_reason(0), prompt_length_reason(-512)
    ('below 1 token', 'below 1 token')
    >>> prompt_length_reason(3e9), prompt_length_reason(float("nan"))
    ('above the largest prompt length 1073741824 tokens', 'not a finite number')
    """
    lowest, highest = PROMPT_TOKENS_RANGE
    if not math.isfinite(value):
        return "not a finite number"
    if value < lowest:
        return f"below {lowest} token"
    if value > highest:
        return f"above the largest prompt length {highest} tokens"
    return None


def prompt_length_expected() -> str:
    """What a prompt length must be, as problems say it.

    >>> prompt_length_expected()
    'a prompt length from 1 to 1073741824 tokens'
    """
    return "a prompt length from {} to {} tokens".format(*PROMPT_TOKENS_RANGE)


@dataclass(frozen=True)
class ContextSettings:
    """Whether and how the sweep's prompt length becomes a second axis (:mod:`lib.context`)."""

    context_var: str = field(
        default=CONTEXT_AUTO,
        metadata=flag(
            "--context-var",
            "record field holding the prompt length that the sweep varied (e.g."
            " random_input_len); 'auto': the swept prompt-length key, else the measured mean"
            " prompt total_input_tokens / completed; 'none': ignore the prompt length, as the"
            " seed does",
            in_seed=False,
            echo="changed",
        ),
    )
    context_tolerance: float = field(
        default=0.1,
        metadata=flag(
            "--context-tolerance",
            "relative difference up to which two prompt lengths are the same context point",
            in_seed=False,
            echo="changed",
        ),
    )

    def fields_read(self) -> tuple[str, ...]:
        """The record fields the context axis (:func:`lib.context_axis.find_context_axis`) reads
        with these settings: a loader that keeps only some metrics must keep these too. Here,
        not in :mod:`lib.context`, because the CLI's reading child asks for them and must not
        import Polars (:mod:`lib.prefetch`).

        >>> ContextSettings(context_var="none").fields_read()
        ()
        >>> ContextSettings(context_var="my_len").fields_read()[:3]
        ('my_len', 'total_output_tokens', 'completed')
        >>> ContextSettings(context_var="my_len").fields_read()[-1]  # the repeat's seed, last
        'seed'
        """
        if self.context_var == CONTEXT_NONE:
            return ()
        prompt: tuple[str, ...] = (self.context_var,)
        if self.context_var == CONTEXT_AUTO:
            prompt = (
                *(name for required, added in PROMPT_LENGTH_FIELDS for name in (*required, *added)),
                *MEASURED_PROMPT,
            )
        return tuple(dict.fromkeys((*prompt, *MEASURED_OUTPUT, *DECLARED_OUTPUT, REPEAT_SEED)))

    def invalid(self, objective: str | None = None) -> list[str]:
        """Reasons these settings cannot be used (empty when fine); ``objective``: the
        objective field, which cannot be the prompt length too.

        >>> ContextSettings(context_tolerance=-1).invalid()
        ['--context-tolerance -1: expected a finite number in [0, 1)']
        """
        reasons = []
        reason = context_var_reason(self.context_var, objective)
        if reason is not None:
            reasons.append(reason)
        if not (math.isfinite(self.context_tolerance) and 0 <= self.context_tolerance < 1):
            name = flag_name(ContextSettings, "context_tolerance")
            reasons.append(f"{name} {self.context_tolerance}: expected a finite number in [0, 1)")
        if not self.context_var.strip():
            name = flag_name(ContextSettings, "context_var")
            reasons.append(f"{name} {self.context_var!r}: expected a record field, auto or none")
        return reasons


def context_var_reason(context_var: str, objective: str | None) -> str | None:
    """Why ``--context-var`` cannot name this field (None: it can), as ``--objective-var`` is
    refused a derived column: a column the loader derives for every run
    (:data:`DERIVED_COLUMNS`) is no prompt length, and the objective cannot be its own axis
    (every run would be at its own "context").

    >>> context_var_reason("random_input_len", "output_throughput") is None
    True
    >>> context_var_reason("anchor", None)[:28]
    "--context-var 'anchor': a co"
    >>> context_var_reason("output_throughput", "output_throughput")[:48]
    "--context-var 'output_throughput': the objective"
    """
    name = flag_name(ContextSettings, "context_var")
    if context_var in DERIVED_COLUMNS:
        kept_as = f"; a record field {context_var!r} is 'record.{context_var}'"
        if context_var == "run_number":
            kept_as = ""
        return (
            f"{name} {context_var!r}: a column tune-spec-k derives for every run"
            f" ({', '.join(DERIVED_COLUMNS)}), not a prompt length: expected a record field"
            f" such as {RANDOM_PROMPT_LENGTH}{kept_as}, auto or none"
        )
    if objective is not None and context_var == objective:
        return (
            f"{name} {context_var!r}: the objective ({flag_name(Settings, 'objective')}) cannot"
            f" be the prompt length too: expected a record field such as {RANDOM_PROMPT_LENGTH},"
            " auto or none"
        )
    return None


@dataclass(frozen=True)
class TrafficSettings:
    """The traffic the schedule is weighed on (:mod:`lib.traffic`, docs/traffic.md)."""

    traffic: str | None = field(
        default=None,
        metadata=flag(
            "--traffic",
            "the server's batch-size distribution: a Prometheus range query (JSON of"
            " /api/v1/query_range) of vllm:num_requests_running or sglang:num_running_reqs,"
            " or a CSV of batch_size,weight or of timestamp,batch_size samples; the schedule's"
            " expected gain over the best static K and over K=0 on it, with intervals, and the"
            " verdict judges by it; check weighs the measured dynamic server on it (default:"
            " tune weighs the sweep's own runs and says so; check weighs nothing)",
            in_seed=False,
            metavar="FILE",
        ),
    )
