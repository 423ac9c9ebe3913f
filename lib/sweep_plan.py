"""Planning the sweeps of the loop: the params files and the command for `vllm bench sweep serve`.

Three kinds of plan, each one or more *steps* (one ``vllm bench sweep serve`` invocation each):

- **tuning** (the seed's design): K x anchor matrix. Every serve combo keeps the global
  ``speculative_config.num_speculative_tokens`` at the largest K (it sizes buffers and CUDA
  graphs, so every candidate runs on the same engine) and sets K with a one-range schedule
  ``[[1, max_batch_size, K]]``, K=0 included the same way. Bench combos set ``max_concurrency``
  to each anchor, from 1 to the deployment maximum.
- **follow-up**: after a tuning result with unresolved anchors (``lib.plan``'s measurement
  plan, or the ``confidence`` blocks of a result JSON), only the cells that need more runs and
  the suggested new anchors, with the same engine settings, so its results merge with the first
  sweep's (the tuner reads ``summary.json`` at any depth: write them inside the first
  experiment folder).
- **validation**: the tuned schedule served as a dynamic config next to the alternatives a
  user would otherwise deploy: static-K servers (``num_speculative_tokens: K``, no schedule)
  and a server without speculation (K=0); ``tune-spec-k check`` reads the result.

Params files are dicts of named combos (``vllm bench sweep serve`` also reads lists of dicts);
nested dicts such as ``speculative_config`` stay nested: the sweep passes them to the command
as JSON and copies them into every record as they are.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lib.confidence import MAX_RUNS_NEEDED, MIN_RUNS_NEEDED

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
#: Prompts per bench combo when not given: enough waves at every concurrency to reach a steady
#: state (8 per slot), and never so few that one slow request dominates (32).
PROMPTS_PER_SLOT = 8
MIN_PROMPTS = 32


class PlanError(ValueError):
    """A design or input file that cannot be planned; the message names what and why."""


@dataclass(frozen=True)
class SweepDesign:
    """Everything that fixes the engine and the workload of a sweep. ``speculative_options``
    are further ``speculative_config`` keys (e.g. ``prompt_lookup_max`` for n-gram)."""

    model: str
    method: str
    ks: tuple[int, ...]
    anchors: tuple[int, ...]
    draft_model: str | None = None
    speculative_options: Mapping[str, Any] = field(default_factory=dict)
    global_k: int | None = None
    max_batch_size: int | None = None
    input_len: int | None = None
    output_len: int | None = None
    dataset: str = "random"
    dataset_path: str | None = None
    num_prompts: int | None = None
    goodput: tuple[str, ...] = ()
    num_runs: int = 3
    warmup_num_prompts: int = 0
    host: str = "127.0.0.1"
    port: int = 8000
    serve_args: str = ""
    bench_args: str = ""

    @property
    def deploy_max(self) -> int:
        """The deployment maximum batch size: the schedule's upper end and ``--max-num-seqs``."""
        return self.max_batch_size if self.max_batch_size is not None else max(self.anchors)

    @property
    def startup_k(self) -> int:
        """``num_speculative_tokens`` of every schedule-enabled server: the largest K."""
        return self.global_k if self.global_k is not None else max(self.ks)

    def invalid(self) -> list[str]:
        """Why this design cannot be planned (empty when fine), by flag name."""
        reasons = []
        if not self.model:
            reasons.append("--model: expected the model to serve")
        if not self.method:
            reasons.append("--method: expected a speculative method (ngram, eagle3, ...)")
        if not self.ks or any(k < 0 for k in self.ks):
            reasons.append(f"--ks {list(self.ks)}: expected whole numbers >= 0")
        elif 0 not in self.ks:
            reasons.append(f"--ks {list(self.ks)}: expected K=0 among them (the baseline)")
        elif max(self.ks) < 1:
            reasons.append("--ks: expected at least one K >= 1")
        if len(set(self.ks)) != len(self.ks):
            reasons.append(f"--ks {list(self.ks)}: repeated K")
        if not self.anchors or any(a < 1 for a in self.anchors):
            reasons.append(f"--anchors {list(self.anchors)}: expected batch sizes >= 1")
        elif min(self.anchors) != 1:
            reasons.append(
                f"--anchors {list(self.anchors)}: expected the first anchor to be 1 (the"
                " schedule must start at batch size 1)"
            )
        if len(set(self.anchors)) != len(self.anchors):
            reasons.append(f"--anchors {list(self.anchors)}: repeated anchor")
        if (
            self.anchors
            and self.max_batch_size is not None
            and self.max_batch_size != max(self.anchors)
        ):
            reasons.append(
                f"--max-batch-size {self.max_batch_size}: expected the largest anchor,"
                f" {max(self.anchors)} (the tuner will not extrapolate past it)"
            )
        if self.ks and self.global_k is not None and self.global_k < max(self.ks):
            reasons.append(
                f"--global-k {self.global_k}: expected >= the largest K, {max(self.ks)}"
                " (vLLM clamps K to it)"
            )
        for name in ("input_len", "output_len", "num_prompts"):
            value = getattr(self, name)
            if value is not None and value < 1:
                reasons.append(f"--{name.replace('_', '-')} {value}: expected >= 1")
        if self.num_runs < 1:
            reasons.append(f"--num-runs {self.num_runs}: expected >= 1")
        if self.warmup_num_prompts < 0:
            reasons.append(f"--warmup-num-prompts {self.warmup_num_prompts}: expected >= 0")
        if self.dataset != "random" and not self.dataset_path:
            reasons.append(f"--dataset {self.dataset}: expected --dataset-path")
        if self.input_len is not None and DATASET_LENGTH_FLAGS.get(self.dataset, ("",))[0] is None:
            reasons.append(
                f"--input-len: the {self.dataset} dataset has its own prompts; leave it out"
            )
        for slo in self.goodput:
            metric, _, value = slo.partition(":")
            if metric not in GOODPUT_METRICS or not _positive_number(value):
                reasons.append(
                    f"--goodput {slo}: expected METRIC:MILLISECONDS with METRIC one of"
                    f" {', '.join(GOODPUT_METRICS)}"
                )
        for name, text in (("--serve-args", self.serve_args), ("--bench-args", self.bench_args)):
            try:
                shlex.split(text)
            except ValueError as error:
                reasons.append(f"{name} {text!r}: {error}")
        reserved = {"num_speculative_tokens", "num_speculative_tokens_per_batch_size", "method"}
        clash = sorted(reserved & set(self.speculative_options))
        if clash:
            reasons.append(
                f"--spec-option {', '.join(clash)}: set by the plan itself (use --ks, --global-k,"
                " --method)"
            )
        return reasons

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "method": self.method,
            "draft_model": self.draft_model,
            "speculative_options": dict(self.speculative_options),
            "ks": list(self.ks),
            "global_k": self.global_k,
            "anchors": list(self.anchors),
            "max_batch_size": self.max_batch_size,
            "input_len": self.input_len,
            "output_len": self.output_len,
            "dataset": self.dataset,
            "dataset_path": self.dataset_path,
            "num_prompts": self.num_prompts,
            "goodput": list(self.goodput),
            "num_runs": self.num_runs,
            "warmup_num_prompts": self.warmup_num_prompts,
            "host": self.host,
            "port": self.port,
            "serve_args": self.serve_args,
            "bench_args": self.bench_args,
        }


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


