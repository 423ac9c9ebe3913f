"""lib/loop/plan/sweep_plan.py: a plan's steps, their runs and seeds, the summary and the sweep
command as vLLM applies its combos to it."""

from __future__ import annotations

import json
import shlex

from vllm_sweep import (
    llama_design,
    parse_sweep_command,
    planned,
    vllm_apply_to_cmd,
    vllm_records_params,
)

from lib.loop.plan.write import plan_files


def test_repeats_are_bench_combos_each_with_its_own_seed() -> None:
    """--num-runs N: N bench combos per anchor, ``c<anchor>-seed<r>`` with seed r = 0 .. N-1,
    each run once (the sweep's --num-runs 1), so the runs, the summary and the stored steps
    count N per cell; as the sweep applies a combo, its client command holds --seed r once.
    One run is one seed."""
    for num_runs in (1, 3):
        plan = planned(llama_design(anchors=(1, 64), ks=(0, 3), num_runs=num_runs))
        (step,) = plan.steps
        seeds = tuple(range(num_runs))
        assert list(step.bench_params) == [f"c{a}-seed{r}" for a in (1, 64) for r in seeds]
        assert step.seeds() == {1: seeds, 64: seeds}
        assert step.runs_per_cell == num_runs
        flags = parse_sweep_command(plan.commands("plan")[0])
        assert flags["--num-runs"] == "1"
        for combo in vllm_records_params(step.bench_params):
            client = vllm_apply_to_cmd(combo, shlex.split(flags["--bench-cmd"]))
            assert client.count("--seed") == 1
            assert client[client.index("--seed") + 1] == str(combo["seed"])
        # 2 K x 2 anchors x N runs, one server start per K.
        assert step.runs == 2 * 2 * num_runs
        assert (
            plan.summary_line() == f"1 sweep(s), 2 server start(s), {4 * num_runs} benchmark runs"
        )
        stored = json.loads(plan_files(plan, "plan")["sweep_plan.json"])
        assert stored["steps"][0]["num_runs"] == num_runs
