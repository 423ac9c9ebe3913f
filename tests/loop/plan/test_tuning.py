"""lib/loop/plan/tuning.py: the tuning plan, its sweeps run as vLLM runs them and tuned, and the
committed real samples it planned."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from paths import SAMPLE_SWEEPS
from plan_inputs import servers_per_cell
from vllm_sweep import (
    llama_design,
    parse_sweep_command,
    planned,
    planned_k,
    run_planned_sweeps,
    vllm_apply_to_cmd,
    vllm_read_params,
)

from lib.loop.plan.design import SweepDesign
from lib.loop.plan.sweep_plan import SweepStep
from lib.loop.plan.tuning import RANDOM_TOKENS_NOTE
from lib.loop.plan.write import write_plan
from lib.schedule import Schedule, tune
from lib.settings import Settings
from lib.sweeps import load_experiment


def test_a_sweep_of_the_plan_tunes(tmp_path: Path) -> None:
    """Records made the way the sweep makes them from the planned files load and tune, with
    the planned anchors and K, one global K and the planned runs per cell."""
    plan = planned(llama_design(goodput=("tpot:50",)))
    written, problems = write_plan(plan, tmp_path / "plan")
    assert problems == [] and (tmp_path / "plan" / "run.sh") in written
    (experiment,) = run_planned_sweeps(
        tmp_path / "plan",
        tmp_path,
        lambda serve, bench, _: {"output_throughput": 100.0 + planned_k(serve) + bench["seed"]},
    )
    result = tune(load_experiment(experiment), Settings())
    assert result.ok, [p.describe() for p in result.problems]
    assert sorted(set(result.cells["anchor"].to_list())) == [1, 64, 128, 256]
    assert sorted(set(result.cells["k"].to_list())) == [0, 1, 3, 7]
    assert set(result.cells["num_runs"].to_list()) == {SweepDesign().num_runs}
    assert result.configured_global_k == 7
    # K=7 has the highest throughput everywhere (100 + K + seed).
    assert result.schedule == Schedule(((1, 256, 7),))


def _without_seeds(step: SweepStep) -> tuple[dict[str, Any], dict[str, list[int]]]:
    """A step's bench combos with the repeat's seed taken out: the workloads (each name as
    the plan gives it, less ``-seed<seed>``) and the seeds of each."""
    workloads: dict[str, Any] = {}
    seeds: dict[str, list[int]] = {}
    for name, combo in step.bench_params.items():
        workload = name.removesuffix(f"-seed{combo['seed']}")
        params = {key: value for key, value in combo.items() if key != "seed"}
        assert workloads.setdefault(workload, params) == params, name
        seeds.setdefault(workload, []).append(combo["seed"])
    return workloads, seeds


def _as_run_before_the_seeds(sample: Path, design: SweepDesign) -> None:
    """The committed params are what the plan writes (the model path aside, the machine's),
    but for the repeats: the sample was run before the plan seeded them, one bench combo per
    workload run --num-runs times with one seed; the plan runs the same workloads once per
    seed 0 .. num_runs - 1."""
    step = planned(design).steps[0]
    assert json.loads((sample / "serve_params.json").read_text()) == step.serve_params
    workloads, seeds = _without_seeds(step)
    assert json.loads((sample / "bench_params.json").read_text()) == workloads
    assert set(map(tuple, seeds.values())) == {tuple(range(design.num_runs))}
    command = parse_sweep_command((sample / "command.txt").read_text().strip())
    assert command["--num-runs"] == str(design.num_runs)


def _tiny_ngram_design(**changes: Any) -> SweepDesign:
    """The design of the real CPU samples' plans (scripts/real_cpu_sweep): the tiny model with
    n-gram speculation, 64 input tokens; ``changes`` are each sample's own flags. The model
    path is the machine's, in no params file."""
    speculation = {"prompt_lookup_max": 4, "prompt_lookup_min": 2}
    values: dict[str, Any] = {"model": "MODEL", "method": "ngram", "input_len": 64}
    return SweepDesign(**values, speculative_options=speculation, **changes)


def test_the_real_cpu_sample_was_run_from_this_plan() -> None:
    """The committed real sweep's params are what its script's plan command writes, but for
    the seeded repeats (:func:`_as_run_before_the_seeds`)."""
    sample = SAMPLE_SWEEPS / "real-cpu-tiny-ngram"
    if not (sample / "serve_params.json").is_file():
        pytest.skip(f"{sample} has not been committed yet")
    design = _tiny_ngram_design(
        ks=(0, 1, 2, 3, 5), anchors=(1, 2, 4, 8), output_len=128, num_prompts=48
    )
    _as_run_before_the_seeds(sample, design)


def test_the_real_server_info_sample_was_run_from_this_plan() -> None:
    """The real sweep that saved its servers' configs ran the params this plan writes (but for
    the seeded repeats, :func:`_as_run_before_the_seeds`), the engine setting (max_num_seqs 4,
    above the largest anchor) in every combo; each combo folder holds the config its server
    reported, with that max_num_seqs."""
    sample = SAMPLE_SWEEPS / "real-cpu-server-info"
    if not (sample / "serve_params.json").is_file():
        pytest.skip(f"{sample} has not been committed yet")
    design = _tiny_ngram_design(
        ks=(0, 1, 3), anchors=(1, 2), max_num_seqs=4, output_len=128, num_prompts=16, num_runs=2
    )
    _as_run_before_the_seeds(sample, design)
    for combo in sorted(sample.glob("SERVE--*")):
        saved = json.loads((combo / "server_info.json").read_text())
        assert saved["vllm_config"]["scheduler_config"]["max_num_seqs"] == 4, combo.name


def test_the_real_replica_sample_was_run_from_this_plan() -> None:
    """The committed replicated sweep ran exactly the params its script's plan command writes
    (scripts/real_cpu_sweep/run_replica_sweep.sh): 3 replicas per K in the shuffled blocks,
    every seeded bench combo; every serve combo has a folder per bench combo."""
    sample = SAMPLE_SWEEPS / "real-cpu-replicas"
    if not (sample / "serve_params.json").is_file():
        pytest.skip(f"{sample} has not been committed yet")
    design = _tiny_ngram_design(
        ks=(0, 1, 3), anchors=(1, 4), server_replicas=3, output_len=64, num_prompts=16
    )
    step = planned(design).steps[0]
    assert json.loads((sample / "serve_params.json").read_text()) == step.serve_params
    assert json.loads((sample / "bench_params.json").read_text()) == step.bench_params
    stored = json.loads((sample / "sweep_plan.json").read_text())["design"]
    assert stored["server_replicas"] == 3
    folders = {path.name for path in sample.glob("SERVE--*")}
    assert folders == {
        f"SERVE--{serve}-BENCH--{bench}"
        for serve in step.serve_params
        for bench in step.bench_params
    }


def test_a_context_plan_sweeps_every_prompt_length_and_tunes_into_a_grid(tmp_path: Path) -> None:
    """A bench combo per (anchor, length, seed) with the length as random_input_len; the
    servers get a --max-model-len for the longest prompt and its output; records made from
    the params as the sweep makes them give the tuner a context axis with the planned lengths
    (the seeds are repeats within it)."""
    from lib.context import analyse_contexts
    from lib.context_axis import find_context_axis
    from lib.settings import ContextSettings

    design = llama_design(
        anchors=(1, 64), ks=(0, 3), context_lengths=(4096, 512), input_len=None, output_len=100
    )
    plan = planned(design)
    step = plan.steps[0]
    assert list(step.bench_params) == [
        f"c{anchor}-p{length}-seed{seed}"
        for anchor in (1, 64)
        for length in (512, 4096)
        for seed in range(3)
    ]
    assert step.bench_params["c64-p512-seed2"] == {
        "max_concurrency": 64,
        "num_prompts": 512,
        "random_input_len": 512,
        "seed": 2,
    }
    assert "--max-model-len 4196" in plan.commands("plan")[0]  # 4096 + 100
    assert write_plan(plan, tmp_path / "plan")[1] == []

    def measure(serve: dict[str, Any], bench: dict[str, Any], _: int) -> dict[str, Any]:
        # K=3 pays except at batch 64 with short prompts.
        k = planned_k(serve)
        short_and_busy = bench["max_concurrency"] == 64 and bench["random_input_len"] == 512
        return {"output_throughput": 100.0 + (-k if short_and_busy else k) + bench["seed"] / 10}

    (experiment,) = run_planned_sweeps(tmp_path / "plan", tmp_path, measure)
    sweep = load_experiment(experiment)
    axis, problems = find_context_axis(sweep, ContextSettings())
    assert axis is not None and problems == []
    assert axis.field == "random_input_len"
    assert [point.prompt_tokens for point in axis.points] == [512, 4096]
    # 2 anchors x 2 K x 3 seeds at each length.
    assert [point.num_runs for point in axis.points] == [12, 12]
    grid = analyse_contexts(sweep, axis, Settings()).grid()
    assert {(c["batch_size"], c["prompt_tokens"]): c["selected_k"] for c in grid} == {
        (1, 512): 3,
        (64, 512): 0,
        (1, 4096): 3,
        (64, 4096): 3,
    }


def test_a_random_dataset_plan_says_why_random_tokens_mislead() -> None:
    random_notes = planned(llama_design()).notes
    assert RANDOM_TOKENS_NOTE in random_notes and "1.09-1.15" in RANDOM_TOKENS_NOTE
    sonnet = planned(llama_design(dataset="sonnet", dataset_path="sonnet.txt", input_len=550))
    assert RANDOM_TOKENS_NOTE not in sonnet.notes


def _seeded_effect(serve: dict[str, Any], bench: dict[str, Any], _: int) -> dict[str, Any]:
    """K=3 wins at batch 1 (by 50 %), K=0 at 64 (by 20 %); the seeds 1 % apart."""
    busy = bench["max_concurrency"] > 1
    base = (150.0 if planned_k(serve) else 100.0) * (
        (0.8 if planned_k(serve) else 1.2) if busy else 1
    )
    return {"output_throughput": base * (1 + 0.01 * bench["seed"])}


def test_seeded_repeats_pool_into_one_cell_of_one_server(tmp_path: Path) -> None:
    """A sweep run from the plan's files: every record holds its seed, and the tuner pools an
    (anchor, K)'s seeded bench combos into one cell of --num-runs runs (different bench combos
    of one serve combo are one server: no pooled-servers error), with no context axis."""
    from lib.context_axis import find_context_axis
    from lib.settings import ContextSettings

    plan = planned(llama_design(anchors=(1, 64), ks=(0, 3)))
    assert write_plan(plan, tmp_path / "plan")[1] == []
    (experiment,) = run_planned_sweeps(tmp_path / "plan", tmp_path, _seeded_effect)
    sweep = load_experiment(experiment)
    seeds = sweep.runs.group_by("anchor", "k").agg(pl.col("seed").sort())
    assert {tuple(row) for row in seeds["seed"].to_list()} == {(0, 1, 2)}
    result = tune(sweep, Settings())
    assert result.ok, [p.describe() for p in result.problems]
    assert "pooled-servers" not in {p.rule for p in result.problems}
    assert result.cells.height == 4  # 2 anchors x 2 K, the seeds pooled
    assert set(result.cells["num_runs"].to_list()) == {3}
    assert result.schedule == Schedule(((1, 63, 3), (64, 64, 0)))
    assert find_context_axis(sweep, ContextSettings()) == (None, [])


def test_prompt_lengths_that_differ_only_by_seed_are_no_context_axis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a dataset of real prompts each seed samples prompts of other lengths: the measured
    mean prompt (total_input_tokens / completed) of a cell's runs differs by seed, by more than
    the context tolerance (230 > 1.1 x 180, 290 > 1.1 x 230), while every K at an anchor saw
    the same prompts per seed. Those are repeats of one workload, not a context axis: the
    cells pool, in the CLI too (its loader keeps the seed). Lengths that differ within one
    seed are an axis (tests/test_context.py)."""
    from lib.cli.main import main
    from lib.context_axis import find_context_axis
    from lib.settings import ContextSettings

    design = llama_design(
        anchors=(1, 64), ks=(0, 3), dataset="sharegpt", dataset_path="s.json", input_len=None
    )
    assert write_plan(planned(design), tmp_path / "plan")[1] == []
    lengths = (180, 230, 290)

    def measure(serve: dict[str, Any], bench: dict[str, Any], run: int) -> dict[str, Any]:
        tokens = {"total_input_tokens": bench["num_prompts"] * lengths[bench["seed"]]}
        return {**_seeded_effect(serve, bench, run), **tokens}

    (experiment,) = run_planned_sweeps(tmp_path / "plan", tmp_path, measure)
    sweep = load_experiment(experiment)
    axis, problems = find_context_axis(sweep, ContextSettings())
    assert axis is None
    (note,) = problems
    assert (note.rule, note.field, note.value) == (
        "no-context-axis",
        "total_input_tokens/completed",
        "180, 230, 290",
    )
    assert "only between the repeats' seeds" in note.message
    assert main([str(experiment)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "[[1, 63, 3], [64, 64, 0]]"
    assert "context grid" not in out


def _server_offset(serve: dict[str, Any], bench: dict[str, Any], _: int) -> dict[str, Any]:
    """K=3 wins at batch 1 by 50 %, K=0 at 64 by 20 %; each server 1 % above the last (its
    replica value), the seeds 0.1 % apart."""
    effect = _seeded_effect(serve, bench, 0)["output_throughput"]
    return {"output_throughput": effect * (1 + 0.01 * serve["seed"]) * (1 + 0.001 * bench["seed"])}


def test_a_replicated_sweep_reads_as_cells_of_several_servers(tmp_path: Path) -> None:
    """The R = 3 plan's files run as vLLM runs them (records: serve keys, then bench keys, so
    the bench seed replaces the serve seed; folders named by the combos): the serve command
    gets each replica's --seed, the tuner reads every (anchor, K) as one cell with no
    pooled-servers problem, of 3 servers x 3 runs, and tunes as without replicas."""
    plan = planned(llama_design(anchors=(1, 64), ks=(0, 3), server_replicas=3))
    assert write_plan(plan, tmp_path / "plan")[1] == []
    command = parse_sweep_command((tmp_path / "plan" / "command.txt").read_text().strip())
    for item in vllm_read_params(Path(command["--serve-params"])):
        served = vllm_apply_to_cmd(item, shlex.split(command["--serve-cmd"]))
        assert served[served.index("--seed") + 1] == str(item["seed"])
    (experiment,) = run_planned_sweeps(tmp_path / "plan", tmp_path, _server_offset)
    sweep = load_experiment(experiment)
    assert servers_per_cell(sweep) == {cell: 3 for cell in ((1, 0), (1, 3), (64, 0), (64, 3))}
    # The records' seed is the bench combo's (bench keys win): 0-2 on each of 3 servers.
    seeds = sweep.runs.group_by("anchor", "k").agg(pl.col("seed").sort())
    assert {tuple(row) for row in seeds["seed"].to_list()} == {(0, 0, 0, 1, 1, 1, 2, 2, 2)}
    result = tune(sweep, Settings())
    assert "pooled-servers" not in {p.rule for p in result.problems}
    assert result.ok, [p.describe() for p in result.problems]
    assert set(result.cells["num_runs"].to_list()) == {9}
    assert result.schedule == Schedule(((1, 63, 3), (64, 64, 0)))