def tuning_serve_params(design: SweepDesign, ks: Sequence[int]) -> dict[str, Any]:
    """One serve combo per K: the global maximum fixed, K set by a one-range schedule."""
    return {
        k_combo_name(k): {
            "speculative_config": speculative_config(
                design,
                num_speculative_tokens=design.startup_k,
                num_speculative_tokens_per_batch_size=[[1, design.deploy_max, k]],
            )
        }
        for k in sorted(ks)
    }


def prompts_for(design: SweepDesign, anchor: int) -> int:
    if design.num_prompts is not None:
        return design.num_prompts
    return max(MIN_PROMPTS, PROMPTS_PER_SLOT * anchor)


def bench_params(design: SweepDesign, anchors: Sequence[int]) -> dict[str, Any]:
    """One bench combo per anchor: ``max_concurrency`` (the anchor the tuner reads) and the
    number of prompts."""
    return {
        anchor_combo_name(anchor): {
            "max_concurrency": anchor,
            "num_prompts": prompts_for(design, anchor),
        }
        for anchor in sorted(anchors)
    }


# --------------------------------------------------------------------------- commands


def serve_command(design: SweepDesign) -> str:
    """``vllm serve`` with what every combo shares; the combos add ``--speculative-config``."""
    parts = [
        "vllm",
        "serve",
        design.model,
        "--host",
        design.host,
        "--port",
        str(design.port),
        "--max-num-seqs",
        str(design.deploy_max),
    ]
    return _join(parts, design.serve_args)


