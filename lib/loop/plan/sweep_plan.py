"""A plan: its kind, design, steps (one ``vllm bench sweep serve`` invocation each) and notes,
and the commands it runs: the sweep's, and the serve and bench commands every combo shares."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lib.loop.plan.design import DATASET_LENGTH_FLAGS, SweepDesign
from lib.settings import REPEAT_SEED

__all__ = ["AFTER_BENCH", "BENCH_PARAMS", "RUN_SCRIPT", "SERVE_PARAMS", "SweepPlan", "SweepStep"]

#: The files of a plan that its sweep commands name (the params files of each step, and the
#: script that runs them).
SERVE_PARAMS = "serve_params.json"
BENCH_PARAMS = "bench_params.json"
RUN_SCRIPT = "run.sh"

#: ``--num-runs`` of every sweep: each seeded bench combo is one repeat
#: (:func:`lib.loop.plan.combos.bench_params`).
SWEEP_NUM_RUNS = 1

#: The first argument of ``run.sh`` that runs its after-bench mode
#: (:mod:`lib.loop.plan.run_script`).
AFTER_BENCH = "--after-bench"


@dataclass(frozen=True)
class SweepStep:
    """One ``vllm bench sweep serve`` invocation: its params, runs and output folder. The bench
    combos hold a combo per (workload, seed) (:func:`lib.loop.plan.combos.bench_params`), each
    run once."""

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
    """A plan: its kind, design, steps and notes. :func:`lib.loop.plan.write.plan_files` gives
    every file to write."""

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

    def summary_line(self) -> str:
        runs = sum(step.runs for step in self.steps)
        servers = sum(len(step.serve_params) for step in self.steps)
        return f"{len(self.steps)} sweep(s), {servers} server start(s), {runs} benchmark runs"


def serve_command(design: SweepDesign) -> str:
    """``vllm serve`` with what every combo shares; the combos add ``--speculative-config``."""
    parts = ["vllm", "serve", design.target_model, *_address(design)]
    parts += ["--max-num-seqs", str(design.server_max_num_seqs)]
    if design.context_lengths and design.max_model_len_given is None:
        parts += ["--max-model-len", str(design.max_model_len_needed)]
    return _join(parts, design.serve_args)


def bench_command(design: SweepDesign) -> str:
    """``vllm bench serve`` with the workload; the combos add concurrency, prompt count and the
    repeat's ``--seed``."""
    parts = ["vllm", "bench", "serve", "--model", design.target_model, *_address(design)]
    parts += ["--dataset-name", design.dataset]
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


def _address(design: SweepDesign) -> list[str]:
    """Where the server listens, as ``vllm serve`` and ``vllm bench serve`` take it."""
    return ["--host", design.host, "--port", str(design.port)]


def _join(parts: list[str], extra: str) -> str:
    text = shlex.join(parts)
    return f"{text} {extra.strip()}" if extra.strip() else text