def bench_command(design: SweepDesign) -> str:
    """``vllm bench serve`` with the workload; the combos add concurrency and prompt count."""
    parts = [
        "vllm",
        "bench",
        "serve",
        "--model",
        design.model,
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
    # Fixed-length, greedy, seeded: every K decodes the same tokens for the same prompts.
    parts += ["--ignore-eos", "--temperature", "0", "--seed", "0"]
    if design.goodput:
        parts += ["--goodput", *design.goodput]
    return _join(parts, design.bench_args)


def _join(parts: list[str], extra: str) -> str:
    text = shlex.join(parts)
    return f"{text} {extra.strip()}" if extra.strip() else text


# --------------------------------------------------------------------------- plans


@dataclass(frozen=True)
class SweepStep:
    """One ``vllm bench sweep serve`` invocation: its params, runs and output folder."""

    name: str
    serve_params: dict[str, Any]
    bench_params: dict[str, Any]
    num_runs: int
    results_dir: str
    experiment_name: str
    #: What each (anchor, K) cell is measured for, for the plan's summary.
    purpose: str

    @property
    def runs(self) -> int:
        return len(self.serve_params) * len(self.bench_params) * self.num_runs


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

    def sweep_command(self, step: SweepStep, plan_dir: str) -> str:
        """The exact ``vllm bench sweep serve`` command for ``step``, its params files under
        ``plan_dir`` (as written: relative paths stay relative to where the plan was made)."""
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
            str(step.num_runs),
        ]
        if self.design.warmup_num_prompts:
            parts += ["--warmup-num-prompts", str(self.design.warmup_num_prompts)]
        parts += ["-o", step.results_dir, "-e", step.experiment_name]
        return shlex.join(parts)

    def commands(self, plan_dir: str) -> list[str]:
        return [self.sweep_command(step, plan_dir) for step in self.steps]

    def run_script(self) -> str:
        """A bash script running every step; extra arguments (``--dry-run``,
        ``--continue-on-error``, ``--resume``) go to each sweep. Params are found beside the
        script; results go below the folder it is run from."""
        lines = [
            "#!/usr/bin/env bash",
            f"# Written by `tune-spec-k plan` ({self.kind} plan): {self.summary_line()}",
            "# Run it from the folder the results folder is relative to; extra arguments",
            "# (--dry-run, --continue-on-error, --resume) are passed to every sweep.",
            "set -euo pipefail",
            'plan_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)',
        ]
        for step in self.steps:
            # The params lie beside the script wherever it is run from.
            command = self.sweep_command(step, "PLAN_DIR").replace("PLAN_DIR/", '"${plan_dir}"/')
            folder = self.step_folder(step)
            params = '"${plan_dir}"/' + (f"{shlex.quote(folder)}/" if folder else "")
            results = shlex.quote(f"{step.results_dir}/{step.experiment_name}")
            lines += [
                "",
                f"# {step.name}: {step.purpose}",
                command + ' "$@"',
                "# Keep the params with the results (not with --dry-run: there are none).",
                f"if [ -d {results} ]; then cp {params}{SERVE_PARAMS} {params}{BENCH_PARAMS}"
                f" {results}/; fi",
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
                        "num_runs": step.num_runs,
                        "results": f"{step.results_dir}/{step.experiment_name}",
                        "purpose": step.purpose,
                    }
                    for step in self.steps
                ],
                "notes": list(self.notes),
            }
        )
        return texts

    def text_lines(self, plan_dir: str) -> list[str]:
        lines = [f"{self.kind} plan: {self.summary_line()}"]
        for step in self.steps:
            ks = ", ".join(step.serve_params)
            anchors = ", ".join(str(v["max_concurrency"]) for v in step.bench_params.values())
            lines.append(
                f"  {step.name}: servers [{ks}] x concurrency [{anchors}] x {step.num_runs}"
                f" run(s) -> {step.results_dir}/{step.experiment_name}: {step.purpose}"
            )
        lines += [f"  note: {note}" for note in self.notes]
        return lines


def _json_text(data: Any) -> str:
    return json.dumps(data, indent=2) + "\n"


def tuning_plan(design: SweepDesign, results_dir: str, experiment_name: str) -> SweepPlan:
    """The seed's K x anchor matrix in one sweep."""
    _check(design)
    step = SweepStep(
        name="tuning",
        serve_params=tuning_serve_params(design, design.ks),
        bench_params=bench_params(design, design.anchors),
        num_runs=design.num_runs,
        results_dir=results_dir,
        experiment_name=experiment_name,
        purpose=f"every K in {sorted(design.ks)} at every anchor in {sorted(design.anchors)}",
    )
    notes = [
        f"every server starts with num_speculative_tokens={design.startup_k} and runs K through"
        f" the one-range schedule [[1, {design.deploy_max}, K]] (the seed's design: one engine"
        " configuration for every candidate, K=0 included)",
        f"tune with: tune-spec-k {results_dir}/{experiment_name}",
    ]
    return SweepPlan("tuning", design, (step,), tuple(notes))


def _check(design: SweepDesign) -> None:
    reasons = design.invalid()
    if reasons:
        raise PlanError("; ".join(reasons))


# --------------------------------------------------------------------------- follow-up


@dataclass(frozen=True)
class FollowUpNeeds:
    """Runs still needed per (anchor, K), where they came from, and notes."""

    more_runs: dict[tuple[int, int], int]
    new_anchors: tuple[int, ...]
    global_k: int | None
    ks: tuple[int, ...]
    notes: tuple[str, ...]


def read_json_file(path: str | Path) -> Any:
    source = Path(path)
    try:
        return json.loads(source.read_text(encoding="utf-8"))
    except OSError as error:
        raise PlanError(f"{source}: cannot read the file: {error.strerror or error}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise PlanError(f"{source}: not a JSON file: {error}") from None


def follow_up_needs(files: Sequence[str | Path]) -> FollowUpNeeds:
    """What a follow-up sweep must measure, from a measurement plan (``tune-spec-k DIR
    --plan-json PATH``: reruns and new anchors) and/or a result JSON (``speculative_k_schedule
    .json``: its per-anchor ``confidence`` blocks give the reruns of unresolved anchors; its
    global K and candidate K are checked against the design). With both, the plan's numbers
    are used and the result only supplies the global K."""
    plan_data: dict[str, Any] | None = None
    result_data: dict[str, Any] | None = None
    for path in files:
        data = read_json_file(path)
        if isinstance(data, dict) and "reruns" in data and "new_anchors" in data:
            plan_data = _checked_plan(data, path)
        elif isinstance(data, dict) and "batch_decisions" in data:
            result_data = data
        else:
            raise PlanError(
                f"{path}: neither a measurement plan (keys 'reruns', 'new_anchors': write one"
                " with `tune-spec-k DIR --plan-json PATH`) nor a tuning result (key"
                " 'batch_decisions')"
            )
    more: dict[tuple[int, int], int] = {}
    notes: list[str] = []
    new_anchors: list[int] = []
    ks: set[int] = set()
    global_k = None
    if result_data is not None:
        global_k = _whole_or_none(result_data.get("configured_global_num_speculative_tokens"))
        for decision in _list(result_data, "batch_decisions", files):
            for candidate in decision.get("candidates", []):
                if _whole_or_none(candidate.get("k")) is not None:
                    ks.add(int(candidate["k"]))
    if plan_data is not None:
        for row in plan_data["reruns"]:
            if row["more_runs"] > 0:
                more[(row["batch_size"], row["k"])] = row["more_runs"]
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
    elif result_data is not None:
        more = _reruns_from_blocks(result_data, files)
        notes.append(
            "new anchors are only in the measurement plan: pass the file of `tune-spec-k DIR"
            " --plan-json PATH` too to measure them"
        )
    return FollowUpNeeds(
        more, tuple(sorted(set(new_anchors))), global_k, tuple(sorted(ks)), tuple(notes)
    )


def _checked_plan(data: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """The plan JSON with its rows' types checked (it may be hand-edited)."""
    for key, fields in (
        ("reruns", ("batch_size", "k", "more_runs")),
        ("new_anchors", ("batch_size", "ks", "runs_per_k")),
    ):
        rows = data[key]
        if not isinstance(rows, list):
            raise PlanError(f"{path}: {key!r} is not a list")
        for index, row in enumerate(rows):
            if not isinstance(row, dict):
                raise PlanError(f"{path}: {key}[{index}] is not an object")
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
                    raise PlanError(
                        f"{path}: {key}[{index}].{name} = {json.dumps(value)}: expected"
                        + (" a list of K" if name == "ks" else " a whole number")
                    )
    return data


def _reruns_from_blocks(
    result: dict[str, Any], files: Sequence[str | Path]
) -> dict[tuple[int, int], int]:
    """Reruns from a result's confidence blocks, by ``lib.plan``'s rule: each contender of an
    unresolved anchor up to the runs its noise calls for, at least one more, at most
    MAX_RUNS_NEEDED in all."""
    more: dict[tuple[int, int], int] = {}
    found_block = False
    for decision in _list(result, "batch_decisions", files):
        block = decision.get("confidence")
        if not isinstance(block, dict):
            continue
        found_block = True
        if block.get("status") != "unresolved":
            continue
        anchor = decision["batch_size"]
        runs_of = {c["k"]: c.get("num_runs", 0) for c in decision.get("candidates", [])}
        needed = block.get("runs_needed", {})
        for k in block.get("contenders", []):
            runs = runs_of.get(k, 0)
            wanted = needed.get(str(k)) or MIN_RUNS_NEEDED
            target = min(max(wanted, runs + 1), max(MAX_RUNS_NEEDED, runs))
            if target > runs:
                more[(anchor, k)] = target - runs
    if not found_block:
        raise PlanError(
            f"{files[0]}: the result has no per-anchor 'confidence' blocks (written by"
            " tune-spec-k since the confidence analysis); pass its measurement plan"
            " (`tune-spec-k DIR --plan-json PATH`) instead"
        )
    return more


def _list(data: dict[str, Any], key: str, files: Sequence[str | Path]) -> list[dict[str, Any]]:
    value = data.get(key)
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise PlanError(f"{files[0]}: {key!r} is not a list of objects")
    return value


def _whole_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def follow_up_plan(
    design: SweepDesign, needs: FollowUpNeeds, results_dir: str, experiment_name: str
) -> SweepPlan:
    """Only the cells that need more runs, grouped so that each sweep's serve x bench product
    holds no cell that was not asked for: per K the anchors it needs and the most runs any of
    them needs; K with the same anchors and runs share a sweep (one server start each)."""
    _check(design)
    if needs.global_k is not None and needs.global_k != design.startup_k:
        raise PlanError(
            f"the first sweep ran with num_speculative_tokens={needs.global_k} but this design"
            f" gives {design.startup_k}: the follow-up must use the same engine to merge (set"
            f" --global-k {needs.global_k})"
        )
    unknown = sorted({k for _, k in needs.more_runs} - set(design.ks) - set(needs.ks))
    if unknown and needs.ks:
        raise PlanError(f"the plan asks for K={unknown}, which the first sweep did not measure")
    too_big = sorted({k for _, k in needs.more_runs if k > design.startup_k})
    if too_big:
        raise PlanError(
            f"the plan asks for K={too_big}, above the design's global K {design.startup_k}"
        )
    if not needs.more_runs:
        return SweepPlan(
            "follow-up",
            design,
            (),
            (*needs.notes, "nothing to measure: every anchor is resolved"),
        )
    per_k: dict[int, dict[int, int]] = {}
    for (anchor, k), runs in sorted(needs.more_runs.items()):
        per_k.setdefault(k, {})[anchor] = runs
    groups: dict[tuple[tuple[int, ...], int], list[int]] = {}
    for k, runs_at in sorted(per_k.items()):
        groups.setdefault((tuple(sorted(runs_at)), max(runs_at.values())), []).append(k)
    steps = []
    for index, ((anchors, runs), ks) in enumerate(
        sorted(groups.items(), key=lambda item: (item[1][0], item[0])), start=1
    ):
        new = [a for a in anchors if a in needs.new_anchors]
        purpose = f"K={ks} at batch sizes {list(anchors)}, {runs} more run(s)"
        if new:
            purpose += f" (new anchor(s) {new})"
        steps.append(
            SweepStep(
                name=f"{experiment_name}-{index}",
                serve_params=tuning_serve_params(design, ks),
                bench_params=bench_params(design, anchors),
                num_runs=runs,
                results_dir=results_dir,
                experiment_name=f"{experiment_name}-{index}",
                purpose=purpose,
            )
        )
    asked = sum(needs.more_runs.values())
    planned = sum(step.runs for step in steps)
    notes = list(needs.notes)
    if planned > asked:
        notes.append(
            f"{planned - asked} run(s) more than asked for: a sweep runs each cell as often as"
            " its most demanding cell (cheaper than another server start)"
        )
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
    return SweepPlan("follow-up", design, tuple(steps), tuple(notes))


# --------------------------------------------------------------------------- validation

DYNAMIC_COMBO = "dynamic"
NO_SPECULATION_COMBO = "no-spec"


def static_combo_name(k: int) -> str:
    return f"static-k{k}"


def validation_plan(
    design: SweepDesign,
    result: Mapping[str, Any],
    results_dir: str,
    experiment_name: str,
    static_ks: Sequence[int] | None = None,
) -> SweepPlan:
    """The tuned schedule (``result``: a tune-spec-k result JSON) as a dynamic server, next to
    static-K servers and a server without speculation, at the result's anchors."""
    config = result.get("speculative_config")
    schedule = result.get("num_speculative_tokens_per_batch_size")
    if not isinstance(config, dict) or not isinstance(schedule, list) or not schedule:
        raise PlanError(
            "the tuning result has no 'speculative_config' with a schedule (expected the JSON"
            " written by tune-spec-k)"
        )
    anchors = sorted(
        {d["batch_size"] for d in result.get("batch_decisions", []) if isinstance(d, dict)}
    )
    if not anchors:
        raise PlanError("the tuning result has no 'batch_decisions': no anchors to validate at")
    dynamic = dict(config)
    if dynamic.get("method") in (None, "<method>"):
        dynamic["method"] = design.method
    for key, designed in (("method", design.method), ("model", design.draft_model)):
        tuned = dynamic.get(key)
        if designed is not None and tuned is not None and tuned != designed:
            flag = "--method" if key == "method" else "--draft-model"
            raise PlanError(
                f"the result was tuned with speculative_config.{key} {tuned!r}, the design has"
                f" {flag} {designed!r}: validate the configuration that was tuned"
            )
    dynamic["num_speculative_tokens_per_batch_size"] = schedule
    shared = {
        key: value
        for key, value in dynamic.items()
        if key not in ("num_speculative_tokens", "num_speculative_tokens_per_batch_size")
    }
    scheduled_ks = sorted({int(k) for _, _, k in schedule if k > 0})
    chosen = (
        sorted(set(static_ks))
        if static_ks is not None
        else sorted({k for k in design.ks if k > 0} | set(scheduled_ks))
    )
    if any(k < 1 for k in chosen):
        raise PlanError(f"--static-ks {chosen}: expected K >= 1 (K=0 is the no-spec server)")
    serve: dict[str, Any] = {DYNAMIC_COMBO: {"speculative_config": dynamic}}
    for k in chosen:
        serve[static_combo_name(k)] = {
            "speculative_config": {**shared, "num_speculative_tokens": k}
        }
    serve[NO_SPECULATION_COMBO] = {}
    validation_design = _with_anchors(design, anchors)
    step = SweepStep(
        name="validation",
        serve_params=serve,
        bench_params=bench_params(validation_design, anchors),
        num_runs=design.num_runs,
        results_dir=results_dir,
        experiment_name=experiment_name,
        purpose=f"the schedule {json.dumps(schedule)} against static K={chosen} and no speculation",
    )
    notes = [
        "static-K servers run num_speculative_tokens=K without a schedule, and K=0 is a server"
        " without speculation: the deployments the schedule replaces, so the check also shows"
        " the Dynamic SD engine's own cost (vLLM issue #49548 measured +6.6% TPOT at"
        " concurrency 2 and +21.6% at 189)",
        f"check with: tune-spec-k check {results_dir}/{experiment_name} --schedule TUNING_JSON",
    ]
    return SweepPlan("validation", validation_design, (step,), tuple(notes))


def _with_anchors(design: SweepDesign, anchors: Sequence[int]) -> SweepDesign:
    return dataclasses.replace(design, anchors=tuple(anchors), max_batch_size=max(anchors))


# --------------------------------------------------------------------------- writing


def write_plan(plan: SweepPlan, plan_dir: str | Path) -> list[Path]:
    """Write every file of the plan under ``plan_dir``; returns the paths written."""
    root = Path(plan_dir)
    written = []
    for relative, text in plan.files(str(plan_dir)).items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if relative == RUN_SCRIPT:
            path.chmod(0o755)
        written.append(path)
    return written
